/* GPU states: shared-memory access analysis, kernel shapes, validity against
 * the hardware limits, random annotation (Ansor's GPU init-population rules:
 * fill tile sizes, thread bind, unroll) and the GPU mutation rules. */
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "util/err.h"
#include "util/util.h"

#define NGPU_UNROLL ((int)KT_ARRAY_LEN(kt_sched_gpu_unroll_steps))
#define COEF_MAX ((int64_t)1 << 31)

static int gpu_unroll_ok(int v)
{
    for (int i = 0; i < NGPU_UNROLL; i++)
        if (kt_sched_gpu_unroll_steps[i] == v)
            return 1;
    return 0;
}

/* ---- access analysis -------------------------------------------------------- */

/* e as sum_a coef[a] * axis a + *cst, or 0 when it is not linear. */
static int linear(const kt_expr_t *e, int naxes, int64_t *coef, int64_t *cst, int depth)
{
    if (!e || depth > 64 || e->dtype != KT_DT_INT)
        return 0;
    for (int a = 0; a < naxes; a++)
        coef[a] = 0;
    *cst = 0;
    int64_t ca[KT_SCHED_MAX_AXES], cb[KT_SCHED_MAX_AXES], ka, kb;
    switch (e->kind) {
    case KT_EX_CONST:
        if (e->ival <= -COEF_MAX || e->ival >= COEF_MAX)
            return 0;
        *cst = e->ival;
        return 1;
    case KT_EX_AXIS:
        if (e->axis < 0 || e->axis >= naxes)
            return 0;
        coef[e->axis] = 1;
        return 1;
    case KT_EX_ADD:
    case KT_EX_SUB: {
        if (!linear(e->args[0], naxes, ca, &ka, depth + 1) ||
            !linear(e->args[1], naxes, cb, &kb, depth + 1))
            return 0;
        int64_t sg = e->kind == KT_EX_SUB ? -1 : 1;
        for (int a = 0; a < naxes; a++) {
            coef[a] = ca[a] + sg * cb[a];
            if (coef[a] <= -COEF_MAX || coef[a] >= COEF_MAX)
                return 0;
        }
        *cst = ka + sg * kb;
        return *cst > -COEF_MAX && *cst < COEF_MAX;
    }
    case KT_EX_MUL: {
        if (!linear(e->args[0], naxes, ca, &ka, depth + 1) ||
            !linear(e->args[1], naxes, cb, &kb, depth + 1))
            return 0;
        int a_const = 1, b_const = 1;
        for (int a = 0; a < naxes; a++) {
            a_const &= ca[a] == 0;
            b_const &= cb[a] == 0;
        }
        if (!a_const && !b_const)
            return 0;
        const int64_t *lin = a_const ? cb : ca;
        int64_t k = a_const ? ka : kb, base = a_const ? kb : ka;
        if (k <= -COEF_MAX || k >= COEF_MAX)
            return 0;
        for (int a = 0; a < naxes; a++) {
            coef[a] = lin[a] * k;
            if (coef[a] <= -COEF_MAX || coef[a] >= COEF_MAX)
                return 0;
        }
        *cst = base * k;
        return *cst > -COEF_MAX && *cst < COEF_MAX;
    }
    default:
        return 0;
    }
}

/* Reads of p in e: direct loads counted, and a read through an inlined
 * stage counts as many as the caller can never accept. */
static int count_reads(const kt_dag_t *dag, uint64_t mask, const kt_expr_t *e, int p,
                       const kt_expr_t **ld, int depth)
{
    if (!e || depth > 200)
        return 100;
    int n = 0;
    if (e->kind == KT_EX_LOAD) {
        if (e->tensor == p) {
            n++;
            *ld = e;
        } else if (e->tensor < 64 && ((mask >> e->tensor) & 1u)) {
            const kt_expr_t *dummy = NULL;
            if (count_reads(dag, mask, kt_dag_stage(dag, e->tensor)->body, p, &dummy, depth + 1))
                n += 100;
        }
    }
    for (int i = 0; i < e->nargs; i++)
        n += count_reads(dag, mask, e->args[i], p, ld, depth + 1);
    return n;
}

int kt_sched_gpu_access(const kt_dag_t *dag, uint64_t inline_mask, int s, int p,
                        kt_sched_access_t *acc)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s), *ps = kt_dag_stage(dag, p);
    if (!ss || !ps || !ss->body || p == s)
        return 0;
    const kt_expr_t *ld = NULL;
    if (count_reads(dag, inline_mask, ss->body, p, &ld, 0) != 1 || !ld || ld->nargs != ps->ndim)
        return 0;
    int naxes = ss->ndim + ss->nreduce;
    memset(acc, 0, sizeof(*acc));
    acc->ndim = ps->ndim;
    for (int d = 0; d < ps->ndim; d++) {
        int64_t cst;
        if (!linear(ld->args[d], naxes, acc->coef[d], &cst, 0) || cst != 0)
            return 0;
        /* The index within the box sums the inner levels of the axes it
         * uses (4 per spatial, 2 per reduce axis): at most 8 terms. */
        int terms = 0;
        for (int a = 0; a < naxes; a++) {
            if (acc->coef[d][a] < 0)
                return 0;
            if (acc->coef[d][a] > 0)
                terms += a < ss->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS - 1
                                      : KT_SCHED_GPU_REDUCE_LEVELS - 1;
        }
        if (terms > 8)
            return 0;
    }
    return 1;
}

static int64_t below_outer(const kt_sched_stage_t *e, const kt_stage_t *s, int a)
{
    int nlev = a < s->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_GPU_REDUCE_LEVELS;
    int64_t t = 1;
    for (int l = 1; l < nlev; l++)
        t *= e->split[a][l];
    return t;
}

int64_t kt_sched_gpu_box(const kt_sched_stage_t *e, const kt_stage_t *s,
                         const kt_sched_access_t *acc, int64_t *box)
{
    int64_t n = 1;
    for (int d = 0; d < acc->ndim; d++) {
        int64_t b = 1;
        for (int a = 0; a < s->ndim + s->nreduce; a++)
            b += acc->coef[d][a] * (below_outer(e, s, a) - 1);
        box[d] = b;
        n = n > ((int64_t)1 << 40) / b ? (int64_t)1 << 40 : n * b;
    }
    return n;
}

uint32_t kt_sched_gpu_stageable(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    int prod[KT_TE_MAX_STAGES];
    int np = kt_dag_producers(dag, s, prod);
    uint64_t mask = kt_sched_inline_mask(st);
    uint32_t out = 0;
    for (int i = 0; i < np; i++) {
        int p = prod[i], cons[KT_TE_MAX_STAGES];
        kt_sched_access_t acc;
        /* TVM caches a producer only for its single consumer. */
        if (kt_sched_eff_consumers(dag, st, p, cons) != 1 || cons[0] != s)
            continue;
        if (kt_sched_gpu_access(dag, mask, s, p, &acc))
            out |= 1u << p;
    }
    return out;
}

/* ---- kernels ------------------------------------------------------------------ */

static int64_t round16(int64_t bytes) { return (bytes + 15) & ~(int64_t)15; }

static void tiled_kernel(const kt_dag_t *dag, const kt_sched_state_t *st, int s,
                         kt_sched_gpu_kernel_t *k)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    const kt_sched_stage_t *e = &st->stages[s];
    k->grid = k->threads = k->vthreads = k->local_elems = 1;
    k->smem_bytes = 0;
    for (int a = 0; a < ss->ndim; a++) {
        k->grid *= e->split[a][0];
        k->vthreads *= e->split[a][1];
        k->threads *= e->split[a][2];
        k->local_elems *= (int64_t)e->split[a][1] * e->split[a][3] * e->split[a][4];
    }
    uint64_t mask = kt_sched_inline_mask(st);
    for (int p = 0; p < st->nstages && p < 32; p++) {
        kt_sched_access_t acc;
        int64_t box[KT_TE_MAX_DIMS];
        if (!((e->smem >> p) & 1u) || !kt_sched_gpu_access(dag, mask, s, p, &acc))
            continue;
        int64_t n = kt_sched_gpu_box(e, ss, &acc, box);
        k->smem_bytes += round16(n * (int64_t)sizeof(float));
        if (k->smem_bytes > ((int64_t)1 << 40))
            k->smem_bytes = (int64_t)1 << 40;
    }
}

int kt_sched_gpu_kernels(const kt_dag_t *dag, const kt_sched_state_t *st,
                         kt_sched_gpu_kernel_t *out)
{
    if (!dag || !st || st->target != KT_SCHED_TARGET_CUDA ||
        st->nstages != kt_dag_num_stages(dag))
        return kt_err_set(KT_EINVAL, "GPU kernels: not a GPU state of this DAG");
    int n = 0;
    for (int s = 0; s < st->nstages; s++) {
        const kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        kt_sched_gpu_kernel_t *k = &out[n];
        memset(k, 0, sizeof(*k));
        k->stage = s;
        k->kind = e->kind;
        k->vthreads = 1;
        int64_t threads = e->threads > 0 ? e->threads : 1;
        switch (e->kind) {
        case KT_SK_TILED:
            tiled_kernel(dag, st, s, k);
            break;
        case KT_SK_XREDUCE:
            k->grid = kt_stage_numel(ss);
            k->threads = threads;
            k->smem_bytes = threads > KT_SCHED_GPU_WARP
                                ? round16(threads / KT_SCHED_GPU_WARP * (int64_t)sizeof(float))
                                : 0;
            k->local_elems = 1;
            break;
        case KT_SK_ROOT:
            k->threads = threads;
            k->grid = (kt_stage_numel(ss) + threads - 1) / threads;
            k->local_elems = ss->nreduce > 0;
            break;
        default:
            continue;
        }
        n++;
    }
    return n;
}

/* ---- validity -------------------------------------------------------------------- */

static int bad(int s, const kt_stage_t *ss, const char *what)
{
    return kt_err_set(KT_EINVAL, "invalid GPU state: stage %d '%s': %s", s, ss ? ss->name : "?",
                      what);
}

static int check_split(const kt_stage_t *ss, int s, const int32_t *f, int nlev, int64_t extent,
                       int max_inner)
{
    int64_t prod = 1;
    for (int l = 0; l < nlev; l++) {
        if (f[l] < 1)
            return bad(s, ss, "split factor below 1");
        prod *= f[l];
        if (prod > extent)
            break;
    }
    if (prod != extent)
        return kt_err_set(KT_EINVAL,
                          "invalid GPU state: stage %d '%s': split factors do not multiply to "
                          "the extent %lld",
                          s, ss->name, (long long)extent);
    if (f[nlev - 1] > max_inner)
        return kt_err_set(KT_EINVAL,
                          "invalid GPU state: stage %d '%s': innermost split factor %d exceeds %d",
                          s, ss->name, f[nlev - 1], max_inner);
    for (int l = nlev; l < KT_SCHED_MAX_LEVELS; l++)
        if (f[l] != 0)
            return bad(s, ss, "split factor beyond the axis' levels");
    return 0;
}

static int check_fuse(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    const kt_sched_stage_t *e = &st->stages[s];
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    int n = st->nstages;
    if (e->fuse == -1)
        return 0;
    if (e->fuse <= s || e->fuse >= n || st->stages[e->fuse].kind != KT_SK_FUSED ||
        st->stages[e->fuse].fuse != s)
        return bad(s, ss, "fused consumer is not marked fused to this stage");
    if (!kt_sched_elementwise_matched(dag, st, s, e->fuse))
        return bad(s, ss, "consumer is not a single elementwise-matched consumer");
    return 0;
}

/* Each kernel within the hardware limits of p. */
static int check_limits(const kt_dag_t *dag, const kt_sched_params_t *p,
                        const kt_sched_state_t *st)
{
    kt_sched_gpu_kernel_t k[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, k);
    if (nk < 0)
        return nk;
    for (int i = 0; i < nk; i++) {
        const kt_stage_t *ss = kt_dag_stage(dag, k[i].stage);
        const char *what = NULL;
        long long v = 0, lim = 0;
        if (k[i].threads > p->max_threads_per_block) {
            what = "threads per block";
            v = k[i].threads;
            lim = p->max_threads_per_block;
        } else if (k[i].vthreads > p->max_vthread_extent) {
            what = "vthread extent";
            v = k[i].vthreads;
            lim = p->max_vthread_extent;
        } else if (k[i].smem_bytes > p->max_shared_memory_per_block) {
            what = "shared memory bytes per block";
            v = k[i].smem_bytes;
            lim = p->max_shared_memory_per_block;
        } else if (k[i].local_elems > KT_SCHED_GPU_MAX_LOCAL) {
            what = "register tile floats per thread";
            v = k[i].local_elems;
            lim = KT_SCHED_GPU_MAX_LOCAL;
        } else if (k[i].grid > INT32_MAX || k[i].grid < 1) {
            what = "blocks";
            v = k[i].grid;
            lim = INT32_MAX;
        }
        if (what)
            return kt_err_set(KT_EINVAL, "invalid GPU state: stage %d '%s': %s %lld exceed %lld",
                              k[i].stage, ss->name, what, v, lim);
    }
    return 0;
}

static int zero_split(const kt_sched_stage_t *e)
{
    for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
        for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
            if (e->split[a][l] != 0)
                return 0;
    return 1;
}

int kt_sched_gpu_validate(const kt_dag_t *dag, const kt_sched_params_t *p,
                          const kt_sched_state_t *st)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default_gpu(&defp);
        p = &defp;
    }
    if (!dag || !st || st->target != KT_SCHED_TARGET_CUDA)
        return kt_err_set(KT_EINVAL, "invalid GPU state: missing DAG or not a GPU state");
    int n = kt_dag_num_stages(dag);
    if (st->nstages != n || n > 32)
        return kt_err_set(KT_EINVAL, "invalid GPU state: %d stages, the DAG has %d", st->nstages,
                          n);
    for (int s = 0; s < n; s++) {
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        const kt_sched_stage_t *e = &st->stages[s];
        int nd = ss->ndim, nr = ss->nreduce;
        if (ss->kind == KT_STAGE_PLACEHOLDER) {
            if (e->kind != KT_SK_INPUT)
                return bad(s, ss, "a placeholder must have kind input");
        } else if (e->kind != KT_SK_ROOT && e->kind != KT_SK_INLINE && e->kind != KT_SK_TILED &&
                   e->kind != KT_SK_FUSED && e->kind != KT_SK_XREDUCE) {
            return bad(s, ss, "bad kind for a compute stage of a GPU state");
        }
        if (kt_dag_is_inlinable(dag, s) && e->kind != KT_SK_INLINE)
            return bad(s, ss, "an inlinable stage must be inlined on GPU");
        if (e->kind != KT_SK_TILED && e->kind != KT_SK_FUSED && e->kind != KT_SK_XREDUCE &&
            e->fuse != -1)
            return bad(s, ss, "fuse set on a stage that is not tiled, fused or xreduce");
        if (e->kind != KT_SK_TILED && (e->cache_write || e->level || e->smem || e->vec))
            return bad(s, ss, "cache_write/level/smem/vec set on a stage that is not tiled");
        if (e->rf_inner || e->at_stage != -1 || e->at_depth != 0 || e->ann.parallel ||
            e->ann.vectorize || e->ann2.parallel || e->ann2.vectorize || e->ann2.unroll)
            return bad(s, ss, "CPU annotations on a GPU state");
        if (e->kind != KT_SK_ROOT && e->kind != KT_SK_XREDUCE && e->threads != 0)
            return bad(s, ss, "threads set on a stage that is not root or xreduce");
        if (e->kind != KT_SK_TILED && !zero_split(e))
            return bad(s, ss, "split factors on a stage that is not tiled");
        if (e->ann.unroll < 0 || !gpu_unroll_ok(e->ann.unroll))
            return bad(s, ss, "auto_unroll_max_step not one of 0, 16, 64, 512, 1024");
        int has_reduce = nr > 0 && (e->kind == KT_SK_TILED || e->kind == KT_SK_XREDUCE ||
                                    e->kind == KT_SK_ROOT);
        if (e->ann.unroll && !has_reduce)
            return bad(s, ss, "auto-unroll on a kernel without reduction loops");
        int rc = 0;
        switch (e->kind) {
        case KT_SK_INLINE:
            if (!kt_dag_is_inlinable(dag, s))
                return bad(s, ss, "stage cannot be inlined");
            break;
        case KT_SK_ROOT:
            if (e->threads < 1)
                return bad(s, ss, "a plain kernel needs at least one thread per block");
            break;
        case KT_SK_XREDUCE:
            if (nr == 0)
                return bad(s, ss, "cross-thread reduction needs a reduction");
            if (e->threads < KT_SCHED_GPU_WARP || e->threads % KT_SCHED_GPU_WARP != 0)
                return bad(s, ss, "cross-thread reduction threads must be a multiple of 32");
            if (p->warp_size != KT_SCHED_GPU_WARP)
                return bad(s, ss, "cross-thread reduction needs a warp of 32 threads");
            rc = check_fuse(dag, st, s);
            break;
        case KT_SK_TILED:
            if (!kt_dag_has_data_reuse(dag, s))
                return bad(s, ss, "multi-level tiling needs a reduction with data reuse");
            for (int a = 0; a < nd + nr && !rc; a++)
                rc = check_split(ss, s, e->split[a],
                                 a < nd ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_GPU_REDUCE_LEVELS,
                                 a < nd ? ss->shape[a] : ss->reduce_ext[a - nd],
                                 p->max_innermost_split_factor);
            if (rc)
                return rc;
            for (int a = nd + nr; a < KT_SCHED_MAX_AXES; a++)
                for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                    if (e->split[a][l] != 0)
                        return bad(s, ss, "split factors for an axis that does not exist");
            if (e->level != 3)
                return bad(s, ss, "a GPU tiled stage is computed at level 3");
            if (e->cache_write != 0 && e->cache_write != 1)
                return bad(s, ss, "cache_write must be 0 or 1");
            if ((e->fuse >= 0) == (e->cache_write != 0))
                return bad(s, ss, "needs exactly one of a fused consumer and a cache-write stage");
            if ((e->smem & ~kt_sched_gpu_stageable(dag, st, s)) != 0)
                return bad(s, ss, "smem names a producer that cannot be staged in shared memory");
            if (e->smem ? (e->vec != 1 && e->vec != 2 && e->vec != 4) : e->vec != 0)
                return bad(s, ss, "vec must be 1, 2 or 4 with shared-memory stages, else 0");
            rc = check_fuse(dag, st, s);
            break;
        case KT_SK_FUSED: {
            int f = e->fuse;
            if (f < 0 || f >= n ||
                (st->stages[f].kind != KT_SK_TILED && st->stages[f].kind != KT_SK_XREDUCE) ||
                st->stages[f].fuse != s)
                return bad(s, ss, "fused stage without its tiled or xreduce producer");
            if (e->ann.unroll)
                return bad(s, ss, "a fused stage has no annotation");
            break;
        }
        default:
            break;
        }
        if (rc)
            return rc;
    }
    return check_limits(dag, p, st);
}

/* ---- sampling ---------------------------------------------------------------------- */

/* Thread counts a plain (ROOT) or cross-thread-reduction kernel samples:
 * powers of two from a warp up to the limit, no more than about twice the
 * work there is (a smaller block than a warp only when the limit is). */
static int thread_options(const kt_sched_params_t *p, int kind, int64_t work, int *opt)
{
    int n = 0, w = KT_SCHED_GPU_WARP;
    for (int64_t t = w; t <= p->max_threads_per_block && n < 16; t *= 2)
        if (t == w || t / 2 < work)
            opt[n++] = (int)t;
    if (n == 0 && kind == KT_SK_ROOT && p->max_threads_per_block >= 1)
        opt[n++] = p->max_threads_per_block;
    return n;
}

static int64_t stage_work(const kt_stage_t *ss, int kind)
{
    return kind == KT_SK_XREDUCE ? kt_sched_reduce_len(ss) : kt_stage_numel(ss);
}

static int random_gpu_unroll(kt_rng_t *rng)
{
    return kt_sched_gpu_unroll_steps[kt_rng_below(rng, NGPU_UNROLL)];
}

/* Move one prime factor of split row f from level `from` to level `to`. */
static int move_factor(int32_t *f, int from, int to)
{
    if (f[from] <= 1)
        return 0;
    int64_t primes[32];
    int exps[32];
    int k = kt_sched_factorize(f[from], primes, exps);
    if (k == 0)
        return 0;
    f[from] = (int32_t)(f[from] / primes[0]);
    f[to] = (int32_t)(f[to] * primes[0]);
    return 1;
}

/* Shrink the first exceeded limit of tiled stage s by moving one factor
 * outwards (to S0 or R0, which cost no threads, registers or shared
 * memory). Returns 0 when every limit holds. */
static int repair_step(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                       int s)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    kt_sched_stage_t *e = &st->stages[s];
    kt_sched_gpu_kernel_t k;
    tiled_kernel(dag, st, s, &k);
    static const int thr[] = {2}, vth[] = {1}, loc[] = {4, 3}, sm_s[] = {4, 3, 2, 1};
    const int *levels = NULL;
    int nlev = 0;
    if (k.threads > p->max_threads_per_block) {
        levels = thr;
        nlev = 1;
    } else if (k.vthreads > p->max_vthread_extent) {
        levels = vth;
        nlev = 1;
    } else if (k.local_elems > KT_SCHED_GPU_MAX_LOCAL) {
        levels = loc;
        nlev = 2;
    } else if (k.smem_bytes > p->max_shared_memory_per_block) {
        /* reduce levels first (they only grow the boxes), then spatial */
        for (int r = 0; r < ss->nreduce; r++)
            for (int l = 2; l >= 1; l--)
                if (move_factor(e->split[ss->ndim + r], l, 0))
                    return 1;
        levels = sm_s;
        nlev = 4;
    } else {
        return 0;
    }
    for (int i = 0; i < nlev; i++)
        for (int a = 0; a < ss->ndim; a++)
            if (move_factor(e->split[a], levels[i], 0))
                return 1;
    return -1;   /* nothing left to move: cannot be made valid */
}

static int tiled_within(const kt_dag_t *dag, const kt_sched_params_t *p,
                        const kt_sched_state_t *st, int s, int64_t *threads)
{
    kt_sched_gpu_kernel_t k;
    tiled_kernel(dag, st, s, &k);
    *threads = k.threads;
    return k.threads <= p->max_threads_per_block && k.vthreads <= p->max_vthread_extent &&
           k.local_elems <= KT_SCHED_GPU_MAX_LOCAL &&
           k.smem_bytes <= p->max_shared_memory_per_block;
}

/* Fill tile sizes of tiled stage s: uniform exact factorizations, redrawn
 * until within the limits (thread counts that are not a warp multiple are
 * kept only one time in four while attempts remain), else the last draw
 * repaired. */
static int sample_tiled(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                        int s, kt_rng_t *rng)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    kt_sched_stage_t *e = &st->stages[s];
    for (int attempt = 0; attempt < 64; attempt++) {
        for (int a = 0; a < ss->ndim; a++)
            kt_sched_sample_split(ss->shape[a], KT_SCHED_GPU_SPATIAL_LEVELS,
                                  p->max_innermost_split_factor, rng, e->split[a]);
        for (int r = 0; r < ss->nreduce; r++)
            kt_sched_sample_split(ss->reduce_ext[r], KT_SCHED_GPU_REDUCE_LEVELS,
                                  p->max_innermost_split_factor, rng, e->split[ss->ndim + r]);
        int64_t threads;
        if (!tiled_within(dag, p, st, s, &threads))
            continue;
        int warp = p->warp_size > 0 ? p->warp_size : 1;
        if (threads % warp == 0 || attempt >= 48 || kt_rng_below(rng, 4) == 0)
            return 0;
    }
    for (int guard = 0; guard < 4096; guard++) {
        int r = repair_step(dag, p, st, s);
        if (r == 0)
            return 0;
        if (r < 0)
            break;
    }
    return kt_err_set(KT_EINVAL, "sample: stage '%s' cannot be tiled within the GPU limits",
                      ss->name);
}

kt_sched_state_t *kt_sched_gpu_sample(const kt_dag_t *dag, const kt_sched_params_t *p,
                                      const kt_sched_state_t *sketch, kt_rng_t *rng)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default_gpu(&defp);
        p = &defp;
    }
    kt_sched_state_t *st = kt_sched_state_clone(sketch);
    if (!st)
        return NULL;
    int rc = 0;
    for (int s = 0; s < st->nstages && !rc; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_TILED) {
            /* fill tile sizes, then the fetch vector length and unroll */
            rc = sample_tiled(dag, p, st, s, rng);
            static const int8_t vecs[] = {1, 2, 4};
            e->vec = e->smem ? vecs[kt_rng_below(rng, 3)] : 0;
            e->ann.unroll = (int16_t)random_gpu_unroll(rng);
        } else if (e->kind == KT_SK_ROOT || e->kind == KT_SK_XREDUCE) {
            /* thread bind: threads per block, then unroll */
            int opt[16];
            int k = thread_options(p, e->kind, stage_work(ss, e->kind), opt);
            if (k == 0) {
                rc = kt_err_set(KT_EINVAL, "sample: no thread count fits stage '%s'", ss->name);
                break;
            }
            e->threads = opt[kt_rng_below(rng, (uint64_t)k)];
            e->ann.unroll = (int16_t)(ss->nreduce > 0 ? random_gpu_unroll(rng) : 0);
        }
    }
    if (rc || kt_sched_gpu_validate(dag, p, st) != 0) {
        kt_err_prefix("sample");
        kt_sched_state_free(st);
        return NULL;
    }
    return st;
}

/* ---- mutation ------------------------------------------------------------------------ */

typedef struct {
    int stage, axis, nlev;   /* axis -1: the thread count */
} gpu_ref_t;

static int mutate_tile(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t *st,
                       kt_rng_t *rng)
{
    gpu_ref_t cand[KT_TE_MAX_STAGES * KT_SCHED_MAX_AXES];
    int nc = 0;
    for (int s = 0; s < st->nstages; s++) {
        const kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_TILED) {
            for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
                int64_t ext = a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim];
                if (ext > 1)
                    cand[nc++] = (gpu_ref_t){s, a,
                                             a < ss->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS
                                                          : KT_SCHED_GPU_REDUCE_LEVELS};
            }
        } else if (e->kind == KT_SK_ROOT || e->kind == KT_SK_XREDUCE) {
            int opt[16];
            if (thread_options(p, e->kind, stage_work(ss, e->kind), opt) > 1)
                cand[nc++] = (gpu_ref_t){s, -1, 0};
        }
    }
    if (nc == 0)
        return 0;
    gpu_ref_t r = cand[kt_rng_below(rng, (uint64_t)nc)];
    kt_sched_stage_t *e = &st->stages[r.stage];
    if (r.axis < 0) {
        int opt[16], other[16], no = 0;
        int k = thread_options(p, e->kind, stage_work(kt_dag_stage(dag, r.stage), e->kind), opt);
        for (int i = 0; i < k; i++)
            if (opt[i] != e->threads)
                other[no++] = opt[i];
        if (no == 0)
            return 0;
        e->threads = other[kt_rng_below(rng, (uint64_t)no)];
        return 1;
    }
    return kt_sched_move_factor(e->split[r.axis], r.nlev, p->max_innermost_split_factor, rng);
}

static int mutate_unroll(const kt_dag_t *dag, kt_sched_state_t *st, kt_rng_t *rng)
{
    int cand[KT_TE_MAX_STAGES], nc = 0;
    for (int s = 0; s < st->nstages; s++) {
        int k = st->stages[s].kind;
        if ((k == KT_SK_TILED || k == KT_SK_XREDUCE || k == KT_SK_ROOT) &&
            kt_dag_stage(dag, s)->nreduce > 0)
            cand[nc++] = s;
    }
    if (nc == 0)
        return 0;
    kt_sched_ann_t *a = &st->stages[cand[kt_rng_below(rng, (uint64_t)nc)]].ann;
    int vals[NGPU_UNROLL], nv = 0;
    for (int i = 0; i < NGPU_UNROLL; i++)
        if (kt_sched_gpu_unroll_steps[i] != a->unroll)
            vals[nv++] = kt_sched_gpu_unroll_steps[i];
    a->unroll = (int16_t)vals[kt_rng_below(rng, (uint64_t)nv)];
    return 1;
}

static const double gpu_mut_weight[2] = {0.90, 0.10};

int kt_sched_gpu_mutate(const kt_dag_t *dag, const kt_sched_params_t *p,
                        const kt_sched_state_t *st, int rule, kt_rng_t *rng,
                        kt_sched_state_t **out)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default_gpu(&defp);
        p = &defp;
    }
    *out = NULL;
    if (rule < 0)
        rule = kt_rng_double(rng) < gpu_mut_weight[0] ? KT_MUT_TILE_SIZE : KT_MUT_AUTO_UNROLL;
    if (rule != KT_MUT_TILE_SIZE && rule != KT_MUT_AUTO_UNROLL)
        return 0;   /* compute location, parallel and tile shape are CPU rules */
    /* A tile-size move that breaks a hardware limit is discarded and drawn
     * again, a few times. */
    for (int attempt = 0; attempt < 8; attempt++) {
        kt_sched_state_t *m = kt_sched_state_clone(st);
        if (!m)
            return KT_ENOMEM;
        int changed = rule == KT_MUT_TILE_SIZE ? mutate_tile(dag, p, m, rng)
                                               : mutate_unroll(dag, m, rng);
        if (changed && kt_sched_gpu_validate(dag, p, m) == 0) {
            *out = m;
            return 1;
        }
        kt_err_clear();
        kt_sched_state_free(m);
        if (!changed && rule == KT_MUT_AUTO_UNROLL)
            break;
    }
    return 0;
}
