/*
 * bench_layers: ktune's kernels against oneDNN on every conv2d and dense
 * layer of ResNet-18 (NHWC, batch 1, the residual-fused ones included), and
 * on matmul 512 and 1024, with one and with two threads; oneDNN's figure is
 * the fastest of its routes for the layer (below).
 *
 * The layers are the tasks `ktune tasks --network resnet-18` lists (the
 * built-in network, extracted with NHWC operators: each conv2d with the
 * epilogue fused into it: bias, residual add, scale, relu). Each 3x3
 * stride-1 conv2d also has its Winograd alternative, as network tuning
 * extracts it (net.h's KT_NET_EXTRACT_WINOGRAD: conv2d_winograd_nhwc, tile 4
 * or 2), tuned with the same N trials (--no-winograd: not). Each task is
 * tuned with N trials by `ktune tune --workload ... --trials N --db DB` (a job of
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
 * packed), so the copy is not timed. A Winograd kernel gets the conv2d's
 * weight transformed by kt_ops_winograd_weight and then packed, both
 * untimed, as `ktune build` does; its other inputs are the conv2d's.
 *
 * oneDNN runs the same layer on the same inputs by each route a framework
 * built on it could take, and the fastest is the layer's baseline (the
 * table names it):
 *  - conv2d: the convolution primitive with algorithm auto (its own choice,
 *    brgconv here), src and dst NHWC; beside it every Winograd convolution
 *    oneDNN offers for the layer (algorithm winograd: its 2x3 and 4x3 tiles
 *    on AVX-512, for 3x3 stride-1 layers only; "n/a" where it offers none).
 *    oneDNN's Winograd works on its blocked layout only (nChw16c), so there
 *    src and dst take the primitive's layout, the input (and the residual)
 *    reordered into it once and the output read back for the comparison,
 *    untimed, as in a network that keeps oneDNN's layout between layers.
 *  - dense: the inner product primitive, and the matmul primitive;
 *  - matmul: dnnl_sgemm (which packs B on every call), and the matmul
 *    primitive.
 * Every primitive takes its weights in the format it chooses (format tag
 * any), reordered once, untimed, as an inference framework packs them once;
 * the task's epilogue is the primitive's bias and post-ops (bench_blas.h):
 * a residual add is the sum post-op, as frameworks fuse it: dst holds the
 * residual and the primitive adds its result into it, so dst is refilled
 * with the residual before every timed call, outside the timing (in a
 * network the residual's buffer is the output's).
 *
 * All run on T OpenMP threads (omp_set_num_threads) and are timed alike:
 * the fastest of repeats lasting >= 0.2 s after a warm-up, in three rounds
 * alternating them, the fastest kept; with one thread in this thread's
 * CPU time (the machine may be shared), with more in wall time. Their
 * outputs are compared (verify.h's error metric, the first baseline's as
 * reference: auto, inner product, dnnl_sgemm): a direct kernel above 1e-3
 * is WRONG, a Winograd kernel likewise above its own tolerance, 2e-3 (its
 * transforms round differently from a direct sum: the te suite's reference
 * test allows 1e-4 with tile 4); a WRONG kernel makes the layer WRONG, left
 * out of the ratios, and the exit status 1. The other baselines are held to
 * the same limits against the reference (BASE when one is off, with the
 * same consequences). A layer runs, as a network `ktune build` builds, the
 * faster of its direct and Winograd kernels: that is its ktune figure.
 *
 * Printed: the machine, one core's multiply-add ceiling (fma_peak.h), the
 * load average; per thread count a table (task id, layer, trials stored,
 * tuned ms: the faster kernel's best record's cost as the runner timed it
 * while tuning (its own conditions: wall time, the weight copy where the
 * runner's kernels still make it; far from ktune ms when the load changed),
 * ktune ms: the faster kernel's, which kernel that is (direct or winograd),
 * the direct and the Winograd kernel's ms, oneDNN ms: the fastest
 * baseline's, which baseline that is, oneDNN/ktune: > 1 means ktune is
 * faster, both GFLOPS, the outputs' differences (direct and Winograd kernel,
 * the other baselines' largest), every baseline's kind, implementation and
 * ms), the geometric mean of the ratios over the ResNet-18 layers and the
 * layers at >= 1.0x, against the goal (every layer >= 1.0x, geometric mean
 * >= 1.15x; printed, never asserted), how many layers' baseline is a
 * Winograd convolution or the matmul primitive; then the tuning time per
 * trial.
 *
 *   bench_layers [--trials N (256)] [--threads 1,2] [--db PATH (bench_layers.db)]
 *                [--layers ID,...] [--no-winograd] [--search-params LIST] [--seed S]
 *
 * --search-params and --seed go to every `ktune tune` (its search's options
 * and seed): an A/B run of an option, or another seed, takes a store of its
 * own.
 * --layers: task ids as `ktune tasks --network resnet-18` numbers them, and
 * matmul512, matmul1024 (default: all); a Winograd alternative goes with its
 * conv2d (its own task id is not taken). The tuning jobs' output is appended
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
#include "te/ops.h"
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
/* A Winograd kernel's: its transforms scale by up to 8 and round
 * differently from a direct sum (te/ops.h), so it gets twice the margin */
#define MAX_DIFF_WINOGRAD 2e-3
#define GOAL_LAYER 1.0
#define GOAL_GEOMEAN 1.15

typedef struct {
    char id[16];              /* task id, or matmul512 / matmul1024 */
    char what[160];           /* "conv2d 56x56x64->64 3x3 s1 + bias + relu" */
    kt_workload_t *w;         /* owned */
    kt_workload_t *wino;      /* owned: its Winograd alternative, or NULL */
    int weight;               /* appearances in the network (matmuls: 0) */
    int selected;
} layer_t;

/* One of a layer's kernels: direct (the task's own) or Winograd. */
typedef struct {
    int trials;               /* records stored */
    double s;                 /* re-timed; 0: not timed */
    double record_s;          /* the best record's cost, as the runner timed it while tuning */
    double diff;              /* its output against oneDNN's */
    const char *problem;      /* why there is no figure, or NULL */
} kres_t;

enum { K_DIRECT, K_WINO, NKERNELS };
static const char *const kernel_name[NKERNELS] = {"direct", "winograd"};

/* One oneDNN baseline of a layer: a primitive or dnnl_sgemm. */
typedef struct {
    char kind[8];             /* auto, wino, inner, matmul or sgemm */
    char impl[64];            /* oneDNN's name of its implementation */
    double s;                 /* re-timed */
    double diff;              /* its output against the first baseline's */
} bres_t;

#define MAX_BASES 4           /* a conv2d's: algorithm auto and up to three Winograd ones */

typedef struct {
    kres_t k[NKERNELS];
    int best;                 /* the faster right kernel (what the layer runs), or -1 */
    bres_t base[MAX_BASES];   /* the first is the reference of every output's diff */
    int nbase;
    int bbest;                /* the fastest baseline, the one the ratio is against */
    int no_wino;              /* a conv2d for which oneDNN offers no Winograd convolution */
    double dnnl_s;            /* the fastest baseline's; 0: not timed */
    const char *problem;      /* why the layer has no figure, or NULL */
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
static void load_layers(int winograd)
{
    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    kt_net_tasks_t *t =
        net ? kt_net_extract_ex(net, KT_NET_NHWC, winograd ? KT_NET_EXTRACT_WINOGRAD : 0) : NULL;
    if (!t)
        die("ResNet-18's tasks");
    for (int i = 0; i < t->ntasks; i++) {
        if (t->tasks[i].alt_of >= 0)
            continue;
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
    /* each Winograd alternative goes with the conv2d it replaces (net.h) */
    for (int i = 0; i < t->ntasks; i++) {
        int of = t->tasks[i].alt_of;
        if (of < 0)
            continue;
        char id[16];
        snprintf(id, sizeof id, "%d", of);
        for (int j = 0; j < nlayers; j++)
            if (strcmp(layers[j].id, id) == 0 && !layers[j].wino &&
                strcmp(kt_workload_op(t->tasks[i].wl), "conv2d_winograd_nhwc") == 0 &&
                !(layers[j].wino = kt_workload_parse(kt_workload_json(t->tasks[i].wl))))
                die("a Winograd task's workload");
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

/* ktune tune's --search-params and --seed for every layer (NULL: its
 * defaults). */
static const char *search_params, *seed;

/* Tune layer l's kernel (its task, or with wino its Winograd alternative)
 * up to `trials` records in the store with `threads` OpenMP threads (ktune
 * tune resumes: stored records count towards its budget). */
static void tune(const char *ktune, const char *db, const char *log, const layer_t *l,
                 int wino, int trials, int threads)
{
    const kt_workload_t *w = wino ? l->wino : l->w;
    int have = stored_trials(db, w);
    if (have >= trials)
        return;
    char ntr[32], nth[16];
    snprintf(ntr, sizeof ntr, "%d", trials);
    snprintf(nth, sizeof nth, "%d", threads);
    fprintf(stderr, "tuning %s (%s%s), %d thread%s: %d of %d trials stored ...\n", l->id,
            l->what, wino ? ", Winograd" : "", threads, threads > 1 ? "s" : "", have, trials);
    setenv("OMP_NUM_THREADS", nth, 1);   /* read by the embedded runner's kernels */
    char *argv[] = {(char *)ktune, "tune", "--workload", (char *)kt_workload_json(w),
                    "--trials", ntr, "--db", (char *)db, NULL, NULL, NULL, NULL, NULL};
    int na = 8;
    if (search_params) {
        argv[na++] = "--search-params";
        argv[na++] = (char *)search_params;
    }
    if (seed) {
        argv[na++] = "--seed";
        argv[na++] = (char *)seed;
    }
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
    int now = stored_trials(db, w);
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

/* w's best record compiled as `ktune build` does, into dir/<name>.so: the
 * kernel taking its layout-free weights packed when it has any (their
 * packed layouts into packs, their number into *npacks). NULL with
 * r->problem. */
static kt_codegen_lib_t *build_best(const char *db, const kt_workload_t *w, const char *name,
                                    const char *dir, kt_codegen_pack_t *packs, int *npacks,
                                    kres_t *r)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_store_t *s = access(db, F_OK) == 0 ? kt_store_open(db, KT_STORE_READONLY) : NULL;
    kt_record_list_t *best = NULL;
    if (!s || kt_store_best(s, kt_workload_key(w), "cpu", &best) != 0) {
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
    snprintf(so, sizeof so, "%.500s/%.40s.so", dir, name);
    if (kt_codegen_compile(src, so, NULL) != 0)
        die("compiling the kernel");
    free(src);
    kt_codegen_lib_t *lib = kt_codegen_load(so, "bench_kernel");
    if (!lib)
        die("loading the kernel");
    unlink(so);
    return lib;
}

static size_t buf_numel(const kt_dag_t *dag, int buf)
{
    return (size_t)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, buf)));
}

/* n floats on a 64-byte boundary, as the runner and a built network hold
 * buffers: malloc puts a large block 16 bytes past a page, so every vector
 * load of a packed weight would span two cache lines (12% slower kernels).
 * free() releases it. */
static float *aligned_floats(size_t n)
{
    return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
}

/* A layer's kernel ready to time: its buffers as a built network holds
 * them (weights packed once, untimed). */
typedef struct {
    const kt_dag_t *dag;
    kt_codegen_lib_t *lib;    /* NULL: no kernel (kres_t.problem says why) */
    float **bufs;             /* kt_codegen_bufs_new's: inputs, the output last */
    float *kbufs[KT_MEASURE_MAX_BUFS];   /* what the kernel gets: packed weights swapped in */
    float *packed[KT_CODEGEN_MAX_PACKS];
    int nbufs, npacks;
} kernel_t;

/* Build w's best kernel and its buffers. With direct (the conv2d kernel's
 * buffers) w is its Winograd alternative: it gets the same data and
 * epilogue operands and the conv2d's weight transformed as `ktune build`
 * transforms it (kt_net_plan_use_alternatives), the kernels' buffers
 * being data, weight, the epilogues' operands, output alike (te/ops.h). */
static void kernel_prepare(kernel_t *k, const char *db, const kt_workload_t *w,
                           const char *name, const char *dir, const kernel_t *direct, kres_t *r)
{
    memset(k, 0, sizeof *k);
    k->dag = kt_workload_dag(w);
    kt_codegen_pack_t packs[KT_CODEGEN_MAX_PACKS];
    r->trials = stored_trials(db, w);
    if (!(k->lib = build_best(db, w, name, dir, packs, &k->npacks, r)))
        return;
    k->nbufs = kt_codegen_num_bufs(k->dag);
    if (!(k->bufs = kt_codegen_bufs_new(k->dag, 1)) || k->nbufs > KT_MEASURE_MAX_BUFS)
        die("buffers");
    if (direct) {
        json_t *o = json_loads(kt_workload_json(w), 0, NULL);
        int64_t tile = json_integer_value(json_object_get(o, "tile_size"));
        int64_t CI = json_integer_value(json_object_get(o, "CI"));
        int64_t CO = json_integer_value(json_object_get(o, "CO"));
        json_decref(o);
        if (k->nbufs != direct->nbufs || buf_numel(k->dag, 0) != buf_numel(direct->dag, 0) ||
            buf_numel(direct->dag, 1) != (size_t)(9 * CI * CO)) {
            fprintf(stderr, "bench_layers: %s: the Winograd kernel's buffers do not match the "
                            "conv2d's\n", name);
            exit(1);
        }
        memcpy(k->bufs[0], direct->bufs[0], buf_numel(k->dag, 0) * sizeof(float));
        if (kt_ops_winograd_weight(tile, CI, CO, direct->bufs[1], k->bufs[1]) != 0)
            die("the Winograd weight");
        for (int i = 2; i < k->nbufs - 1; i++) {
            if (buf_numel(k->dag, i) != buf_numel(direct->dag, i)) {
                fprintf(stderr, "bench_layers: %s: buffer %d differs from the conv2d's\n", name,
                        i);
                exit(1);
            }
            memcpy(k->bufs[i], direct->bufs[i], buf_numel(k->dag, i) * sizeof(float));
        }
    }
    memcpy(k->kbufs, k->bufs, (size_t)k->nbufs * sizeof k->kbufs[0]);
    for (int p = 0; p < k->npacks; p++) {
        if (!(k->packed[p] = aligned_floats(buf_numel(k->dag, packs[p].buf))))
            die("out of memory");
        kt_codegen_pack(&packs[p], k->bufs[packs[p].buf], k->packed[p], 0);
        k->kbufs[packs[p].buf] = k->packed[p];
    }
}

static void kernel_release(kernel_t *k)
{
    for (int p = 0; p < k->npacks; p++)
        free(k->packed[p]);
    kt_codegen_bufs_free(k->dag, k->bufs);
    kt_codegen_unload(k->lib);
}

/* A oneDNN baseline ready to time, writing its own output buffer. */
typedef struct {
    kt_bench_dnnl_t d;        /* the primitive, unless is_sgemm */
    kt_bench_gemm_t sg;       /* dnnl_sgemm's operands, with is_sgemm */
    int is_sgemm;
    float *out;               /* owned */
} base_t;

static void base_run(void *arg)
{
    base_t *b = arg;
    if (b->is_sgemm)
        kt_bench_dnnl_sgemm_run(&b->sg);
    else
        kt_bench_dnnl_run(&b->d);
}

static void base_prep(void *arg)
{
    base_t *b = arg;
    if (!b->is_sgemm)
        kt_bench_dnnl_prep(&b->d);
}

/* A new baseline of kind kind in bs[*nb] on an output of nout floats (NaN
 * until written); the caller sets it up, on bs[*nb].out. */
static base_t *base_add(base_t *bs, int *nb, result_t *r, const char *kind, size_t nout)
{
    if (*nb == MAX_BASES) {
        fprintf(stderr, "bench_layers: more than %d oneDNN baselines\n", MAX_BASES);
        exit(1);
    }
    base_t *b = &bs[*nb];
    memset(b, 0, sizeof *b);
    if (!(b->out = aligned_floats(nout)))
        die("out of memory");
    for (size_t i = 0; i < nout; i++)
        b->out[i] = NAN;
    snprintf(r->base[*nb].kind, sizeof r->base[*nb].kind, "%s", kind);
    return b;
}

/* Base *nb, set up by its init's status rc (0, or 1 where oneDNN has no
 * such implementation: then it is dropped), joins the layer's baselines. */
static int base_keep(base_t *bs, int *nb, result_t *r, int rc)
{
    base_t *b = &bs[*nb];
    if (rc != 0) {
        free(b->out);
        return 0;
    }
    snprintf(r->base[*nb].impl, sizeof r->base[*nb].impl, "%.63s",
             b->is_sgemm ? "dnnl_sgemm" : b->d.impl);
    (*nb)++;
    return 1;
}

/* oneDNN's baselines for l on the kernel's input buffers bufs, into bs
 * (their number into r->nbase): a conv2d's convolution with algorithm auto
 * and each Winograd convolution oneDNN offers for it; a dense layer's inner
 * product and matmul primitive; a matmul's dnnl_sgemm and matmul
 * primitive. A residual add is the primitives' sum post-op. */
static void dnnl_setup(const layer_t *l, float **bufs, size_t nout, base_t *bs, result_t *r)
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
    int nb = 0, M = json_int(o, "M"), N = json_int(o, "N"), K = json_int(o, "K");
    base_t *b;
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
            .epi = epi, .nepi = nepi, .params = params, .data = bufs[0], .weight = bufs[1]};
        b = base_add(bs, &nb, r, "auto", nout);
        c.out = b->out;
        if (!base_keep(bs, &nb, r, kt_bench_dnnl_conv_init(&b->d, &c, dnnl_convolution_auto, 0))) {
            fprintf(stderr, "bench_layers: %s: oneDNN has no convolution for it\n", l->id);
            exit(1);
        }
        /* every Winograd implementation oneDNN offers (its tiles), in its order */
        int wino = 0;
        for (int nth = 0; nb < MAX_BASES; nth++) {
            b = base_add(bs, &nb, r, "wino", nout);
            c.out = b->out;
            if (!base_keep(bs, &nb, r,
                           kt_bench_dnnl_conv_init(&b->d, &c, dnnl_convolution_winograd, nth)))
                break;
            wino++;
        }
        r->no_wino = !wino;
    } else if (strcmp(op, "dense") == 0) {
        b = base_add(bs, &nb, r, "inner", nout);
        base_keep(bs, &nb, r, kt_bench_dnnl_dense_init(&b->d, M, N, K, epi, nepi, params,
                                                       bufs[0], bufs[1], b->out));
        b = base_add(bs, &nb, r, "matmul", nout);
        base_keep(bs, &nb, r, kt_bench_dnnl_matmul_init(&b->d, M, N, K, 1, epi, nepi, params,
                                                        bufs[0], bufs[1], b->out));
    } else {
        if (nepi) {
            fprintf(stderr, "bench_layers: %s: a matmul with an epilogue\n", l->id);
            exit(1);
        }
        b = base_add(bs, &nb, r, "sgemm", nout);
        b->sg = (kt_bench_gemm_t){M, N, K, bufs[0], bufs[1], b->out};
        b->is_sgemm = 1;
        base_keep(bs, &nb, r, 0);
        b = base_add(bs, &nb, r, "matmul", nout);
        base_keep(bs, &nb, r, kt_bench_dnnl_matmul_init(&b->d, M, N, K, 0, epi, nepi, params,
                                                        bufs[0], bufs[1], b->out));
    }
    if (nb < 2 && strcmp(op, "conv2d_nhwc") != 0) {
        fprintf(stderr, "bench_layers: %s: oneDNN lacks one of its two routes\n", l->id);
        exit(1);
    }
    r->nbase = nb;
    json_decref(o);
}

/* Build l's best kernels from db (direct, and Winograd where l has the
 * alternative), time them and oneDNN's baselines on `threads` threads. */
static void time_layer(const char *db, const layer_t *l, int threads, const char *dir,
                       result_t *r)
{
    memset(r, 0, sizeof *r);
    r->best = -1;
    kernel_t ks[NKERNELS];
    char name[40];
    kernel_prepare(&ks[K_DIRECT], db, l->w, l->id, dir, NULL, &r->k[K_DIRECT]);
    memset(&ks[K_WINO], 0, sizeof ks[K_WINO]);
    if (l->wino && ks[K_DIRECT].lib) {
        snprintf(name, sizeof name, "%.16s.winograd", l->id);
        kernel_prepare(&ks[K_WINO], db, l->wino, name, dir, &ks[K_DIRECT], &r->k[K_WINO]);
    }
    if (!ks[K_DIRECT].lib) {
        r->problem = r->k[K_DIRECT].problem;
        return;
    }
    const kt_dag_t *dag = ks[K_DIRECT].dag;
    size_t nout = buf_numel(dag, ks[K_DIRECT].nbufs - 1);
    /* before oneDNN's primitives are made: their kernels fix their thread
     * count then */
    omp_set_num_threads(threads);
    base_t bs[MAX_BASES];
    dnnl_setup(l, ks[K_DIRECT].bufs, nout, bs, r);

    kernel_run_t run[NKERNELS];
    for (int k = 0; k < NKERNELS; k++) {
        run[k] = (kernel_run_t){ks[k].lib ? kt_codegen_lib_fn(ks[k].lib) : NULL, ks[k].kbufs};
        r->k[k].s = ks[k].lib ? INFINITY : 0;
    }
    int wall = threads > 1;
    for (int b = 0; b < r->nbase; b++)
        r->base[b].s = INFINITY;
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < NKERNELS; k++) {
            if (!ks[k].lib)
                continue;
            double t = kt_bench_time(kernel_run, &run[k], wall);
            r->k[k].s = t < r->k[k].s ? t : r->k[k].s;
        }
        for (int b = 0; b < r->nbase; b++) {
            double t = kt_bench_time_prep(base_run, base_prep, &bs[b], wall);
            r->base[b].s = t < r->base[b].s ? t : r->base[b].s;
        }
    }
    /* the baselines' outputs: each must compute the layer as the first does */
    const float *dout = bs[0].out;
    for (int b = 0; b < r->nbase; b++) {
        bres_t *br = &r->base[b];
        if (!bs[b].is_sgemm)
            kt_bench_dnnl_output(&bs[b].d);
        br->diff = b ? kt_codegen_rel_err(bs[b].out, dout, nout) : 0;
        if (!(br->diff <= (strcmp(br->kind, "wino") == 0 ? MAX_DIFF_WINOGRAD : MAX_DIFF))) {
            fprintf(stderr, "bench_layers: %s: oneDNN's %s (%s) differs from its %s by %.1e\n",
                    l->id, br->kind, br->impl, r->base[0].kind, br->diff);
            r->problem = "BASE";
        }
        if (b == 0 || br->s < r->base[r->bbest].s)
            r->bbest = b;
    }
    r->dnnl_s = r->base[r->bbest].s;
    for (int k = 0; k < NKERNELS; k++) {
        kres_t *kr = &r->k[k];
        if (!ks[k].lib)
            continue;
        if (buf_numel(ks[k].dag, ks[k].nbufs - 1) != nout)
            die("the Winograd kernel's output size");
        kr->diff = kt_codegen_rel_err(ks[k].bufs[ks[k].nbufs - 1], dout, nout);
        if (!(kr->diff <= (k == K_WINO ? MAX_DIFF_WINOGRAD : MAX_DIFF)))
            kr->problem = r->problem = "WRONG";
        else if (r->best < 0 || kr->s < r->k[r->best].s)
            r->best = k;
    }

    for (int b = 0; b < r->nbase; b++) {
        if (!bs[b].is_sgemm)
            kt_bench_dnnl_free(&bs[b].d);
        free(bs[b].out);
    }
    for (int k = 0; k < NKERNELS; k++)
        kernel_release(&ks[k]);
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
    printf("%-10s %-*s %9s %9s %9s %-8s %9s %9s %9s %-8s %7s %8s %8s %8s %9s %9s  %s\n", "task",
           width, "layer", "trials", "tuned ms", "ktune ms", "kernel", "direct ms", "wino ms",
           "oneDNN ms", "baseline", "ratio", "ktune GF", "dnnl GF", "diff", "wino diff",
           "base diff", "oneDNN's baselines: kind implementation ms (* the fastest)");
    double logsum = 0, mm_logsum = 0, k_total = 0, d_total = 0;
    int n = 0, ok = 0, nsel = 0, mm_n = 0, mm_ok = 0, mm_sel = 0, all_net = 1, nwino = 0;
    int base_wino = 0, base_matmul = 0;
    for (int i = 0; i < nlayers; i++) {
        const layer_t *l = &layers[i];
        const result_t *r = &res[i];
        if (!l->selected)
            continue;
        int mm = l->weight == 0;
        mm ? mm_sel++ : nsel++;
        const kres_t *dk = &r->k[K_DIRECT], *wk = &r->k[K_WINO];
        const kres_t *bk = r->best >= 0 ? &r->k[r->best] : NULL;
        char trials[32];
        if (l->wino)
            snprintf(trials, sizeof trials, "%d+%d", dk->trials, wk->trials);
        else
            snprintf(trials, sizeof trials, "%d", dk->trials);
        printf("%-10s %-*s %9s", l->id, width, l->what, trials);
        if (dk->s > 0) {
            double flops = kt_workload_flops(l->w);
            printf(" %9.3f", (bk ? bk : dk)->record_s * 1e3);
            if (bk)
                printf(" %9.3f %-8s", bk->s * 1e3, kernel_name[r->best]);
            else
                printf(" %9s %-8s", "-", "-");
            printf(" %9.3f", dk->s * 1e3);
            if (wk->s > 0)
                printf(" %9.3f", wk->s * 1e3);
            else
                printf(" %9s", l->wino ? "none" : "-");
            printf(" %9.3f %-8s", r->dnnl_s * 1e3, r->base[r->bbest].kind);
            if (r->problem || !bk)
                printf(" %7s", r->problem ? r->problem : "-");
            else
                printf(" %6.2fx", r->dnnl_s / bk->s);
            if (bk)
                printf(" %8.1f", flops / bk->s * 1e-9);
            else
                printf(" %8s", "-");
            printf(" %8.1f %8.1e", flops / r->dnnl_s * 1e-9, dk->diff);
            if (wk->s > 0)
                printf(" %9.1e", wk->diff);
            else
                printf(" %9s", "-");
            double bdiff = -1;
            for (int b = 1; b < r->nbase; b++)
                bdiff = r->base[b].diff > bdiff ? r->base[b].diff : bdiff;
            if (bdiff >= 0)
                printf(" %9.1e ", bdiff);
            else
                printf(" %9s ", "-");
            for (int b = 0; b < r->nbase; b++)
                printf(" %s %s %.3f%s", r->base[b].kind, r->base[b].impl, r->base[b].s * 1e3,
                       b == r->bbest ? "*" : "");
            printf("%s\n", r->no_wino ? " wino n/a" : "");
        } else {
            printf("  %s\n", r->problem);
        }
        if (r->problem || !bk) {
            all_net = all_net && mm;
            continue;
        }
        double ratio = r->dnnl_s / bk->s;
        base_wino += strcmp(r->base[r->bbest].kind, "wino") == 0;
        base_matmul += strcmp(r->base[r->bbest].kind, "matmul") == 0;
        if (mm) {
            mm_logsum += log(ratio);
            mm_n++;
            mm_ok += ratio >= GOAL_LAYER;
        } else {
            logsum += log(ratio);
            n++;
            nwino += r->best == K_WINO;
            ok += ratio >= GOAL_LAYER;
            k_total += l->weight * bk->s;
            d_total += l->weight * r->dnnl_s;
        }
    }
    if (nsel) {
        printf("ResNet-18 layers: geometric mean of oneDNN/ktune %.2fx over %d (goal >= %.2fx), "
               "%d of %d at >= %.1fx (goal: all); ktune: the faster kernel, Winograd on %d\n",
               n ? exp(logsum / n) : 0.0, n, GOAL_GEOMEAN, ok, nsel, GOAL_LAYER, nwino);
        printf("  oneDNN: the fastest of its baselines, Winograd on %d, the matmul primitive on "
               "%d\n", base_wino, base_matmul);
        if (all_net && n == nsel)
            printf("  the layers in all (each times its appearances): ktune %.3f ms, oneDNN "
                   "%.3f ms\n", k_total * 1e3, d_total * 1e3);
    }
    if (mm_sel)
        printf("matmul against oneDNN (the faster of dnnl_sgemm and the matmul primitive): "
               "geometric mean %.2fx over %d, %d of %d at >= %.1fx\n",
               mm_n ? exp(mm_logsum / mm_n) : 0.0, mm_n, mm_ok, mm_sel, GOAL_LAYER);
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_layers [--trials N (256)] [--threads 1,2] [--db PATH "
               "(bench_layers.db)]\n"
               "                    [--layers ID,...] [--no-winograd] [--search-params LIST]\n"
               "                    [--seed S]\n"
               "ResNet-18's conv2d and dense layers and matmul 512/1024, tuned by ktune (a\n"
               "store per thread count: PATH, PATH.t2, ...) and timed against oneDNN; each\n"
               "3x3 stride-1 conv2d also as its Winograd alternative (--no-winograd: not),\n"
               "the faster kernel counting. oneDNN's figure is the fastest of its routes:\n"
               "convolution auto and Winograd; inner product or dnnl_sgemm and the matmul\n"
               "primitive (pre-packed weights); residual adds as the sum post-op.\n"
               "--layers takes task ids of `ktune tasks --network resnet-18`, matmul512 and\n"
               "matmul1024. --search-params and --seed are passed to ktune tune (A/B runs\n"
               "of a search option, or searches with other seeds, use a store each).\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trials", required_argument, 0, 't'}, {"threads", required_argument, 0, 'n'},
        {"db", required_argument, 0, 'd'},     {"layers", required_argument, 0, 'l'},
        {"no-winograd", no_argument, 0, 'W'},  {"help", no_argument, 0, 'h'},
        {"search-params", required_argument, 0, 'S'},
        {"seed", required_argument, 0, 's'},
        {0, 0, 0, 0},
    };
    long trials = 256;
    int winograd = 1;
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
        case 'W': winograd = 0; break;
        case 'S': search_params = optarg; break;
        case 's':
            if (!*optarg || strspn(optarg, "0123456789") != strlen(optarg) ||
                strlen(optarg) > 19) {
                fprintf(stderr, "bench_layers: --seed wants a non-negative integer, got '%s'\n",
                        optarg);
                return 2;
            }
            seed = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_layers: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    load_layers(winograd);
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
    printf("ratio = oneDNN ms / ktune ms (> 1: ktune faster); ktune ms: the faster of the direct "
           "and the Winograd kernel%s\n"
           "oneDNN ms: the fastest of oneDNN's baselines (baseline: which): a conv2d's "
           "convolution with algorithm auto\n"
           "  (auto, NHWC) and each Winograd convolution oneDNN offers (wino, on its blocked "
           "layout, the reorders\n"
           "  untimed; n/a: none); dense: the inner product (inner) and the matmul primitive "
           "(matmul); matmul:\n"
           "  dnnl_sgemm (sgemm, packs B on every call) and the matmul primitive (matmul, the "
           "weights pre-packed\n"
           "  once); a residual add is a sum post-op into dst, refilled with the residual before "
           "each call, untimed\n"
           "diff: ktune's outputs against the first baseline's; base diff: the other baselines' "
           "largest against it\n"
           "  (WRONG or BASE above %.0e; Winograd above %.0e)\n",
           winograd ? "" : " (Winograd off: --no-winograd)", MAX_DIFF, MAX_DIFF_WINOGRAD);
    fflush(stdout);

    for (int t = 0; t < nthreads; t++)
        for (int i = 0; i < nlayers; i++)
            for (int k = 0; k < NKERNELS; k++)
                if (layers[i].selected && (k == K_DIRECT || layers[i].wino))
                    tune(ktune, dbs[t], log, &layers[i], k == K_WINO, (int)trials, threads[t]);
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
        printf("%d layer%s without a figure (no valid record; WRONG: ktune's output differs "
               "from oneDNN's; BASE: oneDNN's baselines disagree): exit status 1\n", wrong,
               wrong > 1 ? "s" : "");
    rmdir(dir);
    for (int i = 0; i < nlayers; i++) {
        kt_workload_free(layers[i].w);
        kt_workload_free(layers[i].wino);
    }
    return wrong ? 1 : 0;
}
