/* Internals of the search policy shared by its source files. */
#ifndef KT_SEARCH_SEARCH_INT_H
#define KT_SEARCH_SEARCH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "search/search.h"
#include "util/pool.h"

/* A set of state hashes. Zero-initialize; kt_hset_free releases. */
typedef struct {
    uint64_t *keys;
    size_t cap, n;
} kt_hset_t;

int kt_hset_has(const kt_hset_t *s, uint64_t h);
int kt_hset_add(kt_hset_t *s, uint64_t h);   /* 1 added, 0 present, <0 OOM */
void kt_hset_del(kt_hset_t *s, uint64_t h);
void kt_hset_clear(kt_hset_t *s);
void kt_hset_free(kt_hset_t *s);

/* A list of owned states with their hashes and model scores. */
typedef struct {
    kt_sched_state_t **st;
    uint64_t *hash;
    float *score;
    int n, cap;
} kt_slist_t;

int kt_slist_push(kt_slist_t *l, kt_sched_state_t *st, uint64_t hash);  /* takes st */
void kt_slist_clear(kt_slist_t *l);
void kt_slist_free(kt_slist_t *l);

/* One measured (or preloaded) state. */
typedef struct {
    kt_sched_state_t *st;
    double cost;   /* seconds; <= 0 when the measurement failed */
} kt_measured_t;

struct kt_search_policy {
    const kt_workload_t *w;
    const kt_dag_t *dag;
    kt_sched_params_t params;
    kt_search_opts_t opts;
    char name[32];               /* the policy's name (opts.policy is borrowed) */
    kt_model_t *model;
    int own_model;
    /* A shared (family) model's random scores before it trains come from
     * here, not from the model: searches of several tasks may then score at
     * once, and each gets the same scores whatever order they run in. */
    uint64_t score_rng;
    /* Set (borrowed) while a propose scores with a snapshot of the shared
     * model instead of the model itself, which may be training meanwhile. */
    const kt_model_t *score_model;
    int features;                /* 1: score with per-stage features (xgb), 0: dummy rows */
    uint64_t task_id;
    kt_rng_t rng;

    kt_sched_state_t **sketches; /* made on the first propose */
    int nsketches;

    kt_hset_t measured;          /* measured, preloaded, or proposed already */
    kt_hset_t relocated;         /* (state hash, placement) pairs location_siblings tried */
    kt_measured_t *hist;         /* measured and preloaded states, in order */
    int nhist, caphist;
    int npending;                /* hist[nhist - npending ..] have not trained the model */
    int best;                    /* index in hist of the lowest valid cost, -1 none */
    /* The current start (restart_after): its first record in hist, its
     * best (-1 none), and the records it had when that best last improved
     * by RESTART_MIN_GAIN. */
    int start, start_best, start_gain;

    kt_slist_t foresight;        /* kept by the last foresee pass, best first */
    kt_slist_t seeds;            /* kt_search_seed's states, not proposed yet, in order */

    kt_search_has_measured_fn has_fn;
    void *has_user;
    kt_pool_t *pool;             /* borrowed; NULL: score on the calling thread */

    double search_s, train_s;
    kt_search_stats_t stats;
};

/* The model that scores the policy's states: score_model when set. */
static inline const kt_model_t *kt_search_scorer(const kt_search_policy_t *sp)
{
    return sp->score_model ? sp->score_model : sp->model;
}

/* Score n states with the policy's model (features when sp->features):
 * scores[i] higher = better, -INFINITY for states the model cannot score. */
int kt_search_score(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n,
                    float *scores);

/* Train the model on n states and their costs (<= 0: failed). */
int kt_search_train(kt_search_policy_t *sp, kt_sched_state_t *const *states, const double *costs,
                    int n);
/* The same into another model `m` (features of this policy's workload, its
 * task id): FamilySeer's warm-up gives a task's records to every family. */
int kt_search_train_model(kt_search_policy_t *sp, kt_model_t *m, kt_sched_state_t *const *states,
                          const double *costs, int n);

/* kt_search_feedback without the training: the results join the measured
 * set and wait (npending) for a kt_search_train_pending. */
int kt_search_record(kt_search_policy_t *sp, kt_sched_state_t *const *states,
                     const double *costs, int n);
/* Train `m` in ONE update on the untrained records (npending) of n policies,
 * each with its own features and task id (labels normalized per task), and
 * mark them trained. A job's shared model retrains once, not once per task. */
int kt_search_train_pending(kt_search_policy_t *const *sps, int n, kt_model_t *m);
/* The same in two steps, so that the training runs outside the caller's
 * lock on the policies: take the untrained records of n policies as one
 * batch (features extracted; *out NULL when there are none) and mark them
 * trained at once; then train a model on it (any thread, the model's user
 * serializing) and free it. A batch reads nothing of the policies. */
typedef struct kt_search_batch kt_search_batch_t;
int kt_search_take_pending(kt_search_policy_t *const *sps, int n, kt_search_batch_t **out);
int kt_search_batch_train(kt_search_batch_t *b, kt_model_t *m);
int kt_search_batch_size(const kt_search_batch_t *b);   /* records in it (0 for NULL) */
void kt_search_batch_free(kt_search_batch_t *b);

/* FamilySeer's foresee pass: a small search scored by the policy's (family)
 * model whose best unmeasured states replace sp->foresight. The policy's
 * round statistics are left as they were; foresee_passes counts it. */
int kt_search_foresee(kt_search_policy_t *sp);

/* One local round through propose/feedback functions (a plain policy or a
 * family member): propose, measure, feedback. */
typedef struct {
    int (*propose)(void *ctx, int n, kt_sched_state_t ***out);
    int (*feedback)(void *ctx, kt_sched_state_t *const *states, const double *costs, int n);
    void *ctx;
} kt_search_round_ops_t;

int kt_search_round_run(const kt_workload_t *w, const kt_search_round_ops_t *ops, int n,
                        kt_search_measure_fn measure, void *user, kt_sched_state_t ***states,
                        kt_measure_result_t **results);

#endif
