/* ONNX import: decode a model with protobuf-c (proto/onnx.proto), infer
 * shapes node by node and build the layer graph (net.h). Small constants
 * (shapes, axes, scalars) are read and folded so the Shape -> Gather ->
 * Concat -> Reshape chains exporters write resolve to plain reshapes; the
 * layers' parameters (weights, biases, norm statistics) are converted to
 * float32 in their canonical layouts from the tensors that hold them. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_int.h"
#include "onnx.pb-c.h"
#include "util/err.h"
#include "util/util.h"

#define MAX_CONST_VALUES 4096   /* constants with more elements keep only their shape */
#define UNSUP 1                 /* handler result: the node becomes an unsupported layer */
/* The activations the importer collapses from several nodes. */
enum { PAT_GELU = 0, PAT_HARDSWISH, PAT_SILU };

#define HARDSIGMOID_ALPHA 0.2   /* ONNX HardSigmoid's defaults */
#define HARDSIGMOID_BETA 0.5
#define ND_MAX_IN 256           /* inputs of one node (a DenseNet block's Concat has 49) */
#define FOLD_LIMIT (1 << 21)    /* elements of a constant the importer computes */

/* A constant: an initializer, a Constant node or a folded computation. */
typedef struct {
    int ndim;               /* -1: shape unknown */
    int64_t d[KT_NET_MAX_DIMS];
    int is_int;             /* values in iv (integer types) or fv */
    int known;              /* values known (iv/fv hold numel entries) */
    int64_t *iv;
    double *fv;
    /* The tensor holding all its values (initializers, Constant values and
     * reshapes or float casts of them): large weights are read from it only
     * when a layer needs them. */
    const Onnx__TensorProto *src;
} cval_t;

/* A matched layer norm pattern (match_layer_norm): value names in the graph. */
typedef struct {
    const char *x, *gamma, *beta;   /* gamma, beta NULL when the pattern has none */
    double eps;
} layer_norm_t;

typedef struct {
    Onnx__GraphProto *g;
    int64_t opset;
    kt_net_t *net;
    json_t *vals;           /* value name -> code: >= 0 layer, < 0 -(constant + 1) */
    json_t *declared;       /* value name -> index into decl (value_info / outputs) */
    json_t *uses;           /* value name -> number of node inputs reading it */
    json_t *materialized;   /* constant name (and factor) -> layer index of its input layer */
    cval_t *consts;
    int nconsts, cap;
    int params_missing;     /* a layer parameter's values are not in the file */
    char missing[512];      /* the first external tensor that could not be read, and why */
    char *skip;             /* per node: inside a collapsed gelu, hardswish, silu or layer
                             * norm pattern */
    const char **pat_in;    /* per node: the input of the gelu, hardswish or silu a pattern
                             * it ends collapses to (NULL: it ends none) */
    unsigned char *pat_kind;   /* per node: that pattern's PAT_* */
    int64_t (*pool_pad)[4];   /* per AveragePool node: the zero Pad before it, merged in
                               * (top, left, bottom, right), counted as PyTorch does */
    layer_norm_t **ln;      /* per node: the layer norm a pattern ending there computes */
} imp_t;

/* The node being converted. */
typedef struct {
    imp_t *im;
    const Onnx__NodeProto *n;
    int idx;
    char name[160];         /* its layer name */
    char why[256];          /* UNSUP reason */
    int code[ND_MAX_IN];    /* resolved input codes */
    int present[ND_MAX_IN];
    int nextra;             /* codes after the node's inputs: a chain's partial results */
    int last;               /* refop_call with k < 0: the code of what it made */
} nd_t;

static int unsup(nd_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int unsup(nd_t *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
    return UNSUP;
}

/* ---- values ----------------------------------------------------------------------- */

static int lookup(const imp_t *im, const char *name, int *code)
{
    json_t *v = json_object_get(im->vals, name);
    if (!v)
        return 0;
    *code = (int)json_integer_value(v);
    return 1;
}

static int define(imp_t *im, const char *name, int code)
{
    if (json_object_get(im->vals, name))
        return kt_err_set(KT_EINVAL, "value '%s' is produced twice", name);
    if (json_object_set_new_nocheck(im->vals, name, json_integer(code)))
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

static cval_t *new_const(imp_t *im, int *code)
{
    if (im->nconsts == im->cap) {
        int cap = im->cap ? im->cap * 2 : 64;
        cval_t *c = realloc(im->consts, (size_t)cap * sizeof(*c));
        if (!c) {
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
        im->consts = c;
        im->cap = cap;
    }
    cval_t *c = &im->consts[im->nconsts];
    memset(c, 0, sizeof(*c));
    c->ndim = -1;
    *code = -(im->nconsts + 1);
    im->nconsts++;
    return c;
}

static cval_t *cst(imp_t *im, int code) { return &im->consts[-code - 1]; }

static int64_t cnumel(const cval_t *c)
{
    if (c->ndim < 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < c->ndim; i++)
        n *= c->d[i];
    return n;
}

/* Element k as an integer: a float value truncated, saturated at the int64
 * range (a folded float used as a shape or an axis; NaN reads as 0). */
static int64_t cget_i(const cval_t *c, int64_t k)
{
    if (c->is_int)
        return c->iv[k];
    double v = c->fv[k];
    return v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
}

static double cget_f(const cval_t *c, int64_t k)
{
    return c->is_int ? (double)c->iv[k] : c->fv[k];
}

/* Allocate value storage for a constant of known shape. */
static int calloc_vals(cval_t *c, int is_int)
{
    int64_t n = cnumel(c);
    c->is_int = is_int;
    c->known = 0;
    if (n < 0 || n > MAX_CONST_VALUES)
        return KT_OK;
    if (is_int)
        c->iv = calloc((size_t)n + 1, sizeof(int64_t));
    else
        c->fv = calloc((size_t)n + 1, sizeof(double));
    if (!(is_int ? (void *)c->iv : (void *)c->fv))
        return kt_err_set(KT_ENOMEM, "out of memory");
    c->known = 1;
    return KT_OK;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* 1 when t's bytes are in an external data file (not read yet, or missing). */
static int is_external(const Onnx__TensorProto *t)
{
    return t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/* Decode a TensorProto's shape and (for small tensors) values into c.
 * Inconsistent data (a truncated raw_data, a negative dimension) is an
 * error: the file is malformed. */
static int read_tensor(const Onnx__TensorProto *t, cval_t *c, const char *what)
{
    c->ndim = -1;
    c->known = 0;
    if (t->n_dims > KT_NET_MAX_DIMS)
        return KT_OK;   /* legal but beyond ktune: shape unknown */
    int64_t numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return kt_err_set(KT_EINVAL, "%s: dimension %zu is negative (%lld)", what, i,
                              (long long)t->dims[i]);
        /* Checked by division: the product of two dimensions under 2^40
         * can overflow int64. */
        const int64_t lim = (int64_t)1 << 40;
        if (t->dims[i] > lim || (t->dims[i] > 0 && numel > lim / t->dims[i]))
            return kt_err_set(KT_EINVAL, "%s: more than 2^40 elements", what);
        numel *= t->dims[i];
        c->d[i] = t->dims[i];
    }
    c->ndim = (int)t->n_dims;
    int dt = t->has_data_type ? t->data_type : 0;
    int size = 0, is_int = 1;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: size = 4, is_int = 0; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: size = 8, is_int = 0; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: size = 8; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: size = 4; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: size = 2; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: size = 1; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64: size = 8; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128: size = 16; break;
    default: size = 0;   /* strings, undefined: shape only */
    }
    if (is_external(t) || size == 0)
        return KT_OK;
    if (t->has_raw_data) {
        if ((int64_t)t->raw_data.len != numel * size)
            return kt_err_set(KT_EINVAL, "%s: raw_data holds %zu bytes, but %lld elements of "
                              "%d bytes need %lld", what, t->raw_data.len, (long long)numel, size,
                              (long long)(numel * size));
    } else {
        size_t have = 0;
        int checked = 1;
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: have = t->n_float_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64: have = t->n_float_data / 2; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: have = t->n_double_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128: have = t->n_double_data / 2; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: have = t->n_int64_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: checked = 0; break;   /* uint64_data: not read */
        default: have = t->n_int32_data;
        }
        if (checked && (int64_t)have != numel)
            return kt_err_set(KT_EINVAL, "%s: holds %zu values, but its shape has %lld elements",
                              what, have, (long long)numel);
        if (!checked)
            return KT_OK;
    }
    /* Values of small tensors of the types shape arithmetic and scalars use. */
    if (numel > MAX_CONST_VALUES || dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
        dt == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16 ||
        dt == ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64 ||
        dt == ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128 ||
        dt == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64 || dt == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32)
        return KT_OK;
    if (calloc_vals(c, is_int))
        return KT_ENOMEM;
    for (int64_t k = 0; k < numel; k++) {
        if (t->has_raw_data) {
            const uint8_t *p = t->raw_data.data + k * size;
            uint64_t u = le(p, size);
            if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
                uint32_t u32 = (uint32_t)u;
                float f;
                memcpy(&f, &u32, 4);
                c->fv[k] = f;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
                double f;
                memcpy(&f, &u, 8);
                c->fv[k] = f;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
                c->iv[k] = (int64_t)u;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32) {
                c->iv[k] = (int32_t)(uint32_t)u;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT16) {
                c->iv[k] = (int16_t)(uint16_t)u;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT8) {
                c->iv[k] = (int8_t)(uint8_t)u;
            } else {
                c->iv[k] = (int64_t)u;
            }
        } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
            c->fv[k] = t->float_data[k];
        } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
            c->fv[k] = t->double_data[k];
        } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
            c->iv[k] = t->int64_data[k];
        } else {
            c->iv[k] = t->int32_data[k];
        }
    }
    return KT_OK;
}

/* IEEE half precision to float (exact: every half is a float). */
static float half_to_float(uint32_t h)
{
    int e = (int)((h >> 10) & 0x1f), m = (int)(h & 0x3ff);
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint32_t h)
{
    uint32_t u = (h & 0xffff) << 16;   /* bfloat16 is the top half of a float */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* All numel values of tensor t as float32 (a new array); *v stays NULL when
 * the file does not hold them (external data, strings, complex numbers,
 * uint64_data, which protobuf-c does not decode here). */
static int tensor_floats(const Onnx__TensorProto *t, int64_t numel, float **v)
{
    *v = NULL;
    int dt = t->has_data_type ? t->data_type : 0, size;
    if (is_external(t))
        return KT_OK;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: size = 4; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: size = 8; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: size = 2; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: size = 1; break;
    default: return KT_OK;
    }
    size_t have;
    if (t->has_raw_data) {
        have = t->raw_data.len / (size_t)size;
    } else {
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: have = t->n_float_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: have = t->n_double_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: have = t->n_int64_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return KT_OK;   /* uint64_data */
        default: have = t->n_int32_data;
        }
    }
    /* read_tensor checked this already; a second look keeps this function
     * safe on its own. */
    if ((int64_t)have < numel)
        return kt_err_set(KT_EINVAL, "tensor '%s' holds %zu values, but its shape has %lld "
                          "elements", t->name ? t->name : "", have, (long long)numel);
    float *o = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(float));
    if (!o)
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (int64_t k = 0; k < numel; k++) {
        double x;
        if (t->has_raw_data) {
            uint64_t u = le(t->raw_data.data + k * size, size);
            switch (dt) {
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
                uint32_t u32 = (uint32_t)u;
                float f;
                memcpy(&f, &u32, 4);
                x = f;
                break;
            }
            case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: memcpy(&x, &u, 8); break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: x = half_to_float((uint32_t)u); break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: x = bf16_to_float((uint32_t)u); break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: x = (double)(int64_t)u; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: x = (int32_t)(uint32_t)u; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: x = (int16_t)(uint16_t)u; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: x = (int8_t)(uint8_t)u; break;
            default: x = (double)u;   /* unsigned types and bool */
            }
        } else {
            switch (dt) {
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: x = t->float_data[k]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: x = t->double_data[k]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: x = (double)t->int64_data[k]; break;
            /* 16-bit floats sit in int32_data as their bit patterns. */
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
                x = half_to_float((uint32_t)t->int32_data[k]);
                break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
                x = bf16_to_float((uint32_t)t->int32_data[k]);
                break;
            default: x = t->int32_data[k];
            }
        }
        o[k] = (float)x;
    }
    *v = o;
    return KT_OK;
}

/* All values of constant `code` as float32 (a new array of *numel), from
 * its folded values or its tensor; *v stays NULL when neither holds them
 * (external data, a computation too large to fold, ConstantOfShape of an
 * unknown value). */
static int const_floats(imp_t *im, int code, float **v, int64_t *numel)
{
    const cval_t *c = cst(im, code);
    *v = NULL;
    *numel = cnumel(c);
    if (*numel < 1)
        return KT_OK;
    if (c->known) {
        float *o = malloc((size_t)*numel * sizeof(float));
        if (!o)
            return kt_err_set(KT_ENOMEM, "out of memory");
        for (int64_t k = 0; k < *numel; k++)
            o[k] = (float)cget_f(c, k);
        *v = o;
        return KT_OK;
    }
    return c->src ? tensor_floats(c->src, *numel, v) : KT_OK;
}

/* ---- attributes -------------------------------------------------------------------- */

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

static int attr_int(nd_t *d, const char *name, int64_t dflt, int64_t *out)
{
    const Onnx__AttributeProto *a = attr(d->n, name);
    *out = dflt;
    if (!a)
        return KT_OK;
    if (!a->has_i)
        return unsup(d, "attribute '%s' must be an integer", name);
    *out = a->i;
    return KT_OK;
}

static int attr_float(nd_t *d, const char *name, double dflt, double *out)
{
    const Onnx__AttributeProto *a = attr(d->n, name);
    *out = dflt;
    if (!a)
        return KT_OK;
    if (!a->has_f)
        return unsup(d, "attribute '%s' must be a float", name);
    *out = a->f;
    return KT_OK;
}

/* ints attribute; *n = -1 when absent. */
static int attr_ints(nd_t *d, const char *name, int max, int64_t *out, int *n)
{
    const Onnx__AttributeProto *a = attr(d->n, name);
    *n = -1;
    if (!a)
        return KT_OK;
    if (a->n_ints > (size_t)max)
        return unsup(d, "attribute '%s' has more than %d values", name, max);
    for (size_t i = 0; i < a->n_ints; i++)
        out[i] = a->ints[i];
    *n = (int)a->n_ints;
    return KT_OK;
}

static const char *attr_str(const Onnx__NodeProto *n, const char *name, char *buf, size_t cap)
{
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a || !a->has_s)
        return NULL;
    size_t len = a->s.len < cap - 1 ? a->s.len : cap - 1;
    memcpy(buf, a->s.data, len);
    buf[len] = '\0';
    return buf;
}

/* ---- layers ------------------------------------------------------------------------ */

static int nin(const nd_t *d) { return (int)d->n->n_input; }

static int has_in(const nd_t *d, int k)
{
    return k >= 0 && k < nin(d) + d->nextra && k < ND_MAX_IN && d->present[k];
}

static int is_layer(const nd_t *d, int k) { return has_in(d, k) && d->code[k] >= 0; }

static int is_const(const nd_t *d, int k) { return has_in(d, k) && d->code[k] < 0; }

static const net_shape_t *lshape(const nd_t *d, int k)
{
    return &d->im->net->layers[d->code[k]].out;
}

/* Constant input k. An absent optional input ("" in the node) is no
 * constant: it reads as an unknown value rather than as the slot before the
 * table (a node of constants only, folded, may name "" as its input). */
static cval_t *cin(nd_t *d, int k)
{
    static _Thread_local cval_t absent = {.ndim = -1};
    if (!is_const(d, k)) {
        absent = (cval_t){.ndim = -1};   /* a fold may have written to it: reset */
        return &absent;
    }
    return cst(d->im, d->code[k]);
}

/* How a parameter's stored values become the layer's. */
typedef enum { P_AS_IS = 0, P_NEGATE, P_INVERT } pfix_t;

/* Attach constant input k's values, times `factor` and then negated or
 * inverted, to layer i as parameter `role`. Values the file does not hold
 * (external data...) mark the network as carrying none instead: its tasks
 * need only shapes. */
static int attach(nd_t *d, int i, const char *role, int k, double factor, pfix_t fix)
{
    float *v = NULL;
    int64_t n = 0;
    int rc = is_const(d, k) ? const_floats(d->im, d->code[k], &v, &n) : KT_OK;
    if (rc)
        return rc;
    if (!v) {
        d->im->params_missing = 1;
        return KT_OK;
    }
    for (int64_t j = 0; j < n; j++) {
        double x = factor == 1.0 ? v[j] : (float)(factor * v[j]);
        v[j] = fix == P_NEGATE ? (float)-x : fix == P_INVERT ? (float)(1.0 / x) : (float)x;
    }
    return net_layer_set_param(d->im->net, i, role, v, n);
}

/* A constant used as an activation becomes a graph input layer (a
 * placeholder of the task, as TVM binds params) carrying the constant's
 * values times `factor` (-1 for x - C, Gemm's beta for its C), one layer per
 * constant and factor. */
static int materialize_scaled(nd_t *d, int k, double factor, int *layer)
{
    imp_t *im = d->im;
    const char *nm = d->n->input[k];
    char *key = malloc(strlen(nm) + 32);
    if (!key)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (factor == 1.0)
        strcpy(key, nm);
    else
        sprintf(key, "%s\x01%.17g", nm, factor);   /* \x01: no clash with a real name */
    json_t *m = json_object_get(im->materialized, key);
    if (m) {
        *layer = (int)json_integer_value(m);
        free(key);
        return KT_OK;
    }
    cval_t *c = cin(d, k);
    if (c->ndim < 1) {
        free(key);
        return unsup(d, "input '%s' is a constant of unknown or scalar shape used as a tensor", nm);
    }
    char name[200], sfx[40] = "";
    if (factor != 1.0)
        snprintf(sfx, sizeof(sfx), "*%g", factor);
    snprintf(name, sizeof(name), "const:%.150s%s", nm, sfx);
    for (int j = 1; net_find(im->net, name) >= 0; j++)
        snprintf(name, sizeof(name), "const:%.140s%s#%d", nm, sfx, j);
    int i = net_layer_add(im->net, name, NET_INPUT, "constant", NULL, 0);
    if (i < 0) {
        free(key);
        return i;
    }
    net_layer_t *l = net_layer(im->net, i);
    l->ntarget = c->ndim;
    memcpy(l->target, c->d, sizeof(l->target));
    int rc = net_layer_finish(im->net, i);
    if (rc < 0) {
        free(key);
        return unsup(d, "constant '%s': %s", nm, kt_err_msg());
    }
    rc = json_object_set_new_nocheck(im->materialized, key, json_integer(i));
    free(key);
    if (rc)
        return kt_err_set(KT_ENOMEM, "out of memory");
    *layer = i;
    return attach(d, i, "value", k, factor, P_AS_IS);
}

/* Constant input k broadcast to shape `to` (when it broadcasts to it and
 * has fewer elements): a constant layer of that shape carrying the repeated
 * values times `factor`, so that x + C reads two tensors of one shape.
 * Anything else is materialize_scaled's. */
static int materialize_bcast(nd_t *d, int k, double factor, const net_shape_t *to_shape,
                             int *layer)
{
    /* a copy: `to_shape` may be a layer's, and adding the constant layer
     * below moves the layer table */
    const net_shape_t shape = *to_shape, *to = &shape;
    const cval_t *c = cin(d, k);
    int64_t n = net_shape_numel(to);
    int same = cnumel(c) == n;   /* the same values, perhaps with leading 1s */
    int fits = c->ndim >= 1 && c->ndim <= to->ndim && n > 0 && n <= FOLD_LIMIT;
    for (int q = 0; fits && q < c->ndim; q++) {
        int64_t a = c->d[q], b = to->d[q + to->ndim - c->ndim];
        fits = a == b || a == 1;
    }
    if (same || !fits)
        return materialize_scaled(d, k, factor, layer);
    float *v = NULL;
    int64_t m = 0;
    int rc = const_floats(d->im, d->code[k], &v, &m);
    if (rc)
        return rc;
    if (!v)
        return materialize_scaled(d, k, factor, layer);   /* values not at hand: shapes only */
    float *w = malloc((size_t)n * sizeof(float));
    if (!w) {
        free(v);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    int64_t st[KT_NET_MAX_DIMS], acc = 1;
    for (int q = to->ndim - 1; q >= 0; q--) {
        int cq = q - (to->ndim - c->ndim);
        st[q] = cq >= 0 && c->d[cq] != 1 ? acc : 0;
        if (cq >= 0)
            acc *= c->d[cq];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, src = 0;
        for (int q = to->ndim - 1; q >= 0; q--) {
            src += (rem % to->d[q]) * st[q];
            rem /= to->d[q];
        }
        w[i] = (float)(factor * v[src]);
    }
    free(v);
    char name[200];
    snprintf(name, sizeof(name), "const:%.150s*bcast", d->n->input[k]);
    for (int j = 1; net_find(d->im->net, name) >= 0; j++)
        snprintf(name, sizeof(name), "const:%.140s*bcast#%d", d->n->input[k], j);
    int i = net_layer_add(d->im->net, name, NET_INPUT, "constant", NULL, 0);
    if (i < 0) {
        free(w);
        return i;
    }
    net_layer_t *l = net_layer(d->im->net, i);
    l->ntarget = to->ndim;
    memcpy(l->target, to->d, sizeof(l->target));
    if ((rc = net_layer_finish(d->im->net, i)) < 0) {
        free(w);
        return rc;
    }
    *layer = i;
    return net_layer_set_param(d->im->net, i, "value", w, n);
}

static int materialize(nd_t *d, int k, int *layer)
{
    return materialize_scaled(d, k, 1.0, layer);
}

/* Input k as a layer index (materializing constants). */
static int in_layer(nd_t *d, int k, int *layer)
{
    if (!has_in(d, k))
        return unsup(d, "input %d is missing", k);
    if (d->code[k] >= 0) {
        *layer = d->code[k];
        return KT_OK;
    }
    return materialize(d, k, layer);
}

/* Add a layer for output `out` of the node; attributes filled by `set`
 * through the returned pointer before finish_out(). */
static int new_layer(nd_t *d, const char *suffix, net_op_t op, const char *label,
                     const int *in, int n, net_layer_t **l)
{
    char name[200];
    if (suffix)
        snprintf(name, sizeof(name), "%.150s/%s", d->name, suffix);
    else
        snprintf(name, sizeof(name), "%s", d->name);
    for (int k = 1; net_find(d->im->net, name) >= 0; k++)
        snprintf(name, sizeof(name), "%.150s%s%s#%d", d->name, suffix ? "/" : "",
                 suffix ? suffix : "", k);
    int i = net_layer_add(d->im->net, name, op, label, in, n);
    *l = i >= 0 ? net_layer(d->im->net, i) : NULL;
    return i;
}

/* Finish layer i; a shape error makes the node unsupported with the message. */
static int finish(nd_t *d, int i)
{
    if (i < 0)
        return i;
    int rc = net_layer_finish(d->im->net, i);
    if (rc == KT_EINVAL)
        return unsup(d, "%s", kt_err_msg());
    return rc;
}

/* Finish layer i as the node's output k. */
static int finish_out(nd_t *d, int i, int k)
{
    int rc = finish(d, i);
    if (rc)
        return rc;
    return define(d->im, d->n->output[k], i);
}

static int simple(nd_t *d, net_op_t op, const char *label)
{
    int x;
    int rc = in_layer(d, 0, &x);
    if (rc)
        return rc;
    net_layer_t *l;
    return finish_out(d, new_layer(d, NULL, op, label, &x, 1, &l), 0);
}

static int alias(nd_t *d, int k)
{
    return define(d->im, d->n->output[0], d->code[k]);
}

/* ---- conv, pool ------------------------------------------------------------------- */

/* Shared window attributes: kernel_shape, strides, pads, dilations, auto_pad. */
static int window_attrs(nd_t *d, const net_shape_t *x, net_layer_t *l, int64_t kh, int64_t kw)
{
    int64_t v[8];
    int n;
    l->kernel[0] = kh;
    l->kernel[1] = kw;
    if (attr_ints(d, "kernel_shape", 8, v, &n))
        return UNSUP;
    if (n >= 0) {
        if (n != 2)
            return unsup(d, "only 2-D windows are supported (kernel_shape has %d values)", n);
        if ((kh && (v[0] != kh || v[1] != kw)))
            return unsup(d, "kernel_shape [%lld, %lld] differs from the weight's [%lld, %lld]",
                         (long long)v[0], (long long)v[1], (long long)kh, (long long)kw);
        l->kernel[0] = v[0];
        l->kernel[1] = v[1];
    }
    if (l->kernel[0] < 1)
        return unsup(d, "attribute 'kernel_shape' is missing");
    if (attr_ints(d, "strides", 8, v, &n))
        return UNSUP;
    if (n >= 0) {
        if (n != 2)
            return unsup(d, "attribute 'strides' must have 2 values");
        l->stride[0] = v[0];
        l->stride[1] = v[1];
    }
    if (attr_ints(d, "dilations", 8, v, &n))
        return UNSUP;
    if (n >= 0) {
        if (n != 2)
            return unsup(d, "attribute 'dilations' must have 2 values");
        l->dilation[0] = v[0];
        l->dilation[1] = v[1];
    }
    if (attr_ints(d, "pads", 8, v, &n))
        return UNSUP;
    if (n >= 0) {
        if (n != 4)
            return unsup(d, "attribute 'pads' must have 4 values");
        /* ONNX: [h_begin, w_begin, h_end, w_end] = top, left, bottom, right. */
        memcpy(l->pad, v, 4 * sizeof(int64_t));
    }
    for (int i = 0; i < 2; i++)
        if (l->stride[i] < 1 || l->stride[i] > 1024 || l->dilation[i] < 1 ||
            l->dilation[i] > 1024 || l->kernel[i] > 1024)
            return unsup(d, "strides, dilations and kernel_shape must be in 1..1024");
    char buf[32];
    const char *ap = attr_str(d->n, "auto_pad", buf, sizeof(buf));
    if (ap && strcmp(ap, "NOTSET") != 0) {
        if (x->ndim != 4)
            return unsup(d, "needs a 4-D input");
        memset(l->pad, 0, sizeof(l->pad));
        if (strcmp(ap, "VALID") == 0)
            return KT_OK;
        if (strcmp(ap, "SAME_UPPER") != 0 && strcmp(ap, "SAME_LOWER") != 0)
            return unsup(d, "unknown auto_pad '%s'", ap);
        for (int i = 0; i < 2; i++) {
            int64_t in = x->d[2 + i], s = l->stride[i];
            int64_t out = (in + s - 1) / s;
            int64_t total = (out - 1) * s + (l->kernel[i] - 1) * l->dilation[i] + 1 - in;
            if (total < 0)
                total = 0;
            int64_t small = total / 2, big = total - small;
            int upper = strcmp(ap, "SAME_UPPER") == 0;
            l->pad[i] = upper ? small : big;
            l->pad[2 + i] = upper ? big : small;
        }
    }
    return KT_OK;
}

static int h_conv(nd_t *d)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    if (!is_const(d, 1))
        return unsup(d, "the weight is computed, not a constant: no te operator takes it");
    cval_t *w = cin(d, 1);
    const net_shape_t xsv = d->im->net->layers[x].out, *xs = &xsv;
    if (w->ndim != 4 || xs->ndim != 4)
        return unsup(d, "only 2-D convolutions (4-D input and weight) are supported");
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_CONV2D, "Conv", &x, 1, &l);
    if (i < 0)
        return i;
    if ((rc = window_attrs(d, xs, l, w->d[2], w->d[3])))
        return rc;
    int64_t group;
    if (attr_int(d, "group", 1, &group))
        return UNSUP;
    if (group < 1 || w->d[1] * group != xs->d[1])
        return unsup(d, "the weight [%lld, %lld, %lld, %lld] with group %lld does not fit %lld "
                     "input channels", (long long)w->d[0], (long long)w->d[1], (long long)w->d[2],
                     (long long)w->d[3], (long long)group, (long long)xs->d[1]);
    l->groups = group;
    l->channels = w->d[0];
    l->bias = has_in(d, 2);
    if (l->bias && !(is_const(d, 2) && cnumel(cin(d, 2)) == w->d[0]))
        return unsup(d, "the bias must be a constant of %lld values", (long long)w->d[0]);
    if ((rc = attach(d, i, "weight", 1, 1.0, P_AS_IS)) ||
        (has_in(d, 2) && (rc = attach(d, i, "bias", 2, 1.0, P_AS_IS))))
        return rc;
    return finish_out(d, i, 0);
}

static int h_pool(nd_t *d, int max)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t xsv = d->im->net->layers[x].out, *xs = &xsv;
    if (xs->ndim != 4)
        return unsup(d, "only 2-D pooling (4-D input) is supported");
    if (max && d->n->n_output > 1 && *d->n->output[1])
        return unsup(d, "the Indices output is not supported");
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_POOL, d->n->op_type, &x, 1, &l);
    if (i < 0)
        return i;
    l->pool_max = max;
    if ((rc = window_attrs(d, xs, l, 0, 0)))
        return rc;
    if (l->dilation[0] != 1 || l->dilation[1] != 1)
        return unsup(d, "dilated pooling: te's pool2d has no dilation");
    int64_t cip, ceil_mode;
    if (attr_int(d, "count_include_pad", 0, &cip) || attr_int(d, "ceil_mode", 0, &ceil_mode))
        return UNSUP;
    const int64_t *merged = d->im->pool_pad[d->idx];
    int padded = 0;
    for (int k = 0; k < 4; k++) {
        l->pad[k] += merged[k];
        padded |= l->pad[k] != 0;
        cip |= merged[k] != 0;   /* the Pad's zeros are elements of every window */
    }
    l->pool_include_pad = !max && cip && padded;
    if (ceil_mode) {
        /* Rounding up is padding the end: -inf for max, and avg counts only
         * elements inside the input, so both stay exact. */
        for (int k = 0; k < 2; k++) {
            int64_t in = xs->d[2 + k], s = l->stride[k], kk = l->kernel[k];
            int64_t span = in + l->pad[k] + l->pad[2 + k] - kk;
            if (span < 0)
                break;   /* finish() reports the window */
            int64_t out = (span + s - 1) / s + 1;
            if ((out - 1) * s >= in + l->pad[k])
                out--;   /* the last window must start inside the input */
            int64_t extra = (out - 1) * s + kk - (in + l->pad[k] + l->pad[2 + k]);
            if (extra > 0 && l->pool_include_pad)
                return unsup(d, "count_include_pad=1 with ceil_mode rounding up: the windows "
                             "past the padding count fewer elements than te's KH * KW");
            if (extra > 0)
                l->pad[2 + k] += extra;
        }
    }
    return finish_out(d, i, 0);
}

/* ---- matmul family --------------------------------------------------------------- */

static int transposed(nd_t *d, int x, const char *suffix, int *out)
{
    const net_shape_t *s = &d->im->net->layers[x].out;
    net_layer_t *l;
    int i = new_layer(d, suffix, NET_SHAPE, "transpose", &x, 1, &l);
    if (i < 0)
        return i;
    l->shape_kind = NET_SHAPE_TRANSPOSE;
    l->ntarget = s->ndim;
    for (int k = 0; k < s->ndim; k++)
        l->target[k] = k;
    l->target[s->ndim - 1] = s->ndim - 2;
    l->target[s->ndim - 2] = s->ndim - 1;
    int rc = finish(d, i);
    *out = i;
    return rc;
}

/* A dense layer's weight [N, K] from a constant [N, K] (Gemm transB=1) or
 * [K, N] (MatMul, Gemm transB=0), scaled by Gemm's alpha as the layer has
 * no separate scale. */
static int dense_weight(nd_t *d, int i, int64_t K, int64_t N, int64_t tb, double alpha)
{
    float *w = NULL;
    int64_t n;
    int rc = const_floats(d->im, d->code[1], &w, &n);
    if (rc)
        return rc;
    if (!w) {
        d->im->params_missing = 1;
        return KT_OK;
    }
    float *o = w;
    if (!tb) {
        if (!(o = malloc((size_t)(N * K) * sizeof(float)))) {
            free(w);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                o[j * K + k] = w[k * N + j];
        free(w);
    }
    if (alpha != 1.0)
        for (int64_t j = 0; j < N * K; j++)
            o[j] = (float)(alpha * o[j]);
    return net_layer_set_param(d->im->net, i, "weight", o, N * K);
}

/* A dense layer's bias [N] from Gemm's C ([N], [1, N] or one value
 * broadcast), times beta. */
static int dense_bias(nd_t *d, int i, int64_t N, double beta)
{
    float *c = NULL;
    int64_t n;
    int rc = const_floats(d->im, d->code[2], &c, &n);
    if (rc)
        return rc;
    if (!c) {
        d->im->params_missing = 1;
        return KT_OK;
    }
    float *b = malloc((size_t)N * sizeof(float));
    if (!b) {
        free(c);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (int64_t j = 0; j < N; j++)
        b[j] = beta == 1.0 ? c[n == 1 ? 0 : j] : (float)(beta * c[n == 1 ? 0 : j]);
    free(c);
    return net_layer_set_param(d->im->net, i, "bias", b, N);
}

static int h_matmul(nd_t *d, int gemm)
{
    int rc, a, b;
    int64_t ta = 0, tb = 0;
    double alpha = 1, beta = 1;
    if (gemm && (attr_int(d, "transA", 0, &ta) || attr_int(d, "transB", 0, &tb) ||
                 attr_float(d, "alpha", 1.0, &alpha) || attr_float(d, "beta", 1.0, &beta)))
        return UNSUP;
    if (!has_in(d, 0) || !has_in(d, 1))
        return unsup(d, "needs two inputs");
    if ((rc = in_layer(d, 0, &a)))
        return rc;
    if (ta && (rc = transposed(d, a, "transpose_a", &a)))
        return rc;
    const net_shape_t *as = &d->im->net->layers[a].out;
    if (as->ndim < 2)
        return unsup(d, "a rank-%d first input: only matrices and batches of them", as->ndim);
    int64_t K = as->d[as->ndim - 1];
    net_layer_t *l;
    int i;
    if (is_const(d, 1) && cin(d, 1)->ndim == 2) {
        /* Constant weights: dense (a [K, N] weight is transposed offline, and
         * Gemm's alpha scales it, both exact for constants). */
        cval_t *w = cin(d, 1);
        int64_t wk = tb ? w->d[1] : w->d[0], N = tb ? w->d[0] : w->d[1];
        if (wk != K)
            return unsup(d, "inner dimensions differ (%lld and %lld)", (long long)K,
                         (long long)wk);
        i = new_layer(d, NULL, NET_DENSE, gemm ? "Gemm" : "MatMul", &a, 1, &l);
        if (i < 0)
            return i;
        l->channels = N;
        if ((rc = dense_weight(d, i, K, N, tb, alpha)))
            return rc;
        l = net_layer(d->im->net, i);
    } else {
        if ((rc = in_layer(d, 1, &b)))
            return rc;
        if (tb && (rc = transposed(d, b, "transpose_b", &b)))
            return rc;
        int in[2] = {a, b};
        i = new_layer(d, alpha != 1.0 ? "matmul" : NULL, NET_MATMUL, gemm ? "Gemm" : "MatMul",
                      in, 2, &l);
        if (i < 0)
            return i;
        if (alpha != 1.0) {
            if ((rc = finish(d, i)))
                return rc;
            i = new_layer(d, NULL, NET_SCALE, "Mul", &i, 1, &l);
            if (i < 0)
                return i;
            l->scalar = 1;
            float *v = malloc(sizeof(float));
            if (!v)
                return kt_err_set(KT_ENOMEM, "out of memory");
            *v = (float)alpha;
            if ((rc = net_layer_set_param(d->im->net, i, "value", v, 1)))
                return rc;
            l = net_layer(d->im->net, i);
        }
    }
    if (gemm && has_in(d, 2) && beta != 0.0) {
        if (!is_const(d, 2))
            return unsup(d, "input C is computed: only a constant bias is supported");
        cval_t *c = cin(d, 2);
        int64_t N = l->op == NET_DENSE ? l->channels : 0;
        int vec = c->ndim >= 0 && c->ndim <= 2 && (cnumel(c) == N || cnumel(c) == 1) &&
                  (c->ndim < 2 || c->d[0] == 1);
        if (l->op == NET_DENSE && vec) {
            l->bias = 1;
            if ((rc = dense_bias(d, i, N, beta)))
                return rc;
        } else {
            /* A full [M, N] constant: a residual-like add of a constant tensor. */
            if ((rc = finish(d, i)))
                return rc;
            int bl;
            if ((rc = materialize_scaled(d, 2, beta, &bl)))
                return rc;
            int in[2] = {i, bl};
            char sfx[16] = "bias";
            i = new_layer(d, sfx, NET_ADD, "Add", in, 2, &l);
        }
    }
    return finish_out(d, i, 0);
}

/* Einsum of two activations that is a batched matrix product (MaxViT's
 * "bghid,bghjd->bghij" and "bghij,bghjd->bghid"): the same batch letters
 * leading every term, one row, one column and one contracted letter, each
 * operand's last two letters in either order (a transpose layer where the
 * matmul needs the other), the output's rows before its columns. */
static int h_einsum(nd_t *d)
{
    char eq[128], t[3][KT_NET_MAX_DIMS + 1];
    const char *e = attr_str(d->n, "equation", eq, sizeof(eq));
    if (!e || nin(d) != 2)
        return unsup(d, "Einsum of %d inputs (two supported)", nin(d));
    int n[3] = {0, 0, 0}, term = 0;
    for (const char *p = e; *p; p++) {
        if (*p == ' ')
            continue;
        if (*p == ',' && term == 0) {
            term = 1;
        } else if (*p == '-' && p[1] == '>' && term == 1) {
            term = 2;
            p++;
        } else if (((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) &&
                   n[term] < KT_NET_MAX_DIMS) {
            t[term][n[term]++] = *p;
        } else {
            return unsup(d, "Einsum equation '%s': only letters, one ',' and '->' supported", e);
        }
    }
    int nb = n[2] - 2;
    int ok = term == 2 && nb >= 0 && n[0] == nb + 2 && n[1] == nb + 2 && !memcmp(t[0], t[2], (size_t)nb) &&
             !memcmp(t[1], t[2], (size_t)nb);
    char M = ok ? t[2][nb] : 0, N = ok ? t[2][nb + 1] : 0, K = 0;
    /* The contracted letter: in both operands, not in the output. */
    for (int q = nb; ok && q < nb + 2; q++)
        if (t[0][q] != M)
            K = t[0][q];
    ok = ok && K && K != N && M != N &&
         ((t[0][nb] == M && t[0][nb + 1] == K) || (t[0][nb] == K && t[0][nb + 1] == M)) &&
         ((t[1][nb] == K && t[1][nb + 1] == N) || (t[1][nb] == N && t[1][nb + 1] == K));
    if (!ok)
        return unsup(d, "Einsum '%s' is not a batched matrix product", e);
    int a, b, rc;
    if ((rc = in_layer(d, 0, &a)) || (rc = in_layer(d, 1, &b)))
        return rc;
    if (d->im->net->layers[a].out.ndim != nb + 2 || d->im->net->layers[b].out.ndim != nb + 2)
        return unsup(d, "Einsum '%s': the operands' ranks differ from the equation's", e);
    if (t[0][nb] == K && (rc = transposed(d, a, "transpose_a", &a)))
        return rc;
    if (t[1][nb] == N && (rc = transposed(d, b, "transpose_b", &b)))
        return rc;
    int in[2] = {a, b};
    net_layer_t *l;
    return finish_out(d, new_layer(d, NULL, NET_MATMUL, "Einsum", in, 2, &l), 0);
}

/* ---- elementwise ------------------------------------------------------------------- */

/* Reference-operator forms (below) of nodes the handlers here do not map. */
static int rf_softmax(nd_t *d, int log_softmax);
static int rf_reduce(nd_t *d, int code, const char *op);
static int rf_binary(nd_t *d, int code, const char *op);

/* The one axis of x a constant of shape c broadcasts along (all its other
 * dimensions 1); -1 if none, -2 for a single element. */
static int const_axis(const cval_t *c, const net_shape_t *x)
{
    int64_t n = cnumel(c);
    if (n == 1)
        return -2;
    if (c->ndim < 1 || c->ndim > x->ndim)
        return -1;
    int axis = -1;
    for (int i = 0; i < c->ndim; i++) {
        int xi = i + (x->ndim - c->ndim);
        if (c->d[i] == 1)
            continue;
        if (c->d[i] != x->d[xi] || axis >= 0)
            return -1;
        axis = xi;
    }
    return axis;
}

static int h_binary(nd_t *d, const char *op)
{
    int add = strcmp(op, "Add") == 0, sub = strcmp(op, "Sub") == 0;
    int mul = strcmp(op, "Mul") == 0, div = strcmp(op, "Div") == 0;
    if (!has_in(d, 0) || !has_in(d, 1))
        return unsup(d, "needs two inputs");
    net_layer_t *l;
    int rc;
    int ci = is_const(d, 0) ? 0 : is_const(d, 1) ? 1 : -1;
    if (ci >= 0) {
        int xi = 1 - ci;
        int x = d->code[xi];
        const net_shape_t *xs = lshape(d, xi);
        cval_t *c = cin(d, ci);
        int axis = const_axis(c, xs);
        /* x + c, c + x, x - c: a bias; x * c, c * x, x / c: a scale. */
        int biasable = (add || (sub && ci == 1)) && axis != -1;
        int scalable = (mul || (div && ci == 1)) && axis != -1;
        if (biasable || scalable) {
            int i = new_layer(d, NULL, biasable ? NET_BIAS_ADD : NET_SCALE, op, &x, 1, &l);
            if (i < 0)
                return i;
            l->scalar = axis == -2;
            l->axis = axis == -2 ? 0 : axis;
            /* The constant has one non-1 dimension: its values in order are
             * those along the axis. */
            if ((rc = attach(d, i, "value", ci, 1.0, sub ? P_NEGATE : div ? P_INVERT : P_AS_IS)))
                return rc;
            return finish_out(d, i, 0);
        }
        if ((add || (sub && ci == 1)) && cnumel(c) >= 0) {
            /* x + C with C of x's shape: the add of two tensors (-C for sub);
             * a C that broadcasts to x's shape (an attention mask) is
             * expanded to it, so the add stays an epilogue of x's task. */
            int cl;
            if ((rc = materialize_bcast(d, ci, sub ? -1.0 : 1.0, xs, &cl)))
                return rc;
            int in[2] = {x, cl};
            return finish_out(d, new_layer(d, NULL, NET_ADD, op, in, 2, &l), 0);
        }
        /* c - x, c / x, a constant of any other shape: the reference call. */
        return rf_binary(d, add ? KT_RB_ADD : sub ? KT_RB_SUB : mul ? KT_RB_MUL : KT_RB_DIV, op);
    }
    int a, b;
    if ((rc = in_layer(d, 0, &a)) || (rc = in_layer(d, 1, &b)))
        return rc;
    int in[2] = {a, b};
    if (add)
        return finish_out(d, new_layer(d, NULL, NET_ADD, op, in, 2, &l), 0);
    char label[16];
    snprintf(label, sizeof(label), "%s", mul ? "mul" : div ? "div" : sub ? "sub" : op);
    return finish_out(d, new_layer(d, NULL, NET_ELEMWISE, label, in, 2, &l), 0);
}

/* A scalar constant input or attribute (Clip's min and max). */
static int scalar_in(nd_t *d, int k, double *v, int *given)
{
    *given = 0;
    if (!has_in(d, k))
        return KT_OK;
    if (!is_const(d, k) || !cin(d, k)->known || cnumel(cin(d, k)) != 1)
        return unsup(d, "input %d must be a known scalar constant", k);
    *v = cget_f(cin(d, k), 0);
    *given = 1;
    return KT_OK;
}

static int h_clip(nd_t *d)
{
    double lo = -INFINITY, hi = INFINITY, v;
    int g;
    if (d->im->opset < 11) {
        if (attr_float(d, "min", -INFINITY, &lo) || attr_float(d, "max", INFINITY, &hi))
            return UNSUP;
    } else {
        if (scalar_in(d, 1, &v, &g))
            return UNSUP;
        if (g)
            lo = v;
        if (scalar_in(d, 2, &v, &g))
            return UNSUP;
        if (g)
            hi = v;
    }
    if (lo == 0.0 && isinf(hi) && hi > 0)
        return simple(d, NET_RELU, "Clip");   /* clip(x, 0, inf) is relu, exactly */
    if (isnan(lo) || isnan(hi) || lo > hi)
        return unsup(d, "clip bounds must satisfy min <= max");
    /* te's clip takes finite bounds: an open side is the float32 extreme,
     * the same on every finite input. */
    int x, rc = in_layer(d, 0, &x);
    if (rc)
        return rc;
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_CLIP, "clip", &x, 1, &l);
    if (i >= 0) {
        l->lo = isinf(lo) ? -FLT_MAX : lo;
        l->hi = isinf(hi) ? FLT_MAX : hi;
    }
    return finish_out(d, i, 0);
}

/* ---- normalization, softmax ----------------------------------------------------- */

static int h_softmax(nd_t *d)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t xsv = d->im->net->layers[x].out, *xs = &xsv;
    int64_t axis;
    if (attr_int(d, "axis", d->im->opset >= 13 ? -1 : 1, &axis))
        return UNSUP;
    if (axis < -xs->ndim || axis >= xs->ndim)
        return unsup(d, "axis %lld is out of range for rank %d", (long long)axis, xs->ndim);
    if (axis < 0)
        axis += xs->ndim;
    net_layer_t *l;
    if (axis == xs->ndim - 1 && xs->ndim >= 2)
        return simple(d, NET_SOFTMAX, "Softmax");
    if (d->im->opset >= 13 || axis == 0)
        return rf_softmax(d, 0);   /* not the last axis: no task */
    /* Before opset 13 softmax works on the input flattened to 2-D at axis:
     * a last-axis softmax of the reshaped tensor, exactly. */
    int f = new_layer(d, "flatten", NET_SHAPE, "flatten", &x, 1, &l);
    if (f < 0)
        return f;
    l->shape_kind = NET_SHAPE_FLATTEN;
    l->axis = (int)axis;
    if ((rc = finish(d, f)))
        return rc;
    int s = new_layer(d, "softmax", NET_SOFTMAX, "Softmax", &f, 1, &l);
    if ((rc = finish(d, s)))
        return rc;
    int r = new_layer(d, NULL, NET_SHAPE, "reshape", &s, 1, &l);
    if (r < 0)
        return r;
    l->shape_kind = NET_SHAPE_EXPLICIT;
    l->ntarget = xs->ndim;
    memcpy(l->target, xs->d, sizeof(l->target));
    return finish_out(d, r, 0);
}

static int h_layer_norm(nd_t *d)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t *xs = &d->im->net->layers[x].out;
    int64_t axis;
    if (attr_int(d, "axis", -1, &axis))
        return UNSUP;
    if (axis != -1 && axis != xs->ndim - 1)
        return unsup(d, "normalizing from axis %lld: te's layer_norm normalizes the last axis "
                     "only", (long long)axis);
    int scale = has_in(d, 1), bias = has_in(d, 2);
    if (scale != bias)
        return unsup(d, "a scale without a bias (or the reverse): te's layer_norm has both or "
                     "neither");
    for (size_t k = 1; k < d->n->n_output; k++)
        if (*d->n->output[k])
            return unsup(d, "the Mean and InvStdDev outputs are not supported");
    int64_t D = xs->ndim >= 1 ? xs->d[xs->ndim - 1] : -1;
    for (int k = 1; scale && k <= 2; k++)
        if (is_const(d, k) && cnumel(cin(d, k)) != D)
            return unsup(d, "input %d has %lld values for a last axis of %lld", k,
                         (long long)cnumel(cin(d, k)), (long long)D);
    double eps;
    if (attr_float(d, "epsilon", 1e-5, &eps))
        return UNSUP;
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_LAYER_NORM, "LayerNormalization", &x, 1, &l);
    if (i < 0)
        return i;
    l->affine = scale;
    l->eps = eps;
    if (scale && ((rc = attach(d, i, "gamma", 1, 1.0, P_AS_IS)) ||
                  (rc = attach(d, i, "beta", 2, 1.0, P_AS_IS))))
        return rc;
    return finish_out(d, i, 0);
}

static int h_batch_norm(nd_t *d)
{
    for (int k = 1; k <= 4; k++)
        if (!is_const(d, k))
            return unsup(d, "input %d must be a constant", k);
    for (size_t k = 1; k < d->n->n_output; k++)
        if (*d->n->output[k])
            return unsup(d, "training outputs (running mean and variance) are not supported");
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t *xs = &d->im->net->layers[x].out;
    if (xs->ndim < 2)
        return unsup(d, "the input needs channels on axis 1 (rank %d)", xs->ndim);
    int64_t C = xs->d[1];
    for (int k = 1; k <= 4; k++)
        if (cnumel(cin(d, k)) != C)
            return unsup(d, "input %d has %lld values for %lld channels", k,
                         (long long)cnumel(cin(d, k)), (long long)C);
    double eps;
    if (attr_float(d, "epsilon", 1e-5, &eps))
        return UNSUP;
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_BATCH_NORM, "BatchNormalization", &x, 1, &l);
    if (i < 0)
        return i;
    l->eps = eps;
    static const char *const roles[] = {"gamma", "beta", "mean", "var"};
    for (int k = 1; k <= 4; k++)
        if ((rc = attach(d, i, roles[k - 1], k, 1.0, P_AS_IS)))
            return rc;
    return finish_out(d, i, 0);
}

/* ---- shape operators ----------------------------------------------------------------- */

static int shape_layer(nd_t *d, int x, int k, net_shape_kind_t kind, int n, const int64_t *t,
                       int axis, const char *label)
{
    net_layer_t *l;
    int i = new_layer(d, k ? d->n->output[k] : NULL, NET_SHAPE, label, &x, 1, &l);
    if (i < 0)
        return i;
    l->shape_kind = kind;
    l->ntarget = n;
    if (n > 0)
        memcpy(l->target, t, (size_t)n * sizeof(int64_t));
    l->axis = axis;
    return finish_out(d, i, k);
}

/* Input k as known integer constants (axes, shapes, starts...). */
static int ints_in(nd_t *d, int k, int64_t *out, int max, int *n)
{
    if (!is_const(d, k) || !cin(d, k)->known)
        return unsup(d, "input %d ('%s') must be a constant known when importing", k,
                     k < nin(d) ? d->n->input[k] : "");
    cval_t *c = cin(d, k);
    int64_t cnt = cnumel(c);
    if (cnt > max)
        return unsup(d, "input %d has more than %d values", k, max);
    for (int64_t i = 0; i < cnt; i++)
        out[i] = cget_i(c, i);
    *n = (int)cnt;
    return KT_OK;
}

/* Axes of Squeeze/Unsqueeze/Reduce*: attribute before opset 13, input after. */
static int axes_of(nd_t *d, int64_t *axes, int *n)
{
    if (d->im->opset >= 13) {
        *n = -1;
        if (!has_in(d, 1))
            return KT_OK;
        return ints_in(d, 1, axes, KT_NET_MAX_DIMS, n);
    }
    return attr_ints(d, "axes", KT_NET_MAX_DIMS, axes, n);
}

/* Output shape of Squeeze / Unsqueeze on shape s; 0 or UNSUP. */
static int squeeze_shape(nd_t *d, const int64_t *s, int ndim, int unsqueeze, int64_t *out,
                         int *on)
{
    int64_t axes[KT_NET_MAX_DIMS];
    int n;
    if (axes_of(d, axes, &n))
        return UNSUP;
    if (unsqueeze) {
        if (n < 1 || ndim + n > KT_NET_MAX_DIMS)
            return unsup(d, "Unsqueeze needs 1 to %d axes", KT_NET_MAX_DIMS - ndim);
        int r = ndim + n, mark[KT_NET_MAX_DIMS] = {0};
        for (int i = 0; i < n; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
            if (a < 0 || a >= r || mark[a])
                return unsup(d, "bad Unsqueeze axis %lld", (long long)axes[i]);
            mark[a] = 1;
        }
        for (int i = 0, j = 0; i < r; i++)
            out[i] = mark[i] ? 1 : s[j++];
        *on = r;
        return KT_OK;
    }
    int drop[KT_NET_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++)
        drop[i] = n < 0 && s[i] == 1;
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + ndim : axes[i];
        if (a < 0 || a >= ndim || s[a] != 1)
            return unsup(d, "bad Squeeze axis %lld", (long long)axes[i]);
        drop[a] = 1;
    }
    *on = 0;
    for (int i = 0; i < ndim; i++)
        if (!drop[i])
            out[(*on)++] = s[i];
    return KT_OK;
}

/* Slice bounds for one axis, clamped as the ONNX spec says: starts to
 * [0, dim] (stepping forward) or [0, dim - 1] (backward), ends to [0, dim]
 * or [-1, dim - 1]. Sizes near INT64_MAX mean "to the end". */
static int64_t slice_start(int64_t dim, int64_t start, int64_t step)
{
    if (start < 0)
        start = start < -dim ? 0 : start + dim;
    int64_t hi = step > 0 ? dim : dim - 1;
    return start > hi ? hi : start;
}

static int64_t slice_len(int64_t dim, int64_t start, int64_t end, int64_t step)
{
    start = slice_start(dim, start, step);
    if (end < 0)
        end = end < -dim ? (step > 0 ? 0 : -1) : end + dim;
    if (step > 0) {
        end = end > dim ? dim : end;
        return end > start ? (end - start - 1) / step + 1 : 0;
    }
    end = end > dim - 1 ? dim - 1 : end;
    return start > end ? (start - end - 1) / (-step) + 1 : 0;
}

/* Slice parameters (opset >= 10 inputs, or attributes before). */
static int slice_params(nd_t *d, int ndim, int64_t *st, int64_t *en, int64_t *sp, int *ax,
                        int *n)
{
    int64_t axes[KT_NET_MAX_DIMS], steps[KT_NET_MAX_DIMS];
    int ns, ne, na = -1, np = -1;
    if (d->im->opset >= 10) {
        if (ints_in(d, 1, st, KT_NET_MAX_DIMS, &ns) || ints_in(d, 2, en, KT_NET_MAX_DIMS, &ne))
            return UNSUP;
        if (has_in(d, 3) && ints_in(d, 3, axes, KT_NET_MAX_DIMS, &na))
            return UNSUP;
        if (has_in(d, 4) && ints_in(d, 4, steps, KT_NET_MAX_DIMS, &np))
            return UNSUP;
    } else {
        if (attr_ints(d, "starts", KT_NET_MAX_DIMS, st, &ns) ||
            attr_ints(d, "ends", KT_NET_MAX_DIMS, en, &ne) ||
            attr_ints(d, "axes", KT_NET_MAX_DIMS, axes, &na))
            return UNSUP;
    }
    if (ns < 0 || ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns))
        return unsup(d, "starts, ends, axes and steps must have one length");
    for (int i = 0; i < ns; i++) {
        int64_t a = na >= 0 ? axes[i] : i;
        if (a < 0)
            a += ndim;
        if (a < 0 || a >= ndim)
            return unsup(d, "slice axis out of range");
        ax[i] = (int)a;
        sp[i] = np >= 0 ? steps[i] : 1;
        if (sp[i] == 0)
            return unsup(d, "a slice step of 0");
    }
    *n = ns;
    return KT_OK;
}

/* Flatten, Reshape, Transpose, Squeeze and Unsqueeze of an activation: shape layers. */
static int h_shape_op(nd_t *d, const char *op)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t xsv = d->im->net->layers[x].out, *xs = &xsv;
    int64_t t[KT_NET_MAX_DIMS], v;
    int n;
    if (strcmp(op, "Flatten") == 0) {
        if (attr_int(d, "axis", 1, &v))
            return UNSUP;
        if (v < 0)
            v += xs->ndim;
        return shape_layer(d, x, 0, NET_SHAPE_FLATTEN, 0, NULL, (int)v, "flatten");
    }
    if (strcmp(op, "Reshape") == 0) {
        int64_t allowzero;
        if (ints_in(d, 1, t, KT_NET_MAX_DIMS, &n) || attr_int(d, "allowzero", 0, &allowzero))
            return UNSUP;
        for (int i = 0; i < n; i++)
            if (t[i] == 0 && allowzero)
                return unsup(d, "a zero-sized dimension (allowzero)");
        return shape_layer(d, x, 0, NET_SHAPE_RESHAPE, n, t, 0, "reshape");
    }
    if (strcmp(op, "Transpose") == 0) {
        if (attr_ints(d, "perm", KT_NET_MAX_DIMS, t, &n))
            return UNSUP;
        if (n < 0) {
            n = xs->ndim;
            for (int i = 0; i < n; i++)
                t[i] = n - 1 - i;
        }
        return shape_layer(d, x, 0, NET_SHAPE_TRANSPOSE, n, t, 0, "transpose");
    }
    if (strcmp(op, "Squeeze") == 0 || strcmp(op, "Unsqueeze") == 0) {
        if (squeeze_shape(d, xs->d, xs->ndim, op[0] == 'U', t, &n))
            return UNSUP;
        if (n == 0)
            return unsup(d, "a scalar result");
        return shape_layer(d, x, 0, NET_SHAPE_EXPLICIT, n, t, 0, "reshape");
    }
    return unsup(d, "not a shape operator");
}

static int h_concat(nd_t *d)
{
    int64_t axis;
    if (attr_int(d, "axis", 0, &axis))
        return UNSUP;
    int in[ND_MAX_IN], n = 0, rc;
    if (nin(d) < 1 || nin(d) > ND_MAX_IN)
        return unsup(d, "1 to %d inputs supported", ND_MAX_IN);
    for (int k = 0; k < nin(d); k++)
        if (has_in(d, k) && (rc = in_layer(d, k, &in[n++])))
            return rc;
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_SHAPE, "concat", in, n, &l);
    if (i < 0)
        return i;
    l->shape_kind = NET_SHAPE_CONCAT;
    l->axis = (int)axis;
    return finish_out(d, i, 0);
}

/* ReduceMean over H and W of a 4-D tensor is a global average pool
 * (exporters write x.mean((2, 3)) so); other reductions have no te operator. */
static int h_reduce_mean(nd_t *d)
{
    int x, rc;
    if ((rc = in_layer(d, 0, &x)))
        return rc;
    const net_shape_t xs = d->im->net->layers[x].out;
    int64_t axes[KT_NET_MAX_DIMS], keep;
    int n = -1;
    if (attr_int(d, "keepdims", 1, &keep))
        return UNSUP;
    if (d->im->opset >= 18) {
        if (has_in(d, 1) && ints_in(d, 1, axes, KT_NET_MAX_DIMS, &n))
            return UNSUP;
    } else if (attr_ints(d, "axes", KT_NET_MAX_DIMS, axes, &n)) {
        return UNSUP;
    }
    int hw = 0;
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + xs.ndim : axes[i];
        hw |= a == 2 ? 1 : a == 3 ? 2 : 4;
    }
    if (xs.ndim != 4 || n != 2 || hw != 3)
        return rf_reduce(d, KT_RR_MEAN, "ReduceMean");
    net_layer_t *l;
    if (keep)
        return finish_out(d, new_layer(d, NULL, NET_GLOBAL_POOL, "ReduceMean", &x, 1, &l), 0);
    int g = new_layer(d, "pool", NET_GLOBAL_POOL, "ReduceMean", &x, 1, &l);
    if ((rc = finish(d, g)))
        return rc;
    int64_t t[2] = {xs.d[0], xs.d[1]};
    return shape_layer(d, g, 0, NET_SHAPE_EXPLICIT, 2, t, 0, "reshape");
}

/* ---- reference operators --------------------------------------------------------------
 * Every operator with no task and no simpler layer form is one call of its
 * reference implementation (refop.h), built here from the node once: a
 * node of constants only is folded by running that call on the constants
 * (double), any other becomes a NET_REFOP layer the built network runs
 * (float). So folding and the built network compute an operator with the
 * same code. */

#define NOT_REFOP 2              /* refop_node: the operator has no reference form */

static int const_out(nd_t *d, int k, cval_t **c);
#define FOLD_MAX_VALUES FOLD_LIMIT   /* folded results kept with their values */

/* Shape of node input j (a layer or a constant); 0 or UNSUP. */
static int in_shape(nd_t *d, int j, int *nd, int64_t *dims)
{
    if (!has_in(d, j))
        return unsup(d, "input %d is missing", j);
    if (is_layer(d, j)) {
        *nd = lshape(d, j)->ndim;
        memcpy(dims, lshape(d, j)->d, sizeof(int64_t) * KT_NET_MAX_DIMS);
        return KT_OK;
    }
    const cval_t *c = cin(d, j);
    if (c->ndim < 0)
        return unsup(d, "input %d is a constant of unknown shape", j);
    *nd = c->ndim;
    memcpy(dims, c->d, sizeof(int64_t) * KT_NET_MAX_DIMS);
    return KT_OK;
}

/* Run call r on node inputs slot[0..r->nin) as the node's output k, shaped
 * `target` when ntarget >= 0 (a reshape of the call's output). A result of
 * integer type (is_int) is rounded when folded. With k < 0 the result is a
 * partial one of a chain: defined as no output, its code in d->last. */
static int refop_call(nd_t *d, kt_refop_t *r, const int *slot, int k, int ntarget,
                      const int64_t *target, int is_int, const char *label)
{
    int known = 1, layers[KT_REFOP_MAX_IN], nl = 0, rc;
    for (int s = 0; s < r->nin; s++) {
        if (in_shape(d, slot[s], &r->ndim[s], r->din[s]))
            return UNSUP;
        /* A large initializer is read for folding from its tensor (a weight
         * a model transposes or scales in its graph). */
        const cval_t *c = is_layer(d, slot[s]) ? NULL : cin(d, slot[s]);
        if (!c || !(c->known || (c->src && cnumel(c) <= FOLD_LIMIT)))
            known = 0;
    }
    if (kt_refop_infer(r))
        return unsup(d, "%s", kt_err_msg());
    int64_t numel = kt_refop_numel(r->ondim, r->dout);
    if (ntarget < 0) {
        ntarget = r->ondim;
        target = r->dout;
    }
    if (known && numel <= FOLD_MAX_VALUES) {
        double *in[KT_REFOP_MAX_IN] = {NULL}, *out = malloc(((size_t)numel + 1) * sizeof(double));
        rc = out ? KT_OK : kt_err_set(KT_ENOMEM, "out of memory");
        int held = 1;
        for (int s = 0; rc == KT_OK && held && s < r->nin; s++) {
            const cval_t *c = cin(d, slot[s]);
            int64_t n = cnumel(c);
            float *fv = NULL;
            if (!c->known && (rc = tensor_floats(c->src, n, &fv)) == KT_OK && !fv)
                held = 0;   /* its values are not in the file: not folded */
            if (rc == KT_OK && held && !(in[s] = malloc(((size_t)n + 1) * sizeof(double))))
                rc = kt_err_set(KT_ENOMEM, "out of memory");
            for (int64_t q = 0; in[s] && q < n; q++)
                in[s][q] = fv ? fv[q] : cget_f(c, q);
            free(fv);
        }
        if (rc == KT_OK && held)
            kt_refop_run_d(r, (const double *const *)in, out);
        for (int s = 0; s < r->nin; s++)
            free(in[s]);
        if (rc == KT_OK && !held) {
            free(out);
            goto as_layer;
        }
        cval_t *o = NULL;
        if (rc == KT_OK && k < 0 && !(o = new_const(d->im, &d->last)))
            rc = KT_ENOMEM;
        if (rc == KT_OK && (k < 0 || (rc = const_out(d, k, &o)) == KT_OK)) {
            o->ndim = ntarget;
            memcpy(o->d, target, (size_t)ntarget * sizeof(int64_t));
            o->known = 1;
            o->is_int = is_int;
            if (is_int) {
                if (!(o->iv = malloc(((size_t)numel + 1) * sizeof(int64_t))))
                    rc = kt_err_set(KT_ENOMEM, "out of memory");
                for (int64_t q = 0; o->iv && q < numel; q++)
                    o->iv[q] = out[q] != out[q] ? 0
                               : out[q] >= 9.2e18 ? INT64_MAX
                               : out[q] <= -9.2e18 ? INT64_MIN
                                                   : (int64_t)out[q];
            } else {
                o->fv = out;
                out = NULL;
            }
        }
        free(out);
        return rc;
    }
as_layer:
    for (int s = 0; s < r->nin; s++)
        if (is_layer(d, slot[s]))
            layers[nl++] = d->code[slot[s]];
    net_layer_t *l;
    int i = new_layer(d, k < 0 ? "part" : k ? d->n->output[k] : NULL, NET_REFOP, label, layers, nl,
                      &l);
    if (i < 0)
        return i;
    if (!(l->rop = malloc(sizeof(*r))))
        return kt_err_set(KT_ENOMEM, "out of memory");
    *l->rop = *r;
    l->ntarget = ntarget;
    memcpy(l->target, target, (size_t)ntarget * sizeof(int64_t));
    for (int s = 0, at = 0; s < r->nin; s++) {
        l->rop_src[s] = is_layer(d, slot[s]) ? at++ : -1;
        if (!is_layer(d, slot[s]) && (rc = attach(d, i, net_refop_roles[s], slot[s], 1.0, P_AS_IS)))
            return rc;
    }
    if (k >= 0)
        return finish_out(d, i, k);
    d->last = i;
    return finish(d, i);
}

/* Code c (a partial result) as an extra input of the node; its index. */
static int add_extra(nd_t *d, int c)
{
    int j = nin(d) + d->nextra;
    if (j >= ND_MAX_IN)
        return unsup(d, "too many partial results");
    d->code[j] = c;
    d->present[j] = 1;
    d->nextra++;
    return j;
}

static int is_int_in(nd_t *d, int j)
{
    return is_const(d, j) && cin(d, j)->is_int;
}

/* A call with the node's first n inputs in order. */
static int refop_simple(nd_t *d, kt_refop_t *r, int n, int is_int, const char *label)
{
    int slot[KT_REFOP_MAX_IN] = {0, 1, 2};
    r->nin = n;
    return refop_call(d, r, slot, 0, -1, NULL, is_int, label);
}

typedef struct {
    const char *onnx;
    int code;
    const char *p0, *p1;   /* attribute names of fa[0], fa[1] */
    double d0, d1;         /* and their defaults */
} unary_def_t;

static const unary_def_t unary_defs[] = {
    {"Erf", KT_RU_ERF, 0, 0, 0, 0}, {"Exp", KT_RU_EXP, 0, 0, 0, 0},
    {"Log", KT_RU_LOG, 0, 0, 0, 0}, {"Sqrt", KT_RU_SQRT, 0, 0, 0, 0},
    {"Reciprocal", KT_RU_RECIPROCAL, 0, 0, 0, 0}, {"Neg", KT_RU_NEG, 0, 0, 0, 0},
    {"Abs", KT_RU_ABS, 0, 0, 0, 0}, {"Softplus", KT_RU_SOFTPLUS, 0, 0, 0, 0},
    {"Softsign", KT_RU_SOFTSIGN, 0, 0, 0, 0}, {"LeakyRelu", KT_RU_LEAKYRELU, "alpha", 0, 0.01, 0},
    {"HardSigmoid", KT_RU_HARDSIGMOID, "alpha", "beta", HARDSIGMOID_ALPHA, HARDSIGMOID_BETA},
    {"HardSwish", KT_RU_HARDSWISH, 0, 0, 0, 0}, {"Elu", KT_RU_ELU, "alpha", 0, 1.0, 0},
    {"Selu", KT_RU_SELU, "alpha", "gamma", 1.67326319217681884765625, 1.05070102214813232421875},
    {"Celu", KT_RU_CELU, "alpha", 0, 1.0, 0}, {"ThresholdedRelu", KT_RU_THRESHOLDEDRELU, "alpha", 0, 1.0, 0},
    {"Floor", KT_RU_FLOOR, 0, 0, 0, 0}, {"Ceil", KT_RU_CEIL, 0, 0, 0, 0},
    {"Round", KT_RU_ROUND, 0, 0, 0, 0}, {"Sin", KT_RU_SIN, 0, 0, 0, 0},
    {"Cos", KT_RU_COS, 0, 0, 0, 0}, {"Sign", KT_RU_SIGN, 0, 0, 0, 0},
    {"Mish", KT_RU_MISH, 0, 0, 0, 0}, {"Not", KT_RU_NOT, 0, 0, 0, 0},
    {"IsNaN", KT_RU_ISNAN, 0, 0, 0, 0}, {"IsInf", KT_RU_ISINF, 0, 0, 0, 0},
    {"Relu", KT_RU_RELU, 0, 0, 0, 0}, {"Sigmoid", KT_RU_SIGMOID, 0, 0, 0, 0},
    {"Tanh", KT_RU_TANH, 0, 0, 0, 0}, {"Identity", KT_RU_IDENTITY, 0, 0, 0, 0},
};

static const struct {
    const char *onnx;
    int code;
} binary_defs[] = {
    {"Add", KT_RB_ADD}, {"Sub", KT_RB_SUB}, {"Mul", KT_RB_MUL}, {"Div", KT_RB_DIV},
    {"Pow", KT_RB_POW}, {"Max", KT_RB_MAX}, {"Min", KT_RB_MIN}, {"Mod", KT_RB_MOD},
    {"Equal", KT_RB_EQUAL}, {"Less", KT_RB_LESS}, {"Greater", KT_RB_GREATER},
    {"LessOrEqual", KT_RB_LESS_EQUAL}, {"GreaterOrEqual", KT_RB_GREATER_EQUAL},
    {"And", KT_RB_AND}, {"Or", KT_RB_OR}, {"Xor", KT_RB_XOR}, {"PRelu", KT_RB_PRELU},
};

static const struct {
    const char *onnx;
    int code;
} reduce_defs[] = {
    {"ReduceSum", KT_RR_SUM}, {"ReduceMean", KT_RR_MEAN}, {"ReduceMax", KT_RR_MAX},
    {"ReduceMin", KT_RR_MIN}, {"ReduceProd", KT_RR_PROD}, {"ReduceL1", KT_RR_L1},
    {"ReduceL2", KT_RR_L2}, {"ReduceSumSquare", KT_RR_SUMSQUARE},
    {"ReduceLogSum", KT_RR_LOGSUM}, {"ReduceLogSumExp", KT_RR_LOGSUMEXP},
};

/* Row-major strides of a shape. */
static void row_strides(int nd, const int64_t *d, int64_t *s)
{
    int64_t acc = 1;
    for (int k = nd - 1; k >= 0; k--) {
        s[k] = acc;
        acc *= d[k];
    }
}

static int rf_unary(nd_t *d, const unary_def_t *u)
{
    kt_refop_t r = {.op = KT_REFOP_UNARY, .ia = {u->code}};
    if ((u->p0 && attr_float(d, u->p0, u->d0, &r.fa[0])) ||
        (u->p1 && attr_float(d, u->p1, u->d1, &r.fa[1])))
        return UNSUP;
    int is_int = u->code == KT_RU_NOT || u->code == KT_RU_ISNAN || u->code == KT_RU_ISINF ||
                 ((u->code == KT_RU_NEG || u->code == KT_RU_ABS || u->code == KT_RU_SIGN ||
                   u->code == KT_RU_IDENTITY || u->code == KT_RU_RELU) && is_int_in(d, 0));
    return refop_simple(d, &r, 1, is_int, u->onnx);
}

/* Max, Min, Sum and Mean of any number of inputs: a chain of binary calls
 * (numpy broadcasting at each), Mean's sum divided by the count. */
static int rf_variadic(nd_t *d, int code, const char *op, int mean)
{
    int n = nin(d), acc = 0, rc;
    for (int j = 0; j < n; j++)
        if (!has_in(d, j))
            return unsup(d, "input %d of %s is missing", j, op);
    if (n == 1 && !mean)
        return is_layer(d, 0) ? alias(d, 0) : unsup(d, "%s of one constant", op);
    for (int j = 1; j < n; j++) {
        int last = j == n - 1 && !mean;
        kt_refop_t r = {.op = KT_REFOP_BINARY, .nin = 2, .ia = {code}};
        int slot[2] = {acc, j};
        if ((rc = refop_call(d, &r, slot, last ? 0 : -1, -1, NULL, 0, op)))
            return rc;
        if (!last && (acc = add_extra(d, d->last)) < 0)
            return UNSUP;
    }
    if (!mean)
        return KT_OK;
    cval_t *c = new_const(d->im, &rc);
    if (!c)
        return KT_ENOMEM;
    c->ndim = 0;
    if (calloc_vals(c, 0))
        return KT_ENOMEM;
    c->fv[0] = 1.0 / n;
    int cj = add_extra(d, rc);
    if (cj < 0)
        return UNSUP;
    kt_refop_t r = {.op = KT_REFOP_BINARY, .nin = 2, .ia = {KT_RB_MUL}};
    int slot[2] = {acc, cj};
    return refop_call(d, &r, slot, 0, -1, NULL, 0, op);
}

static int rf_binary(nd_t *d, int code, const char *op)
{
    if (nin(d) != 2 && (code == KT_RB_MAX || code == KT_RB_MIN))
        return rf_variadic(d, code, op, 0);
    if (nin(d) != 2)
        return unsup(d, "%s of %d inputs (2 supported)", op, nin(d));
    kt_refop_t r = {.op = KT_REFOP_BINARY, .ia = {code}};
    int both_int = is_int_in(d, 0) && is_int_in(d, 1);
    if (code == KT_RB_MOD) {
        int64_t fm;
        if (attr_int(d, "fmod", 0, &fm))
            return UNSUP;
        if (fm)
            r.ia[0] = KT_RB_FMOD;
    }
    if (code == KT_RB_DIV && both_int)
        r.ia[0] = KT_RB_IDIV;
    int is_int = code >= KT_RB_EQUAL && code <= KT_RB_XOR ? 1 : both_int;
    return refop_simple(d, &r, 2, is_int, op);
}

/* A strided view of input 0 (Slice, Expand, Tile, Transpose, Split). */
static int rf_view(nd_t *d, int k, int nd, const int64_t *dims, const int64_t *start,
                   const int64_t *step, const int64_t *mod, const char *label)
{
    kt_refop_t r = {.op = KT_REFOP_VIEW, .nin = 1};
    int nid;
    int64_t din[KT_NET_MAX_DIMS], st[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nid, din))
        return UNSUP;
    row_strides(nid, din, st);
    r.ondim = nd;
    memcpy(r.dout, dims, (size_t)nd * sizeof(int64_t));
    for (int q = 0; q < nd; q++) {
        r.ia[1 + q] = step[q];
        r.ia[1 + KT_REFOP_MAX_DIMS + q] = mod ? mod[q] : 0;
    }
    for (int q = 0; q < nid; q++)
        r.ia[0] += start[q] * st[q];
    int slot[1] = {0};
    return refop_call(d, &r, slot, k, -1, NULL, is_int_in(d, 0), label);
}

static int rf_slice(nd_t *d)
{
    int nd, n, ax[KT_NET_MAX_DIMS];
    int64_t din[KT_NET_MAX_DIMS], st[KT_NET_MAX_DIMS], en[KT_NET_MAX_DIMS], sp[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nd, din) || slice_params(d, nd, st, en, sp, ax, &n))
        return UNSUP;
    int64_t dims[KT_NET_MAX_DIMS], start[KT_NET_MAX_DIMS] = {0}, step[KT_NET_MAX_DIMS], s[KT_NET_MAX_DIMS];
    row_strides(nd, din, s);
    memcpy(dims, din, sizeof(dims));
    for (int q = 0; q < nd; q++)
        step[q] = s[q];
    for (int q = 0; q < n; q++) {
        int a = ax[q];
        dims[a] = slice_len(din[a], st[q], en[q], sp[q]);
        start[a] = slice_start(din[a], st[q], sp[q]);
        /* A step longer than the axis takes one element: any such step is. */
        int64_t p = sp[q] > din[a] ? din[a] : sp[q] < -din[a] ? -din[a] : sp[q];
        step[a] = p * s[a];
        if (dims[a] < 1)
            return unsup(d, "an empty slice of axis %d", a);
    }
    return rf_view(d, 0, nd, dims, start, step, NULL, "slice");
}

static int rf_split(nd_t *d)
{
    int nd, ns = -1, nout = (int)d->n->n_output, rc;
    int64_t din[KT_NET_MAX_DIMS], s[KT_NET_MAX_DIMS], axis, split[256];
    if (in_shape(d, 0, &nd, din) || attr_int(d, "axis", 0, &axis))
        return UNSUP;
    if (axis < 0)
        axis += nd;
    if (axis < 0 || axis >= nd || nout < 1 || nout > 256)
        return unsup(d, "bad axis or number of outputs");
    if (d->im->opset >= 13 && has_in(d, 1)) {
        if (ints_in(d, 1, split, 256, &ns))
            return UNSUP;
    } else if (d->im->opset < 13 && attr_ints(d, "split", 256, split, &ns)) {
        return UNSUP;
    }
    if (ns < 0) {
        int64_t dim = din[axis], each = (dim + nout - 1) / nout;
        for (int q = 0; q < nout; q++)
            split[q] = q < nout - 1 ? each : dim - each * (nout - 1);
        ns = nout;
    }
    int64_t sum = 0;
    for (int q = 0; q < ns && sum <= din[axis]; q++) {
        if (split[q] < 1 || split[q] > din[axis])
            return unsup(d, "split %d has size %lld, of an axis of %lld", q, (long long)split[q],
                         (long long)din[axis]);
        sum += split[q];   /* no overflow: both terms are at most the axis's size */
    }
    if (ns != nout || sum != din[axis])
        return unsup(d, "split sizes do not cover axis %lld", (long long)axis);
    row_strides(nd, din, s);
    int64_t at = 0;
    for (int q = 0; q < nout; q++) {
        int64_t dims[KT_NET_MAX_DIMS], start[KT_NET_MAX_DIMS] = {0};
        memcpy(dims, din, sizeof(dims));
        dims[axis] = split[q];
        start[axis] = at;
        at += split[q];
        if (split[q] < 1)
            return unsup(d, "an empty split");
        if (*d->n->output[q] && (rc = rf_view(d, q, nd, dims, start, s, NULL, "split")))
            return rc;
    }
    return KT_OK;
}

/* Expand (numpy broadcast to a shape) and Tile (repeats). */
static int rf_expand_tile(nd_t *d, int tile)
{
    int nd, n;
    int64_t din[KT_NET_MAX_DIMS], t[KT_NET_MAX_DIMS], s[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nd, din) || ints_in(d, 1, t, KT_NET_MAX_DIMS, &n))
        return UNSUP;
    row_strides(nd, din, s);
    int64_t dims[KT_NET_MAX_DIMS], start[KT_NET_MAX_DIMS] = {0}, step[KT_NET_MAX_DIMS],
        mod[KT_NET_MAX_DIMS];
    if (tile) {
        if (n != nd)
            return unsup(d, "Tile needs one repeat per axis (%d, not %d)", nd, n);
        for (int q = 0; q < nd; q++) {
            if (t[q] < 1 || __builtin_mul_overflow(din[q], t[q], &dims[q]))
                return unsup(d, "a repeat below 1 or beyond any tensor's size");
            step[q] = s[q];
            mod[q] = din[q];
        }
        return rf_view(d, 0, nd, dims, start, step, mod, "tile");
    }
    int on = n > nd ? n : nd;
    for (int q = 0; q < on; q++) {
        int ai = q - (on - nd), at = q - (on - n);
        int64_t a = ai >= 0 ? din[ai] : 1, b = at >= 0 ? t[at] : 1;
        if (a != b && a != 1 && b != 1)
            return unsup(d, "shape %lld does not broadcast to %lld on axis %d", (long long)a,
                         (long long)b, q);
        dims[q] = a == 1 ? b : a;
        step[q] = a == 1 ? 0 : s[ai];
        mod[q] = 0;
    }
    return rf_view(d, 0, on, dims, start, step, NULL, "expand");
}

static int rf_transpose(nd_t *d)
{
    int nd, n;
    int64_t din[KT_NET_MAX_DIMS], s[KT_NET_MAX_DIMS], perm[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nd, din) || attr_ints(d, "perm", KT_NET_MAX_DIMS, perm, &n))
        return UNSUP;
    if (n < 0) {
        n = nd;
        for (int q = 0; q < n; q++)
            perm[q] = n - 1 - q;
    }
    if (n != nd)
        return unsup(d, "perm has %d values for rank %d", n, nd);
    row_strides(nd, din, s);
    int64_t dims[KT_NET_MAX_DIMS], start[KT_NET_MAX_DIMS] = {0}, step[KT_NET_MAX_DIMS];
    int seen = 0;
    for (int q = 0; q < nd; q++) {
        if (perm[q] < 0 || perm[q] >= nd || (seen >> perm[q] & 1))
            return unsup(d, "perm is not a permutation");
        seen |= 1 << perm[q];
        dims[q] = din[perm[q]];
        step[q] = s[perm[q]];
    }
    return rf_view(d, 0, nd, dims, start, step, NULL, "transpose");
}

static int consumer(const imp_t *im, const char *v);

/* Whether the Pad r of node d, zeros on H and W of a 4-D activation read by
 * one AveragePool alone, can be that pool's padding: PyTorch exports
 * avg_pool2d(padding=p, count_include_pad=True) so (Inception-v3). Then the
 * pool node gets the pads (h_pool counts them) and 1 is returned. The pool's
 * own attributes must leave it a task: no ceil_mode, no dilation, its own
 * padding counted too (or none), every pad smaller than its window. */
static int merge_into_avg_pool(nd_t *d, int nd, const kt_refop_t *r)
{
    const int64_t *lo = &r->ia[1], *hi = &r->ia[1 + KT_REFOP_MAX_DIMS];
    if (nd != 4 || d->code[0] < 0 || r->ia[0] != KT_RP_CONSTANT || r->fa[0] != 0.0 ||
        is_int_in(d, 0) || lo[0] || lo[1] || hi[0] || hi[1] || lo[2] < 0 || lo[3] < 0 ||
        hi[2] < 0 || hi[3] < 0)
        return 0;
    int c = consumer(d->im, d->n->output[0]);
    if (c < 0)
        return 0;
    const Onnx__NodeProto *p = d->im->g->node[c];
    if (!p->op_type || strcmp(p->op_type, "AveragePool") != 0 || p->n_input < 1 ||
        strcmp(p->input[0], d->n->output[0]) != 0)
        return 0;
    const Onnx__AttributeProto *ks = attr(p, "kernel_shape"), *pads = attr(p, "pads"),
                               *cip = attr(p, "count_include_pad"), *ceil = attr(p, "ceil_mode"),
                               *dil = attr(p, "dilations"), *ap = attr(p, "auto_pad");
    if (!ks || ks->n_ints != 2 || (ceil && ceil->i) || (ap && ap->s.len &&
        !(ap->s.len == 6 && !memcmp(ap->s.data, "NOTSET", 6))))
        return 0;
    for (size_t k = 0; dil && k < dil->n_ints; k++)
        if (dil->ints[k] != 1)
            return 0;
    int64_t own[4] = {0};
    if (pads && pads->n_ints == 4)
        memcpy(own, pads->ints, sizeof own);
    else if (pads)
        return 0;
    if ((own[0] || own[1] || own[2] || own[3]) && !(cip && cip->i))
        return 0;
    const int64_t add[4] = {lo[2], lo[3], hi[2], hi[3]};
    for (int k = 0; k < 4; k++)
        if (own[k] + add[k] >= ks->ints[k % 2])
            return 0;
    memcpy(d->im->pool_pad[c], add, sizeof add);
    return 1;
}

static int rf_pad(nd_t *d)
{
    int nd, n, na = -1;
    int64_t din[KT_NET_MAX_DIMS], pads[2 * KT_NET_MAX_DIMS], axes[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nd, din))
        return UNSUP;
    if (d->im->opset >= 11) {
        if (ints_in(d, 1, pads, 2 * KT_NET_MAX_DIMS, &n))
            return UNSUP;
        if (has_in(d, 3) && ints_in(d, 3, axes, KT_NET_MAX_DIMS, &na))
            return UNSUP;
    } else if (attr_ints(d, "pads", 2 * KT_NET_MAX_DIMS, pads, &n)) {
        return UNSUP;
    }
    if (na < 0) {
        na = nd;
        for (int q = 0; q < nd; q++)
            axes[q] = q;
    }
    if (n != 2 * na)
        return unsup(d, "pads must have 2 values per padded axis");
    kt_refop_t r = {.op = KT_REFOP_PAD};
    char buf[16];
    const char *mode = attr_str(d->n, "mode", buf, sizeof(buf));
    if (!mode || !strcmp(mode, "constant"))
        r.ia[0] = KT_RP_CONSTANT;
    else if (!strcmp(mode, "reflect"))
        r.ia[0] = KT_RP_REFLECT;
    else if (!strcmp(mode, "edge"))
        r.ia[0] = KT_RP_EDGE;
    else if (!strcmp(mode, "wrap"))
        r.ia[0] = KT_RP_WRAP;
    else
        return unsup(d, "pad mode '%s'", mode);
    for (int q = 0; q < na; q++) {
        int64_t a = axes[q] < 0 ? axes[q] + nd : axes[q];
        if (a < 0 || a >= nd)
            return unsup(d, "pad axis %lld out of range", (long long)axes[q]);
        r.ia[1 + a] = pads[q];
        r.ia[1 + KT_REFOP_MAX_DIMS + a] = pads[q + na];
    }
    if (d->im->opset >= 11) {
        int g;
        if (scalar_in(d, 2, &r.fa[0], &g))
            return UNSUP;
    } else if (attr_float(d, "value", 0.0, &r.fa[0])) {
        return UNSUP;
    }
    /* A Pad of nothing is its input: PyTorch writes one before DenseNet's
     * average pools, and as a plain step it cost a copy. */
    int nothing = 1;
    for (int q = 0; q < n; q++)
        nothing &= pads[q] == 0;
    if (nothing)
        return alias(d, 0);
    if (merge_into_avg_pool(d, nd, &r))
        return alias(d, 0);
    return refop_simple(d, &r, 1, is_int_in(d, 0), "pad");
}

static int rf_gather(nd_t *d)
{
    int nd;
    int64_t din[KT_NET_MAX_DIMS], axis;
    if (in_shape(d, 0, &nd, din) || attr_int(d, "axis", 0, &axis))
        return UNSUP;
    if (axis < 0)
        axis += nd;
    kt_refop_t r = {.op = KT_REFOP_GATHER, .ia = {axis}};
    return refop_simple(d, &r, 2, is_int_in(d, 0), "gather");
}

/* Reduce* over any axes; the mean over H and W of a 4-D activation stays a
 * global average pool (a task). */
static int rf_reduce(nd_t *d, int code, const char *op)
{
    int nd, n = -1;
    int64_t din[KT_NET_MAX_DIMS], axes[KT_NET_MAX_DIMS], keep, noop;
    if (in_shape(d, 0, &nd, din) || attr_int(d, "keepdims", 1, &keep) ||
        attr_int(d, "noop_with_empty_axes", 0, &noop))
        return UNSUP;
    int from_input = d->im->opset >= 18 || (code == KT_RR_SUM && d->im->opset >= 13);
    if (from_input) {
        if (has_in(d, 1) && ints_in(d, 1, axes, KT_NET_MAX_DIMS, &n))
            return UNSUP;
    } else if (attr_ints(d, "axes", KT_NET_MAX_DIMS, axes, &n)) {
        return UNSUP;
    }
    if (n <= 0 && noop)
        return is_layer(d, 0) ? alias(d, 0) : unsup(d, "a reduction of nothing");
    int64_t mask = 0;
    for (int q = 0; q < n; q++) {
        int64_t a = axes[q] < 0 ? axes[q] + nd : axes[q];
        if (a < 0 || a >= nd)
            return unsup(d, "reduce axis %lld out of range", (long long)axes[q]);
        mask |= 1LL << a;
    }
    if (n <= 0)
        mask = (1LL << nd) - 1;
    kt_refop_t r = {.op = KT_REFOP_REDUCE, .ia = {code, mask}};
    int64_t t[KT_NET_MAX_DIMS];
    int nt = 0;
    for (int q = 0; q < nd; q++)
        if (keep || !(mask >> q & 1))
            t[nt++] = mask >> q & 1 ? 1 : din[q];
    int slot[1] = {0};
    r.nin = 1;
    int is_int = is_int_in(d, 0) && code != KT_RR_MEAN && code != KT_RR_L2 &&
                 code != KT_RR_LOGSUM && code != KT_RR_LOGSUMEXP;
    return refop_call(d, &r, slot, 0, nt, t, is_int, op);
}

static int rf_softmax(nd_t *d, int log_softmax)
{
    int nd;
    int64_t din[KT_NET_MAX_DIMS], axis;
    if (in_shape(d, 0, &nd, din) || attr_int(d, "axis", d->im->opset >= 13 ? -1 : 1, &axis))
        return UNSUP;
    if (axis < 0)
        axis += nd;
    if (axis < 0 || axis >= nd)
        return unsup(d, "softmax axis out of range");
    /* Before opset 13 the input is coerced to 2-D at axis. */
    kt_refop_t r = {.op = KT_REFOP_SOFTMAX,
                    .ia = {axis, d->im->opset >= 13 ? axis + 1 : nd, log_softmax}};
    return refop_simple(d, &r, 1, 0, log_softmax ? "log_softmax" : "softmax");
}

static int rf_range(nd_t *d)
{
    double v[3];
    int g;
    for (int q = 0; q < 3; q++)
        if (scalar_in(d, q, &v[q], &g) || !g)
            return unsup(d, "Range needs known scalar start, limit and delta");
    if (v[2] == 0)
        return unsup(d, "a Range with delta 0");
    double len = ceil((v[1] - v[0]) / v[2]);
    if (!(len >= 1 && len <= FOLD_LIMIT))
        return unsup(d, "a Range of %g elements (1 to %d supported)", len, FOLD_LIMIT);
    kt_refop_t r = {.op = KT_REFOP_RANGE, .ondim = 1, .dout = {(int64_t)len},
                    .fa = {v[0], v[2]}};
    return refop_simple(d, &r, 0, is_int_in(d, 0) && is_int_in(d, 2), "range");
}

static int rf_trilu(nd_t *d)
{
    int64_t upper;
    double k = 0;
    int g;
    if (attr_int(d, "upper", 1, &upper) || scalar_in(d, 1, &k, &g))
        return UNSUP;
    if (!(fabs(k) < 1e15))
        return unsup(d, "a Trilu diagonal of %g", k);
    kt_refop_t r = {.op = KT_REFOP_TRILU, .ia = {upper != 0, (int64_t)k}};
    return refop_simple(d, &r, 1, is_int_in(d, 0), "trilu");
}

static int rf_cast(nd_t *d)
{
    int64_t to;
    if (attr_int(d, "to", 1, &to))
        return UNSUP;
    int code = KT_RU_IDENTITY, is_int = 0;
    switch (to) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: code = KT_RU_BOOL; is_int = 1; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: code = KT_RU_TRUNC; is_int = 1; break;
    default: return unsup(d, "a cast to type %lld", (long long)to);
    }
    if (code == KT_RU_IDENTITY && is_layer(d, 0))
        return alias(d, 0);
    kt_refop_t r = {.op = KT_REFOP_UNARY, .ia = {code}};
    return refop_simple(d, &r, 1, is_int, "cast");
}

/* Shape (of a layer or a constant): its dimensions as int64 constants. */
static int h_shape(nd_t *d)
{
    net_shape_t sv, *s = &sv;
    if (in_shape(d, 0, &sv.ndim, sv.d))
        return UNSUP;
    int64_t start = 0, end = s->ndim;
    if (attr_int(d, "start", 0, &start) || attr_int(d, "end", s->ndim, &end))
        return UNSUP;
    if (start < 0)
        start += s->ndim;
    if (end < 0)
        end += s->ndim;
    start = start < 0 ? 0 : start > s->ndim ? s->ndim : start;
    end = end < start ? start : end > s->ndim ? s->ndim : end;
    cval_t *o;
    int rc = const_out(d, 0, &o);
    if (rc)
        return rc;
    o->ndim = 1;
    o->d[0] = end - start;
    if (calloc_vals(o, 1))
        return KT_ENOMEM;
    for (int64_t k = start; k < end; k++)
        o->iv[k - start] = s->d[k];
    return KT_OK;
}

/* Reference converters of the operators the helpers above do not cover
 * alone; each is one entry of the converter table (below). */
static int rf_gelu(nd_t *d, const char *op)
{
    char buf[16];
    const char *ap = attr_str(d->n, "approximate", buf, sizeof(buf));
    kt_refop_t r = {.op = KT_REFOP_UNARY,
                    .ia = {ap && strcmp(ap, "none") ? KT_RU_GELU_TANH : KT_RU_GELU}};
    (void)op;
    return refop_simple(d, &r, 1, 0, "gelu");
}

static int rf_clip(nd_t *d, const char *op)
{
    double lo = -INFINITY, hi = INFINITY;
    int g;
    (void)op;
    if (d->im->opset < 11 ? attr_float(d, "min", -INFINITY, &lo) ||
                                attr_float(d, "max", INFINITY, &hi)
                          : scalar_in(d, 1, &lo, &g) || scalar_in(d, 2, &hi, &g))
        return UNSUP;
    kt_refop_t r = {.op = KT_REFOP_UNARY, .ia = {KT_RU_CLIP}, .fa = {lo, hi}};
    return refop_simple(d, &r, 1, is_int_in(d, 0), "clip");
}

static int rf_where(nd_t *d, const char *op)
{
    kt_refop_t r = {.op = KT_REFOP_WHERE};
    (void)op;
    return refop_simple(d, &r, 3, is_int_in(d, 1) && is_int_in(d, 2), "where");
}

static int rf_scatter_nd(nd_t *d, const char *op)
{
    char buf[16];
    const char *red = attr_str(d->n, "reduction", buf, sizeof(buf));
    (void)op;
    if (red && strcmp(red, "none"))
        return unsup(d, "ScatterND with reduction '%s'", red);
    kt_refop_t r = {.op = KT_REFOP_SCATTER_ND};
    return refop_simple(d, &r, 3, is_int_in(d, 0), "scatter_nd");
}

static int rf_global_max_pool(nd_t *d, const char *op)
{
    kt_refop_t r = {.op = KT_REFOP_REDUCE, .nin = 1, .ia = {KT_RR_MAX, 12}};
    int slot[1] = {0}, nd;
    int64_t dims[KT_NET_MAX_DIMS];
    if (in_shape(d, 0, &nd, dims))
        return UNSUP;
    if (nd != 4)
        return unsup(d, "GlobalMaxPool of a rank-%d tensor", nd);
    return refop_call(d, &r, slot, 0, -1, NULL, 0, op);
}

/* Table-driven forms of the families: the op's entry in unary_defs,
 * binary_defs or reduce_defs. */
static int rf_unary_op(nd_t *d, const char *op)
{
    for (size_t k = 0; k < KT_ARRAY_LEN(unary_defs); k++)
        if (!strcmp(op, unary_defs[k].onnx))
            return rf_unary(d, &unary_defs[k]);
    return unsup(d, "no unary form of %s", op);
}

static int rf_binary_op(nd_t *d, const char *op)
{
    for (size_t k = 0; k < KT_ARRAY_LEN(binary_defs); k++)
        if (!strcmp(op, binary_defs[k].onnx))
            return rf_binary(d, binary_defs[k].code, op);
    return unsup(d, "no binary form of %s", op);
}

static int rf_reduce_op(nd_t *d, const char *op)
{
    for (size_t k = 0; k < KT_ARRAY_LEN(reduce_defs); k++)
        if (!strcmp(op, reduce_defs[k].onnx))
            return rf_reduce(d, reduce_defs[k].code, op);
    return unsup(d, "no reduction form of %s", op);
}

static int rf_sum_op(nd_t *d, const char *op) { return rf_variadic(d, KT_RB_ADD, op, 0); }
static int rf_mean_op(nd_t *d, const char *op) { return rf_variadic(d, KT_RB_ADD, op, 1); }
static int rf_slice_op(nd_t *d, const char *op) { (void)op; return rf_slice(d); }
static int rf_split_op(nd_t *d, const char *op) { (void)op; return rf_split(d); }
static int rf_expand_op(nd_t *d, const char *op) { return rf_expand_tile(d, op[0] == 'T'); }
static int rf_transpose_op(nd_t *d, const char *op) { (void)op; return rf_transpose(d); }
static int rf_pad_op(nd_t *d, const char *op) { (void)op; return rf_pad(d); }
static int rf_gather_op(nd_t *d, const char *op) { (void)op; return rf_gather(d); }
static int rf_softmax_op(nd_t *d, const char *op) { return rf_softmax(d, op[0] == 'L'); }
static int rf_range_op(nd_t *d, const char *op) { (void)op; return rf_range(d); }
static int rf_trilu_op(nd_t *d, const char *op) { (void)op; return rf_trilu(d); }
static int rf_cast_op(nd_t *d, const char *op) { (void)op; return rf_cast(d); }
static int rf_shape_op(nd_t *d, const char *op) { (void)op; return h_shape(d); }

static int refop_node(nd_t *d, const char *op);

/* ---- constant folding -------------------------------------------------------------- */

static int const_out(nd_t *d, int k, cval_t **c)
{
    int code;
    *c = new_const(d->im, &code);
    if (!*c)
        return KT_ENOMEM;
    return define(d->im, d->n->output[k], code);
}

/* A Concat of constants. Known values are joined here, of any rank: shape
 * vectors, and the constant blocks Swin builds its shifted windows' mask
 * from (as a concat layer, that mask and the scatters, comparisons and
 * wheres after it were computed anew on every run). A 1-D join of values
 * not at hand, or of more than MAX_CONST_VALUES, is a constant of known
 * shape; anything else a concat layer. */
static int fold_concat(nd_t *d, int64_t axis)
{
    const cval_t *a = cin(d, 0);
    int nd = a->ndim, is_int = 1, known = 1;
    if (nd < 1 || axis < -nd || axis >= nd)
        return h_concat(d);
    if (axis < 0)
        axis += nd;
    int64_t len = 0, outer = 1, inner = 1;
    for (int k = 0; k < nin(d); k++) {
        const cval_t *c = cin(d, k);
        if (c->ndim != nd)
            return h_concat(d);
        for (int q = 0; q < nd; q++)
            if (q != axis && c->d[q] != a->d[q])
                return h_concat(d);
        len += c->d[axis];
        known &= c->known;
        is_int &= c->is_int;
    }
    for (int q = 0; q < nd; q++)
        if (q != axis)
            *(q < axis ? &outer : &inner) *= a->d[q];
    int64_t total = outer * len * inner;
    int fill = known && total <= (nd == 1 ? MAX_CONST_VALUES : FOLD_MAX_VALUES);
    if (!fill && nd != 1)
        return h_concat(d);
    int64_t *iv = fill && is_int ? malloc(((size_t)total + 1) * sizeof(int64_t)) : NULL;
    double *fv = fill && !is_int ? malloc(((size_t)total + 1) * sizeof(double)) : NULL;
    if (fill && !iv && !fv)
        return kt_err_set(KT_ENOMEM, "out of memory");
    int64_t at = 0, dims[KT_NET_MAX_DIMS];
    memcpy(dims, a->d, sizeof(dims));
    dims[axis] = len;
    for (int64_t o = 0; fill && o < outer; o++)
        for (int k = 0; k < nin(d); k++) {
            const cval_t *c = cin(d, k);
            int64_t chunk = c->d[axis] * inner;
            for (int64_t i = 0; i < chunk; i++, at++) {
                if (is_int)
                    iv[at] = c->iv[o * chunk + i];
                else
                    fv[at] = cget_f(c, o * chunk + i);
            }
        }
    cval_t *out;
    int rc = const_out(d, 0, &out);   /* may move the table: a and c are not used after */
    if (rc) {
        free(iv);
        free(fv);
        return rc;
    }
    out->ndim = nd;
    memcpy(out->d, dims, sizeof(out->d));
    if (fill) {
        out->known = 1;
        out->is_int = is_int;
        out->iv = iv;
        out->fv = fv;
    }
    return KT_OK;
}

/* Elementwise arithmetic on known constants with numpy broadcasting. */
static int fold_binary(nd_t *d, const char *op, cval_t *a, cval_t *b, cval_t *o)
{
    net_shape_t sa = {a->ndim, {0}}, sb = {b->ndim, {0}}, so;
    memcpy(sa.d, a->d, sizeof(sa.d));
    memcpy(sb.d, b->d, sizeof(sb.d));
    int n = sa.ndim > sb.ndim ? sa.ndim : sb.ndim;
    so.ndim = n;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - sa.ndim), ib = i - (n - sb.ndim);
        int64_t da = ia >= 0 ? sa.d[ia] : 1, db = ib >= 0 ? sb.d[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return unsup(d, "constant shapes do not broadcast");
        so.d[i] = da > db ? da : db;
    }
    o->ndim = n;
    memcpy(o->d, so.d, sizeof(o->d));
    if (!a->known || !b->known || cnumel(o) > MAX_CONST_VALUES)
        return KT_OK;
    int is_int = a->is_int && b->is_int;
    if (calloc_vals(o, is_int))
        return KT_ENOMEM;
    int64_t total = cnumel(o);
    for (int64_t k = 0; k < total; k++) {
        int64_t rem = k, ka = 0, kb = 0, sta = 1, stb = 1;
        for (int i = n - 1; i >= 0; i--) {
            int64_t idx = rem % so.d[i];
            rem /= so.d[i];
            int ia = i - (n - sa.ndim), ib = i - (n - sb.ndim);
            if (ia >= 0) {
                ka += (sa.d[ia] == 1 ? 0 : idx) * sta;
                sta *= sa.d[ia];
            }
            if (ib >= 0) {
                kb += (sb.d[ib] == 1 ? 0 : idx) * stb;
                stb *= sb.d[ib];
            }
        }
        if (is_int) {
            int64_t x = a->iv[ka], y = b->iv[kb], r = 0;
            /* shape arithmetic never overflows int64: a model that does is
             * malformed, not a reason for undefined behaviour */
            if (op[0] == 'A' ? __builtin_add_overflow(x, y, &r)
                : op[0] == 'S' ? __builtin_sub_overflow(x, y, &r)
                : op[0] == 'M' ? __builtin_mul_overflow(x, y, &r)
                               : y == -1 && x == INT64_MIN)
                return unsup(d, "integer overflow in a constant");
            if (op[0] == 'D') {
                if (y == 0)
                    return unsup(d, "integer division by zero in a constant");
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    r--;   /* floor division, as numpy */
            }
            o->iv[k] = r;
        } else {
            double x = cget_f(a, ka), y = cget_f(b, kb);
            o->fv[k] = op[0] == 'A' ? x + y : op[0] == 'S' ? x - y : op[0] == 'M' ? x * y : x / y;
        }
    }
    return KT_OK;
}

/* Nodes whose inputs are all constants: fold what shape arithmetic needs.
 * Returns UNSUP for an operator that cannot be folded. */
static int fold(nd_t *d, const char *op)
{
    cval_t *o;
    int rc;
    if (!strcmp(op, "Identity") || !strcmp(op, "Cast") || !strcmp(op, "Dropout")) {
        if (!strcmp(op, "Cast")) {
            int64_t to;
            if (attr_int(d, "to", 1, &to))
                return UNSUP;
            cval_t *a = cin(d, 0);
            if ((rc = const_out(d, 0, &o)))
                return rc;
            a = cin(d, 0);   /* new_const may have moved the table */
            o->ndim = a->ndim;
            memcpy(o->d, a->d, sizeof(o->d));
            /* float32 parameters read through a cast to float or double are
             * the same values. */
            if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
                to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
                o->src = a->src;
            int to_int = to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                         to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ||
                         to == ONNX__TENSOR_PROTO__DATA_TYPE__INT16 ||
                         to == ONNX__TENSOR_PROTO__DATA_TYPE__INT8 ||
                         to == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8 ||
                         to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
            if (a->known) {
                if (calloc_vals(o, to_int))
                    return KT_ENOMEM;
                a = cin(d, 0);
                for (int64_t k = 0; o->known && k < cnumel(o); k++) {
                    if (to_int)
                        o->iv[k] = to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL
                                       ? cget_f(a, k) != 0
                                       : cget_i(a, k);
                    else
                        o->fv[k] = cget_f(a, k);
                }
            }
            return KT_OK;
        }
        return alias(d, 0);
    }
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div")) {
        /* Values held in a tensor only (a large weight): the reference call
         * reads them; known values keep integer arithmetic exact here. */
        if ((!cin(d, 0)->known && cin(d, 0)->src) || (!cin(d, 1)->known && cin(d, 1)->src))
            return rf_binary_op(d, op);
        if ((rc = const_out(d, 0, &o)))
            return rc;
        return fold_binary(d, op, cin(d, 0), cin(d, 1), o);
    }
    if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape") ||
        !strcmp(op, "Flatten")) {
        cval_t *a = cin(d, 0);
        int64_t t[KT_NET_MAX_DIMS];
        int n = 0;
        if (a->ndim < 0)
            return unsup(d, "a constant of unknown shape");
        if (op[0] == 'U' || op[0] == 'S') {
            if (squeeze_shape(d, a->d, a->ndim, op[0] == 'U', t, &n))
                return UNSUP;
        } else if (op[0] == 'F') {
            int64_t axis;
            if (attr_int(d, "axis", 1, &axis))
                return UNSUP;
            if (axis < 0)
                axis += a->ndim;
            t[0] = t[1] = 1;
            for (int i = 0; i < a->ndim; i++)
                t[i < axis ? 0 : 1] *= a->d[i];
            n = 2;
        } else {
            net_shape_t in = {a->ndim, {0}}, out;
            memcpy(in.d, a->d, sizeof(in.d));
            if (ints_in(d, 1, t, KT_NET_MAX_DIMS, &n))
                return UNSUP;
            /* 0 copies the input's size at that position, one -1 is inferred. */
            int64_t numel = cnumel(a), known = 1, inferred = -1;
            out.ndim = n;
            for (int i = 0; i < n; i++) {
                int64_t v = t[i] == 0 && i < in.ndim ? in.d[i] : t[i];
                if (v == -1) {
                    inferred = i;
                    continue;
                }
                if (v < 0)
                    return unsup(d, "bad reshape size");
                out.d[i] = v;
                known *= v;
            }
            if (inferred >= 0) {
                if (known == 0 || numel % known)
                    return unsup(d, "bad reshape of a constant");
                out.d[inferred] = numel / known;
                known = numel;
            }
            if (known != numel)
                return unsup(d, "reshape changes the number of elements");
            memcpy(t, out.d, sizeof(t));
        }
        if ((rc = const_out(d, 0, &o)))
            return rc;
        a = cin(d, 0);
        o->ndim = n;
        memcpy(o->d, t, (size_t)n * sizeof(int64_t));
        o->src = a->src;   /* the same values in the same order */
        if (a->known) {
            if (calloc_vals(o, a->is_int))
                return KT_ENOMEM;
            a = cin(d, 0);
            for (int64_t k = 0; o->known && k < cnumel(o); k++) {
                if (o->is_int)
                    o->iv[k] = a->iv[k];
                else
                    o->fv[k] = a->fv[k];
            }
        }
        return KT_OK;
    }
    if (!strcmp(op, "Concat")) {
        int64_t axis;
        if (attr_int(d, "axis", 0, &axis))
            return UNSUP;
        return fold_concat(d, axis);
    }
    if (!strcmp(op, "Gather")) {
        cval_t *a = cin(d, 0), *ix = cin(d, 1);
        int64_t axis;
        if (attr_int(d, "axis", 0, &axis))
            return UNSUP;
        if (a->ndim != 1 || (axis != 0 && axis != -1) || ix->ndim > 1 || ix->ndim < 0)
            return rf_gather(d);
        if ((rc = const_out(d, 0, &o)))
            return rc;
        a = cin(d, 0);
        ix = cin(d, 1);
        o->ndim = ix->ndim;
        o->d[0] = ix->ndim ? ix->d[0] : 0;
        if (a->known && ix->known) {
            if (calloc_vals(o, a->is_int))
                return KT_ENOMEM;
            a = cin(d, 0);
            ix = cin(d, 1);
            for (int64_t k = 0; o->known && k < cnumel(o); k++) {
                int64_t i = cget_i(ix, k);
                if (i < 0)
                    i += a->d[0];
                if (i < 0 || i >= a->d[0])
                    return unsup(d, "gather index out of range");
                if (o->is_int)
                    o->iv[k] = a->iv[i];
                else
                    o->fv[k] = a->fv[i];
            }
        }
        return KT_OK;
    }
    if (!strcmp(op, "Slice")) {
        cval_t *a = cin(d, 0);
        int64_t st[KT_NET_MAX_DIMS], en[KT_NET_MAX_DIMS], sp[KT_NET_MAX_DIMS];
        int ax[KT_NET_MAX_DIMS], n;
        if (a->ndim != 1)
            return rf_slice(d);
        if (slice_params(d, 1, st, en, sp, ax, &n))
            return UNSUP;
        int64_t start = 0, step = 1, len = a->d[0];
        for (int i = 0; i < n; i++) {
            len = slice_len(a->d[0], st[i], en[i], sp[i]);
            start = slice_start(a->d[0], st[i], sp[i]);
            step = sp[i];
        }
        if ((rc = const_out(d, 0, &o)))
            return rc;
        a = cin(d, 0);
        o->ndim = 1;
        o->d[0] = len;
        if (a->known) {
            if (calloc_vals(o, a->is_int))
                return KT_ENOMEM;
            a = cin(d, 0);
            for (int64_t k = 0; k < len; k++) {
                int64_t i = start + k * step;
                if (o->is_int)
                    o->iv[k] = a->iv[i];
                else
                    o->fv[k] = a->fv[i];
            }
        }
        return KT_OK;
    }
    if (!strcmp(op, "ConstantOfShape")) {
        int64_t t[KT_NET_MAX_DIMS];
        int n;
        if (ints_in(d, 0, t, KT_NET_MAX_DIMS, &n))
            return UNSUP;
        if ((rc = const_out(d, 0, &o)))
            return rc;
        o->ndim = n;
        memcpy(o->d, t, (size_t)n * sizeof(int64_t));
        for (int i = 0; i < n; i++)
            if (t[i] < 0)
                return unsup(d, "a negative dimension");
        /* The fill value (a one-element tensor, float 0 by default): a
         * constant used as an activation carries its values. */
        double fill = 0;
        int fill_int = 0;
        const Onnx__AttributeProto *va = attr(d->n, "value");
        if (va && va->t) {
            cval_t c;
            memset(&c, 0, sizeof(c));
            rc = read_tensor(va->t, &c, "ConstantOfShape value");
            int ok = rc == KT_OK && c.known && cnumel(&c) == 1;
            if (ok) {
                fill = cget_f(&c, 0);
                fill_int = c.is_int;
            }
            free(c.iv);
            free(c.fv);
            if (rc == KT_ENOMEM)
                return rc;
            kt_err_clear();
            if (!ok)
                return KT_OK;   /* values unknown: shape-only uses still work */
        }
        if (calloc_vals(o, fill_int))
            return KT_ENOMEM;
        for (int64_t k = 0; o->known && k < cnumel(o); k++) {
            if (fill_int)
                o->iv[k] = (int64_t)fill;
            else
                o->fv[k] = fill;
        }
        return KT_OK;
    }
    if (!strcmp(op, "Shape"))
        return h_shape(d);
    if ((rc = refop_node(d, op)) != NOT_REFOP)
        return rc;
    return unsup(d, "its inputs are all constants, and folding %s is not supported", op);
}

/* ---- gelu pattern -------------------------------------------------------------------
 * x * 0.5 * (1 + erf(x / sqrt(2))) as exporters write it (Div or Mul by 1/sqrt 2,
 * Erf, Add 1, and two Muls in either order) becomes one gelu layer. */

static int uses(const imp_t *im, const char *v)
{
    json_t *u = json_object_get(im->uses, v);
    return u ? (int)json_integer_value(u) : 0;
}

/* The node producing value v, searched forward from `from`; -1 if none. */
static int producer(const Onnx__GraphProto *g, const char *v)
{
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_output; k++)
            if (g->node[i]->output[k] && strcmp(g->node[i]->output[k], v) == 0)
                return (int)i;
    return -1;
}

/* The single node consuming v; -1 unless exactly one. */
static int consumer(const imp_t *im, const char *v)
{
    if (uses(im, v) != 1)
        return -1;
    const Onnx__GraphProto *g = im->g;
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_input; k++)
            if (g->node[i]->input[k] && strcmp(g->node[i]->input[k], v) == 0)
                return (int)i;
    return -1;
}

static int is_const_node(const Onnx__NodeProto *n)
{
    return n->op_type && strcmp(n->op_type, "Constant") == 0;
}

/* The tensor of an initializer or Constant node named v; NULL if none. */
static const Onnx__TensorProto *const_tensor(const imp_t *im, const char *v)
{
    const Onnx__GraphProto *g = im->g;
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name && strcmp(g->initializer[i]->name, v) == 0)
            return g->initializer[i];
    int p = producer(g, v);
    /* Exporters write a parameter shared by two layers as an Identity of it. */
    for (int hops = 0; p >= 0 && hops < 8 && g->node[p]->op_type && g->node[p]->n_input == 1 &&
                       strcmp(g->node[p]->op_type, "Identity") == 0; hops++) {
        for (size_t i = 0; i < g->n_initializer; i++)
            if (g->initializer[i]->name && strcmp(g->initializer[i]->name, g->node[p]->input[0]) == 0)
                return g->initializer[i];
        p = producer(g, g->node[p]->input[0]);
    }
    if (p < 0 || !is_const_node(g->node[p]))
        return NULL;
    const Onnx__AttributeProto *a = attr(g->node[p], "value");
    return a ? a->t : NULL;
}

/* The value of a scalar initializer/Constant named v; 0 if it is none. */
static int const_value(const imp_t *im, const char *v, double *out)
{
    const Onnx__TensorProto *t = const_tensor(im, v);
    if (t) {
        cval_t c = {0};
        int ok = read_tensor(t, &c, "constant") == KT_OK && c.known && cnumel(&c) == 1;
        if (ok)
            *out = cget_f(&c, 0);
        free(c.iv);
        free(c.fv);
        kt_err_clear();
        return ok;
    }
    int p = producer(im->g, v);
    const Onnx__AttributeProto *a =
        p >= 0 && is_const_node(im->g->node[p]) ? attr(im->g->node[p], "value_float") : NULL;
    if (a && a->has_f)
        *out = a->f;
    return a && a->has_f;
}

/* A scalar constant initializer/Constant value named v close to `want`. */
static int const_near(const imp_t *im, const char *v, double want)
{
    double x;
    return const_value(im, v, &x) && fabs(x - want) < 1e-3 * fabs(want);
}

static int is_op(const Onnx__NodeProto *n, const char *op)
{
    return n->op_type && strcmp(n->op_type, op) == 0 && n->n_output >= 1 && n->n_input == 2;
}

/* The operand of binary node n that is not `v` (NULL if v is not one). */
static const char *other(const Onnx__NodeProto *n, const char *v)
{
    if (strcmp(n->input[0], v) == 0)
        return n->input[1];
    if (strcmp(n->input[1], v) == 0)
        return n->input[0];
    return NULL;
}

static void match_gelu(imp_t *im, int e)
{
    const Onnx__GraphProto *g = im->g;
    const Onnx__NodeProto *erf = g->node[e];
    if (erf->n_input != 1 || erf->n_output != 1)
        return;
    int dv = producer(g, erf->input[0]);
    if (dv < 0 || dv >= e || uses(im, erf->input[0]) != 1)
        return;
    const Onnx__NodeProto *dn = g->node[dv];
    const char *x;
    if (is_op(dn, "Div") && const_near(im, dn->input[1], M_SQRT2))
        x = dn->input[0];
    else if (is_op(dn, "Mul") && const_near(im, dn->input[1], M_SQRT1_2))
        x = dn->input[0];
    else if (is_op(dn, "Mul") && const_near(im, dn->input[0], M_SQRT1_2))
        x = dn->input[1];
    else
        return;
    int av = consumer(im, erf->output[0]);
    if (av < 0 || !is_op(g->node[av], "Add"))
        return;
    const Onnx__NodeProto *an = g->node[av];
    const char *one = other(an, erf->output[0]);
    if (!one || !const_near(im, one, 1.0))
        return;
    int m1 = consumer(im, an->output[0]);
    if (m1 < 0 || !is_op(g->node[m1], "Mul"))
        return;
    const Onnx__NodeProto *mn = g->node[m1];
    const char *o = other(mn, an->output[0]);
    int last = -1, half_node = -1;
    if (o && strcmp(o, x) == 0) {
        /* (x * (1 + erf)) * 0.5 */
        int m2 = consumer(im, mn->output[0]);
        if (m2 < 0 || !is_op(g->node[m2], "Mul"))
            return;
        const char *h = other(g->node[m2], mn->output[0]);
        if (!h || !const_near(im, h, 0.5))
            return;
        last = m2;
    } else if (o && const_near(im, o, 0.5)) {
        /* ((1 + erf) * 0.5) * x */
        int m2 = consumer(im, mn->output[0]);
        if (m2 < 0 || !is_op(g->node[m2], "Mul"))
            return;
        const char *xx = other(g->node[m2], mn->output[0]);
        if (!xx || strcmp(xx, x) != 0)
            return;
        last = m2;
    } else if (o) {
        /* (x * 0.5) * (1 + erf) */
        int h = producer(g, o);
        if (h < 0 || uses(im, o) != 1 || !is_op(g->node[h], "Mul"))
            return;
        const char *hx = other(g->node[h], x);
        if (!hx || !const_near(im, hx, 0.5))
            return;
        half_node = h;
        last = m1;
    } else {
        return;
    }
    im->skip[dv] = im->skip[e] = im->skip[av] = 1;
    if (half_node >= 0)
        im->skip[half_node] = 1;
    if (last != m1)
        im->skip[m1] = 1;
    im->pat_in[last] = x;
}

/* x * gate(x), the gate read by the Mul alone: HardSwish as opsets before
 * 14 export it, x * HardSigmoid(x) with alpha 1/6 and beta 1/2 (ONNX's
 * default; within float32 rounding), and SiLU, x * Sigmoid(x), as every
 * opset exports it. */
static void match_gated(imp_t *im, int h)
{
    const Onnx__GraphProto *g = im->g;
    const Onnx__NodeProto *hn = g->node[h];
    int silu = strcmp(hn->op_type, "Sigmoid") == 0;
    if ((!silu && strcmp(hn->op_type, "HardSigmoid") != 0) || hn->n_input != 1 ||
        hn->n_output != 1 ||
        uses(im, hn->output[0]) != 1)
        return;
    const Onnx__AttributeProto *a = attr(hn, "alpha"), *b = attr(hn, "beta");
    double alpha = a && a->has_f ? a->f : HARDSIGMOID_ALPHA,
           beta = b && b->has_f ? b->f : HARDSIGMOID_BETA;
    if (!silu && ((a && !a->has_f) || (b && !b->has_f) || fabs(alpha - 1.0 / 6.0) > 1e-6 ||
                  fabs(beta - 0.5) > 1e-6))
        return;
    int m = consumer(im, hn->output[0]);
    if (m < 0 || m <= h || !is_op(g->node[m], "Mul"))
        return;
    const char *x = other(g->node[m], hn->output[0]);
    int code;
    if (!x || strcmp(x, hn->input[0]) != 0 || (lookup(im, x, &code) && code < 0))
        return;   /* of an initializer, it folds as it is */
    im->skip[h] = 1;
    im->pat_in[m] = x;
    im->pat_kind[m] = silu ? PAT_SILU : PAT_HARDSWISH;
}

/* ---- layer norm pattern -------------------------------------------------------------
 * LayerNorm as opsets before 17 export it: m = ReduceMean(x, -1); d = x - m;
 * v = ReduceMean(Pow(d, 2), -1); y = d / Sqrt(v + eps), then optionally
 * * gamma and + beta: one layer_norm layer (a task), as LayerNormalization. */

/* Whether node n is a ReduceMean over the last axis only, keeping it. */
static int is_mean_last(const imp_t *im, const Onnx__NodeProto *n)
{
    if (!n->op_type || strcmp(n->op_type, "ReduceMean") != 0 || n->n_output != 1 ||
        n->n_input != 1 || im->opset >= 18)
        return 0;
    const Onnx__AttributeProto *a = attr(n, "axes"), *k = attr(n, "keepdims");
    return a && a->n_ints == 1 && a->ints[0] == -1 && (!k || k->i == 1);
}

/* The one consumer of v if it is a binary `op` node; -1 otherwise. */
static int only_consumer(const imp_t *im, const char *v, const char *op)
{
    int c = consumer(im, v);
    return c >= 0 && uses(im, v) == 1 && is_op(im->g->node[c], op) ? c : -1;
}

/* Whether v is an initializer or Constant (not computed by nodes). */
static int is_param(const imp_t *im, const char *v)
{
    return const_tensor(im, v) != NULL;
}

static void match_layer_norm(imp_t *im, int r1)
{
    const Onnx__GraphProto *g = im->g;
    const Onnx__NodeProto *m = g->node[r1];
    if (!is_mean_last(im, m))
        return;
    const char *x = m->input[0];
    int sb = only_consumer(im, m->output[0], "Sub");
    if (sb < 0 || strcmp(g->node[sb]->input[0], x) != 0 || strcmp(g->node[sb]->input[1], m->output[0]))
        return;
    const char *dv = g->node[sb]->output[0];
    if (uses(im, dv) != 2)
        return;
    /* d's two readers: Pow(d, 2) and Div(d, std), in either order. */
    int pw = -1, dvn = -1;
    for (size_t i = (size_t)sb + 1; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t k = 0; k < n->n_input; k++)
            if (strcmp(n->input[k], dv) == 0) {
                if (is_op(n, "Pow") && k == 0)
                    pw = (int)i;
                else if (is_op(n, "Div") && k == 0)
                    dvn = (int)i;
            }
    }
    double two, eps;
    if (pw < 0 || dvn < 0 || !const_value(im, g->node[pw]->input[1], &two) || two != 2.0)
        return;
    int r2 = consumer(im, g->node[pw]->output[0]);
    if (r2 < 0 || uses(im, g->node[pw]->output[0]) != 1 || !is_mean_last(im, g->node[r2]))
        return;
    int ad = only_consumer(im, g->node[r2]->output[0], "Add");
    if (ad < 0)
        return;
    const char *e = other(g->node[ad], g->node[r2]->output[0]);
    if (!e || !const_value(im, e, &eps) || !(eps >= 0 && eps < 1))
        return;
    int sq = consumer(im, g->node[ad]->output[0]);
    if (sq < 0 || uses(im, g->node[ad]->output[0]) != 1 || !g->node[sq]->op_type ||
        strcmp(g->node[sq]->op_type, "Sqrt") || g->node[sq]->n_input != 1 ||
        strcmp(g->node[dvn]->input[1], g->node[sq]->output[0]) ||
        uses(im, g->node[sq]->output[0]) != 1)
        return;
    int last = dvn, mul = only_consumer(im, g->node[dvn]->output[0], "Mul"), add = -1;
    const char *gamma = NULL, *beta = NULL;
    if (mul >= 0 && (gamma = other(g->node[mul], g->node[dvn]->output[0])) && is_param(im, gamma)) {
        last = mul;
        add = only_consumer(im, g->node[mul]->output[0], "Add");
        if (add >= 0 && (beta = other(g->node[add], g->node[mul]->output[0])) &&
            is_param(im, beta)) {
            last = add;
        } else {
            beta = NULL;
            add = -1;
        }
    } else {
        gamma = NULL;
        mul = -1;
    }
    layer_norm_t *ln = calloc(1, sizeof(*ln));
    if (!ln)
        return;   /* imported unmatched: the same values, slower */
    *ln = (layer_norm_t){.x = x, .gamma = gamma, .beta = beta, .eps = eps};
    int nodes[] = {r1, sb, pw, r2, ad, sq, dvn, mul, add};
    for (size_t k = 0; k < KT_ARRAY_LEN(nodes); k++)
        if (nodes[k] >= 0 && nodes[k] != last)
            im->skip[nodes[k]] = 1;
    im->ln[last] = ln;
}

static int make_unsupported(nd_t *d, const char *op, const char *why);

/* The last node of a matched layer norm pattern: one layer_norm layer. */
static int convert_layer_norm(nd_t *d, const layer_norm_t *ln)
{
    imp_t *im = d->im;
    int x, rc;
    if (!lookup(im, ln->x, &x))
        return kt_err_set(KT_EINVAL, "node %d '%s': input '%s' is not produced by an earlier "
                          "node, an initializer or a graph input", d->idx, d->name, ln->x);
    if (x < 0)
        return make_unsupported(d, "layer_norm (pattern)", "a layer norm of a constant");
    if (im->net->layers[x].out.ndim < 0)
        return make_unsupported(d, "layer_norm (pattern)", NULL);
    int64_t D = im->net->layers[x].out.d[im->net->layers[x].out.ndim - 1];
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_LAYER_NORM, "LayerNorm (pattern)", &x, 1, &l);
    if (i < 0)
        return i;
    l->eps = ln->eps;
    l->affine = ln->gamma != NULL;
    const char *names[2] = {ln->gamma, ln->beta};
    static const char *const roles[2] = {"gamma", "beta"};
    for (int k = 0; k < 2 && l->affine; k++) {
        float *v = NULL;
        int64_t n = D;
        int code;
        if (names[k]) {
            if (!lookup(im, names[k], &code) || code >= 0)
                return kt_err_set(KT_EINTERNAL, "layer norm pattern: '%s' is no constant",
                                  names[k]);
            if ((rc = const_floats(im, code, &v, &n)))
                return rc;
            if (!v) {
                im->params_missing = 1;
                continue;
            }
        } else if (!(v = calloc((size_t)D, sizeof(float)))) {   /* no beta: zeros */
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        if (n == 1 && D > 1) {   /* a scalar gamma or beta: broadcast */
            float *w = realloc(v, (size_t)D * sizeof(float));
            if (!w) {
                free(v);
                return kt_err_set(KT_ENOMEM, "out of memory");
            }
            for (int64_t q = 1; q < D; q++)
                w[q] = w[0];
            v = w;
            n = D;
        }
        if (n != D) {
            free(v);
            return make_unsupported(d, "layer_norm (pattern)", "gamma or beta is not one value "
                                    "per element of the last axis");
        }
        if ((rc = net_layer_set_param(im->net, i, roles[k], v, n)))
            return rc;
    }
    rc = finish_out(d, i, 0);
    return rc == UNSUP ? make_unsupported(d, "layer_norm (pattern)", d->why) : rc;
}

/* ---- nodes ------------------------------------------------------------------------------ */

/* ---- the converter table -------------------------------------------------------------
 * One entry per ONNX operator, as TVM's frontend maps each operator name to
 * its converter: `layer` builds the layers of a node that reads an
 * activation (a task's anchor, an epilogue, a shape operator), `ref` the
 * call of its reference implementation (refop.h), which also folds a node
 * of constants only. An operator with a layer form falls back on `ref`
 * only through its own converter; one with no layer form runs as `ref`.
 * `since` is the first opset whose form the converters read (older
 * attribute forms are handled inside them where ONNX changed an operator). */

typedef int (*convert_fn)(nd_t *d, const char *op);

static int c_conv(nd_t *d, const char *op) { (void)op; return h_conv(d); }
static int c_pool(nd_t *d, const char *op) { return h_pool(d, op[0] == 'M'); }
static int c_gpool(nd_t *d, const char *op) { return simple(d, NET_GLOBAL_POOL, op); }
static int c_matmul(nd_t *d, const char *op) { return h_matmul(d, op[0] == 'G'); }
static int c_relu(nd_t *d, const char *op) { (void)op; return simple(d, NET_RELU, "Relu"); }
static int c_clip(nd_t *d, const char *op) { (void)op; return h_clip(d); }
static int c_sigmoid(nd_t *d, const char *op) { (void)op; return simple(d, NET_SIGMOID, "sigmoid"); }
static int c_tanh(nd_t *d, const char *op) { (void)op; return simple(d, NET_TANH, "tanh"); }
static int c_hardswish(nd_t *d, const char *op)
{
    (void)op;
    return simple(d, NET_HARDSWISH, "hardswish");
}

/* HardSigmoid's alpha and beta ride in the layer's lo and hi. */
static int c_hardsigmoid(nd_t *d, const char *op)
{
    (void)op;
    double alpha, beta;
    if (attr_float(d, "alpha", HARDSIGMOID_ALPHA, &alpha) ||
        attr_float(d, "beta", HARDSIGMOID_BETA, &beta))
        return UNSUP;
    if (!isfinite(alpha) || !isfinite(beta))
        return unsup(d, "hardsigmoid's alpha and beta must be finite");
    int x, rc = in_layer(d, 0, &x);
    if (rc)
        return rc;
    net_layer_t *l;
    int i = new_layer(d, NULL, NET_HARDSIGMOID, "hardsigmoid", &x, 1, &l);
    if (i >= 0) {
        l->lo = alpha;
        l->hi = beta;
    }
    return finish_out(d, i, 0);
}
static int c_batch_norm(nd_t *d, const char *op) { (void)op; return h_batch_norm(d); }
static int c_layer_norm(nd_t *d, const char *op) { (void)op; return h_layer_norm(d); }
static int c_softmax(nd_t *d, const char *op) { (void)op; return h_softmax(d); }
static int c_identity(nd_t *d, const char *op) { (void)op; return alias(d, 0); }
static int c_shape_op(nd_t *d, const char *op) { return h_shape_op(d, op); }
static int c_concat(nd_t *d, const char *op) { (void)op; return h_concat(d); }
static int c_reduce_mean(nd_t *d, const char *op) { (void)op; return h_reduce_mean(d); }
static int c_einsum(nd_t *d, const char *op) { (void)op; return h_einsum(d); }

/* Gelu's erf form is an epilogue; its tanh form runs as the reference call. */
static int c_gelu(nd_t *d, const char *op)
{
    char buf[16];
    const char *ap = attr_str(d->n, "approximate", buf, sizeof(buf));
    if (ap && strcmp(ap, "none") != 0)
        return rf_gelu(d, op);
    return simple(d, NET_GELU, "Gelu");
}

typedef struct {
    const char *op;
    int since;
    convert_fn layer, ref;
} converter_t;

static const converter_t converters[] = {
    /* anchors and their epilogues */
    {"Conv", 1, c_conv, NULL},
    {"MaxPool", 1, c_pool, NULL},
    {"AveragePool", 1, c_pool, NULL},
    {"GlobalAveragePool", 1, c_gpool, NULL},
    {"GlobalMaxPool", 1, NULL, rf_global_max_pool},
    {"Gemm", 1, c_matmul, NULL},
    {"MatMul", 1, c_matmul, NULL},
    {"Einsum", 12, c_einsum, NULL},
    {"BatchNormalization", 1, c_batch_norm, NULL},
    {"LayerNormalization", 17, c_layer_norm, NULL},
    {"Softmax", 1, c_softmax, rf_softmax_op},
    {"LogSoftmax", 1, NULL, rf_softmax_op},
    {"Add", 1, h_binary, rf_binary_op},
    {"Sub", 1, h_binary, rf_binary_op},
    {"Mul", 1, h_binary, rf_binary_op},
    {"Div", 1, h_binary, rf_binary_op},
    {"Relu", 1, c_relu, rf_unary_op},
    {"Clip", 1, c_clip, rf_clip},
    {"Sigmoid", 1, c_sigmoid, rf_unary_op},
    {"Tanh", 1, c_tanh, rf_unary_op},
    {"Gelu", 20, c_gelu, rf_gelu},
    /* data movement */
    {"Identity", 1, c_identity, rf_unary_op},
    {"Dropout", 1, c_identity, NULL},   /* a mask output is reported only where it is read */
    {"Cast", 1, NULL, rf_cast_op},
    {"Shape", 1, NULL, rf_shape_op},
    {"Flatten", 1, c_shape_op, NULL},
    {"Reshape", 5, c_shape_op, NULL},
    {"Squeeze", 1, c_shape_op, NULL},
    {"Unsqueeze", 1, c_shape_op, NULL},
    {"Transpose", 1, c_shape_op, rf_transpose_op},
    {"Concat", 4, c_concat, NULL},
    {"Slice", 1, NULL, rf_slice_op},
    {"Split", 1, NULL, rf_split_op},
    {"Expand", 8, NULL, rf_expand_op},
    {"Tile", 6, NULL, rf_expand_op},
    {"Pad", 1, NULL, rf_pad_op},
    {"Gather", 1, NULL, rf_gather_op},
    {"ScatterND", 11, NULL, rf_scatter_nd},
    {"Trilu", 14, NULL, rf_trilu_op},
    {"Range", 11, NULL, rf_range_op},
    {"Where", 9, NULL, rf_where},
    /* reductions (the mean over H and W of a 4-D tensor is a global pool task) */
    {"ReduceMean", 1, c_reduce_mean, rf_reduce_op},
    {"ReduceSum", 1, NULL, rf_reduce_op},
    {"ReduceMax", 1, NULL, rf_reduce_op},
    {"ReduceMin", 1, NULL, rf_reduce_op},
    {"ReduceProd", 1, NULL, rf_reduce_op},
    {"ReduceL1", 1, NULL, rf_reduce_op},
    {"ReduceL2", 1, NULL, rf_reduce_op},
    {"ReduceSumSquare", 1, NULL, rf_reduce_op},
    {"ReduceLogSum", 1, NULL, rf_reduce_op},
    {"ReduceLogSumExp", 1, NULL, rf_reduce_op},
    /* elementwise: binary with numpy broadcasting, then unary */
    {"Pow", 1, NULL, rf_binary_op},
    {"Sum", 1, NULL, rf_sum_op},
    {"Mean", 1, NULL, rf_mean_op},
    {"Max", 1, NULL, rf_binary_op},
    {"Min", 1, NULL, rf_binary_op},
    {"Mod", 10, NULL, rf_binary_op},
    {"Equal", 1, NULL, rf_binary_op},
    {"Less", 1, NULL, rf_binary_op},
    {"Greater", 1, NULL, rf_binary_op},
    {"LessOrEqual", 12, NULL, rf_binary_op},
    {"GreaterOrEqual", 12, NULL, rf_binary_op},
    {"And", 1, NULL, rf_binary_op},
    {"Or", 1, NULL, rf_binary_op},
    {"Xor", 1, NULL, rf_binary_op},
    {"PRelu", 1, NULL, rf_binary_op},
    {"Erf", 9, NULL, rf_unary_op},
    {"Exp", 1, NULL, rf_unary_op},
    {"Log", 1, NULL, rf_unary_op},
    {"Sqrt", 1, NULL, rf_unary_op},
    {"Reciprocal", 1, NULL, rf_unary_op},
    {"Neg", 1, NULL, rf_unary_op},
    {"Abs", 1, NULL, rf_unary_op},
    {"Softplus", 1, NULL, rf_unary_op},
    {"Softsign", 1, NULL, rf_unary_op},
    {"LeakyRelu", 1, NULL, rf_unary_op},
    {"HardSigmoid", 1, c_hardsigmoid, rf_unary_op},
    {"HardSwish", 14, c_hardswish, rf_unary_op},
    {"Elu", 1, NULL, rf_unary_op},
    {"Selu", 1, NULL, rf_unary_op},
    {"Celu", 12, NULL, rf_unary_op},
    {"ThresholdedRelu", 10, NULL, rf_unary_op},
    {"Floor", 1, NULL, rf_unary_op},
    {"Ceil", 1, NULL, rf_unary_op},
    {"Round", 11, NULL, rf_unary_op},
    {"Sin", 7, NULL, rf_unary_op},
    {"Cos", 7, NULL, rf_unary_op},
    {"Sign", 9, NULL, rf_unary_op},
    {"Mish", 18, NULL, rf_unary_op},
    {"Not", 1, NULL, rf_unary_op},
    {"IsNaN", 9, NULL, rf_unary_op},
    {"IsInf", 10, NULL, rf_unary_op},
};

static const converter_t *converter_of(const char *op)
{
    for (size_t k = 0; k < KT_ARRAY_LEN(converters); k++)
        if (!strcmp(op, converters[k].op))
            return &converters[k];
    return NULL;
}

/* The reference form of ONNX operator `op`: UNSUP or 0 as a handler, or
 * NOT_REFOP when it has none. */
static int refop_node(nd_t *d, const char *op)
{
    const converter_t *c = converter_of(op);
    if (!c || !c->ref)
        return NOT_REFOP;
    if (d->im->opset < c->since)
        return unsup(d, "%s needs opset %d or later (the model has %lld)", op, c->since,
                     (long long)d->im->opset);
    return c->ref(d, op);
}

/* A node reading an activation: its layer form, else its reference call. */
static int dispatch(nd_t *d, const char *op)
{
    const converter_t *c = converter_of(op);
    if (!c)
        return unsup(d, "operator %s is not supported", op);
    if (d->im->opset < c->since)
        return unsup(d, "%s needs opset %d or later (the model has %lld)", op, c->since,
                     (long long)d->im->opset);
    return c->layer ? c->layer(d, op) : c->ref(d, op);
}

/* Make the node's outputs unsupported layers (the first carries the reason). */
static int make_unsupported(nd_t *d, const char *op, const char *why)
{
    imp_t *im = d->im;
    int in[ND_MAX_IN], n = 0;
    for (int k = 0; k < nin(d) && k < ND_MAX_IN; k++)
        if (is_layer(d, k))
            in[n++] = d->code[k];
    for (size_t k = 0; k < d->n->n_output; k++) {
        const char *out = d->n->output[k];
        if (!*out || json_object_get(im->vals, out))
            continue;
        net_shape_t s = {-1, {0}};
        json_t *dv = json_object_get(im->declared, out);
        if (json_is_array(dv) && json_array_size(dv) <= KT_NET_MAX_DIMS) {
            s.ndim = (int)json_array_size(dv);
            for (int i = 0; i < s.ndim; i++) {
                s.d[i] = json_integer_value(json_array_get(dv, (size_t)i));
                if (s.d[i] < 1)
                    s.ndim = -1;
            }
        }
        char name[200];
        if (k == 0)
            snprintf(name, sizeof(name), "%s", d->name);
        else
            snprintf(name, sizeof(name), "%.150s/out%zu", d->name, k);
        for (int j = 1; net_find(im->net, name) >= 0; j++)
            snprintf(name, sizeof(name), "%.150s#%d/out%zu", d->name, j, k);
        int i = net_add_unsupported(im->net, name, op, in, n, &s, why);
        if (i < 0)
            return i;
        net_layer(im->net, i)->secondary = k > 0;
        int rc = define(im, out, i);
        if (rc)
            return rc;
    }
    return KT_OK;
}

static int convert_node(imp_t *im, int idx)
{
    const Onnx__NodeProto *n = im->g->node[idx];
    nd_t d;
    memset(&d, 0, sizeof(d));
    d.im = im;
    d.n = n;
    d.idx = idx;
    const char *op = n->op_type ? n->op_type : "";
    char opbuf[128];
    int std_domain = !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
    snprintf(opbuf, sizeof(opbuf), "%s%s%s", std_domain ? "" : n->domain, std_domain ? "" : "::",
             op);
    if (n->name && *n->name)
        snprintf(d.name, sizeof(d.name), "%.150s", n->name);
    else
        snprintf(d.name, sizeof(d.name), "%.100s_%d", *op ? op : "node", idx);
    if (!*op)
        return kt_err_set(KT_EINVAL, "node %d '%s' has no op_type", idx, d.name);
    if (n->n_output == 0 || !*n->output[0])
        return kt_err_set(KT_EINVAL, "node %d '%s' (%s) has no output", idx, d.name, op);
    if (n->n_input > ND_MAX_IN)
        return kt_err_set(KT_EINVAL, "node %d '%s' (%s) has %zu inputs", idx, d.name, op,
                          n->n_input);
    if (im->ln[idx])
        return convert_layer_norm(&d, im->ln[idx]);
    if (im->pat_in[idx]) {
        /* The last node of a collapsed pattern: its inputs are skipped nodes'. */
        static const struct {
            net_op_t op;
            const char *what, *of_constant;
        } pats[] = {
            [PAT_GELU] = {NET_GELU, "gelu (Erf pattern)", "gelu of a constant"},
            [PAT_HARDSWISH] = {NET_HARDSWISH, "hardswish (HardSigmoid pattern)",
                               "hardswish of a constant"},
            [PAT_SILU] = {NET_SILU, "silu (Sigmoid pattern)", "silu of a constant"},
        };
        const int pk = im->pat_kind[idx];
        const char *what = pats[pk].what;
        int code;
        if (!lookup(im, im->pat_in[idx], &code))
            return kt_err_set(KT_EINVAL, "node %d '%s' (%s): input '%s' is not produced by an "
                              "earlier node, an initializer or a graph input", idx, d.name, op,
                              im->pat_in[idx]);
        if (code < 0 || im->net->layers[code].out.ndim < 0) {
            d.code[0] = code;
            d.present[0] = 1;
            return make_unsupported(&d, what, code < 0 ? pats[pk].of_constant : NULL);
        }
        net_layer_t *l;
        int rc = finish_out(&d, new_layer(&d, NULL, pats[pk].op, what, &code, 1, &l), 0);
        return rc == UNSUP ? make_unsupported(&d, what, d.why) : rc;
    }
    int any_layer = 0, unknown = 0;
    for (size_t k = 0; k < n->n_input && k < ND_MAX_IN; k++) {
        if (!n->input[k] || !*n->input[k])
            continue;   /* an omitted optional input */
        if (!lookup(im, n->input[k], &d.code[k]))
            return kt_err_set(KT_EINVAL, "node %d '%s' (%s): input '%s' is not produced by an "
                              "earlier node, an initializer or a graph input", idx, d.name, op,
                              n->input[k]);
        d.present[k] = 1;
        if (d.code[k] >= 0) {
            any_layer = 1;
            unknown |= im->net->layers[d.code[k]].out.ndim < 0;
        }
    }
    int rc;
    if (!std_domain) {
        rc = unsup(&d, "operator %s of domain '%s' is not supported", op, n->domain);
    } else if (unknown) {
        return make_unsupported(&d, opbuf, NULL);   /* blocked: shapes unknown upstream */
    } else if (!strcmp(op, "Constant")) {
        cval_t *o;
        if ((rc = const_out(&d, 0, &o)))
            return rc;
        const Onnx__AttributeProto *a = attr(n, "value");
        if (a && a->t) {
            rc = read_tensor(a->t, o, "Constant value");
            if (rc == KT_EINVAL)
                return kt_err_prefix("node %d '%s' (Constant)", idx, d.name);
            o->src = a->t;
        } else if ((a = attr(n, "value_float")) || (a = attr(n, "value_int"))) {
            o->ndim = 0;
            if ((rc = calloc_vals(o, a->has_i)))
                return rc;
            if (a->has_i)
                o->iv[0] = a->i;
            else
                o->fv[0] = a->f;
        } else if ((a = attr(n, "value_ints")) || (a = attr(n, "value_floats"))) {
            o->ndim = 1;
            o->d[0] = (int64_t)(a->n_ints ? a->n_ints : a->n_floats);
            if ((rc = calloc_vals(o, a->n_ints > 0)))
                return rc;
            for (int64_t k = 0; o->known && k < o->d[0]; k++) {
                if (a->n_ints)
                    o->iv[k] = a->ints[k];
                else
                    o->fv[k] = a->floats[k];
            }
        } else {
            rc = unsup(&d, "a Constant without a supported value attribute");
        }
    } else if (!any_layer && n->n_input > 0) {
        rc = fold(&d, op);
    } else if (!any_layer) {
        rc = unsup(&d, "operator %s is not supported", op);
    } else {
        rc = dispatch(&d, op);
    }
    if (rc == UNSUP)
        return make_unsupported(&d, opbuf, d.why);
    if (rc < 0)
        return rc;
    /* Outputs a handler did not define (Dropout's mask...) are unsupported
     * layers reported only if something reads them. */
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && !json_object_get(im->vals, n->output[k])) {
            char why[200];
            snprintf(why, sizeof(why), "output %zu of this %s node is not modeled", k, op);
            net_shape_t s = {-1, {0}};
            char name[200];
            snprintf(name, sizeof(name), "%.150s/out%zu", d.name, k);
            for (int j = 1; net_find(im->net, name) >= 0; j++)
                snprintf(name, sizeof(name), "%.150s#%d/out%zu", d.name, j, k);
            int i = net_add_unsupported(im->net, name, opbuf, NULL, 0, &s, why);
            if (i < 0)
                return i;
            net_layer(im->net, i)->secondary = 1;
            if ((rc = define(im, n->output[k], i)))
                return rc;
        }
    return KT_OK;
}

/* ---- packed projections -------------------------------------------------- */

/* The run [*start, *start + *len) of in's last axis when layer c is a slice
 * of only that axis (a contiguous view of its one input, of shape in). */
static int last_axis_run(const net_layer_t *c, const net_shape_t *in, int64_t *start,
                         int64_t *len)
{
    const kt_refop_t *r = c->rop;
    int nd = in->ndim;
    if (c->op != NET_REFOP || !r || r->op != KT_REFOP_VIEW || r->nin != 1 || c->nin != 1 ||
        c->rop_src[0] != 0 || c->marked_output || nd < 1 || r->ndim[0] != nd ||
        r->ondim != nd || c->out.ndim != nd)
        return 0;
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (r->din[0][d] != in->d[d] || r->ia[1 + KT_REFOP_MAX_DIMS + d] != 0 ||
            r->ia[1 + d] != stride || c->out.d[d] != r->dout[d] ||
            (d < nd - 1 && r->dout[d] != in->d[d]))
            return 0;
        stride *= in->d[d];
    }
    *start = r->ia[0];
    *len = r->dout[nd - 1];
    return *start >= 0 && *len >= 1 && *start + *len <= in->d[nd - 1];
}

/* Rows [a, a + n) of a [rows, k] matrix, malloc'd (NULL when m is). */
static float *rows_of(const float *m, int64_t a, int64_t n, int64_t k)
{
    float *o = m ? malloc((size_t)(n * k) * sizeof(float)) : NULL;
    if (o)
        memcpy(o, m + a * k, (size_t)(n * k) * sizeof(float));
    return o;
}

/* Layer l turned into a reshape of its input to its own shape: an alias,
 * no step of its own. */
static void become_alias(net_layer_t *l)
{
    free(l->rop);
    l->rop = NULL;
    net_layer_drop_params(l);
    l->op = NET_SHAPE;
    l->shape_kind = NET_SHAPE_RESHAPE;
    l->ntarget = l->out.ndim;
    memcpy(l->target, l->out.d, sizeof(l->target));
}

/* The layers after v that read it, at most max of them into r (a layer
 * reading it twice counted twice); how many there are. */
static int readers(const kt_net_t *net, int v, int *r, int max)
{
    int n = 0;
    for (int j = v + 1; j < net->n; j++)
        for (int k = 0; k < net->layers[j].nin; k++)
            if (net->layers[j].in[k] == v && n++ < max)
                r[n - 1] = j;
    return n;
}

/* One packed projection: dense layer di (and the bias add after it, should
 * one be its only reader) read only by slices of its last axis, as
 * nn.MultiheadAttention exports its q/k/v projection. Each slice becomes a
 * dense layer of its own rows of the weight (the first reuses di, its slice
 * an alias), so no slice is copied and the three projections are one task.
 * 1 when rewritten, 0 when the pattern does not hold, or an error. */
static int split_packed_dense(kt_net_t *net, int di)
{
    enum { MAX_PARTS = 16 };
    net_layer_t *L = net->layers;
    net_layer_t *D = &L[di];
    if (D->op != NET_DENSE || D->marked_output || D->blocked || D->nin != 1 ||
        D->out.ndim < 2 || L[D->in[0]].out.ndim < 1)
        return 0;
    int nd = D->out.ndim, top = di, bi = -1, part[MAX_PARTS];
    int64_t N = D->out.d[nd - 1], K = L[D->in[0]].out.d[L[D->in[0]].out.ndim - 1];
    int64_t start[MAX_PARTS], len[MAX_PARTS];
    int nparts = readers(net, di, part, MAX_PARTS);
    if (nparts == 1 && L[part[0]].op == NET_BIAS_ADD && L[part[0]].nin == 1 &&
        !L[part[0]].marked_output && (L[part[0]].scalar || L[part[0]].axis == nd - 1)) {
        bi = top = part[0];
        nparts = readers(net, bi, part, MAX_PARTS);
    }
    if (nparts < 2 || nparts > MAX_PARTS || D->channels != N)
        return 0;
    for (int p = 0; p < nparts; p++)
        if (!last_axis_run(&L[part[p]], &L[top].out, &start[p], &len[p]))
            return 0;
    net_param_t *w = net_layer_find_param(D, "weight");
    if (w && w->numel != N * K)
        return 0;   /* not the weight a dense layer of these shapes has: left alone */
    /* The whole bias: the layer's own plus the add's. */
    net_param_t *b = D->bias ? net_layer_find_param(D, "bias") : NULL;
    net_param_t *add = bi >= 0 ? net_layer_find_param(&L[bi], "value") : NULL;
    int biased = D->bias || bi >= 0;
    float *bias = NULL;
    if (biased && (b || add)) {
        if (!(bias = calloc((size_t)N, sizeof(float))))
            return kt_err_set(KT_ENOMEM, "out of memory");
        for (int64_t j = 0; j < N; j++)
            bias[j] = (b && b->numel == N ? b->v[j] : 0.0f) +
                      (add ? add->v[add->numel == N ? j : 0] : 0.0f);
    }
    int rc = KT_OK;
    for (int p = nparts - 1; p >= 0 && rc == KT_OK; p--) {
        /* the first part is di's own; later ones are their slices, made dense */
        int li = p == 0 ? di : part[p];
        net_layer_t *l = &L[li];
        float *pw = w ? rows_of(w->v, start[p], len[p], K) : NULL;
        float *pb = bias ? rows_of(bias, start[p], len[p], 1) : NULL;
        if ((w && !pw) || (bias && !pb)) {
            free(pw);
            free(pb);
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            break;
        }
        if (p > 0) {
            become_alias(l);   /* drops the view */
            l->op = NET_DENSE;
            l->in[0] = D->in[0];
        } else {
            net_layer_drop_params(l);
            l->out.d[nd - 1] = len[0];
        }
        l->channels = len[p];
        l->bias = biased;
        if (pw && (rc = net_layer_set_param(net, li, "weight", pw, len[p] * K)) == KT_OK && pb)
            rc = net_layer_set_param(net, li, "bias", pb, len[p]);
        else if (!pw)
            free(pb);
    }
    free(bias);
    if (rc)
        return rc;
    /* the add, now in the layer, and the first slice read the first part */
    if (bi >= 0) {
        L[bi].out.d[nd - 1] = len[0];
        become_alias(&L[bi]);
    }
    become_alias(&L[part[0]]);
    return 1;
}

/* ---- channel shuffles ----------------------------------------------------- */

/* ShuffleNet's channel shuffle, as torchvision exports it: a reshape of
 * x [N, C, ...] to [N, g, C/g, ...], a transpose swapping axes 1 and 2, and a
 * reshape back to x's shape, each read only by the next. The first becomes
 * one shuffle layer of x and the other two aliases of it: as three layers,
 * the reshapes made the plan hold x in NCHW, so NHWC convolutions on both
 * sides paid two layout conversions per unit. 1 when rewritten, 0 when the
 * pattern does not hold, or an error. */
static int fold_channel_shuffle(kt_net_t *net, int ti)
{
    net_layer_t *L = net->layers, *T = &L[ti];
    int nd = T->out.ndim, r1, r2, only;
    if (T->op != NET_SHAPE || T->shape_kind != NET_SHAPE_TRANSPOSE || T->nin != 1 ||
        T->marked_output || nd < 3 || T->target[0] != 0 || T->target[1] != 2 ||
        T->target[2] != 1)
        return 0;
    for (int d = 3; d < nd; d++)
        if (T->target[d] != d)
            return 0;
    r1 = T->in[0];
    net_layer_t *R1 = &L[r1];
    if (!net_layer_is_reshape(R1) || R1->marked_output || R1->nin != 1 ||
        readers(net, r1, &only, 1) != 1 || readers(net, ti, &r2, 1) != 1 ||
        !net_layer_is_reshape(&L[r2]) || L[r2].nin != 1)
        return 0;
    const net_shape_t *x = &L[R1->in[0]].out;
    if (x->ndim != nd - 1 || R1->out.d[0] != x->d[0] ||
        R1->out.d[1] * R1->out.d[2] != x->d[1] || L[r2].out.ndim != x->ndim ||
        memcmp(L[r2].out.d, x->d, (size_t)x->ndim * sizeof(int64_t)))
        return 0;
    for (int d = 2; d < x->ndim; d++)
        if (R1->out.d[d + 1] != x->d[d])
            return 0;
    char *label = kt_strdup("channel_shuffle");
    if (!label)
        return kt_err_set(KT_ENOMEM, "out of memory");
    free(R1->label);
    R1->label = label;
    R1->shape_kind = NET_SHAPE_SHUFFLE;
    R1->groups = R1->out.d[1];
    R1->out = *x;
    T->out = *x;
    become_alias(T);
    return 1;
}

/* Rewrite `fn` (1 rewritten, 0 left alone, negative an error) tried at
 * every layer in order; the first error stops it. */
static int rewrite_layers(kt_net_t *net, int (*fn)(kt_net_t *, int))
{
    for (int i = 0; i < net->n; i++) {
        int rc = fn(net, i);
        if (rc < 0)
            return rc;
    }
    return KT_OK;
}

/* ---- model ------------------------------------------------------------------------------ */

static int declared_shape(imp_t *im, const Onnx__ValueInfoProto *v)
{
    if (!v->name || !v->type || v->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        !v->type->tensor_type || !v->type->tensor_type->shape)
        return KT_OK;
    const Onnx__TensorShapeProto *s = v->type->tensor_type->shape;
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *dm = s->dim[i];
        int64_t val = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE
                          ? dm->dim_value
                          : -1;
        json_array_append_new(a, json_integer(val));
    }
    if (!a || json_object_set_new_nocheck(im->declared, v->name, a))
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

static int add_graph_input(imp_t *im, const Onnx__ValueInfoProto *v, const kt_net_input_t *over,
                           int nover, int batch)
{
    if (!v->name || !*v->name)
        return kt_err_set(KT_EINVAL, "a graph input has no name");
    if (json_object_get(im->vals, v->name))
        return KT_OK;   /* an initializer listed as an input (IR < 4) */
    net_shape_t s = {-1, {0}};
    for (int i = 0; i < nover; i++)
        if (strcmp(over[i].name, v->name) == 0) {
            s.ndim = over[i].ndim;
            memcpy(s.d, over[i].dims, sizeof(s.d));
        }
    if (s.ndim < 0) {
        if (!v->type || v->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
            !v->type->tensor_type || !v->type->tensor_type->shape)
            return kt_err_set(KT_EINVAL, "graph input '%s' has no tensor shape; give it with "
                              "--input %s=1x3x224x224", v->name, v->name);
        const Onnx__TensorShapeProto *sp = v->type->tensor_type->shape;
        if (sp->n_dim > KT_NET_MAX_DIMS || sp->n_dim == 0)
            return kt_err_set(KT_EINVAL, "graph input '%s' has rank %zu (1..%d supported)",
                              v->name, sp->n_dim, KT_NET_MAX_DIMS);
        s.ndim = (int)sp->n_dim;
        for (size_t i = 0; i < sp->n_dim; i++) {
            const Onnx__TensorShapeProto__Dimension *dm = sp->dim[i];
            if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                dm->dim_value > 0) {
                s.d[i] = dm->dim_value;
            } else if (i == 0 && batch > 0) {
                s.d[i] = batch;
            } else {
                const char *p = dm->value_case ==
                                        ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                    ? dm->dim_param
                                    : "?";
                return kt_err_set(KT_EINVAL, "graph input '%s': dimension %zu is symbolic "
                                  "('%s'); give the shape with --input %s=DxDx...%s", v->name, i,
                                  p, v->name, i == 0 ? " or --batch" : "");
            }
        }
    }
    int i = net_layer_add(im->net, v->name, NET_INPUT, "input", NULL, 0);
    if (i < 0)
        return i;
    net_layer_t *l = net_layer(im->net, i);
    if (v->type && v->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
        v->type->tensor_type && v->type->tensor_type->has_elem_type) {
        int et = v->type->tensor_type->elem_type;
        l->int_input = et != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
                       et != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE &&
                       et != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 &&
                       et != ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    }
    l->ntarget = s.ndim;
    memcpy(l->target, s.d, sizeof(l->target));
    int rc = net_layer_finish(im->net, i);
    if (rc)
        return kt_err_prefix("graph input '%s'", v->name);
    return define(im, v->name, i);
}

static int import(imp_t *im, Onnx__ModelProto *m, const kt_net_input_t *over, int nover,
                  int batch)
{
    int rc = KT_OK;
    im->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if ((!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0) && o->has_version)
            im->opset = o->version;
    }
    if (!m->graph)
        return kt_err_set(KT_EINVAL, "the model has no graph");
    if (im->opset < 1)
        return kt_err_set(KT_EINVAL, "the model imports no opset of the default ONNX domain");
    Onnx__GraphProto *g = m->graph;
    im->g = g;
    if (g->n_node == 0)
        return kt_err_set(KT_EINVAL, "the model's graph has no nodes");
    im->net = net_new(g->name && *g->name ? g->name : "onnx-model");
    im->vals = json_object();
    im->declared = json_object();
    im->uses = json_object();
    im->materialized = json_object();
    im->skip = calloc(g->n_node, 1);
    im->pat_in = calloc(g->n_node, sizeof(char *));
    im->pat_kind = calloc(g->n_node, 1);
    im->pool_pad = calloc(g->n_node, sizeof *im->pool_pad);
    im->ln = calloc(g->n_node, sizeof(layer_norm_t *));
    if (!im->net || !im->vals || !im->declared || !im->uses || !im->materialized || !im->skip ||
        !im->pat_in || !im->pat_kind || !im->pool_pad || !im->ln)
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *t = g->initializer[i];
        if (!t->name || !*t->name)
            return kt_err_set(KT_EINVAL, "initializer %zu has no name", i);
        int code;
        cval_t *c = new_const(im, &code);
        if (!c)
            return KT_ENOMEM;
        char what[300];
        snprintf(what, sizeof(what), "initializer '%.250s'", t->name);
        if ((rc = read_tensor(t, c, what)) || (rc = define(im, t->name, code)))
            return rc;
        im->consts[-code - 1].src = t;
    }
    for (size_t i = 0; i < g->n_value_info; i++)
        if ((rc = declared_shape(im, g->value_info[i])))
            return rc;
    for (size_t i = 0; i < g->n_output; i++)
        if ((rc = declared_shape(im, g->output[i])))
            return rc;
    for (int i = 0; i < nover; i++) {
        int found = 0;
        for (size_t k = 0; k < g->n_input && !found; k++)
            found = g->input[k]->name && strcmp(g->input[k]->name, over[i].name) == 0 &&
                    !json_object_get(im->vals, over[i].name);
        if (!found)
            return kt_err_set(KT_EINVAL, "--input %s: the model has no graph input of that name",
                              over[i].name);
    }
    for (size_t i = 0; i < g->n_input && rc == KT_OK; i++)
        rc = add_graph_input(im, g->input[i], over, nover, batch);
    if (rc)
        return rc;
    /* Consumer counts, then collapse gelu, hardswish and silu patterns, then convert in order
     * (ONNX requires nodes in topological order). */
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_input; k++) {
            const char *v = g->node[i]->input[k];
            if (!v || !*v)
                continue;
            if (json_object_set_new_nocheck(im->uses, v, json_integer(uses(im, v) + 1)))
                return kt_err_set(KT_ENOMEM, "out of memory");
        }
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name)
            json_object_set_new_nocheck(im->uses, g->output[i]->name,
                                        json_integer(uses(im, g->output[i]->name) + 1));
    for (size_t i = 0; i < g->n_node; i++)
        if (g->node[i]->op_type && strcmp(g->node[i]->op_type, "Erf") == 0)
            match_gelu(im, (int)i);
    for (size_t i = 0; i < g->n_node; i++)
        if (!im->skip[i] && g->node[i]->op_type)
            match_gated(im, (int)i);
    for (size_t i = 0; i < g->n_node; i++)
        if (!im->skip[i])
            match_layer_norm(im, (int)i);
    for (size_t i = 0; i < g->n_node; i++) {
        if (im->skip[i])
            continue;
        if ((rc = convert_node(im, (int)i)))
            return rc;
    }
    for (size_t i = 0; i < g->n_output; i++) {
        const char *o = g->output[i]->name;
        int code;
        if (!o || !lookup(im, o, &code))
            return kt_err_set(KT_EINVAL, "graph output '%s' is not produced by any node",
                              o ? o : "");
        if (code >= 0 && (rc = net_mark_output(im->net, code)))
            return rc;
    }
    if (im->net->n == 0)
        return kt_err_set(KT_EINVAL, "the model has no layers");
    if ((rc = rewrite_layers(im->net, split_packed_dense)))
        return rc;
    if ((rc = rewrite_layers(im->net, fold_channel_shuffle)))
        return rc;
    im->net->has_params = !im->params_missing;
    const char *why = im->missing[0] ? im->missing
                                     : "a constant is computed by nodes ktune does not fold";
    if (im->params_missing && !(im->net->params_note = kt_strdup(why)))
        return kt_err_set(KT_ENOMEM, "out of memory");
    return net_seal(im->net);
}

/* ---- external data -------------------------------------------------------- */

/* Tensor t's external_data entry `key`, or NULL. */
static const char *ext_entry(const Onnx__TensorProto *t, const char *key)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (t->external_data[i]->key && strcmp(t->external_data[i]->key, key) == 0)
            return t->external_data[i]->value;
    return NULL;
}

/* A non-negative integer external_data entry; def when absent. */
static int ext_int(const Onnx__TensorProto *t, const char *key, long long def, long long *out)
{
    const char *v = ext_entry(t, key);
    *out = def;
    if (!v)
        return KT_OK;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < 0 || errno)
        return kt_err_set(KT_EINVAL, "tensor '%s': external data %s '%s' is not a byte count",
                          t->name ? t->name : "", key, v);
    *out = x;
    return KT_OK;
}

/* Read the bytes of an EXTERNAL tensor from its file under dir into raw_data,
 * so the rest of the importer sees an ordinary tensor. A missing file leaves
 * the tensor as it is (its values are then missing, and *missing says why). */
static int ext_load(Onnx__TensorProto *t, const char *dir, char *missing, size_t cap)
{
    const char *name = t->name ? t->name : "";
    const char *loc = ext_entry(t, "location");
    if (!loc || !*loc)
        return kt_err_set(KT_EINVAL, "tensor '%s': external data without a location", name);
    /* The spec's location is relative to the model's directory; reading
     * files elsewhere on the strength of a model file is refused. */
    if (loc[0] == '/' || strcmp(loc, "..") == 0 || strncmp(loc, "../", 3) == 0 ||
        strstr(loc, "/../") || (strlen(loc) >= 3 && strcmp(loc + strlen(loc) - 3, "/..") == 0))
        return kt_err_set(KT_EINVAL, "tensor '%s': external data location '%s' is outside the "
                          "model's directory", name, loc);
    long long off, length;
    int rc = ext_int(t, "offset", 0, &off);
    if (rc == KT_OK)
        rc = ext_int(t, "length", -1, &length);
    if (rc)
        return rc;
    if (!dir) {
        if (!missing[0])
            snprintf(missing, cap, "tensor '%.100s' is stored in '%.240s' (external data), and "
                     "the model was not read from a file", name, loc);
        return KT_OK;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, loc);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!missing[0])
            snprintf(missing, cap, "tensor '%.100s' is stored in %.240s (external data), which "
                     "cannot be opened: %.80s", name, path, strerror(errno));
        return KT_OK;
    }
    long long size = -1;
    if (fseeko(f, 0, SEEK_END) == 0)
        size = (long long)ftello(f);
    if (length < 0)
        length = size - off;
    if (size < 0 || off > size || length < 0 || length > size - off) {
        fclose(f);
        return kt_err_set(KT_EINVAL, "tensor '%s': external data bytes %lld..%lld are not inside "
                          "%s (%lld bytes)", name, off, off + (length < 0 ? 0 : length), path,
                          size);
    }
    uint8_t *b = malloc(length > 0 ? (size_t)length : 1);
    if (!b) {
        fclose(f);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    if (fseeko(f, (off_t)off, SEEK_SET) != 0 || fread(b, 1, (size_t)length, f) != (size_t)length) {
        fclose(f);
        free(b);
        return kt_err_set(KT_EIO, "tensor '%s': cannot read %s", name, path);
    }
    fclose(f);
    /* protobuf-c frees raw_data with the default allocator: malloc's. */
    if (t->has_raw_data && t->raw_data.data)
        free(t->raw_data.data);
    t->raw_data.data = b;
    t->raw_data.len = (size_t)length;
    t->has_raw_data = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
    return KT_OK;
}

/* Every external tensor of the graph: initializers and Constant values. */
static int ext_load_all(Onnx__ModelProto *m, const char *dir, char *missing, size_t cap)
{
    Onnx__GraphProto *g = m->graph;
    if (!g)
        return KT_OK;
    int rc = KT_OK;
    for (size_t i = 0; rc == KT_OK && i < g->n_initializer; i++)
        if (is_external(g->initializer[i]))
            rc = ext_load(g->initializer[i], dir, missing, cap);
    for (size_t i = 0; rc == KT_OK && i < g->n_node; i++)
        for (size_t a = 0; rc == KT_OK && a < g->node[i]->n_attribute; a++) {
            Onnx__TensorProto *t = g->node[i]->attribute[a]->t;
            if (t && is_external(t))
                rc = ext_load(t, dir, missing, cap);
        }
    return rc;
}

/* kt_net_onnx_parse with external data read from under dir (NULL: none). */
static kt_net_t *parse_model(const void *data, size_t len, const char *dir,
                             const kt_net_input_t *inputs, int ninputs, int batch)
{
    if (!data || len == 0) {
        kt_err_set(KT_EINVAL, "not an ONNX model: the file is empty");
        return NULL;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, data);
    if (!m) {
        kt_err_set(KT_EINVAL, "not an ONNX model: the protobuf message does not decode (a "
                   "truncated or corrupt file?)");
        return NULL;
    }
    imp_t im;
    memset(&im, 0, sizeof(im));
    int rc = ext_load_all(m, dir, im.missing, sizeof im.missing);
    if (rc == KT_OK)
        rc = import(&im, m, inputs, ninputs, batch);
    if (rc && kt_err_code() != KT_ENOMEM && strncmp(kt_err_msg(), "ONNX", 4) != 0)
        kt_err_prefix("ONNX model");
    json_decref(im.vals);
    json_decref(im.declared);
    json_decref(im.uses);
    json_decref(im.materialized);
    for (int i = 0; i < im.nconsts; i++) {
        free(im.consts[i].iv);
        free(im.consts[i].fv);
    }
    free(im.consts);
    free(im.skip);
    free(im.pat_in);
    free(im.pat_kind);
    free(im.pool_pad);
    for (size_t i = 0; im.ln && im.g && i < im.g->n_node; i++)
        free(im.ln[i]);
    free(im.ln);
    onnx__model_proto__free_unpacked(m, NULL);
    if (rc) {
        kt_net_free(im.net);
        return NULL;
    }
    return im.net;
}

kt_net_t *kt_net_onnx_parse(const void *data, size_t len, const kt_net_input_t *inputs,
                            int ninputs, int batch)
{
    return parse_model(data, len, NULL, inputs, ninputs, batch);
}

kt_net_t *kt_net_onnx_load(const char *path, const kt_net_input_t *inputs, int ninputs,
                           int batch)
{
    size_t len = 0;
    char *data = kt_file_read(path, &len);
    if (!data) {
        kt_err_prefix("reading ONNX file %s", path);
        return NULL;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) > 0 ? (int)(slash - path) : 1,
                 path);
    else
        snprintf(dir, sizeof dir, ".");
    kt_net_t *net = parse_model(data, len, dir, inputs, ninputs, batch);
    free(data);
    if (!net)
        kt_err_prefix("%s", path);
    return net;
}

int kt_net_parse_input_spec(const char *spec, kt_net_input_t *out)
{
    memset(out, 0, sizeof(*out));
    const char *eq = spec ? strrchr(spec, '=') : NULL;
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(out->name))
        return kt_err_set(KT_EINVAL, "--input needs NAME=DIMS such as data=1x3x224x224 (got '%s')",
                          spec ? spec : "");
    memcpy(out->name, spec, (size_t)(eq - spec));
    const char *p = eq + 1;
    while (*p) {
        if (out->ndim == KT_NET_MAX_DIMS)
            return kt_err_set(KT_EINVAL, "--input %s: more than %d dimensions", spec,
                              KT_NET_MAX_DIMS);
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || v > KT_TE_MAX_EXTENT || (*end && *end != 'x' && *end != ','))
            return kt_err_set(KT_EINVAL, "--input %s: dimensions must be positive integers "
                              "separated by 'x'", spec);
        out->dims[out->ndim++] = v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return kt_err_set(KT_EINVAL, "--input %s: a dimension is missing at the end", spec);
    }
    if (out->ndim == 0)
        return kt_err_set(KT_EINVAL, "--input %s: no dimensions", spec);
    return KT_OK;
}
