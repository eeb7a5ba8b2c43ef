/*
 * Internal helpers shared by the files of common/codegen (not installed).
 */
#ifndef KT_CODEGEN_INT_H
#define KT_CODEGEN_INT_H

#include "codegen.h"
#include "lower.h"

/* ---- lowering building blocks (lower_build.c), shared by lower.c and lower_gpu.c ---- */

/* The program being built and the capacities of its arrays; rc holds the
 * first error (every helper does nothing once it is set). */
typedef struct kt_lower_ctx {
    const kt_dag_t *dag;
    const kt_sched_state_t *st;
    kt_lower_t *L;
    int cap_nodes, cap_iters, cap_stmts, cap_bufs, cap_guards, cap_subs, cap_kernels;
    int rc;
    int gbuf[KT_TE_MAX_STAGES];   /* global (input/output/heap) buffer of each stage, or -1 */
} kt_lower_ctx_t;

/* Start building into L (empty): no stage has a buffer yet but the
 * kernel's arguments, the DAG's placeholders and outputs (INPUT / OUTPUT
 * buffers in kt_codegen_num_bufs order). */
void kt_lower_ctx_init(kt_lower_ctx_t *c, const kt_dag_t *dag, const kt_sched_state_t *st,
                       kt_lower_t *L);
/* Make room for element n of *p (capacity *cap). 0, or -1 (rc set). */
int kt_lower_grow(kt_lower_ctx_t *c, void **p, int *cap, int n, size_t elem);
/* The empty index (0, div 1, no modulo). */
kt_lower_index_t kt_lower_idx_none(void);
/* x += coef * iter (terms of one iterator merged; iter < 0 or coef 0: no-op). */
void kt_lower_idx_add(kt_lower_ctx_t *c, kt_lower_index_t *x, int iter, int64_t coef);
/* A new iterator / buffer / detached node; its id, or -1. */
int kt_lower_new_iter(kt_lower_ctx_t *c, int stage, const char *label, int64_t extent, int reduce);
int kt_lower_new_buf(kt_lower_ctx_t *c, kt_buf_kind_t kind, int stage, const char *name,
                     const char *label, int ndim, const int64_t *shape);
int kt_lower_new_node(kt_lower_ctx_t *c, kt_node_kind_t kind);
/* Link node as the last child of parent (-1: the top level). */
void kt_lower_append(kt_lower_ctx_t *c, int parent, int node);
/* A statement with no indices set (dst, src, src_stage -1). */
kt_lower_stmt_t kt_lower_stmt_new(kt_stmt_kind_t kind, int stage);
/* Store s and append a STMT node for it under parent; the statement id or -1. */
int kt_lower_add_stmt(kt_lower_ctx_t *c, int parent, const kt_lower_stmt_t *s);
/* Make statement stmt's loads of stage read buffer buf at idx[0..ndim) instead. */
void kt_lower_add_sub(kt_lower_ctx_t *c, int stmt, int stage, int buf, const kt_lower_index_t *idx,
                      int ndim);

/* Layout rewrite of the weights read by tiled stages (lower_layout.c): a
 * heap copy in the nest's loop order, a copy nest before the consumer's and a
 * sub redirecting the update's loads; run on a finished CPU program. */
void kt_lower_rewrite_layouts(kt_lower_ctx_t *c);

/* Lowering of a GPU state (lower_gpu.c); kt_lower() dispatches to it. */
kt_lower_t *kt_lower_gpu(const kt_dag_t *dag, const kt_sched_state_t *st);

/* Append text to b with every load `name[...]` replaced by repl (the
 * bracketed index skipped, nested brackets included). */
void kt_codegen_replace_loads(const char *text, const char *name, const char *repl, kt_sbuf_t *b);
/* Replace, in text, the loads every sub of statement si redirects (L->subs)
 * with access(ctx, buf, idx) of the buffer they read instead. */
typedef void (*kt_codegen_access_fn)(void *ctx, int buf, const kt_lower_index_t *idx,
                                     kt_sbuf_t *b);
void kt_codegen_apply_subs(const kt_dag_t *dag, const kt_lower_t *L, int si,
                           kt_codegen_access_fn access, void *ctx, kt_sbuf_t *text);

/* kt_codegen_expr_c for a statement of a lowered CPU program.
 * - axis[a] is axis a's value in L's iterators; a load whose indices are
 *   affine in them prints its flat index as one sum over the iterators (a
 *   constant last), e.g. `pad_temp[i*3712LL + ry*3712LL + x*64LL + rc]`, any
 *   other load as kt_codegen_expr_c prints it.
 * - axis_val (NULL: none; else one value per axis, NAN where unknown: the
 *   axes expanded loops bind) folds what it makes constant: loads of
 *   constant tables (compute stages that read no tensor) print as their
 *   entry, constant subexpressions as their value, and products lose their
 *   factors 1 and -1, collect their constant factors into one, and print as
 *   0 where a factor is 0 (as TVM's simplifier does; NaN or infinity in the
 *   other factors does not propagate).
 * - an inlined stage in `taken` whose body is a select prints as its true
 *   operand alone: for a statement that runs only where that condition
 *   holds (a padding guard, emit_c.c).
 * 0 or negative. */
int kt_codegen_expr_c_lowered(const kt_dag_t *dag, int stage, const kt_expr_t *e,
                              const char *const *axis_c, const double *axis_val,
                              const kt_lower_t *L, const kt_lower_index_t *axis,
                              uint64_t inline_mask, uint64_t taken, kt_sbuf_t *out);

/* ---- index printing (emit_c.c), shared by the C and CUDA emitters ----------------- */

/* How indices print: iterators of extent 1 and `hide` (-1: none) print as
 * 0, every other one as cast + name, constants with suffix. */
typedef struct {
    const kt_lower_t *L;
    int hide;
    const char *cast;     /* "" or "(long long)" */
    const char *suffix;   /* "LL" or "" */
} kt_codegen_index_style_t;

/* One index: (sum)/div%mod, fully parenthesized where div or mod apply. */
void kt_codegen_index(const kt_codegen_index_style_t *st, const kt_lower_index_t *x, kt_sbuf_t *b);
/* Row-major flat index of buffer buf at per-dimension indices idx; affine
 * dimensions merge into one sum with one coefficient per iterator. */
void kt_codegen_flat_index(const kt_codegen_index_style_t *st, int buf,
                           const kt_lower_index_t *idx, kt_sbuf_t *b);
/* Validate an entry name: a C identifier of at most 100 characters, not a
 * stage name, not starting with kt_. 0 or KT_EINVAL. */
int kt_codegen_check_entry(const kt_dag_t *dag, const char *entry);

/* ---- GPU emission shared by emit_cuda.c and emit_cuda_emu.c ------------------- */

/* One emission of a lowered GPU program: CUDA (emu 0) or its CPU emulation
 * (emu 1). Both print every index, statement and guard with the same text,
 * so the emulation runs the CUDA kernel's exact index arithmetic (in int,
 * widened to long long only for buffers of more than 2^31 - 1 elements). */
typedef struct {
    const kt_dag_t *dag;
    const kt_lower_t *L;
    kt_sbuf_t *out;
    int rc;
    int emu;
    const char *entry;
    uint8_t *used;     /* iterators some printed expression reads */
    int thread;        /* THREAD iterator of the kernel being printed, -1 outside */
    int64_t threads;   /* its extent */
    int zero_iter;     /* CUDA, inside a VECTORIZE fetch loop: its iterator, printed as 0 */
    int vec;           /* ... and its width: FETCH copies float2/float4 */
} kt_gpu_emit_t;

/* Fill e->used (malloc'd, freed by the caller). 0 or KT_ENOMEM. */
int kt_gpu_emit_mark_used(kt_gpu_emit_t *e);
/* The index expression of x (int arithmetic). */
void kt_gpu_emit_index(kt_gpu_emit_t *e, const kt_lower_index_t *x, kt_sbuf_t *b);
/* name[flat index] of a buffer; per-thread LOCAL buffers of the emulation
 * are indexed by the current thread too. */
void kt_gpu_emit_access(kt_gpu_emit_t *e, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b);
/* A statement (not ALLREDUCE) as one line at `depth`. */
void kt_gpu_emit_stmt(kt_gpu_emit_t *e, int stmt, int depth);
/* A LET as `const int name = ...;` (nothing when unused). */
void kt_gpu_emit_let(kt_gpu_emit_t *e, int node, int depth);
/* `if (guard) {` of a GUARD node. */
void kt_gpu_emit_guard_open(kt_gpu_emit_t *e, int node, int depth);
/* The loop header `for (...) {` (with its pragma) of a LOOP node. */
void kt_gpu_emit_for(kt_gpu_emit_t *e, int node, int depth);
/* Prints the nodes both GPU walkers print alike: a plain LOOP (a bare
 * block when its extent is 1), a LET or a GUARD, with list(ctx, first child,
 * depth + 1) printing a body. 1 when x was one of them, 0 (nothing printed)
 * otherwise. */
int kt_gpu_emit_nest(kt_gpu_emit_t *e, int x, int depth,
                     void (*list)(void *ctx, int first, int depth), void *ctx);
/* The kernel parameters: `(const float *A, ..., float *kt_ws)`, restrict
 * spelled for CUDA or C. */
void kt_gpu_emit_params(kt_gpu_emit_t *e, kt_sbuf_t *b);
/* Declarations of the workspace buffers `text` uses (pointers into kt_ws). */
void kt_gpu_emit_heap_decls(kt_gpu_emit_t *e, const char *text, int depth, kt_sbuf_t *b);

#endif
