/* Suite "net": built-in networks, task extraction (fusion, dedup, weights),
 * network files and ONNX import. Expected task lists are computed here from
 * each architecture's definition (layer by layer, with the fusion rules of
 * net.h), never copied from the extractor's output. ONNX models come from
 * tests/net/make_models.py (PyTorch export and onnx.helper); python3-torch
 * and python3-onnx are test dependencies (deploy/install-deps.sh), so those
 * tests fail, with make_models.py's output, when a model was not made. */
#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/net.h"
#include "net/plan.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/util.h"

/* ---- expected task lists ------------------------------------------------------ */

#define MAX_EXP 128

typedef struct {
    char *key[MAX_EXP];
    int weight[MAX_EXP];
    int n;
} expect_t;

/* Add one appearance of the workload in JSON text (printf-style). */
static void exp_add(expect_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void exp_add(expect_t *e, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    kt_workload_t *w = kt_workload_parse(buf);
    ck_assert_msg(w != NULL, "expected workload %s: %s", buf, kt_err_msg());
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->key[i], kt_workload_key(w)) == 0) {
            e->weight[i]++;
            kt_workload_free(w);
            return;
        }
    ck_assert_int_lt(e->n, MAX_EXP);
    e->key[e->n] = strdup(kt_workload_key(w));
    e->weight[e->n++] = 1;
    kt_workload_free(w);
}

static void exp_free(expect_t *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->key[i]);
}

/* epi: comma-separated epilogue names, "" for none. */
static void exp_conv(expect_t *e, const char *layout, int N, int H, int CI, int CO, int K, int S,
                     int P, const char *epi)
{
    char list[128] = "";
    size_t len = 0;
    const char *p = epi;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s\"%.*s\"", len ? "," : "",
                                (int)n, p);
        p += n + (c ? 1 : 0);
    }
    exp_add(e, "{\"op\":\"conv2d_%s\",\"N\":%d,\"H\":%d,\"W\":%d,\"CI\":%d,\"CO\":%d,\"KH\":%d,"
            "\"KW\":%d,\"stride\":[%d,%d],\"padding\":[%d,%d],\"epilogue\":[%s]}",
            layout, N, H, H, CI, CO, K, K, S, S, P, P, list);
}

static void exp_dw(expect_t *e, const char *layout, int N, int H, int C, int S, const char *epi)
{
    exp_add(e, "{\"op\":\"depthwise_conv2d_%s\",\"N\":%d,\"H\":%d,\"W\":%d,\"C\":%d,\"KH\":3,"
            "\"KW\":3,\"stride\":[%d,%d],\"padding\":[1,1],\"epilogue\":[%s]}",
            layout, N, H, H, C, S, S, epi);
}

static void exp_dense(expect_t *e, int M, int N, int K, const char *epi)
{
    exp_add(e, "{\"op\":\"dense\",\"M\":%d,\"N\":%d,\"K\":%d,\"epilogue\":[%s]}", M, N, K, epi);
}

/* layout "nhwc" or "nchw"; epi: the epilogue list's JSON items. */
static void exp_gap(expect_t *e, const char *layout, int N, int H, int C, const char *epi)
{
    exp_add(e, "{\"op\":\"global_avg_pool%s\",\"N\":%d,\"H\":%d,\"W\":%d,\"C\":%d,"
            "\"epilogue\":[%s]}", strcmp(layout, "nchw") == 0 ? "_nchw" : "", N, H, H, C, epi);
}

static void exp_maxpool(expect_t *e, const char *layout, int N, int H, int C, int K, int S, int P,
                        const char *epi)
{
    exp_add(e, "{\"op\":\"pool2d%s\",\"kind\":\"max\",\"N\":%d,\"H\":%d,\"W\":%d,\"C\":%d,"
            "\"KH\":%d,\"KW\":%d,\"stride\":[%d,%d],\"padding\":[%d,%d],\"epilogue\":[%s]}",
            strcmp(layout, "nchw") == 0 ? "_nchw" : "", N, H, H, C, K, K, S, S, P, P, epi);
}

/* The extracted tasks are exactly the expected workloads with their weights. */
static void check_tasks(const kt_net_tasks_t *t, const expect_t *e, const char *what)
{
    ck_assert_msg(t->ntasks == e->n, "%s: %d tasks, expected %d", what, t->ntasks, e->n);
    for (int i = 0; i < e->n; i++) {
        int found = -1;
        for (int k = 0; k < t->ntasks; k++)
            if (strcmp(kt_workload_key(t->tasks[k].wl), e->key[i]) == 0)
                found = k;
        ck_assert_msg(found >= 0, "%s: expected task %s missing", what, e->key[i]);
        ck_assert_msg(t->tasks[found].weight == e->weight[i], "%s: task %s (%s) has weight %d, "
                      "expected %d", what, e->key[i], t->tasks[found].desc,
                      t->tasks[found].weight, e->weight[i]);
    }
}

static kt_net_tasks_t *builtin_tasks(const char *name, int batch, int seq, kt_net_layout_t lay)
{
    kt_net_t *net = kt_net_builtin(name, batch, seq);
    ck_assert_msg(net != NULL, "%s: %s", name, kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, lay);
    ck_assert_msg(t != NULL, "%s: %s", name, kt_err_msg());
    kt_net_free(net);
    return t;
}

static int count_issues(const kt_net_tasks_t *t, kt_net_issue_kind_t kind, const char *op)
{
    int n = 0;
    for (int i = 0; i < t->nissues; i++)
        if (t->issues[i].kind == kind && (!op || strcmp(t->issues[i].op, op) == 0))
            n++;
    return n;
}

/* ResNet as relay.testing.resnet builds it (pre-activation units; see net.h
 * for the fusion rules): a unit's last conv takes the residual add, plus the
 * next unit's bn (as bias) + relu when that unit starts a stage (its
 * shortcut is a conv of the activation, so the sum has one reader). The
 * max pool takes the first unit's bn (its scale folds into the convs after
 * the relu) + relu; the last conv takes the final bn whole (multiply + bias:
 * only the global pool follows) + relu, as TVM's seed 004 task 7. */
static void expect_resnet(expect_t *e, int layers, int N, const char *lay)
{
    const int u18[4] = {2, 2, 2, 2}, u34[4] = {3, 4, 6, 3};
    const int *units = layers == 18 ? u18 : u34;
    const int bottle = layers >= 50;
    const int f_basic[5] = {64, 64, 128, 256, 512}, f_bottle[5] = {64, 256, 512, 1024, 2048};
    const int *f = bottle ? f_bottle : f_basic;
    exp_conv(e, lay, N, 224, 3, 64, 7, 2, 3, "bias_add,relu");
    exp_maxpool(e, lay, N, 112, 64, 3, 2, 1, "\"bias_add\",\"relu\"");
    int H = 56, cin = 64;
    for (int s = 0; s < 4; s++)
        for (int u = 0; u < units[s]; u++) {
            int nf = f[s + 1], stride = u == 0 && s > 0 ? 2 : 1, Ho = H / stride;
            const char *last = u < units[s] - 1 ? "add"
                               : s < 3          ? "add,bias_add,relu"
                                                : "add,multiply,bias_add,relu";
            if (bottle) {
                exp_conv(e, lay, N, H, cin, nf / 4, 1, stride, 0, "bias_add,relu");
                exp_conv(e, lay, N, Ho, nf / 4, nf / 4, 3, 1, 1, "bias_add,relu");
                exp_conv(e, lay, N, Ho, nf / 4, nf, 1, 1, 0, last);
            } else {
                exp_conv(e, lay, N, H, cin, nf, 3, stride, 1, "bias_add,relu");
                exp_conv(e, lay, N, Ho, nf, nf, 3, 1, 1, last);
            }
            if (u == 0)
                exp_conv(e, lay, N, H, cin, nf, 1, stride, 0, "");
            cin = nf;
            H = Ho;
        }
    exp_gap(e, lay, N, 7, cin, "");
    exp_dense(e, N, 1000, cin, "\"bias_add\"");
    exp_add(e, "{\"op\":\"softmax\",\"shape\":[%d,1000]}", N);
}

START_TEST(net_resnet18_nhwc_tasks_follow_the_architecture)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 1, 0, KT_NET_NHWC);
    expect_t e = {0};
    expect_resnet(&e, 18, 1, "nhwc");
    check_tasks(t, &e, "resnet-18");
    /* First appearance order: the stem conv, then the max pool. */
    ck_assert_str_eq(json_string_value(json_object_get(t->tasks[0].workload, "op")),
                     "conv2d_nhwc");
    ck_assert_str_eq(json_string_value(json_object_get(t->tasks[1].workload, "op")), "pool2d");
    ck_assert_str_eq(t->tasks[0].desc, "conv0 + bn0 + relu0");
    ck_assert_str_eq(t->tasks[1].desc, "pool0 + stage1_unit1_bn1 + stage1_unit1_relu1");
    ck_assert_int_eq(t->nissues, 0);   /* every layer is in a task */
    exp_free(&e);
    kt_net_tasks_free(t);
}
END_TEST

/* Seed 004's task table for resnet-18 NHWC batch 1: its direct (non-winograd)
 * conv2d and dense rows, as data, weight and output shapes from the keys and
 * the epilogue its DAG text shows. */
static const struct {
    int data[4], weight[4], out[4];
    const char *epilogue;
} seed004[] = {
    {{1, 56, 56, 64}, {1, 1, 64, 64}, {1, 56, 56, 64}, ""},               /* Task 0 */
    {{1, 56, 56, 64}, {1, 1, 64, 128}, {1, 28, 28, 128}, ""},             /* Task 2 */
    {{1, 28, 28, 128}, {1, 1, 128, 256}, {1, 14, 14, 256}, ""},           /* Task 12 */
    {{1, 14, 14, 256}, {3, 3, 256, 512}, {1, 7, 7, 512}, "bias_add,relu"},  /* Task 13 */
    {{1, 28, 28, 128}, {3, 3, 128, 256}, {1, 14, 14, 256}, "bias_add,relu"}, /* Task 15 */
    {{1, 224, 224, 3}, {7, 7, 3, 64}, {1, 112, 112, 64}, "bias_add,relu"},  /* Task 17 */
    {{1, 14, 14, 256}, {1, 1, 256, 512}, {1, 7, 7, 512}, ""},             /* Task 21 */
    {{1, 56, 56, 64}, {3, 3, 64, 128}, {1, 28, 28, 128}, "bias_add,relu"},  /* Task 23 */
};

static int shape_is(json_t *a, const int *d, int n)
{
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return 0;
    for (int i = 0; i < n; i++)
        if (json_integer_value(json_array_get(a, (size_t)i)) != d[i])
            return 0;
    return 1;
}

static void epilogue_str(json_t *w, char *buf, size_t cap)
{
    json_t *ep = json_object_get(w, "epilogue");
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(ep) && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "," : "",
                                json_string_value(json_array_get(ep, i)));
}

START_TEST(net_resnet18_nhwc_has_every_direct_conv_and_dense_of_seed_004)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 1, 0, KT_NET_NHWC);
    for (size_t r = 0; r < KT_ARRAY_LEN(seed004); r++) {
        int found = 0;
        for (int i = 0; i < t->ntasks; i++) {
            json_t *w = t->tasks[i].workload;
            if (strcmp(json_string_value(json_object_get(w, "op")), "conv2d_nhwc") != 0)
                continue;
            json_t *key = json_loads(kt_workload_key(t->tasks[i].wl), 0, NULL);
            ck_assert_ptr_nonnull(key);
            char epi[128];
            epilogue_str(w, epi, sizeof(epi));
            size_t n = json_array_size(key);
            if (shape_is(json_array_get(key, 1), seed004[r].data, 4) &&
                shape_is(json_array_get(key, 2), seed004[r].weight, 4) &&
                shape_is(json_array_get(key, n - 1), seed004[r].out, 4) &&
                strcmp(epi, seed004[r].epilogue) == 0) {
                found++;
                ck_assert_int_eq(t->tasks[i].weight, 1);
            }
            json_decref(key);
        }
        ck_assert_msg(found == 1, "seed 004 conv row %zu found %d times", r, found);
    }
    /* Task 22: dense [1, 512] x [1000, 512] + bias -> [1, 1000]. */
    int dense = 0;
    for (int i = 0; i < t->ntasks; i++) {
        json_t *w = t->tasks[i].workload;
        if (strcmp(json_string_value(json_object_get(w, "op")), "dense") != 0)
            continue;
        dense++;
        json_t *key = json_loads(kt_workload_key(t->tasks[i].wl), 0, NULL);
        int d[2] = {1, 512}, wt[2] = {1000, 512}, o[2] = {1, 1000};
        ck_assert(shape_is(json_array_get(key, 1), d, 2));
        ck_assert(shape_is(json_array_get(key, 2), wt, 2));
        ck_assert(shape_is(json_array_get(key, json_array_size(key) - 1), o, 2));
        char epi[64];
        epilogue_str(w, epi, sizeof(epi));
        ck_assert_str_eq(epi, "bias_add");
        json_decref(key);
    }
    ck_assert_int_eq(dense, 1);
    kt_net_tasks_free(t);
}
END_TEST

START_TEST(net_resnet50_and_resnet34_tasks_follow_the_architecture)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-50", 1, 0, KT_NET_NHWC);
    expect_t e = {0};
    expect_resnet(&e, 50, 1, "nhwc");
    check_tasks(t, &e, "resnet-50");
    exp_free(&e);
    kt_net_tasks_free(t);
    t = builtin_tasks("resnet-34", 2, 0, KT_NET_NHWC);
    expect_t e2 = {0};
    expect_resnet(&e2, 34, 2, "nhwc");
    check_tasks(t, &e2, "resnet-34 batch 2");
    exp_free(&e2);
    kt_net_tasks_free(t);
}
END_TEST

START_TEST(net_resnet_nchw_uses_nchw_operators_for_every_layer)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 4, 0, KT_NET_NCHW);
    expect_t e = {0};
    expect_resnet(&e, 18, 4, "nchw");
    check_tasks(t, &e, "resnet-18 NCHW batch 4");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e);
    kt_net_tasks_free(t);
    t = builtin_tasks("resnet-50", 1, 0, KT_NET_NCHW);
    expect_t e2 = {0};
    expect_resnet(&e2, 50, 1, "nchw");
    check_tasks(t, &e2, "resnet-50 NCHW");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e2);
    kt_net_tasks_free(t);
}
END_TEST

/* torchvision's mobilenet_v2 table: expansion, channels, repeats, stride.
 * Each bn folds into its conv's weights and bias; relu6 is a clip epilogue. */
static void expect_mobilenet_v2(expect_t *e, const char *lay)
{
    static const int cfg[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int H = 112, cin = 32;
    exp_conv(e, lay, 1, 224, 3, 32, 3, 2, 1, "bias_add,relu6");
    for (int g = 0; g < 7; g++)
        for (int r = 0; r < cfg[g][2]; r++) {
            int t = cfg[g][0], c = cfg[g][1], s = r == 0 ? cfg[g][3] : 1, hid = cin * t;
            if (t != 1)
                exp_conv(e, lay, 1, H, cin, hid, 1, 1, 0, "bias_add,relu6");
            exp_dw(e, lay, 1, H, hid, s, "\"bias_add\",\"relu6\"");
            int Ho = (H + 2 - 3) / s + 1;
            exp_conv(e, lay, 1, Ho, hid, c, 1, 1, 0,
                     s == 1 && cin == c ? "bias_add,add" : "bias_add");
            cin = c;
            H = Ho;
        }
    ck_assert_int_eq(H, 7);
    exp_conv(e, lay, 1, H, cin, 1280, 1, 1, 0, "bias_add,relu6");
    exp_gap(e, lay, 1, H, 1280, "");
    exp_dense(e, 1, 1000, 1280, "\"bias_add\"");
    exp_add(e, "{\"op\":\"softmax\",\"shape\":[1,1000]}");
}

START_TEST(net_mobilenet_v2_tasks_follow_the_architecture)
{
    for (int lay = 0; lay < 2; lay++) {
        const char *name = lay ? "nchw" : "nhwc";
        expect_t e = {0};
        expect_mobilenet_v2(&e, name);
        kt_net_tasks_t *tk = builtin_tasks("mobilenet-v2", 1, 0, (kt_net_layout_t)lay);
        check_tasks(tk, &e, lay ? "mobilenet-v2 NCHW" : "mobilenet-v2 NHWC");
        ck_assert_int_eq(tk->ntasks, 33);
        ck_assert_int_eq(tk->nissues, 0);   /* no "not fused" relu6 */
        char *text = kt_net_tasks_text(tk);
        ck_assert_ptr_null(strstr(text, "not fused"));
        ck_assert_ptr_nonnull(strstr(text, "T_clip(ax0, ax1, ax2, ax3) = max(min(T_bias_add[ax0, "
                                           "ax1, ax2, ax3], 6f), 0f)"));
        free(text);
        exp_free(&e);
        kt_net_tasks_free(tk);
    }
}
END_TEST

static void expect_bert(expect_t *e, int B, int L)
{
    int M = B * L;
    for (int i = 0; i < 25; i++)   /* embeddings + 2 per layer */
        exp_add(e, "{\"op\":\"layer_norm\",\"shape\":[%d,%d,768]}", B, L);
    for (int layer = 0; layer < 12; layer++) {
        for (int k = 0; k < 3; k++)   /* Q, K, V */
            exp_dense(e, M, 768, 768, "\"bias_add\"");
        exp_add(e, "{\"op\":\"batch_matmul\",\"B\":%d,\"M\":%d,\"N\":%d,\"K\":64}", B * 12, L, L);
        exp_add(e, "{\"op\":\"softmax\",\"shape\":[%d,12,%d,%d]}", B, L, L);
        exp_add(e, "{\"op\":\"batch_matmul\",\"B\":%d,\"M\":%d,\"N\":64,\"K\":%d}", B * 12, L, L);
        exp_dense(e, M, 768, 768, "\"bias_add\",\"add\"");
        exp_dense(e, M, 3072, 768, "\"bias_add\",\"gelu\"");
        exp_dense(e, M, 768, 3072, "\"bias_add\",\"add\"");
    }
}

/* --winograd: after ResNet-18's own tasks (unchanged), one Winograd task per
 * 3x3 stride-1 conv2d_nhwc task, same layers and weight, tile 4 where the
 * input height is a multiple of 4 (ResNet-18's 56x56 and 28x28 layers);
 * none in NCHW. */
START_TEST(net_winograd_alternatives_follow_the_direct_tasks)
{
    kt_net_t *net = kt_net_builtin("resnet-18", 1, 0);
    kt_net_tasks_t *plain = kt_net_extract(net, KT_NET_NHWC);
    kt_net_tasks_t *t = kt_net_extract_ex(net, KT_NET_NHWC, KT_NET_EXTRACT_WINOGRAD);
    ck_assert_ptr_nonnull(plain);
    ck_assert_ptr_nonnull(t);
    int eligible = 0;
    for (int i = 0; i < plain->ntasks; i++) {
        ck_assert_str_eq(kt_workload_key(t->tasks[i].wl), kt_workload_key(plain->tasks[i].wl));
        ck_assert_int_eq(t->tasks[i].alt_of, -1);
        const json_t *w = plain->tasks[i].workload;
        eligible += strcmp(json_string_value(json_object_get(w, "op")), "conv2d_nhwc") == 0 &&
                    json_integer_value(json_object_get(w, "KH")) == 3 &&
                    json_integer_value(json_array_get(json_object_get(w, "stride"), 0)) == 1;
    }
    ck_assert_int_gt(eligible, 0);
    ck_assert_int_eq(t->ntasks, plain->ntasks + eligible);
    for (int i = plain->ntasks; i < t->ntasks; i++) {
        const kt_net_task_t *a = &t->tasks[i], *d = &t->tasks[a->alt_of];
        ck_assert_int_ge(a->alt_of, 0);
        ck_assert_int_lt(a->alt_of, plain->ntasks);
        ck_assert_int_eq(a->weight, d->weight);
        char *direct = kt_workload_winograd_direct_json(a->wl);
        ck_assert_str_eq(direct, kt_workload_json(d->wl));
        free(direct);
        json_int_t H = json_integer_value(json_object_get(d->workload, "H"));
        ck_assert_int_eq(json_integer_value(json_object_get(a->workload, "tile_size")),
                         H == 56 || H == 28 ? 4 : 2);
        ck_assert_ptr_nonnull(strstr(a->desc, "(Winograd)"));
        /* No instance calls an alternative. */
        for (int k = 0; k < t->ninstances; k++)
            ck_assert_int_ne(t->instances[k].task, i);
    }
    kt_net_tasks_free(t);
    t = kt_net_extract_ex(net, KT_NET_NCHW, KT_NET_EXTRACT_WINOGRAD);
    kt_net_tasks_t *nchw = kt_net_extract(net, KT_NET_NCHW);
    ck_assert_int_eq(t->ntasks, nchw->ntasks);
    kt_net_tasks_free(t);
    kt_net_tasks_free(nchw);
    kt_net_tasks_free(plain);
    kt_net_free(net);
}
END_TEST

START_TEST(net_bert_base_has_per_layer_tasks_weighted_by_layers)
{
    kt_net_tasks_t *t = builtin_tasks("bert-base", 1, 0, KT_NET_NHWC);
    expect_t e = {0};
    expect_bert(&e, 1, 128);
    check_tasks(t, &e, "bert-base");
    ck_assert_int_eq(t->ntasks, 8);
    int w12 = 0;
    for (int i = 0; i < t->ntasks; i++)
        w12 += t->tasks[i].weight == 12;
    ck_assert_int_eq(w12, 6);   /* 2 batch_matmul, softmax, 3 dense; Q/K/V 36, LN 25 */
    exp_free(&e);
    kt_net_tasks_free(t);
    /* Batch and sequence length are options; at L = 64 both attention
     * batch_matmuls are [12, 64, 64, 64] and merge into one task of weight 24. */
    t = builtin_tasks("bert-base", 2, 64, KT_NET_NHWC);
    expect_t e2 = {0};
    expect_bert(&e2, 2, 64);
    check_tasks(t, &e2, "bert-base B2 L64");
    ck_assert_int_eq(t->ntasks, 7);
    exp_free(&e2);
    kt_net_tasks_free(t);
}
END_TEST

START_TEST(net_vgg16_merges_identical_convs)
{
    static const int reps[5] = {2, 2, 3, 3, 3}, ch[5] = {64, 128, 256, 512, 512};
    expect_t e = {0};
    int H = 224, cin = 3;
    for (int g = 0; g < 5; g++) {
        for (int r = 0; r < reps[g]; r++) {
            exp_conv(&e, "nhwc", 1, H, cin, ch[g], 3, 1, 1, "bias_add,relu");
            cin = ch[g];
        }
        exp_maxpool(&e, "nhwc", 1, H, cin, 2, 2, 0, "");
        H /= 2;
    }
    exp_dense(&e, 1, 4096, 512 * 7 * 7, "\"bias_add\",\"relu\"");
    exp_dense(&e, 1, 4096, 4096, "\"bias_add\",\"relu\"");
    exp_dense(&e, 1, 1000, 4096, "\"bias_add\"");
    exp_add(&e, "{\"op\":\"softmax\",\"shape\":[1,1000]}");
    kt_net_tasks_t *t = builtin_tasks("vgg-16", 1, 0, KT_NET_NHWC);
    check_tasks(t, &e, "vgg-16");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e);
    kt_net_tasks_free(t);
}
END_TEST

START_TEST(net_builtin_rejects_unknown_names_and_sizes)
{
    ck_assert_ptr_null(kt_net_builtin("resnet-19", 1, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "unknown network 'resnet-19'"));
    ck_assert_ptr_null(kt_net_builtin("resnet-18", 0, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "batch"));
    ck_assert_ptr_null(kt_net_builtin("bert-base", 1, -3));
    int n = 0;
    for (const char *const *p = kt_net_builtin_names(); *p; p++, n++) {
        kt_net_t *net = kt_net_builtin(*p, 1, 32);
        ck_assert_msg(net != NULL, "%s: %s", *p, kt_err_msg());
        ck_assert_str_eq(kt_net_name(net), *p);
        ck_assert_int_gt(kt_net_num_layers(net), 10);
        kt_net_free(net);
    }
    ck_assert_int_eq(n, 6);
}
END_TEST

/* ---- output formats ------------------------------------------------------------- */

START_TEST(net_json_lists_workload_weight_key_and_desc)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 1, 0, KT_NET_NHWC);
    char *text = kt_net_tasks_json(t);
    ck_assert_ptr_nonnull(text);
    json_error_t jerr;
    json_t *list = json_loads(text, 0, &jerr);
    ck_assert_msg(list != NULL, "%s", jerr.text);
    ck_assert_int_eq((int)json_array_size(list), t->ntasks);
    size_t i;
    json_t *it;
    json_array_foreach(list, i, it) {
        ck_assert_int_eq((int)json_object_size(it), 4);
        char *w = json_dumps(json_object_get(it, "workload"), JSON_COMPACT);
        kt_workload_t *wl = kt_workload_parse(w);
        ck_assert_msg(wl != NULL, "%s: %s", w, kt_err_msg());
        ck_assert_str_eq(kt_workload_key(wl), json_string_value(json_object_get(it, "key")));
        ck_assert_int_eq(json_integer_value(json_object_get(it, "weight")), t->tasks[i].weight);
        ck_assert_str_eq(json_string_value(json_object_get(it, "desc")), t->tasks[i].desc);
        kt_workload_free(wl);
        free(w);
    }
    /* kt_workload_load reads the listing as it is (--workload takes it). */
    char *loadable = json_dumps(list, JSON_COMPACT);
    kt_workload_t **ws = NULL;
    double *weights = NULL;
    int n = 0;
    ck_assert_msg(kt_workload_load(loadable, &ws, &weights, &n) == 0, "%s", kt_err_msg());
    ck_assert_int_eq(n, t->ntasks);
    for (int k = 0; k < n; k++) {
        ck_assert_str_eq(kt_workload_key(ws[k]), kt_workload_key(t->tasks[k].wl));
        ck_assert(weights[k] == t->tasks[k].weight);
        kt_workload_free(ws[k]);
    }
    free(ws);
    free(weights);
    free(loadable);
    /* A key that is not the workload's own is refused, naming the field. */
    json_object_set_new(json_array_get(list, 1), "key", json_string("[\"0\", [1]]"));
    loadable = json_dumps(list, JSON_COMPACT);
    ck_assert_int_eq(kt_workload_load(loadable, &ws, &weights, &n), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "item 1: field 'key'") != NULL, "%s", kt_err_msg());
    free(loadable);
    json_decref(list);
    free(text);
    kt_net_tasks_free(t);
}
END_TEST

START_TEST(net_text_listing_has_header_dag_and_weight)
{
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 1, 0, KT_NET_NHWC);
    char *text = kt_net_tasks_text(t);
    ck_assert_ptr_nonnull(text);
    for (int i = 0; i < t->ntasks; i++) {
        char head[512];
        snprintf(head, sizeof(head), "========== Task %d  (workload key: %s) ==========\n", i,
                 kt_workload_key(t->tasks[i].wl));
        const char *at = strstr(text, head);
        ck_assert_msg(at != NULL, "no header for task %d", i);
        char *dag = kt_dag_to_text(kt_workload_dag(t->tasks[i].wl));
        ck_assert_int_eq(strncmp(at + strlen(head), dag, strlen(dag)), 0);
        char wline[256];
        snprintf(wline, sizeof(wline), "weight: %d  (%s)\n", t->tasks[i].weight,
                 t->tasks[i].desc);
        ck_assert_int_eq(strncmp(at + strlen(head) + strlen(dag), wline, strlen(wline)), 0);
        free(dag);
    }
    ck_assert_ptr_null(strstr(text, "\nnot fused: "));   /* every layer is in a task */
    ck_assert_ptr_null(strstr(text, "\nunsupported: "));
    free(text);
    kt_net_tasks_free(t);
}
END_TEST

typedef struct {
    const kt_net_t *net;
    char *first_key;
    int ntasks;
} th_arg_t;

static void *extract_thread(void *p)
{
    th_arg_t *a = p;
    for (int r = 0; r < 3; r++) {
        kt_net_tasks_t *t = kt_net_extract(a->net, KT_NET_NHWC);
        if (!t)
            return NULL;
        a->ntasks = t->ntasks;
        free(a->first_key);
        a->first_key = strdup(kt_workload_key(t->tasks[t->ntasks - 1].wl));
        kt_net_tasks_free(t);
    }
    return NULL;
}

START_TEST(net_extract_runs_from_several_threads)
{
    kt_net_t *net = kt_net_builtin("bert-base", 1, 32);
    ck_assert_ptr_nonnull(net);
    th_arg_t a[3] = {{net, NULL, 0}, {net, NULL, 0}, {net, NULL, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, extract_thread, &a[i]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a[i].ntasks, 8);
        ck_assert_str_eq(a[i].first_key, a[0].first_key);
    }
    for (int i = 0; i < 3; i++)
        free(a[i].first_key);
    kt_net_free(net);
}
END_TEST

/* Run the ktune CLI; returns its exit status, output in *out (caller frees). */
static int run_cli(const char *args, char **out)
{
    const char *root = getenv("KT_BUILD_ROOT");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s/cli/ktune' tasks %s 2>/dev/null", root ? root : "build",
             args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int st = pclose(f);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(net_cli_prints_tasks_and_exit_statuses)
{
    char *out = NULL;
    /* NHWC CPU tasks get their Winograd alternatives by default; --no-winograd
     * leaves the direct convolutions only. */
    kt_net_t *rn = kt_net_builtin("resnet-18", 1, 0);
    ck_assert_ptr_nonnull(rn);
    kt_net_tasks_t *wt = kt_net_extract_ex(rn, KT_NET_NHWC, KT_NET_EXTRACT_WINOGRAD);
    ck_assert_ptr_nonnull(wt);
    kt_net_tasks_t *t = builtin_tasks("resnet-18", 1, 0, KT_NET_NHWC);
    ck_assert_int_gt(wt->ntasks, t->ntasks);
    const char *const how[2] = {"--network resnet-18 --json",
                                "--network resnet-18 --no-winograd --json"};
    for (int k = 0; k < 2; k++) {
        const kt_net_tasks_t *want = k == 0 ? wt : t;
        ck_assert_int_eq(run_cli(how[k], &out), 0);
        json_t *list = json_loads(out, 0, NULL);
        ck_assert_ptr_nonnull(list);
        ck_assert_int_eq((int)json_array_size(list), want->ntasks);
        for (int i = 0; i < want->ntasks; i++)
            ck_assert_str_eq(
                json_string_value(json_object_get(json_array_get(list, (size_t)i), "key")),
                kt_workload_key(want->tasks[i].wl));
        json_decref(list);
        free(out);
    }
    kt_net_tasks_free(wt);
    kt_net_free(rn);
    ck_assert_int_eq(run_cli("--network bert-base --seq-len 64 --batch 2", &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "========== Task 6  (workload key: "));
    ck_assert_ptr_null(strstr(out, "========== Task 7 "));
    free(out);
    ck_assert_int_eq(run_cli("--network resnet-7", &out), 1);
    free(out);
    ck_assert_int_eq(run_cli("--network resnet-18 --bogus", &out), 2);
    free(out);
    ck_assert_int_eq(run_cli("--network resnet-18 --onnx x.onnx", &out), 2);
    free(out);
    ck_assert_int_eq(run_cli("--list", &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "mobilenet-v2\n"));
    free(out);
    kt_net_tasks_free(t);
}
END_TEST

/* ---- network files ---------------------------------------------------------------- */

static char *source_path(const char *rel)
{
    const char *root = getenv("KT_SOURCE_ROOT");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/%s", root ? root : ".", rel);
    return p;
}

START_TEST(net_file_small_cnn_gives_the_expected_tasks)
{
    char *path = source_path("tests/net/cnn.json");
    kt_net_t *net = kt_net_load_file(path);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    ck_assert_str_eq(kt_net_name(net), "small-cnn");
    int64_t d[KT_NET_MAX_DIMS];
    ck_assert_int_eq(kt_net_layer_shape(net, kt_net_num_layers(net) - 1, d), 2);
    ck_assert_int_eq(d[1], 10);
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    expect_t e = {0};
    exp_conv(&e, "nhwc", 1, 32, 3, 16, 3, 1, 1, "bias_add,relu");
    exp_conv(&e, "nhwc", 1, 32, 16, 16, 3, 1, 1, "bias_add,add,relu");
    exp_maxpool(&e, "nhwc", 1, 32, 16, 2, 2, 0, "");
    exp_conv(&e, "nhwc", 1, 16, 16, 32, 3, 1, 1, "bias_add,relu");
    exp_gap(&e, "nhwc", 1, 16, 32, "");
    exp_dense(&e, 1, 10, 32, "\"bias_add\"");
    check_tasks(t, &e, "cnn.json");
    ck_assert_str_eq(t->tasks[1].desc, "c2 + b2 + res + r2");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(path);
}
END_TEST

static void expect_file_error(const char *text, const char *want)
{
    kt_net_t *net = kt_net_parse_json(text);
    ck_assert_msg(net == NULL, "accepted: %s", text);
    ck_assert_msg(strstr(kt_err_msg(), want) != NULL, "message '%s' lacks '%s'", kt_err_msg(),
                  want);
}

#define IN "{\"name\":\"x\",\"op\":\"input\",\"shape\":[1,3,8,8]}"

START_TEST(net_file_errors_name_the_layer_and_field)
{
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c1\",\"op\":\"conv2d\",\"channels\":4}]}",
                      "layer 1 'c1' (conv2d): field 'kernel' is missing");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c1\",\"op\":\"conv2d\",\"channels\":4,"
                      "\"kernel\":9}]}",
                      "layer 1 'c1' (conv2d): field 'kernel'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c1\",\"op\":\"conv2d\",\"channels\":4,"
                      "\"kernel\":3,\"kernal\":3}]}",
                      "layer 1 'c1' (conv2d): unknown field 'kernal'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"y\",\"op\":\"conv3d\"}]}",
                      "layer 1 'y' (conv3d): field 'op': unknown op 'conv3d'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"s\",\"op\":\"add\",\"inputs\":[\"x\","
                      "\"nope\"]}]}",
                      "layer 1 's' (add): field 'inputs': no earlier layer named 'nope'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"s\",\"op\":\"add\",\"inputs\":[\"x\"]}]}",
                      "layer 1 's' (add): field 'inputs' must name 2 layers");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"r\",\"op\":\"reshape\","
                      "\"shape\":[1,5,-1]}]}",
                      "layer 1 'r' (reshape): field 'shape'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"x\",\"op\":\"relu\"}]}",
                      "layer 1 'x' (relu): layer name 'x' is used twice");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"d\",\"op\":\"dense\",\"units\":0}]}",
                      "layer 1 'd' (dense): field 'units' must be an integer");
    expect_file_error("{\"layers\": [{\"name\":\"x\",\"op\":\"input\",\"shape\":[1,0]}]}",
                      "layer 0 'x' (input): field 'shape'");
    expect_file_error("{\"layers\": [{\"name\":\"a\",\"op\":\"input\",\"shape\":[2,3]}, "
                      "{\"name\":\"m\",\"op\":\"matmul\",\"inputs\":[\"a\",\"a\"]}]}",
                      "layer 1 'm' (matmul): field 'inputs': inner dimensions differ");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"p\",\"op\":\"softmax\",\"axis\":1}]}",
                      "layer 1 'p' (softmax): field 'axis'");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c\",\"op\":\"conv2d\",\"channels\":4,"
                      "\"kernel\":1,\"groups\":2}]}",
                      "layer 1 'c' (conv2d): field 'groups'");
    expect_file_error("{\"layers\": [" IN ", 7]}", "layer 1: must be a JSON object");
    expect_file_error("{\"layers\": []}", "field 'layers' must be a non-empty list");
    expect_file_error("{\"layers\": [" IN "], \"extra\": 1}", "unknown top-level field 'extra'");
    expect_file_error("{\"layers\": [" IN "], \"outputs\": [\"zz\"]}",
                      "field 'outputs': entry 0 is not a layer name");
    expect_file_error("{\"layers\": [" IN ",]}", "bad network JSON at line 1");
    expect_file_error("[1, 2]", "a network file is a JSON object");
    ck_assert_ptr_null(kt_net_load_file("/nonexistent/net.json"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "/nonexistent/net.json"));
}
END_TEST

START_TEST(net_file_fuses_new_epilogues_and_reports_the_rest)
{
    const char *text =
        "{\"layers\": [" IN ","
        "{\"name\":\"c\",\"op\":\"conv2d\",\"channels\":8,\"kernel\":3,\"padding\":1,\"bias\":true},"
        "{\"name\":\"r6\",\"op\":\"relu6\"},"
        "{\"name\":\"g\",\"op\":\"conv2d\",\"channels\":8,\"kernel\":3,\"groups\":2},"
        "{\"name\":\"s\",\"op\":\"sigmoid\"},"
        "{\"name\":\"dw\",\"op\":\"conv2d\",\"channels\":16,\"kernel\":3,\"groups\":8,"
        "\"padding\":1,\"inputs\":[\"r6\"]},"
        "{\"name\":\"sc\",\"op\":\"scale\",\"per_channel\":true},"
        "{\"name\":\"r\",\"op\":\"relu\"},"
        "{\"name\":\"th\",\"op\":\"tanh\"},"
        "{\"name\":\"sc2\",\"op\":\"scale\"},"
        "{\"name\":\"cl\",\"op\":\"clip\",\"min\":-1.5,\"max\":2},"
        "{\"name\":\"cr\",\"op\":\"relu\"},"
        "{\"name\":\"ex\",\"op\":\"elementwise\",\"fn\":\"exp\"},"
        "{\"name\":\"p\",\"op\":\"avg_pool\",\"kernel\":2,\"stride\":2,\"inputs\":[\"s\"]},"
        "{\"name\":\"pb\",\"op\":\"batch_norm\"},"
        "{\"name\":\"y\",\"op\":\"input\",\"shape\":[2,3,4]},"
        "{\"name\":\"z\",\"op\":\"input\",\"shape\":[1,4,5]},"
        "{\"name\":\"mm\",\"op\":\"matmul\",\"inputs\":[\"y\",\"z\"]}]}";
    kt_net_t *net = kt_net_parse_json(text);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    for (int lay = 0; lay < 2; lay++) {
        const char *ln = lay ? "nchw" : "nhwc";
        kt_net_tasks_t *t = kt_net_extract(net, (kt_net_layout_t)lay);
        ck_assert_ptr_nonnull(t);
        expect_t e = {0};
        exp_conv(&e, ln, 1, 8, 3, 8, 3, 1, 1, "bias_add,relu6");
        exp_add(&e, "{\"op\":\"group_conv2d_%s\",\"N\":1,\"H\":8,\"W\":8,\"CI\":8,\"CO\":8,"
                "\"KH\":3,\"KW\":3,\"groups\":2,\"epilogue\":[\"sigmoid\"]}", ln);
        /* Depthwise with multiplier 2; the per-channel scale right after it
         * folds into its weights; the scalar scale after relu + tanh stays a
         * multiply; clip(-1.5, 2) + relu is clip(0, 2); the exp has no
         * epilogue. */
        exp_add(&e, "{\"op\":\"depthwise_conv2d_%s\",\"N\":1,\"H\":8,\"W\":8,\"C\":8,\"KH\":3,"
                "\"KW\":3,\"multiplier\":2,\"padding\":[1,1],\"epilogue\":[\"relu\",\"tanh\","
                "\"multiply_scalar\",{\"op\":\"clip\",\"min\":0,\"max\":2}]}", ln);
        /* A pool's batch norm is a multiply and a bias (no conv follows). */
        exp_add(&e, "{\"op\":\"pool2d%s\",\"kind\":\"avg\",\"N\":1,\"H\":6,\"W\":6,\"C\":8,"
                "\"KH\":2,\"KW\":2,\"stride\":[2,2],\"epilogue\":[\"multiply\",\"bias_add\"]}",
                lay ? "_nchw" : "");
        check_tasks(t, &e, ln);
        ck_assert_int_eq(count_issues(t, KT_NET_NOT_FUSED, "exp"), 1);
        ck_assert_int_eq(count_issues(t, KT_NET_UNSUPPORTED, "matmul"), 1);
        ck_assert_int_eq(t->nissues, 2);
        char *listing = kt_net_tasks_text(t);
        ck_assert_ptr_nonnull(strstr(listing, "\nnot fused: te has no 'exp' epilogue; it runs as "
                                              "a separate simple operator: 'ex' (exp)\n"));
        ck_assert_ptr_nonnull(strstr(listing, "\nunsupported: a matmul broadcasting"));
        free(listing);
        exp_free(&e);
        kt_net_tasks_free(t);
    }
    kt_net_free(net);
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c\",\"op\":\"clip\",\"min\":1}]}",
                      "layer 1 'c' (clip): field 'max' is missing");
    expect_file_error("{\"layers\": [" IN ", {\"name\":\"c\",\"op\":\"clip\",\"min\":1,"
                      "\"max\":0}]}", "layer 1 'c' (clip): field 'min'");
}
END_TEST

/* ---- ONNX ---------------------------------------------------------------------------- */

static char onnx_dir[256];
static int onnx_made;   /* make_models.py ran */
static char onnx_error[512];   /* why make_models.py made nothing */

static void onnx_setup(void)
{
    onnx_made = 0;
    snprintf(onnx_dir, sizeof(onnx_dir), "/tmp/kt_test_net_XXXXXX");
    if (!mkdtemp(onnx_dir)) {
        snprintf(onnx_error, sizeof(onnx_error), "mkdtemp failed");
        return;
    }
    if (access("/usr/bin/python3", X_OK) != 0) {
        snprintf(onnx_error, sizeof(onnx_error), "/usr/bin/python3 is missing");
        return;
    }
    char *script = source_path("tests/net/make_models.py");
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -W ignore '%s' '%s' > '%s/log' 2>&1", script,
             onnx_dir, onnx_dir);
    free(script);
    int st = system(cmd);
    char logp[512];
    snprintf(logp, sizeof(logp), "%s/log", onnx_dir);
    char *log = kt_file_read(logp, NULL);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(onnx_error, sizeof(onnx_error), "make_models.py failed: %.400s", log ? log : "");
    } else {
        onnx_made = 1;
        if (log && *log)
            fprintf(stderr, "net: make_models.py: %s", log);
    }
    free(log);
}

static void onnx_teardown(void)
{
    char cmd[512];
    if (onnx_dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", onnx_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "net: could not remove %s\n", onnx_dir);
    }
}

/* Path of a generated model; the test fails, with make_models.py's output,
 * when the model was not made. */
static char *model(const char *name)
{
    ck_assert_msg(onnx_made, "ONNX model %s: %s", name, onnx_error);
    char made[512];
    snprintf(made, sizeof(made), "%s/made", onnx_dir);
    char *list = kt_file_read(made, NULL);
    int ok = 0;
    for (char *l = list ? strtok(list, "\n") : NULL; l; l = strtok(NULL, "\n"))
        ok |= strcmp(l, name) == 0;
    free(list);
    if (!ok) {
        char logp[512];
        snprintf(logp, sizeof(logp), "%s/log", onnx_dir);
        char *log = kt_file_read(logp, NULL);
        ck_abort_msg("ONNX model %s was not made by make_models.py: %.400s", name,
                     log && *log ? log : "(no output)");
    }
    char *p = malloc(600);
    snprintf(p, 600, "%s/%s", onnx_dir, name);
    return p;
}

/* Both task lists hold the same workloads with the same weights, in order. */
static void same_tasks(const kt_net_tasks_t *a, const kt_net_tasks_t *b, const char *what)
{
    ck_assert_msg(a->ntasks == b->ntasks, "%s: %d vs %d tasks", what, a->ntasks, b->ntasks);
    for (int i = 0; i < a->ntasks; i++) {
        ck_assert_msg(strcmp(kt_workload_key(a->tasks[i].wl), kt_workload_key(b->tasks[i].wl)) ==
                          0,
                      "%s: task %d: %s (%s) vs %s (%s)", what, i, kt_workload_key(a->tasks[i].wl),
                      a->tasks[i].desc, kt_workload_key(b->tasks[i].wl), b->tasks[i].desc);
        ck_assert_int_eq(a->tasks[i].weight, b->tasks[i].weight);
    }
}

static kt_net_tasks_t *onnx_tasks(const char *path, kt_net_layout_t lay)
{
    kt_net_t *net = kt_net_onnx_load(path, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s: %s", path, kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, lay);
    ck_assert_ptr_nonnull(t);
    kt_net_free(net);
    return t;
}

static kt_net_tasks_t *file_tasks(const char *rel, kt_net_layout_t lay)
{
    char *p = source_path(rel);
    kt_net_t *net = kt_net_load_file(p);
    ck_assert_msg(net != NULL, "%s: %s", p, kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, lay);
    ck_assert_ptr_nonnull(t);
    kt_net_free(net);
    free(p);
    return t;
}

START_TEST(net_onnx_cnn_matches_its_network_file)
{
    static const char *const names[] = {"cnn.onnx", "cnn_bn.onnx"};
    for (int lay = 0; lay < 2; lay++) {
        kt_net_tasks_t *f = file_tasks("tests/net/cnn.json", (kt_net_layout_t)lay);
        for (int k = 0; k < 2; k++) {
            char *p = model(names[k]);
            kt_net_tasks_t *t = onnx_tasks(p, (kt_net_layout_t)lay);
            same_tasks(t, f, names[k]);
            ck_assert_int_eq(t->nissues, f->nissues);
            kt_net_tasks_free(t);
            free(p);
        }
        kt_net_tasks_free(f);
    }
}
END_TEST

/* relu6 (Clip), sigmoid, tanh, depthwise with a multiplier, grouped conv and
 * a relu after a pool: every layer in a task, in both layouts. */
START_TEST(net_onnx_mobile_cnn_matches_its_network_file)
{
    char *p = model("mobile.onnx");
    for (int lay = 0; lay < 2; lay++) {
        const char *ln = lay ? "nchw" : "nhwc";
        kt_net_tasks_t *f = file_tasks("tests/net/mobile.json", (kt_net_layout_t)lay);
        kt_net_tasks_t *t = onnx_tasks(p, (kt_net_layout_t)lay);
        same_tasks(t, f, "mobile.onnx");
        ck_assert_int_eq(t->nissues, 0);
        ck_assert_int_eq(f->nissues, 0);
        expect_t e = {0};
        exp_conv(&e, ln, 1, 32, 3, 16, 3, 2, 1, "bias_add,relu6");
        exp_add(&e, "{\"op\":\"depthwise_conv2d_%s\",\"N\":1,\"H\":16,\"W\":16,\"C\":16,"
                "\"multiplier\":2,\"KH\":3,\"KW\":3,\"padding\":[1,1],\"epilogue\":"
                "[\"bias_add\",\"relu6\"]}", ln);
        exp_add(&e, "{\"op\":\"group_conv2d_%s\",\"N\":1,\"H\":16,\"W\":16,\"CI\":32,\"CO\":32,"
                "\"groups\":4,\"KH\":3,\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\","
                "\"sigmoid\"]}", ln);
        exp_maxpool(&e, ln, 1, 16, 32, 2, 2, 0, "\"relu\"");
        exp_conv(&e, ln, 1, 8, 32, 16, 1, 1, 0, "bias_add,tanh");
        exp_gap(&e, ln, 1, 8, 16, "");
        exp_dense(&e, 1, 10, 16, "\"bias_add\"");
        check_tasks(t, &e, ln);
        exp_free(&e);
        kt_net_tasks_free(t);
        kt_net_tasks_free(f);
    }
    free(p);
}
END_TEST

/* The ONNX model at path leaves no layer to a plain step. */
static void assert_no_plain_steps(const char *path)
{
    kt_net_t *net = kt_net_onnx_load(path, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s: %s", path, kt_err_msg());
    char *plain = kt_net_plain_steps_text(net);
    ck_assert_msg(strcmp(plain, "") == 0, "%s: %s", path, plain);
    free(plain);
    kt_net_free(net);
}

/* nn.MultiheadAttention's packed q/k/v projection, sliced three ways: each
 * slice is a dense layer of its rows of the weight, so nothing is copied and
 * q, k, v and the output projection are one task of weight 4. */
START_TEST(net_onnx_packed_projection_becomes_one_dense_task_per_part)
{
    char *p = model("mha.onnx");
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s: %s", p, kt_err_msg());
    char *plain = kt_net_plain_steps_text(net);
    ck_assert_msg(strcmp(plain, "") == 0, "%s", plain);
    free(plain);
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_msg(t != NULL, "%s", kt_err_msg());
    int dense = 0;
    for (int i = 0; i < t->ntasks; i++)
        if (strcmp(kt_workload_op(t->tasks[i].wl), "dense") == 0) {
            dense++;
            ck_assert_int_eq((int)t->tasks[i].weight, 4);
        }
    ck_assert_int_eq(dense, 1);
    /* each part's weight is a third of the packed one, and all are at hand */
    int parts = 0;
    for (int i = 0; i < kt_net_num_layers(net); i++) {
        int64_t n = 0;
        const char *op = kt_net_layer_op(net, i);
        if (op && strcmp(op, "dense") == 0) {
            ck_assert_ptr_nonnull(kt_net_layer_param(net, i, "weight", &n));
            ck_assert_int_eq(n, 32 * 32);
            ck_assert_ptr_nonnull(kt_net_layer_param(net, i, "bias", &n));
            ck_assert_int_eq(n, 32);
            parts++;
        }
    }
    ck_assert_int_eq(parts, 4);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(p);
}
END_TEST

/* MobileNet-V3's hardswish (HardSwish at opset 17, x * HardSigmoid(x) at 13)
 * and its squeeze-excitation's hardsigmoid are epilogues of the convolutions
 * before them, never plain steps; only the excitation's product stays apart. */
START_TEST(net_onnx_hardswish_and_hardsigmoid_fuse_at_opsets_13_and_17)
{
    const char *names[] = {"hard13.onnx", "hard17.onnx"};
    for (int k = 0; k < 2; k++) {
        char *p = model(names[k]);
        kt_net_tasks_t *t = onnx_tasks(p, KT_NET_NHWC);
        expect_t e = {0};
        exp_conv(&e, "nhwc", 1, 16, 3, 16, 3, 1, 1, "bias_add,hardswish");
        exp_gap(&e, "nhwc", 1, 16, 16, "");
        exp_conv(&e, "nhwc", 1, 1, 16, 8, 1, 1, 0, "bias_add,relu");
        exp_add(&e, "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":1,\"W\":1,\"CI\":8,\"CO\":16,"
                "\"KH\":1,\"KW\":1,\"epilogue\":[\"bias_add\",{\"op\":\"hardsigmoid\","
                "\"alpha\":0.1666666716337204,\"beta\":0.5}]}");
        exp_conv(&e, "nhwc", 1, 16, 16, 8, 1, 1, 0, "bias_add");
        check_tasks(t, &e, names[k]);
        exp_free(&e);
        for (int i = 0; i < t->nissues; i++) {
            ck_assert_msg(t->issues[i].kind == KT_NET_NOT_FUSED, "%s: %s: %s", names[k],
                          t->issues[i].layer, t->issues[i].msg);
            ck_assert_ptr_nonnull(strstr(t->issues[i].op, "mul"));
        }
        ck_assert_int_eq(t->nissues, 1);
        kt_net_tasks_free(t);
        assert_no_plain_steps(p);
        free(p);
    }
}
END_TEST

START_TEST(net_onnx_transformer_block_matches_its_network_file)
{
    char *p = model("block.onnx");
    kt_net_tasks_t *t = onnx_tasks(p, KT_NET_NHWC);
    kt_net_tasks_t *f = file_tasks("tests/net/block.json", KT_NET_NHWC);
    same_tasks(t, f, "block");
    ck_assert_int_eq(t->nissues, 0);
    ck_assert_int_eq(f->nissues, 0);
    /* The Erf pattern became a gelu epilogue, the q scale folded into q. */
    int gelu = 0;
    for (int i = 0; i < t->ntasks; i++) {
        char epi[128];
        epilogue_str(t->tasks[i].workload, epi, sizeof(epi));
        gelu += strcmp(epi, "bias_add,gelu") == 0;
    }
    ck_assert_int_eq(gelu, 1);
    ck_assert_int_eq(t->tasks[0].weight, 3);
    kt_net_tasks_free(t);
    kt_net_tasks_free(f);
    free(p);
}
END_TEST

START_TEST(net_onnx_reports_unsupported_nodes_and_lists_the_rest)
{
    char *p = model("unsupported.onnx");
    kt_net_tasks_t *t = onnx_tasks(p, KT_NET_NHWC);
    expect_t e = {0};
    exp_conv(&e, "nhwc", 1, 16, 8, 8, 3, 1, 1, "relu");
    exp_gap(&e, "nhwc", 1, 16, 8, "");
    check_tasks(t, &e, "unsupported.onnx");
    ck_assert_int_eq(t->nissues, 2);
    ck_assert_str_eq(t->issues[0].layer, "mystery");
    ck_assert_str_eq(t->issues[0].op, "Hardmax");
    ck_assert_ptr_nonnull(strstr(t->issues[0].msg, "Hardmax is not supported"));
    ck_assert_str_eq(t->issues[1].layer, "after_mystery");
    exp_free(&e);
    kt_net_tasks_free(t);
    free(p);

    p = model("clip.onnx");
    ck_assert_ptr_nonnull(p);
    t = onnx_tasks(p, KT_NET_NHWC);
    expect_t e2 = {0};
    exp_conv(&e2, "nhwc", 1, 16, 8, 8, 1, 1, 0, "bias_add,relu6");
    exp_conv(&e2, "nhwc", 1, 16, 8, 4, 1, 1, 0, "relu");       /* clip(0, inf) = relu */
    check_tasks(t, &e2, "clip.onnx");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e2);
    kt_net_tasks_free(t);
    free(p);

    p = model("group.onnx");
    t = onnx_tasks(p, KT_NET_NHWC);
    expect_t e3 = {0};
    exp_add(&e3, "{\"op\":\"group_conv2d_nhwc\",\"N\":1,\"H\":16,\"W\":16,\"CI\":8,\"CO\":8,"
            "\"KH\":3,\"KW\":3,\"groups\":2}");
    check_tasks(t, &e3, "group.onnx");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e3);
    kt_net_tasks_free(t);
    free(p);

    /* A Pad of nothing is no step: the pool reads the conv's output. */
    p = model("pad0.onnx");
    t = onnx_tasks(p, KT_NET_NHWC);
    expect_t e4 = {0};
    exp_conv(&e4, "nhwc", 1, 16, 8, 8, 1, 1, 0, "");
    exp_add(&e4, "{\"op\":\"pool2d\",\"kind\":\"avg\",\"N\":1,\"H\":16,\"W\":16,\"C\":8,"
            "\"KH\":2,\"KW\":2,\"stride\":[2,2]}");
    check_tasks(t, &e4, "pad0.onnx");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e4);
    kt_net_tasks_free(t);
    assert_no_plain_steps(p);
    free(p);

    /* A zero Pad before an average pool is the pool's padding, counted. */
    p = model("padpool.onnx");
    t = onnx_tasks(p, KT_NET_NHWC);
    expect_t e5 = {0};
    exp_conv(&e5, "nhwc", 1, 16, 8, 8, 1, 1, 0, "");
    exp_add(&e5, "{\"op\":\"pool2d\",\"kind\":\"avg\",\"count_include_pad\":true,\"N\":1,"
            "\"H\":16,\"W\":16,\"C\":8,\"KH\":3,\"KW\":3,\"padding\":[1,1]}");
    check_tasks(t, &e5, "padpool.onnx");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e5);
    kt_net_tasks_free(t);
    assert_no_plain_steps(p);
    free(p);
}
END_TEST

/* The LayerNorm opsets before 17 export as nine nodes is one layer_norm task
 * with the model's epsilon; a network of a float and an int64 input keeps
 * both, in order, and lists its reference steps by operator. */
START_TEST(net_onnx_layer_norm_pattern_and_two_inputs)
{
    char *p = model("ln13.onnx");
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s: %s", p, kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->nissues, 0);
    int ln = -1;
    for (int i = 0; i < t->ntasks; i++)
        if (strstr(kt_workload_json(t->tasks[i].wl), "\"layer_norm\""))
            ln = i;
    ck_assert_msg(ln >= 0, "no layer_norm task");
    const char *js = kt_workload_json(t->tasks[ln].wl);
    ck_assert_msg(strstr(js, "\"eps\"") && strstr(js, "\"affine\":true"), "%s", js);
    ck_assert_int_eq(t->ntasks, 2);   /* the dense layer and the layer norm */
    char *plain = kt_net_plain_steps_text(net);
    ck_assert_str_eq(plain, "");      /* nothing of it is left to plain steps */
    free(plain);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(p);

    p = model("masked.onnx");
    net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s: %s", p, kt_err_msg());
    t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    kt_net_plan_t *plan = kt_net_plan(net, t, KT_NET_NHWC, 1);
    ck_assert_msg(plan != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(plan->ninputs, 2);
    ck_assert_str_eq(plan->input_names[0], "x");
    ck_assert_str_eq(plan->input_names[1], "mask");
    ck_assert_int_eq(plan->input_int[0], 0);
    ck_assert_int_eq(plan->input_int[1], 1);
    ck_assert_int_eq(plan->values[plan->inputs[1]].slot, 1);
    plain = kt_net_plain_steps_text(net);
    ck_assert_msg(strstr(plain, "slice x1: ") && strstr(plain, "ReduceSum x1"), "%s", plain);
    free(plain);
    kt_net_plan_free(plan);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(p);
}
END_TEST

START_TEST(net_onnx_symbolic_inputs_need_a_shape)
{
    char *p = model("symbolic.onnx");
    ck_assert_ptr_null(kt_net_onnx_load(p, NULL, 0, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "graph input 'x': dimension 0 is symbolic ('N')"));
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 3);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    int64_t d[KT_NET_MAX_DIMS];
    ck_assert_int_eq(kt_net_layer_shape(net, 0, d), 4);
    ck_assert_int_eq(d[0], 3);
    kt_net_free(net);
    kt_net_input_t in;
    ck_assert_int_eq(kt_net_parse_input_spec("x=2x8x20x20", &in), 0);
    net = kt_net_onnx_load(p, &in, 1, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    expect_t e = {0};
    exp_conv(&e, "nhwc", 2, 20, 8, 8, 3, 1, 0, "");
    check_tasks(t, &e, "symbolic.onnx with --input");
    exp_free(&e);
    kt_net_tasks_free(t);
    kt_net_free(net);
    ck_assert_int_eq(kt_net_parse_input_spec("y=1x8", &in), 0);
    ck_assert_ptr_null(kt_net_onnx_load(p, &in, 1, 0));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "--input y: the model has no graph input"));
    free(p);
}
END_TEST

static void layer_shape_is(const kt_net_t *net, const char *name, int n, const int64_t *want)
{
    for (int i = 0; i < kt_net_num_layers(net); i++)
        if (strcmp(kt_net_layer_name(net, i), name) == 0) {
            int64_t d[KT_NET_MAX_DIMS];
            ck_assert_int_eq(kt_net_layer_shape(net, i, d), n);
            for (int k = 0; k < n; k++)
                ck_assert_msg(d[k] == want[k], "%s: dim %d is %lld, not %lld", name, k,
                              (long long)d[k], (long long)want[k]);
            return;
        }
    ck_abort_msg("no layer %s", name);
}

/* A mask of constants, as Swin builds its shifted windows' one (2-D blocks
 * joined, compared, selected), is folded at import: no plain step is left,
 * where the join of constants once ran as a concat layer and the Equal and
 * Where after it as reference calls on every run. */
START_TEST(net_onnx_constant_mask_folds_at_import)
{
    char *p = model("constmask.onnx");
    assert_no_plain_steps(p);
    free(p);
}
END_TEST

START_TEST(net_onnx_folds_shape_arithmetic_and_infers_shape_ops)
{
    char *p = model("shapes.onnx");
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    /* Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) is [2, 48]. */
    const int64_t flat[2] = {2, 48}, proj[2] = {2, 10}, soft[3] = {2, 2, 4}, sq[3] = {2, 4, 4};
    layer_shape_is(net, "flat", 2, flat);
    layer_shape_is(net, "proj", 2, proj);
    layer_shape_is(net, "softmax", 3, soft);   /* Slice [4:] of 8, Split [2, 4] */
    layer_shape_is(net, "squeeze", 3, sq);
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    expect_t e = {0};
    exp_dense(&e, 2, 10, 48, "");
    exp_add(&e, "{\"op\":\"softmax\",\"shape\":[2,8]}");   /* opset 11: flattened at axis 1 */
    check_tasks(t, &e, "shapes.onnx");
    ck_assert_int_eq(t->nissues, 0);
    exp_free(&e);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(p);
}
END_TEST

/* fuzz_onnx's reproducer of an int64 multiplication overflowing in folded
 * shape arithmetic (undefined behaviour: the sanitizer build fails it on the
 * old code) imports cleanly; int64 arithmetic that overflows makes the node
 * unsupported. */
/* Parse fuzz/corpus/onnx/<name>: it must import (must_import) or else be
 * imported or refused with a message. */
static void parse_fuzz_reproducer(const char *name, int must_import)
{
    const char *src = getenv("KT_SOURCE_ROOT");
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz/corpus/onnx/%s", src ? src : ".", name);
    size_t len = 0;
    char *data = kt_file_read(path, &len);
    ck_assert_msg(data != NULL, "%s: %s", path, kt_err_msg());
    kt_net_t *net = kt_net_onnx_parse(data, len, NULL, 0, 0);
    ck_assert_msg(net != NULL || (!must_import && *kt_err_msg()), "%s: %s", name, kt_err_msg());
    kt_net_free(net);
    free(data);
}

START_TEST(net_onnx_folded_int_overflow_imports_without_undefined_behaviour)
{
    parse_fuzz_reproducer("regress-int-overflow-mul.onnx", 1);
}
END_TEST

/* fuzz_onnx's reproducer of a Split whose sizes overflow int64 when summed
 * (undefined behaviour: the sanitizer build fails it on the old code): the
 * model imports with that split an unsupported layer, or is refused with a
 * message. */
START_TEST(net_onnx_split_size_overflow_imports_without_undefined_behaviour)
{
    parse_fuzz_reproducer("regress-split-size-overflow", 0);
}
END_TEST

static void expect_reject(const void *data, size_t len, const char *what)
{
    kt_net_t *net = kt_net_onnx_parse(data, len, NULL, 0, 0);
    ck_assert_msg(net == NULL, "%s was accepted", what);
    ck_assert_msg(strstr(kt_err_msg(), "ONNX") != NULL, "%s: message '%s'", what, kt_err_msg());
}

START_TEST(net_onnx_rejects_truncated_and_random_files)
{
    /* Random bytes (a fixed LCG, so failures reproduce). */
    unsigned char buf[4096];
    uint32_t s = 12345;
    for (int round = 0; round < 64; round++) {
        size_t len = 1 + (size_t)(round * 61) % sizeof(buf);
        for (size_t i = 0; i < len; i++) {
            s = s * 1664525u + 1013904223u;
            buf[i] = (unsigned char)(s >> 24);
        }
        expect_reject(buf, len, "random bytes");
    }
    expect_reject("", 0, "an empty file");
    expect_reject("\x08\x07", 2, "a model with only ir_version");
    char *p = model("cnn.onnx");
    size_t len = 0;
    char *data = kt_file_read(p, &len);
    ck_assert_ptr_nonnull(data);
    const size_t cuts[] = {1, 7, 40, len / 5, len / 3, len / 2, 2 * len / 3, len - 200, len - 9,
                           len - 2, len - 1};
    for (size_t i = 0; i < KT_ARRAY_LEN(cuts); i++) {
        char what[64];
        snprintf(what, sizeof(what), "cnn.onnx cut at %zu of %zu", cuts[i], len);
        expect_reject(data, cuts[i], what);
    }
    /* Flipped bytes: rejected or imported, never a crash. */
    for (size_t off = 3; off < len; off += len / 23 + 1) {
        char *copy = malloc(len);
        memcpy(copy, data, len);
        copy[off] ^= 0x5a;
        kt_net_t *net = kt_net_onnx_parse(copy, len, NULL, 0, 0);
        if (net) {
            kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
            ck_assert_ptr_nonnull(t);
            kt_net_tasks_free(t);
            kt_net_free(net);
        } else {
            ck_assert_int_gt((int)strlen(kt_err_msg()), 10);
        }
        free(copy);
    }
    ck_assert_ptr_null(kt_net_onnx_load("/nonexistent.onnx", NULL, 0, 0));
    free(data);
    free(p);
}
END_TEST

/* ---- constant parameters ---------------------------------------------------------- */

static const char *const param_roles[] = {"weight", "bias", "gamma", "beta", "mean", "var",
                                          "value"};

/* Compare the parameters of `net` with MODEL.params.json written by
 * make_models.py: every layer whose op is listed in "ops", in network order,
 * must carry exactly the listed roles with exactly the listed float32 values
 * (and the epsilon when given). */
static void check_params(const kt_net_t *net, const char *json_path, const char *what)
{
    json_error_t jerr;
    json_t *root = json_load_file(json_path, 0, &jerr);
    ck_assert_msg(root != NULL, "%s: %s", json_path, jerr.text);
    json_t *ops = json_object_get(root, "ops"), *layers = json_object_get(root, "layers");
    ck_assert(json_is_array(ops) && json_is_array(layers));
    ck_assert_int_eq(kt_net_has_params(net), 1);
    size_t k = 0;
    for (int i = 0; i < kt_net_num_layers(net); i++) {
        const char *op = kt_net_layer_op(net, i);
        int listed = 0;
        for (size_t j = 0; j < json_array_size(ops); j++)
            listed |= strcmp(op, json_string_value(json_array_get(ops, j))) == 0;
        if (!listed)
            continue;
        ck_assert_msg(k < json_array_size(layers), "%s: layer %d '%s' (%s) is not expected",
                      what, i, kt_net_layer_name(net, i), op);
        json_t *want = json_array_get(layers, k++);
        const char *name = kt_net_layer_name(net, i);
        ck_assert_msg(strcmp(op, json_string_value(json_object_get(want, "op"))) == 0,
                      "%s: layer %d '%s' is %s, expected %s", what, i, name, op,
                      json_string_value(json_object_get(want, "op")));
        json_t *wname = json_object_get(want, "name");
        if (wname)
            ck_assert_str_eq(name, json_string_value(wname));
        for (size_t r = 0; r < KT_ARRAY_LEN(param_roles); r++) {
            json_t *v = json_object_get(want, param_roles[r]);
            int64_t n = -1;
            const float *got = kt_net_layer_param(net, i, param_roles[r], &n);
            if (!v) {
                ck_assert_msg(got == NULL, "%s: layer '%s' has an unexpected '%s'", what, name,
                              param_roles[r]);
                continue;
            }
            ck_assert_msg(got != NULL, "%s: layer '%s' has no '%s'", what, name, param_roles[r]);
            ck_assert_msg(n == (int64_t)json_array_size(v), "%s: layer '%s' '%s': %lld values, "
                          "expected %zu", what, name, param_roles[r], (long long)n,
                          json_array_size(v));
            for (int64_t j = 0; j < n; j++) {
                float e = (float)json_number_value(json_array_get(v, (size_t)j));
                ck_assert_msg(got[j] == e, "%s: layer '%s' '%s'[%lld] = %.9g, expected %.9g",
                              what, name, param_roles[r], (long long)j, got[j], e);
            }
        }
        json_t *eps = json_object_get(want, "eps");
        if (eps)
            ck_assert_msg(kt_net_layer_eps(net, i) == json_number_value(eps),
                          "%s: layer '%s' eps %.9g, expected %.9g", what, name,
                          kt_net_layer_eps(net, i), json_number_value(eps));
    }
    ck_assert_msg(k == json_array_size(layers), "%s: %zu of %zu expected layers found", what, k,
                  json_array_size(layers));
    json_decref(root);
}

static int layer_named(const kt_net_t *net, const char *name)
{
    for (int i = 0; i < kt_net_num_layers(net); i++)
        if (strcmp(kt_net_layer_name(net, i), name) == 0)
            return i;
    ck_abort_msg("no layer named '%s'", name);
    return -1;
}

START_TEST(net_builtin_and_file_networks_carry_no_params)
{
    kt_net_t *nets[2] = {kt_net_builtin("resnet-18", 1, 0), NULL};
    char *path = source_path("tests/net/cnn.json");
    nets[1] = kt_net_load_file(path);
    free(path);
    for (int k = 0; k < 2; k++) {
        kt_net_t *net = nets[k];
        ck_assert_ptr_nonnull(net);
        ck_assert_int_eq(kt_net_has_params(net), 0);
        int bn = 0;
        for (int i = 0; i < kt_net_num_layers(net); i++) {
            int64_t n = 7;
            for (size_t r = 0; r < KT_ARRAY_LEN(param_roles); r++)
                ck_assert_ptr_null(kt_net_layer_param(net, i, param_roles[r], &n));
            ck_assert_int_eq(n, 0);
            const char *op = kt_net_layer_op(net, i);
            if (strcmp(op, "batch_norm") == 0 || strcmp(op, "layer_norm") == 0) {
                ck_assert(kt_net_layer_eps(net, i) == 1e-5);
                bn++;
            } else {
                ck_assert(kt_net_layer_eps(net, i) == -1.0);
            }
        }
        ck_assert_int_gt(bn, 0);
        ck_assert(kt_net_layer_eps(net, -1) == -1.0);
        ck_assert(kt_net_layer_eps(net, kt_net_num_layers(net)) == -1.0);
        kt_net_free(net);
    }
    ck_assert_int_eq(kt_net_has_params(NULL), 0);
    ck_assert_ptr_null(kt_net_layer_param(NULL, 0, "weight", NULL));
}
END_TEST

START_TEST(net_onnx_keeps_parameters_in_canonical_layouts)
{
    char *p = model("params.onnx"), *j = model("params.params.json");
    if (!p || !j) {
        free(p);
        free(j);
        return;
    }
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    check_params(net, j, "params.onnx");
    /* A few values stated here, not only by the script: the folded scalar,
     * the inverted divisor, the broadcast Gemm C and the epsilons as float32. */
    int64_t n;
    const float *v = kt_net_layer_param(net, layer_named(net, "mulc"), "value", &n);
    ck_assert(n == 1 && v[0] == 2.5f);
    v = kt_net_layer_param(net, layer_named(net, "divc"), "value", &n);
    ck_assert(n == 3 && v[0] == 0.5f && v[1] == 0.25f && v[2] == (float)(1.0 / (double)0.3f));
    v = kt_net_layer_param(net, layer_named(net, "gemm_t1"), "bias", &n);
    ck_assert_int_eq(n, 6);
    for (int k = 0; k < 6; k++)
        ck_assert(v[k] == 0.75f);
    ck_assert_ptr_nonnull(kt_net_layer_param(net, layer_named(net, "gemm_t0"), "weight", &n));
    ck_assert_int_eq(n, 48 * 100);
    ck_assert(kt_net_layer_eps(net, layer_named(net, "bn")) == (double)1e-3f);
    ck_assert(kt_net_layer_eps(net, layer_named(net, "ln")) == (double)1e-4f);
    ck_assert(kt_net_layer_eps(net, layer_named(net, "conv")) == -1.0);
    ck_assert_ptr_null(kt_net_layer_param(net, layer_named(net, "conv"), "gamma", &n));
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(kt_net_layer_param(net, layer_named(net, "flat"), "value", NULL));
    ck_assert_ptr_null(kt_net_layer_param(net, kt_net_num_layers(net), "weight", NULL));
    ck_assert_ptr_null(kt_net_layer_param(net, 1, NULL, NULL));
    kt_net_free(net);
    free(p);
    free(j);
}
END_TEST

START_TEST(net_onnx_torch_parameters_match_the_modules)
{
    static const char *const names[] = {"cnn_bn", "block"};
    for (size_t k = 0; k < KT_ARRAY_LEN(names); k++) {
        char file[64], jfile[64];
        snprintf(file, sizeof(file), "%s.onnx", names[k]);
        snprintf(jfile, sizeof(jfile), "%s.params.json", names[k]);
        char *p = model(file), *j = model(jfile);
        if (p && j) {
            kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
            ck_assert_msg(net != NULL, "%s", kt_err_msg());
            check_params(net, j, file);
            kt_net_free(net);
        }
        free(p);
        free(j);
    }
    /* Batch norms folded by the exporter: every conv and dense carries its
     * weight and the bias the folding made. */
    static const char *const folded[] = {"cnn.onnx", "mobile.onnx"};
    for (size_t k = 0; k < KT_ARRAY_LEN(folded); k++) {
        char *p = model(folded[k]);
        if (!p)
            continue;
        kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
        ck_assert_msg(net != NULL, "%s", kt_err_msg());
        ck_assert_int_eq(kt_net_has_params(net), 1);
        int anchors = 0;
        for (int i = 0; i < kt_net_num_layers(net); i++) {
            const char *op = kt_net_layer_op(net, i);
            if (strcmp(op, "conv2d") != 0 && strcmp(op, "dense") != 0)
                continue;
            int64_t dims[KT_NET_MAX_DIMS], nw = 0, nb = 0;
            ck_assert_int_ge(kt_net_layer_shape(net, i, dims), 2);
            ck_assert_ptr_nonnull(kt_net_layer_param(net, i, "weight", &nw));
            ck_assert_ptr_nonnull(kt_net_layer_param(net, i, "bias", &nb));
            ck_assert_int_eq(nb, dims[1]);   /* output channels or units */
            ck_assert_int_eq(nw % nb, 0);
            anchors++;
        }
        ck_assert_int_ge(anchors, 4);   /* cnn: 3 convs and fc; mobile: 4 and fc */
        kt_net_free(net);
        free(p);
    }
}
END_TEST

START_TEST(net_onnx_external_weights_are_read_or_said_missing)
{
    char *p = model("external.onnx");
    if (!p)
        return;
    kt_net_t *net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_net_has_params(net), 0);
    ck_assert_ptr_null(kt_net_layer_param(net, layer_named(net, "conv"), "weight", NULL));
    /* which tensor, which file, why: what `ktune build` tells the user */
    const char *note = kt_net_params_note(net);
    ck_assert_msg(note && strstr(note, "tensor 'w'") && strstr(note, "weights.bin") &&
                  strstr(note, "No such file"), "%s", note ? note : "(none)");
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ntasks, 1);
    kt_net_tasks_free(t);
    kt_net_free(net);
    free(p);
    /* Present, at an offset into its file: the values are the layer's. */
    p = model("ext_present.onnx");
    net = kt_net_onnx_load(p, NULL, 0, 0);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_net_has_params(net), 1);
    ck_assert_ptr_null(kt_net_params_note(net));
    int64_t nw = 0;
    const float *w = kt_net_layer_param(net, layer_named(net, "conv"), "weight", &nw);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(nw, 8);
    float sum = 0;
    for (int i = 0; i < 8; i++)
        sum += w[i];
    ck_assert_float_eq(sum, -1.0f);   /* -1, -0.75, ..., 0.75 in whatever layout */
    kt_net_free(net);
    /* The same bytes parsed without a file: no directory to read them from. */
    size_t len = 0;
    char *bytes = kt_file_read(p, &len);
    ck_assert_ptr_nonnull(bytes);
    net = kt_net_onnx_parse(bytes, len, NULL, 0, 0);
    ck_assert_ptr_nonnull(net);
    ck_assert_int_eq(kt_net_has_params(net), 0);
    ck_assert_ptr_nonnull(strstr(kt_net_params_note(net), "not read from a file"));
    kt_net_free(net);
    free(bytes);
    free(p);
    /* A location outside the model's directory is refused, not read. */
    p = model("ext_escape.onnx");
    ck_assert_ptr_null(kt_net_onnx_load(p, NULL, 0, 0));
    ck_assert_msg(strstr(kt_err_msg(), "outside the model's directory"), "%s", kt_err_msg());
    free(p);
    /* A parameter shorter than its shape is malformed, whichever field holds it. */
    static const char *const shorts[] = {"short_raw.onnx", "short_floats.onnx"};
    for (size_t k = 0; k < KT_ARRAY_LEN(shorts); k++) {
        p = model(shorts[k]);
        if (!p)
            continue;
        ck_assert_ptr_null(kt_net_onnx_load(p, NULL, 0, 0));
        const char *msg = kt_err_msg();
        ck_assert_msg(strstr(msg, "ONNX") && strstr(msg, "initializer 'b'") &&
                          (strstr(msg, "raw_data holds 12 bytes") ||
                           strstr(msg, "holds 3 values")),
                      "%s: message '%s'", shorts[k], msg);
        free(p);
    }
}
END_TEST

/* Layout conversions of a plan whose values' layouts it names: each step
 * KT_PLAN_LAYOUT counted. */
static int layout_steps(const kt_net_plan_t *p)
{
    int n = 0;
    for (int k = 0; k < p->nsteps; k++)
        n += p->steps[k].kind == KT_PLAN_LAYOUT;
    return n;
}

/* The NHWC plan of a network file's text, its network and tasks in *net, *t. */
static kt_net_plan_t *nhwc_plan(const char *text, kt_net_t **net, kt_net_tasks_t **t)
{
    *net = kt_net_parse_json(text);
    ck_assert_msg(*net != NULL, "%s", kt_err_msg());
    *t = kt_net_extract(*net, KT_NET_NHWC);
    ck_assert_msg(*t != NULL, "%s", kt_err_msg());
    kt_net_plan_t *p = kt_net_plan(*net, *t, KT_NET_NHWC, 1);
    ck_assert_msg(p != NULL, "%s", kt_err_msg());
    return p;
}

/* The same for the ONNX model `name` of make_models.py. */
static kt_net_plan_t *onnx_nhwc_plan(const char *name, kt_net_t **net, kt_net_tasks_t **t)
{
    char *f = model(name);
    *net = kt_net_onnx_load(f, NULL, 0, 0);
    ck_assert_msg(*net != NULL, "%s: %s", f, kt_err_msg());
    free(f);
    *t = kt_net_extract(*net, KT_NET_NHWC);
    ck_assert_msg(*t != NULL, "%s", kt_err_msg());
    kt_net_plan_t *p = kt_net_plan(*net, *t, KT_NET_NHWC, 1);
    ck_assert_msg(p != NULL, "%s", kt_err_msg());
    return p;
}

/* A join of convolutions' outputs is made where they are (NHWC), and the
 * next convolution reads it there: the network's only conversions are at
 * its input and output. A join whose inputs are mostly in the model's
 * layout stays there. */
START_TEST(net_plan_joins_nhwc_convolutions_without_converting_them)
{
    static const char *const text =
        "{\"name\": \"cat\", \"layers\": [\n"
        " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 3, 6, 6]},\n"
        " {\"name\": \"a\", \"op\": \"conv2d\", \"channels\": 4, \"kernel\": [3, 3],"
        " \"padding\": [1, 1], \"inputs\": [\"x\"]},\n"
        " {\"name\": \"b\", \"op\": \"conv2d\", \"channels\": 2, \"kernel\": [1, 1],"
        " \"inputs\": [\"x\"]},\n"
        " {\"name\": \"cc\", \"op\": \"concat\", \"axis\": 1, \"inputs\": [\"a\", \"b\"]},\n"
        " {\"name\": \"c\", \"op\": \"conv2d\", \"channels\": 5, \"kernel\": [1, 1]}\n"
        "]}\n";
    kt_net_t *net;
    kt_net_tasks_t *t;
    kt_net_plan_t *p = nhwc_plan(text, &net, &t);
    int concat = -1;
    for (int k = 0; k < p->nsteps; k++)
        if (p->steps[k].kind == KT_PLAN_CONCAT)
            concat = k;
    ck_assert_int_ge(concat, 0);
    ck_assert_int_eq(p->values[p->steps[concat].out].nhwc, 1);
    ck_assert_int_eq(layout_steps(p), 2);   /* the input's and the output's */
    kt_net_plan_free(p);
    kt_net_tasks_free(t);
    kt_net_free(net);

    /* two of three inputs in the model's layout: the join is there */
    static const char *const mixed =
        "{\"name\": \"mix\", \"layers\": [\n"
        " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 3, 6, 6]},\n"
        " {\"name\": \"a\", \"op\": \"conv2d\", \"channels\": 4, \"kernel\": [3, 3],"
        " \"padding\": [1, 1], \"inputs\": [\"x\"]},\n"
        " {\"name\": \"s\", \"op\": \"sigmoid\", \"inputs\": [\"x\"]},\n"
        " {\"name\": \"h\", \"op\": \"tanh\", \"inputs\": [\"x\"]},\n"
        " {\"name\": \"cc\", \"op\": \"concat\", \"axis\": 1, \"inputs\": [\"s\", \"a\", \"h\"]}\n"
        "]}\n";
    p = nhwc_plan(mixed, &net, &t);
    for (int k = 0; k < p->nsteps; k++)
        if (p->steps[k].kind == KT_PLAN_CONCAT)
            ck_assert_int_eq(p->values[p->steps[k].out].nhwc, 0);
    kt_net_plan_free(p);
    kt_net_tasks_free(t);
    kt_net_free(net);
}
END_TEST

/* torchvision's ShuffleNet v2 units run NHWC from end to end: each channel
 * shuffle is one transpose of the NHWC value (its reshapes are aliases),
 * the channel halves are slices of NHWC memory, and the only conversions
 * are the input's and the output's. */
START_TEST(net_onnx_shuffle_units_run_nhwc_between_input_and_output)
{
    kt_net_t *net;
    kt_net_tasks_t *t;
    kt_net_plan_t *p = onnx_nhwc_plan("shuffle.onnx", &net, &t);
    int shuffles = 0, slices = 0;
    for (int k = 0; k < p->nsteps; k++) {
        const kt_plan_step_t *s = &p->steps[k];
        const kt_plan_value_t *o = &p->values[kt_net_plan_root(p, s->out)];
        if (s->kind == KT_PLAN_TRANSPOSE) {
            /* [N * H * W, 2, C / 2] -> [N * H * W, C / 2, 2] of the NHWC value */
            const kt_plan_value_t *x = &p->values[s->in[0].id];
            ck_assert_int_eq(o->nhwc, 1);
            ck_assert_int_eq(x->ndim, 3);
            ck_assert_int_eq(x->dims[1], 2);
            ck_assert_int_eq(x->dims[2], 16);
            ck_assert_int_eq(s->perm[1], 2);
            shuffles++;
        }
        if (s->kind == KT_PLAN_REFOP) {
            ck_assert_int_eq(o->nhwc, 1);
            slices++;
        }
    }
    ck_assert_int_eq(shuffles, 2);
    ck_assert_int_eq(slices, 2);
    ck_assert_int_eq(layout_steps(p), 2);
    kt_net_plan_free(p);
    kt_net_tasks_free(t);
    kt_net_free(net);
}
END_TEST

/* EfficientNet's block: each x * Sigmoid(x) is a silu epilogue of the
 * convolution before it, no plain step is left, and the excitation's
 * broadcast product runs on the NHWC values in memory order, so the only
 * conversions are the input's and the output's. */
START_TEST(net_onnx_silu_fuses_and_the_excitation_product_stays_nhwc)
{
    kt_net_t *net;
    kt_net_tasks_t *t;
    kt_net_plan_t *p = onnx_nhwc_plan("mbconv.onnx", &net, &t);
    char *plain = kt_net_plain_steps_text(net);
    ck_assert_msg(strcmp(plain, "") == 0, "%s", plain);
    free(plain);
    int silu = 0;
    for (int i = 0; i < t->ntasks; i++)
        silu += strstr(kt_workload_json(t->tasks[i].wl), "\"silu\"") != NULL;
    ck_assert_int_eq(silu, 3);
    int binary = 0;
    for (int k = 0; k < p->nsteps; k++) {
        const kt_plan_step_t *s = &p->steps[k];
        ck_assert_int_ne(s->kind, KT_PLAN_UNARY);
        if (s->kind == KT_PLAN_BINARY) {
            ck_assert_int_eq(p->values[kt_net_plan_root(p, s->out)].nhwc, 1);
            binary++;
        }
    }
    ck_assert_int_eq(binary, 1);
    ck_assert_int_eq(layout_steps(p), 2);
    kt_net_plan_free(p);
    kt_net_tasks_free(t);
    kt_net_free(net);
}
END_TEST

/* ConvNeXt's block: a convolution's output permuted to channels-last for a
 * layer norm and two linears, then permuted back and added to the block's
 * input. Both permutes are aliases of NHWC memory: no transpose step and no
 * conversion but the input's and the output's. */
START_TEST(net_plan_channels_last_permutes_of_nhwc_values_are_aliases)
{
    static const char *const text =
        "{\"name\": \"cnblock\", \"layers\": [\n"
        " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 3, 6, 5]},\n"
        " {\"name\": \"a\", \"op\": \"conv2d\", \"channels\": 8, \"kernel\": [3, 3],"
        " \"padding\": [1, 1]},\n"
        " {\"name\": \"d\", \"op\": \"conv2d\", \"channels\": 8, \"kernel\": [3, 3],"
        " \"padding\": [1, 1], \"groups\": 8},\n"
        " {\"name\": \"p\", \"op\": \"transpose\", \"perm\": [0, 2, 3, 1]},\n"
        " {\"name\": \"ln\", \"op\": \"layer_norm\"},\n"
        " {\"name\": \"f1\", \"op\": \"dense\", \"units\": 16},\n"
        " {\"name\": \"g\", \"op\": \"gelu\"},\n"
        " {\"name\": \"f2\", \"op\": \"dense\", \"units\": 8},\n"
        " {\"name\": \"q\", \"op\": \"transpose\", \"perm\": [0, 3, 1, 2]},\n"
        " {\"name\": \"r\", \"op\": \"add\", \"inputs\": [\"q\", \"a\"]},\n"
        " {\"name\": \"c\", \"op\": \"conv2d\", \"channels\": 4, \"kernel\": [1, 1]}\n"
        "]}\n";
    kt_net_t *net;
    kt_net_tasks_t *t;
    kt_net_plan_t *p = nhwc_plan(text, &net, &t);
    for (int k = 0; k < p->nsteps; k++)
        ck_assert_msg(p->steps[k].kind != KT_PLAN_TRANSPOSE, "step %d: %s", k,
                      p->steps[k].name);
    ck_assert_int_eq(layout_steps(p), 2);
    kt_net_plan_free(p);
    kt_net_tasks_free(t);
    kt_net_free(net);
}
END_TEST

START_TEST(net_input_spec_parses_and_rejects)
{
    kt_net_input_t in;
    ck_assert_int_eq(kt_net_parse_input_spec("input.1=1x3x224x224", &in), 0);
    ck_assert_str_eq(in.name, "input.1");
    ck_assert_int_eq(in.ndim, 4);
    ck_assert_int_eq(in.dims[3], 224);
    ck_assert_int_lt(kt_net_parse_input_spec("x", &in), 0);
    ck_assert_int_lt(kt_net_parse_input_spec("=1x2", &in), 0);
    ck_assert_int_lt(kt_net_parse_input_spec("x=1x0", &in), 0);
    ck_assert_int_lt(kt_net_parse_input_spec("x=1x", &in), 0);
    ck_assert_int_lt(kt_net_parse_input_spec("x=1xyz", &in), 0);
    ck_assert_int_lt(kt_net_parse_input_spec("x=1x1x1x1x1x1x1x1x1", &in), 0);
}
END_TEST

/* Found by fuzz_onnx (fuzz/corpus/onnx/regress-cast-absent-input): a Cast
 * of constants whose input name is "" (absent) read the constant before the
 * table. It must be an error or an unsupported layer, never a bad read
 * (ASan in deploy/fuzz.sh replays the same bytes). */
START_TEST(net_onnx_fold_with_an_absent_input_is_safe)
{
    static const unsigned char model[] = {
        0x08, 0x08, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x11, 0x3a, 0xdf, 0x01, 0x0a,
        0x39, 0x0a, 0x00, 0xea, 0x0a, 0x01, 0x77, 0x12, 0x01, 0x63, 0x22, 0x04,
        0x43, 0x61, 0x73, 0x74, 0x2a, 0x15, 0x0a, 0x0c, 0x6b, 0x65, 0x72, 0x6c,
        0x6e, 0x5f, 0x65, 0x68, 0x70, 0x73, 0x61, 0x65, 0x40, 0x03, 0x40, 0x03,
        0xa0, 0x01, 0x07, 0x2a, 0x11, 0x0a, 0x04, 0x70, 0x61, 0x64, 0x73, 0x40,
        0x01, 0x40, 0x01, 0x40, 0x01, 0x40, 0x01, 0xa0, 0x01, 0x07, 0x0a, 0x0c,
        0x0a, 0x01, 0x63, 0x12, 0x01, 0x79, 0x22, 0x04, 0x52, 0x65, 0x6c, 0x75,
        0x12, 0x01, 0x67, 0x2a, 0x57, 0x08, 0x02, 0x08, 0x01, 0x08, 0x03, 0x08,
        0x03, 0x10, 0x01, 0x42, 0x01, 0x77, 0x4a, 0x48, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x36, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d,
        0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0x5a, 0x1b, 0x0a, 0x01,
        0x78, 0x12, 0x16, 0x0a, 0x14, 0x08, 0x01, 0x12, 0x10, 0x0a, 0x02, 0x08,
        0x01, 0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x08, 0x04, 0x0a, 0x02, 0x08,
        0x04, 0x62, 0x1b, 0x0a, 0x03, 0x79, 0x12, 0x16, 0x0a, 0x14, 0x08, 0x01,
        0x12, 0x10, 0x0a, 0x02, 0xcc, 0x3d, 0xcd, 0xcc, 0xcc, 0x3d, 0xcd, 0xcc,
        0xcc, 0xcc, 0x3d, 0x02, 0x08, 0x04,
    };
    kt_net_t *net = kt_net_onnx_parse(model, sizeof model, NULL, 0, 1);
    if (net) {
        ck_assert_int_ge(kt_net_num_layers(net), 1);
        kt_net_free(net);
    } else {
        ck_assert_str_ne(kt_err_msg(), "");
    }
}
END_TEST

/* Found by fuzz_onnx (fuzz/corpus/onnx/regress-dims-overflow): two
 * dimensions under 2^40 each whose product overflows int64 passed the
 * element limit. An initializer of 2^39 x 2^39 must be refused by it. */
START_TEST(net_onnx_huge_initializer_dims_do_not_overflow)
{
    static const unsigned char model[] = {
        0x08, 0x08, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x11, 0x3a, 0x52, 0x0a, 0x0e,
        0x0a, 0x01, 0x78, 0x0a, 0x01, 0x77, 0x12, 0x01, 0x79, 0x22, 0x03, 0x41,
        0x64, 0x64, 0x12, 0x01, 0x67, 0x2a, 0x13, 0x08, 0x80, 0x80, 0x80, 0x80,
        0x80, 0x10, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10, 0x10, 0x01, 0x42,
        0x01, 0x77, 0x5a, 0x13, 0x0a, 0x01, 0x78, 0x12, 0x0e, 0x0a, 0x0c, 0x08,
        0x01, 0x12, 0x08, 0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x08, 0x04, 0x62,
        0x13, 0x0a, 0x01, 0x79, 0x12, 0x0e, 0x0a, 0x0c, 0x08, 0x01, 0x12, 0x08,
        0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x08, 0x04,
    };
    kt_net_t *net = kt_net_onnx_parse(model, sizeof model, NULL, 0, 1);
    ck_assert_msg(net == NULL, "a 2^78-element initializer was accepted");
    ck_assert_msg(strstr(kt_err_msg(), "more than 2^40 elements"), "%s", kt_err_msg());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net");
    TCase *tb = tcase_create("builtin");
    tcase_set_timeout(tb, 120);
    tcase_add_test(tb, net_resnet18_nhwc_tasks_follow_the_architecture);
    tcase_add_test(tb, net_resnet18_nhwc_has_every_direct_conv_and_dense_of_seed_004);
    tcase_add_test(tb, net_resnet50_and_resnet34_tasks_follow_the_architecture);
    tcase_add_test(tb, net_resnet_nchw_uses_nchw_operators_for_every_layer);
    tcase_add_test(tb, net_mobilenet_v2_tasks_follow_the_architecture);
    tcase_add_test(tb, net_bert_base_has_per_layer_tasks_weighted_by_layers);
    tcase_add_test(tb, net_winograd_alternatives_follow_the_direct_tasks);
    tcase_add_test(tb, net_vgg16_merges_identical_convs);
    tcase_add_test(tb, net_builtin_rejects_unknown_names_and_sizes);
    tcase_add_test(tb, net_json_lists_workload_weight_key_and_desc);
    tcase_add_test(tb, net_text_listing_has_header_dag_and_weight);
    tcase_add_test(tb, net_extract_runs_from_several_threads);
    tcase_add_test(tb, net_cli_prints_tasks_and_exit_statuses);
    suite_add_tcase(s, tb);

    TCase *tf = tcase_create("file");
    tcase_add_test(tf, net_file_small_cnn_gives_the_expected_tasks);
    tcase_add_test(tf, net_file_errors_name_the_layer_and_field);
    tcase_add_test(tf, net_file_fuses_new_epilogues_and_reports_the_rest);
    tcase_add_test(tf, net_input_spec_parses_and_rejects);
    tcase_add_test(tf, net_plan_joins_nhwc_convolutions_without_converting_them);
    tcase_add_test(tf, net_plan_channels_last_permutes_of_nhwc_values_are_aliases);
    tcase_add_test(tf, net_builtin_and_file_networks_carry_no_params);
    suite_add_tcase(s, tf);

    TCase *to = tcase_create("onnx");
    tcase_set_timeout(to, 240);
    tcase_add_unchecked_fixture(to, onnx_setup, onnx_teardown);
    tcase_add_test(to, net_onnx_cnn_matches_its_network_file);
    tcase_add_test(to, net_onnx_fold_with_an_absent_input_is_safe);
    tcase_add_test(to, net_onnx_huge_initializer_dims_do_not_overflow);
    tcase_add_test(to, net_onnx_transformer_block_matches_its_network_file);
    tcase_add_test(to, net_onnx_mobile_cnn_matches_its_network_file);
    tcase_add_test(to, net_onnx_hardswish_and_hardsigmoid_fuse_at_opsets_13_and_17);
    tcase_add_test(to, net_onnx_packed_projection_becomes_one_dense_task_per_part);
    tcase_add_test(to, net_onnx_shuffle_units_run_nhwc_between_input_and_output);
    tcase_add_test(to, net_onnx_silu_fuses_and_the_excitation_product_stays_nhwc);
    tcase_add_test(to, net_onnx_reports_unsupported_nodes_and_lists_the_rest);
    tcase_add_test(to, net_onnx_symbolic_inputs_need_a_shape);
    tcase_add_test(to, net_onnx_layer_norm_pattern_and_two_inputs);
    tcase_add_test(to, net_onnx_folds_shape_arithmetic_and_infers_shape_ops);
    tcase_add_test(to, net_onnx_constant_mask_folds_at_import);
    tcase_add_test(to, net_onnx_folded_int_overflow_imports_without_undefined_behaviour);
    tcase_add_test(to, net_onnx_split_size_overflow_imports_without_undefined_behaviour);
    tcase_add_test(to, net_onnx_rejects_truncated_and_random_files);
    tcase_add_test(to, net_onnx_keeps_parameters_in_canonical_layouts);
    tcase_add_test(to, net_onnx_torch_parameters_match_the_modules);
    tcase_add_test(to, net_onnx_external_weights_are_read_or_said_missing);
    suite_add_tcase(s, to);

    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
