/* ktune-worker: builds batches of candidates for the tracker. */
#include <dirent.h>
#include <errno.h>
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
#include "measure/builder.h"
#include "measure/measure.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

/* In-flight calls get this long to finish after SIGINT/SIGTERM. */
#define DRAIN_MS 30000
/* Most candidates one Build request may carry. */
#define MAX_CANDIDATES 4096
/* Builders kept for distinct (timeout, arch) pairs; a tuning job uses one. */
#define MAX_BUILDERS 4
/* Longest per-build timeout a request may ask for. */
#define MAX_TIMEOUT_MS 600000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-worker [options]\n"
            "\n"
            "The ktune worker: builds batches of candidates for a tracker, --jobs at a time,\n"
            "each compile in its own process with the request's timeout. Identical\n"
            "candidates are compiled once per process (or once per --cache-dir).\n"
            "Runs until SIGINT or SIGTERM.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT  register with this tracker and heartbeat (default: none,\n"
            "                       serve Build calls only)\n"
            "  --jobs N             parallel compiles (default: online cores)\n"
            "  --cache-dir DIR      keep built artifacts here across restarts (default: a\n"
            "                       private directory removed at exit)\n"
            "  --listen ADDR        gRPC address to serve (default 127.0.0.1:0, a free port;\n"
            "                       use 0.0.0.0:PORT for a tracker on another host)\n"
            "  --advertise ADDR     address the tracker should dial (default: the bound\n"
            "                       address; a wildcard host becomes the local address that\n"
            "                       routes to the tracker, 127.0.0.1 for a local tracker)\n"
            "  --token-file F       shared token required from every caller and sent to the\n"
            "                       tracker (first line of F; default: $KT_TOKEN_FILE)\n"
            "  --tls-cert F         server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F          server private key (PEM)\n"
            "  --tls-ca F           CA (PEM) to verify a tracker served over TLS\n"
            "  --version            print the version and exit\n"
            "  -h, --help           print this help and exit\n");
}

/* ---- Builders ----------------------------------------------------------------------------- */

typedef struct {
    kt_builder_t *b;
    int timeout_ms;
    char march[64];
    int cuda;                 /* march is a CUDA arch */
    uint64_t last_use;
} builder_slot_t;

typedef struct {
    pthread_mutex_t mu;        /* builds run one batch at a time; each uses --jobs cores */
    builder_slot_t slots[MAX_BUILDERS];
    uint64_t uses;
    int jobs;
    const char *cache_dir;
    atomic_int in_flight;      /* candidates being built or waiting */
} worker_ctx_t;

static int in_flight(void *user)
{
    return atomic_load(&((worker_ctx_t *)user)->in_flight);
}

/* The builder for (timeout, march), made on first use; the least recently
 * used one is replaced when all slots are taken. Under x->mu. */
static kt_builder_t *builder_for(worker_ctx_t *x, int timeout_ms, const char *march, int cuda)
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

static int build_batch(kt_rpc_call_t *call, worker_ctx_t *x, const Ktune__V1__BuildRequest *in,
                       Ktune__V1__BuildResponse *out)
{
    kt_measure_target_t target;
    if (!in->target || !*in->target || strcmp(in->target, "cpu") == 0)
        target = KT_MEASURE_TARGET_CPU;
    else if (strcmp(in->target, "cuda") == 0)
        target = KT_MEASURE_TARGET_CUDA;
    else
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "unknown target '%s'",
                                in->target);
    const char *march = !in->arch || !*in->arch ? "native" : in->arch;
    if (!word_ok(march, 0))
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "malformed arch '%s'", march);
    if (in->timeout_ms < 0 || in->timeout_ms > MAX_TIMEOUT_MS)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "timeout_ms must be 0..%d",
                                MAX_TIMEOUT_MS);
    if (in->n_candidates > MAX_CANDIDATES)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT,
                                "%zu candidates in one request; at most %d", in->n_candidates,
                                MAX_CANDIDATES);
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
        if (!word_ok(c->entry, 1))
            inputs[i].instantiation_error = "entry must be a C identifier";
        else if (!c->source || !*c->source)
            inputs[i].instantiation_error = "empty source";
        else
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

static int h_build(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                   void *ud)
{
    worker_ctx_t *x = ud;
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

/* ---- Private cache directory ----------------------------------------------------------- */

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

/* ---- main ---------------------------------------------------------------------------------- */

/* The worker's own options. */
typedef struct {
    long jobs;
    const char *cache_dir;
} worker_args_t;

static int worker_option(void *user, int c, const char *arg)
{
    worker_args_t *a = user;
    char *end;
    switch (c) {
    case 'j':
        a->jobs = strtol(arg, &end, 10);
        if (*end || a->jobs < 1 || a->jobs > 1024) {
            fprintf(stderr, "ktune-worker: --jobs wants 1..1024, got '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'D': a->cache_dir = arg; return 0;
    default: usage(stderr); return 2;
    }
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-worker: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {{"jobs", required_argument, 0, 'j'},
                                         {"cache-dir", required_argument, 0, 'D'},
                                         {0, 0, 0, 0}};
    worker_args_t a = {.jobs = sysconf(_SC_NPROCESSORS_ONLN)};
    kt_peer_cmdline_t cl;
    int exit_code = kt_peer_cmdline_parse(&cl, "ktune-worker", argc, argv, opts, worker_option,
                                          &a, usage);
    if (exit_code >= 0)
        return exit_code;
    long jobs = a.jobs < 1 ? 1 : a.jobs;
    const char *cache_dir = a.cache_dir;
    char private_dir[4096] = "";
    if (!cache_dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(private_dir, sizeof private_dir, "%s/ktune-worker-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(private_dir)) {
            KT_ERROR("cannot make a cache directory %s: %s", private_dir, strerror(errno));
            return 1;
        }
        cache_dir = private_dir;
    }

    static worker_ctx_t x;
    pthread_mutex_init(&x.mu, NULL);
    x.jobs = (int)jobs;
    x.cache_dir = cache_dir;
    int rc = 1;
    kt_peer_service_t svc = {.health_service = "Worker",
                             .role = "worker",
                             .method = "/ktune.v1.Worker/Build",
                             .req_desc = &ktune__v1__build_request__descriptor,
                             .resp_desc = &ktune__v1__build_response__descriptor,
                             .fn = h_build,
                             .user = &x};
    kt_peer_daemon_t *d = kt_peer_daemon_start(&cl, &svc);
    if (!d) {
        KT_ERROR("%s", kt_err_msg());
        goto out;
    }
    KT_INFO("ktune-worker %s listening on %s (%s%s), %ld parallel builds", KT_VERSION,
            kt_peer_daemon_address(d), cl.tls_cert ? "TLS" : "plaintext",
            kt_peer_daemon_has_token(d) ? ", token required" : "", jobs);
    /* CUDA builds go through NVRTC, present when built with CUDA. */
    char *targets[] = {"cpu", "cuda"};
    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    me.capacity = (int32_t)jobs;
    me.targets = targets;
    me.n_targets = KT_HAVE_CUDA ? 2 : 1;
    const char *addr = NULL;
    if (kt_peer_daemon_register(d, &me, in_flight, &x, &addr) != 0) {
        KT_ERROR("%s", kt_err_msg());
        goto out;
    }
    if (addr)
        KT_INFO("registering with tracker %s at %s (targets cpu%s)", cl.tracker, addr,
                KT_HAVE_CUDA ? ", cuda" : "");
    int sig = kt_peer_daemon_wait(d);
    KT_INFO("%s: stopping (in-flight builds get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
            DRAIN_MS);
    kt_peer_daemon_stop(d, DRAIN_MS);
    d = NULL;
    rc = 0;
    KT_INFO("stopped");
out:
    kt_peer_daemon_stop(d, 0);
    for (int i = 0; i < MAX_BUILDERS; i++)
        kt_builder_free(x.slots[i].b);
    if (private_dir[0])
        remove_dir(private_dir);
    return rc;
}
