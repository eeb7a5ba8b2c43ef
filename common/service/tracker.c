/* The tracker's core: gRPC server, registry and sweep timer, HTTP status, per-peer clients; see tracker.h. */
#include "service/tracker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http.h"
#include "kt_config.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_SNAPSHOT_FNS 8

/* A client for one peer address, shared by concurrent calls. A dropped peer's
 * client is marked stale and freed once its last call returns. */
typedef struct client_entry {
    struct client_entry *next;
    char *address;
    kt_rpc_client_t *client;
    int refs;
    int stale;
} client_entry_t;

struct kt_tracker {
    char *listen, *http, *token, *tls_cert, *tls_key, *tls_ca;
    char *tls_client_ca, *tls_client_cert, *tls_client_key;
    int heartbeat_ms;
    int threads;          /* gRPC threads of the server */
    double started_mono;

    kt_rpc_server_t *server;
    kt_registry_t *registry;
    kt_registry_service_t service;
    kt_metrics_t *metrics;
    kt_metric_t *m_drops, *m_lost_leases, *m_peers, *m_q_total, *m_q_free, *m_q_pending;
    kt_http_server_t *http_server;

    kt_tracker_snapshot_fn snap_fns[MAX_SNAPSHOT_FNS];
    void *snap_users[MAX_SNAPSHOT_FNS];
    int n_snap_fns;

    pthread_mutex_t mu;        /* clients, stop flag */
    pthread_cond_t cv;
    client_entry_t *clients;
    int stopping;
    /* kt_tracker_cancel_calls: no more calls to peers (their clients are
     * closed, and no new one is made). */
    int calls_closed;
    pthread_t sweeper;
    int sweeper_running;
};

/* ---- Drops ------------------------------------------------------------------------ */

static void forget_client(kt_tracker_t *t, const char *address)
{
    pthread_mutex_lock(&t->mu);
    for (client_entry_t **pp = &t->clients; *pp;) {
        client_entry_t *e = *pp;
        if (!e->stale && strcmp(e->address, address) == 0) {
            e->stale = 1;
            /* The calls still waiting on the dropped peer (a Run or Build
             * on a host that went away) would otherwise hold their parts
             * until their deadlines, minutes for a big batch: cancelled,
             * the job re-queues them on the peers it still has. */
            int n = kt_rpc_client_cancel_all(e->client, "the peer was dropped (no heartbeat)");
            if (n > 0)
                KT_INFO("cancelled %d call%s in flight to %s", n, n == 1 ? "" : "s", address);
        }
        if (e->stale && e->refs == 0) {
            *pp = e->next;
            kt_rpc_client_free(e->client);
            free(e->address);
            free(e);
            continue;
        }
        pp = &e->next;
    }
    pthread_mutex_unlock(&t->mu);
}

static void on_drop(void *user, const kt_peer_t *p, const uint64_t *lost, int n_lost)
{
    (void)lost;
    kt_tracker_t *t = user;
    double silent = kt_registry_now(t->registry) - p->last_seen;
    if (p->role == KT_PEER_RUNNER)
        KT_WARN("dropped runner %s (key %s at %s): silent for %.1f s; %d lease%s lost", p->id,
                p->key, p->address, silent, n_lost, n_lost == 1 ? "" : "s");
    else
        KT_WARN("dropped worker %s (at %s): silent for %.1f s; %d lease%s lost", p->id,
                p->address, silent, n_lost, n_lost == 1 ? "" : "s");
    const char *labels[] = {kt_peer_role_name(p->role)};
    kt_metrics_add(t->m_drops, labels, 1);
    kt_metrics_add(t->m_lost_leases, NULL, n_lost);
    forget_client(t, p->address);
}

/* ---- Sweep timer -------------------------------------------------------------------- */

static void *sweeper_main(void *arg)
{
    kt_tracker_t *t = arg;
    int period_ms = t->heartbeat_ms / 2 > 0 ? t->heartbeat_ms / 2 : 1;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec end = kt_time_mono_after_ms(period_ms);
        while (!t->stopping && pthread_cond_timedwait(&t->cv, &t->mu, &end) == 0)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->mu);
        /* Drops are logged by on_drop; the ids are not needed here. */
        if (kt_registry_sweep(t->registry, kt_registry_now(t->registry), NULL) < 0)
            KT_WARN("sweep: %s", kt_err_msg());
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- Status snapshot and metrics ------------------------------------------------------ */

json_t *kt_tracker_snapshot(kt_tracker_t *t, const kt_http_page_t *page)
{
    kt_http_page_t pg = {.offset = 0, .limit = KT_HTTP_PAGE_SIZE};
    if (page)
        pg = *page;
    kt_peer_t *peers = NULL;
    kt_queue_info_t *queues = NULL;
    int np = 0, nq = 0;
    if (kt_registry_peers(t->registry, &peers, &np) != 0)
        return NULL;
    if (kt_registry_queues(t->registry, &queues, &nq) != 0) {
        kt_peer_list_free(peers, np);
        return NULL;
    }
    json_t *runners = json_array(), *workers = json_array(), *queue = json_array();
    for (int i = 0; i < np; i++) {
        const kt_peer_t *p = &peers[i];
        int in_flight = p->in_flight > p->leased ? p->in_flight : p->leased;
        if (p->role == KT_PEER_RUNNER) {
            json_array_append_new(
                runners, json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:s}", "id", p->id, "address",
                                   p->address, "key", p->key, "state", p->state, "in_flight",
                                   in_flight, "capacity", p->capacity, "device",
                                   p->device && p->device->name ? p->device->name : ""));
        } else {
            json_t *targets = json_array();
            for (int k = 0; k < p->n_targets; k++)
                json_array_append_new(targets, json_string(p->targets[k]));
            json_array_append_new(workers,
                                  json_pack("{s:s, s:s, s:s, s:i, s:i, s:o}", "id", p->id,
                                            "address", p->address, "state", p->state,
                                            "in_flight", in_flight, "slots", p->capacity,
                                            "targets", targets));
        }
    }
    for (int i = 0; i < nq; i++)
        json_array_append_new(queue, json_pack("{s:s, s:i, s:i, s:i}", "key", queues[i].key,
                                               "total", queues[i].total, "free", queues[i].free,
                                               "pending", queues[i].pending));
    kt_peer_list_free(peers, np);
    free(queues);
    /* The page asked for goes back with it, so an API client paging with
     * defaults knows where it is. */
    json_t *snap = json_pack("{s:s, s:f, s:[], s:I, s:I, s:I, s:o, s:o, s:o}", "version",
                             KT_VERSION, "uptime_s", kt_time_mono() - t->started_mono, "jobs",
                             "jobs_total", (json_int_t)0, "offset", (json_int_t)pg.offset,
                             "limit", (json_int_t)pg.limit, "runners", runners, "workers",
                             workers, "queue", queue);
    if (!snap) {
        kt_err_set(KT_ENOMEM, "status snapshot: out of memory");
        return NULL;
    }
    for (int i = 0; i < t->n_snap_fns; i++)
        if (t->snap_fns[i](t->snap_users[i], snap, &pg) != 0) {
            json_decref(snap);
            return NULL;
        }
    return snap;
}

static json_t *http_snapshot(void *user, const kt_http_page_t *page)
{
    return kt_tracker_snapshot(user, page);
}

/* Refresh the per-key gauges on every scrape, so keys that vanished vanish. */
static void collect(void *user, kt_metrics_t *m)
{
    (void)m;
    kt_tracker_t *t = user;
    kt_registry_stats_t st;
    kt_registry_stats(t->registry, &st);
    const char *runner[] = {"runner"}, *worker[] = {"worker"};
    kt_metrics_set(t->m_peers, runner, st.runners);
    kt_metrics_set(t->m_peers, worker, st.workers);
    kt_queue_info_t *q = NULL;
    int n = 0;
    if (kt_registry_queues(t->registry, &q, &n) != 0)
        return;
    kt_metrics_clear(t->m_q_total);
    kt_metrics_clear(t->m_q_free);
    kt_metrics_clear(t->m_q_pending);
    for (int i = 0; i < n; i++) {
        const char *key[] = {q[i].key};
        kt_metrics_set(t->m_q_total, key, q[i].total);
        kt_metrics_set(t->m_q_free, key, q[i].free);
        kt_metrics_set(t->m_q_pending, key, q[i].pending);
    }
    free(q);
}

static int make_metrics(kt_tracker_t *t)
{
    static const char *role[] = {"role"}, *key[] = {"key"};
    if (!(t->metrics = kt_metrics_new(KT_METRICS_NAMESPACE)))
        return kt_err_code();
    t->service.registrations = kt_metrics_counter(
        t->metrics, "peer_registrations_total", "RegisterPeer calls accepted", 1, role);
    t->m_drops = kt_metrics_counter(t->metrics, "peer_drops_total",
                                    "Peers dropped after missing heartbeats or being replaced",
                                    1, role);
    t->m_lost_leases = kt_metrics_counter(t->metrics, "lost_leases_total",
                                          "Leases whose peer was dropped while held", 0, NULL);
    t->m_peers = kt_metrics_gauge(t->metrics, "peers", "Registered peers", 1, role);
    t->m_q_total = kt_metrics_gauge(t->metrics, "queue_runners", "Runners per device key", 1, key);
    t->m_q_free = kt_metrics_gauge(t->metrics, "queue_free_runners",
                                   "Runners per device key that can take a batch now", 1, key);
    t->m_q_pending = kt_metrics_gauge(t->metrics, "queue_pending",
                                      "Batches waiting for a runner per device key", 1, key);
    if (!t->service.registrations || !t->m_drops || !t->m_lost_leases || !t->m_peers ||
        !t->m_q_total || !t->m_q_free || !t->m_q_pending)
        return kt_err_code();
    return kt_metrics_add_collector(t->metrics, collect, t);
}

/* ---- Create / start / stop ------------------------------------------------------------ */

static int dup_opt(char **dst, const char *src)
{
    if (!src)
        return 0;
    return (*dst = kt_strdup(src)) ? 0 : KT_ENOMEM;
}

kt_tracker_t *kt_tracker_new(const kt_tracker_opts_t *opts)
{
    kt_tracker_opts_t o = {0};
    if (opts)
        o = *opts;
    if ((o.tls_cert == NULL) != (o.tls_key == NULL)) {
        kt_err_set(KT_EINVAL, "tracker: TLS needs both a certificate and a key");
        return NULL;
    }
    /* The client certificate is first used when a job calls a peer: a bad
     * one is said now, not as peers that cannot be reached. */
    kt_rpc_tls_files_t files = {.cert = o.tls_cert, .key = o.tls_key,
                                .client_ca = o.tls_client_ca, .ca = o.tls_ca,
                                .client_cert = o.tls_client_cert,
                                .client_key = o.tls_client_key};
    if (kt_rpc_tls_check(&files) != 0) {
        kt_err_prefix("tracker");
        return NULL;
    }
    if (o.heartbeat_ms < 0) {
        kt_err_set(KT_EINVAL, "tracker: negative heartbeat interval");
        return NULL;
    }
    kt_tracker_t *t = calloc(1, sizeof *t);
    if (!t) {
        kt_err_set(KT_ENOMEM, "tracker: out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (dup_opt(&t->listen, o.listen ? o.listen : KT_TRACKER_DEFAULT_LISTEN) ||
        dup_opt(&t->http, o.http && *o.http ? o.http : NULL) || dup_opt(&t->token, o.token) ||
        dup_opt(&t->tls_cert, o.tls_cert) || dup_opt(&t->tls_key, o.tls_key) ||
        dup_opt(&t->tls_ca, o.tls_ca) || dup_opt(&t->tls_client_ca, o.tls_client_ca) ||
        dup_opt(&t->tls_client_cert, o.tls_client_cert) ||
        dup_opt(&t->tls_client_key, o.tls_client_key))
        goto fail;
    kt_registry_opts_t ro = {.heartbeat_ms = o.heartbeat_ms};
    if (!(t->registry = kt_registry_new(&ro)))
        goto fail;
    t->heartbeat_ms = kt_registry_heartbeat_ms(t->registry);
    t->service.registry = t->registry;
    if (make_metrics(t) != 0 || kt_registry_on_drop(t->registry, on_drop, t) != 0)
        goto fail;
    t->threads = o.threads > 0 ? o.threads : KT_TRACKER_DEFAULT_THREADS;
    kt_rpc_server_opts_t so = {.listen = t->listen,
                               .threads = t->threads,
                               .token = t->token,
                               .tls_cert = t->tls_cert,
                               .tls_key = t->tls_key,
                               .tls_client_ca = t->tls_client_ca};
    if (!(t->server = kt_rpc_server_new(&so)) ||
        kt_rpc_server_add_health(t->server, "Tracker", "tracker") != 0 ||
        kt_tracker_registry_service_add(t->server, &t->service) != 0)
        goto fail;
    return t;
fail:
    kt_tracker_stop(t, 0);
    return NULL;
}

int kt_tracker_start(kt_tracker_t *t)
{
    if (!t)
        return kt_err_set(KT_EINVAL, "tracker: none");
    t->started_mono = kt_time_mono();
    int rc = kt_rpc_server_start(t->server);
    if (rc != 0)
        return rc;
    if (t->http) {
        kt_http_config_t hc = {.bind = t->http, .metrics = t->metrics,
                               .snapshot = http_snapshot, .snapshot_user = t,
                               .token = t->token};
        if (!(t->http_server = kt_http_server_start(&hc)))
            KT_WARN("no HTTP status page: %s", kt_err_msg());
    }
    if (pthread_create(&t->sweeper, NULL, sweeper_main, t) != 0)
        return kt_err_set(KT_ENOMEM, "tracker: cannot start the sweep thread");
    t->sweeper_running = 1;
    return 0;
}

void kt_tracker_stop(kt_tracker_t *t, int drain_ms)
{
    if (!t)
        return;
    if (t->sweeper_running) {
        pthread_mutex_lock(&t->mu);
        t->stopping = 1;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->sweeper, NULL);
    }
    kt_http_server_stop(t->http_server);
    kt_rpc_server_stop(t->server, drain_ms);
    /* Every call into a peer runs on a handler or a thread the caller joins
     * before stopping, so no client is in use any more. */
    for (client_entry_t *e = t->clients, *next; e; e = next) {
        next = e->next;
        kt_rpc_client_free(e->client);
        free(e->address);
        free(e);
    }
    kt_registry_free(t->registry);
    kt_metrics_free(t->metrics);
    free(t->listen);
    free(t->http);
    if (t->token) {
        memset(t->token, 0, strlen(t->token));
        free(t->token);
    }
    free(t->tls_cert);
    free(t->tls_key);
    free(t->tls_ca);
    free(t->tls_client_ca);
    free(t->tls_client_cert);
    free(t->tls_client_key);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

kt_rpc_server_t *kt_tracker_server(kt_tracker_t *t) { return t->server; }

int kt_tracker_threads(const kt_tracker_t *t) { return t->threads; }
kt_registry_t *kt_tracker_registry(kt_tracker_t *t) { return t->registry; }
kt_metrics_t *kt_tracker_metrics(kt_tracker_t *t) { return t->metrics; }

int kt_tracker_add_snapshot(kt_tracker_t *t, kt_tracker_snapshot_fn fn, void *user)
{
    if (!t || !fn)
        return kt_err_set(KT_EINVAL, "tracker: no snapshot function");
    if (t->n_snap_fns == MAX_SNAPSHOT_FNS)
        return kt_err_set(KT_ENOMEM, "tracker: more than %d snapshot functions",
                          MAX_SNAPSHOT_FNS);
    t->snap_fns[t->n_snap_fns] = fn;
    t->snap_users[t->n_snap_fns++] = user;
    return 0;
}

const char *kt_tracker_address(const kt_tracker_t *t)
{
    return t ? kt_rpc_server_address(t->server) : "";
}

int kt_tracker_http_port(const kt_tracker_t *t)
{
    return t && t->http_server ? kt_http_server_port(t->http_server) : 0;
}

/* ---- Calling peers ---------------------------------------------------------------------- */

/* What a call to a peer answers once kt_tracker_cancel_calls ran. */
#define CALLS_CLOSED_WHY "the tracker is stopping"

void kt_tracker_cancel_calls(kt_tracker_t *t)
{
    if (!t)
        return;
    int n = 0;
    pthread_mutex_lock(&t->mu);
    t->calls_closed = 1;
    for (client_entry_t *e = t->clients; e; e = e->next)
        n += kt_rpc_client_close(e->client, CALLS_CLOSED_WHY);
    pthread_mutex_unlock(&t->mu);
    if (n > 0)
        KT_INFO("cancelled %d call%s in flight to runners and workers", n, n == 1 ? "" : "s");
}

static client_entry_t *client_get(kt_tracker_t *t, const char *address)
{
    pthread_mutex_lock(&t->mu);
    if (t->calls_closed) {
        pthread_mutex_unlock(&t->mu);
        kt_err_set(KT_ESTATE, "%s", CALLS_CLOSED_WHY);
        return NULL;
    }
    client_entry_t *e = t->clients;
    while (e && (e->stale || strcmp(e->address, address) != 0))
        e = e->next;
    if (!e && (e = calloc(1, sizeof *e))) {
        kt_rpc_client_opts_t co = {.token = t->token, .tls_ca = t->tls_ca,
                                   .tls_cert = t->tls_client_cert, .tls_key = t->tls_client_key};
        if (!(e->address = kt_strdup(address)) || !(e->client = kt_rpc_client_new(address, &co))) {
            free(e->address);
            free(e);
            e = NULL;
        } else {
            e->next = t->clients;
            t->clients = e;
        }
    } else if (!e) {
        kt_err_set(KT_ENOMEM, "tracker: out of memory");
    }
    if (e)
        e->refs++;
    pthread_mutex_unlock(&t->mu);
    return e;
}

static void client_put(kt_tracker_t *t, client_entry_t *e)
{
    pthread_mutex_lock(&t->mu);
    int free_it = --e->refs == 0 && e->stale;
    if (free_it)
        for (client_entry_t **pp = &t->clients; *pp; pp = &(*pp)->next)
            if (*pp == e) {
                *pp = e->next;
                break;
            }
    pthread_mutex_unlock(&t->mu);
    if (free_it) {
        kt_rpc_client_free(e->client);
        free(e->address);
        free(e);
    }
}

static int call_peer(kt_tracker_t *t, const char *address, const char *method,
                     const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc,
                     int deadline_ms, ProtobufCMessage **resp, kt_rpc_status_t *st)
{
    *resp = NULL;
    if (!t || !address || !req)
        return kt_err_set(KT_EINVAL, "%s: no tracker, address or request", method);
    client_entry_t *e = client_get(t, address);
    if (!e) {
        /* Refused as a call cancelled in flight would be, so callers treat
         * both alike. */
        if (st && kt_err_code() == KT_ESTATE) {
            st->code = KT_RPC_CANCELLED;
            snprintf(st->msg, sizeof st->msg, "%s", kt_err_msg());
        }
        return kt_err_code();
    }
    int rc = kt_rpc_call_unary(e->client, method, req, resp_desc, deadline_ms, resp, st);
    client_put(t, e);
    return rc;
}

int kt_tracker_run(kt_tracker_t *t, const char *address, const Ktune__V1__RunRequest *req,
                   int deadline_ms, Ktune__V1__RunResponse **resp, kt_rpc_status_t *st)
{
    return call_peer(t, address, "/ktune.v1.Runner/Run", req ? &req->base : NULL,
                     &ktune__v1__run_response__descriptor, deadline_ms, (ProtobufCMessage **)resp,
                     st);
}

int kt_tracker_build(kt_tracker_t *t, const char *address, const Ktune__V1__BuildRequest *req,
                     int deadline_ms, Ktune__V1__BuildResponse **resp, kt_rpc_status_t *st)
{
    return call_peer(t, address, "/ktune.v1.Worker/Build", req ? &req->base : NULL,
                     &ktune__v1__build_response__descriptor, deadline_ms,
                     (ProtobufCMessage **)resp, st);
}
