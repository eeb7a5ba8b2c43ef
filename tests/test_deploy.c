/*
 * Suite deploy: the systemd units (deploy/systemd) and Kubernetes manifests
 * (deploy/k8s) are checked by deploy/check-deploy.py, run here as a child
 * process: the shipped files must pass (systemd-analyze verify against this
 * build's daemons included) with the key fields the daemons need, and copies
 * broken one way at a time must fail with a message naming the breakage, so
 * that the checker itself is known to look. The documents' links
 * (README.md and the pages of docs/) are checked the same way by check-docs.py:
 * they must stay inside the repository, since a clone has nothing beside it.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt_test_proc.h"

/* This suite runs no daemon: the helpers it does not use are still referenced,
 * so that -Werror does not stop at the header's unused statics. */
static void (*const kt_unused_helpers[])(void) = {
    (void (*)(void))kt_test_spawn, (void (*)(void))kt_test_wait,
    (void (*)(void))kt_test_output, (void (*)(void))kt_test_sleep_ms};

/* Debian's interpreter first: python3-yaml is installed for it (install-deps.sh). */
static const char *python(void)
{
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static const char *src_root(void)
{
    const char *s = getenv("KT_SOURCE_ROOT");
    ck_assert_msg(s != NULL, "KT_SOURCE_ROOT is not set");
    return s;
}

/* Run deploy/<name> with args (NULL-terminated); its exit code (-1: no
 * normal exit) and, in *out, its stdout+stderr (malloc'd). */
static int run_script(const char *name, char **out, const char *const *args)
{
    char script[600], log[300];
    snprintf(script, sizeof script, "%s/deploy/%s", src_root(), name);
    snprintf(log, sizeof log, "%s/checker.log", kt_test_dir);
    const char *argv[32] = {python(), script};
    int n = 2;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(1, 2) < 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    char *s = kt_file_read(log, NULL);
    *out = s ? s : strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_checker(char **out, const char *const *args)
{
    return run_script("check-deploy.py", out, args);
}

static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    return system(cmd);
}

/* ---- systemd ---------------------------------------------------------------------------------- */

static char bin_tracker[600], bin_runner[600], bin_worker[600];

static const char *const *systemd_args(const char *unit_dir)
{
    const char *b = getenv("KT_BUILD_ROOT");
    ck_assert_msg(b != NULL, "KT_BUILD_ROOT is not set");
    snprintf(bin_tracker, sizeof bin_tracker, "ktune-tracker=%s/tracker/ktune-tracker", b);
    snprintf(bin_runner, sizeof bin_runner, "ktune-runner=%s/server/ktune-runner", b);
    snprintf(bin_worker, sizeof bin_worker, "ktune-worker=%s/worker/ktune-worker", b);
    static const char *args[10];
    const char *a[] = {"systemd", unit_dir,   "--bin",   bin_tracker, "--bin",
                       bin_runner, "--bin", bin_worker, NULL};
    memcpy(args, a, sizeof a);
    return args;
}

/* A copy of deploy/systemd in this test's directory. */
static void copy_units(char *dst, size_t n)
{
    snprintf(dst, n, "%s/systemd", kt_test_dir);
    char from[600];
    snprintf(from, sizeof from, "%s/deploy/systemd", src_root());
    ck_assert_int_eq(sh("cp -r '%s' '%s'", from, dst), 0);
}

START_TEST(systemd_units_pass_verify_with_token_credential_and_store)
{
    kt_test_make_dir();
    ck_assert_msg(system("systemd-analyze --version >/dev/null 2>&1") == 0,
                  "systemd-analyze does not run: apt-get install systemd (deploy/install-deps.sh)");
    char dir[600], *out;
    snprintf(dir, sizeof dir, "%s/deploy/systemd", src_root());
    int rc = run_checker(&out, systemd_args(dir));
    ck_assert_msg(rc == 0, "check-deploy.py systemd exited %d:\n%s", rc, out);
    /* The template is verified through a GPU and a CPU instance. */
    ck_assert_msg(strstr(out, "ok systemd-analyze verify ktune-runner@cuda0.service "
                              "ktune-runner@cpu.service ktune-tracker.service "
                              "ktune-worker.service"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok unit ktune-tracker.service daemon=ktune-tracker "
                              "token=%d/ktune-token db=%S/ktune/ktune.db"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok unit ktune-runner@.service daemon=ktune-runner "
                              "token=%d/ktune-token key=${KT_RUNNER_KEY} "
                              "device=${KT_RUNNER_DEVICE}"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok unit ktune-worker.service daemon=ktune-worker "
                              "token=%d/ktune-token"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok drop-in ktune-tracker.service.d/tls.conf sets KT_TRACKER_ARGS"),
                  "%s", out);
    free(out);
}
END_TEST

/* Each breakage: a shell edit of the copy ('%s' is the copy's directory) and
 * what the checker must say. */
static const struct {
    const char *edit, *says;
} unit_breaks[] = {
    {"sed -i '/^ProtectSystem=/d' %s/ktune-tracker.service", "ProtectSystem=strict missing"},
    {"sed -i 's/^PrivateTmp=yes/PrivateTmp=no/' %s/ktune-worker.service",
     "PrivateTmp=yes missing"},
    {"sed -i 's/^LoadCredential=ktune-token:/LoadCredential=other:/' %s/ktune-runner@.service",
     "token credential 'ktune-token' is not loaded"},
    {"sed -i '/^Environment=KT_TOKEN_FILE/d' %s/ktune-worker.service", "gets no token file"},
    {"sed -i 's/--db %%S\\/ktune\\//--db \\/var\\/tmp\\//' %s/ktune-tracker.service",
     "is not in the state directory"},
    /* systemd-analyze itself: it only warns about these and exits 0. */
    {"sed -i 's/^ProtectClock=yes/ProtectClok=yes/' %s/ktune-tracker.service",
     "Unknown key 'ProtectClok'"},
    {"echo 'RestrictBogus=yes' >> %s/tls/ktune-runner@.service.d/tls.conf",
     "Unknown key 'RestrictBogus'"},
    {"sed -i 's#/usr/local/bin/ktune-worker #/usr/local/bin/ktune-wrker #' %s/ktune-worker.service",
     "is not executable"},
};

START_TEST(systemd_checker_rejects_broken_units)
{
    kt_test_make_dir();
    char dir[600], *out;
    copy_units(dir, sizeof dir);
    char pristine[700];
    snprintf(pristine, sizeof pristine, "%s.orig", dir);
    ck_assert_int_eq(sh("cp -r '%s' '%s'", dir, pristine), 0);
    for (size_t i = 0; i < sizeof unit_breaks / sizeof unit_breaks[0]; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, pristine, dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(cmd, sizeof cmd, unit_breaks[i].edit, dir);
        ck_assert_int_eq(system(cmd), 0);
        int rc = run_checker(&out, systemd_args(dir));
        ck_assert_msg(rc == 1 && strstr(out, unit_breaks[i].says),
                      "after `%s` the checker exited %d without \"%s\":\n%s", cmd, rc,
                      unit_breaks[i].says, out);
        free(out);
    }
}
END_TEST

/* ---- Kubernetes ------------------------------------------------------------------------------- */

START_TEST(k8s_manifests_carry_what_the_daemons_need)
{
    kt_test_make_dir();
    char dir[600], *out;
    snprintf(dir, sizeof dir, "%s/deploy/k8s", src_root());
    const char *args[] = {"k8s", dir, NULL};
    int rc = run_checker(&out, args);
    ck_assert_msg(rc == 0, "check-deploy.py k8s exited %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "ok StatefulSet/ktune-tracker db=/var/lib/ktune/ktune.db "
                              "claim=store token=/etc/ktune/token/token "
                              "service=ktune-tracker ports=9190,9191"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok DaemonSet/ktune-runner-cuda-sm90 tracker=ktune-tracker:9190 "
                              "key=$(KT_RUNNER_KEY) device=cuda:0 "
                              "token=/etc/ktune/token/token gpu=1 port=9200"),
                  "%s", out);
    ck_assert_msg(strstr(out, "ok Deployment/ktune-worker tracker=ktune-tracker:9190 "
                              "token=/etc/ktune/token/token port=9300"),
                  "%s", out);
    free(out);
}
END_TEST

static const struct {
    const char *edit, *says;
} k8s_breaks[] = {
    {"sed -i 's/nvidia.com\\/gpu: 1/nvidia.com\\/gpu: 2/' %s/runner.yaml",
     "nvidia.com/gpu is 2, want 1"},
    {"sed -i '/nvidia.com\\/gpu: 1/d; /^ *limits:$/d' %s/runner.yaml",
     "nvidia.com/gpu is None, want 1"},
    {"sed -i 's#mountPath: /etc/ktune/token,#mountPath: /etc/ktune/secret,#' %s/runner.yaml",
     "is not under any volume mount"},
    {"sed -i 's#--token-file=/etc/ktune/token/token#--token-file=/etc/ktune/token/tok#' "
     "%s/worker.yaml",
     "names key 'tok'"},
    {"sed -i '/--key=/d' %s/runner.yaml", "no --key"},
    {"sed -i 's/--device=cuda:0/--device=gpu0/' %s/runner.yaml", "is not cpu or cuda:N"},
    {"sed -i '/- --tracker=/d' %s/runner.yaml", "is not the tracker Service"},
    {"sed -i '/name: http, port: 9191/d' %s/tracker.yaml", "port 9191 missing"},
    {"sed -i '/volumeClaimTemplates:/,$d' %s/tracker.yaml", "no volumeClaimTemplates"},
    {"sed -i '/name: KT_POD_IP/,+1d' %s/runner.yaml", "which the container's env lacks"},
    {"echo '  bad: [unclosed' >> %s/worker.yaml", "worker.yaml:"},
};

START_TEST(k8s_checker_rejects_broken_manifests)
{
    kt_test_make_dir();
    char dir[600], pristine[600], cmd[4096], *out;
    snprintf(dir, sizeof dir, "%s/k8s", kt_test_dir);
    snprintf(pristine, sizeof pristine, "%s/deploy/k8s", src_root());
    const char *args[] = {"k8s", dir, NULL};
    for (size_t i = 0; i < sizeof k8s_breaks / sizeof k8s_breaks[0]; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, pristine, dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(cmd, sizeof cmd, k8s_breaks[i].edit, dir);
        ck_assert_int_eq(system(cmd), 0);
        int rc = run_checker(&out, args);
        ck_assert_msg(rc == 1 && strstr(out, k8s_breaks[i].says),
                      "after `%s` the checker exited %d without \"%s\":\n%s", cmd, rc,
                      k8s_breaks[i].says, out);
        free(out);
    }
}
END_TEST

/* ---- documents -------------------------------------------------------------------------------- */

START_TEST(docs_links_resolve_inside_the_repository)
{
    kt_test_make_dir();
    char *out;
    const char *args[] = {src_root(), NULL};
    int rc = run_script("check-docs.py", &out, args);
    ck_assert_msg(rc == 0 && strstr(out, "ok "), "check-docs.py exited %d:\n%s", rc, out);
    free(out);
}
END_TEST

/* Each edit of a copy of README.md and docs/ and what the checker must say of it; a
 * link inside code is an example and must pass. */
static const struct {
    const char *edit, *says;
} doc_breaks[] = {
    {"echo 'See [the design](../shared/ARCHITECTURE.md).' >> %s/README.md",
     "points outside the repository"},
    {"echo 'See [search](docs/no-such-page.md).' >> %s/README.md", "no such file"},
    {"echo 'See [gpu](network.md#no-such-heading).' >> %s/docs/search.md",
     "has no heading with anchor #no-such-heading"},
    {"echo 'See [top](#nowhere).' >> %s/docs/deploy.md", "docs/deploy.md:"},
    {"echo 'Example: `[x](../outside.md)`.' >> %s/README.md", NULL},
};

START_TEST(docs_checker_rejects_links_that_leave_or_miss)
{
    kt_test_make_dir();
    char dir[600], cmd[4096], *out;
    snprintf(dir, sizeof dir, "%s/docs-root", kt_test_dir);
    const char *args[] = {dir, NULL};
    for (size_t i = 0; i < sizeof doc_breaks / sizeof doc_breaks[0]; i++) {
        /* The tree the pages may point into, without builds and history. */
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s' && mkdir -p '%s' && tar -C '%s' --exclude=./.git "
                 "--exclude='./build*' -cf - . | tar -C '%s' -xf -",
                 dir, dir, src_root(), dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(cmd, sizeof cmd, doc_breaks[i].edit, dir);
        ck_assert_int_eq(system(cmd), 0);
        int rc = run_script("check-docs.py", &out, args);
        if (doc_breaks[i].says)
            ck_assert_msg(rc == 1 && strstr(out, doc_breaks[i].says),
                          "after `%s` the checker exited %d without \"%s\":\n%s", cmd, rc,
                          doc_breaks[i].says, out);
        else
            ck_assert_msg(rc == 0, "after `%s` the checker exited %d:\n%s", cmd, rc, out);
        free(out);
    }
}
END_TEST

static void setup_suite(void)
{
    (void)kt_unused_helpers;
    kt_test_suite_dir("kt_deploy_");
}

int main(void)
{
    Suite *s = suite_create("deploy");
    TCase *tc = tcase_create("deploy");
    tcase_add_unchecked_fixture(tc, setup_suite, kt_test_suite_dir_remove);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, systemd_units_pass_verify_with_token_credential_and_store);
    tcase_add_test(tc, systemd_checker_rejects_broken_units);
    tcase_add_test(tc, k8s_manifests_carry_what_the_daemons_need);
    tcase_add_test(tc, k8s_checker_rejects_broken_manifests);
    tcase_add_test(tc, docs_links_resolve_inside_the_repository);
    tcase_add_test(tc, docs_checker_rejects_links_that_leave_or_miss);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
