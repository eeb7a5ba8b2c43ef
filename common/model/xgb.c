/*
 * The XGBoost half of the "xgb" model: pack-sum training with a custom
 * objective computed here, prediction of row margins, booster bytes.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"
#include "util/err.h"
#include "util/log.h"
#include "util/rng.h"

/* XGBoost reports failures through a thread-local message. */
static int xgb_fail(int code, const char *what)
{
    const char *msg = XGBGetLastError();
    return kt_err_set(code, "xgboost %s: %s", what, msg && *msg ? msg : "unknown error");
}

const char *kt_model_tree_method_name(int tree_method)
{
    static const char *const names[] = { "exact", "approx", "hist" };
    if (tree_method < 0 || tree_method >= (int)(sizeof names / sizeof names[0]))
        return NULL;
    return names[tree_method];
}

static int set_params(BoosterHandle b, const kt_model_params_t *p)
{
    char v[64];
    struct { const char *name; char val[32]; } kv[13];
    size_t n = 0;
#define KV(k, ...) do { kv[n].name = (k); snprintf(kv[n].val, sizeof kv[n].val, __VA_ARGS__); n++; } while (0)
    KV("max_depth", "%d", p->max_depth);
    KV("eta", "%.17g", p->eta);
    KV("gamma", "%.17g", p->gamma);
    KV("min_child_weight", "%.17g", p->min_child_weight);
    KV("subsample", "%.17g", p->subsample);
    KV("colsample_bytree", "%.17g", p->colsample_bytree);
    KV("nthread", "%d", p->nthread);
    KV("seed", "%d", (int)(p->seed & 0x7fffffff));
    KV("verbosity", "%d", 0);
    KV("disable_default_eval_metric", "%d", 1);
    /* XGBoost 1.x's default, pinned so training does not depend on the library
     * version (2.x estimates it from labels, which our custom objective lacks). */
    KV("base_score", "%s", p->label == KT_MODEL_LABEL_THROUGHPUT ? "0.5" : "0");
    KV("tree_method", "%s", kt_model_tree_method_name(p->tree_method));
#undef KV
    for (size_t i = 0; i < n; i++) {
        if (XGBoosterSetParam(b, kv[i].name, kv[i].val) != 0) {
            snprintf(v, sizeof v, "setting %s", kv[i].name);
            return xgb_fail(KT_EINTERNAL, v);
        }
    }
    return KT_OK;
}

/* Row margins of dmat from bst. out_len checked against nrow. */
static int predict_margins(BoosterHandle bst, DMatrixHandle d, size_t nrow, int training,
                           const float **out)
{
    const char *cfg = training
        ? "{\"type\": 1, \"training\": true, \"iteration_begin\": 0, \"iteration_end\": 0, \"strict_shape\": false}"
        : "{\"type\": 1, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, \"strict_shape\": false}";
    const bst_ulong *shape = NULL;
    bst_ulong dim = 0;
    if (XGBoosterPredictFromDMatrix(bst, d, cfg, &shape, &dim, out) != 0)
        return xgb_fail(KT_EINTERNAL, "predict");
    if (dim != 1 || shape[0] != (bst_ulong)nrow)
        return kt_err_set(KT_EINTERNAL, "xgboost predict: %llu-d result for %zu rows",
                          (unsigned long long)dim, nrow);
    return KT_OK;
}

/* A program's weight in training: 1, or its throughput with weight_by_label. */
static double sample_weight(const kt_model_params_t *p, float label)
{
    if (!p->weight_by_label)
        return 1.0;
    return p->label == KT_MODEL_LABEL_THROUGHPUT ? label : exp(label);
}

/* ---- pairwise ranking objective (label "rank") ------------------------------ */

/* Partners drawn per program when its task has more programs than this: the
 * loss over all pairs costs n^2 per boosting round. */
#define RANK_PARTNERS 64

typedef struct {
    uint32_t hi, lo;   /* packed program indices, lab[hi] > lab[lo] */
} rank_pair_t;

/* The training pairs: programs of one task with different labels, all of
 * them in a task of at most RANK_PARTNERS + 1 programs, else RANK_PARTNERS
 * partners drawn (seeded) per program. Pairs never cross tasks: labels of
 * different tasks are normalized by different bests. *out malloc'd. */
static int rank_pairs(const kt_model_t *m, const double *lab, size_t npack, rank_pair_t **out,
                      size_t *nout)
{
    *out = NULL;
    *nout = 0;
    /* packed programs grouped by task */
    kt_model_task_idx_t *tp = malloc(npack * sizeof *tp);
    if (!tp)
        return kt_err_set(KT_ENOMEM, "training: out of memory");
    for (size_t i = 0, k = 0; i < m->nsamples; i++)
        if (m->samples[i].nrows > 0) {
            tp[k] = (kt_model_task_idx_t){m->samples[i].task, k};
            k++;
        }
    qsort(tp, npack, sizeof *tp, kt_model_task_idx_cmp);
    size_t cap = 0, n = 0;
    rank_pair_t *pairs = NULL;
    kt_rng_t rng;
    kt_rng_seed(&rng, m->p.seed);
    int rc = KT_OK;
    for (size_t a = 0; a < npack && rc == KT_OK;) {
        size_t e = a;
        while (e < npack && tp[e].task == tp[a].task)
            e++;
        size_t g = e - a;
        int all = g <= RANK_PARTNERS + 1;
        size_t want = all ? g * (g - 1) / 2 : g * RANK_PARTNERS;
        if (n + want > cap) {
            size_t nc = (n + want) * 2;
            rank_pair_t *np = realloc(pairs, nc * sizeof *np);
            if (!np) {
                rc = kt_err_set(KT_ENOMEM, "training: out of memory");
                break;
            }
            pairs = np;
            cap = nc;
        }
        for (size_t x = a; x < e; x++) {
            size_t lim = all ? e - x - 1 : RANK_PARTNERS;
            for (size_t t = 0; t < lim; t++) {
                size_t y = all ? x + 1 + t : a + (size_t)kt_rng_below(&rng, g);
                uint32_t i = (uint32_t)tp[x].idx, j = (uint32_t)tp[y].idx;
                if (lab[i] == lab[j])
                    continue;   /* also y == x */
                pairs[n++] = lab[i] > lab[j] ? (rank_pair_t){i, j} : (rank_pair_t){j, i};
            }
        }
        a = e;
    }
    free(tp);
    if (rc) {
        free(pairs);
        return rc;
    }
    *out = pairs;
    *nout = n;
    return KT_OK;
}

/* The transcendental part of rank_loss, pairs [a, b): each pair's loss
 * and 1 - sigmoid(d), pure per pair so that threads may split the range. */
typedef struct {
    const rank_pair_t *pairs;
    const double *sum;
    double *pl, *pq;
    size_t a, b;
} rank_part_t;

static void *rank_part(void *arg)
{
    const rank_part_t *r = arg;
    for (size_t k = r->a; k < r->b; k++) {
        double d = r->sum[r->pairs[k].hi] - r->sum[r->pairs[k].lo];
        /* log(1 + e^-d), stable for both signs */
        r->pl[k] = d > 0 ? log1p(exp(-d)) : -d + log1p(exp(d));
        r->pq[k] = 1.0 / (1.0 + exp(d));
    }
    return NULL;
}

/* Logistic pairwise loss (RankNet) of program margins sum[]: returns the
 * mean of log(1 + exp(-(s_hi - s_lo))) and fills g[npack] and h[npack] with
 * each program's gradient and hessian, times its weight. The per-pair math
 * (most of a round's time on thousands of programs) runs on nthread threads
 * into pl[n] and pq[n]; the sums run in pair order on this thread, so the
 * result does not depend on nthread. */
static double rank_loss(const rank_pair_t *pairs, size_t n, const double *sum, const double *wt,
                        double *g, double *h, size_t npack, double *pl, double *pq, int nthread)
{
    enum { MAX_THREADS = 16, MIN_PAIRS = 16384 };
    int t = nthread < 1 ? 1 : nthread > MAX_THREADS ? MAX_THREADS : nthread;
    if (n < (size_t)MIN_PAIRS * 2)
        t = 1;
    rank_part_t part[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 0; i < t; i++) {
        part[i] = (rank_part_t){pairs, sum, pl, pq, n * (size_t)i / (size_t)t,
                                n * (size_t)(i + 1) / (size_t)t};
        /* a thread that cannot start leaves its part to this one */
        started[i] = i > 0 && pthread_create(&th[i], NULL, rank_part, &part[i]) == 0;
    }
    for (int i = 0; i < t; i++)
        if (!started[i])
            rank_part(&part[i]);
    for (int i = 1; i < t; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    memset(g, 0, npack * sizeof *g);
    memset(h, 0, npack * sizeof *h);
    double loss = 0;
    for (size_t k = 0; k < n; k++) {
        const uint32_t hi = pairs[k].hi, lo = pairs[k].lo;
        double q = pq[k];   /* 1 - sigmoid(d) */
        double hh = q * (1.0 - q);
        loss += pl[k];
        g[hi] -= q * wt[hi];
        g[lo] += q * wt[lo];
        h[hi] += hh * wt[hi];
        h[lo] += hh * wt[lo];
    }
    return n ? loss / (double)n : 0;
}

int kt_model_xgb_train(kt_model_t *m, const float *labels)
{
    const kt_model_params_t *p = &m->p;
    size_t nrow = m->nrows_total, npack = 0;
    for (size_t i = 0; i < m->nsamples; i++)
        npack += m->samples[i].nrows > 0;
    if (nrow == 0 || npack == 0)
        return kt_err_set(KT_ESTATE, "no valid program to train on");

    int rc = KT_OK;
    DMatrixHandle d = NULL;
    BoosterHandle b = NULL, best = NULL;
    float *grad = malloc(nrow * sizeof *grad);
    float *hess = malloc(nrow * sizeof *hess);
    double *sum = malloc(npack * sizeof *sum);
    double *lab = malloc(npack * sizeof *lab);   /* label and weight of each valid program */
    double *wt = malloc(npack * sizeof *wt);
    const int rank = p->label == KT_MODEL_LABEL_RANK;
    double *pg = rank ? malloc(npack * sizeof *pg) : NULL;   /* rank: per-program gradient */
    double *ph = rank ? malloc(npack * sizeof *ph) : NULL;   /* ... and hessian */
    double *ppl = NULL, *ppq = NULL;                          /* rank: per-pair loss, 1 - sigmoid */
    float *base = NULL;                                       /* the prior's row margins */
    rank_pair_t *pairs = NULL;
    size_t npairs = 0;
    if (!grad || !hess || !sum || !lab || !wt || (rank && (!pg || !ph))) {
        rc = kt_err_set(KT_ENOMEM, "training: out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < m->nsamples; i++) {
        if (m->samples[i].nrows == 0)
            continue;
        lab[k] = labels[i];
        wt[k++] = sample_weight(p, labels[i]);
    }
    if (rank && (rc = rank_pairs(m, lab, npack, &pairs, &npairs)) < 0)
        goto out;
    if (rank && npairs > 0 && (!(ppl = malloc(npairs * sizeof *ppl)) ||
                               !(ppq = malloc(npairs * sizeof *ppq)))) {
        rc = kt_err_set(KT_ENOMEM, "training: out of memory");
        goto out;
    }
    if (XGDMatrixCreateFromMat_omp(m->rows, (bst_ulong)nrow, m->nfeat, NAN, &d, p->nthread) != 0) {
        rc = xgb_fail(KT_EINTERNAL, "creating the training matrix");
        goto out;
    }
    if (XGBoosterCreate(&d, 1, &b) != 0) {
        rc = xgb_fail(KT_EINTERNAL, "creating a booster");
        goto out;
    }
    if ((rc = set_params(b, p)) < 0)
        goto out;
    if (m->prior) {
        const float *pp;
        if (!(base = malloc(nrow * sizeof *base))) {
            rc = kt_err_set(KT_ENOMEM, "training: out of memory");
            goto out;
        }
        if ((rc = predict_margins(m->prior->bst, d, nrow, 0, &pp)) < 0) {
            kt_err_prefix("the prior");
            goto out;
        }
        memcpy(base, pp, nrow * sizeof *base);
    }

    /* Log labels: a program's score is bias + the sum of its rows, bias
     * fitted each round (the weighted mean residual). The labels' common
     * offset (log of the task's best throughput) belongs to the program, not
     * to its rows: spread over rows, it would make every extra stage look
     * slower. Scores leave the bias out; ranking does not need it. Ansor's
     * throughput labels keep its row-level base score and no bias. */
    const int fit_bias = p->label == KT_MODEL_LABEL_LOG;
    double bias = 0;
    const char *loss_name = rank ? "tr-pair-loss" : "tr-p-rmse";
    double best_loss = INFINITY;
    int best_rounds = 0, rounds = 0;
    for (;;) {
        /* Margins of the model with `rounds` trees: they score round rounds-1
         * for early stopping and give the gradients of the next round. */
        const float *pred;
        if ((rc = predict_margins(b, d, nrow, 1, &pred)) < 0)
            goto out;
        size_t k = 0;
        for (size_t i = 0; i < m->nsamples; i++) {
            const kt_model_sample_t *s = &m->samples[i];
            if (s->nrows == 0)
                continue;
            double acc = 0;
            for (uint32_t r = 0; r < s->nrows; r++)
                acc += pred[s->row + r] + (base ? base[s->row + r] : 0.0f);
            sum[k++] = acc;
        }
        if (fit_bias) {
            double rw = 0, rsum = 0;
            for (k = 0; k < npack; k++) {
                rsum += (lab[k] - sum[k]) * wt[k];
                rw += wt[k];
            }
            bias = rw > 0 ? rsum / rw : 0;
        }
        /* the training loss early stopping watches (it also fills the
         * rank objective's per-program gradients) */
        double loss;
        if (rank) {
            loss = rank_loss(pairs, npairs, sum, wt, pg, ph, npack, ppl, ppq,
                             m->train_threads > 0 ? m->train_threads : p->nthread);
        } else {
            double se = 0;
            for (k = 0; k < npack; k++) {
                sum[k] += bias;
                se += (sum[k] - lab[k]) * (sum[k] - lab[k]);
            }
            loss = sqrt(se / (double)npack);
        }
        if (rounds > 0) {
            if (p->verbose_eval > 0 && rounds % p->verbose_eval == 0)
                KT_INFO("xgb round %d: %s %.6f", rounds, loss_name, loss);
            if (loss < best_loss) {
                best_loss = loss;
                best_rounds = rounds;
            } else if (rounds - best_rounds >= p->early_stopping_rounds) {
                break;
            }
        }
        if (rounds >= p->num_boost_round)
            break;
        if (m->stop && atomic_load(m->stop)) {
            rc = kt_err_set(KT_ESTATE, "training stopped");
            goto out;
        }
        k = 0;
        for (size_t i = 0; i < m->nsamples; i++) {
            const kt_model_sample_t *s = &m->samples[i];
            if (s->nrows == 0)
                continue;
            float g = (float)(rank ? pg[k] : (sum[k] - lab[k]) * wt[k]);
            float hs = (float)(rank ? ph[k] : wt[k]);
            for (uint32_t r = 0; r < s->nrows; r++) {
                grad[s->row + r] = g;
                hess[s->row + r] = hs;
            }
            k++;
        }
        if (XGBoosterBoostOneIter(b, d, grad, hess, (bst_ulong)nrow) != 0) {
            rc = xgb_fail(KT_EINTERNAL, "boosting");
            goto out;
        }
        rounds++;
    }
    if (p->verbose_eval > 0)
        KT_INFO("xgb trained on %zu programs (%zu rows): best round %d of %d, %s %.6f", npack,
                nrow, best_rounds, rounds, loss_name, best_loss);
    /* Keep the trees up to the best round: later ones did not lower the error. */
    if (best_rounds > 0 && best_rounds < rounds) {
        if (XGBoosterSlice(b, 0, best_rounds, 1, &best) != 0) {
            rc = xgb_fail(KT_EINTERNAL, "keeping the best rounds");
            goto out;
        }
        XGBoosterFree(b);
        b = best;
        best = NULL;
    } else {
        best_rounds = rounds;
    }
    if (m->bst)
        XGBoosterFree(m->bst);
    m->bst = b;
    m->nrounds = best_rounds;
    b = NULL;
out:
    if (b)
        XGBoosterFree(b);
    if (d)
        XGDMatrixFree(d);
    free(grad);
    free(hess);
    free(sum);
    free(lab);
    free(wt);
    free(pg);
    free(ph);
    free(ppl);
    free(ppq);
    free(pairs);
    free(base);
    return rc;
}

int kt_model_xgb_predict(BoosterHandle bst, const float *rows, size_t nrow, uint32_t nfeat,
                         int nthread, float *out)
{
    DMatrixHandle d = NULL;
    if (XGDMatrixCreateFromMat_omp(rows, (bst_ulong)nrow, nfeat, NAN, &d, nthread) != 0)
        return xgb_fail(KT_EINTERNAL, "creating the prediction matrix");
    const float *pred;
    int rc = predict_margins(bst, d, nrow, 0, &pred);
    if (rc == KT_OK)
        memcpy(out, pred, nrow * sizeof *out);
    XGDMatrixFree(d);
    return rc;
}

int kt_model_xgb_save(BoosterHandle bst, char **buf, size_t *len)
{
    bst_ulong n = 0;
    const char *data = NULL;
    if (XGBoosterSaveModelToBuffer(bst, "{\"format\": \"ubj\"}", &n, &data) != 0)
        return xgb_fail(KT_EINTERNAL, "saving the booster");
    char *copy = malloc(n ? n : 1);
    if (!copy)
        return kt_err_set(KT_ENOMEM, "saving the booster: out of memory");
    memcpy(copy, data, n);
    *buf = copy;
    *len = n;
    return KT_OK;
}

int kt_model_xgb_load(const void *buf, size_t len, int nthread, BoosterHandle *out,
                      int *nrounds, uint32_t *nfeat)
{
    BoosterHandle b = NULL;
    bst_ulong nf = 0;
    int rounds = 0;
    char v[16];
    snprintf(v, sizeof v, "%d", nthread);
    if (XGBoosterCreate(NULL, 0, &b) != 0)
        return xgb_fail(KT_EINTERNAL, "creating a booster");
    if (XGBoosterLoadModelFromBuffer(b, buf, (bst_ulong)len) != 0) {
        int rc = xgb_fail(KT_EINVAL, "loading the booster");
        XGBoosterFree(b);
        return rc;
    }
    if (XGBoosterSetParam(b, "nthread", v) != 0 || XGBoosterSetParam(b, "verbosity", "0") != 0 ||
        XGBoosterBoostedRounds(b, &rounds) != 0 || XGBoosterGetNumFeature(b, &nf) != 0) {
        int rc = xgb_fail(KT_EINVAL, "loading the booster");
        XGBoosterFree(b);
        return rc;
    }
    *out = b;
    *nrounds = rounds;
    *nfeat = (uint32_t)nf;
    return KT_OK;
}
