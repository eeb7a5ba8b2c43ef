/*
 * A tuning job as the record store holds it, seen by the task scheduler: the
 * job's tuning options (stored as JSON in the job row), its tasks with their
 * parsed workloads, and each task's progress rebuilt from the measurement
 * records. Shared by the tracker's job manager (to resume a job) and the CLI
 * (to print a job's table straight from a store file).
 *
 * Progress from records: a task's records are every record of its
 * (workload key, target) in the store, whichever job measured them, so a job
 * over workloads tuned before continues from what is stored (as TVM's
 * TaskScheduler does with load_log_file). Taken in id order and cut into
 * rounds of the scheduler's measures-per-round, they give the task's trials,
 * rounds, best cost and per-round best history.
 *
 * Ownership: kt_job_view_load() returns a view owning its job info, workloads
 * and arrays; kt_job_view_free() releases it (accepts NULL). Schedulers from
 * kt_job_view_scheduler() are the caller's. Threads: a view is read-only once
 * loaded; a store handle is used by one thread at a time (store.h).
 */
#ifndef KT_SERVICE_JOB_VIEW_H
#define KT_SERVICE_JOB_VIEW_H

#include <jansson.h>
#include <stdint.h>

#include "ktune.pb-c.h"
#include "scheduler/scheduler.h"
#include "store/store.h"
#include "te/workload.h"

/* Defaults of a job's options, TVM's where TVM has one. */
#define KT_JOB_DEFAULT_PER_ROUND KT_SCHEDULER_DEFAULT_PER_ROUND /* TVM: 64 */
#define KT_JOB_DEFAULT_NUMBER 3            /* runs per repeat (LocalRunner) */
#define KT_JOB_DEFAULT_REPEAT 1
#define KT_JOB_DEFAULT_MIN_REPEAT_MS 100
#define KT_JOB_DEFAULT_TIMEOUT_MS 10000    /* per candidate run */
#define KT_JOB_DEFAULT_BUILD_TIMEOUT_MS 15000
#define KT_JOB_SEARCH_PARAMS_MAX 1024      /* bytes of search_params, NUL included */
/* The queue priorities a job may ask for (larger first), the same from the
 * CLI and over SubmitJob; a value outside is a mistake, not an ordering. */
#define KT_JOB_PRIORITY_MIN (-1000000)
#define KT_JOB_PRIORITY_MAX 1000000000

/* A job's tuning options (TuningOptions + MeasureOptions, defaults filled). */
typedef struct {
    int64_t trials;            /* num_measure_trials: the job's total, restored included */
    int per_round;             /* num_measures_per_round */
    int early_stopping;        /* trials without improvement before a task stops; -1 off */
    uint64_t seed;
    int number, repeat, min_repeat_ms;
    double cooldown_interval;
    int enable_cpu_cache_flush;
    int flush_weights;         /* evict only the weights before each timed run */
    int timeout_ms;            /* per candidate run */
    int build_timeout_ms;      /* per candidate build */
    int check_correctness;
    int num_threads;           /* 0: the runner's default */
    char search_params[KT_JOB_SEARCH_PARAMS_MAX];  /* kt_search_opts_set list; "" defaults */
    int transfer;              /* 1: schedule transfer as search_params say (default); 0: off
                                  (TuningOptions.no_transfer) */
} kt_job_opts_t;

void kt_job_opts_default(kt_job_opts_t *o);
/* From TuningOptions (NULL: defaults). Zero fields take the defaults;
 * early_stopping 0 is off; a MeasureOptions given is taken as given except
 * zeros. KT_EINVAL on negative values and on search_params that
 * kt_search_opts_set refuses (or longer than KT_JOB_SEARCH_PARAMS_MAX - 1). */
int kt_job_opts_from_proto(const Ktune__V1__TuningOptions *in, kt_job_opts_t *o);
/* As stored in the job row; new reference or NULL. */
json_t *kt_job_opts_to_json(const kt_job_opts_t *o);
/* From the stored text; missing keys keep their defaults. 0 or KT_EINVAL. */
int kt_job_opts_from_json(const char *text, kt_job_opts_t *o);

/* A stored job with its workloads. */
typedef struct {
    kt_store_job_info_t *info;  /* the job row and its tasks (ordered by index) */
    kt_job_opts_t opts;
    int ntasks;
    kt_workload_t **wl;         /* per task, parsed from the stored canonical JSON */
    char **tags;                /* per task: similarity tag (compute stages' tags joined) */
    int *alt;                   /* per task: the task it is an alternative of (a Winograd
                                   conv2d of a direct one in the job) or -1; NULL: none */
} kt_job_view_t;

/* Load job `id`. KT_ENOTFOUND when the store has no such job. */
int kt_job_view_load(kt_store_t *s, int64_t id, kt_job_view_t **out);
void kt_job_view_free(kt_job_view_t *v);

/* The similarity tag of a workload: its compute stages' operator tags joined
 * with '_' (TVM's derive_similarity_tag). Caller frees. */
char *kt_job_similarity_tag(const kt_workload_t *w);

/* A task's progress rebuilt from its records (see the header paragraph). */
typedef struct {
    int64_t trials;
    int rounds;
    double best_cost;           /* seconds; KT_SCHEDULER_NO_COST when nothing valid */
    double *history;            /* best after each round (malloc'd, rounds entries) */
} kt_job_task_progress_t;

/* 1 when r is a valid record (error code 0, a finite positive mean cost)
 * faster than best_cost: the test by which a task's best is counted. */
int kt_job_record_beats(const kt_record_t *r, double best_cost);

/* A task's best record and its origin, followed as its records come in id
 * order (the first of equal costs stays), for the status page's origin of
 * each task's best. */
typedef struct {
    double cost;                /* seconds; KT_SCHEDULER_NO_COST while none */
    int origin;                 /* KT_STORE_ORIGIN_* of that record */
} kt_job_best_t;

void kt_job_best_init(kt_job_best_t *b);
/* Take r when kt_job_record_beats(r, b->cost). */
void kt_job_best_note(kt_job_best_t *b, const kt_record_t *r);
/* The tasks of a status snapshot (the "tasks" array of `job`, a
 * kt_scheduler_snapshot) with what the scheduler does not know: each
 * task's layers ("desc", from the view) and, with best (one per task) not
 * NULL, the origin of its best record ("best_origin": a
 * kt_store_origin_name, null while the task has no best). 0 or KT_ENOMEM. */
int kt_job_view_annotate_tasks(json_t *job, const kt_job_view_t *v, const kt_job_best_t *best);

/* Walk task `task`'s records in id order into *out (free out->history),
 * calling each(r, ctx) for every record when each is not NULL (it must not
 * use the store handle). per_round >= 1. */
int kt_job_view_task_progress(kt_store_t *s, const kt_job_view_t *v, int task, int per_round,
                              kt_record_fn_t each, void *ctx, kt_job_task_progress_t *out);

/* A scheduler over the view's tasks with config `base` (budget and
 * measures per round come from the job's options), every task restored
 * from its records and the elapsed time from the job's latency log. When
 * each is not NULL it sees every record of every task: each(task, r, ctx).
 * NULL + kt_err on error. */
typedef int (*kt_job_record_fn)(int task, const kt_record_t *r, void *ctx);
kt_scheduler_t *kt_job_view_scheduler(kt_store_t *s, const kt_job_view_t *v,
                                      const kt_scheduler_config_t *base, kt_job_record_fn each,
                                      void *ctx);

/* ---- convergence from records ------------------------------------------------------------ */

/* The estimated total latency against trials of a job as its tasks' records
 * tell it, for a job whose latency log is empty (it ran before ktune logged
 * one, or it continued from records an earlier job stored): the records in
 * id order (the order they were measured in), each task's best so far, and
 * once every task has a valid one, the weighted sum of the bests (the
 * scheduler's estimate). A point [trials, seconds] is taken every
 * per_round records and after the last, as the live scheduler logs one per
 * round. Fed by kt_job_curve_add() as the `each` of kt_job_view_scheduler(),
 * so the records are read once for both. */
typedef struct {
    struct kt_job_curve_rec *recs;   /* private */
    size_t n, cap;
    int oom;
} kt_job_curve_t;

/* A kt_job_record_fn (ctx: a zeroed kt_job_curve_t): keeps the record's id,
 * task and cost. Returns nonzero (stopping the walk) only on OOM. */
int kt_job_curve_add(int task, const kt_record_t *r, void *ctx);
/* The curve as a JSON array of [trials, seconds] (new reference), empty
 * while some task has no valid record; NULL + kt_err on OOM. per_round >= 1. */
json_t *kt_job_curve_json(kt_job_curve_t *c, const kt_job_view_t *v, int per_round);
/* The curve of a job with its latency log pts[0..npts-1]: the points its
 * records draw before the log's first point, then the log. A job resumed
 * after a restart logs from where it resumed, and one that continued from
 * records an earlier job stored logs from its first round: the records are
 * what shows the history before. Without a log, the records' curve alone.
 * New reference; NULL + kt_err on OOM. */
json_t *kt_job_curve_with_log(kt_job_curve_t *c, const kt_job_view_t *v, int per_round,
                              const kt_store_latency_t *pts, size_t npts);
/* Free what the curve holds (not c itself). */
void kt_job_curve_clear(kt_job_curve_t *c);

/* ---- progress messages ---------------------------------------------------------------- */

/* Where the strings and arrays of a progress message live: alloc returns
 * zeroed memory that lasts as long as the message is needed (e.g.
 * kt_rpc_call_alloc, or an arena below). */
typedef void *(*kt_job_alloc_fn)(void *user, size_t size);

/* A list of allocations freed together. */
typedef struct {
    void **blocks;
    size_t n, cap;
} kt_job_arena_t;

/* A kt_job_alloc_fn over a kt_job_arena_t (user). */
void *kt_job_arena_alloc(void *arena, size_t size);
/* Free every allocation (the arena itself is the caller's). */
void kt_job_arena_clear(kt_job_arena_t *a);

/* Fill `out` (initialised by the caller) with the job's progress from its
 * scheduler: tasks, estimated latency (0 while unknown), trials, elapsed,
 * the TVM table, budget and the job's identity; state and message as
 * given; with best (one per task) not NULL each task's best_origin, and
 * store_model (NULL: none) as given. 0 or KT_ENOMEM. */
int kt_job_view_progress(const kt_job_view_t *v, kt_scheduler_t *sched, const char *state,
                         const char *message, const kt_job_best_t *best,
                         const char *store_model, kt_job_alloc_fn alloc, void *user,
                         Ktune__V1__JobProgress *out);

/* The progress of a job read from the store alone (no tracker). */
int kt_job_view_progress_from_store(kt_store_t *s, int64_t id, kt_job_alloc_fn alloc, void *user,
                                    Ktune__V1__JobProgress *out);

#endif
