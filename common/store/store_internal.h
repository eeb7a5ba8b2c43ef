/*
 * Private to common/store: what store.c lends records_json.c (the JSON lines
 * export and import), maintain.c and cost_models.c. Not installed, not for
 * other modules. Same ownership and thread rules as store.h.
 */
#ifndef KT_STORE_STORE_INTERNAL_H
#define KT_STORE_STORE_INTERNAL_H

#include <sqlite3.h>

#include "store/store.h"

/* The handle's connection (maintain.c runs its one-off statements on it). */
sqlite3 *kt_store_db(kt_store_t *s);
/* SQLite's result rc as a KT_E* code with the message "what: <sqlite's>". */
int kt_store_db_err(kt_store_t *s, int rc, const char *what);
/* The schema version of the open file (below KT_STORE_SCHEMA_VERSION only for
 * a read-only handle on an older file). */
int kt_store_file_version(const kt_store_t *s);

/* 1 when the open file has a table of this name, 0 when not (a read-only
 * handle on a file from before its migration), or a negative KT_E* code. */
int kt_store_has_table(kt_store_t *s, const char *name);

/* The counts of a cost_models row into m: version, feature_version,
 * format_version, records, max_record_id and created, selected in that
 * order from column col on. */
void kt_store_cost_model_counts(sqlite3_stmt *st, int col, kt_store_cost_model_t *m);

/* 0 when the handle may be used now (not NULL, not inside its own foreach
 * callback), else a KT_E* code with kt_err set. */
int kt_store_usable(kt_store_t *s);

/* Write transactions: BEGIN IMMEDIATE, COMMIT (rolls back when it fails),
 * ROLLBACK (a no-op outside a transaction). */
int kt_store_tx_begin(kt_store_t *s);
int kt_store_tx_commit(kt_store_t *s);
void kt_store_tx_rollback(kt_store_t *s);

/* 0 when r may be stored, KT_EINVAL naming the bad field otherwise. */
int kt_store_record_check(const kt_record_t *r);

/* Insert one checked record inside the caller's transaction; sets r->id and
 * r->mean_cost. */
int kt_store_insert_record(kt_store_t *s, kt_record_t *r);

/* 1 when a record with r's workload key, target, state hash and timestamp is
 * stored, 0 when not, or a negative KT_E* code. */
int kt_store_is_duplicate(kt_store_t *s, const kt_record_t *r);

/* The mean of n costs; NAN when n is 0. */
double kt_store_mean(const double *costs, int n);

/* 1 when s is well-formed UTF-8 as jansson accepts it, else 0. */
int kt_store_utf8_valid(const char *s);

#endif
