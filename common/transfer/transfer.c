/* Schedule transfer: shape distance, nearest stored workloads and their best
 * states re-fitted to a task (transfer.h states the contract). */
#include "transfer/transfer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/verify.h"
#include "util/err.h"
#include "util/util.h"

/* ---- shape distance -------------------------------------------------------- */

static double value_distance(const char *key, const json_t *a, const json_t *b);

/* An epilogue entry's kind: the string itself, or an object's "op". */
static const char *epilogue_kind(const json_t *e)
{
    if (json_is_string(e))
        return json_string_value(e);
    if (json_is_object(e))
        return json_string_value(json_object_get(e, "op"));
    return NULL;
}

/* Epilogues that read no tensor but their input (relu, clip, gelu, sigmoid,
 * tanh) each add one elementwise stage that a schedule inlines, so a state
 * of one fits a workload of another: they differ in kind at a cost, where
 * bias_add, add and multiply read a tensor (one more stage) and must match. */
static int epilogue_unary(const char *k)
{
    static const char *const unary[] = {"relu", "relu6", "clip", "gelu", "sigmoid", "tanh"};
    for (size_t i = 0; i < KT_ARRAY_LEN(unary); i++)
        if (strcmp(k, unary[i]) == 0)
            return 1;
    return 0;
}

static double epilogue_distance(const json_t *a, const json_t *b)
{
    if (!json_is_array(a) || !json_is_array(b) || json_array_size(a) != json_array_size(b))
        return INFINITY;
    double d = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *x = epilogue_kind(json_array_get(a, i)), *y = epilogue_kind(json_array_get(b, i));
        if (!x || !y)
            return INFINITY;
        if (strcmp(x, y) == 0)
            continue;
        if (!epilogue_unary(x) || !epilogue_unary(y))
            return INFINITY;
        d += KT_TRANSFER_EPILOGUE_DISTANCE;
    }
    return d;
}

/* Padding in its 2-value (symmetric) or 4-value form, as 4 values. */
static int padding4(const json_t *v, json_int_t *out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (n != 2 && n != 4))
        return 0;
    for (size_t i = 0; i < 4; i++) {
        const json_t *x = json_array_get(v, n == 2 ? i % 2 : i);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return 0;
        out[i] = json_integer_value(x);
    }
    return 1;
}

static double padding_distance(const json_t *a, const json_t *b)
{
    json_int_t x[4], y[4];
    if (!padding4(a, x) || !padding4(b, y))
        return INFINITY;
    int zx = 1, zy = 1;
    double d = 0;
    for (int i = 0; i < 4; i++) {
        zx &= x[i] == 0;
        zy &= y[i] == 0;
        d += fabs(log((double)(x[i] + 1) / (double)(y[i] + 1)));
    }
    return zx != zy ? INFINITY : d;
}

static double array_distance(const char *key, const json_t *a, const json_t *b)
{
    if (json_array_size(a) != json_array_size(b))
        return INFINITY;
    double d = 0;
    for (size_t i = 0; i < json_array_size(a) && isfinite(d); i++)
        d += value_distance(key, json_array_get(a, i), json_array_get(b, i));
    return d;
}

static double object_distance(const json_t *a, const json_t *b)
{
    double d = 0;
    const char *k;
    json_t *va;
    json_object_foreach((json_t *)a, k, va) {
        const json_t *vb = json_object_get(b, k);
        if (!vb)
            d += strcmp(k, "epilogue") == 0 && json_array_size(va) == 0 ? 0 : INFINITY;
        else
            d += value_distance(k, va, vb);
    }
    json_t *vb;
    json_object_foreach((json_t *)b, k, vb)
        if (!json_object_get(a, k))
            d += strcmp(k, "epilogue") == 0 && json_array_size(vb) == 0 ? 0 : INFINITY;
    return d;
}

static double value_distance(const char *key, const json_t *a, const json_t *b)
{
    if (strcmp(key, "epilogue") == 0)
        return epilogue_distance(a, b);
    if (strcmp(key, "padding") == 0)
        return padding_distance(a, b);
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        if (x == y)
            return 0;
        /* Winograd's tile size makes other stages, not other extents */
        if (strcmp(key, "tile_size") == 0 || x <= 0 || y <= 0)
            return INFINITY;
        return fabs(log((double)x / (double)y));
    }
    if (json_is_number(a) && json_is_number(b))
        return 0;   /* a real (epsilon) is no shape */
    if (json_is_array(a) && json_is_array(b))
        return array_distance(key, a, b);
    if (json_is_object(a) && json_is_object(b))
        return object_distance(a, b);
    return json_equal((json_t *)a, (json_t *)b) ? 0 : INFINITY;
}

double kt_transfer_distance_json(const char *a, const char *b)
{
    json_t *x = a ? json_loads(a, 0, NULL) : NULL, *y = b ? json_loads(b, 0, NULL) : NULL;
    double d = json_is_object(x) && json_is_object(y) ? object_distance(x, y) : INFINITY;
    json_decref(x);
    json_decref(y);
    return d;
}

double kt_transfer_distance(const kt_workload_t *a, const kt_workload_t *b)
{
    if (!a || !b)
        return INFINITY;
    return kt_transfer_distance_json(kt_workload_json(a), kt_workload_json(b));
}

/* ---- re-fit ------------------------------------------------------------------ */

kt_sched_state_t *kt_transfer_refit(const kt_workload_t *src, const char *state_json,
                                    const kt_dag_t *dag, const kt_sched_params_t *p)
{
    if (!src || !state_json || !dag) {
        kt_err_set(KT_EINVAL, "re-fit: missing workload, state or DAG");
        return NULL;
    }
    kt_sched_state_t *a = kt_sched_state_from_json(state_json, kt_workload_dag(src), p);
    if (!a) {
        kt_err_prefix("re-fit: the stored state does not parse against its own workload");
        return NULL;
    }
    kt_sched_state_t *b = kt_sched_refit(kt_workload_dag(src), a, dag, p);
    kt_sched_state_free(a);
    return b;
}

/* ---- nearest workloads ------------------------------------------------------- */

void kt_transfer_neighbors_free(kt_transfer_neighbor_t *v, int n)
{
    for (int i = 0; v && i < n; i++) {
        free(v[i].key);
        free(v[i].canonical);
    }
    free(v);
}

static int cmp_neighbor(const void *x, const void *y)
{
    const kt_transfer_neighbor_t *a = x, *b = y;
    if (a->distance != b->distance)
        return a->distance < b->distance ? -1 : 1;
    return strcmp(a->key, b->key);
}

int kt_transfer_nearest(kt_store_t *s, const kt_workload_t *w, const char *target,
                        const char *runner_key, int max, kt_transfer_neighbor_t **out, int *n)
{
    if (!out || !n)
        return kt_err_set(KT_EINVAL, "transfer: no output");
    *out = NULL;
    *n = 0;
    if (!s || !w || !target || max < 1)
        return kt_err_set(KT_EINVAL, "transfer: nearest workloads need a store, a workload, a "
                                     "target and max >= 1");
    kt_store_workload_t *wl = NULL;
    size_t nwl = 0;
    int rc = kt_store_list_workloads(s, target, runner_key, &wl, &nwl);
    if (rc)
        return rc;
    kt_transfer_neighbor_t *v = nwl ? calloc(nwl, sizeof *v) : NULL;
    if (nwl && !v) {
        kt_store_workloads_free(wl, nwl);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    json_t *self = json_loads(kt_workload_json(w), 0, NULL);
    int k = 0;
    for (size_t i = 0; self && i < nwl; i++) {
        if (strcmp(wl[i].key, kt_workload_key(w)) == 0)
            continue;
        json_t *o = json_loads(wl[i].canonical, 0, NULL);
        double d = json_is_object(o) ? object_distance(self, o) : INFINITY;
        json_decref(o);
        if (!isfinite(d))
            continue;
        /* the strings move over: wl's entries are freed without them */
        v[k++] = (kt_transfer_neighbor_t){.key = wl[i].key, .canonical = wl[i].canonical,
                                          .distance = d};
        wl[i].key = wl[i].canonical = NULL;
    }
    json_decref(self);
    kt_store_workloads_free(wl, nwl);
    if (k > 1)
        qsort(v, (size_t)k, sizeof *v, cmp_neighbor);
    for (int i = max; i < k; i++) {
        free(v[i].key);
        free(v[i].canonical);
    }
    if (k > max)
        k = max;
    if (k == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = k;
    return 0;
}

/* ---- re-fitted states of the nearest workloads ------------------------------- */

void kt_transfer_set_clear(kt_transfer_set_t *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++) {
        kt_sched_state_free(set->items[i].state);
        free(set->items[i].source_key);
    }
    free(set->items);
    memset(set, 0, sizeof *set);
}

static void note_drop(kt_transfer_set_t *set, const char *key, const kt_record_t *r)
{
    set->dropped++;
    if (set->nreasons < KT_TRANSFER_MAX_REASONS)
        snprintf(set->reasons[set->nreasons++], sizeof set->reasons[0],
                 "record %lld of %.60s: %s", (long long)r->id, key, kt_err_msg());
}

int kt_transfer_gather(kt_store_t *s, const kt_workload_t *w, const char *target,
                       const char *runner_key, const kt_sched_params_t *p, int count,
                       int nworkloads, kt_transfer_set_t *out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "transfer: no output");
    memset(out, 0, sizeof *out);
    if (count < 0 || nworkloads < 1)
        return kt_err_set(KT_EINVAL, "transfer: count must be >= 0 and nworkloads >= 1");
    if (count == 0)
        return 0;
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    kt_transfer_neighbor_t *nb = NULL;
    int nn = 0;
    int rc = kt_transfer_nearest(s, w, target, runner_key, nworkloads, &nb, &nn);
    if (rc)
        return rc;
    out->nworkloads = nn;
    /* per neighbor its re-fitted states, best record first */
    kt_transfer_cand_t **per = nn ? calloc((size_t)nn, sizeof *per) : NULL;
    int *nper = nn ? calloc((size_t)nn, sizeof *nper) : NULL;
    if (nn && (!per || !nper))
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < nn; i++) {
        kt_workload_t *src = kt_workload_parse(nb[i].canonical);
        if (!src) {
            /* a workload this ktune no longer reads: its records cannot help */
            kt_err_prefix("transfer: stored workload %.60s", nb[i].key);
            out->dropped++;
            if (out->nreasons < KT_TRANSFER_MAX_REASONS)
                snprintf(out->reasons[out->nreasons++], sizeof out->reasons[0], "%s",
                         kt_err_msg());
            continue;
        }
        kt_record_list_t *recs = NULL;
        rc = kt_store_top_k_key(s, nb[i].key, target, runner_key, count, &recs);
        if (rc == 0 && recs->n > 0 && !(per[i] = calloc(recs->n, sizeof **per)))
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        for (size_t r = 0; rc == 0 && r < recs->n; r++) {
            out->nrecords++;
            kt_sched_state_t *st = kt_transfer_refit(src, recs->items[r].state_json,
                                                     kt_workload_dag(w), p);
            if (!st) {
                note_drop(out, nb[i].key, &recs->items[r]);
                continue;
            }
            kt_transfer_cand_t *c = &per[i][nper[i]];
            *c = (kt_transfer_cand_t){.state = st,
                                      .hash = kt_sched_state_hash(st, kt_workload_dag(w)),
                                      .source_key = kt_strdup(nb[i].key),
                                      .distance = nb[i].distance,
                                      .record_id = recs->items[r].id,
                                      .source_cost = recs->items[r].mean_cost,
                                      .rank = (int)r};
            nper[i]++;
            if (!c->hash || !c->source_key)
                rc = kt_err_set(KT_ENOMEM, "out of memory");
        }
        kt_record_list_free(recs);
        kt_workload_free(src);
    }
    /* rounds of ranks, nearest workload first, distinct states */
    if (rc == 0 && !(out->items = calloc((size_t)count, sizeof *out->items)))
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    for (int r = 0, more = 1; rc == 0 && more && out->n < count; r++) {
        more = 0;
        for (int i = 0; i < nn && out->n < count; i++) {
            if (r >= nper[i])
                continue;
            more = 1;
            kt_transfer_cand_t *c = &per[i][r];
            int dup = 0;
            for (int k = 0; k < out->n && !dup; k++)
                dup = out->items[k].hash == c->hash;
            if (dup)
                continue;
            out->items[out->n++] = *c;
            c->state = NULL;
            c->source_key = NULL;
        }
    }
    for (int i = 0; i < nn; i++) {
        for (int r = 0; per && r < nper[i]; r++) {
            kt_sched_state_free(per[i][r].state);
            free(per[i][r].source_key);
        }
        if (per)
            free(per[i]);
    }
    free(per);
    free(nper);
    kt_transfer_neighbors_free(nb, nn);
    if (rc)
        kt_transfer_set_clear(out);
    return rc;
}

int kt_transfer_seed(kt_search_policy_t *sp, kt_store_t *s, const kt_workload_t *w,
                     const char *target, const char *runner_key, int count, int nworkloads,
                     kt_transfer_set_t *info)
{
    kt_transfer_set_t set;
    if (info)
        memset(info, 0, sizeof *info);
    if (!sp)
        return kt_err_set(KT_EINVAL, "transfer: no policy");
    int rc = kt_transfer_gather(s, w, target, runner_key, kt_search_params(sp), count,
                                nworkloads, &set);
    if (rc)
        return rc;
    kt_sched_state_t **v = set.n ? malloc((size_t)set.n * sizeof *v) : NULL;
    if (set.n && !v) {
        kt_transfer_set_clear(&set);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (int i = 0; i < set.n; i++)
        v[i] = set.items[i].state;
    rc = kt_search_seed(sp, v, set.n);
    free(v);
    if (info)
        *info = set;
    else
        kt_transfer_set_clear(&set);
    return rc;
}

void kt_transfer_cand_clear(kt_transfer_cand_t *c)
{
    if (!c)
        return;
    kt_sched_state_free(c->state);
    free(c->source_key);
    memset(c, 0, sizeof *c);
}

int kt_transfer_zero_shot(kt_store_t *s, const kt_workload_t *w, const char *target,
                          const char *runner_key, const kt_sched_params_t *p, int count,
                          int nworkloads, uint64_t seed, kt_transfer_cand_t *out, int *tried,
                          char *why, size_t whylen)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "transfer: no output");
    memset(out, 0, sizeof *out);
    if (tried)
        *tried = 0;
    if (why && whylen)
        why[0] = '\0';
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    if (p->target == KT_SCHED_TARGET_CUDA)
        return kt_err_set(KT_EUNSUP, "transfer: a zero-shot kernel is checked on the CPU; a "
                                     "cuda kernel's check needs the device");
    kt_transfer_set_t set;
    int rc = kt_transfer_gather(s, w, target, runner_key, p, count, nworkloads, &set);
    if (rc)
        return rc;
    if (why && whylen && set.nreasons > 0)
        snprintf(why, whylen, "%s", set.reasons[0]);
    kt_codegen_ref_t *ref = NULL;
    int found = 0;
    for (int i = 0; i < set.n && !found && rc == 0; i++) {
        if (!ref && !(ref = kt_codegen_ref_new(kt_workload_dag(w), seed))) {
            rc = kt_err_code() ? kt_err_code() : KT_ENOMEM;
            break;
        }
        kt_search_candidate_t cand = {0};
        double err = INFINITY;
        int ok = kt_search_candidate_make(w, set.items[i].state, NULL, &cand) == 0 &&
                 kt_codegen_ref_check(ref, cand.source, cand.entry, &err) == 0;
        kt_search_candidate_clear(&cand);
        if (tried)
            (*tried)++;
        if (ok) {
            *out = set.items[i];
            set.items[i].state = NULL;
            set.items[i].source_key = NULL;
            found = 1;
        } else if (why && whylen && !why[0]) {
            /* a re-fitted state is only a guess until it is checked */
            snprintf(why, whylen, "the state from record %lld of %.60s failed its check: %s",
                     (long long)set.items[i].record_id, set.items[i].source_key, kt_err_msg());
        }
    }
    kt_codegen_ref_free(ref);
    kt_transfer_set_clear(&set);
    return rc ? rc : found;
}

int kt_transfer_fill(kt_store_t *s, const kt_workload_t *const *wl, const int *skip, int n,
                     const char *target, const kt_sched_params_t *p, char **states,
                     char **origin)
{
    if (n < 0 || (n > 0 && (!wl || !states || !origin)))
        return kt_err_set(KT_EINVAL, "transfer: bad arguments");
    int filled = 0;
    for (int i = 0; i < n; i++) {
        if (states[i] || (skip && skip[i]))
            continue;
        kt_transfer_cand_t c;
        char why[300], from[400];
        int rc = kt_transfer_zero_shot(s, wl[i], target, NULL, p, 8, 4, (uint64_t)i, &c, NULL,
                                       why, sizeof why);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            snprintf(from, sizeof from, "nothing stored to re-fit%s%s", why[0] ? ": " : "", why);
            if (!(origin[i] = kt_strdup(from)))
                return kt_err_set(KT_ENOMEM, "out of memory");
            continue;
        }
        snprintf(from, sizeof from,
                 "re-fitted from record %lld (%.4f ms) of workload %s at shape distance %.3g, "
                 "checked against the reference",
                 (long long)c.record_id, c.source_cost * 1e3, c.source_key, c.distance);
        states[i] = kt_sched_state_to_json(c.state, kt_workload_dag(wl[i]));
        origin[i] = kt_strdup(from);
        kt_transfer_cand_clear(&c);
        if (!states[i] || !origin[i])
            return kt_err_set(KT_ENOMEM, "out of memory");
        filled++;
    }
    return filled;
}
