/*
 * Schedule states for CPU (Ansor's loop_state + sketch policy rules): HOW a
 * compute DAG is computed. A state holds one entry per DAG stage:
 *
 * - the sketch: structural decisions derived by the sketch rules from the
 *   DAG alone (inline; multi-level tiling "SSRSRS" with a fused consumer or a
 *   cache-write stage; rfactor; plain loop nest), see kt_sched_sketches();
 * - the annotations: split factors per axis and tile level, compute location,
 *   number of outer loops fused and run in parallel, number of innermost
 *   loops fused and vectorized, auto-unroll max step, see kt_sched_sample()
 *   and kt_sched_mutate().
 *
 * Split factors are always exact factorizations of the extents, so the
 * generated code never needs bounds checks. The loop nest a state stands
 * for is built by common/codegen/lower.h, which also prints it
 * (kt_sched_state_print()).
 *
 * GPU states (target KT_SCHED_TARGET_CUDA, made when the parameters name
 * that target) follow Ansor's GPU rules instead; see "GPU states" below.
 * Every function here takes both kinds and dispatches on the state's (or,
 * for kt_sched_sketches, the parameters') target.
 *
 * Ownership: states are single malloc'd blocks (kt_sched_state_free, which
 * accepts NULL); kt_sched_state_clone copies. Returned strings are malloc'd
 * and owned by the caller. Every function only reads its inputs (the DAG and
 * the state) and is thread-safe; a kt_rng_t must not be shared by threads.
 */
#ifndef KT_SCHED_STATE_H
#define KT_SCHED_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "measure/hw_params.h"
#include "te/te.h"
#include "util/rng.h"

/* ---- hardware and search parameters ------------------------------------- */

#define KT_SCHED_MAX_AXES (KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE)  /* axes of one stage */
#define KT_SCHED_SPATIAL_LEVELS 4   /* "SSRSRS": spatial axes split in 4 levels */
#define KT_SCHED_REDUCE_LEVELS 2    /* ... and reduce axes in 2 */
#define KT_SCHED_GPU_SPATIAL_LEVELS 5   /* GPU "SSSRRSRS": spatial axes in 5 levels */
#define KT_SCHED_GPU_REDUCE_LEVELS 3    /* ... and reduce axes in 3 */
#define KT_SCHED_MAX_LEVELS 5       /* split factors stored per axis */

/* What a state is scheduled for. */
typedef enum {
    KT_SCHED_TARGET_CPU = 0,
    KT_SCHED_TARGET_CUDA = 1,
} kt_sched_target_t;

typedef struct {
    int num_cores;                   /* parallel threads (Ansor's num_cores) */
    int vector_bytes;                /* SIMD register width, 64 with AVX-512 (Ansor's
                                        vector_unit_bytes, for cost features; the
                                        vectorize rule is bounded by max_vectorize_size) */
    int max_innermost_split_factor;  /* innermost tile factor bound (64) */
    int max_direct_reduce_factor;    /* a reduce axis's inner factor bound in a direct tile
                                        (every outer reduce factor 1), where the register
                                        tile runs the whole reduction (512; never below
                                        max_innermost_split_factor) */
    int max_vectorize_size;          /* longest vectorized loop when sampling (16) */
    /* GPU (target cuda; TVM's HardwareParams). num_cores is the SM count there. */
    int target;                      /* kt_sched_target_t of the sketches made */
    int max_threads_per_block;
    int max_shared_memory_per_block; /* bytes */
    int max_vthread_extent;
    int warp_size;
} kt_sched_params_t;

/* CPU defaults for this host: cores from sysconf, vector width from the CPU's
 * AVX-512 / AVX2 support, 64, 512 and 16 for the three bounds; target CPU and the
 * GPU limits of kt_sched_params_default_gpu (unused for CPU states). */
void kt_sched_params_default(kt_sched_params_t *p);

/* The largest inner factor of a reduce axis in a direct tile (a tiled stage
 * whose outer reduce factors are all 1): max_direct_reduce_factor, never
 * below max_innermost_split_factor. */
int kt_sched_direct_reduce_cap(const kt_sched_params_t *p);

/* GPU defaults (the sm_90 preset of measure/hw_params.h: 132 SMs, 1024
 * threads and 48 KiB shared memory per block, vthread extent 8, warp 32),
 * target cuda. */
void kt_sched_params_default_gpu(kt_sched_params_t *p);

/* Parameters for the hardware hw describes (a preset or a runner's device,
 * with any --hw overrides): target, cores and, for cuda, the block limits;
 * CPU bounds as kt_sched_params_default. 0, or KT_EINVAL for an unknown
 * target or a GPU without positive limits. */
int kt_sched_params_from_hw(const kt_hw_params_t *hw, kt_sched_params_t *p);

/* ---- the state ------------------------------------------------------------ */

typedef enum {
    KT_SK_INPUT = 0,  /* placeholder: nothing to schedule */
    KT_SK_ROOT,       /* plain loop nest, at root or computed at a consumer loop */
    KT_SK_INLINE,     /* inlined into its consumers */
    KT_SK_TILED,      /* multi-level tiled "SSRSRS" */
    KT_SK_FUSED,      /* elementwise consumer of a tiled stage, follows its tiling */
    KT_SK_RFACTOR,    /* reduction split into partial results and a final reduce */
    KT_SK_XREDUCE,    /* GPU: cross-thread reduction, one block per output element */
    KT_SK_SIMPLIFY,   /* CPU: simplify-compute-with-const-tensor (a stage with const_axes):
                         the other spatial axes tiled in 2 levels, the const axes innermost
                         and unrolled so the constant tables fold into the code */
} kt_sched_kind_t;

/* Annotations of one loop nest. */
typedef struct {
    uint8_t parallel;   /* outermost loops fused and parallel (0: none) */
    uint8_t vectorize;  /* innermost loops fused and vectorized (0: none) */
    int16_t unroll;     /* auto_unroll_max_step; only nests with reduce loops */
} kt_sched_ann_t;

typedef struct {
    int8_t kind;         /* kt_sched_kind_t */
    /* sketch */
    int8_t fuse;         /* TILED, XREDUCE: consumer computed at (FUSED) or -1; FUSED: its
                            producer */
    int8_t cache_write;  /* TILED: accumulate in a local cache stage, copy out at `level` */
    int8_t level;        /* TILED with fuse or cache_write: tile level 1 or 2 it is computed at
                            (GPU: always 3, the register tile) */
    int8_t rf_inner;     /* RFACTOR: 1 when the partial-result axis is the inner split part */
    /* annotations */
    int8_t at_stage;     /* ROOT: consumer stage it is computed at, -1 at root */
    int8_t at_depth;     /* ROOT with at_stage: inside the consumer's first at_depth loops */
    /* TILED: split[a][l] = factor of axis a (spatial first, then reduce) at
     * level l, outermost first; 4 levels for spatial, 2 for reduce axes
     * (GPU: 5 and 3). Unused entries are 0.
     * RFACTOR: split[0][0..1] = outer and inner part of all reduce axes fused.
     * SIMPLIFY: split[a][0..1] for every spatial axis a not in const_axes. */
    int32_t split[KT_SCHED_MAX_AXES][KT_SCHED_MAX_LEVELS];
    kt_sched_ann_t ann;  /* the stage's own nest (RFACTOR: the partial nest; GPU: only
                            unroll is used) */
    kt_sched_ann_t ann2; /* TILED+cache_write: copy-out nest; RFACTOR: final nest */
    /* GPU only (0 on CPU) */
    int32_t threads;     /* ROOT, XREDUCE: threads per block */
    uint32_t smem;       /* TILED: bit p = producer stage p is staged in shared memory */
    int8_t vec;          /* TILED with smem: consecutive elements each thread fetches per
                            step of the cooperative fetch (1, 2 or 4) */
} kt_sched_stage_t;

/* 1 when every outer reduce factor (R0) of tiled stage e of ss is 1: its
 * reduction ends inside the register tile (a direct tile). */
int kt_sched_reduce_ends_in_tile(const kt_stage_t *ss, const kt_sched_stage_t *e);

typedef struct kt_sched_state {
    int nstages;                 /* = kt_dag_num_stages */
    int target;                  /* kt_sched_target_t */
    kt_sched_stage_t stages[];   /* one per DAG stage, same order */
} kt_sched_state_t;

/* The initial state: every compute stage a plain ROOT nest, no annotation
 * (the start of sketch derivation; not valid when a stage must be inlined,
 * every sketch is). */
kt_sched_state_t *kt_sched_state_new(const kt_dag_t *dag);
kt_sched_state_t *kt_sched_state_clone(const kt_sched_state_t *st);
void kt_sched_state_free(kt_sched_state_t *st);
size_t kt_sched_state_size(const kt_sched_state_t *st);   /* bytes of the block */
int kt_sched_state_equal(const kt_sched_state_t *a, const kt_sched_state_t *b);

/* ---- sketches and annotation ---------------------------------------------- */

/* All sketches of a DAG (CPU rules in Ansor's order: always-inline,
 * simplify-compute-with-const-tensor, add-rfactor, add-cache-write,
 * multi-level-tiling-with-fusion, multi-level-tiling, skip-stage), visiting
 * stages from the output backwards. simplify-compute-with-const-tensor
 * applies to a stage with const_axes (kt_dag_set_const_axes) and skips the
 * rest: a SIMPLIFY nest, i.e. loops S0 S1 over the other spatial axes, then
 * the const spatial axes, then the const reduce axes, the last two groups
 * unrolled with their values known to the emitter (see lower.h). Its
 * annotations: parallel over leading S0 loops, vectorize 1 = the innermost
 * S1 loop (the loop around the unrolled block), no auto-unroll. Sketches
 * carry no annotation yet (all split factors 1).
 * *out is a malloc'd array of *n states (free each, then the array).
 * 0 or negative. */
int kt_sched_sketches(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t ***out,
                      int *n);

/* A random complete state from a sketch, applying the CPU annotation rules
 * in order: fill tile sizes, change compute location, parallel, unroll,
 * vectorize. NULL on error (bad sketch, OOM). */
kt_sched_state_t *kt_sched_sample(const kt_dag_t *dag, const kt_sched_params_t *p,
                                  const kt_sched_state_t *sketch, kt_rng_t *rng);

/* Mutation rules and Ansor's CPU weights (GPU: tile size 0.90, auto-unroll
 * 0.10; the other rules find nothing to change on GPU states). */
typedef enum {
    KT_MUT_TILE_SIZE = 0,   /* 0.90: move a prime factor between two levels of a split
                               (GPU: also another thread count of a plain or
                               cross-thread-reduction kernel) */
    KT_MUT_AUTO_UNROLL,     /* 0.04: another auto-unroll max step */
    KT_MUT_COMPUTE_LOC,     /* 0.05: another compute location */
    KT_MUT_PARALLEL,        /* 0.01: another number of fused parallel loops */
    KT_MUT_TILE_SHAPE,      /* never drawn (ktune's, asked for by the search's
                               tile_siblings): exchange a prime factor between two
                               spatial axes, the innermost level of one and an
                               outer level of the other, so the register tile
                               changes shape and every loop level keeps its
                               trip count where the prime is the same */
    KT_MUT_REDUCE_IN,       /* never drawn (ktune's, asked for by the search's
                               direct_siblings): every outer reduce factor of a
                               tiled stage moved into its inner level, so the
                               reduction ends inside the register tile, which
                               then writes its consumer (a stage where one
                               would exceed kt_sched_direct_reduce_cap is left) */
    KT_MUT_ROWS_OUT,        /* never drawn (ktune's, asked for by the search's
                               row_siblings): a row sweep. A tiled stage that reads
                               a padding gets it inlined (where it may be), every
                               outer factor of its first axis longer than 1 (a
                               convolution's output rows) in the outermost level
                               and every outer factor of the next such axis (the
                               columns) in the last level outside the register
                               tile, the tile unchanged: a parallel chunk spans no
                               more rows than the tile, and a row's columns are
                               swept inside the loops over channel blocks */
    KT_MUT__COUNT
} kt_sched_mut_t;

/* Apply one mutation (rule < 0: drawn by the weights above). Returns 1 and a
 * new valid state in *out, 0 when the rule found nothing to change or the
 * change broke validity (GPU: exceeded a hardware limit of p) (*out NULL),
 * or negative on error. */
int kt_sched_mutate(const kt_dag_t *dag, const kt_sched_params_t *p, const kt_sched_state_t *st,
                    int rule, kt_rng_t *rng, kt_sched_state_t **out);

/* The placements KT_MUT_COMPUTE_LOC can move st's stages to, counted and
 * taken in a fixed order (stages in order, each one's options root,
 * inline, at each depth of its consumer, less the one it has), so a
 * caller can propose each once: kt_sched_relocations gives their number
 * (0 on a GPU state or a bad argument), kt_sched_relocate the k-th as
 * kt_sched_mutate gives a mutation (the moved stage's loops annotated
 * afresh from rng): 1 and *out, 0 where the move breaks validity,
 * negative for a k out of range or on error. */
int kt_sched_relocations(const kt_dag_t *dag, const kt_sched_state_t *st);
int kt_sched_relocate(const kt_dag_t *dag, const kt_sched_params_t *p, const kt_sched_state_t *st,
                      int k, kt_rng_t *rng, kt_sched_state_t **out);

/* Auto-unroll max steps the sampler and mutator choose from. */
extern const int kt_sched_unroll_steps[4];   /* {0, 16, 64, 512} */
extern const int kt_sched_gpu_unroll_steps[5];   /* {0, 16, 64, 512, 1024} */

/* ---- re-fitting (schedule transfer) ------------------------------------------ */

/* A state of dag for what state src does on src_dag, a DAG of the same
 * operators (per stage the same name, tag, rank and reductions) with other
 * extents (Transfer-Tuning, Gibson & Cano 2022). The result starts from the
 * sketch of dag with src's structure (kind, fused consumer or cache stage
 * and its level, rfactor variant, GPU shared-memory producers; a plain stage
 * whose location is tunable may be inlined either way); each split is the
 * exact factorization of dag's extent nearest to src's factors level by
 * level (least sum of |log(new / old)|, innermost factor within p's bound;
 * on a tie the one that changes the inner levels least, so the register
 * tile stays and the outer loops take the change), a CPU direct tile stays
 * direct where its reduce extents fit kt_sched_direct_reduce_cap; compute
 * locations are kept (a depth beyond what the consumer offers is clamped,
 * a consumer that no longer fits sends the stage to root); parallel and
 * vectorized loop counts are clamped to the loops each nest has, auto-unroll
 * and GPU thread counts and fetch widths are kept. The result is validated
 * against dag and p. NULL with a message (KT_EINVAL) when the DAGs differ
 * in operators, the targets differ, dag has no sketch of src's structure,
 * or the result is not valid (a GPU kernel beyond p's limits, say). p NULL:
 * host CPU defaults. Reads its inputs only; any thread. */
kt_sched_state_t *kt_sched_refit(const kt_dag_t *src_dag, const kt_sched_state_t *src,
                                 const kt_dag_t *dag, const kt_sched_params_t *p);

/* What state src does on src_dag, as a state of dag: the same computation
 * at the same extents with one trailing elementwise stage more (one more
 * unary epilogue: the old output is inlined into the new one, which takes
 * its schedule) or less (the output's schedule passes to the stage that was
 * inlined into it), the last stage's only producer being the one before
 * it. kt_sched_refit then fits it to other extents: ResNet's conv + add +
 * relu takes the schedule of a conv + add. Validated against dag and p;
 * NULL with a message (KT_EINVAL) otherwise. Reads its inputs only. */
kt_sched_state_t *kt_sched_retail(const kt_dag_t *src_dag, const kt_sched_state_t *src,
                                  const kt_dag_t *dag, const kt_sched_params_t *p);

/* ---- validity --------------------------------------------------------------- */

/* Check a state against its DAG and the parameters: every decision is one
 * the rules could make and the state lowers to correct code (exact
 * factorizations, innermost factors within bounds, annotations on loops
 * that exist and may carry them, consistent fusion and compute locations).
 * 0 or KT_EINVAL with a message naming the stage. */
int kt_sched_state_validate(const kt_dag_t *dag, const kt_sched_params_t *p,
                            const kt_sched_state_t *st);

/* The loops of one loop nest of a state, outermost first (what lowering
 * builds and the annotation rules look at). nest 0 is a stage's own nest
 * (`ann`), nest 1 its second one (`ann2`): the copy-out nest of a
 * cache-write stage (at root; the tiled nest is computed inside it) or the
 * final reduce nest of an rfactor stage. A tiled nest lists S0 S1 R0 S2 R1
 * S3 (levels below its compute level only when computed at a consumer); the
 * nest of a consumer of a tiled stage lists its levels 0..L-1 then the rest
 * of the tile. The reduction's init nest is not listed. */
#define KT_SCHED_MAX_LOOPS (KT_SCHED_MAX_AXES * KT_SCHED_SPATIAL_LEVELS)

typedef struct {
    int8_t axis;     /* stage axis: spatial a, reduce ndim + r; RFACTOR: ndim = all reduce axes fused */
    int8_t level;    /* split level of the axis (0 when unsplit); consumer of a tiled stage:
                        0..L-1, L for the rest of the tile; RFACTOR: 0 outer, 1 inner part */
    int8_t reduce;   /* a reduction loop */
    int8_t attach;   /* other stages are computed inside this loop, before the next loop */
    int64_t extent;
} kt_sched_loop_t;

typedef struct {
    int nloops;
    kt_sched_loop_t loops[KT_SCHED_MAX_LOOPS];
    int root;            /* at root (not inside another nest): may run in parallel */
    int tiled;           /* follows a multi-level tiling: vectorize at most one loop */
    int max_parallel;    /* leading spatial loops, up to and including the first attach loop */
    int max_vectorize;   /* trailing spatial loops below every attach loop (tiled: <= 1) */
    int has_reduce;      /* has reduction loops: auto-unroll applies */
} kt_sched_nest_t;

/* Fill *out for nest `nest` of stage `stage`; returns 1, or 0 when the
 * stage has no such nest (inputs, inlined stages, nest 1 of most kinds, any
 * stage of a GPU state: see kt_sched_gpu_kernels). */
int kt_sched_nest(const kt_dag_t *dag, const kt_sched_state_t *st, int stage, int nest,
                  kt_sched_nest_t *out);

/* ---- serialization, hashing, printing --------------------------------------- */

/* Canonical compact JSON (sorted keys, only the fields of each stage's
 * kind), e.g. {"stages":[{"kind":"input","name":"A"}, ...],"version":1}.
 * GPU states add "target":"cuda" and "launches": one object per kernel in
 * launch order, {"block":[T,1,1],"grid":[G,1,1],"smem":bytes,"stage":name},
 * and their stages carry GPU keys ("threads", "unroll", "smem", "vec"). */
char *kt_sched_state_to_json(const kt_sched_state_t *st, const kt_dag_t *dag);

/* Parse and validate against the DAG and parameters (p NULL: host
 * defaults; a GPU state is checked against p's GPU limits when p's target is
 * cuda, else against kt_sched_params_default_gpu). The launches of a GPU
 * state must match the ones its schedule implies. NULL with a message on
 * malformed JSON, names that do not match the DAG, or an invalid state;
 * never crashes on any input. */
kt_sched_state_t *kt_sched_state_from_json(const char *json, const kt_dag_t *dag,
                                           const kt_sched_params_t *p);

/* Stable 64-bit hash of the canonical JSON (kt_hash64); 0 on OOM. */
uint64_t kt_sched_state_hash(const kt_sched_state_t *st, const kt_dag_t *dag);

/* The state's decisions as knob values (AutoTVM's config knobs): one key per
 * (stage, decision, value), a decision being a stage's structure, its compute
 * location, one split factor of one axis at one level, or one annotation.
 * Two states share a key where they made the same choice; a diversity-aware
 * pick counts the keys a set of states covers. Keys are uniform 64-bit
 * hashes (never 0). Writes at most cap keys into out and returns their
 * number; KT_EINVAL when cap < KT_SCHED_KNOBS_PER_STAGE x nstages. */
#define KT_SCHED_KNOBS_PER_STAGE (KT_SCHED_MAX_AXES * KT_SCHED_MAX_LEVELS + 11)
int kt_sched_state_knobs(const kt_sched_state_t *st, uint64_t *out, int cap);

/* The state's register tile: a hash of the innermost spatial split factor of
 * every axis of every TILED stage (CPU level 3, GPU level 4), the loop nest's
 * accumulator block, the choice that sets most of a kernel's speed. States
 * with the same key are one tile family. 0 when no stage is tiled. */
uint64_t kt_sched_state_tile_key(const kt_sched_state_t *st);

/* Short name of a kind ("tiled") and the reverse lookup (-1 if unknown). */
const char *kt_sched_kind_name(int kind);
int kt_sched_kind_parse(const char *name);

/* ---- analysis helpers shared with codegen ----------------------------------- */

/* Stage s is always inlined on CPU (Ansor's strict inlinability: inlinable
 * and no branch, i.e. no select such as padding). */
int kt_sched_always_inline(const kt_dag_t *dag, int s);

/* Bit mask of the stages inlined in st. */
uint64_t kt_sched_inline_mask(const kt_sched_state_t *st);

/* ---- GPU states ----------------------------------------------------------------
 *
 * Sketch rules (Ansor's GPU order, from the output backwards): add-cache-read
 * (folded into the tiled stage: `smem` names the producers staged in shared
 * memory), always-inline (every inlinable stage, padding included),
 * cross-thread-reduction, add-cache-write / multi-level-tiling-with-fusion
 * (the register tile, level 3), skip-stage. Each compute stage that is not
 * inlined or fused becomes one kernel, launched in stage order:
 *
 * - TILED ("SSSRRSRS"): spatial levels S0 -> blockIdx.x, S1 -> vthread,
 *   S2 -> threadIdx.x (each fused over all axes), S3 and S4 the register
 *   tile; reduce levels R0 (outer, a shared-memory step), R1, R2. Per R0
 *   step all threads of the block cooperatively fetch the box of every
 *   staged producer it reads (barriers before and after), then accumulate in
 *   registers; the fused consumer (or the copy-out) runs on the register tile.
 * - XREDUCE: one block per output element, `threads` threads each reduce a
 *   strided part of the fused reduce axes, then warp shuffles and shared
 *   memory combine them; a fused elementwise consumer runs on thread 0.
 * - ROOT: all spatial axes fused, split into blocks of `threads` threads
 *   (the last block guarded); reduce loops run serially in each thread.
 *
 * Annotation: split factors from exact factorizations (innermost factor at
 * most max_innermost_split_factor), thread counts, the fetch vector length,
 * auto-unroll from kt_sched_gpu_unroll_steps. A state is valid only when
 * every kernel is within the parameters' limits: threads per block, vthread
 * extent, static shared memory per block, and KT_SCHED_GPU_MAX_LOCAL
 * accumulator floats per thread; sampling and mutation never return one
 * that is not. */

/* Per-thread register tile bound: not a hardware limit but keeps generated
 * kernels (and their compile times) sane; spills beyond it are pointless. */
#define KT_SCHED_GPU_MAX_LOCAL 1024
/* Threads of a cross-thread reduction are multiples of this (CUDA's warp). */
#define KT_SCHED_GPU_WARP 32

/* One kernel of a GPU state. */
typedef struct {
    int stage;            /* the stage it computes (its fused consumer too) */
    int kind;             /* KT_SK_TILED, KT_SK_XREDUCE or KT_SK_ROOT */
    int64_t grid;         /* blocks (blockIdx.x) */
    int64_t threads;      /* threads per block (threadIdx.x) */
    int64_t vthreads;     /* virtual threads per thread (TILED; else 1) */
    int64_t smem_bytes;   /* static shared memory per block */
    int64_t local_elems;  /* accumulator floats per thread */
} kt_sched_gpu_kernel_t;

/* The kernels of GPU state st in launch order into out (capacity
 * KT_TE_MAX_STAGES); returns their count (structure only: call
 * kt_sched_state_validate for the limits), or KT_EINVAL for a CPU state. */
int kt_sched_gpu_kernels(const kt_dag_t *dag, const kt_sched_state_t *st,
                         kt_sched_gpu_kernel_t *out);

/* How stage s reads producer p when p can be staged in shared memory: p is
 * read exactly once by s (looking through the stages in inline_mask, which
 * must not read p themselves), at indices linear in s's axes with
 * non-negative coefficients and no constant: index d = sum_a coef[d][a] *
 * axis a (spatial axes first, then reduce axes). */
typedef struct {
    int ndim;   /* p's rank */
    int64_t coef[KT_TE_MAX_DIMS][KT_SCHED_MAX_AXES];
} kt_sched_access_t;

/* 1 and *acc when the read qualifies, else 0. */
int kt_sched_gpu_access(const kt_dag_t *dag, uint64_t inline_mask, int s, int p,
                        kt_sched_access_t *acc);

/* Extent along each dimension of the box of p a TILED stage reads in one
 * R0 step: sum_a coef[d][a] * (t_a - 1) + 1, where t_a is the product of
 * axis a's split factors below level 0. Returns the element count. */
int64_t kt_sched_gpu_box(const kt_sched_stage_t *e, const kt_stage_t *s,
                         const kt_sched_access_t *acc, int64_t *box);

#endif
