/*
 * Child processes for the multi-process suites (service, cli): a per-suite
 * directory under /tmp made and removed by the runner process, a directory
 * per test (Check's fork mode: per test process), and daemons or CLI runs
 * started from the build root with their output in a file there.
 *
 * Included by one test file each (everything is static). Ownership: the
 * caller owns its kt_test_proc_t; kt_test_output() returns a malloc'd
 * string. Threads: call from the test's main thread; the environment of a
 * child is built before fork, because the test process may have gRPC
 * threads and the child may only call async-signal-safe functions before
 * exec.
 */
#ifndef KT_TEST_PROC_H
#define KT_TEST_PROC_H

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* How many times slower the programs of a sanitized build are (ASan and
 * UBSan, deploy/sanitize.sh; gcc says so with __SANITIZE_ADDRESS__, clang
 * with __has_feature). Intervals a test gives its daemons that a slow live
 * daemon could overrun, such as heartbeats, are multiplied by it; the waits
 * for a condition stay bounded by generous deadlines either way. */
#if defined(__SANITIZE_ADDRESS__)
#define KT_TEST_SLOW 4
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_TEST_SLOW 4
#endif
#endif
#ifndef KT_TEST_SLOW
#define KT_TEST_SLOW 1
#endif

typedef struct {
    pid_t pid;          /* 0 once reaped */
    char log[512];      /* stdout and stderr */
} kt_test_proc_t;

static char kt_test_base[64];   /* the suite's directory */
static char kt_test_dir[128];   /* this test's directory */

static int kt_test_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* The suite's directory /tmp/<prefix>XXXXXX (unchecked fixture). */
static void kt_test_suite_dir(const char *prefix)
{
    snprintf(kt_test_base, sizeof kt_test_base, "/tmp/%sXXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(kt_test_base));
}

static void kt_test_suite_dir_remove(void)
{
    nftw(kt_test_base, kt_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* This test's directory <suite>/t<pid> (checked fixture). */
static void kt_test_make_dir(void)
{
    snprintf(kt_test_dir, sizeof kt_test_dir, "%s/t%d", kt_test_base, (int)getpid());
    ck_assert_int_eq(mkdir(kt_test_dir, 0700), 0);
}

static void kt_test_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

extern char **environ;

/* Start argv[0] with argv (NULL-terminated); its output goes to <test
 * dir>/<file>, appended to (append) or truncated. The child's environment is
 * this one without the variables named in `drop` ("NAME=" prefixes,
 * NULL-terminated, may be NULL), plus `add` ("NAME=value" entries,
 * NULL-terminated, may be NULL). */
__attribute__((unused)) static void kt_test_spawn_argv(kt_test_proc_t *p, const char *file,
                                                       int append, char *const argv[],
                                                       const char *const drop[],
                                                       char *const add[])
{
    static char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n + 9 < KT_ARRAY_LEN(envp); e++) {
        int keep = 1;
        for (int d = 0; drop && drop[d] && keep; d++)
            keep = strncmp(*e, drop[d], strlen(drop[d])) != 0;
        if (keep)
            envp[n++] = *e;
    }
    for (int a = 0; add && add[a] && n + 1 < KT_ARRAY_LEN(envp); a++)
        envp[n++] = add[a];
    envp[n] = NULL;

    snprintf(p->log, sizeof p->log, "%s/%s", kt_test_dir, file);
    int fd = open(p->log, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* A failing test _exits: its daemons go with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(fd);
    p->pid = pid;
}

/* kt_test_spawn_argv of build-root binary `rel` with args (NULL-terminated). */
__attribute__((unused)) static void kt_test_spawn(kt_test_proc_t *p, const char *file,
                                                  int append, const char *rel,
                                                  char *const args[], const char *const drop[],
                                                  char *const add[])
{
    const char *root = getenv("KT_BUILD_ROOT");
    ck_assert_msg(root != NULL, "KT_BUILD_ROOT is not set");
    char bin[512];
    snprintf(bin, sizeof bin, "%s/%s", root, rel);
    char *argv[48] = {bin};
    int argc = 1;
    for (int i = 0; args[i] && argc < 47; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    kt_test_spawn_argv(p, file, append, argv, drop, add);
}

/* Wait up to ms for p to exit; 1 with its wait status in *status, or 0 after
 * killing it (SIGKILL) when it did not. */
static int kt_test_wait(kt_test_proc_t *p, int ms, int *status)
{
    int st = 0;
    for (int waited = 0;; waited += 10) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            p->pid = 0;
            *status = st;
            return 1;
        }
        if (waited >= ms)
            break;
        kt_test_sleep_ms(10);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    p->pid = 0;
    *status = st;
    return 0;
}

/* What p wrote so far (malloc'd, "" when nothing). */
static char *kt_test_output(const kt_test_proc_t *p)
{
    char *s = kt_file_read(p->log, NULL);
    return s ? s : strdup("");
}

/* A failing command's story for an assertion message, the telling part
 * first (CI shows a message's head): the lines of out that are not
 * progress tables, and the warnings and errors of log (a daemon's, may be
 * NULL), then the last 16 KiB of each whole. malloc'd. */
__attribute__((unused)) static char *kt_test_story(const char *out, const char *log)
{
    size_t no = strlen(out), nl = log ? strlen(log) : 0;
    char *s = malloc(2 * (no + nl) + 256);
    if (!s)
        return strdup("out of memory");
    size_t n = 0;
    n += (size_t)sprintf(s + n, "--- the command's own lines:\n");
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        /* table rows, rules, headers and progress bars say nothing new */
        if (len && !strchr("|-[", p[0]) && strncmp(p, "Estimated total", 15) != 0) {
            memcpy(s + n, p, len);
            n += len;
            s[n++] = '\n';
        }
        p += len + (e != NULL);
    }
    if (log) {
        n += (size_t)sprintf(s + n, "--- the daemon's warnings and errors:\n");
        for (const char *p = log; *p;) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            const char *tag = memchr(p, 'Z', len < 32 ? len : 32);
            if (tag && tag + 2 < p + len && tag[1] == ' ' && (tag[2] == 'W' || tag[2] == 'E')) {
                memcpy(s + n, p, len);
                n += len;
                s[n++] = '\n';
            }
            p += len + (e != NULL);
        }
    }
    n += (size_t)sprintf(s + n, "--- the command's output:\n%s", out + (no > 16384 ? no - 16384 : 0));
    if (log)
        n += (size_t)sprintf(s + n, "\n--- the daemon's log:\n%s", log + (nl > 16384 ? nl - 16384 : 0));
    s[n] = '\0';
    return s;
}

#endif
