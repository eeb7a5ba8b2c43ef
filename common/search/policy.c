/* The sketch search policy: initial population, evolutionary search scored by
 * the cost model, epsilon-greedy pick, feedback (as Ansor's SketchPolicy does
 * one round of search; search.h states the contract).
 *
 * Crossover is not done: Ansor's released SketchPolicy does not do it either,
 * and a child combining two parents' stages is rarely valid here (a fused or
 * computed-at stage follows its producer's tiling), so evolution is mutation
 * only. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search_int.h"
#include "util/err.h"
#include "util/kv.h"
#include "util/log.h"
#include "util/util.h"

/* Ansor caps evolution at a few iterations when the model is random: more
 * iterations only reshuffle random scores. */
#define RANDOM_MODEL_MAX_ITERS 3
/* Unchanged sampling batches before the population target is halved (Ansor). */
#define SAMPLE_UNCHANGED_LIMIT 5
/* Mutation attempts per population slot before the rest is filled with copies
 * (a state space where nothing mutates would otherwise loop forever). */
#define MUTATE_TRIES_PER_SLOT 20
/* Fewest best-scored states per pick a capped pick (tile_family_share < 1)
 * chooses from; it keeps at least a population's worth (see search_round). */
#define TILE_CAP_POOL 16
/* Smallest gain of a start's best that counts as progress (restart_after):
 * re-timings of one state differ by about this much. */
#define RESTART_MIN_GAIN 0.01

void kt_search_opts_default(kt_search_opts_t *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->policy = "sketch.xgb";
    o->eps_greedy = 0.05;
    o->sample_init_min_population = 50;
    o->sample_init_use_measured_ratio = 0.2;
    o->evolutionary_search_population = 2048;
    o->evolutionary_search_num_iters = 4;
    o->evolutionary_search_mutation_prob = 0.85;
    o->retry_search_one_round_on_empty = 10;
    /* Ansor's is 100; lower, because a model trained on a few dozen random
     * programs already picks far better than chance: with rounds of 32 it
     * guides the second round (docs/benchmarks.md, time to quality). */
    o->num_warmup_sample = 16;
    /* The pairwise ranking objective, because the search only needs the
     * order of its candidates and ranking orders them at least as well as
     * regression on throughput. */
    o->model_label = KT_MODEL_LABEL_RANK;
    /* At most a quarter of a round per register tile, because Ansor's
     * plain best-scored pick soon fills whole rounds with the one tile the
     * model saw run fastest, and a search that settles on a poor tile that
     * way never leaves it. */
    o->tile_family_share = 0.25;
    o->location_siblings = 2;
    o->location_sibling_tiles = 4;
    /* Off: in an A/B run (docs/benchmarks.md) it changed nothing measurable. */
    o->tile_siblings = 0;
    o->direct_siblings = 1;
    /* On: in an A/B run of the stem over five seeds (docs/benchmarks.md) the
     * searches with it reached oneDNN on four, those without it on two. */
    o->row_siblings = 1;
    o->restart_after = 0;
    o->foresee_population = 256;
    o->foresee_num_iters = 2;
    o->foresee_keep = 64;
    /* Ansor's random warm-up for a job's shared model: letting the model
     * pick the late tasks' first rounds made those rounds faster but not
     * the network's final latency (docs/benchmarks.md). */
    o->warmup = KT_SEARCH_WARMUP_RANDOM;
    /* A quarter of a default round of 32: enough for the best few states of
     * each of the nearest workloads, while most of the first round still
     * samples the task's own space (a re-fitted state is only as good as the
     * shapes are alike). */
    o->transfer = 8;
    o->transfer_workloads = 4;
    o->store_model = 1;
}

static int opts_check(const kt_search_opts_t *o)
{
    if (!(o->eps_greedy >= 0 && o->eps_greedy <= 1))
        return kt_err_set(KT_EINVAL, "search: eps_greedy must be in [0, 1]");
    if (o->sample_init_min_population < 1)
        return kt_err_set(KT_EINVAL, "search: sample_init_min_population must be >= 1");
    if (!(o->sample_init_use_measured_ratio >= 0 && o->sample_init_use_measured_ratio <= 1))
        return kt_err_set(KT_EINVAL, "search: sample_init_use_measured_ratio must be in [0, 1]");
    if (o->evolutionary_search_population < 1)
        return kt_err_set(KT_EINVAL, "search: evolutionary_search_population must be >= 1");
    if (o->evolutionary_search_num_iters < 0)
        return kt_err_set(KT_EINVAL, "search: evolutionary_search_num_iters must be >= 0");
    if (!(o->evolutionary_search_mutation_prob >= 0 && o->evolutionary_search_mutation_prob <= 1))
        return kt_err_set(KT_EINVAL, "search: evolutionary_search_mutation_prob must be in [0, 1]");
    if (o->retry_search_one_round_on_empty < 0)
        return kt_err_set(KT_EINVAL, "search: retry_search_one_round_on_empty must be >= 0");
    if (o->num_warmup_sample < 0)
        return kt_err_set(KT_EINVAL, "search: num_warmup_sample must be >= 0");
    if (!kt_model_label_name(o->model_label))
        return kt_err_set(KT_EINVAL, "search: unknown model_label %d", o->model_label);
    if (o->warmup != KT_SEARCH_WARMUP_RANDOM && o->warmup != KT_SEARCH_WARMUP_MODEL)
        return kt_err_set(KT_EINVAL, "search: unknown warmup %d", o->warmup);
    if (!(o->diversity_filter_ratio == 0 ||
          (o->diversity_filter_ratio >= 1 && o->diversity_filter_ratio <= KT_SEARCH_MAX_DIVERSITY)))
        return kt_err_set(KT_EINVAL, "search: diversity_filter_ratio must be 0 (off) or in [1, %d]",
                          KT_SEARCH_MAX_DIVERSITY);
    if (!(o->tile_family_share > 0 && o->tile_family_share <= 1))
        return kt_err_set(KT_EINVAL, "search: tile_family_share must be in (0, 1]");
    if (o->location_siblings < 0 || o->location_siblings > 64)
        return kt_err_set(KT_EINVAL, "search: location_siblings must be in [0, 64]");
    if (o->location_sibling_tiles < 1 || o->location_sibling_tiles > KT_SEARCH_MAX_SIBLING_TILES)
        return kt_err_set(KT_EINVAL, "search: location_sibling_tiles must be in [1, %d]",
                          KT_SEARCH_MAX_SIBLING_TILES);
    if (o->tile_siblings < 0 || o->tile_siblings > 64)
        return kt_err_set(KT_EINVAL, "search: tile_siblings must be in [0, 64]");
    if (o->direct_siblings < 0 || o->direct_siblings > 1)
        return kt_err_set(KT_EINVAL, "search: direct_siblings must be 0 or 1");
    if (o->row_siblings < 0 || o->row_siblings > 1)
        return kt_err_set(KT_EINVAL, "search: row_siblings must be 0 or 1");
    if (o->restart_after < 0 || o->restart_after > KT_SEARCH_MAX_POPULATION)
        return kt_err_set(KT_EINVAL, "search: restart_after must be in [0, %d]",
                          KT_SEARCH_MAX_POPULATION);
    if (o->transfer < 0 || o->transfer > KT_SEARCH_MAX_TRANSFER)
        return kt_err_set(KT_EINVAL, "search: transfer must be in [0, %d]",
                          KT_SEARCH_MAX_TRANSFER);
    if (o->transfer_workloads < 1 || o->transfer_workloads > KT_SEARCH_MAX_TRANSFER_WORKLOADS)
        return kt_err_set(KT_EINVAL, "search: transfer_workloads must be in [1, %d]",
                          KT_SEARCH_MAX_TRANSFER_WORKLOADS);
    if (o->store_model < 0 || o->store_model > 1)
        return kt_err_set(KT_EINVAL, "search: store_model must be 0 or 1");
    if (o->foresee_population < 1 || o->foresee_num_iters < 0 || o->foresee_keep < 1)
        return kt_err_set(KT_EINVAL, "search: foresee_population and foresee_keep must be >= 1, "
                                     "foresee_num_iters >= 0");
    /* Upper bounds: options now come from users' jobs, and a population of
     * a billion states would exhaust the tracker's memory, not just be slow. */
    if (o->sample_init_min_population > KT_SEARCH_MAX_POPULATION ||
        o->evolutionary_search_population > KT_SEARCH_MAX_POPULATION ||
        o->foresee_population > KT_SEARCH_MAX_POPULATION || o->foresee_keep > KT_SEARCH_MAX_POPULATION)
        return kt_err_set(KT_EINVAL, "search: populations must be at most %d",
                          KT_SEARCH_MAX_POPULATION);
    if (o->evolutionary_search_num_iters > KT_SEARCH_MAX_ITERS ||
        o->foresee_num_iters > KT_SEARCH_MAX_ITERS ||
        o->retry_search_one_round_on_empty > KT_SEARCH_MAX_ITERS)
        return kt_err_set(KT_EINVAL, "search: iteration and retry counts must be at most %d",
                          KT_SEARCH_MAX_ITERS);
    return 0;
}

/* One "key=value" of kt_search_opts_set into the options. */
static int opt_set_one(void *user, const char *key, const char *val)
{
    static const kt_kv_field_t num[] = {
        {"eps_greedy", offsetof(kt_search_opts_t, eps_greedy), 'd'},
        {"sample_init_min_population", offsetof(kt_search_opts_t, sample_init_min_population), 'i'},
        {"sample_init_use_measured_ratio",
         offsetof(kt_search_opts_t, sample_init_use_measured_ratio), 'd'},
        {"evolutionary_search_population",
         offsetof(kt_search_opts_t, evolutionary_search_population), 'i'},
        {"evolutionary_search_num_iters",
         offsetof(kt_search_opts_t, evolutionary_search_num_iters), 'i'},
        {"evolutionary_search_mutation_prob",
         offsetof(kt_search_opts_t, evolutionary_search_mutation_prob), 'd'},
        {"retry_search_one_round_on_empty",
         offsetof(kt_search_opts_t, retry_search_one_round_on_empty), 'i'},
        {"num_warmup_sample", offsetof(kt_search_opts_t, num_warmup_sample), 'i'},
        {"diversity_filter_ratio", offsetof(kt_search_opts_t, diversity_filter_ratio), 'd'},
        {"tile_family_share", offsetof(kt_search_opts_t, tile_family_share), 'd'},
        {"location_siblings", offsetof(kt_search_opts_t, location_siblings), 'i'},
        {"location_sibling_tiles", offsetof(kt_search_opts_t, location_sibling_tiles), 'i'},
        {"tile_siblings", offsetof(kt_search_opts_t, tile_siblings), 'i'},
        {"direct_siblings", offsetof(kt_search_opts_t, direct_siblings), 'i'},
        {"row_siblings", offsetof(kt_search_opts_t, row_siblings), 'i'},
        {"restart_after", offsetof(kt_search_opts_t, restart_after), 'i'},
        {"foresee_population", offsetof(kt_search_opts_t, foresee_population), 'i'},
        {"foresee_num_iters", offsetof(kt_search_opts_t, foresee_num_iters), 'i'},
        {"foresee_keep", offsetof(kt_search_opts_t, foresee_keep), 'i'},
        {"transfer", offsetof(kt_search_opts_t, transfer), 'i'},
        {"transfer_workloads", offsetof(kt_search_opts_t, transfer_workloads), 'i'},
        {"store_model", offsetof(kt_search_opts_t, store_model), 'i'},
    };
    kt_search_opts_t *o = user;
    if (strcmp(key, "model_label") == 0) {
        int v = kt_model_label_parse(val);
        if (v < 0)
            return kt_err_set(KT_EINVAL, "search parameter model_label: unknown value '%s' "
                                         "(throughput, log or rank)", val);
        o->model_label = v;
        return KT_OK;
    }
    if (strcmp(key, "warmup") == 0) {
        if (strcmp(val, "random") == 0)
            o->warmup = KT_SEARCH_WARMUP_RANDOM;
        else if (strcmp(val, "model") == 0)
            o->warmup = KT_SEARCH_WARMUP_MODEL;
        else
            return kt_err_set(KT_EINVAL, "search parameter warmup: unknown value '%s' "
                                         "(random or model)", val);
        return KT_OK;
    }
    if (strcmp(key, "policy") == 0 || strcmp(key, "seed") == 0)
        return kt_err_set(KT_EINVAL, "search parameter %s: set it as the job's %s, not here", key,
                          key);
    return kt_kv_set_number(o, num, KT_ARRAY_LEN(num), "search parameter", key, val);
}

static int opts_check_any(const void *o)
{
    return opts_check(o);
}

int kt_search_opts_set(kt_search_opts_t *o, const char *list)
{
    return kt_kv_update(o, sizeof *o, list, "search parameters", opt_set_one, opts_check_any);
}

void kt_search_model_params(const kt_search_opts_t *o, uint64_t seed, kt_model_params_t *mp)
{
    kt_model_params_default(mp);
    mp->seed = seed;
    mp->num_warmup_sample = o->num_warmup_sample;
    mp->label = o->model_label;
    mp->tree_method = KT_MODEL_TREE_HIST;
    /* Ansor weights each program by its normalized throughput: unweighted,
     * the many slow random programs teach the model that a factor is slow
     * wherever it came with a bad tile (a whole reduction innermost, say),
     * and it ranks that factor low beside the best tiles too (issue 25). */
    mp->weight_by_label = 1;
}

kt_search_policy_t *kt_search_policy_new(const kt_workload_t *w, const kt_sched_params_t *params,
                                         const kt_search_opts_t *opts, kt_model_t *model,
                                         int task_id)
{
    if (!w) {
        kt_err_set(KT_EINVAL, "search: no workload");
        return NULL;
    }
    kt_search_opts_t o;
    if (opts)
        o = *opts;
    else
        kt_search_opts_default(&o);
    const char *name = o.policy ? o.policy : "sketch.xgb";
    int xgb;
    if (strcmp(name, "sketch.xgb") == 0) {
        xgb = 1;
    } else if (strcmp(name, "sketch.random") == 0) {
        xgb = 0;
    } else if (kt_search_policy_check(name) == 0) {
        kt_err_set(KT_EINVAL, "search: policy '%s' groups a job's tasks into families: make its "
                              "policies with kt_search_family_new", name);
        return NULL;
    } else {
        kt_err_set(KT_EINVAL, "search: unknown policy '%s' (sketch.xgb, sketch.random)", name);
        return NULL;
    }
    if (opts_check(&o))
        return NULL;
    kt_search_policy_t *sp = calloc(1, sizeof(*sp));
    if (!sp) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    sp->w = w;
    sp->dag = kt_workload_dag(w);
    if (params)
        sp->params = *params;
    else
        kt_sched_params_default(&sp->params);
    sp->opts = o;
    snprintf(sp->name, sizeof(sp->name), "%s", name);
    sp->opts.policy = sp->name;
    sp->task_id = (uint64_t)(int64_t)task_id;
    sp->best = sp->start_best = -1;
    kt_rng_seed(&sp->rng, o.seed);
    sp->score_rng = kt_hash64(&o.seed, sizeof o.seed);
    if (model) {
        sp->model = model;
    } else {
        kt_model_params_t mp;
        kt_search_model_params(&o, o.seed, &mp);
        sp->model = kt_model_new(xgb ? KT_MODEL_XGB : KT_MODEL_RANDOM, &mp);
        if (!sp->model) {
            free(sp);
            return NULL;
        }
        sp->own_model = 1;
    }
    /* the model's kind decides whether states need features: a shared
     * family model may differ from what the policy's name says */
    sp->features = strcmp(kt_model_kind(sp->model), KT_MODEL_XGB) == 0;
    return sp;
}

void kt_search_policy_free(kt_search_policy_t *sp)
{
    if (!sp)
        return;
    if (sp->own_model)
        kt_model_free(sp->model);
    for (int i = 0; i < sp->nsketches; i++)
        kt_sched_state_free(sp->sketches[i]);
    free(sp->sketches);
    kt_hset_free(&sp->measured);
    kt_hset_free(&sp->relocated);
    kt_slist_free(&sp->foresight);
    kt_slist_free(&sp->seeds);
    for (int i = 0; i < sp->nhist; i++)
        kt_sched_state_free(sp->hist[i].st);
    free(sp->hist);
    free(sp);
}

void kt_search_set_has_measured(kt_search_policy_t *sp, kt_search_has_measured_fn fn, void *user)
{
    if (!sp)
        return;
    sp->has_fn = fn;
    sp->has_user = user;
}

void kt_search_set_pool(kt_search_policy_t *sp, kt_pool_t *pool)
{
    if (sp)
        sp->pool = pool;
}

void kt_search_stats(const kt_search_policy_t *sp, kt_search_stats_t *out)
{
    if (!out)
        return;
    if (!sp) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = sp->stats;
}

kt_model_t *kt_search_model(const kt_search_policy_t *sp)
{
    return sp ? sp->model : NULL;
}

const kt_sched_params_t *kt_search_params(const kt_search_policy_t *sp)
{
    return sp ? &sp->params : NULL;
}

void kt_search_last_times(const kt_search_policy_t *sp, double *search_s, double *train_s)
{
    if (search_s)
        *search_s = sp ? sp->search_s : 0;
    if (train_s)
        *train_s = sp ? sp->train_s : 0;
}

/* ---- history of measured states ---------------------------------------------- */

static int valid_cost(double c)
{
    return isfinite(c) && c > 0 && c < KT_MEASURE_MAX_COST;
}

/* Record a measured state (taken over) with its cost. */
static int hist_add(kt_search_policy_t *sp, kt_sched_state_t *st, uint64_t hash, double cost)
{
    if (sp->nhist == sp->caphist) {
        int cap = sp->caphist ? sp->caphist * 2 : 64;
        kt_measured_t *h = realloc(sp->hist, (size_t)cap * sizeof(*h));
        if (!h) {
            kt_sched_state_free(st);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        sp->hist = h;
        sp->caphist = cap;
    }
    if (kt_hset_add(&sp->measured, hash) < 0) {
        kt_sched_state_free(st);
        return KT_ENOMEM;
    }
    if (!valid_cost(cost))
        cost = -1;
    sp->hist[sp->nhist] = (kt_measured_t){.st = st, .cost = cost};
    if (cost > 0 && (sp->best < 0 || cost < sp->hist[sp->best].cost))
        sp->best = sp->nhist;
    if (cost > 0 && (sp->start_best < 0 || cost < sp->hist[sp->start_best].cost)) {
        if (sp->start_best < 0 || cost < (1 - RESTART_MIN_GAIN) * sp->hist[sp->start_best].cost)
            sp->start_gain = sp->nhist + 1;
        sp->start_best = sp->nhist;
    }
    sp->nhist++;
    return 0;
}

int kt_search_preload(kt_search_policy_t *sp, const char *state_json, double cost)
{
    if (!sp || !state_json)
        return kt_err_set(KT_EINVAL, "search preload: no policy or state");
    kt_sched_state_t *st = kt_sched_state_from_json(state_json, sp->dag, &sp->params);
    if (!st) {
        kt_err_prefix("search preload: ");
        return KT_EINVAL;
    }
    uint64_t h = kt_sched_state_hash(st, sp->dag);
    if (!h) {
        kt_sched_state_free(st);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    int rc = hist_add(sp, st, h, cost);
    if (rc)
        return rc;
    sp->npending++;
    sp->stats.preloaded++;
    return 0;
}

int kt_search_best(const kt_search_policy_t *sp, double *cost, char **json)
{
    if (json)
        *json = NULL;
    if (!sp)
        return kt_err_set(KT_EINVAL, "search: no policy");
    if (sp->best < 0)
        return kt_err_set(KT_ENOTFOUND, "search: nothing valid measured yet");
    if (cost)
        *cost = sp->hist[sp->best].cost;
    if (json) {
        *json = kt_sched_state_to_json(sp->hist[sp->best].st, sp->dag);
        if (!*json)
            return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    }
    return 0;
}

int kt_search_record(kt_search_policy_t *sp, kt_sched_state_t *const *states,
                     const double *costs, int n)
{
    if (!sp || n < 0 || (n > 0 && (!states || !costs)))
        return kt_err_set(KT_EINVAL, "search feedback: bad arguments");
    for (int i = 0; i < n; i++) {
        if (!states[i] || states[i]->nstages != kt_dag_num_stages(sp->dag))
            return kt_err_set(KT_EINVAL, "search feedback: state %d does not fit the workload", i);
    }
    for (int i = 0; i < n; i++) {
        kt_sched_state_t *c = kt_sched_state_clone(states[i]);
        uint64_t h = c ? kt_sched_state_hash(c, sp->dag) : 0;
        if (!h) {
            kt_sched_state_free(c);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        int rc = hist_add(sp, c, h, costs[i]);
        if (rc)
            return rc;
        sp->npending++;
        sp->stats.measured++;
    }
    return 0;
}

int kt_search_feedback(kt_search_policy_t *sp, kt_sched_state_t *const *states,
                       const double *costs, int n)
{
    int rc = kt_search_record(sp, states, costs, n);
    if (rc)
        return rc;
    /* the model trains on everything it has not seen: this round's results
     * and any preloaded records (adaptive training is the model's business) */
    double t0 = kt_time_mono();
    rc = kt_search_train_pending(&sp, 1, sp->model);
    sp->train_s = kt_time_mono() - t0;
    return rc;
}

/* ---- one search round ------------------------------------------------------------ */

/* Whether state hash h may be proposed: not measured, preloaded or proposed
 * before, and not measured according to the caller. Positive answers of the
 * caller are remembered. */
static int is_new(kt_search_policy_t *sp, uint64_t h)
{
    if (kt_hset_has(&sp->measured, h))
        return 0;
    if (sp->has_fn && sp->has_fn(sp->has_user, h)) {
        kt_hset_add(&sp->measured, h);   /* OOM only costs a repeated question */
        return 0;
    }
    return 1;
}

static int ensure_sketches(kt_search_policy_t *sp)
{
    if (sp->sketches)
        return 0;
    int rc = kt_sched_sketches(sp->dag, &sp->params, &sp->sketches, &sp->nsketches);
    if (rc)
        return rc;
    if (sp->nsketches == 0)
        return kt_err_set(KT_EINTERNAL, "search: the workload has no sketch");
    sp->stats.nsketches = sp->nsketches;
    return 0;
}

/* Score l->st[from..l->n) into l->score. */
static int score_list(kt_search_policy_t *sp, kt_slist_t *l, int from)
{
    if (l->n <= from)
        return 0;
    return kt_search_score(sp, l->st + from, l->n - from, l->score + from);
}

/* Ansor's SampleInitPopulation: batches of `population` random states from
 * random sketches until at least sample_init_min_population valid distinct
 * ones exist (the target halves after 5 batches with nothing new). */
static int sample_population(kt_search_policy_t *sp, kt_slist_t *pop, int target, int batch)
{
    kt_hset_t seen = {0};
    kt_slist_t cand = {0};
    int unchanged = 0, rc = 0;
    while (pop->n < target) {
        kt_slist_clear(&cand);
        for (int i = 0; i < batch; i++) {
            const kt_sched_state_t *sk = sp->sketches[kt_rng_below(&sp->rng, (uint64_t)sp->nsketches)];
            kt_sched_state_t *st = kt_sched_sample(sp->dag, &sp->params, sk, &sp->rng);
            if (!st)
                continue;   /* an annotation rule rejected it */
            uint64_t h = kt_sched_state_hash(st, sp->dag);
            if (!h) {
                kt_sched_state_free(st);
                rc = kt_err_set(KT_ENOMEM, "out of memory");
                goto out;
            }
            int added = kt_hset_add(&seen, h);
            if (added <= 0) {
                kt_sched_state_free(st);
                if (added < 0) {
                    rc = KT_ENOMEM;
                    goto out;
                }
                continue;
            }
            if ((rc = kt_slist_push(&cand, st, h)))
                goto out;
        }
        unchanged++;
        if ((rc = score_list(sp, &cand, 0)))
            goto out;
        for (int i = 0; i < cand.n; i++) {
            if (!(cand.score[i] > -1e10f))
                continue;   /* the model cannot score it: invalid */
            if ((rc = kt_slist_push(pop, cand.st[i], cand.hash[i])))
                goto out;
            pop->score[pop->n - 1] = cand.score[i];
            cand.st[i] = NULL;
            unchanged = 0;
        }
        if (unchanged == SAMPLE_UNCHANGED_LIMIT) {
            if (target <= 1)
                break;   /* nothing valid comes out at all */
            target /= 2;
            unchanged = 0;
        }
    }
out:
    kt_slist_free(&cand);
    kt_hset_free(&seen);
    return rc;
}

static int sample_init_population(kt_search_policy_t *sp, kt_slist_t *pop)
{
    return sample_population(sp, pop, sp->opts.sample_init_min_population,
                             sp->opts.evolutionary_search_population);
}

typedef struct {
    double cost;
    int idx;
} by_cost_t;

static int cmp_by_cost(const void *a, const void *b)
{
    const by_cost_t *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The valid records since the search's start, fastest first, into a
 * malloc'd *out (NULL when none): their count, or negative on OOM. */
static int measured_by_cost(const kt_search_policy_t *sp, by_cost_t **out)
{
    int nvalid = 0;
    *out = NULL;
    for (int i = sp->start; i < sp->nhist; i++)
        nvalid += sp->hist[i].cost > 0;
    if (nvalid == 0)
        return 0;
    by_cost_t *idx = malloc((size_t)nvalid * sizeof(*idx));
    if (!idx)
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = sp->start, k = 0; i < sp->nhist; i++)
        if (sp->hist[i].cost > 0)
            idx[k++] = (by_cost_t){sp->hist[i].cost, i};
    qsort(idx, (size_t)nvalid, sizeof(*idx), cmp_by_cost);
    *out = idx;
    return nvalid;
}

/* Add the best states measured since the search's start (by throughput,
 * i.e. lowest cost) to pop: up to sample_init_use_measured_ratio x
 * population. */
static int add_measured(kt_search_policy_t *sp, kt_slist_t *pop, int population)
{
    int limit = (int)(sp->opts.sample_init_use_measured_ratio * population);
    sp->stats.last_from_measured = 0;
    if (limit <= 0)
        return 0;
    by_cost_t *idx;
    int nvalid = measured_by_cost(sp, &idx);
    if (nvalid <= 0)
        return nvalid;
    int take = nvalid < limit ? nvalid : limit;
    int rc = 0;
    for (int i = 0; i < take && rc == 0; i++) {
        kt_sched_state_t *c = kt_sched_state_clone(sp->hist[idx[i].idx].st);
        uint64_t h = c ? kt_sched_state_hash(c, sp->dag) : 0;
        if (!h) {
            kt_sched_state_free(c);
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            break;
        }
        rc = kt_slist_push(pop, c, h);
    }
    free(idx);
    sp->stats.last_from_measured = take;
    return rc;
}

/* A min-heap (by score) of the best unmeasured distinct states. */
typedef struct {
    kt_sched_state_t **st;
    uint64_t *hash;
    float *score;
    int n, cap;
    kt_hset_t in;
} heap_t;

static void heap_swap(heap_t *h, int i, int j)
{
    kt_sched_state_t *s = h->st[i];
    h->st[i] = h->st[j];
    h->st[j] = s;
    uint64_t x = h->hash[i];
    h->hash[i] = h->hash[j];
    h->hash[j] = x;
    float f = h->score[i];
    h->score[i] = h->score[j];
    h->score[j] = f;
}

static void heap_down(heap_t *h, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->score[l] < h->score[m])
            m = l;
        if (r < h->n && h->score[r] < h->score[m])
            m = r;
        if (m == i)
            return;
        heap_swap(h, i, m);
        i = m;
    }
}

static void heap_up(heap_t *h, int i)
{
    while (i > 0 && h->score[(i - 1) / 2] > h->score[i]) {
        heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_free(heap_t *h)
{
    for (int i = 0; i < h->n; i++)
        kt_sched_state_free(h->st[i]);
    free(h->st);
    free(h->hash);
    free(h->score);
    kt_hset_free(&h->in);
}

/* Offer a state to the heap of capacity cap (copied when it enters). */
static int heap_offer(kt_search_policy_t *sp, heap_t *h, const kt_sched_state_t *st, uint64_t hash,
                      float score)
{
    if (!(score > -1e10f) || kt_hset_has(&h->in, hash))
        return 0;
    if (h->n == h->cap && !(score > h->score[0]))
        return 0;
    if (!is_new(sp, hash))
        return 0;
    kt_sched_state_t *c = kt_sched_state_clone(st);
    if (!c || kt_hset_add(&h->in, hash) < 0) {
        kt_sched_state_free(c);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    if (h->n < h->cap) {
        h->st[h->n] = c;
        h->hash[h->n] = hash;
        h->score[h->n] = score;
        heap_up(h, h->n++);
    } else {
        kt_hset_del(&h->in, h->hash[0]);
        kt_sched_state_free(h->st[0]);
        h->st[0] = c;
        h->hash[0] = hash;
        h->score[0] = score;
        heap_down(h, 0);
    }
    return 0;
}

/* Index drawn with probability proportional to weights (prefix sums cum[]). */
static int draw(kt_rng_t *rng, const double *cum, int n)
{
    double total = cum[n - 1];
    if (!(total > 0))
        return (int)kt_rng_below(rng, (uint64_t)n);
    double x = kt_rng_double(rng) * total;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cum[mid] > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Prefix sums of the parents' selection weights. Ansor draws parents in
 * proportion to their predicted throughput: log-throughput scores become
 * throughputs relative to the best one (exp(s - max)); without that, every
 * state scored below the log-scale's arbitrary zero could never be drawn.
 * Rank-label scores are drawn the same way: exp(s) is then a Bradley-Terry
 * strength, the odds of beating another state. Throughput scores count when
 * positive. */
static void selection_cum(const kt_search_policy_t *sp, const kt_slist_t *now, double *cum)
{
    const int logs = kt_model_log_scores(kt_search_scorer(sp));
    double top = -INFINITY, acc = 0;
    for (int i = 0; logs && i < now->n; i++)
        if (isfinite(now->score[i]) && now->score[i] > top)
            top = now->score[i];
    for (int i = 0; i < now->n; i++) {
        double s = now->score[i];
        if (isfinite(s))
            acc += logs ? exp(s - top) : s > 0 ? s : 0;
        cum[i] = acc;
    }
}

/* Ansor's EvolutionarySearch: score, keep the heap of the best out_size
 * unmeasured states, breed the next population by score-proportional
 * selection and mutation. pop is consumed (its first nscored states carry
 * their scores from sampling already); best receives the heap, best first. */
static int evolve(kt_search_policy_t *sp, kt_slist_t *pop, int nscored, int iters, int out_size,
                  kt_slist_t *best)
{
    if (!sp->features && iters > RANDOM_MODEL_MAX_ITERS)
        iters = RANDOM_MODEL_MAX_ITERS;
    int population = pop->n;
    double prob = sp->opts.evolutionary_search_mutation_prob;
    heap_t heap = {.cap = out_size};
    heap.st = malloc((size_t)out_size * sizeof(*heap.st));
    heap.hash = malloc((size_t)out_size * sizeof(*heap.hash));
    heap.score = malloc((size_t)out_size * sizeof(*heap.score));
    double *cum = malloc((size_t)(population > 0 ? population : 1) * sizeof(double));
    kt_slist_t next = {0};
    kt_slist_t *now = pop;
    int rc = 0;
    if (!heap.st || !heap.hash || !heap.score || !cum) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    sp->stats.last_num_iters = 0;
    for (int k = 0; population > 0; k++) {
        if ((rc = score_list(sp, now, k == 0 ? nscored : 0)))
            goto out;
        for (int i = 0; i < now->n; i++)
            if ((rc = heap_offer(sp, &heap, now->st[i], now->hash[i], now->score[i])))
                goto out;
        if (k == iters)
            break;
        sp->stats.last_num_iters = k + 1;
        selection_cum(sp, now, cum);
        kt_slist_clear(&next);
        long tries = 0, max_tries = (long)population * MUTATE_TRIES_PER_SLOT;
        while (next.n < population) {
            const int pi = draw(&sp->rng, cum, now->n);
            kt_sched_state_t *child = NULL;
            uint64_t h = now->hash[pi];
            if (kt_rng_double(&sp->rng) < prob && tries++ < max_tries) {
                int m = kt_sched_mutate(sp->dag, &sp->params, now->st[pi], -1, &sp->rng, &child);
                if (m < 0) {
                    rc = m;
                    goto out;
                }
                if (m == 0) {
                    sp->stats.mutations_failed++;
                    continue;
                }
                sp->stats.mutations_ok++;
                h = kt_sched_state_hash(child, sp->dag);
                if (!h) {
                    kt_sched_state_free(child);
                    rc = kt_err_set(KT_ENOMEM, "out of memory");
                    goto out;
                }
            } else {
                child = kt_sched_state_clone(now->st[pi]);
                if (!child) {
                    rc = kt_err_set(KT_ENOMEM, "out of memory");
                    goto out;
                }
            }
            if ((rc = kt_slist_push(&next, child, h)))
                goto out;
        }
        /* swap: the next generation becomes the population */
        kt_slist_t t = *now;
        *now = next;
        next = t;
    }
    /* heap -> best, best score first */
    int nh = heap.n;
    while (heap.n > 0) {
        heap_swap(&heap, 0, heap.n - 1);
        heap.n--;
        heap_down(&heap, 0);
    }
    /* heap sort of a min-heap leaves the array in descending score order */
    for (int i = 0; i < nh; i++) {
        if ((rc = kt_slist_push(best, heap.st[i], heap.hash[i]))) {
            for (int j = i + 1; j < nh; j++)
                kt_sched_state_free(heap.st[j]);
            goto out;
        }
        best->score[best->n - 1] = heap.score[i];
        heap.st[i] = NULL;
    }
    sp->stats.last_best = nh;
out:
    heap_free(&heap);
    free(cum);
    kt_slist_free(&next);
    return rc;
}

/* Picks per register tile in one round (tile_family_share). A round has
 * tens of picks: a linear scan of the tiles seen is enough. */
typedef struct {
    uint64_t *key;
    int *count;
    int n, cap;   /* tiles seen; picks allowed per tile (INT_MAX: no cap) */
} tiles_t;

static int tiles_init(tiles_t *t, int room, int cap)
{
    t->key = malloc((size_t)(room > 0 ? room : 1) * sizeof *t->key);
    t->count = malloc((size_t)(room > 0 ? room : 1) * sizeof *t->count);
    t->n = 0;
    t->cap = cap;
    return t->key && t->count ? 0 : kt_err_set(KT_ENOMEM, "out of memory");
}

/* Room for a round of n picks, of which num_good are capped by
 * tile_family_share: at least one pick per tile, whatever the share of a
 * small round. */
static int tiles_for_round(const kt_search_policy_t *sp, int n, int num_good, tiles_t *t)
{
    double share = sp->opts.tile_family_share;
    int cap = share >= 1 ? INT_MAX : (int)ceil(share * num_good);
    return tiles_init(t, n, cap > 1 ? cap : 1);
}

static void tiles_free(tiles_t *t)
{
    free(t->key);
    free(t->count);
}

static int tiles_find(const tiles_t *t, uint64_t key)
{
    for (int i = 0; i < t->n; i++)
        if (t->key[i] == key)
            return i;
    return -1;
}

/* A state with no tiled stage (key 0) belongs to no family. */
static int tiles_full(const tiles_t *t, uint64_t key)
{
    int i = key ? tiles_find(t, key) : -1;
    return i >= 0 && t->count[i] >= t->cap;
}

/* Moves src->st[i], whose tile key is key, to out, marked as proposed and
 * counted in its tile (tiles has room for every pick of the round). */
static int take(kt_search_policy_t *sp, kt_slist_t *src, int i, uint64_t key, tiles_t *tiles,
                kt_slist_t *out)
{
    int rc = kt_hset_add(&sp->measured, src->hash[i]);
    if (rc < 0)
        return rc;
    if ((rc = kt_slist_push(out, src->st[i], src->hash[i])))
        return rc;
    src->st[i] = NULL;
    if (key) {
        int k = tiles_find(tiles, key);
        if (k < 0) {
            k = tiles->n++;
            tiles->key[k] = key;
            tiles->count[k] = 0;
        }
        tiles->count[k]++;
    }
    return 0;
}

/* States a diversity pick of n chooses from (diversity_filter_ratio x n; 0
 * when off): the evolution keeps at least as many, pick_diverse draws from
 * that many of the best. */
static int diversity_pool(const kt_search_policy_t *sp, int n)
{
    return (int)ceil(sp->opts.diversity_filter_ratio * n);
}

/* AutoTVM's submodular pick with zero scores (diversity_filter_ratio): up to
 * num_good new states from the first `pool` of best, each the one whose
 * knob values add most to those the earlier picks cover, counted in *picked;
 * best is in score order, so ties go to the better score. Greedy coverage:
 * a round measures a spread of the model's favourites instead of sixty
 * variants of one. */
static int pick_diverse(kt_search_policy_t *sp, int pool, int num_good, kt_slist_t *best,
                        tiles_t *tiles, kt_slist_t *out, int *picked)
{
    if (pool > best->n)
        pool = best->n;
    const int per = kt_dag_num_stages(sp->dag) * KT_SCHED_KNOBS_PER_STAGE;
    uint64_t *keys = malloc((size_t)(pool > 0 ? pool : 1) * (size_t)per * sizeof(uint64_t));
    uint64_t *tile = malloc((size_t)(pool > 0 ? pool : 1) * sizeof(uint64_t));
    int *nkeys = malloc((size_t)(pool > 0 ? pool : 1) * sizeof(int));
    kt_hset_t covered = {0};
    int rc = 0;
    if (!keys || !tile || !nkeys) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < pool; i++) {
        nkeys[i] = -1;   /* not a candidate */
        if (!best->st[i] || !is_new(sp, best->hash[i]))
            continue;
        if ((nkeys[i] = kt_sched_state_knobs(best->st[i], keys + (size_t)i * per, per)) < 0) {
            rc = nkeys[i];
            goto out;
        }
        tile[i] = kt_sched_state_tile_key(best->st[i]);
    }
    for (int k = 0; k < num_good; k++) {
        int arg = -1, top = -1;
        for (int i = 0; i < pool; i++) {
            if (nkeys[i] < 0 || tiles_full(tiles, tile[i]))
                continue;
            int fresh = 0;
            for (int j = 0; j < nkeys[i]; j++)
                fresh += !kt_hset_has(&covered, keys[(size_t)i * per + j]);
            if (fresh > top) {
                top = fresh;
                arg = i;
            }
        }
        if (arg < 0)
            break;   /* the pool is spent: pick() goes on with the rest of best */
        for (int j = 0; j < nkeys[arg]; j++)
            if ((rc = kt_hset_add(&covered, keys[(size_t)arg * per + j])) < 0)
                goto out;
        nkeys[arg] = -1;
        if ((rc = take(sp, best, arg, tile[arg], tiles, out)))
            goto out;
        (*picked)++;
    }
    rc = 0;
out:
    free(keys);
    free(tile);
    free(nkeys);
    kt_hset_free(&covered);
    return rc;
}

/* Up to num_good new states of best in score order, none from a tile that
 * has its share already (with no cap: Ansor's pick of the best). */
static int pick_capped(kt_search_policy_t *sp, int num_good, kt_slist_t *best, tiles_t *tiles,
                       kt_slist_t *out)
{
    for (int i = 0; i < best->n && out->n < num_good; i++) {
        if (!best->st[i] || !is_new(sp, best->hash[i]))
            continue;
        uint64_t key = kt_sched_state_tile_key(best->st[i]);
        if (tiles_full(tiles, key))
            continue;
        int rc = take(sp, best, i, key, tiles, out);
        if (rc)
            return rc;
        sp->stats.last_picked_best++;
    }
    return 0;
}

/* Indices in hist of the best state measured since the search's start of
 * each of the first `max` (<= KT_SEARCH_MAX_SIBLING_TILES) register tiles,
 * best first; their count. */
static int tile_bests(kt_search_policy_t *sp, int max, int *src)
{
    by_cost_t *idx;
    int nvalid = measured_by_cost(sp, &idx), n = 0;
    uint64_t keys[KT_SEARCH_MAX_SIBLING_TILES];
    for (int i = 0; i < nvalid && n < max; i++) {
        uint64_t key = kt_sched_state_tile_key(sp->hist[idx[i].idx].st);
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = keys[j] == key;
        if (!seen) {
            keys[n] = key;
            src[n++] = idx[i].idx;
        }
    }
    free(idx);
    return nvalid < 0 ? nvalid : n;
}

/* The next placement of hist[b]'s stages not proposed before (each is
 * tried once, whatever came of it) that makes a new state, taken into out:
 * 1 taken, 0 none left, negative on error. */
static int take_relocation(kt_search_policy_t *sp, int b, tiles_t *tiles, kt_slist_t *out)
{
    const kt_sched_state_t *st = sp->hist[b].st;
    uint64_t src = kt_sched_state_hash(st, sp->dag);
    if (!src)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int n = kt_sched_relocations(sp->dag, st);
    for (int k = 0; k < n; k++) {
        uint64_t tried[2] = {src, (uint64_t)k};
        int rc = kt_hset_add(&sp->relocated, kt_hash64(tried, sizeof tried));
        if (rc <= 0) {
            if (rc < 0)
                return rc;
            continue;
        }
        kt_sched_state_t *c = NULL;
        if ((rc = kt_sched_relocate(sp->dag, &sp->params, st, k, &sp->rng, &c)) <= 0) {
            if (rc < 0)
                return rc;
            continue;
        }
        uint64_t h = kt_sched_state_hash(c, sp->dag);
        if (!h || !is_new(sp, h)) {
            kt_sched_state_free(c);
            if (!h)
                return kt_err_set(KT_ENOMEM, "out of memory");
            continue;
        }
        kt_slist_t one = {0};
        if ((rc = kt_slist_push(&one, c, h)) == 0)
            rc = take(sp, &one, 0, kt_sched_state_tile_key(c), tiles, out);
        kt_slist_free(&one);
        return rc ? rc : 1;
    }
    return 0;
}

/* location_siblings: the stages of the best state of each of the
 * location_sibling_tiles best register tiles placed otherwise, one state
 * per tile in turn, best tile first, each placement once. A placement
 * that ran slower on the best tile may run faster on another (a padding
 * inlined reads the input at a row pitch that a tall tile maps onto one
 * cache set), so the best tile's siblings alone settle nothing. */
static int pick_relocations(kt_search_policy_t *sp, int n, tiles_t *tiles, kt_slist_t *out)
{
    int limit = sp->opts.location_siblings, *count = &sp->stats.last_picked_siblings;
    int src[KT_SEARCH_MAX_SIBLING_TILES];
    int nsrc = limit > 0 ? tile_bests(sp, sp->opts.location_sibling_tiles, src) : 0;
    if (nsrc < 0)
        return nsrc;
    while (*count < limit && out->n < n && nsrc > 0) {
        int live = 0;
        for (int i = 0; i < nsrc && *count < limit && out->n < n; i++) {
            int rc = take_relocation(sp, src[i], tiles, out);
            if (rc < 0)
                return rc;
            if (rc == 0)
                continue;
            (*count)++;
            src[live++] = src[i];
        }
        nsrc = live;   /* a tile with nothing left drops out */
    }
    return 0;
}

/* Up to `limit` new states made by mutation `rule` from the first of the
 * nsrc measured states (hist indices) that gives one, `tries` draws of the
 * rule per state (1 for a rule with one result), in the round's first
 * picks, counted in *count; a state the rule cannot change (one placement
 * per stage, a one-axis tile) has none. */
static int pick_siblings_by(kt_search_policy_t *sp, int rule, int tries, int limit, int *count,
                            int n, const int *src, int nsrc, tiles_t *tiles, kt_slist_t *out)
{
    kt_slist_t sib = {0};
    int rc = 0;
    for (int i = 0; i < nsrc && rc == 0 && *count < limit && out->n < n; i++)
        for (int t = 0; rc == 0 && t < tries && *count < limit && out->n < n; t++) {
            kt_sched_state_t *c = NULL;
            int m = kt_sched_mutate(sp->dag, &sp->params, sp->hist[src[i]].st, rule, &sp->rng, &c);
            if (m < 0) {
                rc = m;
                break;
            }
            if (m == 0)
                continue;   /* nothing to change, or the change broke another decision */
            uint64_t h = kt_sched_state_hash(c, sp->dag);
            if (!h || !is_new(sp, h)) {
                kt_sched_state_free(c);
                if (!h)
                    rc = kt_err_set(KT_ENOMEM, "out of memory");
                continue;
            }
            if ((rc = kt_slist_push(&sib, c, h)) == 0 &&
                (rc = take(sp, &sib, sib.n - 1, kt_sched_state_tile_key(c), tiles, out)) == 0)
                (*count)++;
        }
    kt_slist_free(&sib);
    return rc;
}

/* row_siblings: the best of the best KT_SEARCH_ROW_SIBLING_SCAN measured
 * states that the rows-out rule (a row sweep) makes new. Not the best state
 * alone: a round after its sweep was measured, the next best state's may
 * still be new. */
static int pick_row_siblings(kt_search_policy_t *sp, int n, tiles_t *tiles, kt_slist_t *out)
{
    if (sp->opts.row_siblings <= 0)
        return 0;
    by_cost_t *idx;
    int nvalid = measured_by_cost(sp, &idx);
    if (nvalid < 0)
        return nvalid;
    int src[KT_SEARCH_ROW_SIBLING_SCAN], nsrc = 0;
    for (int i = 0; i < nvalid && nsrc < KT_SEARCH_ROW_SIBLING_SCAN; i++)
        src[nsrc++] = idx[i].idx;
    free(idx);
    return pick_siblings_by(sp, KT_MUT_ROWS_OUT, 1, sp->opts.row_siblings,
                            &sp->stats.last_picked_row_siblings, n, src, nsrc, tiles, out);
}

/* The best tiles' stages placed otherwise (location_siblings), the best
 * state's register tile reshaped (tile_siblings), its reduction moved
 * into the tile (direct_siblings), then a good state's row sweep
 * (row_siblings). */
static int pick_siblings(kt_search_policy_t *sp, int n, tiles_t *tiles, kt_slist_t *out)
{
    int rc = pick_relocations(sp, n, tiles, out);
    int b = sp->start_best, nb = b >= 0;
    if (rc == 0)
        rc = pick_siblings_by(sp, KT_MUT_TILE_SHAPE, 4 * sp->opts.tile_siblings,
                              sp->opts.tile_siblings, &sp->stats.last_picked_tile_siblings, n,
                              &b, nb, tiles, out);
    if (rc == 0)
        rc = pick_siblings_by(sp, KT_MUT_REDUCE_IN, 1, sp->opts.direct_siblings,
                              &sp->stats.last_picked_direct_siblings, n, &b, nb, tiles, out);
    if (rc == 0)
        rc = pick_row_siblings(sp, n, tiles, out);
    return rc;
}

/* The origin of picks out[from..to) into origin (NULL: not wanted). */
static void mark(int *origin, int from, int to, int what)
{
    for (int i = from; origin && i < to; i++)
        origin[i] = what;
}

/* The origin of a pick from the best-scored states: a model that predicts
 * with random scores (untrained, or sketch.random's) picks by chance. */
static int scored_origin(const kt_search_policy_t *sp)
{
    return kt_model_is_trained(kt_search_scorer(sp)) ? KT_STORE_ORIGIN_MODEL
                                                     : KT_STORE_ORIGIN_RANDOM;
}

/* Ansor's PickStatesWithEpsGreedy: the first (1 - eps) x n from the best
 * states (chosen for diversity when diversity_filter_ratio is set, at most
 * tile_family_share of them of one register tile while others are left),
 * the rest from the random ones (each falls back on the other), never a
 * state measured or proposed before. The picks' origins go to origin[]
 * (indexed as out; NULL: not wanted). */
static int pick(kt_search_policy_t *sp, int n, kt_slist_t *best, kt_slist_t *rnd,
                kt_slist_t *out, int *origin)
{
    int num_random = (int)(sp->opts.eps_greedy * n);
    int num_good = n - num_random;
    int ob = 0, orr = 0, rc;
    tiles_t tiles;
    sp->stats.last_picked_best = sp->stats.last_picked_random = sp->stats.last_picked_siblings = 0;
    sp->stats.last_picked_tile_siblings = sp->stats.last_picked_direct_siblings = 0;
    sp->stats.last_picked_row_siblings = 0;
    if ((rc = tiles_for_round(sp, n, num_good, &tiles)))
        goto out;
    int from = out->n;
    if ((rc = pick_siblings(sp, num_good, &tiles, out)))
        goto out;
    mark(origin, from, out->n, KT_STORE_ORIGIN_SIBLING);
    from = out->n;
    if (sp->opts.diversity_filter_ratio > 0)
        rc = pick_diverse(sp, diversity_pool(sp, n), num_good - out->n, best, &tiles, out,
                          &sp->stats.last_picked_best);
    else
        rc = pick_capped(sp, num_good, best, &tiles, out);
    mark(origin, from, out->n, scored_origin(sp));
    while (rc == 0 && out->n < n) {
        int from_best;
        if (out->n < num_good)
            from_best = ob < best->n ? 1 : orr < rnd->n ? 0 : -1;
        else
            from_best = orr < rnd->n ? 0 : ob < best->n ? 1 : -1;
        if (from_best < 0)
            break;
        kt_slist_t *src = from_best ? best : rnd;
        int i = from_best ? ob++ : orr++;
        if (!src->st[i] || !is_new(sp, src->hash[i]))
            continue;
        if ((rc = take(sp, src, i, kt_sched_state_tile_key(src->st[i]), &tiles, out)))
            break;
        mark(origin, out->n - 1, out->n, from_best ? scored_origin(sp) : KT_STORE_ORIGIN_RANDOM);
        if (from_best)
            sp->stats.last_picked_best++;
        else
            sp->stats.last_picked_random++;
    }
    sp->stats.last_tile_families = tiles.n;
out:
    tiles_free(&tiles);
    return rc;
}

/* A round while a learned model is not trained yet: its scores are noise,
 * and evolving by them breeds the mutants of the few parents that drew high
 * ones, so the round would measure a handful of register tiles and the
 * search would stay near them. It takes the sampled states instead, for the
 * coverage of their knob values (tile_family_share per register tile while
 * others are left). */
static int pick_spread(kt_search_policy_t *sp, int n, kt_slist_t *pop, kt_slist_t *out,
                       int *origin)
{
    int from = out->n;
    tiles_t tiles;
    int rc = tiles_for_round(sp, n, n, &tiles);
    if (rc == 0)
        rc = pick_diverse(sp, pop->n, n, pop, &tiles, out, &sp->stats.last_picked_spread);
    for (int i = 0; rc == 0 && i < pop->n && out->n < n; i++)
        if (pop->st[i] && is_new(sp, pop->hash[i]) &&
            (rc = take(sp, pop, i, kt_sched_state_tile_key(pop->st[i]), &tiles, out)) == 0)
            sp->stats.last_picked_spread++;
    mark(origin, from, out->n, KT_STORE_ORIGIN_RANDOM);
    sp->stats.last_tile_families = tiles.n;
    tiles_free(&tiles);
    return rc;
}

/* The rest of a round with a trained model (Ansor's): add measured states
 * and the foresight to the sampled population pop, draw random states,
 * evolve, pick. */
static int evolve_and_pick(kt_search_policy_t *sp, int n, kt_slist_t *pop, kt_slist_t *out,
                           int *origin)
{
    kt_slist_t best = {0}, rnd = {0};
    int sampled = pop->n;   /* scored while sampling */
    int rc = add_measured(sp, pop, sp->opts.evolutionary_search_population);
    /* states a foresee pass of the family liked join the population (they
     * are scored again with the current model) */
    sp->stats.last_from_foresight = 0;
    for (int i = 0; rc == 0 && i < sp->foresight.n; i++) {
        if (!sp->foresight.st[i])
            continue;
        rc = kt_slist_push(pop, sp->foresight.st[i], sp->foresight.hash[i]);
        sp->foresight.st[i] = NULL;
        sp->stats.last_from_foresight += rc == 0;
    }
    kt_slist_clear(&sp->foresight);
    sp->stats.foresight = 0;
    /* random states for eps-greedy: 3 x its share, drawn from the initial
     * population before evolution consumes it */
    int nrand = 3 * (int)(sp->opts.eps_greedy * n);
    for (int i = 0; rc == 0 && pop->n > 0 && i < nrand; i++) {
        int k = (int)kt_rng_below(&sp->rng, (uint64_t)pop->n);
        kt_sched_state_t *c = kt_sched_state_clone(pop->st[k]);
        rc = c ? kt_slist_push(&rnd, c, pop->hash[k]) : kt_err_set(KT_ENOMEM, "out of memory");
    }
    sp->stats.last_random = rnd.n;
    /* Ansor keeps the best 2n; a diversity pick draws from ratio x n, and a
     * tile-capped pick from the best TILE_CAP_POOL x n or, if more, a
     * population's worth of the scored states, because a favourite tile can
     * fill a smaller pool alone and leave the cap nothing else to choose. */
    int keep = 2 * n;
    if (sp->opts.tile_family_share < 1) {
        keep = TILE_CAP_POOL * n;
        if (keep < sp->opts.evolutionary_search_population)
            keep = sp->opts.evolutionary_search_population;
    }
    int pool = diversity_pool(sp, n);
    if (rc == 0)
        rc = evolve(sp, pop, sampled, sp->opts.evolutionary_search_num_iters,
                    pool > keep ? pool : keep, &best);
    if (rc == 0)
        rc = pick(sp, n, &best, &rnd, out, origin);
    kt_slist_free(&best);
    kt_slist_free(&rnd);
    return rc;
}

/* One round: sample, then spread the picks over the sample while the
 * learned model is untrained, else evolve and pick; origins as pick's. */
static int search_round(kt_search_policy_t *sp, int n, kt_slist_t *out, int *origin)
{
    kt_slist_t pop = {0};
    int rc = sample_init_population(sp, &pop);
    sp->stats.rounds++;
    sp->stats.last_sampled = pop.n;
    sp->stats.last_picked_spread = 0;
    if (rc == 0 && sp->features && !kt_model_is_trained(kt_search_scorer(sp))) {
        sp->stats.last_picked_best = sp->stats.last_picked_random = 0;
        sp->stats.last_picked_siblings = sp->stats.last_picked_tile_siblings = 0;
        sp->stats.last_picked_direct_siblings = sp->stats.last_picked_row_siblings = 0;
        sp->stats.last_random = sp->stats.last_best = sp->stats.last_num_iters = 0;
        sp->stats.last_from_measured = sp->stats.last_from_foresight = 0;
        rc = pick_spread(sp, n, &pop, out, origin);
    } else if (rc == 0) {
        rc = evolve_and_pick(sp, n, &pop, out, origin);
    }
    if (rc == 0 && out->n == 0)
        sp->stats.empty_rounds++;
    kt_slist_free(&pop);
    return rc;
}

/* A restart when the current start's best has not gained RESTART_MIN_GAIN
 * over restart_after records: a search that has settled in one region of
 * the space stays there (the model ranks that region first, evolution
 * starts from its records), and trials after that mostly re-measure it; an
 * independent start draws another first round. Only an owned learned model
 * is replaced: a shared one also serves other tasks. */
static int maybe_restart(kt_search_policy_t *sp)
{
    if (sp->opts.restart_after == 0 || !sp->own_model || !sp->features || sp->start_best < 0 ||
        sp->nhist - sp->start_gain < sp->opts.restart_after)
        return 0;
    kt_model_params_t mp;
    kt_search_model_params(&sp->opts, sp->opts.seed + sp->stats.restarts + 1, &mp);
    kt_model_t *m = kt_model_new(kt_model_kind(sp->model), &mp);
    if (!m)
        return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    kt_model_free(sp->model);
    sp->model = m;
    sp->npending = 0;   /* the old start's records trained the old model */
    sp->start = sp->start_gain = sp->nhist;
    sp->start_best = -1;
    kt_slist_clear(&sp->foresight);
    sp->stats.restarts++;
    KT_INFO("search: task %" PRIu64 " restarts (%" PRIu64 "): its best gained less than 1%% over "
            "the last %d measured states", sp->task_id, sp->stats.restarts, sp->opts.restart_after);
    return 0;
}

int kt_search_seed(kt_search_policy_t *sp, kt_sched_state_t *const *states, int n)
{
    if (!sp || n < 0 || (n > 0 && !states))
        return kt_err_set(KT_EINVAL, "search seed: bad arguments");
    int kept = 0;
    for (int i = 0; i < n; i++) {
        /* Checked here, not trusted: a seed comes from another workload's
         * records through a re-fit, and an invalid one would fail at
         * lowering, after the round was spent on it. */
        if (!states[i] || kt_sched_state_validate(sp->dag, &sp->params, states[i]) != 0) {
            KT_DEBUG("search: task %" PRIu64 ": seed %d skipped: %s", sp->task_id, i,
                     states[i] ? kt_err_msg() : "no state");
            continue;
        }
        uint64_t h = kt_sched_state_hash(states[i], sp->dag);
        int dup = 0;
        for (int k = 0; k < sp->seeds.n && !dup; k++)
            dup = sp->seeds.hash[k] == h;
        if (dup)
            continue;
        kt_sched_state_t *c = kt_sched_state_clone(states[i]);
        if (!h || !c) {
            kt_sched_state_free(c);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        int rc = kt_slist_push(&sp->seeds, c, h);
        if (rc)
            return rc;
        kept++;
    }
    sp->stats.seeded += (uint64_t)kept;
    return kept;
}

/* The seeds first, in order, while the round has room: each goes through
 * the dedup every proposal does (is_new: measured, preloaded, proposed, or
 * in the caller's store), and one found measured is dropped. Their origin
 * is transfer: schedule transfer is what seeds a policy. */
static int take_seeds(kt_search_policy_t *sp, int n, kt_slist_t *out, int *origin)
{
    int from = out->n;
    int next = 0, rc = 0;
    sp->stats.last_picked_seeds = 0;
    while (next < sp->seeds.n && out->n < n && rc == 0) {
        kt_sched_state_t *st = sp->seeds.st[next];
        uint64_t h = sp->seeds.hash[next];
        sp->seeds.st[next++] = NULL;
        if (!is_new(sp, h)) {
            kt_sched_state_free(st);
            continue;
        }
        if ((rc = kt_hset_add(&sp->measured, h)) < 0) {
            kt_sched_state_free(st);
            break;
        }
        if ((rc = kt_slist_push(out, st, h)) == 0)   /* frees st when it fails */
            sp->stats.last_picked_seeds++;
    }
    /* the rest wait for the next round, in order */
    int k = 0;
    for (int j = next; j < sp->seeds.n; j++, k++) {
        sp->seeds.st[k] = sp->seeds.st[j];
        sp->seeds.hash[k] = sp->seeds.hash[j];
    }
    sp->seeds.n = k;
    mark(origin, from, out->n, KT_STORE_ORIGIN_TRANSFER);
    return rc < 0 ? rc : 0;
}

int kt_search_propose(kt_search_policy_t *sp, int n, kt_sched_state_t ***out)
{
    return kt_search_propose_origins(sp, n, out, NULL);
}

int kt_search_propose_origins(kt_search_policy_t *sp, int n, kt_sched_state_t ***out,
                              int *origins)
{
    if (out)
        *out = NULL;
    if (!sp || !out || n < 1)
        return kt_err_set(KT_EINVAL, "search propose: bad arguments");
    double t0 = kt_time_mono();
    int rc = ensure_sketches(sp);
    if (rc == 0)
        rc = maybe_restart(sp);
    kt_slist_t got = {0};
    if (rc == 0)
        rc = take_seeds(sp, n, &got, origins);
    if (rc == 0 && got.n < n) {
        kt_slist_t more = {0};
        for (int tries = 0; rc == 0 && tries <= sp->opts.retry_search_one_round_on_empty;
             tries++) {
            rc = search_round(sp, n - got.n, &more, origins ? origins + got.n : NULL);
            if (more.n > 0 || got.n > 0)
                break;
        }
        for (int i = 0; rc == 0 && i < more.n; i++) {
            rc = kt_slist_push(&got, more.st[i], more.hash[i]);
            if (rc == 0)
                more.st[i] = NULL;
        }
        kt_slist_free(&more);
    }
    sp->search_s = kt_time_mono() - t0;
    if (rc) {
        kt_slist_free(&got);
        return rc;
    }
    int count = got.n;
    if (count == 0) {
        kt_slist_free(&got);
        return 0;
    }
    *out = got.st;   /* the list's array is exactly the states */
    got.st = NULL;
    got.n = 0;
    kt_slist_free(&got);
    sp->stats.proposed += (uint64_t)count;
    return count;
}

/* ---- foresee (FamilySeer) ----------------------------------------------------------- */

int kt_search_foresee(kt_search_policy_t *sp)
{
    if (!sp)
        return kt_err_set(KT_EINVAL, "foresee: no policy");
    int rc = ensure_sketches(sp);
    if (rc)
        return rc;
    /* a pass is not one of the task's rounds: keep the round figures */
    kt_search_stats_t saved = sp->stats;
    int population = sp->opts.foresee_population;
    int target = sp->opts.sample_init_min_population < population
                     ? sp->opts.sample_init_min_population : population;
    kt_slist_t pop = {0}, best = {0};
    rc = sample_population(sp, &pop, target, population);
    int sampled = pop.n;
    if (rc == 0)
        rc = add_measured(sp, &pop, population);
    if (rc == 0)
        rc = evolve(sp, &pop, sampled, sp->opts.foresee_num_iters, sp->opts.foresee_keep, &best);
    kt_slist_free(&pop);
    sp->stats = saved;
    if (rc) {
        kt_slist_free(&best);
        return rc;
    }
    kt_slist_free(&sp->foresight);
    sp->foresight = best;
    sp->stats.foresee_passes++;
    sp->stats.foresight = best.n;
    return 0;
}

/* ---- local use ------------------------------------------------------------------- */

static int plain_propose(void *ctx, int n, kt_sched_state_t ***out)
{
    return kt_search_propose(ctx, n, out);
}

static int plain_feedback(void *ctx, kt_sched_state_t *const *states, const double *costs, int n)
{
    return kt_search_feedback(ctx, states, costs, n);
}

int kt_search_one_round(kt_search_policy_t *sp, int n, kt_search_measure_fn measure, void *user,
                        kt_sched_state_t ***states, kt_measure_result_t **results)
{
    if (states)
        *states = NULL;
    if (results)
        *results = NULL;
    if (!sp)
        return kt_err_set(KT_EINVAL, "search one round: no policy or measure function");
    kt_search_round_ops_t ops = {.propose = plain_propose, .feedback = plain_feedback, .ctx = sp};
    return kt_search_round_run(sp->w, &ops, n, measure, user, states, results);
}

int kt_search_round_run(const kt_workload_t *w, const kt_search_round_ops_t *ops, int n,
                        kt_search_measure_fn measure, void *user, kt_sched_state_t ***states,
                        kt_measure_result_t **results)
{
    if (states)
        *states = NULL;
    if (results)
        *results = NULL;
    if (!measure)
        return kt_err_set(KT_EINVAL, "search one round: no policy or measure function");
    kt_sched_state_t **st = NULL;
    int got = ops->propose(ops->ctx, n, &st);
    if (got <= 0)
        return got;
    kt_measure_result_t *res = calloc((size_t)got, sizeof(*res));
    double *costs = malloc((size_t)got * sizeof(*costs));
    int rc = 0;
    if (!res || !costs) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    rc = measure(user, w, st, got, res);
    if (rc < 0)
        goto out;
    for (int i = 0; i < got; i++)
        costs[i] = res[i].error_no == KT_MEASURE_NO_ERROR ? res[i].mean : -1;
    rc = ops->feedback(ops->ctx, st, costs, got);
out:
    free(costs);
    if (rc == 0 && states) {
        *states = st;
    } else {
        for (int i = 0; i < got; i++)
            kt_sched_state_free(st[i]);
        free(st);
    }
    if (rc == 0 && results) {
        *results = res;
    } else if (res) {
        for (int i = 0; i < got; i++)
            kt_measure_result_clear(&res[i]);
        free(res);
    }
    return rc < 0 ? rc : got;
}
