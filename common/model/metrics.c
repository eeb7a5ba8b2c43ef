/*
 * Ranking-quality metrics of predicted scores against true scores, for tests
 * and benchmarks of the cost models.
 */
#include <math.h>
#include <stdlib.h>

#include "model/model.h"
#include "util/err.h"

int kt_model_pairwise_accuracy(const float *pred, const float *truth, size_t n, double *out)
{
    if ((n > 0 && (!pred || !truth)) || !out)
        return kt_err_set(KT_EINVAL, "pairwise accuracy: missing arrays");
    double good = 0;
    size_t pairs = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            if (!(truth[i] != truth[j]))   /* equal or NaN: no order to get right */
                continue;
            pairs++;
            int t = truth[i] > truth[j];
            if (pred[i] > pred[j])
                good += t;
            else if (pred[i] < pred[j])
                good += !t;
            else
                good += 0.5;
        }
    }
    *out = pairs ? good / (double)pairs : NAN;
    return KT_OK;
}

typedef struct {
    float v;
    size_t i;
} ranked_t;

/* Descending by value, NaN last, ties by index. */
static int ranked_cmp(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    int xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn)
        return xn - yn;
    if (!xn && x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static ranked_t *rank(const float *v, size_t n)
{
    ranked_t *r = malloc(n * sizeof *r);
    if (!r)
        return NULL;
    for (size_t i = 0; i < n; i++)
        r[i] = (ranked_t){ v[i], i };
    qsort(r, n, sizeof *r, ranked_cmp);
    return r;
}

int kt_model_topk_recall(const float *pred, const float *truth, size_t n, size_t k,
                         double *out)
{
    if (n == 0 || k == 0 || !pred || !truth || !out)
        return kt_err_set(KT_EINVAL, "top-k recall: empty input or k = 0");
    if (k > n)
        k = n;
    ranked_t *rp = rank(pred, n), *rt = rank(truth, n);
    unsigned char *in_top = calloc(n, 1);
    if (!rp || !rt || !in_top) {
        free(rp);
        free(rt);
        free(in_top);
        return kt_err_set(KT_ENOMEM, "top-k recall: out of memory");
    }
    for (size_t a = 0; a < k; a++)
        in_top[rt[a].i] = 1;
    size_t hit = 0;
    for (size_t a = 0; a < k; a++)
        hit += in_top[rp[a].i];
    *out = (double)hit / (double)k;
    free(rp);
    free(rt);
    free(in_top);
    return KT_OK;
}
