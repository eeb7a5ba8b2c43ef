/*
 * Cost models: the training set, label normalization, warm-up, adaptive
 * training, random scores and the model file. XGBoost itself is in xgb.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/model_int.h"
#include "util/err.h"
#include "util/kv.h"
#include "util/util.h"

#define FILE_FORMAT "ktune-model"

void kt_model_params_default(kt_model_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->seed = 43;
    p->max_depth = 6;
    p->eta = 0.05;
    p->gamma = 0.001;
    p->min_child_weight = 1;
    p->num_boost_round = 300;
    p->early_stopping_rounds = 50;
    p->num_warmup_sample = 100;
    p->adaptive_training = 1;
    p->adaptive_ratio = 0.2;
    p->weight_by_label = 0;
    p->label = KT_MODEL_LABEL_LOG;
    p->subsample = 0.8;
    p->colsample_bytree = 0.8;
    p->verbose_eval = 0;
    p->nthread = 1;
    p->tree_method = KT_MODEL_TREE_EXACT;
}

/* Ansor's XGBModel: where it differs from ktune's defaults. */
void kt_model_params_ansor(kt_model_params_t *p)
{
    kt_model_params_default(p);
    p->max_depth = 10;
    p->eta = 0.2;
    p->min_child_weight = 0;
    p->weight_by_label = 1;
    p->label = KT_MODEL_LABEL_THROUGHPUT;
    p->subsample = 1;
    p->colsample_bytree = 1;
}

const char *kt_model_label_name(int label)
{
    static const char *const names[] = { "throughput", "log", "rank" };
    if (label < 0 || label >= (int)(sizeof names / sizeof names[0]))
        return NULL;
    return names[label];
}

/* The value whose name_of() is s, or -1. */
static int name_index(const char *(*name_of)(int), const char *s)
{
    for (int v = 0; name_of(v); v++)
        if (strcmp(s, name_of(v)) == 0)
            return v;
    return -1;
}

int kt_model_label_parse(const char *name)
{
    return name ? name_index(kt_model_label_name, name) : -1;
}

static int params_check(const kt_model_params_t *p)
{
    if (p->max_depth < 1 || p->max_depth > 64)
        return kt_err_set(KT_EINVAL, "max_depth %d out of [1, 64]", p->max_depth);
    if (!(p->eta > 0 && p->eta <= 1))
        return kt_err_set(KT_EINVAL, "eta %g out of (0, 1]", p->eta);
    if (!(p->gamma >= 0) || !isfinite(p->gamma))
        return kt_err_set(KT_EINVAL, "gamma %g must be finite and >= 0", p->gamma);
    if (!(p->min_child_weight >= 0) || !isfinite(p->min_child_weight))
        return kt_err_set(KT_EINVAL, "min_child_weight %g must be finite and >= 0",
                          p->min_child_weight);
    if (!kt_model_label_name(p->label))
        return kt_err_set(KT_EINVAL, "unknown label kind %d", p->label);
    if (!(p->subsample > 0 && p->subsample <= 1))
        return kt_err_set(KT_EINVAL, "subsample %g out of (0, 1]", p->subsample);
    if (!(p->colsample_bytree > 0 && p->colsample_bytree <= 1))
        return kt_err_set(KT_EINVAL, "colsample_bytree %g out of (0, 1]", p->colsample_bytree);
    if (p->num_boost_round < 1)
        return kt_err_set(KT_EINVAL, "num_boost_round %d must be >= 1", p->num_boost_round);
    if (p->early_stopping_rounds < 1)
        return kt_err_set(KT_EINVAL, "early_stopping_rounds %d must be >= 1",
                          p->early_stopping_rounds);
    if (p->num_warmup_sample < 0)
        return kt_err_set(KT_EINVAL, "num_warmup_sample %d must be >= 0", p->num_warmup_sample);
    if (!(p->adaptive_ratio >= 0) || !isfinite(p->adaptive_ratio))
        return kt_err_set(KT_EINVAL, "adaptive_ratio %g must be finite and >= 0",
                          p->adaptive_ratio);
    if (p->verbose_eval < 0)
        return kt_err_set(KT_EINVAL, "verbose_eval %d must be >= 0", p->verbose_eval);
    if (p->nthread < 0)
        return kt_err_set(KT_EINVAL, "nthread %d must be >= 0", p->nthread);
    if (!kt_model_tree_method_name(p->tree_method))
        return kt_err_set(KT_EINVAL, "unknown tree_method %d", p->tree_method);
    return KT_OK;
}

/* One "key=value" of kt_model_params_set into p. */
static int param_set_one(void *user, const char *key, const char *val)
{
    static const kt_kv_field_t num[] = {
        {"max_depth", offsetof(kt_model_params_t, max_depth), 'i'},
        {"eta", offsetof(kt_model_params_t, eta), 'd'},
        {"gamma", offsetof(kt_model_params_t, gamma), 'd'},
        {"min_child_weight", offsetof(kt_model_params_t, min_child_weight), 'd'},
        {"num_boost_round", offsetof(kt_model_params_t, num_boost_round), 'i'},
        {"early_stopping_rounds", offsetof(kt_model_params_t, early_stopping_rounds), 'i'},
        {"num_warmup_sample", offsetof(kt_model_params_t, num_warmup_sample), 'i'},
        {"adaptive_training", offsetof(kt_model_params_t, adaptive_training), 'i'},
        {"adaptive_ratio", offsetof(kt_model_params_t, adaptive_ratio), 'd'},
        {"weight_by_label", offsetof(kt_model_params_t, weight_by_label), 'i'},
        {"subsample", offsetof(kt_model_params_t, subsample), 'd'},
        {"colsample_bytree", offsetof(kt_model_params_t, colsample_bytree), 'd'},
        {"nthread", offsetof(kt_model_params_t, nthread), 'i'},
        {"seed", offsetof(kt_model_params_t, seed), 'u'},
    };
    kt_model_params_t *p = user;
    if (strcmp(key, "label") == 0 || strcmp(key, "tree_method") == 0) {
        int label = key[0] == 'l';
        int v = label ? kt_model_label_parse(val) : name_index(kt_model_tree_method_name, val);
        if (v < 0)
            return kt_err_set(KT_EINVAL, "model parameter %s: unknown value '%s'", key, val);
        *(label ? &p->label : &p->tree_method) = v;
        return KT_OK;
    }
    return kt_kv_set_number(p, num, KT_ARRAY_LEN(num), "model parameter", key, val);
}

static int params_check_any(const void *p)
{
    return params_check(p);
}

int kt_model_params_set(kt_model_params_t *p, const char *list)
{
    return kt_kv_update(p, sizeof *p, list, "model parameters", param_set_one, params_check_any);
}

static uint64_t rng_next(uint64_t *s)   /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s)   /* [0, 1): 24 random bits, exact in a float */
{
    return (float)(rng_next(s) >> 40) * 0x1p-24f;
}

static int kind_parse(const char *kind, kt_model_kind_t *out)
{
    if (kind && strcmp(kind, KT_MODEL_RANDOM) == 0)
        *out = KT_MODEL_KIND_RANDOM;
    else if (kind && strcmp(kind, KT_MODEL_XGB) == 0)
        *out = KT_MODEL_KIND_XGB;
    else
        return kt_err_set(KT_EINVAL, "unknown cost model '%s' (random, xgb)", kind ? kind : "(null)");
    return KT_OK;
}

kt_model_t *kt_model_new(const char *kind, const kt_model_params_t *params)
{
    kt_model_kind_t k;
    kt_model_params_t p;
    if (kind_parse(kind, &k) < 0)
        return NULL;
    if (params)
        p = *params;
    else
        kt_model_params_default(&p);
    if (params_check(&p) < 0)
        return NULL;
    kt_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    m->kind = k;
    m->p = p;
    m->rng = p.seed;
    return m;
}

void kt_model_free(kt_model_t *m)
{
    if (!m)
        return;
    if (m->bst)
        XGBoosterFree(m->bst);
    kt_model_free(m->prior);
    free(m->rows);
    free(m->samples);
    free(m);
}

void kt_model_set_stop(kt_model_t *m, const atomic_int *stop)
{
    if (m)
        m->stop = stop;
}

int kt_model_set_train_threads(kt_model_t *m, int n)
{
    if (!m || n < 0)
        return kt_err_set(KT_EINVAL, "model: %s", m ? "negative thread count" : "none");
    m->train_threads = n;
    return KT_OK;
}

kt_model_t *kt_model_snapshot(const kt_model_t *m)
{
    if (!m) {
        kt_err_set(KT_EINVAL, "snapshot: no model");
        return NULL;
    }
    kt_model_t *s = calloc(1, sizeof *s);
    if (!s) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    s->kind = m->kind;
    s->p = m->p;
    s->rng = m->rng;
    s->nfeat = m->nfeat;
    if (m->prior && !(s->prior = kt_model_snapshot(m->prior))) {
        kt_model_free(s);
        return NULL;
    }
    if (kt_model_own_trusted(m)) {
        char *buf = NULL;
        size_t len = 0;
        uint32_t nf = 0;
        int rc = kt_model_xgb_save(m->bst, &buf, &len);
        if (rc == 0)
            rc = kt_model_xgb_load(buf, len, m->p.nthread, &s->bst, &s->nrounds, &nf);
        free(buf);
        if (rc < 0) {
            kt_err_prefix("snapshot of the cost model");
            kt_model_free(s);
            return NULL;
        }
        /* it has no samples: trained means its booster, as a loaded model */
        s->warmup_off = 1;
        s->ntrain = m->ntrain;
    }
    return s;
}

/* Checks a batch and returns its total row count in *nrow. */
static int batch_check(const kt_model_batch_t *b, size_t *nrow)
{
    if (!b)
        return kt_err_set(KT_EINVAL, "no batch");
    if (b->nprog > 0 && !b->nrows)
        return kt_err_set(KT_EINVAL, "batch has %zu programs but no row counts", b->nprog);
    size_t n = 0;
    for (size_t i = 0; i < b->nprog; i++) {
        if (b->nrows[i] > SIZE_MAX - n)
            return kt_err_set(KT_EINVAL, "batch row count overflows");
        n += b->nrows[i];
    }
    if (n > 0) {
        if (b->nfeat == 0)
            return kt_err_set(KT_EINVAL, "batch has rows of 0 features");
        if (!b->rows)
            return kt_err_set(KT_EINVAL, "batch has %zu rows but no data", n);
        if (n > SIZE_MAX / sizeof(float) / b->nfeat || n > UINT32_MAX)
            return kt_err_set(KT_EINVAL, "batch of %zu rows is too large", n);
    }
    *nrow = n;
    return KT_OK;
}

static int nfeat_check(const kt_model_t *m, const kt_model_batch_t *b, size_t nrow)
{
    if (nrow > 0 && m->nfeat != 0 && b->nfeat != m->nfeat)
        return kt_err_set(KT_EINVAL, "batch has %u features per row, the model %u", b->nfeat,
                          m->nfeat);
    return KT_OK;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return KT_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    if (nc > SIZE_MAX / elem)
        return kt_err_set(KT_ENOMEM, "training set too large");
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return kt_err_set(KT_ENOMEM, "training set: out of memory");
    *arr = p;
    *cap = nc;
    return KT_OK;
}

static int samples_add(kt_model_t *m, const kt_model_batch_t *b, size_t nrow, const double *costs,
                       const uint64_t *task_ids)
{
    if (nrow > 0) {
        if (m->nfeat == 0)
            m->nfeat = b->nfeat;
        size_t need_rows = m->nrows_total + nrow;
        if (need_rows > UINT32_MAX)   /* XGBoost matrices are indexed by 32-bit rows */
            return kt_err_set(KT_EINVAL, "training set of %zu rows is too large", need_rows);
        int rc = grow((void **)&m->rows, &m->rows_cap, need_rows * m->nfeat, sizeof(float));
        if (rc < 0)
            return rc;
    }
    int rc = grow((void **)&m->samples, &m->samples_cap, m->nsamples + b->nprog,
                  sizeof *m->samples);
    if (rc < 0)
        return rc;
    if (nrow > 0)
        memcpy(m->rows + m->nrows_total * m->nfeat, b->rows, nrow * m->nfeat * sizeof(float));
    for (size_t i = 0; i < b->nprog; i++) {
        kt_model_sample_t *s = &m->samples[m->nsamples++];
        s->row = m->nrows_total;
        s->nrows = b->nrows[i];
        s->task = task_ids ? task_ids[i] : 0;
        s->cost = costs[i];
        m->nrows_total += s->nrows;
    }
    return KT_OK;
}

static int retrain(kt_model_t *m);

static int cost_ok(double c)
{
    return isfinite(c) && c > 0;
}

int kt_model_task_idx_cmp(const void *a, const void *b)
{
    const kt_model_task_idx_t *x = a, *y = b;
    if (x->task != y->task)
        return x->task < y->task ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* labels[i] = y_i = (min valid cost of sample i's task) / cost_i, 0 when
 * failed; log(max(y_i, KT_MODEL_LOG_FLOOR)) with log labels. */
static int labels_compute(const kt_model_t *m, float *labels)
{
    kt_model_task_idx_t *t = malloc(m->nsamples * sizeof *t);
    if (!t)
        return kt_err_set(KT_ENOMEM, "training labels: out of memory");
    for (size_t i = 0; i < m->nsamples; i++)
        t[i] = (kt_model_task_idx_t){ m->samples[i].task, i };
    qsort(t, m->nsamples, sizeof *t, kt_model_task_idx_cmp);
    for (size_t a = 0; a < m->nsamples;) {
        size_t e = a;
        double best = INFINITY;
        for (; e < m->nsamples && t[e].task == t[a].task; e++) {
            double c = m->samples[t[e].idx].cost;
            if (cost_ok(c) && c < best)
                best = c;
        }
        for (size_t j = a; j < e; j++) {
            double c = m->samples[t[j].idx].cost;
            double y = cost_ok(c) ? best / c : 0.0;
            if (m->p.label != KT_MODEL_LABEL_THROUGHPUT)
                y = log(y > KT_MODEL_LOG_FLOOR ? y : KT_MODEL_LOG_FLOOR);
            labels[t[j].idx] = (float)y;
        }
        a = e;
    }
    free(t);
    return KT_OK;
}

int kt_model_update(kt_model_t *m, const kt_model_batch_t *batch, const double *costs,
                    const uint64_t *task_ids)
{
    size_t nrow;
    int rc;
    if (!m)
        return kt_err_set(KT_EINVAL, "no model");
    if ((rc = batch_check(batch, &nrow)) < 0 || (rc = nfeat_check(m, batch, nrow)) < 0)
        return kt_err_prefix("updating the cost model");
    if (batch->nprog == 0)
        return KT_OK;
    if (!costs)
        return kt_err_set(KT_EINVAL, "updating the cost model: no costs");
    if (m->kind == KT_MODEL_KIND_RANDOM) {
        m->nsamples += batch->nprog;   /* counted only: random scores ignore data */
        return KT_OK;
    }
    if ((rc = samples_add(m, batch, nrow, costs, task_ids)) < 0)
        return rc;

    /* Ansor: skip when new < last / 5; a first update always trains. */
    size_t fresh = m->nsamples - m->last_train_size;
    if (m->p.adaptive_training && (double)fresh < m->p.adaptive_ratio * (double)m->last_train_size)
        return KT_OK;
    if (m->nrows_total == 0)
        return KT_OK;   /* only invalid programs so far: nothing to fit */

    return retrain(m);
}

/* Train a fresh booster on everything the model holds now (labels
 * renormalized); shared by update and keep_tasks. */
static int retrain(kt_model_t *m)
{
    float *labels = malloc((m->nsamples ? m->nsamples : 1) * sizeof *labels);
    if (!labels)
        return kt_err_set(KT_ENOMEM, "training: out of memory");
    int rc = labels_compute(m, labels);
    if (rc == KT_OK)
        rc = kt_model_xgb_train(m, labels);
    free(labels);
    if (rc < 0)
        return kt_err_prefix("training the xgb cost model on %zu programs", m->nsamples);
    m->last_train_size = m->nsamples;
    m->ntrain++;
    return KT_OK;
}

int kt_model_keep_tasks(kt_model_t *m, const uint64_t *tasks, size_t ntasks)
{
    if (!m || (ntasks > 0 && !tasks))
        return kt_err_set(KT_EINVAL, "keep tasks: bad arguments");
    if (m->kind != KT_MODEL_KIND_XGB)
        return kt_err_set(KT_EINVAL, "keep tasks: a %s model keeps no samples", kt_model_kind(m));
    size_t ns = 0, nr = 0;
    for (size_t i = 0; i < m->nsamples; i++) {
        kt_model_sample_t s = m->samples[i];
        int keep = 0;
        for (size_t k = 0; k < ntasks && !keep; k++)
            keep = s.task == tasks[k];
        if (!keep)
            continue;
        if (s.nrows > 0 && s.row != nr)   /* rows only move towards the front */
            memmove(m->rows + nr * m->nfeat, m->rows + s.row * m->nfeat,
                    (size_t)s.nrows * m->nfeat * sizeof(float));
        s.row = nr;
        nr += s.nrows;
        m->samples[ns++] = s;
    }
    if (ns == m->nsamples)
        return KT_OK;
    m->nsamples = ns;
    m->nrows_total = nr;
    /* the booster learned from dropped samples: replace it now, or forget it */
    if (m->bst) {
        XGBoosterFree(m->bst);
        m->bst = NULL;
        m->nrounds = 0;
    }
    m->warmup_off = 0;
    m->last_train_size = 0;
    if (nr == 0)
        return KT_OK;
    return retrain(m);
}

int kt_model_own_trusted(const kt_model_t *m)
{
    return m && m->bst &&
           (m->warmup_off || m->nsamples > (size_t)m->p.num_warmup_sample);
}

int kt_model_is_trained(const kt_model_t *m)
{
    return m && (m->prior || kt_model_own_trusted(m));
}

int kt_model_set_prior(kt_model_t *m, const kt_model_t *prior)
{
    if (!m || m->kind != KT_MODEL_KIND_XGB)
        return kt_err_set(KT_EINVAL, "prior: only an xgb model takes one");
    /* trees trained without the prior (or with it) mean nothing beside
     * another one */
    if (m->bst || m->ntrain > 0)
        return kt_err_set(KT_ESTATE, "prior: the model has trained already");
    if (!prior) {
        kt_model_free(m->prior);
        m->prior = NULL;
        return KT_OK;
    }
    if (prior->kind != KT_MODEL_KIND_XGB || !kt_model_own_trusted(prior) || prior->prior)
        return kt_err_set(KT_EINVAL, "prior: not a trained xgb model of its own");
    if (m->p.label == KT_MODEL_LABEL_THROUGHPUT || prior->p.label != m->p.label)
        return kt_err_set(KT_EINVAL,
                          "prior: trained with %s labels, the model has %s (priors need log or "
                          "rank labels, whose margins add up)",
                          kt_model_label_name(prior->p.label), kt_model_label_name(m->p.label));
    if (m->nfeat != 0 && prior->nfeat != m->nfeat)
        return kt_err_set(KT_EINVAL, "prior: %u features per row, the model %u", prior->nfeat,
                          m->nfeat);
    kt_model_t *copy = kt_model_snapshot(prior);
    if (!copy)
        return kt_err_prefix("prior");
    kt_model_free(m->prior);
    m->prior = copy;
    m->nfeat = prior->nfeat;
    return KT_OK;
}

const kt_model_t *kt_model_prior(const kt_model_t *m)
{
    return m ? m->prior : NULL;
}

int kt_model_log_scores(const kt_model_t *m)
{
    return kt_model_is_trained(m) && m->p.label != KT_MODEL_LABEL_THROUGHPUT;
}

int kt_model_predict(kt_model_t *m, const kt_model_batch_t *batch, float *scores)
{
    return kt_model_predict_rng(m, batch, scores, m ? &m->rng : NULL);
}

int kt_model_predict_rng(const kt_model_t *m, const kt_model_batch_t *batch, float *scores,
                         uint64_t *rng)
{
    size_t nrow;
    int rc;
    if (!m)
        return kt_err_set(KT_EINVAL, "no model");
    if ((rc = batch_check(batch, &nrow)) < 0)
        return kt_err_prefix("predicting");
    if (batch->nprog > 0 && !scores)
        return kt_err_set(KT_EINVAL, "predicting: no output array");

    if (!kt_model_is_trained(m)) {
        if (!rng)
            return kt_err_set(KT_EINVAL, "predicting: no random generator");
        for (size_t i = 0; i < batch->nprog; i++) {
            float u = rng_uniform(rng);
            scores[i] = batch->nrows[i] ? u : -INFINITY;
        }
        return KT_OK;
    }
    if ((rc = nfeat_check(m, batch, nrow)) < 0)
        return kt_err_prefix("predicting");
    float *margins = NULL, *extra = NULL;
    if (nrow > 0) {
        /* the own trees' margins, the prior's added (either may be absent) */
        const int own = kt_model_own_trusted(m);
        margins = calloc(nrow, sizeof *margins);
        extra = own && m->prior ? malloc(nrow * sizeof *extra) : NULL;
        if (!margins || (own && m->prior && !extra))
            rc = kt_err_set(KT_ENOMEM, "predicting: out of memory");
        if (rc == 0 && own)
            rc = kt_model_xgb_predict(m->bst, batch->rows, nrow, m->nfeat, m->p.nthread,
                                      margins);
        if (rc == 0 && m->prior)
            rc = kt_model_xgb_predict(m->prior->bst, batch->rows, nrow, m->nfeat, m->p.nthread,
                                      extra ? extra : margins);
        for (size_t i = 0; rc == 0 && extra && i < nrow; i++)
            margins[i] += extra[i];
        free(extra);
        if (rc < 0) {
            free(margins);
            return kt_err_prefix("predicting");
        }
    }
    size_t r = 0;
    for (size_t i = 0; i < batch->nprog; i++) {
        if (batch->nrows[i] == 0) {
            scores[i] = -INFINITY;
            continue;
        }
        double s = 0;   /* pack-sum: the program's score is its stages' sum */
        for (uint32_t j = 0; j < batch->nrows[i]; j++)
            s += margins[r++];
        scores[i] = (float)s;
    }
    free(margins);
    return KT_OK;
}

/* ---- files: one line of JSON (kind, parameters, state), a newline, then the
 * booster's bytes, whose length and xxHash the JSON records. ---- */

static json_t *params_to_json(const kt_model_params_t *p)
{
    char seed[24];
    snprintf(seed, sizeof seed, "%" PRIu64, p->seed);
    return json_pack("{s:s, s:i, s:f, s:f, s:f, s:i, s:i, s:i, s:b, s:f, s:b, s:i, s:i, s:s, "
                     "s:s, s:f, s:f}",
                     "seed", seed, "max_depth", p->max_depth, "eta", p->eta, "gamma", p->gamma,
                     "min_child_weight", p->min_child_weight, "num_boost_round",
                     p->num_boost_round, "early_stopping_rounds", p->early_stopping_rounds,
                     "num_warmup_sample", p->num_warmup_sample, "adaptive_training",
                     p->adaptive_training, "adaptive_ratio", p->adaptive_ratio,
                     "weight_by_label", p->weight_by_label, "verbose_eval", p->verbose_eval,
                     "nthread", p->nthread, "tree_method",
                     kt_model_tree_method_name(p->tree_method), "label",
                     kt_model_label_name(p->label), "subsample",
                     p->subsample, "colsample_bytree", p->colsample_bytree);
}

static int u64_parse(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Version 1 files lack label, subsample and colsample_bytree: they were
 * trained with Ansor's throughput labels on all rows and columns. */
static int params_from_json(json_t *j, kt_model_params_t *p)
{
    const char *seed = NULL, *tm = NULL, *label = "throughput";
    json_error_t e;
    int at = 0, wl = 0;
    p->subsample = 1;
    p->colsample_bytree = 1;
    if (json_unpack_ex(j, &e, JSON_STRICT,
                       "{s:s, s:i, s:F, s:F, s:F, s:i, s:i, s:i, s:b, s:F, s:b, s:i, s:i, s:s, "
                       "s?s, s?F, s?F}",
                       "seed", &seed, "max_depth", &p->max_depth, "eta", &p->eta, "gamma",
                       &p->gamma, "min_child_weight", &p->min_child_weight, "num_boost_round",
                       &p->num_boost_round, "early_stopping_rounds", &p->early_stopping_rounds,
                       "num_warmup_sample", &p->num_warmup_sample, "adaptive_training", &at,
                       "adaptive_ratio", &p->adaptive_ratio, "weight_by_label", &wl,
                       "verbose_eval", &p->verbose_eval, "nthread", &p->nthread,
                       "tree_method", &tm, "label", &label, "subsample", &p->subsample,
                       "colsample_bytree", &p->colsample_bytree) != 0)
        return kt_err_set(KT_EINVAL, "bad parameters: %s", e.text);
    if (u64_parse(seed, &p->seed) < 0)
        return kt_err_set(KT_EINVAL, "bad seed '%s'", seed);
    p->adaptive_training = at;
    p->weight_by_label = wl;
    if ((p->label = kt_model_label_parse(label)) < 0)
        return kt_err_set(KT_EINVAL, "unknown label kind '%s'", label);
    p->tree_method = name_index(kt_model_tree_method_name, tm);
    return params_check(p);
}

int kt_model_to_buffer(const kt_model_t *m, char **buf, size_t *len)
{
    if (!m || !buf || !len)
        return kt_err_set(KT_EINVAL, "serializing a cost model: no model or output");
    *buf = NULL;
    *len = 0;
    char *bbuf = NULL, *pbuf = NULL, *text = NULL, *out = NULL;
    size_t blen = 0, plen = 0;
    int rc = KT_OK;
    if (m->bst && (rc = kt_model_xgb_save(m->bst, &bbuf, &blen)) < 0)
        return rc;
    if (m->prior && (rc = kt_model_to_buffer(m->prior, &pbuf, &plen)) < 0) {
        free(bbuf);
        return kt_err_prefix("its prior");
    }
    char rng[24], hash[24];
    snprintf(rng, sizeof rng, "%" PRIu64, m->rng);
    snprintf(hash, sizeof hash, "%016" PRIx64, bbuf ? kt_hash64(bbuf, blen) : 0);
    json_t *params = params_to_json(&m->p);
    json_t *j = params ? json_pack("{s:s, s:i, s:s, s:I, s:s, s:b, s:o, s:I, s:s, s:I}",
                                   "format", FILE_FORMAT, "version", KT_MODEL_FILE_VERSION,
                                   "kind", kt_model_kind(m), "nfeat", (json_int_t)m->nfeat,
                                   "rng", rng, "booster_in_use", kt_model_own_trusted(m),
                                   "params", params, "booster_bytes", (json_int_t)blen,
                                   "booster_xxh3", hash, "prior_bytes", (json_int_t)plen)
                       : NULL;
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    size_t tlen = text ? strlen(text) : 0;
    if (!text || !(out = malloc(tlen + 1 + blen + plen))) {
        rc = kt_err_set(KT_ENOMEM, "serializing a cost model: out of memory");
    } else {
        memcpy(out, text, tlen);
        out[tlen] = '\n';
        if (blen)
            memcpy(out + tlen + 1, bbuf, blen);
        if (plen)
            memcpy(out + tlen + 1 + blen, pbuf, plen);
        *buf = out;
        *len = tlen + 1 + blen + plen;
    }
    free(bbuf);
    free(pbuf);
    free(text);
    return rc;
}

int kt_model_save(const kt_model_t *m, const char *path)
{
    if (!m || !path)
        return kt_err_set(KT_EINVAL, "saving a cost model: no model or path");
    char *buf = NULL;
    size_t len = 0;
    int rc = kt_model_to_buffer(m, &buf, &len);
    if (rc == 0)
        rc = kt_file_write(path, buf, len);
    free(buf);
    return rc < 0 ? kt_err_prefix("saving the cost model to %s", path) : rc;
}

kt_model_t *kt_model_from_buffer(const void *data, size_t len)
{
    const char *buf = data;
    if (!buf) {
        kt_err_set(KT_EINVAL, "no model bytes");
        return NULL;
    }
    kt_model_t *m = NULL;
    json_t *j = NULL;
    const char *nl = memchr(buf, '\n', len);
    json_error_t e;
    if (!nl || !(j = json_loadb(buf, (size_t)(nl - buf), 0, &e))) {
        kt_err_set(KT_EINVAL, "not a ktune model file");
        goto fail;
    }
    const char *format = NULL, *kind = NULL, *rng = NULL, *hash = NULL;
    int version = 0, in_use = 0;
    json_int_t nfeat = 0, blen = 0, plen = 0;
    json_t *params = NULL;
    if (json_unpack_ex(j, &e, JSON_STRICT, "{s:s, s:i, s:s, s:I, s:s, s:b, s:o, s:I, s:s, s?I}",
                       "format", &format, "version", &version, "kind", &kind, "nfeat", &nfeat,
                       "rng", &rng, "booster_in_use", &in_use, "params", &params,
                       "booster_bytes", &blen, "booster_xxh3", &hash, "prior_bytes",
                       &plen) != 0) {
        kt_err_set(KT_EINVAL, "bad header: %s", e.text);
        goto fail;
    }
    if (strcmp(format, FILE_FORMAT) != 0 || version < 1 || version > KT_MODEL_FILE_VERSION) {
        kt_err_set(KT_EINVAL, "not a ktune model file (format %s version %d)", format, version);
        goto fail;
    }
    kt_model_params_t p;
    kt_model_params_default(&p);
    kt_model_kind_t k;
    uint64_t rng_state;
    if (kind_parse(kind, &k) < 0 || params_from_json(params, &p) < 0)
        goto fail;
    if (u64_parse(rng, &rng_state) < 0 || nfeat < 0 || nfeat > UINT32_MAX) {
        kt_err_set(KT_EINVAL, "bad header fields");
        goto fail;
    }
    size_t have = len - (size_t)(nl + 1 - buf);
    if (blen < 0 || plen < 0 || (size_t)blen > have || (size_t)plen != have - (size_t)blen) {
        kt_err_set(KT_EINVAL, "truncated: %zu bytes after the header, it says %lld + %lld", have,
                   (long long)blen, (long long)plen);
        goto fail;
    }
    have = (size_t)blen;
    char want[24];
    snprintf(want, sizeof want, "%016" PRIx64, have ? kt_hash64(nl + 1, have) : 0);
    if (strcmp(want, hash) != 0) {
        kt_err_set(KT_EINVAL, "booster checksum mismatch (corrupt file)");
        goto fail;
    }
    if (!(m = kt_model_new(kind, &p)))
        goto fail;
    m->rng = rng_state;
    m->nfeat = (uint32_t)nfeat;
    if (have > 0) {
        if (k != KT_MODEL_KIND_XGB) {
            kt_err_set(KT_EINVAL, "a %s model has no booster", kind);
            goto fail;
        }
        uint32_t bnfeat = 0;
        if (kt_model_xgb_load(nl + 1, have, p.nthread, &m->bst, &m->nrounds, &bnfeat) < 0)
            goto fail;
        if (bnfeat != m->nfeat) {
            kt_err_set(KT_EINVAL, "booster has %u features, header %u", bnfeat, m->nfeat);
            goto fail;
        }
        m->warmup_off = in_use;
    }
    if (plen > 0) {
        kt_model_t *prior = kt_model_from_buffer(nl + 1 + have, (size_t)plen);
        if (!prior) {
            kt_err_prefix("its prior");
            goto fail;
        }
        /* what kt_model_set_prior accepts, so a file cannot nest priors */
        if (k != KT_MODEL_KIND_XGB || prior->prior || !kt_model_own_trusted(prior) ||
            prior->nfeat != m->nfeat || prior->p.label != m->p.label) {
            kt_model_free(prior);
            kt_err_set(KT_EINVAL, "its prior does not fit the model");
            goto fail;
        }
        m->prior = prior;
    }
    json_decref(j);
    return m;
fail:
    kt_model_free(m);
    json_decref(j);
    return NULL;
}

kt_model_t *kt_model_load(const char *path)
{
    size_t len = 0;
    if (!path) {
        kt_err_set(KT_EINVAL, "loading a cost model: no path");
        return NULL;
    }
    char *buf = kt_file_read(path, &len);
    if (!buf) {
        kt_err_prefix("loading the cost model");
        return NULL;
    }
    kt_model_t *m = kt_model_from_buffer(buf, len);
    free(buf);
    if (!m)
        kt_err_prefix("loading the cost model %s", path);
    return m;
}

const char *kt_model_kind(const kt_model_t *m)
{
    return m->kind == KT_MODEL_KIND_XGB ? KT_MODEL_XGB : KT_MODEL_RANDOM;
}

const kt_model_params_t *kt_model_params(const kt_model_t *m)
{
    return &m->p;
}

size_t kt_model_num_samples(const kt_model_t *m)
{
    return m->nsamples;
}

unsigned kt_model_num_trainings(const kt_model_t *m)
{
    return m->ntrain;
}

int kt_model_num_rounds(const kt_model_t *m)
{
    return m->bst ? m->nrounds : 0;
}
