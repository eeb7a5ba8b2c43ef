/* bench_scheduler: the task scheduler, the shared cost model and FamilySeer
 * on ResNet-18.
 *
 * Default mode: the built-in ResNet-18 (batch 1, NHWC; optionally its first
 * K tasks) with the Winograd alternative of each 3x3 stride-1 conv2d task, as
 * `ktune tune --network` extracts it for a CPU (--winograd 0: the direct
 * tasks only; a layer counts at the faster of its two tasks, as the task
 * scheduler counts it), tuned on this CPU with one thread (every candidate
 * built, run and checked against the reference by the local measurer) for a total of N
 * trials (48 per task by default: issue 25's network budget), once per
 * configuration (--confs, in this order by default):
 *   xgb          gradient + sketch.xgb (one model for all tasks, Ansor's
 *                random warm-up: warmup=random)
 *   xgb-model    gradient + sketch.xgb, warmup=model (the model picks the
 *                first rounds of the tasks it reaches late)
 *   random       gradient + sketch.random
 *   family-none  gradient + sketch.xgb.family-none (one model per task: what
 *                sketch.xgb was before it shared its model)
 *   family-op    gradient + sketch.xgb.family-op (FamilySeer)
 *   rr-xgb       round-robin + sketch.xgb
 * Prints the estimated total latency (sum of weight x best latency; "-"
 * while some task has no valid measurement) after 25%, 50% and 100% of the
 * trials, and each configuration's final latency against random's (issue
 * 25's goal for xgb: at most 0.85x). Then each task's best latency per
 * configuration, and the bound on those ratios: the total of each task's
 * best over all runs and, with --reference, over the stores given too (a
 * longer tuning of the same tasks, e.g. bench_layers' or ktune tune's with
 * 256 trials each): no search scores below that total against random's at
 * this budget unless it finds faster kernels than the reference holds.
 *
 *   bench_scheduler [--trials N | --trials-per-task 48] [--tasks K] [--winograd 1|0]
 *                   [--per-round 16]
 *                   [--confs xgb,xgb-model,random,family-none]
 *                   [--population 2048] [--search key=value,...]
 *                   [--min-repeat-ms 100] [--seed 0] [--timer wall|cpu]
 *                   [--reference STORE]...
 *   bench_scheduler --analytic
 *
 * --per-round defaults to 16, not TVM's 64: with 23 tasks and 1,000 trials,
 * 64 is reduced to 43 per round and the warm-up pass alone takes 989 trials,
 * leaving the strategies nothing to choose. A configuration's run takes
 * about an hour on one core at the full budget; --trials-per-task, --tasks
 * and --confs shorten it. --search sets every policy's parameters as a
 * job's --search-params does (after --population).
 *
 * --analytic: the former analytic mode. 24 synthetic tasks whose best cost
 * after r rounds follows base * (1 + amp * exp(-r / tau)), with weights and
 * similarity groups like a CNN's; prints, for the same budget, the estimated
 * total latency reached by each strategy (ratio against round-robin), the
 * trials each needs to come within 5% of the gradient strategy's final
 * latency, and the scheduler's own cost per decision (no search, no
 * measurement: a second or so). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_local.h"
#include "measure/measurer.h"
#include "net/net.h"
#include "scheduler/scheduler.h"
#include "search/search.h"
#include "store/store.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* ---- analytic mode ------------------------------------------------------------- */


#define NT 24
#define PER_ROUND 64
#define BUDGET (NT * PER_ROUND * 12)

typedef struct {
    double base[NT], amp[NT], tau[NT];
    int rounds[NT];
    double target;       /* latency to reach; 0 = none */
    int64_t trials;
    int64_t reached_at;  /* trials when target was first met; -1 never */
    const kt_scheduler_t *s;
} net_t;

static void net_init(net_t *n, kt_scheduler_task_t *tasks)
{
    static const char *tags[4] = {"conv2d_bias_relu", "conv2d_bias_add_relu", "dense", NULL};
    unsigned x = 12345;
    for (int t = 0; t < NT; t++) {
        x = x * 1103515245u + 12345u;
        double u = (double)(x >> 8) / (1u << 24);
        n->base[t] = 2e-5 * (1 + 9 * u);
        n->amp[t] = 2 + 30 * u * u;
        n->tau[t] = 1 + 8 * (1 - u);
        n->rounds[t] = 0;
        tasks[t].weight = 1 + (t % 5 == 0 ? 5 : t % 3);
        tasks[t].flops = n->base[t] * 2e12;   /* every task peaks near 2 TFLOPS */
        tasks[t].similarity_tag = tags[t % 4];
        tasks[t].workload_key = "bench";
    }
    n->trials = 0;
    n->reached_at = -1;
}

static int net_round(void *user, int task, int k, double *costs)
{
    net_t *n = user;
    int r = n->rounds[task]++;
    double best = n->base[task] * (1 + n->amp[task] * exp(-r / n->tau[task]));
    for (int i = 0; i < k; i++)
        costs[i] = best * (1 + 0.01 * i);
    n->trials += k;
    return k;
}

static void on_latency(void *user, int64_t trials, double elapsed, double est)
{
    (void)elapsed;
    net_t *n = user;
    if (n->reached_at < 0 && n->target > 0 && est <= n->target * 1.05)
        n->reached_at = trials;
}

static double run(kt_scheduler_strategy_t st, net_t *n, double target, double *secs,
                  int64_t *reached)
{
    kt_scheduler_task_t tasks[NT];
    net_init(n, tasks);
    n->target = target;
    kt_scheduler_config_t c;
    kt_scheduler_config_default(&c);
    c.strategy = st;
    c.num_measure_trials = BUDGET;
    c.num_measures_per_round = PER_ROUND;
    c.table_out = NULL;
    c.seed = 7;
    c.latency_log = on_latency;
    c.latency_user = n;
    kt_scheduler_t *s = kt_scheduler_new(tasks, NT, &c);
    if (!s)
        return NAN;
    kt_scheduler_tuner_t tu = {.search_round = net_round, .user = n};
    double t0 = kt_time_mono();
    kt_scheduler_run(s, &tu);
    *secs = kt_time_mono() - t0;
    *reached = n->reached_at;
    double est = kt_scheduler_estimated_latency(s);
    kt_scheduler_free(s);
    return est;
}

static int analytic_main(void)
{
    net_t n;
    double secs[3];
    int64_t reached[3];
    const kt_scheduler_strategy_t st[3] = {KT_SCHEDULER_ROUND_ROBIN, KT_SCHEDULER_SEQUENTIAL,
                                           KT_SCHEDULER_GRADIENT};
    double lat[3];
    /* First pass: the gradient's final latency is the target for all. */
    lat[2] = run(KT_SCHEDULER_GRADIENT, &n, 0, &secs[2], &reached[2]);
    for (int i = 0; i < 3; i++)
        lat[i] = run(st[i], &n, lat[2], &secs[i], &reached[i]);
    int rounds = BUDGET / PER_ROUND;
    printf("analytic network: %d tasks, budget %d trials (%d rounds of %d)\n", NT, BUDGET, rounds,
           PER_ROUND);
    for (int i = 0; i < 3; i++) {
        char when[32] = "never";
        if (reached[i] >= 0)
            snprintf(when, sizeof when, "%lld trials", (long long)reached[i]);
        printf("%-12s est. latency %.4f ms  (x%.3f of round-robin)  within 5%% of gradient: %s  "
               "%.2f us/decision\n",
               kt_scheduler_strategy_name(st[i]), lat[i] * 1e3, lat[i] / lat[0], when,
               secs[i] / rounds * 1e6);
    }
    return 0;
}

/* ---- ResNet-18 on this CPU ------------------------------------------------------- */

#define NCHECK 3
#define NCONF 6

static const struct {
    const char *key, *name;
    kt_scheduler_strategy_t strategy;
    const char *policy, *params;   /* params: kt_search_opts_set list on top of --search */
} confs[NCONF] = {
    {"xgb", "gradient + sketch.xgb", KT_SCHEDULER_GRADIENT, "sketch.xgb", "warmup=random"},
    {"xgb-model", "gradient + sketch.xgb warmup=model", KT_SCHEDULER_GRADIENT, "sketch.xgb",
     "warmup=model"},
    {"random", "gradient + sketch.random", KT_SCHEDULER_GRADIENT, "sketch.random", ""},
    {"family-none", "gradient + sketch.xgb.family-none", KT_SCHEDULER_GRADIENT,
     "sketch.xgb.family-none", ""},
    {"family-op", "gradient + sketch.xgb.family-op", KT_SCHEDULER_GRADIENT,
     "sketch.xgb.family-op", ""},
    {"rr-xgb", "round-robin + sketch.xgb", KT_SCHEDULER_ROUND_ROBIN, "sketch.xgb",
     "warmup=random"},
};

typedef struct {
    kt_search_family_t *fam;
    kt_measurer_t *measurer;
    const char *conf;
    int64_t check[NCHECK];   /* trial counts of the checkpoints */
    double lat[NCHECK];      /* estimated latency when first reached; NAN not yet */
    int errors;
    double *first;           /* per task: median cost (s) of its first round; NAN before */
    double *best;            /* per task: best cost (s) at the end; INFINITY none */
    int64_t *ntrials;        /* per task: trials it was given */
} real_t;

static void die(const char *what)
{
    fprintf(stderr, "bench_scheduler: %s: %s\n", what, kt_err_msg());
    exit(1);
}

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the finite values of v[0..n) (reordered); INFINITY when none. */
static double finite_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], double_cmp);
    while (n > 0 && !isfinite(v[n - 1]))
        n--;
    return n == 0 ? INFINITY : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int real_round(void *user, int task, int n, double *costs)
{
    real_t *r = user;
    kt_sched_state_t **st = NULL;
    kt_measure_result_t *res = NULL;
    int got = kt_search_family_one_round(r->fam, task, n, kt_search_measure_local, r->measurer,
                                         &st, &res);
    if (got < 0)
        return got;
    for (int i = 0; i < got; i++) {
        if (res[i].error_no == KT_MEASURE_NO_ERROR) {
            costs[i] = res[i].mean;
        } else {
            costs[i] = INFINITY;
            r->errors++;
            fprintf(stderr, "    task %d: candidate error %s: %.200s\n", task,
                    kt_measure_error_name(res[i].error_no),
                    res[i].error_msg ? res[i].error_msg : "");
        }
        kt_measure_result_clear(&res[i]);
        kt_sched_state_free(st[i]);
    }
    free(st);
    free(res);
    if (got > 0 && isnan(r->first[task])) {
        double *v = malloc((size_t)got * sizeof *v);
        if (!v)
            die("out of memory");
        memcpy(v, costs, (size_t)got * sizeof *v);
        r->first[task] = finite_median(v, got);
        free(v);
    }
    return got;
}

static void real_latency(void *user, int64_t trials, double elapsed, double est)
{
    real_t *r = user;
    for (int c = 0; c < NCHECK; c++)
        if (isnan(r->lat[c]) && trials >= r->check[c])
            r->lat[c] = est;
    fprintf(stderr, "  %s: %lld trials, %.0f s, estimated latency %.3f ms\n", r->conf,
            (long long)trials, elapsed, est * 1e3);
}

/* The operator tags of the compute stages joined by '_' (the tracker's
 * similarity tag). */
static char *similarity_tag(const kt_workload_t *w)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; i < kt_dag_num_stages(dag); i++) {
        const kt_stage_t *st = kt_dag_stage(dag, i);
        if (st->kind == KT_STAGE_COMPUTE && st->tag && *st->tag)
            kt_sbuf_printf(&b, "%s%s", b.len ? "_" : "", st->tag);
    }
    kt_sbuf_puts(&b, "");
    return kt_sbuf_take(&b);
}

static void print_lat(double v)
{
    if (isnan(v) || !isfinite(v))
        printf("  %10s", "-");
    else
        printf("  %10.3f", v * 1e3);
}

/* Each task's best valid latency (s) over the stores at refs[0..nrefs), or
 * INFINITY where none holds one; exits when a store cannot be opened. */
static double *reference_bests(const char *const *refs, int nrefs,
                               const kt_scheduler_task_t *tasks, int n)
{
    double *ref = malloc((size_t)n * sizeof *ref);
    if (!ref)
        die("out of memory");
    for (int i = 0; i < n; i++)
        ref[i] = INFINITY;
    for (int k = 0; k < nrefs; k++) {
        kt_store_t *st = kt_store_open(refs[k], KT_STORE_READONLY);
        if (!st)
            die(refs[k]);
        for (int i = 0; i < n; i++) {
            kt_record_list_t *l = NULL;
            int rc = kt_store_best(st, tasks[i].workload_key, "cpu", &l);
            if (rc == 0 && l->items[0].mean_cost < ref[i])
                ref[i] = l->items[0].mean_cost;
            else if (rc < 0 && rc != KT_ENOTFOUND)
                die(refs[k]);
            kt_record_list_free(l);
        }
        kt_store_close(st);
    }
    return ref;
}

/* Each task's best latency per configuration (and in the reference stores),
 * then the totals of the per-task minimums against random's final total:
 * the lowest "vs random" ratio these kernels allow. The totals are sched's
 * objective: each layer at the fastest of its task and its alternatives. */
static void print_bounds(const real_t *runs, const int *sel, int nsel, int rnd,
                         const kt_scheduler_task_t *tasks, const kt_net_tasks_t *ts,
                         const int *pick, const int *alt, const kt_scheduler_t *sched, int n,
                         const double *ref)
{
    printf("best latency (ms) of each task at the end and the trials it was given (weight x: "
           "the task appears x times)\n");
    printf("%-4s  %-6s  %-36s", "task", "weight", "layers");
    for (int ci = 0; ci < nsel; ci++)
        printf("  %10s  %6s", confs[sel[ci]].key, "trials");
    printf("%s\n", ref ? "   reference" : "");
    double *runs_m = malloc((size_t)n * sizeof *runs_m);
    double *all_m = malloc((size_t)n * sizeof *all_m);
    if (!runs_m || !all_m)
        die("out of memory");
    int from_runs = 0;
    for (int i = 0; i < n; i++) {
        const char *desc = ts->tasks[pick[i]].desc;
        char altname[40];
        if (alt[i] >= 0)   /* its desc is the direct task's, cut before "(Winograd)" */
            snprintf(altname, sizeof altname, "Winograd alternative of task %d", alt[i]);
        printf("%-4d  %-6g  %-36.36s", i, tasks[i].weight,
               alt[i] >= 0 ? altname : desc ? desc : "");
        double m = INFINITY;
        for (int ci = 0; ci < nsel; ci++) {
            double b = runs[sel[ci]].best[i];
            print_lat(b);
            printf("  %6lld", (long long)runs[sel[ci]].ntrials[i]);
            m = fmin(m, b);
        }
        if (ref)
            print_lat(ref[i]);
        printf("\n");
        runs_m[i] = m;
        if (ref && !(ref[i] < m))
            from_runs++;
        all_m[i] = ref ? fmin(m, ref[i]) : m;
    }
    double runs_tot = kt_scheduler_objective(sched, runs_m);
    double all_tot = kt_scheduler_objective(sched, all_m);
    free(runs_m);
    free(all_m);
    if (!isfinite(runs_tot) || rnd < 0)
        return;
    double r = runs[rnd].lat[NCHECK - 1];
    printf("each task's best over these runs: total %.3f ms, %.3fx of %s's final\n",
           runs_tot * 1e3, runs_tot / r, confs[rnd].name);
    if (ref)
        printf("each task's best over these runs and the reference stores (%d of %d tasks from "
               "the runs): total %.3f ms, %.3fx of %s's final: the lowest ratio a search reaches "
               "at this budget unless it finds kernels faster than these\n",
               from_runs, n, all_tot * 1e3, all_tot / r, confs[rnd].name);
}

/* A silent scheduler of the network's tasks (alt: their alternative_of) for
 * `trials` trials, with cfg's other fields; exits on error. */
static kt_scheduler_t *network_scheduler(const kt_scheduler_task_t *tasks, int n, const int *alt,
                                         int64_t trials, kt_scheduler_config_t *cfg)
{
    cfg->alternative_of = alt;
    cfg->num_measure_trials = trials;
    cfg->table_out = NULL;
    kt_scheduler_t *s = kt_scheduler_new(tasks, n, cfg);
    if (!s)
        die("scheduler");
    return s;
}

/* --confs: indices into confs, in the order given. */
static int parse_confs(const char *list, int *out)
{
    int n = 0;
    char *dup = kt_strdup(list);
    for (char *tok = dup ? strtok(dup, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        int c = 0;
        while (c < NCONF && strcmp(confs[c].key, tok) != 0)
            c++;
        if (c == NCONF || n == NCONF) {
            fprintf(stderr, "bench_scheduler: unknown or repeated configuration '%s' (xgb, "
                            "xgb-model, random, family-none, family-op, rr-xgb)\n", tok);
            exit(2);
        }
        out[n++] = c;
    }
    free(dup);
    return n;
}

int main(int argc, char **argv)
{
    int64_t trials = 0;
    int per_task = 48;
    const char *conf_list = "xgb,xgb-model,random,family-none", *search_params = NULL;
    int ntasks = 0, per_round = 16, population = 2048, min_repeat_ms = 100, winograd = 1;
    int timer = KT_RUNNER_TIMER_WALL;
    uint64_t seed = 0;
    enum { MAX_REFS = 8 };
    const char *refs[MAX_REFS];
    int nrefs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--analytic") == 0)
            return analytic_main();
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "usage: see the comment at the top of bench_scheduler.c\n");
            return 2;
        }
        if (strcmp(a, "--trials") == 0)
            trials = atoll(v);
        else if (strcmp(a, "--trials-per-task") == 0)
            per_task = atoi(v);
        else if (strcmp(a, "--confs") == 0)
            conf_list = v;
        else if (strcmp(a, "--search") == 0)
            search_params = kt_bench_search_option("bench_scheduler", v);
        else if (strcmp(a, "--tasks") == 0)
            ntasks = atoi(v);
        else if (strcmp(a, "--winograd") == 0)
            winograd = strcmp(v, "1") == 0 ? 1 : strcmp(v, "0") == 0 ? 0 : -1;
        else if (strcmp(a, "--per-round") == 0)
            per_round = atoi(v);
        else if (strcmp(a, "--population") == 0)
            population = atoi(v);
        else if (strcmp(a, "--min-repeat-ms") == 0)
            min_repeat_ms = atoi(v);
        else if (strcmp(a, "--timer") == 0)
            timer = kt_bench_timer("bench_scheduler", v);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--reference") == 0) {
            if (nrefs == MAX_REFS) {
                fprintf(stderr, "bench_scheduler: at most %d --reference stores\n", MAX_REFS);
                return 2;
            }
            refs[nrefs++] = v;
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    int sel[NCONF], nsel = parse_confs(conf_list, sel);
    if (trials < 0 || per_task < 1 || ntasks < 0 || per_round < 1 || population < 1 ||
        min_repeat_ms < 0 || nsel < 1 || winograd < 0) {
        fprintf(stderr, "bad options\n");
        return 2;
    }
    setenv("OMP_NUM_THREADS", "1", 1);

    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    kt_net_tasks_t *ts =
        net ? kt_net_extract_ex(net, KT_NET_NHWC, winograd ? KT_NET_EXTRACT_WINOGRAD : 0) : NULL;
    if (!ts)
        die("resnet-18");
    /* --tasks K: the first K direct tasks and their alternatives, which
     * kt_net_extract_ex lists after every direct task */
    int *pick = calloc((size_t)ts->ntasks, sizeof *pick);
    int *alt = calloc((size_t)ts->ntasks, sizeof *alt);
    if (!pick || !alt)
        die("out of memory");
    int n = 0;
    for (int i = 0; i < ts->ntasks; i++) {
        int d = ts->tasks[i].alt_of;
        if (ntasks == 0 || (d < 0 ? i : d) < ntasks) {
            alt[n] = d;   /* direct tasks keep their index: they come first */
            pick[n++] = i;
        }
    }
    if (trials == 0)
        trials = (int64_t)per_task * n;
    const kt_workload_t **wl = calloc((size_t)n, sizeof *wl);
    kt_scheduler_task_t *tasks = calloc((size_t)n, sizeof *tasks);
    char **tags = calloc((size_t)n, sizeof *tags);
    if (!wl || !tasks || !tags)
        die("out of memory");
    for (int i = 0; i < n; i++) {
        wl[i] = ts->tasks[pick[i]].wl;
        if (!(tags[i] = similarity_tag(wl[i])))
            die("out of memory");
        tasks[i] = (kt_scheduler_task_t){.weight = ts->tasks[pick[i]].weight,
                                         .flops = kt_workload_flops(wl[i]),
                                         .similarity_tag = tags[i],
                                         .workload_key = kt_workload_key(wl[i])};
    }

    double *ref = nrefs ? reference_bests(refs, nrefs, tasks, n) : NULL;
    kt_builder_t *b;
    kt_runner_t *r;
    kt_bench_local("bench_scheduler", min_repeat_ms, 1, timer, &b, &r);
    kt_sched_params_t sp;
    kt_sched_params_default(&sp);
    sp.num_cores = 1;

    real_t runs[NCONF];
    double secs[NCONF];
    int64_t done[NCONF];
    for (int ci = 0; ci < nsel; ci++) {
        int c = sel[ci];
        real_t *x = &runs[c];
        memset(x, 0, sizeof *x);
        x->conf = confs[c].name;
        for (int k = 0; k < NCHECK; k++) {
            x->check[k] = trials * (k + 1 == NCHECK ? 4 : k + 1) / 4;
            x->lat[k] = NAN;
        }
        if (!(x->first = malloc((size_t)n * sizeof *x->first)) ||
            !(x->best = malloc((size_t)n * sizeof *x->best)) ||
            !(x->ntrials = calloc((size_t)n, sizeof *x->ntrials)))
            die("out of memory");
        for (int i = 0; i < n; i++)
            x->first[i] = NAN;
        kt_search_opts_t so;
        kt_search_opts_default(&so);
        so.policy = confs[c].policy;
        so.seed = seed;
        so.evolutionary_search_population = population;
        if ((search_params && kt_search_opts_set(&so, search_params)) ||
            kt_search_opts_set(&so, confs[c].params))
            die("--search");
        if (!(x->fam = kt_search_family_new(wl, n, &sp, &so)))
            die(confs[c].name);
        if (!(x->measurer = kt_measurer_new(b, r, -1)))
            die("measurer");
        kt_scheduler_config_t cfg;
        kt_scheduler_config_default(&cfg);
        cfg.strategy = confs[c].strategy;
        cfg.num_measures_per_round = per_round;
        cfg.seed = seed;
        cfg.latency_log = real_latency;
        cfg.latency_user = x;
        kt_scheduler_t *s = network_scheduler(tasks, n, alt, trials, &cfg);
        fprintf(stderr, "%s: %d tasks, %lld trials, %d per round\n", confs[c].name, n,
                (long long)trials, kt_scheduler_measures_per_round(s));
        kt_scheduler_tuner_t tu = {.search_round = real_round, .user = x};
        double t0 = kt_time_mono();
        if (kt_scheduler_run(s, &tu) < 0)
            die(confs[c].name);
        secs[c] = kt_time_mono() - t0;
        done[c] = kt_scheduler_total_trials(s);
        for (int k = 0; k < NCHECK; k++)   /* the run ended early: its final figure */
            if (isnan(x->lat[k]))
                x->lat[k] = kt_scheduler_estimated_latency(s);
        if (*kt_scheduler_finish_message(s))
            fprintf(stderr, "%s: %s\n", confs[c].name, kt_scheduler_finish_message(s));
        for (int i = 0; i < n; i++) {
            kt_scheduler_task_state_t st;
            int ok = kt_scheduler_task_state(s, i, &st) == 0;
            x->best[i] = ok && st.best_cost < KT_SCHEDULER_VALID_COST_LIMIT ? st.best_cost
                                                                          : INFINITY;
            x->ntrials[i] = ok ? st.trials : 0;
        }
        kt_scheduler_free(s);
        kt_measurer_free(x->measurer);
        kt_search_family_free(x->fam);
    }

    printf("ResNet-18 (batch 1, NHWC, %d of %d tasks, %s) on this CPU, one thread: estimated "
           "total latency (ms) after N trials, %d per round at most, population %d, seed "
           "%llu%s%s\n",
           n, ts->ntasks,
           winograd ? "3x3 stride-1 convolutions with their Winograd alternatives"
                    : "direct convolutions only",
           per_round, population, (unsigned long long)seed,
           search_params ? ", search params " : "", search_params ? search_params : "");
    int rnd = -1;   /* sketch.random's run: the baseline of the ratios */
    for (int ci = 0; ci < nsel; ci++)
        if (strcmp(confs[sel[ci]].key, "random") == 0)
            rnd = sel[ci];
    printf("%-38s", "configuration");
    for (int k = 0; k < NCHECK; k++)
        printf("  %10lld", (long long)runs[sel[0]].check[k]);
    printf("  %8s  %8s  %6s%s\n", "trials", "time (s)", "errors", rnd >= 0 ? "  vs random" : "");
    for (int ci = 0; ci < nsel; ci++) {
        int c = sel[ci];
        printf("%-38s", confs[c].name);
        for (int k = 0; k < NCHECK; k++)
            print_lat(runs[c].lat[k]);
        printf("  %8lld  %8.0f  %6d", (long long)done[c], secs[c], runs[c].errors);
        if (rnd >= 0)
            printf("  %9.3fx", runs[c].lat[NCHECK - 1] / runs[rnd].lat[NCHECK - 1]);
        printf("\n");
    }
    if (rnd >= 0)
        printf("(vs random: final estimated latency against gradient + sketch.random's; issue 25's "
               "goal for sketch.xgb at 48 trials per task: at most 0.85x)\n");
    /* The warm-up choice shows in the first rounds: the model (warmup=model)
     * or chance (warmup=random) picks them. */
    int base = rnd >= 0 ? rnd : sel[0];
    printf("first rounds: geometric mean over tasks of the median latency of a task's first "
           "round, against %s's (tasks with a valid first round in both)\n", confs[base].name);
    for (int ci = 0; ci < nsel; ci++) {
        int c = sel[ci], k = 0;
        double lsum = 0;
        for (int i = 0; i < n; i++) {
            double a = runs[c].first[i], b0 = runs[base].first[i];
            if (isfinite(a) && isfinite(b0)) {
                lsum += log(a / b0);
                k++;
            }
        }
        printf("%-38s  %9.3fx  (%d tasks)\n", confs[c].name, k ? exp(lsum / k) : NAN, k);
    }
    kt_scheduler_config_t ecfg;   /* a scheduler only to evaluate its objective */
    kt_scheduler_config_default(&ecfg);
    kt_scheduler_t *sched = network_scheduler(tasks, n, alt, trials, &ecfg);
    print_bounds(runs, sel, nsel, rnd, tasks, ts, pick, alt, sched, n, ref);
    kt_scheduler_free(sched);
    free(ref);
    for (int ci = 0; ci < nsel; ci++) {
        free(runs[sel[ci]].first);
        free(runs[sel[ci]].best);
        free(runs[sel[ci]].ntrials);
    }
    kt_runner_free(r);
    kt_builder_free(b);
    for (int i = 0; i < n; i++)
        free(tags[i]);
    free(tags);
    free(tasks);
    free(wl);
    free(pick);
    free(alt);
    kt_net_tasks_free(ts);
    kt_net_free(net);
    return 0;
}
