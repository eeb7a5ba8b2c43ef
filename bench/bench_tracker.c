/* Tracker dispatch benchmark (SIMULATION). A real ktune-tracker process
 * runs one tuning job (TASKS small matmul/dense tasks, rounds of 64,
 * round-robin) while this process plays every peer: N fake runners and one
 * fake worker, each an in-process gRPC server registered through the usual
 * peer agent. The fake worker answers Build at once with a placeholder
 * artifact; a fake runner answers Run with analytic costs (a deterministic
 * function of the artifact hash) after sleeping a simulated measurement time
 * per candidate, so it costs almost no CPU beyond its RPCs. Nothing is
 * compiled or timed for real, so what is measured is the tracker: search,
 * code generation, splitting rounds, leasing runners, the RPCs and
 * committing records.
 *
 * Three modes:
 *   dispatch   the tracker's search and code generation stubbed
 *              (KT_BENCH_DISPATCH_ONLY=1 in its environment: placeholder
 *              candidates), what dispatch, commit and bookkeeping alone
 *              sustain. Goal: >= 5,000 measurements/s at 256 runners.
 *   search x1  the real search (sketch.xgb: model training and population
 *   search x2  scoring on every task, a reduced evolutionary search, see
 *              DEFAULT_SEARCH) and code generation at --search-threads 1 and
 *              2. When both run in one process the x2 / x1 ratio is printed
 *              per runner count. Goal: >= 1.7x on 2 idle cores. Before each
 *              search mode and after them a 2-thread spin loop prints the
 *              cores this process gets (1 s each): the machine's limit, to
 *              tell from the tracker's.
 * For N = 1, 8, 64, 256 and 1024 runners (trials = 64 N, at most 8192) it
 * prints the throughput (measurements/s), the added latency per round (wall
 * time beyond the simulated runner time spread over N runners), the
 * scaling efficiency (throughput at N / (N x throughput at 1)), the
 * tracker's CPU time in all and per measurement, this process's CPU time
 * (the fake peers: if it nears the wall time they are the bottleneck), the
 * candidates per Run call, and where the rounds spend their time (mean ms per
 * round in propose, make, build, run, commit, from the tracker's debug log).
 *
 * Usage: bench_tracker [sim_ms_per_candidate [max_runners]] (default 100,
 * 1024). The figures in docs/benchmarks.md are taken one mode per process:
 *   KT_BENCH_MODES=dispatch build/bench/bench_tracker 10
 *   KT_BENCH_MODES="search x1,search x2" build/bench/bench_tracker 10 256
 * KT_BENCH_MODES names the modes to run (comma-separated; default all
 * three); KT_BENCH_POLICY=sketch.random and KT_BENCH_SEARCH=LIST (the job's
 * search_params) change the search modes' policy and parameters;
 * KT_BENCH_TRACKER=PATH runs another ktune-tracker binary (A/B
 * comparisons); KT_BENCH_KEEP=1 keeps the stores and the tracker logs. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_RUNNERS 1024
#define TASKS 16
#define PER_ROUND 64
/* A smaller evolutionary search than the default (2048 x 4): the same
 * steps (sampling, model scoring of the population, mutation, training),
 * in a fraction of the time. */
#define DEFAULT_SEARCH "evolutionary_search_population=512,evolutionary_search_num_iters=2"

static char dir[64], bin_dir[1024];
/* The mode of the current run: the tracker's --search-threads (NULL: its
 * default) and whether its search is stubbed (KT_BENCH_DISPATCH_ONLY=1). */
static const char *search_threads;
static int dispatch_only;
static int mode_no;   /* each mode its own stores: a store holding the tasks'
                       * records would change what the next mode searches */
static int sim_ms = 100;
/* The real search's policy and parameters (the search modes). */
static const char *policy = "sketch.xgb";
static const char *search_params = DEFAULT_SEARCH;
static atomic_long sim_busy_us;   /* simulated runner time handed out */
static atomic_long measured;      /* candidates answered */
static atomic_long run_calls;     /* Run RPCs answered */

static pid_t spawn(const char *rel, char *const args[], const char *log)
{
    char bin[1200];
    snprintf(bin, sizeof bin, "%s/../%s", bin_dir, rel);
    /* KT_BENCH_TRACKER=PATH compares another tracker build (A/B). */
    const char *alt = getenv("KT_BENCH_TRACKER");
    if (alt && *alt && strstr(rel, "ktune-tracker"))
        snprintf(bin, sizeof bin, "%s", alt);
    char *argv[24] = {bin};
    int n = 1;
    for (int i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setenv("KT_LOG_LEVEL", "debug", 1);   /* the rounds' phase times */
        if (dispatch_only && strstr(rel, "ktune-tracker"))
            setenv("KT_BENCH_DISPATCH_ONLY", "1", 1);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, argv);
        _exit(127);
    }
    close(fd);
    return pid;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- Fake peers ------------------------------------------------------------------------ */

static int h_build(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                   void *ud)
{
    (void)ud;
    const Ktune__V1__BuildRequest *in = (const Ktune__V1__BuildRequest *)req;
    Ktune__V1__BuildResponse *out = (Ktune__V1__BuildResponse *)resp;
    size_t n = in->n_candidates;
    Ktune__V1__BuildResult *arr = kt_rpc_call_alloc(call, (n + 1) * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (n + 1) * sizeof *out->results);
    if (!arr || !out->results)
        return KT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ktune__v1__build_result__init(&arr[i]);
        arr[i].candidate_id = in->candidates[i]->candidate_id;
        /* The placeholder artifact differs per source, so costs differ too. */
        uint64_t h = kt_hash64(in->candidates[i]->source, strlen(in->candidates[i]->source));
        uint64_t *art = kt_rpc_call_alloc(call, sizeof *art);
        char *hex = kt_rpc_call_alloc(call, 17);
        if (!art || !hex)
            return KT_ENOMEM;
        *art = h;
        snprintf(hex, 17, "%016llx", (unsigned long long)h);
        arr[i].artifact.data = (uint8_t *)art;
        arr[i].artifact.len = sizeof *art;
        arr[i].artifact_hash = hex;
        out->results[i] = &arr[i];
    }
    out->n_results = n;
    return KT_RPC_OK;
}

static int h_run(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                 void *ud)
{
    (void)ud;
    const Ktune__V1__RunRequest *in = (const Ktune__V1__RunRequest *)req;
    Ktune__V1__RunResponse *out = (Ktune__V1__RunResponse *)resp;
    size_t n = in->n_candidates;
    Ktune__V1__MeasureResult *arr = kt_rpc_call_alloc(call, (n + 1) * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (n + 1) * sizeof *out->results);
    double *costs = kt_rpc_call_alloc(call, (n + 1) * sizeof *costs);
    if (!arr || !out->results || !costs)
        return KT_ENOMEM;
    sleep_ms(sim_ms * (int)n);   /* the simulated measurement */
    atomic_fetch_add(&sim_busy_us, (long)sim_ms * 1000 * (long)n);
    atomic_fetch_add(&measured, (long)n);
    atomic_fetch_add(&run_calls, 1);
    for (size_t i = 0; i < n; i++) {
        const Ktune__V1__RunCandidate *c = in->candidates[i];
        uint64_t h = c->artifact.len ? kt_hash64(c->artifact.data, c->artifact.len) : 0;
        /* Analytic cost: 10 to 110 us, fixed by the artifact. */
        costs[i] = 1e-5 * (1 + (double)(h % 1000) / 100.0);
        ktune__v1__measure_result__init(&arr[i]);
        arr[i].candidate_id = c->candidate_id;
        arr[i].costs = &costs[i];
        arr[i].n_costs = 1;
        arr[i].all_cost = sim_ms * 1e-3;
        arr[i].timestamp = kt_time_wall();
        out->results[i] = &arr[i];
    }
    out->n_results = n;
    return KT_RPC_OK;
}

typedef struct {
    kt_rpc_server_t *srv;
    kt_peer_agent_t *agent;
} fake_t;

/* A fake peer: its server on 127.0.0.1 and its registration agent. */
static int fake_start(fake_t *f, const char *tracker, int runner)
{
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .threads = runner ? 1 : 8};
    if (!(f->srv = kt_rpc_server_new(&so)))
        return -1;
    int rc = runner ? kt_rpc_server_add_unary(f->srv, "/ktune.v1.Runner/Run",
                                              &ktune__v1__run_request__descriptor,
                                              &ktune__v1__run_response__descriptor, h_run, NULL)
                    : kt_rpc_server_add_unary(f->srv, "/ktune.v1.Worker/Build",
                                              &ktune__v1__build_request__descriptor,
                                              &ktune__v1__build_response__descriptor, h_build,
                                              NULL);
    if (rc != 0 || kt_rpc_server_start(f->srv) != 0)
        return -1;
    char *targets[] = {"cpu"};
    Ktune__V1__DeviceInfo dev = KTUNE__V1__DEVICE_INFO__INIT;
    dev.target = "cpu";
    dev.name = "simulated runner";
    dev.num_cores = 1;
    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    me.role = runner ? "runner" : "worker";
    me.address = (char *)kt_rpc_server_address(f->srv);
    me.key = "sim";
    me.device = runner ? &dev : NULL;
    me.capacity = runner ? 1 : 64;
    me.targets = runner ? NULL : targets;
    me.n_targets = runner ? 0 : 1;
    kt_peer_agent_opts_t ao = {.tracker = tracker, .self = &me};
    return (f->agent = kt_peer_agent_start(&ao)) ? 0 : -1;
}

static void fake_stop(fake_t *f)
{
    kt_peer_agent_stop(f->agent);
    kt_rpc_server_stop(f->srv, 0);
}

/* ---- One run ------------------------------------------------------------------------- */

typedef struct {
    double wall, busy;   /* seconds: the job, and the simulated runner time */
    long measured, calls;   /* candidates measured, Run RPCs */
    int rounds;
    double cpu;          /* the tracker's user + system seconds */
    double fake_cpu;     /* this process's (the fake peers') during the job */
    double phase[5];     /* mean ms per round: propose, make, build, run, commit */
} result_t;

/* Task i: matmul or dense, M 8..64, N and K 16 or 32 (32 distinct shapes). */
static void workload_json(int i, char *buf, size_t len)
{
    snprintf(buf, len, "{\"op\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d}",
             i & 1 ? "dense" : "matmul", 8 << ((i >> 1) & 3), 16 << ((i >> 3) & 1),
             16 << ((i >> 4) & 1));
}

/* Mean ms per round of each phase, from the tracker's debug lines
 * "... ms propose P make M build B run R commit C". */
static void phases(const char *log, double mean[5])
{
    char *text = kt_file_read(log, NULL);
    int n = 0;
    double sum[5] = {0};
    for (const char *p = text; p && (p = strstr(p, "; ms ")); p++) {
        p += 2;
        double v[5];
        if (sscanf(p, "ms propose %lf make %lf build %lf run %lf commit %lf", &v[0], &v[1],
                   &v[2], &v[3], &v[4]) == 5 ||
            sscanf(p, "ms wait-cpu %*f propose %lf make %lf build %lf run %lf commit %lf", &v[0],
                   &v[1], &v[2], &v[3], &v[4]) == 5) {
            for (int i = 0; i < 5; i++)
                sum[i] += v[i];
            n++;
        }
    }
    for (int i = 0; i < 5; i++)
        mean[i] = n ? sum[i] / n : 0;
    free(text);
}

static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* One run with `runners` fake runners; 0 with *out, or -1. */
static int run_once(int runners, int trials, result_t *out)
{
    char db[128], addr_file[128], log[160];
    snprintf(db, sizeof db, "%s/m%d-r%d.db", dir, mode_no, runners);
    snprintf(addr_file, sizeof addr_file, "%s/m%d-addr%d", dir, mode_no, runners);
    snprintf(log, sizeof log, "%s/m%d-tracker%d.log", dir, mode_no, runners);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--port-file",
                     addr_file, search_threads ? "--search-threads" : NULL,
                     (char *)search_threads, NULL};
    pid_t tracker = spawn("tracker/ktune-tracker", targs, log);
    char *addr = NULL;
    for (int i = 0; i < 3000 && !(addr = kt_file_read(addr_file, NULL)); i++)
        sleep_ms(10);
    if (!addr) {
        fprintf(stderr, "bench_tracker: the tracker did not start (%s)\n", log);
        kill(tracker, SIGKILL);
        waitpid(tracker, NULL, 0);
        return -1;
    }
    addr[strcspn(addr, "\n")] = '\0';
    fake_t *fakes = calloc((size_t)runners + 1, sizeof *fakes);
    int nf = 0, rc = -1;
    for (; fakes && nf <= runners; nf++)
        if (fake_start(&fakes[nf], addr, nf < runners) != 0) {
            fprintf(stderr, "bench_tracker: fake peer %d: %s\n", nf, kt_err_msg());
            nf++;
            goto out;
        }
    kt_rpc_client_t *c = kt_rpc_client_new(addr, NULL);
    int peers = 0;
    for (int i = 0; i < 600 && peers != runners + 1; i++) {
        Ktune__V1__QueueStatusRequest q = KTUNE__V1__QUEUE_STATUS_REQUEST__INIT;
        ProtobufCMessage *qs = NULL;
        if (kt_rpc_call_unary(c, "/ktune.v1.Tracker/QueueStatus", &q.base,
                              &ktune__v1__queue_status_response__descriptor, 5000, &qs,
                              NULL) == 0) {
            peers = (int)((Ktune__V1__QueueStatusResponse *)qs)->n_peers;
            protobuf_c_message_free_unpacked(qs, NULL);
        }
        if (peers != runners + 1)
            sleep_ms(100);
    }
    Ktune__V1__Workload wl[TASKS];
    Ktune__V1__Task task[TASKS], *tp[TASKS];
    char wl_json[TASKS][96];
    for (int i = 0; i < TASKS; i++) {
        ktune__v1__workload__init(&wl[i]);
        workload_json(i, wl_json[i], sizeof wl_json[i]);
        wl[i].json = wl_json[i];
        ktune__v1__task__init(&task[i]);
        task[i].workload = &wl[i];
        task[i].weight = 1;
        tp[i] = &task[i];
    }
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.number = 1;
    mo.repeat = 1;
    Ktune__V1__TuningOptions to = KTUNE__V1__TUNING_OPTIONS__INIT;
    to.num_measure_trials = trials;
    to.num_measures_per_round = PER_ROUND;
    to.measure = &mo;
    Ktune__V1__Job job = KTUNE__V1__JOB__INIT;
    job.tasks = tp;
    job.n_tasks = TASKS;
    job.runner_key = "sim";
    job.policy = (char *)(dispatch_only ? "sketch.random" : policy);
    to.search_params = (char *)(dispatch_only ? "" : search_params);
    job.strategy = "round-robin";
    job.options = &to;
    Ktune__V1__SubmitJobRequest req = KTUNE__V1__SUBMIT_JOB_REQUEST__INIT;
    req.job = &job;
    ProtobufCMessage *resp = NULL;
    atomic_store(&sim_busy_us, 0);
    atomic_store(&measured, 0);
    atomic_store(&run_calls, 0);
    double t0 = kt_time_mono(), cpu0 = self_cpu();
    if (peers != runners + 1) {
        fprintf(stderr, "bench_tracker: only %d of %d peers registered\n", peers, runners + 1);
    } else if (kt_rpc_call_unary(c, "/ktune.v1.Tracker/SubmitJob", &req.base,
                                 &ktune__v1__submit_job_response__descriptor, 30000, &resp,
                                 NULL) != 0) {
        fprintf(stderr, "bench_tracker: SubmitJob: %s\n", kt_err_msg());
    } else {
        Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
        ref.job_id = ((Ktune__V1__SubmitJobResponse *)resp)->job_id;
        protobuf_c_message_free_unpacked(resp, NULL);
        /* WatchJob sends one message per completed round. */
        kt_rpc_reader_t *rd = kt_rpc_reader_open(c, "/ktune.v1.Tracker/WatchJob", &ref.base,
                                                 &ktune__v1__job_progress__descriptor, 600000);
        ProtobufCMessage *msg = NULL;
        char state[32] = "";
        int n = 0;
        while (rd && kt_rpc_reader_next(rd, &msg) == 1) {
            snprintf(state, sizeof state, "%s", ((Ktune__V1__JobProgress *)msg)->state);
            protobuf_c_message_free_unpacked(msg, NULL);
            n++;
        }
        out->wall = kt_time_mono() - t0;
        out->fake_cpu = self_cpu() - cpu0;
        if (rd)
            kt_rpc_reader_close(rd, NULL);
        if (strcmp(state, "done") != 0) {
            fprintf(stderr, "bench_tracker: job ended %s\n", *state ? state : "unwatched");
        } else {
            out->busy = (double)atomic_load(&sim_busy_us) * 1e-6;
            out->measured = atomic_load(&measured);
            out->calls = atomic_load(&run_calls);
            out->rounds = n > 1 ? n - 1 : 1;   /* less the final state message */
            rc = 0;
        }
    }
    kt_rpc_client_free(c);
out:
    for (int i = 0; i < nf; i++)
        fake_stop(&fakes[i]);
    kill(tracker, SIGTERM);
    struct rusage ru;
    if (wait4(tracker, NULL, 0, &ru) == tracker)
        out->cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                   (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    phases(log, out->phase);
    free(fakes);
    free(addr);
    return rc;
}

/* One thread of the spin probe: busy for `SPIN_S` of wall time, its own CPU
 * time into *arg. */
#define SPIN_S 1.0
static void *spin_thread(void *arg)
{
    double *cpu = arg, t0 = kt_time_mono();
    while (kt_time_mono() - t0 < SPIN_S)
        ;
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    *cpu = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return NULL;
}

/* The cores a 2-thread spin loop gets now: what the machine gives this
 * session (other sessions share it), the ceiling of --search-threads 2
 * whatever the tracker does. Printed around the search modes so that a low
 * x2 / x1 can be told apart from a busy machine. */
static double spin_cores(void)
{
    pthread_t th[2];
    double cpu[2] = {0, 0};
    int started = 0;
    for (int i = 0; i < 2; i++)
        started += pthread_create(&th[i], NULL, spin_thread, &cpu[i]) == 0;
    if (started < 2)
        spin_thread(&cpu[1]);   /* the probe still measures one spinning thread */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return (cpu[0] + cpu[1]) / SPIN_S;
}

int main(int argc, char **argv)
{
    int max_runners = MAX_RUNNERS;
    if (argc > 1)
        sim_ms = atoi(argv[1]);
    if (argc > 2)
        max_runners = atoi(argv[2]);
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: bench_tracker [sim_ms_per_candidate [max_runners]]   (default 100 %d)\n"
               "A real ktune-tracker with simulated peers (fake runners sleep sim_ms per\n"
               "candidate and answer analytic costs). Modes (KT_BENCH_MODES, comma-separated;\n"
               "default all three, one process per mode is safest):\n"
               "  dispatch   search and code generation stubbed: dispatch, commit and\n"
               "             bookkeeping alone (goal >= 5,000 measurements/s at 256 runners)\n"
               "  search x1  the real search (%s, %s)\n"
               "  search x2  the same at --search-threads 1 and 2; x2/x1 printed when both run\n"
               "             (a 2-thread spin loop before each search mode and after them\n"
               "             prints the cores this process gets: the machine's limit)\n"
               "Figures as in docs/benchmarks.md:\n"
               "  KT_BENCH_MODES=dispatch build/bench/bench_tracker 10\n"
               "  KT_BENCH_MODES=\"search x1,search x2\" build/bench/bench_tracker 10 256\n"
               "KT_BENCH_POLICY=sketch.random, KT_BENCH_SEARCH=LIST (search_params),\n"
               "KT_BENCH_TRACKER=PATH (another tracker), KT_BENCH_KEEP=1 (keep stores, logs).\n",
               MAX_RUNNERS, policy, search_params);
        return 0;
    }
    if (sim_ms < 0 || max_runners < 1 || max_runners > MAX_RUNNERS) {
        fprintf(stderr, "usage: bench_tracker [sim_ms_per_candidate >= 0 [max_runners 1..%d]]"
                " (--help)\n", MAX_RUNNERS);
        return 2;
    }
    const char *env = getenv("KT_BENCH_POLICY");
    if (env && *env)
        policy = env;
    if ((env = getenv("KT_BENCH_SEARCH")))
        search_params = env;
    kt_log_set_level(KT_LOG_WARN);
    ssize_t n = readlink("/proc/self/exe", bin_dir, sizeof bin_dir - 1);
    if (n <= 0)
        return 1;
    bin_dir[n] = '\0';
    *strrchr(bin_dir, '/') = '\0';
    snprintf(dir, sizeof dir, "/tmp/kt_bench_tracker_XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    printf("SIMULATION: tracker dispatch with in-process fake runners (analytic costs, %d ms of\n"
           "simulated measurement per candidate) and a fake worker (no compiles); a real\n"
           "ktune-tracker: %d tasks, rounds of %d, round-robin; search modes: %s (%s)\n",
           sim_ms, TASKS, PER_ROUND, policy, *search_params ? search_params : "defaults");
    /* dispatch: the search and code generation stubbed (placeholder
     * candidates), what the tracker's dispatch alone sustains; search x1 /
     * x2: the real search and code generation at --search-threads 1 and 2. */
    static const struct {
        const char *name, *threads;
        int stub;
    } modes[] = {{"dispatch", NULL, 1}, {"search x1", "1", 0}, {"search x2", "2", 0}};
    const char *only = getenv("KT_BENCH_MODES");   /* e.g. "dispatch" or "search x2" */
    static const int counts[] = {1, 8, 64, 256, MAX_RUNNERS};
    enum { NCOUNTS = sizeof counts / sizeof counts[0] };
    double tput_of[3][NCOUNTS] = {{0}};   /* per mode and runner count */
    int rc = 0;
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0] && rc == 0; mi++) {
        if (only && *only && !strstr(only, modes[mi].name))
            continue;
        if (!modes[mi].stub)
            printf("\n2-thread spin loop before %s: %.2f cores of 2\n", modes[mi].name,
                   spin_cores());
        search_threads = modes[mi].threads;
        mode_no = (int)mi;
        dispatch_only = modes[mi].stub;
        printf("\n%s%s%s\n", modes[mi].name,
               modes[mi].stub ? " (search and code generation stubbed)" : ", --search-threads ",
               modes[mi].stub ? "" : modes[mi].threads);
        printf("%7s %6s %8s %7s %10s %9s %6s %8s %7s %6s | %s\n", "runners", "trials",
               "wall (s)", "meas/s", "added ms/r", "effic.", "cpu s", "cpu ms/m", "fakes s",
               "c/Run",
               "ms per round: propose make build run commit");
        double base = 0;
        for (size_t i = 0; i < sizeof counts / sizeof counts[0] && counts[i] <= max_runners; i++) {
            int r = counts[i];
            int trials = r * PER_ROUND > 8192 ? 8192 : r * PER_ROUND;
            result_t res = {0};
            if (run_once(r, trials, &res) != 0) {
                rc = 1;
                break;
            }
            double tput = res.measured / res.wall;
            tput_of[mi][i] = tput;
            if (r == 1)
                base = tput;
            /* Beyond the simulated runner time spread over the runners. */
            double added = (res.wall - res.busy / r) / res.rounds * 1e3;
            printf("%7d %6d %8.2f %7.1f %10.1f %8.1f%% %6.2f %8.2f %7.2f %6.1f | %.0f %.0f %.0f "
                   "%.0f %.0f\n",
                   r, trials, res.wall, tput, added, 100.0 * tput / (r * base), res.cpu,
                   res.measured ? res.cpu * 1e3 / res.measured : 0, res.fake_cpu,
                   res.calls ? (double)res.measured / res.calls : 0, res.phase[0], res.phase[1],
                   res.phase[2], res.phase[3], res.phase[4]);
            fflush(stdout);
        }
    }
    if (tput_of[1][0] > 0 || tput_of[2][0] > 0)
        printf("\n2-thread spin loop after the search modes: %.2f cores of 2\n", spin_cores());
    /* The search-threads goal: search x2 over search x1, measured in this run. */
    for (int i = 0; i < NCOUNTS; i++)
        if (tput_of[1][i] > 0 && tput_of[2][i] > 0)
            printf("%s at %d runners: --search-threads 2 / 1 = %.2fx (goal >= 1.7x)\n",
                   i == 0 ? "\nsearch" : "search", counts[i], tput_of[2][i] / tput_of[1][i]);
    /* KT_BENCH_KEEP=1 keeps the stores and the tracker logs for a look. */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KT_BENCH_KEEP"))
        printf("kept %s\n", dir);
    else if (system(cmd) != 0)
        rc = 1;
    return rc;
}
