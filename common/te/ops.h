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
 *   inside the input (count_include_pad = False, TVM relay's default), avg_pad
 *   by KH * KW (count_include_pad = True, PyTorch's default). Pads must be
 *   smaller than the kernel so no window is all padding.
 * - global avg pool NHWC: out [N, 1, 1, C].
 * - softmax over the last axis: stages T_softmax_maxelem, T_softmax_exp,
 *   T_softmax_expsum, T_softmax_norm (TVM's names). Rank >= 2.
 * - layer norm over the last axis: T_ln_mean, T_ln_var (biased, two-pass),
 *   T_layer_norm = (x - mean) * rsqrt(var + eps) [* gamma + beta]; gamma
 *   and beta [D] are placeholders when `affine` is set. Rank >= 2.
 * - depthwise conv2d NCHW: data [N, C, H, W], weight [C, M, KH, KW], out
 *   [N, C*M, OH, OW] (TVM's depthwise_conv2d_nchw). With a channel
 *   multiplier M > 1 output channel c reads input channel c / M and weight
 *   [.., c / M, c % M] (NHWC weight [KH, KW, C, M]); with M = 1 the DAG is
 *   the plain one above (no floordiv), so existing keys are unchanged.
 * - group conv2d (TVM's group_conv2d_nhwc / group_conv2d_nchw): CI and CO
 *   divisible by `groups`; NHWC weight [KH, KW, CI/groups, CO], NCHW weight
 *   [CO, CI/groups, KH, KW]; output channel ff reads input channels
 *   (ff / (CO/groups)) * (CI/groups) + rc.
 * - conv2d_winograd_nhwc (TVM's conv2d_winograd_nhwc "without weight
 *   transform", as its auto-scheduler uses it): a 3x3, stride 1, dilation 1
 *   conv2d NHWC computed on tiles of m x m outputs (tile_size m = 2 or 4,
 *   alpha = m + 2): input_tile [alpha, alpha, P, CI] (TVM's data_pad and
 *   input_tile in one stage: it gathers each tile's alpha x alpha window,
 *   zero outside the input, also where the last tiles overhang the output;
 *   a select, so materialized unless a state inlines it, and data_pack reads
 *   it with affine indices) -> data_pack = B^T d B -> bgemm [alpha, alpha,
 *   P, CO] summing over CI with the pre-transformed weight [alpha, alpha,
 *   CI, CO] (layout-free) ->
 *   inverse = A^T M A [m, m, P, CO] -> conv2d_winograd [N, OH, OW, CO]
 *   (+ epilogues), P = N * ceil(OH/m) * ceil(OW/m). The Cook-Toom matrices
 *   are the constant stages "B" [alpha, alpha] and "A" [alpha, m] (select
 *   chains, TVM's const_matrix). kt_ops_winograd_weight() turns a conv2d
 *   weight [3, 3, CI, CO] into the transformed one (G g G^T, at build time).
 *   The result equals conv2d_nhwc's up to rounding: the transforms add and
 *   scale by up to 8 (tile 4), so tile 4 loses more precision than tile 2.
 * - pool2d and global avg pool NCHW: as NHWC with the channel axis 1
 *   (global: out [N, C, 1, 1]).
 * - epilogues, each one elementwise stage on the previous output, in order:
 *   bias_add (placeholder "bias" [C] over the channel axis: the last axis,
 *   axis 1 for NCHW), relu (max(x, 0)), add (placeholder "residual" of the
 *   output's shape), gelu (x * 0.5 * (1 + erf(x / sqrt 2))), clip
 *   (max(min(x, hi), lo), TVM's clip; relu6 is clip(0, 6)), sigmoid
 *   (1 / (1 + exp(0 - x))), tanh, multiply (placeholder "scale" [C] over the
 *   channel axis) and multiply_scalar (placeholder "scale" [1]). Repeated
 *   epilogues get names with a suffix (T_relu_1). Pools and global pools
 *   take epilogues too (TVM fuses e.g. bias + relu after a max pool).
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
    KT_EPI_CLIP,          /* max(min(x, hi), lo): needs bounds, so only in kt_epi_t lists */
    KT_EPI_SIGMOID,       /* 1 / (1 + exp(-x)) */
    KT_EPI_TANH,          /* tanh(x) */
    KT_EPI_MULTIPLY,      /* * scale[channel] */
    KT_EPI_MULTIPLY_SCALAR, /* * scale[0] */
    KT_EPI_HARDSWISH,     /* x * clamp(x / 6 + 1/2, 0, 1) (ONNX HardSwish) */
    KT_EPI_HARDSIGMOID,   /* max(min(lo * x + hi, 1), 0): ONNX HardSigmoid with alpha = lo and
                           * beta = hi, so only in kt_epi_t lists */
    KT_EPI_SILU,          /* x * sigmoid(x) (SiLU, swish: PyTorch's nn.SiLU) */
    KT_EPI__COUNT
} kt_epilogue_t;

/* One epilogue with its parameters: the form every *_ex / layout-generic
 * constructor takes. lo and hi are the bounds of KT_EPI_CLIP (finite,
 * lo <= hi, rounded to float32 as the kernel uses them) and the alpha and
 * beta of KT_EPI_HARDSIGMOID (finite, float32-rounded); other epilogues
 * ignore them. */
typedef struct {
    kt_epilogue_t op;
    double lo, hi;
} kt_epi_t;

#define KT_OPS_MAX_EPILOGUE 8   /* epilogues per operator */
#define KT_OPS_LN_EPS 1e-5      /* layer norm epsilon */

/* "bias_add", "relu", "add", "gelu", "clip", "sigmoid", "tanh", "multiply",
 * "multiply_scalar", "hardswish", "hardsigmoid", "silu"; NULL for a bad value. */
const char *kt_ops_epilogue_name(kt_epilogue_t e);
/* Name to enum; 0, or KT_EINVAL for an unknown name. */
int kt_ops_epilogue_parse(const char *name, kt_epilogue_t *out);

/* The epilogues that take two numbers, kt_epi_t's lo and hi (clip's "min" and
 * "max", hardsigmoid's "alpha" and "beta"): their JSON keys and what the pair
 * is called in messages. NULL for the epilogues that take none. */
typedef struct {
    const char *lo_key, *hi_key, *what;
} kt_epi_params_t;
const kt_epi_params_t *kt_ops_epilogue_params(kt_epilogue_t e);

/* Activation layout of the convolution and pool constructors that take one. */
typedef enum { KT_LAYOUT_NHWC = 0, KT_LAYOUT_NCHW } kt_layout_t;

/* Window parameters of conv2d and pool2d. */
typedef struct {
    int64_t stride[2];     /* h, w; >= 1 */
    int64_t pad[4];        /* top, left, bottom, right; >= 0 */
    int64_t dilation[2];   /* h, w; >= 1 (pool2d: must be 1) */
} kt_conv2d_params_t;

/* Stride 1, no padding, dilation 1. */
kt_conv2d_params_t kt_ops_conv2d_default(void);

/* KT_POOL_AVG_PAD: average over the whole window, padding counted as zeros. */
typedef enum { KT_POOL_MAX = 0, KT_POOL_AVG, KT_POOL_AVG_PAD } kt_pool_kind_t;

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

/* ---- the same with parameterized epilogues, and the layout-generic forms ---
 * The functions above take plain epilogue kinds (KT_EPI_CLIP and
 * KT_EPI_HARDSIGMOID are refused there: they need parameters) and build
 * exactly what these build. */

kt_dag_t *kt_ops_matmul_ex(int64_t M, int64_t N, int64_t K, int b_transposed,
                           const kt_epi_t *epi, int nepi);
kt_dag_t *kt_ops_dense_ex(int64_t M, int64_t N, int64_t K, const kt_epi_t *epi, int nepi);
kt_dag_t *kt_ops_batch_matmul_ex(int64_t B, int64_t M, int64_t N, int64_t K,
                                 const kt_epi_t *epi, int nepi);
/* groups = 0: plain conv2d_nhwc / conv2d_nchw; groups >= 1: group_conv2d_*
 * (TVM's grouped operator, also for groups = 1). */
kt_dag_t *kt_ops_conv2d(kt_layout_t layout, int64_t N, int64_t H, int64_t W, int64_t CI,
                        int64_t CO, int64_t KH, int64_t KW, int64_t groups,
                        const kt_conv2d_params_t *p, const kt_epi_t *epi, int nepi);
/* Winograd conv2d NHWC (see the header comment); KH and KW must be 3, stride
 * and dilation 1, tile 2 or 4 (errors name the field). */
kt_dag_t *kt_ops_conv2d_winograd_nhwc(int64_t N, int64_t H, int64_t W, int64_t CI, int64_t CO,
                                      int64_t KH, int64_t KW, int64_t tile,
                                      const kt_conv2d_params_t *p, const kt_epi_t *epi,
                                      int nepi);
/* The Winograd weight of a conv2d weight w [3, 3, CI, CO] (HWIO, as
 * conv2d_nhwc's): out [alpha, alpha, CI, CO] = G w G^T per (CI, CO), summed
 * in double and rounded once. 0 or KT_EINVAL (bad tile or sizes). */
int kt_ops_winograd_weight(int64_t tile, int64_t CI, int64_t CO, const float *w, float *out);
/* C input channels, channel multiplier M (output channels C*M). */
kt_dag_t *kt_ops_depthwise_conv2d(kt_layout_t layout, int64_t N, int64_t H, int64_t W,
                                  int64_t C, int64_t M, int64_t KH, int64_t KW,
                                  const kt_conv2d_params_t *p, const kt_epi_t *epi, int nepi);
kt_dag_t *kt_ops_pool2d(kt_layout_t layout, kt_pool_kind_t kind, int64_t N, int64_t H,
                        int64_t W, int64_t C, int64_t KH, int64_t KW,
                        const kt_conv2d_params_t *p, const kt_epi_t *epi, int nepi);
kt_dag_t *kt_ops_global_avg_pool(kt_layout_t layout, int64_t N, int64_t H, int64_t W, int64_t C,
                                 const kt_epi_t *epi, int nepi);

/* ---- other operators ----------------------------------------------------- */

kt_dag_t *kt_ops_pool2d_nhwc(kt_pool_kind_t kind, int64_t N, int64_t H, int64_t W, int64_t C,
                             int64_t KH, int64_t KW, const kt_conv2d_params_t *p);
kt_dag_t *kt_ops_global_avg_pool_nhwc(int64_t N, int64_t H, int64_t W, int64_t C);
kt_dag_t *kt_ops_softmax(int ndim, const int64_t *shape);
kt_dag_t *kt_ops_layer_norm(int ndim, const int64_t *shape, int affine);
/* The same with the model's epsilon (ConvNeXt's is 1e-6); KT_EINVAL unless
 * 0 < eps < 1. */
kt_dag_t *kt_ops_layer_norm_eps(int ndim, const int64_t *shape, int affine, double eps);

#endif
