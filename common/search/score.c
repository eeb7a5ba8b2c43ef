/* Scoring and training: states -> model batches. A random model needs no
 * features (Ansor's RandomModel never extracts any), so its batches carry one
 * dummy row per state; an xgb model gets per-stage feature rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature.h"
#include "search_int.h"
#include "util/err.h"
#include "util/pool.h"

/* States per chunk of a parallel feature extraction: large enough that a
 * chunk (tens of ms of lowering) dwarfs handing it to a thread, small
 * enough that a population of 2,048 spreads over 16 threads. */
#define CHUNK 64

/* One chunk's features: its own rows, error code and message (kt_err is per
 * thread, so a pool thread's message is carried back in the chunk). */
typedef struct {
    float *rows;
    int rc;
    char msg[160];
} chunk_t;

typedef struct {
    const kt_dag_t *dag;
    const kt_sched_state_t *const *states;
    uint32_t *counts;
    int n;
    chunk_t *ch;
} extract_ctx_t;

static void extract_chunk(void *arg, int k)
{
    extract_ctx_t *x = arg;
    int from = k * CHUNK, m = x->n - from < CHUNK ? x->n - from : CHUNK;
    chunk_t *c = &x->ch[k];
    c->rc = kt_feature_extract_batch(x->dag, x->states + from, m, &c->rows, x->counts + from);
    if (c->rc)
        snprintf(c->msg, sizeof c->msg, "%s", kt_err_msg());
}

/* kt_feature_extract_batch over the policy's pool: chunks of CHUNK states
 * extracted on any thread, their rows joined in state order. Each state's
 * rows depend on that state alone, so the batch is the same bytes as one
 * thread's, whatever the pool's width or scheduling: that is what keeps a
 * seeded search's proposals independent of --search-threads. */
static int extract_batch(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n,
                         float **rows, uint32_t *counts)
{
    int nch = (n + CHUNK - 1) / CHUNK;
    if (kt_pool_threads(sp->pool) < 2 || nch < 2)
        return kt_feature_extract_batch(sp->dag, (const kt_sched_state_t *const *)states, n,
                                        rows, counts);
    chunk_t *ch = calloc((size_t)nch, sizeof *ch);
    if (!ch)
        return kt_err_set(KT_ENOMEM, "out of memory");
    extract_ctx_t x = {sp->dag, (const kt_sched_state_t *const *)states, counts, n, ch};
    kt_pool_for(sp->pool, nch, extract_chunk, &x);
    int rc = 0;
    size_t total = 0;
    for (int k = 0; k < nch && !rc; k++) {
        if (ch[k].rc)
            rc = kt_err_set(ch[k].rc, "%s", ch[k].msg);
        for (int i = k * CHUNK; i < n && i < (k + 1) * CHUNK; i++)
            total += counts[i];
    }
    float *all = NULL;
    if (!rc && total > 0 && !(all = malloc(total * KT_FEATURE_COUNT * sizeof(float))))
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    size_t at = 0;
    for (int k = 0; k < nch; k++) {
        size_t rk = 0;
        for (int i = k * CHUNK; i < n && i < (k + 1) * CHUNK; i++)
            rk += counts[i];
        if (!rc && rk)
            memcpy(all + at * KT_FEATURE_COUNT, ch[k].rows, rk * KT_FEATURE_COUNT * sizeof(float));
        at += rk;
        free(ch[k].rows);
    }
    free(ch);
    *rows = rc ? NULL : all;
    if (rc)
        free(all);
    return rc;
}

/* Build the batch of n states: *rows (malloc'd), counts[n], *nfeat. */
static int make_batch(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n,
                      float **rows, uint32_t *counts, uint32_t *nfeat)
{
    *rows = NULL;
    if (sp->features) {
        *nfeat = KT_FEATURE_COUNT;
        int rc = extract_batch(sp, states, n, rows, counts);
        if (rc)
            return rc;
        if (*rows)
            return 0;
        /* no state lowered: every one scores -inf, the batch still needs rows */
    } else {
        *nfeat = 1;
        for (int i = 0; i < n; i++)
            counts[i] = 1;
    }
    *rows = calloc((size_t)n, sizeof(float) * *nfeat);
    return *rows ? 0 : kt_err_set(KT_ENOMEM, "out of memory");
}

int kt_search_score(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n,
                    float *scores)
{
    if (n <= 0)
        return 0;
    float *rows = NULL;
    uint32_t nfeat = 0;
    uint32_t *counts = malloc((size_t)n * sizeof(uint32_t));
    if (!counts)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = make_batch(sp, states, n, &rows, counts, &nfeat);
    if (rc == 0) {
        kt_model_batch_t b = {.rows = rows, .nrows = counts, .nprog = (size_t)n, .nfeat = nfeat};
        rc = sp->own_model ? kt_model_predict(sp->model, &b, scores)
                           : kt_model_predict_rng(kt_search_scorer(sp), &b, scores,
                                                  &sp->score_rng);
    }
    free(rows);
    free(counts);
    return rc;
}

int kt_search_train(kt_search_policy_t *sp, kt_sched_state_t *const *states, const double *costs,
                    int n)
{
    return kt_search_train_model(sp, sp->model, states, costs, n);
}

/* A training batch gathered from one or more policies (each its own
 * workload's features and task id), given to a model in one update. */
typedef struct {
    float *rows;
    size_t nrows;      /* rows held */
    uint32_t *counts;
    uint64_t *tasks;
    double *cs;
    int n, cap;
    uint32_t nfeat;
} acc_t;

static void acc_free(acc_t *a)
{
    free(a->rows);
    free(a->counts);
    free(a->tasks);
    free(a->cs);
}

/* Append n states of sp with their costs (<= 0: failed). */
static int acc_add(acc_t *a, kt_search_policy_t *sp, kt_sched_state_t *const *states,
                   const double *costs, int n)
{
    if (n <= 0)
        return 0;
    if (a->n + n > a->cap) {
        int cap = a->n + n > 2 * a->cap ? a->n + n : 2 * a->cap;
        uint32_t *c = realloc(a->counts, (size_t)cap * sizeof *c);
        if (c)
            a->counts = c;
        uint64_t *t = realloc(a->tasks, (size_t)cap * sizeof *t);
        if (t)
            a->tasks = t;
        double *x = realloc(a->cs, (size_t)cap * sizeof *x);
        if (x)
            a->cs = x;
        if (!c || !t || !x)
            return kt_err_set(KT_ENOMEM, "out of memory");
        a->cap = cap;
    }
    float *rows = NULL;
    uint32_t nfeat = 0;
    int rc = make_batch(sp, states, n, &rows, a->counts + a->n, &nfeat);
    if (rc)
        return rc;
    if (a->n > 0 && nfeat != a->nfeat) {
        free(rows);
        return kt_err_set(KT_EINTERNAL, "training: policies with and without features");
    }
    size_t add = 0;
    for (int i = 0; i < n; i++)
        add += a->counts[a->n + i];
    if (add > 0) {
        float *r = realloc(a->rows, (a->nrows + add) * nfeat * sizeof(float));
        if (!r) {
            free(rows);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        a->rows = r;
        memcpy(a->rows + a->nrows * nfeat, rows, add * nfeat * sizeof(float));
        a->nrows += add;
    }
    free(rows);
    for (int i = 0; i < n; i++) {
        a->tasks[a->n + i] = sp->task_id;
        a->cs[a->n + i] =
            costs[i] > 0 && isfinite(costs[i]) && costs[i] < KT_MEASURE_MAX_COST ? costs[i] : -1;
    }
    a->nfeat = nfeat;
    a->n += n;
    return 0;
}

static int acc_update(acc_t *a, kt_model_t *m)
{
    if (a->n == 0)
        return 0;
    /* the model wants rows even when no program has any */
    float none = 0;
    kt_model_batch_t b = {.rows = a->rows ? a->rows : &none, .nrows = a->counts,
                          .nprog = (size_t)a->n, .nfeat = a->nfeat};
    return kt_model_update(m, &b, a->cs, a->tasks);
}

int kt_search_train_model(kt_search_policy_t *sp, kt_model_t *m, kt_sched_state_t *const *states,
                          const double *costs, int n)
{
    acc_t a = {0};
    int rc = acc_add(&a, sp, states, costs, n);
    if (rc == 0)
        rc = acc_update(&a, m);
    acc_free(&a);
    return rc;
}

/* Append the untrained records (npending) of n policies to a. */
static int acc_add_pending(acc_t *a, kt_search_policy_t *const *sps, int n)
{
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        kt_search_policy_t *sp = sps[k];
        int np = sp->npending, first = sp->nhist - np;
        if (np <= 0)
            continue;
        kt_sched_state_t **sts = malloc((size_t)np * sizeof *sts);
        double *cs = malloc((size_t)np * sizeof *cs);
        if (!sts || !cs) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        } else {
            for (int i = 0; i < np; i++) {
                sts[i] = sp->hist[first + i].st;
                cs[i] = sp->hist[first + i].cost;
            }
            rc = acc_add(a, sp, sts, cs, np);
        }
        free(sts);
        free(cs);
    }
    return rc;
}

int kt_search_train_pending(kt_search_policy_t *const *sps, int n, kt_model_t *m)
{
    acc_t a = {0};
    int rc = acc_add_pending(&a, sps, n);
    if (rc == 0)
        rc = acc_update(&a, m);
    if (rc == 0)
        for (int k = 0; k < n; k++)
            sps[k]->npending = 0;
    acc_free(&a);
    return rc;
}

struct kt_search_batch {
    acc_t a;
};

int kt_search_take_pending(kt_search_policy_t *const *sps, int n, kt_search_batch_t **out)
{
    *out = NULL;
    kt_search_batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = acc_add_pending(&b->a, sps, n);
    if (rc || b->a.n == 0) {
        kt_search_batch_free(b);
        return rc;
    }
    for (int k = 0; k < n; k++)
        sps[k]->npending = 0;
    *out = b;
    return 0;
}

int kt_search_batch_train(kt_search_batch_t *b, kt_model_t *m)
{
    return b ? acc_update(&b->a, m) : 0;
}

int kt_search_batch_size(const kt_search_batch_t *b)
{
    return b ? b->a.n : 0;
}

void kt_search_batch_free(kt_search_batch_t *b)
{
    if (!b)
        return;
    acc_free(&b->a);
    free(b);
}
