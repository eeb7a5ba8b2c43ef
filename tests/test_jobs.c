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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "service/job_view.h"
#include "service/jobs.h"
#include "service/tracker.h"
#include "store/store.h"
#include "util/err.h"

#define WAIT_MS 120000

/* ---- fake peers ----------------------------------------------------------------------- */

typedef struct {
    kt_rpc_server_t *srv;
    atomic_int calls;          /* Run or Build requests served */
    atomic_int candidates;     /* candidates in them */
    int delay_ms;              /* each request takes this long */
} fake_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int fake_build(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                      void *ud)
{
    fake_t *f = ud;
    const Ktune__V1__BuildRequest *in = (const Ktune__V1__BuildRequest *)req;
    Ktune__V1__BuildResponse *out = (Ktune__V1__BuildResponse *)resp;
    size_t n = in->n_candidates;
    atomic_fetch_add(&f->calls, 1);
    atomic_fetch_add(&f->candidates, (int)n);
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
    atomic_fetch_add(&f->calls, 1);
    atomic_fetch_add(&f->candidates, (int)n);
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

static char g_dir[256], g_db[300];

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

static void service_stop(service_t *s)
{
    kt_rpc_client_free(s->client);
    kt_jobs_stop(s->jobs);
    kt_tracker_stop(s->t, 1000);
    kt_jobs_free(s->jobs);
    memset(s, 0, sizeof *s);
}

/* A job over one small matmul on the fake runners' key. */
static int64_t submit(service_t *s, int trials, int per_round)
{
    Ktune__V1__Workload wl = KTUNE__V1__WORKLOAD__INIT;
    wl.json = "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}";
    Ktune__V1__Task task = KTUNE__V1__TASK__INIT, *tp = &task;
    task.workload = &wl;
    task.weight = 1;
    Ktune__V1__TuningOptions to = KTUNE__V1__TUNING_OPTIONS__INIT;
    to.num_measure_trials = trials;
    to.num_measures_per_round = per_round;
    to.seed = 7;
    Ktune__V1__Job job = KTUNE__V1__JOB__INIT;
    job.tasks = &tp;
    job.n_tasks = 1;
    job.target = "cpu";
    job.runner_key = "cpu-fake";
    job.policy = "sketch.random";
    job.options = &to;
    int64_t id = 0;
    ck_assert_msg(kt_jobs_submit(s->jobs, &job, &id) == 0, "%s", kt_err_msg());
    return id;
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

/* ---- tests ------------------------------------------------------------------------------------ */

START_TEST(jobs_run_a_job_to_done_on_fake_worker_and_runner)
{
    make_dir();
    fake_t worker, runner;
    fake_start(&worker, 0, 0);
    fake_start(&runner, 1, 0);
    service_t s;
    service_start(&s);
    fake_register(s.t, &worker, 0);
    fake_register(s.t, &runner, 1);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
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

START_TEST(jobs_dispatch_measures_on_both_of_two_runners)
{
    make_dir();
    fake_t worker, r1, r2;
    fake_start(&worker, 0, 0);
    /* Slow enough that a round's parts find both runners busy at once. */
    fake_start(&r1, 1, 100);
    fake_start(&r2, 1, 100);
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

START_TEST(jobs_resume_an_unfinished_job_after_the_manager_is_recreated)
{
    make_dir();
    fake_t worker, runner;
    fake_start(&worker, 0, 0);
    fake_start(&runner, 1, 150);
    service_t s;
    service_start(&s);
    fake_register(s.t, &worker, 0);
    fake_register(s.t, &runner, 1);
    ck_assert_int_eq(kt_jobs_start(s.jobs), 0);
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

int main(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, jobs_run_a_job_to_done_on_fake_worker_and_runner);
    tcase_add_test(tc, jobs_dispatch_measures_on_both_of_two_runners);
    tcase_add_test(tc, jobs_resume_an_unfinished_job_after_the_manager_is_recreated);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
