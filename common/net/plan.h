/*
 * A network's execution plan: what `ktune build` turns into a C library. The
 * plan lists, in topological order, every step that computes the network
 * from its input: a call of a task's kernel (one appearance of a fused
 * subgraph, net.h's kt_net_instance_t) with its buffers bound, or a simple
 * operator the tasks do not cover (a stand-alone elementwise layer, a
 * transpose, a concatenation, a layout conversion at the edge of the NHWC
 * kernels, or any other operator the importer kept as a call of its
 * reference implementation: slices, pads, gathers, reductions...). It also holds the constant tensors every kernel reads, already
 * folded and laid out as its te operator expects: batch norm folded into the
 * convolution's weights and bias (or forward into the next convolution's
 * input channels, as extraction decided), conv2d weights transposed to
 * [KH, KW, CI, CO] for NHWC operators. Values (intermediate tensors) get
 * offsets in one arena planned by liveness, so buffers are reused.
 *
 * Parameters come from the network when it carries them (ONNX models,
 * kt_net_has_params) or are drawn from a generator seeded by `seed`, layer
 * by layer (the same seed gives the same network in either layout).
 *
 * What a plan cannot express is an error naming the layer: unsupported
 * operators, anchors te has no task for, networks with more than
 * KT_PLAN_MAX_INPUTS inputs or with several outputs.
 *
 * Ownership: kt_net_plan() returns a plan the caller frees with
 * kt_net_plan_free() (accepts NULL); it keeps no pointer into the network or
 * tasks. Threads: a plan is immutable once built.
 */
#ifndef KT_NET_PLAN_H
#define KT_NET_PLAN_H

#include <stdint.h>

#include "net.h"
#include "refop/refop.h"

#define KT_PLAN_MAX_IN 256  /* buffers of one step (a concat's inputs) */
#define KT_PLAN_MAX_INPUTS 8   /* graph inputs of a network (data, a mask, ids...) */

typedef enum {
    KT_PLAN_TASK = 0,   /* call the kernel of `task` with in[] (kernel buffer order) and out */
    KT_PLAN_LAYOUT,     /* in[0] -> out: [N, C, H, W] <-> [N, H, W, C] as the values say */
    KT_PLAN_COPY,       /* in[0] -> out, same bytes */
    KT_PLAN_UNARY,      /* out = f(in[0]) elementwise; `unary` says which */
    KT_PLAN_CHANNEL,    /* out = in[0] * in[1] + in[2] per channel (in[1] or in[2] may be absent) */
    KT_PLAN_BINARY,     /* out = in[0] (+ or *) in[1] with numpy broadcasting */
    KT_PLAN_TRANSPOSE,  /* out = in[0] permuted by perm */
    KT_PLAN_CONCAT,     /* out = in[0..nin) joined along axis */
    KT_PLAN_REFOP,      /* out = the reference operator `rop` of in[0..nin) (refop.h) */
} kt_plan_kind_t;

/* HARDSIGMOID takes alpha and beta in the step's lo and hi. */
typedef enum {
    KT_PLAN_RELU = 0, KT_PLAN_GELU, KT_PLAN_SIGMOID, KT_PLAN_TANH, KT_PLAN_CLIP,
    KT_PLAN_HARDSWISH, KT_PLAN_HARDSIGMOID, KT_PLAN_SILU
} kt_plan_unary_t;

typedef enum {
    KT_PLAN_V_INPUT = 0,   /* the caller's input buffer (model layout, read only) */
    KT_PLAN_V_OUTPUT,      /* the caller's output buffer (model layout) */
    KT_PLAN_V_ARENA,       /* at `offset` bytes in the arena */
    KT_PLAN_V_ALIAS,       /* the same memory as value `alias` (a reshape) */
} kt_plan_vkind_t;

/* One tensor the steps read or write. */
typedef struct {
    kt_plan_vkind_t kind;
    int ndim;
    int64_t dims[KT_NET_MAX_DIMS];   /* logical (model) shape */
    int nhwc;                        /* 4-D held as [N, H, W, C] */
    int64_t numel;
    int64_t offset;                  /* ARENA: bytes from the arena's start (64-aligned) */
    int alias;                       /* ALIAS: the value whose memory it is */
    int slot;                        /* INPUT: which of the network's inputs */
} kt_plan_value_t;

/* A buffer a step reads: a value or a constant. */
typedef struct {
    int weight;   /* 1: weights[id]; 0: values[id]; id -1: absent */
    int id;
} kt_plan_ref_t;

typedef struct {
    kt_plan_kind_t kind;
    char *name;          /* "conv0 + bn0 + relu0", "flatten", "layout NCHW->NHWC (data)" */
    int task;            /* TASK: task index; else -1 */
    int nin;
    kt_plan_ref_t in[KT_PLAN_MAX_IN];
    int out;             /* value written */
    kt_plan_unary_t unary;
    double lo, hi;       /* CLIP bounds; HARDSIGMOID alpha, beta */
    int binary_mul;      /* BINARY: 1 multiply, 0 add */
    int64_t outer, chan, inner;   /* CHANNEL: out[o][c][i] over [outer, chan, inner] */
    int axis;            /* CONCAT (logical axis) */
    int perm[KT_NET_MAX_DIMS];    /* TRANSPOSE */
    kt_refop_t rop;      /* REFOP: the call, inputs in model layout */
} kt_plan_step_t;

/* A constant tensor: float32, row-major in the layout its kernel reads. */
typedef struct {
    char *name;          /* "<layer>.weight", "<layer>.bias", ... (unique) */
    int ndim;
    int64_t dims[KT_NET_MAX_DIMS];
    int64_t numel;
    float *data;
} kt_plan_weight_t;

typedef struct {
    kt_plan_value_t *values;
    int nvalues;
    kt_plan_step_t *steps;
    int nsteps;
    kt_plan_weight_t *weights;
    int nweights;
    int input, output;      /* the first INPUT value and the OUTPUT value */
    int ninputs;            /* graph inputs, in the model's order */
    int inputs[KT_PLAN_MAX_INPUTS];       /* their INPUT values */
    int input_int[KT_PLAN_MAX_INPUTS];    /* 1: integers (token ids, a mask) held as floats */
    char *input_names[KT_PLAN_MAX_INPUTS];   /* the model's names (owned) */
    int64_t arena_bytes;    /* planned arena size */
    int64_t naive_bytes;    /* what the arena values take without reuse */
    int params_random;      /* 1: parameters were drawn from the seed */
} kt_net_plan_t;

/* Plan `net`, whose tasks were extracted with `layout` into `tasks`. NULL
 * with a message naming the layer when the network cannot be built. */
kt_net_plan_t *kt_net_plan(const kt_net_t *net, const kt_net_tasks_t *tasks,
                           kt_net_layout_t layout, uint64_t seed);
void kt_net_plan_free(kt_net_plan_t *p);

/* Where a task has alternatives (kt_net_extract_ex), run the faster: ms[t]
 * is task t's best measured milliseconds (0 or less: no record). An
 * alternative with a record that is faster than its direct task's (or whose
 * direct task has none) takes over every step of that task; for a Winograd
 * conv2d the step's weight is transformed here, at build time
 * (kt_ops_winograd_weight), so nothing is transformed at run time. used
 * (may be NULL) receives per task whether a step now calls it. Call once,
 * after kt_net_plan. 0 or negative. */
int kt_net_plan_use_alternatives(kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                                 const double *ms, int *used);

/* Memory axis j of a 4-D value held NHWC holds its logical ([N, C, H, W])
 * axis kt_plan_nhwc_axis[j]; logical axis d is memory axis
 * kt_plan_nhwc_memory_axis[d]. */
extern const int kt_plan_nhwc_axis[4], kt_plan_nhwc_memory_axis[4];

/* "task", "layout", "copy", "unary", "channel", "binary", "transpose",
 * "concat" or "refop" (a static string; "?" for no kind). */
const char *kt_plan_kind_name(kt_plan_kind_t k);

/* The value whose memory value v uses (follows aliases). */
int kt_net_plan_root(const kt_net_plan_t *p, int v);

#endif
