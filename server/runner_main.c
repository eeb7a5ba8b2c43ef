/* ktune-runner: times candidates on one device for the tracker. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "measure/measure.h"
#include "measure/cuda_runner.h"
#include "measure/hw_params.h"
#include "measure/hw_params_json.h"
#include "measure/runner.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

/* A running batch gets this long to finish after SIGINT/SIGTERM. */
#define DEFAULT_DRAIN_MS 60000
/* Most candidates one Run request may carry. */
#define MAX_CANDIDATES 4096

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-runner [options]\n"
            "\n"
            "The ktune runner: times candidates on one device for a tracker. Each batch runs\n"
            "in a child process, so a crashing or hanging kernel never takes the runner down.\n"
            "Runs until SIGINT or SIGTERM, which stop new calls and let the running batch\n"
            "finish (see --drain-ms) before the runner exits.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT  register with this tracker and heartbeat (default: none,\n"
            "                       serve Run calls only)\n"
            "  --key KEY            device key to register under (default: cpu)\n"
            "  --device DEV         cpu (default) or cuda:N\n"
            "  --listen ADDR        gRPC address to serve (default 127.0.0.1:0, a free port;\n"
            "                       use 0.0.0.0:PORT for a tracker on another host)\n"
            "  --advertise ADDR     address the tracker should dial (default: the bound\n"
            "                       address; a wildcard host becomes the local address that\n"
            "                       routes to the tracker, 127.0.0.1 for a local tracker)\n"
            "  --threads N          OpenMP threads per kernel when a request sets none\n"
            "                       (default: the number of --cpus, else OpenMP's default)\n"
            "  --cpus LIST          pin timed children to these cores (\"0-3,6\")\n"
            "  --timer wall|cpu     time runs by elapsed time (default, as TVM) or by the\n"
            "                       CPU time of the timed child, which leaves out time it\n"
            "                       was preempted on a shared host; cpu implies --threads 1\n"
            "  --drain-ms N         on SIGTERM, time the running batch may take (default %d)\n"
            "  --token-file F       shared token required from every caller and sent to the\n"
            "                       tracker (first line of F; default: $KT_TOKEN_FILE)\n"
            "  --tls-cert F         server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F          server private key (PEM)\n"
            "  --tls-ca F           CA (PEM) to verify a tracker served over TLS\n"
            "  --version            print the version and exit\n"
            "  -h, --help           print this help and exit\n"
            "\n"
            "A Run request's MeasureOptions are taken as given (min_repeat_ms 0 is off,\n"
            "check_correctness false skips the check); zero number, repeat and timeout_ms\n"
            "mean 3, 1 and 10 s. Without MeasureOptions the local runner's defaults apply.\n",
            DEFAULT_DRAIN_MS);
}

/* ---- The device ----------------------------------------------------------------------- */

/* ---- Run ------------------------------------------------------------------------------ */

typedef struct {
    pthread_mutex_t run_mu;   /* one batch at a time: concurrent timings would disturb each other */
    atomic_int in_flight;     /* batches running or waiting for run_mu */
    int threads;              /* default OpenMP threads; 0 = leave OpenMP's default */
    const char *cpus;
    int cuda_device;          /* --device cuda:N: its ordinal; -1 for the CPU */
    int timer;                /* KT_RUNNER_TIMER_*; CPU only with one thread */
} runner_ctx_t;

static int in_flight(void *user)
{
    return atomic_load(&((runner_ctx_t *)user)->in_flight);
}

/* Options for one request; INVALID_ARGUMENT text in *why when they are bad. */
static int run_options(const runner_ctx_t *x, const Ktune__V1__RunRequest *in, kt_runner_opts_t *o,
                       const char **why)
{
    kt_runner_opts_default(o);
    o->num_threads = x->threads;
    o->cpu_list = x->cpus;
    o->seed = in->seed;
    o->timer = x->timer;
    const Ktune__V1__MeasureOptions *m = in->options;
    if (!m)
        return 0;
    if (m->number < 0 || m->repeat < 0 || m->min_repeat_ms < 0 || m->cooldown_interval < 0 ||
        m->timeout_ms < 0 || m->num_threads < 0) {
        *why = "negative MeasureOptions value";
        return KT_EINVAL;
    }
    o->number = m->number;
    o->repeat = m->repeat;
    o->min_repeat_ms = m->min_repeat_ms;
    o->cooldown_interval = m->cooldown_interval;
    o->enable_cpu_cache_flush = m->enable_cpu_cache_flush;
    o->timeout = m->timeout_ms / 1000.0;
    o->check_correctness = m->check_correctness;
    if (m->num_threads)
        o->num_threads = m->num_threads;
    if (x->timer == KT_RUNNER_TIMER_CPU && o->num_threads != 1) {
        *why = "this runner times by CPU time (--timer cpu) and runs kernels with one thread";
        return KT_EINVAL;
    }
    return 0;
}

static uint64_t parse_hash(const char *s)
{
    if (!s || strlen(s) != 16)
        return 0;   /* the runner computes it */
    char *end;
    uint64_t h = strtoull(s, &end, 16);
    return *end ? 0 : h;
}

/* Why a candidate cannot be run at all, or NULL when it can. launches
 * (KT_RUNNER_MAX_LAUNCHES entries) holds a multi-kernel candidate's list. */
static const char *candidate_problem(const Ktune__V1__RunCandidate *c, int cuda,
                                     kt_run_input_t *in, kt_cuda_launch_t *launches)
{
    memset(in, 0, sizeof *in);
    in->target = cuda ? KT_MEASURE_TARGET_CUDA : KT_MEASURE_TARGET_CPU;
    if (cuda && c->n_launch_names > 0) {
        /* Several kernels: 7 values each (grid x y z, block x y z, shared bytes). */
        if (c->n_launch_names > KT_RUNNER_MAX_LAUNCHES)
            return "too many launches (at most 16)";
        if (c->n_launch_dims != 7 * c->n_launch_names)
            return "launch_dims must hold 7 values per launch name";
        for (size_t l = 0; l < c->n_launch_names; l++) {
            const int32_t *d = c->launch_dims + 7 * l;
            if (!c->launch_names[l] || !*c->launch_names[l])
                return "a launch has no kernel name";
            for (int i = 0; i < 7; i++)
                if (d[i] < (i < 6 ? 1 : 0))
                    return "launch_dims must be positive";
            launches[l] = (kt_cuda_launch_t){
                .name = c->launch_names[l],
                .grid = {(unsigned)d[0], (unsigned)d[1], (unsigned)d[2]},
                .block = {(unsigned)d[3], (unsigned)d[4], (unsigned)d[5]},
                .shared_bytes = (unsigned)d[6]};
        }
        in->launches = launches;
        in->n_launches = (int)c->n_launch_names;
    } else if (cuda) {
        /* grid x, y, z, block x, y, z [, dynamic shared bytes] */
        if (c->n_launch_dims != 6 && c->n_launch_dims != 7)
            return "a cuda candidate needs launch_dims: grid x y z, block x y z [, shared bytes]";
        for (size_t i = 0; i < c->n_launch_dims; i++)
            if (c->launch_dims[i] < (i < 6 ? 1 : 0))
                return "launch_dims must be positive";
        for (int i = 0; i < 3; i++) {
            in->launch.grid[i] = (unsigned)c->launch_dims[i];
            in->launch.block[i] = (unsigned)c->launch_dims[3 + i];
        }
        in->launch.shared_bytes = c->n_launch_dims == 7 ? (unsigned)c->launch_dims[6] : 0;
    }
    if (cuda) {
        if (c->workspace_bytes < 0 || c->workspace_bytes > ((int64_t)1 << 40))
            return "workspace_bytes out of range";
        in->workspace_bytes = (size_t)c->workspace_bytes;
    }
    if (!c->artifact.data || c->artifact.len == 0)
        return "no artifact";
    if (!c->entry || !*c->entry)
        return "no entry point";
    if (c->n_buf_elems < 1 || c->n_buf_elems > KT_MEASURE_MAX_BUFS)
        return "buf_elems must list 1 to 32 buffers";
    if (c->num_outputs < 1 || (size_t)c->num_outputs > c->n_buf_elems)
        return "num_outputs must be between 1 and the number of buffers";
    in->layout.num_bufs = (int)c->n_buf_elems;
    in->layout.num_outputs = c->num_outputs;
    for (size_t i = 0; i < c->n_buf_elems; i++)
        in->layout.num_elems[i] = c->buf_elems[i];
    if (kt_buf_layout_check(&in->layout) != 0)
        return kt_err_msg();
    in->prog = (kt_artifact_t){.data = c->artifact.data, .len = c->artifact.len,
                               .hash = parse_hash(c->artifact_hash), .entry = c->entry};
    if (c->reference.data && c->reference.len > 0) {
        if (!c->reference_entry || !*c->reference_entry)
            return "a reference artifact needs reference_entry";
        in->ref = (kt_artifact_t){.data = c->reference.data, .len = c->reference.len,
                                  .hash = parse_hash(c->reference_hash),
                                  .entry = c->reference_entry};
    }
    return NULL;
}

static int fill_result(kt_rpc_call_t *call, uint64_t id, const kt_measure_result_t *r,
                       Ktune__V1__MeasureResult *o)
{
    ktune__v1__measure_result__init(o);
    o->candidate_id = id;
    o->error_code = (Ktune__V1__MeasureError)r->error_no;
    o->all_cost = r->all_cost;
    o->timestamp = r->timestamp;
    if (r->n_costs > 0) {
        if (!(o->costs = kt_rpc_call_alloc(call, (size_t)r->n_costs * sizeof *o->costs)))
            return KT_ENOMEM;
        memcpy(o->costs, r->costs, (size_t)r->n_costs * sizeof *o->costs);
        o->n_costs = (size_t)r->n_costs;
    }
    if (r->error_msg && !(o->error_msg = kt_rpc_call_strdup(call, r->error_msg)))
        return KT_ENOMEM;
    return 0;
}

static int run_batch(kt_rpc_call_t *call, runner_ctx_t *x, const Ktune__V1__RunRequest *in,
                     Ktune__V1__RunResponse *out)
{
    const char *mine = x->cuda_device >= 0 ? "cuda" : "cpu";
    if (in->target && *in->target && strcmp(in->target, mine) != 0)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT,
                                "this runner times %s candidates, not '%s'", mine, in->target);
    if (in->n_candidates > MAX_CANDIDATES)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT,
                                "%zu candidates in one request; at most %d", in->n_candidates,
                                MAX_CANDIDATES);
    kt_runner_opts_t ro;
    const char *why = NULL;
    if (run_options(x, in, &ro, &why) != 0)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "%s", why);
    int n = (int)in->n_candidates;
    if (n == 0)
        return KT_RPC_OK;
    kt_run_input_t *inputs = calloc((size_t)n, sizeof *inputs);
    kt_measure_result_t *ran = calloc((size_t)n, sizeof *ran);   /* runnable ones, in order */
    kt_measure_result_t *all = calloc((size_t)n, sizeof *all);   /* one per candidate */
    int *which = calloc((size_t)n, sizeof *which);               /* runnable -> candidate */
    kt_cuda_launch_t *launches = calloc((size_t)n * KT_RUNNER_MAX_LAUNCHES, sizeof *launches);
    Ktune__V1__MeasureResult *arr = kt_rpc_call_alloc(call, (size_t)n * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (size_t)n * sizeof *out->results);
    int rc = 0, runnable = 0;
    if (!inputs || !ran || !all || !which || !launches || !arr || !out->results) {
        rc = kt_err_set(KT_ENOMEM, "Run: out of memory");
        goto done;
    }
    /* A malformed candidate is its own INSTANTIATION_ERROR; the rest still run. */
    for (int i = 0; i < n; i++) {
        const char *problem =
            candidate_problem(in->candidates[i], x->cuda_device >= 0, &inputs[runnable],
                              launches + (size_t)runnable * KT_RUNNER_MAX_LAUNCHES);
        if (problem) {
            kt_measure_result_set_error(&all[i], KT_MEASURE_INSTANTIATION_ERROR, "%s", problem);
            all[i].timestamp = kt_time_wall();
        } else {
            which[runnable++] = i;
        }
    }
    if (runnable) {
        /* A CUDA runner probes its device in a child, so this process never
         * initialises CUDA and a faulting kernel cannot poison it. */
        kt_cuda_runner_t *gpu = NULL;
        kt_runner_t *runner = NULL;
        if (x->cuda_device >= 0) {
            kt_cuda_runner_opts_t co;
            kt_cuda_runner_opts_default(&co);
            co.run = ro;
            co.run.enable_cpu_cache_flush = 0;
            co.device = x->cuda_device;
            if ((gpu = kt_cuda_runner_new(&co)))
                runner = kt_cuda_runner_runner(gpu);
        } else {
            runner = kt_runner_new(&ro);
        }
        if (!runner) {
            rc = kt_rpc_call_fail(call, x->cuda_device >= 0 ? KT_RPC_UNAVAILABLE
                                                            : KT_RPC_INVALID_ARGUMENT,
                                  "%s", kt_err_msg());
            kt_cuda_runner_free(gpu);
            goto done;
        }
        rc = kt_runner_run(runner, inputs, runnable, ran);
        if (gpu)
            kt_cuda_runner_free(gpu);
        else
            kt_runner_free(runner);
        if (rc != 0) {
            kt_err_prefix("Run");
            goto done;
        }
        for (int k = 0; k < runnable; k++) {   /* move, not copy */
            all[which[k]] = ran[k];
            memset(&ran[k], 0, sizeof ran[k]);
        }
    }
    int errors = 0;
    for (int i = 0; i < n; i++) {
        out->results[i] = &arr[i];
        if (fill_result(call, in->candidates[i]->candidate_id, &all[i], &arr[i]) != 0) {
            rc = kt_err_set(KT_ENOMEM, "Run: out of memory");
            goto done;
        }
        errors += all[i].error_no != KT_MEASURE_NO_ERROR;
    }
    out->n_results = (size_t)n;
    KT_INFO("run: batch of %d done, %d error%s", n, errors, errors == 1 ? "" : "s");
done:
    for (int i = 0; i < n; i++) {
        if (ran)
            kt_measure_result_clear(&ran[i]);
        if (all)
            kt_measure_result_clear(&all[i]);
    }
    free(ran);
    free(all);
    free(inputs);
    free(which);
    free(launches);
    return rc;
}

static int h_run(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                 void *ud)
{
    runner_ctx_t *x = ud;
    const Ktune__V1__RunRequest *in = (const Ktune__V1__RunRequest *)req;
    atomic_fetch_add(&x->in_flight, 1);
    pthread_mutex_lock(&x->run_mu);
    int rc;
    if (kt_rpc_call_cancelled(call)) {
        rc = kt_rpc_call_fail(call, KT_RPC_CANCELLED, "the call ended before its batch started");
    } else {
        KT_INFO("run: batch of %zu candidate%s from %s", in->n_candidates,
                in->n_candidates == 1 ? "" : "s", kt_rpc_call_peer(call));
        rc = run_batch(call, x, in, (Ktune__V1__RunResponse *)resp);
    }
    pthread_mutex_unlock(&x->run_mu);
    atomic_fetch_sub(&x->in_flight, 1);
    return rc;
}

/* ---- Drain watchdog --------------------------------------------------------------------- */

static int g_drain_ms;

/* A batch that outlives the drain deadline is abandoned: the process exits
 * and its timing child dies with its parent thread. */
static void *drain_watchdog(void *arg)
{
    (void)arg;
    struct timespec ts = {.tv_sec = g_drain_ms / 1000 + 5, .tv_nsec = 0};
    while (nanosleep(&ts, &ts) != 0)
        ;
    KT_ERROR("the running batch did not finish within the drain time; exiting without it");
    _exit(1);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* The runner's own options. */
typedef struct {
    const char *dev_key, *device, *cpus;
    int timer;                /* KT_RUNNER_TIMER_* */
    long threads, drain_ms;
} runner_args_t;

static int runner_option(void *user, int c, const char *arg)
{
    runner_args_t *a = user;
    char *end;
    switch (c) {
    case 'K': a->dev_key = arg; return 0;
    case 'D': a->device = arg; return 0;
    case 'P': a->cpus = arg; return 0;
    case 'm':
        if ((a->timer = kt_runner_timer_parse(arg)) < 0) {
            fprintf(stderr, "ktune-runner: --timer is wall or cpu, not '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'n':
        a->threads = strtol(arg, &end, 10);
        if (*end || a->threads < 1 || a->threads > 4096) {
            fprintf(stderr, "ktune-runner: --threads wants 1..4096, got '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'd':
        a->drain_ms = strtol(arg, &end, 10);
        if (*end || a->drain_ms < 0 || a->drain_ms > 3600000) {
            fprintf(stderr, "ktune-runner: --drain-ms wants 0..3600000, got '%s'\n", arg);
            return 2;
        }
        return 0;
    default: usage(stderr); return 2;
    }
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-runner: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {
        {"key", required_argument, 0, 'K'},      {"device", required_argument, 0, 'D'},
        {"threads", required_argument, 0, 'n'},  {"cpus", required_argument, 0, 'P'},
        {"drain-ms", required_argument, 0, 'd'}, {"timer", required_argument, 0, 'm'},
        {0, 0, 0, 0}};
    runner_args_t a = {.dev_key = "cpu", .device = "cpu", .timer = KT_RUNNER_TIMER_WALL,
                       .drain_ms = DEFAULT_DRAIN_MS};
    kt_peer_cmdline_t cl;
    int exit_code = kt_peer_cmdline_parse(&cl, "ktune-runner", argc, argv, opts, runner_option,
                                          &a, usage);
    if (exit_code >= 0)
        return exit_code;
    const char *dev_key = a.dev_key, *device = a.device, *cpus = a.cpus;
    long threads = a.threads, drain_ms = a.drain_ms;
    int cuda_ordinal = -1;      /* --device cuda:N */
    kt_hw_params_t cuda_hw;
    if (strncmp(device, "cuda:", 5) == 0) {
        char *end;
        long ordinal = strtol(device + 5, &end, 10);
        if (*end || end == device + 5 || ordinal < 0) {
            fprintf(stderr, "ktune-runner: --device is cpu or cuda:N, not '%s'\n", device);
            return 2;
        }
        /* Fail at start-up, not at the first batch: no driver, no device or
         * a bad ordinal is said here (the probe runs in a child). */
        if (kt_cuda_device_probe((int)ordinal, NULL, 0, &cuda_hw) != 0) {
            fprintf(stderr, "ktune-runner: --device %s: %s\n", device, kt_err_msg());
            return 1;
        }
        cuda_ordinal = (int)ordinal;
    }
    /* The tracker refuses other keys; say so now rather than retry forever. */
    if (!kt_registry_key_ok(dev_key)) {
        fprintf(stderr, "ktune-runner: --key wants letters, digits and ._:- (under %d bytes), "
                "not '%s'\n", KT_REGISTRY_KEY_MAX, dev_key);
        return 2;
    }
    if (cuda_ordinal < 0 && strcmp(device, "cpu") != 0) {
        fprintf(stderr, "ktune-runner: --device is cpu or cuda:N, not '%s'\n", device);
        return 2;
    }
    int cores = cpus ? kt_cpu_list_parse(cpus, NULL) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus && cores <= 0) {
        fprintf(stderr, "ktune-runner: --cpus wants a list like 0-3,6, not '%s'\n", cpus);
        return 2;
    }
    static runner_ctx_t x;
    pthread_mutex_init(&x.run_mu, NULL);
    x.threads = threads ? (int)threads : (cpus ? cores : 0);
    x.timer = a.timer;
    if (x.timer == KT_RUNNER_TIMER_CPU) {
        if (cuda_ordinal >= 0) {
            fprintf(stderr, "ktune-runner: --timer cpu times CPU kernels; a GPU is timed by its events\n");
            return 2;
        }
        if (threads > 1) {
            fprintf(stderr, "ktune-runner: --timer cpu needs --threads 1 (the CPU time of several "
                            "threads adds up)\n");
            return 2;
        }
        x.threads = 1;
    }
    x.cpus = cpus;
    x.cuda_device = cuda_ordinal;
    kt_peer_service_t svc = {.health_service = "Runner",
                             .role = "runner",
                             .method = "/ktune.v1.Runner/Run",
                             .req_desc = &ktune__v1__run_request__descriptor,
                             .resp_desc = &ktune__v1__run_response__descriptor,
                             .fn = h_run,
                             .user = &x};
    kt_peer_daemon_t *d = kt_peer_daemon_start(&cl, &svc);
    if (!d) {
        KT_ERROR("%s", kt_err_msg());
        return 1;
    }
    KT_INFO("ktune-runner %s listening on %s (%s%s), device %s", KT_VERSION,
            kt_peer_daemon_address(d), cl.tls_cert ? "TLS" : "plaintext",
            kt_peer_daemon_has_token(d) ? ", token required" : "", device);
    if (cl.tracker) {
        /* The device as the search sees it: the probed GPU, or the host CPU
         * with --cpus narrowing the cores. */
        kt_hw_params_t hw;
        if (cuda_ordinal >= 0) {
            hw = cuda_hw;
        } else {
            kt_hw_params_local_cpu(&hw);
            hw.num_cores = cores;
        }
        Ktune__V1__DeviceInfo dev;
        kt_hw_params_to_proto(&hw, &dev);
        Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
        me.key = (char *)dev_key;
        me.device = &dev;
        me.capacity = 1;
        const char *addr = NULL;
        if (kt_peer_daemon_register(d, &me, in_flight, &x, &addr) != 0) {
            KT_ERROR("%s", kt_err_msg());
            kt_peer_daemon_stop(d, 0);
            return 1;
        }
        KT_INFO("registering with tracker %s as key %s at %s (%s, %s, %d cores)", cl.tracker,
                dev_key, addr, hw.name, hw.arch, cores);
    }
    int sig = kt_peer_daemon_wait(d);
    KT_INFO("%s: draining (no new calls; a running batch gets %ld ms)",
            sig == SIGINT ? "SIGINT" : "SIGTERM", drain_ms);
    g_drain_ms = (int)drain_ms;
    pthread_t wd;
    if (pthread_create(&wd, NULL, drain_watchdog, NULL) == 0)
        pthread_detach(wd);
    kt_peer_daemon_stop(d, (int)drain_ms);
    KT_INFO("stopped");
    return 0;
}
