/* Reference operators: the float and double instances, shape inference and names (refop.h). */
#include "refop.h"

#include <math.h>
#include <string.h>

#include "util/err.h"

#define KT_RT float
#define KT_RF(n) kt_refop_##n##_f
#define KT_RM(fn) fn##f
#include "refop_impl.h"
#undef KT_RT
#undef KT_RF
#undef KT_RM

#define KT_RT double
#define KT_RF(n) kt_refop_##n##_d
#define KT_RM(fn) fn
#include "refop_impl.h"
#undef KT_RT
#undef KT_RF
#undef KT_RM

/* The numpy broadcast of inputs [0, n) into the output shape. */
static int broadcast(kt_refop_t *r, int n)
{
    int nd = 0;
    for (int k = 0; k < n; k++)
        nd = r->ndim[k] > nd ? r->ndim[k] : nd;
    r->ondim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t v = 1;
        for (int k = 0; k < n; k++) {
            int at = d - (nd - r->ndim[k]);
            int64_t x = at >= 0 ? r->din[k][at] : 1;
            if (x != 1 && v != 1 && x != v)
                return kt_err_set(KT_EINVAL, "shapes do not broadcast (axis %d: %lld against "
                                  "%lld)", d, (long long)v, (long long)x);
            if (x != 1)
                v = x;
        }
        r->dout[d] = v;
    }
    return KT_OK;
}

/* Whether a shape's dimensions are >= 1 (>= 0 when `empty_ok`) and its size
 * at most KT_REFOP_MAX_NUMEL, computed without overflow. */
static int shape_ok(int nd, const int64_t *d, int empty_ok)
{
    int64_t n = 1;
    if (nd < 0 || nd > KT_REFOP_MAX_DIMS)
        return 0;
    for (int k = 0; k < nd; k++) {
        if (d[k] < (empty_ok ? 0 : 1) || __builtin_mul_overflow(n, d[k], &n) ||
            n > KT_REFOP_MAX_NUMEL)
            return 0;
    }
    return 1;
}

static int infer_op(kt_refop_t *r);

int kt_refop_infer(kt_refop_t *r)
{
    for (int k = 0; r->nin >= 0 && k < r->nin && k < KT_REFOP_MAX_IN; k++)
        if (!shape_ok(r->ndim[k], r->din[k], 0))
            return kt_err_set(KT_EINVAL, "input %d: a shape of rank %d with an empty, unknown "
                              "or too large dimension (at most %lld elements)", k, r->ndim[k],
                              (long long)KT_REFOP_MAX_NUMEL);
    int rc = infer_op(r);
    if (rc == KT_OK && !shape_ok(r->ondim, r->dout, r->op == KT_REFOP_RANGE))
        return kt_err_set(KT_EINVAL, "the result would have an empty or too large shape (at "
                          "most %lld elements)", (long long)KT_REFOP_MAX_NUMEL);
    return rc;
}

static int infer_op(kt_refop_t *r)
{
    static const int nin[KT_REFOP__COUNT] = {
        [KT_REFOP_UNARY] = 1, [KT_REFOP_BINARY] = 2, [KT_REFOP_WHERE] = 3, [KT_REFOP_VIEW] = 1,
        [KT_REFOP_PAD] = 1, [KT_REFOP_GATHER] = 2, [KT_REFOP_REDUCE] = 1, [KT_REFOP_SOFTMAX] = 1,
        [KT_REFOP_TRILU] = 1, [KT_REFOP_RANGE] = 0, [KT_REFOP_SCATTER_ND] = 3,
    };
    if (r->op < 1 || r->op >= KT_REFOP__COUNT)
        return kt_err_set(KT_EINVAL, "reference operator %d does not exist", r->op);
    if (r->nin != nin[r->op])
        return kt_err_set(KT_EINVAL, "reference operator %d takes %d inputs, not %d", r->op,
                          nin[r->op], r->nin);
    for (int k = 0; k < r->nin; k++) {
        if (r->ndim[k] < 0 || r->ndim[k] > KT_REFOP_MAX_DIMS)
            return kt_err_set(KT_EINVAL, "input %d has rank %d (0 to %d)", k, r->ndim[k],
                              KT_REFOP_MAX_DIMS);
        for (int d = 0; d < r->ndim[k]; d++)
            if (r->din[k][d] < 1)
                return kt_err_set(KT_EINVAL, "input %d has an empty or unknown dimension", k);
    }
    int nd = r->nin ? r->ndim[0] : 0;
    switch (r->op) {
    case KT_REFOP_UNARY:
        if (r->ia[0] < 0 || r->ia[0] >= KT_RU__COUNT)
            return kt_err_set(KT_EINVAL, "unary code %lld does not exist", (long long)r->ia[0]);
        return broadcast(r, 1);
    case KT_REFOP_BINARY:
        if (r->ia[0] < 0 || r->ia[0] >= KT_RB__COUNT)
            return kt_err_set(KT_EINVAL, "binary code %lld does not exist", (long long)r->ia[0]);
        return broadcast(r, 2);
    case KT_REFOP_WHERE:
        return broadcast(r, 3);
    case KT_REFOP_VIEW: {
        /* The caller sets the output shape; every index it can form must
         * land inside the input. */
        int64_t lo = r->ia[0], hi = r->ia[0], n = kt_refop_numel(nd, r->din[0]);
        if (r->ondim < 0 || r->ondim > KT_REFOP_MAX_DIMS)
            return kt_err_set(KT_EINVAL, "a view of rank %d", r->ondim);
        if (!shape_ok(r->ondim, r->dout, 0))
            return kt_err_set(KT_EINVAL, "a view of an empty or too large shape");
        for (int d = 0; d < r->ondim; d++) {
            int64_t m = r->ia[1 + KT_REFOP_MAX_DIMS + d], span, step;
            if (m < 0)
                return kt_err_set(KT_EINVAL, "a view with a negative period");
            span = ((m > 0 && m < r->dout[d]) ? m : r->dout[d]) - 1;
            if (__builtin_mul_overflow(span, r->ia[1 + d], &step) ||
                __builtin_add_overflow(step > 0 ? hi : lo, step, step > 0 ? &hi : &lo))
                return kt_err_set(KT_EINVAL, "a view's offsets overflow");
        }
        if (lo < 0 || hi >= n)
            return kt_err_set(KT_EINVAL, "a view reads outside its input (%lld to %lld of %lld)",
                              (long long)lo, (long long)hi, (long long)n);
        return KT_OK;
    }
    case KT_REFOP_PAD:
        r->ondim = nd;
        if (r->ia[0] < KT_RP_CONSTANT || r->ia[0] > KT_RP_WRAP)
            return kt_err_set(KT_EINVAL, "pad mode %lld does not exist", (long long)r->ia[0]);
        for (int d = 0; d < nd; d++)
            if (r->ia[1 + d] < -KT_REFOP_MAX_NUMEL || r->ia[1 + d] > KT_REFOP_MAX_NUMEL ||
                __builtin_add_overflow(r->din[0][d], r->ia[1 + d], &r->dout[d]) ||
                __builtin_add_overflow(r->dout[d], r->ia[1 + KT_REFOP_MAX_DIMS + d], &r->dout[d]) ||
                r->dout[d] < 1)
                return kt_err_set(KT_EINVAL, "padding leaves axis %d empty or overflows", d);
        return KT_OK;
    case KT_REFOP_GATHER: {
        int axis = (int)r->ia[0];
        if (axis < 0 || axis >= nd)
            return kt_err_set(KT_EINVAL, "gather axis %d of a rank-%d tensor", axis, nd);
        if (nd - 1 + r->ndim[1] > KT_REFOP_MAX_DIMS)
            return kt_err_set(KT_EINVAL, "a gather result of rank > %d", KT_REFOP_MAX_DIMS);
        r->ondim = 0;
        for (int d = 0; d < axis; d++)
            r->dout[r->ondim++] = r->din[0][d];
        for (int d = 0; d < r->ndim[1]; d++)
            r->dout[r->ondim++] = r->din[1][d];
        for (int d = axis + 1; d < nd; d++)
            r->dout[r->ondim++] = r->din[0][d];
        return KT_OK;
    }
    case KT_REFOP_REDUCE:
        if (r->ia[0] < 0 || r->ia[0] >= KT_RR__COUNT)
            return kt_err_set(KT_EINVAL, "reduce code %lld does not exist", (long long)r->ia[0]);
        if (r->ia[1] < 0 || r->ia[1] >= (1LL << nd))
            return kt_err_set(KT_EINVAL, "reduced axes outside a rank-%d tensor", nd);
        r->ondim = nd;   /* keepdims; the caller's reshape drops them */
        for (int d = 0; d < nd; d++)
            r->dout[d] = r->ia[1] >> d & 1 ? 1 : r->din[0][d];
        return KT_OK;
    case KT_REFOP_SOFTMAX:
        if (r->ia[0] < 0 || r->ia[0] >= r->ia[1] || r->ia[1] > nd)
            return kt_err_set(KT_EINVAL, "softmax over axes %lld to %lld of a rank-%d tensor",
                              (long long)r->ia[0], (long long)r->ia[1], nd);
        return broadcast(r, 1);
    case KT_REFOP_TRILU:
        if (nd < 2)
            return kt_err_set(KT_EINVAL, "trilu needs rank >= 2");
        return broadcast(r, 1);
    case KT_REFOP_RANGE:
        /* The caller sets the length, max(ceil((limit - start) / delta), 0). */
        if (r->ondim != 1 || r->dout[0] < 0)
            return kt_err_set(KT_EINVAL, "a range needs its length");
        return KT_OK;
    case KT_REFOP_SCATTER_ND: {
        /* updates: indices' shape without its last axis, then data's axes from k on */
        int ni = r->ndim[1];
        int64_t k = ni ? r->din[1][ni - 1] : 0;
        if (ni < 1 || k < 1 || k > nd)
            return kt_err_set(KT_EINVAL, "ScatterND indices of shape [..., %lld] for data of "
                              "rank %d", (long long)k, nd);
        int want = ni - 1 + nd - (int)k, ok = r->ndim[2] == want;
        for (int d = 0; ok && d < ni - 1; d++)
            ok = r->din[2][d] == r->din[1][d];
        for (int d = 0; ok && d < nd - k; d++)
            ok = r->din[2][ni - 1 + d] == r->din[0][k + d];
        if (!ok)
            return kt_err_set(KT_EINVAL, "ScatterND updates do not match the indices and data");
        return broadcast(r, 1);
    }
    default:
        return kt_err_set(KT_EINVAL, "reference operator %d does not exist", r->op);
    }
}
