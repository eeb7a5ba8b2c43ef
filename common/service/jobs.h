/*
 * The tracker's job manager: tuning jobs from SubmitJob to their last record.
 *
 * A job is a set of tasks (workload + weight) on one target, tuned with a
 * total budget of measurement trials on the runners of one device key. The
 * job, its workloads and tasks are stored in the record store when it is
 * submitted; every measurement becomes a record there. Each running job has a
 * thread driving a task scheduler (common/scheduler) over its tasks, with one
 * search policy (common/search) per task. One round of a task is:
 *
 *   propose n new states -> make their C candidates (+ the task's reference
 *   kernel, built once) -> Build on workers (split over the live workers) ->
 *   Run on runners of the job's key (split over all free runners; each part
 *   waits for a lease in the key's queue, fairly among jobs by priority and
 *   age) -> commit the records in one transaction -> feed the costs back to
 *   the policy -> complete the scheduler's round.
 *
 * A measurement counts once its COMMIT returned: only then do the policy and
 * the scheduler see it; rounds that finish together share one transaction.
 * Rounds of different tasks overlap: as many as give every runner of the
 * key two parts (one measuring, one queued), plus one per core being
 * searched, so search overlaps measurement. The CPU-bound steps (propose
 * and make, feedback) of all jobs' rounds run in FIFO slots, one per core;
 * feedback goes first.
 * A part whose runner fails (dropped, unreachable, deadline) is re-queued to
 * another runner; its states are measured once. States measured before, by
 * this job or any other in the store, are never proposed again.
 *
 * Resume: on start the manager restarts every job the store lists as queued
 * or running, restoring each task's progress from the records of its
 * (workload, target) (job_view.h) and preloading the policies with them. A
 * stopped manager leaves its jobs "running" in the store for that; a
 * cancelled job is "cancelled", a finished one "done", one that hit an
 * internal error "failed" with the reason logged and kept in memory.
 *
 * Served on the tracker (jobs_rpc.c): Tracker/SubmitJob, CancelJob,
 * JobStatus, ListJobs, WatchJob (a JobProgress per completed round until the
 * job ends or the client leaves), QueryBest and ListRecords; the status
 * snapshot's "jobs" and job metrics.
 *
 * Ownership: the manager borrows the tracker (which must outlive it) and
 * owns its jobs, store handles and threads. Threads: kt_jobs_new, start,
 * stop and free from the tracker's main thread (stop before
 * kt_tracker_stop); kt_jobs_submit and kt_jobs_cancel from any thread.
 */
#ifndef KT_SERVICE_JOBS_H
#define KT_SERVICE_JOBS_H

#include <stdint.h>

#include "ktune.pb-c.h"
#include "service/job_view.h"
#include "te/workload.h"
#include "service/tracker.h"

typedef struct kt_jobs kt_jobs_t;

/* The store ktune-tracker uses when --db is not given. */
#define KT_JOBS_DEFAULT_DB "ktune.db"
/* Most candidates one Run request carries: a part stays short enough to
 * re-queue cheaply and to let a stopping tracker finish quickly. */
#define KT_JOBS_MAX_RUN_BATCH 16

/* ---- create / start / stop ------------------------------------------------------------- */

/* Open (create) the store at db_path and add the job RPCs, the snapshot
 * function and the metrics to `t` (before kt_tracker_start). NULL + kt_err. */
kt_jobs_t *kt_jobs_new(kt_tracker_t *t, const char *db_path);
/* Run the searches on n threads (1..KT_POOL_MAX_THREADS; default: the
 * online cores): at most n rounds of any jobs propose, make candidates or
 * train at a time, and each scores its population on a pool n wide. A
 * seeded job proposes the same states whatever n. Before kt_jobs_start and
 * any submission: 0, KT_EINVAL for n out of range, KT_ESTATE once jobs
 * exist. */
int kt_jobs_set_search_threads(kt_jobs_t *m, int n);
/* The current width (the online cores unless set). */
int kt_jobs_search_threads(const kt_jobs_t *m);
/* Resume the unfinished jobs of the store (after kt_tracker_start). A job
 * that cannot be resumed is marked failed and logged; 0 or a store error. */
int kt_jobs_start(kt_jobs_t *m);
/* Stop every job thread (jobs stay "running" in the store), wake watchers
 * and refuse new submissions. Accepts NULL. */
void kt_jobs_stop(kt_jobs_t *m);
/* Free (after kt_jobs_stop and kt_tracker_stop). Accepts NULL. */
void kt_jobs_free(kt_jobs_t *m);

/* ---- jobs ---------------------------------------------------------------------------------- */

/* Validate, store and start a job; *id gets its id. KT_EINVAL naming what is
 * wrong; KT_ELIMIT past a limit (util/kt_limits.h); KT_EUNSUP for a target ktune cannot tune yet; KT_ESTATE while
 * stopping. */
int kt_jobs_submit(kt_jobs_t *m, const Ktune__V1__Job *job, int64_t *id);
/* The same for a job coming over `client` (an RPC peer address, or NULL):
 * KT_ELIMIT when the tracker already has KT_LIMIT_JOBS jobs queued or
 * running, or that client KT_LIMIT_JOBS_PER_CLIENT. */
int kt_jobs_submit_from(kt_jobs_t *m, const Ktune__V1__Job *job, const char *client,
                        int64_t *id);

/* What a submitter should know before the job runs: the job continues from
 * the records of its tasks, so a budget the store already covers ends the
 * job at once, and the notice says so and how to tune further. */
typedef struct {
    int64_t stored_trials;     /* records of the job's (workload, target) pairs (0: existing) */
    int64_t budget;            /* the job's num_measure_trials, stored ones included */
    int existing;              /* the request id named a job submitted before: *id is it */
    char notice[512];          /* "" when there is nothing to say */
} kt_jobs_submit_info_t;

/* Longest SubmitJob request id (SubmitJobRequest.request_id). */
#define KT_JOBS_REQUEST_ID_MAX 128
/* A request id's form (at most KT_JOBS_REQUEST_ID_MAX of A-Z a-z 0-9 . _ :
 * -; NULL and "" pass, meaning none): 0 or KT_EINVAL saying what is wrong.
 * Thread-safe. */
int kt_jobs_check_request_id(const char *rid);

/* kt_jobs_submit, filling *info (may be NULL). */
int kt_jobs_submit_info(kt_jobs_t *m, const Ktune__V1__Job *job, int64_t *id,
                        kt_jobs_submit_info_t *info);
/* All of the above: a job from `client` (or NULL), *info filled (may be
 * NULL), under `request_id` (NULL or "": none). A request id (1 to
 * KT_JOBS_REQUEST_ID_MAX of A-Z a-z 0-9 . _ : -, else KT_EINVAL) is stored
 * with the job (in its options JSON, with a hash of the Job message); when
 * the store already holds a job submitted under it, *id gets that job, info
 * says existing, and nothing is created or checked against the limits, so a
 * retried SubmitJob whose answer was lost makes no second job. The same id
 * with another Job message is KT_EINVAL. Without a principal of their own
 * (the tracker has one shared token), ids are one namespace per store. */
int kt_jobs_submit_ex(kt_jobs_t *m, const Ktune__V1__Job *job, const char *client,
                      const char *request_id, int64_t *id, kt_jobs_submit_info_t *info);
/* The checks of kt_jobs_submit that need no tracker (SubmitJob's validation,
 * also run by the fuzz targets): 0, KT_EINVAL naming what is wrong, or
 * KT_ELIMIT for more than KT_LIMIT_TASKS tasks. With
 * opts, the job's options go there; with wl (n_tasks entries), the parsed
 * workloads, which the caller frees (left NULL on failure). */
int kt_jobs_check_job(const Ktune__V1__Job *job, kt_job_opts_t *opts, kt_workload_t **wl);
/* Job threads that have not returned: the queued and running jobs, and
 * finished ones still retraining their key's store model (which follows a
 * job's last commit, so a job reads "done" before its thread ends).
 * Thread-safe. */
int kt_jobs_threads_live(kt_jobs_t *m);
/* Cancel a job and wait up to wait_ms for its rounds to stop. KT_ENOTFOUND,
 * KT_ESTATE when it already ended. */
int kt_jobs_cancel(kt_jobs_t *m, int64_t id, int wait_ms);

#endif
