/*
 * Shared by the suites that compile many schedule states and check them
 * (codegen, gpu, feature, sched, cuda_cpu): conv2d parameters, a varied set
 * of random states of one DAG, and the emit / compile / compare-with-the-
 * reference harnesses (C kernels, and CUDA text run on the CPU). Header-only (static inline) so each suite includes what it uses.
 * Ownership: states from kt_test_collect_states belong to the caller.
 */
#ifndef KT_TESTS_STATES_HARNESS_H
#define KT_TESTS_STATES_HARNESS_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/cuda_cpu.h"
#include "codegen/lower.h"
#include "codegen/verify.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/sbuf.h"
#include "util/util.h"

#define KT_TEST_MAX_STATES 64

/* conv2d 8x8x16 -> 32, 3x3 + bias + relu with the padding inlined and a
 * register tile of 2 pixels x 32 channels (rows YY, columns XX: their
 * four-level splits as JSON); codegen and feature suites. */
#define KT_TEST_PAD_TILE_STATE(YY, XX)                                                          \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"kind\":\"inline\",\"name\":"      \
    "\"pad_temp\"},{\"kind\":\"input\",\"name\":\"weight\"},{\"ann\":[0,1,0],\"fuse\":"          \
    "\"T_relu\",\"kind\":\"tiled\",\"level\":2,\"name\":\"conv2d_nhwc\",\"tile\":[[1,1,1,1],"   \
    YY "," XX ",[1,1,1,32],[1,3],[1,3],[2,8]]},{\"kind\":\"input\",\"name\":\"bias\"},"        \
    "{\"kind\":\"inline\",\"name\":\"T_bias_add\"},{\"ann\":[1,1,0],\"kind\":\"fused\","       \
    "\"name\":\"T_relu\"}],\"version\":1}"

/* The index of st's (one) multi-level tiled stage. */
static inline int kt_test_tiled_stage(const kt_sched_state_t *st)
{
    int s = -1;
    for (int i = 0; i < st->nstages; i++)
        if (st->stages[i].kind == KT_SK_TILED)
            s = i;
    ck_assert_int_ge(s, 0);
    return s;
}

/* json (a conv2d state) with its inlined padding stage computed at root
 * instead; malloc'd. */
static inline char *kt_test_materialize_pad(const char *json)
{
    static const char inl[] = "{\"kind\":\"inline\",\"name\":\"pad_temp\"}";
    static const char root[] = "{\"ann\":[0,0,0],\"kind\":\"root\",\"name\":\"pad_temp\"}";
    const char *at = strstr(json, inl);
    ck_assert_ptr_nonnull(at);
    size_t head = (size_t)(at - json), n = strlen(json) - strlen(inl) + strlen(root) + 1;
    char *out = malloc(n);
    ck_assert_ptr_nonnull(out);
    snprintf(out, n, "%.*s%s%s", (int)head, json, root, at + strlen(inl));
    return out;
}

static inline kt_conv2d_params_t kt_test_conv_p(int stride, int pad, int dil)
{
    kt_conv2d_params_t c = kt_ops_conv2d_default();
    c.stride[0] = c.stride[1] = stride;
    for (int i = 0; i < 4; i++)
        c.pad[i] = pad;
    c.dilation[0] = c.dilation[1] = dil;
    return c;
}

/* conv2d HWxHWx16 -> 32, 3x3, padding 1, this stride, + bias + relu: the
 * DAG of KT_TEST_PAD_TILE_STATE; the caller frees it. */
static inline kt_dag_t *kt_test_pad_tile_conv(int hw, int stride)
{
    kt_conv2d_params_t cp = kt_test_conv_p(stride, 1, 1);
    static const kt_epilogue_t ep[2] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, hw, hw, 16, 32, 3, 3, &cp, ep, 2);
    ck_assert_msg(cv != NULL, "%s", kt_err_msg());
    return cv;
}

/* Up to n (<= KT_TEST_MAX_STATES) distinct valid states: sampled
 * round-robin from the sketches, every third one mutated a few times more.
 * A small space may repeat. */
static inline int kt_test_collect_states(const kt_dag_t *dag, const kt_sched_params_t *p,
                                         uint64_t seed, kt_sched_state_t **out, int n)
{
    ck_assert_int_le(n, KT_TEST_MAX_STATES);
    kt_sched_state_t **sk;
    int nsk;
    ck_assert_msg(kt_sched_sketches(dag, p, &sk, &nsk) == 0, "%s", kt_err_msg());
    ck_assert_int_gt(nsk, 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    uint64_t hashes[KT_TEST_MAX_STATES];
    int got = 0;
    for (int t = 0; got < n && t < 20 * n; t++) {
        kt_sched_state_t *st = kt_sched_sample(dag, p, sk[t % nsk], &rng);
        ck_assert_msg(st != NULL, "%s", kt_err_msg());
        if (t % 3 == 2) {
            for (int m = 0; m < 4; m++) {
                kt_sched_state_t *mu = NULL;
                if (kt_sched_mutate(dag, p, st, -1, &rng, &mu) == 1) {
                    kt_sched_state_free(st);
                    st = mu;
                }
            }
        }
        uint64_t h = kt_sched_state_hash(st, dag);
        int dup = 0;
        for (int i = 0; i < got && !dup; i++)
            dup = hashes[i] == h;
        if (dup && t < 10 * n) {
            kt_sched_state_free(st);
            continue;
        }
        hashes[got] = h;
        out[got++] = st;
    }
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    return got;
}

/* Appends the function of state st named entry to b (kt_codegen_emit_c_into
 * or kt_codegen_emit_cuda_emu_into). */
typedef int (*kt_test_emit_fn)(const kt_dag_t *dag, const kt_sched_state_t *st,
                               const char *entry, kt_sbuf_t *b);

/* Emit n states (entries <prefix>_<i>) into two C files, half each, compile
 * both at once (one in a child process: the machine has 2 cores) with
 * cflags (NULL: the tuning flags), run each against the reference kernel
 * and fail the test naming the first state that disagrees. */
static inline void kt_test_check_states(const char *what, const kt_dag_t *dag,
                                        kt_sched_state_t **st, int n, uint64_t seed,
                                        const char *prefix, kt_test_emit_fn emit,
                                        const char *cflags)
{
    char dir[] = "/tmp/kt_test_states_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int half = 0; half < 2; half++) {
        kt_sbuf_t src;
        kt_sbuf_init(&src);
        kt_codegen_preamble_c(&src);
        for (int i = half; i < n; i += 2) {
            char entry[32];
            snprintf(entry, sizeof(entry), "%s_%d", prefix, i);
            int rc = emit(dag, st[i], entry, &src);
            ck_assert_msg(rc == 0, "%s: emit %d: %s", what, i, kt_err_msg());
        }
        char path[256];
        snprintf(path, sizeof(path), "%s/k%d.c", dir, half);
        ck_assert_int_eq(kt_file_write(path, src.data, src.len), 0);
        kt_sbuf_free(&src);
    }
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    int half = pid == 0 ? 1 : 0;
    char path[256], so[256];
    snprintf(path, sizeof(path), "%s/k%d.c", dir, half);
    snprintf(so, sizeof(so), "%s/k%d.so", dir, half);
    char *text = kt_file_read(path, NULL);
    char *log = NULL;
    int rc = text ? kt_codegen_compile_flags(text, so, cflags, &log) : -1;
    free(text);
    if (pid == 0) {
        if (rc)
            fprintf(stderr, "%s: compile of half 1: %s\n%s\n", what, kt_err_msg(),
                    log ? log : "");
        _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(rc == 0, "%s: compile: %s\n%s", what, kt_err_msg(), log ? log : "");
    free(log);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: compile of half 1 failed",
                  what);

    kt_codegen_ref_t *ref = kt_codegen_ref_new(dag, seed);
    ck_assert_msg(ref != NULL, "%s: reference: %s", what, kt_err_msg());
    int bad = -1;
    char msg[512] = "";
    double bad_err = 0;
    for (int i = 0; i < n && bad < 0; i++) {
        char entry[32];
        snprintf(entry, sizeof(entry), "%s_%d", prefix, i);
        snprintf(so, sizeof(so), "%s/k%d.so", dir, i % 2);
        if (kt_codegen_ref_check_so(ref, so, entry, &bad_err) != 0) {
            bad = i;
            snprintf(msg, sizeof(msg), "%s", kt_err_msg());
        }
    }
    kt_codegen_ref_free(ref);
    for (half = 0; half < 2; half++) {
        snprintf(path, sizeof(path), "%s/k%d.c", dir, half);
        unlink(path);
        snprintf(path, sizeof(path), "%s/k%d.so", dir, half);
        unlink(path);
    }
    rmdir(dir);
    if (bad >= 0) {
        char *j = kt_sched_state_to_json(st[bad], dag);
        char *pr = kt_sched_state_print(dag, st[bad]);
        ck_abort_msg("%s: state %d fails (%s, err %g)\n%s\n%s", what, bad, msg, bad_err, j, pr);
    }
}


/* The CUDA text of n GPU states (entries <prefix>_<i>) run on the CPU
 * (codegen/cuda_cpu.h): two programs, half the states each, compiled at
 * once with g++ (one in a child process), each state checked against the
 * reference; fails the test naming the first state that disagrees. */
static inline void kt_test_check_cuda_cpu_states(const char *what, const kt_dag_t *dag,
                                                 kt_sched_state_t **st, int n, uint64_t seed,
                                                 const char *prefix)
{
    char dir[] = "/tmp/kt_test_cucpu_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *src[2], *drv[2];
    for (int half = 0; half < 2; half++) {
        kt_sbuf_t cu, dr;
        kt_sbuf_init(&cu);
        kt_sbuf_init(&dr);
        kt_codegen_preamble_cuda(&cu);
        kt_sbuf_puts(&dr, kt_cuda_cpu_runtime());
        for (int i = half; i < n; i += 2) {
            char entry[32];
            snprintf(entry, sizeof(entry), "%s_%d", prefix, i);
            kt_codegen_cuda_t meta;
            int rc = kt_codegen_emit_cuda_into(dag, st[i], entry, &cu, &meta);
            ck_assert_msg(rc == 0, "%s: emit %d: %s", what, i, kt_err_msg());
            rc = kt_cuda_cpu_driver_into(dag, cu.data, &meta, entry, &dr);
            ck_assert_msg(rc == 0, "%s: driver %d: %s", what, i, kt_err_msg());
            kt_codegen_cuda_clear(&meta);
        }
        src[half] = kt_sbuf_take(&cu);
        drv[half] = kt_sbuf_take(&dr);
        ck_assert(src[half] && drv[half]);
    }
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    int half = pid == 0 ? 1 : 0;
    char so[256];
    snprintf(so, sizeof(so), "%s/k%d.so", dir, half);
    char *log = NULL;
    int rc = kt_cuda_cpu_compile(src[half], drv[half], so, &log);
    if (pid == 0) {
        if (rc)
            fprintf(stderr, "%s: compile of half 1: %s\n%s\n", what, kt_err_msg(),
                    log ? log : "");
        _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(rc == 0, "%s: compile: %s\n%.4000s", what, kt_err_msg(), log ? log : "");
    free(log);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: compile of half 1 failed",
                  what);
    for (half = 0; half < 2; half++) {
        free(src[half]);
        free(drv[half]);
    }

    kt_codegen_ref_t *ref = kt_codegen_ref_new(dag, seed);
    ck_assert_msg(ref != NULL, "%s: reference: %s", what, kt_err_msg());
    int bad = -1;
    char msg[768] = "";
    double bad_err = 0;
    for (int i = 0; i < n && bad < 0; i++) {
        char entry[32];
        snprintf(entry, sizeof(entry), "%s_%d", prefix, i);
        snprintf(so, sizeof(so), "%s/k%d.so", dir, i % 2);
        if (kt_codegen_ref_check_so(ref, so, entry, &bad_err) != 0) {
            bad = i;
            snprintf(msg, sizeof(msg), "%s", kt_err_msg());
        }
    }
    kt_codegen_ref_free(ref);
    for (half = 0; half < 2; half++) {
        snprintf(so, sizeof(so), "%s/k%d.so", dir, half);
        unlink(so);
    }
    rmdir(dir);
    if (bad >= 0) {
        char *j = kt_sched_state_to_json(st[bad], dag);
        char *pr = kt_sched_state_print(dag, st[bad]);
        ck_abort_msg("%s: state %d fails on the CPU (%s, err %g)\n%.1500s\n%.1500s", what, bad,
                     msg, bad_err, j, pr);
    }
}

/* The epilogues and window operators networks need beyond the basic ones,
 * one shape each, as {name, dag} items for a family list (codegen and gpu
 * check the same set). s1p1 and s2p1 are conv params with stride 1 / 2 and
 * padding 1. */
static const kt_epi_t EPI_MUL_BIAS_CLIP[] = {
    {.op = KT_EPI_MULTIPLY}, {.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_CLIP, .lo = -0.25, .hi = 0.5}};
static const kt_epi_t EPI_SIG_SCALE_TANH[] = {
    {.op = KT_EPI_SIGMOID}, {.op = KT_EPI_MULTIPLY_SCALAR}, {.op = KT_EPI_TANH}};
static const kt_epi_t EPI_BIAS_RELU6[] = {{.op = KT_EPI_BIAS_ADD},
                                          {.op = KT_EPI_CLIP, .lo = 0, .hi = 6}};
static const kt_epi_t EPI_X_BIAS_RELU[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_RELU}};
/* MobileNet-V3's: hardswish after a convolution, hardsigmoid (PyTorch's
 * alpha 1/6 and beta 1/2) ending its squeeze-excitation. */
static const kt_epi_t EPI_BIAS_HARDSWISH[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_HARDSWISH}};
static const kt_epi_t EPI_BIAS_HARDSIGMOID[] = {
    {.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_HARDSIGMOID, .lo = 1.0 / 6.0, .hi = 0.5}};
/* EfficientNet's: silu after a depthwise convolution. */
static const kt_epi_t EPI_BIAS_SILU[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_SILU}};
#define KT_TEST_NETWORK_OP_DAGS(s1p1, s2p1)                                                   \
    {"dense+multiply+bias+clip", kt_ops_dense_ex(5, 12, 16, EPI_MUL_BIAS_CLIP, 3)},            \
    {"conv+sigmoid+scale+tanh", kt_ops_conv2d(KT_LAYOUT_NHWC, 1, 6, 6, 4, 4, 3, 3, 0, &(s1p1), \
                                              EPI_SIG_SCALE_TANH, 3)},                         \
    {"group conv nchw g2 s2 +bias+relu", kt_ops_conv2d(KT_LAYOUT_NCHW, 1, 9, 7, 4, 6, 3, 3, 2, \
                                                       &(s2p1), EPI_X_BIAS_RELU, 2)},          \
    {"depthwise nchw x2 +bias+relu6", kt_ops_depthwise_conv2d(KT_LAYOUT_NCHW, 1, 8, 8, 4, 2, 3, \
                                                              3, &(s1p1), EPI_BIAS_RELU6, 2)}, \
    {"max pool nchw +bias+relu6", kt_ops_pool2d(KT_LAYOUT_NCHW, KT_POOL_MAX, 1, 9, 9, 4, 3, 3, \
                                                &(s2p1), EPI_BIAS_RELU6, 2)},                  \
    {"global avg pool nchw +relu", kt_ops_global_avg_pool(KT_LAYOUT_NCHW, 2, 5, 7, 6,         \
                                                          EPI_X_BIAS_RELU + 1, 1)},            \
    {"depthwise nhwc +bias+hardswish", kt_ops_depthwise_conv2d(KT_LAYOUT_NHWC, 1, 8, 8, 4, 1, \
                                                               3, 3, &(s1p1),                  \
                                                               EPI_BIAS_HARDSWISH, 2)},        \
    {"conv 1x1 +bias+hardsigmoid", kt_ops_conv2d(KT_LAYOUT_NHWC, 1, 1, 1, 8, 6, 1, 1, 0,      \
                                                 NULL, EPI_BIAS_HARDSIGMOID, 2)},              \
    {"depthwise nhwc s2 +bias+silu", kt_ops_depthwise_conv2d(KT_LAYOUT_NHWC, 1, 9, 9, 6, 1,   \
                                                             3, 3, &(s2p1), EPI_BIAS_SILU, 2)}

#endif
