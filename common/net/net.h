/*
 * Networks and their tuning tasks. A network is a small graph of layers
 * (conv2d, dense, matmul, batch norm, bias add, scale, relu, gelu, clip,
 * sigmoid, tanh, residual add, pooling, softmax, layer norm and shape-only ops
 * such as reshape) whose shapes are inferred when it is built. It comes from
 * the built-in model zoo, a JSON network file (NETWORKS.md) or an ONNX model;
 * ONNX models also carry their layers' constant parameter values (below);
 * the others hold only the parameters' shapes.
 *
 * kt_net_extract() partitions a network into tuning tasks as TVM's
 * auto_scheduler.extract_tasks does: each anchor operator (conv2d, grouped
 * and depthwise conv2d, dense, matmul, batch_matmul, pool, global pool,
 * softmax, layer norm) becomes one task together with the elementwise layers
 * TVM would fuse after it (all but softmax and layer norm take them) and te
 * can express as epilogues (bias add and folded batch norm shifts as
 * "bias_add", unfoldable scales as "multiply", relu, gelu, clip (relu6),
 * sigmoid, tanh, residual "add"); identical workloads (same workload key)
 * are merged and their weight is the number of appearances. Shape-only
 * layers and stand-alone elementwise layers produce no task (TVM's
 * include_simple_tasks=False). Tasks are listed in order of first appearance
 * in the network's topological layer order. What cannot be expressed is
 * listed as issues, never silently dropped: layers te has no operator for
 * ("unsupported") and elementwise layers TVM would fuse into a task but te has
 * no epilogue for ("not fused": they run as separate simple operators).
 *
 * Layouts: 4-D activations are held as [N, C, H, W] inside a network (the
 * ONNX and PyTorch convention); the layout given to kt_net_extract() only
 * selects which te operators the tasks use (conv2d_nhwc or conv2d_nchw...);
 * every anchor exists in both layouts.
 *
 * Ownership: constructors return a kt_net_t the caller frees with
 * kt_net_free(); kt_net_extract() returns a kt_net_tasks_t (tasks, their
 * workloads, JSON objects and strings) freed with kt_net_tasks_free(). Both
 * accept NULL. Threads: a built network is immutable; any number of threads
 * may extract from it at once. Nothing here has global state.
 */
#ifndef KT_NET_NET_H
#define KT_NET_NET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "te/workload.h"

#define KT_NET_MAX_DIMS 8         /* rank of any tensor in a network */
#define KT_NET_MAX_LAYERS 100000  /* layers per network */

typedef struct kt_net kt_net_t;

/* Layout of the te operators tasks are extracted with. */
typedef enum { KT_NET_NHWC = 0, KT_NET_NCHW } kt_net_layout_t;

/* One graph input's shape, for ONNX models with symbolic or wrong shapes. */
typedef struct {
    char name[256];
    int ndim;
    int64_t dims[KT_NET_MAX_DIMS];
} kt_net_input_t;

/* ---- building networks ------------------------------------------------- */

/* Names of the built-in networks, NULL-terminated: "resnet-18", "resnet-34",
 * "resnet-50", "mobilenet-v2", "bert-base", "vgg-16". */
const char *const *kt_net_builtin_names(void);

/* A built-in network for `batch` images (or sequences); seq_len applies to
 * bert-base only (0: 128). NULL + kt_err for an unknown name or bad size. */
kt_net_t *kt_net_builtin(const char *name, int batch, int seq_len);

/* A network from JSON network-file text (NETWORKS.md) or a file path. Errors
 * name the layer (index and name) and the field. */
kt_net_t *kt_net_parse_json(const char *text);
kt_net_t *kt_net_load_file(const char *path);

/* An ONNX model from its serialized bytes or a file path. `inputs` override
 * graph input shapes by name (needed for symbolic dimensions); when batch > 0
 * it replaces a symbolic first dimension of every input. Operators ktune
 * cannot model are kept as unsupported layers (reported by extraction, with
 * the layers that depend on their unknown shapes); malformed files are
 * rejected with a message. */
kt_net_t *kt_net_onnx_parse(const void *data, size_t len, const kt_net_input_t *inputs,
                            int ninputs, int batch);
kt_net_t *kt_net_onnx_load(const char *path, const kt_net_input_t *inputs, int ninputs,
                           int batch);

/* Parse "NAME=1x3x224x224" (the CLI's --input) into *out; 0 or KT_EINVAL. */
int kt_net_parse_input_spec(const char *spec, kt_net_input_t *out);

void kt_net_free(kt_net_t *net);

/* ---- reading a network --------------------------------------------------- */

const char *kt_net_name(const kt_net_t *net);
int kt_net_num_layers(const kt_net_t *net);
/* Name, op ("conv2d", "relu", ONNX op for unsupported layers) and output
 * shape of layer i (ndim -1 when unknown); NULL / -1 for a bad index. */
const char *kt_net_layer_name(const kt_net_t *net, int i);
const char *kt_net_layer_op(const kt_net_t *net, int i);
int kt_net_layer_shape(const kt_net_t *net, int i, int64_t *dims);

/* ---- constant parameters ----------------------------------------------------
 * Networks imported from ONNX carry the values of their layers' constant
 * parameters (float32, row-major, in the canonical layouts below, whatever
 * form the model stored them in); built-in and network-file networks carry
 * none (the caller makes its own, e.g. seeded random ones).
 *   conv2d:      "weight" [CO, CI/groups, KH, KW], "bias" [CO] if the layer has one
 *   dense:       "weight" [N, K] (units x input features), "bias" [N] if it has one
 *   batch_norm:  "gamma", "beta", "mean", "var", each [C]; epsilon: kt_net_layer_eps
 *   bias_add:    "value": [C] along the layer's axis, or [1] for a scalar
 *   scale:       "value": [C] along the layer's axis, or [1] for a scalar
 *   layer_norm:  "gamma", "beta" [D] when affine; epsilon: kt_net_layer_eps
 *   input:       "value" in the layer's shape for a constant the model uses as
 *                an activation (op "input", e.g. a [M, N] Gemm bias or a
 *                position table added to the data); graph inputs have none
 * Folding is applied: a Gemm's alpha and beta are in its weight and bias, a
 * subtracted constant is negated and a divisor inverted (bias_add / scale
 * "value"). Tensors in external data files (ONNX's data_location EXTERNAL:
 * `location` relative to the model's directory, `offset`, `length`) are read
 * by kt_net_onnx_load; a location outside that directory, or a range beyond
 * its file, is an error. An ONNX model whose values are not all at hand (an
 * external data file that is missing, kt_net_onnx_parse of bytes with
 * external data, or constants computed by nodes the importer does not fold)
 * carries none: kt_net_has_params() is 0, kt_net_params_note() says which
 * value was missing and why, and its tasks are still extracted. */
int kt_net_has_params(const kt_net_t *net);   /* 1 when values are carried */
const char *kt_net_params_note(const kt_net_t *net);   /* NULL when carried */
/* The values of parameter `role` of layer i and their count; NULL (kt_err not
 * set) when the layer has no such parameter or the network carries none. The
 * pointer lives as long as the network. */
const float *kt_net_layer_param(const kt_net_t *net, int i, const char *role, int64_t *numel);
/* Batch norm / layer norm epsilon of layer i (1e-5 unless the model says
 * otherwise; ONNX stores it as a float32 attribute, returned as stored); -1
 * for a bad index or a layer of another op. */
double kt_net_layer_eps(const kt_net_t *net, int i);

/* ---- tasks ------------------------------------------------------------- */

/* One task: a fused subgraph, deduplicated by workload key. */
typedef struct {
    json_t *workload;     /* the workload object in kt_workload_parse's canonical form */
    kt_workload_t *wl;    /* parsed workload (DAG, key, flops) */
    int weight;           /* number of appearances in the network */
    char *desc;           /* layers of its first appearance: "conv0 + bn0 + relu0" */
    int alt_of;           /* -1, or the task whose layers this one computes another way
                             (KT_NET_EXTRACT_WINOGRAD); no instance calls it */
} kt_net_task_t;

typedef enum {
    KT_NET_UNSUPPORTED = 0,  /* no task for this layer: te or ktune cannot express it */
    KT_NET_NOT_FUSED,        /* TVM would fuse it into a task; here it stays a simple op */
} kt_net_issue_kind_t;

typedef struct {
    kt_net_issue_kind_t kind;
    char *layer;   /* layer name */
    char *op;      /* its op ("clip", ONNX "NonMaxSuppression", ...) */
    char *msg;     /* why */
} kt_net_issue_t;

/* How a fused batch norm or scale layer's multiplier was folded. */
typedef enum {
    KT_NET_FOLD_NONE = 0,   /* not folded: a "multiply" epilogue (or not a scale at all) */
    KT_NET_FOLD_WEIGHTS,    /* into the anchor's weights and the biases before it */
    KT_NET_FOLD_FORWARD,    /* into the input channels of every convolution or dense layer
                               reading it (through at most one relu; TVM's FoldScaleAxis,
                               exact for positive multipliers) */
} kt_net_fold_t;

/* One appearance of a task in the network: what `ktune build` calls. */
typedef struct {
    int task;     /* index into tasks */
    int anchor;   /* the anchor operator's layer */
    int tail;     /* the last fused layer (the anchor when none): its output is the result */
    int *fused;   /* the elementwise layers fused after the anchor, in chain order */
    int nfused;
} kt_net_instance_t;

typedef struct {
    kt_net_task_t *tasks;
    int ntasks;
    kt_net_issue_t *issues;
    int nissues;
    kt_net_instance_t *instances;   /* in layer order of their anchors */
    int ninstances;
    int nlayers;
    int *layer_instance;            /* per layer: the instance it is part of, or -1 */
    unsigned char *layer_fold;      /* per layer: a kt_net_fold_t */
} kt_net_tasks_t;

/* The layers that run as plain steps, a call of their operator's reference
 * implementation each (no task, no tuning): one line per operator with its
 * count and first layers ("plain steps: slice x4: '/a', '/b'..."), "" when
 * none; malloc'd, NULL on out-of-memory. */
char *kt_net_plain_steps_text(const kt_net_t *net);

/* Extract the tasks of `net` with te operators of `layout`. NULL + kt_err only
 * on out-of-memory or an internal error; unsupported layers are issues. */
kt_net_tasks_t *kt_net_extract(const kt_net_t *net, kt_net_layout_t layout);

/* Flags of kt_net_extract_ex. WINOGRAD (NHWC only; ignored for NCHW): after
 * the tasks above, one alternative task per conv2d_nhwc task with a 3x3
 * window, stride 1 and dilation 1: the conv2d_winograd_nhwc workload of the
 * same layers (tile 4 when the input height is a multiple of 4, else 2),
 * with the same weight, alt_of naming the direct task, desc "... (Winograd)".
 * The task scheduler counts each group once, at its fastest
 * (kt_scheduler_config_t.alternative_of; a job finds the pairs from the
 * workloads), and the build uses the alternative where its record is faster
 * (kt_net_plan_use_alternatives). Tasks and their indices before the
 * alternatives are those of kt_net_extract. */
#define KT_NET_EXTRACT_WINOGRAD 1
kt_net_tasks_t *kt_net_extract_ex(const kt_net_t *net, kt_net_layout_t layout, int flags);
void kt_net_tasks_free(kt_net_tasks_t *t);

/* The task list as JSON text: [{"workload": {...}, "weight": W, "key": "...",
 * "desc": "..."}, ...] (what `ktune tasks --json` prints). Caller frees. */
char *kt_net_tasks_json(const kt_net_tasks_t *t);

/* The listing `ktune tasks` prints: per task "========== Task i  (workload key:
 * [...]) ==========", the DAG text and "weight: W  (layers)", then one line
 * per group of identical issues. Caller frees. */
char *kt_net_tasks_text(const kt_net_tasks_t *t);

/* "NHWC"/"NCHW" to the enum; 0 or KT_EINVAL. */
int kt_net_layout_parse(const char *s, kt_net_layout_t *out);

#endif
