/*
 * bench_layers: ktune's kernels against oneDNN on every conv2d and dense
 * layer of ResNet-18 (NHWC, batch 1), and on matmul 512 and 1024 against
 * oneDNN's sgemm, with one and with two threads.
 *
 * The layers are the tasks `ktune tasks --network resnet-18` lists (the
 * built-in network, extracted with NHWC operators: each conv2d with the
 * epilogue fused into it: bias, residual add, scale, relu). Each is tuned
 * with N trials by `ktune tune --workload ... --trials N --db DB` (a job of
 * its own: the embedded tracker, worker and runner), the runner's kernels
 * running on T OpenMP threads (OMP_NUM_THREADS=T, which the embedded runner
 * passes on). A record does not say how many threads timed it, so each
 * thread count has its own store: DB for one thread, DB.tT for T > 1. A
 * store that already holds N records of a layer is not tuned again, so a
 * rerun only times.
 *
 * Each layer's best record is then compiled in this process as `ktune
 * build` compiles it: its weights already in the kernel's packed layout
 * (codegen.h's kt_codegen_packs / kt_codegen_pack, the variant taking them
 * packed), so the copy is not timed. oneDNN runs the same layer on the same
 * inputs: the convolution primitive with algorithm auto (its own choice of
 * direct, Winograd or GEMM), src and dst NHWC, weights in the format it
 * picks (format tag any) and reordered once, untimed; the task's epilogue
 * as its bias and post-ops (bench_blas.h); dense: the inner product
 * primitive likewise; matmul: dnnl_sgemm (which packs B on every call).
 * Both run on T OpenMP threads (omp_set_num_threads) and are timed alike:
 * the fastest of repeats lasting >= 0.2 s after a warm-up, in three rounds
 * alternating the two, the fastest kept; with one thread in this thread's
 * CPU time (the machine may be shared), with more in wall time. Their
 * outputs are compared (verify.h's error metric, oneDNN's as reference): a
 * layer above 1e-3 is WRONG, left out of the ratios, and makes the exit
 * status 1.
 *
 * Printed: the machine, one core's multiply-add ceiling (fma_peak.h), the
 * load average; per thread count a table (task id, layer, trials stored,
 * tuned ms: the best record's cost as the runner timed it while tuning (its
 * own conditions: wall time, the weight copy where the runner's kernels
 * still make it; far from ktune ms when the load changed), ktune ms, oneDNN ms, oneDNN/ktune: > 1 means ktune is faster,
 * both GFLOPS, the outputs' difference, oneDNN's implementation), the
 * geometric mean of the
 * ratios over the ResNet-18 layers and the layers at >= 1.0x, against the
 * goal (every layer >= 1.0x, geometric mean >= 1.15x; printed, never
 * asserted); then the tuning time per trial.
 *
 *   bench_layers [--trials N (256)] [--threads 1,2] [--db PATH (bench_layers.db)]
 *                [--layers ID,...]
 *
 * --layers: task ids as `ktune tasks --network resnet-18` numbers them, and
 * matmul512, matmul1024 (default: all). The tuning jobs' output is appended
 * to DB.log.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_blas.h"
#include "bench_local.h"
#include "codegen/codegen.h"
#include "codegen/verify.h"
#include "fma_peak.h"
#include "measure/measure.h"
#include "net/net.h"
#include "sched/state.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

extern char **environ;

#define MAX_LAYERS 64
#define MAX_THREADS 8
#define MAX_EPI 8
#define ROUNDS 3           /* alternating timing rounds of ktune and oneDNN */
#define MAX_DIFF 1e-3      /* the outputs' largest allowed difference (verify.h metric) */
#define GOAL_LAYER 1.0
#define GOAL_GEOMEAN 1.15

typedef struct {
    char id[16];              /* task id, or matmul512 / matmul1024 */
    char what[160];           /* "conv2d 56x56x64->64 3x3 s1 + bias + relu" */
    kt_workload_t *w;         /* owned */
    int weight;               /* appearances in the network (matmuls: 0) */
    int selected;
} layer_t;

typedef struct {
    int trials;               /* records stored */
    double ktune_s, dnnl_s;   /* 0: not timed */
    double record_s;          /* the best record's cost, as the runner timed it while tuning */
    double diff;
    char impl[64];
    const char *problem;      /* why there is no figure, or NULL */
} result_t;

static layer_t layers[MAX_LAYERS];
static int nlayers;
static double tune_s;        /* wall time of the tuning jobs run */
static long tuned_trials;    /* trials they added */

static void die(const char *what)
{
    fprintf(stderr, "bench_layers: %s: %s\n", what, kt_err_msg());
    exit(1);
}

/* ---- the layers ---------------------------------------------------------------- */

static int json_int(const json_t *o, const char *k)
{
    return (int)json_integer_value(json_object_get(o, k));
}

/* A workload's summary line. */
static void describe(const kt_workload_t *w, char *out, size_t cap)
{
    json_t *o = json_loads(kt_workload_json(w), 0, NULL);
    const char *op = json_string_value(json_object_get(o, "op"));
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    if (op && strcmp(op, "conv2d_nhwc") == 0) {
        kt_sbuf_printf(&b, "conv2d %dx%dx%d->%d %dx%d s%d", json_int(o, "H"), json_int(o, "W"),
                       json_int(o, "CI"), json_int(o, "CO"), json_int(o, "KH"), json_int(o, "KW"),
                       (int)json_integer_value(json_array_get(json_object_get(o, "stride"), 0)));
    } else if (op && strcmp(op, "dense") == 0) {
        kt_sbuf_printf(&b, "dense %dx%d->%d", json_int(o, "M"), json_int(o, "K"), json_int(o, "N"));
    } else {
        kt_sbuf_printf(&b, "%s %dx%dx%d", op ? op : "?", json_int(o, "M"), json_int(o, "N"),
                       json_int(o, "K"));
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(o, "epilogue"), i, e) {
        const char *n = json_string_value(e);
        n = !n ? "?" : strcmp(n, "bias_add") == 0 ? "+ bias" : strcmp(n, "add") == 0 ? "+ residual"
                     : strcmp(n, "multiply") == 0 ? "* scale" : n;
        kt_sbuf_printf(&b, " %s%s", n[0] == '+' || n[0] == '*' ? "" : "+ ", n);
    }
    char *s = kt_sbuf_take(&b);
    snprintf(out, cap, "%s", s ? s : "?");
    free(s);
    json_decref(o);
}

static void add_layer(const char *id, kt_workload_t *w, int weight)
{
    if (nlayers == MAX_LAYERS) {
        fprintf(stderr, "bench_layers: more than %d layers\n", MAX_LAYERS);
        exit(1);
    }
    layer_t *l = &layers[nlayers++];
    snprintf(l->id, sizeof l->id, "%s", id);
    l->w = w;
    l->weight = weight;
    l->selected = 1;
    describe(w, l->what, sizeof l->what);
}

/* ResNet-18's conv2d and dense tasks, as `ktune tasks` extracts them, then
 * the two matmuls. */
static void load_layers(void)
{
    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    kt_net_tasks_t *t = net ? kt_net_extract(net, KT_NET_NHWC) : NULL;
    if (!t)
        die("ResNet-18's tasks");
    for (int i = 0; i < t->ntasks; i++) {
        const char *op = kt_workload_op(t->tasks[i].wl);
        if (strcmp(op, "conv2d_nhwc") != 0 && strcmp(op, "dense") != 0)
            continue;
        kt_workload_t *w = kt_workload_parse(kt_workload_json(t->tasks[i].wl));
        if (!w)
            die("a task's workload");
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        add_layer(id, w, t->tasks[i].weight);
    }
    kt_net_tasks_free(t);
    kt_net_free(net);
    static const int mm[] = {512, 1024};
    for (int i = 0; i < 2; i++) {
        char json[128], id[16];
        snprintf(json, sizeof json, "{\"op\":\"matmul\",\"M\":%d,\"N\":%d,\"K\":%d}", mm[i], mm[i],
                 mm[i]);
        snprintf(id, sizeof id, "matmul%d", mm[i]);
        kt_workload_t *w = kt_workload_parse(json);
        if (!w)
            die("matmul");
        add_layer(id, w, 0);
    }
}

/* --layers: exits 2 naming an unknown id. */
static void select_layers(const char *list)
{
    for (int i = 0; i < nlayers; i++)
        layers[i].selected = 0;
    char *dup = kt_strdup(list), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < nlayers; i++)
            if (strcmp(layers[i].id, tok) == 0)
                layers[i].selected = found = 1;
        if (!found) {
            fprintf(stderr, "bench_layers: --layers: no layer '%s'; the layers are", tok);
            for (int i = 0; i < nlayers; i++)
                fprintf(stderr, " %s", layers[i].id);
            fprintf(stderr, "\n");
            exit(2);
        }
    }
    free(dup);
}

/* ---- tuning ------------------------------------------------------------------------ */

/* Records of w in the store at path (0 when it does not exist yet). */
static int stored_trials(const char *path, const kt_workload_t *w)
{
    if (access(path, F_OK) != 0)
        return 0;
    kt_store_t *s = kt_store_open(path, 0);
    kt_store_counts_t c;
    kt_store_filter_t f = {.workload_key = kt_workload_key(w), .target = "cpu"};
    if (!s || kt_store_count_records(s, &f, &c) != 0)
        die(path);
    kt_store_close(s);
    return (int)c.total;
}

/* Tune w up to `trials` records in the store with `threads` OpenMP threads
 * (ktune tune resumes: stored records count towards its budget). */
static void tune(const char *ktune, const char *db, const char *log, const layer_t *l,
                 int trials, int threads)
{
    int have = stored_trials(db, l->w);
    if (have >= trials)
        return;
    char ntr[32], nth[16];
    snprintf(ntr, sizeof ntr, "%d", trials);
    snprintf(nth, sizeof nth, "%d", threads);
    fprintf(stderr, "tuning %s (%s), %d thread%s: %d of %d trials stored ...\n", l->id, l->what,
            threads, threads > 1 ? "s" : "", have, trials);
    setenv("OMP_NUM_THREADS", nth, 1);   /* read by the embedded runner's kernels */
    char *const argv[] = {(char *)ktune, "tune", "--workload", (char *)kt_workload_json(l->w),
                          "--trials", ntr, "--db", (char *)db, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    double t0 = kt_time_mono();
    pid_t pid;
    int rc = posix_spawn(&pid, ktune, &fa, NULL, argv, environ), status = 0;
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "bench_layers: cannot run %s: %s\n", ktune, strerror(rc));
        exit(1);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    double dt = kt_time_mono() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_layers: ktune tune failed on %s (its output: %s)\n", l->id, log);
        exit(1);
    }
    int now = stored_trials(db, l->w);
    tune_s += dt;
    tuned_trials += now - have;
    fprintf(stderr, "  %d trials in %.0f s (%.2f s per trial)\n", now - have, dt,
            now > have ? dt / (now - have) : 0.0);
}

/* ---- timing ------------------------------------------------------------------------ */

typedef struct {
    kt_kernel_fn fn;
    float **bufs;
} kernel_run_t;

static void kernel_run(void *arg)
{
    kernel_run_t *k = arg;
    if (k->fn(k->bufs) != 0) {
        fprintf(stderr, "bench_layers: a ktune kernel failed\n");
        exit(1);
    }
}

/* The layer's best record compiled as `ktune build` does, into dir/<id>.so:
 * the kernel taking its layout-free weights packed when it has any (their
 * packed layouts into packs, their number into *npacks). NULL with *why. */
static kt_codegen_lib_t *build_best(const char *db, const layer_t *l, const char *dir,
                                    kt_codegen_pack_t *packs, int *npacks, result_t *r)
{
    const kt_dag_t *dag = kt_workload_dag(l->w);
    kt_store_t *s = access(db, F_OK) == 0 ? kt_store_open(db, KT_STORE_READONLY) : NULL;
    kt_record_list_t *best = NULL;
    if (!s || kt_store_best(s, kt_workload_key(l->w), "cpu", &best) != 0) {
        kt_store_close(s);
        r->problem = "no valid record";
        return NULL;
    }
    r->record_s = best->items[0].mean_cost;
    kt_sched_params_t params;
    kt_sched_params_default(&params);
    kt_sched_state_t *st = kt_sched_state_from_json(best->items[0].state_json, dag, &params);
    kt_record_list_free(best);
    kt_store_close(s);
    if (!st)
        die("the best record's state");
    *npacks = kt_codegen_packs(dag, st, packs, KT_CODEGEN_MAX_PACKS);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_codegen_preamble_c(&b);
    int rc = *npacks < 0 ? *npacks
             : *npacks   ? kt_codegen_emit_c_packed_into(dag, st, "bench_kernel", &b)
                         : kt_codegen_emit_c_into(dag, st, "bench_kernel", &b);
    kt_sched_state_free(st);
    char *src = kt_sbuf_take(&b);
    if (rc || !src)
        die("generating the kernel");
    char so[600];
    snprintf(so, sizeof so, "%.500s/%.32s.so", dir, l->id);
    if (kt_codegen_compile(src, so, NULL) != 0)
        die("compiling the kernel");
    free(src);
    kt_codegen_lib_t *lib = kt_codegen_load(so, "bench_kernel");
    if (!lib)
        die("loading the kernel");
    unlink(so);
    return lib;
}

/* oneDNN's primitive for l on the kernel's input buffers bufs (NULL for a
 * matmul: *sg gets its sgemm), writing out. */
static void dnnl_setup(const layer_t *l, float **bufs, float *out, kt_bench_dnnl_t *d,
                       kt_bench_gemm_t *sg, int *is_sgemm)
{
    json_t *o = json_loads(kt_workload_json(l->w), 0, NULL);
    const char *op = json_string_value(json_object_get(o, "op"));
    const char *epi[MAX_EPI];
    const float *params[MAX_EPI];
    int nepi = 0, next = 2;   /* the epilogues' operands follow data and weight */
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(o, "epilogue"), i, e) {
        const char *n = json_string_value(e);
        if (!n || nepi == MAX_EPI) {
            fprintf(stderr, "bench_layers: %s: epilogue not supported here\n", l->id);
            exit(1);
        }
        const char *operand = strcmp(n, "bias_add") == 0 ? "bias"
                              : strcmp(n, "add") == 0      ? "residual"
                              : strcmp(n, "multiply") == 0 ? "scale"
                                                           : NULL;
        /* te/ops.h makes each operand a placeholder as it adds the epilogue */
        const kt_dag_t *dag = kt_workload_dag(l->w);
        if (operand && strncmp(kt_dag_stage(dag, kt_codegen_buf_stage(dag, next))->name, operand,
                               strlen(operand)) != 0) {
            fprintf(stderr, "bench_layers: %s: buffer %d is not the %s\n", l->id, next, operand);
            exit(1);
        }
        epi[nepi] = n;
        params[nepi++] = operand ? bufs[next++] : NULL;
    }
    *is_sgemm = 0;
    if (strcmp(op, "conv2d_nhwc") == 0) {
        json_t *pad = json_object_get(o, "padding"), *st = json_object_get(o, "stride"),
               *dl = json_object_get(o, "dilation");
        int four = json_array_size(pad) == 4;
        kt_bench_dnnl_conv_t c = {
            .H = json_int(o, "H"), .W = json_int(o, "W"), .CI = json_int(o, "CI"),
            .CO = json_int(o, "CO"), .KH = json_int(o, "KH"), .KW = json_int(o, "KW"),
            .stride = {(int)json_integer_value(json_array_get(st, 0)),
                       (int)json_integer_value(json_array_get(st, 1))},
            .dilation = {(int)json_integer_value(json_array_get(dl, 0)),
                         (int)json_integer_value(json_array_get(dl, 1))},
            .pad = {(int)json_integer_value(json_array_get(pad, 0)),
                    (int)json_integer_value(json_array_get(pad, 1)),
                    (int)json_integer_value(json_array_get(pad, four ? 2 : 0)),
                    (int)json_integer_value(json_array_get(pad, four ? 3 : 1))},
            .epi = epi, .nepi = nepi, .params = params, .data = bufs[0], .weight = bufs[1],
            .out = out};
        kt_bench_dnnl_conv_init(d, &c, dnnl_convolution_auto);
    } else if (strcmp(op, "dense") == 0) {
        kt_bench_dnnl_dense_init(d, json_int(o, "M"), json_int(o, "N"), json_int(o, "K"), epi,
                                 nepi, params, bufs[0], bufs[1], out);
    } else {
        *sg = (kt_bench_gemm_t){json_int(o, "M"), json_int(o, "N"), json_int(o, "K"), bufs[0],
                                 bufs[1], out};
        *is_sgemm = 1;
    }
    json_decref(o);
}

/* Build l's best kernel from db, time it and oneDNN on `threads` threads. */
static void time_layer(const char *db, const layer_t *l, int threads, const char *dir,
                       result_t *r)
{
    memset(r, 0, sizeof *r);
    r->trials = stored_trials(db, l->w);
    const kt_dag_t *dag = kt_workload_dag(l->w);
    kt_codegen_pack_t packs[KT_CODEGEN_MAX_PACKS];
    int npacks = 0;
    kt_codegen_lib_t *lib = build_best(db, l, dir, packs, &npacks, r);
    if (!lib)
        return;
    int nbufs = kt_codegen_num_bufs(dag), out = nbufs - 1;
    float **bufs = kt_codegen_bufs_new(dag, 1);
    float *kbufs[KT_MEASURE_MAX_BUFS], *packed[KT_CODEGEN_MAX_PACKS];
    if (!bufs || nbufs > KT_MEASURE_MAX_BUFS)
        die("buffers");
    memcpy(kbufs, bufs, (size_t)nbufs * sizeof kbufs[0]);
    for (int p = 0; p < npacks; p++) {
        /* the weights as a built network holds them: packed once, untimed */
        size_t n = (size_t)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, packs[p].buf)));
        if (!(packed[p] = malloc(n * sizeof(float))))
            die("out of memory");
        kt_codegen_pack(&packs[p], bufs[packs[p].buf], packed[p], 0);
        kbufs[packs[p].buf] = packed[p];
    }
    size_t nout = (size_t)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, out)));
    float *dout = malloc(nout * sizeof(float));
    if (!dout)
        die("out of memory");
    for (size_t i = 0; i < nout; i++)
        dout[i] = NAN;
    /* before oneDNN's primitive is made: its kernels fix their thread
     * count then */
    omp_set_num_threads(threads);
    kt_bench_dnnl_t d;
    kt_bench_gemm_t sg;
    int is_sgemm;
    dnnl_setup(l, bufs, dout, &d, &sg, &is_sgemm);
    snprintf(r->impl, sizeof r->impl, "%s", is_sgemm ? "sgemm" : d.impl);

    kernel_run_t k = {kt_codegen_lib_fn(lib), kbufs};
    int wall = threads > 1;
    r->ktune_s = r->dnnl_s = INFINITY;
    for (int round = 0; round < ROUNDS; round++) {
        double t = kt_bench_time(kernel_run, &k, wall);
        r->ktune_s = t < r->ktune_s ? t : r->ktune_s;
        t = is_sgemm ? kt_bench_time(kt_bench_dnnl_sgemm_run, &sg, wall)
                     : kt_bench_time(kt_bench_dnnl_run, &d, wall);
        r->dnnl_s = t < r->dnnl_s ? t : r->dnnl_s;
    }
    r->diff = kt_codegen_rel_err(bufs[out], dout, nout);
    if (!(r->diff <= MAX_DIFF))
        r->problem = "WRONG";

    if (!is_sgemm)
        kt_bench_dnnl_free(&d);
    free(dout);
    for (int p = 0; p < npacks; p++)
        free(packed[p]);
    kt_codegen_bufs_free(dag, bufs);
    kt_codegen_unload(lib);
}

/* ---- the report -------------------------------------------------------------------- */

static void print_table(int threads, const char *db, const result_t *res)
{
    printf("\n%d thread%s (store %s; timed in %s):\n", threads, threads > 1 ? "s" : "", db,
           threads > 1 ? "wall time" : "thread CPU time");
    int width = 5;
    for (int i = 0; i < nlayers; i++)
        if (layers[i].selected && (int)strlen(layers[i].what) > width)
            width = (int)strlen(layers[i].what);
    printf("%-10s %-*s %6s %9s %9s %9s %7s %8s %8s %8s  %s\n", "task", width, "layer", "trials",
           "tuned ms", "ktune ms", "oneDNN ms", "ratio", "ktune GF", "dnnl GF", "diff",
           "oneDNN impl");
    double logsum = 0, mm_logsum = 0, k_total = 0, d_total = 0;
    int n = 0, ok = 0, nsel = 0, mm_n = 0, mm_ok = 0, mm_sel = 0, all_net = 1;
    for (int i = 0; i < nlayers; i++) {
        const layer_t *l = &layers[i];
        const result_t *r = &res[i];
        if (!l->selected)
            continue;
        int mm = l->weight == 0;
        mm ? mm_sel++ : nsel++;
        printf("%-10s %-*s %6d", l->id, width, l->what, r->trials);
        if (r->ktune_s > 0) {
            double flops = kt_workload_flops(l->w);
            printf(" %9.3f %9.3f %9.3f", r->record_s * 1e3, r->ktune_s * 1e3, r->dnnl_s * 1e3);
            if (r->problem)
                printf(" %7s", r->problem);
            else
                printf(" %6.2fx", r->dnnl_s / r->ktune_s);
            printf(" %8.1f %8.1f %8.1e  %s\n", flops / r->ktune_s * 1e-9,
                   flops / r->dnnl_s * 1e-9, r->diff, r->impl);
        } else {
            printf("  %s\n", r->problem);
        }
        if (r->problem || !(r->ktune_s > 0)) {
            all_net = all_net && mm;
            continue;
        }
        double ratio = r->dnnl_s / r->ktune_s;
        if (mm) {
            mm_logsum += log(ratio);
            mm_n++;
            mm_ok += ratio >= GOAL_LAYER;
        } else {
            logsum += log(ratio);
            n++;
            ok += ratio >= GOAL_LAYER;
            k_total += l->weight * r->ktune_s;
            d_total += l->weight * r->dnnl_s;
        }
    }
    if (nsel) {
        printf("ResNet-18 layers: geometric mean of oneDNN/ktune %.2fx over %d (goal >= %.2fx), "
               "%d of %d at >= %.1fx (goal: all)\n",
               n ? exp(logsum / n) : 0.0, n, GOAL_GEOMEAN, ok, nsel, GOAL_LAYER);
        if (all_net && n == nsel)
            printf("  the layers in all (each times its appearances): ktune %.3f ms, oneDNN "
                   "%.3f ms\n", k_total * 1e3, d_total * 1e3);
    }
    if (mm_sel)
        printf("matmul against dnnl_sgemm: geometric mean %.2fx over %d, %d of %d at >= %.1fx\n",
               mm_n ? exp(mm_logsum / mm_n) : 0.0, mm_n, mm_ok, mm_sel, GOAL_LAYER);
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_layers [--trials N (256)] [--threads 1,2] [--db PATH "
               "(bench_layers.db)]\n"
               "                    [--layers ID,...]\n"
               "ResNet-18's conv2d and dense layers and matmul 512/1024, tuned by ktune (a\n"
               "store per thread count: PATH, PATH.t2, ...) and timed against oneDNN.\n"
               "--layers takes task ids of `ktune tasks --network resnet-18`, matmul512 and\n"
               "matmul1024.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trials", required_argument, 0, 't'}, {"threads", required_argument, 0, 'n'},
        {"db", required_argument, 0, 'd'},     {"layers", required_argument, 0, 'l'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    long trials = 256;
    int threads[MAX_THREADS] = {1, 2}, nthreads = 2;
    const char *db = "bench_layers.db", *only = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 't':
            trials = strtol(optarg, &end, 10);
            if (*end || trials < 1 || trials > 1000000) {
                fprintf(stderr, "bench_layers: --trials wants 1..1000000, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'n':
            nthreads = 0;
            for (const char *s = optarg; *s;) {
                long v = strtol(s, &end, 10);
                if (end == s || v < 1 || v > 256 || nthreads == MAX_THREADS ||
                    (*end && *end != ',')) {
                    fprintf(stderr, "bench_layers: --threads wants a list like 1,2, got '%s'\n",
                            optarg);
                    return 2;
                }
                threads[nthreads++] = (int)v;
                s = *end ? end + 1 : end;
            }
            if (!nthreads) {
                fprintf(stderr, "bench_layers: --threads wants a list like 1,2\n");
                return 2;
            }
            break;
        case 'd': db = optarg; break;
        case 'l': only = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_layers: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    load_layers();
    if (only)
        select_layers(only);
    char ktune[2400];
    kt_bench_bin_path(ktune, sizeof ktune, argv[0], "cli/ktune");
    if (access(ktune, X_OK) != 0) {
        fprintf(stderr, "bench_layers: %s not found (run the build tree's bench)\n", ktune);
        return 1;
    }
    char dbs[MAX_THREADS][2100], log[2100], dir[] = "/tmp/bench_layers_XXXXXX";
    for (int t = 0; t < nthreads; t++) {
        if (threads[t] == 1)
            snprintf(dbs[t], sizeof dbs[t], "%.2000s", db);
        else
            snprintf(dbs[t], sizeof dbs[t], "%.2000s.t%d", db, threads[t]);
    }
    snprintf(log, sizeof log, "%.2000s.log", db);
    FILE *lf = fopen(log, "a");   /* the stores' folder must exist */
    if (!lf) {
        fprintf(stderr, "bench_layers: cannot write %s: %s\n", log, strerror(errno));
        return 1;
    }
    fclose(lf);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bench_layers: mkdtemp: %s\n", strerror(errno));
        return 1;
    }

    int vb = 0;
    double peak = kt_bench_fma_peak_gflops(&vb);
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("bench_layers: ResNet-18's conv2d and dense layers (NHWC, batch 1) and matmuls,\n"
           "ktune (%ld trials each, the weights pre-packed) against oneDNN %d.%d.%d\n",
           trials, DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
    printf("machine: ");
    fflush(stdout);
    if (system("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'") != 0)
        printf("(unknown)\n");
    printf("one core's multiply-add ceiling: %.1f GFLOPS (%d-byte vectors); load average %.2f "
           "%.2f %.2f\n", peak, vb, load[0], load[1], load[2]);
    printf("stores: one per thread count (a record does not say how many threads timed it):");
    for (int t = 0; t < nthreads; t++)
        printf(" %s (%d)", dbs[t], threads[t]);
    printf("; tuning output: %s\n", log);
    printf("ratio = oneDNN ms / ktune ms (> 1: ktune faster); diff: the outputs' difference "
           "(WRONG above %.0e)\n", MAX_DIFF);
    fflush(stdout);

    for (int t = 0; t < nthreads; t++)
        for (int i = 0; i < nlayers; i++)
            if (layers[i].selected)
                tune(ktune, dbs[t], log, &layers[i], (int)trials, threads[t]);
    int wrong = 0;
    static result_t res[MAX_LAYERS];
    for (int t = 0; t < nthreads; t++) {
        for (int i = 0; i < nlayers; i++)
            if (layers[i].selected) {
                time_layer(dbs[t], &layers[i], threads[t], dir, &res[i]);
                wrong += res[i].problem != NULL;
            }
        print_table(threads[t], dbs[t], res);
        /* wall times of several threads mean little when the cores are busy */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        getloadavg(load, 3);
        if (threads[t] > 1 && load[0] + threads[t] > cores + 0.5)
            printf("warning: load average %.1f on %ld cores: the %d threads shared the cores with "
                   "other work; these wall times are not the machine's\n", load[0], cores,
                   threads[t]);
    }
    getloadavg(load, 3);
    printf("\nload average at the end %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    if (tuned_trials)
        printf("tuning: %ld trials in %.0f s (%.2f s per trial)\n", tuned_trials, tune_s,
               tune_s / tuned_trials);
    else
        printf("tuning: none (the stores held %ld trials of every layer)\n", trials);
    if (wrong)
        printf("%d layer%s without a figure (no valid record, or WRONG: ktune's output differs "
               "from oneDNN's): exit status 1\n", wrong, wrong > 1 ? "s" : "");
    rmdir(dir);
    for (int i = 0; i < nlayers; i++)
        kt_workload_free(layers[i].w);
    return wrong ? 1 : 0;
}
