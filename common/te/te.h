/*
 * The tensor-expression IR: a compute DAG of placeholder and compute stages
 * whose bodies are expression trees over the stage's axes (TVM's te /
 * ComputeDAG). It describes WHAT a task computes, never HOW: schedules live
 * in common/sched, lowering and C/CUDA emission in common/codegen.
 *
 * Conventions
 * - Only float32 tensors. Index arithmetic is int64; comparisons are bool.
 * - A compute stage has `ndim` spatial axes (its output shape) and `nreduce`
 *   reduce axes. Inside its body a KT_EX_AXIS node with `axis = a` names
 *   spatial axis a when a < ndim, reduce axis (a - ndim) otherwise.
 * - body is the value of out[spatial...]; when rop != KT_RED_NONE, the stage
 *   computes out = rop over all reduce axes of body, starting from the rop's
 *   identity (0 for sum, -inf for max).
 * - KT_EX_LOAD reads stage `tensor` (an index into dag->stages, always a
 *   producer earlier in topological order) at `nargs` index expressions.
 * - Stages are stored in topological order: producers before consumers.
 *
 * Ownership: every expression node, stage and string of a DAG is allocated in
 * the DAG's arena and freed by kt_dag_free(). Builder functions take the DAG
 * so they can allocate there. A finished DAG is immutable and may be read by
 * any number of threads; building one is single-threaded.
 */
#ifndef KT_TE_TE_H
#define KT_TE_TE_H

#include <stddef.h>
#include <stdint.h>

#define KT_TE_MAX_DIMS 8      /* spatial axes per stage */
#define KT_TE_MAX_REDUCE 4    /* reduce axes per stage */
#define KT_TE_MAX_STAGES 32   /* stages per DAG */
#define KT_TE_MAX_NAME 32     /* stage and axis names, NUL included */
#define KT_TE_MAX_EXTENT ((int64_t)1 << 30)  /* largest extent of one axis */
#define KT_TE_MAX_NUMEL ((int64_t)1 << 32)   /* largest element count of one stage */

/* Value types of expressions. */
typedef enum {
    KT_DT_INT = 0,   /* int64 index arithmetic */
    KT_DT_F32,       /* float32 tensor values */
    KT_DT_BOOL,      /* result of comparisons and logic */
} kt_dtype_t;

/* Expression node kinds. Binary nodes use args[0], args[1]. */
typedef enum {
    KT_EX_CONST = 0,  /* ival (KT_DT_INT/BOOL) or fval (KT_DT_F32) */
    KT_EX_AXIS,       /* axis of the owning stage, see header comment */
    KT_EX_ADD, KT_EX_SUB, KT_EX_MUL, KT_EX_DIV,  /* DIV: float division only */
    KT_EX_MIN, KT_EX_MAX,
    KT_EX_FLOORDIV, KT_EX_FLOORMOD,  /* int by a positive constant */
    KT_EX_LT, KT_EX_LE, KT_EX_GT, KT_EX_GE, KT_EX_EQ, KT_EX_NE,
    KT_EX_AND, KT_EX_OR, KT_EX_NOT,  /* bool logic (NOT: args[0]) */
    KT_EX_SELECT,     /* args[0] ? args[1] : args[2] (for padding) */
    KT_EX_CAST,       /* args[0] converted to node dtype */
    KT_EX_LOAD,       /* tensor[args[0..nargs-1]] */
    KT_EX_CALL,       /* math function `fn` of args[0] */
    KT_EX__COUNT
} kt_expr_kind_t;

/* Math functions for KT_EX_CALL. */
typedef enum { KT_FN_EXP = 0, KT_FN_SQRT, KT_FN_RSQRT, KT_FN_TANH, KT_FN_ERF, KT_FN__COUNT } kt_fn_t;

typedef struct kt_expr {
    kt_expr_kind_t kind;
    kt_dtype_t dtype;
    int64_t ival;            /* CONST int/bool */
    double fval;             /* CONST float */
    int axis;                /* AXIS */
    int tensor;              /* LOAD: stage index */
    kt_fn_t fn;              /* CALL */
    int nargs;
    struct kt_expr **args;   /* operands or load indices */
} kt_expr_t;

/* Reduction operator of a compute stage. */
typedef enum { KT_RED_NONE = 0, KT_RED_SUM, KT_RED_MAX } kt_reduce_t;

typedef enum { KT_STAGE_PLACEHOLDER = 0, KT_STAGE_COMPUTE } kt_stage_kind_t;

typedef struct kt_stage {
    char name[KT_TE_MAX_NAME];       /* "A", "conv", "T_relu" */
    kt_stage_kind_t kind;
    int ndim;
    int64_t shape[KT_TE_MAX_DIMS];   /* spatial extents = output shape */
    char axis_names[KT_TE_MAX_DIMS][KT_TE_MAX_NAME];
    int nreduce;
    int64_t reduce_ext[KT_TE_MAX_REDUCE];
    char reduce_names[KT_TE_MAX_REDUCE][KT_TE_MAX_NAME];
    kt_reduce_t rop;
    kt_expr_t *body;                 /* NULL for placeholders */
    const char *tag;                 /* operator tag: "matmul", "conv2d_nhwc", "pad",
                                        "elemwise", "softmax_max", ... (arena string) */
    int is_output;                   /* 1 for the DAG's output stage(s) */
    int layout_free;                 /* placeholder: a weight whose layout a kernel may
                                        rewrite for the loop nest reading it (TVM's
                                        layout_free_placeholders); not in the hash text */
    uint32_t const_axes;             /* compute: bit a = axis a (spatial first, then
                                        reduce) indexes a constant table the stage reads
                                        (TVM's auto_scheduler_simplify_const_tensor_indices,
                                        see kt_dag_set_const_axes); not in the hash text */
} kt_stage_t;

typedef struct kt_dag kt_dag_t;

/* ---- building a DAG --------------------------------------------------- */

kt_dag_t *kt_dag_new(void);
void kt_dag_free(kt_dag_t *dag);   /* accepts NULL */

/* Names (stages and axes) must be C identifiers shorter than KT_TE_MAX_NAME,
 * not C keywords or libc names a generated kernel uses, and not start with
 * "kt_" (reserved for generated code). Stage names are unique per DAG, axis
 * names unique per stage and distinct from every stage name. Returns 0 or
 * KT_EINVAL naming `what` ("stage", "axis"). */
int kt_te_name_check(const char *name, const char *what);

/* Add a placeholder (input tensor); returns its stage index or negative. */
int kt_dag_placeholder(kt_dag_t *dag, const char *name, int ndim, const int64_t *shape);

/* Mark placeholder `stage` layout-free (see kt_stage_t). 0 or KT_EINVAL. */
int kt_dag_set_layout_free(kt_dag_t *dag, int stage);

/* Mark the axes of compute stage `stage` (bit a: spatial axis a, bit ndim+r:
 * reduce axis r) that index the constant tables it reads, as Winograd's
 * transforms do with their matrices: the sketch rule
 * simplify-compute-with-const-tensor unrolls them innermost so the tables
 * fold into the generated code. Every other axis must be spatial. Call after
 * kt_dag_compute. 0 or KT_EINVAL. */
int kt_dag_set_const_axes(kt_dag_t *dag, int stage, uint32_t mask);

/* Add a compute stage. axis_names / reduce_names may be NULL (then i0.., k0..).
 * body is built afterwards with the kt_ex_* constructors and set with
 * kt_dag_set_body(). Returns the stage index or negative. */
int kt_dag_compute(kt_dag_t *dag, const char *name, const char *tag, int ndim,
                   const int64_t *shape, const char *const *axis_names, int nreduce,
                   const int64_t *reduce_ext, const char *const *reduce_names, kt_reduce_t rop);
int kt_dag_set_body(kt_dag_t *dag, int stage, kt_expr_t *body);

/* Mark outputs (compute stages no other stage reads) and validate: every
 * compute stage has a body, dtypes are consistent, loads read earlier stages
 * with as many indices as their rank, indices provably in bounds where
 * interval arithmetic can tell (a select's true branch is checked under its
 * guard, so padding passes), every placeholder is read, no axis is named like
 * a stage. Must be called once after building; 0 or KT_EINVAL with a message. */
int kt_dag_finalize(kt_dag_t *dag);

/* Expression constructors: allocate in the DAG's arena; NULL on OOM. */
kt_expr_t *kt_ex_int(kt_dag_t *dag, int64_t v);
kt_expr_t *kt_ex_float(kt_dag_t *dag, double v);
kt_expr_t *kt_ex_axis(kt_dag_t *dag, int axis);
kt_expr_t *kt_ex_bin(kt_dag_t *dag, kt_expr_kind_t kind, kt_expr_t *a, kt_expr_t *b);
kt_expr_t *kt_ex_not(kt_dag_t *dag, kt_expr_t *a);
kt_expr_t *kt_ex_select(kt_dag_t *dag, kt_expr_t *c, kt_expr_t *t, kt_expr_t *f);
kt_expr_t *kt_ex_cast(kt_dag_t *dag, kt_dtype_t to, kt_expr_t *a);
kt_expr_t *kt_ex_call(kt_dag_t *dag, kt_fn_t fn, kt_expr_t *a);
kt_expr_t *kt_ex_load(kt_dag_t *dag, int tensor, int nidx, kt_expr_t *const *idx);

/* ---- reading a DAG ---------------------------------------------------- */

int kt_dag_num_stages(const kt_dag_t *dag);
const kt_stage_t *kt_dag_stage(const kt_dag_t *dag, int i);

/* Stages that load from stage i (consumers), written into out (capacity
 * KT_TE_MAX_STAGES); returns the count. */
int kt_dag_consumers(const kt_dag_t *dag, int i, int *out);
/* Stages that stage i loads from (producers); returns the count. */
int kt_dag_producers(const kt_dag_t *dag, int i, int *out);

/* Number of elements of stage i's output. */
int64_t kt_stage_numel(const kt_stage_t *s);

/* ---- static analysis (as Ansor's AccessAnalyzer) ----------------------- */

/* Every load indexes its tensor with exactly the stage's spatial axes in
 * order (or a broadcast subset), no reduction: out[i..] = f(in[i..]). */
int kt_dag_is_elementwise(const kt_dag_t *dag, int stage);
/* May be inlined into its consumers (TVM's is_strictly_inlineable): a
 * compute stage without reduction, not an output, calling no expensive math
 * function (exp, erf, ...) and indexing without indirect loads. Padding
 * (a select on shifted indices), bias add and relu are inlinable; the exp
 * stage of softmax is not. */
int kt_dag_is_inlinable(const kt_dag_t *dag, int stage);
/* A reduction where some input is read repeatedly across a spatial axis
 * (of extent > 1) that none of its indices uses (matmul, conv, depthwise
 * conv): needs multi-level tiling. Pools, softmax and norms have none. */
int kt_dag_has_data_reuse(const kt_dag_t *dag, int stage);
int kt_dag_is_reduction(const kt_dag_t *dag, int stage);

/* Floating-point operations of the whole DAG, as TVM's FlopEstimator: each
 * evaluation of a body counts its float + - * / min max and math calls (exp,
 * erf, rsqrt, ...) 1 each, plus 1 for the reduction's combine (+ or max), so
 * matmul counts 2*M*N*K. Loads, selects (only the costlier branch counts),
 * casts, comparisons and index arithmetic count 0. Placeholders count 0. */
double kt_dag_flop_count(const kt_dag_t *dag);

/* Canonical text of the DAG in the style of TVM's ComputeDAG print:
 *   A = PLACEHOLDER [512, 512]
 *   C(i, j) += (A[i, k]*B[k, j])
 * Stable across runs; malloc'd, caller frees. NULL on OOM. */
char *kt_dag_to_text(const kt_dag_t *dag);

/* The canonical text plus what it leaves implicit (every compute stage's
 * spatial and reduce extents): the input of workload hashes, so two DAGs with
 * one text but different loop extents never share a key. Caller frees. */
char *kt_dag_hash_text(const kt_dag_t *dag);

/* Print one expression (C-like syntax, axis names of `stage`) into buf;
 * returns the length it needed (snprintf semantics). */
int kt_expr_print(const kt_dag_t *dag, int stage, const kt_expr_t *e, char *buf, size_t cap);

#endif
