/*
 * Lowering: a (DAG, schedule state) pair turned into an explicit loop-nest
 * program, the form the C emitter prints, kt_sched_state_print shows and
 * feature extraction walks. It is TVM's lowered TIR in miniature:
 *
 * - iterators (loop variables) with extents and the stage they belong to;
 * - buffers: the kernel's inputs and outputs, heap intermediates (stages
 *   that are neither inlined nor outputs, rfactor partial results) and local
 *   tiles (the accumulator of a tiled stage computed at its consumer);
 * - statements: a stage's body stored to a buffer element, a reduction's
 *   init and update, a copy out of a local tile, an rfactor combine;
 * - a tree of nodes (loops with annotations, statements, local allocations)
 *   in program order: first child / next sibling links.
 *
 * Every index is an affine sum of iterators (times constants), optionally
 * followed by a division and a modulo (rfactor of several reduce axes), so
 * the address of every access is known exactly.
 *
 * A SIMPLIFY stage (simplify-compute-with-const-tensor) lowers to its S0
 * and S1 loops (parallel and vectorize as annotated), then UNROLL loops over
 * the constant-table axes marked `expand`, the init before the first reduce
 * one.
 *
 * Decisions made here, beyond the state:
 * - auto_unroll_max_step (TVM's UnrollLoop): inside a nest with that step, a
 *   loop is marked UNROLL when every loop in its body is unrolled and its
 *   extent times the number of statements its body executes is at most the
 *   step. Vectorized loops and the innermost spatial loop around a statement
 *   count as one step and stay loops (the compiler vectorizes them; a full
 *   unroll would leave scalar code). The emitter prints `#pragma GCC unroll`.
 * - register tile: in a tiled nest whose innermost reduce loops iterate,
 *   the accumulator block of the innermost spatial loops (level 3) is copied
 *   into a small local array before those reduce loops and back after them,
 *   so the block stays in registers (LLVM's store motion does this for TVM;
 *   GCC does not after unrolling). Both copies are UNROLL loops throughout,
 *   so GCC moves the block with full-width vector moves.
 *
 * GPU states (target cuda) lower to a list of kernels, see "GPU programs"
 * below; the CPU form above is unchanged for CPU states.
 *
 * Ownership: kt_lower() returns a malloc'd program freed by kt_lower_free()
 * (accepts NULL); it keeps no pointer into the DAG or state. Thread-safe.
 */
#ifndef KT_CODEGEN_LOWER_H
#define KT_CODEGEN_LOWER_H

#include <stdint.h>

#include "sched/state.h"
#include "te/te.h"

#define KT_LOWER_MAX_TERMS 8    /* iterators in one index */
#define KT_LOWER_NAME 64        /* iterator and buffer names, NUL included */
#define KT_LOWER_LOCAL_STACK_BYTES 65536  /* local tiles up to this size live on the stack */
#define KT_LOWER_REGTILE_BYTES 4096       /* largest register tile of a tiled stage */

/* Loop annotations. UNROLL marks loops auto_unroll_max_step unrolls fully. */
typedef enum {
    KT_LOOP_SERIAL = 0,
    KT_LOOP_PARALLEL,   /* fused with the neighbouring PARALLEL loops, run by threads */
    KT_LOOP_VECTORIZE,  /* fused with the neighbouring VECTORIZE loops, SIMD (GPU: the
                           elements of a fetch one thread copies with one float2/float4
                           load and store) */
    KT_LOOP_UNROLL,     /* fully unrolled */
    KT_LOOP_BLOCK,      /* GPU: one block per iteration (blockIdx.x) */
    KT_LOOP_THREAD,     /* GPU: one thread per iteration (threadIdx.x) */
    KT_LOOP_VTHREAD,    /* GPU: virtual threads, unrolled inside each thread */
} kt_loop_ann_t;

/* (sum of coef[t] * iter[t]) / div % mod; div 1 and mod 0 when unused. */
typedef struct kt_lower_index {
    int nterms;
    int iter[KT_LOWER_MAX_TERMS];
    int64_t coef[KT_LOWER_MAX_TERMS];
    int64_t div, mod;
} kt_lower_index_t;

typedef struct {
    char name[KT_LOWER_NAME];   /* C variable, unique in the kernel */
    char label[KT_LOWER_NAME];  /* TVM-style display name: i.0, k.1, k.0.v */
    int64_t extent;
    int stage;                  /* stage whose loop it is */
    int reduce;                 /* a reduction loop */
    int derived;                /* GPU: not a loop but a value defined by a LET node */
    int expand;                 /* CPU: an UNROLL loop of a SIMPLIFY nest (a constant
                                   table's index): the C emitter prints its body once per
                                   value with the iterator a known constant, folding the
                                   tables' entries into the code (see emit_c.c) */
    kt_lower_index_t def;       /* derived: its value ((sum)/div%mod); extent bounds it */
} kt_lower_iter_t;


typedef enum {
    KT_BUF_INPUT = 0,   /* a placeholder, bufs[arg] */
    KT_BUF_OUTPUT,      /* an output stage, bufs[arg] */
    KT_BUF_HEAP,        /* an intermediate, malloc'd for the kernel's whole run */
    KT_BUF_LOCAL,       /* a tile allocated where its ALLOC node stands (GPU: per thread) */
    KT_BUF_SHARED,      /* GPU: shared by the threads of a block (static __shared__) */
} kt_buf_kind_t;

typedef struct {
    char name[KT_LOWER_NAME];   /* C name: the stage name for global buffers */
    char label[KT_LOWER_NAME];  /* display: C, C.local, C.rf */
    kt_buf_kind_t kind;
    int stage;                  /* the stage whose values it holds */
    int arg;                    /* INPUT/OUTPUT: index into bufs[] */
    int ndim;
    int64_t shape[KT_TE_MAX_DIMS + 1];
    int64_t offset;             /* GPU HEAP: float offset in the workspace */
} kt_lower_buf_t;

typedef enum {
    KT_STMT_COMPUTE = 0,  /* dst = body of stage */
    KT_STMT_INIT,         /* dst = identity of stage's reduction (0, -inf) */
    KT_STMT_UPDATE,       /* dst = dst (+ or max) body */
    KT_STMT_COPY,         /* dst = src */
    KT_STMT_COMBINE,      /* dst = dst (+ or max) src: rfactor's final reduce */
    KT_STMT_FETCH,        /* GPU: dst (shared) = value of stage at coordinates axis[]: its
                             inlined body, or src (its global buffer) at src_idx */
    KT_STMT_ALLREDUCE,    /* GPU: combine dst[0] (a per-thread partial, rop of stage) over
                             all threads of the block; thread 0 then holds the result. src:
                             a shared buffer of one float per warp, or -1 for one warp */
} kt_stmt_kind_t;

typedef struct {
    kt_stmt_kind_t kind;
    int stage;                                   /* whose body / reduction */
    kt_lower_index_t axis[KT_SCHED_MAX_AXES];    /* COMPUTE/UPDATE: value of each stage axis */
    int dst;                                     /* buffer written */
    kt_lower_index_t dst_idx[KT_TE_MAX_DIMS + 1];
    int src;                                     /* COPY/COMBINE: buffer read; COMPUTE: -1, or
                                                    the buffer loads of src_stage read instead */
    int src_stage;
    kt_lower_index_t src_idx[KT_TE_MAX_DIMS + 1];
} kt_lower_stmt_t;

typedef enum {
    KT_NODE_LOOP = 0,
    KT_NODE_STMT,
    KT_NODE_ALLOC,
    KT_NODE_KERNEL,    /* GPU: one kernel launch (kernels[kernel]); its body as children */
    KT_NODE_LET,       /* GPU: defines derived iterator `iter` for its following siblings
                          and their subtrees */
    KT_NODE_GUARD,     /* GPU: children run only where guards[guard] holds */
    KT_NODE_BARRIER,   /* GPU: all threads of the block synchronize (__syncthreads) */
} kt_node_kind_t;

typedef struct {
    kt_node_kind_t kind;
    int iter;            /* LOOP */
    kt_loop_ann_t ann;   /* LOOP */
    int stmt;            /* STMT */
    int buf;             /* ALLOC: a LOCAL buffer live until the end of the enclosing body */
    int child, next;     /* first child, next sibling; -1 when none */
    int kernel;          /* KERNEL */
    int guard;           /* GUARD */
} kt_lower_node_t;

/* GPU: a kernel launch. */
typedef struct {
    int stage;           /* the stage it computes */
    int64_t grid;        /* blocks */
    int64_t threads;     /* threads per block */
    int64_t smem_bytes;  /* static shared memory */
} kt_lower_kernel_t;

/* GPU: the condition idx < bound. */
typedef struct {
    kt_lower_index_t idx;
    int64_t bound;
} kt_lower_guard_t;

/* GPU: within statement stmt, the loads of stage `stage` read buffer buf at
 * idx (a shared-memory stage replacing a producer's global buffer). */
typedef struct {
    int stmt, stage, buf;
    kt_lower_index_t idx[KT_TE_MAX_DIMS + 1];
} kt_lower_sub_t;

#define KT_LOWER_MAX_PACKS 8   /* rewritten weights of one program */

/* One weight re-laid out for its consumer's loops (lower_layout.c): loop m of
 * the new layout (extent shape[m]) walks dimension dim[m] of the weight in
 * steps of coef[m]; together they are a permutation of the weight. */
typedef struct {
    int stage;                              /* the weight's placeholder */
    int arg;                                /* its kernel argument */
    int ndim;
    int64_t shape[KT_TE_MAX_DIMS + 1];
    int dim[KT_TE_MAX_DIMS + 1];
    int64_t coef[KT_TE_MAX_DIMS + 1];
} kt_lower_pack_t;

typedef struct kt_lower {
    int nnodes, niters, nstmts, nbufs;
    kt_lower_node_t *nodes;
    kt_lower_iter_t *iters;
    kt_lower_stmt_t *stmts;
    kt_lower_buf_t *bufs;
    int first;              /* first top-level node, -1 for none */
    uint64_t inline_mask;   /* stages inlined into their readers */
    int uses_parallel;      /* some loop is PARALLEL */
    /* GPU programs (target cuda; all zero / NULL for CPU states) */
    int target;             /* kt_sched_target_t */
    int nkernels, nguards, nsubs;
    kt_lower_kernel_t *kernels;
    kt_lower_guard_t *guards;
    kt_lower_sub_t *subs;
    int64_t workspace;      /* floats of the workspace holding the HEAP buffers */
    /* CPU weight rewrites: copied in the kernel, or read as given (prepacked) */
    int npacks, prepacked;
    kt_lower_pack_t packs[KT_LOWER_MAX_PACKS];
} kt_lower_t;

/* ---- GPU programs ------------------------------------------------------------------
 *
 * The top level is one KERNEL node per kernel of kt_sched_gpu_kernels, in
 * launch order. A kernel's body: ALLOC of its SHARED buffers, then a BLOCK
 * loop (extent = blocks) holding the block's LETs and a THREAD loop (extent
 * = threads per block) holding the thread's LETs first, then the per-thread
 * code. Fused loops are single iterators; the original axes are LETs
 * (derived iterators, value (sum)/div%mod) of them. Per-thread code may hold
 * BARRIER nodes and ALLREDUCE statements only in loops whose iterators do not
 * depend on the thread (uniform loops: every thread runs them alike), never
 * under a GUARD; the CPU emulation relies on that. INPUT/OUTPUT buffers are
 * the kernel arguments, HEAP buffers live in one workspace (`offset`), LOCAL
 * buffers are per thread (registers), SHARED ones per block.
 *
 * - TILED: the register tile LOCAL is initialised under a VTHREAD loop; per
 *   step of the R0 loops (uniform): BARRIER, the cooperative fetch of each
 *   staged producer into its SHARED box (FETCH under a guard where the box
 *   does not divide by threads x vec), BARRIER, then R1, VTHREAD, S3, R2, S4
 *   loops around the UPDATE, whose loads of staged producers read the shared
 *   boxes (subs); finally the fused consumer or the copy-out per tile element.
 * - XREDUCE: a LOCAL partial, the strided serial reduce loop (guarded when
 *   the threads do not divide the reduction), ALLREDUCE, then under the guard
 *   thread < 1 the copy-out or the fused consumer reading the partial.
 * - ROOT: a LET of the global thread number, guarded by the element count;
 *   axes as LETs; reduce loops into a LOCAL accumulator, then the copy-out.
 * auto_unroll_max_step marks loops of the per-thread code UNROLL as on CPU
 * (without the innermost-loop exception). */

/* Lower a state (checked with kt_sched_state_validate first; split bounds
 * of the parameters are not enforced here; GPU states: nor the hardware
 * limits). NULL with a message on error. */
kt_lower_t *kt_lower(const kt_dag_t *dag, const kt_sched_state_t *st);
/* The same with prepacked set: every weight the program re-lays out is
 * taken already in its new layout (packs[] says which), with no copy. */
kt_lower_t *kt_lower_ex(const kt_dag_t *dag, const kt_sched_state_t *st, int prepacked);
void kt_lower_free(kt_lower_t *l);

/* The loop nest of a state, TVM style, one loop per line indented by depth
 * (print.c, from its lowering):
 *   parallel i.0@j.0@ (0,64)
 *     for k.0 (0,32)
 *       vectorize j.3 (0,16)
 *         C.local = ...
 * Caller frees; NULL on error. */
char *kt_sched_state_print(const kt_dag_t *dag, const kt_sched_state_t *st);

/* Identity value of a reduction as C text: "0.0f" or "(-INFINITY)". */
const char *kt_lower_identity_c(kt_reduce_t rop);

#endif
