#include "scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/log.h"
#include "util/sbuf.h"
#include "util/util.h"

/* TVM's derive_similarity_tag: flop counts within a factor of the golden
 * ratio land in the same group. */
#define SIMILARITY_LOG_BASE 1.618
/* Step of the finite-difference derivative of a custom objective (TVM's),
 * scaled up for large costs so that it does not vanish below their ulp. */
#define OBJECTIVE_DELTA 1e-7
/* TVM's "no bound" for the forward estimate of a task without similar tasks. */
#define NO_FORWARD_BOUND 1e30

/* Salts that keep the random draws of one pick independent. */
#define SALT_EPS 1
#define SALT_EPS_PICK 2
#define SALT_TIE_PICK 3

typedef struct {
    double weight;
    double flops;
    char *key;
    int group;                 /* similarity group, -1 = none */
    int left_group;
    int rounds;
    int64_t trials;
    double best;               /* KT_SCHEDULER_NO_COST until a valid measurement */
    int best_round;            /* round (1-based) that last improved best; 0 = none */
    double *hist;              /* best after each of the last hist_len rounds */
    int hist_len, hist_cap;
    kt_scheduler_task_status_t status;
    int in_flight;
    int requested;             /* candidates asked for in the outstanding round */
} task_t;

struct kt_scheduler {
    pthread_mutex_t mu;
    kt_scheduler_config_t cfg;
    int n;
    task_t *tasks;
    int n_groups;
    int per_round;
    int n_in_flight;
    int started;               /* first pick made: restores are closed */
    double tic;                /* kt_time_mono() at the first pick */
    double elapsed_base;       /* restored seconds of earlier runs */
    int last_pick;             /* "Next ID" of snapshots; -1 before any */
    kt_scheduler_end_t end;
    char *finish_msg;
    double *scratch;           /* n costs for objective evaluations */
    double *group_best;        /* per group: best FLOPS among members */
    int *group_size;
    int *alt;                  /* per task: the task it is an alternative of, or -1; NULL: none */
};

static const char *status_name(kt_scheduler_task_status_t st)
{
    switch (st) {
    case KT_SCHEDULER_EXHAUSTED: return "exhausted";
    case KT_SCHEDULER_EARLY_STOPPED: return "early-stopped";
    default: return "live";
    }
}

static int valid_cost(double c)
{
    return isfinite(c) && c > 0 && c < KT_SCHEDULER_VALID_COST_LIMIT;
}

static void lock(const kt_scheduler_t *s) { pthread_mutex_lock((pthread_mutex_t *)&s->mu); }
static void unlock(const kt_scheduler_t *s) { pthread_mutex_unlock((pthread_mutex_t *)&s->mu); }

/* --- configuration -------------------------------------------------- */

void kt_scheduler_config_default(kt_scheduler_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->strategy = KT_SCHEDULER_GRADIENT;
    cfg->num_measure_trials = 0;
    cfg->num_measures_per_round = KT_SCHEDULER_DEFAULT_PER_ROUND;
    cfg->early_stopping = -1;
    cfg->eps_random = 0.05;
    cfg->alpha = 0.2;
    cfg->beta = 2.0;
    cfg->gamma = 0.5;
    cfg->backward_window_size = 3;
    cfg->seed = 0;
    cfg->max_in_flight = 1;
    cfg->table_out = stdout;
}

int kt_scheduler_strategy_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "gradient"))
        return KT_SCHEDULER_GRADIENT;
    if (!strcmp(name, "round-robin"))
        return KT_SCHEDULER_ROUND_ROBIN;
    if (!strcmp(name, "sequential"))
        return KT_SCHEDULER_SEQUENTIAL;
    return -1;
}

const char *kt_scheduler_strategy_name(kt_scheduler_strategy_t st)
{
    switch (st) {
    case KT_SCHEDULER_GRADIENT: return "gradient";
    case KT_SCHEDULER_ROUND_ROBIN: return "round-robin";
    case KT_SCHEDULER_SEQUENTIAL: return "sequential";
    }
    return NULL;
}

static int check_config(const kt_scheduler_config_t *c, int n)
{
    if (!kt_scheduler_strategy_name(c->strategy))
        return kt_err_set(KT_EINVAL, "unknown task scheduler strategy %d", (int)c->strategy);
    if (c->num_measures_per_round < 1)
        return kt_err_set(KT_EINVAL, "num_measures_per_round must be >= 1 (got %d)",
                          c->num_measures_per_round);
    if (c->num_measure_trials < n)
        return kt_err_set(KT_EINVAL,
                          "num_measure_trials (%lld) is smaller than the number of tasks (%d): "
                          "every task must be measured at least once, so allow at least %d trials",
                          (long long)c->num_measure_trials, n, n);
    if (c->early_stopping < -1)
        return kt_err_set(KT_EINVAL, "early_stopping must be -1 (off) or >= 0 (got %d)",
                          c->early_stopping);
    if (!(c->eps_random >= 0 && c->eps_random <= 1))
        return kt_err_set(KT_EINVAL, "eps_random must be in [0, 1] (got %g)", c->eps_random);
    if (!(c->alpha >= 0 && c->alpha <= 1))
        return kt_err_set(KT_EINVAL, "alpha must be in [0, 1] (got %g)", c->alpha);
    if (!(c->beta > 0) || !isfinite(c->beta))
        return kt_err_set(KT_EINVAL, "beta must be positive (got %g)", c->beta);
    if (!isfinite(c->gamma))
        return kt_err_set(KT_EINVAL, "gamma must be finite");
    if (c->backward_window_size < 1)
        return kt_err_set(KT_EINVAL, "backward_window_size must be >= 1 (got %d)",
                          c->backward_window_size);
    if (c->max_in_flight < 1)
        return kt_err_set(KT_EINVAL, "max_in_flight must be >= 1 (got %d)", c->max_in_flight);
    for (int i = 0; c->alternative_of && i < n; i++) {
        int a = c->alternative_of[i];
        if (a != -1 && (a < 0 || a >= n || a == i || c->alternative_of[a] != -1))
            return kt_err_set(KT_EINVAL, "alternative_of[%d] = %d is not -1 or another task "
                              "that is no alternative itself", i, a);
    }
    return 0;
}

/* --- create / destroy ------------------------------------------------ */

/* TVM's group key: the operator tags, then floor(log_1.618(flops + 1)). */
static char *group_key(const char *tag, double flops)
{
    if (!tag || !*tag)
        return NULL;
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    long bucket = (long)floor(log(flops + 1.0) / log(SIMILARITY_LOG_BASE));
    size_t len = strlen(tag);
    kt_sbuf_printf(&b, "%s%s%ld", tag, tag[len - 1] == '_' ? "" : "_", bucket);
    return kt_sbuf_take(&b);
}

kt_scheduler_t *kt_scheduler_new(const kt_scheduler_task_t *tasks, int n_tasks,
                                 const kt_scheduler_config_t *cfg)
{
    if (n_tasks <= 0 || !tasks) {
        kt_err_set(KT_EINVAL, "task scheduler: no tasks to tune");
        return NULL;
    }
    if (!cfg) {
        kt_err_set(KT_EINVAL, "task scheduler: no configuration");
        return NULL;
    }
    if (check_config(cfg, n_tasks) < 0) {
        kt_err_prefix("task scheduler");
        return NULL;
    }
    for (int i = 0; i < n_tasks; i++) {
        if (!(tasks[i].weight >= 0) || !isfinite(tasks[i].weight)) {
            kt_err_set(KT_EINVAL, "task scheduler: task %d has an invalid weight %g", i,
                       tasks[i].weight);
            return NULL;
        }
        if (!(tasks[i].flops >= 0) || !isfinite(tasks[i].flops)) {
            kt_err_set(KT_EINVAL, "task scheduler: task %d has an invalid flop count %g", i,
                       tasks[i].flops);
            return NULL;
        }
    }

    kt_scheduler_t *s = calloc(1, sizeof *s);
    if (!s) {
        kt_err_set(KT_ENOMEM, "task scheduler: out of memory");
        return NULL;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    /* Recursive so callbacks (run under the lock) may use the accessors. */
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    s->cfg = *cfg;
    s->n = n_tasks;
    s->last_pick = -1;
    s->tasks = calloc((size_t)n_tasks, sizeof *s->tasks);
    s->scratch = calloc((size_t)n_tasks, sizeof *s->scratch);
    s->group_best = calloc((size_t)n_tasks, sizeof *s->group_best);
    s->group_size = calloc((size_t)n_tasks, sizeof *s->group_size);
    if (cfg->alternative_of && (s->alt = malloc((size_t)n_tasks * sizeof *s->alt)))
        memcpy(s->alt, cfg->alternative_of, (size_t)n_tasks * sizeof *s->alt);
    s->cfg.alternative_of = NULL;   /* the caller's array need not outlive the call */
    char **keys = calloc((size_t)n_tasks, sizeof *keys);
    if (!s->tasks || !s->scratch || !s->group_best || !s->group_size || !keys ||
        (cfg->alternative_of && !s->alt))
        goto oom;

    /* Every task gets at least one round: TVM lowers the round size rather
     * than leave a task unmeasured. */
    int64_t share = cfg->num_measure_trials / n_tasks;
    s->per_round = share < cfg->num_measures_per_round ? (int)share : cfg->num_measures_per_round;

    for (int i = 0; i < n_tasks; i++) {
        task_t *t = &s->tasks[i];
        t->weight = tasks[i].weight;
        t->flops = tasks[i].flops;
        t->best = KT_SCHEDULER_NO_COST;
        t->group = -1;
        if (!(t->key = kt_strdup(tasks[i].workload_key ? tasks[i].workload_key : "")))
            goto oom;
        if (tasks[i].similarity_tag && *tasks[i].similarity_tag) {
            char *k = group_key(tasks[i].similarity_tag, t->flops);
            if (!k)
                goto oom;
            int g = 0;
            while (g < s->n_groups && strcmp(keys[g], k))
                g++;
            if (g == s->n_groups)
                keys[s->n_groups++] = k;
            else
                free(k);
            t->group = g;
        }
    }
    for (int g = 0; g < s->n_groups; g++)
        free(keys[g]);
    free(keys);
    return s;

oom:
    if (keys) {
        for (int g = 0; g < s->n_groups; g++)
            free(keys[g]);
        free(keys);
    }
    kt_scheduler_free(s);
    kt_err_set(KT_ENOMEM, "task scheduler: out of memory");
    return NULL;
}

void kt_scheduler_free(kt_scheduler_t *s)
{
    if (!s)
        return;
    if (s->tasks) {
        for (int i = 0; i < s->n; i++) {
            free(s->tasks[i].key);
            free(s->tasks[i].hist);
        }
    }
    free(s->tasks);
    free(s->scratch);
    free(s->group_best);
    free(s->group_size);
    free(s->alt);
    free(s->finish_msg);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* --- helpers over the task table ------------------------------------ */

static int64_t total_trials(const kt_scheduler_t *s)
{
    int64_t ct = 0;
    for (int i = 0; i < s->n; i++)
        ct += s->tasks[i].trials;
    return ct;
}

static double elapsed(const kt_scheduler_t *s)
{
    return s->elapsed_base + (s->started ? kt_time_mono() - s->tic : 0.0);
}

/* The member of task i's alternatives group (i and the tasks that are its
 * alternatives) with the lowest cost; i itself on ties. */
static int group_fastest(const kt_scheduler_t *s, const double *costs, int i)
{
    int best = i;
    for (int j = 0; s->alt && j < s->n; j++)
        if (s->alt[j] == i && costs[j] < costs[best])
            best = j;
    return best;
}

static double objective(const kt_scheduler_t *s, const double *costs)
{
    if (s->cfg.objective)
        return s->cfg.objective(costs, s->n, s->cfg.objective_user);
    double sum = 0;
    for (int i = 0; i < s->n; i++)
        if (!s->alt || s->alt[i] < 0)
            sum += s->tasks[i].weight * costs[group_fastest(s, costs, i)];
    return sum;
}

static double current_score(const kt_scheduler_t *s)
{
    for (int i = 0; i < s->n; i++)
        s->scratch[i] = s->tasks[i].best;
    return objective(s, s->scratch);
}

static double estimated_latency(const kt_scheduler_t *s)
{
    double score = current_score(s);   /* fills s->scratch */
    for (int i = 0; i < s->n; i++)
        if ((!s->alt || s->alt[i] < 0) && !valid_cost(s->scratch[group_fastest(s, s->scratch, i)]))
            return INFINITY;
    return score;
}

static int hist_push(task_t *t, double v)
{
    if (t->hist_len == t->hist_cap) {
        int cap = t->hist_cap ? 2 * t->hist_cap : 16;
        double *h = realloc(t->hist, (size_t)cap * sizeof *h);
        if (!h)
            return kt_err_set(KT_ENOMEM, "task scheduler: out of memory");
        t->hist = h;
        t->hist_cap = cap;
    }
    t->hist[t->hist_len++] = v;
    return 0;
}

/* Uniform [0, 1) draw that depends only on (seed, pick number, salt), so a
 * resumed run repeats the choices of an uninterrupted one. */
static uint64_t draw_bits(const kt_scheduler_t *s, uint64_t pick, uint64_t salt)
{
    uint64_t in[3] = {s->cfg.seed, pick, salt};
    return kt_hash64(in, sizeof in);
}

static double draw_unit(const kt_scheduler_t *s, uint64_t pick, uint64_t salt)
{
    return (double)(draw_bits(s, pick, salt) >> 11) * 0x1p-53;
}

/* Rounds started so far, restored ones included: the index of this pick. */
static uint64_t pick_number(const kt_scheduler_t *s)
{
    uint64_t p = (uint64_t)s->n_in_flight;
    for (int i = 0; i < s->n; i++)
        p += (uint64_t)s->tasks[i].rounds;
    return p;
}

static int pickable(const task_t *t)
{
    return t->status == KT_SCHEDULER_LIVE && !t->in_flight;
}

/* The n-th (0-based) pickable task. */
static int nth_pickable(const kt_scheduler_t *s, uint64_t k)
{
    for (int i = 0; i < s->n; i++)
        if (pickable(&s->tasks[i]) && k-- == 0)
            return i;
    return -1;
}

static int count_pickable(const kt_scheduler_t *s)
{
    int c = 0;
    for (int i = 0; i < s->n; i++)
        c += pickable(&s->tasks[i]);
    return c;
}

/* Best FLOPS and member count of each similarity group (expelled tasks are
 * no longer members; dead and in-flight ones still are, as in TVM). */
static void compute_groups(kt_scheduler_t *s)
{
    for (int g = 0; g < s->n_groups; g++) {
        s->group_best[g] = 0;
        s->group_size[g] = 0;
    }
    for (int i = 0; i < s->n; i++) {
        const task_t *t = &s->tasks[i];
        if (t->group < 0 || t->left_group)
            continue;
        double f = t->flops / t->best;
        if (s->group_size[t->group] == 0 || f > s->group_best[t->group])
            s->group_best[t->group] = f;
        s->group_size[t->group]++;
    }
}

/* d objective / d latency_i: exact for the weighted sum; TVM's forward
 * difference for a custom objective. s->scratch holds the best costs and
 * `base` their objective (set up once per pick by pick_gradient). */
static double chain_gradient(kt_scheduler_t *s, int i, double base)
{
    if (!s->cfg.objective && !s->alt)
        return s->tasks[i].weight;
    if (!s->cfg.objective) {
        /* Only the fastest of a group counts in the sum. */
        int head = s->alt[i] < 0 ? i : s->alt[i];
        return group_fastest(s, s->scratch, head) == i ? s->tasks[head].weight : 0.0;
    }
    double keep = s->scratch[i];
    double delta = OBJECTIVE_DELTA * fmax(1.0, keep);
    s->scratch[i] = keep - delta;
    double moved = objective(s, s->scratch);
    s->scratch[i] = keep;
    return (base - moved) / delta;
}

/* TVM's gradient of the objective w.r.t. the time spent on task i. */
static double task_gradient(kt_scheduler_t *s, int i, double base)
{
    const task_t *t = &s->tasks[i];
    double chain = chain_gradient(s, i, base);

    /* Backward: how much the best cost moved over the last `window` rounds. */
    int w = s->cfg.backward_window_size;
    double backward = 0;
    if (t->hist_len - 1 - w >= 0)
        backward = (t->hist[t->hist_len - 1] - t->hist[t->hist_len - 1 - w]) / w;

    /* Forward: optimistic next cost, either 1/rounds of progress or the
     * speed of the best similar task scaled by beta, whichever is lower. */
    double next1 = t->rounds > 0 ? t->best - t->best / t->rounds : 0.0;
    double next2 = s->cfg.beta * NO_FORWARD_BOUND;
    if (t->group >= 0 && !t->left_group && s->group_size[t->group] > 1 &&
        s->group_best[t->group] > 0)
        next2 = s->cfg.beta * t->flops / s->group_best[t->group];
    double forward = fmin(next1, next2) - t->best;

    return chain * (s->cfg.alpha * backward + (1 - s->cfg.alpha) * forward);
}

static int pick_gradient(kt_scheduler_t *s, uint64_t pick)
{
    int live = count_pickable(s);
    if (s->cfg.eps_random > 0 && draw_unit(s, pick, SALT_EPS) < s->cfg.eps_random)
        return nth_pickable(s, draw_bits(s, pick, SALT_EPS_PICK) % (uint64_t)live);

    compute_groups(s);
    double base = s->cfg.objective || s->alt ? current_score(s) : 0;   /* fills s->scratch */
    int best = -1;
    double gmin = INFINITY, gmax = -INFINITY;
    for (int i = 0; i < s->n; i++) {
        if (!pickable(&s->tasks[i]))
            continue;
        double g = task_gradient(s, i, base);
        if (g < gmin) {
            gmin = g;
            best = i;
        }
        if (g > gmax)
            gmax = g;
    }
    /* No task stands out (all gradients equal, or NaN from a custom
     * objective): pick at random. */
    if (best < 0 || gmax == gmin)
        return nth_pickable(s, draw_bits(s, pick, SALT_TIE_PICK) % (uint64_t)live);
    return best;
}

/* Cycling over live tasks equals taking the live task with the fewest
 * rounds, lowest id first; that form needs no cursor to survive a resume. */
static int pick_round_robin(const kt_scheduler_t *s)
{
    int best = -1;
    for (int i = 0; i < s->n; i++)
        if (pickable(&s->tasks[i]) && (best < 0 || s->tasks[i].rounds < s->tasks[best].rounds))
            best = i;
    return best;
}

/* TVM's sequential allocation: the current task is the first one that is
 * alive and has not used (budget - trials of earlier tasks) / (tasks left).
 * Returns the task, -1 when the sequence is over, -2 when the current task
 * is in flight. */
static int pick_sequential(const kt_scheduler_t *s)
{
    int64_t begin = 0;
    for (int i = 0; i < s->n; i++) {
        const task_t *t = &s->tasks[i];
        double allocated = (double)(s->cfg.num_measure_trials - begin) / (s->n - i);
        if (t->status == KT_SCHEDULER_LIVE && (double)t->trials < allocated)
            return t->in_flight ? -2 : i;
        begin += t->trials;
    }
    return -1;
}

static void finish(kt_scheduler_t *s, kt_scheduler_end_t why)
{
    if (s->end != KT_SCHEDULER_RUNNING)
        return;
    s->end = why;
    long long ct = (long long)total_trials(s), budget = (long long)s->cfg.num_measure_trials;
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    switch (why) {
    case KT_SCHEDULER_END_ALL_DEAD:
        kt_sbuf_printf(&b,
                       "Task scheduler: all %d tasks are dead (no new candidates or no "
                       "improvement), tuning ends after %lld of %lld trials",
                       s->n, ct, budget);
        break;
    case KT_SCHEDULER_END_SEQUENCE:
        kt_sbuf_printf(&b,
                       "Task scheduler: every task had its sequential share, tuning ends after "
                       "%lld of %lld trials",
                       ct, budget);
        break;
    default:
        kt_sbuf_printf(&b, "Task scheduler: the budget of %lld trials is spent (%lld trials)",
                       budget, ct);
        break;
    }
    s->finish_msg = kt_sbuf_take(&b);
    if (s->finish_msg) {
        KT_INFO("%s", s->finish_msg);
        if (s->cfg.table_out) {
            fprintf(s->cfg.table_out, "%s\n", s->finish_msg);
            fflush(s->cfg.table_out);
        }
    }
}

/* --- drive ----------------------------------------------------------- */

static int next_locked(kt_scheduler_t *s, int *task, int *n)
{
    if (s->end != KT_SCHEDULER_RUNNING)
        return KT_SCHEDULER_DONE;
    if (s->n_in_flight >= s->cfg.max_in_flight)
        return KT_SCHEDULER_BUSY;

    int pick = -1, warmup = 0;
    /* Warm-up: one round for every task that has none (TVM runs it before
     * looking at the budget; the budget always covers it on a fresh run). */
    if (s->cfg.strategy != KT_SCHEDULER_SEQUENTIAL) {
        for (int i = 0; i < s->n && pick < 0; i++)
            if (pickable(&s->tasks[i]) && s->tasks[i].rounds == 0)
                pick = i, warmup = 1;
    }
    if (pick < 0) {
        int live = 0;
        for (int i = 0; i < s->n; i++)
            live += s->tasks[i].status == KT_SCHEDULER_LIVE;
        if (live == 0) {
            if (s->n_in_flight)
                return KT_SCHEDULER_BUSY;
            finish(s, KT_SCHEDULER_END_ALL_DEAD);
            return KT_SCHEDULER_DONE;
        }
        /* Trials promised to outstanding rounds count against the budget. */
        int64_t committed = total_trials(s);
        for (int i = 0; i < s->n; i++)
            if (s->tasks[i].in_flight)
                committed += s->tasks[i].requested;
        if (committed >= s->cfg.num_measure_trials) {
            if (s->n_in_flight)
                return KT_SCHEDULER_BUSY;
            finish(s, KT_SCHEDULER_END_BUDGET);
            return KT_SCHEDULER_DONE;
        }
        if (count_pickable(s) == 0)
            return KT_SCHEDULER_BUSY;
        switch (s->cfg.strategy) {
        case KT_SCHEDULER_GRADIENT:
            pick = pick_gradient(s, pick_number(s));
            break;
        case KT_SCHEDULER_ROUND_ROBIN:
            pick = pick_round_robin(s);
            break;
        case KT_SCHEDULER_SEQUENTIAL:
            pick = pick_sequential(s);
            if (pick == -2)
                return KT_SCHEDULER_BUSY;
            if (pick < 0) {
                if (s->n_in_flight)
                    return KT_SCHEDULER_BUSY;
                finish(s, KT_SCHEDULER_END_SEQUENCE);
                return KT_SCHEDULER_DONE;
            }
            break;
        }
        if (pick < 0)
            return kt_err_set(KT_EINTERNAL, "task scheduler: no task picked among live ones");
    }

    if (!s->started) {
        s->started = 1;
        s->tic = kt_time_mono();
    }
    task_t *t = &s->tasks[pick];
    t->in_flight = 1;
    t->requested = s->per_round;
    s->n_in_flight++;
    s->last_pick = pick;
    *task = pick;
    *n = s->per_round;
    KT_DEBUG("task scheduler: task %d%s %s", pick, warmup ? " (warm-up)" : "", t->key);

    if (s->cfg.table_out)
        kt_scheduler_print_table(s, s->cfg.table_out, pick);
    if (s->cfg.pre_round)
        s->cfg.pre_round(s->cfg.callback_user, s, pick);
    return 0;
}

int kt_scheduler_next(kt_scheduler_t *s, int *task, int *n)
{
    if (!s || !task || !n)
        return kt_err_set(KT_EINVAL, "kt_scheduler_next: NULL argument");
    lock(s);
    int r = next_locked(s, task, n);
    unlock(s);
    return r;
}

/* TVM's adjust_similarity_group: a task tuned well beyond the rest of its
 * group that still runs below best/beta of the group's speed is not really
 * similar, so it stops borrowing their speed as its forward bound. */
static void adjust_group(kt_scheduler_t *s, int i)
{
    task_t *t = &s->tasks[i];
    if (t->group < 0 || t->left_group)
        return;
    double best_flops = 0;
    int members = 0, max_other_rounds = 0;
    for (int j = 0; j < s->n; j++) {
        const task_t *u = &s->tasks[j];
        if (u->group != t->group || u->left_group)
            continue;
        members++;
        double f = u->flops / u->best;
        if (f > best_flops)
            best_flops = f;
        if (j != i && u->rounds > max_other_rounds)
            max_other_rounds = u->rounds;
    }
    if (members <= 1)
        return;
    double cur = t->flops / t->best;
    if (cur < best_flops / s->cfg.beta &&
        t->rounds > KT_SCHEDULER_GROUP_LEAVE_ROUNDS + max_other_rounds) {
        t->left_group = 1;
        KT_DEBUG("task scheduler: task %d leaves its similarity group", i);
    }
}

static int early_stopped(const kt_scheduler_t *s, const task_t *t)
{
    if (s->cfg.early_stopping < 0)
        return 0;
    int64_t no_change = (int64_t)(t->rounds - t->best_round) * s->per_round;
    return no_change > s->cfg.early_stopping;
}

int kt_scheduler_complete(kt_scheduler_t *s, int task, const double *costs, int n_costs)
{
    if (!s)
        return kt_err_set(KT_EINVAL, "kt_scheduler_complete: NULL scheduler");
    if (n_costs < 0 || (n_costs > 0 && !costs))
        return kt_err_set(KT_EINVAL, "kt_scheduler_complete: bad cost list");
    lock(s);
    if (task < 0 || task >= s->n) {
        unlock(s);
        return kt_err_set(KT_EINVAL, "kt_scheduler_complete: no task %d", task);
    }
    task_t *t = &s->tasks[task];
    if (!t->in_flight) {
        unlock(s);
        return kt_err_set(KT_ESTATE, "kt_scheduler_complete: task %d has no round in flight", task);
    }
    if (hist_push(t, t->best) < 0) {   /* reserve the slot first: nothing can fail later */
        unlock(s);
        return kt_err_code();
    }
    t->hist_len--;
    t->in_flight = 0;
    s->n_in_flight--;
    t->rounds++;
    for (int k = 0; k < n_costs; k++) {
        if (valid_cost(costs[k]) && costs[k] < t->best) {
            t->best = costs[k];
            t->best_round = t->rounds;
        }
    }
    if (n_costs == 0)
        t->status = KT_SCHEDULER_EXHAUSTED;
    else if (early_stopped(s, t))
        t->status = KT_SCHEDULER_EARLY_STOPPED;
    t->hist[t->hist_len++] = t->best;
    t->trials += n_costs;
    /* TVM adjusts groups only after strategy picks; after a warm-up round
     * the rule cannot fire (the task has one round), so no need to tell. */
    adjust_group(s, task);
    if (t->status != KT_SCHEDULER_LIVE)
        KT_INFO("task scheduler: task %d is %s after %d rounds", task, status_name(t->status),
                t->rounds);

    if (s->cfg.post_round)
        s->cfg.post_round(s->cfg.callback_user, s, task);
    if (s->cfg.latency_log)
        s->cfg.latency_log(s->cfg.latency_user, total_trials(s), elapsed(s), estimated_latency(s));
    unlock(s);
    return 0;
}

int kt_scheduler_abort(kt_scheduler_t *s, int task)
{
    if (!s)
        return kt_err_set(KT_EINVAL, "kt_scheduler_abort: NULL scheduler");
    lock(s);
    if (task < 0 || task >= s->n || !s->tasks[task].in_flight) {
        unlock(s);
        return kt_err_set(KT_ESTATE, "kt_scheduler_abort: task %d has no round in flight", task);
    }
    s->tasks[task].in_flight = 0;
    s->n_in_flight--;
    unlock(s);
    return 0;
}

int kt_scheduler_run(kt_scheduler_t *s, const kt_scheduler_tuner_t *tuner)
{
    if (!s || !tuner || !tuner->search_round)
        return kt_err_set(KT_EINVAL, "kt_scheduler_run: no scheduler or tuner");
    lock(s);
    int busy = s->n_in_flight;
    unlock(s);
    if (busy)
        return kt_err_set(KT_ESTATE, "kt_scheduler_run: %d rounds are still in flight", busy);
    double *costs = malloc((size_t)s->per_round * sizeof *costs);
    if (!costs)
        return kt_err_set(KT_ENOMEM, "task scheduler: out of memory");
    int rc = 0;
    for (;;) {
        int task, n;
        rc = kt_scheduler_next(s, &task, &n);
        if (rc == KT_SCHEDULER_DONE) {
            rc = 0;
            break;
        }
        if (rc == KT_SCHEDULER_BUSY) {
            /* Only another thread driving next/complete can cause this. */
            rc = kt_err_set(KT_ESTATE, "kt_scheduler_run: rounds started elsewhere are in flight");
            break;
        }
        if (rc < 0)
            break;
        /* The tuner runs without the lock: snapshots stay available. */
        int m = tuner->search_round(tuner->user, task, n, costs);
        if (m < 0) {
            kt_err_prefix("tuning task %d", task);
            rc = m;
            kt_scheduler_abort(s, task);
            break;
        }
        if (m > n) {
            kt_scheduler_abort(s, task);
            rc = kt_err_set(KT_EINVAL, "tuner reported %d costs for a round of %d (task %d)", m,
                            n, task);
            break;
        }
        if ((rc = kt_scheduler_complete(s, task, costs, m)) < 0)
            break;
    }
    free(costs);
    return rc;
}

/* --- resume ---------------------------------------------------------- */

int kt_scheduler_restore_task(kt_scheduler_t *s, int task, const kt_scheduler_task_state_t *st)
{
    if (!s || !st)
        return kt_err_set(KT_EINVAL, "kt_scheduler_restore_task: NULL argument");
    if (st->rounds < 0 || st->trials < 0 || st->history_len < 0 || st->history_len > st->rounds ||
        (st->history_len > 0 && !st->history) || st->best_round < 0 ||
        st->best_round > st->rounds || st->status < KT_SCHEDULER_LIVE ||
        st->status > KT_SCHEDULER_EARLY_STOPPED)
        return kt_err_set(KT_EINVAL,
                          "restoring task %d: inconsistent state (rounds %d, trials %lld, "
                          "history %d, best round %d)",
                          task, st->rounds, (long long)st->trials, st->history_len, st->best_round);
    lock(s);
    int rc = 0;
    if (task < 0 || task >= s->n) {
        rc = kt_err_set(KT_EINVAL, "restoring task %d: only %d tasks", task, s->n);
        goto out;
    }
    if (s->started) {
        rc = kt_err_set(KT_ESTATE, "restoring task %d: tuning has already started", task);
        goto out;
    }
    task_t *t = &s->tasks[task];
    double *h = NULL;
    if (st->history_len > 0) {
        if (!(h = malloc((size_t)st->history_len * sizeof *h))) {
            rc = kt_err_set(KT_ENOMEM, "task scheduler: out of memory");
            goto out;
        }
        for (int k = 0; k < st->history_len; k++)
            h[k] = valid_cost(st->history[k]) ? st->history[k] : KT_SCHEDULER_NO_COST;
    }
    free(t->hist);
    t->hist = h;
    t->hist_len = t->hist_cap = st->history_len;
    t->rounds = st->rounds;
    t->trials = st->trials;
    t->best = valid_cost(st->best_cost) ? st->best_cost : KT_SCHEDULER_NO_COST;
    t->left_group = st->left_group != 0;
    t->status = st->status;
    if (st->best_round > 0) {
        t->best_round = st->best_round;
    } else if (st->history_len == st->rounds && st->rounds > 0) {
        /* The last round whose best beat the round before it. */
        t->best_round = 0;
        double prev = KT_SCHEDULER_NO_COST;
        for (int k = 0; k < t->hist_len; k++) {
            if (t->hist[k] < prev)
                t->best_round = k + 1;
            prev = t->hist[k];
        }
    } else {
        /* Unknown: assume the best is recent rather than stop the task. */
        t->best_round = t->best < KT_SCHEDULER_NO_COST ? t->rounds : 0;
    }
    if (t->status == KT_SCHEDULER_LIVE && t->rounds > 0 && early_stopped(s, t))
        t->status = KT_SCHEDULER_EARLY_STOPPED;
out:
    unlock(s);
    return rc;
}

int kt_scheduler_restore_elapsed(kt_scheduler_t *s, double seconds)
{
    if (!s || !(seconds >= 0) || !isfinite(seconds))
        return kt_err_set(KT_EINVAL, "kt_scheduler_restore_elapsed: bad argument");
    lock(s);
    int started = s->started;
    if (!started)
        s->elapsed_base = seconds;
    unlock(s);
    if (started)
        return kt_err_set(KT_ESTATE, "kt_scheduler_restore_elapsed: tuning has already started");
    return 0;
}

/* --- query ----------------------------------------------------------- */

int kt_scheduler_n_tasks(const kt_scheduler_t *s) { return s ? s->n : 0; }

int kt_scheduler_measures_per_round(const kt_scheduler_t *s) { return s ? s->per_round : 0; }

int64_t kt_scheduler_total_trials(const kt_scheduler_t *s)
{
    if (!s)
        return 0;
    lock(s);
    int64_t ct = total_trials(s);
    unlock(s);
    return ct;
}

double kt_scheduler_estimated_latency(const kt_scheduler_t *s)
{
    if (!s)
        return INFINITY;
    lock(s);
    double v = estimated_latency(s);
    unlock(s);
    return v;
}

double kt_scheduler_objective(const kt_scheduler_t *s, const double *costs)
{
    if (!s || !costs)
        return INFINITY;
    lock(s);
    double v = objective(s, costs);
    unlock(s);
    return v;
}

int kt_scheduler_task_state(const kt_scheduler_t *s, int task, kt_scheduler_task_state_t *out)
{
    if (!s || !out)
        return kt_err_set(KT_EINVAL, "kt_scheduler_task_state: NULL argument");
    if (task < 0 || task >= s->n)
        return kt_err_set(KT_EINVAL, "kt_scheduler_task_state: no task %d", task);
    lock(s);
    const task_t *t = &s->tasks[task];
    out->rounds = t->rounds;
    out->trials = t->trials;
    out->best_cost = t->best;
    out->history = t->hist;
    out->history_len = t->hist_len;
    out->best_round = t->best_round;
    out->status = t->status;
    out->left_group = t->left_group;
    unlock(s);
    return 0;
}

int kt_scheduler_in_flight(const kt_scheduler_t *s, int task)
{
    if (!s || task < 0 || task >= s->n)
        return 0;
    lock(s);
    int v = s->tasks[task].in_flight;
    unlock(s);
    return v;
}

kt_scheduler_end_t kt_scheduler_end_reason(const kt_scheduler_t *s)
{
    if (!s)
        return KT_SCHEDULER_RUNNING;
    lock(s);
    kt_scheduler_end_t e = s->end;
    unlock(s);
    return e;
}

const char *kt_scheduler_finish_message(const kt_scheduler_t *s)
{
    if (!s)
        return "";
    lock(s);
    const char *m = s->finish_msg ? s->finish_msg : "";
    unlock(s);
    return m;
}

/* --- output ---------------------------------------------------------- */

int kt_scheduler_print_table(const kt_scheduler_t *s, FILE *out, int next_task)
{
    if (!s || !out)
        return kt_err_set(KT_EINVAL, "kt_scheduler_print_table: NULL argument");
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    lock(s);
    /* TVM's PrintTitle banner. */
    kt_sbuf_puts(&b, "----------------------------------------------------------------------\n"
                     "------------------------------  [ Task Scheduler ]\n"
                     "----------------------------------------------------------------------\n");
    kt_sbuf_puts(&b, "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |\n");
    kt_sbuf_puts(&b, "-------------------------------------------------\n");
    for (int i = 0; i < s->n; i++) {
        const task_t *t = &s->tasks[i];
        char lat[32] = "-", speed[32] = "-";
        if (valid_cost(t->best)) {
            snprintf(lat, sizeof lat, "%.3f", 1e3 * t->best);
            snprintf(speed, sizeof speed, "%.2f", t->flops / t->best / 1e9);
        }
        kt_sbuf_printf(&b, "| %4d | %12s | %14s | %6lld |\n", i, lat, speed,
                       (long long)t->trials);
    }
    kt_sbuf_puts(&b, "-------------------------------------------------\n");
    double est = estimated_latency(s);
    char total[32] = "-";
    if (isfinite(est))
        snprintf(total, sizeof total, "%.3f", est * 1e3);
    kt_sbuf_printf(&b, "Estimated total latency: %s ms\tTrials: %lld\tUsed time : %.0f s\tNext ID: %d\n",
                   total, (long long)total_trials(s), elapsed(s), next_task);
    unlock(s);
    int rc = kt_sbuf_ok(&b);
    if (rc == 0 && (fputs(b.data, out) < 0 || fflush(out) != 0))
        rc = kt_err_set(KT_EIO, "printing the task scheduler table failed");
    kt_sbuf_free(&b);
    return rc;
}

void kt_scheduler_log_latency_file(void *user, int64_t trials, double elapsed_s, double est)
{
    FILE *f = user;
    if (!f)
        return;
    if (isfinite(est))
        fprintf(f, "ElapsedTime(s)\t%.0f\tEstimatedLatency(ms)\t%.3f\tTrials\t%lld\n", elapsed_s,
                est * 1e3, (long long)trials);
    else
        fprintf(f, "ElapsedTime(s)\t%.0f\tEstimatedLatency(ms)\tN/A\tTrials\t%lld\n", elapsed_s,
                (long long)trials);
    fflush(f);
}

static json_t *cost_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *kt_scheduler_snapshot(const kt_scheduler_t *s)
{
    if (!s) {
        kt_err_set(KT_EINVAL, "kt_scheduler_snapshot: NULL scheduler");
        return NULL;
    }
    json_t *root = json_object(), *arr = json_array();
    int ok = root && arr && json_object_set_new(root, "tasks", arr) == 0;
    if (!ok)
        json_decref(arr);
    lock(s);
    for (int i = 0; ok && i < s->n; i++) {
        const task_t *t = &s->tasks[i];
        int valid = valid_cost(t->best);
        json_t *o = json_pack("{s:i, s:s, s:f, s:f, s:o, s:o, s:I, s:i, s:s, s:b, s:b}", "id", i,
                              "workload_key", t->key, "weight", t->weight, "flops", t->flops,
                              "latency_s", valid ? json_real(t->best) : json_null(), "gflops",
                              valid ? json_real(t->flops / t->best / 1e9) : json_null(), "trials",
                              (json_int_t)t->trials, "rounds", t->rounds, "status",
                              status_name(t->status), "in_flight", t->in_flight, "left_group",
                              t->left_group);
        ok = o && json_array_append_new(arr, o) == 0;
    }
    if (ok) {
        json_t *rest = json_pack("{s:o, s:I, s:I, s:i, s:f, s:i, s:b, s:s, s:s}",
                                 "estimated_latency_s", cost_or_null(estimated_latency(s)),
                                 "total_trials", (json_int_t)total_trials(s), "budget",
                                 (json_int_t)s->cfg.num_measure_trials, "measures_per_round",
                                 s->per_round, "elapsed_s", elapsed(s), "next_task", s->last_pick,
                                 "finished", s->end != KT_SCHEDULER_RUNNING, "finish_message",
                                 s->finish_msg ? s->finish_msg : "", "strategy",
                                 kt_scheduler_strategy_name(s->cfg.strategy));
        ok = rest && json_object_update(root, rest) == 0;
        json_decref(rest);
    }
    unlock(s);
    if (!ok) {
        json_decref(root);
        kt_err_set(KT_ENOMEM, "task scheduler snapshot: out of memory");
        return NULL;
    }
    return root;
}
