/* The layer-graph IR: building, shape inference, accessors (net_int.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net_int.h"
#include "te/te.h"
#include "util/err.h"
#include "util/util.h"

static const char *const op_names[NET__OP_COUNT] = {
    [NET_INPUT] = "input",       [NET_CONV2D] = "conv2d",         [NET_DENSE] = "dense",
    [NET_MATMUL] = "matmul",     [NET_BATCH_NORM] = "batch_norm", [NET_BIAS_ADD] = "bias_add",
    [NET_SCALE] = "scale",       [NET_ADD] = "add",               [NET_RELU] = "relu",
    [NET_GELU] = "gelu",         [NET_ELEMWISE] = "elementwise",  [NET_POOL] = "pool",
    [NET_CLIP] = "clip",         [NET_SIGMOID] = "sigmoid",       [NET_TANH] = "tanh",
    [NET_HARDSWISH] = "hardswish", [NET_HARDSIGMOID] = "hardsigmoid", [NET_SILU] = "silu",
    [NET_GLOBAL_POOL] = "global_avg_pool", [NET_SOFTMAX] = "softmax",
    [NET_LAYER_NORM] = "layer_norm",       [NET_SHAPE] = "shape",  [NET_REFOP] = "refop",
    [NET_UNSUPPORTED] = "unsupported",
};

const char *net_op_name(net_op_t op)
{
    return (unsigned)op < NET__OP_COUNT ? op_names[op] : "?";
}

int64_t net_shape_numel(const net_shape_t *s)
{
    if (s->ndim < 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->d[i];
    return n;
}

void net_shape_str(const net_shape_t *s, char *buf, size_t cap)
{
    if (s->ndim < 0) {
        snprintf(buf, cap, "[?]");
        return;
    }
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* ---- building ---------------------------------------------------------------- */

kt_net_t *net_new(const char *name)
{
    kt_net_t *n = calloc(1, sizeof(*n));
    if (!n || !(n->name = kt_strdup(name ? name : "network")) || !(n->index = json_object())) {
        if (n)
            free(n->name);
        free(n);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return n;
}

void kt_net_free(kt_net_t *net)
{
    if (!net)
        return;
    for (int i = 0; i < net->n; i++) {
        free(net->layers[i].name);
        free(net->layers[i].label);
        free(net->layers[i].in);
        free(net->layers[i].reason);
        free(net->layers[i].rop);
        for (int k = 0; k < net->layers[i].nparam; k++)
            free(net->layers[i].param[k].v);
    }
    free(net->layers);
    json_decref(net->index);
    free(net->is_output);
    free(net->params_note);
    free(net->name);
    free(net);
}

int net_find(const kt_net_t *net, const char *name)
{
    json_t *v = json_object_get(net->index, name);
    return v ? (int)json_integer_value(v) : -1;
}

net_layer_t *net_layer(kt_net_t *net, int i)
{
    return i >= 0 && i < net->n ? &net->layers[i] : NULL;
}

int net_layer_add(kt_net_t *net, const char *name, net_op_t op, const char *label,
                  const int *inputs, int ninputs)
{
    if (!name || !*name)
        return kt_err_set(KT_EINVAL, "a layer needs a non-empty name");
    if (net->n >= KT_NET_MAX_LAYERS)
        return kt_err_set(KT_EINVAL, "more than %d layers", KT_NET_MAX_LAYERS);
    if (net_find(net, name) >= 0)
        return kt_err_set(KT_EINVAL, "layer name '%s' is used twice", name);
    for (int i = 0; i < ninputs; i++)
        if (inputs[i] < 0 || inputs[i] >= net->n)
            return kt_err_set(KT_EINTERNAL, "layer '%s': bad input index %d", name, inputs[i]);
    if (net->n == net->cap) {
        int cap = net->cap ? net->cap * 2 : 64;
        net_layer_t *l = realloc(net->layers, (size_t)cap * sizeof(*l));
        if (!l)
            return kt_err_set(KT_ENOMEM, "out of memory");
        net->layers = l;
        net->cap = cap;
    }
    net_layer_t *l = &net->layers[net->n];
    memset(l, 0, sizeof(*l));
    l->op = op;
    l->stride[0] = l->stride[1] = 1;
    l->dilation[0] = l->dilation[1] = 1;
    l->groups = 1;
    l->affine = 1;
    l->axis = -1;
    l->eps = 1e-5;
    l->out.ndim = -1;
    l->name = kt_strdup(name);
    l->label = kt_strdup(label ? label : net_op_name(op));
    l->in = malloc((size_t)(ninputs > 0 ? ninputs : 1) * sizeof(int));
    if (!l->name || !l->label || !l->in) {
        free(l->name);
        free(l->label);
        free(l->in);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    if (json_object_set_new_nocheck(net->index, name, json_integer(net->n))) {
        free(l->name);
        free(l->label);
        free(l->in);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    if (ninputs > 0)
        memcpy(l->in, inputs, (size_t)ninputs * sizeof(int));
    l->nin = ninputs;
    return net->n++;
}

/* ---- shape inference -------------------------------------------------------- */

static int need_inputs(const net_layer_t *l, int lo, int hi)
{
    if (l->nin < lo || l->nin > hi) {
        if (lo == hi)
            return kt_err_set(KT_EINVAL, "field 'inputs' must name %d layer%s (got %d)", lo,
                              lo == 1 ? "" : "s", l->nin);
        return kt_err_set(KT_EINVAL, "field 'inputs' must name %d to %d layers (got %d)", lo, hi,
                          l->nin);
    }
    return KT_OK;
}

static int check_dims(const char *field, const net_shape_t *s)
{
    if (s->ndim < 1 || s->ndim > KT_NET_MAX_DIMS)
        return kt_err_set(KT_EINVAL, "field '%s' must have 1 to %d dimensions", field,
                          KT_NET_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->d[i] < 1 || s->d[i] > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "field '%s': dimension %d must be in 1..%lld (got %lld)",
                              field, i, (long long)KT_TE_MAX_EXTENT, (long long)s->d[i]);
        numel *= s->d[i];
        if (numel > ((int64_t)1 << 40))
            return kt_err_set(KT_EINVAL, "field '%s': tensor has more than 2^40 elements", field);
    }
    return KT_OK;
}

static int norm_axis(const char *field, int axis, int ndim, int *out)
{
    if (axis < -ndim || axis >= ndim)
        return kt_err_set(KT_EINVAL, "field '%s' must be in %d..%d for a rank-%d input (got %d)",
                          field, -ndim, ndim - 1, ndim, axis);
    *out = axis < 0 ? axis + ndim : axis;
    return KT_OK;
}

/* One window dimension: output size, or an error naming the fields. */
static int window(const char *dim, int64_t in, int64_t k, int64_t s, int64_t plo, int64_t phi,
                  int64_t dil, int64_t *out)
{
    int64_t span = in + plo + phi - dil * (k - 1) - 1;
    if (span < 0)
        return kt_err_set(KT_EINVAL,
                          "field 'kernel': the window (%lld with dilation) is larger than the "
                          "padded input %s (%lld)",
                          (long long)(dil * (k - 1) + 1), dim, (long long)(in + plo + phi));
    *out = span / s + 1;
    return KT_OK;
}

static int check_window(const net_layer_t *l, int has_dilation)
{
    for (int i = 0; i < 2; i++) {
        if (l->kernel[i] < 1 || l->kernel[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'kernel' must hold 2 values in 1..1024");
        if (l->stride[i] < 1 || l->stride[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'stride' must hold values in 1..1024");
        if (l->dilation[i] < 1 || l->dilation[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'dilation' must hold values in 1..1024");
        if (!has_dilation && l->dilation[i] != 1)
            return kt_err_set(KT_EINVAL, "field 'dilation' must be 1 for pooling");
    }
    for (int i = 0; i < 4; i++)
        if (l->pad[i] < 0 || l->pad[i] > 1024)
            return kt_err_set(KT_EINVAL, "field 'padding' must hold values in 0..1024");
    return KT_OK;
}

static int infer_window(const net_layer_t *l, const net_shape_t *x, net_shape_t *o, int64_t co)
{
    if (x->ndim != 4)
        return kt_err_set(KT_EINVAL, "field 'inputs': needs a 4-D [N, C, H, W] input (got rank %d)",
                          x->ndim);
    int64_t oh = 0, ow = 0;
    if (window("H", x->d[2], l->kernel[0], l->stride[0], l->pad[0], l->pad[2], l->dilation[0], &oh) ||
        window("W", x->d[3], l->kernel[1], l->stride[1], l->pad[1], l->pad[3], l->dilation[1], &ow))
        return KT_EINVAL;
    o->ndim = 4;
    o->d[0] = x->d[0];
    o->d[1] = co;
    o->d[2] = oh;
    o->d[3] = ow;
    return KT_OK;
}

/* numpy broadcasting of two shapes. */
static int broadcast(const net_shape_t *a, const net_shape_t *b, net_shape_t *o)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    o->ndim = n;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            net_shape_str(a, sa, sizeof(sa));
            net_shape_str(b, sb, sizeof(sb));
            return kt_err_set(KT_EINVAL, "field 'inputs': shapes %s and %s do not broadcast", sa,
                              sb);
        }
        o->d[i] = da > db ? da : db;
    }
    return KT_OK;
}

static int infer_shape_op(net_layer_t *l, const net_shape_t *x, const kt_net_t *net)
{
    net_shape_t *o = &l->out;
    switch (l->shape_kind) {
    case NET_SHAPE_RESHAPE: {
        if (l->ntarget < 1 || l->ntarget > KT_NET_MAX_DIMS)
            return kt_err_set(KT_EINVAL, "field 'shape' must have 1 to %d entries",
                              KT_NET_MAX_DIMS);
        int infer = -1;
        int64_t known = 1;
        o->ndim = l->ntarget;
        for (int i = 0; i < l->ntarget; i++) {
            int64_t t = l->target[i];
            if (t == -1) {
                if (infer >= 0)
                    return kt_err_set(KT_EINVAL, "field 'shape' may hold -1 only once");
                infer = i;
                continue;
            }
            if (t == 0) {
                if (i >= x->ndim)
                    return kt_err_set(KT_EINVAL, "field 'shape': 0 at position %d copies a "
                                      "dimension the rank-%d input lacks", i, x->ndim);
                t = x->d[i];
            }
            if (t < 1 || t > KT_TE_MAX_EXTENT)
                return kt_err_set(KT_EINVAL, "field 'shape' must hold positive sizes, 0 or -1");
            o->d[i] = t;
            known *= t;
        }
        int64_t numel = net_shape_numel(x);
        if (infer >= 0) {
            if (numel % known)
                return kt_err_set(KT_EINVAL, "field 'shape': %lld elements cannot be split "
                                  "into the given sizes", (long long)numel);
            o->d[infer] = numel / known;
            known = numel;
        }
        if (known != numel)
            return kt_err_set(KT_EINVAL, "field 'shape': %lld elements cannot be reshaped to %lld",
                              (long long)numel, (long long)known);
        return check_dims("shape", o);
    }
    case NET_SHAPE_FLATTEN: {
        int ax = 0;
        if (l->axis == x->ndim)
            ax = x->ndim;   /* ONNX allows axis == rank: [numel, 1] */
        else if (norm_axis("axis", l->axis, x->ndim, &ax))
            return KT_EINVAL;
        o->ndim = 2;
        o->d[0] = o->d[1] = 1;
        for (int i = 0; i < x->ndim; i++)
            o->d[i < ax ? 0 : 1] *= x->d[i];
        return KT_OK;
    }
    case NET_SHAPE_TRANSPOSE: {
        if (l->ntarget != x->ndim)
            return kt_err_set(KT_EINVAL, "field 'perm' must have %d entries (the input's rank)",
                              x->ndim);
        int seen[KT_NET_MAX_DIMS] = {0};
        o->ndim = x->ndim;
        for (int i = 0; i < x->ndim; i++) {
            int64_t p = l->target[i];
            if (p < 0 || p >= x->ndim || seen[p]++)
                return kt_err_set(KT_EINVAL, "field 'perm' must be a permutation of 0..%d",
                                  x->ndim - 1);
            o->d[i] = x->d[p];
        }
        return KT_OK;
    }
    case NET_SHAPE_SHUFFLE:
        if (x->ndim < 2 || l->groups < 1 || x->d[1] % l->groups)
            return kt_err_set(KT_EINVAL, "field 'groups': a channel shuffle needs a rank of at "
                              "least 2 and groups dividing axis 1");
        *o = *x;
        return KT_OK;
    case NET_SHAPE_CONCAT: {
        int ax = 0;
        if (norm_axis("axis", l->axis, x->ndim, &ax))
            return KT_EINVAL;
        *o = *x;
        for (int k = 1; k < l->nin; k++) {
            const net_shape_t *y = &net->layers[l->in[k]].out;
            if (y->ndim != x->ndim)
                return kt_err_set(KT_EINVAL, "field 'inputs': input %d has rank %d, not %d", k,
                                  y->ndim, x->ndim);
            for (int i = 0; i < x->ndim; i++)
                if (i != ax && y->d[i] != x->d[i])
                    return kt_err_set(KT_EINVAL, "field 'inputs': input %d differs in dimension "
                                      "%d (%lld, not %lld)", k, i, (long long)y->d[i],
                                      (long long)x->d[i]);
            o->d[ax] += y->d[ax];
        }
        return check_dims("inputs", o);
    }
    case NET_SHAPE_EXPLICIT:
        o->ndim = l->ntarget;
        memcpy(o->d, l->target, sizeof(o->d));
        return check_dims("shape", o);
    }
    return kt_err_set(KT_EINTERNAL, "bad shape kind");
}

const char *const net_refop_roles[KT_REFOP_MAX_IN] = {"c0", "c1", "c2"};

/* A reference operator: its inputs' shapes are the call's, and its output
 * is a reshape of the call's (`target`: a reduction without keepdims). */
static int infer_refop(const kt_net_t *net, net_layer_t *l)
{
    kt_refop_t *r = l->rop;
    if (!r)
        return kt_err_set(KT_EINTERNAL, "a refop layer without its call");
    int used = 0;
    for (int k = 0; k < r->nin; k++) {
        int s = l->rop_src[k];
        if (s < 0)
            continue;
        if (s >= l->nin)
            return kt_err_set(KT_EINTERNAL, "refop input %d reads input %d of %d", k, s, l->nin);
        const net_shape_t *x = &net->layers[l->in[s]].out;
        r->ndim[k] = x->ndim;
        memcpy(r->din[k], x->d, sizeof(r->din[k]));
        used++;
    }
    if (used != l->nin)
        return kt_err_set(KT_EINTERNAL, "refop: %d of %d inputs used", used, l->nin);
    if (kt_refop_infer(r))
        return KT_EINVAL;
    net_shape_t *o = &l->out;
    o->ndim = l->ntarget;   /* the importer always says the shape; 0: a scalar */
    memcpy(o->d, l->target, sizeof(o->d));
    if (net_shape_numel(o) != kt_refop_numel(r->ondim, r->dout))
        return kt_err_set(KT_EINVAL, "field 'shape': %lld elements, the operator makes %lld",
                          (long long)net_shape_numel(o),
                          (long long)kt_refop_numel(r->ondim, r->dout));
    if (o->ndim == 0) {
        o->ndim = 1;   /* a scalar result is held as one element */
        o->d[0] = 1;
    }
    return check_dims("shape", o);
}

int net_layer_finish(kt_net_t *net, int i)
{
    net_layer_t *l = &net->layers[i];
    l->out.ndim = -1;
    for (int k = 0; k < l->nin; k++)
        if (net->layers[l->in[k]].out.ndim < 0) {
            l->blocked = 1;   /* after an unsupported operator: nothing to infer */
            return KT_OK;
        }
    const net_shape_t *x = l->nin > 0 ? &net->layers[l->in[0]].out : NULL;
    net_shape_t *o = &l->out;
    switch (l->op) {
    case NET_INPUT:
        if (l->nin != 0)
            return kt_err_set(KT_EINVAL, "field 'inputs': an input layer has none");
        o->ndim = l->ntarget;
        memcpy(o->d, l->target, sizeof(o->d));
        return check_dims("shape", o);
    case NET_CONV2D: {
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (check_window(l, 1))
            return KT_EINVAL;
        if (l->channels < 1 || l->channels > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "field 'channels' must be a positive integer");
        if (x->ndim != 4)
            return kt_err_set(KT_EINVAL, "field 'inputs': conv2d needs a 4-D [N, C, H, W] input "
                              "(got rank %d)", x->ndim);
        if (l->groups < 1 || x->d[1] % l->groups || l->channels % l->groups)
            return kt_err_set(KT_EINVAL, "field 'groups' (%lld) must divide the input channels "
                              "(%lld) and 'channels' (%lld)", (long long)l->groups,
                              (long long)x->d[1], (long long)l->channels);
        return infer_window(l, x, o, l->channels);
    }
    case NET_POOL:
        if (need_inputs(l, 1, 1) || check_window(l, 0))
            return KT_EINVAL;
        if (x->ndim == 4 && (l->pad[0] >= l->kernel[0] || l->pad[2] >= l->kernel[0] ||
                             l->pad[1] >= l->kernel[1] || l->pad[3] >= l->kernel[1]))
            return kt_err_set(KT_EINVAL, "field 'padding' must be smaller than the kernel");
        return infer_window(l, x, o, x->ndim == 4 ? x->d[1] : 0);
    case NET_GLOBAL_POOL:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (x->ndim != 4)
            return kt_err_set(KT_EINVAL, "field 'inputs': needs a 4-D [N, C, H, W] input (got "
                              "rank %d)", x->ndim);
        *o = *x;
        o->d[2] = o->d[3] = 1;
        return KT_OK;
    case NET_DENSE:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (l->channels < 1 || l->channels > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "field 'units' must be a positive integer");
        if (x->ndim < 1)
            return kt_err_set(KT_EINVAL, "field 'inputs': dense needs an input of rank >= 1");
        *o = *x;
        if (o->ndim == 1) {   /* a vector is one row */
            o->ndim = 2;
            o->d[1] = x->d[0];
            o->d[0] = 1;
        }
        o->d[o->ndim - 1] = l->channels;
        return KT_OK;
    case NET_MATMUL: {
        if (need_inputs(l, 2, 2))
            return KT_EINVAL;
        const net_shape_t *y = &net->layers[l->in[1]].out;
        if (x->ndim < 2 || y->ndim < 2)
            return kt_err_set(KT_EINVAL, "field 'inputs': matmul needs inputs of rank >= 2");
        if (x->d[x->ndim - 1] != y->d[y->ndim - 2])
            return kt_err_set(KT_EINVAL, "field 'inputs': inner dimensions differ (%lld and "
                              "%lld)", (long long)x->d[x->ndim - 1],
                              (long long)y->d[y->ndim - 2]);
        net_shape_t bx = *x, by = *y, bo;
        bx.ndim -= 2;
        by.ndim -= 2;
        if (broadcast(&bx, &by, &bo))
            return KT_EINVAL;
        *o = bo;
        o->ndim = bo.ndim + 2;
        o->d[bo.ndim] = x->d[x->ndim - 2];
        o->d[bo.ndim + 1] = y->d[y->ndim - 1];
        return check_dims("inputs", o);
    }
    case NET_BATCH_NORM:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (x->ndim < 2)
            return kt_err_set(KT_EINVAL, "field 'inputs': batch_norm needs an input of rank >= 2 "
                              "(channels on axis 1)");
        l->axis = 1;
        *o = *x;
        return KT_OK;
    case NET_BIAS_ADD:
    case NET_SCALE:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (!(l->op == NET_SCALE && l->scalar) && norm_axis("axis", l->axis, x->ndim, &l->axis))
            return KT_EINVAL;
        *o = *x;
        return KT_OK;
    case NET_ADD:
        if (need_inputs(l, 2, 2))
            return KT_EINVAL;
        return broadcast(x, &net->layers[l->in[1]].out, o) || check_dims("inputs", o);
    case NET_ELEMWISE:
        if (need_inputs(l, 1, 2))
            return KT_EINVAL;
        if (l->nin == 2)
            return broadcast(x, &net->layers[l->in[1]].out, o) || check_dims("inputs", o);
        *o = *x;
        return KT_OK;
    case NET_CLIP:
        if (!isfinite(l->lo) || !isfinite(l->hi) || l->lo > l->hi)
            return kt_err_set(KT_EINVAL, "field 'min': clip bounds must be finite with min <= "
                              "max");
        /* fall through */
    case NET_RELU:
    case NET_GELU:
    case NET_HARDSIGMOID:
        if (!isfinite(l->lo) || !isfinite(l->hi))
            return kt_err_set(KT_EINVAL, "field 'alpha': hardsigmoid's alpha and beta must be "
                              "finite");
        /* fall through */
    case NET_SIGMOID:
    case NET_TANH:
    case NET_HARDSWISH:
    case NET_SILU:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        *o = *x;
        return KT_OK;
    case NET_SOFTMAX:
    case NET_LAYER_NORM:
        if (need_inputs(l, 1, 1))
            return KT_EINVAL;
        if (x->ndim < 2)
            return kt_err_set(KT_EINVAL, "field 'inputs': needs an input of rank >= 2");
        if (l->op == NET_SOFTMAX) {
            int ax = 0;
            if (norm_axis("axis", l->axis, x->ndim, &ax))
                return KT_EINVAL;
            if (ax != x->ndim - 1)
                return kt_err_set(KT_EINVAL, "field 'axis': only softmax over the last axis is "
                                  "supported (got axis %d of rank %d)", l->axis, x->ndim);
            l->axis = ax;
        }
        *o = *x;
        return KT_OK;
    case NET_SHAPE:
        if (need_inputs(l, 1, l->shape_kind == NET_SHAPE_CONCAT ? 1 << 20 : 1))
            return KT_EINVAL;
        return infer_shape_op(l, x, net);
    case NET_REFOP:
        return infer_refop(net, l);
    case NET_UNSUPPORTED:
        o->ndim = l->ntarget > 0 ? l->ntarget : -1;
        memcpy(o->d, l->target, sizeof(o->d));
        return KT_OK;
    default:
        return kt_err_set(KT_EINTERNAL, "bad layer op %d", (int)l->op);
    }
}

net_param_t *net_layer_find_param(const net_layer_t *l, const char *role)
{
    for (int k = 0; l && role && k < l->nparam; k++)
        if (strcmp(l->param[k].role, role) == 0)
            return (net_param_t *)&l->param[k];
    return NULL;
}

int net_layer_is_reshape(const net_layer_t *l)
{
    return l->op == NET_SHAPE &&
           (l->shape_kind == NET_SHAPE_FLATTEN || l->shape_kind == NET_SHAPE_RESHAPE ||
            (l->shape_kind == NET_SHAPE_EXPLICIT && l->label &&
             strcasecmp(l->label, "reshape") == 0));
}

void net_layer_drop_params(net_layer_t *l)
{
    for (int k = 0; k < l->nparam; k++)
        free(l->param[k].v);
    l->nparam = 0;
}

int net_layer_set_param(kt_net_t *net, int i, const char *role, float *v, int64_t numel)
{
    net_layer_t *l = net_layer(net, i);
    int bad = !l || !role || !v || numel < 1 || l->nparam == NET_MAX_PARAMS ||
              net_layer_find_param(l, role);
    if (bad) {
        free(v);
        return kt_err_set(KT_EINTERNAL, "layer %d: cannot attach parameter '%s'", i,
                          role ? role : "");
    }
    l->param[l->nparam++] = (net_param_t){role, v, numel};
    return KT_OK;
}

int net_add_unsupported(kt_net_t *net, const char *name, const char *label, const int *inputs,
                        int ninputs, const net_shape_t *shape, const char *reason)
{
    int i = net_layer_add(net, name, NET_UNSUPPORTED, label, inputs, ninputs);
    if (i < 0)
        return i;
    net_layer_t *l = &net->layers[i];
    if (reason && !(l->reason = kt_strdup(reason)))
        return KT_ENOMEM;
    if (shape && shape->ndim > 0 && check_dims("shape", shape) == KT_OK) {
        l->ntarget = shape->ndim;
        memcpy(l->target, shape->d, sizeof(l->target));
    }
    kt_err_clear();
    net_layer_finish(net, i);
    return i;
}

int net_mark_output(kt_net_t *net, int i)
{
    if (i < 0 || i >= net->n)
        return kt_err_set(KT_EINTERNAL, "bad output index");
    if (!net->layers[i].marked_output)
        net->noutputs_marked++;
    net->layers[i].marked_output = 1;
    return KT_OK;
}

int net_seal(kt_net_t *net)
{
    char *o = calloc((size_t)(net->n > 0 ? net->n : 1), 1);
    if (!o)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (net->noutputs_marked) {
        for (int i = 0; i < net->n; i++)
            o[i] = (char)net->layers[i].marked_output;
    } else {
        for (int i = 0; i < net->n; i++)
            o[i] = 1;
        for (int i = 0; i < net->n; i++)
            for (int k = 0; k < net->layers[i].nin; k++)
                o[net->layers[i].in[k]] = 0;
    }
    free(net->is_output);
    net->is_output = o;
    return KT_OK;
}

/* ---- public accessors ---------------------------------------------------------- */

const char *kt_net_name(const kt_net_t *net) { return net ? net->name : NULL; }
int kt_net_num_layers(const kt_net_t *net) { return net ? net->n : 0; }

const char *kt_net_layer_name(const kt_net_t *net, int i)
{
    return net && i >= 0 && i < net->n ? net->layers[i].name : NULL;
}

const char *kt_net_layer_op(const kt_net_t *net, int i)
{
    if (!net || i < 0 || i >= net->n)
        return NULL;
    const net_layer_t *l = &net->layers[i];
    return l->op == NET_ELEMWISE || l->op == NET_UNSUPPORTED || l->op == NET_SHAPE ||
                   l->op == NET_POOL || l->op == NET_REFOP
               ? l->label
               : net_op_name(l->op);
}

int kt_net_layer_shape(const kt_net_t *net, int i, int64_t *dims)
{
    if (!net || i < 0 || i >= net->n)
        return -1;
    const net_shape_t *s = &net->layers[i].out;
    for (int k = 0; k < s->ndim; k++)
        dims[k] = s->d[k];
    return s->ndim;
}

int kt_net_has_params(const kt_net_t *net) { return net && net->has_params; }

const char *kt_net_params_note(const kt_net_t *net)
{
    return net && !net->has_params && net->params_note ? net->params_note : NULL;
}

const float *kt_net_layer_param(const kt_net_t *net, int i, const char *role, int64_t *numel)
{
    if (numel)
        *numel = 0;
    if (!net || !net->has_params || i < 0 || i >= net->n || !role)
        return NULL;
    const net_param_t *pr = net_layer_find_param(&net->layers[i], role);
    if (pr && numel)
        *numel = pr->numel;
    return pr ? pr->v : NULL;
}

double kt_net_layer_eps(const kt_net_t *net, int i)
{
    if (!net || i < 0 || i >= net->n)
        return -1.0;
    const net_layer_t *l = &net->layers[i];
    return l->op == NET_BATCH_NORM || l->op == NET_LAYER_NORM ? l->eps : -1.0;
}
