/*
 * Suite "ops": ONNX operators that the importer maps to reference operators
 * (refop/refop.h), each built and run by `ktune run` and compared with
 * PyTorch. tests/net/make_ops.py writes one minimal model per case (a single
 * float32 input "x", one float32 output), its input and the output PyTorch
 * (numpy in the few places it says) computes from it: Slice with negative
 * axes and steps and clamped or INT64_MAX/MIN bounds (inputs and opset-9
 * attributes), Split (input and opset-11 attribute), Gather (scalar and
 * negative indices, a constant table indexed by an activation), Expand,
 * Tile, Transpose, Pad (constant, reflect, edge, negative pads; inputs and
 * opset-10 attributes), Where and the comparisons with broadcasting
 * ([2, 1, 4, 1] against [3, 1, 5]), And/Or/Not, Cast (int64 truncating,
 * bool), Mod (fmod 0 and 1), Pow/Max/Min, every elementwise unary, the
 * reductions over any axes with keepdims 0 and 1, Softmax and LogSoftmax
 * over a non-last axis (opset 13) and coerced to 2-D (opset 11), Trilu,
 * constant subgraphs folded at import (Shape -> Gather -> Range,
 * ConstantOfShape, Expand / Where / Tile / Pad / Trilu / Mod / Gather of
 * constants) and Concat of 18 and 20 inputs. Each family is one test: every
 * case of it runs (a few at a time) and the test fails listing each case
 * whose run failed, whose shape differs, or whose largest error exceeds
 * 1e-5 * max(1, max |want|). A model with an operator ktune does not know
 * fails naming the layer and the operator and leaves the store as it was.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensorio/tensorio.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_skip.h"
#include "kt_test_proc.h"

/* Upper bound of one ktune command (the machine may be slow and busy). */
#define RUN_MS 300000
/* The bar: max |got - want| <= TOL * max(1, max |want|). */
#define TOL 1e-5
/* At most this many ktune runs at once (each compiles a small library). */
#define MAX_PAR 4
#define MAX_CASES 512

static char models[256];        /* the suite's models, inputs and expected outputs */
static char models_err[4096];   /* why make_ops.py failed, or "" */
static char *cases[MAX_CASES];  /* make_ops.py --list */
static int ncases;

/* The families, each one test below; every case's name starts with one. */
static const char *const families[] = {
    "slice", "split", "gather", "expand", "tile", "transpose", "pad", "where", "compare",
    "logic", "cast", "binary", "unary", "reduce", "softmax", "trilu", "fold", "concat",
};

/* Run a shell command with its output in log; its text on failure (malloc'd), else NULL. */
static char *shell(const char *cmd, const char *log)
{
    int st = system(cmd);
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return NULL;
    char *out = kt_file_read(log, NULL);
    return out ? out : strdup("(no output)");
}

static void suite_setup(void)
{
    kt_test_suite_dir("kt_ops_");
    snprintf(models, sizeof models, "%s/models", kt_test_base);
    mkdir(models, 0700);
    const char *src = getenv("KT_SOURCE_ROOT");
    char script[512], cmd[2048], log[512], list[512];
    snprintf(script, sizeof script, "%s/tests/net/make_ops.py", src ? src : ".");
    snprintf(log, sizeof log, "%s/log", models);
    snprintf(list, sizeof list, "%s/list", kt_test_base);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -W ignore '%s' '%s' > '%s' 2>&1", script, models,
             log);
    char *err = shell(cmd, log);
    if (!err) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 -W ignore '%s' --list > '%s' 2>&1", script,
                 list);
        err = shell(cmd, list);
    }
    if (err) {
        snprintf(models_err, sizeof models_err, "make_ops.py failed: %.3900s", err);
        free(err);
        return;
    }
    char *names = kt_file_read(list, NULL);
    for (char *l = names ? strtok(names, "\n") : NULL; l && ncases < MAX_CASES;
         l = strtok(NULL, "\n"))
        if (*l)
            cases[ncases++] = strdup(l);
    free(names);
}

static void suite_teardown(void)
{
    for (int i = 0; i < ncases; i++)
        free(cases[i]);
    kt_test_suite_dir_remove();
}

static void test_setup(void) { kt_test_make_dir(); }

/* The models exist: a generator that failed is a failure, never a skip
 * (python3-torch and python3-onnx are dependencies deploy/install-deps.sh
 * installs). */
static void need_models(void)
{
    ck_assert_msg(models_err[0] == '\0', "%s", models_err);
    ck_assert_msg(ncases > 0, "make_ops.py --list printed no case");
}

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][1100];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%.512s/%.512s", dir, name);
    return p;
}

/* Run build-root binary cli/ktune to the end; exit status, output in *out. */
static int ktune(char *const args[], char **out)
{
    static int n;
    char file[64];
    snprintf(file, sizeof file, "run%d.out", n++);
    static const char *const drop[] = {"KT_TOKEN_FILE=", NULL};
    kt_test_proc_t p;
    kt_test_spawn(&p, file, 0, "cli/ktune", args, drop, NULL);
    int st = 0;
    if (!kt_test_wait(&p, RUN_MS, &st))
        ck_abort_msg("%s did not finish", p.log);
    *out = kt_test_output(&p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* An empty store in this test's directory, made as a user would. */
static char *empty_store(void)
{
    char *db = path_in(kt_test_dir, "empty.db");
    char *out = NULL;
    char *args[] = {"records", "import", "--db", db, "--in", "/dev/null", NULL};
    ck_assert_msg(ktune(args, &out) == 0, "records import: %s", out);
    free(out);
    return db;
}

static int in_family(const char *name, const char *family)
{
    size_t n = strlen(family);
    return strncmp(name, family, n) == 0 && name[n] == '_';
}

static void shape_text(char *buf, size_t size, const int64_t *d, int nd)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < nd && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", k ? ", " : "", (long long)d[k]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

static int64_t numel(int nd, const int64_t *d)
{
    int64_t n = 1;
    for (int k = 0; k < nd; k++)
        n *= d[k];
    return n;
}

/* Compare got with want (.npy): 0, or 1 with what differs in why. */
static int compare(const char *got, const char *want, char *why, size_t size)
{
    float *x = NULL, *y = NULL;
    int64_t dx[KT_TENSORIO_MAX_RANK], dy[KT_TENSORIO_MAX_RANK];
    int nx = 0, ny = 0;
    if (kt_npy_read(got, &x, dx, &nx) != 0) {
        snprintf(why, size, "output: %s", kt_err_msg());
        return 1;
    }
    ck_assert_msg(kt_npy_read(want, &y, dy, &ny) == 0, "%s", kt_err_msg());
    int64_t n = numel(nx, dx), m = numel(ny, dy);
    /* ktune holds a rank-0 result as one element of shape [1] (net.h). */
    int same = nx == ny || (ny == 0 && nx == 1 && dx[0] == 1);
    for (int d = 0; same && d < nx && d < ny; d++)
        same = dx[d] == dy[d];
    int bad = 0;
    if (!same) {
        char a[128], b[128];
        shape_text(a, sizeof a, dx, nx);
        shape_text(b, sizeof b, dy, ny);
        snprintf(why, size, "shape %s (%lld elements), want %s (%lld elements)", a,
                 (long long)n, b, (long long)m);
        bad = 1;
    }
    if (n == m) {
        double big = 0, diff = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < m; i++) {
            big = fmax(big, fabs(y[i]));
            double e = fabs((double)x[i] - y[i]);
            if (e > diff || (isnan(e) && !isnan(diff))) {
                diff = e;
                at = i;
            }
        }
        double bound = TOL * fmax(1.0, big);
        if (!(diff <= bound)) {
            size_t len = bad ? strlen(why) : 0;
            snprintf(why + len, size - len,
                     "%smax |got - want| = %.6g > %.3g, at flat index %lld: got %.9g, want %.9g",
                     bad ? "; " : "", diff, bound, (long long)at, x[at], y[at]);
            bad = 1;
        }
    }
    free(x);
    free(y);
    return bad;
}

/* One case's run in flight. */
typedef struct {
    int c;                /* index in cases */
    kt_test_proc_t p;
    int waited_ms;
} run_t;

/* Finish r's run (wait status st): 1 when it failed, its output and why
 * appended to report, its name and why to names, and *nfail counted. */
static int finish(run_t *r, int st, char *report, size_t size, int *nfail, char *names,
                  size_t nsize)
{
    const char *name = cases[r->c];
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char got[600], want[600], why[1024] = "";
    snprintf(got, sizeof got, "%s/%s.y.npy", kt_test_dir, name);
    snprintf(want, sizeof want, "%s/%s.y.npy", models, name);
    int bad = 0;
    if (rc != 0) {
        snprintf(why, sizeof why, "ktune run exited %d", rc);
        bad = 1;
    } else {
        bad = compare(got, want, why, sizeof why);
    }
    if (!bad)
        return 0;
    char *out = kt_test_output(&r->p);
    size_t len = strlen(report);
    snprintf(report + len, size - len, "\n--- %s: %s\n%.2000s", name, why, out);
    free(out);
    len = strlen(names);
    snprintf(names + len, nsize - len, "%s %s (%.300s)", *nfail ? ";" : "", name, why);
    (*nfail)++;
    return 1;
}

/* Build and run every case of the family, MAX_PAR (or the CPUs) at a time. */
static void run_family(const char *family)
{
    need_models();
    char *db = empty_store();
    char dbp[600];
    snprintf(dbp, sizeof dbp, "%s", db);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int par = cpus < 1 ? 1 : cpus > MAX_PAR ? MAX_PAR : (int)cpus;
    run_t runs[MAX_PAR];
    int busy[MAX_PAR] = {0};
    static char report[65536], names[3500];
    report[0] = names[0] = '\0';
    int total = 0, nfail = 0, next = 0, active = 0;
    static const char *const drop[] = {"KT_TOKEN_FILE=", NULL};
    for (;;) {
        /* start what fits */
        while (active < par) {
            while (next < ncases && !in_family(cases[next], family))
                next++;
            if (next >= ncases)
                break;
            int s = 0;
            while (busy[s])
                s++;
            const char *name = cases[next];
            char model[600], x[600], y[600], log[300];
            snprintf(model, sizeof model, "%s/%s.onnx", models, name);
            snprintf(x, sizeof x, "%s/%s.x.npy", models, name);
            snprintf(y, sizeof y, "%s/%s.y.npy", kt_test_dir, name);
            snprintf(log, sizeof log, "%s.out", name);
            char *args[] = {"run", "--onnx", model, "--db", dbp, "--input", x, "--output", y,
                            "--repeat", "1", NULL};
            runs[s].c = next++;
            runs[s].waited_ms = 0;
            kt_test_spawn(&runs[s].p, log, 0, "cli/ktune", args, drop, NULL);
            busy[s] = 1;
            active++;
            total++;
        }
        if (!active)
            break;
        /* reap what ended */
        kt_test_sleep_ms(20);
        for (int s = 0; s < par; s++) {
            if (!busy[s])
                continue;
            int st = 0;
            runs[s].waited_ms += 20;
            if (waitpid(runs[s].p.pid, &st, WNOHANG) == runs[s].p.pid) {
                runs[s].p.pid = 0;
            } else if (runs[s].waited_ms > RUN_MS) {
                kill(runs[s].p.pid, SIGKILL);
                waitpid(runs[s].p.pid, &st, 0);
                runs[s].p.pid = 0;
            } else {
                continue;
            }
            finish(&runs[s], st, report, sizeof report, &nfail, names, sizeof names);
            busy[s] = 0;
            active--;
        }
    }
    ck_assert_msg(total > 0, "make_ops.py has no case of family %s", family);
    if (nfail)
        fprintf(stderr, "ops: %s: %d of %d cases failed:%s\n", family, nfail, total, report);
    ck_assert_msg(nfail == 0, "%s: %d of %d cases failed:%s", family, nfail, total, names);
}

/* ---- the families ------------------------------------------------------------------------- */

#define FAMILY(f)                                                                              \
    START_TEST(ops_##f##_cases_match_pytorch) { run_family(#f); }                              \
    END_TEST

FAMILY(slice)
FAMILY(split)
FAMILY(gather)
FAMILY(expand)
FAMILY(tile)
FAMILY(transpose)
FAMILY(pad)
FAMILY(where)
FAMILY(compare)
FAMILY(logic)
FAMILY(cast)
FAMILY(binary)
FAMILY(unary)
FAMILY(reduce)
FAMILY(softmax)
FAMILY(trilu)
FAMILY(fold)
FAMILY(concat)

/* No case escapes the family tests, and each made all three files. */
START_TEST(ops_every_case_belongs_to_a_family_and_has_its_files)
{
    need_models();
    for (int i = 0; i < ncases; i++) {
        int fam = 0;
        for (size_t f = 0; f < KT_ARRAY_LEN(families); f++)
            fam += in_family(cases[i], families[f]);
        ck_assert_msg(fam == 1, "case %s is in %d families", cases[i], fam);
        static const char *const ext[] = {".onnx", ".x.npy", ".y.npy"};
        for (size_t e = 0; e < KT_ARRAY_LEN(ext); e++) {
            char p[600];
            snprintf(p, sizeof p, "%s/%s%s", models, cases[i], ext[e]);
            ck_assert_msg(access(p, R_OK) == 0, "make_ops.py did not write %s", p);
        }
    }
}
END_TEST

/* ---- an operator ktune does not know ------------------------------------------------------ */

/* The CUDA build runs a slice (a view without a period) on its transpose
 * kernel, and refuses a gather, which it has no kernel for, naming the
 * step and the way out. */
START_TEST(ops_cuda_build_takes_slices_and_refuses_gathers)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    need_models();
    char *db = empty_store();
    char dbp[600], dir[600];
    snprintf(dbp, sizeof dbp, "%s", db);
    snprintf(dir, sizeof dir, "%s", path_in(kt_test_dir, "cu"));
    char model[1200];
    snprintf(model, sizeof model, "%s", path_in(models, "slice_of_nhwc_convs_in_memory_order.onnx"));
    char *ok[] = {"build", "--onnx", model, "--target", "cuda", "--arch", "sm_80", "--db", dbp,
                  "--out", dir, NULL};
    char *out = NULL;
    int rc = ktune(ok, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    snprintf(model, sizeof model, "%s", path_in(models, "gather_neg_indices_neg_axis.onnx"));
    rc = ktune(ok, &out);
    ck_assert_msg(rc == 1 && strstr(out, "runs a reference operator") &&
                      strstr(out, "--target cpu"),
                  "exit %d: %s", rc, out);
    free(out);
}
END_TEST

START_TEST(ops_unknown_operator_names_layer_and_op_and_leaves_the_store)
{
    need_models();
    char *db = empty_store();
    char dbp[600];
    snprintf(dbp, sizeof dbp, "%s", db);
    struct stat s0, s1;
    ck_assert_int_eq(stat(dbp, &s0), 0);
    size_t n0 = 0, n1 = 0;
    char *before = kt_file_read(dbp, &n0);
    ck_assert_ptr_nonnull(before);
    kt_test_sleep_ms(20);   /* a rewrite would show in the mtime */
    char *model = path_in(models, "unsupported.onnx"), *x = path_in(models, "unsupported.x.npy");
    char *y = path_in(kt_test_dir, "y.npy");
    char *args[] = {"run", "--onnx", model, "--db", dbp, "--input", x, "--output", y,
                    "--repeat", "1", NULL};
    char *out = NULL;
    int rc = ktune(args, &out);
    ck_assert_msg(rc == 1, "exit %d, want 1: %s", rc, out);
    ck_assert_msg(strstr(out, "'mystery'") && strstr(out, "Frobnicate") &&
                      strstr(out, "not supported"),
                  "the message does not name layer 'mystery' and its operator Frobnicate: %s",
                  out);
    ck_assert_msg(!strstr(out, "latency:"), "it ran: %s", out);
    free(out);
    ck_assert_int_ne(access(y, F_OK), 0);
    ck_assert_int_eq(stat(dbp, &s1), 0);
    char *after = kt_file_read(dbp, &n1);
    ck_assert_ptr_nonnull(after);
    ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "the store's bytes changed");
    ck_assert_msg(s0.st_mtim.tv_sec == s1.st_mtim.tv_sec &&
                      s0.st_mtim.tv_nsec == s1.st_mtim.tv_nsec,
                  "the store was rewritten");
    free(before);
    free(after);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 600);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, ops_every_case_belongs_to_a_family_and_has_its_files);
    tcase_add_test(tc, ops_unknown_operator_names_layer_and_op_and_leaves_the_store);
    tcase_add_test(tc, ops_cuda_build_takes_slices_and_refuses_gathers);
    tcase_add_test(tc, ops_slice_cases_match_pytorch);
    tcase_add_test(tc, ops_split_cases_match_pytorch);
    tcase_add_test(tc, ops_gather_cases_match_pytorch);
    tcase_add_test(tc, ops_expand_cases_match_pytorch);
    tcase_add_test(tc, ops_tile_cases_match_pytorch);
    tcase_add_test(tc, ops_transpose_cases_match_pytorch);
    tcase_add_test(tc, ops_pad_cases_match_pytorch);
    tcase_add_test(tc, ops_where_cases_match_pytorch);
    tcase_add_test(tc, ops_compare_cases_match_pytorch);
    tcase_add_test(tc, ops_logic_cases_match_pytorch);
    tcase_add_test(tc, ops_cast_cases_match_pytorch);
    tcase_add_test(tc, ops_binary_cases_match_pytorch);
    tcase_add_test(tc, ops_unary_cases_match_pytorch);
    tcase_add_test(tc, ops_reduce_cases_match_pytorch);
    tcase_add_test(tc, ops_softmax_cases_match_pytorch);
    tcase_add_test(tc, ops_trilu_cases_match_pytorch);
    tcase_add_test(tc, ops_fold_cases_match_pytorch);
    tcase_add_test(tc, ops_concat_cases_match_pytorch);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
