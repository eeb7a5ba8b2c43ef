/* The job manager: jobs, their threads and their rounds (build on workers, run on runners, commit); see jobs.h. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "service/jobs_int.h"
#include "measure/hw_params.h"
#include "measure/hw_params_json.h"
#include "measure/runner.h"
#include "sched/state.h"
#include "transfer/transfer.h"
#include "util/err.h"
#include "util/kt_limits.h"
#include "util/log.h"
#include "util/util.h"

/* Candidate id of the reference kernel inside a Build request. */
#define REF_ID UINT64_MAX
/* How often a waiting round looks at the stop flags, in milliseconds. */
#define POLL_MS 250
/* Attempts of one Build or Run part on peers that failed before giving up. */
#define MAX_ATTEMPTS 20

struct job_round {
    job_round_t *next;
    job_t *job;
    int task, n;
    pthread_t th;
    int done;
};

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* First and longest wait between commits the store refused (disk full). */
#define STORE_RETRY_MIN_MS 100
#define STORE_RETRY_MAX_MS 2000
/* glibc: free() gives the top of a malloc arena back to the system once it
 * passes this (see malloc_settings).  */
#define KT_JOBS_TRIM_THRESHOLD (128 * 1024)

/* A store error that passes once the store can write again (a full file
 * system, an I/O error), so the write waits and retries instead of failing
 * the job. */
static int store_unwritable(int rc)
{
    return rc == KT_EFULL || rc == KT_EIO;
}

static int job_stopping(const job_t *j)
{
    return atomic_load(&j->m->stopping) || atomic_load(&j->cancel) || atomic_load(&j->failed);
}

/* Record why the job fails (first reason wins) and stop it. */
static void job_fail(job_t *j, const char *what)
{
    pthread_mutex_lock(&j->mu);
    if (!j->message) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s: %s", what, kt_err_msg());
        j->message = kt_strdup(buf);
        KT_ERROR("job %" PRId64 " failed: %s", j->id, buf);
    }
    atomic_store(&j->failed, 1);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Say what the job waits for (shown as its message while it runs), or
 * nothing (fmt NULL). */
static void job_note(job_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void job_note(job_t *j, const char *fmt, ...)
{
    pthread_mutex_lock(&j->mu);
    char before = j->waiting[0];
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->waiting, sizeof j->waiting, fmt, ap);
        va_end(ap);
    } else {
        j->waiting[0] = 0;
    }
    if (before != j->waiting[0]) {
        j->seq++;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

/* ---- Peers ------------------------------------------------------------------------------- */

/* Runners registered under `key` and how many are free now. */
static void key_runners(kt_registry_t *reg, const char *key, int *total, int *free_)
{
    *total = *free_ = 0;
    kt_queue_info_t *q = NULL;
    int n = 0;
    if (kt_registry_queues(reg, &q, &n) != 0)
        return;
    for (int i = 0; i < n; i++)
        if (strcmp(q[i].key, key) == 0) {
            *total = q[i].total;
            *free_ = q[i].free;
        }
    free(q);
}

/* Live workers that build `target`. */
static int live_workers(kt_registry_t *reg, const char *target)
{
    kt_peer_t *p = NULL;
    int n = 0, count = 0;
    if (kt_registry_peers(reg, &p, &n) != 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (p[i].role != KT_PEER_WORKER || strcmp(p[i].state, "lost") == 0)
            continue;
        for (int k = 0; k < p[i].n_targets; k++)
            if (strcmp(p[i].targets[k], target) == 0) {
                count++;
                break;
            }
    }
    kt_peer_list_free(p, n);
    return count;
}

/* ---- One round's candidates ---------------------------------------------------------------- */

typedef struct {
    kt_sched_state_t *st;
    char *json;
    uint64_t hash;
    kt_search_candidate_t cand;
    int made;
    int err;                  /* KT_MEASURE_*; NO_ERROR until something fails */
    char *msg;
    double build_s;
    uint8_t *art;             /* built artifact (NO_ERROR after the build) */
    size_t art_len;
    char art_hash[17];
    double *costs;            /* run results */
    int ncosts;
    double all_cost;
    double ts;
    kt_codegen_cuda_t cu;     /* cuda: the kernels' launches and workspace (src moved out) */
    /* The runner that timed it, for the record's provenance: a slow or
     * faulty machine in a key's pool is found from the store by these. */
    char runner_id[KT_REGISTRY_ID_MAX];
    char runner_host[KT_REGISTRY_ADDR_MAX];
    int origin;               /* KT_STORE_ORIGIN_*: what proposed the state */
} cand_t;

static void cand_error(cand_t *c, int err, const char *fmt, const char *arg)
{
    char buf[2048];
    snprintf(buf, sizeof buf, fmt, arg ? arg : "");
    c->err = err;
    free(c->msg);
    c->msg = kt_strdup(buf);
    if (c->ts == 0)
        c->ts = kt_time_wall();
}

static void cand_clear(cand_t *c)
{
    kt_sched_state_free(c->st);
    free(c->json);
    kt_search_candidate_clear(&c->cand);
    free(c->msg);
    free(c->art);
    free(c->costs);
    kt_codegen_cuda_clear(&c->cu);
}

/* A part of a round sent to one peer: the candidates idx[0..n-1]. */
typedef struct {
    job_t *j;
    job_task_t *t;
    cand_t *c;
    int *idx;
    int n;
    int with_ref;             /* build: add the reference kernel */
    const char *target;       /* build: what the request compiles for (the reference: cpu) */
    const char *arch;         /* build: -march, or the GPU's sm_XY for cuda */
    int rc;                   /* 0, or stopped (KT_ESTATE) */
} part_t;

/* One part handed to the part threads, and the call it belongs to. */
struct part_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;                 /* parts of the call not yet finished */
};

struct part_task {
    struct part_task *next;
    void *(*fn)(void *);
    void *arg;
    struct part_group *g;
};

/* How long a part thread waits for work before it exits. */
#define PART_IDLE_MS 2000

static void part_done(struct part_group *g)
{
    pthread_mutex_lock(&g->mu);
    if (--g->left == 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* A part thread; counted in parts_idle (by its starter) whenever it runs
 * no part, so that run_parts starts only the threads the queue lacks. */
static void *part_thread(void *arg)
{
    kt_jobs_t *m = arg;
    pthread_mutex_lock(&m->parts_mu);
    for (;;) {
        int timed_out = 0;
        while (!m->parts_head && !m->parts_stop && !timed_out) {
            struct timespec ts;
            ts = kt_time_mono_after_ms(PART_IDLE_MS);
            timed_out = pthread_cond_timedwait(&m->parts_cv, &m->parts_mu, &ts) == ETIMEDOUT;
        }
        struct part_task *w = m->parts_head;
        if (!w)
            break;
        if (!(m->parts_head = w->next))
            m->parts_tail = &m->parts_head;
        m->parts_queued--;
        m->parts_idle--;
        pthread_mutex_unlock(&m->parts_mu);
        w->fn(w->arg);
        part_done(w->g);
        pthread_mutex_lock(&m->parts_mu);
        m->parts_idle++;
    }
    m->parts_idle--;
    m->parts_threads--;
    pthread_cond_broadcast(&m->parts_gone_cv);
    pthread_mutex_unlock(&m->parts_mu);
    return NULL;
}

/* Take a queued part of group g off the queue (NULL when none is left).
 * Under parts_mu. */
static struct part_task *part_take(kt_jobs_t *m, struct part_group *g)
{
    for (struct part_task **pp = &m->parts_head; *pp; pp = &(*pp)->next)
        if ((*pp)->g == g) {
            struct part_task *w = *pp;
            *pp = w->next;
            if (m->parts_tail == &w->next)
                m->parts_tail = pp;
            m->parts_queued--;
            return w;
        }
    return NULL;
}

/* Run fn over the parts at once: the first here, the others on the part
 * threads (started when too few are idle). Parts no thread has taken when
 * the first is done run here too, so the call finishes even when no thread
 * could be started. */
static void run_parts(kt_jobs_t *m, void *(*fn)(void *), part_t *parts, int n)
{
    struct part_task *w = n > 1 ? calloc((size_t)n - 1, sizeof *w) : NULL;
    if (!w) {
        for (int i = 0; i < n; i++)
            fn(&parts[i]);
        return;
    }
    struct part_group g = {.left = n - 1};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    pthread_mutex_lock(&m->parts_mu);
    for (int i = 1; i < n; i++) {
        w[i - 1] = (struct part_task){.fn = fn, .arg = &parts[i], .g = &g};
        *m->parts_tail = &w[i - 1];
        m->parts_tail = &w[i - 1].next;
        m->parts_queued++;
    }
    /* Every queued part needs a thread of its own now: parts wait on
     * runners and RPCs, so one queued behind another would wait for it. */
    for (int need = m->parts_queued - m->parts_idle; need > 0; need--) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&th, &at, part_thread, m) == 0;
        pthread_attr_destroy(&at);
        if (!ok)
            break;
        m->parts_threads++;
        m->parts_idle++;
    }
    for (int i = 1; i < n; i++)   /* one idle thread per part, not all of them */
        pthread_cond_signal(&m->parts_cv);
    pthread_mutex_unlock(&m->parts_mu);
    fn(&parts[0]);
    for (;;) {
        pthread_mutex_lock(&m->parts_mu);
        struct part_task *mine = part_take(m, &g);
        pthread_mutex_unlock(&m->parts_mu);
        if (!mine)
            break;
        mine->fn(mine->arg);
        part_done(&g);
    }
    pthread_mutex_lock(&g.mu);
    while (g.left > 0)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    free(w);
}

/* Split idx[0..n-1] into k parts of consecutive candidates (k <= n). */
static part_t *split(job_t *j, job_task_t *t, cand_t *c, int *idx, int n, int k)
{
    part_t *p = calloc((size_t)k, sizeof *p);
    if (!p)
        return NULL;
    for (int i = 0, at = 0; i < k; i++) {
        int len = n / k + (i < n % k);
        p[i] = (part_t){.j = j,
                        .t = t,
                        .c = c,
                        .idx = idx + at,
                        .n = len,
                        .target = t->target,
                        .arch = j->cuda ? j->arch : "native"};
        at += len;
    }
    return p;
}

static void observe_rpc(job_t *j, const char *method, double seconds)
{
    if (j->m->m_rpc) {
        const char *labels[] = {method};
        kt_metrics_observe(j->m->m_rpc, labels, seconds);
    }
}

/* ---- Build ----------------------------------------------------------------------------------- */

static void build_apply(part_t *p, const Ktune__V1__BuildResponse *resp)
{
    job_task_t *t = p->t;
    int *seen = calloc((size_t)p->n, sizeof *seen);
    for (size_t r = 0; r < resp->n_results; r++) {
        const Ktune__V1__BuildResult *b = resp->results[r];
        if (b->candidate_id == REF_ID) {
            if (b->error_code == KTUNE__V1__MEASURE_ERROR__NO_ERROR && b->artifact.len > 0 &&
                (t->ref_art = malloc(b->artifact.len))) {
                memcpy(t->ref_art, b->artifact.data, b->artifact.len);
                t->ref_len = b->artifact.len;
                snprintf(t->ref_hash, sizeof t->ref_hash, "%s",
                         b->artifact_hash ? b->artifact_hash : "");
            } else if (b->error_code != KTUNE__V1__MEASURE_ERROR__NO_ERROR) {
                KT_WARN("job %" PRId64 ": the reference kernel of %s did not build: %s",
                        p->j->id, t->key, b->error_msg ? b->error_msg : "");
            }
            continue;
        }
        for (int k = 0; k < p->n; k++) {
            cand_t *c = &p->c[p->idx[k]];
            if ((uint64_t)p->idx[k] + 1 != b->candidate_id || (seen && seen[k]))
                continue;
            if (seen)
                seen[k] = 1;
            c->build_s = b->time_cost;
            if (b->error_code != KTUNE__V1__MEASURE_ERROR__NO_ERROR) {
                int e = (int)b->error_code;
                cand_error(c, e >= 0 && e < KT_MEASURE_NUM_ERRORS ? e : KT_MEASURE_UNKNOWN_ERROR,
                           "%s", b->error_msg);
            } else if (!b->artifact.len || !(c->art = malloc(b->artifact.len))) {
                cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", "the worker returned no artifact");
            } else {
                memcpy(c->art, b->artifact.data, b->artifact.len);
                c->art_len = b->artifact.len;
                snprintf(c->art_hash, sizeof c->art_hash, "%s",
                         b->artifact_hash ? b->artifact_hash : "");
            }
            break;
        }
    }
    for (int k = 0; k < p->n; k++) {
        cand_t *c = &p->c[p->idx[k]];
        if (c->err == KT_MEASURE_NO_ERROR && !c->art)
            cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", "the worker returned no result for it");
    }
    free(seen);
}

static void part_fail(part_t *p, const char *why)
{
    for (int k = 0; k < p->n; k++) {
        cand_t *c = &p->c[p->idx[k]];
        if (c->err == KT_MEASURE_NO_ERROR)
            cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", why);
    }
}

static void *build_part(void *arg)
{
    part_t *p = arg;
    job_t *j = p->j;
    kt_jobs_t *m = j->m;
    const kt_job_opts_t *o = &j->view->opts;
    int n = p->n + (p->with_ref ? 1 : 0);
    Ktune__V1__BuildCandidate *bc = calloc((size_t)n, sizeof *bc);
    Ktune__V1__BuildCandidate **bcp = calloc((size_t)n, sizeof *bcp);
    if (!bc || !bcp) {
        part_fail(p, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++) {
        ktune__v1__build_candidate__init(&bc[k]);
        if (k < p->n) {
            cand_t *c = &p->c[p->idx[k]];
            bc[k].candidate_id = (uint64_t)p->idx[k] + 1;
            bc[k].source = c->cand.source;
            bc[k].entry = c->cand.entry;
        } else {
            bc[k].candidate_id = REF_ID;
            bc[k].source = p->t->ref.source;
            bc[k].entry = p->t->ref.entry;
        }
        bcp[k] = &bc[k];
    }
    Ktune__V1__BuildRequest req = KTUNE__V1__BUILD_REQUEST__INIT;
    req.target = (char *)p->target;
    req.arch = (char *)p->arch;
    req.candidates = bcp;
    req.n_candidates = (size_t)n;
    req.timeout_ms = o->build_timeout_ms;
    /* A worker compiles at least one at a time: the whole batch in sequence
     * bounds the call. */
    int deadline = (int)fmin((double)n * o->build_timeout_ms + 30000, 3600000);
    int waiting_logged = 0;
    for (int attempt = 0;; attempt++) {
        if (job_stopping(j)) {
            p->rc = KT_ESTATE;
            break;
        }
        kt_lease_t lease;
        int rc = kt_registry_acquire_worker(m->reg, p->target, &lease);
        if (rc == KT_ENOTFOUND) {
            if (!waiting_logged++)
                KT_INFO("job %" PRId64 ": waiting for a worker that builds %s", j->id,
                        p->target);
            attempt--;
            kt_sleep_ms(POLL_MS);
            continue;
        }
        if (rc != 0) {
            part_fail(p, kt_err_msg());
            break;
        }
        Ktune__V1__BuildResponse *resp = NULL;
        kt_rpc_status_t st = {0};
        double t0 = kt_time_mono();
        rc = kt_tracker_build(m->t, lease.address, &req, deadline, &resp, &st);
        observe_rpc(j, "Build", kt_time_mono() - t0);
        kt_registry_release(m->reg, &lease);
        if (rc == 0) {
            build_apply(p, resp);
            protobuf_c_message_free_unpacked(&resp->base, NULL);
            break;
        }
        /* A stopping tracker cancels its calls: the part ends unbuilt, and
         * its states are proposed again when the job resumes. */
        if (job_stopping(j)) {
            p->rc = KT_ESTATE;
            break;
        }
        /* CANCELLED: the worker was dropped while building (its calls are
         * cancelled then); another worker builds the part. */
        if ((rc == KT_EUNAVAIL || rc == KT_ETIMEOUT || st.code == KT_RPC_CANCELLED) &&
            attempt + 1 < MAX_ATTEMPTS) {
            KT_WARN("job %" PRId64 ": build on worker %s failed (%s); trying again", j->id,
                    lease.peer_id, kt_err_msg());
            kt_sleep_ms(POLL_MS);
            continue;
        }
        char why[600];
        snprintf(why, sizeof why, "build on worker %s failed: %s", lease.peer_id, kt_err_msg());
        part_fail(p, why);
        break;
    }
out:
    free(bc);
    free(bcp);
    return NULL;
}

/* ---- Run --------------------------------------------------------------------------------------- */

/* The host of a "host:port" address ("[v6]:port" gives v6); an address
 * without a numeric port is kept whole (a unix: socket names its machine
 * no better). */
static void addr_host(const char *addr, char *out, size_t outsz)
{
    const char *colon = strrchr(addr, ':');
    size_t n = strlen(addr);
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
        n = (size_t)(colon - addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        addr++;
        n -= 2;
    }
    snprintf(out, outsz, "%.*s", (int)n, addr);
}

static void run_apply(part_t *p, const Ktune__V1__RunResponse *resp, const kt_lease_t *lease)
{
    for (size_t r = 0; r < resp->n_results; r++) {
        const Ktune__V1__MeasureResult *mr = resp->results[r];
        for (int k = 0; k < p->n; k++) {
            cand_t *c = &p->c[p->idx[k]];
            if ((uint64_t)p->idx[k] + 1 != mr->candidate_id || c->ts != 0)
                continue;
            c->ts = mr->timestamp > 0 ? mr->timestamp : kt_time_wall();
            c->all_cost = c->build_s + (mr->all_cost >= 0 ? mr->all_cost : 0);
            snprintf(c->runner_id, sizeof c->runner_id, "%s", lease->peer_id);
            addr_host(lease->address, c->runner_host, sizeof c->runner_host);
            int e = (int)mr->error_code;
            if (e != KT_MEASURE_NO_ERROR) {
                cand_error(c, e > 0 && e < KT_MEASURE_NUM_ERRORS ? e : KT_MEASURE_UNKNOWN_ERROR,
                           "%s", mr->error_msg);
            } else if (mr->n_costs == 0 || !(c->costs = malloc(mr->n_costs * sizeof *c->costs))) {
                cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", "the runner returned no costs");
            } else {
                int ok = 1;
                for (size_t q = 0; q < mr->n_costs; q++)
                    ok &= isfinite(mr->costs[q]) && mr->costs[q] >= 0;
                memcpy(c->costs, mr->costs, mr->n_costs * sizeof *c->costs);
                c->ncosts = (int)mr->n_costs;
                if (!ok)
                    cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", "the runner returned bad costs");
            }
            break;
        }
    }
    for (int k = 0; k < p->n; k++) {
        cand_t *c = &p->c[p->idx[k]];
        if (c->err == KT_MEASURE_NO_ERROR && c->ncosts == 0)
            cand_error(c, KT_MEASURE_UNKNOWN_ERROR, "%s", "the runner returned no result for it");
    }
}

/* Wait for a runner of the job's key; 0 with *lease, or KT_ESTATE when the
 * job stops meanwhile. */
static int lease_runner(job_t *j, kt_lease_t *lease)
{
    kt_registry_t *reg = j->m->reg;
    int64_t ticket = kt_registry_request_for(reg, j->view->info->job.runner_key,
                                             j->view->info->job.priority, j->id);
    if (ticket < 0)
        return (int)ticket;
    for (;;) {
        int rc = kt_registry_wait(reg, ticket, POLL_MS, lease);
        if (rc != KT_ETIMEOUT) {
            job_note(j, NULL);
            return rc;
        }
        int total, free_;
        key_runners(reg, j->view->info->job.runner_key, &total, &free_);
        if (total == 0)
            job_note(j, "waiting for a runner of key '%s' (none registered)",
                     j->view->info->job.runner_key);
        if (job_stopping(j)) {
            if (kt_registry_cancel(reg, ticket) == 0)
                return kt_err_set(KT_ESTATE, "job stopped");
            /* Granted meanwhile: collect it to give it back. */
            if (kt_registry_wait(reg, ticket, 0, lease) == 0)
                kt_registry_release(reg, lease);
            return kt_err_set(KT_ESTATE, "job stopped");
        }
    }
}

static void *run_part(void *arg)
{
    part_t *p = arg;
    job_t *j = p->j;
    kt_jobs_t *m = j->m;
    const kt_job_opts_t *o = &j->view->opts;
    Ktune__V1__RunCandidate *rc_ = calloc((size_t)p->n, sizeof *rc_);
    Ktune__V1__RunCandidate **rcp = calloc((size_t)p->n, sizeof *rcp);
    int64_t *elems = calloc((size_t)p->n * KT_MEASURE_MAX_BUFS, sizeof *elems);
    /* cuda: 7 launch values and a kernel name per launch of each candidate */
    size_t nl = j->cuda ? (size_t)p->n * KT_RUNNER_MAX_LAUNCHES : 1;
    int32_t *dims = calloc(nl * 7, sizeof *dims);
    char **names = calloc(nl, sizeof *names);
    kt_lease_t failed[MAX_ATTEMPTS];
    int nfailed = 0;
    if (!rc_ || !rcp || !elems || !dims || !names) {
        part_fail(p, "out of memory");
        goto out;
    }
    for (int k = 0; k < p->n; k++) {
        cand_t *c = &p->c[p->idx[k]];
        Ktune__V1__RunCandidate *r = &rc_[k];
        ktune__v1__run_candidate__init(r);
        r->candidate_id = (uint64_t)p->idx[k] + 1;
        r->artifact.data = c->art;
        r->artifact.len = c->art_len;
        r->artifact_hash = c->art_hash;
        r->entry = c->cand.entry;
        int64_t *e = elems + (size_t)k * KT_MEASURE_MAX_BUFS;
        for (int b = 0; b < c->cand.layout.num_bufs; b++)
            e[b] = c->cand.layout.num_elems[b];
        r->buf_elems = e;
        r->n_buf_elems = (size_t)c->cand.layout.num_bufs;
        r->weight_bufs = c->cand.layout.weights;
        r->num_outputs = c->cand.layout.num_outputs;
        if (j->cuda) {
            int32_t *d = dims + (size_t)k * KT_RUNNER_MAX_LAUNCHES * 7;
            char **nm = names + (size_t)k * KT_RUNNER_MAX_LAUNCHES;
            for (int l = 0; l < c->cu.n_launches; l++) {
                const kt_codegen_launch_t *cl = &c->cu.launches[l];
                nm[l] = (char *)cl->name;
                for (int q = 0; q < 3; q++) {
                    d[7 * l + q] = (int32_t)cl->grid[q];
                    d[7 * l + 3 + q] = (int32_t)cl->block[q];
                }
                d[7 * l + 6] = 0;   /* static shared memory only */
            }
            r->launch_names = nm;
            r->n_launch_names = (size_t)c->cu.n_launches;
            r->launch_dims = d;
            r->n_launch_dims = (size_t)c->cu.n_launches * 7;
            r->workspace_bytes = (int64_t)c->cu.workspace_bytes;
        }
        if (p->t->ref_art) {
            r->reference.data = p->t->ref_art;
            r->reference.len = p->t->ref_len;
            r->reference_hash = p->t->ref_hash;
            r->reference_entry = p->t->ref.entry;
        }
        rcp[k] = r;
    }
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.number = o->number;
    mo.repeat = o->repeat;
    mo.min_repeat_ms = o->min_repeat_ms;
    mo.cooldown_interval = o->cooldown_interval;
    mo.enable_cpu_cache_flush = o->enable_cpu_cache_flush;
    mo.flush_weights = o->flush_weights;
    mo.timeout_ms = o->timeout_ms;
    mo.check_correctness = o->check_correctness && p->t->ref_art != NULL;
    mo.num_threads = o->num_threads;
    Ktune__V1__RunRequest req = KTUNE__V1__RUN_REQUEST__INIT;
    req.target = (char *)p->t->target;
    req.candidates = rcp;
    req.n_candidates = (size_t)p->n;
    req.options = &mo;
    req.seed = o->seed;
    /* Each candidate (and the reference once) is bounded by the timeout on
     * the runner; queueing there is not, but a runner takes one batch. */
    int deadline = (int)fmin((double)(p->n + 1) * (o->timeout_ms + 1000) + 30000, 3600000);
    for (int attempt = 0;; attempt++) {
        /* A free runner is leased at once, so the stop is checked here too:
         * a stopping tracker refuses the call anyway. */
        if (job_stopping(j)) {
            p->rc = KT_ESTATE;
            break;
        }
        kt_lease_t lease;
        int rc = lease_runner(j, &lease);
        if (rc == KT_ESTATE) {
            p->rc = KT_ESTATE;
            break;
        }
        if (rc != 0) {
            part_fail(p, kt_err_msg());
            break;
        }
        Ktune__V1__RunResponse *resp = NULL;
        kt_rpc_status_t st = {0};
        double t0 = kt_time_mono();
        rc = kt_tracker_run(m->t, lease.address, &req, deadline, &resp, &st);
        observe_rpc(j, "Run", kt_time_mono() - t0);
        if (rc == 0) {
            /* The results are real even if the runner was dropped meanwhile. */
            kt_registry_release(m->reg, &lease);
            run_apply(p, resp, &lease);
            protobuf_c_message_free_unpacked(&resp->base, NULL);
            break;
        }
        if (job_stopping(j)) {
            /* Cancelled with the tracker's stop (or the job's): nothing of
             * the part is stored, its states are measured when it resumes. */
            kt_registry_release(m->reg, &lease);
            p->rc = KT_ESTATE;
            break;
        }
        if ((rc == KT_EUNAVAIL || rc == KT_ETIMEOUT || st.code == KT_RPC_CANCELLED) &&
            attempt + 1 < MAX_ATTEMPTS) {
            /* Keep the lease until the part is done elsewhere, so the queue
             * does not hand us the same failing runner again; a dropped
             * runner's lease is gone anyway. */
            KT_WARN("job %" PRId64 ": run of %d candidates on runner %s (%s) failed (%s); "
                    "re-queued", j->id, p->n, lease.peer_id, lease.address, kt_err_msg());
            failed[nfailed++] = lease;
            kt_sleep_ms(POLL_MS);
            continue;
        }
        kt_registry_release(m->reg, &lease);
        char why[600];
        snprintf(why, sizeof why, "run on runner %s failed: %s", lease.peer_id, kt_err_msg());
        part_fail(p, why);
        break;
    }
out:
    for (int i = 0; i < nfailed; i++)
        kt_registry_release(m->reg, &failed[i]);
    free(rc_);
    free(rcp);
    free(elems);
    free(dims);
    free(names);
    return NULL;
}

/* ---- CPU slots -------------------------------------------------------------------------------- */

struct cpu_waiter {
    struct cpu_waiter *next;
    int urgent;
};

/* Enter a CPU slot, first come first served among all rounds, or ahead of
 * them when `urgent` (feeding back a measured round, which finishes it and
 * lets its task go on, must not wait behind the searches of new rounds); 0,
 * or KT_ESTATE when the job stops while waiting. */
static int cpu_enter(job_t *j, int urgent)
{
    kt_jobs_t *m = j->m;
    struct cpu_waiter me = {NULL}, **pp;
    pthread_mutex_lock(&m->mu);
    if (urgent) {
        for (pp = &m->cpu_queue; *pp && (*pp)->urgent; pp = &(*pp)->next)
            ;
    } else {
        for (pp = &m->cpu_queue; *pp; pp = &(*pp)->next)
            ;
    }
    me.urgent = urgent;
    me.next = *pp;
    *pp = &me;
    while (m->cpu_queue != &me || m->cpu_busy >= m->cpu_slots) {
        if (job_stopping(j)) {
            for (pp = &m->cpu_queue; *pp != &me; pp = &(*pp)->next)
                ;
            *pp = me.next;
            pthread_cond_broadcast(&m->cv);   /* a new first may enter */
            pthread_mutex_unlock(&m->mu);
            return kt_err_set(KT_ESTATE, "job stopped");
        }
        struct timespec ts;
        ts = kt_time_mono_after_ms(POLL_MS);
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    }
    m->cpu_queue = me.next;
    m->cpu_busy++;
    pthread_cond_broadcast(&m->cv);   /* the next may enter a free slot too */
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static void cpu_leave(kt_jobs_t *m)
{
    pthread_mutex_lock(&m->mu);
    m->cpu_busy--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* ---- Rounds ---------------------------------------------------------------------------------- */

/* The latency point of the scheduler's last complete on this thread. */
static _Thread_local struct {
    int set;
    int64_t trials;
    double elapsed, latency;
} tl_point;

static void on_latency(void *user, int64_t trials, double elapsed, double est)
{
    job_t *j = user;
    pthread_mutex_lock(&j->mu);
    json_array_append_new(j->curve, json_pack("[I, o]", (json_int_t)trials,
                                              isfinite(est) ? json_real(est) : json_null()));
    pthread_mutex_unlock(&j->mu);
    tl_point.set = 1;
    tl_point.trials = trials;
    tl_point.elapsed = elapsed;
    tl_point.latency = est;
}

static int has_measured(void *user, uint64_t hash)
{
    job_task_t *t = user;
    if (t->fast)
        return 0;
    kt_store_t *s = kt_jobs_store_get(t->m);
    int yes = kt_store_has_measured(s, t->key, t->target, hash) == 1;
    kt_jobs_store_put(t->m, s);
    return yes;
}

struct commit_req {
    struct commit_req *next;
    kt_record_t *recs;
    size_t n;
    int done, rc;
    char err[512];
};

/* Write the queued requests: one transaction for all of them, or, when that
 * fails (one bad record fails the whole batch), each alone. Under no lock;
 * the caller holds the "committing" role. */
static void commit_group(kt_jobs_t *m, struct commit_req *q)
{
    size_t total = 0, nreq = 0;
    for (struct commit_req *r = q; r; r = r->next) {
        total += r->n;
        nreq++;
    }
    kt_record_t *all = nreq > 1 ? calloc(total, sizeof *all) : NULL;
    kt_store_t *st = kt_jobs_store_get(m);
    int together = 0;
    if (all) {
        size_t at = 0;
        for (struct commit_req *r = q; r; r = r->next) {
            memcpy(all + at, r->recs, r->n * sizeof *all);
            at += r->n;
        }
        together = kt_store_put_records(st, all, total) == 0;
    }
    size_t at = 0;
    for (struct commit_req *r = q; r; r = r->next) {
        if (together)
            memcpy(r->recs, all + at, r->n * sizeof *all);   /* ids, mean costs */
        else
            r->rc = kt_store_put_records(st, r->recs, r->n);
        at += r->n;
        if (r->rc != 0)
            snprintf(r->err, sizeof r->err, "%s", kt_err_msg());
    }
    kt_jobs_store_put(m, st);
    free(all);
}

/* Store n records; 0 only after their COMMIT returned. */
static int commit_records(kt_jobs_t *m, kt_record_t *recs, size_t n)
{
    struct commit_req me = {.recs = recs, .n = n}, **pp;
    pthread_mutex_lock(&m->commit_mu);
    for (pp = &m->commit_queue; *pp; pp = &(*pp)->next)
        ;
    *pp = &me;
    while (!me.done) {
        if (m->committing) {
            pthread_cond_wait(&m->commit_cv, &m->commit_mu);
            continue;
        }
        /* Commit everything queued so far, this request included. */
        struct commit_req *q = m->commit_queue;
        m->commit_queue = NULL;
        m->committing = 1;
        pthread_mutex_unlock(&m->commit_mu);
        commit_group(m, q);
        pthread_mutex_lock(&m->commit_mu);
        for (struct commit_req *r = q, *next; r; r = next) {
            next = r->next;
            r->done = 1;
        }
        m->committing = 0;
        pthread_cond_broadcast(&m->commit_cv);
    }
    pthread_mutex_unlock(&m->commit_mu);
    return me.rc == 0 ? 0 : kt_err_set(me.rc, "%s", me.err);
}

/* Commit the round's records; 0 only after COMMIT. */
static int commit(job_t *j, job_task_t *t, cand_t *c, int n)
{
    kt_record_t *recs = calloc((size_t)n, sizeof *recs);
    if (!recs)
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int ok = c[i].err == KT_MEASURE_NO_ERROR;
        recs[i] = (kt_record_t){.workload_key = t->key,
                                .target = t->target,
                                .state_json = c[i].json,
                                .state_hash = c[i].hash,
                                .costs = ok ? c[i].costs : NULL,
                                .ncosts = ok ? c[i].ncosts : 0,
                                .error_code = c[i].err,
                                .error_msg = c[i].msg,
                                .all_cost = c[i].all_cost > 0 ? c[i].all_cost : c[i].build_s,
                                .timestamp = c[i].ts > 0 ? c[i].ts : kt_time_wall(),
                                .runner_key = j->view->info->job.runner_key,
                                .job_id = j->id,
                                .runner_id = c[i].runner_id,
                                .runner_host = c[i].runner_host,
                                .origin = c[i].origin};
    }
    /* A store that cannot write (disk full, I/O error) is retried, not
     * fatal: the round's measurements wait in memory while the tracker
     * keeps serving reads, and the job goes on once space is back. Bad
     * records (KT_EINVAL) and a stopping job end the round as before. */
    int rc, delay_ms = STORE_RETRY_MIN_MS, failures = 0;
    while (store_unwritable(rc = commit_records(j->m, recs, (size_t)n)) && !job_stopping(j)) {
        if (failures++ == 0)
            KT_ERROR("job %" PRId64 ": cannot commit %d records to the store (%s); the job "
                     "waits and retries, the tracker keeps serving reads",
                     j->id, n, kt_err_msg());
        job_note(j, "the store cannot commit: %s", kt_err_msg());
        for (int w = 0; w < delay_ms && !job_stopping(j); w += 50)
            kt_sleep_ms(50);
        if (delay_ms < STORE_RETRY_MAX_MS)
            delay_ms *= 2;
    }
    if (failures > 0 && rc == 0) {
        KT_INFO("job %" PRId64 ": the store commits again after %d failed attempts", j->id,
                failures);
        job_note(j, NULL);
    }
    if (rc == 0) {   /* the status page's origin of the task's best */
        pthread_mutex_lock(&j->mu);
        for (int i = 0; i < n; i++)
            kt_job_best_note(&t->best, &recs[i]);
        pthread_mutex_unlock(&j->mu);
    }
    free(recs);
    return rc;
}

/* The CUDA kernels of a GPU state: source, the first kernel as entry (the
 * builder checks it exists), the launches and the reference's buffers. */
static int cand_make_cuda(const kt_workload_t *wl, const job_task_t *t, cand_t *c)
{
    if (kt_codegen_emit_cuda(kt_workload_dag(wl), c->st, "cand", &c->cu) != 0)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    if (c->cu.n_launches < 1 || c->cu.n_launches > KT_RUNNER_MAX_LAUNCHES)
        return kt_err_set(KT_EINVAL, "%d kernels in one candidate (1 to %d)", c->cu.n_launches,
                          KT_RUNNER_MAX_LAUNCHES);
    c->cand.source = c->cu.src;
    c->cu.src = NULL;
    snprintf(c->cand.entry, sizeof c->cand.entry, "%.63s", c->cu.launches[0].name);
    c->cand.layout = t->ref.layout;
    return 0;
}

/* KT_BENCH_DISPATCH_ONLY: n empty states (the candidates are stub_make's). */
static int stub_propose(int n, kt_sched_state_t ***out)
{
    if (!(*out = calloc((size_t)n, sizeof **out)))
        return kt_err_set(KT_ENOMEM, "out of memory");
    return n;
}

/* A placeholder candidate, distinct from every other of this tracker (its
 * source, hash and record), for the dispatch-only benchmark. */
static int stub_make(kt_jobs_t *m, cand_t *c)
{
    unsigned long long k = atomic_fetch_add(&m->stub_seq, 1);
    char buf[96];
    snprintf(buf, sizeof buf, "{\"stub\": %llu}", k);
    c->json = kt_strdup(buf);
    snprintf(buf, sizeof buf, "/* dispatch-only placeholder %llu */\n", k);
    c->cand.source = kt_strdup(buf);
    if (!c->json || !c->cand.source)
        return kt_err_set(KT_ENOMEM, "out of memory");
    snprintf(c->cand.entry, sizeof c->cand.entry, "stub");
    c->hash = kt_hash64(c->json, strlen(c->json));
    c->made = 1;
    return 0;
}

/* The round proper; 0 (completed or aborted because the job stops) or
 * negative (the job fails). A store handle is held only to propose (the
 * policy asks the store what was measured) and to commit, not while
 * waiting for workers and runners. */
static int round_run(job_round_t *r)
{
    job_t *j = r->job;
    job_task_t *t = &j->tasks[r->task];
    const kt_workload_t *wl = j->view->wl[r->task];
    kt_sched_state_t **states = NULL;
    kt_store_t *st = NULL;
    /* Phase times of the round (propose, make, build, run, commit), logged
     * at debug level: where a round's latency goes. */
    double tp[6];
    tp[0] = kt_time_mono();
    if (cpu_enter(j, 0) != 0) {
        kt_scheduler_abort(j->sched, r->task);
        return 0;
    }
    double t_cpu = kt_time_mono();
    /* One count instead of a query per state the search considers (see
     * job_task_t.known); a distilled store's dropped states are known only
     * to the store. */
    kt_store_filter_t kf = {.workload_key = t->key, .target = t->target};
    kt_store_counts_t kc;
    st = kt_jobs_store_get(j->m);
    int64_t distilled = 1;
    t->fast = kt_store_count_records(st, &kf, &kc) == 0 && kc.total == t->known &&
              kt_store_count_distilled(st, t->key, t->target, &distilled) == 0 && distilled == 0;
    kt_jobs_store_put(j->m, st);
    st = NULL;
    int *origins = calloc((size_t)r->n, sizeof *origins);
    int n = !origins             ? kt_err_set(KT_ENOMEM, "out of memory")
            : j->m->dispatch_only ? stub_propose(r->n, &states)
                                 : kt_search_family_propose_origins(j->fam, r->task, r->n,
                                                                    &states, origins);
    t->fast = 0;
    tp[1] = kt_time_mono();
    if (n <= 0) {
        cpu_leave(j->m);
        free(origins);
        if (n < 0)
            return n;
        free(states);
        KT_INFO("job %" PRId64 ": task %d has no new candidates", j->id, r->task);
        return kt_scheduler_complete(j->sched, r->task, NULL, 0);
    }
    cand_t *c = calloc((size_t)n, sizeof *c);
    int *idx = calloc((size_t)n, sizeof *idx);
    double *costs = calloc((size_t)n, sizeof *costs);
    int rc = 0, in_cpu = 1;
    if (!c || !idx || !costs) {
        for (int i = 0; i < n; i++)
            kt_sched_state_free(states[i]);
        free(origins);
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        c[i].st = states[i];
        c[i].origin = origins[i];
    }
    free(origins);
    if (!t->have_ref) {
        if ((rc = kt_search_candidate_reference(wl, &t->ref)) != 0)
            goto out;
        t->have_ref = 1;
    }
    for (int i = 0; i < n; i++) {
        if (j->m->dispatch_only) {
            if ((rc = stub_make(j->m, &c[i])) != 0)
                goto out;
            continue;
        }
        if (!(c[i].json = kt_sched_state_to_json(c[i].st, kt_workload_dag(wl)))) {
            rc = kt_err_code() ? kt_err_code() : KT_ENOMEM;
            goto out;
        }
        c[i].hash = kt_sched_state_hash(c[i].st, kt_workload_dag(wl));
        if ((j->cuda ? cand_make_cuda(wl, t, &c[i]) : kt_search_candidate_make(wl, c[i].st, NULL,
                                                                              &c[i].cand)) == 0)
            c[i].made = 1;
        else
            cand_error(&c[i], KT_MEASURE_INSTANTIATION_ERROR, "%s", kt_err_msg());
    }

    cpu_leave(j->m);
    in_cpu = 0;
    tp[2] = kt_time_mono();

    /* Build: the made candidates over the live workers (and the reference
     * with the first part until it is built). */
    int nb = 0;
    for (int i = 0; i < n; i++)
        if (c[i].made)
            idx[nb++] = i;
    if (nb > 0) {
        int k = live_workers(j->m->reg, t->target);
        k = k < 1 ? 1 : k > nb ? nb : k;
        part_t *parts = split(j, t, c, idx, nb, k);
        if (!parts) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            goto out;
        }
        if (j->cuda && !t->ref_art) {
            /* The reference is checked on the runner's CPU: a C build of its own. */
            part_t ref = {.j = j, .t = t, .c = c, .idx = idx, .n = 0, .with_ref = 1,
                          .target = "cpu", .arch = "native"};
            build_part(&ref);
            if (ref.rc != 0) {
                free(parts);
                goto aborted;
            }
        } else {
            parts[0].with_ref = t->ref_art == NULL;
        }
        run_parts(j->m, build_part, parts, k);
        int stopped = 0;
        for (int i = 0; i < k; i++)
            stopped |= parts[i].rc != 0;
        free(parts);
        if (stopped)
            goto aborted;
    }
    if (!t->ref_art && j->view->opts.check_correctness)
        for (int i = 0; i < n; i++)
            if (c[i].err == KT_MEASURE_NO_ERROR)
                cand_error(&c[i], KT_MEASURE_UNKNOWN_ERROR, "%s",
                           "the reference kernel did not build, so the output cannot be checked");

    tp[3] = kt_time_mono();

    /* Run: the built candidates over every free runner of the key, in
     * batches of at most KT_JOBS_MAX_RUN_BATCH. */
    int nr = 0;
    for (int i = 0; i < n; i++)
        if (c[i].err == KT_MEASURE_NO_ERROR)
            idx[nr++] = i;
    if (nr > 0) {
        int total, free_;
        key_runners(j->m->reg, j->view->info->job.runner_key, &total, &free_);
        int k = (nr + KT_JOBS_MAX_RUN_BATCH - 1) / KT_JOBS_MAX_RUN_BATCH;
        if (free_ > k)
            k = free_;
        /* The job keeps about two candidates per runner in flight (one
         * measuring, one queued): when its rounds hold that many, a runner
         * gets its share in one Run call rather than one call per
         * candidate. The rounds finish no later (the runner measures them
         * back to back either way), and the tracker spends its time per
         * call, not per candidate. */
        pthread_mutex_lock(&j->mu);
        int64_t in_flight = (int64_t)j->in_flight * nr;
        pthread_mutex_unlock(&j->mu);
        int64_t per = total > 0 ? in_flight / total : 1;
        per = per < 1 ? 1 : per > KT_JOBS_MAX_RUN_BATCH ? KT_JOBS_MAX_RUN_BATCH : per;
        if (k > (nr + per - 1) / per)
            k = (int)((nr + per - 1) / per);
        if (k > nr)
            k = nr;
        part_t *parts = split(j, t, c, idx, nr, k);
        if (!parts) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            goto out;
        }
        run_parts(j->m, run_part, parts, k);
        int stopped = 0;
        for (int i = 0; i < k; i++)
            stopped |= parts[i].rc != 0;
        free(parts);
        if (stopped)
            goto aborted;
    }
    if (job_stopping(j))
        goto aborted;

    tp[4] = kt_time_mono();

    /* Commit, then tell the policy and the scheduler. A job that stops
     * (cancelled, or the tracker stopping) while the store cannot write
     * drops the round as an aborted one: its states were never stored, so
     * they count nowhere and are measured again if the job resumes. */
    rc = commit(j, t, c, n);
    if (store_unwritable(rc) && job_stopping(j) && !atomic_load(&j->failed))
        goto aborted;
    if (rc == 0)
        t->known += n;
    if (rc != 0) {
        kt_err_prefix("storing the records of task %d", r->task);
        goto out;
    }
    int valid = 0;
    for (int i = 0; i < n; i++) {
        const char *labels[] = {kt_measure_error_name(c[i].err)};
        if (j->m->m_measurements)
            kt_metrics_add(j->m->m_measurements, labels, 1);
        double mean = 0;
        for (int q = 0; q < c[i].ncosts; q++)
            mean += c[i].costs[q] / c[i].ncosts;
        costs[i] = c[i].err == KT_MEASURE_NO_ERROR && mean > 0 ? mean : INFINITY;
        valid += isfinite(costs[i]);
        states[i] = c[i].st;
    }
    pthread_mutex_lock(&j->mu);
    j->reserved += n - r->n;
    r->n = n;   /* what is reserved now */
    pthread_mutex_unlock(&j->mu);
    /* Training the model (xgb) is the other CPU-bound step; a stopping job
     * still feeds back what it committed. */
    double t_fb = kt_time_mono();
    in_cpu = cpu_enter(j, 1) == 0;
    double t_fb_in = kt_time_mono();
    rc = j->m->dispatch_only ? 0 : kt_search_family_feedback(j->fam, r->task, states, costs, n);
    if (in_cpu)
        cpu_leave(j->m);
    in_cpu = 0;
    double t_fb_out = kt_time_mono();
    if (rc != 0)
        goto out;
    tl_point.set = 0;
    if ((rc = kt_scheduler_complete(j->sched, r->task, costs, n)) != 0)
        goto out;
    r->n = 0;   /* committed: nothing to give back */
    if (tl_point.set && isfinite(tl_point.latency)) {
        st = kt_jobs_store_get(j->m);
        if (kt_store_log_latency(st, j->id, tl_point.trials, tl_point.elapsed,
                                 tl_point.latency) != 0)
            KT_WARN("job %" PRId64 ": %s", j->id, kt_err_msg());
        kt_jobs_store_put(j->m, st);
        st = NULL;
    }
    if (j->m->m_rounds)
        kt_metrics_add(j->m->m_rounds, NULL, 1);
    tp[5] = kt_time_mono();
    KT_DEBUG("job %" PRId64 ": task %d round of %d done, %d valid; ms wait-cpu %.1f propose %.1f "
             "make %.1f build %.1f run %.1f commit %.1f (of which wait-cpu %.1f feedback %.1f)",
             j->id, r->task, n, valid, (t_cpu - tp[0]) * 1e3, (tp[1] - t_cpu) * 1e3,
             (tp[2] - tp[1]) * 1e3, (tp[3] - tp[2]) * 1e3, (tp[4] - tp[3]) * 1e3,
             (tp[5] - tp[4]) * 1e3, (t_fb_in - t_fb) * 1e3, (t_fb_out - t_fb_in) * 1e3);
    goto out;
aborted:
    rc = 0;
    kt_scheduler_abort(j->sched, r->task);
out:
    if (in_cpu)
        cpu_leave(j->m);
    if (rc != 0 && kt_scheduler_in_flight(j->sched, r->task))
        kt_scheduler_abort(j->sched, r->task);
    if (st)
        kt_jobs_store_put(j->m, st);
    if (c)
        for (int i = 0; i < n; i++)
            cand_clear(&c[i]);
    free(c);
    free(idx);
    free(costs);
    free(states);
    return rc;
}

static void *round_main(void *arg)
{
    job_round_t *r = arg;
    job_t *j = r->job;
    int rc = round_run(r);
    if (rc != 0) {
        kt_err_prefix("task %d", r->task);
        job_fail(j, "round");
    }
#ifdef __GLIBC__
    /* The round's search freed all it allocated; hand the arenas' free
     * pages back (see malloc_settings). */
    malloc_trim(0);
#endif
    pthread_mutex_lock(&j->mu);
    j->reserved -= r->n;
    j->in_flight--;
    j->seq++;
    r->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Join the rounds that ended. Under j->mu. */
static void reap_rounds(job_t *j)
{
    for (job_round_t **pp = &j->rounds; *pp;) {
        job_round_t *r = *pp;
        if (r->done) {
            pthread_join(r->th, NULL);
            *pp = r->next;
            free(r);
        } else {
            pp = &r->next;
        }
    }
}

/* ---- The job thread ------------------------------------------------------------------------ */

static int job_arch(job_t *j);

/* The job's state, in the store first, then in memory (what clients are
 * told). A store that cannot write (disk full) is retried as a round's
 * commit is, without holding the store between attempts (reads go on): an
 * end ("done", "cancelled", "failed") the store missed would leave the job
 * "running" there, and a tracker restarted on the store would run it again,
 * a cancelled job included. Only a stopping tracker gives up (the job then
 * resumes where the store has it). */
static void set_state(job_t *j, const char *state)
{
    int rc, delay_ms = STORE_RETRY_MIN_MS, failures = 0;
    for (;;) {
        kt_store_t *st = kt_jobs_store_get(j->m);
        rc = kt_store_set_job_state(st, j->id, state);
        kt_jobs_store_put(j->m, st);
        if (!store_unwritable(rc) || atomic_load(&j->m->stopping))
            break;
        if (failures++ == 0)
            KT_ERROR("job %" PRId64 ": cannot store its state '%s' (%s); retrying", j->id, state,
                     kt_err_msg());
        job_note(j, "the store cannot commit: %s", kt_err_msg());
        for (int w = 0; w < delay_ms && !atomic_load(&j->m->stopping); w += 50)
            kt_sleep_ms(50);
        if (delay_ms < STORE_RETRY_MAX_MS)
            delay_ms *= 2;
    }
    if (rc != 0) {
        KT_WARN("job %" PRId64 ": %s", j->id, kt_err_msg());
    } else if (failures > 0) {
        KT_INFO("job %" PRId64 ": state '%s' stored after %d failed attempts", j->id, state,
                failures);
        job_note(j, NULL);
    }
    pthread_mutex_lock(&j->mu);
    snprintf(j->state, sizeof j->state, "%s", state);
    j->seq++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Once its rounds are over a job no longer searches: its policies, cost
 * models and reference kernels go, and what is left (the view and the
 * scheduler, which status, watch and the page read) stays in memory with
 * the job until the tracker stops. Only the job thread touches these. */
static void release_search(job_t *j)
{
    if (j->tasks && j->view)
        for (int i = 0; i < j->view->ntasks; i++) {
            kt_search_candidate_clear(&j->tasks[i].ref);
            free(j->tasks[i].ref_art);
            j->tasks[i].ref_art = NULL;
            j->tasks[i].have_ref = 0;
            j->tasks[i].policy = NULL;
        }
    kt_search_family_free(j->fam);
    j->fam = NULL;
}

static void store_lock(void *user)
{
    kt_jobs_store_get(user);
}

static void store_unlock(void *user)
{
    kt_jobs_t *m = user;
    kt_jobs_store_put(m, m->store);
}

/* The store model of the job's target and device key (search.h), on this
 * job thread (never an RPC handler's) in a CPU slot like a round's
 * training. At the start (`install`) the job's xgb models start from it,
 * and it is trained first only when the key has none usable, so that a
 * stale model does not delay the first round; at the end, after the job's
 * last commit, it is retrained when stale, so the next job of the key
 * starts from what this one measured. A job is tuned without it when
 * anything fails: said in the log, never fatal. */
static void job_store_model(job_t *j, int install)
{
    kt_jobs_t *m = j->m;
    const kt_store_job_t *sj = &j->view->info->job;
    if (m->dispatch_only || atomic_load(&m->stopping))
        return;
    install &= j->fam != NULL;
    kt_search_store_ref_t ref = {m->store, store_lock, store_unlock, m, &m->stopping};
    kt_search_store_model_t sm;
    if (install)
        job_note(j, "reading the store's cost model of %s on %s", sj->target, sj->runner_key);
    pthread_mutex_lock(&m->model_mu);
    int rc = cpu_enter(j, 0);
    if (rc != 0) {   /* the job stops (cancelled, failed) or the tracker does */
        pthread_mutex_unlock(&m->model_mu);
        if (install)
            job_note(j, NULL);
        return;
    }
    rc = kt_search_store_model(&ref, sj->target, sj->runner_key,
                               install ? KT_SEARCH_STORE_MODEL_LOAD | KT_SEARCH_STORE_MODEL_BUILD
                                       : KT_SEARCH_STORE_MODEL_TRAIN,
                               &sm);
    cpu_leave(m);
    pthread_mutex_unlock(&m->model_mu);
    if (install)
        job_note(j, NULL);
    if (rc != 0) {
        KT_WARN("job %" PRId64 ": store model: %s", j->id, kt_err_msg());
        return;
    }
    if (sm.warn)
        KT_WARN("job %" PRId64 ": store model of %s on %s: %s", j->id, sj->target,
                sj->runner_key, sm.note);
    else if (sm.trained)
        KT_INFO("job %" PRId64 ": store model of %s on %s: %s", j->id, sj->target,
                sj->runner_key, sm.note);
    int took = sm.model ? kt_search_family_set_prior(j->fam, sm.model) : 0;
    if (took > 0) {
        pthread_mutex_lock(&j->mu);
        snprintf(j->store_model, sizeof j->store_model, "v%" PRId64 "/%" PRId64, sm.version,
                 sm.records);
        pthread_mutex_unlock(&j->mu);
        KT_INFO("job %" PRId64 ": its cost model starts from the store model v%" PRId64
                " of %s on %s (%" PRId64 " records)",
                j->id, sm.version, sj->target, sj->runner_key, sm.records);
    } else if (took < 0) {
        KT_WARN("job %" PRId64 ": the store model is not used: %s", j->id, kt_err_msg());
    }
    kt_search_store_model_clear(&sm);
#ifdef __GLIBC__
    if (sm.trained)   /* a training's freed pages, as after a round */
        malloc_trim(0);
#endif
}

static void *job_main(void *arg)
{
    job_t *j = arg;
    kt_jobs_t *m = j->m;
    const char *key = j->view->info->job.runner_key;
    /* Before any round (and while the job may wait for a runner): the
     * first rounds are then scored by what the key's records taught. */
    if (!job_stopping(j) && j->use_store_model && kt_search_family_num_learned(j->fam) > 0)
        job_store_model(j, 1);
    /* Queued until the key has a runner: nothing can be measured before, and
     * a cuda job's builds need the GPU's arch. */
    for (;;) {
        int total, free_;
        key_runners(m->reg, key, &total, &free_);
        if (job_stopping(j) || (total > 0 && (!j->cuda || job_arch(j))))
            break;
        job_note(j, total == 0 ? "waiting for a runner of key '%s' (none registered)"
                               : "waiting for a runner of key '%s' that describes its GPU",
                 key);
        kt_sleep_ms(POLL_MS);
    }
    job_note(j, NULL);
    if (!job_stopping(j))
        set_state(j, "running");
    int done = 0;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        reap_rounds(j);
        int in_flight = j->in_flight;
        pthread_mutex_unlock(&j->mu);
        if (job_stopping(j) || done) {
            if (in_flight == 0)
                break;
        } else {
            int total, free_;
            key_runners(m->reg, key, &total, &free_);
            /* Rounds in flight follow the runners: enough candidates for
             * every runner of the key twice (one part measuring, one
             * queued behind it), plus one round per CPU slot being
             * searched meanwhile. More would only pick tasks earlier. */
            int per_round = kt_scheduler_measures_per_round(j->sched);
            per_round = per_round > 0 ? per_round : 1;
            int limit = (2 * (total > 0 ? total : 1) + per_round - 1) / per_round + m->cpu_slots;
            while (in_flight < limit && !job_stopping(j)) {
                int task, n;
                int rc = kt_scheduler_next(j->sched, &task, &n);
                if (rc == KT_SCHEDULER_BUSY)
                    break;
                if (rc == KT_SCHEDULER_DONE) {
                    done = 1;
                    break;
                }
                if (rc < 0) {
                    job_fail(j, "task scheduler");
                    break;
                }
                job_round_t *r = calloc(1, sizeof *r);
                pthread_mutex_lock(&j->mu);
                int64_t left = j->view->opts.trials - j->reserved;
                if (n > left && left > 0)
                    n = (int)left;
                if (r) {
                    *r = (job_round_t){.job = j, .task = task, .n = n};
                    j->reserved += n;
                    j->in_flight++;
                }
                if (!r || pthread_create(&r->th, NULL, round_main, r) != 0) {
                    if (r) {
                        j->reserved -= n;
                        j->in_flight--;
                    }
                    pthread_mutex_unlock(&j->mu);
                    free(r);
                    kt_scheduler_abort(j->sched, task);
                    kt_err_set(KT_ENOMEM, "cannot start a round thread");
                    job_fail(j, "dispatch");
                    break;
                }
                r->next = j->rounds;
                j->rounds = r;
                in_flight = j->in_flight;
                pthread_mutex_unlock(&j->mu);
            }
            if (done && in_flight == 0)
                break;
        }
        pthread_mutex_lock(&j->mu);
        struct timespec ts;
        ts = kt_time_mono_after_ms(1000);
        int any_done = 0;
        for (job_round_t *r = j->rounds; r; r = r->next)
            any_done |= r->done;
        if (!any_done)
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_lock(&j->mu);
    reap_rounds(j);
    pthread_mutex_unlock(&j->mu);
    release_search(j);

    const char *final = NULL;
    char msg[512] = "";
    if (atomic_load(&j->failed)) {
        final = "failed";
    } else if (atomic_load(&j->cancel)) {
        final = "cancelled";
        snprintf(msg, sizeof msg, "cancelled after %lld trials",
                 (long long)kt_scheduler_total_trials(j->sched));
    } else if (done) {
        final = "done";
        snprintf(msg, sizeof msg, "%s", kt_scheduler_finish_message(j->sched));
    }
    if (final) {
        pthread_mutex_lock(&j->mu);
        if (!j->message && *msg)
            j->message = kt_strdup(msg);
        pthread_mutex_unlock(&j->mu);
        set_state(j, final);
        KT_INFO("job %" PRId64 " %s: %s", j->id, final, j->message ? j->message : "");
    } else {
        KT_INFO("job %" PRId64 " stopped with the tracker after %lld trials; it resumes when the "
                "tracker starts again on this store", j->id,
                (long long)kt_scheduler_total_trials(j->sched));
    }
    pthread_mutex_lock(&j->mu);
    j->finished = 1;
    j->seq++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    /* After the job's last commit: the next job of the key starts from a
     * model that knows this one's records (a stopping tracker skips it). */
    job_store_model(j, 0);
    atomic_fetch_sub(&m->threads_live, 1);
    return NULL;
}

/* ---- Loading a job --------------------------------------------------------------------------- */

static void job_free(job_t *j)
{
    if (!j)
        return;
    if (j->tasks && j->view)
        for (int i = 0; i < j->view->ntasks; i++) {
            kt_search_candidate_clear(&j->tasks[i].ref);
            free(j->tasks[i].ref_art);
        }
    free(j->tasks);
    kt_search_family_free(j->fam);
    kt_scheduler_free(j->sched);
    kt_job_view_free(j->view);
    json_decref(j->curve);
    free(j->message);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static int preload(int task, const kt_record_t *r, void *ctx)
{
    job_t *j = ctx;
    j->tasks[task].known++;
    kt_job_best_note(&j->tasks[task].best, r);   /* not listed yet: no lock */
    if (j->load_curve && kt_job_curve_add(task, r, j->load_curve) != 0)
        return kt_err_code();
    double cost = r->error_code == KT_MEASURE_NO_ERROR ? r->mean_cost : -1;
    if (kt_search_preload(j->tasks[task].policy, r->state_json, cost) != 0)
        KT_DEBUG("job %" PRId64 ": task %d: stored state skipped: %s", j->id, task, kt_err_msg());
    return 0;
}

/* Schedule transfer: each task without a record of its own (a new task:
 * a resumed one has its first round stored) gets its first round seeded
 * with the best states of the nearest stored workloads on the job's target
 * and runner key, re-fitted to its shapes. Looked up once, at load, so that
 * what a job proposes depends on the store it started from, not on how its
 * tasks' rounds interleave. A failed lookup only costs the seeds. */
static void transfer_seed(job_t *j, kt_store_t *st, const kt_search_opts_t *so)
{
    kt_job_view_t *v = j->view;
    if (!v->opts.transfer || so->transfer == 0)
        return;
    for (int i = 0; i < v->ntasks; i++) {
        job_task_t *t = &j->tasks[i];
        if (t->known > 0)
            continue;
        kt_transfer_set_t set;
        int n = kt_transfer_seed(t->policy, st, v->wl[i], t->target, v->info->job.runner_key,
                                 so->transfer, so->transfer_workloads, &set);
        if (n < 0)
            KT_WARN("job %" PRId64 ": task %d: no schedule transfer: %s", j->id, i,
                    kt_err_msg());
        else if (set.nworkloads > 0)
            KT_INFO("job %" PRId64 ": task %d: first round seeded with %d states re-fitted "
                    "from %d records of the %d nearest stored workloads (nearest %s at "
                    "distance %.3g)%s%s",
                    j->id, i, n, set.nrecords, set.nworkloads,
                    set.n > 0 ? set.items[0].source_key : "-",
                    set.n > 0 ? set.items[0].distance : 0.0,
                    set.dropped ? "; dropped, first: " : "", set.dropped ? set.reasons[0] : "");
        kt_transfer_set_clear(&set);
    }
}

/* The sched parameters of the job's runners: a registered runner of the key
 * describes its device; else this host. */
static void job_params(kt_jobs_t *m, const char *key, kt_sched_params_t *p)
{
    kt_sched_params_default(p);
    kt_peer_t *peers = NULL;
    int n = 0;
    if (kt_registry_peers(m->reg, &peers, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        const kt_peer_t *q = &peers[i];
        if (q->role != KT_PEER_RUNNER || strcmp(q->key, key) != 0 || !q->device)
            continue;
        if (q->device->num_cores > 0)
            p->num_cores = q->device->num_cores;
        if (q->device->vector_unit_bytes > 0)
            p->vector_bytes = q->device->vector_unit_bytes;
        break;
    }
    kt_peer_list_free(peers, n);
}

/* The device of a registered cuda runner of `key` (a copy), or 0. */
static int key_gpu(kt_jobs_t *m, const char *key, kt_hw_params_t *hw)
{
    kt_peer_t *peers = NULL;
    int n = 0, found = 0;
    if (kt_registry_peers(m->reg, &peers, &n) != 0)
        return 0;
    for (int i = 0; i < n && !found; i++) {
        const kt_peer_t *q = &peers[i];
        found = q->role == KT_PEER_RUNNER && strcmp(q->key, key) == 0 && q->device &&
                q->device->target && strcmp(q->device->target, "cuda") == 0 &&
                kt_hw_params_from_proto(q->device, hw) == 0;
    }
    kt_peer_list_free(peers, n);
    return found;
}

/* The GPU limits a cuda job searches within: those of a registered runner
 * of its key, else the GPU defaults (sm_90's limits, which every GPU since
 * sm_70 meets), the arch then learnt from the first runner (job_arch). */
static void job_params_gpu(job_t *j)
{
    kt_hw_params_t hw;
    const char *key = j->view->info->job.runner_key;
    if (key_gpu(j->m, key, &hw) && kt_sched_params_from_hw(&hw, &j->params) == 0) {
        snprintf(j->arch, sizeof j->arch, "%s", hw.arch);
        return;
    }
    kt_sched_params_default_gpu(&j->params);
    KT_INFO("job %" PRId64 ": no cuda runner of key %s yet: searching within the default GPU "
            "limits", j->id, key);
}

/* 1 once the cuda job knows the arch its kernels are built for. */
static int job_arch(job_t *j)
{
    kt_hw_params_t hw;
    if (!j->arch[0] && key_gpu(j->m, j->view->info->job.runner_key, &hw))
        snprintf(j->arch, sizeof j->arch, "%s", hw.arch);
    return j->arch[0] != 0;
}

/* A job from the store, with its policies preloaded and its scheduler
 * restored from the records. */
static job_t *job_load(kt_jobs_t *m, kt_store_t *st, int64_t id)
{
    job_t *j = calloc(1, sizeof *j);
    if (!j) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    cond_init_mono(&j->cv);
    j->m = m;
    j->id = id;
    if (!(j->curve = json_array())) {
        kt_err_set(KT_ENOMEM, "out of memory");
        goto fail;
    }
    if (kt_job_view_load(st, id, &j->view) != 0)
        goto fail;
    kt_job_view_t *v = j->view;
    snprintf(j->state, sizeof j->state, "%s", v->info->job.state);
    job_params(m, v->info->job.runner_key, &j->params);
    if ((j->cuda = strcmp(v->info->job.target, "cuda") == 0))
        job_params_gpu(j);
    if (!(j->tasks = calloc((size_t)v->ntasks, sizeof *j->tasks))) {
        kt_err_set(KT_ENOMEM, "out of memory");
        goto fail;
    }
    /* One policy per task (task i's seed: seed * 1000003 + i); the family
     * policies share a cost model per family. */
    kt_search_opts_t so;
    kt_search_opts_default(&so);
    so.policy = v->info->job.policy;
    so.seed = v->opts.seed;
    if (kt_search_opts_set(&so, v->opts.search_params) != 0)
        goto fail;
    j->use_store_model = so.store_model;
    if (!(j->fam = kt_search_family_new((const kt_workload_t *const *)v->wl, v->ntasks,
                                        &j->params, &so)))
        goto fail;
    kt_search_family_set_pool(j->fam, m->pool);
    for (int i = 0; i < v->ntasks; i++) {
        job_task_t *t = &j->tasks[i];
        t->m = m;
        t->key = v->info->tasks[i].workload_key;
        t->target = v->info->job.target;
        t->policy = kt_search_family_policy(j->fam, i);
        kt_search_set_has_measured(t->policy, has_measured, t);
        kt_job_best_init(&t->best);
    }
    kt_scheduler_config_t cfg;
    kt_scheduler_config_default(&cfg);
    cfg.table_out = NULL;
    cfg.max_in_flight = v->ntasks;
    cfg.latency_log = on_latency;
    cfg.latency_user = j;
    kt_store_latency_t *pts = NULL;
    size_t npts = 0;
    if (kt_store_read_latency(st, id, &pts, &npts) != 0)
        npts = 0;
    /* The curve: what the records the job continues from draw (read in the
     * same walk that restores the scheduler) up to its latency log, which
     * starts only where the job first ran or last resumed. */
    kt_job_curve_t rc_curve = {0};
    j->load_curve = &rc_curve;
    j->sched = kt_job_view_scheduler(st, v, &cfg, preload, j);
    j->load_curve = NULL;
    json_t *history = j->sched ? kt_job_curve_with_log(&rc_curve, v,
                                                       kt_scheduler_measures_per_round(j->sched),
                                                       pts, npts)
                               : NULL;
    kt_job_curve_clear(&rc_curve);
    free(pts);
    if (!history)
        goto fail;
    json_array_extend(j->curve, history);
    json_decref(history);
    j->reserved = kt_scheduler_total_trials(j->sched);
    if (!m->dispatch_only)
        transfer_seed(j, st, &so);
    return j;
fail:
    kt_err_prefix("job %" PRId64, id);
    job_free(j);
    return NULL;
}

/* Add a loaded job to the manager and start its thread. */
static int job_start(kt_jobs_t *m, job_t *j)
{
    pthread_mutex_lock(&m->mu);
    atomic_fetch_add(&m->threads_live, 1);
    if (pthread_create(&j->thread, NULL, job_main, j) != 0) {
        atomic_fetch_sub(&m->threads_live, 1);
        pthread_mutex_unlock(&m->mu);
        return kt_err_set(KT_ENOMEM, "cannot start the job thread");
    }
    j->thread_started = 1;
    j->next = m->jobs;
    m->jobs = j;
    pthread_mutex_unlock(&m->mu);
    int64_t restored = kt_scheduler_total_trials(j->sched);
    KT_INFO("job %" PRId64 ": %d task%s, %lld trials (%lld stored), target %s, runner key %s, "
            "%s, %s", j->id, j->view->ntasks, j->view->ntasks == 1 ? "" : "s",
            (long long)j->view->opts.trials, (long long)restored, j->view->info->job.target,
            j->view->info->job.runner_key, j->view->info->job.strategy,
            j->view->info->job.policy);
    return 0;
}

/* ---- Submit --------------------------------------------------------------------------------- */

/* The job's target, strategy, policy and runner key with defaults applied. */
static void job_names(const Ktune__V1__Job *in, const char **target, const char **strategy,
                      const char **policy, const char **key)
{
    *target = in->target && *in->target ? in->target : "cpu";
    *strategy = in->strategy && *in->strategy ? in->strategy : "gradient";
    *policy = in->policy && *in->policy ? in->policy : "sketch.xgb";
    *key = in->runner_key && *in->runner_key ? in->runner_key : "cpu";
}

int kt_jobs_check_job(const Ktune__V1__Job *in, kt_job_opts_t *opts, kt_workload_t **wl)
{
    if (!in || in->n_tasks == 0)
        return kt_err_set(KT_EINVAL, "a job needs at least one task");
    if (in->n_tasks > KT_LIMIT_TASKS)
        return kt_err_set(KT_ELIMIT, "%zu tasks in one job; at most %d (KT_LIMIT_TASKS)",
                          in->n_tasks, KT_LIMIT_TASKS);
    const char *target, *strategy, *policy, *key;
    job_names(in, &target, &strategy, &policy, &key);
    if (strcmp(target, "cpu") != 0 && strcmp(target, "cuda") != 0)
        return kt_err_set(KT_EINVAL, "unknown target '%s' (cpu or cuda)", target);
    if (kt_scheduler_strategy_parse(strategy) < 0)
        return kt_err_set(KT_EINVAL,
                          "unknown strategy '%s' (gradient, round-robin or sequential)", strategy);
    if (kt_search_policy_check(policy) != 0)
        return kt_err_code();
    if (!kt_registry_key_ok(key))
        return kt_err_set(KT_EINVAL, "runner key '%s': letters, digits and ._:- only", key);
    if (in->priority < KT_JOB_PRIORITY_MIN || in->priority > KT_JOB_PRIORITY_MAX)
        return kt_err_set(KT_EINVAL, "priority %d: want %d..%d", in->priority,
                          KT_JOB_PRIORITY_MIN, KT_JOB_PRIORITY_MAX);
    kt_job_opts_t o;
    int rc = kt_job_opts_from_proto(in->options, opts ? opts : &o);
    if (rc != 0)
        return rc;
    if (in->options && in->options->more_trials < 0)
        return kt_err_set(KT_EINVAL, "more_trials (%d) must not be negative",
                          in->options->more_trials);
    /* With more_trials the budget is set from the store at submission. */
    int more = in->options && in->options->more_trials > 0;
    if (!more && (opts ? opts : &o)->trials < (int64_t)in->n_tasks)
        return kt_err_set(KT_EINVAL,
                          "num_measure_trials (%lld) must be at least the number of tasks (%zu)",
                          (long long)(opts ? opts : &o)->trials, in->n_tasks);
    int n = (int)in->n_tasks;
    /* Without the caller's array the workloads are parsed (duplicates need
     * every key) and freed here. */
    kt_workload_t **own = wl ? NULL : calloc((size_t)n, sizeof *own);
    if (!wl && !own)
        return kt_err_set(KT_ENOMEM, "out of memory");
    kt_workload_t **w = wl ? wl : own;
    for (int i = 0; rc == 0 && i < n; i++) {
        const Ktune__V1__Task *t = in->tasks[i];
        if (!t || !t->workload || !t->workload->json || !*t->workload->json) {
            rc = kt_err_set(KT_EINVAL, "task %d has no workload JSON", i);
        } else if (t->target && *t->target && strcmp(t->target, target) != 0) {
            rc = kt_err_set(KT_EINVAL, "task %d is for target '%s', the job for '%s'", i,
                            t->target, target);
        } else if (!(t->weight >= 0) || !isfinite(t->weight)) {
            rc = kt_err_set(KT_EINVAL, "task %d: weight must be >= 0", i);
        } else if (!(w[i] = kt_workload_parse(t->workload->json))) {
            rc = kt_err_code();
            kt_err_prefix("task %d", i);
        } else if (t->workload->key && *t->workload->key) {
            /* The key is derived from the JSON; one that disagrees says the
             * client meant another workload than it sent. */
            char *key = NULL;
            if ((rc = kt_workload_key_parse(t->workload->key, &key)) != 0)
                kt_err_prefix("task %d: workload key", i);
            else if (strcmp(key, kt_workload_key(w[i])) != 0)
                rc = kt_err_set(KT_EINVAL, "task %d: workload key %s is not its JSON's (%s)", i,
                                key, kt_workload_key(w[i]));
            free(key);
        }
        if (rc == 0 && w[i]) {
            for (int k = 0; rc == 0 && k < i; k++)
                if (strcmp(kt_workload_key(w[k]), kt_workload_key(w[i])) == 0)
                    rc = kt_err_set(KT_EINVAL, "tasks %d and %d have the same workload %s", k,
                                    i, kt_workload_key(w[i]));
        }
    }
    if (rc != 0 || own)
        for (int i = 0; i < n; i++) {
            kt_workload_free(w[i]);
            w[i] = NULL;
        }
    free(own);
    return rc;
}

/* KT_ELIMIT when one more job from `client` would pass KT_LIMIT_JOBS or
 * KT_LIMIT_JOBS_PER_CLIENT; under submit_mu. */
static int admit(kt_jobs_t *m, const char *client)
{
    int all = 0, mine = 0;
    /* Jobs are only ever prepended and live until kt_jobs_free, so the list
     * is walked without m->mu (a job's thread takes m->mu under j->mu). */
    pthread_mutex_lock(&m->mu);
    job_t *list = m->jobs;
    pthread_mutex_unlock(&m->mu);
    for (job_t *j = list; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        int active = !j->finished;
        pthread_mutex_unlock(&j->mu);
        all += active;
        mine += active && client && *client && strcmp(j->client, client) == 0;
    }
    if (all >= KT_LIMIT_JOBS)
        return kt_err_set(KT_ELIMIT, "%d jobs queued or running; at most %d (KT_LIMIT_JOBS)", all,
                          KT_LIMIT_JOBS);
    if (mine >= KT_LIMIT_JOBS_PER_CLIENT)
        return kt_err_set(KT_ELIMIT,
                          "%d jobs queued or running from this client; at most %d "
                          "(KT_LIMIT_JOBS_PER_CLIENT)",
                          mine, KT_LIMIT_JOBS_PER_CLIENT);
    return 0;
}

/* Records the store holds of these tasks: what a new job over them starts
 * from (job_view.h: a task's records are all of its workload and target). */
static int stored_trials(kt_store_t *s, kt_workload_t **wl, int n, const char *target,
                         int64_t *out)
{
    *out = 0;
    for (int i = 0; i < n; i++) {
        kt_store_filter_t f = {.workload_key = kt_workload_key(wl[i]), .target = target};
        kt_store_counts_t c;
        int rc = kt_store_count_records(s, &f, &c);
        if (rc != 0)
            return rc;
        *out += c.total;
    }
    return 0;
}

/* What a request id is stored with in the job's options: the request id
 * and a hash of the Job message as packed (by this tracker, so a client's
 * encoding does not matter): a retry carries the same message, and another
 * job sent under the same id is told apart. */
#define OPT_REQUEST_ID "request_id"
#define OPT_REQUEST_HASH "request_hash"

int kt_jobs_check_request_id(const char *rid)
{
    size_t n = rid ? strlen(rid) : 0;
    static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-";
    if (n > KT_JOBS_REQUEST_ID_MAX)
        return kt_err_set(KT_EINVAL, "request_id: %zu characters; at most %d", n,
                          KT_JOBS_REQUEST_ID_MAX);
    if (n > 0 && strspn(rid, ok) != n)
        return kt_err_set(KT_EINVAL, "request_id '%.*s': letters, digits and ._:- only",
                          KT_JOBS_REQUEST_ID_MAX, rid);
    return 0;
}

/* The OPT_REQUEST_HASH of a Job message: 16 hex digits and a NUL. */
static int job_digest(const Ktune__V1__Job *in, char out[17])
{
    size_t len = protobuf_c_message_get_packed_size(&in->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return kt_err_set(KT_ENOMEM, "out of memory");
    protobuf_c_message_pack(&in->base, buf);
    snprintf(out, 17, "%016" PRIx64, kt_hash64(buf, len));
    free(buf);
    return 0;
}

/* The job the store holds under request id `rid`: 0 with *id and *info
 * filled, KT_ENOTFOUND when there is none, KT_EINVAL when it was submitted
 * as another job. Under submit_mu. */
static int find_submitted(kt_jobs_t *m, const char *rid, const char *digest, int64_t *id,
                          kt_jobs_submit_info_t *info)
{
    kt_store_t *s = kt_jobs_store_get(m);
    int64_t found = 0;
    kt_store_job_info_t *ji = NULL;
    int rc = kt_store_find_job_option(s, OPT_REQUEST_ID, rid, &found);
    if (rc == 0)
        rc = kt_store_get_job(s, found, &ji);
    kt_jobs_store_put(m, s);
    if (rc != 0)
        return rc;
    json_t *oj = json_loads(ji->job.options_json, 0, NULL);
    const char *h = json_string_value(json_object_get(oj, OPT_REQUEST_HASH));
    if (!h || strcmp(h, digest) != 0) {
        rc = kt_err_set(KT_EINVAL,
                        "request_id '%s' is job %" PRId64 "'s, which was submitted as another "
                        "job: give every submission a request id of its own",
                        rid, found);
    } else {
        kt_job_opts_t o;
        info->budget = kt_job_opts_from_json(ji->job.options_json, &o) == 0 ? o.trials : 0;
        info->existing = 1;
        snprintf(info->notice, sizeof info->notice,
                 "request id %s was submitted before as job %" PRId64 " (%s): that job is the "
                 "answer, no other was made",
                 rid, found, ji->job.state);
        *id = found;
    }
    json_decref(oj);
    kt_store_job_info_free(ji);
    return rc;
}

static int submit(kt_jobs_t *m, const Ktune__V1__Job *in, const char *client, const char *rid,
                  const char *digest, int64_t *id, kt_jobs_submit_info_t *info);

int kt_jobs_submit(kt_jobs_t *m, const Ktune__V1__Job *in, int64_t *id)
{
    return kt_jobs_submit_ex(m, in, NULL, NULL, id, NULL);
}

int kt_jobs_submit_from(kt_jobs_t *m, const Ktune__V1__Job *in, const char *client, int64_t *id)
{
    return kt_jobs_submit_ex(m, in, client, NULL, id, NULL);
}

int kt_jobs_submit_info(kt_jobs_t *m, const Ktune__V1__Job *in, int64_t *id,
                        kt_jobs_submit_info_t *info)
{
    return kt_jobs_submit_ex(m, in, NULL, NULL, id, info);
}

int kt_jobs_submit_ex(kt_jobs_t *m, const Ktune__V1__Job *in, const char *client,
                      const char *request_id, int64_t *id, kt_jobs_submit_info_t *info)
{
    kt_jobs_submit_info_t dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    const char *rid = request_id && *request_id ? request_id : NULL;
    char digest[17] = "";
    if (rid && (kt_jobs_check_request_id(rid) != 0 || (in && job_digest(in, digest) != 0)))
        return kt_err_code();
    pthread_mutex_lock(&m->submit_mu);
    /* Looked up first: a retry is answered even while the tracker stops or
     * the client is at its limit of jobs, the first of them its own. */
    int rc = rid && in ? find_submitted(m, rid, digest, id, info) : KT_ENOTFOUND;
    if (rc == KT_ENOTFOUND) {
        kt_err_clear();
        rc = admit(m, client);
        if (rc == 0)
            rc = submit(m, in, client, rid, digest, id, info);
    }
    pthread_mutex_unlock(&m->submit_mu);
    return rc;
}

static int submit(kt_jobs_t *m, const Ktune__V1__Job *in, const char *client, const char *rid,
                  const char *digest, int64_t *id, kt_jobs_submit_info_t *info)
{
    if (atomic_load(&m->stopping))
        return kt_err_set(KT_ESTATE, "the tracker is stopping; submit again when it is back");
    if (!in || in->n_tasks == 0)
        return kt_err_set(KT_EINVAL, "a job needs at least one task");
    const char *target, *strategy, *policy, *key;
    job_names(in, &target, &strategy, &policy, &key);
    if (strcmp(target, "cuda") == 0 && !(in->runner_key && *in->runner_key))
        key = "cuda";   /* the CPU runners' default key cannot time CUDA kernels */
    int n = (int)in->n_tasks;
    kt_job_opts_t opts;
    kt_workload_t **wl = calloc((size_t)n, sizeof *wl);
    kt_store_task_t *tasks = calloc((size_t)n, sizeof *tasks);
    char *opts_text = NULL;
    int rc;
    if (!wl || !tasks) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = kt_jobs_check_job(in, &opts, wl)) != 0)
        goto out;
    int64_t stored = 0;
    rc = stored_trials(kt_jobs_store_get(m), wl, n, target, &stored);
    kt_jobs_store_put(m, m->store);
    if (rc != 0)
        goto out;
    if (in->options && in->options->more_trials > 0) {
        int64_t want = stored + in->options->more_trials;
        opts.trials = want > INT32_MAX ? INT32_MAX : want < n ? n : want;
    }
    info->stored_trials = stored;
    info->budget = opts.trials;
    if (stored >= opts.trials)
        snprintf(info->notice, sizeof info->notice,
                 "the store already holds %lld trials of these tasks, which covers the budget "
                 "of %lld trials: the job ends without measuring. To tune further, give a "
                 "larger --trials (more than %lld) or --more N (N trials beyond what is "
                 "stored)",
                 (long long)stored, (long long)opts.trials, (long long)stored);
    else if (stored > 0)
        snprintf(info->notice, sizeof info->notice,
                 "the store already holds %lld trials of these tasks: the job continues from "
                 "them and measures up to %lld more (budget %lld trials)",
                 (long long)stored, (long long)(opts.trials - stored), (long long)opts.trials);
    json_t *oj = kt_job_opts_to_json(&opts);
    if (oj && rid &&
        (json_object_set_new(oj, OPT_REQUEST_ID, json_string(rid)) != 0 ||
         json_object_set_new(oj, OPT_REQUEST_HASH, json_string(digest)) != 0)) {
        json_decref(oj);
        oj = NULL;
    }
    opts_text = oj ? json_dumps(oj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(oj);
    if (!opts_text) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        tasks[i] = (kt_store_task_t){.index = i,
                                     .workload_key = kt_workload_key(wl[i]),
                                     .weight = in->tasks[i]->weight > 0 ? in->tasks[i]->weight : 1,
                                     .target = target,
                                     .desc = in->tasks[i]->desc};
    kt_store_job_t job = {.created = kt_time_wall(),
                          .state = "queued",
                          .target = target,
                          .runner_key = key,
                          .strategy = strategy,
                          .policy = policy,
                          .options_json = opts_text,
                          .priority = in->priority};
    kt_jobs_store_get(m);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = kt_store_put_workload(m->store, kt_workload_key(wl[i]), kt_workload_json(wl[i]),
                                   kt_workload_flops(wl[i]));
    if (rc == 0)
        rc = kt_store_put_job(m->store, &job, tasks, n);
    job_t *j = rc == 0 ? job_load(m, m->store, job.id) : NULL;
    if (rc == 0 && !j) {
        rc = kt_err_code();
        kt_store_set_job_state(m->store, job.id, "failed");
    }
    kt_jobs_store_put(m, m->store);
    if (rc != 0)
        goto out;
    snprintf(j->client, sizeof j->client, "%s", client ? client : "");
    if ((rc = job_start(m, j)) != 0) {
        job_free(j);
        goto out;
    }
    *id = job.id;
out:
    for (int i = 0; wl && i < n; i++)
        kt_workload_free(wl[i]);
    free(wl);
    free(tasks);
    free(opts_text);
    return rc;
}

/* ---- Store handles ----------------------------------------------------------------------------- */

/* First come, first served, and re-entrant for the holder (a policy asks
 * the store through has_measured while a job is loaded under it). A plain
 * mutex is not fair: a search asking has_measured in a loop would take it
 * again and again while a round waiting to COMMIT starves. */
kt_store_t *kt_jobs_store_get(kt_jobs_t *m)
{
    pthread_t self = pthread_self();
    pthread_mutex_lock(&m->store_mu);
    if (m->store_depth > 0 && pthread_equal(m->store_owner, self)) {
        m->store_depth++;
    } else {
        uint64_t me = m->store_next++;
        while (me != m->store_serving || m->store_depth > 0)
            pthread_cond_wait(&m->store_cv, &m->store_mu);
        m->store_serving++;
        m->store_owner = self;
        m->store_depth = 1;
    }
    pthread_mutex_unlock(&m->store_mu);
    return m->store;
}

void kt_jobs_store_put(kt_jobs_t *m, kt_store_t *s)
{
    (void)s;
    pthread_mutex_lock(&m->store_mu);
    if (--m->store_depth == 0)
        pthread_cond_broadcast(&m->store_cv);
    pthread_mutex_unlock(&m->store_mu);
}

/* ---- Cancel, find ----------------------------------------------------------------------------- */

job_t *kt_jobs_find(kt_jobs_t *m, int64_t id)
{
    pthread_mutex_lock(&m->mu);
    job_t *j = m->jobs;
    while (j && j->id != id)
        j = j->next;
    pthread_mutex_unlock(&m->mu);
    return j;
}

int kt_jobs_cancel(kt_jobs_t *m, int64_t id, int wait_ms)
{
    job_t *j = kt_jobs_find(m, id);
    if (!j) {
        kt_jobs_store_get(m);
        kt_store_job_info_t *info = NULL;
        int rc = kt_store_get_job(m->store, id, &info);
        if (rc == 0) {
            rc = kt_err_set(KT_ESTATE, "job %lld is %s", (long long)id, info->job.state);
            kt_store_job_info_free(info);
        } else if (rc == KT_ENOTFOUND) {
            kt_err_set(KT_ENOTFOUND, "no job %lld", (long long)id);
        }
        kt_jobs_store_put(m, m->store);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    if (j->finished) {
        int rc = kt_err_set(KT_ESTATE, "job %lld is %s", (long long)id, j->state);
        pthread_mutex_unlock(&j->mu);
        return rc;
    }
    atomic_store(&j->cancel, 1);
    pthread_cond_broadcast(&j->cv);
    struct timespec ts;
    ts = kt_time_mono_after_ms(wait_ms);
    while (!j->finished && pthread_cond_timedwait(&j->cv, &j->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&j->mu);
    KT_INFO("job %lld: cancelled", (long long)id);
    return 0;
}

/* ---- Status snapshot and metrics ------------------------------------------------------------ */

json_t *kt_jobs_job_json(job_t *j)
{
    json_t *o = kt_scheduler_snapshot(j->sched);
    if (!o)
        return NULL;
    const kt_store_job_t *sj = &j->view->info->job;
    pthread_mutex_lock(&j->mu);
    const char *sp = j->view->opts.search_params;
    json_t *own = json_pack("{s:I, s:s, s:s, s:s, s:o, s:s, s:i, s:f, s:s, s:O, s:o}", "id",
                            (json_int_t)j->id, "state", j->state, "target", sj->target, "policy",
                            sj->policy, "search_params", *sp ? json_string(sp) : json_null(),
                            "runner_key", sj->runner_key, "priority", sj->priority,
                            "created", sj->created, "message",
                            j->message ? j->message : j->waiting,
                            "curve", j->curve, "store_model",
                            j->store_model[0] ? json_string(j->store_model) : json_null());
    pthread_mutex_unlock(&j->mu);
    if (!own || json_object_update(o, own) != 0) {
        json_decref(own);
        json_decref(o);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    json_decref(own);
    /* The layers each task stands for (stored with the job) and the origin
     * of its best record, beside its key. */
    int nt = j->view->ntasks;
    kt_job_best_t *best = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *best);
    if (best) {
        pthread_mutex_lock(&j->mu);
        for (int i = 0; i < nt; i++)
            best[i] = j->tasks[i].best;
        pthread_mutex_unlock(&j->mu);
    }
    if (!best || kt_job_view_annotate_tasks(o, j->view, best) != 0) {
        free(best);
        json_decref(o);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    free(best);
    return o;
}

static int job_loaded(job_t *list, int64_t id)
{
    for (job_t *j = list; j; j = j->next)
        if (j->id == id)
            return 1;
    return 0;
}

/* What stored_job_json collects on its one walk of a job's records: the
 * curve and each task's best with its origin. */
typedef struct {
    kt_job_curve_t curve;
    kt_job_best_t *best;
} stored_walk_t;

static int stored_record(int task, const kt_record_t *r, void *ctx)
{
    stored_walk_t *w = ctx;
    kt_job_best_note(&w->best[task], r);
    return kt_job_curve_add(task, r, &w->curve);
}

/* A job of the store as the snapshot shows it: the scheduler's view rebuilt
 * from its tasks' records, its identity, and its latency log as the curve
 * (or, without one, the curve its records draw). *nrecs counts the records
 * read. NULL (and kt_err) when it cannot be read; the caller skips it. */
static json_t *stored_job_json(kt_store_t *st, int64_t id, size_t *nrecs)
{
    kt_job_view_t *v = NULL;
    if (kt_job_view_load(st, id, &v) != 0)
        return NULL;
    kt_scheduler_config_t cfg;
    kt_scheduler_config_default(&cfg);
    cfg.table_out = NULL;
    cfg.max_in_flight = v->ntasks;
    kt_store_latency_t *pts = NULL;
    size_t npts = 0;
    if (kt_store_read_latency(st, id, &pts, &npts) != 0)
        npts = 0;
    /* The records are walked once for the table; the curve and each task's
     * best collect them on the way (they draw the curve before the latency
     * log's first point). */
    stored_walk_t w = {.best = malloc((size_t)(v->ntasks > 0 ? v->ntasks : 1) * sizeof *w.best)};
    for (int i = 0; w.best && i < v->ntasks; i++)
        kt_job_best_init(&w.best[i]);
    kt_scheduler_t *sched = w.best ? kt_job_view_scheduler(st, v, &cfg, stored_record, &w) : NULL;
    *nrecs += w.curve.n;
    json_t *o = sched ? kt_scheduler_snapshot(sched) : NULL;
    json_t *curve = o ? kt_job_curve_with_log(&w.curve, v,
                                              kt_scheduler_measures_per_round(sched), pts, npts)
                      : NULL;
    kt_scheduler_free(sched);
    kt_job_curve_clear(&w.curve);
    free(pts);
    const kt_store_job_t *sj = &v->info->job;
    const char *sp = v->opts.search_params;
    json_t *own = o && curve ? json_pack("{s:I, s:s, s:s, s:s, s:o, s:s, s:i, s:f, s:O}", "id",
                                         (json_int_t)id, "state", sj->state, "target",
                                         sj->target, "policy", sj->policy, "search_params",
                                         *sp ? json_string(sp) : json_null(), "runner_key",
                                         sj->runner_key, "priority", sj->priority, "created",
                                         sj->created, "curve", curve)
                             : NULL;
    json_decref(curve);
    int ok = own && json_object_update(o, own) == 0 &&
             kt_job_view_annotate_tasks(o, v, w.best) == 0;
    json_decref(own);
    free(w.best);
    kt_job_view_free(v);
    if (!ok) {
        json_decref(o);
        if (kt_err_code() == KT_OK)
            kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return o;
}

static int job_id_desc(const void *a, const void *b)
{
    const job_t *x = *(job_t *const *)a, *y = *(job_t *const *)b;
    return (x->id < y->id) - (x->id > y->id);
}

/* The store's size, counts and records per device key for the snapshot's
 * "store", read at most once per KT_JOBS_STATS_TTL_S: counting scans the
 * records (an index of them), which at millions of records takes long
 * enough that a status page polled every second must not redo it. A new
 * reference, or NULL when the store could not be read (said in the log). */
#define KT_JOBS_STATS_TTL_S 30.0
static json_t *store_stats_json(kt_jobs_t *m)
{
    pthread_mutex_lock(&m->stats_mu);
    double now = kt_time_mono();
    if (!m->stats || now - m->stats_at >= KT_JOBS_STATS_TTL_S) {
        kt_store_stats_t st = {0};
        kt_store_t *s = kt_jobs_store_get(m);
        int rc = kt_store_stats(s, &st);
        const char *path = kt_store_path(s);
        kt_jobs_store_put(m, s);
        json_t *o = rc == 0 ? kt_store_stats_json(&st, path) : NULL;
        if (rc != 0)
            KT_WARN("status: reading the store's counts: %s", kt_err_msg());
        kt_store_stats_clear(&st);
        if (o) {
            json_decref(m->stats);
            m->stats = o;
            m->stats_at = now;
        }
    }
    json_t *out = m->stats ? json_deep_copy(m->stats) : NULL;
    if (out)   /* how old the counts are: they are read at most every TTL */
        json_object_set_new(out, "age_s", json_real(now - m->stats_at));
    pthread_mutex_unlock(&m->stats_mu);
    return out;
}

/* The jobs of `page` in one order: this tracker's own (live) jobs, the most
 * recent first, then the store's others (they ended before it started), the
 * most recent first; "jobs_total" counts both. Only the page's stored jobs
 * are read from their records, so a page costs the same with 20 jobs in the
 * store as with thousands (listing the ids is one indexed query). */
static int snapshot(void *user, json_t *snap, const kt_http_page_t *page)
{
    kt_jobs_t *m = user;
    json_t *jobs = json_array();
    if (!jobs)
        return kt_err_set(KT_ENOMEM, "out of memory");
    pthread_mutex_lock(&m->mu);
    job_t *list = m->jobs;
    pthread_mutex_unlock(&m->mu);
    /* Jobs are only ever prepended and live until kt_jobs_free. */
    size_t loaded = 0;
    for (job_t *j = list; j; j = j->next)
        loaded++;
    job_t **live = loaded ? malloc(loaded * sizeof *live) : NULL;
    if (loaded && !live) {
        json_decref(jobs);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    loaded = 0;
    for (job_t *j = list; j; j = j->next)
        live[loaded++] = j;
    /* Resumed jobs are listed in resume order, submitted ones before them. */
    if (loaded > 1)
        qsort(live, loaded, sizeof *live, job_id_desc);
    uint64_t first = (uint64_t)page->offset, end = first + (uint64_t)page->limit;
    for (size_t k = (size_t)(first < loaded ? first : loaded); k < loaded && k < end; k++) {
        json_t *o = kt_jobs_job_json(live[k]);
        if (!o) {
            free(live);
            json_decref(jobs);
            return kt_err_code();
        }
        json_array_append_new(jobs, o);
    }
    free(live);
    int64_t *ids = NULL;
    size_t nids = 0, nrecs = 0;
    kt_store_t *st = kt_jobs_store_get(m);
    int rc = kt_store_list_jobs(st, NULL, &ids, &nids);
    uint64_t pos = loaded;   /* the next stored job's place in the whole order */
    for (size_t k = nids; rc == 0 && k > 0; k--) {
        if (job_loaded(list, ids[k - 1]))
            continue;
        if (pos++ < first || pos > end)
            continue;
        json_t *o = stored_job_json(st, ids[k - 1], &nrecs);
        if (!o) {
            KT_WARN("status: job %lld of the store: %s", (long long)ids[k - 1], kt_err_msg());
            continue;
        }
        json_array_append_new(jobs, o);
    }
    kt_jobs_store_put(m, st);
    free(ids);
    kt_metrics_add(m->m_status_records, NULL, (double)nrecs);
    if (rc != 0)
        KT_WARN("status: listing the store's jobs: %s", kt_err_msg());
    json_object_set_new(snap, "jobs_total", json_integer((json_int_t)pos));
    json_t *stats = store_stats_json(m);
    if (stats)
        json_object_set_new(snap, "store", stats);
    return json_object_set_new(snap, "jobs", jobs) == 0 ? 0 : kt_err_set(KT_ENOMEM, "oom");
}

static void collect(void *user, kt_metrics_t *metrics)
{
    (void)metrics;
    kt_jobs_t *m = user;
    static const char *states[] = {"queued", "running", "done", "cancelled", "failed"};
    int count[5] = {0};
    pthread_mutex_lock(&m->mu);
    job_t *list = m->jobs;
    for (job_t *j = m->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        for (int i = 0; i < 5; i++)
            count[i] += strcmp(j->state, states[i]) == 0;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&m->mu);
    /* The store's jobs this tracker has not loaded count by their stored
     * state, so the numbers survive a restart (as `ktune status` shows). */
    kt_store_t *st = kt_jobs_store_get(m);
    for (int i = 0; i < 5; i++) {
        int64_t *ids = NULL;
        size_t n = 0;
        if (kt_store_list_jobs(st, states[i], &ids, &n) == 0)
            for (size_t k = 0; k < n; k++)
                count[i] += !job_loaded(list, ids[k]);
        free(ids);
    }
    kt_jobs_store_put(m, st);
    for (int i = 0; i < 5; i++) {
        const char *labels[] = {states[i]};
        kt_metrics_set(m->m_jobs, labels, count[i]);
    }
}

/* ---- Create / start / stop ---------------------------------------------------------------------- */

#ifdef __GLIBC__
/* Each round runs on a thread of its own, which glibc serves from one of up
 * to 8 malloc arenas per core. A round's search frees the few MiB it
 * allocates, but the arenas keep the pages: free chunks inside an arena
 * (malloc_trim gives those back as a round ends) and its top, which
 * malloc_trim leaves alone outside the main arena and free() trims only
 * past a threshold that glibc raises up to 64 MiB as large blocks come and
 * go. Left so, a tracker's RSS grew by 4-5 MiB per job while its heap in
 * use grew by 0.1 MiB (deploy/soak.sh; tests/test_jobs.c,
 * jobs_finished_jobs_do_not_grow_the_tracker). A fixed threshold keeps
 * every arena's top small (and large blocks mmapped). */
static void malloc_settings(void)
{
    mallopt(M_TRIM_THRESHOLD, KT_JOBS_TRIM_THRESHOLD);
}
#endif

kt_jobs_t *kt_jobs_new(kt_tracker_t *t, const char *db_path)
{
#ifdef __GLIBC__
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, malloc_settings);
#endif
    kt_jobs_t *m = calloc(1, sizeof *m);
    if (!m) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->submit_mu, NULL);
    pthread_mutex_init(&m->stats_mu, NULL);
    pthread_mutex_init(&m->model_mu, NULL);
    cond_init_mono(&m->cv);
    pthread_mutex_init(&m->commit_mu, NULL);
    pthread_cond_init(&m->commit_cv, NULL);
    pthread_mutex_init(&m->store_mu, NULL);
    pthread_cond_init(&m->store_cv, NULL);
    pthread_mutex_init(&m->parts_mu, NULL);
    cond_init_mono(&m->parts_cv);   /* kt_time_mono_after_ms is CLOCK_MONOTONIC */
    pthread_cond_init(&m->parts_gone_cv, NULL);
    m->parts_tail = &m->parts_head;
    m->t = t;
    m->reg = kt_tracker_registry(t);
    const char *stub = getenv("KT_BENCH_DISPATCH_ONLY");
    if ((m->dispatch_only = stub && strcmp(stub, "1") == 0))
        KT_WARN("KT_BENCH_DISPATCH_ONLY=1: jobs measure placeholders, not schedules "
                "(a benchmark of dispatch; never for tuning)");
    m->cpu_slots = kt_pool_online_cores();
    if (!(m->pool = kt_pool_new(m->cpu_slots)))
        goto fail;
    if (!(m->db = kt_strdup(db_path && *db_path ? db_path : KT_JOBS_DEFAULT_DB)))
        goto fail;
    if (!(m->store = kt_store_open(m->db, KT_STORE_CREATE))) {
        kt_err_prefix("store %s", m->db);
        goto fail;
    }
    /* A damaged file is refused before any job runs on it: resuming from it
     * or writing more records could spread the damage (restore a backup or
     * `ktune records export` what is readable). */
    if (kt_store_integrity_check(m->store) != 0) {
        kt_err_prefix("store %s is damaged (PRAGMA integrity_check)", m->db);
        goto fail;
    }

    kt_metrics_t *mx = kt_tracker_metrics(t);
    static const char *err_l[] = {"error"}, *state_l[] = {"state"}, *method_l[] = {"method"};
    m->m_measurements = kt_metrics_counter(mx, "measurements_total",
                                           "Measurements committed to the store, by error code",
                                           1, err_l);
    m->m_rounds = kt_metrics_counter(mx, "rounds_total", "Search rounds committed", 0, NULL);
    m->m_jobs = kt_metrics_gauge(mx, "jobs", "Jobs known to this tracker, by state", 1, state_l);
    m->m_status_records = kt_metrics_counter(
        mx, "status_records_read_total",
        "Records read from the store to show its earlier jobs on the status page", 0, NULL);
    m->m_rpc = kt_metrics_histogram(mx, "peer_rpc_seconds",
                                    "Duration of Build and Run calls to workers and runners", 1,
                                    method_l, kt_metrics_latency_buckets,
                                    kt_metrics_latency_buckets_len);
    if (!m->m_measurements || !m->m_rounds || !m->m_jobs || !m->m_rpc || !m->m_status_records ||
        kt_metrics_add_collector(mx, collect, m) != 0 ||
        kt_tracker_add_snapshot(t, snapshot, m) != 0 || kt_jobs_rpc_add(m) != 0)
        goto fail;
    /* Shown as 0 before the first page, so a scrape sees the series from the start. */
    kt_metrics_add(m->m_status_records, NULL, 0);
    return m;
fail:
    kt_jobs_free(m);
    return NULL;
}

int kt_jobs_set_search_threads(kt_jobs_t *m, int n)
{
    if (!m)
        return kt_err_set(KT_EINVAL, "search threads: no job manager");
    if (n < 1 || n > KT_POOL_MAX_THREADS)
        return kt_err_set(KT_EINVAL, "search threads: %d (want 1..%d)", n, KT_POOL_MAX_THREADS);
    pthread_mutex_lock(&m->mu);
    int started = m->jobs != NULL;
    pthread_mutex_unlock(&m->mu);
    if (started)
        return kt_err_set(KT_ESTATE, "search threads: set before jobs start");
    kt_pool_t *p = kt_pool_new(n);
    if (!p)
        return kt_err_code();
    kt_pool_free(m->pool);
    m->pool = p;
    m->cpu_slots = n;
    return 0;
}

int kt_jobs_search_threads(const kt_jobs_t *m)
{
    return m ? m->cpu_slots : 0;
}

int kt_jobs_start(kt_jobs_t *m)
{
    static const char *resume[] = {"running", "queued"};
    for (int s = 0; s < 2; s++) {
        int64_t *ids = NULL;
        size_t n = 0;
        kt_jobs_store_get(m);
        int rc = kt_store_list_jobs(m->store, resume[s], &ids, &n);
        kt_jobs_store_put(m, m->store);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < n; i++) {
            kt_jobs_store_get(m);
            job_t *j = job_load(m, m->store, ids[i]);
            if (!j) {
                KT_ERROR("cannot resume: %s", kt_err_msg());
                kt_store_set_job_state(m->store, ids[i], "failed");
            }
            kt_jobs_store_put(m, m->store);
            if (j && job_start(m, j) != 0) {
                KT_ERROR("job %" PRId64 ": %s", ids[i], kt_err_msg());
                job_free(j);
            } else if (j) {
                KT_INFO("job %" PRId64 ": resumed from the store", ids[i]);
            }
        }
        free(ids);
    }
    return 0;
}

void kt_jobs_stop(kt_jobs_t *m)
{
    if (!m)
        return;
    /* Build and Run calls in flight would hold the rounds, and so this stop,
     * until their deadlines (minutes for a worker that never answers); a
     * cancelled part stores nothing, so only what was committed counts.
     * Only on the first stop: kt_jobs_free stops again after the tracker
     * is gone. */
    if (atomic_exchange(&m->stopping, 1) == 0)
        kt_tracker_cancel_calls(m->t);
    pthread_mutex_lock(&m->mu);
    pthread_cond_broadcast(&m->cv);   /* rounds waiting for a CPU slot */
    job_t *list = m->jobs;
    pthread_mutex_unlock(&m->mu);
    for (job_t *j = list; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    for (job_t *j = list; j; j = j->next)
        if (j->thread_started) {
            pthread_join(j->thread, NULL);
            j->thread_started = 0;
        }
}

int kt_jobs_threads_live(kt_jobs_t *m)
{
    return atomic_load(&m->threads_live);
}

void kt_jobs_free(kt_jobs_t *m)
{
    if (!m)
        return;
    kt_jobs_stop(m);
    for (job_t *j = m->jobs, *next; j; j = next) {
        next = j->next;
        job_free(j);
    }
    /* The jobs' rounds are over, so no part is queued: the idle part
     * threads exit. */
    pthread_mutex_lock(&m->parts_mu);
    m->parts_stop = 1;
    pthread_cond_broadcast(&m->parts_cv);
    while (m->parts_threads > 0)
        pthread_cond_wait(&m->parts_gone_cv, &m->parts_mu);
    pthread_mutex_unlock(&m->parts_mu);
    pthread_mutex_destroy(&m->parts_mu);
    pthread_cond_destroy(&m->parts_cv);
    pthread_cond_destroy(&m->parts_gone_cv);
    kt_store_close(m->store);
    kt_pool_free(m->pool);   /* after the jobs: their policies borrowed it */
    pthread_mutex_destroy(&m->store_mu);
    pthread_cond_destroy(&m->store_cv);
    free(m->db);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->submit_mu);
    pthread_mutex_destroy(&m->stats_mu);
    pthread_mutex_destroy(&m->model_mu);
    json_decref(m->stats);
    kt_jobs_watch_clients_free(m);
    pthread_cond_destroy(&m->commit_cv);
    pthread_mutex_destroy(&m->commit_mu);
    free(m);
}
