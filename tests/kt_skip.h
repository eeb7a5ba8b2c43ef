/*
 * Skipped tests and missing capabilities: the one convention of every suite.
 *
 * Check has no skip status: a test that returns early passes. So a test that
 * cannot run says so through this header, and tests/ck_summary.py (run by
 * deploy/test.sh) counts it:
 *
 * - KT_SKIP_NO_GPU(fmt, ...): the ONLY allowed skip, for a machine without a
 *   GPU (no CUDA driver, or the driver reports no device). Call it in the
 *   START_TEST body itself, never in a helper (it aborts the test if it is not
 *   there), after asserting that the reason really is "no CUDA device". It
 *   prints "KT-SKIP <test>: <reason>", appends "<test>\t<reason>" to the file
 *   named by $KT_SKIP_LOG (tests/meson.build sets one per suite) and returns
 *   from the test; ck_summary.py then counts that passed test as skipped.
 *
 * - Everything else a test needs is a dependency the machine must have
 *   (deploy/install-deps.sh; the CUDA toolkit in KT_CUDA_PATH, as
 *   ARCHITECTURE.md says: NVRTC is tested everywhere): its absence fails the
 *   test (kt_fail_without_cuda() for a build configured without NVRTC, a plain
 *   ck_assert_msg for python3 modules, the openssl CLI, ...).
 *
 * Included by one test file each (everything is static).
 */
#ifndef KT_SKIP_H
#define KT_SKIP_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt_config.h"

/* The suite's process starts the skip log afresh (the tests are its forked
 * children, which do not run constructors again), so a log left by an
 * earlier run never marks a test of this one as skipped. */
__attribute__((constructor)) static void kt_skip_log_reset(void)
{
    const char *log = getenv("KT_SKIP_LOG");
    if (log && *log && truncate(log, 0) != 0 && errno != ENOENT)
        fprintf(stderr, "kt_skip: cannot empty %s: %s\n", log, strerror(errno));
}

/* Records the skip of the test whose function is `fn` (START_TEST's
 * "<test>_fn"); fails the test when it cannot be recorded. */
__attribute__((format(printf, 2, 3), unused)) static void kt_skip_record(const char *fn,
                                                                           const char *fmt, ...)
{
    size_t n = strlen(fn);
    ck_assert_msg(n > 3 && strcmp(fn + n - 3, "_fn") == 0,
                  "KT_SKIP_NO_GPU called in %s: call it in the START_TEST body", fn);
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    for (char *c = reason; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    char line[700];
    int len = snprintf(line, sizeof line, "%.*s\t%s\n", (int)(n - 3), fn, reason);
    printf("KT-SKIP %.*s: %s\n", (int)(n - 3), fn, reason);
    fflush(stdout);
    const char *log = getenv("KT_SKIP_LOG");
    if (!log || !*log)
        return;   /* run by hand: the printed line is all there is */
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "cannot record the skip in %s: %s", log, strerror(errno));
    ssize_t w = write(fd, line, (size_t)len);
    close(fd);
    ck_assert_msg(w == len, "cannot record the skip in %s", log);
}

/* Skip this test: the machine has no GPU (see above). */
#define KT_SKIP_NO_GPU(...)                       \
    do {                                          \
        kt_skip_record(__func__, __VA_ARGS__);    \
        return;                                   \
    } while (0)

/* A test that needs NVRTC in a build configured without it fails: the
 * toolkit is a dependency of the tests (install it in KT_CUDA_PATH, or do
 * not disable it with -Dcuda=disabled). */
__attribute__((unused)) static void kt_fail_without_cuda(const char *what)
{
    int have_toolkit = access(KT_CUDA_PATH "/include/nvrtc.h", R_OK) == 0;
    ck_abort_msg("built without CUDA (%s): %s", what,
                 have_toolkit ? "the toolkit is in " KT_CUDA_PATH
                                ": reconfigure the build with CUDA enabled"
                              : "install the CUDA toolkit in " KT_CUDA_PATH
                                " (NVRTC is tested on every machine)");
}

#endif
