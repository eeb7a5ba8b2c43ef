/* Schedule state objects, the loop nests a state stands for, and validity. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched_int.h"
#include "util/err.h"
#include "util/util.h"

const int kt_sched_unroll_steps[4] = {0, 16, 64, 512};
const int kt_sched_gpu_unroll_steps[5] = {0, 16, 64, 512, 1024};

int kt_sched_unroll_ok(int v)
{
    for (size_t i = 0; i < 4; i++)
        if (kt_sched_unroll_steps[i] == v)
            return 1;
    return 0;
}

/* ---- parameters ------------------------------------------------------------ */

void kt_sched_params_default(kt_sched_params_t *p)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p->num_cores = n > 0 ? (int)n : 1;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        p->vector_bytes = 64;
    else if (__builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx"))
        p->vector_bytes = 32;
    else
        p->vector_bytes = 16;
    p->max_innermost_split_factor = 64;
    p->max_direct_reduce_factor = 512;
    p->max_vectorize_size = 16;
    p->target = KT_SCHED_TARGET_CPU;
    p->max_threads_per_block = 1024;
    p->max_shared_memory_per_block = 48 * 1024;
    p->max_vthread_extent = 8;
    p->warp_size = 32;
}

int kt_sched_direct_reduce_cap(const kt_sched_params_t *p)
{
    return p->max_direct_reduce_factor > p->max_innermost_split_factor
               ? p->max_direct_reduce_factor
               : p->max_innermost_split_factor;
}

int kt_sched_reduce_ends_in_tile(const kt_stage_t *ss, const kt_sched_stage_t *e)
{
    for (int r = 0; r < ss->nreduce; r++)
        if (e->split[ss->ndim + r][0] != 1)
            return 0;
    return 1;
}

void kt_sched_params_default_gpu(kt_sched_params_t *p)
{
    kt_sched_params_default(p);
    p->target = KT_SCHED_TARGET_CUDA;
    p->num_cores = 132;
    p->vector_bytes = 16;
}

int kt_sched_params_from_hw(const kt_hw_params_t *hw, kt_sched_params_t *p)
{
    if (!hw || !p)
        return kt_err_set(KT_EINVAL, "schedule parameters: no hardware parameters");
    if (strcmp(hw->target, "cpu") == 0) {
        kt_sched_params_default(p);
        if (hw->num_cores > 0)
            p->num_cores = hw->num_cores;
        if (hw->vector_unit_bytes > 0)
            p->vector_bytes = hw->vector_unit_bytes;
        return 0;
    }
    if (strcmp(hw->target, "cuda") != 0)
        return kt_err_set(KT_EINVAL, "schedule parameters: unknown target '%s'", hw->target);
    if (hw->max_threads_per_block < 1 || hw->max_shared_memory_per_block < 0 ||
        hw->max_vthread_extent < 1 || hw->warp_size < 1)
        return kt_err_set(KT_EINVAL,
                          "schedule parameters: GPU '%s' needs positive max_threads_per_block, "
                          "max_vthread_extent and warp_size",
                          hw->arch);
    kt_sched_params_default_gpu(p);
    p->num_cores = hw->num_cores > 0 ? hw->num_cores : p->num_cores;
    p->vector_bytes = hw->vector_unit_bytes > 0 ? hw->vector_unit_bytes : p->vector_bytes;
    p->max_threads_per_block = hw->max_threads_per_block;
    p->max_shared_memory_per_block = hw->max_shared_memory_per_block;
    p->max_vthread_extent = hw->max_vthread_extent;
    p->warp_size = hw->warp_size;
    return 0;
}

/* ---- objects --------------------------------------------------------------- */

static const char *const kind_names[] = {
    [KT_SK_INPUT] = "input", [KT_SK_ROOT] = "root",   [KT_SK_INLINE] = "inline",
    [KT_SK_TILED] = "tiled", [KT_SK_FUSED] = "fused", [KT_SK_RFACTOR] = "rfactor",
    [KT_SK_XREDUCE] = "xreduce", [KT_SK_SIMPLIFY] = "simplify",
};

const char *kt_sched_kind_name(int kind)
{
    if (kind < 0 || kind >= (int)KT_ARRAY_LEN(kind_names))
        return "?";
    return kind_names[kind];
}

int kt_sched_kind_parse(const char *name)
{
    for (int k = 0; k < (int)KT_ARRAY_LEN(kind_names); k++)
        if (name && strcmp(name, kind_names[k]) == 0)
            return k;
    return -1;
}

static void stage_reset(kt_sched_stage_t *e, int kind)
{
    memset(e, 0, sizeof(*e));
    e->kind = (int8_t)kind;
    e->fuse = -1;
    e->at_stage = -1;
}

kt_sched_state_t *kt_sched_state_new(const kt_dag_t *dag)
{
    int n = kt_dag_num_stages(dag);
    if (n <= 0) {
        kt_err_set(KT_EINVAL, "schedule state: empty DAG");
        return NULL;
    }
    kt_sched_state_t *st = calloc(1, sizeof(*st) + (size_t)n * sizeof(kt_sched_stage_t));
    if (!st) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    st->nstages = n;
    for (int i = 0; i < n; i++)
        stage_reset(&st->stages[i], kt_dag_stage(dag, i)->kind == KT_STAGE_PLACEHOLDER
                                        ? KT_SK_INPUT
                                        : KT_SK_ROOT);
    return st;
}

size_t kt_sched_state_size(const kt_sched_state_t *st)
{
    return sizeof(*st) + (size_t)st->nstages * sizeof(kt_sched_stage_t);
}

kt_sched_state_t *kt_sched_state_clone(const kt_sched_state_t *st)
{
    if (!st)
        return NULL;
    kt_sched_state_t *c = malloc(kt_sched_state_size(st));
    if (!c) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(c, st, kt_sched_state_size(st));
    return c;
}

void kt_sched_state_free(kt_sched_state_t *st) { free(st); }

static int ann_equal(const kt_sched_ann_t *a, const kt_sched_ann_t *b)
{
    return a->parallel == b->parallel && a->vectorize == b->vectorize && a->unroll == b->unroll;
}

int kt_sched_state_equal(const kt_sched_state_t *a, const kt_sched_state_t *b)
{
    if (!a || !b || a->nstages != b->nstages || a->target != b->target)
        return 0;
    for (int i = 0; i < a->nstages; i++) {
        const kt_sched_stage_t *x = &a->stages[i], *y = &b->stages[i];
        if (x->kind != y->kind || x->fuse != y->fuse || x->cache_write != y->cache_write ||
            x->level != y->level || x->rf_inner != y->rf_inner || x->at_stage != y->at_stage ||
            x->at_depth != y->at_depth || !ann_equal(&x->ann, &y->ann) ||
            !ann_equal(&x->ann2, &y->ann2) || memcmp(x->split, y->split, sizeof(x->split)) != 0 ||
            x->threads != y->threads || x->smem != y->smem || x->vec != y->vec)
            return 0;
    }
    return 1;
}

/* ---- analysis helpers -------------------------------------------------------- */

static int has_select(const kt_expr_t *e)
{
    if (!e)
        return 0;
    if (e->kind == KT_EX_SELECT)
        return 1;
    for (int i = 0; i < e->nargs; i++)
        if (has_select(e->args[i]))
            return 1;
    return 0;
}

int kt_sched_always_inline(const kt_dag_t *dag, int s)
{
    const kt_stage_t *st = kt_dag_stage(dag, s);
    return st && kt_dag_is_inlinable(dag, s) && !has_select(st->body);
}

uint64_t kt_sched_inline_mask(const kt_sched_state_t *st)
{
    uint64_t m = 0;
    for (int i = 0; i < st->nstages && i < 64; i++)
        if (st->stages[i].kind == KT_SK_INLINE)
            m |= 1ULL << i;
    return m;
}

int64_t kt_sched_reduce_len(const kt_stage_t *s)
{
    int64_t n = 1;
    for (int r = 0; r < s->nreduce; r++)
        n *= s->reduce_ext[r];
    return n;
}

static int is_inlined(const kt_sched_state_t *st, int s)
{
    return s >= 0 && s < st->nstages && st->stages[s].kind == KT_SK_INLINE;
}

int kt_sched_eff_consumers(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int *out)
{
    /* Stages come in topological order, so one forward sweep marking the
     * inlined readers of s (and their readers) finds every effective one. */
    uint64_t reach = 1ULL << s;
    int n = 0;
    for (int j = s + 1; j < kt_dag_num_stages(dag); j++) {
        int prod[KT_TE_MAX_STAGES];
        int np = kt_dag_producers(dag, j, prod);
        int reads = 0;
        for (int k = 0; k < np; k++)
            reads |= (int)((reach >> prod[k]) & 1u);
        if (!reads)
            continue;
        if (is_inlined(st, j))
            reach |= 1ULL << j;
        else
            out[n++] = j;
    }
    return n;
}

static int is_axis(const kt_expr_t *e, int a)
{
    return e && e->kind == KT_EX_AXIS && e->axis == a;
}

/* e reads stage s, directly or through inlined stages. */
static int expr_reads(const kt_dag_t *dag, const kt_sched_state_t *st, const kt_expr_t *e, int s,
                      int guard)
{
    if (!e || guard > 200)
        return 0;
    if (e->kind == KT_EX_LOAD) {
        if (e->tensor == s)
            return 1;
        if (is_inlined(st, e->tensor) &&
            expr_reads(dag, st, kt_dag_stage(dag, e->tensor)->body, s, guard + 1))
            return 1;
    }
    for (int i = 0; i < e->nargs; i++)
        if (expr_reads(dag, st, e->args[i], s, guard + 1))
            return 1;
    return 0;
}

static int identity_prefix(const kt_expr_t *ld, int depth)
{
    if (ld->nargs < depth)
        return 0;
    for (int a = 0; a < depth; a++)
        if (!is_axis(ld->args[a], a))
            return 0;
    return 1;
}

/* Every read of s in e (looking through inlined stages) indexes s's first
 * `depth` dimensions with the axes 0..depth-1 of e's stage. */
static int expr_reads_prefix(const kt_dag_t *dag, const kt_sched_state_t *st, const kt_expr_t *e,
                             int s, int depth, int guard)
{
    if (!e || guard > 200)
        return 0;
    if (e->kind == KT_EX_LOAD) {
        if (e->tensor == s && !identity_prefix(e, depth))
            return 0;
        if (e->tensor != s && is_inlined(st, e->tensor)) {
            /* The inlined stage's axes equal ours only where it is loaded
             * at an identity index. */
            const kt_stage_t *x = kt_dag_stage(dag, e->tensor);
            if (expr_reads(dag, st, x->body, s, guard + 1) &&
                (!identity_prefix(e, depth) ||
                 !expr_reads_prefix(dag, st, x->body, s, depth, guard + 1)))
                return 0;
        }
    }
    for (int i = 0; i < e->nargs; i++)
        if (!expr_reads_prefix(dag, st, e->args[i], s, depth, guard + 1))
            return 0;
    return 1;
}

int kt_sched_reads_prefix(const kt_dag_t *dag, const kt_sched_state_t *st, int c, int s, int depth)
{
    const kt_stage_t *cs = kt_dag_stage(dag, c);
    if (!cs || !cs->body || depth > cs->ndim)
        return 0;
    return expr_reads_prefix(dag, st, cs->body, s, depth, 0);
}

int kt_sched_elementwise_matched(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int c)
{
    int cons[KT_TE_MAX_STAGES];
    if (kt_sched_eff_consumers(dag, st, s, cons) != 1 || cons[0] != c)
        return 0;
    const kt_stage_t *ss = kt_dag_stage(dag, s), *cs = kt_dag_stage(dag, c);
    if (cs->kind != KT_STAGE_COMPUTE || cs->nreduce > 0 || cs->ndim != ss->ndim)
        return 0;
    for (int a = 0; a < ss->ndim; a++)
        if (cs->shape[a] != ss->shape[a])
            return 0;
    return kt_sched_reads_prefix(dag, st, c, s, ss->ndim);
}

int kt_sched_at_target(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int *max_depth)
{
    int cons[KT_TE_MAX_STAGES];
    if (kt_sched_eff_consumers(dag, st, s, cons) != 1)
        return -1;
    int c = cons[0];
    const kt_sched_stage_t *ce = &st->stages[c];
    if (ce->kind != KT_SK_ROOT || ce->at_stage >= 0)
        return -1;
    const kt_stage_t *ss = kt_dag_stage(dag, s), *cs = kt_dag_stage(dag, c);
    int d = ss->ndim < cs->ndim ? ss->ndim : cs->ndim;
    while (d > 0 && !kt_sched_reads_prefix(dag, st, c, s, d))
        d--;
    if (d == 0)
        return -1;
    *max_depth = d;
    return c;
}

int kt_sched_loc_tunable(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    if (!ss || ss->kind != KT_STAGE_COMPUTE || ss->is_output || kt_sched_always_inline(dag, s))
        return 0;
    int k = st->stages[s].kind;
    return k == KT_SK_ROOT || k == KT_SK_INLINE;
}

/* ---- loop nests -------------------------------------------------------------- */

static void add_loop(kt_sched_nest_t *n, int axis, int level, int reduce, int64_t extent)
{
    kt_sched_loop_t *l = &n->loops[n->nloops++];
    l->axis = (int8_t)axis;
    l->level = (int8_t)level;
    l->reduce = (int8_t)reduce;
    l->attach = 0;
    l->extent = extent;
}

/* Loops of a consumer of tiled stage t (levels 0..L-1, then the rest). */
static void consumer_loops(const kt_stage_t *ts, const kt_sched_stage_t *te, kt_sched_nest_t *n)
{
    int L = te->level;
    for (int l = 0; l < L; l++)
        for (int a = 0; a < ts->ndim; a++)
            add_loop(n, a, l, 0, te->split[a][l]);
    if (n->nloops > 0)
        n->loops[n->nloops - 1].attach = 1;
    for (int a = 0; a < ts->ndim; a++) {
        int64_t rest = 1;
        for (int l = L; l < KT_SCHED_SPATIAL_LEVELS; l++)
            rest *= te->split[a][l];
        add_loop(n, a, L, 0, rest);
    }
}

int kt_sched_nest(const kt_dag_t *dag, const kt_sched_state_t *st, int stage, int nest,
                  kt_sched_nest_t *out)
{
    memset(out, 0, sizeof(*out));
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s || !st || stage >= st->nstages || nest < 0 || nest > 1)
        return 0;
    if (st->target != KT_SCHED_TARGET_CPU)
        return 0;   /* GPU kernels are described by kt_sched_gpu_kernels */
    const kt_sched_stage_t *e = &st->stages[stage];
    int nd = s->ndim, nr = s->nreduce;
    switch (e->kind) {
    case KT_SK_ROOT: {
        if (nest != 0)
            return 0;
        int d0 = e->at_stage >= 0 ? e->at_depth : 0;
        if (d0 < 0 || d0 > nd)
            d0 = 0;
        for (int a = d0; a < nd; a++)
            add_loop(out, a, 0, 0, s->shape[a]);
        for (int r = 0; r < nr; r++)
            add_loop(out, nd + r, 0, 1, s->reduce_ext[r]);
        /* Stages computed at this one. */
        for (int p = 0; p < st->nstages; p++) {
            const kt_sched_stage_t *pe = &st->stages[p];
            if (pe->kind == KT_SK_ROOT && pe->at_stage == stage) {
                int li = pe->at_depth - 1 - d0;
                if (li >= 0 && li < out->nloops)
                    out->loops[li].attach = 1;
            }
        }
        out->root = e->at_stage < 0;
        out->has_reduce = nr > 0;
        break;
    }
    case KT_SK_TILED: {
        int L = (e->fuse >= 0 || e->cache_write) ? e->level : 0;
        if (L < 0 || L > 2 || nd + nr > KT_SCHED_MAX_AXES)
            return 0;   /* not a state validation accepts */
        if (nest == 1) {
            if (!e->cache_write)
                return 0;
            consumer_loops(s, e, out);
            out->root = 1;
            out->tiled = 1;
            break;
        }
        for (int l = L; l < 2; l++)
            for (int a = 0; a < nd; a++)
                add_loop(out, a, l, 0, e->split[a][l]);
        for (int r = 0; r < nr; r++)
            add_loop(out, nd + r, 0, 1, e->split[nd + r][0]);
        for (int a = 0; a < nd; a++)
            add_loop(out, a, 2, 0, e->split[a][2]);
        for (int r = 0; r < nr; r++)
            add_loop(out, nd + r, 1, 1, e->split[nd + r][1]);
        for (int a = 0; a < nd; a++)
            add_loop(out, a, 3, 0, e->split[a][3]);
        out->root = L == 0;
        out->tiled = 1;
        out->has_reduce = nr > 0;
        break;
    }
    case KT_SK_FUSED: {
        if (nest != 0 || e->fuse < 0 || e->fuse >= st->nstages)
            return 0;
        const kt_sched_stage_t *te = &st->stages[e->fuse];
        const kt_stage_t *ts = kt_dag_stage(dag, e->fuse);
        if (te->kind != KT_SK_TILED || ts->ndim != nd || te->level < 1 || te->level > 2)
            return 0;
        consumer_loops(ts, te, out);
        out->root = 1;
        out->tiled = 1;
        break;
    }
    case KT_SK_RFACTOR: {
        for (int a = 0; a < nd; a++)
            add_loop(out, a, 0, 0, s->shape[a]);
        if (nest == 0) {
            add_loop(out, nd, 0, e->rf_inner, e->split[0][0]);
            add_loop(out, nd, 1, !e->rf_inner, e->split[0][1]);
        } else {
            add_loop(out, nd, e->rf_inner, 1, e->split[0][e->rf_inner ? 1 : 0]);
        }
        out->root = 1;
        out->has_reduce = 1;
        break;
    }
    case KT_SK_SIMPLIFY: {
        if (nest != 0)
            return 0;
        int nouter = 0;
        for (int l = 0; l < 2; l++)
            for (int a = 0; a < nd; a++)
                if (!((s->const_axes >> a) & 1u)) {
                    add_loop(out, a, l, 0, e->split[a][l]);
                    nouter += l == 0;
                }
        for (int a = 0; a < nd; a++)
            if ((s->const_axes >> a) & 1u)
                add_loop(out, a, 0, 0, s->shape[a]);
        for (int r = 0; r < nr; r++)
            add_loop(out, nd + r, 0, 1, s->reduce_ext[r]);
        /* The unrolled block is innermost: parallel over the S0 loops, and
         * vectorize means the S1 loop around the block. */
        out->root = 1;
        out->tiled = 1;
        out->max_parallel = nouter;
        out->max_vectorize = nouter > 0;
        return 1;
    }
    default:
        return 0;
    }
    /* Parallel: leading spatial loops, stopping after the first attach loop.
     * Vectorize: trailing spatial loops below every attach loop. */
    int p = 0;
    while (p < out->nloops && !out->loops[p].reduce) {
        p++;
        if (out->loops[p - 1].attach)
            break;
    }
    out->max_parallel = out->root ? p : 0;
    int v = 0;
    while (v < out->nloops) {
        const kt_sched_loop_t *l = &out->loops[out->nloops - 1 - v];
        if (l->reduce || l->attach)
            break;
        v++;
    }
    if (out->tiled && v > 1)
        v = 1;
    out->max_vectorize = v;
    return 1;
}

/* ---- validity ----------------------------------------------------------------- */

static int bad(int s, const kt_stage_t *ss, const char *fmt, const char *detail)
{
    return kt_err_set(KT_EINVAL, "invalid state: stage %d '%s': %s%s", s, ss ? ss->name : "?", fmt,
                      detail ? detail : "");
}

static int check_ann(const kt_dag_t *dag, const kt_sched_state_t *st, int s, int nest,
                     const kt_sched_ann_t *a)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    kt_sched_nest_t n;
    if (!kt_sched_nest(dag, st, s, nest, &n)) {
        if (a->parallel || a->vectorize || a->unroll)
            return bad(s, ss, "annotation on a loop nest that does not exist",
                       nest ? " (ann2)" : "");
        return 0;
    }
    if (a->parallel > n.max_parallel)
        return kt_err_set(KT_EINVAL,
                          "invalid state: stage %d '%s': parallel over %d loops, at most %d allowed",
                          s, ss->name, a->parallel, n.max_parallel);
    if (a->vectorize > n.max_vectorize)
        return kt_err_set(KT_EINVAL,
                          "invalid state: stage %d '%s': vectorize over %d loops, at most %d allowed",
                          s, ss->name, a->vectorize, n.max_vectorize);
    if (a->parallel + a->vectorize > n.nloops)
        return bad(s, ss, "parallel and vectorized loops overlap", NULL);
    if (a->unroll < 0 || !kt_sched_unroll_ok(a->unroll))
        return bad(s, ss, "auto_unroll_max_step not one of 0, 16, 64, 512", NULL);
    if (a->unroll && !n.has_reduce)
        return bad(s, ss, "auto-unroll on a nest without reduction loops", NULL);
    return 0;
}

static int check_split(const kt_stage_t *ss, int s, const int32_t *f, int nlev, int64_t extent,
                       int max_inner)
{
    int64_t prod = 1;
    for (int l = 0; l < nlev; l++) {
        if (f[l] < 1)
            return bad(s, ss, "split factor below 1", NULL);
        prod *= f[l];
        if (prod > extent)
            break;
    }
    if (prod != extent)
        return kt_err_set(KT_EINVAL,
                          "invalid state: stage %d '%s': split factors do not multiply to the "
                          "extent %lld",
                          s, ss->name, (long long)extent);
    if (f[nlev - 1] > max_inner)
        return kt_err_set(KT_EINVAL,
                          "invalid state: stage %d '%s': innermost split factor %d exceeds %d", s,
                          ss->name, f[nlev - 1], max_inner);
    for (int l = nlev; l < KT_SCHED_MAX_LEVELS; l++)
        if (f[l] != 0)
            return bad(s, ss, "split factor beyond the axis' levels", NULL);
    return 0;
}

int kt_sched_state_validate(const kt_dag_t *dag, const kt_sched_params_t *p,
                            const kt_sched_state_t *st)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    if (!dag || !st)
        return kt_err_set(KT_EINVAL, "invalid state: missing DAG or state");
    int n = kt_dag_num_stages(dag);
    if (st->nstages != n)
        return kt_err_set(KT_EINVAL, "invalid state: %d stages, the DAG has %d", st->nstages, n);
    if (st->target == KT_SCHED_TARGET_CUDA)
        return kt_sched_gpu_validate(dag, p, st);
    if (st->target != KT_SCHED_TARGET_CPU)
        return kt_err_set(KT_EINVAL, "invalid state: unknown target %d", st->target);
    for (int s = 0; s < n; s++) {
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        const kt_sched_stage_t *e = &st->stages[s];
        int nd = ss->ndim, nr = ss->nreduce;
        if (ss->kind == KT_STAGE_PLACEHOLDER) {
            if (e->kind != KT_SK_INPUT)
                return bad(s, ss, "a placeholder must have kind input", NULL);
        } else if (e->kind <= KT_SK_INPUT ||
                   (e->kind > KT_SK_RFACTOR && e->kind != KT_SK_SIMPLIFY)) {
            return bad(s, ss, "bad kind for a compute stage", NULL);
        }
        if (kt_sched_always_inline(dag, s) && e->kind != KT_SK_INLINE)
            return bad(s, ss, "a strictly inlinable stage must be inlined", NULL);
        /* Fields that only some kinds use must be neutral otherwise. */
        if (e->kind != KT_SK_TILED && e->kind != KT_SK_FUSED && e->fuse != -1)
            return bad(s, ss, "fuse set on a stage that is neither tiled nor fused", NULL);
        if (e->kind != KT_SK_TILED && (e->cache_write || e->level))
            return bad(s, ss, "cache_write/level set on a stage that is not tiled", NULL);
        if (e->kind != KT_SK_RFACTOR && e->rf_inner)
            return bad(s, ss, "rf_inner set on a stage that is not rfactor", NULL);
        if (e->kind != KT_SK_ROOT && (e->at_stage != -1 || e->at_depth != 0))
            return bad(s, ss, "compute location set on a stage that is not a plain nest", NULL);
        if (e->threads || e->smem || e->vec)
            return bad(s, ss, "GPU annotations on a CPU state", NULL);
        if (e->kind != KT_SK_TILED && e->kind != KT_SK_RFACTOR && e->kind != KT_SK_SIMPLIFY)
            for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
                for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                    if (e->split[a][l] != 0)
                        return bad(s, ss, "split factors on a stage that is not split", NULL);
        switch (e->kind) {
        case KT_SK_INLINE:
            if (!kt_dag_is_inlinable(dag, s))
                return bad(s, ss, "stage cannot be inlined", NULL);
            break;
        case KT_SK_ROOT:
            if (e->at_stage == -1) {
                if (e->at_depth != 0)
                    return bad(s, ss, "at_depth without at_stage", NULL);
            } else {
                int maxd = 0;
                int c = ss->is_output ? -1 : kt_sched_at_target(dag, st, s, &maxd);
                if (c < 0 || c != e->at_stage)
                    return bad(s, ss, "cannot be computed at that stage", NULL);
                if (e->at_depth < 1 || e->at_depth > maxd)
                    return bad(s, ss, "compute-at depth out of range", NULL);
            }
            break;
        case KT_SK_TILED:
            if (!kt_dag_has_data_reuse(dag, s))
                return bad(s, ss, "multi-level tiling needs a reduction with data reuse", NULL);
            /* a direct tile may run a longer reduction whole (the reduce-in rule's states) */
            int direct = kt_sched_reduce_ends_in_tile(ss, e);
            for (int a = 0; a < nd + nr; a++) {
                int rc = check_split(ss, s, e->split[a],
                                     a < nd ? KT_SCHED_SPATIAL_LEVELS : KT_SCHED_REDUCE_LEVELS,
                                     a < nd ? ss->shape[a] : ss->reduce_ext[a - nd],
                                     a >= nd && direct ? kt_sched_direct_reduce_cap(p)
                                                       : p->max_innermost_split_factor);
                if (rc)
                    return rc;
            }
            for (int a = nd + nr; a < KT_SCHED_MAX_AXES; a++)
                for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                    if (e->split[a][l] != 0)
                        return bad(s, ss, "split factors for an axis that does not exist", NULL);
            if (e->cache_write != 0 && e->cache_write != 1)
                return bad(s, ss, "cache_write must be 0 or 1", NULL);
            if (e->fuse >= 0 && e->cache_write)
                return bad(s, ss, "both a fused consumer and a cache-write stage", NULL);
            if (e->fuse >= 0 || e->cache_write) {
                if (e->level != 1 && e->level != 2)
                    return bad(s, ss, "compute level must be 1 or 2", NULL);
            } else if (e->level != 0) {
                return bad(s, ss, "compute level without a consumer", NULL);
            }
            if (e->fuse >= 0) {
                if (e->fuse <= s || e->fuse >= n || st->stages[e->fuse].kind != KT_SK_FUSED ||
                    st->stages[e->fuse].fuse != s)
                    return bad(s, ss, "fused consumer is not marked fused to this stage", NULL);
                if (!kt_sched_elementwise_matched(dag, st, s, e->fuse))
                    return bad(s, ss, "consumer is not a single elementwise-matched consumer",
                               NULL);
            } else if (e->fuse != -1) {
                return bad(s, ss, "bad fused consumer", NULL);
            }
            break;
        case KT_SK_FUSED:
            if (e->fuse < 0 || e->fuse >= n || st->stages[e->fuse].kind != KT_SK_TILED ||
                st->stages[e->fuse].fuse != s)
                return bad(s, ss, "fused stage without its tiled producer", NULL);
            break;
        case KT_SK_RFACTOR:
            if (nr == 0)
                return bad(s, ss, "rfactor needs a reduction", NULL);
            {
                int rc = check_split(ss, s, e->split[0], 2, kt_sched_reduce_len(ss),
                                     p->max_innermost_split_factor);
                if (rc)
                    return rc;
            }
            for (int a = 1; a < KT_SCHED_MAX_AXES; a++)
                for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                    if (e->split[a][l] != 0)
                        return bad(s, ss, "rfactor has a single split", NULL);
            if (e->rf_inner != 0 && e->rf_inner != 1)
                return bad(s, ss, "rf_inner must be 0 or 1", NULL);
            break;
        case KT_SK_SIMPLIFY:
            if (!ss->const_axes)
                return bad(s, ss, "simplify needs axes that index constant tables", NULL);
            for (int a = 0; a < KT_SCHED_MAX_AXES; a++) {
                if (a < nd && !((ss->const_axes >> a) & 1u)) {
                    int rc = check_split(ss, s, e->split[a], 2, ss->shape[a],
                                         p->max_innermost_split_factor);
                    if (rc)
                        return rc;
                    continue;
                }
                for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                    if (e->split[a][l] != 0)
                        return bad(s, ss, "split factors on a constant-table axis or a "
                                   "reduce axis", NULL);
            }
            break;
        default:
            break;
        }
        int rc = check_ann(dag, st, s, 0, &e->ann);
        if (!rc)
            rc = check_ann(dag, st, s, 1, &e->ann2);
        if (rc)
            return rc;
    }
    return 0;
}

/* One knob key: stage, decision and value packed, then hashed (xxHash via
 * kt_hash64) so the keys index open-addressing sets directly. */
static uint64_t knob_key(int stage, int decision, int64_t value)
{
    int64_t packed[3] = {stage, decision, value};
    uint64_t h = kt_hash64(packed, sizeof packed);
    return h ? h : 1;
}

int kt_sched_state_knobs(const kt_sched_state_t *st, uint64_t *out, int cap)
{
    if (!st || !out || cap < st->nstages * KT_SCHED_KNOBS_PER_STAGE)
        return kt_err_set(KT_EINVAL, "state knobs: no state, or room for fewer than %d keys",
                          st ? st->nstages * KT_SCHED_KNOBS_PER_STAGE : 0);
    int n = 0;
    for (int i = 0; i < st->nstages; i++) {
        const kt_sched_stage_t *s = &st->stages[i];
        if (s->kind == KT_SK_INPUT)
            continue;   /* nothing chosen */
        /* one byte each (as unsigned: -1 means none, and shifting a
         * negative value is undefined) */
        out[n++] = knob_key(i, 0, (int64_t)((uint64_t)(uint8_t)s->kind |
                                            (uint64_t)(uint8_t)s->fuse << 8 |
                                            (uint64_t)(uint8_t)s->cache_write << 16 |
                                            (uint64_t)(uint8_t)s->level << 24 |
                                            (uint64_t)(uint8_t)s->rf_inner << 32));
        out[n++] = knob_key(i, 1, (int64_t)((uint64_t)(uint8_t)s->at_stage |
                                            (uint64_t)(uint8_t)s->at_depth << 8));
        const kt_sched_ann_t *a[2] = {&s->ann, &s->ann2};
        for (int k = 0; k < 2; k++) {
            out[n++] = knob_key(i, 2 + 3 * k, a[k]->parallel);
            out[n++] = knob_key(i, 3 + 3 * k, a[k]->vectorize);
            out[n++] = knob_key(i, 4 + 3 * k, a[k]->unroll);
        }
        out[n++] = knob_key(i, 8, s->threads);
        out[n++] = knob_key(i, 9, s->smem);
        out[n++] = knob_key(i, 10, s->vec);
        for (int ax = 0; ax < KT_SCHED_MAX_AXES; ax++)
            for (int l = 0; l < KT_SCHED_MAX_LEVELS; l++)
                if (s->split[ax][l])
                    out[n++] = knob_key(i, 11 + ax * KT_SCHED_MAX_LEVELS + l, s->split[ax][l]);
    }
    return n;
}

uint64_t kt_sched_state_tile_key(const kt_sched_state_t *st)
{
    if (!st)
        return 0;
    /* reduce axes have fewer levels: their entry at the spatial innermost
     * level is 0 and adds nothing but a constant */
    const int inner = (st->target == KT_SCHED_TARGET_CUDA ? KT_SCHED_GPU_SPATIAL_LEVELS
                                                          : KT_SCHED_SPATIAL_LEVELS) - 1;
    int64_t packed[1 + KT_SCHED_MAX_AXES];
    uint64_t h = 0;
    for (int i = 0; i < st->nstages; i++) {
        const kt_sched_stage_t *s = &st->stages[i];
        if (s->kind != KT_SK_TILED)
            continue;
        packed[0] = (int64_t)(h ^ (uint64_t)i);
        for (int ax = 0; ax < KT_SCHED_MAX_AXES; ax++)
            packed[1 + ax] = s->split[ax][inner];
        h = kt_hash64(packed, sizeof packed);
        h = h ? h : 1;
    }
    return h;
}
