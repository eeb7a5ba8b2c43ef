/*
 * The search policy of one task (Ansor's SketchPolicy): it proposes schedule
 * states worth measuring and learns from their measured costs. It never
 * proposes a state that was measured before (in this process, preloaded from
 * the record store, or reported by kt_search_has_measured_fn).
 *
 * Policies by name, as TVM: "sketch.xgb" (default: evolutionary search scored
 * by an XGBoost cost model over per-stage features) and "sketch.random"
 * (random states, random model). ANSOR_NOTES.md describes one round.
 * Over a job's tasks (kt_search_family_new) sketch.xgb shares one model
 * between all of them, as Ansor's task scheduler does. FamilySeer's "sketch.xgb.family-op", "sketch.xgb.family-hash" and
 * "sketch.xgb.family-none" need the policies of all of a job's tasks at once:
 * they are made by kt_search_family_new() (see "task families" below).
 *
 * The policy does not measure: kt_search_propose() returns states, the caller
 * measures them however it likes (locally with kt_search_measure_local(), or
 * spread over remote workers and runners by the tracker) and reports the
 * results with kt_search_feedback(). kt_search_one_round() chains the three
 * for local use.
 *
 * Candidates (kt_search_candidate_t) turn a state into what a builder and a
 * runner need: C source with its entry point and the buffer layout; the
 * reference kernel is made for each measured batch (the builder's artifact
 * cache compiles it once).
 *
 * Differences from Ansor: no crossover (Ansor's released policy has none
 * either; evolution is mutation only); parents are drawn with probability
 * proportional to max(score, 0) (uniform when all are 0); the owned xgb
 * model builds hist trees (exact trees keep improving the training error for
 * thousands of rounds on some tasks: minutes per training).
 *
 * Ownership: a policy borrows its workload and (when given) a shared cost
 * model, which must outlive it; states returned by propose are the caller's
 * (kt_sched_state_free each, then free the array). Threads: one policy is
 * used by one thread at a time; policies sharing a model may search at once
 * (their scoring only reads it: kt_model_predict_rng with each policy's own
 * generator) but not while one of them trains it (the caller serializes
 * feedback against every other use, as the family's lock does).
 */
#ifndef KT_SEARCH_SEARCH_H
#define KT_SEARCH_SEARCH_H

#include <stdatomic.h>
#include <stdint.h>

#include "measure/measure.h"
#include "model/model.h"
#include "sched/state.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/pool.h"

/* Options of a policy; kt_search_opts_default() gives Ansor's defaults but for
 * num_warmup_sample (see policy.c). */
typedef struct {
    const char *policy;                    /* "sketch.xgb" or "sketch.random" */
    uint64_t seed;
    double eps_greedy;                     /* 0.05 */
    int sample_init_min_population;        /* 50 */
    double sample_init_use_measured_ratio; /* 0.2 */
    int evolutionary_search_population;    /* 2048 */
    int evolutionary_search_num_iters;     /* 4 */
    double evolutionary_search_mutation_prob; /* 0.85 */
    int retry_search_one_round_on_empty;   /* 10 */
    int num_warmup_sample;                 /* records before the xgb model is trusted: 16 (Ansor 100) */
    int model_label;                       /* KT_MODEL_LABEL_* of the xgb model: rank (see policy.c) */
    /* AutoTVM's diversity-aware pick (its diversity_filter_ratio): 0 = off,
     * Ansor's pick of the best-scored states. r >= 1: the (1 - eps) x n
     * picks come from the r x n best-scored new states, chosen one by one
     * to cover the most knob values (kt_sched_state_knobs) not yet covered
     * by the round's earlier picks, ties to the better score. */
    double diversity_filter_ratio;         /* 0 */
    /* The largest share of a round's (1 - eps) x n model picks that may
     * share one register tile (kt_sched_state_tile_key); the rest go to the
     * best-scored states of other tiles, and only when those run out to
     * more of the full ones. 1 = no cap (Ansor). A model that has seen one
     * tile family run fast otherwise spends whole rounds on it. */
    double tile_family_share;              /* 0.25 */
    /* States per round, before the model's picks, that place a stage of the
     * best measured state otherwise (a padding materialized, inlined or
     * computed at its consumer; kt_sched_mutate's compute-location rule).
     * The model learns a placement from the states measured with it, at
     * first random ones, and never proposed an inlined padding on the tile
     * that ran best materialized. 0 = off (Ansor). */
    int location_siblings;                 /* 2 */
    /* The register tiles whose best state's placements location_siblings
     * proposes, best first, one state per tile in turn: an inlined padding
     * slowed the best tile (its rows then fell on one cache set) and sped
     * up the next. 1 = the best state only. */
    int location_sibling_tiles;            /* 4 */
    /* States per round, after those, with the best measured state's register
     * tile reshaped (a prime factor exchanged between two spatial axes:
     * kt_sched_mutate's tile-shape rule). The tile-size rule moves factors
     * within one axis, and the model rejects the small tiles on the way
     * from 7 rows x 2 columns to 1 row x 14. 0 = off (Ansor). */
    int tile_siblings;                     /* 0 */
    /* 1: per round, after those, the best measured state with its
     * reduction ended inside the register tile (every outer reduce factor
     * moved inwards: kt_sched_mutate's reduce-in rule), where that is new.
     * Such a tile writes its consumer from registers, with no local block;
     * searches ended on states whose direct form they never measured.
     * 0 = off (Ansor). */
    int direct_siblings;                   /* 1 */
    /* 1: per round, after those, a convolution's row sweep (kt_sched_mutate's
     * rows-out rule: padding inlined, output rows in the outermost level,
     * columns in the last level outside the register tile, so a parallel
     * chunk of one tile's rows leaves the fewest tiles to the border code
     * and a row's columns reuse the weights of the channel blocks around
     * them), made from the best of the KT_SEARCH_ROW_SIBLING_SCAN best
     * measured states the rule changes, where that is new. 0 = off (Ansor). */
    int row_siblings;                      /* 1 */
    /* Random restart: once the best of the search's current start has not
     * improved by 1% over this many measured states, the next propose
     * starts again as an independent search: a fresh model (own models
     * only: a task sharing its job's model never restarts), a first round
     * spread over a new sample, evolution from the new start's records
     * only. Nothing measured before is proposed again, and the best of all
     * starts stays the task's best. 0 = off (Ansor). */
    int restart_after;                     /* 0 */
    /* FamilySeer's foresee pass (family policies only; see kt_search_family_feedback) */
    int foresee_population;                /* states sampled per pass: 256 */
    int foresee_num_iters;                 /* evolution iterations per pass: 2 */
    int foresee_keep;                      /* best states kept to seed the next round: 64 */
    /* The shared model of a job's sketch.xgb tasks (see "task families"):
     * KT_SEARCH_WARMUP_RANDOM keeps it random until every task has had a
     * round (Ansor), KT_SEARCH_WARMUP_MODEL lets it guide a task's first
     * round once more than num_warmup_sample records of other tasks exist. */
    int warmup;                            /* KT_SEARCH_WARMUP_RANDOM */
    /* Schedule transfer (common/transfer/transfer.h): the most states
     * re-fitted from the best records of the transfer_workloads stored
     * workloads nearest to a task without records of its own that the job
     * seeds its first round with (kt_search_seed). The policy does not
     * look them up itself: its caller (the tracker's job) does. 0 = off. */
    int transfer;                          /* 8 */
    int transfer_workloads;                /* 4 */
    /* 1: the tracker starts a job's xgb models from the store model of its
     * target and device key (kt_search_store_model, kt_search_family_set_prior);
     * 0: from nothing (Ansor). Like transfer, read by the job, not the policy. */
    int store_model;                       /* 1 */
} kt_search_opts_t;

#define KT_SEARCH_WARMUP_RANDOM 0
#define KT_SEARCH_WARMUP_MODEL 1

void kt_search_opts_default(kt_search_opts_t *o);

/* Largest populations (and foresee_keep) and iteration / retry counts a
 * policy accepts. */
#define KT_SEARCH_MAX_POPULATION (1 << 20)
#define KT_SEARCH_MAX_ITERS 1000
/* Largest diversity_filter_ratio (the candidate pool is ratio x n states). */
#define KT_SEARCH_MAX_DIVERSITY 64
/* Most register tiles location_siblings takes placements from. */
#define KT_SEARCH_MAX_SIBLING_TILES 16
/* Most re-fitted states (transfer) and nearest workloads (transfer_workloads)
 * a task's first round takes. */
#define KT_SEARCH_MAX_TRANSFER 256
#define KT_SEARCH_MAX_TRANSFER_WORKLOADS 64
/* Best measured states row_siblings looks through for one to change. */
#define KT_SEARCH_ROW_SIBLING_SCAN 32

/* Sets options from "key=value,..." (a job's search_params): the numeric
 * fields above by name, model_label=throughput|log|rank and
 * warmup=random|model. policy and seed
 * are refused (they are the job's own fields). All or nothing: KT_EINVAL with
 * a message naming the key for an unknown key, a malformed value or a value
 * out of range, leaving *o unchanged. An empty list changes nothing. */
int kt_search_opts_set(kt_search_opts_t *o, const char *list);

/* The xgb model parameters a policy or a family makes from its options:
 * ktune's defaults, this seed, the options' warm-up and label kind, hist
 * trees, programs weighted by their throughput as Ansor's (a caller that
 * hands a policy its own model starts from these). */
void kt_search_model_params(const kt_search_opts_t *o, uint64_t seed, kt_model_params_t *mp);

typedef struct kt_search_policy kt_search_policy_t;

/* Optional: ask the caller (e.g. the record store) whether a state hash of
 * this workload was measured already. Returns 1 yes, 0 no. */
typedef int (*kt_search_has_measured_fn)(void *user, uint64_t state_hash);

/* Create the policy of one task. params NULL = host CPU defaults. opts NULL
 * = defaults. model NULL = the policy owns a model of the kind its name says
 * (xgb: num_warmup_sample from opts, hist trees, ktune's model defaults);
 * else the given model (a FamilySeer family model) is used and updated, with
 * `task_id` telling the model which task's costs normalize the labels; its
 * kind decides whether states are scored with features. NULL + kt_err on
 * error (unknown policy name, option out of range). */
kt_search_policy_t *kt_search_policy_new(const kt_workload_t *w, const kt_sched_params_t *params,
                                         const kt_search_opts_t *opts, kt_model_t *model,
                                         int task_id);
void kt_search_policy_free(kt_search_policy_t *sp);   /* accepts NULL */

void kt_search_set_has_measured(kt_search_policy_t *sp, kt_search_has_measured_fn fn, void *user);

/* Score populations (and extract training features) on `pool` (borrowed:
 * it must outlive the policy or be unset first; NULL: the calling thread,
 * the default). The proposals of a seeded policy are the same states in
 * the same order whatever the pool's width: only feature extraction is
 * spread, in chunks joined in state order, while sampling and mutation
 * draw from the policy's own RNG on the calling thread. */
void kt_search_set_pool(kt_search_policy_t *sp, kt_pool_t *pool);

/* Resume: a state measured earlier (its JSON as stored) with its mean cost
 * in seconds (<= 0 or non-finite: it failed). It counts as measured and
 * trains the model on the next feedback. 0, or KT_EINVAL for a state that
 * does not parse against this workload (skipped with a message). */
int kt_search_preload(kt_search_policy_t *sp, const char *state_json, double cost);

/* Up to n new states to measure, never measured before. Returns the count
 * (0: the space is exhausted after retry_search_one_round_on_empty tries)
 * or negative; *out is a malloc'd array of that many states (NULL when 0).
 * As in Ansor, a proposed state counts as measured from now on: it is never
 * proposed again even if its result never comes back. */
int kt_search_propose(kt_search_policy_t *sp, int n, kt_sched_state_t ***out);
/* kt_search_propose, also writing where each state came from into
 * origins[0..count) (room for n; NULL: not wanted), a KT_STORE_ORIGIN_*
 * (store.h) the record of its measurement keeps: TRANSFER for a seed
 * (kt_search_seed), SIBLING for the location, tile, direct and row
 * siblings, MODEL for the best-scored picks of a trained model's
 * evolutionary search (foresight included), RANDOM for the eps-greedy
 * share, for a round spread over a sample while the model is untrained
 * (the warm-up) and for the best-scored picks of a model with random scores
 * (sketch.random). */
int kt_search_propose_origins(kt_search_policy_t *sp, int n, kt_sched_state_t ***out,
                              int *origins);

/* Seeds: states to propose first, from the next propose on, ahead of the
 * search's own picks (schedule transfer's states re-fitted from other
 * workloads' records, common/transfer/transfer.h). Each is copied after it
 * validates against the policy's workload and parameters (one that does
 * not is skipped, with the reason logged at debug level) and once (a state
 * given twice is kept once). A propose takes them in order while its round
 * has room, each through the same dedup as every proposal (never a state
 * measured, preloaded, proposed before or reported measured by
 * kt_search_has_measured_fn: such a seed is dropped), and leaves the rest
 * for the next propose. They are measured and checked like any candidate.
 * Returns the number kept, or negative. */
int kt_search_seed(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n);

/* Results of measured states: mean cost in seconds, <= 0 or non-finite for
 * a failed measurement. Updates the measured set and the cost model. */
int kt_search_feedback(kt_search_policy_t *sp, kt_sched_state_t *const *states,
                       const double *costs, int n);

/* Best measured cost (seconds) and its state JSON (malloc'd into *json when
 * json is not NULL); KT_ENOTFOUND when nothing valid was measured. */
int kt_search_best(const kt_search_policy_t *sp, double *cost, char **json);

/* Timing of the last propose: seconds in sampling + evolution, and in model
 * training during the last feedback (for the search-overhead benchmark). */
void kt_search_last_times(const kt_search_policy_t *sp, double *search_s, double *train_s);

/* Counters of the policy: totals since it was made, and figures of the last
 * search round (the last try of the last propose). */
typedef struct {
    uint64_t rounds;            /* search rounds run (retries included) */
    uint64_t empty_rounds;      /* of which produced nothing new */
    uint64_t proposed;          /* states returned by propose */
    uint64_t measured;          /* results given to feedback */
    uint64_t preloaded;         /* states accepted by preload */
    uint64_t mutations_ok;      /* mutations that made a new valid state */
    uint64_t mutations_failed;  /* mutations that found nothing to change */
    int nsketches;              /* sketches of the task */
    int last_sampled;           /* valid distinct states sampled for the initial population */
    int last_from_measured;     /* best measured states added to it */
    int last_num_iters;         /* evolution iterations run */
    int last_best;              /* unmeasured distinct states in the best-states heap */
    int last_random;            /* random states drawn for eps-greedy */
    int last_picked_best;       /* states proposed from the heap */
    int last_picked_random;     /* states proposed from the random ones */
    int last_picked_siblings;   /* placements of the best tiles' stages proposed */
    int last_picked_tile_siblings;   /* reshapes of the best state's register tile proposed */
    int last_picked_direct_siblings; /* the best state with its reduction in the tile */
    int last_picked_row_siblings;    /* a good state's row sweep */
    int last_picked_spread;     /* states proposed from the sampled ones by knob coverage
                                 * (a learned model not trained yet: no evolution) */
    int last_tile_families;     /* distinct register tiles among the last round's picks */
    uint64_t seeded;            /* seeds kt_search_seed kept */
    int last_picked_seeds;      /* seeds the last propose took */
    uint64_t restarts;          /* independent starts after the first (restart_after) */
    uint64_t foresee_passes;    /* foresee passes run for this task by its family */
    int foresight;              /* states kept by the last pass, waiting for the next round */
    int last_from_foresight;    /* foresight states that seeded the last round's population */
} kt_search_stats_t;

void kt_search_stats(const kt_search_policy_t *sp, kt_search_stats_t *out);

/* The policy's cost model (owned or shared) and sched parameters. An owned
 * model is replaced when the search restarts (restart_after): the pointer
 * is valid until the next propose. */
kt_model_t *kt_search_model(const kt_search_policy_t *sp);
const kt_sched_params_t *kt_search_params(const kt_search_policy_t *sp);

/* ---- training from stored records ------------------------------------------ */

/* Train `m` on every stored record of (workload, target) (TVM's
 * update_from_file): states are parsed against the workload (records that do
 * not parse are skipped), failed records count as cost +inf, all labels are
 * normalized within `task_id`. *used (when not NULL) gets the number of
 * records the model received. 0 or negative. */
int kt_search_model_update_from_store(kt_model_t *m, kt_store_t *s, const kt_workload_t *w,
                                      const char *target, uint64_t task_id, int *used);

/* ---- the store model of a device key (store_model.c) ---------------------- */

/*
 * One cost model per (target, device key), trained on the newest records of
 * that key across all workloads (features do not depend on the shapes;
 * labels are normalized per workload: one task id per workload key), and
 * kept in the record store's cost_models (kt_store_put_cost_model) with the
 * feature version (KT_FEATURE_VERSION), the model format
 * (KT_MODEL_FILE_VERSION), the records it trained on and the highest record
 * id among them. A job's xgb models start from it (kt_search_family_set_prior).
 *
 * It is stale, and kt_search_store_model retrains it with
 * KT_SEARCH_STORE_MODEL_TRAIN (BUILD: only the first case), when the key
 * has no usable model and at
 * least KT_SEARCH_STORE_MODEL_MIN records, or when the records newer than
 * the model number KT_SEARCH_STORE_MODEL_NEW or NEW_SHARE of the records it
 * trained on, whichever is more. A retraining starts from scratch on the
 * key's newest KT_SEARCH_STORE_MODEL_MAX records (failed ones too: they
 * teach what fails), so its cost is bounded however large the store grows;
 * records whose workload the store does not hold or whose state does not
 * parse are skipped. A row of another feature version or of a newer model
 * format is ignored and rebuilt; a row whose bytes do not load (corrupt) is
 * rebuilt with a warning. Nothing here is fatal: every failure leaves a
 * note (warn set) and what could be had (the old model, or none).
 *
 * The parameters are the search's xgb model's (rank labels, hist trees),
 * seed 43, trusted once trained (no warm-up of its own).
 */

#define KT_SEARCH_STORE_MODEL_MIN 64         /* records a key needs for a model */
#define KT_SEARCH_STORE_MODEL_MAX 2048       /* newest records a training takes */
#define KT_SEARCH_STORE_MODEL_NEW 64         /* new records that make a model stale... */
#define KT_SEARCH_STORE_MODEL_NEW_SHARE 0.1  /* ...or this share of its records, if more */

/* kt_search_store_model flags. */
#define KT_SEARCH_STORE_MODEL_LOAD 0x1   /* return the usable model in out->model */
#define KT_SEARCH_STORE_MODEL_TRAIN 0x2  /* retrain (and store) it when stale */
#define KT_SEARCH_STORE_MODEL_BUILD 0x4  /* train (and store) one only when there is no
                                            usable model; a stale one is used as it is */

/* The store handle, and how to take it when others share it: lock before
 * each use, unlock after (both NULL: the caller owns the handle). The store
 * is held only to read the row, to count and read the records, and to write
 * the new row; the training runs without it, and gives up (a note, the old
 * model kept) once *stop is nonzero (kt_model_set_stop; NULL: never). */
typedef struct {
    kt_store_t *store;
    void (*lock)(void *user);
    void (*unlock)(void *user);
    void *user;
    const atomic_int *stop;
} kt_search_store_ref_t;

typedef struct {
    kt_model_t *model;    /* the usable model (LOAD), NULL when none: the caller's */
    int64_t version;      /* its row's version (0: none, or trained but not stored) */
    int64_t records;      /* records it was trained on */
    int trained;          /* 1 when this call trained it */
    int warn;             /* 1 when the note says something went wrong */
    char note[320];       /* what was found and done, for the log */
} kt_search_store_model_t;

/* Read (and with TRAIN or BUILD refresh) the store model of (target, key)
 * into *out. 0, or KT_EINVAL for bad arguments only: store and training
 * failures are notes. Free out->model with kt_search_store_model_clear.
 * Thread-safe as far as ref's lock makes the store so; two callers for one
 * key train twice (the caller serializes them). */
int kt_search_store_model(const kt_search_store_ref_t *ref, const char *target,
                          const char *key, int flags, kt_search_store_model_t *out);
void kt_search_store_model_clear(kt_search_store_model_t *m);   /* accepts NULL */

/* ---- candidates: what builders and runners need ------------------------- */

typedef struct {
    char *source;              /* complete C file (malloc'd) */
    char entry[64];            /* exported entry point */
    kt_buf_layout_t layout;    /* kernel buffers: inputs, then outputs */
} kt_search_candidate_t;

/* The kernel of one state (entry "kt_main" unless entry is given; the
 * emitter reserves the kt_ prefix, so an entry starting with kt_ is a small
 * exported wrapper around the kernel). The source exports <entry>,
 * <entry>_packed and <entry>_pack (kt_codegen_emit_c_variants_into): the
 * runner times <entry>_packed on weights packed once. KT_EINVAL for an entry that is not a
 * C identifier of at most 63 characters or a state that does not lower. */
int kt_search_candidate_make(const kt_workload_t *w, const kt_sched_state_t *st,
                             const char *entry, kt_search_candidate_t *out);
/* The workload's naive reference kernel (entry "ref_main"). */
int kt_search_candidate_reference(const kt_workload_t *w, kt_search_candidate_t *out);
void kt_search_candidate_clear(kt_search_candidate_t *c);   /* accepts NULL */
/* The buffers of the DAG's kernels (kt_codegen_num_bufs order): elements,
 * outputs, and its layout-free placeholders as weights. 0 or KT_EINVAL. */
int kt_search_buf_layout(const kt_dag_t *dag, kt_buf_layout_t *l);

/* ---- local measurement --------------------------------------------------- */

/* How one round is measured: fill results[i] for states[i]. */
typedef int (*kt_search_measure_fn)(void *user, const kt_workload_t *w,
                                    kt_sched_state_t *const *states, int n,
                                    kt_measure_result_t *results);

/* A kt_search_measure_fn on this machine: `user` is a kt_measurer_t*
 * (builder + runner); each state's candidate is built, run and checked
 * against the workload's reference kernel (a state whose source cannot be
 * made gets INSTANTIATION_ERROR). Returns kt_measurer_measure()'s status:
 * 0, KT_MEASURER_TOO_MANY_ERRORS (results valid; see measurer.h), or
 * negative. */
int kt_search_measure_local(void *user, const kt_workload_t *w, kt_sched_state_t *const *states,
                            int n, kt_measure_result_t *results);

/* propose(n) + measure + feedback (a result with an error counts as a
 * failed measurement). Returns the number measured (0 when the task is
 * exhausted) or negative. states/results, when not NULL, receive
 * the round's states and results (caller frees both arrays and their items). */
int kt_search_one_round(kt_search_policy_t *sp, int n, kt_search_measure_fn measure, void *user,
                        kt_sched_state_t ***states, kt_measure_result_t **results);

/* ---- task families (FamilySeer) ------------------------------------------------ */

/*
 * The policies of all the tasks of one tuning job, made from one policy name.
 * For "sketch.random", and "sketch.xgb" over a single task, it is n
 * independent policies (each with its own model), nothing more. For the
 * other xgb policies the tasks are grouped into families and each family has
 * ONE xgb model shared by its tasks' policies (FamilySeer, seed 001):
 *
 * - "sketch.xgb" over n > 1 tasks: one family of every task, key "all"
 *   (Ansor's make_search_policies: one XGBModel for the whole network;
 *   FamilySeer's monolithic model). Its warm-up is Ansor's with
 *   warmup=random (the default): the model is given no record, and so scores
 *   at random (by its prior when it has one: kt_search_family_set_prior),
 *   until every task has been measured once (or proposed nothing); then it
 *   trains once on every task's records (Ansor's num_warmup_sample = tasks x
 *   measures per round), and on each task's new records after that. With
 *   warmup=model it trains on every record as it comes, so once it holds
 *   more than num_warmup_sample records the model, not chance, picks the
 *   first round of the tasks still waiting. No foresee passes (Ansor has
 *   none).
 * - "sketch.xgb.family-op": family = the task's anchor operator, read from the
 *   DAG (kt_search_family_anchor): conv2d tasks with any epilogue share one,
 *   dense another, each pool kind its own.
 * - "sketch.xgb.family-hash": family = hash of the DAG's operator sequence
 *   (every stage's kind, tag and reduction, shapes left out): conv2d + bias +
 *   relu and conv2d + bias + add + relu are two families.
 * - "sketch.xgb.family-none": one family (one model) per task.
 *
 * Training (family-op, -hash, -none). Warm-up lasts until every task has been
 * measured once (measured or preloaded): meanwhile EVERY family model trains
 * on every record of every
 * task (the review's suggestion in seed 001: the same data Ansor's single
 * model would see). When the last task gets its first record, each family
 * model drops the other families' samples (kt_model_keep_tasks) and from then
 * on trains on its family's records only. Labels are normalized per task
 * (task id = index in the job).
 *
 * Foresee tuning. After task i's feedback has trained its family's model, the
 * model (once it predicts with its booster, not random scores) runs a small
 * search for every OTHER task k of the family: foresee_population sampled
 * states plus k's best measured ones, foresee_num_iters evolution iterations,
 * and the foresee_keep best-scored unmeasured states are kept by k's policy.
 * They join the initial population of k's next search round (scored again by
 * the then current model), so what the family learned from task i steers
 * where k's evolution starts, without measuring anything for k. A later pass
 * replaces the kept states; a round consumes them. A pass scores about
 * foresee_population x (1 + foresee_num_iters) states, so a measured round of
 * a family of F tasks costs F - 1 passes besides its own search (hence the
 * small defaults).
 *
 * Ownership: kt_search_family_new borrows the workloads (they must outlive
 * it) and owns its policies and models; kt_search_family_free releases them
 * (accepts NULL). Threads: different tasks may be proposed and fed back
 * from different threads at once (one task by one thread at a time). For
 * sketch.xgb over several tasks a search scores with a snapshot of the one
 * model (taken after each training), so searches of different tasks run
 * at once and a feedback's training runs beside them (a search that
 * overlaps a feedback is as if it came first). One thread trains that model
 * at a time: a feedback that comes while another thread's feedback trains
 * it only records and returns, and the first feedback, propose or sync
 * after that training trains once on all the records queued meanwhile
 * (Ansor trains its one model once per round on every task's new
 * records); a search scores with the model of the last finished training.
 * What a sync (or a propose's) trains otherwise (preloads, the end of the
 * warm-up), it trains holding the lock: a search that starts after it
 * sees it. For the family-* policies a
 * propose's search holds the family's lock shared: different tasks'
 * searches run at once, while a feedback (training, foresee passes that
 * write other tasks' policies) waits for them. Syncs hold the lock alone;
 * the plain policies take no lock. Determinism: before
 * its model trains, each task's random scores come from its own seeded
 * generator, so a propose's result depends on the feedback given before it
 * (and on the seed), not on which other tasks' proposes overlap it or ran
 * first: a caller that feeds back in a fixed order, one feedback at a
 * time, gets the same proposals from any number of threads (feedbacks that
 * overlap train sketch.xgb's model in groups that depend on their timing,
 * as the tracker's do). Preload (kt_search_preload on
 * kt_search_family_policy()) before the first propose, from one thread.
 */
typedef struct kt_search_family kt_search_family_t;

/* Names of every policy kt_search_family_new accepts, NULL-terminated. */
const char *const *kt_search_policy_names(void);
/* 0 when `name` is a known policy; KT_EINVAL with a message listing them. */
int kt_search_policy_check(const char *name);

/* The anchor operator of a DAG (the tag family-op groups by): the first stage
 * with data reuse (conv, dense, matmul, depthwise conv), else the first
 * reduction (pools, softmax, norms), else the output stage. A string of the
 * DAG (valid while it lives); NULL for a DAG without compute stages. */
const char *kt_search_family_anchor(const kt_dag_t *dag);
/* Hash of the DAG's operator sequence (the family-hash key). */
uint64_t kt_search_family_op_hash(const kt_dag_t *dag);

/* Policies for n tasks. opts->policy names the policy (NULL = "sketch.xgb");
 * task i's seed is opts->seed * 1000003 + i. Family models are xgb models
 * with opts->num_warmup_sample and hist trees. NULL + kt_err on a bad name or
 * option. */
kt_search_family_t *kt_search_family_new(const kt_workload_t *const *wl, int n,
                                         const kt_sched_params_t *params,
                                         const kt_search_opts_t *opts);
void kt_search_family_free(kt_search_family_t *f);
/* kt_search_set_pool for every task's policy. */
void kt_search_family_set_pool(kt_search_family_t *f, kt_pool_t *pool);

int kt_search_family_num_tasks(const kt_search_family_t *f);
/* Task i's policy (borrowed): for preload, has_measured, best, stats. */
kt_search_policy_t *kt_search_family_policy(const kt_search_family_t *f, int task);

/* Number of families (0 for the plain policies), the family of a task (-1
 * for plain policies or a bad index), a family's key ("conv2d_nhwc" for
 * family-op, 16 hex digits for family-hash, "task<i>" for family-none, "all"
 * for sketch.xgb), its
 * tasks (n written to *ntasks, at most cap into out) and its model (to
 * read: the family trains it, and sketch.xgb's searches score with the
 * snapshot the family takes after each of its trainings). */
int kt_search_family_count(const kt_search_family_t *f);
int kt_search_family_of(const kt_search_family_t *f, int task);
const char *kt_search_family_key(const kt_search_family_t *f, int family);
int kt_search_family_tasks(const kt_search_family_t *f, int family, int *out, int cap,
                           int *ntasks);
kt_model_t *kt_search_family_model(const kt_search_family_t *f, int family);
/* 1 once every task has been measured once (family models train on their
 * own family's records only from then on; sketch.xgb's shared model trains
 * from then on with warmup=random). */
int kt_search_family_warmup_done(const kt_search_family_t *f);

/* kt_search_propose / kt_search_feedback for task i, plus the family work
 * described above (sync, cross-training during warm-up, foresee passes;
 * sketch.xgb's shared warm-up). */
int kt_search_family_propose(kt_search_family_t *f, int task, int n, kt_sched_state_t ***out);
/* The same with each state's origin (kt_search_propose_origins). */
int kt_search_family_propose_origins(kt_search_family_t *f, int task, int n,
                                     kt_sched_state_t ***out, int *origins);
int kt_search_family_feedback(kt_search_family_t *f, int task, kt_sched_state_t *const *states,
                              const double *costs, int n);
/* Train the family models on what was preloaded or fed to the policies but
 * not yet given to them (a resumed job; sketch.xgb's shared model only once
 * its warm-up allows, in one training) and end the warm-up when every task
 * has records. Propose and feedback call it; 0 or negative. While another
 * thread's feedback trains sketch.xgb's shared model, it returns at once
 * and the records wait for the next sync (or propose, or feedback). */
int kt_search_family_sync(kt_search_family_t *f);

/* Start every xgb model of the family (sketch.xgb's shared or own models,
 * the family kinds' models) from `prior` (kt_model_set_prior; copied), e.g.
 * the store model of the job's target and device key: the first rounds are
 * then scored by it instead of at random, and the job's records train trees
 * on top of it. Before the first propose, from one thread (after preloads:
 * they train on the next sync). The number of models that took it (0 for
 * sketch.random), or negative (a model that refused it: its label kind or
 * feature count differ, or it trained already), leaving the ones before it
 * started from the prior. */
int kt_search_family_set_prior(kt_search_family_t *f, const kt_model_t *prior);
/* The number of xgb models of the family (those set_prior gives a prior
 * to; 0 for sketch.random). */
int kt_search_family_num_learned(const kt_search_family_t *f);

/* Called on the training thread before each training of sketch.xgb's
 * shared model (n > 1 tasks), with the number of records it trains on:
 * tests hold a training there, instrumentation counts them. Set before the
 * first propose, from one thread; NULL removes it. */
typedef void (*kt_search_train_hook_fn)(void *user, int nrecords);
void kt_search_family_set_train_hook(kt_search_family_t *f, kt_search_train_hook_fn fn,
                                     void *user);

/* kt_search_one_round through the family (local measurement). */
int kt_search_family_one_round(kt_search_family_t *f, int task, int n,
                               kt_search_measure_fn measure, void *user,
                               kt_sched_state_t ***states, kt_measure_result_t **results);

#endif
