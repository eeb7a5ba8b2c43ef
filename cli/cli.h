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
int kt_cli_kernel_measure(int argc, char **argv);  /* ktune kernel measure */
int kt_cli_records(int argc, char **argv);
int kt_cli_queue(int argc, char **argv);
int kt_cli_tasks(int argc, char **argv);
int kt_cli_tune(int argc, char **argv);      /* cli_tune.c */
int kt_cli_submit(int argc, char **argv);
int kt_cli_watch(int argc, char **argv);
int kt_cli_status(int argc, char **argv);    /* cli_jobs.c */
int kt_cli_cancel(int argc, char **argv);
int kt_cli_best(int argc, char **argv);
int kt_cli_export(int argc, char **argv);
int kt_cli_build(int argc, char **argv);      /* cli_build.c */
int kt_cli_run(int argc, char **argv);

/* Print "ktune: <message>" for the current kt_err and return 1. */
int kt_cli_fail(const char *what);
/* 2 * nbytes random hex digits (getrandom) and a NUL into out: 0, or KT_EIO
 * with kt_err set. For tokens and SubmitJob request ids. */
int kt_cli_random_hex(char *out, size_t nbytes);
/* An integer option in lo..hi: 0, or 2 after saying "ktune CMD: OPT wants an
 * integer in lo..hi, not 'S'". */
int kt_cli_parse_num(const char *cmd, const char *opt, const char *s, long long lo,
                     long long hi, long long *out);
/* An option's value that must not be empty (a path, an address, a name):
 * 0, or 2 after saying "ktune CMD: OPT needs a value". */
int kt_cli_nonempty(const char *cmd, const char *opt, const char *s);
/* A device key (kt_registry_key_ok): 0, or 2 after saying what one is. */
int kt_cli_check_key(const char *cmd, const char *opt, const char *s);
/* A target name (cpu or cuda, kt_measure_target_parse): 0, or 2 after
 * saying "ktune CMD: unknown OPT 'S' (cpu or cuda)". */
int kt_cli_check_target(const char *cmd, const char *opt, const char *s);
/* The workload key of an option that takes a workload key or a workload's
 * JSON (kt_workload_key_from_arg), malloc'd; NULL after saying
 * "ktune CMD: OPT: why" with the forms expected. */
char *kt_cli_workload_key(const char *cmd, const char *opt, const char *s);

/* ---- The network options (cli_net.c) ------------------------------------------------- */

#include "net/net.h"

#define KT_CLI_MAX_INPUTS 16

/* The network a command works on and how its tasks are extracted. */
typedef struct {
    const char *network, *file, *onnx;
    kt_net_layout_t layout;
    int layout_given;
    int winograd;         /* Winograd alternatives (NHWC): 1 --winograd, -1 --no-winograd,
                             0 the default (on for CPU tasks, kt_cli_net_extract_flags) */
    int batch, seq_len;   /* 0: the default */
    int ninputs;
    kt_net_input_t inputs[KT_CLI_MAX_INPUTS];
} kt_cli_net_t;

/* getopt codes of the network options; other options of a command must not use them. */
enum { KT_CLI_O_NETWORK = 950, KT_CLI_O_NETFILE, KT_CLI_O_ONNX, KT_CLI_O_LAYOUT, KT_CLI_O_BATCH,
       KT_CLI_O_SEQLEN, KT_CLI_O_INPUT, KT_CLI_O_WINOGRAD, KT_CLI_O_NO_WINOGRAD };
#define KT_CLI_NET_OPTIONS                                                                     \
    {"network", required_argument, 0, KT_CLI_O_NETWORK},                                       \
        {"network-file", required_argument, 0, KT_CLI_O_NETFILE},                              \
        {"onnx", required_argument, 0, KT_CLI_O_ONNX},                                         \
        {"layout", required_argument, 0, KT_CLI_O_LAYOUT},                                     \
        {"batch", required_argument, 0, KT_CLI_O_BATCH},                                       \
        {"seq-len", required_argument, 0, KT_CLI_O_SEQLEN},                                    \
        {"input", required_argument, 0, KT_CLI_O_INPUT},                                       \
        {"winograd", no_argument, 0, KT_CLI_O_WINOGRAD},                                      \
        {"no-winograd", no_argument, 0, KT_CLI_O_NO_WINOGRAD}
/* Their --help lines. */
extern const char *const KT_CLI_NET_HELP;

void kt_cli_net_init(kt_cli_net_t *n);
/* Take a network option: 1 taken, 0 not one, 2 a bad value (said on stderr). */
int kt_cli_net_option(const char *cmd, kt_cli_net_t *n, int code, const char *arg);
/* How many of --network, --network-file, --onnx were given. */
int kt_cli_net_given(const kt_cli_net_t *n);
/* Exactly one network and options that apply to it: 0, or 2 after saying why. */
int kt_cli_net_check(const char *cmd, const kt_cli_net_t *n);
/* The network; NULL after printing why. */
kt_net_t *kt_cli_net_load(const char *cmd, const kt_cli_net_t *n);
/* The name, file or model it came from. */
const char *kt_cli_net_source(const kt_cli_net_t *n);
/* The kt_net_extract_ex flags the options ask for. */
int kt_cli_net_extract_flags(const kt_cli_net_t *n, const char *target);

/* ---- Shared by the job commands (cli_jobs.c) ---------------------------------------- */

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "store/store.h"

/* The store read commands use without --tracker. */
#define KT_CLI_DEFAULT_DB "ktune.db"
/* Deadline of one call to a tracker. */
#define KT_CLI_DEFAULT_TIMEOUT_MS 10000

/* Where a command reaches its jobs. */
typedef struct {
    const char *tracker;     /* HOST:PORT, or NULL: the store file */
    const char *token_file;
    const char *tls_ca;
    const char *tls_client_cert;   /* mutual TLS: shown to a tracker that requires one */
    const char *tls_client_key;
    const char *db;
    int db_given;
    int json;
    int timeout_ms;          /* 0: KT_CLI_DEFAULT_TIMEOUT_MS */
} kt_cli_conn_t;

/* The connection options of every command that talks to a tracker or a
 * daemon, as getopt_long entries with the codes below (which other options
 * of a command must not use): --tracker, --token-file, --tls-ca,
 * --tls-client-cert, --tls-client-key, --timeout. */
enum {
    KT_CLI_O_TRACKER = 900,
    KT_CLI_O_TOKEN,
    KT_CLI_O_CA,
    KT_CLI_O_TIMEOUT,
    KT_CLI_O_CLIENT_CERT,
    KT_CLI_O_CLIENT_KEY
};
#define KT_CLI_CONN_OPTIONS                                                                    \
    {"tracker", required_argument, 0, KT_CLI_O_TRACKER},                                       \
        {"token-file", required_argument, 0, KT_CLI_O_TOKEN},                                  \
        {"tls-ca", required_argument, 0, KT_CLI_O_CA},                                         \
        {"tls-client-cert", required_argument, 0, KT_CLI_O_CLIENT_CERT},                       \
        {"tls-client-key", required_argument, 0, KT_CLI_O_CLIENT_KEY},                         \
        {"timeout", required_argument, 0, KT_CLI_O_TIMEOUT}
/* The --help lines of the mutual TLS options, after --tls-ca's. */
#define KT_CLI_MTLS_HELP                                                                       \
    "  --tls-client-cert F   client certificate (PEM) for a tracker that requires one\n"      \
    "                        (mutual TLS); needs --tls-ca and --tls-client-key\n"            \
    "  --tls-client-key F    its private key (PEM)\n"
/* Defaults: the token file from $KT_TOKEN_FILE, the store ./ktune.db, the
 * given timeout (0: KT_CLI_DEFAULT_TIMEOUT_MS). */
void kt_cli_conn_init(kt_cli_conn_t *c, int timeout_ms);
/* Take a connection option (getopt code and argument) into c: 1 taken, 0
 * not a connection option, 2 a bad value (said on stderr). */
int kt_cli_conn_option(const char *cmd, kt_cli_conn_t *c, int code, const char *arg);
/* --db PATH into c (not empty; marks it given): 0, or 2 after saying why. */
int kt_cli_conn_db(const char *cmd, kt_cli_conn_t *c, const char *arg);

/* The TLS files given, checked once the options are parsed (readable PEM,
 * the client key matching its certificate, a client certificate only with
 * --tls-ca): 0, or 2 after printing why. */
int kt_cli_conn_check(const char *cmd, const kt_cli_conn_t *c);
/* A client for c->tracker; NULL after printing why. */
kt_rpc_client_t *kt_cli_connect(const char *cmd, const kt_cli_conn_t *c);
/* Print a failed call's cause (unreachable tracker with its address,
 * UNAUTHENTICATED, unknown job, ...) and return 1. */
int kt_cli_rpc_fail(const char *cmd, const kt_cli_conn_t *c, const kt_rpc_status_t *st);
/* One unary call to the tracker: 0 with *resp (free with
 * protobuf_c_message_free_unpacked), or 1 after printing why. */
int kt_cli_call(const char *cmd, const kt_cli_conn_t *c, const char *method,
                const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **resp);
/* The store at db for reading; NULL after printing why. */
kt_store_t *kt_cli_open_store(const char *cmd, const char *db);
/* A job id >= 1 from text: 0, or 2 after printing why. */
int kt_cli_parse_id(const char *cmd, const char *what, const char *s, int64_t *out);
/* A progress message as JSON (new reference). */
json_t *kt_cli_progress_json(const Ktune__V1__JobProgress *p);
/* Print j indented (consumes the reference); 0 or 1. */
int kt_cli_print_json(json_t *j);
/* The task scheduler table and a one-line progress bar. */
void kt_cli_print_progress(const Ktune__V1__JobProgress *p, FILE *out);
/* Per task: best latency, speed, trials, weight, workload key. */
void kt_cli_print_best_summary(const Ktune__V1__JobProgress *p, FILE *out);

/* A job for another command (build --transfer with a tracker; cli_tune.c):
 * submits the n tasks (wl, weight, desc: the layers each stands for, or
 * NULL) on target and runner key with `trials` trials per task, one round
 * each, so every task's round is its transfer seeds and the store model's
 * picks, measured and checked on the tracker's workers and runners; then
 * follows it, the progress on stderr. 0 with *job_id once the job is done;
 * 1 after saying why (unreachable tracker, a job failed or cancelled). */
int kt_cli_run_job(const char *cmd, const kt_cli_conn_t *c, const kt_workload_t *const *wl,
                   const double *weight, char *const *desc, int n, const char *target,
                   const char *key, int trials, int64_t *job_id);

#endif
