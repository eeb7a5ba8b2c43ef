/* Maintenance of a long-lived record store: distill, vacuum and stats (store.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_internal.h"
#include "util/err.h"
#include "util/util.h"

/* Run sql (no parameters but an optional ?1 = p1) and read one integer. */
static int query_int64(kt_store_t *s, const char *sql, int64_t p1, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s), sql, -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_bind_parameter_count(st) > 0)
        sqlite3_bind_int64(st, 1, p1);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    int ret = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        ret = kt_store_db_err(s, rc, "store");
    sqlite3_finalize(st);
    return ret;
}

static int exec(kt_store_t *s, const char *sql, const char *what)
{
    int rc = sqlite3_exec(kt_store_db(s), sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : kt_store_db_err(s, sqlite3_errcode(kt_store_db(s)), what);
}

/* The ids to keep: the best `keep` valid records of each (workload, target). */
static const char keep_sql[] =
    "CREATE TEMP TABLE distill_keep AS SELECT id FROM ("
    "  SELECT id, row_number() OVER (PARTITION BY workload_key, target"
    "                                ORDER BY mean_cost, id) AS rank"
    "  FROM records WHERE error_code = 0 AND mean_cost IS NOT NULL)"
    " WHERE rank <= ?1";

int kt_store_distill(kt_store_t *s, int keep, int dry_run, kt_store_distill_t *out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (keep <= 0 || !out)
        return kt_err_set(KT_EINVAL, "distill: keep must be a positive count");
    memset(out, 0, sizeof *out);
    if ((rc = kt_store_tx_begin(s)) != 0)
        return kt_err_prefix("distill");
    int64_t active = 0;
    rc = query_int64(s, "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')", 0,
                     &active);
    if (rc == 0 && active > 0)
        rc = kt_err_set(KT_ESTATE,
                        "%lld job(s) queued or running: their progress is counted from the "
                        "records; cancel them or let them finish first",
                        (long long)active);
    if (rc == 0)
        rc = query_int64(s, "SELECT count(*) FROM records", 0, &out->records_before);
    if (rc == 0)
        rc = query_int64(s,
                         "SELECT count(*) FROM (SELECT 1 FROM records "
                         "GROUP BY workload_key, target)",
                         0, &out->workloads);
    if (rc == 0) {
        sqlite3_stmt *st = NULL;
        int r = sqlite3_prepare_v2(kt_store_db(s), keep_sql, -1, &st, NULL);
        if (r == SQLITE_OK) {
            sqlite3_bind_int(st, 1, keep);
            r = sqlite3_step(st);
        }
        sqlite3_finalize(st);
        if (r != SQLITE_DONE)
            rc = kt_store_db_err(s, r, "distill: choosing the records to keep");
    }
    if (rc == 0)
        rc = query_int64(s, "SELECT count(*) FROM temp.distill_keep", 0, &out->records_after);
    /* Count first so that the figure is the same whether or not dry. */
    if (rc == 0)
        rc = query_int64(s,
                         "SELECT count(*) FROM (SELECT DISTINCT workload_key, target, state_hash"
                         " FROM records r WHERE r.id NOT IN (SELECT id FROM temp.distill_keep)"
                         " AND NOT EXISTS (SELECT 1 FROM distilled d WHERE"
                         " d.workload_key = r.workload_key AND d.target = r.target"
                         " AND d.state_hash = r.state_hash))",
                         0, &out->states_remembered);
    if (rc == 0 && !dry_run)
        rc = exec(s,
                  "INSERT OR IGNORE INTO distilled(workload_key, target, state_hash)"
                  " SELECT workload_key, target, state_hash FROM records"
                  " WHERE id NOT IN (SELECT id FROM temp.distill_keep);"
                  "DELETE FROM records WHERE id NOT IN (SELECT id FROM temp.distill_keep);",
                  "distill: deleting records");
    int drop = exec(s, "DROP TABLE IF EXISTS temp.distill_keep", "distill: cleaning up");
    if (rc == 0)
        rc = drop;
    if (rc != 0 || dry_run) {
        kt_store_tx_rollback(s);
        return rc ? kt_err_prefix("distill") : 0;
    }
    return kt_store_tx_commit(s) ? kt_err_prefix("distill") : 0;
}

int kt_store_count_distilled(kt_store_t *s, const char *workload_key, const char *target,
                             int64_t *n)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!workload_key || !target || !n)
        return kt_err_set(KT_EINVAL, "store: count distilled needs a workload key and a target");
    *n = 0;
    if (kt_store_file_version(s) < 4)
        return 0;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(kt_store_db(s),
                            "SELECT count(*) FROM distilled WHERE workload_key = ?1 AND "
                            "target = ?2",
                            -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, workload_key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, target, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    int ret = 0;
    if (rc == SQLITE_ROW)
        *n = sqlite3_column_int64(st, 0);
    else
        ret = kt_store_db_err(s, rc, "store: counting distilled states");
    sqlite3_finalize(st);
    return ret;
}

/* Database pages in use plus the WAL's bytes. */
static int file_bytes(kt_store_t *s, int64_t *out)
{
    int64_t pages = 0, size = 0;
    int rc = query_int64(s, "PRAGMA page_count", 0, &pages);
    if (rc == 0)
        rc = query_int64(s, "PRAGMA page_size", 0, &size);
    if (rc != 0)
        return rc;
    *out = pages * size;
    const char *path = kt_store_path(s);
    if (strcmp(path, ":memory:") != 0) {
        char *wal = NULL;
        struct stat sb;
        if (asprintf(&wal, "%s-wal", path) >= 0 && stat(wal, &sb) == 0)
            *out += (int64_t)sb.st_size;
        free(wal);
    }
    return 0;
}

int kt_store_vacuum(kt_store_t *s, int64_t *before, int64_t *after)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (kt_store_file_version(s) < KT_STORE_SCHEMA_VERSION ||
        sqlite3_db_readonly(kt_store_db(s), "main") == 1)
        return kt_err_set(KT_ESTATE, "vacuum: needs a read-write handle");
    int64_t b = 0, a = 0;
    if ((rc = file_bytes(s, &b)) != 0)
        return kt_err_prefix("vacuum");
    /* TRUNCATE also empties the WAL file; a reader still in the WAL makes it
     * return busy, which VACUUM would then report anyway. */
    if ((rc = exec(s, "PRAGMA wal_checkpoint(TRUNCATE)", "vacuum: checkpoint")) != 0 ||
        (rc = exec(s, "VACUUM", "vacuum")) != 0 ||
        (rc = exec(s, "PRAGMA wal_checkpoint(TRUNCATE)", "vacuum: checkpoint")) != 0 ||
        (rc = file_bytes(s, &a)) != 0)
        return rc;
    if (before)
        *before = b;
    if (after)
        *after = a;
    return 0;
}

void kt_store_stats_clear(kt_store_stats_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->nkeys; i++)
        free(st->keys[i].key);
    free(st->keys);
    for (size_t i = 0; i < st->nmodels; i++) {
        free((char *)st->models[i].target);
        free((char *)st->models[i].device_key);
    }
    free(st->models);
    memset(st, 0, sizeof *st);
}

json_t *kt_store_stats_json(const kt_store_stats_t *st, const char *path)
{
    json_t *keys = json_array();
    for (size_t i = 0; keys && i < st->nkeys; i++)
        json_array_append_new(keys, json_pack("{s:s, s:I}", "key", st->keys[i].key, "records",
                                              (json_int_t)st->keys[i].records));
    json_t *models = json_array();
    for (size_t i = 0; models && i < st->nmodels; i++) {
        const kt_store_cost_model_t *m = &st->models[i];
        json_array_append_new(
            models, json_pack("{s:s, s:s, s:I, s:I, s:I, s:i, s:i, s:I, s:f}", "target",
                              m->target, "key", m->device_key, "version", (json_int_t)m->version,
                              "records", (json_int_t)m->records, "max_record_id",
                              (json_int_t)m->max_record_id, "feature_version",
                              m->feature_version, "format_version", m->format_version, "bytes",
                              (json_int_t)m->model_len, "created", m->created));
    }
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:o*, s:o*}", "path", path ? path : "",
                     "bytes", (json_int_t)st->bytes, "records", (json_int_t)st->records,
                     "valid", (json_int_t)st->valid, "workloads", (json_int_t)st->workloads,
                     "distilled", (json_int_t)st->distilled, "schema_version",
                     st->schema_version, "keys", keys, "cost_models", models);
}

static int read_keys(kt_store_t *s, kt_store_stats_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s),
                                "SELECT runner_key, count(*) AS n FROM records "
                                "GROUP BY runner_key ORDER BY n DESC, runner_key",
                                -1, &st, NULL);
    size_t cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->nkeys == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            kt_store_key_count_t *k = realloc(out->keys, ncap * sizeof *k);
            if (!k) {
                sqlite3_finalize(st);
                return kt_err_set(KT_ENOMEM, "store stats: out of memory");
            }
            out->keys = k;
            cap = ncap;
        }
        const unsigned char *key = sqlite3_column_text(st, 0);
        kt_store_key_count_t *k = &out->keys[out->nkeys];
        k->key = kt_strdup(key ? (const char *)key : "");
        k->records = sqlite3_column_int64(st, 1);
        if (!k->key) {
            sqlite3_finalize(st);
            return kt_err_set(KT_ENOMEM, "store stats: out of memory");
        }
        out->nkeys++;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : kt_store_db_err(s, rc, "store stats: records per key");
}

static int read_models(kt_store_t *s, kt_store_stats_t *out)
{
    int rc = kt_store_has_table(s, "cost_models");
    if (rc <= 0)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(kt_store_db(s),
                            "SELECT target, device_key, version, feature_version, format_version,"
                            " records, max_record_id, created, length(model) FROM cost_models"
                            " ORDER BY target, device_key",
                            -1, &st, NULL);
    size_t cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->nmodels == cap) {
            size_t ncap = cap ? 2 * cap : 4;
            kt_store_cost_model_t *v = realloc(out->models, ncap * sizeof *v);
            if (!v)
                break;
            out->models = v;
            cap = ncap;
        }
        kt_store_cost_model_t *m = &out->models[out->nmodels];
        memset(m, 0, sizeof *m);
        m->target = kt_strdup((const char *)sqlite3_column_text(st, 0));
        m->device_key = kt_strdup((const char *)sqlite3_column_text(st, 1));
        kt_store_cost_model_counts(st, 2, m);
        m->model_len = (size_t)sqlite3_column_int64(st, 8);
        out->nmodels++;
        if (!m->target || !m->device_key)
            break;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return kt_err_set(KT_ENOMEM, "store stats: out of memory");
    return rc == SQLITE_DONE ? 0 : kt_store_db_err(s, rc, "store stats: cost models");
}

int kt_store_stats(kt_store_t *s, kt_store_stats_t *out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!out)
        return kt_err_set(KT_EINVAL, "store stats: NULL output");
    memset(out, 0, sizeof *out);
    out->schema_version = kt_store_file_version(s);
    /* One read transaction, so the figures agree with each other. */
    if ((rc = exec(s, "BEGIN", "store stats")) != 0)
        return rc;
    rc = file_bytes(s, &out->bytes);
    if (rc == 0)
        rc = query_int64(s, "SELECT count(*) FROM records", 0, &out->records);
    if (rc == 0)
        rc = query_int64(s, "SELECT count(*) FROM records WHERE error_code = 0", 0, &out->valid);
    if (rc == 0)
        rc = query_int64(s, "SELECT count(*) FROM workloads", 0, &out->workloads);
    if (rc == 0 && out->schema_version >= 4)
        rc = query_int64(s, "SELECT count(*) FROM distilled", 0, &out->distilled);
    if (rc == 0)
        rc = read_keys(s, out);
    if (rc == 0)
        rc = read_models(s, out);
    exec(s, "COMMIT", "store stats");
    if (rc != 0)
        kt_store_stats_clear(out);
    return rc;
}
