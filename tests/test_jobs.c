/*
 * Suite "jobs": the job manager of common/service linked directly. One
 * tracker core and job manager per test, in this process, on loopback gRPC;
 * the worker and the runners are fake Build and Run services served by
 * kt_rpc servers in this process (a build returns a token artifact, a run
 * returns a cost made from the candidate id), registered straight into the
 * tracker's registry. The store is a file in a per-test directory.
 */
#include <check.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ktune.pb-c.h"
#include "measure/build_service.h"
#include "measure/run_service.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "service/job_view.h"
#include "service/jobs.h"
#include "service/tracker.h"
#include "store/store.h"
#include "te/workload.h"
#include "transfer/transfer.h"
#include "util/err.h"
#include "util/kt_limits.h"
#include "util/util.h"
#include "te/workload.h"

#include "kt_test_records.h"

#define WAIT_MS 120000

/* ---- fake peers ----------------------------------------------------------------------- */

typedef struct {
    kt_rpc_server_t *srv;
    atomic_int calls;          /* Run or Build requests served */
    atomic_int candidates;     /* candidates in them */
    int delay_ms;              /* each request takes this long */
    /* From the hang_from-th request on (0: never) none is answered, as by a
     * SIGSTOPped peer: each waits until the caller cancels it, at most
     * HANG_MS, far less than the tracker's deadline for it. */
    int hang_from;
    atomic_int hanging;        /* requests that hung */
} fake_t;

#define HANG_MS 30000

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Count a request; hang it when f says so. */
static void fake_serve(fake_t *f, kt_rpc_call_t *call, size_t candidates)
{
    int nth = atomic_fetch_add(&f->calls, 1) + 1;
    atomic_fetch_add(&f->candidates, (int)candidates);
    if (!f->hang_from || nth < f->hang_from)
        return;
    atomic_fetch_add(&f->hanging, 1);
    for (int w = 0; w < HANG_MS && !kt_rpc_call_cancelled(call); w += 10)
        sleep_ms(10);
}

static int fake_build(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                      void *ud)
{
    fake_t *f = ud;
    const Ktune__V1__BuildRequest *in = (const Ktune__V1__BuildRequest *)req;
    Ktune__V1__BuildResponse *out = (Ktune__V1__BuildResponse *)resp;
    size_t n = in->n_candidates;
    fake_serve(f, call, n);
    Ktune__V1__BuildResult *arr = kt_rpc_call_alloc(call, (n + 1) * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (n + 1) * sizeof *out->results);
    static uint8_t art[] = "fake artifact";
    for (size_t i = 0; i < n; i++) {
        ktune__v1__build_result__init(&arr[i]);
        arr[i].candidate_id = in->candidates[i]->candidate_id;
        arr[i].error_code = KTUNE__V1__MEASURE_ERROR__NO_ERROR;
        arr[i].artifact.data = art;
        arr[i].artifact.len = sizeof art;
        arr[i].artifact_hash = "0123456789abcdef";
        arr[i].entry = in->candidates[i]->entry;
        out->results[i] = &arr[i];
    }
    out->n_results = n;
    return KT_RPC_OK;
}

static int fake_run(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                    void *ud)
{
    fake_t *f = ud;
    const Ktune__V1__RunRequest *in = (const Ktune__V1__RunRequest *)req;
    Ktune__V1__RunResponse *out = (Ktune__V1__RunResponse *)resp;
    size_t n = in->n_candidates;
    fake_serve(f, call, n);
    if (f->delay_ms)
        sleep_ms(f->delay_ms);
    Ktune__V1__MeasureResult *arr = kt_rpc_call_alloc(call, (n + 1) * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (n + 1) * sizeof *out->results);
    for (size_t i = 0; i < n; i++) {
        ktune__v1__measure_result__init(&arr[i]);
        arr[i].candidate_id = in->candidates[i]->candidate_id;
        arr[i].error_code = KTUNE__V1__MEASURE_ERROR__NO_ERROR;
        arr[i].costs = kt_rpc_call_alloc(call, sizeof *arr[i].costs);
        arr[i].costs[0] = 1e-4 * (double)(1 + arr[i].candidate_id % 7);
        arr[i].n_costs = 1;
        arr[i].all_cost = 0.01;
        arr[i].timestamp = 1.0;
        out->results[i] = &arr[i];
    }
    out->n_results = n;
    return KT_RPC_OK;
}

static void fake_start(fake_t *f, int runner, int delay_ms)
{
    memset(f, 0, sizeof *f);
    f->delay_ms = delay_ms;
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0"};
    f->srv = kt_rpc_server_new(&so);
    ck_assert_msg(f->srv != NULL, "%s", kt_err_msg());
    int rc = runner ? kt_rpc_server_add_unary(f->srv, "/ktune.v1.Runner/Run",
                                              &ktune__v1__run_request__descriptor,
                                              &ktune__v1__run_response__descriptor, fake_run, f)
                    : kt_rpc_server_add_unary(f->srv, "/ktune.v1.Worker/Build",
                                              &ktune__v1__build_request__descriptor,
                                              &ktune__v1__build_response__descriptor,
                                              fake_build, f);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(kt_rpc_server_start(f->srv) == 0, "%s", kt_err_msg());
}

static void fake_register(kt_tracker_t *t, fake_t *f, int runner)
{
    const char *targets[] = {"cpu"};
    kt_peer_desc_t d = {.role = runner ? KT_PEER_RUNNER : KT_PEER_WORKER,
                        .address = kt_rpc_server_address(f->srv),
                        .key = "cpu-fake",
                        .capacity = runner ? 1 : 4,
                        .targets = targets,
                        .n_targets = 1};
    char id[KT_REGISTRY_ID_MAX];
    ck_assert_msg(kt_registry_register(kt_tracker_registry(t), &d, id) == 0, "%s", kt_err_msg());
}

/* ---- the tracker and its job manager ------------------------------------------------------ */

typedef struct {
    kt_tracker_t *t;
    kt_jobs_t *jobs;
    kt_rpc_client_t *client;
} service_t;

static char g_dir[256], g_db[400];

static void make_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/ktune-test-jobs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    snprintf(g_db, sizeof g_db, "%s/jobs.db", g_dir);
}

static void remove_dir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void service_start(service_t *s)
{
    /* Heartbeats every 10 minutes: the fake peers never beat, and must not
     * be dropped during a test. */
    kt_tracker_opts_t to = {.listen = "127.0.0.1:0", .heartbeat_ms = 600000};
    s->t = kt_tracker_new(&to);
    ck_assert_msg(s->t != NULL, "%s", kt_err_msg());
    s->jobs = kt_jobs_new(s->t, g_db);
    ck_assert_msg(s->jobs != NULL, "%s", kt_err_msg());
    ck_assert_msg(kt_tracker_start(s->t) == 0, "%s", kt_err_msg());
    s->client = kt_rpc_client_new(kt_tracker_address(s->t), NULL);
    ck_assert_ptr_nonnull(s->client);
}

/* The common set-up: one fake worker and one fake runner (measuring for
 * runner_delay_ms a batch) registered with a started service. */
static void start_with_fakes(service_t *s, fake_t *worker, fake_t *runner, int runner_delay_ms)
{
    fake_start(worker, 0, 0);
    fake_start(runner, 1, runner_delay_ms);
    service_start(s);
    fake_register(s->t, worker, 0);
    fake_register(s->t, runner, 1);
    ck_assert_int_eq(kt_jobs_start(s->jobs), 0);
}

static void service_stop(service_t *s)
{
    kt_rpc_client_free(s->client);
    kt_jobs_stop(s->jobs);
    kt_tracker_stop(s->t, 1000);
    kt_jobs_free(s->jobs);
    memset(s, 0, sizeof *s);
}

/* A job over one small matmul on the fake runners' key. */
/* A job over `n` workloads (weights 1), sketch.random on the fake runner key. */
static const char *g_policy = "sketch.random";

static int64_t submit_workloads(service_t *s, const char *const *json, int n, int trials,
                                int per_round)
{
    Ktune__V1__Workload wl[4];
    Ktune__V1__Task task[4], *tp[4];
    ck_assert_int_le(n, 4);
    for (int i = 0; i < n; i++) {
        ktune__v1__workload__init(&wl[i]);
        wl[i].json = (char *)json[i];
        ktune__v1__task__init(&task[i]);
        task[i].workload = &wl[i];
        task[i].weight = 1;
        tp[i] = &task[i];
    }
    Ktune__V1__TuningOptions to = KTUNE__V1__TUNING_OPTIONS__INIT;
    to.num_measure_trials = trials;
    to.num_measures_per_round = per_round;
    to.seed = 7;
    Ktune__V1__Job job = KTUNE__V1__JOB__INIT;
    job.tasks = tp;
    job.n_tasks = (size_t)n;
    job.target = "cpu";
    job.runner_key = "cpu-fake";
    job.policy = (char *)g_policy;
    job.options = &to;
    int64_t id = 0;
    ck_assert_msg(kt_jobs_submit(s->jobs, &job, &id) == 0, "%s", kt_err_msg());
    return id;
}

static int64_t submit(service_t *s, int trials, int per_round)
{
    static const char *const mm[] = {"{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}"};
    return submit_workloads(s, mm, 1, trials, per_round);
}

/* JobStatus over the tracker's own gRPC server; caller frees. */
static Ktune__V1__JobProgress *status(service_t *s, int64_t id)
{
    Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
    ref.job_id = id;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(s->client, "/ktune.v1.Tracker/JobStatus", &ref.base,
                               &ktune__v1__job_progress__descriptor, 30000, &out, &st);
    ck_assert_msg(rc == 0, "JobStatus: %s", kt_err_msg());
    return (Ktune__V1__JobProgress *)out;
}

/* Wait until the job's state is `state` (or, with min_trials > 0, until it
 * has that many trials); the last progress, caller frees. */
static Ktune__V1__JobProgress *wait_job(service_t *s, int64_t id, const char *state, int min_trials)
{
    for (int waited = 0;; waited += 50) {
        Ktune__V1__JobProgress *p = status(s, id);
        int ended = strcmp(p->state, "done") == 0 || strcmp(p->state, "failed") == 0 ||
                    strcmp(p->state, "cancelled") == 0;
        if ((min_trials > 0 && p->total_trials >= min_trials) ||
            (min_trials <= 0 && strcmp(p->state, state) == 0) || ended || waited > WAIT_MS)
            return p;
        protobuf_c_message_free_unpacked(&p->base, NULL);
        sleep_ms(50);
    }
}

/* Trials the store holds for the job's tasks (every record counted once). */
static int64_t stored_trials(int64_t id)
{
    kt_store_t *st = kt_store_open(g_db, 0);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_job_view_t *v = NULL;
    ck_assert_msg(kt_job_view_load(st, id, &v) == 0, "%s", kt_err_msg());
    int64_t n = 0;
    for (int i = 0; i < v->ntasks; i++) {
        kt_job_task_progress_t p;
        ck_assert_int_eq(kt_job_view_task_progress(st, v, i, 4, NULL, NULL, &p), 0);
        n += p.trials;
        free(p.history);
    }
    kt_job_view_free(v);
    kt_store_close(st);
    return n;
}

/* Jobs the store holds, in every state. */
static size_t stored_jobs(void)
{
    kt_store_t *st = kt_store_open(g_db, 0);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    int64_t *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(kt_store_list_jobs(st, NULL, &ids, &n), 0);
    free(ids);
    kt_store_close(st);
    return n;
}

/* ---- tests ------------------------------------------------------------------------------------ */

START_TEST(jobs_run_a_job_to_done_on_fake_worker_and_runner)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    int64_t id = submit(&s, 12, 4);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "done", 0);
    ck_assert_str_eq(p->state, "done");
    ck_assert_int_eq(p->total_trials, 12);
    /* The best cost the fake runner can report is 1e-4 s. */
    ck_assert(p->estimated_total_latency >= 1e-4 - 1e-12);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    /* Every trial was built by the worker and timed by the runner. */
    ck_assert_int_ge(atomic_load(&worker.candidates), 12);
    ck_assert_int_ge(atomic_load(&runner.candidates), 12);
    service_stop(&s);
    ck_assert_int_eq(stored_trials(id), 12);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

/* A Winograd task beside its direct conv2d (what --winograd submits): the
 * job pairs them from the workloads and its estimated latency counts the
 * pair once, at the faster. */
START_TEST(jobs_count_a_winograd_alternative_once)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    static const char *const wl[] = {
        "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":6,\"W\":6,\"CI\":4,\"CO\":4,\"KH\":3,"
        "\"KW\":3,\"padding\":[1,1]}",
        "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}",
        "{\"op\":\"conv2d_winograd_nhwc\",\"N\":1,\"H\":6,\"W\":6,\"CI\":4,\"CO\":4,"
        "\"KH\":3,\"KW\":3,\"padding\":[1,1],\"tile_size\":2}",
    };
    int64_t id = submit_workloads(&s, wl, 3, 12, 4);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "done", 0);
    ck_assert_str_eq(p->state, "done");
    ck_assert_int_eq((int)p->n_tasks, 3);
    double c[3];
    for (int i = 0; i < 3; i++)
        c[i] = p->tasks[i]->best_latency;
    ck_assert(c[0] > 0 && c[1] > 0 && c[2] > 0);
    double want = fmin(c[0], c[2]) + c[1];
    ck_assert_msg(fabs(p->estimated_total_latency - want) <= 1e-9 * want,
                  "estimate %g, want %g (costs %g %g %g)", p->estimated_total_latency, want, c[0],
                  c[1], c[2]);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    service_stop(&s);
    kt_store_t *st = kt_store_open(g_db, 0);
    kt_job_view_t *v = NULL;
    ck_assert_msg(kt_job_view_load(st, id, &v) == 0, "%s", kt_err_msg());
    ck_assert_ptr_nonnull(v->alt);
    ck_assert_int_eq(v->alt[0], -1);
    ck_assert_int_eq(v->alt[1], -1);
    ck_assert_int_eq(v->alt[2], 0);
    kt_job_view_free(v);
    kt_store_close(st);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

START_TEST(jobs_dispatch_measures_on_both_of_two_runners)
{
    make_dir();
    fake_t worker, r1, r2;
    fake_start(&worker, 0, 0);
    /* Slow enough that a round's parts find both runners busy at once, even
     * when a busy machine delays the dispatch of the second part. */
    fake_start(&r1, 1, 300);
    fake_start(&r2, 1, 300);
    service_t s;
    service_start(&s);
    fake_register(s.t, &worker, 0);
    fake_register(s.t, &r1, 1);
    fake_register(s.t, &r2, 1);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    int64_t id = submit(&s, 32, 8);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "done", 0);
    ck_assert_str_eq(p->state, "done");
    ck_assert_int_eq(p->total_trials, 32);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    ck_assert_int_gt(atomic_load(&r1.calls), 0);
    ck_assert_int_gt(atomic_load(&r2.calls), 0);
    ck_assert_int_ge(atomic_load(&r1.candidates) + atomic_load(&r2.candidates), 32);
    service_stop(&s);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(r1.srv, 0);
    kt_rpc_server_stop(r2.srv, 0);
    remove_dir();
}
END_TEST

/* ASan's allocator (deploy/sanitize.sh) keeps what is freed in a quarantine
 * of its own: the memory bounds of jobs_finished_jobs_do_not_grow_the_tracker
 * are glibc's, and a sanitized build only runs its jobs. */
#if defined(__SANITIZE_ADDRESS__)
#define KT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_TEST_ASAN 1
#endif
#endif
#ifndef KT_TEST_ASAN
#define KT_TEST_ASAN 0
#endif

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* Heap bytes in use (every arena's chunks and mmapped blocks). */
static double heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
}

/* A tracker keeps every job it ran in memory until it stops (status, watch
 * and the page read them), and each round of a job runs on a thread of its
 * own. Found by deploy/soak.sh: the tracker's RSS grew by 4-5 MiB per
 * finished job (88 to 190 MiB in a 90 s soak) while its heap in use grew by
 * 0.1 MiB, the freed pages of the rounds' searches (sketch.random) and
 * model trainings (sketch.xgb) kept by glibc's per-thread arenas. After a
 * warm-up, eight jobs of either policy run one after another: the
 * process's RSS may grow by 1.5 MiB per job at most, its heap by 512 KiB,
 * both read once the job's thread has returned. */
START_TEST(jobs_finished_jobs_do_not_grow_the_tracker)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    enum { WARM = 2, JOBS = 8 };
    double heap0 = 0, rss0 = 0;
    for (int i = 0; i < WARM + JOBS; i++) {
        g_policy = i % 2 ? "sketch.xgb" : "sketch.random";
        char json[96];
        snprintf(json, sizeof json, "{\"op\":\"matmul\",\"M\":%d,\"N\":32,\"K\":32}",
                 8 + 4 * i);
        const char *const wl[] = {json};
        int64_t id = submit_workloads(&s, wl, 1, 16, 8);
        Ktune__V1__JobProgress *p = wait_job(&s, id, "done", 0);
        ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
        ck_assert_int_eq(p->total_trials, 16);
        protobuf_c_message_free_unpacked(&p->base, NULL);
        /* A job reads done before its thread retrains the store model of
         * its key: what that training holds for a moment is not kept. */
        for (int waited = 0; kt_jobs_threads_live(s.jobs) > 0; waited += 10) {
            ck_assert_msg(waited < 60000, "job %" PRId64 "'s thread did not return", id);
            usleep(10000);
        }
        if (i == WARM - 1) {
            heap0 = heap_in_use();
            rss0 = rss_mib();
        }
    }
    g_policy = "sketch.random";
    double rss = (rss_mib() - rss0) / JOBS, heap = (heap_in_use() - heap0) / JOBS / 1024.0;
    if (!KT_TEST_ASAN) {
        ck_assert_msg(rss < 1.5, "the RSS grew by %.2f MiB per finished job (heap: %.0f KiB)",
                      rss, heap);
        ck_assert_msg(heap < 512, "the heap grew by %.0f KiB per finished job", heap);
    }
    service_stop(&s);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

START_TEST(jobs_resume_an_unfinished_job_after_the_manager_is_recreated)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    /* 400 ms a batch: the job cannot end in the moment between the status
     * that saw 4 trials and the stop, however busy the machine. */
    start_with_fakes(&s, &worker, &runner, 400);
    int64_t id = submit(&s, 24, 4);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "running", 4);
    ck_assert_str_eq(p->state, "running");
    ck_assert_int_lt(p->total_trials, 24);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    service_stop(&s);
    /* The stopped manager left the job unfinished in the store. */
    int64_t before = stored_trials(id);
    ck_assert_int_ge(before, 4);
    ck_assert_int_lt(before, 24);

    service_start(&s);
    fake_register(s.t, &worker, 0);
    fake_register(s.t, &runner, 1);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    p = wait_job(&s, id, "done", 0);
    ck_assert_str_eq(p->state, "done");
    ck_assert_int_eq(p->total_trials, 24);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    service_stop(&s);
    /* Resumed, not restarted: the budget holds the trials from before. */
    ck_assert_int_eq(stored_trials(id), 24);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

/* ---- limits (util/kt_limits.h) ------------------------------------------------------------ */

/* A one-task job as a SubmitJob request; M picks the workload. */
typedef struct {
    Ktune__V1__Workload wl;
    Ktune__V1__Task task, *tp;
    Ktune__V1__TuningOptions to;
    Ktune__V1__Job job;
    char json[96];
} job_msg_t;

static void job_msg(job_msg_t *j, int M, const char *key, int trials)
{
    ktune__v1__workload__init(&j->wl);
    snprintf(j->json, sizeof j->json, "{\"op\":\"matmul\",\"M\":%d,\"N\":64,\"K\":64}", M);
    j->wl.json = j->json;
    ktune__v1__task__init(&j->task);
    j->task.workload = &j->wl;
    j->task.weight = 1;
    j->tp = &j->task;
    ktune__v1__tuning_options__init(&j->to);
    j->to.num_measure_trials = trials;
    j->to.num_measures_per_round = 4;
    j->to.seed = 7;
    ktune__v1__job__init(&j->job);
    j->job.tasks = &j->tp;
    j->job.n_tasks = 1;
    j->job.target = "cpu";
    j->job.runner_key = (char *)key;
    j->job.policy = "sketch.random";
    j->job.options = &j->to;
}

/* SubmitJob under request id rid (NULL: none); *existing (may be NULL)
 * gets the answer's existing. */
static int submit_rpc_rid(kt_rpc_client_t *c, Ktune__V1__Job *job, const char *rid, int64_t *id,
                          int *existing, kt_rpc_status_t *st)
{
    Ktune__V1__SubmitJobRequest req = KTUNE__V1__SUBMIT_JOB_REQUEST__INIT;
    req.job = job;
    if (rid)
        req.request_id = (char *)rid;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, "/ktune.v1.Tracker/SubmitJob", &req.base,
                               &ktune__v1__submit_job_response__descriptor, 30000, &out, st);
    if (rc == 0) {
        *id = ((Ktune__V1__SubmitJobResponse *)out)->job_id;
        if (existing)
            *existing = ((Ktune__V1__SubmitJobResponse *)out)->existing;
        protobuf_c_message_free_unpacked(out, NULL);
    }
    return rc;
}

static int submit_rpc(kt_rpc_client_t *c, Ktune__V1__Job *job, int64_t *id, kt_rpc_status_t *st)
{
    return submit_rpc_rid(c, job, NULL, id, NULL, st);
}

/* The state hashes of workload `json`'s records on the fake key, and how
 * many there are (at most cap). */
/* Workload `json`'s CPU records in the test store (read-only, closed). */
static kt_record_list_t *cpu_records(const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_ptr_nonnull(w);
    kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_store_filter_t f = {.workload_key = kt_workload_key(w), .target = "cpu"};
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(st, &f, &l), 0);
    kt_store_close(st);
    kt_workload_free(w);
    return l;
}

static int record_hashes(const char *json, uint64_t *h, int cap)
{
    kt_record_list_t *l = cpu_records(json);
    int n = 0;
    for (size_t i = 0; i < l->n && n < cap; i++)
        h[n++] = l->items[i].state_hash;
    kt_record_list_free(l);
    return n;
}

/* The hashes of the states schedule transfer re-fits for `json` from the
 * store as it is (the task's own records are never a source). */
static int transfer_hashes(const char *json, uint64_t *h, int cap)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_ptr_nonnull(w);
    kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    kt_transfer_set_t set;
    ck_assert_msg(kt_transfer_gather(st, w, "cpu", "cpu-fake", &p, cap, 4, &set) == 0, "%s",
                  kt_err_msg());
    int n = set.n;
    for (int i = 0; i < n; i++)
        h[i] = set.items[i].hash;
    kt_transfer_set_clear(&set);
    kt_store_close(st);
    kt_workload_free(w);
    return n;
}

static int has_hash(const uint64_t *h, int n, uint64_t x)
{
    for (int i = 0; i < n; i++)
        if (h[i] == x)
            return 1;
    return 0;
}

/* Workload `json`'s records on the fake key hold the origin transfer
 * exactly for the states in seeds[0..nseeds), and random or sibling (a
 * sketch.random job has no model to pick by) for the rest; returns how
 * many are transfer's. */
static int check_origins(const char *json, const uint64_t *seeds, int nseeds)
{
    kt_record_list_t *l = cpu_records(json);
    int transfer = 0;
    for (size_t i = 0; i < l->n; i++) {
        const kt_record_t *r = &l->items[i];
        if (has_hash(seeds, nseeds, r->state_hash)) {
            ck_assert_msg(r->origin == KT_STORE_ORIGIN_TRANSFER, "seeded record %zu: %s", i,
                          kt_store_origin_name(r->origin));
            transfer++;
        } else {
            ck_assert_msg(r->origin == KT_STORE_ORIGIN_RANDOM ||
                              r->origin == KT_STORE_ORIGIN_SIBLING,
                          "record %zu: %s", i, kt_store_origin_name(r->origin));
        }
    }
    kt_record_list_free(l);
    return transfer;
}

/* The origin of job `id`'s best record of workload `json` as the status
 * snapshot (/api/status) and QueryBest say it, checked against the store's
 * best; returns the store's (an origin name). */
static const char *check_best_origin(service_t *s, int64_t id, const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_ptr_nonnull(w);
    kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_best(st, kt_workload_key(w), "cpu", &l), 0);
    const char *want = kt_store_origin_name(l->items[0].origin);
    kt_record_list_free(l);
    kt_store_close(st);

    kt_http_page_t page = {.offset = 0, .limit = 10};
    json_t *snap = kt_tracker_snapshot(s->t, &page);
    ck_assert_ptr_nonnull(snap);
    json_t *jobs = json_object_get(snap, "jobs"), *job = NULL;
    for (size_t i = 0; i < json_array_size(jobs) && !job; i++)
        if (json_integer_value(json_object_get(json_array_get(jobs, i), "id")) == id)
            job = json_array_get(jobs, i);
    ck_assert_ptr_nonnull(job);
    json_t *task = json_array_get(json_object_get(job, "tasks"), 0);
    const char *got = json_string_value(json_object_get(task, "best_origin"));
    ck_assert_msg(got && strcmp(got, want) == 0, "status: %s, store: %s", got ? got : "null",
                  want);
    json_decref(snap);

    Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
    req.job_id = id;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t rs;
    ck_assert_int_eq(kt_rpc_call_unary(s->client, "/ktune.v1.Tracker/QueryBest", &req.base,
                                       &ktune__v1__query_best_response__descriptor, 60000, &out,
                                       &rs),
                     0);
    Ktune__V1__QueryBestResponse *r = (Ktune__V1__QueryBestResponse *)out;
    ck_assert_uint_eq(r->n_records, 1);
    ck_assert_str_eq(r->records[0]->origin, strcmp(want, "unknown") == 0 ? "" : want);
    protobuf_c_message_free_unpacked(out, NULL);
    kt_workload_free(w);
    return want;
}

/* A job over a matmul the store has no record of starts from the re-fitted
 * best states of the matmul an earlier job tuned (its first round is
 * exactly them), measures each once, and a job with no_transfer set does
 * not; the option is stored with the job. */
START_TEST(jobs_first_round_takes_refitted_states_of_the_nearest_stored_workload)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    job_msg_t a, b, c;
    job_msg(&a, 64, "cpu-fake", 12);
    int64_t ida = 0, idb = 0, idc = 0;
    ck_assert_msg(kt_jobs_submit(s.jobs, &a.job, &ida) == 0, "%s", kt_err_msg());
    Ktune__V1__JobProgress *p = wait_job(&s, ida, "done", 0);
    ck_assert_str_eq(p->state, "done");
    protobuf_c_message_free_unpacked(&p->base, NULL);

    /* B's first round of 4: the 4 first of the states transfer makes of A's
     * records (the store's records of B are B's own, never a source) */
    job_msg(&b, 96, "cpu-fake", 8);
    uint64_t want[8], got[16];
    int nwant = transfer_hashes(b.json, want, 8);
    ck_assert_int_ge(nwant, 4);
    ck_assert_msg(kt_jobs_submit(s.jobs, &b.job, &idb) == 0, "%s", kt_err_msg());
    p = wait_job(&s, idb, "done", 0);
    ck_assert_str_eq(p->state, "done");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    int ngot = record_hashes(b.json, got, 16);
    ck_assert_int_eq(ngot, 8);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(has_hash(got, 4, want[i]), "re-fitted state %d not in the first round", i);
    for (int i = 0; i < ngot; i++)
        for (int k = 0; k < i; k++)
            ck_assert_msg(got[i] != got[k], "record %d measured the state of record %d again", i,
                          k);
    char *opts = kt_test_job_options(g_db, idb);
    ck_assert_msg(opts && strstr(opts, "\"transfer\":true"), "%s", opts ? opts : "?");
    free(opts);
    /* each record says where its state came from, and so does the best's
     * row of the status page and QueryBest */
    ck_assert_int_eq(check_origins(a.json, NULL, 0), 0);
    /* the first round's 4 and the seeds the second round took */
    ck_assert_int_ge(check_origins(b.json, want, nwant), 4);
    check_best_origin(&s, ida, a.json);
    check_best_origin(&s, idb, b.json);

    /* C with transfer off: none of the states transfer would give it */
    job_msg(&c, 128, "cpu-fake", 8);
    c.to.no_transfer = 1;
    nwant = transfer_hashes(c.json, want, 8);
    ck_assert_int_ge(nwant, 4);
    ck_assert_msg(kt_jobs_submit(s.jobs, &c.job, &idc) == 0, "%s", kt_err_msg());
    p = wait_job(&s, idc, "done", 0);
    ck_assert_str_eq(p->state, "done");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    ngot = record_hashes(c.json, got, 16);
    ck_assert_int_eq(ngot, 8);
    for (int i = 0; i < nwant; i++)
        ck_assert_msg(!has_hash(got, ngot, want[i]), "re-fitted state %d measured", i);
    ck_assert_int_eq(check_origins(c.json, NULL, 0), 0);
    opts = kt_test_job_options(g_db, idc);
    ck_assert_msg(opts && strstr(opts, "\"transfer\":false"), "%s", opts ? opts : "?");
    free(opts);
    service_stop(&s);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

/* The "store_model" field of job `id` in the tracker's status snapshot
 * (malloc'd; NULL when null). */
static char *job_store_model(service_t *s, int64_t id)
{
    json_t *snap = kt_tracker_snapshot(s->t, NULL);
    ck_assert_ptr_nonnull(snap);
    json_t *jobs = json_object_get(snap, "jobs");
    char *out = NULL;
    int found = 0;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
        json_t *j = json_array_get(jobs, i);
        if (json_integer_value(json_object_get(j, "id")) != id)
            continue;
        found = 1;
        ck_assert_ptr_nonnull(json_object_get(j, "store_model"));
        const char *v = json_string_value(json_object_get(j, "store_model"));
        out = v ? strdup(v) : NULL;
    }
    ck_assert_msg(found, "job %lld not in the snapshot", (long long)id);
    json_decref(snap);
    return out;
}

/* The version of the store's cost model of (cpu, cpu-fake), waited for up
 * to WAIT_MS when `wait` (a job trains it after its "done"); 0 when none. */
static int64_t stored_model_version(int wait)
{
    for (int waited = 0;; waited += 100) {
        kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
        ck_assert_msg(st != NULL, "%s", kt_err_msg());
        kt_store_cost_model_t *m = NULL;
        int rc = kt_store_get_cost_model(st, "cpu", "cpu-fake", &m);
        int64_t v = rc == 0 ? m->version : 0;
        kt_store_cost_model_free(m);
        kt_store_close(st);
        if (v > 0 || !wait || waited > WAIT_MS)
            return v;
        sleep_ms(100);
    }
}

/* Job B (sketch.xgb, transfer off) on matmul M=96: its first round's state
 * hashes into h[4] and its store_model field (malloc'd or NULL). */
static char *run_job_b(service_t *s, uint64_t *h)
{
    job_msg_t b;
    job_msg(&b, 96, "cpu-fake", 8);
    b.job.policy = "sketch.xgb";
    b.to.no_transfer = 1;
    int64_t id = 0;
    ck_assert_msg(kt_jobs_submit(s->jobs, &b.job, &id) == 0, "%s", kt_err_msg());
    Ktune__V1__JobProgress *p = wait_job(s, id, "done", 0);
    ck_assert_msg(strcmp(p->state, "done") == 0, "job B %s: %s", p->state, p->message);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    ck_assert_int_eq(record_hashes(b.json, h, 4), 4);   /* id order: the first round's */
    return job_store_model(s, id);
}

/* On an empty store a sketch.xgb job runs as before: no store model, none
 * made from its 8 records. On a store where another workload's job left 80
 * records of the key, that job's end trained the key's store model, and
 * the same job (same seed) starts from it: its status says which, and its
 * first round is the model's choice, not the spread over a random sample
 * the empty store's job measured. */
START_TEST(jobs_start_from_the_store_model_of_their_key)
{
    uint64_t h0[4], h1[4];
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    char *none = run_job_b(&s, h0);
    ck_assert_msg(none == NULL, "store_model %s on an empty store", none);
    service_stop(&s);
    ck_assert_int_eq(stored_model_version(0), 0);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();

    make_dir();
    start_with_fakes(&s, &worker, &runner, 0);
    job_msg_t a;
    job_msg(&a, 64, "cpu-fake", 80);
    a.to.num_measures_per_round = 16;
    int64_t ida = 0;
    ck_assert_msg(kt_jobs_submit(s.jobs, &a.job, &ida) == 0, "%s", kt_err_msg());
    Ktune__V1__JobProgress *p = wait_job(&s, ida, "done", 0);
    ck_assert_str_eq(p->state, "done");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    ck_assert_int_eq(stored_model_version(1), 1);
    ck_assert_msg(job_store_model(&s, ida) == NULL, "sketch.random took a store model");
    char *used = run_job_b(&s, h1);
    ck_assert_msg(used && strcmp(used, "v1/80") == 0, "store_model %s", used ? used : "null");
    int same = 0;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            same += h1[i] == h0[k];
    ck_assert_msg(same < 4, "the first round is the one of the empty store");
    free(used);
    service_stop(&s);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

/* One client floods SubmitJob with 500 jobs for a key no runner serves: the
 * first KT_LIMIT_JOBS_PER_CLIENT are taken, every later one is refused with
 * RESOURCE_EXHAUSTED naming the limit, and another client's job runs to done
 * meanwhile. */
START_TEST(limits_submit_flood_is_refused_per_client)
{
    make_dir();
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 0);
    kt_rpc_client_t *flood = kt_rpc_client_new(kt_tracker_address(s.t), NULL);
    ck_assert_ptr_nonnull(flood);

    job_msg_t mine;
    job_msg(&mine, 64, "cpu-fake", 16);
    int64_t id = 0;
    kt_rpc_status_t st;
    ck_assert_msg(submit_rpc(s.client, &mine.job, &id, &st) == 0, "%s", kt_err_msg());

    int ok = 0, refused = 0;
    for (int i = 0; i < 500; i++) {
        job_msg_t f;
        job_msg(&f, 1 + i, "nobody", 8);
        int64_t fid;
        int rc = submit_rpc(flood, &f.job, &fid, &st);
        if (rc == 0) {
            ck_assert_int_eq(refused, 0);   /* none taken after a refusal */
            ok++;
        } else {
            ck_assert_int_eq(rc, KT_ELIMIT);
            ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
            ck_assert_msg(strstr(st.msg, "KT_LIMIT_JOBS_PER_CLIENT") != NULL, "%s", st.msg);
            refused++;
        }
    }
    ck_assert_int_eq(ok, KT_LIMIT_JOBS_PER_CLIENT);
    ck_assert_int_eq(refused, 500 - KT_LIMIT_JOBS_PER_CLIENT);

    Ktune__V1__JobProgress *p = wait_job(&s, id, "done", 0);
    ck_assert_str_eq(p->state, "done");
    ck_assert_int_eq(p->total_trials, 16);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    /* The other client is still at its own limit, not the tracker's. */
    job_msg_t again;
    job_msg(&again, 65, "cpu-fake", 4);
    ck_assert_msg(submit_rpc(s.client, &again.job, &id, &st) == 0, "%s", kt_err_msg());
    kt_rpc_client_free(flood);
    service_stop(&s);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    remove_dir();
}
END_TEST

/* The tracker-wide cap: KT_LIMIT_JOBS jobs queued or running (from several
 * clients) refuse the next submission, naming KT_LIMIT_JOBS. */
START_TEST(limits_jobs_tracker_wide)
{
    make_dir();
    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    enum { NC = KT_LIMIT_JOBS / KT_LIMIT_JOBS_PER_CLIENT + 1 };
    kt_rpc_client_t *c[NC];
    int ok = 0, i = 0;
    kt_rpc_status_t st;
    for (int k = 0; k < NC; k++) {
        c[k] = kt_rpc_client_new(kt_tracker_address(s.t), NULL);
        ck_assert_ptr_nonnull(c[k]);
    }
    for (int k = 0; k < NC; k++)
        for (int n = 0; n < KT_LIMIT_JOBS_PER_CLIENT; n++, i++) {
            job_msg_t f;
            job_msg(&f, 1 + i, "nobody", 8);
            int64_t id;
            int rc = submit_rpc(c[k], &f.job, &id, &st);
            if (ok < KT_LIMIT_JOBS) {
                ck_assert_msg(rc == 0, "job %d: %s", i, kt_err_msg());
                ok++;
            } else {
                ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
                ck_assert_msg(strstr(st.msg, "(KT_LIMIT_JOBS)") != NULL, "%s", st.msg);
            }
        }
    ck_assert_int_eq(ok, KT_LIMIT_JOBS);
    /* One cancelled frees a place. */
    ck_assert_int_eq(kt_jobs_cancel(s.jobs, 1, 30000), 0);
    job_msg_t f;
    job_msg(&f, 100000, "nobody", 8);
    int64_t id;
    ck_assert_msg(submit_rpc(c[NC - 1], &f.job, &id, &st) == 0, "%s", kt_err_msg());
    for (int k = 0; k < NC; k++)
        kt_rpc_client_free(c[k]);
    service_stop(&s);
    remove_dir();
}
END_TEST

/* KT_LIMIT_TASKS: a job of that many tasks passes the checks, one more is
 * refused with KT_ELIMIT (RESOURCE_EXHAUSTED) naming the limit. */
START_TEST(limits_tasks_per_job)
{
    int n = KT_LIMIT_TASKS + 1;
    job_msg_t *j = calloc((size_t)n, sizeof *j);
    Ktune__V1__Task **tp = calloc((size_t)n, sizeof *tp);
    ck_assert_ptr_nonnull(j);
    ck_assert_ptr_nonnull(tp);
    for (int i = 0; i < n; i++) {
        job_msg(&j[i], 1 + i, "cpu", n);
        tp[i] = &j[i].task;
    }
    Ktune__V1__Job job = j[0].job;
    job.options = &j[0].to;
    job.tasks = tp;
    job.n_tasks = (size_t)n;
    ck_assert_int_eq(kt_jobs_check_job(&job, NULL, NULL), KT_ELIMIT);
    ck_assert_msg(strstr(kt_err_msg(), "KT_LIMIT_TASKS") != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_rpc_code_from_err(KT_ELIMIT), KT_RPC_RESOURCE_EXHAUSTED);
    job.n_tasks = KT_LIMIT_TASKS;
    ck_assert_msg(kt_jobs_check_job(&job, NULL, NULL) == 0, "%s", kt_err_msg());
    free(tp);
    free(j);
}
END_TEST

/* 64 concurrent WatchJob streams from one client: KT_LIMIT_WATCH_PER_CLIENT
 * are served, the others refused with RESOURCE_EXHAUSTED naming the limit;
 * meanwhile another client's calls and its own stream are answered. */
START_TEST(limits_watch_streams_per_client)
{
    make_dir();
    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    job_msg_t f;
    job_msg(&f, 64, "nobody", 8);
    int64_t id;
    kt_rpc_status_t st;
    ck_assert_msg(submit_rpc(s.client, &f.job, &id, &st) == 0, "%s", kt_err_msg());
    kt_rpc_client_t *flood = kt_rpc_client_new(kt_tracker_address(s.t), NULL);
    ck_assert_ptr_nonnull(flood);
    Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
    ref.job_id = id;
    enum { N = 64 };
    kt_rpc_reader_t *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = kt_rpc_reader_open(flood, "/ktune.v1.Tracker/WatchJob", &ref.base,
                                  &ktune__v1__job_progress__descriptor, 60000);
        ck_assert_ptr_nonnull(r[i]);
    }
    int served = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        ProtobufCMessage *msg = NULL;
        int rc = kt_rpc_reader_next(r[i], &msg);
        if (rc == 1) {
            served++;
            protobuf_c_message_free_unpacked(msg, NULL);
            continue;
        }
        ck_assert_int_eq(kt_rpc_reader_close(r[i], &st), KT_ELIMIT);
        r[i] = NULL;
        ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
        ck_assert_msg(strstr(st.msg, "KT_LIMIT_WATCH_PER_CLIENT") != NULL, "%s", st.msg);
        refused++;
    }
    ck_assert_int_eq(served, KT_LIMIT_WATCH_PER_CLIENT);
    ck_assert_int_eq(refused, N - KT_LIMIT_WATCH_PER_CLIENT);
    /* Another client: a unary call and a stream of its own. */
    Ktune__V1__JobProgress *p = status(&s, id);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    kt_rpc_reader_t *other = kt_rpc_reader_open(s.client, "/ktune.v1.Tracker/WatchJob",
                                                &ref.base, &ktune__v1__job_progress__descriptor,
                                                60000);
    ProtobufCMessage *msg = NULL;
    ck_assert_int_eq(kt_rpc_reader_next(other, &msg), 1);
    protobuf_c_message_free_unpacked(msg, NULL);
    kt_rpc_reader_close(other, NULL);
    for (int i = 0; i < N; i++)
        if (r[i])
            kt_rpc_reader_close(r[i], NULL);
    kt_rpc_client_free(flood);
    service_stop(&s);
    remove_dir();
}
END_TEST

static int query_best(service_t *s, const char *key, int64_t job, int top_k, size_t *n,
                      kt_rpc_status_t *st)
{
    Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
    req.workload_key = (char *)(key ? key : "");
    req.job_id = job;
    req.top_k = top_k;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(s->client, "/ktune.v1.Tracker/QueryBest", &req.base,
                               &ktune__v1__query_best_response__descriptor, 60000, &out, st);
    if (rc == 0) {
        *n = ((Ktune__V1__QueryBestResponse *)out)->n_records;
        protobuf_c_message_free_unpacked(out, NULL);
    }
    return rc;
}

/* ListRecords of req: the count streamed, or the failed call's code. */
static int64_t list_request(service_t *s, Ktune__V1__ListRecordsRequest *req, kt_rpc_status_t *st)
{
    kt_rpc_reader_t *r = kt_rpc_reader_open(s->client, "/ktune.v1.Tracker/ListRecords",
                                            &req->base, &ktune__v1__record__descriptor, 120000);
    ck_assert_ptr_nonnull(r);
    int64_t n = 0;
    ProtobufCMessage *msg;
    while (kt_rpc_reader_next(r, &msg) == 1) {
        protobuf_c_message_free_unpacked(msg, NULL);
        n++;
    }
    int rc = kt_rpc_reader_close(r, st);
    return rc != 0 ? rc : n;
}

/* ListRecords of the records of `key`; the count streamed, or a negative code. */
static int64_t list_records(service_t *s, const char *key, int valid_only, kt_rpc_status_t *st)
{
    Ktune__V1__ListRecordsRequest req = KTUNE__V1__LIST_RECORDS_REQUEST__INIT;
    req.workload_key = (char *)key;
    req.valid_only = valid_only;
    return list_request(s, &req, st);
}

/* KT_LIMIT_TOP_K and KT_LIMIT_RECORDS on QueryBest and ListRecords: at the
 * cap answered, past it RESOURCE_EXHAUSTED naming the limit. */
START_TEST(limits_records_per_query)
{
    make_dir();
    /* KT_LIMIT_RECORDS + 1 records of one workload, one of them invalid. */
    const char *key = "[\"11a175\", [1]]";
    size_t n = KT_LIMIT_RECORDS + 1;
    kt_record_t *recs = calloc(n, sizeof *recs);
    double cost = 1e-3;
    ck_assert_ptr_nonnull(recs);
    char **states = calloc(n, sizeof *states);
    for (size_t i = 0; i < n; i++) {
        states[i] = malloc(32);
        snprintf(states[i], 32, "{\"s\":%zu}", i);
        recs[i] = (kt_record_t){.workload_key = key, .target = "cpu", .state_json = states[i],
                                .state_hash = i + 1, .costs = &cost, .ncosts = 1,
                                .all_cost = 0.01, .timestamp = 1.0};
    }
    recs[0].error_code = 2;
    recs[0].costs = NULL;
    recs[0].ncosts = 0;
    recs[0].error_msg = "cc failed";
    kt_store_t *st0 = kt_store_open(g_db, KT_STORE_CREATE);
    ck_assert_msg(st0 != NULL, "%s", kt_err_msg());
    ck_assert_msg(kt_store_put_records(st0, recs, n) == 0, "%s", kt_err_msg());
    kt_store_close(st0);
    for (size_t i = 0; i < n; i++)
        free(states[i]);
    free(states);
    free(recs);

    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    kt_rpc_status_t st;
    size_t got = 0;
    ck_assert_msg(query_best(&s, key, 0, KT_LIMIT_TOP_K, &got, &st) == 0, "%s", kt_err_msg());
    ck_assert_uint_eq(got, KT_LIMIT_TOP_K);
    ck_assert_int_eq(query_best(&s, key, 0, KT_LIMIT_TOP_K + 1, &got, &st), KT_ELIMIT);
    ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(st.msg, "KT_LIMIT_TOP_K") != NULL, "%s", st.msg);

    /* A job of 21 tasks: top_k x tasks past KT_LIMIT_RECORDS is refused. */
    enum { T = 21 };
    job_msg_t j[T];
    Ktune__V1__Task *tp[T];
    for (int i = 0; i < T; i++) {
        job_msg(&j[i], 1 + i, "nobody", T);
        tp[i] = &j[i].task;
    }
    Ktune__V1__Job job = j[0].job;
    job.options = &j[0].to;
    job.tasks = tp;
    job.n_tasks = T;
    int64_t id;
    ck_assert_msg(submit_rpc(s.client, &job, &id, &st) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(query_best(&s, NULL, id, KT_LIMIT_RECORDS / T + 1, &got, &st), KT_ELIMIT);
    ck_assert_msg(strstr(st.msg, "KT_LIMIT_RECORDS") != NULL, "%s", st.msg);
    ck_assert_msg(query_best(&s, NULL, id, KT_LIMIT_RECORDS / T, &got, &st) == 0, "%s",
                  kt_err_msg());

    /* ListRecords: KT_LIMIT_RECORDS + 1 refused, the KT_LIMIT_RECORDS valid ones sent. */
    ck_assert_int_eq(list_records(&s, key, 0, &st), KT_ELIMIT);
    ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(st.msg, "KT_LIMIT_RECORDS") != NULL, "%s", st.msg);
    ck_assert_int_eq(list_records(&s, key, 1, &st), KT_LIMIT_RECORDS);
    service_stop(&s);
    remove_dir();
}
END_TEST

/* KT_LIMIT_CANDIDATES and KT_LIMIT_ARTIFACT_BYTES on Build and Run requests
 * (the handlers' own checks). */
START_TEST(limits_candidates_and_artifact_size)
{
    size_t n = KT_LIMIT_CANDIDATES + 1;
    Ktune__V1__BuildCandidate *bc = calloc(n, sizeof *bc), **bp = calloc(n, sizeof *bp);
    Ktune__V1__RunCandidate *rc_ = calloc(n, sizeof *rc_), **rp = calloc(n, sizeof *rp);
    ck_assert(bc && bp && rc_ && rp);
    for (size_t i = 0; i < n; i++) {
        ktune__v1__build_candidate__init(&bc[i]);
        bp[i] = &bc[i];
        ktune__v1__run_candidate__init(&rc_[i]);
        rp[i] = &rc_[i];
    }
    Ktune__V1__BuildRequest b = KTUNE__V1__BUILD_REQUEST__INIT;
    b.candidates = bp;
    b.n_candidates = n;
    ck_assert_int_eq(kt_build_service_check(&b, NULL), KT_ELIMIT);
    ck_assert_msg(strstr(kt_err_msg(), "KT_LIMIT_CANDIDATES") != NULL, "%s", kt_err_msg());
    b.n_candidates = n - 1;
    ck_assert_msg(kt_build_service_check(&b, NULL) == 0, "%s", kt_err_msg());

    kt_run_service_opts_t ro = {.cuda_device = -1};
    kt_run_service_t *rs = kt_run_service_new(&ro);
    ck_assert_msg(rs != NULL, "%s", kt_err_msg());
    Ktune__V1__RunRequest r = KTUNE__V1__RUN_REQUEST__INIT;
    r.candidates = rp;
    r.n_candidates = n;
    ck_assert_int_eq(kt_run_service_check(rs, &r, NULL), KT_ELIMIT);
    ck_assert_msg(strstr(kt_err_msg(), "KT_LIMIT_CANDIDATES") != NULL, "%s", kt_err_msg());
    r.n_candidates = n - 1;
    ck_assert_msg(kt_run_service_check(rs, &r, NULL) == 0, "%s", kt_err_msg());
    /* An artifact at the cap is checked as usual, one byte more refuses the request. */
    uint8_t *art = calloc(1, KT_LIMIT_ARTIFACT_BYTES + 1);
    ck_assert_ptr_nonnull(art);
    r.n_candidates = 2;
    rc_[1].artifact.data = art;
    rc_[1].artifact.len = KT_LIMIT_ARTIFACT_BYTES;
    ck_assert_msg(kt_run_service_check(rs, &r, NULL) == 0, "%s", kt_err_msg());
    rc_[1].artifact.len = KT_LIMIT_ARTIFACT_BYTES + 1;
    ck_assert_int_eq(kt_run_service_check(rs, &r, NULL), KT_ELIMIT);
    ck_assert_msg(strstr(kt_err_msg(), "candidate 1") && strstr(kt_err_msg(), "KT_LIMIT_ARTIFACT_BYTES"),
                  "%s", kt_err_msg());
    free(art);
    /* Measure options at their caps pass; one past a cap names the field. */
    rc_[1].artifact.len = 16;
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.number = KT_LIMIT_MEASURE_NUMBER;
    mo.repeat = KT_LIMIT_MEASURE_REPEAT;
    mo.num_threads = 1;
    r.options = &mo;
    ck_assert_msg(kt_run_service_check(rs, &r, NULL) == 0, "%s", kt_err_msg());
    mo.repeat = KT_LIMIT_MEASURE_REPEAT + 1;
    ck_assert_int_eq(kt_run_service_check(rs, &r, NULL), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "repeat 1001 is outside 0..1000"), "%s", kt_err_msg());
    mo.repeat = 3;
    mo.min_repeat_ms = KT_LIMIT_MEASURE_MIN_REPEAT_MS + 1;
    ck_assert_int_eq(kt_run_service_check(rs, &r, NULL), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "min_repeat_ms"), "%s", kt_err_msg());
    r.options = NULL;
    kt_run_service_free(rs);
    free(bc);
    free(bp);
    free(rc_);
    free(rp);
}
END_TEST

/* ---- the store under faults ---------------------------------------------------------------- */

/* n valid records of workload `key` (state hashes from base) into the store at path. */
static void put_records(const char *path, const char *key, int base, int n)
{
    kt_store_t *st = kt_store_open(path, KT_STORE_CREATE);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_record_t *recs = calloc((size_t)n, sizeof *recs);
    char (*json)[32] = calloc((size_t)n, sizeof *json);
    double cost = 1e-3;
    for (int i = 0; i < n; i++) {
        snprintf(json[i], sizeof json[i], "{\"s\":%d}", base + i);
        recs[i] = (kt_record_t){.workload_key = key, .target = "cpu", .state_json = json[i],
                                .state_hash = (uint64_t)(base + i + 1), .costs = &cost,
                                .ncosts = 1, .all_cost = 0.01, .timestamp = 1.0};
    }
    ck_assert_msg(kt_store_put_records(st, recs, (size_t)n) == 0, "%s", kt_err_msg());
    free(recs);
    free(json);
    kt_store_close(st);
}

static void overwrite(const char *path, long off, size_t len, int byte)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    for (size_t i = 0; i < len; i++)
        fputc(byte, f);
    fclose(f);
}

/* A corrupted store: pages overwritten in the middle make the job manager
 * (the tracker) refuse it, naming the file and PRAGMA integrity_check's
 * finding; header garbage is refused as no database, naming the file. */
START_TEST(faults_corrupted_store_is_refused)
{
    make_dir();
    put_records(g_db, "[\"corrupt\", [1]]", 0, 5000);
    FILE *f = fopen(g_db, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    ck_assert_int_gt(size, 16 * 4096);
    overwrite(g_db, (size / 2) & ~4095L, 3 * 4096, 0x5a);

    kt_tracker_opts_t to = {.listen = "127.0.0.1:0", .heartbeat_ms = 600000};
    kt_tracker_t *t = kt_tracker_new(&to);
    ck_assert_ptr_nonnull(t);
    kt_jobs_t *m = kt_jobs_new(t, g_db);
    ck_assert_msg(m == NULL, "a corrupted store was accepted");
    const char *msg = kt_err_msg();
    ck_assert_msg(strstr(msg, g_db) && strstr(msg, "PRAGMA integrity_check") &&
                      strstr(msg, "integrity check: "),
                  "%s", msg);
    /* The finding itself follows, and it is not "ok". */
    const char *finding = strstr(msg, "integrity check: ") + strlen("integrity check: ");
    ck_assert_msg(*finding && strcmp(finding, "ok") != 0, "%s", msg);
    kt_tracker_stop(t, 0);

    overwrite(g_db, 0, 100, 0x77);
    t = kt_tracker_new(&to);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(kt_jobs_new(t, g_db));
    ck_assert_msg(strstr(kt_err_msg(), g_db) != NULL, "%s", kt_err_msg());
    kt_tracker_stop(t, 0);
    remove_dir();
}
END_TEST

/* Mount a tmpfs of `kib` KiB at dir (the tests run as root, as CI does). */
static void mount_tmpfs(const char *dir, int kib, const char *extra)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && mount -t tmpfs -o size=%dk%s tmpfs '%s'", dir, kib,
             extra ? extra : "", dir);
    ck_assert_msg(system(cmd) == 0, "%s failed (the fault tests mount a tmpfs: run as root)", cmd);
}

static void umount_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "umount '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Fill the file system holding `path` with one file until ENOSPC. */
static void fill_disk(const char *path)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static char block[4096];
    while (fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        ;
    fclose(f);
}

/* The test's directory with a tmpfs of `kib` KiB mounted at <dir>/mnt, the
 * store (g_db) on it, and the path fill_disk fills it with. */
typedef struct {
    char mnt[300], filler[320];
} tmpfs_store_t;

static void tmpfs_store(tmpfs_store_t *fs, int kib)
{
    make_dir();
    snprintf(fs->mnt, sizeof fs->mnt, "%s/mnt", g_dir);
    snprintf(fs->filler, sizeof fs->filler, "%s/filler", fs->mnt);
    mount_tmpfs(fs->mnt, kib, NULL);
    snprintf(g_db, sizeof g_db, "%s/jobs.db", fs->mnt);
}

static void tmpfs_store_remove(tmpfs_store_t *fs)
{
    umount_dir(fs->mnt);
    remove_dir();
}

/* A full disk during a run: commits fail and the job says so while the
 * tracker answers JobStatus and QueryBest; the records committed before stay;
 * once space is back the job goes on to done. */
START_TEST(faults_full_disk_during_a_run)
{
    tmpfs_store_t fs;
    tmpfs_store(&fs, 8192);
    fake_t worker, runner;
    service_t s;
    /* 200 ms a batch: the job is far from done when the disk fills, however
     * late this test gets to it. */
    start_with_fakes(&s, &worker, &runner, 200);
    int64_t id = submit(&s, 48, 4);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "running", 8);
    ck_assert_str_eq(p->state, "running");
    protobuf_c_message_free_unpacked(&p->base, NULL);

    fill_disk(fs.filler);
    /* The job waits on the store and says why. */
    int64_t trials = -1;
    for (int waited = 0;; waited += 100) {
        p = status(&s, id);
        int waiting = strstr(p->message ? p->message : "", "the store cannot commit") != NULL;
        trials = p->total_trials;
        ck_assert_msg(strcmp(p->state, "running") == 0, "job %s: %s", p->state, p->message);
        protobuf_c_message_free_unpacked(&p->base, NULL);
        if (waiting)
            break;
        ck_assert_msg(waited < WAIT_MS, "the job never reported the full store");
        sleep_ms(100);
    }
    ck_assert_int_ge(trials, 8);
    ck_assert_int_lt(trials, 48);
    sleep_ms(500);
    /* Reads are served: status, QueryBest of the records committed so far. */
    p = status(&s, id);
    ck_assert_int_eq(p->total_trials, trials);
    ck_assert_str_eq(p->state, "running");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    kt_rpc_status_t st;
    size_t got = 0;
    ck_assert_msg(query_best(&s, NULL, id, 5, &got, &st) == 0, "%s", kt_err_msg());
    ck_assert_uint_ge(got, 1);

    /* Space back: the job goes on and ends with every trial stored. */
    ck_assert_int_eq(unlink(fs.filler), 0);
    p = wait_job(&s, id, "done", 0);
    ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
    ck_assert_int_eq(p->total_trials, 48);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    service_stop(&s);
    ck_assert_int_eq(stored_trials(id), 48);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    tmpfs_store_remove(&fs);
}
END_TEST

/* A job cancelled while the store cannot commit (found by deploy/soak.sh):
 * the round waiting on the full disk is dropped as an aborted one, not a
 * failure, and the end is stored once space is back, so the job is
 * "cancelled" both in the tracker and in the store (before: "failed" in the
 * tracker and still "running" in the store, where a restarted tracker
 * would have resumed it). What it reports equals what is stored. */
START_TEST(faults_cancel_on_a_full_disk_ends_cancelled_in_the_store)
{
    tmpfs_store_t fs;
    tmpfs_store(&fs, 8192);
    fake_t worker, runner;
    service_t s;
    start_with_fakes(&s, &worker, &runner, 200);
    int64_t id = submit(&s, 48, 4);
    Ktune__V1__JobProgress *p = wait_job(&s, id, "running", 8);
    ck_assert_str_eq(p->state, "running");
    protobuf_c_message_free_unpacked(&p->base, NULL);

    fill_disk(fs.filler);
    for (int waited = 0;; waited += 100) {
        p = status(&s, id);
        int waiting = strstr(p->message ? p->message : "", "the store cannot commit") != NULL;
        ck_assert_msg(strcmp(p->state, "running") == 0, "job %s: %s", p->state, p->message);
        protobuf_c_message_free_unpacked(&p->base, NULL);
        if (waiting)
            break;
        ck_assert_msg(waited < WAIT_MS, "the job never reported the full store");
        sleep_ms(100);
    }
    /* Cancelled while the disk is still full: not a failure. */
    ck_assert_int_eq(kt_jobs_cancel(s.jobs, id, 2000), 0);
    p = status(&s, id);
    ck_assert_msg(strcmp(p->state, "failed") != 0, "job %s: %s", p->state, p->message);
    protobuf_c_message_free_unpacked(&p->base, NULL);

    /* Space back: the end is stored. */
    ck_assert_int_eq(unlink(fs.filler), 0);
    p = wait_job(&s, id, "cancelled", 0);
    ck_assert_msg(strcmp(p->state, "cancelled") == 0, "job %s: %s", p->state, p->message);
    int64_t told = p->total_trials;
    protobuf_c_message_free_unpacked(&p->base, NULL);
    service_stop(&s);
    kt_store_t *st = kt_store_open(g_db, 0);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_store_job_info_t *info = NULL;
    ck_assert_int_eq(kt_store_get_job(st, id, &info), 0);
    ck_assert_str_eq(info->job.state, "cancelled");
    kt_store_job_info_free(info);
    kt_store_close(st);
    ck_assert_int_eq(stored_trials(id), told);
    kt_rpc_server_stop(worker.srv, 0);
    kt_rpc_server_stop(runner.srv, 0);
    tmpfs_store_remove(&fs);
}
END_TEST

/* A tracker started on a store whose file system is full (found by
 * deploy/soak.sh: a tracker killed and restarted while the disk was full):
 * it cannot start, since SQLite must size the WAL index (-shm) to open the
 * file, and it says that the file system is full, naming the file, instead
 * of SQLite's "disk I/O error" (before: "PRAGMA user_version: disk I/O
 * error"). Once space is back it starts with every record. */
START_TEST(faults_full_disk_at_start_is_refused_saying_so)
{
    tmpfs_store_t fs;
    tmpfs_store(&fs, 4096);
    put_records(g_db, "[\"full\", [1]]", 0, 20);
    fill_disk(fs.filler);
    kt_tracker_opts_t to = {.listen = "127.0.0.1:0", .heartbeat_ms = 600000};
    kt_tracker_t *t = kt_tracker_new(&to);
    ck_assert_ptr_nonnull(t);
    kt_jobs_t *m = kt_jobs_new(t, g_db);
    ck_assert_msg(m == NULL, "a store on a full file system was opened");
    ck_assert_msg(strstr(kt_err_msg(), g_db) && strstr(kt_err_msg(), "file system is full"),
                  "%s", kt_err_msg());
    ck_assert_int_eq(unlink(fs.filler), 0);
    m = kt_jobs_new(t, g_db);
    ck_assert_msg(m != NULL, "%s", kt_err_msg());
    kt_jobs_free(m);
    kt_tracker_stop(t, 0);
    kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_store_counts_t c;
    ck_assert_int_eq(kt_store_count_records(st, NULL, &c), 0);
    ck_assert_int_eq(c.total, 20);
    kt_store_close(st);
    tmpfs_store_remove(&fs);
}
END_TEST

/* A SubmitJob the store cannot take because its file system is full (found
 * by deploy/soak.sh, which saw INTERNAL): RESOURCE_EXHAUSTED naming the
 * full file system, and nothing is made; once space is back the same
 * submission is a job. */
START_TEST(faults_full_disk_refuses_a_submit_as_resource_exhausted)
{
    tmpfs_store_t fs;
    tmpfs_store(&fs, 4096);
    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    fill_disk(fs.filler);
    job_msg_t j;
    job_msg(&j, 64, "nobody", 16);
    int64_t id = 0;
    kt_rpc_status_t st;
    int rc = submit_rpc_rid(s.client, &j.job, "full-1", &id, NULL, &st);
    ck_assert_msg(rc != 0 && st.code == KT_RPC_RESOURCE_EXHAUSTED &&
                      strstr(st.msg, "file system is full") && strstr(st.msg, fs.mnt),
                  "code %s: '%s'", kt_rpc_code_name(st.code), st.msg);
    ck_assert_int_eq(unlink(fs.filler), 0);
    ck_assert_uint_eq(stored_jobs(), 0);
    ck_assert_msg(submit_rpc_rid(s.client, &j.job, "full-1", &id, NULL, &st) == 0, "%s", st.msg);
    ck_assert_uint_eq(stored_jobs(), 1);
    service_stop(&s);
    tmpfs_store_remove(&fs);
}
END_TEST

/* A store on a read-only file system (the file and the directory of its WAL
 * read-only, as root cannot be refused by mode bits): the job manager does
 * not start and says why, naming the file. */
START_TEST(faults_read_only_store_is_refused)
{
    tmpfs_store_t fs;
    tmpfs_store(&fs, 4096);
    char cmd[1000];
    put_records(g_db, "[\"ro\", [1]]", 0, 10);
    snprintf(cmd, sizeof cmd, "chmod 0400 '%s' && mount -o remount,ro '%s'", g_db, fs.mnt);
    ck_assert_int_eq(system(cmd), 0);
    kt_tracker_opts_t to = {.listen = "127.0.0.1:0", .heartbeat_ms = 600000};
    kt_tracker_t *t = kt_tracker_new(&to);
    ck_assert_ptr_nonnull(t);
    kt_jobs_t *m = kt_jobs_new(t, g_db);
    ck_assert_msg(m == NULL, "a read-only store was accepted");
    ck_assert_msg(strstr(kt_err_msg(), g_db) && strstr(kt_err_msg(), "read-only"), "%s",
                  kt_err_msg());
    kt_tracker_stop(t, 0);
    /* The records are still there for a reader. */
    kt_store_t *st = kt_store_open(g_db, KT_STORE_READONLY);
    if (st) {
        kt_store_counts_t c;
        ck_assert_int_eq(kt_store_count_records(st, NULL, &c), 0);
        ck_assert_int_eq(c.total, 10);
        kt_store_close(st);
    }
    tmpfs_store_remove(&fs);
}
END_TEST

/* `ktune records import` SIGKILLed midway: every transaction it began is in
 * the store whole or not at all (the count is a multiple of the batch), and
 * the file passes PRAGMA integrity_check. */
START_TEST(faults_killed_import_is_all_or_none)
{
    make_dir();
    char in[320], cmd[2400];
    snprintf(in, sizeof in, "%s/records.jsonl", g_dir);
    FILE *f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    enum { N = 400000 };
    for (int i = 0; i < N; i++)
        fprintf(f,
                "{\"workload_key\":\"[\\\"ab\\\", [1]]\",\"target\":\"cpu\",\"state\":\"s%d\","
                "\"state_hash\":"
                "\"%016x\",\"costs\":[1.5e-3],\"error_code\":0,\"all_cost\":1,\"timestamp\":%d}\n",
                i, i + 1, i + 1);
    fclose(f);
    const char *root = getenv("KT_BUILD_ROOT");
    ck_assert_ptr_nonnull(root);
    /* Killed once the store has passed 2 MB, waiting for that up to 2
     * minutes: a sanitized import on a busy machine is slow. */
    snprintf(cmd, sizeof cmd,
             "'%s/cli/ktune' records import --db '%s' --in '%s' >/dev/null 2>&1 & pid=$!; "
             "for i in $(seq 2400); do sleep 0.05; "
             "[ -s '%s' ] && [ $(stat -c %%s '%s') -gt 2000000 ] && break; done; "
             "kill -9 $pid; wait $pid; exit 0",
             root, g_db, in, g_db, g_db);
    ck_assert_int_eq(system(cmd), 0);
    kt_store_t *st = kt_store_open(g_db, 0);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    ck_assert_msg(kt_store_integrity_check(st) == 0, "%s", kt_err_msg());
    kt_store_counts_t c;
    ck_assert_int_eq(kt_store_count_records(st, NULL, &c), 0);
    kt_store_close(st);
    ck_assert_msg(c.total > 0 && c.total < N, "killed after %lld records: not midway",
                  (long long)c.total);
    ck_assert_msg(c.total % KT_STORE_IMPORT_BATCH == 0, "%lld records: a torn transaction",
                  (long long)c.total);
    remove_dir();
}
END_TEST

/* ---- retried submissions, stops ------------------------------------------------------------ */

/* A SubmitJob retried after its answer was lost (found by deploy/soak.sh:
 * the tracker had made the job, and the retry made a second one): the same
 * request id answers the same job, saying existing, over any connection and
 * after a restart (the id is in the store), and the store holds one job;
 * another id is another job; the same id with another job, or an id of bad
 * form, is INVALID_ARGUMENT and makes nothing. */
START_TEST(jobs_submit_retried_under_its_request_id_makes_one_job)
{
    make_dir();
    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    /* Runners of key "nobody" never come: the jobs wait, queued. */
    job_msg_t j;
    job_msg(&j, 64, "nobody", 16);
    int64_t first = 0, id = 0;
    int existing = -1;
    kt_rpc_status_t st;
    ck_assert_msg(submit_rpc_rid(s.client, &j.job, "retry-1", &first, &existing, &st) == 0, "%s",
                  st.msg);
    ck_assert_int_eq(existing, 0);
    ck_assert_msg(submit_rpc_rid(s.client, &j.job, "retry-1", &id, &existing, &st) == 0, "%s",
                  st.msg);
    ck_assert_int_eq(id, first);
    ck_assert_int_eq(existing, 1);
    ck_assert_uint_eq(stored_jobs(), 1);
    /* A retry may come over a new connection. */
    kt_rpc_client_t *other = kt_rpc_client_new(kt_tracker_address(s.t), NULL);
    ck_assert_ptr_nonnull(other);
    id = 0;
    ck_assert_msg(submit_rpc_rid(other, &j.job, "retry-1", &id, &existing, &st) == 0, "%s",
                  st.msg);
    ck_assert_int_eq(id, first);
    ck_assert_int_eq(existing, 1);
    kt_rpc_client_free(other);

    /* Another id, the same job: another submission. */
    ck_assert_msg(submit_rpc_rid(s.client, &j.job, "retry-2", &id, &existing, &st) == 0, "%s",
                  st.msg);
    ck_assert_int_ne(id, first);
    ck_assert_int_eq(existing, 0);
    ck_assert_uint_eq(stored_jobs(), 2);

    /* The same id for another job, ids of bad form: refused, nothing made. */
    job_msg_t k;
    job_msg(&k, 65, "nobody", 16);
    char want[64], too_long[KT_JOBS_REQUEST_ID_MAX + 2];
    snprintf(want, sizeof want, "job %" PRId64, first);
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    const char *const rids[] = {"retry-1", "two words", too_long};
    const char *const says[] = {want, "letters, digits", "at most"};
    for (int i = 0; i < 3; i++) {
        int rc = submit_rpc_rid(s.client, i == 0 ? &k.job : &j.job, rids[i], &id, NULL, &st);
        ck_assert_msg(rc != 0 && st.code == KT_RPC_INVALID_ARGUMENT && strstr(st.msg, says[i]) &&
                          strstr(st.msg, "request_id"),
                      "case %d: code %d '%s'", i, st.code, st.msg);
    }
    ck_assert_uint_eq(stored_jobs(), 2);

    /* A restarted tracker finds the id in the store. */
    service_stop(&s);
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    ck_assert_msg(submit_rpc_rid(s.client, &j.job, "retry-1", &id, &existing, &st) == 0, "%s",
                  st.msg);
    ck_assert_int_eq(id, first);
    ck_assert_int_eq(existing, 1);
    ck_assert_uint_eq(stored_jobs(), 2);
    service_stop(&s);
    remove_dir();
}
END_TEST

/* The tracker stopping while a Build (then a Run) is in flight to a peer
 * that never answers (found by deploy/soak.sh: SIGTERM took 14 s with a
 * worker SIGSTOPped): the stop cancels the call and returns at once, not
 * when the call's deadline (a minute and more) or the peer gives up; the
 * records committed before are in the store, the job stays running there,
 * and resumed it ends with its budget, each state measured once (the
 * cancelled part's states were never stored, so they are proposed again). */
START_TEST(jobs_stop_cancels_calls_to_a_peer_that_never_answers)
{
    static const char *const mm = "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}";
    for (int hang_run = 0; hang_run < 2; hang_run++) {
        make_dir();
        fake_t worker, runner;
        service_t s;
        start_with_fakes(&s, &worker, &runner, 0);
        /* Its first two requests are answered: some records are stored. */
        fake_t *hung = hang_run ? &runner : &worker;
        hung->hang_from = 3;
        int64_t id = submit(&s, 24, 4);
        for (int waited = 0; atomic_load(&hung->hanging) == 0; waited += 20) {
            ck_assert_msg(waited < WAIT_MS, "no %s request hung", hang_run ? "Run" : "Build");
            sleep_ms(20);
        }
        Ktune__V1__JobProgress *p = status(&s, id);
        int64_t told = p->total_trials;
        ck_assert_str_eq(p->state, "running");
        protobuf_c_message_free_unpacked(&p->base, NULL);
        ck_assert_int_ge(told, 4);

        double t0 = kt_time_mono();
        service_stop(&s);
        double took = kt_time_mono() - t0;
        ck_assert_msg(took < 2.0, "%s hung: the stop took %.1f s", hang_run ? "Run" : "Build",
                      took);
        /* Committed before the stop (and told): stored; the job resumes. */
        int64_t stored = stored_trials(id);
        ck_assert_int_ge(stored, told);
        ck_assert_int_lt(stored, 24);
        ck_assert_msg(kt_test_job_stored_as(g_db, id, "running"), "%s", kt_err_msg());

        hung->hang_from = 0;
        service_start(&s);
        fake_register(s.t, &worker, 0);
        fake_register(s.t, &runner, 1);
        ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
        p = wait_job(&s, id, "done", 0);
        ck_assert_msg(strcmp(p->state, "done") == 0, "job %s: %s", p->state, p->message);
        ck_assert_int_eq(p->total_trials, 24);
        protobuf_c_message_free_unpacked(&p->base, NULL);
        service_stop(&s);
        uint64_t h[64];
        int n = record_hashes(mm, h, 64);
        ck_assert_int_eq(n, 24);
        for (int i = 0; i < n; i++)
            ck_assert_msg(!has_hash(h, i, h[i]), "state %016" PRIx64 " measured twice", h[i]);
        kt_rpc_server_stop(worker.srv, 0);
        kt_rpc_server_stop(runner.srv, 0);
        remove_dir();
    }
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------------ */

/* The store file and its WAL, byte for byte (NULL for a missing one). */
typedef struct {
    char *db, *wal;
    size_t ndb, nwal;
} store_bytes_t;

static store_bytes_t store_bytes(void)
{
    store_bytes_t b = {0};
    char wal[420];
    snprintf(wal, sizeof wal, "%s-wal", g_db);
    b.db = kt_file_read(g_db, &b.ndb);
    b.wal = kt_file_read(wal, &b.nwal);
    ck_assert_ptr_nonnull(b.db);
    return b;
}

static int store_bytes_same(const store_bytes_t *a, const store_bytes_t *b)
{
    return a->ndb == b->ndb && memcmp(a->db, b->db, a->ndb) == 0 && !a->wal == !b->wal &&
           (!a->wal || (a->nwal == b->nwal && memcmp(a->wal, b->wal, a->nwal) == 0));
}

static void store_bytes_free(store_bytes_t *b)
{
    free(b->db);
    free(b->wal);
}

/* ListRecords with every filter: the records streamed, or the failed call's code. */
static int64_t list_filtered(service_t *s, const char *key, const char *target, int64_t job,
                             kt_rpc_status_t *st)
{
    Ktune__V1__ListRecordsRequest req = KTUNE__V1__LIST_RECORDS_REQUEST__INIT;
    req.workload_key = (char *)key;
    req.target = (char *)target;
    req.job_id = job;
    return list_request(s, &req, st);
}

/* Every malformed field of QueryBest, ListRecords, ListJobs, SubmitJob,
 * RegisterPeer and Heartbeat is refused with INVALID_ARGUMENT (NOT_FOUND for
 * a job the store lacks) and a message naming the field, and leaves the
 * store's bytes (and the registry) as they were; a key written with other
 * spacing or upper-case hex finds the same records. */
START_TEST(bad_input_rpcs_name_the_field_and_change_nothing)
{
    make_dir();
    kt_workload_t *w = kt_workload_parse("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    ck_assert_ptr_nonnull(w);
    const char *key = kt_workload_key(w);
    put_records(g_db, key, 0, 3);
    kt_store_t *st0 = kt_store_open(g_db, 0);
    ck_assert_ptr_nonnull(st0);
    ck_assert_int_eq(kt_store_put_workload(st0, key, kt_workload_json(w), kt_workload_flops(w)),
                     0);
    kt_store_task_t task = {.index = 0, .workload_key = key, .weight = 1, .target = "cpu"};
    kt_store_job_t job = {.created = 1.0, .state = "done", .target = "cpu",
                          .runner_key = "cpu", .strategy = "gradient", .policy = "sketch.xgb",
                          .options_json = "{\"num_measure_trials\":3}"};
    ck_assert_int_eq(kt_store_put_job(st0, &job, &task, 1), 0);
    kt_store_close(st0);
    /* The same key as a user may paste it: compact, upper-case hex. */
    char loud[256];
    snprintf(loud, sizeof loud, "%s", key);
    for (char *p = loud; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    char *compact = loud;
    for (char *p = loud; *p; p++)
        if (*p != ' ')
            *compact++ = *p;
    *compact = '\0';

    service_t s;
    service_start(&s);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
    store_bytes_t before = store_bytes();
    kt_rpc_status_t st;
    size_t got = 0;
    ck_assert_msg(query_best(&s, loud, 0, 5, &got, &st) == 0, "%s: %s", loud, st.msg);
    ck_assert_uint_eq(got, 3);
    /* The workload's JSON stands for its key. */
    got = 0;
    ck_assert_msg(query_best(&s, "{\"op\": \"matmul\", \"K\": 64, \"N\": 64, \"M\": 64}", 0, 5,
                             &got, &st) == 0,
                  "json: %s", st.msg);
    ck_assert_uint_eq(got, 3);

    struct {
        const char *key, *target;
        int64_t job;
        int top_k, code;
        const char *msg;
    } qb[] = {
        {"garbage", NULL, 0, 0, KT_RPC_INVALID_ARGUMENT, "workload_key: 'garbage' is neither a workload key"},
        {"[\"abc\", 5]", NULL, 0, 0, KT_RPC_INVALID_ARGUMENT, "item 1 is not a shape"},
        {"[\"xyz\", [1]]", NULL, 0, 0, KT_RPC_INVALID_ARGUMENT, "hex digits"},
        {"[\"abc\", [0]]", NULL, 0, 0, KT_RPC_INVALID_ARGUMENT, "not a positive integer"},
        {"[\"abc\"]", NULL, 0, 0, KT_RPC_INVALID_ARGUMENT, "at least one shape"},
        {key, "gpu", 0, 0, KT_RPC_INVALID_ARGUMENT, "target: unknown target 'gpu'"},
        {NULL, "tpu", job.id, 0, KT_RPC_INVALID_ARGUMENT, "target: unknown target 'tpu'"},
        {NULL, NULL, -3, 0, KT_RPC_INVALID_ARGUMENT, "job_id -3"},
        {NULL, NULL, 99, 0, KT_RPC_NOT_FOUND, "no job 99"},
        {key, NULL, job.id, 0, KT_RPC_INVALID_ARGUMENT, "one of them"},
        {key, NULL, 0, -1, KT_RPC_INVALID_ARGUMENT, "top_k"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(qb); i++) {
        Ktune__V1__QueryBestRequest req = KTUNE__V1__QUERY_BEST_REQUEST__INIT;
        req.workload_key = (char *)(qb[i].key ? qb[i].key : "");
        req.target = (char *)(qb[i].target ? qb[i].target : "");
        req.job_id = qb[i].job;
        req.top_k = qb[i].top_k;
        ProtobufCMessage *out = NULL;
        int rc = kt_rpc_call_unary(s.client, "/ktune.v1.Tracker/QueryBest", &req.base,
                                   &ktune__v1__query_best_response__descriptor, 30000, &out, &st);
        ck_assert_msg(rc != 0 && st.code == qb[i].code && strstr(st.msg, qb[i].msg),
                      "QueryBest case %zu: rc %d code %d '%s', want %d '%s'", i, rc, st.code,
                      st.msg, qb[i].code, qb[i].msg);
    }

    struct {
        const char *key, *target;
        int64_t job;
        int code;
        const char *msg;
    } lr[] = {
        {"", "cuda ", 0, KT_RPC_INVALID_ARGUMENT, "ListRecords: target: unknown target 'cuda '"},
        {"{\"op\":\"matmul\"}", NULL, 0, KT_RPC_INVALID_ARGUMENT, "ListRecords: workload_key"},
        {NULL, NULL, -1, KT_RPC_INVALID_ARGUMENT, "job_id -1"},
        {NULL, NULL, 42, KT_RPC_NOT_FOUND, "no job 42"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(lr); i++) {
        int64_t n = list_filtered(&s, lr[i].key, lr[i].target, lr[i].job, &st);
        ck_assert_msg(n < 0 && st.code == lr[i].code && strstr(st.msg, lr[i].msg),
                      "ListRecords case %zu: %lld, code %d '%s', want %d '%s'", i, (long long)n,
                      st.code, st.msg, lr[i].code, lr[i].msg);
    }
    ck_assert_int_eq(list_filtered(&s, compact, "cpu", job.id, &st), 0);
    ck_assert_int_eq(list_filtered(&s, compact, "cpu", 0, &st), 3);

    Ktune__V1__ListJobsRequest lj = KTUNE__V1__LIST_JOBS_REQUEST__INIT;
    lj.state = "runing";
    ProtobufCMessage *out = NULL;
    ck_assert_int_ne(kt_rpc_call_unary(s.client, "/ktune.v1.Tracker/ListJobs", &lj.base,
                                       &ktune__v1__list_jobs_response__descriptor, 30000, &out,
                                       &st),
                     0);
    ck_assert_int_eq(st.code, KT_RPC_INVALID_ARGUMENT);
    ck_assert_msg(strstr(st.msg, "unknown state 'runing'"), "%s", st.msg);

    /* SubmitJob: one field wrong at a time in an otherwise good job. */
    enum { PRIORITY, KEY_OTHER, KEY_BAD, TRIALS, MORE, EARLY, TARGET, WEIGHT, STRATEGY, NUMBER,
           REPEAT, COOLDOWN, NCASES };
    static const char *const sj_msg[NCASES] = {
        "priority 2000000000", "is not its JSON's", "task 0: workload key: 'nope'",
        "negative trials", "more_trials (-1)", "early_stopping -3 (0 for none)",
        "unknown target 'gpu'", "weight must be >= 0",
        "unknown strategy 'fastest'", "number 2000000000 is outside 0..1000000",
        "repeat -1 is outside", "cooldown_interval inf"};
    for (int i = 0; i < NCASES; i++) {
        job_msg_t j;
        job_msg(&j, 64, "cpu", 8);
        Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
        if (i >= NUMBER)
            j.to.measure = &mo;
        switch (i) {
        case NUMBER: mo.number = 2000000000; break;
        case REPEAT: mo.repeat = -1; break;
        case COOLDOWN: mo.cooldown_interval = INFINITY; break;
        case PRIORITY: j.job.priority = 2000000000; break;
        case KEY_OTHER: j.wl.key = "[\"0123\", [64, 64], [64, 64], [64, 64]]"; break;
        case KEY_BAD: j.wl.key = "nope"; break;
        case TRIALS: j.to.num_measure_trials = -5; break;
        case MORE: j.to.more_trials = -1; break;
        case EARLY: j.to.early_stopping = -3; break;
        case TARGET: j.job.target = "gpu"; break;
        case WEIGHT: j.task.weight = NAN; break;
        case STRATEGY: j.job.strategy = "fastest"; break;
        }
        int64_t id = 0;
        ck_assert_msg(submit_rpc(s.client, &j.job, &id, &st) != 0 &&
                          st.code == KT_RPC_INVALID_ARGUMENT && strstr(st.msg, sj_msg[i]),
                      "SubmitJob case %d: code %d '%s', want '%s'", i, st.code, st.msg,
                      sj_msg[i]);
    }
    /* The key the JSON gives, sent along, is accepted (the CLI sends it). */
    job_msg_t good;
    job_msg(&good, 32, "cpu", 8);
    kt_workload_t *w32 = kt_workload_parse(good.json);
    ck_assert_ptr_nonnull(w32);
    ck_assert_int_eq(kt_jobs_check_job(&good.job, NULL, NULL), 0);
    good.wl.key = (char *)kt_workload_key(w32);
    ck_assert_msg(kt_jobs_check_job(&good.job, NULL, NULL) == 0, "%s", kt_err_msg());
    kt_workload_free(w32);

    /* JobStatus, CancelJob and WatchJob: no job has an id below 1. */
    static const char *const ref_methods[] = {"JobStatus", "CancelJob", "WatchJob"};
    for (int i = 0; i < 6; i++) {
        Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
        ref.job_id = i % 2 ? -5 : 0;
        char path[64];
        snprintf(path, sizeof path, "/ktune.v1.Tracker/%s", ref_methods[i / 2]);
        int rc;
        out = NULL;
        if (i / 2 < 2) {
            rc = kt_rpc_call_unary(s.client, path, &ref.base,
                                   &ktune__v1__job_progress__descriptor, 30000, &out, &st);
        } else {
            kt_rpc_reader_t *r = kt_rpc_reader_open(s.client, path, &ref.base,
                                                    &ktune__v1__job_progress__descriptor, 30000);
            ck_assert_ptr_nonnull(r);
            ProtobufCMessage *msg = NULL;
            ck_assert_int_ne(kt_rpc_reader_next(r, &msg), 1);
            rc = kt_rpc_reader_close(r, &st);
        }
        char want[64];
        snprintf(want, sizeof want, "job_id %d is not a job id", i % 2 ? -5 : 0);
        ck_assert_msg(rc != 0 && st.code == KT_RPC_INVALID_ARGUMENT && strstr(st.msg, want),
                      "%s(%d): code %d '%s'", ref_methods[i / 2], i % 2 ? -5 : 0, st.code,
                      st.msg);
        if (out)
            protobuf_c_message_free_unpacked(out, NULL);
    }

    /* RegisterPeer and Heartbeat: a worker's unknown target, a negative capacity or count. */
    for (int i = 0; i < 3; i++) {
        char *targets[] = {"cpu", "gpu"};
        Ktune__V1__PeerInfo peer = KTUNE__V1__PEER_INFO__INIT;
        peer.role = "worker";
        peer.address = "127.0.0.1:9";
        peer.targets = targets;
        peer.n_targets = 2;
        if (i == 1) {
            peer.n_targets = 1;
            peer.capacity = -2;
        }
        Ktune__V1__RegisterRequest rr = KTUNE__V1__REGISTER_REQUEST__INIT;
        rr.peer = &peer;
        Ktune__V1__HeartbeatRequest hb = KTUNE__V1__HEARTBEAT_REQUEST__INIT;
        hb.peer_id = "worker-1";
        hb.in_flight = -1;
        out = NULL;
        int rc = i < 2 ? kt_rpc_call_unary(s.client, "/ktune.v1.Tracker/RegisterPeer", &rr.base,
                                           &ktune__v1__register_response__descriptor, 30000,
                                           &out, &st)
                       : kt_rpc_call_unary(s.client, "/ktune.v1.Tracker/Heartbeat", &hb.base,
                                           &ktune__v1__heartbeat_response__descriptor, 30000,
                                           &out, &st);
        static const char *const want[] = {"targets[1]: unknown target 'gpu'", "capacity -2",
                                           "in_flight -1"};
        ck_assert_msg(rc != 0 && st.code == KT_RPC_INVALID_ARGUMENT && strstr(st.msg, want[i]),
                      "peer case %d: code %d '%s', want '%s'", i, st.code, st.msg, want[i]);
    }
    kt_peer_t *peers = NULL;
    int npeers = -1;
    ck_assert_int_eq(kt_registry_peers(kt_tracker_registry(s.t), &peers, &npeers), 0);
    ck_assert_int_eq(npeers, 0);
    kt_peer_list_free(peers, npeers);

    store_bytes_t after = store_bytes();
    ck_assert_msg(store_bytes_same(&before, &after), "a refused call changed the store");
    store_bytes_free(&before);
    store_bytes_free(&after);
    service_stop(&s);
    kt_workload_free(w);
    remove_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, jobs_run_a_job_to_done_on_fake_worker_and_runner);
    tcase_add_test(tc, jobs_count_a_winograd_alternative_once);
    tcase_add_test(tc, jobs_dispatch_measures_on_both_of_two_runners);
    tcase_add_test(tc, jobs_resume_an_unfinished_job_after_the_manager_is_recreated);
    tcase_add_test(tc, jobs_first_round_takes_refitted_states_of_the_nearest_stored_workload);
    tcase_add_test(tc, jobs_finished_jobs_do_not_grow_the_tracker);
    tcase_add_test(tc, jobs_submit_retried_under_its_request_id_makes_one_job);
    tcase_add_test(tc, jobs_stop_cancels_calls_to_a_peer_that_never_answers);
    suite_add_tcase(s, tc);
    TCase *sm = tcase_create("store_model");
    tcase_set_timeout(sm, 300);
    tcase_add_test(sm, jobs_start_from_the_store_model_of_their_key);
    suite_add_tcase(s, sm);

    TCase *lim = tcase_create("limits");
    tcase_set_timeout(lim, 600);
    tcase_add_test(lim, limits_tasks_per_job);
    tcase_add_test(lim, limits_candidates_and_artifact_size);
    tcase_add_test(lim, limits_submit_flood_is_refused_per_client);
    tcase_add_test(lim, limits_jobs_tracker_wide);
    tcase_add_test(lim, limits_watch_streams_per_client);
    tcase_add_test(lim, limits_records_per_query);
    suite_add_tcase(s, lim);
    TCase *faults = tcase_create("store_faults");
    tcase_set_timeout(faults, 600);
    tcase_add_test(faults, faults_corrupted_store_is_refused);
    tcase_add_test(faults, faults_read_only_store_is_refused);
    tcase_add_test(faults, faults_killed_import_is_all_or_none);
    tcase_add_test(faults, faults_full_disk_during_a_run);
    tcase_add_test(faults, faults_cancel_on_a_full_disk_ends_cancelled_in_the_store);
    tcase_add_test(faults, faults_full_disk_at_start_is_refused_saying_so);
    tcase_add_test(faults, faults_full_disk_refuses_a_submit_as_resource_exhausted);
    suite_add_tcase(s, faults);
    TCase *bad = tcase_create("bad_input");
    tcase_set_timeout(bad, 120);
    tcase_add_test(bad, bad_input_rpcs_name_the_field_and_change_nothing);
    suite_add_tcase(s, bad);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
