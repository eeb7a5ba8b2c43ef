/* Lowering of GPU states to kernels of blocks and threads (see "GPU
 * programs" in lower.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "lower.h"
#include "util/err.h"

typedef kt_lower_ctx_t g_t;

static kt_lower_index_t idx1(g_t *c, int iter)
{
    kt_lower_index_t x = kt_lower_idx_none();
    kt_lower_idx_add(c, &x, iter, 1);
    return x;
}

static int new_node(g_t *c, kt_node_kind_t kind, int parent)
{
    int id = kt_lower_new_node(c, kind);
    kt_lower_append(c, parent, id);
    return id;
}

/* A loop node under parent; *iter receives its iterator. */
static int loop(g_t *c, int parent, int stage, const char *label, int64_t extent,
                kt_loop_ann_t ann, int reduce, int *iter)
{
    int it = kt_lower_new_iter(c, stage, label, extent, reduce);
    int n = it < 0 ? -1 : new_node(c, KT_NODE_LOOP, parent);
    if (n < 0) {
        *iter = -1;
        return -1;
    }
    c->L->nodes[n].iter = it;
    c->L->nodes[n].ann = ann;
    *iter = it;
    return n;
}

/* A LET under parent: a derived iterator of value def, in [0, extent). */
static int let(g_t *c, int parent, int stage, const char *label, kt_lower_index_t def,
               int64_t extent)
{
    int it = kt_lower_new_iter(c, stage, label, extent, 0);
    int n = it < 0 ? -1 : new_node(c, KT_NODE_LET, parent);
    if (n < 0)
        return -1;
    c->L->iters[it].derived = 1;
    c->L->iters[it].def = def;
    c->L->nodes[n].iter = it;
    return it;
}

/* (x / div) % mod of iterator x as a LET (mod 0: none). */
static int let_digit(g_t *c, int parent, int stage, const char *label, int x, int64_t div,
                     int64_t mod)
{
    kt_lower_index_t d = idx1(c, x);
    /* the outermost digit needs no modulo: x < div * mod already */
    if (mod && div * mod >= c->L->iters[x].extent)
        mod = 0;
    d.div = div;
    d.mod = mod;
    return let(c, parent, stage, label, d,
               mod ? mod : (c->L->iters[x].extent + div - 1) / div);
}

static int guard(g_t *c, int parent, kt_lower_index_t idx, int64_t bound)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->guards, &c->cap_guards, L->nguards, sizeof(*L->guards)))
        return -1;
    int g = L->nguards++;
    L->guards[g].idx = idx;
    L->guards[g].bound = bound;
    int n = new_node(c, KT_NODE_GUARD, parent);
    if (n >= 0)
        L->nodes[n].guard = g;
    return n;
}

static void alloc(g_t *c, int parent, int buf)
{
    int n = new_node(c, KT_NODE_ALLOC, parent);
    if (n >= 0)
        c->L->nodes[n].buf = buf;
}

static int new_kernel(g_t *c, const kt_sched_gpu_kernel_t *k)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->kernels, &c->cap_kernels, L->nkernels, sizeof(*L->kernels)))
        return -1;
    int id = L->nkernels++;
    L->kernels[id] = (kt_lower_kernel_t){.stage = k->stage, .grid = k->grid,
                                         .threads = k->threads, .smem_bytes = k->smem_bytes};
    int n = new_node(c, KT_NODE_KERNEL, -1);
    if (n >= 0)
        L->nodes[n].kernel = id;
    return n;
}

/* ---- auto-unroll ------------------------------------------------------------------ */

/* TVM's UnrollLoop with auto_max_step: a SERIAL loop is unrolled when every
 * loop in its body is unrolled and its extent times the steps of its body is
 * at most max_step. VTHREAD loops always are. Returns the steps of the
 * subtree; *ok tells whether it is fully unrolled. */
static int64_t mark_unroll(g_t *c, int node, int64_t max_step, int *ok)
{
    kt_lower_node_t *nd = &c->L->nodes[node];
    *ok = 1;
    switch (nd->kind) {
    case KT_NODE_STMT:
        return 1;
    case KT_NODE_LOOP:
    case KT_NODE_GUARD:
    case KT_NODE_LET:
        break;
    default:
        return 0;
    }
    int64_t steps = 0;
    int all = 1;
    for (int ch = nd->child; ch >= 0; ch = c->L->nodes[ch].next) {
        int o = 0;
        steps += mark_unroll(c, ch, max_step, &o);
        all &= o;
        if (steps > ((int64_t)1 << 40))
            steps = (int64_t)1 << 40;
    }
    if (nd->kind != KT_NODE_LOOP) {
        *ok = all;
        return steps;
    }
    int64_t ext = c->L->iters[nd->iter].extent;
    int64_t total = ext > 0 && steps > ((int64_t)1 << 40) / ext ? (int64_t)1 << 40 : steps * ext;
    if (nd->ann == KT_LOOP_SERIAL && all && total <= max_step)
        nd->ann = KT_LOOP_UNROLL;
    *ok = nd->ann == KT_LOOP_UNROLL ||
          ((nd->ann == KT_LOOP_VTHREAD || nd->ann == KT_LOOP_VECTORIZE) && all);
    return total;
}

static void unroll(g_t *c, int node, int max_step)
{
    if (max_step > 0 && node >= 0 && !c->rc) {
        int ok;
        mark_unroll(c, node, max_step, &ok);
    }
}

/* ---- common pieces ------------------------------------------------------------------- */

static void axis_label(const kt_stage_t *s, int a, int level, char *out, size_t cap)
{
    const char *nm = a < s->ndim ? s->axis_names[a] : s->reduce_names[a - s->ndim];
    if (level >= 0)
        snprintf(out, cap, "%s.%d", nm, level);
    else
        snprintf(out, cap, "%s", nm);
}

/* "i.0@j.0@" (TVM's name of fused loops) of the axes with a factor > 1 at
 * `level`, or of all spatial axes (level -1). */
static void fused_label(const kt_stage_t *s, const kt_sched_stage_t *e, int level, char *out,
                        size_t cap)
{
    size_t k = 0;
    out[0] = '\0';
    for (int a = 0; a < s->ndim && k + 1 < cap; a++) {
        if (level >= 0 && e->split[a][level] <= 1)
            continue;
        char l[KT_LOWER_NAME];
        axis_label(s, a, level, l, sizeof(l));
        k += (size_t)snprintf(out + k, cap - k, "%.12s@", l);
    }
    if (!out[0])
        snprintf(out, cap, "%s.%d", s->name, level);
}

/* LETs of the digits of iterator x over the axes' factors at one level
 * (row-major: the last axis varies fastest); it[a] receives them, -1 for
 * factors 1. */
static void digits(g_t *c, int parent, int stage, const kt_stage_t *s, const kt_sched_stage_t *e,
                   int level, int x, int *it)
{
    int64_t stride = 1;
    for (int a = s->ndim - 1; a >= 0; a--) {
        int64_t f = e->split[a][level];
        it[a] = -1;
        if (f > 1) {
            char label[KT_LOWER_NAME];
            axis_label(s, a, level, label, sizeof(label));
            it[a] = let_digit(c, parent, stage, label, x, stride, f);
        }
        stride *= f;
    }
}

/* LETs of the axes of a row-major flat index x over extents ext[0..n). */
static void unflatten(g_t *c, int parent, int stage, const kt_stage_t *s, int first_axis, int n,
                      const int64_t *ext, int x, int *it)
{
    int64_t stride = 1;
    for (int a = n - 1; a >= 0; a--) {
        it[a] = -1;
        if (ext[a] > 1) {
            char label[KT_LOWER_NAME];
            axis_label(s, first_axis + a, -1, label, sizeof(label));
            /* the outermost digit needs no modulo: x < product of extents */
            it[a] = let_digit(c, parent, stage, label, x, stride, a == 0 ? 0 : ext[a]);
        }
        stride *= ext[a];
    }
}

static int64_t reduce_len(const kt_stage_t *s)
{
    int64_t n = 1;
    for (int r = 0; r < s->nreduce; r++)
        n *= s->reduce_ext[r];
    return n;
}

static int64_t level_stride(const kt_sched_stage_t *e, int a, int l, int nlev)
{
    int64_t st = 1;
    for (int m = l + 1; m < nlev; m++)
        st *= e->split[a][m];
    return st;
}

/* ---- ROOT: a plain kernel ---------------------------------------------------------- */

static void lower_root(g_t *c, int s, const kt_sched_gpu_kernel_t *k)
{
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int kn = new_kernel(c, k);
    int64_t S = kt_stage_numel(ss), T = k->threads, G = k->grid;
    char label[KT_LOWER_NAME];
    fused_label(ss, e, -1, label, sizeof(label));
    int b, t;
    int bn = loop(c, kn, s, "blockIdx.x", G, KT_LOOP_BLOCK, 0, &b);
    int tn = loop(c, bn, s, "threadIdx.x", T, KT_LOOP_THREAD, 0, &t);
    if (c->rc)
        return;
    kt_lower_index_t gi = kt_lower_idx_none();
    kt_lower_idx_add(c, &gi, b, T);
    kt_lower_idx_add(c, &gi, t, 1);
    int i = let(c, tn, s, label, gi, G * T);
    int body = G * T != S ? guard(c, tn, idx1(c, i), S) : tn;
    int ax[KT_SCHED_MAX_AXES];
    unflatten(c, body, s, ss, 0, ss->ndim, ss->shape, i, ax);
    if (c->rc)
        return;
    kt_lower_stmt_t leaf = kt_lower_stmt_new(ss->nreduce ? KT_STMT_UPDATE : KT_STMT_COMPUTE, s);
    for (int a = 0; a < ss->ndim; a++) {
        leaf.axis[a] = idx1(c, ax[a]);
        leaf.dst_idx[a] = leaf.axis[a];
    }
    leaf.dst = c->gbuf[s];
    if (ss->nreduce == 0) {
        kt_lower_add_stmt(c, body, &leaf);
        return;
    }
    /* Reductions accumulate in a register, then store once. */
    char name[KT_LOWER_NAME], blabel[KT_LOWER_NAME];
    snprintf(name, sizeof(name), "kt_%s_acc", ss->name);
    snprintf(blabel, sizeof(blabel), "%s.local", ss->name);
    int64_t one = 1;
    int acc = kt_lower_new_buf(c, KT_BUF_LOCAL, s, name, blabel, 1, &one);
    alloc(c, body, acc);
    kt_lower_stmt_t init = kt_lower_stmt_new(KT_STMT_INIT, s);
    init.dst = acc;
    kt_lower_add_stmt(c, body, &init);
    int cur = body, first = -1;
    for (int r = 0; r < ss->nreduce; r++) {
        int it;
        axis_label(ss, ss->ndim + r, -1, label, sizeof(label));
        cur = loop(c, cur, s, label, ss->reduce_ext[r], KT_LOOP_SERIAL, 1, &it);
        if (first < 0)
            first = cur;
        leaf.axis[ss->ndim + r] = idx1(c, it);
    }
    leaf.dst = acc;
    for (int a = 0; a < ss->ndim; a++)
        leaf.dst_idx[a] = kt_lower_idx_none();
    kt_lower_add_stmt(c, cur, &leaf);
    kt_lower_stmt_t out = kt_lower_stmt_new(KT_STMT_COPY, s);
    out.dst = c->gbuf[s];
    for (int a = 0; a < ss->ndim; a++)
        out.dst_idx[a] = idx1(c, ax[a]);
    out.src = acc;
    kt_lower_add_stmt(c, body, &out);
    unroll(c, first, e->ann.unroll);
}

/* ---- XREDUCE: cross-thread reduction ------------------------------------------------ */

static void lower_xreduce(g_t *c, int s, const kt_sched_gpu_kernel_t *k)
{
    const kt_stage_t *ss = kt_dag_stage(c->dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int kn = new_kernel(c, k);
    int64_t T = k->threads, K = reduce_len(ss), KO = (K + T - 1) / T;
    char label[KT_LOWER_NAME], name[KT_LOWER_NAME];
    int red = -1;
    if (T > KT_SCHED_GPU_WARP) {
        int64_t nw = T / KT_SCHED_GPU_WARP;
        snprintf(name, sizeof(name), "kt_%s_red", ss->name);
        snprintf(label, sizeof(label), "%s.red_buf", ss->name);
        red = kt_lower_new_buf(c, KT_BUF_SHARED, s, name, label, 1, &nw);
        alloc(c, kn, red);
    }
    int b, t;
    int bn = loop(c, kn, s, "blockIdx.x", k->grid, KT_LOOP_BLOCK, 0, &b);
    if (c->rc)
        return;
    int ax[KT_SCHED_MAX_AXES];
    unflatten(c, bn, s, ss, 0, ss->ndim, ss->shape, b, ax);
    int tn = loop(c, bn, s, "threadIdx.x", T, KT_LOOP_THREAD, 0, &t);
    if (c->rc)
        return;
    snprintf(name, sizeof(name), "kt_%s_part", ss->name);
    snprintf(label, sizeof(label), "%s.local", ss->name);
    int64_t one = 1;
    int part = kt_lower_new_buf(c, KT_BUF_LOCAL, s, name, label, 1, &one);
    alloc(c, tn, part);
    kt_lower_stmt_t init = kt_lower_stmt_new(KT_STMT_INIT, s);
    init.dst = part;
    kt_lower_add_stmt(c, tn, &init);
    int ko;
    snprintf(label, sizeof(label), "%s.rf.outer", ss->name);
    int kon = loop(c, tn, s, label, KO, KT_LOOP_SERIAL, 1, &ko);
    if (c->rc)
        return;
    kt_lower_index_t kd = kt_lower_idx_none();
    kt_lower_idx_add(c, &kd, ko, T);
    kt_lower_idx_add(c, &kd, t, 1);
    snprintf(label, sizeof(label), "%s.rf", ss->name);
    int kk = let(c, kon, s, label, kd, KO * T);
    int body = KO * T != K ? guard(c, kon, idx1(c, kk), K) : kon;
    int rx[KT_TE_MAX_REDUCE];
    unflatten(c, body, s, ss, ss->ndim, ss->nreduce, ss->reduce_ext, kk, rx);
    kt_lower_stmt_t upd = kt_lower_stmt_new(KT_STMT_UPDATE, s);
    for (int a = 0; a < ss->ndim; a++)
        upd.axis[a] = idx1(c, ax[a]);
    for (int r = 0; r < ss->nreduce; r++)
        upd.axis[ss->ndim + r] = idx1(c, rx[r]);
    upd.dst = part;
    kt_lower_add_stmt(c, body, &upd);
    unroll(c, kon, e->ann.unroll);
    kt_lower_stmt_t all = kt_lower_stmt_new(KT_STMT_ALLREDUCE, s);
    all.dst = part;
    all.src = red;
    kt_lower_add_stmt(c, tn, &all);
    int g0 = guard(c, tn, idx1(c, t), 1);
    int cons = e->fuse;
    kt_lower_stmt_t out = kt_lower_stmt_new(cons >= 0 ? KT_STMT_COMPUTE : KT_STMT_COPY,
                                            cons >= 0 ? cons : s);
    for (int a = 0; a < ss->ndim; a++) {
        out.axis[a] = idx1(c, ax[a]);
        out.dst_idx[a] = out.axis[a];
    }
    out.dst = c->gbuf[cons >= 0 ? cons : s];
    out.src = part;
    out.src_stage = s;
    kt_lower_add_stmt(c, g0, &out);
}

/* ---- TILED: multi-level tiling with shared memory --------------------------------- */

typedef struct {
    int p;                /* staged producer */
    int buf;              /* its SHARED box */
    kt_sched_access_t acc;
    int64_t box[KT_TE_MAX_DIMS], n;
} staged_t;

/* The per-thread tile nest of a tiled stage: a VTHREAD loop with its S1
 * digits, the S3 loops, the R2 loops (in the compute nest only), the S4
 * loops. The iterators of the last nest built are kept here. */
typedef struct {
    g_t *c;
    int s;
    const kt_stage_t *ss;
    const kt_sched_stage_t *e;
    int64_t vthreads;
    int s1[KT_TE_MAX_DIMS], it3[KT_TE_MAX_DIMS], it4[KT_TE_MAX_DIMS], r2[KT_TE_MAX_REDUCE];
} tile_t;

/* Returns the innermost node; *top the VTHREAD loop. */
static int nest_tile(tile_t *t, int parent, int inner_reduce, int *top)
{
    g_t *c = t->c;
    const kt_stage_t *ss = t->ss;
    int nd = ss->ndim, v;
    char label[KT_LOWER_NAME];
    fused_label(ss, t->e, 1, label, sizeof(label));
    int cur = loop(c, parent, t->s, label, t->vthreads, KT_LOOP_VTHREAD, 0, &v);
    *top = cur;
    if (c->rc)
        return -1;
    digits(c, cur, t->s, ss, t->e, 1, v, t->s1);
    for (int a = 0; a < nd; a++) {
        axis_label(ss, a, 3, label, sizeof(label));
        cur = loop(c, cur, t->s, label, t->e->split[a][3], KT_LOOP_SERIAL, 0, &t->it3[a]);
    }
    for (int r = 0; inner_reduce && r < ss->nreduce; r++) {
        axis_label(ss, nd + r, 2, label, sizeof(label));
        cur = loop(c, cur, t->s, label, t->e->split[nd + r][2], KT_LOOP_SERIAL, 1, &t->r2[r]);
    }
    for (int a = 0; a < nd; a++) {
        axis_label(ss, a, 4, label, sizeof(label));
        cur = loop(c, cur, t->s, label, t->e->split[a][4], KT_LOOP_SERIAL, 0, &t->it4[a]);
    }
    return cur;
}

/* Index of the register tile: per axis S1 x S3 x S4. */
static void tile_idx(tile_t *t, kt_lower_index_t *idx)
{
    const kt_sched_stage_t *e = t->e;
    for (int a = 0; a < t->ss->ndim; a++) {
        idx[a] = kt_lower_idx_none();
        kt_lower_idx_add(t->c, &idx[a], t->s1[a], (int64_t)e->split[a][3] * e->split[a][4]);
        kt_lower_idx_add(t->c, &idx[a], t->it3[a], e->split[a][4]);
        kt_lower_idx_add(t->c, &idx[a], t->it4[a], 1);
    }
}

/* The value of every spatial axis: its five levels. */
static void spatial_axes(tile_t *t, const int *s0, const int *s2, kt_lower_index_t *axis)
{
    const kt_sched_stage_t *e = t->e;
    const int SL = KT_SCHED_GPU_SPATIAL_LEVELS;
    for (int a = 0; a < t->ss->ndim; a++) {
        axis[a] = kt_lower_idx_none();
        kt_lower_idx_add(t->c, &axis[a], s0[a], level_stride(e, a, 0, SL));
        kt_lower_idx_add(t->c, &axis[a], t->s1[a], level_stride(e, a, 1, SL));
        kt_lower_idx_add(t->c, &axis[a], s2[a], level_stride(e, a, 2, SL));
        kt_lower_idx_add(t->c, &axis[a], t->it3[a], level_stride(e, a, 3, SL));
        kt_lower_idx_add(t->c, &axis[a], t->it4[a], 1);
    }
}

static void lower_tiled(g_t *c, int s, const kt_sched_gpu_kernel_t *k)
{
    const kt_dag_t *dag = c->dag;
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    const kt_sched_stage_t *e = &c->st->stages[s];
    int nd = ss->ndim, nr = ss->nreduce;
    const int SL = KT_SCHED_GPU_SPATIAL_LEVELS, RL = KT_SCHED_GPU_REDUCE_LEVELS;
    int kn = new_kernel(c, k);
    char label[KT_LOWER_NAME], name[KT_LOWER_NAME];

    /* shared boxes of the staged producers */
    staged_t stg[KT_TE_MAX_STAGES];
    int nstg = 0;
    int64_t smem = 0;
    for (int p = 0; p < c->st->nstages && p < 32; p++) {
        if (!((e->smem >> p) & 1u))
            continue;
        staged_t *x = &stg[nstg];
        x->p = p;
        if (!kt_sched_gpu_access(dag, c->L->inline_mask, s, p, &x->acc)) {
            c->rc = kt_err_set(KT_EINTERNAL, "lowering: stage '%s' cannot be staged",
                               kt_dag_stage(dag, p)->name);
            return;
        }
        x->n = kt_sched_gpu_box(e, ss, &x->acc, x->box);
        const kt_stage_t *ps = kt_dag_stage(dag, p);
        snprintf(name, sizeof(name), "kt_%s_sh", ps->name);
        snprintf(label, sizeof(label), "%s.shared", ps->name);
        x->buf = kt_lower_new_buf(c, KT_BUF_SHARED, p, name, label, ps->ndim, x->box);
        alloc(c, kn, x->buf);
        smem += (x->n * (int64_t)sizeof(float) + 15) & ~(int64_t)15;
        nstg++;
    }
    if (smem != k->smem_bytes && !c->rc)
        c->rc = kt_err_set(KT_EINTERNAL, "lowering: shared memory %lld differs from the "
                                         "schedule's %lld", (long long)smem,
                           (long long)k->smem_bytes);

    int b, t, s0[KT_TE_MAX_DIMS], s2[KT_TE_MAX_DIMS];
    fused_label(ss, e, 0, label, sizeof(label));
    int bn = loop(c, kn, s, label, k->grid, KT_LOOP_BLOCK, 0, &b);
    if (c->rc)
        return;
    digits(c, bn, s, ss, e, 0, b, s0);
    fused_label(ss, e, 2, label, sizeof(label));
    int tn = loop(c, bn, s, label, k->threads, KT_LOOP_THREAD, 0, &t);
    if (c->rc)
        return;
    digits(c, tn, s, ss, e, 2, t, s2);

    /* the register tile: per axis S1 x S3 x S4 */
    int64_t tile[KT_TE_MAX_DIMS];
    for (int a = 0; a < nd; a++)
        tile[a] = (int64_t)e->split[a][1] * e->split[a][3] * e->split[a][4];
    snprintf(name, sizeof(name), "kt_%s_local", ss->name);
    snprintf(label, sizeof(label), "%s.local", ss->name);
    int acc = kt_lower_new_buf(c, KT_BUF_LOCAL, s, name, label, nd, tile);
    alloc(c, tn, acc);

    /* init */
    tile_t tl = {.c = c, .s = s, .ss = ss, .e = e, .vthreads = k->vthreads};
    int top, node = nest_tile(&tl, tn, 0, &top);
    kt_lower_stmt_t init = kt_lower_stmt_new(KT_STMT_INIT, s);
    init.dst = acc;
    tile_idx(&tl, init.dst_idx);
    kt_lower_add_stmt(c, node, &init);
    unroll(c, top, e->ann.unroll);

    /* R0: uniform loops around the fetch and the compute */
    int r0[KT_TE_MAX_REDUCE], cur = tn;
    int64_t r0_total = 1;
    for (int r = 0; r < nr; r++) {
        axis_label(ss, nd + r, 0, label, sizeof(label));
        cur = loop(c, cur, s, label, e->split[nd + r][0], KT_LOOP_SERIAL, 1, &r0[r]);
        r0_total *= e->split[nd + r][0];
    }
    if (c->rc)
        return;
    if (nstg > 0 && r0_total > 1)
        new_node(c, KT_NODE_BARRIER, cur);   /* the previous step's reads are done */
    int64_t T = k->threads, vec = e->vec > 0 ? e->vec : 1;
    for (int i = 0; i < nstg && !c->rc; i++) {
        staged_t *x = &stg[i];
        const kt_stage_t *ps = kt_dag_stage(dag, x->p);
        int64_t F = (x->n + T * vec - 1) / (T * vec);
        int f, vv;
        snprintf(label, sizeof(label), "%s.shared.f", ps->name);
        int fn = loop(c, cur, x->p, label, F, KT_LOOP_SERIAL, 0, &f);
        snprintf(label, sizeof(label), "%s.shared.v", ps->name);
        int vn = loop(c, fn, x->p, label, vec, vec > 1 ? KT_LOOP_UNROLL : KT_LOOP_SERIAL, 0, &vv);
        if (c->rc)
            return;
        kt_lower_index_t id = kt_lower_idx_none();
        kt_lower_idx_add(c, &id, f, T * vec);
        kt_lower_idx_add(c, &id, t, vec);
        kt_lower_idx_add(c, &id, vv, 1);
        snprintf(label, sizeof(label), "%s.shared.i", ps->name);
        int ii = let(c, vn, x->p, label, id, F * T * vec);
        int body = F * T * vec != x->n ? guard(c, vn, idx1(c, ii), x->n) : vn;
        int cd[KT_TE_MAX_DIMS];
        int64_t bstride = 1;
        for (int d = ps->ndim - 1; d >= 0; d--) {
            cd[d] = -1;
            if (x->box[d] > 1) {
                snprintf(label, sizeof(label), "%s.shared.%d", ps->name, d);
                cd[d] = let_digit(c, body, x->p, label, ii, bstride, d == 0 ? 0 : x->box[d]);
            }
            bstride *= x->box[d];
        }
        kt_lower_stmt_t fe = kt_lower_stmt_new(KT_STMT_FETCH, x->p);
        fe.dst = x->buf;
        for (int d = 0; d < ps->ndim; d++) {
            fe.dst_idx[d] = idx1(c, cd[d]);
            kt_lower_index_t co = kt_lower_idx_none();
            for (int a = 0; a < nd; a++)
                if (x->acc.coef[d][a])
                    kt_lower_idx_add(c, &co, s0[a], x->acc.coef[d][a] * level_stride(e, a, 0, SL));
            for (int r = 0; r < nr; r++)
                if (x->acc.coef[d][nd + r])
                    kt_lower_idx_add(c, &co, r0[r],
                                     x->acc.coef[d][nd + r] * level_stride(e, nd + r, 0, RL));
            kt_lower_idx_add(c, &co, cd[d], 1);
            fe.axis[d] = co;
            fe.src_idx[d] = co;
        }
        fe.src = (c->L->inline_mask >> x->p) & 1u ? -1 : c->gbuf[x->p];
        if (fe.src < 0 && !((c->L->inline_mask >> x->p) & 1u))
            c->rc = kt_err_set(KT_EINTERNAL, "lowering: no buffer for '%s'", ps->name);
        kt_lower_add_stmt(c, body, &fe);
        /* One vector load and store per thread and step when the vec
         * elements are contiguous in both buffers and every group starts
         * on a multiple of vec: a global buffer whose rows and box origin
         * are multiples of vec (buffers are 256-byte aligned). */
        int last = ps->ndim - 1, vload = vec > 1 && fe.src >= 0 && last >= 0 &&
                                          x->box[last] % vec == 0 && ps->shape[last] % vec == 0;
        for (int t = 0; vload && t < fe.src_idx[last].nterms; t++)
            if (fe.src_idx[last].iter[t] != cd[last] && fe.src_idx[last].coef[t] % vec != 0)
                vload = 0;
        if (vload)
            c->L->nodes[vn].ann = KT_LOOP_VECTORIZE;
        unroll(c, fn, e->ann.unroll);
    }
    if (nstg > 0)
        new_node(c, KT_NODE_BARRIER, cur);   /* the boxes are complete */

    /* compute: R1, then the tile with R2 inside */
    int r1[KT_TE_MAX_REDUCE], comp = cur, first = -1;
    for (int r = 0; r < nr; r++) {
        axis_label(ss, nd + r, 1, label, sizeof(label));
        comp = loop(c, comp, s, label, e->split[nd + r][1], KT_LOOP_SERIAL, 1, &r1[r]);
        if (first < 0)
            first = comp;
    }
    node = nest_tile(&tl, comp, 1, &top);
    if (first < 0)
        first = top;
    if (c->rc)
        return;
    kt_lower_stmt_t upd = kt_lower_stmt_new(KT_STMT_UPDATE, s);
    upd.dst = acc;
    tile_idx(&tl, upd.dst_idx);
    spatial_axes(&tl, s0, s2, upd.axis);
    for (int r = 0; r < nr; r++) {
        kt_lower_index_t *x = &upd.axis[nd + r];
        kt_lower_idx_add(c, x, r0[r], level_stride(e, nd + r, 0, RL));
        kt_lower_idx_add(c, x, r1[r], level_stride(e, nd + r, 1, RL));
        kt_lower_idx_add(c, x, tl.r2[r], 1);
    }
    int us = kt_lower_add_stmt(c, node, &upd);
    for (int i = 0; i < nstg && !c->rc; i++) {
        /* the box index: each coordinate minus the box origin */
        staged_t *x = &stg[i];
        kt_lower_index_t bi[KT_TE_MAX_DIMS + 1];
        for (int d = 0; d < x->acc.ndim; d++) {
            bi[d] = kt_lower_idx_none();
            for (int a = 0; a < nd; a++) {
                int64_t cf = x->acc.coef[d][a];
                if (!cf)
                    continue;
                kt_lower_idx_add(c, &bi[d], tl.s1[a], cf * level_stride(e, a, 1, SL));
                kt_lower_idx_add(c, &bi[d], s2[a], cf * level_stride(e, a, 2, SL));
                kt_lower_idx_add(c, &bi[d], tl.it3[a], cf * level_stride(e, a, 3, SL));
                kt_lower_idx_add(c, &bi[d], tl.it4[a], cf);
            }
            for (int r = 0; r < nr; r++) {
                int64_t cf = x->acc.coef[d][nd + r];
                if (!cf)
                    continue;
                kt_lower_idx_add(c, &bi[d], r1[r], cf * level_stride(e, nd + r, 1, RL));
                kt_lower_idx_add(c, &bi[d], tl.r2[r], cf);
            }
        }
        kt_lower_add_sub(c, us, x->p, x->buf, bi, x->acc.ndim);
    }
    unroll(c, first, e->ann.unroll);

    /* epilogue on the register tile: the fused consumer or the copy-out */
    node = nest_tile(&tl, tn, 0, &top);
    if (c->rc)
        return;
    int cons = e->fuse;
    kt_lower_stmt_t out = kt_lower_stmt_new(cons >= 0 ? KT_STMT_COMPUTE : KT_STMT_COPY,
                                            cons >= 0 ? cons : s);
    spatial_axes(&tl, s0, s2, out.axis);
    for (int a = 0; a < nd; a++)
        out.dst_idx[a] = out.axis[a];
    out.dst = c->gbuf[cons >= 0 ? cons : s];
    out.src = acc;
    out.src_stage = s;
    tile_idx(&tl, out.src_idx);
    kt_lower_add_stmt(c, node, &out);
}

/* ---- entry ---------------------------------------------------------------------------- */

kt_lower_t *kt_lower_gpu(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    /* Structure only: lowering is correct whatever the limits were. */
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    p.max_innermost_split_factor = INT_MAX;
    p.max_threads_per_block = INT_MAX;
    p.max_shared_memory_per_block = INT_MAX;
    p.max_vthread_extent = INT_MAX;
    if (kt_sched_state_validate(dag, &p, st) != 0) {
        kt_err_prefix("lowering");
        return NULL;
    }
    int n = kt_dag_num_stages(dag);
    kt_sched_gpu_kernel_t ks[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, ks);
    if (nk < 0)
        return NULL;
    kt_lower_t *L = calloc(1, sizeof(*L));
    if (!L) {
        kt_err_set(KT_ENOMEM, "lowering: out of memory");
        return NULL;
    }
    L->first = -1;
    L->target = KT_SCHED_TARGET_CUDA;
    L->inline_mask = kt_sched_inline_mask(st);
    g_t c;
    kt_lower_ctx_init(&c, dag, st, L);
    /* Intermediates that are stored live in the workspace, 256-byte aligned. */
    for (int s = 0; s < n; s++) {
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        const kt_sched_stage_t *e = &st->stages[s];
        if (c.gbuf[s] >= 0 || ss->kind != KT_STAGE_COMPUTE || e->kind == KT_SK_INLINE ||
            ((e->kind == KT_SK_TILED || e->kind == KT_SK_XREDUCE) && e->fuse >= 0))
            continue;
        c.gbuf[s] = kt_lower_new_buf(&c, KT_BUF_HEAP, s, ss->name, ss->name, ss->ndim, ss->shape);
        if (c.gbuf[s] >= 0) {
            L->bufs[c.gbuf[s]].offset = L->workspace;
            L->workspace += (kt_stage_numel(ss) + 63) & ~(int64_t)63;
        }
    }
    for (int i = 0; i < nk && !c.rc; i++) {
        switch (ks[i].kind) {
        case KT_SK_TILED:
            lower_tiled(&c, ks[i].stage, &ks[i]);
            break;
        case KT_SK_XREDUCE:
            lower_xreduce(&c, ks[i].stage, &ks[i]);
            break;
        default:
            lower_root(&c, ks[i].stage, &ks[i]);
            break;
        }
    }
    if (c.rc) {
        kt_err_prefix("lowering");
        kt_lower_free(L);
        return NULL;
    }
    return L;
}
