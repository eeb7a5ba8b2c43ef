/* bench_search: how good are the kernels the search finds, and where does a
 * round's time go? For matmul 512^3, ResNet-18's 3x3 conv2d on 56x56x64
 * (NHWC, pad 1, + bias + relu) and the same layer as a Winograd convolution
 * (tile 4), sketch.xgb against sketch.random, several
 * seeds: the best latency after each trial checkpoint, measured on this CPU
 * with one thread (candidates are built, run and checked against the
 * reference by the local measurer), the median latency of each round's
 * candidates (whether the model's picks are better as a whole, which shows
 * before the best moves), and the mean wall time per round spent in search
 * (sampling + evolution), model training and measurement (and each round's,
 * median of seeds), and the tuning
 * time (wall, search + building + measuring) to each checkpoint. Every candidate is
 * timed once, as the search times it; at a run's end its 3 best are timed
 * again (--confirm-repeat repeats of 40 ms, the fastest kept), and the
 * "confirmd" row compares what the policies really found (a run whose
 * re-timing is over CONFIRM_DRIFT off is named: its host's load changed). Library
 * baselines are timed in the same run (OpenBLAS sgemm; for the conv2d im2col
 * + sgemm and, when built with oneDNN, its direct convolution: bench_blas.h),
 * with the machine's practical peak (the fastest baseline or sgemm 512^3):
 * the share of it each policy's confirmed best reaches, and the share a 1.3x
 * lead over the second policy at the last checkpoint would need, of it and
 * of the core's multiply-add ceiling (fma_peak.h), beyond which no kernel
 * goes.
 * Policies and seeds run one after the other: builds overlap runs, so on a
 * 2-core machine a second bench beside this one slows the kernels it times.
 *
 *   bench_search [--trials 64,128,256] [--seeds 3] [--per-round 32]
 *                [--workload matmul|conv|winograd|all]
 *                [--policies sketch.xgb,sketch.random]
 *                [--population 2048] [--iters 4] [--min-repeat-ms 100] [--timer wall|cpu]
 *                [--confirm-repeat 5] [--dump FILE]
 *                [--label throughput|log|rank] [--xgb key=value,...]
 *                [--search key=value,...]
 *
 * --dump appends a JSON line per measured candidate: {"workload", "policy",
 * "seed", "round", "state", "cost"} (cost in seconds, -1 = failed), in the
 * line format of bench_model_quality's --cache, to look at what a search
 * measured offline. --label gives sketch.xgb a model with another label kind
 * (model.h; log: regression on log-throughput) than the search's default,
 * rank (the pairwise objective);
 * --xgb sets its other parameters (kt_model_params_set: max_depth=8,eta=0.1).
 * --search sets both policies' parameters as a job's --search-params does
 * (kt_search_opts_set: eps_greedy=0.1,num_warmup_sample=64), after
 * --population, --iters and --label.
 * --timer cpu times runs by CPU time (see runner.h): use it on a shared machine.
 *
 * With two policies it also prints the time to quality (issue 25): the
 * trials the first policy needs to reach the second's best at the last
 * checkpoint (the median of its seeds), median over seeds (a seed that never
 * gets there counts as more than the last checkpoint). Issue 25's figure
 * takes 9 seeds or more: --seeds 9 --trials 64,128,256.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_blas.h"
#include "bench_local.h"
#include "fma_peak.h"
#include "measure/measurer.h"
#include "scheduler/scheduler.h"
#include "search/search.h"
#include "util/err.h"
#include "util/util.h"

#define MAX_CHECK 16
#define MAX_SEEDS 16
#define MAX_POL 2
#define MAX_ROUNDS 64
#define MAX_TRAJ 1024   /* rounds of a run whose best is kept for the time to quality */
#define CONFIRM 3   /* a run's best candidates measured again at its end */
/* Re-timed bests further than this from the search's timing (a share) are
 * flagged: on a quiet machine they agree within a few percent. */
#define CONFIRM_DRIFT 0.15

static int checkpoints[MAX_CHECK] = {64, 128, 256};
static int ncheck = 3;
static int nseeds = 3;
static int per_round = KT_SCHEDULER_DEFAULT_PER_ROUND;
static int population = 2048;
static int num_iters = 4;
static int timer = KT_RUNNER_TIMER_WALL;
static int min_repeat_ms = 100;
static int confirm_repeat = 5;
static const char *which = "all";
static const char *dump_path;
static int label = -1;   /* KT_MODEL_LABEL_* of sketch.xgb's model; -1: the search's default */
static const char *xgb_params;   /* --xgb: kt_model_params_set list for sketch.xgb's model */
static const char *search_params;   /* --search: kt_search_opts_set list for both policies */
static const char *policies[MAX_POL] = {"sketch.xgb", "sketch.random"};
static int npol = 2;

/* ResNet-18's stage-1 3x3 conv2d + bias + relu, the fields after "op" */
#define CONV_56x56x64                                                                          \
    "\"N\":1,\"H\":56,\"W\":56,\"CI\":64,\"CO\":64,\"KH\":3,\"KW\":3,\"stride\":[1,1],"  \
    "\"padding\":[1,1],\"dilation\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]"

/* Each with its library baseline (bench_blas.h): OpenBLAS sgemm of
 * M, N, K, or im2col + sgemm of H, W, CI, CO, KH, KW, pad. The Winograd
 * workload is the alternative `ktune tune --network` tunes beside the conv
 * on a CPU (the same layer, tile 4): its GFLOPS count the direct
 * convolution's multiply-adds, so that they compare with the baselines and
 * the core's ceiling. */
static const struct {
    const char *name, *json;
    int conv;
    int d[7];
} workloads[] = {
    {"matmul", "{\"op\":\"matmul\",\"M\":512,\"N\":512,\"K\":512}", 0, {512, 512, 512}},
    {"conv", "{\"op\":\"conv2d_nhwc\"," CONV_56x56x64 "}", 1, {56, 56, 64, 64, 3, 3, 1}},
    {"winograd", "{\"op\":\"conv2d_winograd_nhwc\",\"tile_size\":4," CONV_56x56x64 "}", 1,
     {56, 56, 64, 64, 3, 3, 1}},
};

typedef struct {
    double best[MAX_CHECK];              /* best cost (s) at each checkpoint */
    double secs[MAX_CHECK];              /* tuning wall time (s) to each checkpoint */
    double picks[MAX_ROUNDS];            /* median cost (s) of each round's valid candidates */
    double confirmed;                    /* fastest of the CONFIRM best, measured again */
    double search_s, train_s, measure_s; /* totals over rounds */
    double round_s[MAX_ROUNDS][3];       /* each round's search, training and measuring (s) */
    int rounds, errors;
    int ntraj;                           /* best cost (s) after each round and its trials */
    int traj_trials[MAX_TRAJ];
    double traj_best[MAX_TRAJ];
} run_t;

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], double_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_search: %s: %s\n", what, kt_err_msg());
    exit(1);
}

/* The CONFIRM fastest states measured so far, fastest first. */
typedef struct {
    kt_sched_state_t *st[CONFIRM];
    double cost[CONFIRM];
    int n;
} top_t;

static void top_offer(top_t *t, const kt_sched_state_t *st, double cost)
{
    int at = t->n;
    while (at > 0 && cost < t->cost[at - 1])
        at--;
    if (at >= CONFIRM)
        return;
    kt_sched_state_t *c = kt_sched_state_clone(st);
    if (!c)
        die("clone");
    if (t->n == CONFIRM)
        kt_sched_state_free(t->st[--t->n]);
    memmove(&t->st[at + 1], &t->st[at], (size_t)(t->n - at) * sizeof t->st[0]);
    memmove(&t->cost[at + 1], &t->cost[at], (size_t)(t->n - at) * sizeof t->cost[0]);
    t->st[at] = c;
    t->cost[at] = cost;
    t->n++;
}

/* Each candidate was timed once during the search, and on a shared machine
 * one timing of a 2 ms kernel is off by up to a third, so a run's best is
 * partly luck. Its CONFIRM best are timed again, the fastest of
 * confirm_repeat repeats each: what the run really found. */
static double confirm(const kt_workload_t *w, kt_measurer_t *cm, top_t *t)
{
    double best = INFINITY;
    if (t->n == 0)
        return best;
    kt_measure_result_t res[CONFIRM];
    memset(res, 0, sizeof res);
    if (kt_search_measure_local(cm, w, t->st, t->n, res) < 0)
        die("confirming");
    for (int i = 0; i < t->n; i++) {
        double lo;
        if (res[i].error_no == KT_MEASURE_NO_ERROR) {
            kt_measure_result_range(&res[i], &lo, NULL);
            if (lo < best)
                best = lo;
        }
        kt_measure_result_clear(&res[i]);
        kt_sched_state_free(t->st[i]);
    }
    t->n = 0;
    return best;
}

/* --dump: one line per candidate of a round. */
static void dump_round(const kt_workload_t *w, const char *wname, const char *policy,
                       uint64_t seed, int round, kt_sched_state_t *const *st,
                       const kt_measure_result_t *res, int n)
{
    FILE *f = dump_path ? fopen(dump_path, "a") : NULL;
    if (!f) {
        if (dump_path)
            fprintf(stderr, "bench_search: cannot append to %s\n", dump_path);
        return;
    }
    const kt_dag_t *dag = kt_workload_dag(w);
    for (int i = 0; i < n; i++) {
        double cost = res[i].error_no == KT_MEASURE_NO_ERROR ? res[i].mean : -1;
        kt_bench_state_line(f, json_pack("{s:s, s:s, s:I, s:i, s:f}", "workload", wname, "policy",
                                         policy, "seed", (json_int_t)seed, "round", round, "cost",
                                         cost), dag, st[i]);
    }
    fclose(f);
}

static void run_one(const kt_workload_t *w, const char *wname, const char *policy, uint64_t seed, kt_measurer_t *m,
                    kt_measurer_t *cm, run_t *out)
{
    memset(out, 0, sizeof(*out));
    top_t top = {0};
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 1;
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    o.policy = policy;
    o.seed = seed;
    o.evolutionary_search_population = population;
    o.evolutionary_search_num_iters = num_iters;
    if (label >= 0)
        o.model_label = label;
    if (search_params && kt_search_opts_set(&o, search_params))
        die("--search");
    /* the policy's own model, but for --xgb */
    kt_model_t *model = NULL;
    kt_model_params_t mp;
    kt_search_model_params(&o, seed, &mp);
    if (strcmp(policy, "sketch.xgb") == 0 && xgb_params) {
        if (kt_model_params_set(&mp, xgb_params))
            die("--xgb");
        if (!(model = kt_model_new(KT_MODEL_XGB, &mp)))
            die("model");
    }
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, model, 0);
    if (!sp)
        die("policy");
    int trials = 0, c = 0;
    int max = checkpoints[ncheck - 1];
    double start = kt_time_mono();
    while (trials < max) {
        int n = max - trials < per_round ? max - trials : per_round;
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        double t0 = kt_time_mono();
        int got = kt_search_one_round(sp, n, kt_search_measure_local, m, &st, &res);
        double wall = kt_time_mono() - t0;
        if (got < 0)
            die("round");
        if (got == 0)
            break;   /* exhausted */
        double s, t;
        kt_search_last_times(sp, &s, &t);
        out->search_s += s;
        out->train_s += t;
        out->measure_s += wall - s - t;
        if (out->rounds < MAX_ROUNDS) {
            out->round_s[out->rounds][0] = s;
            out->round_s[out->rounds][1] = t;
            out->round_s[out->rounds][2] = wall - s - t;
        }
        dump_round(w, wname, policy, seed, out->rounds + 1, st, res, got);
        double *ok = malloc((size_t)got * sizeof *ok);
        int nok = 0;
        if (!ok)
            die("out of memory");
        for (int i = 0; i < got; i++) {
            if (res[i].error_no == KT_MEASURE_NO_ERROR) {
                ok[nok++] = res[i].mean;
                top_offer(&top, st[i], res[i].mean);
            } else {
                out->errors++;
                fprintf(stderr, "    candidate error %s: %.200s\n",
                        kt_measure_error_name(res[i].error_no),
                        res[i].error_msg ? res[i].error_msg : "");
            }
            kt_measure_result_clear(&res[i]);
            kt_sched_state_free(st[i]);
        }
        /* How good the round's picks are as a whole, not just its best:
         * a model that guides shows here long before the best moves. */
        double picks = nok ? median(ok, nok) : INFINITY;
        if (out->rounds < MAX_ROUNDS)
            out->picks[out->rounds] = picks;
        out->rounds++;
        free(ok);
        free(st);
        free(res);
        trials += got;
        double best = INFINITY;
        kt_search_best(sp, &best, NULL);
        if (out->ntraj < MAX_TRAJ) {
            out->traj_trials[out->ntraj] = trials;
            out->traj_best[out->ntraj++] = best;
        }
        while (c < ncheck && trials >= checkpoints[c]) {
            out->secs[c] = kt_time_mono() - start;
            out->best[c++] = best;
        }
        kt_search_stats_t ss;
        kt_search_stats(sp, &ss);
        fprintf(stderr, "  %s seed %llu: %d trials, best %.3f ms, picks' median %.3f ms, %d "
                        "register tiles (search %.2f s, train %.2f s, measure %.1f s)\n",
                policy, (unsigned long long)seed, trials, best * 1e3, picks * 1e3,
                ss.last_tile_families, s, t, wall - s - t);
    }
    double best = INFINITY;
    kt_search_best(sp, &best, NULL);
    for (; c < ncheck; c++) {
        out->secs[c] = kt_time_mono() - start;
        out->best[c] = best;
    }
    out->confirmed = confirm(w, cm, &top);
    fprintf(stderr, "  %s seed %llu: best %.3f ms, confirmed %.3f ms\n", policy,
            (unsigned long long)seed, best * 1e3, out->confirmed * 1e3);
    kt_search_policy_free(sp);
    kt_model_free(model);
}

/* Time to quality: the trials policy 0 needs to reach the median of policy
 * 1's bests at the last checkpoint, per seed and their median (a seed that
 * does not get there within its run counts as INFINITY). */
static void print_time_to_quality(run_t runs[][MAX_SEEDS])
{
    double v[MAX_SEEDS], need[MAX_SEEDS];
    for (int k = 0; k < nseeds; k++)
        v[k] = runs[1][k].best[ncheck - 1];
    double target = median(v, nseeds);
    int last = checkpoints[ncheck - 1];
    printf("time to quality: trials %s needs to reach %s's %d-trial best (%.3f ms, median of "
           "seeds), per seed:", policies[0], policies[1], last, target * 1e3);
    for (int k = 0; k < nseeds; k++) {
        const run_t *r = &runs[0][k];
        need[k] = INFINITY;
        for (int i = 0; i < r->ntraj && isinf(need[k]); i++)
            if (r->traj_best[i] <= target)
                need[k] = r->traj_trials[i];
        if (isinf(need[k]))
            printf(" >%d", r->ntraj ? r->traj_trials[r->ntraj - 1] : 0);
        else
            printf(" %.0f", need[k]);
    }
    double med = median(need, nseeds);
    if (isinf(med))
        printf("; median >%d", last);
    else
        printf("; median %.0f", med);
    printf(" (goal <= %d%s)\n", last / 2, nseeds < 9 ? "; fewer than 9 seeds: indicative only" : "");
}

/* One table row: per policy the median over seeds of v[policy][seed] (ms),
 * their range and GFLOPS, then the speedup of the first over the second. */
static void print_row(const char *label, double v[MAX_POL][MAX_SEEDS], double flops)
{
    printf("%8s", label);
    double med[MAX_POL];
    for (int pi = 0; pi < npol; pi++) {
        double x[MAX_SEEDS];
        memcpy(x, v[pi], (size_t)nseeds * sizeof x[0]);
        med[pi] = median(x, nseeds);
        printf("  %8.3f (%7.3f..%7.3f) %4.0fGF", med[pi], x[0], x[nseeds - 1],
               flops / (med[pi] * 1e-3) * 1e-9);
    }
    if (npol == 2)
        printf("  %9.2fx", med[1] / med[0]);
    printf("\n");
}

static void parse_list(const char *s, int *out, int *n, int cap)
{
    *n = 0;
    while (*s && *n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) {
            fprintf(stderr, "bad list '%s'\n", s);
            exit(2);
        }
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
}

/* The library baselines of workload wi, and where the policies' confirmed
 * bests and the 1.3x target over the second policy stand against the
 * machine's practical peak: the rate of OpenBLAS's sgemm 512^3 on one thread
 * or of the fastest baseline. A ratio target between two policies is
 * out of reach when it asks for more than that. */
static void print_baseline(size_t wi, double flops, int winograd, run_t runs[][MAX_SEEDS])
{
    static double sgemm512_s;   /* sgemm 512^3, timed once per run */
    static double core_gf;      /* the core's multiply-add ceiling, once per run */
    static int core_vb;
    if (core_gf == 0)
        core_gf = kt_bench_fma_peak_gflops(&core_vb);
    const int *d = workloads[wi].d;
    int is512 = !workloads[wi].conv && d[0] == 512 && d[1] == 512 && d[2] == 512;
    if (sgemm512_s == 0 && !is512)
        sgemm512_s = kt_bench_blas_matmul(512, 512, 512);
    double t = workloads[wi].conv ? kt_bench_blas_conv2d(d[0], d[1], d[2], d[3], d[4], d[5], d[6])
                                  : kt_bench_blas_matmul(d[0], d[1], d[2]);
    if (is512 && sgemm512_s == 0)
        sgemm512_s = t;   /* the baseline is the peak's own sgemm: timed once */
    double peak_gf = 2.0 * 512 * 512 * 512 / sgemm512_s * 1e-9;
    double gf = flops / t * 1e-9, peak = gf > peak_gf ? gf : peak_gf;
    printf("baseline: %s, one thread: %.3f ms (%.0fGF)\n",
           workloads[wi].conv ? "im2col + OpenBLAS sgemm" : "OpenBLAS sgemm", t * 1e3, gf);
#ifdef KT_HAVE_DNNL
    if (workloads[wi].conv) {
        double td = kt_bench_dnnl_conv2d(d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
        printf("baseline: oneDNN direct convolution (relu post-op, weights reordered once), one "
               "thread: %.3f ms (%.0fGF)\n", td * 1e3, flops / td * 1e-9);
        if (flops / td * 1e-9 > peak)
            peak = flops / td * 1e-9;
    }
#endif
    printf("practical peak %.0fGF (the fastest baseline or OpenBLAS sgemm 512^3); confirmed "
           "medians reach", peak);
    for (int pi = 0; pi < npol; pi++) {
        double v[MAX_SEEDS];
        for (int k = 0; k < nseeds; k++)
            v[k] = runs[pi][k].confirmed;
        printf("%s %s %.0f%%", pi ? "," : "", policies[pi],
               100 * flops / median(v, nseeds) * 1e-9 / peak);
    }
    printf(" of the peak\n");
    printf("core multiply-add ceiling %.0fGF (%d-byte vectors, one thread): the practical peak is "
           "%.0f%% of it\n", core_gf, core_vb, 100 * peak / core_gf);
    if (npol == 2) {
        double v[MAX_SEEDS];
        for (int k = 0; k < nseeds; k++)
            v[k] = runs[1][k].best[ncheck - 1];
        double need = median(v, nseeds) / 1.3;
        double need_gf = flops / need * 1e-9;
        printf("1.3x over %s at %d trials needs %.3f ms: %.0f%% of the peak, %.0f%% of the "
               "core's ceiling%s\n", policies[1], checkpoints[ncheck - 1], need * 1e3,
               100 * need_gf / peak, 100 * need_gf / core_gf,
               winograd ? " (in the direct convolution's multiply-adds: Winograd "
                                      "runs fewer)"
               : need_gf > core_gf  ? " (out of reach on this machine)"
                                    : "");
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: see the comment at the top of bench_search.c\n");
            return 2;
        }
        if (strcmp(a, "--trials") == 0)
            parse_list(v, checkpoints, &ncheck, MAX_CHECK);
        else if (strcmp(a, "--seeds") == 0)
            nseeds = atoi(v);
        else if (strcmp(a, "--per-round") == 0)
            per_round = atoi(v);
        else if (strcmp(a, "--population") == 0)
            population = atoi(v);
        else if (strcmp(a, "--iters") == 0)
            num_iters = atoi(v);
        else if (strcmp(a, "--timer") == 0)
            timer = kt_bench_timer("bench_search", v);
        else if (strcmp(a, "--min-repeat-ms") == 0)
            min_repeat_ms = atoi(v);
        else if (strcmp(a, "--confirm-repeat") == 0)
            confirm_repeat = atoi(v);
        else if (strcmp(a, "--label") == 0)
            label = kt_bench_label_option("bench_search", v);
        else if (strcmp(a, "--xgb") == 0)
            xgb_params = kt_bench_xgb_option("bench_search", v);
        else if (strcmp(a, "--search") == 0)
            search_params = kt_bench_search_option("bench_search", v);
        else if (strcmp(a, "--dump") == 0)
            dump_path = v;
        else if (strcmp(a, "--workload") == 0)
            which = v;
        else if (strcmp(a, "--policies") == 0) {
            char *dup = kt_strdup(v);
            npol = 0;
            for (char *tok = strtok(dup, ","); tok && npol < MAX_POL; tok = strtok(NULL, ","))
                policies[npol++] = kt_strdup(tok);   /* lives until exit */
            free(dup);
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (ncheck < 1 || nseeds < 1 || nseeds > MAX_SEEDS || per_round < 1 || population < 1 || num_iters < 1 ||
        npol < 1 || confirm_repeat < 1) {
        fprintf(stderr, "bad options\n");
        return 2;
    }
    kt_builder_t *b;
    kt_runner_t *r;
    kt_bench_local("bench_search", min_repeat_ms, 1, timer, &b, &r);
    kt_builder_t *cb;
    kt_runner_t *cr;
    kt_bench_local("bench_search", 40, confirm_repeat, timer, &cb, &cr);

    printf("bench_search: best latency (ms, median of %d seeds; min..max) after N trials, "
           "%d per round, population %d, %d evolution iterations, one thread\n",
           nseeds, per_round, population, num_iters);
    for (size_t wi = 0; wi < sizeof(workloads) / sizeof(workloads[0]); wi++) {
        if (strcmp(which, "all") != 0 && strcmp(which, workloads[wi].name) != 0)
            continue;
        kt_workload_t *w = kt_workload_parse(workloads[wi].json);
        if (!w)
            die("workload");
        double flops = kt_workload_flops(w);
        int winograd = strcmp(kt_workload_op(w), "conv2d_winograd_nhwc") == 0;
        if (winograd) {
            char *direct = kt_workload_winograd_direct_json(w);
            kt_workload_t *d = direct ? kt_workload_parse(direct) : NULL;
            free(direct);
            if (!d)
                die("workload");
            flops = kt_workload_flops(d);
            kt_workload_free(d);
        }
        static run_t runs[MAX_POL][MAX_SEEDS];
        for (int pi = 0; pi < npol; pi++)
            for (int s = 0; s < nseeds; s++) {
                kt_measurer_t *m = kt_measurer_new(b, r, -1);
                kt_measurer_t *cm = kt_measurer_new(cb, cr, -1);
                if (!m || !cm)
                    die("measurer");
                fprintf(stderr, "%s: %s seed %d\n", workloads[wi].name, policies[pi], s);
                run_one(w, workloads[wi].name, policies[pi], (uint64_t)(1000 + s), m, cm, &runs[pi][s]);
                kt_measurer_free(m);
                kt_measurer_free(cm);
            }
        printf("\n%s (%.0f MFLOP)\n%8s", workloads[wi].name, flops * 1e-6, "trials");
        for (int pi = 0; pi < npol; pi++)
            printf("  %28s", policies[pi]);
        if (npol == 2)
            printf("  %10s", "speedup");
        printf("\n");
        static double v[MAX_POL][MAX_SEEDS];
        for (int c = 0; c < ncheck; c++) {
            char label[16];
            snprintf(label, sizeof label, "%d", checkpoints[c]);
            for (int pi = 0; pi < npol; pi++)
                for (int k = 0; k < nseeds; k++)
                    v[pi][k] = runs[pi][k].best[c] * 1e3;
            print_row(label, v, flops);
        }
        for (int pi = 0; pi < npol; pi++)
            for (int k = 0; k < nseeds; k++)
                v[pi][k] = runs[pi][k].confirmed * 1e3;
        print_row("confirmd", v, flops);
        printf("(confirmd: each run's %d best candidates timed again, the fastest of %d repeats "
               "of 40 ms)\n", CONFIRM, confirm_repeat);
        /* a re-timing far from the search's own timing means the host's load
         * changed during the run: its figures compare badly with other runs */
        for (int pi = 0; pi < npol; pi++)
            for (int k = 0; k < nseeds; k++) {
                double b = runs[pi][k].best[ncheck - 1], c = runs[pi][k].confirmed;
                if (b > 0 && c > 0 && fabs(c / b - 1) > CONFIRM_DRIFT)
                    printf("warning: %s seed %d re-timed at %.3f ms against %.3f ms in the "
                           "search (%+.0f%%): the host's load changed during the run\n",
                           policies[pi], 1000 + k, c * 1e3, b * 1e3, 100 * (c / b - 1));
            }
        if (npol == 2)
            print_time_to_quality(runs);
        print_baseline(wi, flops, winograd, runs);
        int maxr = 0;
        for (int pi = 0; pi < npol; pi++)
            for (int k = 0; k < nseeds; k++)
                if (runs[pi][k].rounds > maxr)
                    maxr = runs[pi][k].rounds;
        if (maxr > MAX_ROUNDS)
            maxr = MAX_ROUNDS;
        printf("median latency of each round's picks (ms, median of seeds):\n");
        for (int rd = 0; rd < maxr; rd++) {
            printf("%8d", rd + 1);
            double med[MAX_POL];
            for (int pi = 0; pi < npol; pi++) {
                double v[MAX_SEEDS];
                int n = 0;
                for (int k = 0; k < nseeds; k++)
                    if (rd < runs[pi][k].rounds && isfinite(runs[pi][k].picks[rd]))
                        v[n++] = runs[pi][k].picks[rd] * 1e3;
                med[pi] = n ? median(v, n) : NAN;
                printf("  %28.3f", med[pi]);
            }
            if (npol == 2)
                printf("  %9.2fx", med[1] / med[0]);
            printf("\n");
        }
        printf("time per round (s, median of seeds): search / training / building and measuring\n");
        for (int rd = 0; rd < maxr; rd++) {
            printf("%8d", rd + 1);
            for (int pi = 0; pi < npol; pi++) {
                double part[3];
                for (int x = 0; x < 3; x++) {
                    double v[MAX_SEEDS];
                    int n = 0;
                    for (int k = 0; k < nseeds; k++)
                        if (rd < runs[pi][k].rounds)
                            v[n++] = runs[pi][k].round_s[rd][x];
                    part[x] = n ? median(v, n) : NAN;
                }
                printf("  %11.2f / %5.2f / %6.1f", part[0], part[1], part[2]);
            }
            printf("\n");
        }
        /* Ansor's bar is a kernel speed reached within a tuning time. */
        printf("tuning time to each checkpoint (s, median of seeds):\n");
        for (int c = 0; c < ncheck; c++) {
            printf("%8d", checkpoints[c]);
            for (int pi = 0; pi < npol; pi++) {
                double x[MAX_SEEDS];
                for (int k = 0; k < nseeds; k++)
                    x[k] = runs[pi][k].secs[c];
                printf("  %28.0f", median(x, nseeds));
            }
            printf("\n");
        }
        printf("per round (mean s):");
        for (int pi = 0; pi < npol; pi++) {
            double s = 0, t = 0, me = 0;
            int rounds = 0, errors = 0;
            for (int k = 0; k < nseeds; k++) {
                s += runs[pi][k].search_s;
                t += runs[pi][k].train_s;
                me += runs[pi][k].measure_s;
                rounds += runs[pi][k].rounds;
                errors += runs[pi][k].errors;
            }
            if (rounds)
                printf("  %s: search %.2f, train %.2f, measure %.1f (%d errors)", policies[pi],
                       s / rounds, t / rounds, me / rounds, errors);
        }
        printf("\n");
        fflush(stdout);
        kt_workload_free(w);
    }
    kt_runner_free(cr);
    kt_builder_free(cb);
    kt_runner_free(r);
    kt_builder_free(b);
    return 0;
}
