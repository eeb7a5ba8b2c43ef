/*
 * The peer side of the registry: a thread that keeps a runner or worker
 * registered with the tracker. Its loop has two states, unregistered (try
 * RegisterPeer with backoff) and registered (Heartbeat every interval); any
 * answer that means "the tracker does not know us" or "the tracker was away"
 * sends it back to the first state with the id it had, so a restarted
 * tracker gets the same peer id back.
 */
#include "registry.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rpc/rpc.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

#define M_REGISTER "/ktune.v1.Tracker/RegisterPeer"
#define M_HEARTBEAT "/ktune.v1.Tracker/Heartbeat"

/* A RegisterPeer call gets this long; a heartbeat its interval, within these bounds. */
#define REGISTER_DEADLINE_MS 5000
#define HEARTBEAT_DEADLINE_MIN_MS 1000
#define HEARTBEAT_DEADLINE_MAX_MS 5000

struct kt_peer_agent {
    kt_rpc_client_t *client;
    char *tracker;
    Ktune__V1__PeerInfo *self;       /* unpacked copy of what we register as */
    kt_peer_in_flight_fn in_flight;
    void *user;
    int retry_min_ms, retry_max_ms;

    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;               /* stop requests and state changes */
    int stop;
    kt_peer_agent_state_t state;
    char id[KT_REGISTRY_ID_MAX];
    int interval_ms;
    uint64_t registrations;

    /* What was last logged, so each condition is logged once (agent thread only). */
    kt_peer_agent_state_t logged_state;
    int logged_code;
};

static Ktune__V1__PeerInfo *peer_info_copy(const Ktune__V1__PeerInfo *p)
{
    size_t len = protobuf_c_message_get_packed_size(&p->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return NULL;
    protobuf_c_message_pack(&p->base, buf);
    Ktune__V1__PeerInfo *c = ktune__v1__peer_info__unpack(NULL, len, buf);
    free(buf);
    return c;
}

/* Sleep up to ms unless stopped; returns 1 when asked to stop. */
static int nap(kt_peer_agent_t *a, int ms)
{
    struct timespec end = kt_time_mono_after_ms(ms);
    pthread_mutex_lock(&a->mu);
    while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &end) == 0)
        ;
    int stop = a->stop;
    pthread_mutex_unlock(&a->mu);
    return stop;
}

static void set_state(kt_peer_agent_t *a, kt_peer_agent_state_t s)
{
    pthread_mutex_lock(&a->mu);
    a->state = s;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Log a failed call once per (state, code) change. */
static void note_failure(kt_peer_agent_t *a, const char *what, const kt_rpc_status_t *st)
{
    kt_peer_agent_state_t s = (st->code == KT_RPC_UNAVAILABLE ||
                               st->code == KT_RPC_DEADLINE_EXCEEDED)
                                  ? KT_PEER_AGENT_UNREACHABLE
                                  : KT_PEER_AGENT_REFUSED;
    set_state(a, s);
    if (a->logged_state == s && a->logged_code == st->code)
        return;
    a->logged_state = s;
    a->logged_code = st->code;
    if (s == KT_PEER_AGENT_UNREACHABLE)
        KT_WARN("tracker %s unreachable (%s: %s); will register again when it answers",
                a->tracker, kt_rpc_code_name(st->code), st->msg);
    else if (st->code == KT_RPC_UNAUTHENTICATED)
        KT_ERROR("tracker %s refused %s: UNAUTHENTICATED (%s); check the token "
                 "(--token-file or KT_TOKEN_FILE); retrying", a->tracker, what, st->msg);
    else
        KT_ERROR("tracker %s refused %s: %s: %s; retrying", a->tracker, what,
                 kt_rpc_code_name(st->code), st->msg);
}

static int do_register(kt_peer_agent_t *a, kt_rpc_status_t *st)
{
    /* A shallow copy carrying the id we had, so the tracker can keep it. */
    Ktune__V1__PeerInfo me = *a->self;
    char id[KT_REGISTRY_ID_MAX];
    pthread_mutex_lock(&a->mu);
    memcpy(id, a->id, sizeof id);
    pthread_mutex_unlock(&a->mu);
    me.peer_id = id;
    Ktune__V1__RegisterRequest req = KTUNE__V1__REGISTER_REQUEST__INIT;
    req.peer = &me;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(a->client, M_REGISTER, &req.base,
                               &ktune__v1__register_response__descriptor, REGISTER_DEADLINE_MS,
                               &out, st);
    if (rc != 0)
        return rc;
    Ktune__V1__RegisterResponse *resp = (Ktune__V1__RegisterResponse *)out;
    if (!resp->peer_id || !*resp->peer_id || strlen(resp->peer_id) >= KT_REGISTRY_ID_MAX) {
        protobuf_c_message_free_unpacked(out, NULL);
        st->code = KT_RPC_INTERNAL;
        snprintf(st->msg, sizeof st->msg, "the tracker answered without a usable peer id");
        return kt_err_set(KT_EINTERNAL, "RegisterPeer: no peer id in the answer");
    }
    int interval = resp->heartbeat_interval_ms > 0 ? resp->heartbeat_interval_ms
                                                   : KT_REGISTRY_DEFAULT_HEARTBEAT_MS;
    int again = id[0] != '\0';
    int same = strcmp(id, resp->peer_id) == 0;
    pthread_mutex_lock(&a->mu);
    snprintf(a->id, sizeof a->id, "%s", resp->peer_id);
    a->interval_ms = interval;
    a->registrations++;
    a->state = KT_PEER_AGENT_REGISTERED;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (!again)
        KT_INFO("registered with tracker %s as %s %s (heartbeat every %d ms)", a->tracker,
                a->self->role, resp->peer_id, interval);
    else if (same)
        KT_INFO("registered again with tracker %s as %s %s", a->tracker, a->self->role,
                resp->peer_id);
    else
        KT_INFO("registered again with tracker %s as %s %s (was %s)", a->tracker,
                a->self->role, resp->peer_id, id);
    a->logged_state = KT_PEER_AGENT_REGISTERED;
    a->logged_code = 0;
    protobuf_c_message_free_unpacked(out, NULL);
    return 0;
}

/* 1: known, 0: the tracker forgot us, negative: the call failed. */
static int do_heartbeat(kt_peer_agent_t *a, kt_rpc_status_t *st)
{
    Ktune__V1__HeartbeatRequest req = KTUNE__V1__HEARTBEAT_REQUEST__INIT;
    char id[KT_REGISTRY_ID_MAX];
    pthread_mutex_lock(&a->mu);
    memcpy(id, a->id, sizeof id);
    int interval = a->interval_ms;
    pthread_mutex_unlock(&a->mu);
    req.peer_id = id;
    req.in_flight = a->in_flight ? a->in_flight(a->user) : 0;
    int deadline = interval < HEARTBEAT_DEADLINE_MIN_MS   ? HEARTBEAT_DEADLINE_MIN_MS
                   : interval > HEARTBEAT_DEADLINE_MAX_MS ? HEARTBEAT_DEADLINE_MAX_MS
                                                          : interval;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(a->client, M_HEARTBEAT, &req.base,
                               &ktune__v1__heartbeat_response__descriptor, deadline, &out, st);
    if (rc != 0)
        return rc;
    int known = ((Ktune__V1__HeartbeatResponse *)out)->known;
    protobuf_c_message_free_unpacked(out, NULL);
    return known;
}

static void *agent_main(void *arg)
{
    kt_peer_agent_t *a = arg;
    int backoff = a->retry_min_ms;
    int registered = 0;
    kt_rpc_status_t st;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        int stop = a->stop;
        int interval = a->interval_ms;
        pthread_mutex_unlock(&a->mu);
        if (stop)
            break;
        if (!registered) {
            if (do_register(a, &st) == 0) {
                registered = 1;
                backoff = a->retry_min_ms;
                continue;
            }
            note_failure(a, "RegisterPeer", &st);
            if (nap(a, backoff))
                break;
            backoff = backoff * 2 > a->retry_max_ms ? a->retry_max_ms : backoff * 2;
            continue;
        }
        if (nap(a, interval))
            break;
        int known = do_heartbeat(a, &st);
        if (known == 1)
            continue;
        registered = 0;
        if (known == 0) {
            KT_WARN("tracker %s no longer knows %s; registering again", a->tracker, a->id);
            set_state(a, KT_PEER_AGENT_CONNECTING);
            a->logged_state = KT_PEER_AGENT_CONNECTING;
        } else {
            note_failure(a, "Heartbeat", &st);
        }
    }
    return NULL;
}

/* ---- Public API ------------------------------------------------------------------ */

kt_peer_agent_t *kt_peer_agent_start(const kt_peer_agent_opts_t *o)
{
    if (!o || !o->tracker || !*o->tracker || !o->self) {
        kt_err_set(KT_EINVAL, "peer agent: a tracker address and a peer description are required");
        return NULL;
    }
    if (o->retry_min_ms < 0 || o->retry_max_ms < 0) {
        kt_err_set(KT_EINVAL, "peer agent: negative backoff");
        return NULL;
    }
    kt_peer_agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        kt_err_set(KT_ENOMEM, "peer agent: out of memory");
        return NULL;
    }
    a->retry_min_ms = o->retry_min_ms ? o->retry_min_ms : 200;
    a->retry_max_ms = o->retry_max_ms ? o->retry_max_ms : 5000;
    if (a->retry_max_ms < a->retry_min_ms)
        a->retry_max_ms = a->retry_min_ms;
    a->in_flight = o->in_flight;
    a->user = o->user;
    a->interval_ms = KT_REGISTRY_DEFAULT_HEARTBEAT_MS;
    a->logged_state = (kt_peer_agent_state_t)-1;
    a->tracker = strdup(o->tracker);
    a->self = peer_info_copy(o->self);
    if (!a->tracker || !a->self) {
        kt_err_set(KT_ENOMEM, "peer agent: out of memory");
        goto fail;
    }
    /* The agent retries itself; gRPC reconnects within the same bounds so a
     * tracker that comes back is seen within one backoff. */
    kt_rpc_client_opts_t co = {.token = o->token, .tls_ca = o->tls_ca, .tls_cert = o->tls_cert,
                               .tls_key = o->tls_key, .retry_attempts = 1,
                               .retry_initial_ms = a->retry_min_ms,
                               .retry_max_ms = a->retry_max_ms};
    if (!(a->client = kt_rpc_client_new(o->tracker, &co)))
        goto fail;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&a->mu, NULL);
    if (pthread_create(&a->tid, NULL, agent_main, a) != 0) {
        kt_err_set(KT_ENOMEM, "peer agent: cannot start its thread");
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        goto fail;
    }
    return a;
fail:
    kt_rpc_client_free(a->client);
    if (a->self)
        ktune__v1__peer_info__free_unpacked(a->self, NULL);
    free(a->tracker);
    free(a);
    return NULL;
}

void kt_peer_agent_stop(kt_peer_agent_t *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->tid, NULL);
    kt_rpc_client_free(a->client);
    ktune__v1__peer_info__free_unpacked(a->self, NULL);
    free(a->tracker);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

kt_peer_agent_state_t kt_peer_agent_state(kt_peer_agent_t *a)
{
    pthread_mutex_lock(&a->mu);
    kt_peer_agent_state_t s = a->state;
    pthread_mutex_unlock(&a->mu);
    return s;
}

int kt_peer_agent_wait_registered(kt_peer_agent_t *a, int timeout_ms)
{
    struct timespec end = kt_time_mono_after_ms(timeout_ms);
    pthread_mutex_lock(&a->mu);
    int rc = 0;
    while (a->state != KT_PEER_AGENT_REGISTERED) {
        if (pthread_cond_timedwait(&a->cv, &a->mu, &end) != 0 &&
            a->state != KT_PEER_AGENT_REGISTERED) {
            rc = kt_err_set(KT_ETIMEOUT, "not registered with %s within %d ms", a->tracker,
                            timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void kt_peer_agent_id(kt_peer_agent_t *a, char *buf, size_t size)
{
    pthread_mutex_lock(&a->mu);
    snprintf(buf, size, "%s", a->id);
    pthread_mutex_unlock(&a->mu);
}

uint64_t kt_peer_agent_registrations(kt_peer_agent_t *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t n = a->registrations;
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* ---- Advertised address --------------------------------------------------------------- */

/* Split "host:port" / "[v6]:port" into host and port; 0 or KT_EINVAL. */
static int split_hostport(const char *s, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon;
    const char *h = s;
    size_t hlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return KT_EINVAL;
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return KT_EINVAL;
        hlen = (size_t)(colon - s);
    }
    if (hlen >= hsize || strlen(colon + 1) >= psize || !colon[1])
        return KT_EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    snprintf(port, psize, "%s", colon + 1);
    return 0;
}

/* The local address the kernel routes to `tracker` from (no packet is sent:
 * connecting a UDP socket only picks the route). 0 or negative. */
static int route_source(const char *tracker, int *family, char *out, size_t size)
{
    char host[256], port[32];
    const char *t = tracker;
    if (strncmp(t, "dns:///", 7) == 0)
        t += 7;
    else if (strncmp(t, "ipv4:", 5) == 0 || strncmp(t, "ipv6:", 5) == 0)
        t += 5;
    if (split_hostport(t, host, sizeof host, port, sizeof port) != 0)
        return KT_EINVAL;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    if (getaddrinfo(host[0] ? host : "localhost", port, &hints, &res) != 0 || !res)
        return KT_ENOTFOUND;
    int rc = KT_EUNAVAIL;
    for (struct addrinfo *ai = res; ai && rc != 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            const void *a = ss.ss_family == AF_INET6
                                ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
            if (inet_ntop(ss.ss_family, a, out, (socklen_t)size)) {
                *family = ss.ss_family;
                rc = 0;
            }
        }
        close(fd);
    }
    freeaddrinfo(res);
    return rc;
}

int kt_peer_advertise_address(const char *bound, const char *tracker, char *out, size_t size)
{
    char host[256], port[32];
    if (!bound || !out || split_hostport(bound, host, sizeof host, port, sizeof port) != 0)
        return kt_err_set(KT_EINVAL, "advertise: '%s' is not host:port", bound ? bound : "");
    int wildcard = !host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
                   strcmp(host, "[::]") == 0;
    int n;
    if (!wildcard) {
        n = strchr(host, ':') ? snprintf(out, size, "[%s]:%s", host, port)
                              : snprintf(out, size, "%s:%s", host, port);
    } else {
        char local[INET6_ADDRSTRLEN];
        int family = AF_INET;
        if (!tracker || route_source(tracker, &family, local, sizeof local) != 0)
            snprintf(local, sizeof local, "127.0.0.1");
        n = family == AF_INET6 ? snprintf(out, size, "[%s]:%s", local, port)
                               : snprintf(out, size, "%s:%s", local, port);
    }
    if (n < 0 || (size_t)n >= size)
        return kt_err_set(KT_EINVAL, "advertise: address too long");
    return 0;
}
