/*
 * ktune tune, submit and watch: tuning jobs from the command line.
 *
 * `ktune tune` without --tracker mirrors TVM's LocalRPCMeasureContext: it
 * starts a private ktune-tracker, one ktune-worker and one ktune-runner as
 * child processes on loopback (ephemeral ports, a fresh random token in a
 * 0600 file of a private temporary directory), with the store in ./ktune.db
 * (or --db), runs the job, prints the results and stops them. The children
 * are the binaries installed next to ktune (or the build tree's ../server and
 * ../worker, or PATH), with TMPDIR set to the private directory (removed whole
 * at the end), each in its own process group so that a Ctrl-C at the
 * terminal reaches ktune alone, which then stops them in order; they also get
 * SIGTERM should ktune die. Running the same command again resumes: the
 * tracker restarts the job left unfinished in the store (or a new job counts
 * the stored records of the same workloads), and no state is measured twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "service/job_view.h"
#include "service/jobs.h"
#include "ktune.pb-c.h"
#include "net/net.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "scheduler/scheduler.h"
#include "search/search.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/util.h"

/* A watch stream's deadline: a week. */
#define WATCH_DEADLINE_MS 604800000
/* How long the embedded daemons get to start, register, and stop. */
#define START_WAIT_MS 60000
#define STOP_WAIT_MS 20000
/* How long a job for another command waits for a runner of its key. */
#define PEER_WAIT_MS 10000

/* ---- Job options ---------------------------------------------------------------------------- */

enum { O_WORKLOAD = 1000, O_TARGET, O_TRIALS, O_KEY, O_STRATEGY,
       O_POLICY, O_DB, O_JSON, O_SEED, O_PER_ROUND, O_EARLY, O_PRIORITY, O_NUMBER, O_REPEAT,
       O_MIN_REPEAT, O_RUN_TIMEOUT, O_NO_CHECK, O_CACHE_FLUSH, O_FLUSH_WEIGHTS, O_NO_FLUSH_WEIGHTS,
       O_SEARCH_PARAMS, O_MORE, O_NO_TRANSFER, O_REQUEST_ID, O_HELP };

static const struct option job_opts[] = {
    KT_CLI_NET_OPTIONS,
    {"workload", required_argument, 0, O_WORKLOAD}, {"target", required_argument, 0, O_TARGET},
    {"trials", required_argument, 0, O_TRIALS},     KT_CLI_CONN_OPTIONS,
    {"more", required_argument, 0, O_MORE},
    {"key", required_argument, 0, O_KEY},           {"strategy", required_argument, 0, O_STRATEGY},
    {"policy", required_argument, 0, O_POLICY},     {"db", required_argument, 0, O_DB},
    {"json", no_argument, 0, O_JSON},               {"seed", required_argument, 0, O_SEED},
    {"per-round", required_argument, 0, O_PER_ROUND},
    {"early-stopping", required_argument, 0, O_EARLY},
    {"priority", required_argument, 0, O_PRIORITY}, {"number", required_argument, 0, O_NUMBER},
    {"repeat", required_argument, 0, O_REPEAT},
    {"min-repeat-ms", required_argument, 0, O_MIN_REPEAT},
    {"run-timeout-ms", required_argument, 0, O_RUN_TIMEOUT},
    {"no-check", no_argument, 0, O_NO_CHECK},       {"help", no_argument, 0, O_HELP},
    {"search-params", required_argument, 0, O_SEARCH_PARAMS},
    {"cache-flush", no_argument, 0, O_CACHE_FLUSH},
    {"flush-weights", no_argument, 0, O_FLUSH_WEIGHTS},
    {"no-flush-weights", no_argument, 0, O_NO_FLUSH_WEIGHTS},
    {"no-transfer", no_argument, 0, O_NO_TRANSFER},
    {"request-id", required_argument, 0, O_REQUEST_ID},
    {0, 0, 0, 0}};

typedef struct {
    kt_cli_conn_t conn;
    kt_cli_net_t net;
    const char *workload, *target, *key, *strategy, *policy, *search_params;
    const char *request_id;    /* --request-id; NULL: a random one per run */
    int per_round, early, priority, number, repeat, min_repeat, run_timeout, no_check;
    int cache_flush, no_transfer;
    int flush_weights;         /* 1 / 0 as given; -1: on for a network on a CPU */
    int min_repeat_given;
    long long trials;
    long long more;            /* --more N: N trials beyond what the store holds */
    unsigned long long seed;
} job_args_t;

/* The runners' key: --key, else the target's name (cpu, cuda). */
static const char *runner_key(const job_args_t *a)
{
    return a->key ? a->key : a->target ? a->target : "cpu";
}

static const char *JOB_HELP =
    "  --workload FILE|JSON  one workload object, or a list of workloads or of\n"
    "                        {\"workload\": {...}, \"weight\": W}, inline or in a file\n"
    "  --target T            cpu (default) or cuda (runners with --device cuda:N)\n"
    "  --trials N            total measurement trials (default 64 per task); trials\n"
    "                        the store already holds of these tasks count towards it\n"
    "  --more N              N trials beyond what the store holds of these tasks (to\n"
    "                        tune further once a budget is spent; not with --trials)\n"
    "  --key KEY             device key of the runners to use (default: the target)\n"
    "  --strategy S          task scheduler: gradient (default), round-robin, sequential\n"
    "  --policy P            sketch.xgb (default), sketch.random, or FamilySeer's\n"
    "                        sketch.xgb.family-op (one cost model per anchor operator,\n"
    "                        foresee tuning), sketch.xgb.family-hash (per operator\n"
    "                        sequence), sketch.xgb.family-none (one model per task)\n"
    "  --search-params LIST  the policy's parameters, key=value,... (TVM's SketchPolicy\n"
    "                        params: eps_greedy, evolutionary_search_population,\n"
    "                        evolutionary_search_num_iters, num_warmup_sample,\n"
    "                        model_label=rank|log|throughput, ...; see\n"
    "                        docs/search.md)\n"
    "  --per-round N         measurements per round (default 32, at most trials/tasks)\n"
    "  --early-stopping N    stop a task after N trials without improvement\n"
    "  --seed S              random seed of the search and the input data (default 0)\n"
    "  --priority N          queue priority on shared runners (larger first; default 0)\n"
    "  --number N, --repeat N, --min-repeat-ms N, --run-timeout-ms N, --no-check\n"
    "                        measurement options (TVM's; defaults 3, 1, 100, 10000,\n"
    "                        outputs checked against the reference kernel)\n"
    "  --cache-flush         evict the caches before every timed run (TVM's\n"
    "                        enable_cpu_cache_flush; number 1, no minimum time): a\n"
    "                        network reads each layer's weights from memory once\n"
    "                        per inference, and a kernel timed on warm caches does\n"
    "                        not pay for that (repeat 3 unless given)\n"
    "  --flush-weights       evict only the weights (matmul's B, conv2d and dense\n"
    "                        weights) before every timed run, as a network reads\n"
    "                        them while the layer before has just written the\n"
    "                        input (number 1, repeat 3 unless given); the default\n"
    "                        for a network on a CPU, --no-flush-weights times warm\n"
    "  --no-transfer         start each new task from its own samples only, without\n"
    "                        the re-fitted best states of the nearest stored workloads\n"
    "  --request-id ID       name this submission (letters, digits, ._:-; at most 128):\n"
    "                        run again with the same ID (a script retrying after a\n"
    "                        lost answer), it gets the job the first run made instead\n"
    "                        of a second one; default a random ID per run, which the\n"
    "                        run's own retries reuse\n"
    "  --tracker HOST:PORT   the tracker to use (tune: default an embedded one)\n"
    "  --token-file F        the tracker's shared token (default: $KT_TOKEN_FILE)\n"
    "  --tls-ca F            CA certificate (PEM) of a TLS tracker\n"
    KT_CLI_MTLS_HELP
    "  --timeout MS          deadline of each call to the tracker (default 10000)\n"
    "  --json                print JSON instead of tables\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "exit status: 0 success (the job is done); 1 failure (message on stderr: bad\n"
    "workload, unreachable tracker, UNAUTHENTICATED, the job failed or was\n"
    "cancelled, ...); 2 bad usage; 130 ktune tune stopped by Ctrl-C (run it again\n"
    "to resume)\n";

/* 0, 2 (bad usage) or -1 (--help). */
static int parse_job_args(const char *cmd, int argc, char **argv, int allow_db, job_args_t *a)
{
    memset(a, 0, sizeof *a);
    a->flush_weights = -1;
    kt_cli_conn_init(&a->conn, 0);
    kt_cli_net_init(&a->net);
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, "h", job_opts, &li)) != -1) {
        long long v = 0;
        const char *name = li >= 0 ? job_opts[li].name : "";
        int conn = kt_cli_conn_option(cmd, &a->conn, c, optarg);
        if (!conn)
            conn = kt_cli_net_option(cmd, &a->net, c, optarg);
        if (conn == 2)
            return 2;
        switch (conn ? 0 : c) {
        case 0: break;
        case O_WORKLOAD:
            if (kt_cli_nonempty(cmd, "--workload", optarg))
                return 2;
            a->workload = optarg;
            break;
        case O_TARGET: a->target = optarg; break;
        case O_KEY:
            if (kt_cli_check_key(cmd, "--key", optarg))
                return 2;
            a->key = optarg;
            break;
        case O_STRATEGY: a->strategy = optarg; break;
        case O_POLICY: a->policy = optarg; break;
        case O_SEARCH_PARAMS: a->search_params = optarg; break;
        case O_JSON: a->conn.json = 1; break;
        case O_NO_CHECK: a->no_check = 1; break;
        case O_CACHE_FLUSH: a->cache_flush = 1; break;
        case O_FLUSH_WEIGHTS: a->flush_weights = 1; break;
        case O_NO_FLUSH_WEIGHTS: a->flush_weights = 0; break;
        case O_NO_TRANSFER: a->no_transfer = 1; break;
        case O_REQUEST_ID:
            if (kt_jobs_check_request_id(optarg) != 0 || !*optarg) {
                fprintf(stderr, "ktune %s: --request-id: %s\n", cmd,
                        *optarg ? kt_err_msg() : "needs a value");
                return 2;
            }
            a->request_id = optarg;
            break;
        case O_DB:
            if (!allow_db) {
                fprintf(stderr, "ktune %s: --db applies to ktune tune without --tracker\n", cmd);
                return 2;
            }
            if (kt_cli_conn_db(cmd, &a->conn, optarg))
                return 2;
            break;
        case O_SEED: {
            char *end = NULL;
            errno = 0;
            a->seed = strtoull(optarg, &end, 10);
            /* strtoull takes "" as 0, skips blanks and negates "-1". */
            if (errno || !end || end == optarg || *end || optarg[0] < '0' || optarg[0] > '9') {
                fprintf(stderr, "ktune %s: --seed wants a non-negative integer, not '%s'\n", cmd,
                        optarg);
                return 2;
            }
            break;
        }
        case O_TRIALS:
        case O_MORE:
        case O_PER_ROUND:
        case O_EARLY:
        case O_PRIORITY:
        case O_NUMBER:
        case O_REPEAT:
        case O_MIN_REPEAT:
        case O_RUN_TIMEOUT: {
            long long lo = c == O_PRIORITY ? KT_JOB_PRIORITY_MIN : c == O_MIN_REPEAT ? 0 : 1;
            /* The measure options' caps are the tracker's (kt_limits.h). */
            long long hi = c == O_PRIORITY      ? KT_JOB_PRIORITY_MAX
                           : c == O_NUMBER      ? KT_LIMIT_MEASURE_NUMBER
                           : c == O_REPEAT      ? KT_LIMIT_MEASURE_REPEAT
                           : c == O_MIN_REPEAT  ? KT_LIMIT_MEASURE_MIN_REPEAT_MS
                           : c == O_RUN_TIMEOUT ? KT_LIMIT_MEASURE_TIMEOUT_MS
                                                : 1000000000LL;
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", name);
            if (kt_cli_parse_num(cmd, opt, optarg, lo, hi, &v))
                return 2;
            switch (c) {
            case O_TRIALS: a->trials = v; break;
            case O_MORE: a->more = v; break;
            case O_PER_ROUND: a->per_round = (int)v; break;
            case O_EARLY: a->early = (int)v; break;
            case O_PRIORITY: a->priority = (int)v; break;
            case O_NUMBER: a->number = (int)v; break;
            case O_REPEAT: a->repeat = (int)v; break;
            case O_MIN_REPEAT: a->min_repeat = (int)v; a->min_repeat_given = 1; break;
            case O_RUN_TIMEOUT: a->run_timeout = (int)v; break;
            }
            break;
        }
        case 'h':
        case O_HELP: return -1;
        default:
            fprintf(stderr, "ktune %s: bad option '%s' (see ktune %s --help)\n", cmd,
                    argv[optind - 1], cmd);
            return 2;
        }
        li = -1;
    }
    if (optind < argc) {
        fprintf(stderr, "ktune %s: unexpected argument '%s'\n", cmd, argv[optind]);
        return 2;
    }
    if (kt_cli_conn_check(cmd, &a->conn))
        return 2;
    if (a->trials && a->more) {
        fprintf(stderr, "ktune %s: give --trials N (the total) or --more N (beyond what is "
                        "stored), not both\n", cmd);
        return 2;
    }
    if (kt_cli_net_given(&a->net) + !!a->workload != 1) {
        fprintf(stderr, "ktune %s: give one of --network NAME, --network-file F, --onnx MODEL or "
                        "--workload FILE|JSON\n", cmd);
        return 2;
    }
    if (!a->workload && kt_cli_net_check(cmd, &a->net))
        return 2;
    if (a->workload && (a->net.layout_given || a->net.batch || a->net.ninputs || a->net.seq_len)) {
        fprintf(stderr, "ktune %s: --layout, --batch, --input and --seq-len apply to networks, "
                        "not to --workload\n", cmd);
        return 2;
    }
    /* The tracker checks these too; saying so here spares starting daemons. */
    if (a->target && strcmp(a->target, "cpu") != 0 && strcmp(a->target, "cuda") != 0) {
        fprintf(stderr, "ktune %s: unknown --target '%s' (cpu or cuda)\n", cmd, a->target);
        return 2;
    }
    if (a->strategy && kt_scheduler_strategy_parse(a->strategy) < 0) {
        fprintf(stderr, "ktune %s: unknown --strategy '%s' (gradient, round-robin or "
                        "sequential)\n", cmd, a->strategy);
        return 2;
    }
    if (a->policy && kt_search_policy_check(a->policy) != 0) {
        fprintf(stderr, "ktune %s: unknown --policy '%s' (", cmd, a->policy);
        const char *const *names = kt_search_policy_names();
        for (int i = 0; names[i]; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
        fprintf(stderr, ")\n");
        return 2;
    }
    kt_search_opts_t so;
    kt_search_opts_default(&so);
    if (a->search_params && kt_search_opts_set(&so, a->search_params) != 0) {
        fprintf(stderr, "ktune %s: --search-params: %s\n", cmd, kt_err_msg());
        return 2;
    }
    return 0;
}

/* The job's tasks as workloads with weights. */
typedef struct {
    kt_workload_t **wl;
    double *weight;
    char **desc;               /* a network's tasks: the layers each stands for; else NULL */
    int n;
} tasks_t;

static void tasks_free(tasks_t *t)
{
    for (int i = 0; i < t->n; i++) {
        kt_workload_free(t->wl[i]);
        if (t->desc)
            free(t->desc[i]);
    }
    free(t->desc);
    free(t->wl);
    free(t->weight);
}

static int load_tasks(const char *cmd, const job_args_t *a, tasks_t *t)
{
    memset(t, 0, sizeof *t);
    if (a->workload) {
        if (kt_workload_load(a->workload, &t->wl, &t->weight, &t->n) != 0) {
            fprintf(stderr, "ktune %s: --workload: %s\n", cmd, kt_err_msg());
            return 1;
        }
        if (t->n == 0) {
            fprintf(stderr, "ktune %s: --workload lists no workload\n", cmd);
            return 1;
        }
        return 0;
    }
    const char *src = kt_cli_net_source(&a->net);
    kt_net_t *net = kt_cli_net_load(cmd, &a->net);
    if (!net)
        return 1;
    kt_net_tasks_t *nt =
        kt_net_extract_ex(net, a->net.layout, kt_cli_net_extract_flags(&a->net, a->target));
    if (!nt) {
        fprintf(stderr, "ktune %s: %s: %s\n", cmd, src, kt_err_msg());
        kt_net_free(net);
        return 1;
    }
    t->wl = calloc((size_t)nt->ntasks + 1, sizeof *t->wl);
    t->weight = calloc((size_t)nt->ntasks + 1, sizeof *t->weight);
    t->desc = calloc((size_t)nt->ntasks + 1, sizeof *t->desc);
    int rc = !t->wl || !t->weight || !t->desc;
    for (int i = 0; rc == 0 && i < nt->ntasks; i++) {
        if (!(t->wl[i] = kt_workload_parse(kt_workload_json(nt->tasks[i].wl))))
            rc = 1;
        t->weight[i] = nt->tasks[i].weight;
        /* Sent with the task so the tracker's page names the layers, which a
         * workload key alone does not. */
        t->desc[i] = kt_strdup(nt->tasks[i].desc ? nt->tasks[i].desc : "");
        t->n = i + 1;
    }
    if (rc)
        fprintf(stderr, "ktune %s: %s: %s\n", cmd, src, kt_err_msg());
    else if (nt->nissues > 0 && !a->conn.json)
        fprintf(stderr, "ktune %s: %s: %d layer%s not tuned (see ktune tasks)\n", cmd, src,
                nt->nissues, nt->nissues == 1 ? "" : "s");
    kt_net_tasks_free(nt);
    kt_net_free(net);
    return rc;
}

/* The SubmitJob request for these tasks; every pointer into a, t or the
 * caller's arrays (which outlive the request). */
typedef struct {
    Ktune__V1__Job job;
    Ktune__V1__TuningOptions opts;
    Ktune__V1__MeasureOptions mo;
    Ktune__V1__Task *task, **taskp;
    Ktune__V1__Workload *wl;
    /* SubmitJobRequest.request_id: one per run, so that the client's
     * retries of a SubmitJob whose answer was lost make no second job. */
    char request_id[KT_JOBS_REQUEST_ID_MAX + 1];
} job_msg_t;

static int job_msg_make(const job_args_t *a, const tasks_t *t, job_msg_t *m)
{
    memset(m, 0, sizeof *m);
    ktune__v1__job__init(&m->job);
    ktune__v1__tuning_options__init(&m->opts);
    ktune__v1__measure_options__init(&m->mo);
    m->task = calloc((size_t)t->n, sizeof *m->task);
    m->taskp = calloc((size_t)t->n, sizeof *m->taskp);
    m->wl = calloc((size_t)t->n, sizeof *m->wl);
    if (!m->task || !m->taskp || !m->wl) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return 1;
    }
    if (a->request_id)
        snprintf(m->request_id, sizeof m->request_id, "%s", a->request_id);
    else if (kt_cli_random_hex(m->request_id, 16) != 0)
        return 1;
    for (int i = 0; i < t->n; i++) {
        ktune__v1__workload__init(&m->wl[i]);
        m->wl[i].key = (char *)kt_workload_key(t->wl[i]);
        m->wl[i].json = (char *)kt_workload_json(t->wl[i]);
        m->wl[i].flop_count = kt_workload_flops(t->wl[i]);
        ktune__v1__task__init(&m->task[i]);
        m->task[i].workload = &m->wl[i];
        m->task[i].weight = t->weight[i];
        if (t->desc && t->desc[i])
            m->task[i].desc = t->desc[i];
        m->task[i].target = (char *)(a->target ? a->target : "cpu");
        m->taskp[i] = &m->task[i];
    }
    m->job.tasks = m->taskp;
    m->job.n_tasks = (size_t)t->n;
    m->job.target = (char *)(a->target ? a->target : "cpu");
    m->job.runner_key = (char *)runner_key(a);
    m->job.strategy = (char *)(a->strategy ? a->strategy : "");
    m->job.policy = (char *)(a->policy ? a->policy : "");
    m->job.priority = a->priority;
    m->opts.num_measure_trials = (int32_t)(a->trials ? a->trials : 64LL * t->n);
    m->opts.more_trials = (int32_t)a->more;
    m->opts.num_measures_per_round = a->per_round;
    m->opts.early_stopping = a->early;
    m->opts.seed = a->seed;
    m->opts.search_params = (char *)(a->search_params ? a->search_params : "");
    m->opts.no_transfer = a->no_transfer;
    /* A network's layers read their weights from memory once per inference,
     * so a CPU network job times candidates that way unless told otherwise
     * (TVM's x86 network tutorial flushes the caches likewise). */
    int fw = a->flush_weights >= 0 ? a->flush_weights
                                   : kt_cli_net_given(&a->net) && !a->cache_flush &&
                                         (!a->target || strcmp(a->target, "cpu") == 0);
    m->mo.number = a->number;
    m->mo.repeat = a->repeat ? a->repeat : fw || a->cache_flush ? 3 : 0;
    m->mo.min_repeat_ms = a->min_repeat_given ? a->min_repeat : KT_JOB_DEFAULT_MIN_REPEAT_MS;
    m->mo.timeout_ms = a->run_timeout;
    m->mo.check_correctness = !a->no_check;
    m->mo.enable_cpu_cache_flush = a->cache_flush;
    m->mo.flush_weights = fw;
    m->opts.measure = &m->mo;
    m->job.options = &m->opts;
    return 0;
}

static void job_msg_free(job_msg_t *m)
{
    free(m->task);
    free(m->taskp);
    free(m->wl);
}

/* ---- Submit and watch ---------------------------------------------------------------------- */

/* SubmitJob; *id the job, *existing (optional) 1 when the tracker already
 * had it under this request id (an earlier attempt's answer was lost). */
static int submit(const char *cmd, const kt_cli_conn_t *c, const job_msg_t *m, int64_t *id,
                  int *existing)
{
    Ktune__V1__SubmitJobRequest req = KTUNE__V1__SUBMIT_JOB_REQUEST__INIT;
    req.job = (Ktune__V1__Job *)&m->job;
    req.request_id = (char *)m->request_id;
    ProtobufCMessage *out = NULL;
    if (kt_cli_call(cmd, c, "/ktune.v1.Tracker/SubmitJob", &req.base,
                    &ktune__v1__submit_job_response__descriptor, &out))
        return 1;
    const Ktune__V1__SubmitJobResponse *r = (const Ktune__V1__SubmitJobResponse *)out;
    *id = r->job_id;
    if (existing)
        *existing = r->existing;
    /* Said before the job runs: a budget the store covers ends it at once,
     * which looks like nothing happened unless the user is told why. On
     * stderr, so that `ktune submit` still prints only the id on stdout. */
    if (r->notice && *r->notice)
        fprintf(stderr, "ktune %s: job %" PRId64 ": %s\n", cmd, r->job_id, r->notice);
    protobuf_c_message_free_unpacked(out, NULL);
    return 0;
}

static void print_best_json(const char *cmd, const kt_cli_conn_t *c, int64_t id, json_t *root)
{
    Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
    req.job_id = id;
    ProtobufCMessage *out = NULL;
    json_t *arr = json_array();
    if (kt_cli_call(cmd, c, "/ktune.v1.Tracker/QueryBest", &req.base,
                    &ktune__v1__query_best_response__descriptor, &out) == 0) {
        Ktune__V1__QueryBestResponse *r = (Ktune__V1__QueryBestResponse *)out;
        for (size_t i = 0; i < r->n_records; i++)
            json_array_append_new(arr, json_pack("{s:I, s:s, s:f, s:s, s:I}", "id",
                                                 (json_int_t)r->records[i]->id, "workload_key",
                                                 r->records[i]->workload_key, "mean_cost",
                                                 r->records[i]->mean_cost, "state",
                                                 r->records[i]->state_json, "job_id",
                                                 (json_int_t)r->records[i]->job_id));
        protobuf_c_message_free_unpacked(out, NULL);
    }
    json_object_set_new(root, "best", arr);
}

/* Set when ktune tune is interrupted or a daemon died: the tune thread
 * stops waiting, and a watch broken by stopping the tracker is no error. */
static atomic_int g_abort;
/* The job the watch follows and its last progress, for the message after
 * an interrupt (written by the tune thread, read after joining it). */
static atomic_llong g_job_id;
static atomic_int g_job_trials, g_job_budget;

/* Follow job `id` until it ends: 0 when done, 1 when it failed, was
 * cancelled or the stream broke (message printed). summary: print the
 * final results (tune). The progress goes to out (stdout, or stderr for a
 * command whose stdout says something else). */
static int watch_to(const char *cmd, const kt_cli_conn_t *c, int64_t id, int summary, FILE *out)
{
    kt_rpc_client_t *cl = kt_cli_connect(cmd, c);
    if (!cl)
        return 1;
    Ktune__V1__JobRef req = KTUNE__V1__JOB_REF__INIT;
    req.job_id = id;
    kt_rpc_reader_t *rd = kt_rpc_reader_open(cl, "/ktune.v1.Tracker/WatchJob", &req.base,
                                             &ktune__v1__job_progress__descriptor,
                                             WATCH_DEADLINE_MS);
    if (!rd) {
        kt_rpc_client_free(cl);
        return kt_cli_fail(cmd);
    }
    ProtobufCMessage *last = NULL, *msg = NULL;
    int r, printed_trials = -1;
    while ((r = kt_rpc_reader_next(rd, &msg)) == 1) {
        Ktune__V1__JobProgress *p = (Ktune__V1__JobProgress *)msg;
        /* The message of the job's end repeats the last round's table. */
        int repeat = p->total_trials == printed_trials && strcmp(p->state, "running") != 0;
        printed_trials = p->total_trials;
        atomic_store(&g_job_id, (long long)id);
        atomic_store(&g_job_trials, p->total_trials);
        atomic_store(&g_job_budget, p->budget);
        if (repeat && !c->json) {
            Ktune__V1__JobProgress bar = *p;
            bar.table = NULL;
            kt_cli_print_progress(&bar, out);
        } else if (!c->json || !summary) {
            if (c->json) {
                json_t *j = kt_cli_progress_json(p);
                char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
                json_decref(j);
                if (text)
                    printf("%s\n", text);
                free(text);
                fflush(stdout);
            } else {
                kt_cli_print_progress(p, out);
            }
        }
        if (last)
            protobuf_c_message_free_unpacked(last, NULL);
        last = msg;
    }
    kt_rpc_status_t st = {0};
    int crc = kt_rpc_reader_close(rd, &st);
    int rc = 0;
    if ((crc != 0 || r < 0) && atomic_load(&g_abort)) {
        rc = 1;   /* ktune tune stopped the tracker itself; it says what happened */
    } else if (crc != 0 || r < 0) {
        rc = kt_cli_rpc_fail(cmd, c, &st);
    } else if (!last) {
        fprintf(stderr, "ktune %s: the tracker sent no progress for job %" PRId64 "\n", cmd, id);
        rc = 1;
    } else {
        Ktune__V1__JobProgress *p = (Ktune__V1__JobProgress *)last;
        int done = strcmp(p->state, "done") == 0;
        if (summary && c->json) {
            json_t *root = json_pack("{s:o}", "job", kt_cli_progress_json(p));
            print_best_json(cmd, c, id, root);
            kt_cli_print_json(root);
        } else if (summary) {
            printf("Job %" PRId64 " %s%s%s\n", p->job_id, p->state,
                   p->message && *p->message ? ": " : "", p->message ? p->message : "");
            kt_cli_print_best_summary(p, stdout);
        } else if (!c->json && p->message && *p->message) {
            fprintf(out, "%s\n", p->message);
        }
        if (!done) {
            fprintf(stderr, "ktune %s: job %" PRId64 " %s%s%s\n", cmd, id, p->state,
                    p->message && *p->message ? ": " : "", p->message ? p->message : "");
            rc = 1;
        }
    }
    if (last)
        protobuf_c_message_free_unpacked(last, NULL);
    kt_rpc_client_free(cl);
    return rc;
}

static int watch(const char *cmd, const kt_cli_conn_t *c, int64_t id, int summary)
{
    return watch_to(cmd, c, id, summary, stdout);
}

int kt_cli_submit(int argc, char **argv)
{
    job_args_t a;
    int rc = parse_job_args("submit", argc, argv, 0, &a);
    if (rc < 0) {
        printf("usage: ktune submit (--network NAME | --network-file F | --onnx MODEL |\n"
               "                     --workload FILE|JSON) --tracker HOST:PORT [options]\n"
               "\n"
               "Submit a tuning job and print its id; the job runs on the tracker whether or\n"
               "not anyone watches it (ktune watch JOB, ktune status JOB).\n"
               "\n"
               "options:\n%s%s",
               KT_CLI_NET_HELP, JOB_HELP);
        return 0;
    }
    if (rc)
        return rc;
    if (!a.conn.tracker) {
        fprintf(stderr, "ktune submit: --tracker HOST:PORT is required (ktune tune runs a local "
                        "one)\n");
        return 2;
    }
    tasks_t t;
    if (load_tasks("submit", &a, &t))
        return 1;
    job_msg_t m;
    int64_t id = 0;
    int existing = 0;
    rc = job_msg_make(&a, &t, &m) ? kt_cli_fail("submit")
                                  : submit("submit", &a.conn, &m, &id, &existing);
    if (rc == 0) {
        if (a.conn.json)
            kt_cli_print_json(json_pack("{s:I, s:b}", "job_id", (json_int_t)id, "existing",
                                        existing));
        else
            printf("%" PRId64 "\n", id);
    }
    job_msg_free(&m);
    tasks_free(&t);
    return rc;
}

int kt_cli_watch(int argc, char **argv)
{
    static const struct option opts[] = {KT_CLI_CONN_OPTIONS,
                                         {"json", no_argument, 0, O_JSON},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    kt_cli_conn_t c;
    kt_cli_conn_init(&c, 0);
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int conn = kt_cli_conn_option("watch", &c, o, optarg);
        if (conn == 2)
            return 2;
        switch (conn ? 0 : o) {
        case 0: break;
        case O_JSON: c.json = 1; break;
        case 'h':
        case O_HELP:
            printf("usage: ktune watch JOB --tracker HOST:PORT [--token-file F] [--tls-ca F]\n"
                   "                  [--tls-client-cert F --tls-client-key F] [--json]\n"
                   "\n"
                   "Print the job's task scheduler table and progress after every round until\n"
                   "the job ends (--json: one JSON object per line). Leaving does not stop the\n"
                   "job.\n"
                   "\n"
                   "exit status: 0 the job is done; 1 it failed or was cancelled, or the\n"
                   "tracker cannot be reached (message on stderr); 2 bad usage\n");
            return 0;
        default:
            fprintf(stderr, "ktune watch: bad option '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    int64_t id = 0;
    if (optind >= argc) {
        fprintf(stderr, "ktune watch: which job? (ktune watch JOB --tracker HOST:PORT)\n");
        return 2;
    }
    if (kt_cli_parse_id("watch", "JOB", argv[optind++], &id))
        return 2;
    if (optind < argc) {
        fprintf(stderr, "ktune watch: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!c.tracker) {
        fprintf(stderr, "ktune watch: --tracker HOST:PORT is required (ktune watch JOB "
                        "--tracker HOST:PORT)\n");
        return 2;
    }
    if (kt_cli_conn_check("watch", &c))
        return 2;
    return watch("watch", &c, id, 0);
}

/* ---- The embedded tracker, worker and runner ---------------------------------------------------- */

typedef struct {
    const char *name;
    pid_t pid;
    char log[PATH_MAX];
} child_t;

typedef struct {
    char dir[512];             /* private temporary directory */
    char token[PATH_MAX];      /* token file inside it */
    char addr[300];            /* the tracker's address */
    child_t tracker, worker, runner;
} embedded_t;

static int executable_at(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

/* The daemon `name`: next to this executable, in the build tree's
 * ../<subdir>, or in PATH. */
static int find_daemon(const char *name, const char *subdir, char *out, size_t size)
{
    char self[2048];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, size, "%s/%s", self, name);
            if (executable_at(out))
                return 0;
            snprintf(out, size, "%s/../%s/%s", self, subdir, name);
            if (executable_at(out))
                return 0;
        }
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0) {
            snprintf(out, size, "%.*s/%s", (int)len, path, name);
            if (executable_at(out))
                return 0;
        }
        path = end ? end + 1 : NULL;
    }
    fprintf(stderr, "ktune tune: cannot find %s next to ktune, in ../%s or in PATH\n", name,
            subdir);
    return 1;
}

/* Start bin with args (NULL-terminated) as a child with its output in
 * dir/<name>.log. Called before this process has any thread. */
static int spawn(embedded_t *e, child_t *c, const char *name, const char *bin, char *const args[])
{
    c->name = name;
    snprintf(c->log, sizeof c->log, "%s/%s.log", e->dir, name);
    int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "ktune tune: %s: %s\n", c->log, strerror(errno));
        return 1;
    }
    char *argv[32] = {(char *)bin};
    int argc = 1;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ktune tune: fork: %s\n", strerror(errno));
        close(fd);
        return 1;
    }
    if (pid == 0) {
        /* Its own process group: Ctrl-C reaches ktune, which stops it in order. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* This process has no thread yet, so setenv is safe here. */
        setenv("TMPDIR", e->dir, 1);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, argv);
        _exit(127);
    }
    close(fd);
    c->pid = pid;
    return 0;
}

/* The last lines of a child's log, for an error message. */
static void print_log_tail(const child_t *c)
{
    size_t len = 0;
    char *s = kt_file_read(c->log, &len);
    if (!s)
        return;
    const char *from = s;
    int lines = 0;
    for (size_t i = len; i > 0; i--)
        if (s[i - 1] == '\n' && ++lines > 8) {
            from = s + i;
            break;
        }
    fprintf(stderr, "--- end of %s's log:\n%s", c->name, from);
    free(s);
}

/* 1 when the child has exited (reaped). */
static int child_exited(child_t *c)
{
    if (c->pid <= 0)
        return 1;
    int st;
    if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
        c->pid = 0;
        return 1;
    }
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* SIGTERM, then SIGKILL after STOP_WAIT_MS; reaps. */
static void stop_child(child_t *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGTERM);
    for (int waited = 0; waited < STOP_WAIT_MS; waited += 20) {
        if (child_exited(c))
            return;
        sleep_ms(20);
    }
    fprintf(stderr, "ktune tune: %s did not stop within %d s; killing it\n", c->name,
            STOP_WAIT_MS / 1000);
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void embedded_cleanup(embedded_t *e)
{
    stop_child(&e->tracker);
    stop_child(&e->worker);
    stop_child(&e->runner);
    if (!*e->dir)
        return;
    /* The daemons' own temporary files (TMPDIR) are in there too. */
    nftw(e->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh random token in a 0600 file. */
static int write_token(embedded_t *e)
{
    char hex[2 * 24 + 2];
    if (kt_cli_random_hex(hex, 24) != 0) {
        fprintf(stderr, "ktune tune: the token: %s\n", kt_err_msg());
        return 1;
    }
    strcat(hex, "\n");
    snprintf(e->token, sizeof e->token, "%s/token", e->dir);
    int fd = open(e->token, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, hex, strlen(hex)) == (ssize_t)strlen(hex);
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "ktune tune: writing %s: %s\n", e->token, strerror(errno));
    return !ok;
}

/* Start the tracker, then the worker and the runner registering with it.
 * Runs before any thread exists (gRPC does not survive fork). */
static int embedded_start(embedded_t *e, const job_args_t *a)
{
    char tracker_bin[PATH_MAX], worker_bin[PATH_MAX], runner_bin[PATH_MAX];
    if (find_daemon("ktune-tracker", "tracker", tracker_bin, sizeof tracker_bin) ||
        find_daemon("ktune-worker", "worker", worker_bin, sizeof worker_bin) ||
        find_daemon("ktune-runner", "server", runner_bin, sizeof runner_bin))
        return 1;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 400)
        tmp = "/tmp";
    snprintf(e->dir, sizeof e->dir, "%s/ktune-tune-XXXXXX", tmp);
    if (!mkdtemp(e->dir)) {
        fprintf(stderr, "ktune tune: cannot make a temporary directory: %s\n", strerror(errno));
        e->dir[0] = '\0';
        return 1;
    }
    if (write_token(e))
        return 1;
    char port_file[PATH_MAX + 16];
    snprintf(port_file, sizeof port_file, "%s/tracker.addr", e->dir);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", (char *)a->conn.db,
                     "--port-file", port_file, "--token-file", e->token, "--heartbeat-ms",
                     "1000", NULL};
    if (spawn(e, &e->tracker, "ktune-tracker", tracker_bin, targs))
        return 1;
    for (int waited = 0;; waited += 20) {
        char *s = kt_file_read(port_file, NULL);
        if (s) {
            s[strcspn(s, "\n")] = '\0';
            snprintf(e->addr, sizeof e->addr, "%s", s);
            free(s);
            break;
        }
        if (child_exited(&e->tracker) || waited >= START_WAIT_MS) {
            fprintf(stderr, "ktune tune: the embedded tracker did not start (store %s)\n",
                    a->conn.db);
            print_log_tail(&e->tracker);
            return 1;
        }
        sleep_ms(20);
    }
    char *wargs[] = {"--tracker", e->addr, "--listen", "127.0.0.1:0", "--token-file", e->token,
                     NULL};
    /* A cuda job gets the first GPU (a runner without one stops at once,
     * saying why). */
    int cuda = a->target && strcmp(a->target, "cuda") == 0;
    char *rargs[] = {"--tracker", e->addr, "--listen", "127.0.0.1:0", "--key",
                     (char *)runner_key(a), "--device", cuda ? "cuda:0" : "cpu", "--token-file",
                     e->token, "--drain-ms", "5000", NULL};
    if (spawn(e, &e->worker, "ktune-worker", worker_bin, wargs) ||
        spawn(e, &e->runner, "ktune-runner", runner_bin, rargs))
        return 1;
    return 0;
}


/* Wait until the runner and the worker have registered. 0 or 1. */
/* Wait up to wait_ms for a runner of `key` and a worker to be registered
 * with the tracker: 0 when they are, 1 when not in time or interrupted,
 * 2 when the tracker cannot be reached (said). */
static int wait_peers(const char *cmd, const kt_cli_conn_t *c, const char *key, int wait_ms)
{
    kt_rpc_client_t *cl = kt_cli_connect(cmd, c);
    if (!cl)
        return 2;
    int rc = 1;
    for (int waited = 0; waited < wait_ms && !atomic_load(&g_abort); waited += 100) {
        Ktune__V1__QueueStatusRequest req = KTUNE__V1__QUEUE_STATUS_REQUEST__INIT;
        ProtobufCMessage *out = NULL;
        kt_rpc_status_t st = {0};
        if (kt_rpc_call_unary(cl, "/ktune.v1.Tracker/QueueStatus", &req.base,
                              &ktune__v1__queue_status_response__descriptor, 5000, &out,
                              &st) == 0) {
            Ktune__V1__QueueStatusResponse *q = (Ktune__V1__QueueStatusResponse *)out;
            int runners = 0, workers = 0;
            for (size_t i = 0; i < q->n_peers; i++) {
                runners += strcmp(q->peers[i]->role, "runner") == 0 &&
                           strcmp(q->peers[i]->key, key) == 0;
                workers += strcmp(q->peers[i]->role, "worker") == 0;
            }
            protobuf_c_message_free_unpacked(out, NULL);
            if (runners > 0 && workers > 0) {
                rc = 0;
                break;
            }
        } else if (st.code == KT_RPC_UNAUTHENTICATED || st.code == KT_RPC_PERMISSION_DENIED) {
            kt_cli_rpc_fail(cmd, c, &st);
            rc = 2;
            break;
        }
        sleep_ms(100);
    }
    kt_rpc_client_free(cl);
    return rc;
}

int kt_cli_run_job(const char *cmd, const kt_cli_conn_t *c, const kt_workload_t *const *wl,
                   const double *weight, char *const *desc, int n, const char *target,
                   const char *key, int trials, int64_t *job_id)
{
    job_args_t a;
    memset(&a, 0, sizeof a);
    a.conn = *c;
    a.conn.json = 0;
    a.target = target;
    a.key = key;
    /* --more: trials beyond what the store holds of the tasks (failed
     * records, or another key's), which would otherwise eat the budget. */
    a.more = (long long)trials * n;
    /* One round of `trials` per task: the task scheduler gives every task
     * its first round before any gets a second, so each task's round is its
     * transfer seeds and the store model's picks. */
    a.per_round = trials;
    a.flush_weights = !target || strcmp(target, "cpu") == 0;
    tasks_t t = {.wl = (kt_workload_t **)wl, .weight = (double *)weight, .desc = (char **)desc,
                 .n = n};
    job_msg_t m;
    /* A job no runner of the key takes would wait for one for ever. */
    int rc = wait_peers(cmd, c, key, PEER_WAIT_MS);
    if (rc == 1)
        fprintf(stderr, "ktune %s: no runner of device key %s and worker registered with the "
                        "tracker at %s within %d s (ktune queue lists them)\n", cmd, key,
                c->tracker, PEER_WAIT_MS / 1000);
    if (rc)
        return 1;
    rc = job_msg_make(&a, &t, &m) ? kt_cli_fail(cmd) : submit(cmd, c, &m, job_id, NULL);
    job_msg_free(&m);
    return rc ? rc : watch_to(cmd, &a.conn, *job_id, 0, stderr);
}

/* An unfinished job of the store with these tasks, target and key (the
 * tracker resumed it on start); 0 when none. */
static int64_t find_unfinished(const kt_cli_conn_t *c, const job_msg_t *m)
{
    Ktune__V1__ListJobsRequest req = KTUNE__V1__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    if (kt_cli_call("tune", c, "/ktune.v1.Tracker/ListJobs", &req.base,
                    &ktune__v1__list_jobs_response__descriptor, &out))
        return -1;
    Ktune__V1__ListJobsResponse *l = (Ktune__V1__ListJobsResponse *)out;
    int64_t found = 0;
    for (size_t i = 0; i < l->n_jobs && !found; i++) {
        const Ktune__V1__JobProgress *p = l->jobs[i];
        if ((strcmp(p->state, "running") != 0 && strcmp(p->state, "queued") != 0) ||
            strcmp(p->target, m->job.target) != 0 ||
            strcmp(p->runner_key, m->job.runner_key) != 0 || p->n_tasks != m->job.n_tasks)
            continue;
        int same = 1;
        for (size_t k = 0; k < p->n_tasks && same; k++)
            same = strcmp(p->tasks[k]->workload_key, m->job.tasks[k]->workload->key) == 0;
        if (same)
            found = p->job_id;
    }
    protobuf_c_message_free_unpacked(out, NULL);
    return found;
}

typedef struct {
    const job_args_t *a;
    kt_cli_conn_t conn;        /* a->conn aimed at the embedded tracker */
    const job_msg_t *m;
    int rc;
} tune_ctx_t;

static void *tune_thread(void *arg)
{
    tune_ctx_t *x = arg;
    x->rc = 1;
    int peers = wait_peers("tune", &x->conn, x->m->job.runner_key, START_WAIT_MS);
    if (peers == 1 && !atomic_load(&g_abort))
        fprintf(stderr, "ktune tune: the embedded runner and worker did not register within "
                        "%d s\n", START_WAIT_MS / 1000);
    if (peers == 0) {
        int64_t id = find_unfinished(&x->conn, x->m);
        if (id > 0) {
            if (!x->conn.json)
                printf("Resuming job %" PRId64 " from %s (what is stored is not measured "
                       "again)\n", id, x->a->conn.db);
            x->rc = watch("tune", &x->conn, id, 1);
        } else if (id == 0 && submit("tune", &x->conn, x->m, &id, NULL) == 0) {
            if (!x->conn.json)
                printf("Job %" PRId64 " submitted to the embedded tracker (store %s)\n", id,
                       x->a->conn.db);
            x->rc = watch("tune", &x->conn, id, 1);
        }
    }
    kill(getpid(), SIGUSR1);
    return NULL;
}

static int tune_embedded(const job_args_t *a, const job_msg_t *m)
{
    /* Blocked before any thread exists: gRPC's threads inherit the mask and
     * only the sigwait below sees these. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    embedded_t e;
    memset(&e, 0, sizeof e);
    int rc = 1;
    if (embedded_start(&e, a) != 0) {
        embedded_cleanup(&e);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    tune_ctx_t x = {.a = a, .conn = a->conn, .m = m, .rc = 1};
    x.conn.tracker = e.addr;
    x.conn.token_file = e.token;
    x.conn.tls_ca = x.conn.tls_client_cert = x.conn.tls_client_key = NULL;
    pthread_t th;
    if (pthread_create(&th, NULL, tune_thread, &x) != 0) {
        fprintf(stderr, "ktune tune: cannot start a thread\n");
        embedded_cleanup(&e);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    int interrupted = 0;
    for (;;) {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (sig == SIGUSR1)
            break;
        if (sig == SIGCHLD) {
            child_t *kids[] = {&e.tracker, &e.worker, &e.runner};
            int died = 0;
            for (int i = 0; i < 3; i++)
                if (kids[i]->pid > 0 && child_exited(kids[i])) {
                    fprintf(stderr, "ktune tune: the embedded %s exited unexpectedly\n",
                            kids[i]->name);
                    print_log_tail(kids[i]);
                    died = 1;
                }
            if (!died)
                continue;
        } else {
            interrupted = sig;
        }
        atomic_store(&g_abort, 1);
        break;
    }
    /* The tracker first: it stops the job (resumable) and ends the watch. */
    stop_child(&e.tracker);
    pthread_join(th, NULL);
    embedded_cleanup(&e);
    rc = atomic_load(&g_abort) ? 1 : x.rc;
    /* The thread's SIGUSR1 may still be pending: take it before unblocking. */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&sigs, NULL, &zero) > 0)
        ;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!interrupted)
        return rc;
    /* Said after the tracker has stopped, so the count is what is stored. */
    const char *what = interrupted == SIGINT ? "interrupted" : "terminated";
    long long jid = atomic_load(&g_job_id);
    if (jid > 0)
        fprintf(stderr, "\nktune tune: %s: job %lld stopped at %d of %d trials; run the same "
                        "command again to resume it (store %s)\n",
                what, jid, atomic_load(&g_job_trials), atomic_load(&g_job_budget), a->conn.db);
    else
        fprintf(stderr, "\nktune tune: %s before the job started (store %s)\n", what,
                a->conn.db);
    /* The shell's convention for a command ended by a signal. */
    return 128 + interrupted;
}

static void tune_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune tune (--network NAME | --network-file F | --onnx MODEL |\n"
            "                   --workload FILE|JSON) [options]\n"
            "\n"
            "Tune every task of a network (or the given workloads) and print the task\n"
            "scheduler's table after every round, then the best kernel of each task.\n"
            "Without --tracker, ktune starts its own tracker, worker and CPU runner on\n"
            "127.0.0.1 (with a fresh token) and stops them at the end or on Ctrl-C; the\n"
            "records go to --db PATH (default ./ktune.db), and running the same command\n"
            "again resumes from there: nothing stored is measured again. With --tracker,\n"
            "the job is submitted there and watched (leaving does not stop it).\n"
            "\n"
            "options:\n%s%s"
            "  --db PATH             the embedded tracker's store (default ./ktune.db)\n",
            KT_CLI_NET_HELP, JOB_HELP);
}

int kt_cli_tune(int argc, char **argv)
{
    job_args_t a;
    int rc = parse_job_args("tune", argc, argv, 1, &a);
    if (rc < 0) {
        tune_usage(stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (a.conn.tracker && a.conn.db_given) {
        fprintf(stderr, "ktune tune: --db is the embedded tracker's store; a tracker given with "
                        "--tracker has its own\n");
        return 2;
    }
    tasks_t t;
    if (load_tasks("tune", &a, &t))
        return 1;
    job_msg_t m;
    if (job_msg_make(&a, &t, &m)) {
        job_msg_free(&m);
        tasks_free(&t);
        fprintf(stderr, "ktune tune: %s\n", kt_err_msg());
        return 1;
    }
    if (a.conn.tracker) {
        int64_t id = 0;
        rc = submit("tune", &a.conn, &m, &id, NULL);
        if (rc == 0) {
            if (!a.conn.json)
                printf("Job %" PRId64 " submitted to %s\n", id, a.conn.tracker);
            rc = watch("tune", &a.conn, id, 1);
        }
    } else {
        rc = tune_embedded(&a, &m);
    }
    job_msg_free(&m);
    tasks_free(&t);
    return rc;
}
