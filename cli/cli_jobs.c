/*
 * ktune status, cancel, best and export: reading jobs and their best
 * kernels from a tracker (--tracker) or straight from a store file (--db),
 * plus the helpers every job command shares (cli.h): connecting to a
 * tracker, reporting RPC failures, printing and converting progress.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "codegen/codegen.h"
#include "service/job_view.h"
#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "sched/state.h"
#include "search/search.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/kt_limits.h"
#include "util/sbuf.h"
#include "util/util.h"

/* ---- Shared helpers ------------------------------------------------------------------------- */

void kt_cli_conn_init(kt_cli_conn_t *c, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->token_file = getenv("KT_TOKEN_FILE");
    c->db = KT_CLI_DEFAULT_DB;
    c->timeout_ms = timeout_ms;
}

int kt_cli_conn_option(const char *cmd, kt_cli_conn_t *c, int code, const char *arg)
{
    /* An empty address or file would otherwise mean "none given" further on. */
    static const char *const names[] = {"--tracker", "--token-file", "--tls-ca",
                                        "--timeout", "--tls-client-cert", "--tls-client-key"};
    if (code >= KT_CLI_O_TRACKER && code <= KT_CLI_O_CLIENT_KEY &&
        kt_cli_nonempty(cmd, names[code - KT_CLI_O_TRACKER], arg))
        return 2;
    switch (code) {
    case KT_CLI_O_TRACKER: c->tracker = arg; return 1;
    case KT_CLI_O_TOKEN: c->token_file = arg; return 1;
    case KT_CLI_O_CA: c->tls_ca = arg; return 1;
    case KT_CLI_O_CLIENT_CERT: c->tls_client_cert = arg; return 1;
    case KT_CLI_O_CLIENT_KEY: c->tls_client_key = arg; return 1;
    case KT_CLI_O_TIMEOUT: {
        long long v = 0;
        if (kt_cli_parse_num(cmd, "--timeout (milliseconds)", arg, 1, 3600000, &v))
            return 2;
        c->timeout_ms = (int)v;
        return 1;
    }
    default: return 0;
    }
}

int kt_cli_conn_db(const char *cmd, kt_cli_conn_t *c, const char *arg)
{
    if (kt_cli_nonempty(cmd, "--db", arg))
        return 2;
    c->db = arg;
    c->db_given = 1;
    return 0;
}

int kt_cli_conn_check(const char *cmd, const kt_cli_conn_t *c)
{
    kt_rpc_tls_files_t tls = {.ca = c->tls_ca, .client_cert = c->tls_client_cert,
                              .client_key = c->tls_client_key};
    if (kt_rpc_tls_check(&tls) != 0) {
        fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
        return 2;
    }
    return 0;
}

kt_rpc_client_t *kt_cli_connect(const char *cmd, const kt_cli_conn_t *c)
{
    char *token = NULL;
    if (c->token_file && *c->token_file && !(token = kt_token_read(c->token_file))) {
        fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
        return NULL;
    }
    int t = c->timeout_ms > 0 ? c->timeout_ms : KT_CLI_DEFAULT_TIMEOUT_MS;
    kt_rpc_client_opts_t co = {.token = token, .tls_ca = c->tls_ca,
                               .tls_cert = c->tls_client_cert, .tls_key = c->tls_client_key,
                               .deadline_ms = t, .retry_attempts = 3, .retry_total_ms = t};
    kt_rpc_client_t *cl = kt_rpc_client_new(c->tracker, &co);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    if (!cl)
        fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
    return cl;
}

int kt_cli_rpc_fail(const char *cmd, const kt_cli_conn_t *c, const kt_rpc_status_t *st)
{
    switch (st->code) {
    case KT_RPC_UNAVAILABLE:
        fprintf(stderr, "ktune %s: cannot reach the tracker at %s (%s)\n", cmd, c->tracker,
                st->msg);
        break;
    case KT_RPC_UNAUTHENTICATED:
        fprintf(stderr, "ktune %s: the tracker at %s refused the call: UNAUTHENTICATED (%s)\n",
                cmd, c->tracker,
                c->token_file && *c->token_file
                    ? "wrong token"
                    : "a token is required; use --token-file or KT_TOKEN_FILE");
        break;
    case KT_RPC_DEADLINE_EXCEEDED:
        fprintf(stderr, "ktune %s: the tracker at %s did not answer in time\n", cmd, c->tracker);
        break;
    case KT_RPC_NOT_FOUND:
    case KT_RPC_INVALID_ARGUMENT:
    case KT_RPC_FAILED_PRECONDITION:
    case KT_RPC_UNIMPLEMENTED:
        fprintf(stderr, "ktune %s: %s\n", cmd, st->msg);
        break;
    default:
        fprintf(stderr, "ktune %s: %s: %s: %s\n", cmd, c->tracker, kt_rpc_code_name(st->code),
                st->msg);
        break;
    }
    return 1;
}

int kt_cli_call(const char *cmd, const kt_cli_conn_t *c, const char *method,
                const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **resp)
{
    kt_rpc_client_t *cl = kt_cli_connect(cmd, c);
    if (!cl)
        return 1;
    kt_rpc_status_t st = {0};
    int rc = kt_rpc_call_unary(cl, method, req, desc, 0, resp, &st);
    kt_rpc_client_free(cl);
    return rc == 0 ? 0 : kt_cli_rpc_fail(cmd, c, &st);
}

kt_store_t *kt_cli_open_store(const char *cmd, const char *db)
{
    /* Read-write without create: a read-only handle on a WAL database leaves
     * -wal and -shm files behind (see cli_records.c). */
    kt_store_t *s = kt_store_open(db, 0);
    if (!s) {
        if (kt_err_code() == KT_ENOTFOUND)
            fprintf(stderr, "ktune %s: no store at %s (give --db PATH, or --tracker ADDR)\n", cmd,
                    db);
        else
            fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
    }
    return s;
}

int kt_cli_parse_id(const char *cmd, const char *what, const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !end || *end || v < 1) {
        fprintf(stderr, "ktune %s: %s wants a job id >= 1, not '%s'\n", cmd, what, s);
        return 2;
    }
    *out = v;
    return 0;
}

static json_t *num_or_null(double v)
{
    return v > 0 && isfinite(v) ? json_real(v) : json_null();
}

static json_t *str_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

json_t *kt_cli_progress_json(const Ktune__V1__JobProgress *p)
{
    json_t *tasks = json_array();
    for (size_t i = 0; i < p->n_tasks; i++) {
        const Ktune__V1__TaskProgress *t = p->tasks[i];
        json_array_append_new(
            tasks, json_pack("{s:i, s:s, s:o, s:o, s:i, s:i, s:f, s:f, s:s, s:o}", "id",
                             t->task_id, "workload_key", t->workload_key ? t->workload_key : "",
                             "latency_s", num_or_null(t->best_latency), "gflops",
                             num_or_null(t->gflops), "trials", t->trials, "rounds", t->rounds,
                             "weight", t->weight, "flops", t->flops, "status",
                             t->status ? t->status : "", "best_origin",
                             str_or_null(t->best_origin)));
    }
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:f, s:o, s:i, s:o, "
                     "s:o}",
                     "job_id", (json_int_t)p->job_id, "state", p->state ? p->state : "",
                     "message", p->message ? p->message : "", "target",
                     p->target ? p->target : "", "policy", p->policy ? p->policy : "",
                     "strategy", p->strategy ? p->strategy : "", "search_params",
                     p->search_params ? p->search_params : "", "runner_key",
                     p->runner_key ? p->runner_key : "", "created", p->created, "budget",
                     p->budget, "total_trials", p->total_trials, "elapsed_s", p->elapsed,
                     "estimated_latency_s", num_or_null(p->estimated_total_latency),
                     "next_task", p->next_task, "tasks", tasks, "store_model",
                     str_or_null(p->store_model));
}

int kt_cli_print_json(json_t *j)
{
    char *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    json_decref(j);
    if (!text) {
        fprintf(stderr, "ktune: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    fflush(stdout);
    return 0;
}

void kt_cli_print_progress(const Ktune__V1__JobProgress *p, FILE *out)
{
    if (p->table)
        fputs(p->table, out);
    int width = 30;
    int done = p->budget > 0 ? (int)((int64_t)width * (p->total_trials > p->budget ? p->budget
                                                                                   : p->total_trials) /
                                     p->budget)
                             : 0;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = '\0';
    char lat[48] = "-";
    if (p->estimated_total_latency > 0)
        snprintf(lat, sizeof lat, "%.4f ms", p->estimated_total_latency * 1e3);
    fprintf(out, "[%s] job %" PRId64 " %s: %d/%d trials (%d%%), est. total latency %s, %.0f s\n",
            bar, p->job_id, p->state ? p->state : "", p->total_trials, p->budget,
            p->budget > 0 ? (int)(100LL * p->total_trials / p->budget) : 0, lat, p->elapsed);
    fflush(out);
}

/* One line: how many tasks' bests each origin proposed, and the store
 * model (version / records) the job's cost model starts from. */
static void print_origins(const Ktune__V1__JobProgress *p, FILE *out)
{
    static const int order[] = {KT_STORE_ORIGIN_TRANSFER, KT_STORE_ORIGIN_MODEL,
                                KT_STORE_ORIGIN_RANDOM, KT_STORE_ORIGIN_SIBLING,
                                KT_STORE_ORIGIN_UNKNOWN};
    int count[KT_ARRAY_LEN(order)] = {0}, none = 0;
    for (size_t i = 0; i < p->n_tasks; i++) {
        const char *o = p->tasks[i]->best_origin;
        int origin = o && *o ? kt_store_origin_parse(o) : -1;
        size_t k = 0;
        while (k + 1 < KT_ARRAY_LEN(order) && order[k] != origin)
            k++;   /* a name this client does not know counts as unknown */
        if (!o || !*o)
            none++;
        else
            count[k]++;
    }
    fprintf(out, "Best from:");
    const char *sep = " ";
    for (size_t k = 0; k < KT_ARRAY_LEN(order); k++)
        if (count[k]) {
            fprintf(out, "%s%s %d", sep, kt_store_origin_name(order[k]), count[k]);
            sep = ", ";
        }
    if (none)
        fprintf(out, "%snone yet %d", sep, none);
    /* Empty also for a job read from the store, which does not keep it. */
    if (p->store_model && *p->store_model)
        fprintf(out, " (tasks); its cost model starts from the store model %s\n",
                p->store_model);
    else
        fprintf(out, " (tasks)\n");
}

void kt_cli_print_best_summary(const Ktune__V1__JobProgress *p, FILE *out)
{
    fprintf(out, "Best kernels of job %" PRId64 ":\n", p->job_id);
    fprintf(out, "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials | Weight | Origin   | "
                 "Workload key\n");
    for (size_t i = 0; i < p->n_tasks; i++) {
        const Ktune__V1__TaskProgress *t = p->tasks[i];
        char lat[32] = "-", speed[32] = "-";
        if (t->best_latency > 0) {
            snprintf(lat, sizeof lat, "%.4f", t->best_latency * 1e3);
            snprintf(speed, sizeof speed, "%.2f", t->gflops);
        }
        fprintf(out, "| %4d | %12s | %14s | %6d | %6g | %-8s | %s\n", t->task_id, lat, speed,
                t->trials, t->weight, t->best_origin && *t->best_origin ? t->best_origin : "-",
                t->workload_key ? t->workload_key : "");
    }
    print_origins(p, out);
    fflush(out);
}

/* A proto record as a store record (borrowing its strings). */
static void record_from_proto(const Ktune__V1__Record *o, kt_record_t *r)
{
    int origin = kt_store_origin_parse(o->origin);   /* "" or a name unknown here: -1 or 0 */
    *r = (kt_record_t){.id = o->id,
                       .workload_key = o->workload_key,
                       .target = o->target,
                       .state_json = o->state_json,
                       .state_hash = o->state_hash,
                       .costs = o->costs,
                       .ncosts = (int)o->n_costs,
                       .mean_cost = o->mean_cost,
                       .error_code = (int)o->error_code,
                       .error_msg = o->error_msg,
                       .all_cost = o->all_cost,
                       .timestamp = o->timestamp,
                       .runner_key = o->runner_key,
                       .job_id = o->job_id,
                       .runner_id = o->runner_id,
                       .runner_host = o->runner_host,
                       .origin = origin > 0 ? origin : KT_STORE_ORIGIN_UNKNOWN};
}

/* ---- Common options --------------------------------------------------------------------------- */

enum { O_DB = 1000, O_JSON, O_WORKLOAD, O_JOB, O_TARGET, O_TOP, O_FORMAT, O_OUT, O_HELP };

static const struct option read_opts[] = {
    KT_CLI_CONN_OPTIONS,
    {"db", required_argument, 0, O_DB},            {"json", no_argument, 0, O_JSON},
    {"workload", required_argument, 0, O_WORKLOAD}, {"job", required_argument, 0, O_JOB},
    {"target", required_argument, 0, O_TARGET},    {"top", required_argument, 0, O_TOP},
    {"format", required_argument, 0, O_FORMAT},    {"out", required_argument, 0, O_OUT},
    {"help", no_argument, 0, O_HELP},              {0, 0, 0, 0}};

typedef struct {
    kt_cli_conn_t conn;
    const char *workload, *target, *format, *out;
    int64_t job;
    int top;
    int help;
} read_args_t;

static const char *CONN_HELP =
    "  --tracker HOST:PORT   ask this tracker (default: read the store file directly)\n"
    "  --db PATH             the store file to read without a tracker (default ./ktune.db)\n"
    "  --token-file F        the tracker's shared token (default: $KT_TOKEN_FILE)\n"
    "  --tls-ca F            CA certificate (PEM) of a TLS tracker\n"
    KT_CLI_MTLS_HELP
    "  --timeout MS          give up on the tracker after MS milliseconds (default 10000)\n"
    "  --json                print JSON instead of text\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "exit status: 0 success; 1 the operation failed (message on stderr: unreachable\n"
    "tracker, refused token, unknown job, ...); 2 bad usage\n";

/* Parse the options of a read command; `allowed` lists the option codes it
 * takes beyond the connection ones. 0, 2 (bad usage) or -1 (--help). */
static int parse_read(const char *cmd, int argc, char **argv, const int *allowed,
                      read_args_t *a)
{
    memset(a, 0, sizeof *a);
    kt_cli_conn_init(&a->conn, 0);
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, "h", read_opts, &li)) != -1) {
        int ok = c < O_WORKLOAD || c == O_HELP || c == 'h';   /* connection, db, json, help */
        for (const int *p = allowed; !ok && *p; p++)
            ok = *p == c;
        if (!ok || c == '?') {
            /* A known option's value is argv[optind - 1]: name the option itself. */
            if (c != '?' && li >= 0)
                fprintf(stderr, "ktune %s: bad option '--%s': it does not apply here (see "
                                "ktune %s --help)\n", cmd, read_opts[li].name, cmd);
            else
                fprintf(stderr, "ktune %s: bad option '%s' (see ktune %s --help)\n", cmd,
                        argv[optind - 1], cmd);
            return 2;
        }
        li = -1;
        int conn = kt_cli_conn_option(cmd, &a->conn, c, optarg);
        if (conn == 2)
            return 2;
        switch (conn ? 0 : c) {
        case 0: break;
        case O_DB:
            if (kt_cli_conn_db(cmd, &a->conn, optarg))
                return 2;
            break;
        case O_JSON: a->conn.json = 1; break;
        case O_WORKLOAD: a->workload = optarg; break;
        case O_JOB:
            if (kt_cli_parse_id(cmd, "--job", optarg, &a->job))
                return 2;
            break;
        case O_TARGET:
            if (kt_cli_check_target(cmd, "--target", optarg))
                return 2;
            a->target = optarg;
            break;
        case O_TOP: {
            long long v = 0;
            if (kt_cli_parse_num(cmd, "--top", optarg, 1, KT_LIMIT_TOP_K, &v))
                return 2;
            a->top = (int)v;
            break;
        }
        case O_FORMAT: a->format = optarg; break;
        case O_OUT:
            if (kt_cli_nonempty(cmd, "--out", optarg))
                return 2;
            a->out = optarg;
            break;
        case 'h':
        case O_HELP: return -1;
        }
    }
    if (a->conn.tracker && a->conn.db_given) {
        fprintf(stderr, "ktune %s: give --tracker or --db, not both\n", cmd);
        return 2;
    }
    if (kt_cli_conn_check(cmd, &a->conn))
        return 2;
    return 0;
}

/* ---- status ---------------------------------------------------------------------------------- */

static void status_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune status [JOB] [--tracker HOST:PORT | --db PATH] [--json]\n"
            "\n"
            "With JOB: the job's task scheduler table (TVM's format), state and progress.\n"
            "Without: one line per job (id, state, trials, estimated total latency).\n"
            "\n"
            "options:\n%s",
            CONN_HELP);
}

static void print_job_line(const Ktune__V1__JobProgress *p)
{
    char lat[32] = "-", created[32] = "-";
    if (p->estimated_total_latency > 0)
        snprintf(lat, sizeof lat, "%.4f", p->estimated_total_latency * 1e3);
    time_t t = (time_t)p->created;
    struct tm tm;
    if (p->created > 0 && localtime_r(&t, &tm))
        strftime(created, sizeof created, "%Y-%m-%d %H:%M:%S", &tm);
    printf("%6" PRId64 "  %-9s  %7d  %7d  %17s  %5zu  %-13s  %s\n", p->job_id, p->state,
           p->total_trials, p->budget, lat, p->n_tasks, p->policy, created);
}

static void print_job_header(void)
{
    printf("%6s  %-9s  %7s  %7s  %17s  %5s  %-13s  %s\n", "ID", "STATE", "TRIALS", "BUDGET",
           "EST. LATENCY (ms)", "TASKS", "POLICY", "CREATED");
}

static void print_one_job(const Ktune__V1__JobProgress *p, int json)
{
    if (json) {
        kt_cli_print_json(kt_cli_progress_json(p));
        return;
    }
    kt_cli_print_progress(p, stdout);
    if (p->n_tasks)
        print_origins(p, stdout);
    if (p->message && *p->message)
        printf("%s\n", p->message);
}

int kt_cli_status(int argc, char **argv)
{
    static const int allowed[] = {0};
    read_args_t a;
    int rc = parse_read("status", argc, argv, allowed, &a);
    if (rc < 0) {
        status_usage(stdout);
        return 0;
    }
    if (rc)
        return rc;
    int64_t id = 0;
    if (optind < argc && kt_cli_parse_id("status", "JOB", argv[optind++], &id))
        return 2;
    if (optind < argc) {
        fprintf(stderr, "ktune status: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (a.conn.tracker) {
        ProtobufCMessage *out = NULL;
        if (id) {
            Ktune__V1__JobRef req = KTUNE__V1__JOB_REF__INIT;
            req.job_id = id;
            if (kt_cli_call("status", &a.conn, "/ktune.v1.Tracker/JobStatus", &req.base,
                            &ktune__v1__job_progress__descriptor, &out))
                return 1;
            print_one_job((Ktune__V1__JobProgress *)out, a.conn.json);
        } else {
            Ktune__V1__ListJobsRequest req = KTUNE__V1__LIST_JOBS_REQUEST__INIT;
            if (kt_cli_call("status", &a.conn, "/ktune.v1.Tracker/ListJobs", &req.base,
                            &ktune__v1__list_jobs_response__descriptor, &out))
                return 1;
            Ktune__V1__ListJobsResponse *l = (Ktune__V1__ListJobsResponse *)out;
            if (a.conn.json) {
                json_t *arr = json_array();
                for (size_t i = 0; i < l->n_jobs; i++)
                    json_array_append_new(arr, kt_cli_progress_json(l->jobs[i]));
                kt_cli_print_json(json_pack("{s:o}", "jobs", arr));
            } else {
                print_job_header();
                for (size_t i = 0; i < l->n_jobs; i++)
                    print_job_line(l->jobs[i]);
            }
        }
        protobuf_c_message_free_unpacked(out, NULL);
        return 0;
    }
    kt_store_t *s = kt_cli_open_store("status", a.conn.db);
    if (!s)
        return 1;
    int64_t *ids = NULL;
    size_t n = 0;
    if (id) {
        ids = malloc(sizeof *ids);
        if (ids) {
            ids[0] = id;
            n = 1;
        }
    } else if (kt_store_list_jobs(s, NULL, &ids, &n) != 0) {
        kt_store_close(s);
        return kt_cli_fail("status");
    }
    json_t *arr = a.conn.json && !id ? json_array() : NULL;
    if (!a.conn.json && !id)
        print_job_header();
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        kt_job_arena_t arena = {0};
        Ktune__V1__JobProgress p = KTUNE__V1__JOB_PROGRESS__INIT;
        if (kt_job_view_progress_from_store(s, ids[i], kt_job_arena_alloc, &arena, &p) != 0) {
            if (kt_err_code() == KT_ENOTFOUND)
                fprintf(stderr, "ktune status: no job %" PRId64 " in %s\n", ids[i], a.conn.db);
            else
                kt_cli_fail("status");
            rc = 1;
        } else if (id) {
            print_one_job(&p, a.conn.json);
        } else if (arr) {
            json_array_append_new(arr, kt_cli_progress_json(&p));
        } else {
            print_job_line(&p);
        }
        kt_job_arena_clear(&arena);
    }
    if (arr) {
        if (rc == 0)
            kt_cli_print_json(json_pack("{s:o}", "jobs", arr));
        else
            json_decref(arr);
    }
    free(ids);
    kt_store_close(s);
    return rc;
}

/* ---- cancel ------------------------------------------------------------------------------------ */

int kt_cli_cancel(int argc, char **argv)
{
    static const int allowed[] = {0};
    read_args_t a;
    int rc = parse_read("cancel", argc, argv, allowed, &a);
    if (rc < 0) {
        printf("usage: ktune cancel JOB --tracker HOST:PORT [--json]\n"
               "\n"
               "Cancel a job: its rounds stop, what was measured stays in the store.\n"
               "\n"
               "options:\n%s",
               CONN_HELP);
        return 0;
    }
    if (rc)
        return rc;
    int64_t id = 0;
    if (optind >= argc) {
        fprintf(stderr, "ktune cancel: which job? (ktune cancel JOB --tracker HOST:PORT)\n");
        return 2;
    }
    if (kt_cli_parse_id("cancel", "JOB", argv[optind++], &id))
        return 2;
    if (optind < argc) {
        fprintf(stderr, "ktune cancel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!a.conn.tracker) {
        fprintf(stderr, "ktune cancel: --tracker HOST:PORT is required (a job runs on a "
                        "tracker)\n");
        return 2;
    }
    Ktune__V1__JobRef req = KTUNE__V1__JOB_REF__INIT;
    req.job_id = id;
    ProtobufCMessage *out = NULL;
    if (kt_cli_call("cancel", &a.conn, "/ktune.v1.Tracker/CancelJob", &req.base,
                    &ktune__v1__job_progress__descriptor, &out))
        return 1;
    Ktune__V1__JobProgress *p = (Ktune__V1__JobProgress *)out;
    if (a.conn.json)
        kt_cli_print_json(kt_cli_progress_json(p));
    else
        printf("job %" PRId64 ": %s%s%s\n", p->job_id, p->state,
               p->message && *p->message ? ": " : "", p->message ? p->message : "");
    protobuf_c_message_free_unpacked(out, NULL);
    return 0;
}

/* ---- best -------------------------------------------------------------------------------------- */

/* Records gathered from a tracker or a store, printed the same way. */
typedef struct {
    kt_record_t *items;
    size_t n, cap;
    kt_record_list_t **lists;   /* store lists that own the items' strings */
    size_t nlists;
    ProtobufCMessage *resp;     /* or the tracker's answer */
} best_t;

static int best_add_list(best_t *b, kt_record_list_t *l)
{
    kt_record_list_t **ls = realloc(b->lists, (b->nlists + 1) * sizeof *ls);
    if (!ls)
        return KT_ENOMEM;
    b->lists = ls;
    b->lists[b->nlists++] = l;
    if (b->n + l->n > b->cap) {
        size_t cap = (b->n + l->n) * 2;
        kt_record_t *it = realloc(b->items, cap * sizeof *it);
        if (!it)
            return KT_ENOMEM;
        b->items = it;
        b->cap = cap;
    }
    for (size_t i = 0; i < l->n; i++)
        b->items[b->n++] = l->items[i];
    return 0;
}

static void best_free(best_t *b)
{
    for (size_t i = 0; i < b->nlists; i++)
        kt_record_list_free(b->lists[i]);
    free(b->lists);
    free(b->items);
    if (b->resp)
        protobuf_c_message_free_unpacked(b->resp, NULL);
}

/* Best records per task of a job, or of one workload, from a tracker or a
 * store. 0 or 1 (message printed). */
static int gather_best(const char *cmd, const read_args_t *a, const char *key, int top,
                       best_t *b)
{
    memset(b, 0, sizeof *b);
    if (a->conn.tracker) {
        Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
        req.workload_key = (char *)(key ? key : "");
        req.job_id = a->job;
        req.target = (char *)(a->target ? a->target : "");
        req.top_k = top;
        if (kt_cli_call(cmd, &a->conn, "/ktune.v1.Tracker/QueryBest", &req.base,
                        &ktune__v1__query_best_response__descriptor, &b->resp))
            return 1;
        Ktune__V1__QueryBestResponse *r = (Ktune__V1__QueryBestResponse *)b->resp;
        if (r->n_records && !(b->items = calloc(r->n_records, sizeof *b->items)))
            return kt_cli_fail(cmd);
        for (size_t i = 0; i < r->n_records; i++)
            record_from_proto(r->records[i], &b->items[b->n++]);
        return 0;
    }
    kt_store_t *s = kt_cli_open_store(cmd, a->conn.db);
    if (!s)
        return 1;
    int rc = 0;
    if (key) {
        kt_record_list_t *l = NULL;
        rc = kt_store_top_k(s, key, a->target ? a->target : "cpu", top, &l);
        if (rc == 0 && best_add_list(b, l) != 0) {
            kt_record_list_free(l);
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        }
    } else {
        kt_store_job_info_t *info = NULL;
        rc = kt_store_get_job(s, a->job, &info);
        if (rc == KT_ENOTFOUND) {
            fprintf(stderr, "ktune %s: no job %" PRId64 " in %s\n", cmd, a->job, a->conn.db);
            kt_store_close(s);
            return 1;
        }
        for (int i = 0; rc == 0 && i < info->ntasks; i++) {
            kt_record_list_t *l = NULL;
            rc = kt_store_top_k(s, info->tasks[i].workload_key,
                                a->target ? a->target : info->job.target, top, &l);
            if (rc == 0 && best_add_list(b, l) != 0) {
                kt_record_list_free(l);
                rc = kt_err_set(KT_ENOMEM, "out of memory");
            }
        }
        kt_store_job_info_free(info);
    }
    kt_store_close(s);
    return rc == 0 ? 0 : kt_cli_fail(cmd);
}

int kt_cli_best(int argc, char **argv)
{
    static const int allowed[] = {O_WORKLOAD, O_JOB, O_TARGET, O_TOP, 0};
    read_args_t a;
    int rc = parse_read("best", argc, argv, allowed, &a);
    if (rc < 0) {
        printf("usage: ktune best (--workload KEY|JSON | --job JOB) [--target T] [--top K]\n"
               "                  [--tracker HOST:PORT | --db PATH] [--json]\n"
               "\n"
               "The best measured records (lowest mean cost, valid only) of one workload, or\n"
               "of every task of a job. --workload takes the key as ktune prints it or the\n"
               "workload JSON; --target defaults to cpu (a job's own target with --job);\n"
               "--top K lists K records per workload (default 1).\n"
               "\n"
               "options:\n%s",
               CONN_HELP);
        return 0;
    }
    if (rc)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "ktune best: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!a.workload == !a.job) {
        fprintf(stderr, "ktune best: give --workload KEY or --job JOB (one of them)\n");
        return 2;
    }
    char *key = a.workload ? kt_cli_workload_key("best", "--workload", a.workload) : NULL;
    if (a.workload && !key)
        return 2;
    best_t b;
    rc = gather_best("best", &a, key, a.top ? a.top : 1, &b);
    if (rc == 0) {
        if (a.conn.json) {
            json_t *arr = json_array();
            for (size_t i = 0; i < b.n; i++) {
                char *text = kt_store_record_to_json(&b.items[i]);
                json_t *o = text ? json_loads(text, 0, NULL) : NULL;
                free(text);
                if (o) {
                    json_object_set_new(o, "id", json_integer(b.items[i].id));
                    /* always, "unknown" included: export leaves it out then */
                    json_object_set_new(o, "origin",
                                        json_string(kt_store_origin_name(b.items[i].origin)));
                }
                json_array_append_new(arr, o ? o : json_null());
            }
            kt_cli_print_json(json_pack("{s:o}", "records", arr));
        } else if (b.n == 0) {
            printf("no valid record%s\n", key ? " for this workload" : "s for this job");
        } else {
            printf("%-12s  %8s  %6s  %-6s  %-8s  %s\n", "Latency (ms)", "Record", "Job",
                   "Target", "Origin", "Workload key");
            for (size_t i = 0; i < b.n; i++) {
                const kt_record_t *r = &b.items[i];
                printf("%12.4f  %8" PRId64 "  %6" PRId64 "  %-6s  %-8s  %s\n", r->mean_cost * 1e3,
                       r->id, r->job_id, r->target, kt_store_origin_name(r->origin),
                       r->workload_key);
            }
        }
    }
    best_free(&b);
    free(key);
    return rc;
}

/* ---- export ------------------------------------------------------------------------------------ */

/* The job's tasks (workload JSON and key) from the tracker or the store. */
typedef struct {
    int n;
    char **key, **json;
    double *weight;
    char target[32];
} job_tasks_t;

static void job_tasks_free(job_tasks_t *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->key[i]);
        free(t->json[i]);
    }
    free(t->key);
    free(t->json);
    free(t->weight);
}

static int job_tasks_get(const read_args_t *a, job_tasks_t *out)
{
    memset(out, 0, sizeof *out);
    kt_job_arena_t arena = {0};
    Ktune__V1__JobProgress local = KTUNE__V1__JOB_PROGRESS__INIT, *p = &local;
    ProtobufCMessage *resp = NULL;
    if (a->conn.tracker) {
        Ktune__V1__JobRef req = KTUNE__V1__JOB_REF__INIT;
        req.job_id = a->job;
        if (kt_cli_call("export", &a->conn, "/ktune.v1.Tracker/JobStatus", &req.base,
                        &ktune__v1__job_progress__descriptor, &resp))
            return 1;
        p = (Ktune__V1__JobProgress *)resp;
    } else {
        kt_store_t *s = kt_cli_open_store("export", a->conn.db);
        if (!s)
            return 1;
        int rc = kt_job_view_progress_from_store(s, a->job, kt_job_arena_alloc, &arena, &local);
        kt_store_close(s);
        if (rc != 0) {
            if (rc == KT_ENOTFOUND)
                fprintf(stderr, "ktune export: no job %" PRId64 " in %s\n", a->job, a->conn.db);
            else
                kt_cli_fail("export");
            kt_job_arena_clear(&arena);
            return 1;
        }
    }
    int n = (int)p->n_tasks, rc = 0;
    snprintf(out->target, sizeof out->target, "%s", p->target && *p->target ? p->target : "cpu");
    out->key = calloc((size_t)n + 1, sizeof *out->key);
    out->json = calloc((size_t)n + 1, sizeof *out->json);
    out->weight = calloc((size_t)n + 1, sizeof *out->weight);
    if (!out->key || !out->json || !out->weight)
        rc = 1;
    for (int i = 0; rc == 0 && i < n; i++) {
        out->key[i] = kt_strdup(p->tasks[i]->workload_key);
        out->json[i] = kt_strdup(p->tasks[i]->workload_json ? p->tasks[i]->workload_json : "");
        out->weight[i] = p->tasks[i]->weight;
        out->n = i + 1;
        if (!out->key[i] || !out->json[i])
            rc = 1;
    }
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    kt_job_arena_clear(&arena);
    if (rc)
        fprintf(stderr, "ktune export: out of memory\n");
    return rc;
}

static int write_text(const char *path, const char *text)
{
    if (kt_file_write(path, text, strlen(text)) != 0) {
        fprintf(stderr, "ktune export: %s\n", kt_err_msg());
        return 1;
    }
    return 0;
}

/* The CUDA kernels of one GPU state as DIR/<entry>.cu; their launches
 * (grid, block, shared memory, workspace) go into the header h. */
static int export_cuda_one(const read_args_t *a, const kt_dag_t *dag, const kt_sched_state_t *st,
                           const char *entry, kt_sbuf_t *h)
{
    if (st->target != KT_SCHED_TARGET_CUDA)
        return kt_err_set(KT_EINVAL, "the best state is a CPU schedule (use --format c)");
    kt_codegen_cuda_t cu;
    if (kt_codegen_emit_cuda(dag, st, entry, &cu) != 0)
        return kt_err_code();
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cu", a->out, entry);
    int rc = kt_file_write(path, cu.src, strlen(cu.src));
    kt_sbuf_printf(h, " * launches, in order, each kernel taking the buffers above as float *%s:\n",
                   cu.workspace_bytes ? ", then the workspace" : "");
    for (int l = 0; l < cu.n_launches; l++) {
        const kt_codegen_launch_t *q = &cu.launches[l];
        kt_sbuf_printf(h, " *   %s<<<dim3(%u, %u, %u), dim3(%u, %u, %u), 0>>> (%u bytes static shared)\n",
                       q->name, q->grid[0], q->grid[1], q->grid[2], q->block[0], q->block[1],
                       q->block[2], q->smem_bytes);
    }
    kt_sbuf_printf(h, " */\nstatic const ktune_launch_t %s_launches[] = {\n", entry);
    for (int l = 0; l < cu.n_launches; l++) {
        const kt_codegen_launch_t *q = &cu.launches[l];
        kt_sbuf_printf(h, "    {\"%s\", {%u, %u, %u}, {%u, %u, %u}, 0},\n", q->name, q->grid[0],
                       q->grid[1], q->grid[2], q->block[0], q->block[1], q->block[2]);
    }
    kt_sbuf_printf(h, "};\n#define %s_NUM_LAUNCHES %d\n#define %s_WORKSPACE_BYTES %zu\n\n", entry,
                   cu.n_launches, entry, cu.workspace_bytes);
    kt_codegen_cuda_clear(&cu);
    return rc;
}

/* One .c (or, cuda, .cu) per task's best state plus ktune_kernels.h. */
static int export_c(const read_args_t *a, const job_tasks_t *jt, const best_t *b, int cuda)
{
    kt_sbuf_t h;
    kt_sbuf_init(&h);
    if (cuda)
        kt_sbuf_printf(&h,
                       "/* CUDA kernels of ktune job %" PRId64 ": the best measured schedule of\n"
                       " * each task. ktune_task<i>.cu holds extern \"C\" __global__ kernels\n"
                       " * taking float pointers: the buffers listed, inputs first, then\n"
                       " * outputs, dense row-major float32, then (when WORKSPACE_BYTES > 0) a\n"
                       " * scratch buffer of that size. Launch them in the order listed with the\n"
                       " * dimensions given (dynamic shared memory 0). They compile with NVRTC or\n"
                       " * nvcc for sm_75 and newer and need no header. */\n"
                       "#ifndef KTUNE_KERNELS_H\n#define KTUNE_KERNELS_H\n\n"
                       "typedef struct {\n    const char *kernel;\n    unsigned grid[3], block[3];\n"
                       "    unsigned dynamic_shared_bytes;\n} ktune_launch_t;\n\n",
                       a->job);
    else
        kt_sbuf_printf(&h,
                   "/* Kernels of ktune job %" PRId64 ": the best measured schedule of each task.\n"
                   " * Each entry point takes float **bufs: the buffers listed, inputs first,\n"
                   " * then outputs, dense row-major float32; it returns 0, or -1 when an\n"
                   " * internal allocation failed. Compile each ktune_task<i>.c with\n"
                   " * cc -O3 -fno-math-errno -march=native -fopenmp -c.\n"
                   " * <entry>(bufs) takes every buffer in its original layout. The kernel that\n"
                   " * was measured is <entry>_packed(bufs): it takes each input i for which\n"
                   " * <entry>_pack(i, NULL, NULL) returns 1 already re-laid out by\n"
                   " * <entry>_pack(i, original, dst) (dst: as many floats), done once when the\n"
                   " * weights are loaded; <entry> does that copy on every call. */\n"
                   "#ifndef KTUNE_KERNELS_H\n#define KTUNE_KERNELS_H\n\n",
                   a->job);
    int written = 0, rc = 0;
    kt_sched_params_t params;
    if (cuda)
        kt_sched_params_default_gpu(&params);
    else
        kt_sched_params_default(&params);
    for (int i = 0; i < jt->n && rc == 0; i++) {
        const kt_record_t *best = NULL;
        for (size_t k = 0; k < b->n; k++)
            if (strcmp(b->items[k].workload_key, jt->key[i]) == 0 &&
                (!best || b->items[k].mean_cost < best->mean_cost))
                best = &b->items[k];
        kt_workload_t *w = kt_workload_parse(jt->json[i]);
        if (!w) {
            fprintf(stderr, "ktune export: task %d: %s\n", i, kt_err_msg());
            rc = 1;
            break;
        }
        if (!best) {
            fprintf(stderr, "ktune export: task %d (%s) has no valid record; skipped\n", i,
                    jt->key[i]);
            kt_sbuf_printf(&h, "/* Task %d: %s: no valid measurement yet. */\n\n", i,
                           jt->key[i]);
            kt_workload_free(w);
            continue;
        }
        const kt_dag_t *dag = kt_workload_dag(w);
        kt_sched_state_t *st = kt_sched_state_from_json(best->state_json, dag, &params);
        char entry[64];
        snprintf(entry, sizeof entry, "ktune_task%d", i);
        kt_search_candidate_t cand = {0};
        if (!st || (!cuda && kt_search_candidate_make(w, st, entry, &cand) != 0) ||
            (cuda && st->target != KT_SCHED_TARGET_CUDA &&
             kt_err_set(KT_EINVAL, "the best state is a CPU schedule (use --format c)"))) {
            fprintf(stderr, "ktune export: task %d: %s\n", i, kt_err_msg());
            rc = 1;
        } else {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.c", a->out, entry);
            rc = cuda ? 0 : write_text(path, cand.source);
            kt_sbuf_printf(&h, "/* Task %d (%s, weight %g): %.4f ms measured (record %" PRId64
                               ").\n * workload: %s\n * buffers:\n",
                           i, kt_workload_op(w), jt->weight[i], best->mean_cost * 1e3, best->id,
                           jt->key[i]);
            for (int q = 0; q < kt_codegen_num_bufs(dag); q++) {
                const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, q));
                kt_sbuf_printf(&h, " *   bufs[%d] %-6s %s float32[", q,
                               s->kind == KT_STAGE_COMPUTE ? "output" : "input", s->name);
                for (int d = 0; d < s->ndim; d++)
                    kt_sbuf_printf(&h, "%s%lld", d ? "][" : "", (long long)s->shape[d]);
                kt_sbuf_puts(&h, "]\n");
            }
            if (!cuda) {
                kt_sbuf_printf(&h, " */\nint %s(float **bufs);\nint %s_packed(float **bufs);\n"
                                   "int %s_pack(int i, const float *src, float *dst);\n\n",
                               entry, entry, entry);
            } else if (export_cuda_one(a, dag, st, entry, &h) != 0) {
                fprintf(stderr, "ktune export: task %d: %s\n", i, kt_err_msg());
                rc = 1;
            }
            written++;
        }
        kt_search_candidate_clear(&cand);
        kt_sched_state_free(st);
        kt_workload_free(w);
    }
    kt_sbuf_puts(&h, "#endif\n");
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ktune_kernels.h", a->out);
        char *text = kt_sbuf_take(&h);
        rc = text ? write_text(path, text) : 1;
        free(text);
    }
    kt_sbuf_free(&h);
    if (rc == 0 && written == 0) {
        fprintf(stderr, "ktune export: job %" PRId64 " has no valid record yet\n", a->job);
        return 1;
    }
    if (rc == 0)
        printf("wrote %d kernel%s and ktune_kernels.h to %s\n", written, written == 1 ? "" : "s",
               a->out);
    return rc;
}

typedef struct {
    FILE *f;
    int64_t n;
} lines_t;

static int write_line(const kt_record_t *r, void *ctx)
{
    lines_t *x = ctx;
    char *text = kt_store_record_to_json(r);
    if (!text)
        return -1;
    fprintf(x->f, "%s\n", text);
    free(text);
    x->n++;
    return 0;
}

/* Every record of the job's tasks (their workloads on its target). */
static int export_json(const read_args_t *a, const job_tasks_t *jt, const char *target)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/job%" PRId64 ".jsonl", a->out, a->job);
    lines_t x = {.f = fopen(path, "w")};
    if (!x.f) {
        fprintf(stderr, "ktune export: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    int rc = 0;
    if (a->conn.tracker) {
        kt_rpc_client_t *cl = kt_cli_connect("export", &a->conn);
        if (!cl)
            rc = 1;
        for (int i = 0; rc == 0 && i < jt->n; i++) {
            Ktune__V1__ListRecordsRequest req = KTUNE__V1__LIST_RECORDS_REQUEST__INIT;
            req.workload_key = jt->key[i];
            req.target = (char *)target;
            kt_rpc_reader_t *rd = kt_rpc_reader_open(cl, "/ktune.v1.Tracker/ListRecords",
                                                     &req.base, &ktune__v1__record__descriptor,
                                                     600000);
            if (!rd) {
                rc = kt_cli_fail("export");
                break;
            }
            ProtobufCMessage *msg = NULL;
            int r;
            while ((r = kt_rpc_reader_next(rd, &msg)) == 1) {
                kt_record_t rec;
                record_from_proto((Ktune__V1__Record *)msg, &rec);
                write_line(&rec, &x);
                protobuf_c_message_free_unpacked(msg, NULL);
            }
            kt_rpc_status_t st = {0};
            if (kt_rpc_reader_close(rd, &st) != 0 || r < 0)
                rc = kt_cli_rpc_fail("export", &a->conn, &st);
        }
        kt_rpc_client_free(cl);
    } else {
        kt_store_t *s = kt_cli_open_store("export", a->conn.db);
        if (!s)
            rc = 1;
        for (int i = 0; rc == 0 && i < jt->n; i++) {
            kt_store_filter_t f = {.workload_key = jt->key[i], .target = target};
            if (kt_store_foreach_record(s, &f, write_line, &x) != 0)
                rc = kt_cli_fail("export");
        }
        kt_store_close(s);
    }
    if (fclose(x.f) != 0 && rc == 0) {
        fprintf(stderr, "ktune export: writing %s: %s\n", path, strerror(errno));
        rc = 1;
    }
    if (rc == 0)
        printf("wrote %lld record%s to %s\n", (long long)x.n, x.n == 1 ? "" : "s", path);
    return rc;
}

int kt_cli_export(int argc, char **argv)
{
    static const int allowed[] = {O_JOB, O_FORMAT, O_OUT, O_TARGET, 0};
    read_args_t a;
    int rc = parse_read("export", argc, argv, allowed, &a);
    if (rc < 0) {
        printf("usage: ktune export --job JOB --format c|cuda|json --out DIR\n"
               "                    [--tracker HOST:PORT | --db PATH]\n"
               "\n"
               "  c     one compilable C file per task with its best schedule\n"
               "        (DIR/ktune_task<i>.c, entry ktune_task<i>) and DIR/ktune_kernels.h\n"
               "        listing the entry points with their buffers (order and shapes)\n"
               "  cuda  for a cuda job: DIR/ktune_task<i>.cu with the kernels of each task's\n"
               "        best GPU schedule and DIR/ktune_kernels.h listing buffers, kernels\n"
               "        and launch dimensions (grid, block, shared memory, workspace)\n"
               "  json  every record of the job's tasks as JSON lines (DIR/job<JOB>.jsonl;\n"
               "        the format of `ktune records export`, RECORDS.md)\n"
               "DIR is created when missing.\n"
               "\n"
               "options:\n%s",
               CONN_HELP);
        return 0;
    }
    if (rc)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "ktune export: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!a.job || !a.format || !a.out) {
        fprintf(stderr, "ktune export: --job, --format and --out are required\n");
        return 2;
    }
    int as_c = strcmp(a.format, "c") == 0, as_cuda = strcmp(a.format, "cuda") == 0;
    if (!as_c && !as_cuda && strcmp(a.format, "json") != 0) {
        fprintf(stderr, "ktune export: --format is c, cuda or json, not '%s'\n", a.format);
        return 2;
    }
    /* The job first: an unknown one leaves no empty DIR behind. */
    job_tasks_t jt;
    if (job_tasks_get(&a, &jt))
        return 1;
    if (mkdir(a.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ktune export: cannot create %s: %s\n", a.out, strerror(errno));
        job_tasks_free(&jt);
        return 1;
    }
    if (as_c || as_cuda) {
        best_t b;
        rc = gather_best("export", &a, NULL, 1, &b);
        if (rc == 0)
            rc = export_c(&a, &jt, &b, as_cuda);
        best_free(&b);
    } else {
        rc = export_json(&a, &jt, a.target ? a.target : jt.target);
    }
    job_tasks_free(&jt);
    return rc;
}
