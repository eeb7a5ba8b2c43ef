/* Operator library: compute DAGs of common tensor operators (see ops.h). */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"

static const char *const epi_names[KT_EPI__COUNT] = {
    [KT_EPI_BIAS_ADD] = "bias_add", [KT_EPI_RELU] = "relu", [KT_EPI_ADD] = "add",
    [KT_EPI_GELU] = "gelu", [KT_EPI_CLIP] = "clip", [KT_EPI_SIGMOID] = "sigmoid",
    [KT_EPI_TANH] = "tanh", [KT_EPI_MULTIPLY] = "multiply",
    [KT_EPI_MULTIPLY_SCALAR] = "multiply_scalar", [KT_EPI_HARDSWISH] = "hardswish",
    [KT_EPI_HARDSIGMOID] = "hardsigmoid", [KT_EPI_SILU] = "silu",
};

const char *kt_ops_epilogue_name(kt_epilogue_t e)
{
    return (unsigned)e < KT_EPI__COUNT ? epi_names[e] : NULL;
}

int kt_ops_epilogue_parse(const char *name, kt_epilogue_t *out)
{
    for (int i = 0; i < KT_EPI__COUNT; i++)
        if (name && strcmp(name, epi_names[i]) == 0) {
            *out = (kt_epilogue_t)i;
            return KT_OK;
        }
    return kt_err_set(KT_EINVAL, "unknown epilogue '%s' (expected bias_add, relu, add, gelu, "
                      "clip, sigmoid, tanh, multiply, multiply_scalar, hardswish, "
                      "hardsigmoid or silu)", name ? name : "");
}

const kt_epi_params_t *kt_ops_epilogue_params(kt_epilogue_t e)
{
    static const kt_epi_params_t clip = {"min", "max", "bounds"},
                                 hardsigmoid = {"alpha", "beta", "alpha and beta"};
    return e == KT_EPI_CLIP ? &clip : e == KT_EPI_HARDSIGMOID ? &hardsigmoid : NULL;
}

kt_conv2d_params_t kt_ops_conv2d_default(void)
{
    kt_conv2d_params_t p = {{1, 1}, {0, 0, 0, 0}, {1, 1}};
    return p;
}

/* ---- small expression helpers -------------------------------------------- */

static kt_expr_t *ax(kt_dag_t *d, int a) { return kt_ex_axis(d, a); }
static kt_expr_t *ci(kt_dag_t *d, int64_t v) { return kt_ex_int(d, v); }
static kt_expr_t *cf(kt_dag_t *d, double v) { return kt_ex_float(d, v); }
static kt_expr_t *add(kt_dag_t *d, kt_expr_t *a, kt_expr_t *b) { return kt_ex_bin(d, KT_EX_ADD, a, b); }
static kt_expr_t *sub(kt_dag_t *d, kt_expr_t *a, kt_expr_t *b) { return kt_ex_bin(d, KT_EX_SUB, a, b); }
static kt_expr_t *mul(kt_dag_t *d, kt_expr_t *a, kt_expr_t *b) { return kt_ex_bin(d, KT_EX_MUL, a, b); }
static kt_expr_t *div_f(kt_dag_t *d, kt_expr_t *a, kt_expr_t *b) { return kt_ex_bin(d, KT_EX_DIV, a, b); }

/* axis*mul, printed without the "*1". */
static kt_expr_t *scaled(kt_dag_t *d, int axis, int64_t m)
{
    return m == 1 ? ax(d, axis) : mul(d, ax(d, axis), ci(d, m));
}

/* Load with all-axis indices given as stage-axis numbers (-1 means constant 0). */
static kt_expr_t *load_axes(kt_dag_t *d, int tensor, int n, const int *axes)
{
    kt_expr_t *idx[KT_TE_MAX_DIMS];
    for (int i = 0; i < n; i++)
        idx[i] = axes[i] < 0 ? ci(d, 0) : ax(d, axes[i]);
    return kt_ex_load(d, tensor, n, idx);
}

static kt_expr_t *load_identity(kt_dag_t *d, int tensor, int n)
{
    int axes[KT_TE_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++)
        axes[i] = i;
    return load_axes(d, tensor, n, axes);
}

/* base, or base_1, base_2, ... when taken. */
static void unique_name(const kt_dag_t *d, const char *base, char *out)
{
    for (int k = 0;; k++) {
        if (k == 0)
            snprintf(out, KT_TE_MAX_NAME, "%s", base);
        else
            snprintf(out, KT_TE_MAX_NAME, "%s_%d", base, k);
        int taken = 0;
        for (int i = 0; i < kt_dag_num_stages(d); i++)
            if (strcmp(kt_dag_stage(d, i)->name, out) == 0)
                taken = 1;
        if (!taken)
            return;
    }
}

static int check_dim(const char *field, int64_t v)
{
    if (v < 1 || v > KT_TE_MAX_EXTENT)
        return kt_err_set(KT_EINVAL, "field '%s' must be in 1..%lld (got %lld)", field,
                          (long long)KT_TE_MAX_EXTENT, (long long)v);
    return KT_OK;
}

static const char *const ax4[] = {"ax0", "ax1", "ax2", "ax3", "ax4", "ax5", "ax6", "ax7"};

/* Plain kinds to parameterized epilogues; clip needs bounds and hardsigmoid
 * its alpha and beta, so they are refused. */
static int epi_from_kinds(const kt_epilogue_t *kinds, int n, kt_epi_t *out)
{
    if (n < 0 || n > KT_OPS_MAX_EPILOGUE || (n > 0 && !kinds))
        return kt_err_set(KT_EINVAL, "field 'epilogue' has more than %d entries",
                          KT_OPS_MAX_EPILOGUE);
    for (int i = 0; i < n; i++) {
        const kt_epi_params_t *pk = kt_ops_epilogue_params(kinds[i]);
        if (pk)
            return kt_err_set(KT_EINVAL, "field 'epilogue[%d]': %s needs %s (use the kt_epi_t "
                              "form)", i, epi_names[kinds[i]], pk->what);
        out[i] = (kt_epi_t){.op = kinds[i]};
    }
    return KT_OK;
}

/* Append the epilogue stages after stage `last`; returns the new last stage
 * or negative. chan: the axis bias_add and multiply broadcast over. */
static int add_epilogues(kt_dag_t *d, int last, int chan, const kt_epi_t *epi, int nepi)
{
    if (nepi < 0 || nepi > KT_OPS_MAX_EPILOGUE || (nepi > 0 && !epi))
        return kt_err_set(KT_EINVAL, "field 'epilogue' has more than %d entries",
                          KT_OPS_MAX_EPILOGUE);
    const kt_stage_t *out = kt_dag_stage(d, last);
    int n = out->ndim;
    int64_t shape[KT_TE_MAX_DIMS];
    memcpy(shape, out->shape, sizeof(shape));
    for (int e = 0; e < nepi; e++) {
        char name[KT_TE_MAX_NAME], pname[KT_TE_MAX_NAME];
        int ph = -1, needs_ph = 1;
        const int64_t one = 1;
        kt_expr_t *x = NULL, *body = NULL;
        kt_epilogue_t op = epi[e].op;
        switch (op) {
        case KT_EPI_BIAS_ADD:
            unique_name(d, "bias", pname);
            ph = kt_dag_placeholder(d, pname, 1, &shape[chan]);
            unique_name(d, "T_bias_add", name);
            break;
        case KT_EPI_ADD:
            unique_name(d, "residual", pname);
            ph = kt_dag_placeholder(d, pname, n, shape);
            unique_name(d, "T_add", name);
            break;
        case KT_EPI_MULTIPLY:
        case KT_EPI_MULTIPLY_SCALAR:
            unique_name(d, "scale", pname);
            ph = kt_dag_placeholder(d, pname, 1, op == KT_EPI_MULTIPLY ? &shape[chan] : &one);
            unique_name(d, "T_multiply", name);
            break;
        case KT_EPI_CLIP: {
            double lo = (double)(float)epi[e].lo, hi = (double)(float)epi[e].hi;
            if (!isfinite(lo) || !isfinite(hi) || lo > hi)
                return kt_err_set(KT_EINVAL, "field 'epilogue[%d]': clip bounds must be finite "
                                  "with min <= max", e);
            unique_name(d, "T_clip", name);
            needs_ph = 0;
            break;
        }
        case KT_EPI_HARDSIGMOID:
            if (!isfinite((double)(float)epi[e].lo) || !isfinite((double)(float)epi[e].hi))
                return kt_err_set(KT_EINVAL, "field 'epilogue[%d]': hardsigmoid's alpha and "
                                  "beta must be finite", e);
            /* fall through */
        case KT_EPI_RELU:
        case KT_EPI_GELU:
        case KT_EPI_SIGMOID:
        case KT_EPI_TANH:
        case KT_EPI_HARDSWISH:
        case KT_EPI_SILU: {
            char stage[KT_TE_MAX_NAME];
            snprintf(stage, sizeof stage, "T_%s", epi_names[op]);
            unique_name(d, stage, name);
            needs_ph = 0;
            break;
        }
        default:
            return kt_err_set(KT_EINVAL, "field 'epilogue': bad entry %d", (int)op);
        }
        if (needs_ph && ph < 0)
            return ph;
        int s = kt_dag_compute(d, name, "elemwise", n, shape, ax4, 0, NULL, NULL, KT_RED_NONE);
        if (s < 0)
            return s;
        x = load_identity(d, last, n);
        switch (op) {
        case KT_EPI_BIAS_ADD:
        case KT_EPI_MULTIPLY: {
            int c = chan;
            kt_expr_t *v = load_axes(d, ph, 1, &c);
            body = op == KT_EPI_BIAS_ADD ? add(d, x, v) : mul(d, x, v);
            break;
        }
        case KT_EPI_MULTIPLY_SCALAR: {
            int c = -1;
            body = mul(d, x, load_axes(d, ph, 1, &c));
            break;
        }
        case KT_EPI_ADD:
            body = add(d, x, load_identity(d, ph, n));
            break;
        case KT_EPI_RELU:
            body = kt_ex_bin(d, KT_EX_MAX, x, cf(d, 0.0));
            break;
        case KT_EPI_CLIP:
            body = kt_ex_bin(d, KT_EX_MAX, kt_ex_bin(d, KT_EX_MIN, x, cf(d, epi[e].hi)),
                             cf(d, epi[e].lo));
            break;
        case KT_EPI_SIGMOID:
            body = div_f(d, cf(d, 1.0),
                         add(d, cf(d, 1.0), kt_ex_call(d, KT_FN_EXP, sub(d, cf(d, 0.0), x))));
            break;
        case KT_EPI_TANH:
            body = kt_ex_call(d, KT_FN_TANH, x);
            break;
        case KT_EPI_SILU: {
            /* x * (1 / (1 + exp(-x))): PyTorch's SiLU, as its ONNX export
             * Mul(x, Sigmoid(x)) computes it. */
            kt_expr_t *x2 = load_identity(d, last, n);
            body = mul(d, x, div_f(d, cf(d, 1.0), add(d, cf(d, 1.0),
                                                      kt_ex_call(d, KT_FN_EXP,
                                                                 sub(d, cf(d, 0.0), x2)))));
            break;
        }
        case KT_EPI_HARDSIGMOID: {
            kt_expr_t *v = add(d, mul(d, x, cf(d, (double)(float)epi[e].lo)),
                               cf(d, (double)(float)epi[e].hi));
            body = kt_ex_bin(d, KT_EX_MAX, kt_ex_bin(d, KT_EX_MIN, v, cf(d, 1.0)), cf(d, 0.0));
            break;
        }
        case KT_EPI_HARDSWISH: {
            /* x * clamp(x / 6 + 1/2, 0, 1), the form ONNX and PyTorch compute. */
            kt_expr_t *x2 = load_identity(d, last, n);
            kt_expr_t *v = add(d, div_f(d, x2, cf(d, 6.0)), cf(d, 0.5));
            body = mul(d, x, kt_ex_bin(d, KT_EX_MAX, kt_ex_bin(d, KT_EX_MIN, v, cf(d, 1.0)),
                                       cf(d, 0.0)));
            break;
        }
        default: {
            kt_expr_t *x2 = load_identity(d, last, n);
            kt_expr_t *erfv = kt_ex_call(d, KT_FN_ERF, mul(d, x2, cf(d, M_SQRT1_2)));
            body = mul(d, mul(d, x, cf(d, 0.5)), add(d, cf(d, 1.0), erfv));
            break;
        }
        }
        int rc = kt_dag_set_body(d, s, body);
        if (rc)
            return rc;
        last = s;
    }
    return last;
}

static kt_dag_t *finish(kt_dag_t *d, int rc)
{
    if (rc >= 0)
        rc = kt_dag_finalize(d);
    if (rc < 0) {
        kt_dag_free(d);
        return NULL;
    }
    return d;
}

/* ---- matmul family -------------------------------------------------------- */

kt_dag_t *kt_ops_matmul_ex(int64_t M, int64_t N, int64_t K, int b_transposed,
                           const kt_epi_t *epi, int nepi)
{
    if (check_dim("M", M) || check_dim("N", N) || check_dim("K", K))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    if (b_transposed) {
        sb[0] = N;
        sb[1] = K;
    }
    int a = kt_dag_placeholder(d, "A", 2, sa);
    int b = kt_dag_placeholder(d, "B", 2, sb);
    if (b >= 0)
        kt_dag_set_layout_free(d, b);   /* as TVM's matmul tutorial declares B */
    static const char *const axn[] = {"i", "j"}, *const rn[] = {"k"};
    int c = kt_dag_compute(d, "C", b_transposed ? "matmul_nt" : "matmul", 2, sc, axn, 1, &K, rn,
                           KT_RED_SUM);
    if (a < 0 || b < 0 || c < 0)
        return finish(d, -1);
    int ia[2] = {0, 2}, ib[2] = {2, 1}, ibt[2] = {1, 2};
    int rc = kt_dag_set_body(d, c, mul(d, load_axes(d, a, 2, ia),
                                       load_axes(d, b, 2, b_transposed ? ibt : ib)));
    return finish(d, rc ? rc : add_epilogues(d, c, 1, epi, nepi));
}

kt_dag_t *kt_ops_dense_ex(int64_t M, int64_t N, int64_t K, const kt_epi_t *epi, int nepi)
{
    if (check_dim("M", M) || check_dim("N", N) || check_dim("K", K))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sa[2] = {M, K}, sb[2] = {N, K}, sc[2] = {M, N};
    int a = kt_dag_placeholder(d, "data", 2, sa);
    int b = kt_dag_placeholder(d, "weight", 2, sb);
    if (b >= 0)
        kt_dag_set_layout_free(d, b);
    static const char *const axn[] = {"i", "j"}, *const rn[] = {"k"};
    int c = kt_dag_compute(d, "T_dense", "dense", 2, sc, axn, 1, &K, rn, KT_RED_SUM);
    if (a < 0 || b < 0 || c < 0)
        return finish(d, -1);
    int ia[2] = {0, 2}, ib[2] = {1, 2};
    int rc = kt_dag_set_body(d, c, mul(d, load_axes(d, a, 2, ia), load_axes(d, b, 2, ib)));
    return finish(d, rc ? rc : add_epilogues(d, c, 1, epi, nepi));
}

kt_dag_t *kt_ops_batch_matmul_ex(int64_t B, int64_t M, int64_t N, int64_t K,
                                 const kt_epi_t *epi, int nepi)
{
    if (check_dim("B", B) || check_dim("M", M) || check_dim("N", N) || check_dim("K", K))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N}, sc[3] = {B, M, N};
    int a = kt_dag_placeholder(d, "A", 3, sa);
    int b = kt_dag_placeholder(d, "B", 3, sb);
    static const char *const axn[] = {"b", "i", "j"}, *const rn[] = {"k"};
    int c = kt_dag_compute(d, "C", "batch_matmul", 3, sc, axn, 1, &K, rn, KT_RED_SUM);
    if (a < 0 || b < 0 || c < 0)
        return finish(d, -1);
    int ia[3] = {0, 1, 3}, ib[3] = {0, 3, 2};
    int rc = kt_dag_set_body(d, c, mul(d, load_axes(d, a, 3, ia), load_axes(d, b, 3, ib)));
    return finish(d, rc ? rc : add_epilogues(d, c, 2, epi, nepi));
}

/* The plain-kind wrappers: convert, then build. */
#define WITH_KINDS(kinds, n, call)                                                  \
    do {                                                                          \
        kt_epi_t ex_[KT_OPS_MAX_EPILOGUE];                                        \
        if (epi_from_kinds(kinds, n, ex_))                                        \
            return NULL;                                                          \
        const kt_epi_t *epi_ = ex_;                                               \
        return call;                                                              \
    } while (0)

kt_dag_t *kt_ops_matmul(int64_t M, int64_t N, int64_t K, int b_transposed,
                        const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi, kt_ops_matmul_ex(M, N, K, b_transposed, epi_, nepi));
}

kt_dag_t *kt_ops_dense(int64_t M, int64_t N, int64_t K, const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi, kt_ops_dense_ex(M, N, K, epi_, nepi));
}

kt_dag_t *kt_ops_batch_matmul(int64_t B, int64_t M, int64_t N, int64_t K,
                              const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi, kt_ops_batch_matmul_ex(B, M, N, K, epi_, nepi));
}

/* ---- windows: conv, depthwise, pool --------------------------------------- */

static int check_params(const kt_conv2d_params_t *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1 || p->stride[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'stride' must hold values in 1..1024");
        if (p->dilation[i] < 1 || p->dilation[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'dilation' must hold values in 1..1024");
    }
    for (int i = 0; i < 4; i++)
        if (p->pad[i] < 0 || p->pad[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'padding' must hold values in 0..1024");
    return KT_OK;
}

/* Output extent of a window; dim "H" or "W" names the fields in errors. */
static int window_out(const char *dim, const char *kdim, int64_t in, int64_t plo, int64_t phi,
                      int64_t k, int64_t s, int64_t dil, int64_t *out)
{
    int64_t span = in + plo + phi - dil * (k - 1) - 1;
    if (span < 0)
        return kt_err_set(KT_EINVAL,
                          "inconsistent shapes: the %s window (dilation*(%s-1)+1 = %lld) is larger "
                          "than the padded input (%s + padding = %lld), output size would be <= 0",
                          kdim, kdim, (long long)(dil * (k - 1) + 1), dim,
                          (long long)(in + plo + phi));
    *out = span / s + 1;
    return KT_OK;
}

/* Adds the pad stage for a 4-D input whose spatial dims are hd, hd+1, or
 * returns `data` itself when there is no padding. */
static int add_pad(kt_dag_t *d, int data, int hd, const kt_conv2d_params_t *p, double value)
{
    if (p->pad[0] == 0 && p->pad[1] == 0 && p->pad[2] == 0 && p->pad[3] == 0)
        return data;
    const kt_stage_t *in = kt_dag_stage(d, data);
    int64_t shape[4];
    memcpy(shape, in->shape, sizeof(shape));
    int64_t H = shape[hd], W = shape[hd + 1];
    shape[hd] += p->pad[0] + p->pad[2];
    shape[hd + 1] += p->pad[1] + p->pad[3];
    static const char *const an[] = {"i0", "i1", "i2", "i3"};
    int s = kt_dag_compute(d, "pad_temp", "pad", 4, shape, an, 0, NULL, NULL, KT_RED_NONE);
    if (s < 0)
        return s;
    kt_expr_t *cond = NULL, *idx[4];
    const int64_t lo[2] = {p->pad[0], p->pad[1]}, ext[2] = {H, W}, hi[2] = {p->pad[2], p->pad[3]};
    for (int i = 0; i < 4; i++)
        idx[i] = ax(d, i);
    for (int k = 0; k < 2; k++) {
        int a = hd + k;
        kt_expr_t *terms[2] = {NULL, NULL};
        if (lo[k] > 0) {
            terms[0] = kt_ex_bin(d, KT_EX_GE, ax(d, a), ci(d, lo[k]));
            idx[a] = sub(d, ax(d, a), ci(d, lo[k]));
        }
        if (hi[k] > 0)
            terms[1] = kt_ex_bin(d, KT_EX_LT, ax(d, a), ci(d, lo[k] + ext[k]));
        for (int t = 0; t < 2; t++)
            if (terms[t])
                cond = cond ? kt_ex_bin(d, KT_EX_AND, cond, terms[t]) : terms[t];
    }
    kt_expr_t *body = kt_ex_select(d, cond, kt_ex_load(d, data, 4, idx), cf(d, value));
    int rc = kt_dag_set_body(d, s, body);
    return rc ? rc : s;
}

/* index = axis*stride + raxis*dilation */
static kt_expr_t *win(kt_dag_t *d, int axis, int64_t stride, int raxis, int64_t dil)
{
    return add(d, scaled(d, axis, stride), scaled(d, raxis, dil));
}

/* Window output sizes of a conv-like operator with its field checks. */
static int conv_out(int64_t H, int64_t W, int64_t KH, int64_t KW, const kt_conv2d_params_t *p,
                    int64_t *OH, int64_t *OW)
{
    if (check_params(p) ||
        window_out("H", "KH", H, p->pad[0], p->pad[2], KH, p->stride[0], p->dilation[0], OH) ||
        window_out("W", "KW", W, p->pad[1], p->pad[3], KW, p->stride[1], p->dilation[1], OW))
        return KT_EINVAL;
    return KT_OK;
}

/* 4-D shape in the layout from n, c, h, w. */
static void shape4(int nchw, int64_t n, int64_t c, int64_t h, int64_t w, int64_t *out)
{
    int64_t a[4] = {n, h, w, c}, b[4] = {n, c, h, w};
    memcpy(out, nchw ? b : a, 4 * sizeof(int64_t));
}

/* floordiv(axis, m)*k, printed without the trivial parts. */
static kt_expr_t *group_base(kt_dag_t *d, int axis, int64_t m, int64_t k)
{
    kt_expr_t *g = m == 1 ? ax(d, axis) : kt_ex_bin(d, KT_EX_FLOORDIV, ax(d, axis), ci(d, m));
    return k == 1 ? g : mul(d, g, ci(d, k));
}

kt_dag_t *kt_ops_conv2d(kt_layout_t layout, int64_t N, int64_t H, int64_t W, int64_t CI,
                        int64_t CO, int64_t KH, int64_t KW, int64_t groups,
                        const kt_conv2d_params_t *pp, const kt_epi_t *epi, int nepi)
{
    kt_conv2d_params_t p = pp ? *pp : kt_ops_conv2d_default();
    const int nchw = layout == KT_LAYOUT_NCHW;
    if (layout != KT_LAYOUT_NHWC && !nchw) {
        kt_err_set(KT_EINVAL, "bad layout %d", (int)layout);
        return NULL;
    }
    if (check_dim("N", N) || check_dim("H", H) || check_dim("W", W) || check_dim("CI", CI) ||
        check_dim("CO", CO) || check_dim("KH", KH) || check_dim("KW", KW))
        return NULL;
    const int grouped = groups != 0;
    if (grouped && (groups < 1 || groups > KT_TE_MAX_EXTENT || CI % groups || CO % groups)) {
        kt_err_set(KT_EINVAL, "field 'groups' must be a positive divisor of CI and CO "
                   "(got %lld for CI %lld, CO %lld)", (long long)groups, (long long)CI,
                   (long long)CO);
        return NULL;
    }
    const int64_t ig = grouped ? CI / groups : CI, og = grouped ? CO / groups : CO;
    int64_t OH = 0, OW = 0;
    if (conv_out(H, W, KH, KW, &p, &OH, &OW))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sd[4], sw[4], so[4];
    shape4(nchw, N, CI, H, W, sd);
    shape4(nchw, N, CO, OH, OW, so);
    if (nchw) {
        int64_t b[4] = {CO, ig, KH, KW};
        memcpy(sw, b, sizeof(sw));
    } else {
        int64_t b[4] = {KH, KW, ig, CO};
        memcpy(sw, b, sizeof(sw));
    }
    char name[KT_TE_MAX_NAME];
    snprintf(name, sizeof(name), "%sconv2d_%s", grouped ? "group_" : "", nchw ? "nchw" : "nhwc");
    int data = kt_dag_placeholder(d, "data", 4, sd);
    if (data < 0)
        return finish(d, data);
    int pad = add_pad(d, data, nchw ? 2 : 1, &p, 0.0);
    int wt = kt_dag_placeholder(d, "weight", 4, sw);
    if (wt >= 0)
        kt_dag_set_layout_free(d, wt);
    if (pad < 0 || wt < 0)
        return finish(d, -1);
    int rc, out;
    if (nchw) {
        /* axes nn ff yy xx | rc ry rx = 0 1 2 3 | 4 5 6 */
        static const char *const an[] = {"nn", "ff", "yy", "xx"}, *const rn[] = {"rc", "ry", "rx"};
        int64_t rext[3] = {ig, KH, KW};
        out = kt_dag_compute(d, name, name, 4, so, an, 3, rext, rn, KT_RED_SUM);
        if (out < 0)
            return finish(d, out);
        kt_expr_t *chan = grouped ? add(d, group_base(d, 1, og, ig), ax(d, 4)) : ax(d, 4);
        kt_expr_t *di[4] = {ax(d, 0), chan, win(d, 2, p.stride[0], 5, p.dilation[0]),
                            win(d, 3, p.stride[1], 6, p.dilation[1])};
        int wi[4] = {1, 4, 5, 6};
        rc = kt_dag_set_body(d, out, mul(d, kt_ex_load(d, pad, 4, di), load_axes(d, wt, 4, wi)));
    } else {
        /* axes nn yy xx ff | ry rx rc = 0 1 2 3 | 4 5 6 */
        static const char *const an[] = {"nn", "yy", "xx", "ff"}, *const rn[] = {"ry", "rx", "rc"};
        int64_t rext[3] = {KH, KW, ig};
        out = kt_dag_compute(d, name, name, 4, so, an, 3, rext, rn, KT_RED_SUM);
        if (out < 0)
            return finish(d, out);
        kt_expr_t *chan = grouped ? add(d, group_base(d, 3, og, ig), ax(d, 6)) : ax(d, 6);
        kt_expr_t *di[4] = {ax(d, 0), win(d, 1, p.stride[0], 4, p.dilation[0]),
                            win(d, 2, p.stride[1], 5, p.dilation[1]), chan};
        int wi[4] = {4, 5, 6, 3};
        rc = kt_dag_set_body(d, out, mul(d, kt_ex_load(d, pad, 4, di), load_axes(d, wt, 4, wi)));
    }
    return finish(d, rc ? rc : add_epilogues(d, out, nchw ? 1 : 3, epi, nepi));
}

kt_dag_t *kt_ops_conv2d_nhwc(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p,
                             const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi,
               kt_ops_conv2d(KT_LAYOUT_NHWC, N, H, W, CI, CO, KH, KW, 0, p, epi_, nepi));
}

kt_dag_t *kt_ops_conv2d_nchw(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p,
                             const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi,
               kt_ops_conv2d(KT_LAYOUT_NCHW, N, H, W, CI, CO, KH, KW, 0, p, epi_, nepi));
}

kt_dag_t *kt_ops_depthwise_conv2d(kt_layout_t layout, int64_t N, int64_t H, int64_t W,
                                  int64_t C, int64_t M, int64_t KH, int64_t KW,
                                  const kt_conv2d_params_t *pp, const kt_epi_t *epi, int nepi)
{
    kt_conv2d_params_t p = pp ? *pp : kt_ops_conv2d_default();
    const int nchw = layout == KT_LAYOUT_NCHW;
    if (layout != KT_LAYOUT_NHWC && !nchw) {
        kt_err_set(KT_EINVAL, "bad layout %d", (int)layout);
        return NULL;
    }
    if (check_dim("N", N) || check_dim("H", H) || check_dim("W", W) || check_dim("C", C) ||
        check_dim("multiplier", M) || check_dim("KH", KH) || check_dim("KW", KW) ||
        check_dim("C*multiplier", C * M))
        return NULL;
    int64_t OH = 0, OW = 0;
    if (conv_out(H, W, KH, KW, &p, &OH, &OW))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sd[4], so[4];
    shape4(nchw, N, C, H, W, sd);
    shape4(nchw, N, C * M, OH, OW, so);
    int64_t sw[4] = {KH, KW, C, M};
    if (nchw) {
        int64_t b[4] = {C, M, KH, KW};
        memcpy(sw, b, sizeof(sw));
    }
    int data = kt_dag_placeholder(d, "data", 4, sd);
    if (data < 0)
        return finish(d, data);
    int pad = add_pad(d, data, nchw ? 2 : 1, &p, 0.0);
    int wt = kt_dag_placeholder(d, "weight", 4, sw);
    if (wt >= 0)
        kt_dag_set_layout_free(d, wt);
    /* axes b c i j (NCHW) or b i j c (NHWC) | di dj = 4 5 */
    static const char *const an_nhwc[] = {"b", "i", "j", "c"}, *const an_nchw[] = {"b", "c", "i", "j"};
    static const char *const rn[] = {"di", "dj"};
    int64_t rext[2] = {KH, KW};
    const char *name = nchw ? "depthwise_conv2d_nchw" : "depthwise_conv2d_nhwc";
    int out = kt_dag_compute(d, name, name, 4, so, nchw ? an_nchw : an_nhwc, 2, rext, rn,
                             KT_RED_SUM);
    if (pad < 0 || wt < 0 || out < 0)
        return finish(d, -1);
    const int ca = nchw ? 1 : 3, ha = nchw ? 2 : 1;
    /* Multiplier 1 keeps the plain indices (and so the existing keys). */
    kt_expr_t *cin = group_base(d, ca, M, 1);
    kt_expr_t *mi = M == 1 ? ci(d, 0) : kt_ex_bin(d, KT_EX_FLOORMOD, ax(d, ca), ci(d, M));
    kt_expr_t *hx = win(d, ha, p.stride[0], 4, p.dilation[0]);
    kt_expr_t *wx = win(d, ha + 1, p.stride[1], 5, p.dilation[1]);
    kt_expr_t *di[4], *wi[4];
    if (nchw) {
        kt_expr_t *a[4] = {ax(d, 0), cin, hx, wx};
        kt_expr_t *b[4] = {group_base(d, ca, M, 1), mi, ax(d, 4), ax(d, 5)};
        memcpy(di, a, sizeof(di)), memcpy(wi, b, sizeof(wi));
    } else {
        kt_expr_t *a[4] = {ax(d, 0), hx, wx, cin};
        kt_expr_t *b[4] = {ax(d, 4), ax(d, 5), group_base(d, ca, M, 1), mi};
        memcpy(di, a, sizeof(di)), memcpy(wi, b, sizeof(wi));
    }
    int rc = kt_dag_set_body(d, out, mul(d, kt_ex_load(d, pad, 4, di), kt_ex_load(d, wt, 4, wi)));
    return finish(d, rc ? rc : add_epilogues(d, out, ca, epi, nepi));
}

kt_dag_t *kt_ops_depthwise_conv2d_nhwc(int64_t N, int64_t H, int64_t W, int64_t C, int64_t KH,
                                       int64_t KW, const kt_conv2d_params_t *p,
                                       const kt_epilogue_t *epi, int nepi)
{
    WITH_KINDS(epi, nepi,
               kt_ops_depthwise_conv2d(KT_LAYOUT_NHWC, N, H, W, C, 1, KH, KW, p, epi_, nepi));
}

/* ---- Winograd conv2d ------------------------------------------------------- */

/* Cook-Toom transform matrices F(m, 3) with alpha = m + 2, built from TVM's
 * interpolation points (winograd_util: {0, -1, 1} for m = 2, {0, -1, 1, 1/2,
 * -2} for m = 4, the low-error choice of Barabasz et al.): A [alpha, m]
 * (output transform A^T M A), B [alpha, alpha] (input transform B^T d B), G
 * [alpha, 3] (kernel transform G g G^T). Every entry is a short binary
 * fraction except G's thirds, which the weight transform evaluates in double. */
static const double wino_a2[4 * 2] = {1, 0, 1, -1, 1, 1, 0, 1};
static const double wino_b2[4 * 4] = {1, 0, 0, 0, 0, -1, 1, -1, -1, 1, 1, 0, 0, 0, 0, 1};
static const double wino_g2[4 * 3] = {1, 0, 0, 0.5, -0.5, 0.5, 0.5, 0.5, 0.5, 0, 0, 1};
static const double wino_a4[6 * 4] = {
    1, 0,   0,    0,
    1, -1,  1,    -1,
    1, 1,   1,    1,
    1, 0.5, 0.25, 0.125,
    1, -2,  4,    -8,
    0, 0,   0,    1,
};
static const double wino_b4[6 * 6] = {
    1,    0,    0,   0,    0,    0,
    -1.5, 1,    -1,  -2,   0.5,  1,
    -2,   -2.5, 0.5, -1,   -1,   -1.5,
    1.5,  0.5,  2.5, 2,    -0.5, -2,
    1,    1,    1,   1,    1,    1.5,
    0,    0,    0,   0,    0,    1,
};
static const double wino_g4[6 * 3] = {
    1,          0,         0,
    -1.0 / 3,   1.0 / 3,   -1.0 / 3,
    1.0 / 3,    1.0 / 3,   1.0 / 3,
    -16.0 / 15, -8.0 / 15, -4.0 / 15,
    1.0 / 15,   -2.0 / 15, 4.0 / 15,
    0,          0,         1,
};

static int wino_tile_check(int64_t tile)
{
    if (tile != 2 && tile != 4)
        return kt_err_set(KT_EINVAL, "field 'tile_size' must be 2 or 4 (got %lld)",
                          (long long)tile);
    return KT_OK;
}

/* A constant matrix as a compute stage (TVM's const_matrix): a select chain
 * over the non-zero entries, 0 elsewhere. It has a select, so the sketch
 * rules keep it a tiny materialized table instead of inlining the chain
 * into the transform's inner loop. */
static int const_matrix(kt_dag_t *d, const char *name, int rows, int cols, const double *v)
{
    static const char *const an[] = {"i", "j"};
    const int64_t shape[2] = {rows, cols};
    int s = kt_dag_compute(d, name, "const_matrix", 2, shape, an, 0, NULL, NULL, KT_RED_NONE);
    if (s < 0)
        return s;
    kt_expr_t *e = cf(d, 0.0);
    for (int k = rows * cols - 1; k >= 0; k--) {
        if (v[k] == 0.0)
            continue;
        kt_expr_t *c = kt_ex_bin(d, KT_EX_AND, kt_ex_bin(d, KT_EX_EQ, ax(d, 0), ci(d, k / cols)),
                                 kt_ex_bin(d, KT_EX_EQ, ax(d, 1), ci(d, k % cols)));
        e = kt_ex_select(d, c, cf(d, v[k]), e);
    }
    int rc = kt_dag_set_body(d, s, e);
    return rc ? rc : s;
}

/* out[spatial] = sum over r_a, r_b of in[r_a, r_b, p, c] * M[r_a, a0] * M[r_b, a1]:
 * the two-sided transform of data_pack (M = B) and inverse (M = A). */
static int transform_stage(kt_dag_t *d, const char *name, const int64_t *shape,
                           const char *const *an, int64_t alpha, int in, int mat)
{
    static const char *const rn[] = {"r_a", "r_b"};
    const int64_t rext[2] = {alpha, alpha};
    int s = kt_dag_compute(d, name, name, 4, shape, an, 2, rext, rn, KT_RED_SUM);
    if (s < 0)
        return s;
    int ii[4] = {4, 5, 2, 3}, ma[2] = {4, 0}, mb[2] = {5, 1};
    kt_expr_t *body = mul(d, mul(d, load_axes(d, in, 4, ii), load_axes(d, mat, 2, ma)),
                          load_axes(d, mat, 2, mb));
    int rc = kt_dag_set_body(d, s, body);
    /* eps, nu (or vh, vw), r_a and r_b index the matrix: TVM's
     * auto_scheduler_simplify_const_tensor_indices */
    if (!rc)
        rc = kt_dag_set_const_axes(d, s, 0x3u | 0x30u);
    return rc ? rc : s;
}

/* Row (k = 0) or column (k = 1) of the padded input that input_tile's
 * element reads: floormod(floordiv(p, nW), nH)*m + eps or floormod(p, nW)*m
 * + nu. A new tree per call: expression nodes are not shared. */
static kt_expr_t *tile_pos(kt_dag_t *d, int k, int64_t nH, int64_t nW, int64_t m)
{
    kt_expr_t *t = k == 0 ? kt_ex_bin(d, KT_EX_FLOORMOD,
                                      kt_ex_bin(d, KT_EX_FLOORDIV, ax(d, 2), ci(d, nW)),
                                      ci(d, nH))
                          : kt_ex_bin(d, KT_EX_FLOORMOD, ax(d, 2), ci(d, nW));
    return add(d, mul(d, t, ci(d, m)), ax(d, k));
}

kt_dag_t *kt_ops_conv2d_winograd_nhwc(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                                      int64_t KH, int64_t KW, int64_t tile,
                                      const kt_conv2d_params_t *pp, const kt_epi_t *epi,
                                      int nepi)
{
    kt_conv2d_params_t p = pp ? *pp : kt_ops_conv2d_default();
    if (check_dim("N", N) || check_dim("H", H) || check_dim("W", W) || check_dim("CI", CI) ||
        check_dim("CO", CO) || wino_tile_check(tile) || check_params(&p))
        return NULL;
    if (KH != 3 || KW != 3) {
        kt_err_set(KT_EINVAL, "field '%s' must be 3 for a Winograd convolution (got %lld)",
                   KH != 3 ? "KH" : "KW", (long long)(KH != 3 ? KH : KW));
        return NULL;
    }
    if (p.stride[0] != 1 || p.stride[1] != 1) {
        kt_err_set(KT_EINVAL, "field 'stride' must be [1, 1] for a Winograd convolution");
        return NULL;
    }
    if (p.dilation[0] != 1 || p.dilation[1] != 1) {
        kt_err_set(KT_EINVAL, "field 'dilation' must be [1, 1] for a Winograd convolution");
        return NULL;
    }
    int64_t OH = 0, OW = 0;
    if (conv_out(H, W, KH, KW, &p, &OH, &OW))
        return NULL;
    const int64_t m = tile, alpha = tile + 2;
    const int64_t nH = (OH + m - 1) / m, nW = (OW + m - 1) / m, P = N * nH * nW;
    if (check_dim("N*tiles", P))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sd[4] = {N, H, W, CI};
    int data = kt_dag_placeholder(d, "data", 4, sd);
    if (data < 0)
        return finish(d, data);
    /* input_tile(eps, nu, p, ci) = the padded input at row th*m + eps and
     * column tw*m + nu of tile p = (tn, th, tw): one stage that pads as it
     * gathers (zeros outside the input, including where the last tiles
     * overhang the output), so it keeps a select, is not always-inlined and
     * data_pack reads it with affine indices (the tile decomposition's
     * divisions in data_pack's inner loop keep GCC from vectorizing it). */
    static const char *const tan[] = {"eps", "nu", "p", "ci"};
    int64_t ts[4] = {alpha, alpha, P, CI};
    int itile = kt_dag_compute(d, "input_tile", "input_tile", 4, ts, tan, 0, NULL, NULL,
                               KT_RED_NONE);
    if (itile < 0)
        return finish(d, itile);
    {
        const int64_t lo[2] = {p.pad[0], p.pad[1]}, ext[2] = {H, W}, nt[2] = {nH, nW};
        kt_expr_t *tn = kt_ex_bin(d, KT_EX_FLOORDIV, ax(d, 2), ci(d, nH * nW));
        kt_expr_t *idx[4] = {tn, NULL, NULL, ax(d, 3)}, *cond = NULL;
        for (int k = 0; k < 2; k++) {
            kt_expr_t *terms[2] = {NULL, NULL};
            if (lo[k] > 0)
                terms[0] = kt_ex_bin(d, KT_EX_GE, tile_pos(d, k, nH, nW, m), ci(d, lo[k]));
            if ((nt[k] - 1) * m + alpha > lo[k] + ext[k])
                terms[1] = kt_ex_bin(d, KT_EX_LT, tile_pos(d, k, nH, nW, m),
                                     ci(d, lo[k] + ext[k]));
            for (int q = 0; q < 2; q++)
                if (terms[q])
                    cond = cond ? kt_ex_bin(d, KT_EX_AND, cond, terms[q]) : terms[q];
            kt_expr_t *pos = tile_pos(d, k, nH, nW, m);
            idx[1 + k] = lo[k] > 0 ? sub(d, pos, ci(d, lo[k])) : pos;
            /* Clamped so the bounds check of kt_dag_finalize, which cannot
             * read this compound guard, sees an index inside the input. */
            if (terms[0] || terms[1])
                idx[1 + k] = kt_ex_bin(d, KT_EX_MAX,
                                       kt_ex_bin(d, KT_EX_MIN, idx[1 + k], ci(d, ext[k] - 1)),
                                       ci(d, 0));
        }
        kt_expr_t *v = kt_ex_load(d, data, 4, idx);
        int rc = kt_dag_set_body(d, itile, cond ? kt_ex_select(d, cond, v, cf(d, 0.0)) : v);
        if (rc)
            return finish(d, rc);
    }
    int bm = const_matrix(d, "B", (int)alpha, (int)alpha, m == 2 ? wino_b2 : wino_b4);
    if (bm < 0)
        return finish(d, bm);
    int pack = transform_stage(d, "data_pack", ts, tan, alpha, itile, bm);
    int64_t sw[4] = {alpha, alpha, CI, CO};
    int wt = kt_dag_placeholder(d, "weight", 4, sw);
    if (pack < 0 || wt < 0)
        return finish(d, -1);
    kt_dag_set_layout_free(d, wt);
    /* bgemm(eps, nu, p, co) = sum over ci of data_pack[eps, nu, p, ci] * weight[eps, nu, ci, co] */
    static const char *const gan[] = {"eps", "nu", "p", "co"}, *const grn[] = {"ci"};
    int64_t gs[4] = {alpha, alpha, P, CO};
    int gemm = kt_dag_compute(d, "bgemm", "bgemm", 4, gs, gan, 1, &CI, grn, KT_RED_SUM);
    if (gemm < 0)
        return finish(d, gemm);
    int ia[4] = {0, 1, 2, 4}, ib[4] = {0, 1, 4, 3};
    int rc = kt_dag_set_body(d, gemm, mul(d, load_axes(d, pack, 4, ia), load_axes(d, wt, 4, ib)));
    if (rc)
        return finish(d, rc);
    int am = const_matrix(d, "A", (int)alpha, (int)m, m == 2 ? wino_a2 : wino_a4);
    if (am < 0)
        return finish(d, am);
    static const char *const van[] = {"vh", "vw", "p", "co"};
    int64_t vs[4] = {m, m, P, CO};
    int inv = transform_stage(d, "inverse", vs, van, alpha, gemm, am);
    if (inv < 0)
        return finish(d, inv);
    /* conv2d_winograd(n, h, w, co) = inverse[h % m, w % m, tile of (n, h, w), co] */
    static const char *const oan[] = {"nn", "yy", "xx", "ff"};
    int64_t so[4] = {N, OH, OW, CO};
    int out = kt_dag_compute(d, "conv2d_winograd", "conv2d_winograd_nhwc", 4, so, oan, 0, NULL,
                             NULL, KT_RED_NONE);
    if (out < 0)
        return finish(d, out);
    kt_expr_t *tile_of = add(d, add(d, mul(d, ax(d, 0), ci(d, nH * nW)),
                                    mul(d, kt_ex_bin(d, KT_EX_FLOORDIV, ax(d, 1), ci(d, m)),
                                        ci(d, nW))),
                             kt_ex_bin(d, KT_EX_FLOORDIV, ax(d, 2), ci(d, m)));
    kt_expr_t *oi[4] = {kt_ex_bin(d, KT_EX_FLOORMOD, ax(d, 1), ci(d, m)),
                        kt_ex_bin(d, KT_EX_FLOORMOD, ax(d, 2), ci(d, m)), tile_of, ax(d, 3)};
    rc = kt_dag_set_body(d, out, kt_ex_load(d, inv, 4, oi));
    return finish(d, rc ? rc : add_epilogues(d, out, 3, epi, nepi));
}

int kt_ops_winograd_weight(int64_t tile, int64_t CI, int64_t CO, const float *w, float *out)
{
    if (wino_tile_check(tile) || check_dim("CI", CI) || check_dim("CO", CO))
        return KT_EINVAL;
    if (!w || !out)
        return kt_err_set(KT_EINVAL, "winograd weight: no input or output buffer");
    const int64_t alpha = tile + 2;
    const double *g = tile == 2 ? wino_g2 : wino_g4;
    for (int64_t e = 0; e < alpha; e++)
        for (int64_t u = 0; u < alpha; u++)
            for (int64_t c = 0; c < CI; c++)
                for (int64_t o = 0; o < CO; o++) {
                    double acc = 0.0;
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++)
                            acc += g[e * 3 + kh] * g[u * 3 + kw] *
                                   (double)w[((kh * 3 + kw) * CI + c) * CO + o];
                    out[((e * alpha + u) * CI + c) * CO + o] = (float)acc;
                }
    return KT_OK;
}

/* Elements of a pool window inside the input along one axis:
 * min(o*s - plo + k, in) - max(o*s - plo, 0). */
static kt_expr_t *inside(kt_dag_t *d, int axis, int64_t s, int64_t plo, int64_t k, int64_t in)
{
    kt_expr_t *start = sub(d, scaled(d, axis, s), ci(d, plo));
    kt_expr_t *start2 = sub(d, scaled(d, axis, s), ci(d, plo));
    kt_expr_t *end = kt_ex_bin(d, KT_EX_MIN, add(d, start, ci(d, k)), ci(d, in));
    return sub(d, end, kt_ex_bin(d, KT_EX_MAX, start2, ci(d, 0)));
}

kt_dag_t *kt_ops_pool2d(kt_layout_t layout, kt_pool_kind_t kind, int64_t N, int64_t H,
                        int64_t W, int64_t C, int64_t KH, int64_t KW,
                        const kt_conv2d_params_t *pp, const kt_epi_t *epi, int nepi)
{
    kt_conv2d_params_t p = pp ? *pp : kt_ops_conv2d_default();
    const int nchw = layout == KT_LAYOUT_NCHW;
    if (layout != KT_LAYOUT_NHWC && !nchw) {
        kt_err_set(KT_EINVAL, "bad layout %d", (int)layout);
        return NULL;
    }
    if (kind != KT_POOL_MAX && kind != KT_POOL_AVG && kind != KT_POOL_AVG_PAD) {
        kt_err_set(KT_EINVAL, "field 'kind' must be \"max\" or \"avg\"");
        return NULL;
    }
    if (check_dim("N", N) || check_dim("H", H) || check_dim("W", W) || check_dim("C", C) ||
        check_dim("KH", KH) || check_dim("KW", KW) || check_params(&p))
        return NULL;
    if (p.dilation[0] != 1 || p.dilation[1] != 1) {
        kt_err_set(KT_EINVAL, "field 'dilation' is not supported by pool2d");
        return NULL;
    }
    if (p.pad[0] >= KH || p.pad[2] >= KH || p.pad[1] >= KW || p.pad[3] >= KW) {
        kt_err_set(KT_EINVAL, "field 'padding' must be smaller than the window (KH, KW)");
        return NULL;
    }
    int64_t OH = 0, OW = 0;
    if (window_out("H", "KH", H, p.pad[0], p.pad[2], KH, p.stride[0], 1, &OH) ||
        window_out("W", "KW", W, p.pad[1], p.pad[3], KW, p.stride[1], 1, &OW))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sd[4], so[4];
    shape4(nchw, N, C, H, W, sd);
    shape4(nchw, N, C, OH, OW, so);
    const int ha = nchw ? 2 : 1, ca = nchw ? 1 : 3;
    int data = kt_dag_placeholder(d, "data", 4, sd);
    if (data < 0)
        return finish(d, data);
    int pad = add_pad(d, data, ha, &p, kind == KT_POOL_MAX ? -INFINITY : 0.0);
    static const char *const rn[] = {"rv0", "rv1"};
    int64_t rext[2] = {KH, KW};
    int red = kt_dag_compute(d, kind == KT_POOL_MAX ? "pool_max" : "pool_sum",
                             kind == KT_POOL_MAX ? "pool_max" : "pool_sum", 4, so, ax4, 2, rext,
                             rn, kind == KT_POOL_MAX ? KT_RED_MAX : KT_RED_SUM);
    if (pad < 0 || red < 0)
        return finish(d, -1);
    /* axes ax0..ax3 | rv0 rv1 = 0..3 | 4 5 */
    kt_expr_t *di[4] = {ax(d, 0), ax(d, 1), ax(d, 2), ax(d, 3)};
    di[ha] = win(d, ha, p.stride[0], 4, 1);
    di[ha + 1] = win(d, ha + 1, p.stride[1], 5, 1);
    int rc = kt_dag_set_body(d, red, kt_ex_load(d, pad, 4, di));
    if (rc)
        return finish(d, rc);
    int last = red;
    if (kind != KT_POOL_MAX) {
        last = kt_dag_compute(d, "pool_avg", "pool_avg", 4, so, ax4, 0, NULL, NULL, KT_RED_NONE);
        if (last < 0)
            return finish(d, last);
        kt_expr_t *count;
        if (kind == KT_POOL_AVG_PAD ||
            (p.pad[0] == 0 && p.pad[1] == 0 && p.pad[2] == 0 && p.pad[3] == 0))
            count = cf(d, (double)(KH * KW));   /* padding counts, or there is none */
        else
            count = kt_ex_cast(d, KT_DT_F32,
                               mul(d, inside(d, ha, p.stride[0], p.pad[0], KH, H),
                                   inside(d, ha + 1, p.stride[1], p.pad[1], KW, W)));
        rc = kt_dag_set_body(d, last, div_f(d, load_identity(d, red, 4), count));
        if (rc)
            return finish(d, rc);
    }
    return finish(d, add_epilogues(d, last, ca, epi, nepi));
}

kt_dag_t *kt_ops_pool2d_nhwc(kt_pool_kind_t kind, int64_t N, int64_t H, int64_t W, int64_t C,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p)
{
    return kt_ops_pool2d(KT_LAYOUT_NHWC, kind, N, H, W, C, KH, KW, p, NULL, 0);
}

kt_dag_t *kt_ops_global_avg_pool(kt_layout_t layout, int64_t N, int64_t H, int64_t W, int64_t C,
                                 const kt_epi_t *epi, int nepi)
{
    const int nchw = layout == KT_LAYOUT_NCHW;
    if (layout != KT_LAYOUT_NHWC && !nchw) {
        kt_err_set(KT_EINVAL, "bad layout %d", (int)layout);
        return NULL;
    }
    if (check_dim("N", N) || check_dim("H", H) || check_dim("W", W) || check_dim("C", C))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int64_t sd[4], so[4], rext[2] = {H, W};
    shape4(nchw, N, C, H, W, sd);
    shape4(nchw, N, C, 1, 1, so);
    int data = kt_dag_placeholder(d, "data", 4, sd);
    static const char *const rn[] = {"rv0", "rv1"};
    int sum = kt_dag_compute(d, "adaptive_pool_sum", "global_pool_sum", 4, so, ax4, 2, rext, rn,
                             KT_RED_SUM);
    int avg = kt_dag_compute(d, "adaptive_pool_avg", "global_pool_avg", 4, so, ax4, 0, NULL, NULL,
                             KT_RED_NONE);
    if (data < 0 || sum < 0 || avg < 0)
        return finish(d, -1);
    int di_nhwc[4] = {0, 4, 5, 3}, di_nchw[4] = {0, 1, 4, 5};
    int rc = kt_dag_set_body(d, sum, load_axes(d, data, 4, nchw ? di_nchw : di_nhwc));
    if (!rc)
        rc = kt_dag_set_body(d, avg, div_f(d, load_identity(d, sum, 4), cf(d, (double)(H * W))));
    return finish(d, rc ? rc : add_epilogues(d, avg, nchw ? 1 : 3, epi, nepi));
}

kt_dag_t *kt_ops_global_avg_pool_nhwc(int64_t N, int64_t H, int64_t W, int64_t C)
{
    return kt_ops_global_avg_pool(KT_LAYOUT_NHWC, N, H, W, C, NULL, 0);
}

/* ---- normalizations over the last axis ------------------------------------- */

static const char *const in_names[] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};

static int check_shape(int ndim, const int64_t *shape)
{
    if (ndim < 2 || ndim > KT_TE_MAX_DIMS || !shape)
        return kt_err_set(KT_EINVAL, "field 'shape' must have 2..%d dimensions", KT_TE_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1 || shape[i] > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "field 'shape' must hold values in 1..%lld",
                              (long long)KT_TE_MAX_EXTENT);
    return KT_OK;
}

/* Load of a rank-n tensor at the row axes 0..n-2 and `last` (an axis number). */
static kt_expr_t *load_row(kt_dag_t *d, int tensor, int n, int last)
{
    int axes[KT_TE_MAX_DIMS] = {0};
    for (int i = 0; i < n - 1; i++)
        axes[i] = i;
    axes[n - 1] = last;
    return load_axes(d, tensor, n, axes);
}

kt_dag_t *kt_ops_softmax(int ndim, const int64_t *shape)
{
    if (check_shape(ndim, shape))
        return NULL;
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int n = ndim, r = ndim - 1;   /* the reduce axis's number in a rank n-1 stage */
    const int64_t D = shape[n - 1];
    static const char *const kn[] = {"k"};
    int x = kt_dag_placeholder(d, "data", n, shape);
    int mx = kt_dag_compute(d, "T_softmax_maxelem", "softmax_max", n - 1, shape, in_names, 1, &D,
                            kn, KT_RED_MAX);
    int ex = kt_dag_compute(d, "T_softmax_exp", "softmax_exp", n, shape, in_names, 0, NULL, NULL,
                            KT_RED_NONE);
    int sm = kt_dag_compute(d, "T_softmax_expsum", "softmax_sum", n - 1, shape, in_names, 1, &D,
                            kn, KT_RED_SUM);
    int no = kt_dag_compute(d, "T_softmax_norm", "softmax_norm", n, shape, in_names, 0, NULL,
                            NULL, KT_RED_NONE);
    if (x < 0 || mx < 0 || ex < 0 || sm < 0 || no < 0)
        return finish(d, -1);
    int rc = kt_dag_set_body(d, mx, load_row(d, x, n, r));
    if (!rc)
        rc = kt_dag_set_body(d, ex, kt_ex_call(d, KT_FN_EXP,
                                               sub(d, load_identity(d, x, n),
                                                   load_identity(d, mx, n - 1))));
    if (!rc)
        rc = kt_dag_set_body(d, sm, load_row(d, ex, n, n - 1));
    if (!rc)
        rc = kt_dag_set_body(d, no, div_f(d, load_identity(d, ex, n), load_identity(d, sm, n - 1)));
    return finish(d, rc);
}

kt_dag_t *kt_ops_layer_norm(int ndim, const int64_t *shape, int affine)
{
    return kt_ops_layer_norm_eps(ndim, shape, affine, KT_OPS_LN_EPS);
}

kt_dag_t *kt_ops_layer_norm_eps(int ndim, const int64_t *shape, int affine, double eps)
{
    if (check_shape(ndim, shape))
        return NULL;
    if (!(eps > 0 && eps < 1)) {
        kt_err_set(KT_EINVAL, "layer norm epsilon must be in (0, 1) (got %g)", eps);
        return NULL;
    }
    kt_dag_t *d = kt_dag_new();
    if (!d)
        return NULL;
    int n = ndim;
    const int64_t D = shape[n - 1];
    const double fD = (double)D;
    static const char *const kn[] = {"k"};
    int x = kt_dag_placeholder(d, "data", n, shape);
    int mean = kt_dag_compute(d, "T_ln_mean", "layer_norm_mean", n - 1, shape, in_names, 1, &D,
                              kn, KT_RED_SUM);
    int var = kt_dag_compute(d, "T_ln_var", "layer_norm_var", n - 1, shape, in_names, 1, &D, kn,
                             KT_RED_SUM);
    int gamma = -1, beta = -1;
    if (affine) {
        gamma = kt_dag_placeholder(d, "gamma", 1, &D);
        beta = kt_dag_placeholder(d, "beta", 1, &D);
    }
    int out = kt_dag_compute(d, "T_layer_norm", "layer_norm", n, shape, in_names, 0, NULL, NULL,
                             KT_RED_NONE);
    if (x < 0 || mean < 0 || var < 0 || out < 0 || (affine && (gamma < 0 || beta < 0)))
        return finish(d, -1);
    /* Rank n-1 stages: axes 0..n-2 spatial, n-1 the reduce axis k. */
    int rc = kt_dag_set_body(d, mean, div_f(d, load_row(d, x, n, n - 1), cf(d, fD)));
    if (!rc) {
        kt_expr_t *dev1 = sub(d, load_row(d, x, n, n - 1), load_identity(d, mean, n - 1));
        kt_expr_t *dev2 = sub(d, load_row(d, x, n, n - 1), load_identity(d, mean, n - 1));
        rc = kt_dag_set_body(d, var, div_f(d, mul(d, dev1, dev2), cf(d, fD)));
    }
    if (!rc) {
        kt_expr_t *norm = mul(d, sub(d, load_identity(d, x, n), load_identity(d, mean, n - 1)),
                              kt_ex_call(d, KT_FN_RSQRT, add(d, load_identity(d, var, n - 1),
                                                             cf(d, eps))));
        if (affine) {
            int last = n - 1;
            norm = add(d, mul(d, norm, load_axes(d, gamma, 1, &last)),
                       load_axes(d, beta, 1, &last));
        }
        rc = kt_dag_set_body(d, out, norm);
    }
    return finish(d, rc);
}
