/* Task scheduler tests with an analytic measurer: a round of task t at its
 * r-th round (0-based) measures candidates k = 0..n-1 with cost
 * base[t] * (1 + amp[t] / (r + 1)) * (1 + 0.1 k), so every decision can be
 * recomputed by hand. */
#include <check.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/scheduler.h"
#include "util/err.h"

#define MAXT 8
#define MAXPICKS 512

typedef struct {
    int n;
    double base[MAXT], amp[MAXT];
    int exhaust_at[MAXT];   /* round index at which the task has no candidates; -1 never */
    int flat[MAXT];         /* cost never improves after round 0 */
    int fail_first[MAXT];   /* every candidate of round 0 fails */
    int rounds[MAXT];       /* rounds this measurer ran per task */
    int picks[MAXPICKS];
    int n_picks;
    int sizes[MAXPICKS];    /* n asked for in each round */
    const kt_scheduler_t *sched;   /* when set: no task is measured while not in flight */
} meas_t;

static void meas_init(meas_t *m, int n)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    for (int t = 0; t < n; t++) {
        m->base[t] = 1e-3 * (t + 1);
        m->amp[t] = 1.0;
        m->exhaust_at[t] = -1;
    }
}

static double meas_cost(const meas_t *m, int t, int r, int k)
{
    if (m->fail_first[t] && r == 0)
        return INFINITY;
    double rr = m->flat[t] ? 0 : r;
    return m->base[t] * (1 + m->amp[t] / (rr + 1)) * (1 + 0.1 * k);
}

/* Best valid cost of a round of n candidates (k = 0 is the cheapest). */
static double meas_round_best(const meas_t *m, int t, int r)
{
    return meas_cost(m, t, r, 0);
}

static int meas_search(void *user, int task, int n, double *costs)
{
    meas_t *m = user;
    ck_assert_int_lt(task, m->n);
    if (m->sched)
        ck_assert(kt_scheduler_in_flight(m->sched, task));
    int r = m->rounds[task]++;
    ck_assert_int_lt(m->n_picks, MAXPICKS);
    m->sizes[m->n_picks] = n;
    m->picks[m->n_picks++] = task;
    if (r == m->exhaust_at[task])
        return 0;
    for (int k = 0; k < n; k++)
        costs[k] = meas_cost(m, task, r, k);
    return n;
}

static kt_scheduler_tuner_t tuner_of(meas_t *m)
{
    kt_scheduler_tuner_t tu = {.search_round = meas_search, .user = m};
    return tu;
}

static kt_scheduler_config_t quiet_config(kt_scheduler_strategy_t st, int64_t budget, int per_round)
{
    kt_scheduler_config_t c;
    kt_scheduler_config_default(&c);
    c.strategy = st;
    c.num_measure_trials = budget;
    c.num_measures_per_round = per_round;
    c.table_out = NULL;
    return c;
}

static void plain_tasks(kt_scheduler_task_t *tasks, int n)
{
    for (int i = 0; i < n; i++) {
        tasks[i] = (kt_scheduler_task_t){.weight = 1, .flops = 1e9, .similarity_tag = NULL,
                                         .workload_key = "w"};
    }
}

/* ---- the gradient strategy against an independent computation ------- */

/* Five tasks: 0 and 1 share a similarity group (same tag, flops within one
 * 1.618 bucket); 4 has the same tag but another flops bucket; 2 has its own
 * tag and fails its first round; 3 has no tag. */
static const double G_W[5] = {1, 6, 3, 1, 3};
static const double G_FLOPS[5] = {1e9, 1.1e9, 5e8, 2e8, 3e9};
static const char *G_TAG[5] = {"dense", "dense", "conv2d", NULL, "dense"};
static const int G_GROUP[5] = {0, 0, 1, -1, 2};   /* what the tags and buckets imply */

static void gradient_setup(kt_scheduler_task_t *tasks, meas_t *m)
{
    meas_init(m, 5);
    const double base[5] = {1e-3, 8e-3, 2e-3, 5e-4, 3e-3};
    const double amp[5] = {2, 1, 3, 1, 0.5};
    for (int i = 0; i < 5; i++) {
        tasks[i] = (kt_scheduler_task_t){.weight = G_W[i], .flops = G_FLOPS[i],
                                         .similarity_tag = G_TAG[i], .workload_key = "k"};
        m->base[i] = base[i];
        m->amp[i] = amp[i];
    }
    m->fail_first[2] = 1;
}

typedef struct {
    int cts[5], left[5];
    double best[5];
    double hist[5][64];
} ref_t;

/* The formula from TVM's task_scheduler.py, written out again. */
static int ref_pick(const ref_t *r, double alpha, double beta, int window, int *saw_bound,
                    int *backward_decides)
{
    double gbest[3] = {0, 0, 0};
    int gsize[3] = {0, 0, 0};
    for (int j = 0; j < 5; j++) {
        if (G_GROUP[j] < 0 || r->left[j])
            continue;
        gbest[G_GROUP[j]] = fmax(gbest[G_GROUP[j]], G_FLOPS[j] / r->best[j]);
        gsize[G_GROUP[j]]++;
    }
    int arg = -1, arg_fwd = -1;
    double gmin = INFINITY, gmax = -INFINITY, fmin_only = INFINITY;
    for (int i = 0; i < 5; i++) {
        int c = r->cts[i];
        double back = c - 1 - window >= 0 ? (r->hist[i][c - 1] - r->hist[i][c - 1 - window]) / window
                                          : 0;
        double g1 = r->best[i] - r->best[i] / c, g2 = beta * 1e30;
        if (G_GROUP[i] >= 0 && !r->left[i] && gsize[G_GROUP[i]] > 1)
            g2 = beta * G_FLOPS[i] / gbest[G_GROUP[i]];
        if (g2 < g1)
            (*saw_bound)++;
        double grad = G_W[i] * (alpha * back + (1 - alpha) * (fmin(g1, g2) - r->best[i]));
        if (grad < gmin)
            gmin = grad, arg = i;
        double fwd_only = G_W[i] * (1 - alpha) * (fmin(g1, g2) - r->best[i]);
        if (fwd_only < fmin_only)
            fmin_only = fwd_only, arg_fwd = i;
        gmax = fmax(gmax, grad);
    }
    ck_assert_msg(gmax > gmin, "the scenario must not produce a tie");
    *backward_decides += arg != arg_fwd;
    return arg;
}

static void ref_measure(ref_t *r, const meas_t *m, int t)
{
    double c = meas_round_best(m, t, r->cts[t]);
    if (isfinite(c) && c < r->best[t])
        r->best[t] = c;
    r->hist[t][r->cts[t]++] = r->best[t];
}

static int ref_adjust(ref_t *r, int t, double beta)
{
    int g = G_GROUP[t], members = 0, other = 0;
    double bf = 0;
    if (g < 0 || r->left[t])
        return 0;
    for (int j = 0; j < 5; j++) {
        if (G_GROUP[j] != g || r->left[j])
            continue;
        members++;
        bf = fmax(bf, G_FLOPS[j] / r->best[j]);
        if (j != t && r->cts[j] > other)
            other = r->cts[j];
    }
    if (members > 1 && G_FLOPS[t] / r->best[t] < bf / beta && r->cts[t] > 5 + other) {
        r->left[t] = 1;
        return 1;
    }
    return 0;
}

START_TEST(gradient_choices_follow_the_formula)
{
    kt_scheduler_task_t tasks[5];
    meas_t m;
    gradient_setup(tasks, &m);
    const int per_round = 8, rounds = 20;
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, (5 + rounds) * per_round, per_round);
    c.eps_random = 0;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 5, &c);
    ck_assert_ptr_nonnull(s);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(kt_scheduler_end_reason(s), KT_SCHEDULER_END_BUDGET);
    ck_assert_int_eq(m.n_picks, 5 + rounds);

    ref_t r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < 5; i++)
        r.best[i] = 1e10;
    for (int i = 0; i < 5; i++) {   /* warm-up: every task once, in order */
        ck_assert_int_eq(m.picks[i], i);
        ref_measure(&r, &m, i);
    }
    int bounded = 0, leaves = 0, backward_decides = 0;
    for (int k = 0; k < rounds; k++) {
        int want = ref_pick(&r, c.alpha, c.beta, c.backward_window_size, &bounded,
                            &backward_decides);
        ck_assert_msg(m.picks[5 + k] == want, "round %d: scheduler picked %d, formula %d", k,
                      m.picks[5 + k], want);
        ref_measure(&r, &m, want);
        leaves += ref_adjust(&r, want, c.beta);
    }
    /* The scenario exercises every term of the formula. */
    ck_assert_int_gt(bounded, 0);
    ck_assert_int_gt(backward_decides, 0);
    ck_assert_int_gt(leaves, 0);
    for (int i = 0; i < 5; i++) {
        kt_scheduler_task_state_t st;
        ck_assert_int_eq(kt_scheduler_task_state(s, i, &st), 0);
        ck_assert_int_eq(st.rounds, r.cts[i]);
        ck_assert_int_eq(st.left_group, r.left[i]);
        ck_assert_double_eq_tol(st.best_cost, r.best[i], 1e-15);
        ck_assert_int_eq(st.history_len, r.cts[i]);
    }
    kt_scheduler_free(s);
}
END_TEST

static double max_objective(const double *costs, int n, void *user)
{
    (void)user;
    double mx = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, costs[i]);
    return mx;
}

START_TEST(custom_objective_steers_gradient)
{
    /* Minimising the slowest task: only its latency has a gradient. */
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    meas_t m;
    meas_init(&m, 3);
    m.base[0] = 1e-3, m.base[1] = 9e-3, m.base[2] = 2e-3;
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 3 * 4 + 3 * 4, 4);
    c.eps_random = 0;
    c.objective = max_objective;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.n_picks, 6);
    for (int k = 3; k < 6; k++)
        ck_assert_int_eq(m.picks[k], 1);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(alternatives_count_once_at_their_fastest)
{
    /* Task 2 computes task 0's layers another way (a Winograd conv2d), 3x
     * faster: the estimate is w0 * cost(2) + w1 * cost(1), and after the
     * warm-up the gradient never picks task 0 (its group's slower member). */
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    tasks[0].weight = 2, tasks[1].weight = 1, tasks[2].weight = 7;   /* 7: unused */
    meas_t m;
    meas_init(&m, 3);
    m.base[0] = 3e-3, m.base[1] = 1e-3, m.base[2] = 1e-3;
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 3 * 4 + 6 * 4, 4);
    c.eps_random = 0;
    const int alt[3] = {-1, -1, 0};
    c.alternative_of = alt;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.n_picks, 9);
    for (int k = 3; k < m.n_picks; k++)
        ck_assert_int_ne(m.picks[k], 0);
    kt_scheduler_task_state_t st[3];
    for (int i = 0; i < 3; i++)
        kt_scheduler_task_state(s, i, &st[i]);
    double want = 2 * st[2].best_cost + 1 * st[1].best_cost;
    ck_assert(st[2].best_cost < st[0].best_cost);
    ck_assert_double_eq_tol(kt_scheduler_estimated_latency(s), want, 1e-12);
    /* the same sum over costs the caller gives: group 0 at its faster member */
    const double given[3] = {1e-3, 5e-3, 4e-3};
    ck_assert_double_eq_tol(kt_scheduler_objective(s, given), 2 * 1e-3 + 5e-3, 1e-15);
    const double alt_faster[3] = {4e-3, 5e-3, 1e-3};
    ck_assert_double_eq_tol(kt_scheduler_objective(s, alt_faster), 2 * 1e-3 + 5e-3, 1e-15);
    ck_assert(isinf(kt_scheduler_objective(s, NULL)));
    kt_scheduler_free(s);

    /* An alternative of an alternative, or of itself, is refused. */
    const int bad[3] = {-1, 2, 1}, self[3] = {0, -1, -1};
    c.alternative_of = bad;
    ck_assert_ptr_null(kt_scheduler_new(tasks, 3, &c));
    c.alternative_of = self;
    ck_assert_ptr_null(kt_scheduler_new(tasks, 3, &c));
}
END_TEST

/* ---- round-robin, sequential, dead tasks, early stopping ------------ */

START_TEST(round_robin_cycles_and_skips_dead_task)
{
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    meas_t m;
    meas_init(&m, 3);
    m.exhaust_at[1] = 2;   /* third round of task 1 finds nothing new */
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_ROUND_ROBIN, 40, 4);
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    const int want[] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 2};
    ck_assert_int_eq(m.n_picks, (int)(sizeof want / sizeof want[0]));
    for (int k = 0; k < m.n_picks; k++)
        ck_assert_int_eq(m.picks[k], want[k]);
    kt_scheduler_task_state_t st;
    kt_scheduler_task_state(s, 1, &st);
    ck_assert_int_eq(st.status, KT_SCHEDULER_EXHAUSTED);
    ck_assert_int_eq(st.trials, 8);
    ck_assert_int_eq(kt_scheduler_total_trials(s), 40);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(sequential_gives_each_task_its_share)
{
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    meas_t m;
    meas_init(&m, 3);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_SEQUENTIAL, 48, 4);
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.n_picks, 12);
    for (int k = 0; k < 12; k++)
        ck_assert_int_eq(m.picks[k], k / 4);
    kt_scheduler_free(s);

    /* A task that dies early leaves its unused share to the tasks after it:
     * task 0 stops after 8 trials, so 1 and 2 get (48 - 8) / 2 each. */
    meas_init(&m, 3);
    m.exhaust_at[0] = 2;
    s = kt_scheduler_new(tasks, 3, &c);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    const int64_t want[3] = {8, 20, 20};
    for (int i = 0; i < 3; i++) {
        kt_scheduler_task_state_t st;
        kt_scheduler_task_state(s, i, &st);
        ck_assert_int_eq(st.trials, want[i]);
    }
    kt_scheduler_free(s);
}
END_TEST

START_TEST(gradient_skips_dead_task)
{
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    tasks[1].weight = 100;   /* the gradient would otherwise keep picking it */
    meas_t m;
    meas_init(&m, 3);
    m.exhaust_at[1] = 2;
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 60, 4);
    c.eps_random = 0;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.picks[3], 1);
    int seen1 = 0;
    for (int k = 0; k < m.n_picks; k++) {
        ck_assert_msg(seen1 < 3 || m.picks[k] != 1, "dead task 1 picked again at pick %d", k);
        seen1 += m.picks[k] == 1;
    }
    ck_assert_int_eq(m.rounds[1], 3);
    ck_assert_int_eq(kt_scheduler_total_trials(s), 60);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(all_dead_ends_run_with_message)
{
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    meas_t m;
    meas_init(&m, 3);
    for (int i = 0; i < 3; i++)
        m.exhaust_at[i] = 1;
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 1000, 4);
    c.table_out = out;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.n_picks, 6);
    ck_assert_int_eq(kt_scheduler_end_reason(s), KT_SCHEDULER_END_ALL_DEAD);
    ck_assert_ptr_nonnull(strstr(kt_scheduler_finish_message(s), "all 3 tasks are dead"));
    ck_assert_ptr_nonnull(strstr(kt_scheduler_finish_message(s), "12 of 1000 trials"));
    fclose(out);
    ck_assert_ptr_nonnull(strstr(buf, "all 3 tasks are dead"));
    /* Once over, it stays over. */
    int t, n;
    ck_assert_int_eq(kt_scheduler_next(s, &t, &n), KT_SCHEDULER_DONE);
    free(buf);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(early_stopping_stops_task_without_improvement)
{
    kt_scheduler_task_t tasks[2];
    plain_tasks(tasks, 2);
    meas_t m;
    meas_init(&m, 2);
    m.flat[0] = 1;
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_ROUND_ROBIN, 80, 4);
    c.early_stopping = 8;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 2, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    /* Best at round 1; rounds 2-3 are 8 trials without improvement (not yet
     * more than 8); round 4 makes 12 and stops the task. */
    kt_scheduler_task_state_t st;
    kt_scheduler_task_state(s, 0, &st);
    ck_assert_int_eq(st.status, KT_SCHEDULER_EARLY_STOPPED);
    ck_assert_int_eq(st.rounds, 4);
    kt_scheduler_task_state(s, 1, &st);
    ck_assert_int_eq(st.status, KT_SCHEDULER_LIVE);
    ck_assert_int_eq(st.trials, 80 - 16);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(too_small_budget_is_an_error)
{
    kt_scheduler_task_t tasks[3];
    plain_tasks(tasks, 3);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 2, 64);
    kt_err_clear();
    ck_assert_ptr_null(kt_scheduler_new(tasks, 3, &c));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "smaller than the number of tasks"));
    c.num_measure_trials = 3;   /* one trial per task is enough */
    kt_scheduler_t *s = kt_scheduler_new(tasks, 3, &c);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_scheduler_measures_per_round(s), 1);
    kt_scheduler_free(s);
    ck_assert_ptr_null(kt_scheduler_new(tasks, 0, &c));
    c.beta = -1;
    ck_assert_ptr_null(kt_scheduler_new(tasks, 3, &c));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "beta"));
}
END_TEST

START_TEST(measures_per_round_reduced_to_budget_share)
{
    kt_scheduler_task_t tasks[4];
    plain_tasks(tasks, 4);
    meas_t m;
    meas_init(&m, 4);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 100, 64);
    kt_scheduler_t *s = kt_scheduler_new(tasks, 4, &c);
    ck_assert_int_eq(kt_scheduler_measures_per_round(s), 25);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(m.n_picks, 4);   /* the warm-up alone spends the budget */
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(m.picks[k], k);
        ck_assert_int_eq(m.sizes[k], 25);
    }
    kt_scheduler_free(s);
    c.num_measure_trials = 10000;   /* a large budget keeps the configured size */
    s = kt_scheduler_new(tasks, 4, &c);
    ck_assert_int_eq(kt_scheduler_measures_per_round(s), 64);
    kt_scheduler_free(s);
}
END_TEST

/* ---- resume and concurrency ---------------------------------------- */

static kt_scheduler_config_t resume_config(void)
{
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_GRADIENT, 30 * 8, 8);
    c.eps_random = 0.3;   /* many random picks: they must replay too */
    c.seed = 42;
    c.early_stopping = 16;
    return c;
}

static void resume_tasks(kt_scheduler_task_t *tasks, meas_t *m)
{
    gradient_setup(tasks, m);
    m->flat[3] = 1;   /* early-stopped on the way */
}

START_TEST(resumed_run_matches_uninterrupted_run)
{
    kt_scheduler_task_t tasks[5];
    meas_t full;
    resume_tasks(tasks, &full);
    kt_scheduler_config_t c = resume_config();
    kt_scheduler_t *s = kt_scheduler_new(tasks, 5, &c);
    kt_scheduler_tuner_t tu = tuner_of(&full);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    kt_scheduler_task_state_t want[5];
    for (int i = 0; i < 5; i++)
        kt_scheduler_task_state(s, i, &want[i]);
    ck_assert_int_eq(want[3].status, KT_SCHEDULER_EARLY_STOPPED);

    const int stops[] = {3, 9, 17, 24};
    for (size_t si = 0; si < sizeof stops / sizeof stops[0]; si++) {
        int stop = stops[si];
        /* First run: stopped after `stop` rounds. */
        meas_t part;
        resume_tasks(tasks, &part);
        kt_scheduler_t *a = kt_scheduler_new(tasks, 5, &c);
        double costs[64];
        for (int k = 0; k < stop; k++) {
            int t, n;
            ck_assert_int_eq(kt_scheduler_next(a, &t, &n), 0);
            int got = meas_search(&part, t, n, costs);
            ck_assert_int_eq(kt_scheduler_complete(a, t, costs, got), 0);
        }
        /* Second run: what a store would hand back (history and counts;
         * the round of the best is left for the scheduler to derive). */
        kt_scheduler_t *b = kt_scheduler_new(tasks, 5, &c);
        for (int i = 0; i < 5; i++) {
            kt_scheduler_task_state_t st;
            kt_scheduler_task_state(a, i, &st);
            st.best_round = 0;
            ck_assert_int_eq(kt_scheduler_restore_task(b, i, &st), 0);
        }
        kt_scheduler_free(a);
        tu.user = &part;
        ck_assert_int_eq(kt_scheduler_run(b, &tu), 0);
        ck_assert_int_eq(part.n_picks, full.n_picks);
        for (int k = 0; k < full.n_picks; k++)
            ck_assert_msg(part.picks[k] == full.picks[k], "stop %d: pick %d differs", stop, k);
        for (int i = 0; i < 5; i++) {
            kt_scheduler_task_state_t st;
            kt_scheduler_task_state(b, i, &st);
            ck_assert_int_eq(st.trials, want[i].trials);
            ck_assert_int_eq(st.rounds, want[i].rounds);
            ck_assert_int_eq(st.status, want[i].status);
        }
        ck_assert_int_eq(kt_scheduler_total_trials(b), kt_scheduler_total_trials(s));
        kt_scheduler_free(b);
    }
    kt_scheduler_free(s);
}
END_TEST

START_TEST(restore_only_before_start_and_validated)
{
    kt_scheduler_task_t tasks[2];
    plain_tasks(tasks, 2);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_ROUND_ROBIN, 100, 4);
    c.early_stopping = 8;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 2, &c);
    kt_scheduler_task_state_t bad = {.rounds = 1, .history_len = 2};
    ck_assert_int_eq(kt_scheduler_restore_task(s, 0, &bad), KT_EINVAL);
    /* Counts only (a record log): the task skips the warm-up. */
    kt_scheduler_task_state_t st = {.rounds = 3, .trials = 12, .best_cost = 2e-3};
    ck_assert_int_eq(kt_scheduler_restore_task(s, 0, &st), 0);
    /* A history that stopped improving long ago: dead on restore. */
    const double h[5] = {INFINITY, 1e-3, 1e-3, 1e-3, 1e-3};
    kt_scheduler_task_state_t st1 = {.rounds = 5, .trials = 20, .best_cost = 1e-3,
                                     .history = h, .history_len = 5};
    ck_assert_int_eq(kt_scheduler_restore_task(s, 1, &st1), 0);
    kt_scheduler_task_state_t got;
    kt_scheduler_task_state(s, 1, &got);
    ck_assert_int_eq(got.best_round, 2);
    ck_assert_int_eq(got.status, KT_SCHEDULER_EARLY_STOPPED);
    ck_assert_int_eq(kt_scheduler_total_trials(s), 32);
    int t, n;
    ck_assert_int_eq(kt_scheduler_next(s, &t, &n), 0);
    ck_assert_int_eq(t, 0);   /* no warm-up for restored tasks; task 1 is dead */
    ck_assert_int_eq(kt_scheduler_restore_task(s, 0, &st), KT_ESTATE);
    ck_assert_int_eq(kt_scheduler_complete(s, 1, NULL, 0), KT_ESTATE);
    ck_assert_int_eq(kt_scheduler_next(s, &t, &n), KT_SCHEDULER_BUSY);
    ck_assert_int_eq(kt_scheduler_abort(s, 0), 0);
    ck_assert_int_eq(kt_scheduler_abort(s, 0), KT_ESTATE);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(single_in_flight_equals_run)
{
    const kt_scheduler_strategy_t strategies[] = {KT_SCHEDULER_GRADIENT, KT_SCHEDULER_ROUND_ROBIN,
                                                  KT_SCHEDULER_SEQUENTIAL};
    for (int si = 0; si < 3; si++) {
        kt_scheduler_task_t tasks[5];
        meas_t a, b;
        resume_tasks(tasks, &a);
        resume_tasks(tasks, &b);
        kt_scheduler_config_t c = resume_config();
        c.strategy = strategies[si];
        kt_scheduler_t *s1 = kt_scheduler_new(tasks, 5, &c);
        kt_scheduler_tuner_t tu = tuner_of(&a);
        ck_assert_int_eq(kt_scheduler_run(s1, &tu), 0);

        kt_scheduler_t *s2 = kt_scheduler_new(tasks, 5, &c);
        double costs[64];
        int t, n, rc;
        while ((rc = kt_scheduler_next(s2, &t, &n)) == 0) {
            int got = meas_search(&b, t, n, costs);
            ck_assert_int_eq(kt_scheduler_complete(s2, t, costs, got), 0);
        }
        ck_assert_int_eq(rc, KT_SCHEDULER_DONE);
        ck_assert_int_eq(a.n_picks, b.n_picks);
        ck_assert_int_eq(memcmp(a.picks, b.picks, sizeof a.picks), 0);
        ck_assert_int_eq(kt_scheduler_end_reason(s1), kt_scheduler_end_reason(s2));
        kt_scheduler_free(s1);
        kt_scheduler_free(s2);
    }
}
END_TEST

START_TEST(two_in_flight_never_pick_a_task_twice)
{
    kt_scheduler_task_t tasks[5];
    meas_t m;
    resume_tasks(tasks, &m);
    kt_scheduler_config_t c = resume_config();
    c.max_in_flight = 2;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 5, &c);
    m.sched = s;
    int queue[2], qn = 0, busy_seen = 0, max_qn = 0;
    int flying[5] = {0};
    double costs[64];
    for (;;) {
        int t, n;
        int rc = kt_scheduler_next(s, &t, &n);
        if (rc == 0) {
            ck_assert_msg(!flying[t], "task %d picked while in flight", t);
            ck_assert(kt_scheduler_in_flight(s, t));
            flying[t] = 1;
            ck_assert_int_lt(qn, 2);
            queue[qn++] = t;
            max_qn = qn > max_qn ? qn : max_qn;
            continue;
        }
        if (rc == KT_SCHEDULER_DONE)
            break;
        ck_assert_int_eq(rc, KT_SCHEDULER_BUSY);
        busy_seen++;
        ck_assert_int_gt(qn, 0);
        /* Complete the oldest round: results arrive out of pick order. */
        int done = queue[0];
        queue[0] = queue[1];
        qn--;
        int got = meas_search(&m, done, n = kt_scheduler_measures_per_round(s), costs);
        flying[done] = 0;
        ck_assert_int_eq(kt_scheduler_complete(s, done, costs, got), 0);
    }
    ck_assert_int_eq(qn, 0);
    ck_assert_int_eq(max_qn, 2);
    ck_assert_int_gt(busy_seen, 0);
    ck_assert_int_ge(kt_scheduler_total_trials(s), c.num_measure_trials);
    ck_assert_int_lt(kt_scheduler_total_trials(s), c.num_measure_trials + 8);
    kt_scheduler_free(s);
}
END_TEST

/* ---- output --------------------------------------------------------- */

static int line_matches(const char *line, const char *pattern)
{
    regex_t re;
    ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    int ok = regexec(&re, line, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

typedef struct {
    int calls;
    int64_t last_trials;
    double last_est;
} latency_seen_t;

static void on_latency(void *user, int64_t trials, double elapsed, double est)
{
    latency_seen_t *l = user;
    ck_assert(elapsed >= 0);
    ck_assert_int_gt(trials, l->last_trials);
    l->calls++;
    l->last_trials = trials;
    l->last_est = est;
}

START_TEST(table_matches_tvm_layout)
{
    kt_scheduler_task_t tasks[2];
    plain_tasks(tasks, 2);
    tasks[0].flops = 2600;   /* 0.010 ms and 0.26 GFLOPS, as in TVM's sample */
    tasks[1].weight = 2;
    meas_t m;
    meas_init(&m, 2);
    m.base[0] = 5e-6, m.amp[0] = 1;   /* best of round 0: 1e-5 s */
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_ROUND_ROBIN, 16, 64);
    c.table_out = out;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 2, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);
    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(kt_scheduler_print_table(s, out, 1), 0);
    fclose(out);

    const char *banner = "----------------------------------------------------------------------\n"
                         "------------------------------  [ Task Scheduler ]\n"
                         "----------------------------------------------------------------------\n"
                         "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |\n"
                         "-------------------------------------------------\n";
    /* Before any measurement: no latency yet. */
    ck_assert_ptr_eq(strstr(buf, banner), buf);
    ck_assert_ptr_nonnull(strstr(buf, "|    0 |            - |              - |      0 |\n"));
    ck_assert_ptr_nonnull(strstr(buf, "Estimated total latency: - ms\tTrials: 0\tUsed time : "));
    ck_assert_ptr_nonnull(strstr(buf, "|    0 |        0.010 |           0.26 |      8 |\n"));

    int tables = 0, rows = 0, totals = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strcmp(line, "------------------------------  [ Task Scheduler ]"))
            tables++;
        else if (line[0] == '|' && strcmp(line, "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |")) {
            ck_assert_msg(line_matches(line, "^\\| +[0-9]+ \\| +(-|[0-9]+\\.[0-9]{3}) \\| +"
                                             "(-|[0-9]+\\.[0-9]{2}) \\| +[0-9]+ \\|$"),
                          "bad row '%s'", line);
            ck_assert_int_eq(strlen(line), 49);
            rows++;
        } else if (!strncmp(line, "Estimated", 9)) {
            ck_assert_msg(line_matches(line, "^Estimated total latency: (-|[0-9]+\\.[0-9]{3}) ms\t"
                                             "Trials: [0-9]+\tUsed time : [0-9]+ s\tNext ID: [0-9]+$"),
                          "bad total '%s'", line);
            totals++;
        }
    }
    /* One table before each of the 2 rounds, plus the one printed here. */
    ck_assert_int_eq(tables, 3);
    ck_assert_int_eq(rows, 6);
    ck_assert_int_eq(totals, 3);
    free(buf);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(snapshot_and_latency_log_report_progress)
{
    kt_scheduler_task_t tasks[2];
    plain_tasks(tasks, 2);
    tasks[1].workload_key = "[\"abc\", [1]]";
    meas_t m;
    meas_init(&m, 2);
    m.fail_first[1] = 1;
    latency_seen_t seen = {0};
    char *logbuf = NULL;
    size_t loglen = 0;
    FILE *log = open_memstream(&logbuf, &loglen);
    kt_scheduler_config_t c = quiet_config(KT_SCHEDULER_ROUND_ROBIN, 32, 8);
    c.latency_log = on_latency;
    c.latency_user = &seen;
    kt_scheduler_t *s = kt_scheduler_new(tasks, 2, &c);
    kt_scheduler_tuner_t tu = tuner_of(&m);

    int t, n;
    ck_assert_int_eq(kt_scheduler_next(s, &t, &n), 0);
    json_t *j = kt_scheduler_snapshot(s);
    ck_assert_ptr_nonnull(j);
    ck_assert(json_is_null(json_object_get(j, "estimated_latency_s")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "next_task")), 0);
    ck_assert(json_is_true(json_object_get(json_array_get(json_object_get(j, "tasks"), 0),
                                           "in_flight")));
    json_decref(j);
    kt_scheduler_abort(s, t);

    ck_assert_int_eq(kt_scheduler_run(s, &tu), 0);
    ck_assert_int_eq(seen.calls, 4);
    ck_assert_int_eq(seen.last_trials, 32);
    /* Task 1 failed its first round: no estimate until its second. */
    ck_assert(isfinite(seen.last_est));
    double expect = meas_round_best(&m, 0, 1) + meas_round_best(&m, 1, 1);
    ck_assert_double_eq_tol(seen.last_est, expect, 1e-12);
    ck_assert_double_eq_tol(kt_scheduler_estimated_latency(s), expect, 1e-12);

    kt_scheduler_log_latency_file(log, 16, 3.2, INFINITY);
    kt_scheduler_log_latency_file(log, 32, 7.0, 1.5e-3);
    fclose(log);
    ck_assert_str_eq(logbuf, "ElapsedTime(s)\t3\tEstimatedLatency(ms)\tN/A\tTrials\t16\n"
                             "ElapsedTime(s)\t7\tEstimatedLatency(ms)\t1.500\tTrials\t32\n");
    free(logbuf);

    j = kt_scheduler_snapshot(s);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "total_trials")), 32);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "budget")), 32);
    ck_assert(json_is_true(json_object_get(j, "finished")));
    ck_assert_double_eq_tol(json_real_value(json_object_get(j, "estimated_latency_s")), expect,
                            1e-12);
    json_t *t1 = json_array_get(json_object_get(j, "tasks"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(t1, "workload_key")), "[\"abc\", [1]]");
    ck_assert_int_eq(json_integer_value(json_object_get(t1, "trials")), 16);
    ck_assert_int_eq(json_integer_value(json_object_get(t1, "rounds")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(t1, "status")), "live");
    ck_assert_double_eq_tol(json_real_value(json_object_get(t1, "gflops")),
                            1e9 / meas_round_best(&m, 1, 1) / 1e9, 1e-9);
    json_decref(j);
    kt_scheduler_free(s);
}
END_TEST

START_TEST(strategy_names_round_trip)
{
    for (int st = KT_SCHEDULER_GRADIENT; st <= KT_SCHEDULER_SEQUENTIAL; st++)
        ck_assert_int_eq(kt_scheduler_strategy_parse(kt_scheduler_strategy_name(st)), st);
    ck_assert_int_eq(kt_scheduler_strategy_parse("random"), -1);
    ck_assert_int_eq(kt_scheduler_strategy_parse(NULL), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, gradient_choices_follow_the_formula);
    tcase_add_test(tc, custom_objective_steers_gradient);
    tcase_add_test(tc, alternatives_count_once_at_their_fastest);
    tcase_add_test(tc, round_robin_cycles_and_skips_dead_task);
    tcase_add_test(tc, sequential_gives_each_task_its_share);
    tcase_add_test(tc, gradient_skips_dead_task);
    tcase_add_test(tc, all_dead_ends_run_with_message);
    tcase_add_test(tc, early_stopping_stops_task_without_improvement);
    tcase_add_test(tc, too_small_budget_is_an_error);
    tcase_add_test(tc, measures_per_round_reduced_to_budget_share);
    tcase_add_test(tc, resumed_run_matches_uninterrupted_run);
    tcase_add_test(tc, restore_only_before_start_and_validated);
    tcase_add_test(tc, single_in_flight_equals_run);
    tcase_add_test(tc, two_in_flight_never_pick_a_task_twice);
    tcase_add_test(tc, table_matches_tvm_layout);
    tcase_add_test(tc, snapshot_and_latency_log_report_progress);
    tcase_add_test(tc, strategy_names_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
