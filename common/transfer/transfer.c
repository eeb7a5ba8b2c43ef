/* Schedule transfer: shape distance, nearest stored workloads and their best
 * states re-fitted to a task (transfer.h states the contract). */
#include "transfer/transfer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "measure/builder.h"
#include "measure/measurer.h"
#include "measure/runner.h"
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
 * tanh, hardswish, hardsigmoid, silu) each add one elementwise stage that a schedule inlines, so a state
 * of one fits a workload of another: they differ in kind at a cost, where
 * bias_add, add and multiply read a tensor (one more stage) and must match. */
static int epilogue_unary(const char *k)
{
    static const char *const unary[] = {"relu", "relu6", "clip", "gelu", "sigmoid",
                                          "tanh", "hardswish", "hardsigmoid", "silu"};
    for (size_t i = 0; i < KT_ARRAY_LEN(unary); i++)
        if (strcmp(k, unary[i]) == 0)
            return 1;
    return 0;
}

static double epilogue_distance(const json_t *a, const json_t *b)
{
    if (!json_is_array(a) || !json_is_array(b))
        return INFINITY;
    size_t na = json_array_size(a), nb = json_array_size(b), n = na < nb ? na : nb;
    double d = 0;
    if (na != nb) {
        /* one more trailing unary epilogue re-fits (kt_sched_retail) where
         * the shorter list has an output stage of its own to hand over */
        const json_t *longer = na > nb ? a : b;
        const char *last = epilogue_kind(json_array_get(longer, n));
        if (n == 0 || (na > nb ? na - nb : nb - na) != 1 || !last || !epilogue_unary(last))
            return INFINITY;
        d += KT_TRANSFER_EPILOGUE_DISTANCE;
    }
    for (size_t i = 0; i < n; i++) {
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

/* src with one unary epilogue appended (a relu: a schedule does not look
 * inside an elementwise stage) or its last one, unary, dropped. NULL with a
 * message when src has no epilogue to extend or drop. */
static kt_workload_t *tail_workload(const kt_workload_t *src, int grow)
{
    json_t *o = json_loads(kt_workload_json(src), 0, NULL);
    json_t *ep = json_object_get(o, "epilogue");
    size_t n = json_array_size(ep);
    const char *last = n ? epilogue_kind(json_array_get(ep, n - 1)) : NULL;
    kt_workload_t *w = NULL;
    if (!json_is_array(ep) || n == 0 || (!grow && (!last || !epilogue_unary(last))))
        kt_err_set(KT_EINVAL, "re-fit: the state's workload has %s", grow || n == 0
                   ? "no epilogue whose output stage a longer one could take over"
                   : "no unary epilogue at its end to drop");
    else if (grow ? json_array_append_new(ep, json_string("relu")) : json_array_remove(ep, n - 1))
        kt_err_set(KT_ENOMEM, "out of memory");
    else {
        char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        w = text ? kt_workload_parse(text) : NULL;
        if (!text)
            kt_err_set(KT_ENOMEM, "out of memory");
        free(text);
    }
    json_decref(o);
    return w;
}

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
    int n = kt_dag_num_stages(kt_workload_dag(src)), m = kt_dag_num_stages(dag);
    kt_workload_t *mid = NULL;
    if (m == n + 1 || m + 1 == n) {
        /* one unary epilogue more or less: first the state of src with the
         * task's epilogue count, at src's shapes */
        mid = tail_workload(src, m > n);
        kt_sched_state_t *t = mid ? kt_sched_retail(kt_workload_dag(src), a, kt_workload_dag(mid), p)
                                  : NULL;
        kt_sched_state_free(a);
        if (!t) {
            kt_workload_free(mid);
            return NULL;
        }
        a = t;
    }
    kt_sched_state_t *b = kt_sched_refit(kt_workload_dag(mid ? mid : src), a, dag, p);
    kt_sched_state_free(a);
    kt_workload_free(mid);
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

int kt_transfer_model_rank(const kt_workload_t *w, kt_model_t *model,
                           const kt_sched_params_t *p, uint64_t seed, int n,
                           kt_sched_state_t ***out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "transfer: no output");
    *out = NULL;
    if (!w || !model || !kt_model_is_trained(model) || n < 1)
        return kt_err_set(KT_EINVAL, "transfer: ranking needs a workload, a trained model and "
                                     "n >= 1");
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    o.seed = seed;
    o.eps_greedy = 0;   /* the model's picks only: nothing is measured */
    o.evolutionary_search_population = KT_TRANSFER_PICK_POPULATION;
    kt_search_policy_t *sp = kt_search_policy_new(w, p, &o, model, 0);
    if (!sp)
        return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    int got = kt_search_propose(sp, n, out);
    kt_search_policy_free(sp);
    return got;
}

/* ---- candidates timed in a process of their own ------------------------------ */

/*
 * A process that has run XGBoost holds an OpenMP thread pool, and a child
 * it forks hangs in its first parallel region (libgomp is not fork-safe).
 * A zero-shot build times its candidates in forked children, and they are
 * parallel, so every candidate goes to a timer: a child forked before the
 * store model loads, which never loads one and runs no kernel itself (the
 * runner forks for each). It reads "TASK N\n" and N times "LEN\n" and LEN
 * bytes of state JSON, and answers a line per state: "1 SECONDS" (built,
 * checked against the reference, mean time) or "0 REASON"; it exits at the
 * end of its input.
 */
typedef struct {
    pid_t pid;
    FILE *req, *rep;
} cand_timer_t;

/* The most states one request times. */
#define TIMER_MAX_BATCH 64

/* Time `k` states of w (k <= TIMER_MAX_BATCH) on this machine, as a network
 * job measures a CPU task (weights flushed, checked); write the answers. */
static void timer_batch(FILE *out, kt_measurer_t *m, const kt_workload_t *w,
                        kt_sched_state_t **st, int k)
{
    kt_sched_state_t *ok[TIMER_MAX_BATCH];
    kt_measure_result_t res[TIMER_MAX_BATCH];
    int nok = 0;
    for (int j = 0; j < k; j++)
        if (st[j])
            ok[nok++] = st[j];
    memset(res, 0, sizeof res);
    int rc = nok > 0 ? kt_search_measure_local(m, w, ok, nok, res) : 0;
    for (int j = 0, r = 0; j < k; j++) {
        if (!st[j])
            fputs("0 not a state of the task\n", out);
        else if (rc < 0)
            fprintf(out, "0 %.400s\n", kt_err_msg());
        else if (res[r].error_no == KT_MEASURE_NO_ERROR)
            fprintf(out, "1 %.9g\n", res[r].mean);
        else
            fprintf(out, "0 %s: %.380s\n", kt_measure_error_name(res[r].error_no),
                    res[r].error_msg ? res[r].error_msg : "");
        r += st[j] != NULL;
    }
    for (int r = 0; r < nok; r++)
        kt_measure_result_clear(&res[r]);
    fflush(out);
}

static void timer_serve(FILE *in, FILE *out, const kt_workload_t *const *wl, int n,
                        const kt_sched_params_t *p)
{
    kt_builder_opts_t bo;
    kt_builder_opts_default(&bo);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.repeat = 3;
    ro.flush_weights = 1;   /* a network's weights come from memory, as its jobs time them */
    ro.check_correctness = 1;
    kt_builder_t *b = kt_builder_new(&bo);
    kt_runner_t *r = b ? kt_runner_new(&ro) : NULL;
    kt_measurer_t *m = r ? kt_measurer_new(b, r, -1) : NULL;
    int task, k;
    while (m && fscanf(in, "%d %d", &task, &k) == 2 && fgetc(in) == '\n' && task >= 0 &&
           task < n && k >= 1 && k <= TIMER_MAX_BATCH) {
        kt_sched_state_t *st[TIMER_MAX_BATCH] = {0};
        int j = 0;
        size_t len;
        for (; j < k && fscanf(in, "%zu", &len) == 1 && fgetc(in) == '\n' && len < (1u << 24);
             j++) {
            char *json = malloc(len + 1);
            if (!json || fread(json, 1, len, in) != len) {
                free(json);
                break;
            }
            json[len] = '\0';
            st[j] = kt_sched_state_from_json(json, kt_workload_dag(wl[task]), p);
            free(json);
        }
        if (j == k)
            timer_batch(out, m, wl[task], st, k);
        for (int i = 0; i < j; i++)
            kt_sched_state_free(st[i]);
        if (j != k)
            break;
    }
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
}

static int timer_start(cand_timer_t *c, const kt_workload_t *const *wl, int n,
                       const kt_sched_params_t *p)
{
    int to[2], from[2];
    memset(c, 0, sizeof *c);
    c->pid = -1;
    if (pipe(to) != 0)
        return kt_err_set(KT_EIO, "transfer: pipe: %s", strerror(errno));
    if (pipe(from) != 0) {
        close(to[0]);
        close(to[1]);
        return kt_err_set(KT_EIO, "transfer: pipe: %s", strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(to[0]);
        close(to[1]);
        close(from[0]);
        close(from[1]);
        return kt_err_set(KT_EIO, "transfer: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        FILE *in = fdopen(to[0], "r"), *out = fdopen(from[1], "w");
        if (in && out)
            timer_serve(in, out, wl, n, p);
        _exit(0);
    }
    close(to[0]);
    close(from[1]);
    c->pid = pid;
    c->req = fdopen(to[1], "w");
    c->rep = fdopen(from[0], "r");
    if (!c->req || !c->rep)
        return kt_err_set(KT_EIO, "transfer: fdopen: %s", strerror(errno));
    return 0;
}

/* Time k states (JSON) of task `task`: cost[j] the mean in seconds, or
 * negative when state j failed (why[j] says why). 0, or negative when the
 * timer is gone. */
static int timer_time(cand_timer_t *c, int task, char *const *json, int k, double *cost,
                      char (*why)[200])
{
    if (fprintf(c->req, "%d %d\n", task, k) < 0)
        return kt_err_set(KT_EIO, "transfer: the kernel timer stopped");
    for (int j = 0; j < k; j++) {
        size_t len = strlen(json[j]);
        if (fprintf(c->req, "%zu\n", len) < 0 || fwrite(json[j], 1, len, c->req) != len)
            return kt_err_set(KT_EIO, "transfer: the kernel timer stopped");
    }
    if (fflush(c->req) != 0)
        return kt_err_set(KT_EIO, "transfer: the kernel timer stopped");
    for (int j = 0; j < k; j++) {
        char line[512];
        if (!fgets(line, sizeof line, c->rep))
            return kt_err_set(KT_EIO, "transfer: the kernel timer stopped");
        line[strcspn(line, "\n")] = '\0';
        cost[j] = -1;
        why[j][0] = '\0';
        if (line[0] == '1' && line[1] == ' ')
            cost[j] = strtod(line + 2, NULL);
        else
            snprintf(why[j], sizeof why[j], "%.190s", line[0] == '0' && line[1] ? line + 2 : line);
    }
    return 0;
}

static void timer_stop(cand_timer_t *c)
{
    if (c->req)
        fclose(c->req);
    if (c->rep)
        fclose(c->rep);
    if (c->pid > 0)
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    memset(c, 0, sizeof *c);
    c->pid = -1;
}

/* The store model of device key `key` on target, loaded or trained from
 * its records (and stored); NULL when it has none and too few records.
 * On success *note names it. */
static kt_model_t *key_model(kt_store_t *s, const char *target, const char *key, char *note,
                             size_t notelen)
{
    kt_search_store_ref_t ref = {.store = s};
    kt_search_store_model_t sm;
    kt_model_t *m = NULL;
    if (kt_search_store_model(&ref, target, key,
                              KT_SEARCH_STORE_MODEL_LOAD | KT_SEARCH_STORE_MODEL_BUILD,
                              &sm) == 0 && sm.model) {
        m = sm.model;
        sm.model = NULL;
        snprintf(note, notelen, "the store model of key %s (%" PRId64 " records)", key,
                 sm.records);
    }
    kt_search_store_model_clear(&sm);
    return m;
}

/* The store model kt_transfer_fill's picks come from: runner_key's, or
 * without one that of the first of the store's device keys (most records
 * first) that has or can train one on target. NULL when none; *note says
 * which or why not. */
static kt_model_t *fill_model(kt_store_t *s, const char *target, const char *runner_key,
                              char *note, size_t notelen)
{
    if (runner_key) {
        snprintf(note, notelen, "no store model: fewer than %d records on device key %s",
                 KT_SEARCH_STORE_MODEL_MIN, runner_key);
        return key_model(s, target, runner_key, note, notelen);
    }
    kt_store_stats_t st;
    snprintf(note, notelen, "no store model: fewer than %d records on any device key",
             KT_SEARCH_STORE_MODEL_MIN);
    if (kt_store_stats(s, &st) != 0) {
        snprintf(note, notelen, "no store model: %s", kt_err_msg());
        return NULL;
    }
    kt_model_t *m = NULL;
    for (size_t i = 0; i < st.nkeys && !m; i++)
        m = key_model(s, target, st.keys[i].key, note, notelen);
    kt_store_stats_clear(&st);
    return m;
}

/* Task i's zero-shot candidates: up to `trials` states, the re-fitted ones
 * of `set` first (at most half of them when the store model can add its
 * picks), then the model's picks not already among them; their JSON into
 * json[] (malloc'd), src[j] the set's index or -1 for a pick. Returns the
 * count or negative. */
static int fill_candidates(const kt_workload_t *w, int i, const kt_transfer_set_t *set,
                           kt_model_t *model, const kt_sched_params_t *p, int trials,
                           char **json, int *src)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    int nref = set->n < trials ? set->n : trials, k = 0, rc = 0;
    if (model && nref > trials - trials / 2)
        nref = trials - trials / 2;
    uint64_t hash[TIMER_MAX_BATCH];
    for (; k < nref; k++) {
        if (!(json[k] = kt_sched_state_to_json(set->items[k].state, dag)))
            return kt_err_set(KT_ENOMEM, "out of memory");
        hash[k] = kt_sched_state_hash(set->items[k].state, dag);
        src[k] = k;
    }
    if (!model || k >= trials)
        return k;
    kt_sched_state_t **v = NULL;
    int np = kt_transfer_model_rank(w, model, p, (uint64_t)i, trials - k, &v);
    if (np < 0)
        return np;
    for (int j = 0; j < np; j++) {
        uint64_t h = kt_sched_state_hash(v[j], dag);
        int seen = 0;
        for (int q = 0; q < k && !seen; q++)
            seen = hash[q] == h;
        if (!seen && k < trials && rc == 0) {
            if ((json[k] = kt_sched_state_to_json(v[j], dag))) {
                hash[k] = h;
                src[k++] = -1;
            } else {
                rc = kt_err_set(KT_ENOMEM, "out of memory");
            }
        }
        kt_sched_state_free(v[j]);
    }
    free(v);
    return rc ? rc : k;
}

int kt_transfer_fill(kt_store_t *s, const kt_workload_t *const *wl, const int *skip, int n,
                     const char *target, const char *runner_key, const kt_sched_params_t *p,
                     int trials, char **states, char **origin, double *ms)
{
    if (n < 0 || (n > 0 && (!wl || !states || !origin)))
        return kt_err_set(KT_EINVAL, "transfer: bad arguments");
    if (trials < 0 || trials > TIMER_MAX_BATCH)
        return kt_err_set(KT_EINVAL, "transfer: %d candidates per task; 1 to %d", trials,
                          TIMER_MAX_BATCH);
    if (trials == 0)
        trials = KT_TRANSFER_FILL_TRIALS;
    int filled = 0, rc = 0, model_looked = 0;
    kt_model_t *model = NULL;
    char mnote[200] = "";
    cand_timer_t tm = {.pid = -1};
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (states[i] || (skip && skip[i]))
            continue;
        /* Every kernel runs under the timer, forked before the store model
         * loads: once it has, a kernel forked from here would hang. */
        if (tm.pid < 0 && (rc = timer_start(&tm, wl, n, p)) != 0)
            break;
        kt_transfer_set_t set;
        if ((rc = kt_transfer_gather(s, wl[i], target, runner_key, p, 8, 4, &set)) != 0)
            break;
        if (!model_looked) {
            model_looked = 1;
            model = fill_model(s, target, runner_key, mnote, sizeof mnote);
        }
        char *json[TIMER_MAX_BATCH] = {0}, why[TIMER_MAX_BATCH][200], from[700];
        int src[TIMER_MAX_BATCH];
        double cost[TIMER_MAX_BATCH];
        int k = fill_candidates(wl[i], i, &set, model, p, trials, json, src), best = -1;
        if (k < 0)
            rc = k;
        else if (k > 0)
            rc = timer_time(&tm, i, json, k, cost, why);
        for (int j = 0; rc == 0 && j < k; j++)
            if (cost[j] >= 0 && (best < 0 || cost[j] < cost[best]))
                best = j;
        int nref = 0;
        for (int j = 0; j < (k > 0 ? k : 0); j++)
            nref += src[j] >= 0;
        const char *none = set.nreasons > 0 ? set.reasons[0] : "";
        if (rc != 0) {
            /* nothing more to say: the loop ends */
        } else if (k == 0) {
            snprintf(from, sizeof from, "nothing stored to re-fit%s%.200s; %s", none[0] ? ": " : "",
                     none, model ? "the store model's search found no state" : mnote);
        } else if (best < 0) {
            snprintf(from, sizeof from, "none of %d candidates (%d re-fitted, %d of the store "
                     "model) passed; the first: %.200s", k, nref, k - nref, why[0]);
        } else if (src[best] >= 0) {
            const kt_transfer_cand_t *c = &set.items[src[best]];
            snprintf(from, sizeof from,
                     "re-fitted from record %lld (%.4f ms) of workload %s at shape distance "
                     "%.3g: the fastest of %d candidates timed here (%.4f ms; %d re-fitted, %d "
                     "of the store model), checked against the reference",
                     (long long)c->record_id, c->source_cost * 1e3, c->source_key, c->distance,
                     k, cost[best] * 1e3, nref, k - nref);
        } else {
            snprintf(from, sizeof from,
                     "chosen by %s: the fastest of %d candidates timed here (%.4f ms; %d "
                     "re-fitted, %d of the model), checked against the reference%s%s%.200s",
                     mnote, k, cost[best] * 1e3, nref, k - nref,
                     nref ? "" : "; nothing stored to re-fit", !nref && none[0] ? ": " : "",
                     nref ? "" : none);
        }
        if (rc == 0 && !(origin[i] = kt_strdup(from)))
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        if (rc == 0 && best >= 0) {
            states[i] = json[best];
            json[best] = NULL;
            if (ms)
                ms[i] = cost[best] * 1e3;
            filled++;
        }
        for (int j = 0; j < (k > 0 ? k : 0); j++)
            free(json[j]);
        kt_transfer_set_clear(&set);
    }
    timer_stop(&tm);
    kt_model_free(model);
    return rc < 0 ? rc : filled;
}
