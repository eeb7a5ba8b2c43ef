/* Scoring and training: states -> model batches. A random model needs no
 * features (Ansor's RandomModel never extracts any), so its batches carry one
 * dummy row per state; an xgb model gets per-stage feature rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature.h"
#include "search_int.h"
#include "util/err.h"

/* Build the batch of n states: *rows (malloc'd), counts[n], *nfeat. */
static int make_batch(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n,
                      float **rows, uint32_t *counts, uint32_t *nfeat)
{
    *rows = NULL;
    if (sp->features) {
        *nfeat = KT_FEATURE_COUNT;
        int rc = kt_feature_extract_batch(sp->dag, (const kt_sched_state_t *const *)states, n,
                                          rows, counts);
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
