/* Feature extraction: the lowered loop-nest program of a state, walked once
 * per statement, summarized into one row per stored buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "feature.h"
#include "util/err.h"

#define ELEM_BYTES 4      /* float32 everywhere */
#define LINE_BYTES 64     /* cache line */
#define LF_TERMS 16       /* iterators in one composed index */
#define MAX_DEPTH 128     /* loops around one statement */
#define MAX_ACC 64        /* buffer accesses of one statement */
#define MAX_SBUF 16       /* distinct buffers of one statement */
#define INLINE_DEPTH 32   /* nested inlined bodies */
#define DERIVED_DEPTH 16  /* GPU: derived iterators defined by derived iterators */

/* ---- the feature table ------------------------------------------------------
 * One X-macro list drives the index enum, kt_feature_name and kt_feature_doc.
 * "(log)" in a doc means the value is log2(1 + x). */

#define OPS_DOC " per statement execution, times the trip count (log)"
#define ANN_FEATURES(X, ID, nm, what)                                                         \
    X(ID##_NUM, nm ".num", "number of " what " loops (neighbouring ones fused count once)")    \
    X(ID##_PROD, nm ".prod", "product of the lengths of the " what " loops (log)")            \
    X(ID##_INNER, nm ".inner", "length of the innermost " what " loop (log)")                 \
    X(ID##_POS_NONE, nm ".pos_none", "1 when no loop around the statement is " what)           \
    X(ID##_POS_INNER_SPATIAL, nm ".pos_inner_spatial",                                        \
      "1 when the innermost " what " loop is spatial and the innermost loop of the statement") \
    X(ID##_POS_MIDDLE_SPATIAL, nm ".pos_middle_spatial",                                      \
      "1 when the innermost " what " loop is spatial, neither innermost nor outermost")        \
    X(ID##_POS_OUTER_SPATIAL, nm ".pos_outer_spatial",                                        \
      "1 when the innermost " what " loop is spatial and the outermost loop")                  \
    X(ID##_POS_INNER_REDUCE, nm ".pos_inner_reduce",                                          \
      "1 when the innermost " what " loop is a reduction loop and the innermost loop")         \
    X(ID##_POS_MIDDLE_REDUCE, nm ".pos_middle_reduce",                                        \
      "1 when the innermost " what " loop is a reduction loop in the middle")                  \
    X(ID##_POS_OUTER_REDUCE, nm ".pos_outer_reduce",                                          \
      "1 when the innermost " what " loop is a reduction loop and the outermost loop")         \
    X(ID##_POS_MIXED, nm ".pos_mixed",                                                        \
      "1 when the innermost " what " loop fuses spatial and reduction loops")

#define BUF_FEATURES(X, ID, k)                                                                \
    X(ID##_ACC_READ, "b" #k ".acc_read",                                                      \
      "buffer " #k " (by bytes accessed, descending): 1 when the statement only reads it")     \
    X(ID##_ACC_WRITE, "b" #k ".acc_write", "buffer " #k ": 1 when the statement only writes it") \
    X(ID##_ACC_RW, "b" #k ".acc_rw", "buffer " #k ": 1 when the statement reads and writes it") \
    X(ID##_BYTES, "b" #k ".bytes", "buffer " #k ": bytes accessed over the whole run (log)")     \
    X(ID##_UNIQUE_BYTES, "b" #k ".unique_bytes",                                              \
      "buffer " #k ": distinct bytes the statement touches (bounding box of its accesses, log)") \
    X(ID##_LINES, "b" #k ".lines",                                                            \
      "buffer " #k ": cache lines fetched when only the current line stays cached (log)")      \
    X(ID##_UNIQUE_LINES, "b" #k ".unique_lines", "buffer " #k ": distinct cache lines touched (log)") \
    X(ID##_REUSE_LOOP, "b" #k ".reuse_loop_multiple_read",                                    \
      "buffer " #k ": 1 when an enclosing loop re-reads the same elements (its iterator is "   \
      "absent from every index)")                                                              \
    X(ID##_REUSE_SERIAL, "b" #k ".reuse_serial_multiple_rw",                                  \
      "buffer " #k ": 1 when other statements in an enclosing loop access it again")          \
    X(ID##_REUSE_NONE, "b" #k ".reuse_none", "buffer " #k ": 1 when no reuse was found")       \
    X(ID##_REUSE_DIS_ITER, "b" #k ".reuse_dis_iter",                                          \
      "buffer " #k ": iterations between two uses of an element (log)")                        \
    X(ID##_REUSE_DIS_BYTES, "b" #k ".reuse_dis_bytes",                                        \
      "buffer " #k ": bytes of all buffers touched between two uses (log)")                    \
    X(ID##_REUSE_CT, "b" #k ".reuse_ct", "buffer " #k ": times each element is reused (log)")  \
    X(ID##_BYTES_D_REUSE, "b" #k ".bytes_d_reuse_ct", "buffer " #k ": bytes / reuse count (log)") \
    X(ID##_UBYTES_D_REUSE, "b" #k ".unique_bytes_d_reuse_ct",                                 \
      "buffer " #k ": unique bytes / reuse count (log)")                                       \
    X(ID##_LINES_D_REUSE, "b" #k ".lines_d_reuse_ct", "buffer " #k ": lines / reuse count (log)") \
    X(ID##_ULINES_D_REUSE, "b" #k ".unique_lines_d_reuse_ct",                                 \
      "buffer " #k ": unique lines / reuse count (log)")                                       \
    X(ID##_STRIDE, "b" #k ".stride",                                                          \
      "buffer " #k ": address step in elements of the innermost loop that moves the access (log)")

#define CURVE_DOC                                                                             \
    ": arithmetic intensity (float ops per byte touched, log) where the ops done reach "      \
    "the given fraction of the statement's ops on a log scale, interpolated between loop levels"

/* GPU rows (target cuda) only; 0 in CPU rows. The lowering binds blocks and
 * threads to .x: y and z keep Ansor's layout for a lowering that binds them. */
#define GPU_DOC " of the statement's kernel (log; 0 in CPU rows)"
#define GPU_FEATURES(X)                                                                       \
    X(F_GPU_BLOCK_X, "gpu.blockIdx.x_len", "extent of the loop bound to blockIdx.x" GPU_DOC)  \
    X(F_GPU_BLOCK_Y, "gpu.blockIdx.y_len",                                                   \
      "extent of the loop bound to blockIdx.y" GPU_DOC "; 0 while the lowering binds only .x") \
    X(F_GPU_BLOCK_Z, "gpu.blockIdx.z_len",                                                   \
      "extent of the loop bound to blockIdx.z" GPU_DOC "; 0 while the lowering binds only .x") \
    X(F_GPU_THREAD_X, "gpu.threadIdx.x_len", "extent of the loop bound to threadIdx.x" GPU_DOC) \
    X(F_GPU_THREAD_Y, "gpu.threadIdx.y_len",                                                 \
      "extent of the loop bound to threadIdx.y" GPU_DOC "; 0 while the lowering binds only .x") \
    X(F_GPU_THREAD_Z, "gpu.threadIdx.z_len",                                                 \
      "extent of the loop bound to threadIdx.z" GPU_DOC "; 0 while the lowering binds only .x") \
    X(F_GPU_VTHREAD, "gpu.vthread_len",                                                      \
      "virtual threads per thread (extent of the vthread loop, 1 without one)" GPU_DOC)      \
    X(F_GPU_THREADS, "gpu.threads_per_block", "threads per block" GPU_DOC)                    \
    X(F_GPU_BLOCKS, "gpu.blocks", "blocks launched" GPU_DOC)                                  \
    X(F_GPU_SMEM, "gpu.smem_bytes", "shared memory allocated per block in bytes" GPU_DOC)     \
    X(F_GPU_LOCAL, "gpu.local_bytes",                                                        \
      "local (register) buffers allocated per thread in bytes" GPU_DOC)                       \
    X(F_GPU_FETCH_VEC, "gpu.fetch_vec",                                                      \
      "elements each thread copies per step of the cooperative fetch into shared memory "    \
      "(1, 2 or 4; 0 when the kernel stages nothing; not log)")                               \
    X(F_GPU_WARP_UTIL, "gpu.warp_util",                                                      \
      "threads per block over the threads of the warps they occupy (1: whole warps; not "    \
      "log; 0 in CPU rows)")                                                                  \
    X(F_GPU_BARRIERS, "gpu.barriers",                                                        \
      "block-wide barriers each thread passes" GPU_DOC)

#define FEATURE_LIST(X)                                                                       \
    X(F_FLOAT_MAD, "float_mad",                                                               \
      "float multiply-adds (an addition with a product operand, also counted as add and mul)" \
      OPS_DOC)                                                                                \
    X(F_FLOAT_ADDSUB, "float_addsub", "float additions and subtractions" OPS_DOC)             \
    X(F_FLOAT_MUL, "float_mul", "float multiplications" OPS_DOC)                              \
    X(F_FLOAT_DIV, "float_div", "float divisions" OPS_DOC)                                    \
    X(F_FLOAT_MAXMIN, "float_maxmin", "float max and min (reduction max included)" OPS_DOC)   \
    X(F_FLOAT_EXP, "float_exp", "exp calls" OPS_DOC)                                          \
    X(F_FLOAT_MATH, "float_math", "other math calls: sqrt, rsqrt, tanh, erf" OPS_DOC)         \
    X(F_FLOAT_CMP, "float_cmp", "comparisons of floats" OPS_DOC)                              \
    X(F_INT_ADDSUB, "int_addsub", "integer (index) additions and subtractions" OPS_DOC)        \
    X(F_INT_MUL, "int_mul", "integer multiplications" OPS_DOC)                                \
    X(F_INT_DIVMOD, "int_divmod", "integer floor divisions and modulos" OPS_DOC)              \
    X(F_INT_MAXMIN, "int_maxmin", "integer max and min" OPS_DOC)                              \
    X(F_INT_CMP, "int_cmp", "comparisons of integers" OPS_DOC)                                \
    X(F_BOOL_OP, "bool_op", "logical and, or, not" OPS_DOC)                                   \
    X(F_SELECT, "select", "selects (padding guards)" OPS_DOC)                                 \
    X(F_CAST, "cast", "type conversions" OPS_DOC)                                             \
    ANN_FEATURES(X, F_VEC, "vec", "vectorized")                                               \
    ANN_FEATURES(X, F_UNROLL, "unroll", "unrolled")                                           \
    ANN_FEATURES(X, F_PAR, "parallel", "parallel")                                            \
    BUF_FEATURES(X, F_B0, 0)                                                                  \
    BUF_FEATURES(X, F_B1, 1)                                                                  \
    BUF_FEATURES(X, F_B2, 2)                                                                  \
    BUF_FEATURES(X, F_B3, 3)                                                                  \
    BUF_FEATURES(X, F_B4, 4)                                                                  \
    X(F_CURVE0, "curve.0", "point 1/10" CURVE_DOC)                                            \
    X(F_CURVE1, "curve.1", "point 2/10" CURVE_DOC)                                            \
    X(F_CURVE2, "curve.2", "point 3/10" CURVE_DOC)                                            \
    X(F_CURVE3, "curve.3", "point 4/10" CURVE_DOC)                                            \
    X(F_CURVE4, "curve.4", "point 5/10" CURVE_DOC)                                            \
    X(F_CURVE5, "curve.5", "point 6/10" CURVE_DOC)                                            \
    X(F_CURVE6, "curve.6", "point 7/10" CURVE_DOC)                                            \
    X(F_CURVE7, "curve.7", "point 8/10" CURVE_DOC)                                            \
    X(F_CURVE8, "curve.8", "point 9/10" CURVE_DOC)                                            \
    X(F_CURVE9, "curve.9", "point 10/10: the whole statement" CURVE_DOC)                      \
    X(F_ALLOC_LOCAL, "alloc_local_bytes",                                                     \
      "bytes of the stored buffer when it is a local tile allocated inside the kernel (log)") \
    X(F_ALLOC_HEAP, "alloc_heap_bytes",                                                       \
      "bytes of the stored buffer when it is a heap intermediate of the kernel (log)")        \
    X(F_ALLOC_OUTER_PROD, "alloc_outer_prod",                                                 \
      "product of the extents of the loops around the stored buffer's allocation (log)")      \
    X(F_ALLOC_PROD, "alloc_prod", "bytes allocated over the whole run: size times alloc_outer_prod (log)") \
    X(F_OUTER_PROD, "outer_prod", "trip count: product of the extents of the loops around the statement (log)") \
    X(F_NUM_LOOPS, "num_loops", "number of loops around the statement")                       \
    X(F_UNROLL_STEP, "auto_unroll_max_step", "auto-unroll max step of the statement's loop nest (log)") \
    X(F_INNER_EXTENT, "inner.extent",                                                         \
      "extent of the innermost loop (of extent > 1) around the statement: what the C "       \
      "compiler vectorizes whether or not it is annotated (log)")                              \
    X(F_INNER_REDUCE, "inner.reduce", "1 when that innermost loop is a reduction loop")      \
    X(F_INNER_CONTIG, "inner.contig", "accesses whose address steps by one element in the innermost loop") \
    X(F_INNER_INVARIANT, "inner.invariant", "accesses whose address does not move in the innermost loop") \
    X(F_INNER_STRIDED, "inner.strided",                                                       \
      "accesses whose address steps by more than one element in the innermost loop "         \
      "(they defeat vectorization)")                                                           \
    X(F_REG_TILE, "reg.tile",                                                                 \
      "product of the extents of the loops inside the innermost reduction loop: the "        \
      "accumulator tile a reduction updates per reduction step (log)")                        \
    X(F_REG_LOOPS, "reg.loops", "number of loops of extent > 1 inside the innermost reduction loop") \
    X(F_REDUCE_INNER_EXTENT, "reduce.inner_extent", "extent of the innermost reduction loop (log)") \
    GPU_FEATURES(X)

#define AS_ENUM(id, name, doc) id,
enum { FEATURE_LIST(AS_ENUM) F__COUNT };
#undef AS_ENUM

_Static_assert(F__COUNT == KT_FEATURE_COUNT, "KT_FEATURE_COUNT must match the feature table");
_Static_assert(F_B1_ACC_READ - F_B0_ACC_READ == KT_FEATURE_BUF_VALUES, "buffer block size");
_Static_assert(F_CURVE9 - F_CURVE0 + 1 == KT_FEATURE_CURVE, "curve size");

static const struct {
    const char *name, *doc;
} feature_table[] = {
#define AS_ROW(id, name, doc) {name, doc},
    FEATURE_LIST(AS_ROW)
#undef AS_ROW
};

const char *kt_feature_name(int i)
{
    return i >= 0 && i < KT_FEATURE_COUNT ? feature_table[i].name : NULL;
}

const char *kt_feature_doc(int i)
{
    return i >= 0 && i < KT_FEATURE_COUNT ? feature_table[i].doc : NULL;
}

/* Offsets inside one buffer block and one annotation block. */
enum {
    B_ACC_READ = 0, B_ACC_WRITE, B_ACC_RW, B_BYTES, B_UNIQUE_BYTES, B_LINES, B_UNIQUE_LINES,
    B_REUSE_LOOP, B_REUSE_SERIAL, B_REUSE_NONE, B_REUSE_DIS_ITER, B_REUSE_DIS_BYTES, B_REUSE_CT,
    B_BYTES_D_REUSE, B_UBYTES_D_REUSE, B_LINES_D_REUSE, B_ULINES_D_REUSE, B_STRIDE,
};
enum { A_NUM = 0, A_PROD, A_INNER, A_POS };
enum {
    POS_NONE = 0, POS_INNER_SPATIAL, POS_MIDDLE_SPATIAL, POS_OUTER_SPATIAL, POS_INNER_REDUCE,
    POS_MIDDLE_REDUCE, POS_OUTER_REDUCE, POS_MIXED,
};
_Static_assert(F_B0_BYTES - F_B0_ACC_READ == B_BYTES, "buffer block layout");
_Static_assert(F_B0_STRIDE - F_B0_ACC_READ == B_STRIDE, "buffer block layout");
_Static_assert(F_VEC_POS_MIXED - F_VEC_NUM == A_POS + POS_MIXED, "annotation block layout");
_Static_assert(F_UNROLL_NUM - F_VEC_NUM == F_PAR_NUM - F_UNROLL_NUM, "annotation blocks");

/* Number of op-count features: they come first. */
#define NOPS (F_CAST + 1)

static float slog(double x)
{
    if (!(x > 0))   /* also NaN */
        return 0.0f;
    if (x > 1e300)
        x = 1e300;
    return (float)log2(1.0 + x);
}

/* ---- composed index expressions ------------------------------------------------
 * An index of a buffer dimension as c0 + sum co[t] * iter[t] over lowered
 * iterators. Floor division keeps fractional coefficients (the range and
 * the stride stay right on average); a modulo caps the number of distinct
 * values; products of iterators, min, max and selects inside an index are
 * `opaque`: the access may touch the whole dimension whenever one of the
 * iterators it depends on moves.
 *
 * st[t] is the index's step when iter[t] goes from 0 to 1: co[t] on CPU; on
 * GPU, where fused block and thread loops are split back into axes by / and
 * % (derived iterators), the exact step, since an average slope adds up the
 * quotient and remainder digits of one iterator (a thread stepping one
 * element along a row would seem to step a row and an element). Address
 * steps (strides, lines, contiguity) use st; footprints use co. */
typedef struct {
    double c0;
    int n;
    int it[LF_TERMS];
    double co[LF_TERMS];
    double st[LF_TERMS];
    double cap;   /* most distinct values, 0: no cap */
    int opaque;
} lf_t;

static void lf_const(lf_t *x, double v)
{
    x->c0 = v;
    x->n = 0;
    x->cap = 0;
    x->opaque = 0;
}

static void lf_term2(lf_t *x, int it, double co, double st)
{
    for (int t = 0; t < x->n; t++)
        if (x->it[t] == it) {
            x->co[t] += co;
            x->st[t] += st;
            return;
        }
    if (x->n < LF_TERMS) {
        x->it[x->n] = it;
        x->st[x->n] = st;
        x->co[x->n++] = co;
    } else {
        x->opaque = 1;   /* too many iterators to track exactly */
    }
}

static void lf_term(lf_t *x, int it, double co)
{
    lf_term2(x, it, co, co);
}

/* x = x + s * y */
static void lf_add(lf_t *x, const lf_t *y, double s)
{
    int both = x->n > 0 && y->n > 0;
    if (both)
        x->cap = 0;   /* the sum of two moving parts spans more values */
    else if (y->n > 0)
        x->cap = y->cap;
    x->c0 += s * y->c0;
    for (int t = 0; t < y->n; t++)
        lf_term2(x, y->it[t], s * y->co[t], s * y->st[t]);
    x->opaque |= y->opaque;
}

static void lf_scale(lf_t *x, double s)
{
    x->c0 *= s;
    for (int t = 0; t < x->n; t++) {
        x->co[t] *= s;
        x->st[t] *= s;
    }
}

/* Union of the iterators of x and y, coefficients 1: a non-affine result. */
static void lf_opaque(lf_t *x, const lf_t *y)
{
    for (int t = 0; t < x->n; t++)
        x->co[t] = 1;
    for (int t = 0; t < y->n; t++)
        lf_term(x, y->it[t], 0);
    for (int t = 0; t < x->n; t++)
        x->co[t] = x->st[t] = 1;
    x->opaque = 1;
    x->cap = 0;
}

/* A lowered index (sum c_t * i_t) / div % mod. Fused reduce axes split
 * along their boundaries (rfactor) make div and mod exact for most terms: a
 * term below div whose companions are all multiples of div never changes
 * the quotient, and a term that is a multiple of mod never changes the
 * remainder; such terms are dropped, the others keep c_t / div. */
/* Value of index ix (GPU: through derived iterators) where loop iterator
 * `one` is 1 and every other loop iterator 0 (one < 0: all 0). */
static double eval_index(const kt_lower_index_t *ix, const kt_lower_t *L, int one, int depth)
{
    int64_t sum = 0;
    int n = ix->nterms < KT_LOWER_MAX_TERMS ? ix->nterms : KT_LOWER_MAX_TERMS;
    for (int t = 0; t < n; t++) {
        int it = ix->iter[t];
        int64_t v = 0;
        if (it == one)
            v = 1;
        else if (it >= 0 && it < L->niters && L->iters[it].derived && depth < DERIVED_DEPTH)
            v = (int64_t)eval_index(&L->iters[it].def, L, one, depth + 1);
        sum += ix->coef[t] * v;
    }
    int64_t div = ix->div > 0 ? ix->div : 1;
    int64_t q = sum / div - (sum % div != 0 && sum < 0);
    if (ix->mod > 0)
        q = (q % ix->mod + ix->mod) % ix->mod;
    return (double)q;
}

static void lf_from_lower_d(lf_t *x, const kt_lower_index_t *ix, const kt_lower_t *L, int depth);

static void lf_from_lower(lf_t *x, const kt_lower_index_t *ix, const kt_lower_t *L)
{
    lf_from_lower_d(x, ix, L, 0);
    if (L->target != KT_SCHED_TARGET_CUDA)
        return;
    double base = eval_index(ix, L, -1, 0);
    for (int t = 0; t < x->n; t++)
        x->st[t] = eval_index(ix, L, x->it[t], 0) - base;
}

static void lf_from_lower_d(lf_t *x, const kt_lower_index_t *ix, const kt_lower_t *L, int depth)
{
    lf_const(x, 0);
    int pieces = 0;       /* terms that move: one derived piece keeps its cap */
    double piece_cap = 0;
    int64_t div = ix->div > 0 ? ix->div : 1;
    int n = ix->nterms < KT_LOWER_MAX_TERMS ? ix->nterms : KT_LOWER_MAX_TERMS;
    for (int t = 0; t < n; t++) {
        int64_t c = ix->coef[t];
        int it = ix->iter[t];
        int64_t ext = it >= 0 && it < L->niters ? L->iters[it].extent : 0;
        if (div > 1 && c >= 0 && ext > 0 && c * (ext - 1) < div) {
            int others = 1;
            for (int u = 0; u < n && others; u++)
                others = u == t || ix->coef[u] % div == 0;
            if (others)
                continue;
        }
        if (ix->mod > 0 && c % div == 0 && (c / div) % ix->mod == 0)
            continue;
        if (it >= 0 && it < L->niters && L->iters[it].derived) {
            /* GPU: the iterator's definition in terms of the loops */
            if (depth >= DERIVED_DEPTH) {
                x->opaque = 1;
                continue;
            }
            lf_t sub;
            lf_from_lower_d(&sub, &L->iters[it].def, L, depth + 1);
            if (sub.n > 0 || sub.opaque) {
                pieces++;
                piece_cap = sub.cap;
            }
            lf_add(x, &sub, (double)c / (double)div);
        } else {
            pieces++;
            piece_cap = 0;
            lf_term(x, it, (double)c / (double)div);
        }
    }
    x->cap = pieces == 1 ? piece_cap : 0;
    if (ix->mod > 0 && (x->cap <= 0 || x->cap > (double)ix->mod))
        x->cap = (double)ix->mod;
}

/* ---- per-extraction scratch --------------------------------------------------- */

typedef struct {
    int buf;
    int read, write;   /* this access reads / writes */
    int ndim;
    lf_t idx[KT_TE_MAX_DIMS + 1];
} access_t;

typedef struct {
    int buf;
    int read, write, nacc;
    double bytes, unique, lines, ulines;
    double reuse_ct, dis_iter, dis_bytes;
    int reuse_type;   /* 0 loop, 1 serial, 2 none */
    double stride;
} bufsum_t;

typedef struct {
    int node;      /* the STMT node */
    int depth;     /* loops around it */
    int loops;     /* offset of its loop-node list in loopstack */
    int order;     /* program order */
    int kernel;    /* GPU: its kernel, -1 on CPU */
    double frac;   /* GPU: share of its loops' iterations its guards let through */
} stmt_info_t;

/* GPU: what one kernel allocates and synchronizes. */
typedef struct {
    double vthreads;      /* extent of its VTHREAD loop, 1 without */
    double local_bytes;   /* LOCAL buffers per thread */
    double barriers;      /* barriers per thread */
    double block, thread; /* extents of its BLOCK and THREAD loops */
} kstat_t;

typedef struct {
    const kt_dag_t *dag;
    const kt_sched_state_t *st;
    const kt_lower_t *L;
    int rc;
    int gbuf[KT_TE_MAX_STAGES];     /* global buffer of each stage, -1 */
    /* tree walk results */
    stmt_info_t *sinfo;             /* per statement */
    int *loopstack;                 /* concatenated loop-node lists */
    int nloopstack, cap_loopstack;
    int *node_lo, *node_hi;         /* LOOP node: statement orders [lo, hi) inside it */
    int *order_stmt;                /* statement of each program order */
    double *alloc_outer;            /* LOCAL buffer: product of loops around its ALLOC */
    kstat_t *kstat;                 /* GPU: per kernel */
    int *iter_depth;                /* during one statement: depth of each iterator, -1 */
    /* buffer sets of every statement, for serial reuse */
    int *sbufs;                     /* nstmts * MAX_SBUF, -1 padded */
    double *tested;                 /* CPU: per statement, kt_codegen_c_tested_share */
    int cap_lo, cap_hi, cap_sinfo, cap_order, cap_sbufs, cap_iters, cap_bufs, cap_kstat,
        cap_tested;
    /* current statement */
    const kt_lower_stmt_t *stmt;
    double test_share;                       /* its entry of tested (1 on GPUs) */
    access_t acc[MAX_ACC];
    int nacc;
    double ops[NOPS];
    /* its loops, outermost first */
    const int *loops;                        /* LOOP nodes */
    int depth;
    double trip;                             /* executions: loop iterations times guard share */
    double ext[MAX_DEPTH];                   /* extents */
    double inner_prod[MAX_DEPTH + 1];        /* product of the extents of loops [i, depth) */
    /* its buffers and, per access, the address step of each loop and the
     * index range per dimension at the level swept so far */
    bufsum_t bs[MAX_SBUF];
    int nbs;
    int accbuf[MAX_ACC];                     /* bs[] entry of each access, -1: not described */
    double flat[MAX_ACC][MAX_DEPTH];
    double lo[MAX_ACC][KT_TE_MAX_DIMS + 1], hi[MAX_ACC][KT_TE_MAX_DIMS + 1];
    int moved[MAX_ACC][KT_TE_MAX_DIMS + 1];
    double uniq[MAX_SBUF][MAX_DEPTH + 1];    /* unique elements per buffer and level */
    double level_bytes[MAX_DEPTH + 1];       /* bytes of all buffers touched per level */
} ctx_t;

static void ctx_free(ctx_t *c)
{
    if (!c)
        return;
    free(c->sinfo);
    free(c->loopstack);
    free(c->node_lo);
    free(c->node_hi);
    free(c->order_stmt);
    free(c->alloc_outer);
    free(c->kstat);
    free(c->iter_depth);
    free(c->sbufs);
    free(c->tested);
    free(c);
}

static int grow_arr(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int ncap = *cap ? *cap : 64;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, (size_t)ncap * elem);
    if (!np)
        return kt_err_set(KT_ENOMEM, "features: out of memory");
    *p = np;
    *cap = ncap;
    return 0;
}

/* Size the scratch arrays for L (reused across a batch). */
static int ctx_prepare(ctx_t *c, const kt_lower_t *L)
{
    if (grow_arr((void **)&c->node_lo, &c->cap_lo, L->nnodes, sizeof(int)) ||
        grow_arr((void **)&c->node_hi, &c->cap_hi, L->nnodes, sizeof(int)) ||
        grow_arr((void **)&c->sinfo, &c->cap_sinfo, L->nstmts, sizeof(stmt_info_t)) ||
        grow_arr((void **)&c->order_stmt, &c->cap_order, L->nstmts, sizeof(int)) ||
        grow_arr((void **)&c->sbufs, &c->cap_sbufs, L->nstmts * MAX_SBUF, sizeof(int)) ||
        grow_arr((void **)&c->iter_depth, &c->cap_iters, L->niters, sizeof(int)) ||
        grow_arr((void **)&c->alloc_outer, &c->cap_bufs, L->nbufs, sizeof(double)) ||
        grow_arr((void **)&c->kstat, &c->cap_kstat, L->nkernels, sizeof(kstat_t)) ||
        grow_arr((void **)&c->tested, &c->cap_tested, L->nstmts, sizeof(double)))
        return KT_ENOMEM;
    return 0;
}

/* ---- the tree walk: loops around each statement -------------------------------- */

/* GPU: the share of the values of guard g's index that pass it (values
 * spread evenly over the index's range, as the iterations of a fused loop
 * are). */
static double guard_share(const kt_lower_t *L, int g)
{
    if (g < 0 || g >= L->nguards)
        return 1;
    lf_t x;
    lf_from_lower(&x, &L->guards[g].idx, L);
    double lo = x.c0, hi = x.c0;
    for (int t = 0; t < x.n; t++) {
        int it = x.it[t];
        double e = it >= 0 && it < L->niters ? (double)L->iters[it].extent : 1;
        double span = x.co[t] * (e > 1 ? e - 1 : 0);
        *(span < 0 ? &lo : &hi) += span;
    }
    double range = floor(hi) - floor(lo) + 1;
    if (x.cap > 0 && range > x.cap)
        range = x.cap;
    if (x.opaque || range < 1)
        return 1;
    double pass = (double)L->guards[g].bound - floor(lo);
    return pass >= range ? 1 : pass < 1 ? 1 / range : pass / range;
}

static void walk_tree(ctx_t *c, int node, int *stack, int depth, double outer, double frac,
                      int kernel, int *norder)
{
    const kt_lower_t *L = c->L;
    for (int x = node; x >= 0 && !c->rc; x = L->nodes[x].next) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind == KT_NODE_LOOP) {
            if (depth >= MAX_DEPTH || nd->iter < 0 || nd->iter >= L->niters) {
                c->rc = kt_err_set(KT_EINVAL, "features: malformed loop nest");
                return;
            }
            c->node_lo[x] = *norder;
            stack[depth] = x;
            double e = (double)L->iters[nd->iter].extent;
            if (e < 1)
                e = 1;
            if (kernel >= 0) {
                kstat_t *k = &c->kstat[kernel];
                if (nd->ann == KT_LOOP_BLOCK)
                    k->block *= e;
                else if (nd->ann == KT_LOOP_THREAD)
                    k->thread *= e;
                else if (nd->ann == KT_LOOP_VTHREAD && e > k->vthreads)
                    k->vthreads = e;   /* the init, compute and epilogue nests repeat it */
            }
            walk_tree(c, nd->child, stack, depth + 1, outer * e, frac, kernel, norder);
            c->node_hi[x] = *norder;
        } else if (nd->kind == KT_NODE_KERNEL) {
            if (nd->kernel < 0 || nd->kernel >= L->nkernels) {
                c->rc = kt_err_set(KT_EINVAL, "features: malformed kernel node");
                return;
            }
            kstat_t *k = &c->kstat[nd->kernel];
            memset(k, 0, sizeof(*k));
            k->vthreads = k->block = k->thread = 1;
            walk_tree(c, nd->child, stack, depth, outer, frac, nd->kernel, norder);
        } else if (nd->kind == KT_NODE_GUARD) {
            walk_tree(c, nd->child, stack, depth, outer, frac * guard_share(L, nd->guard), kernel,
                      norder);
        } else if (nd->kind == KT_NODE_BARRIER) {
            if (kernel >= 0) {
                /* every thread passes it once per iteration of its loops
                 * inside the thread loop */
                const kstat_t *k = &c->kstat[kernel];
                c->kstat[kernel].barriers += outer / (k->block * k->thread);
            }
        } else if (nd->kind == KT_NODE_ALLOC) {
            if (nd->buf >= 0 && nd->buf < L->nbufs) {
                c->alloc_outer[nd->buf] = outer;
                const kt_lower_buf_t *b = &L->bufs[nd->buf];
                if (kernel >= 0 && b->kind == KT_BUF_LOCAL) {
                    double bytes = ELEM_BYTES;
                    for (int d = 0; d < b->ndim; d++)
                        bytes *= (double)b->shape[d];
                    c->kstat[kernel].local_bytes += bytes;
                }
            }
        } else if (nd->kind == KT_NODE_STMT) {
            if (nd->stmt < 0 || nd->stmt >= L->nstmts || *norder >= L->nstmts) {
                c->rc = kt_err_set(KT_EINVAL, "features: malformed statement node");
                return;
            }
            stmt_info_t *si = &c->sinfo[nd->stmt];
            if (grow_arr((void **)&c->loopstack, &c->cap_loopstack, c->nloopstack + depth,
                         sizeof(int))) {
                c->rc = KT_ENOMEM;
                return;
            }
            si->node = x;
            si->depth = depth;
            si->loops = c->nloopstack;
            memcpy(c->loopstack + c->nloopstack, stack, (size_t)depth * sizeof(int));
            c->nloopstack += depth;
            si->order = *norder;
            si->kernel = kernel;
            si->frac = frac;
            c->order_stmt[(*norder)++] = nd->stmt;
        }
    }
}

/* ---- expressions: op counts and accesses ---------------------------------------- */

static void add_access(ctx_t *c, int buf, int read, int write, int ndim, const lf_t *idx)
{
    if (buf < 0 || c->nacc >= MAX_ACC)
        return;   /* more accesses than rows can describe: the first ones count */
    access_t *a = &c->acc[c->nacc++];
    a->buf = buf;
    a->read = read;
    a->write = write;
    a->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        a->idx[d] = idx[d];
}

static void add_lower_access(ctx_t *c, int buf, int read, int write,
                             const kt_lower_index_t *ix)
{
    if (buf < 0 || buf >= c->L->nbufs)
        return;
    lf_t idx[KT_TE_MAX_DIMS + 1];
    int nd = c->L->bufs[buf].ndim;
    for (int d = 0; d < nd; d++)
        lf_from_lower(&idx[d], &ix[d], c->L);
    add_access(c, buf, read, write, nd, idx);
}

/* Walk expression e of stage `stage` whose axis a has index env[a]: count
 * its ops into c->ops, record its loads, and for integer expressions leave
 * the composed index in *out. */
static void walk_expr(ctx_t *c, const kt_stage_t *s, const kt_expr_t *e, const lf_t *env,
                      int inl, lf_t *out)
{
    lf_const(out, 0);
    if (!e || c->rc)
        return;
    int isf = e->dtype == KT_DT_F32;
    lf_t a, b;
    switch (e->kind) {
    case KT_EX_CONST:
        lf_const(out, e->dtype == KT_DT_F32 ? 0 : (double)e->ival);
        return;
    case KT_EX_AXIS:
        if (e->axis >= 0 && e->axis < s->ndim + s->nreduce)
            *out = env[e->axis];
        return;
    case KT_EX_ADD:
    case KT_EX_SUB:
        walk_expr(c, s, e->args[0], env, inl, out);
        walk_expr(c, s, e->args[1], env, inl, &b);
        if (isf) {
            c->ops[F_FLOAT_ADDSUB]++;
            if (e->args[0]->kind == KT_EX_MUL || e->args[1]->kind == KT_EX_MUL)
                c->ops[F_FLOAT_MAD]++;
        } else {
            c->ops[F_INT_ADDSUB]++;
            lf_add(out, &b, e->kind == KT_EX_SUB ? -1 : 1);
        }
        return;
    case KT_EX_MUL:
        walk_expr(c, s, e->args[0], env, inl, out);
        walk_expr(c, s, e->args[1], env, inl, &b);
        if (isf) {
            c->ops[F_FLOAT_MUL]++;
        } else {
            c->ops[F_INT_MUL]++;
            if (b.n == 0 && !b.opaque)
                lf_scale(out, b.c0);
            else if (out->n == 0 && !out->opaque) {
                double k = out->c0;
                *out = b;
                lf_scale(out, k);
            } else {
                lf_opaque(out, &b);
            }
        }
        return;
    case KT_EX_DIV:
        walk_expr(c, s, e->args[0], env, inl, out);
        walk_expr(c, s, e->args[1], env, inl, &b);
        c->ops[F_FLOAT_DIV]++;
        return;
    case KT_EX_FLOORDIV:
    case KT_EX_FLOORMOD:
        walk_expr(c, s, e->args[0], env, inl, out);
        walk_expr(c, s, e->args[1], env, inl, &b);
        c->ops[F_INT_DIVMOD]++;
        if (b.n > 0 || b.opaque || b.c0 <= 0) {
            lf_opaque(out, &b);
        } else if (e->kind == KT_EX_FLOORDIV) {
            lf_scale(out, 1.0 / b.c0);
            if (out->cap > 0)
                out->cap = (out->cap - 1) / b.c0 + 1;
        } else if (out->n > 0) {
            out->cap = out->cap > 0 && out->cap < b.c0 ? out->cap : b.c0;
        } else {
            out->c0 = fmod(out->c0, b.c0);
        }
        return;
    case KT_EX_MIN:
    case KT_EX_MAX:
        walk_expr(c, s, e->args[0], env, inl, out);
        walk_expr(c, s, e->args[1], env, inl, &b);
        if (isf) {
            c->ops[F_FLOAT_MAXMIN]++;
        } else {
            c->ops[F_INT_MAXMIN]++;
            if (b.n > 0 || b.opaque)
                lf_opaque(out, &b);
        }
        return;
    case KT_EX_LT: case KT_EX_LE: case KT_EX_GT: case KT_EX_GE: case KT_EX_EQ: case KT_EX_NE:
        walk_expr(c, s, e->args[0], env, inl, &a);
        walk_expr(c, s, e->args[1], env, inl, &b);
        c->ops[e->args[0]->dtype == KT_DT_F32 ? F_FLOAT_CMP : F_INT_CMP]++;
        return;
    case KT_EX_AND:
    case KT_EX_OR:
        walk_expr(c, s, e->args[0], env, inl, &a);
        walk_expr(c, s, e->args[1], env, inl, &b);
        c->ops[F_BOOL_OP]++;
        return;
    case KT_EX_NOT:
        walk_expr(c, s, e->args[0], env, inl, &a);
        c->ops[F_BOOL_OP]++;
        return;
    case KT_EX_SELECT: {
        /* Both branches count, as in Ansor: the cost model learns the rest.
         * An inlined padding's test counts where the C still runs it: the
         * emitter drops it from partitioned loops and tile interiors. */
        int scale = inl > 0 && c->test_share < 1;
        double before[NOPS];
        if (scale)
            memcpy(before, c->ops, sizeof(before));
        walk_expr(c, s, e->args[0], env, inl, &a);
        c->ops[F_SELECT]++;
        for (int i = 0; scale && i < NOPS; i++)
            c->ops[i] = before[i] + (c->ops[i] - before[i]) * c->test_share;
        walk_expr(c, s, e->args[1], env, inl, out);
        walk_expr(c, s, e->args[2], env, inl, &b);
        if (e->dtype == KT_DT_INT && (b.n > 0 || b.opaque || out->n > 0))
            lf_opaque(out, &b);
        return;
    }
    case KT_EX_CAST:
        walk_expr(c, s, e->args[0], env, inl, out);
        c->ops[F_CAST]++;
        return;
    case KT_EX_CALL:
        walk_expr(c, s, e->args[0], env, inl, &a);
        c->ops[e->fn == KT_FN_EXP ? F_FLOAT_EXP : F_FLOAT_MATH]++;
        return;
    case KT_EX_LOAD: {
        const kt_stage_t *p = kt_dag_stage(c->dag, e->tensor);
        if (!p || e->nargs != p->ndim || e->nargs > KT_TE_MAX_DIMS) {
            c->rc = kt_err_set(KT_EINVAL, "features: bad load in stage '%s'", s->name);
            return;
        }
        lf_t idx[KT_TE_MAX_DIMS];
        for (int i = 0; i < e->nargs; i++)
            walk_expr(c, s, e->args[i], env, inl, &idx[i]);
        const kt_lower_stmt_t *st = c->stmt;
        /* GPU: a producer staged in shared memory is read from its box */
        int k = (int)(st - c->L->stmts);
        for (int x = 0; x < c->L->nsubs; x++) {
            const kt_lower_sub_t *sub = &c->L->subs[x];
            if (sub->stmt == k && sub->stage == e->tensor) {
                add_lower_access(c, sub->buf, 1, 0, sub->idx);
                return;
            }
        }
        if (e->tensor < 64 && ((c->L->inline_mask >> e->tensor) & 1u) && p->body) {
            if (inl >= INLINE_DEPTH) {
                c->rc = kt_err_set(KT_EINVAL, "features: inlining nested too deeply");
                return;
            }
            walk_expr(c, p, p->body, idx, inl + 1, &a);
        } else if (st->src >= 0 && e->tensor == st->src_stage) {
            /* a fused consumer reads its producer's local tile */
            add_lower_access(c, st->src, 1, 0, st->src_idx);
        } else if (e->tensor < KT_TE_MAX_STAGES) {
            add_access(c, c->gbuf[e->tensor], 1, 0, e->nargs, idx);
        }
        return;
    }
    default:
        return;
    }
}

/* Ops and accesses of statement k. */
static void stmt_accesses(ctx_t *c, const kt_lower_stmt_t *st)
{
    c->stmt = st;
    c->test_share = c->L->target == KT_SCHED_TARGET_CPU ? c->tested[st - c->L->stmts] : 1;
    c->nacc = 0;
    memset(c->ops, 0, sizeof(c->ops));
    const kt_stage_t *s = kt_dag_stage(c->dag, st->stage);
    if (!s) {
        c->rc = kt_err_set(KT_EINVAL, "features: statement of unknown stage %d", st->stage);
        return;
    }
    int combine = st->kind == KT_STMT_UPDATE || st->kind == KT_STMT_COMBINE ||
                  st->kind == KT_STMT_ALLREDUCE;
    /* the store (and the read of the accumulator) first */
    add_lower_access(c, st->dst, combine, 1, st->dst_idx);
    if (st->kind == KT_STMT_COPY || st->kind == KT_STMT_COMBINE ||
        (st->kind == KT_STMT_FETCH && st->src >= 0))
        add_lower_access(c, st->src, 1, 0, st->src_idx);
    if (st->kind == KT_STMT_ALLREDUCE && st->src >= 0)
        add_lower_access(c, st->src, 1, 1, st->src_idx);   /* the per-warp partials */
    /* GPU: a fetch of an inlined producer computes its body at the box element */
    int body = st->kind == KT_STMT_COMPUTE || st->kind == KT_STMT_UPDATE ||
               (st->kind == KT_STMT_FETCH && st->src < 0);
    if (body && s->body) {
        lf_t env[KT_SCHED_MAX_AXES], v;
        int na = s->ndim + s->nreduce;
        for (int a = 0; a < na && a < KT_SCHED_MAX_AXES; a++)
            lf_from_lower(&env[a], &st->axis[a], c->L);
        walk_expr(c, s, s->body, env, 0, &v);
    }
    if (combine) {
        if (s->rop == KT_RED_MAX) {
            c->ops[F_FLOAT_MAXMIN]++;
        } else {
            c->ops[F_FLOAT_ADDSUB]++;
            if (st->kind == KT_STMT_UPDATE && s->body && s->body->kind == KT_EX_MUL)
                c->ops[F_FLOAT_MAD]++;
        }
    }
}

/* ---- one statement's features --------------------------------------------------- */

static int stmt_has_buf(const ctx_t *c, int stmt, int buf)
{
    const int *b = c->sbufs + (size_t)stmt * MAX_SBUF;
    for (int i = 0; i < MAX_SBUF && b[i] >= 0; i++)
        if (b[i] == buf)
            return 1;
    return 0;
}

static void row_strides(const kt_lower_buf_t *b, double *rs)
{
    double r = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        rs[d] = r;
        r *= (double)(b->shape[d] > 0 ? b->shape[d] : 1);
    }
}

static void ann_features(const ctx_t *c, const int *loops, int depth, kt_loop_ann_t ann,
                         float *f)
{
    const kt_lower_t *L = c->L;
    int num = 0, inner_lo = -1, inner_hi = -1;
    double prod = 1;
    for (int i = 0; i < depth; i++) {
        const kt_lower_node_t *nd = &L->nodes[loops[i]];
        if (nd->ann != ann)
            continue;
        prod *= (double)L->iters[nd->iter].extent;
        /* neighbouring loops with the annotation are one fused loop */
        if (i == 0 || L->nodes[loops[i - 1]].ann != ann) {
            num++;
            inner_lo = i;
        }
        inner_hi = i;
    }
    f[A_NUM] = (float)num;
    f[A_PROD] = num ? slog(prod) : 0.0f;
    int pos = POS_NONE;
    if (num) {
        double inner = 1;
        int sp = 0, rd = 0;
        for (int i = inner_lo; i <= inner_hi; i++) {
            const kt_lower_iter_t *it = &L->iters[L->nodes[loops[i]].iter];
            inner *= (double)it->extent;
            *(it->reduce ? &rd : &sp) = 1;
        }
        f[A_INNER] = slog(inner);
        int where = inner_hi == depth - 1 ? 0 : inner_lo == 0 ? 2 : 1;
        pos = sp && rd ? POS_MIXED : (rd ? POS_INNER_REDUCE : POS_INNER_SPATIAL) + where;
    }
    f[A_POS + pos] = 1.0f;
}

/* The loops around statement k. */
static void stmt_loops(ctx_t *c, int k)
{
    const kt_lower_t *L = c->L;
    const stmt_info_t *si = &c->sinfo[k];
    c->loops = c->loopstack + si->loops;
    c->depth = si->depth;
    for (int i = 0; i < c->depth; i++) {
        int it = L->nodes[c->loops[i]].iter;
        c->ext[i] = (double)(L->iters[it].extent > 0 ? L->iters[it].extent : 1);
        c->iter_depth[it] = i;
    }
    c->inner_prod[c->depth] = 1;
    for (int i = c->depth - 1; i >= 0; i--)
        c->inner_prod[i] = c->inner_prod[i + 1] * c->ext[i];
}

/* Depth of iterator `it` among the statement's loops, -1 when outside. */
static int depth_of(const ctx_t *c, int it)
{
    return it >= 0 && it < c->L->niters ? c->iter_depth[it] : -1;
}

/* Group the accesses by buffer and compute each one's address step per loop. */
static void group_accesses(ctx_t *c)
{
    const kt_lower_t *L = c->L;
    c->nbs = 0;
    for (int a = 0; a < c->nacc; a++) {
        const access_t *ac = &c->acc[a];
        int j = 0;
        while (j < c->nbs && c->bs[j].buf != ac->buf)
            j++;
        if (j == c->nbs) {
            if (c->nbs == MAX_SBUF) {
                c->accbuf[a] = -1;
                continue;
            }
            memset(&c->bs[j], 0, sizeof(c->bs[j]));
            c->bs[j].buf = ac->buf;
            c->nbs++;
        }
        c->accbuf[a] = j;
        c->bs[j].read |= ac->read;
        c->bs[j].write |= ac->write;
        c->bs[j].nacc += ac->read + ac->write;
        double rs[KT_TE_MAX_DIMS + 1];
        row_strides(&L->bufs[ac->buf], rs);
        for (int i = 0; i < c->depth; i++)
            c->flat[a][i] = 0;
        for (int d = 0; d < ac->ndim; d++)
            for (int t = 0; t < ac->idx[d].n; t++) {
                int dp = depth_of(c, ac->idx[d].it[t]);
                if (dp >= 0)
                    c->flat[a][dp] += ac->idx[d].st[t] * rs[d];
            }
    }
}

/* Distinct index values of dimension d of buffer bs[j] over its accesses,
 * at the level swept last: the union of their ranges, within the shape. */
static double dim_extent(const ctx_t *c, int j, int d)
{
    const kt_lower_buf_t *b = &c->L->bufs[c->bs[j].buf];
    double shape = (double)(b->shape[d] > 0 ? b->shape[d] : 1);
    double ulo = 0, uhi = 0;
    int any = 0;
    for (int a = 0; a < c->nacc; a++) {
        if (c->accbuf[a] != j || d >= c->acc[a].ndim)
            continue;
        const lf_t *x = &c->acc[a].idx[d];
        if (x->opaque && c->moved[a][d])
            return shape;
        double l = floor(c->lo[a][d]), h = floor(c->hi[a][d]);
        if (x->cap > 0 && h - l + 1 > x->cap)
            h = l + x->cap - 1;
        if (!any || l < ulo)
            ulo = l;
        if (!any || h > uhi)
            uhi = h;
        any = 1;
    }
    double e = uhi - ulo + 1;
    return e > shape ? shape : e < 1 ? 1 : e;
}

/* Unique elements of each buffer at each level (loops [lvl, depth) move,
 * the outer ones stay at 0), sweeping the levels from the innermost out;
 * ends with the ranges of level 0, the whole nest. */
static void footprints(ctx_t *c)
{
    for (int a = 0; a < c->nacc; a++)
        for (int d = 0; d < c->acc[a].ndim; d++) {
            c->lo[a][d] = c->hi[a][d] = c->acc[a].idx[d].c0;
            c->moved[a][d] = 0;
        }
    for (int lvl = c->depth; lvl >= 0; lvl--) {
        for (int a = 0; a < c->nacc && lvl < c->depth; a++) {
            const access_t *ac = &c->acc[a];
            for (int d = 0; d < ac->ndim; d++)
                for (int t = 0; t < ac->idx[d].n; t++) {
                    if (depth_of(c, ac->idx[d].it[t]) != lvl)
                        continue;
                    double span = ac->idx[d].co[t] * (c->ext[lvl] - 1);
                    *(span < 0 ? &c->lo[a][d] : &c->hi[a][d]) += span;
                    c->moved[a][d] = 1;
                }
        }
        c->level_bytes[lvl] = 0;
        for (int j = 0; j < c->nbs; j++) {
            const kt_lower_buf_t *b = &c->L->bufs[c->bs[j].buf];
            double n = 1;
            for (int d = 0; d < b->ndim; d++)
                n *= dim_extent(c, j, d);
            c->uniq[j][lvl] = n;
            c->level_bytes[lvl] += n * ELEM_BYTES;
        }
    }
}

/* Loop i moves some access of buffer bs[j]. */
static int loop_moves(const ctx_t *c, int j, int i)
{
    for (int a = 0; a < c->nacc; a++) {
        if (c->accbuf[a] != j)
            continue;
        if (fabs(c->flat[a][i]) >= 1e-12)
            return 1;
        const access_t *ac = &c->acc[a];
        for (int d = 0; d < ac->ndim; d++)
            for (int t = 0; t < ac->idx[d].n; t++)
                if (depth_of(c, ac->idx[d].it[t]) == i &&
                    (ac->idx[d].opaque || fabs(ac->idx[d].co[t]) >= 1e-12))
                    return 1;
    }
    return 0;
}

/* Bytes, lines, stride and reuse of buffer bs[j] in statement k. */
static void summarize_buffer(ctx_t *c, int k, int j)
{
    const kt_lower_t *L = c->L;
    bufsum_t *B = &c->bs[j];
    const kt_lower_buf_t *b = &L->bufs[B->buf];
    double trip = c->trip;
    B->bytes = (double)B->nacc * trip * ELEM_BYTES;
    B->unique = c->uniq[j][0] * ELEM_BYTES;
    /* unique lines: rows of the footprint times the lines of one row */
    double last = b->ndim > 0 ? dim_extent(c, j, b->ndim - 1) : 1;
    B->ulines = c->uniq[j][0] / last * ceil(last * ELEM_BYTES / LINE_BYTES);
    /* lines fetched: each access moves along its innermost moving loop */
    for (int a = 0; a < c->nacc; a++) {
        if (c->accbuf[a] != j)
            continue;
        double zero_run = 1, s = 0;
        int i = c->depth - 1;
        /* loops of extent 1 never move the address */
        for (; i >= 0 && (c->ext[i] <= 1 || fabs(c->flat[a][i]) < 1e-12); i--)
            zero_run *= c->ext[i];
        if (i >= 0)
            s = fabs(c->flat[a][i]);
        double frac = i < 0 ? 1 : fmin(1, s * ELEM_BYTES / LINE_BYTES);
        B->lines += fmax(1, trip / zero_run * frac) * (c->acc[a].read + c->acc[a].write);
        if (s > 0 && (B->stride == 0 || s < B->stride))
            B->stride = s;
    }
    /* the footprint is an estimate (bounding boxes, opaque indices): it can
     * neither exceed what is accessed nor go unfetched */
    B->unique = fmin(B->unique, B->bytes);
    B->lines = fmax(B->lines, B->ulines);
    /* reuse: the innermost loop that re-reads (its iterator moves no access
     * of this buffer), or inside which other statements access it again */
    B->reuse_type = 2;
    for (int i = c->depth - 1; i >= 0; i--) {
        if (c->ext[i] <= 1)
            continue;
        double ct = 0;
        int type = -1;
        if (!loop_moves(c, j, i)) {
            type = 0;
            ct = c->ext[i];
        } else {
            int node = c->loops[i];
            for (int o = c->node_lo[node]; o < c->node_hi[node]; o++) {
                int s2 = c->order_stmt[o];
                ct += s2 != k && stmt_has_buf(c, s2, B->buf);
            }
            type = ct > 0 ? 1 : -1;
        }
        if (type >= 0) {
            B->reuse_type = type;
            B->reuse_ct = ct;
            B->dis_iter = c->inner_prod[i + 1];
            B->dis_bytes = c->level_bytes[i + 1];
            break;
        }
    }
}

/* The buffer blocks: the 5 buffers with the most bytes (ties: the first accessed). */
static void buffer_features(const ctx_t *c, float *f)
{
    int order[MAX_SBUF];
    for (int j = 0; j < c->nbs; j++)
        order[j] = j;
    for (int x = 1; x < c->nbs; x++)
        for (int y = x; y > 0 && c->bs[order[y]].bytes > c->bs[order[y - 1]].bytes; y--) {
            int t = order[y];
            order[y] = order[y - 1];
            order[y - 1] = t;
        }
    for (int r = 0; r < c->nbs && r < KT_FEATURE_MAX_BUFS; r++) {
        const bufsum_t *B = &c->bs[order[r]];
        float *g = f + F_B0_ACC_READ + r * KT_FEATURE_BUF_VALUES;
        g[B->read && B->write ? B_ACC_RW : B->write ? B_ACC_WRITE : B_ACC_READ] = 1.0f;
        g[B_BYTES] = slog(B->bytes);
        g[B_UNIQUE_BYTES] = slog(B->unique);
        g[B_LINES] = slog(B->lines);
        g[B_UNIQUE_LINES] = slog(B->ulines);
        g[B_REUSE_LOOP + B->reuse_type] = 1.0f;
        g[B_REUSE_DIS_ITER] = slog(B->dis_iter);
        g[B_REUSE_DIS_BYTES] = slog(B->dis_bytes);
        g[B_REUSE_CT] = slog(B->reuse_ct);
        double rc = B->reuse_ct > 1 ? B->reuse_ct : 1;
        g[B_BYTES_D_REUSE] = slog(B->bytes / rc);
        g[B_UBYTES_D_REUSE] = slog(B->unique / rc);
        g[B_LINES_D_REUSE] = slog(B->lines / rc);
        g[B_ULINES_D_REUSE] = slog(B->ulines / rc);
        g[B_STRIDE] = slog(B->stride);
    }
}

/* Arithmetic intensity (float ops per byte touched) at each loop level,
 * sampled at 10 evenly spaced points of log2(ops) and interpolated
 * linearly between the levels, as Ansor's curve. */
static void intensity_curve(const ctx_t *c, float *f)
{
    double fops = 0;
    for (int i = 0; i <= F_FLOAT_CMP; i++)
        if (i != F_FLOAT_MAD)   /* its add and mul are counted already */
            fops += c->ops[i];
    if (fops <= 0)
        return;
    double xs[MAX_DEPTH + 1], ys[MAX_DEPTH + 1];
    int np = 0;
    for (int lvl = c->depth; lvl >= 0; lvl--) {
        double ops = fops * c->inner_prod[lvl];
        xs[np] = log2(ops);
        ys[np++] = ops / (c->level_bytes[lvl] > 0 ? c->level_bytes[lvl] : 1);
    }
    double xmax = xs[np - 1];
    int p = 0;
    for (int i = 0; i < KT_FEATURE_CURVE; i++) {
        double x = xmax * (i + 1) / KT_FEATURE_CURVE;
        while (p < np - 1 && xs[p] < x - 1e-9)
            p++;
        double y = p == 0 || xs[p] - xs[p - 1] < 1e-12
                       ? ys[p]
                       : ys[p - 1] + (ys[p] - ys[p - 1]) * (x - xs[p - 1]) / (xs[p] - xs[p - 1]);
        f[F_CURVE0 + i] = slog(y);
    }
}

/* The innermost loop and the accumulator tile: gcc vectorizes an innermost
 * loop whose accesses are contiguous or invariant even when the schedule
 * does not annotate it, and the tile inside the innermost reduction loop is
 * what stays in registers. Ansor's features leave both implicit. */
static void inner_features(const ctx_t *c, float *f)
{
    const kt_lower_t *L = c->L;
    int in = c->depth - 1;
    while (in >= 0 && c->ext[in] <= 1)
        in--;
    if (in >= 0) {
        f[F_INNER_EXTENT] = slog(c->ext[in]);
        f[F_INNER_REDUCE] = L->iters[L->nodes[c->loops[in]].iter].reduce ? 1.0f : 0.0f;
        int contig = 0, inv = 0, strided = 0;
        for (int a = 0; a < c->nacc; a++) {
            if (c->accbuf[a] < 0)
                continue;   /* not grouped: no address steps */
            double s = fabs(c->flat[a][in]);
            if (s < 1e-12)
                inv++;
            else if (fabs(s - 1) < 1e-12)
                contig++;
            else
                strided++;
        }
        f[F_INNER_CONTIG] = (float)contig;
        f[F_INNER_INVARIANT] = (float)inv;
        f[F_INNER_STRIDED] = (float)strided;
    }
    int rd = c->depth - 1;
    while (rd >= 0 && !(c->ext[rd] > 1 && L->iters[L->nodes[c->loops[rd]].iter].reduce))
        rd--;
    if (rd >= 0) {
        int loops = 0;
        for (int i = rd + 1; i < c->depth; i++)
            loops += c->ext[i] > 1;
        f[F_REG_TILE] = slog(c->inner_prod[rd + 1]);
        f[F_REG_LOOPS] = (float)loops;
        f[F_REDUCE_INNER_EXTENT] = slog(c->ext[rd]);
    }
}

/* GPU: the statement's kernel (its unroll step is the kernel stage's, a
 * fetch's statement names the producer). */
static void gpu_features(const ctx_t *c, int kern, float *f)
{
    const kt_lower_kernel_t *K = &c->L->kernels[kern];
    const kstat_t *k = &c->kstat[kern];
    const kt_sched_stage_t *e = K->stage >= 0 && K->stage < c->st->nstages
                                    ? &c->st->stages[K->stage]
                                    : NULL;
    f[F_GPU_BLOCK_X] = slog(k->block);
    f[F_GPU_THREAD_X] = slog(k->thread);
    f[F_GPU_VTHREAD] = slog(k->vthreads);
    f[F_GPU_THREADS] = slog(k->thread);
    f[F_GPU_BLOCKS] = slog(k->block);
    f[F_GPU_SMEM] = slog((double)K->smem_bytes);
    f[F_GPU_LOCAL] = slog(k->local_bytes);
    f[F_GPU_FETCH_VEC] = e && e->kind == KT_SK_TILED && e->smem ? (float)(e->vec > 0 ? e->vec : 1)
                                                               : 0.0f;
    double warps = ceil(k->thread / KT_SCHED_GPU_WARP);
    f[F_GPU_WARP_UTIL] = warps > 0 ? (float)(k->thread / (warps * KT_SCHED_GPU_WARP)) : 0.0f;
    f[F_GPU_BARRIERS] = slog(k->barriers);
    if (e)
        f[F_UNROLL_STEP] = slog(e->ann.unroll);
}

/* The features of statement k into f (op counts stay raw, times the trip
 * count, in c->ops for merging); returns its trip count. */
static double stmt_features(ctx_t *c, int k, float *f)
{
    const kt_lower_t *L = c->L;
    const kt_lower_stmt_t *st = &L->stmts[k];
    memset(f, 0, sizeof(float) * KT_FEATURE_COUNT);
    stmt_accesses(c, st);
    if (c->rc)
        return 0;
    stmt_loops(c, k);
    double trip = c->inner_prod[0] * c->sinfo[k].frac;
    c->trip = trip;

    ann_features(c, c->loops, c->depth, KT_LOOP_VECTORIZE, f + F_VEC_NUM);
    ann_features(c, c->loops, c->depth, KT_LOOP_UNROLL, f + F_UNROLL_NUM);
    ann_features(c, c->loops, c->depth, KT_LOOP_PARALLEL, f + F_PAR_NUM);

    group_accesses(c);
    footprints(c);
    for (int j = 0; j < c->nbs; j++)
        summarize_buffer(c, k, j);
    buffer_features(c, f);
    intensity_curve(c, f);
    inner_features(c, f);

    /* allocation of the stored buffer */
    if (st->dst >= 0 && st->dst < L->nbufs) {
        const kt_lower_buf_t *b = &L->bufs[st->dst];
        double bytes = ELEM_BYTES;
        for (int d = 0; d < b->ndim; d++)
            bytes *= (double)b->shape[d];
        if (b->kind == KT_BUF_LOCAL || b->kind == KT_BUF_HEAP) {
            double outer = b->kind == KT_BUF_LOCAL ? c->alloc_outer[st->dst] : 1;
            f[b->kind == KT_BUF_LOCAL ? F_ALLOC_LOCAL : F_ALLOC_HEAP] = slog(bytes);
            f[F_ALLOC_OUTER_PROD] = slog(outer);
            f[F_ALLOC_PROD] = slog(bytes * outer);
        }
    }

    f[F_OUTER_PROD] = slog(trip);
    f[F_NUM_LOOPS] = (float)c->depth;
    const kt_sched_stage_t *e = st->stage >= 0 && st->stage < c->st->nstages
                                    ? &c->st->stages[st->stage]
                                    : NULL;
    int kern = c->sinfo[k].kernel;
    if (kern >= 0 && kern < L->nkernels) {
        gpu_features(c, kern, f);
    } else if (e) {
        /* the rfactor final nest and a cache-write copy-out use ann2 */
        int second = (e->kind == KT_SK_RFACTOR && st->dst == c->gbuf[st->stage]) ||
                     (e->kind == KT_SK_TILED && e->cache_write && st->kind == KT_STMT_COPY &&
                      st->src_stage == st->stage);
        f[F_UNROLL_STEP] = slog(second ? e->ann2.unroll : e->ann.unroll);
    }
    for (int i = 0; i < c->depth; i++)
        c->iter_depth[L->nodes[c->loops[i]].iter] = -1;
    for (int i = 0; i < NOPS; i++)
        c->ops[i] *= trip;
    return trip;
}

/* ---- rows ---------------------------------------------------------------------- */

static int extract(ctx_t *c, const kt_dag_t *dag, const kt_sched_state_t *st, const kt_lower_t *L,
                   float **rows, uint32_t *nrows, int **row_buf)
{
    *rows = NULL;
    *nrows = 0;
    if (row_buf)
        *row_buf = NULL;
    c->dag = dag;
    c->st = st;
    c->L = L;
    c->rc = 0;
    c->nloopstack = 0;
    if (ctx_prepare(c, L))
        return KT_ENOMEM;
    if (L->target == KT_SCHED_TARGET_CPU && kt_codegen_c_tested_share(dag, L, c->tested))
        return kt_err_prefix("features");
    for (int i = 0; i < L->niters; i++)
        c->iter_depth[i] = -1;
    for (int b = 0; b < L->nbufs; b++)
        c->alloc_outer[b] = 1;
    for (int s = 0; s < KT_TE_MAX_STAGES; s++)
        c->gbuf[s] = -1;
    for (int b = 0; b < L->nbufs; b++) {
        const kt_lower_buf_t *lb = &L->bufs[b];
        /* global buffers come before the rfactor partials lowering adds */
        if (lb->kind != KT_BUF_LOCAL && lb->stage >= 0 && lb->stage < KT_TE_MAX_STAGES &&
            c->gbuf[lb->stage] < 0)
            c->gbuf[lb->stage] = b;
    }
    for (int k = 0; k < L->nstmts; k++)
        c->sinfo[k].node = -1;
    int stack[MAX_DEPTH], norder = 0;
    walk_tree(c, L->first, stack, 0, 1, 1, -1, &norder);
    if (c->rc)
        return c->rc;
    if (norder != L->nstmts)
        return kt_err_set(KT_EINVAL, "features: %d statements, %d in the tree", L->nstmts, norder);

    /* buffer sets of every statement */
    for (int k = 0; k < L->nstmts; k++) {
        stmt_accesses(c, &L->stmts[k]);
        if (c->rc)
            return c->rc;
        int *sb = c->sbufs + (size_t)k * MAX_SBUF, n = 0;
        for (int a = 0; a < c->nacc; a++) {
            int dup = 0;
            for (int i = 0; i < n && !dup; i++)
                dup = sb[i] == c->acc[a].buf;
            if (!dup && n < MAX_SBUF)
                sb[n++] = c->acc[a].buf;
        }
        for (int i = n; i < MAX_SBUF; i++)
            sb[i] = -1;
    }

    /* one row per stored buffer, in program order of its first store */
    int nr = 0;
    int *rb = malloc(sizeof(int) * (size_t)(L->nstmts ? L->nstmts : 1));
    float *out = malloc(sizeof(float) * KT_FEATURE_COUNT * (size_t)(L->nstmts ? L->nstmts : 1));
    double *ops = calloc((size_t)(L->nstmts ? L->nstmts : 1) * NOPS, sizeof(double));
    double *main_trip = malloc(sizeof(double) * (size_t)(L->nstmts ? L->nstmts : 1));
    float f[KT_FEATURE_COUNT];
    if (!rb || !out || !ops || !main_trip) {
        free(rb);
        free(out);
        free(ops);
        free(main_trip);
        return kt_err_set(KT_ENOMEM, "features: out of memory");
    }
    for (int o = 0; o < L->nstmts && !c->rc; o++) {
        int k = c->order_stmt[o];
        double trip = stmt_features(c, k, f);
        if (c->rc)
            break;
        int dst = L->stmts[k].dst, r = 0;
        while (r < nr && rb[r] != dst)
            r++;
        if (r == nr) {
            rb[nr++] = dst;
            main_trip[r] = -1;
        }
        for (int i = 0; i < NOPS; i++)
            ops[(size_t)r * NOPS + i] += c->ops[i];
        /* the statement that runs most often speaks for the row (ties: the
         * later one, the update after the init) */
        if (trip >= main_trip[r]) {
            main_trip[r] = trip;
            memcpy(out + (size_t)r * KT_FEATURE_COUNT, f, sizeof(f));
        }
    }
    free(main_trip);
    if (c->rc) {
        free(rb);
        free(out);
        free(ops);
        return c->rc;
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < NOPS; i++)
            out[(size_t)r * KT_FEATURE_COUNT + i] = slog(ops[(size_t)r * NOPS + i]);
    free(ops);
    *rows = out;
    *nrows = (uint32_t)nr;
    if (row_buf)
        *row_buf = rb;
    else
        free(rb);
    return 0;
}

int kt_feature_extract_lower(const kt_dag_t *dag, const kt_sched_state_t *st, const kt_lower_t *L,
                             float **rows, uint32_t *nrows, int **row_buf)
{
    if (!dag || !st || !L || !rows || !nrows)
        return kt_err_set(KT_EINVAL, "features: missing argument");
    ctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        return kt_err_set(KT_ENOMEM, "features: out of memory");
    int rc = extract(c, dag, st, L, rows, nrows, row_buf);
    ctx_free(c);
    return rc;
}

int kt_feature_extract(const kt_dag_t *dag, const kt_sched_state_t *st, float **rows,
                       uint32_t *nrows)
{
    if (!dag || !st || !rows || !nrows)
        return kt_err_set(KT_EINVAL, "features: missing argument");
    *rows = NULL;
    *nrows = 0;
    kt_lower_t *L = kt_lower_ex(dag, st, 1);   /* as measured: weights packed ahead */
    if (!L)
        return kt_err_prefix("features");
    int rc = kt_feature_extract_lower(dag, st, L, rows, nrows, NULL);
    kt_lower_free(L);
    return rc;
}

int kt_feature_extract_batch(const kt_dag_t *dag, const kt_sched_state_t *const *states, int n,
                             float **rows, uint32_t *counts)
{
    if (!dag || (n > 0 && (!states || !counts)) || n < 0 || !rows)
        return kt_err_set(KT_EINVAL, "features: bad batch arguments");
    *rows = NULL;
    ctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        return kt_err_set(KT_ENOMEM, "features: out of memory");
    float *all = NULL;
    size_t total = 0, cap = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        counts[i] = 0;
        kt_lower_t *L = states[i] ? kt_lower_ex(dag, states[i], 1) : NULL;
        if (!L)
            continue;   /* an invalid state: no rows */
        float *r = NULL;
        uint32_t nr = 0;
        rc = extract(c, dag, states[i], L, &r, &nr, NULL);
        kt_lower_free(L);
        if (rc) {
            if (rc == KT_ENOMEM)
                break;
            rc = 0;   /* a state the extractor rejects is dropped like an invalid one */
            continue;
        }
        if (total + nr > cap) {
            size_t ncap = cap ? cap * 2 : 256;
            while (ncap < total + nr)
                ncap *= 2;
            float *na = realloc(all, ncap * KT_FEATURE_COUNT * sizeof(float));
            if (!na) {
                free(r);
                rc = kt_err_set(KT_ENOMEM, "features: out of memory");
                break;
            }
            all = na;
            cap = ncap;
        }
        if (nr)
            memcpy(all + total * KT_FEATURE_COUNT, r, (size_t)nr * KT_FEATURE_COUNT * sizeof(float));
        free(r);
        total += nr;
        counts[i] = nr;
    }
    ctx_free(c);
    if (rc) {
        free(all);
        return rc;
    }
    *rows = all;
    return 0;
}
