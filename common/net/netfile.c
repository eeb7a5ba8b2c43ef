/* JSON network files (format in NETWORKS.md) -> layer graph (net.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_int.h"
#include "util/err.h"
#include "util/util.h"

#define MAX_FIELDS 12

/* Reading one layer object: remembers the fields read to reject the rest. */
typedef struct {
    json_t *obj;
    const char *seen[MAX_FIELDS];
    int nseen;
} rd_t;

static json_t *field(rd_t *r, const char *name)
{
    if (r->nseen < MAX_FIELDS)
        r->seen[r->nseen++] = name;
    return json_object_get(r->obj, name);
}

static int get_int(rd_t *r, const char *name, int64_t lo, int64_t hi, int64_t dflt, int required,
                   int64_t *out)
{
    json_t *v = field(r, name);
    if (!v) {
        if (required)
            return kt_err_set(KT_EINVAL, "field '%s' is missing", name);
        *out = dflt;
        return KT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return kt_err_set(KT_EINVAL, "field '%s' must be an integer in %lld..%lld", name,
                          (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return KT_OK;
}

/* A required finite number. */
static int get_num(rd_t *r, const char *name, double *out)
{
    json_t *v = field(r, name);
    if (!v)
        return kt_err_set(KT_EINVAL, "field '%s' is missing", name);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return kt_err_set(KT_EINVAL, "field '%s' must be a finite number", name);
    *out = json_number_value(v);
    return KT_OK;
}

static int get_bool(rd_t *r, const char *name, int dflt, int *out)
{
    json_t *v = field(r, name);
    if (v && !json_is_boolean(v))
        return kt_err_set(KT_EINVAL, "field '%s' must be true or false", name);
    *out = v ? json_is_true(v) : dflt;
    return KT_OK;
}

/* A list of integers in lo..hi whose length is one of `lens` (0-terminated),
 * or a single integer when `scalar_ok` (stored in out[0], length 1). */
static int get_ints(rd_t *r, const char *name, const int *lens, int scalar_ok, int64_t lo,
                    int64_t hi, int required, int64_t *out, int *n)
{
    json_t *v = field(r, name);
    *n = 0;
    if (!v) {
        if (required)
            return kt_err_set(KT_EINVAL, "field '%s' is missing", name);
        return KT_OK;
    }
    if (scalar_ok && json_is_integer(v)) {
        if (json_integer_value(v) < lo || json_integer_value(v) > hi)
            return kt_err_set(KT_EINVAL, "field '%s' must be in %lld..%lld", name, (long long)lo,
                              (long long)hi);
        out[0] = json_integer_value(v);
        *n = 1;
        return KT_OK;
    }
    int len_ok = 0;
    size_t len = json_is_array(v) ? json_array_size(v) : 0;
    for (int i = 0; lens[i]; i++)
        len_ok |= (size_t)lens[i] == len;
    if (!json_is_array(v) || !len_ok) {
        char want[64] = "";
        size_t w = 0;
        for (int i = 0; lens[i] && w < sizeof(want); i++)
            w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%d", i ? " or " : "", lens[i]);
        return kt_err_set(KT_EINVAL, "field '%s' must be %sa list of %s integers", name,
                          scalar_ok ? "an integer or " : "", want);
    }
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > hi)
            return kt_err_set(KT_EINVAL, "field '%s': entry %zu must be an integer in %lld..%lld",
                              name, i, (long long)lo, (long long)hi);
        out[i] = json_integer_value(e);
    }
    *n = (int)len;
    return KT_OK;
}

/* kernel / stride / dilation: an integer or [h, w]. */
static int get_pair(rd_t *r, const char *name, int required, int64_t lo, int64_t *out)
{
    static const int two[] = {2, 0};
    int64_t v[2] = {out[0], out[1]};
    int n = 0;
    if (get_ints(r, name, two, 1, lo, 1024, required, v, &n))
        return KT_EINVAL;
    if (n == 1)
        v[1] = v[0];
    if (n) {
        out[0] = v[0];
        out[1] = v[1];
    }
    return KT_OK;
}

/* padding: an integer, [h, w] or [top, left, bottom, right]. */
static int get_padding(rd_t *r, int64_t *pad)
{
    static const int lens[] = {2, 4, 0};
    int64_t v[4] = {0, 0, 0, 0};
    int n = 0;
    if (get_ints(r, "padding", lens, 1, 0, 1024, 0, v, &n))
        return KT_EINVAL;
    if (n == 1)
        v[1] = v[2] = v[3] = v[0];
    else if (n == 2) {
        v[2] = v[0];
        v[3] = v[1];
    }
    memcpy(pad, v, sizeof(v));
    return KT_OK;
}

static int reject_unknown(rd_t *r)
{
    const char *key;
    json_t *val;
    json_object_foreach(r->obj, key, val) {
        int known = 0;
        for (int i = 0; i < r->nseen && !known; i++)
            known = strcmp(key, r->seen[i]) == 0;
        if (!known)
            return kt_err_set(KT_EINVAL, "unknown field '%s'", key);
    }
    return KT_OK;
}

/* File ops: name, IR op, elementwise label, inputs (min, max; -1: any). */
typedef struct {
    const char *name;
    net_op_t op;
    const char *label;
    int min_in, max_in;
} fop_t;

static const fop_t fops[] = {
    {"input", NET_INPUT, NULL, 0, 0},
    {"conv2d", NET_CONV2D, NULL, 1, 1},
    {"dense", NET_DENSE, NULL, 1, 1},
    {"matmul", NET_MATMUL, NULL, 2, 2},
    {"batch_norm", NET_BATCH_NORM, NULL, 1, 1},
    {"bias_add", NET_BIAS_ADD, NULL, 1, 1},
    {"scale", NET_SCALE, NULL, 1, 1},
    {"add", NET_ADD, NULL, 2, 2},
    {"relu", NET_RELU, NULL, 1, 1},
    {"gelu", NET_GELU, NULL, 1, 1},
    {"relu6", NET_CLIP, "clip", 1, 1},
    {"clip", NET_CLIP, "clip", 1, 1},
    {"sigmoid", NET_SIGMOID, NULL, 1, 1},
    {"tanh", NET_TANH, NULL, 1, 1},
    {"hardswish", NET_HARDSWISH, NULL, 1, 1},
    {"hardsigmoid", NET_HARDSIGMOID, NULL, 1, 1},
    {"silu", NET_SILU, NULL, 1, 1},
    {"mul", NET_ELEMWISE, "mul", 2, 2},
    {"elementwise", NET_ELEMWISE, NULL, 1, 2},
    {"max_pool", NET_POOL, "max_pool", 1, 1},
    {"avg_pool", NET_POOL, "avg_pool", 1, 1},
    {"global_avg_pool", NET_GLOBAL_POOL, NULL, 1, 1},
    {"softmax", NET_SOFTMAX, NULL, 1, 1},
    {"layer_norm", NET_LAYER_NORM, NULL, 1, 1},
    {"flatten", NET_SHAPE, "flatten", 1, 1},
    {"reshape", NET_SHAPE, "reshape", 1, 1},
    {"transpose", NET_SHAPE, "transpose", 1, 1},
    {"concat", NET_SHAPE, "concat", 1, -1},
};

/* Attributes of layer l from the object, by op. */
static int read_attrs(rd_t *r, const fop_t *f, net_layer_t *l, int input_rank)
{
    int64_t v = 0;
    static const int any_rank[] = {1, 2, 3, 4, 5, 6, 7, 8, 0};
    switch (f->op) {
    case NET_INPUT:
        return get_ints(r, "shape", any_rank, 0, 1, KT_TE_MAX_EXTENT, 1, l->target, &l->ntarget);
    case NET_CONV2D:
        if (get_int(r, "channels", 1, KT_TE_MAX_EXTENT, 0, 1, &l->channels) ||
            get_pair(r, "kernel", 1, 1, l->kernel) || get_pair(r, "stride", 0, 1, l->stride) ||
            get_padding(r, l->pad) || get_pair(r, "dilation", 0, 1, l->dilation) ||
            get_int(r, "groups", 1, KT_TE_MAX_EXTENT, 1, 0, &l->groups) ||
            get_bool(r, "bias", 0, &l->bias))
            return KT_EINVAL;
        return KT_OK;
    case NET_DENSE:
        if (get_int(r, "units", 1, KT_TE_MAX_EXTENT, 0, 1, &l->channels) ||
            get_bool(r, "bias", 1, &l->bias))
            return KT_EINVAL;
        return KT_OK;
    case NET_BIAS_ADD:
    case NET_SCALE:
        if (f->op == NET_SCALE) {
            int per_channel = 0;
            if (get_bool(r, "per_channel", 0, &per_channel))
                return KT_EINVAL;
            l->scalar = !per_channel;
        }
        if (get_int(r, "axis", -KT_NET_MAX_DIMS, KT_NET_MAX_DIMS - 1,
                    input_rank == 4 ? 1 : -1, 0, &v))
            return KT_EINVAL;
        l->axis = (int)v;
        return KT_OK;
    case NET_POOL:
        l->pool_max = strcmp(f->name, "max_pool") == 0;
        if (get_pair(r, "kernel", 1, 1, l->kernel) || get_pair(r, "stride", 0, 1, l->stride) ||
            get_padding(r, l->pad))
            return KT_EINVAL;
        return KT_OK;
    case NET_SOFTMAX:
        if (get_int(r, "axis", -KT_NET_MAX_DIMS, KT_NET_MAX_DIMS - 1, -1, 0, &v))
            return KT_EINVAL;
        l->axis = (int)v;
        return KT_OK;
    case NET_LAYER_NORM:
        return get_bool(r, "affine", 1, &l->affine) ? KT_EINVAL : KT_OK;
    case NET_CLIP:
        if (strcmp(f->name, "relu6") == 0) {
            l->lo = 0.0;
            l->hi = 6.0;
            return KT_OK;
        }
        return get_num(r, "min", &l->lo) || get_num(r, "max", &l->hi) ? KT_EINVAL : KT_OK;
    case NET_HARDSIGMOID:
        return get_num(r, "alpha", &l->lo) || get_num(r, "beta", &l->hi) ? KT_EINVAL : KT_OK;
    case NET_ELEMWISE:
        if (!f->label) {
            json_t *fn = field(r, "fn");
            if (!json_is_string(fn) || !*json_string_value(fn))
                return kt_err_set(KT_EINVAL, "field 'fn' must name the elementwise function");
            free(l->label);
            l->label = kt_strdup(json_string_value(fn));
            if (!l->label)
                return KT_ENOMEM;
        }
        return KT_OK;
    case NET_SHAPE:
        if (strcmp(f->name, "flatten") == 0) {
            l->shape_kind = NET_SHAPE_FLATTEN;
            if (get_int(r, "axis", -KT_NET_MAX_DIMS, KT_NET_MAX_DIMS, 1, 0, &v))
                return KT_EINVAL;
            l->axis = (int)v;
        } else if (strcmp(f->name, "reshape") == 0) {
            l->shape_kind = NET_SHAPE_RESHAPE;
            return get_ints(r, "shape", any_rank, 0, -1, KT_TE_MAX_EXTENT, 1, l->target,
                            &l->ntarget);
        } else if (strcmp(f->name, "transpose") == 0) {
            l->shape_kind = NET_SHAPE_TRANSPOSE;
            return get_ints(r, "perm", any_rank, 0, 0, KT_NET_MAX_DIMS - 1, 1, l->target,
                            &l->ntarget);
        } else {
            l->shape_kind = NET_SHAPE_CONCAT;
            if (get_int(r, "axis", -KT_NET_MAX_DIMS, KT_NET_MAX_DIMS - 1, 0, 1, &v))
                return KT_EINVAL;
            l->axis = (int)v;
        }
        return KT_OK;
    default:
        return KT_OK;
    }
}

/* Input layer indices: "inputs" (names of earlier layers), or the previous
 * layer when the field is absent and the op takes one input. */
static int read_inputs(rd_t *r, const fop_t *f, const kt_net_t *net, int *in, int *nin, int cap)
{
    json_t *v = field(r, "inputs");
    *nin = 0;
    if (!v) {
        if (f->min_in == 0)
            return KT_OK;
        if (f->min_in > 1)
            return kt_err_set(KT_EINVAL, "field 'inputs' is missing (%s takes %d inputs)",
                              f->name, f->min_in);
        if (net->n == 0)
            return kt_err_set(KT_EINVAL, "field 'inputs' is missing and no layer comes before");
        in[0] = net->n - 1;
        *nin = 1;
        return KT_OK;
    }
    if (!json_is_array(v))
        return kt_err_set(KT_EINVAL, "field 'inputs' must be a list of layer names");
    size_t n = json_array_size(v);
    if (n < (size_t)f->min_in || (f->max_in >= 0 && n > (size_t)f->max_in) || n > (size_t)cap) {
        if (f->max_in == f->min_in)
            return kt_err_set(KT_EINVAL, "field 'inputs' must name %d layer%s (got %zu)",
                              f->min_in, f->min_in == 1 ? "" : "s", n);
        return kt_err_set(KT_EINVAL, "field 'inputs' must name %d to %d layers (got %zu)",
                          f->min_in, f->max_in >= 0 ? f->max_in : cap, n);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e))
            return kt_err_set(KT_EINVAL, "field 'inputs': entry %zu must be a layer name", i);
        int idx = net_find(net, json_string_value(e));
        if (idx < 0)
            return kt_err_set(KT_EINVAL, "field 'inputs': no earlier layer named '%s'",
                              json_string_value(e));
        in[i] = idx;
    }
    *nin = (int)n;
    return KT_OK;
}

#define MAX_CONCAT 64

static int read_layer(kt_net_t *net, json_t *obj, size_t idx)
{
    char label_buf[128] = "";
    const char *lname = NULL;
    int rc = KT_OK;
    if (!json_is_object(obj)) {
        rc = kt_err_set(KT_EINVAL, "must be a JSON object");
        goto out;
    }
    rd_t r = {.obj = obj};
    json_t *nm = field(&r, "name"), *opv = field(&r, "op");
    if (nm && (!json_is_string(nm) || !*json_string_value(nm))) {
        rc = kt_err_set(KT_EINVAL, "field 'name' must be a non-empty string");
        goto out;
    }
    if (nm)
        lname = json_string_value(nm);
    if (!json_is_string(opv)) {
        rc = kt_err_set(KT_EINVAL, "field 'op' %s", opv ? "must be a string" : "is missing");
        goto out;
    }
    const fop_t *f = NULL;
    for (size_t i = 0; i < KT_ARRAY_LEN(fops); i++)
        if (strcmp(fops[i].name, json_string_value(opv)) == 0)
            f = &fops[i];
    snprintf(label_buf, sizeof(label_buf), "%s", json_string_value(opv));
    if (!f) {
        rc = kt_err_set(KT_EINVAL, "field 'op': unknown op '%s' (see NETWORKS.md for the list)",
                        json_string_value(opv));
        goto out;
    }
    char auto_name[32];
    if (!lname) {
        snprintf(auto_name, sizeof(auto_name), "layer%zu", idx);
        lname = auto_name;
    }
    int in[MAX_CONCAT], nin = 0;
    if ((rc = read_inputs(&r, f, net, in, &nin, MAX_CONCAT)) < 0)
        goto out;
    int i = net_layer_add(net, lname, f->op, f->label ? f->label : f->name, in, nin);
    if (i < 0) {
        rc = i;
        goto out;
    }
    net_layer_t *l = net_layer(net, i);
    int rank = nin > 0 ? net->layers[in[0]].out.ndim : 0;
    if ((rc = read_attrs(&r, f, l, rank)) < 0 || (rc = reject_unknown(&r)) < 0)
        goto out;
    rc = net_layer_finish(net, i);
out:
    if (rc < 0) {
        if (lname)
            kt_err_prefix("layer %zu '%s'%s%s%s", idx, lname, *label_buf ? " (" : "", label_buf,
                          *label_buf ? ")" : "");
        else
            kt_err_prefix("layer %zu%s%s%s", idx, *label_buf ? " (" : "", label_buf,
                          *label_buf ? ")" : "");
    }
    return rc;
}

kt_net_t *kt_net_parse_json(const char *text)
{
    json_error_t jerr;
    json_t *root = json_loads(text ? text : "", JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        kt_err_set(KT_EINVAL, "bad network JSON at line %d column %d: %s", jerr.line, jerr.column,
                   jerr.text);
        return NULL;
    }
    kt_net_t *net = NULL;
    int rc = KT_OK;
    if (!json_is_object(root)) {
        rc = kt_err_set(KT_EINVAL, "a network file is a JSON object with a 'layers' list");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "name") && strcmp(key, "layers") && strcmp(key, "outputs")) {
            rc = kt_err_set(KT_EINVAL, "unknown top-level field '%s'", key);
            goto done;
        }
    }
    json_t *name = json_object_get(root, "name"), *layers = json_object_get(root, "layers");
    if (name && !json_is_string(name)) {
        rc = kt_err_set(KT_EINVAL, "field 'name' must be a string");
        goto done;
    }
    if (!json_is_array(layers) || json_array_size(layers) == 0) {
        rc = kt_err_set(KT_EINVAL, "field 'layers' must be a non-empty list of layers");
        goto done;
    }
    if (json_array_size(layers) > KT_NET_MAX_LAYERS) {
        rc = kt_err_set(KT_EINVAL, "field 'layers' has more than %d layers", KT_NET_MAX_LAYERS);
        goto done;
    }
    net = net_new(name ? json_string_value(name) : "network");
    if (!net) {
        rc = KT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < json_array_size(layers) && rc == KT_OK; i++)
        rc = read_layer(net, json_array_get(layers, i), i);
    json_t *outs = json_object_get(root, "outputs");
    if (rc == KT_OK && outs) {
        if (!json_is_array(outs) || json_array_size(outs) == 0) {
            rc = kt_err_set(KT_EINVAL, "field 'outputs' must be a non-empty list of layer names");
            goto done;
        }
        for (size_t i = 0; i < json_array_size(outs) && rc == KT_OK; i++) {
            json_t *o = json_array_get(outs, i);
            int idx = json_is_string(o) ? net_find(net, json_string_value(o)) : -1;
            if (idx < 0)
                rc = kt_err_set(KT_EINVAL, "field 'outputs': entry %zu is not a layer name", i);
            else
                rc = net_mark_output(net, idx);
        }
    }
    if (rc == KT_OK)
        rc = net_seal(net);
done:
    json_decref(root);
    if (rc < 0) {
        kt_net_free(net);
        return NULL;
    }
    return net;
}

kt_net_t *kt_net_load_file(const char *path)
{
    char *text = kt_file_read(path, NULL);
    if (!text) {
        kt_err_prefix("reading network file %s", path);
        return NULL;
    }
    kt_net_t *net = kt_net_parse_json(text);
    free(text);
    if (!net)
        kt_err_prefix("%s", path);
    return net;
}
