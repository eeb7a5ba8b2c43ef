/*
 * Suite "service": the built daemons working together on 127.0.0.1 —
 * ktune-tracker, ktune-runner, ktune-worker and `ktune queue` as separate
 * processes (from KT_BUILD_ROOT): registration, Build and Run over RPC, a
 * crashing kernel, a runner killed (dropped after missed heartbeats), the
 * tracker killed and restarted (peers register again with their ids), the
 * token, and draining a runner on SIGTERM.
 *
 * Check runs each test in its own process (this file's main() never touches
 * gRPC). Daemons write their logs to files in a per-test directory, which
 * the runner process removes even when a test fails; every daemon gets
 * PR_SET_PDEATHSIG, so a failing test (which _exits) takes its daemons with
 * it, and a passing one kills and reaps them itself. Waits are bounded but
 * generous; nothing asserts how fast anything happens.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "measure/cuda_runner.h"
#include "rpc/rpc.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_skip.h"

#include "kt_test_proc.h"
#include "kt_test_records.h"
#include "kt_test_tls.h"

/* Heartbeat interval given to peers in these tests: a peer silent for 3
 * intervals is dropped, which a live one slowed by a busy machine (and the
 * sanitizers) must never be. */
#define HB_MS (KT_TEST_SLOW > 1 ? "2000" : "500")
/* Upper bound of every wait (the machine may be slow and busy). */
#define WAIT_MS (30000 * KT_TEST_SLOW)

/* ---- Kernels ------------------------------------------------------------------------------ */

static const char *VADD =
    "int vadd(float **b) {\n"
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] + b[1][i];\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_REF =
    "int vadd_ref(float **b) {\n"
    "  for (int i = 1023; i >= 0; i--) b[2][i] = b[1][i] + b[0][i];\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_SEGV =
    "int vadd(float **b) {\n"
    "  (void)b; *(volatile int *)16 = 1;\n"
    "  return 0;\n"
    "}\n";

static const char *SYNTAX_ERROR = "int vadd(float **b) { return b[0][0] +; }\n";

/* 300 ms per call: a batch that is still running when SIGTERM arrives. */
static const char *SLOW =
    "#include <time.h>\n"
    "int slow(float **b) {\n"
    "  struct timespec ts = {0, 300000000};\n"
    "  nanosleep(&ts, 0);\n"
    "  b[1][0] = b[0][0];\n"
    "  return 0;\n"
    "}\n";

/* ---- Processes ------------------------------------------------------------------------------ */

#define MAX_PROCS 16

typedef kt_test_proc_t proc_t;

static proc_t procs[MAX_PROCS];
static int n_procs;

static void suite_setup(void) { kt_test_suite_dir("kt_service_"); }

static void suite_teardown(void) { kt_test_suite_dir_remove(); }

static void test_setup(void)
{
    kt_test_make_dir();
    n_procs = 0;
}

/* Start build-root binary `rel` with args; its output goes to <dir>/<name>.log.
 * KT_TOKEN_FILE is token_file_env or unset; logs at info level. */
static proc_t *spawn(const char *name, const char *rel, char *const args[],
                     const char *token_file_env)
{
    ck_assert_int_lt(n_procs, MAX_PROCS);
    proc_t *p = &procs[n_procs++];
    static char tok_var[600];
    static const char *const drop[] = {"KT_TOKEN_FILE=", "KT_LOG_LEVEL=", NULL};
    char *add[] = {"KT_LOG_LEVEL=info", token_file_env ? tok_var : NULL, NULL};
    if (token_file_env)
        snprintf(tok_var, sizeof tok_var, "KT_TOKEN_FILE=%s", token_file_env);
    char file[64];
    snprintf(file, sizeof file, "%s.log", name);
    kt_test_spawn(p, file, 1, rel, args, drop, add);
    return p;
}

/* Wait for p to exit (killing it after ms); returns the wait status. */
static int reap(proc_t *p, int ms)
{
    int st = 0;
    kt_test_wait(p, ms, &st);
    return st;
}

static void kill_hard(proc_t *p)
{
    ck_assert_int_eq(kill(p->pid, SIGKILL), 0);
    reap(p, WAIT_MS);
}

static char *log_of(const proc_t *p);

/* Stop every daemon still running with SIGTERM: each must exit 0 (under the
 * sanitizers that also means without leaks). */
static void stop_all(void)
{
    for (int i = 0; i < n_procs; i++)
        if (procs[i].pid > 0)
            kill(procs[i].pid, SIGTERM);
    for (int i = 0; i < n_procs; i++) {
        if (procs[i].pid <= 0)
            continue;
        int ws = reap(&procs[i], WAIT_MS);
        char *log = log_of(&procs[i]);
        ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s: status %d: %s", procs[i].log,
                      ws, log);
        free(log);
    }
    n_procs = 0;
}

static char *log_of(const proc_t *p) { return kt_test_output(p); }

/* Wait until p's log contains needle; 1 when it does. */
static int wait_log(const proc_t *p, const char *needle, int ms)
{
    for (int waited = 0;; waited += 20) {
        char *s = log_of(p);
        int hit = strstr(s, needle) != NULL;
        free(s);
        if (hit)
            return 1;
        if (waited >= ms)
            return 0;
        kt_test_sleep_ms(20);
    }
}

/* The port a daemon logged ("listening on 127.0.0.1:<port>"). */
static int logged_port(const proc_t *p)
{
    const char *needle = "listening on 127.0.0.1:";
    ck_assert_msg(wait_log(p, needle, WAIT_MS), "%s never listened", p->log);
    char *s = log_of(p);
    int port = atoi(strstr(s, needle) + strlen(needle));
    free(s);
    ck_assert_int_gt(port, 0);
    return port;
}

/* The tracker's store: one per test directory, kept across restarts. */
static const char *db_path(void)
{
    static char db[160];
    snprintf(db, sizeof db, "%s/ktune.db", kt_test_dir);
    return db;
}

static proc_t *start_tracker(const char *listen, const char *token_file, char addr[64])
{
    char *args[] = {"--listen", (char *)listen, "--http", "off", "--heartbeat-ms", HB_MS,
                    "--db", (char *)db_path(), token_file ? "--token-file" : NULL,
                    (char *)token_file, NULL};
    proc_t *t = spawn("tracker", "tracker/ktune-tracker", args, NULL);
    snprintf(addr, 64, "127.0.0.1:%d", logged_port(t));
    return t;
}

/* Runners time by CPU time: the test machine is shared, and every job test
 * then goes through the CPU timer (the runner's own tests cover wall time). */
static proc_t *start_runner(const char *name, const char *tracker, const char *token_env)
{
    char *args[] = {"--listen", "127.0.0.1:0", "--key", "cpu-test", "--threads", "1",
                    "--timer", "cpu", tracker ? "--tracker" : NULL, (char *)tracker, NULL};
    return spawn(name, "server/ktune-runner", args, token_env);
}

static proc_t *start_worker(const char *name, const char *tracker, const char *token_env)
{
    char *args[] = {"--listen", "127.0.0.1:0", "--jobs", "2", tracker ? "--tracker" : NULL,
                    (char *)tracker, NULL};
    return spawn(name, "worker/ktune-worker", args, token_env);
}

static void write_file(const char *name, const char *text, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", kt_test_dir, name);
    ck_assert_int_eq(kt_file_write(path, text, strlen(text)), 0);
}

/* Run `ktune` with args; its exit code, and its output in out. */
static int run_cli(char *const args[], char *out, size_t size, const char *token_env)
{
    static int runs;
    char name[32];
    snprintf(name, sizeof name, "cli%d", runs++);
    proc_t *p = spawn(name, "cli/ktune", args, token_env);
    int st = reap(p, WAIT_MS);
    char *s = log_of(p);
    snprintf(out, size, "%s", s);
    free(s);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* ---- RPC helpers --------------------------------------------------------------------------- */

static kt_rpc_client_t *client(const char *addr, const char *token)
{
    kt_rpc_client_opts_t o = {.token = token, .deadline_ms = 10000, .retry_attempts = 3};
    kt_rpc_client_t *c = kt_rpc_client_new(addr, &o);
    ck_assert_msg(c != NULL, "%s", kt_err_msg());
    return c;
}

/* QueueStatus; NULL when the call failed (status in *st). */
static Ktune__V1__QueueStatusResponse *queue_status(const char *tracker, const char *token,
                                                    kt_rpc_status_t *st)
{
    kt_rpc_client_t *c = client(tracker, token);
    Ktune__V1__QueueStatusRequest req = KTUNE__V1__QUEUE_STATUS_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t local;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Tracker/QueueStatus", &req.base,
                               &ktune__v1__queue_status_response__descriptor, 5000, &out,
                               st ? st : &local);
    kt_rpc_client_free(c);
    return rc == 0 ? (Ktune__V1__QueueStatusResponse *)out : NULL;
}

static int count_role(const Ktune__V1__QueueStatusResponse *q, const char *role)
{
    int n = 0;
    for (size_t i = 0; i < q->n_peers; i++)
        n += strcmp(q->peers[i]->role, role) == 0;
    return n;
}

/* Wait until exactly `runners` runners and `workers` workers are registered;
 * returns the QueueStatus then (caller frees) or NULL. */
static Ktune__V1__QueueStatusResponse *wait_peers(const char *tracker, const char *token,
                                                  int runners, int workers)
{
    for (int waited = 0; waited < WAIT_MS; waited += 100) {
        Ktune__V1__QueueStatusResponse *q = queue_status(tracker, token, NULL);
        if (q && count_role(q, "runner") == runners && count_role(q, "worker") == workers)
            return q;
        if (q)
            ktune__v1__queue_status_response__free_unpacked(q, NULL);
        kt_test_sleep_ms(100);
    }
    return NULL;
}

/* A tracker with one worker and one runner, both registered. */
static proc_t *start_small_cluster(char tracker[64])
{
    proc_t *tr = start_tracker("127.0.0.1:0", NULL, tracker);
    start_worker("worker", tracker, NULL);
    start_runner("runner", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 1, 1);
    ck_assert_ptr_nonnull(q);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    return tr;
}

/* The n-th peer of a role. */
static const Ktune__V1__PeerInfo *peer(const Ktune__V1__QueueStatusResponse *q, const char *role,
                                       int n)
{
    for (size_t i = 0; i < q->n_peers; i++)
        if (strcmp(q->peers[i]->role, role) == 0 && n-- == 0)
            return q->peers[i];
    ck_abort_msg("no %s #%d", role, n);
    return NULL;
}

static Ktune__V1__BuildResponse *build(const char *worker, const char *token,
                                       const char *const *sources, const char *const *entries,
                                       int n)
{
    Ktune__V1__BuildCandidate cands[8], *ptrs[8];
    ck_assert_int_le(n, 8);
    for (int i = 0; i < n; i++) {
        ktune__v1__build_candidate__init(&cands[i]);
        cands[i].candidate_id = (uint64_t)(i + 1);
        cands[i].source = (char *)sources[i];
        cands[i].entry = (char *)entries[i];
        ptrs[i] = &cands[i];
    }
    Ktune__V1__BuildRequest req = KTUNE__V1__BUILD_REQUEST__INIT;
    req.target = "cpu";
    req.arch = "native";
    req.candidates = ptrs;
    req.n_candidates = (size_t)n;
    req.timeout_ms = 60000;
    kt_rpc_client_t *c = client(worker, token);
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Worker/Build", &req.base,
                               &ktune__v1__build_response__descriptor, 120000, &out, &st);
    kt_rpc_client_free(c);
    ck_assert_msg(rc == 0, "Build: %s", kt_err_msg());
    Ktune__V1__BuildResponse *r = (Ktune__V1__BuildResponse *)out;
    ck_assert_uint_eq(r->n_results, (size_t)n);
    return r;
}

/* The status of a one-candidate Build with this target and arch. */
static int build_status(const char *worker, const char *target, const char *arch)
{
    Ktune__V1__BuildCandidate cand = KTUNE__V1__BUILD_CANDIDATE__INIT, *cp = &cand;
    cand.source = (char *)VADD;
    cand.entry = "vadd";
    Ktune__V1__BuildRequest req = KTUNE__V1__BUILD_REQUEST__INIT;
    req.target = (char *)target;
    req.arch = (char *)arch;
    req.candidates = &cp;
    req.n_candidates = 1;
    kt_rpc_client_t *c = client(worker, NULL);
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    kt_rpc_call_unary(c, "/ktune.v1.Worker/Build", &req.base,
                      &ktune__v1__build_response__descriptor, 60000, &out, &st);
    kt_rpc_client_free(c);
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return st.code;
}

/* A vadd-shaped run candidate from a build result, optionally checked
 * against a reference result. */
static void run_candidate(Ktune__V1__RunCandidate *c, int64_t *elems, uint64_t id,
                          const Ktune__V1__BuildResult *prog, const Ktune__V1__BuildResult *ref,
                          int n_bufs)
{
    ktune__v1__run_candidate__init(c);
    c->candidate_id = id;
    c->artifact = prog->artifact;
    c->artifact_hash = prog->artifact_hash;
    c->entry = prog->entry;
    c->buf_elems = elems;
    c->n_buf_elems = (size_t)n_bufs;
    c->num_outputs = 1;
    if (ref) {
        c->reference = ref->artifact;
        c->reference_hash = ref->artifact_hash;
        c->reference_entry = ref->entry;
    }
}

static int run(const char *runner, const char *token, Ktune__V1__RunCandidate **cands, int n,
               int number, int repeat, Ktune__V1__RunResponse **resp, kt_rpc_status_t *st)
{
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.number = number;
    mo.repeat = repeat;
    mo.timeout_ms = 20000;
    mo.check_correctness = 1;
    Ktune__V1__RunRequest req = KTUNE__V1__RUN_REQUEST__INIT;
    req.target = "cpu";
    req.candidates = cands;
    req.n_candidates = (size_t)n;
    req.options = &mo;
    req.seed = 7;
    kt_rpc_client_t *c = client(runner, token);
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Runner/Run", &req.base,
                               &ktune__v1__run_response__descriptor, 120000, &out, st);
    kt_rpc_client_free(c);
    *resp = (Ktune__V1__RunResponse *)out;
    return rc;
}

/* GET path from 127.0.0.1:port; the whole answer (caller frees). */
static char *http_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    /* A page of 20 jobs with their plots is more than 64 KiB. */
    while ((r = read(fd, buf + len, cap - len - 1)) > 0)
        if ((len += (size_t)r) + 1 == cap)
            ck_assert_ptr_nonnull(buf = realloc(buf, cap *= 2));
    buf[len] = '\0';
    close(fd);
    return buf;
}

/* ---- Tests -------------------------------------------------------------------------------- */

START_TEST(service_cluster_registers_builds_and_runs)
{
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--heartbeat-ms", HB_MS,
                     "--db", (char *)db_path(), NULL};
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    char tracker[64];
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", logged_port(tr));
    start_runner("runner1", tracker, NULL);
    start_runner("runner2", tracker, NULL);
    start_worker("worker", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 2, 1);
    ck_assert_msg(q != NULL, "runners and worker did not register");
    ck_assert_uint_eq(q->n_queues, 1);
    ck_assert_str_eq(q->queues[0]->key, "cpu-test");
    ck_assert_int_eq(q->queues[0]->total, 2);
    ck_assert_int_eq(q->queues[0]->free, 2);
    ck_assert_int_eq(q->queues[0]->pending, 0);
    const Ktune__V1__PeerInfo *r1 = peer(q, "runner", 0), *w = peer(q, "worker", 0);
    ck_assert_ptr_nonnull(r1->device);
    ck_assert_str_eq(r1->device->target, "cpu");
    ck_assert_int_gt(r1->device->num_cores, 0);
    ck_assert_int_gt(r1->device->cache_line_bytes, 0);
    ck_assert_str_eq(r1->state, "free");
    ck_assert_str_eq(w->targets[0], "cpu");
    ck_assert_int_eq(w->capacity, 2);

    /* ktune queue prints both runners, the worker and the key's counters. */
    char out[8192];
    char *qargs[] = {"queue", "--tracker", tracker, NULL};
    ck_assert_int_eq(run_cli(qargs, out, sizeof out, NULL), 0);
    ck_assert_msg(strstr(out, "Server List") && strstr(out, "Queue Status"), "%s", out);
    ck_assert_msg(strstr(out, peer(q, "runner", 0)->address), "%s", out);
    ck_assert_msg(strstr(out, peer(q, "runner", 1)->address), "%s", out);
    ck_assert_msg(strstr(out, w->address), "%s", out);
    ck_assert_msg(strstr(out, "runner:cpu-test") && strstr(out, "worker:cpu"), "%s", out);
    const char *line = strstr(out, "\ncpu-test ");
    ck_assert_msg(line != NULL, "%s", out);
    int total = -1, free_ = -1, pending = -1;
    ck_assert_int_eq(sscanf(line, "\ncpu-test %d %d %d", &total, &free_, &pending), 3);
    ck_assert_int_eq(total, 2);
    ck_assert_int_eq(free_, 2);
    ck_assert_int_eq(pending, 0);
    char *jargs[] = {"queue", "--tracker", tracker, "--json", NULL};
    ck_assert_int_eq(run_cli(jargs, out, sizeof out, NULL), 0);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    ck_assert_msg(j != NULL, "%s: %s", jerr.text, out);
    ck_assert_int_eq(json_array_size(json_object_get(j, "peers")), 3);
    json_t *q0 = json_array_get(json_object_get(j, "queues"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(q0, "total")), 2);
    json_decref(j);

    /* The status page and the metrics see the same registry. */
    ck_assert(wait_log(tr, "http port ", WAIT_MS));
    char *tl = log_of(tr);
    int http_port = atoi(strstr(tl, "http port ") + strlen("http port "));
    free(tl);
    char *page = http_get(http_port, "/api/status");
    ck_assert_msg(strstr(page, "200 OK") && strstr(page, r1->address), "%s", page);
    free(page);
    char *metrics = http_get(http_port, "/metrics");
    ck_assert_msg(strstr(metrics, "ktune_queue_runners{key=\"cpu-test\"} 2"), "%s", metrics);
    free(metrics);

    /* Build on the worker: three good kernels and one that does not compile. */
    const char *srcs[] = {VADD, VADD_REF, VADD_SEGV, SYNTAX_ERROR};
    const char *entries[] = {"vadd", "vadd_ref", "vadd", "vadd"};
    Ktune__V1__BuildResponse *b = build(w->address, NULL, srcs, entries, 4);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(b->results[i]->error_code == KTUNE__V1__MEASURE_ERROR__NO_ERROR,
                      "build %d: %s", i, b->results[i]->error_msg);
        ck_assert_uint_eq(b->results[i]->candidate_id, (uint64_t)(i + 1));
        ck_assert_uint_gt(b->results[i]->artifact.len, 0);
        ck_assert_int_eq(strlen(b->results[i]->artifact_hash), 16);
    }
    ck_assert_int_eq(b->results[3]->error_code, KTUNE__V1__MEASURE_ERROR__COMPILE_HOST);
    ck_assert_uint_eq(b->results[3]->artifact.len, 0);
    ck_assert_int_eq(build_status(w->address, "rocm", "native"), KT_RPC_INVALID_ARGUMENT);
    ck_assert_int_eq(build_status(w->address, "cpu", "-O0 -fplugin=x"), KT_RPC_INVALID_ARGUMENT);

    /* Run on a registered runner: checked vadd, a segfault, vadd again. */
    int64_t elems[3] = {1024, 1024, 1024};
    Ktune__V1__RunCandidate c[3], *cp[3] = {&c[0], &c[1], &c[2]};
    run_candidate(&c[0], elems, 11, b->results[0], b->results[1], 3);
    run_candidate(&c[1], elems, 12, b->results[2], b->results[1], 3);
    run_candidate(&c[2], elems, 13, b->results[0], NULL, 3);
    Ktune__V1__RunResponse *rr = NULL;
    kt_rpc_status_t st;
    ck_assert_msg(run(r1->address, NULL, cp, 3, 2, 3, &rr, &st) == 0, "Run: %s", kt_err_msg());
    ck_assert_uint_eq(rr->n_results, 3);
    for (int i = 0; i < 3; i += 2) {
        const Ktune__V1__MeasureResult *m = rr->results[i];
        ck_assert_msg(m->error_code == KTUNE__V1__MEASURE_ERROR__NO_ERROR, "run %d: %s", i,
                      m->error_msg);
        ck_assert_uint_eq(m->candidate_id, (uint64_t)(11 + i));
        ck_assert_uint_eq(m->n_costs, 3);
        for (size_t k = 0; k < m->n_costs; k++)
            ck_assert_double_gt(m->costs[k], 0);
        ck_assert_double_gt(m->timestamp, 0);
    }
    ck_assert_int_eq(rr->results[1]->error_code, KTUNE__V1__MEASURE_ERROR__RUNTIME_DEVICE);
    ck_assert_ptr_nonnull(rr->results[1]->error_msg);
    ktune__v1__run_response__free_unpacked(rr, NULL);

    /* The runner keeps serving after the crash. */
    ck_assert_msg(run(r1->address, NULL, cp, 1, 1, 1, &rr, &st) == 0, "Run: %s", kt_err_msg());
    ck_assert_int_eq(rr->results[0]->error_code, KTUNE__V1__MEASURE_ERROR__NO_ERROR);
    ktune__v1__run_response__free_unpacked(rr, NULL);

    /* A malformed candidate (no buffers) fails alone with INSTANTIATION_ERROR. */
    run_candidate(&c[2], elems, 14, b->results[0], NULL, 0);
    ck_assert_int_eq(run(r1->address, NULL, &cp[2], 1, 1, 1, &rr, &st), 0);
    ck_assert_int_eq(rr->results[0]->error_code,
                     KTUNE__V1__MEASURE_ERROR__INSTANTIATION_ERROR);
    ktune__v1__run_response__free_unpacked(rr, NULL);
    /* So does one whose weight mask names its output. */
    run_candidate(&c[2], elems, 15, b->results[0], NULL, 3);
    c[2].weight_bufs = 1u << 2;
    ck_assert_int_eq(run(r1->address, NULL, &cp[2], 1, 1, 1, &rr, &st), 0);
    ck_assert_int_eq(rr->results[0]->error_code,
                     KTUNE__V1__MEASURE_ERROR__INSTANTIATION_ERROR);
    ck_assert_ptr_nonnull(strstr(rr->results[0]->error_msg, "weight mask"));
    ktune__v1__run_response__free_unpacked(rr, NULL);

    ktune__v1__build_response__free_unpacked(b, NULL);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    stop_all();
}
END_TEST

START_TEST(service_killed_runner_is_dropped_after_missed_heartbeats)
{
    char tracker[64];
    proc_t *tr = start_tracker("127.0.0.1:0", NULL, tracker);
    proc_t *r1 = start_runner("runner1", tracker, NULL);
    ck_assert(wait_log(r1, "registered with tracker", WAIT_MS));
    start_runner("runner2", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 2, 0);
    ck_assert_ptr_nonnull(q);
    char victim_id[64];
    snprintf(victim_id, sizeof victim_id, "%s", peer(q, "runner", 0)->peer_id);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    /* runner1 registered first and is listed first. */
    kill_hard(r1);
    q = wait_peers(tracker, NULL, 1, 0);
    ck_assert_msg(q != NULL, "the killed runner was never dropped");
    ck_assert_str_ne(peer(q, "runner", 0)->peer_id, victim_id);
    ck_assert_int_eq(q->queues[0]->total, 1);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    char want[128];
    snprintf(want, sizeof want, "dropped runner %s", victim_id);
    ck_assert(wait_log(tr, want, WAIT_MS));
    stop_all();
}
END_TEST

START_TEST(service_restarted_tracker_gets_its_peers_back)
{
    char tracker[64];
    proc_t *tr = start_tracker("127.0.0.1:0", NULL, tracker);
    proc_t *r = start_runner("runner", tracker, NULL);
    proc_t *w = start_worker("worker", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 1, 1);
    ck_assert_ptr_nonnull(q);
    char rid[64], wid[64];
    snprintf(rid, sizeof rid, "%s", peer(q, "runner", 0)->peer_id);
    snprintf(wid, sizeof wid, "%s", peer(q, "worker", 0)->peer_id);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);

    kill_hard(tr);
    ck_assert(wait_log(r, "unreachable", WAIT_MS));
    char again[64];
    start_tracker(tracker, NULL, again);   /* the same port */
    ck_assert_str_eq(again, tracker);
    q = wait_peers(tracker, NULL, 1, 1);
    ck_assert_msg(q != NULL, "runner and worker did not register again");
    ck_assert_str_eq(peer(q, "runner", 0)->peer_id, rid);
    ck_assert_str_eq(peer(q, "worker", 0)->peer_id, wid);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    ck_assert(wait_log(r, "registered again", WAIT_MS));
    ck_assert(wait_log(w, "registered again", WAIT_MS));
    stop_all();
}
END_TEST

START_TEST(service_missing_or_wrong_token_is_unauthenticated)
{
    char tok[512], wrong[512], tracker[64];
    write_file("token", "svc-secret\n", tok, sizeof tok);
    write_file("wrong", "not-the-secret\n", wrong, sizeof wrong);
    /* Daemons refuse token files other users can read (docs/security.md). */
    ck_assert_int_eq(chmod(tok, 0600), 0);
    ck_assert_int_eq(chmod(wrong, 0600), 0);
    start_tracker("127.0.0.1:0", tok, tracker);
    proc_t *bad[3];
    bad[0] = start_runner("runner-none", tracker, NULL);
    bad[1] = start_runner("runner-wrong", tracker, wrong);
    bad[2] = start_worker("worker-none", tracker, NULL);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(wait_log(bad[i], "UNAUTHENTICATED", WAIT_MS), "%s", bad[i]->log);
    Ktune__V1__QueueStatusResponse *q = queue_status(tracker, "svc-secret", NULL);
    ck_assert_ptr_nonnull(q);
    ck_assert_uint_eq(q->n_peers, 0);
    ck_assert_uint_eq(q->n_queues, 0);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);

    /* Clients are refused the same way. */
    kt_rpc_status_t st;
    ck_assert_ptr_null(queue_status(tracker, NULL, &st));
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    ck_assert_ptr_null(queue_status(tracker, "not-the-secret", &st));
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    char out[4096];
    char *qargs[] = {"queue", "--tracker", tracker, NULL};
    ck_assert_int_eq(run_cli(qargs, out, sizeof out, NULL), 1);
    ck_assert_msg(strstr(out, "UNAUTHENTICATED"), "%s", out);
    ck_assert_int_eq(run_cli(qargs, out, sizeof out, wrong), 1);
    ck_assert_msg(strstr(out, "UNAUTHENTICATED"), "%s", out);

    /* With the token (KT_TOKEN_FILE) a runner registers, and its own server
     * wants the token too. */
    start_runner("runner-good", tracker, tok);
    q = wait_peers(tracker, "svc-secret", 1, 0);
    ck_assert_ptr_nonnull(q);
    char addr[256];
    snprintf(addr, sizeof addr, "%s", peer(q, "runner", 0)->address);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    ck_assert_int_eq(run_cli(qargs, out, sizeof out, tok), 0);
    ck_assert_msg(strstr(out, addr), "%s", out);
    Ktune__V1__RunResponse *rr = NULL;
    ck_assert_int_ne(run(addr, NULL, NULL, 0, 1, 1, &rr, &st), 0);
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    ck_assert_int_eq(run(addr, "svc-secret", NULL, 0, 1, 1, &rr, &st), 0);
    ktune__v1__run_response__free_unpacked(rr, NULL);
    stop_all();
}
END_TEST

typedef struct {
    const char *runner;
    Ktune__V1__RunCandidate *cand;
    int rc;
    Ktune__V1__RunResponse *resp;
    kt_rpc_status_t st;
} run_job_t;

static void *run_thread(void *arg)
{
    run_job_t *j = arg;
    Ktune__V1__RunCandidate *cp[1] = {j->cand};
    j->rc = run(j->runner, NULL, cp, 1, 1, 3, &j->resp, &j->st);
    return NULL;
}

START_TEST(service_sigterm_lets_the_running_batch_finish)
{
    proc_t *w = start_worker("worker", NULL, NULL);
    proc_t *r = start_runner("runner", NULL, NULL);
    char waddr[64], raddr[64];
    snprintf(waddr, sizeof waddr, "127.0.0.1:%d", logged_port(w));
    snprintf(raddr, sizeof raddr, "127.0.0.1:%d", logged_port(r));
    const char *srcs[] = {SLOW};
    const char *entries[] = {"slow"};
    Ktune__V1__BuildResponse *b = build(waddr, NULL, srcs, entries, 1);
    ck_assert_msg(b->results[0]->error_code == KTUNE__V1__MEASURE_ERROR__NO_ERROR, "%s",
                  b->results[0]->error_msg);
    int64_t elems[2] = {16, 16};
    Ktune__V1__RunCandidate c;
    run_candidate(&c, elems, 21, b->results[0], NULL, 2);
    /* Warm-up plus 3 repeats of 1 run: about 1.2 s of batch. */
    run_job_t job = {.runner = raddr, .cand = &c};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, run_thread, &job), 0);
    ck_assert(wait_log(r, "run: batch of 1 candidate", WAIT_MS));
    ck_assert_int_eq(kill(r->pid, SIGTERM), 0);
    pthread_join(th, NULL);
    ck_assert_msg(job.rc == 0, "Run during drain: %s: %s", kt_rpc_code_name(job.st.code),
                  job.st.msg);
    ck_assert_int_eq(job.resp->results[0]->error_code, KTUNE__V1__MEASURE_ERROR__NO_ERROR);
    ck_assert_uint_eq(job.resp->results[0]->n_costs, 3);
    ktune__v1__run_response__free_unpacked(job.resp, NULL);
    int ws = reap(r, WAIT_MS);
    char *log = log_of(r);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "runner status %d: %s", ws, log);
    const char *drain = strstr(log, "draining"), *done = strstr(log, "run: batch of 1 done");
    ck_assert_msg(drain && done && strstr(done, "stopped"), "%s", log);
    free(log);
    ktune__v1__build_response__free_unpacked(b, NULL);
    stop_all();
}
END_TEST

START_TEST(service_runner_refuses_cuda_device_and_bad_options)
{
    /* A device that does not exist fails at start-up, naming the reason. */
    kt_hw_params_t hw;
    int have_gpu = kt_cuda_device_probe(0, NULL, 0, &hw) == 0;
    char *args[] = {"--device", have_gpu ? "cuda:4096" : "cuda:0", NULL};
    proc_t *r = spawn("runner", "server/ktune-runner", args, NULL);
    int ws = reap(r, WAIT_MS);
    ck_assert(WIFEXITED(ws));
    ck_assert_int_eq(WEXITSTATUS(ws), 1);
    ck_assert(wait_log(r, KT_HAVE_CUDA ? "no CUDA device" : "built without CUDA", 0));
    char *bad[] = {"--device", "tpu", NULL};
    r = spawn("runner-bad", "server/ktune-runner", bad, NULL);
    ws = reap(r, WAIT_MS);
    ck_assert_int_eq(WEXITSTATUS(ws), 2);
    char *bad_key[] = {"--key", "has space", NULL};
    r = spawn("runner-key", "server/ktune-runner", bad_key, NULL);
    ws = reap(r, WAIT_MS);
    ck_assert_int_eq(WEXITSTATUS(ws), 2);
    ck_assert(wait_log(r, "--key wants", 0));
    char *bad_timer[] = {"--timer", "cpu", "--threads", "4", NULL};
    r = spawn("runner-timer", "server/ktune-runner", bad_timer, NULL);
    ws = reap(r, WAIT_MS);
    ck_assert_int_eq(WEXITSTATUS(ws), 2);
    ck_assert(wait_log(r, "needs --threads 1", 0));
    char *bad_timer2[] = {"--timer", "tsc", NULL};
    r = spawn("runner-timer2", "server/ktune-runner", bad_timer2, NULL);
    ws = reap(r, WAIT_MS);
    ck_assert_int_eq(WEXITSTATUS(ws), 2);
    ck_assert(wait_log(r, "--timer is wall or cpu", 0));
}
END_TEST

/* --search-threads sizes the tracker's search pool (logged at start-up);
 * out of range or not a number is bad usage. */
START_TEST(service_tracker_takes_search_threads)
{
    char *args[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", (char *)db_path(),
                    "--search-threads", "3", NULL};
    proc_t *t = spawn("tracker", "tracker/ktune-tracker", args, NULL);
    ck_assert_msg(wait_log(t, "; 3 search threads", WAIT_MS), "%s", log_of(t));
    stop_all();   /* SIGTERM: exits 0, the pool's threads joined */
    const char *bad[] = {"0", "257", "2x", ""};
    for (int i = 0; i < 4; i++) {
        char *a[] = {"--http", "off", "--search-threads", (char *)bad[i], NULL};
        char name[32];
        snprintf(name, sizeof name, "tracker-bad%d", i);
        proc_t *b = spawn(name, "tracker/ktune-tracker", a, NULL);
        int ws = reap(b, WAIT_MS);
        ck_assert(WIFEXITED(ws));
        ck_assert_int_eq(WEXITSTATUS(ws), 2);
        ck_assert(wait_log(b, i < 3 ? "--search-threads wants 1..256"
                                     : "--search-threads needs a value",
                           0));
    }
}
END_TEST

/* Every daemon refuses an empty value (an empty --token-file read as "no
 * token" before) and a number that is not all digits, naming the option. */
START_TEST(service_daemons_refuse_empty_and_malformed_values)
{
    static const struct {
        const char *bin, *a1, *a2, *says;
    } cases[] = {
        {"tracker/ktune-tracker", "--token-file", "", "--token-file needs a value"},
        {"tracker/ktune-tracker", "--db", "", "--db needs a value"},
        {"tracker/ktune-tracker", "--heartbeat-ms", "", "--heartbeat-ms needs a value"},
        {"tracker/ktune-tracker", "--heartbeat-ms", "-", "--heartbeat-ms wants 10..600000"},
        {"server/ktune-runner", "--drain-ms", "", "--drain-ms needs a value"},
        {"server/ktune-runner", "--drain-ms", "+", "--drain-ms wants 0..3600000"},
        {"server/ktune-runner", "--key", "", "--key needs a value"},
        {"server/ktune-runner", "--token-file", "", "--token-file needs a value"},
        {"worker/ktune-worker", "--jobs", "", "--jobs needs a value"},
        {"worker/ktune-worker", "--jobs", " ", "--jobs wants 1..1024"},
        {"worker/ktune-worker", "--listen", "", "--listen needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *a[] = {(char *)cases[i].a1, (char *)cases[i].a2, NULL};
        char name[32];
        snprintf(name, sizeof name, "bad-value%zu", i);
        proc_t *b = spawn(name, cases[i].bin, a, NULL);
        int ws = reap(b, WAIT_MS);
        ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "%s %s '%s': status %d: %s",
                      cases[i].bin, cases[i].a1, cases[i].a2, ws, log_of(b));
        ck_assert_msg(wait_log(b, cases[i].says, 0), "%s %s '%s': %s", cases[i].bin,
                      cases[i].a1, cases[i].a2, log_of(b));
    }
}
END_TEST

/* ---- Jobs -------------------------------------------------------------------------------- */

static const char *const W_TINY[] = {
    "{\"op\":\"matmul\",\"M\":16,\"N\":16,\"K\":16}",
    "{\"op\":\"matmul\",\"M\":8,\"N\":32,\"K\":16}",
    "{\"op\":\"dense\",\"M\":8,\"N\":16,\"K\":32}",
};

typedef struct {
    int trials, per_round, min_repeat_ms;
    int first;            /* first of the tiny workloads */
    const char *target;   /* NULL = cpu (runner key cpu-test); cuda: key "" (the default) */
    const char *search_params;   /* NULL = "" */
    int build_timeout_ms;        /* per candidate build; 0 = the tracker's default */
} job_spec_t;

/* SubmitJob of the first n tiny workloads (weights 1, 2, 3) for runners of
 * key cpu-test; the job id, or -1 with *st set. */
static int64_t submit_job(const char *tracker, const char *token, int n, const job_spec_t *js,
                          kt_rpc_status_t *st)
{
    Ktune__V1__Workload wl[3];
    Ktune__V1__Task task[3], *tp[3];
    for (int i = 0; i < n; i++) {
        ktune__v1__workload__init(&wl[i]);
        wl[i].json = (char *)W_TINY[js->first + i];
        ktune__v1__task__init(&task[i]);
        task[i].workload = &wl[i];
        task[i].weight = i + 1;
        tp[i] = &task[i];
    }
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.number = 2;
    mo.repeat = 1;
    mo.min_repeat_ms = js->min_repeat_ms;
    mo.timeout_ms = 20000;
    mo.check_correctness = 1;
    Ktune__V1__TuningOptions to = KTUNE__V1__TUNING_OPTIONS__INIT;
    to.num_measure_trials = js->trials;
    to.num_measures_per_round = js->per_round;
    to.search_params = (char *)(js->search_params ? js->search_params : "");
    to.build_timeout_ms = js->build_timeout_ms;
    to.measure = &mo;
    Ktune__V1__Job job = KTUNE__V1__JOB__INIT;
    job.tasks = tp;
    job.n_tasks = (size_t)n;
    job.target = (char *)(js->target ? js->target : "cpu");
    job.runner_key = js->target ? "" : "cpu-test";
    job.policy = "sketch.random";
    job.options = &to;
    Ktune__V1__SubmitJobRequest req = KTUNE__V1__SUBMIT_JOB_REQUEST__INIT;
    req.job = &job;
    kt_rpc_client_t *c = client(tracker, token);
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Tracker/SubmitJob", &req.base,
                               &ktune__v1__submit_job_response__descriptor, 30000, &out, st);
    kt_rpc_client_free(c);
    if (rc != 0)
        return -1;
    int64_t id = ((Ktune__V1__SubmitJobResponse *)out)->job_id;
    protobuf_c_message_free_unpacked(out, NULL);
    return id;
}

/* Follow WatchJob to its end; the last progress (caller frees), the number
 * of messages in *n. */
static Ktune__V1__JobProgress *watch_job(const char *tracker, int64_t id, int *n)
{
    kt_rpc_client_t *c = client(tracker, NULL);
    Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
    ref.job_id = id;
    kt_rpc_reader_t *rd = kt_rpc_reader_open(c, "/ktune.v1.Tracker/WatchJob", &ref.base,
                                             &ktune__v1__job_progress__descriptor, 600000);
    ck_assert_ptr_nonnull(rd);
    ProtobufCMessage *last = NULL, *msg = NULL;
    *n = 0;
    while (kt_rpc_reader_next(rd, &msg) == 1) {
        if (last)
            protobuf_c_message_free_unpacked(last, NULL);
        last = msg;
        (*n)++;
    }
    kt_rpc_status_t st;
    ck_assert_msg(kt_rpc_reader_close(rd, &st) == 0, "WatchJob: %s: %s",
                  kt_rpc_code_name(st.code), st.msg);
    kt_rpc_client_free(c);
    ck_assert_ptr_nonnull(last);
    return (Ktune__V1__JobProgress *)last;
}

/* JobStatus over a new connection: the progress (caller frees), or NULL
 * with *st saying why. */
static Ktune__V1__JobProgress *job_status_try(const char *tracker, int64_t id,
                                              kt_rpc_status_t *st)
{
    kt_rpc_client_t *c = client(tracker, NULL);
    Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
    ref.job_id = id;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Tracker/JobStatus", &ref.base,
                               &ktune__v1__job_progress__descriptor, 5000, &out, st);
    kt_rpc_client_free(c);
    return rc == 0 ? (Ktune__V1__JobProgress *)out : NULL;
}

/* Poll JobStatus until the job has ended (the tracker may be restarting). */
static Ktune__V1__JobProgress *wait_job_end(const char *tracker, int64_t id)
{
    for (int waited = 0; waited < 600000; waited += 200) {
        kt_rpc_status_t st;
        Ktune__V1__JobProgress *p = job_status_try(tracker, id, &st);
        if (p) {
            if (strcmp(p->state, "running") != 0 && strcmp(p->state, "queued") != 0)
                return p;
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
        kt_test_sleep_ms(200);
    }
    ck_abort_msg("job %lld did not end", (long long)id);
    return NULL;
}

typedef struct {
    int64_t n;            /* records */
    int dups;             /* (workload, state) pairs stored more than once */
    int64_t by_error[KT_MEASURE_NUM_ERRORS];
} stored_t;

static stored_t stored_records(void)
{
    kt_store_t *s = kt_store_open(db_path(), 0);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    stored_t r = {.n = (int64_t)l->n};
    for (size_t i = 0; i < l->n; i++) {
        r.by_error[l->items[i].error_code]++;
        for (size_t k = i + 1; k < l->n; k++)
            r.dups += l->items[i].state_hash == l->items[k].state_hash &&
                      strcmp(l->items[i].workload_key, l->items[k].workload_key) == 0;
    }
    kt_record_list_free(l);
    kt_store_close(s);
    return r;
}

/* How many times needle occurs in p's log. */
static int log_count(const proc_t *p, const char *needle)
{
    char *s = log_of(p);
    int n = 0;
    for (const char *q = s; (q = strstr(q, needle)); q += strlen(needle))
        n++;
    free(s);
    return n;
}

/* A child process of `parent` (its timing child, for a runner), or 0. */
static pid_t child_of(pid_t parent)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ps -o pid= --ppid %d 2>/dev/null", (int)parent);
    FILE *f = popen(cmd, "r");
    if (!f)
        return 0;
    int pid = 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    pclose(f);
    return (pid_t)pid;
}

/* 1 while pid runs (not a zombie that has ended but is not reaped yet). */
static int alive(pid_t pid)
{
    char path[64], *stat;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(stat = kt_file_read(path, NULL)))
        return 0;
    const char *end = strrchr(stat, ')');   /* "pid (comm) S ..." */
    int running = end && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X';
    free(stat);
    return running;
}

START_TEST(service_job_runs_over_workers_and_runners_and_keeps_the_best)
{
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--heartbeat-ms", HB_MS,
                     "--db", (char *)db_path(), NULL};
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    char tracker[64];
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", logged_port(tr));
    proc_t *runners[3];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "runner%d", i + 1);
        runners[i] = start_runner(name, tracker, NULL);
    }
    start_worker("worker1", tracker, NULL);
    start_worker("worker2", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 3, 2);
    ck_assert_msg(q != NULL, "peers did not register");
    ktune__v1__queue_status_response__free_unpacked(q, NULL);

    job_spec_t js = {.trials = 192, .per_round = 16, .min_repeat_ms = 0};
    kt_rpc_status_t st;
    int64_t id = submit_job(tracker, NULL, 3, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s: %s", kt_rpc_code_name(st.code), st.msg);
    int msgs = 0;
    Ktune__V1__JobProgress *p = watch_job(tracker, id, &msgs);
    ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
    ck_assert_int_eq(p->total_trials, 192);
    ck_assert_int_eq(p->budget, 192);
    ck_assert_int_ge(msgs, 2);
    ck_assert_uint_eq(p->n_tasks, 3);
    ck_assert_msg(strstr(p->table, "[ Task Scheduler ]"), "%s", p->table);
    for (size_t i = 0; i < p->n_tasks; i++)
        ck_assert_double_gt(p->tasks[i]->best_latency, 0);

    /* Every trial is one stored record, every state measured once. */
    stored_t r = stored_records();
    ck_assert_int_eq(r.n, 192);
    ck_assert_int_eq(r.dups, 0);
    /* Each runner measured: the rounds are split over all free runners. */
    for (int i = 0; i < 3; i++)
        ck_assert_msg(log_count(runners[i], "run: batch of") > 0, "%s idle", runners[i]->log);

    /* Provenance: every record names the runner that timed it by host and
     * by peer id, so a slow machine of the pool can be picked out. A
     * candidate whose build failed (a compile timing out on a busy machine)
     * never reached a runner. */
    int64_t timed = kt_test_records_timed(r.n, r.by_error);
    ck_assert_int_gt(timed, 0);
    kt_store_t *ps = kt_store_open(db_path(), 0);
    ck_assert_ptr_nonnull(ps);
    kt_store_counts_t pc;
    kt_store_filter_t by_host = {.runner = "127.0.0.1"};
    ck_assert_int_eq(kt_store_count_records(ps, &by_host, &pc), 0);
    ck_assert_int_eq(pc.total, timed);
    q = wait_peers(tracker, NULL, 3, 2);
    ck_assert_ptr_nonnull(q);
    int64_t by_peers = 0;
    for (size_t i = 0; i < q->n_peers; i++) {
        if (strcmp(q->peers[i]->role, "runner") != 0)
            continue;
        kt_store_filter_t by_id = {.runner = q->peers[i]->peer_id};
        ck_assert_int_eq(kt_store_count_records(ps, &by_id, &pc), 0);
        ck_assert_msg(pc.total > 0, "no record names runner %s", q->peers[i]->peer_id);
        by_peers += pc.total;
    }
    ck_assert_int_eq(by_peers, timed);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    kt_store_close(ps);

    /* QueryBest by job: one record per task, the minimum of its workload. */
    kt_rpc_client_t *c = client(tracker, NULL);
    Ktune__V1__QueryBestRequest qb = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
    qb.job_id = id;
    ProtobufCMessage *out = NULL;
    ck_assert_int_eq(kt_rpc_call_unary(c, "/ktune.v1.Tracker/QueryBest", &qb.base,
                                       &ktune__v1__query_best_response__descriptor, 10000, &out,
                                       &st),
                     0);
    Ktune__V1__QueryBestResponse *best = (Ktune__V1__QueryBestResponse *)out;
    ck_assert_uint_eq(best->n_records, 3);
    kt_store_t *s = kt_store_open(db_path(), 0);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < 3; i++) {
        kt_store_filter_t f = {.workload_key = best->records[i]->workload_key, .valid_only = 1};
        kt_record_list_t *l = NULL;
        ck_assert_int_eq(kt_store_get_records(s, &f, &l), 0);
        double min = 1e30;
        for (size_t k = 0; k < l->n; k++)
            if (l->items[k].mean_cost < min)
                min = l->items[k].mean_cost;
        kt_record_list_free(l);
        ck_assert_double_eq(best->records[i]->mean_cost, min);
        ck_assert_int_eq(best->records[i]->error_code, 0);
        ck_assert_str_eq(best->records[i]->workload_key, p->tasks[i]->workload_key);
    }
    kt_store_close(s);
    /* ... and by workload, top 3 in ascending order. */
    Ktune__V1__QueryBestRequest qw = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
    qw.workload_key = best->records[0]->workload_key;
    qw.top_k = 3;
    ProtobufCMessage *out2 = NULL;
    ck_assert_int_eq(kt_rpc_call_unary(c, "/ktune.v1.Tracker/QueryBest", &qw.base,
                                       &ktune__v1__query_best_response__descriptor, 10000, &out2,
                                       &st),
                     0);
    Ktune__V1__QueryBestResponse *top = (Ktune__V1__QueryBestResponse *)out2;
    ck_assert_uint_eq(top->n_records, 3);
    ck_assert_double_eq(top->records[0]->mean_cost, best->records[0]->mean_cost);
    ck_assert(top->records[0]->mean_cost <= top->records[1]->mean_cost &&
              top->records[1]->mean_cost <= top->records[2]->mean_cost);
    protobuf_c_message_free_unpacked(out2, NULL);
    protobuf_c_message_free_unpacked(out, NULL);

    /* ListRecords streams the job's records. */
    Ktune__V1__ListRecordsRequest lr = KTUNE__V1__LIST_RECORDS_REQUEST__INIT;
    lr.job_id = id;
    kt_rpc_reader_t *rd = kt_rpc_reader_open(c, "/ktune.v1.Tracker/ListRecords", &lr.base,
                                             &ktune__v1__record__descriptor, 60000);
    int streamed = 0;
    ProtobufCMessage *msg = NULL;
    while (kt_rpc_reader_next(rd, &msg) == 1) {
        streamed++;
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    ck_assert_int_eq(kt_rpc_reader_close(rd, &st), 0);
    ck_assert_int_eq(streamed, 192);
    kt_rpc_client_free(c);

    /* The status page has the job's table and curve; /metrics the counts. */
    ck_assert(wait_log(tr, "http port ", WAIT_MS));
    char *tl = log_of(tr);
    int http_port = atoi(strstr(tl, "http port ") + strlen("http port "));
    free(tl);
    char *page = http_get(http_port, "/api/status");
    ck_assert_msg(strstr(page, "\"curve\"") && strstr(page, "\"estimated_latency_s\"") &&
                      strstr(page, "\"state\": \"done\""),
                  "%s", page);
    free(page);
    char *metrics = http_get(http_port, "/metrics");
    ck_assert_msg(strstr(metrics, "ktune_measurements_total{error=\"NO_ERROR\"}") &&
                      strstr(metrics, "ktune_peer_rpc_seconds_bucket{method=\"Run\""),
                  "%s", metrics);
    free(metrics);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    stop_all();
}
END_TEST

START_TEST(service_job_survives_a_killed_runner_and_a_crashing_candidate)
{
    char tracker[64];
    proc_t *tr = start_tracker("127.0.0.1:0", NULL, tracker);
    start_worker("worker", tracker, NULL);
    proc_t *r1 = start_runner("runner1", tracker, NULL);
    proc_t *r2 = start_runner("runner2", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 2, 1);
    ck_assert_ptr_nonnull(q);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    /* 150 ms per candidate at least (CPU time, so more on a busy machine):
     * every batch runs long enough to be hit between two looks at the logs.
     * Two rounds of
     * 18: more than one Run batch (16) each, so every round is split over
     * both runners whichever is free. */
    job_spec_t js = {.trials = 36, .per_round = 18, .min_repeat_ms = 150};
    kt_rpc_status_t st;
    int64_t id = submit_job(tracker, NULL, 1, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s", st.msg);

    /* A candidate's timing child dies of SIGSEGV on runner1: a child that
     * is alive while runner1 has a batch open (one that has just ended is
     * looked for again). */
    int crashed = 0;
    for (int waited = 0; waited < WAIT_MS * 4 && !crashed; waited += 10) {
        if (log_count(r1, "candidates from") > log_count(r1, "done,")) {
            pid_t victim = child_of(r1->pid);
            crashed = victim > 0 && alive(victim) && kill(victim, SIGSEGV) == 0;
        }
        if (!crashed)
            kt_test_sleep_ms(10);
    }
    ck_assert_msg(crashed, "runner1 never ran a batch");
    /* ... and runner2 is killed in the middle of its second batch. */
    int hit = 0;
    for (int waited = 0; waited < WAIT_MS * 4 && !hit; waited += 10) {
        hit = log_count(r2, "candidates from") >= 2 && log_count(r2, "done,") == 1;
        if (!hit)
            kt_test_sleep_ms(10);
    }
    ck_assert_msg(hit, "runner2 never started a second batch: %s", log_of(r2));
    kill_hard(r2);

    Ktune__V1__JobProgress *p = wait_job_end(tracker, id);
    ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
    ck_assert_int_eq(p->total_trials, 36);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    stored_t r = stored_records();
    ck_assert_int_eq(r.n, 36);
    ck_assert_int_eq(r.dups, 0);
    ck_assert_msg(r.by_error[KT_MEASURE_RUNTIME_DEVICE] + r.by_error[KT_MEASURE_UNKNOWN_ERROR] >= 1,
                  "the crash left no record");
    ck_assert_int_gt(r.by_error[KT_MEASURE_NO_ERROR], 0);
    ck_assert(wait_log(tr, "re-queued", 0));
    stop_all();
}
END_TEST

/* The tracker of a test store: its HTTP port. */
static int start_store_tracker(proc_t **out)
{
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--heartbeat-ms", HB_MS,
                     "--db", (char *)db_path(), NULL};
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    ck_assert(wait_log(tr, "http port ", WAIT_MS));
    char *tl = log_of(tr);
    int port = atoi(strstr(tl, "http port ") + strlen("http port "));
    free(tl);
    if (out)
        *out = tr;
    return port;
}

/* A tracker started on a store with earlier jobs shows them: on the page,
 * in /api/status (with their tasks' layers and the trials of their records)
 * and in ktune_jobs{state} of /metrics, as `ktune status` does. */
START_TEST(service_restarted_tracker_shows_the_store_s_earlier_jobs)
{
    kt_store_t *s = kt_store_open(db_path(), KT_STORE_CREATE);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_workload_t *w = kt_workload_parse(W_TINY[0]);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)),
                     0);
    const char *states[] = {"done", "cancelled", "failed"};
    for (int i = 0; i < 3; i++) {
        kt_store_job_t job = {.created = 1700000000 + i, .state = states[i], .target = "cpu",
                              .runner_key = "cpu-test", .strategy = "gradient",
                              .policy = "sketch.random", .options_json = "{\"num_measure_trials\":4}"};
        kt_store_task_t task = {0, kt_workload_key(w), 1, "cpu", "conv0 + bn0 + relu0"};
        ck_assert_int_eq(kt_store_put_job(s, &job, &task, 1), 0);
    }
    double cost = 1e-4;
    kt_record_t r = {.workload_key = kt_workload_key(w), .target = "cpu", .state_json = "{}",
                     .state_hash = 1, .costs = &cost, .ncosts = 1, .timestamp = 1700000000,
                     .job_id = 1, .origin = KT_STORE_ORIGIN_TRANSFER};
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    kt_store_close(s);
    kt_workload_free(w);

    int http_port = start_store_tracker(NULL);
    char *api = http_get(http_port, "/api/status");
    ck_assert_msg(strstr(api, "\"state\": \"done\"") && strstr(api, "\"state\": \"cancelled\"") &&
                      strstr(api, "\"state\": \"failed\"") &&
                      strstr(api, "\"desc\": \"conv0 + bn0 + relu0\"") &&
                      strstr(api, "\"jobs_total\": 3") && strstr(api, "\"total_trials\": 1"),
                  "%s", api);
    /* Each job's one task has that record as its best, with its origin. */
    int origins = 0;
    for (const char *q = strstr(api, "\"best_origin\": \"transfer\""); q;
         q = strstr(q + 1, "\"best_origin\": \"transfer\""))
        origins++;
    ck_assert_msg(origins == 3, "%s", api);
    /* The store at a glance: its size and counts, records per device key. */
    const char *body = strstr(api, "\r\n\r\n");
    json_t *snap = body ? json_loads(body + 4, 0, NULL) : NULL;
    json_t *st = json_object_get(snap, "store");
    ck_assert_msg(json_is_object(st), "%s", api);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "records")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "valid")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "workloads")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "schema_version")),
                     KT_STORE_SCHEMA_VERSION);
    ck_assert_int_gt(json_integer_value(json_object_get(st, "bytes")), 0);
    ck_assert_int_eq(json_array_size(json_object_get(st, "keys")), 1);
    json_decref(snap);
    free(api);
    char *page = http_get(http_port, "/");
    ck_assert_msg(strstr(page, "3 jobs") && strstr(page, "conv0 + bn0 + relu0") &&
                      strstr(page, "<h2>Store</h2>") && strstr(page, "1 records (1 valid)") &&
                      strstr(page, "1 workloads") && strstr(page, "<th>Best from</th>") &&
                      strstr(page, "<td>transfer</td>"),
                  "%s", page);
    free(page);
    char *metrics = http_get(http_port, "/metrics");
    ck_assert_msg(strstr(metrics, "ktune_jobs{state=\"done\"} 1") &&
                      strstr(metrics, "ktune_jobs{state=\"cancelled\"} 1") &&
                      strstr(metrics, "ktune_jobs{state=\"failed\"} 1"),
                  "%s", metrics);
    free(metrics);
    stop_all();
}
END_TEST

/* The value of an unlabelled metric in /metrics. */
static double metric_value(int port, const char *name)
{
    char *text = http_get(port, "/metrics");
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *p = strstr(text, needle);
    ck_assert_msg(p != NULL, "no %s in %s", name, text);
    double v = strtod(p + strlen(needle), NULL);
    free(text);
    return v;
}

/* The ids of the jobs on an HTML page, in order ("2000,1999,..."). */
static void page_job_ids(const char *page, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = strstr(page, "<h3>Job "); p; p = strstr(p + 1, "<h3>Job ")) {
        len += (size_t)snprintf(out + len, size - len, "%s%d", len ? "," : "",
                                atoi(p + strlen("<h3>Job ")));
        ck_assert_uint_lt(len, size);
    }
}

/* The JSON body of an HTTP answer (new reference). */
static json_t *body_json(const char *answer)
{
    const char *b = strstr(answer, "\r\n\r\n");
    ck_assert_msg(b != NULL, "%s", answer);
    json_t *j = json_loads(b + 4, 0, NULL);
    ck_assert_msg(j != NULL, "%s", answer);
    return j;
}

#define MANY_JOBS 2000
#define MANY_JOBS_RECORDS 3

/* A store of 2,000 finished jobs (one task each, over a workload with 3
 * records): / shows the 20 most recent and links to the older pages,
 * /api/status pages with limit and offset, bad values are 400, and a page
 * reads only its own jobs' records (ktune_status_records_read_total grows
 * by 20 x 3 per page, not 2,000 x 3). */
START_TEST(service_tracker_pages_a_store_of_many_jobs)
{
    kt_store_t *s = kt_store_open(db_path(), KT_STORE_CREATE);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_workload_t *w = kt_workload_parse(W_TINY[0]);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)),
                     0);
    for (int i = 0; i < MANY_JOBS; i++) {
        kt_store_job_t job = {.created = 1700000000 + i, .state = "done", .target = "cpu",
                              .runner_key = "cpu-test", .strategy = "gradient",
                              .policy = "sketch.random",
                              .options_json = "{\"num_measure_trials\":4}"};
        kt_store_task_t task = {0, kt_workload_key(w), 1, "cpu", "dense0"};
        ck_assert_int_eq(kt_store_put_job(s, &job, &task, 1), 0);
        ck_assert_int_eq(job.id, i + 1);
    }
    double cost = 1e-4;
    kt_record_t r = {.workload_key = kt_workload_key(w), .target = "cpu", .state_json = "{}",
                     .state_hash = 1, .costs = &cost, .ncosts = 1, .timestamp = 1700000000,
                     .job_id = 1};
    for (int i = 0; i < MANY_JOBS_RECORDS; i++) {
        r.state_hash = (uint64_t)i + 1;
        ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    }
    kt_store_close(s);
    kt_workload_free(w);

    int port = start_store_tracker(NULL);
    char ids[256];
    double read0 = metric_value(port, "ktune_status_records_read_total");
    char *page = http_get(port, "/");
    page_job_ids(page, ids, sizeof ids);
    ck_assert_str_eq(ids, "2000,1999,1998,1997,1996,1995,1994,1993,1992,1991,1990,1989,1988,"
                          "1987,1986,1985,1984,1983,1982,1981");
    ck_assert_msg(strstr(page, "2000 jobs") && strstr(page, "page 1 of 100") &&
                      strstr(page, "href=\"/?page=2\""),
                  "%s", page);
    free(page);
    double read1 = metric_value(port, "ktune_status_records_read_total");
    ck_assert_msg(read1 - read0 == 20 * MANY_JOBS_RECORDS, "a page read %g records",
                  read1 - read0);

    page = http_get(port, "/?page=100");
    page_job_ids(page, ids, sizeof ids);
    ck_assert_str_eq(ids, "20,19,18,17,16,15,14,13,12,11,10,9,8,7,6,5,4,3,2,1");
    free(page);
    page = http_get(port, "/?page=101");
    page_job_ids(page, ids, sizeof ids);
    ck_assert_str_eq(ids, "");
    ck_assert_msg(strstr(page, "No jobs on page 101") && strstr(page, "href=\"/?page=100\""),
                  "%s", page);
    free(page);

    char *api = http_get(port, "/api/status?limit=3&offset=1997");
    json_t *j = body_json(api);
    free(api);
    json_t *jobs = json_object_get(j, "jobs");
    ck_assert_int_eq(json_array_size(jobs), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(jobs, 0), "id")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(jobs, 2), "id")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "jobs_total")), MANY_JOBS);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "offset")), 1997);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "limit")), 3);
    json_decref(j);

    const char *bad[] = {"/?page=0", "/?page=x", "/api/status?limit=1000", "/api/status?offset=-1"};
    for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
        char *a = http_get(port, bad[i]);
        ck_assert_msg(strstr(a, " 400 ") && strstr(a, "bad request: "), "%s: %s", bad[i], a);
        free(a);
    }
    stop_all();
}
END_TEST

/* A finished job without a latency log (it ran before ktune kept one) draws
 * its convergence from its tasks' records in id order: each task's best so
 * far, and the weighted sum once both have one. A job with a log keeps it,
 * drawn from the records before its first point: a job resumed a second
 * time logged only from its first resumption on, and its history before is
 * in the records alone. */
START_TEST(service_stored_job_draws_its_curve_from_its_records)
{
    kt_store_t *s = kt_store_open(db_path(), KT_STORE_CREATE);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_workload_t *w[2];
    kt_store_task_t tasks[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(w[i] = kt_workload_parse(W_TINY[i]));
        ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w[i]), kt_workload_json(w[i]),
                                               kt_workload_flops(w[i])),
                         0);
        tasks[i] = (kt_store_task_t){i, kt_workload_key(w[i]), i + 1, "cpu", ""};
    }
    kt_store_job_t job = {.created = 1700000000, .state = "done", .target = "cpu",
                          .runner_key = "cpu-test", .strategy = "gradient",
                          .policy = "sketch.random",
                          .options_json = "{\"num_measure_trials\":8,"
                                          "\"num_measures_per_round\":1}"};
    ck_assert_int_eq(kt_store_put_job(s, &job, tasks, 2), 0);
    kt_store_job_t logged = job;
    ck_assert_int_eq(kt_store_put_job(s, &logged, tasks, 2), 0);
    ck_assert_int_eq(kt_store_log_latency(s, logged.id, 5, 1.0, 0.5), 0);
    /* A queued job over the same tasks: the tracker resumes it, and until
     * it runs a round its curve is the records' it continues from. */
    kt_store_job_t queued = job;
    queued.state = "queued";
    ck_assert_int_eq(kt_store_put_job(s, &queued, tasks, 2), 0);
    /* A running job the tracker resumes whose log starts at trial 5 (its
     * first resumption): restarted again, its curve is the whole history. */
    kt_store_job_t resumed = job;
    resumed.state = "running";
    ck_assert_int_eq(kt_store_put_job(s, &resumed, tasks, 2), 0);
    ck_assert_int_eq(kt_store_log_latency(s, resumed.id, 5, 1.0, 0.25), 0);
    /* In id order: task 0 at 3 ms, a failure, task 1 at 5 ms (weight 2),
     * task 0 at 1 ms, task 1 at 4 ms. */
    const struct {
        int task;
        double cost;
        int error;
    } recs[] = {{0, 3e-3, 0}, {0, 0, KT_MEASURE_RUNTIME_DEVICE}, {1, 5e-3, 0}, {0, 1e-3, 0},
                {1, 4e-3, 0}};
    for (size_t i = 0; i < KT_ARRAY_LEN(recs); i++) {
        kt_record_t r = {.workload_key = kt_workload_key(w[recs[i].task]), .target = "cpu",
                         .state_json = "{}", .state_hash = i + 1, .costs = &recs[i].cost,
                         .ncosts = recs[i].error ? 0 : 1, .error_code = recs[i].error,
                         .timestamp = 1700000000, .job_id = job.id};
        ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    }
    kt_store_close(s);
    kt_workload_free(w[0]);
    kt_workload_free(w[1]);

    int port = start_store_tracker(NULL);
    char *api = http_get(port, "/api/status");
    json_t *j = body_json(api);
    free(api);
    json_t *jobs = json_object_get(j, "jobs");
    ck_assert_int_eq(json_array_size(jobs), 4);
    /* Each job's curve: the records' points, and from trial 5 on the log's
     * where it has one. */
    const struct {
        int64_t id;
        double last;   /* the point at trial 5 */
    } want_of[] = {{job.id, 1e-3 + 2 * 4e-3}, {logged.id, 0.5}, {queued.id, 1e-3 + 2 * 4e-3},
                   {resumed.id, 0.25}};
    const double want[][2] = {{3, 3e-3 + 2 * 5e-3}, {4, 1e-3 + 2 * 5e-3}, {5, 0}};
    for (size_t k = 0; k < KT_ARRAY_LEN(want_of); k++) {
        json_t *c = NULL;
        for (size_t q = 0; q < json_array_size(jobs); q++)
            if (json_integer_value(json_object_get(json_array_get(jobs, q), "id")) ==
                want_of[k].id)
                c = json_object_get(json_array_get(jobs, q), "curve");
        char *text = json_dumps(c, 0);
        ck_assert_msg(json_array_size(c) == KT_ARRAY_LEN(want), "job %" PRId64 ": curve %s",
                      want_of[k].id, text);
        for (size_t i = 0; i < KT_ARRAY_LEN(want); i++) {
            json_t *pt = json_array_get(c, i);
            double y = i + 1 < KT_ARRAY_LEN(want) ? want[i][1] : want_of[k].last;
            ck_assert_msg(json_integer_value(json_array_get(pt, 0)) == (json_int_t)want[i][0] &&
                              fabs(json_real_value(json_array_get(pt, 1)) - y) < 1e-12,
                          "job %" PRId64 ": curve %s", want_of[k].id, text);
        }
        free(text);
    }
    json_decref(j);
    /* The page plots it: a polyline of its three points. */
    char *page = http_get(port, "/");
    ck_assert_msg(strstr(page, "<polyline class=\"curve\""), "%s", page);
    free(page);
    stop_all();
}
END_TEST

START_TEST(service_killed_tracker_resumes_its_job_on_restart)
{
    char tracker[64];
    proc_t *tr = start_small_cluster(tracker);
    /* 100 ms per candidate at least (CPU time): the two rounds after the
     * first 12 records take more than a second, so the job still runs when
     * the tracker is killed however late this test looks. */
    job_spec_t js = {.trials = 24, .per_round = 6, .min_repeat_ms = 100};
    kt_rpc_status_t st;
    int64_t id = submit_job(tracker, NULL, 2, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s", st.msg);
    /* SIGKILL once some rounds are stored. */
    int64_t before = 0;
    for (int waited = 0; waited < WAIT_MS * 4 && before < 12; waited += 50) {
        before = stored_records().n;
        if (before < 12)
            kt_test_sleep_ms(50);
    }
    ck_assert_int_ge(before, 12);
    kill_hard(tr);
    before = stored_records().n;
    ck_assert_int_lt(before, 24);

    char again[64];
    proc_t *tr2 = start_tracker(tracker, NULL, again);
    ck_assert_str_eq(again, tracker);
    Ktune__V1__JobProgress *p = wait_job_end(tracker, id);
    ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
    ck_assert_int_eq(p->total_trials, 24);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    stored_t r = stored_records();
    ck_assert_int_eq(r.n, 24);
    ck_assert_int_eq(r.dups, 0);
    ck_assert(wait_log(tr2, "resumed from the store", 0));
    stop_all();
}
END_TEST

/* The job's progress over JobStatus; caller frees. */
static Ktune__V1__JobProgress *job_status(const char *tracker, int64_t id)
{
    kt_rpc_status_t st;
    Ktune__V1__JobProgress *p = job_status_try(tracker, id, &st);
    ck_assert_msg(p != NULL, "JobStatus: %s", st.msg);
    return p;
}

/* SIGTERM to a tracker whose Build calls wait on a worker that never
 * answers (SIGSTOPped; found by deploy/soak.sh, where the exit took 14 s):
 * the tracker cancels them and exits at once, status 0, not when their
 * deadline (here minutes: 120 s builds) or the worker's drop (heartbeats
 * every 20 s: a minute) ends them; the records it had committed (and told)
 * are in the store, each state once, the job still running there. */
START_TEST(service_sigterm_cancels_builds_on_a_stopped_worker)
{
    char tracker[64];
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--heartbeat-ms", "20000",
                     "--db", (char *)db_path(), NULL};
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", logged_port(tr));
    proc_t *w = start_worker("worker", tracker, NULL);
    start_runner("runner", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 1, 1);
    ck_assert_ptr_nonnull(q);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    job_spec_t js = {.trials = 400, .per_round = 4, .build_timeout_ms = 120000};
    kt_rpc_status_t st;
    int64_t id = submit_job(tracker, NULL, 1, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s", st.msg);
    int64_t trials = 0;
    for (int waited = 0; trials < 4; waited += 50) {
        ck_assert_msg(waited < WAIT_MS * 4, "no round was stored");
        Ktune__V1__JobProgress *p = job_status(tracker, id);
        trials = p->total_trials;
        protobuf_c_message_free_unpacked(&p->base, NULL);
        kt_test_sleep_ms(50);
    }
    ck_assert_int_eq(kill(w->pid, SIGSTOP), 0);
    /* Rounds stop committing once every one waits on a Build. */
    for (int still = 0, waited = 0; still < 1500; waited += 100) {
        ck_assert_msg(waited < WAIT_MS, "the job went on without its worker");
        kt_test_sleep_ms(100);
        Ktune__V1__JobProgress *p = job_status(tracker, id);
        still = p->total_trials == trials ? still + 100 : 0;
        trials = p->total_trials;
        protobuf_c_message_free_unpacked(&p->base, NULL);
    }
    ck_assert_int_lt(trials, 400);

    double t0 = kt_time_mono();
    ck_assert_int_eq(kill(tr->pid, SIGTERM), 0);
    int ws = 0;
    int exited = kt_test_wait(tr, 10000, &ws);
    double took = kt_time_mono() - t0;
    kill(w->pid, SIGCONT);
    char *log = log_of(tr);
    ck_assert_msg(exited && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                  "the tracker did not stop within 10 s (status %d): %s", ws, log);
    ck_assert_msg(took < 2.0 * KT_TEST_SLOW, "the tracker took %.1f s to stop: %s", took, log);
    ck_assert_msg(strstr(log, "in flight to runners and workers"), "%s", log);
    free(log);
    stored_t r = stored_records();
    ck_assert_int_ge(r.n, trials);
    ck_assert_int_eq(r.dups, 0);
    ck_assert_msg(kt_test_job_stored_as(db_path(), id, "running"), "%s", kt_err_msg());
    stop_all();
}
END_TEST

/* Two jobs on the one runner of their key: the registry alternates its
 * leases between them, so both make progress while both run: in commit
 * order, each job's records start before the other's end. */
START_TEST(service_two_jobs_share_a_runner_fairly)
{
    char tracker[64];
    start_tracker("127.0.0.1:0", NULL, tracker);
    start_worker("worker", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 0, 1);
    ck_assert_ptr_nonnull(q);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    kt_rpc_status_t st;
    job_spec_t a = {.trials = 16, .per_round = 4, .first = 0};
    job_spec_t b = {.trials = 16, .per_round = 4, .first = 1};
    int64_t ids[2] = {submit_job(tracker, NULL, 1, &a, &st), 0};
    ck_assert_msg(ids[0] > 0, "SubmitJob: %s", st.msg);
    ids[1] = submit_job(tracker, NULL, 1, &b, &st);
    ck_assert_msg(ids[1] > 0, "SubmitJob: %s", st.msg);
    /* The runner comes once both jobs wait for it: however slowly this
     * test submitted, neither job can have run before the other existed. */
    start_runner("runner", tracker, NULL);
    for (int i = 0; i < 2; i++) {
        Ktune__V1__JobProgress *p = wait_job_end(tracker, ids[i]);
        ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
        ck_assert_int_eq(p->total_trials, 16);
        protobuf_c_message_free_unpacked(&p->base, NULL);
    }
    kt_store_t *s = kt_store_open(db_path(), 0);
    ck_assert_ptr_nonnull(s);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 32);
    /* Record ids follow commit order. */
    int64_t first[2] = {INT64_MAX, INT64_MAX}, last[2] = {0, 0};
    for (size_t i = 0; i < l->n; i++) {
        int k = l->items[i].job_id == ids[1];
        ck_assert(l->items[i].job_id == ids[k]);
        if (l->items[i].id < first[k])
            first[k] = l->items[i].id;
        if (l->items[i].id > last[k])
            last[k] = l->items[i].id;
    }
    kt_record_list_free(l);
    kt_store_close(s);
    ck_assert_msg(first[1] < last[0] && first[0] < last[1],
                  "one job ran before the other: records %lld..%lld and %lld..%lld",
                  (long long)first[0], (long long)last[0], (long long)first[1],
                  (long long)last[1]);
    stop_all();
}
END_TEST

/* A cuda job is accepted and waits, queued and saying so, while no runner
 * of its key exists; the worker builds CUDA candidates with NVRTC. */
START_TEST(service_cuda_job_waits_for_a_runner_and_workers_build_cuda)
{
    char tracker[64];
    start_tracker("127.0.0.1:0", NULL, tracker);
    proc_t *w = start_worker("worker", tracker, NULL);
    Ktune__V1__QueueStatusResponse *q = wait_peers(tracker, NULL, 0, 1);
    ck_assert_ptr_nonnull(q);
    char waddr[64];
    snprintf(waddr, sizeof waddr, "%s", peer(q, "worker", 0)->address);
    ktune__v1__queue_status_response__free_unpacked(q, NULL);
    (void)w;
    static const char *CU = "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] = 1; }\n";
    Ktune__V1__BuildCandidate cand = KTUNE__V1__BUILD_CANDIDATE__INIT, *cp = &cand;
    cand.candidate_id = 1;
    cand.source = (char *)CU;
    cand.entry = "k";
    Ktune__V1__BuildRequest req = KTUNE__V1__BUILD_REQUEST__INIT;
    req.target = "cuda";
    req.arch = "sm_80";
    req.candidates = &cp;
    req.n_candidates = 1;
    kt_rpc_client_t *c = client(waddr, NULL);
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Worker/Build", &req.base,
                               &ktune__v1__build_response__descriptor, 60000, &out, &st);
    kt_rpc_client_free(c);
#if KT_HAVE_CUDA
    ck_assert_msg(rc == 0, "Build: %s", st.msg);
    const Ktune__V1__BuildResult *br = ((Ktune__V1__BuildResponse *)out)->results[0];
    ck_assert_msg(br->error_code == 0, "%s", br->error_msg);
    ck_assert_uint_gt(br->artifact.len, 0);
    protobuf_c_message_free_unpacked(out, NULL);
#else
    ck_assert_int_eq(st.code, KT_RPC_UNIMPLEMENTED);
    kt_fail_without_cuda("NVRTC build on the worker");
    (void)rc;
#endif
    job_spec_t js = {.trials = 8, .per_round = 4, .target = "cuda"};
    int64_t id = submit_job(tracker, NULL, 1, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s", st.msg);
    Ktune__V1__JobProgress *p = NULL;
    for (int waited = 0; waited < WAIT_MS; waited += 100) {
        c = client(tracker, NULL);
        Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
        ref.job_id = id;
        out = NULL;
        kt_rpc_call_unary(c, "/ktune.v1.Tracker/JobStatus", &ref.base,
                          &ktune__v1__job_progress__descriptor, 5000, &out, &st);
        kt_rpc_client_free(c);
        p = (Ktune__V1__JobProgress *)out;
        if (p && strstr(p->message, "waiting for a runner of key 'cuda'"))
            break;
        if (p)
            protobuf_c_message_free_unpacked(out, NULL);
        p = NULL;
        kt_test_sleep_ms(100);
    }
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p->state, "queued");
    ck_assert_str_eq(p->target, "cuda");
    ck_assert_str_eq(p->runner_key, "cuda");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    char idarg[32];
    snprintf(idarg, sizeof idarg, "%lld", (long long)id);
    char *cargs[] = {"cancel", idarg, "--tracker", tracker, NULL};
    char text[4096];
    ck_assert_int_eq(run_cli(cargs, text, sizeof text, NULL), 0);
    p = wait_job_end(tracker, id);
    ck_assert_str_eq(p->state, "cancelled");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    stop_all();
}
END_TEST

START_TEST(service_job_rpcs_refuse_missing_or_wrong_token)
{
    char tok[512], tracker[64];
    write_file("token", "job-secret\n", tok, sizeof tok);
    /* Daemons refuse token files other users can read (docs/security.md). */
    ck_assert_int_eq(chmod(tok, 0600), 0);
    start_tracker("127.0.0.1:0", tok, tracker);
    job_spec_t js = {.trials = 8, .per_round = 8};
    kt_rpc_status_t st;
    ck_assert_int_eq(submit_job(tracker, NULL, 1, &js, &st), -1);
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    ck_assert_int_eq(submit_job(tracker, "not-the-secret", 1, &js, &st), -1);
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    /* Nothing was stored or started. */
    kt_rpc_client_t *c = client(tracker, "job-secret");
    Ktune__V1__ListJobsRequest lj = KTUNE__V1__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    ck_assert_int_eq(kt_rpc_call_unary(c, "/ktune.v1.Tracker/ListJobs", &lj.base,
                                       &ktune__v1__list_jobs_response__descriptor, 10000, &out,
                                       &st),
                     0);
    ck_assert_uint_eq(((Ktune__V1__ListJobsResponse *)out)->n_jobs, 0);
    protobuf_c_message_free_unpacked(out, NULL);
    kt_rpc_client_free(c);
    ck_assert_int_eq(stored_records().n, 0);
    /* With the token a bad job is refused for what it is ... */
    js.trials = 0;
    ck_assert_int_eq(submit_job(tracker, "job-secret", 1, &js, &st), -1);
    ck_assert_int_eq(st.code, KT_RPC_INVALID_ARGUMENT);
    js.trials = 8;
    js.search_params = "eps_greedy=0.1,evolutionary_search_population=-5";
    ck_assert_int_eq(submit_job(tracker, "job-secret", 1, &js, &st), -1);
    ck_assert_int_eq(st.code, KT_RPC_INVALID_ARGUMENT);
    ck_assert_msg(strstr(st.msg, "evolutionary_search_population must be >= 1"), "%s", st.msg);
    /* ... and a good one runs (waiting for peers here) until cancelled; its
     * search parameters are kept as given. */
    js.search_params = "eps_greedy=0.1,model_label=log";
    int64_t id = submit_job(tracker, "job-secret", 1, &js, &st);
    ck_assert_msg(id > 0, "SubmitJob: %s", st.msg);
    c = client(tracker, "job-secret");
    Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
    ref.job_id = id;
    ck_assert_int_eq(kt_rpc_call_unary(c, "/ktune.v1.Tracker/CancelJob", &ref.base,
                                       &ktune__v1__job_progress__descriptor, 30000, &out, &st),
                     0);
    ck_assert_str_eq(((Ktune__V1__JobProgress *)out)->state, "cancelled");
    ck_assert_str_eq(((Ktune__V1__JobProgress *)out)->search_params,
                     "eps_greedy=0.1,model_label=log");
    protobuf_c_message_free_unpacked(out, NULL);
    ck_assert_int_ne(kt_rpc_call_unary(c, "/ktune.v1.Tracker/CancelJob", &ref.base,
                                       &ktune__v1__job_progress__descriptor, 30000, &out, &st),
                     0);
    ck_assert_int_eq(st.code, KT_RPC_FAILED_PRECONDITION);
    ref.job_id = id + 1;
    ck_assert_int_ne(kt_rpc_call_unary(c, "/ktune.v1.Tracker/JobStatus", &ref.base,
                                       &ktune__v1__job_progress__descriptor, 30000, &out, &st),
                     0);
    ck_assert_int_eq(st.code, KT_RPC_NOT_FOUND);
    kt_rpc_client_free(c);
    ck_assert_int_eq(stored_records().n, 0);
    stop_all();
}
END_TEST

START_TEST(service_python_client_submits_a_job_and_reads_the_best)
{
    /* python3-grpcio and python3-grpc-tools are test dependencies
     * (deploy/install-deps.sh). */
    ck_assert_msg(system("/usr/bin/python3 -c 'import grpc, grpc_tools' >/dev/null 2>&1") == 0,
                  "/usr/bin/python3 cannot import grpc and grpc_tools: install python3-grpcio "
                  "and python3-grpc-tools (deploy/install-deps.sh)");
    const char *src = getenv("KT_SOURCE_ROOT");
    ck_assert_ptr_nonnull(src);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && /usr/bin/python3 -m grpc_tools.protoc -I%s/proto --python_out=. "
             "--grpc_python_out=. ktune.proto > protoc.log 2>&1",
             kt_test_dir, src);
    ck_assert_msg(system(cmd) == 0, "protoc failed (%s/protoc.log)", kt_test_dir);
    char tracker[64];
    start_small_cluster(tracker);
    const char *script =
        "import sys, time, grpc\n"
        "import ktune_pb2 as pb, ktune_pb2_grpc as rpc\n"
        "stub = rpc.TrackerStub(grpc.insecure_channel(sys.argv[1]))\n"
        "job = pb.Job(target='cpu', runner_key='cpu-test', policy='sketch.random',\n"
        "             options=pb.TuningOptions(num_measure_trials=8,\n"
        "                 measure=pb.MeasureOptions(number=2, repeat=1, check_correctness=True)))\n"
        "job.tasks.add(workload=pb.Workload(json='{\"op\":\"matmul\",\"M\":8,\"N\":8,\"K\":8}'),"
        " weight=1)\n"
        "jid = stub.SubmitJob(pb.SubmitJobRequest(job=job), timeout=30).job_id\n"
        "for _ in range(3000):\n"
        "    p = stub.JobStatus(pb.JobRef(job_id=jid), timeout=10)\n"
        "    if p.state not in ('queued', 'running'): break\n"
        "    time.sleep(0.1)\n"
        "best = stub.QueryBest(pb.QueryBestRequest(job_id=jid), timeout=10)\n"
        "print('RESULT', jid, p.state, p.total_trials, len(best.records),\n"
        "      repr(best.records[0].mean_cost), best.records[0].workload_key)\n";
    char path[512];
    write_file("client.py", script, path, sizeof path);
    snprintf(cmd, sizeof cmd, "cd %s && /usr/bin/python3 client.py %s > client.out 2>&1", kt_test_dir,
             tracker);
    int rc = system(cmd);
    snprintf(path, sizeof path, "%s/client.out", kt_test_dir);
    char *out = kt_file_read(path, NULL);
    ck_assert_msg(rc == 0 && out, "client failed: %s", out ? out : "(no output)");
    long long jid = 0;
    int trials = 0, n = 0;
    char state[32] = "";
    double cost = 0;
    const char *line = strstr(out, "RESULT ");
    ck_assert_msg(line && sscanf(line, "RESULT %lld %31s %d %d %lf", &jid, state, &trials, &n,
                                 &cost) == 5,
                  "%s", out);
    ck_assert_str_eq(state, "done");
    ck_assert_int_eq(trials, 8);
    ck_assert_int_eq(n, 1);
    /* The store's best record of that workload is what Python read. */
    kt_store_t *s = kt_store_open(db_path(), 0);
    ck_assert_ptr_nonnull(s);
    kt_store_job_info_t *info = NULL;
    ck_assert_int_eq(kt_store_get_job(s, jid, &info), 0);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_best(s, info->tasks[0].workload_key, "cpu", &l), 0);
    ck_assert_double_eq_tol(l->items[0].mean_cost, cost, cost * 1e-12);
    kt_record_list_free(l);
    kt_store_job_info_free(info);
    kt_store_close(s);
    free(out);
    stop_all();
}
END_TEST

/* ---- Secure by default (docs/security.md) ---------------------------------------------------- */

/* GET path from 127.0.0.1:port with an optional Authorization value; the
 * HTTP status code (-1 when there is no answer). */
static int http_status_of(int port, const char *path, const char *auth)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s%s%s\r\n", path,
                     auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    char buf[256] = "";
    size_t len = 0;
    ssize_t r;
    while (len + 1 < sizeof buf && (r = read(fd, buf + len, sizeof buf - len - 1)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd);
    int code = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        return -1;
    return code;
}

/* p exits with status 2 and says why: every string of `why` (NULL-ended). */
static void assert_refused(proc_t *p, const char *const why[])
{
    int ws = reap(p, WAIT_MS);
    char *log = log_of(p);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "%s: status %d: %s", p->log, ws, log);
    for (int i = 0; why[i]; i++)
        ck_assert_msg(strstr(log, why[i]) != NULL, "%s: wanted '%s' in: %s", p->log, why[i], log);
    free(log);
}

START_TEST(service_daemons_refuse_open_ports_without_a_token)
{
    char tok[512], open_tok[512];
    write_file("token", "sec-secret\n", tok, sizeof tok);
    ck_assert_int_eq(chmod(tok, 0600), 0);
    write_file("open-token", "sec-secret\n", open_tok, sizeof open_tok);
    ck_assert_int_eq(chmod(open_tok, 0640), 0);
    const char *db = db_path();

    /* Beyond loopback without a token: refused before anything is bound. */
    char *t_any[] = {"--listen", "0.0.0.0:0", "--http", "off", "--db", (char *)db, NULL};
    char *t_default[] = {"--http", "off", "--db", (char *)db, NULL};   /* 0.0.0.0:9190 */
    char *t_http[] = {"--listen", "127.0.0.1:0", "--http", "0.0.0.0:0", "--db", (char *)db, NULL};
    char *r_any[] = {"--listen", "0.0.0.0:0", "--key", "cpu-test", NULL};
    char *w_any[] = {"--listen", "[::]:0", NULL};
    proc_t *refused[] = {spawn("t-any", "tracker/ktune-tracker", t_any, NULL),
                         spawn("t-default", "tracker/ktune-tracker", t_default, NULL),
                         spawn("t-http", "tracker/ktune-tracker", t_http, NULL),
                         spawn("r-any", "server/ktune-runner", r_any, NULL),
                         spawn("w-any", "worker/ktune-worker", w_any, NULL)};
    /* The message says why and names every way out. */
    static const char *const open_port[] = {"without a token", "--token-file", "KT_TOKEN_FILE",
                                            "--insecure", NULL};
    for (size_t i = 0; i < KT_ARRAY_LEN(refused); i++)
        assert_refused(refused[i], open_port);
    char *log = log_of(refused[2]);
    ck_assert_msg(strstr(log, "refusing to serve HTTP on 0.0.0.0:0"), "%s", log);
    free(log);

    /* A token file other users can read is refused by every daemon. */
    char *t_open[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", (char *)db,
                      "--token-file", open_tok, NULL};
    char *r_loop[] = {"--listen", "127.0.0.1:0", "--key", "cpu-test", NULL};
    char *w_loop[] = {"--listen", "127.0.0.1:0", NULL};
    static const char *const readable[] = {"other users", "chmod 600", NULL};
    assert_refused(spawn("t-open", "tracker/ktune-tracker", t_open, NULL), readable);
    assert_refused(spawn("r-open", "server/ktune-runner", r_loop, open_tok), readable);
    assert_refused(spawn("w-open", "worker/ktune-worker", w_loop, open_tok), readable);

    /* The explicit choices start: a token, or --insecure. */
    char *t_tok[] = {"--listen", "0.0.0.0:0", "--http", "off", "--db", (char *)db,
                     "--token-file", tok, NULL};
    char *r_insecure[] = {"--listen", "0.0.0.0:0", "--key", "cpu-test", "--insecure", NULL};
    char *w_tok[] = {"--listen", "0.0.0.0:0", NULL};
    proc_t *ok[] = {spawn("t-tok", "tracker/ktune-tracker", t_tok, NULL),
                    spawn("r-insecure", "server/ktune-runner", r_insecure, NULL),
                    spawn("w-tok", "worker/ktune-worker", w_tok, tok)};
    for (size_t i = 0; i < KT_ARRAY_LEN(ok); i++)
        ck_assert_msg(wait_log(ok[i], "listening on 0.0.0.0:", WAIT_MS), "%s", ok[i]->log);
    stop_all();
    char *t_insecure[] = {"--listen", "0.0.0.0:0", "--http", "0.0.0.0:0", "--db", (char *)db,
                          "--insecure", NULL};
    proc_t *ti = spawn("t-insecure", "tracker/ktune-tracker", t_insecure, NULL);
    ck_assert(wait_log(ti, "http port ", WAIT_MS));
    stop_all();
}
END_TEST

START_TEST(service_tracker_http_needs_the_bearer_token)
{
    char tok[512];
    write_file("token", "http-secret\n", tok, sizeof tok);
    ck_assert_int_eq(chmod(tok, 0600), 0);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--db",
                     (char *)db_path(), "--token-file", tok, NULL};
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    ck_assert(wait_log(tr, "http port ", WAIT_MS));
    char *tl = log_of(tr);
    int port = atoi(strstr(tl, "http port ") + strlen("http port "));
    free(tl);
    ck_assert_int_gt(port, 0);
    /* /healthz carries nothing and stays open; everything else needs the token. */
    ck_assert_int_eq(http_status_of(port, "/healthz", NULL), 200);
    const char *paths[] = {"/api/status", "/", "/metrics"};
    for (size_t i = 0; i < KT_ARRAY_LEN(paths); i++) {
        ck_assert_int_eq(http_status_of(port, paths[i], NULL), 401);
        ck_assert_int_eq(http_status_of(port, paths[i], "Bearer http-secre"), 401);
        ck_assert_int_eq(http_status_of(port, paths[i], "Bearer http-secret!"), 401);
        ck_assert_int_eq(http_status_of(port, paths[i], "http-secret"), 401);
        ck_assert_int_eq(http_status_of(port, paths[i], "Bearer http-secret"), 200);
    }
    stop_all();
}
END_TEST

/* `ktune ARGS... --tracker T --tls-ca ca.pem [--tls-client-cert C.pem
 * --tls-client-key K.key]` (client NULL: no client certificate); its exit
 * code, its output in out. */
static int cli_tls(char *const args[], const char *tracker, const char *client, const char *key,
                   char *out, size_t size)
{
    char *a[40];
    int n = 0;
    for (int i = 0; args[i] && n < 30; i++)
        a[n++] = args[i];
    static char ca[200], cert[200], k[200];
    snprintf(ca, sizeof ca, "%s/ca.pem", kt_test_dir);
    snprintf(cert, sizeof cert, "%s/%s.pem", kt_test_dir, client ? client : "");
    snprintf(k, sizeof k, "%s/%s.key", kt_test_dir, key ? key : "");
    char *conn[] = {"--tracker", (char *)tracker, "--tls-ca", ca, "--tls-client-cert", cert,
                    "--tls-client-key", k, NULL};
    for (int i = 0; conn[i] && (client || i < 4); i++)
        a[n++] = conn[i];
    a[n] = NULL;
    return run_cli(a, out, size, NULL);
}

/* Mutual TLS end to end: the tracker, a runner and a worker each serve TLS
 * and require a client certificate of the one CA, and show theirs when they
 * call each other; the CLI submits and watches a job to done with its own.
 * A caller without a certificate, or with one another CA signed, is refused
 * by the tracker and by the runner; bad TLS files are a usage error (2). */
START_TEST(service_mutual_tls_job_runs_to_done)
{
    kt_test_tls_ca(kt_test_dir, "ca");
    kt_test_tls_ca(kt_test_dir, "other-ca");
    kt_test_tls_cert(kt_test_dir, "node", "ca", "IP:127.0.0.1");
    kt_test_tls_cert(kt_test_dir, "cli", "ca", "DNS:ktune-cli");
    kt_test_tls_cert(kt_test_dir, "stranger", "other-ca", "DNS:stranger");
    char ca[200], cert[200], key[200];
    snprintf(ca, sizeof ca, "%s/ca.pem", kt_test_dir);
    snprintf(cert, sizeof cert, "%s/node.pem", kt_test_dir);
    snprintf(key, sizeof key, "%s/node.key", kt_test_dir);
    char *tls[] = {"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--tls-client-ca", ca,
                   "--tls-client-cert", cert, "--tls-client-key", key};
    char *targs[32] = {"--listen", "127.0.0.1:0", "--http", "off", "--heartbeat-ms", HB_MS,
                       "--db", (char *)db_path()};
    memcpy(targs + 8, tls, sizeof tls);
    proc_t *tr = spawn("tracker", "tracker/ktune-tracker", targs, NULL);
    char tracker[64];
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", logged_port(tr));
    ck_assert(wait_log(tr, "(mutual TLS)", 0));
    char *rargs[32] = {"--listen", "127.0.0.1:0", "--key", "cpu-test", "--threads", "1",
                       "--timer", "cpu", "--tracker", tracker};
    memcpy(rargs + 10, tls, sizeof tls);
    proc_t *r = spawn("runner", "server/ktune-runner", rargs, NULL);
    char *wargs[32] = {"--listen", "127.0.0.1:0", "--jobs", "2", "--tracker", tracker};
    memcpy(wargs + 6, tls, sizeof tls);
    spawn("worker", "worker/ktune-worker", wargs, NULL);
    char runner[64];
    snprintf(runner, sizeof runner, "127.0.0.1:%d", logged_port(r));

    /* A job over the daemons' own client certificates: the tracker calls
     * the worker and the runner, which require one. */
    char out[8192];
    char *submit[] = {"submit", "--workload", (char *)W_TINY[0], "--trials", "8",
                      "--per-round", "4", "--key", "cpu-test", "--policy", "sketch.random",
                      "--number", "2", "--repeat", "1", "--seed", "1", NULL};
    ck_assert_msg(cli_tls(submit, tracker, "cli", "cli", out, sizeof out) == 0, "%s", out);
    char id[32];
    snprintf(id, sizeof id, "%lld", strtoll(out, NULL, 10));
    ck_assert_msg(atoll(id) > 0, "ktune submit printed %s", out);
    char *watch[] = {"watch", id, NULL};
    ck_assert_msg(cli_tls(watch, tracker, "cli", "cli", out, sizeof out) == 0, "%s", out);
    ck_assert_int_eq(stored_records().n, 8);

    /* Refused by the tracker and by the runner: no client certificate, or
     * one of another CA. */
    char *queue[] = {"queue", NULL};
    char *health[] = {"health", "--service", "runner", NULL};
    const char *daemons[2] = {tracker, runner};
    for (int d = 0; d < 2; d++) {
        char *const *args = d ? health : queue;
        ck_assert_int_eq(cli_tls(args, daemons[d], NULL, NULL, out, sizeof out), 1);
        ck_assert_msg(strstr(out, "cannot reach"), "%s", out);
        ck_assert_int_eq(cli_tls(args, daemons[d], "stranger", "stranger", out, sizeof out), 1);
        ck_assert_msg(strstr(out, "cannot reach"), "%s", out);
        ck_assert_msg(cli_tls(args, daemons[d], "cli", "cli", out, sizeof out) == 0, "%s", out);
    }

    /* Bad files: a key that is not the certificate's, a missing CA. */
    ck_assert_int_eq(cli_tls(queue, tracker, "cli", "stranger", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "does not belong"), "%s", out);
    char missing[220];
    snprintf(missing, sizeof missing, "%s/missing.pem", kt_test_dir);
    char *bad_tracker[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", (char *)db_path(),
                           "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", missing,
                           NULL};
    proc_t *b = spawn("bad-tracker", "tracker/ktune-tracker", bad_tracker, NULL);
    int ws = reap(b, WAIT_MS);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "status %d: %s", ws, log_of(b));
    ck_assert(wait_log(b, "--tls-client-ca", 0) && wait_log(b, "missing.pem", 0));
    char *bad_runner[] = {"--tracker", tracker, "--tls-ca", ca, "--tls-client-cert", cert,
                          NULL};
    b = spawn("bad-runner", "server/ktune-runner", bad_runner, NULL);
    ws = reap(b, WAIT_MS);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "status %d: %s", ws, log_of(b));
    ck_assert(wait_log(b, "--tls-client-cert and --tls-client-key go together", 0));
    stop_all();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("daemons");
    tcase_set_timeout(tc, 180);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, service_cluster_registers_builds_and_runs);
    tcase_add_test(tc, service_killed_runner_is_dropped_after_missed_heartbeats);
    tcase_add_test(tc, service_restarted_tracker_gets_its_peers_back);
    tcase_add_test(tc, service_missing_or_wrong_token_is_unauthenticated);
    tcase_add_test(tc, service_sigterm_lets_the_running_batch_finish);
    tcase_add_test(tc, service_runner_refuses_cuda_device_and_bad_options);
    tcase_add_test(tc, service_tracker_takes_search_threads);
    tcase_add_test(tc, service_daemons_refuse_empty_and_malformed_values);
    suite_add_tcase(s, tc);
    TCase *jobs = tcase_create("jobs");
    tcase_set_timeout(jobs, 400);
    tcase_add_unchecked_fixture(jobs, suite_setup, suite_teardown);
    tcase_add_checked_fixture(jobs, test_setup, NULL);
    tcase_add_test(jobs, service_job_runs_over_workers_and_runners_and_keeps_the_best);
    tcase_add_test(jobs, service_restarted_tracker_shows_the_store_s_earlier_jobs);
    tcase_add_test(jobs, service_job_survives_a_killed_runner_and_a_crashing_candidate);
    tcase_add_test(jobs, service_killed_tracker_resumes_its_job_on_restart);
    tcase_add_test(jobs, service_job_rpcs_refuse_missing_or_wrong_token);
    tcase_add_test(jobs, service_two_jobs_share_a_runner_fairly);
    tcase_add_test(jobs, service_cuda_job_waits_for_a_runner_and_workers_build_cuda);
    tcase_add_test(jobs, service_python_client_submits_a_job_and_reads_the_best);
    suite_add_tcase(s, jobs);
    TCase *stop = tcase_create("shutdown");
    tcase_set_timeout(stop, 180);
    tcase_add_unchecked_fixture(stop, suite_setup, suite_teardown);
    tcase_add_checked_fixture(stop, test_setup, NULL);
    tcase_add_test(stop, service_sigterm_cancels_builds_on_a_stopped_worker);
    suite_add_tcase(s, stop);
    /* A tracker over a prepared store, no peers: the status of stored jobs. */
    TCase *status = tcase_create("status");
    tcase_set_timeout(status, 120);
    tcase_add_unchecked_fixture(status, suite_setup, suite_teardown);
    tcase_add_checked_fixture(status, test_setup, NULL);
    tcase_add_test(status, service_tracker_pages_a_store_of_many_jobs);
    tcase_add_test(status, service_stored_job_draws_its_curve_from_its_records);
    suite_add_tcase(s, status);
    TCase *sec = tcase_create("security");
    tcase_set_timeout(sec, 180);
    tcase_add_unchecked_fixture(sec, suite_setup, suite_teardown);
    tcase_add_checked_fixture(sec, test_setup, NULL);
    tcase_add_test(sec, service_daemons_refuse_open_ports_without_a_token);
    tcase_add_test(sec, service_tracker_http_needs_the_bearer_token);
    tcase_add_test(sec, service_mutual_tls_job_runs_to_done);
    suite_add_tcase(s, sec);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
