/* Re-fitting a state to a DAG of other shapes (schedule transfer, state.h
 * "re-fitting"): the same sketch, split factors nearest in log ratio that
 * divide the new extents, annotations clamped to the loops that exist. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "util/err.h"

/* Cost ties closer than this are ties: sums of logs of the same factors in
 * another order differ by rounding only. */
#define COST_EPS 1e-9

/* ---- split factors -------------------------------------------------------------- */

typedef struct {
    int nlev;
    int max_inner;
    const int32_t *src;
    const int64_t *div;        /* divisors of the extent, ascending */
    int ndiv;
    double lsrc[KT_SCHED_MAX_LEVELS];
    int64_t cur[KT_SCHED_MAX_LEVELS];
    double dev[KT_SCHED_MAX_LEVELS];   /* |log(cur / src)| per level */
    int64_t best[KT_SCHED_MAX_LEVELS];
    double best_dev[KT_SCHED_MAX_LEVELS];
    double best_cost;
    int found;
} fit_t;

/* 1 when the candidate in f->cur / f->dev (cost c) beats the best so far:
 * a lower total, or on a tie the smaller deviation at the innermost level
 * where they differ, so that a change of extent goes to the outer loops and
 * the register tile stays as it was. */
static int fit_better(const fit_t *f, double c)
{
    if (!f->found || c < f->best_cost - COST_EPS)
        return 1;
    if (c > f->best_cost + COST_EPS)
        return 0;
    for (int l = f->nlev - 1; l >= 0; l--) {
        if (f->dev[l] < f->best_dev[l] - COST_EPS)
            return 1;
        if (f->dev[l] > f->best_dev[l] + COST_EPS)
            return 0;
    }
    return 0;
}

static void fit_dfs(fit_t *f, int l, int64_t rem, double cost)
{
    if (f->found && cost > f->best_cost + COST_EPS)
        return;   /* deviations only add up */
    if (l == f->nlev - 1) {
        if (rem > f->max_inner)
            return;
        f->cur[l] = rem;
        f->dev[l] = fabs(log((double)rem) - f->lsrc[l]);
        double c = cost + f->dev[l];
        if (fit_better(f, c)) {
            memcpy(f->best, f->cur, sizeof f->best);
            memcpy(f->best_dev, f->dev, sizeof f->best_dev);
            f->best_cost = c;
            f->found = 1;
        }
        return;
    }
    for (int i = 0; i < f->ndiv && f->div[i] <= rem; i++) {
        int64_t g = f->div[i];
        if (rem % g)
            continue;
        f->cur[l] = g;
        f->dev[l] = fabs(log((double)g) - f->lsrc[l]);
        fit_dfs(f, l + 1, rem / g, cost + f->dev[l]);
    }
}

/* The exact factorization of `extent` over nlev levels nearest to src
 * (sum over levels of |log(out / src)|, ties as fit_better says) whose
 * innermost factor is at most max_inner; always exists (all outermost). */
static int fit_split(int64_t extent, int nlev, const int32_t *src, int max_inner, int32_t *out)
{
    if (extent < 1 || extent > INT32_MAX)
        return kt_err_set(KT_EINVAL, "re-fit: extent %lld out of range", (long long)extent);
    int64_t primes[32];
    int exps[32];
    int k = kt_sched_factorize(extent, primes, exps);
    /* divisors from the prime powers; extent <= 2^31 has at most 1600 */
    int64_t *div = malloc(2048 * sizeof *div);
    if (!div)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int nd = 1;
    div[0] = 1;
    for (int i = 0; i < k; i++) {
        int base = nd;
        int64_t pw = 1;
        for (int e = 1; e <= exps[i]; e++) {
            pw *= primes[i];
            for (int j = 0; j < base && nd < 2048; j++)
                div[nd++] = div[j] * pw;
        }
    }
    for (int i = 1; i < nd; i++)   /* insertion sort: a few hundred entries */
        for (int j = i; j > 0 && div[j - 1] > div[j]; j--) {
            int64_t t = div[j];
            div[j] = div[j - 1];
            div[j - 1] = t;
        }
    fit_t f = {.nlev = nlev, .max_inner = max_inner < 1 ? 1 : max_inner, .src = src, .div = div,
               .ndiv = nd};
    for (int l = 0; l < nlev; l++)
        f.lsrc[l] = log((double)(src[l] > 0 ? src[l] : 1));
    fit_dfs(&f, 0, extent, 0);
    free(div);
    if (!f.found)
        return kt_err_set(KT_EINTERNAL, "re-fit: no factorization of %lld", (long long)extent);
    for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
        out[l] = l < nlev ? (int32_t)f.best[l] : 0;
    return 0;
}

/* ---- structure -------------------------------------------------------------------- */

/* The two DAGs compute the same operators in the same order: per stage the
 * same name, kind, tag, rank, reduction count and constant axes. Elementwise
 * stages may differ in name: a relu and a clip are each one such stage, and
 * a schedule does not look inside them. */
static int same_operators(const kt_dag_t *a, const kt_dag_t *b)
{
    int n = kt_dag_num_stages(a);
    if (n != kt_dag_num_stages(b))
        return kt_err_set(KT_EINVAL, "re-fit: the state's workload has %d stages, the task %d", n,
                          kt_dag_num_stages(b));
    for (int s = 0; s < n; s++) {
        const kt_stage_t *x = kt_dag_stage(a, s), *y = kt_dag_stage(b, s);
        int elemwise = x->tag && y->tag && strcmp(x->tag, "elemwise") == 0 &&
                       strcmp(y->tag, "elemwise") == 0;
        const char *what = !elemwise && strcmp(x->name, y->name) != 0 ? "name"
                           : x->kind != y->kind              ? "kind"
                           : strcmp(x->tag ? x->tag : "", y->tag ? y->tag : "") != 0 ? "operator"
                           : x->ndim != y->ndim             ? "rank"
                           : x->nreduce != y->nreduce       ? "number of reduce axes"
                           : x->rop != y->rop               ? "reduction"
                           : x->const_axes != y->const_axes ? "constant-table axes"
                                                            : NULL;
        if (what)
            return kt_err_set(KT_EINVAL,
                              "re-fit: stage %d differs in %s ('%s' %s in the state's workload, "
                              "'%s' %s in the task)",
                              s, what, x->name, x->tag ? x->tag : "", y->name, y->tag ? y->tag : "");
    }
    return 0;
}

/* Stage s of sketch sk (of dag) has the structure of stage s of src: the
 * same kind (a plain stage whose location is tunable may be inlined by
 * choice), consumer, cache stage, level and rfactor variant, and on GPU the
 * same producers in shared memory. */
static int stage_matches(const kt_dag_t *dag, const kt_sched_state_t *sk,
                         const kt_sched_state_t *src, int s)
{
    const kt_sched_stage_t *k = &sk->stages[s], *e = &src->stages[s];
    if (k->kind == KT_SK_ROOT && kt_sched_loc_tunable(dag, sk, s))
        return e->kind == KT_SK_ROOT || e->kind == KT_SK_INLINE;
    return k->kind == e->kind && k->fuse == e->fuse && k->cache_write == e->cache_write &&
           k->level == e->level && k->rf_inner == e->rf_inner && k->smem == e->smem;
}

/* "tiled (cache write at level 2)" for a message. */
static void describe(const kt_dag_t *dag, const kt_sched_stage_t *e, char *buf, size_t n)
{
    int len = snprintf(buf, n, "%s", kt_sched_kind_name(e->kind));
    if (len < 0 || (size_t)len >= n)
        return;
    if (e->kind == KT_SK_TILED && e->fuse >= 0)
        snprintf(buf + len, n - (size_t)len, " (consumer '%s' fused at level %d)",
                 kt_dag_stage(dag, e->fuse)->name, e->level);
    else if (e->kind == KT_SK_TILED && e->cache_write)
        snprintf(buf + len, n - (size_t)len, " (cache write at level %d)", e->level);
    else if (e->kind == KT_SK_RFACTOR)
        snprintf(buf + len, n - (size_t)len, " (partial axis %s)", e->rf_inner ? "inner" : "outer");
}

/* The sketch of dag with src's structure, or KT_EINVAL naming the first
 * stage where the sketch closest to it (longest matching suffix: sketches
 * are derived from the output backwards) differs. */
static int match_sketch(const kt_dag_t *dag, const kt_sched_params_t *p,
                        const kt_sched_state_t *src, kt_sched_state_t **out)
{
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    int rc = kt_sched_sketches(dag, p, &sk, &nsk);
    if (rc)
        return rc;
    int found = -1, near = -1, near_at = -1, near_len = -1;
    for (int i = 0; i < nsk && found < 0; i++) {
        int s = src->nstages - 1;
        while (s >= 0 && stage_matches(dag, sk[i], src, s))
            s--;
        if (s < 0)
            found = i;
        else if (src->nstages - 1 - s > near_len) {
            near = i;
            near_at = s;
            near_len = src->nstages - 1 - s;
        }
    }
    if (found >= 0) {
        *out = sk[found];
        sk[found] = NULL;
    } else if (near >= 0) {
        char a[160], b[160];
        describe(dag, &src->stages[near_at], a, sizeof a);
        describe(dag, &sk[near]->stages[near_at], b, sizeof b);
        rc = kt_err_set(KT_EINVAL,
                        "re-fit: no sketch of the task has the state's structure: stage '%s' is "
                        "%s in the state, %s in the nearest of the task's %d sketches",
                        kt_dag_stage(dag, near_at)->name, a, b, nsk);
    } else {
        rc = kt_err_set(KT_EINVAL, "re-fit: the task has no sketch");
    }
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    return rc;
}

/* ---- annotations -------------------------------------------------------------- */

/* Splits of stage s re-chosen for dag's extents. A direct tile (every outer
 * reduce factor 1: the reduction ends in the register tile) stays direct
 * where its reduce extents fit the direct cap, since that is what made it
 * write its consumer from registers. */
static int refit_splits(const kt_dag_t *src_dag, const kt_sched_state_t *src, const kt_dag_t *dag,
                        const kt_sched_params_t *p, kt_sched_state_t *st, int s)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    const kt_sched_stage_t *e0 = &src->stages[s];
    kt_sched_stage_t *e = &st->stages[s];
    int gpu = st->target == KT_SCHED_TARGET_CUDA, mi = p->max_innermost_split_factor, rc = 0;
    memset(e->split, 0, sizeof e->split);
    switch (e->kind) {
    case KT_SK_TILED: {
        int nls = gpu ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_SPATIAL_LEVELS;
        int nlr = gpu ? KT_SCHED_GPU_REDUCE_LEVELS : KT_SCHED_REDUCE_LEVELS;
        for (int a = 0; a < ss->ndim && !rc; a++)
            rc = fit_split(ss->shape[a], nls, e0->split[a], mi, e->split[a]);
        int direct = !gpu && ss->nreduce > 0 &&
                     kt_sched_reduce_ends_in_tile(kt_dag_stage(src_dag, s), e0);
        for (int r = 0; direct && r < ss->nreduce; r++)
            direct = ss->reduce_ext[r] <= kt_sched_direct_reduce_cap(p);
        for (int r = 0; r < ss->nreduce && !rc; r++) {
            int32_t *f = e->split[ss->ndim + r];
            if (direct) {
                f[0] = 1;
                f[1] = (int32_t)ss->reduce_ext[r];
            } else {
                rc = fit_split(ss->reduce_ext[r], nlr, e0->split[ss->ndim + r], mi, f);
            }
        }
        break;
    }
    case KT_SK_RFACTOR:
        rc = fit_split(kt_sched_reduce_len(ss), 2, e0->split[0], mi, e->split[0]);
        break;
    case KT_SK_SIMPLIFY:
        for (int a = 0; a < ss->ndim && !rc; a++)
            if (!((ss->const_axes >> a) & 1u))
                rc = fit_split(ss->shape[a], 2, e0->split[a], mi, e->split[a]);
        break;
    default:
        break;
    }
    return rc;
}

/* The source's annotation of one nest, kept where the nest has the loops:
 * parallel and vectorized loop counts clamped to what the nest allows, the
 * auto-unroll step only on a nest with reduce loops. */
static void clamp_ann(const kt_sched_nest_t *n, kt_sched_ann_t *a)
{
    if (a->parallel > n->max_parallel)
        a->parallel = (uint8_t)n->max_parallel;
    if (a->vectorize > n->max_vectorize)
        a->vectorize = (uint8_t)n->max_vectorize;
    if (a->parallel + a->vectorize > n->nloops)
        a->vectorize = (uint8_t)(n->nloops - a->parallel);
    if (!n->has_reduce || !kt_sched_unroll_ok(a->unroll))
        a->unroll = 0;
}

kt_sched_state_t *kt_sched_refit(const kt_dag_t *src_dag, const kt_sched_state_t *src,
                                 const kt_dag_t *dag, const kt_sched_params_t *p)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    if (!src_dag || !src || !dag) {
        kt_err_set(KT_EINVAL, "re-fit: missing DAG or state");
        return NULL;
    }
    if (src->nstages != kt_dag_num_stages(src_dag)) {
        kt_err_set(KT_EINVAL, "re-fit: the state does not match its workload's DAG");
        return NULL;
    }
    if (src->target != p->target) {
        kt_err_set(KT_EINVAL, "re-fit: a %s state cannot be re-fitted for a %s task",
                   src->target == KT_SCHED_TARGET_CUDA ? "cuda" : "cpu",
                   p->target == KT_SCHED_TARGET_CUDA ? "cuda" : "cpu");
        return NULL;
    }
    if (same_operators(src_dag, dag) != 0)
        return NULL;
    kt_sched_state_t *st = NULL;
    if (match_sketch(dag, p, src, &st) != 0)
        return NULL;
    int n = st->nstages, rc = 0;
    /* Locations first: which loops a nest has depends on what is computed
     * at it. A compute-at that no longer fits goes to the deepest level the
     * consumer offers, or to root. */
    for (int s = 0; s < n; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_sched_stage_t *e0 = &src->stages[s];
        if (e->kind == KT_SK_ROOT && kt_sched_loc_tunable(dag, st, s)) {
            e->kind = e0->kind;
            e->at_stage = e0->at_stage;
            e->at_depth = e0->at_depth;
        }
    }
    for (int s = n - 1; s >= 0; s--) {
        kt_sched_stage_t *e = &st->stages[s];
        if (e->kind != KT_SK_ROOT || e->at_stage < 0)
            continue;
        int maxd = 0;
        int c = kt_sched_at_target(dag, st, s, &maxd);
        if (c != e->at_stage) {
            e->at_stage = -1;
            e->at_depth = 0;
        } else if (e->at_depth > maxd) {
            e->at_depth = (int8_t)maxd;
        }
    }
    for (int s = 0; s < n && !rc; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_sched_stage_t *e0 = &src->stages[s];
        rc = refit_splits(src_dag, src, dag, p, st, s);
        e->ann = e0->ann;
        e->ann2 = e0->ann2;
        if (st->target == KT_SCHED_TARGET_CUDA) {
            e->threads = e0->threads;
            e->vec = e0->vec;
        }
    }
    for (int s = 0; s < n && !rc && st->target == KT_SCHED_TARGET_CPU; s++)
        for (int nest = 0; nest < 2; nest++) {
            kt_sched_stage_t *e = &st->stages[s];
            kt_sched_ann_t *a = nest ? &e->ann2 : &e->ann;
            kt_sched_nest_t nn;
            if (!kt_sched_nest(dag, st, s, nest, &nn)) {
                memset(a, 0, sizeof *a);
                continue;
            }
            clamp_ann(&nn, a);
        }
    if (!rc && kt_sched_state_validate(dag, p, st) != 0) {
        kt_err_prefix("re-fit");
        rc = KT_EINVAL;
    }
    if (rc) {
        kt_sched_state_free(st);
        return NULL;
    }
    return st;
}

/* ---- one elementwise stage more or less at the output ------------------------ */

/* Stage `last` of dag is a trailing elementwise stage whose one producer is
 * the stage before it, itself a compute stage: what one more unary
 * epilogue (relu, clip, ...) adds to a workload. */
static int unary_tail(const kt_dag_t *dag, int last)
{
    int prod[KT_TE_MAX_STAGES];
    if (last < 1 || kt_dag_stage(dag, last)->kind == KT_STAGE_PLACEHOLDER ||
        kt_dag_stage(dag, last - 1)->kind == KT_STAGE_PLACEHOLDER ||
        !kt_dag_is_elementwise(dag, last))
        return 0;
    return kt_dag_producers(dag, last, prod) == 1 && prod[0] == last - 1;
}

/* References to stage `from` (a tiled stage's fused consumer, a FUSED
 * stage's producer, a compute location) made to stage `to`. */
static void move_refs(kt_sched_state_t *st, int from, int to)
{
    for (int s = 0; s < st->nstages; s++) {
        if (st->stages[s].fuse == from)
            st->stages[s].fuse = (int8_t)to;
        if (st->stages[s].at_stage == from)
            st->stages[s].at_stage = (int8_t)to;
    }
}

kt_sched_state_t *kt_sched_retail(const kt_dag_t *src_dag, const kt_sched_state_t *src,
                                  const kt_dag_t *dag, const kt_sched_params_t *p)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    if (!src_dag || !src || !dag || src->nstages != kt_dag_num_stages(src_dag)) {
        kt_err_set(KT_EINVAL, "re-fit: missing DAG or a state that does not match its DAG");
        return NULL;
    }
    int n = src->nstages, m = kt_dag_num_stages(dag);
    int grow = m == n + 1 && unary_tail(dag, m - 1), shrink = n == m + 1 && unary_tail(src_dag, n - 1);
    if (!grow && !shrink) {
        kt_err_set(KT_EINVAL, "re-fit: the task's stages (%d) are not the state's (%d) with one "
                              "trailing elementwise stage more or less", m, n);
        return NULL;
    }
    kt_sched_state_t *st = kt_sched_state_new(dag);
    if (!st)
        return NULL;
    st->target = src->target;
    int keep = grow ? n - 1 : m - 1;   /* stages before the output's, in both */
    memcpy(st->stages, src->stages, (size_t)keep * sizeof st->stages[0]);
    if (grow) {
        /* the old output is inlined into the new one, which takes its schedule */
        st->stages[m - 1] = src->stages[n - 1];
        st->stages[n - 1].kind = KT_SK_INLINE;
        move_refs(st, n - 1, m - 1);
    } else {
        /* the stage before the output was inlined into it: the output's
         * schedule passes to it */
        if (src->stages[n - 2].kind != KT_SK_INLINE) {
            kt_err_set(KT_EINVAL, "re-fit: stage '%s' before the output is %s, not inlined",
                       kt_dag_stage(src_dag, n - 2)->name,
                       kt_sched_kind_name(src->stages[n - 2].kind));
            kt_sched_state_free(st);
            return NULL;
        }
        st->stages[m - 1] = src->stages[n - 1];
        move_refs(st, n - 1, m - 1);
    }
    if (kt_sched_state_validate(dag, p, st) != 0) {
        kt_err_prefix("re-fit to one elementwise stage %s", grow ? "more" : "less");
        kt_sched_state_free(st);
        return NULL;
    }
    return st;
}
