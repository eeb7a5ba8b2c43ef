/* The compute DAG: arena, builders, validation, analysis and printing. */
#include "te.h"

#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* ---- arena ------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} arena_block_t;

#define ARENA_BLOCK 16384

struct kt_dag {
    arena_block_t *arena;
    int nstages;
    int finalized;
    kt_stage_t stages[KT_TE_MAX_STAGES];
};

static void *arena_alloc(kt_dag_t *dag, size_t n)
{
    const size_t align = alignof(max_align_t);
    n = (n + align - 1) & ~(align - 1);
    arena_block_t *b = dag->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        arena_block_t *nb = malloc(sizeof(*nb) + cap);
        if (!nb) {
            kt_err_set(KT_ENOMEM, "out of memory building a compute DAG");
            return NULL;
        }
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        dag->arena = nb;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

kt_dag_t *kt_dag_new(void)
{
    kt_dag_t *dag = calloc(1, sizeof(*dag));
    if (!dag)
        kt_err_set(KT_ENOMEM, "out of memory");
    return dag;
}

void kt_dag_free(kt_dag_t *dag)
{
    if (!dag)
        return;
    arena_block_t *b = dag->arena;
    while (b) {
        arena_block_t *next = b->next;
        free(b);
        b = next;
    }
    free(dag);
}

/* ---- names ------------------------------------------------------------- */

/* Names become C identifiers in generated kernels, next to these. */
static const char *const reserved_names[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "main",
    "malloc", "calloc", "realloc", "free", "memset", "memcpy", "abort", "exit", "expf", "sqrtf",
    "tanhf", "erff", "fmaxf", "fminf", "INFINITY", "NAN", "NULL", "omp_get_num_threads",
    "omp_get_thread_num", "int64_t", "size_t",
};

int kt_te_name_check(const char *name, const char *what)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0)
        return kt_err_set(KT_EINVAL, "%s name is empty", what);
    if (len >= KT_TE_MAX_NAME)
        return kt_err_set(KT_EINVAL, "%s name '%s' is longer than %d characters", what, name,
                          KT_TE_MAX_NAME - 1);
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return kt_err_set(KT_EINVAL, "%s name '%s' is not a C identifier", what, name);
    }
    if (strncmp(name, "kt_", 3) == 0 || strncmp(name, "KT_", 3) == 0)
        return kt_err_set(KT_EINVAL, "%s name '%s' uses the reserved prefix kt_", what, name);
    if (name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z')))
        return kt_err_set(KT_EINVAL, "%s name '%s' is reserved in C", what, name);
    for (size_t i = 0; i < KT_ARRAY_LEN(reserved_names); i++)
        if (strcmp(name, reserved_names[i]) == 0)
            return kt_err_set(KT_EINVAL, "%s name '%s' is reserved in generated C", what, name);
    return KT_OK;
}

static int check_stage_room(kt_dag_t *dag, const char *name)
{
    if (!dag)
        return kt_err_set(KT_EINVAL, "no DAG");
    if (dag->finalized)
        return kt_err_set(KT_ESTATE, "DAG is finalized; no stage can be added");
    if (dag->nstages >= KT_TE_MAX_STAGES)
        return kt_err_set(KT_EINVAL, "too many stages (at most %d)", KT_TE_MAX_STAGES);
    int rc = kt_te_name_check(name, "stage");
    if (rc)
        return rc;
    for (int i = 0; i < dag->nstages; i++)
        if (strcmp(dag->stages[i].name, name) == 0)
            return kt_err_set(KT_EINVAL, "stage name '%s' is used twice", name);
    return KT_OK;
}

static int check_shape(const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > KT_TE_MAX_DIMS)
        return kt_err_set(KT_EINVAL, "stage '%s': rank %d is not in 1..%d", name, ndim,
                          KT_TE_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "stage '%s': extent %lld of axis %d is not in 1..%lld",
                              name, (long long)shape[d], d, (long long)KT_TE_MAX_EXTENT);
        numel *= shape[d];
        if (numel > KT_TE_MAX_NUMEL)
            return kt_err_set(KT_EINVAL, "stage '%s': more than %lld elements", name,
                              (long long)KT_TE_MAX_NUMEL);
    }
    return KT_OK;
}

int kt_dag_placeholder(kt_dag_t *dag, const char *name, int ndim, const int64_t *shape)
{
    int rc = check_stage_room(dag, name);
    if (rc)
        return rc;
    if ((rc = check_shape(name, ndim, shape)))
        return rc;
    kt_stage_t *s = &dag->stages[dag->nstages];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->kind = KT_STAGE_PLACEHOLDER;
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        s->shape[d] = shape[d];
        snprintf(s->axis_names[d], KT_TE_MAX_NAME, "i%d", d);
    }
    s->tag = "placeholder";
    return dag->nstages++;
}

int kt_dag_set_layout_free(kt_dag_t *dag, int stage)
{
    if (!dag || stage < 0 || stage >= dag->nstages ||
        dag->stages[stage].kind != KT_STAGE_PLACEHOLDER)
        return kt_err_set(KT_EINVAL, "layout-free: stage %d is not a placeholder", stage);
    dag->stages[stage].layout_free = 1;
    return KT_OK;
}

int kt_dag_set_const_axes(kt_dag_t *dag, int stage, uint32_t mask)
{
    if (!dag || stage < 0 || stage >= dag->nstages ||
        dag->stages[stage].kind != KT_STAGE_COMPUTE)
        return kt_err_set(KT_EINVAL, "const axes: stage %d is not a compute stage", stage);
    const kt_stage_t *s = &dag->stages[stage];
    int na = s->ndim + s->nreduce;
    if (mask == 0 || (na < 32 && (mask >> na) != 0))
        return kt_err_set(KT_EINVAL, "const axes of stage '%s': mask 0x%x names no axis or "
                          "one beyond its %d axes", s->name, (unsigned)mask, na);
    for (int r = 0; r < s->nreduce; r++)
        if (!((mask >> (s->ndim + r)) & 1u))
            return kt_err_set(KT_EINVAL, "const axes of stage '%s': reduce axis '%s' is not "
                              "marked (only spatial axes may be tiled around the constants)",
                              s->name, s->reduce_names[r]);
    dag->stages[stage].const_axes = mask;
    return KT_OK;
}

int kt_dag_compute(kt_dag_t *dag, const char *name, const char *tag, int ndim,
                   const int64_t *shape, const char *const *axis_names, int nreduce,
                   const int64_t *reduce_ext, const char *const *reduce_names, kt_reduce_t rop)
{
    int rc = check_stage_room(dag, name);
    if (rc)
        return rc;
    if ((rc = check_shape(name, ndim, shape)))
        return rc;
    if (nreduce < 0 || nreduce > KT_TE_MAX_REDUCE)
        return kt_err_set(KT_EINVAL, "stage '%s': %d reduce axes (at most %d)", name, nreduce,
                          KT_TE_MAX_REDUCE);
    if ((nreduce > 0) != (rop != KT_RED_NONE) || rop < KT_RED_NONE || rop > KT_RED_MAX)
        return kt_err_set(KT_EINVAL, "stage '%s': reduce axes and reduce operator disagree", name);
    for (int r = 0; r < nreduce; r++)
        if (reduce_ext[r] < 1 || reduce_ext[r] > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "stage '%s': reduce extent %lld is not in 1..%lld", name,
                              (long long)reduce_ext[r], (long long)KT_TE_MAX_EXTENT);
    kt_stage_t s;
    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "%s", name);
    s.kind = KT_STAGE_COMPUTE;
    s.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        s.shape[d] = shape[d];
        if (axis_names) {
            if ((rc = kt_te_name_check(axis_names[d], "axis")))
                return kt_err_prefix("stage '%s'", name);
            snprintf(s.axis_names[d], KT_TE_MAX_NAME, "%s", axis_names[d]);
        } else {
            snprintf(s.axis_names[d], KT_TE_MAX_NAME, "i%d", d);
        }
    }
    s.nreduce = nreduce;
    for (int r = 0; r < nreduce; r++) {
        s.reduce_ext[r] = reduce_ext[r];
        if (reduce_names) {
            if ((rc = kt_te_name_check(reduce_names[r], "axis")))
                return kt_err_prefix("stage '%s'", name);
            snprintf(s.reduce_names[r], KT_TE_MAX_NAME, "%s", reduce_names[r]);
        } else {
            snprintf(s.reduce_names[r], KT_TE_MAX_NAME, "k%d", r);
        }
    }
    for (int a = 0; a < ndim + nreduce; a++)
        for (int b = 0; b < a; b++) {
            const char *na = a < ndim ? s.axis_names[a] : s.reduce_names[a - ndim];
            const char *nb = b < ndim ? s.axis_names[b] : s.reduce_names[b - ndim];
            if (strcmp(na, nb) == 0)
                return kt_err_set(KT_EINVAL, "stage '%s': axis name '%s' is used twice", name, na);
        }
    s.rop = rop;
    const char *t = tag ? tag : "compute";
    char *tcopy = arena_alloc(dag, strlen(t) + 1);
    if (!tcopy)
        return KT_ENOMEM;
    memcpy(tcopy, t, strlen(t) + 1);
    s.tag = tcopy;
    dag->stages[dag->nstages] = s;
    return dag->nstages++;
}

int kt_dag_set_body(kt_dag_t *dag, int stage, kt_expr_t *body)
{
    if (!dag || stage < 0 || stage >= dag->nstages)
        return kt_err_set(KT_EINVAL, "no stage %d", stage);
    if (dag->finalized)
        return kt_err_set(KT_ESTATE, "DAG is finalized");
    kt_stage_t *s = &dag->stages[stage];
    if (s->kind != KT_STAGE_COMPUTE)
        return kt_err_set(KT_EINVAL, "stage '%s' is a placeholder and has no body", s->name);
    if (!body)
        return kt_err_set(KT_EINVAL, "stage '%s': no body (out of memory building it?)", s->name);
    s->body = body;
    return KT_OK;
}

/* ---- expression constructors ------------------------------------------ */

static kt_expr_t *new_expr(kt_dag_t *dag, kt_expr_kind_t kind, kt_dtype_t dt, int nargs)
{
    if (!dag)
        return NULL;
    kt_expr_t *e = arena_alloc(dag, sizeof(*e));
    if (!e)
        return NULL;
    e->kind = kind;
    e->dtype = dt;
    e->nargs = nargs;
    if (nargs > 0) {
        e->args = arena_alloc(dag, sizeof(kt_expr_t *) * (size_t)nargs);
        if (!e->args)
            return NULL;
    }
    return e;
}

kt_expr_t *kt_ex_int(kt_dag_t *dag, int64_t v)
{
    kt_expr_t *e = new_expr(dag, KT_EX_CONST, KT_DT_INT, 0);
    if (e)
        e->ival = v;
    return e;
}

kt_expr_t *kt_ex_float(kt_dag_t *dag, double v)
{
    kt_expr_t *e = new_expr(dag, KT_EX_CONST, KT_DT_F32, 0);
    if (e)
        e->fval = (double)(float)v;   /* the value a float32 kernel really uses */
    return e;
}

kt_expr_t *kt_ex_axis(kt_dag_t *dag, int axis)
{
    kt_expr_t *e = new_expr(dag, KT_EX_AXIS, KT_DT_INT, 0);
    if (e)
        e->axis = axis;
    return e;
}

static int is_compare(kt_expr_kind_t k) { return k >= KT_EX_LT && k <= KT_EX_NE; }

kt_expr_t *kt_ex_bin(kt_dag_t *dag, kt_expr_kind_t kind, kt_expr_t *a, kt_expr_t *b)
{
    if (!a || !b)
        return NULL;
    kt_dtype_t dt = (is_compare(kind) || kind == KT_EX_AND || kind == KT_EX_OR) ? KT_DT_BOOL
                                                                                 : a->dtype;
    kt_expr_t *e = new_expr(dag, kind, dt, 2);
    if (!e)
        return NULL;
    e->args[0] = a;
    e->args[1] = b;
    return e;
}

kt_expr_t *kt_ex_not(kt_dag_t *dag, kt_expr_t *a)
{
    if (!a)
        return NULL;
    kt_expr_t *e = new_expr(dag, KT_EX_NOT, KT_DT_BOOL, 1);
    if (e)
        e->args[0] = a;
    return e;
}

kt_expr_t *kt_ex_select(kt_dag_t *dag, kt_expr_t *c, kt_expr_t *t, kt_expr_t *f)
{
    if (!c || !t || !f)
        return NULL;
    kt_expr_t *e = new_expr(dag, KT_EX_SELECT, t->dtype, 3);
    if (!e)
        return NULL;
    e->args[0] = c;
    e->args[1] = t;
    e->args[2] = f;
    return e;
}

kt_expr_t *kt_ex_cast(kt_dag_t *dag, kt_dtype_t to, kt_expr_t *a)
{
    if (!a)
        return NULL;
    kt_expr_t *e = new_expr(dag, KT_EX_CAST, to, 1);
    if (e)
        e->args[0] = a;
    return e;
}

kt_expr_t *kt_ex_call(kt_dag_t *dag, kt_fn_t fn, kt_expr_t *a)
{
    if (!a)
        return NULL;
    kt_expr_t *e = new_expr(dag, KT_EX_CALL, KT_DT_F32, 1);
    if (!e)
        return NULL;
    e->fn = fn;
    e->args[0] = a;
    return e;
}

kt_expr_t *kt_ex_load(kt_dag_t *dag, int tensor, int nidx, kt_expr_t *const *idx)
{
    if (nidx < 0 || nidx > KT_TE_MAX_DIMS)
        return NULL;
    for (int i = 0; i < nidx; i++)
        if (!idx[i])
            return NULL;
    kt_expr_t *e = new_expr(dag, KT_EX_LOAD, KT_DT_F32, nidx);
    if (!e)
        return NULL;
    e->tensor = tensor;
    for (int i = 0; i < nidx; i++)
        e->args[i] = idx[i];
    return e;
}

/* ---- validation --------------------------------------------------------- */

/* Integer interval of an index expression, to prove loads stay in bounds. */
typedef struct {
    int known;
    int64_t lo, hi;
} ival_t;

static int64_t floor_div(int64_t a, int64_t c) { return a >= 0 ? a / c : -((-a + c - 1) / c); }

static ival_t interval(const kt_expr_t *e, const int64_t *lo, const int64_t *hi)
{
    ival_t r = {0, 0, 0};
    if (e->dtype != KT_DT_INT)
        return r;
    switch (e->kind) {
    case KT_EX_CONST:
        return (ival_t){1, e->ival, e->ival};
    case KT_EX_AXIS:
        return (ival_t){1, lo[e->axis], hi[e->axis]};
    case KT_EX_ADD:
    case KT_EX_SUB:
    case KT_EX_MUL:
    case KT_EX_MIN:
    case KT_EX_MAX: {
        ival_t a = interval(e->args[0], lo, hi), b = interval(e->args[1], lo, hi);
        if (!a.known || !b.known)
            return r;
        r.known = 1;
        if (e->kind == KT_EX_ADD) {
            r.lo = a.lo + b.lo;
            r.hi = a.hi + b.hi;
        } else if (e->kind == KT_EX_SUB) {
            r.lo = a.lo - b.hi;
            r.hi = a.hi - b.lo;
        } else if (e->kind == KT_EX_MIN) {
            r.lo = a.lo < b.lo ? a.lo : b.lo;
            r.hi = a.hi < b.hi ? a.hi : b.hi;
        } else if (e->kind == KT_EX_MAX) {
            r.lo = a.lo > b.lo ? a.lo : b.lo;
            r.hi = a.hi > b.hi ? a.hi : b.hi;
        } else {
            int64_t p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
            r.lo = r.hi = p[0];
            for (int i = 1; i < 4; i++) {
                r.lo = p[i] < r.lo ? p[i] : r.lo;
                r.hi = p[i] > r.hi ? p[i] : r.hi;
            }
        }
        return r;
    }
    case KT_EX_FLOORDIV:
    case KT_EX_FLOORMOD: {
        ival_t a = interval(e->args[0], lo, hi);
        int64_t c = e->args[1]->ival;
        if (!a.known || c <= 0)
            return r;
        r.known = 1;
        if (e->kind == KT_EX_FLOORDIV) {
            r.lo = floor_div(a.lo, c);
            r.hi = floor_div(a.hi, c);
        } else if (floor_div(a.lo, c) == floor_div(a.hi, c)) {
            r.lo = a.lo - floor_div(a.lo, c) * c;
            r.hi = a.hi - floor_div(a.hi, c) * c;
        } else {
            r.lo = 0;
            r.hi = c - 1;
        }
        return r;
    }
    default:
        return r;
    }
}

/* Narrow axis ranges by a guard made of (axis-expression cmp const) terms
 * joined with &&, as padding writes them. Other terms are ignored, which only
 * keeps the ranges wider (safe). */
static void narrow(const kt_expr_t *c, int64_t *lo, int64_t *hi)
{
    if (c->kind == KT_EX_AND) {
        narrow(c->args[0], lo, hi);
        narrow(c->args[1], lo, hi);
        return;
    }
    if (!is_compare(c->kind) || c->args[0]->kind != KT_EX_AXIS ||
        c->args[1]->kind != KT_EX_CONST || c->args[1]->dtype != KT_DT_INT)
        return;
    int a = c->args[0]->axis;
    int64_t v = c->args[1]->ival;
    switch (c->kind) {
    case KT_EX_GE: if (lo[a] < v) lo[a] = v; break;
    case KT_EX_GT: if (lo[a] < v + 1) lo[a] = v + 1; break;
    case KT_EX_LT: if (hi[a] > v - 1) hi[a] = v - 1; break;
    case KT_EX_LE: if (hi[a] > v) hi[a] = v; break;
    case KT_EX_EQ: if (lo[a] < v) lo[a] = v; if (hi[a] > v) hi[a] = v; break;
    default: break;
    }
}

typedef struct {
    const kt_dag_t *dag;
    int stage;
    int naxes;
} vctx_t;

static int validate_expr(const vctx_t *v, const kt_expr_t *e, const int64_t *lo, const int64_t *hi,
                         int depth)
{
    const kt_stage_t *s = &v->dag->stages[v->stage];
    if (!e)
        return kt_err_set(KT_EINVAL, "stage '%s': missing expression operand", s->name);
    if (depth > 200)
        return kt_err_set(KT_EINVAL, "stage '%s': expression nested too deeply", s->name);
    if ((unsigned)e->kind >= KT_EX__COUNT)
        return kt_err_set(KT_EINVAL, "stage '%s': bad expression kind %d", s->name, e->kind);
    int expect = -1;
    switch (e->kind) {
    case KT_EX_CONST: case KT_EX_AXIS: expect = 0; break;
    case KT_EX_NOT: case KT_EX_CAST: case KT_EX_CALL: expect = 1; break;
    case KT_EX_SELECT: expect = 3; break;
    case KT_EX_LOAD: break;
    default: expect = 2; break;
    }
    if (expect >= 0 && e->nargs != expect)
        return kt_err_set(KT_EINVAL, "stage '%s': expression kind %d takes %d operands, has %d",
                          s->name, e->kind, expect, e->nargs);
    for (int i = 0; i < e->nargs; i++)
        if (!e->args || !e->args[i])
            return kt_err_set(KT_EINVAL, "stage '%s': missing expression operand", s->name);
    int rc;
    if (e->kind == KT_EX_SELECT) {
        /* A guarded branch may index outside the unguarded ranges (padding). */
        int64_t tlo[KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE], thi[KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE];
        memcpy(tlo, lo, sizeof(int64_t) * (size_t)v->naxes);
        memcpy(thi, hi, sizeof(int64_t) * (size_t)v->naxes);
        if ((rc = validate_expr(v, e->args[0], lo, hi, depth + 1)))
            return rc;
        narrow(e->args[0], tlo, thi);
        if ((rc = validate_expr(v, e->args[1], tlo, thi, depth + 1)) ||
            (rc = validate_expr(v, e->args[2], lo, hi, depth + 1)))
            return rc;
    } else {
        for (int i = 0; i < e->nargs; i++)
            if ((rc = validate_expr(v, e->args[i], lo, hi, depth + 1)))
                return rc;
    }
    const kt_dtype_t a0 = e->nargs > 0 ? e->args[0]->dtype : KT_DT_INT;
    const kt_dtype_t a1 = e->nargs > 1 ? e->args[1]->dtype : KT_DT_INT;
    switch (e->kind) {
    case KT_EX_CONST:
        if (e->dtype == KT_DT_F32 && isnan(e->fval))
            return kt_err_set(KT_EINVAL, "stage '%s': NaN constant", s->name);
        return KT_OK;
    case KT_EX_AXIS:
        if (e->dtype != KT_DT_INT || e->axis < 0 || e->axis >= v->naxes)
            return kt_err_set(KT_EINVAL, "stage '%s': axis %d out of range (%d axes)", s->name,
                              e->axis, v->naxes);
        return KT_OK;
    case KT_EX_ADD: case KT_EX_SUB: case KT_EX_MUL: case KT_EX_MIN: case KT_EX_MAX:
        if (a0 != a1 || a0 == KT_DT_BOOL || e->dtype != a0)
            return kt_err_set(KT_EINVAL, "stage '%s': arithmetic on mismatched or bool operands",
                              s->name);
        return KT_OK;
    case KT_EX_DIV:
        if (a0 != KT_DT_F32 || a1 != KT_DT_F32 || e->dtype != KT_DT_F32)
            return kt_err_set(KT_EINVAL, "stage '%s': '/' needs float operands (use floordiv)",
                              s->name);
        return KT_OK;
    case KT_EX_FLOORDIV: case KT_EX_FLOORMOD:
        if (a0 != KT_DT_INT || e->dtype != KT_DT_INT || e->args[1]->kind != KT_EX_CONST ||
            a1 != KT_DT_INT || e->args[1]->ival <= 0)
            return kt_err_set(KT_EINVAL,
                              "stage '%s': floordiv/floormod need an int by a positive constant",
                              s->name);
        return KT_OK;
    case KT_EX_LT: case KT_EX_LE: case KT_EX_GT: case KT_EX_GE: case KT_EX_EQ: case KT_EX_NE:
        if (a0 != a1 || a0 == KT_DT_BOOL || e->dtype != KT_DT_BOOL)
            return kt_err_set(KT_EINVAL, "stage '%s': comparison of mismatched operands", s->name);
        return KT_OK;
    case KT_EX_AND: case KT_EX_OR:
        if (a0 != KT_DT_BOOL || a1 != KT_DT_BOOL || e->dtype != KT_DT_BOOL)
            return kt_err_set(KT_EINVAL, "stage '%s': && and || need bool operands", s->name);
        return KT_OK;
    case KT_EX_NOT:
        if (a0 != KT_DT_BOOL || e->dtype != KT_DT_BOOL)
            return kt_err_set(KT_EINVAL, "stage '%s': ! needs a bool operand", s->name);
        return KT_OK;
    case KT_EX_SELECT:
        if (a0 != KT_DT_BOOL || a1 != e->args[2]->dtype || e->dtype != a1 || a1 == KT_DT_BOOL)
            return kt_err_set(KT_EINVAL, "stage '%s': select needs a bool condition and two "
                              "values of one type", s->name);
        return KT_OK;
    case KT_EX_CAST:
        if ((unsigned)e->dtype > KT_DT_BOOL)
            return kt_err_set(KT_EINVAL, "stage '%s': bad cast type", s->name);
        return KT_OK;
    case KT_EX_CALL:
        if ((unsigned)e->fn >= KT_FN__COUNT || a0 != KT_DT_F32 || e->dtype != KT_DT_F32)
            return kt_err_set(KT_EINVAL, "stage '%s': bad math call", s->name);
        return KT_OK;
    case KT_EX_LOAD: {
        if (e->tensor < 0 || e->tensor >= v->stage)
            return kt_err_set(KT_EINVAL, "stage '%s' loads stage %d, which is not an earlier stage",
                              s->name, e->tensor);
        const kt_stage_t *p = &v->dag->stages[e->tensor];
        if (e->nargs != p->ndim || e->dtype != KT_DT_F32)
            return kt_err_set(KT_EINVAL, "stage '%s' loads '%s' with %d indices; it has rank %d",
                              s->name, p->name, e->nargs, p->ndim);
        for (int i = 0; i < e->nargs; i++) {
            if (e->args[i]->dtype != KT_DT_INT)
                return kt_err_set(KT_EINVAL, "stage '%s': index %d of '%s' is not an integer",
                                  s->name, i, p->name);
            ival_t r = interval(e->args[i], lo, hi);
            if (r.known && (r.lo < 0 || r.hi >= p->shape[i]))
                return kt_err_set(KT_EINVAL,
                                  "stage '%s': index %d of '%s' ranges over [%lld, %lld], "
                                  "outside [0, %lld)", s->name, i, p->name, (long long)r.lo,
                                  (long long)r.hi, (long long)p->shape[i]);
        }
        return KT_OK;
    }
    default:
        return kt_err_set(KT_EINVAL, "stage '%s': bad expression kind", s->name);
    }
}

static void collect_reads(const kt_expr_t *e, uint32_t *mask)
{
    if (e->kind == KT_EX_LOAD && e->tensor >= 0 && e->tensor < KT_TE_MAX_STAGES)
        *mask |= 1u << e->tensor;
    for (int i = 0; i < e->nargs; i++)
        collect_reads(e->args[i], mask);
}

static uint32_t stage_reads(const kt_dag_t *dag, int i)
{
    uint32_t m = 0;
    if (dag->stages[i].body)
        collect_reads(dag->stages[i].body, &m);
    return m;
}

int kt_dag_finalize(kt_dag_t *dag)
{
    if (!dag)
        return kt_err_set(KT_EINVAL, "no DAG");
    if (dag->finalized)
        return kt_err_set(KT_ESTATE, "DAG is already finalized");
    int ncompute = 0;
    uint32_t read = 0;
    for (int i = 0; i < dag->nstages; i++) {
        kt_stage_t *s = &dag->stages[i];
        for (int j = 0; j < dag->nstages; j++)
            for (int a = 0; a < s->ndim + s->nreduce; a++) {
                const char *an = a < s->ndim ? s->axis_names[a] : s->reduce_names[a - s->ndim];
                if (s->kind == KT_STAGE_COMPUTE && strcmp(an, dag->stages[j].name) == 0)
                    return kt_err_set(KT_EINVAL, "stage '%s': axis name '%s' is also a stage name",
                                      s->name, an);
            }
        if (s->kind == KT_STAGE_PLACEHOLDER)
            continue;
        ncompute++;
        if (!s->body)
            return kt_err_set(KT_EINVAL, "stage '%s' has no body", s->name);
        vctx_t v = {dag, i, s->ndim + s->nreduce};
        int64_t lo[KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE], hi[KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE];
        for (int a = 0; a < v.naxes; a++) {
            lo[a] = 0;
            hi[a] = (a < s->ndim ? s->shape[a] : s->reduce_ext[a - s->ndim]) - 1;
        }
        int rc = validate_expr(&v, s->body, lo, hi, 0);
        if (rc)
            return rc;
        if (s->body->dtype != KT_DT_F32)
            return kt_err_set(KT_EINVAL, "stage '%s': body is not a float value", s->name);
        read |= stage_reads(dag, i);
    }
    if (ncompute == 0)
        return kt_err_set(KT_EINVAL, "DAG has no compute stage");
    for (int i = 0; i < dag->nstages; i++) {
        kt_stage_t *s = &dag->stages[i];
        int used = (read >> i) & 1u;
        if (s->kind == KT_STAGE_PLACEHOLDER && !used)
            return kt_err_set(KT_EINVAL, "placeholder '%s' is never read", s->name);
        s->is_output = s->kind == KT_STAGE_COMPUTE && !used;
    }
    dag->finalized = 1;
    return KT_OK;
}

/* ---- reading ------------------------------------------------------------ */

int kt_dag_num_stages(const kt_dag_t *dag) { return dag ? dag->nstages : 0; }

const kt_stage_t *kt_dag_stage(const kt_dag_t *dag, int i)
{
    if (!dag || i < 0 || i >= dag->nstages)
        return NULL;
    return &dag->stages[i];
}

int kt_dag_consumers(const kt_dag_t *dag, int i, int *out)
{
    int n = 0;
    if (!dag || i < 0 || i >= dag->nstages)
        return 0;
    for (int j = i + 1; j < dag->nstages; j++)
        if ((stage_reads(dag, j) >> i) & 1u)
            out[n++] = j;
    return n;
}

int kt_dag_producers(const kt_dag_t *dag, int i, int *out)
{
    int n = 0;
    if (!dag || i < 0 || i >= dag->nstages)
        return 0;
    uint32_t m = stage_reads(dag, i);
    for (int j = 0; j < dag->nstages; j++)
        if ((m >> j) & 1u)
            out[n++] = j;
    return n;
}

int64_t kt_stage_numel(const kt_stage_t *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* ---- analysis ----------------------------------------------------------- */

static int any_load(const kt_expr_t *e, int (*pred)(const kt_stage_t *, const kt_expr_t *),
                    const kt_stage_t *s)
{
    if (e->kind == KT_EX_LOAD && pred(s, e))
        return 1;
    for (int i = 0; i < e->nargs; i++)
        if (any_load(e->args[i], pred, s))
            return 1;
    return 0;
}

/* A load that is not out[i..] -> in[same i.. or an in-order subset]. */
static int load_not_elementwise(const kt_stage_t *s, const kt_expr_t *ld)
{
    int next = 0;
    for (int i = 0; i < ld->nargs; i++) {
        const kt_expr_t *ix = ld->args[i];
        if (ix->kind == KT_EX_CONST && ix->dtype == KT_DT_INT && ix->ival == 0)
            continue;   /* broadcast over an extent-1 dimension */
        if (ix->kind != KT_EX_AXIS || ix->axis < next || ix->axis >= s->ndim)
            return 1;
        next = ix->axis + 1;
    }
    return 0;
}

int kt_dag_is_elementwise(const kt_dag_t *dag, int stage)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s || s->kind != KT_STAGE_COMPUTE || s->nreduce > 0 || !s->body)
        return 0;
    return !any_load(s->body, load_not_elementwise, s);
}

static int has_expensive_call(const kt_expr_t *e)
{
    if (e->kind == KT_EX_CALL)
        return 1;
    for (int i = 0; i < e->nargs; i++)
        if (has_expensive_call(e->args[i]))
            return 1;
    return 0;
}

static int contains_load(const kt_expr_t *e)
{
    if (e->kind == KT_EX_LOAD)
        return 1;
    for (int i = 0; i < e->nargs; i++)
        if (contains_load(e->args[i]))
            return 1;
    return 0;
}

/* A load whose index reads a tensor (indirect access) cannot be inlined as
 * plain index arithmetic. */
static int load_not_injective(const kt_stage_t *s, const kt_expr_t *ld)
{
    (void)s;
    for (int i = 0; i < ld->nargs; i++)
        if (contains_load(ld->args[i]))
            return 1;
    return 0;
}

int kt_dag_is_inlinable(const kt_dag_t *dag, int stage)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s || s->kind != KT_STAGE_COMPUTE || s->nreduce > 0 || s->is_output || !s->body)
        return 0;
    /* As TVM's is_strictly_inlineable: no reduction, no expensive math call
     * (inlining exp/erf into a reduction would recompute it per use). */
    return !has_expensive_call(s->body) && !any_load(s->body, load_not_injective, s);
}

static void axes_used(const kt_expr_t *e, uint32_t *mask)
{
    if (e->kind == KT_EX_AXIS && e->axis >= 0 && e->axis < 32)
        *mask |= 1u << e->axis;
    for (int i = 0; i < e->nargs; i++)
        axes_used(e->args[i], mask);
}

static int reused_load(const kt_stage_t *s, const kt_expr_t *ld)
{
    uint32_t m = 0;
    for (int i = 0; i < ld->nargs; i++)
        axes_used(ld->args[i], &m);
    for (int a = 0; a < s->ndim; a++)
        if (s->shape[a] > 1 && !((m >> a) & 1u))
            return 1;   /* the same element is read for every value of axis a */
    return 0;
}

int kt_dag_has_data_reuse(const kt_dag_t *dag, int stage)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s || s->kind != KT_STAGE_COMPUTE || s->nreduce == 0 || !s->body)
        return 0;
    return any_load(s->body, reused_load, s);
}

int kt_dag_is_reduction(const kt_dag_t *dag, int stage)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    return s && s->kind == KT_STAGE_COMPUTE && s->nreduce > 0;
}

/* Float ops of one evaluation of e: + - * / min max and every math call
 * count 1; loads, selects, casts, comparisons and index arithmetic 0. */
static double expr_flops(const kt_expr_t *e)
{
    /* Each operand once: a select chain (a constant table) stays linear. */
    double n = 0, arg[3] = {0, 0, 0};
    for (int i = 0; i < e->nargs; i++) {
        double f = expr_flops(e->args[i]);
        if (i < 3)
            arg[i] = f;
        n += f;
    }
    switch (e->kind) {
    case KT_EX_ADD: case KT_EX_SUB: case KT_EX_MUL: case KT_EX_DIV: case KT_EX_MIN:
    case KT_EX_MAX:
        if (e->dtype == KT_DT_F32)
            n += 1;
        break;
    case KT_EX_CALL:
        n += 1;
        break;
    case KT_EX_SELECT:
        /* Only the taken branch runs; count the costlier (padding: the load). */
        n -= arg[1] + arg[2];
        n += fmax(arg[1], arg[2]);
        break;
    default:
        break;
    }
    return n;
}

double kt_dag_flop_count(const kt_dag_t *dag)
{
    double total = 0;
    for (int i = 0; dag && i < dag->nstages; i++) {
        const kt_stage_t *s = &dag->stages[i];
        if (s->kind != KT_STAGE_COMPUTE || !s->body)
            continue;
        double evals = (double)kt_stage_numel(s);
        for (int r = 0; r < s->nreduce; r++)
            evals *= (double)s->reduce_ext[r];
        /* A reduction combines each value with one + or max. */
        total += evals * (expr_flops(s->body) + (s->nreduce > 0 ? 1.0 : 0.0));
    }
    return total;
}

/* ---- printing ------------------------------------------------------------ */

static const char *axis_name(const kt_stage_t *s, int a)
{
    if (a >= 0 && a < s->ndim)
        return s->axis_names[a];
    if (a >= s->ndim && a < s->ndim + s->nreduce)
        return s->reduce_names[a - s->ndim];
    return "?";
}

static const char *const fn_names[KT_FN__COUNT] = {
    [KT_FN_EXP] = "tir.exp", [KT_FN_SQRT] = "tir.sqrt", [KT_FN_RSQRT] = "tir.rsqrt",
    [KT_FN_TANH] = "tir.tanh", [KT_FN_ERF] = "tir.erf",
};

static void print_float(kt_sbuf_t *b, double v)
{
    if (isinf(v)) {
        kt_sbuf_puts(b, v < 0 ? "-inff" : "inff");
        return;
    }
    char tmp[48];
    snprintf(tmp, sizeof(tmp), "%.9g", v);
    kt_sbuf_printf(b, "%sf", tmp);
}

static void print_expr(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e, kt_sbuf_t *b)
{
    static const char *const binop[KT_EX__COUNT] = {
        [KT_EX_ADD] = " + ", [KT_EX_SUB] = " - ", [KT_EX_MUL] = "*", [KT_EX_DIV] = "/",
        [KT_EX_LT] = " < ", [KT_EX_LE] = " <= ", [KT_EX_GT] = " > ", [KT_EX_GE] = " >= ",
        [KT_EX_EQ] = " == ", [KT_EX_NE] = " != ", [KT_EX_AND] = " && ", [KT_EX_OR] = " || ",
    };
    static const char *const fnop[KT_EX__COUNT] = {
        [KT_EX_MIN] = "min", [KT_EX_MAX] = "max", [KT_EX_FLOORDIV] = "floordiv",
        [KT_EX_FLOORMOD] = "floormod",
    };
    if (!e) {
        kt_sbuf_puts(b, "<null>");
        return;
    }
    switch (e->kind) {
    case KT_EX_CONST:
        if (e->dtype == KT_DT_F32)
            print_float(b, e->fval);
        else if (e->dtype == KT_DT_BOOL)
            kt_sbuf_puts(b, e->ival ? "True" : "False");
        else
            kt_sbuf_printf(b, "%lld", (long long)e->ival);
        return;
    case KT_EX_AXIS:
        kt_sbuf_puts(b, axis_name(s, e->axis));
        return;
    case KT_EX_NOT:
        kt_sbuf_puts(b, "!");
        print_expr(dag, s, e->args[0], b);
        return;
    case KT_EX_SELECT:
        kt_sbuf_puts(b, "select(");
        for (int i = 0; i < 3; i++) {
            if (i)
                kt_sbuf_puts(b, ", ");
            print_expr(dag, s, e->args[i], b);
        }
        kt_sbuf_puts(b, ")");
        return;
    case KT_EX_CAST:
        kt_sbuf_puts(b, e->dtype == KT_DT_F32 ? "float32(" : e->dtype == KT_DT_INT ? "int64("
                                                                                 : "bool(");
        print_expr(dag, s, e->args[0], b);
        kt_sbuf_puts(b, ")");
        return;
    case KT_EX_CALL:
        kt_sbuf_printf(b, "%s(", (unsigned)e->fn < KT_FN__COUNT ? fn_names[e->fn] : "?");
        print_expr(dag, s, e->args[0], b);
        kt_sbuf_puts(b, ")");
        return;
    case KT_EX_LOAD: {
        const kt_stage_t *p = kt_dag_stage(dag, e->tensor);
        kt_sbuf_printf(b, "%s[", p ? p->name : "?");
        for (int i = 0; i < e->nargs; i++) {
            if (i)
                kt_sbuf_puts(b, ", ");
            print_expr(dag, s, e->args[i], b);
        }
        kt_sbuf_puts(b, "]");
        return;
    }
    default:
        if ((unsigned)e->kind < KT_EX__COUNT && binop[e->kind] && e->nargs == 2) {
            kt_sbuf_puts(b, "(");
            print_expr(dag, s, e->args[0], b);
            kt_sbuf_puts(b, binop[e->kind]);
            print_expr(dag, s, e->args[1], b);
            kt_sbuf_puts(b, ")");
        } else if ((unsigned)e->kind < KT_EX__COUNT && fnop[e->kind] && e->nargs == 2) {
            kt_sbuf_printf(b, "%s(", fnop[e->kind]);
            print_expr(dag, s, e->args[0], b);
            kt_sbuf_puts(b, ", ");
            print_expr(dag, s, e->args[1], b);
            kt_sbuf_puts(b, ")");
        } else {
            kt_sbuf_puts(b, "<bad>");
        }
    }
}

int kt_expr_print(const kt_dag_t *dag, int stage, const kt_expr_t *e, char *buf, size_t cap)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s)
        return kt_err_set(KT_EINVAL, "no stage %d", stage);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    print_expr(dag, s, e, &b);
    if (kt_sbuf_ok(&b)) {
        kt_sbuf_free(&b);
        return KT_ENOMEM;
    }
    int len = (int)b.len;
    if (buf && cap > 0)
        snprintf(buf, cap, "%s", b.data ? b.data : "");
    kt_sbuf_free(&b);
    return len;
}

static void print_stage(const kt_dag_t *dag, int i, kt_sbuf_t *b)
{
    const kt_stage_t *s = &dag->stages[i];
    if (s->kind == KT_STAGE_PLACEHOLDER) {
        kt_sbuf_printf(b, "%s = PLACEHOLDER [", s->name);
        for (int d = 0; d < s->ndim; d++)
            kt_sbuf_printf(b, "%s%lld", d ? ", " : "", (long long)s->shape[d]);
        kt_sbuf_puts(b, "]");
        return;
    }
    kt_sbuf_printf(b, "%s(", s->name);
    for (int d = 0; d < s->ndim; d++)
        kt_sbuf_printf(b, "%s%s", d ? ", " : "", s->axis_names[d]);
    kt_sbuf_puts(b, s->rop == KT_RED_SUM ? ") += " : s->rop == KT_RED_MAX ? ") max= " : ") = ");
    print_expr(dag, s, s->body, b);
}

char *kt_dag_to_text(const kt_dag_t *dag)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; dag && i < dag->nstages; i++) {
        print_stage(dag, i, &b);
        kt_sbuf_puts(&b, "\n");
    }
    return kt_sbuf_take(&b);
}

char *kt_dag_hash_text(const kt_dag_t *dag)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; dag && i < dag->nstages; i++) {
        const kt_stage_t *s = &dag->stages[i];
        print_stage(dag, i, &b);
        if (s->kind == KT_STAGE_COMPUTE) {
            /* What the text leaves implicit: the stage's extents. */
            kt_sbuf_puts(&b, " :");
            for (int d = 0; d < s->ndim; d++)
                kt_sbuf_printf(&b, " %lld", (long long)s->shape[d]);
            kt_sbuf_puts(&b, " |");
            for (int r = 0; r < s->nreduce; r++)
                kt_sbuf_printf(&b, " %s=%lld", s->reduce_names[r], (long long)s->reduce_ext[r]);
        }
        kt_sbuf_puts(&b, "\n");
    }
    return kt_sbuf_take(&b);
}
