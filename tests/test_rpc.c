/*
 * Suite "rpc": common/rpc over real sockets on 127.0.0.1, plus the Health
 * method of the three daemons and `ktune health`.
 *
 * Check runs every test in its own forked process and this file's main()
 * never touches gRPC, so each test starts with gRPC uninitialised and may
 * fork a server process first. Children get PR_SET_PDEATHSIG so that a
 * failed assertion (which _exits the test process) never leaves one behind.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_test_tls.h"

#define M_ECHO "/ktune.v1.Test/Echo"
#define M_SLEEP "/ktune.v1.Test/Sleep"
#define M_COUNT "/ktune.v1.Test/Count"
#define M_FAIL "/ktune.v1.Test/Fail"
#define M_HEALTH "/ktune.v1.Tracker/Health"

/* ---- Test handlers ------------------------------------------------------------- */

typedef struct {
    atomic_int echo_calls;
    atomic_int sleep_started;
    atomic_int sleep_saw_cancel;
    atomic_int sleep_done;
    int sleep_ms;            /* how long Sleep sleeps unless cancelled */
    int sleep_honours_cancel;
    atomic_int stream_sent;
    atomic_int stream_send_failed;
    atomic_int flaky_calls;
} ctx_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* JobProgress -> JobProgress; the response points into the request. */
static int h_echo(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *ud)
{
    (void)call;
    ctx_t *x = ud;
    atomic_fetch_add(&x->echo_calls, 1);
    const Ktune__V1__JobProgress *in = (const Ktune__V1__JobProgress *)req;
    Ktune__V1__JobProgress *out = (Ktune__V1__JobProgress *)resp;
    out->job_id = in->job_id;
    out->n_tasks = in->n_tasks;
    out->tasks = in->tasks;
    out->total_trials = in->total_trials;
    out->state = in->state;
    return KT_RPC_OK;
}

/* HealthRequest -> HealthResponse after x->sleep_ms, early if cancelled. */
static int h_sleep(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                   void *ud)
{
    (void)req;
    ctx_t *x = ud;
    atomic_store(&x->sleep_started, 1);
    double end = kt_time_mono() + x->sleep_ms / 1000.0;
    while (kt_time_mono() < end) {
        if (x->sleep_honours_cancel && kt_rpc_call_cancelled(call)) {
            atomic_store(&x->sleep_saw_cancel, 1);
            break;
        }
        sleep_ms(10);
    }
    Ktune__V1__HealthResponse *out = (Ktune__V1__HealthResponse *)resp;
    out->status = kt_rpc_call_strdup(call, "SLEPT");
    atomic_store(&x->sleep_done, 1);
    return KT_RPC_OK;
}

/* JobProgress{total_trials = N} -> N JobProgress{job_id = i}. */
static int h_count(kt_rpc_call_t *call, const ProtobufCMessage *req, void *ud)
{
    ctx_t *x = ud;
    const Ktune__V1__JobProgress *in = (const Ktune__V1__JobProgress *)req;
    for (int i = 0; i < in->total_trials; i++) {
        Ktune__V1__JobProgress m = KTUNE__V1__JOB_PROGRESS__INIT;
        m.job_id = i;
        if (kt_rpc_stream_send(call, &m.base) != 0) {
            atomic_store(&x->stream_send_failed, 1);
            return kt_err_code();
        }
        atomic_fetch_add(&x->stream_sent, 1);
    }
    return KT_RPC_OK;
}

/* JobProgress{job_id}: 1 -> INVALID_ARGUMENT with text, 2 -> KT_ENOTFOUND,
 * 3 -> UNAVAILABLE on the first call, then the request echoed. */
static int h_fail(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *ud)
{
    ctx_t *x = ud;
    const Ktune__V1__JobProgress *in = (const Ktune__V1__JobProgress *)req;
    if (in->job_id == 3 && atomic_fetch_add(&x->flaky_calls, 1) == 0)
        return kt_rpc_call_fail(call, KT_RPC_UNAVAILABLE, "the answer was lost");
    if (in->job_id == 3)
        return h_echo(call, req, resp, ud);
    if (in->job_id == 1)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "bad job %lld",
                                (long long)in->job_id);
    return kt_err_set(KT_ENOTFOUND, "no job %lld", (long long)in->job_id);
}

static kt_rpc_server_t *start_server(ctx_t *x, const kt_rpc_server_opts_t *extra)
{
    kt_rpc_server_opts_t o = {.listen = "127.0.0.1:0"};
    if (extra)
        o = *extra;
    kt_rpc_server_t *s = kt_rpc_server_new(&o);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    const ProtobufCMessageDescriptor *jp = &ktune__v1__job_progress__descriptor;
    ck_assert_int_eq(kt_rpc_server_add_unary(s, M_ECHO, jp, jp, h_echo, x), 0);
    ck_assert_int_eq(kt_rpc_server_add_unary(s, M_SLEEP, &ktune__v1__health_request__descriptor,
                                             &ktune__v1__health_response__descriptor, h_sleep, x),
                     0);
    ck_assert_int_eq(kt_rpc_server_add_stream(s, M_COUNT, jp, jp, h_count, x), 0);
    ck_assert_int_eq(kt_rpc_server_add_unary(s, M_FAIL, jp, jp, h_fail, x), 0);
    ck_assert_int_eq(kt_rpc_server_add_health(s, "Tracker", "tracker"), 0);
    ck_assert_msg(kt_rpc_server_start(s) == 0, "%s", kt_err_msg());
    ck_assert_int_gt(kt_rpc_server_port(s), 0);
    return s;
}

static kt_rpc_client_t *client_for(const kt_rpc_server_t *s, const kt_rpc_client_opts_t *o)
{
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", kt_rpc_server_port(s));
    kt_rpc_client_t *c = kt_rpc_client_new(target, o);
    ck_assert_msg(c != NULL, "%s", kt_err_msg());
    return c;
}

static int call_health(kt_rpc_client_t *c, const char *method, kt_rpc_status_t *st,
                       char *role, size_t role_size)
{
    Ktune__V1__HealthRequest req = KTUNE__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, method, &req.base, &ktune__v1__health_response__descriptor, 0,
                               &out, st);
    if (rc == 0) {
        Ktune__V1__HealthResponse *h = (Ktune__V1__HealthResponse *)out;
        ck_assert_str_eq(h->status, "SERVING");
        ck_assert_str_eq(h->version, KT_VERSION);
        if (role)
            snprintf(role, role_size, "%s", h->role);
        protobuf_c_message_free_unpacked(out, NULL);
    }
    return rc;
}

static int call_echo(kt_rpc_client_t *c, int64_t id, int64_t *got_id, kt_rpc_status_t *st)
{
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    req.job_id = id;
    ProtobufCMessage *out = NULL;
    int rc = kt_rpc_call_unary(c, M_ECHO, &req.base, &ktune__v1__job_progress__descriptor, 0,
                               &out, st);
    if (rc == 0) {
        *got_id = ((Ktune__V1__JobProgress *)out)->job_id;
        protobuf_c_message_free_unpacked(out, NULL);
    }
    return rc;
}

/* Wait (bounded) until *flag is set. */
static int wait_flag(atomic_int *flag, int ms)
{
    for (int i = 0; i < ms / 10 && !atomic_load(flag); i++)
        sleep_ms(10);
    return atomic_load(flag);
}

/* A port nothing listens on (bound, read and released). */
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

/* ---- Child processes ----------------------------------------------------------------- */

/* Reap `pid`, killing it after `ms`; returns the wait status. */
static int reap(pid_t pid, int ms)
{
    int st = 0;
    for (int i = 0; i < ms / 10; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return st;
}

/* Read from fd into buf until `needle` appears, EOF, or `ms` pass. */
static int read_until(int fd, char *buf, size_t size, const char *needle, int ms)
{
    size_t n = strlen(buf);
    double end = kt_time_mono() + ms / 1000.0;
    while (!strstr(buf, needle) && n + 1 < size) {
        int left = (int)((end - kt_time_mono()) * 1000);
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t r = read(fd, buf + n, size - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
    }
    return strstr(buf, needle) != NULL;
}

extern char **environ;

/* Start a built binary with stdout and stderr on a pipe; *out_fd reads it.
 * KT_TOKEN_FILE is set to token_file_env or removed. The environment is
 * built before fork: this process has gRPC threads, so the child may only
 * call async-signal-safe functions before exec. */
static pid_t spawn(char *const argv[], int *out_fd, const char *token_file_env)
{
    static char tok_var[4200];
    static char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n + 2 < KT_ARRAY_LEN(envp); e++)
        if (strncmp(*e, "KT_TOKEN_FILE=", 14) != 0)
            envp[n++] = *e;
    if (token_file_env) {
        snprintf(tok_var, sizeof tok_var, "KT_TOKEN_FILE=%s", token_file_env);
        envp[n++] = tok_var;
    }
    envp[n] = NULL;
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
}

static void bin_path(char *buf, size_t size, const char *rel)
{
    const char *root = getenv("KT_BUILD_ROOT");
    ck_assert_msg(root != NULL, "KT_BUILD_ROOT is not set");
    snprintf(buf, size, "%s/%s", root, rel);
}

/* Run `ktune` with args; returns its exit code and its output in out. */
static int run_cli(char *const args[], char *out, size_t size, const char *token_file_env)
{
    char bin[4096];
    bin_path(bin, sizeof bin, "cli/ktune");
    char *argv[16] = {bin};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    int fd;
    pid_t pid = spawn(argv, &fd, token_file_env);
    out[0] = '\0';
    read_until(fd, out, size, "\x01never", 20000);   /* until EOF */
    close(fd);
    int st = reap(pid, 20000);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* ---- Tests --------------------------------------------------------------------------- */

START_TEST(rpc_unary_round_trip_between_processes)
{
    int port_pipe[2], ctl_pipe[2];
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(ctl_pipe), 0);
    /* Fork before this process initialises gRPC. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(60);
        close(port_pipe[0]);
        close(ctl_pipe[1]);
        static ctx_t x;
        kt_rpc_server_opts_t o = {.listen = "127.0.0.1:0", .threads = 2};
        kt_rpc_server_t *s = kt_rpc_server_new(&o);
        if (!s || kt_rpc_server_add_health(s, "Tracker", "tracker") != 0 ||
            kt_rpc_server_add_unary(s, M_ECHO, &ktune__v1__job_progress__descriptor,
                                    &ktune__v1__job_progress__descriptor, h_echo, &x) != 0 ||
            kt_rpc_server_start(s) != 0)
            _exit(3);
        int port = kt_rpc_server_port(s);
        if (write(port_pipe[1], &port, sizeof port) != sizeof port)
            _exit(4);
        char b;
        while (read(ctl_pipe[0], &b, 1) > 0)   /* until the parent closes it */
            ;
        kt_rpc_server_stop(s, 2000);
        _exit(atomic_load(&x.echo_calls) == 1 ? 0 : 5);
    }
    close(port_pipe[1]);
    close(ctl_pipe[0]);
    int port = 0;
    struct pollfd p = {.fd = port_pipe[0], .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 20000), 1);
    ck_assert_int_eq(read(port_pipe[0], &port, sizeof port), (ssize_t)sizeof port);
    ck_assert_int_gt(port, 0);

    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    kt_rpc_client_t *c = kt_rpc_client_new(target, NULL);
    ck_assert_ptr_nonnull(c);
    kt_rpc_status_t st;
    char role[32];
    ck_assert_int_eq(call_health(c, M_HEALTH, &st, role, sizeof role), 0);
    ck_assert_int_eq(st.code, KT_RPC_OK);
    ck_assert_int_eq(st.attempts, 1);
    ck_assert_str_eq(role, "tracker");

    Ktune__V1__TaskProgress t0 = KTUNE__V1__TASK_PROGRESS__INIT, t1 = t0;
    t0.task_id = 7;
    t0.workload_key = "[\"abc\", [1, 2]]";
    t1.task_id = 8;
    t1.best_latency = 1.5e-3;
    Ktune__V1__TaskProgress *tasks[] = {&t0, &t1};
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    req.job_id = 42;
    req.n_tasks = 2;
    req.tasks = tasks;
    req.state = "running";
    ProtobufCMessage *out = NULL;
    ck_assert_int_eq(kt_rpc_call_unary(c, M_ECHO, &req.base,
                                       &ktune__v1__job_progress__descriptor, 5000, &out, &st),
                     0);
    Ktune__V1__JobProgress *jp = (Ktune__V1__JobProgress *)out;
    ck_assert_int_eq(jp->job_id, 42);
    ck_assert_str_eq(jp->state, "running");
    ck_assert_uint_eq(jp->n_tasks, 2);
    ck_assert_int_eq(jp->tasks[0]->task_id, 7);
    ck_assert_str_eq(jp->tasks[0]->workload_key, "[\"abc\", [1, 2]]");
    ck_assert_double_eq(jp->tasks[1]->best_latency, 1.5e-3);
    protobuf_c_message_free_unpacked(out, NULL);
    kt_rpc_client_free(c);

    close(ctl_pipe[1]);   /* the child stops its server and reports */
    int ws = reap(pid, 20000);
    close(port_pipe[0]);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "server child status %d", ws);
}
END_TEST

START_TEST(rpc_slow_handler_gives_deadline_exceeded)
{
    static ctx_t x;
    x.sleep_ms = 20000;
    x.sleep_honours_cancel = 1;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);
    Ktune__V1__HealthRequest req = KTUNE__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(c, M_SLEEP, &req.base, &ktune__v1__health_response__descriptor,
                               300, &out, &st);
    ck_assert_int_eq(rc, KT_ETIMEOUT);
    ck_assert_int_eq(st.code, KT_RPC_DEADLINE_EXCEEDED);
    ck_assert_int_eq(st.attempts, 1);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "DEADLINE_EXCEEDED"));
    /* The server side sees the call die and the handler can give up. */
    ck_assert(wait_flag(&x.sleep_saw_cancel, 10000));
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_missing_or_wrong_token_is_unauthenticated)
{
    static ctx_t x;
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .token = "s3cret-token"};
    kt_rpc_server_t *s = start_server(&x, &so);
    kt_rpc_status_t st;
    int64_t got = 0;

    kt_rpc_client_t *none = client_for(s, NULL);
    ck_assert_int_eq(call_echo(none, 1, &got, &st), KT_EAUTH);
    ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
    ck_assert_int_eq(call_health(none, M_HEALTH, &st, NULL, 0), KT_EAUTH);
    kt_rpc_client_free(none);

    const char *wrong[] = {"wrong", "s3cret-tokem", "s3cret-token-", "S3CRET-TOKEN"};
    for (size_t i = 0; i < KT_ARRAY_LEN(wrong); i++) {
        kt_rpc_client_opts_t co = {.token = wrong[i]};
        kt_rpc_client_t *c = client_for(s, &co);
        ck_assert_int_eq(call_echo(c, 1, &got, &st), KT_EAUTH);
        ck_assert_int_eq(st.code, KT_RPC_UNAUTHENTICATED);
        kt_rpc_client_free(c);
    }
    ck_assert_int_eq(atomic_load(&x.echo_calls), 0);   /* the handler never ran */

    kt_rpc_client_opts_t co = {.token = "s3cret-token"};
    kt_rpc_client_t *ok = client_for(s, &co);
    ck_assert_int_eq(call_echo(ok, 9, &got, &st), 0);
    ck_assert_int_eq(got, 9);
    ck_assert_int_eq(atomic_load(&x.echo_calls), 1);
    kt_rpc_client_free(ok);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_16mib_message_round_trips)
{
    static ctx_t x;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);
    enum { N = 16384, KEY = 1024 };
    char *keys = malloc((size_t)N * KEY);
    Ktune__V1__TaskProgress *t = calloc(N, sizeof *t);
    Ktune__V1__TaskProgress **tp = calloc(N, sizeof *tp);
    ck_assert(keys && t && tp);
    for (int i = 0; i < N; i++) {
        Ktune__V1__TaskProgress init = KTUNE__V1__TASK_PROGRESS__INIT;
        t[i] = init;
        t[i].task_id = i;
        char *k = keys + (size_t)i * KEY;
        memset(k, 'a' + i % 26, KEY - 1);
        k[KEY - 1] = '\0';
        t[i].workload_key = k;
        tp[i] = &t[i];
    }
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    req.job_id = 16;
    req.n_tasks = N;
    req.tasks = tp;
    ck_assert_uint_gt(protobuf_c_message_get_packed_size(&req.base), (size_t)16 << 20);
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(c, M_ECHO, &req.base, &ktune__v1__job_progress__descriptor,
                               60000, &out, &st);
    ck_assert_msg(rc == 0, "%s", kt_err_msg());
    Ktune__V1__JobProgress *jp = (Ktune__V1__JobProgress *)out;
    ck_assert_uint_eq(jp->n_tasks, N);
    for (int i = 0; i < N; i += 997) {
        ck_assert_int_eq(jp->tasks[i]->task_id, i);
        ck_assert_str_eq(jp->tasks[i]->workload_key, t[i].workload_key);
    }
    ck_assert_int_eq(jp->tasks[N - 1]->task_id, N - 1);
    protobuf_c_message_free_unpacked(out, NULL);

    /* A client limited to 1 MiB refuses to send it. */
    kt_rpc_client_opts_t small = {.max_message = 1 << 20};
    kt_rpc_client_t *c2 = client_for(s, &small);
    rc = kt_rpc_call_unary(c2, M_ECHO, &req.base, &ktune__v1__job_progress__descriptor, 60000,
                           &out, &st);
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
    kt_rpc_client_free(c2);

    free(tp);
    free(t);
    free(keys);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

/* A JobProgress whose packed size is exactly `size` bytes (its state string
 * padded); the caller frees *buf. */
static Ktune__V1__JobProgress sized_message(size_t size, char **buf)
{
    Ktune__V1__JobProgress m = KTUNE__V1__JOB_PROGRESS__INIT;
    m.job_id = 1;
    size_t len = size;
    *buf = malloc(size + 1);
    ck_assert_ptr_nonnull(*buf);
    for (int i = 0; i < 8; i++) {
        memset(*buf, 'x', len);
        (*buf)[len] = 0;
        m.state = *buf;
        size_t got = protobuf_c_message_get_packed_size(&m.base);
        if (got == size)
            return m;
        len -= got - size;
    }
    ck_abort_msg("no message of %zu bytes", size);
    return m;
}

/* KT_LIMIT_RPC_MESSAGE's mechanism: a server and a client channel both
 * refuse what is past their max_message, received or sent, with
 * RESOURCE_EXHAUSTED; a message exactly at the cap goes through. */
START_TEST(rpc_message_size_cap_both_ways)
{
    ck_assert_uint_eq(KT_RPC_DEFAULT_MAX_MESSAGE, KT_LIMIT_RPC_MESSAGE);
    ctx_t x = {0};
    const size_t cap = (size_t)1 << 20;
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .max_message = cap};
    kt_rpc_server_t *s = start_server(&x, &so);
    kt_rpc_client_opts_t big = {.max_message = 4 * cap};
    kt_rpc_client_t *c = client_for(s, &big);
    char *buf;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;

    /* At the cap: received by the server, its echo sent and received. */
    Ktune__V1__JobProgress m = sized_message(cap, &buf);
    int rc = kt_rpc_call_unary(c, M_ECHO, &m.base, &ktune__v1__job_progress__descriptor, 30000,
                               &out, &st);
    ck_assert_msg(rc == 0, "%s", kt_err_msg());
    ck_assert_uint_eq(strlen(((Ktune__V1__JobProgress *)out)->state), strlen(buf));
    protobuf_c_message_free_unpacked(out, NULL);
    free(buf);

    /* One byte past it: the server refuses to receive it. */
    m = sized_message(cap + 1, &buf);
    out = NULL;
    rc = kt_rpc_call_unary(c, M_ECHO, &m.base, &ktune__v1__job_progress__descriptor, 30000, &out,
                           &st);
    ck_assert_int_eq(rc, KT_ELIMIT);
    ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(atomic_load(&x.echo_calls), 1);

    /* A client capped at 1 MiB refuses to send it. */
    kt_rpc_client_opts_t small = {.max_message = cap};
    kt_rpc_client_t *c2 = client_for(s, &small);
    rc = kt_rpc_call_unary(c2, M_ECHO, &m.base, &ktune__v1__job_progress__descriptor, 30000,
                           &out, &st);
    ck_assert_int_eq(st.code, KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(atomic_load(&x.echo_calls), 1);
    kt_rpc_client_free(c2);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);

    /* A server of a larger cap takes the same message. */
    ctx_t y = {0};
    so.max_message = 4 * cap;
    s = start_server(&y, &so);
    c = client_for(s, &big);
    rc = kt_rpc_call_unary(c, M_ECHO, &m.base, &ktune__v1__job_progress__descriptor, 30000, &out,
                           &st);
    ck_assert_msg(rc == 0, "a server capped at 4 MiB takes 1 MiB + 1: %s", kt_err_msg());
    protobuf_c_message_free_unpacked(out, NULL);
    free(buf);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

typedef struct {
    kt_rpc_client_t *c;
    int base;
    int ok;
} worker_arg_t;

static void *echo_worker(void *p)
{
    worker_arg_t *w = p;
    for (int i = 0; i < 25; i++) {
        kt_rpc_status_t st;
        int64_t got = -1;
        if (call_echo(w->c, w->base + i, &got, &st) == 0 && got == w->base + i)
            w->ok++;
    }
    return NULL;
}

START_TEST(rpc_200_concurrent_calls_from_8_threads_are_all_answered)
{
    static ctx_t x;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);   /* one client shared by all threads */
    pthread_t tid[8];
    worker_arg_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker_arg_t){.c = c, .base = 1000 * (i + 1)};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, echo_worker, &w[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(tid[i], NULL);
        ok += w[i].ok;
    }
    ck_assert_int_eq(ok, 200);
    ck_assert_int_eq(atomic_load(&x.echo_calls), 200);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_undecodable_request_is_invalid_argument_and_server_keeps_serving)
{
    static ctx_t x;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);
    /* Field 2 (tasks) claims 16 bytes but only 2 follow. */
    static const unsigned char garbage[] = {0x12, 0x10, 'a', 'b'};
    void *resp = NULL;
    size_t len = 0;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_raw(c, M_ECHO, garbage, sizeof garbage, 5000, &resp, &len, &st);
    ck_assert_int_eq(rc, KT_EINVAL);
    ck_assert_int_eq(st.code, KT_RPC_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(st.msg, "does not decode"));
    ck_assert_ptr_null(resp);
    ck_assert_int_eq(atomic_load(&x.echo_calls), 0);

    /* The next call works, and raw bytes that do decode get a raw answer. */
    int64_t got = 0;
    ck_assert_int_eq(call_echo(c, 77, &got, &st), 0);
    ck_assert_int_eq(got, 77);
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    req.job_id = 5;
    unsigned char buf[16];
    size_t n = protobuf_c_message_pack(&req.base, buf);
    ck_assert_int_eq(kt_rpc_call_raw(c, M_ECHO, buf, n, 5000, &resp, &len, &st), 0);
    ck_assert_uint_eq(len, n);
    ck_assert_int_eq(memcmp(resp, buf, n), 0);
    free(resp);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_server_stream_delivers_n_messages_then_ok)
{
    static ctx_t x;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    req.total_trials = 5;
    kt_rpc_reader_t *r =
        kt_rpc_reader_open(c, M_COUNT, &req.base, &ktune__v1__job_progress__descriptor, 10000);
    ck_assert_ptr_nonnull(r);
    ProtobufCMessage *m;
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(kt_rpc_reader_next(r, &m), 1);
        ck_assert_int_eq(((Ktune__V1__JobProgress *)m)->job_id, i);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    ck_assert_int_eq(kt_rpc_reader_next(r, &m), 0);
    ck_assert_ptr_null(m);
    kt_rpc_status_t st;
    ck_assert_int_eq(kt_rpc_reader_close(r, &st), 0);
    ck_assert_int_eq(st.code, KT_RPC_OK);

    /* Closing a stream early cancels it: the handler's next send fails. */
    req.total_trials = 1000000;
    r = kt_rpc_reader_open(c, M_COUNT, &req.base, &ktune__v1__job_progress__descriptor, 30000);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(kt_rpc_reader_next(r, &m), 1);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    ck_assert_int_ne(kt_rpc_reader_close(r, &st), 0);
    ck_assert_int_eq(st.code, KT_RPC_CANCELLED);
    ck_assert(wait_flag(&x.stream_send_failed, 10000));
    ck_assert_int_lt(atomic_load(&x.stream_sent), 1000000);

    /* A stream to an unknown method ends at once with its status. */
    r = kt_rpc_reader_open(c, "/ktune.v1.Test/NoStream", &req.base,
                           &ktune__v1__job_progress__descriptor, 10000);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(kt_rpc_reader_next(r, &m), KT_EUNSUP);
    ck_assert_int_eq(kt_rpc_reader_close(r, &st), KT_EUNSUP);
    ck_assert_int_eq(st.code, KT_RPC_UNIMPLEMENTED);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_unknown_method_is_unimplemented)
{
    static ctx_t x;
    kt_rpc_server_t *s = start_server(&x, NULL);
    kt_rpc_client_t *c = client_for(s, NULL);
    kt_rpc_status_t st;
    ck_assert_int_eq(call_health(c, "/ktune.v1.Runner/Health", &st, NULL, 0), KT_EUNSUP);
    ck_assert_int_eq(st.code, KT_RPC_UNIMPLEMENTED);
    ck_assert_ptr_nonnull(strstr(st.msg, "/ktune.v1.Runner/Health"));
    ck_assert_int_eq(st.attempts, 1);
    /* Handler errors reach the client with their code and text. */
    Ktune__V1__JobProgress req = KTUNE__V1__JOB_PROGRESS__INIT;
    ProtobufCMessage *out = NULL;
    req.job_id = 1;
    ck_assert_int_eq(kt_rpc_call_unary(c, M_FAIL, &req.base,
                                       &ktune__v1__job_progress__descriptor, 0, &out, &st),
                     KT_EINVAL);
    ck_assert_int_eq(st.code, KT_RPC_INVALID_ARGUMENT);
    ck_assert_str_eq(st.msg, "bad job 1");
    req.job_id = 2;
    ck_assert_int_eq(kt_rpc_call_unary(c, M_FAIL, &req.base,
                                       &ktune__v1__job_progress__descriptor, 0, &out, &st),
                     KT_ENOTFOUND);
    ck_assert_int_eq(st.code, KT_RPC_NOT_FOUND);
    ck_assert_str_eq(st.msg, "no job 2");
    ck_assert_ptr_null(out);
    /* A call retried on UNAVAILABLE sends the request again, whole (before,
     * gRPC had taken the buffer's slices and the retry sent nothing). */
    req.job_id = 3;
    req.state = "sent twice";
    ck_assert_msg(kt_rpc_call_unary(c, M_FAIL, &req.base, &ktune__v1__job_progress__descriptor,
                                    0, &out, &st) == 0,
                  "%s", st.msg);
    ck_assert_int_eq(st.attempts, 2);
    ck_assert_int_eq(((Ktune__V1__JobProgress *)out)->job_id, 3);
    ck_assert_str_eq(((Ktune__V1__JobProgress *)out)->state, "sent twice");
    protobuf_c_message_free_unpacked(out, NULL);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);
}
END_TEST

START_TEST(rpc_error_codes_map_both_ways)
{
    const int kt[] = {KT_OK, KT_EINVAL, KT_ELIMIT, KT_ENOTFOUND, KT_ETIMEOUT,
                      KT_EUNAVAIL, KT_EAUTH, KT_ESTATE, KT_EINTERNAL, KT_EUNSUP};
    for (size_t i = 0; i < KT_ARRAY_LEN(kt); i++)
        ck_assert_int_eq(kt_rpc_err_from_code(kt_rpc_code_from_err(kt[i])), kt[i]);
    ck_assert_int_eq(kt_rpc_code_from_err(KT_EUNAVAIL), KT_RPC_UNAVAILABLE);
    ck_assert_int_eq(kt_rpc_code_from_err(KT_EAUTH), KT_RPC_UNAUTHENTICATED);
    ck_assert_int_eq(kt_rpc_code_from_err(KT_EIO), KT_RPC_INTERNAL);
    /* Out of memory, a limit reached and a full file system are all
     * RESOURCE_EXHAUSTED; a client reads it as the limit, the likelier
     * cause, and the message says which. */
    ck_assert_int_eq(kt_rpc_code_from_err(KT_ENOMEM), KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(kt_rpc_code_from_err(KT_EFULL), KT_RPC_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(kt_rpc_code_from_err(-999), KT_RPC_UNKNOWN);
    ck_assert_int_eq(kt_rpc_err_from_code(KT_RPC_PERMISSION_DENIED), KT_EAUTH);
    ck_assert_int_eq(kt_rpc_err_from_code(99), KT_EINTERNAL);
    ck_assert_str_eq(kt_rpc_code_name(KT_RPC_UNAVAILABLE), "UNAVAILABLE");
    ck_assert_str_eq(kt_rpc_code_name(KT_RPC_UNAUTHENTICATED), "UNAUTHENTICATED");
    ck_assert_str_eq(kt_rpc_code_name(-1), "UNKNOWN_CODE");
}
END_TEST

START_TEST(rpc_unreachable_target_is_unavailable_after_bounded_retries)
{
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", free_port());
    kt_rpc_client_opts_t co = {.retry_attempts = 3, .retry_initial_ms = 20, .retry_max_ms = 40};
    kt_rpc_client_t *c = kt_rpc_client_new(target, &co);
    ck_assert_ptr_nonnull(c);
    kt_rpc_status_t st;
    ck_assert_int_eq(call_health(c, M_HEALTH, &st, NULL, 0), KT_EUNAVAIL);
    ck_assert_int_eq(st.code, KT_RPC_UNAVAILABLE);
    ck_assert_int_eq(st.attempts, 3);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), target));
    kt_rpc_client_free(c);

    /* A server that cannot bind reports it instead of serving nothing. */
    kt_rpc_server_opts_t so = {.listen = "192.0.2.1:1"};   /* TEST-NET: not ours */
    kt_rpc_server_t *s = kt_rpc_server_new(&so);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_rpc_server_start(s), KT_EIO);
    ck_assert_int_eq(kt_rpc_server_port(s), 0);
    kt_rpc_server_stop(s, 0);
}
END_TEST

START_TEST(rpc_tls_round_trip_with_self_signed_cert)
{
    /* The openssl CLI is a test dependency (deploy/install-deps.sh). */
    ck_assert_msg(system("openssl version >/dev/null 2>&1") == 0,
                  "the openssl CLI does not run: install openssl (deploy/install-deps.sh)");
    char dir[] = "/tmp/kt_rpc_tlsXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[1024], cert[128], key[128];
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s -out %s -days 2 -subj /CN=localhost "
             "-addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1",
             key, cert);
    ck_assert_int_eq(system(cmd), 0);

    static ctx_t x;
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .tls_cert = cert, .tls_key = key,
                               .token = "tls-token"};
    kt_rpc_server_t *s = start_server(&x, &so);
    kt_rpc_client_opts_t co = {.tls_ca = cert, .token = "tls-token"};
    kt_rpc_client_t *c = client_for(s, &co);
    kt_rpc_status_t st;
    char role[32];
    ck_assert_msg(call_health(c, M_HEALTH, &st, role, sizeof role) == 0, "%s", kt_err_msg());
    ck_assert_str_eq(role, "tracker");
    int64_t got = 0;
    ck_assert_int_eq(call_echo(c, 3, &got, &st), 0);
    ck_assert_int_eq(got, 3);
    kt_rpc_client_free(c);

    /* A plaintext client cannot talk to the TLS server. */
    kt_rpc_client_opts_t plain = {.token = "tls-token", .retry_attempts = 1,
                                  .deadline_ms = 5000};
    c = client_for(s, &plain);
    ck_assert_int_ne(call_health(c, M_HEALTH, &st, NULL, 0), 0);
    ck_assert_int_ne(st.code, KT_RPC_OK);
    kt_rpc_client_free(c);
    kt_rpc_server_stop(s, 1000);

    unlink(cert);
    unlink(key);
    rmdir(dir);
}
END_TEST

/* Mutual TLS: a server with tls_client_ca refuses a client without a
 * certificate and one whose certificate another CA signed, and serves one
 * with a certificate of its CA; bad client files are refused up front. */
START_TEST(rpc_mutual_tls_needs_a_client_certificate_of_the_ca)
{
    char dir[] = "/tmp/kt_rpc_mtlsXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    kt_test_tls_ca(dir, "ca");
    kt_test_tls_ca(dir, "other-ca");
    kt_test_tls_cert(dir, "server", "ca", "IP:127.0.0.1");
    kt_test_tls_cert(dir, "client", "ca", "DNS:client");
    kt_test_tls_cert(dir, "stranger", "other-ca", "DNS:stranger");
    char f[8][160];
    const char *names[8] = {"ca.pem", "server.pem", "server.key", "client.pem",
                            "client.key", "stranger.pem", "stranger.key", "missing.pem"};
    for (int i = 0; i < 8; i++)
        snprintf(f[i], sizeof f[i], "%s/%s", dir, names[i]);
    const char *ca = f[0], *cert = f[1], *key = f[2], *ccert = f[3], *ckey = f[4];
    const char *scert = f[5], *skey = f[6], *missing = f[7];

    static ctx_t x;
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .tls_cert = cert, .tls_key = key,
                               .tls_client_ca = ca};
    kt_rpc_server_t *s = start_server(&x, &so);
    kt_rpc_status_t st;
    /* A client with a certificate of the CA is served. */
    kt_rpc_client_opts_t good = {.tls_ca = ca, .tls_cert = ccert, .tls_key = ckey};
    kt_rpc_client_t *c = client_for(s, &good);
    ck_assert_msg(call_health(c, M_HEALTH, &st, NULL, 0) == 0, "%s", kt_err_msg());
    kt_rpc_client_free(c);
    /* Without a certificate, or with one another CA signed: the handshake fails. */
    kt_rpc_client_opts_t refused[2] = {
        {.tls_ca = ca, .retry_attempts = 1, .deadline_ms = 5000},
        {.tls_ca = ca, .tls_cert = scert, .tls_key = skey, .retry_attempts = 1,
         .deadline_ms = 5000}};
    for (int i = 0; i < 2; i++) {
        c = client_for(s, &refused[i]);
        ck_assert_int_ne(call_health(c, M_HEALTH, &st, NULL, 0), 0);
        ck_assert_msg(st.code == KT_RPC_UNAVAILABLE, "client %d: %s: %s", i,
                      kt_rpc_code_name(st.code), st.msg);
        kt_rpc_client_free(c);
    }
    kt_rpc_server_stop(s, 1000);

    /* Bad files: a key that is not the certificate's, a missing file, a
     * client certificate without a CA, a client CA without TLS served. */
    kt_rpc_client_opts_t mismatch = {.tls_ca = ca, .tls_cert = ccert, .tls_key = skey};
    ck_assert_ptr_null(kt_rpc_client_new("127.0.0.1:1", &mismatch));
    ck_assert_msg(strstr(kt_err_msg(), "does not belong") && strstr(kt_err_msg(), skey), "%s",
                  kt_err_msg());
    kt_rpc_tls_files_t bad[4] = {{.cert = cert, .key = ckey},
                                 {.ca = missing, .client_cert = ccert, .client_key = ckey},
                                 {.client_cert = ccert, .client_key = ckey},
                                 {.client_ca = ca}};
    const char *why[4] = {"does not belong", "missing.pem", "needs TLS to the server",
                          "needs TLS served"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(kt_rpc_tls_check(&bad[i]), KT_EINVAL);
        ck_assert_msg(strstr(kt_err_msg(), why[i]), "case %d: %s", i, kt_err_msg());
    }
    kt_rpc_tls_files_t ok = {.cert = cert, .key = key, .client_ca = ca, .ca = ca,
                             .client_cert = ccert, .client_key = ckey};
    ck_assert_msg(kt_rpc_tls_check(&ok) == 0, "%s", kt_err_msg());
    kt_rpc_server_opts_t bad_so = {.listen = "127.0.0.1:0", .tls_cert = cert, .tls_key = skey};
    kt_rpc_server_t *bs = kt_rpc_server_new(&bad_so);
    ck_assert_ptr_nonnull(bs);
    ck_assert_int_eq(kt_rpc_server_start(bs), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "does not belong"), "%s", kt_err_msg());
    kt_rpc_server_stop(bs, 0);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

typedef struct {
    kt_rpc_client_t *c;
    int rc;
    kt_rpc_status_t st;
} sleep_arg_t;

static void *sleep_caller(void *p)
{
    sleep_arg_t *a = p;
    Ktune__V1__HealthRequest req = KTUNE__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    a->rc = kt_rpc_call_unary(a->c, M_SLEEP, &req.base, &ktune__v1__health_response__descriptor,
                              30000, &out, &a->st);
    if (out) {
        if (strcmp(((Ktune__V1__HealthResponse *)out)->status, "SLEPT") != 0)
            a->rc = -100;
        protobuf_c_message_free_unpacked(out, NULL);
    }
    return NULL;
}

START_TEST(rpc_graceful_stop_drains_in_flight_call)
{
    /* Within the drain deadline: the in-flight call completes normally. */
    static ctx_t x;
    x.sleep_ms = 500;
    kt_rpc_server_t *s = start_server(&x, NULL);
    sleep_arg_t a = {.c = client_for(s, NULL)};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, sleep_caller, &a), 0);
    ck_assert(wait_flag(&x.sleep_started, 10000));
    kt_rpc_server_stop(s, 10000);
    ck_assert(atomic_load(&x.sleep_done));
    pthread_join(t, NULL);
    ck_assert_msg(a.rc == 0, "rc %d: %s", a.rc, a.st.msg);
    kt_rpc_client_free(a.c);

    /* Past the drain deadline: the call is cancelled and the handler told. */
    static ctx_t y;
    y.sleep_ms = 60000;
    y.sleep_honours_cancel = 1;
    s = start_server(&y, NULL);
    kt_rpc_client_opts_t once = {.retry_attempts = 1};   /* see the status it got */
    sleep_arg_t b = {.c = client_for(s, &once)};
    ck_assert_int_eq(pthread_create(&t, NULL, sleep_caller, &b), 0);
    ck_assert(wait_flag(&y.sleep_started, 10000));
    kt_rpc_server_stop(s, 200);
    ck_assert(atomic_load(&y.sleep_saw_cancel));
    pthread_join(t, NULL);
    ck_assert_int_ne(b.rc, 0);
    /* gRPC ends calls cancelled by a stopping server with UNAVAILABLE. */
    ck_assert_msg(b.st.code == KT_RPC_UNAVAILABLE || b.st.code == KT_RPC_CANCELLED, "%d: %s",
                  b.st.code, b.st.msg);
    ck_assert_int_eq(b.st.attempts, 1);
    kt_rpc_client_free(b.c);
}
END_TEST

/* Start a daemon on a free port; returns its pid, *port and its output fd. */
static pid_t start_daemon(const char *rel, const char *token_file, int *port, int *fd)
{
    char bin[4096];
    bin_path(bin, sizeof bin, rel);
    char *argv[12] = {bin, "--listen", "127.0.0.1:0", NULL};
    int argc = 3;
    static char db[64];
    if (strstr(rel, "tracker")) {
        /* Its own store in /tmp and no HTTP port: nothing left in the cwd. */
        snprintf(db, sizeof db, "/tmp/kt_rpc_test_%d.db", (int)getpid());
        argv[argc++] = "--db";
        argv[argc++] = db;
        argv[argc++] = "--http";
        argv[argc++] = "off";
    }
    if (token_file) {
        argv[argc++] = "--token-file";
        argv[argc++] = (char *)token_file;
    }
    argv[argc] = NULL;
    pid_t pid = spawn(argv, fd, NULL);
    char out[4096] = "";
    ck_assert_msg(read_until(*fd, out, sizeof out, "(plaintext", 20000), "daemon said: %s", out);
    const char *at = strstr(out, "listening on 127.0.0.1:");
    ck_assert_ptr_nonnull(at);
    *port = atoi(at + strlen("listening on 127.0.0.1:"));
    ck_assert_int_gt(*port, 0);
    return pid;
}

static void stop_daemon(pid_t pid, int fd)
{
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    char out[4096] = "";
    read_until(fd, out, sizeof out, "stopped", 20000);
    close(fd);
    int ws = reap(pid, 20000);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "daemon status %d: %s", ws, out);
    char db[64];
    snprintf(db, sizeof db, "/tmp/kt_rpc_test_%d.db", (int)getpid());
    unlink(db);
    strcat(db, "-wal");
    unlink(db);
    db[strlen(db) - 4] = '\0';
    strcat(db, "-shm");
    unlink(db);
}

START_TEST(rpc_daemons_serve_health_and_stop_on_sigterm)
{
    const char *bins[] = {"tracker/ktune-tracker", "server/ktune-runner", "worker/ktune-worker"};
    const char *methods[] = {M_HEALTH, "/ktune.v1.Runner/Health", "/ktune.v1.Worker/Health"};
    const char *roles[] = {"tracker", "runner", "worker"};
    for (int i = 0; i < 3; i++) {
        int port, fd;
        pid_t pid = start_daemon(bins[i], NULL, &port, &fd);
        char target[64], role[32];
        snprintf(target, sizeof target, "127.0.0.1:%d", port);
        kt_rpc_client_t *c = kt_rpc_client_new(target, NULL);
        ck_assert_ptr_nonnull(c);
        kt_rpc_status_t st;
        ck_assert_msg(call_health(c, methods[i], &st, role, sizeof role) == 0, "%s",
                      kt_err_msg());
        ck_assert_str_eq(role, roles[i]);
        kt_rpc_client_free(c);
        char out[2048];
        /* A generous deadline: a sanitized CLI on a loaded machine starts slowly. */
        char *args[] = {"health", "--tracker", target, "--service", (char *)roles[i],
                        "--timeout", "15000", NULL};
        int rc = run_cli(args, out, sizeof out, NULL);
        ck_assert_msg(rc == 0, "ktune health exit %d: %s", rc, out);
        char want[64];
        snprintf(want, sizeof want, "SERVING (%s %s)\n", roles[i], KT_VERSION);
        ck_assert_str_eq(out, want);
        stop_daemon(pid, fd);
    }
}
END_TEST

START_TEST(rpc_cli_health_reports_unauthenticated_and_unreachable)
{
    char tok[] = "/tmp/kt_rpc_tokXXXXXX";
    int tfd = mkstemp(tok);
    ck_assert_int_ge(tfd, 0);
    ck_assert_int_eq(write(tfd, "cli-secret\n", 11), 11);
    close(tfd);
    int port, fd;
    pid_t pid = start_daemon("tracker/ktune-tracker", tok, &port, &fd);
    char target[64], out[2048];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);

    char *no_token[] = {"health", "--tracker", target, NULL};
    ck_assert_int_eq(run_cli(no_token, out, sizeof out, NULL), 1);
    ck_assert_msg(strstr(out, "UNAUTHENTICATED") != NULL, "%s", out);
    ck_assert_int_eq(run_cli(no_token, out, sizeof out, tok), 0);   /* via KT_TOKEN_FILE */
    ck_assert_str_eq(out, "SERVING (tracker " KT_VERSION ")\n");
    char *with_file[] = {"health", "--tracker", target, "--token-file", tok, NULL};
    ck_assert_int_eq(run_cli(with_file, out, sizeof out, NULL), 0);
    stop_daemon(pid, fd);
    unlink(tok);

    char dead[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", free_port());
    char *unreachable[] = {"health", "--tracker", dead, "--timeout", "3000", NULL};
    ck_assert_int_eq(run_cli(unreachable, out, sizeof out, NULL), 1);
    ck_assert_msg(strstr(out, dead) != NULL, "%s", out);
    char *bad_usage[] = {"health", NULL};
    ck_assert_int_eq(run_cli(bad_usage, out, sizeof out, NULL), 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rpc_unary_round_trip_between_processes);
    tcase_add_test(tc, rpc_slow_handler_gives_deadline_exceeded);
    tcase_add_test(tc, rpc_missing_or_wrong_token_is_unauthenticated);
    tcase_add_test(tc, rpc_16mib_message_round_trips);
    tcase_add_test(tc, rpc_message_size_cap_both_ways);
    tcase_add_test(tc, rpc_200_concurrent_calls_from_8_threads_are_all_answered);
    tcase_add_test(tc, rpc_undecodable_request_is_invalid_argument_and_server_keeps_serving);
    tcase_add_test(tc, rpc_server_stream_delivers_n_messages_then_ok);
    tcase_add_test(tc, rpc_unknown_method_is_unimplemented);
    tcase_add_test(tc, rpc_error_codes_map_both_ways);
    tcase_add_test(tc, rpc_unreachable_target_is_unavailable_after_bounded_retries);
    tcase_add_test(tc, rpc_tls_round_trip_with_self_signed_cert);
    tcase_add_test(tc, rpc_mutual_tls_needs_a_client_certificate_of_the_ca);
    tcase_add_test(tc, rpc_graceful_stop_drains_in_flight_call);
    tcase_add_test(tc, rpc_daemons_serve_health_and_stop_on_sigterm);
    tcase_add_test(tc, rpc_cli_health_reports_unauthenticated_and_unreachable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* Every test in a fresh process: gRPC state never crosses a fork. */
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
