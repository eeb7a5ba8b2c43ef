/*
 * Reference operators: one implementation of each ONNX-style operator ktune
 * has no tuned kernel for (elementwise maps, broadcasting arithmetic and
 * comparisons, Where, slices, expands, tiles and transposes as strided
 * views, Pad, Gather, reductions over any axes, softmax over any axes,
 * Trilu, Range). The same code serves three places, so an operator is
 * written once: constant folding at import (double), the plain steps of a
 * built network (float: this header and refop_impl.h are embedded in the
 * generated library's source), and the checks that compare them.
 *
 * A kt_refop_t describes one call completely: the operator, its inputs'
 * shapes, its output shape and its attributes; kt_refop_infer() fills the
 * output shape from the rest (libktune only). Tensors are dense, row-major,
 * of the element type of the instance (integers and booleans are held as
 * their values in that type). Indices that fall outside their axis (Gather)
 * are clamped into it, so no input can make a call read out of bounds.
 *
 * Threads: a descriptor is immutable during a call; calls share nothing.
 * Ownership: the caller owns every buffer; nothing here allocates except
 * kt_refop_run_*'s scratch-free loops (none).
 *
 * This header must stay plain C17 with no include beyond <stdint.h>: the
 * generated network library compiles it without libktune's headers.
 */
#ifndef KT_REFOP_REFOP_H
#define KT_REFOP_REFOP_H

#include <stdint.h>

#define KT_REFOP_MAX_DIMS 8
#define KT_REFOP_MAX_IN 3
#define KT_REFOP_MAX_NUMEL (1LL << 40)   /* elements of any tensor a call reads or writes */

typedef enum {
    KT_REFOP_UNARY = 1,   /* ia[0] unary code; fa[0], fa[1] its parameters */
    KT_REFOP_BINARY,      /* two inputs, numpy broadcasting; ia[0] binary code */
    KT_REFOP_WHERE,       /* in[0] ? in[1] : in[2], broadcasting */
    KT_REFOP_VIEW,        /* out[i] = in[ia[0] + sum_d (i_d % ia[9+d] or i_d) * ia[1+d]] */
    KT_REFOP_PAD,         /* ia[0] mode; ia[1+d] pads before dim d (negative crops); fa[0] value */
    KT_REFOP_GATHER,      /* in[0] data, in[1] indices (negative from the end); ia[0] axis */
    KT_REFOP_REDUCE,      /* ia[0] reduce code; ia[1] bit mask of reduced input axes */
    KT_REFOP_SOFTMAX,     /* over input axes [ia[0], ia[1]); ia[2] 1: log-softmax */
    KT_REFOP_TRILU,       /* over the last two axes; ia[0] 1: upper; ia[1] diagonal k */
    KT_REFOP_RANGE,       /* no input; out[i] = fa[0] + i * fa[1] */
    KT_REFOP_SCATTER_ND,  /* in[0] data, in[1] indices [..., k], in[2] updates: ONNX ScatterND */
    KT_REFOP__COUNT
} kt_refop_op_t;

typedef enum {
    KT_RU_IDENTITY = 0, KT_RU_RELU, KT_RU_GELU, KT_RU_GELU_TANH, KT_RU_SIGMOID, KT_RU_TANH,
    KT_RU_CLIP,          /* fa[0] lo, fa[1] hi */
    KT_RU_HARDSIGMOID,   /* fa[0] alpha, fa[1] beta */
    KT_RU_HARDSWISH, KT_RU_ERF, KT_RU_EXP, KT_RU_LOG, KT_RU_SQRT, KT_RU_RECIPROCAL, KT_RU_NEG,
    KT_RU_ABS, KT_RU_SOFTPLUS, KT_RU_SOFTSIGN,
    KT_RU_LEAKYRELU,     /* fa[0] alpha */
    KT_RU_ELU,           /* fa[0] alpha */
    KT_RU_SELU,          /* fa[0] alpha, fa[1] gamma */
    KT_RU_CELU,          /* fa[0] alpha */
    KT_RU_THRESHOLDEDRELU, /* fa[0] alpha */
    KT_RU_FLOOR, KT_RU_CEIL, KT_RU_ROUND, KT_RU_SIN, KT_RU_COS, KT_RU_SIGN, KT_RU_MISH,
    KT_RU_NOT,           /* booleans: 1 where x == 0 */
    KT_RU_TRUNC,         /* a cast to an integer type: toward zero */
    KT_RU_BOOL,          /* a cast to bool: x != 0 */
    KT_RU_ISNAN, KT_RU_ISINF, KT_RU_SILU,
    KT_RU__COUNT
} kt_refop_unary_t;

typedef enum {
    KT_RB_ADD = 0, KT_RB_SUB, KT_RB_MUL, KT_RB_DIV, KT_RB_POW, KT_RB_MAX, KT_RB_MIN,
    KT_RB_MOD,      /* the sign of the divisor (ONNX Mod, fmod 0) */
    KT_RB_FMOD,     /* the sign of the dividend (fmod 1) */
    KT_RB_EQUAL, KT_RB_LESS, KT_RB_GREATER, KT_RB_LESS_EQUAL, KT_RB_GREATER_EQUAL,
    KT_RB_AND, KT_RB_OR, KT_RB_XOR,
    KT_RB_PRELU,    /* x < 0 ? x * slope : x */
    KT_RB_IDIV,     /* integer division rounding down (shape arithmetic) */
    KT_RB__COUNT
} kt_refop_binary_t;

typedef enum {
    KT_RR_SUM = 0, KT_RR_MEAN, KT_RR_MAX, KT_RR_MIN, KT_RR_PROD, KT_RR_L1, KT_RR_L2,
    KT_RR_SUMSQUARE, KT_RR_LOGSUM, KT_RR_LOGSUMEXP,
    KT_RR__COUNT
} kt_refop_reduce_t;

typedef enum { KT_RP_CONSTANT = 0, KT_RP_REFLECT, KT_RP_EDGE, KT_RP_WRAP } kt_refop_pad_t;

typedef struct {
    int op;                                    /* kt_refop_op_t */
    int nin;
    int ndim[KT_REFOP_MAX_IN];
    int64_t din[KT_REFOP_MAX_IN][KT_REFOP_MAX_DIMS];
    int ondim;
    int64_t dout[KT_REFOP_MAX_DIMS];
    int64_t ia[2 + 2 * KT_REFOP_MAX_DIMS];
    double fa[2];
} kt_refop_t;

/* The float and double instances (refop_impl.h). `in` holds r->nin
 * buffers; `out` holds the output's elements and never aliases an input. */
void kt_refop_run_f(const kt_refop_t *r, const float *const *in, float *out);
void kt_refop_run_d(const kt_refop_t *r, const double *const *in, double *out);

/* Elements of a shape (1 for rank 0). */
static inline int64_t kt_refop_numel(int ndim, const int64_t *d)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++)
        n *= d[k];
    return n;
}

#ifndef KT_REFOP_EMBEDDED
/* Validate r's operator, inputs and attributes and set its output shape
 * (ondim, dout); every shape's size is at most KT_REFOP_MAX_NUMEL, so
 * kt_refop_numel cannot overflow on a descriptor it accepted. 0, or
 * KT_EINVAL with a message saying what is wrong. */
int kt_refop_infer(kt_refop_t *r);
/* Text of refop.h and refop_impl.h, for the generated library. */
extern const char kt_refop_header_text[];
extern const char kt_refop_impl_text[];
#endif

#endif
