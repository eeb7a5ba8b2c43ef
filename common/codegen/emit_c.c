/* The C emitter: a lowered program printed as one kernel function.
 *
 * Loop annotations become pragmas: PARALLEL loops (fused) -> one
 * `#pragma omp parallel for collapse(n)`, VECTORIZE loops -> `#pragma omp
 * simd collapse(n)`, UNROLL loops (those auto_unroll_max_step unrolls, see
 * lower.c) -> `#pragma GCC unroll <extent>`. Loops of extent 1 are not
 * printed (their variable contributes nothing to any index). Local tiles
 * are stack arrays (heap when larger than KT_LOWER_LOCAL_STACK_BYTES), so
 * register tiles of a tiled stage are plain local arrays GCC can keep in
 * registers; the intermediates at root share one workspace block that the
 * kernel keeps between calls. The kernel is wrapped in GCC pragmas: 512-bit
 * vectors, no loop unswitching, and floating-point contraction
 * (multiply-adds become FMAs even under the builders' -std=c17).
 *
 * Two decisions beyond the lowered program, both for GCC's sake:
 * - the body of a parallel loop group is a static function of its own
 *   (kt_par<N>_<entry>, restrict buffers and the enclosing iterators as
 *   arguments) that the OpenMP loop calls once per iteration;
 * - the innermost reduce loop whose body is fully unrolled (a register tile's
 *   update) is unrolled KT_EMIT_PARTIAL_UNROLL times.
 * And one for the work done: an update multiplying by an inlined padding
 * stage runs only where the padded input is inside, its loops partitioned
 * or narrowed so that the interior tests nothing ("padding guards"). */
#include <math.h>
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
    /* padding guards (see "padding guards" below) */
    struct guard *guards;  /* per statement; NULL when no statement is guarded */
    int64_t *lo, *hi;      /* per iterator: the values the loop printed around the current
                              node runs (a partitioned loop's part narrows them) */
    uint8_t *hoisted;      /* per statement: its inequalities an enclosing if tests */
    uint8_t *tile_iter;    /* per iterator: it indexes a local (accumulator, register) tile */
    int64_t parts;         /* copies of the current node the enclosing partitions print */
    int tile_split;        /* inside a nest printed as interior and border (tile_interior) */
    int64_t guarded_total; /* guarded_size of the whole program */
    int narrow_node;       /* loop printed with the bounds below instead of its range, -1 */
    const char *narrow_lo, *narrow_hi;
    int nexpand;           /* expanded loops enclosing the current node */
    int64_t *cval;         /* value of each iterator an expanded loop binds (per L->iters) */
    /* kt_codegen_c_tested_share: per statement, the executions the printed
     * copies run and those behind a test; NULL when only printing */
    double *runs, *tested;
    double frac;           /* share of the enclosing iterations reaching the current node
                              through tile_interior's copies */
    int border;            /* inside tile_interior's border copy: tables may replace tests */
    int pass;              /* 0: all; 1: a parallel group's interior copies and untested
                              tiles; 2: its border copies only (see two_pass_ok); -1: all,
                              the group printed again in one pass */
    int nsplit;            /* tile_interior splits printed so far */
    int region;            /* inside emit_two_passes' parallel region: loops share it */
    int nparams;           /* outer[0..nparams): the outlined body's parameters */
    int table_stmt;        /* statement reading through border_table's pointers, -1 */
    const char *table_load;/* what its padding source's load reads instead */
    int ntables;           /* tables printed so far (their names) */
    int nprinted;          /* statements printed (or counted) so far */
    uint64_t split_params; /* outline_parts: the parameters (outer[k], bit k) it splits */
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

/* ---- padding guards ----------------------------------------------------------------
 *
 * A reduction update that multiplies by an inlined padding stage
 * (`select(inside, data[...], 0)`) adds zero wherever `inside` fails, so it
 * runs as `if (inside) acc += data[...] * w` instead (TVM's
 * if_then_else-to-guard). `inside` is a conjunction of affine inequalities
 * in the loop iterators, whose ranges are compile-time constants, and the
 * tests leave the innermost loops, cheapest first:
 * - a test that holds for every value of the current iterator ranges is
 *   dropped (the interior), a statement with one that fails for all of
 *   them is not printed, nor is a loop holding only such statements;
 * - a test reading only loops enclosing a perfect nest down to the
 *   statement is printed once, as an `if` around that nest;
 * - a serial reduction loop of such a nest whose test reads it and
 *   enclosing loops only runs where the test holds: its bounds are narrowed
 *   when it starts (kt_maxi/kt_mini of the bounds the test gives);
 * - a loop whose iterator decides a test for inner loops and indexes no
 *   local tile is partitioned (TVM's LoopPartition): printed as consecutive
 *   parts, split where the test becomes true, or false, for every value of
 *   the other iterators in their current ranges; each part narrows its
 *   iterator's range for the code inside it;
 * - what is left is tested on the statement; but a loop holding a local
 *   tile whose statements' tests read the tile's loops is first printed
 *   twice, an interior copy that tests nothing behind one test of the loops
 *   around it, and the border's copy (see tile_interior), which reads
 *   through a table of pointers where its tests would not fold (see
 *   border_table).
 * Loops over a local tile's elements are neither split nor narrowed: GCC
 * keeps the register and accumulator tiles in registers only with whole
 * constant trip counts (a tile loop split into constant parts made GCC
 * rebuild every vector of the tile from scalars on the stack). A tile loop
 * that GCC unrolls folds the tests inside it once the loops outside are
 * partitioned into constants. Parallel and vectorized loops are never split
 * (their pragmas need one loop), and the parts around a statement are
 * bounded (KT_EMIT_MAX_PARTS, KT_EMIT_PART_MIN): GCC's time grows with the
 * copies (a 14x8 scalar tile partitioned nine times took it ten times as
 * long). */

#define KT_EMIT_GUARD_INEQS 8   /* inequalities of one guard */
#define KT_EMIT_AFF_TERMS 16    /* iterators of one affine form */
#define KT_EMIT_MAX_PARTS 6     /* most copies of a statement the partitions print */
#define KT_EMIT_BORDER_PARTS 3  /* times as many for a border copy's per-element cuts */
#define KT_EMIT_PART_MIN 256    /* partitions print at most as many guarded statements as
                                   the kernel unrolls, or this many */
#define KT_EMIT_PAR_BODIES 4    /* most copies of a parallel group's outlined body */
#define KT_EMIT_SPLIT_POINTS (2 * KT_EMIT_GUARD_INEQS * 4)   /* most split points of a loop */
#define KT_EMIT_TABLE_MAX 64    /* pointers of one border table (border_table) */
#define KT_EMIT_ZERO_MAX 4096   /* floats of its block of zeros */

/* sum coef * iter + c; in a guard, the inequality aff >= 0. */
typedef struct {
    int n;
    int iter[KT_EMIT_AFF_TERMS];
    int64_t coef[KT_EMIT_AFF_TERMS];
    int64_t c;
} aff_t;

typedef struct guard {
    int nq;            /* 0: the statement is not guarded */
    uint64_t taken;    /* the padding stage its body reads through the select's operand */
    aff_t q[KT_EMIT_GUARD_INEQS];
    int src;           /* the placeholder the select's operand loads, -1: not one */
    aff_t flat;        /* that load's row-major index */
} guard_t;

/* x += k * y; -1 when the terms overflow. */
static int aff_add(aff_t *x, const aff_t *y, int64_t k)
{
    x->c += k * y->c;
    for (int t = 0; t < y->n; t++) {
        int j = 0;
        while (j < x->n && x->iter[j] != y->iter[t])
            j++;
        if (j == x->n) {
            if (x->n == KT_EMIT_AFF_TERMS)
                return -1;
            x->iter[x->n] = y->iter[t];
            x->coef[x->n++] = 0;
        }
        x->coef[j] += k * y->coef[t];
    }
    return 0;
}

/* The affine form of an integer expression of a stage whose axes are
 * env[0..nenv); -1 when it is not affine. */
static int aff_of_expr(const kt_expr_t *x, const aff_t *env, int nenv, aff_t *out, int depth)
{
    memset(out, 0, sizeof(*out));
    if (!x || depth > 64)
        return -1;
    aff_t a, b;
    switch (x->kind) {
    case KT_EX_CONST:
        if (x->dtype != KT_DT_INT)
            return -1;
        out->c = x->ival;
        return 0;
    case KT_EX_AXIS:
        if (x->axis < 0 || x->axis >= nenv)
            return -1;
        *out = env[x->axis];
        return 0;
    case KT_EX_ADD:
    case KT_EX_SUB:
    case KT_EX_MUL:
        if (x->nargs != 2 || aff_of_expr(x->args[0], env, nenv, &a, depth + 1) ||
            aff_of_expr(x->args[1], env, nenv, &b, depth + 1))
            return -1;
        if (x->kind != KT_EX_MUL)
            return aff_add(out, &a, 1) || aff_add(out, &b, x->kind == KT_EX_ADD ? 1 : -1) ? -1
                                                                                          : 0;
        if (a.n && b.n)
            return -1;
        return a.n ? aff_add(out, &a, b.c) : aff_add(out, &b, a.c);
    default:
        return -1;
    }
}

/* Appends the inequalities (aff >= 0) whose conjunction is cond; -1 when
 * cond is not such a conjunction. */
static int cond_ineqs(const kt_expr_t *cond, const aff_t *env, int nenv, guard_t *g, int depth)
{
    if (!cond || cond->nargs != 2 || depth > 64)
        return -1;
    if (cond->kind == KT_EX_AND)
        return cond_ineqs(cond->args[0], env, nenv, g, depth + 1) ||
                       cond_ineqs(cond->args[1], env, nenv, g, depth + 1)
                   ? -1
                   : 0;
    int ge = cond->kind == KT_EX_GE || cond->kind == KT_EX_GT;
    int lt = cond->kind == KT_EX_LT || cond->kind == KT_EX_LE;
    aff_t a, b;
    if ((!ge && !lt) || g->nq == KT_EMIT_GUARD_INEQS ||
        aff_of_expr(cond->args[0], env, nenv, &a, depth + 1) ||
        aff_of_expr(cond->args[1], env, nenv, &b, depth + 1))
        return -1;
    /* a >= b: a - b >= 0; a > b: a - b - 1 >= 0; a <= b: b - a >= 0; a < b: b - a - 1 >= 0 */
    aff_t *q = &g->q[g->nq++];
    memset(q, 0, sizeof(*q));
    if (aff_add(q, ge ? &a : &b, 1) || aff_add(q, ge ? &b : &a, -1))
        return -1;
    q->c -= cond->kind == KT_EX_GT || cond->kind == KT_EX_LT;
    return 0;
}

/* The load of an inlined padding stage (body select(c, x, 0)) that makes e
 * zero wherever c fails: e itself or a factor of a product; NULL if none. */
static const kt_expr_t *zero_load(const kt_dag_t *dag, uint64_t mask, const kt_expr_t *e)
{
    if (e->kind == KT_EX_MUL && e->nargs == 2) {
        const kt_expr_t *z = zero_load(dag, mask, e->args[0]);
        return z ? z : zero_load(dag, mask, e->args[1]);
    }
    if (e->kind != KT_EX_LOAD || e->tensor < 0 || e->tensor >= 64 || !((mask >> e->tensor) & 1u))
        return NULL;
    const kt_stage_t *p = kt_dag_stage(dag, e->tensor);
    const kt_expr_t *b = p ? p->body : NULL;
    if (!b || b->kind != KT_EX_SELECT || b->nargs != 3 || e->nargs != p->ndim)
        return NULL;
    const kt_expr_t *z = b->args[2];
    return z->kind == KT_EX_CONST && z->dtype == KT_DT_F32 && z->fval == 0.0 ? e : NULL;
}

/* Loads of stage t in e, looking through inlined stages (2 once past 1). */
static int count_loads(const kt_dag_t *dag, uint64_t mask, const kt_expr_t *e, int t, int depth)
{
    if (!e || depth > 64)
        return 2;
    int n = 0;
    if (e->kind == KT_EX_LOAD && e->tensor == t)
        n++;
    else if (e->kind == KT_EX_LOAD && e->tensor >= 0 && e->tensor < 64 &&
             ((mask >> e->tensor) & 1u))
        n += count_loads(dag, mask, kt_dag_stage(dag, e->tensor)->body, t, depth + 1);
    for (int i = 0; i < e->nargs && n < 2; i++)
        n += count_loads(dag, mask, e->args[i], t, depth + 1);
    return n;
}

/* The guard of statement s (nq 0: none): a sum reduction's update whose
 * body is zero where its one padding load's condition fails, every index
 * affine. */
static void guard_of_stmt(const emit_t *e, const kt_lower_stmt_t *s, guard_t *g)
{
    memset(g, 0, sizeof(*g));
    g->src = -1;
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    uint64_t mask = e->L->inline_mask;
    if (s->kind != KT_STMT_UPDATE || !ss || ss->rop != KT_RED_SUM || !ss->body)
        return;
    const kt_expr_t *ld = zero_load(e->dag, mask, ss->body);
    if (!ld || count_loads(e->dag, mask, ss->body, ld->tensor, 0) != 1)
        return;
    const kt_stage_t *p = kt_dag_stage(e->dag, ld->tensor);
    aff_t env[KT_SCHED_MAX_AXES], penv[KT_TE_MAX_DIMS];
    int na = ss->ndim + ss->nreduce;
    for (int a = 0; a < na; a++) {
        const kt_lower_index_t *x = &s->axis[a];
        memset(&env[a], 0, sizeof(env[a]));
        if (x->div > 1 || x->mod > 0)
            return;
        for (int t = 0; t < x->nterms; t++) {
            aff_t one = {.n = 1, .iter = {x->iter[t]}, .coef = {x->coef[t]}};
            if (aff_add(&env[a], &one, 1))
                return;
        }
    }
    for (int i = 0; i < p->ndim; i++)
        if (aff_of_expr(ld->args[i], env, na, &penv[i], 0))
            return;
    guard_t tmp = {.src = -1};
    if (cond_ineqs(p->body->args[0], penv, p->ndim, &tmp, 0) || tmp.nq == 0)
        return;
    tmp.taken = 1ULL << ld->tensor;
    /* the operand's flat index, for border_table's pointers */
    const kt_expr_t *op = p->body->args[1];
    const kt_stage_t *src = op->kind == KT_EX_LOAD ? kt_dag_stage(e->dag, op->tensor) : NULL;
    if (src && src->kind == KT_STAGE_PLACEHOLDER && op->nargs == src->ndim &&
        count_loads(e->dag, mask, ss->body, op->tensor, 0) == 1) {
        int64_t stride = 1;
        int ok = 1;
        for (int i = src->ndim - 1; i >= 0 && ok; i--) {
            aff_t a, live = {0};
            ok = aff_of_expr(op->args[i], penv, p->ndim, &a, 0) == 0;
            /* loops of one iteration add nothing (and would crowd out the others) */
            for (int t = 0; t < a.n && ok; t++)
                if (e->L->iters[a.iter[t]].extent > 1) {
                    aff_t one = {.n = 1, .iter = {a.iter[t]}, .coef = {a.coef[t]}};
                    ok = aff_add(&live, &one, 1) == 0;
                }
            live.c = a.c;
            ok = ok && aff_add(&tmp.flat, &live, stride) == 0;
            stride *= src->shape[i];
        }
        tmp.src = ok ? op->tensor : -1;
    }
    *g = tmp;
}

/* a / b rounded down (b > 0). */
static int64_t floordiv(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

/* Range of q over the current iterator ranges, leaving out iterator skip. */
static void aff_range(const emit_t *e, const aff_t *q, int skip, int64_t *mn, int64_t *mx)
{
    int64_t a = q->c, b = q->c;
    for (int t = 0; t < q->n; t++) {
        int it = q->iter[t];
        int64_t k = q->coef[t];
        if (it == skip)
            continue;
        a += k * (k >= 0 ? e->lo[it] : e->hi[it]);
        b += k * (k >= 0 ? e->hi[it] : e->lo[it]);
    }
    *mn = a;
    *mx = b;
}

static int64_t coef_of(const aff_t *q, int it)
{
    for (int t = 0; t < q->n; t++)
        if (q->iter[t] == it)
            return q->coef[t];
    return 0;
}

enum { Q_TRUE, Q_FALSE, Q_OPEN };

static int ineq_state(const emit_t *e, const aff_t *q)
{
    int64_t mn, mx;
    aff_range(e, q, -1, &mn, &mx);
    return mn >= 0 ? Q_TRUE : mx < 0 ? Q_FALSE : Q_OPEN;
}

/* Inequalities of statement si still to test at the current node (bits). */
static unsigned open_ineqs(const emit_t *e, int si)
{
    unsigned bits = 0;
    const guard_t *g = e->guards ? &e->guards[si] : NULL;
    for (int k = 0; g && k < g->nq; k++)
        if (!((e->hoisted[si] >> k) & 1u) && ineq_state(e, &g->q[k]) == Q_OPEN)
            bits |= 1u << k;
    return bits;
}

/* Statement si adds only zeros in the current ranges. */
static int stmt_dead(const emit_t *e, int si)
{
    const guard_t *g = e->guards ? &e->guards[si] : NULL;
    for (int k = 0; g && k < g->nq; k++)
        if (ineq_state(e, &g->q[k]) == Q_FALSE)
            return 1;
    return 0;
}

/* Statements under node (itself included) that still do work; *total
 * counts them all. */
static int live_stmts(const emit_t *e, int node, int *total)
{
    const kt_lower_node_t *nd = &e->L->nodes[node];
    if (nd->kind == KT_NODE_STMT) {
        ++*total;
        return !stmt_dead(e, nd->stmt);
    }
    int n = 0;
    for (int ch = nd->child; ch >= 0; ch = e->L->nodes[ch].next)
        n += live_stmts(e, ch, total);
    return n;
}

/* A loop whose every statement adds only zeros here: not printed. */
static int subtree_dead(const emit_t *e, int node)
{
    int total = 0;
    return e->guards && live_stmts(e, node, &total) == 0 && total > 0;
}

/* Point p added to the sorted split points of loop v (inside its range, once). */
static int add_point(const emit_t *e, int v, int64_t p, int64_t *pts, int np, int cap)
{
    if (p <= e->lo[v] || p > e->hi[v])
        return np;
    int at = 0;
    while (at < np && pts[at] < p)
        at++;
    if ((at < np && pts[at] == p) || np == cap)
        return np;
    memmove(&pts[at + 1], &pts[at], sizeof(*pts) * (size_t)(np - at));
    pts[at] = p;
    return np + 1;
}

/* The points of loop v where c*v + r >= 0 flips over r in [mn, mx], added:
 * with c > 0 false for all r below ceil(-mx/c), true for all from
 * ceil(-mn/c); with c < 0 true for all up to floor(mn/-c), false for all
 * past floor(mx/-c). */
static int add_flips(const emit_t *e, int v, int64_t c, int64_t mn, int64_t mx, int64_t *pts,
                     int np, int cap)
{
    np = add_point(e, v, c > 0 ? -floordiv(mx, c) : floordiv(mn, -c) + 1, pts, np, cap);
    return add_point(e, v, c > 0 ? -floordiv(mn, c) : floordiv(mx, -c) + 1, pts, np, cap);
}

/* The one register tile loop other than v that inequality q reads, with at
 * most KT_EMIT_TABLE_MAX values; -1 if none or several. */
static int tile_term(const emit_t *e, const aff_t *q, int v)
{
    int found = -1;
    for (int t = 0; t < q->n; t++) {
        int it = q->iter[t];
        if (it == v || q->coef[t] == 0 || !e->tile_iter[it] || e->lo[it] == e->hi[it])
            continue;
        if (found >= 0 || e->hi[it] - e->lo[it] >= KT_EMIT_TABLE_MAX)
            return -1;
        found = it;
    }
    return found;
}

/* Where loop iterator v's range splits for the open inequalities of the
 * guarded statements under node: part starts in (lo, hi], sorted, unique;
 * with per_elem also where each register tile element's test flips. */
static int split_points(const emit_t *e, int node, int v, int64_t *pts, int np, int cap,
                        int per_elem)
{
    const kt_lower_node_t *nd = &e->L->nodes[node];
    if (nd->kind != KT_NODE_STMT) {
        for (int ch = nd->child; ch >= 0; ch = e->L->nodes[ch].next)
            np = split_points(e, ch, v, pts, np, cap, per_elem);
        return np;
    }
    int si = nd->stmt;
    if (stmt_dead(e, si))
        return np;
    unsigned open = open_ineqs(e, si);
    for (int k = 0; k < KT_EMIT_GUARD_INEQS; k++) {
        const aff_t *q = &e->guards[si].q[k];
        int64_t c = (open >> k) & 1u ? coef_of(q, v) : 0, mn, mx;
        if (c == 0)
            continue;
        aff_range(e, q, v, &mn, &mx);
        np = add_flips(e, v, c, mn, mx, pts, np, cap);
        /* a register tile loop's values each flip the test at their own
         * point: split there too and, the tile unrolled, GCC decides every
         * element's test in every part (no test, no zeros) */
        int tl = per_elem ? tile_term(e, q, v) : -1;
        if (tl < 0)
            continue;
        int64_t ct = coef_of(q, tl), tmn = ct * (ct > 0 ? e->lo[tl] : e->hi[tl]);
        int64_t tmx = ct * (ct > 0 ? e->hi[tl] : e->lo[tl]);
        for (int64_t u = e->lo[tl]; u <= e->hi[tl]; u++)
            np = add_flips(e, v, c, mn - tmn + ct * u, mx - tmx + ct * u, pts, np, cap);
    }
    return np;
}

/* Guarded statements under node once fully unrolled loops are expanded:
 * the bulk of what GCC compiles (the tile copies become a few vector moves)
 * and what a partition copies. */
static int64_t guarded_size(const emit_t *e, int node)
{
    const kt_lower_node_t *nd = &e->L->nodes[node];
    if (nd->kind == KT_NODE_STMT)
        return e->guards[nd->stmt].nq > 0;
    int64_t n = 0;
    for (int ch = nd->child; ch >= 0; ch = e->L->nodes[ch].next)
        n += guarded_size(e, ch);
    if (nd->kind == KT_NODE_LOOP && nd->ann == KT_LOOP_UNROLL)
        n *= e->L->iters[nd->iter].extent;
    return n;
}

/* The statement a perfect nest from node ends in, or -1. */
static int chain_stmt(const kt_lower_t *L, int node)
{
    for (int x = node;;) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind == KT_NODE_STMT)
            return nd->stmt;
        if (nd->kind != KT_NODE_LOOP || nd->child < 0 || L->nodes[nd->child].next >= 0)
            return -1;
        x = nd->child;
    }
}

/* Whether loop iterator it is one of the loops of the perfect nest at node. */
static int in_chain(const kt_lower_t *L, int node, int it)
{
    for (int x = node; x >= 0 && L->nodes[x].kind == KT_NODE_LOOP; x = L->nodes[x].child)
        if (L->nodes[x].iter == it)
            return 1;
    return 0;
}

/* (q without iterator skip) as C: the terms of live iterators and the constant. */
static void print_aff(const emit_t *e, const aff_t *q, int skip, kt_sbuf_t *b)
{
    kt_sbuf_puts(b, "(");
    int m = 0;
    for (int t = 0; t < q->n; t++) {
        const kt_lower_iter_t *it = &e->L->iters[q->iter[t]];
        int64_t k = q->coef[t] < 0 ? -q->coef[t] : q->coef[t];
        if (q->coef[t] == 0 || it->extent <= 1 || q->iter[t] == skip)
            continue;
        kt_sbuf_printf(b, "%s%s", q->coef[t] < 0 ? (m ? " - " : "-") : m ? " + " : "", it->name);
        if (k != 1)
            kt_sbuf_printf(b, "*%lldLL", (long long)k);
        m++;
    }
    if (q->c != 0 || !m)
        kt_sbuf_printf(b, "%s%lldLL)", !m ? "" : q->c < 0 ? " - " : " + ",
                       (long long)(m && q->c < 0 ? -q->c : q->c));
    else
        kt_sbuf_puts(b, ")");
}

/* The C test of the inequalities `bits` of statement si: (sum >= -c && ...). */
static void print_test(const emit_t *e, int si, unsigned bits, kt_sbuf_t *b)
{
    int n = 0;
    for (int k = 0; k < KT_EMIT_GUARD_INEQS; k++) {
        if (!((bits >> k) & 1u))
            continue;
        const aff_t *q = &e->guards[si].q[k];
        kt_sbuf_puts(b, n++ ? " && " : "(");
        int m = 0;
        for (int t = 0; t < q->n; t++) {
            const kt_lower_iter_t *it = &e->L->iters[q->iter[t]];
            if (q->coef[t] == 0 || it->extent <= 1)
                continue;
            int64_t k = q->coef[t] < 0 ? -q->coef[t] : q->coef[t];
            kt_sbuf_printf(b, "%s%s", q->coef[t] < 0 ? (m ? " - " : "-") : m ? " + " : "",
                           it->name);
            if (k != 1)
                kt_sbuf_printf(b, "*%lldLL", (long long)k);
            m++;
        }
        kt_sbuf_printf(b, "%s >= %lldLL", m ? "" : "0LL", (long long)-q->c);
    }
    kt_sbuf_puts(b, n ? ")" : "1");
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

/* kt_codegen_replace_loads on text itself (tmp: scratch). */
static void replace_loads_in(kt_sbuf_t *text, const char *name, const char *repl, kt_sbuf_t *tmp)
{
    kt_sbuf_clear(tmp);
    kt_codegen_replace_loads(text->data ? text->data : "", name, repl ? repl : "", tmp);
    kt_sbuf_clear(text);
    kt_sbuf_puts(text, tmp->data ? tmp->data : "");
    if (tmp->failed)
        text->failed = 1;
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
        replace_loads_in(text, kt_dag_stage(dag, x->stage)->name, repl.data, &tmp);
        if (repl.failed)
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
    /* Inside expanded loops the axes they bind have known values: constant
     * tables fold (kt_codegen_expr_c_lowered). */
    double val[KT_SCHED_MAX_AXES];
    for (int a = 0; a < na && e->nexpand; a++) {
        const kt_lower_index_t *x = &s->axis[a];
        double v = 0;
        for (int t = 0; t < x->nterms && !isnan(v); t++) {
            const kt_lower_iter_t *it = &e->L->iters[x->iter[t]];
            if (it->extent > 1)
                v = it->expand && e->cval[x->iter[t]] >= 0
                        ? v + (double)(x->coef[t] * e->cval[x->iter[t]])
                        : NAN;
        }
        val[a] = x->div > 1 || x->mod > 0 ? NAN : v;
    }
    /* a guarded statement reads its padding stage's taken operand */
    uint64_t taken = e->guards ? e->guards[s - e->L->stmts].taken : 0;
    int rc = kt_codegen_expr_c_lowered(e->dag, s->stage, x, axis_c, e->nexpand ? val : NULL,
                                       e->L, s->axis, e->L->inline_mask, taken, b);
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
        if ((int)(s - e->L->stmts) == e->table_stmt && e->table_load) {
            /* read through border_table's pointers */
            kt_sbuf_t tmp;
            kt_sbuf_init(&tmp);
            replace_loads_in(&text, kt_dag_stage(e->dag, e->guards[e->table_stmt].src)->name,
                             e->table_load, &tmp);
            kt_sbuf_free(&tmp);
        }
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

/* A statement's indentation and the test of its guard's open inequalities. */
static void stmt_start(emit_t *e, int si, unsigned open, int depth, kt_sbuf_t *b)
{
    kt_sbuf_indent(b, depth * 2);
    if (open) {
        kt_sbuf_puts(b, "if ");
        print_test(e, si, open, b);
        kt_sbuf_puts(b, " ");
    }
}

/* How often the code printed at the current node runs (counting only). */
static double node_runs(const emit_t *e)
{
    double w = e->frac;
    for (int t = 0; t < e->nouter; t++)
        w *= (double)(e->hi[e->outer[t]] - e->lo[e->outer[t]] + 1);
    return w;
}

static void stmt_c(emit_t *e, const kt_lower_stmt_t *s, int depth)
{
    kt_sbuf_t *b = e->out;
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    int si = (int)(s - e->L->stmts);
    if (stmt_dead(e, si))
        return;   /* adds only the padding's zeros here */
    unsigned open = open_ineqs(e, si);
    e->nprinted++;
    if (e->runs) {
        double w = node_runs(e);
        e->runs[si] += w;
        e->tested[si] += open ? w : 0.0;
        return;   /* counting only: the statement's text is not needed */
    }
    kt_sbuf_t dst;
    kt_sbuf_init(&dst);
    access_c(e->L, s->dst, s->dst_idx, &dst);
    if (s->kind != KT_STMT_UPDATE)
        stmt_start(e, si, open, depth, b);
    int is_max = ss->rop == KT_RED_MAX;
    switch (s->kind) {
    case KT_STMT_COMPUTE:
        kt_sbuf_printf(b, "%s = ", dst.data);
        body_c(e, s, b);
        break;
    case KT_STMT_INIT:
        kt_sbuf_printf(b, "%s = %s", dst.data, kt_lower_identity_c(ss->rop));
        break;
    case KT_STMT_UPDATE: {
        kt_sbuf_t body;
        kt_sbuf_init(&body);
        body_c(e, s, &body);
        /* a term a folded constant table zeroed adds nothing */
        if (!is_max && e->nexpand && body.data && strcmp(body.data, "0.0f") == 0) {
            kt_sbuf_free(&body);
            kt_sbuf_free(&dst);
            return;
        }
        stmt_start(e, si, open, depth, b);
        kt_sbuf_printf(b, is_max ? "%s = kt_maxf(%s, %s)" : "%s = %s + %s", dst.data, dst.data,
                       body.data ? body.data : "");
        if (body.failed)
            b->failed = 1;
        kt_sbuf_free(&body);
        break;
    }
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

/* Every statement's guard and every iterator's full range; 0 or KT_ENOMEM. */
static int guards_init(emit_t *e)
{
    const kt_lower_t *L = e->L;
    size_t ni = (size_t)(L->niters > 0 ? L->niters : 1), ns = (size_t)(L->nstmts > 0 ? L->nstmts : 1);
    e->lo = calloc(ni, sizeof(*e->lo));
    e->hi = calloc(ni, sizeof(*e->hi));
    e->hoisted = calloc(ns, sizeof(*e->hoisted));
    e->guards = calloc(ns, sizeof(*e->guards));
    e->tile_iter = calloc(ni, 1);
    if (!e->lo || !e->hi || !e->hoisted || !e->guards || !e->tile_iter)
        return kt_err_set(KT_ENOMEM, "emit: out of memory");
    for (int i = 0; i < L->nstmts; i++) {
        const kt_lower_stmt_t *st = &L->stmts[i];
        for (int side = 0; side < 2; side++) {
            int buf = side ? st->src : st->dst;
            const kt_lower_index_t *idx = side ? st->src_idx : st->dst_idx;
            if (buf < 0 || L->bufs[buf].kind != KT_BUF_LOCAL)
                continue;
            for (int d = 0; d < L->bufs[buf].ndim; d++)
                for (int t = 0; t < idx[d].nterms; t++)
                    if (idx[d].iter[t] >= 0)
                        e->tile_iter[idx[d].iter[t]] = 1;
        }
    }
    for (int i = 0; i < L->niters; i++)
        e->hi[i] = L->iters[i].extent > 0 ? L->iters[i].extent - 1 : 0;
    int any = 0;
    for (int i = 0; i < L->nstmts; i++) {
        guard_of_stmt(e, &L->stmts[i], &e->guards[i]);
        any |= e->guards[i].nq > 0;
    }
    if (!any) {   /* the emitter's plain path */
        free(e->guards);
        e->guards = NULL;
        return 0;
    }
    for (int x = L->first; x >= 0; x = L->nodes[x].next)
        e->guarded_total += guarded_size(e, x);
    return 0;
}

static void guards_free(emit_t *e)
{
    free(e->lo);
    free(e->hi);
    free(e->hoisted);
    free(e->tile_iter);
    free(e->guards);
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
 * buffers, then the enclosing loops' iterators that run more than one value
 * here (the others are constants of the body, see outline_one). */
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
        if (e->lo[e->outer[t]] != e->hi[e->outer[t]])
            kt_sbuf_printf(b, "%s%s%s", k++ ? ", " : "", decl ? "long long " : "",
                           L->iters[e->outer[t]].name);
}

/* The body of a parallel loop group as a function of its own, called once
 * per iteration: inside the region GCC outlines for OpenMP, the buffers
 * lose `restrict` and loop pragmas (the partial unroll below) are dropped,
 * which costs register-tiled kernels up to 1.6x; a plain function with
 * restrict parameters is optimized like serial code. Returns 0 when the
 * body printed no statement (nothing printed, no call). */
static int outline_one(emit_t *e, int first, int depth)
{
    char name[KT_LOWER_NAME + 128];
    kt_sbuf_t body;
    kt_sbuf_init(&body);
    kt_sbuf_t *saved = e->out;
    int nparams = e->nparams, nprinted = e->nprinted;
    e->out = &body;
    e->nparams = e->nouter;
    emit_list(e, first, 1, 1, 0);
    e->nparams = nparams;
    e->out = saved;
    if (e->nprinted == nprinted) {
        kt_sbuf_free(&body);
        return 0;
    }
    snprintf(name, sizeof(name), "kt_par%d_%s", e->npar++, e->entry);
    kt_sbuf_printf(e->fns, "static __attribute__((noinline)) int %s(", name);
    outline_args(e, 1, e->fns);
    kt_sbuf_puts(e->fns, ")\n{\n    int kt_fail = 0;\n");
    /* an iterator with one value here is a constant GCC folds into the tests */
    for (int t = 0; t < e->nouter; t++)
        if (e->lo[e->outer[t]] == e->hi[e->outer[t]])
            kt_sbuf_printf(e->fns, "    const long long %s = %lldLL;\n",
                           e->L->iters[e->outer[t]].name, (long long)e->lo[e->outer[t]]);
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
    return 1;
}

/* Where parameter v of a body (the statements from first) splits for the
 * open tests under it (split_points over the list, at most
 * KT_EMIT_SPLIT_POINTS into pts). */
static int list_split_points(const emit_t *e, int first, int v, int64_t *pts)
{
    int np = 0;
    for (int x = first; x >= 0; x = e->L->nodes[x].next)
        np = split_points(e, x, v, pts, np, KT_EMIT_SPLIT_POINTS, 0);
    return np;
}

/* Whether every statement from first adds only zeros at the current ranges. */
static int list_dead(const emit_t *e, int first)
{
    for (int x = first; x >= 0; x = e->L->nodes[x].next)
        if (!subtree_dead(e, x))
            return 0;
    return 1;
}

/* The body outlined once per part of its parameters' ranges where a
 * padding test flips (parameters k.. in turn), the call behind a test of
 * the iteration's values: inside a part GCC sees the test decided. A
 * parallel loop over output rows otherwise runs every chunk's first rows as
 * the border, tested element by element against a parameter GCC cannot
 * know (its tile spilled: a 56x56 stride-2 conv2d split in two row chunks
 * ran 1.2x slower than split over channels). */
static void outline_parts(emit_t *e, int first, int depth, int k)
{
    int64_t pts[KT_EMIT_SPLIT_POINTS];
    int np = 0, v = -1;
    for (; k < e->nouter && k < 64 && np == 0; k++) {
        v = e->outer[k];
        np = (e->split_params >> k) & 1u ? list_split_points(e, first, v, pts) : 0;
    }
    if (np == 0) {
        outline_one(e, first, depth);
        return;
    }
    kt_sbuf_t *b = e->out;
    int64_t lo = e->lo[v], hi = e->hi[v];
    int opened = 0;
    for (int p = 0; p <= np && !e->rc; p++) {
        e->lo[v] = p ? pts[p - 1] : lo;
        e->hi[v] = p < np ? pts[p] - 1 : hi;
        if (list_dead(e, first))
            continue;
        size_t at = b->len;
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "%sif (%s >= %lldLL && %s <= %lldLL) {\n", opened ? "} else " : "",
                       e->L->iters[v].name, (long long)e->lo[v], e->L->iters[v].name,
                       (long long)e->hi[v]);
        size_t inside = b->len;
        outline_parts(e, first, depth + 1, k);
        if (b->len == inside)
            kt_sbuf_truncate(b, at);   /* nothing to call for these values */
        else
            opened = 1;
    }
    e->lo[v] = lo;
    e->hi[v] = hi;
    if (opened) {
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_puts(b, "}\n");
    }
}

/* The parallel group's body outlined: once per part of the parameters
 * where padding tests flip (outline_parts), the outermost parameters first,
 * as long as that makes at most KT_EMIT_PAR_BODIES functions. */
static void outline_body(emit_t *e, int first, int depth)
{
    int64_t pts[KT_EMIT_SPLIT_POINTS], bodies = 1;
    e->split_params = 0;
    for (int k = 0; e->guards && k < e->nouter && k < 64; k++) {
        int64_t parts = list_split_points(e, first, e->outer[k], pts) + 1;
        if (parts > 1 && bodies * parts <= KT_EMIT_PAR_BODIES) {
            bodies *= parts;
            e->split_params |= (uint64_t)1 << k;
        }
    }
    outline_parts(e, first, depth, 0);
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

static void emit_loop_plain(emit_t *e, int node, int depth, int in_par, int in_vec)
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

/* Whether loop iterator it is a loop at or under node. */
static int in_subtree(const kt_lower_t *L, int node, int it)
{
    const kt_lower_node_t *nd = &L->nodes[node];
    if (nd->kind == KT_NODE_LOOP && nd->iter == it)
        return 1;
    for (int ch = nd->child; ch >= 0; ch = L->nodes[ch].next)
        if (in_subtree(L, ch, it))
            return 1;
    return 0;
}

typedef struct {
    int tile;                         /* some test reads a local tile's iterator */
    int none;                         /* some test fails somewhere for every outer value */
    int nc;
    aff_t cond[KT_EMIT_GUARD_INEQS];  /* what the interior needs of the enclosing loops */
} interior_t;

/* The open tests of the statements under `at` that read its loops: in
 * in->cond, each with those loops at the end of their ranges that makes it
 * smallest (a test is affine, so it holds for every value of them where it
 * holds there); their bits in bits[stmt]. */
static void interior_tests(emit_t *e, int at, int node, uint8_t *bits, interior_t *in)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    if (nd->kind != KT_NODE_STMT) {
        for (int ch = nd->child; ch >= 0 && !in->none; ch = L->nodes[ch].next)
            interior_tests(e, at, ch, bits, in);
        return;
    }
    int si = nd->stmt;
    unsigned open = open_ineqs(e, si);
    for (int k = 0; k < e->guards[si].nq && !in->none; k++) {
        if (!((open >> k) & 1u))
            continue;
        const aff_t *q = &e->guards[si].q[k];
        aff_t r = {.c = q->c};
        int inner = 0;
        for (int t = 0; t < q->n; t++) {
            int it = q->iter[t];
            int64_t c = q->coef[t];
            if (c == 0 || L->iters[it].extent <= 1)
                continue;
            if (in_subtree(L, at, it)) {
                inner = 1;
                in->tile |= e->tile_iter[it];
                r.c += c * (c > 0 ? e->lo[it] : e->hi[it]);
            } else {
                r.iter[r.n] = it;
                r.coef[r.n++] = c;
            }
        }
        if (!inner)
            continue;
        if (r.n == 0 && r.c < 0)
            in->none = 1;
        bits[si] |= (uint8_t)(1u << k);
        if (r.n > 0 && in->nc < KT_EMIT_GUARD_INEQS)
            in->cond[in->nc++] = r;
        else if (r.n > 0)
            in->none = 1;   /* more tests than one interior test takes */
    }
}

/* Whether x is one of v[0..n). */
static int in_list(const int *v, int n, int x)
{
    for (int j = 0; j < n; j++)
        if (v[j] == x)
            return 1;
    return 0;
}

/* Share of the points of the enclosing loops' current ranges where every
 * test of in->cond holds (counted over the iterators the tests read; 0.5
 * past a million points). */
static double interior_share(const emit_t *e, const interior_t *in)
{
    int its[KT_EMIT_GUARD_INEQS * KT_EMIT_AFF_TERMS], n = 0;
    int64_t v[KT_EMIT_GUARD_INEQS * KT_EMIT_AFF_TERMS];
    double points = 1;
    for (int k = 0; k < in->nc; k++)
        for (int t = 0; t < in->cond[k].n; t++) {
            int it = in->cond[k].iter[t];
            if (!in_list(its, n, it)) {
                its[n++] = it;
                points *= (double)(e->hi[it] - e->lo[it] + 1);
            }
        }
    if (points > 1e6)
        return 0.5;
    for (int j = 0; j < n; j++)
        v[j] = e->lo[its[j]];
    double hold = 0;
    for (;;) {
        int ok = 1;
        for (int k = 0; k < in->nc && ok; k++) {
            int64_t x = in->cond[k].c;
            for (int t = 0; t < in->cond[k].n; t++)
                for (int j = 0; j < n; j++)
                    if (its[j] == in->cond[k].iter[t])
                        x += in->cond[k].coef[t] * v[j];
            ok = x >= 0;
        }
        hold += ok;
        int j = 0;
        while (j < n && ++v[j] > e->hi[its[j]]) {
            v[j] = e->lo[its[j]];
            j++;
        }
        if (j == n)
            break;
    }
    return hold / points;
}

/* Whether a local tile is allocated under node. */
static int holds_alloc(const kt_lower_t *L, int node)
{
    for (int ch = L->nodes[node].child; ch >= 0; ch = L->nodes[ch].next)
        if (L->nodes[ch].kind == KT_NODE_ALLOC || holds_alloc(L, ch))
            return 1;
    return 0;
}

static void emit_loop(emit_t *e, int node, int depth, int in_par, int in_vec);

/* A loop under which a local tile is allocated (a register tile, loaded,
 * updated and stored inside it) whose statements' open tests read the
 * tile's iterators (never split, see "padding guards": every unrolled
 * element of the tile would be tested at every reduction step) is printed
 * twice, behind one test of the enclosing loops: where every test holds for
 * all of the loop's values, a copy that tests nothing; elsewhere (the
 * border) the copy with the guards, partitions and narrowed loops above.
 * The innermost loop holding the allocation is split, so the border is the
 * tiles that read the padding and no more (split further out, whole blocks
 * of rows ran the border copy: half the work of a tuned 56x56 stride-2
 * state, 1.5x slower than with the padding materialized); a loop whose
 * values always reach the border has no interior, nor has any loop around it.
 * The copies are whole loops, tile loads and stores included: GCC keeps
 * the tile in registers in each (an if/else around the update alone made
 * it spill the tile). Returns 1 when it printed the loop. */
static int tile_interior(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    if (!holds_alloc(L, node) || e->tile_split || e->nexpand > 0 || e->parts * 2 > KT_EMIT_MAX_PARTS)
        return 0;
    for (int ch = L->nodes[node].child; ch >= 0; ch = L->nodes[ch].next)
        if (L->nodes[ch].kind == KT_NODE_LOOP && holds_alloc(L, ch))
            return 0;   /* split further in */
    uint8_t *bits = calloc((size_t)(L->nstmts > 0 ? L->nstmts : 1), 1);
    interior_t in = {0};
    if (!bits) {
        e->rc = kt_err_set(KT_ENOMEM, "emit: out of memory");
        return 1;
    }
    interior_tests(e, node, node, bits, &in);
    if (!in.tile || in.none) {
        free(bits);
        return 0;
    }
    kt_sbuf_t *b = e->out;
    int64_t parts = e->parts;
    e->nsplit++;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, e->pass == 2 ? "if (!(" : "if (");
    for (int k = 0; k < in.nc; k++) {
        kt_sbuf_puts(b, k ? " && " : "");
        print_aff(e, &in.cond[k], -1, b);
        kt_sbuf_puts(b, " >= 0LL");
    }
    kt_sbuf_puts(b, in.nc ? "" : "1");
    kt_sbuf_puts(b, e->pass == 2 ? ")) {\n" : ") {\n");
    double frac = e->frac, share = e->runs ? interior_share(e, &in) : 1.0;
    e->tile_split = 1;
    e->parts = parts * 2;
    e->frac = frac * share;
    for (int i = 0; i < L->nstmts; i++)
        e->hoisted[i] |= bits[i];
    if (e->pass != 2)
        emit_loop(e, node, depth + 1, in_par, in_vec);
    for (int i = 0; i < L->nstmts; i++)
        e->hoisted[i] &= (uint8_t)~bits[i];
    if (e->pass <= 0) {
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_puts(b, "} else {\n");
    }
    e->frac = frac * (1.0 - share);
    e->border = 1;
    if (e->pass != 1)
        emit_loop(e, node, depth + 1, in_par, in_vec);
    e->border = 0;
    kt_sbuf_indent(b, depth * 2);
    kt_sbuf_puts(b, "}\n");
    e->frac = frac;
    e->tile_split = 0;
    e->parts = parts;
    free(bits);
    return 1;
}

/* Whether node is a register tile's loop: it holds a local buffer and no
 * loop under it does (where tile_interior splits). */
static int tile_node(const kt_lower_t *L, int node)
{
    if (L->nodes[node].kind != KT_NODE_LOOP || !holds_alloc(L, node))
        return 0;
    for (int ch = L->nodes[node].child; ch >= 0; ch = L->nodes[ch].next)
        if (L->nodes[ch].kind == KT_NODE_LOOP && holds_alloc(L, ch))
            return 0;
    return 1;
}

/* Whether every statement of the list from first lies in a register tile's
 * loop: then a parallel group over it may print in two passes, every tile
 * once, the interior copies and untested tiles in the first, the border
 * copies in the second. Interleaved with the interior's tiles, the border's
 * partitions made GCC compile the interior's loop worse and ran slower than
 * the two apart (docs/benchmarks.md, the stem's border). */
static int two_pass_ok(const kt_lower_t *L, int first)
{
    for (int x = first; x >= 0; x = L->nodes[x].next) {
        if (L->nodes[x].kind != KT_NODE_LOOP)
            return 0;
        if (!tile_node(L, x) && !two_pass_ok(L, L->nodes[x].child))
            return 0;
    }
    return 1;
}

/* The annotation of loop iterator it at or under node; -1 if none. */
static int ann_under(const kt_lower_t *L, int node, int it)
{
    const kt_lower_node_t *nd = &L->nodes[node];
    if (nd->kind == KT_NODE_LOOP && nd->iter == it)
        return (int)nd->ann;
    for (int ch = nd->child; ch >= 0; ch = L->nodes[ch].next) {
        int a = ann_under(L, ch, it);
        if (a >= 0)
            return a;
    }
    return -1;
}

/* The one statement under node whose guard has open tests; -1 if none or
 * several. */
static int open_stmt_under(const emit_t *e, int node)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    if (nd->kind == KT_NODE_STMT)
        return !stmt_dead(e, nd->stmt) && open_ineqs(e, nd->stmt) ? nd->stmt : -1;
    int found = -1;
    for (int ch = nd->child; ch >= 0; ch = L->nodes[ch].next) {
        const kt_lower_node_t *c = &L->nodes[ch];
        int si = c->kind == KT_NODE_STMT || c->kind == KT_NODE_LOOP ? open_stmt_under(e, ch) : -1;
        if (si == -2 || (si >= 0 && found >= 0 && si != found))
            return -2;
        if (si >= 0)
            found = si;
    }
    return found;
}

/* Whether each open test of g (bits open) is true or false for every element
 * of the tile loops dims over the ranges of the other loops, none of them a
 * parameter of the function (GCC knows only the ranges of the loops it
 * sees): once the tile is unrolled, GCC decides them all (the border pass's
 * split_points cut the loops to make it so). */
static int decided_per_element(emit_t *e, const guard_t *g, unsigned open, const int *dims,
                               int ndims)
{
    for (int k = 0; k < g->nq; k++)
        for (int t = 0; ((open >> k) & 1u) && t < g->q[k].n; t++) {
            int it = g->q[k].iter[t];
            if (g->q[k].coef[t] != 0 && e->lo[it] != e->hi[it] && in_list(e->outer, e->nparams, it))
                return 0;
        }
    /* each element in turn: the dims' ranges narrowed to its values */
    int64_t lo[KT_EMIT_AFF_TERMS], hi[KT_EMIT_AFF_TERMS];
    for (int j = 0; j < ndims; j++) {
        lo[j] = e->lo[dims[j]];
        hi[j] = e->hi[dims[j]];
        e->hi[dims[j]] = lo[j];
    }
    int decided = 1;
    for (;;) {
        for (int k = 0; k < g->nq && decided; k++)
            decided = !((open >> k) & 1u) || ineq_state(e, &g->q[k]) != Q_OPEN;
        int j = ndims - 1;
        for (; j >= 0 && e->lo[dims[j]] == hi[j]; j--)
            e->lo[dims[j]] = e->hi[dims[j]] = lo[j];
        if (!decided || j < 0)
            break;
        e->lo[dims[j]] = ++e->hi[dims[j]];
    }
    for (int j = 0; j < ndims; j++) {
        e->lo[dims[j]] = lo[j];
        e->hi[dims[j]] = hi[j];
    }
    return decided;
}

/* In a register tile's border copy (tile_interior), a serial loop under
 * which the one guarded update's open tests read only the tile's own loops
 * (and loops around this one) is preceded by a table of pointers, one per
 * value of those tile loops: into the padding's source where the tests
 * hold, else to a block of zeros; the update reads through it and tests
 * nothing. A test per tile element and reduction step, an unrolled branch,
 * made GCC spill the tile (border tiles ran 3-6 times the interior's time,
 * more than the padding they skip); the table is built once per iteration
 * of the loops around this one and read by every iteration of this loop,
 * adding the padding's zeros at the interior's speed. Returns 1 when it
 * printed the loop. */
static int border_table(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    int v = nd->iter;
    if (!e->border || e->table_stmt >= 0 || nd->ann == KT_LOOP_PARALLEL || in_vec ||
        e->tile_iter[v] || L->iters[v].extent <= 1)
        return 0;
    int si = open_stmt_under(e, node);
    if (si < 0 || e->guards[si].src < 0)
        return 0;
    const guard_t *g = &e->guards[si];
    unsigned open = open_ineqs(e, si);
    int dims[KT_EMIT_AFF_TERMS], ndims = 0, folds = 1;
    int64_t entries = 1;
    for (int k = 0; k < g->nq; k++) {
        if (!((open >> k) & 1u))
            continue;
        for (int t = 0; t < g->q[k].n; t++) {
            int it = g->q[k].iter[t];
            if (g->q[k].coef[t] == 0 || L->iters[it].extent <= 1)
                continue;
            if (!in_subtree(L, node, it)) {
                folds &= e->lo[it] == e->hi[it];
                continue;
            }
            if (!e->tile_iter[it] || e->lo[it] != 0 || e->hi[it] != L->iters[it].extent - 1 ||
                ann_under(L, node, it) == KT_LOOP_VECTORIZE)
                return 0;   /* not a whole tile loop, or its lanes would gather: the guards */
            if (in_list(dims, ndims, it))
                continue;
            if (ndims == KT_EMIT_AFF_TERMS)
                return 0;
            dims[ndims++] = it;
            entries *= L->iters[it].extent;
        }
    }
    /* tests of the unrolled tile loops and constants only, or decided for
     * each tile element over this part's ranges: GCC folds them */
    if (ndims == 0 || folds || entries > KT_EMIT_TABLE_MAX ||
        decided_per_element(e, g, open, dims, ndims))
        return 0;
    /* the load's index: the entry's part (outer and tested loops) and the
     * offset of the loops under node the tests do not read */
    aff_t base = {.c = g->flat.c}, off = {0};
    int64_t span = 1;
    for (int t = 0; t < g->flat.n; t++) {
        int it = g->flat.iter[t];
        int64_t c = g->flat.coef[t];
        if (c == 0 || L->iters[it].extent <= 1)
            continue;
        aff_t *to = in_subtree(L, node, it) && !in_list(dims, ndims, it) ? &off : &base;
        if (to == &off) {
            if (c < 0)
                return 0;
            span += c * (L->iters[it].extent - 1);
        }
        to->iter[to->n] = it;
        to->coef[to->n++] = c;
    }
    if (span > KT_EMIT_ZERO_MAX)
        return 0;
    int id = e->ntables++;
    kt_sbuf_t *b = e->out, load;
    kt_sbuf_init(&load);
    if (!e->runs) {
        const char *src = kt_dag_stage(e->dag, g->src)->name;
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "static const float kt_zeros%d[%lld] __attribute__((aligned(64)));\n",
                       id, (long long)span);
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "const float *kt_border%d[%lld];\n", id, (long long)entries);
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "int kt_any%d = 0;\n", id);
        kt_sbuf_printf(&load, "kt_border%d[", id);
        /* unrolled, so that the pointers stay in registers (GCC left a
         * rolled fill's table in memory in some kernels) */
        for (int j = 0; j < ndims; j++) {
            kt_sbuf_indent(b, (depth + j) * 2);
            kt_sbuf_printf(b, "#pragma GCC unroll %lld\n", (long long)L->iters[dims[j]].extent);
            kt_sbuf_indent(b, (depth + j) * 2);
            kt_sbuf_printf(b, "for (long long %s = 0; %s < %lldLL; ++%s)\n",
                           L->iters[dims[j]].name, L->iters[dims[j]].name,
                           (long long)L->iters[dims[j]].extent, L->iters[dims[j]].name);
        }
        kt_sbuf_t idx;
        kt_sbuf_init(&idx);
        for (int j = 0; j < ndims; j++) {
            int64_t m = 1;
            for (int k = j + 1; k < ndims; k++)
                m *= L->iters[dims[k]].extent;
            kt_sbuf_printf(&idx, "%s%s*%lldLL", j ? " + " : "", L->iters[dims[j]].name,
                           (long long)m);
        }
        kt_sbuf_indent(b, (depth + ndims) * 2);
        kt_sbuf_puts(b, "{\n");
        kt_sbuf_indent(b, (depth + ndims + 1) * 2);
        kt_sbuf_puts(b, "const int kt_in = ");
        print_test(e, si, open, b);
        kt_sbuf_puts(b, ";\n");
        kt_sbuf_indent(b, (depth + ndims + 1) * 2);
        kt_sbuf_printf(b, "kt_border%d[%s] = kt_in ? &%s[", id, idx.data ? idx.data : "0", src);
        print_aff(e, &base, -1, b);
        kt_sbuf_printf(b, "] : kt_zeros%d;\n", id);
        kt_sbuf_indent(b, (depth + ndims + 1) * 2);
        kt_sbuf_printf(b, "kt_any%d |= kt_in;\n", id);
        kt_sbuf_indent(b, (depth + ndims) * 2);
        kt_sbuf_puts(b, "}\n");
        /* where the whole tile reads the padding the loop adds only zeros */
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "if (kt_any%d) {\n", id);
        kt_sbuf_printf(&load, "%s][", idx.data ? idx.data : "0");
        print_aff(e, &off, -1, &load);
        kt_sbuf_puts(&load, "]");
        kt_sbuf_free(&idx);
        if (kt_sbuf_ok(&load)) {
            kt_sbuf_free(&load);
            e->rc = kt_err_set(KT_ENOMEM, "emit: out of memory");
            return 1;
        }
    }
    if (e->runs)
        e->tested[si] += node_runs(e) * (double)entries;   /* the table's tests */
    e->table_stmt = si;
    e->table_load = load.data;
    e->hoisted[si] |= (uint8_t)open;
    emit_loop(e, node, depth + 1, in_par, in_vec);
    if (!e->runs) {
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_puts(b, "}\n");
    }
    e->hoisted[si] &= (uint8_t)~open;
    e->table_stmt = -1;
    e->table_load = NULL;
    kt_sbuf_free(&load);
    return 1;
}

/* A loop with the padding guards of the statements under it: not printed
 * where they add only zeros, the undecided tests of a perfect nest's
 * statement hoisted above it, the loop partitioned where its iterator
 * decides a test (see "padding guards"). */
static void emit_loop(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    int v = nd->iter;
    if (subtree_dead(e, node))
        return;
    if (e->guards && nd->ann != KT_LOOP_PARALLEL && !in_vec &&
        tile_interior(e, node, depth, in_par, in_vec))
        return;
    if (e->pass == 2 && !e->tile_split && tile_node(L, node))
        return;   /* no border copy: the first pass printed it whole */
    if (e->guards && border_table(e, node, depth, in_par, in_vec))
        return;
    if (!e->guards || L->iters[v].extent <= 1 || nd->ann == KT_LOOP_PARALLEL || in_vec) {
        emit_loop_plain(e, node, depth, in_par, in_vec);
        return;
    }
    int si = chain_stmt(L, node);
    unsigned hoist = 0;
    for (int k = 0; si >= 0 && k < e->guards[si].nq; k++) {
        const aff_t *q = &e->guards[si].q[k];
        int inside = 0;
        for (int t = 0; t < q->n && !inside; t++)
            inside = q->coef[t] != 0 && L->iters[q->iter[t]].extent > 1 &&
                     in_chain(L, node, q->iter[t]);
        if (!inside)
            hoist |= 1u << k;
    }
    if (si >= 0 && (hoist &= open_ineqs(e, si)) != 0) {
        kt_sbuf_indent(e->out, depth * 2);
        kt_sbuf_puts(e->out, "if ");
        print_test(e, si, hoist, e->out);
        kt_sbuf_puts(e->out, " {\n");
        e->hoisted[si] |= (uint8_t)hoist;
        if (e->runs)
            e->tested[si] += node_runs(e);
        emit_loop(e, node, depth + 1, in_par, in_vec);
        e->hoisted[si] &= (uint8_t)~hoist;
        kt_sbuf_indent(e->out, depth * 2);
        kt_sbuf_puts(e->out, "}\n");
        return;
    }
    /* A serial loop around the statement alone whose open tests read it and
     * enclosing loops only: its bounds are narrowed to where they hold
     * (computed when the loop starts), so it neither tests nor adds zeros. */
    unsigned narrow = 0, open = si >= 0 ? open_ineqs(e, si) : 0;
    for (int k = 0; si >= 0 && nd->ann == KT_LOOP_SERIAL && L->iters[v].reduce &&
                    k < e->guards[si].nq;
         k++) {
        const aff_t *q = &e->guards[si].q[k];
        int inner = 0;
        for (int t = 0; t < q->n && !inner; t++)
            inner = q->iter[t] != v && q->coef[t] != 0 && L->iters[q->iter[t]].extent > 1 &&
                    in_chain(L, node, q->iter[t]);
        if (((open >> k) & 1u) && coef_of(q, v) != 0 && !inner)
            narrow |= 1u << k;
    }
    if (narrow) {
        kt_sbuf_t lo, hi;
        kt_sbuf_init(&lo);
        kt_sbuf_init(&hi);
        kt_sbuf_printf(&lo, "%lldLL", (long long)e->lo[v]);
        kt_sbuf_printf(&hi, "%lldLL", (long long)(e->hi[v] + 1));
        /* counting only (kt_codegen_c_tested_share): the bounds are not printed */
        for (int k = 0; k < KT_EMIT_GUARD_INEQS && !e->runs; k++) {
            if (!((narrow >> k) & 1u))
                continue;
            /* c*v + r >= 0: v >= ceil(-r/c) = -floor(r/c) for c > 0, v < floor(r/-c) + 1
             * for c < 0 */
            const aff_t *q = &e->guards[si].q[k];
            int64_t c = coef_of(q, v);
            kt_sbuf_t *bd = c > 0 ? &lo : &hi, r;
            kt_sbuf_init(&r);
            print_aff(e, q, v, &r);
            char *prev = kt_sbuf_take(bd);
            kt_sbuf_init(bd);
            kt_sbuf_printf(bd, "%s(%s, ", c > 0 ? "kt_maxi" : "kt_mini", prev ? prev : "0");
            if (c == 1 || c == -1)
                kt_sbuf_printf(bd, c > 0 ? "-%s)" : "%s + 1LL)", r.data);
            else if (c > 0)
                kt_sbuf_printf(bd, "-kt_floordiv(%s, %lldLL))", r.data, (long long)c);
            else
                kt_sbuf_printf(bd, "kt_floordiv(%s, %lldLL) + 1LL)", r.data, (long long)-c);
            free(prev);
            kt_sbuf_free(&r);
        }
        if (kt_sbuf_ok(&lo) || kt_sbuf_ok(&hi)) {
            e->rc = kt_err_set(KT_ENOMEM, "emit: out of memory");
        } else {
            if (e->runs)
                e->tested[si] += node_runs(e);
            e->narrow_node = node;
            e->narrow_lo = lo.data;
            e->narrow_hi = hi.data;
            e->hoisted[si] |= (uint8_t)narrow;
            emit_loop_plain(e, node, depth, in_par, in_vec);
            e->hoisted[si] &= (uint8_t)~narrow;
        }
        kt_sbuf_free(&lo);
        kt_sbuf_free(&hi);
        return;
    }
    int64_t pts[KT_EMIT_SPLIT_POINTS];
    int64_t lo = e->lo[v], hi = e->hi[v], parts = e->parts;
    /* bounded code: GCC's time grows with the unrolled statements it compiles */
    int64_t cap = e->guarded_total > KT_EMIT_PART_MIN ? e->guarded_total : KT_EMIT_PART_MIN;
    int np = 0, live = 0;
    /* in a border copy (a small share of the work), first the cuts at each tile
     * element's own point, with a larger bound; else those where whole tiles flip */
    for (int per_elem = e->border && e->pass == 2; per_elem >= 0; per_elem--) {
        int64_t most = per_elem ? KT_EMIT_MAX_PARTS * KT_EMIT_BORDER_PARTS : KT_EMIT_MAX_PARTS;
        np = nd->ann == KT_LOOP_UNROLL || e->tile_iter[v]
                 ? 0
                 : split_points(e, node, v, pts, 0, KT_EMIT_SPLIT_POINTS, per_elem);
        live = 0;
        for (int k = 0; k <= np; k++) {
            e->lo[v] = k ? pts[k - 1] : lo;
            e->hi[v] = k < np ? pts[k] - 1 : hi;
            live += !subtree_dead(e, node);
        }
        e->lo[v] = lo;
        e->hi[v] = hi;
        if (np > 0 && parts * live <= most && parts * live * guarded_size(e, node) <= cap)
            break;
        np = 0;
    }
    if (np == 0) {
        emit_loop_plain(e, node, depth, in_par, in_vec);
        return;
    }
    e->parts = parts * live;
    for (int k = 0; k <= np && !e->rc; k++) {
        e->lo[v] = k ? pts[k - 1] : lo;
        e->hi[v] = k < np ? pts[k] - 1 : hi;
        if (!subtree_dead(e, node))
            emit_loop_plain(e, node, depth, in_par, in_vec);
    }
    e->lo[v] = lo;
    e->hi[v] = hi;
    e->parts = parts;
}

/* The parallel group at node printed twice (two_pass_ok): its interior
 * copies and untested tiles, then its border copies; where the border reads
 * through a table, printed again in one pass instead (in a pass of their own
 * such tiles ran slower than beside the interior's). The two passes are
 * loops of one parallel region without a barrier between them (each tile is
 * printed in one pass): with a barrier, the chunks holding the border ran
 * their border pass while the other threads waited (a conv2d whose first of
 * four row chunks was all border took 1.5x its time on two threads). */
static void emit_two_passes(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    size_t out_len = e->out->len, fns_len = e->fns->len;
    int npar = e->npar, ntables = e->ntables, nsplit = e->nsplit;
    kt_sbuf_indent(e->out, depth * 2);
    kt_sbuf_puts(e->out, "#pragma omp parallel\n");
    kt_sbuf_indent(e->out, depth * 2);
    kt_sbuf_puts(e->out, "{\n");
    e->region = 1;
    e->pass = 1;
    emit_loop_nest(e, node, depth + 1, in_par, in_vec);
    if (e->nsplit > nsplit && !e->rc) {
        e->pass = 2;
        emit_loop_nest(e, node, depth + 1, in_par, in_vec);
    }
    e->region = 0;
    if (e->nsplit == nsplit || e->ntables > ntables) {
        /* nothing for a second pass, or tables: the group in one loop */
        kt_sbuf_truncate(e->out, out_len);
        kt_sbuf_truncate(e->fns, fns_len);
        e->npar = npar;
        e->ntables = ntables;
        e->nsplit = nsplit;
        e->pass = -1;
        if (!e->rc)
            emit_loop_nest(e, node, depth, in_par, in_vec);
    } else {
        kt_sbuf_indent(e->out, depth * 2);
        kt_sbuf_puts(e->out, "}\n");
    }
    e->pass = 0;
}

static void emit_loop_nest(emit_t *e, int node, int depth, int in_par, int in_vec)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[node];
    const kt_lower_iter_t *it = &L->iters[nd->iter];
    kt_sbuf_t *b = e->out;
    if (nd->ann == KT_LOOP_PARALLEL && !in_par && e->par_last < 0 && e->nallocs == 0) {
        int last = group_last(L, node, KT_LOOP_PARALLEL);
        if (e->pass == 0 && !e->runs && e->guards && two_pass_ok(L, L->nodes[last].child)) {
            emit_two_passes(e, node, depth, in_par, in_vec);
            return;
        }
        e->par_last = last;
    }
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
        kt_sbuf_puts(b, e->region ? "#pragma omp for schedule(static) nowait"
                                  : "#pragma omp parallel for schedule(static)");
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
    } else if (nd->ann == KT_LOOP_UNROLL && it->expand) {
        /* The body once per value, the iterator a constant the statements'
         * constant tables fold with (see expr_of_stmt). */
        for (int64_t v = 0; v < it->extent && !e->rc; v++) {
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_printf(b, "{\n");
            kt_sbuf_indent(b, depth * 2 + 2);
            kt_sbuf_printf(b, "const long long %s = %lldLL;\n", it->name, (long long)v);
            e->cval[nd->iter] = v;
            e->nexpand++;
            emit_body(e, node, depth + 1, in_par, in_vec);
            e->nexpand--;
            e->cval[nd->iter] = -1;
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_puts(b, "}\n");
        }
        return;
    } else if (nd->ann == KT_LOOP_UNROLL) {
        kt_sbuf_indent(b, depth * 2);
        kt_sbuf_printf(b, "#pragma GCC unroll %lld\n", (long long)(e->hi[nd->iter] -
                                                                    e->lo[nd->iter] + 1));
    } else if (nd->ann == KT_LOOP_SERIAL && it->reduce) {
        /* The innermost reduce loop around an unrolled block (a register
         * tile's update): a few copies let GCC keep the block's operands in
         * registers and overlap their loads, as LLVM's runtime unrolling
         * does for TVM; one of at most that many steps runs unrolled whole
         * (left to its heuristics, GCC kept such a loop of 3 in some
         * kernels, its counter and addresses spilled beside the tile). */
        int64_t steps = unrolled_steps(L, nd->child), trips = e->hi[nd->iter] - e->lo[nd->iter] + 1;
        int narrowed = node == e->narrow_node;   /* its trip count known at run time only */
        if (steps >= 1 && steps <= KT_EMIT_PARTIAL_UNROLL_STEPS &&
            (trips > KT_EMIT_PARTIAL_UNROLL || (!narrowed && trips > 1))) {
            kt_sbuf_indent(b, depth * 2);
            kt_sbuf_printf(b, "#pragma GCC unroll %lld\n",
                           (long long)(trips > KT_EMIT_PARTIAL_UNROLL ? KT_EMIT_PARTIAL_UNROLL
                                                                      : trips));
        }
    }
    if (e->nouter == MAX_OUTER) {
        e->rc = kt_err_set(KT_EINVAL, "loops nested deeper than %d", MAX_OUTER);
        return;
    }
    kt_sbuf_indent(b, depth * 2);
    if (node == e->narrow_node) {
        e->narrow_node = -1;
        kt_sbuf_printf(b, "for (long long %s = %s; %s < %s; ++%s) {\n", it->name, e->narrow_lo,
                       it->name, e->narrow_hi, it->name);
    } else {
        kt_sbuf_printf(b, "for (long long %s = %lld; %s < %lldLL; ++%s) {\n", it->name,
                       (long long)e->lo[nd->iter], it->name, (long long)(e->hi[nd->iter] + 1),
                       it->name);
    }
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

/* Floats buffer i takes in the workspace (0: not a heap buffer), rounded up
 * so that each buffer starts on a cache line: a vector load of a weight's
 * rewritten layout that straddles two lines made one conv2d 35% slower. */
static int64_t workspace_floats(const kt_lower_t *L, int i)
{
    const kt_lower_buf_t *bf = &L->bufs[i];
    if (bf->kind != KT_BUF_HEAP)
        return 0;
    int64_t n = 1;
    for (int d = 0; d < bf->ndim; d++)
        n *= bf->shape[d];
    return (n + 15) / 16 * 16;
}

/* The kernel's heap intermediates live in one block, its workspace, taken
 * from the pool the preamble declares (kt_pool_take, as TVM's workspace pool
 * does): freed and allocated again on every call, glibc hands large blocks
 * back to the system, so every call faulted in and zeroed fresh pages (a
 * Winograd conv2d's 5 MiB of transformed tiles took longer than its
 * arithmetic). The pool is one block for all kernels of a source file, so
 * a built network's kernels write their intermediates into memory the
 * previous kernel has just used (one block per kernel made every Winograd
 * step of a ResNet-18 write megabytes of lines long evicted). In the
 * kernel (b), takes the block and opens `if (kt_ws) {` with the buffers'
 * pointers into it; returns the number of heap buffers (0: nothing
 * printed). */
static int emit_workspace_open(const kt_lower_t *L, kt_sbuf_t *b)
{
    int nheap = 0;
    int64_t total = 0;
    for (int i = 0; i < L->nbufs; i++) {
        total += workspace_floats(L, i);
        nheap += L->bufs[i].kind == KT_BUF_HEAP;
    }
    if (!nheap)
        return 0;
    kt_sbuf_printf(b,
                   "    int kt_ws_own;\n"
                   "    float *kt_ws = kt_pool_take(%lldULL, &kt_ws_own);\n"
                   "    if (kt_ws) {\n",
                   (long long)total);
    int64_t off = 0;
    for (int i = 0; i < L->nbufs; i++) {
        if (L->bufs[i].kind != KT_BUF_HEAP)
            continue;
        kt_sbuf_printf(b, "        float *restrict %s = kt_ws + %lldLL;\n", L->bufs[i].name,
                       (long long)off);
        off += workspace_floats(L, i);
    }
    return nheap;
}

/* Closes what emit_workspace_open opened: the block goes back to the pool. */
static void emit_workspace_close(kt_sbuf_t *b)
{
    kt_sbuf_puts(b, "    } else {\n        kt_fail = 1;\n    }\n"
                    "    kt_pool_give(kt_ws, kt_ws_own);\n");
}

/* The loop nests of L printed into b (helper functions into fns); with
 * share, each statement's tested share as kt_codegen_c_tested_share
 * describes it. 0 or negative. */
static int emit_program(const kt_dag_t *dag, const kt_lower_t *L, const char *entry, kt_sbuf_t *b,
                        kt_sbuf_t *fns, int depth, double *share)
{
    size_t ns = (size_t)(L->nstmts > 0 ? L->nstmts : 1);
    emit_t e = {.dag = dag, .L = L, .out = b, .fns = fns, .entry = entry, .par_last = -1,
                .parts = 1, .narrow_node = -1, .frac = 1.0, .table_stmt = -1};
    e.cval = malloc(sizeof(*e.cval) * (size_t)(L->niters > 0 ? L->niters : 1));
    if (share) {
        e.runs = calloc(ns, sizeof(*e.runs));
        e.tested = calloc(ns, sizeof(*e.tested));
    }
    int rc = e.cval && (!share || (e.runs && e.tested)) ? guards_init(&e)
                                                        : kt_err_set(KT_ENOMEM, "emit: out of memory");
    for (int i = 0; e.cval && i < L->niters; i++)
        e.cval[i] = -1;
    /* without guards every test stays where the expression has it */
    if (!rc && (!share || e.guards))
        emit_list(&e, L->first, depth, 0, 0);
    else if (rc)
        e.rc = rc;
    for (int i = 0; share && !e.rc && i < L->nstmts; i++)
        share[i] = !e.guards || e.guards[i].nq == 0 ? 1.0
                   : e.runs[i] > 0               ? e.tested[i] / e.runs[i]
                                                 : 0.0;
    guards_free(&e);
    free(e.cval);
    free(e.runs);
    free(e.tested);
    return e.rc;
}

int kt_codegen_c_tested_share(const kt_dag_t *dag, const kt_lower_t *L, double *share)
{
    if (!dag || !L || !share)
        return kt_err_set(KT_EINVAL, "tested share: missing DAG, lowering or output");
    kt_sbuf_t b, fns;
    kt_sbuf_init(&b);
    kt_sbuf_init(&fns);
    b.failed = fns.failed = 1;   /* nothing is kept: appends do nothing */
    int rc = emit_program(dag, L, "share", &b, &fns, 1, share);
    kt_sbuf_free(&b);
    kt_sbuf_free(&fns);
    return rc ? kt_err_prefix("tested share") : 0;
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
    for (int i = 0; i < L->nbufs; i++) {
        const kt_lower_buf_t *bf = &L->bufs[i];
        if (bf->kind == KT_BUF_INPUT)
            kt_sbuf_printf(b, "    const float *restrict %s = kt_bufs[%d];\n", bf->name, bf->arg);
        else if (bf->kind == KT_BUF_OUTPUT)
            kt_sbuf_printf(b, "    float *restrict %s = kt_bufs[%d];\n", bf->name, bf->arg);
    }
    kt_sbuf_puts(b, "    int kt_fail = 0;\n");
    int nheap = emit_workspace_open(L, b);
    int depth = nheap ? 2 : 1;
    rc = emit_program(dag, L, entry, b, &fns, depth, NULL);
    if (nheap)
        emit_workspace_close(b);
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
    if (rc)
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
