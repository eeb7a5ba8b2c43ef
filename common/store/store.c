/* The record store on SQLite: open and migrate, jobs, records, latency log. */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <jansson.h>

#include "store/store_internal.h"
#include "util/err.h"
#include "util/util.h"

/* ---- Schema ------------------------------------------------------------ */

/*
 * Migrations, applied in order inside one transaction by a read-write open;
 * migration i brings the schema to version i+1. To change the schema, append
 * a migration and raise KT_STORE_SCHEMA_VERSION; never edit a shipped one.
 *
 * records.workload_key and records.job_id are deliberately not foreign keys:
 * records imported from another database carry keys and job numbers this
 * database may not have. state_hash holds the uint64 bit pattern as int64.
 * mean_cost is NULL when a record has no costs.
 */
static const char *const migrations[] = {
    /* 1: initial schema */
    "CREATE TABLE workloads ("
    "  key TEXT PRIMARY KEY,"
    "  canonical TEXT NOT NULL,"
    "  flops REAL NOT NULL DEFAULT 0);"
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  created REAL NOT NULL,"
    "  state TEXT NOT NULL,"
    "  target TEXT NOT NULL,"
    "  runner_key TEXT NOT NULL,"
    "  strategy TEXT NOT NULL,"
    "  policy TEXT NOT NULL,"
    "  options TEXT NOT NULL DEFAULT '{}',"
    "  priority INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_state ON jobs(state, id);"
    "CREATE TABLE job_tasks ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  task_index INTEGER NOT NULL,"
    "  workload_key TEXT NOT NULL REFERENCES workloads(key),"
    "  weight REAL NOT NULL,"
    "  target TEXT NOT NULL,"
    "  PRIMARY KEY (job_id, task_index));"
    "CREATE INDEX job_tasks_workload ON job_tasks(workload_key);"
    "CREATE TABLE records ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  workload_key TEXT NOT NULL,"
    "  target TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  state_hash INTEGER NOT NULL,"
    "  costs TEXT NOT NULL,"
    "  mean_cost REAL,"
    "  error_code INTEGER NOT NULL,"
    "  error_msg TEXT NOT NULL DEFAULT '',"
    "  all_cost REAL NOT NULL,"
    "  timestamp REAL NOT NULL,"
    "  runner_key TEXT NOT NULL DEFAULT '',"
    "  job_id INTEGER);"
    "CREATE INDEX records_best ON records(workload_key, target, error_code, mean_cost);"
    "CREATE INDEX records_measured ON records(workload_key, target, state_hash);"
    "CREATE INDEX records_job ON records(job_id);"
    "CREATE TABLE latency_log ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  trials INTEGER NOT NULL,"
    "  elapsed REAL NOT NULL,"
    "  latency REAL NOT NULL);"
    "CREATE INDEX latency_log_job ON latency_log(job_id, id);",
    /* 2: provenance and task names. A record names the runner that timed it
     * (peer id and host, beside its device key), so a slow or faulty machine
     * in a key's pool can be found from the store; a job's task keeps the
     * layers it stands for ("conv0 + bn0 + relu0") for the status page after
     * a restart. Older rows read '' for all three: nobody recorded them. */
    "ALTER TABLE records ADD COLUMN runner_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE records ADD COLUMN runner_host TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX records_runner_id ON records(runner_id);"
    "CREATE INDEX records_runner_host ON records(runner_host);"
    "ALTER TABLE job_tasks ADD COLUMN desc TEXT NOT NULL DEFAULT '';",
    /* 3: ListRecords by workload (with or without target and valid_only)
     * walks this index in id order, so a stream's first record comes at once;
     * through records_measured it waited for a sort of all the workload's
     * records (seconds at millions of records). Indexes only: a read-only
     * handle reads a version-2 file as it is (KT_STORE_READ_VERSION). */
    "CREATE INDEX records_list ON records(workload_key);",
    /* 4: a store that lives long is distilled (kt_store_distill): the
     * records it drops leave their state hashes here, so a state measured
     * once is still never measured again. Its size and records per device
     * key show on the status page (kt_store_stats). */
    "CREATE TABLE distilled ("
    "  workload_key TEXT NOT NULL,"
    "  target TEXT NOT NULL,"
    "  state_hash INTEGER NOT NULL,"
    "  PRIMARY KEY (workload_key, target, state_hash)) WITHOUT ROWID;"
    /* The status page counts records per device key: an index scan. */
    "CREATE INDEX records_key ON records(runner_key);",
    /* 5: what proposed a record's state (KT_STORE_ORIGIN_*, by name), so an
     * operator sees whether a best came from transfer, the model or chance.
     * No CHECK, so that a later origin needs no rebuild of the table (the
     * store checks names on put). Older rows read NULL: unknown. Code asks
     * the file for the column, not for this version. */
    "ALTER TABLE records ADD COLUMN origin TEXT;",
    /* 6: the cost model of each (target, device key), trained on all its
     * records across workloads (kt_store_put_cost_model): a new job's model
     * starts from it. One row per key, replaced by each retraining
     * (version counts them): an old model is of no use once a newer one
     * learned from the same records and more. Code finds the table by name,
     * not by this migration's number. */
    "CREATE TABLE cost_models ("
    "  target TEXT NOT NULL,"
    "  device_key TEXT NOT NULL,"
    "  version INTEGER NOT NULL,"
    "  feature_version INTEGER NOT NULL,"
    "  format_version INTEGER NOT NULL,"
    "  records INTEGER NOT NULL,"
    "  max_record_id INTEGER NOT NULL,"
    "  created REAL NOT NULL,"
    "  model BLOB NOT NULL,"
    "  PRIMARY KEY (target, device_key));",
};

_Static_assert(KT_ARRAY_LEN(migrations) == KT_STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- Cached statements ------------------------------------------------- */

/* Statements prepared once per handle, on first use. */
typedef enum {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
    ST_PUT_WORKLOAD, ST_GET_WORKLOAD,
    ST_PUT_JOB, ST_PUT_TASK, ST_SET_JOB_STATE, ST_GET_JOB, ST_GET_TASKS,
    ST_LIST_JOBS, ST_LIST_JOBS_STATE, ST_DELETE_JOB, ST_FIND_JOB_OPTION,
    ST_PUT_RECORD, ST_TOP_K, ST_TOP_K_KEY, ST_HAS_MEASURED, ST_HAS_DISTILLED, ST_IS_DUPLICATE,
    ST_LIST_WORKLOADS, ST_KEY_RECORDS, ST_KEY_NEWER,
    ST_LOG_LATENCY, ST_READ_LATENCY,
    ST_COUNT
} stmt_id_t;

#define RECORD_COLS_BASE                                                                   \
    "id, workload_key, target, state, state_hash, costs, mean_cost, error_code, error_msg, " \
    "all_cost, timestamp, runner_key, job_id, runner_id, runner_host"
/* The columns every record select reads; on a file read as it is without
 * the origin column, RECORD_COLS_NO_ORIGIN instead (see record_sql). */
#define RECORD_COLS RECORD_COLS_BASE ", origin"
#define RECORD_COLS_NO_ORIGIN RECORD_COLS_BASE ", NULL"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_WORKLOAD] = "INSERT INTO workloads(key, canonical, flops) VALUES (?1, ?2, ?3) "
                        "ON CONFLICT(key) DO UPDATE SET flops = excluded.flops "
                        "WHERE canonical = excluded.canonical",
    [ST_GET_WORKLOAD] = "SELECT canonical, flops FROM workloads WHERE key = ?1",
    [ST_PUT_JOB] = "INSERT INTO jobs(created, state, target, runner_key, strategy, policy, "
                   "options, priority) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_PUT_TASK] = "INSERT INTO job_tasks(job_id, task_index, workload_key, weight, target, "
                    "desc) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_SET_JOB_STATE] = "UPDATE jobs SET state = ?2 WHERE id = ?1",
    [ST_GET_JOB] = "SELECT id, created, state, target, runner_key, strategy, policy, options, "
                   "priority FROM jobs WHERE id = ?1",
    [ST_GET_TASKS] = "SELECT task_index, workload_key, weight, target, desc FROM job_tasks "
                     "WHERE job_id = ?1 ORDER BY task_index",
    [ST_LIST_JOBS] = "SELECT id FROM jobs ORDER BY id",
    [ST_LIST_JOBS_STATE] = "SELECT id FROM jobs WHERE state = ?1 ORDER BY id",
    [ST_DELETE_JOB] = "DELETE FROM jobs WHERE id = ?1",
    /* A scan of the jobs table (far smaller than the records), with no
     * index to keep; options that are not JSON match nothing rather than
     * failing the query. */
    [ST_FIND_JOB_OPTION] = "SELECT id FROM jobs WHERE CASE WHEN json_valid(options) THEN "
                           "json_extract(options, '$.' || ?1) END = ?2 ORDER BY id LIMIT 1",
    [ST_PUT_RECORD] = "INSERT INTO records(workload_key, target, state, state_hash, costs, "
                      "mean_cost, error_code, error_msg, all_cost, timestamp, runner_key, "
                      "job_id, runner_id, runner_host, origin) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [ST_TOP_K] = "SELECT " RECORD_COLS " FROM records WHERE workload_key = ?1 AND target = ?2 "
                 "AND error_code = 0 ORDER BY mean_cost, id LIMIT ?3",
    [ST_TOP_K_KEY] = "SELECT " RECORD_COLS " FROM records WHERE workload_key = ?1 "
                     "AND target = ?2 AND error_code = 0 AND runner_key = ?3 "
                     "ORDER BY mean_cost, id LIMIT ?4",
    /* Per workload an EXISTS on records_best (workload, target, error code),
     * not a scan of every record of the target: a store holds far fewer
     * workloads than records. ?2 NULL: any runner key. */
    [ST_LIST_WORKLOADS] = "SELECT key, canonical, flops FROM workloads w WHERE EXISTS "
                          "(SELECT 1 FROM records r WHERE r.workload_key = w.key "
                          "AND r.target = ?1 AND r.error_code = 0 "
                          "AND (?2 IS NULL OR r.runner_key = ?2)) ORDER BY key",
    /* Both walk records_key (runner_key, then id) from the newest end. */
    [ST_KEY_RECORDS] = "SELECT " RECORD_COLS " FROM records WHERE runner_key = ?2 "
                       "AND target = ?1 ORDER BY id DESC LIMIT ?3",
    [ST_KEY_NEWER] = "SELECT count(*), coalesce(max(id), 0) FROM records WHERE runner_key = ?2 "
                     "AND target = ?1 AND id > ?3",
    [ST_HAS_MEASURED] = "SELECT 1 FROM records WHERE workload_key = ?1 AND target = ?2 "
                        "AND state_hash = ?3 LIMIT 1",
    [ST_HAS_DISTILLED] = "SELECT 1 FROM distilled WHERE workload_key = ?1 AND target = ?2 "
                         "AND state_hash = ?3",
    [ST_IS_DUPLICATE] = "SELECT 1 FROM records WHERE workload_key = ?1 AND target = ?2 "
                        "AND state_hash = ?3 AND timestamp = ?4 LIMIT 1",
    [ST_LOG_LATENCY] = "INSERT INTO latency_log(job_id, trials, elapsed, latency) "
                       "VALUES (?1, ?2, ?3, ?4)",
    [ST_READ_LATENCY] = "SELECT trials, elapsed, latency FROM latency_log WHERE job_id = ?1 "
                        "ORDER BY id",
};

/* Filter bits select one of the variants of the record select and count. */
enum { F_WORKLOAD = 1, F_TARGET = 2, F_JOB = 4, F_VALID = 8, F_RUNNER = 16, F_VARIANTS = 32 };

struct kt_store {
    sqlite3 *db;
    char *path;
    int flags;
    int version;                          /* the file's schema version once open */
    int has_origin;                       /* the records table has its origin column */
    int in_callback;                      /* inside a foreach callback */
    sqlite3_stmt *st[ST_COUNT];
    sqlite3_stmt *select_st[F_VARIANTS];
    sqlite3_stmt *count_st[F_VARIANTS];
    double *costs_buf;                    /* costs of the row being decoded */
    int costs_cap;
};

static void explain_full(const char *path, int full);

/* Map SQLite's result to a KT_E* code with its message; returns the code. A
 * write that found no space is KT_EFULL naming the file system. */
static int db_err(kt_store_t *s, int rc, const char *what)
{
    int code;
    switch (rc & 0xff) {
    case SQLITE_NOMEM: code = KT_ENOMEM; break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
    case SQLITE_RANGE: code = KT_EINVAL; break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: code = KT_ETIMEOUT; break;
    case SQLITE_READONLY: code = KT_ESTATE; break;
    case SQLITE_FULL: code = KT_EFULL; break;
    default: code = KT_EIO; break;
    }
    const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    kt_err_set(code, "%s: %s", what, msg);
    if ((code == KT_EIO || code == KT_EFULL) && s && s->path && strcmp(s->path, ":memory:") != 0)
        explain_full(s->path, code == KT_EFULL);
    return kt_err_code();
}

sqlite3 *kt_store_db(kt_store_t *s)
{
    return s->db;
}

int kt_store_db_err(kt_store_t *s, int rc, const char *what)
{
    return db_err(s, rc, what);
}

int kt_store_file_version(const kt_store_t *s)
{
    return s->version;
}

int kt_store_usable(kt_store_t *s)
{
    if (!s)
        return kt_err_set(KT_EINVAL, "store: NULL handle");
    if (s->in_callback)
        return kt_err_set(KT_ESTATE,
                          "store: handle used from its own foreach callback; open another");
    return 0;
}

/* Prepare sql into *slot, a record select's RECORD_COLS read as
 * RECORD_COLS_NO_ORIGIN on a file without the origin column (a read-only
 * handle on an older file, which is read as it is). 0 or a KT_E* code. */
static int record_sql(kt_store_t *s, const char *sql, const char *what, sqlite3_stmt **slot)
{
    const char *at = s->has_origin ? NULL : strstr(sql, RECORD_COLS);
    char buf[1024];
    if (at) {
        int n = snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - sql), sql,
                         RECORD_COLS_NO_ORIGIN, at + strlen(RECORD_COLS));
        if (n < 0 || (size_t)n >= sizeof buf)
            return kt_err_set(KT_EINTERNAL, "%s: statement too long", what);
        sql = buf;
    }
    int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL);
    return rc == SQLITE_OK ? 0 : db_err(s, rc, what);
}

static sqlite3_stmt *stmt(kt_store_t *s, stmt_id_t id)
{
    if (!s->st[id] && record_sql(s, stmt_sql[id], "store: preparing a statement", &s->st[id]))
        return NULL;
    return s->st[id];
}

/* Return a statement to its cache, ready for the next use. */
static void done(sqlite3_stmt *st)
{
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
}

/* Run a statement that returns no rows; returns 0 or a KT_E* code. */
static int exec_done(kt_store_t *s, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    int ret = rc == SQLITE_DONE ? 0 : db_err(s, rc, what);
    done(st);
    return ret;
}

int kt_store_tx_begin(kt_store_t *s)
{
    sqlite3_stmt *st = stmt(s, ST_BEGIN);
    return st ? exec_done(s, st, "store: beginning a write transaction") : kt_err_code();
}

int kt_store_tx_commit(kt_store_t *s)
{
    sqlite3_stmt *st = stmt(s, ST_COMMIT);
    if (!st)
        return kt_err_code();
    int rc = exec_done(s, st, "store: committing");
    if (rc != 0)
        kt_store_tx_rollback(s);
    return rc;
}

void kt_store_tx_rollback(kt_store_t *s)
{
    /* A failed statement may already have rolled the transaction back. */
    if (sqlite3_get_autocommit(s->db))
        return;
    sqlite3_stmt *st = stmt(s, ST_ROLLBACK);
    if (st) {
        sqlite3_step(st);
        done(st);
    }
}

static int bind_text(sqlite3_stmt *st, int i, const char *v)
{
    return sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

/* ---- Open, migrate, close ---------------------------------------------- */

static int pragma_int(kt_store_t *s, const char *sql, int *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
    }
    int ret = rc == SQLITE_OK ? 0 : db_err(s, rc, sql);
    sqlite3_finalize(st);
    return ret;
}

/* Only whether the file exists: the header itself is checked by SQLite's
 * first read in configure(). Opening the file here with open()/close()
 * would be wrong: closing any descriptor of a file drops every POSIX lock
 * this process holds on it, including those of SQLite connections already
 * open on it, after which another process may delete the live WAL. */
/* A read-write handle needs the file and its directory (where SQLite makes
 * the -wal and -shm files) writable; SQLite itself would open the file
 * read-only and fail later with "unable to open database file". */
/* The directory of a database file: where SQLite makes its -wal and -shm. */
static void dir_of(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else
        snprintf(dir, size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

static int check_writable(const char *path)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    const char *what = access(path, W_OK) != 0 ? "the file" : access(dir, W_OK) != 0 ? dir : NULL;
    if (!what)
        return 0;
    return kt_err_set(KT_ESTATE,
                      "%s: the database is read-only (%s: %s): the tracker writes the file and "
                      "keeps its WAL beside it; make both writable, or read it with a read-only "
                      "handle",
                      path, what, strerror(errno));
}

/* The current error (an I/O error, or SQLite's "database or disk is full"
 * when `full`) as KT_EFULL naming the file system, when that is what it is:
 * SQLite names no file system, and says only "disk I/O error" when a full
 * one cannot grow the WAL index (-shm). An I/O error with a megabyte or more
 * free is left as it is. */
static void explain_full(const char *path, int full)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    struct statvfs v;
    int known = statvfs(dir, &v) == 0;
    unsigned long long left = known ? (unsigned long long)v.f_bavail * v.f_frsize : 0;
    if (!full && (!known || left >= 1024 * 1024))
        return;
    char why[512];
    snprintf(why, sizeof why, "%s", kt_err_msg());
    if (known)
        kt_err_set(KT_EFULL, "the file system is full (%llu bytes free in %s; %s): free space there",
                   left, dir, why);
    else
        kt_err_set(KT_EFULL, "the file system is full (in %s; %s): free space there", dir, why);
}

static int check_exists(const char *path, int flags)
{
    struct stat sb;
    if (stat(path, &sb) == 0)
        return (flags & KT_STORE_READONLY) ? 0 : check_writable(path);
    if (errno == ENOENT) {
        if ((flags & KT_STORE_CREATE) && !(flags & KT_STORE_READONLY))
            return 0;
        return kt_err_set(KT_ENOTFOUND, "%s: no such database", path);
    }
    return kt_err_set(KT_EIO, "%s: %s", path, strerror(errno));
}

static int migrate(kt_store_t *s)
{
    int rc = kt_store_tx_begin(s);
    if (rc != 0)
        return rc;
    /* Read the version inside the write transaction: two processes opening a
     * new file at once must not both apply migration 1. */
    int version = 0;
    rc = pragma_int(s, "PRAGMA user_version", &version);
    if (rc == 0 && version > KT_STORE_SCHEMA_VERSION)
        rc = kt_err_set(KT_EUNSUP, "schema version %d is newer than this ktune's (%d)", version,
                        KT_STORE_SCHEMA_VERSION);
    for (int v = version; rc == 0 && v < KT_STORE_SCHEMA_VERSION; v++) {
        char *errmsg = NULL;
        if (sqlite3_exec(s->db, migrations[v], NULL, NULL, &errmsg) != SQLITE_OK)
            rc = kt_err_set(KT_EIO, "migration to schema version %d: %s", v + 1,
                            errmsg ? errmsg : "failed");
        sqlite3_free(errmsg);
    }
    if (rc == 0 && version < KT_STORE_SCHEMA_VERSION) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KT_STORE_SCHEMA_VERSION);
        if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
            rc = db_err(s, sqlite3_errcode(s->db), "setting the schema version");
    }
    if (rc != 0) {
        kt_store_tx_rollback(s);
        return rc;
    }
    return kt_store_tx_commit(s);
}

static int configure(kt_store_t *s, int memory)
{
    int version = 0;
    /* The first read of the file: SQLite reports a non-database here. */
    int rc = pragma_int(s, "PRAGMA user_version", &version);
    if (rc != 0) {
        /* Nothing has been written yet, so a stray file is left as it was. */
        if (sqlite3_errcode(s->db) == SQLITE_NOTADB)
            return kt_err_set(KT_EINVAL, "not a SQLite database (left unchanged)");
        return rc;
    }
    if (version > KT_STORE_SCHEMA_VERSION)
        return kt_err_set(KT_EUNSUP,
                          "schema version %d is newer than this ktune's (%d); use a newer ktune",
                          version, KT_STORE_SCHEMA_VERSION);
    if (!(s->flags & KT_STORE_READONLY)) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *mode = col_text(st, 0);
            rc = SQLITE_OK;
            if (strcmp(mode, memory ? "memory" : "wal") != 0) {
                kt_err_set(KT_EIO, "cannot use WAL journal (journal_mode is %s)", mode);
                sqlite3_finalize(st);
                return KT_EIO;
            }
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_OK)
            return db_err(s, rc, "setting WAL journal mode");
        /*
         * Durability. In WAL mode a commit is complete once its frames are
         * written to the -wal file; synchronous=NORMAL skips the fsync of the
         * WAL at commit (it syncs only at checkpoints). That already survives
         * a crash or SIGKILL of the process, which is the requirement: the
         * kernel holds the written pages. What NORMAL can lose is the last
         * commits on a power loss or kernel crash (never consistency). We use
         * FULL anyway: the store is the source of truth, a record costs
         * seconds of device time to produce, and commits are per batch of
         * records, so one fsync (milliseconds) per commit is negligible.
         */
        if (sqlite3_exec(s->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL) != SQLITE_OK)
            return db_err(s, sqlite3_errcode(s->db), "setting synchronous");
    }
    if (sqlite3_exec(s->db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL) != SQLITE_OK)
        return db_err(s, sqlite3_errcode(s->db), "enabling foreign keys");
    s->version = version;
    if (s->flags & KT_STORE_READONLY) {
        if (version < KT_STORE_READ_VERSION)
            return kt_err_set(KT_ESTATE,
                              "schema version %d needs migrating to %d: open it read-write once",
                              version, KT_STORE_SCHEMA_VERSION);
    } else {
        if ((rc = migrate(s)) != 0)
            return rc;
        s->version = KT_STORE_SCHEMA_VERSION;
    }
    /* Asked of the file, not derived from its version: which migration
     * adds the column is the migrations' business. */
    sqlite3_stmt *st = NULL;
    s->has_origin = sqlite3_prepare_v2(s->db, "SELECT origin FROM records", -1, &st, NULL) ==
                    SQLITE_OK;
    sqlite3_finalize(st);
    return 0;
}

kt_store_t *kt_store_open(const char *path, int flags)
{
    if (!path || !*path) {
        kt_err_set(KT_EINVAL, "store: no database path");
        return NULL;
    }
    if (!sqlite3_threadsafe()) {
        kt_err_set(KT_EUNSUP, "store: SQLite was built without thread support");
        return NULL;
    }
    int memory = strcmp(path, ":memory:") == 0;
    if (!memory && check_exists(path, flags) != 0)
        return NULL;
    kt_store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = kt_strdup(path))) {
        free(s);
        kt_err_set(KT_ENOMEM, "store: out of memory");
        return NULL;
    }
    s->flags = flags;
    int oflags = SQLITE_OPEN_NOMUTEX;  /* one thread per handle at a time */
    if (flags & KT_STORE_READONLY)
        oflags |= SQLITE_OPEN_READONLY;
    else
        oflags |= SQLITE_OPEN_READWRITE | ((flags & KT_STORE_CREATE) ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &s->db, oflags, NULL);
    if (rc != SQLITE_OK) {
        db_err(s, rc, "opening the database");
    } else {
        sqlite3_extended_result_codes(s->db, 1);
        sqlite3_busy_timeout(s->db, KT_STORE_BUSY_TIMEOUT_MS);
        rc = configure(s, memory);
    }
    if (rc != 0) {
        if (kt_err_code() == KT_EIO && !memory && !(flags & KT_STORE_READONLY))
            explain_full(path, 0);
        kt_err_prefix("%s", path);
        kt_store_close(s);
        return NULL;
    }
    return s;
}

void kt_store_close(kt_store_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    for (int i = 0; i < F_VARIANTS; i++) {
        sqlite3_finalize(s->select_st[i]);
        sqlite3_finalize(s->count_st[i]);
    }
    /* Every statement is finalized, so close cannot be refused as busy. */
    sqlite3_close(s->db);
    free(s->costs_buf);
    free(s->path);
    free(s);
}

const char *kt_store_path(const kt_store_t *s)
{
    return s ? s->path : NULL;
}

int kt_store_schema_version(kt_store_t *s)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    int v = 0;
    rc = pragma_int(s, "PRAGMA user_version", &v);
    return rc != 0 ? rc : v;
}

int kt_store_integrity_check(kt_store_t *s)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    int ret;
    if (rc == SQLITE_ROW)
        ret = strcmp(col_text(st, 0), "ok") == 0
                  ? 0
                  : kt_err_set(KT_EIO, "%s: integrity check: %s", s->path, col_text(st, 0));
    else
        ret = db_err(s, rc, "integrity check");
    sqlite3_finalize(st);
    return ret;
}

/* ---- Workloads --------------------------------------------------------- */

int kt_store_put_workload(kt_store_t *s, const char *key, const char *canonical, double flops)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!key || !*key || !canonical || !isfinite(flops) || flops < 0)
        return kt_err_set(KT_EINVAL, "store: workload needs a key, canonical text and flops >= 0");
    sqlite3_stmt *st = stmt(s, ST_PUT_WORKLOAD);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, key);
    bind_text(st, 2, canonical);
    sqlite3_bind_double(st, 3, flops);
    rc = exec_done(s, st, "store: putting a workload");
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = kt_err_set(KT_EINVAL, "store: workload key %s is stored with different text", key);
    return rc;
}

int kt_store_get_workload(kt_store_t *s, const char *key, char **canonical, double *flops)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!key)
        return kt_err_set(KT_EINVAL, "store: NULL workload key");
    sqlite3_stmt *st = stmt(s, ST_GET_WORKLOAD);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, key);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        rc = 0;
        if (canonical && !(*canonical = kt_strdup(col_text(st, 0))))
            rc = KT_ENOMEM;
        if (flops)
            *flops = sqlite3_column_double(st, 1);
    } else if (rc == SQLITE_DONE) {
        rc = kt_err_set(KT_ENOTFOUND, "store: no workload %s", key);
    } else {
        rc = db_err(s, rc, "store: reading a workload");
    }
    done(st);
    return rc;
}

/* ---- Jobs -------------------------------------------------------------- */

static int put_job_rows(kt_store_t *s, kt_store_job_t *job, const kt_store_task_t *tasks,
                        int ntasks)
{
    sqlite3_stmt *st = stmt(s, ST_PUT_JOB);
    if (!st)
        return kt_err_code();
    sqlite3_bind_double(st, 1, job->created);
    bind_text(st, 2, job->state);
    bind_text(st, 3, job->target);
    bind_text(st, 4, job->runner_key);
    bind_text(st, 5, job->strategy);
    bind_text(st, 6, job->policy);
    bind_text(st, 7, job->options_json ? job->options_json : "{}");
    sqlite3_bind_int(st, 8, job->priority);
    int rc = exec_done(s, st, "store: inserting a job");
    if (rc != 0)
        return rc;
    int64_t id = sqlite3_last_insert_rowid(s->db);
    if (!(st = stmt(s, ST_PUT_TASK)))
        return kt_err_code();
    for (int i = 0; i < ntasks; i++) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int(st, 2, tasks[i].index);
        bind_text(st, 3, tasks[i].workload_key);
        sqlite3_bind_double(st, 4, tasks[i].weight);
        bind_text(st, 5, tasks[i].target);
        bind_text(st, 6, tasks[i].desc ? tasks[i].desc : "");
        if ((rc = exec_done(s, st, "store: inserting a job task")) != 0)
            return kt_err_prefix("task %d (workload %s)", tasks[i].index,
                                 tasks[i].workload_key);
    }
    job->id = id;
    return 0;
}

int kt_store_put_job(kt_store_t *s, kt_store_job_t *job, const kt_store_task_t *tasks, int ntasks)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!job || !job->state || !job->target || !job->runner_key || !job->strategy ||
        !job->policy || !isfinite(job->created) || ntasks < 0 || (ntasks > 0 && !tasks))
        return kt_err_set(KT_EINVAL, "store: job needs created, state, target, runner key, "
                                     "strategy and policy");
    for (int i = 0; i < ntasks; i++)
        if (!tasks[i].workload_key || !tasks[i].target || !isfinite(tasks[i].weight))
            return kt_err_set(KT_EINVAL, "store: task %d needs a workload key, target and weight",
                              i);
    if ((rc = kt_store_tx_begin(s)) != 0)
        return rc;
    if ((rc = put_job_rows(s, job, tasks, ntasks)) != 0) {
        kt_store_tx_rollback(s);
        return rc;
    }
    return kt_store_tx_commit(s);
}

int kt_store_set_job_state(kt_store_t *s, int64_t id, const char *state)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!state || !*state)
        return kt_err_set(KT_EINVAL, "store: empty job state");
    sqlite3_stmt *st = stmt(s, ST_SET_JOB_STATE);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, state);
    rc = exec_done(s, st, "store: updating a job");
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = kt_err_set(KT_ENOTFOUND, "store: no job %" PRId64, id);
    return rc;
}

void kt_store_job_info_free(kt_store_job_info_t *j)
{
    if (!j)
        return;
    free((char *)j->job.state);
    free((char *)j->job.target);
    free((char *)j->job.runner_key);
    free((char *)j->job.strategy);
    free((char *)j->job.policy);
    free((char *)j->job.options_json);
    for (int i = 0; i < j->ntasks; i++) {
        free((char *)j->tasks[i].workload_key);
        free((char *)j->tasks[i].target);
        free((char *)j->tasks[i].desc);
    }
    free(j->tasks);
    free(j);
}

static int read_tasks(kt_store_t *s, kt_store_job_info_t *j)
{
    sqlite3_stmt *st = stmt(s, ST_GET_TASKS);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, j->job.id);
    int rc, cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (j->ntasks == cap) {
            int ncap = cap ? 2 * cap : 8;
            kt_store_task_t *t = realloc(j->tasks, (size_t)ncap * sizeof *t);
            if (!t)
                break;
            j->tasks = t;
            cap = ncap;
        }
        kt_store_task_t *t = &j->tasks[j->ntasks++];
        t->index = sqlite3_column_int(st, 0);
        t->workload_key = strdup(col_text(st, 1));
        t->weight = sqlite3_column_double(st, 2);
        t->target = strdup(col_text(st, 3));
        t->desc = strdup(col_text(st, 4));
        if (!t->workload_key || !t->target || !t->desc)
            break;
    }
    int ret = rc == SQLITE_DONE ? 0
              : rc == SQLITE_ROW ? kt_err_set(KT_ENOMEM, "store: out of memory")
                                 : db_err(s, rc, "store: reading job tasks");
    done(st);
    return ret;
}

int kt_store_get_job(kt_store_t *s, int64_t id, kt_store_job_info_t **out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!out)
        return kt_err_set(KT_EINVAL, "store: NULL output");
    *out = NULL;
    sqlite3_stmt *st = stmt(s, ST_GET_JOB);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? kt_err_set(KT_ENOTFOUND, "store: no job %" PRId64, id)
                               : db_err(s, rc, "store: reading a job");
        done(st);
        return rc;
    }
    kt_store_job_info_t *j = calloc(1, sizeof *j);
    if (j) {
        j->job.id = sqlite3_column_int64(st, 0);
        j->job.created = sqlite3_column_double(st, 1);
        j->job.state = strdup(col_text(st, 2));
        j->job.target = strdup(col_text(st, 3));
        j->job.runner_key = strdup(col_text(st, 4));
        j->job.strategy = strdup(col_text(st, 5));
        j->job.policy = strdup(col_text(st, 6));
        j->job.options_json = strdup(col_text(st, 7));
        j->job.priority = sqlite3_column_int(st, 8);
    }
    done(st);
    if (!j || !j->job.state || !j->job.target || !j->job.runner_key || !j->job.strategy ||
        !j->job.policy || !j->job.options_json) {
        kt_store_job_info_free(j);
        return kt_err_set(KT_ENOMEM, "store: out of memory");
    }
    if ((rc = read_tasks(s, j)) != 0) {
        kt_store_job_info_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

int kt_store_list_jobs(kt_store_t *s, const char *state, int64_t **ids, size_t *n)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!ids || !n)
        return kt_err_set(KT_EINVAL, "store: NULL output");
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *st = stmt(s, state ? ST_LIST_JOBS_STATE : ST_LIST_JOBS);
    if (!st)
        return kt_err_code();
    if (state)
        bind_text(st, 1, state);
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            int64_t *p = realloc(*ids, ncap * sizeof *p);
            if (!p)
                break;
            *ids = p;
            cap = ncap;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    int ret = rc == SQLITE_DONE ? 0
              : rc == SQLITE_ROW ? kt_err_set(KT_ENOMEM, "store: out of memory")
                                 : db_err(s, rc, "store: listing jobs");
    done(st);
    if (ret != 0) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return ret;
}

int kt_store_find_job_option(kt_store_t *s, const char *key, const char *value, int64_t *id)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!key || !*key || strspn(key, "abcdefghijklmnopqrstuvwxyz_") != strlen(key) || !value ||
        !id)
        return kt_err_set(KT_EINVAL, "store: finding a job by option: bad key, value or output");
    sqlite3_stmt *st = stmt(s, ST_FIND_JOB_OPTION);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, key);
    bind_text(st, 2, value);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? kt_err_set(KT_ENOTFOUND, "store: no job with %s '%s'", key, value)
                               : db_err(s, rc, "store: finding a job by option");
    }
    done(st);
    return rc;
}

int kt_store_delete_job(kt_store_t *s, int64_t id)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st = stmt(s, ST_DELETE_JOB);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, id);
    rc = exec_done(s, st, "store: deleting a job");
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = kt_err_set(KT_ENOTFOUND, "store: no job %" PRId64, id);
    return rc;
}

/* ---- Records ----------------------------------------------------------- */

static const char *const origin_names[KT_STORE_NUM_ORIGINS] = {
    [KT_STORE_ORIGIN_UNKNOWN] = "unknown", [KT_STORE_ORIGIN_TRANSFER] = "transfer",
    [KT_STORE_ORIGIN_MODEL] = "model",     [KT_STORE_ORIGIN_RANDOM] = "random",
    [KT_STORE_ORIGIN_SIBLING] = "sibling",
};

const char *kt_store_origin_name(int origin)
{
    return origin >= 0 && origin < KT_STORE_NUM_ORIGINS ? origin_names[origin] : NULL;
}

int kt_store_origin_parse(const char *name)
{
    for (int i = 0; name && i < KT_STORE_NUM_ORIGINS; i++)
        if (strcmp(name, origin_names[i]) == 0)
            return i;
    return -1;
}

/* Well-formed UTF-8 as jansson accepts it (no overlong forms, surrogates or
 * code points above U+10FFFF); returns the length of the sequence at p, or 0. */
static size_t utf8_seq(const unsigned char *p)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned v;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && v < 0x10000) || v > 0x10FFFF ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return n;
}

int kt_store_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq(p);
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}

/* A copy of s with each byte that starts no valid sequence replaced by U+FFFD. */
static char *utf8_repair(const char *s)
{
    size_t len = strlen(s);
    char *out = malloc(3 * len + 1), *o = out;
    if (!out) {
        kt_err_set(KT_ENOMEM, "store: out of memory");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq(p);
        if (n) {
            memcpy(o, p, n);
            o += n;
            p += n;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            p++;
        }
    }
    *o = '\0';
    return out;
}

double kt_store_mean(const double *costs, int n)
{
    if (n <= 0)
        return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += costs[i];
    return sum / n;
}

int kt_store_record_check(const kt_record_t *r)
{
    if (!r->workload_key || !*r->workload_key)
        return kt_err_set(KT_EINVAL, "record: empty workload_key");
    if (!r->target || !*r->target)
        return kt_err_set(KT_EINVAL, "record: empty target");
    if (!r->state_json)
        return kt_err_set(KT_EINVAL, "record: no state");
    const char *texts[] = {r->workload_key, r->target, r->state_json,
                           r->runner_key ? r->runner_key : "", r->runner_id ? r->runner_id : "",
                           r->runner_host ? r->runner_host : ""};
    const char *names[] = {"workload_key", "target", "state", "runner_key", "runner_id",
                           "runner_host"};
    for (size_t i = 0; i < KT_ARRAY_LEN(texts); i++)
        if (!kt_store_utf8_valid(texts[i]))
            return kt_err_set(KT_EINVAL, "record: %s is not valid UTF-8", names[i]);
    if (r->ncosts < 0 || (r->ncosts > 0 && !r->costs))
        return kt_err_set(KT_EINVAL, "record: bad costs array");
    for (int i = 0; i < r->ncosts; i++)
        if (!isfinite(r->costs[i]) || r->costs[i] < 0)
            return kt_err_set(KT_EINVAL, "record: cost %d is not a finite number >= 0", i);
    if (r->error_code < 0 || r->error_code >= KT_MEASURE_NUM_ERRORS)
        return kt_err_set(KT_EINVAL, "record: error_code %d is not 0..%d", r->error_code,
                          KT_MEASURE_NUM_ERRORS - 1);
    if (r->error_code == KT_MEASURE_NO_ERROR && r->ncosts == 0)
        return kt_err_set(KT_EINVAL, "record: a valid record (error_code 0) needs costs");
    if (!isfinite(r->all_cost) || r->all_cost < 0)
        return kt_err_set(KT_EINVAL, "record: all_cost is not a finite number >= 0");
    if (!isfinite(r->timestamp))
        return kt_err_set(KT_EINVAL, "record: timestamp is not finite");
    if (r->job_id < 0)
        return kt_err_set(KT_EINVAL, "record: negative job_id");
    if (!kt_store_origin_name(r->origin))
        return kt_err_set(KT_EINVAL, "record: origin %d is not 0..%d", r->origin,
                          KT_STORE_NUM_ORIGINS - 1);
    return 0;
}

/* Costs as a JSON array text: 17 significant digits read back exactly. */
static char *costs_text(const double *costs, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(costs[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    char *t = a ? json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(a);
    if (!t)
        kt_err_set(KT_ENOMEM, "store: out of memory");
    return t;
}

int kt_store_insert_record(kt_store_t *s, kt_record_t *r)
{
    char *costs = costs_text(r->costs, r->ncosts);
    if (!costs)
        return KT_ENOMEM;
    char *msg = NULL;
    const char *error_msg = r->error_msg ? r->error_msg : "";
    if (!kt_store_utf8_valid(error_msg)) {
        if (!(msg = utf8_repair(error_msg))) {
            free(costs);
            return KT_ENOMEM;
        }
        error_msg = msg;
    }
    double mean = kt_store_mean(r->costs, r->ncosts);
    int rc = KT_EINTERNAL;
    sqlite3_stmt *st = stmt(s, ST_PUT_RECORD);
    if (st) {
        bind_text(st, 1, r->workload_key);
        bind_text(st, 2, r->target);
        bind_text(st, 3, r->state_json);
        sqlite3_bind_int64(st, 4, (int64_t)r->state_hash);
        bind_text(st, 5, costs);
        if (r->ncosts > 0)
            sqlite3_bind_double(st, 6, mean);
        else
            sqlite3_bind_null(st, 6);
        sqlite3_bind_int(st, 7, r->error_code);
        bind_text(st, 8, error_msg);
        sqlite3_bind_double(st, 9, r->all_cost);
        sqlite3_bind_double(st, 10, r->timestamp);
        bind_text(st, 11, r->runner_key ? r->runner_key : "");
        if (r->job_id > 0)
            sqlite3_bind_int64(st, 12, r->job_id);
        else
            sqlite3_bind_null(st, 12);
        bind_text(st, 13, r->runner_id ? r->runner_id : "");
        bind_text(st, 14, r->runner_host ? r->runner_host : "");
        if (r->origin != KT_STORE_ORIGIN_UNKNOWN)
            bind_text(st, 15, kt_store_origin_name(r->origin));
        else
            sqlite3_bind_null(st, 15);
        rc = exec_done(s, st, "store: inserting a record");
    } else {
        rc = kt_err_code();
    }
    if (rc == 0) {
        r->id = sqlite3_last_insert_rowid(s->db);
        r->mean_cost = mean;
    }
    free(msg);
    free(costs);
    return rc;
}

int kt_store_put_records(kt_store_t *s, kt_record_t *recs, size_t n)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (n == 0)
        return 0;
    if (!recs)
        return kt_err_set(KT_EINVAL, "store: NULL records");
    for (size_t i = 0; i < n; i++)
        if ((rc = kt_store_record_check(&recs[i])) != 0)
            return kt_err_prefix("store: record %zu of %zu", i, n);
    if ((rc = kt_store_tx_begin(s)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = kt_store_insert_record(s, &recs[i])) != 0) {
            kt_store_tx_rollback(s);
            for (size_t j = 0; j < i; j++)
                recs[j].id = 0;   /* none of them is stored */
            return rc;
        }
    if ((rc = kt_store_tx_commit(s)) != 0)
        for (size_t j = 0; j < n; j++)
            recs[j].id = 0;
    return rc;
}

/* Decode the current row of a RECORD_COLS select; pointers borrow from the
 * statement (until its next step) and from s->costs_buf. */
static int decode_row(kt_store_t *s, sqlite3_stmt *st, kt_record_t *r)
{
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(st, 0);
    r->workload_key = col_text(st, 1);
    r->target = col_text(st, 2);
    r->state_json = col_text(st, 3);
    r->state_hash = (uint64_t)sqlite3_column_int64(st, 4);
    const char *costs = col_text(st, 5);
    r->mean_cost = sqlite3_column_type(st, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 6);
    r->error_code = sqlite3_column_int(st, 7);
    r->error_msg = col_text(st, 8);
    r->all_cost = sqlite3_column_double(st, 9);
    r->timestamp = sqlite3_column_double(st, 10);
    r->runner_key = col_text(st, 11);
    r->job_id = sqlite3_column_int64(st, 12);   /* NULL reads as 0 */
    r->runner_id = col_text(st, 13);
    r->runner_host = col_text(st, 14);
    /* NULL (older rows, or the column absent) is unknown */
    int origin = kt_store_origin_parse((const char *)sqlite3_column_text(st, 15));
    r->origin = origin > 0 ? origin : KT_STORE_ORIGIN_UNKNOWN;

    json_error_t jerr;
    json_t *a = json_loads(costs, 0, &jerr);
    if (!json_is_array(a)) {
        json_decref(a);
        return kt_err_set(KT_EIO, "store: record %" PRId64 ": costs are not a JSON array", r->id);
    }
    size_t n = json_array_size(a);
    if (n > (size_t)s->costs_cap) {
        double *p = realloc(s->costs_buf, n * sizeof *p);
        if (!p) {
            json_decref(a);
            return kt_err_set(KT_ENOMEM, "store: out of memory");
        }
        s->costs_buf = p;
        s->costs_cap = (int)n;
    }
    for (size_t i = 0; i < n; i++)
        s->costs_buf[i] = json_number_value(json_array_get(a, i));
    json_decref(a);
    r->costs = s->costs_buf;
    r->ncosts = (int)n;
    return 0;
}

void kt_record_list_free(kt_record_list_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->blocks_[i]);
    free(l->blocks_);
    free(l->items);
    free(l);
}

/* Append a deep copy of r: its costs and strings share one allocation. */
static int list_push(kt_record_list_t *l, size_t *cap, const kt_record_t *r)
{
    if (l->n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 16;
        kt_record_t *items = realloc(l->items, ncap * sizeof *items);
        if (items)
            l->items = items;
        void **blocks = realloc(l->blocks_, ncap * sizeof *blocks);
        if (blocks)
            l->blocks_ = blocks;
        if (!items || !blocks)
            return kt_err_set(KT_ENOMEM, "store: out of memory");
        *cap = ncap;
    }
    const char *src[] = {r->workload_key, r->target,   r->state_json,
                         r->error_msg,    r->runner_key, r->runner_id ? r->runner_id : "",
                         r->runner_host ? r->runner_host : ""};
    size_t len[KT_ARRAY_LEN(src)], total = (size_t)r->ncosts * sizeof(double);
    for (size_t i = 0; i < KT_ARRAY_LEN(src); i++)
        total += (len[i] = strlen(src[i]) + 1);
    char *block = malloc(total ? total : 1);
    if (!block)
        return kt_err_set(KT_ENOMEM, "store: out of memory");
    kt_record_t *d = &l->items[l->n];
    *d = *r;
    if (r->ncosts > 0)
        memcpy(block, r->costs, (size_t)r->ncosts * sizeof(double));
    d->costs = (const double *)block;
    char *p = block + (size_t)r->ncosts * sizeof(double);
    const char **dst[] = {&d->workload_key, &d->target,    &d->state_json, &d->error_msg,
                          &d->runner_key,   &d->runner_id, &d->runner_host};
    for (size_t i = 0; i < KT_ARRAY_LEN(src); i++) {
        memcpy(p, src[i], len[i]);
        *dst[i] = p;
        p += len[i];
    }
    l->blocks_[l->n++] = block;
    return 0;
}

/* Step a RECORD_COLS select to the end, handing each row to fn. */
static int walk(kt_store_t *s, sqlite3_stmt *st, kt_record_fn_t fn, void *ctx)
{
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        kt_record_t r;
        if ((ret = decode_row(s, st, &r)) != 0)
            break;
        s->in_callback = 1;
        ret = fn(&r, ctx);
        s->in_callback = 0;
        if (ret != 0)
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        ret = db_err(s, rc, "store: reading records");
    done(st);
    return ret;
}

typedef struct {
    kt_record_list_t *list;
    size_t cap;
} collect_t;

static int collect(const kt_record_t *r, void *ctx)
{
    collect_t *c = ctx;
    return list_push(c->list, &c->cap, r);
}

/* Run st (bound) into a new list. */
static int collect_list(kt_store_t *s, sqlite3_stmt *st, kt_record_list_t **out)
{
    collect_t c = {calloc(1, sizeof(kt_record_list_t)), 0};
    if (!c.list) {
        done(st);
        return kt_err_set(KT_ENOMEM, "store: out of memory");
    }
    int rc = walk(s, st, collect, &c);
    if (rc != 0) {
        kt_record_list_free(c.list);
        return rc;
    }
    *out = c.list;
    return 0;
}

int kt_store_top_k(kt_store_t *s, const char *workload_key, const char *target, int k,
                   kt_record_list_t **out)
{
    return kt_store_top_k_key(s, workload_key, target, NULL, k, out);
}

int kt_store_top_k_key(kt_store_t *s, const char *workload_key, const char *target,
                      const char *runner_key, int k, kt_record_list_t **out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!workload_key || !target || k <= 0 || !out)
        return kt_err_set(KT_EINVAL, "store: top-k needs a workload key, a target and k > 0");
    *out = NULL;
    sqlite3_stmt *st = stmt(s, runner_key ? ST_TOP_K_KEY : ST_TOP_K);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, workload_key);
    bind_text(st, 2, target);
    if (runner_key)
        bind_text(st, 3, runner_key);
    sqlite3_bind_int(st, runner_key ? 4 : 3, k);
    return collect_list(s, st, out);
}

int kt_store_key_records(kt_store_t *s, const char *target, const char *runner_key, int limit,
                         kt_record_list_t **out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!target || !runner_key || limit <= 0 || !out)
        return kt_err_set(KT_EINVAL, "store: key records need a target, a key and a limit > 0");
    *out = NULL;
    sqlite3_stmt *st = stmt(s, ST_KEY_RECORDS);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, target);
    bind_text(st, 2, runner_key);
    sqlite3_bind_int(st, 3, limit);
    return collect_list(s, st, out);
}

int kt_store_count_key_records(kt_store_t *s, const char *target, const char *runner_key,
                               int64_t after_id, int64_t *n, int64_t *max_id)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!target || !runner_key || !n)
        return kt_err_set(KT_EINVAL, "store: counting key records needs a target and a key");
    sqlite3_stmt *st = stmt(s, ST_KEY_NEWER);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, target);
    bind_text(st, 2, runner_key);
    sqlite3_bind_int64(st, 3, after_id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *n = sqlite3_column_int64(st, 0);
        if (max_id)
            *max_id = sqlite3_column_int64(st, 1);
        rc = 0;
    } else {
        rc = db_err(s, rc, "store: counting key records");
    }
    done(st);
    return rc;
}

void kt_store_workloads_free(kt_store_workload_t *w, size_t n)
{
    for (size_t i = 0; w && i < n; i++) {
        free(w[i].key);
        free(w[i].canonical);
    }
    free(w);
}

int kt_store_list_workloads(kt_store_t *s, const char *target, const char *runner_key,
                            kt_store_workload_t **out, size_t *n)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!target || !out || !n)
        return kt_err_set(KT_EINVAL, "store: listing workloads needs a target");
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = stmt(s, ST_LIST_WORKLOADS);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, target);
    if (runner_key)
        bind_text(st, 2, runner_key);
    else
        sqlite3_bind_null(st, 2);
    kt_store_workload_t *v = NULL;
    size_t cap = 0, len = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            kt_store_workload_t *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                rc = kt_err_set(KT_ENOMEM, "store: out of memory");
                break;
            }
            v = nv;
            cap = ncap;
        }
        kt_store_workload_t *w = &v[len];
        w->key = kt_strdup(col_text(st, 0));
        w->canonical = kt_strdup(col_text(st, 1));
        w->flops = sqlite3_column_double(st, 2);
        len++;
        if (!w->key || !w->canonical) {
            rc = kt_err_set(KT_ENOMEM, "store: out of memory");
            break;
        }
    }
    if (rc == SQLITE_DONE)
        rc = 0;
    else if (rc > 0)
        rc = db_err(s, rc, "store: listing workloads");
    done(st);
    if (rc != 0) {
        kt_store_workloads_free(v, len);
        return rc;
    }
    *out = v;
    *n = len;
    return 0;
}

int kt_store_best(kt_store_t *s, const char *workload_key, const char *target,
                  kt_record_list_t **out)
{
    int rc = kt_store_top_k(s, workload_key, target, 1, out);
    if (rc == 0 && (*out)->n == 0) {
        kt_record_list_free(*out);
        *out = NULL;
        rc = kt_err_set(KT_ENOTFOUND, "store: no valid record for %s on %s", workload_key,
                        target);
    }
    return rc;
}

int kt_store_has_measured(kt_store_t *s, const char *workload_key, const char *target,
                          uint64_t state_hash)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!workload_key || !target)
        return kt_err_set(KT_EINVAL, "store: has-measured needs a workload key and a target");
    int ret = 0;
    /* A file read as it is below version 4 has no distilled table. */
    int ids = s->version >= 4 ? 2 : 1;
    for (int i = 0; i < ids && ret == 0; i++) {
        sqlite3_stmt *st = stmt(s, i == 0 ? ST_HAS_MEASURED : ST_HAS_DISTILLED);
        if (!st)
            return kt_err_code();
        bind_text(st, 1, workload_key);
        bind_text(st, 2, target);
        sqlite3_bind_int64(st, 3, (int64_t)state_hash);
        rc = sqlite3_step(st);
        ret = rc == SQLITE_ROW    ? 1
              : rc == SQLITE_DONE ? 0
                                  : db_err(s, rc, "store: looking up a state");
        done(st);
    }
    return ret;
}

int kt_store_is_duplicate(kt_store_t *s, const kt_record_t *r)
{
    sqlite3_stmt *st = stmt(s, ST_IS_DUPLICATE);
    if (!st)
        return kt_err_code();
    bind_text(st, 1, r->workload_key);
    bind_text(st, 2, r->target);
    sqlite3_bind_int64(st, 3, (int64_t)r->state_hash);
    sqlite3_bind_double(st, 4, r->timestamp);
    int rc = sqlite3_step(st);
    int ret = rc == SQLITE_ROW    ? 1
              : rc == SQLITE_DONE ? 0
                                  : db_err(s, rc, "store: looking up a record");
    done(st);
    return ret;
}

static int filter_mask(const kt_store_filter_t *f)
{
    if (!f)
        return 0;
    return (f->workload_key ? F_WORKLOAD : 0) | (f->target ? F_TARGET : 0) |
           (f->job_id ? F_JOB : 0) | (f->valid_only ? F_VALID : 0) |
           (f->runner && *f->runner ? F_RUNNER : 0);
}

/* The select or count statement for this filter's shape, prepared once per
 * shape so each can use the matching index, with the filter bound. */
static sqlite3_stmt *filtered(kt_store_t *s, const kt_store_filter_t *f, int count)
{
    int mask = filter_mask(f);
    sqlite3_stmt **slot = count ? &s->count_st[mask] : &s->select_st[mask];
    if (!*slot) {
        char sql[512];
        snprintf(sql, sizeof sql, "SELECT %s FROM records WHERE 1%s%s%s%s%s %s",
                 count ? "error_code, count(*)" : RECORD_COLS,
                 mask & F_WORKLOAD ? " AND workload_key = :wk" : "",
                 mask & F_TARGET ? " AND target = :target" : "",
                 mask & F_JOB ? " AND job_id = :job" : "",
                 mask & F_VALID ? " AND error_code = 0" : "",
                 /* One word for either: an operator knows a machine by its
                  * host name or by the peer id the logs print. */
                 mask & F_RUNNER ? " AND (runner_id = :runner OR runner_host = :runner)" : "",
                 count ? "GROUP BY error_code" : "ORDER BY id");
        if (record_sql(s, sql, "store: preparing a record query", slot))
            return NULL;
    }
    sqlite3_stmt *st = *slot;
    if (mask & F_WORKLOAD)
        bind_text(st, sqlite3_bind_parameter_index(st, ":wk"), f->workload_key);
    if (mask & F_TARGET)
        bind_text(st, sqlite3_bind_parameter_index(st, ":target"), f->target);
    if (mask & F_JOB)
        sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":job"), f->job_id);
    if (mask & F_RUNNER)
        bind_text(st, sqlite3_bind_parameter_index(st, ":runner"), f->runner);
    return st;
}

int kt_store_foreach_record(kt_store_t *s, const kt_store_filter_t *f, kt_record_fn_t fn,
                            void *ctx)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!fn)
        return kt_err_set(KT_EINVAL, "store: NULL callback");
    sqlite3_stmt *st = filtered(s, f, 0);
    return st ? walk(s, st, fn, ctx) : kt_err_code();
}

int kt_store_get_records(kt_store_t *s, const kt_store_filter_t *f, kt_record_list_t **out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!out)
        return kt_err_set(KT_EINVAL, "store: NULL output");
    *out = NULL;
    sqlite3_stmt *st = filtered(s, f, 0);
    return st ? collect_list(s, st, out) : kt_err_code();
}

int kt_store_count_records(kt_store_t *s, const kt_store_filter_t *f, kt_store_counts_t *out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!out)
        return kt_err_set(KT_EINVAL, "store: NULL output");
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = filtered(s, f, 1);
    if (!st)
        return kt_err_code();
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int code = sqlite3_column_int(st, 0);
        int64_t c = sqlite3_column_int64(st, 1);
        out->total += c;
        if (code >= 0 && code < KT_MEASURE_NUM_ERRORS)
            out->by_error[code] += c;
    }
    int ret = rc == SQLITE_DONE ? 0 : db_err(s, rc, "store: counting records");
    done(st);
    return ret;
}

/* ---- Latency log ------------------------------------------------------- */

int kt_store_log_latency(kt_store_t *s, int64_t job_id, int64_t trials, double elapsed,
                         double latency)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!isfinite(elapsed) || !isfinite(latency) || trials < 0)
        return kt_err_set(KT_EINVAL, "store: latency point needs trials >= 0 and finite numbers");
    sqlite3_stmt *st = stmt(s, ST_LOG_LATENCY);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, trials);
    sqlite3_bind_double(st, 3, elapsed);
    sqlite3_bind_double(st, 4, latency);
    rc = exec_done(s, st, "store: logging latency");
    if (rc != 0)
        kt_err_prefix("job %" PRId64, job_id);
    return rc;
}

int kt_store_read_latency(kt_store_t *s, int64_t job_id, kt_store_latency_t **out, size_t *n)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!out || !n)
        return kt_err_set(KT_EINVAL, "store: NULL output");
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = stmt(s, ST_READ_LATENCY);
    if (!st)
        return kt_err_code();
    sqlite3_bind_int64(st, 1, job_id);
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            kt_store_latency_t *p = realloc(*out, ncap * sizeof *p);
            if (!p)
                break;
            *out = p;
            cap = ncap;
        }
        kt_store_latency_t *p = &(*out)[(*n)++];
        p->trials = sqlite3_column_int64(st, 0);
        p->elapsed = sqlite3_column_double(st, 1);
        p->latency = sqlite3_column_double(st, 2);
    }
    int ret = rc == SQLITE_DONE ? 0
              : rc == SQLITE_ROW ? kt_err_set(KT_ENOMEM, "store: out of memory")
                                 : db_err(s, rc, "store: reading the latency log");
    done(st);
    if (ret != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return ret;
}
