/* The cost model of each (target, device key): its row in cost_models (store.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "util/err.h"
#include "util/util.h"

int kt_store_has_table(kt_store_t *s, const char *name)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s),
                                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    int ret = rc == SQLITE_ROW    ? 1
              : rc == SQLITE_DONE ? 0
                                  : kt_store_db_err(s, rc, "store: looking up a table");
    sqlite3_finalize(st);
    return ret;
}

void kt_store_cost_model_counts(sqlite3_stmt *st, int col, kt_store_cost_model_t *m)
{
    m->version = sqlite3_column_int64(st, col);
    m->feature_version = sqlite3_column_int(st, col + 1);
    m->format_version = sqlite3_column_int(st, col + 2);
    m->records = sqlite3_column_int64(st, col + 3);
    m->max_record_id = sqlite3_column_int64(st, col + 4);
    m->created = sqlite3_column_double(st, col + 5);
}

/* The version the key's row has now, 0 when none. */
static int current_version(kt_store_t *s, const char *target, const char *key, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s),
                                "SELECT version FROM cost_models WHERE target = ?1 AND "
                                "device_key = ?2",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, target, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    int ret = rc == SQLITE_ROW || rc == SQLITE_DONE
                  ? 0
                  : kt_store_db_err(s, rc, "store: reading a cost model's version");
    sqlite3_finalize(st);
    return ret;
}

static int replace_row(kt_store_t *s, const kt_store_cost_model_t *m, int64_t version)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s),
                                "INSERT OR REPLACE INTO cost_models(target, device_key, version, "
                                "feature_version, format_version, records, max_record_id, "
                                "created, model) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, m->target, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, m->device_key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, version);
        sqlite3_bind_int(st, 4, m->feature_version);
        sqlite3_bind_int(st, 5, m->format_version);
        sqlite3_bind_int64(st, 6, m->records);
        sqlite3_bind_int64(st, 7, m->max_record_id);
        sqlite3_bind_double(st, 8, m->created);
        sqlite3_bind_blob64(st, 9, m->model, m->model_len, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    int ret = rc == SQLITE_DONE ? 0 : kt_store_db_err(s, rc, "store: writing a cost model");
    sqlite3_finalize(st);
    return ret;
}

int kt_store_put_cost_model(kt_store_t *s, kt_store_cost_model_t *m)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!m || !m->target || !*m->target || !m->device_key || !m->model || m->model_len == 0 ||
        m->records < 0 || m->max_record_id < 0 || !isfinite(m->created))
        return kt_err_set(KT_EINVAL, "store: a cost model needs a target, a device key, its "
                                     "bytes and counts >= 0");
    if ((rc = kt_store_tx_begin(s)) != 0)
        return kt_err_prefix("store: cost model");
    int64_t version = 0;
    rc = current_version(s, m->target, m->device_key, &version);
    if (rc == 0)
        rc = replace_row(s, m, version + 1);
    if (rc != 0) {
        kt_store_tx_rollback(s);
        return rc;
    }
    if ((rc = kt_store_tx_commit(s)) != 0)
        return rc;
    m->version = version + 1;
    return 0;
}

void kt_store_cost_model_free(kt_store_cost_model_t *m)
{
    if (!m)
        return;
    free((char *)m->target);
    free((char *)m->device_key);
    free((void *)m->model);
    free(m);
}

int kt_store_get_cost_model(kt_store_t *s, const char *target, const char *device_key,
                            kt_store_cost_model_t **out)
{
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!target || !device_key || !out)
        return kt_err_set(KT_EINVAL, "store: a cost model is looked up by target and key");
    *out = NULL;
    if ((rc = kt_store_has_table(s, "cost_models")) <= 0)
        return rc < 0 ? rc
                      : kt_err_set(KT_ENOTFOUND, "store: no cost model for %s on %s (the file "
                                                 "predates them)", target, device_key);
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(kt_store_db(s),
                            "SELECT version, feature_version, format_version, records, "
                            "max_record_id, created, model FROM cost_models "
                            "WHERE target = ?1 AND device_key = ?2",
                            -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, target, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, device_key, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? kt_err_set(KT_ENOTFOUND, "store: no cost model for %s on %s",
                                            target, device_key)
                               : kt_store_db_err(s, rc, "store: reading a cost model");
        sqlite3_finalize(st);
        return rc;
    }
    kt_store_cost_model_t *m = calloc(1, sizeof *m);
    size_t len = (size_t)sqlite3_column_bytes(st, 6);
    void *bytes = malloc(len ? len : 1);
    if (m) {
        m->target = kt_strdup(target);
        m->device_key = kt_strdup(device_key);
        m->model = bytes;
    }
    if (!m || !bytes || !m->target || !m->device_key) {
        if (!m)
            free(bytes);
        kt_store_cost_model_free(m);
        sqlite3_finalize(st);
        return kt_err_set(KT_ENOMEM, "store: out of memory");
    }
    kt_store_cost_model_counts(st, 0, m);
    if (len)
        memcpy(bytes, sqlite3_column_blob(st, 6), len);
    m->model_len = len;
    sqlite3_finalize(st);
    *out = m;
    return 0;
}
