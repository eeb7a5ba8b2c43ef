/* The C emitter: a lowered program printed as one kernel function.
 *
 * Loop annotations become pragmas: PARALLEL loops (fused) -> one
 * `#pragma omp parallel for collapse(n)`, VECTORIZE loops -> `#pragma omp
 * simd collapse(n)`, UNROLL loops (those auto_unroll_max_step unrolls, see
 * lower.c) -> `#pragma GCC unroll <extent>`. Loops of extent 1 are not
 * printed (their variable contributes nothing to any index). Local tiles
 * are stack arrays (heap when larger than KT_LOWER_LOCAL_STACK_BYTES), so
 * register tiles of a tiled stage are plain local arrays GCC can keep in
 * registers. The kernel is wrapped in GCC pragmas: 512-bit vectors, no loop
 * unswitching, and floating-point contraction (multiply-adds become FMAs
 * even under the builders' -std=c17).
 *
 * Two decisions beyond the lowered program, both for GCC's sake:
 * - the body of a parallel loop group is a static function of its own
 *   (kt_par<N>_<entry>, restrict buffers and the enclosing iterators as
 *   arguments) that the OpenMP loop calls once per iteration;
 * - the innermost reduce loop whose body is fully unrolled (a register tile's
 *   update) is unrolled KT_EMIT_PARTIAL_UNROLL times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "lower.h"
#include "util/err.h"

#define MAX_OUTER 256  /* loops nested in one kernel (their iterators are tracked) */
#define KT_EMIT_PARTIAL_UNROLL 4          /* copies of an innermost reduce loop */
#define KT_EMIT_PARTIAL_UNROLL_STEPS 256  /* ... whose unrolled body runs at most this many
                                             statements */

typedef struct {
    const kt_dag_t *dag;
    const kt_lower_t *L;
    kt_sbuf_t *out;
    kt_sbuf_t *fns;        /* helper functions, printed before the kernel */
    const char *entry;
    int rc;
    int npar;              /* parallel bodies outlined so far */
    int par_last;          /* innermost loop node of the open parallel group, -1 if none */
    int nallocs;           /* local buffers in scope */
    int nouter;            /* live loops enclosing the current node */
    int outer[MAX_OUTER];
    int branch;            /* 1 or 2: statements print that operand of their stage's
                              select (an unswitched loop, see unswitch_cond); 0: all */
} emit_t;

/* ---- indices (shared with the CUDA emitters) ------------------------------------ */

static int live_iter(const kt_lower_t *L, int it) { return it >= 0 && L->iters[it].extent > 1; }

static int shown(const kt_codegen_index_style_t *st, int it)
{
    return live_iter(st->L, it) && it != st->hide;
}

/* Print name or cast name, then *coef with the style's constant suffix. */
static void term(const kt_codegen_index_style_t *st, int it, int64_t coef, kt_sbuf_t *b)
{
    kt_sbuf_printf(b, "%s%s", st->cast, st->L->iters[it].name);
    if (coef != 1)
        kt_sbuf_printf(b, "*%lld%s", (long long)coef, st->suffix);
}

void kt_codegen_index(const kt_codegen_index_style_t *st, const kt_lower_index_t *x, kt_sbuf_t *b)
{
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    int n = 0;
    for (int t = 0; t < x->nterms; t++) {
        if (!shown(st, x->iter[t]) || x->coef[t] == 0)
            continue;
        if (n++)
            kt_sbuf_puts(&s, " + ");
        term(st, x->iter[t], x->coef[t], &s);
    }
    if (n == 0)
        kt_sbuf_printf(&s, "0%s", st->suffix);
    if (x->div > 1 || x->mod > 0) {
        kt_sbuf_printf(b, "((%s)", s.data);
        if (x->div > 1)
            kt_sbuf_printf(b, " / %lld%s", (long long)x->div, st->suffix);
        if (x->mod > 0)
            kt_sbuf_printf(b, " %% %lld%s", (long long)x->mod, st->suffix);
        kt_sbuf_puts(b, ")");
    } else {
        kt_sbuf_puts(b, s.data ? s.data : "0");
    }
    if (s.failed)
        b->failed = 1;
    kt_sbuf_free(&s);
}

void kt_codegen_flat_index(const kt_codegen_index_style_t *st, int buf,
                           const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    const kt_lower_buf_t *bf = &st->L->bufs[buf];
    int64_t stride[KT_TE_MAX_DIMS + 1];
    for (int d = bf->ndim - 1; d >= 0; d--)
        stride[d] = d == bf->ndim - 1 ? 1 : stride[d + 1] * bf->shape[d + 1];
    /* merged terms may exceed one index's capacity */
    int iters[KT_LOWER_MAX_TERMS * (KT_TE_MAX_DIMS + 1)];
    int64_t coef[KT_LOWER_MAX_TERMS * (KT_TE_MAX_DIMS + 1)];
    int n = 0, parts = 0;
    kt_sbuf_t nonaff;
    kt_sbuf_init(&nonaff);
    for (int d = 0; d < bf->ndim; d++) {
        const kt_lower_index_t *x = &idx[d];
        if (x->div > 1 || x->mod > 0) {
            if (parts++)
                kt_sbuf_puts(&nonaff, " + ");
            kt_codegen_index(st, x, &nonaff);
            if (stride[d] != 1)
                kt_sbuf_printf(&nonaff, "*%lld%s", (long long)stride[d], st->suffix);
            continue;
        }
        for (int t = 0; t < x->nterms; t++) {
            if (!shown(st, x->iter[t]))
                continue;
            int k = 0;
            while (k < n && iters[k] != x->iter[t])
                k++;
            if (k == n) {
                iters[n] = x->iter[t];
                coef[n++] = 0;
            }
            coef[k] += x->coef[t] * stride[d];
        }
    }
    int printed = 0;
    for (int k = 0; k < n; k++) {
        if (coef[k] == 0)
            continue;
        if (printed++)
            kt_sbuf_puts(b, " + ");
        term(st, iters[k], coef[k], b);
    }
    if (parts) {
        if (printed++)
            kt_sbuf_puts(b, " + ");
        kt_sbuf_puts(b, nonaff.data);
    }
    if (!printed)
        kt_sbuf_puts(b, "0");
    if (nonaff.failed)
        b->failed = 1;
    kt_sbuf_free(&nonaff);
}

/* C kernels: 64-bit constants, every live iterator shown. */
static void index_c(const kt_lower_t *L, const kt_lower_index_t *x, kt_sbuf_t *b)
{
    kt_codegen_index_style_t st = {.L = L, .hide = -1, .cast = "", .suffix = "LL"};
    kt_codegen_index(&st, x, b);
}

static void access_c(const kt_lower_t *L, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    kt_codegen_index_style_t st = {.L = L, .hide = -1, .cast = "", .suffix = "LL"};
    kt_sbuf_printf(b, "%s[", L->bufs[buf].name);
    kt_codegen_flat_index(&st, buf, idx, b);
    kt_sbuf_puts(b, "]");
}

/* ---- statements ------------------------------------------------------------------ */

static int is_ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* Replace every `name[...]` in text (loads of a stage read elementwise by
 * this statement) with `repl`: the consumer of a tiled stage reads the local
 * tile instead of the stage's global buffer, and every such load is at the
 * consumer's own index (checked when the sketch was derived). */
void kt_codegen_replace_loads(const char *text, const char *name, const char *repl,
                              kt_sbuf_t *b)
{
    size_t nl = strlen(name);
    const char *p = text;
    while (*p) {
        const char *q = strstr(p, name);
        if (!q) {
            kt_sbuf_puts(b, p);
            return;
        }
        int boundary = (q == text || !is_ident_char(q[-1])) && q[nl] == '[';
        if (!boundary) {
            kt_sbuf_putn(b, p, (size_t)(q - p) + nl);
            p = q + nl;
            continue;
        }
        kt_sbuf_putn(b, p, (size_t)(q - p));
        const char *r = q + nl;
        int depth = 0;
        for (; *r; r++) {
            if (*r == '[')
                depth++;
            else if (*r == ']' && --depth == 0)
                break;
        }
        kt_sbuf_puts(b, repl);
        p = *r ? r + 1 : r;
    }
}

void kt_codegen_apply_subs(const kt_dag_t *dag, const kt_lower_t *L, int si,
                           kt_codegen_access_fn access, void *ctx, kt_sbuf_t *text)
{
    kt_sbuf_t tmp;
    kt_sbuf_init(&tmp);
    for (int i = 0; i < L->nsubs; i++) {
        const kt_lower_sub_t *x = &L->subs[i];
        if (x->stmt != si)
            continue;
        kt_sbuf_t repl;
        kt_sbuf_init(&repl);
        access(ctx, x->buf, x->idx, &repl);
        kt_sbuf_clear(&tmp);
        kt_codegen_replace_loads(text->data ? text->data : "", kt_dag_stage(dag, x->stage)->name,
                                 repl.data ? repl.data : "", &tmp);
        kt_sbuf_clear(text);
        kt_sbuf_puts(text, tmp.data ? tmp.data : "");
        if (repl.failed || tmp.failed)
            text->failed = 1;
        kt_sbuf_free(&repl);
    }
    kt_sbuf_free(&tmp);
}

static void access_c_fn(void *ctx, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    access_c(ctx, buf, idx, b);
}

/* Expression x of statement s's stage printed with s's axes into b. */
static int expr_of_stmt(emit_t *e, const kt_lower_stmt_t *s, const kt_expr_t *x, kt_sbuf_t *b)
{
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t ax[KT_SCHED_MAX_AXES];
    const char *axis_c[KT_SCHED_MAX_AXES];
    int na = ss->ndim + ss->nreduce;
    for (int a = 0; a < na; a++) {
        kt_sbuf_init(&ax[a]);
        index_c(e->L, &s->axis[a], &ax[a]);
        axis_c[a] = ax[a].data ? ax[a].data : "0";
    }
    int rc = kt_codegen_expr_c_lowered(e->dag, s->stage, x, axis_c, e->L, s->axis,
                                       e->L->inline_mask, b);
    for (int a = 0; a < na; a++)
        kt_sbuf_free(&ax[a]);
    return rc;
}

static void body_c(emit_t *e, const kt_lower_stmt_t *s, kt_sbuf_t *b)
{
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t text;
    kt_sbuf_init(&text);
    const kt_expr_t *x = e->branch ? ss->body->args[e->branch] : ss->body;
    int rc = expr_of_stmt(e, s, x, &text);
    if (rc && !e->rc)
        e->rc = rc;
    if (!rc) {
        /* loads redirected to another buffer: a rewritten weight's copy */
        kt_codegen_apply_subs(e->dag, e->L, (int)(s - e->L->stmts), access_c_fn, (void *)e->L,
                              &text);
        if (s->kind == KT_STMT_COMPUTE && s->src >= 0) {
            kt_sbuf_t repl;
            kt_sbuf_init(&repl);
            access_c(e->L, s->src, s->src_idx, &repl);
            kt_codegen_replace_loads(text.data, kt_dag_stage(e->dag, s->src_stage)->name,
                                     repl.data, b);
            kt_sbuf_free(&repl);
        } else {
            kt_sbuf_puts(b, text.data);
        }
    }
    kt_sbuf_free(&text);
}

static void stmt_c(emit_t *e, const kt_lower_stmt_t *s, int depth)
{
    kt_sbuf_t *b = e->out;
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t dst;
    kt_sbuf_init(&dst);
    access_c(e->L, s->dst, s->dst_idx, &dst);
    kt_sbuf_indent(b, depth * 2);
    int is_max = ss->rop == KT_RED_MAX;
    switch (s->kind) {
    case KT_STMT_COMPUTE:
        kt_sbuf_printf(b, "%s = ", dst.data);
        body_c(e, s, b);
        break;
    case KT_STMT_INIT:
        kt_sbuf_printf(b, "%s = %s", dst.data, kt_lower_identity_c(ss->rop));
        break;
    case KT_STMT_UPDATE:
        kt_sbuf_printf(b, is_max ? "%s = kt_maxf(%s, " : "%s = %s + ", dst.data, dst.data);
        body_c(e, s, b);
        if (is_max)
            kt_sbuf_puts(b, ")");
        break;
    case KT_STMT_COPY:
    case KT_STMT_COMBINE:
        if (s->kind == KT_STMT_COPY)
            kt_sbuf_printf(b, "%s = ", dst.data);
        else
            kt_sbuf_printf(b, is_max ? "%s = kt_maxf(%s, " : "%s = %s + ", dst.data, dst.data);
        access_c(e->L, s->src, s->src_idx, b);
        if (s->kind == KT_STMT_COMBINE && is_max)
            kt_sbuf_puts(b, ")");
        break;
    default:   /* GPU statements never occur in CPU programs */
        break;
    }
    kt_sbuf_puts(b, ";\n");
    if (dst.failed)
        b->failed = 1;
    kt_sbuf_free(&dst);
}

/* ---- loops --------------------------------------------------------------------- */

/* Printed loops in the group of `ann` loops starting at node (perfectly
 * nested: each but the last has its next group member as only child). */
static int group_size(const kt_lower_t *L, int node, kt_loop_ann_t ann)
{
    int n = 0;
    for (int x = node; x >= 0;) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind != KT_NODE_LOOP || nd->ann != ann)
            break;
        n += live_iter(L, nd->iter);
        int ch = nd->child;
        if (ch < 0 || L->nodes[ch].next >= 0 || L->nodes[ch].kind != KT_NODE_LOOP)
            break;
        x = ch;
    }
    return n;
}

static void emit_list(emit_t *e, int first, int depth, int in_par, int in_vec);

/* The last loop of that group: its children are the group's body. */
static int group_last(const kt_lower_t *L, int node, kt_loop_ann_t ann)
{
    int last = node;
    for (int x = node; x >= 0;) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind != KT_NODE_LOOP || nd->ann != ann)
            break;
        last = x;
        int ch = nd->child;
        if (ch < 0 || L->nodes[ch].next >= 0 || L->nodes[ch].kind != KT_NODE_LOOP)
            break;
        x = ch;
    }
    return last;
}

/* Statements one pass over this body runs when every loop in it is unrolled
 * or vectorized (a vectorized loop counts once); -1 when a loop in it stays a
 * loop or it allocates. */
static int64_t unrolled_steps(const kt_lower_t *L, int first)
{
    int64_t n = 0;
    for (int x = first; x >= 0 && n <= KT_EMIT_PARTIAL_UNROLL_STEPS; x = L->nodes[x].next) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind == KT_NODE_STMT) {
            n++;
            continue;
        }
        if (nd->kind != KT_NODE_LOOP)
            return -1;
        int64_t ext = L->iters[nd->iter].extent;
        if (ext > 1 && nd->ann != KT_LOOP_UNROLL && nd->ann != KT_LOOP_VECTORIZE)
            return -1;
        int64_t c = unrolled_steps(L, nd->child);
        if (c < 0)
            return -1;
        n += nd->ann == KT_LOOP_VECTORIZE ? c : c * ext;
    }
    return n;
}

/* Sets the kernel's failure flag (from any thread). */
static void put_fail(kt_sbuf_t *b, int depth)
{
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "#pragma omp atomic write\n");
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "kt_fail = 1;\n");
}

/* The parameters (decl) or arguments of an outlined body: the kernel's
 * buffers, then the enclosing loops' iterators. */
static void outline_args(const emit_t *e, int decl, kt_sbuf_t *b)
{
    const kt_lower_t *L = e->L;
    int k = 0;
    for (int i = 0; i < L->nbufs; i++) {
        const kt_lower_buf_t *bf = &L->bufs[i];
        if (bf->kind != KT_BUF_INPUT && bf->kind != KT_BUF_OUTPUT && bf->kind != KT_BUF_HEAP)
            continue;
        kt_sbuf_printf(b, "%s%s%s", k++ ? ", " : "",
                       !decl ? "" : bf->kind == KT_BUF_INPUT ? "const float *restrict "
                                                             : "float *restrict ",
                       bf->name);
    }
    for (int t = 0; t < e->nouter; t++)
        kt_sbuf_printf(b, "%s%s%s", k++ ? ", " : "", decl ? "long long " : "",
                       L->iters[e->outer[t]].name);
}

/* The body of a parallel loop group as a function of its own, called once
 * per iteration: inside the region GCC outlines for OpenMP, the buffers
 * lose `restrict` and loop pragmas (the partial unroll below) are dropped,
 * which costs register-tiled kernels up to 1.6x; a plain function with
 * restrict parameters is optimized like serial code. */
static void outline_body(emit_t *e, int first, int depth)
{
    char name[KT_LOWER_NAME + 128];
    snprintf(name, sizeof(name), "kt_par%d_%s", e->npar++, e->entry);
    kt_sbuf_t body;
    kt_sbuf_init(&body);
    kt_sbuf_t *saved = e->out;
    e->out = &body;
    emit_list(e, first, 1, 1, 0);
    e->out = saved;
    kt_sbuf_printf(e->fns, "static __attribute__((noinline)) int %s(", name);
    outline_args(e, 1, e->fns);
    kt_sbuf_puts(e->fns, ")\n{\n    int kt_fail = 0;\n");
    kt_sbuf_puts(e->fns, body.data ? body.data : "");
    kt_sbuf_puts(e->fns, "    return kt_fail;\n}\n");
    if (body.failed)
        e->fns->failed = 1;
    kt_sbuf_free(&body);
    kt_sbuf_t *b = e->out;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_printf(b, "if (%s(", name);
    outline_args(e, 0, b);
    kt_sbuf_puts(b, ")) {\n");
    put_fail(b, depth + 1);
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "}\n");
}

/* A loop's children, or the call of their outlined function when the loop
 * closes the open parallel group. */
static void emit_body(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    if (node == e->par_last) {
        e->par_last = -1;
        outline_body(e, e->L->nodes[node].child, depth);
    } else {
        emit_list(e, e->L->nodes[node].child, depth, in_par, in_vec);
    }
}

/* Whether identifier id occurs in text. */
static int has_ident(const char *text, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = strstr(text, id); p; p = strstr(p + 1, id))
        if ((p == text || !is_ident_char(p[-1])) && !is_ident_char(p[n]))
            return 1;
    return 0;
}

/* The condition to test once around innermost loop `node`, or NULL: its
 * body is one statement computing a stage whose value is a select (a
 * padding stage: `inside ? data[...] : 0`) whose condition reads no memory
 * and does not depend on the loop. The loop is then printed twice, each
 * copy computing one operand: GCC keeps the test per element (loop
 * unswitching is off for kernels, see emit_c_into), a scalar loop; split,
 * the copy of the interior vectorizes. Malloc'd. */
static char *unswitch_cond(emit_t *e, int node)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    int ch = nd->child;
    if (e->branch || ch < 0 || L->nodes[ch].next >= 0 || L->nodes[ch].kind != KT_NODE_STMT)
        return NULL;
    const kt_lower_stmt_t *s = &L->stmts[L->nodes[ch].stmt];
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    if (s->kind != KT_STMT_COMPUTE || s->src >= 0 || !ss->body ||
        ss->body->kind != KT_EX_SELECT || ss->body->dtype != KT_DT_F32)
        return NULL;
    for (int i = 0; i < L->nsubs; i++)
        if (L->subs[i].stmt == L->nodes[ch].stmt)
            return NULL;
    kt_sbuf_t c;
    kt_sbuf_init(&c);
    if (expr_of_stmt(e, s, ss->body->args[0], &c) != 0 || kt_sbuf_ok(&c) != 0 || !c.data ||
        strchr(c.data, '[') || strchr(c.data, '(') == NULL ||
        has_ident(c.data, L->iters[nd->iter].name)) {
        kt_err_clear();
        kt_sbuf_free(&c);
        return NULL;
    }
    return kt_sbuf_take(&c);
}

static void emit_loop_nest(emit_t *e, int node, int depth, int in_par, int in_vec);

static void emit_loop(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_node_t *nd = &e->L->nodes[node];
    /* not inside a collapsed group: its loops must stay perfectly nested */
    char *cond = e->L->iters[nd->iter].extent > 1 && nd->ann != KT_LOOP_PARALLEL && !in_vec
                     ? unswitch_cond(e, node)
                     : NULL;
    if (!cond) {
        emit_loop_nest(e, node, depth, in_par, in_vec);
        return;
    }
    kt_sbuf_t *b = e->out;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_printf(b, "if (%s) {\n", cond);
    e->branch = 1;
    emit_loop_nest(e, node, depth + 1, in_par, in_vec);
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "} else {\n");
    e->branch = 2;
    emit_loop_nest(e, node, depth + 1, in_par, in_vec);
    e->branch = 0;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "}\n");
    free(cond);
}

static void emit_loop_nest(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    const kt_lower_iter_t *it = &L->iters[nd->iter];
    kt_sbuf_t *b = e->out;
    if (nd->ann == KT_LOOP_PARALLEL && !in_par && e->par_last < 0 && e->nallocs == 0)
        e->par_last = group_last(L, node, KT_LOOP_PARALLEL);
    if (it->extent <= 1) {
        /* Not printed; braces keep a local declaration in its scope unless
         * the body is a single loop (so collapsed loops stay perfectly nested). */
        int single_loop = nd->child >= 0 && L->nodes[nd->child].next < 0 &&
                          L->nodes[nd->child].kind == KT_NODE_LOOP;
        if (single_loop) {
            emit_body(e, node, depth, in_par, in_vec);
        } else {
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_puts(b, "{\n");
            emit_body(e, node, depth + 1, in_par, in_vec);
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_puts(b, "}\n");
        }
        return;
    }
    if (nd->ann == KT_LOOP_PARALLEL && !in_par) {
        int n = group_size(L, node, KT_LOOP_PARALLEL);
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_puts(b, "#pragma omp parallel for schedule(static)");
        if (n > 1)
            kt_sbuf_printf(b, " collapse(%d)", n);
        kt_sbuf_puts(b, "\n");
        in_par = 1;
    } else if (nd->ann == KT_LOOP_VECTORIZE && !in_vec) {
        int n = group_size(L, node, KT_LOOP_VECTORIZE);
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_puts(b, "#pragma omp simd");
        if (n > 1)
            kt_sbuf_printf(b, " collapse(%d)", n);
        kt_sbuf_puts(b, "\n");
        in_vec = 1;
    } else if (nd->ann == KT_LOOP_UNROLL) {
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "#pragma GCC unroll %lld\n", (long long)it->extent);
    } else if (nd->ann == KT_LOOP_SERIAL && it->reduce &&
               it->extent > KT_EMIT_PARTIAL_UNROLL) {
        /* The innermost reduce loop around an unrolled block (a register
         * tile's update): a few copies let GCC keep the block's operands in
         * registers and overlap their loads, as LLVM's runtime unrolling
         * does for TVM. */
        int64_t steps = unrolled_steps(L, nd->child);
        if (steps >= 1 && steps <= KT_EMIT_PARTIAL_UNROLL_STEPS) {
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_printf(b, "#pragma GCC unroll %d\n", KT_EMIT_PARTIAL_UNROLL);
        }
    }
    if (e->nouter == MAX_OUTER) {
        e->rc = kt_err_set(KT_EINVAL, "loops nested deeper than %d", MAX_OUTER);
        return;
    }
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_printf(b, "for (long long %s = 0; %s < %lldLL; ++%s) {\n", it->name, it->name,
                   (long long)it->extent, it->name);
    e->outer[e->nouter++] = nd->iter;
    emit_body(e, node, depth + 1, in_par, in_vec);
    e->nouter--;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "}\n");
}

static void emit_list(emit_t *e, int first, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    kt_sbuf_t *b = e->out;
    int allocs = 0;
    for (int x = first; x >= 0 && !e->rc; x = L->nodes[x].next) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind == KT_NODE_LOOP) {
            emit_loop(e, x, depth, in_par, in_vec);
        } else if (nd->kind == KT_NODE_STMT) {
            stmt_c(e, &L->stmts[nd->stmt], depth);
        } else {
            const kt_lower_buf_t *bf = &L->bufs[nd->buf];
            int64_t n = 1;
            for (int d = 0; d < bf->ndim; d++)
                n *= bf->shape[d];
            kt_sbuf_indent(b, depth * 2);
            allocs++;
            e->nallocs++;
            if (n * (int64_t)sizeof(float) <= KT_LOWER_LOCAL_STACK_BYTES) {
                kt_sbuf_printf(b, "float %s[%lld] __attribute__((aligned(64)));\n", bf->name,
                               (long long)n);
                continue;
            }
            /* Too big for a thread's stack: heap, and the rest of this body
             * runs only when the allocation succeeded. */
            kt_sbuf_printf(b, "float *%s = (float *)malloc(sizeof(float) * %lldULL);\n", bf->name,
                           (long long)n);
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_printf(b, "if (%s) {\n", bf->name);
            emit_list(e, nd->next, depth + 1, in_par, in_vec);
            kt_sbuf_indent(b, depth * 2 + 2);
            kt_sbuf_printf(b, "free(%s);\n", bf->name);
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_puts(b, "} else {\n");
            put_fail(b, depth + 1);
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_puts(b, "}\n");
            break;
        }
    }
    e->nallocs -= allocs;
}

/* ---- the kernel ----------------------------------------------------------------- */

int kt_codegen_check_entry(const kt_dag_t *dag, const char *entry)
{
    if (!entry || !*entry || strlen(entry) > 100)
        return kt_err_set(KT_EINVAL, "emit: entry name missing or too long");
    for (const char *c = entry; *c; c++)
        if (!is_ident_char(*c) || (c == entry && *c >= '0' && *c <= '9'))
            return kt_err_set(KT_EINVAL, "emit: entry '%s' is not a C identifier", entry);
    if (strncmp(entry, "kt_", 3) == 0)
        return kt_err_set(KT_EINVAL, "emit: entry '%s' uses the reserved prefix kt_", entry);
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, entry) == 0)
            return kt_err_set(KT_EINVAL, "emit: entry '%s' is a stage name", entry);
    return 0;
}

static int emit_c_into(const kt_dag_t *dag, const kt_sched_state_t *st, const char *entry,
                       kt_sbuf_t *b, int prepacked)
{
    if (!dag || !st || !b)
        return kt_err_set(KT_EINVAL, "emit: missing DAG, state or buffer");
    if (st->target != KT_SCHED_TARGET_CPU)
        return kt_err_set(KT_EINVAL, "emit: C needs a CPU state (GPU states: emit CUDA)");
    int rc = kt_codegen_check_entry(dag, entry);
    if (rc)
        return rc;
    kt_lower_t *L = kt_lower_ex(dag, st, prepacked);
    if (!L)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    /* GCC tunes AVX-512 CPUs for 256-bit vectors by default; tiled kernels
     * want full-width registers (no effect without AVX-512). GCC 12 at -O3
     * miscompiles padding selects (loop unswitching + if-conversion write
     * wrong values), so unswitching is off for kernels. The builders compile
     * with -std=c17, which turns floating-point contraction off: every
     * multiply-add would be a vmulps and a vaddps, half the peak and a longer
     * dependency chain, so kernels contract as LLVM does for TVM. */
    kt_sbuf_puts(b, "#if defined(__GNUC__) && !defined(__clang__)\n"
                    "#pragma GCC push_options\n"
                    "#pragma GCC target(\"prefer-vector-width=512\")\n"
                    "#pragma GCC optimize(\"no-unswitch-loops\", \"fp-contract=fast\")\n"
                    "#elif defined(__clang__)\n"
                    "#pragma clang fp contract(fast)\n"
                    "#endif\n");
    /* The kernel goes to its own buffer: the functions it calls come first. */
    kt_sbuf_t kern, fns;
    kt_sbuf_init(&kern);
    kt_sbuf_init(&fns);
    kt_sbuf_t *out = b;
    b = &kern;
    kt_sbuf_printf(b, "int %s(float **kt_bufs)\n{\n", entry);
    int nheap = 0;
    for (int i = 0; i < L->nbufs; i++) {
        const kt_lower_buf_t *bf = &L->bufs[i];
        if (bf->kind == KT_BUF_INPUT)
            kt_sbuf_printf(b, "    const float *restrict %s = kt_bufs[%d];\n", bf->name, bf->arg);
        else if (bf->kind == KT_BUF_OUTPUT)
            kt_sbuf_printf(b, "    float *restrict %s = kt_bufs[%d];\n", bf->name, bf->arg);
    }
    for (int i = 0; i < L->nbufs; i++) {
        const kt_lower_buf_t *bf = &L->bufs[i];
        if (bf->kind != KT_BUF_HEAP)
            continue;
        int64_t n = 1;
        for (int d = 0; d < bf->ndim; d++)
            n *= bf->shape[d];
        /* Cache-line aligned (malloc gives 16 bytes): a vector load of a weight's
         * rewritten layout that straddles two lines made one conv2d 35% slower.
         * aligned_alloc wants a multiple of the alignment. */
        n = (n + 15) / 16 * 16;
        kt_sbuf_printf(b,
                       "    float *restrict %s = (float *)aligned_alloc(64, sizeof(float) * %lldULL);\n",
                       bf->name, (long long)n);
        nheap++;
    }
    kt_sbuf_puts(b, "    int kt_fail = 0;\n");
    int depth = 1;
    if (nheap) {
        kt_sbuf_puts(b, "    if (");
        int k = 0;
        for (int i = 0; i < L->nbufs; i++)
            if (L->bufs[i].kind == KT_BUF_HEAP)
                kt_sbuf_printf(b, "%s%s", k++ ? " && " : "", L->bufs[i].name);
        kt_sbuf_puts(b, ") {\n");
        depth = 2;
    }
    emit_t e = {.dag = dag, .L = L, .out = b, .fns = &fns, .entry = entry, .par_last = -1};
    emit_list(&e, L->first, depth, 0, 0);
    if (nheap) {
        kt_sbuf_puts(b, "    } else {\n        kt_fail = 1;\n    }\n");
        for (int i = 0; i < L->nbufs; i++)
            if (L->bufs[i].kind == KT_BUF_HEAP)
                kt_sbuf_printf(b, "    free(%s);\n", L->bufs[i].name);
    }
    kt_sbuf_puts(b, "    return kt_fail ? -1 : 0;\n}\n");
    kt_lower_free(L);
    if (fns.failed || kern.failed)
        out->failed = 1;
    kt_sbuf_puts(out, fns.data ? fns.data : "");
    kt_sbuf_puts(out, kern.data ? kern.data : "");
    kt_sbuf_free(&fns);
    kt_sbuf_free(&kern);
    kt_sbuf_puts(out, "#if defined(__GNUC__) && !defined(__clang__)\n"
                      "#pragma GCC pop_options\n"
                      "#endif\n");
    if (e.rc)
        return kt_err_prefix("emit");
    return kt_sbuf_ok(out);
}

int kt_codegen_emit_c_into(const kt_dag_t *dag, const kt_sched_state_t *st, const char *entry,
                           kt_sbuf_t *b)
{
    return emit_c_into(dag, st, entry, b, 0);
}

int kt_codegen_emit_c_packed_into(const kt_dag_t *dag, const kt_sched_state_t *st,
                                  const char *entry, kt_sbuf_t *b)
{
    return emit_c_into(dag, st, entry, b, 1);
}

/* Pack k of a prepacked lowering as the public descriptor. */
static void pack_desc(const kt_dag_t *dag, const kt_lower_t *L, int k, kt_codegen_pack_t *out)
{
    const kt_lower_pack_t *pk = &L->packs[k];
    const kt_stage_t *ws = kt_dag_stage(dag, pk->stage);
    memset(out, 0, sizeof(*out));
    out->buf = pk->arg;
    out->ndim = pk->ndim;
    /* The source offset each new loop steps by: coef times the stride
     * of the weight dimension it walks. */
    for (int m = 0; m < pk->ndim; m++) {
        int64_t stride = 1;
        for (int d = ws->ndim - 1; d > pk->dim[m]; d--)
            stride *= ws->shape[d];
        out->shape[m] = pk->shape[m];
        out->step[m] = pk->coef[m] * stride;
    }
}

int kt_codegen_packs(const kt_dag_t *dag, const kt_sched_state_t *st, kt_codegen_pack_t *out,
                     int cap)
{
    if (!dag || !st || st->target != KT_SCHED_TARGET_CPU)
        return kt_err_set(KT_EINVAL, "packs: a CPU state is needed");
    kt_lower_t *L = kt_lower_ex(dag, st, 1);
    if (!L)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    int n = L->npacks < cap ? L->npacks : cap;
    for (int k = 0; k < n; k++)
        pack_desc(dag, L, k, &out[k]);
    kt_lower_free(L);
    return n;
}

void kt_codegen_pack(const kt_codegen_pack_t *pk, const float *src, float *dst, int unpack)
{
    int64_t n = 1, idx[KT_TE_MAX_DIMS + 1] = {0};
    for (int m = 0; m < pk->ndim; m++)
        n *= pk->shape[m];
    int64_t at = 0;   /* source offset of idx */
    for (int64_t i = 0; i < n; i++) {
        if (unpack)
            dst[at] = src[i];
        else
            dst[i] = src[at];
        for (int m = pk->ndim - 1; m >= 0; m--) {   /* the next index, odometer order */
            at += pk->step[m];
            if (++idx[m] < pk->shape[m])
                break;
            at -= pk->step[m] * pk->shape[m];
            idx[m] = 0;
        }
    }
}

/* <entry>_pack: permutes buffer i into the layout <entry>_packed reads, one
 * loop per packed dimension (the same walk as kt_codegen_pack). */
static void emit_pack_fn(const kt_codegen_pack_t *pk, int np, const char *entry, kt_sbuf_t *b)
{
    kt_sbuf_printf(b, "int %s_pack(int kt_i, const float *restrict kt_src, float *restrict kt_dst)\n"
                      "{\n", entry);
    for (int k = 0; k < np; k++) {
        kt_sbuf_printf(b, "    if (kt_i == %d) {\n        if (kt_src && kt_dst) {\n"
                          "            long long kt_o = 0;\n", pk[k].buf);
        for (int m = 0; m < pk[k].ndim; m++) {
            kt_sbuf_indent(b, 6 + m);
            kt_sbuf_printf(b, "for (long long kt_p%d = 0; kt_p%d < %lldLL; ++kt_p%d)\n", m, m,
                           (long long)pk[k].shape[m], m);
        }
        kt_sbuf_indent(b, 6 + pk[k].ndim);
        kt_sbuf_puts(b, "kt_dst[kt_o++] = kt_src[");
        for (int m = 0; m < pk[k].ndim; m++)
            kt_sbuf_printf(b, "%skt_p%d * %lldLL", m ? " + " : "", m, (long long)pk[k].step[m]);
        if (pk[k].ndim == 0)
            kt_sbuf_puts(b, "0");
        kt_sbuf_puts(b, "];\n        }\n        return 1;\n    }\n");
    }
    if (np == 0)
        kt_sbuf_puts(b, "    (void)kt_i;\n    (void)kt_src;\n    (void)kt_dst;\n");
    kt_sbuf_puts(b, "    return 0;\n}\n");
}

/* <entry>: the weights in their original layout, packed into temporaries on
 * every call, then <entry>_packed. */
static void emit_wrapper(const kt_dag_t *dag, const kt_codegen_pack_t *pk, int np,
                         const char *entry, kt_sbuf_t *b)
{
    int nb = kt_codegen_num_bufs(dag);
    kt_sbuf_printf(b, "int %s(float **kt_bufs)\n{\n", entry);
    if (np == 0) {
        kt_sbuf_printf(b, "    return %s_packed(kt_bufs);\n}\n", entry);
        return;
    }
    kt_sbuf_printf(b, "    float *kt_args[%d];\n    for (int kt_i = 0; kt_i < %d; kt_i++)\n"
                      "        kt_args[kt_i] = kt_bufs[kt_i];\n", nb, nb);
    for (int k = 0; k < np; k++) {
        int64_t n = 1;
        for (int m = 0; m < pk[k].ndim; m++)
            n *= pk[k].shape[m];
        /* malloc, aligned by hand to a cache line: glibc serves a large
         * aligned_alloc freed each call with fresh pages every time (its
         * mmap threshold does not adapt to it), which doubled the call of
         * a conv2d with a 9 MiB weight. */
        kt_sbuf_printf(b, "    float *kt_m%d = (float *)malloc(sizeof(float) * %lldULL + 64);\n",
                       k, (long long)n);
    }
    kt_sbuf_puts(b, "    int kt_rc = -1;\n    if (");
    for (int k = 0; k < np; k++)
        kt_sbuf_printf(b, "%skt_m%d", k ? " && " : "", k);
    kt_sbuf_puts(b, ") {\n");
    for (int k = 0; k < np; k++)
        kt_sbuf_printf(b, "        float *kt_w%d = kt_m%d + (64 - (size_t)kt_m%d %% 64) %% 64 / "
                          "sizeof(float);\n", k, k, k);
    for (int k = 0; k < np; k++)
        kt_sbuf_printf(b, "        %s_pack(%d, kt_bufs[%d], kt_w%d);\n        kt_args[%d] = kt_w%d;\n",
                       entry, pk[k].buf, pk[k].buf, k, pk[k].buf, k);
    kt_sbuf_printf(b, "        kt_rc = %s_packed(kt_args);\n    }\n", entry);
    for (int k = 0; k < np; k++)
        kt_sbuf_printf(b, "    free(kt_m%d);\n", k);
    kt_sbuf_puts(b, "    return kt_rc;\n}\n");
}

int kt_codegen_emit_c_variants_into(const kt_dag_t *dag, const kt_sched_state_t *st,
                                    const char *entry, kt_sbuf_t *b)
{
    if (!dag || !st || !b)
        return kt_err_set(KT_EINVAL, "emit: missing DAG, state or buffer");
    int rc = kt_codegen_check_entry(dag, entry);
    if (rc)
        return rc;
    char packed[160];
    snprintf(packed, sizeof(packed), "%s_packed", entry);
    rc = emit_c_into(dag, st, packed, b, 1);
    if (rc)
        return rc;
    kt_codegen_pack_t pk[KT_CODEGEN_MAX_PACKS];
    int np = kt_codegen_packs(dag, st, pk, KT_CODEGEN_MAX_PACKS);
    if (np < 0)
        return np;
    for (int k = 0; k < np; k++)
        for (int q = 0; q < k; q++)
            if (pk[q].buf == pk[k].buf)
                return kt_err_set(KT_EINTERNAL, "emit: buffer %d re-laid out twice", pk[k].buf);
    emit_pack_fn(pk, np, entry, b);
    emit_wrapper(dag, pk, np, entry, b);
    return kt_sbuf_ok(b);
}

char *kt_codegen_emit_c(const kt_dag_t *dag, const kt_sched_state_t *st, const char *entry)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "/* ktune kernel */\n");
    kt_codegen_preamble_c(&b);
    if (kt_codegen_emit_c_variants_into(dag, st, entry, &b) != 0) {
        kt_sbuf_free(&b);
        return NULL;
    }
    return kt_sbuf_take(&b);
}
