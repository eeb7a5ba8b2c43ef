/* Lowering a schedule state to an explicit loop-nest program. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "lower.h"
#include "util/err.h"

typedef kt_lower_ctx_t ctx_t;

const char *kt_lower_identity_c(kt_reduce_t rop)
{
    return rop == KT_RED_MAX ? "(-INFINITY)" : "0.0f";
}

static void remap_idx(kt_lower_index_t *x, int from, int to)
{
    for (int t = 0; t < x->nterms; t++)
        if (x->iter[t] == from)
            x->iter[t] = to;
}

/* ---- auto-unroll ------------------------------------------------------------- */

/* TVM's UnrollLoop with auto_max_step: a loop is unrolled when every loop in
 * its body is unrolled (a vectorized loop, and the innermost spatial loop
 * around a statement, stay loops but count their extent, as in TVM) and its
 * extent times the steps of its body is at most max_step, so an unrolled body
 * holds at most max_step element operations. Counted as one step, an inner
 * loop of 4 to 64 elements under an unrolled 32 x 16 nest made thousands of
 * straight-line operations that GCC took over a minute to compile (6% of
 * random matmul states hit the build timeout). Returns the steps of the
 * subtree; *ok tells the caller whether the subtree is fully unrolled. */
static int64_t unroll_walk(ctx_t *c, int node, int stage, int64_t max_step, int *ok)
{
    kt_lower_node_t *nd = &c->L->nodes[node];
    if (nd->kind == KT_NODE_STMT) {
        *ok = 1;
        return 1;
    }
    if (nd->kind == KT_NODE_ALLOC) {
        *ok = 1;
        return 0;
    }
    int64_t steps = 0;
    int all = 1;
    for (int ch = nd->child; ch >= 0; ch = c->L->nodes[ch].next) {
        int o = 0;
        steps += unroll_walk(c, ch, stage, max_step, &o);
        all &= o;
        if (steps > ((int64_t)1 << 40))
            steps = (int64_t)1 << 40;
    }
    const kt_lower_iter_t *it = &c->L->iters[nd->iter];
    /* The innermost spatial loop stays a loop even when not annotated: GCC
     * vectorizes it, while a full unroll turns it into scalar code. */
    int innermost = !it->reduce;
    for (int ch = nd->child; ch >= 0 && innermost; ch = c->L->nodes[ch].next)
        innermost = c->L->nodes[ch].kind == KT_NODE_STMT;
    if (nd->ann == KT_LOOP_VECTORIZE || innermost) {
        *ok = all;
        return it->extent > 0 ? steps * it->extent : steps;
    }
    int64_t total = it->extent > 0 && steps > ((int64_t)1 << 40) / it->extent
                        ? (int64_t)1 << 40
                        : steps * it->extent;
    if (nd->ann == KT_LOOP_SERIAL && all && it->stage == stage && total <= max_step) {
        nd->ann = KT_LOOP_UNROLL;
        *ok = 1;
    } else {
        *ok = 0;
    }
    return total;
}

/* ---- nest construction -------------------------------------------------------- */

/* Most elements of a register tile whose load and store are fully unrolled:
 * 32 AVX-512 registers of 16 floats. */
#define KT_LOWER_MAX_UNROLLED_TILE 512
/* ... and of one whose update is unrolled: 28 such accumulators, leaving 4
 * registers to the operands (a 32-register tile spilled its accumulators
 * once unrolled). */
#define KT_LOWER_MAX_UNROLLED_UPDATE 448

typedef void (*attach_fn)(ctx_t *c, int loop_i, int node, void *arg);

/* How build_copy prints its loops: as the nest annotates them, all
 * unrolled, or all but the innermost unrolled. */
enum { COPY_LOOPS, COPY_UNROLL, COPY_UNROLL_OUTER };

/* A sub-nest over copies of the spatial loops nested inside loop `from`
 * (the reduction init before the first reduce loop; the register tile's
 * load and store around the innermost reduce loops), holding statement s
 * with those loops' iterators renamed to the copies. */
static void build_copy(ctx_t *c, int parent, const kt_sched_nest_t *nest, const int *iters,
                       const int *anns, int from, const kt_lower_stmt_t *stmt, const char *suffix,
                       int unroll)
{
    kt_lower_stmt_t s = *stmt;
    int cur = parent;
    /* Full unrolling pays for a tile that fits the vector registers; a
     * larger one only multiplies the code (and the compile time: a tile of
     * thousands of elements took GCC past the build timeout). */
    int64_t elems = 1;
    for (int j = from + 1; j < nest->nloops; j++)
        if (!nest->loops[j].reduce)
            elems *= c->L->iters[iters[j]].extent;
    if (elems > KT_LOWER_MAX_UNROLLED_TILE)
        unroll = COPY_LOOPS;
    int innermost = -1;
    for (int j = from + 1; j < nest->nloops; j++)
        if (!nest->loops[j].reduce)
            innermost = j;
    for (int j = from + 1; j < nest->nloops && !c->rc; j++) {
        if (nest->loops[j].reduce)
            continue;
        const kt_lower_iter_t *orig = &c->L->iters[iters[j]];
        char label[KT_LOWER_NAME];
        snprintf(label, sizeof(label), "%.50s.%s", orig->label, suffix);
        int it = kt_lower_new_iter(c, orig->stage, label, orig->extent, 0);
        int node = kt_lower_new_node(c, KT_NODE_LOOP);
        if (c->rc || node < 0)
            return;
        c->L->nodes[node].iter = it;
        /* The register tile's load and store are unrolled fully: GCC then
         * moves the block with full-width vector moves straight between
         * registers and the accumulator, where a simd loop goes through a
         * stack copy in half-width pieces (twice as slow on short R1 runs). */
        /* An epilogue computed from the tile keeps its innermost loop, which
         * GCC vectorizes; unrolled, its max() and adds went scalar. */
        int unrolled = unroll == COPY_UNROLL || (unroll == COPY_UNROLL_OUTER && j != innermost);
        c->L->nodes[node].ann = unrolled                      ? KT_LOOP_UNROLL
                                : anns[j] == KT_LOOP_VECTORIZE ? KT_LOOP_VECTORIZE
                                                               : KT_LOOP_SERIAL;
        kt_lower_append(c, cur, node);
        cur = node;
        for (int d = 0; d <= KT_TE_MAX_DIMS; d++) {
            remap_idx(&s.dst_idx[d], iters[j], it);
            remap_idx(&s.src_idx[d], iters[j], it);
        }
        for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
            remap_idx(&s.axis[a], iters[j], it);
    }
    kt_lower_add_stmt(c, cur, &s);
}

/* The register tile's update, the spatial loops inside its reduce loops,
 * unrolled fully like its load and store when the tile fits the registers
 * (the innermost spatial loop stays a loop that GCC vectorizes, as in
 * unroll_walk). Left to GCC, a tile of 14 pixels x 2 vectors or 2 x 7 x 2
 * vectors was not unrolled and went through the stack at a third of the
 * speed of the same tile unrolled, whatever auto_unroll_max_step the state
 * drew; LLVM unrolls and promotes such a tile itself for TVM. */
static void unroll_update(ctx_t *c, const kt_sched_nest_t *nest, const int *iters,
                          const int *nodes, int first)
{
    int64_t elems = 1;
    int last = -1;
    for (int j = first + 1; j < nest->nloops; j++)
        if (!nest->loops[j].reduce) {
            elems *= c->L->iters[iters[j]].extent;
            last = j;
        }
    if (elems > KT_LOWER_MAX_UNROLLED_UPDATE)
        return;
    for (int j = first + 1; j < last; j++)
        if (!nest->loops[j].reduce && c->L->nodes[nodes[j]].ann == KT_LOOP_SERIAL)
            c->L->nodes[nodes[j]].ann = KT_LOOP_UNROLL;
}

/* Register tile of a tiled nest: the accumulator block of the innermost
 * spatial loops is copied into a small local array around the innermost
 * reduce loops and back, so the compiler keeps it in registers (what LLVM's
 * store motion does for TVM; GCC does not after unrolling). A direct tile
 * (the reduction ends inside it) starts from the identity instead of a load
 * and its store is the consumer's statement: the fused epilogue or the
 * cache-write copy-out reads the registers, and the stage needs no local
 * block (the stem's block went through L2 twice per output). */
typedef struct {
    int first;        /* index of the first innermost reduce loop, -1: none */
    int buf;          /* the local register tile */
    int direct;
    kt_lower_stmt_t load, store;   /* direct: load is the tile's init */
} regtile_t;

/* One loop nest: loops in nest order with the annotations of `ann`, the
 * reduction init before the first reduce loop, attached stages after their
 * loop, the leaf statement innermost (NULL: none, where a producer's
 * register tile computes it); then auto-unroll marking. */
static void build(ctx_t *c, int parent, int stage, const kt_sched_nest_t *nest, const int *iters,
                  const kt_sched_ann_t *ann, const kt_lower_stmt_t *leaf,
                  const kt_lower_stmt_t *init, attach_fn attach, void *arg, const regtile_t *rt)
{
    kt_lower_t *L = c->L;
    int anns[KT_SCHED_MAX_LOOPS];
    int first_reduce = -1;
    for (int i = 0; i < nest->nloops; i++) {
        anns[i] = i < ann->parallel                      ? KT_LOOP_PARALLEL
                  : i >= nest->nloops - ann->vectorize ? KT_LOOP_VECTORIZE
                                                       : KT_LOOP_SERIAL;
        if (first_reduce < 0 && nest->loops[i].reduce)
            first_reduce = i;
        if (anns[i] == KT_LOOP_PARALLEL)
            L->uses_parallel = 1;
    }
    /* Remember where this nest starts among parent's children. */
    int before = -1;
    for (int x = parent < 0 ? L->first : L->nodes[parent].child; x >= 0; x = L->nodes[x].next)
        before = x;
    int cur = parent, rt_parent = -2, nodes[KT_SCHED_MAX_LOOPS];
    for (int i = 0; i < nest->nloops && !c->rc; i++) {
        if (i == first_reduce && init && !(rt && rt->direct))
            build_copy(c, cur, nest, iters, anns, first_reduce, init, "init", COPY_LOOPS);
        if (rt && i == rt->first) {
            int an = kt_lower_new_node(c, KT_NODE_ALLOC);
            if (an < 0)
                return;
            L->nodes[an].buf = rt->buf;
            kt_lower_append(c, cur, an);
            build_copy(c, cur, nest, iters, anns, i, &rt->load, rt->direct ? "init" : "ld",
                       COPY_UNROLL);
            rt_parent = cur;
        }
        int node = kt_lower_new_node(c, KT_NODE_LOOP);
        if (node < 0)
            return;
        L->nodes[node].iter = iters[i];
        L->nodes[node].ann = (kt_loop_ann_t)anns[i];
        nodes[i] = node;
        kt_lower_append(c, cur, node);
        if (nest->loops[i].attach && attach)
            attach(c, i, node, arg);
        cur = node;
    }
    if (init && first_reduce < 0)
        kt_lower_add_stmt(c, cur, init);
    if (leaf)
        kt_lower_add_stmt(c, cur, leaf);
    if (rt_parent != -2) {
        build_copy(c, rt_parent, nest, iters, anns, rt->first, &rt->store, "st",
                   rt->direct && rt->store.kind == KT_STMT_COMPUTE ? COPY_UNROLL_OUTER
                                                                  : COPY_UNROLL);
        if (!c->rc)
            unroll_update(c, nest, iters, nodes, rt->first);
    }
    if (ann->unroll > 0 && !c->rc) {
        int x = before < 0 ? (parent < 0 ? L->first : L->nodes[parent].child)
                           : L->nodes[before].next;
        for (; x >= 0; x = L->nodes[x].next) {
            int ok;
            unroll_walk(c, x, stage, ann->unroll, &ok);
        }
    }
}

static void axis_label(const kt_stage_t *s, int a, int level, int split, char *out, size_t cap)
{
    const char *nm = a < s->ndim ? s->axis_names[a] : s->reduce_names[a - s->ndim];
    if (split)
        snprintf(out, cap, "%s.%d", nm, level);
    else
        snprintf(out, cap, "%s", nm);
}

static void lower_stage(ctx_t *c, int s, int parent, const int *bound);

/* ---- plain nests ------------------------------------------------------------------ */

typedef struct {
    int stage;
    int axis_iter[KT_SCHED_MAX_AXES];
} root_attach_t;

static void root_attach(ctx_t *c, int loop_i, int node, void *arg)
{
    const root_attach_t *ra = arg;
    const kt_sched_stage_t *e = &c->st->stages[ra->stage];
    int d0 = e->at_stage >= 0 ? e->at_depth : 0;
    for (int p = 0; p < c->st->nstages; p++) {
        const kt_sched_stage_t *pe = &c->st->stages[p];
        if (pe->kind == KT_SK_ROOT && pe->at_stage == ra->stage && pe->at_depth - 1 - d0 == loop_i)
            lower_stage(c, p, node, ra->axis_iter);
    }
}

static void lower_root(ctx_t *c, int s, int parent, const int *bound)
{
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    kt_sched_nest_t nest;
    kt_sched_nest(c->dag, c->st, s, 0, &nest);
    int d0 = e->at_stage >= 0 ? e->at_depth : 0;
    root_attach_t ra = {.stage = s};
    int iters[KT_SCHED_MAX_LOOPS];
    for (int a = 0; a < d0; a++)
        ra.axis_iter[a] = bound[a];
    for (int i = 0; i < nest.nloops; i++) {
        char label[KT_LOWER_NAME];
        axis_label(ss, nest.loops[i].axis, 0, 0, label, sizeof(label));
        iters[i] = kt_lower_new_iter(c, s, label, nest.loops[i].extent, nest.loops[i].reduce);
        ra.axis_iter[nest.loops[i].axis] = iters[i];
    }
    kt_lower_stmt_t leaf = kt_lower_stmt_new(ss->nreduce ? KT_STMT_UPDATE : KT_STMT_COMPUTE, s);
    for (int a = 0; a < ss->ndim + ss->nreduce; a++)
        kt_lower_idx_add(c, &leaf.axis[a], ra.axis_iter[a], 1);
    leaf.dst = c->gbuf[s];
    for (int a = 0; a < ss->ndim; a++)
        leaf.dst_idx[a] = leaf.axis[a];
    kt_lower_stmt_t init = leaf;
    init.kind = KT_STMT_INIT;
    build(c, parent, s, &nest, iters, &e->ann, &leaf, ss->nreduce ? &init : NULL, root_attach, &ra,
          NULL);
}

/* ---- multi-level tiling ------------------------------------------------------------ */

/* stride of level l of axis a: product of the deeper levels' factors. */
static int64_t tile_stride(const kt_sched_stage_t *e, int a, int l, int nlev)
{
    int64_t st = 1;
    for (int m = l + 1; m < nlev; m++)
        st *= e->split[a][m];
    return st;
}

/* Whether tiled stage s gets a register tile: its R1 loops iterate and
 * the S3 block is small enough for registers. */
static int regtile_fits(const kt_stage_t *ss, const kt_sched_stage_t *e)
{
    int64_t r1 = 1, s3 = 1;
    for (int r = 0; r < ss->nreduce; r++)
        r1 *= e->split[ss->ndim + r][1];
    for (int a = 0; a < ss->ndim; a++)
        s3 *= e->split[a][3];
    return r1 > 1 && s3 * (int64_t)sizeof(float) <= KT_LOWER_REGTILE_BYTES;
}

/* Whether the register tile of s, computed inside its consumer's nest,
 * holds finished values when its R1 loops end (every R0 factor is 1), so
 * the consumer can read them there. */
static int regtile_direct(const kt_stage_t *ss, const kt_sched_stage_t *e)
{
    return regtile_fits(ss, e) && kt_sched_reduce_ends_in_tile(ss, e);
}

/* The tiled nest of s; bound[a][l] are the consumer's iterators of the
 * levels below the compute level (NULL: s is computed at the root), local
 * the accumulator tile (-1: none), cons the consumer stage (-1: s's own
 * copy-out). Inside a consumer with a direct register tile there is no
 * local tile: the tile's store is the consumer's statement. */
static void lower_tiled(ctx_t *c, int s, int parent, int (*bound)[KT_SCHED_SPATIAL_LEVELS],
                        int local, int cons)
{
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int nd = ss->ndim, nr = ss->nreduce;
    int L0 = bound ? e->level : 0;
    int direct = bound && regtile_direct(ss, e);
    kt_sched_nest_t nest;
    kt_sched_nest(c->dag, c->st, s, 0, &nest);
    int it[KT_SCHED_MAX_AXES][KT_SCHED_SPATIAL_LEVELS];
    int iters[KT_SCHED_MAX_LOOPS];
    for (int a = 0; a < nd; a++)
        for (int l = 0; l < L0; l++)
            it[a][l] = bound[a][l];
    for (int i = 0; i < nest.nloops; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        char label[KT_LOWER_NAME];
        axis_label(ss, lp->axis, lp->level, 1, label, sizeof(label));
        iters[i] = kt_lower_new_iter(c, s, label, lp->extent, lp->reduce);
        it[lp->axis][lp->level] = iters[i];
    }
    kt_lower_stmt_t leaf = kt_lower_stmt_new(KT_STMT_UPDATE, s);
    for (int a = 0; a < nd; a++)
        for (int l = 0; l < KT_SCHED_SPATIAL_LEVELS; l++)
            kt_lower_idx_add(c, &leaf.axis[a], it[a][l],
                             tile_stride(e, a, l, KT_SCHED_SPATIAL_LEVELS));
    for (int r = 0; r < nr; r++)
        for (int l = 0; l < KT_SCHED_REDUCE_LEVELS; l++)
            kt_lower_idx_add(c, &leaf.axis[nd + r], it[nd + r][l],
                             tile_stride(e, nd + r, l, KT_SCHED_REDUCE_LEVELS));
    if (local >= 0) {
        leaf.dst = local;
        for (int a = 0; a < nd; a++)
            for (int l = L0; l < KT_SCHED_SPATIAL_LEVELS; l++)
                kt_lower_idx_add(c, &leaf.dst_idx[a], it[a][l],
                                 tile_stride(e, a, l, KT_SCHED_SPATIAL_LEVELS));
    } else {
        leaf.dst = c->gbuf[s];
        for (int a = 0; a < nd; a++)
            leaf.dst_idx[a] = leaf.axis[a];
    }
    kt_lower_stmt_t init = leaf;
    init.kind = KT_STMT_INIT;

    /* Register tile over the S3 loops around the R1 loops. */
    regtile_t rt = {.first = -1, .direct = direct};
    int64_t s3ext[KT_TE_MAX_DIMS];
    for (int a = 0; a < nd; a++)
        s3ext[a] = e->split[a][3];
    if (regtile_fits(ss, e)) {
        for (int i = 0; i < nest.nloops && rt.first < 0; i++)
            if (nest.loops[i].reduce && nest.loops[i].level == 1)
                rt.first = i;
        char name[KT_LOWER_NAME], label[KT_LOWER_NAME];
        snprintf(name, sizeof(name), "kt_%s_reg", ss->name);
        snprintf(label, sizeof(label), "%s.reg", ss->name);
        rt.buf = kt_lower_new_buf(c, KT_BUF_LOCAL, s, name, label, nd, s3ext);
        rt.load = kt_lower_stmt_new(KT_STMT_COPY, s);
        rt.store = kt_lower_stmt_new(KT_STMT_COPY, s);
        for (int a = 0; a < nd; a++) {
            kt_lower_index_t reg = kt_lower_idx_none();
            kt_lower_idx_add(c, &reg, it[a][3], 1);
            rt.load.dst_idx[a] = rt.store.src_idx[a] = reg;
            rt.load.src_idx[a] = rt.store.dst_idx[a] = leaf.dst_idx[a];
        }
        rt.load.dst = rt.store.src = rt.buf;
        rt.load.src = rt.store.dst = leaf.dst;
        if (direct) {
            rt.load.kind = KT_STMT_INIT;
            rt.load.src = -1;
            if (cons >= 0) {
                rt.store.kind = KT_STMT_COMPUTE;
                rt.store.stage = cons;
                rt.store.src_stage = s;
            }
            rt.store.dst = c->gbuf[cons >= 0 ? cons : s];
            for (int a = 0; a < nd; a++) {
                rt.store.dst_idx[a] = leaf.axis[a];
                if (cons >= 0)
                    rt.store.axis[a] = leaf.axis[a];
            }
        }
        leaf.dst = rt.buf;
        for (int a = 0; a < nd; a++)
            leaf.dst_idx[a] = rt.load.dst_idx[a];
    }
    build(c, parent, s, &nest, iters, &e->ann, &leaf, &init, NULL, NULL, rt.first >= 0 ? &rt : NULL);
}

typedef struct {
    int tiled, local, cons;
    int it[KT_SCHED_MAX_AXES][KT_SCHED_SPATIAL_LEVELS];
} cons_attach_t;

static void cons_attach(ctx_t *c, int loop_i, int node, void *arg)
{
    (void)loop_i;
    cons_attach_t *ca = arg;
    if (ca->local >= 0) {
        int an = kt_lower_new_node(c, KT_NODE_ALLOC);
        if (an < 0)
            return;
        c->L->nodes[an].buf = ca->local;
        kt_lower_append(c, node, an);
    }
    lower_tiled(c, ca->tiled, node, ca->it, ca->local, ca->cons);
}

/* The nest of the consumer of tiled stage t (cons, or the copy-out of a
 * cache-write stage when cons < 0), with t computed at its compute level. */
static void lower_consumer(ctx_t *c, int t, int cons, int parent)
{
    const kt_stage_t *ts = kt_dag_stage(c->dag, t);
    const kt_sched_stage_t *te = &c->st->stages[t];
    int nd = ts->ndim, L0 = te->level;
    kt_sched_nest_t nest;
    kt_sched_nest(c->dag, c->st, cons >= 0 ? cons : t, cons >= 0 ? 0 : 1, &nest);
    const kt_stage_t *cs = kt_dag_stage(c->dag, cons >= 0 ? cons : t);
    int64_t tile[KT_TE_MAX_DIMS];
    for (int a = 0; a < nd; a++)
        tile[a] = tile_stride(te, a, L0 - 1, KT_SCHED_SPATIAL_LEVELS);
    char name[KT_LOWER_NAME], label[KT_LOWER_NAME];
    snprintf(name, sizeof(name), "kt_%s_local", ts->name);
    snprintf(label, sizeof(label), "%s.local", ts->name);
    int direct = regtile_direct(ts, te);
    cons_attach_t ca = {.tiled = t, .cons = cons, .local = -1};
    const kt_sched_ann_t *ann = cons >= 0 ? &c->st->stages[cons].ann : &te->ann2;
    kt_sched_ann_t outer;
    if (direct) {
        /* Only the loops above the compute level: t's register tile computes
         * the statement. Their parallel loops stay; vectorize annotated the
         * inner loops. */
        int n = 0;
        while (n < nest.nloops && nest.loops[n].level < L0)
            n++;
        nest.nloops = n;
        outer = *ann;
        outer.vectorize = 0;
        if (outer.parallel > n)
            outer.parallel = (uint8_t)n;
        ann = &outer;
    } else {
        ca.local = kt_lower_new_buf(c, KT_BUF_LOCAL, t, name, label, nd, tile);
    }
    int iters[KT_SCHED_MAX_LOOPS], rest[KT_TE_MAX_DIMS];
    for (int i = 0; i < nest.nloops; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        axis_label(cs, lp->axis, lp->level, 1, label, sizeof(label));
        iters[i] = kt_lower_new_iter(c, cons >= 0 ? cons : t, label, lp->extent, 0);
        if (lp->level < L0)
            ca.it[lp->axis][lp->level] = iters[i];
        else
            rest[lp->axis] = iters[i];
    }
    if (direct) {
        build(c, parent, cons >= 0 ? cons : t, &nest, iters, ann, NULL, NULL, cons_attach, &ca,
              NULL);
        return;
    }
    kt_lower_stmt_t leaf = kt_lower_stmt_new(cons >= 0 ? KT_STMT_COMPUTE : KT_STMT_COPY,
                                             cons >= 0 ? cons : t);
    for (int a = 0; a < nd; a++) {
        for (int l = 0; l < L0; l++)
            kt_lower_idx_add(c, &leaf.axis[a], ca.it[a][l],
                             tile_stride(te, a, l, KT_SCHED_SPATIAL_LEVELS));
        kt_lower_idx_add(c, &leaf.axis[a], rest[a], 1);
        leaf.dst_idx[a] = leaf.axis[a];
        kt_lower_idx_add(c, &leaf.src_idx[a], rest[a], 1);
    }
    leaf.dst = c->gbuf[cons >= 0 ? cons : t];
    leaf.src = ca.local;
    leaf.src_stage = t;
    build(c, parent, cons >= 0 ? cons : t, &nest, iters, ann, &leaf, NULL, cons_attach, &ca, NULL);
}

/* ---- simplify-compute-with-const-tensor -------------------------------------------- */

static void lower_simplify(ctx_t *c, int s, int parent)
{
    kt_lower_t *L = c->L;
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int nd = ss->ndim;
    kt_sched_nest_t nest;
    kt_sched_nest(c->dag, c->st, s, 0, &nest);
    kt_lower_stmt_t leaf = kt_lower_stmt_new(ss->nreduce ? KT_STMT_UPDATE : KT_STMT_COMPUTE, s);
    int cur = parent, last_s1 = -1, first_reduce = -1, acc_parent = -2, acc = -1;
    for (int i = 0; i < nest.nloops; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        if (lp->axis < nd && !((ss->const_axes >> lp->axis) & 1u) && lp->level == 1)
            last_s1 = i;
        if (lp->reduce && first_reduce < 0)
            first_reduce = i;
    }
    for (int i = 0; i < nest.nloops && !c->rc; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        int konst = lp->axis >= nd || ((ss->const_axes >> lp->axis) & 1u);
        char label[KT_LOWER_NAME];
        axis_label(ss, lp->axis, lp->level, !konst, label, sizeof(label));
        int it = kt_lower_new_iter(c, s, label, lp->extent, lp->reduce);
        if (it < 0)
            return;
        L->iters[it].expand = konst;
        kt_lower_idx_add(c, &leaf.axis[lp->axis], it,
                         konst || lp->level == 1 ? 1 : e->split[lp->axis][1]);
        if (i == first_reduce) {
            /* Each output element sums its unrolled terms in a local scalar
             * and is stored once: hundreds of read-modify-writes of the
             * global element took GCC far longer to compile. */
            int64_t one = 1;
            char name[KT_LOWER_NAME], blabel[KT_LOWER_NAME];
            snprintf(name, sizeof(name), "kt_%s_acc", ss->name);
            snprintf(blabel, sizeof(blabel), "%s.acc", ss->name);
            acc = kt_lower_new_buf(c, KT_BUF_LOCAL, s, name, blabel, 1, &one);
            int an = kt_lower_new_node(c, KT_NODE_ALLOC);
            if (acc < 0 || an < 0)
                return;
            L->nodes[an].buf = acc;
            kt_lower_append(c, cur, an);
            kt_lower_stmt_t init = kt_lower_stmt_new(KT_STMT_INIT, s);
            init.dst = acc;
            init.dst_idx[0] = kt_lower_idx_none();
            kt_lower_add_stmt(c, cur, &init);
            acc_parent = cur;
        }
        int node = kt_lower_new_node(c, KT_NODE_LOOP);
        if (node < 0)
            return;
        L->nodes[node].iter = it;
        L->nodes[node].ann = konst                               ? KT_LOOP_UNROLL
                             : i < e->ann.parallel               ? KT_LOOP_PARALLEL
                             : i == last_s1 && e->ann.vectorize ? KT_LOOP_VECTORIZE
                                                                 : KT_LOOP_SERIAL;
        if (L->nodes[node].ann == KT_LOOP_PARALLEL)
            L->uses_parallel = 1;
        kt_lower_append(c, cur, node);
        cur = node;
    }
    kt_lower_stmt_t out = kt_lower_stmt_new(KT_STMT_COPY, s);
    out.dst = c->gbuf[s];
    for (int a = 0; a < nd; a++)
        out.dst_idx[a] = leaf.axis[a];
    if (acc_parent == -2) {
        leaf.dst = out.dst;
        for (int a = 0; a < nd; a++)
            leaf.dst_idx[a] = leaf.axis[a];
        kt_lower_add_stmt(c, cur, &leaf);
        return;
    }
    leaf.dst = acc;
    leaf.dst_idx[0] = kt_lower_idx_none();
    kt_lower_add_stmt(c, cur, &leaf);
    out.src = acc;
    out.src_idx[0] = kt_lower_idx_none();
    kt_lower_add_stmt(c, acc_parent, &out);
}

/* ---- rfactor --------------------------------------------------------------------- */

static void lower_rfactor(ctx_t *c, int s, int parent)
{
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int nd = ss->ndim, nr = ss->nreduce;
    int64_t KO = e->split[0][0], KI = e->split[0][1];
    int64_t F = e->rf_inner ? KI : KO;
    char rname[KT_LOWER_NAME] = "", name[KT_LOWER_NAME], label[KT_LOWER_NAME];
    if (nr == 1) {
        snprintf(rname, sizeof(rname), "%s", ss->reduce_names[0]);
    } else {
        size_t k = 0;
        for (int r = 0; r < nr && k + 2 < sizeof(rname); r++)
            k += (size_t)snprintf(rname + k, sizeof(rname) - k, "%.12s@", ss->reduce_names[r]);
    }
    int64_t shape[KT_TE_MAX_DIMS + 1];
    for (int a = 0; a < nd; a++)
        shape[a] = ss->shape[a];
    shape[nd] = F;
    snprintf(name, sizeof(name), "kt_%s_rf", ss->name);
    snprintf(label, sizeof(label), "%s.rf", ss->name);
    int rf = kt_lower_new_buf(c, KT_BUF_HEAP, s, name, label, nd + 1, shape);

    /* partial results: rf[s.., f] = reduce over the other part */
    kt_sched_nest_t nest;
    kt_sched_nest(c->dag, c->st, s, 0, &nest);
    int iters[KT_SCHED_MAX_LOOPS], ko = -1, ki = -1;
    for (int i = 0; i < nest.nloops; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        if (lp->axis < nd)
            axis_label(ss, lp->axis, 0, 0, label, sizeof(label));
        else
            snprintf(label, sizeof(label), "%.40s.%d", rname, lp->level);
        iters[i] = kt_lower_new_iter(c, s, label, lp->extent, lp->reduce);
        if (lp->axis == nd)
            *(lp->level ? &ki : &ko) = iters[i];
    }
    kt_lower_stmt_t leaf = kt_lower_stmt_new(KT_STMT_UPDATE, s);
    for (int a = 0; a < nd; a++) {
        kt_lower_idx_add(c, &leaf.axis[a], iters[a], 1);
        leaf.dst_idx[a] = leaf.axis[a];
    }
    int64_t inner = 1;
    for (int r = nr - 1; r >= 0; r--) {
        kt_lower_index_t *x = &leaf.axis[nd + r];
        kt_lower_idx_add(c, x, ko, KI);
        kt_lower_idx_add(c, x, ki, 1);
        if (nr > 1) {
            x->div = inner;
            x->mod = ss->reduce_ext[r];
        }
        inner *= ss->reduce_ext[r];
    }
    kt_lower_idx_add(c, &leaf.dst_idx[nd], e->rf_inner ? ki : ko, 1);
    leaf.dst = rf;
    kt_lower_stmt_t init = leaf;
    init.kind = KT_STMT_INIT;
    build(c, parent, s, &nest, iters, &e->ann, &leaf, &init, NULL, NULL, NULL);

    /* final: out[s..] = reduce over f of rf[s.., f] */
    kt_sched_nest(c->dag, c->st, s, 1, &nest);
    for (int i = 0; i < nest.nloops; i++) {
        const kt_sched_loop_t *lp = &nest.loops[i];
        if (lp->axis < nd)
            axis_label(ss, lp->axis, 0, 0, label, sizeof(label));
        else
            snprintf(label, sizeof(label), "%.40s.%d.v", rname, lp->level);
        iters[i] = kt_lower_new_iter(c, s, label, lp->extent, lp->reduce);
    }
    kt_lower_stmt_t fin = kt_lower_stmt_new(KT_STMT_COMBINE, s);
    for (int a = 0; a < nd; a++) {
        kt_lower_idx_add(c, &fin.dst_idx[a], iters[a], 1);
        kt_lower_idx_add(c, &fin.src_idx[a], iters[a], 1);
    }
    kt_lower_idx_add(c, &fin.src_idx[nd], iters[nd], 1);
    fin.dst = c->gbuf[s];
    fin.src = rf;
    kt_lower_stmt_t finit = fin;
    finit.kind = KT_STMT_INIT;
    build(c, parent, s, &nest, iters, &e->ann2, &fin, &finit, NULL, NULL, NULL);
}

static void lower_stage(ctx_t *c, int s, int parent, const int *bound)
{
    const kt_sched_stage_t *e = &c->st->stages[s];
    switch (e->kind) {
    case KT_SK_ROOT:
        lower_root(c, s, parent, bound);
        break;
    case KT_SK_TILED:
        if (e->cache_write)
            lower_consumer(c, s, -1, parent);
        else if (e->fuse < 0)
            lower_tiled(c, s, parent, NULL, -1, -1);
        break;   /* fused: lowered inside its consumer's nest */
    case KT_SK_FUSED:
        lower_consumer(c, e->fuse, s, parent);
        break;
    case KT_SK_RFACTOR:
        lower_rfactor(c, s, parent);
        break;
    case KT_SK_SIMPLIFY:
        lower_simplify(c, s, parent);
        break;
    default:
        break;
    }
}

/* ---- entry ------------------------------------------------------------------------ */

void kt_lower_free(kt_lower_t *l)
{
    if (!l)
        return;
    free(l->nodes);
    free(l->iters);
    free(l->stmts);
    free(l->bufs);
    free(l->kernels);
    free(l->guards);
    free(l->subs);
    free(l);
}

kt_lower_t *kt_lower(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    return kt_lower_ex(dag, st, 0);
}

kt_lower_t *kt_lower_ex(const kt_dag_t *dag, const kt_sched_state_t *st, int prepacked)
{
    if (st && st->target == KT_SCHED_TARGET_CUDA)
        return kt_lower_gpu(dag, st);
    /* Structure only: lowering is correct whatever the split bounds were. */
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.max_innermost_split_factor = INT_MAX;
    if (kt_sched_state_validate(dag, &p, st) != 0) {
        kt_err_prefix("lowering");
        return NULL;
    }
    int n = kt_dag_num_stages(dag);
    if (n > KT_TE_MAX_STAGES) {
        kt_err_set(KT_EINVAL, "lowering: too many stages");
        return NULL;
    }
    kt_lower_t *L = calloc(1, sizeof(*L));
    if (!L) {
        kt_err_set(KT_ENOMEM, "lowering: out of memory");
        return NULL;
    }
    L->first = -1;
    L->inline_mask = kt_sched_inline_mask(st);
    L->prepacked = prepacked;
    ctx_t c;
    kt_lower_ctx_init(&c, dag, st, L);
    for (int s = 0; s < n; s++) {
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        const kt_sched_stage_t *e = &st->stages[s];
        if (c.gbuf[s] >= 0 || ss->kind != KT_STAGE_COMPUTE || e->kind == KT_SK_INLINE ||
            (e->kind == KT_SK_TILED && e->fuse >= 0))
            continue;
        c.gbuf[s] = kt_lower_new_buf(&c, KT_BUF_HEAP, s, ss->name, ss->name, ss->ndim, ss->shape);
    }
    for (int s = 0; s < n && !c.rc; s++) {
        const kt_sched_stage_t *e = &st->stages[s];
        if (e->kind == KT_SK_ROOT && e->at_stage >= 0)
            continue;   /* lowered inside its consumer */
        lower_stage(&c, s, -1, NULL);
    }
    if (!c.rc)
        kt_lower_rewrite_layouts(&c);
    if (c.rc) {
        kt_err_prefix("lowering");
        kt_lower_free(L);
        return NULL;
    }
    return L;
}
