/* bench_model_quality: how well does the xgb cost model rank real kernels?
 * For a matmul, ResNet-18's 3x3 conv2d and a MobileNet depthwise conv2d, N
 * random distinct states are built, run on this CPU with one thread and
 * checked by the local measurer; the xgb model (as the search uses it: per-
 * stage features, pack-sum, hist trees) trains on 80% of the valid ones and
 * ranks the other 20%: pairwise ranking accuracy and top-32 recall against
 * measured throughput, with the random model's figures in the same run.
 *
 *   bench_model_quality [--n 1000] [--workload matmul|conv|depthwise|all]
 *                       [--seed 1] [--min-repeat-ms 20] [--tree hist|exact|approx]
 *                       [--cache FILE] [--weight-by-label 0|1] [--dump FILE]
 *                       [--label throughput|log|rank] [--xgb key=value,...]
 *                       [--remeasure K] [--repeat 3] [--timer wall|cpu]
 *                       [--folds 5|1] [--passes 1]
 *
 * --cache keeps every measurement as a JSON line {"workload", "state",
 * "cost"} (cost -1 = failed) and reuses them in later runs, so the model can
 * be compared on the same measured programs without measuring again.
 * --folds 5 (default) repeats the 80/20 split five times, each fifth held out
 * once, and prints the means (one split of a few hundred programs varies by
 * several points); --folds 1 is a single split.
 * A program's cost is the fastest of its --repeat repeats (the mean carries
 * the load of other processes on a shared machine). --passes K measures
 * every program K times, a whole pass over all of them before the next, and
 * takes the fastest pass: on a virtual machine whose neighbours' load comes
 * and goes over seconds, one pass of a 1 ms kernel varied by up to 50%
 * between runs a minute apart. The cache keeps a line per pass, so a later
 * run with more passes measures only the missing ones; with K >= 2 the bench
 * prints how far pass 2 orders pairs as pass 1.
 * --remeasure K measures the first K valid programs again and prints the
 * pairwise accuracy of the second measurement against the first: the noise
 * ceiling of any model on this machine in its current state.
 * --xgb sets parameters of the xgb column's model (kt_model_params_set, e.g.
 * max_depth=8,eta=0.1,label=rank); the ansor column keeps Ansor's.
 * --dump writes the valid programs' feature rows as CSV (workload, program,
 * cost in seconds, then the KT_FEATURE_COUNT values) for offline analysis.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_local.h"
#include "feature/feature.h"
#include "measure/measurer.h"
#include "model/model.h"
#include "search/search.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#define BATCH 64
#define TOPK 32
#define MAX_PASSES 8

/* A program's costs, one per measuring pass (-1: that pass failed). */
typedef struct {
    double cost[MAX_PASSES];
    int n;
} pass_costs_t;

static int nstates = 1000;
static uint64_t seed = 1;
static int timer = KT_RUNNER_TIMER_WALL;
static int min_repeat_ms = 20;
static int tree = KT_MODEL_TREE_HIST;
static const char *which = "all";
static const char *cache_path;
static const char *dump_path;
static int remeasure;
static int repeat = 3;
static int folds = 5;
static int passes = 1;
static int weight_by_label = -1;   /* -1: the model's default */
static int label = -1;             /* KT_MODEL_LABEL_* of the xgb column; -1: the default */
static const char *xgb_params;     /* --xgb: kt_model_params_set list for the xgb column */

static const struct {
    const char *name, *json;
} workloads[] = {
    {"matmul", "{\"op\":\"matmul\",\"M\":512,\"N\":512,\"K\":512}"},
    {"conv", "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":56,\"W\":56,\"CI\":64,\"CO\":64,\"KH\":3,"
             "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}"},
    {"depthwise", "{\"op\":\"depthwise_conv2d_nhwc\",\"N\":1,\"H\":56,\"W\":56,\"C\":128,"
                  "\"KH\":3,\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}"},
};

static void die(const char *what)
{
    fprintf(stderr, "bench_model_quality: %s: %s\n", what, kt_err_msg());
    exit(1);
}

/* N distinct random states of w. */
static kt_sched_state_t **sample_states(const kt_workload_t *w, const kt_sched_params_t *p, int n)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_state_t **sk;
    int nsk;
    if (kt_sched_sketches(dag, p, &sk, &nsk) != 0 || nsk == 0)
        die("sketches");
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    kt_sched_state_t **out = calloc((size_t)n, sizeof(*out));
    uint64_t *hashes = calloc((size_t)n, sizeof(uint64_t));
    if (!out || !hashes)
        die("out of memory");
    int k = 0, tries = 0;
    while (k < n && tries++ < 100 * n) {
        kt_sched_state_t *st = kt_sched_sample(dag, p, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        if (!st)
            continue;
        uint64_t h = kt_sched_state_hash(st, dag);
        int dup = 0;
        for (int i = 0; i < k && !dup; i++)
            dup = hashes[i] == h;
        if (dup) {
            kt_sched_state_free(st);
            continue;
        }
        hashes[k] = h;
        out[k++] = st;
    }
    if (k < n) {
        fprintf(stderr, "only %d distinct states\n", k);
        exit(1);
    }
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    free(hashes);
    return out;
}

/* Train `kind` on programs idx[0..ntrain), score idx[ntrain..n); ansor:
 * with Ansor's XGBoost parameters instead of the search's model's. */
static void evaluate(const char *kind, int ansor, const kt_dag_t *dag, kt_sched_state_t **st,
                     const double *cost, const int *idx, int ntrain, int n, double *acc,
                     double *recall, double *train_s)
{
    kt_model_params_t mp;
    if (ansor) {
        kt_model_params_ansor(&mp);
    } else {
        kt_search_opts_t so;
        kt_search_opts_default(&so);
        kt_search_model_params(&so, seed, &mp);
    }
    mp.seed = seed;
    mp.tree_method = tree;
    mp.num_warmup_sample = 0;   /* rank with the trained booster at once */
    if (weight_by_label >= 0)
        mp.weight_by_label = weight_by_label;
    if (label >= 0 && !ansor)
        mp.label = label;
    if (xgb_params && !ansor && kt_model_params_set(&mp, xgb_params))
        die("--xgb");
    kt_model_t *m = kt_model_new(kind, &mp);
    if (!m)
        die("model");
    int ntest = n - ntrain;
    kt_sched_state_t **sel = malloc((size_t)n * sizeof(*sel));
    double *c = malloc((size_t)n * sizeof(double));
    uint32_t *counts = malloc((size_t)n * sizeof(uint32_t));
    uint64_t *tasks = calloc((size_t)n, sizeof(uint64_t));
    float *pred = malloc((size_t)ntest * sizeof(float));
    float *truth = malloc((size_t)ntest * sizeof(float));
    if (!sel || !c || !counts || !tasks || !pred || !truth)
        die("out of memory");
    for (int i = 0; i < n; i++) {
        sel[i] = st[idx[i]];
        c[i] = cost[idx[i]];
    }
    float *rows;
    if (kt_feature_extract_batch(dag, (const kt_sched_state_t *const *)sel, n, &rows, counts))
        die("features");
    size_t train_rows = 0;
    for (int i = 0; i < ntrain; i++)
        train_rows += counts[i];
    kt_model_batch_t tr = {.rows = rows, .nrows = counts, .nprog = (size_t)ntrain,
                           .nfeat = KT_FEATURE_COUNT};
    double t0 = kt_time_mono();
    if (kt_model_update(m, &tr, c, tasks))
        die("train");
    *train_s = kt_time_mono() - t0;
    kt_model_batch_t te = {.rows = rows + train_rows * KT_FEATURE_COUNT, .nrows = counts + ntrain,
                           .nprog = (size_t)ntest, .nfeat = KT_FEATURE_COUNT};
    if (kt_model_predict(m, &te, pred))
        die("predict");
    for (int i = 0; i < ntest; i++)
        truth[i] = (float)(1.0 / c[ntrain + i]);
    if (kt_model_pairwise_accuracy(pred, truth, (size_t)ntest, acc))
        die("accuracy");
    if (kt_model_topk_recall(pred, truth, (size_t)ntest, TOPK, recall))
        die("recall");
    free(rows);
    free(sel);
    free(c);
    free(counts);
    free(tasks);
    free(pred);
    free(truth);
    kt_model_free(m);
}

/* Cached measurements of workload `name`: distinct states parsed against
 * dag, in order of first appearance, with the costs of up to MAX_PASSES
 * passes each (a line per pass; -1 = failed). Returns how many states (0
 * without a cache file). */
static int cache_load(const char *name, const kt_dag_t *dag, kt_sched_state_t ***st,
                      pass_costs_t **pc)
{
    *st = NULL;
    *pc = NULL;
    FILE *f = cache_path ? fopen(cache_path, "r") : NULL;
    if (!f)
        return 0;
    int n = 0, cap = 0;
    uint64_t *hash = NULL;
    char *line = NULL;
    size_t len = 0;
    while (getline(&line, &len, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *wl = json_string_value(json_object_get(o, "workload"));
        json_t *state = json_object_get(o, "state");
        char *sj = state ? json_dumps(state, JSON_COMPACT) : NULL;
        kt_sched_state_t *x = wl && strcmp(wl, name) == 0 && sj
                                  ? kt_sched_state_from_json(sj, dag, NULL) : NULL;
        uint64_t h = x ? kt_sched_state_hash(x, dag) : 0;
        int at = 0;
        while (x && at < n && hash[at] != h)
            at++;
        if (x && at == n) {
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                *st = realloc(*st, (size_t)cap * sizeof(**st));
                *pc = realloc(*pc, (size_t)cap * sizeof(**pc));
                hash = realloc(hash, (size_t)cap * sizeof(*hash));
                if (!*st || !*pc || !hash)
                    die("out of memory");
            }
            (*st)[n] = x;
            (*pc)[n].n = 0;
            hash[n++] = h;
            x = NULL;
        }
        kt_sched_state_free(x);   /* a later pass of a known state */
        if (h && (*pc)[at].n < MAX_PASSES)
            (*pc)[at].cost[(*pc)[at].n++] = json_real_value(json_object_get(o, "cost"));
        free(sj);
        json_decref(o);
    }
    free(hash);
    free(line);
    fclose(f);
    return n;
}

static void cache_append(const char *name, const kt_dag_t *dag, kt_sched_state_t *const *st,
                         const double *cost, int n)
{
    FILE *f = cache_path ? fopen(cache_path, "a") : NULL;
    if (!f)
        return;
    for (int i = 0; i < n; i++) {
        kt_bench_state_line(f, json_pack("{s:s, s:f}", "workload", name, "cost", cost[i]), dag,
                            st[i]);
    }
    fclose(f);
}

static void dump(const char *name, const kt_dag_t *dag, kt_sched_state_t **st, const double *cost,
                 const int *idx, int n)
{
    FILE *f = fopen(dump_path, "a");
    if (!f)
        die("opening the dump file");
    for (int i = 0; i < n; i++) {
        float *rows;
        uint32_t nrows;
        if (kt_feature_extract(dag, st[idx[i]], &rows, &nrows))
            die("features");
        for (uint32_t r = 0; r < nrows; r++) {
            fprintf(f, "%s,%d,%.9g", name, idx[i], cost[idx[i]]);
            for (int k = 0; k < KT_FEATURE_COUNT; k++)
                fprintf(f, ",%.6g", rows[r * KT_FEATURE_COUNT + k]);
            fputc('\n', f);
        }
        free(rows);
    }
    fclose(f);
}

/* The cost of a program: the fastest of its repeats. On a shared machine the
 * mean of the repeats carries other processes' load; the minimum is the
 * kernel's own speed with the least interference. -1 when it failed. */
static double best_cost(const kt_measure_result_t *r)
{
    if (r->error_no != KT_MEASURE_NO_ERROR || r->n_costs < 1)
        return -1;
    double c;
    kt_measure_result_range(r, &c, NULL);
    return c > 0 ? c : -1;
}

static void noise_ceiling(const char *name, const kt_workload_t *w, kt_sched_state_t **st,
                          const double *cost, const int *idx, int n, kt_measurer_t *m)
{
    kt_sched_state_t **sel = malloc((size_t)n * sizeof(*sel));
    kt_measure_result_t *res = calloc((size_t)n, sizeof(*res));
    float *again = malloc((size_t)n * sizeof(float)), *first = malloc((size_t)n * sizeof(float));
    if (!sel || !res || !again || !first)
        die("out of memory");
    for (int i = 0; i < n; i++)
        sel[i] = st[idx[i]];
    if (kt_search_measure_local(m, w, sel, n, res) < 0)
        die("measure");
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (best_cost(&res[i]) > 0) {
            first[k] = (float)(1.0 / cost[idx[i]]);
            again[k++] = (float)(1.0 / best_cost(&res[i]));
        }
        kt_measure_result_clear(&res[i]);
    }
    double acc = NAN;
    if (k >= 2 && kt_model_pairwise_accuracy(again, first, (size_t)k, &acc))
        die("accuracy");
    printf("%-10s noise ceiling: a second measurement of %d programs orders %.3f of pairs "
           "as the first\n", name, k, acc);
    free(sel);
    free(res);
    free(again);
    free(first);
}

/* A program's label from its first `upto` passes: the fastest; -1 when any
 * of them failed or there is none. */
static double pass_label(const pass_costs_t *x, int upto)
{
    double c = x->n > 0 && upto > 0 ? x->cost[0] : -1;
    for (int k = 1; k < x->n && k < upto && c > 0; k++)
        c = x->cost[k] > 0 ? fmin(c, x->cost[k]) : -1;
    return c;
}

/* Fill st[take..nstates) with random states not among st[0..take). */
static void sample_more(const kt_workload_t *w, const kt_sched_params_t *p, kt_sched_state_t **st,
                        int take)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_state_t **fresh = sample_states(w, p, nstates + take);
    uint64_t *cached_hash = malloc((size_t)(take ? take : 1) * sizeof(uint64_t));
    if (!cached_hash)
        die("out of memory");
    for (int j = 0; j < take; j++)
        cached_hash[j] = kt_sched_state_hash(st[j], dag);
    int k = take;
    for (int i = 0; i < nstates + take; i++) {
        uint64_t h = kt_sched_state_hash(fresh[i], dag);
        int dup = 0;
        for (int j = 0; j < take && !dup; j++)
            dup = cached_hash[j] == h;
        if (!dup && k < nstates)
            st[k++] = fresh[i];
        else
            kt_sched_state_free(fresh[i]);
    }
    free(fresh);
    free(cached_hash);
    if (k < nstates) {
        fprintf(stderr, "only %d distinct states\n", k);
        exit(1);
    }
}

/* Measure every program until it has `passes` passes (or failed once): a
 * whole pass over all programs before the next, so a program's passes lie
 * minutes apart and the load of other tenants, which comes and goes over
 * seconds, rarely slows all of them. Each pass is appended to the cache. */
static void measure_passes(const char *name, const kt_workload_t *w, kt_sched_state_t **st,
                           pass_costs_t *pc, kt_measurer_t *m)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    int *todo = malloc((size_t)nstates * sizeof(int));
    kt_sched_state_t **sel = malloc(BATCH * sizeof(*sel));
    double *c = malloc(BATCH * sizeof(double));
    kt_measure_result_t *res = calloc(BATCH, sizeof(*res));
    if (!todo || !sel || !c || !res)
        die("out of memory");
    double t0 = kt_time_mono();
    for (int p = 0; p < passes; p++) {
        int nt = 0;
        for (int i = 0; i < nstates; i++)
            if (pc[i].n == p && (p == 0 || pass_label(&pc[i], p) > 0))
                todo[nt++] = i;
        for (int i = 0; i < nt; i += BATCH) {
            int n = nt - i < BATCH ? nt - i : BATCH;
            for (int j = 0; j < n; j++)
                sel[j] = st[todo[i + j]];
            if (kt_search_measure_local(m, w, sel, n, res) < 0)
                die("measure");
            for (int j = 0; j < n; j++) {
                pass_costs_t *x = &pc[todo[i + j]];
                c[j] = x->cost[x->n++] = best_cost(&res[j]);
                kt_measure_result_clear(&res[j]);
            }
            cache_append(name, dag, sel, c, n);
            fprintf(stderr, "  %s: pass %d: %d/%d measured (%.0f s)\n", name, p + 1, i + n, nt,
                    kt_time_mono() - t0);
        }
    }
    free(todo);
    free(sel);
    free(c);
    free(res);
}

/* How far one pass orders pairs as another: the noise ceiling of a single
 * pass (labels, the fastest of `passes`, are steadier than that). */
static void pass_agreement(const char *name, const pass_costs_t *pc)
{
    float *a = malloc((size_t)nstates * sizeof(float)), *b = malloc((size_t)nstates * sizeof(float));
    if (!a || !b)
        die("out of memory");
    int k = 0;
    for (int i = 0; i < nstates; i++)
        if (pc[i].n >= 2 && pc[i].cost[0] > 0 && pc[i].cost[1] > 0) {
            a[k] = (float)(1.0 / pc[i].cost[0]);
            b[k++] = (float)(1.0 / pc[i].cost[1]);
        }
    double acc = NAN;
    if (k >= 2 && kt_model_pairwise_accuracy(b, a, (size_t)k, &acc))
        die("accuracy");
    printf("%-10s noise: pass 2 orders %.3f of pairs of %d programs as pass 1; labels are the "
           "fastest of %d passes\n", name, acc, k, passes);
    free(a);
    free(b);
}

static void bench(const char *name, const char *json, kt_measurer_t *m)
{
    kt_workload_t *w = kt_workload_parse(json);
    if (!w)
        die("workload");
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 1;
    kt_sched_state_t **cached;
    pass_costs_t *cpc;
    int nc = cache_load(name, dag, &cached, &cpc);
    int take = nc < nstates ? nc : nstates;
    kt_sched_state_t **st = calloc((size_t)nstates, sizeof(*st));
    pass_costs_t *pc = calloc((size_t)nstates, sizeof(*pc));
    double *cost = malloc((size_t)nstates * sizeof(double));
    int *idx = malloc((size_t)nstates * sizeof(int));
    if (!st || !pc || !cost || !idx)
        die("out of memory");
    for (int i = 0; i < nc; i++) {
        if (i < take) {
            st[i] = cached[i];
            pc[i] = cpc[i];
        } else {
            kt_sched_state_free(cached[i]);
        }
    }
    free(cached);
    free(cpc);
    if (take < nstates)
        sample_more(w, &p, st, take);
    measure_passes(name, w, st, pc, m);
    /* a program's label: its fastest pass; failed in any pass, failed */
    for (int i = 0; i < nstates; i++)
        cost[i] = pass_label(&pc[i], passes);
    if (passes > 1)
        pass_agreement(name, pc);
    int nvalid = 0;
    for (int i = 0; i < nstates; i++)
        if (cost[i] > 0)
            idx[nvalid++] = i;
    if (dump_path)
        dump(name, dag, st, cost, idx, nvalid);
    if (remeasure > 0)
        noise_ceiling(name, w, st, cost, idx, remeasure < nvalid ? remeasure : nvalid, m);
    /* shuffle the valid programs, then split 80/20 */
    kt_rng_t rng;
    kt_rng_seed(&rng, seed + 1);
    for (int i = nvalid - 1; i > 0; i--) {
        int j = (int)kt_rng_below(&rng, (uint64_t)i + 1);
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    int ntrain = nvalid - nvalid / 5;
    if (ntrain < 2 || nvalid - ntrain < 2) {
        printf("%-10s %5d valid of %d: too few to evaluate\n", name, nvalid, nstates);
    } else {
        /* Each fold holds out its own fifth (folds > 1: every fifth in
         * turn); the figures are the folds' means. */
        double ax = 0, rx = 0, tx = 0, aa = 0, ra = 0, ta = 0, ar = 0, rr = 0, tr = 0;
        int *perm = malloc((size_t)nvalid * sizeof(int));
        if (!perm)
            die("out of memory");
        for (int f = 0; f < folds; f++) {
            int lo = (int)((long)nvalid * f / folds), hi = (int)((long)nvalid * (f + 1) / folds);
            if (folds == 1) {
                lo = ntrain;
                hi = nvalid;
            }
            int k = 0;
            for (int i = 0; i < nvalid; i++)
                if (i < lo || i >= hi)
                    perm[k++] = idx[i];
            int nt = k;
            for (int i = lo; i < hi; i++)
                perm[k++] = idx[i];
            double a, r, t;
            evaluate(KT_MODEL_XGB, 0, dag, st, cost, perm, nt, nvalid, &a, &r, &t);
            ax += a / folds, rx += r / folds, tx += t / folds;
            evaluate(KT_MODEL_XGB, 1, dag, st, cost, perm, nt, nvalid, &a, &r, &t);
            aa += a / folds, ra += r / folds, ta += t / folds;
            evaluate(KT_MODEL_RANDOM, 0, dag, st, cost, perm, nt, nvalid, &a, &r, &t);
            ar += a / folds, rr += r / folds, tr += t / folds;
        }
        free(perm);
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < nvalid; i++) {
            lo = cost[idx[i]] < lo ? cost[idx[i]] : lo;
            hi = cost[idx[i]] > hi ? cost[idx[i]] : hi;
        }
        printf("%-10s %5d/%-5d %5d/%-5d %8.3f..%-9.3f  %8.3f  %8.3f   %8.3f  %8.3f   %8.3f  %8.3f"
               "  %7.2f %7.2f\n",
               name, nvalid, nstates, ntrain, nvalid - ntrain, lo * 1e3, hi * 1e3, ax, rx, aa, ra,
               ar, rr, tx, ta);
        fflush(stdout);
    }
    for (int i = 0; i < nstates; i++)
        kt_sched_state_free(st[i]);
    free(st);
    free(cost);
    free(pc);
    free(idx);
    kt_workload_free(w);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: see the comment at the top of bench_model_quality.c\n");
            return 2;
        }
        if (strcmp(a, "--n") == 0)
            nstates = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--timer") == 0)
            timer = kt_bench_timer("bench_model_quality", v);
        else if (strcmp(a, "--min-repeat-ms") == 0)
            min_repeat_ms = atoi(v);
        else if (strcmp(a, "--workload") == 0)
            which = v;
        else if (strcmp(a, "--cache") == 0)
            cache_path = v;
        else if (strcmp(a, "--dump") == 0)
            dump_path = v;
        else if (strcmp(a, "--remeasure") == 0)
            remeasure = atoi(v);
        else if (strcmp(a, "--repeat") == 0)
            repeat = atoi(v);
        else if (strcmp(a, "--passes") == 0)
            passes = atoi(v);
        else if (strcmp(a, "--folds") == 0)
            folds = atoi(v) == 1 ? 1 : 5;
        else if (strcmp(a, "--label") == 0)
            label = kt_bench_label_option("bench_model_quality", v);
        else if (strcmp(a, "--xgb") == 0)
            xgb_params = kt_bench_xgb_option("bench_model_quality", v);
        else if (strcmp(a, "--weight-by-label") == 0)
            weight_by_label = atoi(v);
        else if (strcmp(a, "--tree") == 0)
            tree = strcmp(v, "exact") == 0 ? KT_MODEL_TREE_EXACT
                 : strcmp(v, "approx") == 0 ? KT_MODEL_TREE_APPROX
                                            : KT_MODEL_TREE_HIST;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (nstates < 10) {
        fprintf(stderr, "--n must be >= 10\n");
        return 2;
    }
    if (passes < 1 || passes > MAX_PASSES) {
        fprintf(stderr, "--passes must be 1..%d\n", MAX_PASSES);
        return 2;
    }
    kt_builder_t *b;
    kt_runner_t *r;
    kt_bench_local("bench_model_quality", min_repeat_ms, repeat, timer, &b, &r);
    kt_measurer_t *m = kt_measurer_new(b, r, -1);
    if (!m)
        die("measurer");
    printf("bench_model_quality: %d random states per workload, one thread; held-out 20%%\n"
           "xgb: the search's model (kt_search_model_params); ansor: Ansor's XGBoost "
           "parameters; rnd: random scores\n"
           "%-10s %11s %11s %20s  %8s  %8s   %8s  %8s   %8s  %8s  %7s %7s\n",
           nstates, "workload", "valid", "train/test", "latency ms", "xgb acc", "top32",
           "ansor acc", "top32", "rnd acc", "top32", "train s", "ansor s");
    for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
        if (strcmp(which, "all") == 0 || strcmp(which, workloads[i].name) == 0)
            bench(workloads[i].name, workloads[i].json, m);
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
    return 0;
}
