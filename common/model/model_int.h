/*
 * Private to common/model: the model's fields and the XGBoost half (xgb.c),
 * shared with model.c. Not installed; nothing outside this folder includes it.
 */
#ifndef KT_MODEL_MODEL_INT_H
#define KT_MODEL_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include <xgboost/c_api.h>

#include "model/model.h"

typedef enum { KT_MODEL_KIND_RANDOM = 0, KT_MODEL_KIND_XGB } kt_model_kind_t;

/* One measured program of the training set. */
typedef struct {
    size_t row;       /* index of its first row in kt_model.rows */
    uint32_t nrows;   /* 0: invalid, no rows */
    uint64_t task;
    double cost;      /* seconds; not finite or <= 0 = failed */
} kt_model_sample_t;

struct kt_model {
    kt_model_kind_t kind;
    kt_model_params_t p;
    uint64_t rng;           /* splitmix64 state */
    uint32_t nfeat;         /* 0 until rows were seen */
    float *rows;            /* all training rows, nrows_total x nfeat */
    size_t nrows_total, rows_cap;
    kt_model_sample_t *samples;
    size_t nsamples, samples_cap;
    size_t last_train_size; /* samples in the last training run */
    unsigned ntrain;
    BoosterHandle bst;      /* NULL until trained or loaded */
    int nrounds;            /* trees in bst */
    int warmup_off;         /* loaded with its booster in use */
    int train_threads;      /* XGBoost threads of a training; 0: p.nthread */
    /* kt_model_set_prior: a trained xgb model (owned copy, no prior of its
     * own) whose scores this one's trees add to; NULL when none. */
    kt_model_t *prior;
    const atomic_int *stop; /* kt_model_set_stop; NULL: never */
};

/* 1 when m's own booster scores (trained and past its warm-up, or loaded
 * in use), whatever its prior. */
int kt_model_own_trusted(const kt_model_t *m);

/* A sample (or packed program) index with its task: sorted by task, then
 * index, with kt_model_task_idx_cmp, to visit the samples task by task. */
typedef struct {
    uint64_t task;
    size_t idx;
} kt_model_task_idx_t;

int kt_model_task_idx_cmp(const void *a, const void *b);

/* "exact", "approx", "hist" for KT_MODEL_TREE_*; NULL when out of range. */
const char *kt_model_tree_method_name(int tree_method);

/* Train a fresh booster on m's rows; labels has one entry per sample. With
 * a prior, its row margins are where the boosting starts (the new trees fit
 * what the prior gets wrong). On success replaces m->bst and m->nrounds; on
 * failure leaves them. */
int kt_model_xgb_train(kt_model_t *m, const float *labels);
/* Margins of nrow rows of nfeat floats into out[nrow]. */
int kt_model_xgb_predict(BoosterHandle bst, const float *rows, size_t nrow, uint32_t nfeat,
                         int nthread, float *out);
/* Serialized booster (malloc'd, caller frees) and back. */
int kt_model_xgb_save(BoosterHandle bst, char **buf, size_t *len);
int kt_model_xgb_load(const void *buf, size_t len, int nthread, BoosterHandle *out,
                      int *nrounds, uint32_t *nfeat);

#endif
