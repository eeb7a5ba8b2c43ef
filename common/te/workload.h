/*
 * Workloads: the JSON form users write (README, "Workload JSON"), parsed into
 * a compute DAG built by the operator library (ops.h), with its canonical
 * JSON, flop count and stable workload key ["<hash>", [shape], ...].
 *
 * Accepted objects ("op" selects the fields; every listed field is required
 * unless a default is given; sizes are positive integers):
 *   matmul        M N K, layout "NN"|"NT" (default NN), epilogue
 *   dense         M N K, epilogue
 *   batch_matmul  B M N K, epilogue
 *   conv2d_nhwc, conv2d_nchw  N H W CI CO KH KW, stride, padding, dilation, epilogue
 *   group_conv2d_nhwc, group_conv2d_nchw  as conv2d plus groups (divides CI and CO)
 *   conv2d_winograd_nhwc  as conv2d_nhwc plus tile_size (2 or 4); KH = KW = 3,
 *                 stride and dilation [1, 1]; its weight is the transformed
 *                 [tile_size+2, tile_size+2, CI, CO] (ops.h)
 *   depthwise_conv2d_nhwc, depthwise_conv2d_nchw  N H W C KH KW, multiplier
 *                 (default 1: C*multiplier output channels), stride, padding,
 *                 dilation, epilogue
 *   pool2d, pool2d_nchw  kind "max"|"avg", N H W C KH KW, stride, padding, epilogue
 *   global_avg_pool, global_avg_pool_nchw  N H W C, epilogue
 *   softmax       shape [d0, ..., dn] (rank 2..8)
 *   layer_norm    shape, affine true|false (default true: gamma, beta)
 * stride and dilation are [h, w] (default [1, 1]); padding is [h, w] or
 * [top, left, bottom, right] (default [0, 0]); epilogue is a list (default
 * []) whose entries are "bias_add", "relu", "add", "gelu", "sigmoid",
 * "tanh", "multiply" (per channel), "multiply_scalar", or a clip object
 * {"op": "clip", "min": x, "max": y} (finite, min <= max; "relu6" is short
 * for clip 0..6). Unknown fields, wrong types, duplicate keys and shapes
 * whose output would be empty are errors naming the field.
 *
 * Canonical JSON: compact, sorted keys, every default filled in, padding in
 * its 2-value form when symmetric, clip as the object with float32-rounded
 * bounds. Two fields added later are written only when they differ from
 * their default, so every older workload keeps its canonical JSON: a
 * depthwise "multiplier" of 1 and an empty "epilogue" of pool2d and
 * global_avg_pool; two spellings of one workload give the
 * same canonical JSON and key. Key: ["<32 hex digits>", [shape], ...] where
 * the hash is XXH3-128 of kt_dag_hash_text() (high 64 bits first) and the
 * shapes are the DAG's placeholders in stage order, then its outputs, as in
 * TVM's workload keys.
 *
 * Ownership: a kt_workload_t owns its DAG and strings; kt_workload_free()
 * releases all (accepts NULL). Immutable after creation: any thread may read.
 */
#ifndef KT_TE_WORKLOAD_H
#define KT_TE_WORKLOAD_H

#include "te.h"

typedef struct kt_workload kt_workload_t;

/* Parse one workload object from JSON text. NULL + kt_err naming the field on
 * bad JSON, unknown op, missing field or inconsistent shapes. */
kt_workload_t *kt_workload_parse(const char *json_text);

/* Load workloads from `arg`: inline JSON (starts with '{' or '[') or a file
 * path. Accepts one workload object, or a list whose items are workload
 * objects or {"workload": {...}, "weight": W}. On success *out and *weights
 * are malloc'd arrays of *n entries (caller frees each workload, then both
 * arrays); weights default to 1. */
int kt_workload_load(const char *arg, kt_workload_t ***out, double **weights, int *n);

void kt_workload_free(kt_workload_t *w);

/* ---- Workload keys given by users and peers ---------------------------------------------- */

/* The form of a workload key, for messages that say what was expected. */
#define KT_WORKLOAD_KEY_FORM "[\"<hash>\", [shape], ...]"
/* Longest text kt_workload_key_parse() accepts: far above any real key
 * (a few shapes of rank <= 8), so a peer cannot make it parse megabytes. */
#define KT_WORKLOAD_KEY_MAX 4096

/* Check that text is a workload key: a JSON list of the hash (a string of 1
 * to 64 hex digits) and one or more shapes, each a list of positive
 * integers. On success *canon, unless canon is NULL, gets the key written as
 * kt_workload_key() writes it (lower-case hash, ", " between items; malloc'd),
 * so that a key pasted with other spacing finds the same records. KT_EINVAL
 * with a message naming what is wrong and KT_WORKLOAD_KEY_FORM otherwise. */
int kt_workload_key_parse(const char *text, char **canon);

/* The workload key an argument names: a workload key (as kt_workload_key_parse
 * writes it) or one workload object as inline JSON (its key). *key is
 * malloc'd. Anything else, the empty string included, is KT_EINVAL with a
 * message naming both accepted forms. */
int kt_workload_key_from_arg(const char *arg, char **key);

const kt_dag_t *kt_workload_dag(const kt_workload_t *w);
const char *kt_workload_op(const kt_workload_t *w);    /* "matmul" */
const char *kt_workload_key(const kt_workload_t *w);   /* ["<hash>", [512, 512], ...] */
const char *kt_workload_json(const kt_workload_t *w);  /* canonical JSON (sorted keys) */
double kt_workload_flops(const kt_workload_t *w);

/* For a conv2d_winograd_nhwc workload: the canonical JSON of the
 * conv2d_nhwc workload it computes another way (same fields but tile_size),
 * malloc'd; NULL for other ops (kt_err untouched) or on OOM (kt_err set). */
char *kt_workload_winograd_direct_json(const kt_workload_t *w);

#endif
