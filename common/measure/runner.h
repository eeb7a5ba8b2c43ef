/*
 * The local runner (TVM's LocalRunner semantics): times a batch of built CPU
 * artifacts in a child process, so no candidate can take the caller down.
 * A runner made by kt_cuda_runner_new() (cuda_runner.h) also times CUDA
 * cubins on its GPU, the same way; see there for what differs.
 *
 * For each batch the runner forks a child that owns the batch and measures
 * the candidates in order. Per candidate the child loads the shared object
 * from a memfd (dlopen of /proc/self/fd/N; a private temp file when memfd is
 * unavailable), fills the input buffers with seeded random values, optionally
 * runs the reference kernel, then does one warm-up run (its timing discarded,
 * its outputs compared with the reference's), then `repeat` repeats of
 * `number` runs each, timed with CLOCK_MONOTONIC; the reported cost of a
 * repeat is its duration divided by `number`.
 *   - min_repeat_ms: while a repeat lasts less than this, `number` grows
 *     (to max(min_repeat_ms / per-run time + 1, number * 1.618), as TVM) and
 *     the repeat is redone; the grown number carries to later repeats, and
 *     the final one is reported in kt_measure_result_t.number. Hence for every
 *     cost c: c * number >= min_repeat_ms / 1000 (up to rounding).
 *   - cooldown_interval: seconds slept between repeats.
 *   - enable_cpu_cache_flush: before every timed run, write a buffer larger
 *     than the last-level cache (untimed); forces number = 1 and
 *     min_repeat_ms = 0, as TVM does.
 *   - flush_weights: before every timed run, evict from every cache level
 *     only the buffers the layout marks as weights (their packed copies when
 *     the candidate packs them), so each run reads its weights from memory
 *     and its other inputs warm, as a layer of a built network does when the
 *     layer before it has just written its input; for such a candidate
 *     number = 1 and min_repeat_ms = 0 as above. A candidate whose layout
 *     marks no weights (pooling, softmax), or a CUDA one, is timed warm with
 *     the options as given. Combined with enable_cpu_cache_flush, the full
 *     flush wins. x86 evicts with clflush; elsewhere it flushes as
 *     enable_cpu_cache_flush.
 *   - num_threads / cpu_list: the child sets OMP_NUM_THREADS and calls the
 *     kernel's omp_set_num_threads, and pins itself with sched_setaffinity.
 *
 * Weights laid out ahead of time (TVM's measurement with layout rewrite):
 * when the artifact also exports <entry>_packed and <entry>_pack (every
 * generated kernel does, codegen.h), the child asks _pack which input
 * buffers the packed variant takes re-laid out and packs them once, after
 * filling the inputs and before any run; the warm-up and the timed runs
 * then call <entry>_packed on them, as a network built by `ktune build`
 * does, so the copy is not timed. With a reference and at least one packed
 * weight, <entry> itself (weights in their original layout) runs once
 * before the warm-up and its outputs are checked too; either variant
 * failing the check is WRONG_ANSWER (the message says which), and
 * max_error is the larger of the two. An artifact without the pair is timed
 * through <entry> as before.
 *
 * Isolation: the child sends a message as it starts each phase of each
 * candidate and one with each result over a socketpair. When the child dies
 * (crash, abort, exit) the current candidate gets RUNTIME_DEVICE naming the
 * signal or exit status; when a candidate passes `timeout` seconds (from the
 * start of its loading to its result) its child's process group is killed
 * and it gets RUN_TIMEOUT. Either way a fresh child continues with the next
 * candidate. A kernel returning non-zero gets RUNTIME_DEVICE.
 *
 * Correctness: when check_correctness is set and a candidate names a
 * reference artifact, the reference runs on the same inputs (once per
 * (reference hash, input seed) and child, cached) and the candidate's outputs
 * of its warm-up run are compared with it:
 *
 *     scale_o   = max(rms_k(ref_o[k]), FLT_MIN)          per output buffer o
 *     max_error = max over outputs o, elements k of
 *                 |cand_o[k] - ref_o[k]| / max(|ref_o[k]|, scale_o)
 *
 * (the metric of codegen/verify.h: elements much smaller than their
 * tensor's typical magnitude, where reduction reordering cancels, are judged
 * against that magnitude); a NaN or
 * infinity where the reference has a different value counts as infinite
 * error. max_error > tolerance is WRONG_ANSWER with the error in the message.
 * Outputs are filled with NaN before each checked run, so an element a
 * kernel never writes is caught. A reference that fails (crashes, hangs,
 * returns non-zero) gives UNKNOWN_ERROR for the candidates that use it.
 *
 * Inputs: element values are uniform in [-1, -0.25] U [0.25, 1] (never
 * zero), from a generator seeded by opts.seed and the buffer layout, so all
 * candidates of one workload see the same inputs.
 *
 * Process notes: the runner forks without exec, so the child inherits the
 * caller's memory; glibc makes malloc and dlopen usable after fork even in a
 * threaded caller. The child is killed when the forking thread ends
 * (PR_SET_PDEATHSIG); the runner waits only for its own children by pid and
 * installs no signal handlers (if the caller ignores SIGCHLD, exit statuses
 * are lost and a crash is reported without its signal).
 *
 * Ownership: inputs are borrowed for the call; results own their arrays
 * (kt_measure_result_clear()). Thread-safety: a runner is used from one
 * thread at a time; separate runners may run in separate threads.
 */
#ifndef KT_MEASURE_RUNNER_H
#define KT_MEASURE_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "measure/measure.h"

typedef struct kt_runner kt_runner_t;

/* Default correctness tolerance of max_error. */
#define KT_RUNNER_DEFAULT_TOLERANCE 1e-4

typedef struct {
    int number;                 /* runs per repeat; 0 = 3 */
    int repeat;                 /* repeats reported; 0 = 1 */
    int min_repeat_ms;          /* see above; 0 = off (kt_runner_opts_default sets 100) */
    double cooldown_interval;   /* seconds between repeats */
    int enable_cpu_cache_flush; /* flush the LLC before each timed run */
    int flush_weights;          /* evict the layout's weights before each timed run */
    double timeout;             /* seconds per candidate; 0 = 10 */
    int num_threads;            /* OpenMP threads; 0 = leave the default */
    const char *cpu_list;       /* cores to pin the child to ("0-3,6"); NULL = no pinning */
    int check_correctness;      /* compare with the reference when one is given (default 1) */
    double tolerance;           /* max_error allowed; 0 = KT_RUNNER_DEFAULT_TOLERANCE */
    uint64_t seed;              /* input seed */
    int timer;                  /* KT_RUNNER_TIMER_WALL (default) or _CPU */
} kt_runner_opts_t;

/* How a run is timed. WALL (as TVM) is the elapsed monotonic time. CPU is
 * the CPU time the measuring process spent: on a machine shared with other
 * work, time the kernel was preempted is left out, so the ranking of
 * candidates stays stable under load (cache interference remains). CPU needs
 * num_threads == 1 (the time of several threads adds up) and CPU kernels
 * (a GPU kernel's time is wall time on the device). */
#define KT_RUNNER_TIMER_WALL 0
#define KT_RUNNER_TIMER_CPU 1

/* "wall" / "cpu" -> KT_RUNNER_TIMER_*; -1 for any other name (or NULL). */
int kt_runner_timer_parse(const char *name);

/* A built artifact, borrowed. */
typedef struct {
    const void *data;           /* shared-object bytes; NULL = none */
    size_t len;
    uint64_t hash;              /* content hash (kt_build_result_t.artifact_hash); 0 = compute it */
    const char *entry;          /* function to call */
} kt_artifact_t;

/* One kernel launch of a CUDA candidate. Every kernel takes the layout's
 * buffers as float pointers in order (inputs, then outputs), then, when the
 * candidate asks for a workspace, a pointer to it:
 *     extern "C" __global__ void k(float *in0, ..., float *out0 [, void *ws]);
 */
typedef struct {
    const char *name;           /* kernel in the cubin; NULL = the artifact's entry */
    unsigned grid[3];           /* blocks in x, y, z; each >= 1 */
    unsigned block[3];          /* threads per block in x, y, z; each >= 1 */
    unsigned shared_bytes;      /* dynamic shared memory per block (opted in above 48 KiB) */
} kt_cuda_launch_t;

/* Most kernels one CUDA candidate launches per run. */
#define KT_RUNNER_MAX_LAUNCHES 16

/* One candidate to time. */
typedef struct {
    kt_measure_target_t target;
    kt_artifact_t prog;         /* CPU: shared object; CUDA: cubin */
    kt_artifact_t ref;          /* a CPU artifact; ref.data NULL: outputs are not checked */
    kt_buf_layout_t layout;
    /* CUDA only. One run launches `launches[0..n_launches)` in order, or,
     * when launches is NULL, the single kernel `launch` (name NULL = prog.entry). */
    kt_cuda_launch_t launch;
    const kt_cuda_launch_t *launches;
    int n_launches;             /* 1..KT_RUNNER_MAX_LAUNCHES when launches is set */
    size_t workspace_bytes;     /* > 0: a zeroed device scratch buffer passed last to every
                                   kernel (intermediates of multi-kernel candidates) */
} kt_run_input_t;

/* ---- create / destroy ---- */

void kt_runner_opts_default(kt_runner_opts_t *o);
/* Validates and copies the options (KT_EINVAL for a bad cpu_list or negative
 * values). NULL with kt_err set on failure. */
kt_runner_t *kt_runner_new(const kt_runner_opts_t *o);
void kt_runner_free(kt_runner_t *r);

/* ---- run ---- */

/* Time n candidates; out[i] receives in[i]'s result (all_cost = seconds spent
 * on it here, timestamp = when it finished). Per-candidate failures are
 * results; the return is negative only when the call itself could not
 * proceed (bad arguments, KT_EUNSUP for a CUDA candidate on a runner without
 * a CUDA device, no memory, fork or socketpair failing), with every out[i]
 * cleared. */
int kt_runner_run(kt_runner_t *r, const kt_run_input_t *in, int n, kt_measure_result_t *out);

/* ---- query ---- */

/* Child processes started since the runner was made (1 per batch plus 1 per
 * crashed or killed candidate, or CUDA candidate whose error lost the
 * child's context, that had candidates after it). */
uint64_t kt_runner_children_started(const kt_runner_t *r);

#endif
