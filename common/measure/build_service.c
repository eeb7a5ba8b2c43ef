/* The Worker service: Worker/Build requests compiled by cached builders; see build_service.h. */
#include "measure/build_service.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "measure/builder.h"
#include "measure/measure.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

/* Builders kept for distinct (timeout, arch) pairs; a tuning job uses one. */
#define MAX_BUILDERS 4
/* Longest per-build timeout a request may ask for. */
#define MAX_TIMEOUT_MS 600000

/* ---- Builders ----------------------------------------------------------------------------- */

typedef struct {
    kt_builder_t *b;
    int timeout_ms;
    char march[64];
    int cuda;                 /* march is a CUDA arch */
    uint64_t last_use;
} builder_slot_t;

struct kt_build_service {
    pthread_mutex_t mu;        /* builds run one batch at a time; each uses `jobs` cores */
    builder_slot_t slots[MAX_BUILDERS];
    uint64_t uses;
    int jobs;
    char cache_dir[4096];
    int private_dir;           /* cache_dir is ours: removed by free */
    atomic_int in_flight;      /* candidates being built or waiting */
};

int kt_build_service_in_flight(void *svc)
{
    return atomic_load(&((kt_build_service_t *)svc)->in_flight);
}

/* The builder for (timeout, march), made on first use; the least recently
 * used one is replaced when all slots are taken. Under x->mu. */
static kt_builder_t *builder_for(kt_build_service_t *x, int timeout_ms, const char *march, int cuda)
{
    builder_slot_t *victim = &x->slots[0];
    for (int i = 0; i < MAX_BUILDERS; i++) {
        builder_slot_t *s = &x->slots[i];
        if (s->b && s->timeout_ms == timeout_ms && s->cuda == cuda &&
            strcmp(s->march, march) == 0) {
            s->last_use = ++x->uses;
            return s->b;
        }
        if (!s->b || (victim->b && s->last_use < victim->last_use))
            victim = s;
    }
    kt_builder_opts_t o;
    kt_builder_opts_default(&o);
    o.n_parallel = x->jobs;
    o.timeout = timeout_ms / 1000.0;
    /* A CUDA request's arch is the GPU's (sm_XY, for NVRTC); its CPU
     * compiles (none in such a request) keep the default. */
    if (cuda)
        o.cuda_arch = strcmp(march, "native") == 0 ? NULL : march;
    else
        o.march = march;
    o.cache_dir = x->cache_dir;
    kt_builder_t *b = kt_builder_new(&o);
    if (!b)
        return NULL;
    kt_builder_free(victim->b);
    victim->b = b;
    victim->timeout_ms = timeout_ms;
    victim->cuda = cuda;
    snprintf(victim->march, sizeof victim->march, "%s", march);
    victim->last_use = ++x->uses;
    return b;
}

/* -march values and entry names: no blanks, no option injection. */
static int word_ok(const char *s, int identifier)
{
    if (!s || !*s || strlen(s) > 63 || *s == '-' || (identifier && *s >= '0' && *s <= '9'))
        return 0;
    for (const char *p = s; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || *p == '_' ||
                 (!identifier && (*p == '-' || *p == '.'));
        if (!ok)
            return 0;
    }
    return 1;
}

/* Why a candidate fails alone (INSTANTIATION_ERROR), or NULL. */
static const char *candidate_problem(const Ktune__V1__BuildCandidate *c)
{
    if (!c || !word_ok(c->entry, 1))
        return "entry must be a C identifier";
    if (!c->source || !*c->source)
        return "empty source";
    return NULL;
}

/* The request-level checks: KT_EINVAL (INVALID_ARGUMENT) or KT_ELIMIT
 * (RESOURCE_EXHAUSTED) with the status text, or 0 with the target and -march value. */
static int check_request(const Ktune__V1__BuildRequest *in, kt_measure_target_t *target,
                         const char **march)
{
    if (!in->target || !*in->target || strcmp(in->target, "cpu") == 0)
        *target = KT_MEASURE_TARGET_CPU;
    else if (strcmp(in->target, "cuda") == 0)
        *target = KT_MEASURE_TARGET_CUDA;
    else
        return kt_err_set(KT_EINVAL, "unknown target '%s'", in->target);
    *march = !in->arch || !*in->arch ? "native" : in->arch;
    if (!word_ok(*march, 0))
        return kt_err_set(KT_EINVAL, "malformed arch '%s'", *march);
    if (in->timeout_ms < 0 || in->timeout_ms > MAX_TIMEOUT_MS)
        return kt_err_set(KT_EINVAL, "timeout_ms must be 0..%d", MAX_TIMEOUT_MS);
    if (in->n_candidates > KT_BUILD_SERVICE_MAX_CANDIDATES)
        return kt_err_set(KT_ELIMIT, "%zu candidates in one request; at most %d (KT_LIMIT_CANDIDATES)",
                          in->n_candidates, KT_BUILD_SERVICE_MAX_CANDIDATES);
    return 0;
}

int kt_build_service_check(const Ktune__V1__BuildRequest *in, int *bad)
{
    kt_measure_target_t target;
    const char *march;
    int rc = check_request(in, &target, &march);
    if (rc != 0)
        return rc;
    int nbad = 0;
    for (size_t i = 0; i < in->n_candidates; i++)
        nbad += candidate_problem(in->candidates[i]) != NULL;
    if (bad)
        *bad = nbad;
    return 0;
}

/* ---- Build ------------------------------------------------------------------------------- */

static int fill_result(kt_rpc_call_t *call, const Ktune__V1__BuildCandidate *c,
                       const kt_build_result_t *r, Ktune__V1__BuildResult *o)
{
    ktune__v1__build_result__init(o);
    o->candidate_id = c->candidate_id;
    o->error_code = (Ktune__V1__MeasureError)r->error_no;
    o->time_cost = r->time_cost;
    if (!(o->entry = kt_rpc_call_strdup(call, c->entry ? c->entry : "")))
        return KT_ENOMEM;
    if (r->error_msg && !(o->error_msg = kt_rpc_call_strdup(call, r->error_msg)))
        return KT_ENOMEM;
    if (r->artifact && r->artifact_len) {
        uint8_t *data = kt_rpc_call_alloc(call, r->artifact_len);
        char hash[17];
        snprintf(hash, sizeof hash, "%016" PRIx64, r->artifact_hash);
        if (!data || !(o->artifact_hash = kt_rpc_call_strdup(call, hash)))
            return KT_ENOMEM;
        memcpy(data, r->artifact, r->artifact_len);
        o->artifact.data = data;
        o->artifact.len = r->artifact_len;
    }
    return 0;
}

static int build_batch(kt_rpc_call_t *call, kt_build_service_t *x, const Ktune__V1__BuildRequest *in,
                       Ktune__V1__BuildResponse *out)
{
    kt_measure_target_t target;
    const char *march;
    if (check_request(in, &target, &march) != 0)
        return kt_rpc_call_fail(call, kt_rpc_code_from_err(kt_err_code()), "%s", kt_err_msg());
    int n = (int)in->n_candidates;
    if (n == 0)
        return KT_RPC_OK;
    kt_build_input_t *inputs = calloc((size_t)n, sizeof *inputs);
    kt_build_result_t *res = calloc((size_t)n, sizeof *res);
    Ktune__V1__BuildResult *arr = kt_rpc_call_alloc(call, (size_t)n * sizeof *arr);
    out->results = kt_rpc_call_alloc(call, (size_t)n * sizeof *out->results);
    int rc = 0;
    if (!inputs || !res || !arr || !out->results) {
        rc = kt_err_set(KT_ENOMEM, "Build: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const Ktune__V1__BuildCandidate *c = in->candidates[i];
        inputs[i].target = target;
        inputs[i].entry = c->entry;
        /* A candidate without source or a callable name fails alone. */
        if (!(inputs[i].instantiation_error = candidate_problem(c)))
            inputs[i].source = c->source;
    }
    /* The builder's timeout is per build; 0 keeps its default (15 s). */
    kt_builder_t *b = builder_for(x, in->timeout_ms, march, target == KT_MEASURE_TARGET_CUDA);
    if (!b) {
        rc = kt_err_prefix("Build");
        goto done;
    }
    double t0 = kt_time_mono();
    rc = kt_builder_build(b, inputs, n, res);
    if (rc != 0) {
        if (rc == KT_EUNSUP)
            kt_rpc_call_fail(call, KT_RPC_UNIMPLEMENTED, "%s", kt_err_msg());
        rc = rc == KT_EUNSUP ? KT_RPC_UNIMPLEMENTED : kt_err_prefix("Build");
        goto done;
    }
    int errors = 0;
    for (int i = 0; i < n; i++) {
        out->results[i] = &arr[i];
        if (fill_result(call, in->candidates[i], &res[i], &arr[i]) != 0) {
            rc = kt_err_set(KT_ENOMEM, "Build: out of memory");
            goto done;
        }
        errors += res[i].error_no != KT_MEASURE_NO_ERROR;
    }
    out->n_results = (size_t)n;
    KT_INFO("build: %d candidate%s for %s -march=%s in %.2f s, %d error%s", n, n == 1 ? "" : "s",
            target == KT_MEASURE_TARGET_CPU ? "cpu" : "cuda", march, kt_time_mono() - t0, errors,
            errors == 1 ? "" : "s");
done:
    for (int i = 0; res && i < n; i++)
        kt_build_result_clear(&res[i]);
    free(res);
    free(inputs);
    return rc;
}

int kt_build_service_handle(kt_rpc_call_t *call, const ProtobufCMessage *req,
                            ProtobufCMessage *resp, void *ud)
{
    kt_build_service_t *x = ud;
    const Ktune__V1__BuildRequest *in = (const Ktune__V1__BuildRequest *)req;
    atomic_fetch_add(&x->in_flight, (int)in->n_candidates);
    pthread_mutex_lock(&x->mu);
    int rc;
    if (kt_rpc_call_cancelled(call))
        rc = kt_rpc_call_fail(call, KT_RPC_CANCELLED, "the call ended before its batch started");
    else
        rc = build_batch(call, x, in, (Ktune__V1__BuildResponse *)resp);
    pthread_mutex_unlock(&x->mu);
    atomic_fetch_sub(&x->in_flight, (int)in->n_candidates);
    return rc;
}

/* ---- create / free: the private cache directory ----------------------------------------------------------- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

kt_build_service_t *kt_build_service_new(const kt_build_service_opts_t *o)
{
    kt_build_service_t *x = calloc(1, sizeof *x);
    if (!x) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    x->jobs = o && o->jobs > 0 ? o->jobs : 1;
    if (o && o->cache_dir) {
        snprintf(x->cache_dir, sizeof x->cache_dir, "%s", o->cache_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(x->cache_dir, sizeof x->cache_dir, "%s/ktune-worker-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(x->cache_dir)) {
            kt_err_set(KT_EIO, "cannot make a cache directory %s: %s", x->cache_dir,
                       strerror(errno));
            free(x);
            return NULL;
        }
        x->private_dir = 1;
    }
    pthread_mutex_init(&x->mu, NULL);
    return x;
}

const char *kt_build_service_cache_dir(const kt_build_service_t *x)
{
    return x->cache_dir;
}

void kt_build_service_free(kt_build_service_t *x)
{
    if (!x)
        return;
    for (int i = 0; i < MAX_BUILDERS; i++)
        kt_builder_free(x->slots[i].b);
    if (x->private_dir)
        remove_dir(x->cache_dir);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

