/*
 * gRPC transport for ktune: blocking clients and a threaded server that speak
 * protobuf-c messages over the gRPC C core (grpc/grpc.h). It moves messages,
 * checks the shared bearer token and maps status codes; it knows nothing of
 * what the messages mean (the services in ktune.proto live elsewhere).
 *
 * Server: kt_rpc_server_new() with options, register handlers by full method
 * name ("/ktune.v1.Tracker/Health") with the request/response descriptors,
 * kt_rpc_server_start() binds and serves, kt_rpc_server_stop() drains, cancels
 * what is left after the drain deadline and frees everything. Handlers run on
 * the server's completion-queue threads (opts.threads, default 4) and may
 * block: with N threads at most N handlers run at once, further calls wait.
 * A handler's request is owned by the wrapper and stays valid until its reply
 * has been packed, so a unary response may point into the request; memory for
 * the response comes from kt_rpc_call_alloc() (freed after the reply is sent)
 * or is owned by the handler and outlives the call.
 *
 * Client: one kt_rpc_client_t per target holds one channel, reused by every
 * call. A client may be used by many threads at once: each call makes its own
 * completion queue and call object. Unary calls retry with exponential
 * backoff only on UNAVAILABLE (the peer could not be reached), within the
 * attempt and time bounds of the options and the call's deadline. gRPC also
 * ends calls that a stopping server cancelled after its drain deadline with
 * UNAVAILABLE, so such a call may run twice: a method that must not repeat
 * is idempotent on the server or called with retry_attempts = 1.
 * Responses are returned unpacked; the caller frees them with
 * protobuf_c_message_free_unpacked(msg, NULL).
 *
 * gRPC is initialised once per process, by the first server start or client
 * creation, and never shut down: every server, client and call frees its own
 * gRPC objects, but the final grpc_shutdown() of gRPC 1.51 can block for
 * about 10 s while an executor thread finishes a poll, and the library's
 * threads end with the process anyway. gRPC does not survive fork(): fork
 * before the first server or client of a process exists, or exec in the
 * child.
 *
 * Status: a call's outcome is a kt_rpc_status_t holding a gRPC status code
 * (KT_RPC_* below, equal to grpc_status_code) and its message. Functions that
 * return int give 0 or a negative KT_E* code mapped from the gRPC code by
 * kt_rpc_err_from_code(), with kt_err set to
 * "<method> on <target>: <CODE>: <message>".
 */
#ifndef KT_RPC_RPC_H
#define KT_RPC_RPC_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

#include "util/kt_limits.h"

/* ---- Status codes (the values of grpc_status_code) ---------------------- */
#define KT_RPC_OK 0                   /* success */
#define KT_RPC_CANCELLED 1            /* cancelled by the caller or server stop */
#define KT_RPC_UNKNOWN 2              /* error of unknown kind */
#define KT_RPC_INVALID_ARGUMENT 3     /* the request is malformed */
#define KT_RPC_DEADLINE_EXCEEDED 4    /* the deadline passed before an answer */
#define KT_RPC_NOT_FOUND 5            /* a named entity does not exist */
#define KT_RPC_ALREADY_EXISTS 6       /* the entity to create exists */
#define KT_RPC_PERMISSION_DENIED 7    /* authenticated but not allowed */
#define KT_RPC_RESOURCE_EXHAUSTED 8   /* out of memory, or message too large */
#define KT_RPC_FAILED_PRECONDITION 9  /* not valid in the current state */
#define KT_RPC_ABORTED 10             /* aborted by a concurrency conflict */
#define KT_RPC_OUT_OF_RANGE 11        /* a value is past its valid range */
#define KT_RPC_UNIMPLEMENTED 12       /* no such method on this server */
#define KT_RPC_INTERNAL 13            /* a bug on the server */
#define KT_RPC_UNAVAILABLE 14         /* the peer could not be reached (retryable) */
#define KT_RPC_DATA_LOSS 15           /* unrecoverable data loss */
#define KT_RPC_UNAUTHENTICATED 16     /* missing or wrong token */

#define KT_RPC_STATUS_MSG_MAX 512

/* Outcome of one call as the client saw it. */
typedef struct {
    int code;                          /* KT_RPC_* */
    int attempts;                      /* how many times the call was sent */
    char msg[KT_RPC_STATUS_MSG_MAX];   /* the status details ("" when none) */
} kt_rpc_status_t;

/* ---- Error mapping (the one place ktune codes meet gRPC codes) ----------- */

/* gRPC code for a ktune status (KT_OK -> KT_RPC_OK, KT_EINVAL ->
 * KT_RPC_INVALID_ARGUMENT, KT_EAUTH -> KT_RPC_UNAUTHENTICATED, KT_ELIMIT,
 * KT_ENOMEM and KT_EFULL -> KT_RPC_RESOURCE_EXHAUSTED, ...). */
int kt_rpc_code_from_err(int kt_code);
/* ktune status for a gRPC code (KT_RPC_UNAVAILABLE -> KT_EUNAVAIL, ...). */
int kt_rpc_err_from_code(int rpc_code);
/* "UNAVAILABLE", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" for others. */
const char *kt_rpc_code_name(int rpc_code);

/* ---- Server --------------------------------------------------------------- */

typedef struct kt_rpc_server kt_rpc_server_t;
typedef struct kt_rpc_call kt_rpc_call_t;

typedef struct {
    const char *listen;        /* "0.0.0.0:9190"; port 0 picks a free one */
    int threads;               /* completion-queue threads; <= 0 means 4 */
    size_t max_message;        /* bytes, both directions; 0 means 64 MiB */
    const char *token;         /* required bearer token, or NULL for none */
    const char *tls_cert;      /* PEM certificate chain file; TLS when set with tls_key */
    const char *tls_key;       /* PEM private key file */
    const char *tls_client_ca; /* PEM CA file: mutual TLS, every client must present a
                                  certificate it signed (needs tls_cert); NULL = none asked */
} kt_rpc_server_opts_t;

#define KT_RPC_DEFAULT_THREADS 4
#define KT_RPC_DEFAULT_MAX_MESSAGE KT_LIMIT_RPC_MESSAGE

/* A unary handler fills `resp` (already initialised with the response
 * descriptor) and returns KT_RPC_OK, a positive KT_RPC_* code (give the text
 * with kt_rpc_call_fail), or a negative KT_E* code (mapped with
 * kt_rpc_code_from_err; the message is the handler thread's kt_err_msg()).
 * A failed call sends no response. */
typedef int (*kt_rpc_unary_fn)(kt_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage *resp, void *ud);
/* A server-streaming handler sends any number of messages with
 * kt_rpc_stream_send() and returns the final status as above. */
typedef int (*kt_rpc_stream_fn)(kt_rpc_call_t *call, const ProtobufCMessage *req, void *ud);

/* Create a server (not yet listening). opts is copied. NULL on error. */
kt_rpc_server_t *kt_rpc_server_new(const kt_rpc_server_opts_t *opts);

/* Register a handler for a full method name before kt_rpc_server_start.
 * `ud` is passed to every invocation; the server does not own it. */
int kt_rpc_server_add_unary(kt_rpc_server_t *s, const char *method,
                            const ProtobufCMessageDescriptor *req_desc,
                            const ProtobufCMessageDescriptor *resp_desc, kt_rpc_unary_fn fn,
                            void *ud);
int kt_rpc_server_add_stream(kt_rpc_server_t *s, const char *method,
                             const ProtobufCMessageDescriptor *req_desc,
                             const ProtobufCMessageDescriptor *resp_desc, kt_rpc_stream_fn fn,
                             void *ud);

/* Serve "/ktune.v1.<service>/Health" answering status "SERVING", version
 * KT_VERSION and `role` (service "Tracker", role "tracker"); both strings
 * must outlive the server. */
int kt_rpc_server_add_health(kt_rpc_server_t *s, const char *service, const char *role);

/* Bind the listen address and start serving. Calls with unknown methods get
 * UNIMPLEMENTED; with a token configured, calls without
 * "authorization: Bearer <token>" get UNAUTHENTICATED before any handler.
 * With tls_client_ca, a client without a certificate signed by it fails the
 * TLS handshake (it sees UNAVAILABLE). KT_EINVAL for bad TLS files (see
 * kt_rpc_tls_check). */
int kt_rpc_server_start(kt_rpc_server_t *s);

/* The bound port (after a successful start), 0 before. */
int kt_rpc_server_port(const kt_rpc_server_t *s);
/* The listen address with the bound port ("0.0.0.0:41234"); "" before start.
 * Valid until kt_rpc_server_stop. */
const char *kt_rpc_server_address(const kt_rpc_server_t *s);

/* Stop accepting calls, let in-flight calls finish for up to drain_ms, then
 * cancel the rest and wait for their handlers to return (a blocking handler
 * should poll kt_rpc_call_cancelled), and free the server. Once no call is
 * in flight it returns without waiting for clients to close their
 * connections (one that is stopped or cut off never does). Accepts NULL and
 * a server that was never started. Call from one thread, not a handler. */
void kt_rpc_server_stop(kt_rpc_server_t *s, int drain_ms);

/* ---- Inside a handler (the call belongs to the handler's thread) --------- */

/* Set the status message; returns `code` so a handler can write
 * `return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "no task %d", id);` */
int kt_rpc_call_fail(kt_rpc_call_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Zeroed memory (strdup'd string) living until the reply has been sent, for
 * response fields and sub-messages. NULL when out of memory. */
void *kt_rpc_call_alloc(kt_rpc_call_t *call, size_t size);
char *kt_rpc_call_strdup(kt_rpc_call_t *call, const char *s);

/* Full method name and the peer's address ("ipv4:127.0.0.1:5555"). */
const char *kt_rpc_call_method(const kt_rpc_call_t *call);
const char *kt_rpc_call_peer(kt_rpc_call_t *call);

/* 1 once the client cancelled, the deadline passed or the server gave up
 * draining; a long handler polls it and returns early. */
int kt_rpc_call_cancelled(kt_rpc_call_t *call);

/* Send one message of a server-streaming call (the response descriptor's
 * type); returns when gRPC has taken it, so it blocks while a client does not
 * read (flow control) until the call ends. The caller keeps ownership of msg.
 * KT_EUNAVAIL when the call is gone (client away, cancelled, deadline, server
 * stop): stop sending and return. */
int kt_rpc_stream_send(kt_rpc_call_t *call, const ProtobufCMessage *msg);

/* ---- Client --------------------------------------------------------------- */

typedef struct kt_rpc_client kt_rpc_client_t;

typedef struct {
    const char *token;         /* bearer token sent with every call, or NULL */
    const char *tls_ca;        /* PEM root certificate file; TLS when set */
    const char *tls_cert;      /* PEM client certificate chain for a server that requires
                                  one (mutual TLS; needs tls_ca and tls_key), or NULL */
    const char *tls_key;       /* its PEM private key */
    size_t max_message;        /* bytes, both directions; 0 means 64 MiB */
    int deadline_ms;           /* per call when a call passes 0; 0 means 10000 */
    int retry_attempts;        /* sends on UNAVAILABLE, first included; 0 means 5 */
    int retry_initial_ms;      /* first backoff; 0 means 100, doubles each time */
    int retry_max_ms;          /* backoff cap; 0 means 2000 */
    int retry_total_ms;        /* give up retrying after this long; 0 means 15000 */
} kt_rpc_client_opts_t;

/* A client for `target` ("host:port"); opts may be NULL. Connects lazily.
 * NULL on error (unreadable CA file, client key not matching its
 * certificate, ...). Free it once no call is running. */
kt_rpc_client_t *kt_rpc_client_new(const char *target, const kt_rpc_client_opts_t *opts);
void kt_rpc_client_free(kt_rpc_client_t *c);
const char *kt_rpc_client_target(const kt_rpc_client_t *c);

/* Cancel the unary calls now in flight on c (from any thread): each returns
 * promptly with KT_RPC_CANCELLED and `why` as its message, instead of
 * waiting for its deadline. For a peer known to be gone (the tracker drops
 * a runner whose heartbeats stopped): a call to a host whose link is down
 * gets no answer and no TCP reset, only its deadline. Later calls are not
 * affected. Returns how many calls it cancelled. */
int kt_rpc_client_cancel_all(kt_rpc_client_t *c, const char *why);
/* kt_rpc_client_cancel_all, and every later unary call on c ends at once
 * with KT_RPC_CANCELLED and `why` too (not retried): for a process that is
 * stopping, whose calls to peers would otherwise hold its shutdown until
 * their deadlines. Irreversible; c must still be freed. Returns how many
 * calls it cancelled. */
int kt_rpc_client_close(kt_rpc_client_t *c, const char *why);

/* Unary call: send `req`, unpack the answer with `resp_desc` into *resp
 * (caller frees with protobuf_c_message_free_unpacked). deadline_ms <= 0 uses
 * the client's default and bounds the whole call, retries included. Returns 0
 * or a negative KT_E* code; *status (may be NULL) gets the gRPC status. */
int kt_rpc_call_unary(kt_rpc_client_t *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, int deadline_ms,
                      ProtobufCMessage **resp, kt_rpc_status_t *status);

/* The same with raw request bytes; *resp gets malloc'd response bytes
 * (caller frees; may be NULL when *resp_len is 0). */
int kt_rpc_call_raw(kt_rpc_client_t *c, const char *method, const void *req, size_t req_len,
                    int deadline_ms, void **resp, size_t *resp_len, kt_rpc_status_t *status);

/* Server-streaming reader. open sends the request (no retries: the stream
 * may have started) and returns a reader, NULL only on a local error (kt_err
 * set); a call that failed shows in next and close. next gives 1 and a
 * message (caller frees), 0 at the end of a successful stream, or a negative
 * KT_E* code when the stream failed or a message did not decode; close
 * cancels an unfinished stream, stores the final status in *status (may be
 * NULL), frees the reader and returns 0 or a negative KT_E* code.
 * deadline_ms (<= 0: the client's default) bounds the whole stream. A reader
 * is used by one thread at a time and closed before its client is freed. */
typedef struct kt_rpc_reader kt_rpc_reader_t;
kt_rpc_reader_t *kt_rpc_reader_open(kt_rpc_client_t *c, const char *method,
                                    const ProtobufCMessage *req,
                                    const ProtobufCMessageDescriptor *resp_desc, int deadline_ms);
int kt_rpc_reader_next(kt_rpc_reader_t *r, ProtobufCMessage **msg);
int kt_rpc_reader_close(kt_rpc_reader_t *r, kt_rpc_status_t *status);

/* ---- TLS files ------------------------------------------------------------ */

/* A program's TLS files as its command line gives them (NULL: not given). */
typedef struct {
    const char *cert, *key;                /* certificate chain and key it serves with */
    const char *client_ca;                 /* CA that must have signed callers' certificates */
    const char *ca;                        /* CA that signed the servers it calls */
    const char *client_cert, *client_key;  /* certificate and key it shows those servers */
} kt_rpc_tls_files_t;

/* Check TLS files before use, so a program refuses bad ones at start-up:
 * a certificate and its key go together and the key must belong to it,
 * every file must be readable PEM, a client CA needs a served certificate
 * and a client certificate needs a CA. 0, or KT_EINVAL with kt_err naming
 * the file and what is wrong, by the command-line option every ktune
 * program gives it with (--tls-cert, --tls-key, --tls-client-ca, --tls-ca,
 * --tls-client-cert, --tls-client-key). Thread-safe. */
int kt_rpc_tls_check(const kt_rpc_tls_files_t *files);

#endif
