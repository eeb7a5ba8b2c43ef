/* Suite "gpu": GPU sketch rules and annotation, GPU state JSON, hardware
 * limits, CUDA emission through NVRTC and the exact CUDA text run on the
 * CPU (codegen/cuda_cpu.h) checked against the naive reference.
 *
 * Every operator family gets FAMILY_STATES random GPU states (sampled from
 * every sketch, some mutated further) spread over its shapes. Per shape the
 * CUDA text of all states goes into two programs that g++ compiles at once
 * (two cores) and runs on the CPU; per family the CUDA kernels of all states go into one NVRTC
 * program, compiled for sm_80 and sm_90 side by side. NVRTC's optimizer
 * needs seconds per tiled kernel, so the whole program is compiled with -G
 * (front end, PTX generation and ptxas at -O0: every error and warning but
 * the optimizer's), and the states with the smallest register tiles once
 * more with full optimization. Tests needing NVRTC fail in a build without
 * it (tests/kt_skip.h). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/lower.h"
#include "codegen/verify.h"
#include "kt_config.h"
#include "measure/hw_params.h"
#include "measure/nvrtc.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#include "kt_skip.h"

#include "states_harness.h"

#define FAMILY_STATES 50   /* random states checked per operator family */
#define MAX_STATES KT_TEST_MAX_STATES
#define OPT_STATES 2       /* per family, also compiled with full optimization */
#define NVRTC_FAST "-G"

static kt_sched_params_t gpu_params(const char *preset, const char *override)
{
    kt_hw_params_t hw;
    ck_assert_int_eq(kt_hw_params_preset(preset, &hw), 0);
    if (override)
        ck_assert_msg(kt_hw_params_override(&hw, override) == 0, "%s", kt_err_msg());
    kt_sched_params_t p;
    ck_assert_msg(kt_sched_params_from_hw(&hw, &p) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(p.target, KT_SCHED_TARGET_CUDA);
    return p;
}

static int stage_index(const kt_dag_t *dag, const char *name)
{
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, name) == 0)
            return i;
    return -1;
}

/* ---- one operator family ---------------------------------------------------------- */

typedef struct {
    char name[KT_CODEGEN_KERNEL_NAME];
    int64_t smem;
} kname_t;

typedef struct {
    kt_sbuf_t cuda;          /* every kernel of the family, one NVRTC program */
    kt_sbuf_t cuda_opt;      /* the states compiled with full optimization */
    kname_t kernels[1024];
    int nkernels, nopt, nstates;
} family_t;

static void family_init(family_t *f)
{
    memset(f, 0, sizeof(*f));
    kt_sbuf_init(&f->cuda);
    kt_sbuf_init(&f->cuda_opt);
    kt_codegen_preamble_cuda(&f->cuda);
    kt_codegen_preamble_cuda(&f->cuda_opt);
}

/* Register-tile floats of a state's largest kernel: the optimizer's cost. */
static int64_t tile_cost(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    kt_sched_gpu_kernel_t k[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, k);
    int64_t c = 0;
    for (int i = 0; i < nk; i++)
        c = k[i].local_elems * k[i].vthreads > c ? k[i].local_elems * k[i].vthreads : c;
    return c;
}

/* n random states of one shape: CUDA text run on the CPU against the reference,
 * CUDA kernels added to the family's program. */
static void check_shape(family_t *f, const char *what, kt_dag_t *dag, int n, uint64_t seed,
                        int shape)
{
    ck_assert_msg(dag != NULL, "%s: %s", what, kt_err_msg());
    ck_assert_int_le(n, MAX_STATES);
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    kt_sched_state_t *st[MAX_STATES];
    int got = kt_test_collect_states(dag, &p, seed, st, n);
    ck_assert_int_eq(got, n);

    /* the exact text NVRTC compiles, run on the CPU (the emulation printed
     * from the same lowering would not run the CUDA printer) */
    kt_test_check_cuda_cpu_states(what, dag, st, n, seed, "cu");

    /* the CUDA kernels, and the cheapest states once more for -O3 */
    int cheap[OPT_STATES];
    for (int k = 0; k < OPT_STATES; k++)
        cheap[k] = -1;
    for (int i = 0; i < n; i++) {
        char entry[32];
        snprintf(entry, sizeof(entry), "s%d_%d", shape, i);
        kt_codegen_cuda_t meta;
        int rc = kt_codegen_emit_cuda_into(dag, st[i], entry, &f->cuda, &meta);
        ck_assert_msg(rc == 0, "%s: CUDA %d: %s", what, i, kt_err_msg());
        ck_assert_int_ge(meta.n_launches, 1);
        for (int k = 0; k < meta.n_launches; k++) {
            ck_assert_int_lt(f->nkernels, (int)KT_ARRAY_LEN(f->kernels));
            kname_t *kn = &f->kernels[f->nkernels++];
            snprintf(kn->name, sizeof(kn->name), "%s", meta.launches[k].name);
            kn->smem = meta.launches[k].smem_bytes;
        }
        kt_codegen_cuda_clear(&meta);
        int64_t c = tile_cost(dag, st[i]);
        for (int k = 0; k < OPT_STATES; k++)
            if (cheap[k] < 0 || c < tile_cost(dag, st[cheap[k]])) {
                for (int m = OPT_STATES - 1; m > k; m--)
                    cheap[m] = cheap[m - 1];
                cheap[k] = i;
                break;
            }
    }
    if (shape == 0)
        for (int k = 0; k < OPT_STATES && cheap[k] >= 0; k++) {
            char entry[32];
            snprintf(entry, sizeof(entry), "o%d_%d", shape, cheap[k]);
            ck_assert_int_eq(kt_codegen_emit_cuda_into(dag, st[cheap[k]], entry, &f->cuda_opt,
                                                       NULL),
                             0);
            f->nopt++;
        }
    f->nstates += n;
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    kt_dag_free(dag);
}

/* Compile src for arch; on failure or any warning write a message to fd.
 * (Unused in a build without CUDA.) */
__attribute__((unused)) static int nvrtc_ok(const family_t *f, const char *src, const char *arch,
                                            const char *opts, int check_kernels, char *msg,
                                            size_t cap)
{
    kt_nvrtc_result_t r;
    int rc = kt_nvrtc_compile(src, arch, opts, 0, &r);
    int ok = rc == 0;
    if (!ok)
        snprintf(msg, cap, "%s %s: %s", arch, opts ? opts : "", kt_err_msg());
    else if (r.log && strstr(r.log, "warning")) {
        ok = 0;
        snprintf(msg, cap, "%s %s: warnings:\n%.2000s", arch, opts ? opts : "", r.log);
    }
    for (int i = 0; ok && check_kernels && i < f->nkernels; i++) {
        const kt_nvrtc_kernel_t *k = kt_nvrtc_result_kernel(&r, f->kernels[i].name);
        if (!k) {
            ok = 0;
            snprintf(msg, cap, "%s: no kernel %s in the cubin", arch, f->kernels[i].name);
        } else if (k->static_smem_bytes > f->kernels[i].smem || k->static_smem_bytes > 48 * 1024) {
            ok = 0;
            snprintf(msg, cap, "%s: kernel %s uses %d bytes of shared memory, planned %lld",
                     arch, k->name, k->static_smem_bytes, (long long)f->kernels[i].smem);
        }
    }
    kt_nvrtc_result_clear(&r);
    return ok;
}

/* NVRTC for sm_80 (a child) and sm_90 (here) side by side; then the
 * cheapest states with full optimization for sm_90. */
static void family_end(family_t *f, const char *family)
{
    ck_assert_int_ge(f->nstates, FAMILY_STATES);
#if KT_HAVE_CUDA
    ck_assert_int_eq(kt_sbuf_ok(&f->cuda), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    char msg[2400] = "";
    if (pid == 0) {
        close(fds[0]);
        int ok = nvrtc_ok(f, f->cuda.data, "sm_80", NVRTC_FAST, 1, msg, sizeof(msg));
        if (!ok && write(fds[1], msg, strlen(msg)) < 0)
            _exit(2);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    int ok90 = nvrtc_ok(f, f->cuda.data, "sm_90", NVRTC_FAST, 1, msg, sizeof(msg));
    int ok90_opt = ok90 && nvrtc_ok(f, f->cuda_opt.data, "sm_90", NULL, 0, msg, sizeof(msg));
    char cmsg[2400] = "";
    ssize_t got = read(fds[0], cmsg, sizeof(cmsg) - 1);
    cmsg[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(ok90 && ok90_opt, "%s: NVRTC: %s", family, msg);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: NVRTC: %s", family, cmsg);
    ck_assert_int_ge(f->nopt, 1);
#else
    char what[128];
    snprintf(what, sizeof what, "%s: NVRTC compile of %d kernels", family, f->nkernels);
    kt_fail_without_cuda(what);
#endif
    kt_sbuf_free(&f->cuda);
    kt_sbuf_free(&f->cuda_opt);
}

/* One operator family: FAMILY_STATES states spread over its shapes. */
#define FAMILY(name, ...)                                                                       \
    do {                                                                                        \
        struct {                                                                                \
            const char *what;                                                                   \
            kt_dag_t *dag;                                                                      \
        } shapes_[] = {__VA_ARGS__};                                                            \
        int n_ = (int)(sizeof(shapes_) / sizeof(shapes_[0]));                                   \
        static family_t f_;                                                                     \
        family_init(&f_);                                                                       \
        for (int i_ = 0; i_ < n_; i_++)                                                         \
            check_shape(&f_, shapes_[i_].what, shapes_[i_].dag, (FAMILY_STATES + n_ - 1) / n_,  \
                        (uint64_t)(100 + i_) * 7919u + (uint64_t)__LINE__, i_);                 \
        family_end(&f_, name);                                                                  \
    } while (0)

static const kt_epilogue_t EPI_RELU[] = {KT_EPI_RELU};
static const kt_epilogue_t EPI_BIAS_RELU[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
static const kt_epilogue_t EPI_GELU[] = {KT_EPI_GELU};
static const kt_epilogue_t EPI_ADD_RELU[] = {KT_EPI_ADD, KT_EPI_RELU};
static const kt_epilogue_t EPI_ALL[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU, KT_EPI_ADD, KT_EPI_GELU};
static const kt_epilogue_t EPI_BIAS_GELU[] = {KT_EPI_BIAS_ADD, KT_EPI_GELU};

START_TEST(gpu_matmul_states_compile_and_run_on_cpu)
{
    FAMILY("matmul", {"matmul 7x13x17", kt_ops_matmul(7, 13, 17, 0, NULL, 0)},
           {"matmul NT 16x24x32", kt_ops_matmul(16, 24, 32, 1, NULL, 0)},
           {"matmul 2x3x256", kt_ops_matmul(2, 3, 256, 0, NULL, 0)});
}
END_TEST

START_TEST(gpu_dense_states_compile_and_run_on_cpu)
{
    FAMILY("dense", {"dense+gelu 5x12x16", kt_ops_dense(5, 12, 16, EPI_GELU, 1)},
           {"dense 1x24x100 (GEMV)", kt_ops_dense(1, 24, 100, NULL, 0)},
           {"dense+gelu 1x8x64 (GEMV)", kt_ops_dense(1, 8, 64, EPI_GELU, 1)});
}
END_TEST

START_TEST(gpu_batch_matmul_states_compile_and_run_on_cpu)
{
    FAMILY("batch_matmul", {"batch_matmul 2x6x10x14", kt_ops_batch_matmul(2, 6, 10, 14, NULL, 0)},
           {"batch_matmul+add+relu", kt_ops_batch_matmul(3, 5, 8, 7, EPI_ADD_RELU, 2)});
}
END_TEST

START_TEST(gpu_epilogue_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    FAMILY("epilogues", {"matmul+bias+relu+add+gelu", kt_ops_matmul(9, 10, 11, 0, EPI_ALL, 4)},
           {"matmul+bias+relu", kt_ops_matmul(12, 20, 8, 0, EPI_BIAS_RELU, 2)},
           {"conv+bias+gelu", kt_ops_conv2d_nhwc(1, 6, 6, 4, 4, 3, 3, &s1p1, EPI_BIAS_GELU, 2)});
}
END_TEST

START_TEST(gpu_conv2d_nhwc_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1),
                       d2 = kt_test_conv_p(1, 2, 2), none = kt_test_conv_p(1, 0, 1);
    FAMILY("conv2d nhwc",
           {"conv nhwc s1 p1", kt_ops_conv2d_nhwc(1, 7, 7, 3, 8, 3, 3, &s1p1, NULL, 0)},
           {"conv nhwc s2 p1 +bias+relu",
            kt_ops_conv2d_nhwc(2, 9, 7, 4, 6, 3, 3, &s2p1, EPI_BIAS_RELU, 2)},
           {"conv nhwc dilation 2", kt_ops_conv2d_nhwc(1, 9, 9, 2, 5, 3, 3, &d2, NULL, 0)},
           {"conv nhwc 1x1 no pad", kt_ops_conv2d_nhwc(1, 5, 5, 8, 4, 1, 1, &none, NULL, 0)});
}
END_TEST

/* Winograd conv2d (4 kernels and more: transforms, bgemm, output) with the
 * GPU rules, tile 2 and 4, overhanging tiles and an epilogue. */
START_TEST(gpu_winograd_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), none = kt_test_conv_p(1, 0, 1);
    const kt_epi_t br[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_RELU}};
    FAMILY("winograd",
           {"winograd tile 2 p1 +bias+relu",
            kt_ops_conv2d_winograd_nhwc(1, 7, 5, 3, 4, 3, 3, 2, &s1p1, br, 2)},
           {"winograd tile 4 p0", kt_ops_conv2d_winograd_nhwc(2, 9, 7, 4, 6, 3, 3, 4, &none,
                                                             NULL, 0)});
}
END_TEST

START_TEST(gpu_conv2d_nchw_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), d2 = kt_test_conv_p(1, 2, 2);
    FAMILY("conv2d nchw",
           {"conv nchw s2 p1", kt_ops_conv2d_nchw(1, 9, 7, 4, 6, 3, 3, &s2p1, NULL, 0)},
           {"conv nchw dilation 2 +relu",
            kt_ops_conv2d_nchw(1, 8, 8, 3, 4, 3, 3, &d2, EPI_RELU, 1)});
}
END_TEST

START_TEST(gpu_depthwise_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), s1p1 = kt_test_conv_p(1, 1, 1);
    FAMILY("depthwise", {"depthwise s1 p1 +relu",
                         kt_ops_depthwise_conv2d_nhwc(1, 8, 8, 8, 3, 3, &s1p1, EPI_RELU, 1)},
           {"depthwise s2 p1", kt_ops_depthwise_conv2d_nhwc(2, 7, 9, 4, 3, 3, &s2p1, NULL, 0)});
}
END_TEST

START_TEST(gpu_pool_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), s1p1 = kt_test_conv_p(1, 1, 1),
                       s1p0 = kt_test_conv_p(1, 0, 1);
    FAMILY("max pool", {"max pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 9, 9, 4, 3, 3, &s2p1)},
           {"max pool s1 p0", kt_ops_pool2d_nhwc(KT_POOL_MAX, 2, 6, 5, 3, 2, 2, &s1p0)});
    FAMILY("avg pool", {"avg pool s1 p1", kt_ops_pool2d_nhwc(KT_POOL_AVG, 2, 7, 7, 3, 3, 3, &s1p1)},
           {"avg pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_AVG, 1, 9, 9, 5, 3, 3, &s2p1)});
    FAMILY("global pool", {"global avg pool 2x5x7x6", kt_ops_global_avg_pool_nhwc(2, 5, 7, 6)},
           {"global avg pool 1x13x13x17", kt_ops_global_avg_pool_nhwc(1, 13, 13, 17)});
}
END_TEST

START_TEST(gpu_softmax_and_layer_norm_states_compile_and_run_on_cpu)
{
    FAMILY("softmax", {"softmax 6x33", kt_ops_softmax(2, (int64_t[]){6, 33})},
           {"softmax 2x3x100", kt_ops_softmax(3, (int64_t[]){2, 3, 100})});
    FAMILY("layer norm", {"layer norm 4x24 affine", kt_ops_layer_norm(2, (int64_t[]){4, 24}, 1)},
           {"layer norm 3x2x170", kt_ops_layer_norm(3, (int64_t[]){3, 2, 170}, 0)});
}
END_TEST

/* Epilogues and window operators networks need beyond the basic ones, one
 * shape each (as codegen_network_op_states_match_reference). */
START_TEST(gpu_network_op_states_compile_and_run_on_cpu)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1);
    FAMILY("network ops",
           KT_TEST_NETWORK_OP_DAGS(s1p1, s2p1));
}
END_TEST

/* ---- sketches, JSON, validity, limits ------------------------------------------------- */

static kt_sched_state_t **sketches(const kt_dag_t *dag, const kt_sched_params_t *p, int *n)
{
    ck_assert_msg(dag != NULL, "%s", kt_err_msg());
    kt_sched_state_t **sk;
    ck_assert_msg(kt_sched_sketches(dag, p, &sk, n) == 0, "%s", kt_err_msg());
    for (int i = 0; i < *n; i++) {
        ck_assert_int_eq(sk[i]->target, KT_SCHED_TARGET_CUDA);
        ck_assert_msg(kt_sched_state_validate(dag, p, sk[i]) == 0, "sketch %d: %s", i,
                      kt_err_msg());
    }
    return sk;
}

static void free_states(kt_sched_state_t **v, int n)
{
    for (int i = 0; i < n; i++)
        kt_sched_state_free(v[i]);
    free(v);
}

static int count_kind(kt_sched_state_t **sk, int n, int stage, int kind)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += sk[i]->stages[stage].kind == kind;
    return c;
}

START_TEST(gpu_sketches_follow_ansor_gpu_rules)
{
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    int n;

    /* matmul: cache write at the register tile, both inputs in shared memory */
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_state_t **sk = sketches(mm, &p, &n);
    ck_assert_int_eq(n, 1);
    const kt_sched_stage_t *c = &sk[0]->stages[stage_index(mm, "C")];
    ck_assert_int_eq(c->kind, KT_SK_TILED);
    ck_assert_int_eq(c->cache_write, 1);
    ck_assert_int_eq(c->level, 3);
    ck_assert_uint_eq(c->smem, (1u << stage_index(mm, "A")) | (1u << stage_index(mm, "B")));
    free_states(sk, n);
    kt_dag_free(mm);

    /* conv + bias + relu: padding and bias inlined, relu (the output) fused,
     * the padded input staged */
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 9, 9, 8, 16, 3, 3, &s1p1, EPI_BIAS_RELU, 2);
    sk = sketches(cv, &p, &n);
    ck_assert_int_eq(n, 1);
    int conv = stage_index(cv, "conv2d_nhwc"), relu = stage_index(cv, "T_relu");
    ck_assert_int_eq(sk[0]->stages[stage_index(cv, "pad_temp")].kind, KT_SK_INLINE);
    ck_assert_int_eq(sk[0]->stages[stage_index(cv, "T_bias_add")].kind, KT_SK_INLINE);
    ck_assert_int_eq(sk[0]->stages[conv].fuse, relu);
    ck_assert_int_eq(sk[0]->stages[relu].kind, KT_SK_FUSED);
    ck_assert(sk[0]->stages[conv].smem & (1u << stage_index(cv, "pad_temp")));
    free_states(sk, n);
    kt_dag_free(cv);

    /* GEMV (batch 1): cross-thread reduction, and the tiled sketch too */
    kt_dag_t *gemv = kt_ops_dense(1, 24, 100, EPI_GELU, 1);
    sk = sketches(gemv, &p, &n);
    ck_assert_int_eq(n, 2);
    int dense = stage_index(gemv, "T_dense");
    ck_assert_int_eq(count_kind(sk, n, dense, KT_SK_XREDUCE), 1);
    ck_assert_int_eq(count_kind(sk, n, dense, KT_SK_TILED), 1);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(sk[i]->stages[dense].fuse, stage_index(gemv, "T_gelu"));
    free_states(sk, n);
    kt_dag_free(gemv);

    /* softmax: both reductions with and without cross-thread reduction */
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    sk = sketches(sm, &p, &n);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(count_kind(sk, n, stage_index(sm, "T_softmax_maxelem"), KT_SK_XREDUCE), 2);
    ck_assert_int_eq(count_kind(sk, n, stage_index(sm, "T_softmax_expsum"), KT_SK_XREDUCE), 2);
    ck_assert_int_eq(count_kind(sk, n, stage_index(sm, "T_softmax_exp"), KT_SK_ROOT), 4);
    free_states(sk, n);
    kt_dag_free(sm);

    /* pooling over 3x3 windows: shorter than a warp, a plain kernel */
    kt_dag_t *pool = kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 9, 9, 4, 3, 3, &s1p1);
    sk = sketches(pool, &p, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(sk[0]->stages[stage_index(pool, "pad_temp")].kind, KT_SK_INLINE);
    ck_assert_int_eq(sk[0]->stages[stage_index(pool, "pool_max")].kind, KT_SK_ROOT);
    free_states(sk, n);
    kt_dag_free(pool);

    /* global pooling: the average fused into the cross-thread reduction */
    kt_dag_t *gp = kt_ops_global_avg_pool_nhwc(1, 13, 13, 17);
    sk = sketches(gp, &p, &n);
    ck_assert_int_eq(n, 2);
    int sum = stage_index(gp, "adaptive_pool_sum"), avg = stage_index(gp, "adaptive_pool_avg");
    for (int i = 0; i < n; i++)
        if (sk[i]->stages[sum].kind == KT_SK_XREDUCE)
            ck_assert_int_eq(sk[i]->stages[avg].kind, KT_SK_FUSED);
    free_states(sk, n);
    kt_dag_free(gp);

    /* CPU parameters still make CPU sketches */
    kt_sched_params_t cpu;
    kt_sched_params_default(&cpu);
    kt_dag_t *mm2 = kt_ops_matmul(16, 16, 16, 0, NULL, 0);
    ck_assert_int_eq(kt_sched_sketches(mm2, &cpu, &sk, &n), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(sk[i]->target, KT_SCHED_TARGET_CPU);
    free_states(sk, n);
    kt_dag_free(mm2);
}
END_TEST

static kt_sched_state_t *sample_first(const kt_dag_t *dag, const kt_sched_params_t *p, int which,
                                      uint64_t seed)
{
    int n;
    kt_sched_state_t **sk = sketches(dag, p, &n);
    ck_assert_int_lt(which, n);
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    kt_sched_state_t *st = kt_sched_sample(dag, p, sk[which], &rng);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    free_states(sk, n);
    return st;
}

static void expect_reject(const kt_dag_t *dag, const char *json, const char *what)
{
    kt_sched_state_t *st = kt_sched_state_from_json(json, dag, NULL);
    ck_assert_msg(st == NULL, "accepted: %s", json);
    ck_assert_msg(strstr(kt_err_msg(), what) != NULL, "'%s' not in '%s'", what, kt_err_msg());
}

/* Replace the first occurrence of `from` in text (malloc'd copy). */
static char *replaced(const char *text, const char *from, const char *to)
{
    const char *q = strstr(text, from);
    ck_assert_msg(q != NULL, "'%s' not in %s", from, text);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_putn(&b, text, (size_t)(q - text));
    kt_sbuf_puts(&b, to);
    kt_sbuf_puts(&b, q + strlen(from));
    return kt_sbuf_take(&b);
}

START_TEST(gpu_state_json_records_target_and_launches)
{
    kt_sched_params_t p = gpu_params("sm_80", NULL);
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    kt_sched_state_t *st = sample_first(sm, &p, 0, 3);
    char *j = kt_sched_state_to_json(st, sm);
    ck_assert_ptr_nonnull(j);
    ck_assert_ptr_nonnull(strstr(j, "\"target\":\"cuda\""));
    ck_assert_ptr_nonnull(strstr(j, "\"launches\":[{\"block\":["));
    kt_sched_gpu_kernel_t k[KT_TE_MAX_STAGES];
    ck_assert_int_eq(kt_sched_gpu_kernels(sm, st, k), 4);
    char want[128];
    snprintf(want, sizeof(want), "{\"block\":[%lld,1,1],\"grid\":[%lld,1,1],\"smem\":%lld,"
                                 "\"stage\":\"T_softmax_maxelem\"}",
             (long long)k[0].threads, (long long)k[0].grid, (long long)k[0].smem_bytes);
    ck_assert_msg(strstr(j, want) != NULL, "%s not in %s", want, j);
    kt_sched_state_t *back = kt_sched_state_from_json(j, sm, &p);
    ck_assert_msg(back != NULL, "%s", kt_err_msg());
    ck_assert(kt_sched_state_equal(back, st));
    ck_assert_uint_eq(kt_sched_state_hash(back, sm), kt_sched_state_hash(st, sm));

    /* launches that do not match the schedule, a missing target key, other
     * targets and GPU kinds in a CPU state are refused */
    char grid[64];
    snprintf(grid, sizeof(grid), "\"grid\":[%lld,", (long long)k[0].grid);
    char *bad = replaced(j, grid, "\"grid\":[7777,");
    expect_reject(sm, bad, "launch 0 does not match");
    free(bad);
    bad = replaced(j, "\"target\":\"cuda\",", "");
    expect_reject(sm, bad, "state JSON");
    free(bad);
    bad = replaced(j, "\"target\":\"cuda\"", "\"target\":\"rocm\"");
    expect_reject(sm, bad, "unknown \"target\"");
    free(bad);
    expect_reject(sm,
                  "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"xreduce\","
                  "\"name\":\"T_softmax_maxelem\",\"threads\":32,\"unroll\":0},{},{},{}],"
                  "\"version\":1}",
                  "CPU state");

    /* CPU states keep their original JSON */
    kt_sched_params_t cpu;
    kt_sched_params_default(&cpu);
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(sm, &cpu, &sk, &n), 0);
    char *cj = kt_sched_state_to_json(sk[0], sm);
    ck_assert_ptr_null(strstr(cj, "target"));
    ck_assert_ptr_null(strstr(cj, "launches"));
    free(cj);
    free_states(sk, n);
    free(j);
    kt_sched_state_free(back);
    kt_sched_state_free(st);
    kt_dag_free(sm);
}
END_TEST

START_TEST(gpu_validation_rejects_broken_states)
{
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_state_t *st = sample_first(mm, &p, 0, 11);
    int c = stage_index(mm, "C");
    kt_sched_state_t *b = kt_sched_state_clone(st);
    b->stages[c].split[0][0] *= 2;   /* no longer a factorization */
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "do not multiply"));
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[c].level = 2;
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[c].ann.parallel = 1;   /* a CPU annotation */
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[c].ann.unroll = 256;   /* not a GPU step */
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[c].smem |= 1u << c;   /* the stage itself cannot be staged */
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->target = KT_SCHED_TARGET_CPU;   /* GPU fields in a CPU state */
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    kt_sched_state_free(b);
    /* 64 x 32 threads in one block exceeds 1024 */
    b = kt_sched_state_clone(st);
    int32_t i_split[5] = {1, 1, 64, 1, 1}, j_split[5] = {1, 1, 48, 1, 1};
    memcpy(b->stages[c].split[0], i_split, sizeof(i_split));
    memcpy(b->stages[c].split[1], j_split, sizeof(j_split));
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, b), 0);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "threads per block 3072 exceed 1024"));
    kt_sched_state_free(b);
    kt_sched_state_free(st);

    /* cross-thread reductions run whole warps */
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    st = sample_first(sm, &p, 0, 5);
    int mx = stage_index(sm, "T_softmax_maxelem");
    ck_assert_int_eq(st->stages[mx].kind, KT_SK_XREDUCE);
    st->stages[mx].threads = 48;
    ck_assert_int_ne(kt_sched_state_validate(sm, &p, st), 0);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "multiple of 32"));
    /* lowering and emission refuse what validation refuses */
    ck_assert_ptr_null(kt_lower(sm, st));
    kt_codegen_cuda_t cu;
    ck_assert_int_ne(kt_codegen_emit_cuda(sm, st, "k", &cu), 0);
    ck_assert_ptr_null(kt_codegen_emit_cuda_emu(sm, st, "k"));
    kt_sched_state_free(st);
    kt_dag_free(sm);
    kt_dag_free(mm);
}
END_TEST

/* Big enough workloads that unconstrained tiles would break every limit. */
static int limit_dags(kt_dag_t **d)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    int n = 0;
    d[n++] = kt_ops_matmul(512, 512, 512, 0, NULL, 0);
    d[n++] = kt_ops_conv2d_nhwc(1, 56, 56, 64, 64, 3, 3, &s1p1, EPI_BIAS_RELU, 2);
    d[n++] = kt_ops_batch_matmul(8, 128, 128, 64, NULL, 0);
    d[n++] = kt_ops_dense(1, 1000, 2048, NULL, 0);
    d[n++] = kt_ops_softmax(2, (int64_t[]){32, 1000});
    d[n++] = kt_ops_depthwise_conv2d_nhwc(1, 112, 112, 32, 3, 3, &s1p1, EPI_RELU, 1);
    for (int i = 0; i < n; i++)
        ck_assert_msg(d[i] != NULL, "%s", kt_err_msg());
    return n;
}

typedef struct {
    int64_t threads, smem, vthreads;
} peak_t;

/* Sample and mutate `count` states per DAG; every kernel within p's limits. */
static int limits_hold(kt_dag_t **d, int nd, const kt_sched_params_t *p, int count, uint64_t seed,
                       peak_t *peak)
{
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    int total = 0;
    memset(peak, 0, sizeof(*peak));
    for (int k = 0; k < nd; k++) {
        int n;
        kt_sched_state_t **sk = sketches(d[k], p, &n);
        kt_sched_state_t *cur = NULL;
        for (int t = 0; t < count; t++) {
            kt_sched_state_t *st = NULL;
            if (cur && t % 2) {
                if (kt_sched_mutate(d[k], p, cur, -1, &rng, &st) != 1)
                    continue;
            } else {
                st = kt_sched_sample(d[k], p, sk[t % n], &rng);
                ck_assert_msg(st != NULL, "%s", kt_err_msg());
            }
            kt_sched_gpu_kernel_t ks[KT_TE_MAX_STAGES];
            int nk = kt_sched_gpu_kernels(d[k], st, ks);
            ck_assert_int_gt(nk, 0);
            for (int i = 0; i < nk; i++) {
                ck_assert_int_le(ks[i].threads, p->max_threads_per_block);
                ck_assert_int_le(ks[i].smem_bytes, p->max_shared_memory_per_block);
                ck_assert_int_le(ks[i].vthreads, p->max_vthread_extent);
                ck_assert_int_le(ks[i].local_elems, KT_SCHED_GPU_MAX_LOCAL);
                ck_assert_int_ge(ks[i].threads, 1);
                peak->threads = ks[i].threads > peak->threads ? ks[i].threads : peak->threads;
                peak->smem = ks[i].smem_bytes > peak->smem ? ks[i].smem_bytes : peak->smem;
                peak->vthreads = ks[i].vthreads > peak->vthreads ? ks[i].vthreads
                                                                  : peak->vthreads;
            }
            total++;
            kt_sched_state_free(cur);
            cur = st;
        }
        kt_sched_state_free(cur);
        free_states(sk, n);
    }
    return total;
}

START_TEST(gpu_sampled_and_mutated_states_respect_hardware_limits)
{
    kt_dag_t *d[8];
    int nd = limit_dags(d);
    struct {
        const char *preset, *override;
    } hw[] = {
        {"sm_80", NULL},
        {"sm_90", NULL},
        {"sm_86", "max_threads_per_block=512"},
        {"sm_80", "max_threads_per_block=128,max_shared_memory_per_block=4096,"
                  "max_vthread_extent=2"},
    };
    int total = 0;
    peak_t big = {0}, small = {0};
    for (size_t i = 0; i < KT_ARRAY_LEN(hw); i++) {
        kt_sched_params_t p = gpu_params(hw[i].preset, hw[i].override);
        peak_t pk;
        total += limits_hold(d, nd, &p, 450, 1000 + i, &pk);
        if (i == 1)
            big = pk;
        if (i == 3)
            small = pk;
    }
    ck_assert_int_ge(total, 10000);
    /* the limits bind: the default preset's states go beyond the small ones */
    ck_assert_int_gt(big.threads, 128);
    ck_assert_int_gt(big.smem, 4096);
    ck_assert_int_gt(big.vthreads, 2);
    ck_assert_int_le(small.threads, 128);
    ck_assert_int_gt(small.smem, 0);
    for (int i = 0; i < nd; i++)
        kt_dag_free(d[i]);
}
END_TEST

START_TEST(gpu_mutation_follows_gpu_rules_and_weights)
{
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    kt_dag_t *mm = kt_ops_matmul(128, 96, 64, 0, NULL, 0);
    kt_sched_state_t *st = sample_first(mm, &p, 0, 21);
    int c = stage_index(mm, "C");
    kt_rng_t rng;
    kt_rng_seed(&rng, 8);
    kt_sched_state_t *out = NULL;
    /* compute location and parallel are CPU rules */
    ck_assert_int_eq(kt_sched_mutate(mm, &p, st, KT_MUT_COMPUTE_LOC, &rng, &out), 0);
    ck_assert_int_eq(kt_sched_mutate(mm, &p, st, KT_MUT_PARALLEL, &rng, &out), 0);
    int tile = 0, unroll = 0, saw1024 = 0;
    for (int i = 0; i < 2000; i++) {
        int r = kt_sched_mutate(mm, &p, st, -1, &rng, &out);
        ck_assert_int_ge(r, 0);
        if (r == 0)
            continue;
        ck_assert_int_eq(kt_sched_state_validate(mm, &p, out), 0);
        const kt_sched_stage_t *a = &st->stages[c], *b = &out->stages[c];
        int split_changed = memcmp(a->split, b->split, sizeof(a->split)) != 0;
        int unroll_changed = a->ann.unroll != b->ann.unroll;
        ck_assert_int_eq(split_changed + unroll_changed, 1);
        tile += split_changed;
        unroll += unroll_changed;
        saw1024 |= b->ann.unroll == 1024;
        /* a tile-size move keeps every product */
        for (int ax = 0; split_changed && ax < 3; ax++) {
            int64_t pa = 1, pb = 1;
            for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++) {
                pa *= a->split[ax][l] ? a->split[ax][l] : 1;
                pb *= b->split[ax][l] ? b->split[ax][l] : 1;
            }
            ck_assert_int_eq(pa, pb);
        }
        kt_sched_state_free(out);
    }
    /* weights 0.90 / 0.10 (a fixed seed: no flakiness) */
    ck_assert_int_gt(tile + unroll, 1500);
    double share = (double)tile / (tile + unroll);
    ck_assert_msg(share > 0.85 && share < 0.95, "tile-size share %g", share);
    ck_assert(saw1024);
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

/* Corrupted GPU state JSON (digits changed, characters dropped) is refused
 * or, when accepted, valid: never a crash. */
START_TEST(gpu_state_json_survives_corruption)
{
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1);
    kt_dag_t *dags[] = {kt_ops_conv2d_nhwc(1, 9, 9, 4, 8, 3, 3, &s2p1, EPI_BIAS_RELU, 2),
                        kt_ops_softmax(2, (int64_t[]){6, 40})};
    kt_rng_t rng;
    kt_rng_seed(&rng, 77);
    int accepted = 0;
    for (size_t d = 0; d < KT_ARRAY_LEN(dags); d++) {
        kt_sched_state_t *st = sample_first(dags[d], &p, 0, 31 + d);
        char *j = kt_sched_state_to_json(st, dags[d]);
        size_t len = strlen(j);
        for (int i = 0; i < 1500; i++) {
            char *t = kt_strdup(j);
            size_t at = (size_t)kt_rng_below(&rng, len);
            switch (kt_rng_below(&rng, 3)) {
            case 0:
                t[at] = (char)('0' + kt_rng_below(&rng, 10));
                break;
            case 1:
                memmove(t + at, t + at + 1, len - at);
                break;
            default:
                t[at] = "{}[],:\"x-1"[kt_rng_below(&rng, 10)];
                break;
            }
            kt_sched_state_t *b = kt_sched_state_from_json(t, dags[d], &p);
            if (b) {
                accepted++;
                ck_assert_int_eq(kt_sched_state_validate(dags[d], &p, b), 0);
                kt_codegen_cuda_t cu;
                ck_assert_int_eq(kt_codegen_emit_cuda(dags[d], b, "k", &cu), 0);
                kt_codegen_cuda_clear(&cu);
                kt_sched_state_free(b);
            }
            free(t);
        }
        free(j);
        kt_sched_state_free(st);
        kt_dag_free(dags[d]);
    }
    ck_assert_int_gt(accepted, 0);   /* some digit changes give other valid states */
}
END_TEST

/* ---- emitted code ---------------------------------------------------------------------- */

START_TEST(gpu_cuda_source_has_kernels_barriers_and_shuffles)
{
    kt_sched_params_t p = gpu_params("sm_90", NULL);
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, EPI_RELU, 1);
    const char *j =
        "{\"launches\":[{\"block\":[64,1,1],\"grid\":[6,1,1],\"smem\":1536,\"stage\":\"C\"}],"
        "\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"fuse\":\"T_relu\",\"kind\":\"tiled\",\"level\":3,\"name\":\"C\",\"smem\":[\"A\",\"B\"],"
        "\"tile\":[[2,1,8,2,2],[3,2,8,1,1],[4,2,4]],\"unroll\":64,\"vec\":2},"
        "{\"kind\":\"fused\",\"name\":\"T_relu\"}],\"target\":\"cuda\",\"version\":1}";
    kt_sched_state_t *st = kt_sched_state_from_json(j, mm, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_codegen_cuda_t cu;
    ck_assert_msg(kt_codegen_emit_cuda(mm, st, "mm", &cu) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(cu.n_launches, 1);
    ck_assert_str_eq(cu.launches[0].name, "mm_k0");
    ck_assert_uint_eq(cu.launches[0].grid[0], 6);
    ck_assert_uint_eq(cu.launches[0].block[0], 64);
    ck_assert_uint_eq(cu.launches[0].smem_bytes, 1536);
    ck_assert_uint_eq(cu.workspace_bytes, 0);
    ck_assert_ptr_nonnull(strstr(cu.src, "extern \"C\" __global__ void __launch_bounds__(64) "
                                         "mm_k0(const float *__restrict__ A, const float "
                                         "*__restrict__ B, float *__restrict__ T_relu)"));
    ck_assert_ptr_nonnull(strstr(cu.src, "__shared__ __align__(16) float kt_A_sh[256];"));
    ck_assert_ptr_nonnull(strstr(cu.src, "__syncthreads();"));
    /* vec 2: A's rows and box origins are even, one float2 per thread and step */
    ck_assert_ptr_nonnull(strstr(cu.src, "*(float2 *)&kt_A_sh["));
    ck_assert_ptr_nonnull(strstr(cu.src, "float kt_C_local[8];"));
    ck_assert_ptr_nonnull(strstr(cu.src, "(int)threadIdx.x"));
    /* the relu epilogue reads the register tile */
    ck_assert_ptr_nonnull(strstr(cu.src, "T_relu["));
    ck_assert_ptr_nonnull(strstr(cu.src, "kt_maxf(kt_C_local["));
    kt_codegen_cuda_clear(&cu);
    /* the emulation runs region after region per block */
    char *emu = kt_codegen_emit_cuda_emu(mm, st, "mm");
    ck_assert_ptr_nonnull(emu);
    ck_assert_ptr_nonnull(strstr(emu, "int mm(float **kt_bufs)"));
    ck_assert_ptr_nonnull(strstr(emu, "/* __syncthreads() */"));
    int regions = 0;
    for (const char *q = strstr(emu, "< 64; ++"); q; q = strstr(q + 1, "< 64; ++"))
        regions++;
    ck_assert_int_ge(regions, 4);   /* init, fetch, compute, epilogue */
    double err;
    ck_assert_msg(kt_codegen_check(mm, emu, "mm", 9, &err) == 0, "%s", kt_err_msg());
    free(emu);
    /* a GPU state has no C kernel */
    ck_assert_ptr_null(kt_codegen_emit_c(mm, st, "mm"));
    kt_sched_state_free(st);
    kt_dag_free(mm);

    /* softmax with cross-thread reductions: four kernels, a workspace,
     * warp shuffles */
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    st = sample_first(sm, &p, 0, 5);
    int mx = stage_index(sm, "T_softmax_maxelem");
    st->stages[mx].threads = 64;
    ck_assert_msg(kt_codegen_emit_cuda(sm, st, "sm", &cu) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(cu.n_launches, 4);
    ck_assert_str_eq(cu.launches[3].name, "sm_k3");
    ck_assert_uint_eq(cu.launches[0].grid[0], 8);
    ck_assert_uint_eq(cu.launches[0].block[0], 64);
    ck_assert_uint_gt(cu.workspace_bytes, 0);
    ck_assert_ptr_nonnull(strstr(cu.src, "__shfl_down_sync(0xffffffffu, kt_v, kt_off)"));
    ck_assert_ptr_nonnull(strstr(cu.src, "float *__restrict__ kt_ws)"));
    ck_assert_ptr_nonnull(strstr(cu.src, "kt_ws + "));
#if KT_HAVE_CUDA
    kt_nvrtc_result_t r;
    ck_assert_msg(kt_nvrtc_compile(cu.src, "sm_90", NULL, 0, &r) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(r.n_kernels, 4);
    ck_assert_ptr_nonnull(kt_nvrtc_result_kernel(&r, "sm_k0"));
    ck_assert_ptr_null(strstr(r.log, "warning"));
    kt_nvrtc_result_clear(&r);
#else
    kt_fail_without_cuda("NVRTC compile of the softmax kernels");
#endif
    kt_codegen_cuda_clear(&cu);
    emu = kt_codegen_emit_cuda_emu(sm, st, "sm");
    ck_assert_ptr_nonnull(emu);
    ck_assert_msg(kt_codegen_check(sm, emu, "sm", 4, &err) == 0, "%s", kt_err_msg());
    free(emu);
    kt_sched_state_free(st);
    kt_dag_free(sm);
}
END_TEST

/* ---- the CLI ----------------------------------------------------------------------------- */

/* Output of a ktune command line (stdout and stderr); *status its exit. */
static char *ktune(const char *args, int *status)
{
    const char *root = getenv("KT_BUILD_ROOT");
    ck_assert_msg(root != NULL, "KT_BUILD_ROOT is not set");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s/cli/ktune' %s 2>&1", root, args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        kt_sbuf_putn(&b, buf, n);
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *out = kt_sbuf_take(&b);
    return out ? out : kt_strdup("");
}

START_TEST(gpu_cli_samples_verifies_and_shows_cuda)
{
    int status;
    const char *wl = "--workload '{\"op\":\"softmax\",\"shape\":[5,70]}'";
    char args[4096];
    snprintf(args, sizeof(args),
             "kernel sample %s --target cuda --arch sm_80 --hw max_threads_per_block=256 -n 3 "
             "--seed 2 --verify --print",
             wl);
    char *out = ktune(args, &status);
    ck_assert_msg(strstr(out, "at most 256 threads") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "(CUDA on CPU: max relative error") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "threadIdx.x") != NULL, "%s", out);   /* --print */
#if KT_HAVE_CUDA
    ck_assert_msg(status == 0, "%s", out);
    ck_assert_msg(strstr(out, "3 passed, 0 failed\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "NVRTC sm_80: ktune_kernel_k") != NULL, "%s", out);
#else
    /* run on the CPU, but never compiled for a GPU: not counted as passed */
    ck_assert_msg(status == 1, "%s", out);
    ck_assert_msg(strstr(out, "0 passed, 0 failed, 3 unverified (not compiled by NVRTC)"), "%s",
                  out);
    ck_assert_msg(strstr(out, "state 0: UNVERIFIED"), "%s", out);
#endif
    /* show the CUDA source and the emulation of the first state */
    const char *line = strstr(out, "state 0: sketch");
    ck_assert_ptr_nonnull(line);
    const char *js = strchr(line, '{'), *eol = strchr(line, '\n');
    ck_assert(js && eol && js < eol);
    char state[2048];
    snprintf(state, sizeof(state), "%.*s", (int)(eol - js), js);
    snprintf(args, sizeof(args), "kernel show %s --target cuda --state '%s'", wl, state);
    char *src = ktune(args, &status);
    ck_assert_msg(status == 0, "%s", src);
    ck_assert_msg(strstr(src, "// launch ktune_kernel_k0: grid (") != NULL, "%s", src);
    ck_assert_msg(strstr(src, "extern \"C\" __global__") != NULL, "%s", src);
    free(src);
    snprintf(args, sizeof(args), "kernel show %s --state '%s' --emulation", wl, state);
    src = ktune(args, &status);
    ck_assert_msg(status == 0, "%s", src);
    ck_assert_msg(strstr(src, "int ktune_kernel(float **kt_bufs)") != NULL, "%s", src);
    free(src);
    /* the state exceeds a smaller GPU's limit: refused */
    snprintf(args, sizeof(args),
             "kernel show %s --target cuda --hw max_threads_per_block=16 --state '%s'", wl,
             state);
    src = ktune(args, &status);
    ck_assert_int_eq(status, 1);
    ck_assert_msg(strstr(src, "threads per block") != NULL, "%s", src);
    free(src);
    free(out);
    /* --arch belongs to --target cuda; unknown presets are named */
    out = ktune("kernel sample --workload '{\"op\":\"softmax\",\"shape\":[5,70]}' --arch sm_80",
                &status);
    ck_assert_int_eq(status, 2);
    free(out);
    out = ktune("kernel sample --workload '{\"op\":\"softmax\",\"shape\":[5,70]}' --target cuda "
                "--arch sm_42",
                &status);
    ck_assert_int_eq(status, 1);
    ck_assert_msg(strstr(out, "no preset 'sm_42'") != NULL, "%s", out);
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu");
    TCase *rules = tcase_create("rules");
    tcase_set_timeout(rules, 300);
    tcase_add_test(rules, gpu_sketches_follow_ansor_gpu_rules);
    tcase_add_test(rules, gpu_state_json_records_target_and_launches);
    tcase_add_test(rules, gpu_validation_rejects_broken_states);
    tcase_add_test(rules, gpu_mutation_follows_gpu_rules_and_weights);
    tcase_add_test(rules, gpu_state_json_survives_corruption);
    tcase_add_test(rules, gpu_sampled_and_mutated_states_respect_hardware_limits);
    tcase_add_test(rules, gpu_cuda_source_has_kernels_barriers_and_shuffles);
    tcase_add_test(rules, gpu_cli_samples_verifies_and_shows_cuda);
    suite_add_tcase(s, rules);
    TCase *tc = tcase_create("families");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, gpu_matmul_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_dense_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_batch_matmul_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_epilogue_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_conv2d_nhwc_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_conv2d_nchw_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_depthwise_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_pool_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_softmax_and_layer_norm_states_compile_and_run_on_cpu);
    tcase_add_test(tc, gpu_network_op_states_compile_and_run_on_cpu);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("winograd");
    tcase_set_timeout(tw, 900);
    tcase_add_test(tw, gpu_winograd_states_compile_and_run_on_cpu);
    suite_add_tcase(s, tw);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
