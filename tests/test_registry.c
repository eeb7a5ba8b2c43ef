/*
 * Suite "registry": the tracker-side registry with an injected clock
 * (membership, heartbeats, drops, re-registration, priority queues, leases,
 * queue counters), and the peer agent against an in-process tracker stand-in
 * on 127.0.0.1 whose state can be wiped like a restarted tracker's.
 *
 * Check runs every test in its own process, so gRPC state never crosses
 * tests.
 */
#include <arpa/inet.h>
#include <check.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "service/peer_daemon.h"
#include "util/err.h"
#include "util/util.h"

/* The daemons' shared command line is compiled into them, not into
 * libktune; tests/meson.build links it into this suite the same way. */
#include "peer_cmdline.h"
#include "kt_test_tls.h"

/* ---- Fixtures -------------------------------------------------------------------------- */

static double fake_now;

static double fake_clock(void *user)
{
    (void)user;
    return fake_now;
}

/* Heartbeat every second, clock at 0. */
static kt_registry_t *new_registry(void)
{
    fake_now = 0;
    kt_registry_opts_t o = {.heartbeat_ms = 1000, .clock = fake_clock};
    kt_registry_t *r = kt_registry_new(&o);
    ck_assert_msg(r != NULL, "%s", kt_err_msg());
    return r;
}

static void add_runner(kt_registry_t *r, const char *key, const char *addr, int capacity,
                       const char *old_id, char id[KT_REGISTRY_ID_MAX])
{
    kt_peer_desc_t d = {.peer_id = old_id, .role = KT_PEER_RUNNER, .address = addr, .key = key,
                        .capacity = capacity};
    ck_assert_msg(kt_registry_register(r, &d, id) == 0, "%s", kt_err_msg());
}

static void add_worker(kt_registry_t *r, const char *addr, int capacity, const char *targets,
                       char id[KT_REGISTRY_ID_MAX])
{
    const char *list[2] = {"cpu", "cuda"};
    int n = strcmp(targets, "cpu,cuda") == 0 ? 2 : 1;
    if (strcmp(targets, "cuda") == 0)
        list[0] = "cuda";
    kt_peer_desc_t d = {.role = KT_PEER_WORKER, .address = addr, .capacity = capacity,
                        .targets = list, .n_targets = n};
    ck_assert_msg(kt_registry_register(r, &d, id) == 0, "%s", kt_err_msg());
}

/* The queue entry of `key`; fails the test when absent. */
static kt_queue_info_t queue_of(kt_registry_t *r, const char *key)
{
    kt_queue_info_t *q = NULL, found;
    memset(&found, 0, sizeof found);
    int n = 0, hit = 0;
    ck_assert_int_eq(kt_registry_queues(r, &q, &n), 0);
    for (int i = 0; i < n; i++)
        if (strcmp(q[i].key, key) == 0) {
            found = q[i];
            hit = 1;
        }
    free(q);
    ck_assert_msg(hit, "no queue for key %s", key);
    return found;
}

static int peer_count(kt_registry_t *r)
{
    kt_peer_t *p = NULL;
    int n = 0;
    ck_assert_int_eq(kt_registry_peers(r, &p, &n), 0);
    kt_peer_list_free(p, n);
    return n;
}

/* Drop callback bookkeeping. */
typedef struct {
    int calls;
    char last_id[KT_REGISTRY_ID_MAX];
    int n_lost;
    uint64_t lost[8];
} drops_t;

static void on_drop(void *user, const kt_peer_t *p, const uint64_t *lost, int n_lost)
{
    drops_t *d = user;
    d->calls++;
    snprintf(d->last_id, sizeof d->last_id, "%s", p->id);
    for (int i = 0; i < n_lost && d->n_lost < 8; i++)
        d->lost[d->n_lost++] = lost[i];
}

/* ---- Membership ------------------------------------------------------------------------ */

START_TEST(registry_register_assigns_ids_and_copies_descriptions)
{
    kt_registry_t *r = new_registry();
    Ktune__V1__DeviceInfo dev = KTUNE__V1__DEVICE_INFO__INIT;
    char name[] = "Test CPU", arch[] = "x86-64-v3", target[] = "cpu";
    dev.name = name;
    dev.arch = arch;
    dev.target = target;
    dev.num_cores = 8;
    kt_peer_desc_t d = {.role = KT_PEER_RUNNER, .address = "127.0.0.1:5001", .key = "cpu-avx2",
                        .capacity = 2, .device = &dev};
    char rid[KT_REGISTRY_ID_MAX], wid[KT_REGISTRY_ID_MAX];
    ck_assert_int_eq(kt_registry_register(r, &d, rid), 0);
    strcpy(name, "changed");   /* the registry holds its own copy */
    add_worker(r, "127.0.0.1:5002", 4, "cpu,cuda", wid);
    ck_assert_str_eq(rid, "runner-1");
    ck_assert_str_eq(wid, "worker-2");

    kt_peer_t *p = NULL;
    int n = 0;
    ck_assert_int_eq(kt_registry_peers(r, &p, &n), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(p[0].id, "runner-1");
    ck_assert_int_eq(p[0].role, KT_PEER_RUNNER);
    ck_assert_str_eq(p[0].key, "cpu-avx2");
    ck_assert_str_eq(p[0].address, "127.0.0.1:5001");
    ck_assert_int_eq(p[0].capacity, 2);
    ck_assert_ptr_nonnull(p[0].device);
    ck_assert_str_eq(p[0].device->name, "Test CPU");
    ck_assert_int_eq(p[0].device->num_cores, 8);
    ck_assert_str_eq(p[0].state, "free");
    ck_assert_str_eq(p[1].id, "worker-2");
    ck_assert_int_eq(p[1].n_targets, 2);
    ck_assert_str_eq(p[1].targets[1], "cuda");
    ck_assert_str_eq(p[1].key, "");
    ck_assert_ptr_null(p[1].device);
    kt_peer_list_free(p, n);

    kt_queue_info_t q = queue_of(r, "cpu-avx2");
    ck_assert_int_eq(q.total, 1);
    ck_assert_int_eq(q.free, 1);
    ck_assert_int_eq(q.pending, 0);
    kt_registry_stats_t st;
    kt_registry_stats(r, &st);
    ck_assert_int_eq(st.runners, 1);
    ck_assert_int_eq(st.workers, 1);
    ck_assert_uint_eq(st.registrations, 2);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_rejects_malformed_descriptions)
{
    kt_registry_t *r = new_registry();
    char id[KT_REGISTRY_ID_MAX];
    kt_peer_desc_t no_addr = {.role = KT_PEER_RUNNER, .key = "cpu"};
    ck_assert_int_eq(kt_registry_register(r, &no_addr, id), KT_EINVAL);
    kt_peer_desc_t no_key = {.role = KT_PEER_RUNNER, .address = "127.0.0.1:1"};
    ck_assert_int_eq(kt_registry_register(r, &no_key, id), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "device key"));
    kt_peer_desc_t bad_key = {.role = KT_PEER_RUNNER, .address = "127.0.0.1:1", .key = "a b"};
    ck_assert_int_eq(kt_registry_register(r, &bad_key, id), KT_EINVAL);
    kt_peer_desc_t blank_addr = {.role = KT_PEER_RUNNER, .address = "127.0.0.1: 1", .key = "k"};
    ck_assert_int_eq(kt_registry_register(r, &blank_addr, id), KT_EINVAL);
    kt_peer_desc_t no_targets = {.role = KT_PEER_WORKER, .address = "127.0.0.1:2"};
    ck_assert_int_eq(kt_registry_register(r, &no_targets, id), KT_EINVAL);
    kt_peer_desc_t bad_role = {.role = (kt_peer_role_t)7, .address = "127.0.0.1:2", .key = "k"};
    ck_assert_int_eq(kt_registry_register(r, &bad_role, id), KT_EINVAL);
    kt_peer_desc_t bad_id = {.peer_id = "x/y", .role = KT_PEER_RUNNER, .address = "127.0.0.1:3",
                             .key = "k"};
    ck_assert_int_eq(kt_registry_register(r, &bad_id, id), KT_EINVAL);
    ck_assert_int_eq(peer_count(r), 0);
    ck_assert_int_eq(kt_registry_request(r, "bad key", 1), KT_EINVAL);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_heartbeats_keep_a_peer_alive)
{
    kt_registry_t *r = new_registry();
    char id[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, id);
    for (int i = 0; i < 10; i++) {
        fake_now += 0.9;
        ck_assert_int_eq(kt_registry_heartbeat(r, id, i), 0);
        ck_assert_int_eq(kt_registry_sweep(r, fake_now, NULL), 0);
    }
    ck_assert_int_eq(peer_count(r), 1);
    kt_peer_t p;
    ck_assert_int_eq(kt_registry_peer(r, id, &p), 0);
    ck_assert_int_eq(p.in_flight, 9);
    ck_assert_double_eq_tol(p.last_seen, 9.0, 1e-9);
    ck_assert_str_eq(p.state, "free");
    kt_peer_clear(&p);
    ck_assert_int_eq(kt_registry_heartbeat(r, "runner-99", 0), KT_ENOTFOUND);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_three_missed_intervals_drop_a_peer)
{
    kt_registry_t *r = new_registry();
    static drops_t d;
    ck_assert_int_eq(kt_registry_on_drop(r, on_drop, &d), 0);
    char a[KT_REGISTRY_ID_MAX], b[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, a);
    add_worker(r, "127.0.0.1:5002", 1, "cpu", b);
    fake_now = 2.5;
    ck_assert_int_eq(kt_registry_heartbeat(r, b, 0), 0);
    /* Two silent intervals: shown lost, not leased, not yet dropped. */
    kt_peer_t p;
    ck_assert_int_eq(kt_registry_peer(r, a, &p), 0);
    ck_assert_str_eq(p.state, "lost");
    kt_peer_clear(&p);
    ck_assert_int_eq(queue_of(r, "cpu").free, 0);
    ck_assert_int_eq(kt_registry_sweep(r, 3.0, NULL), 0);
    char **ids = NULL;
    ck_assert_int_eq(kt_registry_sweep(r, 3.01, &ids), 1);
    ck_assert_ptr_nonnull(ids);
    ck_assert_str_eq(ids[0], "runner-1");
    kt_registry_ids_free(ids, 1);
    ck_assert_int_eq(d.calls, 1);
    ck_assert_str_eq(d.last_id, "runner-1");
    ck_assert_int_eq(kt_registry_heartbeat(r, a, 0), KT_ENOTFOUND);
    ck_assert_int_eq(peer_count(r), 1);   /* the worker heartbeated */
    fake_now = 10;
    ck_assert_int_eq(kt_registry_sweep(r, fake_now, &ids), 1);
    ck_assert_str_eq(ids[0], "worker-2");
    kt_registry_ids_free(ids, 1);
    ck_assert_int_eq(peer_count(r), 0);
    kt_registry_stats_t st;
    kt_registry_stats(r, &st);
    ck_assert_uint_eq(st.drops, 2);
    ck_assert_int_eq(st.runners, 0);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_accepts_old_ids_after_a_restart)
{
    char a[KT_REGISTRY_ID_MAX], b[KT_REGISTRY_ID_MAX], c[KT_REGISTRY_ID_MAX];
    kt_registry_t *before = new_registry();
    add_runner(before, "cpu", "127.0.0.1:5001", 1, NULL, a);
    add_runner(before, "cpu", "127.0.0.1:5002", 1, NULL, b);
    ck_assert_str_eq(b, "runner-2");
    kt_registry_free(before);

    /* The restarted tracker knows nobody; runner-2 comes back first. */
    kt_registry_t *r = new_registry();
    char got[KT_REGISTRY_ID_MAX];
    ck_assert_int_eq(kt_registry_heartbeat(r, b, 0), KT_ENOTFOUND);
    add_runner(r, "cpu", "127.0.0.1:5002", 1, b, got);
    ck_assert_str_eq(got, "runner-2");
    /* A new peer never collides with an id that came back. */
    add_runner(r, "cpu", "127.0.0.1:5003", 1, NULL, c);
    ck_assert_str_eq(c, "runner-3");
    /* An id already held at another address is not handed over. */
    add_runner(r, "cpu", "127.0.0.1:5004", 1, "runner-2", got);
    ck_assert_str_ne(got, "runner-2");
    kt_registry_stats_t st;
    kt_registry_stats(r, &st);
    ck_assert_uint_eq(st.reregistrations, 1);
    ck_assert_int_eq(st.runners, 3);
    /* Registering again at the same address replaces the old incarnation. */
    static drops_t d;
    ck_assert_int_eq(kt_registry_on_drop(r, on_drop, &d), 0);
    add_runner(r, "cpu", "127.0.0.1:5003", 1, NULL, got);
    ck_assert_str_ne(got, "runner-3");
    ck_assert_int_eq(d.calls, 1);
    ck_assert_str_eq(d.last_id, "runner-3");
    ck_assert_int_eq(queue_of(r, "cpu").total, 3);
    /* The same id from the same address is an update in place. */
    add_runner(r, "cpu", "127.0.0.1:5002", 3, "runner-2", got);
    ck_assert_str_eq(got, "runner-2");
    ck_assert_int_eq(d.calls, 1);
    kt_peer_t p;
    ck_assert_int_eq(kt_registry_peer(r, "runner-2", &p), 0);
    ck_assert_int_eq(p.capacity, 3);
    kt_peer_clear(&p);
    kt_registry_free(r);
}
END_TEST

/* ---- Queues and leases ---------------------------------------------------------------- */

/* The ticket holding a lease now, among ts[0..n); -1 when none. */
static int granted_one(kt_registry_t *r, const int64_t *ts, int n, kt_lease_t *l)
{
    int who = -1;
    for (int i = 0; i < n; i++) {
        if (ts[i] == 0)
            continue;
        int rc = kt_registry_wait(r, ts[i], 0, l);
        if (rc == 0) {
            ck_assert_int_eq(who, -1);
            who = i;
        } else {
            ck_assert_int_eq(rc, KT_ETIMEOUT);
        }
    }
    return who;
}

START_TEST(registry_queue_serves_higher_priority_first_and_fifo_within)
{
    kt_registry_t *r = new_registry();
    int64_t t[5];
    const int prio[5] = {1, 5, 1, 5, 3};
    for (int i = 0; i < 5; i++) {
        t[i] = kt_registry_request(r, "cpu", prio[i]);
        ck_assert_int_gt(t[i], 0);
    }
    kt_queue_info_t q = queue_of(r, "cpu");
    ck_assert_int_eq(q.total, 0);
    ck_assert_int_eq(q.pending, 5);
    char id[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, id);
    const int want[5] = {1, 3, 4, 0, 2};
    for (int k = 0; k < 5; k++) {
        kt_lease_t l;
        int who = granted_one(r, t, 5, &l);
        ck_assert_msg(who == want[k], "lease %d went to ticket %d, not %d", k, who, want[k]);
        ck_assert_str_eq(l.peer_id, id);
        ck_assert_str_eq(l.address, "127.0.0.1:5001");
        ck_assert_int_eq(l.role, KT_PEER_RUNNER);
        t[who] = 0;
        ck_assert_int_eq(queue_of(r, "cpu").pending, 4 - k);
        ck_assert_int_eq(kt_registry_release(r, &l), 0);
    }
    kt_registry_free(r);
}
END_TEST

/* Two owners (jobs) with many tickets each at one priority: a single runner
 * alternates between them however their tickets arrived; two runners go one
 * to each; a higher priority still goes first; unowned tickets stay FIFO. */
START_TEST(registry_queue_shares_runners_fairly_among_owners)
{
    kt_registry_t *r = new_registry();
    int64_t t[9];
    int64_t owner[9] = {7, 7, 7, 7, 9, 9, 9, 9, 5};
    int prio[9] = {0, 0, 0, 0, 0, 0, 0, 0, 2};
    for (int i = 0; i < 9; i++)   /* owner 7's four tickets all come first */
        ck_assert_int_gt(t[i] = kt_registry_request_for(r, "cpu", prio[i], owner[i]), 0);
    char id[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, id);
    /* The priority-2 ticket first, then owners 7 and 9 in turn, each FIFO. */
    const int want[9] = {8, 0, 4, 1, 5, 2, 6, 3, 7};
    for (int k = 0; k < 9; k++) {
        kt_lease_t l;
        int who = granted_one(r, t, 9, &l);
        ck_assert_msg(who == want[k], "lease %d went to ticket %d, not %d", k, who, want[k]);
        t[who] = 0;
        ck_assert_int_eq(kt_registry_release(r, &l), 0);
    }
    /* Two runners and a backlog of owner 7 before owner 9 asks: the second
     * runner freed goes to 9, which holds none, not to 7's older ticket. */
    add_runner(r, "cpu", "127.0.0.1:5002", 1, NULL, id);
    int64_t a[3], b;
    for (int i = 0; i < 3; i++)
        a[i] = kt_registry_request_for(r, "cpu", 0, 7);
    b = kt_registry_request_for(r, "cpu", 0, 9);
    kt_lease_t l0, l1, l2;
    ck_assert_int_eq(kt_registry_wait(r, a[0], 0, &l0), 0);
    ck_assert_int_eq(kt_registry_wait(r, a[1], 0, &l1), 0);
    ck_assert_int_eq(kt_registry_release(r, &l1), 0);
    ck_assert_int_eq(kt_registry_wait(r, a[2], 0, &l2), KT_ETIMEOUT);
    ck_assert_int_eq(kt_registry_wait(r, b, 0, &l1), 0);
    ck_assert_int_eq(kt_registry_release(r, &l0), 0);
    ck_assert_int_eq(kt_registry_wait(r, a[2], 0, &l2), 0);
    ck_assert_int_eq(kt_registry_release(r, &l1), 0);
    ck_assert_int_eq(kt_registry_release(r, &l2), 0);
    ck_assert_int_eq(queue_of(r, "cpu").pending, 0);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_leases_respect_capacity_and_release_frees_a_slot)
{
    kt_registry_t *r = new_registry();
    char a[KT_REGISTRY_ID_MAX];
    add_runner(r, "gpu", "127.0.0.1:5001", 2, NULL, a);
    int64_t t1 = kt_registry_request(r, "gpu", 0), t2 = kt_registry_request(r, "gpu", 0);
    int64_t t3 = kt_registry_request(r, "gpu", 0), t4 = kt_registry_request(r, "gpu", 0);
    kt_lease_t l1, l2, l3;
    ck_assert_int_eq(kt_registry_wait(r, t1, 0, &l1), 0);
    ck_assert_int_eq(kt_registry_wait(r, t2, 0, &l2), 0);
    ck_assert_int_eq(kt_registry_wait(r, t3, 0, &l3), KT_ETIMEOUT);
    ck_assert_uint_ne(l1.id, l2.id);
    kt_queue_info_t q = queue_of(r, "gpu");
    ck_assert_int_eq(q.total, 1);
    ck_assert_int_eq(q.free, 0);
    ck_assert_int_eq(q.pending, 2);
    kt_peer_t p;
    ck_assert_int_eq(kt_registry_peer(r, a, &p), 0);
    ck_assert_str_eq(p.state, "busy");
    ck_assert_int_eq(p.leased, 2);
    kt_peer_clear(&p);

    ck_assert_int_eq(kt_registry_release(r, &l1), 0);
    ck_assert_int_eq(kt_registry_release(r, &l1), KT_ENOTFOUND);
    ck_assert_int_eq(kt_registry_lease_valid(r, l1.id), 0);
    ck_assert_int_eq(kt_registry_lease_valid(r, l2.id), 1);
    /* t3 now holds the freed slot; cancelling it uncollected gives it to t4. */
    ck_assert_int_eq(queue_of(r, "gpu").pending, 1);
    ck_assert_int_eq(kt_registry_cancel(r, t3), 0);
    ck_assert_int_eq(kt_registry_wait(r, t3, 0, &l3), KT_ENOTFOUND);
    kt_lease_t l4;
    ck_assert_int_eq(kt_registry_wait(r, t4, 0, &l4), 0);
    ck_assert_int_eq(queue_of(r, "gpu").pending, 0);
    ck_assert_int_eq(kt_registry_cancel(r, t4), KT_ENOTFOUND);   /* consumed */
    ck_assert_int_eq(kt_registry_release(r, &l2), 0);
    ck_assert_int_eq(kt_registry_release(r, &l4), 0);
    q = queue_of(r, "gpu");
    ck_assert_int_eq(q.free, 1);
    ck_assert_int_eq(q.pending, 0);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_lease_on_a_dropped_runner_is_reported)
{
    kt_registry_t *r = new_registry();
    static drops_t d;
    ck_assert_int_eq(kt_registry_on_drop(r, on_drop, &d), 0);
    char a[KT_REGISTRY_ID_MAX], b[KT_REGISTRY_ID_MAX], c[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, a);
    int64_t t1 = kt_registry_request(r, "cpu", 0);
    kt_lease_t l1;
    ck_assert_int_eq(kt_registry_wait(r, t1, 0, &l1), 0);
    ck_assert_str_eq(l1.peer_id, a);
    add_runner(r, "cpu", "127.0.0.1:5002", 1, NULL, b);
    int64_t t2 = kt_registry_request(r, "cpu", 0);   /* granted on b, not collected */

    fake_now = 5;   /* both silent for 5 intervals */
    ck_assert_int_eq(kt_registry_sweep(r, fake_now, NULL), 2);
    ck_assert_int_eq(d.calls, 2);
    ck_assert_int_eq(d.n_lost, 1);
    ck_assert_uint_eq(d.lost[0], l1.id);
    ck_assert_int_eq(kt_registry_lease_valid(r, l1.id), 0);
    ck_assert_int_eq(kt_registry_release(r, &l1), KT_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "queued again"));
    ck_assert_int_eq(kt_registry_release(r, &l1), KT_ENOTFOUND);

    /* The uncollected grant went back to the queue and goes to a new runner. */
    kt_lease_t l2;
    ck_assert_int_eq(kt_registry_wait(r, t2, 0, &l2), KT_ETIMEOUT);
    kt_queue_info_t q = queue_of(r, "cpu");
    ck_assert_int_eq(q.total, 0);
    ck_assert_int_eq(q.pending, 1);
    add_runner(r, "cpu", "127.0.0.1:5003", 1, NULL, c);
    ck_assert_int_eq(kt_registry_wait(r, t2, 0, &l2), 0);
    ck_assert_str_eq(l2.peer_id, c);
    kt_registry_stats_t st;
    kt_registry_stats(r, &st);
    ck_assert_uint_eq(st.lost_leases, 1);
    kt_registry_free(r);
}
END_TEST

typedef struct {
    kt_registry_t *r;
    int64_t ticket;
    int rc;
    kt_lease_t lease;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    w->rc = kt_registry_wait(w->r, w->ticket, 30000, &w->lease);
    return NULL;
}

START_TEST(registry_wait_blocks_until_a_runner_is_released)
{
    kt_registry_t *r = new_registry();
    char a[KT_REGISTRY_ID_MAX];
    add_runner(r, "cpu", "127.0.0.1:5001", 1, NULL, a);
    kt_lease_t l1;
    int64_t t1 = kt_registry_request(r, "cpu", 0);
    ck_assert_int_eq(kt_registry_wait(r, t1, 0, &l1), 0);
    waiter_t w = {.r = r, .ticket = kt_registry_request(r, "cpu", 0), .rc = 99};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_thread, &w), 0);
    ck_assert_int_eq(kt_registry_release(r, &l1), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_str_eq(w.lease.peer_id, a);
    ck_assert_int_eq(kt_registry_release(r, &w.lease), 0);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_workers_are_leased_least_loaded_first)
{
    kt_registry_t *r = new_registry();
    char w1[KT_REGISTRY_ID_MAX], w2[KT_REGISTRY_ID_MAX], w3[KT_REGISTRY_ID_MAX];
    add_worker(r, "127.0.0.1:6001", 1, "cpu", w1);
    add_worker(r, "127.0.0.1:6002", 3, "cpu,cuda", w2);
    add_worker(r, "127.0.0.1:6003", 8, "cuda", w3);
    /* Loads per parallel build: w1 0/1, w2 0/3 -> tie broken by least recent. */
    kt_lease_t l[4];
    int on_w1 = 0, on_w2 = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(kt_registry_acquire_worker(r, "cpu", &l[i]), 0);
        ck_assert_str_eq(l[i].key, "cpu");
        on_w1 += strcmp(l[i].peer_id, w1) == 0;
        on_w2 += strcmp(l[i].peer_id, w2) == 0;
    }
    /* 4 batches over parallelism 1 + 3 land as 1 + 3. */
    ck_assert_int_eq(on_w1, 1);
    ck_assert_int_eq(on_w2, 3);
    kt_lease_t lc;
    ck_assert_int_eq(kt_registry_acquire_worker(r, "cuda", &lc), 0);
    ck_assert_str_eq(lc.peer_id, w3);   /* w2 is full, w3 idle */
    ck_assert_int_eq(kt_registry_acquire_worker(r, "rocm", &lc), KT_ENOTFOUND);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(kt_registry_release(r, &l[i]), 0);
    kt_registry_free(r);
}
END_TEST

START_TEST(registry_queue_status_lists_every_key_sorted)
{
    kt_registry_t *r = new_registry();
    char id[KT_REGISTRY_ID_MAX];
    add_runner(r, "cuda-sm90", "127.0.0.1:5001", 1, NULL, id);
    add_runner(r, "cpu", "127.0.0.1:5002", 1, NULL, id);
    add_runner(r, "cpu", "127.0.0.1:5003", 1, NULL, id);
    add_worker(r, "127.0.0.1:5004", 2, "cpu", id);
    kt_lease_t l;
    ck_assert_int_eq(kt_registry_wait(r, kt_registry_request(r, "cpu", 0), 0, &l), 0);
    ck_assert_int_gt(kt_registry_request(r, "rocm", 0), 0);   /* nobody serves it yet */
    kt_queue_info_t *q = NULL;
    int n = 0;
    ck_assert_int_eq(kt_registry_queues(r, &q, &n), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(q[0].key, "cpu");
    ck_assert_int_eq(q[0].total, 2);
    ck_assert_int_eq(q[0].free, 1);
    ck_assert_int_eq(q[0].pending, 0);
    ck_assert_str_eq(q[1].key, "cuda-sm90");
    ck_assert_int_eq(q[1].total, 1);
    ck_assert_str_eq(q[2].key, "rocm");
    ck_assert_int_eq(q[2].total, 0);
    ck_assert_int_eq(q[2].pending, 1);
    free(q);
    kt_registry_free(r);
}
END_TEST

/* ---- Peer agent against an in-process tracker stand-in -------------------------------- */

/* RegisterPeer and Heartbeat served from a registry that a test can replace
 * (a "restart"). */
typedef struct {
    pthread_mutex_t mu;
    kt_registry_t *r;
    atomic_int registers, heartbeats;
} fake_tracker_t;

static int fk_register(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                       void *ud)
{
    fake_tracker_t *f = ud;
    const Ktune__V1__PeerInfo *in = ((const Ktune__V1__RegisterRequest *)req)->peer;
    kt_peer_desc_t d = {.peer_id = in->peer_id, .role = KT_PEER_RUNNER, .address = in->address,
                        .key = in->key, .capacity = in->capacity, .device = in->device};
    char id[KT_REGISTRY_ID_MAX];
    pthread_mutex_lock(&f->mu);
    int rc = kt_registry_register(f->r, &d, id);
    int interval = kt_registry_heartbeat_ms(f->r);
    pthread_mutex_unlock(&f->mu);
    if (rc != 0)
        return rc;
    atomic_fetch_add(&f->registers, 1);
    Ktune__V1__RegisterResponse *out = (Ktune__V1__RegisterResponse *)resp;
    out->peer_id = kt_rpc_call_strdup(call, id);
    out->heartbeat_interval_ms = interval;
    return KT_RPC_OK;
}

static int fk_heartbeat(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                        void *ud)
{
    (void)call;
    fake_tracker_t *f = ud;
    const Ktune__V1__HeartbeatRequest *in = (const Ktune__V1__HeartbeatRequest *)req;
    pthread_mutex_lock(&f->mu);
    ((Ktune__V1__HeartbeatResponse *)resp)->known =
        kt_registry_heartbeat(f->r, in->peer_id, in->in_flight) == 0;
    pthread_mutex_unlock(&f->mu);
    atomic_fetch_add(&f->heartbeats, 1);
    return KT_RPC_OK;
}

static int wait_for(atomic_int *v, int at_least, int ms)
{
    for (int i = 0; i < ms / 10 && atomic_load(v) < at_least; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(v) >= at_least;
}

static int busy_batches(void *user)
{
    return *(int *)user;
}

START_TEST(peer_agent_registers_heartbeats_and_registers_again_when_forgotten)
{
    static fake_tracker_t f;
    pthread_mutex_init(&f.mu, NULL);
    kt_registry_opts_t ro = {.heartbeat_ms = 50};
    f.r = kt_registry_new(&ro);
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .threads = 2};
    kt_rpc_server_t *s = kt_rpc_server_new(&so);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/RegisterPeer",
                                             &ktune__v1__register_request__descriptor,
                                             &ktune__v1__register_response__descriptor,
                                             fk_register, &f),
                     0);
    ck_assert_int_eq(kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/Heartbeat",
                                             &ktune__v1__heartbeat_request__descriptor,
                                             &ktune__v1__heartbeat_response__descriptor,
                                             fk_heartbeat, &f),
                     0);
    ck_assert_msg(kt_rpc_server_start(s) == 0, "%s", kt_err_msg());
    char tracker[64];
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", kt_rpc_server_port(s));

    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    me.role = "runner";
    me.address = "127.0.0.1:7001";
    me.key = "cpu";
    static int busy = 2;
    kt_peer_agent_opts_t ao = {.tracker = tracker, .self = &me, .in_flight = busy_batches,
                               .user = &busy, .retry_min_ms = 20, .retry_max_ms = 100};
    kt_peer_agent_t *a = kt_peer_agent_start(&ao);
    ck_assert_msg(a != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_peer_agent_wait_registered(a, 20000), 0);
    char id[KT_REGISTRY_ID_MAX];
    kt_peer_agent_id(a, id, sizeof id);
    ck_assert_str_eq(id, "runner-1");
    ck_assert(wait_for(&f.heartbeats, 2, 20000));
    kt_peer_t p;
    pthread_mutex_lock(&f.mu);
    ck_assert_int_eq(kt_registry_peer(f.r, id, &p), 0);
    pthread_mutex_unlock(&f.mu);
    ck_assert_int_eq(p.in_flight, 2);
    kt_peer_clear(&p);

    /* The tracker "restarts" with an empty registry: the next heartbeat
     * answers known = false and the agent registers again with its id. */
    kt_registry_t *fresh = kt_registry_new(&ro);
    pthread_mutex_lock(&f.mu);
    kt_registry_t *old = f.r;
    f.r = fresh;
    pthread_mutex_unlock(&f.mu);
    kt_registry_free(old);
    ck_assert(wait_for(&f.registers, 2, 20000));
    ck_assert_int_eq(kt_peer_agent_wait_registered(a, 20000), 0);
    ck_assert_uint_ge(kt_peer_agent_registrations(a), 2);
    kt_peer_agent_id(a, id, sizeof id);
    ck_assert_str_eq(id, "runner-1");   /* the same id, kept across the restart */
    pthread_mutex_lock(&f.mu);
    ck_assert_int_eq(kt_registry_peer(f.r, "runner-1", &p), 0);
    pthread_mutex_unlock(&f.mu);
    ck_assert_str_eq(p.address, "127.0.0.1:7001");
    kt_peer_clear(&p);

    kt_peer_agent_stop(a);
    kt_rpc_server_stop(s, 1000);
    kt_registry_free(f.r);
}
END_TEST

/* A loopback port nothing listens on (bound, read and released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

START_TEST(peer_agent_keeps_retrying_while_the_tracker_is_down)
{
    char tracker[64];
    snprintf(tracker, sizeof tracker, "127.0.0.1:%d", free_port());
    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    me.role = "worker";
    me.address = "127.0.0.1:7002";
    kt_peer_agent_opts_t ao = {.tracker = tracker, .self = &me, .retry_min_ms = 10,
                               .retry_max_ms = 50};
    kt_peer_agent_t *a = kt_peer_agent_start(&ao);
    ck_assert_ptr_nonnull(a);
    for (int i = 0; i < 2000 && kt_peer_agent_state(a) != KT_PEER_AGENT_UNREACHABLE; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ck_assert_int_eq(kt_peer_agent_state(a), KT_PEER_AGENT_UNREACHABLE);
    ck_assert_int_eq(kt_peer_agent_wait_registered(a, 0), KT_ETIMEOUT);
    ck_assert_uint_eq(kt_peer_agent_registrations(a), 0);
    char id[KT_REGISTRY_ID_MAX];
    kt_peer_agent_id(a, id, sizeof id);
    ck_assert_str_eq(id, "");
    kt_peer_agent_stop(a);

    kt_peer_agent_opts_t bad = {.self = &me};
    ck_assert_ptr_null(kt_peer_agent_start(&bad));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
}
END_TEST

START_TEST(peer_advertise_address_replaces_only_wildcards)
{
    char out[KT_REGISTRY_ADDR_MAX];
    ck_assert_int_eq(kt_peer_advertise_address("0.0.0.0:5000", "127.0.0.1:9190", out, sizeof out),
                     0);
    ck_assert_str_eq(out, "127.0.0.1:5000");
    ck_assert_int_eq(kt_peer_advertise_address("0.0.0.0:5001", NULL, out, sizeof out), 0);
    ck_assert_str_eq(out, "127.0.0.1:5001");
    ck_assert_int_eq(kt_peer_advertise_address("[::]:5002", "127.0.0.1:9190", out, sizeof out),
                     0);
    ck_assert_str_eq(out, "127.0.0.1:5002");
    ck_assert_int_eq(kt_peer_advertise_address("10.1.2.3:7", "127.0.0.1:9190", out, sizeof out),
                     0);
    ck_assert_str_eq(out, "10.1.2.3:7");
    ck_assert_int_eq(kt_peer_advertise_address("[::1]:8", NULL, out, sizeof out), 0);
    ck_assert_str_eq(out, "[::1]:8");
    ck_assert_int_eq(kt_peer_advertise_address("no-port", NULL, out, sizeof out), KT_EINVAL);
    ck_assert_int_eq(kt_peer_advertise_address("127.0.0.1:9", NULL, out, 4), KT_EINVAL);
}
END_TEST

/* ---- Peer daemon --------------------------------------------------------------------------- */

typedef struct {
    const char *key;
    int flag;
} own_opts_t;

static int own_option(void *user, int c, const char *arg)
{
    own_opts_t *o = user;
    if (c == 'K') {
        o->key = arg;
        return 0;
    }
    if (c == 'f') {
        o->flag = 1;
        return 0;
    }
    return 2;
}

static void no_usage(FILE *out) { (void)out; }

static int parse(int argc, char **argv, kt_peer_daemon_opts_t *cl, own_opts_t *o)
{
    static const struct option extra[] = {{"key", required_argument, 0, 'K'},
                                          {"flag", no_argument, 0, 'f'},
                                          {0, 0, 0, 0}};
    *o = (own_opts_t){0};
    return kt_peer_cmdline_parse(cl, "ktune-test", argc, argv, extra, own_option, o, no_usage);
}

START_TEST(peer_daemon_cmdline_parses_common_and_own_options)
{
    kt_peer_daemon_opts_t cl;
    own_opts_t o;
    /* TLS files are read at parse time: the CA must be a real one. */
    char dir[] = "/tmp/kt_registry_tlsXXXXXX", ca[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    kt_test_tls_ca(dir, "ca");
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    char *ok[] = {"prog", "--tracker", "h:1", "--key", "k1", "--listen", "0.0.0.0:7",
                  "--flag", "--advertise", "a:2", "--token-file", "tok", "--tls-ca", ca, NULL};
    ck_assert_int_eq(parse(14, ok, &cl, &o), -1);
    ck_assert_str_eq(cl.tracker, "h:1");
    ck_assert_str_eq(cl.listen, "0.0.0.0:7");
    ck_assert_str_eq(cl.advertise, "a:2");
    ck_assert_str_eq(cl.token_file, "tok");
    ck_assert_str_eq(cl.tls_ca, ca);
    ck_assert_ptr_null(cl.tls_cert);
    ck_assert_str_eq(o.key, "k1");
    ck_assert_int_eq(o.flag, 1);
    /* A CA file that is not there is bad usage. */
    char missing[80];
    snprintf(missing, sizeof missing, "%s/missing.pem", dir);
    char *no_ca[] = {"prog", "--tls-ca", missing, NULL};
    ck_assert_int_eq(parse(3, no_ca, &cl, &o), 2);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(rm), 0);

    /* Parsed again from the start: defaults come back. */
    char *bare[] = {"prog", NULL};
    ck_assert_int_eq(parse(1, bare, &cl, &o), -1);
    ck_assert_ptr_null(cl.tracker);
    ck_assert_str_eq(cl.listen, "127.0.0.1:0");
    ck_assert_ptr_null(o.key);

    char *half_tls[] = {"prog", "--tls-cert", "c.pem", NULL};
    ck_assert_int_eq(parse(3, half_tls, &cl, &o), 2);
    char *stray[] = {"prog", "extra", NULL};
    ck_assert_int_eq(parse(2, stray, &cl, &o), 2);
    char *unknown[] = {"prog", "--nope", NULL};
    ck_assert_int_eq(parse(2, unknown, &cl, &o), 2);
    char *help[] = {"prog", "--help", NULL};
    ck_assert_int_eq(parse(2, help, &cl, &o), 0);

    /* An own option reusing a common option's code is refused, not taken
     * for the common one. */
    static const struct option clash[] = {{"timer", required_argument, 0, 'T'}, {0, 0, 0, 0}};
    char *with_clash[] = {"prog", "--timer", "cpu", NULL};
    ck_assert_int_eq(kt_peer_cmdline_parse(&cl, "ktune-test", 3, with_clash, clash, own_option,
                                           &o, no_usage), 2);
    ck_assert_ptr_null(cl.tracker);
}
END_TEST

static int h_never(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                   void *ud)
{
    (void)call;
    (void)req;
    (void)resp;
    (void)ud;
    return KT_RPC_OK;
}

START_TEST(peer_daemon_serves_its_health_and_stops)
{
    kt_peer_daemon_opts_t cl = {.listen = "127.0.0.1:0"};
    kt_peer_service_t svc = {.health_service = "Runner",
                             .role = "runner",
                             .method = "/ktune.v1.Runner/Run",
                             .req_desc = &ktune__v1__run_request__descriptor,
                             .resp_desc = &ktune__v1__run_response__descriptor,
                             .fn = h_never};
    kt_peer_daemon_t *d = kt_peer_daemon_start(&cl, &svc);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_peer_daemon_has_token(d), 0);
    /* Without --tracker there is nothing to register with. */
    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    const char *addr = NULL;
    ck_assert_int_eq(kt_peer_daemon_register(d, &me, NULL, NULL, &addr), 0);
    ck_assert_ptr_null(addr);
    kt_rpc_client_t *c = kt_rpc_client_new(kt_peer_daemon_address(d), NULL);
    ck_assert_ptr_nonnull(c);
    Ktune__V1__HealthRequest req = KTUNE__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    ck_assert_int_eq(kt_rpc_call_unary(c, "/ktune.v1.Runner/Health", &req.base,
                                       &ktune__v1__health_response__descriptor, 10000, &out,
                                       NULL),
                     0);
    Ktune__V1__HealthResponse *h = (Ktune__V1__HealthResponse *)out;
    ck_assert_str_eq(h->status, "SERVING");
    ck_assert_str_eq(h->role, "runner");
    protobuf_c_message_free_unpacked(out, NULL);
    kt_rpc_client_free(c);
    kt_peer_daemon_stop(d, 0);

    /* An unreadable token file stops the start with a message. */
    cl.token_file = "/nonexistent/ktune-token";
    ck_assert_ptr_null(kt_peer_daemon_start(&cl, &svc));
    ck_assert(strstr(kt_err_msg(), "ktune-token") != NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("tracker-side");
    tcase_add_test(tc, registry_register_assigns_ids_and_copies_descriptions);
    tcase_add_test(tc, registry_rejects_malformed_descriptions);
    tcase_add_test(tc, registry_heartbeats_keep_a_peer_alive);
    tcase_add_test(tc, registry_three_missed_intervals_drop_a_peer);
    tcase_add_test(tc, registry_accepts_old_ids_after_a_restart);
    tcase_add_test(tc, registry_queue_serves_higher_priority_first_and_fifo_within);
    tcase_add_test(tc, registry_queue_shares_runners_fairly_among_owners);
    tcase_add_test(tc, registry_leases_respect_capacity_and_release_frees_a_slot);
    tcase_add_test(tc, registry_lease_on_a_dropped_runner_is_reported);
    tcase_add_test(tc, registry_wait_blocks_until_a_runner_is_released);
    tcase_add_test(tc, registry_workers_are_leased_least_loaded_first);
    tcase_add_test(tc, registry_queue_status_lists_every_key_sorted);
    suite_add_tcase(s, tc);
    TCase *ta = tcase_create("peer-side");
    tcase_set_timeout(ta, 120);
    tcase_add_test(ta, peer_agent_registers_heartbeats_and_registers_again_when_forgotten);
    tcase_add_test(ta, peer_agent_keeps_retrying_while_the_tracker_is_down);
    tcase_add_test(ta, peer_advertise_address_replaces_only_wildcards);
    tcase_add_test(ta, peer_daemon_cmdline_parses_common_and_own_options);
    tcase_add_test(ta, peer_daemon_serves_its_health_and_stops);
    suite_add_tcase(s, ta);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
