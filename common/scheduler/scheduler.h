/*
 * The task scheduler: decides which of n tuning tasks (the subgraphs of one
 * network) gets the next round of measurements, so that the estimated total
 * latency of the network falls fastest (Ansor, OSDI 2020, section 6; TVM's
 * auto_scheduler task_scheduler.py). It knows nothing about programs,
 * searches or measurement: a caller-supplied tuner runs one search round for
 * a task and reports the measured costs; the scheduler only keeps per-task
 * progress (rounds, trials, best cost, per-round best history), picks tasks
 * and prints TVM's progress table. It does not persist anything: a caller
 * that wants to resume reads a task's state with kt_scheduler_task_state(),
 * stores it, and feeds it back with kt_scheduler_restore_task().
 *
 * Strategies: "gradient" (default; TVM's chain-rule gradient with a backward
 * window and a forward estimate bounded by similar tasks, plus an eps_random
 * share of random picks), "round-robin" and "sequential". Every strategy
 * except sequential starts with one round-robin warm-up pass over the tasks
 * that have no restored rounds. Tasks whose tuner finds no new candidates,
 * or that stop improving (per-task early stopping), are dead and skipped.
 *
 * Budget: num_measure_trials is the TOTAL for the tuning job, restored trials
 * included, so a run stopped and resumed from its saved task states ends with
 * the same per-task trials as an uninterrupted one. Random choices are drawn
 * from a hash of (seed, pick number), where the pick number is the number of
 * rounds started so far: no hidden RNG state needs saving.
 *
 * Driving: kt_scheduler_run() is the blocking loop (one round at a time).
 * A driver that overlaps rounds uses kt_scheduler_next() and
 * kt_scheduler_complete() with up to max_in_flight rounds outstanding; with
 * max_in_flight = 1 that reproduces kt_scheduler_run() exactly.
 *
 * Ownership: kt_scheduler_new() copies the task descriptions and the config;
 * the caller keeps its strings. kt_scheduler_free() releases everything
 * (accepts NULL). FILE* streams given in the config are borrowed.
 *
 * Thread-safety: every function locks the scheduler's (recursive) mutex, so
 * next/complete may be called from several threads. Callbacks run with the
 * mutex held: they may call the read-only accessors but must not call
 * kt_scheduler_next/complete/run, and should return quickly.
 */
#ifndef KT_SCHEDULER_SCHEDULER_H
#define KT_SCHEDULER_SCHEDULER_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kt_scheduler kt_scheduler_t;

/* The placeholder "best cost" of a task without any valid measurement (TVM's
 * 1e10 seconds); objectives see this value for such tasks. */
#define KT_SCHEDULER_NO_COST 1e10
/* A best cost at or above this is printed as "-" (no valid measurement). */
#define KT_SCHEDULER_VALID_COST_LIMIT 1e9
/* Rounds a task must have been tuned beyond every other member of its
 * similarity group before it may be expelled from the group. */
#define KT_SCHEDULER_GROUP_LEAVE_ROUNDS 5

/* Return values of kt_scheduler_next() besides 0 (a task was picked). */
#define KT_SCHEDULER_BUSY 1   /* nothing to start now: wait for a round to complete */
#define KT_SCHEDULER_DONE 2   /* the run is over: see kt_scheduler_finish_message() */

typedef enum {
    KT_SCHEDULER_GRADIENT = 0,    /* TVM's gradient strategy (default) */
    KT_SCHEDULER_ROUND_ROBIN,     /* cycle over live tasks */
    KT_SCHEDULER_SEQUENTIAL,      /* task 0 gets its share, then task 1, ... */
} kt_scheduler_strategy_t;

/* Why a task stopped being scheduled. */
typedef enum {
    KT_SCHEDULER_LIVE = 0,
    KT_SCHEDULER_EXHAUSTED,       /* the tuner found no new candidates */
    KT_SCHEDULER_EARLY_STOPPED,   /* no improvement for early_stopping trials */
} kt_scheduler_task_status_t;

/* Why a run ended. */
typedef enum {
    KT_SCHEDULER_RUNNING = 0,
    KT_SCHEDULER_END_BUDGET,      /* num_measure_trials reached */
    KT_SCHEDULER_END_ALL_DEAD,    /* every task is dead */
    KT_SCHEDULER_END_SEQUENCE,    /* sequential: every task had its turn */
} kt_scheduler_end_t;

/* One task to schedule. Strings are copied. */
typedef struct {
    double weight;                /* times the task's subgraph occurs; >= 0 */
    double flops;                 /* floating point operations of one run; >= 0 */
    const char *similarity_tag;   /* operator tags joined; NULL or "" = no similarity group */
    const char *workload_key;     /* for printing and snapshots; may be NULL */
} kt_scheduler_task_t;

/* Custom objective to minimise: best_costs[i] is task i's best latency in
 * seconds (KT_SCHEDULER_NO_COST if none). Default: sum(weight * cost). It is
 * called with the lock held and must not call back into the scheduler. */
typedef double (*kt_scheduler_objective_fn)(const double *best_costs, int n, void *user);

/* Called before a round of `task` starts / after its results are recorded. */
typedef void (*kt_scheduler_round_fn)(void *user, const kt_scheduler_t *s, int task);
/* Called after every recorded round: total trials so far, seconds since the
 * run started (plus restored elapsed time), estimated total latency in
 * seconds (the objective; INFINITY while some task has no valid cost). */
typedef void (*kt_scheduler_latency_fn)(void *user, int64_t trials, double elapsed,
                                        double est_latency);

/* Measurements per round of a task: half of TVM's 64, because a round's
 * search is cheap next to its measurement, and smaller rounds retrain the
 * cost model twice as often for the same trials. Larger rounds keep more
 * runners busy per search (--per-round). */
#define KT_SCHEDULER_DEFAULT_PER_ROUND 32

typedef struct {
    kt_scheduler_strategy_t strategy;
    int64_t num_measure_trials;   /* total budget incl. restored trials; >= number of tasks */
    int num_measures_per_round;   /* default 32; lowered to num_measure_trials / n_tasks */
    int early_stopping;           /* dead after more than this many trials w/o improvement; -1 off */
    double eps_random;            /* gradient: share of picks that choose a random live task */
    double alpha;                 /* gradient: weight of the backward gradient (vs forward) */
    double beta;                  /* gradient: similar-task speed bound factor; > 1 */
    double gamma;                 /* accepted for TVM parity; TVM's formula does not use it */
    int backward_window_size;     /* gradient: rounds in the backward difference; >= 1 */
    uint64_t seed;                /* random picks (eps_random, ties) */
    int max_in_flight;            /* rounds outstanding at once via next/complete; >= 1 */
    kt_scheduler_objective_fn objective;   /* NULL = weighted sum of latencies */
    void *objective_user;
    /* NULL, or per task the task it is an alternative implementation of (the
     * same layers computed another way, e.g. a Winograd conv2d), -1 for none;
     * a task named here is no alternative itself. The default objective then
     * sums, per task that is no alternative, its weight times the fastest
     * latency among it and its alternatives (the alternatives' own weights
     * are unused), the estimate is finite once every such group has one
     * valid cost, and the gradient credits only a group's fastest member.
     * Copied by kt_scheduler_new. */
    const int *alternative_of;
    FILE *table_out;              /* progress table before each round; NULL = silent */
    kt_scheduler_round_fn pre_round;       /* optional extra callbacks */
    kt_scheduler_round_fn post_round;
    void *callback_user;          /* passed to pre_round and post_round */
    kt_scheduler_latency_fn latency_log;
    void *latency_user;           /* passed to latency_log */
} kt_scheduler_config_t;

/* The tuner the blocking loop drives. search_round measures up to n new
 * candidates of `task`, writes their costs in seconds to costs[0..] (a failed
 * build or run is INFINITY) and returns how many it measured; 0 means the
 * task has no new candidates (it becomes dead); negative (a KT_E* code with
 * kt_err set) aborts the run. */
typedef struct {
    int (*search_round)(void *user, int task, int n, double *costs);
    void *user;
} kt_scheduler_tuner_t;

/* Saved progress of one task, as kt_scheduler_task_state() reports it and
 * kt_scheduler_restore_task() accepts it. A store that only has measurement
 * records fills rounds/trials/best_cost and leaves history empty and the
 * flags zero; the scheduler then derives what it can (early stopping). */
typedef struct {
    int rounds;                   /* search rounds done */
    int64_t trials;               /* candidates measured (failed ones included) */
    double best_cost;             /* seconds; >= KT_SCHEDULER_VALID_COST_LIMIT or non-finite = none */
    const double *history;        /* best cost after each of the last history_len rounds */
    int history_len;              /* 0..rounds; aligned to the latest rounds */
    int best_round;               /* round (1-based) that reached best_cost; 0 = derive */
    kt_scheduler_task_status_t status;
    int left_group;               /* expelled from its similarity group */
} kt_scheduler_task_state_t;

/* --- create / destroy ------------------------------------------------ */

/* TVM's defaults but the round size: gradient, eps_random 0.05, alpha 0.2,
 * beta 2, gamma 0.5, window 3, KT_SCHEDULER_DEFAULT_PER_ROUND per round,
 * early stopping off, one round in flight, table to stdout.
 * num_measure_trials is 0 and must be set. */
void kt_scheduler_config_default(kt_scheduler_config_t *cfg);

/* NULL + kt_err (KT_EINVAL) on bad input, including a budget smaller than
 * the number of tasks (every task must be measured at least once). */
kt_scheduler_t *kt_scheduler_new(const kt_scheduler_task_t *tasks, int n_tasks,
                                 const kt_scheduler_config_t *cfg);
void kt_scheduler_free(kt_scheduler_t *s);

/* --- resume (only before the first pick) ----------------------------- */

/* Restore a task's progress (history is copied). Restored tasks with rounds
 * > 0 skip the warm-up. A task whose restored state already exceeds the
 * early-stopping limit is dead. KT_ESTATE once picking has started. */
int kt_scheduler_restore_task(kt_scheduler_t *s, int task, const kt_scheduler_task_state_t *st);
/* Seconds already spent in earlier runs, added to "Used time". */
int kt_scheduler_restore_elapsed(kt_scheduler_t *s, double seconds);

/* --- drive ----------------------------------------------------------- */

/* Run to the end with one round at a time. 0 when the run ended normally
 * (budget spent, all tasks dead, ...: see kt_scheduler_finish_message), or
 * the tuner's negative code. */
int kt_scheduler_run(kt_scheduler_t *s, const kt_scheduler_tuner_t *tuner);

/* Pick the next task among live tasks not in flight and mark it in flight:
 * 0 with *task and *n (candidates to measure) set; KT_SCHEDULER_BUSY when
 * nothing may start until a round completes (max_in_flight reached, every
 * live task in flight, or the budget committed to in-flight rounds);
 * KT_SCHEDULER_DONE when the run is over; negative on error. */
int kt_scheduler_next(kt_scheduler_t *s, int *task, int *n);
/* Record the n_costs costs (seconds; non-finite or <= 0 = failed) measured in
 * the round of `task`; n_costs == 0 marks the task dead (no new candidates).
 * KT_ESTATE if the task is not in flight. */
int kt_scheduler_complete(kt_scheduler_t *s, int task, const double *costs, int n_costs);
/* Give up an in-flight round without recording anything (lost worker). */
int kt_scheduler_abort(kt_scheduler_t *s, int task);

/* --- query ----------------------------------------------------------- */

int kt_scheduler_n_tasks(const kt_scheduler_t *s);
/* num_measures_per_round after the reduction to num_measure_trials / n. */
int kt_scheduler_measures_per_round(const kt_scheduler_t *s);
int64_t kt_scheduler_total_trials(const kt_scheduler_t *s);
/* The objective over current best costs, seconds; INFINITY while some task
 * has no valid measurement. */
double kt_scheduler_estimated_latency(const kt_scheduler_t *s);
/* The objective over costs[0..n_tasks) given by the caller (seconds, INFINITY
 * for none): what the estimate would be with those bests (e.g. each task's
 * best over several runs); INFINITY for a NULL argument. */
double kt_scheduler_objective(const kt_scheduler_t *s, const double *costs);
/* A task's state; out->history points into the scheduler and stays valid
 * until the next next/complete/abort/restore call. */
int kt_scheduler_task_state(const kt_scheduler_t *s, int task, kt_scheduler_task_state_t *out);
int kt_scheduler_in_flight(const kt_scheduler_t *s, int task);
kt_scheduler_end_t kt_scheduler_end_reason(const kt_scheduler_t *s);
/* "" while running; a sentence saying why the run ended otherwise. The
 * pointer stays valid until kt_scheduler_free. */
const char *kt_scheduler_finish_message(const kt_scheduler_t *s);

/* Print TVM's table (title banner, one row per task, totals line) with
 * "Next ID: next_task". 0 or KT_EIO. */
int kt_scheduler_print_table(const kt_scheduler_t *s, FILE *out, int next_task);

/* Progress for the CLI / tracker: {"tasks": [{"id", "workload_key", "weight",
 * "flops", "latency_s" (null if none), "gflops" (null), "trials", "rounds",
 * "status" ("live" | "exhausted" | "early-stopped"), "in_flight",
 * "left_group"}...], "estimated_latency_s" (null while some task has no
 * valid cost), "total_trials", "budget", "measures_per_round", "elapsed_s",
 * "next_task" (last picked, -1 before any), "finished", "finish_message",
 * "strategy"}. New reference (json_decref) or NULL + kt_err. */
json_t *kt_scheduler_snapshot(const kt_scheduler_t *s);

/* A latency_log callback that appends TVM's line "ElapsedTime(s)\t<s>\t
 * EstimatedLatency(ms)\t<ms or N/A>\tTrials\t<n>" to the FILE* given as
 * latency_user. */
void kt_scheduler_log_latency_file(void *user, int64_t trials, double elapsed, double est_latency);

/* "gradient", "round-robin", "sequential" <-> enum; -1 / NULL if unknown. */
int kt_scheduler_strategy_parse(const char *name);
const char *kt_scheduler_strategy_name(kt_scheduler_strategy_t st);

#endif
