/* Suite 'search': the sketch search policy (propose / feedback / preload),
 * candidates and local measurement. Small workloads and populations keep it
 * fast; measured costs are synthetic except in the local-measurement test. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature.h"
#include "measure/measurer.h"
#include "search/search.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/util.h"

#include "states_harness.h"

static kt_workload_t *workload(const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_msg(w != NULL, "workload: %s", kt_err_msg());
    return w;
}

static kt_workload_t *matmul(int m, int n, int k)
{
    char j[160];
    snprintf(j, sizeof(j), "{\"op\":\"matmul\",\"M\":%d,\"N\":%d,\"K\":%d}", m, n, k);
    return workload(j);
}

/* Small search options: population 64, 2 iterations. */
static void small_opts(kt_search_opts_t *o, const char *policy, uint64_t seed)
{
    kt_search_opts_default(o);
    o->policy = policy;
    o->seed = seed;
    o->evolutionary_search_population = 64;
    o->evolutionary_search_num_iters = 2;
    o->sample_init_min_population = 16;
    o->retry_search_one_round_on_empty = 2;
}

static void one_thread_params(kt_sched_params_t *p)
{
    kt_sched_params_default(p);
    p->num_cores = 1;
}

/* matmul 64^3 with one-thread parameters and small options. */
static kt_workload_t *small_matmul(kt_sched_params_t *p, kt_search_opts_t *o, const char *policy,
                                   uint64_t seed)
{
    one_thread_params(p);
    small_opts(o, policy, seed);
    return matmul(64, 64, 64);
}

static void free_states(kt_sched_state_t **st, int n)
{
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    free(st);
}

/* ---- synthetic measurement: cost from the tiled stage's split factors ---- */

/* A cost that depends smoothly on the tile sizes of the first tiled stage:
 * best when each spatial axis' innermost tile is 8 and its outer level
 * moderate, the reduce axis' inner tile 4, plus a unroll preference. Every
 * state has a finite positive cost; states without a tiled stage are slow. */
static double synthetic_cost(const kt_sched_state_t *st)
{
    for (int s = 0; s < st->nstages; s++) {
        const kt_sched_stage_t *e = &st->stages[s];
        if (e->kind != KT_SK_TILED)
            continue;
        double c = 1.0;
        for (int a = 0; a < 2; a++) {
            c += fabs(log2((double)e->split[a][3]) - 3.0);
            c += 0.5 * fabs(log2((double)e->split[a][2]) - 1.0);
        }
        c += fabs(log2((double)e->split[2][1]) - 2.0);
        c += e->ann.unroll == 64 ? 0 : 0.5;
        return 1e-3 * c;
    }
    return 1.0;
}

static int synthetic_measure(void *user, const kt_workload_t *w, kt_sched_state_t *const *states,
                             int n, kt_measure_result_t *results)
{
    (void)w;
    int *calls = user;
    if (calls)
        (*calls)++;
    for (int i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof(results[i]));
        results[i].costs = malloc(sizeof(double));
        ck_assert_ptr_nonnull(results[i].costs);
        results[i].costs[0] = results[i].mean = synthetic_cost(states[i]);
        results[i].n_costs = 1;
        results[i].number = 1;
        results[i].error_no = KT_MEASURE_NO_ERROR;
    }
    return 0;
}

static void free_results(kt_measure_result_t *r, int n)
{
    for (int i = 0; i < n; i++)
        kt_measure_result_clear(&r[i]);
    free(r);
}

/* ---- has_measured callback: a fixed set of hashes ---------------------------- */

typedef struct {
    uint64_t h[64];
    int n;
    int asked;
} hashset_t;

static int in_set(void *user, uint64_t h)
{
    hashset_t *s = user;
    s->asked++;
    for (int i = 0; i < s->n; i++)
        if (s->h[i] == h)
            return 1;
    return 0;
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(search_opts_default_are_ansors)
{
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    ck_assert_str_eq(o.policy, "sketch.xgb");
    ck_assert_double_eq(o.eps_greedy, 0.05);
    ck_assert_int_eq(o.sample_init_min_population, 50);
    ck_assert_double_eq(o.sample_init_use_measured_ratio, 0.2);
    ck_assert_int_eq(o.evolutionary_search_population, 2048);
    ck_assert_int_eq(o.evolutionary_search_num_iters, 4);
    ck_assert_double_eq(o.evolutionary_search_mutation_prob, 0.85);
    ck_assert_int_eq(o.retry_search_one_round_on_empty, 10);
    ck_assert_int_eq(o.num_warmup_sample, 16);   /* ktune's: guides the second round of 32 */
    ck_assert_int_eq(o.model_label, KT_MODEL_LABEL_RANK);   /* ktune's: pairwise objective */
    ck_assert_double_eq(o.diversity_filter_ratio, 0);       /* Ansor's pick */
    ck_assert_double_eq(o.tile_family_share, 0.25);         /* ktune's: 4+ tiles a round */
    ck_assert_int_eq(o.location_siblings, 2);                 /* ktune's; Ansor: 0 */
    ck_assert_int_eq(o.tile_siblings, 0);                     /* Ansor's; ktune's option */
    ck_assert_int_eq(o.restart_after, 0);                     /* Ansor's: one start */
    ck_assert_int_eq(o.direct_siblings, 1);                   /* ktune's; Ansor: 0 */
    ck_assert_int_eq(o.row_siblings, 1);                      /* ktune's; Ansor: 0 */
    ck_assert_int_eq(o.transfer, 8);                          /* ktune's; Ansor: none */
    ck_assert_int_eq(o.transfer_workloads, 4);
    kt_model_params_t mp;
    kt_search_model_params(&o, 5, &mp);
    ck_assert_int_eq(mp.label, KT_MODEL_LABEL_RANK);
    ck_assert_int_eq(mp.num_warmup_sample, 16);
    ck_assert_uint_eq(mp.seed, 5);
    ck_assert_int_eq(mp.weight_by_label, 1);   /* Ansor's: slow programs weigh little */
    o.model_label = KT_MODEL_LABEL_LOG;
    kt_search_model_params(&o, 5, &mp);
    ck_assert_int_eq(mp.label, KT_MODEL_LABEL_LOG);
}
END_TEST

START_TEST(search_opts_set_from_key_value_lists)
{
    kt_search_opts_t o, before;
    kt_search_opts_default(&o);
    ck_assert_int_eq(kt_search_opts_set(&o, ""), 0);   /* empty: nothing changes */
    ck_assert_double_eq(o.eps_greedy, 0.05);
    ck_assert_int_eq(kt_search_opts_set(&o, "eps_greedy=0.1,evolutionary_search_population=512,"
                                            "evolutionary_search_num_iters=2,model_label=log,"
                                            "num_warmup_sample=64,foresee_keep=16,"
                                            "diversity_filter_ratio=4,tile_family_share=0.25,"
                                            "location_siblings=0,tile_siblings=5,"
                                            "restart_after=128,direct_siblings=0,row_siblings=0,"
                                            "transfer=0,transfer_workloads=2"),
                     0);
    ck_assert_int_eq(o.transfer, 0);
    ck_assert_int_eq(o.transfer_workloads, 2);
    ck_assert_int_eq(o.warmup, KT_SEARCH_WARMUP_RANDOM);   /* the default: Ansor's */
    ck_assert_int_eq(kt_search_opts_set(&o, "warmup=model"), 0);
    ck_assert_int_eq(o.warmup, KT_SEARCH_WARMUP_MODEL);
    ck_assert_int_eq(kt_search_opts_set(&o, "warmup=random"), 0);
    ck_assert_int_eq(o.warmup, KT_SEARCH_WARMUP_RANDOM);
    ck_assert_double_eq(o.diversity_filter_ratio, 4);
    ck_assert_double_eq(o.tile_family_share, 0.25);
    ck_assert_int_eq(o.location_siblings, 0);
    ck_assert_int_eq(o.tile_siblings, 5);
    ck_assert_int_eq(o.restart_after, 128);
    ck_assert_int_eq(o.direct_siblings, 0);
    ck_assert_int_eq(o.row_siblings, 0);
    ck_assert_double_eq(o.eps_greedy, 0.1);
    ck_assert_int_eq(o.evolutionary_search_population, 512);
    ck_assert_int_eq(o.evolutionary_search_num_iters, 2);
    ck_assert_int_eq(o.model_label, KT_MODEL_LABEL_LOG);
    ck_assert_int_eq(o.num_warmup_sample, 64);
    ck_assert_int_eq(o.foresee_keep, 16);
    ck_assert_int_eq(o.sample_init_min_population, 50);   /* untouched */
    ck_assert_str_eq(o.policy, "sketch.xgb");

    /* All or nothing: a bad item anywhere leaves every option as it was. */
    static const struct {
        const char *list, *msg;
    } bad[] = {
        {"eps_greedy=0.2,nosuch=1", "unknown search parameter 'nosuch'"},
        {"eps_greedy=1.5", "eps_greedy must be in [0, 1]"},
        {"eps_greedy=abc", "eps_greedy: 'abc' is not a number"},
        {"evolutionary_search_population=10.5", "is not an integer"},
        {"evolutionary_search_population=0", "evolutionary_search_population must be >= 1"},
        {"evolutionary_search_population=100000000", "populations must be at most"},
        {"evolutionary_search_num_iters=5000", "at most 1000"},
        {"model_label=hinge", "unknown value 'hinge'"},
        {"warmup=later", "warmup: unknown value 'later' (random or model)"},
        {"diversity_filter_ratio=0.5", "diversity_filter_ratio must be 0 (off) or in [1, 64]"},
        {"diversity_filter_ratio=100", "diversity_filter_ratio must be 0 (off) or in [1, 64]"},
        {"tile_family_share=0", "tile_family_share must be in (0, 1]"},
        {"tile_family_share=1.5", "tile_family_share must be in (0, 1]"},
        {"location_siblings=-1", "location_siblings must be in [0, 64]"},
        {"tile_siblings=65", "tile_siblings must be in [0, 64]"},
        {"direct_siblings=2", "direct_siblings must be 0 or 1"},
        {"row_siblings=-1", "row_siblings must be 0 or 1"},
        {"restart_after=-1", "restart_after must be in [0, 1048576]"},
        {"transfer=257", "transfer must be in [0, 256]"},
        {"transfer_workloads=0", "transfer_workloads must be in [1, 64]"},
        {"seed=3", "job's seed"},
        {"policy=sketch.random", "job's policy"},
        {"eps_greedy", "is not key=value"},
        {"=3", "is not key=value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        before = o;
        ck_assert_msg(kt_search_opts_set(&o, bad[i].list) == KT_EINVAL, "%s", bad[i].list);
        ck_assert_msg(strstr(kt_err_msg(), bad[i].msg) != NULL, "%s: %s", bad[i].list,
                      kt_err_msg());
        ck_assert(memcmp(&before, &o, sizeof o) == 0);
    }
    ck_assert_int_eq(kt_search_opts_set(NULL, "eps_greedy=0"), KT_EINVAL);
    ck_assert_int_eq(kt_search_opts_set(&o, NULL), KT_EINVAL);

    /* The options reach the model a policy makes. */
    kt_model_params_t mp;
    kt_search_model_params(&o, 1, &mp);
    ck_assert_int_eq(mp.label, KT_MODEL_LABEL_LOG);
    ck_assert_int_eq(mp.num_warmup_sample, 64);
}
END_TEST

START_TEST(search_policy_new_rejects_bad_input)
{
    kt_workload_t *w = matmul(16, 16, 16);
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    o.policy = "sketch.nope";
    ck_assert_ptr_null(kt_search_policy_new(w, NULL, &o, NULL, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "sketch.nope"));
    kt_search_opts_default(&o);
    o.eps_greedy = 1.5;
    ck_assert_ptr_null(kt_search_policy_new(w, NULL, &o, NULL, 0));
    kt_search_opts_default(&o);
    o.evolutionary_search_population = 0;
    ck_assert_ptr_null(kt_search_policy_new(w, NULL, &o, NULL, 0));
    kt_search_opts_default(&o);
    o.model_label = 7;
    ck_assert_ptr_null(kt_search_policy_new(w, NULL, &o, NULL, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "model_label"));
    ck_assert_ptr_null(kt_search_policy_new(NULL, NULL, NULL, NULL, 0));
    kt_search_policy_t *sp = kt_search_policy_new(w, NULL, NULL, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    ck_assert_str_eq(kt_model_kind(kt_search_model(sp)), "xgb");
    kt_sched_state_t **st;
    ck_assert_int_eq(kt_search_propose(sp, 0, &st), KT_EINVAL);
    ck_assert_int_eq(kt_search_preload(sp, "{\"stages\":[]}", 1e-3), KT_EINVAL);
    ck_assert_int_eq(kt_search_preload(sp, "not json", 1e-3), KT_EINVAL);
    double c;
    ck_assert_int_eq(kt_search_best(sp, &c, NULL), KT_ENOTFOUND);
    kt_search_policy_free(sp);
    kt_search_policy_free(NULL);
    kt_workload_free(w);
}
END_TEST

START_TEST(search_candidate_layout_entry_and_reference)
{
    kt_workload_t *w = workload("{\"op\":\"matmul\",\"M\":8,\"N\":12,\"K\":4,"
                                "\"epilogue\":[\"bias_add\",\"relu\"]}");
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_sched_state_t **sk;
    int nsk;
    ck_assert_int_eq(kt_sched_sketches(kt_workload_dag(w), &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 7);
    kt_sched_state_t *st = kt_sched_sample(kt_workload_dag(w), &p, sk[0], &rng);
    ck_assert_ptr_nonnull(st);

    kt_search_candidate_t c;
    ck_assert_int_eq(kt_search_candidate_make(w, st, NULL, &c), 0);
    ck_assert_str_eq(c.entry, "kt_main");
    ck_assert_ptr_nonnull(strstr(c.source, "int kt_main(float **"));
    /* the variant the runner times and its pack, exported under the entry too */
    ck_assert_ptr_nonnull(strstr(c.source, "int kt_main_packed(float **"));
    ck_assert_ptr_nonnull(strstr(c.source, "int kt_main_pack(int i, const float *src, float *dst)"));
    /* A [8,4], B [4,12], bias [12] in, the output [8,12] last */
    ck_assert_int_eq(c.layout.num_bufs, 4);
    ck_assert_int_eq(c.layout.num_outputs, 1);
    ck_assert_int_eq(c.layout.num_elems[0], 32);
    ck_assert_int_eq(c.layout.num_elems[1], 48);
    ck_assert_int_eq(c.layout.num_elems[2], 12);
    ck_assert_int_eq(c.layout.num_elems[3], 96);
    /* B alone is a weight: what a runner told to flush weights evicts */
    ck_assert_uint_eq(c.layout.weights, 1u << 1);
    kt_search_candidate_clear(&c);
    ck_assert_int_eq(kt_search_candidate_make(w, st, "my_kernel", &c), 0);
    ck_assert_str_eq(c.entry, "my_kernel");
    ck_assert_ptr_nonnull(strstr(c.source, "int my_kernel(float **"));
    kt_search_candidate_clear(&c);
    ck_assert_int_eq(kt_search_candidate_make(w, st, "bad entry", &c), KT_EINVAL);
    ck_assert_ptr_null(c.source);

    ck_assert_int_eq(kt_search_candidate_reference(w, &c), 0);
    ck_assert_str_eq(c.entry, "ref_main");
    ck_assert_ptr_nonnull(strstr(c.source, "int ref_main(float **"));
    ck_assert_int_eq(c.layout.num_bufs, 4);
    kt_search_candidate_clear(&c);
    kt_search_candidate_clear(NULL);

    kt_sched_state_free(st);
    free_states(sk, nsk);
    kt_workload_free(w);
}
END_TEST

START_TEST(search_one_round_measures_real_kernels_and_tracks_the_best)
{
    kt_workload_t *w = workload("{\"op\":\"matmul\",\"M\":16,\"N\":16,\"K\":16,"
                                "\"epilogue\":[\"relu\"]}");
    kt_builder_opts_t bo;
    kt_builder_opts_default(&bo);
    bo.timeout = 60;
    kt_builder_t *b = kt_builder_new(&bo);
    ck_assert_msg(b != NULL, "builder: %s", kt_err_msg());
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.number = 2;
    ro.min_repeat_ms = 0;
    ro.num_threads = 1;
    kt_runner_t *r = kt_runner_new(&ro);
    ck_assert_ptr_nonnull(r);
    kt_measurer_t *m = kt_measurer_new(b, r, 0);
    ck_assert_ptr_nonnull(m);

    kt_sched_params_t p;
    one_thread_params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", 3);
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);

    kt_sched_state_t **st;
    kt_measure_result_t *res;
    int got = kt_search_one_round(sp, 4, kt_search_measure_local, m, &st, &res);
    ck_assert_msg(got == 4, "one round: %d (%s)", got, kt_err_msg());
    double best = INFINITY;
    for (int i = 0; i < got; i++) {
        ck_assert_msg(res[i].error_no == KT_MEASURE_NO_ERROR, "candidate %d: %s", i,
                      res[i].error_msg ? res[i].error_msg : "");
        ck_assert(res[i].mean > 0 && res[i].mean < 1);
        ck_assert(res[i].max_error >= 0 && res[i].max_error <= 1e-4);   /* checked against the reference */
        if (res[i].mean < best)
            best = res[i].mean;
    }
    double c;
    char *json;
    ck_assert_int_eq(kt_search_best(sp, &c, &json), 0);
    ck_assert_double_eq(c, best);
    /* the best state is one of the measured ones */
    kt_sched_state_t *bs = kt_sched_state_from_json(json, kt_workload_dag(w), &p);
    ck_assert_ptr_nonnull(bs);
    int found = 0;
    for (int i = 0; i < got; i++)
        found += kt_sched_state_equal(bs, st[i]) && res[i].mean == best;
    ck_assert_int_eq(found, 1);
    kt_sched_state_free(bs);
    free(json);

    kt_search_stats_t s;
    kt_search_stats(sp, &s);
    ck_assert_int_eq(s.proposed, 4);
    ck_assert_int_eq(s.measured, 4);
    kt_measurer_stats_t ms;
    kt_measurer_stats(m, &ms);
    ck_assert_int_eq(ms.measured, 4);
    ck_assert_int_eq(ms.errors, 0);

    free_states(st, got);
    free_results(res, got);
    kt_search_policy_free(sp);
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
    kt_workload_free(w);
}
END_TEST

START_TEST(search_never_proposes_measured_preloaded_or_reported_states)
{
    kt_workload_t *w = matmul(32, 32, 32);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", 11);
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);

    /* 40 random states: 20 preloaded, 20 reported by the callback */
    kt_sched_state_t **sk;
    int nsk;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 11);   /* the policy's seed: its first samples are these */
    hashset_t reported = {0};
    uint64_t preloaded[20];
    int npre = 0;
    for (int i = 0; i < 40; i++) {
        kt_sched_state_t *st = kt_sched_sample(dag, &p, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        ck_assert_ptr_nonnull(st);
        uint64_t h = kt_sched_state_hash(st, dag);
        if (i % 2 == 0) {
            char *j = kt_sched_state_to_json(st, dag);
            ck_assert_int_eq(kt_search_preload(sp, j, i % 4 == 0 ? 1e-3 * (i + 1) : -1), 0);
            preloaded[npre++] = h;
            free(j);
        } else {
            reported.h[reported.n++] = h;
        }
        kt_sched_state_free(st);
    }
    free_states(sk, nsk);
    kt_search_set_has_measured(sp, in_set, &reported);
    double c;
    ck_assert_int_eq(kt_search_best(sp, &c, NULL), 0);
    ck_assert_double_eq(c, 1e-3);   /* preloaded i = 0 */

    uint64_t seen[200];
    int nseen = 0;
    for (int round = 0; round < 5; round++) {
        kt_sched_state_t **st;
        int got = kt_search_propose(sp, 16, &st);
        ck_assert_int_eq(got, 16);
        double costs[16];
        for (int i = 0; i < got; i++) {
            uint64_t h = kt_sched_state_hash(st[i], dag);
            ck_assert_int_eq(kt_sched_state_validate(dag, &p, st[i]), 0);
            for (int k = 0; k < npre; k++)
                ck_assert(h != preloaded[k]);
            for (int k = 0; k < reported.n; k++)
                ck_assert(h != reported.h[k]);
            for (int k = 0; k < nseen; k++)
                ck_assert(h != seen[k]);
            seen[nseen++] = h;
            costs[i] = synthetic_cost(st[i]);
        }
        /* rounds 0..3 feed back; round 4's states were proposed but not yet
         * measured, and still never come again */
        if (round < 4)
            ck_assert_int_eq(kt_search_feedback(sp, st, costs, got), 0);
        free_states(st, got);
    }
    ck_assert_int_gt(reported.asked, 0);
    kt_search_stats_t s;
    kt_search_stats(sp, &s);
    ck_assert_int_eq(s.preloaded, 20);
    ck_assert_int_eq(s.proposed, 80);
    ck_assert_int_eq(s.measured, 64);
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST

/* Before sketch.xgb's model is trained its scores are noise: the first
 * round takes sampled states for the coverage of their knob values, so its
 * 16 picks hold every innermost factor from 1 to 32 on both 64-wide axes,
 * which 16 states drawn uniformly seldom do (a 32 comes in 3 draws of 84
 * per axis); the trained model's rounds evolve as before. */
START_TEST(search_untrained_model_spreads_the_first_round_over_the_sample)
{
    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, "sketch.xgb", 9);
    o.evolutionary_search_population = 512;
    o.num_warmup_sample = 8;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    enum { N = 16, IN = KT_SCHED_SPATIAL_LEVELS - 1 };
    for (int r = 0; r < 2; r++) {
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, N, synthetic_measure, NULL, &st, &res);
        ck_assert_msg(got == N, "round %d: %d (%s)", r, got, kt_err_msg());
        kt_search_stats_t s;
        kt_search_stats(sp, &s);
        ck_assert_int_eq(s.last_picked_spread, r == 0 ? N : 0);
        ck_assert_int_eq(s.last_num_iters, r == 0 ? 0 : o.evolutionary_search_num_iters);
        if (r == 0) {
            /* bit v of seen[ax]: 2^v was the innermost factor of axis ax */
            unsigned seen[2] = {0, 0};
            int tiled = 0;
            for (int i = 0; i < got; i++)
                for (int k = 0; k < st[i]->nstages; k++) {
                    const kt_sched_stage_t *g = &st[i]->stages[k];
                    if (g->kind != KT_SK_TILED)
                        continue;
                    tiled++;
                    for (int ax = 0; ax < 2; ax++)
                        seen[ax] |= 1u << (unsigned)__builtin_ctz((unsigned)g->split[ax][IN]);
                }
            ck_assert_int_ge(tiled, N);
            ck_assert_uint_eq(seen[0] & 0x3f, 0x3f);
            ck_assert_uint_eq(seen[1] & 0x3f, 0x3f);
        }
        free_states(st, got);
        free_results(res, got);
    }
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST

START_TEST(search_eps_greedy_share_and_population_follow_the_options)
{
    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, "sketch.random", 5);
    o.eps_greedy = 0.25;
    o.evolutionary_search_population = 100;
    o.sample_init_use_measured_ratio = 0.1;
    o.evolutionary_search_num_iters = 7;   /* a random model caps it at 3 */
    o.tile_family_share = 1;               /* Ansor's pick: the heap holds 2n */
    o.tile_siblings = 0;                   /* ... and no reshaped best tile first */
    o.direct_siblings = 0;                 /* ... nor its direct tile */
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);

    kt_search_stats_t s;
    for (int round = 0; round < 3; round++) {
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, 16, synthetic_measure, NULL, &st, &res);
        ck_assert_int_eq(got, 16);
        kt_search_stats(sp, &s);
        /* 25% of 16 from the random states (3 x 4 drawn), the rest from the
         * heap of the best 32 */
        ck_assert_int_eq(s.last_random, 12);
        ck_assert_int_eq(s.last_picked_random, 4);
        ck_assert_int_eq(s.last_picked_best, 12);
        ck_assert_int_eq(s.last_best, 32);
        ck_assert_int_eq(s.last_num_iters, 3);
        /* one batch of 100 samples, deduplicated, all valid */
        ck_assert_int_ge(s.last_sampled, 16);
        ck_assert_int_le(s.last_sampled, 100);
        /* best measured states: min(10% of 100, measured so far) */
        ck_assert_int_eq(s.last_from_measured, round == 0 ? 0 : 10);
        free_states(st, got);
        free_results(res, got);
    }
    ck_assert_int_gt(s.mutations_ok, 0);
    ck_assert_int_gt(s.nsketches, 0);
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST

/* Rank of an origin in a round's order of picks: seeds, siblings, the
 * model's picks, then the random ones. */
static int origin_rank(int origin)
{
    switch (origin) {
    case KT_STORE_ORIGIN_TRANSFER: return 0;
    case KT_STORE_ORIGIN_SIBLING: return 1;
    case KT_STORE_ORIGIN_MODEL: return 2;
    case KT_STORE_ORIGIN_RANDOM: return 3;
    default: ck_abort_msg("origin %d is no proposal's", origin); return -1;
    }
}

/* Each proposal names its source as the round's counters count them:
 * seeds (transfer) first, a round spread over the sample while the model
 * is untrained (random), then the siblings, the trained model's picks and
 * the eps-greedy share (random); a random-scored model picks nothing as
 * "model". Asking for origins changes no proposal. */
START_TEST(search_origins_name_the_source_of_each_proposal)
{
    static const char *const policies[] = {"sketch.xgb", "sketch.random"};
    for (int k = 0; k < 2; k++) {
        kt_sched_params_t p;
        kt_search_opts_t o;
        kt_workload_t *w = small_matmul(&p, &o, policies[k], 11);
        const kt_dag_t *dag = kt_workload_dag(w);
        o.num_warmup_sample = 8;
        o.eps_greedy = 0.25;
        kt_search_opts_t other = o;
        other.seed = 99;
        kt_search_policy_t *src = kt_search_policy_new(w, &p, &other, NULL, 0);
        kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
        kt_search_policy_t *twin = kt_search_policy_new(w, &p, &o, NULL, 0);
        ck_assert(src && sp && twin);
        kt_sched_state_t **seeds = NULL;
        ck_assert_int_eq(kt_search_propose(src, 3, &seeds), 3);
        ck_assert_int_eq(kt_search_seed(sp, seeds, 3), 3);
        ck_assert_int_eq(kt_search_seed(twin, seeds, 3), 3);
        enum { N = 16 };
        for (int r = 0; r < 3; r++) {
            int origin[N], c[KT_STORE_NUM_ORIGINS] = {0};
            for (int i = 0; i < N; i++)
                origin[i] = -1;
            kt_sched_state_t **st = NULL, **st2 = NULL;
            ck_assert_int_eq(kt_search_propose_origins(sp, N, &st, origin), N);
            ck_assert_int_eq(kt_search_propose(twin, N, &st2), N);
            kt_search_stats_t s;
            kt_search_stats(sp, &s);
            for (int i = 0; i < N; i++) {
                ck_assert_uint_eq(kt_sched_state_hash(st[i], dag), kt_sched_state_hash(st2[i], dag));
                ck_assert_int_ge(origin_rank(origin[i]), i > 0 ? origin_rank(origin[i - 1]) : 0);
                c[origin[i]]++;
            }
            ck_assert_int_eq(c[KT_STORE_ORIGIN_TRANSFER], r == 0 ? 3 : 0);
            for (int i = 0; r == 0 && i < 3; i++)
                ck_assert_uint_eq(kt_sched_state_hash(st[i], dag), kt_sched_state_hash(seeds[i], dag));
            ck_assert_int_eq(c[KT_STORE_ORIGIN_SIBLING],
                             s.last_picked_siblings + s.last_picked_tile_siblings +
                                 s.last_picked_direct_siblings + s.last_picked_row_siblings);
            if (k == 0) {
                /* xgb: round 0 is spread over the sample (untrained), later
                 * rounds are the trained model's with 4 random picks */
                ck_assert_int_eq(c[KT_STORE_ORIGIN_RANDOM],
                                 r == 0 ? s.last_picked_spread : s.last_picked_random);
                ck_assert_int_eq(c[KT_STORE_ORIGIN_MODEL], s.last_picked_best);
                ck_assert_int_eq(s.last_picked_spread, r == 0 ? N - 3 : 0);
                if (r > 0) {
                    ck_assert_int_gt(c[KT_STORE_ORIGIN_MODEL], 0);
                    ck_assert_int_eq(c[KT_STORE_ORIGIN_RANDOM], 4);
                }
            } else {
                ck_assert_int_eq(c[KT_STORE_ORIGIN_MODEL], 0);
                ck_assert_int_eq(c[KT_STORE_ORIGIN_RANDOM], s.last_picked_best + s.last_picked_random);
            }
            double costs[N];
            for (int i = 0; i < N; i++)
                costs[i] = synthetic_cost(st[i]);
            ck_assert_int_eq(kt_search_feedback(sp, st, costs, N), 0);
            ck_assert_int_eq(kt_search_feedback(twin, st2, costs, N), 0);
            free_states(st, N);
            free_states(st2, N);
        }
        free_states(seeds, 3);
        kt_search_policy_free(src);
        kt_search_policy_free(sp);
        kt_search_policy_free(twin);
        kt_workload_free(w);
    }
}
END_TEST

/* Distinct knob values (kt_sched_state_knobs) among n states. */
static int knob_coverage(kt_sched_state_t *const *st, int n)
{
    enum { CAP = 4096 };
    static uint64_t seen[CAP];
    int nseen = 0;
    for (int i = 0; i < n; i++) {
        uint64_t k[8 * KT_SCHED_KNOBS_PER_STAGE];
        int nk = kt_sched_state_knobs(st[i], k, 8 * KT_SCHED_KNOBS_PER_STAGE);
        ck_assert_int_gt(nk, 0);
        for (int j = 0; j < nk; j++) {
            int found = 0;
            for (int t = 0; t < nseen && !found; t++)
                found = seen[t] == k[j];
            if (!found) {
                ck_assert_int_lt(nseen, CAP);
                seen[nseen++] = k[j];
            }
        }
    }
    return nseen;
}

/* One round of 16 proposals (no eps-greedy share) of a random-model policy
 * on an m^3 matmul with these pick options and population. */
static int propose_round_of(int m, double diversity, double share, int population, uint64_t seed,
                            kt_sched_state_t ***st, kt_search_stats_t *s)
{
    kt_workload_t *w = matmul(m, m, m);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", seed);
    o.eps_greedy = 0;
    o.evolutionary_search_population = population;
    o.diversity_filter_ratio = diversity;
    o.tile_family_share = share;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    int got = kt_search_propose(sp, 16, st);
    kt_search_stats(sp, s);
    kt_search_policy_free(sp);
    kt_workload_free(w);
    return got;
}

static int propose_round(int m, double diversity, double share, uint64_t seed,
                         kt_sched_state_t ***st, kt_search_stats_t *s)
{
    return propose_round_of(m, diversity, share, 256, seed, st, s);
}

/* One round's proposals of a policy with this diversity_filter_ratio (the
 * diversity pick alone: no tile cap). */
static int propose_with_diversity(double ratio, uint64_t seed, kt_sched_state_t ***st,
                                  kt_search_stats_t *s)
{
    return propose_round(64, ratio, 1, seed, st, s);
}

START_TEST(search_diversity_pick_covers_more_knob_values)
{
    for (uint64_t seed = 30; seed < 33; seed++) {
        kt_sched_state_t **plain, **diverse;
        kt_search_stats_t sp, sd;
        ck_assert_int_eq(propose_with_diversity(0, seed, &plain, &sp), 16);
        ck_assert_int_eq(propose_with_diversity(4, seed, &diverse, &sd), 16);
        /* Ansor keeps the best 2n states; the diversity pick draws from 4n */
        ck_assert_int_eq(sp.last_best, 32);
        ck_assert_int_eq(sd.last_best, 64);
        ck_assert_int_eq(sd.last_picked_best, 16);
        /* the same sampled population and model: the diverse picks cover
         * more of the choices than the best-scored 16 */
        int cp = knob_coverage(plain, 16), cd = knob_coverage(diverse, 16);
        ck_assert_msg(cd > cp, "seed %llu: diverse picks cover %d knob values, plain %d",
                      (unsigned long long)seed, cd, cp);
        /* and they are distinct states */
        for (int i = 0; i < 16; i++)
            for (int j = i + 1; j < 16; j++)
                ck_assert(!kt_sched_state_equal(diverse[i], diverse[j]));
        free_states(plain, 16);
        free_states(diverse, 16);
    }
}
END_TEST

/* One round of propose_round with this tile_family_share; the number of
 * register tiles among its proposals, and the most picks one tile got. */
static int propose_with_tile_share(int m, double share, uint64_t seed, int *tiles, int *most,
                                   kt_search_stats_t *s)
{
    kt_sched_state_t **st;
    int got = propose_round(m, 0, share, seed, &st, s);
    uint64_t key[16];
    int count[16];
    *tiles = *most = 0;
    for (int i = 0; i < got; i++) {
        uint64_t k = kt_sched_state_tile_key(st[i]);
        ck_assert_uint_ne(k, 0);
        int t = 0;
        while (t < *tiles && key[t] != k)
            t++;
        if (t == *tiles) {
            key[t] = k;
            count[t] = 0;
            (*tiles)++;
        }
        if (++count[t] > *most)
            *most = count[t];
    }
    free_states(st, got);
    return got;
}

START_TEST(search_tile_cap_spreads_picks_over_register_tiles)
{
    int plain_tiles = 0;
    for (uint64_t seed = 40; seed < 43; seed++) {
        int tiles, most;
        kt_search_stats_t s;
        /* no cap (Ansor's pick): the best-scored 16 */
        ck_assert_int_eq(propose_with_tile_share(64, 1, seed, &tiles, &most, &s), 16);
        ck_assert_int_eq(s.last_tile_families, tiles);
        ck_assert_int_eq(s.last_best, 32);
        plain_tiles += tiles;
        /* a quarter: at most 4 of the 16 picks share a tile; the pool
         * grows so that other tiles are there to pick */
        ck_assert_int_eq(propose_with_tile_share(64, 0.25, seed, &tiles, &most, &s), 16);
        ck_assert_int_le(most, 4);
        ck_assert_int_ge(tiles, 4);
        ck_assert_int_gt(s.last_best, 64);
        ck_assert_int_eq(s.last_picked_best, 16);
        /* one per tile: 16 tiles */
        ck_assert_int_eq(propose_with_tile_share(64, 1.0 / 16, seed, &tiles, &most, &s), 16);
        ck_assert_int_eq(most, 1);
        ck_assert_int_eq(tiles, 16);
        ck_assert_int_eq(s.last_tile_families, 16);
    }
    /* random scores still repeat tiles when nothing spreads them */
    ck_assert_int_lt(plain_tiles, 3 * 16);
    /* fewer tiles than the cap asks for (4x4x4: innermost factors 1, 2 or 4
     * of two axes, 9 tiles): the round is still filled, from the full ones */
    int tiles, most;
    kt_search_stats_t s;
    ck_assert_int_eq(propose_with_tile_share(4, 1.0 / 16, 44, &tiles, &most, &s), 16);
    ck_assert_int_le(tiles, 9);
    ck_assert_int_gt(most, 1);
    /* the capped pick chooses from a population's worth of the scored
     * states when that is more than 16n (a favourite tile can fill the
     * best 16n alone); Ansor's pick still keeps the best 2n */
    kt_sched_state_t **st;
    ck_assert_int_eq(propose_round_of(64, 0, 0.25, 1024, 45, &st, &s), 16);
    ck_assert_int_eq(s.last_best, 1024);
    free_states(st, 16);
    ck_assert_int_eq(propose_round_of(64, 0, 1, 1024, 45, &st, &s), 16);
    ck_assert_int_eq(s.last_best, 32);
    free_states(st, 16);
}
END_TEST

/* The best measured state's stages placed otherwise lead the round's
 * picks (location_siblings): a padded conv2d whose best state materializes
 * its padding gets, among the first picks of the next round, the same
 * schedule with the padding inlined or computed at the convolution, never
 * a state measured before; with location_siblings = 0 (Ansor) none is
 * proposed, nor on a matmul (one placement per stage). */
#define SIBLING_ROUND 16   /* picks of propose_after's round */

/* The first round of SIBLING_ROUND picks of a sketch.random policy whose
 * only measured state is best, with the given sibling options; *s its stats. */
static kt_sched_state_t **propose_after(kt_workload_t *w, const kt_sched_params_t *p,
                                        const char *best, uint64_t seed, int loc, int tile,
                                        int direct, int row, kt_search_stats_t *s)
{
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", seed);
    o.location_siblings = loc;
    o.tile_siblings = tile;
    o.direct_siblings = direct;
    o.row_siblings = row;
    kt_search_policy_t *sp = kt_search_policy_new(w, p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    ck_assert_int_eq(kt_search_preload(sp, best, 1e-4), 0);
    kt_sched_state_t **st;
    ck_assert_int_eq(kt_search_propose(sp, SIBLING_ROUND, &st), SIBLING_ROUND);
    kt_search_stats(sp, s);
    kt_search_policy_free(sp);
    return st;
}

static int same_but_padding(const kt_sched_state_t *a, const kt_sched_state_t *b, int pad)
{
    if (a->nstages != b->nstages)
        return 0;
    for (int i = 0; i < a->nstages; i++)
        if (i != pad && memcmp(&a->stages[i], &b->stages[i], sizeof(a->stages[i])) != 0)
            return 0;
    return a->stages[pad].kind != b->stages[pad].kind ||
           a->stages[pad].at_stage != b->stages[pad].at_stage;
}

/* The conv2d of KT_TEST_PAD_TILE_STATE (8x8x16 -> 32, 3x3, padding 1, + bias
 * + relu) and, in *pad, the index of its padding stage. */
static kt_workload_t *pad_conv8(int *pad)
{
    kt_workload_t *w = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":8,\"W\":8,\"CI\":16,"
                                "\"CO\":32,\"KH\":3,\"KW\":3,\"stride\":[1,1],\"padding\":[1,1],"
                                "\"dilation\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}");
    const kt_dag_t *dag = kt_workload_dag(w);
    *pad = -1;
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, "pad_temp") == 0)
            *pad = i;
    ck_assert_int_ge(*pad, 0);
    return w;
}

START_TEST(search_location_siblings_place_the_best_states_padding_otherwise)
{
    int pad;
    kt_workload_t *w = pad_conv8(&pad);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    char *best = kt_test_materialize_pad(KT_TEST_PAD_TILE_STATE("[2,1,4,1]", "[1,1,4,2]"));
    kt_sched_state_t *b = kt_sched_state_from_json(best, dag, &p);
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    for (int siblings = 0; siblings <= 2; siblings += 2) {
        kt_search_stats_t s;
        int got = SIBLING_ROUND;
        kt_sched_state_t **st = propose_after(w, &p, best, 21, siblings, 2, 0, 0, &s);
        int found = 0, inlined = 0;
        for (int i = 0; i < got; i++) {
            int sib = same_but_padding(b, st[i], pad);
            ck_assert_msg(!sib || i < s.last_picked_siblings, "a sibling at pick %d", i);
            found += sib;
            inlined += sib && st[i]->stages[pad].kind == KT_SK_INLINE;
            ck_assert_uint_ne(kt_sched_state_hash(st[i], dag), kt_sched_state_hash(b, dag));
        }
        /* its other placements: inlined, and computed at the convolution where a loop takes it */
        ck_assert_int_eq(found, s.last_picked_siblings);
        ck_assert_int_eq(inlined, siblings > 0);
        ck_assert_int_le(found, siblings);
        free_states(st, got);
    }
    kt_sched_state_free(b);
    free(best);
    kt_workload_free(w);
    /* a matmul's stages have one placement each */
    kt_workload_t *mm = matmul(64, 64, 64);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", 22);
    kt_search_policy_t *sp = kt_search_policy_new(mm, &p, &o, NULL, 0);
    kt_sched_state_t **st;
    int got = kt_search_propose(sp, 4, &st);
    ck_assert_int_eq(got, 4);
    kt_search_stats_t s;
    kt_search_stats(sp, &s);
    ck_assert_int_eq(s.last_picked_siblings, 0);
    free_states(st, got);
    kt_search_policy_free(sp);
    kt_workload_free(mm);
}
END_TEST

/* location_siblings takes the best state of each of the best
 * location_sibling_tiles register tiles in turn, best tile first, each
 * placement once: with four states measured (A best, C on A's tile, then
 * B and D on tiles of their own; D's padding inlined, the others'
 * materialized), two siblings a round give A's and B's padding inlined,
 * never C's; the next round D's at root, the one after none; four a round
 * give all three at once; one tile gives A's alone. */
static int sibling_of(const kt_sched_state_t *const *from, int n, const kt_sched_state_t *st,
                      int pad)
{
    for (int i = 0; i < n; i++)
        if (same_but_padding(from[i], st, pad))
            return i;
    return -1;
}

START_TEST(search_location_siblings_take_the_best_tiles_in_turn)
{
    int pad;
    kt_workload_t *w = pad_conv8(&pad);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    /* A, C, B, D and their costs */
    char *json[4] = {kt_test_materialize_pad(KT_TEST_PAD_TILE_STATE("[2,1,4,1]", "[1,1,4,2]")),
                     kt_test_materialize_pad(KT_TEST_PAD_TILE_STATE("[1,2,4,1]", "[1,1,4,2]")),
                     kt_test_materialize_pad(KT_TEST_PAD_TILE_STATE("[2,1,2,2]", "[1,1,8,1]")),
                     strdup(KT_TEST_PAD_TILE_STATE("[1,1,8,1]", "[2,2,2,1]"))};
    const double cost[4] = {1e-4, 1.5e-4, 2e-4, 3e-4};
    kt_sched_state_t *from[4];
    for (int i = 0; i < 4; i++) {
        from[i] = kt_sched_state_from_json(json[i], dag, &p);
        ck_assert_msg(from[i] != NULL, "%s", kt_err_msg());
    }
    ck_assert_uint_eq(kt_sched_state_tile_key(from[0]), kt_sched_state_tile_key(from[1]));
    ck_assert_uint_ne(kt_sched_state_tile_key(from[0]), kt_sched_state_tile_key(from[2]));
    ck_assert_uint_ne(kt_sched_state_tile_key(from[2]), kt_sched_state_tile_key(from[3]));
    /* siblings a round, tiles, rounds; per round the states the siblings come from */
    static const struct {
        int siblings, tiles, rounds;
        int want[3][4];
    } cases[] = {
        {2, 4, 3, {{0, 2, -1}, {3, -1}, {-1}}},
        {4, 4, 2, {{0, 2, 3, -1}, {-1}}},
        {2, 1, 2, {{0, -1}, {-1}}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kt_search_opts_t o;
        small_opts(&o, "sketch.random", 23);
        o.location_siblings = cases[c].siblings;
        o.location_sibling_tiles = cases[c].tiles;
        kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
        ck_assert_ptr_nonnull(sp);
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(kt_search_preload(sp, json[i], cost[i]), 0);
        for (int r = 0; r < cases[c].rounds; r++) {
            kt_sched_state_t **st;
            ck_assert_int_eq(kt_search_propose(sp, SIBLING_ROUND, &st), SIBLING_ROUND);
            kt_search_stats_t s;
            kt_search_stats(sp, &s);
            const int *want = cases[c].want[r];
            int nwant = 0;
            while (want[nwant] >= 0)
                nwant++;
            ck_assert_msg(s.last_picked_siblings == nwant, "case %zu round %d: %d siblings", c,
                          r, s.last_picked_siblings);
            for (int i = 0; i < SIBLING_ROUND; i++) {
                int from_i = sibling_of((const kt_sched_state_t *const *)from, 4, st[i], pad);
                if (i < nwant) {
                    ck_assert_msg(from_i == want[i], "case %zu round %d pick %d: a sibling of %d",
                                  c, r, i, from_i);
                    ck_assert_int_eq(st[i]->stages[pad].kind,
                                     from[from_i]->stages[pad].kind == KT_SK_INLINE
                                         ? KT_SK_ROOT
                                         : KT_SK_INLINE);
                }
            }
            free_states(st, SIBLING_ROUND);
        }
        kt_search_policy_free(sp);
    }
    for (int i = 0; i < 4; i++) {
        kt_sched_state_free(from[i]);
        free(json[i]);
    }
    kt_workload_free(w);
}
END_TEST

/* The best measured state's register tile reshaped leads the round's picks
 * after the placements (tile_siblings): with a 2-row x 4-column tile best,
 * the first picks are that state with one prime exchanged between two
 * spatial axes (each loop level keeping its trip count), never a state
 * measured before; with tile_siblings = 0 (Ansor) none is counted. */
static int tile_sibling(const kt_sched_state_t *a, const kt_sched_state_t *b, int s, int ndim)
{
    if (a->nstages != b->nstages)
        return 0;
    for (int i = 0; i < a->nstages; i++) {
        kt_sched_stage_t x = a->stages[i], y = b->stages[i];
        if (i == s)
            memset(x.split, 0, sizeof x.split), memset(y.split, 0, sizeof y.split);
        if (memcmp(&x, &y, sizeof x) != 0)
            return 0;
    }
    for (int l = 0; l < KT_SCHED_SPATIAL_LEVELS; l++) {
        int64_t ta = 1, tb = 1;
        for (int d = 0; d < ndim; d++)
            ta *= a->stages[s].split[d][l], tb *= b->stages[s].split[d][l];
        if (ta != tb)
            return 0;
    }
    return memcmp(a->stages[s].split, b->stages[s].split, sizeof a->stages[s].split) != 0;
}

/* The 8x8 conv2d of the sibling tests with one-thread parameters, and its
 * best state SIBLING_BEST parsed into *best (tiled stage *s). */
#define SIBLING_BEST KT_TEST_PAD_TILE_STATE("[1,2,2,2]", "[1,1,2,4]")
static kt_workload_t *sibling_conv(kt_sched_params_t *p, kt_sched_state_t **best, int *s)
{
    kt_workload_t *w = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":8,\"W\":8,\"CI\":16,"
                                "\"CO\":32,\"KH\":3,\"KW\":3,\"stride\":[1,1],\"padding\":[1,1],"
                                "\"dilation\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}");
    one_thread_params(p);
    *best = kt_sched_state_from_json(SIBLING_BEST, kt_workload_dag(w), p);
    ck_assert_msg(*best != NULL, "%s", kt_err_msg());
    *s = kt_test_tiled_stage(*best);
    return w;
}

START_TEST(search_tile_siblings_reshape_the_best_states_register_tile)
{
    kt_sched_params_t p;
    kt_sched_state_t *b;
    int s;
    kt_workload_t *w = sibling_conv(&p, &b, &s);
    const kt_dag_t *dag = kt_workload_dag(w);
    const char *best = SIBLING_BEST;
    int ndim = kt_dag_stage(dag, s)->ndim;
    for (int siblings = 0; siblings <= 2; siblings += 2) {
        kt_search_stats_t ss;
        int got = SIBLING_ROUND;
        kt_sched_state_t **st = propose_after(w, &p, best, 23, 0, siblings, 0, 0, &ss);
        ck_assert_int_eq(ss.last_picked_tile_siblings, siblings);
        for (int i = 0; i < got; i++) {
            ck_assert_msg(i >= siblings || tile_sibling(b, st[i], s, ndim), "pick %d", i);
            ck_assert_uint_ne(kt_sched_state_hash(st[i], dag), kt_sched_state_hash(b, dag));
        }
        free_states(st, got);
    }
    kt_sched_state_free(b);
    kt_workload_free(w);
}
END_TEST

/* The round after best with the direct (row 0) or the row sibling (row 1)
 * off, then on, the other siblings off: want leads it when on and is not in
 * it when off; then the round after none_best, which has no such sibling. */
static void check_sibling_leads(kt_workload_t *w, const kt_sched_params_t *p, const char *best,
                                const char *none_best, uint64_t seed, int row,
                                const kt_sched_state_t *want)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    uint64_t hw = kt_sched_state_hash(want, dag);
    kt_search_stats_t ss;
    kt_sched_state_t **st;
    for (int on = 0; on <= 1; on++) {
        st = propose_after(w, p, best, seed, 0, 0, row ? 0 : on, row ? on : 0, &ss);
        ck_assert_int_eq(row ? ss.last_picked_row_siblings : ss.last_picked_direct_siblings, on);
        int found = 0;
        for (int i = 0; i < SIBLING_ROUND; i++)
            found += kt_sched_state_hash(st[i], dag) == hw;
        ck_assert_int_eq(found, on);
        if (on)
            ck_assert_uint_eq(kt_sched_state_hash(st[0], dag), hw);
        free_states(st, SIBLING_ROUND);
    }
    st = propose_after(w, p, none_best, seed, 0, 0, !row, row, &ss);
    ck_assert_int_eq(row ? ss.last_picked_row_siblings : ss.last_picked_direct_siblings, 0);
    free_states(st, SIBLING_ROUND);
}

/* direct_siblings: the best state's reduction moved into its register tile
 * leads the round (after the other siblings): its channel reduction split
 * [2,8] becomes [1,16], nothing else changes; a best state whose reduction
 * already ends in the tile has no such sibling, nor with the option off. */
START_TEST(search_direct_sibling_ends_the_best_states_reduction_in_its_tile)
{
    kt_sched_params_t p;
    kt_sched_state_t *b;
    int s;
    kt_workload_t *w = sibling_conv(&p, &b, &s);
    const kt_dag_t *dag = kt_workload_dag(w);
    const char *best = SIBLING_BEST;
    int ci = kt_dag_stage(dag, s)->ndim + 2;
    ck_assert_int_eq(b->stages[s].split[ci][0], 2);
    kt_sched_state_t *want = kt_sched_state_clone(b);
    want->stages[s].split[ci][0] = 1;
    want->stages[s].split[ci][1] = 16;
    char *direct_best = kt_sched_state_to_json(want, dag);
    ck_assert_ptr_nonnull(direct_best);
    check_sibling_leads(w, &p, best, direct_best, 24, 0, want);
    free(direct_best);
    kt_sched_state_free(want);
    kt_sched_state_free(b);
    kt_workload_free(w);
}
END_TEST

/* row_siblings: the best state's row sweep follows the other siblings: rows
 * [1,2,2,2] become [4,1,1,2] (its columns are inside already), nothing else
 * changes; a best state that is a row sweep has no such sibling, nor with
 * the option off. */
START_TEST(search_row_sibling_gathers_the_best_states_rows_outermost)
{
    kt_sched_params_t p;
    kt_sched_state_t *b;
    int s;
    kt_workload_t *w = sibling_conv(&p, &b, &s);
    kt_sched_state_t *want = kt_sched_state_clone(b);
    int32_t rows[4] = {4, 1, 1, 2};
    memcpy(want->stages[s].split[1], rows, sizeof rows);
    char *sweep = kt_sched_state_to_json(want, kt_workload_dag(w));
    ck_assert_ptr_nonnull(sweep);
    check_sibling_leads(w, &p, SIBLING_BEST, sweep, 25, 1, want);
    free(sweep);
    kt_sched_state_free(want);
    kt_sched_state_free(b);
    kt_workload_free(w);
}
END_TEST

START_TEST(search_tiny_space_is_exhausted_then_propose_returns_zero)
{
    /* 1x1x1 matmul: no tile sizes to choose, only a handful of annotations */
    kt_workload_t *w = matmul(1, 1, 1);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", 9);
    o.retry_search_one_round_on_empty = 3;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    uint64_t seen[256];
    int nseen = 0, rounds = 0, got;
    int calls = 0;
    kt_sched_state_t **st;
    kt_measure_result_t *res;
    while ((got = kt_search_one_round(sp, 4, synthetic_measure, &calls, &st, &res)) > 0) {
        ck_assert_int_le(++rounds, 60);
        for (int i = 0; i < got; i++) {
            uint64_t h = kt_sched_state_hash(st[i], dag);
            for (int k = 0; k < nseen; k++)
                ck_assert(h != seen[k]);
            ck_assert_int_lt(nseen, 256);
            seen[nseen++] = h;
        }
        free_states(st, got);
        free_results(res, got);
    }
    ck_assert_int_eq(got, 0);
    kt_search_stats_t s;
    kt_search_stats(sp, &s);
    ck_assert_int_eq(calls, rounds);
    ck_assert_int_gt(s.proposed, 0);
    ck_assert_int_eq(s.measured, s.proposed);
    ck_assert_int_eq((int)s.proposed, nseen);
    /* the last propose ran 1 + 3 rounds that found nothing */
    ck_assert_int_ge(s.empty_rounds, 4);
    /* and so does the next one */
    ck_assert_int_eq(kt_search_propose(sp, 4, &st), 0);
    ck_assert_ptr_null(st);
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST


START_TEST(search_shared_model_learns_from_preloaded_and_measured_states)
{
    kt_workload_t *w = matmul(32, 32, 32);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_model_params_t mp;
    kt_model_params_default(&mp);
    mp.tree_method = KT_MODEL_TREE_HIST;
    kt_model_t *model = kt_model_new(KT_MODEL_XGB, &mp);
    ck_assert_ptr_nonnull(model);
    kt_search_opts_t o;
    small_opts(&o, "sketch.random", 4);   /* the shared model's kind wins */
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, model, 7);
    ck_assert_ptr_nonnull(sp);
    ck_assert_ptr_eq(kt_search_model(sp), model);

    /* 3 preloaded records: counted on the next feedback, not before */
    kt_sched_state_t **sk;
    int nsk;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 99);
    for (int i = 0; i < 3; i++) {
        kt_sched_state_t *st = kt_sched_sample(dag, &p, sk[0], &rng);
        char *j = kt_sched_state_to_json(st, dag);
        ck_assert_int_eq(kt_search_preload(sp, j, 2e-3), 0);
        free(j);
        kt_sched_state_free(st);
    }
    free_states(sk, nsk);
    ck_assert_int_eq(kt_model_num_samples(model), 0);
    int got = kt_search_one_round(sp, 8, synthetic_measure, NULL, NULL, NULL);
    ck_assert_int_eq(got, 8);
    ck_assert_int_eq(kt_model_num_samples(model), 11);
    got = kt_search_one_round(sp, 8, synthetic_measure, NULL, NULL, NULL);
    ck_assert_int_eq(got, 8);
    ck_assert_int_eq(kt_model_num_samples(model), 19);
    double t;
    kt_search_last_times(sp, NULL, &t);
    ck_assert(t >= 0);
    kt_search_policy_free(sp);
    /* the policy borrowed the model: still usable */
    ck_assert_int_eq(kt_model_num_samples(model), 19);
    kt_model_free(model);
    kt_workload_free(w);
}
END_TEST

/* Best synthetic cost after `rounds` rounds of n, and the mean cost of the
 * last round's proposals. */
START_TEST(search_model_update_from_store_trains_on_stored_records)
{
    kt_workload_t *w = matmul(32, 32, 32);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_store_t *st = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(kt_store_put_workload(st, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)), 0);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 11);
    enum { N = 40 };
    kt_record_t recs[N + 1];
    char *json[N];
    double cost[N];
    int n = 0;
    while (n < N) {
        kt_sched_state_t *x = kt_sched_sample(dag, &p, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        ck_assert_ptr_nonnull(x);
        json[n] = kt_sched_state_to_json(x, dag);
        cost[n] = synthetic_cost(x);
        recs[n] = (kt_record_t){.workload_key = kt_workload_key(w), .target = "cpu",
                                .state_json = json[n],
                                .state_hash = kt_sched_state_hash(x, dag),
                                .costs = &cost[n], .ncosts = 1, .timestamp = 1.0 + n};
        kt_sched_state_free(x);
        n++;
    }
    /* A record whose state does not parse is skipped, not fatal. */
    static const double one = 1.0;
    recs[N] = (kt_record_t){.workload_key = kt_workload_key(w), .target = "cpu",
                            .state_json = "{\"stages\":[]}", .state_hash = 1, .costs = &one,
                            .ncosts = 1, .timestamp = 99.0};
    ck_assert_int_eq(kt_store_put_records(st, recs, N + 1), 0);
    kt_model_params_t mp;
    kt_model_params_default(&mp);
    mp.tree_method = KT_MODEL_TREE_HIST;
    mp.num_warmup_sample = 10;
    kt_model_t *model = kt_model_new(KT_MODEL_XGB, &mp);
    ck_assert_ptr_nonnull(model);
    int used = -1;
    ck_assert_msg(kt_search_model_update_from_store(model, st, w, "cpu", 0, &used) == 0, "%s",
                  kt_err_msg());
    ck_assert_int_eq(used, N);
    ck_assert_uint_eq(kt_model_num_samples(model), N);
    ck_assert(kt_model_is_trained(model));
    /* Another target has no records: nothing to learn, not an error. */
    ck_assert_int_eq(kt_search_model_update_from_store(model, st, w, "cuda", 0, &used), 0);
    ck_assert_int_eq(used, 0);
    kt_model_free(model);
    for (int i = 0; i < N; i++)
        free(json[i]);
    free_states(sk, nsk);
    kt_store_close(st);
    kt_workload_free(w);
}
END_TEST

static void synthetic_run(const char *policy, uint64_t seed, int rounds, int n, double *best,
                          double *last_mean)
{
    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, policy, seed);
    o.evolutionary_search_population = 256;
    o.evolutionary_search_num_iters = 3;
    o.num_warmup_sample = 2 * n;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    *last_mean = 0;
    for (int r = 0; r < rounds; r++) {
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, n, synthetic_measure, NULL, &st, &res);
        ck_assert_msg(got == n, "round %d: %d (%s)", r, got, kt_err_msg());
        if (r == rounds - 1)
            for (int i = 0; i < got; i++)
                *last_mean += res[i].mean / got;
        free_states(st, got);
        free_results(res, got);
    }
    ck_assert_int_eq(kt_search_best(sp, best, NULL), 0);
    if (strcmp(policy, "sketch.xgb") == 0)
        ck_assert(kt_model_is_trained(kt_search_model(sp)));
    kt_search_policy_free(sp);
    kt_workload_free(w);
}

START_TEST(search_xgb_finds_better_states_than_random_on_a_synthetic_cost)
{
    double bx = 0, br = 0, mx = 0, mr = 0;
    const int seeds = 3;
    for (int s = 0; s < seeds; s++) {
        double b, m;
        synthetic_run("sketch.xgb", 100 + s, 6, 16, &b, &m);
        bx += b / seeds;
        mx += m / seeds;
        synthetic_run("sketch.random", 100 + s, 6, 16, &b, &m);
        br += b / seeds;
        mr += m / seeds;
    }
    ck_assert_msg(bx <= br, "best: xgb %g, random %g", bx, br);
    ck_assert_msg(mx < mr, "last round mean: xgb %g, random %g", mx, mr);
}
END_TEST

/* ---- GPU states: an analytic cost from the launches ---------------------------- */

/* Tests only: a smooth cost of each kernel's launch (best around 128 threads
 * per block, 32 blocks, 2 vthreads, with shared memory). */
static double gpu_cost(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    kt_sched_gpu_kernel_t ks[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, ks);
    ck_assert_int_gt(nk, 0);
    double c = 0;
    for (int k = 0; k < nk; k++)
        c += 1 + fabs(log2((double)ks[k].threads) - 7) + 0.5 * fabs(log2((double)ks[k].grid) - 5) +
             0.3 * fabs(log2((double)ks[k].vthreads) - 1) + (ks[k].smem_bytes > 0 ? 0 : 1);
    return 1e-5 * c;
}

static int gpu_measure(void *user, const kt_workload_t *w, kt_sched_state_t *const *states,
                       int n, kt_measure_result_t *results)
{
    (void)user;
    for (int i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof(results[i]));
        results[i].costs = malloc(sizeof(double));
        ck_assert_ptr_nonnull(results[i].costs);
        results[i].costs[0] = results[i].mean = gpu_cost(kt_workload_dag(w), states[i]);
        results[i].n_costs = 1;
        results[i].number = 1;
        results[i].error_no = KT_MEASURE_NO_ERROR;
    }
    return 0;
}

/* sketch.xgb on a CUDA task: after the warm-up the model is trained on the
 * GPU states' features and the search keeps proposing valid, new states
 * that it scores finitely. */
START_TEST(search_xgb_scores_and_proposes_gpu_states)
{
    kt_workload_t *w = matmul(64, 64, 64);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    kt_search_opts_t o;
    small_opts(&o, "sketch.xgb", 17);
    o.num_warmup_sample = 16;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_msg(sp != NULL, "%s", kt_err_msg());
    enum { ROUNDS = 5, N = 8 };
    uint64_t seen[ROUNDS * N];
    int nseen = 0;
    for (int r = 0; r < ROUNDS; r++) {
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, N, gpu_measure, NULL, &st, &res);
        ck_assert_msg(got == N, "round %d: %d (%s)", r, got, kt_err_msg());
        for (int i = 0; i < got; i++) {
            ck_assert_int_eq(st[i]->target, KT_SCHED_TARGET_CUDA);
            ck_assert_msg(kt_sched_state_validate(dag, &p, st[i]) == 0, "%s", kt_err_msg());
            uint64_t h = kt_sched_state_hash(st[i], dag);
            for (int j = 0; j < nseen; j++)
                ck_assert_msg(seen[j] != h, "round %d: state %d proposed twice", r, i);
            seen[nseen++] = h;
        }
        kt_model_t *m = kt_search_model(sp);
        kt_search_stats_t stats;
        kt_search_stats(sp, &stats);
        /* rounds proposed before the model trained (it needs more than 16
         * results) spread over the sampled states; then evolution */
        ck_assert_int_eq(stats.last_picked_spread, r <= 2 ? N : 0);
        ck_assert_int_eq(stats.last_best > 0, r > 2);
        if (r >= 2) {
            /* the warm-up (16 results) is over: the trained model scores
             * every proposed state from its feature rows */
            ck_assert(kt_model_is_trained(m));
            float *rows = NULL, scores[N];
            uint32_t counts[N];
            ck_assert_int_eq(kt_feature_extract_batch(dag, (const kt_sched_state_t *const *)st,
                                                      got, &rows, counts),
                             0);
            for (int i = 0; i < got; i++)
                ck_assert_uint_gt(counts[i], 0);
            kt_model_batch_t b = {.rows = rows, .nrows = counts, .nprog = (size_t)got,
                                  .nfeat = KT_FEATURE_COUNT};
            ck_assert_int_eq(kt_model_predict(m, &b, scores), 0);
            for (int i = 0; i < got; i++)
                ck_assert_msg(isfinite(scores[i]), "round %d state %d: score %g", r, i, scores[i]);
            free(rows);
        }
        free_states(st, got);
        free_results(res, got);
    }
    double best;
    ck_assert_int_eq(kt_search_best(sp, &best, NULL), 0);
    ck_assert(best > 0 && isfinite(best));
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST

/* The states a seeded sketch.xgb policy proposes over `rounds` rounds of n
 * (with synthetic costs fed back), as one string of their JSON in order,
 * scoring on `pool` (NULL: the calling thread). */
static char *proposals(kt_pool_t *pool, uint64_t seed, int rounds, int n)
{
    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, "sketch.xgb", seed);
    /* 300 states: 5 chunks of feature extraction, the last a short one. */
    o.evolutionary_search_population = 300;
    o.evolutionary_search_num_iters = 2;
    o.num_warmup_sample = n;   /* trained (more than n results) from the third round on */
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_ptr_nonnull(sp);
    kt_search_set_pool(sp, pool);
    size_t len = 0, cap = 1 << 16;
    char *all = malloc(cap);
    ck_assert_ptr_nonnull(all);
    all[0] = '\0';
    for (int r = 0; r < rounds; r++) {
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, n, synthetic_measure, NULL, &st, &res);
        ck_assert_msg(got == n, "round %d: %d (%s)", r, got, kt_err_msg());
        for (int i = 0; i < got; i++) {
            char *j = kt_sched_state_to_json(st[i], kt_workload_dag(w));
            ck_assert_ptr_nonnull(j);
            size_t l = strlen(j);
            while (len + l + 2 > cap)
                ck_assert_ptr_nonnull(all = realloc(all, cap *= 2));
            memcpy(all + len, j, l);
            len += l;
            all[len++] = '\n';
            all[len] = '\0';
            free(j);
        }
        free_states(st, got);
        free_results(res, got);
    }
    ck_assert(kt_model_is_trained(kt_search_model(sp)));
    kt_search_policy_free(sp);
    kt_workload_free(w);
    return all;
}

/* --search-threads: a seeded policy proposes the same states in the same
 * order whether it scores on one thread or spreads feature extraction over
 * a pool of 2 or 3 (chunks joined in state order, sampling and mutation on
 * the policy's own RNG). A pool whose chunks were joined out of order, or
 * whose threads drew from the policy's RNG, would permute the scores and
 * change the model-guided rounds. */
START_TEST(search_proposals_do_not_depend_on_search_threads)
{
    char *one = proposals(NULL, 4242, 4, 16);
    ck_assert_uint_gt(strlen(one), 0);
    for (int width = 2; width <= 3; width++) {
        kt_pool_t *pool = kt_pool_new(width);
        ck_assert_msg(pool != NULL, "%s", kt_err_msg());
        char *par = proposals(pool, 4242, 4, 16);
        ck_assert_msg(strcmp(one, par) == 0, "%d threads proposed other states than one", width);
        free(par);
        kt_pool_free(pool);
    }
    /* and the seed does matter (the comparison above is not vacuous) */
    char *other = proposals(NULL, 4243, 4, 16);
    ck_assert_str_ne(one, other);
    free(other);
    free(one);
}
END_TEST

/* With the default options and rounds of 32 (ktune tune's default), the
 * model trained on the first round scores the second: random picks there
 * would waste a round the model already guides well (docs/benchmarks.md,
 * time to quality). */
START_TEST(search_xgb_model_guides_the_second_round_of_32)
{
    kt_workload_t *w = matmul(64, 64, 64);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    o.seed = 7;
    o.evolutionary_search_population = 300;
    o.evolutionary_search_num_iters = 1;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, NULL, 0);
    ck_assert_msg(sp != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_model_is_trained(kt_search_model(sp)), 0);
    kt_sched_state_t **st;
    kt_measure_result_t *res;
    int got = kt_search_one_round(sp, 32, synthetic_measure, NULL, &st, &res);
    ck_assert_msg(got == 32, "%d (%s)", got, kt_err_msg());
    free_states(st, got);
    free_results(res, got);
    ck_assert(kt_model_is_trained(kt_search_model(sp)));
    kt_search_policy_free(sp);
    kt_workload_free(w);
}
END_TEST

/* Costs that stop improving: round 0's states run at about 1 ms, every
 * later one at about 2 ms (or, `improving`, each round 5% faster than the
 * one before); the synthetic cost only orders states within a round. */
typedef struct {
    int calls, improving;
} stall_t;

static int stall_measure(void *user, const kt_workload_t *w, kt_sched_state_t *const *states,
                         int n, kt_measure_result_t *results)
{
    stall_t *s = user;
    double base = s->improving ? 1e-3 * pow(0.95, s->calls) : s->calls == 0 ? 1e-3 : 2e-3;
    s->calls++;
    int rc = synthetic_measure(NULL, w, states, n, results);
    for (int i = 0; i < n; i++)
        results[i].costs[0] = results[i].mean = base * (1 + 1e-3 * results[i].mean);
    return rc;
}

/* Rounds of 16 on matmul 64 under stall_measure with restart_after (a
 * shared model: `model`); every proposed state is new. The restarts into
 * *restarts, the statistics of the last round into *last. */
static void stall_rounds(int restart_after, kt_model_t *model, int improving, int rounds,
                         uint64_t *restarts, kt_search_stats_t *last, double *best)
{
    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, "sketch.xgb", 3);
    o.evolutionary_search_population = 512;
    o.num_warmup_sample = 8;
    o.restart_after = restart_after;
    kt_search_policy_t *sp = kt_search_policy_new(w, &p, &o, model, 0);
    ck_assert_ptr_nonnull(sp);
    stall_t cost = {.improving = improving};
    uint64_t seen[256];
    int nseen = 0;
    enum { N = 16 };
    for (int r = 0; r < rounds; r++) {
        const kt_model_t *before = kt_search_model(sp);
        kt_sched_state_t **st;
        kt_measure_result_t *res;
        int got = kt_search_one_round(sp, N, stall_measure, &cost, &st, &res);
        ck_assert_msg(got == N, "round %d: %d (%s)", r, got, kt_err_msg());
        for (int i = 0; i < got; i++) {
            uint64_t h = kt_sched_state_hash(st[i], kt_workload_dag(w));
            for (int k = 0; k < nseen; k++)
                ck_assert(h != seen[k]);
            seen[nseen++] = h;
        }
        kt_search_stats(sp, last);
        /* a restart replaces the model and spreads its first round */
        ck_assert_int_eq(kt_search_model(sp) != before, last->restarts > *restarts);
        if (last->restarts > *restarts)
            ck_assert_int_eq(last->last_picked_spread, N);
        *restarts = last->restarts;
        free_states(st, got);
        free_results(res, got);
    }
    ck_assert_int_eq(kt_search_best(sp, best, NULL), 0);
    kt_search_policy_free(sp);
    kt_workload_free(w);
}

/* restart_after 40 with rounds of 16: the best stops gaining after round
 * 0, so round 3 (48 records, 47 without a gain) starts again with a fresh
 * model; round 4 evolves from the new start's 16 records only, and the
 * task's best is still round 0's. No restart with the option off, with a
 * shared model, or while the best keeps improving. */
START_TEST(search_restarts_after_its_best_stalls)
{
    uint64_t restarts = 0;
    kt_search_stats_t s;
    double best;
    stall_rounds(40, NULL, 0, 3, &restarts, &s, &best);
    ck_assert_int_eq(restarts, 0);
    stall_rounds(40, NULL, 0, 5, &restarts, &s, &best);
    ck_assert_int_eq(restarts, 1);
    ck_assert_int_eq(s.last_picked_spread, 0);
    ck_assert_int_eq(s.last_from_measured, 16);
    ck_assert(best < 1.01e-3);
    restarts = 0;
    stall_rounds(0, NULL, 0, 5, &restarts, &s, &best);
    ck_assert_int_eq(restarts, 0);
    ck_assert_int_eq(s.last_from_measured, 64);
    kt_model_params_t mp;
    kt_model_params_default(&mp);
    mp.num_warmup_sample = 8;
    kt_model_t *shared = kt_model_new(KT_MODEL_XGB, &mp);
    ck_assert_ptr_nonnull(shared);
    stall_rounds(40, shared, 0, 5, &restarts, &s, &best);
    ck_assert_int_eq(restarts, 0);
    kt_model_free(shared);
    stall_rounds(40, NULL, 1, 6, &restarts, &s, &best);
    ck_assert_int_eq(restarts, 0);
}
END_TEST

/* ---- the store model of a device key ------------------------------------------ */

/* n states sampled for w (seeded) stored as records of (cpu, key) with their
 * synthetic costs, w itself stored too. */
static void store_fill(kt_store_t *st, const kt_workload_t *w, const char *key, int n,
                       uint64_t seed)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    ck_assert_int_eq(kt_store_put_workload(st, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)), 0);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    kt_record_t *recs = calloc((size_t)n, sizeof *recs);
    char **json = calloc((size_t)n, sizeof *json);
    double *cost = calloc((size_t)n, sizeof *cost);
    ck_assert(recs && json && cost);
    for (int i = 0; i < n; i++) {
        kt_sched_state_t *x = kt_sched_sample(dag, &p, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        ck_assert_ptr_nonnull(x);
        json[i] = kt_sched_state_to_json(x, dag);
        cost[i] = synthetic_cost(x);
        recs[i] = (kt_record_t){.workload_key = kt_workload_key(w), .target = "cpu",
                                .state_json = json[i], .state_hash = kt_sched_state_hash(x, dag),
                                .costs = &cost[i], .ncosts = 1,
                                .timestamp = (double)seed * 1e4 + i, .runner_key = key};
        kt_sched_state_free(x);
    }
    ck_assert_int_eq(kt_store_put_records(st, recs, (size_t)n), 0);
    for (int i = 0; i < n; i++)
        free(json[i]);
    free(json);
    free(cost);
    free(recs);
    free_states(sk, nsk);
}

/* Feature rows of n states sampled for w (seeded): a batch to score. */
typedef struct {
    float *rows;
    uint32_t counts[64];
    kt_model_batch_t b;
} rows_t;

static void rows_of(const kt_workload_t *w, int n, uint64_t seed, rows_t *r)
{
    ck_assert_int_le(n, 64);
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    one_thread_params(&p);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    ck_assert_int_eq(kt_sched_sketches(dag, &p, &sk, &nsk), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    kt_sched_state_t *st[64];
    for (int i = 0; i < n; i++) {
        st[i] = kt_sched_sample(dag, &p, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        ck_assert_ptr_nonnull(st[i]);
    }
    r->rows = NULL;
    ck_assert_int_eq(kt_feature_extract_batch(dag, (const kt_sched_state_t *const *)st, n,
                                              &r->rows, r->counts), 0);
    r->b = (kt_model_batch_t){.rows = r->rows, .nrows = r->counts, .nprog = (size_t)n,
                              .nfeat = KT_FEATURE_COUNT};
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    free_states(sk, nsk);
}

/* 1 when the scores are not all the same. */
static int spread(const float *s, int n)
{
    for (int i = 1; i < n; i++)
        if (s[i] != s[0])
            return 1;
    return 0;
}

static char sm_dir[64], sm_db[96];

static void sm_setup(void)
{
    snprintf(sm_dir, sizeof sm_dir, "/tmp/kt_search_sm_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(sm_dir));
    snprintf(sm_db, sizeof sm_db, "%s/s.db", sm_dir);
}

static void sm_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sm_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void sm_get(kt_store_t *st, const char *key, int flags, kt_search_store_model_t *out)
{
    kt_search_store_ref_t ref = {.store = st};
    ck_assert_int_eq(kt_search_store_model(&ref, "cpu", key, flags, out), 0);
}

#define SM_ALL (KT_SEARCH_STORE_MODEL_TRAIN | KT_SEARCH_STORE_MODEL_LOAD)

/* The model trained on two workloads' records of key k (not on another
 * key's) is written to the store and, the store reopened, read back
 * predicting exactly as before on the rows of a third workload, without a
 * retraining. A key with too few records has none, and says why. */
START_TEST(search_store_model_round_trips_through_the_store)
{
    kt_store_t *st = kt_store_open(sm_db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(st);
    kt_workload_t *w1 = matmul(32, 32, 32), *w2 = matmul(48, 32, 64), *w3 = matmul(64, 64, 64);
    store_fill(st, w1, "k", 50, 1);
    store_fill(st, w2, "k", 50, 2);
    store_fill(st, w1, "other", 80, 3);
    kt_search_store_model_t a, b;
    sm_get(st, "k", SM_ALL, &a);
    ck_assert_msg(a.model && a.trained && !a.warn, "%s", a.note);
    ck_assert_int_eq(a.version, 1);
    ck_assert_int_eq(a.records, 100);
    ck_assert(kt_model_is_trained(a.model));
    rows_t r;
    rows_of(w3, 32, 5, &r);
    float s1[32], s2[32];
    ck_assert_int_eq(kt_model_predict(a.model, &r.b, s1), 0);
    ck_assert_msg(spread(s1, 32), "the store model scores every state alike");
    kt_store_cost_model_t *row = NULL;
    ck_assert_int_eq(kt_store_get_cost_model(st, "cpu", "k", &row), 0);
    ck_assert_int_eq(row->feature_version, KT_FEATURE_VERSION);
    ck_assert_int_eq(row->format_version, KT_MODEL_FILE_VERSION);
    ck_assert_int_eq(row->records, 100);
    ck_assert_int_eq(row->max_record_id, 100);   /* k's records are ids 1..100 */
    kt_store_cost_model_free(row);
    kt_store_close(st);

    st = kt_store_open(sm_db, 0);
    ck_assert_ptr_nonnull(st);
    sm_get(st, "k", SM_ALL, &b);
    ck_assert_msg(b.model && !b.trained && !b.warn, "%s", b.note);
    ck_assert_int_eq(b.version, 1);
    ck_assert_int_eq(b.records, 100);
    ck_assert_int_eq(kt_model_predict(b.model, &r.b, s2), 0);
    ck_assert_mem_eq(s1, s2, sizeof s1);
    kt_search_store_model_clear(&b);

    kt_search_store_model_t none;
    sm_get(st, "nobody", SM_ALL, &none);
    ck_assert_ptr_null(none.model);
    ck_assert(!none.trained && !none.warn && none.version == 0);
    ck_assert_msg(strstr(none.note, "fewer than"), "%s", none.note);
    kt_store_close(st);
    kt_search_store_model_clear(&a);
    free(r.rows);
    kt_workload_free(w1);
    kt_workload_free(w2);
    kt_workload_free(w3);
}
END_TEST

/* A model goes stale at KT_SEARCH_STORE_MODEL_NEW new records of its key,
 * not one before: then TRAIN trains version 2 on all of them (BUILD, which
 * trains only a missing model, uses version 1 still). */
START_TEST(search_store_model_retrains_once_enough_records_are_new)
{
    kt_store_t *st = kt_store_open(sm_db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(st);
    kt_workload_t *w1 = matmul(32, 32, 32), *w2 = matmul(48, 32, 64);
    store_fill(st, w1, "k", 100, 1);
    kt_search_store_model_t m;
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_TRAIN, &m);
    ck_assert_msg(m.trained && m.version == 1 && !m.model, "%s", m.note);
    store_fill(st, w2, "k", KT_SEARCH_STORE_MODEL_NEW - 1, 2);
    sm_get(st, "k", SM_ALL, &m);
    ck_assert_msg(!m.trained && m.version == 1 && m.model, "%s", m.note);
    kt_search_store_model_clear(&m);
    store_fill(st, w2, "k", 1, 3);
    /* stale now, but BUILD trains only where there is no usable model */
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_LOAD | KT_SEARCH_STORE_MODEL_BUILD, &m);
    ck_assert_msg(!m.trained && m.version == 1 && m.model, "%s", m.note);
    kt_search_store_model_clear(&m);
    sm_get(st, "k", SM_ALL, &m);
    ck_assert_msg(m.trained && m.version == 2 && m.model && !m.warn, "%s", m.note);
    ck_assert_int_eq(m.records, 100 + KT_SEARCH_STORE_MODEL_NEW);
    kt_search_store_model_clear(&m);
    kt_store_close(st);
    kt_workload_free(w1);
    kt_workload_free(w2);
}
END_TEST

/* Run sql on the store's file with one blob parameter (NULL: none). */
static void sql_blob(const char *sql, const void *blob, size_t len)
{
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(sm_db, &db), SQLITE_OK);
    sqlite3_stmt *q;
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    if (blob)
        sqlite3_bind_blob(q, 1, blob, (int)len, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* A row of another feature version is ignored and rebuilt (no warning: it
 * is expected after an upgrade); a row whose booster XGBoost refuses (its
 * header and checksum intact) is never used, is rebuilt with a warning,
 * and nothing fails. */
START_TEST(search_store_model_rebuilds_other_feature_versions_and_corrupt_rows)
{
    kt_store_t *st = kt_store_open(sm_db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(st);
    kt_workload_t *w1 = matmul(32, 32, 32);
    store_fill(st, w1, "k", 80, 1);
    kt_search_store_model_t m;
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_TRAIN, &m);
    ck_assert_int_eq(m.version, 1);
    kt_store_close(st);

    sql_blob("UPDATE cost_models SET feature_version = 1", NULL, 0);
    st = kt_store_open(sm_db, 0);
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_LOAD, &m);
    ck_assert_msg(!m.model && !m.warn && strstr(m.note, "feature version"), "%s", m.note);
    sm_get(st, "k", SM_ALL, &m);
    ck_assert_msg(m.model && m.trained && m.version == 2 && !m.warn, "%s", m.note);
    ck_assert_msg(strstr(m.note, "feature version"), "%s", m.note);
    kt_search_store_model_clear(&m);

    /* the stored bytes with the booster overwritten and its checksum redone */
    kt_store_cost_model_t *row = NULL;
    ck_assert_int_eq(kt_store_get_cost_model(st, "cpu", "k", &row), 0);
    kt_store_close(st);
    char *bytes = malloc(row->model_len + 1);
    memcpy(bytes, row->model, row->model_len);
    bytes[row->model_len] = 0;
    char *nl = memchr(bytes, '\n', row->model_len), *h = strstr(bytes, "\"booster_xxh3\":\"");
    char *bb = strstr(bytes, "\"booster_bytes\":");
    ck_assert(nl && h && bb && h < nl);
    size_t blen = (size_t)atol(bb + strlen("\"booster_bytes\":"));
    ck_assert(blen > 0 && blen <= row->model_len - (size_t)(nl + 1 - bytes));
    memset(nl + 1, 'x', blen);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, kt_hash64(nl + 1, blen));
    memcpy(h + strlen("\"booster_xxh3\":\""), hex, 16);
    sql_blob("UPDATE cost_models SET model = ?1", bytes, row->model_len);
    free(bytes);
    kt_store_cost_model_free(row);

    st = kt_store_open(sm_db, 0);
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_LOAD, &m);
    ck_assert_msg(!m.model && m.warn && strstr(m.note, "unreadable") && strstr(m.note, "xgboost"),
                  "%s", m.note);
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_LOAD | KT_SEARCH_STORE_MODEL_BUILD, &m);
    ck_assert_msg(m.model && m.trained && m.version == 3 && m.warn, "%s", m.note);
    ck_assert(kt_model_is_trained(m.model));
    kt_search_store_model_clear(&m);
    sm_get(st, "k", KT_SEARCH_STORE_MODEL_LOAD, &m);
    ck_assert_msg(m.model && !m.warn && m.version == 3, "%s", m.note);
    kt_search_store_model_clear(&m);
    kt_store_close(st);
    kt_workload_free(w1);
}
END_TEST

/* A job's shared model (sketch.xgb over two tasks) started from the store
 * model scores the first round: it evolves by the model and picks by its
 * scores, which differ between states, where the same family without it
 * spreads the round over the sample (unchanged). A single task's own model
 * takes it too, sketch.random has none to give it to, and a model of other
 * labels refuses it and proposes as before. */
START_TEST(search_family_started_from_the_store_model_guides_its_first_round)
{
    kt_store_t *st = kt_store_open(sm_db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(st);
    kt_workload_t *w1 = matmul(32, 32, 32), *w2 = matmul(48, 32, 64);
    store_fill(st, w1, "k", 60, 1);
    store_fill(st, w2, "k", 60, 2);
    kt_search_store_model_t sm;
    sm_get(st, "k", SM_ALL, &sm);
    ck_assert_msg(sm.model, "%s", sm.note);
    kt_store_close(st);

    kt_sched_params_t p;
    kt_search_opts_t o;
    kt_workload_t *w = small_matmul(&p, &o, "sketch.xgb", 3), *v = matmul(64, 32, 32);
    const kt_workload_t *wl[] = {w, v};
    enum { N = 8 };
    for (int with = 0; with < 2; with++) {
        kt_search_family_t *f = kt_search_family_new(wl, 2, &p, &o);
        ck_assert_ptr_nonnull(f);
        if (with)
            ck_assert_int_eq(kt_search_family_set_prior(f, sm.model), 1);
        kt_sched_state_t **got = NULL;
        ck_assert_int_eq(kt_search_family_propose(f, 0, N, &got), N);
        kt_search_stats_t s;
        kt_search_stats(kt_search_family_policy(f, 0), &s);
        ck_assert_int_eq(s.last_picked_spread, with ? 0 : N);
        ck_assert_int_eq(s.last_num_iters, with ? o.evolutionary_search_num_iters : 0);
        ck_assert_int_eq(kt_model_is_trained(kt_search_family_model(f, 0)), with);
        if (with) {
            float *rows = NULL, sc[N];
            uint32_t counts[N];
            ck_assert_int_eq(kt_feature_extract_batch(kt_workload_dag(w),
                                                      (const kt_sched_state_t *const *)got, N,
                                                      &rows, counts), 0);
            kt_model_batch_t b = {rows, counts, N, KT_FEATURE_COUNT};
            ck_assert_int_eq(kt_model_predict(kt_search_family_model(f, 0), &b, sc), 0);
            ck_assert_msg(spread(sc, N), "the first round's scores are all alike");
            free(rows);
        }
        free_states(got, N);
        kt_search_family_free(f);
    }
    kt_search_family_t *one = kt_search_family_new(wl, 1, &p, &o);
    ck_assert_int_eq(kt_search_family_set_prior(one, sm.model), 1);
    ck_assert(kt_model_is_trained(kt_search_model(kt_search_family_policy(one, 0))));
    kt_search_family_free(one);
    o.policy = "sketch.random";
    kt_search_family_t *rnd = kt_search_family_new(wl, 2, &p, &o);
    ck_assert_int_eq(kt_search_family_set_prior(rnd, sm.model), 0);
    kt_search_family_free(rnd);
    o.policy = "sketch.xgb";
    o.model_label = KT_MODEL_LABEL_LOG;
    kt_search_family_t *log = kt_search_family_new(wl, 2, &p, &o);
    ck_assert_int_eq(kt_search_family_set_prior(log, sm.model), KT_EINVAL);
    kt_sched_state_t **got = NULL;
    ck_assert_int_eq(kt_search_family_propose(log, 0, N, &got), N);
    kt_search_stats_t s;
    kt_search_stats(kt_search_family_policy(log, 0), &s);
    ck_assert_int_eq(s.last_picked_spread, N);
    free_states(got, N);
    kt_search_family_free(log);
    kt_search_store_model_clear(&sm);
    kt_workload_free(w);
    kt_workload_free(v);
    kt_workload_free(w1);
    kt_workload_free(w2);
}
END_TEST

static Suite *search_suite(void)
{
    Suite *s = suite_create("search");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, search_opts_default_are_ansors);
    tcase_add_test(tc, search_untrained_model_spreads_the_first_round_over_the_sample);
    tcase_add_test(tc, search_opts_set_from_key_value_lists);
    tcase_add_test(tc, search_policy_new_rejects_bad_input);
    tcase_add_test(tc, search_candidate_layout_entry_and_reference);
    tcase_add_test(tc, search_one_round_measures_real_kernels_and_tracks_the_best);
    tcase_add_test(tc, search_never_proposes_measured_preloaded_or_reported_states);
    tcase_add_test(tc, search_eps_greedy_share_and_population_follow_the_options);
    tcase_add_test(tc, search_origins_name_the_source_of_each_proposal);
    tcase_add_test(tc, search_diversity_pick_covers_more_knob_values);
    tcase_add_test(tc, search_tile_cap_spreads_picks_over_register_tiles);
    tcase_add_test(tc, search_location_siblings_place_the_best_states_padding_otherwise);
    tcase_add_test(tc, search_location_siblings_take_the_best_tiles_in_turn);
    tcase_add_test(tc, search_tile_siblings_reshape_the_best_states_register_tile);
    tcase_add_test(tc, search_direct_sibling_ends_the_best_states_reduction_in_its_tile);
    tcase_add_test(tc, search_row_sibling_gathers_the_best_states_rows_outermost);
    tcase_add_test(tc, search_tiny_space_is_exhausted_then_propose_returns_zero);
    tcase_add_test(tc, search_shared_model_learns_from_preloaded_and_measured_states);
    tcase_add_test(tc, search_xgb_finds_better_states_than_random_on_a_synthetic_cost);
    tcase_add_test(tc, search_model_update_from_store_trains_on_stored_records);
    tcase_add_test(tc, search_xgb_scores_and_proposes_gpu_states);
    tcase_add_test(tc, search_proposals_do_not_depend_on_search_threads);
    tcase_add_test(tc, search_xgb_model_guides_the_second_round_of_32);
    tcase_add_test(tc, search_restarts_after_its_best_stalls);
    suite_add_tcase(s, tc);
    TCase *sm = tcase_create("store_model");
    tcase_set_timeout(sm, 300);
    tcase_add_checked_fixture(sm, sm_setup, sm_teardown);
    tcase_add_test(sm, search_store_model_round_trips_through_the_store);
    tcase_add_test(sm, search_store_model_retrains_once_enough_records_are_new);
    tcase_add_test(sm, search_store_model_rebuilds_other_feature_versions_and_corrupt_rows);
    tcase_add_test(sm, search_family_started_from_the_store_model_guides_its_first_round);
    suite_add_tcase(s, sm);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(search_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
