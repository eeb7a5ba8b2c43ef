#include "http/http.h"
#include "util/err.h"
#include "util/log.h"

#include <errno.h>
#include <stdint.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct kt_http_server {
    kt_http_config_t cfg;
    struct event_base *base;
    struct evhttp *http;
    struct event *stop_ev;    /* activated from kt_http_server_stop() */
    pthread_t thread;
    int thread_started;
    int port;
    char *auth;               /* "Bearer <token>", or NULL when none is required */
    size_t auth_len;
};

/* libevent must know about pthreads before the first event_base is made, or
 * waking a loop from another thread is unsafe. */
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void threads_init(void) { threads_rc = evthread_use_pthreads(); }

/* --- replies ------------------------------------------------------------- */

static void reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
                  const char *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", ctype);
    evhttp_add_header(h, "Cache-Control", "no-store");
    struct evbuffer *buf = evbuffer_new();
    if (!buf) {
        evhttp_send_error(req, 500, "Internal Server Error");
        return;
    }
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* evhttp would send the body even for HEAD: send only its length. */
        char n[32];
        snprintf(n, sizeof n, "%zu", len);
        evhttp_add_header(h, "Content-Length", n);
    } else if (len) {
        evbuffer_add(buf, body, len);
    }
    evhttp_send_reply(req, code, reason, buf);
    evbuffer_free(buf);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
    reply(req, code, reason, "text/plain; charset=utf-8", msg, strlen(msg));
}

static void reply_error(struct evhttp_request *req, const char *what)
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg - 1, "%s: %s", what, kt_err_msg());
    KT_WARN("http: %s", msg);
    n = n < 0 ? 0 : n > (int)sizeof msg - 2 ? (int)sizeof msg - 2 : n;
    msg[n] = '\n';
    msg[n + 1] = '\0';
    reply_text(req, 500, "Internal Server Error", msg);
}

/* --- routes -------------------------------------------------------------- */

static void serve_metrics(kt_http_server_t *s, struct evhttp_request *req)
{
    char *text = kt_metrics_render(s->cfg.metrics);
    if (!text) {
        reply_error(req, "cannot render metrics");
        return;
    }
    reply(req, 200, "OK", KT_METRICS_CONTENT_TYPE, text, strlen(text));
    free(text);
}

/* --- paging ------------------------------------------------------------- */

/* A plain decimal number in lo..hi: digits only (no sign, space or "0x"), so
 * what the client meant is never guessed at. */
static int parse_count(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t x = 0;
    if (!*v)
        return kt_err_set(KT_EINVAL, "%s: empty (want a number in %lld..%lld)", name,
                          (long long)lo, (long long)hi);
    for (const char *p = v; *p; p++) {
        /* Checked before the digit is added: x * 10 + d must not pass hi. */
        if (*p < '0' || *p > '9' || x > (hi - (*p - '0')) / 10)
            return kt_err_set(KT_EINVAL, "%s: '%.32s' is not a number in %lld..%lld", name, v,
                              (long long)lo, (long long)hi);
        x = x * 10 + (*p - '0');
    }
    if (x < lo)
        return kt_err_set(KT_EINVAL, "%s: %lld is below %lld", name, (long long)x,
                          (long long)lo);
    *out = x;
    return 0;
}

int kt_http_parse_page(const char *query, int api, kt_http_page_t *out)
{
    *out = (kt_http_page_t){.offset = 0, .limit = KT_HTTP_PAGE_SIZE};
    if (!query || !*query)
        return 0;
    struct evkeyvalq q;   /* initialised (and emptied on failure) by the parser */
    if (evhttp_parse_query_str(query, &q) != 0) {
        evhttp_clear_headers(&q);
        return kt_err_set(KT_EINVAL, "malformed query string");
    }
    int rc = 0;
    int64_t v;
    kt_http_page_t pg = *out;
    if (api) {
        const char *limit = evhttp_find_header(&q, "limit"),
                   *offset = evhttp_find_header(&q, "offset");
        if (limit && (rc = parse_count("limit", limit, 1, KT_HTTP_MAX_LIMIT, &v)) == 0)
            pg.limit = (int)v;
        if (rc == 0 && offset && (rc = parse_count("offset", offset, 0, INT64_MAX, &v)) == 0)
            pg.offset = v;
    } else {
        const char *page = evhttp_find_header(&q, "page");
        /* The bound keeps (page - 1) * KT_HTTP_PAGE_SIZE an int64_t. */
        if (page && (rc = parse_count("page", page, 1, INT64_MAX / KT_HTTP_PAGE_SIZE, &v)) == 0)
            pg.offset = (v - 1) * KT_HTTP_PAGE_SIZE;
    }
    evhttp_clear_headers(&q);
    if (rc == 0)
        *out = pg;
    return rc;
}

static void serve_status(kt_http_server_t *s, struct evhttp_request *req, int html)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    kt_http_page_t page;
    kt_err_clear();
    if (kt_http_parse_page(uri ? evhttp_uri_get_query(uri) : NULL, !html, &page) != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "bad request: %s\n", kt_err_msg());
        reply_text(req, 400, "Bad Request", msg);
        return;
    }
    json_t *snap = s->cfg.snapshot(s->cfg.snapshot_user, &page);
    if (!snap) {
        if (kt_err_code() == KT_OK)
            kt_err_set(KT_EINTERNAL, "the provider returned no snapshot");
        reply_error(req, "status snapshot unavailable");
        return;
    }
    char *body;
    if (html) {
        int refresh = s->cfg.refresh_s == 0 ? KT_HTTP_DEFAULT_REFRESH_S : s->cfg.refresh_s;
        body = kt_http_status_page_at(snap, refresh, &page);
    } else {
        body = json_dumps(snap, JSON_INDENT(2) | JSON_ENCODE_ANY);
        if (!body)
            kt_err_set(KT_ENOMEM, "cannot encode the snapshot as JSON");
    }
    json_decref(snap);
    if (!body) {
        reply_error(req, html ? "cannot render the status page" : "cannot encode the status");
        return;
    }
    reply(req, 200, "OK", html ? "text/html; charset=utf-8" : "application/json", body,
          strlen(body));
    free(body);
}

/* Constant-time in the content, so the time of a wrong guess says nothing
 * about how much of it matched. */
static int auth_ok(const kt_http_server_t *s, struct evhttp_request *req)
{
    if (!s->auth)
        return 1;
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!v)
        return 0;
    size_t n = strlen(v);
    unsigned diff = n != s->auth_len;
    for (size_t j = 0; j < n; j++)
        diff |= (unsigned)((unsigned char)v[j] ^ (unsigned char)s->auth[j % s->auth_len]);
    return diff == 0;
}

static void handle(struct evhttp_request *req, void *arg)
{
    kt_http_server_t *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path)
        path = "/";

    enum { R_NONE, R_HEALTH, R_METRICS, R_STATUS, R_PAGE } route = R_NONE;
    if (strcmp(path, "/healthz") == 0)
        route = R_HEALTH;
    else if (strcmp(path, "/metrics") == 0 && s->cfg.metrics)
        route = R_METRICS;
    else if (strcmp(path, "/api/status") == 0 && s->cfg.snapshot)
        route = R_STATUS;
    else if (strcmp(path, "/") == 0 && s->cfg.snapshot)
        route = R_PAGE;
    if (route == R_NONE) {
        reply_text(req, 404, "Not Found", "not found\n");
        return;
    }
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        reply_text(req, 405, "Method Not Allowed", "method not allowed\n");
        return;
    }
    if (route != R_HEALTH && !auth_ok(s, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"ktune\"");
        reply_text(req, 401, "Unauthorized", "missing or wrong bearer token\n");
        return;
    }
    switch (route) {
    case R_HEALTH:
        reply_text(req, 200, "OK", "ok\n");
        break;
    case R_METRICS:
        serve_metrics(s, req);
        break;
    case R_STATUS:
    case R_PAGE:
        serve_status(s, req, route == R_PAGE);
        break;
    case R_NONE:
        break;
    }
}

/* --- start / stop ------------------------------------------------------------ */

/* "host:port", "[v6]:port" or ":port" -> host (malloc'd) and port. */
static int parse_bind(const char *bind, char **host, int *port)
{
    const char *colon, *hs = bind, *he;
    if (bind[0] == '[') {
        he = strchr(bind, ']');
        if (!he || he[1] != ':')
            return kt_err_set(KT_EINVAL, "bad HTTP bind address '%s' (want [host]:port)", bind);
        hs = bind + 1;
        colon = he + 1;
    } else {
        colon = strrchr(bind, ':');
        if (!colon)
            return kt_err_set(KT_EINVAL, "bad HTTP bind address '%s' (want host:port)", bind);
        he = colon;
    }
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end || errno || p < 0 || p > 65535)
        return kt_err_set(KT_EINVAL, "bad port in HTTP bind address '%s'", bind);
    size_t n = (size_t)(he - hs);
    *host = n ? strndup(hs, n) : strdup("0.0.0.0");
    if (!*host)
        return kt_err_set(KT_ENOMEM, "out of memory");
    *port = (int)p;
    return KT_OK;
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    kt_http_server_t *s = arg;
    event_base_loopbreak(s->base);
}

static void *serve_thread(void *arg)
{
    kt_http_server_t *s = arg;
    event_base_loop(s->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void server_free(kt_http_server_t *s)
{
    if (s->http)
        evhttp_free(s->http);
    if (s->stop_ev)
        event_free(s->stop_ev);
    if (s->base)
        event_base_free(s->base);
    if (s->auth) {
        memset(s->auth, 0, s->auth_len);
        free(s->auth);
    }
    free(s);
}

static void ignore_sigpipe(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPIPE, &sa, NULL);
    }
}

kt_http_server_t *kt_http_server_start(const kt_http_config_t *cfg)
{
    if (!cfg) {
        kt_err_set(KT_EINVAL, "HTTP server without configuration");
        return NULL;
    }
    pthread_once(&threads_once, threads_init);
    if (threads_rc != 0) {
        kt_err_set(KT_EINTERNAL, "libevent: cannot enable pthreads support");
        return NULL;
    }
    const char *bind = cfg->bind ? cfg->bind : KT_HTTP_DEFAULT_BIND;
    char *host = NULL;
    int port = 0;
    int rc = parse_bind(bind, &host, &port);
    if (rc < 0)
        return NULL;

    kt_http_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        free(host);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->cfg.bind = NULL;   /* not needed after binding; the caller's string is not kept */
    s->cfg.token = NULL;  /* kept as s->auth, which the server owns and wipes */
    if (cfg->token && *cfg->token) {
        s->auth_len = strlen("Bearer ") + strlen(cfg->token);
        s->auth = malloc(s->auth_len + 1);
        if (!s->auth) {
            free(host);
            server_free(s);
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
        snprintf(s->auth, s->auth_len + 1, "Bearer %s", cfg->token);
    }
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    s->stop_ev = s->base ? event_new(s->base, -1, 0, on_stop, s) : NULL;
    if (!s->http || !s->stop_ev) {
        free(host);
        server_free(s);
        kt_err_set(KT_ENOMEM, "libevent: cannot create the HTTP server");
        return NULL;
    }
    /* Every method reaches handle() so that it can answer 405 itself;
     * evhttp would answer 501 for the ones not allowed. */
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_timeout(s->http, 30);
    /* Read-only routes: request bodies are never needed. */
    evhttp_set_max_body_size(s->http, 64 * 1024);
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_gencb(s->http, handle, s);

    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
    if (!bs) {
        int e = EVUTIL_SOCKET_ERROR();
        kt_err_set(KT_EIO, "cannot bind the HTTP server to %s: %s", bind,
                   e ? evutil_socket_error_to_string(e) : "address not usable");
        free(host);
        server_free(s);
        return NULL;
    }
    free(host);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) != 0) {
        kt_err_set(KT_EIO, "getsockname: %s", strerror(errno));
        server_free(s);
        return NULL;
    }
    s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    ignore_sigpipe();
    rc = pthread_create(&s->thread, NULL, serve_thread, s);
    if (rc != 0) {
        kt_err_set(KT_EINTERNAL, "cannot start the HTTP thread: %s", strerror(rc));
        server_free(s);
        return NULL;
    }
    s->thread_started = 1;
    return s;
}

void kt_http_server_stop(kt_http_server_t *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        /* An active event survives until the loop runs, so this cannot be
         * lost if the thread has not reached event_base_loop() yet (a
         * loopbreak issued that early would be reset by the loop). */
        event_active(s->stop_ev, EV_READ, 0);
        pthread_join(s->thread, NULL);
    }
    server_free(s);
}

int kt_http_server_port(const kt_http_server_t *s) { return s ? s->port : -1; }
