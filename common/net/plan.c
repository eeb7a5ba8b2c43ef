/* A network's execution plan: steps, folded constants and the arena (plan.h). */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codegen/codegen.h"
#include "net_int.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/sbuf.h"
#include "util/util.h"

#define ALIGN 64   /* arena offsets: a cache line, what vector loads like */

typedef struct {
    const kt_net_t *net;
    const kt_net_tasks_t *tasks;
    kt_net_layout_t layout;
    uint64_t seed;
    int random;
    kt_net_plan_t *p;
    int cap_values, cap_steps, cap_weights;
    int *lv;        /* per layer: its value, -1 before it is computed */
    int *as_nhwc;   /* per value: the same tensor held in the other layout, or -1 */
    float **sigma;  /* per layer: multiplier folded forward (kt_net_fold_t FORWARD) */
    int64_t *nsigma;
} ctx_t;

/* ---- growing the plan ---------------------------------------------------------------- */

static int grow(void **arr, int *cap, int n, size_t size)
{
    if (n < *cap)
        return KT_OK;
    int c = *cap ? *cap * 2 : 64;
    void *x = realloc(*arr, (size_t)c * size);
    if (!x)
        return kt_err_set(KT_ENOMEM, "out of memory");
    *arr = x;
    *cap = c;
    return KT_OK;
}

static int new_value(ctx_t *c, kt_plan_vkind_t kind, const net_shape_t *s, int nhwc)
{
    kt_net_plan_t *p = c->p;
    int cap = c->cap_values;
    if (grow((void **)&p->values, &c->cap_values, p->nvalues, sizeof(kt_plan_value_t)))
        return KT_ENOMEM;
    if (cap != c->cap_values || !c->as_nhwc) {
        int *x = realloc(c->as_nhwc, (size_t)c->cap_values * sizeof(int));
        if (!x)
            return kt_err_set(KT_ENOMEM, "out of memory");
        c->as_nhwc = x;
    }
    kt_plan_value_t *v = &p->values[p->nvalues];
    memset(v, 0, sizeof(*v));
    v->kind = kind;
    v->ndim = s->ndim;
    memcpy(v->dims, s->d, sizeof(v->dims));
    v->nhwc = nhwc && s->ndim == 4;
    v->numel = net_shape_numel(s);
    v->alias = -1;
    c->as_nhwc[p->nvalues] = -1;
    return p->nvalues++;
}

static kt_plan_step_t *new_step(ctx_t *c, kt_plan_kind_t kind, const char *name, int out)
{
    kt_net_plan_t *p = c->p;
    if (grow((void **)&p->steps, &c->cap_steps, p->nsteps, sizeof(kt_plan_step_t)))
        return NULL;
    kt_plan_step_t *s = &p->steps[p->nsteps];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->task = -1;
    s->out = out;
    s->name = kt_strdup(name);
    if (!s->name) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    p->nsteps++;
    return s;
}

static void step_in(kt_plan_step_t *s, int weight, int id)
{
    s->in[s->nin++] = (kt_plan_ref_t){.weight = weight, .id = id};
}

/* Adds a constant (data taken over); its id or negative. */
static int new_weight(ctx_t *c, const char *layer, const char *role, float *data, int ndim,
                      const int64_t *dims)
{
    kt_net_plan_t *p = c->p;
    if (grow((void **)&p->weights, &c->cap_weights, p->nweights, sizeof(kt_plan_weight_t))) {
        free(data);
        return KT_ENOMEM;
    }
    kt_plan_weight_t *w = &p->weights[p->nweights];
    memset(w, 0, sizeof(*w));
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_printf(&b, "%s.%s", layer, role);
    /* Two appearances may name a constant alike (a layer's bias and a bias
     * merged into it): suffix until unique. */
    for (int k = 1;; k++) {
        int dup = 0;
        for (int i = 0; i < p->nweights && !dup; i++)
            dup = b.data && strcmp(p->weights[i].name, b.data) == 0;
        if (!dup)
            break;
        kt_sbuf_clear(&b);
        kt_sbuf_printf(&b, "%s.%s_%d", layer, role, k);
    }
    if (kt_sbuf_ok(&b)) {
        kt_sbuf_free(&b);
        free(data);
        return KT_ENOMEM;
    }
    w->name = kt_sbuf_take(&b);
    w->ndim = ndim;
    w->numel = 1;
    for (int d = 0; d < ndim; d++) {
        w->dims[d] = dims[d];
        w->numel *= dims[d];
    }
    w->data = data;
    return p->nweights++;
}

/* ---- parameters ---------------------------------------------------------------------- */

/* A copy of `want` values of parameter `role` of layer i: the network's own,
 * or uniform in [lo, hi) from a generator seeded by the seed, the layer and
 * the role (the same in every layout and order). A stored scalar where a
 * vector is wanted is broadcast. */
static float *param(ctx_t *c, int i, const char *role, int64_t want, double lo, double hi)
{
    const net_layer_t *l = &c->net->layers[i];
    float *out = malloc((size_t)(want > 0 ? want : 1) * sizeof(float));
    if (!out) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    if (!c->random) {
        int64_t n = 0;
        const float *v = kt_net_layer_param(c->net, i, role, &n);
        if (!v || (n != want && n != 1)) {
            free(out);
            kt_err_set(KT_EINVAL, "layer '%s' (%s): parameter '%s' %s (%lld values, need %lld)",
                       l->name, l->label, role, v ? "has the wrong size" : "is missing",
                       (long long)n, (long long)want);
            return NULL;
        }
        for (int64_t k = 0; k < want; k++)
            out[k] = v[n == 1 ? 0 : k];
        return out;
    }
    kt_rng_t r;
    uint64_t h = kt_hash64(role, strlen(role));
    kt_rng_seed(&r, c->seed ^ (h * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i << 32));
    for (int64_t k = 0; k < want; k++)
        out[k] = (float)(lo + (hi - lo) * kt_rng_double(&r));
    return out;
}

/* Batch norm as y = x * s + t; s and t malloc'd [C]. */
static int bn_affine(ctx_t *c, int i, int64_t C, float **s, float **t)
{
    float *g = param(c, i, "gamma", C, 0.5, 1.5), *b = param(c, i, "beta", C, -0.25, 0.25);
    float *m = param(c, i, "mean", C, -0.1, 0.1), *v = param(c, i, "var", C, 0.5, 1.5);
    int rc = KT_OK;
    if (!g || !b || !m || !v) {
        rc = kt_err_code() ? kt_err_code() : KT_ENOMEM;
    } else {
        double eps = c->random ? 1e-5 : kt_net_layer_eps(c->net, i);
        for (int64_t k = 0; k < C; k++) {
            if (!(v[k] + eps > 0)) {
                rc = kt_err_set(KT_EINVAL, "layer '%s': batch norm variance %g at channel %lld "
                                "is not above -epsilon", c->net->layers[i].name, v[k],
                                (long long)k);
                break;
            }
            double sc = g[k] / sqrt(v[k] + eps);
            g[k] = (float)sc;
            b[k] = (float)(b[k] - m[k] * sc);
        }
    }
    free(m);
    free(v);
    if (rc) {
        free(g);
        free(b);
        return rc;
    }
    *s = g;
    *t = b;
    return KT_OK;
}

/* ---- values in the layout a step wants -------------------------------------------------- */

const int kt_plan_nhwc_axis[4] = {0, 2, 3, 1}, kt_plan_nhwc_memory_axis[4] = {0, 3, 1, 2};

/* A 4-D logical shape in NHWC memory order. */
static void nhwc_order(const int64_t *logical, int64_t *mem)
{
    for (int j = 0; j < 4; j++)
        mem[j] = logical[kt_plan_nhwc_axis[j]];
}

/* Whether layer l's permutation is p (of 4 axes). */
static int perm_is(const net_layer_t *l, const int *p)
{
    if (l->ntarget != 4)
        return 0;
    for (int d = 0; d < 4; d++)
        if (l->target[d] != p[d])
            return 0;
    return 1;
}

static int is_trivial_4d(const kt_plan_value_t *v)
{
    /* [N, C, 1, 1] and [N, 1, H, W] are the same bytes in both layouts. */
    return v->ndim == 4 && (v->dims[1] == 1 || v->dims[2] * v->dims[3] == 1);
}

static int alias_of(ctx_t *c, int v, const int64_t *dims, int ndim, int nhwc)
{
    net_shape_t s = {.ndim = ndim};
    memcpy(s.d, dims, (size_t)ndim * sizeof(int64_t));
    int a = new_value(c, KT_PLAN_V_ALIAS, &s, nhwc);
    if (a < 0)
        return a;
    c->p->values[a].alias = kt_net_plan_root(c->p, v);
    return a;
}

/* Value v as a tensor held NHWC (nhwc 1) or in the model's layout. */
static int need(ctx_t *c, int v, int nhwc, const char *layer)
{
    kt_plan_value_t *x = &c->p->values[v];
    nhwc = nhwc && x->ndim == 4;
    if (x->nhwc == nhwc)
        return v;
    if (c->as_nhwc[v] >= 0)
        return c->as_nhwc[v];
    int64_t dims[KT_NET_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    int ndim = x->ndim, w;
    if (is_trivial_4d(x)) {
        w = alias_of(c, v, dims, ndim, nhwc);
    } else {
        net_shape_t s = {.ndim = ndim};
        memcpy(s.d, dims, sizeof(s.d));
        w = new_value(c, KT_PLAN_V_ARENA, &s, nhwc);
        if (w < 0)
            return w;
        char name[300];
        snprintf(name, sizeof name, "layout %s (%s)", nhwc ? "NCHW->NHWC" : "NHWC->NCHW", layer);
        kt_plan_step_t *st = new_step(c, KT_PLAN_LAYOUT, name, w);
        if (!st)
            return KT_ENOMEM;
        step_in(st, 0, v);
    }
    if (w >= 0) {
        c->as_nhwc[v] = w;
        c->as_nhwc[w] = v;
    }
    return w;
}

/* ---- task appearances ---------------------------------------------------------------- */

typedef struct {
    kt_epilogue_t op;
    float *vec;        /* BIAS_ADD, MULTIPLY: [C]; MULTIPLY_SCALAR: [1] */
    int residual;      /* ADD: the layer added */
} epi_t;

typedef struct {
    epi_t e[KT_OPS_MAX_EPILOGUE];
    int n;
} epis_t;

static void epis_free(epis_t *g)
{
    for (int k = 0; k < g->n; k++)
        free(g->e[k].vec);
}

static int epi_push(epis_t *g, const net_layer_t *l, kt_epilogue_t op, float *vec, int64_t C)
{
    if (op == KT_EPI_BIAS_ADD && g->n > 0 && g->e[g->n - 1].op == KT_EPI_BIAS_ADD) {
        for (int64_t k = 0; k < C; k++)
            g->e[g->n - 1].vec[k] += vec[k];
        free(vec);
        return KT_OK;
    }
    if (g->n == KT_OPS_MAX_EPILOGUE) {
        free(vec);
        return kt_err_set(KT_EINTERNAL, "layer '%s': more epilogues than extraction fused",
                          l->name);
    }
    g->e[g->n++] = (epi_t){.op = op, .vec = vec, .residual = -1};
    return KT_OK;
}

/* A per-channel constant of layer i ("value" of bias_add and scale), [C]. */
static float *chan_param(ctx_t *c, int i, int64_t C, double lo, double hi)
{
    const net_layer_t *l = &c->net->layers[i];
    float *v = param(c, i, "value", l->scalar ? 1 : C, lo, hi);
    if (!v || !l->scalar)
        return v;
    float *w = malloc((size_t)C * sizeof(float));
    if (w)
        for (int64_t k = 0; k < C; k++)
            w[k] = v[0];
    else
        kt_err_set(KT_ENOMEM, "out of memory");
    free(v);
    return w;
}

/* The multiplier folded forward into the input of a layer reading layer x,
 * or NULL; *relu says whether it passes a relu (exact for positive ones). */
static const float *forward_scale(ctx_t *c, int x, int64_t *n, int *relu)
{
    *relu = 0;
    const net_layer_t *l = &c->net->layers[x];
    if (l->op == NET_RELU && c->tasks->layer_fold[l->in[0]] == KT_NET_FOLD_FORWARD) {
        x = l->in[0];
        *relu = 1;
    }
    if (c->tasks->layer_fold[x] != KT_NET_FOLD_FORWARD)
        return NULL;
    *n = c->nsigma[x];
    return c->sigma[x];
}

/* The epilogue list of the task's workload, to check the fold against. */
static int check_epilogues(const kt_net_task_t *t, const epis_t *g, const net_layer_t *A)
{
    json_t *ep = json_object_get(t->workload, "epilogue");
    size_t n = ep ? json_array_size(ep) : 0;
    int ok = n == (size_t)g->n;
    for (size_t k = 0; ok && k < n; k++) {
        json_t *x = json_array_get(ep, k);
        const char *name = json_is_string(x) ? json_string_value(x)
                                             : json_string_value(json_object_get(x, "op"));
        ok = name && strcmp(name, kt_ops_epilogue_name(g->e[k].op)) == 0;
    }
    if (!ok)
        return kt_err_set(KT_EINTERNAL, "layer '%s': the folded epilogues differ from its "
                          "task's (%s)", A->name, t->desc);
    return KT_OK;
}

static int plan_instance(ctx_t *c, const kt_net_instance_t *in)
{
    const kt_net_t *net = c->net;
    const net_layer_t *A = &net->layers[in->anchor], *T = &net->layers[in->tail];
    const kt_net_task_t *task = &c->tasks->tasks[in->task];
    const kt_dag_t *dag = kt_workload_dag(task->wl);
    const net_shape_t *xs = &net->layers[A->in[0]].out;
    const char *op = kt_workload_op(task->wl);
    const int nhwc = c->layout == KT_NET_NHWC;
    const int is_conv = A->op == NET_CONV2D, is_dense = A->op == NET_DENSE;
    const int spatial = is_conv || A->op == NET_POOL || A->op == NET_GLOBAL_POOL;
    int64_t C = is_conv || is_dense ? A->channels
                : spatial           ? xs->d[1]
                                    : T->out.d[T->out.ndim - 1];
    kt_sbuf_t name;
    kt_sbuf_init(&name);
    kt_sbuf_puts(&name, A->name);
    for (int k = 0; k < in->nfused; k++)
        kt_sbuf_printf(&name, " + %s", net->layers[in->fused[k]].name);
    if (kt_sbuf_ok(&name))
        return KT_ENOMEM;

    int rc = KT_OK;
    float *W = NULL, *wscale = NULL;
    int64_t wn = 0, cig = 0;
    epis_t g = {.n = 0};
    if (is_conv || is_dense) {
        cig = is_conv ? xs->d[1] / A->groups : xs->d[xs->ndim - 1];
        int64_t fan_in = is_conv ? cig * A->kernel[0] * A->kernel[1] : cig;
        wn = C * fan_in;
        double a = sqrt((is_conv ? 6.0 : 3.0) / (double)fan_in);
        W = param(c, in->anchor, "weight", wn, -a, a);
        wscale = malloc((size_t)C * sizeof(float));
        if (!W || !wscale) {
            rc = kt_err_code() ? kt_err_code() : kt_err_set(KT_ENOMEM, "out of memory");
            goto done;
        }
        for (int64_t k = 0; k < C; k++)
            wscale[k] = 1.0f;
        int64_t ns = 0;
        int relu = 0;
        const float *sg = forward_scale(c, A->in[0], &ns, &relu);
        for (int64_t k = 0; sg && k < ns; k++)
            if (relu && !(sg[k] > 0)) {
                rc = kt_err_set(KT_EINVAL, "layer '%s': the multiplier folded into its input "
                                "passes a relu but is not positive at channel %lld (%g)",
                                A->name, (long long)k, sg[k]);
                goto done;
            }
        if (sg) {
            int64_t khw = is_conv ? A->kernel[0] * A->kernel[1] : 1;
            int64_t per_group = is_conv ? C / A->groups : C;
            for (int64_t o = 0; o < C; o++)
                for (int64_t r = 0; r < cig; r++) {
                    int64_t ch = (is_conv ? (o / per_group) * cig : 0) + r;
                    float s = sg[ns == 1 ? 0 : ch];
                    for (int64_t q = 0; q < khw; q++)
                        W[(o * cig + r) * khw + q] *= s;
                }
        }
    }
    if (A->bias) {
        float *b = param(c, in->anchor, "bias", C, -0.1, 0.1);
        if (!b || (rc = epi_push(&g, A, KT_EPI_BIAS_ADD, b, C)))
            goto fail;
    }
    const float *sigma = NULL;   /* a multiplier folded forward in this group */
    for (int k = 0; k < in->nfused; k++) {
        int li = in->fused[k];
        const net_layer_t *F = &net->layers[li];
        int fold = c->tasks->layer_fold[li];
        epi_t *last = g.n ? &g.e[g.n - 1] : NULL;
        switch (F->op) {
        case NET_RELU:
            /* relu after a clip merges into it, as extraction did; the
             * kernel's bounds come from the task's workload. */
            if (!last || last->op != KT_EPI_CLIP)
                rc = epi_push(&g, F, KT_EPI_RELU, NULL, 0);
            break;
        case NET_GELU: rc = epi_push(&g, F, KT_EPI_GELU, NULL, 0); break;
        case NET_SIGMOID: rc = epi_push(&g, F, KT_EPI_SIGMOID, NULL, 0); break;
        case NET_TANH: rc = epi_push(&g, F, KT_EPI_TANH, NULL, 0); break;
        case NET_HARDSWISH: rc = epi_push(&g, F, KT_EPI_HARDSWISH, NULL, 0); break;
        case NET_SILU: rc = epi_push(&g, F, KT_EPI_SILU, NULL, 0); break;
        case NET_HARDSIGMOID: rc = epi_push(&g, F, KT_EPI_HARDSIGMOID, NULL, 0); break;
        case NET_CLIP:
            if (last && last->op == KT_EPI_RELU && F->lo <= 0 && F->hi >= 0)
                last->op = KT_EPI_CLIP;   /* clip(relu(x)), as extraction merged it */
            else
                rc = epi_push(&g, F, KT_EPI_CLIP, NULL, 0);
            break;
        case NET_BIAS_ADD: {
            float *b = chan_param(c, li, C, -0.1, 0.1);
            if (!b)
                goto fail;
            for (int64_t q = 0; sigma && q < C; q++)
                b[q] /= sigma[q];
            rc = epi_push(&g, F, KT_EPI_BIAS_ADD, b, C);
            break;
        }
        case NET_BATCH_NORM:
        case NET_SCALE: {
            float *s = NULL, *t = NULL;
            if (F->op == NET_BATCH_NORM) {
                if ((rc = bn_affine(c, li, C, &s, &t)))
                    goto done;
            } else if (!(s = chan_param(c, li, C, 0.5, 1.5))) {
                goto fail;
            }
            if (fold == KT_NET_FOLD_WEIGHTS) {
                for (int64_t q = 0; q < C; q++)
                    wscale[q] *= s[q];
                for (int e = 0; e < g.n; e++)
                    for (int64_t q = 0; q < C; q++)
                        g.e[e].vec[q] *= s[q];
                free(s);
            } else if (fold == KT_NET_FOLD_FORWARD) {
                for (int64_t q = 0; q < C; q++)
                    if (s[q] == 0.0f) {
                        free(s);
                        free(t);
                        rc = kt_err_set(KT_EINVAL, "layer '%s': a zero multiplier at channel "
                                        "%lld cannot be folded into the next layer", F->name,
                                        (long long)q);
                        goto done;
                    }
                if (t)
                    for (int64_t q = 0; q < C; q++)
                        t[q] /= s[q];
                c->sigma[li] = s;
                c->nsigma[li] = C;
                sigma = s;
            } else if (F->op == NET_SCALE && F->scalar) {
                rc = epi_push(&g, F, KT_EPI_MULTIPLY_SCALAR, s, 1);
            } else {
                rc = epi_push(&g, F, KT_EPI_MULTIPLY, s, C);
            }
            if (rc == KT_OK && t)
                rc = epi_push(&g, F, KT_EPI_BIAS_ADD, t, C);
            else
                free(t);
            break;
        }
        case NET_ADD: {
            int prev = k ? in->fused[k - 1] : in->anchor;
            if ((rc = epi_push(&g, F, KT_EPI_ADD, NULL, 0)) == KT_OK)
                g.e[g.n - 1].residual = F->in[0] == prev ? F->in[1] : F->in[0];
            break;
        }
        default:
            rc = kt_err_set(KT_EINTERNAL, "layer '%s' (%s) was fused but is no epilogue",
                            F->name, F->label);
        }
        if (rc)
            goto done;
    }
    if ((rc = check_epilogues(task, &g, A)))
        goto done;

    /* The step: the kernel's placeholders in DAG order, then its output. */
    int out_nhwc = spatial && nhwc;
    int out = new_value(c, KT_PLAN_V_ARENA, &T->out, out_nhwc);
    if (out < 0) {
        rc = out;
        goto done;
    }
    int x = need(c, c->lv[A->in[0]], spatial && nhwc, A->name);
    int y = A->op == NET_MATMUL ? need(c, c->lv[A->in[1]], 0, A->name) : 0;
    if (x < 0 || y < 0) {
        rc = x < 0 ? x : y;
        goto done;
    }
    int resid[KT_OPS_MAX_EPILOGUE];
    for (int k = 0; k < g.n; k++) {
        resid[k] = -1;
        if (g.e[k].op != KT_EPI_ADD)
            continue;
        int r = c->lv[g.e[k].residual];
        if (r < 0) {
            rc = kt_err_set(KT_EINTERNAL, "layer '%s': its residual input is not computed",
                            A->name);
            goto done;
        }
        if ((resid[k] = need(c, r, out_nhwc, A->name)) < 0) {
            rc = resid[k];
            goto done;
        }
    }
    kt_plan_step_t *st = new_step(c, KT_PLAN_TASK, name.data, out);
    if (!st) {
        rc = KT_ENOMEM;
        goto done;
    }
    st->task = in->task;
    step_in(st, 0, x);
    if (A->op == NET_MATMUL)
        step_in(st, 0, y);
    if (is_conv || is_dense) {
        /* Every layout te's operators take from the model's [CO, CI/g, KH, KW]. */
        float *w = malloc((size_t)wn * sizeof(float));
        if (!w) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            goto done;
        }
        int64_t dims[4], KH = is_conv ? A->kernel[0] : 1, KW = is_conv ? A->kernel[1] : 1;
        int ndim;
        int depthwise = strstr(op, "depthwise") != NULL;
        for (int64_t o = 0; o < C; o++)
            for (int64_t r = 0; r < cig; r++)
                for (int64_t h = 0; h < KH; h++)
                    for (int64_t q = 0; q < KW; q++) {
                        float v = W[((o * cig + r) * KH + h) * KW + q] * wscale[o];
                        int64_t at;
                        if (!is_conv || !nhwc)
                            at = ((o * cig + r) * KH + h) * KW + q;
                        else if (depthwise)   /* [KH, KW, C, M]: o = c * M + m */
                            at = (h * KW + q) * C + o;
                        else                  /* [KH, KW, CI/g, CO] */
                            at = ((h * KW + q) * cig + r) * C + o;
                        w[at] = v;
                    }
        if (!is_conv) {
            ndim = 2;
            dims[0] = C;
            dims[1] = cig;
        } else if (depthwise) {
            int64_t ci = xs->d[1], m = C / ci;
            ndim = 4;
            int64_t d_nhwc[4] = {KH, KW, ci, m}, d_nchw[4] = {ci, m, KH, KW};
            memcpy(dims, nhwc ? d_nhwc : d_nchw, sizeof(dims));
        } else {
            ndim = 4;
            int64_t d_nhwc[4] = {KH, KW, cig, C}, d_nchw[4] = {C, cig, KH, KW};
            memcpy(dims, nhwc ? d_nhwc : d_nchw, sizeof(dims));
        }
        int wid = new_weight(c, A->name, "weight", w, ndim, dims);
        if (wid < 0) {
            rc = wid;
            goto done;
        }
        step_in(st, 1, wid);
    }
    if (A->op == NET_LAYER_NORM && A->affine) {
        int64_t D = T->out.d[T->out.ndim - 1];
        float *ga = param(c, in->anchor, "gamma", D, 0.5, 1.5);
        float *be = ga ? param(c, in->anchor, "beta", D, -0.1, 0.1) : NULL;
        if (!ga || !be) {
            free(ga);
            goto fail;
        }
        int a1 = new_weight(c, A->name, "gamma", ga, 1, &D);
        int a2 = a1 < 0 ? a1 : new_weight(c, A->name, "beta", be, 1, &D);
        if (a1 < 0 || a2 < 0) {
            if (a1 < 0)
                free(be);
            rc = KT_ENOMEM;
            goto done;
        }
        step_in(st, 1, a1);
        step_in(st, 1, a2);
    }
    for (int k = 0; k < g.n; k++) {
        epi_t *e = &g.e[k];
        if (e->op == KT_EPI_ADD) {
            step_in(st, 0, resid[k]);
        } else if (e->vec) {
            int64_t n = e->op == KT_EPI_MULTIPLY_SCALAR ? 1 : C;
            const char *role = e->op == KT_EPI_BIAS_ADD ? "bias" : "scale";
            int wid = new_weight(c, A->name, role, e->vec, 1, &n);
            e->vec = NULL;
            if (wid < 0) {
                rc = wid;
                goto done;
            }
            step_in(st, 1, wid);
        }
    }
    /* Every buffer against the kernel's placeholders: a fold bug shows here. */
    int nb = kt_codegen_num_bufs(dag);
    if (nb != st->nin + 1) {
        rc = kt_err_set(KT_EINTERNAL, "layer '%s': its kernel takes %d buffers, the plan binds %d",
                        A->name, nb, st->nin + 1);
        goto done;
    }
    for (int q = 0; q < nb; q++) {
        const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, q));
        int64_t have = q < st->nin ? (st->in[q].weight ? c->p->weights[st->in[q].id].numel
                                                       : c->p->values[st->in[q].id].numel)
                                   : c->p->values[out].numel;
        if (have != kt_stage_numel(s)) {
            rc = kt_err_set(KT_EINTERNAL, "layer '%s': buffer %d (%s) of its kernel holds %lld "
                            "values, the plan gives %lld", A->name, q, s->name,
                            (long long)kt_stage_numel(s), (long long)have);
            goto done;
        }
    }
    c->lv[in->tail] = out;
    goto done;
fail:
    rc = kt_err_code() ? kt_err_code() : kt_err_set(KT_ENOMEM, "out of memory");
done:
    epis_free(&g);
    free(W);
    free(wscale);
    kt_sbuf_free(&name);
    return rc;
}

/* ---- simple operators ------------------------------------------------------------------ */

static int binary_kind(const net_layer_t *l)
{
    if (l->op == NET_ADD)
        return 0;
    static const char *const names[] = {"add", "mul", "sub", "div"};
    for (int k = 0; k < 4; k++)
        if (l->label && strcasecmp(l->label, names[k]) == 0)
            return k;
    return -1;
}

/* A view of a 4-D [N, C, H, W] tensor that takes, along each axis, every
 * k-th element from a start (a slice, a split, a broadcast of a size-1 axis)
 * as the same view of its NHWC memory, with an NHWC output, into m; 0 when
 * r is some other view. The view's offset and steps are decomposed into
 * per-axis starts and steps and checked to stay inside each axis, so the
 * new view reads exactly the elements the old one did. */
static int view_nhwc(const kt_refop_t *r, const net_shape_t *o, kt_refop_t *m)
{
    const int64_t *din = r->din[0];
    if (r->ndim[0] != 4 || r->ondim != 4 || o->ndim != 4 ||
        memcmp(o->d, r->dout, 4 * sizeof(int64_t)))
        return 0;
    int64_t s[4] = {din[1] * din[2] * din[3], din[2] * din[3], din[3], 1};
    int64_t ms[4] = {din[2] * din[3] * din[1], 1, din[3] * din[1], din[1]};
    int64_t start[4], k[4], rem = r->ia[0];
    for (int d = 0; d < 4; d++) {
        int64_t period = r->ia[1 + KT_REFOP_MAX_DIMS + d];
        if (rem < 0 || (period > 0 && period < r->dout[d]))
            return 0;
        start[d] = rem / s[d];
        rem %= s[d];
        k[d] = r->dout[d] == 1 ? 0 : r->ia[1 + d] / s[d];
        int64_t last = start[d] + (r->dout[d] - 1) * k[d];
        if ((r->dout[d] > 1 && r->ia[1 + d] % s[d]) || start[d] >= din[d] || last < 0 ||
            last >= din[d])
            return 0;
    }
    *m = *r;
    m->ia[0] = 0;
    nhwc_order(din, m->din[0]);
    nhwc_order(r->dout, m->dout);
    for (int j = 0; j < 4; j++) {
        int d = kt_plan_nhwc_axis[j];
        m->ia[0] += start[j] * ms[j];
        m->ia[1 + j] = k[d] * ms[d];
        m->ia[1 + KT_REFOP_MAX_DIMS + j] = 0;
    }
    return 1;
}

static int plan_simple(ctx_t *c, int i)
{
    const net_layer_t *l = &c->net->layers[i];
    int x = l->nin ? c->lv[l->in[0]] : -1;
    if (l->nin && x < 0)
        return kt_err_set(KT_EINTERNAL, "layer '%s': its input is not computed", l->name);
    kt_plan_step_t *st;
    int out;
    switch (l->op) {
    case NET_RELU:
    case NET_GELU:
    case NET_SIGMOID:
    case NET_TANH:
    case NET_HARDSWISH:
    case NET_HARDSIGMOID:
    case NET_SILU:
    case NET_CLIP: {
        const kt_plan_value_t *v = &c->p->values[x];
        out = new_value(c, KT_PLAN_V_ARENA, &l->out, v->nhwc);
        if (out < 0 || !(st = new_step(c, KT_PLAN_UNARY, l->name, out)))
            return KT_ENOMEM;
        st->unary = l->op == NET_RELU    ? KT_PLAN_RELU
                    : l->op == NET_GELU  ? KT_PLAN_GELU
                    : l->op == NET_CLIP  ? KT_PLAN_CLIP
                    : l->op == NET_TANH  ? KT_PLAN_TANH
                    : l->op == NET_HARDSWISH   ? KT_PLAN_HARDSWISH
                    : l->op == NET_SILU        ? KT_PLAN_SILU
                    : l->op == NET_HARDSIGMOID ? KT_PLAN_HARDSIGMOID
                                         : KT_PLAN_SIGMOID;
        st->lo = l->lo;
        st->hi = l->hi;
        step_in(st, 0, x);
        break;
    }
    case NET_BATCH_NORM:
    case NET_BIAS_ADD:
    case NET_SCALE: {
        const kt_plan_value_t *v = &c->p->values[x];
        int axis = l->axis < 0 ? l->axis + v->ndim : l->axis;
        int scalar = l->op != NET_BATCH_NORM && l->scalar;
        int64_t C = scalar ? 1 : v->dims[axis], outer = 1, inner = 1;
        if (scalar) {
            inner = v->numel;
        } else if (v->nhwc && axis == 1) {
            outer = v->numel / C;
        } else {
            for (int d = 0; d < axis; d++)
                outer *= v->dims[d];
            for (int d = axis + 1; d < v->ndim; d++)
                inner *= v->dims[d];
        }
        float *s = NULL, *t = NULL;
        if (l->op == NET_BATCH_NORM) {
            int rc = bn_affine(c, i, C, &s, &t);
            if (rc)
                return rc;
        } else if (!(*(l->op == NET_SCALE ? &s : &t) =
                         param(c, i, "value", C, l->op == NET_SCALE ? 0.5 : -0.1,
                               l->op == NET_SCALE ? 1.5 : 0.1))) {
            return kt_err_code();
        }
        int64_t dims[1] = {C};
        int ws = s ? new_weight(c, l->name, "scale", s, 1, dims) : -1;
        int wt = t ? new_weight(c, l->name, "bias", t, 1, dims) : -1;
        out = new_value(c, KT_PLAN_V_ARENA, &l->out, c->p->values[x].nhwc);
        if ((s && ws < 0) || (t && wt < 0) || out < 0 ||
            !(st = new_step(c, KT_PLAN_CHANNEL, l->name, out)))
            return KT_ENOMEM;
        step_in(st, 0, x);
        step_in(st, 1, ws);
        step_in(st, 1, wt);
        st->outer = outer;
        st->chan = C;
        st->inner = inner;
        break;
    }
    case NET_ADD:
    case NET_ELEMWISE: {
        int b = binary_kind(l);
        if (b < 0 || l->nin != 2)
            return kt_err_set(KT_EUNSUP, "layer '%s' (%s): ktune build cannot run this "
                              "elementwise operator", l->name, l->label);
        int y = c->lv[l->in[1]];
        if (y < 0)
            return kt_err_set(KT_EINTERNAL, "layer '%s': its input is not computed", l->name);
        const kt_plan_value_t *vx = &c->p->values[x], *vy = &c->p->values[y];
        int flat = vx->ndim == vy->ndim && vx->nhwc == vy->nhwc && vx->numel == vy->numel &&
                   !memcmp(vx->dims, vy->dims, (size_t)vx->ndim * sizeof(int64_t));
        int keep = flat && vx->nhwc;
        /* A 4-D broadcast with an NHWC operand, the other NHWC too or the
         * same bytes in both layouts (a squeeze-excitation's [N, C, 1, 1]
         * scale): broadcast over both in memory order, the result NHWC. */
        int mem = !flat && l->out.ndim == 4 && vx->ndim == 4 && vy->ndim == 4 &&
                  (vx->nhwc || vy->nhwc) && (vx->nhwc || is_trivial_4d(vx)) &&
                  (vy->nhwc || is_trivial_4d(vy));
        int wout = -1;
        if (mem) {
            int64_t dx[4], dy[4], dout[4];
            nhwc_order(vx->dims, dx);
            nhwc_order(vy->dims, dy);
            nhwc_order(l->out.d, dout);
            x = alias_of(c, x, dx, 4, 0);
            y = x < 0 ? x : alias_of(c, y, dy, 4, 0);
            out = y < 0 ? y : new_value(c, KT_PLAN_V_ARENA, &l->out, 1);
            wout = out < 0 ? out : alias_of(c, out, dout, 4, 0);
            if (wout < 0 || !(st = new_step(c, KT_PLAN_BINARY, l->name, wout)))
                return KT_ENOMEM;
        } else {
            if (!flat) {
                x = need(c, x, 0, l->name);
                y = x < 0 ? x : need(c, y, 0, l->name);
                if (x < 0 || y < 0)
                    return KT_ENOMEM;
            }
            out = new_value(c, KT_PLAN_V_ARENA, &l->out, keep);
            if (out < 0 || !(st = new_step(c, KT_PLAN_BINARY, l->name, out)))
                return KT_ENOMEM;
        }
        st->binary_mul = b;
        st->chan = flat ? 0 : 1;   /* 1: broadcast over the model's shapes */
        step_in(st, 0, x);
        step_in(st, 0, y);
        break;
    }
    case NET_SHAPE:
        if (net_layer_is_reshape(l)) {
            const kt_plan_value_t *v = &c->p->values[x];
            if (v->ndim == l->out.ndim &&
                !memcmp(v->dims, l->out.d, (size_t)v->ndim * sizeof(int64_t))) {
                out = x;   /* to its own shape: the value as it is, in its layout */
                break;
            }
            x = need(c, x, 0, l->name);
            if (x < 0)
                return x;
            out = alias_of(c, x, l->out.d, l->out.ndim, 0);
            if (out < 0)
                return out;
            break;
        }
        if (l->shape_kind == NET_SHAPE_TRANSPOSE) {
            /* [N, C, H, W] held NHWC permuted to [N, H, W, C], and that
             * permuted back: the same bytes, so an alias (ConvNeXt's and
             * Swin's permutes around their layer norms and linears). */
            const kt_plan_value_t *v = &c->p->values[x];
            int four = v->ndim == 4 && l->out.ndim == 4;
            int as_nhwc = four && v->nhwc && perm_is(l, kt_plan_nhwc_axis);
            int as_nchw = four && !v->nhwc && perm_is(l, kt_plan_nhwc_memory_axis);
            if (as_nhwc || as_nchw) {
                out = alias_of(c, x, l->out.d, 4, as_nchw);
                if (out < 0)
                    return out;
                break;
            }
            out = x < 0 ? x : new_value(c, KT_PLAN_V_ARENA, &l->out, 0);
            if (out < 0 || !(st = new_step(c, KT_PLAN_TRANSPOSE, l->name, out)))
                return KT_ENOMEM;
            step_in(st, 0, x);
            for (int d = 0; d < l->ntarget; d++)
                st->perm[d] = (int)l->target[d];
            break;
        }
        if (l->shape_kind == NET_SHAPE_SHUFFLE) {
            /* In either layout, a transpose of two aliases: NHWC memory
             * [NHW, g, C/g] -> [NHW, C/g, g], NCHW [N, g, C/g, HW] ->
             * [N, C/g, g, HW]; the value keeps its layout. */
            const kt_plan_value_t *v = &c->p->values[x];
            int nhwc = v->nhwc;
            int64_t g = l->groups, C = v->dims[1], N = v->dims[0];
            int64_t rest = v->numel / (N * C), cg = C / g;
            int64_t di[4] = {N, g, cg, rest}, dn[4] = {N, cg, g, rest};
            if (nhwc) {
                di[0] = dn[0] = N * rest;
                di[1] = dn[2] = g;
                di[2] = dn[1] = cg;
            }
            out = new_value(c, KT_PLAN_V_ARENA, &l->out, nhwc);
            int a = out < 0 ? out : alias_of(c, x, di, 4 - nhwc, 0);
            int b = a < 0 ? a : alias_of(c, out, dn, 4 - nhwc, 0);
            if (b < 0 || !(st = new_step(c, KT_PLAN_TRANSPOSE, l->name, b)))
                return KT_ENOMEM;
            step_in(st, 0, a);
            static const int perm[4] = {0, 2, 1, 3};
            memcpy(st->perm, perm, sizeof(perm));
            break;
        }
        if (l->shape_kind == NET_SHAPE_CONCAT) {
            if (l->nin > KT_PLAN_MAX_IN)
                return kt_err_set(KT_EUNSUP, "layer '%s': a concat of %d inputs (at most %d)",
                                  l->name, l->nin, KT_PLAN_MAX_IN);
            /* A 4-D join runs in the layout most of its inputs are in: the
             * convolutions around DenseNet's and Inception's concats are
             * NHWC, and a join in NCHW cost a conversion of each input and
             * one of the result back. */
            int ins[KT_PLAN_MAX_IN], nh = 0;
            for (int k = 0; k < l->nin; k++)
                nh += c->lv[l->in[k]] >= 0 && c->p->values[c->lv[l->in[k]]].nhwc;
            int nhwc = l->out.ndim == 4 && 2 * nh > l->nin;
            for (int k = 0; k < l->nin; k++)
                if ((ins[k] = need(c, c->lv[l->in[k]], nhwc, l->name)) < 0)
                    return ins[k];
            out = new_value(c, KT_PLAN_V_ARENA, &l->out, nhwc);
            if (out < 0 || !(st = new_step(c, KT_PLAN_CONCAT, l->name, out)))
                return KT_ENOMEM;
            for (int k = 0; k < l->nin; k++)
                step_in(st, 0, ins[k]);
            st->axis = l->axis < 0 ? l->axis + l->out.ndim : l->axis;
            break;
        }
        return kt_err_set(KT_EUNSUP, "layer '%s' (%s): ktune build cannot run this data "
                          "movement (reshape, flatten, transpose and concat only)", l->name,
                          l->label);
    case NET_REFOP: {
        const kt_refop_t *r = l->rop;
        int ins[KT_REFOP_MAX_IN];
        kt_refop_t m;
        if (r->op == KT_REFOP_VIEW && r->nin == 1 && l->rop_src[0] == 0 &&
            c->p->values[x].nhwc && view_nhwc(r, &l->out, &m)) {
            /* a slice of an NHWC value, read and written in memory order */
            out = new_value(c, KT_PLAN_V_ARENA, &l->out, 1);
            if (out < 0 || !(st = new_step(c, KT_PLAN_REFOP, l->name, out)))
                return KT_ENOMEM;
            st->rop = m;
            step_in(st, 0, x);
            break;
        }
        for (int k = 0; k < r->nin; k++) {
            int src = l->rop_src[k];
            if (src >= 0) {
                int v = c->lv[l->in[src]];
                if (v < 0)
                    return kt_err_set(KT_EINTERNAL, "layer '%s': its input is not computed",
                                      l->name);
                if ((ins[k] = need(c, v, 0, l->name)) < 0)
                    return ins[k];
                continue;
            }
            /* A constant input: its values, or (no values carried) a draw
             * that keeps gather indices near 0. */
            int64_t nv = kt_refop_numel(r->ndim[k], r->din[k]), dims[KT_NET_MAX_DIMS];
            float *v = param(c, i, net_refop_roles[k], nv, 0.0,
                             r->op == KT_REFOP_GATHER ? 0.0 : 1.0);
            if (!v)
                return kt_err_code();
            int nd = r->ndim[k] ? r->ndim[k] : 1;
            memcpy(dims, r->din[k], sizeof(dims));
            if (!r->ndim[k])
                dims[0] = 1;
            if ((ins[k] = new_weight(c, l->name, net_refop_roles[k], v, nd, dims)) < 0)
                return ins[k];
        }
        out = new_value(c, KT_PLAN_V_ARENA, &l->out, 0);
        if (out < 0 || !(st = new_step(c, KT_PLAN_REFOP, l->name, out)))
            return KT_ENOMEM;
        st->rop = *r;
        for (int k = 0; k < r->nin; k++)
            step_in(st, l->rop_src[k] < 0, ins[k]);
        break;
    }
    default:
        return kt_err_set(KT_EUNSUP, "layer '%s' (%s): no task and no simple form", l->name,
                          l->label);
    }
    c->lv[i] = out;
    return KT_OK;
}

/* ---- arena ---------------------------------------------------------------------------- */

const char *kt_plan_kind_name(kt_plan_kind_t k)
{
    static const char *const names[] = {
        [KT_PLAN_TASK] = "task",           [KT_PLAN_LAYOUT] = "layout",
        [KT_PLAN_COPY] = "copy",           [KT_PLAN_UNARY] = "unary",
        [KT_PLAN_CHANNEL] = "channel",     [KT_PLAN_BINARY] = "binary",
        [KT_PLAN_TRANSPOSE] = "transpose", [KT_PLAN_CONCAT] = "concat",
        [KT_PLAN_REFOP] = "refop",
    };
    return (unsigned)k < sizeof(names) / sizeof(names[0]) && names[k] ? names[k] : "?";
}

int kt_net_plan_root(const kt_net_plan_t *p, int v)
{
    while (v >= 0 && p->values[v].kind == KT_PLAN_V_ALIAS)
        v = p->values[v].alias;
    return v;
}

typedef struct {
    int v;
    int64_t size, first, last;
} live_t;

static int by_size(const void *a, const void *b)
{
    const live_t *x = a, *y = b;
    return x->size != y->size ? (x->size < y->size ? 1 : -1) : x->v - y->v;
}

/* Greedy by size: each value goes to the lowest offset free during its life. */
static int plan_arena(kt_net_plan_t *p)
{
    live_t *lv = calloc((size_t)p->nvalues + 1, sizeof(*lv));
    int64_t (*placed)[2] = calloc((size_t)p->nvalues + 1, sizeof(*placed));
    if (!lv || !placed) {
        free(lv);
        free(placed);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (int v = 0; v < p->nvalues; v++)
        lv[v] = (live_t){.v = v, .first = -1, .last = -1};
    for (int k = 0; k < p->nsteps; k++) {
        const kt_plan_step_t *s = &p->steps[k];
        int r = kt_net_plan_root(p, s->out);
        if (lv[r].first < 0)
            lv[r].first = k;
        lv[r].last = k;
        for (int q = 0; q < s->nin; q++)
            if (!s->in[q].weight && s->in[q].id >= 0)
                lv[kt_net_plan_root(p, s->in[q].id)].last = k;
    }
    int n = 0;
    p->naive_bytes = 0;
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == KT_PLAN_V_ARENA && lv[v].first >= 0) {
            lv[v].size = (p->values[v].numel * 4 + ALIGN - 1) / ALIGN * ALIGN;
            p->naive_bytes += lv[v].size;
            lv[n++] = lv[v];
        }
    qsort(lv, (size_t)n, sizeof(*lv), by_size);
    p->arena_bytes = 0;
    for (int i = 0; i < n; i++) {
        int64_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < i; j++)
                if (lv[j].first <= lv[i].last && lv[i].first <= lv[j].last &&
                    off < placed[j][0] + placed[j][1] && placed[j][0] < off + lv[i].size) {
                    off = placed[j][0] + placed[j][1];
                    moved = 1;
                }
        }
        placed[i][0] = off;
        placed[i][1] = lv[i].size;
        p->values[lv[i].v].offset = off;
        if (off + lv[i].size > p->arena_bytes)
            p->arena_bytes = off + lv[i].size;
    }
    free(lv);
    free(placed);
    return KT_OK;
}

/* ---- public ------------------------------------------------------------------------------ */

void kt_net_plan_free(kt_net_plan_t *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nsteps; i++)
        free(p->steps[i].name);
    for (int i = 0; i < p->nweights; i++) {
        free(p->weights[i].name);
        free(p->weights[i].data);
    }
    for (int k = 0; k < p->ninputs; k++)
        free(p->input_names[k]);
    free(p->steps);
    free(p->weights);
    free(p->values);
    free(p);
}

/* The message of the issue extraction recorded for layer `name`, or NULL. */
static const char *issue_of(const kt_net_tasks_t *t, const char *name)
{
    for (int k = 0; k < t->nissues; k++)
        if (t->issues[k].kind == KT_NET_UNSUPPORTED && strcmp(t->issues[k].layer, name) == 0)
            return t->issues[k].msg;
    return NULL;
}

/* Whether everything layer i (with its fused layers) reads is computed. */
static int ready(const ctx_t *c, int i)
{
    const net_layer_t *l = &c->net->layers[i];
    int inst = c->tasks->layer_instance[i];
    if (inst >= 0) {
        const kt_net_instance_t *in = &c->tasks->instances[inst];
        if (in->anchor != i)
            return 1;   /* planned with its anchor */
        for (int k = 0; k < l->nin; k++)
            if (c->lv[l->in[k]] < 0)
                return 0;
        for (int k = 0; k < in->nfused; k++) {
            const net_layer_t *f = &c->net->layers[in->fused[k]];
            int prev = k ? in->fused[k - 1] : in->anchor;
            for (int q = 0; q < f->nin; q++)
                if (f->in[q] != prev && c->lv[f->in[q]] < 0)
                    return 0;
        }
        return 1;
    }
    if (l->op == NET_UNSUPPORTED || l->blocked)
        return 1;   /* reported when planned */
    for (int k = 0; k < l->nin; k++)
        if (c->lv[l->in[k]] < 0)
            return 0;
    return 1;
}

/* A constant the model uses as an activation (a class token, a position
 * table, a mask): its values are a weight, copied into the arena by an
 * identity call so every step reads it as a value. */
static int plan_constant(ctx_t *c, int i)
{
    const net_layer_t *l = &c->net->layers[i];
    int64_t n = net_shape_numel(&l->out);
    float *v = param(c, i, "value", n, -0.1, 0.1);
    if (!v)
        return kt_err_code();
    int w = new_weight(c, l->name, "value", v, l->out.ndim, l->out.d);
    if (w < 0)
        return w;
    kt_plan_step_t *st;
    int out = new_value(c, KT_PLAN_V_ARENA, &l->out, 0);
    if (out < 0 || !(st = new_step(c, KT_PLAN_REFOP, l->name, out)))
        return KT_ENOMEM;
    st->rop = (kt_refop_t){.op = KT_REFOP_UNARY, .nin = 1, .ndim = {l->out.ndim},
                           .ondim = l->out.ndim, .ia = {KT_RU_IDENTITY}};
    memcpy(st->rop.din[0], l->out.d, sizeof(st->rop.din[0]));
    memcpy(st->rop.dout, l->out.d, sizeof(st->rop.dout));
    step_in(st, 1, w);
    c->lv[i] = out;
    return KT_OK;
}

static int plan_layer(ctx_t *c, int i)
{
    const kt_net_t *net = c->net;
    const kt_net_tasks_t *tasks = c->tasks;
    const net_layer_t *l = &net->layers[i];
    int inst = tasks->layer_instance[i];
    if (l->blocked || l->op == NET_UNSUPPORTED) {
        if (l->op == NET_UNSUPPORTED && l->secondary)
            return KT_OK;   /* an output nobody reads */
        return kt_err_set(KT_EUNSUP, "layer '%s' (%s) is not supported: %s", l->name, l->label,
                          l->reason ? l->reason : "its input shapes are unknown");
    }
    if (l->op == NET_INPUT && l->label && strcmp(l->label, "constant") == 0)
        return plan_constant(c, i);
    if (l->op == NET_INPUT) {
        kt_net_plan_t *p = c->p;
        if (p->ninputs == KT_PLAN_MAX_INPUTS)
            return kt_err_set(KT_EUNSUP, "the network has more than %d inputs",
                              KT_PLAN_MAX_INPUTS);
        int v = c->lv[i] = new_value(c, KT_PLAN_V_INPUT, &l->out, 0);
        if (v < 0)
            return v;
        if (!(p->input_names[p->ninputs] = strdup(l->name)))
            return kt_err_set(KT_ENOMEM, "out of memory");
        p->values[v].slot = p->ninputs;
        p->input_int[p->ninputs] = l->int_input;
        p->inputs[p->ninputs++] = v;
        if (p->input < 0)
            p->input = v;
        return KT_OK;
    }
    if (inst >= 0)
        return tasks->instances[inst].anchor == i ? plan_instance(c, &tasks->instances[inst])
                                                  : KT_OK;
    if (l->op == NET_CONV2D || l->op == NET_DENSE || l->op == NET_MATMUL || l->op == NET_POOL ||
        l->op == NET_GLOBAL_POOL || l->op == NET_SOFTMAX || l->op == NET_LAYER_NORM) {
        const char *why = issue_of(tasks, l->name);
        return kt_err_set(KT_EUNSUP, "layer '%s' (%s) has no task%s%s", l->name, l->label,
                          why ? ": " : "", why ? why : "");
    }
    return plan_simple(c, i);
}

kt_net_plan_t *kt_net_plan(const kt_net_t *net, const kt_net_tasks_t *tasks,
                           kt_net_layout_t layout, uint64_t seed)
{
    if (!net || !tasks || !net->is_output || tasks->nlayers != net->n) {
        kt_err_set(KT_EINVAL, "plan: the tasks were not extracted from this network");
        return NULL;
    }
    ctx_t c = {.net = net, .tasks = tasks, .layout = layout, .seed = seed,
               .random = !kt_net_has_params(net)};
    c.p = calloc(1, sizeof(*c.p));
    c.lv = malloc(((size_t)net->n + 1) * sizeof(int));
    c.sigma = calloc((size_t)net->n + 1, sizeof(float *));
    c.nsigma = calloc((size_t)net->n + 1, sizeof(int64_t));
    int rc = KT_OK;
    if (!c.p || !c.lv || !c.sigma || !c.nsigma) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto done;
    }
    c.p->params_random = c.random;
    c.p->input = c.p->output = -1;
    int nout = 0, out_layer = -1;
    for (int i = 0; i < net->n; i++) {
        c.lv[i] = -1;
        if (net->is_output[i]) {
            nout++;
            out_layer = i;
        }
    }
    if (nout != 1) {
        rc = kt_err_set(KT_EUNSUP, "the network has %d outputs; ktune build runs networks with "
                        "one input and one output", nout);
        goto done;
    }
    /* Layers in order, each as soon as its inputs are computed: a residual
     * fused into an earlier convolution may come later in layer order. */
    char *done = calloc((size_t)net->n + 1, 1);
    if (!done)
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    for (int progress = 1; rc == KT_OK && progress;) {
        progress = 0;
        for (int i = 0; i < net->n && rc == KT_OK; i++) {
            if (done[i] || !ready(&c, i))
                continue;
            rc = plan_layer(&c, i);
            done[i] = 1;
            progress = 1;
        }
    }
    for (int i = 0; i < net->n && rc == KT_OK; i++)
        if (!done[i] && !(net->layers[i].op == NET_UNSUPPORTED && net->layers[i].secondary))
            rc = kt_err_set(KT_EINTERNAL, "layer '%s': its inputs are never computed",
                            net->layers[i].name);
    free(done);
    if (rc == KT_OK && c.p->input < 0)
        rc = kt_err_set(KT_EUNSUP, "the network has no input");
    if (rc == KT_OK) {
        int v = need(&c, c.lv[out_layer], 0, net->layers[out_layer].name);
        int o = v < 0 ? v : new_value(&c, KT_PLAN_V_OUTPUT, &net->layers[out_layer].out, 0);
        kt_plan_step_t *st = o < 0 ? NULL : new_step(&c, KT_PLAN_COPY, "output", o);
        if (!st) {
            rc = kt_err_code() ? kt_err_code() : KT_ENOMEM;
        } else {
            step_in(st, 0, v);
            c.p->output = o;
            rc = plan_arena(c.p);
        }
    }
done:
    for (int i = 0; c.sigma && i < net->n; i++)
        free(c.sigma[i]);
    free(c.sigma);
    free(c.nsigma);
    free(c.lv);
    free(c.as_nhwc);
    if (rc) {
        kt_net_plan_free(c.p);
        return NULL;
    }
    return c.p;
}

/* ---- alternatives --------------------------------------------------------------------- */

/* Switch one TASK step from the direct conv2d to its Winograd task: its
 * weight [3, 3, CI, CO] becomes [alpha, alpha, CI, CO] (G g G^T). */
static int use_winograd(kt_net_plan_t *p, kt_plan_step_t *s, const kt_net_task_t *alt, int task)
{
    const json_t *w = alt->workload;
    int64_t tile = json_integer_value(json_object_get(w, "tile_size"));
    int64_t CI = json_integer_value(json_object_get(w, "CI"));
    int64_t CO = json_integer_value(json_object_get(w, "CO"));
    if (s->nin < 2 || !s->in[1].weight || s->in[1].id < 0 || s->in[1].id >= p->nweights)
        return kt_err_set(KT_EINTERNAL, "step '%s': no weight to transform", s->name);
    kt_plan_weight_t *wt = &p->weights[s->in[1].id];
    if (wt->ndim != 4 || wt->dims[0] != 3 || wt->dims[1] != 3 || wt->dims[2] != CI ||
        wt->dims[3] != CO)
        return kt_err_set(KT_EINTERNAL, "step '%s': weight '%s' is not [3, 3, %lld, %lld]",
                          s->name, wt->name, (long long)CI, (long long)CO);
    const int64_t alpha = tile + 2, n = alpha * alpha * CI * CO;
    float *out = malloc((size_t)n * sizeof(float));
    if (!out)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (kt_ops_winograd_weight(tile, CI, CO, wt->data, out) != 0) {
        free(out);
        return kt_err_code();
    }
    free(wt->data);
    wt->data = out;
    wt->dims[0] = wt->dims[1] = alpha;
    wt->numel = n;
    s->task = task;
    return KT_OK;
}

int kt_net_plan_use_alternatives(kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                                 const double *ms, int *used)
{
    if (!p || !tasks || !ms)
        return kt_err_set(KT_EINVAL, "plan alternatives: no plan, tasks or costs");
    for (int j = 0; j < tasks->ntasks; j++) {
        if (used)
            used[j] = tasks->tasks[j].alt_of < 0;
        int i = tasks->tasks[j].alt_of;
        if (i < 0 || i >= tasks->ntasks || !(ms[j] > 0) || (ms[i] > 0 && ms[j] >= ms[i]))
            continue;
        if (strcmp(kt_workload_op(tasks->tasks[j].wl), "conv2d_winograd_nhwc") != 0)
            return kt_err_set(KT_EINVAL, "task %d: unknown kind of alternative '%s'", j,
                              kt_workload_op(tasks->tasks[j].wl));
        for (int k = 0; k < p->nsteps; k++) {
            kt_plan_step_t *s = &p->steps[k];
            if (s->kind != KT_PLAN_TASK || s->task != i)
                continue;
            int rc = use_winograd(p, s, &tasks->tasks[j], j);
            if (rc)
                return rc;
        }
        if (used) {
            used[j] = 1;
            used[i] = 0;
        }
    }
    return KT_OK;
}
