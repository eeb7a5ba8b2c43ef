/*
 * Program features for the cost model (Ansor's per-store features, 164
 * values there): a (DAG, schedule state) pair is lowered (codegen/lower.h)
 * and every buffer the loop-nest program stores to yields one row of
 * KT_FEATURE_COUNT floats describing how that store is computed (CPU and
 * GPU states alike; the state's target picks the lowering):
 *
 *   [  0, 16)  arithmetic ops by kind, times the statement's trip count
 *   [ 16, 49)  loop annotations: vectorize, unroll, parallel (count, product
 *              of lengths, innermost length, one-hot position)
 *   [ 49,139)  up to 5 buffers accessed (sorted by bytes, descending), 18
 *              values each: access type, bytes, unique bytes, cache lines,
 *              unique lines, reuse type, reuse distance and count, stride
 *   [139,149)  arithmetic-intensity curve (10 points)
 *   [149,153)  allocation: local and heap bytes, enclosing-loop product
 *   [153,156)  outer-loop product, number of loops, auto-unroll max step
 *   [156,164)  the innermost loop (extent, reduction, accesses that are
 *              contiguous / invariant / strided in it) and the accumulator
 *              tile inside the innermost reduction loop (size, loops, and
 *              that loop's extent)
 *   [164,178)  GPU (0 in CPU rows): extents bound to blockIdx.x/y/z,
 *              threadIdx.x/y/z and vthread, threads per block, blocks,
 *              shared bytes per block, local (register) bytes per thread,
 *              cooperative-fetch vector width, warp utilization, barriers
 *              per thread; all of the statement's kernel
 *
 * GPU programs: the block, thread and vthread loops count as loops (trip
 * counts cover all threads of all blocks); a statement under guards counts
 * the share of iterations they let through; each shared-memory box gets
 * the row of its cooperative fetch; a cross-thread all-reduce adds one
 * combine per thread to its partial's row; address steps along a loop are
 * exact through the / and % that split fused block and thread indices back
 * into axes. The auto-unroll step of a GPU row is its kernel stage's.
 *
 * CPU states are lowered as they are measured (kt_lower_ex with prepacked):
 * a weight the state re-lays out comes packed ahead of time (runner.h), so
 * its copy is no stored buffer and has no row; the update's row describes
 * the reads of the packed layout.
 *
 * Rows come in program order of each buffer's first store. Statements that
 * store the same buffer (a reduction's init and update, a register tile's
 * copy-back) share one row: their op counts add up, the other features are
 * those of the statement that runs most often. Counts, sizes, distances
 * and intensities are log2(1 + x); flags, one-hots and numbers of loops are
 * not. kt_feature_name(i) and kt_feature_doc(i) tell what value i is (one
 * table in feature.c drives both and the extractor's layout).
 *
 * A cost model sums its per-row predictions into one score per state
 * (Ansor's pack-sum), so the number of rows may differ between states of
 * one DAG (a cache-write or register tile adds a stored buffer).
 *
 * Ownership: returned row arrays are malloc'd; the caller frees them. All
 * functions only read their inputs and are thread-safe. Results are
 * deterministic and finite for every valid state.
 */
#ifndef KT_FEATURE_FEATURE_H
#define KT_FEATURE_FEATURE_H

#include <stdint.h>

#include "codegen/lower.h"
#include "sched/state.h"
#include "te/te.h"

#define KT_FEATURE_COUNT 178      /* values per row (164 CPU, then GPU) */
#define KT_FEATURE_MAX_BUFS 5     /* buffers described per row */
#define KT_FEATURE_BUF_VALUES 18  /* values per described buffer */
#define KT_FEATURE_CURVE 10       /* points of the arithmetic-intensity curve */
/* Raise by one whenever a value's meaning or the extraction changes without
 * changing KT_FEATURE_COUNT: a model trained on other rows is then unusable. */
#define KT_FEATURE_LAYOUT 1
/* Identifies the feature layout a stored cost model was trained on (the
 * record store's cost_models.feature_version): a model of another version
 * is rebuilt from the records, never used. */
#define KT_FEATURE_VERSION (KT_FEATURE_COUNT * 1000 + KT_FEATURE_LAYOUT)

/* ---- extraction ---------------------------------------------------------- */

/* One row per stage of the lowered state (Ansor: one per buffer store statement). rows:
 * malloc'd nrows*KT_FEATURE_COUNT floats, caller frees. 0 or negative. */
int kt_feature_extract(const kt_dag_t *dag, const kt_sched_state_t *st, float **rows, uint32_t *nrows);

/* The same from L = kt_lower_ex(dag, st, 1) computed already (st gives the
 * auto-unroll steps). row_buf, when not NULL, receives a malloc'd array of
 * *nrows buffer indices (into L->bufs): the buffer whose stores each row
 * describes. 0 or negative. */
int kt_feature_extract_lower(const kt_dag_t *dag, const kt_sched_state_t *st, const kt_lower_t *L,
                             float **rows, uint32_t *nrows, int **row_buf);

/* Many states of one DAG: rows of all states concatenated in order,
 * counts[i] (caller's array of n) = rows of state i. A state that cannot be
 * lowered gets 0 rows (the search drops it) and does not fail the batch.
 * *rows is NULL when there are no rows at all. 0 or negative (OOM, bad
 * arguments). */
int kt_feature_extract_batch(const kt_dag_t *dag, const kt_sched_state_t *const *states, int n,
                             float **rows, uint32_t *counts);

/* ---- the feature table ---------------------------------------------------- */

/* Feature names and meanings, index i < KT_FEATURE_COUNT. */
const char *kt_feature_name(int i);
const char *kt_feature_doc(int i);

#endif
