/* Suite "feature": per-store program features. Hand-checked values on a
 * known matmul tiling; for random states of every operator family: one row
 * per stored buffer, finite values, op counts that add up to the DAG's
 * flops, determinism; the batch API; bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lower.h"
#include "feature/feature.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"

#include "states_harness.h"

#define FAMILY_STATES 20
#define MAX_STATES 32

static kt_sched_params_t test_params(void)
{
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 8;   /* fixed: the rfactor rule depends on it */
    return p;
}

static int fidx(const char *name)
{
    for (int i = 0; i < KT_FEATURE_COUNT; i++)
        if (strcmp(kt_feature_name(i), name) == 0)
            return i;
    ck_abort_msg("no feature named %s", name);
    return -1;
}

/* value `what` of described buffer b in row v */
static float bufval(const float *v, int b, const char *what)
{
    char nm[64];
    snprintf(nm, sizeof(nm), "b%d.%s", b, what);
    return v[fidx(nm)];
}

/* log2(1 + x) back to x */
static double unlog(float v)
{
    return exp2((double)v) - 1.0;
}

static void free_states(kt_sched_state_t **st, int n)
{
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
}

/* Sum over rows of the float ops a flop counter counts (+ - * / min max, math calls). */
static double float_ops(const float *rows, uint32_t nrows)
{
    static const char *const names[] = {"float_addsub", "float_mul", "float_div",
                                        "float_maxmin", "float_exp", "float_math"};
    double sum = 0;
    for (uint32_t r = 0; r < nrows; r++)
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            sum += unlog(rows[(size_t)r * KT_FEATURE_COUNT + fidx(names[i])]);
    return sum;
}

static int has_rfactor(const kt_sched_state_t *st)
{
    for (int s = 0; s < st->nstages; s++)
        if (st->stages[s].kind == KT_SK_RFACTOR)
            return 1;
    return 0;
}

static int has_xreduce(const kt_sched_state_t *st)
{
    for (int s = 0; s < st->nstages; s++)
        if (st->stages[s].kind == KT_SK_XREDUCE)
            return 1;
    return 0;
}

/* The GPU features: 0 in CPU rows; in GPU rows those of a launch of the
 * state (threads, blocks, shared memory as its kt_sched_gpu_kernels). */
static void check_gpu_values(const char *what, int i, const kt_dag_t *dag,
                             const kt_sched_state_t *st, const float *v)
{
    int first = fidx("gpu.blockIdx.x_len");
    if (st->target != KT_SCHED_TARGET_CUDA) {
        for (int f = first; f < KT_FEATURE_COUNT; f++)
            ck_assert_msg(v[f] == 0, "%s state %d: CPU row has %s = %g", what, i,
                          kt_feature_name(f), v[f]);
        return;
    }
    kt_sched_gpu_kernel_t ks[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, ks), match = 0;
    ck_assert_int_gt(nk, 0);
    for (int k = 0; k < nk && !match; k++)
        match = fabs(unlog(v[fidx("gpu.threads_per_block")]) - (double)ks[k].threads) < 1e-2 &&
                fabs(unlog(v[fidx("gpu.blocks")]) - (double)ks[k].grid) < 1e-2 * ks[k].grid &&
                fabs(unlog(v[fidx("gpu.smem_bytes")]) - (double)ks[k].smem_bytes) <
                    1e-3 * ks[k].smem_bytes + 1e-2 &&
                fabs(unlog(v[fidx("gpu.vthread_len")]) - (double)ks[k].vthreads) < 1e-2;
    ck_assert_msg(match, "%s state %d: the row's launch is none of the state's", what, i);
    ck_assert_float_eq(v[fidx("gpu.blockIdx.x_len")], v[fidx("gpu.blocks")]);
    ck_assert_float_eq(v[fidx("gpu.threadIdx.x_len")], v[fidx("gpu.threads_per_block")]);
    ck_assert_float_eq(v[fidx("gpu.blockIdx.y_len")], 0);
    ck_assert_float_eq(v[fidx("gpu.threadIdx.z_len")], 0);
    float wu = v[fidx("gpu.warp_util")];
    ck_assert_msg(wu > 0 && wu <= 1, "%s state %d: warp_util %g", what, i, wu);
    float vec = v[fidx("gpu.fetch_vec")];
    ck_assert(vec == 0 || vec == 1 || vec == 2 || vec == 4);
    ck_assert(v[fidx("parallel.num")] == 0);   /* GPU loops bind blocks and threads */
}

/* Every check that holds for any state of any DAG, CPU or GPU (p). */
static void check_family_p(const char *what, kt_dag_t *dag, uint64_t seed,
                           const kt_sched_params_t *pp)
{
    ck_assert_msg(dag != NULL, "%s: %s", what, kt_err_msg());
    kt_sched_params_t p = *pp;
    kt_sched_state_t *st[MAX_STATES];
    int n = kt_test_collect_states(dag, &p, seed, st, FAMILY_STATES);
    ck_assert_int_ge(n, FAMILY_STATES / 2);
    double flops = kt_dag_flop_count(dag);
    for (int i = 0; i < n; i++) {
        kt_lower_t *L = kt_lower_ex(dag, st[i], 1);   /* as kt_feature_extract lowers */
        ck_assert_msg(L != NULL, "%s: %s", what, kt_err_msg());
        float *rows = NULL;
        uint32_t nrows = 0;
        int *rb = NULL;
        int rc = kt_feature_extract_lower(dag, st[i], L, &rows, &nrows, &rb);
        ck_assert_msg(rc == 0, "%s state %d: %s", what, i, kt_err_msg());
        /* one row per distinct stored buffer, each named once */
        int stored = 0;
        for (int k = 0; k < L->nstmts; k++) {
            int dup = 0;
            for (int j = 0; j < k && !dup; j++)
                dup = L->stmts[j].dst == L->stmts[k].dst;
            stored += !dup;
        }
        ck_assert_msg((int)nrows == stored, "%s state %d: %u rows, %d stored buffers", what, i,
                      nrows, stored);
        for (uint32_t r = 0; r < nrows; r++) {
            ck_assert_int_ge(rb[r], 0);
            ck_assert_int_lt(rb[r], L->nbufs);
            for (uint32_t q = 0; q < r; q++)
                ck_assert_int_ne(rb[q], rb[r]);
        }
        for (size_t v = 0; v < (size_t)nrows * KT_FEATURE_COUNT; v++)
            ck_assert_msg(isfinite(rows[v]) && rows[v] >= 0, "%s state %d: %s = %g", what, i,
                          kt_feature_name((int)(v % KT_FEATURE_COUNT)), rows[v]);
        for (uint32_t r = 0; r < nrows; r++) {
            const float *v = rows + (size_t)r * KT_FEATURE_COUNT;
            /* exactly one position per annotation kind */
            static const char *const pos[] = {"vec.pos_", "unroll.pos_", "parallel.pos_"};
            for (int a = 0; a < 3; a++) {
                float sum = 0;
                for (int f = 0; f < KT_FEATURE_COUNT; f++)
                    if (strncmp(kt_feature_name(f), pos[a], strlen(pos[a])) == 0)
                        sum += v[f];
                ck_assert_msg(sum == 1, "%s state %d row %u: %s* sums to %g", what, i, r, pos[a],
                              sum);
            }
            /* a described buffer has one access type and one reuse type; the
             * distinct bytes and lines never exceed the accessed ones */
            for (int b = 0; b < KT_FEATURE_MAX_BUFS; b++) {
#define BV(x) bufval(v, b, x)
                float acc = BV("acc_read") + BV("acc_write") + BV("acc_rw");
                float reuse = BV("reuse_loop_multiple_read") + BV("reuse_serial_multiple_rw") +
                              BV("reuse_none");
                ck_assert_msg(acc == reuse && (acc == 1 || (acc == 0 && BV("bytes") == 0)),
                              "%s state %d row %u buffer %d: acc %g reuse %g", what, i, r, b, acc,
                              reuse);
                ck_assert(BV("unique_bytes") <= BV("bytes"));
                ck_assert(BV("unique_lines") <= BV("lines"));
#undef BV
            }
            check_gpu_values(what, i, dag, st[i], v);
            /* the store itself is always described */
            ck_assert(v[fidx("b0.acc_write")] + v[fidx("b0.acc_rw")] +
                          v[fidx("b1.acc_write")] + v[fidx("b1.acc_rw")] + v[fidx("b2.acc_write")] +
                          v[fidx("b2.acc_rw")] + v[fidx("b3.acc_write")] + v[fidx("b3.acc_rw")] +
                          v[fidx("b4.acc_write")] + v[fidx("b4.acc_rw")] >= 1);
        }
        /* the float work of all rows is the DAG's (an rfactor adds its
         * final combine; an inlined stage read twice is computed twice) */
        double ops = float_ops(rows, nrows);
        ck_assert_msg(ops >= flops * 0.999, "%s state %d: %g float ops < %g flops", what, i, ops,
                      flops);
        /* exact unless a final combine (rfactor, cross-thread reduction)
         * or an inlined stage computed twice adds work */
        if (!has_rfactor(st[i]) && !has_xreduce(st[i]) && strstr(what, "gelu") == NULL)
            ck_assert_msg(fabs(ops - flops) <= flops * 1e-3, "%s state %d: %g float ops, %g flops",
                          what, i, ops, flops);
        /* deterministic: the same state again gives identical rows */
        float *again = NULL;
        uint32_t n2 = 0;
        ck_assert_int_eq(kt_feature_extract(dag, st[i], &again, &n2), 0);
        ck_assert_uint_eq(n2, nrows);
        ck_assert_int_eq(memcmp(again, rows, sizeof(float) * KT_FEATURE_COUNT * nrows), 0);
        free(again);
        free(rows);
        free(rb);
        kt_lower_free(L);
    }
    free_states(st, n);
    kt_dag_free(dag);
}

static void check_family(const char *what, kt_dag_t *dag, uint64_t seed)
{
    kt_sched_params_t p = test_params();
    check_family_p(what, dag, seed, &p);
}

static void check_gpu_family(const char *what, kt_dag_t *dag, uint64_t seed)
{
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    check_family_p(what, dag, seed, &p);
}

/* ---- the feature table ------------------------------------------------------ */

START_TEST(feature_table_names_every_value_once)
{
    for (int i = 0; i < KT_FEATURE_COUNT; i++) {
        const char *n = kt_feature_name(i), *d = kt_feature_doc(i);
        ck_assert_ptr_nonnull(n);
        ck_assert_ptr_nonnull(d);
        ck_assert_int_gt((int)strlen(n), 0);
        ck_assert_int_gt((int)strlen(d), 10);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(n, kt_feature_name(j)) != 0, "feature %d and %d: %s", i, j, n);
    }
    ck_assert_ptr_null(kt_feature_name(-1));
    ck_assert_ptr_null(kt_feature_name(KT_FEATURE_COUNT));
    ck_assert_ptr_null(kt_feature_doc(KT_FEATURE_COUNT));
    ck_assert_str_eq(kt_feature_name(0), "float_mad");
    ck_assert_str_eq(kt_feature_name(155), "auto_unroll_max_step");   /* Ansor's set ends here */
    ck_assert_str_eq(kt_feature_name(163), "reduce.inner_extent");   /* CPU features end here */
    ck_assert_str_eq(kt_feature_name(KT_FEATURE_COUNT - 1), "gpu.barriers");
}
END_TEST

/* ---- a hand-checked state ----------------------------------------------------- */

/* matmul 64x64x64, i split 4x2x2x4, j 2x2x1x16, k 16x4; i.0@j.0 parallel
 * (8 threads), j.3 vectorized (16). Lowered: B.layout (the copy of B in
 * the nest's order), C (init, register-tile copy-back) and C.reg (load,
 * update over k). */
static const char *MM_STATE =
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
    "{\"ann\":[2,1,0],\"kind\":\"tiled\",\"name\":\"C\","
    "\"tile\":[[4,2,2,4],[2,2,1,16],[16,4]]}],\"version\":1}";

START_TEST(feature_matmul_known_tiling_values)
{
    kt_dag_t *dag = kt_ops_matmul(64, 64, 64, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st = kt_sched_state_from_json(MM_STATE, dag, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_lower_t *L = kt_lower(dag, st);
    ck_assert_ptr_nonnull(L);
    float *rows;
    uint32_t nrows;
    int *rb;
    ck_assert_int_eq(kt_feature_extract_lower(dag, st, L, &rows, &nrows, &rb), 0);
    ck_assert_uint_eq(nrows, 3);
    ck_assert_str_eq(L->bufs[rb[0]].label, "B.layout");
    ck_assert_str_eq(L->bufs[rb[1]].label, "C");
    ck_assert_str_eq(L->bufs[rb[2]].label, "C.reg");
    const float *lay = rows, *c = rows + KT_FEATURE_COUNT, *reg = rows + 2 * KT_FEATURE_COUNT;
    const double n3 = 64.0 * 64 * 64;

    /* B copied once into the nest's order (j.0 j.1 k.0 k.1 j.3), its outer
     * loop shared by the threads; both sides walk j.3 contiguously */
    ck_assert_double_eq_tol(unlog(lay[fidx("outer_prod")]), 64.0 * 64, 1e-2);
    ck_assert_float_eq(lay[fidx("num_loops")], 5);
    ck_assert_double_eq_tol(unlog(lay[fidx("alloc_heap_bytes")]), 64.0 * 64 * 4, 1e-1);
    ck_assert_double_eq_tol(unlog(lay[fidx("parallel.prod")]), 2, 1e-4);
    ck_assert_float_eq(lay[fidx("inner.contig")], 2);
    ck_assert_float_eq(lay[fidx("float_mul")], 0);

    /* ops: 64^3 multiply-adds, all in the update of C.reg */
    ck_assert_double_eq_tol(unlog(reg[fidx("float_mul")]), n3, 1.0);
    ck_assert_double_eq_tol(unlog(reg[fidx("float_addsub")]), n3, 1.0);
    ck_assert_double_eq_tol(unlog(reg[fidx("float_mad")]), n3, 1.0);
    ck_assert_float_eq(reg[fidx("float_div")], 0);
    ck_assert_float_eq(c[fidx("float_mul")], 0);
    ck_assert_double_eq_tol(unlog(reg[fidx("outer_prod")]), n3, 1.0);
    ck_assert_float_eq(reg[fidx("num_loops")], 10);   /* S0 S0 S1 S1 R0 S2 S2 R1 S3 S3 */

    /* annotations: one fused parallel loop of 4*2, one vectorized of 16 */
    ck_assert_float_eq(reg[fidx("parallel.num")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("parallel.prod")]), 8, 1e-4);
    ck_assert_double_eq_tol(unlog(reg[fidx("parallel.inner")]), 8, 1e-4);
    ck_assert_float_eq(reg[fidx("parallel.pos_outer_spatial")], 1);
    ck_assert_float_eq(reg[fidx("vec.num")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("vec.prod")]), 16, 1e-4);
    ck_assert_double_eq_tol(unlog(reg[fidx("vec.inner")]), 16, 1e-4);
    ck_assert_float_eq(reg[fidx("vec.pos_inner_spatial")], 1);
    /* the register tile's update is unrolled whole, as its load and store:
     * i.3 (4), between the vectorized j.3 and the outer loops */
    ck_assert_float_eq(reg[fidx("unroll.num")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("unroll.prod")]), 4, 1e-4);
    ck_assert_float_eq(reg[fidx("unroll.pos_middle_spatial")], 1);
    ck_assert_float_eq(reg[fidx("unroll.pos_none")], 0);
    ck_assert_float_eq(reg[fidx("auto_unroll_max_step")], 0);

    /* buffers by bytes: C.reg (read and written 64^3 times), then A, B */
    ck_assert_float_eq(reg[fidx("b0.acc_rw")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("b0.bytes")]), 2 * 4 * n3, 16);
    ck_assert_double_eq_tol(unlog(reg[fidx("b0.unique_bytes")]), 4 * 4 * 16, 1e-3);
    ck_assert_float_eq(reg[fidx("b0.reuse_loop_multiple_read")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("b0.reuse_ct")]), 4, 1e-4);        /* k.1 */
    ck_assert_double_eq_tol(unlog(reg[fidx("b0.reuse_dis_iter")]), 64, 1e-3); /* i.3 * j.3 */
    ck_assert_float_eq(reg[fidx("b1.acc_read")], 1);
    ck_assert_double_eq_tol(unlog(reg[fidx("b1.bytes")]), 4 * n3, 8);
    ck_assert_double_eq_tol(unlog(reg[fidx("b1.unique_bytes")]), 4 * 64 * 64, 0.1);
    ck_assert_double_eq_tol(unlog(reg[fidx("b1.stride")]), 64, 1e-3);   /* A[i, k] along i.3 */
    ck_assert_double_eq_tol(unlog(reg[fidx("b2.stride")]), 1, 1e-4);    /* B[k, j] along j.3 */
    ck_assert_float_eq(reg[fidx("b1.reuse_loop_multiple_read")], 1);    /* A along j.3 */
    ck_assert_double_eq_tol(unlog(reg[fidx("b1.reuse_ct")]), 16, 1e-3);
    ck_assert_float_eq(reg[fidx("b3.bytes")], 0);                       /* only 3 buffers */

    /* C.reg is a 4x16 local tile allocated once per (i.2, j.2) iteration */
    ck_assert_double_eq_tol(unlog(reg[fidx("alloc_local_bytes")]), 256, 1e-2);
    ck_assert_double_eq_tol(unlog(reg[fidx("alloc_outer_prod")]), 4 * 2 * 2 * 2 * 16 * 2, 1e-1);
    ck_assert_float_eq(c[fidx("alloc_local_bytes")], 0);
    ck_assert_float_eq(c[fidx("alloc_heap_bytes")], 0);   /* C is the output */

    /* the intensity curve grows with the loop levels and ends at the
     * whole statement: 2*64^3 ops over the bytes of A, B and the tile */
    ck_assert_double_eq_tol(unlog(reg[fidx("curve.9")]), 2 * n3 / (2 * 64 * 64 * 4 + 256), 0.01);
    ck_assert(reg[fidx("curve.0")] <= reg[fidx("curve.9")]);
    ck_assert_float_eq(c[fidx("curve.9")], 0);   /* no float ops */

    /* innermost loop j.3 (16): C.reg and B step by one element, A stays;
     * the accumulator tile inside k.1 is i.3 x j.3 = 4 x 16 */
    ck_assert_double_eq_tol(unlog(reg[fidx("inner.extent")]), 16, 1e-3);
    ck_assert_float_eq(reg[fidx("inner.reduce")], 0);
    ck_assert_float_eq(reg[fidx("inner.contig")], 2);
    ck_assert_float_eq(reg[fidx("inner.invariant")], 1);
    ck_assert_float_eq(reg[fidx("inner.strided")], 0);
    ck_assert_double_eq_tol(unlog(reg[fidx("reg.tile")]), 64, 1e-3);
    ck_assert_float_eq(reg[fidx("reg.loops")], 2);
    ck_assert_double_eq_tol(unlog(reg[fidx("reduce.inner_extent")]), 4, 1e-4);

    /* The model scores what the runner times: B is packed once before the
     * timed runs, so the states' features have no row for its copy, and
     * the rows of C and C.reg are those above. */
    float *timed = NULL;
    uint32_t ntimed = 0;
    ck_assert_int_eq(kt_feature_extract(dag, st, &timed, &ntimed), 0);
    ck_assert_uint_eq(ntimed, 2);
    ck_assert_int_eq(memcmp(timed, c, sizeof(float) * KT_FEATURE_COUNT * 2), 0);
    free(timed);

    free(rows);
    free(rb);
    kt_lower_free(L);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

/* The same matmul with j.3 = 1: the innermost loop is i.3, along which A
 * steps by a row (strided), the 4x1 register tile by one element and B
 * stays. */
START_TEST(feature_innermost_loop_strides)
{
    kt_dag_t *dag = kt_ops_matmul(64, 64, 64, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st = kt_sched_state_from_json(
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,0,0],\"kind\":\"tiled\",\"name\":\"C\","
        "\"tile\":[[4,2,2,4],[2,2,16,1],[16,4]]}],\"version\":1}", dag, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    float *rows;
    uint32_t nrows;
    ck_assert_int_eq(kt_feature_extract(dag, st, &rows, &nrows), 0);
    const float *reg = NULL;
    for (uint32_t r = 0; r < nrows; r++)
        if (rows[r * KT_FEATURE_COUNT + fidx("float_mad")] > 0)
            reg = rows + (size_t)r * KT_FEATURE_COUNT;
    ck_assert_ptr_nonnull(reg);
    ck_assert_double_eq_tol(unlog(reg[fidx("inner.extent")]), 4, 1e-4);
    ck_assert_float_eq(reg[fidx("inner.reduce")], 0);
    ck_assert_float_eq(reg[fidx("inner.invariant")], 1);   /* B[k, j] */
    ck_assert_float_eq(reg[fidx("inner.contig")], 1);      /* the tile */
    ck_assert_float_eq(reg[fidx("inner.strided")], 1);     /* A[i, k] */
    free(rows);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

START_TEST(feature_tilings_give_different_rows)
{
    kt_dag_t *dag = kt_ops_matmul(64, 64, 64, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *a = kt_sched_state_from_json(MM_STATE, dag, &p);
    ck_assert_ptr_nonnull(a);
    /* same structure, other inner tiles and no vectorization */
    char *js = strdup(MM_STATE);
    char *t = strstr(js, "[[4,2,2,4],[2,2,1,16],[16,4]]");
    ck_assert_ptr_nonnull(t);
    const char *nt = "[[4,2,4,2],[2,2,2,8],[4,16]] ";   /* same length, JSON space */
    memcpy(t, nt, strlen(nt));
    char *v = strstr(js, "[2,1,0]");
    memcpy(v, "[1,0,0]", 7);
    kt_sched_state_t *b = kt_sched_state_from_json(js, dag, &p);
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    free(js);
    float *ra, *rb;
    uint32_t na, nb;
    ck_assert_int_eq(kt_feature_extract(dag, a, &ra, &na), 0);
    ck_assert_int_eq(kt_feature_extract(dag, b, &rb, &nb), 0);
    ck_assert_uint_eq(na, nb);
    /* the same work, laid out differently */
    ck_assert_double_eq_tol(float_ops(ra, na), float_ops(rb, nb), 2);
    ck_assert_int_ne(memcmp(ra, rb, sizeof(float) * KT_FEATURE_COUNT * na), 0);
    ck_assert_uint_eq(na, 2);   /* C, C.reg (B comes packed) */
    const float *regb = rb + KT_FEATURE_COUNT;
    ck_assert_float_eq(regb[fidx("vec.pos_none")], 1);
    ck_assert_float_eq(regb[fidx("parallel.num")], 1);
    ck_assert_double_eq_tol(unlog(regb[fidx("parallel.prod")]), 4, 1e-4);
    ck_assert_double_eq_tol(unlog(regb[fidx("b0.reuse_ct")]), 16, 1e-3);   /* k.1 is 16 now */
    free(ra);
    free(rb);
    kt_sched_state_free(a);
    kt_sched_state_free(b);
    kt_dag_free(dag);
}
END_TEST

/* Global average pool 7x7x512 by rfactor: the fused 7x7 reduce axes split
 * 7 x 7 (partial results along the inner part). Each partial-sum update
 * reads data[0, ry, rx, c] with ry, rx recovered by / and %: along the
 * innermost loop (rx) the address moves by C = 512. */
START_TEST(feature_rfactor_indices_follow_the_fused_axes)
{
    kt_dag_t *dag = kt_ops_global_avg_pool_nhwc(1, 7, 7, 512);
    kt_sched_params_t p = test_params();
    const char *js =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"data\"},{\"ann\":[4,1,64],"
        "\"ann2\":[4,0,512],\"inner\":true,\"kind\":\"rfactor\",\"name\":\"adaptive_pool_sum\","
        "\"split\":[7,7]},{\"ann\":[4,0,0],\"kind\":\"root\",\"name\":\"adaptive_pool_avg\"}],"
        "\"version\":1}";
    kt_sched_state_t *st = kt_sched_state_from_json(js, dag, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    float *rows;
    uint32_t n;
    ck_assert_int_eq(kt_feature_extract(dag, st, &rows, &n), 0);
    ck_assert_uint_eq(n, 3);   /* partial sums, final sums, average */
    const float *rf = rows;
    /* by bytes: the partial-result buffer (read and written), then data */
    ck_assert_float_eq(rf[fidx("b0.acc_rw")], 1);
    ck_assert_float_eq(rf[fidx("b1.acc_read")], 1);
    ck_assert_double_eq_tol(unlog(rf[fidx("b1.stride")]), 512, 1e-2);
    ck_assert_double_eq_tol(unlog(rf[fidx("b1.unique_bytes")]), 7 * 7 * 512 * 4, 1);
    ck_assert_double_eq_tol(unlog(rf[fidx("b0.unique_bytes")]), 512 * 7 * 4, 0.5);
    ck_assert_double_eq_tol(unlog(rf[fidx("alloc_heap_bytes")]), 512 * 7 * 4, 0.5);
    ck_assert_double_eq_tol(unlog(rf[fidx("auto_unroll_max_step")]), 64, 1e-3);
    /* the final reduce runs in the second nest (ann2: unroll step 512) */
    ck_assert_double_eq_tol(unlog(rows[KT_FEATURE_COUNT + fidx("auto_unroll_max_step")]), 512,
                            1e-2);
    ck_assert_double_eq_tol(unlog(rf[fidx("float_addsub")]), 7 * 7 * 512, 0.1);
    ck_assert_double_eq_tol(unlog(rows[KT_FEATURE_COUNT + fidx("float_addsub")]), 7 * 512, 0.1);
    free(rows);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

/* ---- every operator family ----------------------------------------------------- */

START_TEST(feature_matmul_family_rows_are_sound)
{
    check_family("matmul 64x64x64", kt_ops_matmul(64, 64, 64, 0, NULL, 0), 1);
    check_family("matmul NT 16x24x32", kt_ops_matmul(16, 24, 32, 1, NULL, 0), 2);
    check_family("matmul 2x3x256 (rfactor)", kt_ops_matmul(2, 3, 256, 0, NULL, 0), 3);
    kt_epilogue_t br[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    check_family("dense+bias+relu", kt_ops_dense(16, 24, 32, br, 2), 4);
    kt_epilogue_t gelu[] = {KT_EPI_GELU};
    check_family("dense+gelu", kt_ops_dense(8, 12, 16, gelu, 1), 5);
    kt_epilogue_t ar[] = {KT_EPI_ADD, KT_EPI_RELU};
    check_family("batch_matmul+add+relu", kt_ops_batch_matmul(3, 5, 8, 7, ar, 2), 6);
}
END_TEST

START_TEST(feature_conv_family_rows_are_sound)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1);
    kt_epilogue_t br[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    check_family("conv nhwc s1 p1", kt_ops_conv2d_nhwc(1, 14, 14, 16, 32, 3, 3, &s1p1, NULL, 0), 7);
    check_family("conv nchw s2 p1+bias+relu",
                 kt_ops_conv2d_nchw(1, 15, 15, 8, 16, 3, 3, &s2p1, br, 2), 8);
    kt_epilogue_t relu[] = {KT_EPI_RELU};
    check_family("depthwise s1 p1+relu",
                 kt_ops_depthwise_conv2d_nhwc(1, 16, 16, 32, 3, 3, &s1p1, relu, 1), 9);
}
END_TEST

START_TEST(feature_reduction_family_rows_are_sound)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1);
    check_family("max pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 16, 16, 8, 3, 3, &s2p1), 10);
    check_family("avg pool s2 p1", kt_ops_pool2d_nhwc(KT_POOL_AVG, 1, 15, 15, 8, 3, 3, &s2p1), 11);
    check_family("global avg pool", kt_ops_global_avg_pool_nhwc(1, 7, 7, 64), 12);
    check_family("softmax 16x100", kt_ops_softmax(2, (int64_t[]){16, 100}), 13);
    check_family("layer norm 8x64 affine", kt_ops_layer_norm(2, (int64_t[]){8, 64}, 1), 14);
}
END_TEST

/* ---- GPU states ---------------------------------------------------------------------- */

START_TEST(feature_gpu_matmul_family_rows_are_sound)
{
    check_gpu_family("gpu matmul 64x64x64", kt_ops_matmul(64, 64, 64, 0, NULL, 0), 31);
    check_gpu_family("gpu matmul NT 16x24x32", kt_ops_matmul(16, 24, 32, 1, NULL, 0), 32);
    check_gpu_family("gpu matmul 2x3x256", kt_ops_matmul(2, 3, 256, 0, NULL, 0), 33);
    kt_epilogue_t br[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    check_gpu_family("gpu dense+bias+relu", kt_ops_dense(16, 24, 32, br, 2), 34);
    kt_epilogue_t gelu[] = {KT_EPI_GELU};
    check_gpu_family("gpu dense+gelu 1x8x64", kt_ops_dense(1, 8, 64, gelu, 1), 35);
    kt_epilogue_t ar[] = {KT_EPI_ADD, KT_EPI_RELU};
    check_gpu_family("gpu batch_matmul+add+relu", kt_ops_batch_matmul(3, 5, 8, 7, ar, 2), 36);
}
END_TEST

START_TEST(feature_gpu_conv_family_rows_are_sound)
{
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1), s2p1 = kt_test_conv_p(2, 1, 1);
    kt_epilogue_t br[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    check_gpu_family("gpu conv nhwc s1 p1",
                     kt_ops_conv2d_nhwc(1, 14, 14, 16, 32, 3, 3, &s1p1, NULL, 0), 37);
    check_gpu_family("gpu conv nchw s2 p1+bias+relu",
                     kt_ops_conv2d_nchw(1, 15, 15, 8, 16, 3, 3, &s2p1, br, 2), 38);
    kt_epilogue_t relu[] = {KT_EPI_RELU};
    check_gpu_family("gpu depthwise s1 p1+relu",
                     kt_ops_depthwise_conv2d_nhwc(1, 16, 16, 32, 3, 3, &s1p1, relu, 1), 39);
}
END_TEST

START_TEST(feature_gpu_reduction_family_rows_are_sound)
{
    kt_conv2d_params_t s2p1 = kt_test_conv_p(2, 1, 1);
    check_gpu_family("gpu max pool s2 p1",
                     kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 16, 16, 8, 3, 3, &s2p1), 40);
    check_gpu_family("gpu avg pool s2 p1",
                     kt_ops_pool2d_nhwc(KT_POOL_AVG, 1, 15, 15, 8, 3, 3, &s2p1), 41);
    check_gpu_family("gpu global avg pool", kt_ops_global_avg_pool_nhwc(1, 7, 7, 64), 42);
    check_gpu_family("gpu softmax 16x100", kt_ops_softmax(2, (int64_t[]){16, 100}), 43);
    check_gpu_family("gpu layer norm 8x64 affine", kt_ops_layer_norm(2, (int64_t[]){8, 64}, 1),
                     44);
}
END_TEST

/* matmul 64x64x64 on the GPU: i split 2x2x2x4x2, j 2x2x16x1x1, k 2x16x2;
 * A and B staged in shared memory, 2 elements per fetch step, unroll 512.
 * Blocks 2*2, threads 2*16, vthreads 2*2; boxes A 32x32 and B 32x32 floats;
 * register tile (2*4*2) x 2 floats. */
static const char *GPU_MM_STATE =
    "{\"launches\":[{\"block\":[32,1,1],\"grid\":[4,1,1],\"smem\":8192,\"stage\":\"C\"}],"
    "\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
    "{\"cache_write\":true,\"kind\":\"tiled\",\"level\":3,\"name\":\"C\",\"smem\":[\"A\",\"B\"],"
    "\"tile\":[[2,2,2,4,2],[2,2,16,1,1],[2,16,2]],\"unroll\":512,\"vec\":2}],"
    "\"target\":\"cuda\",\"version\":1}";

START_TEST(feature_gpu_matmul_known_launch_values)
{
    kt_dag_t *dag = kt_ops_matmul(64, 64, 64, 0, NULL, 0);
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    kt_sched_state_t *st = kt_sched_state_from_json(GPU_MM_STATE, dag, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_lower_t *L = kt_lower(dag, st);
    ck_assert_ptr_nonnull(L);
    float *rows;
    uint32_t nrows;
    int *rb;
    ck_assert_int_eq(kt_feature_extract_lower(dag, st, L, &rows, &nrows, &rb), 0);
    /* the accumulator (init first), the two boxes, the copy-out */
    ck_assert_uint_eq(nrows, 4);
    ck_assert_str_eq(L->bufs[rb[0]].label, "C.local");
    ck_assert_str_eq(L->bufs[rb[1]].label, "A.shared");
    ck_assert_str_eq(L->bufs[rb[2]].label, "B.shared");
    ck_assert_str_eq(L->bufs[rb[3]].label, "C");
    const double n3 = 64.0 * 64 * 64;
    for (uint32_t r = 0; r < nrows; r++) {
        const float *v = rows + (size_t)r * KT_FEATURE_COUNT;
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.blockIdx.x_len")]), 4, 1e-4);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.blocks")]), 4, 1e-4);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.threadIdx.x_len")]), 32, 1e-3);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.threads_per_block")]), 32, 1e-3);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.vthread_len")]), 4, 1e-4);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.smem_bytes")]), 8192, 0.1);
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.local_bytes")]), 32 * 4, 1e-2);
        ck_assert_float_eq(v[fidx("gpu.fetch_vec")], 2);
        ck_assert_float_eq(v[fidx("gpu.warp_util")], 1);
        /* a barrier before and after the fetch of each of the 2 k.0 steps */
        ck_assert_double_eq_tol(unlog(v[fidx("gpu.barriers")]), 4, 1e-4);
        ck_assert_double_eq_tol(unlog(v[fidx("auto_unroll_max_step")]), 512, 0.1);
        ck_assert_float_eq(v[fidx("parallel.num")], 0);
    }
    const float *acc = rows, *fa = rows + KT_FEATURE_COUNT, *out = rows + 3 * KT_FEATURE_COUNT;
    /* the update: every multiply-add once, over all blocks, threads, vthreads */
    ck_assert_double_eq_tol(unlog(acc[fidx("float_mad")]), n3, 1);
    ck_assert_double_eq_tol(unlog(acc[fidx("outer_prod")]), n3, 1);
    /* 4 blocks x 2 steps x a 32x32 box of A, fetched 2 elements (one float2) at a time */
    ck_assert_double_eq_tol(unlog(fa[fidx("outer_prod")]), 4 * 2 * 1024, 0.1);
    ck_assert_float_eq(fa[fidx("vec.num")], 1);
    ck_assert_double_eq_tol(unlog(fa[fidx("vec.prod")]), 2, 1e-4);
    ck_assert_float_eq(fa[fidx("vec.pos_inner_spatial")], 1);
    /* the box is written and A read contiguously along the vector */
    ck_assert_float_eq(fa[fidx("inner.contig")], 2);
    ck_assert_double_eq_tol(unlog(fa[fidx("b0.stride")]), 1, 1e-4);
    ck_assert_double_eq_tol(unlog(fa[fidx("b1.stride")]), 1, 1e-4);
    ck_assert_double_eq_tol(unlog(fa[fidx("b0.unique_bytes")]), 1024 * 4, 0.1);
    ck_assert_double_eq_tol(unlog(fa[fidx("b1.unique_bytes")]), 64 * 64 * 4, 1);
    /* the copy-out writes every element of C once */
    ck_assert_double_eq_tol(unlog(out[fidx("outer_prod")]), 4096, 0.1);
    ck_assert_double_eq_tol(unlog(out[fidx("b0.unique_bytes")]), 4096 * 4, 1);
    free(rows);
    free(rb);
    kt_lower_free(L);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

/* A cross-thread reduction (matmul 2x3x256, 96 threads per output): each
 * thread reduces ceil(256/96) = 3 strided elements, the last step guarded,
 * and only thread 0 stores; guards scale the trip counts. */
START_TEST(feature_gpu_cross_thread_reduction_counts_guarded_work)
{
    kt_dag_t *dag = kt_ops_matmul(2, 3, 256, 0, NULL, 0);
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    kt_sched_state_t **sk;
    int nsk;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_sched_state_t *st = NULL;
    for (int i = 0; i < nsk && !st; i++)
        if (sk[i]->stages[2].kind == KT_SK_XREDUCE)
            st = kt_sched_state_clone(sk[i]);
    free_states(sk, nsk);
    free(sk);
    ck_assert_ptr_nonnull(st);
    st->stages[2].threads = 96;
    st->stages[2].ann.unroll = 0;
    ck_assert_msg(kt_sched_state_validate(dag, &p, st) == 0, "%s", kt_err_msg());
    kt_sched_gpu_kernel_t ks[KT_TE_MAX_STAGES];
    ck_assert_int_eq(kt_sched_gpu_kernels(dag, st, ks), 1);
    float *rows;
    uint32_t nrows;
    ck_assert_int_eq(kt_feature_extract(dag, st, &rows, &nrows), 0);
    ck_assert_uint_eq(nrows, 2);   /* the per-thread partial, C */
    const float *part = rows, *c = rows + KT_FEATURE_COUNT;
    /* 6 outputs x 256 products; the all-reduce adds one combine per thread */
    ck_assert_double_eq_tol(unlog(part[fidx("float_mul")]), 6 * 256, 0.1);
    ck_assert_double_eq_tol(unlog(part[fidx("float_addsub")]), 6 * 256 + 6 * 96, 0.1);
    ck_assert_double_eq_tol(unlog(part[fidx("outer_prod")]), 6 * 256, 0.1);
    ck_assert_double_eq_tol(unlog(part[fidx("gpu.blocks")]), 6, 1e-4);
    ck_assert_double_eq_tol(unlog(part[fidx("gpu.threads_per_block")]), 96, 1e-3);
    ck_assert_double_eq_tol(unlog(part[fidx("gpu.local_bytes")]), 4, 1e-4);
    ck_assert_double_eq_tol(unlog(part[fidx("gpu.smem_bytes")]), (double)ks[0].smem_bytes, 1e-2);
    ck_assert_double_eq_tol(unlog(part[fidx("gpu.vthread_len")]), 1, 1e-4);
    ck_assert_float_eq(part[fidx("gpu.fetch_vec")], 0);
    ck_assert_float_eq(part[fidx("gpu.barriers")], 0);
    ck_assert_float_eq(part[fidx("gpu.warp_util")], 1);
    /* one store per output */
    ck_assert_double_eq_tol(unlog(c[fidx("outer_prod")]), 6, 1e-3);
    ck_assert_float_eq(c[fidx("b0.acc_write")], 1);
    ck_assert_double_eq_tol(unlog(c[fidx("b0.bytes")]), 6 * 4, 1e-2);
    free(rows);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

/* ---- batch and bad input ---------------------------------------------------------- */

START_TEST(feature_batch_matches_single_and_drops_invalid)
{
    kt_dag_t *dag = kt_ops_matmul(32, 48, 64, 0, NULL, 0);
    kt_sched_params_t p = test_params();
    kt_sched_state_t *st[MAX_STATES];
    int n = kt_test_collect_states(dag, &p, 21, st, 6);
    ck_assert_int_ge(n, 4);
    /* a state whose splits do not multiply to the extent cannot be lowered */
    int tiled = -1;
    for (int i = 0; i < n && tiled < 0; i++)
        if (st[i]->stages[2].kind == KT_SK_TILED)
            tiled = i;
    ck_assert_int_ge(tiled, 0);
    kt_sched_state_t *bad = kt_sched_state_clone(st[tiled]);
    bad->stages[2].split[0][0] *= 3;
    const kt_sched_state_t *batch[MAX_STATES + 2];
    int m = 0, badi = -1;
    for (int i = 0; i < n; i++) {
        batch[m++] = st[i];
        if (i == tiled)
            batch[badi = m++] = bad;
    }
    float *rows;
    uint32_t counts[MAX_STATES + 2];
    ck_assert_int_eq(kt_feature_extract_batch(dag, batch, m, &rows, counts), 0);
    ck_assert_uint_eq(counts[badi], 0);
    float *single;
    uint32_t ns;
    ck_assert_int_ne(kt_feature_extract(dag, bad, &single, &ns), 0);
    ck_assert_ptr_null(single);
    size_t off = 0;
    for (int i = 0; i < m; i++) {
        if (batch[i] == bad)
            continue;
        ck_assert_int_eq(kt_feature_extract(dag, batch[i], &single, &ns), 0);
        ck_assert_uint_eq(ns, counts[i]);
        ck_assert_int_eq(memcmp(single, rows + off * KT_FEATURE_COUNT,
                                sizeof(float) * KT_FEATURE_COUNT * ns),
                         0);
        off += ns;
        free(single);
    }
    free(rows);
    /* an empty batch has no rows */
    ck_assert_int_eq(kt_feature_extract_batch(dag, batch, 0, &rows, counts), 0);
    ck_assert_ptr_null(rows);
    kt_sched_state_free(bad);
    free_states(st, n);
    kt_dag_free(dag);
}
END_TEST

/* An inlined padding's test counts where the C still runs it: in the
 * stride-2 tile state (see codegen_tested_share_counts_the_printed_tests)
 * the update runs 73,728 multiply-adds and its test 186 times (4
 * comparisons and 3 ands each), most of them filling border tables; the
 * select once counted per multiply-add.
 * With the padding materialized the update selects nothing and the
 * padding stage's row selects per element it computes. */
START_TEST(feature_padding_tests_count_where_the_c_runs_them)
{
    kt_dag_t *cv = kt_test_pad_tile_conv(8, 2);
    kt_sched_params_t p = test_params();
    for (int materialized = 0; materialized < 2; materialized++) {
        static const char *const inl = KT_TEST_PAD_TILE_STATE("[2,1,2,1]", "[1,1,2,2]");
        char *json = materialized ? kt_test_materialize_pad(inl) : strdup(inl);
        kt_sched_state_t *st = kt_sched_state_from_json(json, cv, &p);
        ck_assert_msg(st != NULL, "%s", kt_err_msg());
        float *rows;
        uint32_t nrows;
        ck_assert_int_eq(kt_feature_extract(cv, st, &rows, &nrows), 0);
        double mads = 0, selects = 0, cmps = 0, ands = 0, upd_selects = -1;
        for (uint32_t r = 0; r < nrows; r++) {
            const float *v = rows + (size_t)r * KT_FEATURE_COUNT;
            mads += unlog(v[fidx("float_mad")]);
            selects += unlog(v[fidx("select")]);
            cmps += unlog(v[fidx("int_cmp")]);
            ands += unlog(v[fidx("bool_op")]);
            if (v[fidx("float_mad")] > 0)
                upd_selects = unlog(v[fidx("select")]);
        }
        ck_assert_double_eq_tol(mads, 73728, 0.05);
        if (materialized) {
            ck_assert_double_eq_tol(upd_selects, 0, 1e-9);
            ck_assert_double_gt(selects, 4 * 4 * 16);   /* the padding stage's own */
        } else {
            ck_assert_double_eq_tol(selects, 186, 0.01);
            ck_assert_double_eq_tol(cmps, 4 * 186, 0.05);
            ck_assert_double_eq_tol(ands, 3 * 186, 0.05);
        }
        free(rows);
        kt_sched_state_free(st);
        free(json);
    }
    kt_dag_free(cv);
}
END_TEST

START_TEST(feature_extract_rejects_bad_arguments)
{
    kt_dag_t *dag = kt_ops_matmul(8, 8, 8, 0, NULL, 0);
    kt_sched_state_t *st = kt_sched_state_new(dag);
    float *rows = (float *)1;
    uint32_t n = 7;
    ck_assert_int_eq(kt_feature_extract(NULL, st, &rows, &n), KT_EINVAL);
    ck_assert_int_eq(kt_feature_extract(dag, NULL, &rows, &n), KT_EINVAL);
    ck_assert_int_eq(kt_feature_extract(dag, st, NULL, &n), KT_EINVAL);
    ck_assert_int_eq(kt_feature_extract_batch(dag, NULL, 3, &rows, NULL), KT_EINVAL);
    ck_assert_int_eq(kt_feature_extract_batch(dag, NULL, -1, &rows, NULL), KT_EINVAL);
    /* a state of another DAG does not lower */
    kt_dag_t *other = kt_ops_softmax(2, (int64_t[]){4, 8});
    kt_sched_state_t *ost = kt_sched_state_new(other);
    ck_assert_int_ne(kt_feature_extract(dag, ost, &rows, &n), 0);
    ck_assert_ptr_null(rows);
    ck_assert_uint_eq(n, 0);
    kt_sched_state_free(ost);
    kt_dag_free(other);
    kt_sched_state_free(st);
    kt_dag_free(dag);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("feature");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, feature_table_names_every_value_once);
    tcase_add_test(tc, feature_matmul_known_tiling_values);
    tcase_add_test(tc, feature_innermost_loop_strides);
    tcase_add_test(tc, feature_tilings_give_different_rows);
    tcase_add_test(tc, feature_rfactor_indices_follow_the_fused_axes);
    tcase_add_test(tc, feature_matmul_family_rows_are_sound);
    tcase_add_test(tc, feature_conv_family_rows_are_sound);
    tcase_add_test(tc, feature_reduction_family_rows_are_sound);
    tcase_add_test(tc, feature_gpu_matmul_known_launch_values);
    tcase_add_test(tc, feature_gpu_cross_thread_reduction_counts_guarded_work);
    tcase_add_test(tc, feature_gpu_matmul_family_rows_are_sound);
    tcase_add_test(tc, feature_gpu_conv_family_rows_are_sound);
    tcase_add_test(tc, feature_gpu_reduction_family_rows_are_sound);
    tcase_add_test(tc, feature_batch_matches_single_and_drops_invalid);
    tcase_add_test(tc, feature_extract_rejects_bad_arguments);
    tcase_add_test(tc, feature_padding_tests_count_where_the_c_runs_them);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
