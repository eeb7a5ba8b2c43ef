/* Task extraction: fuse a network's layers into tasks as TVM does, build
 * their workloads, merge identical ones (net.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "net_int.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

typedef struct {
    const kt_net_t *net;
    kt_net_layout_t layout;
    int *nref;      /* consumers of each layer's output (+1 for a network output) */
    int *cstart;    /* consumers of layer i: cons[cstart[i] .. cstart[i+1]) */
    int *cons;
    int *claimed;   /* anchor of the task a layer was fused into, or -1 */
    kt_net_tasks_t *out;
    int cap_tasks, cap_issues, cap_inst;
} ex_t;

/* ---- results ------------------------------------------------------------------- */

static int issue(ex_t *e, kt_net_issue_kind_t kind, const net_layer_t *l, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int issue(ex_t *e, kt_net_issue_kind_t kind, const net_layer_t *l, const char *fmt, ...)
{
    kt_net_tasks_t *t = e->out;
    if (t->nissues == e->cap_issues) {
        int cap = e->cap_issues ? e->cap_issues * 2 : 16;
        kt_net_issue_t *n = realloc(t->issues, (size_t)cap * sizeof(*n));
        if (!n)
            return kt_err_set(KT_ENOMEM, "out of memory");
        t->issues = n;
        e->cap_issues = cap;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kt_net_issue_t *is = &t->issues[t->nissues];
    is->kind = kind;
    is->layer = kt_strdup(l->name);
    is->op = kt_strdup(l->label);
    is->msg = kt_strdup(msg);
    t->nissues++;   /* counted even when a copy failed so free() sees it */
    if (!is->layer || !is->op || !is->msg)
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

/* Add one appearance of the workload in `obj` (consumed); merges by key.
 * *index receives the task's index, or -1 when te rejected the workload. */
static int add_task(ex_t *e, json_t *obj, const char *desc, const net_layer_t *anchor, int *index)
{
    *index = -1;
    char *text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(obj);
    if (!text)
        return kt_err_set(KT_ENOMEM, "out of memory");
    kt_workload_t *wl = kt_workload_parse(text);
    free(text);
    if (!wl) {
        if (kt_err_code() == KT_ENOMEM)
            return KT_ENOMEM;
        /* Shapes te refuses (limits, windows): the layer has no task. */
        return issue(e, KT_NET_UNSUPPORTED, anchor, "te rejects its workload: %s", kt_err_msg());
    }
    kt_net_tasks_t *t = e->out;
    for (int i = 0; i < t->ntasks; i++)
        if (strcmp(kt_workload_key(t->tasks[i].wl), kt_workload_key(wl)) == 0) {
            t->tasks[i].weight++;
            kt_workload_free(wl);
            *index = i;
            return KT_OK;
        }
    if (t->ntasks == e->cap_tasks) {
        int cap = e->cap_tasks ? e->cap_tasks * 2 : 32;
        kt_net_task_t *n = realloc(t->tasks, (size_t)cap * sizeof(*n));
        if (!n) {
            kt_workload_free(wl);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        t->tasks = n;
        e->cap_tasks = cap;
    }
    *index = t->ntasks;
    kt_net_task_t *task = &t->tasks[t->ntasks++];
    memset(task, 0, sizeof(*task));
    task->wl = wl;
    task->weight = 1;
    task->alt_of = -1;
    task->workload = json_loads(kt_workload_json(wl), 0, NULL);
    task->desc = kt_strdup(desc);
    if (!task->workload || !task->desc)
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

/* ---- fusion ---------------------------------------------------------------------- */

/* Anchor kinds: what te operator a layer becomes. */
typedef enum {
    A_NONE = 0, A_CONV, A_DEPTHWISE, A_DENSE, A_MATMUL, A_POOL, A_GPOOL, A_SOFTMAX, A_LN,
} anchor_t;

static anchor_t anchor_kind(const net_layer_t *l, const kt_net_t *net)
{
    switch (l->op) {
    case NET_CONV2D: {
        /* groups = input channels is depthwise (with a channel multiplier when
         * the outputs are a multiple); other groups are a grouped conv2d. */
        int64_t ci = net->layers[l->in[0]].out.d[1];
        return l->groups > 1 && l->groups == ci && l->channels % ci == 0 ? A_DEPTHWISE : A_CONV;
    }
    case NET_DENSE: return A_DENSE;
    case NET_MATMUL: return A_MATMUL;
    case NET_POOL: return A_POOL;
    case NET_GLOBAL_POOL: return A_GPOOL;
    case NET_SOFTMAX: return A_SOFTMAX;
    case NET_LAYER_NORM: return A_LN;
    default: return A_NONE;
    }
}

static const char *anchor_te_name(anchor_t a)
{
    switch (a) {
    case A_POOL: return "pool2d";
    case A_GPOOL: return "global_avg_pool";
    case A_SOFTMAX: return "softmax";
    case A_LN: return "layer_norm";
    default: return "operator";
    }
}

static int is_elementwise(net_op_t op)
{
    return op == NET_BATCH_NORM || op == NET_BIAS_ADD || op == NET_SCALE || op == NET_ADD ||
           op == NET_RELU || op == NET_GELU || op == NET_CLIP || op == NET_SIGMOID ||
           op == NET_TANH || op == NET_HARDSWISH || op == NET_HARDSIGMOID || op == NET_SILU ||
           op == NET_ELEMWISE;
}

static int same_shape(const net_shape_t *a, const net_shape_t *b)
{
    return a->ndim == b->ndim && memcmp(a->d, b->d, (size_t)a->ndim * sizeof(int64_t)) == 0;
}

/* A scale at layer c (scalar, or per channel along axis `chan`) folds
 * forward (TVM's FoldScaleAxis) when everything reading it, possibly through
 * one relu (assuming positive scales as TVM does), is a convolution (scaling
 * its input channels) or dense layer (scaling K) reading it as its data. */
static int folds_forward(const ex_t *e, int c, int scalar, int chan)
{
    const kt_net_t *net = e->net;
    int t = c;
    if (e->nref[t] == 1 && !net->is_output[t]) {
        int r = e->cons[e->cstart[t]];
        if (net->layers[r].op == NET_RELU)
            t = r;
    }
    if (net->is_output[t] || e->cstart[t + 1] == e->cstart[t])
        return 0;
    for (int k = e->cstart[t]; k < e->cstart[t + 1]; k++) {
        const net_layer_t *u = &net->layers[e->cons[k]];
        if ((u->op != NET_CONV2D && u->op != NET_DENSE) || u->in[0] != t || u->blocked)
            return 0;
        int k_axis = u->op == NET_CONV2D ? 1 : net->layers[t].out.ndim - 1;
        if (!scalar && chan != k_axis)
            return 0;
        for (int j = 1; j < u->nin; j++)
            if (u->in[j] == t)
                return 0;
    }
    return 1;
}

typedef struct {
    kt_epi_t epi[KT_OPS_MAX_EPILOGUE];
    int nepi;
    kt_sbuf_t desc;
} group_t;

static int push_epi(group_t *g, kt_epilogue_t x)
{
    if (x == KT_EPI_BIAS_ADD && g->nepi > 0 && g->epi[g->nepi - 1].op == KT_EPI_BIAS_ADD)
        return 1;   /* two constant shifts in a row are one bias */
    if (g->nepi == KT_OPS_MAX_EPILOGUE)
        return 0;
    g->epi[g->nepi++] = (kt_epi_t){.op = x};
    return 1;
}

/* push_epi of an epilogue that takes two numbers (kt_ops_epilogue_params). */
static int push_epi_params(group_t *g, kt_epilogue_t x, double lo, double hi)
{
    if (!push_epi(g, x))
        return 0;
    g->epi[g->nepi - 1].lo = lo;
    g->epi[g->nepi - 1].hi = hi;
    return 1;
}

/* Extend the task anchored at layer a with the elementwise layers after it;
 * notes the first one TVM would fuse but te cannot express. */
static int fuse(ex_t *e, int a, anchor_t kind, group_t *g)
{
    const kt_net_t *net = e->net;
    const net_layer_t *A = &net->layers[a];
    /* te's softmax and layer norm take no epilogue (TVM fuses none into
     * their reductions either); every other anchor does. */
    const int can_epi = kind != A_SOFTMAX && kind != A_LN;
    const int const_weights = kind == A_CONV || kind == A_DEPTHWISE || kind == A_DENSE;
    const int chan = kind == A_CONV || kind == A_DEPTHWISE || kind == A_POOL || kind == A_GPOOL
                         ? 1
                         : A->out.ndim - 1;
    if (A->bias)
        push_epi(g, KT_EPI_BIAS_ADD);
    int tail = a;
    for (;;) {
        if (e->nref[tail] != 1 || net->is_output[tail])
            return KT_OK;
        int c = e->cons[e->cstart[tail]];
        const net_layer_t *C = &net->layers[c];
        if (e->claimed[c] >= 0 || C->blocked || !is_elementwise(C->op))
            return KT_OK;
        if (!can_epi)
            return issue(e, KT_NET_NOT_FUSED, C, "TVM fuses it into the preceding %s task, but "
                         "te's %s takes no epilogue; it runs as a separate simple operator",
                         anchor_te_name(kind), anchor_te_name(kind));
        int only_bias = 1;
        for (int k = 0; k < g->nepi; k++)
            only_bias &= g->epi[k].op == KT_EPI_BIAS_ADD;
        int ok = 1;
        switch (C->op) {
        case NET_RELU:
            if (g->nepi > 0 && g->epi[g->nepi - 1].op == KT_EPI_CLIP) {
                /* relu(clip(x, lo, hi)) is clip(x, max(lo, 0), max(hi, 0)). */
                kt_epi_t *l = &g->epi[g->nepi - 1];
                l->lo = l->lo > 0 ? l->lo : 0.0;
                l->hi = l->hi > 0 ? l->hi : 0.0;
                break;
            }
            ok = push_epi(g, KT_EPI_RELU);
            break;
        case NET_GELU:
            ok = push_epi(g, KT_EPI_GELU);
            break;
        case NET_SIGMOID:
            ok = push_epi(g, KT_EPI_SIGMOID);
            break;
        case NET_TANH:
            ok = push_epi(g, KT_EPI_TANH);
            break;
        case NET_HARDSWISH:
            ok = push_epi(g, KT_EPI_HARDSWISH);
            break;
        case NET_SILU:
            ok = push_epi(g, KT_EPI_SILU);
            break;
        case NET_HARDSIGMOID:
            ok = push_epi_params(g, KT_EPI_HARDSIGMOID, C->lo, C->hi);
            break;
        case NET_CLIP:
            if (g->nepi > 0 && g->epi[g->nepi - 1].op == KT_EPI_RELU && C->lo <= 0 && C->hi >= 0) {
                /* clip(relu(x), lo <= 0, hi) is clip(x, 0, hi): PyTorch
                 * exports relu6 as Relu then Clip(max = 6). */
                g->epi[g->nepi - 1] = (kt_epi_t){.op = KT_EPI_CLIP, .lo = 0.0, .hi = C->hi};
                break;
            }
            ok = push_epi_params(g, KT_EPI_CLIP, C->lo, C->hi);
            break;
        case NET_BIAS_ADD:
            if (!C->scalar && C->axis != chan)
                return issue(e, KT_NET_NOT_FUSED, C, "a constant added along axis %d, not the "
                             "task's channel axis %d: te's bias_add cannot express it", C->axis,
                             chan);
            ok = push_epi(g, KT_EPI_BIAS_ADD);
            break;
        case NET_BATCH_NORM:
        case NET_SCALE:
            if (!(C->op == NET_SCALE && C->scalar) && C->axis != chan)
                return issue(e, KT_NET_NOT_FUSED, C, "a per-channel %s along axis %d, not the "
                             "task's channel axis %d: te has no epilogue for it",
                             C->op == NET_SCALE ? "scale" : "batch norm", C->axis, chan);
            /* The scale folds into the task's weights or forward into the
             * next convolution where it can (TVM's FoldScaleAxis), else it
             * stays a multiply (as TVM's "add, multiply, add, relu" tasks). */
            if (const_weights && only_bias)
                e->out->layer_fold[c] = KT_NET_FOLD_WEIGHTS;
            else if (folds_forward(e, c, C->op == NET_SCALE && C->scalar, chan))
                e->out->layer_fold[c] = KT_NET_FOLD_FORWARD;
            else
                ok = push_epi(g, C->op == NET_SCALE && C->scalar ? KT_EPI_MULTIPLY_SCALAR
                                                                 : KT_EPI_MULTIPLY);
            if (ok && C->op == NET_BATCH_NORM)
                ok = push_epi(g, KT_EPI_BIAS_ADD);
            break;
        case NET_ADD: {
            const net_shape_t *x = &net->layers[C->in[0]].out, *y = &net->layers[C->in[1]].out;
            if (!same_shape(x, y) || !same_shape(&C->out, &net->layers[tail].out))
                return issue(e, KT_NET_NOT_FUSED, C, "a broadcasting add: te's add epilogue "
                             "needs two inputs of one shape");
            ok = push_epi(g, KT_EPI_ADD);
            break;
        }
        default:
            return issue(e, KT_NET_NOT_FUSED, C, "te has no '%s' epilogue; it runs as a "
                         "separate simple operator", C->label);
        }
        if (!ok) {
            e->out->layer_fold[c] = KT_NET_FOLD_NONE;   /* it runs on its own after all */
            return issue(e, KT_NET_NOT_FUSED, C, "the task already has %d epilogues (te's limit)",
                         KT_OPS_MAX_EPILOGUE);
        }
        e->claimed[c] = a;
        kt_sbuf_printf(&g->desc, " + %s", C->name);
        tail = c;
    }
}

static json_t *ints2(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *shape_json(const net_shape_t *s)
{
    return ints2(s->d, s->ndim);
}

static void set_int(json_t *o, const char *k, int64_t v) { json_object_set_new(o, k, json_integer(v)); }

static void set_window(json_t *o, const net_layer_t *l, int dilation)
{
    json_object_set_new(o, "stride", ints2(l->stride, 2));
    json_object_set_new(o, "padding", ints2(l->pad, 4));
    if (dilation)
        json_object_set_new(o, "dilation", ints2(l->dilation, 2));
}

/* The workload object of an anchor with its epilogues, or NULL with an
 * "unsupported" issue recorded (*rc < 0 on OOM). */
static json_t *workload_of(ex_t *e, const net_layer_t *A, anchor_t kind, const group_t *g, int *rc)
{
    const kt_net_t *net = e->net;
    const net_shape_t *x = &net->layers[A->in[0]].out, *o = &A->out;
    const int nhwc = e->layout == KT_NET_NHWC;
    json_t *w = json_object();
    *rc = KT_OK;
    if (!w) {
        *rc = kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    const char *why = NULL;
    switch (kind) {
    case A_CONV:
        if (A->groups > 1) {
            json_object_set_new(w, "op", json_string(nhwc ? "group_conv2d_nhwc"
                                                          : "group_conv2d_nchw"));
            set_int(w, "groups", A->groups);
        } else {
            json_object_set_new(w, "op", json_string(nhwc ? "conv2d_nhwc" : "conv2d_nchw"));
        }
        set_int(w, "N", x->d[0]);
        set_int(w, "H", x->d[2]);
        set_int(w, "W", x->d[3]);
        set_int(w, "CI", x->d[1]);
        set_int(w, "CO", A->channels);
        set_int(w, "KH", A->kernel[0]);
        set_int(w, "KW", A->kernel[1]);
        set_window(w, A, 1);
        break;
    case A_DEPTHWISE:
        json_object_set_new(w, "op", json_string(nhwc ? "depthwise_conv2d_nhwc"
                                                      : "depthwise_conv2d_nchw"));
        if (A->channels != x->d[1])
            set_int(w, "multiplier", A->channels / x->d[1]);
        set_int(w, "N", x->d[0]);
        set_int(w, "H", x->d[2]);
        set_int(w, "W", x->d[3]);
        set_int(w, "C", x->d[1]);
        set_int(w, "KH", A->kernel[0]);
        set_int(w, "KW", A->kernel[1]);
        set_window(w, A, 1);
        break;
    case A_DENSE: {
        int64_t K = x->d[x->ndim - 1];
        json_object_set_new(w, "op", json_string("dense"));
        set_int(w, "M", net_shape_numel(x) / K);
        set_int(w, "N", A->channels);
        set_int(w, "K", K);
        break;
    }
    case A_MATMUL: {
        const net_shape_t *y = &net->layers[A->in[1]].out;
        int64_t M = x->d[x->ndim - 2], K = x->d[x->ndim - 1], N = y->d[y->ndim - 1];
        if (y->ndim == 2) {
            /* [..., M, K] x [K, N] is one matmul with the leading dims folded into M. */
            json_object_set_new(w, "op", json_string("matmul"));
            set_int(w, "M", net_shape_numel(x) / K);
            set_int(w, "N", N);
            set_int(w, "K", K);
            json_object_set_new(w, "layout", json_string("NN"));
            break;
        }
        int64_t bx = net_shape_numel(x) / (M * K), by = net_shape_numel(y) / (K * N);
        if (x->ndim != y->ndim || bx != by || memcmp(x->d, y->d, (size_t)(x->ndim - 2) * sizeof(int64_t))) {
            why = "a matmul broadcasting its batch dimensions: te's batch_matmul needs equal ones";
            break;
        }
        json_object_set_new(w, "op", json_string("batch_matmul"));
        set_int(w, "B", bx);
        set_int(w, "M", M);
        set_int(w, "N", N);
        set_int(w, "K", K);
        break;
    }
    case A_POOL:
        json_object_set_new(w, "op", json_string(nhwc ? "pool2d" : "pool2d_nchw"));
        json_object_set_new(w, "kind", json_string(A->pool_max ? "max" : "avg"));
        set_int(w, "N", x->d[0]);
        set_int(w, "H", x->d[2]);
        set_int(w, "W", x->d[3]);
        set_int(w, "C", x->d[1]);
        set_int(w, "KH", A->kernel[0]);
        set_int(w, "KW", A->kernel[1]);
        set_window(w, A, 0);
        if (!A->pool_max && A->pool_include_pad)
            json_object_set_new(w, "count_include_pad", json_true());
        break;
    case A_GPOOL:
        json_object_set_new(w, "op", json_string(nhwc ? "global_avg_pool"
                                                      : "global_avg_pool_nchw"));
        set_int(w, "N", x->d[0]);
        set_int(w, "H", x->d[2]);
        set_int(w, "W", x->d[3]);
        set_int(w, "C", x->d[1]);
        break;
    case A_SOFTMAX:
        json_object_set_new(w, "op", json_string("softmax"));
        json_object_set_new(w, "shape", shape_json(o));
        break;
    case A_LN:
        json_object_set_new(w, "op", json_string("layer_norm"));
        json_object_set_new(w, "shape", shape_json(o));
        json_object_set_new(w, "affine", json_boolean(A->affine));
        /* The model's epsilon; a float32 1e-5 is the default's. */
        if (fabs(A->eps - KT_OPS_LN_EPS) > 1e-6 * KT_OPS_LN_EPS)
            json_object_set_new(w, "eps", json_real(A->eps));
        break;
    default:
        why = "not an operator";
    }
    if (why) {
        json_decref(w);
        *rc = issue(e, KT_NET_UNSUPPORTED, A, "%s", why);
        return NULL;
    }
    if (kind != A_SOFTMAX && kind != A_LN) {
        json_t *ep = json_array();
        for (int k = 0; k < g->nepi; k++) {
            const kt_epi_t *x = &g->epi[k];
            const kt_epi_params_t *pk = kt_ops_epilogue_params(x->op);
            const char *name = kt_ops_epilogue_name(x->op);
            json_array_append_new(ep, pk ? json_pack("{s:s, s:f, s:f}", "op", name, pk->lo_key,
                                                     x->lo, pk->hi_key, x->hi)
                                         : json_string(name));
        }
        json_object_set_new(w, "epilogue", ep);
    }
    return w;
}

/* Record the appearance of `task` anchored at layer a: the anchor and the
 * layers fused into it, which form a chain in layer order. */
static int add_instance(ex_t *e, int a, int task)
{
    kt_net_tasks_t *t = e->out;
    if (t->ninstances == e->cap_inst) {
        int cap = e->cap_inst ? e->cap_inst * 2 : 32;
        kt_net_instance_t *n = realloc(t->instances, (size_t)cap * sizeof(*n));
        if (!n)
            return kt_err_set(KT_ENOMEM, "out of memory");
        t->instances = n;
        e->cap_inst = cap;
    }
    int nf = 0;
    for (int i = a + 1; i < e->net->n; i++)
        nf += e->claimed[i] == a;
    kt_net_instance_t *in = &t->instances[t->ninstances];
    memset(in, 0, sizeof(*in));
    in->task = task;
    in->anchor = a;
    in->tail = a;
    if (nf && !(in->fused = malloc((size_t)nf * sizeof(int))))
        return kt_err_set(KT_ENOMEM, "out of memory");
    for (int i = a + 1; i < e->net->n; i++)
        if (e->claimed[i] == a) {
            in->fused[in->nfused++] = i;
            in->tail = i;
        }
    t->layer_instance[a] = t->ninstances;
    for (int k = 0; k < in->nfused; k++)
        t->layer_instance[in->fused[k]] = t->ninstances;
    t->ninstances++;
    return KT_OK;
}

static int extract_anchor(ex_t *e, int a, anchor_t kind)
{
    const net_layer_t *A = &e->net->layers[a];
    group_t g = {.nepi = 0};
    kt_sbuf_init(&g.desc);
    kt_sbuf_puts(&g.desc, A->name);
    int rc = KT_OK;
    /* A layer te cannot express keeps the elementwise layers after it apart. */
    json_t *probe = workload_of(e, A, kind, &g, &rc);
    if (probe) {
        json_decref(probe);
        rc = fuse(e, a, kind, &g);
        json_t *w = rc ? NULL : workload_of(e, A, kind, &g, &rc);
        if (w) {
            rc = kt_sbuf_ok(&g.desc);
            int task = -1;
            if (rc)
                json_decref(w);
            else
                rc = add_task(e, w, g.desc.data, A, &task);
            if (rc == KT_OK && task >= 0)
                rc = add_instance(e, a, task);
        }
    }
    kt_sbuf_free(&g.desc);
    return rc;
}

/* ---- Winograd alternatives ----------------------------------------------------------- */

/* After the tasks: for every conv2d_nhwc task Winograd can compute (3x3,
 * stride 1, dilation 1), the same layers as a conv2d_winograd_nhwc task
 * with its weight; tile 4 when the input height is a multiple of 4, else 2.
 * TVM's _pick_tile_size asks for a multiple of 8, which gives ResNet-18's
 * 28x28 layers tile 2, whose batched matmul does 1.8 times the
 * multiply-adds of tile 4's (16 against 36 / 4 = 9 per output pixel) on 4
 * times as many tiles; with a multiple of 4 the tiles still cover the
 * output exactly. No instance calls it: the build picks it for its
 * primary's instances when its record is faster. */
static int add_winograd_alternatives(ex_t *e)
{
    kt_net_tasks_t *t = e->out;
    const int nprimary = t->ntasks;
    for (int i = 0; i < nprimary; i++) {
        const json_t *w = t->tasks[i].workload;
        const char *op = json_string_value(json_object_get(w, "op"));
        if (!op || strcmp(op, "conv2d_nhwc") != 0)
            continue;
        const json_t *st = json_object_get(w, "stride"), *dl = json_object_get(w, "dilation");
        if (json_integer_value(json_object_get(w, "KH")) != 3 ||
            json_integer_value(json_object_get(w, "KW")) != 3 ||
            json_integer_value(json_array_get(st, 0)) != 1 ||
            json_integer_value(json_array_get(st, 1)) != 1 ||
            json_integer_value(json_array_get(dl, 0)) != 1 ||
            json_integer_value(json_array_get(dl, 1)) != 1)
            continue;
        const net_layer_t *anchor = NULL;   /* for an issue if te refused the workload */
        for (int k = 0; k < t->ninstances && !anchor; k++)
            if (t->instances[k].task == i)
                anchor = &e->net->layers[t->instances[k].anchor];
        if (!anchor)
            continue;
        json_t *alt = json_deep_copy(w);
        if (!alt)
            return kt_err_set(KT_ENOMEM, "out of memory");
        json_int_t H = json_integer_value(json_object_get(w, "H"));
        json_object_set_new(alt, "op", json_string("conv2d_winograd_nhwc"));
        json_object_set_new(alt, "tile_size", json_integer(H % 4 == 0 ? 4 : 2));
        kt_sbuf_t desc;
        kt_sbuf_init(&desc);
        kt_sbuf_printf(&desc, "%s (Winograd)", t->tasks[i].desc);
        int rc = kt_sbuf_ok(&desc), task = -1;
        if (rc)
            json_decref(alt);
        else
            rc = add_task(e, alt, desc.data, anchor, &task);
        kt_sbuf_free(&desc);
        if (rc)
            return rc;
        if (task >= nprimary) {
            t->tasks[task].weight = t->tasks[i].weight;
            t->tasks[task].alt_of = i;
        }
    }
    return KT_OK;
}

/* ---- public -------------------------------------------------------------------------- */

void kt_net_tasks_free(kt_net_tasks_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->ntasks; i++) {
        json_decref(t->tasks[i].workload);
        kt_workload_free(t->tasks[i].wl);
        free(t->tasks[i].desc);
    }
    for (int i = 0; i < t->nissues; i++) {
        free(t->issues[i].layer);
        free(t->issues[i].op);
        free(t->issues[i].msg);
    }
    for (int i = 0; i < t->ninstances; i++)
        free(t->instances[i].fused);
    free(t->instances);
    free(t->layer_instance);
    free(t->layer_fold);
    free(t->tasks);
    free(t->issues);
    free(t);
}

kt_net_tasks_t *kt_net_extract(const kt_net_t *net, kt_net_layout_t layout)
{
    return kt_net_extract_ex(net, layout, 0);
}

kt_net_tasks_t *kt_net_extract_ex(const kt_net_t *net, kt_net_layout_t layout, int flags)
{
    if (!net || !net->is_output) {
        kt_err_set(KT_EINVAL, "no network");
        return NULL;
    }
    ex_t e = {.net = net, .layout = layout};
    int n = net->n, rc = KT_OK;
    e.out = calloc(1, sizeof(*e.out));
    e.nref = calloc((size_t)n + 1, sizeof(int));
    e.cstart = calloc((size_t)n + 2, sizeof(int));
    e.claimed = malloc(((size_t)n + 1) * sizeof(int));
    int total = 0;
    for (int i = 0; i < n; i++)
        total += net->layers[i].nin;
    e.cons = malloc(((size_t)total + 1) * sizeof(int));
    if (!e.out || !e.nref || !e.cstart || !e.claimed || !e.cons) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto done;
    }
    e.out->nlayers = n;
    e.out->layer_instance = malloc(((size_t)n + 1) * sizeof(int));
    e.out->layer_fold = calloc((size_t)n + 1, 1);
    if (!e.out->layer_instance || !e.out->layer_fold) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        e.out->layer_instance[i] = -1;
    /* Consumer lists (CSR), in layer order. */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < net->layers[i].nin; k++)
            e.cstart[net->layers[i].in[k] + 1]++;
    for (int i = 0; i < n; i++)
        e.cstart[i + 1] += e.cstart[i];
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!fill) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < net->layers[i].nin; k++) {
            int p = net->layers[i].in[k];
            e.cons[e.cstart[p] + fill[p]++] = i;
        }
    free(fill);
    for (int i = 0; i < n; i++) {
        e.nref[i] = e.cstart[i + 1] - e.cstart[i] + (net->is_output[i] ? 1 : 0);
        e.claimed[i] = -1;
    }
    int nblocked = 0, first_blocked = -1;
    for (int i = 0; i < n && rc == KT_OK; i++) {
        const net_layer_t *l = &net->layers[i];
        if (l->blocked) {
            if (nblocked++ == 0)
                first_blocked = i;
            continue;
        }
        if (l->op == NET_UNSUPPORTED) {
            if (!l->secondary || e.nref[i] > 0)
                rc = issue(&e, KT_NET_UNSUPPORTED, l, "%s", l->reason ? l->reason : "unsupported");
            continue;
        }
        anchor_t kind = anchor_kind(l, net);
        if (kind != A_NONE && e.claimed[i] < 0)
            rc = extract_anchor(&e, i, kind);
    }
    if (rc == KT_OK && nblocked)
        rc = issue(&e, KT_NET_UNSUPPORTED, &net->layers[first_blocked],
                   "%d layer%s from this one on could not be inferred: their input shapes depend "
                   "on unsupported operators", nblocked, nblocked == 1 ? "" : "s");
    if (rc == KT_OK && (flags & KT_NET_EXTRACT_WINOGRAD) && layout == KT_NET_NHWC)
        rc = add_winograd_alternatives(&e);
done:
    free(e.nref);
    free(e.cstart);
    free(e.cons);
    free(e.claimed);
    if (rc) {
        kt_net_tasks_free(e.out);
        return NULL;
    }
    return e.out;
}

char *kt_net_plain_steps_text(const kt_net_t *net)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    char *done = calloc((size_t)(net ? net->n : 0) + 1, 1);
    for (int i = 0; done && i < net->n; i++) {
        const net_layer_t *l = &net->layers[i];
        if (done[i] || l->op != NET_REFOP || l->blocked)
            continue;
        int count = 0;
        kt_sbuf_t names;
        kt_sbuf_init(&names);
        for (int j = i; j < net->n; j++) {
            const net_layer_t *o = &net->layers[j];
            if (o->op != NET_REFOP || o->blocked || strcmp(o->label, l->label) != 0)
                continue;
            done[j] = 1;
            if (count < 4)
                kt_sbuf_printf(&names, "%s'%s'", count ? ", " : "", o->name);
            count++;
        }
        kt_sbuf_printf(&b, "plain step (no task, its reference implementation): %s x%d: %s%s\n",
                       l->label, count, names.data ? names.data : "", count > 4 ? ", ..." : "");
        kt_sbuf_free(&names);
    }
    if (!done || kt_sbuf_ok(&b)) {
        free(done);
        kt_sbuf_free(&b);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    free(done);
    return kt_sbuf_take(&b);
}

int kt_net_layout_parse(const char *s, kt_net_layout_t *out)
{
    if (s && strcasecmp(s, "NHWC") == 0)
        *out = KT_NET_NHWC;
    else if (s && strcasecmp(s, "NCHW") == 0)
        *out = KT_NET_NCHW;
    else
        return kt_err_set(KT_EINVAL, "layout must be NHWC or NCHW (got '%s')", s ? s : "");
    return KT_OK;
}

/* ---- printing ------------------------------------------------------------------------- */

char *kt_net_tasks_json(const kt_net_tasks_t *t)
{
    /* One task per line: readable, diffable and still one JSON list. */
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "[");
    for (int i = 0; t && i < t->ntasks; i++) {
        json_t *it = json_object();
        if (!it)
            break;
        json_object_set(it, "workload", t->tasks[i].workload);
        json_object_set_new(it, "weight", json_integer(t->tasks[i].weight));
        json_object_set_new(it, "key", json_string(kt_workload_key(t->tasks[i].wl)));
        json_object_set_new(it, "desc", json_string(t->tasks[i].desc));
        char *s = json_dumps(it, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(it);
        if (!s) {
            kt_sbuf_free(&b);
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
        kt_sbuf_printf(&b, "%s\n  %s", i ? "," : "", s);
        free(s);
    }
    kt_sbuf_puts(&b, "\n]\n");
    if (kt_sbuf_ok(&b)) {
        kt_sbuf_free(&b);
        return NULL;
    }
    return kt_sbuf_take(&b);
}

char *kt_net_tasks_text(const kt_net_tasks_t *t)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (int i = 0; t && i < t->ntasks; i++) {
        const kt_net_task_t *k = &t->tasks[i];
        kt_sbuf_printf(&b, "========== Task %d  (workload key: %s) ==========\n", i,
                       kt_workload_key(k->wl));
        char *dag = kt_dag_to_text(kt_workload_dag(k->wl));
        if (!dag) {
            kt_sbuf_free(&b);
            kt_err_set(KT_ENOMEM, "out of memory");
            return NULL;
        }
        kt_sbuf_puts(&b, dag);
        free(dag);
        kt_sbuf_printf(&b, "weight: %d  (%s)\n\n", k->weight, k->desc);
    }
    /* Issues with one message are one line: kind, message, the layers. */
    int n = t ? t->nissues : 0;
    char *done = calloc((size_t)n + 1, 1);
    if (!done) {
        kt_sbuf_free(&b);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        const kt_net_issue_t *is = &t->issues[i];
        kt_sbuf_printf(&b, "%s: %s: ", is->kind == KT_NET_UNSUPPORTED ? "unsupported" : "not fused",
                       is->msg);
        int shown = 0;
        for (int j = i; j < n; j++) {
            const kt_net_issue_t *o = &t->issues[j];
            if (done[j] || o->kind != is->kind || strcmp(o->msg, is->msg) != 0)
                continue;
            done[j] = 1;
            if (shown < 8)
                kt_sbuf_printf(&b, "%s'%s' (%s)", shown ? ", " : "", o->layer, o->op);
            shown++;
        }
        if (shown > 8)
            kt_sbuf_printf(&b, " and %d more", shown - 8);
        kt_sbuf_puts(&b, "\n");
    }
    free(done);
    if (kt_sbuf_ok(&b)) {
        kt_sbuf_free(&b);
        return NULL;
    }
    return kt_sbuf_take(&b);
}
