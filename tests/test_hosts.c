/*
 * Suite "hosts": a tracker and two "hosts" of runners and workers, each in
 * its own network namespace with its own address, joined by veth links, with
 * the token and TLS on: what docs/deploy.md's two-host walk-through does,
 * in one test, including a host whose link is cut in the middle of a job.
 *
 * Topology (addresses from 198.18.0.0/15 only, no bridge, no route out):
 *
 *   kthosts-tr (tracker 198.18.1.1 on lo, ktune CLI)
 *     kthosts-t1 198.18.0.1/30 ---- kthosts-p1 198.18.0.2/30  kthosts-h1: worker, 2 runners
 *     kthosts-t2 198.18.0.5/30 ---- kthosts-p2 198.18.0.6/30  kthosts-h2: worker, 2 runners
 *
 * The tracker's service address sits on its loopback so that both hosts
 * reach one address (one certificate SAN) by a route via their link. Every
 * daemon runs under `ip netns exec NS`, which execs the daemon in place, so
 * the pid we hold and PR_SET_PDEATHSIG are the daemon's own.
 *
 * Namespaces are kernel state that outlives the test process: everything
 * named kthosts-* is removed before the test (leftovers of a killed run)
 * and by the runner process after it, whether it passed or not.
 *
 * Needs root (CAP_SYS_ADMIN for `ip netns add`), iproute2 and the openssl
 * CLI; their absence fails the test (tests/kt_skip.h: only a missing GPU
 * skips).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_test_proc.h"
#include "kt_test_tls.h"

#define NS_TR "kthosts-tr"
#define TRACKER_IP "198.18.1.1"
#define TRACKER "198.18.1.1:9190"
/* A peer silent for 3 heartbeats is dropped: a live one must never be. */
#define HB_MS (KT_TEST_SLOW > 1 ? "2000" : "500")
#define WAIT_MS (60000 * KT_TEST_SLOW)

static const char *const HOST_NS[2] = {"kthosts-h1", "kthosts-h2"};
static const char *const HOST_IP[2] = {"198.18.0.2", "198.18.0.6"};
static const char *const TR_IP[2] = {"198.18.0.1", "198.18.0.5"};
static const char *const TR_DEV[2] = {"kthosts-t1", "kthosts-t2"};
static const char *const HOST_DEV[2] = {"kthosts-p1", "kthosts-p2"};

/* A workload small enough that 64 candidates build in seconds. */
static const char *WORKLOAD = "{\"op\":\"matmul\",\"M\":16,\"N\":16,\"K\":16}";
static const char *WORKLOAD2 = "{\"op\":\"matmul\",\"M\":8,\"N\":32,\"K\":16}";
static const char *WORKLOAD3 = "{\"op\":\"dense\",\"M\":8,\"N\":16,\"K\":32}";

#define MAX_PROCS 16
static kt_test_proc_t procs[MAX_PROCS];
static int n_procs;

/* ---- Shell --------------------------------------------------------------------------- */

/* Run a shell command; its exit status (-1 when it did not exit). */
__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(NULL);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define SH_OK(...) ck_assert_msg(sh(__VA_ARGS__) == 0, "failed: " __VA_ARGS__)

/* Remove every namespace and link named kthosts-*: the processes left in a
 * namespace (ours, from a run that was killed) first, so the namespace and
 * its veth ends really go away. Never fails: there may be nothing. */
static void net_cleanup(void)
{
    sh("for n in $(ip netns list 2>/dev/null | awk '/^kthosts-/{print $1}'); do "
       "  for p in $(ip netns pids $n 2>/dev/null); do kill -9 $p 2>/dev/null; done; "
       "  ip netns del $n 2>/dev/null; done; "
       "for l in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^kthosts-/{sub(/@.*/, \"\", $2); "
       "print $2}'); do ip link del $l 2>/dev/null; done; true");
}

static void net_setup(void)
{
    net_cleanup();
    /* The one capability this suite needs: say so plainly when it is missing. */
    ck_assert_msg(sh("ip netns add " NS_TR " 2>%s/netns.err", kt_test_dir) == 0,
                  "ip netns add failed (needs root with CAP_SYS_ADMIN): see %s/netns.err",
                  kt_test_dir);
    SH_OK("ip -n " NS_TR " link set lo up && ip -n " NS_TR " addr add " TRACKER_IP
          "/32 dev lo");
    for (int h = 0; h < 2; h++) {
        SH_OK("ip netns add %s && ip -n %s link set lo up", HOST_NS[h], HOST_NS[h]);
        SH_OK("ip link add %s type veth peer name %s && ip link set %s netns %s && "
              "ip link set %s netns %s",
              TR_DEV[h], HOST_DEV[h], TR_DEV[h], NS_TR, HOST_DEV[h], HOST_NS[h]);
        SH_OK("ip -n %s addr add %s/30 dev %s && ip -n %s link set %s up", NS_TR, TR_IP[h],
              TR_DEV[h], NS_TR, TR_DEV[h]);
        SH_OK("ip -n %s addr add %s/30 dev %s && ip -n %s link set %s up && "
              "ip -n %s route add " TRACKER_IP "/32 via %s",
              HOST_NS[h], HOST_IP[h], HOST_DEV[h], HOST_NS[h], HOST_DEV[h], HOST_NS[h],
              TR_IP[h]);
    }
}

/* A private CA; the tracker's certificate for 198.18.1.1 and one per host
 * for its address (the tracker verifies runners and workers when it dials
 * them back). */
static void make_certs(void)
{
    kt_test_tls_ca(kt_test_dir, "ca");
    const char *names[3] = {"tracker", "host1", "host2"};
    const char *ips[3] = {TRACKER_IP, HOST_IP[0], HOST_IP[1]};
    for (int i = 0; i < 3; i++) {
        char san[64];
        snprintf(san, sizeof san, "IP:%s", ips[i]);
        kt_test_tls_cert(kt_test_dir, names[i], "ca", san);
    }
    /* A second CA that signed nothing here: a client trusting it must be refused. */
    kt_test_tls_ca(kt_test_dir, "other-ca");
    SH_OK("cd %s && head -c 32 /dev/urandom | base64 > token && chmod 600 token", kt_test_dir);
}

/* ---- Processes ---------------------------------------------------------------------- */

static char *path_in(const char *name)
{
    static char bufs[8][256];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", kt_test_dir, name);
    return b;
}

/* iproute2's ip, found before any fork (the child only execs). */
static const char *ip_path(void)
{
    static const char *const cands[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    for (size_t i = 0; i < KT_ARRAY_LEN(cands); i++)
        if (access(cands[i], X_OK) == 0)
            return cands[i];
    ck_abort_msg("iproute2's ip is not installed");
    return NULL;
}

/* Start build-root binary `rel` with args inside namespace ns (`ip netns
 * exec` execs it in place: the pid is the daemon's); its output goes to
 * <test dir>/<name>.log, at log level info, with no KT_TOKEN_FILE. */
static kt_test_proc_t *spawn_in(const char *ns, const char *name, const char *rel,
                                char *const args[])
{
    ck_assert_int_lt(n_procs, MAX_PROCS);
    kt_test_proc_t *p = &procs[n_procs++];
    static char bin[512];
    snprintf(bin, sizeof bin, "%s/%s", getenv("KT_BUILD_ROOT"), rel);
    char *argv[48] = {(char *)ip_path(), "netns", "exec", (char *)ns, bin};
    int n = 5;
    for (int i = 0; args[i] && n < 47; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    static const char *const drop[] = {"KT_TOKEN_FILE=", "KT_LOG_LEVEL=", NULL};
    static char *const add[] = {"KT_LOG_LEVEL=info", NULL};
    char file[96];
    snprintf(file, sizeof file, "%s.log", name);
    kt_test_spawn_argv(p, file, 1, argv, drop, add);
    return p;
}

static kt_test_proc_t *start_host(int h)
{
    char cert[16], key[16];
    snprintf(cert, sizeof cert, "host%d.pem", h + 1);
    snprintf(key, sizeof key, "host%d.key", h + 1);
    kt_test_proc_t *first = NULL;
    for (int r = 0; r < 2; r++) {
        char listen[64], name[32];
        snprintf(listen, sizeof listen, "%s:%d", HOST_IP[h], 9200 + r);
        snprintf(name, sizeof name, "h%d-runner%d", h + 1, r + 1);
        char *args[] = {"--tracker", TRACKER, "--listen", listen, "--key", "cpu-test",
                        "--threads", "1", "--timer", "cpu", "--token-file", path_in("token"),
                        "--tls-cert", path_in(cert), "--tls-key", path_in(key),
                        "--tls-ca", path_in("ca.pem"), NULL};
        kt_test_proc_t *p = spawn_in(HOST_NS[h], name, "server/ktune-runner", args);
        if (!first)
            first = p;
    }
    char listen[64], name[32];
    snprintf(listen, sizeof listen, "%s:9300", HOST_IP[h]);
    snprintf(name, sizeof name, "h%d-worker", h + 1);
    char *args[] = {"--tracker", TRACKER, "--listen", listen, "--jobs", "1",
                    "--token-file", path_in("token"), "--tls-cert", path_in(cert),
                    "--tls-key", path_in(key), "--tls-ca", path_in("ca.pem"), NULL};
    spawn_in(HOST_NS[h], name, "worker/ktune-worker", args);
    return first;   /* runners are procs[first..first+1] */
}

static char *log_of(const kt_test_proc_t *p) { return kt_test_output(p); }

static int log_count(const kt_test_proc_t *p, const char *needle)
{
    char *s = log_of(p);
    int n = 0;
    for (const char *q = s; (q = strstr(q, needle)); q += strlen(needle))
        n++;
    free(s);
    return n;
}

static int wait_log_count(const kt_test_proc_t *p, const char *needle, int at_least, int ms)
{
    for (int waited = 0;; waited += 50) {
        if (log_count(p, needle) >= at_least)
            return 1;
        if (waited >= ms)
            return 0;
        kt_test_sleep_ms(50);
    }
}

/* Run `ktune` in the tracker's namespace against the tracker, trusting CA
 * file `ca`; its exit code and output (caller frees). */
static int cli_ca(char **out, int ms, char *const args[], const char *ca)
{
    static int runs;
    char name[32];
    snprintf(name, sizeof name, "cli%d", runs++);
    char *a[40];
    int n = 0;
    for (int i = 0; args[i] && n < 32; i++)
        a[n++] = args[i];
    char *conn[] = {"--tracker", TRACKER, "--token-file", path_in("token"),
                    "--tls-ca", path_in(ca), NULL};
    for (int i = 0; conn[i]; i++)
        a[n++] = conn[i];
    a[n] = NULL;
    kt_test_proc_t *p = spawn_in(NS_TR, name, "cli/ktune", a);
    int st = 0;
    int exited = kt_test_wait(p, ms, &st);
    *out = log_of(p);
    n_procs--;   /* reaped: the slot is free again */
    return exited && WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int cli(char **out, int ms, char *const args[]) { return cli_ca(out, ms, args, "ca.pem"); }

/* Peers registered with the tracker, by role, from `ktune queue --json`. */
static int count_peers(const char *role, const char *address_prefix)
{
    char *out = NULL;
    char *args[] = {"queue", "--json", NULL};
    int rc = cli(&out, 20000, args);
    int n = -1;
    json_t *j = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    if (j) {
        n = 0;
        json_t *peers = json_object_get(j, "peers"), *p;
        size_t i;
        json_array_foreach(peers, i, p) {
            const char *r = json_string_value(json_object_get(p, "role"));
            const char *a = json_string_value(json_object_get(p, "address"));
            n += r && a && strcmp(r, role) == 0 &&
                 strncmp(a, address_prefix, strlen(address_prefix)) == 0;
        }
        json_decref(j);
    }
    free(out);
    return n;
}

static int wait_peers(const char *role, const char *prefix, int want, int ms)
{
    int n = -1;
    for (int waited = 0; waited <= ms; waited += 250) {
        if ((n = count_peers(role, prefix)) == want)
            return 1;
        kt_test_sleep_ms(250);
    }
    ck_abort_msg("%d %s(s) at %s*, not %d", n, role, prefix, want);
    return 0;
}

/* Submit a job of `trials` (per round `per_round`) on key cpu-test; its id. */
static int64_t submit(const char *workload, int trials, int per_round, int min_repeat_ms)
{
    char tr[16], pr[16], mr[16];
    snprintf(tr, sizeof tr, "%d", trials);
    snprintf(pr, sizeof pr, "%d", per_round);
    snprintf(mr, sizeof mr, "%d", min_repeat_ms);
    char *args[] = {"submit", "--workload", (char *)workload, "--trials", tr, "--per-round", pr,
                    "--key", "cpu-test", "--policy", "sketch.random", "--number", "2",
                    "--repeat", "1", "--min-repeat-ms", mr, "--run-timeout-ms", "5000",
                    "--seed", "1", NULL};
    char *out = NULL;
    int rc = cli(&out, 30000, args);
    ck_assert_msg(rc == 0, "ktune submit: %d: %s", rc, out);
    int64_t id = strtoll(out, NULL, 10);
    ck_assert_msg(id > 0, "ktune submit printed %s", out);
    free(out);
    return id;
}

/* `ktune watch ID` to the job's end: it must end done. */
static void watch_done(int64_t id, int ms)
{
    char ids[24];
    snprintf(ids, sizeof ids, "%" PRId64, id);
    char *args[] = {"watch", ids, NULL};
    char *out = NULL;
    int rc = cli(&out, ms, args);
    ck_assert_msg(rc == 0, "ktune watch %s: %d: %s", ids, rc, out);
    free(out);
    char *sargs[] = {"status", ids, "--json", NULL};
    rc = cli(&out, 20000, sargs);
    ck_assert_msg(rc == 0, "ktune status: %s", out);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_msg(j != NULL, "%s", out);
    json_t *job = json_object_get(j, "job") ? json_object_get(j, "job") : j;
    ck_assert_str_eq(json_string_value(json_object_get(job, "state")), "done");
    json_decref(j);
    free(out);
}

/* The job's records in the tracker's store: the count, and how many states
 * were stored more than once. */
static void job_records(int64_t id, int64_t *n, int *dups)
{
    kt_store_t *s = kt_store_open(path_in("ktune.db"), 0);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_store_filter_t f = {.job_id = id};
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, &f, &l), 0);
    *n = (int64_t)l->n;
    *dups = 0;
    for (size_t i = 0; i < l->n; i++)
        for (size_t k = i + 1; k < l->n; k++)
            *dups += l->items[i].state_hash == l->items[k].state_hash &&
                     strcmp(l->items[i].workload_key, l->items[k].workload_key) == 0;
    kt_record_list_free(l);
    kt_store_close(s);
}

/* Batches the two runners of host h have started ("run: batch of N
 * candidates from ..."). */
static int host_batches(kt_test_proc_t *const runners[2])
{
    return log_count(runners[0], "candidates from") + log_count(runners[1], "candidates from");
}

/* ---- Fixtures -------------------------------------------------------------------------- */

static void suite_setup(void) { kt_test_suite_dir("kt_hosts_"); }

static void suite_teardown(void)
{
    /* The runner process: runs whether the test passed, failed or timed out
     * (its daemons died with it, PR_SET_PDEATHSIG). */
    net_cleanup();
    kt_test_suite_dir_remove();
}

static void test_setup(void)
{
    kt_test_make_dir();
    n_procs = 0;
}

static void stop_all(void)
{
    for (int i = 0; i < n_procs; i++)
        if (procs[i].pid > 0)
            kill(procs[i].pid, SIGTERM);
    for (int i = 0; i < n_procs; i++) {
        if (procs[i].pid <= 0)
            continue;
        int st = 0;
        kt_test_wait(&procs[i], 30000, &st);
    }
    n_procs = 0;
}

/* ---- Test -------------------------------------------------------------------------------- */

START_TEST(hosts_job_spans_two_hosts_and_survives_a_cut_link)
{
    net_setup();
    make_certs();

    char *targs[] = {"--listen", TRACKER, "--http", "off", "--heartbeat-ms", HB_MS,
                     "--db", path_in("ktune.db"), "--token-file", path_in("token"),
                     "--tls-cert", path_in("tracker.pem"), "--tls-key", path_in("tracker.key"),
                     "--tls-ca", path_in("ca.pem"), NULL};
    kt_test_proc_t *tr = spawn_in(NS_TR, "tracker", "tracker/ktune-tracker", targs);
    ck_assert_msg(wait_log_count(tr, "listening on " TRACKER, 1, WAIT_MS), "tracker: %s",
                  log_of(tr));
    kt_test_proc_t *runners[2][2];
    for (int h = 0; h < 2; h++) {
        kt_test_proc_t *first = start_host(h);
        runners[h][0] = first;
        runners[h][1] = first + 1;
    }
    /* Each host's two runners and worker registered under their own address
     * (over TLS, with the token). */
    for (int h = 0; h < 2; h++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s:", HOST_IP[h]);
        wait_peers("runner", prefix, 2, WAIT_MS);
        wait_peers("worker", prefix, 1, WAIT_MS);
    }

    /* 1. A job runs to done with candidates measured on both hosts. */
    int64_t job1 = submit(WORKLOAD, 64, 16, 0);
    watch_done(job1, 120000);
    /* A client trusting another CA is refused by TLS, token or not. */
    char *out = NULL;
    char *st_args[] = {"status", NULL};
    ck_assert_int_eq(cli_ca(&out, 20000, st_args, "other-ca.pem"), 1);
    ck_assert_msg(strstr(out, "cannot reach") || strstr(out, "UNAVAILABLE") ||
                      strstr(out, "certificate") || strstr(out, "handshake"),
                  "%s", out);
    free(out);
    int64_t n = 0;
    int dups = 0;
    job_records(job1, &n, &dups);
    ck_assert_int_eq(n, 64);
    ck_assert_int_eq(dups, 0);
    int b1[2];
    for (int h = 0; h < 2; h++) {
        b1[h] = host_batches(runners[h]);
        ck_assert_msg(b1[h] > 0, "host %d measured nothing", h + 1);
    }

    /* 2. Host 2's link is cut while its runners measure the next job. Slow
     * candidates (min-repeat 200 ms: a batch of 4 lasts close to a second)
     * keep the batches running long enough to be cut on a busy machine. */
    int64_t job2 = submit(WORKLOAD2, 64, 16, 200);
    int cut = 0;
    for (int waited = 0; waited < WAIT_MS && !cut; waited += 20) {
        cut = host_batches(runners[1]) > b1[1];
        if (!cut)
            kt_test_sleep_ms(20);
    }
    ck_assert_msg(cut, "host 2 never got a batch of job 2");
    SH_OK("ip -n " NS_TR " link set %s down", TR_DEV[1]);
    /* Its two runners and its worker are declared lost after the heartbeat
     * timeout; what they held is re-queued on host 1. */
    ck_assert_msg(wait_log_count(tr, "dropped runner", 2, WAIT_MS), "%s", log_of(tr));
    ck_assert_msg(wait_log_count(tr, "dropped worker", 1, WAIT_MS), "%s", log_of(tr));
    /* The Run calls still waiting on host 2 (its answers cannot come back)
     * are cancelled with the drop and their parts re-queued at once, not
     * after the calls' deadline (60 s here: 5 x (5 s + 1 s) + 30 s). */
    ck_assert_msg(wait_log_count(tr, "re-queued", 1, 20000),
                  "the lost runners' batches were not re-queued: %s", log_of(tr));
    watch_done(job2, 150000);
    job_records(job2, &n, &dups);
    ck_assert_int_eq(n, 64);
    ck_assert_int_eq(dups, 0);
    ck_assert_int_eq(count_peers("runner", "198.18.0.6:"), 0);

    /* 3. The link comes back: host 2's peers register again and measure. */
    SH_OK("ip -n " NS_TR " link set %s up", TR_DEV[1]);
    wait_peers("runner", "198.18.0.6:", 2, WAIT_MS);
    wait_peers("worker", "198.18.0.6:", 1, WAIT_MS);
    int b2 = host_batches(runners[1]);
    int64_t job3 = submit(WORKLOAD3, 32, 16, 0);
    watch_done(job3, 120000);
    job_records(job3, &n, &dups);
    ck_assert_int_eq(n, 32);
    ck_assert_int_eq(dups, 0);
    ck_assert_msg(host_batches(runners[1]) > b2, "host 2 got no work after the link came back");
    stop_all();
    net_cleanup();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hosts");
    TCase *tc = tcase_create("hosts");
    tcase_set_timeout(tc, 400);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, hosts_job_spans_two_hosts_and_survives_a_cut_link);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
