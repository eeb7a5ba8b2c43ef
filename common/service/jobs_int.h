/*
 * Private to the job manager (jobs.c: jobs and their rounds; jobs_rpc.c:
 * the RPC handlers). Lock order: kt_jobs_t.mu, then job_t.mu; no scheduler
 * function is called while holding either (the scheduler's latency
 * callback takes job_t.mu inside the scheduler's lock).
 */
#ifndef KT_SERVICE_JOBS_INT_H
#define KT_SERVICE_JOBS_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "http/metrics.h"
#include "service/job_view.h"
#include "service/jobs.h"
#include "util/pool.h"
#include "registry/registry.h"
#include "scheduler/scheduler.h"
#include "search/search.h"
#include "store/store.h"

/* One task of a running job. */
typedef struct {
    kt_search_policy_t *policy;  /* borrowed from the job's family object */
    kt_jobs_t *m;                /* for has_measured */
    const char *key;             /* workload key (the view's) */
    const char *target;
    kt_search_candidate_t ref;   /* the reference kernel (source made once) */
    int have_ref;
    /* Records of (key, target) the policy knows (preloaded or committed by
     * this task). While the store holds no others, a state the policy has
     * not seen was measured by nobody and has_measured need not ask the
     * store for each state a search considers: `fast` is set per round. */
    int64_t known;
    int fast;
    kt_job_best_t best;          /* its best record and that record's origin (job_t.mu) */
    uint8_t *ref_art;            /* its built artifact, once built */
    size_t ref_len;
    char ref_hash[17];
} job_task_t;

typedef struct job_round job_round_t;

typedef struct job {
    struct job *next;
    kt_jobs_t *m;
    int64_t id;
    kt_job_view_t *view;          /* job row, options, workloads */
    kt_scheduler_t *sched;
    job_task_t *tasks;
    kt_search_family_t *fam;      /* the tasks' policies (and FamilySeer's shared models) */
    kt_sched_params_t params;
    int cuda;                     /* target cuda: CUDA candidates, CPU reference */
    char arch[32];                /* cuda: sm_XY of the key's runners ("" until one is known) */

    pthread_t thread;
    int thread_started;

    pthread_mutex_t mu;           /* everything below */
    pthread_cond_t cv;            /* rounds done, progress, cancel */
    char state[16];               /* queued | running | done | cancelled | failed */
    char *message;                /* why it ended */
    char waiting[256];            /* what it waits for now ("" when nothing) */
    atomic_int cancel;            /* CancelJob asked for it */
    atomic_int failed;            /* a round hit an internal error */
    int in_flight;                /* rounds outstanding */
    int64_t reserved;             /* trials committed or promised to in-flight rounds */
    uint64_t seq;                 /* bumped on every completed round and state change */
    int finished;                 /* the thread ended (state final, or stopped) */
    /* The submitting client's connection ("ipv4:10.0.0.5:41234"; "" for a
     * resumed job or an in-process caller): KT_LIMIT_JOBS_PER_CLIENT counts
     * by it. Set before the job is listed, then read only. */
    char client[128];
    json_t *curve;                /* [[trials, latency_s or null], ...] */
    /* While job_load walks the records: where they go to draw the curve
     * from when the job has no latency log yet (NULL otherwise). */
    kt_job_curve_t *load_curve;
    job_round_t *rounds;          /* outstanding round threads */
    int use_store_model;          /* search option store_model (set at load) */
    /* The store model its xgb models started from, "v3/1200" (version /
     * records trained on), "" when none: the job's "store_model" field. */
    char store_model[48];
} job_t;

struct kt_jobs {
    kt_tracker_t *t;
    kt_registry_t *reg;
    char *db;
    /* The one store handle of the process, taken with kt_jobs_store_get
     * (a fair, re-entrant lock over store_mu). One only:
     * kt_store_open() reads the file's header with a plain open()/close(),
     * and a close() drops every POSIX lock this process holds on the file,
     * including the shared lock SQLite keeps for open WAL connections; then
     * another process closing the database takes this one for gone and
     * deletes the WAL under it. Every use is short (no handle is held while
     * waiting for peers or a client). */
    kt_store_t *store;
    pthread_mutex_t store_mu;         /* guards the fields below, held briefly */
    pthread_cond_t store_cv;
    uint64_t store_next, store_serving;   /* tickets: next to hand out, next to enter */
    pthread_t store_owner;            /* the holder, while store_depth > 0 */
    int store_depth;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *jobs;
    /* Serialises kt_jobs_submit, so that counting the active jobs against
     * KT_LIMIT_JOBS and listing the new one are one step. */
    pthread_mutex_t submit_mu;
    /* WatchJob streams now open, in all and per client (under mu). */
    int watchers;
    struct watch_client *watch_clients;
    atomic_int stopping;
    /* The CPU-bound steps of rounds (propose + make, feedback) of all jobs
     * run at most cpu_slots at a time, in arrival order: more would only
     * share the cores, delay every round's first measurement and starve the
     * RPC threads (heartbeats, Run replies). Under mu. */
    int cpu_slots, cpu_busy;
    struct cpu_waiter *cpu_queue;     /* rounds waiting for a slot, first first */
    /* The search pool (cpu_slots wide, --search-threads): a round in a slot
     * scores its population on it, so one task's search uses the cores the
     * other slots leave idle (a job of one task, or the last task running).
     * Its threads only help: each round also works on its own chunks. */
    kt_pool_t *pool;
    /* KT_BENCH_DISPATCH_ONLY=1 (bench/bench_tracker only): rounds skip the
     * search and code generation, proposing placeholder candidates, so that
     * the benchmark measures dispatch alone. Never for tuning. */
    int dispatch_only;
    atomic_ullong stub_seq;
    /* Group commit: rounds that finish while another round's COMMIT is
     * running (an fsync) are written together in the next transaction, so
     * the store sees one fsync per group instead of one per round. */
    pthread_mutex_t commit_mu;
    pthread_cond_t commit_cv;
    struct commit_req *commit_queue;
    int committing;
    /* Threads that carry the Build and Run parts of rounds (parts block on
     * leases and RPCs, so the set grows to what is in flight). They are kept
     * idle a while instead of one thread made per part: at hundreds of
     * runners a thread per one-candidate part (its stack mapped, faulted in
     * and unmapped) was a large share of the tracker's CPU per measurement. */
    pthread_mutex_t parts_mu;
    pthread_cond_t parts_cv;          /* work queued, or stopping */
    pthread_cond_t parts_gone_cv;     /* a part thread exited */
    struct part_task *parts_head, **parts_tail;
    int parts_queued, parts_idle, parts_threads, parts_stop;
    kt_metric_t *m_measurements, *m_rounds, *m_jobs, *m_rpc;
    /* Records read to show the store's earlier jobs in the status snapshot:
     * what a page of them costs (only the page's jobs are read). */
    kt_metric_t *m_status_records;
    /* The store's size and counts as the snapshot shows them (a scan of the
     * records), and when they were read (kt_time_mono); under stats_mu. */
    pthread_mutex_t stats_mu;
    json_t *stats;
    double stats_at;
    /* Serialises the store model's refreshes (kt_search_store_model), so
     * that jobs of one key starting or ending together train it once. Taken
     * by job threads only, never under another lock; it holds the store
     * only for its reads and its write. */
    pthread_mutex_t model_mu;
    /* Job threads started and not yet returned (kt_jobs_threads_live). */
    atomic_int threads_live;
};

/* Take the store handle (waits while another thread uses it) and give it
 * back. */
kt_store_t *kt_jobs_store_get(kt_jobs_t *m);
void kt_jobs_store_put(kt_jobs_t *m, kt_store_t *s);

/* Free the WatchJob bookkeeping (jobs_rpc.c), from kt_jobs_free. */
void kt_jobs_watch_clients_free(kt_jobs_t *m);

/* A job by id (in memory), or NULL. Under nothing; the job lives until
 * kt_jobs_free. */
job_t *kt_jobs_find(kt_jobs_t *m, int64_t id);

/* The job's JSON for the status page and `--json` (fields of http.h's
 * schema). New reference or NULL. */
json_t *kt_jobs_job_json(job_t *j);

/* Register the Tracker job methods on the tracker's server (jobs_rpc.c). */
int kt_jobs_rpc_add(kt_jobs_t *m);

#endif
