/* A stored job seen by the task scheduler; see job_view.h. */
#include "service/job_view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure/run_service.h"
#include "search/search.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* ---- Options ---------------------------------------------------------------------------- */

void kt_job_opts_default(kt_job_opts_t *o)
{
    *o = (kt_job_opts_t){.trials = 0,
                         .per_round = KT_JOB_DEFAULT_PER_ROUND,
                         .early_stopping = -1,
                         .seed = 0,
                         .number = KT_JOB_DEFAULT_NUMBER,
                         .repeat = KT_JOB_DEFAULT_REPEAT,
                         .min_repeat_ms = KT_JOB_DEFAULT_MIN_REPEAT_MS,
                         .cooldown_interval = 0,
                         .enable_cpu_cache_flush = 0,
                         .flush_weights = 0,
                         .timeout_ms = KT_JOB_DEFAULT_TIMEOUT_MS,
                         .build_timeout_ms = KT_JOB_DEFAULT_BUILD_TIMEOUT_MS,
                         .check_correctness = 1,
                         .num_threads = 0,
                         .transfer = 1};
}

/* A job's search parameters into o->search_params, checked against the
 * search policy's options. */
static int search_params_set(kt_job_opts_t *o, const char *list)
{
    if (strlen(list) >= sizeof o->search_params)
        return kt_err_set(KT_EINVAL, "search_params: longer than %zu bytes",
                          sizeof o->search_params - 1);
    kt_search_opts_t so;
    kt_search_opts_default(&so);
    if (kt_search_opts_set(&so, list) != 0)
        return kt_err_code();
    snprintf(o->search_params, sizeof o->search_params, "%s", list);
    return 0;
}

int kt_job_opts_from_proto(const Ktune__V1__TuningOptions *in, kt_job_opts_t *o)
{
    kt_job_opts_default(o);
    if (!in)
        return 0;
    if (in->num_measure_trials < 0 || in->num_measures_per_round < 0 ||
        in->build_timeout_ms < 0)
        return kt_err_set(KT_EINVAL, "tuning options: negative trials, per-round or timeout");
    if (in->early_stopping < 0)
        return kt_err_set(KT_EINVAL, "tuning options: early_stopping %d (0 for none)",
                          in->early_stopping);
    o->trials = in->num_measure_trials;
    if (in->num_measures_per_round)
        o->per_round = in->num_measures_per_round;
    o->early_stopping = in->early_stopping > 0 ? in->early_stopping : -1;
    o->seed = in->seed;
    if (in->build_timeout_ms)
        o->build_timeout_ms = in->build_timeout_ms;
    if (in->search_params && *in->search_params && search_params_set(o, in->search_params) != 0)
        return kt_err_code();
    o->transfer = !in->no_transfer;
    const Ktune__V1__MeasureOptions *m = in->measure;
    if (m) {
        if (kt_run_service_check_options(m) != 0)
            return kt_err_code();
        if (m->number)
            o->number = m->number;
        if (m->repeat)
            o->repeat = m->repeat;
        o->min_repeat_ms = m->min_repeat_ms;
        o->cooldown_interval = m->cooldown_interval;
        o->enable_cpu_cache_flush = m->enable_cpu_cache_flush;
        o->flush_weights = m->flush_weights;
        if (m->timeout_ms)
            o->timeout_ms = m->timeout_ms;
        o->check_correctness = m->check_correctness;
        o->num_threads = m->num_threads;
    }
    return 0;
}

json_t *kt_job_opts_to_json(const kt_job_opts_t *o)
{
    /* The seed goes as text: JSON integers here are signed 64-bit. */
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    return json_pack("{s:I, s:i, s:i, s:s, s:i, s:i, s:i, s:f, s:b, s:b, s:i, s:i, s:b, s:i, s:s, "
                     "s:b}",
                     "num_measure_trials", (json_int_t)o->trials, "num_measures_per_round",
                     o->per_round, "early_stopping", o->early_stopping, "seed", seed, "number",
                     o->number, "repeat", o->repeat, "min_repeat_ms", o->min_repeat_ms,
                     "cooldown_interval", o->cooldown_interval, "enable_cpu_cache_flush",
                     o->enable_cpu_cache_flush, "flush_weights", o->flush_weights, "timeout_ms",
                     o->timeout_ms, "build_timeout_ms", o->build_timeout_ms, "check_correctness",
                     o->check_correctness,
                     "num_threads", o->num_threads, "search_params", o->search_params,
                     "transfer", o->transfer);
}

static int get_int(json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return kt_err_set(KT_EINVAL, "job options: %s must be an integer in %lld..%lld", key,
                          (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

int kt_job_opts_from_json(const char *text, kt_job_opts_t *o)
{
    kt_job_opts_default(o);
    json_error_t jerr;
    json_t *root = json_loads(text ? text : "{}", 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return kt_err_set(KT_EINVAL, "job options: not a JSON object: %s", jerr.text);
    }
    int64_t trials = o->trials, per_round = o->per_round, es = o->early_stopping,
            number = o->number, repeat = o->repeat, mr = o->min_repeat_ms,
            flush = o->enable_cpu_cache_flush, fw = o->flush_weights, to = o->timeout_ms,
            bto = o->build_timeout_ms, check = o->check_correctness, threads = o->num_threads,
            transfer = o->transfer;
    int rc = 0;
    if ((rc = get_int(root, "num_measure_trials", 0, INT32_MAX, &trials)) ||
        (rc = get_int(root, "num_measures_per_round", 1, INT32_MAX, &per_round)) ||
        (rc = get_int(root, "early_stopping", -1, INT32_MAX, &es)) ||
        (rc = get_int(root, "number", 1, INT32_MAX, &number)) ||
        (rc = get_int(root, "repeat", 1, INT32_MAX, &repeat)) ||
        (rc = get_int(root, "min_repeat_ms", 0, INT32_MAX, &mr)) ||
        (rc = get_int(root, "enable_cpu_cache_flush", 0, 1, &flush)) ||
        (rc = get_int(root, "flush_weights", 0, 1, &fw)) ||
        (rc = get_int(root, "timeout_ms", 1, INT32_MAX, &to)) ||
        (rc = get_int(root, "build_timeout_ms", 1, INT32_MAX, &bto)) ||
        (rc = get_int(root, "check_correctness", 0, 1, &check)) ||
        (rc = get_int(root, "num_threads", 0, INT32_MAX, &threads)) ||
        /* absent before ktune stored it: such a job transfers, as a new one does */
        (rc = get_int(root, "transfer", 0, 1, &transfer))) {
        json_decref(root);
        return rc;
    }
    json_t *seed = json_object_get(root, "seed");
    if (json_is_string(seed)) {
        char *end;
        o->seed = strtoull(json_string_value(seed), &end, 10);
        if (*end)
            rc = kt_err_set(KT_EINVAL, "job options: seed is not a number");
    }
    json_t *cd = json_object_get(root, "cooldown_interval");
    if (json_is_number(cd))
        o->cooldown_interval = json_number_value(cd);
    json_t *sp = json_object_get(root, "search_params");   /* absent before ktune stored it */
    if (rc == 0 && sp && !json_is_string(sp))
        rc = kt_err_set(KT_EINVAL, "job options: search_params is not a string");
    else if (rc == 0 && sp && search_params_set(o, json_string_value(sp)) != 0)
        rc = kt_err_code();
    json_decref(root);
    o->trials = trials;
    o->per_round = (int)per_round;
    o->early_stopping = es == 0 ? -1 : (int)es;
    o->number = (int)number;
    o->repeat = (int)repeat;
    o->min_repeat_ms = (int)mr;
    o->enable_cpu_cache_flush = (int)flush;
    o->flush_weights = (int)fw;
    o->timeout_ms = (int)to;
    o->build_timeout_ms = (int)bto;
    o->check_correctness = (int)check;
    o->num_threads = (int)threads;
    o->transfer = (int)transfer;
    return rc;
}

/* ---- Views ---------------------------------------------------------------------------------- */

char *kt_job_similarity_tag(const kt_workload_t *w)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; i < kt_dag_num_stages(dag); i++) {
        const kt_stage_t *st = kt_dag_stage(dag, i);
        if (st->kind != KT_STAGE_COMPUTE || !st->tag || !*st->tag)
            continue;
        kt_sbuf_printf(&b, "%s%s", b.len ? "_" : "", st->tag);
    }
    kt_sbuf_puts(&b, "");
    char *s = kt_sbuf_take(&b);
    if (!s)
        kt_err_set(KT_ENOMEM, "out of memory");
    return s;
}

void kt_job_view_free(kt_job_view_t *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->ntasks; i++) {
        if (v->wl)
            kt_workload_free(v->wl[i]);
        if (v->tags)
            free(v->tags[i]);
    }
    free(v->wl);
    free(v->tags);
    free(v->alt);
    kt_store_job_info_free(v->info);
    free(v);
}

/* v->alt: a Winograd task whose direct conv2d is also a task of the job is
 * its alternative (extraction adds such pairs); NULL when the job has none. */
static int find_alternatives(kt_job_view_t *v)
{
    for (int i = 0; i < v->ntasks; i++) {
        char *direct = kt_workload_winograd_direct_json(v->wl[i]);
        if (!direct) {
            if (strcmp(kt_workload_op(v->wl[i]), "conv2d_winograd_nhwc") == 0)
                return kt_err_code() ? kt_err_code() : KT_ENOMEM;
            continue;
        }
        for (int j = 0; j < v->ntasks; j++) {
            if (strcmp(kt_workload_json(v->wl[j]), direct) != 0)
                continue;
            if (!v->alt) {
                if (!(v->alt = malloc((size_t)v->ntasks * sizeof *v->alt))) {
                    free(direct);
                    return kt_err_set(KT_ENOMEM, "out of memory");
                }
                for (int k = 0; k < v->ntasks; k++)
                    v->alt[k] = -1;
            }
            v->alt[i] = j;
            break;
        }
        free(direct);
    }
    return 0;
}

int kt_job_view_load(kt_store_t *s, int64_t id, kt_job_view_t **out)
{
    *out = NULL;
    kt_job_view_t *v = calloc(1, sizeof *v);
    if (!v)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = kt_store_get_job(s, id, &v->info);
    if (rc != 0) {
        free(v);
        return rc;
    }
    if ((rc = kt_job_opts_from_json(v->info->job.options_json, &v->opts)) != 0) {
        kt_err_prefix("job %lld", (long long)id);
        kt_job_view_free(v);
        return rc;
    }
    v->ntasks = v->info->ntasks;
    v->wl = calloc((size_t)v->ntasks + 1, sizeof *v->wl);
    v->tags = calloc((size_t)v->ntasks + 1, sizeof *v->tags);
    if (!v->wl || !v->tags) {
        kt_job_view_free(v);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (int i = 0; i < v->ntasks; i++) {
        char *canon = NULL;
        rc = kt_store_get_workload(s, v->info->tasks[i].workload_key, &canon, NULL);
        if (rc == 0 && !(v->wl[i] = kt_workload_parse(canon)))
            rc = kt_err_code();
        free(canon);
        if (rc == 0 && !(v->tags[i] = kt_job_similarity_tag(v->wl[i])))
            rc = kt_err_code();
        if (rc != 0) {
            kt_err_prefix("job %lld, task %d", (long long)id, i);
            kt_job_view_free(v);
            return rc;
        }
    }
    if ((rc = find_alternatives(v)) != 0) {
        kt_job_view_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* ---- Progress from records ----------------------------------------------------------------- */

typedef struct {
    int per_round;
    kt_job_task_progress_t *p;
    int in_round;               /* records in the current (last) round */
    double round_best;          /* best so far, after the current round */
    int cap;
    kt_record_fn_t each;
    void *ctx;
    int oom;
} walk_t;

int kt_job_record_beats(const kt_record_t *r, double best_cost)
{
    return r->error_code == KT_MEASURE_NO_ERROR && isfinite(r->mean_cost) && r->mean_cost > 0 &&
           r->mean_cost < best_cost;
}

void kt_job_best_init(kt_job_best_t *b)
{
    b->cost = KT_SCHEDULER_NO_COST;
    b->origin = KT_STORE_ORIGIN_UNKNOWN;
}

void kt_job_best_note(kt_job_best_t *b, const kt_record_t *r)
{
    if (kt_job_record_beats(r, b->cost)) {
        b->cost = r->mean_cost;
        b->origin = r->origin;
    }
}

int kt_job_view_annotate_tasks(json_t *job, const kt_job_view_t *v, const kt_job_best_t *best)
{
    json_t *tasks = json_object_get(job, "tasks");
    int ok = 1;
    for (int i = 0; ok && i < v->info->ntasks && i < (int)json_array_size(tasks); i++) {
        json_t *t = json_array_get(tasks, (size_t)i);
        const char *d = v->info->tasks[i].desc;
        ok = json_object_set_new(t, "desc", json_string(d ? d : "")) == 0;
        if (ok && best) {
            const char *o = kt_store_origin_name(best[i].origin);
            ok = json_object_set_new(t, "best_origin",
                                     best[i].cost < KT_SCHEDULER_NO_COST && o ? json_string(o)
                                                                              : json_null()) == 0;
        }
    }
    return ok ? 0 : kt_err_set(KT_ENOMEM, "out of memory");
}

static int walk_record(const kt_record_t *r, void *ctx)
{
    walk_t *w = ctx;
    kt_job_task_progress_t *p = w->p;
    if (w->each) {
        int rc = w->each(r, w->ctx);
        if (rc != 0)
            return rc;
    }
    p->trials++;
    if (kt_job_record_beats(r, p->best_cost))
        p->best_cost = r->mean_cost;
    if (w->in_round == 0) {
        if (p->rounds == w->cap) {
            int cap = w->cap ? 2 * w->cap : 16;
            double *h = realloc(p->history, (size_t)cap * sizeof *h);
            if (!h) {
                w->oom = 1;
                return 1;
            }
            p->history = h;
            w->cap = cap;
        }
        p->rounds++;
    }
    p->history[p->rounds - 1] = p->best_cost;
    if (++w->in_round == w->per_round)
        w->in_round = 0;
    return 0;
}

int kt_job_view_task_progress(kt_store_t *s, const kt_job_view_t *v, int task, int per_round,
                              kt_record_fn_t each, void *ctx, kt_job_task_progress_t *out)
{
    memset(out, 0, sizeof *out);
    out->best_cost = KT_SCHEDULER_NO_COST;
    if (task < 0 || task >= v->ntasks || per_round < 1)
        return kt_err_set(KT_EINVAL, "task progress: no task %d or bad round size", task);
    kt_store_filter_t f = {.workload_key = v->info->tasks[task].workload_key,
                           .target = v->info->job.target};
    walk_t w = {.per_round = per_round, .p = out, .each = each, .ctx = ctx};
    int rc = kt_store_foreach_record(s, &f, walk_record, &w);
    if (w.oom)
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    if (rc != 0) {
        free(out->history);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

typedef struct {
    kt_job_record_fn fn;
    void *ctx;
    int task;
} each_ctx_t;

static int each_record(const kt_record_t *r, void *ctx)
{
    each_ctx_t *e = ctx;
    return e->fn(e->task, r, e->ctx);
}

kt_scheduler_t *kt_job_view_scheduler(kt_store_t *s, const kt_job_view_t *v,
                                      const kt_scheduler_config_t *base, kt_job_record_fn each,
                                      void *ctx)
{
    kt_scheduler_task_t *tasks = calloc((size_t)v->ntasks, sizeof *tasks);
    if (!tasks) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < v->ntasks; i++)
        tasks[i] = (kt_scheduler_task_t){.weight = v->info->tasks[i].weight,
                                         .flops = kt_workload_flops(v->wl[i]),
                                         .similarity_tag = v->tags[i],
                                         .workload_key = v->info->tasks[i].workload_key};
    kt_scheduler_config_t cfg = *base;
    cfg.alternative_of = v->alt;
    cfg.num_measure_trials = v->opts.trials;
    cfg.num_measures_per_round = v->opts.per_round;
    cfg.early_stopping = v->opts.early_stopping;
    cfg.seed = v->opts.seed;
    int st = kt_scheduler_strategy_parse(v->info->job.strategy);
    if (st < 0) {
        free(tasks);
        kt_err_set(KT_EINVAL, "job %lld: unknown strategy '%s'", (long long)v->info->job.id,
                   v->info->job.strategy);
        return NULL;
    }
    cfg.strategy = (kt_scheduler_strategy_t)st;
    kt_scheduler_t *sched = kt_scheduler_new(tasks, v->ntasks, &cfg);
    free(tasks);
    if (!sched)
        return NULL;
    int per_round = kt_scheduler_measures_per_round(sched);
    for (int i = 0; i < v->ntasks; i++) {
        kt_job_task_progress_t p;
        each_ctx_t e = {.fn = each, .ctx = ctx, .task = i};
        int rc = kt_job_view_task_progress(s, v, i, per_round, each ? each_record : NULL, &e, &p);
        if (rc != 0) {
            kt_scheduler_free(sched);
            return NULL;
        }
        kt_scheduler_task_state_t ts = {.rounds = p.rounds,
                                        .trials = p.trials,
                                        .best_cost = p.best_cost,
                                        .history = p.history,
                                        .history_len = p.rounds};
        rc = p.rounds > 0 ? kt_scheduler_restore_task(sched, i, &ts) : 0;
        free(p.history);
        if (rc != 0) {
            kt_scheduler_free(sched);
            return NULL;
        }
    }
    kt_store_latency_t *pts = NULL;
    size_t npts = 0;
    if (kt_store_read_latency(s, v->info->job.id, &pts, &npts) == 0 && npts > 0)
        kt_scheduler_restore_elapsed(sched, pts[npts - 1].elapsed);
    free(pts);
    return sched;
}

/* ---- Convergence from records ------------------------------------------------------------------ */

struct kt_job_curve_rec {
    int64_t id;
    int task;
    double cost;     /* seconds; KT_SCHEDULER_NO_COST for a failed measurement */
};

int kt_job_curve_add(int task, const kt_record_t *r, void *ctx)
{
    kt_job_curve_t *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        struct kt_job_curve_rec *p = realloc(c->recs, cap * sizeof *p);
        if (!p) {
            c->oom = 1;
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        c->recs = p;
        c->cap = cap;
    }
    /* The same test as walk_record's, so the curve ends at the table's best. */
    int ok = r->error_code == KT_MEASURE_NO_ERROR && isfinite(r->mean_cost) && r->mean_cost > 0;
    c->recs[c->n++] = (struct kt_job_curve_rec){
        .id = r->id, .task = task, .cost = ok ? r->mean_cost : KT_SCHEDULER_NO_COST};
    return 0;
}

static int curve_rec_cmp(const void *a, const void *b)
{
    const struct kt_job_curve_rec *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->task > y->task) - (x->task < y->task);
}

json_t *kt_job_curve_json(kt_job_curve_t *c, const kt_job_view_t *v, int per_round)
{
    json_t *out = json_array();
    double *best = calloc((size_t)v->ntasks + 1, sizeof *best);
    if (!out || !best || c->oom)
        goto oom;
    if (per_round < 1)
        per_round = 1;
    /* Each task walked its own records: merged here into the store's order. */
    if (c->n > 1)
        qsort(c->recs, c->n, sizeof *c->recs, curve_rec_cmp);
    for (int i = 0; i < v->ntasks; i++)
        best[i] = KT_SCHEDULER_NO_COST;
    int missing = v->ntasks;   /* tasks without a valid record yet */
    for (size_t k = 0; k < c->n; k++) {
        const struct kt_job_curve_rec *r = &c->recs[k];
        if (r->task >= 0 && r->task < v->ntasks && r->cost < best[r->task]) {
            missing -= best[r->task] == KT_SCHEDULER_NO_COST;
            best[r->task] = r->cost;
        }
        if (missing > 0 || ((k + 1) % (size_t)per_round != 0 && k + 1 != c->n))
            continue;
        double sum = 0;
        for (int i = 0; i < v->ntasks; i++)
            sum += v->info->tasks[i].weight * best[i];
        if (json_array_append_new(out, json_pack("[I, f]", (json_int_t)(k + 1), sum)) != 0)
            goto oom;
    }
    free(best);
    return out;
oom:
    free(best);
    json_decref(out);
    kt_err_set(KT_ENOMEM, "out of memory");
    return NULL;
}

json_t *kt_job_curve_with_log(kt_job_curve_t *c, const kt_job_view_t *v, int per_round,
                              const kt_store_latency_t *pts, size_t npts)
{
    json_t *out = kt_job_curve_json(c, v, per_round);
    if (!out || npts == 0)
        return out;
    /* The records' points from the log's first one on are the log's. */
    size_t keep = 0;
    while (keep < json_array_size(out) &&
           json_integer_value(json_array_get(json_array_get(out, keep), 0)) < pts[0].trials)
        keep++;
    while (json_array_size(out) > keep)
        json_array_remove(out, json_array_size(out) - 1);
    for (size_t i = 0; i < npts; i++)
        if (json_array_append_new(out, json_pack("[I, f]", (json_int_t)pts[i].trials,
                                                 pts[i].latency)) != 0) {
            json_decref(out);
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
    return out;
}

void kt_job_curve_clear(kt_job_curve_t *c)
{
    if (!c)
        return;
    free(c->recs);
    memset(c, 0, sizeof *c);
}

/* ---- Progress messages ------------------------------------------------------------------------ */

void *kt_job_arena_alloc(void *arena, size_t size)
{
    kt_job_arena_t *a = arena;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 32;
        void **b = realloc(a->blocks, cap * sizeof *b);
        if (!b)
            return NULL;
        a->blocks = b;
        a->cap = cap;
    }
    void *p = calloc(1, size ? size : 1);
    if (p)
        a->blocks[a->n++] = p;
    return p;
}

void kt_job_arena_clear(kt_job_arena_t *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++)
        free(a->blocks[i]);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

static char *adup(kt_job_alloc_fn alloc, void *user, const char *s)
{
    if (!s)
        s = "";
    size_t n = strlen(s) + 1;
    char *d = alloc(user, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static double num_or_zero(json_t *v)
{
    return json_is_number(v) ? json_number_value(v) : 0;
}

int kt_job_view_progress(const kt_job_view_t *v, kt_scheduler_t *sched, const char *state,
                         const char *message, const kt_job_best_t *best,
                         const char *store_model, kt_job_alloc_fn alloc, void *user,
                         Ktune__V1__JobProgress *out)
{
    json_t *snap = kt_scheduler_snapshot(sched);
    if (!snap)
        return kt_err_code();
    int rc = 0;
    json_t *tasks = json_object_get(snap, "tasks");
    size_t n = json_array_size(tasks);
    const kt_store_job_t *j = &v->info->job;
    out->job_id = j->id;
    out->estimated_total_latency = num_or_zero(json_object_get(snap, "estimated_latency_s"));
    out->total_trials = (int32_t)json_integer_value(json_object_get(snap, "total_trials"));
    out->budget = (int32_t)json_integer_value(json_object_get(snap, "budget"));
    out->elapsed = num_or_zero(json_object_get(snap, "elapsed_s"));
    out->next_task = (int32_t)json_integer_value(json_object_get(snap, "next_task"));
    out->created = j->created;
    if (!(out->state = adup(alloc, user, state)) || !(out->message = adup(alloc, user, message)) ||
        !(out->target = adup(alloc, user, j->target)) ||
        !(out->policy = adup(alloc, user, j->policy)) ||
        !(out->strategy = adup(alloc, user, j->strategy)) ||
        !(out->runner_key = adup(alloc, user, j->runner_key)) ||
        !(out->search_params = adup(alloc, user, v->opts.search_params)) ||
        !(out->store_model = adup(alloc, user, store_model)))
        goto oom;
    if (n > 0) {
        Ktune__V1__TaskProgress *arr = alloc(user, n * sizeof *arr);
        out->tasks = alloc(user, n * sizeof *out->tasks);
        if (!arr || !out->tasks)
            goto oom;
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(tasks, i);
            ktune__v1__task_progress__init(&arr[i]);
            arr[i].task_id = (int32_t)i;
            arr[i].best_latency = num_or_zero(json_object_get(t, "latency_s"));
            arr[i].gflops = num_or_zero(json_object_get(t, "gflops"));
            arr[i].trials = (int32_t)json_integer_value(json_object_get(t, "trials"));
            arr[i].rounds = (int32_t)json_integer_value(json_object_get(t, "rounds"));
            arr[i].weight = num_or_zero(json_object_get(t, "weight"));
            arr[i].flops = num_or_zero(json_object_get(t, "flops"));
            if (!(arr[i].workload_key = adup(alloc, user, json_string_value(
                                                              json_object_get(t, "workload_key")))) ||
                !(arr[i].status =
                      adup(alloc, user, json_string_value(json_object_get(t, "status")))) ||
                (i < (size_t)v->ntasks &&
                 !(arr[i].workload_json = adup(alloc, user, kt_workload_json(v->wl[i])))))
                goto oom;
            const char *o = best && i < (size_t)v->ntasks &&
                                    best[i].cost < KT_SCHEDULER_NO_COST
                                ? kt_store_origin_name(best[i].origin)
                                : NULL;
            if (!(arr[i].best_origin = adup(alloc, user, o)))
                goto oom;
            out->tasks[i] = &arr[i];
        }
        out->n_tasks = n;
    }
    char *table = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&table, &tlen);
    if (!f)
        goto oom;
    rc = kt_scheduler_print_table(sched, f, out->next_task);
    fclose(f);
    if (rc == 0 && !(out->table = adup(alloc, user, table)))
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    free(table);
    json_decref(snap);
    return rc;
oom:
    json_decref(snap);
    return kt_err_set(KT_ENOMEM, "out of memory");
}

/* kt_job_record_fn: note r as a candidate for its task's best (ctx: the
 * tasks' kt_job_best_t). */
static int note_best(int task, const kt_record_t *r, void *ctx)
{
    kt_job_best_note(&((kt_job_best_t *)ctx)[task], r);
    return 0;
}

int kt_job_view_progress_from_store(kt_store_t *s, int64_t id, kt_job_alloc_fn alloc, void *user,
                                    Ktune__V1__JobProgress *out)
{
    kt_job_view_t *v = NULL;
    int rc = kt_job_view_load(s, id, &v);
    if (rc != 0)
        return rc;
    kt_scheduler_config_t cfg;
    kt_scheduler_config_default(&cfg);
    cfg.table_out = NULL;
    /* Each task's best, noted on the walk that restores the scheduler. */
    kt_job_best_t *best = malloc((size_t)(v->ntasks > 0 ? v->ntasks : 1) * sizeof *best);
    for (int i = 0; best && i < v->ntasks; i++)
        kt_job_best_init(&best[i]);
    kt_scheduler_t *sched = best ? kt_job_view_scheduler(s, v, &cfg, note_best, best) : NULL;
    if (!best)
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    else if (!sched)
        rc = kt_err_code();
    else
        rc = kt_job_view_progress(v, sched, v->info->job.state, "", best, NULL, alloc, user,
                                  out);
    kt_scheduler_free(sched);
    kt_job_view_free(v);
    free(best);
    return rc;
}
