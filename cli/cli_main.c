/* ktune: the client CLI. Dispatches to the command groups in cli_<group>.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cli.h"
#include "kt_config.h"
#include "measure/measure.h"
#include "registry/registry.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/log.h"

/* Registered command groups; a group is listed once its cli_<group>.c exists. */
static const kt_cli_cmd_t commands[] = {
    {"health", "ask a tracker, runner or worker whether it is serving", kt_cli_health},
    {"records", "export, import and count measurement records", kt_cli_records},
    {"queue", "show a tracker's runners, workers and queues", kt_cli_queue},
    {"tasks", "extract a network's tuning tasks and weights", kt_cli_tasks},
    {"kernel", "sample schedules of a workload, show and verify their C kernels", kt_cli_kernel},
    {"tune", "tune a network or workloads (own local tracker unless --tracker)", kt_cli_tune},
    {"submit", "submit a tuning job to a tracker and print its id", kt_cli_submit},
    {"watch", "follow a job's progress table until it ends", kt_cli_watch},
    {"status", "show jobs, or one job's table (tracker or store file)", kt_cli_status},
    {"cancel", "cancel a job on a tracker", kt_cli_cancel},
    {"best", "the best records of a workload or of a job's tasks", kt_cli_best},
    {"export", "write a job's best kernels as C, or its records as JSON", kt_cli_export},
    {"build", "build a tuned network as a C library (kernels, runner, weights)", kt_cli_build},
    {"run", "build, run and time a tuned network; --check it against the reference", kt_cli_run},
    {NULL, NULL, NULL},
};

int kt_cli_fail(const char *what)
{
    if (what && *what)
        fprintf(stderr, "ktune: %s: %s\n", what, kt_err_msg());
    else
        fprintf(stderr, "ktune: %s\n", kt_err_msg());
    return 1;
}

int kt_cli_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof raw)
        return kt_err_set(KT_EINVAL, "random hex: %zu bytes; at most %zu", nbytes, sizeof raw);
    if (getrandom(raw, nbytes, 0) != (ssize_t)nbytes)
        return kt_err_set(KT_EIO, "no random bytes: %s", strerror(errno));
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    out[2 * nbytes] = '\0';
    return 0;
}

int kt_cli_parse_num(const char *cmd, const char *opt, const char *s, long long lo,
                     long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !end || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ktune %s: %s wants an integer in %lld..%lld, not '%s'\n", cmd, opt, lo,
                hi, s);
        return 2;
    }
    *out = v;
    return 0;
}

int kt_cli_nonempty(const char *cmd, const char *opt, const char *s)
{
    if (s && *s)
        return 0;
    fprintf(stderr, "ktune %s: %s needs a value\n", cmd, opt);
    return 2;
}

int kt_cli_check_target(const char *cmd, const char *opt, const char *s)
{
    if (kt_measure_target_parse(s, NULL) == 0)
        return 0;
    fprintf(stderr, "ktune %s: unknown %s '%s' (cpu or cuda)\n", cmd, opt, s ? s : "");
    return 2;
}

int kt_cli_check_key(const char *cmd, const char *opt, const char *s)
{
    /* The tracker checks it too; an empty key would read as "the default". */
    if (kt_registry_key_ok(s))
        return 0;
    fprintf(stderr, "ktune %s: %s '%s': a device key is letters, digits and ._:- (ktune queue "
                    "lists the runners' keys)\n", cmd, opt, s ? s : "");
    return 2;
}

char *kt_cli_workload_key(const char *cmd, const char *opt, const char *s)
{
    char *key = NULL;
    if (kt_workload_key_from_arg(s, &key) != 0)
        fprintf(stderr, "ktune %s: %s: %s\n", cmd, opt, kt_err_msg());
    return key;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: ktune [--version] [--help] <command> [args]\n\ncommands:\n");
    for (const kt_cli_cmd_t *c = commands; c->name; c++)
        fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fprintf(out, "\nRun 'ktune <command> --help' for a command's options.\n"
                 "\nexit status: 0 success; 1 the operation failed (the message on stderr names\n"
                 "the cause); 2 bad usage\n");
}

int main(int argc, char **argv)
{
    kt_log_set_name("ktune");
    if (kt_log_init_from_env() != 0)
        return kt_cli_fail(NULL);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("ktune %s\n", KT_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (const kt_cli_cmd_t *c = commands; c->name; c++)
        if (strcmp(argv[1], c->name) == 0)
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "ktune: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
