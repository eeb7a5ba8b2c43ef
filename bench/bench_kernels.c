/* bench_kernels: how fast are sampled schedules? For matmul 512^3 and
 * 1024^3 and ResNet-18's 3x3 conv2d on 56x56x64 (NHWC, batch 1, pad 1, with
 * its fused bias_add + relu), the best of 64
 * random states against the naive reference kernel and, for matmul,
 * OpenBLAS sgemm; everything on one thread, GFLOPS from the DAG's flop
 * count, timed in thread CPU time (the machine may be shared; the load
 * average is printed). Every timed candidate is also checked against the
 * reference. Tuned kernels are timed on weights packed once (their
 * ktune_kernel_packed variant), as the runner times them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_blas.h"
#include "codegen/codegen.h"
#include "codegen/verify.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

static int candidates = 64;   /* states sampled per workload (argv[1] overrides) */
#define SLOW_S 0.25   /* a run longer than this is timed once */


/* Timed in CPU time of this thread (kt_bench_blas_cpu_now): the machine is
 * shared, and wall time would charge other processes' slices to the kernel.
 * Everything timed here runs on this one thread (OMP_NUM_THREADS=1, OpenBLAS
 * with one thread). */

/* Best of up to 5 timed runs after a warm-up (slow kernels: one run). */
static double time_fn(kt_kernel_fn fn, float **bufs)
{
    double t0 = kt_bench_blas_cpu_now();
    if (fn(bufs) != 0)
        return -1;
    double best = kt_bench_blas_cpu_now() - t0;
    for (int r = 0; r < 5 && best < SLOW_S; r++) {
        t0 = kt_bench_blas_cpu_now();
        fn(bufs);
        double t = kt_bench_blas_cpu_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static double compile_s, run_s;   /* where the bench's time goes */

typedef struct {
    double ref_gflops, best_gflops, blas_gflops;
    double fixed_gflops;   /* best of the workload's fixed states (what tuning finds) */
    int ok, wrong, failed;
} result_t;

/* Compile sources[0..n-1] into dir/k<i>.so with up to `jobs` compilers at a
 * time (compiling dominates the bench's time); ok[i] says which built. */
static void compile_all(const char *dir, char **sources, int n, int jobs, int *ok)
{
    double c0 = kt_time_mono();
    pid_t pids[256];
    int idx[256], running = 0, next = 0;
    if (jobs > 256)
        jobs = 256;
    while (next < n || running > 0) {
        while (running < jobs && next < n) {
            ok[next] = 0;
            if (!sources[next]) {
                next++;
                continue;
            }
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                char so[512];
                snprintf(so, sizeof(so), "%s/k%d.so", dir, next);
                int rc = kt_codegen_compile(sources[next], so, NULL);
                if (rc)
                    fprintf(stderr, "  candidate %d: %s\n", next, kt_err_msg());
                _exit(rc ? 1 : 0);
            }
            if (pid < 0) {
                perror("fork");
                exit(1);
            }
            pids[running] = pid;
            idx[running++] = next++;
        }
        int status;
        pid_t done = wait(&status);
        for (int j = 0; j < running; j++)
            if (pids[j] == done) {
                ok[idx[j]] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                pids[j] = pids[running - 1];
                idx[j] = idx[running - 1];
                running--;
                break;
            }
    }
    compile_s += kt_time_mono() - c0;
}

/* Run dir/k<i>.so on bufs, check output `out` against want, time it. A
 * tuned kernel is timed as the runner times it and a built network runs
 * it: ktune_kernel_packed on weights ktune_kernel_pack laid out once. */
static double run_so(const kt_dag_t *dag, const char *dir, int i, float **bufs, int out,
                     const float *want, size_t n, double *err)
{
    char so[512];
    snprintf(so, sizeof(so), "%s/k%d.so", dir, i);
    double t = -1;
    *err = INFINITY;
    kt_codegen_lib_t *lib = kt_codegen_load(so, "ktune_kernel_packed");
    kt_codegen_lib_t *plib = lib ? kt_codegen_load(so, "ktune_kernel_pack") : NULL;
    if (!plib) {
        kt_codegen_unload(lib);
        kt_err_clear();
        lib = kt_codegen_load(so, "ktune_kernel");   /* the reference */
    }
    float *args[KT_TE_MAX_STAGES + 1], *owned[KT_TE_MAX_STAGES + 1] = {0};
    for (int b = 0; b <= out; b++)
        args[b] = bufs[b];
    if (plib) {
        int (*pack)(int, const float *, float *);
        kt_kernel_fn f = kt_codegen_lib_fn(plib);
        memcpy(&pack, &f, sizeof(pack));
        for (int b = 0; b < out; b++) {
            if (pack(b, NULL, NULL) != 1)
                continue;
            size_t cnt = (size_t)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, b)));
            owned[b] = aligned_alloc(64, (cnt * sizeof(float) + 63) / 64 * 64);
            if (!owned[b]) {
                fprintf(stderr, "out of memory\n");
                exit(1);
            }
            pack(b, bufs[b], owned[b]);
            args[b] = owned[b];
        }
    }
    if (lib) {
        memset(bufs[out], 0xff, n * sizeof(float));
        double r0 = kt_time_mono();
        t = time_fn(kt_codegen_lib_fn(lib), args);
        run_s += kt_time_mono() - r0;
        *err = want ? kt_codegen_rel_err(bufs[out], want, n) : 0;
        kt_codegen_unload(lib);
    } else {
        fprintf(stderr, "  candidate %d: %s\n", i, kt_err_msg());
    }
    kt_codegen_unload(plib);
    for (int b = 0; b < out; b++)
        free(owned[b]);
    unlink(so);
    return t;
}

static void bench(const char *name, kt_dag_t *dag, const char *const *fixed, int is_matmul,
                  int64_t M, int64_t N, int64_t K, result_t *res)
{
    memset(res, 0, sizeof(*res));
    double flops = kt_dag_flop_count(dag);
    char dir[] = "/tmp/kt_bench_kernelsXXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    float **bufs = kt_codegen_bufs_new(dag, 1);
    int out = kt_codegen_num_bufs(dag) - 1;
    size_t n = (size_t)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, out)));
    float *want = malloc(n * sizeof(float));
    if (!bufs || !want) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }

    fprintf(stderr, "%s: reference kernel...\n", name);
    char *src = kt_codegen_reference_c(dag, "ktune_kernel");
    int built = 0;
    double err;
    compile_all(dir, &src, 1, 1, &built);
    free(src);
    double t = built ? run_so(dag, dir, 0, bufs, out, NULL, n, &err) : -1;
    if (t <= 0) {
        fprintf(stderr, "%s: reference failed\n", name);
        exit(1);
    }
    memcpy(want, bufs[out], n * sizeof(float));
    res->ref_gflops = flops / t * 1e-9;

    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 1;
    kt_sched_state_t **sk;
    int nsk;
    if (kt_sched_sketches(dag, &p, &sk, &nsk) != 0 || nsk == 0) {
        fprintf(stderr, "%s: sketches: %s\n", name, kt_err_msg());
        exit(1);
    }
    kt_rng_t rng;
    kt_rng_seed(&rng, 2024);
    int nfixed = 0;
    while (fixed && fixed[nfixed])
        nfixed++;
    int total = candidates + nfixed;
    char **sources = calloc((size_t)total, sizeof(char *));
    int *ok = calloc((size_t)total, sizeof(int));
    if (!sources || !ok) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int i = 0; i < candidates; i++) {
        const kt_sched_state_t *sketch = sk[kt_rng_below(&rng, (uint64_t)nsk)];
        kt_sched_state_t *st = kt_sched_sample(dag, &p, sketch, &rng);
        sources[i] = st ? kt_codegen_emit_c(dag, st, "ktune_kernel") : NULL;
        if (!sources[i])
            fprintf(stderr, "  candidate %d: %s\n", i, kt_err_msg());
        kt_sched_state_free(st);
    }
    for (int i = 0; i < nfixed; i++) {
        kt_sched_state_t *st = kt_sched_state_from_json(fixed[i], dag, &p);
        sources[candidates + i] = st ? kt_codegen_emit_c(dag, st, "ktune_kernel") : NULL;
        if (!sources[candidates + i])
            fprintf(stderr, "  fixed state %d: %s\n", i, kt_err_msg());
        kt_sched_state_free(st);
    }
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "%s: compiling %d candidates, %ld at a time...\n", name, candidates, jobs);
    compile_all(dir, sources, total, jobs > 0 ? (int)jobs : 1, ok);
    for (int i = 0; i < total; i++) {
        free(sources[i]);
        t = ok[i] ? run_so(dag, dir, i, bufs, out, want, n, &err) : -1;
        if (i >= candidates) {
            double g = t > 0 && err <= KT_CODEGEN_MAX_REL_ERR ? flops / t * 1e-9 : 0;
            if (g <= 0)
                fprintf(stderr, "  fixed state %d failed or wrong\n", i - candidates);
            res->fixed_gflops = g > res->fixed_gflops ? g : res->fixed_gflops;
        } else if (t <= 0) {
            res->failed++;
        } else if (!(err <= KT_CODEGEN_MAX_REL_ERR)) {
            fprintf(stderr, "  candidate %d: wrong answers (max relative error %.3g)\n", i, err);
            res->wrong++;
        } else {
            res->ok++;
            double g = flops / t * 1e-9;
            if (g > res->best_gflops)
                res->best_gflops = g;
        }
    }
    fprintf(stderr,
            "%s: best %.2f GFLOPS, fixed states %.2f (%.0f s compiling, %.0f s running)\n", name,
            res->best_gflops, res->fixed_gflops, compile_s, run_s);
    free(sources);
    free(ok);
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);

    if (is_matmul) {
        float *A = bufs[0], *B = bufs[1], *C = bufs[2];
        double best = INFINITY;
        for (int r = 0; r < 6; r++) {
            double t0 = kt_bench_blas_cpu_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A,
                        (int)K, B, (int)N, 0.0f, C, (int)N);
            double dt = kt_bench_blas_cpu_now() - t0;
            best = dt < best ? dt : best;
        }
        if (kt_codegen_rel_err(C, want, n) > KT_CODEGEN_MAX_REL_ERR)
            fprintf(stderr, "%s: OpenBLAS disagrees with the reference\n", name);
        res->blas_gflops = flops / best * 1e-9;
    }
    kt_codegen_bufs_free(dag, bufs);
    free(want);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    /* One thread everywhere. OpenMP reads OMP_NUM_THREADS when libgomp
     * loads (libktune's dependencies may load it at start), so re-exec with
     * the environment set rather than setting it too late. */
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || strcmp(omp, "1") != 0) {
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        execv("/proc/self/exe", argv);
        perror("re-exec with OMP_NUM_THREADS=1");
        return 1;
    }
    openblas_set_num_threads(1);
    if (argc > 1 && (candidates = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: bench_kernels [candidates per workload, default 64]\n");
        return 2;
    }

    double load0[3] = {0, 0, 0};
    getloadavg(load0, 3);
    /* ResNet-18's conv carries its fused bias_add + relu, as TVM tunes it. */
    kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_conv2d_params_t cp = {{1, 1}, {1, 1, 1, 1}, {1, 1}};
    /* Fixed states of the shape Ansor's tuning converges to (SSRSRS, cache
     * write, an 8x32 or 7x64 register tile, long inner reduction): they show
     * what the emitted code reaches once tuning has found the tiles. */
#define MM_STATE(TILE) \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"}," \
    "{\"ann\":[0,1,64],\"ann2\":[1,1,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2," \
    "\"name\":\"C\",\"tile\":" TILE "}],\"version\":1}"
#define CONV_STATE(TILE) \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"ann\":[1,0,0],\"kind\":\"root\"," \
    "\"name\":\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,64]," \
    "\"fuse\":\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\","       \
    "\"tile\":" TILE "}," \
    "{\"kind\":\"input\",\"name\":\"bias\"},{\"kind\":\"inline\",\"name\":\"T_bias_add\"}," \
    "{\"ann\":[3,1,0],\"kind\":\"fused\",\"name\":\"T_relu\"}],\"version\":1}"
    /* The last ones per matmul: a 4x64 or 8x32 register tile whose A rows stay in L1
     * across the column blocks (level-2 loop over j), the fastest of a hand grid
     * (docs/benchmarks.md, 2026-11-26 22:10). */
    static const char *const mm512[] = {MM_STATE("[[16,2,2,8],[1,4,4,32],[8,64]]"),
                                        MM_STATE("[[16,4,1,8],[1,1,16,32],[8,64]]"),
                                        MM_STATE("[[1,128,1,4],[2,4,1,64],[8,64]]"), NULL};
    static const char *const mm1024[] = {MM_STATE("[[32,2,2,8],[1,8,4,32],[16,64]]"),
                                         MM_STATE("[[16,4,2,8],[2,4,4,32],[16,64]]"),
                                         MM_STATE("[[1,256,1,4],[4,4,1,64],[16,64]]"),
                                         MM_STATE("[[1,128,1,8],[4,8,1,32],[16,64]]"), NULL};
    static const char *const conv[] = {
        CONV_STATE("[[1,1,1,1],[14,2,2,1],[2,1,4,7],[1,1,1,64],[3,1],[3,1],[1,64]]"),
        CONV_STATE("[[1,1,1,1],[28,2,1,1],[2,2,2,7],[1,2,1,32],[3,1],[3,1],[1,64]]"), NULL};
    struct {
        const char *name;
        kt_dag_t *dag;
        const char *const *fixed;
        int64_t m;   /* matmul: M = N = K; 0 for conv2d */
    } w[3] = {
        {"matmul 512^3", kt_ops_matmul(512, 512, 512, 0, NULL, 0), mm512, 512},
        {"matmul 1024^3", kt_ops_matmul(1024, 1024, 1024, 0, NULL, 0), mm1024, 1024},
        {"conv2d 56x56x64 3x3", kt_ops_conv2d_nhwc(1, 56, 56, 64, 64, 3, 3, &cp, ep, 2), conv, 0},
    };
    result_t r[3];
    int wrong = 0;
    for (int i = 0; i < 3; i++) {
        if (!w[i].dag) {
            fprintf(stderr, "building workloads: %s\n", kt_err_msg());
            return 1;
        }
        bench(w[i].name, w[i].dag, w[i].fixed, w[i].m > 0, w[i].m, w[i].m, w[i].m, &r[i]);
    }

    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("\n1 thread, GFLOPS from thread CPU time (best of %d random states per workload); "
           "load average %.1f %.1f %.1f at start, %.1f %.1f %.1f at end\n",
           candidates, load0[0], load0[1], load0[2], load[0], load[1], load[2]);
    printf("%-22s %10s %10s %10s %10s %10s %10s  %s\n", "workload", "reference", "best", "fixed",
           "OpenBLAS", "best/ref", "best/BLAS", "candidates ok/wrong/failed");
    for (int i = 0; i < 3; i++) {
        char blas[16] = "-", ratio[16] = "-";
        if (r[i].blas_gflops > 0) {
            snprintf(blas, sizeof(blas), "%.2f", r[i].blas_gflops);
            snprintf(ratio, sizeof(ratio), "%.2f", r[i].best_gflops / r[i].blas_gflops);
        }
        printf("%-22s %10.2f %10.2f %10.2f %10s %10.1f %10s  %d/%d/%d\n", w[i].name,
               r[i].ref_gflops, r[i].best_gflops, r[i].fixed_gflops, blas,
               r[i].best_gflops / r[i].ref_gflops, ratio, r[i].ok, r[i].wrong, r[i].failed);
        wrong += r[i].wrong;
        kt_dag_free(w[i].dag);
    }
    return wrong ? 1 : 0;
}
