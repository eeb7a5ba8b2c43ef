/*
 * The registry of runners and workers: who is there, who is alive, and which
 * runner measures which batch. Two halves share this header.
 *
 * Tracker side (kt_registry_t) holds the peers that registered (runners with
 * a device key, address, device properties and capacity; workers with the
 * targets they build and their parallelism), assigns peer ids, records
 * heartbeats and drops peers that stopped sending them. It also keeps one
 * queue per device key, as TVM's tracker does with its PriorityScheduler: a
 * caller asks for a runner of a key with a priority and gets a ticket; a free
 * runner of that key is leased to the oldest ticket of the highest priority
 * (higher first, FIFO within a priority); the caller releases the lease when
 * its batch is done. Tickets may name an owner (a job): at equal priority
 * the runners of a key are then shared fairly among owners (the owner
 * holding the fewest of them goes first, then the one served least
 * recently, so two busy jobs alternate), FIFO within an owner. It holds no
 * sockets: the tracker's RPC handlers feed it
 * (common/service/registry_service.c) and a timer calls kt_registry_sweep().
 *
 *   Ids. A new peer gets "<role>-<n>" ("runner-3"). A peer that registers
 *   again with the id it had keeps it: when the id is registered at the same
 *   address the entry is updated in place (its leases survive); when the id
 *   is unknown, as after a tracker restart, the peer is registered fresh under
 *   that id (the counter moves past it so new peers never collide with it);
 *   when the id belongs to a peer at another address the newcomer gets a new
 *   id. A registration from the address of a registered peer of the same role
 *   under another id replaces that peer: its process is gone, since the
 *   address cannot be served twice, and it is dropped as below.
 *
 *   Liveness. Peers heartbeat every kt_registry_heartbeat_ms(). A peer not
 *   heard from for 2 intervals shows as "lost" and gets no new leases; one not
 *   heard from for missed_beats intervals (default 3) is dropped by the next
 *   sweep. A dropped runner's leases are lost: releasing one reports
 *   KT_EUNAVAIL so the caller re-queues the batch, and the drop callbacks get
 *   their ids at once. A ticket granted a lease that its owner had not yet
 *   collected goes back to the queue instead, keeping its place.
 *
 *   Workers are not queued: kt_registry_acquire_worker() picks the least
 *   loaded worker of a target (a worker queues batches beyond its
 *   parallelism itself) and hands out a lease released the same way.
 *
 * Peer side (kt_peer_agent_t) runs in a runner or worker: a thread registers
 * it with the tracker, heartbeats at the interval the tracker returned, and
 * registers again (with its old id) when the tracker answers known = false
 * or becomes reachable after an outage. It retries with exponential backoff,
 * logs once per change of state, and never gives up: a tracker that is down
 * or refuses the token is a state, not an error.
 *
 * The daemon around a runner's or worker's service, which drives an agent,
 * is common/service/peer_daemon.h.
 *
 * Ownership: the registry copies everything it is given. Snapshots
 * (kt_peer_t, kt_queue_info_t arrays, dropped id lists) are the caller's and
 * freed with the matching kt_*_free(). A kt_lease_t is a plain value. The
 * agent copies its options and PeerInfo.
 *
 * Threads: every kt_registry_* function may be called from any thread at any
 * time (one mutex; kt_registry_wait() blocks on a condition variable with its
 * own real-time timeout, independent of the injected clock). Drop callbacks
 * run on the thread that caused the drop (sweep or register), with the
 * registry unlocked, so they may call back into it. The agent runs on its own
 * thread; its functions may be called from any thread.
 */
#ifndef KT_REGISTRY_REGISTRY_H
#define KT_REGISTRY_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "ktune.pb-c.h"
#include "rpc/rpc.h"

/* ---- Limits and defaults ----------------------------------------------------- */

#define KT_REGISTRY_DEFAULT_HEARTBEAT_MS 2000 /* interval peers are told to heartbeat at */
#define KT_REGISTRY_MISSED_BEATS 3            /* silent intervals before a peer is dropped */
#define KT_REGISTRY_LOST_BEATS 2              /* silent intervals before a peer shows "lost" */
#define KT_REGISTRY_ID_MAX 64                 /* peer id, NUL included */
#define KT_REGISTRY_ADDR_MAX 256              /* "host:port", NUL included */
#define KT_REGISTRY_KEY_MAX 64                /* device key or target, NUL included */
#define KT_REGISTRY_MAX_TARGETS 8             /* targets one worker may list */

/* 1 when `key` is a valid device key (or worker target): 1 to
 * KT_REGISTRY_KEY_MAX - 1 bytes of letters, digits and ._:-; 0 otherwise
 * (NULL included). Runners, the registry and job submission all check keys
 * with it. */
int kt_registry_key_ok(const char *key);

/* ---- Tracker side: types ----------------------------------------------------- */

typedef struct kt_registry kt_registry_t;

typedef enum {
    KT_PEER_RUNNER = 0,   /* times batches on one device */
    KT_PEER_WORKER = 1,   /* compiles batches */
} kt_peer_role_t;

/* Monotonic seconds; tests inject their own. */
typedef double (*kt_registry_clock_fn)(void *user);

typedef struct {
    int heartbeat_ms;             /* 0 = KT_REGISTRY_DEFAULT_HEARTBEAT_MS */
    int missed_beats;             /* 0 = KT_REGISTRY_MISSED_BEATS */
    kt_registry_clock_fn clock;   /* NULL = kt_time_mono */
    void *clock_user;
} kt_registry_opts_t;

/* What a peer registers with; borrowed for the call. */
typedef struct {
    const char *peer_id;          /* NULL or "": a new peer; else the id it had */
    kt_peer_role_t role;
    const char *address;          /* host:port the tracker dials */
    const char *key;              /* runner: device key ([A-Za-z0-9._:-]+); workers: ignored */
    int capacity;                 /* runner: batches at once; worker: parallel builds; <= 0 = 1 */
    const char *const *targets;   /* worker: targets it builds ("cpu", "cuda") */
    int n_targets;
    const Ktune__V1__DeviceInfo *device; /* runner: its device; NULL = unknown */
} kt_peer_desc_t;

/* A copy of one registered peer. */
typedef struct {
    char id[KT_REGISTRY_ID_MAX];
    kt_peer_role_t role;
    char address[KT_REGISTRY_ADDR_MAX];
    char key[KT_REGISTRY_KEY_MAX];        /* "" for workers */
    int capacity;
    int n_targets;
    char targets[KT_REGISTRY_MAX_TARGETS][KT_REGISTRY_KEY_MAX];
    Ktune__V1__DeviceInfo *device;        /* owned copy (free with kt_peer_clear) or NULL */
    int leased;                           /* leases held on it now */
    int in_flight;                        /* as its last heartbeat said */
    double registered;                    /* registry clock at (re-)registration */
    double last_seen;                     /* registry clock at its last sign of life */
    const char *state;                    /* "free" | "busy" | "lost" (static) */
} kt_peer_t;

/* One device key's queue (TVM's "key | total | free | pending"). */
typedef struct {
    char key[KT_REGISTRY_KEY_MAX];
    int total;                            /* runners of this key */
    int free;                             /* of which can take a batch now */
    int pending;                          /* tickets waiting for a runner */
} kt_queue_info_t;

/* A runner or worker handed to one caller until kt_registry_release(). */
typedef struct {
    uint64_t id;                          /* never 0 for a real lease */
    kt_peer_role_t role;
    char peer_id[KT_REGISTRY_ID_MAX];
    char address[KT_REGISTRY_ADDR_MAX];
    char key[KT_REGISTRY_KEY_MAX];        /* runner key, or the worker target asked for */
} kt_lease_t;

/* Called for each dropped peer with the leases it took down (ids of leases
 * already collected by callers; they will get KT_EUNAVAIL on release). */
typedef void (*kt_registry_drop_fn)(void *user, const kt_peer_t *peer, const uint64_t *lost,
                                    int n_lost);

/* Counters since the registry was made. */
typedef struct {
    int runners, workers;                 /* registered now */
    uint64_t registrations;               /* accepted RegisterPeer calls */
    uint64_t reregistrations;             /* of which named an id the peer had */
    uint64_t drops;                       /* peers dropped (silent or replaced) */
    uint64_t leases;                      /* leases granted */
    uint64_t lost_leases;                 /* leases taken down by a drop */
} kt_registry_stats_t;

/* ---- Tracker side: create / destroy ------------------------------------------- */

/* opts may be NULL. NULL with kt_err set on a bad option or no memory. */
kt_registry_t *kt_registry_new(const kt_registry_opts_t *opts);
/* Wakes nobody: free only when no thread uses the registry. Accepts NULL. */
void kt_registry_free(kt_registry_t *r);

/* Add a drop callback (before use; up to 8). 0, KT_EINVAL or KT_ENOMEM. */
int kt_registry_on_drop(kt_registry_t *r, kt_registry_drop_fn fn, void *user);

/* ---- Tracker side: membership --------------------------------------------------- */

/* Register (or re-register, see Ids) a peer; its id goes to id_out.
 * 0 or KT_EINVAL naming what is wrong with the description. */
int kt_registry_register(kt_registry_t *r, const kt_peer_desc_t *desc,
                         char id_out[KT_REGISTRY_ID_MAX]);
/* Record a heartbeat. 0, or KT_ENOTFOUND when the id is unknown (the peer
 * should register again). */
int kt_registry_heartbeat(kt_registry_t *r, const char *peer_id, int in_flight);
/* Drop every peer not heard from for missed_beats intervals before `now`
 * (registry clock). Returns how many were dropped; when ids is not NULL,
 * *ids gets their ids (free with kt_registry_ids_free), NULL when none.
 * Negative only when out of memory (the drops still happened). */
int kt_registry_sweep(kt_registry_t *r, double now, char ***ids);
void kt_registry_ids_free(char **ids, int n);

/* The interval peers are told to use, and the clock's current time. */
int kt_registry_heartbeat_ms(const kt_registry_t *r);
double kt_registry_now(const kt_registry_t *r);

/* ---- Tracker side: runner queues ---------------------------------------------- */

/* Ask for a runner of `key`. Returns a ticket (> 0) or KT_EINVAL for a bad
 * key. The ticket waits in the key's queue even while no runner of the key
 * is registered. */
int64_t kt_registry_request(kt_registry_t *r, const char *key, int priority);
/* The same for `owner` (a job id; 0 = no owner, all such tickets one FIFO
 * group): fair share among owners of equal priority, see above. */
int64_t kt_registry_request_for(kt_registry_t *r, const char *key, int priority, int64_t owner);
/* Collect the ticket's lease, waiting up to timeout_ms (0: just look).
 * 0 with *out filled (the ticket is consumed); KT_ETIMEOUT while it still
 * waits; KT_ENOTFOUND for an unknown, cancelled or consumed ticket. */
int kt_registry_wait(kt_registry_t *r, int64_t ticket, int timeout_ms, kt_lease_t *out);
/* Withdraw a ticket (a lease granted but not collected goes back). 0 or
 * KT_ENOTFOUND. */
int kt_registry_cancel(kt_registry_t *r, int64_t ticket);

/* ---- Tracker side: workers ------------------------------------------------------ */

/* Lease the least loaded live worker that builds `target`. 0, or
 * KT_ENOTFOUND when none does. */
int kt_registry_acquire_worker(kt_registry_t *r, const char *target, kt_lease_t *out);

/* ---- Tracker side: leases ------------------------------------------------------- */

/* Give a lease back. 0; KT_EUNAVAIL when its peer was dropped meanwhile (the
 * work it carried must be re-queued); KT_ENOTFOUND for an unknown or already
 * released lease. */
int kt_registry_release(kt_registry_t *r, const kt_lease_t *lease);
/* 1 while the lease is held on a registered peer, 0 once it was lost or
 * released. */
int kt_registry_lease_valid(kt_registry_t *r, uint64_t lease_id);

/* ---- Tracker side: status --------------------------------------------------------- */

/* Every peer, runners first then workers, each in id order. 0 or KT_ENOMEM;
 * free with kt_peer_list_free. */
int kt_registry_peers(kt_registry_t *r, kt_peer_t **out, int *n);
/* One peer by id. 0 or KT_ENOTFOUND; clear with kt_peer_clear. */
int kt_registry_peer(kt_registry_t *r, const char *peer_id, kt_peer_t *out);
/* One entry per key that has runners or pending tickets, sorted by key.
 * 0 or KT_ENOMEM; free() the array. */
int kt_registry_queues(kt_registry_t *r, kt_queue_info_t **out, int *n);
void kt_registry_stats(kt_registry_t *r, kt_registry_stats_t *out);

void kt_peer_clear(kt_peer_t *p);
void kt_peer_list_free(kt_peer_t *list, int n);

/* "runner" / "worker"; and back (-1 for anything else). */
const char *kt_peer_role_name(kt_peer_role_t role);
int kt_peer_role_from_name(const char *name);

/* ---- Peer side: the registration agent ------------------------------------------ */

typedef struct kt_peer_agent kt_peer_agent_t;

/* Batches or builds running now, reported with each heartbeat. */
typedef int (*kt_peer_in_flight_fn)(void *user);

typedef struct {
    const char *tracker;                  /* "host:port" */
    const char *token;                    /* bearer token, or NULL */
    const char *tls_ca;                   /* PEM CA file: TLS to the tracker; NULL = plaintext */
    const char *tls_cert, *tls_key;       /* PEM client certificate and key for a tracker
                                             that requires one (needs tls_ca), or NULL */
    const Ktune__V1__PeerInfo *self;      /* role, address, key, device, capacity, targets */
    kt_peer_in_flight_fn in_flight;       /* NULL = report 0 */
    void *user;
    int retry_min_ms;                     /* first backoff; 0 = 200 */
    int retry_max_ms;                     /* backoff cap; 0 = 5000 */
} kt_peer_agent_opts_t;

typedef enum {
    KT_PEER_AGENT_CONNECTING = 0,         /* not registered yet, no answer so far */
    KT_PEER_AGENT_REGISTERED = 1,         /* registered and heartbeating */
    KT_PEER_AGENT_UNREACHABLE = 2,        /* the tracker does not answer; retrying */
    KT_PEER_AGENT_REFUSED = 3,            /* the tracker refused (token, bad description); retrying */
} kt_peer_agent_state_t;

/* Copy the options and start the agent's thread. NULL with kt_err set on
 * bad options (no tracker, no self, unreadable CA file) or no memory. */
kt_peer_agent_t *kt_peer_agent_start(const kt_peer_agent_opts_t *opts);
/* Stop the thread (an RPC in progress ends within its deadline) and free.
 * Accepts NULL. */
void kt_peer_agent_stop(kt_peer_agent_t *a);

kt_peer_agent_state_t kt_peer_agent_state(kt_peer_agent_t *a);
/* Wait up to timeout_ms until registered: 0, or KT_ETIMEOUT. */
int kt_peer_agent_wait_registered(kt_peer_agent_t *a, int timeout_ms);
/* The id the tracker gave ("" before the first registration). */
void kt_peer_agent_id(kt_peer_agent_t *a, char *buf, size_t size);
/* Successful RegisterPeer calls so far. */
uint64_t kt_peer_agent_registrations(kt_peer_agent_t *a);

/* The address a tracker should dial for a server bound at `bound`
 * ("host:port" as kt_rpc_server_address gives it). A concrete host is kept.
 * A wildcard host (0.0.0.0, ::, empty) is replaced by the local address the
 * kernel would use to reach `tracker` (so a tracker on loopback gets
 * 127.0.0.1, a remote one the interface that routes to it), or by 127.0.0.1
 * when tracker is NULL or cannot be resolved. 0 or KT_EINVAL. */
int kt_peer_advertise_address(const char *bound, const char *tracker, char *out, size_t size);

#endif
