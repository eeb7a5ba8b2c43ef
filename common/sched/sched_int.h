/*
 * Internal helpers shared by the files of common/sched (not installed).
 */
#ifndef KT_SCHED_INT_H
#define KT_SCHED_INT_H

#include <jansson.h>

#include "state.h"

/* Non-inlined stages that read stage s, looking through stages inlined in st.
 * Writes up to KT_TE_MAX_STAGES indices into out; returns the count. */
int kt_sched_eff_consumers(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int *out);

/* Every read of stage s by stage c (through stages inlined in st) indexes
 * s's first `depth` dimensions with c's axes 0..depth-1 in order. */
int kt_sched_reads_prefix(const kt_dag_t *dag, const kt_sched_state_t *st, int c, int s,
                          int depth);

/* Stage c is the single consumer of tiled stage s and reads it elementwise
 * (Ansor's HasSingleElementwiseMatchedConsumer on CPU). */
int kt_sched_elementwise_matched(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int c);

/* Consumer c that s can be computed at (its single consumer, plain nest at
 * root, read with an identity prefix); returns c and the deepest allowed
 * depth in *max_depth, or -1. */
int kt_sched_at_target(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int *max_depth);

/* The compute location of s may be tuned (ROOT or INLINE by choice, not an
 * output, not always inlined). */
int kt_sched_loc_tunable(const kt_dag_t *dag, const kt_sched_state_t *st, int s);

/* Product of all reduce extents of a stage. */
int64_t kt_sched_reduce_len(const kt_stage_t *s);

/* Is v one of kt_sched_unroll_steps. */
int kt_sched_unroll_ok(int v);

/* Prime factorization of n (<= 2^30): k distinct primes and exponents. */
int kt_sched_factorize(int64_t n, int64_t *primes, int *exps);

/* Tile-size mutation of one split f over nlev levels: a prime factor of a
 * random level > 1 moves to another random level, unless the innermost one
 * would exceed max_inner. 1 when f changed, 0 when it did not (f intact);
 * the product of f is kept. */
int kt_sched_move_factor(int32_t *f, int nlev, int max_inner, kt_rng_t *rng);

/* Factors of `extent` over nlev (<= KT_SCHED_MAX_LEVELS) levels, uniform
 * over the exact factorizations whose innermost factor is <= max_inner. */
void kt_sched_sample_split(int64_t extent, int nlev, int max_inner, kt_rng_t *rng, int32_t *out);

/* ---- sketch derivation (sketch.c, shared with sketch_gpu.c) ------------------- */

/* The sketches derived so far: each rule application that completes a state
 * pushes a copy; rc holds the first error (then pushes do nothing). */
typedef struct {
    const kt_dag_t *dag;
    const kt_sched_params_t *p;
    kt_sched_state_t **v;
    int n, cap;
    int rc;
} kt_sched_sketch_ctx_t;

void kt_sched_sketch_push(kt_sched_sketch_ctx_t *c, const kt_sched_state_t *st);

/* Apply finish (may be NULL) to every sketch and hand them to *out / *n, or
 * free them all and return c->rc when derivation failed. */
int kt_sched_sketch_done(kt_sched_sketch_ctx_t *c,
                         void (*finish)(const kt_dag_t *dag, kt_sched_state_t *st),
                         kt_sched_state_t ***out, int *n);

/* ---- GPU (sketch_gpu.c, annotate_gpu.c, serial_gpu.c) -------------------------- */

int kt_sched_gpu_sketches(const kt_dag_t *dag, const kt_sched_params_t *p,
                          kt_sched_state_t ***out, int *n);
kt_sched_state_t *kt_sched_gpu_sample(const kt_dag_t *dag, const kt_sched_params_t *p,
                                      const kt_sched_state_t *sketch, kt_rng_t *rng);
int kt_sched_gpu_mutate(const kt_dag_t *dag, const kt_sched_params_t *p,
                        const kt_sched_state_t *st, int rule, kt_rng_t *rng,
                        kt_sched_state_t **out);
/* p: limits to check (its target is ignored; NULL: kt_sched_params_default_gpu). */
int kt_sched_gpu_validate(const kt_dag_t *dag, const kt_sched_params_t *p,
                          const kt_sched_state_t *st);
/* Producers of tiled stage s that the add-cache-read rule stages in shared
 * memory (bit mask of stage indices). */
uint32_t kt_sched_gpu_stageable(const kt_dag_t *dag, const kt_sched_state_t *st, int s);
/* The single elementwise-matched consumer of s that is still a plain
 * (ROOT) stage, or -1. */
int kt_sched_matched_consumer(const kt_dag_t *dag, const kt_sched_state_t *st, int s);

/* JSON of a GPU state (canonical text, malloc'd) and parsing of the root
 * object of one (validated with p). */
char *kt_sched_gpu_to_json(const kt_sched_state_t *st, const kt_dag_t *dag);
kt_sched_state_t *kt_sched_gpu_from_json(const json_t *root, const kt_dag_t *dag,
                                         const kt_sched_params_t *p);
/* Parsing helpers shared by both (serial.c): 1 and *out set when v is an
 * integer in [lo, hi], else 0; the index of the stage named by the string
 * v, or -1. */
int kt_sched_json_int(const json_t *v, long long lo, long long hi, long long *out);
int kt_sched_stage_by_name(const kt_dag_t *dag, const json_t *v);

#endif
