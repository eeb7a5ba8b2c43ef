/* Random annotation of sketches (Ansor's CPU init-population rules) and the
 * mutation rules of the evolutionary search. */
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "util/err.h"

#define NUNROLL ((int)(sizeof(kt_sched_unroll_steps) / sizeof(kt_sched_unroll_steps[0])))

/* ---- split factors ------------------------------------------------------ */

/* Prime factorization by trial division; extents are at most 2^30. */
int kt_sched_factorize(int64_t n, int64_t *primes, int *exps)
{
    int k = 0;
    for (int64_t d = 2; d * d <= n; d += (d == 2 ? 1 : 2)) {
        if (n % d)
            continue;
        int e = 0;
        while (n % d == 0) {
            n /= d;
            e++;
        }
        primes[k] = d;
        exps[k++] = e;
    }
    if (n > 1) {
        primes[k] = n;
        exps[k++] = 1;
    }
    return k;
}

/* A uniformly random composition of e into nlev parts (stars and bars). */
static void random_composition(int e, int nlev, int *parts, kt_rng_t *rng)
{
    int slots = e + nlev - 1;   /* at most 30 + 3 */
    int pos[64];
    for (int i = 0; i < slots; i++)
        pos[i] = i;
    /* Partial Fisher-Yates: the first nlev-1 entries are the bars. */
    for (int i = 0; i < nlev - 1; i++) {
        int j = i + (int)kt_rng_below(rng, (uint64_t)(slots - i));
        int t = pos[i];
        pos[i] = pos[j];
        pos[j] = t;
    }
    int bars[KT_SCHED_MAX_LEVELS];
    for (int i = 0; i < nlev - 1; i++)
        bars[i] = pos[i];
    for (int i = 1; i < nlev - 1; i++)   /* sort the few bars */
        for (int j = i; j > 0 && bars[j - 1] > bars[j]; j--) {
            int t = bars[j];
            bars[j] = bars[j - 1];
            bars[j - 1] = t;
        }
    int prev = -1;
    for (int i = 0; i < nlev - 1; i++) {
        parts[i] = bars[i] - prev - 1;
        prev = bars[i];
    }
    parts[nlev - 1] = slots - prev - 1;
}

/* Factors of `extent` over nlev levels, drawn uniformly from all ordered
 * exact factorizations whose innermost factor is at most max_inner
 * (rejection from the unconstrained uniform draw, which is a product of
 * independent compositions of every prime's exponent). */
void kt_sched_sample_split(int64_t extent, int nlev, int max_inner, kt_rng_t *rng, int32_t *out)
{
    int64_t primes[32];
    int exps[32];
    int k = kt_sched_factorize(extent, primes, exps);
    for (int attempt = 0; attempt < 64; attempt++) {
        int64_t f[KT_SCHED_MAX_LEVELS] = {1, 1, 1, 1, 1};
        for (int i = 0; i < k; i++) {
            int parts[KT_SCHED_MAX_LEVELS];
            random_composition(exps[i], nlev, parts, rng);
            for (int l = 0; l < nlev; l++)
                for (int x = 0; x < parts[l]; x++)
                    f[l] *= primes[i];
        }
        if (f[nlev - 1] <= max_inner || attempt == 63) {
            /* Last resort: push the innermost factor's primes outwards. */
            for (int i = k - 1; i >= 0 && f[nlev - 1] > max_inner; i--)
                while (f[nlev - 1] % primes[i] == 0 && f[nlev - 1] > max_inner) {
                    f[nlev - 1] /= primes[i];
                    f[0] *= primes[i];
                }
            for (int l = 0; l < nlev; l++)
                out[l] = (int32_t)f[l];
            return;
        }
    }
}

/* ---- compute location options ----------------------------------------------- */

typedef struct {
    int kind;    /* KT_SK_ROOT or KT_SK_INLINE */
    int at, depth;
} loc_t;

/* A SIMPLIFY stage reads s: inlined, s's body (Winograd's padded gather)
 * would be printed again in each of the hundreds of unrolled terms, which
 * took GCC minutes to compile. */
static int read_by_simplify(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    int cons[KT_TE_MAX_STAGES];
    int nc = kt_sched_eff_consumers(dag, st, s, cons);
    for (int i = 0; i < nc; i++)
        if (st->stages[cons[i]].kind == KT_SK_SIMPLIFY)
            return 1;
    return 0;
}

static int loc_options(const kt_dag_t *dag, const kt_sched_state_t *st, int s, loc_t *opt)
{
    int n = 0, prod[KT_TE_MAX_STAGES];
    opt[n++] = (loc_t){KT_SK_ROOT, -1, 0};
    /* A constant table (a stage reading no tensor, as Winograd's transform
     * matrices) stays one small array at root: inlined or computed at a
     * consumer, its select chain would be re-evaluated in the consumer's
     * inner loop (TVM folds it by unrolling; ktune's loops are not). */
    if (kt_dag_producers(dag, s, prod) == 0)
        return n;
    if (kt_dag_is_inlinable(dag, s) && !read_by_simplify(dag, st, s))
        opt[n++] = (loc_t){KT_SK_INLINE, -1, 0};
    int maxd = 0;
    int c = kt_sched_at_target(dag, st, s, &maxd);
    for (int d = 1; c >= 0 && d <= maxd; d++)
        opt[n++] = (loc_t){KT_SK_ROOT, c, d};
    return n;
}

static void set_loc(kt_sched_stage_t *e, const loc_t *o)
{
    e->kind = (int8_t)o->kind;
    e->at_stage = (int8_t)o->at;
    e->at_depth = (int8_t)o->depth;
    memset(&e->ann, 0, sizeof(e->ann));
}

static int loc_is(const kt_sched_stage_t *e, const loc_t *o)
{
    return e->kind == o->kind && e->at_stage == o->at && e->at_depth == o->depth;
}

/* ---- loop annotations ------------------------------------------------------- */

static kt_sched_ann_t *nest_ann(kt_sched_stage_t *e, int nest)
{
    return nest ? &e->ann2 : &e->ann;
}

/* Ansor's InitParallel: fuse leading spatial loops until the parallel degree
 * exceeds 16 x cores (or an attach loop is reached). */
static void init_parallel(const kt_sched_params_t *p, const kt_sched_nest_t *n,
                          kt_sched_ann_t *a)
{
    int64_t degree = 1;
    int k = 0;
    while (k < n->max_parallel) {
        degree *= n->loops[k].extent;
        k++;
        if (degree > (int64_t)p->num_cores * 16)
            break;
    }
    a->parallel = (uint8_t)k;
}

/* Ansor's InitVectorization: the innermost spatial loops whose extents
 * multiply to at most max_vectorize_size may be fused; vectorize a random
 * number of them (at least one when any). */
static void init_vectorize(const kt_sched_params_t *p, const kt_sched_nest_t *n,
                           kt_sched_ann_t *a, kt_rng_t *rng)
{
    int limit = n->max_vectorize;
    if (limit > n->nloops - a->parallel)
        limit = n->nloops - a->parallel;
    int64_t prod = 1;
    int k = 0;
    while (k < limit) {
        prod *= n->loops[n->nloops - 1 - k].extent;
        if (prod > p->max_vectorize_size)
            break;
        k++;
    }
    a->vectorize = (uint8_t)(k > 0 ? 1 + kt_rng_below(rng, (uint64_t)k) : 0);
}

static int random_unroll(kt_rng_t *rng)
{
    return kt_sched_unroll_steps[kt_rng_below(rng, NUNROLL)];
}

kt_sched_state_t *kt_sched_sample(const kt_dag_t *dag, const kt_sched_params_t *p,
                                  const kt_sched_state_t *sketch, kt_rng_t *rng)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    if (!dag || !sketch || !rng || sketch->nstages != kt_dag_num_stages(dag)) {
        kt_err_set(KT_EINVAL, "sample: sketch does not match the DAG");
        return NULL;
    }
    if (sketch->target == KT_SCHED_TARGET_CUDA)
        return kt_sched_gpu_sample(dag, p, sketch, rng);
    kt_sched_state_t *st = kt_sched_state_clone(sketch);
    if (!st)
        return NULL;
    int n = st->nstages;

    /* fill tile sizes */
    for (int s = 0; s < n; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_TILED) {
            for (int a = 0; a < ss->ndim; a++)
                kt_sched_sample_split(ss->shape[a], KT_SCHED_SPATIAL_LEVELS,
                                      p->max_innermost_split_factor, rng, e->split[a]);
            for (int r = 0; r < ss->nreduce; r++)
                kt_sched_sample_split(ss->reduce_ext[r], KT_SCHED_REDUCE_LEVELS,
                                      p->max_innermost_split_factor, rng, e->split[ss->ndim + r]);
        } else if (e->kind == KT_SK_RFACTOR) {
            kt_sched_sample_split(kt_sched_reduce_len(ss), 2, p->max_innermost_split_factor, rng,
                                  e->split[0]);
        } else if (e->kind == KT_SK_SIMPLIFY) {
            for (int a = 0; a < ss->ndim; a++)
                if (!((ss->const_axes >> a) & 1u))
                    kt_sched_sample_split(ss->shape[a], 2, p->max_innermost_split_factor, rng,
                                          e->split[a]);
        }
    }

    /* change compute location, from the output backwards so a consumer's
     * location is known before its producers choose one at it */
    for (int s = n - 1; s >= 0; s--) {
        if (!kt_sched_loc_tunable(dag, st, s))
            continue;
        loc_t opt[2 + KT_TE_MAX_DIMS];
        int k = loc_options(dag, st, s, opt);
        set_loc(&st->stages[s], &opt[kt_rng_below(rng, (uint64_t)k)]);
    }

    /* parallel, unroll, vectorize: every loop nest */
    for (int s = 0; s < n; s++)
        for (int nest = 0; nest < 2; nest++) {
            kt_sched_nest_t nn;
            if (!kt_sched_nest(dag, st, s, nest, &nn))
                continue;
            kt_sched_ann_t *a = nest_ann(&st->stages[s], nest);
            memset(a, 0, sizeof(*a));
            init_parallel(p, &nn, a);
            if (nn.has_reduce)
                a->unroll = (int16_t)random_unroll(rng);
            init_vectorize(p, &nn, a, rng);
            /* simplify: the S1 loop around the unrolled block, whose
             * statements all walk the innermost (contiguous) axis with it */
            if (st->stages[s].kind == KT_SK_SIMPLIFY)
                a->vectorize = (uint8_t)nn.max_vectorize;
        }

    if (kt_sched_state_validate(dag, p, st) != 0) {
        kt_err_prefix("sample");
        kt_sched_state_free(st);
        return NULL;
    }
    return st;
}

int kt_sched_move_factor(int32_t *f, int nlev, int max_inner, kt_rng_t *rng)
{
    int src_c[KT_SCHED_MAX_LEVELS], ns = 0;
    for (int l = 0; l < nlev; l++)
        if (f[l] > 1)
            src_c[ns++] = l;
    if (ns == 0 || nlev < 2)
        return 0;
    int src = src_c[kt_rng_below(rng, (uint64_t)ns)];
    int dst = (int)kt_rng_below(rng, (uint64_t)(nlev - 1));
    if (dst >= src)
        dst++;
    int64_t primes[32];
    int exps[32];
    int k = kt_sched_factorize(f[src], primes, exps);
    int64_t q = primes[kt_rng_below(rng, (uint64_t)k)];
    if (dst == nlev - 1 && f[dst] * q > max_inner)
        return 0;
    f[src] = (int32_t)(f[src] / q);
    f[dst] = (int32_t)(f[dst] * q);
    return 1;
}

/* ---- mutation ----------------------------------------------------------------- */

static const double mut_weight[KT_MUT__COUNT] = {0.90, 0.04, 0.05, 0.01, 0, 0, 0};

typedef struct {
    int stage, axis, nlev;
} split_ref_t;

static int mutate_tile(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                       kt_rng_t *rng)
{
    split_ref_t cand[KT_TE_MAX_STAGES * KT_SCHED_MAX_AXES];
    int nc = 0;
    for (int s = 0; s < st->nstages; s++) {
        const kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_TILED) {
            for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
                int64_t ext = a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim];
                if (ext > 1)
                    cand[nc++] = (split_ref_t){s, a,
                                               a < ss->ndim ? KT_SCHED_SPATIAL_LEVELS
                                                            : KT_SCHED_REDUCE_LEVELS};
            }
        } else if (e->kind == KT_SK_RFACTOR && kt_sched_reduce_len(ss) > 1) {
            cand[nc++] = (split_ref_t){s, 0, 2};
        } else if (e->kind == KT_SK_SIMPLIFY) {
            for (int a = 0; a < ss->ndim; a++)
                if (!((ss->const_axes >> a) & 1u) && ss->shape[a] > 1)
                    cand[nc++] = (split_ref_t){s, a, 2};
        }
    }
    if (nc == 0)
        return 0;
    for (int attempt = 0; attempt < 8; attempt++) {
        split_ref_t r = cand[kt_rng_below(rng, (uint64_t)nc)];
        if (kt_sched_move_factor(st->stages[r.stage].split[r.axis], r.nlev,
                                 p->max_innermost_split_factor, rng))
            return 1;
    }
    return 0;
}

/* KT_MUT_TILE_SHAPE: a prime q of axis a's innermost factor goes to level
 * l of a, and a prime r of axis b's level l comes into b's innermost level,
 * r = q where b has q at some outer level (a 7-row x 2-column register tile
 * becomes 1 row x 14 columns, as many accumulators); the tile-size rule
 * moves factors within one axis only, and reaching such a tile by it takes
 * steps through much smaller tiles that the cost model rejects. */
static int mutate_tile_shape(const kt_dag_t *dag, const kt_sched_params_t *p,
                             kt_sched_state_t *st, kt_rng_t *rng)
{
    enum { IN = KT_SCHED_SPATIAL_LEVELS - 1 };
    int cand[KT_TE_MAX_STAGES], nc = 0;
    for (int s = 0; s < st->nstages; s++) {
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        int nax = 0;
        for (int a = 0; st->stages[s].kind == KT_SK_TILED && a < ss->ndim; a++)
            nax += ss->shape[a] > 1;
        if (nax >= 2)
            cand[nc++] = s;
    }
    if (nc == 0)
        return 0;
    int s = cand[kt_rng_below(rng, (uint64_t)nc)];
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    int32_t(*f)[KT_SCHED_MAX_LEVELS] = st->stages[s].split;
    /* every (a, q, b, l, r) the rule can make, the same prime preferred */
    typedef struct {
        int a, b, l;
        int64_t q, r;
    } move_t;
    move_t mv[64], same[64];
    int nm = 0, ns = 0;
    for (int a = 0; a < ss->ndim; a++) {
        int64_t qp[32], rp[32];
        int qe[32], re[32];
        int nq = f[a][IN] > 1 ? kt_sched_factorize(f[a][IN], qp, qe) : 0;
        for (int iq = 0; iq < nq; iq++)
            for (int b = 0; b < ss->ndim; b++)
                for (int l = 0; b != a && l < IN; l++) {
                    int nr = f[b][l] > 1 ? kt_sched_factorize(f[b][l], rp, re) : 0;
                    for (int ir = 0; ir < nr; ir++) {
                        if (f[b][IN] * rp[ir] > p->max_innermost_split_factor)
                            continue;
                        move_t m = {a, b, l, qp[iq], rp[ir]};
                        if (m.q == m.r && ns < 64)
                            same[ns++] = m;
                        else if (nm < 64)
                            mv[nm++] = m;
                    }
                }
    }
    if (ns == 0 && nm == 0)
        return 0;
    move_t m = ns > 0 ? same[kt_rng_below(rng, (uint64_t)ns)] : mv[kt_rng_below(rng, (uint64_t)nm)];
    f[m.a][IN] = (int32_t)(f[m.a][IN] / m.q);
    f[m.a][m.l] = (int32_t)(f[m.a][m.l] * m.q);
    f[m.b][m.l] = (int32_t)(f[m.b][m.l] / m.r);
    f[m.b][IN] = (int32_t)(f[m.b][IN] * m.r);
    return 1;
}

/* KT_MUT_REDUCE_IN: a tiled stage's outer reduce loops (R0) iterate over
 * the whole register-tile block, which is then stored to and loaded from a
 * local block between their steps; with every R0 factor moved inwards the
 * tile starts from zero and its store is the consumer's (direct tile). The
 * tile-size rule moves one factor of one axis at a time, and searches ended
 * on R0 > 1 states whose direct form they never measured. */
static int mutate_reduce_in(const kt_dag_t *dag, const kt_sched_params_t *p,
                            kt_sched_state_t *st)
{
    int changed = 0;
    for (int s = 0; s < st->nstages; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind != KT_SK_TILED || kt_sched_reduce_ends_in_tile(ss, e))
            continue;
        int fits = 1;
        for (int r = 0; r < ss->nreduce; r++) {
            const int32_t *f = e->split[ss->ndim + r];
            fits &= (int64_t)f[0] * f[1] <= kt_sched_direct_reduce_cap(p);
        }
        if (!fits)
            continue;
        for (int r = 0; r < ss->nreduce; r++) {
            int32_t *f = e->split[ss->ndim + r];
            f[1] *= f[0];
            f[0] = 1;
        }
        changed = 1;
    }
    return changed;
}

/* The padding stage stage s reads, -1 if none. */
static int pad_producer(const kt_dag_t *dag, int s)
{
    int prod[KT_TE_MAX_STAGES];
    int np = kt_dag_producers(dag, s, prod);
    for (int i = 0; i < np; i++) {
        const char *tag = kt_dag_stage(dag, prod[i])->tag;
        if (tag && strcmp(tag, "pad") == 0)
            return prod[i];
    }
    return -1;
}

/* Stage q inlined in st, where it may be: 1 when it is (now). */
static int inline_stage(const kt_dag_t *dag, kt_sched_state_t *st, int q)
{
    if (st->stages[q].kind == KT_SK_INLINE)
        return 1;
    loc_t opt[2 + KT_TE_MAX_DIMS];
    int k = kt_sched_loc_tunable(dag, st, q) ? loc_options(dag, st, q, opt) : 0;
    for (int i = 0; i < k; i++)
        if (opt[i].kind == KT_SK_INLINE) {
            set_loc(&st->stages[q], &opt[i]);
            return 1;
        }
    return 0;
}

/* KT_MUT_ROWS_OUT, a row sweep: the padding inlined, every outer factor of
 * the output rows in the outermost level and every outer factor of the
 * columns in the last level outside the register tile, the tile unchanged.
 * An inlined padding's border is cut from the interior at the loops
 * outside the tile, so a parallel chunk of one tile's rows keeps the border
 * code's share smallest; a sweep along a row keeps the weights of the
 * channel blocks outside it in the first-level cache (the searches' best
 * stem states, columns split over outer levels, ran 2-3.5% slower than
 * their row sweeps). The tile-size rule moves one prime at a time, and the
 * steps in between ran slower. */
static int mutate_rows_out(const kt_dag_t *dag, kt_sched_state_t *st)
{
    enum { IN = KT_SCHED_SPATIAL_LEVELS - 1 };
    int changed = 0;
    for (int s = 0; s < st->nstages; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        int q = pad_producer(dag, s);
        if (e->kind != KT_SK_TILED || q < 0)
            continue;
        int was = st->stages[q].kind;
        if (!inline_stage(dag, st, q))
            continue;
        changed |= st->stages[q].kind != was;
        int a = 0;
        while (a < ss->ndim && ss->shape[a] == 1)
            a++;
        int b = a + 1;
        while (b < ss->ndim && ss->shape[b] == 1)
            b++;
        for (int l = 1; a < ss->ndim && l < IN; l++) {
            int32_t *f = e->split[a];
            changed |= f[l] > 1;
            f[0] *= f[l];
            f[l] = 1;
        }
        for (int l = 0; b < ss->ndim && l < IN - 1; l++) {
            int32_t *f = e->split[b];
            changed |= f[l] > 1;
            f[IN - 1] *= f[l];
            f[l] = 1;
        }
    }
    return changed;
}

typedef struct {
    int stage, nest;
} nest_ref_t;

static int mutate_unroll(const kt_dag_t *dag, kt_sched_state_t *st, kt_rng_t *rng)
{
    nest_ref_t cand[KT_TE_MAX_STAGES * 2];
    int nc = 0;
    for (int s = 0; s < st->nstages; s++)
        for (int nest = 0; nest < 2; nest++) {
            kt_sched_nest_t nn;
            if (kt_sched_nest(dag, st, s, nest, &nn) && nn.has_reduce)
                cand[nc++] = (nest_ref_t){s, nest};
        }
    if (nc == 0)
        return 0;
    nest_ref_t r = cand[kt_rng_below(rng, (uint64_t)nc)];
    kt_sched_ann_t *a = nest_ann(&st->stages[r.stage], r.nest);
    int vals[NUNROLL], nv = 0;
    for (int i = 0; i < NUNROLL; i++)
        if (kt_sched_unroll_steps[i] != a->unroll)
            vals[nv++] = kt_sched_unroll_steps[i];
    a->unroll = (int16_t)vals[kt_rng_below(rng, (uint64_t)nv)];
    return 1;
}

static int mutate_parallel(const kt_dag_t *dag, kt_sched_state_t *st, kt_rng_t *rng)
{
    nest_ref_t cand[KT_TE_MAX_STAGES * 2];
    int nc = 0;
    for (int s = 0; s < st->nstages; s++)
        for (int nest = 0; nest < 2; nest++) {
            kt_sched_nest_t nn;
            if (!kt_sched_nest(dag, st, s, nest, &nn))
                continue;
            const kt_sched_ann_t *a = nest_ann(&st->stages[s], nest);
            int maxp = nn.max_parallel;
            if (maxp > nn.nloops - a->vectorize)
                maxp = nn.nloops - a->vectorize;
            if (maxp >= 2 || (maxp == 1 && a->parallel != 1))
                cand[nc++] = (nest_ref_t){s, nest};
        }
    if (nc == 0)
        return 0;
    nest_ref_t r = cand[kt_rng_below(rng, (uint64_t)nc)];
    kt_sched_nest_t nn;
    kt_sched_nest(dag, st, r.stage, r.nest, &nn);
    kt_sched_ann_t *a = nest_ann(&st->stages[r.stage], r.nest);
    int maxp = nn.max_parallel;
    if (maxp > nn.nloops - a->vectorize)
        maxp = nn.nloops - a->vectorize;
    int vals[KT_SCHED_MAX_LOOPS], nv = 0;
    for (int v = 1; v <= maxp; v++)
        if (v != a->parallel)
            vals[nv++] = v;
    int v = vals[kt_rng_below(rng, (uint64_t)nv)];
    a->parallel = (uint8_t)v;
    return 1;
}

/* Stage s placed at o, its nest annotated afresh by the init rules. */
static void move_stage(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                       int s, const loc_t *o, kt_rng_t *rng)
{
    kt_sched_stage_t *e = &st->stages[s];
    set_loc(e, o);
    kt_sched_nest_t nn;
    if (kt_sched_nest(dag, st, s, 0, &nn)) {
        init_parallel(p, &nn, &e->ann);
        if (nn.has_reduce)
            e->ann.unroll = (int16_t)random_unroll(rng);
        init_vectorize(p, &nn, &e->ann, rng);
    }
}

/* Stage s's placements other than its own into other; their count (none
 * where the stage has one option). */
static int other_locs(const kt_dag_t *dag, const kt_sched_state_t *st, int s, loc_t *other)
{
    if (!kt_sched_loc_tunable(dag, st, s))
        return 0;
    loc_t opt[2 + KT_TE_MAX_DIMS];
    int k = loc_options(dag, st, s, opt), no = 0;
    if (k < 2)
        return 0;
    for (int i = 0; i < k; i++)
        if (!loc_is(&st->stages[s], &opt[i]))
            other[no++] = opt[i];
    return no;
}

static int mutate_location(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                           kt_rng_t *rng)
{
    int cand[KT_TE_MAX_STAGES], nc = 0;
    loc_t other[2 + KT_TE_MAX_DIMS];
    for (int s = 0; s < st->nstages; s++)
        if (other_locs(dag, st, s, other) > 0)
            cand[nc++] = s;
    if (nc == 0)
        return 0;
    int s = cand[kt_rng_below(rng, (uint64_t)nc)];
    int no = other_locs(dag, st, s, other);
    move_stage(dag, p, st, s, &other[kt_rng_below(rng, (uint64_t)no)], rng);
    return 1;
}

int kt_sched_relocations(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    if (!dag || !st || st->nstages != kt_dag_num_stages(dag) ||
        st->target == KT_SCHED_TARGET_CUDA)
        return 0;
    loc_t other[2 + KT_TE_MAX_DIMS];
    int n = 0;
    for (int s = 0; s < st->nstages; s++)
        n += other_locs(dag, st, s, other);
    return n;
}

int kt_sched_relocate(const kt_dag_t *dag, const kt_sched_params_t *p, const kt_sched_state_t *st,
                      int k, kt_rng_t *rng, kt_sched_state_t **out)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    *out = NULL;
    int n = kt_sched_relocations(dag, st);
    if (!rng || k < 0 || k >= n)
        return kt_err_set(KT_EINVAL, "relocate: no placement %d of %d", k, n);
    loc_t other[2 + KT_TE_MAX_DIMS];
    int s = 0, no;
    while ((no = other_locs(dag, st, s, other)) <= k) {
        k -= no;
        s++;
    }
    kt_sched_state_t *m = kt_sched_state_clone(st);
    if (!m)
        return KT_ENOMEM;
    move_stage(dag, p, m, s, &other[k], rng);
    if (kt_sched_state_validate(dag, p, m) != 0) {
        kt_err_clear();
        kt_sched_state_free(m);
        return 0;
    }
    *out = m;
    return 1;
}

int kt_sched_mutate(const kt_dag_t *dag, const kt_sched_params_t *p, const kt_sched_state_t *st,
                    int rule, kt_rng_t *rng, kt_sched_state_t **out)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    *out = NULL;
    if (!dag || !st || !rng || st->nstages != kt_dag_num_stages(dag))
        return kt_err_set(KT_EINVAL, "mutate: state does not match the DAG");
    if (rule >= KT_MUT__COUNT)
        return kt_err_set(KT_EINVAL, "mutate: no rule %d", rule);
    if (st->target == KT_SCHED_TARGET_CUDA)
        return kt_sched_gpu_mutate(dag, p, st, rule, rng, out);
    if (rule < 0) {
        double x = kt_rng_double(rng), acc = 0;
        rule = KT_MUT_PARALLEL;   /* where rounding leaves x above the sum */
        for (int i = 0; i < KT_MUT__COUNT; i++) {
            acc += mut_weight[i];
            if (x < acc) {
                rule = i;
                break;
            }
        }
    }
    kt_sched_state_t *m = kt_sched_state_clone(st);
    if (!m)
        return KT_ENOMEM;
    int changed = 0;
    switch (rule) {
    case KT_MUT_TILE_SIZE:
        changed = mutate_tile(dag, p, m, rng);
        break;
    case KT_MUT_AUTO_UNROLL:
        changed = mutate_unroll(dag, m, rng);
        break;
    case KT_MUT_COMPUTE_LOC:
        changed = mutate_location(dag, p, m, rng);
        break;
    case KT_MUT_TILE_SHAPE:
        changed = mutate_tile_shape(dag, p, m, rng);
        break;
    case KT_MUT_REDUCE_IN:
        changed = mutate_reduce_in(dag, p, m);
        break;
    case KT_MUT_ROWS_OUT:
        changed = mutate_rows_out(dag, m);
        break;
    default:
        changed = mutate_parallel(dag, m, rng);
        break;
    }
    /* A mutation that breaks another decision (a consumer's parallel loops
     * now covering an attach point, ...) is discarded, as in Ansor. */
    if (!changed || kt_sched_state_validate(dag, p, m) != 0) {
        kt_err_clear();
        kt_sched_state_free(m);
        return 0;
    }
    *out = m;
    return 1;
}
