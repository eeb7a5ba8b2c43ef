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
        rc = kt_model_predict(sp->model, &b, scores);
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

int kt_search_train_model(kt_search_policy_t *sp, kt_model_t *m, kt_sched_state_t *const *states,
                          const double *costs, int n)
{
    if (n <= 0)
        return 0;
    float *rows = NULL;
    uint32_t nfeat = 0;
    uint32_t *counts = malloc((size_t)n * sizeof(uint32_t));
    uint64_t *tasks = malloc((size_t)n * sizeof(uint64_t));
    double *cs = malloc((size_t)n * sizeof(double));
    int rc = 0;
    if (!counts || !tasks || !cs) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        tasks[i] = sp->task_id;
        cs[i] = costs[i] > 0 && isfinite(costs[i]) && costs[i] < KT_MEASURE_MAX_COST ? costs[i] : -1;
    }
    rc = make_batch(sp, states, n, &rows, counts, &nfeat);
    if (rc == 0) {
        kt_model_batch_t b = {.rows = rows, .nrows = counts, .nprog = (size_t)n, .nfeat = nfeat};
        rc = kt_model_update(m, &b, cs, tasks);
    }
out:
    free(rows);
    free(counts);
    free(tasks);
    free(cs);
    return rc;
}
