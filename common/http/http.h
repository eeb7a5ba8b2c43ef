/*
 * The tracker's HTTP side: a small libevent (evhttp) server on its own
 * thread serving a human status page, the Prometheus metrics and a health
 * check. It is read-only: nothing here changes tracker state, so the routes
 * accept only GET (and HEAD); any other method is 405, any other path 404.
 *
 *   GET /healthz      "ok\n" (text/plain)
 *   GET /metrics      the registry in Prometheus text format 0.0.4
 *   GET /api/status   the provider's JSON snapshot as is (application/json);
 *                     ?limit=L&offset=O pages through the jobs (L in
 *                     1..KT_HTTP_MAX_LIMIT, default KT_HTTP_PAGE_SIZE; O >= 0)
 *   GET /             an HTML page rendered from the same snapshot; ?page=N
 *                     (N >= 1) shows the N-th KT_HTTP_PAGE_SIZE jobs, with
 *                     links to the newer and older pages
 *
 * Paging exists because a tracker's store may hold thousands of jobs and
 * each one shown costs reading its records: the provider is told which jobs
 * are wanted (kt_http_page_t) and builds only those. A malformed query or a
 * paging value out of range answers 400 with the reason (text/plain);
 * parameters the route does not know are ignored.
 *
 * Access (docs/security.md): with a token configured, every route but
 * /healthz needs "Authorization: Bearer <token>" and answers 401 without it
 * (the snapshot lists every job's workloads, the metrics the cluster's
 * shape); /healthz carries nothing and stays open for liveness probes.
 * Without a token every route is open, which is why the default address is
 * loopback and daemons refuse a wider one without a token (kt_listen_check).
 *
 * The snapshot provider returns a JSON description of the tracker state in
 * the schema below; the HTTP side only reads it, so the tracker decides what
 * to show. If the provider fails (NULL), / and /api/status answer 500 with
 * the provider's kt_err message. Every field is optional for the page
 * renderer: a missing or mistyped field shows as "-".
 *
 * Snapshot schema (times in seconds, latencies in seconds, as the scheduler):
 *   {"version": "0.1.0", "uptime_s": 12.5,
 *    "jobs_total": 45 (every job; "jobs" holds the page asked for),
 *    "offset": 0, "limit": 20 (the page "jobs" holds, when the provider says),
 *    "jobs": [{"id": "job-1" or 1, "state": "running", "target": "cuda",
 *              "policy": "sketch.xgb",
 *              "store_model": "v3/1200" (the store model version / records
 *              it trained on that the job's cost model started from; null:
 *              none),
 *              ...every field of kt_scheduler_snapshot(): "strategy",
 *              "tasks": [{"id", "workload_key", "weight", "flops",
 *                         "latency_s" (null: none yet), "gflops" (null),
 *                         "trials", "rounds", "status", "in_flight",
 *                         "left_group"}],
 *              "estimated_latency_s" (null), "total_trials", "budget",
 *              "measures_per_round", "elapsed_s", "next_task", "finished",
 *              "finish_message",
 *              "curve": [[trials, estimated_latency_s or null], ...]}],
 *    "runners": [{"address", "key", "state", "in_flight"}],
 *    "workers": [{"address", "state", "in_flight", "slots"}],
 *    "queue":   [{"key", "total", "free", "pending"}]}
 * so a tracker builds a job as its own fields plus json_object_update() with
 * the scheduler's snapshot, and the curve from the scheduler's latency_log
 * callback (points with a null latency are not plotted).
 *
 * Ownership: the server borrows the metrics registry and the provider's
 * user pointer; both must outlive kt_http_server_stop(). The provider hands
 * over a new reference (the server json_decref()s it). Returned strings are
 * malloc'd and freed by the caller.
 *
 * Threads: kt_http_server_start() binds the socket on the calling thread
 * (so bind errors are reported there) and serves requests on a thread of
 * its own, one request at a time. The provider and the metrics collectors
 * are called on that HTTP thread: they must lock whatever tracker state they
 * read, and should be quick (a slow provider delays /metrics too).
 * kt_http_server_stop() may be called from any thread but the HTTP thread
 * (i.e. not from the provider); it wakes the loop, joins the thread and
 * closes every connection. Several servers may run at once.
 *
 * A client closing its connection early must not kill the process, so
 * kt_http_server_start() sets SIGPIPE to SIG_IGN if it is still SIG_DFL.
 */
#ifndef KT_HTTP_HTTP_H
#define KT_HTTP_HTTP_H

#include <jansson.h>
#include <stdint.h>

#include "http/metrics.h"

typedef struct kt_http_server kt_http_server_t;

/* The tracker's default HTTP address (its gRPC port is 9190). */
#define KT_HTTP_DEFAULT_BIND "127.0.0.1:9191"
/* Seconds between automatic reloads of the status page. */
#define KT_HTTP_DEFAULT_REFRESH_S 5

/* Jobs per page of / and the default limit of /api/status. */
#define KT_HTTP_PAGE_SIZE 20
/* The largest limit /api/status takes: a provider reads every job's records
 * to show it, so one request must not ask for all of a big store. */
#define KT_HTTP_MAX_LIMIT 100

/* Which jobs a status request wants: at most `limit` of them, skipping the
 * first `offset` in the provider's order (the most recent first). */
typedef struct {
    int64_t offset;   /* >= 0 */
    int limit;        /* 1..KT_HTTP_MAX_LIMIT */
} kt_http_page_t;

/* Returns a new reference to the snapshot with the jobs of `page` in
 * "jobs" and the count of all of them in "jobs_total", or NULL with kt_err
 * set. page is never NULL. Called on the HTTP thread. */
typedef json_t *(*kt_http_snapshot_fn)(void *user, const kt_http_page_t *page);

typedef struct {
    const char *bind;              /* "host:port" ("[::1]:0" for IPv6); NULL = default */
    kt_metrics_t *metrics;         /* NULL: /metrics is 404 */
    kt_http_snapshot_fn snapshot;  /* NULL: / and /api/status are 404 */
    void *snapshot_user;
    int refresh_s;                 /* status page reload period; 0 = default, < 0 = none */
    const char *token;             /* bearer token required (copied); NULL or "" = none */
} kt_http_config_t;

/* --- start / stop ------------------------------------------------------ */

/* Bind and start serving. NULL + kt_err: KT_EINVAL for a malformed bind
 * address, KT_EIO when the address cannot be bound, KT_ENOMEM. */
kt_http_server_t *kt_http_server_start(const kt_http_config_t *cfg);
/* Stop serving, join the thread and free the server. Accepts NULL. */
void kt_http_server_stop(kt_http_server_t *s);

/* --- query --------------------------------------------------------------- */

/* The bound TCP port (the real one when the address asked for port 0). */
int kt_http_server_port(const kt_http_server_t *s);

/* --- paging ------------------------------------------------------------------ */

/* The page a request's query string asks for (NULL or "": the first page of
 * KT_HTTP_PAGE_SIZE jobs). api != 0: /api/status's limit and offset;
 * otherwise /'s page. Numbers are plain decimal digits. 0, or KT_EINVAL
 * with a message for the client on a malformed query or a value out of
 * range; *out is then the first page. */
int kt_http_parse_page(const char *query, int api, kt_http_page_t *out);

/* --- status page ----------------------------------------------------------- */

/* The self-contained HTML page for a snapshot (inline CSS and SVG, no
 * scripts, no external assets; every string from the snapshot is
 * HTML-escaped). refresh_s > 0 adds <meta http-equiv="refresh">. Per job: a
 * task table (ID, workload key, latency (ms), speed (GFLOPS), trials,
 * weight, status) and an SVG plot of the estimated total latency against
 * trials; then runners, workers and the queue. A NULL or non-object
 * snapshot renders an empty page. Caller frees; NULL + kt_err on OOM. */
char *kt_http_status_page(const json_t *snapshot, int refresh_s);
/* The same for the jobs of `page` (NULL: the first page): the snapshot's
 * "jobs" are taken as that page, "jobs_total" gives the number of pages, and
 * links lead to the newer and older pages (/?page=N). A page past the end
 * says so and links back to the last page. */
char *kt_http_status_page_at(const json_t *snapshot, int refresh_s, const kt_http_page_t *page);

#endif
