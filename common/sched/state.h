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
 * for is built by common/codegen/lower.h; kt_sched_state_print() shows it.
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

#include "te/te.h"
#include "util/rng.h"

/* ---- hardware and search parameters ------------------------------------- */

#define KT_SCHED_MAX_AXES (KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE)  /* axes of one stage */
#define KT_SCHED_SPATIAL_LEVELS 4   /* "SSRSRS": spatial axes split in 4 levels */
#define KT_SCHED_REDUCE_LEVELS 2    /* ... and reduce axes in 2 */

typedef struct {
    int num_cores;                   /* parallel threads (Ansor's num_cores) */
    int vector_bytes;                /* SIMD register width, 64 with AVX-512 (Ansor's
                                        vector_unit_bytes, for cost features; the
                                        vectorize rule is bounded by max_vectorize_size) */
    int max_innermost_split_factor;  /* innermost tile factor bound (64) */
    int max_vectorize_size;          /* longest vectorized loop when sampling (16) */
} kt_sched_params_t;

/* CPU defaults for this host: cores from sysconf, vector width from the CPU's
 * AVX-512 / AVX2 support, 64 and 16 for the two bounds. */
void kt_sched_params_default(kt_sched_params_t *p);

/* ---- the state ------------------------------------------------------------ */

typedef enum {
    KT_SK_INPUT = 0,  /* placeholder: nothing to schedule */
    KT_SK_ROOT,       /* plain loop nest, at root or computed at a consumer loop */
    KT_SK_INLINE,     /* inlined into its consumers */
    KT_SK_TILED,      /* multi-level tiled "SSRSRS" */
    KT_SK_FUSED,      /* elementwise consumer of a tiled stage, follows its tiling */
    KT_SK_RFACTOR,    /* reduction split into partial results and a final reduce */
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
    int8_t fuse;         /* TILED: consumer computed at (FUSED) or -1; FUSED: its producer */
    int8_t cache_write;  /* TILED: accumulate in a local cache stage, copy out at `level` */
    int8_t level;        /* TILED with fuse or cache_write: tile level 1 or 2 it is computed at */
    int8_t rf_inner;     /* RFACTOR: 1 when the partial-result axis is the inner split part */
    /* annotations */
    int8_t at_stage;     /* ROOT: consumer stage it is computed at, -1 at root */
    int8_t at_depth;     /* ROOT with at_stage: inside the consumer's first at_depth loops */
    /* TILED: split[a][l] = factor of axis a (spatial first, then reduce) at
     * level l, outermost first; 4 levels for spatial, 2 for reduce axes.
     * RFACTOR: split[0][0..1] = outer and inner part of all reduce axes fused. */
    int32_t split[KT_SCHED_MAX_AXES][KT_SCHED_SPATIAL_LEVELS];
    kt_sched_ann_t ann;  /* the stage's own nest (RFACTOR: the partial nest) */
    kt_sched_ann_t ann2; /* TILED+cache_write: copy-out nest; RFACTOR: final nest */
} kt_sched_stage_t;

typedef struct kt_sched_state {
    int nstages;                 /* = kt_dag_num_stages */
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
 * add-rfactor, add-cache-write, multi-level-tiling-with-fusion,
 * multi-level-tiling, skip-stage), visiting stages from the output
 * backwards. Sketches carry no annotation yet (all split factors 1).
 * *out is a malloc'd array of *n states (free each, then the array).
 * 0 or negative. */
int kt_sched_sketches(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t ***out,
                      int *n);

/* A random complete state from a sketch, applying the CPU annotation rules
 * in order: fill tile sizes, change compute location, parallel, unroll,
 * vectorize. NULL on error (bad sketch, OOM). */
kt_sched_state_t *kt_sched_sample(const kt_dag_t *dag, const kt_sched_params_t *p,
                                  const kt_sched_state_t *sketch, kt_rng_t *rng);

/* Mutation rules and Ansor's CPU weights. */
typedef enum {
    KT_MUT_TILE_SIZE = 0,   /* 0.90: move a prime factor between two levels of a split */
    KT_MUT_AUTO_UNROLL,     /* 0.04: another auto-unroll max step */
    KT_MUT_COMPUTE_LOC,     /* 0.05: another compute location */
    KT_MUT_PARALLEL,        /* 0.01: another number of fused parallel loops */
    KT_MUT__COUNT
} kt_sched_mut_t;

/* Apply one mutation (rule < 0: drawn by the weights above). Returns 1 and a
 * new valid state in *out, 0 when the rule found nothing to change (*out
 * NULL), or negative on error. */
int kt_sched_mutate(const kt_dag_t *dag, const kt_sched_params_t *p, const kt_sched_state_t *st,
                    int rule, kt_rng_t *rng, kt_sched_state_t **out);

/* Auto-unroll max steps the sampler and mutator choose from. */
extern const int kt_sched_unroll_steps[4];   /* {0, 16, 64, 512} */

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
 * stage has no such nest (inputs, inlined stages, nest 1 of most kinds). */
int kt_sched_nest(const kt_dag_t *dag, const kt_sched_state_t *st, int stage, int nest,
                  kt_sched_nest_t *out);

/* ---- serialization, hashing, printing --------------------------------------- */

/* Canonical compact JSON (sorted keys, only the fields of each stage's
 * kind), e.g. {"stages":[{"kind":"input","name":"A"}, ...],"version":1}. */
char *kt_sched_state_to_json(const kt_sched_state_t *st, const kt_dag_t *dag);

/* Parse and validate against the DAG and parameters (p NULL: host
 * defaults). NULL with a message on malformed JSON, names that do not match
 * the DAG, or an invalid state; never crashes on any input. */
kt_sched_state_t *kt_sched_state_from_json(const char *json, const kt_dag_t *dag,
                                           const kt_sched_params_t *p);

/* Stable 64-bit hash of the canonical JSON (kt_hash64); 0 on OOM. */
uint64_t kt_sched_state_hash(const kt_sched_state_t *st, const kt_dag_t *dag);

/* The loop nest, TVM style, one loop per line indented by depth:
 *   parallel i.0@j.0@ (0,64)
 *     for k.0 (0,32)
 *       vectorize j.3 (0,16)
 *         C.local = ...
 * NULL on error. */
char *kt_sched_state_print(const kt_dag_t *dag, const kt_sched_state_t *st);

/* Short name of a kind ("tiled") and the reverse lookup (-1 if unknown). */
const char *kt_sched_kind_name(int kind);
int kt_sched_kind_parse(const char *name);

/* ---- analysis helpers shared with codegen ----------------------------------- */

/* Stage s is always inlined on CPU (Ansor's strict inlinability: inlinable
 * and no branch, i.e. no select such as padding). */
int kt_sched_always_inline(const kt_dag_t *dag, int s);

/* Bit mask of the stages inlined in st. */
uint64_t kt_sched_inline_mask(const kt_sched_state_t *st);

#endif
