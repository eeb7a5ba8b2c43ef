/*
 * Internal to common/net: the layer-graph IR shared by the builders (built-in
 * zoo, network files, ONNX import) and task extraction. Layers are stored in
 * topological order (a layer's inputs are earlier layers) because every
 * builder appends a layer only after its inputs exist.
 *
 * Building: net_layer_add() appends a layer with its inputs; the caller fills
 * the attributes the op needs and calls net_layer_finish(), which validates
 * them and infers the output shape, or fails with a message naming the field
 * (callers prefix the layer). A layer whose inputs have unknown shapes (after
 * an unsupported ONNX operator) is kept with `blocked` set and an unknown
 * shape instead of failing.
 */
#ifndef KT_NET_NET_INT_H
#define KT_NET_NET_INT_H

#include <stdint.h>

#include "net.h"
#include "refop/refop.h"

typedef enum {
    NET_INPUT = 0,    /* graph input: shape given */
    NET_CONV2D,       /* data [N, C, H, W]; constant weights; groups 1, = C (depthwise) or other */
    NET_DENSE,        /* data [..., K] times constant weight [N, K]^T */
    NET_MATMUL,       /* two activations [..., M, K] x [..., K, N] */
    NET_BATCH_NORM,   /* inference batch norm: per-channel scale and shift on axis 1 */
    NET_BIAS_ADD,     /* + a constant vector along `axis` */
    NET_SCALE,        /* * a constant, scalar or a vector along `axis` */
    NET_ADD,          /* sum of two activations (numpy broadcasting) */
    NET_RELU,
    NET_GELU,         /* erf form */
    NET_CLIP,         /* clamp to [lo, hi] (relu6 is clip 0..6) */
    NET_SIGMOID,
    NET_TANH,
    NET_HARDSWISH,    /* x * clamp(x / 6 + 1/2, 0, 1) */
    NET_HARDSIGMOID,  /* clamp(lo * x + hi, 0, 1): ONNX's alpha = lo, beta = hi */
    NET_SILU,         /* x * sigmoid(x) */
    NET_ELEMWISE,     /* any other elementwise op (label says which); no te epilogue */
    NET_POOL,         /* 2-D max or average pool */
    NET_GLOBAL_POOL,  /* global average pool over H, W */
    NET_SOFTMAX,      /* over the last axis */
    NET_LAYER_NORM,   /* over the last axis */
    NET_SHAPE,        /* reshape, flatten, transpose, concat...: moves data only */
    NET_REFOP,        /* any other operator, run by its reference implementation (refop.h) */
    NET_UNSUPPORTED,  /* an operator ktune cannot model; `reason` says why */
    NET__OP_COUNT
} net_op_t;

/* How a NET_SHAPE layer's output shape follows from its inputs. */
typedef enum {
    NET_SHAPE_RESHAPE = 0,  /* target: dims, 0 copies the input dim, one -1 is inferred */
    NET_SHAPE_FLATTEN,      /* axis: [prod(d[:axis]), prod(d[axis:])] */
    NET_SHAPE_TRANSPOSE,    /* target: permutation */
    NET_SHAPE_CONCAT,       /* axis: inputs joined along it */
    NET_SHAPE_EXPLICIT,     /* target: the output shape, computed by the importer */
    NET_SHAPE_SHUFFLE,      /* groups: ShuffleNet's channel shuffle of axis 1; output channel
                             * j * groups + i is input channel i * (C / groups) + j */
} net_shape_kind_t;

typedef struct {
    int ndim;   /* -1: unknown */
    int64_t d[KT_NET_MAX_DIMS];
} net_shape_t;

/* One constant parameter's values (net.h lists the roles and layouts). */
#define NET_MAX_PARAMS 4   /* batch norm: gamma, beta, mean, var */
typedef struct {
    const char *role;    /* a string literal: "weight", "bias", "gamma", ... */
    float *v;            /* owned; numel float32 values, row-major */
    int64_t numel;
} net_param_t;

typedef struct {
    char *name;
    char *label;         /* op as the source wrote it ("conv2d", "Conv", "clip") */
    net_op_t op;
    int nin;
    int *in;             /* input layer indices */
    net_shape_t out;
    int blocked;         /* an input's shape is unknown: nothing inferred */
    /* attributes (which ones apply depends on op) */
    int64_t channels;    /* conv: output channels; dense: units */
    int64_t kernel[2];   /* conv, pool */
    int64_t stride[2];
    int64_t pad[4];      /* top, left, bottom, right */
    int64_t dilation[2];
    int64_t groups;      /* conv */
    int bias;            /* conv, dense: has its own bias */
    int pool_max;        /* pool: 1 max, 0 average */
    int pool_include_pad;   /* average pool: the padding counts (divide by KH * KW) */
    int axis;            /* bias_add, scale, softmax, flatten, concat (negative counts from the end) */
    int scalar;          /* scale: a scalar rather than a vector */
    int affine;          /* layer norm: gamma and beta */
    double lo, hi;       /* clip: bounds (finite, lo <= hi); hardsigmoid: alpha, beta */
    net_shape_kind_t shape_kind;
    int ntarget;
    int64_t target[KT_NET_MAX_DIMS];
    char *reason;        /* unsupported: why */
    int marked_output;   /* named as a network output by the source */
    int int_input;       /* input: the source's type is integer or bool (held as floats) */
    int secondary;       /* unsupported: an extra output, reported only when used */
    double eps;          /* batch norm, layer norm: epsilon (1e-5 unless the source says) */
    net_param_t param[NET_MAX_PARAMS];   /* constant values (ONNX import only) */
    /* refop: the call (its output shape may differ from `out` by a reshape
     * of the same size, a reduction without keepdims: `target`, whose rank
     * 0 is held as shape [1]), and where each of
     * its inputs comes from: >= 0 that input of the layer, -1 the constant
     * parameter "c0", "c1" or "c2" of that slot. */
    kt_refop_t *rop;
    int rop_src[KT_REFOP_MAX_IN];   /* a constant slot k is parameter net_refop_roles[k] */
    int nparam;
} net_layer_t;

struct kt_net {
    char *name;
    json_t *index;       /* layer name -> index */
    net_layer_t *layers;
    int n, cap;
    char *is_output;     /* per layer: the network returns it (set by net_seal) */
    int noutputs_marked; /* 0: outputs are the layers nobody consumes */
    int has_params;      /* every layer's constant values are attached (ONNX import) */
    char *params_note;   /* why not, when not: the first value the file did not hold */
};

/* Parameter roles of a refop layer's constant inputs, by slot. */
extern const char *const net_refop_roles[KT_REFOP_MAX_IN];

/* ---- building -------------------------------------------------------------- */

kt_net_t *net_new(const char *name);
/* Append a layer; returns its index or negative (duplicate name, bad input,
 * OOM) with kt_err set. Attributes are zeroed except stride and dilation
 * (1, 1), groups 1, affine 1 and axis -1. */
int net_layer_add(kt_net_t *net, const char *name, net_op_t op, const char *label,
                  const int *inputs, int ninputs);
net_layer_t *net_layer(kt_net_t *net, int i);
/* Validate the layer's attributes and infer its output shape; 0 or KT_EINVAL
 * with a message naming the field ("field 'kernel': ..."). */
int net_layer_finish(kt_net_t *net, int i);
/* Attach the values of parameter `role` (a string literal) to layer i; the
 * layer takes ownership of v (freed here on failure). 0, KT_ENOMEM or
 * KT_EINTERNAL (a bad index, a role given twice, too many parameters). */
int net_layer_set_param(kt_net_t *net, int i, const char *role, float *v, int64_t numel);
/* Layer l's parameter `role`, or NULL when it has none (l may be NULL). */
net_param_t *net_layer_find_param(const net_layer_t *l, const char *role);
/* Whether layer l only gives its input another shape of the same elements
 * in row-major order (reshape, flatten, squeeze): no data moves. */
int net_layer_is_reshape(const net_layer_t *l);
/* Free layer l's parameters (a rewrite gives it others). */
void net_layer_drop_params(net_layer_t *l);
/* Append and finish an unsupported layer with an optional known shape. */
int net_add_unsupported(kt_net_t *net, const char *name, const char *label, const int *inputs,
                        int ninputs, const net_shape_t *shape, const char *reason);
/* Find a layer by name; -1 if none. */
int net_find(const kt_net_t *net, const char *name);
/* Mark layer i as a network output (otherwise outputs are the unconsumed layers). */
int net_mark_output(kt_net_t *net, int i);
/* Finish building: decide the outputs. 0 or KT_ENOMEM. */
int net_seal(kt_net_t *net);

/* "conv2d", "dense", ... (the network-file spelling of an op). */
const char *net_op_name(net_op_t op);

/* Number of elements, or -1 for an unknown shape. */
int64_t net_shape_numel(const net_shape_t *s);
/* "[1, 3, 224, 224]" into buf. */
void net_shape_str(const net_shape_t *s, char *buf, size_t cap);

#endif
