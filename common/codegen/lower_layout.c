/* Layout rewrite of weights (Ansor's RewriteLayout, INSERT_TRANSFORM_STAGE).
 *
 * A layout-free placeholder (a weight: kt_dag_set_layout_free) read only by a
 * multi-level tiled stage, with every dimension indexed by one of its axes,
 * is copied at the start of the kernel into a heap buffer whose dimensions
 * are the loops around the stage's update that index it, in nest order
 * (loops of extent 1 dropped); the update then reads the copy with one
 * iterator per dimension. Its innermost loops so walk the weight
 * contiguously: a 16-column panel of matmul 512's B becomes 64 contiguous
 * bytes per k where it was one cache line every 2 KiB, a stride that maps a
 * long k loop onto a few cache sets. Prepacked (kt_lower_ex), the update
 * reads the weight from its kernel argument already in that layout and no
 * copy is made: the variant the runner times and a built network runs. */
#include <stdio.h>
#include <string.h>

#include "codegen_int.h"
#include "lower.h"

#define MAX_PATH 256   /* nodes from the top level to a statement */

/* The axes indexing every load of p in e: 1 when all loads of p index each
 * dimension with a plain axis, the same ones and no axis twice; 0 when some
 * load does not (or none exists). */
static int plain_axes(const kt_expr_t *e, int p, int ndim, int *axes, int *seen)
{
    if (!e)
        return 1;
    if (e->kind == KT_EX_LOAD && e->tensor == p) {
        if (e->nargs != ndim)
            return 0;
        for (int d = 0; d < ndim; d++) {
            const kt_expr_t *x = e->args[d];
            if (x->kind != KT_EX_AXIS || (*seen && axes[d] != x->axis))
                return 0;
            for (int q = 0; q < d; q++)
                if (axes[q] == x->axis)
                    return 0;
            axes[d] = x->axis;
        }
        *seen = 1;
        return 1;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!plain_axes(e->args[i], p, ndim, axes, seen))
            return 0;
    return 1;
}

/* Nodes from the top level down to the STMT node of statement k; their
 * number, 0 when not found or nested deeper than MAX_PATH. */
static int find_path(const kt_lower_t *L, int first, int k, int *path, int depth)
{
    if (depth >= MAX_PATH)
        return 0;
    for (int x = first; x >= 0; x = L->nodes[x].next) {
        path[depth] = x;
        if (L->nodes[x].kind == KT_NODE_STMT && L->nodes[x].stmt == k)
            return depth + 1;
        int n = find_path(L, L->nodes[x].child, k, path, depth + 1);
        if (n)
            return n;
    }
    return 0;
}

/* Coefficient of iterator it in x, 0 when absent. */
static int64_t coef_of(const kt_lower_index_t *x, int it)
{
    for (int t = 0; t < x->nterms; t++)
        if (x->iter[t] == it)
            return x->coef[t];
    return 0;
}

typedef struct {
    int iter;       /* loop of the consumer's nest */
    int dim;        /* weight dimension it indexes */
    int64_t coef;   /* its step in that dimension */
} lay_t;

/* Every iterator of extent > 1 in each dimension's index is one of lay's,
 * and their steps form an exact mixed radix of the dimension's extent: the
 * copy is then a permutation of the weight. */
static int covers(const kt_lower_t *L, const kt_stage_t *ps, const int *axes,
                  const kt_lower_stmt_t *st, const lay_t *lay, int n)
{
    for (int d = 0; d < ps->ndim; d++) {
        const kt_lower_index_t *x = &st->axis[axes[d]];
        if (x->div != 1 || x->mod != 0)
            return 0;
        for (int t = 0; t < x->nterms; t++) {
            int found = L->iters[x->iter[t]].extent <= 1;
            for (int m = 0; m < n && !found; m++)
                found = lay[m].iter == x->iter[t];
            if (!found)
                return 0;
        }
        int64_t need = 1;   /* the next step the radix needs */
        for (int used = 0;; used++) {
            int m = 0;
            while (m < n && !(lay[m].dim == d && lay[m].coef == need))
                m++;
            if (m == n) {
                /* every loop of d used, each once, and the extent reached */
                int count = 0;
                for (int q = 0; q < n; q++)
                    count += lay[q].dim == d;
                if (count != used || need != ps->shape[d])
                    return 0;
                break;
            }
            need *= L->iters[lay[m].iter].extent;
        }
    }
    return 1;
}

/* The copy of weight p in the layout of lay, as a nest placed before top. */
static void add_copy_nest(kt_lower_ctx_t *c, int p, int top, const lay_t *lay, int n, int buf)
{
    kt_lower_t *L = c->L;
    const kt_stage_t *ps = kt_dag_stage(c->dag, p);
    kt_lower_stmt_t cp = kt_lower_stmt_new(KT_STMT_COPY, p);
    cp.dst = buf;
    cp.src = c->gbuf[p];
    int head = -1, cur = -1;
    for (int m = 0; m < n && !c->rc; m++) {
        const kt_lower_iter_t *orig = &L->iters[lay[m].iter];
        char label[KT_LOWER_NAME];
        snprintf(label, sizeof(label), "%.20s.%.40s", ps->name, orig->label);
        int it = kt_lower_new_iter(c, p, label, orig->extent, 0);
        int node = kt_lower_new_node(c, KT_NODE_LOOP);
        if (it < 0 || node < 0)
            return;
        L->nodes[node].iter = it;
        /* the copy's outer loop shares the threads when the kernel uses them */
        L->nodes[node].ann = m == 0 && L->uses_parallel ? KT_LOOP_PARALLEL : KT_LOOP_SERIAL;
        if (cur < 0)
            head = node;
        else
            kt_lower_append(c, cur, node);
        cur = node;
        kt_lower_idx_add(c, &cp.dst_idx[m], it, 1);
        kt_lower_idx_add(c, &cp.src_idx[lay[m].dim], it, lay[m].coef);
    }
    if (c->rc || head < 0 || kt_lower_add_stmt(c, cur, &cp) < 0)
        return;
    /* splice the nest in before top */
    int *link = &L->first;
    while (*link >= 0 && *link != top)
        link = &L->nodes[*link].next;
    L->nodes[head].next = *link;
    *link = head;
}

/* Rewrite weight p for the update statement k when its loops allow it. */
static void rewrite_one(kt_lower_ctx_t *c, int k, int p)
{
    kt_lower_t *L = c->L;
    const kt_lower_stmt_t st = L->stmts[k];
    const kt_stage_t *ps = kt_dag_stage(c->dag, p);
    const kt_stage_t *ss = kt_dag_stage(c->dag, st.stage);
    int axes[KT_TE_MAX_DIMS], seen = 0;
    if (ps->ndim > KT_TE_MAX_DIMS || !plain_axes(ss->body, p, ps->ndim, axes, &seen) || !seen)
        return;
    int path[MAX_PATH];
    int np = find_path(L, L->first, k, path, 0);
    lay_t lay[KT_TE_MAX_DIMS + 1];
    int n = 0;
    for (int q = 0; q < np; q++) {
        const kt_lower_node_t *nd = &L->nodes[path[q]];
        if (nd->kind != KT_NODE_LOOP || L->iters[nd->iter].extent <= 1)
            continue;
        int hits = 0;
        for (int d = 0; d < ps->ndim; d++) {
            int64_t cf = coef_of(&st.axis[axes[d]], nd->iter);
            if (!cf)
                continue;
            if (hits++ || n == KT_TE_MAX_DIMS + 1)
                return;   /* one loop in two dimensions, or too many dimensions */
            lay[n++] = (lay_t){.iter = nd->iter, .dim = d, .coef = cf};
        }
    }
    if (!np || !n || !covers(L, ps, axes, &st, lay, n))
        return;
    if (L->npacks == KT_LOWER_MAX_PACKS)
        return;
    int64_t shape[KT_TE_MAX_DIMS + 1];
    for (int m = 0; m < n; m++)
        shape[m] = L->iters[lay[m].iter].extent;
    char name[KT_LOWER_NAME], label[KT_LOWER_NAME];
    snprintf(name, sizeof(name), "kt_%s_layout", ps->name);
    snprintf(label, sizeof(label), "%s.layout", ps->name);
    /* Prepacked: the caller passes the weight in this layout as its argument. */
    int arg = L->bufs[c->gbuf[p]].arg;
    int buf = kt_lower_new_buf(c, L->prepacked ? KT_BUF_INPUT : KT_BUF_HEAP, p, name, label, n,
                               shape);
    if (buf < 0)
        return;
    kt_lower_pack_t *pk = &L->packs[L->npacks++];
    pk->stage = p;
    pk->arg = arg;
    pk->ndim = n;
    for (int m = 0; m < n; m++) {
        pk->shape[m] = shape[m];
        pk->dim[m] = lay[m].dim;
        pk->coef[m] = lay[m].coef;
    }
    if (L->prepacked)
        L->bufs[buf].arg = arg;
    kt_lower_index_t idx[KT_TE_MAX_DIMS + 1];
    for (int m = 0; m < n; m++) {
        idx[m] = kt_lower_idx_none();
        kt_lower_idx_add(c, &idx[m], lay[m].iter, 1);
    }
    kt_lower_add_sub(c, k, p, buf, idx, n);
    if (!L->prepacked)
        add_copy_nest(c, p, path[0], lay, n, buf);
}

void kt_lower_rewrite_layouts(kt_lower_ctx_t *c)
{
    kt_lower_t *L = c->L;
    int nstmts = L->nstmts;   /* the copies added below are not candidates */
    for (int k = 0; k < nstmts && !c->rc; k++) {
        int s = L->stmts[k].stage;
        if (L->stmts[k].kind != KT_STMT_UPDATE || c->st->stages[s].kind != KT_SK_TILED)
            continue;
        for (int p = 0; p < kt_dag_num_stages(c->dag) && !c->rc; p++) {
            const kt_stage_t *ps = kt_dag_stage(c->dag, p);
            int cons[KT_TE_MAX_STAGES];
            if (ps->kind != KT_STAGE_PLACEHOLDER || !ps->layout_free ||
                kt_dag_consumers(c->dag, p, cons) != 1 || cons[0] != s)
                continue;
            rewrite_one(c, k, p);
        }
    }
}
