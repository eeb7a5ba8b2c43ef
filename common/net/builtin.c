/* The built-in model zoo: layer graphs of well-known networks (net.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_int.h"
#include "util/err.h"

static const char *const builtin_names[] = {
    "resnet-18", "resnet-34", "resnet-50", "mobilenet-v2", "bert-base", "vgg-16", NULL,
};

const char *const *kt_net_builtin_names(void) { return builtin_names; }

/* A builder with a sticky error: after the first failure every call returns
 * -1 and does nothing, so network definitions read as straight-line code. */
typedef struct {
    kt_net_t *net;
    int rc;
} bld_t;

static int add(bld_t *b, net_op_t op, const char *label, const int *in, int nin,
               net_layer_t **out, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static int add(bld_t *b, net_op_t op, const char *label, const int *in, int nin,
               net_layer_t **out, const char *fmt, ...)
{
    *out = NULL;
    if (b->rc < 0)
        return -1;
    for (int k = 0; k < nin; k++)
        if (in[k] < 0)
            return -1;
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    int i = net_layer_add(b->net, name, op, label, in, nin);
    if (i < 0) {
        b->rc = i;
        return -1;
    }
    *out = net_layer(b->net, i);
    return i;
}

static int fin(bld_t *b, int i)
{
    if (i < 0 || b->rc < 0)
        return -1;
    int rc = net_layer_finish(b->net, i);
    if (rc < 0) {
        b->rc = kt_err_prefix("built-in layer '%s'", net_layer(b->net, i)->name);
        return -1;
    }
    return i;
}

static int b_input(bld_t *b, const char *name, int ndim, const int64_t *dims)
{
    net_layer_t *l;
    int i = add(b, NET_INPUT, NULL, NULL, 0, &l, "%s", name);
    if (l) {
        l->ntarget = ndim;
        memcpy(l->target, dims, (size_t)ndim * sizeof(int64_t));
    }
    return fin(b, i);
}

static int b_conv(bld_t *b, int x, int64_t co, int64_t k, int64_t s, int64_t p, int64_t groups,
                  int bias, const char *name)
{
    net_layer_t *l;
    int i = add(b, NET_CONV2D, NULL, &x, 1, &l, "%s", name);
    if (l) {
        l->channels = co;
        l->kernel[0] = l->kernel[1] = k;
        l->stride[0] = l->stride[1] = s;
        l->pad[0] = l->pad[1] = l->pad[2] = l->pad[3] = p;
        l->groups = groups;
        l->bias = bias;
    }
    return fin(b, i);
}

static int b_simple(bld_t *b, net_op_t op, const char *label, int x, const char *name)
{
    net_layer_t *l;
    return fin(b, add(b, op, label, &x, 1, &l, "%s", name));
}

/* relu6: clip to [0, 6]. */
static int b_relu6(bld_t *b, int x, const char *name)
{
    net_layer_t *l;
    int i = add(b, NET_CLIP, "clip", &x, 1, &l, "%s", name);
    if (l) {
        l->lo = 0.0;
        l->hi = 6.0;
    }
    return fin(b, i);
}

static int b_add(bld_t *b, int x, int y, const char *name)
{
    net_layer_t *l;
    int in[2] = {x, y};
    return fin(b, add(b, NET_ADD, NULL, in, 2, &l, "%s", name));
}

static int b_pool(bld_t *b, int x, int max, int64_t k, int64_t s, int64_t p, const char *name)
{
    net_layer_t *l;
    int i = add(b, NET_POOL, max ? "max_pool" : "avg_pool", &x, 1, &l, "%s", name);
    if (l) {
        l->pool_max = max;
        l->kernel[0] = l->kernel[1] = k;
        l->stride[0] = l->stride[1] = s;
        l->pad[0] = l->pad[1] = l->pad[2] = l->pad[3] = p;
    }
    return fin(b, i);
}

static int b_dense(bld_t *b, int x, int64_t units, int bias, const char *name)
{
    net_layer_t *l;
    int i = add(b, NET_DENSE, NULL, &x, 1, &l, "%s", name);
    if (l) {
        l->channels = units;
        l->bias = bias;
    }
    return fin(b, i);
}

static int b_shape(bld_t *b, int x, net_shape_kind_t kind, int n, const int64_t *t, int axis,
                   const char *label, const char *name)
{
    net_layer_t *l;
    int i = add(b, NET_SHAPE, label, &x, 1, &l, "%s", name);
    if (l) {
        l->shape_kind = kind;
        l->ntarget = n;
        if (n > 0)
            memcpy(l->target, t, (size_t)n * sizeof(int64_t));
        l->axis = axis;
    }
    return fin(b, i);
}

static kt_net_t *finish_net(bld_t *b)
{
    if (b->rc == 0)
        b->rc = net_seal(b->net);
    if (b->rc < 0) {
        kt_net_free(b->net);
        return NULL;
    }
    return b->net;
}

/* ---- ResNet ------------------------------------------------------------------
 * As TVM's relay.testing.resnet (the pre-activation "v2" network of "Identity
 * Mappings in Deep Residual Networks", which seed 004 tunes): a batch norm on
 * the input, conv0 7x7/2 + bn + relu, max pool 3x3/2, four stages of residual
 * units whose bn + relu come before each convolution, a first unit per stage
 * with a 1x1 projection shortcut fed by the unit's first activation, then
 * bn + relu, global average pool, flatten, dense + bias, softmax. The
 * residual add lists the main branch first, as relay.add(conv, shortcut). */

static int resnet_unit(bld_t *b, int data, int64_t nf, int64_t stride, int dim_match,
                       int bottleneck, const char *u)
{
    char n[96];
    snprintf(n, sizeof(n), "%s_bn1", u);
    int bn1 = b_simple(b, NET_BATCH_NORM, NULL, data, n);
    snprintf(n, sizeof(n), "%s_relu1", u);
    int act1 = b_simple(b, NET_RELU, NULL, bn1, n);
    int body;
    if (bottleneck) {
        snprintf(n, sizeof(n), "%s_conv1", u);
        int c1 = b_conv(b, act1, nf / 4, 1, stride, 0, 1, 0, n);
        snprintf(n, sizeof(n), "%s_bn2", u);
        int bn2 = b_simple(b, NET_BATCH_NORM, NULL, c1, n);
        snprintf(n, sizeof(n), "%s_relu2", u);
        int a2 = b_simple(b, NET_RELU, NULL, bn2, n);
        snprintf(n, sizeof(n), "%s_conv2", u);
        int c2 = b_conv(b, a2, nf / 4, 3, 1, 1, 1, 0, n);
        snprintf(n, sizeof(n), "%s_bn3", u);
        int bn3 = b_simple(b, NET_BATCH_NORM, NULL, c2, n);
        snprintf(n, sizeof(n), "%s_relu3", u);
        int a3 = b_simple(b, NET_RELU, NULL, bn3, n);
        snprintf(n, sizeof(n), "%s_conv3", u);
        body = b_conv(b, a3, nf, 1, 1, 0, 1, 0, n);
    } else {
        snprintf(n, sizeof(n), "%s_conv1", u);
        int c1 = b_conv(b, act1, nf, 3, stride, 1, 1, 0, n);
        snprintf(n, sizeof(n), "%s_bn2", u);
        int bn2 = b_simple(b, NET_BATCH_NORM, NULL, c1, n);
        snprintf(n, sizeof(n), "%s_relu2", u);
        int a2 = b_simple(b, NET_RELU, NULL, bn2, n);
        snprintf(n, sizeof(n), "%s_conv2", u);
        body = b_conv(b, a2, nf, 3, 1, 1, 1, 0, n);
    }
    int shortcut = data;
    if (!dim_match) {
        snprintf(n, sizeof(n), "%s_sc", u);
        shortcut = b_conv(b, act1, nf, 1, stride, 0, 1, 0, n);
    }
    snprintf(n, sizeof(n), "%s_add", u);
    return b_add(b, body, shortcut, n);
}

static kt_net_t *resnet(int layers, int64_t batch)
{
    static const int units18[4] = {2, 2, 2, 2}, units34[4] = {3, 4, 6, 3};
    static const int64_t f_basic[5] = {64, 64, 128, 256, 512},
                         f_bottle[5] = {64, 256, 512, 1024, 2048};
    const int *units = layers == 18 ? units18 : units34;
    const int bottleneck = layers >= 50;
    const int64_t *filters = bottleneck ? f_bottle : f_basic;
    char name[32];
    snprintf(name, sizeof(name), "resnet-%d", layers);
    bld_t b = {net_new(name), 0};
    if (!b.net)
        return NULL;
    int64_t shape[4] = {batch, 3, 224, 224};
    int x = b_input(&b, "data", 4, shape);
    x = b_simple(&b, NET_BATCH_NORM, NULL, x, "bn_data");
    x = b_conv(&b, x, filters[0], 7, 2, 3, 1, 0, "conv0");
    x = b_simple(&b, NET_BATCH_NORM, NULL, x, "bn0");
    x = b_simple(&b, NET_RELU, NULL, x, "relu0");
    x = b_pool(&b, x, 1, 3, 2, 1, "pool0");
    for (int s = 0; s < 4; s++)
        for (int u = 0; u < units[s]; u++) {
            char un[32];
            snprintf(un, sizeof(un), "stage%d_unit%d", s + 1, u + 1);
            x = resnet_unit(&b, x, filters[s + 1], u == 0 && s > 0 ? 2 : 1, u > 0, bottleneck,
                            un);
        }
    x = b_simple(&b, NET_BATCH_NORM, NULL, x, "bn1");
    x = b_simple(&b, NET_RELU, NULL, x, "relu1");
    x = b_simple(&b, NET_GLOBAL_POOL, NULL, x, "pool1");
    x = b_shape(&b, x, NET_SHAPE_FLATTEN, 0, NULL, 1, "flatten", "flatten");
    x = b_dense(&b, x, 1000, 1, "fc1");
    b_simple(&b, NET_SOFTMAX, NULL, x, "softmax");
    return finish_net(&b);
}

/* ---- MobileNet-v2 -------------------------------------------------------------
 * As torchvision's mobilenet_v2 (width 1.0, 224x224): conv 3x3/2 to 32 + bn +
 * relu6, the inverted-residual table below (expand 1x1 + bn + relu6 when
 * t > 1, depthwise 3x3 + bn + relu6, project 1x1 + bn, residual add when the
 * stride is 1 and the channels match), conv 1x1 to 1280 + bn + relu6, global
 * average pool, flatten, dense 1000 + bias, softmax (as the relay.testing
 * networks end). relu6 is clip 0..6. */

static kt_net_t *mobilenet_v2(int64_t batch)
{
    static const int cfg[7][4] = {   /* expansion t, channels c, repeats n, stride s */
        {1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
        {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
    };
    bld_t b = {net_new("mobilenet-v2"), 0};
    if (!b.net)
        return NULL;
    int64_t shape[4] = {batch, 3, 224, 224};
    char n[64];
    int x = b_input(&b, "data", 4, shape);
    x = b_conv(&b, x, 32, 3, 2, 1, 1, 0, "conv0");
    x = b_simple(&b, NET_BATCH_NORM, NULL, x, "conv0_bn");
    x = b_relu6(&b, x, "conv0_relu6");
    int64_t cin = 32;
    int blk = 0;
    for (int g = 0; g < 7; g++)
        for (int r = 0; r < cfg[g][2]; r++, blk++) {
            int64_t t = cfg[g][0], c = cfg[g][1], s = r == 0 ? cfg[g][3] : 1, hid = cin * t;
            int in = x;
            if (t != 1) {
                snprintf(n, sizeof(n), "block%d_expand", blk);
                x = b_conv(&b, x, hid, 1, 1, 0, 1, 0, n);
                snprintf(n, sizeof(n), "block%d_expand_bn", blk);
                x = b_simple(&b, NET_BATCH_NORM, NULL, x, n);
                snprintf(n, sizeof(n), "block%d_expand_relu6", blk);
                x = b_relu6(&b, x, n);
            }
            snprintf(n, sizeof(n), "block%d_dw", blk);
            x = b_conv(&b, x, hid, 3, s, 1, hid, 0, n);
            snprintf(n, sizeof(n), "block%d_dw_bn", blk);
            x = b_simple(&b, NET_BATCH_NORM, NULL, x, n);
            snprintf(n, sizeof(n), "block%d_dw_relu6", blk);
            x = b_relu6(&b, x, n);
            snprintf(n, sizeof(n), "block%d_project", blk);
            x = b_conv(&b, x, c, 1, 1, 0, 1, 0, n);
            snprintf(n, sizeof(n), "block%d_project_bn", blk);
            x = b_simple(&b, NET_BATCH_NORM, NULL, x, n);
            if (s == 1 && cin == c) {
                snprintf(n, sizeof(n), "block%d_add", blk);
                x = b_add(&b, x, in, n);
            }
            cin = c;
        }
    x = b_conv(&b, x, 1280, 1, 1, 0, 1, 0, "conv_last");
    x = b_simple(&b, NET_BATCH_NORM, NULL, x, "conv_last_bn");
    x = b_relu6(&b, x, "conv_last_relu6");
    x = b_simple(&b, NET_GLOBAL_POOL, NULL, x, "pool");
    x = b_shape(&b, x, NET_SHAPE_FLATTEN, 0, NULL, 1, "flatten", "flatten");
    x = b_dense(&b, x, 1000, 1, "fc");
    b_simple(&b, NET_SOFTMAX, NULL, x, "softmax");
    return finish_net(&b);
}

/* ---- VGG-16 -------------------------------------------------------------------
 * As relay.testing.vgg (no batch norm): five blocks of conv 3x3 + bias + relu
 * (2, 2, 3, 3, 3 layers of 64, 128, 256, 512, 512 channels) each followed by
 * max pool 2x2/2, flatten, dense 4096 + bias + relu twice, dense 1000 + bias,
 * softmax. */

static kt_net_t *vgg16(int64_t batch)
{
    static const int reps[5] = {2, 2, 3, 3, 3};
    static const int64_t ch[5] = {64, 128, 256, 512, 512};
    bld_t b = {net_new("vgg-16"), 0};
    if (!b.net)
        return NULL;
    int64_t shape[4] = {batch, 3, 224, 224};
    char n[64];
    int x = b_input(&b, "data", 4, shape);
    for (int g = 0; g < 5; g++) {
        for (int r = 0; r < reps[g]; r++) {
            snprintf(n, sizeof(n), "conv%d_%d", g + 1, r + 1);
            x = b_conv(&b, x, ch[g], 3, 1, 1, 1, 1, n);
            snprintf(n, sizeof(n), "relu%d_%d", g + 1, r + 1);
            x = b_simple(&b, NET_RELU, NULL, x, n);
        }
        snprintf(n, sizeof(n), "pool%d", g + 1);
        x = b_pool(&b, x, 1, 2, 2, 0, n);
    }
    x = b_shape(&b, x, NET_SHAPE_FLATTEN, 0, NULL, 1, "flatten", "flatten");
    x = b_dense(&b, x, 4096, 1, "fc6");
    x = b_simple(&b, NET_RELU, NULL, x, "relu6");
    x = b_dense(&b, x, 4096, 1, "fc7");
    x = b_simple(&b, NET_RELU, NULL, x, "relu7");
    x = b_dense(&b, x, 1000, 1, "fc8");
    b_simple(&b, NET_SOFTMAX, NULL, x, "softmax");
    return finish_net(&b);
}

/* ---- BERT-base ------------------------------------------------------------------
 * The encoder of BERT-base (hidden 768, 12 layers, 12 heads of 64, FFN 3072),
 * from the embedding sum (its gathers are not tensor programs ktune tunes) to
 * the last hidden state: embedding layer norm, then per layer Q, K, V dense +
 * bias (the 1/sqrt(64) score scale folded into Q's weights, exact for a
 * constant), reshape and transpose to heads, scores = Q K^T (batch_matmul),
 * softmax (no attention mask), context = P V, transpose back, output dense +
 * bias + residual add, layer norm, FFN dense + bias + gelu, dense + bias +
 * residual add, layer norm. No pooler. */

static kt_net_t *bert_base(int64_t batch, int64_t seq)
{
    const int64_t H = 768, heads = 12, dh = 64, ffn = 3072;
    bld_t b = {net_new("bert-base"), 0};
    if (!b.net)
        return NULL;
    int64_t shape[3] = {batch, seq, H};
    char n[64];
    int x = b_input(&b, "embeddings", 3, shape);
    x = b_simple(&b, NET_LAYER_NORM, NULL, x, "embeddings_ln");
    for (int L = 0; L < 12; L++) {
        int qkv[3];
        static const char *const nm[3] = {"query", "key", "value"};
        /* Q and V to [B, heads, seq, 64]; K to [B, heads, 64, seq] (K^T). */
        static const int64_t perm_qv[4] = {0, 2, 1, 3}, perm_k[4] = {0, 2, 3, 1};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof(n), "layer%d_%s", L, nm[k]);
            int d = b_dense(&b, x, H, 1, n);
            int64_t split[4] = {batch, seq, heads, dh};
            snprintf(n, sizeof(n), "layer%d_%s_split", L, nm[k]);
            d = b_shape(&b, d, NET_SHAPE_RESHAPE, 4, split, 0, "reshape", n);
            snprintf(n, sizeof(n), "layer%d_%s_heads", L, nm[k]);
            qkv[k] = b_shape(&b, d, NET_SHAPE_TRANSPOSE, 4, k == 1 ? perm_k : perm_qv, 0,
                             "transpose", n);
        }
        net_layer_t *l;
        int in2[2] = {qkv[0], qkv[1]};
        int sc = fin(&b, add(&b, NET_MATMUL, NULL, in2, 2, &l, "layer%d_scores", L));
        snprintf(n, sizeof(n), "layer%d_softmax", L);
        int p = b_simple(&b, NET_SOFTMAX, NULL, sc, n);
        int in3[2] = {p, qkv[2]};
        int ctx = fin(&b, add(&b, NET_MATMUL, NULL, in3, 2, &l, "layer%d_context", L));
        snprintf(n, sizeof(n), "layer%d_context_merge", L);
        ctx = b_shape(&b, ctx, NET_SHAPE_TRANSPOSE, 4, perm_qv, 0, "transpose", n);
        snprintf(n, sizeof(n), "layer%d_context_flat", L);
        ctx = b_shape(&b, ctx, NET_SHAPE_RESHAPE, 3, shape, 0, "reshape", n);
        snprintf(n, sizeof(n), "layer%d_attn_out", L);
        int o = b_dense(&b, ctx, H, 1, n);
        snprintf(n, sizeof(n), "layer%d_attn_residual", L);
        o = b_add(&b, o, x, n);
        snprintf(n, sizeof(n), "layer%d_attn_ln", L);
        int a = b_simple(&b, NET_LAYER_NORM, NULL, o, n);
        snprintf(n, sizeof(n), "layer%d_ffn_in", L);
        int f = b_dense(&b, a, ffn, 1, n);
        snprintf(n, sizeof(n), "layer%d_ffn_gelu", L);
        f = b_simple(&b, NET_GELU, NULL, f, n);
        snprintf(n, sizeof(n), "layer%d_ffn_out", L);
        f = b_dense(&b, f, H, 1, n);
        snprintf(n, sizeof(n), "layer%d_ffn_residual", L);
        f = b_add(&b, f, a, n);
        snprintf(n, sizeof(n), "layer%d_ffn_ln", L);
        x = b_simple(&b, NET_LAYER_NORM, NULL, f, n);
    }
    return finish_net(&b);
}

kt_net_t *kt_net_builtin(const char *name, int batch, int seq_len)
{
    if (batch < 1 || batch > 65536) {
        kt_err_set(KT_EINVAL, "batch must be in 1..65536 (got %d)", batch);
        return NULL;
    }
    if (seq_len == 0)
        seq_len = 128;
    if (!name)
        name = "";
    if (strcmp(name, "bert-base") == 0) {
        if (seq_len < 1 || seq_len > 65536) {
            kt_err_set(KT_EINVAL, "sequence length must be in 1..65536 (got %d)", seq_len);
            return NULL;
        }
        return bert_base(batch, seq_len);
    }
    if (strcmp(name, "resnet-18") == 0)
        return resnet(18, batch);
    if (strcmp(name, "resnet-34") == 0)
        return resnet(34, batch);
    if (strcmp(name, "resnet-50") == 0)
        return resnet(50, batch);
    if (strcmp(name, "mobilenet-v2") == 0)
        return mobilenet_v2(batch);
    if (strcmp(name, "vgg-16") == 0)
        return vgg16(batch);
    kt_err_set(KT_EINVAL, "unknown network '%s' (built-in: resnet-18, resnet-34, resnet-50, "
               "mobilenet-v2, bert-base, vgg-16)", name);
    return NULL;
}
