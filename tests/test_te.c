/* Suite "te": the compute DAG, operator library, workload JSON and keys, and
 * the codegen pieces built on them (expression C, reference kernels, the
 * verification harness). Reference kernels are checked against values the
 * test computes independently in plain C. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/verify.h"
#include "te/ops.h"
#include "te/te.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/util.h"

static const char *const forms[] = {
    "{\"op\": \"matmul\", \"M\": 512, \"N\": 512, \"K\": 512}",
    "{\"op\": \"dense\", \"M\": 1, \"N\": 1000, \"K\": 512, \"epilogue\": [\"bias_add\", \"relu\"]}",
    "{\"op\": \"batch_matmul\", \"B\": 12, \"M\": 128, \"N\": 64, \"K\": 128}",
    "{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 56, \"W\": 56, \"CI\": 64, \"CO\": 64, \"KH\": 3, "
    "\"KW\": 3, \"stride\": [1, 1], \"padding\": [1, 1], \"dilation\": [1, 1], \"epilogue\": "
    "[\"bias_add\", \"relu\", \"add\"]}",
    "{\"op\": \"conv2d_nchw\", \"N\": 1, \"H\": 56, \"W\": 56, \"CI\": 64, \"CO\": 64, \"KH\": 3, "
    "\"KW\": 3, \"stride\": [1, 1], \"padding\": [1, 1], \"dilation\": [1, 1], \"epilogue\": "
    "[\"bias_add\", \"relu\", \"add\"]}",
    "{\"op\": \"depthwise_conv2d_nhwc\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 32, \"KH\": 3, "
    "\"KW\": 3, \"stride\": [1, 1], \"padding\": [1, 1], \"dilation\": [1, 1]}",
    "{\"op\": \"pool2d\", \"kind\": \"max\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 64, \"KH\": 3, "
    "\"KW\": 3, \"stride\": [2, 2], \"padding\": [1, 1]}",
    "{\"op\": \"pool2d\", \"kind\": \"avg\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 64, \"KH\": 3, "
    "\"KW\": 3, \"stride\": [2, 2], \"padding\": [1, 1]}",
    "{\"op\": \"global_avg_pool\", \"N\": 1, \"H\": 7, \"W\": 7, \"C\": 512}",
    "{\"op\": \"softmax\", \"shape\": [1, 1000]}",
    "{\"op\": \"layer_norm\", \"shape\": [128, 768]}",
    "{\"op\": \"matmul\", \"M\": 64, \"N\": 32, \"K\": 16, \"layout\": \"NT\"}",
    "{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 9, \"W\": 9, \"CI\": 3, \"CO\": 8, \"KH\": 3, "
    "\"KW\": 3, \"padding\": [1, 0, 2, 1]}",
    "{\"op\": \"group_conv2d_nhwc\", \"N\": 1, \"H\": 14, \"W\": 14, \"CI\": 64, \"CO\": 128, "
    "\"KH\": 3, \"KW\": 3, \"groups\": 4, \"padding\": [1, 1], \"epilogue\": [\"bias_add\", "
    "\"relu6\"]}",
    "{\"op\": \"group_conv2d_nchw\", \"N\": 1, \"H\": 14, \"W\": 14, \"CI\": 64, \"CO\": 64, "
    "\"KH\": 3, \"KW\": 3, \"groups\": 32, \"stride\": [2, 2]}",
    "{\"op\": \"depthwise_conv2d_nchw\", \"N\": 1, \"H\": 56, \"W\": 56, \"C\": 32, \"KH\": 3, "
    "\"KW\": 3, \"multiplier\": 2, \"padding\": [1, 1], \"epilogue\": [\"bias_add\", "
    "{\"op\": \"clip\", \"min\": 0, \"max\": 6}]}",
    "{\"op\": \"pool2d_nchw\", \"kind\": \"avg\", \"N\": 1, \"H\": 56, \"W\": 56, \"C\": 64, "
    "\"KH\": 3, \"KW\": 3, \"stride\": [2, 2], \"padding\": [1, 1], \"epilogue\": [\"relu\"]}",
    "{\"op\": \"global_avg_pool_nchw\", \"N\": 1, \"H\": 7, \"W\": 7, \"C\": 512, "
    "\"epilogue\": [\"sigmoid\", \"multiply_scalar\"]}",
    "{\"op\": \"dense\", \"M\": 4, \"N\": 64, \"K\": 32, \"epilogue\": [\"multiply\", "
    "\"bias_add\", \"tanh\", {\"op\": \"clip\", \"min\": -0.25, \"max\": 0.5}]}",
    "{\"op\": \"pool2d\", \"kind\": \"max\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 64, "
    "\"KH\": 3, \"KW\": 3, \"stride\": [2, 2], \"padding\": [1, 1], \"epilogue\": "
    "[\"bias_add\", \"relu\"]}",
    "{\"op\": \"conv2d_winograd_nhwc\", \"N\": 1, \"H\": 28, \"W\": 28, \"CI\": 128, "
    "\"CO\": 128, \"KH\": 3, \"KW\": 3, \"tile_size\": 4, \"padding\": [1, 1], "
    "\"epilogue\": [\"bias_add\", \"relu\"]}",
};
static const char *const form_ops[] = {
    "matmul", "dense", "batch_matmul", "conv2d_nhwc", "conv2d_nchw", "depthwise_conv2d_nhwc",
    "pool2d", "pool2d", "global_avg_pool", "softmax", "layer_norm", "matmul", "conv2d_nhwc",
    "group_conv2d_nhwc", "group_conv2d_nchw", "depthwise_conv2d_nchw", "pool2d_nchw",
    "global_avg_pool_nchw", "dense", "pool2d", "conv2d_winograd_nhwc",
};

#define MATMUL512_KEY \
    "[\"632d1edd00d42469e8bd00a15a0fa74a\", [512, 512], [512, 512], [512, 512]]"
#define CONV_KEY                                                                  \
    "[\"13c3e3a429897331d5ed4c830fccebb1\", [1, 56, 56, 64], [3, 3, 64, 64], [64], " \
    "[1, 56, 56, 64], [1, 56, 56, 64]]"

/* ---- workloads ----------------------------------------------------------- */

START_TEST(workload_parses_every_documented_form)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(forms); i++) {
        kt_workload_t *w = kt_workload_parse(forms[i]);
        ck_assert_msg(w != NULL, "form %zu: %s", i, kt_err_msg());
        ck_assert_str_eq(kt_workload_op(w), form_ops[i]);
        ck_assert_int_eq(strncmp(kt_workload_key(w), "[\"", 2), 0);
        ck_assert_int_eq((int)strlen(kt_workload_key(w)) > 36, 1);
        ck_assert(kt_workload_flops(w) > 0);
        const kt_dag_t *d = kt_workload_dag(w);
        ck_assert_int_ge(kt_codegen_num_bufs(d), 2);
        kt_workload_free(w);
    }
}
END_TEST

START_TEST(workload_canonical_json_round_trips)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(forms); i++) {
        kt_workload_t *a = kt_workload_parse(forms[i]);
        ck_assert_ptr_nonnull(a);
        kt_workload_t *b = kt_workload_parse(kt_workload_json(a));
        ck_assert_msg(b != NULL, "%s: %s", kt_workload_json(a), kt_err_msg());
        ck_assert_str_eq(kt_workload_json(a), kt_workload_json(b));
        ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
        kt_workload_free(a);
        kt_workload_free(b);
    }
}
END_TEST

START_TEST(workload_written_differently_is_the_same_workload)
{
    const char *pairs[][2] = {
        {"{\"op\":\"matmul\",\"M\":512,\"N\":512,\"K\":512}",
         "{ \"K\" : 512, \"layout\": \"NN\", \"epilogue\": [], \"N\": 512, \"M\": 512, "
         "\"op\": \"matmul\" }"},
        {"{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":56,\"W\":56,\"CI\":64,\"CO\":64,\"KH\":3,\"KW\":3,"
         "\"padding\":[1,1]}",
         "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":56,\"W\":56,\"CI\":64,\"CO\":64,\"KH\":3,\"KW\":3,"
         "\"padding\":[1,1,1,1],\"stride\":[1,1],\"dilation\":[1,1],\"epilogue\":[]}"},
        {"{\"op\":\"layer_norm\",\"shape\":[4,8]}",
         "{\"affine\":true,\"op\":\"layer_norm\",\"shape\":[4,8]}"},
        /* the default epsilon said out loud is the same workload */
        {"{\"op\":\"layer_norm\",\"shape\":[4,8]}",
         "{\"op\":\"layer_norm\",\"shape\":[4,8],\"eps\":1e-5}"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(pairs); i++) {
        kt_workload_t *a = kt_workload_parse(pairs[i][0]);
        kt_workload_t *b = kt_workload_parse(pairs[i][1]);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        ck_assert_str_eq(kt_workload_json(a), kt_workload_json(b));
        ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
        kt_workload_free(a);
        kt_workload_free(b);
    }
    kt_workload_t *m = kt_workload_parse(forms[0]);
    ck_assert_str_eq(kt_workload_json(m),
                     "{\"K\":512,\"M\":512,\"N\":512,\"epilogue\":[],\"layout\":\"NN\","
                     "\"op\":\"matmul\"}");
    /* A different workload gets a different key. */
    kt_workload_t *nt = kt_workload_parse(
        "{\"op\":\"matmul\",\"M\":512,\"N\":512,\"K\":512,\"layout\":\"NT\"}");
    ck_assert_str_ne(kt_workload_key(m), kt_workload_key(nt));
    kt_workload_free(m);
    kt_workload_free(nt);
}
END_TEST

START_TEST(workload_keys_are_golden)
{
    /* Computed once; stored records refer to tasks by these keys, so they
     * must never change across runs, builds or machines. */
    kt_workload_t *m = kt_workload_parse(forms[0]);
    ck_assert_str_eq(kt_workload_key(m), MATMUL512_KEY);
    kt_workload_t *c = kt_workload_parse(forms[3]);
    ck_assert_str_eq(kt_workload_key(c), CONV_KEY);
    kt_workload_free(m);
    kt_workload_free(c);
}
END_TEST

START_TEST(workload_keys_see_reduce_extents)
{
    /* Pool windows 3 and 4 with stride 2, pad 1 give the same shapes and the
     * same printed text; the key must still differ. */
    kt_workload_t *a = kt_workload_parse("{\"op\":\"pool2d\",\"kind\":\"max\",\"N\":1,\"H\":112,"
                                         "\"W\":112,\"C\":8,\"KH\":3,\"KW\":3,\"stride\":[2,2],"
                                         "\"padding\":[1,1]}");
    kt_workload_t *b = kt_workload_parse("{\"op\":\"pool2d\",\"kind\":\"max\",\"N\":1,\"H\":112,"
                                         "\"W\":112,\"C\":8,\"KH\":4,\"KW\":4,\"stride\":[2,2],"
                                         "\"padding\":[1,1]}");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    char *ta = kt_dag_to_text(kt_workload_dag(a)), *tb = kt_dag_to_text(kt_workload_dag(b));
    ck_assert_str_eq(ta, tb);
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    free(ta);
    free(tb);
    kt_workload_free(a);
    kt_workload_free(b);
}
END_TEST

/* A Winograd workload's fields up to KW (the object left open). */
#define WINO_FIELDS(kh, kw)                                                                 \
    "{\"op\": \"conv2d_winograd_nhwc\", \"N\": 1, \"H\": 6, \"W\": 6, \"CI\": 2, \"CO\": 2, " \
    "\"KH\": " kh ", \"KW\": " kw

/* Workload keys from users: every key ktune makes parses back to itself, a
 * key with other spacing or upper-case hex to the same text, and anything
 * else is refused naming the expected form; an argument takes a key or one
 * workload's JSON; kt_workload_load says what it wanted for empty input, a
 * missing file and a key where the JSON belongs. */
START_TEST(workload_keys_from_users_are_checked)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(forms); i++) {
        kt_workload_t *w = kt_workload_parse(forms[i]);
        ck_assert_ptr_nonnull(w);
        char *canon = NULL;
        ck_assert_msg(kt_workload_key_parse(kt_workload_key(w), &canon) == 0, "%s: %s",
                      kt_workload_key(w), kt_err_msg());
        ck_assert_str_eq(canon, kt_workload_key(w));
        free(canon);
        char *k = NULL;
        ck_assert_int_eq(kt_workload_key_from_arg(forms[i], &k), 0);
        ck_assert_str_eq(k, kt_workload_key(w));
        free(k);
        kt_workload_free(w);
    }
    char *canon = NULL;
    ck_assert_int_eq(kt_workload_key_parse("[\"632D1EDD00D42469E8BD00A15A0FA74A\",[512,512],"
                                           "[512,512],[512,512]]", &canon), 0);
    ck_assert_str_eq(canon, MATMUL512_KEY);
    free(canon);
    ck_assert_int_eq(kt_workload_key_from_arg("  " MATMUL512_KEY, &canon), 0);
    ck_assert_str_eq(canon, MATMUL512_KEY);
    free(canon);

    static const char *const bad_keys[][2] = {
        {"", "no workload key"},
        {"garbage", "'garbage' is not a workload key (expected [\"<hash>\", [shape], ...])"},
        {"{\"op\": \"matmul\"}", "expected a list"},
        {"[\"abc\"]", "at least one shape"},
        {"[5, [1]]", "first item must be the hash"},
        {"[\"\", [1]]", "first item must be the hash"},
        {"[\"abcg\", [1]]", "hex digits"},
        {"[\"abc\", 1]", "item 1 is not a shape"},
        {"[\"abc\", [1], [2, 0]]", "shape 2: dimension 1 is not a positive integer"},
        {"[\"abc\", [1.5]]", "dimension 0"},
        {"[\"abc\", [1]] x", "is not a workload key"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(bad_keys); i++) {
        canon = (char *)"untouched";
        ck_assert_int_eq(kt_workload_key_parse(bad_keys[i][0], &canon), KT_EINVAL);
        ck_assert_ptr_null(canon);
        ck_assert_msg(strstr(kt_err_msg(), bad_keys[i][1]), "'%s': %s", bad_keys[i][0],
                      kt_err_msg());
    }
    char big[KT_WORKLOAD_KEY_MAX + 64];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, MATMUL512_KEY, strlen(MATMUL512_KEY));
    ck_assert_int_eq(kt_workload_key_parse(big, NULL), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), "at most"), "%s", kt_err_msg());

    static const char *const bad_args[][2] = {
        {"", "empty; expected a workload key [\"<hash>\", [shape], ...] as ktune prints it or a "
             "workload's JSON {\"op\": ...}"},
        {" \t", "empty"},
        {"garbage", "'garbage' is neither a workload key"},
        {"matmul.json", "nor a workload's JSON"},
        {"[\"abc\", 5]", "item 1 is not a shape"},
        {"[" MATMUL512_KEY, "bad JSON"},
        {"[{\"op\": \"matmul\", \"M\": 4, \"N\": 4, \"K\": 4}]", "a list of workloads"},
        {"{\"op\": \"matmul\", \"M\": 4}", "field 'N' is missing"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(bad_args); i++) {
        char *k = (char *)"untouched";
        ck_assert_int_eq(kt_workload_key_from_arg(bad_args[i][0], &k), KT_EINVAL);
        ck_assert_ptr_null(k);
        ck_assert_msg(strstr(kt_err_msg(), bad_args[i][1]), "'%s': %s", bad_args[i][0],
                      kt_err_msg());
    }

    static const char *const bad_loads[][2] = {
        {"", "no workload given (expected workload JSON, inline or in a file)"},
        {"/nonexistent/w.json", "'/nonexistent/w.json' is neither workload JSON"},
        {MATMUL512_KEY, "this is a workload key"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(bad_loads); i++) {
        kt_workload_t **ws = NULL;
        double *wt = NULL;
        int n = -1;
        ck_assert_int_ne(kt_workload_load(bad_loads[i][0], &ws, &wt, &n), 0);
        ck_assert_int_eq(n, 0);
        ck_assert_msg(strstr(kt_err_msg(), bad_loads[i][1]), "'%s': %s", bad_loads[i][0],
                      kt_err_msg());
    }
}
END_TEST

START_TEST(workload_errors_name_the_field)
{
    static const char *const cases[][2] = {
        {"{\"op\": \"matmul\", \"M\": 5", "bad workload JSON"},
        {"[1, 2]", "JSON object"},
        {"{\"M\": 5}", "'op'"},
        {"{\"op\": \"convolution\"}", "'convolution'"},
        {"{\"op\": 7}", "'op'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5}", "'K'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": \"5\", \"K\": 5}", "'N'"},
        {"{\"op\": \"matmul\", \"M\": 5.5, \"N\": 5, \"K\": 5}", "'M'"},
        {"{\"op\": \"matmul\", \"M\": 0, \"N\": 5, \"K\": 5}", "'M'"},
        {"{\"op\": \"matmul\", \"M\": -3, \"N\": 5, \"K\": 5}", "'M'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"Kk\": 5}", "'Kk'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"layout\": \"TN\"}", "'layout'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [\"swish\"]}",
         "'epilogue[0]'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [\"relu\", \"clip\"]}",
         "'epilogue[1]'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [{\"op\": \"clip\", "
         "\"min\": 6, \"max\": 0}]}", "min <= max"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [{\"op\": \"clip\", "
         "\"min\": 0}]}", "'epilogue[0]': clip needs numbers"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [{\"op\": \"clip\", "
         "\"min\": 0, \"max\": 1e39}]}", "finite"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [{\"op\": \"clip\", "
         "\"min\": 0, \"max\": 6, \"lo\": 1}]}", "unknown field 'lo'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": [{\"op\": \"relu\"}]}",
         "'epilogue[0]'"},
        {"{\"op\": \"group_conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 6, \"CO\": 4, "
         "\"KH\": 3, \"KW\": 3, \"groups\": 4}", "'groups'"},
        {"{\"op\": \"group_conv2d_nchw\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 6, \"CO\": 4, "
         "\"KH\": 3, \"KW\": 3}", "'groups'"},
        {"{\"op\": \"depthwise_conv2d_nchw\", \"N\": 1, \"H\": 4, \"W\": 4, \"C\": 2, \"KH\": 3, "
         "\"KW\": 3, \"multiplier\": 0}", "'multiplier'"},
        {"{\"op\": \"global_avg_pool_nchw\", \"N\": 1, \"H\": 7, \"W\": 7, \"C\": 2, "
         "\"epilogue\": [\"gelu\", 3]}", "'epilogue[1]'"},
        {"{\"op\": \"matmul\", \"M\": 5, \"N\": 5, \"K\": 5, \"epilogue\": \"relu\"}",
         "'epilogue'"},
        {"{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 2, \"CO\": 2, \"KH\": 5, "
         "\"KW\": 1}", "KH"},
        {"{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 2, \"CO\": 2, \"KH\": 3, "
         "\"KW\": 3, \"stride\": [1]}", "'stride'"},
        {"{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 2, \"CO\": 2, \"KH\": 3, "
         "\"KW\": 3, \"padding\": [1, 1, 1]}", "'padding'"},
        {"{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 2, \"CO\": 2, \"KH\": 3, "
         "\"KW\": 3, \"padding\": [-1, 1]}", "'padding'"},
        {"{\"op\": \"conv2d_nchw\", \"N\": 1, \"H\": 4, \"W\": 4, \"CI\": 2, \"CO\": 2, \"KH\": 3, "
         "\"KW\": 3, \"dilation\": [0, 1]}", "'dilation'"},
        {"{\"op\": \"conv2d_nhwc\", \"N\": 1, \"H\": 4, \"W\": 4, \"CO\": 2, \"KH\": 3, \"KW\": 3}",
         "'CI'"},
        {"{\"op\": \"pool2d\", \"N\": 1, \"H\": 4, \"W\": 4, \"C\": 2, \"KH\": 2, \"KW\": 2}",
         "'kind'"},
        {"{\"op\": \"pool2d\", \"kind\": \"min\", \"N\": 1, \"H\": 4, \"W\": 4, \"C\": 2, \"KH\": 2, "
         "\"KW\": 2}", "'kind'"},
        {"{\"op\": \"pool2d\", \"kind\": \"max\", \"N\": 1, \"H\": 4, \"W\": 4, \"C\": 2, \"KH\": 2, "
         "\"KW\": 2, \"padding\": [2, 2]}", "'padding'"},
        {"{\"op\": \"pool2d\", \"kind\": \"max\", \"N\": 1, \"H\": 4, \"W\": 4, \"C\": 2, \"KH\": 2, "
         "\"KW\": 2, \"dilation\": [1, 1]}", "'dilation'"},
        {"{\"op\": \"global_avg_pool\", \"N\": 1, \"H\": 7, \"W\": 7}", "'C'"},
        {"{\"op\": \"softmax\", \"shape\": [1000]}", "'shape'"},
        {"{\"op\": \"softmax\", \"shape\": [2, 0]}", "'shape'"},
        {"{\"op\": \"softmax\", \"shape\": [2, 3], \"epilogue\": [\"relu\"]}", "'epilogue'"},
        {"{\"op\": \"layer_norm\", \"shape\": [2, 3], \"affine\": 1}", "'affine'"},
        {"{\"op\": \"layer_norm\", \"shape\": [2, 3], \"eps\": 0}", "'eps'"},
        {"{\"op\": \"layer_norm\", \"shape\": [2, 3], \"eps\": \"1e-6\"}", "'eps'"},
        {"{\"op\": \"layer_norm\", \"shape\": [2, 3], \"eps\": 1.5}", "'eps'"},
        {"{\"op\": \"batch_matmul\", \"M\": 2, \"N\": 2, \"K\": 2}", "'B'"},
        {WINO_FIELDS("5", "3") ", \"tile_size\": 2}", "'KH'"},
        {WINO_FIELDS("3", "1") ", \"tile_size\": 2}", "'KW'"},
        {WINO_FIELDS("3", "3") ", \"tile_size\": 3}", "'tile_size'"},
        {WINO_FIELDS("3", "3") "}", "'tile_size'"},
        {WINO_FIELDS("3", "3") ", \"tile_size\": 2, \"stride\": [2, 2]}", "'stride'"},
        {WINO_FIELDS("3", "3") ", \"tile_size\": 4, \"dilation\": [1, 2]}", "'dilation'"},
        {WINO_FIELDS("3", "3") ", \"tile_size\": 4, \"groups\": 2}", "'groups'"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        kt_err_clear();
        kt_workload_t *w = kt_workload_parse(cases[i][0]);
        ck_assert_msg(w == NULL, "case %zu accepted: %s", i, cases[i][0]);
        ck_assert_int_eq(kt_err_code(), KT_EINVAL);
        ck_assert_msg(strstr(kt_err_msg(), cases[i][1]) != NULL, "case %zu: '%s' lacks %s", i,
                      kt_err_msg(), cases[i][1]);
    }
}
END_TEST

START_TEST(workload_new_epilogues_and_ops_keep_old_canonical_json)
{
    /* Pools took epilogues and depthwise a multiplier after workloads were
     * stored: their defaults stay out of the canonical JSON. */
    kt_workload_t *a = kt_workload_parse(forms[6]);
    ck_assert_str_eq(kt_workload_json(a),
                     "{\"C\":64,\"H\":112,\"KH\":3,\"KW\":3,\"N\":1,\"W\":112,\"kind\":\"max\","
                     "\"op\":\"pool2d\",\"padding\":[1,1],\"stride\":[2,2]}");
    kt_workload_t *b = kt_workload_parse(
        "{\"op\":\"pool2d\",\"kind\":\"max\",\"N\":1,\"H\":112,\"W\":112,\"C\":64,\"KH\":3,"
        "\"KW\":3,\"stride\":[2,2],\"padding\":[1,1],\"epilogue\":[]}");
    ck_assert_str_eq(kt_workload_json(a), kt_workload_json(b));
    ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(b);
    b = kt_workload_parse(forms[KT_ARRAY_LEN(forms) - 1]);   /* the same pool + bias + relu */
    ck_assert_ptr_nonnull(strstr(kt_workload_json(b), "\"epilogue\":[\"bias_add\",\"relu\"]"));
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(a);
    kt_workload_free(b);
    a = kt_workload_parse(forms[5]);
    b = kt_workload_parse(
        "{\"op\": \"depthwise_conv2d_nhwc\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 32, "
        "\"KH\": 3, \"KW\": 3, \"padding\": [1, 1], \"multiplier\": 1}");
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(strstr(kt_workload_json(a), "multiplier"));
    ck_assert_str_eq(kt_workload_json(a), kt_workload_json(b));
    ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(b);
    b = kt_workload_parse(
        "{\"op\": \"depthwise_conv2d_nhwc\", \"N\": 1, \"H\": 112, \"W\": 112, \"C\": 32, "
        "\"KH\": 3, \"KW\": 3, \"padding\": [1, 1], \"multiplier\": 2}");
    ck_assert_ptr_nonnull(strstr(kt_workload_json(b), "\"multiplier\":2"));
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(a);
    kt_workload_free(b);
    /* relu6 is clip 0..6; clip's canonical form is the object. */
    a = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":[\"relu6\"]}");
    b = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":[{\"max\":6.0,"
                          "\"op\":\"clip\",\"min\":0}]}");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(kt_workload_json(a),
                     "{\"K\":4,\"M\":2,\"N\":3,\"epilogue\":[{\"max\":6.0,\"min\":0.0,\"op\":"
                     "\"clip\"}],\"op\":\"dense\"}");
    ck_assert_str_eq(kt_workload_json(a), kt_workload_json(b));
    ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
    char *text = kt_dag_to_text(kt_workload_dag(a));
    ck_assert_msg(strstr(text, "T_clip(ax0, ax1) = max(min(T_dense[ax0, ax1], 6f), 0f)") != NULL,
                  "%s", text);
    free(text);
    kt_workload_free(b);
    b = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":[{\"op\":"
                          "\"clip\",\"min\":0,\"max\":5.5}]}");
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(a);
    kt_workload_free(b);
    /* hardsigmoid takes its alpha and beta as an object, float32-rounded in
     * its canonical form; hardswish is a plain name. */
    a = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":["
                          "\"hardswish\",{\"op\":\"hardsigmoid\",\"alpha\":0.2,\"beta\":0.5}]}");
    ck_assert_msg(a != NULL, "%s", kt_err_msg());
    ck_assert_str_eq(kt_workload_json(a),
                     "{\"K\":4,\"M\":2,\"N\":3,\"epilogue\":[\"hardswish\",{\"alpha\":"
                     "0.20000000298023224,\"beta\":0.5,\"op\":\"hardsigmoid\"}],\"op\":\"dense\"}");
    b = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":["
                          "\"hardswish\",{\"op\":\"hardsigmoid\",\"alpha\":0.25,\"beta\":0.5}]}");
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    kt_workload_free(a);
    kt_workload_free(b);
    /* silu is a plain name, a workload of its own */
    a = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":[\"silu\"]}");
    ck_assert_msg(a != NULL, "%s", kt_err_msg());
    b = kt_workload_parse("{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":[\"sigmoid\"]}");
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    text = kt_dag_to_text(kt_workload_dag(a));
    ck_assert_msg(strstr(text, "T_silu(") != NULL, "%s", text);
    free(text);
    kt_workload_free(a);
    kt_workload_free(b);
    static const char *const bad_hs[] = {
        "[\"hardsigmoid\"]", "[{\"op\":\"hardsigmoid\",\"alpha\":0.2}]",
        "[{\"op\":\"hardsigmoid\",\"alpha\":0.2,\"beta\":0.5,\"min\":0}]",
        "[{\"op\":\"hardsigmoid\",\"alpha\":1e39,\"beta\":0.5}]", "[{\"op\":\"hardswish\"}]"};
    static const char *const bad_hs_why[] = {"must be one of", "needs numbers 'alpha' and 'beta'",
                                             "unknown field 'min'", "must be finite",
                                             "an object entry must be"};
    for (size_t i = 0; i < KT_ARRAY_LEN(bad_hs); i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"op\":\"dense\",\"M\":2,\"N\":3,\"K\":4,\"epilogue\":%s}",
                 bad_hs[i]);
        ck_assert_msg(kt_workload_parse(js) == NULL, "%s parsed", js);
        ck_assert_msg(strstr(kt_err_msg(), bad_hs_why[i]) != NULL, "%s: %s", js, kt_err_msg());
    }
    /* count_include_pad: in the canonical JSON only when true (the keys of
     * earlier pools stay), avg only, and the divisor is the whole window. */
    const char *pool = "{\"op\":\"pool2d\",\"kind\":\"avg\",\"N\":1,\"H\":4,\"W\":4,\"C\":2,"
                       "\"KH\":3,\"KW\":3,\"padding\":[1,1]%s}";
    char pj[256];
    snprintf(pj, sizeof pj, pool, "");
    a = kt_workload_parse(pj);
    snprintf(pj, sizeof pj, pool, ",\"count_include_pad\":false");
    b = kt_workload_parse(pj);
    ck_assert_msg(a && b, "%s", kt_err_msg());
    ck_assert_str_eq(kt_workload_key(a), kt_workload_key(b));
    ck_assert_ptr_null(strstr(kt_workload_json(b), "count_include_pad"));
    kt_workload_free(b);
    snprintf(pj, sizeof pj, pool, ",\"count_include_pad\":true");
    b = kt_workload_parse(pj);
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    ck_assert_ptr_nonnull(strstr(kt_workload_json(b), "\"count_include_pad\":true"));
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    text = kt_dag_to_text(kt_workload_dag(b));
    ck_assert_msg(strstr(text, "pool_sum[ax0, ax1, ax2, ax3]/9f") != NULL, "%s", text);
    free(text);
    kt_workload_free(a);
    kt_workload_free(b);
    snprintf(pj, sizeof pj, pool, ",\"count_include_pad\":1");
    ck_assert_ptr_null(kt_workload_parse(pj));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'count_include_pad' must be true or false"));
    ck_assert_ptr_null(kt_workload_parse(
        "{\"op\":\"pool2d\",\"kind\":\"max\",\"N\":1,\"H\":4,\"W\":4,\"C\":2,\"KH\":3,"
        "\"KW\":3,\"count_include_pad\":true}"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "applies to kind \"avg\" only"));
    ck_assert_ptr_null(kt_ops_matmul(4, 4, 4, 0, (kt_epilogue_t[]){KT_EPI_HARDSIGMOID}, 1));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "hardsigmoid needs alpha and beta"));
    /* The plain-kind constructors refuse clip: it has no bounds there. */
    ck_assert_ptr_null(kt_ops_matmul(4, 4, 4, 0, (kt_epilogue_t[]){KT_EPI_CLIP}, 1));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "clip needs bounds"));
    for (int e = 0; e < KT_EPI__COUNT; e++) {
        kt_epilogue_t back;
        ck_assert_int_eq(kt_ops_epilogue_parse(kt_ops_epilogue_name((kt_epilogue_t)e), &back), 0);
        ck_assert_int_eq(back, e);
    }
}
END_TEST

START_TEST(workload_load_reads_lists_files_and_weights)
{
    kt_workload_t **ws;
    double *wt;
    int n;
    ck_assert_int_eq(kt_workload_load(forms[0], &ws, &wt, &n), 0);
    ck_assert_int_eq(n, 1);
    ck_assert(wt[0] == 1.0);
    ck_assert_str_eq(kt_workload_key(ws[0]), MATMUL512_KEY);
    kt_workload_free(ws[0]);
    free(ws);
    free(wt);

    char list[2048];
    snprintf(list, sizeof(list), "[%s, {\"workload\": %s, \"weight\": 3}]", forms[1], forms[3]);
    char path[] = "/tmp/kt_te_wlXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(kt_file_write(path, list, strlen(list)), 0);
    ck_assert_int_eq(kt_workload_load(path, &ws, &wt, &n), 0);
    unlink(path);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(kt_workload_op(ws[0]), "dense");
    ck_assert_str_eq(kt_workload_key(ws[1]), CONV_KEY);
    ck_assert(wt[0] == 1.0 && wt[1] == 3.0);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(wt);

    ck_assert_int_eq(kt_workload_load("[]", &ws, &wt, &n), KT_EINVAL);
    snprintf(list, sizeof(list), "[{\"workload\": %s, \"weight\": -1}]", forms[0]);
    ck_assert_int_eq(kt_workload_load(list, &ws, &wt, &n), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'weight'"));
    snprintf(list, sizeof(list), "[%s, {\"op\": \"matmul\"}]", forms[0]);
    ck_assert_int_eq(kt_workload_load(list, &ws, &wt, &n), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "item 1"));
    ck_assert_ptr_null(ws);
    ck_assert_int_ne(kt_workload_load("/nonexistent/kt/workload.json", &ws, &wt, &n), 0);
}
END_TEST

/* ---- DAG ------------------------------------------------------------------- */

START_TEST(dag_text_of_matmul_is_golden)
{
    kt_workload_t *w = kt_workload_parse(forms[0]);
    char *t = kt_dag_to_text(kt_workload_dag(w));
    ck_assert_str_eq(t, "A = PLACEHOLDER [512, 512]\n"
                        "B = PLACEHOLDER [512, 512]\n"
                        "C(i, j) += (A[i, k]*B[k, j])\n");
    free(t);
    kt_workload_free(w);
    kt_dag_t *d = kt_ops_conv2d_nhwc(1, 4, 4, 2, 2, 3, 3,
                                     &(kt_conv2d_params_t){{2, 2}, {1, 1, 1, 1}, {1, 1}}, NULL, 0);
    t = kt_dag_to_text(d);
    ck_assert_ptr_nonnull(strstr(t, "pad_temp(i0, i1, i2, i3) = select(((((i1 >= 1) && (i1 < 5)) "
                                    "&& (i2 >= 1)) && (i2 < 5)), data[i0, (i1 - 1), (i2 - 1), i3], "
                                    "0f)\n"));
    ck_assert_ptr_nonnull(strstr(t, "conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, ((yy*2) + ry), "
                                    "((xx*2) + rx), rc]*weight[ry, rx, rc, ff])\n"));
    free(t);
    kt_dag_free(d);
}
END_TEST

static double flops_of(const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_msg(w != NULL, "%s", kt_err_msg());
    double f = kt_workload_flops(w);
    ck_assert(f == kt_dag_flop_count(kt_workload_dag(w)));
    kt_workload_free(w);
    return f;
}

START_TEST(flop_counts_follow_tvm)
{
    ck_assert(flops_of(forms[0]) == 2.0 * 512 * 512 * 512);
    ck_assert(flops_of("{\"op\":\"matmul\",\"M\":3,\"N\":5,\"K\":7}") == 2.0 * 3 * 5 * 7);
    /* dense + bias_add + relu: one op per output element each. */
    ck_assert(flops_of(forms[1]) == 2.0 * 1000 * 512 + 2.0 * 1000);
    ck_assert(flops_of(forms[2]) == 2.0 * 12 * 128 * 64 * 128);
    /* conv: 2*N*OH*OW*CO*KH*KW*CI, padding free, + bias, relu, add. */
    double conv = 2.0 * 56 * 56 * 64 * 3 * 3 * 64, out = 56.0 * 56 * 64;
    ck_assert(flops_of(forms[3]) == conv + 3 * out);
    ck_assert(flops_of(forms[4]) == conv + 3 * out);
    /* stride 2, 7x7 on 224 with pad 3 -> 112; gelu = 5 ops per element. */
    ck_assert(flops_of("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":224,\"W\":224,\"CI\":3,\"CO\":64,"
                       "\"KH\":7,\"KW\":7,\"stride\":[2,2],\"padding\":[3,3],"
                       "\"epilogue\":[\"gelu\"]}") ==
              2.0 * 112 * 112 * 64 * 7 * 7 * 3 + 5.0 * 112 * 112 * 64);
    ck_assert(flops_of(forms[5]) == 2.0 * 112 * 112 * 32 * 9);
    /* max pool: one max per window element; avg: + per element, / per output. */
    ck_assert(flops_of(forms[6]) == 56.0 * 56 * 64 * 9);
    ck_assert(flops_of(forms[7]) == 56.0 * 56 * 64 * 9 + 56.0 * 56 * 64);
    ck_assert(flops_of(forms[8]) == 512.0 * 49 + 512.0);
    /* softmax: max, (sub, exp), sum, div per element. */
    ck_assert(flops_of(forms[9]) == 5.0 * 1000);
    /* layer norm: mean (/, +) 2, var (-, -, *, /, +) 5, out (-, +, rsqrt, *, *, +) 6. */
    ck_assert(flops_of(forms[10]) == 13.0 * 128 * 768);
}
END_TEST

static int find_stage(const kt_dag_t *d, const char *name)
{
    for (int i = 0; i < kt_dag_num_stages(d); i++)
        if (strcmp(kt_dag_stage(d, i)->name, name) == 0)
            return i;
    ck_abort_msg("no stage %s", name);
    return -1;
}

START_TEST(analysis_finds_reuse_inlining_and_reductions)
{
    kt_workload_t *w = kt_workload_parse(forms[0]);
    const kt_dag_t *d = kt_workload_dag(w);
    int c = find_stage(d, "C");
    ck_assert(kt_dag_has_data_reuse(d, c) && kt_dag_is_reduction(d, c));
    ck_assert(!kt_dag_is_inlinable(d, c) && !kt_dag_is_elementwise(d, c));
    ck_assert(kt_dag_stage(d, c)->is_output);
    int prod[KT_TE_MAX_STAGES], cons[KT_TE_MAX_STAGES];
    ck_assert_int_eq(kt_dag_producers(d, c, prod), 2);
    ck_assert_int_eq(prod[0], find_stage(d, "A"));
    ck_assert_int_eq(kt_dag_consumers(d, find_stage(d, "B"), cons), 1);
    ck_assert_int_eq(cons[0], c);
    /* B is a weight a kernel may re-lay out (TVM's layout_free_placeholders); A is not */
    ck_assert(kt_dag_stage(d, find_stage(d, "B"))->layout_free);
    ck_assert(!kt_dag_stage(d, find_stage(d, "A"))->layout_free);
    kt_workload_free(w);

    /* only placeholders are layout-free */
    kt_dag_t *dd = kt_ops_matmul(4, 4, 4, 0, NULL, 0);
    ck_assert_int_eq(kt_dag_set_layout_free(dd, find_stage(dd, "C")), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "not a placeholder"));
    ck_assert_int_eq(kt_dag_set_layout_free(dd, 99), KT_EINVAL);
    ck_assert_int_eq(kt_dag_set_layout_free(dd, find_stage(dd, "A")), 0);
    kt_dag_free(dd);

    w = kt_workload_parse(forms[3]);
    d = kt_workload_dag(w);
    int conv = find_stage(d, "conv2d_nhwc");
    ck_assert(kt_dag_has_data_reuse(d, conv) && kt_dag_is_reduction(d, conv));
    ck_assert(kt_dag_is_inlinable(d, find_stage(d, "pad_temp")));
    ck_assert(kt_dag_stage(d, find_stage(d, "weight"))->layout_free);
    ck_assert(!kt_dag_stage(d, find_stage(d, "data"))->layout_free);
    ck_assert(!kt_dag_is_elementwise(d, find_stage(d, "pad_temp")));
    ck_assert(kt_dag_is_inlinable(d, find_stage(d, "T_bias_add")));
    ck_assert(kt_dag_is_elementwise(d, find_stage(d, "T_bias_add")));
    ck_assert(kt_dag_is_inlinable(d, find_stage(d, "T_relu")));
    int add = find_stage(d, "T_add");
    ck_assert(kt_dag_is_elementwise(d, add) && !kt_dag_is_inlinable(d, add));
    ck_assert(kt_dag_stage(d, add)->is_output && !kt_dag_stage(d, conv)->is_output);
    ck_assert_int_eq(kt_dag_consumers(d, conv, cons), 1);
    ck_assert_int_eq(cons[0], find_stage(d, "T_bias_add"));
    kt_workload_free(w);

    w = kt_workload_parse(forms[9]);
    d = kt_workload_dag(w);
    static const char *const red[] = {"T_softmax_maxelem", "T_softmax_expsum"};
    for (int i = 0; i < 2; i++) {
        int s = find_stage(d, red[i]);
        ck_assert(kt_dag_is_reduction(d, s) && !kt_dag_has_data_reuse(d, s));
    }
    /* exp is expensive: elementwise but not inlined, as in TVM. */
    int ex = find_stage(d, "T_softmax_exp");
    ck_assert(kt_dag_is_elementwise(d, ex) && !kt_dag_is_inlinable(d, ex));
    kt_workload_free(w);

    w = kt_workload_parse(forms[6]);
    d = kt_workload_dag(w);
    int pool = find_stage(d, "pool_max");
    ck_assert(kt_dag_is_reduction(d, pool) && !kt_dag_has_data_reuse(d, pool));
    kt_workload_free(w);
}
END_TEST

START_TEST(finalize_rejects_bad_dags)
{
    int64_t s4[1] = {4}, s8[1] = {8};
    const char *const an[] = {"i"};
    /* Out-of-bounds load: out(i) = A[i + 1] with A of 4 elements. */
    kt_dag_t *d = kt_dag_new();
    int a = kt_dag_placeholder(d, "A", 1, s4);
    int o = kt_dag_compute(d, "out", NULL, 1, s4, an, 0, NULL, NULL, KT_RED_NONE);
    kt_expr_t *ix = kt_ex_bin(d, KT_EX_ADD, kt_ex_axis(d, 0), kt_ex_int(d, 1));
    ck_assert_int_eq(kt_dag_set_body(d, o, kt_ex_load(d, a, 1, &ix)), 0);
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "outside"));
    kt_dag_free(d);

    /* The same load guarded by a select passes (padding). */
    d = kt_dag_new();
    a = kt_dag_placeholder(d, "A", 1, s4);
    o = kt_dag_compute(d, "out", NULL, 1, s4, an, 0, NULL, NULL, KT_RED_NONE);
    ix = kt_ex_bin(d, KT_EX_ADD, kt_ex_axis(d, 0), kt_ex_int(d, 1));
    kt_expr_t *cond = kt_ex_bin(d, KT_EX_LT, kt_ex_axis(d, 0), kt_ex_int(d, 3));
    ck_assert_int_eq(kt_dag_set_body(d, o, kt_ex_select(d, cond, kt_ex_load(d, a, 1, &ix),
                                                        kt_ex_float(d, 0))), 0);
    ck_assert_int_eq(kt_dag_finalize(d), 0);
    ck_assert_int_eq(kt_dag_finalize(d), KT_ESTATE);
    kt_dag_free(d);

    /* Wrong rank, unread placeholder, int body, missing body. */
    d = kt_dag_new();
    a = kt_dag_placeholder(d, "A", 1, s8);
    o = kt_dag_compute(d, "out", NULL, 1, s8, an, 0, NULL, NULL, KT_RED_NONE);
    kt_expr_t *two[2] = {kt_ex_axis(d, 0), kt_ex_axis(d, 0)};
    kt_dag_set_body(d, o, kt_ex_load(d, a, 2, two));
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "rank"));
    kt_dag_free(d);

    d = kt_dag_new();
    kt_dag_placeholder(d, "A", 1, s8);
    o = kt_dag_compute(d, "out", NULL, 1, s8, an, 0, NULL, NULL, KT_RED_NONE);
    kt_dag_set_body(d, o, kt_ex_float(d, 1));
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "never read"));
    kt_dag_free(d);

    d = kt_dag_new();
    o = kt_dag_compute(d, "out", NULL, 1, s8, an, 0, NULL, NULL, KT_RED_NONE);
    kt_dag_set_body(d, o, kt_ex_axis(d, 0));
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    kt_dag_free(d);

    d = kt_dag_new();
    kt_dag_compute(d, "out", NULL, 1, s8, an, 0, NULL, NULL, KT_RED_NONE);
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no body"));
    kt_dag_free(d);

    /* Names: C identifiers, unique, no kt_ prefix, no keywords, axes apart
     * from stage names; reduce axes and reduce operator agree. */
    d = kt_dag_new();
    ck_assert_int_eq(kt_dag_placeholder(d, "A", 1, s8), 0);
    ck_assert_int_eq(kt_dag_placeholder(d, "A", 1, s8), KT_EINVAL);
    ck_assert_int_eq(kt_dag_placeholder(d, "kt_x", 1, s8), KT_EINVAL);
    ck_assert_int_eq(kt_dag_placeholder(d, "for", 1, s8), KT_EINVAL);
    ck_assert_int_eq(kt_dag_placeholder(d, "9a", 1, s8), KT_EINVAL);
    ck_assert_int_eq(kt_dag_placeholder(d, "a-b", 1, s8), KT_EINVAL);
    ck_assert_int_eq(kt_dag_placeholder(d, "Z", 0, s8), KT_EINVAL);
    int64_t zero[1] = {0};
    ck_assert_int_eq(kt_dag_placeholder(d, "Z", 1, zero), KT_EINVAL);
    const char *const bad_axis[] = {"kt_i"};
    ck_assert_int_lt(kt_dag_compute(d, "o1", NULL, 1, s8, bad_axis, 0, NULL, NULL, KT_RED_NONE), 0);
    ck_assert_int_lt(kt_dag_compute(d, "o2", NULL, 1, s8, an, 0, NULL, NULL, KT_RED_SUM), 0);
    const char *const same[] = {"i"};
    ck_assert_int_lt(kt_dag_compute(d, "o3", NULL, 1, s8, an, 1, s8, same, KT_RED_SUM), 0);
    const char *const axis_a[] = {"A"};
    o = kt_dag_compute(d, "o4", NULL, 1, s8, axis_a, 0, NULL, NULL, KT_RED_NONE);
    ck_assert_int_ge(o, 0);
    kt_dag_set_body(d, o, kt_ex_load(d, 0, 1, (kt_expr_t *[]){kt_ex_axis(d, 0)}));
    ck_assert_int_eq(kt_dag_finalize(d), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "also a stage name"));
    kt_dag_free(d);
    kt_dag_free(NULL);
}
END_TEST

START_TEST(expr_print_follows_snprintf)
{
    kt_workload_t *w = kt_workload_parse(forms[0]);
    const kt_dag_t *d = kt_workload_dag(w);
    int c = find_stage(d, "C");
    char small[8];
    int n = kt_expr_print(d, c, kt_dag_stage(d, c)->body, small, sizeof(small));
    ck_assert_int_eq(n, (int)strlen("(A[i, k]*B[k, j])"));
    ck_assert_str_eq(small, "(A[i, k");
    kt_workload_free(w);
}
END_TEST

/* ---- expression C ----------------------------------------------------------- */

START_TEST(expr_c_prints_exact_constants_and_flat_indices)
{
    int64_t s[2] = {3, 5};
    kt_dag_t *d = kt_dag_new();
    int a = kt_dag_placeholder(d, "A", 2, s);
    int o = kt_dag_compute(d, "out", NULL, 2, s, NULL, 0, NULL, NULL, KT_RED_NONE);
    kt_dag_set_body(d, o, kt_ex_load(d, a, 2, (kt_expr_t *[]){kt_ex_axis(d, 0), kt_ex_axis(d, 1)}));
    ck_assert_int_eq(kt_dag_finalize(d), 0);
    const char *axc[2] = {"x", "y + 1"};
    struct {
        kt_expr_t *e;
        const char *want;
    } cases[] = {
        {kt_ex_float(d, 0.5), "0.5f"},
        {kt_ex_float(d, 1.0), "1.0f"},
        {kt_ex_float(d, 1e-5), "9.99999975e-06f"},
        {kt_ex_float(d, 1e10), "1.0e+10f"},
        {kt_ex_float(d, -2.0), "(-2.0f)"},
        {kt_ex_float(d, -INFINITY), "(-INFINITY)"},
        {kt_ex_int(d, 7), "7LL"},
        {kt_ex_int(d, -7), "(-7LL)"},
        {kt_ex_bin(d, KT_EX_FLOORDIV, kt_ex_axis(d, 1), kt_ex_int(d, 4)), "kt_floordiv((y + 1), 4LL)"},
        {kt_ex_load(d, a, 2, (kt_expr_t *[]){kt_ex_axis(d, 0), kt_ex_axis(d, 1)}),
         "A[((x*5LL) + (y + 1))]"},
        {kt_ex_load(d, a, 2, (kt_expr_t *[]){kt_ex_int(d, 0), kt_ex_axis(d, 0)}), "A[x]"},
        {kt_ex_bin(d, KT_EX_MAX, kt_ex_float(d, 1), kt_ex_float(d, 2)), "kt_maxf(1.0f, 2.0f)"},
        {kt_ex_call(d, KT_FN_RSQRT, kt_ex_float(d, 4)), "kt_rsqrtf(4.0f)"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        kt_sbuf_t b;
        kt_sbuf_init(&b);
        ck_assert_int_eq(kt_codegen_expr_c(d, o, cases[i].e, axc, 0, &b), 0);
        ck_assert_str_eq(b.data, cases[i].want);
        kt_sbuf_free(&b);
    }
    /* Inlining a stage substitutes its body with the load's indices. */
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_dag_t *m = kt_ops_dense(2, 3, 4, (kt_epilogue_t[]){KT_EPI_BIAS_ADD, KT_EPI_RELU}, 2);
    int relu = find_stage(m, "T_relu"), bias = find_stage(m, "T_bias_add");
    const char *rax[2] = {"p", "q"};
    ck_assert_int_eq(kt_codegen_expr_c(m, relu, kt_dag_stage(m, relu)->body, rax, 1ull << bias, &b),
                     0);
    ck_assert_str_eq(b.data, "kt_maxf((T_dense[((p*3LL) + q)] + bias[q]), 0.0f)");
    kt_sbuf_clear(&b);
    /* A reduction cannot be inlined. */
    ck_assert_int_eq(kt_codegen_expr_c(m, relu, kt_dag_stage(m, relu)->body, rax,
                                       (1ull << bias) | (1ull << find_stage(m, "T_dense")), &b),
                     KT_EINVAL);
    kt_sbuf_free(&b);
    kt_dag_free(m);
    kt_dag_free(d);
}
END_TEST

/* ---- reference kernels against plain C --------------------------------------- */

typedef struct {
    char dir[64];
    char so[96];
    kt_codegen_lib_t *lib;
    float **bufs;
} ran_t;

/* Compile and load the DAG's reference kernel, make its seeded buffers. */
static void load_reference(const kt_dag_t *d, ran_t *r)
{
    snprintf(r->dir, sizeof(r->dir), "/tmp/kt_te_refXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
    snprintf(r->so, sizeof(r->so), "%s/ref.so", r->dir);
    char *src = kt_codegen_reference_c(d, "ref_kernel");
    ck_assert_msg(src != NULL, "%s", kt_err_msg());
    char *log = NULL;
    int rc = kt_codegen_compile(src, r->so, &log);
    ck_assert_msg(rc == 0, "%s\n%s", kt_err_msg(), src);
    free(log);
    free(src);
    r->lib = kt_codegen_load(r->so, "ref_kernel");
    ck_assert_msg(r->lib != NULL, "%s", kt_err_msg());
    r->bufs = kt_codegen_bufs_new(d, 7);
    ck_assert_ptr_nonnull(r->bufs);
}

/* Compile the DAG's reference kernel, run it in-process on seeded inputs. */
static void run_reference(const kt_dag_t *d, ran_t *r)
{
    load_reference(d, r);
    ck_assert_int_eq(kt_codegen_lib_fn(r->lib)(r->bufs), 0);
}

static void ran_free(const kt_dag_t *d, ran_t *r)
{
    kt_codegen_unload(r->lib);
    kt_codegen_bufs_free(d, r->bufs);
    unlink(r->so);
    rmdir(r->dir);
}

static void assert_close(const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])),
                      "element %zu: got %.7g want %.7g", i, got[i], want[i]);
}

static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

START_TEST(reference_matmul_family_is_right)
{
    enum { M = 3, N = 5, K = 7 };
    kt_dag_t *d = kt_ops_matmul(M, N, K, 0, NULL, 0);
    ran_t r;
    run_reference(d, &r);
    double want[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)r.bufs[0][i * K + k] * r.bufs[1][k * N + j];
            want[i * N + j] = s;
        }
    assert_close(r.bufs[2], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* NT matmul + relu + add. */
    d = kt_ops_matmul(M, N, K, 1, (kt_epilogue_t[]){KT_EPI_RELU, KT_EPI_ADD}, 2);
    run_reference(d, &r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)r.bufs[0][i * K + k] * r.bufs[1][j * K + k];
            want[i * N + j] = (s > 0 ? s : 0) + r.bufs[2][i * N + j];
        }
    assert_close(r.bufs[3], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* dense + bias_add + gelu. */
    d = kt_ops_dense(M, N, K, (kt_epilogue_t[]){KT_EPI_BIAS_ADD, KT_EPI_GELU}, 2);
    run_reference(d, &r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)r.bufs[0][i * K + k] * r.bufs[1][j * K + k];
            want[i * N + j] = gelu(s + r.bufs[2][j]);
        }
    assert_close(r.bufs[3], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* batch_matmul 2 x (3x4 @ 4x5). */
    enum { B = 2, BM = 3, BK = 4, BN = 5 };
    d = kt_ops_batch_matmul(B, BM, BN, BK, NULL, 0);
    run_reference(d, &r);
    double bw[B * BM * BN];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < BM; i++)
            for (int j = 0; j < BN; j++) {
                double s = 0;
                for (int k = 0; k < BK; k++)
                    s += (double)r.bufs[0][(b * BM + i) * BK + k] * r.bufs[1][(b * BK + k) * BN + j];
                bw[(b * BM + i) * BN + j] = s;
            }
    assert_close(r.bufs[2], bw, B * BM * BN);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

/* Independent direct convolution with explicit bounds checks. */
static void conv_nhwc_plain(const float *x, const float *w, double *y, int N, int H, int W,
                            int CI, int CO, int KH, int KW, const kt_conv2d_params_t *p, int OH,
                            int OW, int depthwise)
{
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int co = 0; co < CO; co++) {
                    double s = 0;
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            int h = oh * (int)p->stride[0] - (int)p->pad[0] + kh * (int)p->dilation[0];
                            int ww = ow * (int)p->stride[1] - (int)p->pad[1] + kw * (int)p->dilation[1];
                            if (h < 0 || h >= H || ww < 0 || ww >= W)
                                continue;
                            if (depthwise)
                                s += (double)x[((n * H + h) * W + ww) * CI + co] *
                                     w[(kh * KW + kw) * CI + co];
                            else
                                for (int ci = 0; ci < CI; ci++)
                                    s += (double)x[((n * H + h) * W + ww) * CI + ci] *
                                         w[((kh * KW + kw) * CI + ci) * CO + co];
                        }
                    y[((n * OH + oh) * OW + ow) * CO + co] = s;
                }
}

START_TEST(reference_conv2d_nhwc_with_stride_padding_dilation_is_right)
{
    /* H=W=9, 3x3, stride 2, pad (top 2, left 1, bottom 1, right 2), dilation 2:
     * OH = (9+3-5)/2+1 = 4, OW = 4. */
    enum { N = 2, H = 9, W = 9, CI = 3, CO = 4, KH = 3, KW = 3, OH = 4, OW = 4 };
    kt_conv2d_params_t p = {{2, 2}, {2, 1, 1, 2}, {2, 2}};
    kt_dag_t *d = kt_ops_conv2d_nhwc(N, H, W, CI, CO, KH, KW, &p,
                                     (kt_epilogue_t[]){KT_EPI_BIAS_ADD, KT_EPI_RELU, KT_EPI_ADD}, 3);
    ck_assert_ptr_nonnull(d);
    const kt_stage_t *out = kt_dag_stage(d, kt_codegen_buf_stage(d, 4));
    ck_assert(out->shape[1] == OH && out->shape[2] == OW && out->shape[3] == CO);
    ran_t r;
    run_reference(d, &r);
    /* bufs: data, weight, bias, residual, out */
    static double y[N * OH * OW * CO];
    conv_nhwc_plain(r.bufs[0], r.bufs[1], y, N, H, W, CI, CO, KH, KW, &p, OH, OW, 0);
    for (int i = 0; i < N * OH * OW * CO; i++) {
        double v = y[i] + r.bufs[2][i % CO];
        y[i] = (v > 0 ? v : 0) + r.bufs[3][i];
    }
    assert_close(r.bufs[4], y, N * OH * OW * CO);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

START_TEST(reference_padded_dilated_conv_survives_gcc_unswitching)
{
    /* GCC 12 -O3 -march=native miscompiled this reference's padding loop
     * (loop unswitching + if-conversion + vectorization) until the
     * reference opted out of unswitching. OH = (9+4-5)/1+1 = 9. */
    enum { H = 9, W = 9, CI = 2, CO = 5, OH = 9, OW = 9 };
    kt_conv2d_params_t p = {{1, 1}, {2, 2, 2, 2}, {2, 2}};
    kt_dag_t *d = kt_ops_conv2d_nhwc(1, H, W, CI, CO, 3, 3, &p, NULL, 0);
    ck_assert_ptr_nonnull(d);
    ran_t r;
    run_reference(d, &r);
    static double y[OH * OW * CO];
    for (int rep = 0; rep < 2; rep++) {
        conv_nhwc_plain(r.bufs[0], r.bufs[1], y, 1, H, W, CI, CO, 3, 3, &p, OH, OW, 0);
        assert_close(r.bufs[2], y, OH * OW * CO);
        ck_assert_int_eq(kt_codegen_lib_fn(r.lib)(r.bufs), 0);
    }
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

START_TEST(reference_conv2d_nchw_and_depthwise_are_right)
{
    enum { N = 1, H = 6, W = 7, CI = 3, CO = 2, KH = 3, KW = 2, OH = 3, OW = 4 };
    /* stride (2, 2), pad (1, 1, 0, 0): OH = (6+1-3)/2+1 = 3, OW = (7+1-2)/2+1 = 4. */
    kt_conv2d_params_t p = {{2, 2}, {1, 1, 0, 0}, {1, 1}};
    kt_dag_t *d = kt_ops_conv2d_nchw(N, H, W, CI, CO, KH, KW, &p, NULL, 0);
    ck_assert_ptr_nonnull(d);
    ran_t r;
    run_reference(d, &r);
    double y[N * CO * OH * OW];
    for (int co = 0; co < CO; co++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double s = 0;
                for (int ci = 0; ci < CI; ci++)
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                            if (h >= 0 && h < H && w >= 0 && w < W)
                                s += (double)r.bufs[0][(ci * H + h) * W + w] *
                                     r.bufs[1][((co * CI + ci) * KH + kh) * KW + kw];
                        }
                y[(co * OH + oh) * OW + ow] = s;
            }
    assert_close(r.bufs[2], y, N * CO * OH * OW);
    ran_free(d, &r);
    kt_dag_free(d);

    /* depthwise 3x3, stride 1, pad 1, dilation 2: OH = (6+2-5)/1+1 = 4. */
    enum { C = 3, DH = 6, DW = 6, DOH = 4, DOW = 4 };
    kt_conv2d_params_t q = {{1, 1}, {1, 1, 1, 1}, {2, 2}};
    d = kt_ops_depthwise_conv2d_nhwc(1, DH, DW, C, 3, 3, &q, NULL, 0);
    ck_assert_ptr_nonnull(d);
    run_reference(d, &r);
    double z[DOH * DOW * C];
    conv_nhwc_plain(r.bufs[0], r.bufs[1], z, 1, DH, DW, C, C, 3, 3, &q, DOH, DOW, 1);
    assert_close(r.bufs[2], z, DOH * DOW * C);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

START_TEST(reference_pools_are_right)
{
    /* 3x3 windows, stride 2, pad 1 on 5x5: OH = (5+2-3)/2+1 = 3. Avg divides
     * by the elements inside the input (count_include_pad = False). */
    enum { H = 5, W = 5, C = 2, OH = 3, OW = 3 };
    kt_conv2d_params_t p = {{2, 2}, {1, 1, 1, 1}, {1, 1}};
    for (int kind = 0; kind < 2; kind++) {
        kt_dag_t *d = kt_ops_pool2d_nhwc(kind ? KT_POOL_AVG : KT_POOL_MAX, 1, H, W, C, 3, 3, &p);
        ck_assert_ptr_nonnull(d);
        ran_t r;
        run_reference(d, &r);
        double y[OH * OW * C];
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int c = 0; c < C; c++) {
                    double acc = kind ? 0 : -INFINITY;
                    int cnt = 0;
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++) {
                            int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                            if (h < 0 || h >= H || w < 0 || w >= W)
                                continue;
                            double v = r.bufs[0][(h * W + w) * C + c];
                            acc = kind ? acc + v : fmax(acc, v);
                            cnt++;
                        }
                    y[(oh * OW + ow) * C + c] = kind ? acc / cnt : acc;
                }
        assert_close(r.bufs[1], y, OH * OW * C);
        ran_free(d, &r);
        kt_dag_free(d);
    }

    kt_dag_t *d = kt_ops_global_avg_pool_nhwc(2, 3, 4, 5);
    ran_t r;
    run_reference(d, &r);
    double g[2 * 5];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 5; c++) {
            double s = 0;
            for (int i = 0; i < 12; i++)
                s += r.bufs[0][(n * 12 + i) * 5 + c];
            g[n * 5 + c] = s / 12;
        }
    assert_close(r.bufs[1], g, 10);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

START_TEST(reference_softmax_and_layer_norm_are_right)
{
    enum { R = 3, D = 10 };
    kt_dag_t *d = kt_ops_softmax(2, (int64_t[]){R, D});
    ran_t r;
    run_reference(d, &r);
    double y[R * D];
    for (int i = 0; i < R; i++) {
        double sum = 0, rowsum = 0;
        for (int j = 0; j < D; j++)
            sum += exp(r.bufs[0][i * D + j]);
        for (int j = 0; j < D; j++) {
            y[i * D + j] = exp(r.bufs[0][i * D + j]) / sum;
            rowsum += r.bufs[1][i * D + j];
        }
        ck_assert(fabs(rowsum - 1.0) < 1e-5);
    }
    assert_close(r.bufs[1], y, R * D);
    ran_free(d, &r);
    kt_dag_free(d);

    for (int affine = 0; affine < 2; affine++) {
        d = kt_ops_layer_norm(2, (int64_t[]){R, D}, affine);
        run_reference(d, &r);
        float *out = r.bufs[affine ? 3 : 1];
        for (int i = 0; i < R; i++) {
            double mean = 0, var = 0, omean = 0, ovar = 0;
            for (int j = 0; j < D; j++)
                mean += r.bufs[0][i * D + j] / (double)D;
            for (int j = 0; j < D; j++)
                var += pow(r.bufs[0][i * D + j] - mean, 2) / D;
            for (int j = 0; j < D; j++) {
                double n = (r.bufs[0][i * D + j] - mean) / sqrt(var + 1e-5);
                y[i * D + j] = affine ? n * r.bufs[1][j] + r.bufs[2][j] : n;
                omean += out[i * D + j] / D;
            }
            for (int j = 0; j < D; j++)
                ovar += pow(out[i * D + j] - omean, 2) / D;
            if (!affine) {
                ck_assert(fabs(omean) < 1e-5);
                ck_assert(fabs(ovar - 1.0) < 1e-3);
            }
        }
        assert_close(out, y, R * D);
        ran_free(d, &r);
        kt_dag_free(d);
    }
}
END_TEST

/* A model's own epsilon (ConvNeXt's 1e-6) is a field of the workload: its
 * own key, written in the canonical JSON, and the reference computes with it
 * (with 1e-5 instead, a row of variance ~1e-5 is off by ~1e-1). */
START_TEST(layer_norm_takes_the_models_epsilon)
{
    kt_workload_t *a = kt_workload_parse("{\"op\":\"layer_norm\",\"shape\":[3,10]}");
    kt_workload_t *b = kt_workload_parse("{\"op\":\"layer_norm\",\"shape\":[3,10],\"eps\":1e-6}");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_ne(kt_workload_key(a), kt_workload_key(b));
    ck_assert_ptr_null(strstr(kt_workload_json(a), "eps"));
    ck_assert_ptr_nonnull(strstr(kt_workload_json(b), "\"eps\""));
    kt_workload_t *c = kt_workload_parse(kt_workload_json(b));   /* round trip */
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(kt_workload_key(b), kt_workload_key(c));
    kt_workload_free(a);
    kt_workload_free(b);
    kt_workload_free(c);

    enum { R = 3, D = 10 };
    kt_dag_t *d = kt_ops_layer_norm_eps(2, (int64_t[]){R, D}, 0, 1e-6);
    ck_assert_ptr_nonnull(d);
    ran_t r;
    load_reference(d, &r);
    /* Rows of tiny spread: the epsilon decides the result. */
    for (int i = 0; i < R * D; i++)
        r.bufs[0][i] = (float)(1.0 + 3e-3 * ((i * 7) % 5 - 2));
    ck_assert_int_eq(kt_codegen_lib_fn(r.lib)(r.bufs), 0);
    double y[R * D];
    for (int i = 0; i < R; i++) {
        double mean = 0, var = 0;
        for (int j = 0; j < D; j++)
            mean += r.bufs[0][i * D + j] / (double)D;
        for (int j = 0; j < D; j++)
            var += pow(r.bufs[0][i * D + j] - mean, 2) / D;
        for (int j = 0; j < D; j++)
            y[i * D + j] = (r.bufs[0][i * D + j] - mean) / sqrt(var + 1e-6);
    }
    assert_close(r.bufs[1], y, R * D);
    ran_free(d, &r);
    kt_dag_free(d);
    kt_err_clear();
    ck_assert_ptr_null(kt_ops_layer_norm_eps(2, (int64_t[]){R, D}, 0, 0.0));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
}
END_TEST

START_TEST(reference_floor_division_handles_negative_indices)
{
    /* out(i) = A[floormod(i - 5, 4)] + float(floordiv(i - 5, 3)), i in 0..9. */
    int64_t s4[1] = {4}, s10[1] = {10};
    kt_dag_t *d = kt_dag_new();
    int a = kt_dag_placeholder(d, "A", 1, s4);
    int o = kt_dag_compute(d, "out", NULL, 1, s10, NULL, 0, NULL, NULL, KT_RED_NONE);
    kt_expr_t *im5 = kt_ex_bin(d, KT_EX_SUB, kt_ex_axis(d, 0), kt_ex_int(d, 5));
    kt_expr_t *mod = kt_ex_bin(d, KT_EX_FLOORMOD, im5, kt_ex_int(d, 4));
    kt_expr_t *div = kt_ex_bin(d, KT_EX_FLOORDIV, im5, kt_ex_int(d, 3));
    kt_dag_set_body(d, o, kt_ex_bin(d, KT_EX_ADD, kt_ex_load(d, a, 1, &mod),
                                    kt_ex_cast(d, KT_DT_F32, div)));
    ck_assert_msg(kt_dag_finalize(d) == 0, "%s", kt_err_msg());
    ran_t r;
    run_reference(d, &r);
    double want[10];
    for (int i = 0; i < 10; i++) {
        int m = ((i - 5) % 4 + 4) % 4;
        want[i] = r.bufs[0][m] + floor((i - 5) / 3.0);
    }
    assert_close(r.bufs[1], want, 10);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

/* ---- verification harness ------------------------------------------------------ */

START_TEST(rel_err_metric_is_as_documented)
{
    float want[4] = {1, -2, 0.001f, 4}, got[4] = {1, -2, 0.001f, 4};
    ck_assert(kt_codegen_rel_err(got, want, 4) == 0);
    /* Near-zero element: floored by the rms (sqrt((1+4+1e-6+16)/4) ~ 2.29). */
    got[2] = 0.002f;
    double e = kt_codegen_rel_err(got, want, 4);
    ck_assert(fabs(e - 0.001 / sqrt((1 + 4 + 1e-6 + 16) / 4.0)) < 1e-6);
    got[2] = 0.001f;
    got[3] = 4.4f;
    ck_assert(fabs(kt_codegen_rel_err(got, want, 4) - 0.1) < 1e-6);
    got[3] = NAN;
    ck_assert(isinf(kt_codegen_rel_err(got, want, 4)));
    float data[3];
    kt_codegen_fill_random(data, 3, 1);
    for (int i = 0; i < 3; i++)
        ck_assert(fabsf(data[i]) >= 0.125f && fabsf(data[i]) <= 1.0f);
}
END_TEST

START_TEST(check_accepts_right_and_rejects_wrong_kernels)
{
    kt_dag_t *d = kt_ops_matmul(4, 6, 8, 0, (kt_epilogue_t[]){KT_EPI_RELU}, 1);
    kt_codegen_ref_t *ref = kt_codegen_ref_new(d, 3);
    ck_assert_msg(ref != NULL, "%s", kt_err_msg());
    double err = -1;
    char *src = kt_codegen_reference_c(d, "cand");
    ck_assert_int_eq(kt_codegen_ref_check(ref, src, "cand", &err), 0);
    ck_assert(err == 0);
    size_t n = 0;
    ck_assert_ptr_nonnull(kt_codegen_ref_expected(ref, 2, &n));
    ck_assert_int_eq((int)n, 24);

    /* Wrong answers: the accumulator starts at 1. */
    char *bad = strdup(src);
    char *p = strstr(bad, "float kt_acc = 0.0f");
    ck_assert_ptr_nonnull(p);
    p[strlen("float kt_acc = ")] = '1';
    ck_assert_int_eq(kt_codegen_ref_check(ref, bad, "cand", &err), KT_EINVAL);
    ck_assert(err > 1e-4);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "wrong answers"));
    free(bad);

    /* An output left unwritten (NaN) fails. */
    ck_assert_int_eq(kt_codegen_ref_check(ref, "int cand(float **b) { (void)b; return 0; }",
                                          "cand", &err), KT_EINVAL);
    ck_assert(isinf(err));

    /* A crash is reported, not fatal. */
    ck_assert_int_eq(kt_codegen_ref_check(ref, "int cand(float **b) { b[2] = 0; "
                                               "*(volatile float *)b[2] = 1; return 0; }",
                                          "cand", &err), KT_EIO);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "signal"));

    /* A compile error carries the compiler's message. */
    ck_assert_int_eq(kt_codegen_ref_check(ref, "int cand(float **b) { return undeclared_x; }",
                                          "cand", &err), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "undeclared_x"));
    ck_assert(isinf(err));

    /* A missing entry point. */
    ck_assert_int_eq(kt_codegen_ref_check(ref, src, "other", &err), KT_EIO);
    kt_codegen_ref_free(ref);

    ck_assert_int_eq(kt_codegen_check(d, src, "cand", 9, &err), 0);
    free(src);
    kt_dag_free(d);
}
END_TEST

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Element (i, j) of A [M, K] times B [K, N], A and B the first two buffers. */
static double matmul_at(const ran_t *r, int i, int j, int N, int K)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)r->bufs[0][i * K + k] * r->bufs[1][k * N + j];
    return s;
}

START_TEST(reference_new_epilogues_are_right)
{
    enum { M = 3, N = 5, K = 7 };
    /* dense * scale[j] + bias[j], clip(-0.3, 0.4): bufs data, weight, scale, bias, out. */
    kt_epi_t e1[] = {{.op = KT_EPI_MULTIPLY}, {.op = KT_EPI_BIAS_ADD},
                     {.op = KT_EPI_CLIP, .lo = -0.3, .hi = 0.4}};
    kt_dag_t *d = kt_ops_dense_ex(M, N, K, e1, 3);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    ran_t r;
    run_reference(d, &r);
    double want[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)r.bufs[0][i * K + k] * r.bufs[1][j * K + k];
            want[i * N + j] = clampd(s * r.bufs[2][j] + r.bufs[3][j], (float)-0.3, (float)0.4);
        }
    assert_close(r.bufs[4], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* matmul, sigmoid, * scale[0], tanh: bufs A, B, scale, out. */
    kt_epi_t e2[] = {{.op = KT_EPI_SIGMOID}, {.op = KT_EPI_MULTIPLY_SCALAR}, {.op = KT_EPI_TANH}};
    d = kt_ops_matmul_ex(M, N, K, 0, e2, 3);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    run_reference(d, &r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            want[i * N + j] = tanh(sigmoid(matmul_at(&r, i, j, N, K)) * r.bufs[2][0]);
    assert_close(r.bufs[3], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* matmul, hardswish, hardsigmoid(alpha 0.3, beta 0.6): bufs A, B, out. */
    kt_epi_t e3[] = {{.op = KT_EPI_HARDSWISH}, {.op = KT_EPI_HARDSIGMOID, .lo = 0.3, .hi = 0.6}};
    d = kt_ops_matmul_ex(M, N, K, 0, e3, 2);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    run_reference(d, &r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = matmul_at(&r, i, j, N, K), hs = s * clampd(s / 6 + 0.5, 0, 1);
            want[i * N + j] = clampd((float)0.3 * hs + (float)0.6, 0, 1);
        }
    assert_close(r.bufs[2], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);

    /* matmul, silu (EfficientNet's activation), relu: bufs A, B, out. */
    kt_epi_t e4[] = {{.op = KT_EPI_SILU}, {.op = KT_EPI_RELU}};
    d = kt_ops_matmul_ex(M, N, K, 0, e4, 2);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    run_reference(d, &r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = matmul_at(&r, i, j, N, K), silu = s * sigmoid(s);
            want[i * N + j] = silu > 0 ? silu : 0;
        }
    assert_close(r.bufs[2], want, M * N);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

/* Grouped / multiplier convolution in plain C, layout-aware:
 * output channel co reads input channels (co / og)*ig + rc, or for a
 * depthwise multiplier M channel co / M with weight [.., co / M, co % M]. */
static void conv_grouped_plain(int nchw, const float *x, const float *w, double *y, int H, int W,
                               int CI, int CO, int groups, int mult, int K, int S, int P, int OH,
                               int OW)
{
    int ig = CI / groups, og = CO / groups;
    for (int co = 0; co < CO; co++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double s = 0;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++) {
                        int h = oh * S - P + kh, ww = ow * S - P + kw;
                        if (h < 0 || h >= H || ww < 0 || ww >= W)
                            continue;
                        for (int rc = 0; rc < (mult ? 1 : ig); rc++) {
                            int c = mult ? co / mult : (co / og) * ig + rc;
                            double xv = nchw ? x[(c * H + h) * W + ww] : x[(h * W + ww) * CI + c];
                            double wv;
                            if (mult)
                                wv = nchw ? w[((co / mult * mult + co % mult) * K + kh) * K + kw]
                                          : w[((kh * K + kw) * CI + co / mult) * mult + co % mult];
                            else
                                wv = nchw ? w[((co * ig + rc) * K + kh) * K + kw]
                                          : w[((kh * K + kw) * ig + rc) * CO + co];
                            s += xv * wv;
                        }
                    }
                y[nchw ? (co * OH + oh) * OW + ow : (oh * OW + ow) * CO + co] = s;
            }
}

START_TEST(reference_grouped_and_multiplier_convs_are_right)
{
    /* 7x7, 3x3, stride 2, pad 1: OH = (7+2-3)/2+1 = 4. */
    enum { H = 7, W = 7, OH = 4, OW = 4, CI = 6, CO = 4, G = 2, C = 3, MU = 2 };
    kt_conv2d_params_t p = {{2, 2}, {1, 1, 1, 1}, {1, 1}};
    static double y[OH * OW * CI * MU];
    for (int nchw = 0; nchw < 2; nchw++) {
        kt_layout_t lay = nchw ? KT_LAYOUT_NCHW : KT_LAYOUT_NHWC;
        kt_dag_t *d = kt_ops_conv2d(lay, 1, H, W, CI, CO, 3, 3, G, &p, NULL, 0);
        ck_assert_msg(d != NULL, "%s", kt_err_msg());
        ck_assert_str_eq(kt_dag_stage(d, kt_codegen_buf_stage(d, 2))->name,
                         nchw ? "group_conv2d_nchw" : "group_conv2d_nhwc");
        ran_t r;
        run_reference(d, &r);
        conv_grouped_plain(nchw, r.bufs[0], r.bufs[1], y, H, W, CI, CO, G, 0, 3, 2, 1, OH, OW);
        assert_close(r.bufs[2], y, OH * OW * CO);
        ran_free(d, &r);
        kt_dag_free(d);

        d = kt_ops_depthwise_conv2d(lay, 1, H, W, C, MU, 3, 3, &p, NULL, 0);
        ck_assert_msg(d != NULL, "%s", kt_err_msg());
        run_reference(d, &r);
        conv_grouped_plain(nchw, r.bufs[0], r.bufs[1], y, H, W, C, C * MU, C, MU, 3, 2, 1, OH, OW);
        assert_close(r.bufs[2], y, OH * OW * C * MU);
        ran_free(d, &r);
        kt_dag_free(d);

        /* Multiplier 1 in NCHW: one weight per channel. */
        d = kt_ops_depthwise_conv2d(lay, 1, H, W, C, 1, 3, 3, &p, NULL, 0);
        run_reference(d, &r);
        conv_grouped_plain(nchw, r.bufs[0], r.bufs[1], y, H, W, C, C, C, 1, 3, 2, 1, OH, OW);
        assert_close(r.bufs[2], y, OH * OW * C);
        ran_free(d, &r);
        kt_dag_free(d);
    }
}
END_TEST

/* Winograd rounds differently from the direct sum: the input transform adds
 * up to alpha^2 values scaled by up to 2.5 (tile 4) and the output
 * transform scales by up to 8, so cancellation leaves errors a few hundred
 * float ulps of the output's magnitude with tile 4 and tens with tile 2.
 * The bounds below are on kt_codegen_rel_err (relative to the output's rms);
 * an error in a transform matrix or an index gives O(1). */
#define WINO_TOL_TILE2 1e-5
#define WINO_TOL_TILE4 1e-4

START_TEST(reference_winograd_conv2d_equals_direct)
{
    static const struct {
        int64_t n, h, w, ci, co, pad, tile;
        int nepi;
    } cases[] = {
        {1, 7, 9, 6, 5, 1, 2, 2},    /* odd sizes: the last tiles overhang */
        {2, 8, 7, 5, 3, 0, 2, 0},
        {1, 11, 6, 16, 4, 1, 4, 2},
        {2, 9, 10, 7, 6, 0, 4, 0},
        {1, 4, 4, 3, 2, 1, 4, 2},    /* one tile larger than the output */
    };
    const kt_epi_t br[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_RELU}};
    for (size_t c = 0; c < KT_ARRAY_LEN(cases); c++) {
        kt_conv2d_params_t p = kt_ops_conv2d_default();
        for (int i = 0; i < 4; i++)
            p.pad[i] = cases[c].pad;
        kt_dag_t *direct = kt_ops_conv2d(KT_LAYOUT_NHWC, cases[c].n, cases[c].h, cases[c].w,
                                         cases[c].ci, cases[c].co, 3, 3, 0, &p, br,
                                         cases[c].nepi);
        kt_dag_t *wino = kt_ops_conv2d_winograd_nhwc(cases[c].n, cases[c].h, cases[c].w,
                                                     cases[c].ci, cases[c].co, 3, 3,
                                                     cases[c].tile, &p, br, cases[c].nepi);
        ck_assert_msg(direct && wino, "case %zu: %s", c, kt_err_msg());
        ran_t rd, rw;
        run_reference(direct, &rd);
        load_reference(wino, &rw);
        /* Buffers: data, weight, [bias,] output in both DAGs. */
        int nb = kt_codegen_num_bufs(direct);
        ck_assert_int_eq(kt_codegen_num_bufs(wino), nb);
        const kt_stage_t *d0 = kt_dag_stage(direct, kt_codegen_buf_stage(direct, 0));
        memcpy(rw.bufs[0], rd.bufs[0], (size_t)kt_stage_numel(d0) * sizeof(float));
        ck_assert_int_eq(kt_ops_winograd_weight(cases[c].tile, cases[c].ci, cases[c].co,
                                                rd.bufs[1], rw.bufs[1]), 0);
        if (cases[c].nepi)
            memcpy(rw.bufs[2], rd.bufs[2], (size_t)cases[c].co * sizeof(float));
        ck_assert_int_eq(kt_codegen_lib_fn(rw.lib)(rw.bufs), 0);
        const kt_stage_t *out = kt_dag_stage(direct, kt_codegen_buf_stage(direct, nb - 1));
        double err = kt_codegen_rel_err(rw.bufs[nb - 1], rd.bufs[nb - 1],
                                        (size_t)kt_stage_numel(out));
        double tol = cases[c].tile == 2 ? WINO_TOL_TILE2 : WINO_TOL_TILE4;
        ck_assert_msg(err <= tol, "case %zu (tile %lld): error %.3g > %.0e", c,
                      (long long)cases[c].tile, err, tol);
        ran_free(direct, &rd);
        ran_free(wino, &rw);
        kt_dag_free(direct);
        kt_dag_free(wino);
    }
    /* The weight transform refuses what the DAG refuses. */
    float w[9], o[36];
    ck_assert_int_eq(kt_ops_winograd_weight(3, 1, 1, w, o), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'tile_size'"));
}
END_TEST

START_TEST(reference_nchw_pools_with_epilogues_are_right)
{
    enum { C = 2, H = 5, W = 5, OH = 3, OW = 3 };
    kt_conv2d_params_t p = {{2, 2}, {1, 1, 1, 1}, {1, 1}};
    kt_epi_t br[] = {{.op = KT_EPI_BIAS_ADD}, {.op = KT_EPI_RELU}};
    for (int kind = 0; kind < 2; kind++) {
        /* bufs: data, bias, out */
        kt_dag_t *d = kt_ops_pool2d(KT_LAYOUT_NCHW, kind ? KT_POOL_AVG : KT_POOL_MAX, 1, H, W, C,
                                    3, 3, &p, br, 2);
        ck_assert_msg(d != NULL, "%s", kt_err_msg());
        ran_t r;
        run_reference(d, &r);
        double y[C * OH * OW];
        for (int c = 0; c < C; c++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = kind ? 0 : -INFINITY;
                    int cnt = 0;
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++) {
                            int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                            if (h < 0 || h >= H || w < 0 || w >= W)
                                continue;
                            double v = r.bufs[0][(c * H + h) * W + w];
                            acc = kind ? acc + v : fmax(acc, v);
                            cnt++;
                        }
                    double v = (kind ? acc / cnt : acc) + r.bufs[1][c];
                    y[(c * OH + oh) * OW + ow] = v > 0 ? v : 0;
                }
        assert_close(r.bufs[2], y, C * OH * OW);
        ran_free(d, &r);
        kt_dag_free(d);
    }
    /* global average NCHW + sigmoid: out [2, 5, 1, 1]. */
    kt_epi_t sg[] = {{.op = KT_EPI_SIGMOID}};
    kt_dag_t *d = kt_ops_global_avg_pool(KT_LAYOUT_NCHW, 2, 3, 4, 5, sg, 1);
    ran_t r;
    run_reference(d, &r);
    double g[2 * 5];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 5; c++) {
            double s = 0;
            for (int i = 0; i < 12; i++)
                s += r.bufs[0][(n * 5 + c) * 12 + i];
            g[n * 5 + c] = sigmoid(s / 12);
        }
    assert_close(r.bufs[1], g, 10);
    ran_free(d, &r);
    kt_dag_free(d);
}
END_TEST

START_TEST(compile_returns_the_log)
{
    char so[] = "/tmp/kt_te_soXXXXXX";
    int fd = mkstemp(so);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char *log = NULL;
    ck_assert_int_eq(kt_codegen_compile("int f(float **b) { int unused; (void)b; return 0; }\n"
                                        "#warning kt_marker\n", so, &log), 0);
    ck_assert_ptr_nonnull(log);
    ck_assert_ptr_nonnull(strstr(log, "kt_marker"));
    free(log);
    kt_codegen_lib_t *lib = kt_codegen_load(so, "f");
    ck_assert_ptr_nonnull(lib);
    ck_assert_int_eq(kt_codegen_lib_fn(lib)(NULL), 0);
    kt_codegen_unload(lib);
    ck_assert_ptr_null(kt_codegen_load(so, "g"));
    ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
    unlink(so);
    kt_codegen_unload(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("te");
    TCase *tw = tcase_create("workload");
    tcase_add_test(tw, workload_parses_every_documented_form);
    tcase_add_test(tw, workload_canonical_json_round_trips);
    tcase_add_test(tw, workload_written_differently_is_the_same_workload);
    tcase_add_test(tw, workload_keys_are_golden);
    tcase_add_test(tw, workload_keys_see_reduce_extents);
    tcase_add_test(tw, workload_errors_name_the_field);
    tcase_add_test(tw, workload_keys_from_users_are_checked);
    tcase_add_test(tw, workload_load_reads_lists_files_and_weights);
    tcase_add_test(tw, workload_new_epilogues_and_ops_keep_old_canonical_json);
    suite_add_tcase(s, tw);
    TCase *td = tcase_create("dag");
    tcase_add_test(td, dag_text_of_matmul_is_golden);
    tcase_add_test(td, flop_counts_follow_tvm);
    tcase_add_test(td, analysis_finds_reuse_inlining_and_reductions);
    tcase_add_test(td, finalize_rejects_bad_dags);
    tcase_add_test(td, expr_print_follows_snprintf);
    tcase_add_test(td, expr_c_prints_exact_constants_and_flat_indices);
    suite_add_tcase(s, td);
    TCase *tr = tcase_create("reference");
    tcase_set_timeout(tr, 240);
    tcase_add_test(tr, reference_matmul_family_is_right);
    tcase_add_test(tr, reference_conv2d_nhwc_with_stride_padding_dilation_is_right);
    tcase_add_test(tr, reference_padded_dilated_conv_survives_gcc_unswitching);
    tcase_add_test(tr, reference_conv2d_nchw_and_depthwise_are_right);
    tcase_add_test(tr, reference_pools_are_right);
    tcase_add_test(tr, reference_softmax_and_layer_norm_are_right);
    tcase_add_test(tr, layer_norm_takes_the_models_epsilon);
    tcase_add_test(tr, reference_new_epilogues_are_right);
    tcase_add_test(tr, reference_grouped_and_multiplier_convs_are_right);
    tcase_add_test(tr, reference_winograd_conv2d_equals_direct);
    tcase_add_test(tr, reference_nchw_pools_with_epilogues_are_right);
    tcase_add_test(tr, reference_floor_division_handles_negative_indices);
    tcase_add_test(tr, rel_err_metric_is_as_documented);
    tcase_add_test(tr, check_accepts_right_and_rejects_wrong_kernels);
    tcase_add_test(tr, compile_returns_the_log);
    suite_add_tcase(s, tr);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
