/*
 * The tracker-side registry: peers, heartbeats, per-key priority queues and
 * leases. Peers number in the tens and tickets in the hundreds, so plain
 * arrays scanned under one mutex are both simple and fast enough.
 */
#include "registry.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"
#include "util/util.h"

#define MAX_DROP_FNS 8

typedef struct {
    char id[KT_REGISTRY_ID_MAX];
    kt_peer_role_t role;
    char address[KT_REGISTRY_ADDR_MAX];
    char key[KT_REGISTRY_KEY_MAX];
    int capacity;
    int n_targets;
    char targets[KT_REGISTRY_MAX_TARGETS][KT_REGISTRY_KEY_MAX];
    Ktune__V1__DeviceInfo *device;   /* unpacked copy */
    int leased;
    int in_flight;
    double registered, last_seen;
    uint64_t last_lease;             /* id of its latest lease: least recently used goes first */
} peer_t;

typedef struct {
    int64_t id;
    char key[KT_REGISTRY_KEY_MAX];
    int priority;
    int64_t owner;                   /* who asked (a job); 0 = nobody in particular */
    uint64_t lease;                  /* 0 while pending */
} ticket_t;

typedef struct {
    uint64_t id;
    kt_peer_role_t role;
    char peer_id[KT_REGISTRY_ID_MAX];
    char address[KT_REGISTRY_ADDR_MAX];
    char key[KT_REGISTRY_KEY_MAX];
    int64_t owner;                   /* the ticket's owner (runner leases) */
    int lost;                        /* its peer was dropped */
} lease_t;

/* When an owner of a key's tickets was last granted a runner, for the
 * round-robin among owners of equal priority. */
typedef struct {
    char key[KT_REGISTRY_KEY_MAX];
    int64_t owner;
    uint64_t last;                   /* grant sequence number */
} served_t;

/* A peer dropped under the lock, reported to the callbacks after it. */
typedef struct {
    kt_peer_t peer;
    uint64_t *lost;
    int n_lost;
} drop_t;

/* A thread in kt_registry_wait: woken alone when its ticket is granted or
 * removed. One condition variable for all waiters woke every waiting round
 * of every job on each grant, which at hundreds of runners was most of the
 * tracker's dispatch cost. */
typedef struct waiter {
    struct waiter *next;
    int64_t ticket;
    pthread_cond_t cv;
} waiter_t;

struct kt_registry {
    pthread_mutex_t mu;
    waiter_t *waiters;               /* threads in kt_registry_wait */
    int heartbeat_ms, missed_beats;
    kt_registry_clock_fn clock;
    void *clock_user;

    peer_t **peers;
    int n_peers, cap_peers;
    ticket_t *tickets;               /* in arrival order, so FIFO is index order */
    int n_tickets, cap_tickets;
    lease_t *leases;
    int n_leases, cap_leases;
    served_t *served;
    int n_served, cap_served;
    uint64_t grants;                 /* runner grants so far: the clock of served_t.last */

    uint64_t next_peer, next_lease;
    int64_t next_ticket;
    kt_registry_stats_t stats;

    kt_registry_drop_fn drop_fns[MAX_DROP_FNS];
    void *drop_users[MAX_DROP_FNS];
    int n_drop_fns;
};

/* ---- Small helpers ---------------------------------------------------------------- */

static double mono_clock(void *user)
{
    (void)user;
    return kt_time_mono();
}

static double now_locked(const kt_registry_t *r)
{
    return r->clock(r->clock_user);
}

const char *kt_peer_role_name(kt_peer_role_t role)
{
    return role == KT_PEER_WORKER ? "worker" : "runner";
}

int kt_peer_role_from_name(const char *name)
{
    if (name && strcmp(name, "runner") == 0)
        return KT_PEER_RUNNER;
    if (name && strcmp(name, "worker") == 0)
        return KT_PEER_WORKER;
    return -1;
}

/* Keys, targets and ids: short words safe to print and to put in logs. */
static int word_ok(const char *s, size_t max)
{
    if (!s || !*s || strlen(s) >= max)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-' || *p == ':'))
            return 0;
    return 1;
}

int kt_registry_key_ok(const char *key)
{
    return word_ok(key, KT_REGISTRY_KEY_MAX);
}

/* Addresses: printable, no blanks (host:port, [v6]:port, dns:///name:port). */
static int address_ok(const char *s)
{
    if (!s || !*s || strlen(s) >= KT_REGISTRY_ADDR_MAX)
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p >= 127)
            return 0;
    return 1;
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return kt_err_set(KT_ENOMEM, "registry: out of memory");
    *arr = p;
    *cap = ncap;
    return 0;
}

static Ktune__V1__DeviceInfo *device_copy(const Ktune__V1__DeviceInfo *d)
{
    if (!d)
        return NULL;
    size_t len = protobuf_c_message_get_packed_size(&d->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return NULL;
    protobuf_c_message_pack(&d->base, buf);
    Ktune__V1__DeviceInfo *c = ktune__v1__device_info__unpack(NULL, len, buf);
    free(buf);
    return c;
}

static void device_free(Ktune__V1__DeviceInfo *d)
{
    if (d)
        ktune__v1__device_info__free_unpacked(d, NULL);
}

static peer_t *find_peer(const kt_registry_t *r, const char *id, int *index)
{
    for (int i = 0; i < r->n_peers; i++)
        if (strcmp(r->peers[i]->id, id) == 0) {
            if (index)
                *index = i;
            return r->peers[i];
        }
    return NULL;
}

static ticket_t *find_ticket(const kt_registry_t *r, int64_t id, int *index)
{
    for (int i = 0; i < r->n_tickets; i++)
        if (r->tickets[i].id == id) {
            if (index)
                *index = i;
            return &r->tickets[i];
        }
    return NULL;
}

static lease_t *find_lease(const kt_registry_t *r, uint64_t id, int *index)
{
    for (int i = 0; i < r->n_leases; i++)
        if (r->leases[i].id == id) {
            if (index)
                *index = i;
            return &r->leases[i];
        }
    return NULL;
}

/* Wake the threads waiting for `ticket` (granted or removed). Under the lock. */
static void wake_ticket(kt_registry_t *r, int64_t ticket)
{
    for (waiter_t *w = r->waiters; w; w = w->next)
        if (w->ticket == ticket)
            pthread_cond_signal(&w->cv);
}

static void remove_ticket_at(kt_registry_t *r, int i)
{
    memmove(&r->tickets[i], &r->tickets[i + 1], (size_t)(r->n_tickets - i - 1) * sizeof *r->tickets);
    r->n_tickets--;
}

static void remove_lease_at(kt_registry_t *r, int i)
{
    memmove(&r->leases[i], &r->leases[i + 1], (size_t)(r->n_leases - i - 1) * sizeof *r->leases);
    r->n_leases--;
}

static int peer_lost(const kt_registry_t *r, const peer_t *p, double now)
{
    return now - p->last_seen > KT_REGISTRY_LOST_BEATS * (r->heartbeat_ms / 1000.0);
}

static const char *peer_state(const kt_registry_t *r, const peer_t *p, double now)
{
    if (peer_lost(r, p, now))
        return "lost";
    return p->leased >= p->capacity ? "busy" : "free";
}

/* Copy a peer into a snapshot; the device copy may fail (then NULL). */
static void peer_export(const kt_registry_t *r, const peer_t *p, double now, kt_peer_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->id, p->id, sizeof out->id);
    out->role = p->role;
    memcpy(out->address, p->address, sizeof out->address);
    memcpy(out->key, p->key, sizeof out->key);
    out->capacity = p->capacity;
    out->n_targets = p->n_targets;
    memcpy(out->targets, p->targets, sizeof out->targets);
    out->device = device_copy(p->device);
    out->leased = p->leased;
    out->in_flight = p->in_flight;
    out->registered = p->registered;
    out->last_seen = p->last_seen;
    out->state = peer_state(r, p, now);
}

void kt_peer_clear(kt_peer_t *p)
{
    if (!p)
        return;
    device_free(p->device);
    p->device = NULL;
}

void kt_peer_list_free(kt_peer_t *list, int n)
{
    if (!list)
        return;
    for (int i = 0; i < n; i++)
        kt_peer_clear(&list[i]);
    free(list);
}

void kt_registry_ids_free(char **ids, int n)
{
    if (!ids)
        return;
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

/* ---- Dispatch -------------------------------------------------------------------- */

/* The runner of `key` that should take the next batch: live, with a free
 * slot, the most free slots, then the least recently leased. */
static peer_t *pick_runner(const kt_registry_t *r, const char *key, double now)
{
    peer_t *best = NULL;
    for (int i = 0; i < r->n_peers; i++) {
        peer_t *p = r->peers[i];
        if (p->role != KT_PEER_RUNNER || p->leased >= p->capacity || strcmp(p->key, key) != 0 ||
            peer_lost(r, p, now))
            continue;
        if (!best || p->capacity - p->leased > best->capacity - best->leased ||
            (p->capacity - p->leased == best->capacity - best->leased &&
             p->last_lease < best->last_lease))
            best = p;
    }
    return best;
}

/* Runner leases of `key` that `owner` holds now (granted, collected or not). */
static int held_by(const kt_registry_t *r, const char *key, int64_t owner)
{
    int n = 0;
    for (int i = 0; i < r->n_leases; i++) {
        const lease_t *l = &r->leases[i];
        n += l->role == KT_PEER_RUNNER && !l->lost && l->owner == owner &&
             strcmp(l->key, key) == 0;
    }
    return n;
}

static uint64_t last_served(const kt_registry_t *r, const char *key, int64_t owner)
{
    for (int i = 0; i < r->n_served; i++)
        if (r->served[i].owner == owner && strcmp(r->served[i].key, key) == 0)
            return r->served[i].last;
    return 0;
}

/* The pending ticket of `key` to serve next: highest priority; among the
 * owners at that priority, fair share: the one holding the fewest runners
 * of the key, then the one served least recently; within an owner the
 * oldest ticket (the array is in arrival order). With one owner this is
 * TVM's order (higher first, FIFO within a priority). */
static ticket_t *next_ticket(kt_registry_t *r, const char *key)
{
    ticket_t *best = NULL;
    int best_held = 0;
    uint64_t best_last = 0;
    for (int i = 0; i < r->n_tickets; i++) {
        ticket_t *t = &r->tickets[i];
        if (t->lease || strcmp(t->key, key) != 0)
            continue;
        if (best && t->priority < best->priority)
            continue;
        if (best && t->priority == best->priority && t->owner == best->owner)
            continue;   /* an older ticket of the same owner is already the candidate */
        int held = held_by(r, key, t->owner);
        uint64_t last = last_served(r, key, t->owner);
        if (!best || t->priority > best->priority || held < best_held ||
            (held == best_held && last < best_last)) {
            best = t;
            best_held = held;
            best_last = last;
        }
    }
    return best;
}

/* Remember that `owner` was just served on `key`. The table forgets owners
 * with nothing pending or held once it grows, so it stays small. */
static void note_served(kt_registry_t *r, const char *key, int64_t owner)
{
    uint64_t now = ++r->grants;
    for (int i = 0; i < r->n_served; i++)
        if (r->served[i].owner == owner && strcmp(r->served[i].key, key) == 0) {
            r->served[i].last = now;
            return;
        }
    if (r->n_served >= 64)
        for (int i = r->n_served - 1; i >= 0; i--) {
            served_t *e = &r->served[i];
            int live = held_by(r, e->key, e->owner) > 0;
            for (int k = 0; !live && k < r->n_tickets; k++)
                live = r->tickets[k].owner == e->owner && strcmp(r->tickets[k].key, e->key) == 0;
            if (!live)
                r->served[i] = r->served[--r->n_served];
        }
    if (grow((void **)&r->served, &r->cap_served, r->n_served + 1, sizeof *r->served) != 0)
        return;   /* out of memory: this owner just loses its place in the rotation */
    served_t *e = &r->served[r->n_served++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->owner = owner;
    e->last = now;
}

static int new_lease(kt_registry_t *r, peer_t *p, const char *key, int64_t owner, uint64_t *id)
{
    int rc = grow((void **)&r->leases, &r->cap_leases, r->n_leases + 1, sizeof *r->leases);
    if (rc)
        return rc;
    lease_t *l = &r->leases[r->n_leases++];
    memset(l, 0, sizeof *l);
    l->id = ++r->next_lease;
    l->role = p->role;
    memcpy(l->peer_id, p->id, sizeof l->peer_id);
    memcpy(l->address, p->address, sizeof l->address);
    snprintf(l->key, sizeof l->key, "%s", key);
    l->owner = owner;
    p->leased++;
    p->last_lease = l->id;
    r->stats.leases++;
    *id = l->id;
    return 0;
}

/* Grant free runners of `key` to waiting tickets. */
static void dispatch(kt_registry_t *r, const char *key)
{
    double now = now_locked(r);
    for (;;) {
        ticket_t *t = next_ticket(r, key);
        if (!t)
            break;
        peer_t *p = pick_runner(r, key, now);
        if (!p)
            break;
        uint64_t id;
        if (new_lease(r, p, key, t->owner, &id) != 0)
            break;   /* out of memory: the ticket stays pending */
        t->lease = id;
        note_served(r, key, t->owner);
        wake_ticket(r, t->id);
    }
}

/* ---- Dropping peers ------------------------------------------------------------- */

/* Remove peers[i] under the lock: uncollected grants go back to their
 * queues, collected leases are marked lost and listed in *d. */
static int drop_at(kt_registry_t *r, int i, double now, drop_t *d)
{
    peer_t *p = r->peers[i];
    memset(d, 0, sizeof *d);
    peer_export(r, p, now, &d->peer);
    int rc = 0;
    for (int j = 0; j < r->n_leases; j++) {
        lease_t *l = &r->leases[j];
        if (l->lost || strcmp(l->peer_id, p->id) != 0)
            continue;
        ticket_t *owner = NULL;
        for (int k = 0; k < r->n_tickets; k++)
            if (r->tickets[k].lease == l->id)
                owner = &r->tickets[k];
        if (owner) {
            owner->lease = 0;
            remove_lease_at(r, j);
            j--;
            continue;
        }
        l->lost = 1;
        r->stats.lost_leases++;
        uint64_t *nl = realloc(d->lost, (size_t)(d->n_lost + 1) * sizeof *nl);
        if (!nl) {
            rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
            continue;
        }
        d->lost = nl;
        d->lost[d->n_lost++] = l->id;
    }
    char key[KT_REGISTRY_KEY_MAX];
    memcpy(key, p->key, sizeof key);
    kt_peer_role_t role = p->role;
    device_free(p->device);
    free(p);
    memmove(&r->peers[i], &r->peers[i + 1], (size_t)(r->n_peers - i - 1) * sizeof *r->peers);
    r->n_peers--;
    r->stats.drops++;
    if (role == KT_PEER_RUNNER) {
        r->stats.runners--;
        dispatch(r, key);   /* re-queued grants may fit another runner */
    } else {
        r->stats.workers--;
    }
    return rc;
}

/* Tell the callbacks (registry unlocked) and free the drop records. */
static void report_drops(kt_registry_t *r, drop_t *d, int n)
{
    kt_registry_drop_fn fns[MAX_DROP_FNS];
    void *users[MAX_DROP_FNS];
    pthread_mutex_lock(&r->mu);
    int nf = r->n_drop_fns;
    memcpy(fns, r->drop_fns, sizeof fns);
    memcpy(users, r->drop_users, sizeof users);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < n; i++) {
        for (int f = 0; f < nf; f++)
            fns[f](users[f], &d[i].peer, d[i].lost, d[i].n_lost);
        kt_peer_clear(&d[i].peer);
        free(d[i].lost);
    }
}

/* ---- Create / destroy ------------------------------------------------------------ */

kt_registry_t *kt_registry_new(const kt_registry_opts_t *opts)
{
    kt_registry_opts_t o = {0};
    if (opts)
        o = *opts;
    if (o.heartbeat_ms < 0 || o.missed_beats < 0) {
        kt_err_set(KT_EINVAL, "registry: negative heartbeat interval or missed beats");
        return NULL;
    }
    kt_registry_t *r = calloc(1, sizeof *r);
    if (!r) {
        kt_err_set(KT_ENOMEM, "registry: out of memory");
        return NULL;
    }
    r->heartbeat_ms = o.heartbeat_ms ? o.heartbeat_ms : KT_REGISTRY_DEFAULT_HEARTBEAT_MS;
    r->missed_beats = o.missed_beats ? o.missed_beats : KT_REGISTRY_MISSED_BEATS;
    if (r->missed_beats < KT_REGISTRY_LOST_BEATS)
        r->missed_beats = KT_REGISTRY_LOST_BEATS;
    r->clock = o.clock ? o.clock : mono_clock;
    r->clock_user = o.clock_user;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void kt_registry_free(kt_registry_t *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_peers; i++) {
        device_free(r->peers[i]->device);
        free(r->peers[i]);
    }
    free(r->peers);
    free(r->tickets);
    free(r->leases);
    free(r->served);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int kt_registry_on_drop(kt_registry_t *r, kt_registry_drop_fn fn, void *user)
{
    if (!r || !fn)
        return kt_err_set(KT_EINVAL, "registry: no drop callback");
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    if (r->n_drop_fns == MAX_DROP_FNS) {
        rc = kt_err_set(KT_ENOMEM, "registry: more than %d drop callbacks", MAX_DROP_FNS);
    } else {
        r->drop_fns[r->n_drop_fns] = fn;
        r->drop_users[r->n_drop_fns++] = user;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kt_registry_heartbeat_ms(const kt_registry_t *r)
{
    return r->heartbeat_ms;
}

double kt_registry_now(const kt_registry_t *r)
{
    return r->clock(r->clock_user);
}

/* ---- Membership ------------------------------------------------------------------ */

static int desc_check(const kt_peer_desc_t *d)
{
    if (!d)
        return kt_err_set(KT_EINVAL, "register: no peer description");
    if (d->role != KT_PEER_RUNNER && d->role != KT_PEER_WORKER)
        return kt_err_set(KT_EINVAL, "register: role must be runner or worker");
    if (!address_ok(d->address))
        return kt_err_set(KT_EINVAL, "register: address must be host:port without blanks "
                                     "(under %d bytes)", KT_REGISTRY_ADDR_MAX);
    if (d->peer_id && *d->peer_id && !word_ok(d->peer_id, KT_REGISTRY_ID_MAX))
        return kt_err_set(KT_EINVAL, "register: malformed peer id");
    if (d->role == KT_PEER_RUNNER && !kt_registry_key_ok(d->key))
        return kt_err_set(KT_EINVAL, "register: a runner needs a device key of letters, digits "
                                     "and ._:- (under %d bytes)", KT_REGISTRY_KEY_MAX);
    if (d->role == KT_PEER_WORKER) {
        if (d->n_targets < 1 || d->n_targets > KT_REGISTRY_MAX_TARGETS || !d->targets)
            return kt_err_set(KT_EINVAL, "register: a worker lists 1 to %d targets",
                              KT_REGISTRY_MAX_TARGETS);
        for (int i = 0; i < d->n_targets; i++)
            if (!kt_registry_key_ok(d->targets[i]))
                return kt_err_set(KT_EINVAL, "register: malformed target");
    }
    return 0;
}

/* Fill a peer's description fields from d (id and times aside). */
static int peer_fill(peer_t *p, const kt_peer_desc_t *d)
{
    Ktune__V1__DeviceInfo *dev = NULL;
    if (d->role == KT_PEER_RUNNER && d->device && !(dev = device_copy(d->device)))
        return kt_err_set(KT_ENOMEM, "registry: out of memory");
    device_free(p->device);
    p->device = dev;
    p->role = d->role;
    snprintf(p->address, sizeof p->address, "%s", d->address);
    if (d->role == KT_PEER_RUNNER)
        snprintf(p->key, sizeof p->key, "%s", d->key);
    else
        p->key[0] = '\0';
    p->capacity = d->capacity > 0 ? d->capacity : 1;
    p->n_targets = d->role == KT_PEER_WORKER ? d->n_targets : 0;
    for (int i = 0; i < p->n_targets; i++)
        snprintf(p->targets[i], sizeof p->targets[i], "%s", d->targets[i]);
    return 0;
}

/* Keep the counter past a "<role>-<n>" id that came back after a restart. */
static void bump_counter(kt_registry_t *r, const char *id)
{
    const char *dash = strrchr(id, '-');
    if (!dash || !dash[1])
        return;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(dash + 1, &end, 10);
    if (*end == '\0' && errno == 0 && n > r->next_peer)
        r->next_peer = n;
}

int kt_registry_register(kt_registry_t *r, const kt_peer_desc_t *desc,
                         char id_out[KT_REGISTRY_ID_MAX])
{
    if (!r)
        return kt_err_set(KT_EINVAL, "register: no registry");
    int rc = desc_check(desc);
    if (rc)
        return rc;
    drop_t drops[2];
    int n_drops = 0;
    pthread_mutex_lock(&r->mu);
    double now = now_locked(r);
    const char *want = desc->peer_id && *desc->peer_id ? desc->peer_id : NULL;
    peer_t *p = NULL;
    int index;
    if (want && (p = find_peer(r, want, &index))) {
        if (strcmp(p->address, desc->address) != 0) {
            p = NULL;   /* someone else's id: the newcomer gets a fresh one */
            want = NULL;
        } else if (p->role != desc->role ||
                   (desc->role == KT_PEER_RUNNER && strcmp(p->key, desc->key) != 0)) {
            /* Same process, new identity: its old leases cannot stand. */
            drop_at(r, index, now, &drops[n_drops++]);
            p = NULL;
        }
    }
    /* An earlier incarnation at the same address is gone. */
    for (int i = 0; i < r->n_peers && n_drops < 2; i++) {
        peer_t *q = r->peers[i];
        if (q != p && q->role == desc->role && strcmp(q->address, desc->address) == 0) {
            drop_at(r, i, now, &drops[n_drops++]);
            i--;
        }
    }
    int fresh = p == NULL;
    if (fresh) {
        rc = grow((void **)&r->peers, &r->cap_peers, r->n_peers + 1, sizeof *r->peers);
        if (rc == 0 && !(p = calloc(1, sizeof *p)))
            rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
    }
    if (rc == 0 && (rc = peer_fill(p, desc)) != 0 && fresh) {
        free(p);
        p = NULL;
    }
    if (rc == 0) {
        if (fresh) {
            if (want) {
                snprintf(p->id, sizeof p->id, "%s", want);
                bump_counter(r, want);
            } else {
                snprintf(p->id, sizeof p->id, "%s-%" PRIu64, kt_peer_role_name(desc->role),
                         ++r->next_peer);
            }
            r->peers[r->n_peers++] = p;
            if (p->role == KT_PEER_RUNNER)
                r->stats.runners++;
            else
                r->stats.workers++;
        }
        p->registered = p->last_seen = now;
        r->stats.registrations++;
        if (desc->peer_id && *desc->peer_id && strcmp(p->id, desc->peer_id) == 0)
            r->stats.reregistrations++;
        memcpy(id_out, p->id, KT_REGISTRY_ID_MAX);
        if (p->role == KT_PEER_RUNNER)
            dispatch(r, p->key);
    }
    pthread_mutex_unlock(&r->mu);
    report_drops(r, drops, n_drops);
    return rc;
}

int kt_registry_heartbeat(kt_registry_t *r, const char *peer_id, int in_flight)
{
    if (!r || !peer_id)
        return kt_err_set(KT_EINVAL, "heartbeat: no peer id");
    pthread_mutex_lock(&r->mu);
    peer_t *p = find_peer(r, peer_id, NULL);
    int rc = 0;
    if (!p) {
        rc = kt_err_set(KT_ENOTFOUND, "heartbeat: unknown peer '%s'", peer_id);
    } else {
        double now = now_locked(r);
        int was_lost = peer_lost(r, p, now);
        p->last_seen = now;
        p->in_flight = in_flight < 0 ? 0 : in_flight;
        if (was_lost && p->role == KT_PEER_RUNNER)
            dispatch(r, p->key);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kt_registry_sweep(kt_registry_t *r, double now, char ***ids)
{
    if (ids)
        *ids = NULL;
    if (!r)
        return 0;
    double limit = r->missed_beats * (r->heartbeat_ms / 1000.0);
    drop_t *drops = NULL;
    int n = 0, rc = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_peers; i++) {
        if (now - r->peers[i]->last_seen <= limit)
            continue;
        drop_t *nd = realloc(drops, (size_t)(n + 1) * sizeof *nd);
        if (!nd) {
            rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
            break;   /* the rest go on the next sweep */
        }
        drops = nd;
        if (drop_at(r, i, now, &drops[n++]) != 0)
            rc = KT_ENOMEM;
        i--;
    }
    pthread_mutex_unlock(&r->mu);
    if (ids && n > 0) {
        char **list = calloc((size_t)n, sizeof *list);
        for (int i = 0; list && i < n; i++)
            if (!(list[i] = strdup(drops[i].peer.id)))
                rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
        if (!list)
            rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
        *ids = list;
    }
    report_drops(r, drops, n);
    free(drops);
    return rc ? rc : n;
}

/* ---- Queues ---------------------------------------------------------------------- */

int64_t kt_registry_request(kt_registry_t *r, const char *key, int priority)
{
    return kt_registry_request_for(r, key, priority, 0);
}

int64_t kt_registry_request_for(kt_registry_t *r, const char *key, int priority, int64_t owner)
{
    if (!r || !kt_registry_key_ok(key))
        return kt_err_set(KT_EINVAL, "request: malformed device key '%s'", key ? key : "");
    pthread_mutex_lock(&r->mu);
    int64_t id = grow((void **)&r->tickets, &r->cap_tickets, r->n_tickets + 1,
                      sizeof *r->tickets);
    if (id == 0) {
        ticket_t *t = &r->tickets[r->n_tickets++];
        memset(t, 0, sizeof *t);
        t->id = id = ++r->next_ticket;
        snprintf(t->key, sizeof t->key, "%s", key);
        t->priority = priority;
        t->owner = owner;
        dispatch(r, key);
    }
    pthread_mutex_unlock(&r->mu);
    return id;
}

static void lease_export(const lease_t *l, kt_lease_t *out)
{
    memset(out, 0, sizeof *out);
    out->id = l->id;
    out->role = l->role;
    memcpy(out->peer_id, l->peer_id, sizeof out->peer_id);
    memcpy(out->address, l->address, sizeof out->address);
    memcpy(out->key, l->key, sizeof out->key);
}

int kt_registry_wait(kt_registry_t *r, int64_t ticket, int timeout_ms, kt_lease_t *out)
{
    if (!r || !out)
        return kt_err_set(KT_EINVAL, "wait: no registry or lease");
    struct timespec end = kt_time_mono_after_ms(timeout_ms);
    waiter_t me = {.ticket = ticket};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&me.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&r->mu);
    me.next = r->waiters;
    r->waiters = &me;
    int rc;
    for (;;) {
        int index;
        ticket_t *t = find_ticket(r, ticket, &index);
        if (!t) {
            rc = kt_err_set(KT_ENOTFOUND, "wait: no ticket %" PRId64, ticket);
            break;
        }
        if (t->lease) {
            lease_t *l = find_lease(r, t->lease, NULL);
            lease_export(l, out);
            remove_ticket_at(r, index);
            rc = 0;
            break;
        }
        if (pthread_cond_timedwait(&me.cv, &r->mu, &end) == ETIMEDOUT) {
            t = find_ticket(r, ticket, NULL);
            if (t && !t->lease) {
                rc = kt_err_set(KT_ETIMEOUT, "wait: no runner of '%s' free within %d ms",
                                t->key, timeout_ms);
                break;
            }
        }
    }
    for (waiter_t **pp = &r->waiters; *pp; pp = &(*pp)->next)
        if (*pp == &me) {
            *pp = me.next;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    pthread_cond_destroy(&me.cv);
    return rc;
}

/* Undo a lease under the lock: the peer's slot is free again. */
static void lease_return(kt_registry_t *r, int lease_index)
{
    lease_t *l = &r->leases[lease_index];
    peer_t *p = find_peer(r, l->peer_id, NULL);
    char key[KT_REGISTRY_KEY_MAX] = "";
    if (p) {
        p->leased--;
        if (p->role == KT_PEER_RUNNER)
            memcpy(key, p->key, sizeof key);
    }
    remove_lease_at(r, lease_index);
    if (key[0])
        dispatch(r, key);
}

int kt_registry_cancel(kt_registry_t *r, int64_t ticket)
{
    if (!r)
        return kt_err_set(KT_EINVAL, "cancel: no registry");
    pthread_mutex_lock(&r->mu);
    int index, rc = 0;
    ticket_t *t = find_ticket(r, ticket, &index);
    if (!t) {
        rc = kt_err_set(KT_ENOTFOUND, "cancel: no ticket %" PRId64, ticket);
    } else {
        uint64_t lease = t->lease;
        remove_ticket_at(r, index);
        int li;
        if (lease && find_lease(r, lease, &li))
            lease_return(r, li);
        wake_ticket(r, ticket);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---- Workers and leases ------------------------------------------------------------ */

int kt_registry_acquire_worker(kt_registry_t *r, const char *target, kt_lease_t *out)
{
    if (!r || !out || !kt_registry_key_ok(target))
        return kt_err_set(KT_EINVAL, "acquire: malformed target");
    pthread_mutex_lock(&r->mu);
    double now = now_locked(r);
    peer_t *best = NULL;
    for (int i = 0; i < r->n_peers; i++) {
        peer_t *p = r->peers[i];
        if (p->role != KT_PEER_WORKER || peer_lost(r, p, now))
            continue;
        int builds = 0;
        for (int k = 0; k < p->n_targets; k++)
            builds |= strcmp(p->targets[k], target) == 0;
        if (!builds)
            continue;
        /* Least loaded relative to its parallelism: leased/capacity smallest. */
        long lhs = (long)p->leased * (best ? best->capacity : 1);
        long rhs = best ? (long)best->leased * p->capacity : 0;
        if (!best || lhs < rhs || (lhs == rhs && p->last_lease < best->last_lease))
            best = p;
    }
    int rc;
    uint64_t id;
    if (!best)
        rc = kt_err_set(KT_ENOTFOUND, "acquire: no live worker builds '%s'", target);
    else if ((rc = new_lease(r, best, target, 0, &id)) == 0)
        lease_export(find_lease(r, id, NULL), out);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kt_registry_release(kt_registry_t *r, const kt_lease_t *lease)
{
    if (!r || !lease)
        return kt_err_set(KT_EINVAL, "release: no lease");
    pthread_mutex_lock(&r->mu);
    int index, rc = 0;
    lease_t *l = find_lease(r, lease->id, &index);
    if (!l) {
        rc = kt_err_set(KT_ENOTFOUND, "release: no lease %" PRIu64, lease->id);
    } else if (l->lost) {
        rc = kt_err_set(KT_EUNAVAIL, "release: %s %s at %s was dropped while leased; "
                        "its work must be queued again", kt_peer_role_name(l->role), l->peer_id,
                        l->address);
        remove_lease_at(r, index);
    } else {
        lease_return(r, index);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kt_registry_lease_valid(kt_registry_t *r, uint64_t lease_id)
{
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    lease_t *l = find_lease(r, lease_id, NULL);
    int ok = l && !l->lost;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* ---- Status ------------------------------------------------------------------------ */

static int peer_order(const void *a, const void *b)
{
    const kt_peer_t *x = a, *y = b;
    if (x->role != y->role)
        return x->role < y->role ? -1 : 1;
    /* Numeric suffixes sort numerically so runner-10 follows runner-9. */
    size_t lx = strlen(x->id), ly = strlen(y->id);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->id, y->id);
}

int kt_registry_peers(kt_registry_t *r, kt_peer_t **out, int *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    double now = now_locked(r);
    int count = r->n_peers, rc = 0;
    kt_peer_t *list = count ? calloc((size_t)count, sizeof *list) : NULL;
    if (count && !list)
        rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
    for (int i = 0; list && i < count; i++)
        peer_export(r, r->peers[i], now, &list[i]);
    pthread_mutex_unlock(&r->mu);
    if (rc)
        return rc;
    if (count)
        qsort(list, (size_t)count, sizeof *list, peer_order);
    *out = list;
    *n = count;
    return 0;
}

int kt_registry_peer(kt_registry_t *r, const char *peer_id, kt_peer_t *out)
{
    memset(out, 0, sizeof *out);
    if (!r || !peer_id)
        return kt_err_set(KT_EINVAL, "peer: no id");
    pthread_mutex_lock(&r->mu);
    peer_t *p = find_peer(r, peer_id, NULL);
    int rc = 0;
    if (p)
        peer_export(r, p, now_locked(r), out);
    else
        rc = kt_err_set(KT_ENOTFOUND, "no peer '%s'", peer_id);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static kt_queue_info_t *queue_for(kt_queue_info_t *q, int *n, const char *key)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(q[i].key, key) == 0)
            return &q[i];
    kt_queue_info_t *e = &q[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    return e;
}

static int queue_order(const void *a, const void *b)
{
    return strcmp(((const kt_queue_info_t *)a)->key, ((const kt_queue_info_t *)b)->key);
}

int kt_registry_queues(kt_registry_t *r, kt_queue_info_t **out, int *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    double now = now_locked(r);
    int cap = r->n_peers + r->n_tickets, count = 0, rc = 0;
    kt_queue_info_t *q = cap ? calloc((size_t)cap, sizeof *q) : NULL;
    if (cap && !q) {
        rc = kt_err_set(KT_ENOMEM, "registry: out of memory");
    } else {
        for (int i = 0; i < r->n_peers; i++) {
            const peer_t *p = r->peers[i];
            if (p->role != KT_PEER_RUNNER)
                continue;
            kt_queue_info_t *e = queue_for(q, &count, p->key);
            e->total++;
            if (p->leased < p->capacity && !peer_lost(r, p, now))
                e->free++;
        }
        for (int i = 0; i < r->n_tickets; i++)
            if (!r->tickets[i].lease)
                queue_for(q, &count, r->tickets[i].key)->pending++;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc)
        return rc;
    if (count)
        qsort(q, (size_t)count, sizeof *q, queue_order);
    else {
        free(q);
        q = NULL;
    }
    *out = q;
    *n = count;
    return 0;
}

void kt_registry_stats(kt_registry_t *r, kt_registry_stats_t *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->stats;
    pthread_mutex_unlock(&r->mu);
}
