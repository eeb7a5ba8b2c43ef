/*
 * Cost-model benchmark on synthetic programs shaped like Ansor's: 1-6 stages
 * of 164 features, of which a dozen drive the true throughput. For growing
 * training sets it prints the xgb model's training time and rounds, its
 * ranking quality on held-out programs and the random model's in the same run,
 * and the scoring rate (the search scores thousands of states per round).
 *
 * usage: bench_model [max_train_programs (default 3000)] [nthread (default 1)]
 *                    [exact|approx|hist (default exact)]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/err.h"
#include "util/util.h"

#define NFEAT 164
#define NTEST 1000
#define TOPK 32

static uint64_t rng_state = 12345;

static double urand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* Throughput contribution of one stage: smooth, interacting, with a threshold
 * (like a vector width or an unroll switch). */
static double stage_value(const float *x)
{
    return 1.0 + 3.0 * x[0] + 2.0 * x[1] * x[1] + sin(3.0 * x[2]) + 2.0 * x[3] * x[4] +
           exp(-6.0 * (x[5] - 0.4) * (x[5] - 0.4)) + 0.7 * (x[6] > 0.6) + x[7] * x[8] * x[9] -
           0.5 * x[10] * x[11];
}

typedef struct {
    float *rows;
    uint32_t *nrows;
    double *cost;
    float *truth;
    size_t nprog;
} set_t;

static int set_make(set_t *s, size_t n)
{
    s->nprog = n;
    s->nrows = malloc(n * sizeof *s->nrows);
    s->cost = malloc(n * sizeof *s->cost);
    s->truth = malloc(n * sizeof *s->truth);
    s->rows = malloc(n * 6 * NFEAT * sizeof *s->rows);
    if (!s->nrows || !s->cost || !s->truth || !s->rows)
        return -1;
    size_t row = 0;
    for (size_t i = 0; i < n; i++) {
        s->nrows[i] = 1 + (uint32_t)(urand() * 6);
        double t = 0;
        for (uint32_t r = 0; r < s->nrows[i]; r++, row++) {
            float *x = s->rows + row * NFEAT;
            for (int f = 0; f < NFEAT; f++)
                x[f] = (float)urand();
            t += stage_value(x);
        }
        s->truth[i] = (float)t;
        s->cost[i] = 1e-3 / t;
    }
    return 0;
}

static void set_free(set_t *s)
{
    free(s->rows);
    free(s->nrows);
    free(s->cost);
    free(s->truth);
}

static int quality(kt_model_t *m, const set_t *test, float *pred, double *acc, double *rec,
                   double *rate)
{
    kt_model_batch_t b = { test->rows, test->nrows, test->nprog, NFEAT };
    double t0 = kt_time_mono();
    if (kt_model_predict(m, &b, pred) < 0)
        return -1;
    *rate = (double)test->nprog / (kt_time_mono() - t0);
    if (kt_model_pairwise_accuracy(pred, test->truth, test->nprog, acc) < 0 ||
        kt_model_topk_recall(pred, test->truth, test->nprog, TOPK, rec) < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    size_t max_train = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 3000;
    int nthread = argc > 2 ? atoi(argv[2]) : 1;
    const char *method = argc > 3 ? argv[3] : "exact";
    static const char *const methods[] = { "exact", "approx", "hist" };   /* KT_MODEL_TREE_* */
    int tree_method = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(method, methods[i]) == 0)
            tree_method = i;
    set_t test, train;
    if (max_train < 100 || tree_method < 0 || set_make(&test, NTEST) < 0 || set_make(&train, max_train) < 0) {
        fprintf(stderr, "usage: bench_model [max_train_programs >= 100] [nthread] [exact|approx|hist]\n");
        return 1;
    }
    float *pred = malloc(NTEST * sizeof *pred);
    kt_model_params_t p;
    kt_model_params_default(&p);
    p.nthread = nthread;
    p.tree_method = tree_method;
    p.num_warmup_sample = 0;
    kt_model_t *rnd = kt_model_new(KT_MODEL_RANDOM, &p);
    double racc, rrec, rrate;
    if (!pred || !rnd || quality(rnd, &test, pred, &racc, &rrec, &rrate) < 0) {
        fprintf(stderr, "bench_model: %s\n", kt_err_msg());
        return 1;
    }
    printf("synthetic programs: 1-6 stages x %d features; %d held out; nthread %d; %s\n",
           NFEAT, NTEST, nthread, method);
    printf("random model: pairwise accuracy %.3f, top-%d recall %.3f\n", racc, TOPK, rrec);
    printf("%8s %9s %7s %9s %10s %10s %12s\n", "train", "train_s", "rounds", "pair_acc",
           "top32_rec", "acc/random", "scores/s");
    for (size_t n = 100; n <= max_train; n *= 3) {
        kt_model_t *m = kt_model_new(KT_MODEL_XGB, &p);
        kt_model_batch_t b = { train.rows, train.nrows, n, NFEAT };
        double t0 = kt_time_mono(), secs = 0;
        double acc, rec, rate;
        int rc = m ? kt_model_update(m, &b, train.cost, NULL) : -1;
        secs = kt_time_mono() - t0;
        if (rc < 0 || quality(m, &test, pred, &acc, &rec, &rate) < 0) {
            fprintf(stderr, "bench_model: %s\n", kt_err_msg());
            return 1;
        }
        printf("%8zu %9.2f %7d %9.3f %10.3f %10.2f %12.0f\n", n, secs, kt_model_num_rounds(m),
               acc, rec, acc / racc, rate);
        kt_model_free(m);
    }
    kt_model_free(rnd);
    free(pred);
    set_free(&train);
    set_free(&test);
    return 0;
}
