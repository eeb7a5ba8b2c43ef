/*
 * Suite "zoo": the model zoo's small models (tests/zoo/make_zoo.py --small)
 * imported, built and run by `ktune run` and compared with PyTorch. The
 * suite's setup runs make_zoo.py --small once per opset, 13 and 17 (the two
 * at once), with /usr/bin/python3 (Debian's, which has torch, torchvision and
 * onnx; the python3 first on PATH may not) into its temp dir
 * /tmp/kt_zoo_XXXXXX/models, and makes an empty store there (`ktune records
 * import --db STORE --in /dev/null`), so every task runs with ktune's default
 * schedule. The CLI is KT_BUILD_ROOT/cli/ktune and the script is found under
 * KT_SOURCE_ROOT (tests/meson.build sets both).
 *
 * Each family of the zoo is one test (AlexNet, ConvNeXt, DenseNet, whose
 * dense block ends in a Concat of 18 inputs, EfficientNet B0 and V2,
 * GoogLeNet, Inception v3, MNASNet, MobileNetV2, MobileNetV3 small and
 * large, RegNetX and RegNetY, ResNet-18 and -50, ResNeXt, Wide ResNet,
 * ShuffleNetV2, SqueezeNet, Swin, VGG, ViT, MaxViT, and the torch.nn
 * transformers: an encoder, an encoder whose attention mask is a second,
 * int64 input, a causal decoder, a GPT-style decoder on token ids): every
 * model of it runs at both opsets (two runs at a time, or as many as there
 * are CPUs if fewer), each `ktune run --onnx M --db STORE --input X.npy
 * --output Y.npy --repeat 1` (the mask model: --input x=X.npy --input
 * mask=M.npy) with Y.npy in the test's own directory, and passes when it
 * exits 0 and its output has PyTorch's element count and max |got - want| <=
 * 1e-4 * max |want|. A failed test's message lists every model and opset
 * that failed with why (the exit status, the element counts, or the error
 * figure), and the test prints the same on its stderr, each followed by
 * ktune's stderr for that run (its last 4000 characters). A model that
 * make_zoo.py did not write fails with make_zoo.py's reason (its FAILED
 * line, or the end of its log). The encoder with the mask input, run with
 * only its first input, exits 1 naming the missing input 'mask', at both
 * opsets. Nothing asserts how fast anything runs.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensorio/tensorio.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_test_proc.h"

/* Upper bound of one ktune command (the machine may be slow and busy). */
#define RUN_MS 300000
/* Outputs agree within this, relative to the largest magnitude of PyTorch's. */
#define TOL 1e-4
/* At most this many ktune runs at once (each compiles its tasks on one CPU). */
#define MAX_PAR 2
/* The most models of one family. */
#define MAX_MODELS 2

static const int opsets[] = {13, 17};

/* The zoo's families, one test each: the make_zoo.py --small names of each. */
static const struct {
    const char *family;
    const char *models[MAX_MODELS + 1];
} families[] = {
    {"alexnet", {"alexnet"}},
    {"convnext", {"convnext_tiny"}},
    {"densenet", {"densenet121"}},
    {"efficientnet", {"efficientnet_b0", "efficientnet_v2_s"}},
    {"googlenet", {"googlenet"}},
    {"inception_v3", {"inception_v3"}},
    {"mnasnet", {"mnasnet1_0"}},
    {"mobilenet_v2", {"mobilenet_v2"}},
    {"mobilenet_v3", {"mobilenet_v3_small", "mobilenet_v3_large"}},
    {"regnet", {"regnet_x_400mf", "regnet_y_400mf"}},
    {"resnet", {"resnet18", "resnet50"}},
    {"resnext", {"resnext50_32x4d"}},
    {"wide_resnet", {"wide_resnet50_2"}},
    {"shufflenet", {"shufflenet_v2_x1_0"}},
    {"squeezenet", {"squeezenet1_1"}},
    {"swin", {"swin"}},
    {"vgg", {"vgg11"}},
    {"vit", {"vit"}},
    {"maxvit", {"maxvit"}},
    {"encoder", {"encoder"}},
    {"encoder_mask_input", {"encoder_mask_input"}},
    {"decoder_causal", {"decoder_causal"}},
    {"gpt_tokens", {"gpt_tokens"}},
};

/* The model of two inputs: x (float32) and mask (int64), each its own file. */
static const char *const MASK_MODEL = "encoder_mask_input";

static char models[256];        /* the suite's models, inputs and PyTorch's outputs */
static char store[300];         /* the empty store */
static char setup_err[2048];    /* why make_zoo.py or the store could not be made, or "" */

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][1100];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%.512s/%.512s", dir, name);
    return p;
}

static void suite_setup(void)
{
    kt_test_suite_dir("kt_zoo_");
    snprintf(models, sizeof models, "%s/models", kt_test_base);
    mkdir(models, 0700);
    const char *src = getenv("KT_SOURCE_ROOT"), *build = getenv("KT_BUILD_ROOT");
    char names[2048] = "";
    for (size_t f = 0; f < KT_ARRAY_LEN(families); f++)
        for (int m = 0; families[f].models[m]; m++) {
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, " %s", families[f].models[m]);
        }
    /* Both opsets at once; each writes its own log, which the tests read. */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "py() { /usr/bin/python3 -W ignore '%s/tests/zoo/make_zoo.py' --small '%s' $1%s "
             "> '%s/make_zoo-o'$1.log 2>&1; }; py %d & py %d; wait",
             src ? src : ".", models, names, models, opsets[0], opsets[1]);
    if (system(cmd) == -1)
        snprintf(setup_err, sizeof setup_err, "cannot run make_zoo.py");
    /* ktune run --db wants an existing store: an empty one, made by importing nothing. */
    snprintf(store, sizeof store, "%s/zoo.db", kt_test_base);
    snprintf(cmd, sizeof cmd,
             "'%s/cli/ktune' records import --db '%s' --in /dev/null > '%s/db.log' 2>&1",
             build ? build : ".", store, kt_test_base);
    if (!setup_err[0] && system(cmd) != 0) {
        char *log = kt_file_read(path_in(kt_test_base, "db.log"), NULL);
        snprintf(setup_err, sizeof setup_err, "ktune records import failed: %.1900s",
                 log ? log : "(no output)");
        free(log);
    }
}

static void suite_teardown(void) { kt_test_suite_dir_remove(); }

static void test_setup(void) { kt_test_make_dir(); }

/* The store exists: a setup that failed is a failure, never a skip. */
static void need_setup(void) { ck_assert_msg(setup_err[0] == '\0', "%s", setup_err); }

/* models/<model>-small<rest>: the file make_zoo.py --small names so. */
static char *zoo_file(const char *model, const char *rest)
{
    static char buf[8][700];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s-small%s", models, model, rest);
    return p;
}

/* Why make_zoo.py did not write model at opset (its FAILED line, or the end
 * of its log), into why. */
static void make_zoo_reason(const char *model, int opset, char *why, size_t size)
{
    char log[300], key[200];
    snprintf(log, sizeof log, "%s/make_zoo-o%d.log", models, opset);
    snprintf(key, sizeof key, "make_zoo: %s o%d: FAILED: ", model, opset);
    char *text = kt_file_read(log, NULL);
    const char *at = text ? strstr(text, key) : NULL;
    if (at) {
        at += strlen(key);
        snprintf(why, size, "make_zoo.py failed: %.*s", (int)strcspn(at, "\n"), at);
    } else {
        size_t n = text ? strlen(text) : 0;
        snprintf(why, size, "make_zoo.py did not write it; its log %s ends: %s", log,
                 text ? text + (n > 1500 ? n - 1500 : 0) : "(none)");
    }
    free(text);
}

/* A ktune run in flight: stdout and stderr in files of their own. */
typedef struct {
    const char *model;
    int opset;
    pid_t pid;
    char out[480], err[480], y[480];
} zoo_run_t;

/* Start build-root cli/ktune with args (NULL-terminated) into r's files. */
static void spawn_ktune(zoo_run_t *r, char *const args[])
{
    const char *root = getenv("KT_BUILD_ROOT");
    ck_assert_msg(root != NULL, "KT_BUILD_ROOT is not set");
    char bin[512];
    snprintf(bin, sizeof bin, "%s/cli/ktune", root);
    char *argv[32] = {bin};
    int argc = 1;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    /* The environment without KT_TOKEN_FILE, built before fork. */
    static char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n + 1 < KT_ARRAY_LEN(envp); e++)
        if (strncmp(*e, "KT_TOKEN_FILE=", 14) != 0)
            envp[n++] = *e;
    envp[n] = NULL;
    int fo = open(r->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int fe = open(r->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fo, 0);
    ck_assert_int_ge(fe, 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fo, 1);
        dup2(fe, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(fo);
    close(fe);
    r->pid = pid;
}

/* Start `ktune run` of model at opset (r's files in this test's directory);
 * 0, or 1 with why make_zoo.py did not write the model. */
static int start_run(zoo_run_t *r, const char *model, int opset, char *why, size_t size)
{
    r->model = model;
    r->opset = opset;
    r->pid = 0;
    char rest[64];
    snprintf(rest, sizeof rest, "-o%d.onnx", opset);
    char *onnx = zoo_file(model, rest), *x = zoo_file(model, ".x.npy");
    char *mask = zoo_file(model, ".mask.npy");
    snprintf(rest, sizeof rest, "-o%d.y.npy", opset);
    char *want = zoo_file(model, rest);
    int two = strcmp(model, MASK_MODEL) == 0;
    if (access(onnx, R_OK) != 0 || access(x, R_OK) != 0 || access(want, R_OK) != 0 ||
        (two && access(mask, R_OK) != 0)) {
        make_zoo_reason(model, opset, why, size);
        return 1;
    }
    snprintf(r->out, sizeof r->out, "%s/%s-o%d.out", kt_test_dir, model, opset);
    snprintf(r->err, sizeof r->err, "%s/%s-o%d.err", kt_test_dir, model, opset);
    snprintf(r->y, sizeof r->y, "%s/%s-o%d.y.npy", kt_test_dir, model, opset);
    char xs[700], ms[700];
    snprintf(xs, sizeof xs, "x=%s", x);
    snprintf(ms, sizeof ms, "mask=%s", mask);
    char *one[] = {"run", "--onnx", onnx, "--db", store, "--input", x, "--output", r->y,
                   "--repeat", "1", NULL};
    char *both[] = {"run", "--onnx", onnx, "--db", store, "--input", xs, "--input", ms,
                    "--output", r->y, "--repeat", "1", NULL};
    spawn_ktune(r, two ? both : one);
    return 0;
}

/* Largest |got - want| over the largest |want| into *err: 0, or 1 with why
 * they cannot be compared (no output, another element count). */
static int rel_error(const char *got, const char *want, double *err, char *why, size_t size)
{
    float *x = NULL, *y = NULL;
    int64_t dx[KT_TENSORIO_MAX_RANK], dy[KT_TENSORIO_MAX_RANK];
    int nx = 0, ny = 0;
    if (kt_npy_read(got, &x, dx, &nx) != 0) {
        snprintf(why, size, "its output: %s", kt_err_msg());
        return 1;
    }
    ck_assert_msg(kt_npy_read(want, &y, dy, &ny) == 0, "%s", kt_err_msg());
    int64_t n = 1, m = 1;
    for (int d = 0; d < nx; d++)
        n *= dx[d];
    for (int d = 0; d < ny; d++)
        m *= dy[d];
    int bad = n != m;
    if (bad) {
        snprintf(why, size, "%lld output elements, PyTorch has %lld", (long long)n, (long long)m);
    } else {
        double big = 0, diff = 0;
        for (int64_t i = 0; i < m; i++) {
            big = fmax(big, fabs(y[i]));
            double d = fabs((double)x[i] - y[i]);
            diff = d > diff || isnan(d) ? d : diff;
        }
        *err = big > 0 ? diff / big : diff;
    }
    free(x);
    free(y);
    return bad;
}

/* Append "MODEL oOPSET: why" to names (the summary) and the same, then
 * ktune's stderr when there was a run (err), to report. */
static void add_failure(const char *model, int opset, const char *why, const char *err,
                        char *names, size_t nsize, char *report, size_t size)
{
    size_t len = strlen(names);
    snprintf(names + len, nsize - len, "\n  %s o%d: %.400s", model, opset, why);
    len = strlen(report);
    if (!err) {
        snprintf(report + len, size - len, "\n--- %s o%d: %s", model, opset, why);
        return;
    }
    char *text = kt_file_read(err, NULL);
    size_t n = text ? strlen(text) : 0;
    snprintf(report + len, size - len, "\n--- %s o%d: %s; ktune's stderr:\n%s", model, opset,
             why, text ? text + (n > 4000 ? n - 4000 : 0) : "(none)");
    free(text);
}

/* Finish r (wait status st, or killed when !done): 1 when it failed, added
 * to names and report (add_failure). */
static int finish_run(zoo_run_t *r, int done, int st, char *names, size_t nsize, char *report,
                      size_t size)
{
    char why[1024] = "";
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    double err = 0;
    char rest[64];
    snprintf(rest, sizeof rest, "-o%d.y.npy", r->opset);
    int bad = 1;
    if (!done)
        snprintf(why, sizeof why, "ktune run did not finish in %d s", RUN_MS / 1000);
    else if (rc != 0)
        snprintf(why, sizeof why, "ktune run exited %d", rc);
    else if (rel_error(r->y, zoo_file(r->model, rest), &err, why, sizeof why) == 0) {
        bad = !(err <= TOL);   /* NaN fails too */
        snprintf(why, sizeof why, "error %.3g of max |want| (bar %g)", err, TOL);
    }
    if (!bad)
        return 0;
    add_failure(r->model, r->opset, why, r->err, names, nsize, report, size);
    return 1;
}

/* Run every model of family at both opsets, MAX_PAR (or the CPUs) at a time. */
static void check_family(const char *family)
{
    need_setup();
    size_t f = 0;
    while (f < KT_ARRAY_LEN(families) && strcmp(families[f].family, family) != 0)
        f++;
    ck_assert_msg(f < KT_ARRAY_LEN(families), "no family %s", family);
    struct {
        const char *model;
        int opset;
    } todo[MAX_MODELS * 2];
    int ntodo = 0;
    for (int m = 0; families[f].models[m]; m++)
        for (size_t o = 0; o < KT_ARRAY_LEN(opsets); o++) {
            todo[ntodo].model = families[f].models[m];
            todo[ntodo++].opset = opsets[o];
        }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int par = cpus < 1 ? 1 : cpus > MAX_PAR ? MAX_PAR : (int)cpus;
    zoo_run_t runs[MAX_PAR];   /* a slot is free while its pid is 0 */
    memset(runs, 0, sizeof runs);
    int waited[MAX_PAR] = {0};
    static char report[65536], names[4096];
    report[0] = names[0] = '\0';
    int nfail = 0, next = 0, active = 0;
    for (;;) {
        /* start what fits */
        for (int s = 0; s < par && next < ntodo; s++) {
            if (runs[s].pid != 0)
                continue;
            char why[2048];
            if (start_run(&runs[s], todo[next].model, todo[next].opset, why, sizeof why)) {
                add_failure(todo[next].model, todo[next].opset, why, NULL, names, sizeof names,
                            report, sizeof report);
                nfail++;
            } else {
                waited[s] = 0;
                active++;
            }
            next++;
        }
        if (!active && next >= ntodo)
            break;
        /* reap what ended */
        kt_test_sleep_ms(20);
        for (int s = 0; s < par; s++) {
            if (runs[s].pid <= 0)
                continue;
            int st = 0, done = 1;
            waited[s] += 20;
            if (waitpid(runs[s].pid, &st, WNOHANG) != runs[s].pid) {
                if (waited[s] <= RUN_MS)
                    continue;
                kill(runs[s].pid, SIGKILL);
                waitpid(runs[s].pid, &st, 0);
                done = 0;
            }
            runs[s].pid = 0;
            active--;
            nfail += finish_run(&runs[s], done, st, names, sizeof names, report, sizeof report);
        }
    }
    if (nfail)
        fprintf(stderr, "zoo: %s: %d of %d runs failed:%s\n", family, nfail, ntodo, report);
    ck_assert_msg(nfail == 0, "%s: %d of %d runs failed (ktune's stderr above):%s", family, nfail,
                  ntodo, names);
}

/* ---- the families ------------------------------------------------------------------------- */

#define FAMILY(f)                                                                              \
    START_TEST(zoo_##f##_matches_pytorch_at_opsets_13_and_17) { check_family(#f); }            \
    END_TEST

FAMILY(alexnet)
FAMILY(convnext)
FAMILY(densenet)
FAMILY(efficientnet)
FAMILY(googlenet)
FAMILY(inception_v3)
FAMILY(mnasnet)
FAMILY(mobilenet_v2)
FAMILY(mobilenet_v3)
FAMILY(regnet)
FAMILY(resnet)
FAMILY(resnext)
FAMILY(wide_resnet)
FAMILY(shufflenet)
FAMILY(squeezenet)
FAMILY(swin)
FAMILY(vgg)
FAMILY(vit)
FAMILY(maxvit)
FAMILY(encoder)
FAMILY(encoder_mask_input)
FAMILY(decoder_causal)
FAMILY(gpt_tokens)

/* ---- bad input ---------------------------------------------------------------------------- */

START_TEST(zoo_missing_second_input_exits_1_naming_it)
{
    need_setup();
    for (size_t o = 0; o < KT_ARRAY_LEN(opsets); o++) {
        char rest[64], why[2048];
        snprintf(rest, sizeof rest, "-o%d.onnx", opsets[o]);
        char *onnx = zoo_file(MASK_MODEL, rest), *x = zoo_file(MASK_MODEL, ".x.npy");
        if (access(onnx, R_OK) != 0 || access(x, R_OK) != 0) {
            make_zoo_reason(MASK_MODEL, opsets[o], why, sizeof why);
            ck_abort_msg("%s o%d: %s", MASK_MODEL, opsets[o], why);
        }
        zoo_run_t r = {.model = MASK_MODEL, .opset = opsets[o]};
        snprintf(r.out, sizeof r.out, "%s/o%d.out", kt_test_dir, opsets[o]);
        snprintf(r.err, sizeof r.err, "%s/o%d.err", kt_test_dir, opsets[o]);
        snprintf(r.y, sizeof r.y, "%s/o%d.y.npy", kt_test_dir, opsets[o]);
        char xs[700];
        snprintf(xs, sizeof xs, "x=%s", x);
        char *args[] = {"run", "--onnx", onnx, "--db", store, "--input", xs, "--output", r.y,
                        "--repeat", "1", NULL};
        spawn_ktune(&r, args);
        kt_test_proc_t p = {.pid = r.pid};
        snprintf(p.log, sizeof p.log, "%s", r.err);
        int st = 0;
        if (!kt_test_wait(&p, RUN_MS, &st))
            ck_abort_msg("o%d: ktune run did not finish", opsets[o]);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        char *err = kt_test_output(&p), *out = kt_file_read(r.out, NULL);
        ck_assert_msg(rc == 1 && strstr(err, "'mask'") && strstr(err, "--input"),
                      "o%d: exit %d, want 1 and a message naming 'mask'; stderr:\n%s", opsets[o],
                      rc, err);
        ck_assert_msg(access(r.y, F_OK) != 0, "o%d: it wrote an output", opsets[o]);
        ck_assert_msg(!out || !strstr(out, "latency:"), "o%d: it ran: %s", opsets[o], out);
        free(err);
        free(out);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("zoo");
    TCase *tc = tcase_create("zoo");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, zoo_alexnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_convnext_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_densenet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_efficientnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_googlenet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_inception_v3_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_mnasnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_mobilenet_v2_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_mobilenet_v3_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_regnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_resnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_resnext_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_wide_resnet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_shufflenet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_squeezenet_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_swin_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_vgg_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_vit_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_maxvit_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_encoder_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_encoder_mask_input_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_decoder_causal_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_gpt_tokens_matches_pytorch_at_opsets_13_and_17);
    tcase_add_test(tc, zoo_missing_second_input_exits_1_naming_it);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
