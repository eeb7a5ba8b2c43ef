/* The Runner service: Runner/Run requests timed on this process's device; see run_service.h. */
#include "measure/run_service.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "measure/cuda_runner.h"
#include "measure/measure.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

struct kt_run_service {
    pthread_mutex_t run_mu;   /* one batch at a time: concurrent timings would disturb each other */
    atomic_int in_flight;     /* batches running or waiting for run_mu */
    int threads;              /* default OpenMP threads; 0 = leave OpenMP's default */
    char *cpus;               /* owned copy, or NULL */
    int cuda_device;          /* its ordinal; -1 for the CPU */
    int timer;                /* KT_RUNNER_TIMER_*; CPU only with one thread */
};

kt_run_service_t *kt_run_service_new(const kt_run_service_opts_t *o)
{
    if (!o) {
        kt_err_set(KT_EINVAL, "run service: no options");
        return NULL;
    }
    if (o->timer == KT_RUNNER_TIMER_CPU && (o->cuda_device >= 0 || o->threads != 1)) {
        kt_err_set(KT_EINVAL, "run service: CPU-time timing is for CPU kernels on one thread");
        return NULL;
    }
    if (o->cpus && kt_cpu_list_parse(o->cpus, NULL) < 0) {
        kt_err_prefix("run service");
        return NULL;
    }
    kt_run_service_t *x = calloc(1, sizeof *x);
    if (!x || (o->cpus && !(x->cpus = kt_strdup(o->cpus)))) {
        free(x);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&x->run_mu, NULL);
    x->threads = o->threads;
    x->cuda_device = o->cuda_device;
    x->timer = o->timer;
    return x;
}

void kt_run_service_free(kt_run_service_t *x)
{
    if (!x)
        return;
    pthread_mutex_destroy(&x->run_mu);
    free(x->cpus);
    free(x);
}

int kt_run_service_parse_device(const char *device, int *ordinal)
{
    if (device && strcmp(device, "cpu") == 0) {
        *ordinal = -1;
        return 0;
    }
    if (!device || strncmp(device, "cuda:", 5) != 0)
        return kt_err_set(KT_EINVAL, "device is cpu or cuda:N, not '%s'", device ? device : "");
    char *end;
    long n = strtol(device + 5, &end, 10);
    if (*end || end == device + 5 || n < 0 || n > 1000000)
        return kt_err_set(KT_EINVAL, "device is cpu or cuda:N, not '%s'", device);
    *ordinal = (int)n;
    return 0;
}

int kt_run_service_device_params(int ordinal, int cores, kt_hw_params_t *hw)
{
    if (ordinal >= 0)
        return kt_cuda_device_probe(ordinal, NULL, 0, hw);
    kt_hw_params_local_cpu(hw);
    if (cores > 0)
        hw->num_cores = cores;
    return 0;
}

int kt_run_service_in_flight(void *svc)
{
    return atomic_load(&((kt_run_service_t *)svc)->in_flight);
}

int kt_run_service_check_options(const Ktune__V1__MeasureOptions *m)
{
    if (!m)
        return 0;
    const struct {
        const char *name;
        int64_t v, hi;
    } f[] = {
        {"number", m->number, KT_LIMIT_MEASURE_NUMBER},
        {"repeat", m->repeat, KT_LIMIT_MEASURE_REPEAT},
        {"min_repeat_ms", m->min_repeat_ms, KT_LIMIT_MEASURE_MIN_REPEAT_MS},
        {"timeout_ms", m->timeout_ms, KT_LIMIT_MEASURE_TIMEOUT_MS},
        {"num_threads", m->num_threads, KT_LIMIT_MEASURE_THREADS},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(f); i++)
        if (f[i].v < 0 || f[i].v > f[i].hi)
            return kt_err_set(KT_EINVAL, "measure options: %s %lld is outside 0..%lld",
                              f[i].name, (long long)f[i].v, (long long)f[i].hi);
    if (!(m->cooldown_interval >= 0 && m->cooldown_interval <= KT_LIMIT_MEASURE_COOLDOWN_S))
        return kt_err_set(KT_EINVAL, "measure options: cooldown_interval %g is outside 0..%g s",
                          m->cooldown_interval, KT_LIMIT_MEASURE_COOLDOWN_S);
    return 0;
}

/* Options for one request; INVALID_ARGUMENT text in *why when they are bad
 * (NULL when kt_err says it). */
static int run_options(const kt_run_service_t *x, const Ktune__V1__RunRequest *in, kt_runner_opts_t *o,
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
    if (kt_run_service_check_options(m) != 0) {
        *why = NULL;   /* said in kt_err already */
        return KT_EINVAL;
    }
    o->number = m->number;
    o->repeat = m->repeat;
    o->min_repeat_ms = m->min_repeat_ms;
    o->cooldown_interval = m->cooldown_interval;
    o->enable_cpu_cache_flush = m->enable_cpu_cache_flush;
    o->flush_weights = m->flush_weights;
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
    in->layout.weights = c->weight_bufs;
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

/* The request-level checks: KT_EINVAL (INVALID_ARGUMENT) or KT_ELIMIT
 * (RESOURCE_EXHAUSTED) with the status text, or 0 with the runner options in *ro. */
static int check_request(const kt_run_service_t *x, const Ktune__V1__RunRequest *in,
                         kt_runner_opts_t *ro)
{
    const char *mine = x->cuda_device >= 0 ? "cuda" : "cpu";
    if (in->target && *in->target && strcmp(in->target, mine) != 0)
        return kt_err_set(KT_EINVAL, "this runner times %s candidates, not '%s'", mine,
                          in->target);
    if (in->n_candidates > KT_RUN_SERVICE_MAX_CANDIDATES)
        return kt_err_set(KT_ELIMIT, "%zu candidates in one request; at most %d (KT_LIMIT_CANDIDATES)",
                          in->n_candidates, KT_RUN_SERVICE_MAX_CANDIDATES);
    /* An artifact past the cap refuses the whole request: the peer that
     * built it is broken, and timing its other candidates would hide that. */
    for (size_t i = 0; i < in->n_candidates; i++) {
        const Ktune__V1__RunCandidate *c = in->candidates[i];
        size_t len = c ? (c->artifact.len > c->reference.len ? c->artifact.len : c->reference.len) : 0;
        if (len > KT_LIMIT_ARTIFACT_BYTES)
            return kt_err_set(KT_ELIMIT,
                              "candidate %zu: artifact of %zu bytes; at most %zu (KT_LIMIT_ARTIFACT_BYTES)",
                              i, len, KT_LIMIT_ARTIFACT_BYTES);
    }
    const char *why = NULL;
    if (run_options(x, in, ro, &why) != 0)
        return why ? kt_err_set(KT_EINVAL, "%s", why) : KT_EINVAL;
    return 0;
}

int kt_run_service_check(const kt_run_service_t *x, const Ktune__V1__RunRequest *in, int *bad)
{
    kt_runner_opts_t ro;
    int rc = check_request(x, in, &ro);
    if (rc != 0)
        return rc;
    kt_run_input_t input;
    kt_cuda_launch_t *launches = calloc(KT_RUNNER_MAX_LAUNCHES, sizeof *launches);
    if (!launches)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int nbad = 0;
    for (size_t i = 0; i < in->n_candidates; i++)
        nbad += candidate_problem(in->candidates[i], x->cuda_device >= 0, &input, launches) != NULL;
    free(launches);
    if (bad)
        *bad = nbad;
    return 0;
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

static int run_batch(kt_rpc_call_t *call, kt_run_service_t *x, const Ktune__V1__RunRequest *in,
                     Ktune__V1__RunResponse *out)
{
    kt_runner_opts_t ro;
    if (check_request(x, in, &ro) != 0)
        return kt_rpc_call_fail(call, kt_rpc_code_from_err(kt_err_code()), "%s", kt_err_msg());
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
            co.run.flush_weights = 0;
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

int kt_run_service_handle(kt_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage *resp, void *ud)
{
    kt_run_service_t *x = ud;
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
