/* FamilySeer (seed 001): a job's task policies grouped into families that
 * share one xgb cost model, warm-up training on every record, then per-family
 * training, and foresee passes for the other members of a measured task's
 * family; and Ansor's monolithic model (sketch.xgb in a job: one family of
 * every task). search.h ("task families") states the behaviour. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search_int.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* FAM_ALL: sketch.xgb over several tasks, one family holding them all. */
typedef enum { FAM_PLAIN = 0, FAM_OP, FAM_HASH, FAM_NONE, FAM_ALL } fam_kind_t;

static const char *const policy_names[] = {
    "sketch.xgb", "sketch.random", "sketch.xgb.family-op", "sketch.xgb.family-hash",
    "sketch.xgb.family-none", NULL,
};

/* A snapshot of sketch.xgb's shared model that searches score with while
 * the model trains: freed by whoever drops the last reference. */
typedef struct {
    kt_model_t *m;
    atomic_int refs;
} snap_t;

struct kt_search_family {
    int n;
    fam_kind_t kind;
    kt_search_policy_t **pol;
    int *fam;            /* family of each task; -1 for plain policies */
    int nfam;
    char **keys;         /* per family */
    kt_model_t **models; /* per family, owned */
    int *fed;            /* per task: hist entries already given to the other families */
    char *exhausted;     /* per task: proposed nothing (counts as tried for the warm-up) */
    int warm_done;
    int warmup;          /* KT_SEARCH_WARMUP_* (FAM_ALL) */
    /* The family kinds' searches (model reads, each on its own task's
     * policy) share it, and a propose checks under it whether to sync;
     * recording, syncing, training and foresee passes (which write the
     * models and other tasks' policies) hold it alone, except FAM_ALL's
     * training (`training` below). */
    pthread_rwlock_t lock;
    /* FAM_ALL: a search scores with `snap`, so the shared model trains
     * outside `lock` (a feedback's training overlaps other tasks'
     * searches). One thread at a time trains it: the one that set
     * `training` (under `lock` held alone). Feedbacks that come meanwhile
     * only record; the next training takes all of them at once. The
     * trainer alone writes the model, snap_ntrain and snap_trained;
     * snap_mu guards the pointer `snap`. */
    int training;
    int queued;   /* records fed back during that training wait for the next */
    kt_search_train_hook_fn hook;
    void *hook_user;
    pthread_mutex_t snap_mu;
    snap_t *snap;
    unsigned snap_ntrain;
    int snap_trained;
};

static void snap_put(snap_t *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        kt_model_free(s->m);
        free(s);
    }
}

static snap_t *snap_get(kt_search_family_t *f)
{
    pthread_mutex_lock(&f->snap_mu);
    snap_t *s = f->snap;
    if (s)
        atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&f->snap_mu);
    return s;
}

/* A new snapshot of the shared model when it changed since the last one
 * (by the trainer, or before any thread uses the family). */
static int snap_publish(kt_search_family_t *f)
{
    const kt_model_t *m = f->models[0];
    unsigned nt = kt_model_num_trainings(m);
    int tr = kt_model_is_trained(m);
    if (f->snap && nt == f->snap_ntrain && tr == f->snap_trained)
        return 0;
    snap_t *s = calloc(1, sizeof *s);
    if (!s)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (!(s->m = kt_model_snapshot(m))) {
        free(s);
        return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    }
    atomic_init(&s->refs, 1);
    pthread_mutex_lock(&f->snap_mu);
    snap_t *old = f->snap;
    f->snap = s;
    pthread_mutex_unlock(&f->snap_mu);
    f->snap_ntrain = nt;
    f->snap_trained = tr;
    snap_put(old);
    return 0;
}

void kt_search_family_set_pool(kt_search_family_t *f, kt_pool_t *pool)
{
    for (int i = 0; f && i < f->n; i++)
        kt_search_set_pool(f->pol[i], pool);
    /* One model for every task trains on one thread at a time, a large
     * share of a round's work: its pairwise math takes the pool's threads,
     * while the searches beside it score with snapshots. */
    if (f && f->kind == FAM_ALL && f->nfam > 0 && f->models[0])
        kt_model_set_train_threads(f->models[0], pool ? kt_pool_threads(pool) : 0);
}

const char *const *kt_search_policy_names(void)
{
    return policy_names;
}

static int kind_of(const char *name, fam_kind_t *out)
{
    static const fam_kind_t kinds[] = {FAM_PLAIN, FAM_PLAIN, FAM_OP, FAM_HASH, FAM_NONE};
    for (int i = 0; policy_names[i]; i++)
        if (name && strcmp(name, policy_names[i]) == 0) {
            *out = kinds[i];
            return 0;
        }
    return kt_err_set(KT_EINVAL,
                      "unknown policy '%s' (sketch.xgb, sketch.random, sketch.xgb.family-op, "
                      "sketch.xgb.family-hash or sketch.xgb.family-none)",
                      name ? name : "(null)");
}

int kt_search_policy_check(const char *name)
{
    fam_kind_t k;
    return kind_of(name, &k);
}

/* ---- family keys from the DAG -------------------------------------------------- */

static const char *stage_tag(const kt_stage_t *s)
{
    return s->tag && *s->tag ? s->tag : s->name;
}

const char *kt_search_family_anchor(const kt_dag_t *dag)
{
    if (!dag)
        return NULL;
    int n = kt_dag_num_stages(dag), reduction = -1, output = -1;
    for (int i = 0; i < n; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        if (s->kind != KT_STAGE_COMPUTE)
            continue;
        /* the stage Ansor tiles multi-level is what the task is about */
        if (kt_dag_has_data_reuse(dag, i))
            return stage_tag(s);
        if (reduction < 0 && kt_dag_is_reduction(dag, i))
            reduction = i;
        if (output < 0 && s->is_output)
            output = i;
    }
    int a = reduction >= 0 ? reduction : output;
    return a >= 0 ? stage_tag(kt_dag_stage(dag, a)) : NULL;
}

uint64_t kt_search_family_op_hash(const kt_dag_t *dag)
{
    if (!dag)
        return 0;
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; i < kt_dag_num_stages(dag); i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        if (s->kind == KT_STAGE_PLACEHOLDER)
            kt_sbuf_puts(&b, "placeholder;");
        else
            kt_sbuf_printf(&b, "%s/%d/%d;", stage_tag(s), (int)s->rop, s->nreduce);
    }
    uint64_t h = kt_hash64(b.data ? b.data : "", b.len);
    kt_sbuf_free(&b);
    return h;
}

/* ---- create / free --------------------------------------------------------------- */

void kt_search_family_free(kt_search_family_t *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n && f->pol; i++)
        kt_search_policy_free(f->pol[i]);
    for (int g = 0; g < f->nfam; g++) {
        if (f->keys)
            free(f->keys[g]);
        if (f->models)
            kt_model_free(f->models[g]);
    }
    free(f->pol);
    free(f->fam);
    free(f->keys);
    free(f->models);
    free(f->fed);
    free(f->exhausted);
    snap_put(f->snap);
    pthread_rwlock_destroy(&f->lock);
    pthread_mutex_destroy(&f->snap_mu);
    free(f);
}

/* The family key of one task. */
static char *task_key(fam_kind_t kind, const kt_workload_t *w, int task)
{
    char buf[64];
    if (kind == FAM_OP) {
        const char *a = kt_search_family_anchor(kt_workload_dag(w));
        if (!a) {
            kt_err_set(KT_EINVAL, "task %d: the DAG has no compute stage", task);
            return NULL;
        }
        snprintf(buf, sizeof buf, "%s", a);
    } else if (kind == FAM_HASH) {
        snprintf(buf, sizeof buf, "%016" PRIx64, kt_search_family_op_hash(kt_workload_dag(w)));
    } else if (kind == FAM_ALL) {
        snprintf(buf, sizeof buf, "all");
    } else {
        snprintf(buf, sizeof buf, "task%d", task);
    }
    char *k = kt_strdup(buf);
    if (!k)
        kt_err_set(KT_ENOMEM, "out of memory");
    return k;
}

/* Assign families (first appearance order) and make one model each. */
static int make_families(kt_search_family_t *f, const kt_workload_t *const *wl,
                         const kt_search_opts_t *o)
{
    f->keys = calloc((size_t)f->n, sizeof *f->keys);
    f->models = calloc((size_t)f->n, sizeof *f->models);
    if (!f->keys || !f->models)
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = 0; i < f->n; i++) {
        char *k = task_key(f->kind, wl[i], i);
        if (!k)
            return kt_err_code() ? kt_err_code() : KT_ENOMEM;
        int g = 0;
        while (g < f->nfam && strcmp(f->keys[g], k) != 0)
            g++;
        if (g < f->nfam) {
            free(k);
        } else {
            kt_model_params_t mp;
            kt_search_model_params(o, o->seed * 1000003u + (uint64_t)g, &mp);
            f->keys[g] = k;
            f->nfam++;   /* the key is ours now, even if the model fails */
            if (!(f->models[g] = kt_model_new(KT_MODEL_XGB, &mp)))
                return kt_err_code();
        }
        f->fam[i] = g;
    }
    return 0;
}

kt_search_family_t *kt_search_family_new(const kt_workload_t *const *wl, int n,
                                         const kt_sched_params_t *params,
                                         const kt_search_opts_t *opts)
{
    if (!wl || n < 1) {
        kt_err_set(KT_EINVAL, "search family: no tasks");
        return NULL;
    }
    kt_search_opts_t o;
    if (opts)
        o = *opts;
    else
        kt_search_opts_default(&o);
    const char *name = o.policy ? o.policy : "sketch.xgb";
    fam_kind_t kind;
    if (kind_of(name, &kind))
        return NULL;
    /* Ansor's task scheduler gives every task of a network one model; a
     * single task keeps the policy's own model as before */
    if (kind == FAM_PLAIN && strcmp(name, "sketch.xgb") == 0 && n > 1)
        kind = FAM_ALL;
    kt_search_family_t *f = calloc(1, sizeof *f);
    if (!f) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    /* writers first: a feedback (which ends a measured round) must not wait
     * behind a stream of searches that keep the lock shared */
    pthread_rwlockattr_t la;
    pthread_rwlockattr_init(&la);
    pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&f->lock, &la);
    pthread_rwlockattr_destroy(&la);
    pthread_mutex_init(&f->snap_mu, NULL);
    f->n = n;
    f->kind = kind;
    f->warmup = o.warmup;
    f->pol = calloc((size_t)n, sizeof *f->pol);
    f->fam = calloc((size_t)n, sizeof *f->fam);
    f->fed = calloc((size_t)n, sizeof *f->fed);
    f->exhausted = calloc((size_t)n, 1);
    if (!f->pol || !f->fam || !f->fed || !f->exhausted) {
        kt_err_set(KT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (!wl[i]) {
            kt_err_set(KT_EINVAL, "search family: task %d has no workload", i);
            goto fail;
        }
        f->fam[i] = -1;
    }
    if (kind != FAM_PLAIN && make_families(f, wl, &o) != 0)
        goto fail;
    if (kind == FAM_ALL && snap_publish(f) != 0)
        goto fail;
    for (int i = 0; i < n; i++) {
        kt_search_opts_t so = o;
        so.policy = kind == FAM_PLAIN ? name : "sketch.xgb";
        so.seed = o.seed * 1000003u + (uint64_t)i;
        kt_model_t *m = kind == FAM_PLAIN ? NULL : f->models[f->fam[i]];
        if (!(f->pol[i] = kt_search_policy_new(wl[i], params, &so, m, i))) {
            kt_err_prefix("task %d", i);
            goto fail;
        }
    }
    return f;
fail:
    kt_search_family_free(f);
    return NULL;
}

/* ---- queries ----------------------------------------------------------------------- */

int kt_search_family_num_tasks(const kt_search_family_t *f)
{
    return f ? f->n : 0;
}

kt_search_policy_t *kt_search_family_policy(const kt_search_family_t *f, int task)
{
    return f && task >= 0 && task < f->n ? f->pol[task] : NULL;
}

int kt_search_family_count(const kt_search_family_t *f)
{
    return f ? f->nfam : 0;
}

int kt_search_family_of(const kt_search_family_t *f, int task)
{
    return f && task >= 0 && task < f->n ? f->fam[task] : -1;
}

const char *kt_search_family_key(const kt_search_family_t *f, int family)
{
    return f && family >= 0 && family < f->nfam ? f->keys[family] : NULL;
}

int kt_search_family_tasks(const kt_search_family_t *f, int family, int *out, int cap,
                           int *ntasks)
{
    if (!f || family < 0 || family >= f->nfam || cap < 0 || (cap > 0 && !out))
        return kt_err_set(KT_EINVAL, "search family: bad family %d", family);
    int k = 0;
    for (int i = 0; i < f->n; i++)
        if (f->fam[i] == family) {
            if (k < cap)
                out[k] = i;
            k++;
        }
    if (ntasks)
        *ntasks = k;
    return 0;
}

kt_model_t *kt_search_family_model(const kt_search_family_t *f, int family)
{
    return f && family >= 0 && family < f->nfam ? f->models[family] : NULL;
}

int kt_search_family_warmup_done(const kt_search_family_t *f)
{
    return f ? f->warm_done : 0;
}

/* ---- training ------------------------------------------------------------------------ */

/* Give task k's records not yet shared to every other family's model. */
static int share_records(kt_search_family_t *f, int k)
{
    kt_search_policy_t *sp = f->pol[k];
    int from = f->fed[k], np = sp->nhist - from;
    if (np <= 0)
        return 0;
    kt_sched_state_t **sts = malloc((size_t)np * sizeof *sts);
    double *cs = malloc((size_t)np * sizeof *cs);
    int rc = 0;
    if (!sts || !cs) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    } else {
        for (int i = 0; i < np; i++) {
            sts[i] = sp->hist[from + i].st;
            cs[i] = sp->hist[from + i].cost;
        }
        for (int g = 0; g < f->nfam && rc == 0; g++)
            if (g != f->fam[k])
                rc = kt_search_train_model(sp, f->models[g], sts, cs, np);
        if (rc == 0)
            f->fed[k] = sp->nhist;
    }
    free(sts);
    free(cs);
    return rc;
}

/* The warm-up is over: each family model keeps its family's samples only. */
static int end_warmup(kt_search_family_t *f)
{
    uint64_t *ids = malloc((size_t)f->n * sizeof *ids);
    if (!ids)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = 0;
    for (int g = 0; g < f->nfam && rc == 0; g++) {
        size_t k = 0;
        for (int i = 0; i < f->n; i++)
            if (f->fam[i] == g)
                ids[k++] = f->pol[i]->task_id;
        rc = kt_model_keep_tasks(f->models[g], ids, k);
    }
    free(ids);
    if (rc == 0)
        f->warm_done = 1;
    return rc;
}

/* 1 once every task has records or proposed nothing. */
static int all_tried(const kt_search_family_t *f)
{
    int all = 1;
    for (int k = 0; k < f->n; k++)
        all &= f->pol[k]->nhist > 0 || f->exhausted[k];
    return all;
}

/* What the shared model of FAM_ALL trains on next, under the exclusive
 * lock: with Ansor's warm-up no record (so it scores at random) until every
 * task has had a round, then all of them in one training; with
 * warmup=model every record at once. The records to train on into *batch
 * (NULL: none), marked trained. */
static int sync_all_take(kt_search_family_t *f, kt_search_batch_t **batch)
{
    *batch = NULL;
    if (!f->warm_done && all_tried(f))
        f->warm_done = 1;
    if (!f->warm_done && f->warmup == KT_SEARCH_WARMUP_RANDOM)
        return 0;
    return kt_search_take_pending(f->pol, f->n, batch);
}

/* sync of FAM_ALL, entered holding the exclusive lock, which it releases.
 * While another thread trains the shared model beside the searches, the
 * records just recorded stay pending (`queued`): the next feedback, propose
 * or sync after that training takes all of them, so feedbacks queued
 * behind a training cost one more training in all, not one each, and do
 * not wait for it (Ansor trains its one model once per round, on every
 * task's new records). Otherwise this thread trains once on everything
 * pending (not again on what comes meanwhile: its task would wait as long
 * as others keep feeding back) and publishes a snapshot: `beside` (a
 * feedback, or records that feedbacks left queued) outside the lock,
 * while searches of other tasks score with the last snapshot; else (what
 * a sync or propose finds pending: preloads, the end of the warm-up) under
 * it, so that a search that starts after the sync sees what it trained.
 * One caller feeding back in a fixed order, each feedback returning before
 * the next, trains as before: once per feedback, on its records. */
static int sync_all_unlock(kt_search_family_t *f, int beside)
{
    kt_search_batch_t *batch = NULL;
    int rc = 0;
    if (f->training)
        f->queued |= beside;
    else
        rc = sync_all_take(f, &batch);
    if (batch) {
        beside |= f->queued;
        f->queued = 0;
        f->training = beside;
        if (beside)
            pthread_rwlock_unlock(&f->lock);
        if (f->hook)
            f->hook(f->hook_user, kt_search_batch_size(batch));
        rc = kt_search_batch_train(batch, f->models[0]);
        if (rc == 0)
            rc = snap_publish(f);
        kt_search_batch_free(batch);
        if (beside)
            pthread_rwlock_wrlock(&f->lock);
        f->training = 0;
    }
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

/* The xgb models of the family: the family models, or the plain policies'
 * own ones (sketch.random's are random: none). */
static kt_model_t *xgb_model(const kt_search_family_t *f, int i)
{
    if (f->kind != FAM_PLAIN)
        return f->models[i];
    kt_search_policy_t *sp = f->pol[i];
    return sp->own_model && sp->features ? sp->model : NULL;
}

/* How many indexes xgb_model takes. */
static int model_slots(const kt_search_family_t *f)
{
    return f->kind == FAM_PLAIN ? f->n : f->nfam;
}

int kt_search_family_num_learned(const kt_search_family_t *f)
{
    int n = f ? model_slots(f) : 0, k = 0;
    for (int i = 0; i < n; i++)
        k += xgb_model(f, i) != NULL;
    return k;
}

int kt_search_family_set_prior(kt_search_family_t *f, const kt_model_t *prior)
{
    if (!f || !prior)
        return kt_err_set(KT_EINVAL, "search family: no prior");
    int n = model_slots(f), took = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        kt_model_t *m = xgb_model(f, i);
        if (m && (rc = kt_model_set_prior(m, prior)) == 0)
            took++;
    }
    if (rc != 0) {   /* all or none: the ones before take it back */
        for (int i = 0; i < n; i++)
            if (xgb_model(f, i))
                kt_model_set_prior(xgb_model(f, i), NULL);
        return rc;
    }
    /* searches score with the snapshot: take one that has the prior */
    if (f->kind == FAM_ALL && took > 0) {
        f->snap_trained = -1;
        if ((rc = snap_publish(f)) != 0)
            return rc;
    }
    return took;
}

void kt_search_family_set_train_hook(kt_search_family_t *f, kt_search_train_hook_fn fn,
                                     void *user)
{
    if (f) {
        f->hook = fn;
        f->hook_user = user;
    }
}

/* 1 when sync_locked would change something (train, share, end the
 * warm-up); 0 when it would be a no-op. Read under the shared lock, so that
 * a propose takes the lock alone only when there is something to sync: a
 * writer waits for every search in progress. */
static int sync_needed(const kt_search_family_t *f)
{
    int pending = 0, unshared = 0;
    for (int k = 0; k < f->n; k++) {
        pending |= f->pol[k]->npending > 0;
        unshared |= f->fed[k] < f->pol[k]->nhist;
    }
    if (f->kind == FAM_ALL)   /* a training in progress takes what is pending */
        return !f->training && ((!f->warm_done && all_tried(f)) ||
               ((f->warm_done || f->warmup != KT_SEARCH_WARMUP_RANDOM) && pending));
    return pending || (!f->warm_done && (unshared || all_tried(f)));
}

/* sync of the family kinds under the exclusive lock. */
static int sync_locked(kt_search_family_t *f)
{
    int rc = 0;
    /* preloaded (or otherwise untrained) records of any task train its
     * family's model now, not only at that task's next feedback */
    for (int k = 0; k < f->n && rc == 0; k++)
        if (f->pol[k]->npending > 0)
            rc = kt_search_feedback(f->pol[k], NULL, NULL, 0);
    if (rc || f->warm_done)
        return rc;
    if (all_tried(f))   /* sharing now would be dropped at once */
        return end_warmup(f);
    for (int k = 0; k < f->n && rc == 0; k++)
        rc = share_records(f, k);
    return rc;
}

/* sync, entered holding the exclusive lock, which it releases. */
static int sync_unlock(kt_search_family_t *f)
{
    if (f->kind == FAM_ALL)
        return sync_all_unlock(f, 0);
    int rc = sync_locked(f);
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

int kt_search_family_sync(kt_search_family_t *f)
{
    if (!f)
        return kt_err_set(KT_EINVAL, "search family: none");
    if (f->kind == FAM_PLAIN)
        return 0;
    pthread_rwlock_wrlock(&f->lock);
    return sync_unlock(f);
}

/* ---- propose / feedback --------------------------------------------------------------- */

static int task_check(const kt_search_family_t *f, int task)
{
    if (!f || task < 0 || task >= f->n)
        return kt_err_set(KT_EINVAL, "search family: no task %d", task);
    return 0;
}

int kt_search_family_propose(kt_search_family_t *f, int task, int n, kt_sched_state_t ***out)
{
    return kt_search_family_propose_origins(f, task, n, out, NULL);
}

int kt_search_family_propose_origins(kt_search_family_t *f, int task, int n,
                                     kt_sched_state_t ***out, int *origins)
{
    if (out)
        *out = NULL;
    int rc = task_check(f, task);
    if (rc)
        return rc;
    if (f->kind == FAM_PLAIN)
        return kt_search_propose_origins(f->pol[task], n, out, origins);
    pthread_rwlock_rdlock(&f->lock);
    int need = sync_needed(f);
    pthread_rwlock_unlock(&f->lock);
    if (need) {
        pthread_rwlock_wrlock(&f->lock);
        rc = sync_unlock(f);
        if (rc)
            return rc;
    }
    /* The search only reads the models and writes its own task's policy
     * (the scheduler never runs two rounds of one task at once), so other
     * tasks search meanwhile. A feedback that slips in between the sync and
     * here is as if it had come before this propose. sketch.xgb's search
     * scores with the snapshot of its model, trained or not, so that a
     * feedback may train the model meanwhile (as if it came after this
     * propose); the family kinds' foresee passes write other tasks'
     * policies, so their searches hold the lock shared. */
    kt_search_policy_t *sp = f->pol[task];
    if (f->kind == FAM_ALL) {
        snap_t *s = snap_get(f);
        sp->score_model = s->m;
        rc = kt_search_propose_origins(sp, n, out, origins);
        sp->score_model = NULL;
        snap_put(s);
    } else {
        pthread_rwlock_rdlock(&f->lock);
        rc = kt_search_propose_origins(sp, n, out, origins);
        pthread_rwlock_unlock(&f->lock);
    }
    if (rc == 0) {
        /* a task with nothing to measure must not hold the warm-up forever */
        pthread_rwlock_wrlock(&f->lock);
        if (!f->exhausted[task]) {
            f->exhausted[task] = 1;
            int src = sync_unlock(f);
            rc = src < 0 ? src : 0;
        } else {
            pthread_rwlock_unlock(&f->lock);
        }
    }
    return rc;
}

int kt_search_family_feedback(kt_search_family_t *f, int task, kt_sched_state_t *const *states,
                              const double *costs, int n)
{
    int rc = task_check(f, task);
    if (rc)
        return rc;
    if (f->kind == FAM_PLAIN)
        return kt_search_feedback(f->pol[task], states, costs, n);
    pthread_rwlock_wrlock(&f->lock);
    if (f->kind == FAM_ALL) {
        kt_search_policy_t *sp = f->pol[task];
        double t0 = kt_time_mono();
        rc = kt_search_record(sp, states, costs, n);
        if (rc == 0) {
            rc = sync_all_unlock(f, 1);
        } else {
            pthread_rwlock_unlock(&f->lock);
        }
        sp->train_s = kt_time_mono() - t0;
        return rc;
    }
    rc = kt_search_feedback(f->pol[task], states, costs, n);
    if (rc == 0)
        rc = sync_locked(f);
    /* Foresee: the family model just learned from this task; let it pick
     * starting points for the family's other tasks. Random scores would
     * pick nothing worth keeping, so only a trained model does it. */
    int g = f->fam[task];
    if (rc == 0 && n > 0 && kt_model_is_trained(f->models[g]))
        for (int k = 0; k < f->n && rc == 0; k++)
            if (k != task && f->fam[k] == g)
                rc = kt_search_foresee(f->pol[k]);
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

typedef struct {
    kt_search_family_t *f;
    int task;
} round_ctx_t;

static int ctx_propose(void *ctx, int n, kt_sched_state_t ***out)
{
    round_ctx_t *c = ctx;
    return kt_search_family_propose(c->f, c->task, n, out);
}

static int ctx_feedback(void *ctx, kt_sched_state_t *const *states, const double *costs, int n)
{
    round_ctx_t *c = ctx;
    return kt_search_family_feedback(c->f, c->task, states, costs, n);
}

int kt_search_family_one_round(kt_search_family_t *f, int task, int n,
                               kt_search_measure_fn measure, void *user,
                               kt_sched_state_t ***states, kt_measure_result_t **results)
{
    int rc = task_check(f, task);
    if (rc)
        return rc;
    round_ctx_t c = {f, task};
    kt_search_round_ops_t ops = {.propose = ctx_propose, .feedback = ctx_feedback, .ctx = &c};
    return kt_search_round_run(f->pol[task]->w, &ops, n, measure, user, states, results);
}
