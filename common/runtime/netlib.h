/*
 * A tuned network as a C library (`ktune build`), and running it in this
 * process (`ktune run`). TVM's "compile with the history best" step.
 *
 * kt_netlib_write() turns a network's plan (net/plan.h) and one schedule per
 * task into three files in a directory:
 *   <name>.c            every task's kernel (its schedule state, or ktune's
 *                       naive reference where a task has none) and a graph
 *                       runner calling them in the plan's order on one arena;
 *                       with -DKTUNE_CHECK also each task's reference kernel
 *                       and <name>_check(), which runs both and compares;
 *   <name>.h            the API (create, run, destroy, threads, per-step
 *                       timing), input and output shapes, the build line;
 *   <name>.safetensors  the plan's constants, already folded and laid out.
 * The generated files depend on the C library, libm and OpenMP only.
 *
 * kt_netlib_open() compiles <name>.c into a shared object next to it, loads
 * it and creates an instance from the weights file; the kt_netlib_* calls
 * then run and time it.
 *
 * Ownership: kt_netlib_write copies nothing it keeps; kt_netlib_open returns
 * a handle the caller closes with kt_netlib_close (accepts NULL). Threads: a
 * handle is used by one thread at a time; writing is re-entrant.
 */
#ifndef KT_RUNTIME_NETLIB_H
#define KT_RUNTIME_NETLIB_H

#include <stdint.h>

#include "net/net.h"
#include "net/plan.h"

#define KT_NETLIB_MAX_NAME 64   /* C identifier of a built network */

/* One task's kernel as chosen by the caller. */
typedef struct {
    const char *state_json;   /* the schedule state (a record's), or NULL: the reference */
    double measured_ms;       /* its record's mean cost, for the comments; 0 when none */
    const char *origin;       /* where a schedule not tuned for this task came from, for the
                                 comments ("re-fitted from ..."); NULL: its record */
} kt_netlib_kernel_t;

typedef struct {
    char name[KT_NETLIB_MAX_NAME];   /* the C prefix used */
    int ntasks, ndefault;            /* tasks, and those without a schedule */
    int nsteps;
    int64_t arena_bytes, naive_bytes, weight_bytes;
    int cubin;                       /* CUDA: NAME.cubin was compiled (NVRTC) */
} kt_netlib_info_t;

/* A C identifier made from any name ("resnet-18" -> "resnet_18"); fits cap. */
void kt_netlib_c_name(const char *name, char *out, size_t cap);

/* Write <dir>/<name>.c, .h and .safetensors (dir must exist). kernels[i] is
 * task i's; `source` says in the header where the network came from. 0, or
 * negative with a message (a state that does not parse, an unwritable dir). */
int kt_netlib_write(const kt_net_plan_t *plan, const kt_net_tasks_t *tasks,
                    const kt_netlib_kernel_t *kernels, const char *name, const char *source,
                    const char *dir, kt_netlib_info_t *info);

/* The CUDA build (--target cuda) for GPU architecture arch (a preset name,
 * sm_XY): <dir>/<name>.cu (every task's kernels: its record's GPU schedule or
 * a seeded default one, and the simple layers' kernels), <name>.cubin (by
 * NVRTC, when libktune has it), <name>_host.c (the Driver API runner behind
 * the same API as the C build, loading <name>.cubin beside the weights),
 * <name>.h and <name>.safetensors. */
int kt_netlib_write_cuda(const kt_net_plan_t *plan, const kt_net_tasks_t *tasks,
                         const kt_netlib_kernel_t *kernels, const char *name, const char *source,
                         const char *arch, const char *dir, kt_netlib_info_t *info);

/* ---- running a written library in this process ------------------------------------ */

typedef struct kt_netlib kt_netlib_t;

#define KT_NETLIB_CHECK 1   /* compile with -DKTUNE_CHECK: kt_netlib_check works */
#define KT_NETLIB_CUDA 2    /* the CUDA build: <name>_host.c, linked with the driver */

/* Compile <dir>/<name>.c (flags: KT_NETLIB_CHECK, or KT_NETLIB_CUDA for
 * <name>_host.c) into a shared object beside it, load it and create an
 * instance from <dir>/<name>.safetensors. NULL with the compiler's or
 * loader's message. */
kt_netlib_t *kt_netlib_open(const char *dir, const char *name, int flags);
void kt_netlib_close(kt_netlib_t *n);

/* Shapes of the inputs and the output (model layout); input 0's for
 * kt_netlib_input_shape. -1 for a bad k. */
int kt_netlib_num_inputs(const kt_netlib_t *n);
int kt_netlib_input_shape(const kt_netlib_t *n, int64_t *dims);
int kt_netlib_input_shape_at(const kt_netlib_t *n, int k, int64_t *dims);
int kt_netlib_output_shape(const kt_netlib_t *n, int64_t *dims);
/* 1 when the model's input is of an integer or bool type (token ids, a
 * mask): it is passed as float values all the same. */
int kt_netlib_input_is_int(const kt_netlib_t *n);
int kt_netlib_input_is_int_at(const kt_netlib_t *n, int k);
/* Input k's name in the model ("" when the build did not record it). */
const char *kt_netlib_input_name(const kt_netlib_t *n, int k);
int kt_netlib_set_threads(kt_netlib_t *n, int threads);

/* One run; step_seconds (may be NULL) receives each step's time. */
int kt_netlib_run(kt_netlib_t *n, const float *input, float *output, double *step_seconds);
/* A run that also runs every task's reference kernel on the same inputs;
 * step_err[i] gets the largest difference relative to the reference's
 * largest magnitude (-1 for steps that are no task). Needs check at open. */
int kt_netlib_check(kt_netlib_t *n, const float *input, float *output, double *step_err);
/* The same for any number of inputs: inputs[k] is input k. */
int kt_netlib_run_inputs(kt_netlib_t *n, const float *const *inputs, float *output,
                         double *step_seconds);
int kt_netlib_check_inputs(kt_netlib_t *n, const float *const *inputs, float *output,
                           double *step_err);

int kt_netlib_num_steps(const kt_netlib_t *n);
const char *kt_netlib_step_name(const kt_netlib_t *n, int i);
int kt_netlib_step_task(const kt_netlib_t *n, int i);   /* -1: no task */
/* What step i does (kt_plan_kind_name: "task", "layout", "transpose"...);
 * NULL for a bad i or a library built before it said. */
const char *kt_netlib_step_kind(const kt_netlib_t *n, int i);

#endif
