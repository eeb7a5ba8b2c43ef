#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "util/err.h"
#include "util/util.h"

#define NFEAT 20

/* A synthetic set of programs: 1-3 rows of NFEAT features each; the true
 * throughput is the sum over rows of a smooth nonlinear function of a few
 * features (the rest are noise, as most real features are for a given task). */
typedef struct {
    float *rows;
    uint32_t *nrows;
    double *cost;
    float *truth;   /* throughput */
    size_t nprog, nrow;
} progs_t;

static uint64_t rng_state;

static double urand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static double row_value(const float *x)
{
    return 1.0 + 3.0 * x[0] + 2.0 * x[1] * x[1] + sin(3.0 * x[2]) + 2.0 * x[3] * x[4];
}

/* Programs of 1-3 random rows. Their throughput is a known function of the
 * rows: additive (the sum of row_value, the structure Ansor's throughput
 * labels fit) or, with `product`, the product of exp(row_value / 2) (a sum in
 * log space, the structure of ktune's default log labels). */
static void progs_make_as(progs_t *p, size_t n, uint64_t seed, int product)
{
    rng_state = seed;
    memset(p, 0, sizeof *p);
    p->nprog = n;
    p->nrows = calloc(n, sizeof *p->nrows);
    p->cost = calloc(n, sizeof *p->cost);
    p->truth = calloc(n, sizeof *p->truth);
    p->rows = calloc(n * 3 * NFEAT, sizeof *p->rows);
    ck_assert(p->nrows && p->cost && p->truth && p->rows);
    for (size_t i = 0; i < n; i++) {
        p->nrows[i] = 1 + (uint32_t)(urand() * 3);
        double t = 0;
        for (uint32_t r = 0; r < p->nrows[i]; r++) {
            float *x = p->rows + (p->nrow + r) * NFEAT;
            for (int f = 0; f < NFEAT; f++)
                x[f] = (float)urand();
            t += product ? row_value(x) / 2 : row_value(x);
        }
        if (product)
            t = exp(t);
        p->nrow += p->nrows[i];
        p->truth[i] = (float)t;
        p->cost[i] = 1e-3 / t;   /* seconds: faster programs have higher throughput */
    }
}

static void progs_make(progs_t *p, size_t n, uint64_t seed)
{
    progs_make_as(p, n, seed, 1);
}

static void progs_free(progs_t *p)
{
    free(p->rows);
    free(p->nrows);
    free(p->cost);
    free(p->truth);
}

static kt_model_batch_t batch_of(const progs_t *p)
{
    return (kt_model_batch_t){ p->rows, p->nrows, p->nprog, NFEAT };
}

/* Batch of programs [from, from + n) of p. */
static kt_model_batch_t batch_slice(const progs_t *p, size_t from, size_t n)
{
    size_t row = 0;
    for (size_t i = 0; i < from; i++)
        row += p->nrows[i];
    return (kt_model_batch_t){ p->rows + row * NFEAT, p->nrows + from, n, NFEAT };
}

/* One model trained on 1,000 programs, shared by the tests that only read it
 * (built once in the runner before the per-test forks). */
static progs_t train_set, test_set;
static kt_model_t *trained;

static void trained_setup(void)
{
    progs_make(&train_set, 1000, 1);
    progs_make(&test_set, 200, 2);
    trained = kt_model_new(KT_MODEL_XGB, NULL);
    ck_assert_ptr_nonnull(trained);
    kt_model_batch_t b = batch_of(&train_set);
    ck_assert_int_eq(kt_model_update(trained, &b, train_set.cost, NULL), 0);
}

static void trained_teardown(void)
{
    kt_model_free(trained);
    progs_free(&train_set);
    progs_free(&test_set);
}

static char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/kt_model_%d_%s", (int)getpid(), name);
    return path;
}

START_TEST(xgb_ranks_held_out_programs)
{
    ck_assert(kt_model_is_trained(trained));
    ck_assert_uint_eq(kt_model_num_trainings(trained), 1);
    ck_assert_int_gt(kt_model_num_rounds(trained), 0);
    float *pred = malloc(test_set.nprog * sizeof *pred);
    kt_model_batch_t b = batch_of(&test_set);
    ck_assert_int_eq(kt_model_predict(trained, &b, pred), 0);
    double acc, recall;
    ck_assert_int_eq(kt_model_pairwise_accuracy(pred, test_set.truth, test_set.nprog, &acc), 0);
    ck_assert_int_eq(kt_model_topk_recall(pred, test_set.truth, test_set.nprog, 20, &recall), 0);
    printf("xgb held-out: pairwise accuracy %.3f, top-20 recall %.2f, %d rounds\n", acc, recall,
           kt_model_num_rounds(trained));
    ck_assert(acc >= 0.9);
    ck_assert(recall >= 0.5);
    free(pred);
}
END_TEST

/* Rank labels trained from the first sample on, with the hist method. */
static kt_model_params_t rank_params(void)
{
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.label = KT_MODEL_LABEL_RANK;
    prm.num_warmup_sample = 0;
    prm.tree_method = KT_MODEL_TREE_HIST;
    return prm;
}

START_TEST(rank_labels_rank_held_out_programs_of_each_task)
{
    /* The pairwise objective orders the programs of each task: two tasks
     * (the same programs, one 1000x slower) train one model; held-out
     * programs rank nearly as well as with the regression on log labels
     * (0.87 against 0.89 on these noise-free labels; a wrong sign falls far
     * below 0.5), the scores count as log-scores, and a
     * saved model reloads with its label kind. */
    progs_t tr, te;
    progs_make(&tr, 600, 21);
    progs_make(&te, 200, 22);
    size_t n = tr.nprog;
    double *costs = malloc(2 * n * sizeof *costs);
    uint64_t *tasks = malloc(2 * n * sizeof *tasks);
    for (size_t i = 0; i < n; i++) {
        costs[i] = tr.cost[i];
        costs[n + i] = tr.cost[i] * 1000;
        tasks[i] = 1;
        tasks[n + i] = 2;
    }
    kt_model_params_t prm = rank_params();
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t b = batch_of(&tr);
    ck_assert_int_eq(kt_model_update(m, &b, costs, tasks), 0);
    ck_assert_int_eq(kt_model_update(m, &b, costs + n, tasks + n), 0);
    ck_assert(kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_log_scores(m), 1);
    float *pred = malloc(te.nprog * sizeof *pred), *again = malloc(te.nprog * sizeof *again);
    b = batch_of(&te);
    ck_assert_int_eq(kt_model_predict(m, &b, pred), 0);
    double acc;
    ck_assert_int_eq(kt_model_pairwise_accuracy(pred, te.truth, te.nprog, &acc), 0);
    printf("xgb (rank labels) held-out: pairwise accuracy %.3f, %d rounds\n", acc,
           kt_model_num_rounds(m));
    ck_assert_msg(acc >= 0.85, "pairwise accuracy %.3f", acc);

    const char *path = tmp_path("rank");
    ck_assert_int_eq(kt_model_save(m, path), 0);
    kt_model_t *l = kt_model_load(path);
    ck_assert_msg(l != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_model_params(l)->label, KT_MODEL_LABEL_RANK);
    ck_assert_int_eq(kt_model_predict(l, &b, again), 0);
    ck_assert_mem_eq(pred, again, te.nprog * sizeof *pred);
    unlink(path);
    kt_model_free(l);
    kt_model_free(m);
    free(pred);
    free(again);
    free(costs);
    free(tasks);
    progs_free(&tr);
    progs_free(&te);
}
END_TEST

START_TEST(ansor_parameters_rank_an_additive_target)
{
    progs_t tr, te;
    progs_make_as(&tr, 600, 11, 0);
    progs_make_as(&te, 200, 12, 0);
    kt_model_params_t prm;
    kt_model_params_ansor(&prm);
    prm.tree_method = KT_MODEL_TREE_HIST;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t b = batch_of(&tr);
    ck_assert_int_eq(kt_model_update(m, &b, tr.cost, NULL), 0);
    float *pred = malloc(te.nprog * sizeof *pred);
    b = batch_of(&te);
    ck_assert_int_eq(kt_model_predict(m, &b, pred), 0);
    double acc;
    ck_assert_int_eq(kt_model_pairwise_accuracy(pred, te.truth, te.nprog, &acc), 0);
    printf("xgb (Ansor's parameters) held-out, additive target: pairwise accuracy %.3f\n", acc);
    ck_assert(acc >= 0.9);
    free(pred);
    kt_model_free(m);
    progs_free(&tr);
    progs_free(&te);
}
END_TEST

START_TEST(xgb_pack_sum_adds_stage_predictions)
{
    /* Programs: [a], [b], [a, a], [a, b], with a and b the first two test rows. */
    static const int pick[6] = { 0, 1, 0, 0, 0, 1 };
    float rows[6 * NFEAT];
    for (int r = 0; r < 6; r++)
        for (int f = 0; f < NFEAT; f++)
            rows[r * NFEAT + f] = test_set.rows[pick[r] * NFEAT + f];
    uint32_t nrows[4] = { 1, 1, 2, 2 };
    kt_model_batch_t batch = { rows, nrows, 4, NFEAT };
    float s[4];
    ck_assert_int_eq(kt_model_predict(trained, &batch, s), 0);
    ck_assert(s[0] != s[1]);
    ck_assert_float_eq_tol(s[2], 2 * s[0], 1e-5);
    ck_assert_float_eq_tol(s[3], s[0] + s[1], 1e-5);
}
END_TEST

START_TEST(invalid_programs_score_minus_infinity)
{
    uint32_t nrows[3] = { 1, 0, 1 };
    kt_model_batch_t batch = { test_set.rows, nrows, 3, NFEAT };
    float s[3];
    ck_assert_int_eq(kt_model_predict(trained, &batch, s), 0);
    ck_assert(isfinite(s[0]) && isfinite(s[2]));
    ck_assert(isinf(s[1]) && s[1] < 0);
    /* Both rows are the first two of the set: the invalid one takes none. */
    uint32_t one[2] = { 1, 1 };
    kt_model_batch_t ref = { test_set.rows, one, 2, NFEAT };
    float r[2];
    ck_assert_int_eq(kt_model_predict(trained, &ref, r), 0);
    ck_assert(r[0] == s[0] && r[1] == s[2]);

    kt_model_t *rnd = kt_model_new(KT_MODEL_RANDOM, NULL);
    ck_assert_int_eq(kt_model_log_scores(rnd), 0);
    ck_assert_int_eq(kt_model_predict(rnd, &batch, s), 0);
    ck_assert(isinf(s[1]) && s[1] < 0);
    ck_assert(s[0] >= 0 && s[0] < 1 && s[2] >= 0 && s[2] < 1);
    kt_model_free(rnd);
}
END_TEST

/* a and b score the n programs of batch b the same (scores into p1, p2). */
static void same_scores(kt_model_t *a, kt_model_t *b, const kt_model_batch_t *bt, float *p1,
                        float *p2, size_t n)
{
    ck_assert_int_eq(kt_model_predict(a, bt, p1), 0);
    ck_assert_int_eq(kt_model_predict(b, bt, p2), 0);
    ck_assert_mem_eq(p1, p2, n * sizeof *p1);
}

START_TEST(save_load_predicts_identically)
{
    const char *path = tmp_path("trained");
    ck_assert_int_eq(kt_model_save(trained, path), 0);
    kt_model_t *m = kt_model_load(path);
    ck_assert_msg(m != NULL, "%s", kt_err_msg());
    ck_assert_str_eq(kt_model_kind(m), "xgb");
    ck_assert(kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_num_rounds(m), kt_model_num_rounds(trained));
    ck_assert_int_eq(kt_model_params(m)->max_depth, kt_model_params(trained)->max_depth);
    ck_assert_int_eq(kt_model_params(m)->label, KT_MODEL_LABEL_LOG);
    ck_assert(kt_model_params(m)->subsample == kt_model_params(trained)->subsample);
    size_t n = test_set.nprog;
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    kt_model_batch_t b = batch_of(&test_set);
    same_scores(trained, m, &b, p1, p2, n);
    kt_model_free(m);

    /* A model still in its warm-up continues the same random sequence. */
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.seed = 7;
    prm.tree_method = KT_MODEL_TREE_HIST;
    kt_model_t *w = kt_model_new(KT_MODEL_XGB, &prm);
    ck_assert_int_eq(kt_model_predict(w, &b, p1), 0);
    ck_assert_int_eq(kt_model_save(w, path), 0);
    m = kt_model_load(path);
    ck_assert_ptr_nonnull(m);
    ck_assert(!kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_params(m)->tree_method, KT_MODEL_TREE_HIST);
    ck_assert_uint_eq(kt_model_params(m)->seed, 7);
    same_scores(w, m, &b, p1, p2, n);
    kt_model_free(m);
    kt_model_free(w);
    unlink(path);
    free(p1);
    free(p2);
}
END_TEST

/* A snapshot predicts as its model (booster copied, no samples), and
 * kt_model_predict_rng draws an untrained model's random scores from the
 * caller's generator, leaving the model's own sequence where it was. */
START_TEST(snapshot_and_predict_rng_leave_the_model_as_it_was)
{
    size_t n = test_set.nprog;
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    ck_assert(p1 && p2);
    kt_model_batch_t b = batch_of(&test_set);
    kt_model_t *s = kt_model_snapshot(trained);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    ck_assert(kt_model_is_trained(s));
    ck_assert_uint_eq(kt_model_num_samples(s), 0);
    ck_assert_int_eq(kt_model_num_rounds(s), kt_model_num_rounds(trained));
    same_scores(trained, s, &b, p1, p2, n);
    kt_model_free(s);

    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.seed = 7;
    kt_model_t *w = kt_model_new(KT_MODEL_XGB, &prm), *fresh = kt_model_new(KT_MODEL_XGB, &prm);
    ck_assert(w && fresh);
    s = kt_model_snapshot(w);
    ck_assert_ptr_nonnull(s);
    ck_assert(!kt_model_is_trained(s));
    uint64_t r1 = 5, r2 = 5;
    ck_assert_int_eq(kt_model_predict_rng(w, &b, p1, &r1), 0);
    ck_assert_int_eq(kt_model_predict_rng(s, &b, p2, &r2), 0);
    ck_assert_mem_eq(p1, p2, n * sizeof *p1);
    ck_assert_uint_eq(r1, r2);
    ck_assert_uint_ne(r1, 5);
    same_scores(w, fresh, &b, p1, p2, n);
    ck_assert_int_lt(kt_model_predict_rng(w, &b, p1, NULL), 0);
    kt_model_free(s);
    kt_model_free(fresh);
    kt_model_free(w);
    free(p1);
    free(p2);
}
END_TEST

/* A rank-label training whose pairwise math runs on three threads (two
 * tasks of 600 programs: some 76,000 pairs, above the threading threshold)
 * predicts bit for bit as the one-thread training: the sums run in pair
 * order whatever the split. */
START_TEST(train_threads_do_not_change_a_rank_model)
{
    progs_t tr;
    progs_make(&tr, 600, 31);
    size_t n = tr.nprog;
    double *costs = malloc(2 * n * sizeof *costs);
    uint64_t *tasks = malloc(2 * n * sizeof *tasks);
    ck_assert(costs && tasks);
    for (size_t i = 0; i < n; i++) {
        costs[i] = tr.cost[i];
        costs[n + i] = tr.cost[(i * 7) % n] * 50;
        tasks[i] = 1;
        tasks[n + i] = 2;
    }
    kt_model_params_t prm = rank_params();
    prm.num_boost_round = 40;
    kt_model_t *one = kt_model_new(KT_MODEL_XGB, &prm), *three = kt_model_new(KT_MODEL_XGB, &prm);
    ck_assert(one && three);
    ck_assert_int_eq(kt_model_set_train_threads(three, 3), 0);
    ck_assert_int_eq(kt_model_set_train_threads(three, -1), KT_EINVAL);
    kt_model_batch_t b = batch_of(&tr);
    kt_model_t *ms[2] = {one, three};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(kt_model_update(ms[k], &b, costs, tasks), 0);
        ck_assert_int_eq(kt_model_update(ms[k], &b, costs + n, tasks + n), 0);
        ck_assert(kt_model_is_trained(ms[k]));
    }
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    ck_assert(p1 && p2);
    same_scores(one, three, &b, p1, p2, n);
    ck_assert_int_eq(kt_model_num_rounds(one), kt_model_num_rounds(three));
    free(p1);
    free(p2);
    kt_model_free(one);
    kt_model_free(three);
    free(costs);
    free(tasks);
    progs_free(&tr);
}
END_TEST

static void write_file(const char *path, const char *data, size_t len)
{
    ck_assert_int_eq(kt_file_write(path, data, len), 0);
}

START_TEST(load_rejects_missing_and_corrupt_files)
{
    ck_assert_ptr_null(kt_model_load("/nonexistent/kt/model.bin"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "/nonexistent/kt/model.bin"));
    ck_assert_int_eq(kt_err_code(), KT_EIO);

    const char *path = tmp_path("corrupt");
    ck_assert_int_eq(kt_model_save(trained, path), 0);
    size_t len;
    char *good = kt_file_read(path, &len);
    ck_assert_ptr_nonnull(good);
    char *nl = memchr(good, '\n', len);
    ck_assert_ptr_nonnull(nl);
    size_t hdr = (size_t)(nl - good) + 1;
    ck_assert_uint_gt(len, hdr + 100);

    /* A flipped bit in the booster. */
    char *bad = malloc(len);
    memcpy(bad, good, len);
    bad[hdr + (len - hdr) / 2] ^= 0x10;
    write_file(path, bad, len);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "checksum"));

    /* Truncated. */
    write_file(path, good, len - 7);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "truncated"));

    /* Garbage, an empty file, and a header of another format. */
    write_file(path, "\x01\x02garbage", 9);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "not a ktune model"));
    write_file(path, "", 0);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    write_file(path, "{\"format\": \"other\"}\n", 20);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "bad header"));

    /* A booster whose checksum was recomputed: XGBoost's own error surfaces. */
    memcpy(bad, good, len);
    memset(bad + hdr, 'x', 16);
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)kt_hash64(bad + hdr, len - hdr));
    char *h = strstr(bad, "\"booster_xxh3\":\"");
    ck_assert_ptr_nonnull(h);
    memcpy(h + 16, hash, 16);
    write_file(path, bad, len);
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "xgboost"));

    free(bad);
    free(good);
    unlink(path);
}
END_TEST

START_TEST(warmup_predicts_random_then_the_model)
{
    progs_t p;
    progs_make(&p, 101, 3);
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.num_boost_round = 40;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t first = batch_slice(&p, 0, 100), last = batch_slice(&p, 100, 1);
    kt_model_batch_t probe = batch_slice(&p, 0, 30);
    float r1[30], r2[30], t1[30], t2[30];

    /* 100 samples: trained, but not more than num_warmup_sample. */
    ck_assert_int_eq(kt_model_update(m, &first, p.cost, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);
    ck_assert(!kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_predict(m, &probe, r1), 0);
    ck_assert_int_eq(kt_model_predict(m, &probe, r2), 0);
    for (int i = 0; i < 30; i++)
        ck_assert(r1[i] >= 0 && r1[i] < 1 && r2[i] >= 0 && r2[i] < 1);
    ck_assert(memcmp(r1, r2, sizeof r1) != 0);

    /* One more (too few to retrain adaptively): now the booster answers. */
    ck_assert_int_eq(kt_model_update(m, &last, p.cost + 100, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);
    ck_assert(kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_predict(m, &probe, t1), 0);
    ck_assert_int_eq(kt_model_predict(m, &probe, t2), 0);
    ck_assert_mem_eq(t1, t2, sizeof t1);
    ck_assert(memcmp(t1, r1, sizeof t1) != 0);
    double acc;
    ck_assert_int_eq(kt_model_pairwise_accuracy(t1, p.truth, 30, &acc), 0);
    ck_assert(acc > 0.7);
    kt_model_free(m);
    progs_free(&p);
}
END_TEST

START_TEST(adaptive_training_waits_for_enough_new_samples)
{
    progs_t p;
    progs_make(&p, 200, 4);
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.num_boost_round = 20;
    prm.tree_method = KT_MODEL_TREE_HIST;   /* any method: this is about scheduling */
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t b;

    b = batch_slice(&p, 0, 100);
    ck_assert_int_eq(kt_model_update(m, &b, p.cost, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);
    b = batch_slice(&p, 100, 10);   /* 10 < 0.2 x 100 */
    ck_assert_int_eq(kt_model_update(m, &b, p.cost + 100, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);
    ck_assert_uint_eq(kt_model_num_samples(m), 110);
    b = batch_slice(&p, 110, 10);   /* 20 new since the last training */
    ck_assert_int_eq(kt_model_update(m, &b, p.cost + 110, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 2);
    b = batch_slice(&p, 120, 20);   /* 20 < 0.2 x 120 */
    ck_assert_int_eq(kt_model_update(m, &b, p.cost + 120, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 2);
    kt_model_free(m);

    /* Disabled: every update retrains. */
    prm.adaptive_training = 0;
    m = kt_model_new(KT_MODEL_XGB, &prm);
    b = batch_slice(&p, 0, 100);
    ck_assert_int_eq(kt_model_update(m, &b, p.cost, NULL), 0);
    b = batch_slice(&p, 100, 5);
    ck_assert_int_eq(kt_model_update(m, &b, p.cost + 100, NULL), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), 2);
    kt_model_free(m);
    progs_free(&p);
}
END_TEST

START_TEST(labels_are_normalized_per_task_and_failures_are_zero)
{
    /* Eight one-row programs with distinct features: two tasks whose costs
     * differ by 1000x, and failures. With the warm-up off, unweighted rows and
     * Ansor's deep trees the fit approaches the labels: y = best/cost within
     * each task, 0 if failed; with log labels log(max(y, floor)). */
    float rows[8 * NFEAT];
    for (int i = 0; i < 8; i++)
        for (int f = 0; f < NFEAT; f++)
            rows[i * NFEAT + f] = (float)((i * 7 + f * 3) % 11) + (float)i;
    uint32_t nrows[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    double costs[8] = { 1e-3, 2e-3, 4e-3, -1, 1e-6, 2e-6, 4e-6, INFINITY };
    uint64_t tasks[8] = { 5, 5, 5, 5, 9, 9, 9, 9 };
    double y[8] = { 1, 0.5, 0.25, 0, 1, 0.5, 0.25, 0 };
    for (int label = KT_MODEL_LABEL_THROUGHPUT; label <= KT_MODEL_LABEL_LOG; label++) {
        kt_model_params_t prm;
        kt_model_params_ansor(&prm);
        prm.num_warmup_sample = 0;
        prm.weight_by_label = 0;
        prm.label = label;
        kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
        kt_model_batch_t b = { rows, nrows, 8, NFEAT };
        ck_assert_int_eq(kt_model_log_scores(m), 0);   /* not trained yet */
        ck_assert_int_eq(kt_model_update(m, &b, costs, tasks), 0);
        ck_assert(kt_model_is_trained(m));
        ck_assert_int_eq(kt_model_log_scores(m), label == KT_MODEL_LABEL_LOG);
        float s[8];
        ck_assert_int_eq(kt_model_predict(m, &b, s), 0);
        /* Log-label scores leave out the fitted bias: compare differences. */
        for (int i = 0; i < 8; i++) {
            double want = label == KT_MODEL_LABEL_LOG
                              ? log(y[i] > 0 ? y[i] : KT_MODEL_LOG_FLOOR) - log(y[0])
                              : y[i];
            double got = label == KT_MODEL_LABEL_LOG ? s[i] - s[0] : s[i];
            ck_assert_msg(fabs(got - want) < 0.1, "label kind %d, program %d: %g, label %g",
                          label, i, got, want);
        }
        kt_model_free(m);
    }
}
END_TEST

/* A model file made of header h (one JSON line) and the booster bytes. */
static void write_with_header(const char *path, json_t *h, const char *booster, size_t n)
{
    char *head = json_dumps(h, JSON_COMPACT);
    FILE *f = fopen(path, "wb");
    ck_assert(head && f);
    fprintf(f, "%s\n", head);
    ck_assert_uint_eq(fwrite(booster, 1, n, f), n);
    fclose(f);
    free(head);
}

START_TEST(ansor_parameters_and_version_1_files)
{
    kt_model_params_t d, a;
    kt_model_params_default(&d);
    kt_model_params_ansor(&a);
    ck_assert_int_eq(a.max_depth, 10);
    ck_assert(a.eta == 0.2 && a.min_child_weight == 0 && a.subsample == 1 &&
              a.colsample_bytree == 1);
    ck_assert_int_eq(a.label, KT_MODEL_LABEL_THROUGHPUT);
    ck_assert_int_eq(a.weight_by_label, 1);
    ck_assert_int_eq(d.label, KT_MODEL_LABEL_LOG);
    ck_assert(d.gamma == a.gamma && d.num_warmup_sample == a.num_warmup_sample);

    /* A file written before label/subsample/colsample_bytree existed (version
     * 1) loads as what it was: throughput labels on all rows and columns. */
    a.num_warmup_sample = 0;
    a.tree_method = KT_MODEL_TREE_HIST;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &a);
    kt_model_batch_t b = batch_slice(&train_set, 0, 200);
    ck_assert_int_eq(kt_model_update(m, &b, train_set.cost, NULL), 0);
    const char *path = tmp_path("v1");
    ck_assert_int_eq(kt_model_save(m, path), 0);
    size_t len;
    char *buf = kt_file_read(path, &len);
    ck_assert_ptr_nonnull(buf);
    char *nl = memchr(buf, '\n', len);
    ck_assert_ptr_nonnull(nl);
    json_t *h = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
    ck_assert_ptr_nonnull(h);
    json_t *params = json_object_get(h, "params");
    ck_assert_int_eq(json_object_del(params, "label"), 0);
    ck_assert_int_eq(json_object_del(params, "subsample"), 0);
    ck_assert_int_eq(json_object_del(params, "colsample_bytree"), 0);
    json_object_set_new(h, "version", json_integer(1));
    write_with_header(path, h, nl + 1, len - (size_t)(nl + 1 - buf));
    kt_model_t *old = kt_model_load(path);
    ck_assert_msg(old != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_model_params(old)->label, KT_MODEL_LABEL_THROUGHPUT);
    ck_assert(kt_model_params(old)->subsample == 1 && kt_model_params(old)->colsample_bytree == 1);
    float p1[50], p2[50];
    kt_model_batch_t t = batch_slice(&test_set, 0, 50);
    ck_assert_int_eq(kt_model_predict(m, &t, p1), 0);
    ck_assert_int_eq(kt_model_predict(old, &t, p2), 0);
    ck_assert_mem_eq(p1, p2, sizeof p1);

    /* An unknown label kind in a file is refused with its name. */
    json_object_set_new(params, "label", json_string("listwise"));
    json_object_set_new(h, "version", json_integer(2));
    write_with_header(path, h, nl + 1, len - (size_t)(nl + 1 - buf));
    ck_assert_ptr_null(kt_model_load(path));
    ck_assert_msg(strstr(kt_err_msg(), "listwise") != NULL, "%s", kt_err_msg());
    json_decref(h);
    free(buf);
    unlink(path);
    kt_model_free(old);
    kt_model_free(m);
}
END_TEST

START_TEST(random_model_is_uniform_and_deterministic_per_seed)
{
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.seed = 11;
    kt_model_t *a = kt_model_new(KT_MODEL_RANDOM, &prm), *b = kt_model_new("random", &prm);
    prm.seed = 12;
    kt_model_t *c = kt_model_new(KT_MODEL_RANDOM, &prm);
    ck_assert_str_eq(kt_model_kind(a), "random");
    uint32_t nrows[500];
    for (int i = 0; i < 500; i++)
        nrows[i] = 1;
    static float rows[500];
    kt_model_batch_t batch = { rows, nrows, 500, 1 };
    uint32_t nr1[1] = { 1 };
    kt_model_batch_t one = { rows, nr1, 1, 1 };
    float sa[500], sb[500], sc[500];
    double costs[1] = { 1e-3 };
    ck_assert_int_eq(kt_model_update(a, &one, costs, NULL), 0);   /* accepted, no effect */
    ck_assert_uint_eq(kt_model_num_samples(a), 1);
    ck_assert_uint_eq(kt_model_num_trainings(a), 0);
    ck_assert_int_eq(kt_model_predict(a, &batch, sa), 0);
    ck_assert_int_eq(kt_model_predict(b, &batch, sb), 0);
    ck_assert_int_eq(kt_model_predict(c, &batch, sc), 0);
    ck_assert_mem_eq(sa, sb, sizeof sa);
    ck_assert(memcmp(sa, sc, sizeof sa) != 0);
    double mean = 0;
    for (int i = 0; i < 500; i++) {
        ck_assert(sa[i] >= 0 && sa[i] < 1);
        mean += sa[i] / 500;
    }
    ck_assert(mean > 0.4 && mean < 0.6);

    const char *path = tmp_path("random");
    ck_assert_int_eq(kt_model_save(a, path), 0);
    kt_model_t *l = kt_model_load(path);
    ck_assert_ptr_nonnull(l);
    ck_assert_str_eq(kt_model_kind(l), "random");
    ck_assert_int_eq(kt_model_predict(a, &batch, sa), 0);
    ck_assert_int_eq(kt_model_predict(l, &batch, sb), 0);
    ck_assert_mem_eq(sa, sb, sizeof sa);
    unlink(path);
    kt_model_free(l);
    kt_model_free(a);
    kt_model_free(b);
    kt_model_free(c);
}
END_TEST

START_TEST(bad_arguments_are_reported)
{
    ck_assert_ptr_null(kt_model_new("gbm", NULL));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "gbm"));
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.eta = 0;
    ck_assert_ptr_null(kt_model_new(KT_MODEL_XGB, &prm));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "eta"));
    kt_model_params_default(&prm);
    prm.tree_method = 7;
    ck_assert_ptr_null(kt_model_new(KT_MODEL_XGB, &prm));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "tree_method"));
    kt_model_params_default(&prm);
    prm.subsample = 0;
    ck_assert_ptr_null(kt_model_new(KT_MODEL_XGB, &prm));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "subsample"));
    kt_model_params_default(&prm);
    prm.colsample_bytree = 1.5;
    ck_assert_ptr_null(kt_model_new(KT_MODEL_XGB, &prm));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "colsample_bytree"));
    kt_model_params_default(&prm);
    prm.label = 9;
    ck_assert_ptr_null(kt_model_new(KT_MODEL_XGB, &prm));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "label"));

    /* A trained model refuses rows of another width. */
    float rows[2 * NFEAT] = { 0 };
    uint32_t nrows[1] = { 2 };
    kt_model_batch_t b = { rows, nrows, 1, NFEAT / 2 };
    float s[1];
    double c[1] = { 1 };
    ck_assert_int_eq(kt_model_predict(trained, &b, s), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "features"));
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, NULL);
    b.nfeat = NFEAT;
    ck_assert_int_eq(kt_model_update(m, &b, NULL, NULL), KT_EINVAL);
    b.rows = NULL;
    ck_assert_int_eq(kt_model_update(m, &b, c, NULL), KT_EINVAL);
    ck_assert_int_eq(kt_model_predict(m, NULL, s), KT_EINVAL);
    ck_assert_uint_eq(kt_model_num_samples(m), 0);
    kt_model_free(m);
    kt_model_free(NULL);
}
END_TEST

START_TEST(params_set_from_key_value_lists)
{
    kt_model_params_t p, before;
    kt_model_params_default(&p);
    ck_assert_int_eq(kt_model_params_set(&p, "max_depth=8,eta=0.1,label=rank,tree_method=hist,"
                                             "subsample=1,seed=7,num_warmup_sample=0"),
                     KT_OK);
    ck_assert_int_eq(p.max_depth, 8);
    ck_assert_double_eq_tol(p.eta, 0.1, 1e-12);
    ck_assert_int_eq(p.label, KT_MODEL_LABEL_RANK);
    ck_assert_int_eq(p.tree_method, KT_MODEL_TREE_HIST);
    ck_assert_double_eq_tol(p.subsample, 1.0, 1e-12);
    ck_assert_uint_eq(p.seed, 7);
    ck_assert_int_eq(p.num_warmup_sample, 0);
    /* all or nothing: a bad entry anywhere leaves p as it was */
    static const char *const bad[] = {
        "max_depth=3,colour=red",   /* unknown key */
        "max_depth=2.5",            /* not an integer */
        "eta=fast",                 /* not a number */
        "eta=0.1x",                 /* trailing text */
        "eta=0",                    /* out of range */
        "label=pairs",              /* unknown name */
        "seed=-1",                  /* negative seed */
        "max_depth",                /* no value */
        "=3",                       /* no key */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        before = p;
        ck_assert_int_eq(kt_model_params_set(&p, bad[i]), KT_EINVAL);
        ck_assert_ptr_nonnull(kt_err_msg());
        ck_assert_int_eq(memcmp(&before, &p, sizeof p), 0);
    }
    ck_assert_int_eq(kt_model_params_set(&p, "eta=fast"), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "eta"));
    ck_assert_int_eq(kt_model_params_set(NULL, "eta=0.1"), KT_EINVAL);
    ck_assert_int_eq(kt_model_params_set(&p, NULL), KT_EINVAL);
    /* what it sets is what a model then uses */
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &p);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(kt_model_params(m)->max_depth, 8);
    kt_model_free(m);
}
END_TEST

START_TEST(only_failed_programs_train_without_error)
{
    /* All measurements failed: labels and weights are 0; training must still
     * succeed and give finite scores. */
    progs_t p;
    progs_make(&p, 20, 5);
    double costs[20];
    for (int i = 0; i < 20; i++)
        costs[i] = -1;
    kt_model_params_t prm;
    kt_model_params_default(&prm);
    prm.num_warmup_sample = 0;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t b = batch_of(&p);
    ck_assert_int_eq(kt_model_update(m, &b, costs, NULL), 0);
    ck_assert(kt_model_is_trained(m));
    float s[20];
    ck_assert_int_eq(kt_model_predict(m, &b, s), 0);
    for (int i = 0; i < 20; i++)
        ck_assert(isfinite(s[i]));
    kt_model_free(m);
    progs_free(&p);
}
END_TEST

START_TEST(metrics_pairwise_accuracy_and_topk_recall)
{
    float truth[5] = { 1, 2, 3, 4, 5 };
    float same[5] = { 10, 20, 30, 40, 50 };
    float rev[5] = { 5, 4, 3, 2, 1 };
    float flat[5] = { 1, 1, 1, 1, 1 };
    float swap[5] = { 2, 1, 3, 4, 5 };   /* one of 10 pairs wrong */
    double v;
    ck_assert_int_eq(kt_model_pairwise_accuracy(same, truth, 5, &v), 0);
    ck_assert_double_eq(v, 1.0);
    ck_assert_int_eq(kt_model_pairwise_accuracy(rev, truth, 5, &v), 0);
    ck_assert_double_eq(v, 0.0);
    ck_assert_int_eq(kt_model_pairwise_accuracy(flat, truth, 5, &v), 0);
    ck_assert_double_eq(v, 0.5);
    ck_assert_int_eq(kt_model_pairwise_accuracy(swap, truth, 5, &v), 0);
    ck_assert_double_eq_tol(v, 0.9, 1e-12);
    ck_assert_int_eq(kt_model_pairwise_accuracy(truth, flat, 5, &v), 0);
    ck_assert(isnan(v));

    ck_assert_int_eq(kt_model_topk_recall(same, truth, 5, 2, &v), 0);
    ck_assert_double_eq(v, 1.0);
    ck_assert_int_eq(kt_model_topk_recall(rev, truth, 5, 2, &v), 0);
    ck_assert_double_eq(v, 0.0);
    float mid[5] = { 1, 2, 3, 5, 4 };
    ck_assert_int_eq(kt_model_topk_recall(mid, truth, 5, 3, &v), 0);
    ck_assert_double_eq(v, 1.0);
    float one[5] = { 9, 2, 3, 4, 1 };   /* top-2 by pred {0, 3}, truth {4, 3} */
    ck_assert_int_eq(kt_model_topk_recall(one, truth, 5, 2, &v), 0);
    ck_assert_double_eq(v, 0.5);
    ck_assert_int_eq(kt_model_topk_recall(one, truth, 5, 9, &v), 0);
    ck_assert_double_eq(v, 1.0);
    ck_assert_int_eq(kt_model_topk_recall(one, truth, 5, 0, &v), KT_EINVAL);
}
END_TEST

/* Pairwise accuracy of m's scores on p against throughputs `truth`. */
static double accuracy_on(kt_model_t *m, const progs_t *p, const float *truth)
{
    float *pred = malloc(p->nprog * sizeof *pred);
    ck_assert_ptr_nonnull(pred);
    kt_model_batch_t b = batch_of(p);
    ck_assert_int_eq(kt_model_predict(m, &b, pred), 0);
    double acc = 0;
    ck_assert_int_eq(kt_model_pairwise_accuracy(pred, truth, p->nprog, &acc), 0);
    free(pred);
    return acc;
}

/* A model started from a prior (trained on other programs) scores as the
 * prior at once, trusted without a warm-up of its own, and as the prior
 * still while its own booster is in its warm-up. Its trainings boost from
 * the prior's margins: on programs that run the other way round from what
 * the prior learned (it ranks them almost all wrong) the own trees turn
 * that round. Copies, saved files and buffers keep the prior; a model that
 * trained already, one of other labels, or an untrained prior is refused. */
START_TEST(prior_scores_at_once_and_own_trees_train_on_top)
{
    progs_t a, own;
    progs_make(&a, 600, 11);
    progs_make(&own, 80, 12);
    float *rev = malloc(own.nprog * sizeof *rev);
    ck_assert_ptr_nonnull(rev);
    for (size_t i = 0; i < own.nprog; i++) {   /* the faster the prior thinks, the slower */
        own.cost[i] = 1e-3 * own.truth[i];
        rev[i] = 1.0f / own.truth[i];
    }
    kt_model_params_t prm = rank_params();
    kt_model_t *prior = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_batch_t ba = batch_of(&a);
    ck_assert_int_eq(kt_model_update(prior, &ba, a.cost, NULL), 0);
    ck_assert(kt_model_is_trained(prior));

    prm.num_warmup_sample = 20;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &prm);
    ck_assert(!kt_model_is_trained(m));
    ck_assert_int_eq(kt_model_set_prior(m, prior), 0);
    ck_assert(kt_model_is_trained(m) && kt_model_log_scores(m));
    ck_assert_ptr_nonnull(kt_model_prior(m));
    size_t n = own.nprog;
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    ck_assert(p1 && p2);
    kt_model_batch_t bo = batch_of(&own);
    same_scores(prior, m, &bo, p1, p2, n);
    double before = accuracy_on(m, &own, rev);
    ck_assert_msg(before < 0.2, "the prior ranks %.2f of the reversed pairs right", before);

    kt_model_batch_t few = batch_slice(&own, 0, 10);
    ck_assert_int_eq(kt_model_update(m, &few, own.cost, NULL), 0);
    ck_assert_int_gt(kt_model_num_rounds(m), 0);   /* trained, not past its warm-up */
    same_scores(prior, m, &bo, p1, p2, n);
    kt_model_batch_t rest = batch_slice(&own, 10, n - 10);
    ck_assert_int_eq(kt_model_update(m, &rest, own.cost + 10, NULL), 0);
    double after = accuracy_on(m, &own, rev);
    ck_assert_msg(after > 0.8, "trained on top of the prior: %.2f of the pairs right (%.2f "
                  "before)", after, before);

    kt_model_t *s = kt_model_snapshot(m);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(kt_model_prior(s));
    same_scores(m, s, &bo, p1, p2, n);
    kt_model_free(s);
    const char *path = tmp_path("prior");
    ck_assert_int_eq(kt_model_save(m, path), 0);
    s = kt_model_load(path);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    ck_assert_ptr_nonnull(kt_model_prior(s));
    same_scores(m, s, &bo, p1, p2, n);
    kt_model_free(s);
    unlink(path);
    char *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(kt_model_to_buffer(m, &buf, &len), 0);
    s = kt_model_from_buffer(buf, len);
    ck_assert_ptr_nonnull(s);
    same_scores(m, s, &bo, p1, p2, n);
    kt_model_free(s);
    ck_assert_ptr_null(kt_model_from_buffer(buf, len - 1));   /* the prior's last byte gone */
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "truncated"));
    buf[len - 1] ^= 0x55;   /* the prior's booster damaged: its own checksum tells */
    ck_assert_ptr_null(kt_model_from_buffer(buf, len));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "its prior"));
    free(buf);

    ck_assert_int_eq(kt_model_set_prior(m, prior), KT_ESTATE);   /* trained already */
    kt_model_t *log = kt_model_new(KT_MODEL_XGB, NULL), *fresh = kt_model_new(KT_MODEL_XGB, &prm);
    kt_model_t *rnd = kt_model_new(KT_MODEL_RANDOM, NULL);
    ck_assert_int_eq(kt_model_set_prior(log, prior), KT_EINVAL);   /* log labels, rank prior */
    ck_assert_int_eq(kt_model_set_prior(fresh, log), KT_EINVAL);   /* not trained */
    ck_assert_int_eq(kt_model_set_prior(fresh, m), KT_EINVAL);     /* has a prior itself */
    ck_assert_int_eq(kt_model_set_prior(rnd, prior), KT_EINVAL);
    ck_assert(!kt_model_is_trained(fresh));
    ck_assert_int_eq(kt_model_set_prior(fresh, prior), 0);
    ck_assert_int_eq(kt_model_set_prior(fresh, NULL), 0);          /* removed before training */
    ck_assert(!kt_model_is_trained(fresh));
    kt_model_free(log);
    kt_model_free(fresh);
    kt_model_free(rnd);
    kt_model_free(m);
    kt_model_free(prior);
    free(p1);
    free(p2);
    free(rev);
    progs_free(&a);
    progs_free(&own);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("trained");
    tcase_add_unchecked_fixture(tc, trained_setup, trained_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, xgb_ranks_held_out_programs);
    tcase_add_test(tc, ansor_parameters_rank_an_additive_target);
    tcase_add_test(tc, rank_labels_rank_held_out_programs_of_each_task);
    tcase_add_test(tc, xgb_pack_sum_adds_stage_predictions);
    tcase_add_test(tc, invalid_programs_score_minus_infinity);
    tcase_add_test(tc, save_load_predicts_identically);
    tcase_add_test(tc, snapshot_and_predict_rng_leave_the_model_as_it_was);
    tcase_add_test(tc, train_threads_do_not_change_a_rank_model);
    tcase_add_test(tc, load_rejects_missing_and_corrupt_files);
    tcase_add_test(tc, bad_arguments_are_reported);
    tcase_add_test(tc, ansor_parameters_and_version_1_files);
    suite_add_tcase(s, tc);
    TCase *tc2 = tcase_create("core");
    tcase_set_timeout(tc2, 120);
    tcase_add_test(tc2, warmup_predicts_random_then_the_model);
    tcase_add_test(tc2, adaptive_training_waits_for_enough_new_samples);
    tcase_add_test(tc2, labels_are_normalized_per_task_and_failures_are_zero);
    tcase_add_test(tc2, random_model_is_uniform_and_deterministic_per_seed);
    tcase_add_test(tc2, only_failed_programs_train_without_error);
    tcase_add_test(tc2, params_set_from_key_value_lists);
    tcase_add_test(tc2, metrics_pairwise_accuracy_and_topk_recall);
    tcase_add_test(tc2, prior_scores_at_once_and_own_trees_train_on_top);
    suite_add_tcase(s, tc2);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
