/* Suite 'family': FamilySeer's task families (kt_search_family_t): grouping
 * by anchor operator and by operator sequence, the family models' training
 * data during and after the warm-up, foresee passes, resume, policy names;
 * sketch.xgb's one model for a job's tasks (Ansor's warm-up, resume, search
 * threads, different tasks searched at once).
 * Costs are synthetic (no kernel is built), populations small. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature.h"
#include "net/net.h"
#include "search/search.h"
#include "util/err.h"
#include "util/pool.h"

static kt_workload_t *workload(const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_msg(w != NULL, "workload: %s", kt_err_msg());
    return w;
}

static kt_workload_t *matmul(int m, int n, int k)
{
    char j[160];
    snprintf(j, sizeof j, "{\"op\":\"matmul\",\"M\":%d,\"N\":%d,\"K\":%d}", m, n, k);
    return workload(j);
}

static kt_workload_t *conv(int hw, int ci, int co, const char *epilogue)
{
    char j[400];
    snprintf(j, sizeof j,
             "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":%d,\"W\":%d,\"CI\":%d,\"CO\":%d,\"KH\":3,"
             "\"KW\":3,\"stride\":[1,1],\"padding\":[1,1],\"dilation\":[1,1],\"epilogue\":[%s]}",
             hw, hw, ci, co, epilogue);
    return workload(j);
}

static kt_workload_t *dense(int m, int n, int k)
{
    char j[200];
    snprintf(j, sizeof j, "{\"op\":\"dense\",\"M\":%d,\"N\":%d,\"K\":%d,\"epilogue\":[\"relu\"]}",
             m, n, k);
    return workload(j);
}

/* Small searches: population 32, 1 iteration, foresee passes of 32 keeping 8. */
static void small_opts(kt_search_opts_t *o, const char *policy, int warmup)
{
    kt_search_opts_default(o);
    o->policy = policy;
    o->seed = 11;
    o->evolutionary_search_population = 32;
    o->evolutionary_search_num_iters = 1;
    o->sample_init_min_population = 8;
    o->retry_search_one_round_on_empty = 1;
    o->num_warmup_sample = warmup;
    o->foresee_population = 32;
    o->foresee_num_iters = 1;
    o->foresee_keep = 8;
}

static void params(kt_sched_params_t *p)
{
    kt_sched_params_default(p);
    p->num_cores = 1;
}

/* A synthetic cost of state st of workload w that varies with the state
 * (so the model has something to fit). */
static double synth_cost(const kt_sched_state_t *st, const kt_workload_t *w)
{
    return 1e-3 * (double)(1 + kt_sched_state_hash(st, kt_workload_dag(w)) % 7);
}

/* Propose n states of task t, give them synth_cost's costs, return how
 * many were measured. */
static int round_of(kt_search_family_t *f, const kt_workload_t *const *wl, int t, int n)
{
    kt_sched_state_t **st = NULL;
    int got = kt_search_family_propose(f, t, n, &st);
    ck_assert_msg(got > 0, "task %d: propose %d: %s", t, got, kt_err_msg());
    double *costs = malloc((size_t)got * sizeof *costs);
    ck_assert_ptr_nonnull(costs);
    for (int i = 0; i < got; i++)
        costs[i] = synth_cost(st[i], wl[t]);
    ck_assert_int_eq(kt_search_family_feedback(f, t, st, costs, got), 0);
    for (int i = 0; i < got; i++)
        kt_sched_state_free(st[i]);
    free(st);
    free(costs);
    return got;
}

static size_t samples(const kt_search_family_t *f, int family)
{
    return kt_model_num_samples(kt_search_family_model(f, family));
}

START_TEST(family_policy_names_are_checked_with_clear_errors)
{
    const char *const *names = kt_search_policy_names();
    int n = 0;
    for (; names[n]; n++)
        ck_assert_int_eq(kt_search_policy_check(names[n]), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(kt_search_policy_check("sketch.xgb.family-op"), 0);
    ck_assert_int_eq(kt_search_policy_check("sketch.xgb.family_op"), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "unknown policy 'sketch.xgb.family_op'") &&
                      strstr(kt_err_msg(), "sketch.xgb.family-hash"),
                  "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_policy_check(NULL), KT_EINVAL);

    kt_workload_t *w = matmul(16, 16, 16);
    const kt_workload_t *wl[1] = {w};
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-ops", 0);
    ck_assert_ptr_null(kt_search_family_new(wl, 1, NULL, &o));
    ck_assert_msg(strstr(kt_err_msg(), "unknown policy 'sketch.xgb.family-ops'"), "%s",
                  kt_err_msg());
    o.policy = "sketch.xgb";
    ck_assert_ptr_null(kt_search_family_new(wl, 0, NULL, &o));
    /* a single policy cannot be a family policy: the message says where to go */
    o.policy = "sketch.xgb.family-op";
    ck_assert_ptr_null(kt_search_policy_new(w, NULL, &o, NULL, 0));
    ck_assert_msg(strstr(kt_err_msg(), "kt_search_family_new"), "%s", kt_err_msg());
    o.foresee_keep = 0;
    ck_assert_ptr_null(kt_search_family_new(wl, 1, NULL, &o));
    ck_assert_msg(strstr(kt_err_msg(), "foresee"), "%s", kt_err_msg());
    kt_workload_free(w);
}
END_TEST

START_TEST(family_op_groups_resnet18_tasks_by_anchor_operator)
{
    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *ts = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(ts);
    int n = ts->ntasks;
    ck_assert_int_ge(n, 5);
    const kt_workload_t **wl = calloc((size_t)n, sizeof *wl);
    ck_assert_ptr_nonnull(wl);
    for (int i = 0; i < n; i++)
        wl[i] = ts->tasks[i].wl;
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-op", 100);
    kt_search_family_t *f = kt_search_family_new(wl, n, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());

    /* the expected anchor of each task, from its operator */
    int conv_family = -1, nconv = 0;
    int seen[8] = {0};
    for (int i = 0; i < n; i++) {
        const char *op = kt_workload_op(wl[i]);
        const char *want = NULL;
        if (strcmp(op, "conv2d_nhwc") == 0)
            want = "conv2d_nhwc";
        else if (strcmp(op, "dense") == 0)
            want = "dense";
        else if (strcmp(op, "pool2d") == 0)
            want = "pool_max";   /* ResNet's only pool2d is the max pool */
        else if (strcmp(op, "global_avg_pool") == 0)
            want = "global_pool_sum";
        else if (strcmp(op, "softmax") == 0)
            want = "softmax_max";
        ck_assert_msg(want != NULL, "unexpected op %s", op);
        ck_assert_str_eq(kt_search_family_anchor(kt_workload_dag(wl[i])), want);
        int g = kt_search_family_of(f, i);
        ck_assert_int_ge(g, 0);
        ck_assert_str_eq(kt_search_family_key(f, g), want);
        if (strcmp(want, "conv2d_nhwc") == 0) {
            if (conv_family < 0)
                conv_family = g;
            ck_assert_int_eq(g, conv_family);   /* every conv2d, whatever its epilogue */
            nconv++;
        } else {
            ck_assert_int_ne(g, conv_family);
            ck_assert_int_lt(g, 8);
            ck_assert_int_eq(seen[g], 0);        /* one task per other family in ResNet-18 */
            seen[g] = 1;
        }
    }
    ck_assert_int_ge(nconv, 10);
    ck_assert_int_eq(kt_search_family_count(f), 5);   /* conv2d, max pool, global pool, dense, softmax */
    int members[64], nm = 0;
    ck_assert_int_eq(kt_search_family_tasks(f, conv_family, members, 64, &nm), 0);
    ck_assert_int_eq(nm, nconv);
    /* one model per family, shared by its tasks' policies */
    for (int i = 0; i < n; i++)
        ck_assert_ptr_eq(kt_search_model(kt_search_family_policy(f, i)),
                         kt_search_family_model(f, kt_search_family_of(f, i)));
    kt_search_family_free(f);

    /* family-hash: the conv2d tasks split by epilogue (bias+relu, add, none,
     * add+bias+relu, and the last unit's add+multiply+bias+relu), identical
     * sequences share one family */
    o.policy = "sketch.xgb.family-hash";
    f = kt_search_family_new(wl, n, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 5 + 4);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            int same = kt_search_family_op_hash(kt_workload_dag(wl[i])) ==
                       kt_search_family_op_hash(kt_workload_dag(wl[k]));
            ck_assert_int_eq(kt_search_family_of(f, i) == kt_search_family_of(f, k), same);
        }
    kt_search_family_free(f);

    o.policy = "sketch.xgb.family-none";
    f = kt_search_family_new(wl, n, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), n);
    ck_assert_str_eq(kt_search_family_key(f, 3), "task3");
    kt_search_family_free(f);
    free(wl);
    kt_net_tasks_free(ts);
    kt_net_free(net);
}
END_TEST

START_TEST(family_hash_groups_identical_operator_sequences)
{
    kt_workload_t *w[5] = {
        conv(14, 8, 8, "\"bias_add\",\"relu\""),
        conv(7, 16, 8, "\"bias_add\",\"relu\""),   /* other shapes, same sequence */
        conv(14, 8, 8, "\"bias_add\",\"add\",\"relu\""),
        matmul(32, 32, 32),
        matmul(64, 16, 8),
    };
    const kt_workload_t *wl[5] = {w[0], w[1], w[2], w[3], w[4]};
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-hash", 100);
    kt_search_family_t *f = kt_search_family_new(wl, 5, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 3);
    ck_assert_int_eq(kt_search_family_of(f, 0), kt_search_family_of(f, 1));
    ck_assert_int_ne(kt_search_family_of(f, 0), kt_search_family_of(f, 2));
    ck_assert_int_eq(kt_search_family_of(f, 3), kt_search_family_of(f, 4));
    ck_assert_int_ne(kt_search_family_of(f, 2), kt_search_family_of(f, 3));
    ck_assert_uint_eq(strlen(kt_search_family_key(f, 0)), 16);
    kt_search_family_free(f);

    /* by anchor operator the three convolutions are one family */
    o.policy = "sketch.xgb.family-op";
    f = kt_search_family_new(wl, 5, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 2);
    ck_assert_int_eq(kt_search_family_of(f, 0), kt_search_family_of(f, 2));
    ck_assert_str_eq(kt_search_family_key(f, kt_search_family_of(f, 3)), "matmul");
    kt_search_family_free(f);

    /* sketch.random: no families, a model each */
    o.policy = "sketch.random";
    f = kt_search_family_new(wl, 5, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 0);
    ck_assert_int_eq(kt_search_family_of(f, 0), -1);
    ck_assert_ptr_ne(kt_search_model(kt_search_family_policy(f, 3)),
                     kt_search_model(kt_search_family_policy(f, 4)));
    kt_search_family_free(f);

    /* sketch.xgb: one family of every task (Ansor's one model) */
    o.policy = "sketch.xgb";
    f = kt_search_family_new(wl, 5, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 1);
    ck_assert_str_eq(kt_search_family_key(f, 0), "all");
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(kt_search_family_of(f, i), 0);
        ck_assert_ptr_eq(kt_search_model(kt_search_family_policy(f, i)),
                         kt_search_family_model(f, 0));
    }
    kt_search_family_free(f);
    /* ... but a single task keeps its policy's own model, as before */
    f = kt_search_family_new(wl, 1, NULL, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_search_family_count(f), 0);
    ck_assert_ptr_null(kt_search_family_model(f, 0));
    kt_search_family_free(f);
    for (int i = 0; i < 5; i++)
        kt_workload_free(w[i]);
}
END_TEST

START_TEST(family_models_train_on_all_records_in_warmup_then_on_their_family)
{
    kt_workload_t *w[3] = {matmul(32, 32, 32), matmul(64, 16, 16), dense(4, 32, 32)};
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    kt_sched_params_t p;
    params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-op", 1000);   /* random scores: no foresee here */
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    int gm = kt_search_family_of(f, 0), gd = kt_search_family_of(f, 2);
    ck_assert_int_eq(kt_search_family_of(f, 1), gm);
    ck_assert_int_ne(gm, gd);

    /* warm-up: every record goes to both models */
    int a = round_of(f, wl, 0, 6);
    ck_assert_uint_eq(samples(f, gm), (size_t)a);
    ck_assert_uint_eq(samples(f, gd), (size_t)a);
    int b = round_of(f, wl, 2, 5);
    ck_assert_uint_eq(samples(f, gm), (size_t)(a + b));
    ck_assert_uint_eq(samples(f, gd), (size_t)(a + b));
    ck_assert_int_eq(kt_search_family_warmup_done(f), 0);

    /* task 1's first records end the warm-up: each model keeps its family's */
    int c = round_of(f, wl, 1, 4);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 1);
    ck_assert_uint_eq(samples(f, gm), (size_t)(a + c));
    ck_assert_uint_eq(samples(f, gd), (size_t)b);

    /* afterwards: a task's records reach its family's model only */
    int d = round_of(f, wl, 0, 3);
    ck_assert_uint_eq(samples(f, gm), (size_t)(a + c + d));
    ck_assert_uint_eq(samples(f, gd), (size_t)b);
    int e = round_of(f, wl, 2, 3);
    ck_assert_uint_eq(samples(f, gm), (size_t)(a + c + d));
    ck_assert_uint_eq(samples(f, gd), (size_t)(b + e));
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}
END_TEST

START_TEST(family_foresee_scores_the_other_tasks_of_the_family)
{
    kt_workload_t *w[3] = {matmul(32, 32, 32), matmul(64, 16, 16), dense(4, 32, 32)};
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    kt_sched_params_t p;
    params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-op", 0);   /* the model is trusted at once */
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    round_of(f, wl, 0, 8);
    ck_assert(kt_model_is_trained(kt_search_family_model(f, kt_search_family_of(f, 0))));
    kt_search_stats_t s0, s1, s2;
    kt_search_stats(kt_search_family_policy(f, 0), &s0);
    kt_search_stats(kt_search_family_policy(f, 1), &s1);
    kt_search_stats(kt_search_family_policy(f, 2), &s2);
    ck_assert_uint_eq(s0.foresee_passes, 0);   /* not for the measured task itself */
    ck_assert_uint_eq(s1.foresee_passes, 1);   /* its family's other task */
    ck_assert_uint_eq(s2.foresee_passes, 0);   /* another family */
    ck_assert_int_gt(s1.foresight, 0);
    ck_assert_int_le(s1.foresight, o.foresee_keep);
    ck_assert_uint_eq(s1.rounds, 0);           /* a pass is not a round of the task */
    ck_assert_uint_eq(s1.proposed, 0);

    /* the kept states seed task 1's next round, and are used up by it */
    int kept = s1.foresight;
    round_of(f, wl, 1, 4);
    kt_search_stats(kt_search_family_policy(f, 1), &s1);
    ck_assert_int_eq(s1.last_from_foresight, kept);
    ck_assert_int_eq(s1.foresight, 0);
    /* task 1's feedback foresees for task 0 in turn */
    kt_search_stats(kt_search_family_policy(f, 0), &s0);
    ck_assert_uint_eq(s0.foresee_passes, 1);
    ck_assert_int_gt(s0.foresight, 0);
    kt_search_family_free(f);

    /* family-none: no other member, no pass */
    o.policy = "sketch.xgb.family-none";
    f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    round_of(f, wl, 0, 6);
    for (int i = 0; i < 3; i++) {
        kt_search_stats(kt_search_family_policy(f, i), &s0);
        ck_assert_uint_eq(s0.foresee_passes, 0);
    }
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}
END_TEST

/* A first run that measures every task once: each task's best state (JSON,
 * malloc'd) and cost stand for the store's records of the task. */
static void first_run_bests(const kt_workload_t *const *wl, const kt_sched_params_t *p,
                            const kt_search_opts_t *o, char *json[3], double cost[3])
{
    kt_search_family_t *f = kt_search_family_new(wl, 3, p, o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    for (int t = 0; t < 3; t++) {
        round_of(f, wl, t, 4);
        ck_assert_int_eq(kt_search_best(kt_search_family_policy(f, t), &cost[t], &json[t]), 0);
    }
    kt_search_family_free(f);
}

/* Task t's next proposals never include the stored state `json`. */
static void check_not_proposed(kt_search_family_t *f, const kt_workload_t *w, int t,
                               const char *json)
{
    kt_sched_state_t **st = NULL;
    int n = kt_search_family_propose(f, t, 4, &st);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) {
        char *j = kt_sched_state_to_json(st[i], kt_workload_dag(w));
        ck_assert_str_ne(j, json);
        free(j);
        kt_sched_state_free(st[i]);
    }
    free(st);
}

START_TEST(family_resume_trains_family_models_on_preloaded_records)
{
    kt_workload_t *w[3] = {matmul(32, 32, 32), matmul(64, 16, 16), dense(4, 32, 32)};
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    kt_sched_params_t p;
    params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb.family-op", 1000);
    char *json[3];
    double cost[3];
    first_run_bests(wl, &p, &o, json, cost);

    /* resumed: preloads train the family models at the first sync */
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    for (int t = 0; t < 3; t++) {
        ck_assert_int_eq(kt_search_preload(kt_search_family_policy(f, t), json[t], cost[t]), 0);
        free(json[t]);
    }
    int gm = kt_search_family_of(f, 0), gd = kt_search_family_of(f, 2);
    ck_assert_uint_eq(samples(f, gm), 0);
    ck_assert_int_eq(kt_search_family_sync(f), 0);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 1);   /* every task has records */
    ck_assert_uint_eq(samples(f, gm), 2);
    ck_assert_uint_eq(samples(f, gd), 1);
    /* a stored state is never proposed again */
    double best;
    char *bj = NULL;
    ck_assert_int_eq(kt_search_best(kt_search_family_policy(f, 2), &best, &bj), 0);
    check_not_proposed(f, w[2], 2, bj);
    free(bj);
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}
END_TEST

START_TEST(family_model_keep_tasks_drops_other_tasks_and_retrains)
{
    /* two tasks, one feature: task 7's rows say fast when x is large */
    float rows[8] = {1, 2, 3, 4, 1, 2, 3, 4};
    uint32_t nrows[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    double costs[8] = {4, 3, 2, 1, 1, 2, 3, 4};
    uint64_t tasks[8] = {7, 7, 7, 7, 9, 9, 9, 9};
    kt_model_params_t mp;
    kt_model_params_default(&mp);
    mp.num_warmup_sample = 0;
    mp.tree_method = KT_MODEL_TREE_HIST;
    kt_model_t *m = kt_model_new(KT_MODEL_XGB, &mp);
    ck_assert_ptr_nonnull(m);
    kt_model_batch_t b = {.rows = rows, .nrows = nrows, .nprog = 8, .nfeat = 1};
    ck_assert_int_eq(kt_model_update(m, &b, costs, tasks), 0);
    unsigned trained = kt_model_num_trainings(m);
    uint64_t keep = 7;
    ck_assert_int_eq(kt_model_keep_tasks(m, &keep, 1), 0);
    ck_assert_uint_eq(kt_model_num_samples(m), 4);
    ck_assert_uint_eq(kt_model_num_trainings(m), trained + 1);
    float sc[8];
    kt_model_batch_t q = {.rows = rows, .nrows = nrows, .nprog = 4, .nfeat = 1};
    ck_assert_int_eq(kt_model_predict(m, &q, sc), 0);
    ck_assert_msg(sc[3] > sc[0], "task 7 alone: x=4 (%g) beats x=1 (%g)", sc[3], sc[0]);
    /* keeping what is there changes nothing; keeping nothing forgets the booster */
    ck_assert_int_eq(kt_model_keep_tasks(m, &keep, 1), 0);
    ck_assert_uint_eq(kt_model_num_trainings(m), trained + 1);
    ck_assert_int_eq(kt_model_keep_tasks(m, NULL, 0), 0);
    ck_assert_uint_eq(kt_model_num_samples(m), 0);
    ck_assert_int_eq(kt_model_is_trained(m), 0);
    kt_model_free(m);
    kt_model_t *r = kt_model_new(KT_MODEL_RANDOM, NULL);
    ck_assert_int_eq(kt_model_keep_tasks(r, &keep, 1), KT_EINVAL);
    kt_model_free(r);
}
END_TEST

/* Two matmul tasks (one family by anchor) and a dense one, one-core params. */
static void three_tasks(kt_workload_t *w[3], const kt_workload_t *wl[3], kt_sched_params_t *p)
{
    w[0] = matmul(32, 32, 32);
    w[1] = matmul(64, 16, 16);
    w[2] = dense(4, 32, 32);
    for (int i = 0; i < 3; i++)
        wl[i] = w[i];
    params(p);
}

/* The scores task t's model gives its states st[0..n) (features + predict,
 * as the search scores). */
static float *scores_of(kt_search_family_t *f, const kt_workload_t *w, int t,
                        kt_sched_state_t *const *st, int n)
{
    float *rows = NULL, *sc = malloc((size_t)n * sizeof *sc);
    uint32_t *counts = malloc((size_t)n * sizeof *counts);
    ck_assert(sc && counts);
    ck_assert_int_eq(kt_feature_extract_batch(kt_workload_dag(w),
                                              (const kt_sched_state_t *const *)st, n, &rows,
                                              counts), 0);
    kt_model_batch_t b = {.rows = rows, .nrows = counts, .nprog = (size_t)n,
                          .nfeat = KT_FEATURE_COUNT};
    ck_assert_int_eq(kt_model_predict(kt_search_model(kt_search_family_policy(f, t)), &b, sc), 0);
    free(rows);
    free(counts);
    return sc;
}

/* Whether a new round of task 0 moves the scores task 1's model gives a
 * fixed set of task 1's states (after every task had a round). */
static int task0_moves_task1_scores(const char *policy)
{
    kt_workload_t *w[3];
    const kt_workload_t *wl[3];
    kt_sched_params_t p;
    kt_search_opts_t o;
    three_tasks(w, wl, &p);
    small_opts(&o, policy, 0);
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    for (int t = 0; t < 3; t++)
        round_of(f, wl, t, 6);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 1);
    ck_assert(kt_model_is_trained(kt_search_model(kt_search_family_policy(f, 1))));
    kt_sched_state_t **st = NULL;
    int n = kt_search_family_propose(f, 1, 8, &st);
    ck_assert_int_gt(n, 0);
    float *before = scores_of(f, w[1], 1, st, n);
    round_of(f, wl, 0, 8);
    float *after = scores_of(f, w[1], 1, st, n);
    int moved = memcmp(before, after, (size_t)n * sizeof *before) != 0;
    free(before);
    free(after);
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    free(st);
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
    return moved;
}

/* sketch.xgb in a job: one model for all tasks (Ansor's task scheduler), so
 * task 0's records change how task 1's states are scored; family-none keeps
 * one model per task, where they do not. */
START_TEST(family_sketch_xgb_task_records_train_the_other_tasks_model)
{
    ck_assert_msg(task0_moves_task1_scores("sketch.xgb"),
                  "sketch.xgb: task 0's round did not change task 1's scores");
    ck_assert_msg(!task0_moves_task1_scores("sketch.xgb.family-none"),
                  "family-none: task 0's round changed task 1's scores");
}
END_TEST

/* Ansor's warm-up (warmup=random): the shared model gets nothing, and so
 * scores at random, until every task has had a round; then it trains once
 * on all of them. warmup=model: it trains on every record at once and
 * guides the later tasks' first rounds once it has more than
 * num_warmup_sample records. */
START_TEST(family_sketch_xgb_warmup_is_random_until_every_task_had_a_round)
{
    kt_workload_t *w[3];
    const kt_workload_t *wl[3];
    kt_sched_params_t p;
    kt_search_opts_t o;
    three_tasks(w, wl, &p);
    small_opts(&o, "sketch.xgb", 4);
    ck_assert_int_eq(o.warmup, KT_SEARCH_WARMUP_RANDOM);
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    kt_model_t *m = kt_search_family_model(f, 0);
    int a = round_of(f, wl, 0, 6);
    int b = round_of(f, wl, 2, 5);
    ck_assert_int_gt(a + b, o.num_warmup_sample);   /* the model's own warm-up is over */
    ck_assert_uint_eq(kt_model_num_samples(m), 0);
    ck_assert_int_eq(kt_model_is_trained(m), 0);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 0);
    int c = round_of(f, wl, 1, 4);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 1);
    ck_assert_uint_eq(kt_model_num_samples(m), (size_t)(a + b + c));
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);   /* one training for all */
    ck_assert(kt_model_is_trained(m));
    int d = round_of(f, wl, 2, 4);
    ck_assert_uint_eq(kt_model_num_samples(m), (size_t)(a + b + c + d));
    kt_search_family_free(f);

    ck_assert_int_eq(kt_search_opts_set(&o, "warmup=model"), 0);
    f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    m = kt_search_family_model(f, 0);
    a = round_of(f, wl, 0, 6);
    ck_assert_uint_eq(kt_model_num_samples(m), (size_t)a);
    ck_assert(kt_model_is_trained(m));   /* task 2's first round is the model's */
    ck_assert_int_eq(kt_search_family_warmup_done(f), 0);
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}
END_TEST

/* Resume: records preloaded for only some tasks wait (the warm-up is not
 * over); once every task has records the shared model trains on all of
 * them in one training, as at the end of an uninterrupted warm-up. */
START_TEST(family_sketch_xgb_resume_trains_the_shared_model_on_preloads)
{
    kt_workload_t *w[3];
    const kt_workload_t *wl[3];
    kt_sched_params_t p;
    kt_search_opts_t o;
    three_tasks(w, wl, &p);
    small_opts(&o, "sketch.xgb", 1);
    char *json[3];
    double cost[3];
    first_run_bests(wl, &p, &o, json, cost);

    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    kt_model_t *m = kt_search_family_model(f, 0);
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(kt_search_preload(kt_search_family_policy(f, t), json[t], cost[t]), 0);
    ck_assert_int_eq(kt_search_family_sync(f), 0);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 0);
    ck_assert_uint_eq(kt_model_num_samples(m), 0);
    ck_assert_int_eq(kt_search_preload(kt_search_family_policy(f, 2), json[2], cost[2]), 0);
    ck_assert_int_eq(kt_search_family_sync(f), 0);
    ck_assert_int_eq(kt_search_family_warmup_done(f), 1);
    ck_assert_uint_eq(kt_model_num_samples(m), 3);
    ck_assert_uint_eq(kt_model_num_trainings(m), 1);
    ck_assert_int_eq(kt_search_family_sync(f), 0);   /* nothing new: nothing again */
    ck_assert_uint_eq(kt_model_num_samples(m), 3);
    check_not_proposed(f, w[2], 2, json[2]);   /* a stored state is never proposed again */
    for (int t = 0; t < 3; t++)
        free(json[t]);
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}
END_TEST

/* Append states st[0..n) of workload w as JSON lines to *all (len, cap)
 * and give each a synthetic cost from its hash into costs. */
static void append_states(char **all, size_t *len, size_t *cap, const kt_workload_t *w,
                          kt_sched_state_t *const *st, int n, double *costs)
{
    for (int i = 0; i < n; i++) {
        costs[i] = synth_cost(st[i], w);
        char *j = kt_sched_state_to_json(st[i], kt_workload_dag(w));
        ck_assert_ptr_nonnull(j);
        size_t l = strlen(j);
        while (*len + l + 2 > *cap)
            ck_assert_ptr_nonnull(*all = realloc(*all, *cap *= 2));
        memcpy(*all + *len, j, l);
        *len += l;
        (*all)[(*len)++] = '\n';
        (*all)[*len] = '\0';
        free(j);
    }
}

/* A seeded sketch.xgb job over three_tasks (one shared model); population
 * > 0 sets the evolutionary search's. */
static kt_search_family_t *xgb_job(kt_workload_t *w[3], uint64_t seed, int population)
{
    const kt_workload_t *wl[3];
    kt_sched_params_t p;
    kt_search_opts_t o;
    three_tasks(w, wl, &p);
    small_opts(&o, "sketch.xgb", 4);
    o.seed = seed;
    if (population > 0)
        o.evolutionary_search_population = population;
    kt_search_family_t *f = kt_search_family_new(wl, 3, &p, &o);
    ck_assert_msg(f != NULL, "%s", kt_err_msg());
    return f;
}

static void xgb_job_free(kt_search_family_t *f, kt_workload_t *w[3])
{
    kt_search_family_free(f);
    for (int i = 0; i < 3; i++)
        kt_workload_free(w[i]);
}

/* Every proposal of rounds over tasks 0, 1, 2, 0, 1 of a seeded sketch.xgb
 * job, as JSON lines. */
static char *job_proposals(kt_pool_t *pool, uint64_t seed)
{
    kt_workload_t *w[3];
    kt_search_family_t *f = xgb_job(w, seed, 150);   /* 3 chunks of feature extraction */
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    kt_search_family_set_pool(f, pool);
    size_t len = 0, cap = 1 << 16;
    char *all = malloc(cap);
    ck_assert_ptr_nonnull(all);
    all[0] = '\0';
    static const int order[5] = {0, 1, 2, 0, 1};
    for (int r = 0; r < 5; r++) {
        int t = order[r];
        kt_sched_state_t **st = NULL;
        int got = kt_search_family_propose(f, t, 6, &st);
        ck_assert_int_gt(got, 0);
        double costs[6];
        append_states(&all, &len, &cap, wl[t], st, got, costs);
        ck_assert_int_eq(kt_search_family_feedback(f, t, st, costs, got), 0);
        for (int i = 0; i < got; i++)
            kt_sched_state_free(st[i]);
        free(st);
    }
    ck_assert(kt_model_is_trained(kt_search_family_model(f, 0)));
    xgb_job_free(f, w);
    return all;
}

/* --search-threads: the shared model's job proposes the same states for a
 * seed whatever the width of the pool that extracts features. */
START_TEST(family_sketch_xgb_proposals_do_not_depend_on_search_threads)
{
    char *one = job_proposals(NULL, 77);
    kt_pool_t *pool = kt_pool_new(3);
    ck_assert_msg(pool != NULL, "%s", kt_err_msg());
    char *par = job_proposals(pool, 77);
    ck_assert_msg(strcmp(one, par) == 0, "3 threads proposed other states than one");
    kt_pool_free(pool);
    char *other = job_proposals(NULL, 78);
    ck_assert_str_ne(one, other);
    free(other);
    free(par);
    free(one);
}
END_TEST

/* ---- different tasks searched at once (--search-threads) ---------------------- */

/* Wait (under mu) until *flag is set or the guard against a hung test (60
 * s, not a timing check) runs out; the flag's value. */
static int wait_flag(pthread_mutex_t *mu, pthread_cond_t *cv, const int *flag)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 60;
    int rc = 0;
    while (!*flag && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(cv, mu, &ts);
    return *flag;
}

/* One wave of a sketch.xgb job's three tasks: each proposes (how, below),
 * then all are fed back in task order, as a caller with deterministic sync
 * points does. */
typedef struct {
    kt_search_family_t *f;
    kt_sched_state_t **st[3];
    int got[3];
    int next;             /* the next task a worker thread takes */
    pthread_mutex_t mu;
} wave_t;

static void wave_propose(wave_t *w, int t)
{
    w->got[t] = kt_search_family_propose(w->f, t, 6, &w->st[t]);
}

static void *wave_worker(void *arg)
{
    wave_t *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int t = w->next++;
        pthread_mutex_unlock(&w->mu);
        if (t >= 3)
            return NULL;
        wave_propose(w, t);
    }
}

/* Records to preload: a round of up to 4 states of each task of another
 * seeded job, as JSON, with round_of's synthetic costs. */
typedef struct {
    char *json[3][4];
    double cost[3][4];
    int n[3];
} preloads_t;

static void preloads_make(preloads_t *pl)
{
    kt_workload_t *w[3];
    kt_search_family_t *f = xgb_job(w, 5, 0);
    for (int t = 0; t < 3; t++) {
        kt_sched_state_t **st = NULL;
        int got = kt_search_family_propose(f, t, 4, &st);
        ck_assert_msg(got > 0 && got <= 4, "task %d: %s", t, kt_err_msg());
        pl->n[t] = got;
        for (int i = 0; i < got; i++) {
            pl->cost[t][i] = synth_cost(st[i], w[t]);
            ck_assert_ptr_nonnull(pl->json[t][i] = kt_sched_state_to_json(st[i],
                                                                          kt_workload_dag(w[t])));
            kt_sched_state_free(st[i]);
        }
        free(st);
    }
    xgb_job_free(f, w);
}

static void preloads_free(preloads_t *pl)
{
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < pl->n[t]; i++)
            free(pl->json[t][i]);
}

/* Every proposal of 3 waves of a seeded sketch.xgb job over three tasks, as
 * JSON lines in task order. how 0: one thread proposes tasks 0, 1, 2;
 * 1: one thread, tasks 2, 1, 0; 2: two threads take the tasks as they
 * come, so two searches run at once. pl: records preloaded first (a
 * resumed job: the first propose's sync trains the model on them). */
static char *wave_proposals(int how, const preloads_t *pl)
{
    kt_workload_t *w[3];
    wave_t wv = {.f = xgb_job(w, 91, 0)};
    for (int t = 0; pl && t < 3; t++)
        for (int i = 0; i < pl->n[t]; i++)
            ck_assert_int_eq(kt_search_preload(kt_search_family_policy(wv.f, t), pl->json[t][i],
                                               pl->cost[t][i]), 0);
    pthread_mutex_init(&wv.mu, NULL);
    size_t len = 0, cap = 1 << 16;
    char *all = malloc(cap);
    ck_assert_ptr_nonnull(all);
    all[0] = '\0';
    for (int r = 0; r < 3; r++) {
        if (how == 2) {
            wv.next = 0;
            pthread_t th[2];
            for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_create(&th[i], NULL, wave_worker, &wv), 0);
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
        } else {
            for (int i = 0; i < 3; i++)
                wave_propose(&wv, how == 0 ? i : 2 - i);
        }
        for (int t = 0; t < 3; t++) {
            ck_assert_msg(wv.got[t] > 0, "wave %d task %d: %s", r, t, kt_err_msg());
            double costs[6];
            append_states(&all, &len, &cap, w[t], wv.st[t], wv.got[t], costs);
            ck_assert_int_eq(kt_search_family_feedback(wv.f, t, wv.st[t], costs, wv.got[t]), 0);
            for (int i = 0; i < wv.got[t]; i++)
                kt_sched_state_free(wv.st[t][i]);
            free(wv.st[t]);
        }
    }
    ck_assert(kt_search_family_warmup_done(wv.f));
    ck_assert(kt_model_is_trained(kt_search_family_model(wv.f, 0)));
    pthread_mutex_destroy(&wv.mu);
    xgb_job_free(wv.f, w);
    return all;
}

/* Searches of different tasks may run at once on the shared model, so a
 * task's proposals must not depend on which other task searched first: the
 * random scores of the warm-up come from each task's generator, not from
 * the one model's (which the first search to score would advance). The
 * same records whether one thread proposes in either order or two threads
 * propose at once. */
START_TEST(family_sketch_xgb_proposals_do_not_depend_on_task_order_or_overlap)
{
    char *fwd = wave_proposals(0, NULL);
    char *rev = wave_proposals(1, NULL);
    ck_assert_msg(strcmp(fwd, rev) == 0, "proposing tasks 2, 1, 0 changed their proposals");
    for (int rep = 0; rep < 2; rep++) {
        char *par = wave_proposals(2, NULL);
        ck_assert_msg(strcmp(fwd, par) == 0, "two threads proposed other states than one");
        free(par);
    }
    free(rev);
    free(fwd);
}
END_TEST

/* A resumed job: the first propose's sync trains the shared model on the
 * preloaded records holding the family's lock, so a search of another task
 * that starts meanwhile waits and scores with the trained model too. A
 * sync that trained beside the searches let the other search score at
 * random: two threads proposed other states than one. */
START_TEST(family_sketch_xgb_proposals_after_preloads_do_not_depend_on_overlap)
{
    preloads_t pl = {0};
    preloads_make(&pl);
    char *fwd = wave_proposals(0, &pl);
    char *fresh = wave_proposals(0, NULL);
    ck_assert_msg(strcmp(fwd, fresh) != 0, "the preloads changed no proposal");
    for (int rep = 0; rep < 3; rep++) {
        char *par = wave_proposals(2, &pl);
        ck_assert_msg(strcmp(fwd, par) == 0, "two threads proposed other states than one");
        free(par);
    }
    free(fresh);
    free(fwd);
    preloads_free(&pl);
}
END_TEST

/* Meeting point of two tasks' searches: the first time each task's search
 * asks whether a state was measured, it waits for the other task's search
 * to ask too. Searches that cannot overlap leave the first one waiting
 * until the guard (a bound against a hung test, not a timing check) runs
 * out. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived[2];
    int met[2];           /* task i saw the other arrive while it was searching */
} meet_t;

typedef struct {
    meet_t *m;
    int task;
} meet_arg_t;

static int meet_has_measured(void *user, uint64_t h)
{
    (void)h;
    meet_arg_t *a = user;
    meet_t *m = a->m;
    pthread_mutex_lock(&m->mu);
    if (!m->arrived[a->task]) {
        m->arrived[a->task] = 1;
        pthread_cond_broadcast(&m->cv);
        m->met[a->task] = wait_flag(&m->mu, &m->cv, &m->arrived[1 - a->task]);
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

typedef struct {
    kt_search_family_t *f;
    int task, got;
    kt_sched_state_t **st;
} propose_arg_t;

static void *propose_thread(void *arg)
{
    propose_arg_t *a = arg;
    a->got = kt_search_family_propose(a->f, a->task, 4, &a->st);
    return NULL;
}

/* --search-threads under sketch.xgb's one model: two tasks' searches run at
 * once, before the model trains (the warm-up) and after. A family that
 * held one lock over each whole search met neither time. */
START_TEST(family_sketch_xgb_searches_of_two_tasks_overlap)
{
    kt_workload_t *w[3];
    kt_search_family_t *f = xgb_job(w, 11, 0);
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {   /* a round of every task: the shared model trains */
            for (int t = 0; t < 3; t++) {
                kt_search_set_has_measured(kt_search_family_policy(f, t), NULL, NULL);
                ck_assert_int_gt(round_of(f, wl, t, 4), 0);
            }
            ck_assert(kt_model_is_trained(kt_search_family_model(f, 0)));
        }
        meet_t m = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
        meet_arg_t ma[2] = {{&m, 0}, {&m, 1}};
        propose_arg_t pa[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            kt_search_set_has_measured(kt_search_family_policy(f, i), meet_has_measured, &ma[i]);
            pa[i] = (propose_arg_t){.f = f, .task = i};
            ck_assert_int_eq(pthread_create(&th[i], NULL, propose_thread, &pa[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++) {
            ck_assert_msg(pa[i].got > 0, "task %d: %s", i, kt_err_msg());
            ck_assert_msg(m.met[i], "phase %d: task %d searched alone", phase, i);
            for (int k = 0; k < pa[i].got; k++)
                kt_sched_state_free(pa[i].st[k]);
            free(pa[i].st);
        }
    }
    xgb_job_free(f, w);
}
END_TEST

/* A search held at its first question about a measured state until the
 * test releases it (or the guard against a hung test runs out). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, released, held_through;
} hold_t;

static int hold_has_measured(void *user, uint64_t h)
{
    (void)h;
    hold_t *g = user;
    pthread_mutex_lock(&g->mu);
    if (!g->arrived) {
        g->arrived = 1;
        pthread_cond_broadcast(&g->cv);
        g->held_through = wait_flag(&g->mu, &g->cv, &g->released);
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* sketch.xgb's one model trains on a task's feedback while another task's
 * search is in progress (it scores with a snapshot of the model), so the
 * training step of one round does not wait for the searches of the
 * others. A family that excluded searches while training made the
 * feedback wait until the held search gave up. */
START_TEST(family_sketch_xgb_model_trains_while_another_task_searches)
{
    kt_workload_t *w[3];
    kt_search_family_t *f = xgb_job(w, 11, 0);
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]};
    for (int t = 0; t < 3; t++)
        ck_assert_int_gt(round_of(f, wl, t, 4), 0);
    kt_model_t *m = kt_search_family_model(f, 0);
    ck_assert(kt_model_is_trained(m));
    hold_t g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    kt_search_set_has_measured(kt_search_family_policy(f, 0), hold_has_measured, &g);
    propose_arg_t pa = {.f = f, .task = 0};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, propose_thread, &pa), 0);
    pthread_mutex_lock(&g.mu);
    int arrived = wait_flag(&g.mu, &g.cv, &g.arrived);
    pthread_mutex_unlock(&g.mu);
    ck_assert_msg(arrived, "task 0's search never asked about a measured state");
    unsigned before = kt_model_num_trainings(m);
    ck_assert_int_gt(round_of(f, wl, 1, 4), 0);   /* task 1: search, feedback, training */
    ck_assert_uint_gt(kt_model_num_trainings(m), before);
    pthread_mutex_lock(&g.mu);
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(th, NULL);
    ck_assert_msg(pa.got > 0, "%s", kt_err_msg());
    ck_assert_msg(g.held_through, "task 1's feedback waited for task 0's search to end");
    for (int k = 0; k < pa.got; k++)
        kt_sched_state_free(pa.st[k]);
    free(pa.st);
    xgb_job_free(f, w);
}
END_TEST

/* A gate at the shared model's training hook: counts the trainings and
 * their records and holds the first one until the test releases it (or
 * the guard against a hung test runs out). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls, held, released, held_through;
    int nrec[8];
} train_gate_t;

static void gate_hook(void *user, int nrecords)
{
    train_gate_t *g = user;
    pthread_mutex_lock(&g->mu);
    if (g->calls < 8)
        g->nrec[g->calls] = nrecords;
    if (g->calls++ == 0) {
        g->held = 1;
        pthread_cond_broadcast(&g->cv);
        g->held_through = wait_flag(&g->mu, &g->cv, &g->released);
    }
    pthread_mutex_unlock(&g->mu);
}

/* One task's proposal and its synthetic costs (as round_of gives them). */
typedef struct {
    kt_search_family_t *f;
    int task, got, rc;
    kt_sched_state_t **st;
    double costs[8];
} fb_arg_t;

static void fb_propose(fb_arg_t *a, kt_search_family_t *f, const kt_workload_t *w, int task)
{
    *a = (fb_arg_t){.f = f, .task = task};
    a->got = kt_search_family_propose(f, task, 4, &a->st);
    ck_assert_msg(a->got > 0 && a->got <= 8, "task %d: %s", task, kt_err_msg());
    for (int i = 0; i < a->got; i++)
        a->costs[i] = synth_cost(a->st[i], w);
}

static void *feedback_thread(void *arg)
{
    fb_arg_t *a = arg;
    a->rc = kt_search_family_feedback(a->f, a->task, a->st, a->costs, a->got);
    return NULL;
}

static void fb_free(fb_arg_t *a)
{
    for (int i = 0; i < a->got; i++)
        kt_sched_state_free(a->st[i]);
    free(a->st);
}

/* sketch.xgb's one model: feedbacks that come while it trains do not wait
 * for the training and do not train once each; the next sync trains once
 * on all of them, and the model it leaves is the one a single training on
 * the same records gives (a second job fed the same records, those of
 * tasks 1 and 2 preloaded and synced in one go). A family that trained
 * once per feedback held the queued feedbacks until the guard ran out and
 * trained three times. */
START_TEST(family_sketch_xgb_feedbacks_queued_behind_a_training_train_once)
{
    kt_workload_t *w[3], *w2[3];
    kt_search_family_t *f = xgb_job(w, 11, 0), *ref = xgb_job(w2, 11, 0);
    const kt_workload_t *wl[3] = {w[0], w[1], w[2]}, *wl2[3] = {w2[0], w2[1], w2[2]};
    for (int t = 0; t < 3; t++) {
        ck_assert_int_gt(round_of(f, wl, t, 4), 0);
        ck_assert_int_gt(round_of(ref, wl2, t, 4), 0);
    }
    kt_model_t *m = kt_search_family_model(f, 0), *mr = kt_search_family_model(ref, 0);
    ck_assert(kt_model_is_trained(m));
    fb_arg_t a[3];
    for (int t = 0; t < 3; t++)
        fb_propose(&a[t], f, wl[t], t);
    train_gate_t g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    kt_search_family_set_train_hook(f, gate_hook, &g);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, feedback_thread, &a[0]), 0);
    pthread_mutex_lock(&g.mu);
    int held = wait_flag(&g.mu, &g.cv, &g.held);
    pthread_mutex_unlock(&g.mu);
    ck_assert_msg(held, "task 0's feedback did not train the model");
    for (int t = 1; t < 3; t++)
        ck_assert_int_eq(kt_search_family_feedback(f, t, a[t].st, a[t].costs, a[t].got), 0);
    pthread_mutex_lock(&g.mu);
    int calls = g.calls;
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(th, NULL);
    ck_assert_msg(a[0].rc == 0, "%s", kt_err_msg());
    ck_assert_msg(g.held_through, "the queued feedbacks waited for the training");
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(kt_search_family_sync(f), 0);
    ck_assert_int_eq(g.calls, 2);   /* exactly one more training, for both */
    ck_assert_int_eq(kt_search_family_sync(f), 0);
    ck_assert_int_eq(g.calls, 2);
    ck_assert_int_eq(g.nrec[0], a[0].got);
    ck_assert_int_eq(g.nrec[1], a[1].got + a[2].got);

    ck_assert_int_eq(kt_search_family_feedback(ref, 0, a[0].st, a[0].costs, a[0].got), 0);
    for (int t = 1; t < 3; t++)
        for (int i = 0; i < a[t].got; i++) {
            char *j = kt_sched_state_to_json(a[t].st[i], kt_workload_dag(wl2[t]));
            ck_assert_ptr_nonnull(j);
            ck_assert_int_eq(kt_search_preload(kt_search_family_policy(ref, t), j, a[t].costs[i]),
                             0);
            free(j);
        }
    ck_assert_int_eq(kt_search_family_sync(ref), 0);
    ck_assert_uint_eq(kt_model_num_samples(m), kt_model_num_samples(mr));
    ck_assert_uint_eq(kt_model_num_trainings(m), kt_model_num_trainings(mr));
    for (int t = 0; t < 3; t++) {
        float *got = scores_of(f, w[t], t, a[t].st, a[t].got);
        float *want = scores_of(ref, w2[t], t, a[t].st, a[t].got);
        ck_assert_msg(memcmp(got, want, (size_t)a[t].got * sizeof *got) == 0,
                      "task %d: the model differs from one trained in one go", t);
        free(got);
        free(want);
    }
    for (int t = 0; t < 3; t++)
        fb_free(&a[t]);
    xgb_job_free(ref, w2);
    xgb_job_free(f, w);
}
END_TEST

static Suite *family_suite(void)
{
    Suite *s = suite_create("family");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, family_policy_names_are_checked_with_clear_errors);
    tcase_add_test(tc, family_op_groups_resnet18_tasks_by_anchor_operator);
    tcase_add_test(tc, family_hash_groups_identical_operator_sequences);
    tcase_add_test(tc, family_models_train_on_all_records_in_warmup_then_on_their_family);
    tcase_add_test(tc, family_foresee_scores_the_other_tasks_of_the_family);
    tcase_add_test(tc, family_resume_trains_family_models_on_preloaded_records);
    tcase_add_test(tc, family_model_keep_tasks_drops_other_tasks_and_retrains);
    tcase_add_test(tc, family_sketch_xgb_task_records_train_the_other_tasks_model);
    tcase_add_test(tc, family_sketch_xgb_warmup_is_random_until_every_task_had_a_round);
    tcase_add_test(tc, family_sketch_xgb_resume_trains_the_shared_model_on_preloads);
    tcase_add_test(tc, family_sketch_xgb_proposals_do_not_depend_on_search_threads);
    tcase_add_test(tc, family_sketch_xgb_proposals_do_not_depend_on_task_order_or_overlap);
    tcase_add_test(tc, family_sketch_xgb_proposals_after_preloads_do_not_depend_on_overlap);
    tcase_add_test(tc, family_sketch_xgb_searches_of_two_tasks_overlap);
    tcase_add_test(tc, family_sketch_xgb_model_trains_while_another_task_searches);
    tcase_add_test(tc, family_sketch_xgb_feedbacks_queued_behind_a_training_train_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(family_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
