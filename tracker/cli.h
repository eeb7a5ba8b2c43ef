/*
 * The ktune client CLI: one entry point per command group, each in its own
 * cli_<group>.c. A command returns the process exit status: 0 success, 1 the
 * operation failed (message printed), 2 bad usage.
 */
#ifndef KT_CLI_H
#define KT_CLI_H

typedef struct {
    const char *name;   /* "kernel" */
    const char *summary;
    int (*run)(int argc, char **argv);  /* argv[0] is the command name */
} kt_cli_cmd_t;

/* Command groups (defined in cli_<group>.c). */
int kt_cli_health(int argc, char **argv);
int kt_cli_kernel(int argc, char **argv);
int kt_cli_records(int argc, char **argv);
int kt_cli_queue(int argc, char **argv);
int kt_cli_tasks(int argc, char **argv);

/* Print "ktune: <message>" for the current kt_err and return 1. */
int kt_cli_fail(const char *what);

#endif
