/*
 * Suite "cuda_cpu": the exact CUDA text NVRTC compiles, run on the CPU
 * (codegen/cuda_cpu.h) and checked against the reference.
 *
 * Sampled GPU states (fixed seeds) that use shared memory and barriers,
 * warp shuffles and vector loads pass as printed; each bug planted in the
 * printed text (a string replace on the source, never on the lowering) or
 * in the launch record must then be caught, as wrong answers or a reported
 * fault: block and thread binding swapped, a barrier removed, a shuffle
 * offset changed, a vector fetch misaligned, a launch dimension off by one.
 * The built-ins themselves are checked on small hand-written kernels.
 * Needs g++ only (no NVRTC, no GPU).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/cuda_cpu.h"
#include "codegen/verify.h"
#include "measure/hw_params.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

#include "kt_skip.h"

#include "states_harness.h"

#define ENTRY "k"
#define SEED 7

static kt_sched_params_t gpu_params(void)
{
    kt_hw_params_t hw;
    ck_assert_int_eq(kt_hw_params_preset("sm_80", &hw), 0);
    kt_sched_params_t p;
    ck_assert_msg(kt_sched_params_from_hw(&hw, &p) == 0, "%s", kt_err_msg());
    return p;
}

/* The first of up to 64 sampled states (fixed seed) whose CUDA text holds
 * every string of `need` (NULL-terminated) and whose launches satisfy
 * min_threads; its source and launches in *cu. */
static void find_state(const kt_dag_t *dag, const char *const *need, unsigned min_threads,
                       kt_codegen_cuda_t *cu)
{
    ck_assert_msg(dag != NULL, "%s", kt_err_msg());
    kt_sched_params_t p = gpu_params();
    kt_sched_state_t *st[KT_TEST_MAX_STATES];
    int n = kt_test_collect_states(dag, &p, SEED, st, KT_TEST_MAX_STATES);
    int found = -1;
    for (int i = 0; i < n; i++) {
        kt_codegen_cuda_t c;
        ck_assert_msg(kt_codegen_emit_cuda(dag, st[i], ENTRY, &c) == 0, "%s", kt_err_msg());
        int ok = found < 0;
        for (int k = 0; ok && need[k]; k++)
            ok = strstr(c.src, need[k]) != NULL;
        unsigned most = 0;
        for (int k = 0; k < c.n_launches; k++)
            most = c.launches[k].block[0] > most ? c.launches[k].block[0] : most;
        if (ok && most >= min_threads) {
            found = i;
            *cu = c;
        } else {
            kt_codegen_cuda_clear(&c);
        }
    }
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    ck_assert_msg(found >= 0, "no sampled state has the features (%s...)", need[0]);
}

/* src with the first occurrence of `from` (or every one, all != 0)
 * replaced by `to`; malloc'd. Fails the test when `from` is absent. */
static char *replace(const char *src, const char *from, const char *to, int all)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    const char *p = src, *q;
    int n = 0;
    while ((q = strstr(p, from)) && (all || n == 0)) {
        kt_sbuf_putn(&b, p, (size_t)(q - p));
        kt_sbuf_puts(&b, to);
        p = q + strlen(from);
        n++;
    }
    kt_sbuf_puts(&b, p);
    ck_assert_msg(n > 0, "'%s' is not in the source", from);
    char *r = kt_sbuf_take(&b);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* Check cu (with source src instead of cu->src when src is not NULL). */
static int check(kt_codegen_ref_t *ref, const kt_dag_t *dag, const kt_codegen_cuda_t *cu,
                 const char *src, double *err)
{
    kt_codegen_cuda_t c = *cu;
    if (src)
        c.src = (char *)src;
    return kt_cuda_cpu_check(ref, dag, &c, ENTRY, err);
}

/* A planted bug must be caught: wrong answers or a reported fault. */
static void must_catch(const char *what, kt_codegen_ref_t *ref, const kt_dag_t *dag,
                       const kt_codegen_cuda_t *cu, const char *src)
{
    double err = 0;
    int rc = check(ref, dag, cu, src, &err);
    const char *msg = kt_err_msg();
    ck_assert_msg(rc != 0, "%s: not caught (max error %g)\n%.3000s", what, err,
                  src ? src : cu->src);
    /* A crash is caught too: under ASan a stray write can land where the red
     * zones do not reach and kill the kernel instead of being reported. */
    ck_assert_msg(strstr(msg, "wrong answers") || strstr(msg, "CUDA fault") ||
                      strstr(msg, "kernel crashed with signal"),
                  "%s: failed for another reason: %s", what, msg);
    printf("cuda_cpu: %s caught: %s\n", what, msg);
}

static kt_codegen_ref_t *passes_as_printed(const kt_dag_t *dag, const kt_codegen_cuda_t *cu)
{
    kt_codegen_ref_t *ref = kt_codegen_ref_new(dag, SEED);
    ck_assert_msg(ref != NULL, "%s", kt_err_msg());
    double err = 1;
    ck_assert_msg(check(ref, dag, cu, NULL, &err) == 0, "%s\n%.3000s", kt_err_msg(), cu->src);
    ck_assert(err <= KT_CODEGEN_MAX_REL_ERR);
    return ref;
}

/* Swap every "(int)blockIdx.x" with "(int)threadIdx.x". */
static char *swap_bindings(const char *src)
{
    char *a = replace(src, "(int)blockIdx.x", "(int)KT_SWAP.x", 1);
    char *b = replace(a, "(int)threadIdx.x", "(int)blockIdx.x", 1);
    char *c = replace(b, "(int)KT_SWAP.x", "(int)threadIdx.x", 1);
    free(a);
    free(b);
    return c;
}

/* ---- the built-ins, on hand-written softmax kernels of one warp -------------------------- */

/* softmax over 32 values, one per lane: a butterfly max (xor), an
 * inclusive scan of the exponentials (up) whose last lane is broadcast
 * (idx). BODY is replaced by each variant's extra line. */
static const char *SOFTMAX_WARP =
    "extern \"C\" __global__ void __launch_bounds__(32) s_k0(const float *__restrict__ x,\n"
    "                                                       float *__restrict__ y)\n"
    "{\n"
    "    const int t = (int)threadIdx.x;\n"
    "    float v = x[t], m = v;\n"
    "    for (int o = 16; o > 0; o >>= 1)\n"
    "        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));\n"
    "    float e = expf(v - m), s = e;\n"
    "    for (int o = 1; o < 32; o <<= 1) {\n"
    "        float u = __shfl_up_sync(0xffffffffu, s, o);\n"
    "        if (t >= o)\n"
    "            s += u;\n"
    "    }\n"
    "    s = __shfl_sync(0xffffffffu, s, 31);\n"
    "    BODY\n"
    "    y[t] = e / s;\n"
    "}\n";

/* The same sum through shared memory and atomicAdd, between barriers. */
static const char *SOFTMAX_ATOMIC =
    "    __shared__ float kt_sum;\n"
    "    if (t == 0)\n"
    "        kt_sum = 0.0f;\n"
    "    __syncthreads();\n"
    "    atomicAdd(&kt_sum, e);\n"
    "    __syncthreads();\n"
    "    s = kt_sum;\n";

START_TEST(cuda_cpu_builtins_exchange_like_cuda_and_report_faults)
{
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){1, 32});
    ck_assert_ptr_nonnull(sm);
    kt_codegen_ref_t *ref = kt_codegen_ref_new(sm, SEED);
    ck_assert_msg(ref != NULL, "%s", kt_err_msg());
    kt_codegen_launch_t l = {.name = "s_k0", .grid = {1, 1, 1}, .block = {32, 1, 1}};
    kt_codegen_cuda_t cu = {.launches = &l, .n_launches = 1};
    static const struct {
        const char *body;   /* the BODY line */
        const char *fault;  /* NULL: passes; else the fault message's words */
    } cases[] = {
        {"", NULL},
        {NULL, NULL},   /* SOFTMAX_ATOMIC */
        {"if (t < 16) __syncthreads();", "exited"},   /* a barrier not every thread reaches */
        {"if (t < 16) s = __shfl_xor_sync(0xffffffffu, s, 1);", "deadlock"},
        {"if (t == 0) ((float *)x)[0] = 0.0f;", "wrote into input buffer 0"},
        {"if (t == 0) y[32] = 0.0f;", "wrote outside buffer 1"},
        {"if (t == 0) *(float2 *)&y[1] = *(const float2 *)&x[1];", "misaligned float2"},
        {"s = __shfl_sync(0xffffffffu, s, 31, 24);", "width 24"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        char *src = replace(SOFTMAX_WARP, "BODY", cases[i].body ? cases[i].body : SOFTMAX_ATOMIC,
                            0);
        double err = 1;
        int rc = check(ref, sm, &cu, src, &err);
        if (!cases[i].fault) {
            ck_assert_msg(rc == 0, "case %zu: %s", i, kt_err_msg());
            ck_assert(err <= KT_CODEGEN_MAX_REL_ERR);
        } else {
            ck_assert_msg(rc == KT_EIO && strstr(kt_err_msg(), "CUDA fault") &&
                              strstr(kt_err_msg(), cases[i].fault),
                          "case %zu (%s): %d %s", i, cases[i].fault, rc, kt_err_msg());
        }
        free(src);
    }
    /* a block of 33 threads exceeds the kernel's __launch_bounds__(32) */
    char *src = replace(SOFTMAX_WARP, "BODY", "", 0);
    l.block[0] = 33;
    ck_assert_int_ne(check(ref, sm, &cu, src, NULL), 0);
    ck_assert_msg(strstr(kt_err_msg(), "__launch_bounds__(32)"), "%s", kt_err_msg());
    free(src);
    kt_codegen_ref_free(ref);
    kt_dag_free(sm);
}
END_TEST

/* ---- shared memory and barriers ---------------------------------------------------- */

START_TEST(cuda_cpu_catches_swapped_bindings_and_missing_barriers_in_tiled_matmul)
{
    kt_dag_t *mm = kt_ops_matmul(32, 32, 96, 0, NULL, 0);
    kt_codegen_cuda_t cu;
    find_state(mm,
               (const char *const[]){"__shared__", "__syncthreads();", "(int)blockIdx.x",
                                     "(int)threadIdx.x", NULL},
               32, &cu);
    kt_codegen_ref_t *ref = passes_as_printed(mm, &cu);

    char *bad = swap_bindings(cu.src);
    must_catch("matmul: blockIdx.x and threadIdx.x swapped", ref, mm, &cu, bad);
    free(bad);
    /* the barrier after the shared tiles are loaded */
    bad = replace(cu.src, "__syncthreads();", "", 0);
    must_catch("matmul: first barrier removed", ref, mm, &cu, bad);
    free(bad);
    bad = replace(cu.src, "__syncthreads();", "", 1);
    must_catch("matmul: every barrier removed", ref, mm, &cu, bad);
    free(bad);

    kt_codegen_ref_free(ref);
    kt_codegen_cuda_clear(&cu);
    kt_dag_free(mm);
}
END_TEST

/* Compilers such as Ubuntu's define _FORTIFY_SOURCE by default, which turns
 * the runtime's fiber switches into checked longjmps that abort: the same
 * kernel with barriers must pass through such a compiler. */
START_TEST(cuda_cpu_runs_under_a_compiler_that_fortifies_by_default)
{
    char dir[] = "/tmp/kt-fortify-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cxx[64];
    snprintf(cxx, sizeof cxx, "%s/g++", dir);
    FILE *f = fopen(cxx, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nexec g++ -D_FORTIFY_SOURCE=2 \"$@\"\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(cxx, 0755), 0);
    ck_assert_int_eq(setenv("KT_CXX", cxx, 1), 0);

    kt_dag_t *mm = kt_ops_matmul(32, 32, 96, 0, NULL, 0);
    kt_codegen_cuda_t cu;
    find_state(mm, (const char *const[]){"__syncthreads();", NULL}, 32, &cu);
    kt_codegen_ref_free(passes_as_printed(mm, &cu));
    kt_codegen_cuda_clear(&cu);
    kt_dag_free(mm);
    unlink(cxx);
    rmdir(dir);
}
END_TEST

/* ---- warp shuffles ----------------------------------------------------------------- */

START_TEST(cuda_cpu_catches_shuffle_and_barrier_bugs_in_softmax_and_layer_norm)
{
    static const char *const shfl = "__shfl_down_sync(0xffffffffu, kt_v, kt_off)";
    struct {
        const char *name;
        kt_dag_t *dag;
    } cases[] = {
        {"softmax", kt_ops_softmax(2, (int64_t[]){6, 200})},
        {"layer norm", kt_ops_layer_norm(2, (int64_t[]){5, 160}, 1)},
    };
    for (size_t c = 0; c < KT_ARRAY_LEN(cases); c++) {
        kt_dag_t *dag = cases[c].dag;
        kt_codegen_cuda_t cu;
        /* several warps: shuffles, then one value per warp through shared memory */
        find_state(dag, (const char *const[]){shfl, "__syncthreads();", NULL}, 64, &cu);
        kt_codegen_ref_t *ref = passes_as_printed(dag, &cu);
        char what[128];

        char *bad = replace(cu.src, shfl, "__shfl_down_sync(0xffffffffu, kt_v, kt_off + 1)", 1);
        snprintf(what, sizeof what, "%s: shuffle offset + 1", cases[c].name);
        must_catch(what, ref, dag, &cu, bad);
        free(bad);
        bad = replace(cu.src, shfl, "__shfl_down_sync(0xffffffffu, kt_v, kt_off >> 1)", 1);
        snprintf(what, sizeof what, "%s: shuffle offset halved", cases[c].name);
        must_catch(what, ref, dag, &cu, bad);
        free(bad);
        /* Softmax is left out here: its barriers may all sit in the max
         * reduction, and softmax(x - m) equals softmax(x) for any m, so a
         * wrong max gives right answers that no check can tell apart. */
        if (strcmp(cases[c].name, "softmax") != 0) {
            bad = replace(cu.src, "__syncthreads();", "", 1);
            snprintf(what, sizeof what, "%s: barriers removed", cases[c].name);
            must_catch(what, ref, dag, &cu, bad);
            free(bad);
        }
        bad = swap_bindings(cu.src);
        snprintf(what, sizeof what, "%s: blockIdx.x and threadIdx.x swapped", cases[c].name);
        must_catch(what, ref, dag, &cu, bad);
        free(bad);
        /* a mask that leaves out the upper half-warp: CUDA's undefined read */
        bad = replace(cu.src, "0xffffffffu", "0x0000ffffu", 1);
        snprintf(what, sizeof what, "%s: shuffle mask of half a warp", cases[c].name);
        must_catch(what, ref, dag, &cu, bad);
        free(bad);

        kt_codegen_ref_free(ref);
        kt_codegen_cuda_clear(&cu);
        kt_dag_free(dag);
    }
}
END_TEST

/* ---- vector loads ------------------------------------------------------------------ */

START_TEST(cuda_cpu_reports_misaligned_vector_fetch)
{
    kt_dag_t *mm = kt_ops_matmul(32, 32, 64, 0, NULL, 0);
    kt_codegen_cuda_t cu;
    find_state(mm, (const char *const[]){"*(const float4 *)&", NULL}, 1, &cu);
    kt_codegen_ref_t *ref = passes_as_printed(mm, &cu);
    /* the source address of the first vector fetch one float further */
    const char *at = strstr(cu.src, "*(const float4 *)&");
    const char *br = strchr(at, '[');
    ck_assert_ptr_nonnull(br);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_putn(&b, cu.src, (size_t)(br + 1 - cu.src));
    kt_sbuf_puts(&b, "1 + ");
    kt_sbuf_puts(&b, br + 1);
    char *bad = kt_sbuf_take(&b);
    double err = 0;
    ck_assert_int_ne(check(ref, mm, &cu, bad, &err), 0);
    ck_assert_msg(strstr(kt_err_msg(), "CUDA fault") && strstr(kt_err_msg(), "misaligned float4"),
                  "%s", kt_err_msg());
    free(bad);
    /* the destination (shared memory) off by one float */
    bad = replace(cu.src, "*(float4 *)&", "*(float4 *)(1 + &", 0);
    char *bad2 = replace(bad, "] = *(const float4 *)&", "]) = *(const float4 *)&", 0);
    ck_assert_int_ne(check(ref, mm, &cu, bad2, &err), 0);
    ck_assert_msg(strstr(kt_err_msg(), "misaligned float4"), "%s", kt_err_msg());
    free(bad);
    free(bad2);
    kt_codegen_ref_free(ref);
    kt_codegen_cuda_clear(&cu);
    kt_dag_free(mm);
}
END_TEST

/* ---- launches ---------------------------------------------------------------------- */

START_TEST(cuda_cpu_catches_launch_dimensions_off_by_one)
{
    struct {
        const char *name;
        kt_dag_t *dag;
        const char *need;
    } cases[] = {
        {"matmul", kt_ops_matmul(32, 32, 96, 0, NULL, 0), "__syncthreads();"},
        {"softmax", kt_ops_softmax(2, (int64_t[]){6, 200}), "__shfl_down_sync"},
    };
    for (size_t c = 0; c < KT_ARRAY_LEN(cases); c++) {
        kt_dag_t *dag = cases[c].dag;
        kt_codegen_cuda_t cu;
        find_state(dag, (const char *const[]){cases[c].need, NULL}, 64, &cu);
        kt_codegen_ref_t *ref = passes_as_printed(dag, &cu);
        int k = 0;   /* the launch with the largest block */
        for (int i = 1; i < cu.n_launches; i++)
            if (cu.launches[i].block[0] > cu.launches[k].block[0])
                k = i;
        kt_codegen_launch_t keep = cu.launches[k];
        char what[160];
        for (int m = 0; m < 3; m++) {
            const char *how = m == 0 ? "block - 1" : m == 1 ? "block + 1" : "grid - 1";
            cu.launches[k] = keep;
            if (m == 0)
                cu.launches[k].block[0]--;
            else if (m == 1)
                cu.launches[k].block[0]++;
            else if (keep.grid[0] > 1)
                cu.launches[k].grid[0]--;
            else
                continue;
            snprintf(what, sizeof what, "%s: launch %s %s", cases[c].name, cu.launches[k].name,
                     how);
            must_catch(what, ref, dag, &cu, NULL);
            if (m == 1)
                ck_assert_msg(strstr(kt_err_msg(), "threads exceeds"), "%s", kt_err_msg());
        }
        cu.launches[k] = keep;
        kt_codegen_ref_free(ref);
        kt_codegen_cuda_clear(&cu);
        kt_dag_free(dag);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_cpu");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, cuda_cpu_builtins_exchange_like_cuda_and_report_faults);
    tcase_add_test(tc, cuda_cpu_catches_swapped_bindings_and_missing_barriers_in_tiled_matmul);
    tcase_add_test(tc, cuda_cpu_runs_under_a_compiler_that_fortifies_by_default);
    tcase_add_test(tc, cuda_cpu_catches_shuffle_and_barrier_bugs_in_softmax_and_layer_norm);
    tcase_add_test(tc, cuda_cpu_reports_misaligned_vector_fetch);
    tcase_add_test(tc, cuda_cpu_catches_launch_dimensions_off_by_one);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
