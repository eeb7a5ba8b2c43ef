/*
 * Suite "runtime": networks built and run with their tuned kernels (ktune
 * build, ktune run, net/plan.h, runtime/netlib.h). A small residual CNN made
 * by PyTorch (tests/runtime/make_small.py: conv + batch norm + relu, max
 * pool, a residual add, a strided 1x1 convolution, global pool, dense,
 * softmax, batch-norm statistics that are not the identity) is tuned for a
 * few trials, built from the store and through a tracker, run, and its
 * output compared with PyTorch's; ResNet-18 with random weights runs in
 * both layouts with every task's kernel checked against the reference and
 * the two outputs compared; the generated library is linked into a program
 * twice with different weights; the CUDA build's generated host runner runs
 * unchanged on the CPU (linked with tests/cuda_driver_cpu.c instead of
 * -lcuda, its .cu compiled by codegen/cuda_cpu.h) and matches the CPU build
 * and PyTorch; bad input gets its message and exit status and leaves the
 * store as it was. Nothing asserts how fast anything runs.
 */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/cuda_cpu.h"
#include "net/net.h"
#include "measure/cuda_runner.h"
#include "measure/nvrtc.h"
#include "net/plan.h"
#include "runtime/netlib_int.h"
#include "sched/state.h"
#include "store/store.h"
#include "tensorio/tensorio.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#include "kt_config.h"
#include "kt_skip.h"
#include "kt_test_proc.h"
#include "kt_test_records.h"

/* Upper bound of one ktune command (the machine may be slow and busy). */
#define RUN_MS 400000
/* Outputs agree within this, relative to the largest magnitude (the bar). */
#define TOL 1e-4

static char models[256];        /* the suite's PyTorch models and tensors */
static char models_err[2048];   /* why make_small.py failed, or "" */

static void suite_setup(void)
{
    kt_test_suite_dir("kt_runtime_");
    snprintf(models, sizeof models, "%s/models", kt_test_base);
    mkdir(models, 0700);
    const char *src = getenv("KT_SOURCE_ROOT");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -W ignore '%s/tests/runtime/make_small.py' '%s' > '%s/log' 2>&1",
             src ? src : ".", models, models);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "%s/log", models);
        char *log = kt_file_read(cmd, NULL);
        snprintf(models_err, sizeof models_err, "make_small.py failed: %.1900s",
                 log ? log : "(no output)");
        free(log);
    }
}

static void suite_teardown(void) { kt_test_suite_dir_remove(); }

static void test_setup(void) { kt_test_make_dir(); }

/* The models exist: a generator that failed is a failure, never a skip
 * (python3-torch is a dependency deploy/install-deps.sh installs). */
static void need_models(void) { ck_assert_msg(models_err[0] == '\0', "%s", models_err); }

/* Run build-root binary rel to the end; exit status, output in *out. */
static int run_bin(const char *rel, char *const args[], char **out)
{
    static int n;
    char file[64];
    snprintf(file, sizeof file, "run%d.out", n++);
    static const char *const drop[] = {"KT_TOKEN_FILE=", NULL};
    kt_test_proc_t p;
    kt_test_spawn(&p, file, 0, rel, args, drop, NULL);
    int st = 0;
    if (!kt_test_wait(&p, RUN_MS, &st))
        ck_abort_msg("%s did not finish", p.log);
    *out = kt_test_output(&p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int ktune(char *const args[], char **out) { return run_bin("cli/ktune", args, out); }

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][1100];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%.512s/%.512s", dir, name);
    return p;
}

/* Largest |a - b| over the largest |b|, for two .npy files of one shape. */
static double npy_rel_diff(const char *a, const char *b)
{
    float *x = NULL, *y = NULL;
    int64_t dx[8], dy[8];
    int nx = 0, ny = 0;
    ck_assert_msg(kt_npy_read(a, &x, dx, &nx) == 0, "%s", kt_err_msg());
    ck_assert_msg(kt_npy_read(b, &y, dy, &ny) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(nx, ny);
    int64_t n = 1;
    for (int d = 0; d < nx; d++) {
        ck_assert_int_eq(dx[d], dy[d]);
        n *= dx[d];
    }
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        big = fmax(big, fabs(y[i]));
        double d = fabs((double)x[i] - y[i]);
        diff = d > diff || isnan(d) ? d : diff;
    }
    free(x);
    free(y);
    return big > 0 ? diff / big : diff;
}

/* The last line of out is `latency: M ms (min A, max B) over N runs, T threads`. */
static void assert_latency_line(const char *out, int runs, int threads)
{
    const char *last = out, *p;
    size_t len = strlen(out);
    while (len && out[len - 1] == '\n')
        len--;
    for (p = out; p < out + len; p++)
        if (*p == '\n')
            last = p + 1;
    double m, a, b;
    int n, t;
    char tail[64] = "";
    ck_assert_msg(sscanf(last, "latency: %lf ms (min %lf, max %lf) over %d runs, %d %63[a-z]", &m,
                         &a, &b, &n, &t, tail) == 6, "last line: %s", last);
    ck_assert_msg(a <= m && m <= b && a > 0, "%s", last);
    ck_assert_int_eq(n, runs);
    ck_assert_int_eq(t, threads);
    ck_assert_str_eq(tail, threads == 1 ? "thread" : "threads");
}

static char *file_bytes(const char *path, size_t *n)
{
    char *s = kt_file_read(path, n);
    ck_assert_msg(s != NULL, "cannot read %s", path);
    return s;
}

/* ---- the plan, in process ---------------------------------------------------------------- */

START_TEST(runtime_plan_of_resnet18_reuses_the_arena_and_converts_only_at_the_edges)
{
    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    ck_assert_ptr_nonnull(net);
    for (int lay = 0; lay < 2; lay++) {
        kt_net_tasks_t *t = kt_net_extract(net, lay ? KT_NET_NCHW : KT_NET_NHWC);
        ck_assert_ptr_nonnull(t);
        kt_net_plan_t *p = kt_net_plan(net, t, lay ? KT_NET_NCHW : KT_NET_NHWC, 3);
        ck_assert_msg(p != NULL, "%s", kt_err_msg());
        ck_assert_int_eq(p->params_random, 1);
        int tasks = 0, layouts = 0;
        for (int k = 0; k < p->nsteps; k++) {
            tasks += p->steps[k].kind == KT_PLAN_TASK;
            layouts += p->steps[k].kind == KT_PLAN_LAYOUT;
        }
        /* Every appearance of a task is one kernel call, in either layout. */
        ck_assert_int_eq(tasks, t->ninstances);
        /* NHWC converts the NCHW input once; the pooled [1, 512, 1, 1] needs none. */
        ck_assert_int_eq(layouts, lay ? 0 : 1);
        ck_assert_int_lt(p->arena_bytes, p->naive_bytes / 2);
        /* Values alive at the same step never overlap. */
        for (int k = 0; k < p->nsteps; k++) {
            const kt_plan_step_t *s = &p->steps[k];
            for (int q = 0; q < s->nin; q++) {
                if (s->in[q].weight || s->in[q].id < 0)
                    continue;
                const kt_plan_value_t *a = &p->values[kt_net_plan_root(p, s->in[q].id)];
                const kt_plan_value_t *o = &p->values[kt_net_plan_root(p, s->out)];
                if (a->kind != KT_PLAN_V_ARENA || o->kind != KT_PLAN_V_ARENA)
                    continue;
                ck_assert_msg(a->offset + a->numel * 4 <= o->offset ||
                                  o->offset + o->numel * 4 <= a->offset,
                              "step %d (%s) reads and writes overlapping memory", k, s->name);
            }
        }
        kt_net_plan_free(p);
        kt_net_tasks_free(t);
    }
    kt_net_free(net);
}
END_TEST

START_TEST(runtime_plan_names_what_it_cannot_run)
{
    /* An elementwise function without a task or a simple form. */
    kt_net_t *net = kt_net_parse_json(
        "{\"name\": \"odd\", \"layers\": [{\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 8]},"
        "{\"name\": \"fc\", \"op\": \"dense\", \"units\": 4},"
        "{\"name\": \"e\", \"op\": \"elementwise\", \"fn\": \"exp\"}]}");
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(kt_net_plan(net, t, KT_NET_NHWC, 0));
    ck_assert_msg(strstr(kt_err_msg(), "'e'") && strstr(kt_err_msg(), "cannot run"), "%s",
                  kt_err_msg());
    kt_net_tasks_free(t);
    kt_net_free(net);
}
END_TEST

/* ---- a PyTorch model, tuned, built and run ---------------------------------------------- */

START_TEST(runtime_tuned_onnx_model_matches_pytorch_from_store_and_tracker)
{
    need_models();
    char db[512], y[512], tok[512], port_file[512], out_dir[512];
    snprintf(db, sizeof db, "%s/tuned.db", kt_test_dir);
    snprintf(y, sizeof y, "%s/y.npy", kt_test_dir);
    snprintf(tok, sizeof tok, "%s/token", kt_test_dir);
    snprintf(port_file, sizeof port_file, "%s/addr", kt_test_dir);
    snprintf(out_dir, sizeof out_dir, "%s/lib", kt_test_dir);
    char *model = path_in(models, "small_bn.onnx"), *x = path_in(models, "x.npy");
    char *y_ref = path_in(models, "y_ref.npy");
    char *out = NULL;

    char *tune[] = {"tune", "--onnx", model, "--trials", "16", "--db", db, NULL};
    ck_assert_msg(ktune(tune, &out) == 0, "%s", out);
    free(out);
    /* a network's candidates were timed with their weights evicted, 3 repeats */
    char *opts = kt_test_job_options(db, 1);
    ck_assert_msg(opts && strstr(opts, "\"flush_weights\":true") && strstr(opts, "\"repeat\":3"),
                  "%s", opts ? opts : "?");
    free(opts);

    /* From the store, in both layouts, every kernel checked against its reference. */
    const char *layouts[] = {"NHWC", "NCHW"};
    for (int l = 0; l < 2; l++) {
        char *run[] = {"run", "--onnx", model, "--db", db, "--layout", (char *)layouts[l],
                       "--input", x, "--output", y, "--repeat", "3", "--check", NULL};
        ck_assert_msg(ktune(run, &out) == 0, "%s", out);
        ck_assert_msg(strstr(out, "check: largest relative error"), "%s", out);
        /* Tuned in NHWC: the NCHW tasks are other workloads, without records.
         * (16 trials need not reach every NHWC task: some may fail to measure.) */
        if (l)
            ck_assert_msg(strstr(out, "no record"), "%s", out);
        /* NHWC: the tuned steps' time beside their records' costs. */
        ck_assert_msg(strstr(out, "| Tuned (ms) |"), "%s", out);
        if (!l) {
            int nt = 0;
            double here = 0, est = 0;
            const char *ts = strstr(out, "tuned steps: ");
            ck_assert_msg(ts && sscanf(ts, "tuned steps: %d, %lf ms here against %lf ms", &nt,
                                       &here, &est) == 3, "%s", out);
            ck_assert_msg(nt >= 1 && here > 0 && est > 0, "%s", out);
            /* and what ran between the kernels: at least the input's conversion */
            int nb = 0, nl = 0;
            double between = -1, layout = -1;
            const char *bt = strstr(out, "steps without a task: ");
            ck_assert_msg(bt && sscanf(bt, "steps without a task: %d, %lf ms (layout conversions: "
                                       "%d, %lf ms)", &nb, &between, &nl, &layout) == 4,
                          "%s", out);
            ck_assert_msg(nl >= 1 && nb >= nl && layout >= 0 && between >= layout, "%s", out);
            /* the same steps by kind: their counts add up, layout among them */
            const char *bk = strstr(bt, "\n  by kind:");
            ck_assert_msg(bk != NULL, "%s", out);
            int counted = 0, kl = -1;
            char kind[32];
            for (const char *q = bk + 11; *q && *q != '\n';) {
                int c = 0, used = 0;
                double ms = -1;
                ck_assert_msg(sscanf(q, " %31[a-z] %d, %lf ms%n", kind, &c, &ms, &used) == 3 &&
                                  c >= 1 && ms >= 0,
                              "%s", out);
                counted += c;
                if (strcmp(kind, "layout") == 0)
                    kl = c;
                q += used;
                q += *q == ';';
            }
            ck_assert_msg(counted == nb && kl == nl, "%s", out);
        }
        assert_latency_line(out, 3, 1);
        free(out);
        double d = npy_rel_diff(y, y_ref);
        ck_assert_msg(d <= TOL, "%s: %g from PyTorch", layouts[l], d);
    }
    /* The exporter's folded model computes the same. */
    /* (--input NAME=DIMS naming no file is the ONNX input's shape, as in build.) */
    char *folded[] = {"run", "--onnx", path_in(models, "small.onnx"), "--db", db, "--input",
                      "data=1x3x32x32", "--input", x, "--output", y, "--repeat", "1",
                      "--threads", "2", NULL};
    ck_assert_msg(ktune(folded, &out) == 0, "%s", out);
    assert_latency_line(out, 1, 2);
    free(out);
    ck_assert_double_le(npy_rel_diff(y, y_ref), TOL);

    /* The same records served by a tracker (QueryBest), and one job's (ListRecords). */
    ck_assert_int_eq(kt_file_write(tok, "rt-secret\n", 10), 0);
    /* Daemons refuse token files other users can read (docs/security.md). */
    ck_assert_int_eq(chmod(tok, 0600), 0);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--token-file", tok,
                     "--port-file", port_file, NULL};
    kt_test_proc_t tr;
    kt_test_spawn(&tr, "tracker.out", 0, "tracker/ktune-tracker", targs, NULL, NULL);
    char *addr = NULL;
    for (int waited = 0; waited < 60000 && !addr; waited += 20) {
        addr = kt_file_read(port_file, NULL);
        if (!addr)
            kt_test_sleep_ms(20);
    }
    ck_assert_ptr_nonnull(addr);
    addr[strcspn(addr, "\n")] = '\0';
    char *remote[] = {"run", "--onnx", model, "--tracker", addr, "--token-file", tok, "--input",
                      x, "--output", y, "--repeat", "2", NULL};
    ck_assert_msg(ktune(remote, &out) == 0, "%s", out);
    free(out);
    ck_assert_double_le(npy_rel_diff(y, y_ref), TOL);
    char *job[] = {"build", "--onnx", model, "--tracker", addr, "--token-file", tok, "--job", "1",
                   "--out", out_dir, NULL};
    ck_assert_msg(ktune(job, &out) == 0, "%s", out);
    /* The job's records are the store's: the same tasks tuned as the store
     * gives (the tuning job may not have reached all 11 in 16 trials: 8
     * layers' tasks and, by default, the Winograd alternatives of 3). */
    int tuned = -1;
    const char *at = strstr(out, "11 tasks (");
    ck_assert_msg(at && sscanf(at, "11 tasks (%d tuned)", &tuned) == 1 && tuned >= 1, "%s", out);
    free(out);
    /* Named after the model's file, not the exporter's graph name. */
    ck_assert_int_eq(access(path_in(out_dir, "small_bn.h"), R_OK), 0);
    /* Weights are laid out for their kernels at build time: no kernel copies one. */
    char *src = file_bytes(path_in(out_dir, "small_bn.c"), NULL);
    if (tuned == 11)   /* then the convolutions' tiled schedules rewrite their weights */
        ck_assert_msg(strstr(src, "_layout = kt_bufs[") != NULL, "no kernel reads a packed weight");
    ck_assert_msg(strstr(src, "_layout = kt_ws + ") == NULL,   /* a copy in the workspace */
                  "a kernel still copies its weight");
    free(src);
    /* A job the tracker lacks is an error, not a build with no records. */
    char *nojob[] = {"build", "--onnx", model, "--tracker", addr, "--token-file", tok, "--job",
                     "7", "--out", out_dir, NULL};
    ck_assert_int_eq(ktune(nojob, &out), 1);
    ck_assert_msg(strstr(out, "ktune build: no job 7") && !strstr(out, "default schedule"), "%s",
                  out);
    free(out);
    char *notok[] = {"build", "--onnx", model, "--tracker", addr, "--out", out_dir, NULL};
    ck_assert_int_eq(ktune(notok, &out), 1);
    ck_assert_msg(strstr(out, "UNAUTHENTICATED"), "%s", out);
    free(out);
    free(addr);
    kill(tr.pid, SIGTERM);
    int st = 0;
    ck_assert(kt_test_wait(&tr, 30000, &st));
}
END_TEST

/* ---- ResNet-18 in both layouts ------------------------------------------------------------ */

/* A store with one sampled schedule per task of resnet-18 in `layout`, so
 * the build runs real schedules (not the reference) against the check. */
static void store_sampled_states_of(const char *db, kt_net_t *net, kt_net_layout_t layout,
                                    int flags)
{
    kt_net_tasks_t *t = kt_net_extract_ex(net, layout, flags);
    ck_assert_ptr_nonnull(t);
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_sched_params_t params;
    kt_sched_params_default(&params);
    kt_rng_t rng;
    kt_rng_seed(&rng, 11);
    for (int i = 0; i < t->ntasks; i++) {
        const kt_dag_t *dag = kt_workload_dag(t->tasks[i].wl);
        kt_sched_state_t **sk = NULL;
        int nsk = 0;
        ck_assert_int_eq(kt_sched_sketches(dag, &params, &sk, &nsk), 0);
        ck_assert_int_gt(nsk, 0);
        kt_sched_state_t *st = kt_sched_sample(dag, &params, sk[0], &rng);
        ck_assert_ptr_nonnull(st);
        char *json = kt_sched_state_to_json(st, dag);
        double cost = t->tasks[i].alt_of >= 0 ? 0.5e-3 : 1e-3;   /* alternatives win */
        kt_record_t r = {.workload_key = kt_workload_key(t->tasks[i].wl), .target = "cpu",
                         .state_json = json, .state_hash = kt_sched_state_hash(st, dag),
                         .costs = &cost, .ncosts = 1, .timestamp = 1.0};
        ck_assert_msg(kt_store_put_records(s, &r, 1) == 0, "%s", kt_err_msg());
        free(json);
        kt_sched_state_free(st);
        for (int k = 0; k < nsk; k++)
            kt_sched_state_free(sk[k]);
        free(sk);
    }
    kt_store_close(s);
    kt_net_tasks_free(t);
    kt_net_free(net);
}

static void store_sampled_states(const char *db, kt_net_layout_t layout)
{
    store_sampled_states_of(db, kt_net_builtin("resnet-18", 1, 0), layout, 0);
}

/* A weight packed for a loop nest with more loops than safetensors' rank
 * limit (a Winograd bgemm weight split over every tile level: 9 loops) is
 * written with its leading loops merged, its data in packed order; the
 * generated loader checks only the element count. Fails when the writer
 * refuses rank 9 (the build stopped with "rank 9 not supported"). */
START_TEST(runtime_weights_packed_beyond_rank_8_are_written)
{
    float data[128];
    for (int i = 0; i < 128; i++)
        data[i] = (float)i;
    kt_plan_weight_t wt = {.name = "conv.weight", .ndim = 4, .dims = {2, 4, 2, 8}, .numel = 128,
                           .data = data};
    kt_net_plan_t plan;
    memset(&plan, 0, sizeof plan);
    plan.nweights = 1;
    plan.weights = &wt;
    /* 9 loops of 2,2,2,2,2,2,2,1,1 walking the weight in order */
    kt_codegen_pack_t pk = {.buf = 1, .ndim = 9};
    for (int m = 0; m < 9; m++) {
        pk.shape[m] = m < 7 ? 2 : 1;
        pk.step[m] = m < 7 ? (int64_t)1 << (6 - m) : 0;
    }
    const kt_codegen_pack_t *how[1] = {&pk};
    int64_t bytes = 0;
    ck_assert_msg(kt_netlib_write_weights(&plan, how, kt_test_dir, "rank9", &bytes) == 0, "%s",
                  kt_err_msg());
    ck_assert_int_eq(bytes, 512);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank9.safetensors", kt_test_dir);
    kt_safetensors_t *st = kt_safetensors_open(path);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int nd = 0;
    const float *got = kt_safetensors_get(st, "conv.weight", dims, &nd);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(nd, 8);
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= dims[d];
    ck_assert_int_eq(n, 128);
    for (int i = 0; i < 128; i++)
        ck_assert_float_eq(got[i], data[i]);
    kt_safetensors_close(st);
}
END_TEST

/* Winograd rounds differently from PyTorch's direct convolution (te suite:
 * a few 1e-6 of the output's rms per tile-4 layer); three layers in a row
 * stay well inside the suite's bar. */
#define TOL_WINOGRAD TOL

START_TEST(runtime_winograd_alternatives_build_and_match_pytorch)
{
    need_models();
    char db[512], y[512], y2[512];
    snprintf(db, sizeof db, "%s/wino.db", kt_test_dir);
    snprintf(y, sizeof y, "%s/y.npy", kt_test_dir);
    snprintf(y2, sizeof y2, "%s/y2.npy", kt_test_dir);
    char *model = path_in(models, "small_bn.onnx"), *x = path_in(models, "x.npy");
    char *y_ref = path_in(models, "y_ref.npy");
    kt_net_t *net = kt_net_onnx_load(model, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    /* Its three 3x3 stride-1 convolutions get alternatives, not the 1x1 one. */
    kt_net_tasks_t *t = kt_net_extract_ex(net, KT_NET_NHWC, KT_NET_EXTRACT_WINOGRAD);
    kt_net_tasks_t *plain = kt_net_extract(net, KT_NET_NHWC);
    int nalt = 0;
    for (int i = 0; i < t->ntasks; i++)
        if (t->tasks[i].alt_of >= 0) {
            nalt++;
            ck_assert_int_ge(i, plain->ntasks);
            ck_assert_str_eq(kt_workload_op(t->tasks[i].wl), "conv2d_winograd_nhwc");
            ck_assert_int_eq(t->tasks[i].weight, t->tasks[t->tasks[i].alt_of].weight);
        }
    ck_assert_int_eq(t->ntasks, plain->ntasks + nalt);
    ck_assert_int_eq(nalt, 3);
    kt_net_tasks_free(t);
    kt_net_tasks_free(plain);
    store_sampled_states_of(db, net, KT_NET_NHWC, KT_NET_EXTRACT_WINOGRAD);

    char *out = NULL;
    char *run[] = {"run", "--onnx", model, "--winograd", "--db", db, "--input", x, "--output", y,
                   "--repeat", "1", "--check", NULL};
    ck_assert_msg(ktune(run, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "(Winograd)): faster than task"), "%s", out);
    ck_assert_msg(strstr(out, "check: largest relative error"), "%s", out);
    ck_assert_msg(!strstr(out, "no record"), "%s", out);
    free(out);
    double d = npy_rel_diff(y, y_ref);
    ck_assert_msg(d <= TOL_WINOGRAD, "Winograd build: %g from PyTorch", d);
    /* With --no-winograd the same store builds the direct convolutions. */
    char *direct[] = {"run", "--onnx", model, "--no-winograd", "--db", db, "--input", x,
                      "--output", y2, "--repeat", "1", NULL};
    ck_assert_msg(ktune(direct, &out) == 0, "%s", out);
    ck_assert_msg(!strstr(out, "Winograd"), "%s", out);
    free(out);
    ck_assert_double_le(npy_rel_diff(y2, y_ref), TOL);
    char *nchw[] = {"run", "--onnx", model, "--winograd", "--layout", "NCHW", "--db", db, NULL};
    ck_assert_int_eq(ktune(nchw, &out), 2);
    ck_assert_msg(strstr(out, "NHWC layout only"), "%s", out);
    free(out);
}
END_TEST

START_TEST(runtime_resnet18_runs_checked_in_both_layouts_with_one_answer)
{
    const char *layouts[] = {"NHWC", "NCHW"};
    char y[2][512];
    for (int l = 0; l < 2; l++) {
        char db[512];
        snprintf(db, sizeof db, "%s/r%d.db", kt_test_dir, l);
        snprintf(y[l], sizeof y[l], "%s/y%d.npy", kt_test_dir, l);
        store_sampled_states(db, l ? KT_NET_NCHW : KT_NET_NHWC);
        char *out = NULL;
        char *run[] = {"run", "--network", "resnet-18", "--layout", (char *)layouts[l], "--db", db,
                       "--seed", "5", "--output", y[l], "--repeat", "1", "--check", NULL};
        ck_assert_msg(ktune(run, &out) == 0, "%s", out);
        ck_assert_msg(strstr(out, "check: largest relative error"), "%s", out);
        ck_assert_msg(!strstr(out, "no record"), "%s", out);
        assert_latency_line(out, 1, 1);
        free(out);
    }
    /* Same seed, same weights: the layouts differ only in rounding. */
    double d = npy_rel_diff(y[0], y[1]);
    ck_assert_msg(d <= TOL, "NHWC and NCHW differ by %g", d);
}
END_TEST

/* ---- the library in a program --------------------------------------------------------------- */

static const char *const PROGRAM =
    "#include <stdio.h>\n#include <stdlib.h>\n#include \"small_cnn.h\"\n"
    "static int save(const char *p, const float *y) {\n"
    "    FILE *f = fopen(p, \"wb\");\n"
    "    int ok = f && fwrite(y, sizeof(float), small_cnn_OUTPUT_NUMEL, f) == small_cnn_OUTPUT_NUMEL;\n"
    "    return f && fclose(f) == 0 && ok ? 0 : 1;\n}\n"
    "int main(int argc, char **argv) {\n"
    "    if (argc != 6) return 2;\n"
    "    static float x[small_cnn_INPUT_NUMEL], y1[small_cnn_OUTPUT_NUMEL], y2[small_cnn_OUTPUT_NUMEL];\n"
    "    FILE *f = fopen(argv[1], \"rb\");\n"
    "    if (!f || fread(x, sizeof(float), small_cnn_INPUT_NUMEL, f) != small_cnn_INPUT_NUMEL) return 3;\n"
    "    fclose(f);\n"
    "    small_cnn_t *a = small_cnn_create(argv[2]), *b = small_cnn_create(argv[3]);\n"
    "    if (!a || !b) { fprintf(stderr, \"%s\\n\", small_cnn_last_error()); return 4; }\n"
    "    if (small_cnn_run(a, x, y1) || small_cnn_run(b, x, y2) || small_cnn_run(a, x, y1)) return 5;\n"
    "    small_cnn_destroy(a);\n    small_cnn_destroy(b);\n"
    "    if (small_cnn_create(\"/nonexistent.safetensors\")) return 6;\n"
    "    printf(\"%s\\n\", small_cnn_last_error());\n"
    "    return save(argv[4], y1) || save(argv[5], y2);\n}\n";

START_TEST(runtime_generated_library_links_into_a_program_twice)
{
    const char *src = getenv("KT_SOURCE_ROOT");
    char netfile[512], x[512], prog[512], exe[512], cmd[4096];
    snprintf(netfile, sizeof netfile, "%s/tests/net/cnn.json", src ? src : ".");
    snprintf(x, sizeof x, "%s/x.npy", kt_test_dir);
    snprintf(prog, sizeof prog, "%s/main.c", kt_test_dir);
    snprintf(exe, sizeof exe, "%s/main", kt_test_dir);
    /* The input, as .npy for ktune run and raw for the program. */
    static float in[3 * 32 * 32];
    kt_rng_t r;
    kt_rng_seed(&r, 99);
    for (int i = 0; i < 3 * 32 * 32; i++)
        in[i] = (float)(kt_rng_double(&r) * 2 - 1);
    int64_t dims[4] = {1, 3, 32, 32};
    ck_assert_int_eq(kt_npy_write(x, in, dims, 4), 0);
    ck_assert_int_eq(kt_file_write(path_in(kt_test_dir, "x.bin"), in, sizeof in), 0);
    char *out = NULL;
    char dirs[2][512], want[2][512];
    for (int k = 0; k < 2; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/seed%d", kt_test_dir, k + 1);
        snprintf(want[k], sizeof want[k], "%s/want%d.npy", kt_test_dir, k + 1);
        char seed[8];
        snprintf(seed, sizeof seed, "%d", k + 1);
        char *run[] = {"run", "--network-file", netfile, "--seed", seed, "--out", dirs[k],
                       "--input", x, "--output", want[k], "--repeat", "1", "--db",
                       path_in(kt_test_dir, "none.db"), NULL};
        /* A --db that does not exist is an error... */
        ck_assert_int_eq(ktune(run, &out), 1);
        ck_assert_msg(strstr(out, "no store at"), "%s", out);
        free(out);
        /* ...an empty store is not: every task gets the default schedule. */
        kt_store_t *s = kt_store_open(path_in(kt_test_dir, "none.db"), KT_STORE_CREATE);
        ck_assert_ptr_nonnull(s);
        kt_store_close(s);
        ck_assert_msg(ktune(run, &out) == 0, "%s", out);
        ck_assert_msg(strstr(out, "no record, default schedule"), "%s", out);
        free(out);
        unlink(path_in(kt_test_dir, "none.db"));
    }
    /* Both builds share one source: the weights differ, the code does not. */
    size_t n1, n2;
    char *c1 = file_bytes(path_in(dirs[0], "small_cnn.c"), &n1);
    char *c2 = file_bytes(path_in(dirs[1], "small_cnn.c"), &n2);
    ck_assert(n1 == n2 && memcmp(c1, c2, n1) == 0);
    free(c1);
    free(c2);
    ck_assert_int_eq(kt_file_write(prog, PROGRAM, strlen(PROGRAM)), 0);
    snprintf(cmd, sizeof cmd, "cc -O2 -march=native -fopenmp -std=c17 -I'%s' -o '%s' '%s' '%s/small_cnn.c' "
             "-lm > '%s/cc.log' 2>&1", dirs[0], exe, prog, dirs[0], kt_test_dir);
    ck_assert_msg(system(cmd) == 0, "%s", kt_file_read(path_in(kt_test_dir, "cc.log"), NULL));
    char *w1 = path_in(dirs[0], "small_cnn.safetensors"), *w2 = path_in(dirs[1], "small_cnn.safetensors");
    char *o1 = path_in(kt_test_dir, "o1.bin"), *o2 = path_in(kt_test_dir, "o2.bin");
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' '%s' '%s' > '%s/prog.log' 2>&1", exe,
             path_in(kt_test_dir, "x.bin"), w1, w2, o1, o2, kt_test_dir);
    ck_assert_msg(system(cmd) == 0, "%s", kt_file_read(path_in(kt_test_dir, "prog.log"), NULL));
    char *log = file_bytes(path_in(kt_test_dir, "prog.log"), NULL);
    ck_assert_msg(strstr(log, "cannot open /nonexistent.safetensors"), "%s", log);
    free(log);
    /* Each instance computes what ktune run computed with its weights. */
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        float *got = (float *)file_bytes(k ? o2 : o1, &n);
        float *w = NULL;
        int64_t d[8];
        int nd = 0;
        ck_assert_int_eq(kt_npy_read(want[k], &w, d, &nd), 0);
        ck_assert_int_eq(n, 10 * sizeof(float));
        for (int i = 0; i < 10; i++)
            ck_assert_msg(fabsf(got[i] - w[i]) <= 1e-5f * (1 + fabsf(w[i])), "%d: %g vs %g", i,
                          got[i], w[i]);
        free(got);
        free(w);
    }
    ck_assert_double_gt(npy_rel_diff(want[0], want[1]), 1e-3);
}
END_TEST

/* ---- the CUDA build ----------------------------------------------------------------------- */

START_TEST(runtime_cuda_build_compiles_and_runs_where_there_is_a_gpu)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    need_models();
    char dir[512], db[512], cmd[4096];
    snprintf(dir, sizeof dir, "%s/cu", kt_test_dir);
    snprintf(db, sizeof db, "%s/cu.db", kt_test_dir);
    char *model = path_in(models, "small_bn.onnx");
    /* A store with a GPU schedule for the first task only: the others get
     * the seeded default schedule. */
    kt_net_t *net = kt_net_onnx_load(model, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    kt_hw_params_t hw;
    kt_sched_params_t params;
    ck_assert_int_eq(kt_hw_params_preset("sm_80", &hw), 0);
    ck_assert_int_eq(kt_sched_params_from_hw(&hw, &params), 0);
    const kt_dag_t *dag = kt_workload_dag(t->tasks[0].wl);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    ck_assert_int_eq(kt_sched_sketches(dag, &params, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 3);
    kt_sched_state_t *st = NULL;
    for (int tries = 0; tries < 64 && !st; tries++) {
        st = kt_sched_sample(dag, &params, sk[tries % nsk], &rng);
        if (st && kt_sched_state_validate(dag, &params, st) != 0) {
            kt_sched_state_free(st);
            st = NULL;
        }
    }
    ck_assert_ptr_nonnull(st);
    char *json = kt_sched_state_to_json(st, dag);
    double cost = 1e-4;
    kt_record_t r = {.workload_key = kt_workload_key(t->tasks[0].wl), .target = "cuda",
                     .state_json = json, .state_hash = kt_sched_state_hash(st, dag),
                     .costs = &cost, .ncosts = 1, .timestamp = 1.0};
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(kt_store_put_records(s, &r, 1) == 0, "%s", kt_err_msg());
    kt_store_close(s);
    free(json);
    kt_sched_state_free(st);
    for (int k = 0; k < nsk; k++)
        kt_sched_state_free(sk[k]);
    free(sk);
    kt_net_tasks_free(t);
    kt_net_free(net);

    char *out = NULL;
    char *build[] = {"build", "--onnx", model, "--target", "cuda", "--arch", "sm_80", "--db", db,
                     "--out", dir, NULL};
    ck_assert_msg(ktune(build, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "8 tasks (1 tuned)") && strstr(out, "small_bn.cubin"), "%s", out);
    free(out);
    /* The .cu compiles with NVRTC and holds every kernel the host launches. */
    char *cu = file_bytes(path_in(dir, "small_bn.cu"), NULL);
    kt_nvrtc_result_t res;
    /* in a child: the GPU probe below forks, and CUDA cannot start in a child
     * of a process where NVRTC compiled */
    ck_assert_msg(kt_nvrtc_compile_isolated(cu, "sm_75", NULL, 0, &res) == 0, "%s", kt_err_msg());
    char *host = file_bytes(path_in(dir, "small_bn_host.c"), NULL);
    for (const char *q = strstr(host, "kt_fn_names[KT_NF] = {"); q && *q != '}'; q++) {
        if (*q != '"')
            continue;
        char fn[256];
        const char *e = strchr(q + 1, '"');
        snprintf(fn, sizeof fn, "%.*s", (int)(e - q - 1), q + 1);
        ck_assert_msg(kt_nvrtc_result_kernel(&res, fn) != NULL, "no kernel %s", fn);
        q = e;
    }
    kt_nvrtc_result_clear(&res);
    free(cu);
    free(host);
    /* The host runner compiles without a warning and links against the driver. */
    snprintf(cmd, sizeof cmd,
             "cc -std=c17 -Wall -Wextra -Werror -O2 -shared -fPIC -I'%s/include' -o '%s/h.so' "
             "'%s/small_bn_host.c' -L'%s/lib64/stubs' -lcuda > '%s/cc.log' 2>&1",
             KT_CUDA_PATH, dir, dir, KT_CUDA_PATH, dir);
    ck_assert_msg(system(cmd) == 0, "%s", kt_file_read(path_in(dir, "cc.log"), NULL));

    char y[512];
    snprintf(y, sizeof y, "%s/y.npy", kt_test_dir);
    char *run[] = {"run", "--onnx", model, "--target", "cuda", "--arch", "sm_80", "--db", db,
                   "--input", path_in(models, "x.npy"), "--output", y, "--repeat", "3", NULL};
    int rc = ktune(run, &out);
    kt_hw_params_t dev;
    if (kt_cuda_device_probe(0, NULL, 60, &dev) != 0) {
        ck_assert_int_eq(rc, 1);
        ck_assert_msg(strstr(out, "--target cuda needs an NVIDIA GPU"), "%s", out);
        free(out);
        KT_SKIP_NO_GPU("running the CUDA build");
    }
    ck_assert_msg(rc == 0, "%s", out);
    free(out);
    ck_assert_double_le(npy_rel_diff(y, path_in(models, "y_ref.npy")), TOL);
}
END_TEST

/* ---- the CUDA build on the CPU -------------------------------------------------------------- */

/* Runs the network NET (-DNET=name -DNET_H='"name.h"') through its generated
 * host runner: two instances, a profiled run, a second run, a bad weights
 * path; writes the first instance's output to y.bin in the current
 * directory. */
static const char *const CU_PROGRAM =
    "#include <stdio.h>\n#include <string.h>\n#include NET_H\n"
    "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n#define F(s) CAT(NET, _##s)\n"
    "int main(int argc, char **argv) {\n"
    "    if (argc != 4) return 2;\n"
    "    static float x[F(INPUT_NUMEL)], y1[F(OUTPUT_NUMEL)], y2[F(OUTPUT_NUMEL)];\n"
    "    double t[256];\n"
    "    FILE *f = fopen(argv[1], \"rb\");\n"
    "    if (!f || fread(x, sizeof(float), F(INPUT_NUMEL), f) != F(INPUT_NUMEL)) return 3;\n"
    "    fclose(f);\n"
    "    F(t) *a = F(create)(argv[2]), *b = F(create)(argv[2]);\n"
    "    if (!a || !b) { fprintf(stderr, \"create: %s\\n\", F(last_error)()); return 4; }\n"
    "    if (F(num_steps)() > 256) return 5;\n"
    "    if (F(run)(a, x, y1) || F(run_timed)(b, x, y2, t)) {\n"
    "        fprintf(stderr, \"run: %s\\n\", F(last_error)()); return 6; }\n"
    "    /* instances and runs are independent: the same bits every time */\n"
    "    if (memcmp(y1, y2, sizeof y1)) { fprintf(stderr, \"instances differ\\n\"); return 7; }\n"
    "    F(destroy)(b);\n"
    "    if (F(run)(a, x, y2) || memcmp(y1, y2, sizeof y1)) {\n"
    "        fprintf(stderr, \"second run: %s\\n\", F(last_error)()); return 8; }\n"
    "    F(destroy)(a);\n"
    "    if (F(create)(argv[3])) return 9;\n"
    "    printf(\"%s\\n\", F(last_error)());\n"
    "    f = fopen(\"y.bin\", \"wb\");\n"
    "    int ok = f && fwrite(y1, sizeof(float), F(OUTPUT_NUMEL), f) == F(OUTPUT_NUMEL);\n"
    "    return f && fclose(f) == 0 && ok ? 0 : 10;\n}\n";

/* Largest |got - want| over the largest |want|; got is raw float32. */
static double bin_rel_diff(const char *got_path, const char *want_npy)
{
    size_t n = 0;
    float *got = (float *)file_bytes(got_path, &n), *w = NULL;
    int64_t d[8];
    int nd = 0;
    ck_assert_msg(kt_npy_read(want_npy, &w, d, &nd) == 0, "%s", kt_err_msg());
    int64_t numel = 1;
    for (int i = 0; i < nd; i++)
        numel *= d[i];
    ck_assert_int_eq((int64_t)n, numel * (int64_t)sizeof(float));
    double big = 0, diff = 0;
    for (int64_t i = 0; i < numel; i++) {
        big = fmax(big, fabs(w[i]));
        double e = fabs((double)got[i] - w[i]);
        diff = e > diff || isnan(e) ? e : diff;
    }
    free(got);
    free(w);
    return big > 0 ? diff / big : diff;
}

/* Builds `args` (a ktune build ... --target cuda --out DIR) into DIR, then
 * runs network `name` from it on the CPU: the .cu as a cuda_cpu module
 * where the stand-in's cuModuleLoad("NAME.cubin") finds it, the host file
 * compiled unchanged against the toolkit's cuda.h and linked with
 * tests/cuda_driver_cpu.c instead of -lcuda, input x.npy. The output is
 * DIR/y.bin. */
static void cuda_on_cpu(char *const args[], const char *dir, const char *name, const char *x)
{
    const char *build = getenv("KT_BUILD_ROOT");
    ck_assert_msg(build != NULL, "KT_BUILD_ROOT is not set");
    char *out = NULL, file[300], cmd[8192];
    ck_assert_msg(ktune(args, &out) == 0, "%s", out);
    free(out);
    snprintf(file, sizeof file, "%s.cu", name);
    char *cu = file_bytes(path_in(dir, file), NULL);
    char *log = NULL;
    snprintf(file, sizeof file, "%s.cpu.so", name);
    int rc = kt_cuda_cpu_module_compile(cu, path_in(dir, file), &log);
    ck_assert_msg(rc == 0, "%s: %s", kt_err_msg(), log ? log : "");
    free(log);
    free(cu);
    /* The input as raw floats for the program. */
    float *xv = NULL;
    int64_t xd[8];
    int xn = 0;
    ck_assert_int_eq(kt_npy_read(x, &xv, xd, &xn), 0);
    int64_t numel = 1;
    for (int d = 0; d < xn; d++)
        numel *= xd[d];
    ck_assert_int_eq(kt_file_write(path_in(dir, "x.bin"), xv, (size_t)numel * sizeof(float)), 0);
    free(xv);
    ck_assert_int_eq(kt_file_write(path_in(dir, "main.c"), CU_PROGRAM, strlen(CU_PROGRAM)), 0);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cc -std=c17 -Wall -Wextra -Werror -O2 -I'%s/include' -I. "
             "-DNET=%s -DNET_H='\"%s.h\"' -o main main.c %s_host.c "
             "'%s/tests/libkt_cuda_driver_cpu.so' -Wl,-rpath,'%s/tests' > cc.log 2>&1",
             dir, KT_CUDA_PATH, name, name, name, build, build);
    ck_assert_msg(system(cmd) == 0, "%s", kt_file_read(path_in(dir, "cc.log"), NULL));
    snprintf(cmd, sizeof cmd, "cd '%s' && ./main x.bin %s.safetensors /nonexistent.safetensors "
             "> run.log 2>&1", dir, name);
    int st = system(cmd);
    char *runlog = file_bytes(path_in(dir, "run.log"), NULL);
    ck_assert_msg(st == 0, "exit %d: %s", st, runlog);
    ck_assert_msg(strstr(runlog, "cannot open /nonexistent.safetensors"), "%s", runlog);
    free(runlog);
}

/* An empty store at kt_test_dir/empty.db: every task gets its default schedule. */
static char *empty_store(void)
{
    char *db = path_in(kt_test_dir, "empty.db");
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_store_close(s);
    return db;
}

/* ONNX model `name` of the models directory on input x_file, run by the C
 * build and built for CUDA and run on the CPU stand-in, from an empty store:
 * both within TOL of PyTorch's y_ref_file and of each other. */
static void onnx_on_cpu_and_cuda(const char *name, const char *x_file, const char *y_ref_file)
{
    need_models();
    /* path_in's buffers are reused: these outlive many calls */
    char dir[512], db[512], y_cpu[512], model[1100], x[1100], y_ref[1100];
    snprintf(dir, sizeof dir, "%s/cu", kt_test_dir);
    snprintf(y_cpu, sizeof y_cpu, "%s/y_cpu.npy", kt_test_dir);
    snprintf(db, sizeof db, "%s", empty_store());
    snprintf(model, sizeof model, "%.512s/%.300s.onnx", models, name);
    snprintf(x, sizeof x, "%s", path_in(models, x_file));
    snprintf(y_ref, sizeof y_ref, "%s", path_in(models, y_ref_file));
    char *out = NULL;
    char *cpurun[] = {"run", "--onnx", model, "--db", db, "--input", x, "--output", y_cpu,
                      "--repeat", "1", NULL};
    ck_assert_msg(ktune(cpurun, &out) == 0, "%s", out);
    free(out);
    double d = npy_rel_diff(y_cpu, y_ref);
    ck_assert_msg(d <= TOL, "CPU build: %g from PyTorch", d);
    char *cubuild[] = {"build", "--onnx", model, "--target", "cuda", "--arch", "sm_80", "--db",
                       db, "--out", dir, NULL};
    cuda_on_cpu(cubuild, dir, name, x);
    double d_cpu = bin_rel_diff(path_in(dir, "y.bin"), y_cpu);
    double d_ref = bin_rel_diff(path_in(dir, "y.bin"), y_ref);
    ck_assert_msg(d_cpu <= TOL && d_ref <= TOL, "CUDA build on the CPU: %g from the CPU build, "
                  "%g from PyTorch", d_cpu, d_ref);
}

START_TEST(runtime_cuda_build_runs_on_the_cpu_like_the_cpu_build)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    onnx_on_cpu_and_cuda("small_bn", "x.npy", "y_ref.npy");
}
END_TEST

/* nn.MultiheadAttention's self-attention: its packed q/k/v projection is
 * three dense layers, no reference operator, so it builds for CUDA (before,
 * the slices' reference calls refused it); on the CPU stand-in it computes
 * what the CPU build and PyTorch do. */
START_TEST(runtime_cuda_build_of_an_attention_block_runs_on_the_cpu)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    onnx_on_cpu_and_cuda("attn", "x_attn.npy", "y_attn.npy");
}
END_TEST

/* torchvision's ShuffleNet v2 units: their channel halves are strided views,
 * which the CUDA build runs with its transpose kernel (before, it refused
 * their reference calls), and their shuffles transposes of aliases; on the
 * CPU stand-in it computes what the CPU build and PyTorch do. */
START_TEST(runtime_cuda_build_of_shufflenet_units_runs_on_the_cpu)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    onnx_on_cpu_and_cuda("shuffle", "x_shuffle.npy", "y_shuffle.npy");
}
END_TEST

/* Network file `json` (network `name`, one input of shape dims) run by the
 * C build into y_cpu (kt_test_dir/y_cpu.npy) and built for CUDA into dir
 * (kt_test_dir/cu) and run there on the CPU (cuda_on_cpu), both on the same
 * seeded input in [-2, 2) and seeded weights, from an empty store. */
static void net_file_on_cpu_and_cuda(const char *json, const char *name, const int64_t dims[4],
                                     char dir[512], char y_cpu[512])
{
    char db[512], netfile[512], x[512];
    snprintf(dir, 512, "%s/cu", kt_test_dir);
    snprintf(netfile, sizeof netfile, "%s/%s.json", kt_test_dir, name);
    snprintf(x, sizeof x, "%s/x.npy", kt_test_dir);
    snprintf(y_cpu, 512, "%s/y_cpu.npy", kt_test_dir);
    snprintf(db, sizeof db, "%s", empty_store());
    ck_assert_int_eq(kt_file_write(netfile, json, strlen(json)), 0);
    int64_t numel = dims[0] * dims[1] * dims[2] * dims[3];
    float *in = malloc(sizeof(float) * (size_t)numel);
    ck_assert_ptr_nonnull(in);
    kt_rng_t r;
    kt_rng_seed(&r, 7);
    for (int64_t i = 0; i < numel; i++)
        in[i] = (float)(kt_rng_double(&r) * 4 - 2);
    ck_assert_int_eq(kt_npy_write(x, in, dims, 4), 0);
    free(in);
    char *out = NULL;
    char *cpurun[] = {"run", "--network-file", netfile, "--seed", "3", "--db", db, "--input", x,
                      "--output", y_cpu, "--repeat", "1", NULL};
    ck_assert_msg(ktune(cpurun, &out) == 0, "%s", out);
    free(out);
    char *cubuild[] = {"build", "--network-file", netfile, "--seed", "3", "--target", "cuda",
                       "--arch", "sm_80", "--db", db, "--out", dir, NULL};
    cuda_on_cpu(cubuild, dir, name, x);
}

/* Every simple layer's kernel (layout, unary, channel, flat and broadcast
 * binary, transpose, concat; concat and per-channel steps in both layouts:
 * kt_net_bcast and kt_net_transpose take a struct by value) around a few
 * tasks, against the CPU build. The clip bounds are whole numbers on
 * purpose: both builds once printed them as "1f", no C literal. */
static const char *const SIMPLE_NET =
    "{\"name\": \"simple\", \"layers\": [\n"
    " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 6, 5, 7]},\n"
    " {\"name\": \"t\", \"op\": \"tanh\"},\n"
    " {\"name\": \"s\", \"op\": \"scale\", \"per_channel\": true},\n"
    " {\"name\": \"ba\", \"op\": \"bias_add\"},\n"
    " {\"name\": \"cl\", \"op\": \"clip\", \"min\": -1, \"max\": 1},\n"
    " {\"name\": \"sg\", \"op\": \"sigmoid\", \"inputs\": [\"x\"]},\n"
    " {\"name\": \"m\", \"op\": \"mul\", \"inputs\": [\"cl\", \"sg\"]},\n"
    " {\"name\": \"gp\", \"op\": \"global_avg_pool\", \"inputs\": [\"m\"]},\n"
    " {\"name\": \"bm\", \"op\": \"elementwise\", \"fn\": \"sub\", \"inputs\": [\"m\", \"gp\"]},\n"
    " {\"name\": \"g\", \"op\": \"gelu\"},\n"
    " {\"name\": \"tr\", \"op\": \"transpose\", \"perm\": [0, 2, 3, 1]},\n"
    " {\"name\": \"tr2\", \"op\": \"transpose\", \"perm\": [0, 2, 3, 1], \"inputs\": [\"sg\"]},\n"
    " {\"name\": \"cc\", \"op\": \"concat\", \"axis\": 3, \"inputs\": [\"tr\", \"tr2\"]},\n"
    " {\"name\": \"r\", \"op\": \"relu\"},\n"
    " {\"name\": \"c1\", \"op\": \"conv2d\", \"channels\": 3, \"kernel\": [1, 1],"
    " \"inputs\": [\"x\"]},\n"
    " {\"name\": \"c2\", \"op\": \"conv2d\", \"channels\": 2, \"kernel\": [1, 1],"
    " \"inputs\": [\"x\"]},\n"
    " {\"name\": \"j\", \"op\": \"concat\", \"axis\": 1, \"inputs\": [\"c1\", \"c2\"]},\n"
    " {\"name\": \"js\", \"op\": \"scale\", \"per_channel\": true},\n"
    " {\"name\": \"jb\", \"op\": \"bias_add\"},\n"
    " {\"name\": \"c3\", \"op\": \"conv2d\", \"channels\": 12, \"kernel\": [1, 1]},\n"
    " {\"name\": \"tr3\", \"op\": \"transpose\", \"perm\": [0, 2, 3, 1]},\n"
    " {\"name\": \"sum\", \"op\": \"add\", \"inputs\": [\"r\", \"tr3\"]}\n]}\n";

START_TEST(runtime_cuda_build_of_every_simple_layer_runs_on_the_cpu)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    char dir[512], y_cpu[512];
    net_file_on_cpu_and_cuda(SIMPLE_NET, "simple", (const int64_t[4]){1, 6, 5, 7}, dir, y_cpu);
    /* The host really launches the by-value struct kernels this test is for. */
    char *host = file_bytes(path_in(dir, "simple_host.c"), NULL);
    ck_assert_msg(strstr(host, "&x, &z, &y, &n, &op, &s") && strstr(host, "&x, &y, &n, &s"),
                  "no broadcast or transpose launch");
    free(host);
    double d = bin_rel_diff(path_in(dir, "y.bin"), y_cpu);
    ck_assert_msg(d <= TOL, "CUDA build on the CPU: %g from the CPU build", d);
}
END_TEST

/* A convolution to one channel ahead of two others: safetensors packs
 * tensors back to back, so the second convolution's weight starts 108 bytes
 * into the file; the loader must still hand every kernel a 64-byte aligned
 * weight (the stand-in driver faults on a misaligned float4 fetch, as a GPU
 * does). */
static const char *const ODD_WEIGHT_NET =
    "{\"name\": \"oddw\", \"layers\": [\n"
    " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 3, 8, 8]},\n"
    " {\"name\": \"c1\", \"op\": \"conv2d\", \"channels\": 1, \"kernel\": [3, 3],"
    " \"padding\": [1, 1]},\n"
    " {\"name\": \"c2\", \"op\": \"conv2d\", \"channels\": 64, \"kernel\": [3, 3],"
    " \"padding\": [1, 1]},\n"
    " {\"name\": \"r\", \"op\": \"relu\"},\n"
    " {\"name\": \"c3\", \"op\": \"conv2d\", \"channels\": 64, \"kernel\": [3, 3],"
    " \"padding\": [1, 1]}\n]}\n";

START_TEST(runtime_cuda_build_aligns_weights_that_follow_an_odd_one)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("the CUDA network build");
#endif
    char dir[512], y_cpu[512];
    net_file_on_cpu_and_cuda(ODD_WEIGHT_NET, "oddw", (const int64_t[4]){1, 3, 8, 8}, dir, y_cpu);
    /* the case this test is for: the convolution reads its weight with float4 */
    char *cu = file_bytes(path_in(dir, "oddw.cu"), NULL);
    ck_assert_msg(strstr(cu, "float4") != NULL, "no float4 fetch in the kernels");
    free(cu);
    double d = bin_rel_diff(path_in(dir, "y.bin"), y_cpu);
    ck_assert_msg(d <= TOL, "CUDA build on the CPU: %g from the CPU build", d);

    /* On a GPU newer than the cubin's sm_80 the runner loads oddw.ptx, which
     * the build wrote beside it; without it, creating the network fails. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && rm y.bin && KT_CUDA_CPU_NEWER_GPU=1 ./main x.bin "
             "oddw.safetensors /nonexistent.safetensors > run2.log 2>&1", dir);
    ck_assert_msg(system(cmd) == 0, "%s", file_bytes(path_in(dir, "run2.log"), NULL));
    d = bin_rel_diff(path_in(dir, "y.bin"), y_cpu);
    ck_assert_msg(d <= TOL, "CUDA build from PTX on the CPU: %g from the CPU build", d);
    ck_assert_int_eq(unlink(path_in(dir, "oddw.ptx")), 0);
    ck_assert_int_ne(system(cmd), 0);
    char *log = file_bytes(path_in(dir, "run2.log"), NULL);
    ck_assert_msg(strstr(log, "oddw.ptx"), "%s", log);
    free(log);
}
END_TEST

/* Weights in an ONNX external data file (how newer PyTorch exporters save
 * models) are read; without the file, building says which tensor and file
 * are missing instead of running on random weights. */
START_TEST(runtime_onnx_external_weights_build_and_match_pytorch)
{
    need_models();
    char db[512], y[512], lone[512];
    snprintf(db, sizeof db, "%s", empty_store());
    snprintf(y, sizeof y, "%s/y_ext.npy", kt_test_dir);
    char *model = path_in(models, "small_ext.onnx"), *x = path_in(models, "x.npy");
    char *out = NULL;
    char *run[] = {"run", "--onnx", model, "--db", db, "--input", x, "--output", y, "--repeat",
                   "1", NULL};
    ck_assert_msg(ktune(run, &out) == 0, "%s", out);
    free(out);
    double d = npy_rel_diff(y, path_in(models, "y_ref.npy"));
    ck_assert_msg(d <= TOL, "external weights: %g from PyTorch", d);
    /* the model alone, its weights file left behind */
    snprintf(lone, sizeof lone, "%s/lone.onnx", kt_test_dir);
    size_t n = 0;
    char *bytes = file_bytes(model, &n);
    ck_assert_int_eq(kt_file_write(lone, bytes, n), 0);
    free(bytes);
    char *run2[] = {"run", "--onnx", lone, "--db", db, "--input", x, "--repeat", "1", NULL};
    ck_assert_int_eq(ktune(run2, &out), 1);
    ck_assert_msg(strstr(out, "small_ext.weights") && strstr(out, "cannot be opened") &&
                  strstr(out, "tuning needs only its shapes"), "%s", out);
    free(out);
}
END_TEST

/* ---- bad input ---------------------------------------------------------------------------- */

START_TEST(runtime_bad_input_names_the_cause_and_leaves_the_store)
{
    need_models();
    char db[512];
    snprintf(db, sizeof db, "%s/s.db", kt_test_dir);
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_store_close(s);
    size_t n0;
    char *before = file_bytes(db, &n0);
    char *model = path_in(models, "small_bn.onnx");
    struct {
        int rc;
        const char *want;
        char *args[16];
    } cases[] = {
        {1, "expected shape [1, 3, 32, 32], got [1, 3, 32]",
         {"run", "--onnx", model, "--db", db, "--input", path_in(models, "x_bad_shape.npy"), NULL}},
        {1, "'<i8' not supported",
         {"run", "--onnx", model, "--db", db, "--input", path_in(models, "x_int.npy"), NULL}},
        {1, "No such file",
         {"run", "--onnx", model, "--db", db, "--input", path_in(kt_test_dir, "nope.npy"), NULL}},
        {1, "no store at", {"build", "--onnx", model, "--db", path_in(kt_test_dir, "typo.db"),
                            "--out", kt_test_dir, NULL}},
        {2, "--out DIR is required", {"build", "--network", "resnet-18", NULL}},
        {2, "exactly one of", {"build", "--network", "resnet-18", "--onnx", model, "--out",
                               kt_test_dir, NULL}},
        {2, "unknown --target 'tpu'", {"run", "--network", "resnet-18", "--target", "tpu", NULL}},
        {2, "--arch needs --target cuda", {"build", "--network", "resnet-18", "--arch", "sm_80",
                                           "--out", kt_test_dir, NULL}},
        {2, "does not apply to --target cuda", {"run", "--network", "resnet-18", "--target",
                                                "cuda", "--check", NULL}},
        {2, "is an option of ktune run", {"build", "--network", "resnet-18", "--check", "--out",
                                          kt_test_dir, NULL}},
        {2, "--repeat wants an integer", {"run", "--network", "resnet-18", "--repeat", "0", NULL}},
        {1, "unknown network", {"build", "--network", "resnet-19", "--out", kt_test_dir, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = ktune(cases[i].args, &out);
        ck_assert_msg(rc == cases[i].rc && strstr(out, cases[i].want),
                      "case %zu: exit %d, want %d and '%s': %s", i, rc, cases[i].rc,
                      cases[i].want, out);
        free(out);
    }
    /* A network with a layer no step can run. */
    char netfile[512];
    snprintf(netfile, sizeof netfile, "%s/odd.json", kt_test_dir);
    const char *odd = "{\"name\": \"odd\", \"layers\": [{\"name\": \"x\", \"op\": \"input\", "
                      "\"shape\": [1, 8]}, {\"name\": \"fc\", \"op\": \"dense\", \"units\": 4}, "
                      "{\"name\": \"e\", \"op\": \"elementwise\", \"fn\": \"exp\"}]}";
    ck_assert_int_eq(kt_file_write(netfile, odd, strlen(odd)), 0);
    char *bad[] = {"build", "--network-file", netfile, "--db", db, "--out", kt_test_dir, NULL};
    char *out = NULL;
    ck_assert_int_eq(ktune(bad, &out), 1);
    ck_assert_msg(strstr(out, "layer 'e' (exp)") && strstr(out, "cannot run"), "%s", out);
    free(out);
    size_t n1;
    char *after = file_bytes(db, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime");
    TCase *tc = tcase_create("runtime");
    tcase_set_timeout(tc, 900);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, runtime_plan_of_resnet18_reuses_the_arena_and_converts_only_at_the_edges);
    tcase_add_test(tc, runtime_plan_names_what_it_cannot_run);
    tcase_add_test(tc, runtime_weights_packed_beyond_rank_8_are_written);
    tcase_add_test(tc, runtime_tuned_onnx_model_matches_pytorch_from_store_and_tracker);
    tcase_add_test(tc, runtime_resnet18_runs_checked_in_both_layouts_with_one_answer);
    tcase_add_test(tc, runtime_generated_library_links_into_a_program_twice);
    tcase_add_test(tc, runtime_cuda_build_compiles_and_runs_where_there_is_a_gpu);
    tcase_add_test(tc, runtime_bad_input_names_the_cause_and_leaves_the_store);
    tcase_add_test(tc, runtime_onnx_external_weights_build_and_match_pytorch);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("winograd");
    tcase_set_timeout(tw, 900);
    tcase_add_unchecked_fixture(tw, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tw, test_setup, NULL);
    tcase_add_test(tw, runtime_winograd_alternatives_build_and_match_pytorch);
    suite_add_tcase(s, tw);
    /* Its own case, so CK_RUN_CASE=cuda_on_cpu runs it alone. */
    TCase *cc = tcase_create("cuda_on_cpu");
    tcase_set_timeout(cc, 900);
    tcase_add_unchecked_fixture(cc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(cc, test_setup, NULL);
    tcase_add_test(cc, runtime_cuda_build_runs_on_the_cpu_like_the_cpu_build);
    tcase_add_test(cc, runtime_cuda_build_of_every_simple_layer_runs_on_the_cpu);
    tcase_add_test(cc, runtime_cuda_build_aligns_weights_that_follow_an_odd_one);
    tcase_add_test(cc, runtime_cuda_build_of_an_attention_block_runs_on_the_cpu);
    tcase_add_test(cc, runtime_cuda_build_of_shufflenet_units_runs_on_the_cpu);
    suite_add_tcase(s, cc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
