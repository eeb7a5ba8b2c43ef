/*
 * The gRPC server. One notification completion queue is shared by the
 * server's threads; 2 x threads calls are requested on it at all times, each
 * bound to its own pluck queue (as gRPC's C++ synchronous server does), so a
 * thread that picks up a new call runs it to the end with blocking batches
 * while the other threads keep accepting calls.
 */
#include "rpc_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

typedef struct {
    char *method;
    const ProtobufCMessageDescriptor *req_desc;
    const ProtobufCMessageDescriptor *resp_desc;
    kt_rpc_unary_fn unary;
    kt_rpc_stream_fn stream;
    void *ud;
} handler_t;

/* One outstanding grpc_server_request_call and, once matched, its call. */
typedef struct {
    kt_rpc_server_t *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_completion_queue *call_cq;   /* pluck queue the call is bound to */
} slot_t;

struct kt_rpc_server {
    char *listen;
    char *auth;          /* "Bearer <token>", or NULL when no token is required */
    size_t auth_len;
    char *tls_cert;
    char *tls_key;
    char *tls_client_ca;   /* mutual TLS: callers need a certificate this CA signed */
    int threads;
    size_t max_message;

    handler_t *handlers;
    size_t n_handlers, cap_handlers;

    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t *tids;
    int n_tids;
    slot_t *slots;
    int n_slots;
    int port;
    char address[320];

    pthread_mutex_t mu;   /* guards started, stopping, shutdown_done, serving, re-requests */
    pthread_cond_t cv;
    int started, stopping, shutdown_done;
    int serving;          /* calls a thread has taken and not finished */
    char shutdown_tag;    /* its address tags grpc_server_shutdown_and_notify */
};

typedef struct arena_block {
    struct arena_block *next;
    max_align_t data[];
} arena_block_t;

struct kt_rpc_call {
    kt_rpc_server_t *srv;
    grpc_call *call;
    grpc_completion_queue *cq;
    const handler_t *h;
    char *method;
    char *peer;
    arena_block_t *arena;
    int cancelled;        /* out-parameter of RECV_CLOSE_ON_SERVER */
    int close_done;       /* the RECV_CLOSE_ON_SERVER batch has been plucked */
    int initial_sent;     /* SEND_INITIAL_METADATA went out */
    int gone;             /* a batch failed: the call is dead */
    char close_tag, io_tag;
    char msg[KT_RPC_STATUS_MSG_MAX];
};

/* ---- Server life cycle --------------------------------------------------- */

kt_rpc_server_t *kt_rpc_server_new(const kt_rpc_server_opts_t *opts)
{
    if (!opts || !opts->listen || !*opts->listen) {
        kt_err_set(KT_EINVAL, "rpc server: no listen address");
        return NULL;
    }
    if ((opts->tls_cert == NULL) != (opts->tls_key == NULL)) {
        kt_err_set(KT_EINVAL, "rpc server: TLS needs both a certificate and a key");
        return NULL;
    }
    if (opts->token && !*opts->token) {
        kt_err_set(KT_EINVAL, "rpc server: empty token");
        return NULL;
    }
    if (opts->tls_client_ca && !opts->tls_cert) {
        kt_err_set(KT_EINVAL, "rpc server: client certificates need TLS (a certificate and key)");
        return NULL;
    }
    kt_rpc_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    s->threads = opts->threads > 0 ? opts->threads : KT_RPC_DEFAULT_THREADS;
    s->max_message = opts->max_message ? opts->max_message : KT_RPC_DEFAULT_MAX_MESSAGE;
    s->listen = strdup(opts->listen);
    int ok = s->listen != NULL;
    if (opts->token) {
        s->auth_len = strlen("Bearer ") + strlen(opts->token);
        s->auth = malloc(s->auth_len + 1);
        if (s->auth)
            snprintf(s->auth, s->auth_len + 1, "Bearer %s", opts->token);
        ok = ok && s->auth;
    }
    if (opts->tls_cert) {
        s->tls_cert = strdup(opts->tls_cert);
        s->tls_key = strdup(opts->tls_key);
        ok = ok && s->tls_cert && s->tls_key;
    }
    if (opts->tls_client_ca)
        ok = ok && (s->tls_client_ca = strdup(opts->tls_client_ca));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    if (!ok) {
        kt_rpc_server_stop(s, 0);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return s;
}

static int add_handler(kt_rpc_server_t *s, const char *method,
                       const ProtobufCMessageDescriptor *req_desc,
                       const ProtobufCMessageDescriptor *resp_desc, kt_rpc_unary_fn unary,
                       kt_rpc_stream_fn stream, void *ud)
{
    if (!s || !method || method[0] != '/' || !req_desc || !resp_desc || (!unary && !stream))
        return kt_err_set(KT_EINVAL, "rpc server: bad handler registration for %s",
                          method ? method : "(null)");
    if (s->started)
        return kt_err_set(KT_ESTATE, "rpc server: %s registered after start", method);
    for (size_t i = 0; i < s->n_handlers; i++)
        if (strcmp(s->handlers[i].method, method) == 0)
            return kt_err_set(KT_EINVAL, "rpc server: %s registered twice", method);
    if (s->n_handlers == s->cap_handlers) {
        size_t cap = s->cap_handlers ? 2 * s->cap_handlers : 8;
        handler_t *h = realloc(s->handlers, cap * sizeof *h);
        if (!h)
            return kt_err_set(KT_ENOMEM, "out of memory");
        s->handlers = h;
        s->cap_handlers = cap;
    }
    handler_t *h = &s->handlers[s->n_handlers];
    h->method = strdup(method);
    if (!h->method)
        return kt_err_set(KT_ENOMEM, "out of memory");
    h->req_desc = req_desc;
    h->resp_desc = resp_desc;
    h->unary = unary;
    h->stream = stream;
    h->ud = ud;
    s->n_handlers++;
    return KT_OK;
}

int kt_rpc_server_add_unary(kt_rpc_server_t *s, const char *method,
                            const ProtobufCMessageDescriptor *req_desc,
                            const ProtobufCMessageDescriptor *resp_desc, kt_rpc_unary_fn fn,
                            void *ud)
{
    if (!fn)
        return kt_err_set(KT_EINVAL, "rpc server: no handler for %s", method ? method : "?");
    return add_handler(s, method, req_desc, resp_desc, fn, NULL, ud);
}

int kt_rpc_server_add_stream(kt_rpc_server_t *s, const char *method,
                             const ProtobufCMessageDescriptor *req_desc,
                             const ProtobufCMessageDescriptor *resp_desc, kt_rpc_stream_fn fn,
                             void *ud)
{
    if (!fn)
        return kt_err_set(KT_EINVAL, "rpc server: no handler for %s", method ? method : "?");
    return add_handler(s, method, req_desc, resp_desc, NULL, fn, ud);
}

static const handler_t *find_handler(const kt_rpc_server_t *s, grpc_slice method)
{
    for (size_t i = 0; i < s->n_handlers; i++)
        if (grpc_slice_str_cmp(method, s->handlers[i].method) == 0)
            return &s->handlers[i];
    return NULL;
}

/* Constant-time in the content: the loop length is the presented value's. */
static int auth_ok(const kt_rpc_server_t *s, const grpc_metadata_array *md)
{
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0)
            continue;
        const unsigned char *v = GRPC_SLICE_START_PTR(md->metadata[i].value);
        size_t n = GRPC_SLICE_LENGTH(md->metadata[i].value);
        const unsigned char *want = (const unsigned char *)s->auth;
        unsigned diff = n != s->auth_len;
        for (size_t j = 0; j < n; j++)
            diff |= (unsigned)(v[j] ^ want[j % s->auth_len]);
        return diff == 0;
    }
    return 0;
}

/* ---- Serving one call ------------------------------------------------------ */

static void destroy_cq(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
}

static int call_batch(kt_rpc_call_t *c, const grpc_op *ops, size_t n)
{
    if (grpc_call_start_batch(c->call, ops, n, &c->io_tag, NULL) != GRPC_CALL_OK) {
        c->gone = 1;
        return 0;
    }
    grpc_event ev =
        grpc_completion_queue_pluck(c->cq, &c->io_tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (!ev.success)
        c->gone = 1;
    return ev.success;
}

static int resolve_code(kt_rpc_call_t *c, int rc)
{
    if (rc < 0) {
        snprintf(c->msg, sizeof c->msg, "%s", kt_err_msg());
        return kt_rpc_code_from_err(rc);
    }
    return rc > KT_RPC_UNAUTHENTICATED ? KT_RPC_UNKNOWN : rc;
}

static void serve_call(kt_rpc_server_t *s, slot_t *sl)
{
    kt_rpc_call_t c = {.srv = s, .call = sl->call, .cq = sl->call_cq};
    grpc_byte_buffer *req_bb = NULL, *resp_bb = NULL;
    ProtobufCMessage *req = NULL, *resp = NULL;
    int code = KT_RPC_OK;

    c.method = malloc(GRPC_SLICE_LENGTH(sl->details.method) + 1);
    if (c.method)
        kt_rpc_slice_copy(sl->details.method, c.method, GRPC_SLICE_LENGTH(sl->details.method) + 1);

    /* Watch for the end of the call (cancellation, deadline) from the start. */
    grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
    close_op.data.recv_close_on_server.cancelled = &c.cancelled;
    if (grpc_call_start_batch(c.call, &close_op, 1, &c.close_tag, NULL) != GRPC_CALL_OK) {
        KT_WARN("rpc: cannot start a call: dropping it");
        grpc_call_cancel(c.call, NULL);
        grpc_call_unref(c.call);
        free(c.method);
        return;
    }

    if (!c.method) {
        code = KT_RPC_RESOURCE_EXHAUSTED;
        snprintf(c.msg, sizeof c.msg, "out of memory");
        goto finish;
    }
    if (s->auth && !auth_ok(s, &sl->md)) {
        code = KT_RPC_UNAUTHENTICATED;
        snprintf(c.msg, sizeof c.msg, "missing or wrong token");
        goto finish;
    }
    c.h = find_handler(s, sl->details.method);
    if (!c.h) {
        code = KT_RPC_UNIMPLEMENTED;
        snprintf(c.msg, sizeof c.msg, "unknown method %s", c.method);
        goto finish;
    }

    grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA}, {.op = GRPC_OP_RECV_MESSAGE}};
    ops[1].data.recv_message.recv_message = &req_bb;
    if (!call_batch(&c, ops, 2)) {
        code = KT_RPC_CANCELLED;
        snprintf(c.msg, sizeof c.msg, "call ended before its request arrived");
        goto finish;
    }
    c.initial_sent = 1;
    if (!req_bb) {
        code = KT_RPC_INVALID_ARGUMENT;
        snprintf(c.msg, sizeof c.msg, "%s: no request message", c.method);
        goto finish;
    }
    req = kt_rpc_bb_unpack(c.h->req_desc, req_bb);
    if (!req) {
        code = KT_RPC_INVALID_ARGUMENT;
        snprintf(c.msg, sizeof c.msg, "%s: request does not decode as %s", c.method,
                 c.h->req_desc->name);
        goto finish;
    }

    kt_err_clear();
    if (c.h->unary) {
        resp = kt_rpc_call_alloc(&c, c.h->resp_desc->sizeof_message);
        if (!resp) {
            code = KT_RPC_RESOURCE_EXHAUSTED;
            snprintf(c.msg, sizeof c.msg, "out of memory");
            goto finish;
        }
        c.h->resp_desc->message_init(resp);
        code = resolve_code(&c, c.h->unary(&c, req, resp, c.h->ud));
        if (code == KT_RPC_OK) {
            resp_bb = kt_rpc_bb_pack(resp);
            if (!resp_bb) {
                code = KT_RPC_RESOURCE_EXHAUSTED;
                snprintf(c.msg, sizeof c.msg, "out of memory packing the response");
            }
        }
    } else {
        code = resolve_code(&c, c.h->stream(&c, req, c.h->ud));
    }

finish:;
    if (code != KT_RPC_OK && !c.msg[0])
        snprintf(c.msg, sizeof c.msg, "%s", kt_rpc_code_name(code));
    grpc_slice details = grpc_slice_from_copied_string(code == KT_RPC_OK ? "" : c.msg);
    grpc_op fin[3];
    size_t n = 0;
    memset(fin, 0, sizeof fin);
    if (!c.initial_sent)
        fin[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (resp_bb) {
        fin[n].op = GRPC_OP_SEND_MESSAGE;
        fin[n++].data.send_message.send_message = resp_bb;
    }
    fin[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    fin[n].data.send_status_from_server.status = (grpc_status_code)code;
    fin[n++].data.send_status_from_server.status_details = &details;
    if (!c.gone)
        call_batch(&c, fin, n);
    else
        grpc_call_cancel(c.call, NULL);   /* nobody to answer; make sure the call ends */
    grpc_slice_unref(details);
    if (!c.close_done)
        grpc_completion_queue_pluck(c.cq, &c.close_tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
    if (req_bb)
        grpc_byte_buffer_destroy(req_bb);
    if (resp_bb)
        grpc_byte_buffer_destroy(resp_bb);
    while (c.arena) {
        arena_block_t *b = c.arena;
        c.arena = b->next;
        free(b);
    }
    free(c.method);
    if (c.peer)
        gpr_free(c.peer);
    grpc_call_unref(c.call);
}

/* ---- Threads and requested calls --------------------------------------------- */

/* With s->mu held: request the next call on this slot. */
static void slot_request(kt_rpc_server_t *s, slot_t *sl)
{
    sl->srv = s;
    sl->call = NULL;
    grpc_call_details_init(&sl->details);
    grpc_metadata_array_init(&sl->md);
    sl->call_cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call_error e = grpc_server_request_call(s->server, &sl->call, &sl->details, &sl->md,
                                                 sl->call_cq, s->cq, sl);
    if (e != GRPC_CALL_OK) {
        KT_ERROR("rpc: grpc_server_request_call failed (%d); serving with one slot less", e);
        grpc_call_details_destroy(&sl->details);
        grpc_metadata_array_destroy(&sl->md);
        destroy_cq(sl->call_cq);
        sl->call_cq = NULL;
    }
}

static void slot_clear(slot_t *sl)
{
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
    destroy_cq(sl->call_cq);
    sl->call_cq = NULL;
    sl->call = NULL;
}

static void *cq_thread(void *arg)
{
    kt_rpc_server_t *s = arg;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        if (ev.tag == &s->shutdown_tag) {
            pthread_mutex_lock(&s->mu);
            s->shutdown_done = 1;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        slot_t *sl = ev.tag;
        int matched = ev.success;
        if (matched) {
            pthread_mutex_lock(&s->mu);
            s->serving++;
            pthread_mutex_unlock(&s->mu);
            serve_call(s, sl);
        }
        slot_clear(sl);
        /* A failed request means the server is shutting down: retire the slot. */
        pthread_mutex_lock(&s->mu);
        if (matched) {
            s->serving--;
            pthread_cond_broadcast(&s->cv);
        }
        if (matched && !s->stopping)
            slot_request(s, sl);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* Undo a bound but never started server (no threads, no requested calls):
 * gRPC insists on a shutdown before destroying a server with a listener. */
static void unstarted_teardown(kt_rpc_server_t *s)
{
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    grpc_server_destroy(s->server);
    destroy_cq(s->cq);
    s->server = NULL;
    s->cq = NULL;
    s->port = 0;
}

static char *read_pem(const char *path, const char *what)
{
    char *pem = kt_file_read(path, NULL);
    if (!pem)
        kt_err_prefix("TLS %s", what);
    return pem;
}

int kt_rpc_server_start(kt_rpc_server_t *s)
{
    if (!s)
        return kt_err_set(KT_EINVAL, "rpc server: NULL");
    if (s->started || s->server)
        return kt_err_set(KT_ESTATE, "rpc server: already started");

    grpc_server_credentials *creds;
    if (s->tls_cert) {
        /* Checked here too, so that a key that does not match its
         * certificate is said as such, not as a port that cannot bind. */
        kt_rpc_tls_files_t files = {.cert = s->tls_cert, .key = s->tls_key,
                                    .client_ca = s->tls_client_ca};
        if (kt_rpc_tls_check(&files) != 0)
            return kt_err_prefix("rpc server");
        char *cert = read_pem(s->tls_cert, "certificate");
        char *key = cert ? read_pem(s->tls_key, "key") : NULL;
        char *client_ca = key && s->tls_client_ca ? read_pem(s->tls_client_ca, "client CA") : NULL;
        if (!key || (s->tls_client_ca && !client_ca)) {
            free(cert);
            free(key);
            return kt_err_code();
        }
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        kt_rpc_lib_init();
        creds = grpc_ssl_server_credentials_create_ex(
            client_ca, &pair, 1,
            client_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        /* The credentials keep their own copies of the PEM text. */
        memset(key, 0, strlen(key));
        free(key);
        free(cert);
        free(client_ca);
        if (!creds)
            return kt_err_set(KT_EINVAL, "rpc server: bad TLS certificate or key (%s, %s)",
                              s->tls_cert, s->tls_key);
    } else {
        kt_rpc_lib_init();
        creds = grpc_insecure_server_credentials_create();
    }

    grpc_arg args[2];
    kt_rpc_size_args(args, s->max_message);
    grpc_channel_args chargs = {.num_args = 2, .args = args};
    s->server = grpc_server_create(&chargs, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    s->port = grpc_server_add_http2_port(s->server, s->listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port <= 0) {
        s->port = 0;
        grpc_server_destroy(s->server);
        destroy_cq(s->cq);
        s->server = NULL;
        s->cq = NULL;
        return kt_err_set(KT_EIO, "rpc server: cannot listen on %s", s->listen);
    }

    const char *colon = strrchr(s->listen, ':');
    if (colon && strncmp(s->listen, "unix:", 5) != 0)
        snprintf(s->address, sizeof s->address, "%.*s:%d", (int)(colon - s->listen), s->listen,
                 s->port);
    else
        snprintf(s->address, sizeof s->address, "%s", s->listen);

    s->n_slots = 2 * s->threads;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->tids = calloc((size_t)s->threads, sizeof *s->tids);
    if (!s->slots || !s->tids) {
        unstarted_teardown(s);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    /* Threads first: a server that cannot serve is never started. */
    for (int i = 0; i < s->threads; i++) {
        if (pthread_create(&s->tids[i], NULL, cq_thread, s) != 0)
            break;
        s->n_tids++;
    }
    if (s->n_tids == 0) {
        unstarted_teardown(s);
        return kt_err_set(KT_EIO, "rpc server: cannot start threads");
    }
    grpc_server_start(s->server);
    pthread_mutex_lock(&s->mu);
    s->started = 1;
    for (int i = 0; i < s->n_slots; i++)
        slot_request(s, &s->slots[i]);
    pthread_mutex_unlock(&s->mu);
    return KT_OK;
}

int kt_rpc_server_port(const kt_rpc_server_t *s) { return s ? s->port : 0; }

const char *kt_rpc_server_address(const kt_rpc_server_t *s)
{
    return s && s->port ? s->address : "";
}

/* How often the drain looks whether calls are still being served, and how
 * many looks in a row must find none before the connections left are
 * closed: a call gRPC has matched may wait a moment for a thread. */
#define DRAIN_POLL_MS 50
#define DRAIN_IDLE_LOOKS 3

static void wait_shutdown(kt_rpc_server_t *s, int drain_ms)
{
    double end = kt_time_mono() + drain_ms / 1000.0;
    int idle = 0, timed_out = 0;
    pthread_mutex_lock(&s->mu);
    /* gRPC's shutdown waits for every connection to close, and a client
     * that is stopped (SIGSTOP, a host gone) never closes its own: once no
     * call is left, the drain is over whatever the connections do. */
    while (!s->shutdown_done && idle < DRAIN_IDLE_LOOKS) {
        double left = end - kt_time_mono();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        int ms = left * 1000 < DRAIN_POLL_MS ? (int)(left * 1000) + 1 : DRAIN_POLL_MS;
        struct timespec until = kt_time_mono_after_ms(ms);
        pthread_cond_timedwait(&s->cv, &s->mu, &until);
        idle = s->serving == 0 ? idle + 1 : 0;
    }
    int drained = s->shutdown_done;
    pthread_mutex_unlock(&s->mu);
    if (!drained) {
        if (timed_out)
            KT_INFO("rpc server: drain deadline (%d ms) passed; cancelling calls in flight",
                    drain_ms);
        else
            KT_INFO("rpc server: no call in flight; closing the connections still open");
        /* It also drops every connection, so the shutdown completes. */
        grpc_server_cancel_all_calls(s->server);
        pthread_mutex_lock(&s->mu);
        while (!s->shutdown_done)
            pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
}

void kt_rpc_server_stop(kt_rpc_server_t *s, int drain_ms)
{
    if (!s)
        return;
    if (s->server) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_mutex_unlock(&s->mu);
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
        wait_shutdown(s, drain_ms < 0 ? 0 : drain_ms);
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        for (int i = 0; i < s->n_tids; i++)
            pthread_join(s->tids[i], NULL);
        grpc_completion_queue_destroy(s->cq);
    }
    for (size_t i = 0; i < s->n_handlers; i++)
        free(s->handlers[i].method);
    free(s->handlers);
    free(s->slots);
    free(s->tids);
    free(s->listen);
    if (s->auth) {
        memset(s->auth, 0, s->auth_len);
        free(s->auth);
    }
    free(s->tls_cert);
    free(s->tls_key);
    free(s->tls_client_ca);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- Inside a handler -------------------------------------------------------- */

int kt_rpc_call_fail(kt_rpc_call_t *call, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->msg, sizeof call->msg, fmt, ap);
    va_end(ap);
    return code;
}

void *kt_rpc_call_alloc(kt_rpc_call_t *call, size_t size)
{
    arena_block_t *b = calloc(1, sizeof *b + size);
    if (!b)
        return NULL;
    b->next = call->arena;
    call->arena = b;
    return b->data;
}

char *kt_rpc_call_strdup(kt_rpc_call_t *call, const char *str)
{
    size_t n = strlen(str ? str : "");
    char *d = kt_rpc_call_alloc(call, n + 1);
    if (d)
        memcpy(d, str ? str : "", n);
    return d;
}

const char *kt_rpc_call_method(const kt_rpc_call_t *call) { return call->method; }

const char *kt_rpc_call_peer(kt_rpc_call_t *call)
{
    if (!call->peer)
        call->peer = grpc_call_get_peer(call->call);
    return call->peer ? call->peer : "";
}

int kt_rpc_call_cancelled(kt_rpc_call_t *call)
{
    if (!call->close_done) {
        grpc_event ev = grpc_completion_queue_pluck(call->cq, &call->close_tag,
                                                    gpr_time_0(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            call->close_done = 1;
    }
    /* Before the status goes out the close only completes when the call died. */
    return call->gone || (call->close_done && call->cancelled);
}

int kt_rpc_stream_send(kt_rpc_call_t *call, const ProtobufCMessage *msg)
{
    if (!call->h || !call->h->stream)
        return kt_err_set(KT_ESTATE, "%s is not a server-streaming method", call->method);
    if (msg->descriptor != call->h->resp_desc)
        return kt_err_set(KT_EINVAL, "%s streams %s, not %s", call->method,
                          call->h->resp_desc->name, msg->descriptor->name);
    if (call->gone)
        return kt_err_set(KT_EUNAVAIL, "%s: the call has ended", call->method);
    grpc_byte_buffer *bb = kt_rpc_bb_pack(msg);
    if (!bb)
        return kt_err_code();
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = bb;
    int ok = call_batch(call, &op, 1);
    grpc_byte_buffer_destroy(bb);
    if (!ok)
        return kt_err_set(KT_EUNAVAIL, "%s: the call has ended", call->method);
    return KT_OK;
}
