/* The store model of a device key: trained on the key's records across
 * workloads, kept in the store's cost_models, read back (search.h, "the
 * store model of a device key"). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature.h"
#include "search/search.h"
#include "util/err.h"
#include "util/util.h"

/* One workload of the training records: its canonical text (read under the
 * store's lock) and, once parsed, the workload. */
typedef struct {
    char *key;
    char *canonical;          /* NULL: the store does not hold it */
    kt_workload_t *w;
} train_wl_t;

/* What a training reads from the store: the key's newest records and the
 * workloads they name. */
typedef struct {
    kt_record_list_t *recs;
    train_wl_t *wl;
    size_t nwl;
} train_data_t;

static void train_data_clear(train_data_t *d)
{
    for (size_t i = 0; i < d->nwl; i++) {
        free(d->wl[i].key);
        free(d->wl[i].canonical);
        kt_workload_free(d->wl[i].w);
    }
    free(d->wl);
    kt_record_list_free(d->recs);
    memset(d, 0, sizeof *d);
}

/* The index of key in d->wl, -1 when absent. */
static long wl_find(const train_data_t *d, const char *key)
{
    for (size_t i = 0; i < d->nwl; i++)
        if (strcmp(d->wl[i].key, key) == 0)
            return (long)i;
    return -1;
}

/* Under the store's lock: the records and their workloads' text. */
static int train_data_read(kt_store_t *s, const char *target, const char *key, train_data_t *d)
{
    int rc = kt_store_key_records(s, target, key, KT_SEARCH_STORE_MODEL_MAX, &d->recs);
    if (rc != 0)
        return rc;
    size_t cap = 0;
    for (size_t i = 0; i < d->recs->n && rc == 0; i++) {
        const char *wk = d->recs->items[i].workload_key;
        if (wl_find(d, wk) >= 0)
            continue;
        if (d->nwl == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            train_wl_t *v = realloc(d->wl, ncap * sizeof *v);
            if (!v)
                return kt_err_set(KT_ENOMEM, "out of memory");
            d->wl = v;
            cap = ncap;
        }
        train_wl_t *t = &d->wl[d->nwl++];
        memset(t, 0, sizeof *t);
        if (!(t->key = kt_strdup(wk)))
            return kt_err_set(KT_ENOMEM, "out of memory");
        rc = kt_store_get_workload(s, wk, &t->canonical, NULL);
        if (rc == KT_ENOTFOUND)   /* imported records: nothing to featurize them with */
            rc = 0;
    }
    kt_err_clear();
    return rc;
}

/* A growing training set of programs. */
typedef struct {
    float *rows;
    uint32_t *counts;
    double *costs;
    uint64_t *tasks;
    size_t n, nrows, cap, rows_cap;
} train_set_t;

static int set_add(train_set_t *t, const float *rows, uint32_t nrows, double cost, uint64_t task)
{
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 256;
        uint32_t *c = realloc(t->counts, nc * sizeof *c);
        if (c)
            t->counts = c;
        double *co = realloc(t->costs, nc * sizeof *co);
        if (co)
            t->costs = co;
        uint64_t *ta = realloc(t->tasks, nc * sizeof *ta);
        if (ta)
            t->tasks = ta;
        if (!c || !co || !ta)
            return kt_err_set(KT_ENOMEM, "out of memory");
        t->cap = nc;
    }
    if (t->nrows + nrows > t->rows_cap) {
        size_t nc = t->rows_cap ? 2 * t->rows_cap : 1024;
        while (nc < t->nrows + nrows)
            nc *= 2;
        float *r = realloc(t->rows, nc * KT_FEATURE_COUNT * sizeof *r);
        if (!r)
            return kt_err_set(KT_ENOMEM, "out of memory");
        t->rows = r;
        t->rows_cap = nc;
    }
    memcpy(t->rows + t->nrows * KT_FEATURE_COUNT, rows,
           (size_t)nrows * KT_FEATURE_COUNT * sizeof *rows);
    t->counts[t->n] = nrows;
    t->costs[t->n] = cost;
    t->tasks[t->n] = task;
    t->n++;
    t->nrows += nrows;
    return 0;
}

static void set_free(train_set_t *t)
{
    free(t->rows);
    free(t->counts);
    free(t->costs);
    free(t->tasks);
}

/* Outside the lock: features of every record whose workload the store holds
 * and whose state parses (another ktune's states may not), one task id per
 * workload key so that labels are normalized per workload. */
static int train_set_make(train_data_t *d, train_set_t *t)
{
    for (size_t i = 0; i < d->nwl; i++)
        if (d->wl[i].canonical && !(d->wl[i].w = kt_workload_parse(d->wl[i].canonical)))
            kt_err_clear();   /* a workload this ktune cannot read: its records are skipped */
    int rc = 0;
    for (size_t i = 0; i < d->recs->n && rc == 0; i++) {
        const kt_record_t *r = &d->recs->items[i];
        long k = wl_find(d, r->workload_key);
        const kt_workload_t *w = k >= 0 ? d->wl[k].w : NULL;
        kt_sched_state_t *st = w ? kt_sched_state_from_json(r->state_json, kt_workload_dag(w),
                                                            NULL)
                                 : NULL;
        float *rows = NULL;
        uint32_t nrows = 0;
        if (st && kt_feature_extract(kt_workload_dag(w), st, &rows, &nrows) == 0) {
            double cost = r->error_code == 0 && isfinite(r->mean_cost) ? r->mean_cost : INFINITY;
            rc = set_add(t, rows, nrows, cost, (uint64_t)k);
        }
        free(rows);
        kt_sched_state_free(st);
    }
    kt_err_clear();
    return rc;
}

/* The model the store keeps for a key: the search's xgb parameters (rank
 * labels, hist trees), seed 43, trusted as soon as it trained. */
static void store_model_params(kt_model_params_t *mp)
{
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    kt_search_model_params(&o, 43, mp);
    mp->num_warmup_sample = 0;
}

static void note(kt_search_store_model_t *out, int warn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append to out's note ("; " between the steps): what happened, for the log. */
static void note(kt_search_store_model_t *out, int warn, const char *fmt, ...)
{
    size_t len = strlen(out->note);
    if (len > 0 && len + 2 < sizeof out->note) {
        memcpy(out->note + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->note + len, sizeof out->note - len, fmt, ap);
    va_end(ap);
    out->warn |= warn;
}

static kt_store_t *take(const kt_search_store_ref_t *ref)
{
    if (ref->lock)
        ref->lock(ref->user);
    return ref->store;
}

static void give(const kt_search_store_ref_t *ref)
{
    if (ref->unlock)
        ref->unlock(ref->user);
}

/* The row's model when this ktune can use it, else NULL with why in *out. */
static kt_model_t *row_model(const kt_store_cost_model_t *row, kt_search_store_model_t *out)
{
    if (row->feature_version != KT_FEATURE_VERSION) {
        note(out, 0, "stored model v%" PRId64 " has feature version %d, this ktune %d",
             row->version, row->feature_version, KT_FEATURE_VERSION);
        return NULL;
    }
    if (row->format_version > KT_MODEL_FILE_VERSION) {
        note(out, 0, "stored model v%" PRId64 " has model format %d, this ktune reads %d",
             row->version, row->format_version, KT_MODEL_FILE_VERSION);
        return NULL;
    }
    kt_model_t *m = kt_model_from_buffer(row->model, row->model_len);
    if (m && (strcmp(kt_model_kind(m), KT_MODEL_XGB) != 0 || !kt_model_is_trained(m) ||
              kt_model_prior(m))) {
        kt_err_set(KT_EINVAL, "not a trained xgb model");
        kt_model_free(m);
        m = NULL;
    }
    if (!m)
        note(out, 1, "stored model v%" PRId64 " is unreadable (%s)", row->version, kt_err_msg());
    return m;
}

/* Train on the data, outside the lock; NULL (and a note) when it cannot. */
static kt_model_t *train(train_data_t *d, const atomic_int *stop, int64_t *used,
                         kt_search_store_model_t *out)
{
    train_set_t t = {0};
    kt_model_t *m = NULL;
    int rc = train_set_make(d, &t);
    if (rc == 0 && t.n < KT_SEARCH_STORE_MODEL_MIN) {
        note(out, 0, "%zu of the key's records are usable, fewer than %d", t.n,
             KT_SEARCH_STORE_MODEL_MIN);
    } else if (rc == 0) {
        kt_model_params_t mp;
        store_model_params(&mp);
        kt_model_batch_t b = {.rows = t.rows, .nrows = t.counts, .nprog = t.n,
                              .nfeat = KT_FEATURE_COUNT};
        if ((m = kt_model_new(KT_MODEL_XGB, &mp)))
            kt_model_set_stop(m, stop);
        if (!m || (rc = kt_model_update(m, &b, t.costs, t.tasks)) != 0 || !kt_model_is_trained(m)) {
            if (rc == 0 && m)
                kt_err_set(KT_ESTATE, "no valid program among them");
            note(out, 1, "training on %zu records failed: %s", t.n, kt_err_msg());
            kt_model_free(m);
            m = NULL;
        }
        *used = (int64_t)t.n;
    } else {
        note(out, 1, "reading the training records failed: %s", kt_err_msg());
    }
    set_free(&t);
    return m;
}

int kt_search_store_model(const kt_search_store_ref_t *ref, const char *target,
                          const char *key, int flags, kt_search_store_model_t *out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "store model: no output");
    memset(out, 0, sizeof *out);
    if (!ref || !ref->store || !target || !key)
        return kt_err_set(KT_EINVAL, "store model: needs a store, a target and a device key");

    /* 1. the row, and the model in it when it is of this ktune */
    kt_store_cost_model_t *row = NULL;
    int rc = kt_store_get_cost_model(take(ref), target, key, &row);
    give(ref);
    if (rc != 0 && rc != KT_ENOTFOUND) {
        note(out, 1, "reading the stored model failed: %s", kt_err_msg());
        return 0;
    }
    kt_model_t *m = NULL;
    if (row && (m = row_model(row, out))) {
        out->version = row->version;
        out->records = row->records;
    }
    if (!row)
        note(out, 0, "no stored model");

    /* 2. stale: no usable model, or enough records newer than it */
    int64_t seen = m ? row->max_record_id : 0, newer = 0;
    int64_t need = KT_SEARCH_STORE_MODEL_MIN;
    if (m) {
        need = (int64_t)ceil(KT_SEARCH_STORE_MODEL_NEW_SHARE * (double)row->records);
        if (need < KT_SEARCH_STORE_MODEL_NEW)
            need = KT_SEARCH_STORE_MODEL_NEW;
    }
    train_data_t d = {0};
    int stale = 0;
    if ((flags & KT_SEARCH_STORE_MODEL_TRAIN) || ((flags & KT_SEARCH_STORE_MODEL_BUILD) && !m)) {
        kt_store_t *s = take(ref);
        rc = kt_store_count_key_records(s, target, key, seen, &newer, NULL);
        stale = rc == 0 && newer >= need;
        if (stale && (rc = train_data_read(s, target, key, &d)) != 0)
            stale = 0;
        give(ref);
        if (rc != 0)
            note(out, 1, "reading the key's records failed: %s", kt_err_msg());
        else if (!stale && !m)
            note(out, 0, "%" PRId64 " records of the key, fewer than %" PRId64, newer, need);
        else if (!stale)
            note(out, 0, "stored model v%" PRId64 " (%" PRId64 " records, %" PRId64 " newer)",
                 row->version, row->records, newer);
    }

    /* 3. train outside the lock, then store it as the key's next version */
    if (stale) {
        int64_t used = 0;
        kt_model_t *fresh = train(&d, ref->stop, &used, out);
        char *bytes = NULL;
        size_t len = 0;
        if (fresh && kt_model_to_buffer(fresh, &bytes, &len) == 0) {
            kt_store_cost_model_t nrow = {.target = target, .device_key = key,
                                          .feature_version = KT_FEATURE_VERSION,
                                          .format_version = KT_MODEL_FILE_VERSION,
                                          .records = used,
                                          .max_record_id = d.recs->items[0].id,
                                          .created = kt_time_wall(), .model = bytes,
                                          .model_len = len};
            rc = kt_store_put_cost_model(take(ref), &nrow);
            give(ref);
            if (rc != 0)
                note(out, 1, "trained on %" PRId64 " records, not stored: %s", used,
                     kt_err_msg());
            else
                note(out, 0, "trained v%" PRId64 " on %" PRId64 " records (%" PRId64 " new)",
                     nrow.version, used, newer);
            out->version = rc == 0 ? nrow.version : 0;
            out->records = used;
            out->trained = 1;
            kt_model_free(m);
            m = fresh;
        } else if (fresh) {
            note(out, 1, "serializing the trained model failed: %s", kt_err_msg());
            kt_model_free(fresh);
        }
        free(bytes);
    } else if (m && !(flags & KT_SEARCH_STORE_MODEL_TRAIN)) {   /* not counted */
        note(out, 0, "stored model v%" PRId64 " (%" PRId64 " records)", row->version,
             row->records);
    }
    train_data_clear(&d);
    kt_store_cost_model_free(row);
    if (flags & KT_SEARCH_STORE_MODEL_LOAD)
        out->model = m;
    else
        kt_model_free(m);
    return 0;
}

void kt_search_store_model_clear(kt_search_store_model_t *m)
{
    if (m) {
        kt_model_free(m->model);
        m->model = NULL;
    }
}
