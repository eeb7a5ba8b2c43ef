/* Check suite "store": the SQLite record store and its JSON lines format. */
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "measure/measure.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/util.h"

/* ---- Fixtures ---------------------------------------------------------
 * The test case's base directory is made and removed in the runner process
 * (unchecked fixture), so it goes even when a test fails in its fork; each
 * test gets a fresh directory below it. */

static char basedir[64];
static char tmpdir[96];
static char dbpath[128];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void base_setup(void)
{
    snprintf(basedir, sizeof basedir, "/tmp/kt_store_XXXXXX");
    if (!mkdtemp(basedir))
        abort();   /* no test can run without it */
}

static void base_teardown(void)
{
    rm_tree(basedir);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/t_XXXXXX", basedir);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(dbpath, sizeof dbpath, "%s/ktune.db", tmpdir);
}

static void teardown(void)
{
    rm_tree(tmpdir);
}

static char *tmp_file(const char *name)
{
    static char p[160];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static kt_store_t *open_new(void)
{
    kt_store_t *s = kt_store_open(dbpath, KT_STORE_CREATE);
    ck_assert_msg(s != NULL, "open: %s", kt_err_msg());
    return s;
}

/* ---- Record helpers ---------------------------------------------------- */

static const double one_cost[] = {1.0};

static kt_record_t rec(const char *wk, const char *target, uint64_t hash, const double *costs,
                       int ncosts, int error_code)
{
    kt_record_t r = {0};
    r.workload_key = wk;
    r.target = target;
    r.state_json = "{\"s\":1}";
    r.state_hash = hash;
    r.costs = costs;
    r.ncosts = ncosts;
    r.error_code = error_code;
    r.error_msg = error_code ? "failed" : "";
    r.all_cost = 0.5;
    r.timestamp = 1700000000.0 + (double)hash;
    r.runner_key = "cpu-test";
    r.runner_id = "r1";
    r.runner_host = "host-a";
    return r;
}

static int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Every field except the database-local id. */
static void assert_same_record(const kt_record_t *a, const kt_record_t *b)
{
    ck_assert_str_eq(a->workload_key, b->workload_key);
    ck_assert_str_eq(a->target, b->target);
    ck_assert_str_eq(a->state_json, b->state_json);
    ck_assert_uint_eq(a->state_hash, b->state_hash);
    ck_assert_int_eq(a->ncosts, b->ncosts);
    for (int i = 0; i < a->ncosts; i++)
        ck_assert_msg(same_double(a->costs[i], b->costs[i]), "cost %d differs", i);
    ck_assert_msg(same_double(a->mean_cost, b->mean_cost), "mean_cost differs");
    ck_assert_int_eq(a->error_code, b->error_code);
    ck_assert_str_eq(a->error_msg, b->error_msg);
    ck_assert_msg(same_double(a->all_cost, b->all_cost), "all_cost differs");
    ck_assert_msg(same_double(a->timestamp, b->timestamp), "timestamp differs");
    ck_assert_str_eq(a->runner_key, b->runner_key);
    ck_assert_int_eq(a->job_id, b->job_id);
    ck_assert_str_eq(a->runner_id ? a->runner_id : "", b->runner_id ? b->runner_id : "");
    ck_assert_str_eq(a->runner_host ? a->runner_host : "", b->runner_host ? b->runner_host : "");
    ck_assert_int_eq(a->origin, b->origin);
}

static int64_t count_all(kt_store_t *s, const char *wk)
{
    kt_store_filter_t f = {.workload_key = wk};
    kt_store_counts_t c;
    ck_assert_int_eq(kt_store_count_records(s, &f, &c), 0);
    return c.total;
}

/* ---- Open, schema, migrations ------------------------------------------ */

START_TEST(store_fresh_db_is_wal_at_current_schema_version)
{
    kt_store_t *s = open_new();
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    ck_assert_int_eq(KT_STORE_SCHEMA_VERSION, 6);
    ck_assert_int_eq(kt_store_integrity_check(s), 0);
    ck_assert_str_eq(kt_store_path(s), dbpath);
    kt_store_close(s);

    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);

    s = kt_store_open(":memory:", 0);   /* private database, no file */
    ck_assert_msg(s != NULL, "memory: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    kt_store_close(s);
}
END_TEST

/* A store written by schema 1 (the text below is that shipped migration,
 * kept here verbatim so the test does not follow later edits of store.c):
 * a read-write open migrates it in place, its job, tasks and records read
 * back as before with empty provenance, and new records carry theirs. */
static const char schema_1_sql[] =
    "CREATE TABLE workloads (key TEXT PRIMARY KEY, canonical TEXT NOT NULL,"
    "  flops REAL NOT NULL DEFAULT 0);"
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL,"
    "  state TEXT NOT NULL, target TEXT NOT NULL, runner_key TEXT NOT NULL,"
    "  strategy TEXT NOT NULL, policy TEXT NOT NULL, options TEXT NOT NULL DEFAULT '{}',"
    "  priority INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_state ON jobs(state, id);"
    "CREATE TABLE job_tasks (job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  task_index INTEGER NOT NULL, workload_key TEXT NOT NULL REFERENCES workloads(key),"
    "  weight REAL NOT NULL, target TEXT NOT NULL, PRIMARY KEY (job_id, task_index));"
    "CREATE INDEX job_tasks_workload ON job_tasks(workload_key);"
    "CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, workload_key TEXT NOT NULL,"
    "  target TEXT NOT NULL, state TEXT NOT NULL, state_hash INTEGER NOT NULL,"
    "  costs TEXT NOT NULL, mean_cost REAL, error_code INTEGER NOT NULL,"
    "  error_msg TEXT NOT NULL DEFAULT '', all_cost REAL NOT NULL, timestamp REAL NOT NULL,"
    "  runner_key TEXT NOT NULL DEFAULT '', job_id INTEGER);"
    "CREATE INDEX records_best ON records(workload_key, target, error_code, mean_cost);"
    "CREATE INDEX records_measured ON records(workload_key, target, state_hash);"
    "CREATE INDEX records_job ON records(job_id);"
    "CREATE TABLE latency_log (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  trials INTEGER NOT NULL, elapsed REAL NOT NULL, latency REAL NOT NULL);"
    "CREATE INDEX latency_log_job ON latency_log(job_id, id);"
    "INSERT INTO workloads VALUES ('wk', '{}', 10);"
    "INSERT INTO jobs VALUES (1, 1700000000, 'done', 'cpu', 'cpu', 'gradient', 'sketch.xgb',"
    "  '{}', 0);"
    "INSERT INTO job_tasks VALUES (1, 0, 'wk', 2, 'cpu');"
    "INSERT INTO records(workload_key, target, state, state_hash, costs, mean_cost,"
    "  error_code, error_msg, all_cost, timestamp, runner_key, job_id)"
    "  VALUES ('wk', 'cpu', '{}', 7, '[0.5]', 0.5, 0, '', 1, 1700000001, 'cpu', 1);"
    "PRAGMA user_version = 1;";

START_TEST(store_migrates_a_schema_1_store_keeping_its_data)
{
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, schema_1_sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    /* Read-only cannot migrate: it says so rather than misreading columns. */
    ck_assert_ptr_null(kt_store_open(dbpath, KT_STORE_READONLY));
    ck_assert_int_eq(kt_err_code(), KT_ESTATE);

    kt_store_t *s = kt_store_open(dbpath, 0);
    ck_assert_msg(s != NULL, "open: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 1);
    ck_assert_uint_eq(l->items[0].state_hash, 7);
    ck_assert(l->items[0].mean_cost == 0.5);
    ck_assert_int_eq(l->items[0].job_id, 1);
    ck_assert_str_eq(l->items[0].runner_key, "cpu");
    ck_assert_str_eq(l->items[0].runner_id, "");
    ck_assert_str_eq(l->items[0].runner_host, "");
    ck_assert_int_eq(l->items[0].origin, KT_STORE_ORIGIN_UNKNOWN);
    kt_record_list_free(l);
    kt_store_job_info_t *info = NULL;
    ck_assert_int_eq(kt_store_get_job(s, 1, &info), 0);
    ck_assert_str_eq(info->job.state, "done");
    ck_assert_int_eq(info->ntasks, 1);
    ck_assert_str_eq(info->tasks[0].workload_key, "wk");
    ck_assert_str_eq(info->tasks[0].desc, "");
    kt_store_job_info_free(info);

    kt_record_t r = rec("wk", "cpu", 8, one_cost, 1, 0);
    r.runner_id = "r9";
    r.runner_host = "node-9";
    r.origin = KT_STORE_ORIGIN_SIBLING;
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    kt_store_close(s);

    /* Migrated once: the next open finds it current, read-only included. */
    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_msg(s != NULL, "open: %s", kt_err_msg());
    kt_store_filter_t f = {.runner = "node-9"};
    ck_assert_int_eq(kt_store_get_records(s, &f, &l), 0);
    ck_assert_uint_eq(l->n, 1);
    ck_assert_str_eq(l->items[0].runner_id, "r9");
    ck_assert_int_eq(l->items[0].origin, KT_STORE_ORIGIN_SIBLING);
    kt_record_list_free(l);
    kt_store_close(s);
}
END_TEST

/* The query plan of a ListRecords walk by workload (and target, valid only),
 * in the shape store.c prepares it: true when SQLite sorts the rows itself. */
static int list_plan_sorts(sqlite3 *db, const char *where)
{
    char sql[256];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN SELECT * FROM records WHERE 1%s ORDER BY id",
             where);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int sorts = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        sorts |= strstr((const char *)sqlite3_column_text(st, 3), "TEMP B-TREE") != NULL;
    sqlite3_finalize(st);
    return sorts;
}

/* A schema-2 store (the current one without records_list) is read as it is
 * by a read-only handle, and a read-write open adds the index, after which
 * ListRecords by workload streams in id order without sorting first. */
START_TEST(store_migration_3_lists_a_workload_without_sorting)
{
    kt_store_t *s = open_new();
    kt_record_t r = rec("wk", "cpu", 7, one_cost, 1, 0);
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    kt_store_close(s);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "DROP INDEX records_list; DROP INDEX records_key; DROP TABLE distilled; DROP TABLE cost_models; "
                                      "ALTER TABLE records DROP COLUMN origin; "
                                      "PRAGMA user_version = 2;", NULL,
                                  NULL, NULL),
                     SQLITE_OK);
    ck_assert(list_plan_sorts(db, " AND workload_key = 'wk' AND target = 'cpu'"));
    sqlite3_close(db);

    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_msg(s != NULL, "read-only open of schema 2: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), 2);
    ck_assert_int_eq(kt_store_has_measured(s, "wk", "cpu", 7), 1);
    kt_store_close(s);

    s = kt_store_open(dbpath, 0);
    ck_assert_msg(s != NULL, "open: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    kt_store_close(s);
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    ck_assert(!list_plan_sorts(db, " AND workload_key = 'wk'"));
    ck_assert(!list_plan_sorts(db, " AND workload_key = 'wk' AND target = 'cpu'"));
    ck_assert(!list_plan_sorts(db, " AND workload_key = 'wk' AND target = 'cpu' AND error_code = 0"));
    sqlite3_close(db);
}
END_TEST

/* The origin names are the store's mapping (and RECORDS.md's): each reads
 * back as itself, anything else is -1, and a record with an origin out of
 * range is refused. */
START_TEST(store_origin_names_round_trip_and_bad_ones_are_refused)
{
    static const char *const names[] = {"unknown", "transfer", "model", "random", "sibling"};
    ck_assert_int_eq(KT_ARRAY_LEN(names), KT_STORE_NUM_ORIGINS);
    for (int i = 0; i < KT_STORE_NUM_ORIGINS; i++) {
        ck_assert_str_eq(kt_store_origin_name(i), names[i]);
        ck_assert_int_eq(kt_store_origin_parse(names[i]), i);
    }
    ck_assert_ptr_null(kt_store_origin_name(-1));
    ck_assert_ptr_null(kt_store_origin_name(KT_STORE_NUM_ORIGINS));
    ck_assert_int_eq(kt_store_origin_parse("Model"), -1);
    ck_assert_int_eq(kt_store_origin_parse(""), -1);
    ck_assert_int_eq(kt_store_origin_parse(NULL), -1);
    kt_store_t *s = open_new();
    kt_record_t r = rec("wk", "cpu", 1, one_cost, 1, 0);
    r.origin = KT_STORE_NUM_ORIGINS;
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "origin"));
    ck_assert_int_eq(count_all(s, NULL), 0);
    kt_store_close(s);
}
END_TEST

/* A store written before records kept their origin (a version-4 file: the
 * origin column absent) reads every record as unknown through a read-only
 * handle, best and export included; a read-write open adds the column,
 * the old records still read unknown and a new one keeps its origin. */
START_TEST(store_before_origins_reads_unknown_and_migrates)
{
    kt_store_t *s = open_new();
    kt_record_t rs[] = {rec("wk", "cpu", 1, one_cost, 1, 0), rec("wk", "cpu", 2, NULL, 0, 4)};
    ck_assert_int_eq(kt_store_put_records(s, rs, 2), 0);
    kt_store_close(s);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "ALTER TABLE records DROP COLUMN origin; "
                                      "DROP TABLE cost_models; PRAGMA user_version = 4;", NULL,
                                  NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_msg(s != NULL, "read-only open of schema 4: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), 4);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    for (size_t i = 0; i < l->n; i++)
        ck_assert_int_eq(l->items[i].origin, KT_STORE_ORIGIN_UNKNOWN);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_best(s, "wk", "cpu", &l), 0);
    ck_assert_uint_eq(l->items[0].state_hash, 1);
    ck_assert_int_eq(l->items[0].origin, KT_STORE_ORIGIN_UNKNOWN);
    char *line = kt_store_record_to_json(&l->items[0]);
    ck_assert_ptr_null(strstr(line, "origin"));
    free(line);
    kt_record_list_free(l);
    kt_store_close(s);

    /* Read-write: migrated from version 4 (the read-only open left it so)
     * to the current one. */
    s = kt_store_open(dbpath, 0);
    ck_assert_msg(s != NULL, "open: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    kt_record_t r = rec("wk", "cpu", 3, one_cost, 1, 0);
    r.origin = KT_STORE_ORIGIN_TRANSFER;
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 3);
    ck_assert_int_eq(l->items[0].origin, KT_STORE_ORIGIN_UNKNOWN);
    ck_assert_int_eq(l->items[1].origin, KT_STORE_ORIGIN_UNKNOWN);
    ck_assert_int_eq(l->items[2].origin, KT_STORE_ORIGIN_TRANSFER);
    kt_record_list_free(l);
    kt_store_close(s);
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT count(*), count(origin) FROM records WHERE "
                                            "origin IS NULL OR origin = 'transfer'",
                                        -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 3);   /* the old ones NULL, the new by name */
    ck_assert_int_eq(sqlite3_column_int(st, 1), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
END_TEST

START_TEST(store_filters_records_by_runner_id_or_host)
{
    kt_store_t *s = open_new();
    kt_record_t rs[] = {rec("a", "cpu", 1, one_cost, 1, 0), rec("a", "cpu", 2, NULL, 0, 4),
                        rec("a", "cpu", 3, one_cost, 1, 0), rec("b", "cpu", 4, one_cost, 1, 0)};
    rs[1].runner_id = rs[2].runner_id = "r2";
    rs[1].runner_host = rs[2].runner_host = "slow-box";
    rs[3].runner_id = "r3";
    rs[3].runner_host = "slow-box";   /* a second runner on the same machine */
    ck_assert_int_eq(kt_store_put_records(s, rs, KT_ARRAY_LEN(rs)), 0);

    kt_store_counts_t c;
    kt_store_filter_t by_id = {.runner = "r2"};
    ck_assert_int_eq(kt_store_count_records(s, &by_id, &c), 0);
    ck_assert_int_eq(c.total, 2);
    ck_assert_int_eq(c.by_error[4], 1);
    kt_store_filter_t by_host = {.runner = "slow-box"};
    ck_assert_int_eq(kt_store_count_records(s, &by_host, &c), 0);
    ck_assert_int_eq(c.total, 3);
    kt_store_filter_t by_host_wk = {.runner = "slow-box", .workload_key = "a"};
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, &by_host_wk, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    ck_assert_uint_eq(l->items[0].state_hash, 2);
    ck_assert_str_eq(l->items[1].runner_host, "slow-box");
    kt_record_list_free(l);
    kt_store_filter_t none = {.runner = "nobody"};
    ck_assert_int_eq(kt_store_count_records(s, &none, &c), 0);
    ck_assert_int_eq(c.total, 0);
    kt_store_close(s);
}
END_TEST

START_TEST(store_reopen_keeps_data)
{
    kt_store_t *s = open_new();
    kt_record_t r = rec("wk", "cpu", 7, one_cost, 1, 0);
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    ck_assert_int_eq(kt_store_put_workload(s, "wk", "{\"op\":\"matmul\"}", 1e6), 0);
    kt_store_close(s);

    s = kt_store_open(dbpath, 0);   /* existing file: no create flag needed */
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_schema_version(s), KT_STORE_SCHEMA_VERSION);
    ck_assert_int_eq(kt_store_has_measured(s, "wk", "cpu", 7), 1);
    double flops = 0;
    ck_assert_int_eq(kt_store_get_workload(s, "wk", NULL, &flops), 0);
    ck_assert(flops == 1e6);
    kt_store_close(s);
}
END_TEST

/* Opening a second handle must not drop the POSIX locks of the first: if it
 * did, another process closing its own handle would believe it was the last
 * user and delete the WAL holding the first handle's commits. */
START_TEST(store_second_handle_keeps_wal_of_first_across_processes)
{
    kt_store_t *a = open_new();
    kt_store_t *b = kt_store_open(dbpath, 0);
    ck_assert_ptr_nonnull(b);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kt_store_t *c = kt_store_open(dbpath, 0);
        kt_store_close(c);
        _exit(c ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kt_record_t r = rec("wk", "cpu", 11, one_cost, 1, 0);
    ck_assert_int_eq(kt_store_put_records(a, &r, 1), 0);
    /* A new connection in another process must see the committed record. */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kt_store_t *c = kt_store_open(dbpath, 0);
        int ok = c && kt_store_has_measured(c, "wk", "cpu", 11) == 1;
        kt_store_close(c);
        _exit(ok ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "another process does not see the committed record");
    kt_store_close(b);
    kt_store_close(a);
    kt_store_t *c = kt_store_open(dbpath, 0);
    ck_assert_int_eq(kt_store_has_measured(c, "wk", "cpu", 11), 1);
    kt_store_close(c);
}
END_TEST

START_TEST(store_missing_file_needs_create_flag)
{
    ck_assert_ptr_null(kt_store_open(dbpath, 0));
    ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
    ck_assert_ptr_null(kt_store_open(dbpath, KT_STORE_READONLY | KT_STORE_CREATE));
    ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
    ck_assert(!file_exists(dbpath));
}
END_TEST

START_TEST(store_refuses_future_schema_version)
{
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "CREATE TABLE t(x); PRAGMA user_version = 99", NULL, NULL,
                                  NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_ptr_null(kt_store_open(dbpath, KT_STORE_CREATE));
    ck_assert_int_eq(kt_err_code(), KT_EUNSUP);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "newer"));
    ck_assert_ptr_null(kt_store_open(dbpath, KT_STORE_READONLY));
    ck_assert_int_eq(kt_err_code(), KT_EUNSUP);
    /* Still at 99: nothing was migrated. */
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 99);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
END_TEST

START_TEST(store_refuses_non_sqlite_file_unchanged)
{
    static const char *const contents[] = {
        "this is a text file, not a database, and it is long enough to have a header\n",
        "short",
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(contents); i++) {
        ck_assert_int_eq(kt_file_write(dbpath, contents[i], strlen(contents[i])), 0);
        ck_assert_ptr_null(kt_store_open(dbpath, KT_STORE_CREATE));
        ck_assert_int_eq(kt_err_code(), KT_EINVAL);
        ck_assert_ptr_nonnull(strstr(kt_err_msg(), "not a SQLite database"));
        size_t len = 0;
        char *after = kt_file_read(dbpath, &len);
        ck_assert_ptr_nonnull(after);
        ck_assert_uint_eq(len, strlen(contents[i]));
        ck_assert_str_eq(after, contents[i]);
        free(after);
        ck_assert(!file_exists(tmp_file("ktune.db-wal")));
        ck_assert(!file_exists(tmp_file("ktune.db-shm")));
    }
}
END_TEST

/* ---- Workloads and jobs ------------------------------------------------ */

START_TEST(store_workload_put_get_and_key_collision)
{
    kt_store_t *s = open_new();
    ck_assert_int_eq(kt_store_put_workload(s, "k1", "{\"a\":1}", 100), 0);
    ck_assert_int_eq(kt_store_put_workload(s, "k1", "{\"a\":1}", 200), 0);   /* same text */
    char *text = NULL;
    double flops = 0;
    ck_assert_int_eq(kt_store_get_workload(s, "k1", &text, &flops), 0);
    ck_assert_str_eq(text, "{\"a\":1}");
    ck_assert(flops == 200);
    free(text);
    ck_assert_int_eq(kt_store_put_workload(s, "k1", "{\"a\":2}", 100), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "different text"));
    ck_assert_int_eq(kt_store_get_workload(s, "nope", NULL, NULL), KT_ENOTFOUND);
    kt_store_close(s);
}
END_TEST

START_TEST(store_job_crud_with_tasks)
{
    kt_store_t *s = open_new();
    ck_assert_int_eq(kt_store_put_workload(s, "wa", "{\"a\":1}", 1), 0);
    ck_assert_int_eq(kt_store_put_workload(s, "wb", "{\"b\":1}", 2), 0);
    kt_store_job_t job = {.created = 1700000000.25, .state = "queued", .target = "cuda",
                          .runner_key = "cuda-sm90", .strategy = "gradient",
                          .policy = "sketch.xgb", .options_json = "{\"trials\":64}",
                          .priority = 3};
    kt_store_task_t tasks[] = {{1, "wb", 2.0, "cuda", NULL}, {0, "wa", 1.5, "cuda", "conv0 + relu0"}};
    ck_assert_int_eq(kt_store_put_job(s, &job, tasks, 2), 0);
    ck_assert_int_gt(job.id, 0);

    kt_store_job_t job2 = job;
    job2.options_json = NULL;
    job2.state = "running";
    ck_assert_int_eq(kt_store_put_job(s, &job2, NULL, 0), 0);
    ck_assert_int_gt(job2.id, job.id);

    kt_store_job_info_t *info = NULL;
    ck_assert_int_eq(kt_store_get_job(s, job.id, &info), 0);
    ck_assert_int_eq(info->job.id, job.id);
    ck_assert(info->job.created == 1700000000.25);
    ck_assert_str_eq(info->job.state, "queued");
    ck_assert_str_eq(info->job.target, "cuda");
    ck_assert_str_eq(info->job.runner_key, "cuda-sm90");
    ck_assert_str_eq(info->job.strategy, "gradient");
    ck_assert_str_eq(info->job.policy, "sketch.xgb");
    ck_assert_str_eq(info->job.options_json, "{\"trials\":64}");
    ck_assert_int_eq(info->job.priority, 3);
    ck_assert_int_eq(info->ntasks, 2);
    ck_assert_int_eq(info->tasks[0].index, 0);   /* ordered by index */
    ck_assert_str_eq(info->tasks[0].workload_key, "wa");
    ck_assert(info->tasks[0].weight == 1.5);
    ck_assert_str_eq(info->tasks[1].workload_key, "wb");
    ck_assert_str_eq(info->tasks[1].target, "cuda");
    ck_assert_str_eq(info->tasks[0].desc, "conv0 + relu0");
    ck_assert_str_eq(info->tasks[1].desc, "");   /* NULL stores "" */
    kt_store_job_info_free(info);

    ck_assert_int_eq(kt_store_get_job(s, job2.id, &info), 0);
    ck_assert_str_eq(info->job.options_json, "{}");
    ck_assert_int_eq(info->ntasks, 0);
    kt_store_job_info_free(info);

    ck_assert_int_eq(kt_store_set_job_state(s, job.id, "running"), 0);
    int64_t *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(kt_store_list_jobs(s, "running", &ids, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[0], job.id);
    ck_assert_int_eq(ids[1], job2.id);
    free(ids);
    ck_assert_int_eq(kt_store_list_jobs(s, "queued", &ids, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(ids);
    ck_assert_int_eq(kt_store_set_job_state(s, 9999, "done"), KT_ENOTFOUND);

    /* A task naming an unknown workload fails the whole job. */
    kt_store_task_t bad[] = {{0, "wa", 1, "cuda", NULL}, {1, "unknown", 1, "cuda", NULL}};
    kt_store_job_t job3 = job;
    ck_assert_int_eq(kt_store_put_job(s, &job3, bad, 2), KT_EINVAL);
    ck_assert_int_eq(kt_store_list_jobs(s, NULL, &ids, &n), 0);
    ck_assert_uint_eq(n, 2);
    free(ids);

    ck_assert_int_eq(kt_store_log_latency(s, job.id, 10, 1.0, 0.5), 0);
    ck_assert_int_eq(kt_store_delete_job(s, job.id), 0);
    ck_assert_int_eq(kt_store_get_job(s, job.id, &info), KT_ENOTFOUND);
    ck_assert_ptr_null(info);
    ck_assert_int_eq(kt_store_delete_job(s, job.id), KT_ENOTFOUND);
    kt_store_latency_t *pts = NULL;
    ck_assert_int_eq(kt_store_read_latency(s, job.id, &pts, &n), 0);
    ck_assert_uint_eq(n, 0);   /* cascaded */
    kt_store_close(s);
}
END_TEST

START_TEST(store_latency_log_appends_in_order)
{
    kt_store_t *s = open_new();
    kt_store_job_t job = {.created = 1, .state = "running", .target = "cpu", .runner_key = "cpu",
                          .strategy = "round-robin", .policy = "sketch.random"};
    ck_assert_int_eq(kt_store_put_job(s, &job, NULL, 0), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(kt_store_log_latency(s, job.id, 64 * (i + 1), 2.5 * i, 1.0 / (i + 1)), 0);
    ck_assert_int_eq(kt_store_log_latency(s, job.id + 100, 1, 1, 1), KT_EINVAL);
    kt_store_latency_t *pts = NULL;
    size_t n = 0;
    ck_assert_int_eq(kt_store_read_latency(s, job.id, &pts, &n), 0);
    ck_assert_uint_eq(n, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(pts[i].trials, 64 * (i + 1));
        ck_assert(pts[i].elapsed == 2.5 * i);
        ck_assert(pts[i].latency == 1.0 / (i + 1));
    }
    free(pts);
    kt_store_close(s);
}
END_TEST

/* ---- Records ----------------------------------------------------------- */

START_TEST(store_put_records_assigns_ids_and_reads_back_every_field)
{
    kt_store_t *s = open_new();
    double c1[] = {0.1, 0.2, 0.4};
    kt_record_t rs[3] = {rec("w", "cpu", UINT64_MAX, c1, 3, 0), rec("w", "cpu", 2, NULL, 0, 6),
                         rec("w", "cuda", 3, c1, 1, 0)};
    rs[0].job_id = 42;   /* not checked against jobs: records may come from elsewhere */
    rs[1].error_msg = NULL;
    rs[1].runner_key = NULL;
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), 0);
    ck_assert_int_gt(rs[0].id, 0);
    ck_assert_int_gt(rs[1].id, rs[0].id);
    ck_assert_int_gt(rs[2].id, rs[1].id);
    ck_assert(rs[0].mean_cost == (0.1 + 0.2 + 0.4) / 3);
    ck_assert(isnan(rs[1].mean_cost));

    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 3);
    rs[1].error_msg = "";
    rs[1].runner_key = "";
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(l->items[i].id, rs[i].id);
        assert_same_record(&l->items[i], &rs[i]);
    }
    kt_record_list_free(l);
    kt_store_close(s);
}
END_TEST

START_TEST(store_put_records_rejects_invalid_batch_whole)
{
    kt_store_t *s = open_new();
    double neg[] = {-1.0};
    kt_record_t rs[3] = {rec("w", "cpu", 1, one_cost, 1, 0), rec("w", "cpu", 2, one_cost, 1, 0),
                         rec("w", "cpu", 3, neg, 1, 0)};
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "record 2"));
    rs[2] = rec("w", "cpu", 3, NULL, 0, 0);   /* valid record without costs */
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), KT_EINVAL);
    rs[2] = rec("w", "cpu", 3, one_cost, 1, KT_MEASURE_NUM_ERRORS);
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), KT_EINVAL);
    rs[2] = rec("w", "", 3, one_cost, 1, 0);
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), KT_EINVAL);
    rs[2] = rec("w", "cpu", 3, one_cost, 1, 0);
    rs[2].state_json = "\xff\xfe";
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), KT_EINVAL);
    ck_assert_int_eq(count_all(s, NULL), 0);
    ck_assert_int_eq(rs[0].id, 0);
    kt_store_close(s);
}
END_TEST

START_TEST(store_error_msg_with_invalid_utf8_is_repaired)
{
    kt_store_t *s = open_new();
    kt_record_t r = rec("w", "cpu", 1, NULL, 0, KT_MEASURE_COMPILE_HOST);
    r.error_msg = "bad byte \xff here, ok \xc3\xa9";
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    ck_assert_uint_eq(l->n, 1);
    ck_assert_str_eq(l->items[0].error_msg, "bad byte \xef\xbf\xbd here, ok \xc3\xa9");
    char *line = kt_store_record_to_json(&l->items[0]);
    ck_assert_ptr_nonnull(line);
    free(line);
    kt_record_list_free(l);
    kt_store_close(s);
}
END_TEST

START_TEST(store_best_and_top_k_ignore_failed_records)
{
    kt_store_t *s = open_new();
    double c[][2] = {{3, 3}, {1, 1}, {0.5, 0.5}, {2, 2}, {0.1, 0.1}, {1, 1}};
    kt_record_t rs[] = {
        rec("w", "cpu", 1, c[0], 2, 0),
        rec("w", "cpu", 2, c[1], 2, 0),
        rec("w", "cpu", 3, c[2], 2, KT_MEASURE_WRONG_ANSWER),   /* faster but wrong */
        rec("w", "cpu", 4, c[3], 2, 0),
        rec("w", "cuda", 5, c[4], 2, 0),                         /* other target */
        rec("w", "cpu", 6, c[5], 2, 0),                          /* ties with hash 2 */
        rec("v", "cpu", 7, c[4], 2, 0),                          /* other workload */
        rec("w", "cpu", 8, NULL, 0, KT_MEASURE_RUN_TIMEOUT),
    };
    ck_assert_int_eq(kt_store_put_records(s, rs, KT_ARRAY_LEN(rs)), 0);

    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_best(s, "w", "cpu", &l), 0);
    ck_assert_uint_eq(l->n, 1);
    ck_assert_uint_eq(l->items[0].state_hash, 2);   /* earliest of the tied best */
    ck_assert(l->items[0].mean_cost == 1.0);
    kt_record_list_free(l);

    ck_assert_int_eq(kt_store_top_k(s, "w", "cpu", 10, &l), 0);
    uint64_t want[] = {2, 6, 4, 1};
    ck_assert_uint_eq(l->n, 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(l->items[i].state_hash, want[i]);
        ck_assert_int_eq(l->items[i].error_code, 0);
    }
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_top_k(s, "w", "cpu", 2, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    ck_assert_uint_eq(l->items[1].state_hash, 6);
    kt_record_list_free(l);

    ck_assert_int_eq(kt_store_best(s, "w", "cuda", &l), 0);
    ck_assert_uint_eq(l->items[0].state_hash, 5);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_best(s, "none", "cpu", &l), KT_ENOTFOUND);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(kt_store_top_k(s, "none", "cpu", 3, &l), 0);
    ck_assert_uint_eq(l->n, 0);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_top_k(s, "w", "cpu", 0, &l), KT_EINVAL);
    kt_store_close(s);
}
END_TEST

START_TEST(store_lists_workloads_with_valid_records_per_target_and_key)
{
    kt_store_t *s = open_new();
    ck_assert_int_eq(kt_store_put_workload(s, "w", "{\"op\":\"w\"}", 1), 0);
    ck_assert_int_eq(kt_store_put_workload(s, "v", "{\"op\":\"v\"}", 2), 0);
    ck_assert_int_eq(kt_store_put_workload(s, "u", "{\"op\":\"u\"}", 3), 0);   /* no records */
    ck_assert_int_eq(kt_store_put_workload(s, "f", "{\"op\":\"f\"}", 4), 0);   /* failed only */
    double c[][1] = {{3}, {1}, {2}, {0.5}};
    kt_record_t rs[] = {
        rec("w", "cpu", 1, c[0], 1, 0),
        rec("w", "cpu", 2, c[1], 1, 0),
        rec("w", "cpu", 3, c[2], 1, 0),
        rec("v", "cpu", 4, c[3], 1, 0),
        rec("f", "cpu", 5, NULL, 0, KT_MEASURE_RUN_TIMEOUT),
        rec("x", "cpu", 6, c[0], 1, 0),                  /* its workload is not stored */
        rec("u", "cuda", 7, c[0], 1, 0),
    };
    rs[1].runner_key = "cpu-other";   /* w's fastest record: another device key */
    rs[3].runner_key = "cpu-other";   /* v's only one */
    ck_assert_int_eq(kt_store_put_records(s, rs, KT_ARRAY_LEN(rs)), 0);

    kt_store_workload_t *wl = NULL;
    size_t n = 9;
    ck_assert_int_eq(kt_store_list_workloads(s, "cpu", NULL, &wl, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(wl[0].key, "v");
    ck_assert_str_eq(wl[0].canonical, "{\"op\":\"v\"}");
    ck_assert(wl[0].flops == 2);
    ck_assert_str_eq(wl[1].key, "w");
    kt_store_workloads_free(wl, n);
    ck_assert_int_eq(kt_store_list_workloads(s, "cpu", "cpu-test", &wl, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(wl[0].key, "w");
    kt_store_workloads_free(wl, n);
    ck_assert_int_eq(kt_store_list_workloads(s, "cuda", NULL, &wl, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(wl[0].key, "u");
    kt_store_workloads_free(wl, n);
    ck_assert_int_eq(kt_store_list_workloads(s, "cuda", "cpu-other", &wl, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(wl);
    ck_assert_int_eq(kt_store_list_workloads(s, NULL, NULL, &wl, &n), KT_EINVAL);

    /* top-k of one device key leaves the other key's faster record out */
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_top_k_key(s, "w", "cpu", "cpu-test", 5, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    ck_assert_uint_eq(l->items[0].state_hash, 3);
    ck_assert_uint_eq(l->items[1].state_hash, 1);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_top_k_key(s, "w", "cpu", NULL, 1, &l), 0);
    ck_assert_uint_eq(l->n, 1);
    ck_assert_uint_eq(l->items[0].state_hash, 2);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_top_k_key(s, "w", "cpu", "cpu-test", 0, &l), KT_EINVAL);
    kt_store_close(s);
}
END_TEST

START_TEST(store_has_measured_counts_any_error_code)
{
    kt_store_t *s = open_new();
    kt_record_t rs[] = {rec("w", "cpu", 10, one_cost, 1, 0),
                        rec("w", "cpu", 11, NULL, 0, KT_MEASURE_BUILD_TIMEOUT),
                        rec("w", "cpu", 0x8000000000000001ull, NULL, 0, KT_MEASURE_UNKNOWN_ERROR)};
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), 0);
    ck_assert_int_eq(kt_store_has_measured(s, "w", "cpu", 10), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "w", "cpu", 11), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "w", "cpu", 0x8000000000000001ull), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "w", "cpu", 12), 0);
    ck_assert_int_eq(kt_store_has_measured(s, "w", "cuda", 10), 0);
    ck_assert_int_eq(kt_store_has_measured(s, "v", "cpu", 10), 0);
    kt_store_close(s);
}
END_TEST

/* ---- Distill, vacuum, stats -------------------------------------------- */

/* Two workloads on cpu, one on cuda: per (workload, target) costs 5..1 in
 * hash order 1..5 plus two failed records. */
static void fill_for_distill(kt_store_t *s)
{
    static const double c[] = {5, 4, 3, 2, 1};
    const char *wk[] = {"wa", "wb", "wa"};
    const char *tg[] = {"cpu", "cpu", "cuda"};
    for (int w = 0; w < 3; w++) {
        kt_record_t rs[7];
        for (int i = 0; i < 5; i++)
            rs[i] = rec(wk[w], tg[w], 100 * (uint64_t)w + (uint64_t)i + 1, &c[i], 1, 0);
        rs[5] = rec(wk[w], tg[w], 100 * (uint64_t)w + 50, NULL, 0, KT_MEASURE_COMPILE_HOST);
        rs[6] = rec(wk[w], tg[w], 100 * (uint64_t)w + 51, NULL, 0, KT_MEASURE_RUN_TIMEOUT);
        if (w == 2)
            for (int i = 0; i < 7; i++)
                rs[i].runner_key = "cuda-sm90";
        ck_assert_int_eq(kt_store_put_records(s, rs, 7), 0);
    }
}

START_TEST(store_distill_keeps_the_best_and_remembers_the_rest)
{
    kt_store_t *s = open_new();
    fill_for_distill(s);
    kt_store_distill_t d;
    ck_assert_int_eq(kt_store_distill(s, 2, 1, &d), 0);   /* dry: counts only */
    ck_assert_int_eq(d.records_before, 21);
    ck_assert_int_eq(d.records_after, 6);
    ck_assert_int_eq(d.workloads, 3);
    ck_assert_int_eq(d.states_remembered, 15);
    ck_assert_int_eq(count_all(s, NULL), 21);
    ck_assert_int_eq(kt_store_has_measured(s, "wa", "cpu", 1), 1);

    ck_assert_int_eq(kt_store_distill(s, 2, 0, &d), 0);
    ck_assert_int_eq(d.records_after, 6);
    ck_assert_int_eq(count_all(s, NULL), 6);
    /* The two cheapest of each pair stay, in order. */
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_top_k(s, "wa", "cuda", 10, &l), 0);
    ck_assert_int_eq((int)l->n, 2);
    ck_assert_uint_eq(l->items[0].state_hash, 205);
    ck_assert_uint_eq(l->items[1].state_hash, 204);
    kt_record_list_free(l);
    /* Every dropped state, failed ones too, still counts as measured. */
    for (uint64_t h = 1; h <= 5; h++)
        ck_assert_int_eq(kt_store_has_measured(s, "wb", "cpu", 100 + h), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "wb", "cpu", 150), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "wb", "cpu", 151), 1);
    ck_assert_int_eq(kt_store_has_measured(s, "wb", "cuda", 101), 0);
    ck_assert_int_eq(kt_store_has_measured(s, "wb", "cpu", 106), 0);
    int64_t nd = -1;
    ck_assert_int_eq(kt_store_count_distilled(s, "wb", "cpu", &nd), 0);
    ck_assert_int_eq(nd, 5);
    ck_assert_int_eq(kt_store_count_distilled(s, "wb", "cuda", &nd), 0);
    ck_assert_int_eq(nd, 0);

    /* Again: nothing more to drop; keep 1 drops one more per pair. */
    ck_assert_int_eq(kt_store_distill(s, 2, 0, &d), 0);
    ck_assert_int_eq(d.records_before, 6);
    ck_assert_int_eq(d.records_after, 6);
    ck_assert_int_eq(d.states_remembered, 0);
    ck_assert_int_eq(kt_store_distill(s, 1, 0, &d), 0);
    ck_assert_int_eq(d.records_after, 3);
    ck_assert_int_eq(d.states_remembered, 3);
    ck_assert_int_eq(kt_store_has_measured(s, "wa", "cpu", 4), 1);

    ck_assert_int_eq(kt_store_distill(s, 0, 0, &d), KT_EINVAL);
    kt_store_close(s);

    /* Reopened, the remembered states are still there. */
    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_has_measured(s, "wa", "cpu", 1), 1);
    kt_store_close(s);
}
END_TEST

START_TEST(store_distill_refuses_while_a_job_is_active)
{
    kt_store_t *s = open_new();
    fill_for_distill(s);
    ck_assert_int_eq(kt_store_put_workload(s, "wa", "{\"a\":1}", 1), 0);
    kt_store_job_t job = {.created = 1700000000.0, .state = "running", .target = "cpu",
                          .runner_key = "cpu-test", .strategy = "gradient",
                          .policy = "sketch.xgb", .options_json = "{}"};
    kt_store_task_t t = {0, "wa", 1.0, "cpu", NULL};
    ck_assert_int_eq(kt_store_put_job(s, &job, &t, 1), 0);
    kt_store_distill_t d;
    ck_assert_int_eq(kt_store_distill(s, 1, 0, &d), KT_ESTATE);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "queued or running"));
    ck_assert_int_eq(count_all(s, NULL), 21);
    ck_assert_int_eq(kt_store_set_job_state(s, job.id, "done"), 0);
    ck_assert_int_eq(kt_store_distill(s, 1, 0, &d), 0);
    ck_assert_int_eq(count_all(s, NULL), 3);
    kt_store_close(s);
}
END_TEST

START_TEST(store_stats_and_vacuum_after_distill)
{
    kt_store_t *s = open_new();
    fill_for_distill(s);
    /* Bulk, so that the distill frees pages VACUUM can give back. */
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char *state = NULL;
    ck_assert_int_ge(asprintf(&state, "{\"pad\":\"%s\"}", big), 0);
    for (int b = 0; b < 4; b++) {
        kt_record_t rs[100];
        for (int i = 0; i < 100; i++) {
            rs[i] = rec("wc", "cpu", 1000 + 100 * (uint64_t)b + (uint64_t)i, one_cost, 1, 0);
            rs[i].state_json = state;
        }
        ck_assert_int_eq(kt_store_put_records(s, rs, 100), 0);
    }
    free(state);
    kt_store_stats_t st;
    ck_assert_int_eq(kt_store_stats(s, &st), 0);
    ck_assert_int_eq(st.records, 421);
    ck_assert_int_eq(st.valid, 415);
    ck_assert_int_eq(st.distilled, 0);
    ck_assert_int_eq(st.schema_version, KT_STORE_SCHEMA_VERSION);
    ck_assert_int_gt(st.bytes, 400 * 4096);
    ck_assert_int_eq((int)st.nkeys, 2);
    ck_assert_str_eq(st.keys[0].key, "cpu-test");
    ck_assert_int_eq(st.keys[0].records, 414);
    ck_assert_str_eq(st.keys[1].key, "cuda-sm90");
    ck_assert_int_eq(st.keys[1].records, 7);
    kt_store_stats_clear(&st);
    ck_assert_int_eq((int)st.nkeys, 0);

    kt_store_distill_t d;
    ck_assert_int_eq(kt_store_distill(s, 1, 0, &d), 0);
    int64_t before = 0, after = 0;
    ck_assert_int_eq(kt_store_vacuum(s, &before, &after), 0);
    ck_assert_msg(after * 4 < before, "vacuum: %lld bytes -> %lld", (long long)before,
                  (long long)after);
    ck_assert_int_eq(kt_store_stats(s, &st), 0);
    ck_assert_int_eq(st.records, 4);
    ck_assert_int_eq(st.distilled, 417);
    ck_assert_int_eq(st.bytes, after);
    kt_store_stats_clear(&st);
    ck_assert_int_eq(kt_store_integrity_check(s), 0);
    kt_store_close(s);

    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_vacuum(s, NULL, NULL), KT_ESTATE);
    kt_store_close(s);
}
END_TEST

typedef struct {
    kt_store_t *s;
    int seen;
    int stop_after;
    int inner_rc;
} walk_ctx_t;

static int walk_cb(const kt_record_t *r, void *ctx)
{
    walk_ctx_t *w = ctx;
    (void)r;
    w->seen++;
    if (w->s)
        w->inner_rc = kt_store_has_measured(w->s, "w", "cpu", 1);
    return w->seen == w->stop_after ? 77 : 0;
}

START_TEST(store_iterate_and_count_by_job_and_workload)
{
    kt_store_t *s = open_new();
    kt_record_t rs[] = {rec("a", "cpu", 1, one_cost, 1, 0), rec("a", "cpu", 2, NULL, 0, 2),
                        rec("a", "cuda", 3, one_cost, 1, 0), rec("b", "cpu", 4, NULL, 0, 2),
                        rec("b", "cpu", 5, NULL, 0, 8)};
    rs[0].job_id = rs[1].job_id = rs[3].job_id = 5;
    ck_assert_int_eq(kt_store_put_records(s, rs, KT_ARRAY_LEN(rs)), 0);

    kt_record_list_t *l = NULL;
    kt_store_filter_t by_job = {.job_id = 5};
    ck_assert_int_eq(kt_store_get_records(s, &by_job, &l), 0);
    ck_assert_uint_eq(l->n, 3);
    ck_assert_uint_eq(l->items[0].state_hash, 1);
    ck_assert_uint_eq(l->items[2].state_hash, 4);
    kt_record_list_free(l);
    kt_store_filter_t by_wk = {.workload_key = "a", .target = "cpu"};
    ck_assert_int_eq(kt_store_get_records(s, &by_wk, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    kt_record_list_free(l);
    by_wk.valid_only = 1;
    ck_assert_int_eq(kt_store_get_records(s, &by_wk, &l), 0);
    ck_assert_uint_eq(l->n, 1);
    kt_record_list_free(l);

    kt_store_counts_t c;
    ck_assert_int_eq(kt_store_count_records(s, NULL, &c), 0);
    ck_assert_int_eq(c.total, 5);
    ck_assert_int_eq(c.by_error[0], 2);
    ck_assert_int_eq(c.by_error[2], 2);
    ck_assert_int_eq(c.by_error[8], 1);
    kt_store_filter_t wb = {.workload_key = "b"};
    ck_assert_int_eq(kt_store_count_records(s, &wb, &c), 0);
    ck_assert_int_eq(c.total, 2);
    ck_assert_int_eq(c.by_error[0], 0);

    /* The callback's non-zero return stops the walk and is returned. */
    walk_ctx_t w = {.stop_after = 2};
    ck_assert_int_eq(kt_store_foreach_record(s, NULL, walk_cb, &w), 77);
    ck_assert_int_eq(w.seen, 2);
    /* Using the same handle inside the callback is refused, not corrupting. */
    w = (walk_ctx_t){.s = s, .stop_after = -1};
    ck_assert_int_eq(kt_store_foreach_record(s, &by_job, walk_cb, &w), 0);
    ck_assert_int_eq(w.seen, 3);
    ck_assert_int_eq(w.inner_rc, KT_ESTATE);
    ck_assert_int_eq(kt_store_has_measured(s, "a", "cpu", 1), 1);
    kt_store_close(s);
}
END_TEST

START_TEST(measure_error_names_match_proto)
{
    ck_assert_str_eq(kt_measure_error_name(KT_MEASURE_NO_ERROR), "NO_ERROR");
    ck_assert_str_eq(kt_measure_error_name(KT_MEASURE_RUN_TIMEOUT), "RUN_TIMEOUT");
    ck_assert_str_eq(kt_measure_error_name(8), "UNKNOWN_ERROR");
    ck_assert_str_eq(kt_measure_error_name(9), "UNKNOWN_ERROR");
    ck_assert_int_eq(kt_measure_error_from_name("COMPILE_DEVICE"), 3);
    ck_assert_int_eq(kt_measure_error_from_name("nope"), -1);
}
END_TEST

/* ---- Crash safety ------------------------------------------------------ */

#define CRASH_BATCH 40
#define CRASH_REPORTS 10
#define CRASH_MAX_BATCH 1000   /* bounds the child even if nobody kills it */

/* Writes batches of CRASH_BATCH records, workload "<round>:<batch>", and
 * reports each batch number once its commit has returned. */
static void crash_child(int round, int wfd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the test */
    kt_store_t *s = kt_store_open(dbpath, 0);
    if (!s)
        _exit(3);
    static char state[1024];
    memset(state, 'x', sizeof state - 1);   /* bulk, so a batch spans several pages */
    double costs[] = {0.001, 0.002};
    for (int b = 1; b < CRASH_MAX_BATCH; b++) {
        kt_record_t rs[CRASH_BATCH];
        char wk[32];
        snprintf(wk, sizeof wk, "%d:%d", round, b);
        for (int i = 0; i < CRASH_BATCH; i++) {
            rs[i] = rec(wk, "cpu", (uint64_t)b * 1000 + (uint64_t)i, costs, 2, 0);
            rs[i].state_json = state;
        }
        if (kt_store_put_records(s, rs, CRASH_BATCH) != 0)
            _exit(4);
        if (write(wfd, &b, sizeof b) != sizeof b)
            _exit(5);
    }
    _exit(6);
}

typedef struct {
    int round;
    int *counts;
} tally_t;

static int tally(const kt_record_t *r, void *ctx)
{
    tally_t *t = ctx;
    int round = 0, b = 0;
    ck_assert_int_eq(sscanf(r->workload_key, "%d:%d", &round, &b), 2);
    ck_assert(b > 0 && b < CRASH_MAX_BATCH);
    if (round == t->round)
        t->counts[b]++;
    return 0;
}

/* Kill a writing child at a point that varies with `delay_us` after its
 * CRASH_REPORTS-th commit, then check the file. */
static void crash_round(int round, int delay_us)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        crash_child(round, pfd[1]);
    }
    close(pfd[1]);
    int last = 0, b;
    while (last < CRASH_REPORTS && read(pfd[0], &b, sizeof b) == sizeof b)
        last = b;
    if (delay_us)
        usleep((useconds_t)delay_us);   /* moves the kill around; asserts nothing about time */
    kill(pid, SIGKILL);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    while (read(pfd[0], &b, sizeof b) == sizeof b)   /* reports sent before the kill */
        last = b;
    close(pfd[0]);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "child ended by itself (status %d) before the kill", status);
    ck_assert_int_ge(last, CRASH_REPORTS);

    kt_store_t *s = kt_store_open(dbpath, 0);
    ck_assert_msg(s != NULL, "reopen: %s", kt_err_msg());
    ck_assert_int_eq(kt_store_integrity_check(s), 0);
    static int counts[CRASH_MAX_BATCH + 1];
    memset(counts, 0, sizeof counts);
    tally_t t = {round, counts};
    ck_assert_int_eq(kt_store_foreach_record(s, NULL, tally, &t), 0);
    for (int i = 1; i <= last; i++)
        ck_assert_msg(counts[i] == CRASH_BATCH, "round %d: reported batch %d has %d records",
                      round, i, counts[i]);
    /* At most one more batch (committed, not yet reported), and only whole. */
    ck_assert_msg(counts[last + 1] == 0 || counts[last + 1] == CRASH_BATCH,
                  "round %d: partial batch %d: %d records", round, last + 1, counts[last + 1]);
    for (int i = last + 2; i < CRASH_MAX_BATCH; i++)
        ck_assert_int_eq(counts[i], 0);
    kt_store_close(s);
}

START_TEST(store_sigkill_keeps_every_reported_batch_whole)
{
    kt_store_close(open_new());   /* schema in place before the children start */
    static const int delays_us[] = {0, 700, 2000, 5000, 11000};
    for (int round = 0; round < (int)KT_ARRAY_LEN(delays_us); round++)
        crash_round(round, delays_us[round]);
    /* The store still takes writes after recovery. */
    kt_store_t *s = kt_store_open(dbpath, 0);
    ck_assert_ptr_nonnull(s);
    kt_record_t r = rec("9:1", "cpu", 1, one_cost, 1, 0);
    ck_assert_int_eq(kt_store_put_records(s, &r, 1), 0);
    kt_store_close(s);
}
END_TEST

/* ---- JSON lines -------------------------------------------------------- */

/* Workload keys of imported records (import refuses a malformed one), W1 also
 * as it appears inside a JSON line. */
#define W1 "[\"b1\", [1]]"
#define W1_JSON "\"[\\\"b1\\\", [1]]\""
#define W2 "[\"b2\", [2]]"
#define W3 "[\"b3\", [3, 3]]"

START_TEST(store_export_import_roundtrip_reproduces_records)
{
    kt_store_t *s = open_new();
    double c1[] = {0.1, 1.0 / 3.0, 1e-300, 12345.678901234567};
    double c2[] = {4.9e-324, 1.7976931348623157e308};
    kt_record_t rs[] = {
        rec("[\"ab12\", [1, 56, 56, 64]]", "cuda", 0xfedcba9876543210ull, c1, 4, 0),
        rec(W2, "cpu", 0, c2, 2, 0),
        rec(W2, "cpu", 5, NULL, 0, KT_MEASURE_COMPILE_DEVICE),
        rec(W3, "cpu", 6, c1, 1, 0),
        rec(W3, "cpu", 7, c1, 2, 0),
    };
    /* Canonical compact JSON (embedded), spaced JSON and a non-JSON string
     * (kept as strings), a state with a real that does not re-encode alike. */
    rs[0].state_json = "{\"stages\":[{\"split\":[4,8]}],\"unroll\":16,\"name\":\"caf\xc3\xa9\"}";
    rs[1].state_json = "{ \"stages\": [1, 2] }";
    rs[2].state_json = "not json at all \"quoted\"\n";
    rs[3].state_json = "[0.1]";
    rs[4].state_json = "[]";
    rs[0].job_id = 9;
    rs[0].timestamp = 1712345678.123456789;
    rs[1].all_cost = 0.30000000000000004;
    rs[2].error_msg = "nvrtc: error: \"x\" undefined\n\ttab \xe2\x9c\x93";
    rs[3].runner_key = "";
    rs[0].origin = KT_STORE_ORIGIN_TRANSFER;
    rs[1].origin = KT_STORE_ORIGIN_MODEL;
    rs[2].origin = KT_STORE_ORIGIN_RANDOM;
    rs[3].origin = KT_STORE_ORIGIN_SIBLING;   /* rs[4]: unknown */
    ck_assert_int_eq(kt_store_put_records(s, rs, KT_ARRAY_LEN(rs)), 0);

    char *out1 = tmp_file("out1.jsonl");
    char path1[160];
    snprintf(path1, sizeof path1, "%s", out1);
    FILE *f = fopen(path1, "w");
    int64_t n = 0;
    ck_assert_int_eq(kt_store_export_jsonl(s, NULL, f, &n), 0);
    fclose(f);
    ck_assert_int_eq(n, 5);
    char *text1 = kt_file_read(path1, NULL);
    ck_assert_ptr_nonnull(strstr(text1, "\"state\":{\"stages\":[{\"split\":[4,8]}]"));
    ck_assert_ptr_nonnull(strstr(text1, "\"state\":\"{ \\\"stages\\\""));
    ck_assert_ptr_nonnull(strstr(text1, "\"state_hash\":\"fedcba9876543210\""));
    ck_assert_ptr_nonnull(strstr(text1, "\"state\":[]"));
    /* the origin last, and only when known */
    ck_assert_ptr_nonnull(strstr(text1, "\"runner_host\":\"host-a\",\"origin\":\"transfer\"}"));
    ck_assert_ptr_nonnull(strstr(text1, "\"origin\":\"sibling\"}\n{"));
    ck_assert_ptr_null(strstr(strrchr(text1, '{'), "origin"));

    char db2[160];
    snprintf(db2, sizeof db2, "%s/second.db", tmpdir);
    kt_store_t *s2 = kt_store_open(db2, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s2);
    f = fopen(path1, "r");
    kt_store_import_report_t rep;
    ck_assert_int_eq(kt_store_import_jsonl(s2, f, &rep), 0);
    fclose(f);
    ck_assert_int_eq(rep.imported, 5);
    ck_assert_int_eq(rep.duplicates, 0);
    ck_assert_int_eq(rep.bad, 0);

    kt_record_list_t *a = NULL, *b = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &a), 0);
    ck_assert_int_eq(kt_store_get_records(s2, NULL, &b), 0);
    ck_assert_uint_eq(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        assert_same_record(&a->items[i], &b->items[i]);
    kt_record_list_free(a);
    kt_record_list_free(b);

    /* Exporting the copy gives the same bytes; importing again adds nothing. */
    char path2[160];
    snprintf(path2, sizeof path2, "%s/out2.jsonl", tmpdir);
    f = fopen(path2, "w");
    ck_assert_int_eq(kt_store_export_jsonl(s2, NULL, f, NULL), 0);
    fclose(f);
    char *text2 = kt_file_read(path2, NULL);
    ck_assert_str_eq(text1, text2);
    free(text1);
    free(text2);
    f = fopen(path1, "r");
    ck_assert_int_eq(kt_store_import_jsonl(s2, f, &rep), 0);
    fclose(f);
    ck_assert_int_eq(rep.imported, 0);
    ck_assert_int_eq(rep.duplicates, 5);
    ck_assert_int_eq(count_all(s2, NULL), 5);

    /* Filtered export. */
    kt_store_filter_t fw = {.workload_key = W3};
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_int_eq(kt_store_export_jsonl(s, &fw, devnull, &n), 0);
    ck_assert_int_eq(n, 2);
    fw = (kt_store_filter_t){.job_id = 9};
    ck_assert_int_eq(kt_store_export_jsonl(s, &fw, devnull, &n), 0);
    ck_assert_int_eq(n, 1);
    fclose(devnull);
    kt_store_close(s);
    kt_store_close(s2);
}
END_TEST

/* A record's line carries its workload's JSON when the store holds the
 * workload, and import stores it: a store made by import can re-fit and
 * train on what it got. A workload that is not the line's key's, or not a
 * workload, makes the line bad and changes nothing. */
START_TEST(store_export_import_carries_the_workload)
{
    kt_workload_t *w = kt_workload_parse("{\"op\":\"matmul\",\"M\":32,\"N\":48,\"K\":16}");
    kt_workload_t *d = kt_workload_parse("{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8}");
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(d);
    const char *key = kt_workload_key(w);
    kt_store_t *s = open_new();
    ck_assert_int_eq(kt_store_put_workload(s, key, kt_workload_json(w), kt_workload_flops(w)), 0);
    kt_record_t rs[] = {rec(key, "cpu", 1, one_cost, 1, 0), rec(key, "cpu", 2, one_cost, 1, 0),
                        rec(W2, "cpu", 3, one_cost, 1, 0)};   /* W2: no workload stored */
    ck_assert_int_eq(kt_store_put_records(s, rs, 3), 0);
    char path[160];
    snprintf(path, sizeof path, "%s", tmp_file("wl.jsonl"));
    FILE *f = fopen(path, "w");
    ck_assert_int_eq(kt_store_export_jsonl(s, NULL, f, NULL), 0);
    fclose(f);
    kt_store_close(s);
    char *text = kt_file_read(path, NULL);
    ck_assert_ptr_nonnull(text);
    int with = 0;
    for (const char *l = text; (l = strstr(l, "\"workload\":{\"K\":16,\"M\":32,\"N\":48")); l++)
        with++;
    ck_assert_msg(with == 2, "%s", text);

    char db2[160];
    snprintf(db2, sizeof db2, "%s/wl2.db", tmpdir);
    kt_store_t *s2 = kt_store_open(db2, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s2);
    f = fopen(path, "r");
    kt_store_import_report_t rep;
    ck_assert_int_eq(kt_store_import_jsonl(s2, f, &rep), 0);
    fclose(f);
    ck_assert_int_eq(rep.imported, 3);
    ck_assert_int_eq(rep.bad, 0);
    char *canonical = NULL;
    double flops = 0;
    ck_assert_int_eq(kt_store_get_workload(s2, key, &canonical, &flops), 0);
    ck_assert_str_eq(canonical, kt_workload_json(w));
    ck_assert_double_eq(flops, kt_workload_flops(w));
    free(canonical);
    ck_assert_int_eq(kt_store_get_workload(s2, W2, NULL, NULL), KT_ENOTFOUND);
    kt_err_clear();
    /* the copy exports the same bytes */
    char path2[160];
    snprintf(path2, sizeof path2, "%s/wl2.jsonl", tmpdir);
    f = fopen(path2, "w");
    ck_assert_int_eq(kt_store_export_jsonl(s2, NULL, f, NULL), 0);
    fclose(f);
    char *text2 = kt_file_read(path2, NULL);
    ck_assert_str_eq(text, text2);
    free(text2);

    /* another workload than the key's, and one that is none */
    char *first = kt_strdup(text);
    first[strcspn(first, "\n")] = '\0';
    char *at = strstr(first, "\"workload\":");
    ck_assert_ptr_nonnull(at);
    char bad[3][2048];
    snprintf(bad[0], sizeof bad[0], "%.*s\"workload\":%s}",
             (int)(at - first), first, kt_workload_json(d));
    snprintf(bad[1], sizeof bad[1], "%.*s\"workload\":{\"op\":\"nosuch\"}}", (int)(at - first),
             first);
    snprintf(bad[2], sizeof bad[2], "%.*s\"workload\":\"matmul\"}", (int)(at - first), first);
    free(first);
    const char *want[] = {"not the workload of", "is not a workload", "not an object"};
    for (int i = 0; i < 3; i++) {
        char bp[160];
        snprintf(bp, sizeof bp, "%s/bad%d.jsonl", tmpdir, i);
        ck_assert_int_eq(kt_file_write(bp, bad[i], strlen(bad[i])), 0);
        f = fopen(bp, "r");
        ck_assert_int_eq(kt_store_import_jsonl(s2, f, &rep), 0);
        fclose(f);
        ck_assert_int_eq(rep.bad, 1);
        ck_assert_msg(strstr(rep.bad_lines[0].reason, want[i]), "%d: %s", i,
                      rep.bad_lines[0].reason);
    }
    ck_assert_int_eq(count_all(s2, NULL), 3);
    ck_assert_int_eq(kt_store_get_workload(s2, kt_workload_key(d), NULL, NULL), KT_ENOTFOUND);
    kt_err_clear();
    kt_store_close(s2);
    free(text);
    kt_workload_free(w);
    kt_workload_free(d);
}
END_TEST

START_TEST(store_import_reports_bad_line)
{
    kt_store_t *s = open_new();
    kt_record_t good = rec(W1, "cpu", 1, one_cost, 1, 0);
    char *l1 = kt_store_record_to_json(&good);
    good.state_hash = 2;
    good.timestamp += 1;
    char *l4 = kt_store_record_to_json(&good);
    good.state_hash = 3;
    good.timestamp += 1;
    char *l7 = kt_store_record_to_json(&good);
    good.state_hash = 4;
    char *l9 = kt_store_record_to_json(&good);
    ck_assert(l1 && l4 && l7 && l9);
    size_t cut = strlen(l9) / 2;
    l9[cut] = '\0';   /* a truncated last line, without newline */
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text,
                              "%s\n"                      /* 1 good */
                              "{this is not json\n"       /* 2 */
                              "\n"                        /* 3 blank: ignored */
                              "%s\r\n"                    /* 4 good, CRLF */
                              "{\"workload_key\":\"w\"}\n" /* 5 missing fields */
                              "[1,2]\n"                   /* 6 not an object */
                              "%s\n"                      /* 7 good */
                              "%s\n"                      /* 8 duplicate of line 1 */
                              "%s",                       /* 9 truncated */
                              l1, l4, l7, l1, l9),
                     0);
    char path[160];
    snprintf(path, sizeof path, "%s/bad.jsonl", tmpdir);
    ck_assert_int_eq(kt_file_write(path, text, strlen(text)), 0);
    free(text);
    free(l1);
    free(l4);
    free(l7);
    free(l9);

    FILE *f = fopen(path, "r");
    kt_store_import_report_t rep;
    ck_assert_int_eq(kt_store_import_jsonl(s, f, &rep), 0);
    fclose(f);
    ck_assert_int_eq(rep.imported, 3);
    ck_assert_int_eq(rep.duplicates, 1);
    ck_assert_int_eq(rep.bad, 4);
    ck_assert_int_eq(rep.nlisted, 4);
    long want[] = {2, 5, 6, 9};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(rep.bad_lines[i].line, want[i]);
    ck_assert_ptr_nonnull(strstr(rep.bad_lines[0].reason, "invalid JSON"));
    ck_assert_ptr_nonnull(strstr(rep.bad_lines[1].reason, "target"));
    ck_assert_ptr_nonnull(strstr(rep.bad_lines[2].reason, "not a JSON object"));
    ck_assert_ptr_nonnull(strstr(rep.bad_lines[3].reason, "truncated"));
    ck_assert_int_eq(count_all(s, NULL), 3);
    ck_assert_int_eq(kt_store_has_measured(s, W1, "cpu", 3), 1);
    ck_assert_int_eq(kt_store_has_measured(s, W1, "cpu", 4), 0);

    /* Field-level checks name the problem. */
    static const char *const lines[] = {
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":\"12\","
        "\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[-1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":9,\"all_cost\":1,\"timestamp\":1}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1,"
        "\"timestamp\":2}\n",
        "{\"workload_key\":\"garbage\",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"gpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1,"
        "\"origin\":\"guess\"}\n",
        "{\"workload_key\":" W1_JSON ",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1,"
        "\"origin\":2}\n",
    };
    static const char *const reasons[] = {"16 hex", "cost 0", "error_code", "duplicate",
                                          "\"workload_key\": 'garbage' is not a workload key",
                                          "\"target\": unknown target 'gpu'",
                                          "\"origin\" is not unknown, transfer",
                                          "\"origin\" is not unknown, transfer"};
    for (size_t i = 0; i < KT_ARRAY_LEN(lines); i++) {
        f = fmemopen((void *)lines[i], strlen(lines[i]), "r");
        ck_assert_int_eq(kt_store_import_jsonl(s, f, &rep), 0);
        fclose(f);
        ck_assert_int_eq(rep.bad, 1);
        ck_assert_msg(strstr(rep.bad_lines[0].reason, reasons[i]) != NULL, "reason '%s'",
                      rep.bad_lines[0].reason);
    }
    /* A key written compact in upper case is stored as ktune writes keys. */
    static const char loud[] =
        "{\"workload_key\":\"[\\\"B1\\\",[1]]\",\"target\":\"cpu\",\"state\":\"s\","
        "\"state_hash\":\"00000000000000bb\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,"
        "\"timestamp\":1}\n";
    f = fmemopen((void *)loud, strlen(loud), "r");
    ck_assert_int_eq(kt_store_import_jsonl(s, f, &rep), 0);
    fclose(f);
    ck_assert_msg(rep.imported == 1 && rep.bad == 0, "%s",
                  rep.nlisted ? rep.bad_lines[0].reason : "");
    ck_assert_int_eq(kt_store_has_measured(s, W1, "cpu", 0xbb), 1);
    kt_store_close(s);
}
END_TEST

START_TEST(store_import_lists_only_the_first_bad_lines)
{
    kt_store_t *s = open_new();
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    for (int i = 0; i < KT_STORE_IMPORT_MAX_BAD + 5; i++)
        fprintf(m, "garbage %d\n", i);
    fclose(m);
    FILE *f = fmemopen(text, len, "r");
    kt_store_import_report_t rep;
    ck_assert_int_eq(kt_store_import_jsonl(s, f, &rep), 0);
    fclose(f);
    free(text);
    ck_assert_int_eq(rep.bad, KT_STORE_IMPORT_MAX_BAD + 5);
    ck_assert_int_eq(rep.nlisted, KT_STORE_IMPORT_MAX_BAD);
    ck_assert_int_eq(rep.bad_lines[KT_STORE_IMPORT_MAX_BAD - 1].line, KT_STORE_IMPORT_MAX_BAD);
    ck_assert_int_eq(rep.imported, 0);
    kt_store_close(s);
}
END_TEST

/* ---- Concurrent readers ------------------------------------------------ */

START_TEST(store_reader_sees_commits_not_open_transactions)
{
    kt_store_t *w = open_new();
    kt_record_t rs[3] = {rec("w", "cpu", 1, one_cost, 1, 0), rec("w", "cpu", 2, one_cost, 1, 0),
                         rec("w", "cpu", 3, one_cost, 1, 0)};
    ck_assert_int_eq(kt_store_put_records(w, rs, 2), 0);

    kt_store_t *r = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_msg(r != NULL, "reader: %s", kt_err_msg());
    ck_assert_int_eq(count_all(r, "w"), 2);

    /* Another connection holds the write lock with an insert in flight. */
    sqlite3 *raw;
    ck_assert_int_eq(sqlite3_open(dbpath, &raw), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(raw,
                                  "BEGIN IMMEDIATE; INSERT INTO records(workload_key, target, "
                                  "state, state_hash, costs, error_code, all_cost, timestamp) "
                                  "VALUES ('w', 'cpu', '{}', 99, '[]', 8, 0, 0)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(count_all(r, "w"), 2);   /* readers neither wait nor see it */
    ck_assert_int_eq(kt_store_has_measured(r, "w", "cpu", 99), 0);
    ck_assert_int_eq(sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    ck_assert_int_eq(count_all(r, "w"), 3);
    ck_assert_int_eq(kt_store_has_measured(r, "w", "cpu", 99), 1);

    ck_assert_int_eq(kt_store_put_records(r, &rs[2], 1), KT_ESTATE);   /* read-only handle */
    ck_assert_int_eq(kt_store_put_records(w, &rs[2], 1), 0);
    ck_assert_int_eq(count_all(r, "w"), 4);
    kt_store_close(r);
    kt_store_close(w);
}
END_TEST

#define THREAD_BATCHES 30
#define THREAD_BATCH 10

static atomic_int writer_done;
static atomic_int writer_rc;

static void *writer_thread(void *arg)
{
    (void)arg;
    kt_store_t *s = kt_store_open(dbpath, 0);
    int rc = s ? 0 : -100;
    for (int b = 0; rc == 0 && b < THREAD_BATCHES; b++) {
        kt_record_t rs[THREAD_BATCH];
        for (int i = 0; i < THREAD_BATCH; i++)
            rs[i] = rec("t", "cpu", (uint64_t)(b * THREAD_BATCH + i), one_cost, 1, 0);
        rc = kt_store_put_records(s, rs, THREAD_BATCH);
    }
    kt_store_close(s);
    atomic_store(&writer_rc, rc);
    atomic_store(&writer_done, 1);
    return NULL;
}

START_TEST(store_reader_thread_sees_whole_batches_while_writer_writes)
{
    kt_store_close(open_new());
    kt_store_t *r = kt_store_open(dbpath, 0);
    ck_assert_ptr_nonnull(r);
    atomic_store(&writer_done, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, writer_thread, NULL), 0);
    int64_t prev = 0;
    while (!atomic_load(&writer_done)) {
        int64_t c = count_all(r, "t");
        ck_assert_int_eq(c % THREAD_BATCH, 0);
        ck_assert_int_ge(c, prev);
        prev = c;
    }
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&writer_rc), 0);
    ck_assert_int_eq(count_all(r, "t"), THREAD_BATCHES * THREAD_BATCH);
    kt_store_close(r);
}
END_TEST

/* ---- Cost models ------------------------------------------------------- */

/* A key's cost model row: put sets version 1, a second put replaces it as
 * version 2 (one row per key, another key's untouched); every field and the
 * bytes read back after a reopen, read-only too; stats list the models
 * without their bytes; a file from before the table has none. */
START_TEST(store_cost_models_put_replace_and_read_back)
{
    kt_store_t *s = open_new();
    kt_store_cost_model_t *got = NULL;
    ck_assert_int_eq(kt_store_get_cost_model(s, "cpu", "k", &got), KT_ENOTFOUND);
    static const char b1[] = "model one", b2[] = "the second model";
    kt_store_cost_model_t m = {.target = "cpu", .device_key = "k", .feature_version = 178001,
                               .format_version = 3, .records = 100, .max_record_id = 120,
                               .created = 1700000000.5, .model = b1, .model_len = sizeof b1};
    ck_assert_int_eq(kt_store_put_cost_model(s, &m), 0);
    ck_assert_int_eq(m.version, 1);
    kt_store_cost_model_t o = m;
    o.device_key = "other";
    ck_assert_int_eq(kt_store_put_cost_model(s, &o), 0);
    ck_assert_int_eq(o.version, 1);
    m.records = 200;
    m.max_record_id = 260;
    m.model = b2;
    m.model_len = sizeof b2;
    ck_assert_int_eq(kt_store_put_cost_model(s, &m), 0);
    ck_assert_int_eq(m.version, 2);
    kt_store_cost_model_t bad = m;
    bad.model_len = 0;
    ck_assert_int_eq(kt_store_put_cost_model(s, &bad), KT_EINVAL);
    bad = m;
    bad.target = "";
    ck_assert_int_eq(kt_store_put_cost_model(s, &bad), KT_EINVAL);
    kt_store_close(s);

    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_get_cost_model(s, "cpu", "k", &got), 0);
    ck_assert_int_eq(got->version, 2);
    ck_assert_int_eq(got->feature_version, 178001);
    ck_assert_int_eq(got->format_version, 3);
    ck_assert_int_eq(got->records, 200);
    ck_assert_int_eq(got->max_record_id, 260);
    ck_assert(got->created == 1700000000.5);
    ck_assert_uint_eq(got->model_len, sizeof b2);
    ck_assert_mem_eq(got->model, b2, sizeof b2);
    ck_assert_str_eq(got->target, "cpu");
    ck_assert_str_eq(got->device_key, "k");
    kt_store_cost_model_free(got);
    ck_assert_int_eq(kt_store_get_cost_model(s, "cuda", "k", &got), KT_ENOTFOUND);
    kt_store_stats_t st;
    ck_assert_int_eq(kt_store_stats(s, &st), 0);
    ck_assert_int_eq((int)st.nmodels, 2);
    ck_assert_str_eq(st.models[0].device_key, "k");
    ck_assert_int_eq(st.models[0].version, 2);
    ck_assert_uint_eq(st.models[0].model_len, sizeof b2);
    ck_assert_ptr_null(st.models[0].model);
    ck_assert_str_eq(st.models[1].device_key, "other");
    json_t *j = kt_store_stats_json(&st, dbpath);
    json_t *cm = json_object_get(j, "cost_models");
    ck_assert_int_eq((int)json_array_size(cm), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(cm, 0), "version")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(cm, 0), "records")), 200);
    json_decref(j);
    kt_store_stats_clear(&st);
    kt_store_close(s);

    /* a file from before the table, read as it is by a read-only handle */
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(dbpath, &db), SQLITE_OK);
    /* (the cost_models table is the last migration's) */
    ck_assert_int_eq(sqlite3_exec(db, "DROP TABLE cost_models; PRAGMA user_version = 5;", NULL,
                                  NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    s = kt_store_open(dbpath, KT_STORE_READONLY);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_store_get_cost_model(s, "cpu", "k", &got), KT_ENOTFOUND);
    ck_assert_int_eq(kt_store_stats(s, &st), 0);
    ck_assert_int_eq((int)st.nmodels, 0);
    kt_store_stats_clear(&st);
    kt_store_close(s);
    s = kt_store_open(dbpath, 0);   /* migrated: the table is back, empty */
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_get_cost_model(s, "cpu", "k", &got), KT_ENOTFOUND);
    ck_assert_int_eq(kt_store_put_cost_model(s, &m), 0);
    ck_assert_int_eq(m.version, 1);
    kt_store_close(s);
}
END_TEST

/* The records of a (target, key) newest first, whatever the workload and
 * error code, and how many are newer than an id. */
START_TEST(store_key_records_newest_first_and_count_newer)
{
    kt_store_t *s = open_new();
    kt_record_t rs[6];
    for (int i = 0; i < 6; i++)
        rs[i] = rec(i % 2 ? "a" : "b", "cpu", (uint64_t)i + 1, one_cost, 1, 0);
    rs[2] = rec("a", "cpu", 3, NULL, 0, 4);   /* failed */
    rs[4].runner_key = "elsewhere";
    rs[5].target = "cuda";
    ck_assert_int_eq(kt_store_put_records(s, rs, 6), 0);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_key_records(s, "cpu", "cpu-test", 10, &l), 0);
    ck_assert_uint_eq(l->n, 4);
    ck_assert_int_eq(l->items[0].id, rs[3].id);
    ck_assert_int_eq(l->items[1].id, rs[2].id);
    ck_assert_int_eq(l->items[1].error_code, 4);
    ck_assert_int_eq(l->items[3].id, rs[0].id);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_key_records(s, "cpu", "cpu-test", 2, &l), 0);
    ck_assert_uint_eq(l->n, 2);
    ck_assert_int_eq(l->items[1].id, rs[2].id);
    kt_record_list_free(l);
    ck_assert_int_eq(kt_store_key_records(s, "cpu", "cpu-test", 0, &l), KT_EINVAL);
    int64_t n = -1, max = -1;
    ck_assert_int_eq(kt_store_count_key_records(s, "cpu", "cpu-test", 0, &n, &max), 0);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(max, rs[3].id);
    ck_assert_int_eq(kt_store_count_key_records(s, "cpu", "cpu-test", rs[1].id, &n, &max), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(kt_store_count_key_records(s, "cpu", "cpu-test", rs[3].id, &n, &max), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(max, 0);
    kt_store_close(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("store");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, store_fresh_db_is_wal_at_current_schema_version);
    tcase_add_test(tc, store_distill_keeps_the_best_and_remembers_the_rest);
    tcase_add_test(tc, store_distill_refuses_while_a_job_is_active);
    tcase_add_test(tc, store_stats_and_vacuum_after_distill);
    tcase_add_test(tc, store_cost_models_put_replace_and_read_back);
    tcase_add_test(tc, store_key_records_newest_first_and_count_newer);
    tcase_add_test(tc, store_migrates_a_schema_1_store_keeping_its_data);
    tcase_add_test(tc, store_origin_names_round_trip_and_bad_ones_are_refused);
    tcase_add_test(tc, store_before_origins_reads_unknown_and_migrates);
    tcase_add_test(tc, store_migration_3_lists_a_workload_without_sorting);
    tcase_add_test(tc, store_filters_records_by_runner_id_or_host);
    tcase_add_test(tc, store_reopen_keeps_data);
    tcase_add_test(tc, store_missing_file_needs_create_flag);
    tcase_add_test(tc, store_second_handle_keeps_wal_of_first_across_processes);
    tcase_add_test(tc, store_refuses_future_schema_version);
    tcase_add_test(tc, store_refuses_non_sqlite_file_unchanged);
    tcase_add_test(tc, store_workload_put_get_and_key_collision);
    tcase_add_test(tc, store_job_crud_with_tasks);
    tcase_add_test(tc, store_latency_log_appends_in_order);
    tcase_add_test(tc, store_put_records_assigns_ids_and_reads_back_every_field);
    tcase_add_test(tc, store_put_records_rejects_invalid_batch_whole);
    tcase_add_test(tc, store_error_msg_with_invalid_utf8_is_repaired);
    tcase_add_test(tc, store_best_and_top_k_ignore_failed_records);
    tcase_add_test(tc, store_lists_workloads_with_valid_records_per_target_and_key);
    tcase_add_test(tc, store_has_measured_counts_any_error_code);
    tcase_add_test(tc, store_iterate_and_count_by_job_and_workload);
    tcase_add_test(tc, measure_error_names_match_proto);
    tcase_add_test(tc, store_sigkill_keeps_every_reported_batch_whole);
    tcase_add_test(tc, store_export_import_roundtrip_reproduces_records);
    tcase_add_test(tc, store_export_import_carries_the_workload);
    tcase_add_test(tc, store_import_reports_bad_line);
    tcase_add_test(tc, store_import_lists_only_the_first_bad_lines);
    tcase_add_test(tc, store_reader_sees_commits_not_open_transactions);
    tcase_add_test(tc, store_reader_thread_sees_whole_batches_while_writer_writes);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
