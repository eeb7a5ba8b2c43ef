/* Training a cost model from the record store: the equivalent of TVM's
 * XGBModel.update_from_file. */
#include <math.h>
#include <stdlib.h>

#include "feature/feature.h"
#include "search/search.h"
#include "util/err.h"

int kt_search_model_update_from_store(kt_model_t *m, kt_store_t *s, const kt_workload_t *w,
                                      const char *target, uint64_t task_id, int *used)
{
    if (used)
        *used = 0;
    if (!m || !s || !w || !target)
        return kt_err_set(KT_EINVAL, "update from store: bad arguments");
    kt_store_filter_t f = {.workload_key = kt_workload_key(w), .target = target};
    kt_record_list_t *l = NULL;
    int rc = kt_store_get_records(s, &f, &l);
    if (rc)
        return kt_err_prefix("update from store");
    const kt_dag_t *dag = kt_workload_dag(w);
    size_t n = l->n;
    kt_sched_state_t **st = calloc(n ? n : 1, sizeof *st);
    double *costs = calloc(n ? n : 1, sizeof *costs);
    uint64_t *tasks = calloc(n ? n : 1, sizeof *tasks);
    uint32_t *counts = calloc(n ? n : 1, sizeof *counts);
    float *rows = NULL;
    int k = 0;
    if (!st || !costs || !tasks || !counts) {
        rc = kt_err_set(KT_ENOMEM, "update from store: out of memory");
        goto out;
    }
    /* A record whose state no longer parses (another ktune version) is
     * skipped: the model learns from what it can read. */
    for (size_t i = 0; i < n; i++) {
        const kt_record_t *r = &l->items[i];
        kt_sched_state_t *x = kt_sched_state_from_json(r->state_json, dag, NULL);
        if (!x)
            continue;
        st[k] = x;
        costs[k] = r->error_code == 0 && isfinite(r->mean_cost) ? r->mean_cost : INFINITY;
        tasks[k] = task_id;
        k++;
    }
    kt_err_clear();
    if (k == 0)
        goto out;
    if ((rc = kt_feature_extract_batch(dag, (const kt_sched_state_t *const *)st, k, &rows,
                                       counts)) != 0)
        goto out;
    kt_model_batch_t b = {.rows = rows, .nrows = counts, .nprog = (size_t)k,
                          .nfeat = KT_FEATURE_COUNT};
    rc = kt_model_update(m, &b, costs, tasks);
    if (rc == 0 && used)
        *used = k;
out:
    for (int i = 0; st && i < k; i++)
        kt_sched_state_free(st[i]);
    free(st);
    free(costs);
    free(tasks);
    free(counts);
    free(rows);
    kt_record_list_free(l);
    return rc;
}
