/*
 * Cost models: they score candidate programs (higher = predicted faster) so the
 * search measures only promising ones (Ansor's RandomModel and XGBModel). A
 * model sees programs only as feature matrices: a program is a set of
 * per-stage rows of `nfeat` floats, and programs have different numbers of
 * rows. It knows nothing about schedules, feature extraction or measurement.
 *
 * Two kinds, created by name:
 * - "random": uniform scores in [0, 1) from a seeded generator; updates are
 *   accepted and only counted.
 * - "xgb": gradient-boosted trees (XGBoost C API) with the "pack-sum"
 *   objective: a program's score is the SUM of its rows' predictions; each
 *   round the squared error of every program's sum against its label gives
 *   grad = (sum - label) for each of its rows, hess = 1, both multiplied by the
 *   program's weight (1, or its throughput label as Ansor does when
 *   weight_by_label is on: failed programs then weigh nothing). Labels are
 *   normalized throughputs y = (min cost of the same task over ALL samples
 *   seen) / cost, 0 for failed measurements; with label = KT_MODEL_LABEL_LOG
 *   (the default) the model fits log(max(y, KT_MODEL_LOG_FLOOR)) instead, so
 *   a program's stages add up to a log-throughput: a 2x slower stage costs
 *   the same anywhere in the range and the many slow programs of a random
 *   sample are ranked too (Ansor's throughput labels push every program
 *   slower than ~10x the best towards 0). Every (re)training starts from
 *   scratch on all accumulated samples and runs up to num_boost_round rounds,
 *   stopping after early_stopping_rounds rounds without a new best pack-sum
 *   RMSE on the training set itself (Ansor's "tr-p-rmse"); the trees up to
 *   the best round are kept. Until more than num_warmup_sample samples exist
 *   the model predicts random scores like "random".
 *   With label = KT_MODEL_LABEL_RANK the log labels only say which of two
 *   programs of the same task is faster: the objective is the pairwise
 *   logistic loss of their score difference (RankNet), over all pairs of a
 *   task of up to 65 programs, else 64 partners drawn per program; early
 *   stopping watches that loss. On measured matmul, conv2d and depthwise
 *   programs it ranks held-out pairs as well or better than the log
 *   regression (bench_model_quality), on noise-free synthetic labels worse;
 *   exp(score) is then a Bradley-Terry strength. The search's models use it
 *   (kt_search_opts_t.model_label); the default here stays log.
 *
 * Defaults (kt_model_params_default) are shallower, slower-learning trees on
 * row and column subsamples with log labels: on 1,000 measured random
 * programs they rank held-out pairs right 0.87 of the time against 0.81 with
 * Ansor's parameters for a matmul, 0.85 against 0.71 for a conv2d
 * (bench/bench_model_quality.c). kt_model_params_ansor()
 * gives Ansor's: max_depth 10, eta 0.2, min_child_weight 0, no subsampling,
 * throughput labels weighted by label.
 *
 * Adaptive training (on by default, as the service's long runs need; Ansor's
 * default is off): an update that brings fewer than adaptive_ratio x (size of
 * the last training set) new samples only stores them; the next update that
 * reaches the threshold retrains on everything.
 *
 * Invalid programs (a row count of 0, e.g. a state that failed lowering or
 * exceeds hardware limits) score -INFINITY with both kinds.
 *
 * Priors (kt_model_set_prior): an xgb model may start from another trained
 * one, e.g. the record store's model of its device key trained on other
 * workloads' records. The prior scores at once (the model counts as trained
 * from then on, so no random warm-up), and every training boosts from the
 * prior's margins: the model's own trees fit what the prior gets wrong on
 * the model's samples, and a score is the prior's plus theirs (until the
 * own booster passes the warm-up, the prior's alone). The prior itself never
 * changes. Log and rank labels only: their margins add up.
 *
 * Files and buffers: kt_model_to_buffer (kt_model_save writes the same
 * bytes to a file) holds the kind, parameters, generator state, the
 * booster (XGBoost's UBJSON, with a length and an xxHash checksum) and the
 * prior's own bytes; it does not store the training samples (like Ansor).
 * A loaded model predicts exactly as the saved one did. When the saved
 * model was predicting with its booster, the loaded one does so at once
 * with the warm-up disabled (Ansor's load sets num_warmup_sample = -1); its
 * next training run, on the data given to the loaded model only, replaces
 * the booster.
 *
 * Ownership: kt_model_new/kt_model_load return a model the caller releases
 * with kt_model_free (NULL accepted). Batches and output arrays are the
 * caller's; the model copies what it keeps.
 * Threads: a model must be used by one thread at a time (predict advances its
 * random generator); distinct models may be used from different threads.
 * The exception: kt_model_predict_rng draws an untrained model's random
 * scores from the caller's generator and changes nothing in the model, so
 * several threads may call it on one model at once (XGBoost >= 1.4 documents
 * prediction on one tree booster from several threads as safe) as long as no
 * thread updates, trains, loads or saves that model meanwhile.
 */
#ifndef KT_MODEL_MODEL_H
#define KT_MODEL_MODEL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kt_model kt_model_t;

/* A batch of programs. Program i owns nrows[i] consecutive rows of `rows`
 * (program 0 first), each of nfeat floats; rows holds sum(nrows) x nfeat
 * floats, row-major. nrows[i] == 0 marks program i invalid. NaN features are
 * treated as missing by XGBoost. */
typedef struct kt_model_batch {
    const float *rows;
    const uint32_t *nrows;
    size_t nprog;
    uint32_t nfeat;
} kt_model_batch_t;

/* Parameters; kt_model_params_default() fills ktune's values (Ansor's in the
 * comments where they differ). Only seed matters for "random". */
typedef struct kt_model_params {
    uint64_t seed;              /* random scores; XGBoost's seed (43) */
    int max_depth;              /* tree depth (6; Ansor 10) */
    double eta;                 /* learning rate (0.05; Ansor 0.2) */
    double gamma;               /* minimum split loss (0.001) */
    double min_child_weight;    /* minimum hessian sum in a leaf (1; Ansor 0) */
    int num_boost_round;        /* rounds at most (300; Ansor 10000) */
    int early_stopping_rounds;  /* rounds without a better training RMSE (50) */
    int num_warmup_sample;      /* random scores until MORE samples than this (100) */
    int adaptive_training;      /* 1: skip retraining when few new samples (1) */
    double adaptive_ratio;      /* "few" = fewer than this x last training size (0.2) */
    int weight_by_label;        /* 1: weight each program by its throughput label, as Ansor (0) */
    int label;                  /* KT_MODEL_LABEL_* (log) */
    double subsample;           /* share of rows each tree sees, (0, 1] (0.8) */
    double colsample_bytree;    /* share of features each tree sees, (0, 1] (0.8) */
    int verbose_eval;           /* log the RMSE every N rounds; 0 silent (0) */
    int nthread;                /* XGBoost threads; 0 = all cores (1) */
    int tree_method;            /* KT_MODEL_TREE_* (exact) */
} kt_model_params_t;

/* Training labels. */
#define KT_MODEL_LABEL_THROUGHPUT 0   /* y, as Ansor */
#define KT_MODEL_LABEL_LOG 1          /* log(max(y, KT_MODEL_LOG_FLOOR)) */
#define KT_MODEL_LABEL_RANK 2         /* log labels only order the pairs of one task's
                                         programs; trained on the pairwise logistic loss */
#define KT_MODEL_LOG_FLOOR 1e-4       /* failed programs: 10,000x slower than the best */

/* "throughput", "log", "rank" for KT_MODEL_LABEL_* (NULL when out of range)
 * and back (-1 for an unknown name or NULL). */
const char *kt_model_label_name(int label);
int kt_model_label_parse(const char *name);

/* XGBoost tree construction. Exact greedy is what Ansor ran (XGBoost's "auto"
 * picks it for data of this size); hist is several times faster to train on
 * thousands of programs, with similar ranking quality. */
#define KT_MODEL_TREE_EXACT 0
#define KT_MODEL_TREE_APPROX 1
#define KT_MODEL_TREE_HIST 2

/* The format of kt_model_to_buffer's bytes and kt_model_save's files: 2 added
 * label, subsample and colsample_bytree, 3 the prior; older ones load. */
#define KT_MODEL_FILE_VERSION 3

/* Kind names for kt_model_new. */
#define KT_MODEL_RANDOM "random"
#define KT_MODEL_XGB "xgb"

/* ---- create / release ---- */
void kt_model_params_default(kt_model_params_t *p);
/* Ansor's XGBModel parameters (see above), for comparison. */
void kt_model_params_ansor(kt_model_params_t *p);
/* Sets parameters from "key=value[,key=value...]": keys are the field names
 * above (max_depth, eta, gamma, min_child_weight, num_boost_round,
 * early_stopping_rounds, num_warmup_sample, adaptive_training,
 * adaptive_ratio, weight_by_label, subsample, colsample_bytree, nthread,
 * seed), label (throughput|log|rank) and tree_method (exact|approx|hist).
 * All or nothing: on an unknown key, a malformed value or a result out of
 * range p is left as it was. 0 or KT_EINVAL with a message. */
int kt_model_params_set(kt_model_params_t *p, const char *list);
/* kind is "random" or "xgb"; params NULL means defaults. NULL on error. */
kt_model_t *kt_model_new(const char *kind, const kt_model_params_t *params);
void kt_model_free(kt_model_t *m);

/* ---- train / score ---- */
/* Add batch->nprog measured programs: costs[i] in seconds (the mean over
 * repeats), <= 0, NaN or infinite for a failed measurement; task_ids[i] groups
 * programs for normalization (NULL: one task). Invalid programs count as
 * samples (for the warm-up and normalization) but add no rows. The first batch
 * with rows fixes nfeat. The samples are kept even when training fails.
 * 0 or negative KT_E*. */
int kt_model_update(kt_model_t *m, const kt_model_batch_t *batch, const double *costs,
                    const uint64_t *task_ids);
/* One score per program into scores[batch->nprog]: higher = better, -INFINITY
 * for invalid programs. 0 or negative KT_E*. */
int kt_model_predict(kt_model_t *m, const kt_model_batch_t *batch, float *scores);
/* kt_model_predict, but an untrained model's random scores advance *rng (a
 * splitmix64 state the caller owns) instead of the model's generator: a
 * model shared by several searches then scores each one's states the same
 * whatever the order or overlap of their calls. Read-only on the model. */
int kt_model_predict_rng(const kt_model_t *m, const kt_model_batch_t *batch, float *scores,
                         uint64_t *rng);

/* A copy of m that predicts as m does now (its booster copied, through
 * XGBoost's model buffer; untrained: random scores) and holds no samples:
 * a model shared by searches on several threads is trained while they score
 * with the snapshot. NULL + kt_err on failure; kt_model_free releases it.
 * Reads m only (not at the same time as an update of m). */
kt_model_t *kt_model_snapshot(const kt_model_t *m);
/* Threads for the per-pair math of m's rank-label trainings (the pairwise
 * loss and gradients, most of a training on thousands of programs), which
 * do not change the result; XGBoost's tree building keeps the params'
 * nthread (on a few thousand programs its threads cost more than they
 * save). For a model trained by one thread at a time while copies of it
 * score on the others (a shared family model). n 0: the params' nthread.
 * 0 or KT_EINVAL. Not thread-safe against a training of m. */
int kt_model_set_train_threads(kt_model_t *m, int n);

/* Trainings of m end early, failing with KT_ESTATE ("training stopped")
 * and leaving the booster as it was, once *stop is nonzero (checked every
 * boosting round): a stopping tracker need not wait for one. NULL: never.
 * *stop must outlive m's trainings; copies of m do not inherit it. */
void kt_model_set_stop(kt_model_t *m, const atomic_int *stop);

/* Drop every sample whose task id is not in tasks[0..ntasks) (FamilySeer:
 * a family model that trained on all tasks during the warm-up keeps only its
 * family's samples afterwards). When something was dropped, the booster is
 * retrained at once on what is left (or forgotten when nothing is left; a
 * loaded model's warm-up bypass ends too). "xgb" models only (a random model
 * keeps no samples): KT_EINVAL otherwise. 0 or negative KT_E*. */
int kt_model_keep_tasks(kt_model_t *m, const uint64_t *tasks, size_t ntasks);

/* Start m from `prior` (a copy is kept; NULL removes it): see "Priors"
 * above. m must be xgb and not trained yet (KT_ESTATE otherwise); prior a
 * trained xgb model without a prior, of m's label kind (log or rank) and
 * feature count (KT_EINVAL otherwise). 0 or negative KT_E*. */
int kt_model_set_prior(kt_model_t *m, const kt_model_t *prior);
/* m's prior (owned by m), NULL when none. */
const kt_model_t *kt_model_prior(const kt_model_t *m);

/* ---- files and buffers ---- */
/* m's bytes (format KT_MODEL_FILE_VERSION) into *buf (malloc'd, caller
 * frees) and *len. 0 or negative KT_E*. */
int kt_model_to_buffer(const kt_model_t *m, char **buf, size_t *len);
/* A model from kt_model_to_buffer's bytes; NULL with a message when they
 * are truncated, corrupt (checksum, XGBoost refuses the booster) or of a
 * newer format. */
kt_model_t *kt_model_from_buffer(const void *buf, size_t len);
int kt_model_save(const kt_model_t *m, const char *path);
/* NULL with a message when the file is missing, truncated or corrupt. */
kt_model_t *kt_model_load(const char *path);

/* ---- state ---- */
const char *kt_model_kind(const kt_model_t *m);       /* "random" or "xgb" */
const kt_model_params_t *kt_model_params(const kt_model_t *m);
size_t kt_model_num_samples(const kt_model_t *m);     /* programs given to update */
unsigned kt_model_num_trainings(const kt_model_t *m); /* training runs done */
int kt_model_num_rounds(const kt_model_t *m);         /* trees kept by the last run */
/* 1 when predict uses a trained booster (its own or its prior's), 0 when it
 * returns random scores. */
int kt_model_is_trained(const kt_model_t *m);
/* 1 when predict's scores are log-throughputs (a trained model with log
 * labels): exp(score) is then proportional to the predicted throughput, which
 * is what a search that selects in proportion to throughput must weigh by
 * (with rank labels, to the odds of beating another program). 0 when
 * scores are throughputs themselves (or random). */
int kt_model_log_scores(const kt_model_t *m);

/* ---- quality metrics (metrics.c) ---- */
/* Share of pairs (i, j) with truth[i] != truth[j] that pred orders the same
 * way; a tie in pred counts one half. *out = NaN when no pair qualifies.
 * 0 or KT_EINVAL. */
int kt_model_pairwise_accuracy(const float *pred, const float *truth, size_t n, double *out);
/* |top k by pred ∩ top k by truth| / k (k capped at n; ties broken by index).
 * 0, KT_EINVAL (k == 0 or n == 0) or KT_ENOMEM. */
int kt_model_topk_recall(const float *pred, const float *truth, size_t n, size_t k,
                         double *out);

#endif
