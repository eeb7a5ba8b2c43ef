/*
 * The record store: one SQLite database file holding workloads, jobs with
 * their tasks, every measurement record and each job's estimated-latency log.
 * It is the system's source of truth: a record counts as stored once
 * kt_store_put_records() has returned 0 (its COMMIT has returned), and it
 * survives a crash of the process at any later point. The store does not
 * measure, schedule or interpret states; it keeps what callers give it.
 *
 * Database: WAL journal, synchronous=FULL (see store.c for why), foreign
 * keys on, a busy timeout of KT_STORE_BUSY_TIMEOUT_MS, schema versioned with
 * PRAGMA user_version and migrated in order, in one transaction, when a
 * handle opens the file read-write. A file from a newer ktune (higher
 * user_version) and a file that is not a SQLite database are refused; the
 * latter is never modified.
 *
 * Errors: every function returns 0 or a negative KT_E* code with kt_err set.
 * A write that finds the file system full (SQLite's "database or disk is
 * full", or an I/O error with less than a megabyte free there) is KT_EFULL,
 * its message naming the file system ("the file system is full (N bytes free
 * in DIR; ...)"); the transaction is rolled back and the store is as it was,
 * so the same write succeeds once space is freed. Other I/O errors are
 * KT_EIO.
 *
 * Ownership: strings and arrays passed in are owned by the caller and only
 * read during the call. Everything the store returns is owned by one result
 * object freed with one call: kt_record_list_free(), kt_store_job_info_free(),
 * or free() for the plain arrays and strings named so below. Records passed
 * to a kt_store_foreach_record() callback are borrowed for that call only.
 *
 * Threads: a kt_store_t is one SQLite connection with its cached prepared
 * statements; use it from one thread at a time (no locking inside). Open one
 * handle per thread: any number of handles, in any threads or processes, may
 * read while one writes. Readers see each commit whole or not at all, and never
 * wait for the writer. Writers take the database lock at the start of each
 * write transaction (BEGIN IMMEDIATE) and wait up to the busy timeout for
 * another writer. A kt_store_foreach_record() callback must not call any
 * function on the same handle (KT_ESTATE); use another handle.
 */
#ifndef KT_STORE_STORE_H
#define KT_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "measure/measure.h"

typedef struct kt_store kt_store_t;

/* The schema version this code writes (PRAGMA user_version). */
#define KT_STORE_SCHEMA_VERSION 6
/* The oldest schema a read-only handle reads as it is: the migrations after
 * it add indexes, which queries use when present, the distilled table,
 * which only kt_store_has_measured reads (and skips when absent), and the
 * records' origin column, which reads as unknown when absent. */
#define KT_STORE_READ_VERSION 2
/* How long a write waits for another writer's transaction, in milliseconds. */
#define KT_STORE_BUSY_TIMEOUT_MS 10000

/* kt_store_open() flags. */
#define KT_STORE_CREATE   0x1  /* create the file when it does not exist */
#define KT_STORE_READONLY 0x2  /* read-only handle; never migrates (the file must be at least
                                KT_STORE_READ_VERSION) */

/* ---- Open and close --------------------------------------------------- */

/* Open (and with KT_STORE_CREATE create) the database at `path`; ":memory:"
 * gives a private in-memory database. Read-write handles switch the file to
 * WAL and apply pending migrations. NULL + kt_err when the file is missing
 * (without KT_STORE_CREATE: KT_ENOTFOUND), is not a SQLite database
 * (KT_EINVAL, file untouched), is from a newer ktune (KT_EUNSUP), on a full
 * file system (KT_EFULL) or on other I/O errors (KT_EIO). */
kt_store_t *kt_store_open(const char *path, int flags);

/* Close the handle; accepts NULL. */
void kt_store_close(kt_store_t *s);

/* The path given to kt_store_open() (owned by the handle). */
const char *kt_store_path(const kt_store_t *s);

/* The database's PRAGMA user_version, or a negative KT_E* code. */
int kt_store_schema_version(kt_store_t *s);

/* PRAGMA integrity_check: 0 when it says "ok", KT_EIO with its first
 * complaint otherwise. */
int kt_store_integrity_check(kt_store_t *s);

/* ---- Workloads -------------------------------------------------------- */

/* Store a workload: its key, canonical JSON text and flop count. Storing the
 * same key again with the same text is a no-op (the flop count is updated);
 * with different text it is KT_EINVAL (a key collision). */
int kt_store_put_workload(kt_store_t *s, const char *key, const char *canonical, double flops);

/* Look a workload up. *canonical (malloc'd, caller frees) and *flops may be
 * NULL when not wanted. KT_ENOTFOUND when absent. */
int kt_store_get_workload(kt_store_t *s, const char *key, char **canonical, double *flops);

/* A stored workload (owned strings). */
typedef struct {
    char *key;
    char *canonical;
    double flops;
} kt_store_workload_t;

/* The stored workloads with at least one valid record (error_code 0) for
 * `target`, measured by runners of `runner_key` (NULL: any key), key
 * ascending, as a malloc'd array of *n (free with kt_store_workloads_free;
 * NULL when none). Records whose workload the store does not hold (imported
 * from elsewhere) name no workload here. Schedule transfer looks its nearest
 * workloads up in this list. */
int kt_store_list_workloads(kt_store_t *s, const char *target, const char *runner_key,
                            kt_store_workload_t **out, size_t *n);
void kt_store_workloads_free(kt_store_workload_t *w, size_t n);   /* accepts NULL */

/* ---- Jobs and their tasks --------------------------------------------- */

typedef struct {
    int64_t id;                /* assigned by kt_store_put_job() */
    double created;            /* seconds since the epoch */
    const char *state;         /* queued | running | done | cancelled | failed */
    const char *target;        /* "cuda", "cpu", ... */
    const char *runner_key;    /* device key of the runners to use */
    const char *strategy;      /* task scheduler: gradient | round-robin | sequential */
    const char *policy;        /* search policy: sketch.xgb | sketch.random | ... */
    const char *options_json;  /* tuning options as JSON text; NULL stores "{}" */
    int priority;              /* larger runs first */
} kt_store_job_t;

typedef struct {
    int index;                 /* task index within the job, 0.. */
    const char *workload_key;  /* must name a stored workload */
    double weight;             /* occurrences in the network */
    const char *target;
    const char *desc;          /* the layers it stands for ("conv0 + bn0 + relu0"); NULL stores "" */
} kt_store_task_t;

/* A job read back with its tasks (ordered by index); owns all its strings. */
typedef struct {
    kt_store_job_t job;
    kt_store_task_t *tasks;
    int ntasks;
} kt_store_job_info_t;

/* Insert a job and its tasks in one transaction; sets job->id. Task indexes
 * must be distinct and their workloads stored (KT_EINVAL otherwise). */
int kt_store_put_job(kt_store_t *s, kt_store_job_t *job, const kt_store_task_t *tasks, int ntasks);

/* Change a job's state. KT_ENOTFOUND when there is no such job. */
int kt_store_set_job_state(kt_store_t *s, int64_t id, const char *state);

/* Read a job and its tasks into *out (free with kt_store_job_info_free()).
 * KT_ENOTFOUND when absent. */
int kt_store_get_job(kt_store_t *s, int64_t id, kt_store_job_info_t **out);
void kt_store_job_info_free(kt_store_job_info_t *j);

/* Ids of the jobs in `state` (NULL: all), ascending, in a malloc'd array
 * (caller frees; NULL when *n is 0). */
int kt_store_list_jobs(kt_store_t *s, const char *state, int64_t **ids, size_t *n);

/* The lowest id of a job whose options JSON has `key` (lower-case letters
 * and '_') set to the string `value`: 0 with *id, or KT_ENOTFOUND. A scan
 * of the jobs table (no index), for rare look-ups such as a SubmitJob
 * request id. */
int kt_store_find_job_option(kt_store_t *s, const char *key, const char *value, int64_t *id);

/* Delete a job, its tasks and its latency log. Its records stay (their job_id
 * keeps the old number). KT_ENOTFOUND when absent. */
int kt_store_delete_job(kt_store_t *s, int64_t id);

/* ---- Records ---------------------------------------------------------- */

/* Where a record's state came from: which source of the search policy that
 * proposed it (docs/search.md, "Origin of a state"). Stored as the name
 * kt_store_origin_name() gives (the records table's origin column), NULL
 * for unknown; related values sit together, unknown is 0 so that a record
 * made without one (ktune kernel, a test) reads as unknown. */
#define KT_STORE_ORIGIN_UNKNOWN  0  /* measured outside a job's search, imported without one, or
                                       stored before ktune kept origins */
#define KT_STORE_ORIGIN_TRANSFER 1  /* re-fitted from another workload's records (schedule
                                       transfer's seeds of a task's first round) */
#define KT_STORE_ORIGIN_MODEL    2  /* picked by the trained cost model's evolutionary search */
#define KT_STORE_ORIGIN_RANDOM   3  /* random: a round before the model is trained (warm-up),
                                       the eps-greedy share, or a policy with a random model */
#define KT_STORE_ORIGIN_SIBLING  4  /* a rule's change of a best measured state (the location,
                                       tile, direct and row siblings of search.h) */
#define KT_STORE_NUM_ORIGINS     5
/* Their names, for messages. */
#define KT_STORE_ORIGIN_NAMES "unknown, transfer, model, random or sibling"

/* "unknown", "transfer", "model", "random" or "sibling"; NULL out of range. */
const char *kt_store_origin_name(int origin);
/* The KT_STORE_ORIGIN_* of a name above ("unknown" included), or -1. */
int kt_store_origin_parse(const char *name);

/* One measurement. When putting, the caller owns every pointer; the store
 * sets `id` and `mean_cost`. In results, the owning list or the callback's
 * duration bounds their lifetime. */
typedef struct {
    int64_t id;                /* assigned by the store, local to this database */
    const char *workload_key;  /* non-empty */
    const char *target;        /* non-empty */
    const char *state_json;    /* the state's serialized text, stored verbatim */
    uint64_t state_hash;       /* identifies the state (stored as its int64 bit pattern) */
    const double *costs;       /* seconds per repeat, finite and >= 0 */
    int ncosts;                /* >= 1 when error_code is 0 */
    double mean_cost;          /* set by the store: mean of costs; NAN when ncosts is 0 */
    int error_code;            /* KT_MEASURE_*: 0..KT_MEASURE_NUM_ERRORS-1 */
    const char *error_msg;     /* NULL stores ""; invalid UTF-8 is replaced by U+FFFD */
    double all_cost;           /* seconds spent building and running, >= 0 */
    double timestamp;          /* seconds since the epoch when measured */
    const char *runner_key;    /* NULL stores "" */
    int64_t job_id;            /* 0: not part of a job (stored as NULL) */
    const char *runner_id;     /* peer id of the runner that timed it; NULL stores "" */
    const char *runner_host;   /* that runner's host (its address without the port); NULL stores "" */
    int origin;                /* KT_STORE_ORIGIN_*: what proposed the state (0 unknown) */
} kt_record_t;

/* Records returned by a query; owns every string and cost array in items. */
typedef struct {
    size_t n;
    kt_record_t *items;
    void **blocks_;            /* private: one allocation per item */
} kt_record_list_t;

void kt_record_list_free(kt_record_list_t *l);

/* Selects records; every field is optional (NULL / 0 means any). */
typedef struct {
    const char *workload_key;
    const char *target;
    int64_t job_id;
    int valid_only;            /* nonzero: only error_code 0 */
    const char *runner;        /* a runner's peer id or its host (either matches) */
} kt_store_filter_t;

/* Store n records in ONE transaction: all or none. Returns 0 only after the
 * COMMIT has returned; then recs[i].id and recs[i].mean_cost are set. A record
 * failing validation (empty key, negative cost, error code out of range,
 * a valid record without costs, non-UTF-8 text other than error_msg) fails
 * the whole batch with KT_EINVAL before anything is written. */
int kt_store_put_records(kt_store_t *s, kt_record_t *recs, size_t n);

/* The valid record (error_code 0) with the lowest mean cost for (workload,
 * target), earliest id on ties, as a one-item list. KT_ENOTFOUND when none. */
int kt_store_best(kt_store_t *s, const char *workload_key, const char *target,
                  kt_record_list_t **out);

/* Up to k (> 0) valid records for (workload, target) by mean cost ascending
 * (then id); an empty list when none. */
int kt_store_top_k(kt_store_t *s, const char *workload_key, const char *target, int k,
                   kt_record_list_t **out);

/* kt_store_top_k of the records measured by runners of `runner_key` only
 * (NULL: any key, i.e. kt_store_top_k). */
int kt_store_top_k_key(kt_store_t *s, const char *workload_key, const char *target,
                      const char *runner_key, int k, kt_record_list_t **out);

/* The newest `limit` (> 0) records of `target` measured by runners of
 * `runner_key`, whatever their workload and error code, by id descending
 * (the store model of a device key trains on them). */
int kt_store_key_records(kt_store_t *s, const char *target, const char *runner_key, int limit,
                         kt_record_list_t **out);

/* How many records of `target` measured by runners of `runner_key` have an
 * id above after_id (0: all), into *n, and the highest such id into *max_id
 * (may be NULL; 0 when none). */
int kt_store_count_key_records(kt_store_t *s, const char *target, const char *runner_key,
                               int64_t after_id, int64_t *n, int64_t *max_id);

/* 1 when a record of this state exists for (workload, target), whatever its
 * error code (a failed state is not measured again), or existed before
 * kt_store_distill() dropped it; 0 when not, or negative. */
int kt_store_has_measured(kt_store_t *s, const char *workload_key, const char *target,
                          uint64_t state_hash);

/* Called for each selected record by id ascending; return 0 to continue,
 * anything else stops the walk and becomes kt_store_foreach_record()'s
 * return value. `r` is valid only during the call. */
typedef int (*kt_record_fn_t)(const kt_record_t *r, void *ctx);

/* Walk the records selected by `f` (NULL: all). 0, the callback's stop value,
 * or a negative KT_E* code. */
int kt_store_foreach_record(kt_store_t *s, const kt_store_filter_t *f, kt_record_fn_t fn,
                            void *ctx);

/* The same selection as an owned list (free with kt_record_list_free()). */
int kt_store_get_records(kt_store_t *s, const kt_store_filter_t *f, kt_record_list_t **out);

typedef struct {
    int64_t total;
    int64_t by_error[KT_MEASURE_NUM_ERRORS];  /* indexed by error code */
} kt_store_counts_t;

/* Count the records selected by `f` (NULL: all), in total and per error code. */
int kt_store_count_records(kt_store_t *s, const kt_store_filter_t *f, kt_store_counts_t *out);

/* ---- Estimated total latency log (written by the task scheduler) ------- */

typedef struct {
    int64_t trials;            /* measurements done so far in the job */
    double elapsed;            /* seconds since the job started */
    double latency;            /* estimated total latency, seconds */
} kt_store_latency_t;

/* Append one point for an existing job (KT_EINVAL when the job is absent). */
int kt_store_log_latency(kt_store_t *s, int64_t job_id, int64_t trials, double elapsed,
                         double latency);

/* A job's points in the order they were logged, as a malloc'd array (caller
 * frees; NULL when *n is 0). */
int kt_store_read_latency(kt_store_t *s, int64_t job_id, kt_store_latency_t **out, size_t *n);

/* ---- Cost models per device key (cost_models.c) ----------------------- */

/*
 * The store keeps one cost model per (target, device key), trained on the
 * records of that key across workloads (common/search: kt_search_store_model
 * trains, versions and reads it). The store only keeps the row: it does not
 * read the model bytes or the feature version.
 */
typedef struct {
    const char *target;        /* "cpu", "cuda" */
    const char *device_key;    /* the runner key its records were timed on */
    int64_t version;           /* set by put: 1 for a key's first model, +1 per put */
    int feature_version;       /* the feature layout it was trained on (KT_FEATURE_VERSION) */
    int format_version;        /* the bytes' format (KT_MODEL_FILE_VERSION) */
    int64_t records;           /* records it was trained on */
    int64_t max_record_id;     /* the highest record id it saw: newer ones are new to it */
    double created;            /* seconds since the epoch */
    const void *model;         /* the model's bytes (NULL in kt_store_stats' list) */
    size_t model_len;          /* their length (in kt_store_stats' list too) */
} kt_store_cost_model_t;

/* Store m as the model of (m->target, m->device_key), replacing the one
 * before it, in one transaction; sets m->version. Strings and bytes are the
 * caller's, non-empty (KT_EINVAL otherwise). */
int kt_store_put_cost_model(kt_store_t *s, kt_store_cost_model_t *m);

/* The model of (target, device key) into *out (free with
 * kt_store_cost_model_free; it owns its strings and bytes). KT_ENOTFOUND
 * when there is none (also on a file from before the table). */
int kt_store_get_cost_model(kt_store_t *s, const char *target, const char *device_key,
                            kt_store_cost_model_t **out);
void kt_store_cost_model_free(kt_store_cost_model_t *m);   /* accepts NULL */

/* ---- Maintenance of a long-lived store (maintain.c) -------------------- */

/* What kt_store_distill() did (or, dry, would do). */
typedef struct {
    int64_t records_before;     /* records in the store */
    int64_t records_after;      /* records kept */
    int64_t workloads;          /* (workload, target) pairs holding records */
    int64_t states_remembered;  /* hashes of dropped records newly kept in distilled */
} kt_store_distill_t;

/* Keep the `keep` (> 0) valid records of lowest mean cost per (workload,
 * target) and delete every other record, failed ones too (TVM's
 * measure_record --mode distill). The states of the deleted records stay
 * known to kt_store_has_measured(), so no state is measured twice. Refused
 * with KT_ESTATE while a job is queued or running (their progress is
 * counted from the records): cancel or finish them first. Jobs, workloads
 * and latency logs stay. One transaction; with dry_run nothing changes and
 * *out says what would. */
int kt_store_distill(kt_store_t *s, int keep, int dry_run, kt_store_distill_t *out);

/* The state hashes of (workload, target) that kt_store_distill() kept
 * without their records, in *n (0 on a file from before schema 4). A caller
 * that skips kt_store_has_measured() while it knows every record of a
 * workload must also know there are none of these. */
int kt_store_count_distilled(kt_store_t *s, const char *workload_key, const char *target,
                             int64_t *n);

/* Checkpoint the WAL into the database and rebuild the file without its free
 * pages (VACUUM), so a distilled store shrinks on disk. The file's bytes
 * (database and WAL) before and after in *before and *after (either may be
 * NULL). Needs a read-write handle outside a transaction; KT_ETIMEOUT when
 * another connection holds a write lock past the busy timeout. */
int kt_store_vacuum(kt_store_t *s, int64_t *before, int64_t *after);

/* Records per device key (the runner key they were timed on; "" for
 * records that came without one). */
typedef struct {
    char *key;
    int64_t records;
} kt_store_key_count_t;

/* The store's size and contents at a glance (the status page, ktune records
 * stats). Owned arrays: kt_store_stats_clear(). */
typedef struct {
    int64_t bytes;              /* database pages in use plus the WAL file */
    int64_t records;            /* all records */
    int64_t valid;              /* records with error code 0 */
    int64_t workloads;          /* workloads stored */
    int64_t distilled;          /* state hashes kept for dropped records */
    int schema_version;
    kt_store_key_count_t *keys; /* by records descending, then key */
    size_t nkeys;
    kt_store_cost_model_t *models; /* the cost models by target and key (no bytes) */
    size_t nmodels;
} kt_store_stats_t;

/* Fill *out (a full scan of the records: seconds at tens of millions, so
 * callers on a hot path cache it). */
int kt_store_stats(kt_store_t *s, kt_store_stats_t *out);
/* Free the arrays of *st and zero it; accepts NULL. */
void kt_store_stats_clear(kt_store_stats_t *st);
/* *st as the JSON object `ktune records stats --json` prints and the status
 * page's "store" holds: path, bytes, records, valid, workloads, distilled,
 * schema_version, keys [{key, records}] and cost_models [{target, key,
 * version, records, max_record_id, feature_version, format_version, bytes,
 * created}]. New reference, NULL when out of memory. */
json_t *kt_store_stats_json(const kt_store_stats_t *st, const char *path);

/* ---- JSON lines export and import ------------------------------------- */

/*
 * Record JSON lines: one JSON object per line, one record per object, keys
 * in this order (common/store/RECORDS.md says the same for users):
 *
 *   workload_key  string   the workload key; import refuses a malformed one
 *                 (kt_workload_key_parse) and stores it as ktune writes keys
 *   target        string   "cpu" or "cuda" (import refuses another)
 *   state         object, array or string: the state text embedded as JSON
 *                 when that text is exactly the compact jansson encoding of
 *                 itself, otherwise a string holding the text verbatim, so
 *                 import restores the text byte for byte either way
 *   state_hash    string   16 lower-case hex digits (uint64); import also
 *                 accepts upper case
 *   costs         array of numbers, seconds per repeat
 *   mean_cost     number, or null without costs: informational, import
 *                 recomputes it from costs (the same value, bit for bit)
 *   error_code    integer  0..8, MeasureError / KT_MEASURE_*
 *   error_msg     string   (optional on import, default "")
 *   all_cost      number   seconds spent building and running
 *   timestamp     number   seconds since the epoch
 *   runner_key    string   (optional on import, default "")
 *   job_id        integer or null (optional on import, default null): the
 *                 job in the database that measured it, not checked on import
 *   runner_id     string   (optional on import, default ""): the peer id of
 *                 the runner that timed it
 *   runner_host   string   (optional on import, default ""): that runner's host
 *   origin        string   written only when known: kt_store_origin_name()
 *                 (optional on import, default unknown; another name makes
 *                 the line bad)
 *
 * Doubles are written with 17 significant digits, which read back to the
 * same double. Record ids are local to a database and are not exported.
 * Unknown keys are ignored on import; duplicate keys make a line bad.
 */

/* The JSON object above for one record, without newline (malloc'd, caller
 * frees); NULL + kt_err on failure. */
char *kt_store_record_to_json(const kt_record_t *r);

/* Write the records selected by `f` (NULL: all), id ascending, one line
 * each; *n (may be NULL) receives how many were written. */
int kt_store_export_jsonl(kt_store_t *s, const kt_store_filter_t *f, FILE *out, int64_t *n);

/* How many bad lines an import report lists with their reasons. */
#define KT_STORE_IMPORT_MAX_BAD 20
/* Lines imported per transaction. */
#define KT_STORE_IMPORT_BATCH 1000

typedef struct {
    long line;                 /* 1-based line number in the input */
    char reason[200];
} kt_store_bad_line_t;

typedef struct {
    int64_t imported;          /* records stored */
    int64_t duplicates;        /* lines skipped: the record was already present */
    int64_t bad;               /* lines skipped: malformed (not JSON, bad field, truncated) */
    int nlisted;               /* entries of bad_lines in use */
    kt_store_bad_line_t bad_lines[KT_STORE_IMPORT_MAX_BAD];  /* the first bad lines */
} kt_store_import_report_t;

/* Read record lines from `in` and store the good ones, KT_STORE_IMPORT_BATCH
 * lines per transaction. Blank lines are ignored. A record already present
 * (same workload key, target, state hash and timestamp) is skipped, so
 * importing a file twice stores it once. Bad lines are counted and listed in
 * *rep and do not fail the import: 0 means every good line was stored. On a
 * database or read error the batches committed so far stay, *rep counts
 * them, and the error is returned. */
int kt_store_import_jsonl(kt_store_t *s, FILE *in, kt_store_import_report_t *rep);

#endif
