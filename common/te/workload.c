/* Workload JSON -> operator DAG, canonical JSON and workload key. */
#include "workload.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ops.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

struct kt_workload {
    kt_dag_t *dag;
    char op[32];
    char *key;
    char *json;
    double flops;
};

/* ---- field readers ------------------------------------------------------- */

#define MAX_FIELDS 16

/* The fields one op accepts, filled while reading, to reject unknown ones. */
typedef struct {
    json_t *obj;
    json_t *canon;   /* canonical object being built */
    const char *seen[MAX_FIELDS];
    int nseen;
} reader_t;

static void mark(reader_t *r, const char *field)
{
    if (r->nseen < MAX_FIELDS)
        r->seen[r->nseen++] = field;
}

static int get_int(reader_t *r, const char *field, int64_t *out)
{
    mark(r, field);
    json_t *v = json_object_get(r->obj, field);
    if (!v)
        return kt_err_set(KT_EINVAL, "field '%s' is missing", field);
    if (!json_is_integer(v))
        return kt_err_set(KT_EINVAL, "field '%s' must be an integer", field);
    json_int_t x = json_integer_value(v);
    if (x < 1 || x > KT_TE_MAX_EXTENT)
        return kt_err_set(KT_EINVAL, "field '%s' must be a positive integer up to %lld (got %lld)",
                          field, (long long)KT_TE_MAX_EXTENT, (long long)x);
    *out = (int64_t)x;
    json_object_set_new(r->canon, field, json_integer(x));
    return KT_OK;
}

/* An array of `n` integers (n2 alternatively, when non-zero) >= min. */
static int get_ints(reader_t *r, const char *field, int n, int n2, int64_t min, int64_t *out,
                    int *count)
{
    mark(r, field);
    json_t *v = json_object_get(r->obj, field);
    if (!v)
        return 1;   /* absent: caller fills the default */
    size_t len = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || (len != (size_t)n && (n2 == 0 || len != (size_t)n2))) {
        if (n2)
            return kt_err_set(KT_EINVAL, "field '%s' must be an array of %d or %d integers",
                              field, n, n2);
        return kt_err_set(KT_EINVAL, "field '%s' must be an array of %d integers", field, n);
    }
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return kt_err_set(KT_EINVAL, "field '%s' must hold integers", field);
        json_int_t x = json_integer_value(e);
        if (x < min || x > KT_TE_MAX_EXTENT)
            return kt_err_set(KT_EINVAL, "field '%s' must hold integers >= %lld (got %lld)", field,
                              (long long)min, (long long)x);
        out[i] = (int64_t)x;
    }
    *count = (int)len;
    return KT_OK;
}

static json_t *int_array(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

static int get_window(reader_t *r, int dilation, kt_conv2d_params_t *p)
{
    *p = kt_ops_conv2d_default();
    int n = 0, rc;
    if ((rc = get_ints(r, "stride", 2, 0, 1, p->stride, &n)) < 0)
        return rc;
    int64_t pad[4] = {0, 0, 0, 0};
    rc = get_ints(r, "padding", 2, 4, 0, pad, &n);
    if (rc < 0)
        return rc;
    if (rc == 0 && n == 2) {
        pad[2] = pad[0];
        pad[3] = pad[1];
    }
    memcpy(p->pad, pad, sizeof(pad));
    if (dilation && (rc = get_ints(r, "dilation", 2, 0, 1, p->dilation, &n)) < 0)
        return rc;
    json_object_set_new(r->canon, "stride", int_array(p->stride, 2));
    int sym = pad[0] == pad[2] && pad[1] == pad[3];
    json_object_set_new(r->canon, "padding", int_array(pad, sym ? 2 : 4));
    if (dilation)
        json_object_set_new(r->canon, "dilation", int_array(p->dilation, 2));
    return KT_OK;
}

/* One object entry, {"op": "clip", "min": lo, "max": hi} or {"op":
 * "hardsigmoid", "alpha": a, "beta": b}; canonical: the same object with
 * float32-rounded numbers (what the kernel uses). */
static int get_param_epi(json_t *e, size_t i, kt_epi_t *out, json_t **canon)
{
    json_t *op = json_object_get(e, "op");
    const char *name = json_is_string(op) ? json_string_value(op) : "";
    const kt_epi_params_t *pk =
        kt_ops_epilogue_parse(name, &out->op) == 0 ? kt_ops_epilogue_params(out->op) : NULL;
    if (!pk)
        return kt_err_set(KT_EINVAL, "field 'epilogue[%zu]': an object entry must be "
                          "{\"op\": \"clip\", \"min\": x, \"max\": y} or {\"op\": "
                          "\"hardsigmoid\", \"alpha\": a, \"beta\": b}", i);
    const int clip = out->op == KT_EPI_CLIP;
    const char *k0 = pk->lo_key, *k1 = pk->hi_key;
    const char *key;
    json_t *val;
    json_object_foreach(e, key, val) {
        if (strcmp(key, "op") != 0 && strcmp(key, k0) != 0 && strcmp(key, k1) != 0)
            return kt_err_set(KT_EINVAL, "field 'epilogue[%zu]': unknown field '%s'", i, key);
    }
    json_t *lo = json_object_get(e, k0), *hi = json_object_get(e, k1);
    if (!json_is_number(lo) || !json_is_number(hi))
        return kt_err_set(KT_EINVAL, "field 'epilogue[%zu]': %s needs numbers '%s' and '%s'",
                          i, name, k0, k1);
    out->lo = (double)(float)json_number_value(lo);
    out->hi = (double)(float)json_number_value(hi);
    if (!isfinite(out->lo) || !isfinite(out->hi) || (clip && out->lo > out->hi))
        return kt_err_set(KT_EINVAL, "field 'epilogue[%zu]': %s", i,
                          clip ? "clip bounds must be finite float32 values with min <= max"
                               : "hardsigmoid's alpha and beta must be finite float32 values");
    *canon = json_pack("{s:s, s:f, s:f}", "op", name, k0, out->lo, k1, out->hi);
    return KT_OK;
}

/* `omit_empty`: leave an empty list out of the canonical JSON (the pools,
 * whose canonical JSON had no epilogue field before they took one). */
static int get_epilogue(reader_t *r, kt_epi_t *epi, int *nepi, int omit_empty)
{
    mark(r, "epilogue");
    *nepi = 0;
    json_t *v = json_object_get(r->obj, "epilogue");
    json_t *canon = json_array();
    json_object_set_new(r->canon, "epilogue", canon);
    if (!v || (omit_empty && json_is_array(v) && json_array_size(v) == 0)) {
        if (omit_empty)
            json_object_del(r->canon, "epilogue");
        return KT_OK;
    }
    if (!json_is_array(v))
        return kt_err_set(KT_EINVAL, "field 'epilogue' must be an array of names");
    if (json_array_size(v) > KT_OPS_MAX_EPILOGUE)
        return kt_err_set(KT_EINVAL, "field 'epilogue' has more than %d entries",
                          KT_OPS_MAX_EPILOGUE);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i), *c = NULL;
        if (json_is_object(e)) {
            int rc = get_param_epi(e, i, &epi[i], &c);
            if (rc)
                return rc;
        } else if (json_is_string(e) && strcmp(json_string_value(e), "relu6") == 0) {
            epi[i] = (kt_epi_t){.op = KT_EPI_CLIP, .lo = 0.0, .hi = 6.0};
            c = json_pack("{s:s, s:f, s:f}", "op", "clip", "min", 0.0, "max", 6.0);
        } else if (!json_is_string(e) ||
                   kt_ops_epilogue_parse(json_string_value(e), &epi[i].op) != 0 ||
                   kt_ops_epilogue_params(epi[i].op)) {
            return kt_err_set(KT_EINVAL,
                              "field 'epilogue[%zu]' must be one of \"bias_add\", \"relu\", "
                              "\"add\", \"gelu\", \"sigmoid\", \"tanh\", \"multiply\", "
                              "\"multiply_scalar\", \"hardswish\", \"silu\", \"relu6\", {\"op\": "
                              "\"clip\", \"min\": x, \"max\": y} or {\"op\": \"hardsigmoid\", "
                              "\"alpha\": a, \"beta\": b}", i);
        } else {
            c = json_string(json_string_value(e));
        }
        json_array_append_new(canon, c);
    }
    *nepi = (int)json_array_size(v);
    return KT_OK;
}

static int get_choice(reader_t *r, const char *field, const char *const *choices, int nchoice,
                      int dflt, int *out)
{
    mark(r, field);
    json_t *v = json_object_get(r->obj, field);
    int idx = dflt;
    if (!v && dflt < 0)
        return kt_err_set(KT_EINVAL, "field '%s' is missing", field);
    if (v) {
        idx = -1;
        for (int i = 0; json_is_string(v) && i < nchoice; i++)
            if (strcmp(json_string_value(v), choices[i]) == 0)
                idx = i;
        if (idx < 0)
            return kt_err_set(KT_EINVAL, "field '%s' must be \"%s\"%s%s%s", field, choices[0],
                              nchoice > 1 ? " or \"" : "", nchoice > 1 ? choices[1] : "",
                              nchoice > 1 ? "\"" : "");
    }
    json_object_set_new(r->canon, field, json_string(choices[idx]));
    *out = idx;
    return KT_OK;
}

static int get_shape(reader_t *r, int64_t *shape, int *ndim)
{
    mark(r, "shape");
    json_t *v = json_object_get(r->obj, "shape");
    if (!v)
        return kt_err_set(KT_EINVAL, "field 'shape' is missing");
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n < 2 || n > KT_TE_MAX_DIMS)
        return kt_err_set(KT_EINVAL, "field 'shape' must be an array of 2..%d positive integers",
                          KT_TE_MAX_DIMS);
    int cnt = 0;
    int rc = get_ints(r, "shape", (int)n, 0, 1, shape, &cnt);
    if (rc)
        return rc;
    *ndim = cnt;
    json_object_set_new(r->canon, "shape", int_array(shape, cnt));
    return KT_OK;
}

static int get_bool(reader_t *r, const char *field, int dflt, int *out)
{
    mark(r, field);
    json_t *v = json_object_get(r->obj, field);
    if (v && !json_is_boolean(v))
        return kt_err_set(KT_EINVAL, "field '%s' must be true or false", field);
    *out = v ? json_is_true(v) : dflt;
    json_object_set_new(r->canon, field, json_boolean(*out));
    return KT_OK;
}

/* pool2d's "count_include_pad" (avg only); in the canonical JSON only when
 * true, so that the keys of the pools before it stay. */
static int get_include_pad(reader_t *r, int kind, int *out)
{
    mark(r, "count_include_pad");
    json_t *v = json_object_get(r->obj, "count_include_pad");
    if (v && !json_is_boolean(v))
        return kt_err_set(KT_EINVAL, "field 'count_include_pad' must be true or false");
    *out = json_is_true(v);
    if (*out && kind != 1)
        return kt_err_set(KT_EINVAL, "field 'count_include_pad' applies to kind \"avg\" only");
    if (*out)
        json_object_set_new(r->canon, "count_include_pad", json_true());
    return KT_OK;
}

static int reject_unknown(reader_t *r)
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

/* ---- ops -------------------------------------------------------------------- */

static const char *const op_names[] = {
    "matmul", "dense", "batch_matmul", "conv2d_nhwc", "conv2d_nchw", "depthwise_conv2d_nhwc",
    "pool2d", "global_avg_pool", "softmax", "layer_norm", "group_conv2d_nhwc",
    "group_conv2d_nchw", "depthwise_conv2d_nchw", "pool2d_nchw", "global_avg_pool_nchw",
    "conv2d_winograd_nhwc",
};

enum {
    OP_MATMUL = 0, OP_DENSE, OP_BATCH_MATMUL, OP_CONV_NHWC, OP_CONV_NCHW, OP_DW_NHWC, OP_POOL,
    OP_GPOOL, OP_SOFTMAX, OP_LN, OP_GCONV_NHWC, OP_GCONV_NCHW, OP_DW_NCHW, OP_POOL_NCHW,
    OP_GPOOL_NCHW, OP_WINO_NHWC,
};

/* An optional positive integer, written to the canonical JSON only when it
 * differs from the default (so adding it kept existing canonical JSON). */
static int get_opt_int(reader_t *r, const char *field, int64_t dflt, int64_t *out)
{
    if (!json_object_get(r->obj, field)) {
        mark(r, field);
        *out = dflt;
        return KT_OK;
    }
    int rc = get_int(r, field, out);
    if (rc == KT_OK && *out == dflt)
        json_object_del(r->canon, field);
    return rc;
}

/* Layer norm's optional "eps" (0 < eps < 1), in the canonical JSON only when
 * it differs from KT_OPS_LN_EPS, so existing workloads keep their JSON. */
static int get_eps(reader_t *r, double *out)
{
    mark(r, "eps");
    json_t *v = json_object_get(r->obj, "eps");
    *out = KT_OPS_LN_EPS;
    if (!v)
        return KT_OK;
    if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) < 1))
        return kt_err_set(KT_EINVAL, "field 'eps' must be a number in (0, 1)");
    *out = json_number_value(v);
    if (*out != KT_OPS_LN_EPS)
        json_object_set_new(r->canon, "eps", json_real(*out));
    return KT_OK;
}

static kt_dag_t *build(reader_t *r, int op)
{
    kt_epi_t epi[KT_OPS_MAX_EPILOGUE];
    int nepi = 0, choice = 0, ndim = 0, affine = 1, cip = 0;
    int64_t B, M, N, K, H, W, C, CI, CO, KH, KW, G, shape[KT_TE_MAX_DIMS];
    kt_conv2d_params_t p;
    static const char *const layouts[] = {"NN", "NT"}, *const kinds[] = {"max", "avg"};
    const kt_layout_t lay = op == OP_CONV_NCHW || op == OP_GCONV_NCHW || op == OP_DW_NCHW ||
                                    op == OP_POOL_NCHW || op == OP_GPOOL_NCHW
                                ? KT_LAYOUT_NCHW
                                : KT_LAYOUT_NHWC;
    switch (op) {
    case OP_MATMUL:
        if (get_int(r, "M", &M) || get_int(r, "N", &N) || get_int(r, "K", &K) ||
            get_choice(r, "layout", layouts, 2, 0, &choice) || get_epilogue(r, epi, &nepi, 0) ||
            reject_unknown(r))
            return NULL;
        return kt_ops_matmul_ex(M, N, K, choice, epi, nepi);
    case OP_DENSE:
        if (get_int(r, "M", &M) || get_int(r, "N", &N) || get_int(r, "K", &K) ||
            get_epilogue(r, epi, &nepi, 0) || reject_unknown(r))
            return NULL;
        return kt_ops_dense_ex(M, N, K, epi, nepi);
    case OP_BATCH_MATMUL:
        if (get_int(r, "B", &B) || get_int(r, "M", &M) || get_int(r, "N", &N) ||
            get_int(r, "K", &K) || get_epilogue(r, epi, &nepi, 0) || reject_unknown(r))
            return NULL;
        return kt_ops_batch_matmul_ex(B, M, N, K, epi, nepi);
    case OP_CONV_NHWC:
    case OP_CONV_NCHW:
    case OP_GCONV_NHWC:
    case OP_GCONV_NCHW: {
        const int grouped = op == OP_GCONV_NHWC || op == OP_GCONV_NCHW;
        G = 0;
        if (get_int(r, "N", &N) || get_int(r, "H", &H) || get_int(r, "W", &W) ||
            get_int(r, "CI", &CI) || get_int(r, "CO", &CO) || get_int(r, "KH", &KH) ||
            get_int(r, "KW", &KW) || (grouped && get_int(r, "groups", &G)) ||
            get_window(r, 1, &p) || get_epilogue(r, epi, &nepi, 0) || reject_unknown(r))
            return NULL;
        return kt_ops_conv2d(lay, N, H, W, CI, CO, KH, KW, G, &p, epi, nepi);
    }
    case OP_WINO_NHWC: {
        int64_t T;
        if (get_int(r, "N", &N) || get_int(r, "H", &H) || get_int(r, "W", &W) ||
            get_int(r, "CI", &CI) || get_int(r, "CO", &CO) || get_int(r, "KH", &KH) ||
            get_int(r, "KW", &KW) || get_int(r, "tile_size", &T) || get_window(r, 1, &p) ||
            get_epilogue(r, epi, &nepi, 0) || reject_unknown(r))
            return NULL;
        return kt_ops_conv2d_winograd_nhwc(N, H, W, CI, CO, KH, KW, T, &p, epi, nepi);
    }
    case OP_DW_NHWC:
    case OP_DW_NCHW:
        if (get_int(r, "N", &N) || get_int(r, "H", &H) || get_int(r, "W", &W) ||
            get_int(r, "C", &C) || get_int(r, "KH", &KH) || get_int(r, "KW", &KW) ||
            get_opt_int(r, "multiplier", 1, &M) || get_window(r, 1, &p) ||
            get_epilogue(r, epi, &nepi, 0) || reject_unknown(r))
            return NULL;
        return kt_ops_depthwise_conv2d(lay, N, H, W, C, M, KH, KW, &p, epi, nepi);
    case OP_POOL:
    case OP_POOL_NCHW:
        if (get_choice(r, "kind", kinds, 2, -1, &choice) || get_include_pad(r, choice, &cip) ||
            get_int(r, "N", &N) ||
            get_int(r, "H", &H) || get_int(r, "W", &W) || get_int(r, "C", &C) ||
            get_int(r, "KH", &KH) || get_int(r, "KW", &KW) || get_window(r, 0, &p) ||
            get_epilogue(r, epi, &nepi, op == OP_POOL) || reject_unknown(r))
            return NULL;
        return kt_ops_pool2d(lay, cip ? KT_POOL_AVG_PAD : choice ? KT_POOL_AVG : KT_POOL_MAX, N, H,
                             W, C, KH, KW, &p, epi, nepi);
    case OP_GPOOL:
    case OP_GPOOL_NCHW:
        if (get_int(r, "N", &N) || get_int(r, "H", &H) || get_int(r, "W", &W) ||
            get_int(r, "C", &C) || get_epilogue(r, epi, &nepi, op == OP_GPOOL) ||
            reject_unknown(r))
            return NULL;
        return kt_ops_global_avg_pool(lay, N, H, W, C, epi, nepi);
    case OP_SOFTMAX:
        if (get_shape(r, shape, &ndim) || reject_unknown(r))
            return NULL;
        return kt_ops_softmax(ndim, shape);
    default: {
        double eps;
        if (get_shape(r, shape, &ndim) || get_bool(r, "affine", 1, &affine) || get_eps(r, &eps) ||
            reject_unknown(r))
            return NULL;
        return kt_ops_layer_norm_eps(ndim, shape, affine, eps);
    }
    }
}

/* ---- key ----------------------------------------------------------------- */

static char *make_key(const kt_dag_t *dag)
{
    char *text = kt_dag_hash_text(dag);
    if (!text)
        return NULL;
    XXH128_hash_t h = XXH3_128bits(text, strlen(text));
    free(text);
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_printf(&b, "[\"%016llx%016llx\"", (unsigned long long)h.high64,
                   (unsigned long long)h.low64);
    /* Placeholders, then outputs, as TVM's keys list the op's arguments. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < kt_dag_num_stages(dag); i++) {
            const kt_stage_t *s = kt_dag_stage(dag, i);
            if (pass == 0 ? s->kind != KT_STAGE_PLACEHOLDER : !s->is_output)
                continue;
            kt_sbuf_puts(&b, ", [");
            for (int d = 0; d < s->ndim; d++)
                kt_sbuf_printf(&b, "%s%lld", d ? ", " : "", (long long)s->shape[d]);
            kt_sbuf_puts(&b, "]");
        }
    kt_sbuf_puts(&b, "]");
    return kt_sbuf_take(&b);
}

/* ---- public --------------------------------------------------------------- */

static kt_workload_t *from_json(json_t *obj)
{
    if (!json_is_object(obj)) {
        kt_err_set(KT_EINVAL, "a workload must be a JSON object");
        return NULL;
    }
    json_t *opv = json_object_get(obj, "op");
    if (!opv) {
        kt_err_set(KT_EINVAL, "field 'op' is missing");
        return NULL;
    }
    int op = -1;
    for (size_t i = 0; json_is_string(opv) && i < KT_ARRAY_LEN(op_names); i++)
        if (strcmp(json_string_value(opv), op_names[i]) == 0)
            op = (int)i;
    if (op < 0) {
        kt_err_set(KT_EINVAL, "field 'op': unknown op %s%s%s (expected matmul, dense, "
                   "batch_matmul, conv2d_nhwc, conv2d_nchw, conv2d_winograd_nhwc, group_conv2d_nhwc, "
                   "group_conv2d_nchw, "
                   "depthwise_conv2d_nhwc, depthwise_conv2d_nchw, pool2d, pool2d_nchw, "
                   "global_avg_pool, global_avg_pool_nchw, softmax or layer_norm)",
                   json_is_string(opv) ? "'" : "",
                   json_is_string(opv) ? json_string_value(opv) : "(not a string)",
                   json_is_string(opv) ? "'" : "");
        return NULL;
    }
    reader_t r = {.obj = obj, .canon = json_object(), .nseen = 0};
    if (!r.canon) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    mark(&r, "op");
    json_object_set_new(r.canon, "op", json_string(op_names[op]));
    kt_workload_t *w = calloc(1, sizeof(*w));
    if (!w) {
        json_decref(r.canon);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    w->dag = build(&r, op);
    if (w->dag)
        w->json = json_dumps(r.canon, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(r.canon);
    if (!w->dag) {
        kt_err_prefix("workload %s", op_names[op]);
        kt_workload_free(w);
        return NULL;
    }
    snprintf(w->op, sizeof(w->op), "%s", op_names[op]);
    w->key = make_key(w->dag);
    w->flops = kt_dag_flop_count(w->dag);
    if (!w->json || !w->key) {
        kt_err_set(KT_ENOMEM, "out of memory");
        kt_workload_free(w);
        return NULL;
    }
    return w;
}

kt_workload_t *kt_workload_parse(const char *json_text)
{
    if (!json_text) {
        kt_err_set(KT_EINVAL, "no workload JSON");
        return NULL;
    }
    json_error_t jerr;
    json_t *obj = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        kt_err_set(KT_EINVAL, "bad workload JSON at line %d column %d: %s", jerr.line,
                   jerr.column, jerr.text);
        return NULL;
    }
    kt_workload_t *w = from_json(obj);
    json_decref(obj);
    return w;
}

/* ---- keys given by users and peers ---------------------------------------- */

#define KEY_DESC "a workload key " KT_WORKLOAD_KEY_FORM " as ktune prints it"
#define JSON_DESC "a workload's JSON {\"op\": ...}"

/* v read as a workload key: 0 with its canonical text appended to b (as
 * make_key writes it), or KT_EINVAL saying which item is wrong. */
static int key_check(json_t *v, kt_sbuf_t *b)
{
    if (!json_is_array(v) || json_array_size(v) < 2)
        return kt_err_set(KT_EINVAL, "not a workload key: expected a list " KT_WORKLOAD_KEY_FORM
                                     " of the hash and at least one shape");
    json_t *h = json_array_get(v, 0);
    const char *hs = json_string_value(h);
    size_t hl = hs ? json_string_length(h) : 0;
    if (!hs || hl == 0 || hl > 64 || strspn(hs, "0123456789abcdefABCDEF") != hl)
        return kt_err_set(KT_EINVAL, "not a workload key: its first item must be the hash, a "
                                     "string of hex digits (" KT_WORKLOAD_KEY_FORM ")");
    kt_sbuf_puts(b, "[\"");
    for (size_t i = 0; i < hl; i++)
        kt_sbuf_printf(b, "%c", hs[i] >= 'A' && hs[i] <= 'F' ? hs[i] - 'A' + 'a' : hs[i]);
    kt_sbuf_puts(b, "\"");
    for (size_t i = 1; i < json_array_size(v); i++) {
        json_t *shape = json_array_get(v, i);
        if (!json_is_array(shape))
            return kt_err_set(KT_EINVAL, "not a workload key: item %zu is not a shape (a list of "
                                         "positive integers; " KT_WORKLOAD_KEY_FORM ")", i);
        kt_sbuf_puts(b, ", [");
        for (size_t d = 0; d < json_array_size(shape); d++) {
            json_t *x = json_array_get(shape, d);
            if (!json_is_integer(x) || json_integer_value(x) < 1)
                return kt_err_set(KT_EINVAL, "not a workload key: shape %zu: dimension %zu is "
                                             "not a positive integer", i, d);
            kt_sbuf_printf(b, "%s%lld", d ? ", " : "", (long long)json_integer_value(x));
        }
        kt_sbuf_puts(b, "]");
    }
    kt_sbuf_puts(b, "]");
    return 0;
}

/* The canonical text of the key in v, malloc'd into *canon (or only checked). */
static int key_canon(json_t *v, char **canon)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    int rc = key_check(v, &b);
    char *text = rc == 0 ? kt_sbuf_take(&b) : NULL;
    kt_sbuf_free(&b);
    if (rc == 0 && !text)
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    if (rc == 0 && canon)
        *canon = text;
    else
        free(text);
    return rc;
}

int kt_workload_key_parse(const char *text, char **canon)
{
    if (canon)
        *canon = NULL;
    if (!text || !*text)
        return kt_err_set(KT_EINVAL, "no workload key (expected " KT_WORKLOAD_KEY_FORM ")");
    if (strlen(text) > KT_WORKLOAD_KEY_MAX)
        return kt_err_set(KT_EINVAL, "a workload key of %zu bytes; at most %d",
                          strlen(text), KT_WORKLOAD_KEY_MAX);
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        return kt_err_set(KT_EINVAL, "'%.80s' is not a workload key (expected "
                          KT_WORKLOAD_KEY_FORM ")", text);
    int rc = key_canon(v, canon);
    json_decref(v);
    return rc;
}

int kt_workload_key_from_arg(const char *arg, char **key)
{
    *key = NULL;
    const char *p = arg ? arg : "";
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (!*p)
        return kt_err_set(KT_EINVAL, "empty; expected " KEY_DESC " or " JSON_DESC);
    if (*p == '{') {
        kt_workload_t *w = kt_workload_parse(p);
        if (!w)
            return kt_err_code();
        *key = kt_strdup(w->key);
        kt_workload_free(w);
        return *key ? 0 : KT_ENOMEM;
    }
    if (*p != '[')
        return kt_err_set(KT_EINVAL, "'%.80s' is neither " KEY_DESC " nor " JSON_DESC, arg);
    if (strlen(p) > KT_WORKLOAD_KEY_MAX)
        return kt_err_set(KT_EINVAL, "a workload key of %zu bytes; at most %d", strlen(p),
                          KT_WORKLOAD_KEY_MAX);
    json_error_t jerr;
    json_t *v = json_loads(p, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        return kt_err_set(KT_EINVAL, "bad JSON at line %d column %d: %s (expected " KEY_DESC
                          " or " JSON_DESC ")", jerr.line, jerr.column, jerr.text);
    int rc = json_is_object(json_array_get(v, 0))
                 ? kt_err_set(KT_EINVAL, "a list of workloads; give one workload, as its key "
                                         "or its JSON")
                 : key_canon(v, key);
    json_decref(v);
    return rc;
}

/* One list item: a workload object, or {"workload", "weight", "key", "desc"}
 * as `ktune tasks --json` writes it. "desc" is informational; a "key" must be
 * the workload's own key, so a list edited into inconsistency is caught. */
static int load_item(json_t *item, size_t i, kt_workload_t **w, double *weight)
{
    json_t *inner = json_object_get(item, "workload");
    json_t *kv = NULL;
    *weight = 1.0;
    if (json_is_object(item) && inner) {
        const char *key;
        json_t *val;
        json_object_foreach(item, key, val) {
            if (strcmp(key, "workload") != 0 && strcmp(key, "weight") != 0 &&
                strcmp(key, "key") != 0 && strcmp(key, "desc") != 0)
                return kt_err_set(KT_EINVAL, "item %zu: unknown field '%s'", i, key);
            if ((strcmp(key, "key") == 0 || strcmp(key, "desc") == 0) && !json_is_string(val))
                return kt_err_set(KT_EINVAL, "item %zu: field '%s' must be a string", i, key);
        }
        json_t *wv = json_object_get(item, "weight");
        if (wv) {
            if (!json_is_number(wv) || !(json_number_value(wv) > 0) ||
                json_number_value(wv) > 1e12)
                return kt_err_set(KT_EINVAL, "item %zu: field 'weight' must be a positive number",
                                  i);
            *weight = json_number_value(wv);
        }
        kv = json_object_get(item, "key");
        item = inner;
    }
    *w = from_json(item);
    if (!*w)
        return kt_err_prefix("item %zu", i);
    if (kv && strcmp(json_string_value(kv), kt_workload_key(*w)) != 0) {
        kt_err_set(KT_EINVAL, "item %zu: field 'key' is %s but the workload's key is %s", i,
                   json_string_value(kv), kt_workload_key(*w));
        kt_workload_free(*w);
        *w = NULL;
        return KT_EINVAL;
    }
    return KT_OK;
}

int kt_workload_load(const char *arg, kt_workload_t ***out, double **weights, int *n)
{
    *out = NULL;
    *weights = NULL;
    *n = 0;
    const char *p = arg ? arg : "";
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (!*p)
        return kt_err_set(KT_EINVAL, "no workload given (expected workload JSON, inline or in "
                                     "a file)");
    char *text = NULL;
    if (*p == '{' || *p == '[') {
        text = kt_strdup(p);
    } else {
        text = kt_file_read(arg, NULL);
        if (!text)
            return kt_err_prefix("'%.80s' is neither workload JSON (an object or a list) nor a "
                                 "readable file", arg);
    }
    if (!text)
        return KT_ENOMEM;
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return kt_err_set(KT_EINVAL, "bad workload JSON at line %d column %d: %s", jerr.line,
                          jerr.column, jerr.text);
    size_t count = json_is_array(root) ? json_array_size(root) : 1;
    int rc = KT_OK;
    /* A key pasted where the JSON belongs: it names a workload without
     * describing it, which "item 0: not an object" would not say. */
    if (json_is_array(root) && key_canon(root, NULL) == 0)
        rc = kt_err_set(KT_EINVAL, "this is a workload key, which names a workload without "
                                   "describing it; expected the workload's JSON {\"op\": ...}");
    else if (!json_is_array(root) && !json_is_object(root))
        rc = kt_err_set(KT_EINVAL, "workloads must be a JSON object or a list of them");
    else if (count == 0)
        rc = kt_err_set(KT_EINVAL, "the workload list is empty");
    kt_workload_t **ws = NULL;
    double *wt = NULL;
    if (rc == KT_OK) {
        ws = calloc(count, sizeof(*ws));
        wt = calloc(count, sizeof(*wt));
        if (!ws || !wt)
            rc = kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; rc == KT_OK && i < count; i++) {
        json_t *item = json_is_array(root) ? json_array_get(root, i) : root;
        rc = load_item(item, i, &ws[i], &wt[i]);
        if (rc && !json_is_array(root)) {
            /* A single object: no item number in the message. */
            const char *m = kt_err_msg();
            if (strncmp(m, "item 0: ", 8) == 0) {
                char copy[1024];
                snprintf(copy, sizeof(copy), "%s", m + 8);
                kt_err_set(rc, "%s", copy);
            }
        }
    }
    json_decref(root);
    if (rc) {
        for (size_t i = 0; ws && i < count; i++)
            kt_workload_free(ws[i]);
        free(ws);
        free(wt);
        return rc;
    }
    *out = ws;
    *weights = wt;
    *n = (int)count;
    return KT_OK;
}

void kt_workload_free(kt_workload_t *w)
{
    if (!w)
        return;
    kt_dag_free(w->dag);
    free(w->key);
    free(w->json);
    free(w);
}

const kt_dag_t *kt_workload_dag(const kt_workload_t *w) { return w ? w->dag : NULL; }
const char *kt_workload_op(const kt_workload_t *w) { return w ? w->op : NULL; }
const char *kt_workload_key(const kt_workload_t *w) { return w ? w->key : NULL; }
const char *kt_workload_json(const kt_workload_t *w) { return w ? w->json : NULL; }
double kt_workload_flops(const kt_workload_t *w) { return w ? w->flops : 0.0; }

char *kt_workload_winograd_direct_json(const kt_workload_t *w)
{
    if (!w || strcmp(w->op, "conv2d_winograd_nhwc") != 0)
        return NULL;
    json_t *o = json_loads(w->json, 0, NULL);
    if (!o) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    json_object_del(o, "tile_size");
    json_object_set_new(o, "op", json_string("conv2d_nhwc"));
    char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    if (!text) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    kt_workload_t *d = kt_workload_parse(text);   /* sets kt_err when it fails */
    free(text);
    if (!d)
        return NULL;
    char *out = kt_strdup(d->json);
    kt_workload_free(d);
    if (!out)
        kt_err_set(KT_ENOMEM, "out of memory");
    return out;
}
