/*
 * Code generation: C source for a (DAG, schedule state) and the naive
 * reference for any DAG.
 *
 * Calling convention of every generated kernel (tuned or reference):
 *     int <entry>(float **bufs);
 * bufs[] holds the DAG's placeholders in stage order, then its output stages
 * in stage order; all are dense row-major float32. Intermediate stages that
 * are not inlined are allocated by the kernel itself: those at root in one
 * block (its workspace) that the kernel keeps between calls and frees when
 * its library is unloaded (a concurrent call of the same kernel allocates
 * and frees its own), so that calls do not fault in fresh pages; local
 * tiles over the stack limit per loop iteration. Returns 0, or -1 when an
 * internal allocation failed. Generated files include only <math.h>,
 * <stdlib.h>, <string.h> (and <omp.h> when parallel), and compile with
 * `cc -O3 -fno-math-errno -march=native -fopenmp -shared -fPIC` (without
 * -fno-math-errno, GCC keeps expf and the other math calls scalar).
 *
 * Ownership: returned source strings are malloc'd; the caller frees them.
 * All functions are thread-safe (they only read the DAG and state).
 */
#ifndef KT_CODEGEN_CODEGEN_H
#define KT_CODEGEN_CODEGEN_H

#include <stdint.h>

#include "te/te.h"
#include "util/sbuf.h"

/* Number of buffers the kernel takes, and the stage index of buffer i. */
int kt_codegen_num_bufs(const kt_dag_t *dag);
int kt_codegen_buf_stage(const kt_dag_t *dag, int i);

/* The start of every generated C file: the standard includes named above
 * and the static inline helpers that kt_codegen_expr_c's output calls
 * (kt_maxf, kt_minf, kt_maxi, kt_mini, kt_floordiv, kt_floormod with floor
 * semantics for negative numerators, kt_rsqrtf) and the workspace pool the
 * kernels take their heap intermediates from (kt_pool_take, kt_pool_give: one
 * block per file, so the kernels of a built network share it). Emitters
 * append it first, once per file. */
void kt_codegen_preamble_c(kt_sbuf_t *out);

/* Emit C for expression e of `stage`. Float constants print exactly (%.9g
 * with a decimal point and an f suffix; -INFINITY for -inf), int constants
 * as long long literals (5LL), so index arithmetic is 64-bit whatever type
 * the loop variables have. Every value is fully parenthesized. axis_c[a] is the C text of the value
 * of axis a (spatial axes first, then reduce axes). A load of a stage whose
 * bit is set in inline_mask is replaced by that stage's body with its axes
 * bound to the load's printed indices (recursively); any other load prints
 * as <stage name>[<row-major flat index>]. 0 or negative. */
int kt_codegen_expr_c(const kt_dag_t *dag, int stage, const kt_expr_t *e,
                      const char *const *axis_c, uint64_t inline_mask, kt_sbuf_t *out);

/* The naive reference kernel: one plain loop nest per compute stage, no
 * schedule. Used to check every candidate's answers. */
char *kt_codegen_reference_c(const kt_dag_t *dag, const char *entry);
/* The reference function alone, appended to b (a file with several kernels
 * and one preamble). 0 or negative. */
int kt_codegen_reference_c_into(const kt_dag_t *dag, const char *entry, kt_sbuf_t *b);

/* ---- tuned kernels (lower.c, emit_c.c) ------------------------------------ */

struct kt_sched_state;

/* C source of the kernel computing the DAG as schedule state st says (the
 * state is validated first): the preamble, then the three functions of
 * kt_codegen_emit_c_variants_into. entry must be a C identifier, not a
 * stage name, not starting with "kt_". NULL with a message on error. */
char *kt_codegen_emit_c(const kt_dag_t *dag, const struct kt_sched_state *st, const char *entry);

/* The kernel function alone, without the preamble, appended to b: several
 * kernels (distinct entries) can share one file and one compiler run. Its
 * weights come in their original layout; a weight the state re-lays out is
 * copied inside the kernel, on every call. 0 or negative. */
int kt_codegen_emit_c_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                           const char *entry, kt_sbuf_t *b);

/* How much of each statement's work the C of kt_codegen_emit_c_into runs
 * behind a padding test (emit_c.c): share[i], for statement i of L (a CPU
 * lowering of dag, L->nstmts values), is the share of its executions whose
 * printed copy still tests its inlined padding's condition; the rest run in
 * parts of partitioned loops, under a hoisted test or narrowed bounds, or in
 * a register tile's interior copy (each copy weighed by the iterations of the
 * loops around it). 1 for a statement with no such guard (a select stays in
 * its expression). The cost model counts padding tests with it. 0 or
 * negative. */
struct kt_lower;
int kt_codegen_c_tested_share(const kt_dag_t *dag, const struct kt_lower *L, double *share);

/* What a candidate is measured as and what `ktune export --format c`
 * writes, appended to b (no preamble):
 *     int <entry>_packed(float **bufs);
 *         the kernel, taking every weight the state re-lays out (see
 *         kt_codegen_packs) already in its packed layout at its bufs[] slot;
 *         it copies nothing, and is what the runner times and `ktune build`
 *         runs;
 *     int <entry>_pack(int i, const float *src, float *dst);
 *         1 when <entry>_packed takes bufs[i] packed, and then (src and dst
 *         not NULL) writes src (bufs[i] in its original layout) permuted
 *         into dst (as many floats, not overlapping); 0 for any other i;
 *     int <entry>(float **bufs);
 *         every buffer in its original layout: packs the weights into
 *         temporaries on each call, then runs <entry>_packed (-1 when a
 *         temporary cannot be allocated).
 * A state that re-lays out nothing has the same three functions (_pack
 * answers 0). 0 or negative. */
int kt_codegen_emit_c_variants_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                                    const char *entry, kt_sbuf_t *b);

/* ---- weights laid out ahead of time (lower_layout.c) -------------------------------
 *
 * A tuned CPU kernel reads each layout-free weight its tiled loops read in
 * the order they read it (Ansor's layout rewrite). A network built once
 * permutes the weights once, and the runner permutes them once before it
 * times a candidate: the packed variant of the kernel takes those weights
 * already permuted and copies nothing. The unpacked variant
 * (kt_codegen_emit_c_into) copies them in every call. */

#define KT_CODEGEN_MAX_PACKS 8

/* One weight's packed layout: element i of the packed array (row-major over
 * shape) is the weight's element at offset sum over m of idx_m * step[m]. */
typedef struct {
    int buf;                            /* the kernel buffer (bufs[] index) */
    int ndim;
    int64_t shape[KT_TE_MAX_DIMS + 1];
    int64_t step[KT_TE_MAX_DIMS + 1];   /* source offset per step of loop m */
} kt_codegen_pack_t;

/* The weights state st's kernel re-lays out: fills out[0..cap) and returns
 * their number (0: none), or negative. */
int kt_codegen_packs(const kt_dag_t *dag, const struct kt_sched_state *st, kt_codegen_pack_t *out,
                     int cap);
/* Permute a weight into its packed layout (unpack: back). src and dst hold
 * the weight's element count and do not overlap. */
void kt_codegen_pack(const kt_codegen_pack_t *pk, const float *src, float *dst, int unpack);
/* kt_codegen_emit_c_into's kernel taking the packed weights. */
int kt_codegen_emit_c_packed_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                                  const char *entry, kt_sbuf_t *b);

/* ---- GPU states (lower_gpu.c, emit_cuda.c, emit_cuda_emu.c) -------------------------
 *
 * CUDA: one `extern "C" __global__` kernel per kernel of the state
 * (kt_sched_gpu_kernels), named <entry>_k0, <entry>_k1, ... and launched in
 * that order, each with the calling convention of measure/runner.h's CUDA
 * path: the DAG's placeholders, then its outputs (kt_codegen_num_bufs order)
 * as float pointers, then, when the program has intermediates, a float
 * workspace pointer (workspace_bytes, zeroed or not: every intermediate is
 * written before it is read). Static shared memory only (dynamic 0), at most
 * the state's limit. The source needs no header (NVRTC) and compiles for
 * sm_75 and newer.
 *
 * CPU emulation: the same lowered kernels as C with the calling convention
 * above (int entry(float **bufs), workspace malloc'd), run block by block;
 * within a block each barrier-free region runs for every thread before the
 * next region starts, per-thread registers are arrays indexed by the thread,
 * shared memory is one array per block, and warp shuffles are emulated per
 * warp with __shfl_down_sync's semantics. Indices, guards and barrier
 * placement are the CUDA kernel's, printed by the same code, so the verify
 * harness (verify.h) checking the emulation against the reference checks
 * the CUDA kernel's indexing. Outputs, workspace, shared memory and
 * registers start as NaN, so a read of anything not written shows. It does
 * not run the CUDA printer's text, so `--verify` and the gpu suite check
 * that text itself on the CPU instead (cuda_cpu.h); the emulation remains
 * for `ktune kernel show --emulation`. */

#define KT_CODEGEN_KERNEL_NAME 128

/* One kernel launch. */
typedef struct {
    char name[KT_CODEGEN_KERNEL_NAME];   /* <entry>_k<i> */
    int stage;                           /* the DAG stage it computes */
    unsigned grid[3], block[3];          /* y and z are 1 */
    unsigned smem_bytes;                 /* static shared memory it declares */
} kt_codegen_launch_t;

typedef struct {
    char *src;                        /* CUDA C++ source (kt_codegen_emit_cuda only) */
    kt_codegen_launch_t *launches;    /* in launch order */
    int n_launches;
    size_t workspace_bytes;           /* 0: the kernels take no workspace argument */
} kt_codegen_cuda_t;

/* The definitions every CUDA file starts with (helpers kt_codegen_expr_c's
 * output calls, INFINITY/NAN without headers). */
void kt_codegen_preamble_cuda(kt_sbuf_t *out);

/* CUDA source (preamble included) and launches of a GPU state. 0, or
 * negative with a message (not a GPU state, invalid state, bad entry). */
int kt_codegen_emit_cuda(const kt_dag_t *dag, const struct kt_sched_state *st, const char *entry,
                         kt_codegen_cuda_t *out);
/* The kernels only, appended to b (several states in one NVRTC program:
 * distinct entries); meta (may be NULL) receives launches and workspace. */
int kt_codegen_emit_cuda_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                              const char *entry, kt_sbuf_t *b, kt_codegen_cuda_t *meta);
void kt_codegen_cuda_clear(kt_codegen_cuda_t *c);   /* accepts NULL */

/* The CPU emulation: a whole C file (kt_codegen_preamble_c first), or the
 * functions only (static kernels <entry>_k<i>, then int entry(float **)). */
char *kt_codegen_emit_cuda_emu(const kt_dag_t *dag, const struct kt_sched_state *st,
                               const char *entry);
int kt_codegen_emit_cuda_emu_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                                  const char *entry, kt_sbuf_t *b);

#endif
