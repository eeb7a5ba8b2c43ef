/*
 * Schedule transfer (after Transfer-Tuning, Gibson & Cano 2022): a task
 * without records of its own starts from the best schedules the record store
 * holds of the workloads nearest to it, re-fitted to its shapes, instead of
 * from random states alone. This module finds those workloads and re-fits
 * their states; it does not measure, and nothing it returns is trusted: the
 * job measures and checks re-fitted states like any candidate
 * (kt_search_seed), and `ktune build --transfer` compiles and checks each
 * against the reference before it uses one.
 *
 * Shape distance (kt_transfer_distance): between two workloads' canonical
 * JSON objects, the sum over their integer fields (sizes M N K, N H W CI CO
 * KH KW, C, B, groups, multiplier, and each entry of stride, dilation and
 * shape) of |ln(a / b)|, padding entries as |ln((a + 1) / (b + 1))|. It is
 * +inf when the two differ in kind: another op, layout, pool kind or any
 * other string or boolean field, epilogue lists of other lengths or with
 * entries of other kinds (a clip's bounds do not count), except that the
 * epilogues reading no tensor (relu, clip, gelu, sigmoid, tanh: one inlined
 * elementwise stage each) may stand for one another at
 * KT_TRANSFER_EPILOGUE_DISTANCE per entry, and a list may have one such
 * epilogue more at its end than a non-empty other list, at
 * KT_TRANSFER_EPILOGUE_DISTANCE too (kt_sched_retail moves the output's
 * schedule), arrays of other lengths, padding zero in
 * one and not in the other (a padding stage exists or not), another
 * Winograd tile_size, or a field only one of them has (an absent epilogue
 * is the empty one). Other numbers (a norm's epsilon) do not count. 0 for
 * workloads of the same shapes.
 *
 * Nearest workloads: the stored workloads with valid records on the task's
 * target and device key (kt_store_list_workloads), less the task's own, at
 * a finite distance, nearest first (ties by key).
 *
 * Ownership: everything returned is the caller's, released with the
 * matching _free / _clear (which accept NULL or a cleared set). Threads:
 * the functions only read their inputs and may run on any thread; a store
 * handle is used by one thread at a time (store.h).
 */
#ifndef KT_TRANSFER_TRANSFER_H
#define KT_TRANSFER_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "sched/state.h"
#include "search/search.h"
#include "store/store.h"
#include "te/workload.h"

/* ---- shape distance -------------------------------------------------------- */

/* What an epilogue of another reading-no-tensor kind adds to the distance:
 * as much as one dimension twice as large, so a workload of the same
 * epilogues is preferred at equal shapes. */
#define KT_TRANSFER_EPILOGUE_DISTANCE 0.69314718055994531 /* ln 2 */

/* The distance above between two workloads, or between two canonical JSON
 * texts (+inf when either does not parse as a JSON object). */
double kt_transfer_distance(const kt_workload_t *a, const kt_workload_t *b);
double kt_transfer_distance_json(const char *a, const char *b);

/* ---- re-fit ------------------------------------------------------------------ */

/* A state of dag re-fitted (kt_sched_refit, state.h, says how) from a stored
 * state of workload src: state_json, its serialized form as records hold it,
 * is parsed against src's DAG and p first. Where dag has one stage more or
 * less (one trailing unary epilogue), the state is first moved to src's
 * shapes with the task's epilogue count (kt_sched_retail). NULL with a message saying why
 * the state was dropped: it does not parse against its own workload, or it
 * cannot be re-fitted (another operator or sketch, an invalid result). */
kt_sched_state_t *kt_transfer_refit(const kt_workload_t *src, const char *state_json,
                                    const kt_dag_t *dag, const kt_sched_params_t *p);

/* ---- nearest workloads ------------------------------------------------------- */

typedef struct {
    char *key;          /* workload key */
    char *canonical;    /* its canonical JSON */
    double distance;
} kt_transfer_neighbor_t;

/* Up to max (>= 1) nearest workloads of w in the store on (target,
 * runner_key; NULL: any key), nearest first, into a malloc'd array of *n
 * (NULL when none). 0 or negative (store errors). */
int kt_transfer_nearest(kt_store_t *s, const kt_workload_t *w, const char *target,
                        const char *runner_key, int max, kt_transfer_neighbor_t **out, int *n);
void kt_transfer_neighbors_free(kt_transfer_neighbor_t *v, int n);

/* ---- re-fitted states of the nearest workloads ------------------------------- */

/* One re-fitted state and where it came from. */
typedef struct {
    kt_sched_state_t *state;   /* a valid state of the task */
    uint64_t hash;             /* kt_sched_state_hash of it */
    char *source_key;          /* the workload whose record it came from */
    double distance;           /* that workload's shape distance to the task */
    int64_t record_id;         /* the source record (local to the store) */
    double source_cost;        /* its mean cost, seconds */
    int rank;                  /* 0: the source workload's best record, 1: the next... */
} kt_transfer_cand_t;

/* Up to KT_TRANSFER_MAX_REASONS drop reasons are kept. */
#define KT_TRANSFER_MAX_REASONS 4

typedef struct {
    kt_transfer_cand_t *items;  /* distinct states, in the order a first round takes them */
    int n;
    int nworkloads;             /* nearest workloads looked at */
    int nrecords;               /* their records re-fitted or dropped */
    int dropped;                /* records that gave no state */
    int nreasons;
    char reasons[KT_TRANSFER_MAX_REASONS][256];   /* the first drops' reasons */
} kt_transfer_set_t;

/* Up to `count` re-fitted states for task w (its DAG, parameters p): the
 * best `count` valid records (by mean cost) of each of the `nworkloads`
 * nearest workloads, re-fitted, in rounds of ranks (every workload's best
 * record, nearest workload first, then every workload's second best, ...)
 * so that a short first round still holds the nearest workloads' bests,
 * distinct by state hash. A record that cannot be re-fitted is counted in
 * `dropped` with its reason, not an error. count 0 gives an empty set.
 * *out is cleared first; 0 or negative (store errors, OOM). */
int kt_transfer_gather(kt_store_t *s, const kt_workload_t *w, const char *target,
                       const char *runner_key, const kt_sched_params_t *p, int count,
                       int nworkloads, kt_transfer_set_t *out);
void kt_transfer_set_clear(kt_transfer_set_t *set);

/* Releases c's state and string (accepts NULL). */
void kt_transfer_cand_clear(kt_transfer_cand_t *c);

/* A network build's zero-shot kernels: for each of n tasks wl[i] whose
 * states[i] is NULL and skip[i] (skip may be NULL) is 0, up to `trials`
 * candidates (0: KT_TRANSFER_FILL_TRIALS; at most 64): the states of
 * kt_transfer_gather (the best 8 records of the 4 nearest workloads on
 * target and runner_key, NULL: any), at most half of them when there is a
 * store model, then kt_transfer_model_rank's picks under the store model
 * of runner_key, or without one of the first device key (most records
 * first) that has one or has the records to train one (trained and stored
 * then). Each is built, checked against the reference and timed on this
 * machine (weights flushed, as a network job times them) in a process
 * forked before the model loads, and the fastest is kept: states[i] gets
 * its JSON, ms[i] (ms optional) its time in ms, origin[i] a sentence
 * saying where it came from ("re-fitted from record R (C ms) of workload K
 * at shape distance D: the fastest of 8 candidates timed here ..." or
 * "chosen by the store model of key K ..."); a task left without a state
 * gets origin[i] saying why ("nothing stored to re-fit: ..."). Strings
 * malloc'd; other entries are left as they are. Returns the number of
 * states filled or negative (store errors, OOM: entries filled so far
 * stay). Builds and times `trials` kernels per task (about a second each). */
#define KT_TRANSFER_FILL_TRIALS 8
int kt_transfer_fill(kt_store_t *s, const kt_workload_t *const *wl, const int *skip, int n,
                     const char *target, const char *runner_key, const kt_sched_params_t *p,
                     int trials, char **states, char **origin, double *ms);

/* Zero-shot where nothing re-fits: up to n states of w in the order
 * `model` (the store model of a device key, trained on other workloads'
 * records: kt_search_store_model) ranks them, the first picks of its
 * evolutionary search over KT_TRANSFER_PICK_POPULATION states seeded by
 * `seed` (the same model and seed: the same states). Returns the count and
 * *out (a malloc'd array of states, the caller's), or negative: KT_EINVAL
 * for an untrained model. Nothing is checked here: XGBoost leaves an
 * OpenMP pool behind, and a kernel check forked after it would hang, so
 * kt_transfer_fill times them in a process forked before the model loads. */
#define KT_TRANSFER_PICK_POPULATION 512
int kt_transfer_model_rank(const kt_workload_t *w, kt_model_t *model,
                           const kt_sched_params_t *p, uint64_t seed, int n,
                           kt_sched_state_t ***out);

/* kt_transfer_gather for the policy's task with its parameters, the
 * states handed to kt_search_seed: the policy's next propose takes them
 * first. Returns the number seeded (0 when the store holds no near
 * workload) or negative; *info (optional) receives the gathered set. */
int kt_transfer_seed(kt_search_policy_t *sp, kt_store_t *s, const kt_workload_t *w,
                     const char *target, const char *runner_key, int count, int nworkloads,
                     kt_transfer_set_t *info);

#endif
