/*
 * The ktune-tracker process's core, without main(): the gRPC server, the
 * runner/worker registry (common/registry) with its RPC methods and sweep
 * timer, the HTTP status server and Prometheus registry, and cached clients
 * for calling runners and workers. It holds no jobs and no store: other
 * tracker modules (the job manager) add their RPC handlers to
 * kt_tracker_server(), their fields to the status snapshot and their metrics
 * between kt_tracker_new() and kt_tracker_start(), and use the registry and
 * kt_tracker_run()/kt_tracker_build() to measure.
 *
 * Served from kt_tracker_new(): Tracker/Health, Tracker/RegisterPeer,
 * Tracker/Heartbeat, Tracker/QueueStatus. Every call must carry the token
 * when one is set; the same token authenticates the tracker's own calls to
 * runners and workers.
 *
 * HTTP (when opts.http is set): / and /api/status show the snapshot (version,
 * uptime, "jobs": [] and "jobs_total": 0 unless a module fills them, the
 * page of jobs asked for as "offset" and "limit", "runners", "workers",
 * "queue"), /metrics the registry gauges and counters; with a token, every
 * route but /healthz needs it as a bearer token (http.h). An HTTP address that
 * cannot be bound is logged as a warning and the tracker serves gRPC anyway:
 * the status page is a convenience, the RPC service is the tracker.
 *
 * Ownership: the tracker copies its options and owns the server, registry,
 * metrics and clients; the accessors lend them until kt_tracker_stop().
 * Threads: kt_tracker_new/start/stop from one thread; kt_tracker_run and
 * kt_tracker_build from any thread once started (each call blocks its
 * thread); handlers run on the gRPC threads.
 */
#ifndef KT_SERVICE_TRACKER_H
#define KT_SERVICE_TRACKER_H

#include <jansson.h>

#include "http/http.h"
#include "http/metrics.h"
#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "rpc/rpc.h"

typedef struct kt_tracker kt_tracker_t;

/* TVM's tracker port. */
#define KT_TRACKER_DEFAULT_LISTEN "0.0.0.0:9190"
/* gRPC threads: registry calls are quick, job calls (WatchJob) block one
 * each, up to half of them (KT_LIMIT_WATCH_SHARE_*). */
#define KT_TRACKER_DEFAULT_THREADS 16

typedef struct {
    const char *listen;        /* gRPC address; NULL = KT_TRACKER_DEFAULT_LISTEN */
    const char *http;          /* status/metrics address; NULL or "" = no HTTP server */
    const char *token;         /* required from callers and sent to peers; NULL = none */
    const char *tls_cert;      /* serve TLS with this certificate chain (PEM) ... */
    const char *tls_key;       /* ... and key */
    const char *tls_ca;        /* verify runners and workers with this CA (PEM); NULL = plaintext */
    const char *tls_client_ca; /* mutual TLS: callers (CLI, runners, workers) need a certificate
                                  this CA (PEM) signed; needs tls_cert; NULL = none asked */
    const char *tls_client_cert; /* certificate chain (PEM) shown to runners and workers that ask
                                    for one (needs tls_ca) ... */
    const char *tls_client_key;  /* ... and its key */
    int heartbeat_ms;          /* interval given to peers; 0 = KT_REGISTRY_DEFAULT_HEARTBEAT_MS */
    int threads;               /* gRPC threads; 0 = KT_TRACKER_DEFAULT_THREADS */
} kt_tracker_opts_t;

/* Adds fields to the status snapshot (e.g. sets "jobs" to the jobs of
 * `page` and "jobs_total" to the count of all); called on the HTTP thread.
 * page is never NULL. 0, or negative with kt_err set (the page then answers
 * 500). */
typedef int (*kt_tracker_snapshot_fn)(void *user, json_t *snapshot, const kt_http_page_t *page);

/* ---- create / start / stop ------------------------------------------------------ */

/* Make the server (not listening yet), registry and metrics and register the
 * registry's methods. NULL with kt_err set. */
kt_tracker_t *kt_tracker_new(const kt_tracker_opts_t *opts);
/* Bind and serve gRPC (failure is an error), then HTTP (failure is a
 * warning), then start the sweep timer (every heartbeat interval / 2). */
int kt_tracker_start(kt_tracker_t *t);
/* Stop the sweep timer and HTTP, drain gRPC for up to drain_ms, free it all.
 * Accepts NULL and a tracker that never started. */
void kt_tracker_stop(kt_tracker_t *t, int drain_ms);

/* ---- what other tracker modules plug into (before start) --------------------------- */

kt_rpc_server_t *kt_tracker_server(kt_tracker_t *t);
/* The gRPC server's threads (what long streams may take a share of). */
int kt_tracker_threads(const kt_tracker_t *t);
kt_registry_t *kt_tracker_registry(kt_tracker_t *t);
kt_metrics_t *kt_tracker_metrics(kt_tracker_t *t);
/* Up to 8 snapshot functions, called in order after the tracker's own fields. */
int kt_tracker_add_snapshot(kt_tracker_t *t, kt_tracker_snapshot_fn fn, void *user);

/* ---- query ------------------------------------------------------------------------- */

/* The bound gRPC address ("0.0.0.0:9190"); "" before start. */
const char *kt_tracker_address(const kt_tracker_t *t);
/* The bound HTTP port, 0 when HTTP is off or failed to bind. */
int kt_tracker_http_port(const kt_tracker_t *t);
/* The snapshot the status page shows for the jobs of `page` (NULL: the
 * first KT_HTTP_PAGE_SIZE); it says which in "offset" and "limit". New
 * reference; NULL with kt_err set. */
json_t *kt_tracker_snapshot(kt_tracker_t *t, const kt_http_page_t *page);

/* ---- calling runners and workers ---------------------------------------------------- */

/* Runner/Run and Worker/Build on the peer at `address` over a client cached
 * per address (dropped with its peer), with the tracker's token and TLS CA.
 * deadline_ms bounds the whole call (retries on UNAVAILABLE included; a
 * batch may be measured twice then, which is harmless). 0 with *resp set
 * (free with protobuf_c_message_free_unpacked), or a negative KT_E* code
 * with *st (may be NULL) holding the gRPC status: KT_EUNAVAIL means the peer
 * is gone and the batch should go elsewhere. */
int kt_tracker_run(kt_tracker_t *t, const char *address, const Ktune__V1__RunRequest *req,
                   int deadline_ms, Ktune__V1__RunResponse **resp, kt_rpc_status_t *st);
int kt_tracker_build(kt_tracker_t *t, const char *address, const Ktune__V1__BuildRequest *req,
                     int deadline_ms, Ktune__V1__BuildResponse **resp, kt_rpc_status_t *st);
/* For a stopping tracker (from any thread): cancel every Run and Build call
 * in flight, which then returns at once with *st CANCELLED ("the tracker is
 * stopping") instead of waiting for its deadline (a worker that was
 * SIGSTOPped, a host whose link is down), and refuse every later one the
 * same way (KT_ESTATE). Irreversible. Their results are lost: a caller
 * stores nothing of a cancelled call. */
void kt_tracker_cancel_calls(kt_tracker_t *t);

/* ---- wiring inside common/service ---------------------------------------------------------- */

/* What the registry's RPC methods serve from; must outlive the server. */
typedef struct {
    kt_registry_t *registry;
    kt_metric_t *registrations;   /* counter by role; may be NULL */
} kt_registry_service_t;

/* RegisterPeer's checks before the registry's own: a peer with a known role
 * and at most KT_REGISTRY_MAX_TARGETS targets, described in *d (pointing
 * into req). 0 or KT_EINVAL (the fuzz targets call it without sockets). */
int kt_tracker_register_desc(const Ktune__V1__RegisterRequest *req, kt_peer_desc_t *d);

/* Register Tracker/RegisterPeer, Heartbeat and QueueStatus on `s`, served
 * from svc (registry_service.c). */
int kt_tracker_registry_service_add(kt_rpc_server_t *s, kt_registry_service_t *svc);

#endif
