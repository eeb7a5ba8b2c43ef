/*
 * The gRPC client: one channel per client object; every call (and every
 * retry) gets its own pluck completion queue, so threads never share one.
 */
#include "rpc_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>

#include "util/err.h"
#include "util/util.h"

/* How long past the call's own deadline a pluck waits before cancelling the
 * call itself: gRPC enforces the deadline, this only guards against a hang. */
#define PLUCK_GRACE_MS 5000

/* A unary call in flight, so kt_rpc_client_cancel_all() can reach it. */
typedef struct active_call {
    grpc_call *call;
    struct active_call *next;
} active_call_t;

struct kt_rpc_client {
    char *target;
    char *auth;             /* "Bearer <token>" or NULL */
    grpc_channel *channel;
    kt_rpc_client_opts_t o; /* with defaults filled; no pointers kept */
    pthread_mutex_t mu;     /* active, closed, closed_why */
    active_call_t *active;  /* unary calls in flight (on the callers' stacks) */
    int closed;             /* kt_rpc_client_close: every call ends at once */
    char closed_why[KT_RPC_STATUS_MSG_MAX];
};

kt_rpc_client_t *kt_rpc_client_new(const char *target, const kt_rpc_client_opts_t *opts)
{
    kt_rpc_client_opts_t o = {0};
    if (opts)
        o = *opts;
    if (!target || !*target) {
        kt_err_set(KT_EINVAL, "rpc client: no target address");
        return NULL;
    }
    if (o.token && !*o.token) {
        kt_err_set(KT_EINVAL, "rpc client: empty token");
        return NULL;
    }
    if (!o.max_message)
        o.max_message = KT_RPC_DEFAULT_MAX_MESSAGE;
    if (o.deadline_ms <= 0)
        o.deadline_ms = 10000;
    if (o.retry_attempts <= 0)
        o.retry_attempts = 5;
    if (o.retry_initial_ms <= 0)
        o.retry_initial_ms = 100;
    if (o.retry_max_ms <= 0)
        o.retry_max_ms = 2000;
    if (o.retry_total_ms <= 0)
        o.retry_total_ms = 15000;

    kt_rpc_tls_files_t files = {.ca = o.tls_ca, .client_cert = o.tls_cert,
                                .client_key = o.tls_key};
    if ((o.tls_cert || o.tls_key) && kt_rpc_tls_check(&files) != 0) {
        kt_err_prefix("rpc client");
        return NULL;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    if (o.tls_ca) {
        ca = kt_file_read(o.tls_ca, NULL);
        if (!ca) {
            kt_err_prefix("TLS root certificate");
            return NULL;
        }
    }
    if (o.tls_cert && (!(cert = kt_file_read(o.tls_cert, NULL)) ||
                       !(key = kt_file_read(o.tls_key, NULL)))) {
        kt_err_prefix("TLS client certificate");
        free(ca);
        free(cert);
        return NULL;
    }
    kt_rpc_client_t *c = calloc(1, sizeof *c);
    if (!c || !(c->target = strdup(target))) {
        free(c);
        free(ca);
        free(cert);
        free(key);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    if (o.token) {
        size_t n = strlen("Bearer ") + strlen(o.token) + 1;
        c->auth = malloc(n);
        if (!c->auth) {
            free(c->target);
            free(c);
            free(ca);
            free(cert);
            free(key);
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
        snprintf(c->auth, n, "Bearer %s", o.token);
    }
    o.token = NULL;
    o.tls_ca = o.tls_cert = o.tls_key = NULL;
    c->o = o;

    kt_rpc_lib_init();
    /* The credentials keep their own copies of the PEM text. */
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    grpc_channel_credentials *creds =
        ca ? grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL)
           : grpc_insecure_credentials_create();
    free(ca);
    free(cert);
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    /* Reconnect quickly after a refused connection so our own UNAVAILABLE
     * retries reach a peer that has just come up (gRPC's default waits 1 s
     * and more before trying again, failing fast meanwhile). */
    grpc_arg args[5];
    kt_rpc_size_args(args, o.max_message);
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[2].value.integer = o.retry_initial_ms;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[3].value.integer = o.retry_max_ms;
    /* Each client its own connection: gRPC would otherwise share one among
     * channels of equal arguments, and a server's per-client limits
     * (KT_LIMIT_*_PER_CLIENT) count by connection. */
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[4].value.integer = 1;
    grpc_channel_args chargs = {.num_args = 5, .args = args};
    c->channel = creds ? grpc_channel_create(target, creds, &chargs) : NULL;
    if (creds)
        grpc_channel_credentials_release(creds);
    if (!c->channel) {
        kt_rpc_client_free(c);
        kt_err_set(KT_EINVAL, "rpc client: cannot create a channel to %s", target);
        return NULL;
    }
    return c;
}

void kt_rpc_client_free(kt_rpc_client_t *c)
{
    if (!c)
        return;
    if (c->channel)
        grpc_channel_destroy(c->channel);
    pthread_mutex_destroy(&c->mu);
    if (c->auth) {
        memset(c->auth, 0, strlen(c->auth));
        free(c->auth);
    }
    free(c->target);
    free(c);
}

const char *kt_rpc_client_target(const kt_rpc_client_t *c) { return c ? c->target : ""; }

/* Cancel the calls in flight, and with `close` every later one; under mu.
 * grpc_call_cancel_with_status is thread-safe; the caller's pluck then
 * completes at once with CANCELLED and this message. The list entry stays
 * valid until its call unlinks it under mu. */
static int cancel_locked(kt_rpc_client_t *c, const char *why, int close)
{
    int n = 0;
    why = why ? why : "cancelled";
    if (close && !c->closed) {
        c->closed = 1;
        snprintf(c->closed_why, sizeof c->closed_why, "%s", why);
    }
    for (active_call_t *a = c->active; a; a = a->next, n++)
        grpc_call_cancel_with_status(a->call, GRPC_STATUS_CANCELLED, why, NULL);
    return n;
}

int kt_rpc_client_cancel_all(kt_rpc_client_t *c, const char *why)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    int n = cancel_locked(c, why, 0);
    pthread_mutex_unlock(&c->mu);
    return n;
}

int kt_rpc_client_close(kt_rpc_client_t *c, const char *why)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    int n = cancel_locked(c, why, 1);
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ---- One call ------------------------------------------------------------------ */

static grpc_call *make_call(kt_rpc_client_t *c, grpc_completion_queue *cq, const char *method,
                            gpr_timespec deadline)
{
    grpc_slice m = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m,
                                               NULL, deadline, NULL);
    grpc_slice_unref(m);
    return call;
}

/* Pluck `tag`, bounded: past the deadline plus a grace the call is
 * cancelled, which completes every batch promptly. */
static grpc_event pluck_bounded(grpc_completion_queue *cq, grpc_call *call, void *tag,
                                gpr_timespec deadline)
{
    gpr_timespec until =
        gpr_time_add(deadline, gpr_time_from_millis(PLUCK_GRACE_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    return ev;
}

static void set_status(kt_rpc_status_t *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_status(kt_rpc_status_t *st, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
}

/* One attempt of a unary call; *resp_bb gets the response (or NULL). */
static void unary_once(kt_rpc_client_t *c, const char *method, grpc_byte_buffer *req_bb,
                       int timeout_ms, grpc_byte_buffer **resp_bb, kt_rpc_status_t *st)
{
    *resp_bb = NULL;
    /* gRPC takes the slices of the buffer it sends (it swaps them out), so
     * each attempt sends a copy: a retry sent the original would send an
     * empty message, which decodes as a request with every field unset. */
    grpc_byte_buffer *send_bb = grpc_byte_buffer_copy(req_bb);
    if (!send_bb) {
        set_status(st, KT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    gpr_timespec deadline = kt_rpc_deadline(timeout_ms);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call = make_call(c, cq, method, deadline);
    if (!call) {
        grpc_completion_queue_destroy(cq);
        grpc_byte_buffer_destroy(send_bb);
        set_status(st, KT_RPC_INTERNAL, "cannot create a call");
        return;
    }
    grpc_metadata md = {0};
    if (c->auth) {
        md.key = grpc_slice_from_static_string("authorization");
        md.value = grpc_slice_from_copied_string(c->auth);
    }
    grpc_metadata_array init_md, trailing;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trailing);
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->auth ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = c->auth ? &md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = resp_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    char tag;
    active_call_t me = {.call = call};
    grpc_call_error e = grpc_call_start_batch(call, ops, 6, &tag, NULL);
    if (e != GRPC_CALL_OK) {
        set_status(st, KT_RPC_INTERNAL, "cannot start the call (%d)", (int)e);
    } else {
        pthread_mutex_lock(&c->mu);
        me.next = c->active;
        c->active = &me;
        /* Listed and checked under one lock: a close either sees this call
         * or has already happened. */
        if (c->closed)
            grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED, c->closed_why, NULL);
        pthread_mutex_unlock(&c->mu);
        pluck_bounded(cq, call, &tag, deadline);
        pthread_mutex_lock(&c->mu);
        for (active_call_t **pp = &c->active; *pp; pp = &(*pp)->next)
            if (*pp == &me) {
                *pp = me.next;
                break;
            }
        pthread_mutex_unlock(&c->mu);
        st->code = (int)code;
        kt_rpc_slice_copy(details, st->msg, sizeof st->msg);
    }
    if (c->auth) {
        grpc_slice_unref(md.key);
        grpc_slice_unref(md.value);
    }
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    grpc_byte_buffer_destroy(send_bb);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    if (st->code != KT_RPC_OK && *resp_bb) {
        grpc_byte_buffer_destroy(*resp_bb);
        *resp_bb = NULL;
    }
}

static int fail_status(const kt_rpc_client_t *c, const char *method, const kt_rpc_status_t *st)
{
    return kt_err_set(kt_rpc_err_from_code(st->code), "%s on %s: %s: %s", method, c->target,
                      kt_rpc_code_name(st->code), st->msg);
}

/* A unary call with retries on UNAVAILABLE; *resp_bb gets the response. */
static int unary_bb(kt_rpc_client_t *c, const char *method, grpc_byte_buffer *req_bb,
                    int deadline_ms, grpc_byte_buffer **resp_bb, kt_rpc_status_t *st)
{
    if (deadline_ms <= 0)
        deadline_ms = c->o.deadline_ms;
    double start = kt_time_mono();
    double end = start + deadline_ms / 1000.0;
    double retry_end = start + c->o.retry_total_ms / 1000.0;
    if (retry_end > end)
        retry_end = end;
    int backoff = c->o.retry_initial_ms;
    for (int attempt = 1;; attempt++) {
        int left = (int)((end - kt_time_mono()) * 1000.0);
        unary_once(c, method, req_bb, left > 0 ? left : 0, resp_bb, st);
        st->attempts = attempt;
        if (st->code != KT_RPC_UNAVAILABLE || attempt >= c->o.retry_attempts)
            break;
        if (kt_time_mono() + backoff / 1000.0 >= retry_end)
            break;
        kt_sleep_ms(backoff);
        backoff = backoff * 2 > c->o.retry_max_ms ? c->o.retry_max_ms : backoff * 2;
    }
    if (st->code == KT_RPC_OK && !*resp_bb)
        set_status(st, KT_RPC_INTERNAL, "the server sent no response message");
    if (st->code != KT_RPC_OK)
        return fail_status(c, method, st);
    return KT_OK;
}

int kt_rpc_call_raw(kt_rpc_client_t *c, const char *method, const void *req, size_t req_len,
                    int deadline_ms, void **resp, size_t *resp_len, kt_rpc_status_t *status)
{
    kt_rpc_status_t local;
    kt_rpc_status_t *st = status ? status : &local;
    memset(st, 0, sizeof *st);
    *resp = NULL;
    *resp_len = 0;
    if (!c || !method)
        return kt_err_set(KT_EINVAL, "rpc call: no client or method");
    grpc_byte_buffer *req_bb = kt_rpc_bb_copy(req, req_len);
    if (!req_bb)
        return kt_err_code();
    grpc_byte_buffer *resp_bb = NULL;
    int rc = unary_bb(c, method, req_bb, deadline_ms, &resp_bb, st);
    grpc_byte_buffer_destroy(req_bb);
    if (rc != KT_OK)
        return rc;
    grpc_slice s = kt_rpc_bb_slice(resp_bb);
    grpc_byte_buffer_destroy(resp_bb);
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n > 0) {
        *resp = malloc(n);
        if (!*resp) {
            grpc_slice_unref(s);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        memcpy(*resp, GRPC_SLICE_START_PTR(s), n);
    }
    *resp_len = n;
    grpc_slice_unref(s);
    return KT_OK;
}

int kt_rpc_call_unary(kt_rpc_client_t *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, int deadline_ms,
                      ProtobufCMessage **resp, kt_rpc_status_t *status)
{
    kt_rpc_status_t local;
    kt_rpc_status_t *st = status ? status : &local;
    memset(st, 0, sizeof *st);
    *resp = NULL;
    if (!c || !method || !req || !resp_desc)
        return kt_err_set(KT_EINVAL, "rpc call: missing client, method, request or descriptor");
    grpc_byte_buffer *req_bb = kt_rpc_bb_pack(req);
    if (!req_bb)
        return kt_err_code();
    grpc_byte_buffer *resp_bb = NULL;
    int rc = unary_bb(c, method, req_bb, deadline_ms, &resp_bb, st);
    grpc_byte_buffer_destroy(req_bb);
    if (rc != KT_OK)
        return rc;
    *resp = kt_rpc_bb_unpack(resp_desc, resp_bb);
    grpc_byte_buffer_destroy(resp_bb);
    if (!*resp) {
        set_status(st, KT_RPC_INTERNAL, "the response does not decode as %s", resp_desc->name);
        return fail_status(c, method, st);
    }
    return KT_OK;
}

/* ---- Server-streaming reader ------------------------------------------------------ */

struct kt_rpc_reader {
    kt_rpc_client_t *c;
    char *method;
    const ProtobufCMessageDescriptor *desc;
    grpc_completion_queue *cq;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array init_md, trailing;
    grpc_status_code code;
    grpc_slice details;
    int status_done;    /* the RECV_STATUS_ON_CLIENT batch has been plucked */
    int ended;          /* no more messages will be read */
    char start_tag, status_tag, read_tag;
    kt_rpc_status_t st;
};

kt_rpc_reader_t *kt_rpc_reader_open(kt_rpc_client_t *c, const char *method,
                                    const ProtobufCMessage *req,
                                    const ProtobufCMessageDescriptor *resp_desc, int deadline_ms)
{
    if (!c || !method || !req || !resp_desc) {
        kt_err_set(KT_EINVAL, "rpc stream: missing client, method, request or descriptor");
        return NULL;
    }
    kt_rpc_reader_t *r = calloc(1, sizeof *r);
    if (!r || !(r->method = strdup(method))) {
        free(r);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    grpc_byte_buffer *req_bb = kt_rpc_bb_pack(req);
    if (!req_bb) {
        free(r->method);
        free(r);
        return NULL;
    }
    r->c = c;
    r->desc = resp_desc;
    r->deadline = kt_rpc_deadline(deadline_ms > 0 ? deadline_ms : c->o.deadline_ms);
    r->cq = grpc_completion_queue_create_for_pluck(NULL);
    r->call = make_call(c, r->cq, method, r->deadline);
    r->details = grpc_empty_slice();
    grpc_metadata_array_init(&r->init_md);
    grpc_metadata_array_init(&r->trailing);
    if (!r->call) {
        grpc_byte_buffer_destroy(req_bb);
        r->status_done = r->ended = 1;
        set_status(&r->st, KT_RPC_INTERNAL, "cannot create a call");
        return r;
    }

    grpc_metadata md = {0};
    if (c->auth) {
        md.key = grpc_slice_from_static_string("authorization");
        md.value = grpc_slice_from_copied_string(c->auth);
    }
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->auth ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = c->auth ? &md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &r->init_md;
    grpc_op sop = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    sop.data.recv_status_on_client.trailing_metadata = &r->trailing;
    sop.data.recv_status_on_client.status = &r->code;
    sop.data.recv_status_on_client.status_details = &r->details;
    if (grpc_call_start_batch(r->call, ops, 4, &r->start_tag, NULL) != GRPC_CALL_OK) {
        r->status_done = r->ended = 1;
        set_status(&r->st, KT_RPC_INTERNAL, "cannot start the call");
    } else {
        /* The status batch stays pending while messages are read. */
        if (grpc_call_start_batch(r->call, &sop, 1, &r->status_tag, NULL) != GRPC_CALL_OK) {
            grpc_call_cancel(r->call, NULL);
            r->status_done = 1;
            set_status(&r->st, KT_RPC_INTERNAL, "cannot start the call");
        }
        grpc_event ev = pluck_bounded(r->cq, r->call, &r->start_tag, r->deadline);
        if (!ev.success || r->status_done)
            r->ended = 1;   /* the status says why */
    }
    if (c->auth) {
        grpc_slice_unref(md.key);
        grpc_slice_unref(md.value);
    }
    grpc_byte_buffer_destroy(req_bb);
    return r;
}

/* Wait for the final status (once). */
static void reader_status(kt_rpc_reader_t *r)
{
    if (r->status_done)
        return;
    pluck_bounded(r->cq, r->call, &r->status_tag, r->deadline);
    r->status_done = 1;
    r->st.code = (int)r->code;
    kt_rpc_slice_copy(r->details, r->st.msg, sizeof r->st.msg);
}

static int reader_end(kt_rpc_reader_t *r)
{
    r->ended = 1;
    reader_status(r);
    if (r->st.code != KT_RPC_OK)
        return fail_status(r->c, r->method, &r->st);
    return 0;
}

int kt_rpc_reader_next(kt_rpc_reader_t *r, ProtobufCMessage **msg)
{
    *msg = NULL;
    if (!r)
        return kt_err_set(KT_EINVAL, "rpc stream: NULL reader");
    if (r->ended)
        return reader_end(r);
    grpc_byte_buffer *bb = NULL;
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &bb;
    if (grpc_call_start_batch(r->call, &op, 1, &r->read_tag, NULL) != GRPC_CALL_OK)
        return reader_end(r);
    grpc_event ev = pluck_bounded(r->cq, r->call, &r->read_tag, r->deadline);
    if (!ev.success || !bb) {
        if (bb)
            grpc_byte_buffer_destroy(bb);
        return reader_end(r);
    }
    *msg = kt_rpc_bb_unpack(r->desc, bb);
    grpc_byte_buffer_destroy(bb);
    if (!*msg) {
        /* Nothing after a garbled message can be trusted: end the stream. */
        grpc_call_cancel(r->call, NULL);
        r->ended = 1;
        reader_status(r);
        set_status(&r->st, KT_RPC_INTERNAL, "a streamed message does not decode as %s",
                   r->desc->name);
        return fail_status(r->c, r->method, &r->st);
    }
    return 1;
}

int kt_rpc_reader_close(kt_rpc_reader_t *r, kt_rpc_status_t *status)
{
    if (!r) {
        if (status) {
            memset(status, 0, sizeof *status);
            set_status(status, KT_RPC_INTERNAL, "no stream");
        }
        return kt_err_set(KT_EINVAL, "rpc stream: NULL reader");
    }
    if (!r->status_done) {
        if (!r->ended)
            grpc_call_cancel(r->call, NULL);
        reader_status(r);
    }
    r->st.attempts = 1;
    if (status)
        *status = r->st;
    int rc = r->st.code == KT_RPC_OK ? KT_OK : fail_status(r->c, r->method, &r->st);
    grpc_slice_unref(r->details);
    grpc_metadata_array_destroy(&r->init_md);
    grpc_metadata_array_destroy(&r->trailing);
    if (r->call)
        grpc_call_unref(r->call);
    grpc_completion_queue_shutdown(r->cq);
    grpc_completion_queue_destroy(r->cq);
    free(r->method);
    free(r);
    return rc;
}
