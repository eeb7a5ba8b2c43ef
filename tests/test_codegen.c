/* Suite "codegen": lowering and the C emitter. For every operator family,
 * at several shapes (prime extents, stride 2, padding, dilation 2), random
 * schedule states (sampled from every sketch, some mutated further) are
 * emitted, compiled and checked against the naive reference kernel.
 *
 * Every family gets FAMILY_STATES states spread over its shapes. All
 * kernels of one DAG go into two C files under distinct entry names
 * compiled at once, so two compiler runs serve all
 * of a DAG's states: the suite stays within its time budget on two cores.
 * Each is emitted as it is measured (kt_codegen_emit_c_variants_into), so
 * the checker runs both the kernel on packed weights and the entry that
 * takes them as they are. */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/lower.h"
#include "codegen/verify.h"
#include "measure/builder.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#include "states_harness.h"

#define FAMILY_STATES 50   /* random states checked per operator family */
#define MAX_STATES KT_TEST_MAX_STATES

static kt_sched_params_t test_params(void)
{
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 8;   /* fixed: the rfactor rule depends on it */
    return p;
}

/* One state given as JSON (the test fails if it does not parse); the
 * caller frees it. */
static kt_sched_state_t *parse_json(const kt_dag_t *dag, const char *json)
{
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st = kt_sched_state_from_json(json, dag, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    return st;
}

/* matmul 64x48x32 with a cache-write stage at level 2: i 2x4x2x4, j 3x1x4x4,
 * k 8x4, i.0@j.0 parallel, j.3 vectorized. */
static const char *MM_CACHE_WRITE =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
    "{\"ann\":[0,1,64],\"ann2\":[2,1,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"
    "\"name\":\"C\",\"tile\":[[2,4,2,4],[3,1,4,4],[8,4]]}],\"version\":1}";

/* The C source of one state given as JSON (the test fails if it does not
 * parse or emit). The caller frees it. */
static char *emit_json(const kt_dag_t *dag, const char *json, const char *entry)
{
    kt_sched_state_t *st = parse_json(dag, json);
    char *src = kt_codegen_emit_c(dag, st, entry);
    ck_assert_msg(src != NULL, "%s", kt_err_msg());
    kt_sched_state_free(st);
    return src;
}

/* Compiles src and checks its entry's answers against the reference kernel. */
static void check_against_reference(const kt_dag_t *dag, const char *src, const char *entry,
                                    uint64_t seed)
{
    double err;
    ck_assert_msg(kt_codegen_check(dag, src, entry, seed, &err) == 0, "%s", kt_err_msg());
}

/* Emit, compile and check n random states of one DAG against the
 * reference kernel. */
static void check_dag(const char *what, kt_dag_t *dag, int n, uint64_t seed)
{
    ck_assert_msg(dag != NULL, "%s: %s", what, kt_err_msg());
    ck_assert_int_le(n, MAX_STATES);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st[MAX_STATES];
    int got = kt_test_collect_states(dag, &p, seed, st, n);
    ck_assert_int_eq(got, n);

    /* as measured: each check runs cand_<i> (weights as they are) and
     * cand_<i>_packed on weights its cand_<i>_pack laid out */
    kt_test_check_states(what, dag, st, n, seed, "cand", kt_codegen_emit_c_variants_into, NULL);
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    kt_dag_free(dag);
}

/* One operator family: FAMILY_STATES states spread over its shapes. */
#define FAMILY(...)                                                                             \
    do {                                                                                        \
        struct {                                                                                \
            const char *what;                                                                   \
            kt_dag_t *dag;                                                                      \
        } shapes_[] = {__VA_ARGS__};                                                            \
        int n_ = (int)(sizeof(shapes_) / sizeof(shapes_[0]));                                   \
        for (int i_ = 0; i_ < n_; i_++)                                                         \
            check_dag(shapes_[i_].what, shapes_[i_].dag, (FAMILY_STATES + n_ - 1) / n_,          \
                      (uint64_t)(100 + i_) * 7919u + (uint64_t)__LINE__);                       \
    } while (0)

static const kt_epilogue_t EPI_RELU[] = {KT_EPI_RELU};
static const kt_epilogue_t EPI_BIAS_RELU[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
static const kt_epilogue_t EPI_GELU[] = {KT_EPI_GELU};
static const kt_epilogue_t EPI_ADD_RELU[] = {KT_EPI_ADD, KT_EPI_RELU};
static const kt_epilogue_t EPI_ALL[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU, KT_EPI_ADD, KT_EPI_GELU};
static const kt_epilogue_t EPI_BIAS_GELU[] = {KT_EPI_BIAS_ADD, KT_EPI_GELU};

START_TEST(codegen_matmul_states_match_reference)
{
    FAMILY({"matmul 7x13x17", kt_ops_matmul(7, 13, 17, 0, NULL, 0)},
           {"matmul NT 16x24x32", kt_ops_matmul(16, 24, 32, 1, NULL, 0)},
           {"matmul 2x3x256 (rfactor)", kt_ops_matmul(2, 3, 256, 0, NULL, 0)});
}
END_TEST

START_TEST(codegen_dense_states_match_reference)
{
    FAMILY({"dense+gelu 5x12x16", kt_ops_dense(5, 12, 16, EPI_GELU, 1)},
           {"dense 11x8x6", kt_ops_dense(11, 8, 6, NULL, 0)});
}
END_TEST

START_TEST(codegen_batch_matmul_states_match_reference)
{
    FAMILY({"batch_matmul 2x6x10x14", kt_ops_batch_matmul(2, 6, 10, 14, NULL, 0)},
           {"batch_matmul+add+relu", kt_ops_batch_matmul(3, 5, 8, 7, EPI_ADD_RELU, 2)});
}
END_TEST

START_TEST(codegen_epilogue_states_match_reference)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    FAMILY({"matmul+bias+relu+add+gelu", kt_ops_matmul(9, 10, 11, 0, EPI_ALL, 4)},
           {"matmul+bias+relu", kt_ops_matmul(12, 20, 8, 0, EPI_BIAS_RELU, 2)},
           {"conv+bias+gelu", kt_ops_conv2d_nhwc(1, 6, 6, 4, 4, 3, 3, &s1p1, EPI_BIAS_GELU, 2)});
}
END_TEST

START_TEST(codegen_conv2d_nhwc_states_match_reference)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1),
                       d2 = kt_test_conv_p(1, 2, 2), none = kt_test_conv_p(1, 0, 1);
    FAMILY({"conv nhwc s1 p1", kt_ops_conv2d_nhwc(1, 7, 7, 3, 8, 3, 3, &s1p1, NULL, 0)},
           {"conv nhwc s2 p1 +bias+relu",
            kt_ops_conv2d_nhwc(2, 9, 7, 4, 6, 3, 3, &s2p1, EPI_BIAS_RELU, 2)},
           {"conv nhwc dilation 2", kt_ops_conv2d_nhwc(1, 9, 9, 2, 5, 3, 3, &d2, NULL, 0)},
           {"conv nhwc 1x1 no pad", kt_ops_conv2d_nhwc(1, 5, 5, 8, 4, 1, 1, &none, NULL, 0)});
}
END_TEST

START_TEST(codegen_conv2d_nchw_states_match_reference)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), d2 = kt_test_conv_p(1, 2, 2);
    FAMILY({"conv nchw s2 p1", kt_ops_conv2d_nchw(1, 9, 7, 4, 6, 3, 3, &s2p1, NULL, 0)},
           {"conv nchw dilation 2 +relu",
            kt_ops_conv2d_nchw(1, 8, 8, 3, 4, 3, 3, &d2, EPI_RELU, 1)});
}
END_TEST

START_TEST(codegen_depthwise_states_match_reference)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), s1p1 = kt_test_conv_p(1, 1, 1);
    FAMILY({"depthwise s1 p1 +relu",
            kt_ops_depthwise_conv2d_nhwc(1, 8, 8, 8, 3, 3, &s1p1, EPI_RELU, 1)},
           {"depthwise s2 p1", kt_ops_depthwise_conv2d_nhwc(2, 7, 9, 4, 3, 3, &s2p1, NULL, 0)});
}
END_TEST

START_TEST(codegen_pool_states_match_reference)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1), s1p1 = kt_test_conv_p(1, 1, 1),
                       s1p0 = kt_test_conv_p(1, 0, 1);
    FAMILY({"max pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 9, 9, 4, 3, 3, &s2p1)},
           {"max pool s1 p0", kt_ops_pool2d_nhwc(KT_POOL_MAX, 2, 6, 5, 3, 2, 2, &s1p0)});
    FAMILY({"avg pool s1 p1", kt_ops_pool2d_nhwc(KT_POOL_AVG, 2, 7, 7, 3, 3, 3, &s1p1)},
           {"avg pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_AVG, 1, 9, 9, 5, 3, 3, &s2p1)});
    FAMILY({"global avg pool 2x5x7x6", kt_ops_global_avg_pool_nhwc(2, 5, 7, 6)},
           {"global avg pool 1x3x3x17", kt_ops_global_avg_pool_nhwc(1, 3, 3, 17)});
}
END_TEST

START_TEST(codegen_softmax_and_layer_norm_states_match_reference)
{
    FAMILY({"softmax 6x33", kt_ops_softmax(2, (int64_t[]){6, 33})},
           {"softmax 2x3x10", kt_ops_softmax(3, (int64_t[]){2, 3, 10})});
    FAMILY({"layer norm 4x24 affine", kt_ops_layer_norm(2, (int64_t[]){4, 24}, 1)},
           {"layer norm 3x2x17", kt_ops_layer_norm(3, (int64_t[]){3, 2, 17}, 0)});
}
END_TEST

/* Winograd conv2d: the sketch rules (data_pack and inverse simplified with
 * their constant tables, bgemm tiled; the matrices and padding materialized)
 * give states that match its reference, tile 2 and 4, with overhanging
 * tiles and an epilogue. */
START_TEST(codegen_winograd_states_match_reference)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), none = kt_test_conv_p(1, 0, 1);
    const kt_epi_t br[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_RELU}};
    FAMILY({"winograd tile 2 p1 +bias+relu",
            kt_ops_conv2d_winograd_nhwc(1, 7, 5, 3, 4, 3, 3, 2, &s1p1, br, 2)},
           {"winograd tile 4 p0", kt_ops_conv2d_winograd_nhwc(2, 9, 7, 4, 6, 3, 3, 4, &none,
                                                             NULL, 0)});
}
END_TEST

/* Occurrences of needle in text. */
static int count_str(const char *text, const char *needle)
{
    int n = 0;
    for (const char *q = strstr(text, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* Winograd tile 2 with simplify-compute-with-const-tensor: the unrolled
 * transforms fold the constant matrices into the code. B and A are read
 * nowhere (their one occurrence is their own nest), and the terms left are
 * the products of non-zero entries: B (4x4) has 2 non-zeros per column, so
 * data_pack sums (4 x 2)^2 = 64 terms per element block, A (4x2) 3 per
 * column, so inverse sums (2 x 3)^2 = 36, where unfolded code does 256 and
 * 64 multiply-adds with loads of the tables. The kernel matches the
 * reference. Fails on code that does not fold (or has no simplify kind). */
START_TEST(codegen_winograd_const_tables_fold)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *d = kt_ops_conv2d_winograd_nhwc(1, 8, 8, 4, 8, 3, 3, 2, &s1p1, NULL, 0);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    const char *json =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},"
        "{\"ann\":[3,1,0],\"kind\":\"root\",\"name\":\"input_tile\"},"
        "{\"ann\":[2,0,0],\"kind\":\"root\",\"name\":\"B\"},"
        "{\"ann\":[2,1,0],\"kind\":\"simplify\",\"name\":\"data_pack\","
        "\"tile\":[[4,4],[1,4]]},{\"kind\":\"input\",\"name\":\"weight\"},"
        "{\"ann\":[2,1,0],\"kind\":\"tiled\",\"name\":\"bgemm\","
        "\"tile\":[[1,2,2,1],[1,4,1,1],[1,1,8,2],[4,2,1,1],[2,2]]},"
        "{\"ann\":[2,0,0],\"kind\":\"root\",\"name\":\"A\"},"
        "{\"ann\":[1,1,0],\"kind\":\"simplify\",\"name\":\"inverse\","
        "\"tile\":[[4,4],[1,8]]},"
        "{\"ann\":[3,1,0],\"kind\":\"root\",\"name\":\"conv2d_winograd\"}],\"version\":1}";
    char *src = emit_json(d, json, "wino_fold");
    ck_assert_int_eq(count_str(src, "B["), 1);
    ck_assert_int_eq(count_str(src, "A["), 1);
    ck_assert_int_eq(count_str(src, "kt_data_pack_acc[0] = kt_data_pack_acc[0] + "), 64);
    ck_assert_int_eq(count_str(src, "kt_inverse_acc[0] = kt_inverse_acc[0] + "), 36);
    check_against_reference(d, src, "wino_fold", 7);
    free(src);
    kt_dag_free(d);
}
END_TEST

/* Winograd tile 2 on a 28x28x32 input (ResNet-18's 28x28 layer with fewer
 * channels), pad 1, and a state as the search makes them: the gather
 * input_tile a plain parallel nest at root (its 32 channels too many to
 * vectorize by Ansor's rule), the transforms folded, bgemm tiled. */
static kt_dag_t *wino28(void)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *d = kt_ops_conv2d_winograd_nhwc(1, 28, 28, 32, 32, 3, 3, 2, &s1p1, NULL, 0);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    return d;
}

static const char *WINO28_STATE =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},"
    "{\"ann\":[3,0,0],\"kind\":\"root\",\"name\":\"input_tile\"},"
    "{\"ann\":[2,0,0],\"kind\":\"root\",\"name\":\"B\"},"
    "{\"ann\":[2,1,0],\"kind\":\"simplify\",\"name\":\"data_pack\","
    "\"tile\":[[49,4],[2,16]]},{\"kind\":\"input\",\"name\":\"weight\"},"
    "{\"ann\":[2,1,0],\"kind\":\"tiled\",\"name\":\"bgemm\","
    "\"tile\":[[1,2,2,1],[1,4,1,1],[7,1,7,4],[2,1,1,16],[4,8]]},"
    "{\"ann\":[2,0,0],\"kind\":\"root\",\"name\":\"A\"},"
    "{\"ann\":[1,1,0],\"kind\":\"simplify\",\"name\":\"inverse\","
    "\"tile\":[[49,4],[2,16]]},"
    "{\"ann\":[3,1,0],\"kind\":\"root\",\"name\":\"conv2d_winograd\"}],\"version\":1}";

/* The assembly GCC makes of src for an AVX-512 CPU, as the builder compiles
 * it (the test fails if it does not compile); the caller frees it. */
static char *avx512_asm(const char *src)
{
    char dir[] = "/tmp/kt_test_asm_XXXXXX", out[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(out, sizeof(out), "%s/k.s", dir);
    ck_assert_msg(kt_codegen_compile_flags(src, out,
                                           KT_BUILDER_DEFAULT_FLAGS " -march=skylake-avx512 -S",
                                           NULL) == 0, "%s", kt_err_msg());
    char *text = kt_file_read(out, NULL);
    ck_assert_ptr_nonnull(text);
    unlink(out);
    rmdir(dir);
    return text;
}

/* Sigmoid-shaped epilogues (SiLU here: EfficientNet's and MobileNet-V3's
 * convolutions) call glibc's vector expf: compiled as the builder does, each
 * state's kernel calls a vector variant (_ZGV...v_expf). Scalar expf took
 * four fifths of EfficientNet-B0's 1x1 expansion kernels. Fails without -fno-math-errno
 * in the builder's flags or without the preamble's simd declaration. */
START_TEST(codegen_silu_epilogue_calls_vector_expf)
{
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
    static const kt_epilogue_t silu[] = {KT_EPI_SILU};
    kt_dag_t *d = kt_ops_dense(64, 64, 32, silu, 1);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st[4];
    ck_assert_int_eq(kt_test_collect_states(d, &p, 77, st, 4), 4);
    for (int i = 0; i < 4; i++) {
        char *src = kt_codegen_emit_c(d, st[i], "silu");
        ck_assert_msg(src != NULL, "%s", kt_err_msg());
        char *text = avx512_asm(src);
        /* _ZGV<isa>N<lanes>v_expf: the width follows the state's vector loop */
        int vec = count_str(text, "v_expf@PLT");
        ck_assert_msg(vec > 0, "state %d: no vector expf call (%d scalar calls)", i,
                      count_str(text, "call\texpf@PLT"));
        free(text);
        free(src);
        kt_sched_state_free(st[i]);
    }
    kt_dag_free(d);
#endif
}
END_TEST

/* The gather of a Winograd kernel compiles to block copies: its row of
 * channels is read at an index whose floor divisions and clamps do not
 * change along the row, and GCC vectorizes the copy only when they have no
 * branches (kernels do not unswitch loops, so a branch stays in the loop:
 * it copied one float at a time, a third of ResNet-18's 28x28x128 Winograd
 * kernel). Compiled as the builder does for an AVX-512 CPU: input_tile's
 * function moves no single floats. Fails with branching kt_floordiv. */
START_TEST(codegen_winograd_gather_is_not_scalar)
{
    kt_dag_t *d = wino28();
    char *src = emit_json(d, WINO28_STATE, "gv");
    char *text = avx512_asm(src);
    /* the first parallel group, input_tile's nest: from its label to .size */
    const char *fn = strstr(text, "\nkt_par0_gv_packed");
    ck_assert_ptr_nonnull(fn);
    const char *end = strstr(fn, "\t.size\tkt_par0_gv_packed");
    ck_assert_ptr_nonnull(end);
    char *body = strndup(fn, (size_t)(end - fn));
    int scalar = count_str(body, "vmovss");
    ck_assert_msg(scalar == 0, "input_tile copies single floats (%d vmovss)", scalar);
    free(body);
    free(text);
    free(src);
    kt_dag_free(d);
}
END_TEST

/* A kernel keeps its heap intermediates between calls: freed and allocated
 * again on every call, glibc returned the blocks of a Winograd conv2d's
 * transformed tiles (3 of 400 KiB here) to the system, and every call
 * faulted in and zeroed them afresh (about 200 page faults a call here,
 * 1,100 on ResNet-18's 28x28x128 layer). After two warm-up calls, three
 * more fault in fewer pages than one intermediate holds, and the answers
 * stay right. Fails on a kernel that allocates them per call. */
START_TEST(codegen_intermediates_kept_between_calls)
{
    kt_dag_t *d = wino28();
    char *src = emit_json(d, WINO28_STATE, "ws");
    /* first: it forks, and a child of a process that ran OpenMP loops hangs */
    check_against_reference(d, src, "ws", 9);
    char dir[] = "/tmp/kt_test_ws_XXXXXX", so[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(so, sizeof(so), "%s/k.so", dir);
    ck_assert_msg(kt_codegen_compile(src, so, NULL) == 0, "%s", kt_err_msg());
    kt_codegen_lib_t *lib = kt_codegen_load(so, "ws");
    ck_assert_msg(lib != NULL, "%s", kt_err_msg());
    kt_kernel_fn fn = kt_codegen_lib_fn(lib);
    float **bufs = kt_codegen_bufs_new(d, 3);
    ck_assert_ptr_nonnull(bufs);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(fn(bufs), 0);
    struct rusage r0, r1;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &r0), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fn(bufs), 0);
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &r1), 0);
    long faults = r1.ru_minflt - r0.ru_minflt;
    /* data_pack alone: 16 x 196 x 32 floats, 98 pages of 4 KiB */
    ck_assert_msg(faults < 98, "3 calls faulted in %ld pages", faults);
    kt_codegen_bufs_free(d, bufs);
    kt_codegen_unload(lib);
    unlink(so);
    rmdir(dir);
    free(src);
    kt_dag_free(d);
}
END_TEST

/* Floats in the kernel's output, its last buffer. */
static int64_t output_numel(const kt_dag_t *d)
{
    return kt_stage_numel(kt_dag_stage(d, kt_codegen_buf_stage(d, kt_codegen_num_bufs(d) - 1)));
}

/* A copy of the output (bufs' last buffer) of one call of fn. */
static float *call_and_copy_output(const kt_dag_t *d, int (*fn)(float **), float **bufs)
{
    ck_assert_int_eq(fn(bufs), 0);
    size_t bytes = sizeof(float) * (size_t)output_numel(d);
    float *copy = malloc(bytes);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, bufs[kt_codegen_num_bufs(d) - 1], bytes);
    return copy;
}

/* The kernels of one source file (a built network's) take their heap
 * intermediates from one pool block: with a block per kernel, every
 * Winograd step of a ResNet-18 wrote megabytes of lines that the other
 * layers had evicted, and the network ran 1.15x its tuned steps' time
 * (docs/benchmarks.md). Here a matmul whose B copy lives in the workspace
 * and a Winograd conv2d share one file: after both ran the pool holds one
 * block as large as the larger need, the smaller kernel then reuses it,
 * and a call that finds the pool in use (another thread's) computes the
 * same answers in a block of its own, leaving the pool's alone. */
START_TEST(codegen_kernels_of_one_file_share_the_workspace)
{
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0), *wg = wino28();
    kt_sched_state_t *smm = parse_json(mm, MM_CACHE_WRITE), *swg = parse_json(wg, WINO28_STATE);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_codegen_preamble_c(&b);
    ck_assert_int_eq(kt_codegen_emit_c_into(mm, smm, "pm", &b), 0);
    ck_assert_int_eq(kt_codegen_emit_c_into(wg, swg, "pw", &b), 0);
    /* the pool's state, read from inside the file */
    kt_sbuf_puts(&b, "float *pool_block(void) { return kt_pool_block; }\n"
                     "unsigned long long pool_floats(void) { return kt_pool_floats; }\n"
                     "void pool_set_busy(int v) { kt_pool_busy = v; }\n");
    char *src = kt_sbuf_take(&b);
    ck_assert_ptr_nonnull(src);
    /* first: they fork, and a child of a process that ran OpenMP loops hangs */
    check_against_reference(mm, src, "pm", 21);
    check_against_reference(wg, src, "pw", 22);
    char dir[] = "/tmp/kt_test_pool_XXXXXX", so[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(so, sizeof(so), "%s/k.so", dir);
    ck_assert_msg(kt_codegen_compile(src, so, NULL) == 0, "%s", kt_err_msg());
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "%s", dlerror());
    int (*pm)(float **) = (int (*)(float **))dlsym(h, "pm");
    int (*pw)(float **) = (int (*)(float **))dlsym(h, "pw");
    float *(*block)(void) = (float *(*)(void))dlsym(h, "pool_block");
    unsigned long long (*floats)(void) = (unsigned long long (*)(void))dlsym(h, "pool_floats");
    void (*set_busy)(int) = (void (*)(int))dlsym(h, "pool_set_busy");
    ck_assert(pm && pw && block && floats && set_busy);
    float **bm = kt_codegen_bufs_new(mm, 3), **bw = kt_codegen_bufs_new(wg, 4);
    ck_assert(bm && bw);

    free(call_and_copy_output(mm, pm, bm));
    float *small = block();
    unsigned long long small_n = floats();
    ck_assert_ptr_nonnull(small);
    ck_assert_uint_ge(small_n, 48 * 32);   /* B's copy */
    float *want = call_and_copy_output(wg, pw, bw);
    float *big = block();
    ck_assert_uint_gt(floats(), small_n);   /* grown for the Winograd tiles */
    free(call_and_copy_output(mm, pm, bm));
    ck_assert_ptr_eq(block(), big);         /* the matmul reuses the larger block */

    set_busy(1);
    float *got = call_and_copy_output(wg, pw, bw);
    set_busy(0);
    ck_assert_ptr_eq(block(), big);
    ck_assert_int_eq(memcmp(got, want, sizeof(float) * (size_t)output_numel(wg)), 0);

    free(got);
    free(want);
    kt_codegen_bufs_free(mm, bm);
    kt_codegen_bufs_free(wg, bw);
    dlclose(h);
    unlink(so);
    rmdir(dir);
    free(src);
    kt_sched_state_free(smm);
    kt_sched_state_free(swg);
    kt_dag_free(mm);
    kt_dag_free(wg);
}
END_TEST

/* The epilogues and window operators networks need beyond the basic ones,
 * one shape each: clip (relu6), sigmoid, tanh, multiply (per channel and
 * scalar), hardswish, hardsigmoid, silu, epilogues after pools, grouped conv,
 * depthwise with a channel multiplier, NCHW pools. */
START_TEST(codegen_network_op_states_match_reference)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1);
    FAMILY(KT_TEST_NETWORK_OP_DAGS(s1p1, s2p1));
}
END_TEST

/* The structure the emitter relies on for speed: a cache-write state lowers
 * to a parallel outer loop, a local accumulator tile, a register tile
 * around the inner reduction, and a vectorized innermost loop. */
START_TEST(codegen_lowering_has_local_tiles_and_annotations)
{
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_state_t *st = parse_json(mm, MM_CACHE_WRITE);
    kt_lower_t *L = kt_lower(mm, st);
    ck_assert_ptr_nonnull(L);
    int local = -1, reg = -1, par = 0, vec = 0, unr = 0;
    for (int i = 0; i < L->nbufs; i++) {
        if (L->bufs[i].kind == KT_BUF_LOCAL && strstr(L->bufs[i].label, ".local"))
            local = i;
        if (L->bufs[i].kind == KT_BUF_LOCAL && strstr(L->bufs[i].label, ".reg"))
            reg = i;
    }
    ck_assert_int_ge(local, 0);
    ck_assert_int_ge(reg, 0);
    /* local tile: levels 2..3 of each axis; register tile: level 3 */
    ck_assert_int_eq(L->bufs[local].shape[0], 8);
    ck_assert_int_eq(L->bufs[local].shape[1], 16);
    ck_assert_int_eq(L->bufs[reg].shape[0], 4);
    ck_assert_int_eq(L->bufs[reg].shape[1], 4);
    int copies = 0;
    for (int i = 0; i < L->nnodes; i++) {
        if (L->nodes[i].kind != KT_NODE_LOOP)
            continue;
        par += L->nodes[i].ann == KT_LOOP_PARALLEL;
        vec += L->nodes[i].ann == KT_LOOP_VECTORIZE;
        unr += L->nodes[i].ann == KT_LOOP_UNROLL;
        /* the register tile's load and store loops are unrolled fully */
        const char *lab = L->iters[L->nodes[i].iter].label;
        size_t n = strlen(lab);
        if (n > 3 && (strcmp(lab + n - 3, ".ld") == 0 || strcmp(lab + n - 3, ".st") == 0)) {
            ck_assert_msg(L->nodes[i].ann == KT_LOOP_UNROLL, "%s is not unrolled", lab);
            copies++;
        }
    }
    ck_assert_int_eq(par, 3);   /* i.0@j.0, and the outer loop of B's copy */
    ck_assert_int_ge(vec, 2);   /* the update and its init */
    ck_assert_int_eq(copies, 4);   /* i.3 and j.3, for the load and the store */
    ck_assert_int_gt(unr, 0);
    ck_assert(L->uses_parallel);
    kt_lower_free(L);

    char *src = kt_codegen_emit_c(mm, st, "matmul_kernel");
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(strstr(src, "#pragma omp parallel for schedule(static) collapse(2)"));
    ck_assert_ptr_nonnull(strstr(src, "#pragma omp simd"));
    /* the builders' -std=c17 turns contraction off; kernels turn it back on */
    ck_assert_ptr_nonnull(strstr(src, "fp-contract=fast"));
    ck_assert_ptr_nonnull(strstr(src, "float kt_C_local[128]"));
    ck_assert_ptr_nonnull(strstr(src, "float kt_C_reg[16]"));
    ck_assert_ptr_nonnull(strstr(src, "const float *restrict A = kt_bufs[0];"));
    ck_assert_ptr_nonnull(strstr(src, "int matmul_kernel(float **kt_bufs)"));
    check_against_reference(mm, src, "matmul_kernel", 7);
    free(src);
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

/* A local tile larger than KT_LOWER_LOCAL_STACK_BYTES lives on the heap,
 * one per parallel iteration, and the kernel still computes the right
 * answer. */
START_TEST(codegen_large_local_tile_uses_heap)
{
    kt_dag_t *mm = kt_ops_matmul(256, 256, 8, 0, EPI_RELU, 1);
    const char *j =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,1,16],\"fuse\":\"T_relu\",\"kind\":\"tiled\",\"level\":1,\"name\":\"C\","
        "\"tile\":[[2,32,2,2],[1,16,1,16],[4,2]]},{\"ann\":[1,1,0],\"kind\":\"fused\","
        "\"name\":\"T_relu\"}],\"version\":1}";
    char *src = emit_json(mm, j, "big_tile");
    /* 128 x 256 floats = 128 KiB: over the stack limit */
    ck_assert_ptr_nonnull(strstr(src, "float *kt_C_local = (float *)malloc(sizeof(float) * 32768ULL);"));
    ck_assert_ptr_nonnull(strstr(src, "kt_fail = 1;"));
    check_against_reference(mm, src, "big_tile", 5);
    free(src);
    kt_dag_free(mm);
}
END_TEST

/* A parallel loop group's body is a function of its own (restrict buffers,
 * the group's iterators as arguments) called from the OpenMP loop, and the
 * innermost reduce loop around an unrolled register-tile update gets a
 * partial unroll; a serial kernel outlines nothing. Both compute the right
 * answer. */
START_TEST(codegen_outlines_parallel_body_and_unrolls_reduce_loop)
{
    kt_dag_t *mm = kt_ops_matmul(32, 32, 256, 0, NULL, 0);
    const char *par =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,1,64],\"ann2\":[2,0,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"
        "\"name\":\"C\",\"tile\":[[2,4,1,4],[2,1,1,16],[4,64]]}],\"version\":1}";
    char *src = emit_json(mm, par, "mk");
    /* the packed variant takes B re-laid out (codegen_rewrites_weight_layout) */
    const char *fn = strstr(src, "static __attribute__((noinline)) int kt_par0_mk_packed(const "
                                 "float *restrict A, const float *restrict B, float *restrict C, "
                                 "const float *restrict kt_B_layout, long long kt_i_0_0, "
                                 "long long kt_j_0_1)");
    const char *kern = strstr(src, "int mk_packed(float **kt_bufs)");
    ck_assert_ptr_nonnull(fn);
    ck_assert_ptr_nonnull(kern);
    ck_assert(fn < kern);   /* defined before the kernel calls it */
    ck_assert_ptr_nonnull(strstr(kern, "#pragma omp parallel for schedule(static) collapse(2)"));
    ck_assert_ptr_nonnull(
        strstr(kern, "if (kt_par0_mk_packed(A, B, C, kt_B_layout, kt_i_0_0, kt_j_0_1)) {"));
    ck_assert_ptr_null(strstr(src, "kt_par1_"));
    /* k.1 (64) around the 4 x 16 register tile: four copies (the pragma is
     * the line before the loop) */
    const char *k1 = strstr(fn, "for (long long kt_k_1_");
    ck_assert_ptr_nonnull(k1);
    ck_assert(k1 < kern);
    const char *line = k1;
    while (line > fn && line[-1] != '\n')
        line--;
    const char *prev = line - 1;
    while (prev > fn && prev[-1] != '\n')
        prev--;
    while (*prev == ' ')
        prev++;
    ck_assert_msg(strncmp(prev, "#pragma GCC unroll 4\n", 21) == 0,
                  "k.1 is not partially unrolled:\n%s", src);
    check_against_reference(mm, src, "mk", 3);
    free(src);

    const char *serial =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,1,64],\"ann2\":[0,0,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"
        "\"name\":\"C\",\"tile\":[[2,4,1,4],[2,1,1,16],[4,64]]}],\"version\":1}";
    src = emit_json(mm, serial, "sk");
    ck_assert_ptr_null(strstr(src, "kt_par"));
    ck_assert_ptr_null(strstr(src, "omp parallel"));
    check_against_reference(mm, src, "sk", 3);
    free(src);
    kt_dag_free(mm);
}
END_TEST

/* Layout rewrite: matmul's B (layout-free, as TVM's tutorial declares it) is
 * copied into the order of the loops of the tiled nest that index it, loops
 * of extent 1 dropped, and the update reads the copy; the copy is exact (the
 * answers match the reference). A conv2d's weight is rewritten too; a
 * batch_matmul's B is not layout-free and stays as it is. */
START_TEST(codegen_rewrites_weight_layout)
{
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st = parse_json(mm, MM_CACHE_WRITE);
    kt_lower_t *L = kt_lower(mm, st);
    ck_assert_ptr_nonnull(L);
    int lay = -1;
    for (int i = 0; i < L->nbufs; i++)
        if (strcmp(L->bufs[i].label, "B.layout") == 0)
            lay = i;
    ck_assert_int_ge(lay, 0);
    ck_assert_int_eq(L->bufs[lay].kind, KT_BUF_HEAP);
    /* loops indexing B, in nest order: j.0 (3), j.1 (1, dropped), k.0 (8),
     * j.2 (4), k.1 (4), j.3 (4) */
    static const int64_t want[] = {3, 8, 4, 4, 4};
    ck_assert_int_eq(L->bufs[lay].ndim, 5);
    for (int d = 0; d < 5; d++)
        ck_assert_int_eq(L->bufs[lay].shape[d], want[d]);
    ck_assert_int_eq(L->nsubs, 1);
    ck_assert_int_eq(L->subs[0].buf, lay);
    ck_assert_int_eq(L->stmts[L->subs[0].stmt].kind, KT_STMT_UPDATE);
    /* the copy comes first in the program */
    int top = L->first, x = top;
    while (x >= 0 && L->nodes[x].kind == KT_NODE_LOOP)
        x = L->nodes[x].child;
    ck_assert_int_ge(x, 0);
    ck_assert_int_eq(L->nodes[x].kind, KT_NODE_STMT);
    ck_assert_int_eq(L->stmts[L->nodes[x].stmt].kind, KT_STMT_COPY);
    ck_assert_int_eq(L->stmts[L->nodes[x].stmt].dst, lay);
    kt_lower_free(L);

    /* the kernel taking B as it is copies it in every call */
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_codegen_preamble_c(&b);
    ck_assert_int_eq(kt_codegen_emit_c_into(mm, st, "lk", &b), 0);
    char *src = kt_sbuf_take(&b);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(strstr(src, "kt_pool_take(1536ULL, &kt_ws_own);"));
    ck_assert_ptr_nonnull(strstr(src, "float *restrict kt_B_layout = kt_ws + 0LL;"));
    ck_assert_ptr_nonnull(strstr(src, "*kt_B_layout["));   /* the update reads the copy */
    ck_assert_ptr_null(strstr(src, "*B["));
    ck_assert_ptr_null(strstr(src, "free(kt_B_layout);"));   /* kept in the workspace */
    check_against_reference(mm, src, "lk", 11);
    free(src);
    kt_sched_state_free(st);
    kt_dag_free(mm);

    /* conv2d NHWC: of the tiled states sampled, the weight is rewritten */
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 6, 6, 8, 16, 3, 3, &s1p1, NULL, 0);
    ck_assert_ptr_nonnull(cv);
    kt_sched_state_t *sts[8];
    ck_assert_int_eq(kt_test_collect_states(cv, &p, 5, sts, 8), 8);
    int rewritten = 0;
    for (int i = 0; i < 8; i++) {
        char *c = kt_codegen_emit_c(cv, sts[i], "ck");
        ck_assert_msg(c != NULL, "%s", kt_err_msg());
        if (strstr(c, "kt_weight_layout[")) {
            rewritten++;
            check_against_reference(cv, c, "ck", 13 + (uint64_t)i);
        }
        free(c);
        kt_sched_state_free(sts[i]);
    }
    ck_assert_int_gt(rewritten, 0);
    kt_dag_free(cv);

    /* batch_matmul: B is not layout-free */
    kt_dag_t *bm = kt_ops_batch_matmul(2, 16, 16, 16, NULL, 0);
    ck_assert_int_eq(kt_test_collect_states(bm, &p, 7, sts, 4), 4);
    for (int i = 0; i < 4; i++) {
        char *c = kt_codegen_emit_c(bm, sts[i], "bk");
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_null(strstr(c, "_layout"));
        free(c);
        kt_sched_state_free(sts[i]);
    }
    kt_dag_free(bm);
}
END_TEST

/* What is measured and exported (kt_codegen_emit_c): lk_packed, the kernel
 * the runner times, takes B already re-laid out and copies nothing (no
 * buffer of B's layout allocated or written in it); lk_pack permutes B into
 * that layout (the walk of kt_codegen_pack) and answers 0 for A; lk takes B
 * as it is. The checker runs both lk and lk_packed on packed weights. */
START_TEST(codegen_timed_kernel_takes_packed_weights)
{
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_state_t *st = parse_json(mm, MM_CACHE_WRITE);
    char *src = kt_codegen_emit_c(mm, st, "lk");
    ck_assert_msg(src != NULL, "%s", kt_err_msg());
    const char *pop = strstr(src, "#pragma GCC pop_options");
    const char *kern = strstr(src, "int lk_packed(float **kt_bufs)\n");
    const char *pack = strstr(src, "int lk_pack(int kt_i, const float *restrict kt_src, "
                                   "float *restrict kt_dst)\n");
    const char *wrap = strstr(src, "int lk(float **kt_bufs)\n");
    ck_assert_ptr_nonnull(pop);
    ck_assert_ptr_nonnull(kern);
    ck_assert_ptr_nonnull(pack);
    ck_assert_ptr_nonnull(wrap);
    ck_assert(kern < pop && pop < pack && pack < wrap);
    /* everything up to the end of lk_packed: B's layout read from bufs[1] */
    char *timed = strndup(src, (size_t)(pop - src));
    ck_assert_ptr_nonnull(strstr(timed, "const float *restrict kt_B_layout = kt_bufs[1];"));
    ck_assert_ptr_nonnull(strstr(timed, "*kt_B_layout["));
    ck_assert_ptr_null(strstr(timed, "= kt_pool_take("));   /* no workspace */
    for (const char *l = timed; l; l = strchr(l + 1, '\n')) {   /* never stored */
        const char *t = l + (*l == '\n');
        while (*t == ' ')
            t++;
        ck_assert_msg(strncmp(t, "kt_B_layout[", 12) != 0, "B's layout written:\n%s", src);
    }
    ck_assert_ptr_null(strstr(timed, "kt_B_layout = (float"));
    free(timed);
    ck_assert_ptr_nonnull(strstr(pack, "if (kt_i == 1) {"));
    ck_assert_ptr_null(strstr(pack, "if (kt_i == 0)"));
    ck_assert_ptr_nonnull(strstr(wrap, "lk_pack(1, kt_bufs[1], kt_w0);"));
    ck_assert_ptr_nonnull(strstr(wrap, "kt_rc = lk_packed(kt_args);"));

    /* lk_pack lays B out as kt_codegen_pack does (the runner's and the
     * network builder's copies agree) */
    char dir[] = "/tmp/kt_test_pack_XXXXXX", so[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(so, sizeof(so), "%s/k.so", dir);
    ck_assert_msg(kt_codegen_compile(src, so, NULL) == 0, "%s", kt_err_msg());
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(h);
    void *sym = dlsym(h, "lk_pack");
    ck_assert_ptr_nonnull(sym);
    int (*packfn)(int, const float *, float *);
    memcpy(&packfn, &sym, sizeof(packfn));
    kt_codegen_pack_t pk[KT_CODEGEN_MAX_PACKS];
    ck_assert_int_eq(kt_codegen_packs(mm, st, pk, KT_CODEGEN_MAX_PACKS), 1);
    float w[32 * 48], got[32 * 48], want[32 * 48];
    for (int i = 0; i < 32 * 48; i++)
        w[i] = (float)i;
    ck_assert_int_eq(packfn(0, w, got), 0);
    ck_assert_int_eq(packfn(2, NULL, NULL), 0);
    ck_assert_int_eq(packfn(1, NULL, NULL), 1);
    ck_assert_int_eq(packfn(1, w, got), 1);
    kt_codegen_pack(&pk[0], w, want, 0);
    ck_assert_int_eq(memcmp(got, want, sizeof(got)), 0);
    ck_assert_int_ne(memcmp(got, w, sizeof(got)), 0);   /* a real permutation */
    dlclose(h);
    unlink(so);
    rmdir(dir);
    check_against_reference(mm, src, "lk", 11);
    free(src);
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

/* The checker covers the packed variant: a file whose lk is right (B copied
 * in the kernel) but whose lk_pack lays B out wrong fails, naming
 * lk_packed; the same file with the pack left right passes. */
START_TEST(codegen_check_catches_a_wrong_pack)
{
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    kt_sched_state_t *st = parse_json(mm, MM_CACHE_WRITE);
    for (int planted = 0; planted < 2; planted++) {
        kt_sbuf_t b;
        kt_sbuf_init(&b);
        kt_codegen_preamble_c(&b);
        ck_assert_int_eq(kt_codegen_emit_c_into(mm, st, "lk", &b), 0);
        kt_sbuf_t v;
        kt_sbuf_init(&v);
        ck_assert_int_eq(kt_codegen_emit_c_variants_into(mm, st, "lz", &v), 0);
        /* lz_packed and lz_pack become lk's; the wrapper lz stays lz */
        kt_sbuf_t t2;
        kt_sbuf_init(&t2);
        const char *p = v.data;
        for (const char *q; (q = strstr(p, "lz_pack")) != NULL; p = q + 7) {
            kt_sbuf_putn(&t2, p, (size_t)(q - p));
            kt_sbuf_puts(&t2, "lk_pack");
        }
        kt_sbuf_puts(&t2, p);
        char *text = kt_sbuf_take(&t2);
        if (planted) {
            char *at = strstr(text, "kt_dst[kt_o++] = kt_src[");
            ck_assert_ptr_nonnull(at);
            /* the weights come out negated: the packed kernel's answers are wrong */
            kt_sbuf_putn(&b, text, (size_t)(at - text));
            kt_sbuf_puts(&b, "kt_dst[kt_o++] = -kt_src[");
            kt_sbuf_puts(&b, at + strlen("kt_dst[kt_o++] = kt_src["));
        } else {
            kt_sbuf_puts(&b, text);
        }
        free(text);
        kt_sbuf_free(&v);
        char *src = kt_sbuf_take(&b);
        double err = 0;
        int rc = kt_codegen_check(mm, src, "lk", 5, &err);
        if (planted) {
            ck_assert_int_eq(rc, KT_EINVAL);
            ck_assert_msg(strstr(kt_err_msg(), "lk_packed") != NULL, "%s", kt_err_msg());
            ck_assert(err > KT_CODEGEN_MAX_REL_ERR);
        } else {
            ck_assert_msg(rc == 0, "%s", kt_err_msg());
            ck_assert(err <= KT_CODEGEN_MAX_REL_ERR);
        }
        free(src);
    }
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

/* ResNet-18's conv2d 56x56x64 3x3 pad 1 + bias + relu, and the best state
 * of a 4,800-trial tuning of it: padding materialized, a 2x8x16 register
 * tile. */
static kt_dag_t *conv56(void)
{
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_conv2d_params_t cp = kt_test_conv_p(1, 1, 1);
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 56, 56, 64, 64, 3, 3, &cp, ep, 2);
    ck_assert_ptr_nonnull(cv);
    return cv;
}

static const char *CONV56_STATE =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"ann\":[2,0,0],\"kind\":\"root\","
    "\"name\":\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,0],"
    "\"fuse\":\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":"
    "[[1,1,1,1],[2,14,1,2],[1,1,7,8],[4,1,1,16],[3,1],[1,3],[1,64]]},{\"kind\":\"input\","
    "\"name\":\"bias\"},{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[6,0,0],"
    "\"kind\":\"fused\",\"name\":\"T_relu\"}],\"version\":1}";

/* s with its one occurrence of from replaced by to (malloc'd). */
static char *replace_once(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    ck_assert_ptr_nonnull(at);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *r = malloc(n);
    ck_assert_ptr_nonnull(r);
    snprintf(r, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    return r;
}

/* The loop of compiled assembly (GCC/clang AT&T syntax) that holds the most
 * FMAs among the innermost loops (a label and a backward jump to it, no
 * other such loop inside): its FMAs, those on 512-bit registers, its
 * vector loads (a multiply-add's memory operand included), broadcasts,
 * and instructions touching the stack (spills). */
typedef struct {
    int fma, fma_zmm, loads, bcasts, stack;
} fma_loop_t;

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static fma_loop_t innermost_fma_loop(const char *text)
{
    enum { MAXL = 200000 };
    const char **line = malloc(sizeof(*line) * MAXL);
    size_t *len = malloc(sizeof(*len) * MAXL);
    ck_assert(line && len);
    int n = 0;
    for (const char *p = text; *p && n < MAXL;) {
        const char *e = strchr(p, '\n');
        line[n] = p;
        len[n++] = e ? (size_t)(e - p) : strlen(p);
        p = e ? e + 1 : p + strlen(p);
    }
    fma_loop_t best = {0};
    for (int j = 0; j < n; j++) {
        /* a jump to a label above: "\tjne\t.L5" */
        char target[64];
        if (sscanf(line[j], "\tj%*[a-z]\t%63[.A-Za-z0-9_]", target) != 1 || target[0] != '.')
            continue;
        size_t tl = strlen(target);
        int start = -1;
        for (int i = j - 1; i >= 0 && start < 0; i--)
            if (len[i] == tl + 1 && strncmp(line[i], target, tl) == 0 && line[i][tl] == ':')
                start = i;
        if (start < 0)
            continue;
        int inner = 1;   /* no backward jump inside to a label inside */
        for (int k = start + 1; k < j && inner; k++) {
            char t2[64];
            if (sscanf(line[k], "\tj%*[a-z]\t%63[.A-Za-z0-9_]", t2) != 1 || t2[0] != '.')
                continue;
            size_t l2 = strlen(t2);
            for (int i = start + 1; i < k && inner; i++)
                if (len[i] == l2 + 1 && strncmp(line[i], t2, l2) == 0 && line[i][l2] == ':')
                    inner = 0;
        }
        if (!inner)
            continue;
        fma_loop_t c = {0};
        for (int k = start; k <= j; k++) {
            char *l = strndup(line[k], len[k]);
            int fma = starts(l, "\tvfmadd") || starts(l, "\tvfnmadd");
            int mem = strchr(l, '(') != NULL, bc = strstr(l, "{1to") != NULL;
            c.fma += fma;
            c.fma_zmm += fma && strstr(l, "%zmm") != NULL;
            c.bcasts += starts(l, "\tvbroadcastss") || (fma && bc);
            c.loads += (fma && mem && !bc) ||
                       ((starts(l, "\tvmovups") || starts(l, "\tvmovaps")) &&
                        strchr(l, '(') != NULL && strchr(l, '(') < strchr(l, ','));
            c.stack += strstr(l, "(%rsp)") != NULL || strstr(l, "(%rbp)") != NULL;
            free(l);
        }
        if (c.fma > best.fma)
            best = c;
    }
    free(line);
    free(len);
    return best;
}

/* A register tile stays in registers on AVX-512 (16 floats a vector): the
 * update of an 8x32 matmul tile and of a 2x8x16 conv2d tile (the best
 * ResNet-18 56x56x64 state a 4,800-trial tuning found), compiled as the
 * builder compiles them but for a fixed AVX-512 CPU, run 16 FMAs per step
 * on zmm accumulators held in registers: no stack access in the loop, and
 * for matmul 2 vector loads and 8 broadcasts per 16 FMAs (the loop may run
 * several steps). The same conv2d
 * tile with auto_unroll_max_step 512 (its loops unrolled before GCC picks
 * its address registers: the padded input's nested index once kept one
 * index register per pixel, reloaded from the stack in the loop), and a
 * 14 pixels x 32 channels tile at step 0 (GCC left its loop over pixels
 * rolled and the tile in memory) run alike: 28 FMAs, 2 vector loads and 14
 * broadcasts for the latter. */
START_TEST(codegen_register_tile_stays_in_zmm_registers)
{
    kt_dag_t *mm = kt_ops_matmul(512, 512, 512, 0, NULL, 0);
    kt_dag_t *cv = conv56();
    const char *mm_state =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,1,64],\"ann2\":[1,1,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"
        "\"name\":\"C\",\"tile\":[[16,2,2,8],[1,4,4,32],[8,64]]}],\"version\":1}";
    char *cv512 = replace_once(CONV56_STATE, "\"ann\":[0,1,0]", "\"ann\":[0,1,512]");
    char *cv14 = replace_once(CONV56_STATE, "[2,14,1,2],[1,1,7,8],[4,1,1,16]",
                              "[2,28,1,1],[1,1,4,14],[2,1,1,32]");
    struct {
        kt_dag_t *dag;
        const char *state;
        int fma, max_loads;
    } k[] = {{mm, mm_state, 16, 10}, {cv, CONV56_STATE, 16, 17}, {cv, cv512, 16, 17},
             {cv, cv14, 28, 16}};
    for (int i = 0; i < 4; i++) {
        char *src = emit_json(k[i].dag, k[i].state, "rk");
        char *text = avx512_asm(src);
        fma_loop_t l = innermost_fma_loop(text);
        /* the loop may hold several reduction steps (the partial unroll) */
        ck_assert_msg(l.fma >= k[i].fma && l.fma % k[i].fma == 0 && l.fma_zmm == l.fma &&
                          l.stack == 0 &&
                          (l.loads + l.bcasts) * k[i].fma <= k[i].max_loads * l.fma,
                      "kernel %d: %d FMAs (%d on zmm), %d loads, %d broadcasts, %d stack "
                      "accesses in the update loop", i, l.fma, l.fma_zmm, l.loads, l.bcasts,
                      l.stack);
        free(text);
        free(src);
    }
    free(cv512);
    free(cv14);
    kt_dag_free(mm);
    kt_dag_free(cv);
}
END_TEST

/* The line of text holding at, up to its newline. */
static int line_has(const char *text, const char *at, const char *what)
{
    const char *start = at, *end = strchr(at, '\n');
    while (start > text && start[-1] != '\n')
        start--;
    const char *hit = strstr(start, what);
    return hit && (!end || hit < end);
}

/* Whether a line of assembly text names op (and reg, when not NULL). */
static int asm_line(const char *text, const char *op, const char *reg)
{
    for (const char *at = strstr(text, op); at; at = strstr(at + 1, op))
        if (!reg || line_has(text, at, reg))
            return 1;
    return 0;
}

/* Where the reduction ends inside the register tile (every outer reduce
 * factor 1), the tile's store is the consumer's statement: the fused
 * bias + relu reads the registers in zmm vectors (a scalar epilogue lost
 * more than the local block cost), a cache-write stage copies the
 * registers out, and neither has a local tile; with an outer reduce loop
 * the local tile stays. All match the reference. */
START_TEST(codegen_direct_register_tile_writes_the_consumer)
{
    kt_dag_t *cv = conv56();
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    char *cv_direct = replace_once(CONV56_STATE, "[3,1],[1,3],[1,64]", "[1,3],[1,3],[1,64]");
    char *mm_direct = replace_once(MM_CACHE_WRITE, "[8,4]", "[1,32]");

    char *src = emit_json(cv, cv_direct, "dk");
    ck_assert_ptr_null(strstr(src, "kt_conv2d_nhwc_local"));
    const char *out = strstr(src, "T_relu[");
    ck_assert_ptr_nonnull(out);
    ck_assert_msg(line_has(src, out, "kt_conv2d_nhwc_reg["), "the epilogue does not read the tile");
    ck_assert_ptr_null(strstr(out + 1, "T_relu["));   /* written in one place */
    check_against_reference(cv, src, "dk", 3);
    char *text = avx512_asm(src);
    /* relu's max: a compare on zmm registers, none on single floats */
    ck_assert_msg((asm_line(text, "vcmpps", "%zmm") || asm_line(text, "vmaxps", "%zmm")) &&
                      !asm_line(text, "vcmpltss", NULL) && !asm_line(text, "vmaxss", NULL),
                  "the epilogue is not a zmm vector loop");
    free(text);
    free(src);

    src = emit_json(mm, mm_direct, "dm");
    ck_assert_ptr_null(strstr(src, "kt_C_local"));
    out = strstr(src, "  C[");
    ck_assert_ptr_nonnull(out);
    ck_assert_msg(line_has(src, out, "= kt_C_reg["), "the copy-out does not read the tile");
    check_against_reference(mm, src, "dm", 4);
    free(src);

    /* an outer reduce loop: the tile is stored back to the local block */
    src = emit_json(cv, CONV56_STATE, "lk");
    ck_assert_ptr_nonnull(strstr(src, "kt_conv2d_nhwc_local"));
    free(src);
    src = emit_json(mm, MM_CACHE_WRITE, "lm");
    ck_assert_ptr_nonnull(strstr(src, "kt_C_local"));
    free(src);
    free(cv_direct);
    free(mm_direct);
    kt_dag_free(cv);
    kt_dag_free(mm);
}
END_TEST

/* A materialized padding stage tests its condition once per row of
 * channels, not per element: the loop is printed twice, the interior copy a
 * plain load (it vectorizes), the border one zeros; the answers match. */
START_TEST(codegen_padding_loop_is_split_from_its_condition)
{
    kt_dag_t *cv = conv56();
    char *src = emit_json(cv, CONV56_STATE, "pk");
    const char *cond = strstr(src, "if (((((kt_i1_1 >= 1LL) && (kt_i1_1 < 57LL)) && "
                                   "(kt_i2_2 >= 1LL)) && (kt_i2_2 < 57LL))) {\n");
    ck_assert_ptr_nonnull(cond);
    const char *in = strstr(cond, "pad_temp[kt_i1_1*3712LL + kt_i2_2*64LL + kt_i3_3] = data[");
    const char *out = strstr(cond, "} else {\n");
    const char *zero = strstr(cond, "pad_temp[kt_i1_1*3712LL + kt_i2_2*64LL + kt_i3_3] = 0.0f;");
    ck_assert(in && out && zero && in < out && out < zero);
    ck_assert_ptr_null(strstr(src, " ? data["));   /* no per-element select left */
    check_against_reference(cv, src, "pk", 9);
    free(src);
    kt_dag_free(cv);
}
END_TEST

/* conv2d 7x7x16 -> 32, 3x3 pad 1 + bias + relu with the padding inlined
 * and a 7x32 register tile (the shape of the best ResNet-18 7x7x512
 * state): yy.2 and xx.3 iterate (PAD_SERIAL), or yy.0 is a parallel loop
 * (PAD_PARALLEL), which cannot be split. */
static const char *PAD_SERIAL =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"
    "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,512],\"fuse\":"
    "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"
    "[1,1,7,1],[1,1,1,7],[1,1,1,32],[1,3],[3,1],[2,8]]},{\"kind\":\"input\",\"name\":\"bias\"},"
    "{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[1,1,0],\"kind\":\"fused\","
    "\"name\":\"T_relu\"}],\"version\":1}";
static const char *PAD_PARALLEL =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"
    "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,512],\"fuse\":"
    "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"
    "[7,1,1,1],[1,1,1,7],[1,1,1,32],[1,3],[3,1],[2,8]]},{\"kind\":\"input\",\"name\":\"bias\"},"
    "{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[2,1,0],\"kind\":\"fused\","
    "\"name\":\"T_relu\"}],\"version\":1}";

/* Lines of text holding needle. */
static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; n++)
        p = strchr(p, '\n') ? strchr(p, '\n') : p + strlen(p);
    return n;
}

/* The line of text at p (up to its newline), malloc'd. */
static char *line_at(const char *text, const char *p)
{
    const char *a = p, *z = strchr(p, '\n');
    while (a > text && a[-1] != '\n')
        a--;
    return strndup(a, z ? (size_t)(z - a) : strlen(a));
}

/* The innermost reduce loop around a register tile runs unrolled whole where
 * it has at most 4 steps (GCC's own heuristics kept the stem's 3-step loop
 * over input channels rolled in the interior's copy of this state, 8 FMAs
 * a turn and the loop's registers spilled: 1.32x the time), and partially
 * (4 copies) where it has more: each rc.1 loop of 3 follows
 * `#pragma GCC unroll 3`, the 7-step loops around it (not innermost) no
 * pragma. The stem's shape, 16 blocks of 7 rows, tiles of 1 x 8 x 16, the
 * padding inlined. */
START_TEST(codegen_short_reduce_loop_unrolls_whole)
{
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_conv2d_params_t cp = kt_test_conv_p(2, 3, 1);
    kt_dag_t *stem = kt_ops_conv2d_nhwc(1, 224, 224, 3, 64, 7, 7, &cp, ep, 2);
    ck_assert_ptr_nonnull(stem);
    char *src = emit_json(
        stem,
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"
        "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,512],\"fuse\":"
        "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"
        "[16,1,7,1],[1,1,14,8],[2,2,1,16],[1,7],[1,7],[1,3]]},{\"kind\":\"input\",\"name\":"
        "\"bias\"},{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[8,1,0],\"kind\":"
        "\"fused\",\"name\":\"T_relu\"}],\"version\":1}",
        "su");
    int loops = 0;
    static const char rc[] = "for (long long kt_rc_1_";
    for (const char *p = strstr(src, rc); p; p = strstr(p + 1, rc)) {
        const char *prev = p;   /* the line before */
        while (prev > src && prev[-1] != '\n')
            prev--;
        ck_assert(prev > src);
        char *l = line_at(src, prev - 1);
        ck_assert_msg(strstr(l, "#pragma GCC unroll 3") != NULL, "rc.1 loop after: %s", l);
        free(l);
        loops++;
    }
    ck_assert_int_ge(loops, 2);   /* the interior's copy and the border's */
    static const char rx[] = "for (long long kt_rx_1_";
    for (const char *p = strstr(src, rx); p; p = strstr(p + 1, rx)) {
        const char *prev = p;
        while (prev > src && prev[-1] != '\n')
            prev--;
        char *l = line_at(src, prev - 1);
        ck_assert_msg(strstr(l, "#pragma GCC unroll") == NULL, "rx.1 loop after: %s", l);
        free(l);
    }
    free(src);
    kt_dag_free(stem);
}
END_TEST

/* Multiply-adds a kernel runs: src's update lines (those reading `data`)
 * counted by an instrumented copy of it, compiled and called once. */
static long long count_updates(const char *src, const char *entry)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "long long kt_count;\n");
    for (const char *l = src; *l;) {
        const char *z = strchr(l, '\n');
        size_t n = z ? (size_t)(z - l) + 1 : strlen(l);
        const char *t = l;
        while (*t == ' ')
            t++;
        if (strncmp(t, "#pragma omp simd", 16) == 0) {   /* the counter is not a reduction */
            l += n;
            continue;
        }
        /* an update reads data or a border table's pointer (not the line
         * filling the table) */
        const char *d = strstr(l, "data["), *bt = strstr(l, "kt_border");
        d = d && d < l + n ? d : bt && bt < l + n ? bt : NULL;
        if (d && strncmp(t, "kt_border", 9) != 0 && strncmp(t, "const ", 6) != 0) {
            kt_sbuf_putn(&b, l, (size_t)(t - l));
            kt_sbuf_puts(&b, "__atomic_fetch_add(&kt_count, 1, __ATOMIC_RELAXED), ");
            kt_sbuf_putn(&b, t, n - (size_t)(t - l));
        } else {
            kt_sbuf_putn(&b, l, n);
        }
        l += n;
    }
    ck_assert_int_eq(kt_sbuf_ok(&b), 0);
    char dir[] = "/tmp/kt_test_pad_XXXXXX", so[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(so, sizeof(so), "%s/k.so", dir);
    ck_assert_msg(kt_codegen_compile(b.data, so, NULL) == 0, "%s", kt_err_msg());
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(h);
    void *fs = dlsym(h, entry), *cs = dlsym(h, "kt_count");
    ck_assert(fs && cs);
    int (*fn)(float **);
    memcpy(&fn, &fs, sizeof(fn));
    /* up to 16x16x16 -> 16x16x32, 7x7 */
    static float data[16 * 16 * 16], weight[7 * 7 * 16 * 32], bias[32], out[16 * 16 * 32];
    float *bufs[4] = {data, weight, bias, out};
    ck_assert_int_eq(fn(bufs), 0);
    long long n = *(long long *)cs;
    dlclose(h);
    unlink(so);
    rmdir(dir);
    kt_sbuf_free(&b);
    return n;
}

/* An inlined padding costs nothing: the update multiplies no zeros (it runs
 * 7*7*3*3 taps less the 80 out of the input, times 16 x 32 channels) and
 * tests nothing per element: no select left, no test on the update's line
 * nor inside the innermost (simd) loop. In PAD_SERIAL the reduction loop
 * ry.1 runs only where the row is inside (its bounds narrowed), in
 * PAD_PARALLEL too (yy.0, parallel, enters its bounds). Both answer as the
 * reference does. Today's emitter printed `(cond ? data[...] : 0.0f)` in
 * the innermost loop and ran all 7*7*9*16*32 multiply-adds. */
START_TEST(codegen_inlined_padding_is_partitioned_not_tested)
{
    kt_conv2d_params_t cp = kt_test_conv_p(1, 1, 1);
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 7, 7, 16, 32, 3, 3, &cp, ep, 2);
    ck_assert_ptr_nonnull(cv);
    const char *states[2] = {PAD_SERIAL, PAD_PARALLEL};
    char *srcs[2];
    for (int i = 0; i < 2; i++) {
        char *src = emit_json(cv, states[i], "pd");
        const char *k = strstr(src, "kt_par0_pd_packed(");
        ck_assert_ptr_nonnull(k);
        ck_assert_int_eq(count_lines(k, " ? "), 1);   /* the entry's return */
        ck_assert_int_eq(count_lines(k, "pad_temp"), 0);
        ck_assert_int_ge(count_lines(k, "data["), 1);
        for (const char *p = strstr(k, "data["); p; p = strstr(p + 1, "data[")) {
            char *l = line_at(k, p);
            ck_assert_msg(strstr(l, "if (") == NULL && strstr(l, ">=") == NULL,
                          "state %d: a test on the update: %s", i, l);
            free(l);
        }
        for (const char *p = strstr(k, "#pragma omp simd"); p; p = strstr(p + 1, "#pragma omp simd")) {
            const char *body = strchr(strchr(p, '\n') + 1, '\n') + 1;   /* after the for line */
            const char *end = strstr(body, "}\n");
            const char *t = strstr(body, " >= ");
            ck_assert_msg(t == NULL || t > end, "state %d: a test inside a simd loop", i);
        }
        ck_assert_int_ge(count_lines(k, "_ry_1_19 = kt_maxi("), 1);
        check_against_reference(cv, src, "pd", 11 + (uint64_t)i);
        srcs[i] = src;
    }
    /* counted last: the checker forks, and a fork of a process whose
     * OpenMP threads started hangs in libgomp */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(count_updates(srcs[i], "pd_packed"), (7 * 3 - 2) * (7 * 3 - 2) * 16 * 32);
        free(srcs[i]);
    }
    kt_dag_free(cv);
}
END_TEST

/* Multiply-adds of a k x k conv2d with this padding and stride of an
 * hw x hw x 16 input to 32 channels, whose register tiles are th x tw
 * pixels, when each (ry, rx) step of a tile runs whole where any of its
 * pixels reads the input and not at all where none does: a border tile
 * reads through a border table, whose padded pixels multiply zeros. */
static long long tile_taps(int hw, int k, int pad, int stride, int th, int tw)
{
    int out = (hw + 2 * pad - k) / stride + 1;
    long long n[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        int t = d ? tw : th;
        for (int o0 = 0; o0 < out; o0 += t)
            for (int r = 0; r < k; r++) {
                int any = 0;
                for (int o = o0; o < o0 + t && o < out; o++)
                    any |= o * stride + r - pad >= 0 && o * stride + r - pad < hw;
                n[d] += any ? t : 0;
            }
    }
    return n[0] * n[1] * 16 * 32;
}

/* The padding inlined and a register tile of 2 pixels x 32 channels:
 * stride 2 from 8x8x16 to 4x4x32 (only the first row and the first tile of
 * a row read the padding: tests with positive coefficients) and stride 1 at
 * 8x8 (the last row and tile read it too: negative ones). The tile is
 * printed twice behind one test of the loops around it: a copy that tests
 * nothing where the whole tile is inside (every test of its statements
 * holds at the ends of its loops' ranges) and the border's copy with its
 * guards. Today's emitter printed one copy, whose rx = 0 part tested every
 * unrolled pixel at every reduction step. The border copy reads through a
 * border table: per row the taps inside the input (2 + 3 + 3 + 3 at stride
 * 2, 2 + 6 x 3 + 2 at stride 1, the row loop narrowed), per column every
 * (rx, tile) step where a pixel of the tile is inside (tile_taps: 12 and
 * 24; 11 and 22 with the per-pixel tests before); a border tile running
 * the interior copy would read outside the input (wrong answers). */
START_TEST(codegen_register_tile_interior_tests_nothing)
{
    static const struct {
        int stride;
        const char *state;
        int side;   /* of the input */
    } cases[2] = {
        {2, KT_TEST_PAD_TILE_STATE("[2,1,2,1]", "[1,1,2,2]"), 8},
        {1, KT_TEST_PAD_TILE_STATE("[2,1,4,1]", "[1,1,4,2]"), 8},
    };
    for (int c = 0; c < 2; c++) {
        kt_dag_t *cv = kt_test_pad_tile_conv(cases[c].side, cases[c].stride);
        char *src = emit_json(cv, cases[c].state, "ti");
        /* each copy of the tile follows its test (interior) or its else (border) */
        int interior = 0, border = 0;
        const char *decl = "float kt_conv2d_nhwc_reg[";
        for (const char *d = strstr(src, decl); d; d = strstr(d + 1, decl)) {
            const char *t = d;
            while (t > src && strncmp(t, "if (", 4) != 0 && strncmp(t, "} else {", 8) != 0)
                t--;
            ck_assert_msg(t > src, "stride %d: a copy of the tile behind no test", cases[c].stride);
            if (*t == '}') {
                border++;
                continue;
            }
            interior++;
            char *test = line_at(src, t);
            ck_assert_msg(strstr(test, ">= 0LL") && !strstr(test, "_3_") && !strstr(test, "kt_r"),
                          "interior test reads the tile's loops: %s", test);
            free(test);
            const char *end = strstr(d, "} else {");
            ck_assert_ptr_nonnull(end);
            char *copy = strndup(d, (size_t)(end - d));
            static const char *const tests[3] = {"if (", "kt_maxi(", "kt_mini("};
            for (int k = 0; k < 3; k++) {
                const char *hit = strstr(copy, tests[k]);
                char *l = hit ? line_at(copy, hit) : NULL;
                ck_assert_msg(l == NULL, "a test in the interior copy: %s", l);
            }
            ck_assert_int_ge(count_lines(copy, "data["), 1);
            free(copy);
        }
        ck_assert_msg(interior >= 1 && interior == border,
                      "stride %d: %d interior and %d border copies", cases[c].stride, interior,
                      border);
        check_against_reference(cv, src, "ti", 21 + (uint64_t)c);
        ck_assert_int_eq(count_updates(src, "ti_packed"),
                         tile_taps(cases[c].side, 3, 1, cases[c].stride, 1, 2));
        free(src);
        kt_dag_free(cv);
    }
}
END_TEST

/* Level-2 tiles of 12x12x16 -> 32 (stride 1, padding inlined): blocks of
 * 3 rows x 4 pixels x 16 channels hold the accumulator tile, rows of 4
 * pixels x 16 channels the register tile. The interior/border split wraps
 * the register tile itself (the line before its declaration, past the
 * braces of an unprinted loop, is the test or its else): split at the
 * block's channel loop, the whole first and last blocks of rows ran the
 * border copy (a tuned 56x56 stride-2 state: half its work, 1.5x slower
 * than with the padding materialized). Answers as the reference;
 * multiply-adds: the 34 in-bounds taps per row, and per column the 36 of
 * every step where a tile of 4 pixels reads the input (tile_taps). */
START_TEST(codegen_tile_interior_wraps_the_register_tile)
{
    kt_dag_t *cv = kt_test_pad_tile_conv(12, 1);
    char *src = emit_json(
        cv,
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"
        "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,0],\"fuse\":"
        "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"
        "[4,1,3,1],[1,3,1,4],[1,2,1,16],[1,3],[1,3],[2,8]]},{\"kind\":\"input\",\"name\":"
        "\"bias\"},{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[1,1,0],\"kind\":"
        "\"fused\",\"name\":\"T_relu\"}],\"version\":1}",
        "tw");
    int copies = 0;
    const char *decl = "float kt_conv2d_nhwc_reg[";
    for (const char *d = strstr(src, decl); d; d = strstr(d + 1, decl)) {
        const char *l = d;   /* start of the previous line not just "{" */
        for (;;) {
            while (l > src && l[-1] != '\n')
                l--;
            const char *p = l > src ? l - 1 : src;
            while (p > src && p[-1] != '\n')
                p--;
            l = p;
            const char *t = l;
            while (*t == ' ')
                t++;
            if (strncmp(t, "{\n", 2) != 0 || l == src)
                break;
        }
        char *line = line_at(src, l);
        ck_assert_msg(strstr(line, "if (") || strstr(line, "} else {"),
                      "the register tile's copy is not behind its test: %s", line);
        free(line);
        copies++;
    }
    ck_assert_int_ge(copies, 2);
    check_against_reference(cv, src, "tw", 31);
    ck_assert_int_eq(count_updates(src, "tw_packed"), tile_taps(12, 3, 1, 1, 1, 4));   /* 34 x 36 */
    free(src);
    kt_dag_free(cv);
}
END_TEST

/* The ResNet-18 stem's window on a 12x12x16 input: 7x7, padding 3, stride 2
 * to 6x6x32, + bias + relu. */
static kt_dag_t *stem12(void)
{
    kt_conv2d_params_t cp = kt_test_conv_p(2, 3, 1);
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 12, 12, 16, 32, 7, 7, &cp, ep, 2);
    ck_assert_ptr_nonnull(cv);
    return cv;
}

/* A state of stem12 with the padding inlined: rows YY and columns XX split
 * in four levels, 32 channels a tile, rc split RC, the first PAR loops of
 * the fused output parallel. */
#define STEM12_STATE(YY, XX, RC, PAR)                                                           \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"      \
    "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,0],\"fuse\":"          \
    "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1]," YY \
    "," XX ",[1,1,1,32],[1,7],[1,7]," RC "]},{\"kind\":\"input\",\"name\":\"bias\"},{\"kind\":"   \
    "\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[" PAR ",1,0],\"kind\":\"fused\",\"name\":"    \
    "\"T_relu\"}],\"version\":1}"

/* A 7x7 window, padding 3, stride 2 (the ResNet-18 stem's shape on a
 * 12x12x16 input, 6x6x32 out) with the padding inlined and register tiles
 * of 2 x 2 pixels: the border copy's tests read the tile's rows and
 * columns and loops around them that GCC cannot fold, so it reads through
 * border tables (one pointer per pixel of the tile, into data or a block
 * of zeros) filled per (ry, rx) step and tests nothing per pixel and
 * reduction step. A step where every pixel of the tile reads the padding
 * (rows 0 and 1 at ry = 0: input rows -3 and -1) runs no multiply-add:
 * tile_taps counts exactly the steps with a pixel inside, fewer than all
 * 6 x 6 x 49 taps (a table without that test) and more than those inside
 * the input (per-pixel guards). Answers as the reference. */
START_TEST(codegen_border_table_replaces_the_tests_per_pixel)
{
    kt_dag_t *cv = stem12();
    char *src = emit_json(cv, STEM12_STATE("[1,3,1,2]", "[1,3,1,2]", "[2,8]", "1"), "bt");
    ck_assert_int_ge(count_lines(src, "kt_border0["), 2);   /* filled and read */
    /* the fill unrolled (its pointers in registers); the tables keep the
     * parallel group in one pass (no second pass of border copies) */
    const char *fill = strstr(src, "const float *kt_border0[");
    ck_assert_ptr_nonnull(fill);
    const char *unroll = strstr(fill, "#pragma GCC unroll 2\n");
    ck_assert(unroll && unroll < strstr(fill, "kt_border0[kt_"));
    ck_assert_ptr_null(strstr(src, "if (!("));
    for (const char *p = strstr(src, "kt_conv2d_nhwc_reg[kt_"); p;
         p = strstr(p + 1, "kt_conv2d_nhwc_reg[kt_")) {
        char *l = line_at(src, p);
        ck_assert_msg(strstr(l, "if (") == NULL && strstr(l, " ? ") == NULL,
                      "a test on the update: %s", l);
        free(l);
    }
    static const char simd[] = "#pragma omp simd";
    for (const char *p = strstr(src, simd); p; p = strstr(p + 1, simd)) {
        const char *body = strchr(strchr(p, '\n') + 1, '\n') + 1;
        const char *end = strstr(body, "}\n");
        const char *t = strstr(body, " >= ");
        ck_assert_msg(t == NULL || t > end, "a test inside a simd loop");
    }
    check_against_reference(cv, src, "bt", 41);
    long long n = count_updates(src, "bt_packed"), want = tile_taps(12, 7, 3, 2, 2, 2);
    ck_assert_int_eq(n, want);
    ck_assert_int_lt(want, 6LL * 6 * 49 * 16 * 32);
    free(src);
    kt_dag_free(cv);
}
END_TEST

/* Taps of a k x k window with this padding and stride over an hw x hw x 16
 * input that read the input, times 32 output channels: the multiply-adds of
 * a conv2d that multiplies no zeros. */
static long long inside_taps(int hw, int k, int pad, int stride)
{
    int out = (hw + 2 * pad - k) / stride + 1;
    long long n = 0;
    for (int o = 0; o < out; o++)
        for (int r = 0; r < k; r++)
            n += o * stride + r - pad >= 0 && o * stride + r - pad < hw;
    return n * n * 16 * 32;
}

/* The same stem shape (12x12x16 -> 6x6x32, 7x7, padding 3, stride 2), one
 * output row per parallel iteration and register tiles of 1 x 2 pixels:
 * column tiles 0 and 2 read the padding, tile 1 does not. The parallel
 * group prints in two passes, two loops of one parallel region with no
 * barrier between them, each calling functions of its own: the first the
 * interior copies and the untested tiles, the second only the border
 * copies (behind the negated interior test), whose rx loop is cut at each
 * pixel's own point, so that every unrolled pixel's test is decided and
 * GCC folds it: no border table, and the kernel multiplies no zeros,
 * exactly the taps inside the input (with a table per step, tile_taps'
 * count: more). Answers as the reference. */
START_TEST(codegen_border_pass_multiplies_no_zeros)
{
    kt_dag_t *cv = stem12();
    char *src = emit_json(cv, STEM12_STATE("[6,1,1,1]", "[1,1,3,2]", "[1,16]", "2"), "bp");
    ck_assert_int_eq(count_lines(src, "#pragma omp parallel for"), 0);
    ck_assert_int_eq(count_lines(src, "#pragma omp parallel\n"), 1);
    ck_assert_int_eq(count_lines(src, "#pragma omp for schedule(static) nowait"), 2);
    /* the first pass's functions: up to the first one the second loop calls */
    const char *loop2 = strstr(strstr(src, " nowait\n") + 1, " nowait\n");
    const char *call2 = strstr(loop2, "kt_par");
    ck_assert_ptr_nonnull(call2);
    char name[64];
    int len = (int)strcspn(call2, "(");
    ck_assert_int_lt(len, 50);
    snprintf(name, sizeof(name), "int %.*s(", len, call2);
    const char *first = strstr(src, "int kt_par0_bp_packed(");
    const char *second = strstr(src, name);
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(second);
    ck_assert(second > first);
    char *one = strndup(first, (size_t)(second - first));
    ck_assert_ptr_null(strstr(one, "} else {"));   /* no border copy in the first pass */
    ck_assert_ptr_null(strstr(one, "if (!("));
    ck_assert_int_ge(count_lines(second, "if (!("), 2);   /* column tiles 0 and 2 */
    free(one);
    ck_assert_ptr_null(strstr(src, "kt_border"));
    check_against_reference(cv, src, "bp", 51);
    long long n = count_updates(src, "bp_packed");
    ck_assert_int_eq(n, inside_taps(12, 7, 3, 2));
    ck_assert_int_lt(n, tile_taps(12, 7, 3, 2, 1, 2));
    free(src);
    kt_dag_free(cv);
}
END_TEST

/* conv2d 12xW x16 -> 32, 3x3 stride 1 + bias + relu, padded by 1 on the rows
 * and by padw on the columns, the padding inlined; the output rows (12) in
 * 3 chunks of 4 (parallel), the columns split as XX, the first PAR fused
 * output loops parallel. */
#define ROWPAD_STATE(XX, PAR)                                                                   \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"      \
    "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,0],\"fuse\":"          \
    "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"   \
    "[3,1,2,2]," XX ",[1,1,1,32],[1,3],[1,3],[2,8]]},{\"kind\":\"input\",\"name\":\"bias\"},"  \
    "{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[" PAR ",1,0],\"kind\":\"fused\","  \
    "\"name\":\"T_relu\"}],\"version\":1}"

static kt_dag_t *rowpad_conv(int w, int padw)
{
    kt_conv2d_params_t cp = kt_test_conv_p(1, 1, 1);
    cp.pad[1] = cp.pad[3] = padw;
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 12, w, 16, 32, 3, 3, &cp, ep, 2);
    ck_assert_msg(cv != NULL, "%s", kt_err_msg());
    return cv;
}

/* The text of outlined function kt_par<i>_<entry>_packed, up to the next
 * function; NULL if there is none. malloc'd. */
static char *par_fn(const char *src, int i, const char *entry)
{
    char name[64];
    snprintf(name, sizeof(name), "int kt_par%d_%s_packed(", i, entry);
    const char *a = strstr(src, name);
    if (!a)
        return NULL;
    const char *z = strstr(a + 1, "\nstatic ");
    z = z ? z : strstr(a, "\nint ");
    ck_assert_ptr_nonnull(z);
    return strndup(a, (size_t)(z - a));
}

/* A parallel loop over output rows with the padding inlined: only the
 * first chunk reads the top padding and only the last the bottom one, so
 * the body is outlined once per kind of chunk, each called for its own
 * iterations, the chunk's index a constant in a single-valued one: the
 * middle chunk's function tests nothing (before, every chunk ran the code
 * testing every row against an index GCC could not know). Parallel over
 * rows and columns with padding on both (3 x 3 kinds, more than
 * KT_EMIT_PAR_BODIES), the body splits over the rows only. Answers as the
 * reference in both. */
START_TEST(codegen_parallel_body_outlined_per_border_chunk)
{
    kt_dag_t *cv = rowpad_conv(8, 0);   /* 12 x 6 out */
    char *src = emit_json(cv, ROWPAD_STATE("[1,1,3,2]", "2"), "pc");
    char *fn[3];
    for (int i = 0; i < 3; i++) {
        fn[i] = par_fn(src, i, "pc");
        ck_assert_msg(fn[i] != NULL, "no function %d:\n%s", i, src);
        char v[32];
        snprintf(v, sizeof(v), " = %dLL;\n", i);
        ck_assert_msg(strstr(fn[i], v) != NULL, "chunk %d is not a constant:\n%s", i, fn[i]);
    }
    ck_assert_ptr_null(par_fn(src, 3, "pc"));
    ck_assert_msg(strstr(fn[0], "if (") && strstr(fn[2], "if ("), "the border chunks test");
    ck_assert_msg(!strstr(fn[1], "if (") && !strstr(fn[1], "kt_maxi") &&
                      !strstr(fn[1], "kt_mini") && !strstr(fn[1], "kt_border"),
                  "the middle chunk tests: %s", fn[1]);
    ck_assert_int_eq(count_lines(src, "if (kt_ax1_0_1 >= "), 3);   /* one call each */
    for (int i = 0; i < 3; i++)
        free(fn[i]);
    check_against_reference(cv, src, "pc", 61);
    free(src);
    kt_dag_free(cv);

    cv = rowpad_conv(8, 1);   /* 12 x 8 out, padded on all sides */
    src = emit_json(cv, ROWPAD_STATE("[2,1,2,2]", "3"), "pq");
    ck_assert_int_eq(count_lines(src, "#pragma omp parallel for"), 1);
    ck_assert_int_eq(count_lines(src, "collapse(2)"), 1);
    char *last = par_fn(src, 2, "pq");
    ck_assert_msg(last && !par_fn(src, 3, "pq"), "not 3 functions:\n%s", src);
    ck_assert_int_eq(count_lines(last, "const long long kt_ax1_0_1 = 2LL;"), 1);
    ck_assert_int_eq(count_lines(src, "if (kt_ax1_0_1 >= "), 3);
    ck_assert_int_eq(count_lines(src, "if (kt_ax2_0_2 >= "), 0);   /* the columns not split */
    free(last);
    check_against_reference(cv, src, "pq", 62);
    free(src);
    kt_dag_free(cv);
}
END_TEST

/* kt_codegen_c_tested_share counts the padding tests the printed C runs
 * per execution of the statement, each copy weighed by the full ranges of
 * the loops around it. The stride-2 tile state above, 8x8x16 -> 4x4x32:
 * the update runs 4x4 pixels x 32 channels x 9 taps x 16 = 73,728 times.
 * Output rows 0-1 (ax1.0 = 0): of the 4 tiles (yy.2, xx.2) only (1, 1) is
 * interior; a border tile runs, per rc.0 step, one narrowed ry loop start
 * and per (ry, rx) a border table of 2 column tests (one per pixel of the
 * tile, read by the 8 rc.1 steps): 19, times 3 tiles x 2 steps = 114. Rows
 * 2-3: the row test always holds (that part of ax1.0 is split off); tiles
 * with xx.2 = 1 are interior, the 2 others test 18 times per step: 72.
 * Share 186 / 73728 (1446 when the border tested each pixel at every rc.1
 * step). The statements without a padding guard say 1, and so does every
 * statement of the state with its padding materialized. */
START_TEST(codegen_tested_share_counts_the_printed_tests)
{
    kt_dag_t *cv = kt_test_pad_tile_conv(8, 2);
    static const char *const inl = KT_TEST_PAD_TILE_STATE("[2,1,2,1]", "[1,1,2,2]");
    for (int materialized = 0; materialized < 2; materialized++) {
        char *json = materialized ? kt_test_materialize_pad(inl) : strdup(inl);
        kt_sched_state_t *st = parse_json(cv, json);
        kt_lower_t *L = kt_lower_ex(cv, st, 1);
        ck_assert_ptr_nonnull(L);
        double share[64];
        ck_assert_int_le(L->nstmts, 64);
        ck_assert_int_eq(kt_codegen_c_tested_share(cv, L, share), 0);
        int updates = 0;
        for (int i = 0; i < L->nstmts; i++) {
            const kt_lower_stmt_t *s = &L->stmts[i];
            int guarded = !materialized && s->kind == KT_STMT_UPDATE &&
                          strcmp(kt_dag_stage(cv, s->stage)->name, "conv2d_nhwc") == 0;
            updates += guarded;
            double want = guarded ? 186.0 / 73728.0 : 1.0;
            ck_assert_msg(fabs(share[i] - want) < 1e-12, "materialized %d, statement %d: share %g, want %g",
                          materialized, i, share[i], want);
        }
        ck_assert_int_eq(updates, !materialized);
        ck_assert_int_eq(kt_codegen_c_tested_share(cv, NULL, share), KT_EINVAL);
        ck_assert_int_eq(kt_codegen_c_tested_share(cv, L, NULL), KT_EINVAL);
        kt_lower_free(L);
        kt_sched_state_free(st);
        free(json);
    }
    kt_dag_free(cv);
}
END_TEST

START_TEST(codegen_emit_rejects_bad_input)
{
    kt_dag_t *mm = kt_ops_matmul(8, 8, 8, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(mm, &p, &sk, &n), 0);
    const char *bad_entries[] = {"", "1abc", "a-b", "C", "kt_fail"};
    for (size_t i = 0; i < sizeof(bad_entries) / sizeof(bad_entries[0]); i++) {
        ck_assert_ptr_null(kt_codegen_emit_c(mm, sk[0], bad_entries[i]));
        ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    }
    kt_sched_state_t *b = kt_sched_state_clone(sk[0]);
    b->stages[2].split[0][0] = 3;   /* no longer a factorization */
    ck_assert_ptr_null(kt_codegen_emit_c(mm, b, "k"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "do not multiply"));
    ck_assert_ptr_null(kt_lower(mm, b));
    kt_sched_state_free(b);
    /* a sketch itself (trivial splits, no annotation) is a valid program */
    char *src = kt_codegen_emit_c(mm, sk[2], "k");
    ck_assert_ptr_nonnull(src);
    check_against_reference(mm, src, "k", 3);
    free(src);
    for (int i = 0; i < n; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    kt_dag_free(mm);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("codegen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, codegen_lowering_has_local_tiles_and_annotations);
    tcase_add_test(tc, codegen_emit_rejects_bad_input);
    tcase_add_test(tc, codegen_large_local_tile_uses_heap);
    tcase_add_test(tc, codegen_outlines_parallel_body_and_unrolls_reduce_loop);
    tcase_add_test(tc, codegen_rewrites_weight_layout);
    tcase_add_test(tc, codegen_timed_kernel_takes_packed_weights);
    tcase_add_test(tc, codegen_check_catches_a_wrong_pack);
    tcase_add_test(tc, codegen_register_tile_stays_in_zmm_registers);
    tcase_add_test(tc, codegen_short_reduce_loop_unrolls_whole);
    tcase_add_test(tc, codegen_direct_register_tile_writes_the_consumer);
    tcase_add_test(tc, codegen_padding_loop_is_split_from_its_condition);
    tcase_add_test(tc, codegen_inlined_padding_is_partitioned_not_tested);
    tcase_add_test(tc, codegen_tested_share_counts_the_printed_tests);
    tcase_add_test(tc, codegen_tile_interior_wraps_the_register_tile);
    tcase_add_test(tc, codegen_border_table_replaces_the_tests_per_pixel);
    tcase_add_test(tc, codegen_border_pass_multiplies_no_zeros);
    tcase_add_test(tc, codegen_parallel_body_outlined_per_border_chunk);
    tcase_add_test(tc, codegen_register_tile_interior_tests_nothing);
    tcase_add_test(tc, codegen_matmul_states_match_reference);
    tcase_add_test(tc, codegen_dense_states_match_reference);
    tcase_add_test(tc, codegen_batch_matmul_states_match_reference);
    tcase_add_test(tc, codegen_epilogue_states_match_reference);
    tcase_add_test(tc, codegen_conv2d_nhwc_states_match_reference);
    tcase_add_test(tc, codegen_conv2d_nchw_states_match_reference);
    tcase_add_test(tc, codegen_depthwise_states_match_reference);
    tcase_add_test(tc, codegen_pool_states_match_reference);
    tcase_add_test(tc, codegen_softmax_and_layer_norm_states_match_reference);
    tcase_add_test(tc, codegen_network_op_states_match_reference);
    tcase_add_test(tc, codegen_winograd_states_match_reference);
    tcase_add_test(tc, codegen_winograd_const_tables_fold);
    tcase_add_test(tc, codegen_intermediates_kept_between_calls);
    tcase_add_test(tc, codegen_winograd_gather_is_not_scalar);
    tcase_add_test(tc, codegen_silu_epilogue_calls_vector_expf);
    tcase_add_test(tc, codegen_kernels_of_one_file_share_the_workspace);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
