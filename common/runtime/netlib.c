/* Writing a tuned network as a C library: kernels, graph runner, weights (netlib.h). */
#include "netlib.h"
#include "netlib_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "refop/refop.h"
#include "sched/state.h"
#include "tensorio/tensorio.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* The weights a task's kernel takes packed (codegen.h); n 0: none. */
typedef struct {
    int n;
    kt_codegen_pack_t p[KT_CODEGEN_MAX_PACKS];
} packs_t;

void kt_netlib_c_name(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return;
    if (!name || !*name)
        name = "network";
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
          name[0] == '_') && n + 1 < cap)
        out[n++] = 'n';
    for (const char *c = name; *c && n + 1 < cap; c++) {
        int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                 (*c >= '0' && *c <= '9') || *c == '_';
        out[n++] = ok ? *c : '_';
    }
    out[n] = '\0';
}

/* A C string literal of s. */
void kt_netlib_put_cstr(kt_sbuf_t *b, const char *s)
{
    kt_sbuf_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            kt_sbuf_printf(b, "\\%c", *c);
        else if (*c < 32 || *c >= 127 || *c == '?')
            kt_sbuf_printf(b, "\\%03o", *c);
        else
            kt_sbuf_printf(b, "%c", *c);
    }
    kt_sbuf_puts(b, "\"");
}

/* Text of a comment: no comment terminator, no line break. */
void kt_netlib_put_comment(kt_sbuf_t *b, const char *s)
{
    for (const char *c = s; *c; c++)
        kt_sbuf_printf(b, "%c", (*c == '*' && c[1] == '/') || *c == '\n' ? ' ' : *c);
}

static void put_shape(kt_sbuf_t *b, const kt_plan_value_t *v)
{
    for (int d = 0; d < v->ndim; d++)
        kt_sbuf_printf(b, "%s%lld", d ? ", " : "", (long long)v->dims[d]);
}

/* The C expression of value v's memory. */
static void put_value(kt_sbuf_t *b, const kt_net_plan_t *p, int v)
{
    v = kt_net_plan_root(p, v);
    const kt_plan_value_t *x = &p->values[v];
    if (x->kind == KT_PLAN_V_INPUT)
        kt_sbuf_printf(b, "((float *)kt_in[%d])", x->slot);
    else if (x->kind == KT_PLAN_V_OUTPUT)
        kt_sbuf_puts(b, "output");
    else
        kt_sbuf_printf(b, "(A + %lldLL)", (long long)(x->offset / 4));
}

static void put_ref(kt_sbuf_t *b, const kt_net_plan_t *p, kt_plan_ref_t r)
{
    if (r.id < 0)
        kt_sbuf_puts(b, "NULL");
    else if (r.weight)
        kt_sbuf_printf(b, "m->w[%d]", r.id);
    else
        put_value(b, p, r.id);
}

/* Row-major strides of dims (model layout). */
void kt_netlib_strides(const int64_t *dims, int ndim, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

void kt_netlib_put_ll_array(kt_sbuf_t *b, const char *name, const int64_t *v, int n)
{
    kt_sbuf_printf(b, "        static const long long %s[%d] = {", name, n > 0 ? n : 1);
    for (int d = 0; d < n; d++)
        kt_sbuf_printf(b, "%s%lldLL", d ? ", " : "", (long long)v[d]);
    kt_sbuf_puts(b, n > 0 ? "};\n" : "0};\n");
}

void kt_netlib_bcast_strides(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *sx,
                             int64_t *sz)
{
    /* numpy broadcasting: shapes aligned at the last axis, size-1 axes repeat. */
    const kt_plan_value_t *o = &p->values[s->out];
    const kt_plan_value_t *vx = &p->values[s->in[0].id], *vz = &p->values[s->in[1].id];
    int64_t tx[KT_NET_MAX_DIMS], tz[KT_NET_MAX_DIMS];
    kt_netlib_strides(vx->dims, vx->ndim, tx);
    kt_netlib_strides(vz->dims, vz->ndim, tz);
    for (int d = 0; d < o->ndim; d++) {
        int dx = d - (o->ndim - vx->ndim), dz = d - (o->ndim - vz->ndim);
        sx[d] = dx < 0 || vx->dims[dx] == 1 ? 0 : tx[dx];
        sz[d] = dz < 0 || vz->dims[dz] == 1 ? 0 : tz[dz];
    }
}

void kt_netlib_transpose_strides(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *sp)
{
    const kt_plan_value_t *x = &p->values[s->in[0].id], *o = &p->values[s->out];
    int64_t t[KT_NET_MAX_DIMS];
    kt_netlib_strides(x->dims, x->ndim, t);
    for (int d = 0; d < o->ndim; d++)
        sp[d] = t[s->perm[d]];
}

void kt_netlib_concat_dims(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *outer,
                           int64_t *inner)
{
    const kt_plan_value_t *o = &p->values[s->out];
    /* An NHWC join: the logical [N, C, H, W] axis in memory order. */
    int nhwc = o->nhwc && o->ndim == 4;
    int axis = nhwc ? kt_plan_nhwc_memory_axis[s->axis] : s->axis;
    *outer = *inner = 1;
    for (int d = 0; d < o->ndim; d++) {
        int64_t n = o->dims[nhwc ? kt_plan_nhwc_axis[d] : d];
        if (d < axis)
            *outer *= n;
        else if (d > axis)
            *inner *= n;
    }
}

/* A double as a C constant, infinities and NaN included. */
static void put_double(kt_sbuf_t *b, double v)
{
    if (isnan(v))
        kt_sbuf_puts(b, "NAN");
    else if (isinf(v))
        kt_sbuf_puts(b, v > 0 ? "HUGE_VAL" : "-HUGE_VAL");
    else
        kt_sbuf_printf(b, "%.17g", v);
}

static void put_i64s(kt_sbuf_t *b, const int64_t *v, int n)
{
    kt_sbuf_puts(b, "{");
    for (int k = 0; k < n; k++)
        kt_sbuf_printf(b, "%s%lldLL", k ? ", " : "", (long long)v[k]);
    kt_sbuf_puts(b, "}");
}

/* A reference-operator step: its call as a constant and one call of the
 * embedded float instance. */
static void put_refop(kt_sbuf_t *b, const kt_net_plan_t *p, const kt_plan_step_t *s)
{
    const kt_refop_t *r = &s->rop;
    kt_sbuf_printf(b, "        static const kt_refop_t R = {%d, %d, {%d, %d, %d}, {", r->op, r->nin,
                   r->ndim[0], r->ndim[1], r->ndim[2]);
    for (int k = 0; k < KT_REFOP_MAX_IN; k++) {
        kt_sbuf_puts(b, k ? ", " : "");
        put_i64s(b, r->din[k], KT_REFOP_MAX_DIMS);
    }
    kt_sbuf_printf(b, "}, %d, ", r->ondim);
    put_i64s(b, r->dout, KT_REFOP_MAX_DIMS);
    kt_sbuf_puts(b, ",\n            ");
    put_i64s(b, r->ia, (int)(sizeof(r->ia) / sizeof(r->ia[0])));
    kt_sbuf_puts(b, ", {");
    put_double(b, r->fa[0]);
    kt_sbuf_puts(b, ", ");
    put_double(b, r->fa[1]);
    kt_sbuf_puts(b, "}};\n        const float *in[] = {");
    for (int q = 0; q < s->nin; q++) {
        kt_sbuf_puts(b, q ? ", " : "");
        put_ref(b, p, s->in[q]);
    }
    kt_sbuf_puts(b, s->nin ? "};\n" : "NULL};\n");
    kt_sbuf_puts(b, "        kt_refop_run_f(&R, in, y);\n");
}

/* The reference operators' float instance, when a step calls it. */
static void put_refop_text(kt_sbuf_t *b, const kt_net_plan_t *p)
{
    int any = 0;
    for (int k = 0; k < p->nsteps && !any; k++)
        any = p->steps[k].kind == KT_PLAN_REFOP;
    if (!any)
        return;
    kt_sbuf_puts(b, "/* The reference operators of the steps with no kernel (refop.h). */\n"
                    "#define KT_REFOP_EMBEDDED 1\n");
    kt_sbuf_puts(b, kt_refop_header_text);
    kt_sbuf_puts(b, "#include <math.h>\n#include <string.h>\n#define KT_RT float\n"
                    "#define KT_RF(n) kt_refop_##n##_f\n#define KT_RM(fn) fn##f\n");
    kt_sbuf_puts(b, kt_refop_impl_text);
    kt_sbuf_puts(b, "\n");
}

/* y[i] = body over an output of dims, row-major and written in order, whose
 * body reads operand k (of ns, 1 or 2) at "#k": one loop per axis with constant extents and
 * strides (st[k][d]: operand k's step along output axis d), axes of size 1
 * dropped and axes contiguous in every operand merged. The loop that
 * divided per element and axis cost ShuffleNet's channel shuffles twice a
 * copy's time, and a squeeze-excitation's broadcast multiply more. */
static void put_strided(kt_sbuf_t *b, const int64_t *dims, int ndim, const int64_t *const *st,
                        int ns, long long n, const char *body)
{
    int64_t D[KT_NET_MAX_DIMS], S[2][KT_NET_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 1)
            continue;
        int merge = nd > 0;
        for (int k = 0; k < ns && merge; k++)
            merge = S[k][nd - 1] == st[k][d] * dims[d];
        if (merge) {
            D[nd - 1] *= dims[d];
            for (int k = 0; k < ns; k++)
                S[k][nd - 1] = st[k][d];
            continue;
        }
        D[nd] = dims[d];
        for (int k = 0; k < ns; k++)
            S[k][nd] = st[k][d];
        nd++;
    }
    if (!nd) {
        D[0] = 1;
        S[0][0] = S[1][0] = 0;
        nd = 1;
    }
    kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n", n);
    for (int d = 0; d < nd; d++)
        kt_sbuf_printf(b, "%*sfor (long long i%d = 0; i%d < %lldLL; i%d++)\n", 8 + 4 * d, "", d,
                       d, (long long)D[d], d);
    kt_sbuf_printf(b, "%*sy[", 8 + 4 * nd, "");
    for (int d = 1; d < nd; d++)
        kt_sbuf_puts(b, "(");
    kt_sbuf_puts(b, "i0");
    for (int d = 1; d < nd; d++)
        kt_sbuf_printf(b, " * %lldLL + i%d)", (long long)D[d], d);
    kt_sbuf_puts(b, "] = ");
    for (const char *c = body; *c; c++) {
        if (c[0] != '#' || c[1] < '0' || c[1] >= '0' + ns) {
            kt_sbuf_printf(b, "%c", *c);
            continue;
        }
        int k = *++c - '0';
        for (int d = 0; d < nd; d++)
            kt_sbuf_printf(b, "%si%d * %lldLL", d ? " + " : "", d, (long long)S[k][d]);
    }
    kt_sbuf_puts(b, ";\n");
}

static int emit_step(kt_sbuf_t *b, const kt_net_plan_t *p, const packs_t *packs, int k)
{
    const kt_plan_step_t *s = &p->steps[k];
    const kt_plan_value_t *o = &p->values[s->out];
    long long n = (long long)o->numel;
    kt_sbuf_printf(b, "    { /* step %d: ", k);
    kt_netlib_put_comment(b, s->name);
    kt_sbuf_puts(b, " */\n");
    if (s->kind != KT_PLAN_TASK) {
        kt_sbuf_puts(b, "        float *y = ");
        put_value(b, p, s->out);
        kt_sbuf_puts(b, ";\n");
        if (s->kind != KT_PLAN_CONCAT && s->kind != KT_PLAN_BINARY && s->kind != KT_PLAN_REFOP) {
            kt_sbuf_puts(b, "        const float *x = ");
            put_value(b, p, s->in[0].id);
            kt_sbuf_puts(b, ";\n");
        }
    }
    switch (s->kind) {
    case KT_PLAN_TASK:
        kt_sbuf_puts(b, "        float *b[] = {");
        for (int q = 0; q < s->nin; q++) {
            put_ref(b, p, s->in[q]);
            kt_sbuf_puts(b, ", ");
        }
        put_value(b, p, s->out);
        kt_sbuf_printf(b, "};\n        if (NET_task%d(b) != 0)\n"
                          "            return kt_fail(\"step %d: a kernel could not allocate "
                          "memory\");\n",
                       s->task, k);
        /* The reference reads the weights in their own layout: unpack. */
        const packs_t *pk = &packs[s->task];
        kt_sbuf_puts(b, "#ifdef KTUNE_CHECK\n        if (err) {\n");
        for (int q = 0; q < pk->n; q++) {
            const kt_codegen_pack_t *x = &pk->p[q];
            char dn[16], sn[16];
            snprintf(dn, sizeof dn, "D%d", q);
            snprintf(sn, sizeof sn, "S%d", q);
            kt_netlib_put_ll_array(b, dn, x->shape, x->ndim);
            kt_netlib_put_ll_array(b, sn, x->step, x->ndim);
            kt_sbuf_printf(b, "            float *keep%d = b[%d];\n"
                              "            if (!(b[%d] = kt_unpack(keep%d, D%d, S%d, %d)))\n"
                              "                return kt_fail(\"out of memory\");\n",
                           q, x->buf, x->buf, q, q, q, x->ndim);
        }
        kt_sbuf_printf(b, "            int bad = kt_check_task(NET_ref%d, b, %d, %lldLL, &err[%d]);\n",
                       s->task, s->nin + 1, n, k);
        for (int q = 0; q < pk->n; q++)
            kt_sbuf_printf(b, "            free(b[%d]);\n            b[%d] = keep%d;\n",
                           pk->p[q].buf, pk->p[q].buf, q);
        kt_sbuf_puts(b, "            if (bad)\n                return -1;\n        }\n#endif\n");
        break;
    case KT_PLAN_COPY:
        kt_sbuf_printf(b, "        if (y != x)\n            memcpy(y, x, sizeof(float) * %lldULL);\n",
                       n);
        break;
    case KT_PLAN_LAYOUT: {
        long long N = o->dims[0], C = o->dims[1], H = o->dims[2], W = o->dims[3];
        /* The loops follow the written tensor, so stores are contiguous. */
        const char *src = o->nhwc ? "((nn * %lldLL + c) * %lldLL + h) * %lldLL + w"
                                  : "((nn * %lldLL + h) * %lldLL + w) * %lldLL + c";
        kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n", n);
        kt_sbuf_printf(b, "        for (long long nh = 0; nh < %lldLL; nh++) {\n",
                       N * (o->nhwc ? H : C));
        if (o->nhwc) {
            kt_sbuf_printf(b, "            long long nn = nh / %lldLL, h = nh %% %lldLL;\n", H, H);
            kt_sbuf_printf(b, "            for (long long w = 0; w < %lldLL; w++)\n"
                              "                for (long long c = 0; c < %lldLL; c++)\n"
                              "                    y[(nh * %lldLL + w) * %lldLL + c] = x[",
                           W, C, W, C);
            kt_sbuf_printf(b, src, C, H, W);
        } else {
            kt_sbuf_printf(b, "            long long nn = nh / %lldLL, c = nh %% %lldLL;\n", C, C);
            kt_sbuf_printf(b, "            for (long long h = 0; h < %lldLL; h++)\n"
                              "                for (long long w = 0; w < %lldLL; w++)\n"
                              "                    y[(nh * %lldLL + h) * %lldLL + w] = x[",
                           H, W, H, W);
            kt_sbuf_printf(b, src, H, W, C);
        }
        kt_sbuf_puts(b, "];\n        }\n");
        break;
    }
    case KT_PLAN_UNARY: {
        const char *f = "v > 0.0f ? v : 0.0f";
        char clip[160];
        switch (s->unary) {
        case KT_PLAN_RELU: break;
        case KT_PLAN_GELU: f = "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))"; break;
        case KT_PLAN_SIGMOID: f = "1.0f / (1.0f + expf(-v))"; break;
        case KT_PLAN_TANH: f = "tanhf(v)"; break;
        case KT_PLAN_CLIP:
            /* %e, not %g: "6f" is no float literal (an integer with a suffix) */
            snprintf(clip, sizeof clip, "kt_maxf(kt_minf(v, %.9ef), %.9ef)", s->hi, s->lo);
            f = clip;
            break;
        case KT_PLAN_HARDSWISH:
            f = "v * kt_maxf(kt_minf(v / 6.0f + 0.5f, 1.0f), 0.0f)";
            break;
        case KT_PLAN_SILU:
            f = "v * (1.0f / (1.0f + expf(-v)))";
            break;
        case KT_PLAN_HARDSIGMOID:
            snprintf(clip, sizeof clip, "kt_maxf(kt_minf(%.9ef * v + %.9ef, 1.0f), 0.0f)", s->lo,
                     s->hi);
            f = clip;
            break;
        }
        kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n"
                          "        for (long long i = 0; i < %lldLL; i++) {\n"
                          "            float v = x[i];\n            y[i] = %s;\n        }\n",
                       n, n, f);
        break;
    }
    case KT_PLAN_CHANNEL:
        kt_sbuf_puts(b, "        const float *sc = ");
        put_ref(b, p, s->in[1]);
        kt_sbuf_puts(b, ", *sh = ");
        put_ref(b, p, s->in[2]);
        kt_sbuf_puts(b, ";\n        (void)sc;\n        (void)sh;\n");
        if (s->inner == 1) {
            /* Channels innermost (NHWC): a row of them per pixel, the loop
             * over channels vectorised; the general loop below divides per
             * element, which cost DenseNet's batch norms 3x their time. */
            kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n"
                              "        for (long long o = 0; o < %lldLL; o++)\n"
                              "            for (long long c = 0; c < %lldLL; c++)\n"
                              "                y[o * %lldLL + c] = x[o * %lldLL + c]%s%s;\n",
                           n, (long long)s->outer, (long long)s->chan, (long long)s->chan,
                           (long long)s->chan, s->in[1].id >= 0 ? " * sc[c]" : "",
                           s->in[2].id >= 0 ? " + sh[c]" : "");
            break;
        }
        kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n"
                          "        for (long long oc = 0; oc < %lldLL; oc++) {\n"
                          "            long long c = oc %% %lldLL;\n"
                          "            float s = sc ? sc[c] : 1.0f, t = sh ? sh[c] : 0.0f;\n"
                          "            for (long long i = 0; i < %lldLL; i++)\n"
                          "                y[oc * %lldLL + i] = x[oc * %lldLL + i] * s + t;\n"
                          "        }\n",
                       n, (long long)(s->outer * s->chan), (long long)s->chan,
                       (long long)s->inner, (long long)s->inner, (long long)s->inner);
        break;
    case KT_PLAN_BINARY: {
        static const char *const ops[] = {"+", "*", "-", "/"};
        kt_sbuf_puts(b, "        const float *x = ");
        put_value(b, p, s->in[0].id);
        kt_sbuf_puts(b, ", *z = ");
        put_value(b, p, s->in[1].id);
        kt_sbuf_puts(b, ";\n");
        if (!s->chan) {
            kt_sbuf_printf(b, "        KT_PARALLEL_FOR(%lldLL)\n"
                              "        for (long long i = 0; i < %lldLL; i++)\n"
                              "            y[i] = x[i] %s z[i];\n",
                           n, n, ops[s->binary_mul]);
            break;
        }
        int64_t sx[KT_NET_MAX_DIMS], sz[KT_NET_MAX_DIMS];
        const int64_t *st[2] = {sx, sz};
        char body[32];
        kt_netlib_bcast_strides(p, s, sx, sz);
        snprintf(body, sizeof body, "x[#0] %s z[#1]", ops[s->binary_mul]);
        put_strided(b, o->dims, o->ndim, st, 2, n, body);
        break;
    }
    case KT_PLAN_TRANSPOSE: {
        int64_t sp[KT_NET_MAX_DIMS];
        const int64_t *st[1] = {sp};
        kt_netlib_transpose_strides(p, s, sp);
        put_strided(b, o->dims, o->ndim, st, 1, n, "x[#0]");
        break;
    }
    case KT_PLAN_CONCAT: {
        int64_t outer, inner, at = 0;
        kt_netlib_concat_dims(p, s, &outer, &inner);
        for (int q = 0; q < s->nin; q++) {
            int64_t a = p->values[s->in[q].id].dims[s->axis];
            kt_sbuf_puts(b, "        {\n            const float *x = ");
            put_value(b, p, s->in[q].id);
            kt_sbuf_printf(b, ";\n            for (long long oo = 0; oo < %lldLL; oo++)\n"
                              "                memcpy(y + (oo * %lldLL + %lldLL) * %lldLL, "
                              "x + oo * %lldLL, sizeof(float) * %lldULL);\n        }\n",
                           (long long)outer, (long long)o->dims[s->axis], (long long)at,
                           (long long)inner, (long long)(a * inner), (long long)(a * inner));
            at += a;
        }
        break;
    }
    case KT_PLAN_REFOP:
        put_refop(b, p, s);
        break;
    }
    kt_sbuf_printf(b, "    }\n    if (t)\n        t[%d] = kt_lap(&t0);\n", k);
    return KT_OK;
}

/* The safetensors reader of the generated file: a strict scanner of the
 * header's JSON (string keys, objects, arrays, numbers) that finds each
 * weight by name and checks its dtype, shape and offsets. */
const char *const KT_NETLIB_LOADER =
    "static const char *kt_ws(const char *p, const char *e)\n"
    "{\n"
    "    while (p < e && (*p == ' ' || *p == '\\n' || *p == '\\r' || *p == '\\t'))\n"
    "        p++;\n"
    "    return p;\n"
    "}\n"
    "\n"
    "/* A string: its raw text (escapes kept) in s, n. */\n"
    "static const char *kt_jstr(const char *p, const char *e, const char **s, size_t *n)\n"
    "{\n"
    "    p = kt_ws(p, e);\n"
    "    if (p >= e || *p != '\"')\n"
    "        return NULL;\n"
    "    const char *q = ++p;\n"
    "    while (q < e && *q != '\"')\n"
    "        q += *q == '\\\\' ? 2 : 1;\n"
    "    if (q >= e)\n"
    "        return NULL;\n"
    "    *s = p;\n"
    "    *n = (size_t)(q - p);\n"
    "    return q + 1;\n"
    "}\n"
    "\n"
    "static const char *kt_jint(const char *p, const char *e, long long *v)\n"
    "{\n"
    "    p = kt_ws(p, e);\n"
    "    if (p >= e || *p < '0' || *p > '9')\n"
    "        return NULL;\n"
    "    *v = 0;\n"
    "    while (p < e && *p >= '0' && *p <= '9') {\n"
    "        if (*v > 100000000000000LL)\n"
    "            return NULL;\n"
    "        *v = *v * 10 + (*p++ - '0');\n"
    "    }\n"
    "    return p;\n"
    "}\n"
    "\n"
    "static const char *kt_jskip(const char *p, const char *e, int depth)\n"
    "{\n"
    "    p = kt_ws(p, e);\n"
    "    if (p >= e || depth > 32)\n"
    "        return NULL;\n"
    "    if (*p == '\"') {\n"
    "        const char *s;\n"
    "        size_t n;\n"
    "        return kt_jstr(p, e, &s, &n);\n"
    "    }\n"
    "    if (*p == '{' || *p == '[') {\n"
    "        char close = *p == '{' ? '}' : ']';\n"
    "        p = kt_ws(p + 1, e);\n"
    "        if (p < e && *p == close)\n"
    "            return p + 1;\n"
    "        for (;;) {\n"
    "            if (close == '}') {\n"
    "                const char *s;\n"
    "                size_t n;\n"
    "                if (!(p = kt_jstr(p, e, &s, &n)) || (p = kt_ws(p, e)) >= e || *p++ != ':')\n"
    "                    return NULL;\n"
    "            }\n"
    "            if (!(p = kt_jskip(p, e, depth + 1)) || (p = kt_ws(p, e)) >= e)\n"
    "                return NULL;\n"
    "            if (*p == close)\n"
    "                return p + 1;\n"
    "            if (*p++ != ',')\n"
    "                return NULL;\n"
    "        }\n"
    "    }\n"
    "    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\\n')\n"
    "        p++;\n"
    "    return p;\n"
    "}\n"
    "\n"
    "/* One tensor entry {\"dtype\": .., \"shape\": [..], \"data_offsets\": [b, e]}. */\n"
    "static const char *kt_jentry(const char *p, const char *e, int *f32, long long *numel,\n"
    "                             long long *off)\n"
    "{\n"
    "    *f32 = 0;\n"
    "    *numel = -1;\n"
    "    off[0] = off[1] = -1;\n"
    "    if ((p = kt_ws(p, e)) >= e || *p++ != '{')\n"
    "        return NULL;\n"
    "    for (;;) {\n"
    "        const char *k;\n"
    "        size_t kn;\n"
    "        if (!(p = kt_jstr(p, e, &k, &kn)) || (p = kt_ws(p, e)) >= e || *p++ != ':')\n"
    "            return NULL;\n"
    "        if (kn == 5 && !memcmp(k, \"dtype\", 5)) {\n"
    "            const char *v;\n"
    "            size_t vn;\n"
    "            if (!(p = kt_jstr(p, e, &v, &vn)))\n"
    "                return NULL;\n"
    "            *f32 = vn == 3 && !memcmp(v, \"F32\", 3);\n"
    "        } else if ((kn == 5 && !memcmp(k, \"shape\", 5)) ||\n"
    "                   (kn == 12 && !memcmp(k, \"data_offsets\", 12))) {\n"
    "            int shape = kn == 5, i = 0;\n"
    "            long long prod = 1, v;\n"
    "            if ((p = kt_ws(p, e)) >= e || *p++ != '[')\n"
    "                return NULL;\n"
    "            if ((p = kt_ws(p, e)) < e && *p == ']') {\n"
    "                p++;\n"
    "            } else {\n"
    "                for (;;) {\n"
    "                    if (!(p = kt_jint(p, e, &v)))\n"
    "                        return NULL;\n"
    "                    if (shape) {\n"
    "                        if (v != 0 && prod > 100000000000000LL / v)\n"
    "                            return NULL;\n"
    "                        prod *= v;\n"
    "                    } else if (i < 2) {\n"
    "                        off[i] = v;\n"
    "                    }\n"
    "                    i++;\n"
    "                    if ((p = kt_ws(p, e)) >= e)\n"
    "                        return NULL;\n"
    "                    if (*p == ']') {\n"
    "                        p++;\n"
    "                        break;\n"
    "                    }\n"
    "                    if (*p++ != ',')\n"
    "                        return NULL;\n"
    "                }\n"
    "            }\n"
    "            if (shape)\n"
    "                *numel = prod;\n"
    "            else if (i != 2)\n"
    "                return NULL;\n"
    "        } else if (!(p = kt_jskip(p, e, 1))) {\n"
    "            return NULL;\n"
    "        }\n"
    "        if ((p = kt_ws(p, e)) >= e)\n"
    "            return NULL;\n"
    "        if (*p == '}')\n"
    "            return p + 1;\n"
    "        if (*p++ != ',')\n"
    "            return NULL;\n"
    "    }\n"
    "}\n"
    "\n"
    "/* Reads every weight of the table into one block, each at a 64-byte aligned\n"
    " * place: safetensors packs tensors back to back, so a tensor after one of an\n"
    " * odd length starts unaligned in the file, and vector loads (a GPU's float4)\n"
    " * need aligned addresses. */\n"
    "static int kt_load(NET_t *m, const char *path)\n"
    "{\n"
    "    FILE *f = fopen(path, \"rb\");\n"
    "    if (!f)\n"
    "        return kt_fail(\"cannot open %s\", path);\n"
    "    unsigned char h8[8];\n"
    "    char *hdr = NULL;\n"
    "    int rc = -1;\n"
    "    long long *begin = calloc(KT_NW + 1, sizeof(long long));\n"
    "    if (!begin) {\n"
    "        kt_fail(\"out of memory\");\n"
    "        goto out;\n"
    "    }\n"
    "    if (fseek(f, 0, SEEK_END) != 0) {\n"
    "        kt_fail(\"%s: cannot seek\", path);\n"
    "        goto out;\n"
    "    }\n"
    "    long long size = ftell(f);\n"
    "    rewind(f);\n"
    "    if (size < 8 || fread(h8, 1, 8, f) != 8) {\n"
    "        kt_fail(\"%s: not a safetensors file (too short)\", path);\n"
    "        goto out;\n"
    "    }\n"
    "    unsigned long long hl = 0;\n"
    "    for (int i = 7; i >= 0; i--)\n"
    "        hl = hl << 8 | h8[i];\n"
    "    if (hl < 2 || hl > (unsigned long long)(size - 8)) {\n"
    "        kt_fail(\"%s: not a safetensors file (header length %llu)\", path, hl);\n"
    "        goto out;\n"
    "    }\n"
    "    long long data_bytes = size - 8 - (long long)hl;\n"
    "    hdr = malloc(hl);\n"
    "    if (!hdr) {\n"
    "        kt_fail(\"out of memory\");\n"
    "        goto out;\n"
    "    }\n"
    "    if (fread(hdr, 1, hl, f) != hl) {\n"
    "        kt_fail(\"%s: read failed\", path);\n"
    "        goto out;\n"
    "    }\n"
    "    for (int i = 0; i < KT_NW; i++)\n"
    "        begin[i] = -1;\n"
    "    const char *p = kt_ws(hdr, hdr + hl), *e = hdr + hl;\n"
    "    if (p >= e || *p++ != '{') {\n"
    "        kt_fail(\"%s: the header is not a JSON object\", path);\n"
    "        goto out;\n"
    "    }\n"
    "    for (int first = 1;; first = 0) {\n"
    "        const char *k;\n"
    "        size_t kn;\n"
    "        if ((p = kt_ws(p, e)) < e && *p == '}' && first)\n"
    "            break;\n"
    "        if (!(p = kt_jstr(p, e, &k, &kn)) || (p = kt_ws(p, e)) >= e || *p++ != ':') {\n"
    "            kt_fail(\"%s: malformed header\", path);\n"
    "            goto out;\n"
    "        }\n"
    "        int w = -1;\n"
    "        for (int i = 0; i < KT_NW && w < 0; i++)\n"
    "            if (strlen(kt_weight_names[i]) == kn && !memcmp(kt_weight_names[i], k, kn))\n"
    "                w = i;\n"
    "        if (w < 0) {\n"
    "            p = kt_jskip(p, e, 1);\n"
    "        } else {\n"
    "            int f32;\n"
    "            long long numel, off[2];\n"
    "            p = kt_jentry(p, e, &f32, &numel, off);\n"
    "            if (p && (!f32 || numel != kt_weight_numel[w] || off[1] - off[0] != numel * 4 ||\n"
    "                      off[0] < 0 || off[0] % 4 != 0 || off[1] > data_bytes)) {\n"
    "                kt_fail(\"%s: tensor '%s' is not float32 of %lld values inside the file\",\n"
    "                        path, kt_weight_names[w], kt_weight_numel[w]);\n"
    "                goto out;\n"
    "            }\n"
    "            if (p)\n"
    "                begin[w] = off[0];\n"
    "        }\n"
    "        if (!p || (p = kt_ws(p, e)) >= e) {\n"
    "            kt_fail(\"%s: malformed header\", path);\n"
    "            goto out;\n"
    "        }\n"
    "        if (*p == '}')\n"
    "            break;\n"
    "        if (*p++ != ',') {\n"
    "            kt_fail(\"%s: malformed header\", path);\n"
    "            goto out;\n"
    "        }\n"
    "    }\n"
    "    long long total = 0;\n"
    "    for (int i = 0; i < KT_NW; i++) {\n"
    "        if (begin[i] < 0) {\n"
    "            kt_fail(\"%s: tensor '%s' is missing\", path, kt_weight_names[i]);\n"
    "            goto out;\n"
    "        }\n"
    "        total += (kt_weight_numel[i] * 4 + 63) / 64 * 64;\n"
    "    }\n"
    "    m->blob = aligned_alloc(64, total > 0 ? (size_t)total : 64);\n"
    "    if (!m->blob) {\n"
    "        kt_fail(\"out of memory\");\n"
    "        goto out;\n"
    "    }\n"
    "    for (long long i = 0, at = 0; i < KT_NW; i++) {\n"
    "        m->w[i] = m->blob + at / 4;\n"
    "        at += (kt_weight_numel[i] * 4 + 63) / 64 * 64;\n"
    "        size_t n = (size_t)kt_weight_numel[i];\n"
    "        if (fseek(f, 8 + (long)hl + (long)begin[i], SEEK_SET) != 0 ||\n"
    "            fread(m->w[i], 4, n, f) != n) {\n"
    "            kt_fail(\"%s: read failed\", path);\n"
    "            goto out;\n"
    "        }\n"
    "    }\n"
    "    m->blob_bytes = total;\n"
    "    rc = 0;\n"
    "out:\n"
    "    free(begin);\n"
    "    free(hdr);\n"
    "    fclose(f);\n"
    "    return rc;\n"
    "}\n";

/* Replace every "NET" token (the prefix placeholder) of t by name. */
void kt_netlib_put_named(kt_sbuf_t *b, const char *t, const char *name)
{
    for (const char *c = t; *c;) {
        const char *q = strstr(c, "NET");
        if (!q) {
            kt_sbuf_puts(b, c);
            break;
        }
        kt_sbuf_putn(b, c, (size_t)(q - c));
        kt_sbuf_puts(b, name);
        c = q + 3;
    }
}

void kt_netlib_put_tables(kt_sbuf_t *b, const kt_net_plan_t *p)
{
    kt_sbuf_printf(b, "#define KT_NSTEPS %d\n#define KT_NW %d\n", p->nsteps, p->nweights);
    kt_sbuf_puts(b, "static const char *const kt_step_names[KT_NSTEPS] = {\n");
    for (int k = 0; k < p->nsteps; k++) {
        kt_sbuf_puts(b, "    ");
        kt_netlib_put_cstr(b, p->steps[k].name);
        kt_sbuf_puts(b, ",\n");
    }
    kt_sbuf_puts(b, "};\nstatic const int kt_step_tasks[KT_NSTEPS] = {");
    for (int k = 0; k < p->nsteps; k++)
        kt_sbuf_printf(b, "%s%d", k ? ", " : "", p->steps[k].task);
    kt_sbuf_puts(b, "};\nstatic const char *const kt_step_kinds[KT_NSTEPS] = {");
    for (int k = 0; k < p->nsteps; k++)
        kt_sbuf_printf(b, "%s\"%s\"", k ? ", " : "", kt_plan_kind_name(p->steps[k].kind));
    kt_sbuf_puts(b, "};\n\n"
                    "int NET_num_steps(void)\n{\n    return KT_NSTEPS;\n}\n\n"
                    "const char *NET_step_name(int i)\n{\n"
                    "    return i >= 0 && i < KT_NSTEPS ? kt_step_names[i] : NULL;\n}\n\n"
                    "int NET_step_task(int i)\n{\n"
                    "    return i >= 0 && i < KT_NSTEPS ? kt_step_tasks[i] : -1;\n}\n\n"
                    "const char *NET_step_kind(int i)\n{\n"
                    "    return i >= 0 && i < KT_NSTEPS ? kt_step_kinds[i] : NULL;\n}\n\n");
    kt_sbuf_puts(b, "static const char *const kt_weight_names[KT_NW + 1] = {\n");
    for (int k = 0; k < p->nweights; k++) {
        kt_sbuf_puts(b, "    ");
        kt_netlib_put_cstr(b, p->weights[k].name);
        kt_sbuf_puts(b, ",\n");
    }
    kt_sbuf_puts(b, "    NULL};\nstatic const long long kt_weight_numel[KT_NW + 1] = {");
    for (int k = 0; k < p->nweights; k++)
        kt_sbuf_printf(b, "%lldLL, ", (long long)p->weights[k].numel);
    kt_sbuf_puts(b, "0};\n");
}

/* Whether every buffer of task i's packs is a constant in every call of
 * it: a weight that is an activation (a matmul's B) cannot be packed ahead. */
static int packs_are_weights(const kt_net_plan_t *p, int task, const packs_t *pk)
{
    for (int k = 0; k < p->nsteps; k++) {
        const kt_plan_step_t *s = &p->steps[k];
        for (int q = 0; s->kind == KT_PLAN_TASK && s->task == task && q < pk->n; q++)
            if (pk->p[q].buf >= s->nin || !s->in[pk->p[q].buf].weight)
                return 0;
    }
    return 1;
}

static int emit_source(kt_sbuf_t *b, const kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                       const kt_netlib_kernel_t *kernels, const char *name, packs_t *packs,
                       int *ndefault)
{
    kt_sbuf_t t;
    kt_sbuf_init(&t);
    kt_sbuf_printf(&t, "/* NET.c: the network NET as built by ktune build (see NET.h). */\n"
                       "#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c17 */\n");
    kt_codegen_preamble_c(&t);
    kt_sbuf_puts(&t, "#include <stdarg.h>\n#include <stdio.h>\n#include <time.h>\n"
                     "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n#include \"NET.h\"\n\n"
                     "/* Loops of the simple layers go parallel when they are large enough. */\n"
                     "#ifdef _OPENMP\n#define KT_PRAGMA(x) _Pragma(#x)\n"
                     "#define KT_PARALLEL_FOR(n) KT_PRAGMA(omp parallel for if ((n) > 32768))\n"
                     "#else\n#define KT_PARALLEL_FOR(n)\n#endif\n\n");
    put_refop_text(&t, p);
    kt_sched_params_t params;
    kt_sched_params_default(&params);
    int rc = KT_OK;
    *ndefault = 0;
    for (int i = 0; i < tasks->ntasks && rc == KT_OK; i++) {
        const kt_dag_t *dag = kt_workload_dag(tasks->tasks[i].wl);
        char entry[KT_NETLIB_MAX_NAME + 32];
        snprintf(entry, sizeof entry, "%s_task%d", name, i);
        kt_sbuf_printf(&t, "/* Task %d: ", i);
        kt_netlib_put_comment(&t, tasks->tasks[i].desc);
        if (kernels[i].state_json) {
            if (kernels[i].origin) {
                kt_sbuf_puts(&t, "; a schedule not tuned for this task, ");
                kt_netlib_put_comment(&t, kernels[i].origin);
                kt_sbuf_puts(&t, ". */\n");
            } else
                kt_sbuf_printf(&t, "; the best measured schedule (%.4f ms). */\n",
                               kernels[i].measured_ms);
            kt_sched_state_t *st = kt_sched_state_from_json(kernels[i].state_json, dag, &params);
            int np = st ? kt_codegen_packs(dag, st, packs[i].p, KT_CODEGEN_MAX_PACKS) : -1;
            packs[i].n = np > 0 ? np : 0;
            if (!packs_are_weights(p, i, &packs[i]))
                packs[i].n = 0;
            if (!st)
                rc = kt_err_prefix("task %d: its record's state", i);
            else if (np < 0)
                rc = np;
            else if (packs[i].n)   /* weights laid out at build time, not per call */
                rc = kt_codegen_emit_c_packed_into(dag, st, entry, &t);
            else
                rc = kt_codegen_emit_c_into(dag, st, entry, &t);
            kt_sched_state_free(st);
        } else {
            kt_sbuf_puts(&t, "; no record: ktune's naive reference. */\n");
            (*ndefault)++;
            rc = kt_codegen_reference_c_into(dag, entry, &t);
        }
        kt_sbuf_puts(&t, "\n");
    }
    kt_sbuf_puts(&t, "#ifdef KTUNE_CHECK\n");
    for (int i = 0; i < tasks->ntasks && rc == KT_OK; i++) {
        char entry[KT_NETLIB_MAX_NAME + 32];
        snprintf(entry, sizeof entry, "%s_ref%d", name, i);
        rc = kt_codegen_reference_c_into(kt_workload_dag(tasks->tasks[i].wl), entry, &t);
    }
    kt_sbuf_puts(&t, "#endif\n\n");
    if (rc) {
        kt_sbuf_free(&t);
        return rc;
    }
    kt_netlib_put_tables(&t, p);
    kt_sbuf_printf(&t, "\n"
                       "struct NET {\n    float *arena;\n    float *blob;\n    long long blob_bytes;\n"
                       "    float *w[KT_NW + 1];\n};\n\n"
                       "static _Thread_local char kt_msg[512];\n\n"
                       "const char *NET_last_error(void)\n{\n    return kt_msg;\n}\n\n"
                       "static int kt_fail(const char *fmt, ...)\n{\n    va_list ap;\n"
                       "    va_start(ap, fmt);\n    vsnprintf(kt_msg, sizeof kt_msg, fmt, ap);\n"
                       "    va_end(ap);\n    return -1;\n}\n\n");
    kt_sbuf_puts(&t, KT_NETLIB_LOADER);
    kt_sbuf_printf(&t,
        "\nNET_t *NET_create(const char *weights_path)\n{\n"
        "    NET_t *m = calloc(1, sizeof(*m));\n"
        "    if (!m) {\n        kt_fail(\"out of memory\");\n        return NULL;\n    }\n"
        "    m->arena = aligned_alloc(64, %lldULL);\n"
        "    if (!m->arena) {\n        kt_fail(\"out of memory (arena of %lld bytes)\");\n"
        "        NET_destroy(m);\n        return NULL;\n    }\n"
        "    if (kt_load(m, weights_path) != 0) {\n        NET_destroy(m);\n        return NULL;\n"
        "    }\n    return m;\n}\n\n"
        "void NET_destroy(NET_t *m)\n{\n    if (!m)\n        return;\n    free(m->arena);\n"
        "    free(m->blob);\n    free(m);\n}\n\n"
        "int NET_set_threads(int n)\n{\n    if (n < 1)\n        return -1;\n#ifdef _OPENMP\n"
        "    omp_set_num_threads(n);\n    return 0;\n#else\n    return n == 1 ? 0 : -1;\n#endif\n}\n\n"
        "static double kt_lap(double *t0)\n{\n    struct timespec ts;\n"
        "    clock_gettime(CLOCK_MONOTONIC, &ts);\n"
        "    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, d = now - *t0;\n"
        "    *t0 = now;\n    return d;\n}\n\n"
        "#ifdef KTUNE_CHECK\n"
        "/* Runs the reference on the kernel's inputs into scratch memory and\n"
        " * compares: the largest difference over the reference's largest magnitude. */\n"
        "static int kt_check_task(int (*ref)(float **), float **b, int nb, long long n, double *err)\n"
        "{\n    float *got = b[nb - 1], *want = malloc(sizeof(float) * (size_t)n);\n"
        "    if (!want)\n        return kt_fail(\"out of memory\");\n    b[nb - 1] = want;\n"
        "    int rc = ref(b);\n    b[nb - 1] = got;\n    double big = 0, diff = 0;\n"
        "    for (long long i = 0; rc == 0 && i < n; i++) {\n"
        "        double a = fabs((double)want[i]), d = fabs((double)got[i] - (double)want[i]);\n"
        "        big = a > big ? a : big;\n"
        "        diff = d > diff || d != d ? d : diff;\n    }\n    free(want);\n"
        "    *err = big > 0 ? diff / big : diff;\n"
        "    return rc == 0 ? 0 : kt_fail(\"a reference kernel could not allocate memory\");\n}\n\n"
        "/* A packed weight back in its own layout (malloc'd): packed element i is\n"
        " * the weight's element at sum(idx_m * S[m]) (codegen.h's kt_codegen_pack). */\n"
        "static float *kt_unpack(const float *p, const long long *D, const long long *S, int n)\n"
        "{\n    long long total = 1, idx[16] = {0}, at = 0;\n"
        "    for (int m = 0; m < n; m++)\n        total *= D[m];\n"
        "    float *w = malloc(sizeof(float) * (size_t)total);\n"
        "    for (long long i = 0; w && i < total; i++) {\n        w[at] = p[i];\n"
        "        for (int m = n - 1; m >= 0; m--) {\n            at += S[m];\n"
        "            if (++idx[m] < D[m])\n                break;\n"
        "            at -= S[m] * D[m];\n            idx[m] = 0;\n        }\n    }\n"
        "    return w;\n}\n"
        "#endif\n\n"
        "static int kt_exec(NET_t *m, const float *const *kt_in, float *output, double *t,\n"
        "                   double *err)\n"
        "{\n    float *A = m->arena;\n    double t0 = 0;\n    (void)err;\n"
        "    if (t)\n        kt_lap(&t0);\n",
        (long long)((p->arena_bytes + 64) / 64 * 64), (long long)p->arena_bytes);
    for (int k = 0; k < p->nsteps && rc == KT_OK; k++)
        rc = emit_step(&t, p, packs, k);
    kt_sbuf_puts(&t,
        "    (void)A;\n    return 0;\n}\n\n"
        "/* The inputs of a run: one pointer each, none NULL. */\n"
        "static int kt_inputs_ok(const char *fn, const float *const *in, int n)\n{\n"
        "    if (n != NET_NUM_INPUTS)\n"
        "        return kt_fail(\"%s: the network has %d inputs (call NET_run_inputs)\", fn,\n"
        "                       NET_NUM_INPUTS);\n"
        "    for (int k = 0; k < n; k++)\n        if (!in[k])\n"
        "            return kt_fail(\"%s: input %d is NULL\", fn, k);\n    return 0;\n}\n\n"
        "int NET_run(NET_t *m, const float *input, float *output)\n{\n"
        "    if (!m || !output || kt_inputs_ok(\"NET_run\", &input, 1))\n"
        "        return m && output ? -1 : kt_fail(\"NET_run: a NULL argument\");\n"
        "    return kt_exec(m, &input, output, NULL, NULL);\n}\n\n"
        "int NET_run_timed(NET_t *m, const float *input, float *output, double *step_seconds)\n{\n"
        "    if (!m || !output || !step_seconds || kt_inputs_ok(\"NET_run_timed\", &input, 1))\n"
        "        return m && output && step_seconds ? -1\n"
        "                                           : kt_fail(\"NET_run_timed: a NULL argument\");\n"
        "    return kt_exec(m, &input, output, step_seconds, NULL);\n}\n\n"
        "int NET_run_inputs(NET_t *m, const float *const *inputs, float *output,\n"
        "                   double *step_seconds)\n{\n"
        "    if (!m || !inputs || !output)\n"
        "        return kt_fail(\"NET_run_inputs: a NULL argument\");\n"
        "    if (kt_inputs_ok(\"NET_run_inputs\", inputs, NET_NUM_INPUTS))\n        return -1;\n"
        "    return kt_exec(m, inputs, output, step_seconds, NULL);\n}\n\n"
        "#ifdef KTUNE_CHECK\n"
        "int NET_check_inputs(NET_t *m, const float *const *inputs, float *output,\n"
        "                     double *step_err)\n{\n"
        "    if (!m || !inputs || !output || !step_err)\n"
        "        return kt_fail(\"NET_check: a NULL argument\");\n"
        "    if (kt_inputs_ok(\"NET_check\", inputs, NET_NUM_INPUTS))\n        return -1;\n"
        "    for (int k = 0; k < KT_NSTEPS; k++)\n        step_err[k] = -1;\n"
        "    return kt_exec(m, inputs, output, NULL, step_err);\n}\n\n"
        "int NET_check(NET_t *m, const float *input, float *output, double *step_err)\n{\n"
        "    if (!input)\n        return kt_fail(\"NET_check: a NULL argument\");\n"
        "    if (kt_inputs_ok(\"NET_check\", &input, 1))\n        return -1;\n"
        "    return NET_check_inputs(m, &input, output, step_err);\n}\n#endif\n");
    if (rc == KT_OK)
        rc = kt_sbuf_ok(&t);
    if (rc == KT_OK) {
        kt_netlib_put_named(b, t.data, name);
        rc = kt_sbuf_ok(b);
    }
    kt_sbuf_free(&t);
    return rc;
}

int kt_netlib_emit_header(kt_sbuf_t *b, const kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                          const char *name, const char *source, int ndefault, const char *arch)
{
    const kt_plan_value_t *out = &p->values[p->output];
    char guard[KT_NETLIB_MAX_NAME + 8];
    size_t g = 0;
    for (const char *c = name; *c && g + 3 < sizeof guard; c++)
        guard[g++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    memcpy(guard + g, "_H", 3);
    kt_sbuf_t t;
    kt_sbuf_init(&t);
    kt_sbuf_puts(&t, "/*\n * NET: ");
    kt_netlib_put_comment(&t, source);
    kt_sbuf_printf(&t, ", built by ktune build: %d task%s (%d with the %s\n"
                       " * schedule: no record), %d steps, an arena of %lld bytes.\n",
                   tasks->ntasks, tasks->ntasks == 1 ? "" : "s", ndefault,
                   arch ? "default GPU" : "naive reference", p->nsteps, (long long)p->arena_bytes);
    if (arch)
        kt_sbuf_printf(&t, " *\n * CUDA (%s): NET.cu holds the kernels (NET.cubin: compiled by NVRTC\n"
                           " * at build time; by hand: nvcc -cubin -arch=%s NET.cu); NET_host.c\n"
                           " * loads it beside the weights file and launches the kernels in order\n"
                           " * on one stream with the Driver API.\n"
                           " * Build: cc -O2 -I/usr/local/cuda/include -c NET_host.c\n"
                           " *        (link the program with -lcuda)\n *\n",
                       arch, arch);
    else
        kt_sbuf_puts(&t, " *\n * Build: cc -O3 -fno-math-errno -march=native -fopenmp -std=c17 -c NET.c\n"
                         " *        (link the program with -fopenmp -lm; add -DKTUNE_CHECK for\n"
                         " *        NET_check, which also runs every task's reference kernel)\n"
                         " *\n");
    kt_sbuf_puts(&t, " * Use:   NET_t *m = NET_create(\"NET.safetensors\");\n"
                     " *        NET_run(m, input, output);   (0 on success)\n"
                     " *        NET_destroy(m);\n"
                     " * input and output are dense float32 in the model's own layout (NCHW for\n"
                     " * ONNX and PyTorch models) with the shapes below, whatever layout the\n"
                     " * kernels use inside (the runner converts at the edges).\n"
                     " *\n"
                     " * Ownership: NET_create reads the weights file into the instance (the\n"
                     " * file may go away after) and allocates its arena; NET_destroy frees both\n"
                     " * (accepts NULL). The caller owns input and output.\n"
                     " * Thread-safety: NET_run writes the instance's arena, so one instance\n"
                     " * runs on one thread at a time; separate instances are independent.\n"
                     " * NET_set_threads sets the OpenMP threads of the calling thread's runs.\n"
                     " * Errors: NULL or -1, with a message in NET_last_error() (per thread).\n"
                     " */\n");
    kt_sbuf_printf(&t, "#ifndef %s\n#define %s\n\n", guard, guard);
    /* Input 0 is NET_INPUT_*, input k > 0 NET_INPUTk_*; each DTYPE is the
     * model's type: integers (token ids, masks) are passed as float values. */
    kt_sbuf_printf(&t, "#define NET_NUM_INPUTS %d\n", p->ninputs);
    for (int k = 0; k < p->ninputs; k++) {
        const kt_plan_value_t *v = &p->values[p->inputs[k]];
        char tag[16] = "";
        if (k)
            snprintf(tag, sizeof tag, "%d", k);
        kt_sbuf_printf(&t, "#define NET_INPUT%s_NAME ", tag);
        kt_netlib_put_cstr(&t, p->input_names[k]);
        kt_sbuf_printf(&t, "\n#define NET_INPUT%s_NDIM %d\n#define NET_INPUT%s_SHAPE {", tag,
                       v->ndim, tag);
        put_shape(&t, v);
        kt_sbuf_printf(&t, "}\n#define NET_INPUT%s_NUMEL %lldLL\n#define NET_INPUT%s_DTYPE \"%s\"\n",
                       tag, (long long)v->numel, tag, p->input_int[k] ? "int" : "float32");
    }
    kt_sbuf_printf(&t, "#define NET_OUTPUT_NDIM %d\n#define NET_OUTPUT_SHAPE {", out->ndim);
    put_shape(&t, out);
    kt_sbuf_printf(&t, "}\n#define NET_OUTPUT_NUMEL %lldLL\n\n", (long long)out->numel);
    kt_sbuf_puts(&t,
        "typedef struct NET NET_t;\n\n"
        "/* ---- the network ---- */\n"
        "NET_t *NET_create(const char *weights_path);\n"
        "int NET_run(NET_t *m, const float *input, float *output);\n"
        "void NET_destroy(NET_t *m);\n"
        "int NET_set_threads(int threads);\n"
        "const char *NET_last_error(void);\n\n"
        "/* ---- profiling: the steps in order, each a task's kernel (NET_step_task >= 0)\n"
        " * or a simple layer, and one run timing each (seconds) ---- */\n"
        "int NET_num_steps(void);\n"
        "const char *NET_step_name(int i);\n"
        "int NET_step_task(int i);\n"
        "/* what step i does: \"task\", \"layout\" (an NCHW <-> NHWC conversion), \"copy\",\n"
        " * \"unary\", \"channel\", \"binary\", \"transpose\", \"concat\" or \"refop\" (a reference\n"
        " * operator: slices, gathers, pads...) */\n"
        "const char *NET_step_kind(int i);\n"
        "int NET_run_timed(NET_t *m, const float *input, float *output, double *step_seconds);\n\n");
    if (!arch)
        kt_sbuf_puts(&t,
            "/* ---- any number of inputs: inputs[k] is input k (NET_run and NET_run_timed\n"
            " * take networks of one input); step_seconds may be NULL ---- */\n"
            "int NET_run_inputs(NET_t *m, const float *const *inputs, float *output,\n"
            "                   double *step_seconds);\n\n");
    kt_sbuf_puts(&t,
        "#ifdef KTUNE_CHECK\n"
        "/* A run that also runs each task's reference kernel on the same inputs;\n"
        " * step_err[i]: largest difference / the reference's largest magnitude\n"
        " * (-1 for steps that are no task). */\n"
        "int NET_check(NET_t *m, const float *input, float *output, double *step_err);\n");
    if (!arch)
        kt_sbuf_puts(&t, "int NET_check_inputs(NET_t *m, const float *const *inputs, float *output,\n"
                         "                     double *step_err);\n");
    kt_sbuf_puts(&t, "#endif\n\n#endif\n");
    int rc = kt_sbuf_ok(&t);
    if (rc == KT_OK) {
        kt_netlib_put_named(b, t.data, name);
        rc = kt_sbuf_ok(b);
    }
    kt_sbuf_free(&t);
    return rc;
}

int kt_netlib_write_text(const char *dir, const char *name, const char *ext, kt_sbuf_t *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    if (kt_file_write(path, b->data, b->len) != 0)
        return kt_err_prefix("writing %s", path);
    return KT_OK;
}

int kt_netlib_write_weights(const kt_net_plan_t *plan, const kt_codegen_pack_t *const *how,
                            const char *dir, const char *name, int64_t *bytes)
{
    kt_safetensors_writer_t *w = kt_safetensors_writer_new();
    if (!w)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = KT_OK;
    *bytes = 0;
    for (int k = 0; k < plan->nweights && rc == KT_OK; k++) {
        const kt_plan_weight_t *x = &plan->weights[k];
        if (!how || !how[k]) {
            rc = kt_safetensors_writer_add(w, x->name, x->data, x->dims, x->ndim);
        } else {
            float *packed = malloc((size_t)x->numel * sizeof(float));
            if (!packed) {
                rc = kt_err_set(KT_ENOMEM, "out of memory");
                break;
            }
            kt_codegen_pack(how[k], x->data, packed, 0);
            /* A layout with more loops than safetensors' rank limit (a
             * weight split over every tile level of 4 axes) keeps its data
             * with the leading loops merged: the loader checks only the
             * element count. */
            int64_t shape[KT_TE_MAX_DIMS + 1];
            int nd = how[k]->ndim, lead = nd > KT_TENSORIO_MAX_RANK ? nd - KT_TENSORIO_MAX_RANK : 0;
            for (int d = 0; d < nd - lead; d++)
                shape[d] = how[k]->shape[d + lead];
            for (int d = 0; d < lead; d++)
                shape[0] *= how[k]->shape[d];
            rc = kt_safetensors_writer_add(w, x->name, packed, shape, nd - lead);
            free(packed);
        }
        *bytes += x->numel * 4;
    }
    if (rc == KT_OK)
        rc = kt_safetensors_writer_set_metadata(w, "producer", "ktune build");
    if (rc == KT_OK)
        rc = kt_safetensors_writer_set_metadata(w, "network", name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    if (rc == KT_OK)
        rc = kt_safetensors_writer_save(w, path);
    kt_safetensors_writer_free(w);
    return rc;
}

int kt_netlib_write(const kt_net_plan_t *plan, const kt_net_tasks_t *tasks,
                    const kt_netlib_kernel_t *kernels, const char *name, const char *source,
                    const char *dir, kt_netlib_info_t *info)
{
    kt_netlib_info_t inf;
    memset(&inf, 0, sizeof inf);
    kt_netlib_c_name(name, inf.name, sizeof inf.name);
    inf.ntasks = tasks->ntasks;
    inf.nsteps = plan->nsteps;
    inf.arena_bytes = plan->arena_bytes;
    inf.naive_bytes = plan->naive_bytes;
    kt_sbuf_t c, h;
    kt_sbuf_init(&c);
    kt_sbuf_init(&h);
    packs_t *packs = calloc((size_t)tasks->ntasks + 1, sizeof *packs);
    if (!packs)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int rc = emit_source(&c, plan, tasks, kernels, inf.name, packs, &inf.ndefault);
    if (rc == KT_OK)
        rc = kt_netlib_emit_header(&h, plan, tasks, inf.name, source ? source : inf.name,
                                   inf.ndefault, NULL);
    if (rc == KT_OK)
        rc = kt_netlib_write_text(dir, inf.name, ".c", &c);
    if (rc == KT_OK)
        rc = kt_netlib_write_text(dir, inf.name, ".h", &h);
    kt_sbuf_free(&c);
    kt_sbuf_free(&h);
    /* Each weight goes to the file in the layout its kernel reads. */
    const kt_codegen_pack_t **how = calloc((size_t)plan->nweights + 1, sizeof *how);
    if (!rc && !how)
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    for (int k = 0; k < plan->nsteps && rc == KT_OK; k++) {
        const kt_plan_step_t *s = &plan->steps[k];
        for (int q = 0; s->kind == KT_PLAN_TASK && q < packs[s->task].n; q++)
            how[s->in[packs[s->task].p[q].buf].id] = &packs[s->task].p[q];
    }
    if (rc == KT_OK)
        rc = kt_netlib_write_weights(plan, how, dir, inf.name, &inf.weight_bytes);
    free(how);
    free(packs);
    if (rc == KT_OK && info)
        *info = inf;
    return rc;
}
