/*
 * The peer daemon: what ktune-runner and ktune-worker share around their one
 * service (the Run service or the Build service of common/measure): the gRPC
 * server with its health service, registration with the tracker through a
 * peer agent (registry.h), and the stop on SIGINT/SIGTERM that deregisters
 * first and then drains in-flight calls. It parses no command line: the
 * daemons fill kt_peer_daemon_opts_t from theirs (daemon/peer_cmdline.h).
 *
 * Ownership: the daemon copies the options struct but borrows its strings
 * and the service's user pointer until kt_peer_daemon_stop(). Threads: start,
 * register, wait and stop from the daemon's main thread; the service's
 * handler runs on the gRPC threads.
 */
#ifndef KT_SERVICE_PEER_DAEMON_H
#define KT_SERVICE_PEER_DAEMON_H

#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "rpc/rpc.h"

/* Where the daemon serves and whom it registers with; strings borrowed. */
typedef struct {
    const char *tracker;                  /* "host:port" to register with, or NULL: serve only */
    const char *listen;                   /* gRPC address (e.g. 127.0.0.1:0) */
    const char *advertise;                /* address the tracker should dial, or NULL */
    const char *token_file;               /* shared token (first line), or NULL */
    const char *tls_cert, *tls_key;       /* serve TLS with these (PEM), or NULL */
    const char *tls_ca;                   /* verify the tracker with this CA, or NULL */
    const char *tls_client_ca;            /* mutual TLS: callers need a certificate this CA
                                             signed (needs tls_cert), or NULL */
    const char *tls_client_cert;          /* shown to a tracker that asks for one (needs
                                             tls_ca), or NULL ... */
    const char *tls_client_key;           /* ... and its key */
    int insecure;                         /* --insecure: no token needed beyond loopback */
} kt_peer_daemon_opts_t;

/* The one service a daemon serves. */
typedef struct {
    const char *health_service;           /* "Runner": /ktune.v1.<it>/Health */
    const char *role;                     /* "runner" / "worker" (health answer, PeerInfo) */
    const char *method;                   /* "/ktune.v1.Runner/Run" */
    const ProtobufCMessageDescriptor *req_desc, *resp_desc;
    kt_rpc_unary_fn fn;
    void *user;
} kt_peer_service_t;

typedef struct kt_peer_daemon kt_peer_daemon_t;

/* ---- start / serve / stop ---------------------------------------------------------- */

/* Block SIGINT and SIGTERM in this thread (call before any thread exists,
 * so every later thread inherits the mask), read the token, start the
 * server with the service. NULL with kt_err set. */
kt_peer_daemon_t *kt_peer_daemon_start(const kt_peer_daemon_opts_t *opts,
                                       const kt_peer_service_t *svc);
/* With a tracker: register `me` (role from the service, address set here
 * to the advertised one, which *addr gets when not NULL) and heartbeat; without, 0
 * and nothing. 0 or negative with kt_err. */
int kt_peer_daemon_register(kt_peer_daemon_t *d, Ktune__V1__PeerInfo *me,
                            kt_peer_in_flight_fn in_flight, void *user, const char **addr);
/* Wait for SIGINT or SIGTERM; returns it. */
int kt_peer_daemon_wait(kt_peer_daemon_t *d);
/* Deregister (heartbeats stop, so the tracker leases nothing more here),
 * stop the server giving in-flight calls drain_ms, wipe the token and free.
 * Accepts NULL. */
void kt_peer_daemon_stop(kt_peer_daemon_t *d, int drain_ms);

/* Exit the process with status 1 (logging why) if it still runs `ms` from
 * now: for a drain that must not outlast its deadline (a stuck batch dies
 * with the process). 0, or KT_ENOMEM when the timer thread cannot start. */
int kt_peer_daemon_exit_after(kt_peer_daemon_t *d, int ms);

/* ---- query ------------------------------------------------------------------------------ */

const char *kt_peer_daemon_address(const kt_peer_daemon_t *d);   /* bound "host:port" */
int kt_peer_daemon_has_token(const kt_peer_daemon_t *d);

#endif
