/* Building blocks of lowered programs shared by the CPU (lower.c) and GPU
 * (lower_gpu.c) lowerings: growing arrays, iterators, buffers, nodes,
 * statements and affine indices. Every function records the first error in
 * c->rc and does nothing once it is set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen_int.h"
#include "util/err.h"

int kt_lower_grow(kt_lower_ctx_t *c, void **p, int *cap, int n, size_t elem)
{
    if (c->rc)
        return -1;
    if (n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *np = realloc(*p, (size_t)ncap * elem);
    if (!np) {
        c->rc = kt_err_set(KT_ENOMEM, "lowering: out of memory");
        return -1;
    }
    *p = np;
    *cap = ncap;
    return 0;
}

kt_lower_index_t kt_lower_idx_none(void)
{
    kt_lower_index_t x;
    memset(&x, 0, sizeof(x));
    x.div = 1;
    return x;
}

void kt_lower_idx_add(kt_lower_ctx_t *c, kt_lower_index_t *x, int iter, int64_t coef)
{
    if (iter < 0 || coef == 0)
        return;
    for (int t = 0; t < x->nterms; t++)
        if (x->iter[t] == iter) {
            x->coef[t] += coef;
            return;
        }
    if (x->nterms >= KT_LOWER_MAX_TERMS) {
        if (!c->rc)
            c->rc = kt_err_set(KT_EINTERNAL, "lowering: index with too many terms");
        return;
    }
    x->iter[x->nterms] = iter;
    x->coef[x->nterms++] = coef;
}

int kt_lower_new_iter(kt_lower_ctx_t *c, int stage, const char *label, int64_t extent, int reduce)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->iters, &c->cap_iters, L->niters, sizeof(*L->iters)))
        return -1;
    int id = L->niters++;
    kt_lower_iter_t *it = &L->iters[id];
    memset(it, 0, sizeof(*it));
    snprintf(it->label, sizeof(it->label), "%s", label);
    /* C name: the label's identifier characters plus the unique id, so two
     * iterators never collide whatever the axis names are. */
    char clean[KT_LOWER_NAME];
    size_t k = 0;
    for (const char *p = label; *p && k < 40; p++)
        clean[k++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9'))
                         ? *p
                         : '_';
    clean[k] = '\0';
    snprintf(it->name, sizeof(it->name), "kt_%.40s_%d", clean, id);
    it->extent = extent;
    it->stage = stage;
    it->reduce = reduce;
    it->def = kt_lower_idx_none();
    return id;
}

int kt_lower_new_node(kt_lower_ctx_t *c, kt_node_kind_t kind)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->nodes, &c->cap_nodes, L->nnodes, sizeof(*L->nodes)))
        return -1;
    int id = L->nnodes++;
    kt_lower_node_t *n = &L->nodes[id];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->iter = n->stmt = n->buf = n->kernel = n->guard = -1;
    n->child = n->next = -1;
    return id;
}

void kt_lower_append(kt_lower_ctx_t *c, int parent, int node)
{
    kt_lower_t *L = c->L;
    if (node < 0)
        return;
    int *link = parent < 0 ? &L->first : &L->nodes[parent].child;
    while (*link >= 0)
        link = &L->nodes[*link].next;
    *link = node;
}

int kt_lower_new_buf(kt_lower_ctx_t *c, kt_buf_kind_t kind, int stage, const char *name,
                     const char *label, int ndim, const int64_t *shape)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->bufs, &c->cap_bufs, L->nbufs, sizeof(*L->bufs)))
        return -1;
    int id = L->nbufs++;
    kt_lower_buf_t *b = &L->bufs[id];
    memset(b, 0, sizeof(*b));
    snprintf(b->name, sizeof(b->name), "%s", name);
    snprintf(b->label, sizeof(b->label), "%s", label);
    b->kind = kind;
    b->stage = stage;
    b->arg = -1;
    b->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        b->shape[d] = shape[d];
    return id;
}

kt_lower_stmt_t kt_lower_stmt_new(kt_stmt_kind_t kind, int stage)
{
    kt_lower_stmt_t s;
    memset(&s, 0, sizeof(s));
    s.kind = kind;
    s.stage = stage;
    s.dst = s.src = s.src_stage = -1;
    for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
        s.axis[a] = kt_lower_idx_none();
    for (int d = 0; d <= KT_TE_MAX_DIMS; d++)
        s.dst_idx[d] = s.src_idx[d] = kt_lower_idx_none();
    return s;
}

int kt_lower_add_stmt(kt_lower_ctx_t *c, int parent, const kt_lower_stmt_t *s)
{
    kt_lower_t *L = c->L;
    if (kt_lower_grow(c, (void **)&L->stmts, &c->cap_stmts, L->nstmts, sizeof(*L->stmts)))
        return -1;
    int id = L->nstmts++;
    L->stmts[id] = *s;
    int n = kt_lower_new_node(c, KT_NODE_STMT);
    if (n < 0)
        return -1;
    L->nodes[n].stmt = id;
    kt_lower_append(c, parent, n);
    return id;
}

void kt_lower_ctx_init(kt_lower_ctx_t *c, const kt_dag_t *dag, const kt_sched_state_t *st,
                       kt_lower_t *L)
{
    memset(c, 0, sizeof(*c));
    c->dag = dag;
    c->st = st;
    c->L = L;
    for (int s = 0; s < KT_TE_MAX_STAGES; s++)
        c->gbuf[s] = -1;
    int nb = kt_codegen_num_bufs(dag);
    for (int i = 0; i < nb; i++) {
        int s = kt_codegen_buf_stage(dag, i);
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        kt_buf_kind_t kind = ss->kind == KT_STAGE_PLACEHOLDER ? KT_BUF_INPUT : KT_BUF_OUTPUT;
        c->gbuf[s] = kt_lower_new_buf(c, kind, s, ss->name, ss->name, ss->ndim, ss->shape);
        if (c->gbuf[s] >= 0)
            L->bufs[c->gbuf[s]].arg = i;
    }
}

void kt_lower_add_sub(kt_lower_ctx_t *c, int stmt, int stage, int buf, const kt_lower_index_t *idx,
                      int ndim)
{
    kt_lower_t *L = c->L;
    if (stmt < 0 || kt_lower_grow(c, (void **)&L->subs, &c->cap_subs, L->nsubs, sizeof(*L->subs)))
        return;
    kt_lower_sub_t *x = &L->subs[L->nsubs++];
    memset(x, 0, sizeof(*x));
    x->stmt = stmt;
    x->stage = stage;
    x->buf = buf;
    for (int d = 0; d < ndim; d++)
        x->idx[d] = idx[d];
    for (int d = ndim; d <= KT_TE_MAX_DIMS; d++)
        x->idx[d] = kt_lower_idx_none();
}
