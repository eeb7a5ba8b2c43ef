/* ktune build and ktune run: a tuned network as a C library, run and timed. */
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "measure/cuda_runner.h"
#include "measure/hw_params.h"
#include "measure/measure.h"
#include "measure/nvrtc.h"
#include "net/plan.h"
#include "runtime/netlib.h"
#include "sched/state.h"
#include "tensorio/tensorio.h"
#include "te/workload.h"
#include "transfer/transfer.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

/* Tolerance of --check: what kernels are verified with while tuning. */
#define CHECK_TOLERANCE 1e-4
/* Steps listed in run's time table. */
#define TOP_STEPS 10

enum { O_DB = 1000, O_JOB, O_TARGET, O_ARCH, O_OUT, O_SEED, O_NAME, O_IN, O_OUTPUT, O_REPEAT,
       O_THREADS, O_CHECK, O_TRANSFER, O_TRANSFER_TRIALS, O_KEY, O_HELP };

/* --transfer-trials: candidates a zero-shot build times per task (the
 * transfer seeds' default count, search.md's `transfer`). */
#define TRANSFER_TRIALS KT_TRANSFER_FILL_TRIALS

typedef struct {
    kt_cli_net_t net;
    kt_cli_conn_t conn;
    int64_t job;
    const char *target, *arch, *out, *name, *output;
    const char *key;           /* --key: records of runners of this device key only */
    const char *input[KT_PLAN_MAX_INPUTS];   /* --input FILE or NAME=FILE, in order */
    int ninput;
    unsigned long long seed;
    int repeat, threads, check, transfer, transfer_trials;
} build_args_t;

static const char *const BUILD_HELP =
    "  --db PATH             the store to take records from (default ./ktune.db; a\n"
    "                        missing default store means no records)\n"
    "  --tracker HOST:PORT   take the records from a tracker instead (QueryBest);\n"
    "                        --token-file F, --tls-ca F, --tls-client-cert F,\n"
    "                        --tls-client-key F, --timeout MS as elsewhere\n"
    "  --job J               only records measured by job J\n"
    "  --target cpu|cuda     the target (default cpu); cuda writes NAME.cu (and\n"
    "                        NAME.cubin), NAME_host.c (Driver API) with the GPU\n"
    "                        records of each task, a seeded default GPU schedule\n"
    "                        otherwise\n"
    "  --arch sm_XY          the GPU architecture of --target cuda (default sm_90)\n"
    "  --key K               only records measured by runners of device key K (default:\n"
    "                        any key)\n"
    "  --seed S              seed of a built-in network's random weights (default 0)\n"
    "  --name NAME           the C prefix of the library (default: the network's name)\n"
    "  --transfer            a task without a record gets the fastest of the states of\n"
    "                        the nearest stored workloads (same operator, other shapes)\n"
    "                        re-fitted to it and the store model's picks, each checked\n"
    "                        against the reference and timed: with --db here (CPU),\n"
    "                        with --tracker by a job on the tracker's workers and\n"
    "                        runners of --key (default: the target's name)\n"
    "  --transfer-trials N   candidates timed per task (default 8, at most 64)\n";

static void build_usage(FILE *f)
{
    fprintf(f, "usage: ktune build (--network NAME | --network-file F | --onnx MODEL)\n"
               "                   [--layout NHWC|NCHW] [--batch N] [--db PATH | --tracker ADDR]\n"
               "                   [--job J] [--target cpu|cuda] [--arch sm_XY] [--key K]\n"
               "                   [--seed S] [--name NAME] [--transfer] --out DIR\n"
               "\n"
               "Build the network with the best valid record of each of its tasks as a C\n"
               "library: DIR/NAME.c (kernels and a graph runner on one arena), DIR/NAME.h\n"
               "(create, run, destroy; shapes; the build line) and DIR/NAME.safetensors (the\n"
               "weights, batch norm folded and laid out for the kernels: an ONNX model's own,\n"
               "random ones from --seed for built-in networks and network files). A task\n"
               "without a record runs ktune's naive reference kernel, with a warning.\n"
               "\n"
               "options:\n%s%s  -h, --help            print this help and exit\n"
               "\n"
               "exit status: 0 success; 1 failure (unsupported layer, unreadable store, ...);\n"
               "2 bad usage\n",
            KT_CLI_NET_HELP, BUILD_HELP);
}

static void run_usage(FILE *f)
{
    fprintf(f, "usage: ktune run (--network NAME | --network-file F | --onnx MODEL) [build\n"
               "                 options] [--input x.npy] [--output y.npy] [--repeat N]\n"
               "                 [--threads N] [--check] [--out DIR]\n"
               "\n"
               "Build the network as ktune build does (into a temporary directory unless\n"
               "--out), compile and run it: a per-layer time table (the %d slowest steps,\n"
               "each beside its task's record cost as tuned), the tuned steps' time\n"
               "against the sum of their records' costs (the tuner's estimate, timed\n"
               "with the tuning job's threads and cache conditions) and, last,\n"
               "'latency: M ms (min A, max B) over N runs, T threads' (M the median).\n"
               "\n"
               "options:\n%s%s"
               "  --out DIR             keep the library in DIR\n"
               "  --input x.npy         the input (float32, the model's input shape; integers\n"
               "                        for an integer input such as token ids; default:\n"
               "                        uniform in [-1, 1) from --seed); a network of several\n"
               "                        inputs takes one --input NAME=FILE.npy each; an\n"
               "                        --input NAME=DIMS that names no file is an ONNX\n"
               "                        input's shape\n"
               "  --output y.npy        write the output there\n"
               "  --repeat N            timed runs (default 20), after one warm-up run\n"
               "  --threads N           OpenMP threads (default 1)\n"
               "  --check               also run ktune's naive reference kernel of every task\n"
               "                        on the same inputs and print the largest relative\n"
               "                        error (fails above %g)\n"
               "  -h, --help            print this help and exit\n"
               "\n"
               "exit status: 0 success; 1 failure (bad input file, a failed check, ...); 2 bad\n"
               "usage\n",
            TOP_STEPS, KT_CLI_NET_HELP, BUILD_HELP, CHECK_TOLERANCE);
}

static int is_cuda(const build_args_t *a) { return a->target && strcmp(a->target, "cuda") == 0; }

static const char *target_of(const build_args_t *a) { return a->target ? a->target : "cpu"; }

static int is_shape_spec(const char *arg)
{
    kt_net_input_t spec;
    return strchr(arg, '=') && access(arg, F_OK) != 0 && kt_net_parse_input_spec(arg, &spec) == 0;
}

/* 0, 2 (bad usage, said), or -1 for --help. */
static int parse_args(const char *cmd, int run, int argc, char **argv, build_args_t *a)
{
    static const struct option opts[] = {
        KT_CLI_NET_OPTIONS,
        KT_CLI_CONN_OPTIONS,
        {"db", required_argument, 0, O_DB},
        {"job", required_argument, 0, O_JOB},
        {"target", required_argument, 0, O_TARGET},
        {"arch", required_argument, 0, O_ARCH},
        {"out", required_argument, 0, O_OUT},
        {"seed", required_argument, 0, O_SEED},
        {"name", required_argument, 0, O_NAME},
        {"input", required_argument, 0, O_IN},
        {"output", required_argument, 0, O_OUTPUT},
        {"repeat", required_argument, 0, O_REPEAT},
        {"threads", required_argument, 0, O_THREADS},
        {"check", no_argument, 0, O_CHECK},
        {"transfer", no_argument, 0, O_TRANSFER},
        {"transfer-trials", required_argument, 0, O_TRANSFER_TRIALS},
        {"key", required_argument, 0, O_KEY},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    kt_cli_net_init(&a->net);
    kt_cli_conn_init(&a->conn, 0);
    a->repeat = 20;
    a->threads = 1;
    optind = 1;
    opterr = 0;
    int c;
    long long v;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        /* --input is an ONNX input's shape for build; for run it is the input
         * tensor, unless it names no file and reads as NAME=DIMS (a shape). */
        if (c == KT_CLI_O_INPUT && run && !is_shape_spec(optarg))
            c = O_IN;
        int taken = kt_cli_net_option(cmd, &a->net, c, optarg);
        if (!taken)
            taken = kt_cli_conn_option(cmd, &a->conn, c, optarg);
        if (taken == 2)
            return 2;
        if (taken)
            continue;
        int runonly = c == O_IN || c == O_OUTPUT || c == O_REPEAT || c == O_THREADS || c == O_CHECK;
        if (runonly && !run) {
            fprintf(stderr, "ktune %s: %s is an option of ktune run\n", cmd, argv[optind - 1]);
            return 2;
        }
        switch (c) {
        case O_DB:
            if (kt_cli_conn_db(cmd, &a->conn, optarg))
                return 2;
            break;
        case O_JOB:
            if (kt_cli_parse_id(cmd, "--job", optarg, &a->job))
                return 2;
            break;
        case O_TARGET: a->target = optarg; break;
        /* An empty one would read as "not given" (a temporary --out, the default name). */
        case O_ARCH:
            if (kt_cli_nonempty(cmd, "--arch", optarg))
                return 2;
            a->arch = optarg;
            break;
        case O_OUT:
            if (kt_cli_nonempty(cmd, "--out", optarg))
                return 2;
            a->out = optarg;
            break;
        case O_NAME:
            if (kt_cli_nonempty(cmd, "--name", optarg))
                return 2;
            /* The name prefixes every entry point of the library: it must
             * be a C identifier as given, not silently rewritten. */
            if (!((optarg[0] >= 'a' && optarg[0] <= 'z') || (optarg[0] >= 'A' && optarg[0] <= 'Z') ||
                  optarg[0] == '_') ||
                optarg[strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789_")] != '\0') {
                fprintf(stderr,
                        "ktune %s: --name: '%s' is not a C identifier (letters, digits and _, "
                        "not starting with a digit)\n",
                        cmd, optarg);
                return 2;
            }
            a->name = optarg;
            break;
        case O_OUTPUT:
            if (kt_cli_nonempty(cmd, "--output", optarg))
                return 2;
            a->output = optarg;
            break;
        case O_IN:
            if (a->ninput == KT_PLAN_MAX_INPUTS) {
                fprintf(stderr, "ktune %s: at most %d --input files\n", cmd, KT_PLAN_MAX_INPUTS);
                return 2;
            }
            a->input[a->ninput++] = optarg;
            break;
        case O_CHECK: a->check = 1; break;
        case O_TRANSFER: a->transfer = 1; break;
        case O_TRANSFER_TRIALS:
            if (kt_cli_parse_num(cmd, "--transfer-trials", optarg, 1, 64, &v))
                return 2;
            a->transfer_trials = (int)v;
            break;
        case O_KEY:
            if (kt_cli_check_key(cmd, "--key", optarg))
                return 2;
            a->key = optarg;
            break;
        case O_SEED:
            if (kt_cli_parse_num(cmd, "--seed", optarg, 0, INT64_MAX, &v))
                return 2;
            a->seed = (unsigned long long)v;
            break;
        case O_REPEAT:
            if (kt_cli_parse_num(cmd, "--repeat", optarg, 1, 100000, &v))
                return 2;
            a->repeat = (int)v;
            break;
        case O_THREADS:
            if (kt_cli_parse_num(cmd, "--threads", optarg, 1, 1024, &v))
                return 2;
            a->threads = (int)v;
            break;
        case 'h':
        case O_HELP: return -1;
        default:
            fprintf(stderr, "ktune %s: bad option '%s' (see ktune %s --help)\n", cmd,
                    argv[optind - 1], cmd);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ktune %s: unexpected argument '%s'\n", cmd, argv[optind]);
        return 2;
    }
    if (kt_cli_net_check(cmd, &a->net) || kt_cli_conn_check(cmd, &a->conn))
        return 2;
    if (a->target && strcmp(a->target, "cpu") != 0 && strcmp(a->target, "cuda") != 0) {
        fprintf(stderr, "ktune %s: unknown --target '%s' (cpu or cuda)\n", cmd, a->target);
        return 2;
    }
    if (a->arch && !is_cuda(a)) {
        fprintf(stderr, "ktune %s: --arch needs --target cuda\n", cmd);
        return 2;
    }
    kt_hw_params_t hw;
    /* Said before the network is loaded and built, not after. */
    if (a->arch && kt_hw_params_preset(a->arch, &hw) != 0) {
        fprintf(stderr, "ktune %s: --arch: %s\n", cmd, kt_err_msg());
        return 2;
    }
    if (is_cuda(a) && a->check) {
        fprintf(stderr, "ktune %s: --check runs the CPU build's reference kernels; it does not "
                        "apply to --target cuda\n", cmd);
        return 2;
    }
    if (!run && !a->out) {
        fprintf(stderr, "ktune %s: --out DIR is required\n", cmd);
        return 2;
    }
    if (a->conn.tracker && a->conn.db_given) {
        fprintf(stderr, "ktune %s: give --db or --tracker, not both\n", cmd);
        return 2;
    }
    if (a->transfer && a->job) {
        fprintf(stderr, "ktune %s: --transfer builds the tasks without a record: not with "
                        "--job\n", cmd);
        return 2;
    }
    if (a->transfer && is_cuda(a) && !a->conn.tracker) {
        fprintf(stderr, "ktune %s: --transfer --target cuda checks its kernels on a GPU "
                        "runner: give --tracker\n", cmd);
        return 2;
    }
    if (a->transfer_trials && !a->transfer) {
        fprintf(stderr, "ktune %s: --transfer-trials is the candidates --transfer times per "
                        "task: give --transfer\n", cmd);
        return 2;
    }
    if (a->key && a->job) {
        fprintf(stderr, "ktune %s: --job takes that job's records, measured on its own runner "
                        "key: not with --key\n", cmd);
        return 2;
    }
    return 0;
}

/* ---- records ------------------------------------------------------------------------ */

/* --transfer: the tasks without a record (an alternative's direct task
 * speaks for it) get a checked re-fitted kernel; each says where its
 * kernel comes from. 0 or negative. */
static int transfer_tasks(kt_store_t *s, const kt_net_tasks_t *t, const build_args_t *a,
                          char **states, double *ms, char **origin)
{
    const kt_workload_t **wl = calloc((size_t)t->ntasks + 1, sizeof *wl);
    int *skip = calloc((size_t)t->ntasks + 1, sizeof *skip), rc = 0;
    for (int i = 0; wl && skip && i < t->ntasks; i++) {
        wl[i] = t->tasks[i].wl;
        skip[i] = t->tasks[i].alt_of >= 0;
    }
    rc = wl && skip ? kt_transfer_fill(s, wl, skip, t->ntasks, "cpu", a->key, NULL,
                                       a->transfer_trials, states, origin, ms)
                    : kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = 0; rc >= 0 && i < t->ntasks; i++)
        if (states[i] || origin[i])
            fprintf(stderr, "task %d (%s %s): %s\n", i, kt_workload_op(t->tasks[i].wl),
                    t->tasks[i].desc, origin[i] ? origin[i] : "its own record");
    free(wl);
    free(skip);
    return rc < 0 ? rc : 0;
}

/* --job names a job, of the target built for, in the store or on the
 * tracker: else no record would match and every task would quietly get the
 * default schedule. Checked before the network is loaded. 0, or 1 after
 * saying why. */
static int check_job(const char *cmd, const build_args_t *a)
{
    if (!a->job)
        return 0;
    char job_target[32] = "";
    if (a->conn.tracker) {
        Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
        ref.job_id = a->job;
        ProtobufCMessage *resp = NULL;
        if (kt_cli_call(cmd, &a->conn, "/ktune.v1.Tracker/JobStatus", &ref.base,
                        &ktune__v1__job_progress__descriptor, &resp))
            return 1;
        const char *t = ((Ktune__V1__JobProgress *)resp)->target;
        snprintf(job_target, sizeof job_target, "%s", t ? t : "");
        protobuf_c_message_free_unpacked(resp, NULL);
    } else {
        kt_store_t *s = kt_cli_open_store(cmd, a->conn.db);
        if (!s)
            return 1;
        kt_store_job_info_t *info = NULL;
        int rc = kt_store_get_job(s, a->job, &info);
        if (rc == 0)
            snprintf(job_target, sizeof job_target, "%s", info->job.target);
        kt_store_job_info_free(info);
        kt_store_close(s);
        if (rc == KT_ENOTFOUND) {
            fprintf(stderr, "ktune %s: --job: no job %" PRId64 " in %s\n", cmd, a->job,
                    a->conn.db);
            return 1;
        }
        if (rc != 0)
            return kt_cli_fail(cmd);
    }
    const char *tuned = job_target[0] ? job_target : "cpu";
    if (strcmp(tuned, target_of(a)) == 0)
        return 0;
    fprintf(stderr, "ktune %s: --job: job %" PRId64 " tuned for %s, not %s (give --target %s)\n",
            cmd, a->job, tuned, target_of(a), tuned);
    return 1;
}

/* The best valid record of each task: states[i] (strdup'd, NULL when none)
 * and its cost in ms; with --transfer, origin[i] for the tasks re-fitted.
 * 0, or 1 after printing why. */
static int gather_store(const char *cmd, const build_args_t *a, const kt_net_tasks_t *t,
                        char **states, double *ms, char **origin)
{
    if (!a->conn.db_given && !a->job && access(a->conn.db, F_OK) != 0) {
        fprintf(stderr, "ktune %s: no store at %s: every task gets the default schedule\n", cmd,
                a->conn.db);
        return 0;
    }
    kt_store_t *s = kt_cli_open_store(cmd, a->conn.db);
    if (!s)
        return 1;
    int rc = 0;
    for (int i = 0; i < t->ntasks && rc == 0; i++) {
        kt_record_list_t *l = NULL;
        const char *key = kt_workload_key(t->tasks[i].wl);
        if (a->job) {
            kt_store_filter_t f = {.workload_key = key, .target = target_of(a),
                                   .job_id = a->job, .valid_only = 1};
            rc = kt_store_get_records(s, &f, &l);
        } else {
            rc = kt_store_top_k_key(s, key, target_of(a), a->key, 1, &l);
        }
        const kt_record_t *best = NULL;
        for (size_t k = 0; l && k < l->n; k++)
            if (!best || l->items[k].mean_cost < best->mean_cost)
                best = &l->items[k];
        if (best) {
            states[i] = kt_strdup(best->state_json);
            ms[i] = best->mean_cost * 1e3;
            if (!states[i])
                rc = kt_err_set(KT_ENOMEM, "out of memory");
        }
        kt_record_list_free(l);
    }
    if (rc == 0 && a->transfer)
        rc = transfer_tasks(s, t, a, states, ms, origin);
    kt_store_close(s);
    return rc ? kt_cli_fail(cmd) : 0;
}

/* The fastest valid record job `job` (0: any) measured of workload `key`
 * on the tracker: its state into *state (malloc'd; NULL when none), its
 * cost into *ms and its origin's name into origin (optional); why
 * (optional) gets the first failed record's error ("" when none failed).
 * 0, or 1 after printing why. */
static int list_best(const char *cmd, const build_args_t *a, kt_rpc_client_t *cl,
                     const char *key, int64_t job, char **state, double *ms, char *origin,
                     size_t originlen, char *why, size_t whylen)
{
    Ktune__V1__ListRecordsRequest req = KTUNE__V1__LIST_RECORDS_REQUEST__INIT;
    req.workload_key = (char *)key;
    req.target = (char *)target_of(a);
    req.job_id = job;
    /* With `why`, the failed records too: the first says why, should none be valid. */
    req.valid_only = why == NULL;
    if (why && whylen)
        why[0] = '\0';
    kt_rpc_reader_t *rd = kt_rpc_reader_open(cl, "/ktune.v1.Tracker/ListRecords", &req.base,
                                             &ktune__v1__record__descriptor,
                                             a->conn.timeout_ms ? a->conn.timeout_ms
                                                                : KT_CLI_DEFAULT_TIMEOUT_MS);
    if (!rd)
        return kt_cli_fail(cmd);
    ProtobufCMessage *msg = NULL;
    int r, rc = 0;
    double best = INFINITY;
    while ((r = kt_rpc_reader_next(rd, &msg)) == 1) {
        Ktune__V1__Record *rec = (Ktune__V1__Record *)msg;
        if (rec->error_code != KTUNE__V1__MEASURE_ERROR__NO_ERROR) {
            if (why && whylen && !why[0]) {
                snprintf(why, whylen, "%s: %s", kt_measure_error_name(rec->error_code),
                         rec->error_msg && *rec->error_msg ? rec->error_msg : "no message");
                /* one line: a compiler's output ends lines of its own */
                size_t n = strlen(why);
                while (n && isspace((unsigned char)why[n - 1]))
                    why[--n] = '\0';
                for (char *c = why; *c; c++)
                    if (*c == '\n')
                        *c = ' ';
            }
        } else if (rec->mean_cost < best && rc == 0) {
            free(*state);
            if (!(*state = kt_strdup(rec->state_json)))
                rc = kt_cli_fail(cmd);
            best = rec->mean_cost;
            *ms = best * 1e3;
            if (origin)
                snprintf(origin, originlen, "%s", rec->origin ? rec->origin : "");
        }
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    kt_rpc_status_t st = {0};
    if (kt_rpc_reader_close(rd, &st) != 0 || r < 0)
        return kt_cli_rpc_fail(cmd, &a->conn, &st);
    return rc;
}

/* --transfer with a tracker: the direct tasks still without a record
 * become a job of a->transfer_trials per task, whose one round is each
 * task's re-fitted states and the store model's picks, built and checked
 * on the tracker's workers and runners of the key; each such task then
 * takes that job's fastest valid record. 0, or 1 after printing why. */
static int transfer_job(const char *cmd, const build_args_t *a, kt_rpc_client_t *cl,
                        const kt_net_tasks_t *t, char **states, double *ms, char **origin)
{
    int n = 0, trials = a->transfer_trials ? a->transfer_trials : TRANSFER_TRIALS;
    const kt_workload_t **wl = calloc((size_t)t->ntasks + 1, sizeof *wl);
    double *weight = calloc((size_t)t->ntasks + 1, sizeof *weight);
    char **desc = calloc((size_t)t->ntasks + 1, sizeof *desc);
    int *idx = calloc((size_t)t->ntasks + 1, sizeof *idx);
    int rc = 0;
    if (!wl || !weight || !desc || !idx) {
        kt_err_set(KT_ENOMEM, "out of memory");
        rc = kt_cli_fail(cmd);
    }
    for (int i = 0; rc == 0 && i < t->ntasks; i++) {
        /* A Winograd alternative is left to its direct task, as with --db. */
        if (states[i] || t->tasks[i].alt_of >= 0)
            continue;
        wl[n] = t->tasks[i].wl;
        weight[n] = t->tasks[i].weight;
        desc[n] = t->tasks[i].desc;
        idx[n++] = i;
    }
    int64_t job = 0;
    const char *key = a->key ? a->key : target_of(a);
    if (rc == 0 && n > 0) {
        fprintf(stderr, "ktune %s: %d task%s without a record: a zero-shot job of %d trials per "
                        "task on runner key %s\n", cmd, n, n == 1 ? "" : "s", trials, key);
        rc = kt_cli_run_job(cmd, &a->conn, wl, weight, desc, n, target_of(a), key, trials, &job);
    }
    for (int j = 0; rc == 0 && j < n; j++) {
        int i = idx[j];
        char from[64] = "", why[300], text[700];
        if ((rc = list_best(cmd, a, cl, kt_workload_key(wl[j]), job, &states[i], &ms[i], from,
                            sizeof from, why, sizeof why)))
            break;
        if (states[i])
            snprintf(text, sizeof text,
                     "measured by zero-shot job %" PRId64 " on runner key %s: its fastest of "
                     "%d candidates (%.4f ms, origin %s), checked against the reference",
                     job, key, trials, ms[i], from[0] ? from : "unknown");
        else
            snprintf(text, sizeof text,
                     "zero-shot job %" PRId64 " on runner key %s measured no valid candidate of "
                     "%d (%s)", job, key, trials, why[0] ? why : "none was proposed");
        if (!(origin[i] = kt_strdup(text))) {
            rc = kt_cli_fail(cmd);
            break;
        }
        fprintf(stderr, "task %d (%s %s): %s\n", i, kt_workload_op(wl[j]), t->tasks[i].desc,
                text);
    }
    free(wl);
    free(weight);
    free(desc);
    free(idx);
    return rc;
}

static int gather_tracker(const char *cmd, const build_args_t *a, const kt_net_tasks_t *t,
                          char **states, double *ms, char **origin)
{
    kt_rpc_client_t *cl = a->job || a->transfer ? kt_cli_connect(cmd, &a->conn) : NULL;
    if ((a->job || a->transfer) && !cl)
        return 1;
    int rc = 0;
    for (int i = 0; i < t->ntasks && rc == 0; i++) {
        const char *key = kt_workload_key(t->tasks[i].wl);
        if (!a->job) {
            Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
            req.workload_key = (char *)key;
            req.target = (char *)target_of(a);
            req.top_k = 1;
            req.runner_key = (char *)(a->key ? a->key : "");
            ProtobufCMessage *resp = NULL;
            if (kt_cli_call(cmd, &a->conn, "/ktune.v1.Tracker/QueryBest", &req.base,
                            &ktune__v1__query_best_response__descriptor, &resp)) {
                rc = 1;
                break;
            }
            Ktune__V1__QueryBestResponse *r = (Ktune__V1__QueryBestResponse *)resp;
            if (r->n_records) {
                states[i] = kt_strdup(r->records[0]->state_json);
                ms[i] = r->records[0]->mean_cost * 1e3;
            }
            protobuf_c_message_free_unpacked(resp, NULL);
            continue;
        }
        /* The records of one job: ListRecords, the fastest kept. */
        rc = list_best(cmd, a, cl, key, a->job, &states[i], &ms[i], NULL, 0, NULL, 0);
    }
    if (rc == 0 && a->transfer)
        rc = transfer_job(cmd, a, cl, t, states, ms, origin);
    kt_rpc_client_free(cl);
    return rc;
}

/* ---- building ------------------------------------------------------------------------ */

/* Build the network into dir; the library's C name in name. With tuned_ms,
 * *tuned_ms gets a malloc'd array of *ntasks record costs in ms, one per
 * task (0: no record). 0 or 1 (said). */
static int build_into(const char *cmd, const build_args_t *a, const char *dir, char *name,
                      size_t cap, int quiet, double **tuned_ms, int *ntasks)
{
    if (check_job(cmd, a))
        return 1;
    kt_net_t *net = kt_cli_net_load(cmd, &a->net);
    if (!net)
        return 1;
    /* Random weights stand in only where the network has none of its own. */
    if (a->net.onnx && !kt_net_has_params(net)) {
        fprintf(stderr, "ktune %s: %s: the model's weights are not all at hand (%s): building it "
                "needs them (tuning needs only its shapes)\n", cmd, a->net.onnx,
                kt_net_params_note(net));
        kt_net_free(net);
        return 1;
    }
    int rc = 1;
    kt_net_plan_t *plan = NULL;
    kt_net_tasks_t *t =
        kt_net_extract_ex(net, a->net.layout, kt_cli_net_extract_flags(&a->net, a->target));
    char **states = NULL, **origin = NULL;
    double *ms = NULL;
    int *used = NULL;
    kt_netlib_kernel_t *kern = NULL;
    if (!t) {
        kt_cli_fail(cmd);
        goto done;
    }
    plan = kt_net_plan(net, t, a->net.layout, a->seed);
    if (!plan) {
        fprintf(stderr, "ktune %s: %s: %s\n", cmd, kt_cli_net_source(&a->net), kt_err_msg());
        goto done;
    }
    states = calloc((size_t)t->ntasks + 1, sizeof *states);
    ms = calloc((size_t)t->ntasks + 1, sizeof *ms);
    kern = calloc((size_t)t->ntasks + 1, sizeof *kern);
    origin = calloc((size_t)t->ntasks + 1, sizeof *origin);
    if (!states || !ms || !kern || !origin) {
        kt_err_set(KT_ENOMEM, "out of memory");
        kt_cli_fail(cmd);
        goto done;
    }
    if ((a->conn.tracker ? gather_tracker : gather_store)(cmd, a, t, states, ms, origin))
        goto done;
    if (!(used = calloc((size_t)t->ntasks + 1, sizeof *used)) ||
        kt_net_plan_use_alternatives(plan, t, ms, used) != 0) {
        kt_cli_fail(cmd);
        goto done;
    }
    for (int i = 0; i < t->ntasks; i++) {
        kern[i].state_json = states[i];
        kern[i].measured_ms = ms[i];
        kern[i].origin = origin[i];
        if (t->tasks[i].alt_of >= 0 && used[i])
            fprintf(stderr, "task %d (%s): faster than task %d, used for its layers\n", i,
                    t->tasks[i].desc, t->tasks[i].alt_of);
        if (!states[i] && used[i])
            fprintf(stderr, "task %d (%s %s): no record, default schedule\n", i,
                    kt_workload_op(t->tasks[i].wl), t->tasks[i].desc);
    }
    kt_netlib_info_t info;
    /* An ONNX graph's own name is the exporter's ("torch_jit"): the file says more. */
    char stem[256];
    const char *base = a->name ? a->name : kt_net_name(net);
    if (!a->name && a->net.onnx) {
        const char *slash = strrchr(a->net.onnx, '/');
        snprintf(stem, sizeof stem, "%s", slash ? slash + 1 : a->net.onnx);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem)
            *dot = '\0';
        base = stem;
    }
    char source[512];
    snprintf(source, sizeof source, "%s (%s layout%s)", kt_cli_net_source(&a->net),
             a->net.layout == KT_NET_NHWC ? "NHWC" : "NCHW",
             plan->params_random ? ", random weights" : "");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "ktune %s: cannot create %s: %s\n", cmd, dir, strerror(errno));
        goto done;
    }
    if ((is_cuda(a) ? kt_netlib_write_cuda(plan, t, kern, base, source,
                                           a->arch ? a->arch : KT_NVRTC_DEFAULT_ARCH, dir, &info)
                    : kt_netlib_write(plan, t, kern, base, source, dir, &info)) != 0) {
        kt_cli_fail(cmd);
        goto done;
    }
    snprintf(name, cap, "%s", info.name);
    if (!quiet && is_cuda(a))
        printf("wrote %s/%s.cu, %s_host.c, %s.h, %s.safetensors%s%s%s%s%s for %s: ", dir,
               info.name, info.name, info.name, info.name, info.cubin ? ", " : "",
               info.cubin ? info.name : "", info.cubin ? ".cubin and " : " (no NVRTC: no cubin)",
               info.cubin ? info.name : "", info.cubin ? ".ptx" : "",
               a->arch ? a->arch : KT_NVRTC_DEFAULT_ARCH);
    else if (!quiet)
        printf("wrote %s/%s.c, %s.h and %s.safetensors: ", dir, info.name, info.name, info.name);
    if (!quiet)
        printf("%d task%s (%d tuned), %d steps, arena %.2f MiB (%.2f MiB without reuse), weights "
               "%.2f MiB\n",
               info.ntasks, info.ntasks == 1 ? "" : "s", info.ntasks - info.ndefault, info.nsteps,
               info.arena_bytes / 1048576.0, info.naive_bytes / 1048576.0,
               info.weight_bytes / 1048576.0);
    if (tuned_ms) {
        *tuned_ms = ms;
        *ntasks = t->ntasks;
        ms = NULL;
    }
    rc = 0;
done:
    for (int i = 0; states && i < t->ntasks; i++)
        free(states[i]);
    for (int i = 0; origin && i < t->ntasks; i++)
        free(origin[i]);
    free(states);
    free(origin);
    free(ms);
    free(used);
    free(kern);
    kt_net_plan_free(plan);
    kt_net_tasks_free(t);
    kt_net_free(net);
    return rc;
}

int kt_cli_build(int argc, char **argv)
{
    build_args_t a;
    int rc = parse_args("build", 0, argc, argv, &a);
    if (rc < 0) {
        build_usage(stdout);
        return 0;
    }
    if (rc)
        return rc;
    char name[KT_NETLIB_MAX_NAME];
    return build_into("build", &a, a.out, name, sizeof name, 0, NULL, NULL);
}

/* ---- running ------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

typedef struct {
    int step;
    double sec;
} step_time_t;

static int by_time(const void *x, const void *y)
{
    const step_time_t *a = x, *b = y;
    return a->sec < b->sec ? 1 : a->sec > b->sec ? -1 : a->step - b->step;
}

/* The steps without a task of one kind (kt_netlib_step_kind), summed. */
typedef struct {
    const char *kind;
    int n;
    double ms;
} step_kind_t;

static int by_kind_ms(const void *x, const void *y)
{
    const step_kind_t *a = x, *b = y;
    return a->ms < b->ms ? 1 : a->ms > b->ms ? -1 : strcmp(a->kind, b->kind);
}

/* The file --input gives for network input k (named `name`): the one
 * written NAME=FILE with its name, or else the k-th of those without a
 * network input's name. NULL when none. */
static const char *input_file(const build_args_t *a, const kt_netlib_t *n, int k)
{
    int plain = 0;
    for (int q = 0; q < a->ninput; q++) {
        const char *s = a->input[q], *eq = strchr(s, '=');
        int named = 0;
        for (int j = 0; eq && j < kt_netlib_num_inputs(n); j++) {
            const char *nm = kt_netlib_input_name(n, j);
            if (*nm && strlen(nm) == (size_t)(eq - s) && !strncmp(s, nm, (size_t)(eq - s))) {
                named = 1;
                if (j == k)
                    return eq + 1;
            }
        }
        if (!named && plain++ == k)
            return s;
    }
    return NULL;
}

/* Input k of the network: its --input file, or (no --input at all) values
 * drawn from --seed. NULL when said. */
static float *load_input(const build_args_t *a, const kt_netlib_t *n, int k)
{
    int64_t dims[KT_NET_MAX_DIMS], numel = 1;
    int ndim = kt_netlib_input_shape_at(n, k, dims), is_int = kt_netlib_input_is_int_at(n, k);
    for (int d = 0; d < ndim; d++)
        numel *= dims[d];
    const char *file = input_file(a, n, k);
    if (!file && a->ninput) {
        fprintf(stderr, "ktune run: no --input for the network's input %d ('%s'): give each of "
                "its %d inputs as --input NAME=FILE.npy\n", k, kt_netlib_input_name(n, k),
                kt_netlib_num_inputs(n));
        return NULL;
    }
    if (!file) {
        float *x = malloc((size_t)numel * sizeof(float));
        if (!x) {
            fprintf(stderr, "ktune run: out of memory\n");
            return NULL;
        }
        kt_rng_t r;
        kt_rng_seed(&r, a->seed ^ 0x5eedf00dull ^ (uint64_t)k);
        /* Integers (token ids, a mask) are drawn as 0 and 1. */
        for (int64_t i = 0; i < numel; i++)
            x[i] = is_int ? (float)(kt_rng_double(&r) < 0.5) : (float)(2.0 * kt_rng_double(&r) - 1.0);
        return x;
    }
    float *x = NULL;
    int64_t d[KT_NET_MAX_DIMS];
    int nd = 0;
    if ((is_int ? kt_npy_read_ints(file, &x, d, &nd, NULL) : kt_npy_read(file, &x, d, &nd)) != 0) {
        fprintf(stderr, "ktune run: --input: %s\n", kt_err_msg());
        return NULL;
    }
    if (kt_npy_check_shape(d, nd, dims, ndim) != 0) {
        if (kt_netlib_num_inputs(n) > 1)
            fprintf(stderr, "ktune run: --input %s (input '%s'): %s\n", file,
                    kt_netlib_input_name(n, k), kt_err_msg());
        else
            fprintf(stderr, "ktune run: --input %s: %s\n", file, kt_err_msg());
        free(x);
        return NULL;
    }
    return x;
}

/* Build time's record cost of step k's task in ms, 0 when it has none. */
static double step_tuned_ms(const kt_netlib_t *n, int k, const double *tuned, int ntasks)
{
    int task = kt_netlib_step_task(n, k);
    return task >= 0 && task < ntasks ? tuned[task] : 0;
}

static int run_network(const build_args_t *a, const char *dir, const char *name,
                       const double *tuned, int ntasks)
{
    kt_netlib_t *n = kt_netlib_open(dir, name, is_cuda(a) ? KT_NETLIB_CUDA
                                               : a->check ? KT_NETLIB_CHECK
                                                          : 0);
    if (!n)
        return kt_cli_fail("run");
    int rc = 1;
    int64_t dout[KT_NET_MAX_DIMS];
    int nout = kt_netlib_output_shape(n, dout), nx = kt_netlib_num_inputs(n);
    int64_t numel_out = 1;
    for (int d = 0; d < nout; d++)
        numel_out *= dout[d];
    int nsteps = kt_netlib_num_steps(n);
    float *xs[KT_PLAN_MAX_INPUTS] = {NULL};
    float *y = malloc((size_t)numel_out * sizeof(float));
    double *steps = calloc((size_t)nsteps + 1, sizeof(double));
    double *sum = calloc((size_t)nsteps + 1, sizeof(double));
    double *lat = calloc((size_t)a->repeat + 1, sizeof(double));
    step_time_t *order = calloc((size_t)nsteps + 1, sizeof(step_time_t));
    if (!y || !steps || !sum || !lat || !order) {
        fprintf(stderr, "ktune run: out of memory\n");
        goto done;
    }
    if (a->ninput > nx) {
        fprintf(stderr, "ktune run: %d --input files for a network of %d input%s\n", a->ninput,
                nx, nx == 1 ? "" : "s");
        goto done;
    }
    for (int k = 0; k < nx; k++)
        if (!(xs[k] = load_input(a, n, k)))
            goto done;
    const float *const *in = (const float *const *)xs;
    if (kt_netlib_set_threads(n, a->threads) != 0 || kt_netlib_run_inputs(n, in, y, NULL) != 0) {
        kt_cli_fail("run");
        goto done;
    }
    for (int r = 0; r < a->repeat; r++) {
        double t0 = kt_time_mono();
        if (kt_netlib_run_inputs(n, in, y, steps) != 0) {
            kt_cli_fail("run");
            goto done;
        }
        lat[r] = kt_time_mono() - t0;
        for (int k = 0; k < nsteps; k++)
            sum[k] += steps[k];
    }
    double total = 0;
    for (int k = 0; k < nsteps; k++) {
        order[k] = (step_time_t){.step = k, .sec = sum[k] / a->repeat};
        total += order[k].sec;
    }
    qsort(order, (size_t)nsteps, sizeof *order, by_time);
    int top = nsteps < TOP_STEPS ? nsteps : TOP_STEPS;
    printf("| Step | Task |  Time (ms) | Tuned (ms) | Share | Layers\n");
    printf("--------------------------------------------------------------------------\n");
    for (int i = 0; i < top; i++) {
        int k = order[i].step, task = kt_netlib_step_task(n, k);
        char tid[16] = "-", tms[32] = "-";
        if (task >= 0)
            snprintf(tid, sizeof tid, "%d", task);
        double est = step_tuned_ms(n, k, tuned, ntasks);
        if (est > 0)
            snprintf(tms, sizeof tms, "%.4f", est);
        printf("| %4d | %4s | %10.4f | %10s | %4.1f%% | %s\n", k, tid, order[i].sec * 1e3, tms,
               total > 0 ? 100.0 * order[i].sec / total : 0.0, kt_netlib_step_name(n, k));
    }
    printf("--------------------------------------------------------------------------\n");
    printf("%d steps, %d listed (%.1f%% of the time)\n", nsteps, top,
           total > 0 ? 100.0 * ({
               double s = 0;
               for (int i = 0; i < top; i++)
                   s += order[i].sec;
               s;
           }) / total
                     : 0.0);
    /* Where a built network runs slower than its records promise (weights
     * from memory, a colder input), the sum over tuned steps shows it. */
    double here = 0, est = 0;
    int ntuned = 0;
    for (int k = 0; k < nsteps; k++) {
        double e = step_tuned_ms(n, k, tuned, ntasks);
        if (e > 0) {
            here += sum[k] / a->repeat * 1e3;
            est += e;
            ntuned++;
        }
    }
    if (ntuned)
        printf("tuned steps: %d, %.4f ms here against %.4f ms as their records were timed "
               "(%.2fx)\n", ntuned, here, est, here / est);
    else
        printf("tuned steps: none (no task has a record)\n");
    /* What runs between the kernels: data movement and plain steps, which
     * no record's cost counts, the layout conversions among them. */
    enum { MAX_KINDS = 16 };
    step_kind_t kinds[MAX_KINDS];
    int nkinds = 0, nbetween = 0, layout = -1;
    double between = 0;
    for (int k = 0; k < nsteps; k++) {
        if (kt_netlib_step_task(n, k) >= 0)
            continue;
        const char *kind = kt_netlib_step_kind(n, k);
        if (!kind)
            kind = "?";   /* a library that does not say */
        double ms = sum[k] / a->repeat * 1e3;
        int q = 0;
        while (q < nkinds && strcmp(kinds[q].kind, kind) != 0)
            q++;
        if (q == nkinds && nkinds < MAX_KINDS)
            kinds[nkinds++] = (step_kind_t){.kind = kind};
        if (q < nkinds) {
            kinds[q].n++;
            kinds[q].ms += ms;
        }
        between += ms;
        nbetween++;
    }
    qsort(kinds, (size_t)nkinds, sizeof *kinds, by_kind_ms);
    for (int q = 0; q < nkinds; q++)
        if (strcmp(kinds[q].kind, "layout") == 0)
            layout = q;
    printf("steps without a task: %d, %.4f ms (layout conversions: %d, %.4f ms)\n", nbetween,
           between, layout < 0 ? 0 : kinds[layout].n, layout < 0 ? 0.0 : kinds[layout].ms);
    if (nkinds) {
        printf("  by kind:");
        for (int q = 0; q < nkinds; q++)
            printf("%s %s %d, %.4f ms", q ? ";" : "", kinds[q].kind, kinds[q].n, kinds[q].ms);
        printf("\n");
    }
    if (a->check) {
        double *err = steps;
        if (kt_netlib_check_inputs(n, in, y, err) != 0) {
            kt_cli_fail("run");
            goto done;
        }
        int worst = -1;
        for (int k = 0; k < nsteps; k++)
            if (err[k] >= 0 && (worst < 0 || err[k] > err[worst] || isnan(err[k])))
                worst = k;
        if (worst < 0) {
            printf("check: no task to check\n");
        } else {
            printf("check: largest relative error %.3g (step %d, task %d: %s) against ktune's "
                   "naive reference, tolerance %g\n",
                   err[worst], worst, kt_netlib_step_task(n, worst),
                   kt_netlib_step_name(n, worst), CHECK_TOLERANCE);
            if (!(err[worst] <= CHECK_TOLERANCE)) {
                fprintf(stderr, "ktune run: check failed: step %d (%s) differs from the reference "
                                "by %.3g\n", worst, kt_netlib_step_name(n, worst), err[worst]);
                goto done;
            }
        }
    }
    if (a->output && kt_npy_write(a->output, y, dout, nout) != 0) {
        fprintf(stderr, "ktune run: --output: %s\n", kt_err_msg());
        goto done;
    }
    qsort(lat, (size_t)a->repeat, sizeof *lat, cmp_double);
    double med = a->repeat % 2 ? lat[a->repeat / 2]
                               : 0.5 * (lat[a->repeat / 2 - 1] + lat[a->repeat / 2]);
    printf("latency: %.4f ms (min %.4f, max %.4f) over %d runs, %d thread%s\n", med * 1e3,
           lat[0] * 1e3, lat[a->repeat - 1] * 1e3, a->repeat, a->threads,
           a->threads == 1 ? "" : "s");
    rc = 0;
done:
    for (int k = 0; k < KT_PLAN_MAX_INPUTS; k++)
        free(xs[k]);
    free(y);
    free(steps);
    free(sum);
    free(lat);
    free(order);
    kt_netlib_close(n);
    return rc;
}

int kt_cli_run(int argc, char **argv)
{
    build_args_t a;
    int rc = parse_args("run", 1, argc, argv, &a);
    if (rc < 0) {
        run_usage(stdout);
        return 0;
    }
    if (rc)
        return rc;
    /* Without a GPU there is nothing to run a cuda build on: say so first. */
    if (is_cuda(&a)) {
        kt_hw_params_t hw;
        if (kt_cuda_device_probe(0, NULL, 60, &hw) != 0) {
            fprintf(stderr, "ktune run: --target cuda needs an NVIDIA GPU: %s\n", kt_err_msg());
            return 1;
        }
    }
    /* Say so before building when an input cannot be read at all (a
     * NAME=FILE is checked as FILE when the whole does not name a file). */
    for (int k = 0; k < a.ninput; k++) {
        const char *f = a.input[k], *eq = strchr(f, '=');
        if (access(f, R_OK) != 0 && (!eq || access(eq + 1, R_OK) != 0)) {
            fprintf(stderr, "ktune run: --input %s: %s\n", eq && access(f, F_OK) != 0 ? eq + 1 : f,
                    strerror(errno));
            return 1;
        }
        /* NAME=FILE.npy fixes NAME's dynamic dimensions to the file's shape
         * unless an --input NAME=DIMS says otherwise. */
        if (!eq || access(f, F_OK) == 0 || a.net.ninputs == KT_CLI_MAX_INPUTS ||
            (size_t)(eq - f) >= sizeof a.net.inputs[0].name)
            continue;
        int known = 0;
        for (int q = 0; q < a.net.ninputs; q++)
            known |= strlen(a.net.inputs[q].name) == (size_t)(eq - f) &&
                     !strncmp(a.net.inputs[q].name, f, (size_t)(eq - f));
        float *x = NULL;
        kt_net_input_t *in = &a.net.inputs[a.net.ninputs];
        if (known || kt_npy_read_ints(eq + 1, &x, in->dims, &in->ndim, NULL) != 0) {
            kt_err_clear();   /* a bad file is said when the network reads it */
            continue;
        }
        free(x);
        memcpy(in->name, f, (size_t)(eq - f));
        in->name[eq - f] = '\0';
        a.net.ninputs++;
    }
    char tmp[] = "/tmp/ktune-run-XXXXXX";
    const char *dir = a.out;
    if (!dir && !(dir = mkdtemp(tmp))) {
        fprintf(stderr, "ktune run: cannot create a temporary directory: %s\n", strerror(errno));
        return 1;
    }
    char name[KT_NETLIB_MAX_NAME];
    double *tuned = NULL;
    int ntasks = 0;
    rc = build_into("run", &a, dir, name, sizeof name, 1, &tuned, &ntasks);
    if (rc == 0)
        rc = run_network(&a, dir, name, tuned, ntasks);
    free(tuned);
    if (!a.out)
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
