/*
 * The reference operators' loops, written once for an element type: the
 * includer defines KT_RT (the type), KT_RF(name) (the instance's name of a
 * function: KT_RF(run) is kt_refop_run_f or _d) and KT_RM(f) (the math function of that type: expf or exp),
 * then includes this file. refop.c makes the float and double instances;
 * the generated network library makes the float one from the embedded text.
 * Needs <math.h>, <string.h> and refop.h before it.
 */

/* Row-major strides of a shape. */
static void KT_RF(strides)(int nd, const int64_t *d, int64_t *s)
{
    int64_t acc = 1;
    for (int k = nd - 1; k >= 0; k--) {
        s[k] = acc;
        acc *= d[k];
    }
}

/* Strides of input k read at the output's index (0 where it broadcasts). */
static void KT_RF(bstrides)(const kt_refop_t *r, int k, int64_t *s)
{
    int64_t own[KT_REFOP_MAX_DIMS];
    int nd = r->ndim[k], off = r->ondim - nd;
    KT_RF(strides)(nd, r->din[k], own);
    for (int d = 0; d < r->ondim; d++)
        s[d] = d < off || r->din[k][d - off] == 1 ? 0 : own[d - off];
}

static KT_RT KT_RF(unary)(int code, KT_RT x, double p0, double p1)
{
    const KT_RT zero = 0, one = 1;
    switch (code) {
    case KT_RU_IDENTITY: return x;
    case KT_RU_RELU: return x > zero ? x : zero;
    case KT_RU_GELU: return (KT_RT)0.5 * x * (one + KT_RM(erf)(x * (KT_RT)0.70710678118654752440));
    case KT_RU_GELU_TANH:
        return (KT_RT)0.5 * x *
               (one + KT_RM(tanh)((KT_RT)0.79788456080286535588 * (x + (KT_RT)0.044715 * x * x * x)));
    case KT_RU_SIGMOID: return one / (one + KT_RM(exp)(-x));
    case KT_RU_SILU: return x / (one + KT_RM(exp)(-x));
    case KT_RU_TANH: return KT_RM(tanh)(x);
    case KT_RU_CLIP: return x < (KT_RT)p0 ? (KT_RT)p0 : x > (KT_RT)p1 ? (KT_RT)p1 : x;
    case KT_RU_HARDSIGMOID: {
        KT_RT v = (KT_RT)p0 * x + (KT_RT)p1;
        return v < zero ? zero : v > one ? one : v;
    }
    case KT_RU_HARDSWISH: {
        KT_RT v = x / (KT_RT)6 + (KT_RT)0.5;
        return x * (v < zero ? zero : v > one ? one : v);
    }
    case KT_RU_ERF: return KT_RM(erf)(x);
    case KT_RU_EXP: return KT_RM(exp)(x);
    case KT_RU_LOG: return KT_RM(log)(x);
    case KT_RU_SQRT: return KT_RM(sqrt)(x);
    case KT_RU_RECIPROCAL: return one / x;
    case KT_RU_NEG: return -x;
    case KT_RU_ABS: return KT_RM(fabs)(x);
    case KT_RU_SOFTPLUS: return x > (KT_RT)20 ? x : KT_RM(log1p)(KT_RM(exp)(x));
    case KT_RU_SOFTSIGN: return x / (one + KT_RM(fabs)(x));
    case KT_RU_LEAKYRELU: return x < zero ? (KT_RT)p0 * x : x;
    case KT_RU_ELU: return x < zero ? (KT_RT)p0 * (KT_RM(exp)(x) - one) : x;
    case KT_RU_SELU: return (KT_RT)p1 * (x <= zero ? (KT_RT)p0 * (KT_RM(exp)(x) - one) : x);
    case KT_RU_CELU: {
        KT_RT e = (KT_RT)p0 * (KT_RM(exp)(x / (KT_RT)p0) - one);
        return (x > zero ? x : zero) + (e < zero ? e : zero);
    }
    case KT_RU_THRESHOLDEDRELU: return x > (KT_RT)p0 ? x : zero;
    case KT_RU_FLOOR: return KT_RM(floor)(x);
    case KT_RU_CEIL: return KT_RM(ceil)(x);
    case KT_RU_ROUND: return KT_RM(nearbyint)(x);   /* half to even, as ONNX */
    case KT_RU_SIN: return KT_RM(sin)(x);
    case KT_RU_COS: return KT_RM(cos)(x);
    case KT_RU_SIGN: return x > zero ? one : x < zero ? -one : zero;
    case KT_RU_MISH: {
        KT_RT sp = x > (KT_RT)20 ? x : KT_RM(log1p)(KT_RM(exp)(x));
        return x * KT_RM(tanh)(sp);
    }
    case KT_RU_NOT: return x == zero ? one : zero;
    case KT_RU_TRUNC: return KT_RM(trunc)(x);
    case KT_RU_BOOL: return x != zero ? one : zero;
    case KT_RU_ISNAN: return x != x ? one : zero;
    case KT_RU_ISINF: return KT_RM(fabs)(x) == (KT_RT)INFINITY ? one : zero;
    default: return x;
    }
}

static KT_RT KT_RF(binary)(int code, KT_RT x, KT_RT y)
{
    const KT_RT zero = 0, one = 1;
    switch (code) {
    case KT_RB_ADD: return x + y;
    case KT_RB_SUB: return x - y;
    case KT_RB_MUL: return x * y;
    case KT_RB_DIV: return x / y;
    case KT_RB_POW:
        /* x * x for the LayerNorm variance exporters write as Pow(x, 2). */
        return y == (KT_RT)2 ? x * x : KT_RM(pow)(x, y);
    case KT_RB_MAX: return x > y || y != y ? (x != x ? x : (x > y ? x : y)) : y;
    case KT_RB_MIN: return x < y || y != y ? (x != x ? x : (x < y ? x : y)) : y;
    case KT_RB_MOD: {
        KT_RT m = KT_RM(fmod)(x, y);
        return m != zero && ((m < zero) != (y < zero)) ? m + y : m;
    }
    case KT_RB_FMOD: return KT_RM(fmod)(x, y);
    case KT_RB_EQUAL: return x == y ? one : zero;
    case KT_RB_LESS: return x < y ? one : zero;
    case KT_RB_GREATER: return x > y ? one : zero;
    case KT_RB_LESS_EQUAL: return x <= y ? one : zero;
    case KT_RB_GREATER_EQUAL: return x >= y ? one : zero;
    case KT_RB_AND: return x != zero && y != zero ? one : zero;
    case KT_RB_OR: return x != zero || y != zero ? one : zero;
    case KT_RB_XOR: return (x != zero) != (y != zero) ? one : zero;
    case KT_RB_PRELU: return x < zero ? x * y : x;
    case KT_RB_IDIV: return y == zero ? zero : KT_RM(floor)(x / y);
    default: return x;
    }
}

/* The output's index of row `row` (every axis but the last) and the
 * offsets of each input there. */
static void KT_RF(row_offsets)(const kt_refop_t *r, int64_t row, int n,
                               int64_t st[][KT_REFOP_MAX_DIMS], int64_t *off)
{
    for (int k = 0; k < n; k++)
        off[k] = 0;
    for (int d = r->ondim - 2; d >= 0; d--) {
        int64_t q = row % r->dout[d];
        row /= r->dout[d];
        for (int k = 0; k < n; k++)
            off[k] += q * st[k][d];
    }
}

/* Elementwise operators: unary, binary and Where over broadcast inputs. */
static void KT_RF(elementwise)(const kt_refop_t *r, const KT_RT *const *in, KT_RT *out)
{
    int n = r->op == KT_REFOP_UNARY ? 1 : r->op == KT_REFOP_BINARY ? 2 : 3;
    int64_t st[KT_REFOP_MAX_IN][KT_REFOP_MAX_DIMS];
    for (int k = 0; k < n; k++)
        KT_RF(bstrides)(r, k, st[k]);
    int64_t inner = r->ondim ? r->dout[r->ondim - 1] : 1;
    int64_t rows = inner ? kt_refop_numel(r->ondim, r->dout) / inner : 0;
    int last = r->ondim - 1;
#ifdef _OPENMP
#pragma omp parallel for if (rows * inner > 32768)
#endif
    for (int64_t row = 0; row < rows; row++) {
        int64_t off[KT_REFOP_MAX_IN], s[KT_REFOP_MAX_IN];
        KT_RF(row_offsets)(r, row, n, st, off);
        for (int k = 0; k < n; k++)
            s[k] = last >= 0 ? st[k][last] : 0;
        KT_RT *y = out + row * inner;
        if (n == 1) {
            const KT_RT *x = in[0] + off[0];
            for (int64_t i = 0; i < inner; i++)
                y[i] = KT_RF(unary)((int)r->ia[0], x[i * s[0]], r->fa[0], r->fa[1]);
        } else if (n == 2) {
            const KT_RT *a = in[0] + off[0], *b = in[1] + off[1];
            for (int64_t i = 0; i < inner; i++)
                y[i] = KT_RF(binary)((int)r->ia[0], a[i * s[0]], b[i * s[1]]);
        } else {
            const KT_RT *c = in[0] + off[0], *a = in[1] + off[1], *b = in[2] + off[2];
            for (int64_t i = 0; i < inner; i++)
                y[i] = c[i * s[0]] != (KT_RT)0 ? a[i * s[1]] : b[i * s[2]];
        }
    }
}

/* Slices, expands, tiles and transposes: every output element reads one
 * input element at an affine (and, for tiles, periodic) offset. The offset
 * is worked out once per row of the innermost axis, which is copied as a
 * block where it is contiguous: per element, the divisions cost more than
 * the copy (a transformer's q/k/v slices took 13 us for 4 KB). */
static void KT_RF(view)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    int64_t numel = kt_refop_numel(r->ondim, r->dout);
    int nd = r->ondim;
    int64_t inner = nd > 0 ? r->dout[nd - 1] : 1;
    if (numel <= 0 || inner <= 0)
        return;
    int64_t rows = numel / inner;
    int64_t step = nd > 0 ? r->ia[nd] : 0, period = nd > 0 ? r->ia[KT_REFOP_MAX_DIMS + nd] : 0;
#ifdef _OPENMP
#pragma omp parallel for if (numel > 32768)
#endif
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, src = r->ia[0];
        for (int d = nd - 2; d >= 0; d--) {
            int64_t q = rem % r->dout[d];
            rem /= r->dout[d];
            if (r->ia[1 + KT_REFOP_MAX_DIMS + d] > 0)
                q %= r->ia[1 + KT_REFOP_MAX_DIMS + d];
            src += q * r->ia[1 + d];
        }
        KT_RT *o = out + row * inner;
        if (period > 0)
            for (int64_t j = 0; j < inner; j++)
                o[j] = x[src + (j % period) * step];
        else if (step == 1)
            memcpy(o, x + src, sizeof(KT_RT) * (size_t)inner);
        else
            for (int64_t j = 0; j < inner; j++)
                o[j] = x[src + j * step];
    }
}

static void KT_RF(pad)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    int64_t numel = kt_refop_numel(r->ondim, r->dout), st[KT_REFOP_MAX_DIMS];
    int nd = r->ondim;
    KT_RF(strides)(nd, r->din[0], st);
#ifdef _OPENMP
#pragma omp parallel for if (numel > 32768)
#endif
    for (int64_t i = 0; i < numel; i++) {
        int64_t rem = i, src = 0;
        int outside = 0;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t n = r->din[0][d], q = rem % r->dout[d] - r->ia[1 + d];
            rem /= r->dout[d];
            if (q < 0 || q >= n) {
                switch ((int)r->ia[0]) {
                case KT_RP_REFLECT:
                    if (n == 1) {
                        q = 0;
                    } else {
                        int64_t p = 2 * (n - 1);
                        q = ((q % p) + p) % p;
                        if (q >= n)
                            q = p - q;
                    }
                    break;
                case KT_RP_EDGE: q = q < 0 ? 0 : n - 1; break;
                case KT_RP_WRAP: q = ((q % n) + n) % n; break;
                default: outside = 1; q = 0; break;
                }
            }
            src += q * st[d];
        }
        out[i] = outside ? (KT_RT)r->fa[0] : x[src];
    }
}

/* An index value into an axis of n: negative counts from the end, and
 * anything else outside it (NaN included) is clamped, so no value can make
 * a call read or write out of bounds. */
static int64_t KT_RF(index)(KT_RT v, int64_t n)
{
    double q = (double)v;
    if (q < 0)
        q += (double)n;
    if (!(q >= 0))
        return 0;
    return q >= (double)n ? n - 1 : (int64_t)q;
}

static void KT_RF(gather)(const kt_refop_t *r, const KT_RT *x, const KT_RT *idx, KT_RT *out)
{
    int axis = (int)r->ia[0];
    int64_t outer = 1, inner = 1, A = r->din[0][axis];
    for (int d = 0; d < axis; d++)
        outer *= r->din[0][d];
    for (int d = axis + 1; d < r->ndim[0]; d++)
        inner *= r->din[0][d];
    int64_t ni = kt_refop_numel(r->ndim[1], r->din[1]);
#ifdef _OPENMP
#pragma omp parallel for if (outer * ni * inner > 32768)
#endif
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t k = KT_RF(index)(idx[j], A);
            memcpy(out + (o * ni + j) * inner, x + (o * A + k) * inner, sizeof(KT_RT) * (size_t)inner);
        }
}

/* The element transform and combination of a reduction's plain forms. */
static double KT_RF(rd_in)(int code, double v)
{
    return code == KT_RR_L1 ? fabs(v) : code == KT_RR_L2 || code == KT_RR_SUMSQUARE ? v * v : v;
}

static double KT_RF(rd_add)(int code, double acc, double v)
{
    switch (code) {
    case KT_RR_MAX: return v > acc || v != v ? v : acc;
    case KT_RR_MIN: return v < acc || v != v ? v : acc;
    case KT_RR_PROD: return acc * v;
    default: return acc + v;
    }
}

static double KT_RF(rd_out)(int code, double acc, int64_t count)
{
    return code == KT_RR_MEAN ? acc / (double)count : code == KT_RR_L2 ? sqrt(acc)
           : code == KT_RR_LOGSUM ? log(acc) : acc;
}

/* A reduction over one block of adjacent axes [a0, a1): [outer, mid, inner]
 * with unit-stride loops (the mean over the last axis of a LayerNorm, the
 * sum over channels). 0 when the axes are not one block. */
static int KT_RF(reduce_block)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    int nd = r->ndim[0], code = (int)r->ia[0], a0 = -1, a1 = -1;
    int64_t mask = r->ia[1], outer = 1, mid = 1, inner = 1;
    for (int d = 0; d < nd; d++)
        if (mask >> d & 1) {
            if (a1 >= 0 && a1 != d)
                return 0;
            a0 = a0 < 0 ? d : a0;
            a1 = d + 1;
        }
    if (a0 < 0 || code == KT_RR_LOGSUMEXP)
        return 0;
    for (int d = 0; d < nd; d++)
        *(d < a0 ? &outer : d < a1 ? &mid : &inner) *= r->din[0][d];
    double init = code == KT_RR_MAX ? -INFINITY : code == KT_RR_MIN ? INFINITY
                  : code == KT_RR_PROD ? 1.0 : 0.0;
#ifdef _OPENMP
#pragma omp parallel for if (outer * mid * inner > 32768)
#endif
    for (int64_t o = 0; o < outer; o++) {
        const KT_RT *p = x + o * mid * inner;
        KT_RT *y = out + o * inner;
        if (inner == 1) {
            double acc = init;
            for (int64_t j = 0; j < mid; j++)
                acc = KT_RF(rd_add)(code, acc, KT_RF(rd_in)(code, p[j]));
            y[0] = (KT_RT)KT_RF(rd_out)(code, acc, mid);
            continue;
        }
        for (int64_t i = 0; i < inner; i++)
            y[i] = (KT_RT)init;
        for (int64_t j = 0; j < mid; j++)
            for (int64_t i = 0; i < inner; i++)
                y[i] = (KT_RT)KT_RF(rd_add)(code, y[i], KT_RF(rd_in)(code, p[j * inner + i]));
        for (int64_t i = 0; i < inner; i++)
            y[i] = (KT_RT)KT_RF(rd_out)(code, y[i], mid);
    }
    return 1;
}

static void KT_RF(reduce)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    if (KT_RF(reduce_block)(r, x, out))
        return;
    int nd = r->ndim[0], code = (int)r->ia[0];
    int64_t mask = r->ia[1], st[KT_REFOP_MAX_DIMS], rd[KT_REFOP_MAX_DIMS], rs[KT_REFOP_MAX_DIMS];
    int64_t kd[KT_REFOP_MAX_DIMS], ks[KT_REFOP_MAX_DIMS], count = 1, nout = 1;
    int nr = 0, nk = 0;
    KT_RF(strides)(nd, r->din[0], st);
    for (int d = 0; d < nd; d++) {
        if (mask >> d & 1) {
            rd[nr] = r->din[0][d];
            rs[nr++] = st[d];
            count *= r->din[0][d];
        } else {
            kd[nk] = r->din[0][d];
            ks[nk++] = st[d];
            nout *= r->din[0][d];
        }
    }
#ifdef _OPENMP
#pragma omp parallel for if (nout * count > 32768)
#endif
    for (int64_t o = 0; o < nout; o++) {
        int64_t rem = o, base = 0;
        for (int d = nk - 1; d >= 0; d--) {
            base += (rem % kd[d]) * ks[d];
            rem /= kd[d];
        }
        double acc = code == KT_RR_MAX ? -INFINITY : code == KT_RR_MIN ? INFINITY
                     : code == KT_RR_PROD ? 1.0 : 0.0, mx = -INFINITY;
        if (code == KT_RR_LOGSUMEXP)
            for (int64_t j = 0; j < count; j++) {
                int64_t q = j, at = base;
                for (int d = nr - 1; d >= 0; d--) {
                    at += (q % rd[d]) * rs[d];
                    q /= rd[d];
                }
                mx = x[at] > mx ? x[at] : mx;
            }
        for (int64_t j = 0; j < count; j++) {
            int64_t q = j, at = base;
            for (int d = nr - 1; d >= 0; d--) {
                at += (q % rd[d]) * rs[d];
                q /= rd[d];
            }
            double v = x[at];
            acc = code == KT_RR_LOGSUMEXP ? acc + exp(v - mx)
                                          : KT_RF(rd_add)(code, acc, KT_RF(rd_in)(code, v));
        }
        out[o] = (KT_RT)(code == KT_RR_LOGSUMEXP ? mx + log(acc)
                                                 : KT_RF(rd_out)(code, acc, count));
    }
}

static void KT_RF(softmax)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    int nd = r->ndim[0], a0 = (int)r->ia[0], a1 = (int)r->ia[1], lg = (int)r->ia[2];
    int64_t outer = 1, mid = 1, inner = 1;
    for (int d = 0; d < nd; d++)
        *(d < a0 ? &outer : d < a1 ? &mid : &inner) *= r->din[0][d];
#ifdef _OPENMP
#pragma omp parallel for if (outer * mid * inner > 32768)
#endif
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t o = oi / inner, i = oi % inner;
        const KT_RT *p = x + o * mid * inner + i;
        KT_RT *y = out + o * mid * inner + i;
        KT_RT mx = -(KT_RT)INFINITY;
        for (int64_t j = 0; j < mid; j++)
            mx = p[j * inner] > mx ? p[j * inner] : mx;
        double sum = 0;
        for (int64_t j = 0; j < mid; j++) {
            KT_RT e = KT_RM(exp)(p[j * inner] - mx);
            sum += e;
            if (!lg)
                y[j * inner] = e;
        }
        KT_RT inv = (KT_RT)(1.0 / sum), ls = (KT_RT)log(sum);
        for (int64_t j = 0; j < mid; j++)
            y[j * inner] = lg ? p[j * inner] - mx - ls : y[j * inner] * inv;
    }
}

static void KT_RF(trilu)(const kt_refop_t *r, const KT_RT *x, KT_RT *out)
{
    int nd = r->ndim[0];
    int64_t R = r->din[0][nd - 2], C = r->din[0][nd - 1], k = r->ia[1];
    int64_t mats = kt_refop_numel(nd - 2, r->din[0]);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                int keep = r->ia[0] ? j - i >= k : j - i <= k;
                out[(m * R + i) * C + j] = keep ? x[(m * R + i) * C + j] : (KT_RT)0;
            }
}

/* ScatterND without reduction: a copy of the data with each indexed slice
 * replaced by its update (indices clamped into their axes). */
static void KT_RF(scatter_nd)(const kt_refop_t *r, const KT_RT *x, const KT_RT *idx,
                              const KT_RT *upd, KT_RT *out)
{
    int nd = r->ndim[0], k = (int)r->din[1][r->ndim[1] - 1];
    int64_t st[KT_REFOP_MAX_DIMS], numel = kt_refop_numel(nd, r->din[0]);
    KT_RF(strides)(nd, r->din[0], st);
    int64_t slice = k < nd ? st[k - 1] : 1, nupd = kt_refop_numel(r->ndim[1], r->din[1]) / k;
    memcpy(out, x, sizeof(KT_RT) * (size_t)numel);
    for (int64_t u = 0; u < nupd; u++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++)
            off += KT_RF(index)(idx[u * k + j], r->din[0][j]) * st[j];
        memcpy(out + off, upd + u * slice, sizeof(KT_RT) * (size_t)slice);
    }
}

void KT_RF(run)(const kt_refop_t *r, const KT_RT *const *in, KT_RT *out)
{
    switch (r->op) {
    case KT_REFOP_UNARY:
    case KT_REFOP_BINARY:
    case KT_REFOP_WHERE: KT_RF(elementwise)(r, in, out); break;
    case KT_REFOP_VIEW: KT_RF(view)(r, in[0], out); break;
    case KT_REFOP_PAD: KT_RF(pad)(r, in[0], out); break;
    case KT_REFOP_GATHER: KT_RF(gather)(r, in[0], in[1], out); break;
    case KT_REFOP_REDUCE: KT_RF(reduce)(r, in[0], out); break;
    case KT_REFOP_SOFTMAX: KT_RF(softmax)(r, in[0], out); break;
    case KT_REFOP_TRILU: KT_RF(trilu)(r, in[0], out); break;
    case KT_REFOP_SCATTER_ND: KT_RF(scatter_nd)(r, in[0], in[1], in[2], out); break;
    case KT_REFOP_RANGE: {
        int64_t n = kt_refop_numel(r->ondim, r->dout);
        for (int64_t i = 0; i < n; i++)
            out[i] = (KT_RT)(r->fa[0] + (double)i * r->fa[1]);
        break;
    }
    default: break;
    }
}
