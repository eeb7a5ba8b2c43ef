/* The Tracker service's job methods (SubmitJob ... ListRecords) over the job manager and the store; see jobs.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/jobs_int.h"
#include "measure/measure.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/kt_limits.h"
#include "util/log.h"
#include "util/util.h"

/* How long CancelJob waits for the job's rounds to stop before answering. */
#define CANCEL_WAIT_MS 30000
/* How often a WatchJob stream checks that its client is still there. */
#define WATCH_POLL_MS 500

static void *call_alloc(void *user, size_t size)
{
    return kt_rpc_call_alloc(user, size);
}

/* A handle of the manager's pool: handlers run on several threads at once. */
static kt_store_t *open_store(kt_jobs_t *m)
{
    return kt_jobs_store_get(m);
}

/* The progress of job `id`: live from memory, else rebuilt from the store. */
static int job_progress(kt_jobs_t *m, int64_t id, kt_job_alloc_fn alloc, void *user,
                        Ktune__V1__JobProgress *out, uint64_t *seq, int *finished)
{
    job_t *j = kt_jobs_find(m, id);
    if (!j) {
        if (finished)
            *finished = 1;
        kt_store_t *s = open_store(m);
        int rc = kt_job_view_progress_from_store(s, id, alloc, user, out);
        kt_jobs_store_put(m, s);
        if (rc == KT_ENOTFOUND)
            kt_err_set(KT_ENOTFOUND, "no job %" PRId64, id);
        return rc;
    }
    int nt = j->view->ntasks;
    kt_job_best_t *best = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *best);
    pthread_mutex_lock(&j->mu);
    char state[16], store_model[sizeof j->store_model],
        *msg = kt_strdup(j->message ? j->message : j->waiting);
    snprintf(state, sizeof state, "%s", j->state);
    snprintf(store_model, sizeof store_model, "%s", j->store_model);
    for (int i = 0; best && i < nt; i++)
        best[i] = j->tasks[i].best;
    if (seq)
        *seq = j->seq;
    if (finished)
        *finished = j->finished;
    pthread_mutex_unlock(&j->mu);
    int rc = msg && best ? kt_job_view_progress(j->view, j->sched, state, msg, best, store_model,
                                                alloc, user, out)
                         : kt_err_set(KT_ENOMEM, "out of memory");
    free(msg);
    free(best);
    return rc;
}

/* ---- SubmitJob, CancelJob, JobStatus, ListJobs --------------------------------------------- */

static int h_submit(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                    void *ud)
{
    kt_jobs_t *m = ud;
    const Ktune__V1__SubmitJobRequest *in = (const Ktune__V1__SubmitJobRequest *)req;
    int64_t id = 0;
    kt_jobs_submit_info_t info;
    int rc = kt_jobs_submit_ex(m, in->job, kt_rpc_call_peer(call), in->request_id, &id, &info);
    if (rc != 0) {
        KT_INFO("SubmitJob from %s refused: %s", kt_rpc_call_peer(call), kt_err_msg());
        return rc;
    }
    Ktune__V1__SubmitJobResponse *out = (Ktune__V1__SubmitJobResponse *)resp;
    out->job_id = id;
    out->stored_trials = (int32_t)(info.stored_trials > INT32_MAX ? INT32_MAX : info.stored_trials);
    out->budget = (int32_t)(info.budget > INT32_MAX ? INT32_MAX : info.budget);
    out->existing = info.existing;
    /* The job is stored and started: a notice that does not fit in memory
     * is left out rather than failing the call. */
    char *notice = info.notice[0] ? kt_rpc_call_strdup(call, info.notice) : NULL;
    if (notice)
        out->notice = notice;
    return KT_RPC_OK;
}

/* A JobRef's id: no job has an id below 1, so 0 (the field left unset) or a
 * negative id is a malformed request (INVALID_ARGUMENT), not an unknown job. */
static int check_job_ref(const char *method, const ProtobufCMessage *req)
{
    int64_t id = ((const Ktune__V1__JobRef *)req)->job_id;
    if (id >= 1)
        return 0;
    return kt_err_set(KT_EINVAL, "%s: job_id %" PRId64 " is not a job id (>= 1)", method, id);
}

static int h_status(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                    void *ud)
{
    const Ktune__V1__JobRef *in = (const Ktune__V1__JobRef *)req;
    if (check_job_ref("JobStatus", req) != 0)
        return kt_err_code();
    return job_progress(ud, in->job_id, call_alloc, call, (Ktune__V1__JobProgress *)resp, NULL,
                        NULL);
}

static int h_cancel(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                    void *ud)
{
    const Ktune__V1__JobRef *in = (const Ktune__V1__JobRef *)req;
    if (check_job_ref("CancelJob", req) != 0)
        return kt_err_code();
    int rc = kt_jobs_cancel(ud, in->job_id, CANCEL_WAIT_MS);
    if (rc != 0)
        return rc;
    return job_progress(ud, in->job_id, call_alloc, call, (Ktune__V1__JobProgress *)resp, NULL,
                        NULL);
}

static int h_list(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *ud)
{
    kt_jobs_t *m = ud;
    const Ktune__V1__ListJobsRequest *in = (const Ktune__V1__ListJobsRequest *)req;
    Ktune__V1__ListJobsResponse *out = (Ktune__V1__ListJobsResponse *)resp;
    /* A misspelt state would match no job and read as "no jobs". */
    static const char *const states[] = {"queued", "running", "done", "cancelled", "failed"};
    int known = !in->state || !*in->state;
    for (size_t i = 0; !known && i < KT_ARRAY_LEN(states); i++)
        known = strcmp(in->state, states[i]) == 0;
    if (!known)
        return kt_err_set(KT_EINVAL, "ListJobs: unknown state '%s' (queued, running, done, "
                          "cancelled or failed; empty for all)", in->state);
    kt_store_t *s = open_store(m);
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = kt_store_list_jobs(s, in->state && *in->state ? in->state : NULL, &ids, &n);
    kt_jobs_store_put(m, s);
    if (rc == 0 && n > 0) {
        Ktune__V1__JobProgress *arr = kt_rpc_call_alloc(call, n * sizeof *arr);
        out->jobs = kt_rpc_call_alloc(call, n * sizeof *out->jobs);
        if (!arr || !out->jobs)
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        for (size_t i = 0; rc == 0 && i < n; i++) {
            ktune__v1__job_progress__init(&arr[i]);
            rc = job_progress(m, ids[i], call_alloc, call, &arr[i], NULL, NULL);
            out->jobs[i] = &arr[i];
        }
        if (rc == 0)
            out->n_jobs = n;
    }
    free(ids);
    return rc;
}

/* ---- WatchJob ------------------------------------------------------------------------------- */

/* A client connection's open WatchJob streams (in kt_jobs_t's list, under mu). */
struct watch_client {
    struct watch_client *next;
    char peer[128];
    int n;
};

/* Take a watch slot for `peer`: KT_ELIMIT past KT_LIMIT_WATCH_PER_CLIENT or
 * the tracker's share of its threads, since each stream holds a thread. */
static int watch_enter(kt_jobs_t *m, const char *peer)
{
    int cap = kt_tracker_threads(m->t) * KT_LIMIT_WATCH_SHARE_NUM / KT_LIMIT_WATCH_SHARE_DEN;
    if (cap < 1)
        cap = 1;
    pthread_mutex_lock(&m->mu);
    struct watch_client *w = m->watch_clients;
    while (w && strcmp(w->peer, peer) != 0)
        w = w->next;
    int rc = 0;
    if (m->watchers >= cap) {
        rc = kt_err_set(KT_ELIMIT,
                        "%d WatchJob streams open; at most %d, half the tracker's RPC threads "
                        "(KT_LIMIT_WATCH_SHARE_*)",
                        m->watchers, cap);
    } else if (w && w->n >= KT_LIMIT_WATCH_PER_CLIENT) {
        rc = kt_err_set(KT_ELIMIT,
                        "%d WatchJob streams open from this client; at most %d "
                        "(KT_LIMIT_WATCH_PER_CLIENT)",
                        w->n, KT_LIMIT_WATCH_PER_CLIENT);
    } else if (!w && !(w = calloc(1, sizeof *w))) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    } else {
        if (w->n == 0 && !w->peer[0]) {
            snprintf(w->peer, sizeof w->peer, "%s", peer);
            w->next = m->watch_clients;
            m->watch_clients = w;
        }
        w->n++;
        m->watchers++;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void watch_leave(kt_jobs_t *m, const char *peer)
{
    pthread_mutex_lock(&m->mu);
    struct watch_client **pp = &m->watch_clients;
    while (*pp && strcmp((*pp)->peer, peer) != 0)
        pp = &(*pp)->next;
    if (*pp && --(*pp)->n == 0) {
        struct watch_client *w = *pp;
        *pp = w->next;
        free(w);
    }
    m->watchers--;
    pthread_mutex_unlock(&m->mu);
}

void kt_jobs_watch_clients_free(kt_jobs_t *m)
{
    while (m->watch_clients) {
        struct watch_client *w = m->watch_clients;
        m->watch_clients = w->next;
        free(w);
    }
}

static int watch(kt_rpc_call_t *call, kt_jobs_t *m, int64_t id);

static int h_watch(kt_rpc_call_t *call, const ProtobufCMessage *req, void *ud)
{
    kt_jobs_t *m = ud;
    if (check_job_ref("WatchJob", req) != 0)
        return kt_err_code();
    const char *peer = kt_rpc_call_peer(call);
    int rc = watch_enter(m, peer);
    if (rc != 0) {
        KT_INFO("WatchJob from %s refused: %s", peer, kt_err_msg());
        return rc;
    }
    rc = watch(call, m, ((const Ktune__V1__JobRef *)req)->job_id);
    watch_leave(m, peer);
    return rc;
}

static int watch(kt_rpc_call_t *call, kt_jobs_t *m, int64_t id)
{
    job_t *j = kt_jobs_find(m, id);
    uint64_t last = 0;
    int first = 1;
    for (;;) {
        if (j) {
            /* Wait for the next round, the job's end or the client leaving. */
            pthread_mutex_lock(&j->mu);
            while (!first && j->seq == last && !j->finished && !kt_rpc_call_cancelled(call)) {
                struct timespec ts = kt_time_mono_after_ms(WATCH_POLL_MS);
                pthread_cond_timedwait(&j->cv, &j->mu, &ts);
            }
            pthread_mutex_unlock(&j->mu);
        }
        if (kt_rpc_call_cancelled(call))
            return KT_RPC_CANCELLED;
        kt_job_arena_t arena = {0};
        Ktune__V1__JobProgress p = KTUNE__V1__JOB_PROGRESS__INIT;
        int finished = 0;
        int rc = job_progress(m, id, kt_job_arena_alloc, &arena, &p, &last, &finished);
        if (rc == 0)
            rc = kt_rpc_stream_send(call, &p.base);
        kt_job_arena_clear(&arena);
        first = 0;
        if (rc == KT_EUNAVAIL)
            return KT_RPC_CANCELLED;   /* the client left */
        if (rc != 0)
            return rc;
        if (finished) {
            /* A job stopped with the tracker has not ended: say so. */
            if (j && atomic_load(&m->stopping)) {
                pthread_mutex_lock(&j->mu);
                int running = strcmp(j->state, "running") == 0;
                pthread_mutex_unlock(&j->mu);
                if (running)
                    return kt_rpc_call_fail(call, KT_RPC_UNAVAILABLE,
                                            "the tracker is stopping; job %" PRId64
                                            " resumes when it starts again",
                                            id);
            }
            return KT_RPC_OK;
        }
    }
}

/* ---- QueryBest, ListRecords ------------------------------------------------------------------ */

/* A record as a proto message; strings borrowed from r unless call is set
 * (then copied into the call's memory). */
static int fill_record(kt_rpc_call_t *call, const kt_record_t *r, Ktune__V1__Record *o)
{
    ktune__v1__record__init(o);
    o->id = r->id;
    o->state_hash = r->state_hash;
    o->mean_cost = r->mean_cost;
    o->error_code = (Ktune__V1__MeasureError)r->error_code;
    o->all_cost = r->all_cost;
    o->timestamp = r->timestamp;
    o->job_id = r->job_id;
    o->n_costs = (size_t)r->ncosts;
    /* a static name, never copied; "" (the field's default) for unknown */
    const char *origin = kt_store_origin_name(r->origin);
    o->origin = (char *)(r->origin != KT_STORE_ORIGIN_UNKNOWN && origin ? origin : "");
    if (!call) {
        o->workload_key = (char *)r->workload_key;
        o->target = (char *)r->target;
        o->state_json = (char *)r->state_json;
        o->error_msg = (char *)(r->error_msg ? r->error_msg : "");
        o->runner_key = (char *)(r->runner_key ? r->runner_key : "");
        o->runner_id = (char *)(r->runner_id ? r->runner_id : "");
        o->runner_host = (char *)(r->runner_host ? r->runner_host : "");
        o->costs = (double *)r->costs;
        return 0;
    }
    o->workload_key = kt_rpc_call_strdup(call, r->workload_key);
    o->target = kt_rpc_call_strdup(call, r->target);
    o->state_json = kt_rpc_call_strdup(call, r->state_json);
    o->error_msg = kt_rpc_call_strdup(call, r->error_msg ? r->error_msg : "");
    o->runner_key = kt_rpc_call_strdup(call, r->runner_key ? r->runner_key : "");
    o->runner_id = kt_rpc_call_strdup(call, r->runner_id ? r->runner_id : "");
    o->runner_host = kt_rpc_call_strdup(call, r->runner_host ? r->runner_host : "");
    if (r->ncosts > 0 && (o->costs = kt_rpc_call_alloc(call, (size_t)r->ncosts * sizeof(double))))
        memcpy(o->costs, r->costs, (size_t)r->ncosts * sizeof(double));
    if (!o->workload_key || !o->target || !o->state_json || !o->error_msg || !o->runner_key ||
        !o->runner_id || !o->runner_host || (r->ncosts > 0 && !o->costs))
        return kt_err_set(KT_ENOMEM, "out of memory");
    return 0;
}

/* Append a list's records to the response. */
static int add_records(kt_rpc_call_t *call, Ktune__V1__QueryBestResponse *out,
                       const kt_record_list_t *l, size_t *cap)
{
    if (out->n_records + l->n > *cap) {
        size_t cap2 = (out->n_records + l->n) * 2 + 4;
        Ktune__V1__Record **arr = kt_rpc_call_alloc(call, cap2 * sizeof *arr);
        if (!arr)
            return kt_err_set(KT_ENOMEM, "out of memory");
        if (out->n_records)
            memcpy(arr, out->records, out->n_records * sizeof *arr);
        out->records = arr;
        *cap = cap2;
    }
    for (size_t i = 0; i < l->n; i++) {
        Ktune__V1__Record *o = kt_rpc_call_alloc(call, sizeof *o);
        if (!o)
            return kt_err_set(KT_ENOMEM, "out of memory");
        int rc = fill_record(call, &l->items[i], o);
        if (rc != 0)
            return rc;
        out->records[out->n_records++] = o;
    }
    return 0;
}

/* The record filters a query names: a workload (its key, or its JSON as
 * ktune tune reads it, so that a client needs no copy of the key's hash;
 * canonical key in *key, NULL when none is given), a target, a job id. 0,
 * or KT_EINVAL naming the field, so that a typo is refused rather than
 * answered "no records". */
static int check_filters(const char *method, const char *workload_key, const char *target,
                         int64_t job_id, char **key)
{
    *key = NULL;
    if (workload_key && *workload_key && kt_workload_key_from_arg(workload_key, key) != 0)
        return kt_err_prefix("%s: workload_key", method);
    int rc = 0;
    if (target && *target && kt_measure_target_parse(target, NULL) != 0)
        rc = kt_err_prefix("%s: target", method);
    else if (job_id < 0)
        rc = kt_err_set(KT_EINVAL, "%s: job_id %" PRId64 " is not a job id (>= 1, or 0 for "
                        "none)", method, job_id);
    if (rc != 0) {
        /* The caller gets no key with a refusal. */
        free(*key);
        *key = NULL;
    }
    return rc;
}

static int h_best(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *ud)
{
    kt_jobs_t *m = ud;
    const Ktune__V1__QueryBestRequest *in = (const Ktune__V1__QueryBestRequest *)req;
    Ktune__V1__QueryBestResponse *out = (Ktune__V1__QueryBestResponse *)resp;
    int have_key = in->workload_key && *in->workload_key;
    if (have_key == (in->job_id != 0))
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT,
                                "QueryBest wants a workload key or a job id (one of them)");
    char *key = NULL;
    int crc = check_filters("QueryBest", in->workload_key, in->target, in->job_id, &key);
    if (crc != 0)
        return crc;
    /* The canonical key lives as long as the call: the records are copied. */
    char *ckey = key ? kt_rpc_call_strdup(call, key) : NULL;
    free(key);
    if (have_key && !ckey)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (in->top_k < 0)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "top_k must be >= 0");
    if (in->top_k > KT_LIMIT_TOP_K)
        return kt_rpc_call_fail(call, KT_RPC_RESOURCE_EXHAUSTED,
                                "top_k %d; at most %d (KT_LIMIT_TOP_K)", in->top_k,
                                KT_LIMIT_TOP_K);
    int k = in->top_k > 0 ? in->top_k : 1;
    const char *rk = in->runner_key && *in->runner_key ? in->runner_key : NULL;
    if (rk && !kt_registry_key_ok(rk))
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT,
                                "QueryBest: runner_key '%.64s': a device key is letters, digits "
                                "and ._:-", rk);
    kt_store_t *s = open_store(m);
    int rc = 0;
    size_t cap = 0;
    if (have_key) {
        const char *target = in->target && *in->target ? in->target : "cpu";
        kt_record_list_t *l = NULL;
        rc = kt_store_top_k_key(s, ckey, target, rk, k, &l);
        if (rc == 0)
            rc = add_records(call, out, l, &cap);
        kt_record_list_free(l);
    } else {
        kt_store_job_info_t *info = NULL;
        rc = kt_store_get_job(s, in->job_id, &info);
        if (rc == KT_ENOTFOUND)
            kt_err_set(KT_ENOTFOUND, "no job %" PRId64, in->job_id);
        /* top_k records per task: the reply's size is checked before any is read. */
        if (rc == 0 && (int64_t)k * info->ntasks > KT_LIMIT_RECORDS)
            rc = kt_err_set(KT_ELIMIT,
                            "top_k %d x %d tasks = %lld records in one reply; at most %d "
                            "(KT_LIMIT_RECORDS)",
                            k, info->ntasks, (long long)k * info->ntasks, KT_LIMIT_RECORDS);
        for (int i = 0; rc == 0 && i < info->ntasks; i++) {
            const char *target = in->target && *in->target ? in->target : info->job.target;
            kt_record_list_t *l = NULL;
            rc = kt_store_top_k_key(s, info->tasks[i].workload_key, target, rk, k, &l);
            if (rc == 0)
                rc = add_records(call, out, l, &cap);
            kt_record_list_free(l);
        }
        kt_store_job_info_free(info);
    }
    kt_jobs_store_put(m, s);
    return rc;
}

static int h_records(kt_rpc_call_t *call, const ProtobufCMessage *req, void *ud)
{
    kt_jobs_t *m = ud;
    const Ktune__V1__ListRecordsRequest *in = (const Ktune__V1__ListRecordsRequest *)req;
    char *key = NULL;
    int rc = check_filters("ListRecords", in->workload_key, in->target, in->job_id, &key);
    if (rc != 0)
        return rc;
    kt_store_filter_t f = {.workload_key = key,
                           .target = in->target && *in->target ? in->target : NULL,
                           .job_id = in->job_id,
                           .valid_only = in->valid_only};
    /* Read them all first: the store is not held while a client reads. */
    kt_store_t *s = open_store(m);
    kt_record_list_t *l = NULL;
    /* A job the store does not hold would stream nothing, read as "no records". */
    if (in->job_id > 0) {
        kt_store_job_info_t *info = NULL;
        rc = kt_store_get_job(s, in->job_id, &info);
        kt_store_job_info_free(info);
        if (rc == KT_ENOTFOUND)
            kt_err_set(KT_ENOTFOUND, "ListRecords: no job %" PRId64, in->job_id);
    }
    /* Counted first, so a stream past the cap is refused before any record
     * is read into memory. */
    kt_store_counts_t cnt;
    if (rc == 0)
        rc = kt_store_count_records(s, &f, &cnt);
    if (rc == 0 && cnt.total > KT_LIMIT_RECORDS)
        rc = kt_err_set(KT_ELIMIT,
                        "%lld records match; ListRecords sends at most %d (KT_LIMIT_RECORDS): "
                        "narrow it by workload, job or valid_only",
                        (long long)cnt.total, KT_LIMIT_RECORDS);
    if (rc == 0)
        rc = kt_store_get_records(s, &f, &l);
    kt_jobs_store_put(m, s);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        Ktune__V1__Record o;
        fill_record(NULL, &l->items[i], &o);
        if (kt_rpc_stream_send(call, &o.base) != 0)
            rc = KT_RPC_CANCELLED;
    }
    kt_record_list_free(l);
    free(key);
    return rc;
}

/* ---- Registration --------------------------------------------------------------------------- */

int kt_jobs_rpc_add(kt_jobs_t *m)
{
    kt_rpc_server_t *s = kt_tracker_server(m->t);
    int rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/SubmitJob",
                                     &ktune__v1__submit_job_request__descriptor,
                                     &ktune__v1__submit_job_response__descriptor, h_submit, m);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/CancelJob",
                                     &ktune__v1__job_ref__descriptor,
                                     &ktune__v1__job_progress__descriptor, h_cancel, m);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/JobStatus",
                                     &ktune__v1__job_ref__descriptor,
                                     &ktune__v1__job_progress__descriptor, h_status, m);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/ListJobs",
                                     &ktune__v1__list_jobs_request__descriptor,
                                     &ktune__v1__list_jobs_response__descriptor, h_list, m);
    if (rc == 0)
        rc = kt_rpc_server_add_stream(s, "/ktune.v1.Tracker/WatchJob",
                                      &ktune__v1__job_ref__descriptor,
                                      &ktune__v1__job_progress__descriptor, h_watch, m);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/QueryBest",
                                     &ktune__v1__query_best_request__descriptor,
                                     &ktune__v1__query_best_response__descriptor, h_best, m);
    if (rc == 0)
        rc = kt_rpc_server_add_stream(s, "/ktune.v1.Tracker/ListRecords",
                                      &ktune__v1__list_records_request__descriptor,
                                      &ktune__v1__record__descriptor, h_records, m);
    return rc;
}
