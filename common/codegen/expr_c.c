/* C text of tensor expressions, the preamble every generated file starts
 * with, and the buffer calling convention. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "util/err.h"

int kt_codegen_num_bufs(const kt_dag_t *dag)
{
    int n = 0;
    for (int i = 0; i < kt_dag_num_stages(dag); i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        n += s->kind == KT_STAGE_PLACEHOLDER || s->is_output;
    }
    return n;
}

int kt_codegen_buf_stage(const kt_dag_t *dag, int i)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int s = 0; s < kt_dag_num_stages(dag); s++) {
            const kt_stage_t *st = kt_dag_stage(dag, s);
            int take = pass == 0 ? st->kind == KT_STAGE_PLACEHOLDER : st->is_output;
            if (take && n++ == i)
                return s;
        }
    return kt_err_set(KT_EINVAL, "no buffer %d (the kernel takes %d)", i, n);
}

void kt_codegen_preamble_c(kt_sbuf_t *out)
{
    kt_sbuf_puts(out,
        "#include <math.h>\n"
        "#include <stdlib.h>\n"
        "#include <string.h>\n"
        "\n"
        "/* glibc's vector math (libmvec, linked by -lm) declared as its math.h\n"
        " * does only under -ffast-math: with -fno-math-errno, GCC vectorizes the\n"
        " * loops of sigmoid, SiLU, GELU and softmax instead of calling expf once\n"
        " * per element (five times faster on AVX2 and AVX-512). */\n"
        "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \\\n"
        "    defined(__GLIBC_PREREQ) && !defined(__FAST_MATH__)\n"
        "#if __GLIBC_PREREQ(2, 22)\n"
        "__attribute__((simd(\"notinbranch\"))) float expf(float);\n"
        "#endif\n"
        "#if __GLIBC_PREREQ(2, 35)\n"
        "__attribute__((simd(\"notinbranch\"))) float tanhf(float);\n"
        "__attribute__((simd(\"notinbranch\"))) float erff(float);\n"
        "#endif\n"
        "#endif\n"
        "\n"
        "static inline float kt_maxf(float a, float b) { return a > b ? a : b; }\n"
        "static inline float kt_minf(float a, float b) { return a < b ? a : b; }\n"
        "static inline long long kt_maxi(long long a, long long b) { return a > b ? a : b; }\n"
        "static inline long long kt_mini(long long a, long long b) { return a < b ? a : b; }\n"
        "/* Floor division and modulo (C's / and % truncate toward zero),\n"
        " * without branches: a branch in a loop's invariant index stays in the\n"
        " * loop (kernels do not unswitch loops) and keeps GCC from vectorizing it. */\n"
        "static inline long long kt_floordiv(long long a, long long b)\n"
        "{\n"
        "    long long q = a / b, r = a % b;\n"
        "    return q - (long long)((r != 0) & ((r < 0) != (b < 0)));\n"
        "}\n"
        "static inline long long kt_floormod(long long a, long long b)\n"
        "{\n"
        "    long long r = a % b;\n"
        "    return r + b * (long long)((r != 0) & ((r < 0) != (b < 0)));\n"
        "}\n"
        "static inline float kt_rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
        "/* The workspace pool: one block for the heap intermediates of every\n"
        " * kernel in this file, kept between calls and grown to the largest\n"
        " * request. A call that finds it in use by another thread gets a block\n"
        " * of its own (*own 0), freed by kt_pool_give. */\n"
        "static float *kt_pool_block;\n"
        "static unsigned long long kt_pool_floats;\n"
        "static int kt_pool_busy;\n"
        "static void __attribute__((destructor, unused)) kt_pool_release(void)\n"
        "{\n"
        "    free(kt_pool_block);\n"
        "}\n"
        "static __attribute__((unused)) float *kt_pool_take(unsigned long long n, int *own)\n"
        "{\n"
        "    *own = !__atomic_exchange_n(&kt_pool_busy, 1, __ATOMIC_ACQUIRE);\n"
        "    if (!*own)\n"
        "        return (float *)aligned_alloc(64, sizeof(float) * n);\n"
        "    if (kt_pool_floats < n) {\n"
        "        free(kt_pool_block);\n"
        "        kt_pool_block = (float *)aligned_alloc(64, sizeof(float) * n);\n"
        "        kt_pool_floats = kt_pool_block ? n : 0;\n"
        "    }\n"
        "    if (!kt_pool_block) {\n"
        "        __atomic_store_n(&kt_pool_busy, 0, __ATOMIC_RELEASE);\n"
        "        *own = 0;\n"
        "    }\n"
        "    return kt_pool_block;\n"
        "}\n"
        "static __attribute__((unused)) void kt_pool_give(float *ws, int own)\n"
        "{\n"
        "    if (own)\n"
        "        __atomic_store_n(&kt_pool_busy, 0, __ATOMIC_RELEASE);\n"
        "    else\n"
        "        free(ws);\n"
        "}\n"
        "\n");
}

/* A float literal that reads back as the same float. */
static void put_float(kt_sbuf_t *b, double v)
{
    if (isinf(v)) {
        kt_sbuf_puts(b, v < 0 ? "(-INFINITY)" : "INFINITY");
        return;
    }
    if (isnan(v)) {
        kt_sbuf_puts(b, "NAN");
        return;
    }
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%.9g", v);
    char out[80];
    const char *e = strchr(tmp, 'e');
    if (!strchr(tmp, '.')) {
        /* "1" -> "1.0", "1e-05" -> "1.0e-05": a float literal, never an int. */
        size_t mant = e ? (size_t)(e - tmp) : strlen(tmp);
        snprintf(out, sizeof(out), "%.*s.0%s", (int)mant, tmp, e ? e : "");
    } else {
        snprintf(out, sizeof(out), "%s", tmp);
    }
    kt_sbuf_printf(b, v < 0 ? "(%sf)" : "%sf", out);
}

static int is_simple(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

/* ---- affine indices ---------------------------------------------------------- */

/* Loads print their flat index as one sum over the kernel's iterators when
 * every index is affine in them: GCC then addresses the elements of an
 * unrolled register tile at constant offsets from one pointer, where the
 * nested form ((yy + ry)*W + xx + rx)*C kept one index register per element
 * and reloaded them from the stack inside the reduction loop. */
#define AFF_TERMS 32

/* sum of coef[t] * L->iters[iter[t]] + c; ok 0 when not affine. */
typedef struct {
    int ok, n;
    int iter[AFF_TERMS];
    int64_t coef[AFF_TERMS];
    int64_t c;
} aff_t;

/* The affine value of each axis of the stage being printed. */
typedef struct env {
    const kt_lower_t *L;
    aff_t axis[KT_SCHED_MAX_AXES];
} env_t;

static void aff_add(aff_t *x, const aff_t *y, int64_t k)
{
    if (!x->ok || !y->ok) {
        x->ok = 0;
        return;
    }
    x->c += k * y->c;
    for (int t = 0; t < y->n && x->ok; t++) {
        int j = 0;
        while (j < x->n && x->iter[j] != y->iter[t])
            j++;
        if (j == x->n) {
            if (x->n == AFF_TERMS) {
                x->ok = 0;
                break;
            }
            x->iter[x->n] = y->iter[t];
            x->coef[x->n++] = 0;
        }
        x->coef[j] += k * y->coef[t];
    }
}

/* The affine form of an integer index expression (x->ok 0 if it is not:
 * division, modulo, min/max, select, a load). */
static void aff_of(const env_t *env, const kt_stage_t *s, const kt_expr_t *e, aff_t *x, int depth)
{
    memset(x, 0, sizeof(*x));
    if (!e || depth > 400 || e->dtype == KT_DT_F32)
        return;
    aff_t a, b;
    switch (e->kind) {
    case KT_EX_CONST:
        x->ok = e->dtype == KT_DT_INT;
        x->c = e->ival;
        return;
    case KT_EX_AXIS:
        if (e->axis >= 0 && e->axis < s->ndim + s->nreduce && e->axis < KT_SCHED_MAX_AXES)
            *x = env->axis[e->axis];
        return;
    case KT_EX_ADD:
    case KT_EX_SUB:
        aff_of(env, s, e->args[0], x, depth + 1);
        aff_of(env, s, e->args[1], &b, depth + 1);
        aff_add(x, &b, e->kind == KT_EX_ADD ? 1 : -1);
        return;
    case KT_EX_MUL:
        aff_of(env, s, e->args[0], &a, depth + 1);
        aff_of(env, s, e->args[1], &b, depth + 1);
        if (a.ok && b.ok && (a.n == 0 || b.n == 0)) {
            x->ok = 1;
            aff_add(x, a.n == 0 ? &b : &a, a.n == 0 ? a.c : b.c);
        }
        return;
    default:
        return;
    }
}

/* An index of the lowered program as an affine value (not affine with a
 * division or modulo). */
static aff_t aff_of_index(const kt_lower_index_t *ix)
{
    aff_t x;
    memset(&x, 0, sizeof(x));
    x.ok = ix->div <= 1 && ix->mod <= 0 && ix->nterms <= AFF_TERMS;
    for (int t = 0; x.ok && t < ix->nterms; t++)
        if (ix->iter[t] >= 0 && ix->coef[t] != 0) {
            x.iter[x.n] = ix->iter[t];
            x.coef[x.n++] = ix->coef[t];
        }
    return x;
}

/* x as C: iterators of extent 1 (not loops, value 0) left out, the others
 * in the order lowering made them, which is their loops' nesting order: the
 * innermost (unrolled) loops' terms come last, so that GCC's left-to-right
 * sum makes them constant offsets from the loop-invariant rest. */
static void aff_print(const kt_lower_t *L, const aff_t *x0, kt_sbuf_t *out)
{
    aff_t sorted = *x0, *x = &sorted;
    for (int i = 1; i < x->n; i++)
        for (int j = i; j > 0 && x->iter[j - 1] > x->iter[j]; j--) {
            int it = x->iter[j];
            int64_t c = x->coef[j];
            x->iter[j] = x->iter[j - 1];
            x->coef[j] = x->coef[j - 1];
            x->iter[j - 1] = it;
            x->coef[j - 1] = c;
        }
    int n = 0;
    for (int t = 0; t < x->n; t++) {
        if (x->coef[t] == 0 || L->iters[x->iter[t]].extent <= 1)
            continue;
        if (n++)
            kt_sbuf_puts(out, " + ");
        kt_sbuf_puts(out, L->iters[x->iter[t]].name);
        if (x->coef[t] != 1)
            kt_sbuf_printf(out, "*%lldLL", (long long)x->coef[t]);
    }
    if (n == 0)
        kt_sbuf_printf(out, "%lldLL", (long long)x->c);
    else if (x->c > 0)
        kt_sbuf_printf(out, " + %lldLL", (long long)x->c);
    else if (x->c < 0)
        kt_sbuf_printf(out, " - %lldLL", -(long long)x->c);
}

static int emit(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                const char *const *axis_c, const double *axv, const env_t *env, uint64_t mask,
                uint64_t taken, kt_sbuf_t *out, int depth);

/* ---- folding (kt_codegen_expr_c_lowered's axis_val) --------------------------------
 *
 * Where some axes have known values (axv[a], NAN when unknown), loads of
 * constant tables (compute stages that read no tensor, as Winograd's
 * matrices) evaluate to their entry, and products fold: a factor 0 makes
 * the product 0 (dropping NaN and infinity propagation, as TVM's simplifier
 * does), constant factors multiply into one when that product is exact in
 * float, a factor 1 or -1 vanishes. Values follow C's arithmetic: float ops
 * rounded to float, integer ones on 64-bit integers. */

static int const_eval(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                      const double *axv, int depth, double *v);

static int const_eval_load(const kt_dag_t *dag, const kt_expr_t *e, const double *axv,
                           int depth, double *v)
{
    const kt_stage_t *p = kt_dag_stage(dag, e->tensor);
    if (!p || p->kind != KT_STAGE_COMPUTE || p->nreduce > 0 || !p->body ||
        e->nargs != p->ndim || p->ndim > KT_TE_MAX_DIMS)
        return 0;
    double pv[KT_TE_MAX_DIMS];
    for (int i = 0; i < e->nargs; i++)
        if (!const_eval(dag, NULL, e->args[i], axv, depth + 1, &pv[i]))
            return 0;
    return const_eval(dag, p, p->body, pv, depth + 1, v);
}

static int const_eval(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                      const double *axv, int depth, double *v)
{
    (void)s;
    if (!e || !axv || depth > 400)
        return 0;
    double a = 0, b = 0;
    int f32 = e->dtype == KT_DT_F32;
    switch (e->kind) {
    case KT_EX_CONST:
        *v = f32 ? (double)(float)e->fval : (double)e->ival;
        return 1;
    case KT_EX_AXIS:
        if (e->axis < 0 || e->axis >= KT_SCHED_MAX_AXES || isnan(axv[e->axis]))
            return 0;
        *v = axv[e->axis];
        return 1;
    case KT_EX_LOAD:
        return const_eval_load(dag, e, axv, depth, v);
    case KT_EX_SELECT:
        if (!const_eval(dag, s, e->args[0], axv, depth + 1, &a))
            return 0;
        return const_eval(dag, s, e->args[a != 0 ? 1 : 2], axv, depth + 1, v);
    case KT_EX_NOT:
        if (!const_eval(dag, s, e->args[0], axv, depth + 1, &a))
            return 0;
        *v = a == 0;
        return 1;
    case KT_EX_CAST:
        if (!const_eval(dag, s, e->args[0], axv, depth + 1, &a))
            return 0;
        *v = f32 ? (double)(float)a : e->dtype == KT_DT_INT ? (double)(long long)a : a != 0;
        return 1;
    case KT_EX_MUL:
        /* 0 times anything is 0 here, known or not */
        if (f32 && ((const_eval(dag, s, e->args[0], axv, depth + 1, &a) && a == 0) ||
                    (const_eval(dag, s, e->args[1], axv, depth + 1, &b) && b == 0))) {
            *v = 0;
            return 1;
        }
        break;
    default:
        break;
    }
    if (e->nargs != 2 || e->kind == KT_EX_CALL || e->kind == KT_EX_LOAD ||
        !const_eval(dag, s, e->args[0], axv, depth + 1, &a) ||
        !const_eval(dag, s, e->args[1], axv, depth + 1, &b))
        return 0;
    long long ia = (long long)a, ib = (long long)b;
    double r;
    switch (e->kind) {
    case KT_EX_ADD: r = f32 ? (double)((float)a + (float)b) : (double)(ia + ib); break;
    case KT_EX_SUB: r = f32 ? (double)((float)a - (float)b) : (double)(ia - ib); break;
    case KT_EX_MUL: r = f32 ? (double)((float)a * (float)b) : (double)(ia * ib); break;
    case KT_EX_DIV:
        if (!f32 && ib == 0)
            return 0;
        r = f32 ? (double)((float)a / (float)b) : (double)(ia / ib);
        break;
    case KT_EX_MIN: r = a < b ? a : b; break;
    case KT_EX_MAX: r = a > b ? a : b; break;
    case KT_EX_FLOORDIV:
    case KT_EX_FLOORMOD: {
        if (ib == 0)
            return 0;
        long long q = ia / ib, m = ia % ib;
        if (m != 0 && ((m < 0) != (ib < 0))) {
            q--;
            m += ib;
        }
        r = (double)(e->kind == KT_EX_FLOORDIV ? q : m);
        break;
    }
    case KT_EX_LT: r = a < b; break;
    case KT_EX_LE: r = a <= b; break;
    case KT_EX_GT: r = a > b; break;
    case KT_EX_GE: r = a >= b; break;
    case KT_EX_EQ: r = a == b; break;
    case KT_EX_NE: r = a != b; break;
    case KT_EX_AND: r = a != 0 && b != 0; break;
    case KT_EX_OR: r = a != 0 || b != 0; break;
    default: return 0;
    }
    *v = r;
    return 1;
}

/* The factors of a float product tree (MUL nodes only) into fac[], the
 * constant ones multiplied into *c; 0 when too many factors or a constant
 * product is not exact in float (then the tree prints as written). */
static int mul_factors(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                       const double *axv, const kt_expr_t **fac, int *n, double *c, int depth)
{
    double v;
    if (const_eval(dag, s, e, axv, depth, &v)) {
        double p = *c * v;
        if ((double)(float)p != p)
            return 0;
        *c = p;
        return 1;
    }
    if (e->kind == KT_EX_MUL && e->dtype == KT_DT_F32 && depth < 64)
        return mul_factors(dag, s, e->args[0], axv, fac, n, c, depth + 1) &&
               mul_factors(dag, s, e->args[1], axv, fac, n, c, depth + 1);
    if (*n == 16)
        return 0;
    fac[(*n)++] = e;
    return 1;
}

/* A folded product: its unknown factors times the one constant. 1 when
 * printed, 0 when it prints as written, negative on error. */
static int emit_product(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                        const char *const *axis_c, const double *axv, const env_t *env,
                        uint64_t mask, uint64_t taken, kt_sbuf_t *out, int depth)
{
    const kt_expr_t *fac[16];
    int n = 0;
    double c = 1;
    if (!mul_factors(dag, s, e, axv, fac, &n, &c, depth) || n == 0)
        return 0;
    kt_sbuf_puts(out, c == -1 ? "(-" : "(");
    for (int i = 0; i < n; i++) {
        if (i)
            kt_sbuf_puts(out, "*");
        int rc = emit(dag, s, fac[i], axis_c, axv, env, mask, taken, out, depth + 1);
        if (rc)
            return rc;
    }
    if (c != 1 && c != -1) {
        kt_sbuf_puts(out, "*");
        put_float(out, c);
    }
    kt_sbuf_puts(out, ")");
    return 1;
}

static int emit_load(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                     const char *const *axis_c, const double *axv, const env_t *env,
                     uint64_t mask, uint64_t taken, kt_sbuf_t *out, int depth)
{
    const kt_stage_t *p = kt_dag_stage(dag, e->tensor);
    if (!p || e->nargs != p->ndim)
        return kt_err_set(KT_EINVAL, "stage '%s': bad load", s->name);
    /* Each index printed once into its own buffer. */
    kt_sbuf_t idx[KT_TE_MAX_DIMS];
    int rc = KT_OK;
    for (int i = 0; i < e->nargs; i++)
        kt_sbuf_init(&idx[i]);
    for (int i = 0; i < e->nargs && rc == KT_OK; i++) {
        rc = emit(dag, s, e->args[i], axis_c, axv, env, mask, taken, &idx[i], depth + 1);
        if (rc == KT_OK)
            rc = kt_sbuf_ok(&idx[i]);
    }
    if (rc == KT_OK && e->tensor < 64 && ((mask >> e->tensor) & 1u)) {
        if (p->kind != KT_STAGE_COMPUTE || p->nreduce > 0 || !p->body) {
            rc = kt_err_set(KT_EINVAL, "stage '%s' cannot be inlined: it is %s", p->name,
                            p->kind != KT_STAGE_COMPUTE ? "a placeholder" : "a reduction");
        } else {
            const char *pax[KT_TE_MAX_DIMS];
            double pv[KT_SCHED_MAX_AXES];
            for (int i = 0; i < e->nargs; i++) {
                pax[i] = idx[i].data;
                if (axv && !const_eval(dag, s, e->args[i], axv, depth + 1, &pv[i]))
                    pv[i] = NAN;
            }
            for (int i = e->nargs; i < KT_SCHED_MAX_AXES; i++)
                pv[i] = NAN;
            /* a guarded statement (kt_codegen_expr_c_taken) reads the taken
             * operand of a padding select: its condition holds there */
            const kt_expr_t *pb = ((taken >> e->tensor) & 1u) && p->body->kind == KT_EX_SELECT
                                      ? p->body->args[1]
                                      : p->body;
            /* The inlined body's axes are the load's indices. */
            env_t pe;
            if (env) {
                pe.L = env->L;
                for (int i = 0; i < e->nargs; i++)
                    aff_of(env, s, e->args[i], &pe.axis[i], depth + 1);
            }
            rc = emit(dag, p, pb, pax, axv ? pv : NULL, env ? &pe : NULL, mask, taken, out,
                      depth + 1);
        }
    } else if (rc == KT_OK) {
        /* Row-major flat index: sum of index * stride, trivial factors elided. */
        int64_t stride[KT_TE_MAX_DIMS];
        int nterms = 0;
        for (int i = e->nargs - 1; i >= 0; i--)
            stride[i] = i == e->nargs - 1 ? 1 : stride[i + 1] * p->shape[i + 1];
        aff_t flat = {.ok = env != NULL};
        for (int i = 0; i < e->nargs && flat.ok; i++) {
            aff_t a;
            aff_of(env, s, e->args[i], &a, depth + 1);
            aff_add(&flat, &a, stride[i]);
        }
        if (flat.ok) {
            kt_sbuf_printf(out, "%s[", p->name);
            aff_print(env->L, &flat, out);
            kt_sbuf_puts(out, "]");
            goto done;
        }
        for (int i = 0; i < e->nargs; i++)
            nterms += !(e->args[i]->kind == KT_EX_CONST && e->args[i]->ival == 0);
        kt_sbuf_printf(out, "%s[%s", p->name, nterms > 1 ? "(" : "");
        int first = 1;
        for (int i = 0; i < e->nargs; i++) {
            if (e->args[i]->kind == KT_EX_CONST && e->args[i]->ival == 0)
                continue;
            if (!first)
                kt_sbuf_puts(out, " + ");
            first = 0;
            if (stride[i] == 1)
                kt_sbuf_puts(out, idx[i].data);
            else
                kt_sbuf_printf(out, "(%s*%lldLL)", idx[i].data, (long long)stride[i]);
        }
        kt_sbuf_puts(out, nterms == 0 ? "0]" : nterms > 1 ? ")]" : "]");
    }
done:
    for (int i = 0; i < e->nargs; i++)
        kt_sbuf_free(&idx[i]);
    return rc;
}

static int emit(const kt_dag_t *dag, const kt_stage_t *s, const kt_expr_t *e,
                const char *const *axis_c, const double *axv, const env_t *env, uint64_t mask,
                uint64_t taken, kt_sbuf_t *out, int depth)
{
    static const char *const infix[KT_EX__COUNT] = {
        [KT_EX_ADD] = " + ", [KT_EX_SUB] = " - ", [KT_EX_MUL] = "*", [KT_EX_DIV] = "/",
        [KT_EX_LT] = " < ", [KT_EX_LE] = " <= ", [KT_EX_GT] = " > ", [KT_EX_GE] = " >= ",
        [KT_EX_EQ] = " == ", [KT_EX_NE] = " != ", [KT_EX_AND] = " && ", [KT_EX_OR] = " || ",
    };
    static const char *const fn_c[KT_FN__COUNT] = {
        [KT_FN_EXP] = "expf", [KT_FN_SQRT] = "sqrtf", [KT_FN_RSQRT] = "kt_rsqrtf",
        [KT_FN_TANH] = "tanhf", [KT_FN_ERF] = "erff",
    };
    if (!e)
        return kt_err_set(KT_EINVAL, "stage '%s': missing expression", s->name);
    if (depth > 400)
        return kt_err_set(KT_EINVAL, "stage '%s': expression nested too deeply", s->name);
    int rc = KT_OK;
    const char *call = NULL;
    double fv;
    if (axv && e->kind != KT_EX_CONST && e->kind != KT_EX_AXIS &&
        const_eval(dag, s, e, axv, depth, &fv)) {
        if (e->dtype == KT_DT_F32)
            put_float(out, fv);
        else if (e->dtype == KT_DT_BOOL)
            kt_sbuf_puts(out, fv != 0 ? "1" : "0");
        else
            kt_sbuf_printf(out, fv < 0 ? "(%lldLL)" : "%lldLL", (long long)fv);
        return KT_OK;
    }
    if (axv && e->kind == KT_EX_MUL && e->dtype == KT_DT_F32) {
        rc = emit_product(dag, s, e, axis_c, axv, env, mask, taken, out, depth);
        if (rc)
            return rc < 0 ? rc : KT_OK;
    }
    switch (e->kind) {
    case KT_EX_CONST:
        if (e->dtype == KT_DT_F32)
            put_float(out, e->fval);
        else if (e->dtype == KT_DT_BOOL)
            kt_sbuf_puts(out, e->ival ? "1" : "0");
        else if (e->ival < 0)
            kt_sbuf_printf(out, "(%lldLL)", (long long)e->ival);
        else
            kt_sbuf_printf(out, "%lldLL", (long long)e->ival);
        return KT_OK;
    case KT_EX_AXIS: {
        if (e->axis < 0 || e->axis >= s->ndim + s->nreduce || !axis_c || !axis_c[e->axis])
            return kt_err_set(KT_EINVAL, "stage '%s': no C text for axis %d", s->name, e->axis);
        const char *t = axis_c[e->axis];
        kt_sbuf_printf(out, is_simple(t) ? "%s" : "(%s)", t);
        return KT_OK;
    }
    case KT_EX_LOAD:
        return emit_load(dag, s, e, axis_c, axv, env, mask, taken, out, depth);
    case KT_EX_NOT:
        kt_sbuf_puts(out, "(!");
        rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1);
        kt_sbuf_puts(out, ")");
        return rc;
    case KT_EX_SELECT:
        /* C's ?: evaluates only the taken branch, so a guarded (padding)
         * load never reads out of bounds. */
        kt_sbuf_puts(out, "(");
        if ((rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1)))
            return rc;
        kt_sbuf_puts(out, " ? ");
        if ((rc = emit(dag, s, e->args[1], axis_c, axv, env, mask, taken, out, depth + 1)))
            return rc;
        kt_sbuf_puts(out, " : ");
        if ((rc = emit(dag, s, e->args[2], axis_c, axv, env, mask, taken, out, depth + 1)))
            return rc;
        kt_sbuf_puts(out, ")");
        return KT_OK;
    case KT_EX_CAST:
        kt_sbuf_puts(out, e->dtype == KT_DT_F32 ? "((float)(" : e->dtype == KT_DT_INT
                                                                  ? "((long long)("
                                                                  : "((");
        rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1);
        kt_sbuf_puts(out, e->dtype == KT_DT_BOOL ? ") != 0)" : "))");
        return rc;
    case KT_EX_CALL:
        if ((unsigned)e->fn >= KT_FN__COUNT)
            return kt_err_set(KT_EINVAL, "stage '%s': bad math function", s->name);
        kt_sbuf_printf(out, "%s(", fn_c[e->fn]);
        rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1);
        kt_sbuf_puts(out, ")");
        return rc;
    case KT_EX_MIN:
        call = e->dtype == KT_DT_F32 ? "kt_minf" : "kt_mini";
        break;
    case KT_EX_MAX:
        call = e->dtype == KT_DT_F32 ? "kt_maxf" : "kt_maxi";
        break;
    case KT_EX_FLOORDIV:
        call = "kt_floordiv";
        break;
    case KT_EX_FLOORMOD:
        call = "kt_floormod";
        break;
    default:
        if ((unsigned)e->kind >= KT_EX__COUNT || !infix[e->kind] || e->nargs != 2)
            return kt_err_set(KT_EINVAL, "stage '%s': bad expression kind %d", s->name, e->kind);
        kt_sbuf_puts(out, "(");
        if ((rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1)))
            return rc;
        kt_sbuf_puts(out, infix[e->kind]);
        if ((rc = emit(dag, s, e->args[1], axis_c, axv, env, mask, taken, out, depth + 1)))
            return rc;
        kt_sbuf_puts(out, ")");
        return KT_OK;
    }
    kt_sbuf_printf(out, "%s(", call);
    if ((rc = emit(dag, s, e->args[0], axis_c, axv, env, mask, taken, out, depth + 1)))
        return rc;
    kt_sbuf_puts(out, ", ");
    if ((rc = emit(dag, s, e->args[1], axis_c, axv, env, mask, taken, out, depth + 1)))
        return rc;
    kt_sbuf_puts(out, ")");
    return KT_OK;
}

static int expr_c(const kt_dag_t *dag, int stage, const kt_expr_t *e, const char *const *axis_c,
                  const double *axis_val, const kt_lower_t *L, const kt_lower_index_t *axis,
                  uint64_t inline_mask, uint64_t taken, kt_sbuf_t *out)
{
    const kt_stage_t *s = kt_dag_stage(dag, stage);
    if (!s || !out)
        return kt_err_set(KT_EINVAL, "no stage %d", stage);
    double axv[KT_SCHED_MAX_AXES];
    if (axis_val) {
        for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
            axv[a] = a < s->ndim + s->nreduce ? axis_val[a] : NAN;
    }
    env_t *env = NULL;
    if (L && axis) {
        env = malloc(sizeof(*env));
        if (!env)
            return kt_err_set(KT_ENOMEM, "out of memory");
        env->L = L;
        for (int a = 0; a < s->ndim + s->nreduce && a < KT_SCHED_MAX_AXES; a++)
            env->axis[a] = aff_of_index(&axis[a]);
    }
    int rc = emit(dag, s, e, axis_c, axis_val ? axv : NULL, env, inline_mask, taken, out, 0);
    free(env);
    return rc ? rc : kt_sbuf_ok(out);
}

int kt_codegen_expr_c_lowered(const kt_dag_t *dag, int stage, const kt_expr_t *e,
                              const char *const *axis_c, const double *axis_val,
                              const kt_lower_t *L, const kt_lower_index_t *axis,
                              uint64_t inline_mask, uint64_t taken, kt_sbuf_t *out)
{
    if (!L || !axis)
        return kt_err_set(KT_EINVAL, "stage %d: no lowered program", stage);
    return expr_c(dag, stage, e, axis_c, axis_val, L, axis, inline_mask, taken, out);
}

int kt_codegen_expr_c(const kt_dag_t *dag, int stage, const kt_expr_t *e,
                      const char *const *axis_c, uint64_t inline_mask, kt_sbuf_t *out)
{
    return expr_c(dag, stage, e, axis_c, NULL, NULL, NULL, inline_mask, 0, out);
}
