/*
 * The operator library: constructors that build the compute DAG of one
 * tensor operator (TVM's topi compute declarations), float32, with optional
 * elementwise epilogues fused into the same DAG after the anchor operator as
 * TVM's task extraction does (conv + bias + relu is one task).
 *
 * Layouts, names and choices
 * - matmul:  A [M, K], B [K, N] (NN) or B [N, K] (NT); C(i, j) += A*B over k.
 * - dense:   data [M, K], weight [N, K]; T_dense(i, j) += data[i, k]*weight[j, k].
 * - batch_matmul: A [B, M, K], B [B, K, N]; C(b, i, j) += A[b, i, k]*B[b, k, j].
 * - conv2d NHWC: data [N, H, W, CI], weight [KH, KW, CI, CO], out [N, OH, OW, CO].
 *   conv2d NCHW: data [N, CI, H, W], weight [CO, CI, KH, KW], out [N, CO, OH, OW].
 *   OH = (H + pad_top + pad_bottom - dilation_h*(KH - 1) - 1) / stride_h + 1.
 *   Padding is a separate inlinable stage "pad_temp" (a select, as TVM),
 *   left out when all pads are 0.
 * - depthwise conv2d NHWC: data [N, H, W, C], weight [KH, KW, C, 1] (TVM's
 *   HWOI layout with channel multiplier 1), out [N, OH, OW, C].
 * - pool2d NHWC: max pads with -inf; avg divides by the number of elements
 *   inside the input (count_include_pad = False, TVM relay's default). Pads
 *   must be smaller than the kernel so no window is all padding.
 * - global avg pool NHWC: out [N, 1, 1, C].
 * - softmax over the last axis: stages T_softmax_maxelem, T_softmax_exp,
 *   T_softmax_expsum, T_softmax_norm (TVM's names). Rank >= 2.
 * - layer norm over the last axis: T_ln_mean, T_ln_var (biased, two-pass),
 *   T_layer_norm = (x - mean) * rsqrt(var + 1e-5) [* gamma + beta]; gamma
 *   and beta [D] are placeholders when `affine` is set. Rank >= 2.
 * - epilogues, each one elementwise stage on the previous output, in order:
 *   bias_add (placeholder "bias" [C] over the channel axis: the last axis,
 *   axis 1 for NCHW), relu (max(x, 0)), add (placeholder "residual" of the
 *   output's shape), gelu (x * 0.5 * (1 + erf(x / sqrt 2))). Repeated
 *   epilogues get names with a suffix (T_relu_1).
 *
 * Every constructor returns a finalized DAG (caller frees with kt_dag_free),
 * or NULL with kt_err naming the offending parameter by its workload JSON
 * field ("KH", "padding", ...). Thread-safe (no shared state).
 */
#ifndef KT_TE_OPS_H
#define KT_TE_OPS_H

#include <stdint.h>

#include "te.h"

/* Elementwise epilogues fused after an anchor operator. */
typedef enum {
    KT_EPI_BIAS_ADD = 0,  /* + bias[channel] */
    KT_EPI_RELU,          /* max(x, 0) */
    KT_EPI_ADD,           /* + residual[same index] */
    KT_EPI_GELU,          /* erf form */
    KT_EPI__COUNT
} kt_epilogue_t;

#define KT_OPS_MAX_EPILOGUE 8   /* epilogues per operator */
#define KT_OPS_LN_EPS 1e-5      /* layer norm epsilon */

/* "bias_add", "relu", "add", "gelu"; NULL for a bad value. */
const char *kt_ops_epilogue_name(kt_epilogue_t e);
/* Name to enum; 0, or KT_EINVAL for an unknown name. */
int kt_ops_epilogue_parse(const char *name, kt_epilogue_t *out);

/* Window parameters of conv2d and pool2d. */
typedef struct {
    int64_t stride[2];     /* h, w; >= 1 */
    int64_t pad[4];        /* top, left, bottom, right; >= 0 */
    int64_t dilation[2];   /* h, w; >= 1 (pool2d: must be 1) */
} kt_conv2d_params_t;

/* Stride 1, no padding, dilation 1. */
kt_conv2d_params_t kt_ops_conv2d_default(void);

typedef enum { KT_POOL_MAX = 0, KT_POOL_AVG } kt_pool_kind_t;

/* ---- anchors with epilogues -------------------------------------------- */

kt_dag_t *kt_ops_matmul(int64_t M, int64_t N, int64_t K, int b_transposed,
                        const kt_epilogue_t *epi, int nepi);
kt_dag_t *kt_ops_dense(int64_t M, int64_t N, int64_t K, const kt_epilogue_t *epi, int nepi);
kt_dag_t *kt_ops_batch_matmul(int64_t B, int64_t M, int64_t N, int64_t K,
                              const kt_epilogue_t *epi, int nepi);
kt_dag_t *kt_ops_conv2d_nhwc(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p,
                             const kt_epilogue_t *epi, int nepi);
kt_dag_t *kt_ops_conv2d_nchw(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p,
                             const kt_epilogue_t *epi, int nepi);
kt_dag_t *kt_ops_depthwise_conv2d_nhwc(int64_t N, int64_t H, int64_t W, int64_t C, int64_t KH,
                                       int64_t KW, const kt_conv2d_params_t *p,
                                       const kt_epilogue_t *epi, int nepi);

/* ---- other operators ----------------------------------------------------- */

kt_dag_t *kt_ops_pool2d_nhwc(kt_pool_kind_t kind, int64_t N, int64_t H, int64_t W, int64_t C,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p);
kt_dag_t *kt_ops_global_avg_pool_nhwc(int64_t N, int64_t H, int64_t W, int64_t C);
kt_dag_t *kt_ops_softmax(int ndim, const int64_t *shape);
kt_dag_t *kt_ops_layer_norm(int ndim, const int64_t *shape, int affine);

#endif
