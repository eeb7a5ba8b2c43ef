/*
 * Internal helpers shared by the files of common/sched (not installed).
 */
#ifndef KT_SCHED_INT_H
#define KT_SCHED_INT_H

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

#endif
