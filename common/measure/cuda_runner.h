/*
 * The CUDA runner: times cubins (built by the builder's CUDA path) on one GPU
 * through the CUDA Driver API, with the local runner's semantics (runner.h):
 * a child process per batch, the same phases, timeouts, input values,
 * correctness check against a CPU reference, number/repeat/min_repeat_ms and
 * error codes. kt_cuda_runner_new() probes the device and hands out a
 * kt_runner_t that runs CUDA candidates on it (and CPU ones as usual), so the
 * measurer works unchanged.
 *
 * Per CUDA candidate the child, on first use, loads the driver and makes the
 * device's primary context current; then it loads the cubin
 * (cuModuleLoadData), finds each kernel of the candidate's launch list,
 * allocates one device buffer per layout buffer (plus the workspace),
 * uploads the seeded inputs, and:
 *   - correctness: fills the outputs with NaN (cuMemsetD32), launches every
 *     kernel once, synchronises and copies the outputs back; they are
 *     compared with the CPU reference's outputs for the same inputs exactly
 *     as on the CPU (runner.h);
 *   - timing: CUDA events around `number` runs (a run = every kernel of the
 *     candidate in order, on the default stream); the cost is the elapsed
 *     time / number. With enable_l2_flush, each run is timed by itself and
 *     preceded by an untimed cuMemsetD8 of a buffer twice the L2 size.
 * Every CUresult is checked: a failure is RUNTIME_DEVICE with the call, the
 * error's name and description ("cuLaunchKernel(k): CUDA_ERROR_INVALID_VALUE:
 * invalid argument"); bad launch dimensions are INSTANTIATION_ERROR. After
 * an error the child checks the context (cuCtxSynchronize); a sticky error
 * (illegal address, launch failure) loses the context, so the child retires
 * after reporting and a fresh child continues with the next candidate.
 *
 * The driver: libcuda.so.1 comes with the NVIDIA driver, not the toolkit, so
 * it is dlopen()ed in the processes that use it (never linked: binaries must
 * start on machines without a driver). The calling process itself never
 * initialises CUDA; the device is probed and used only in forked children
 * (CUDA cannot be used in a child forked after the parent initialised it).
 * The caller must not initialise CUDA in the process that owns the runner.
 *
 * Without a GPU, kt_cuda_runner_new() fails with KT_ENOTFOUND and a message
 * starting "no CUDA device (" with the reason (driver library not loadable,
 * cuInit failing, e.g. CUDA_ERROR_STUB_LIBRARY or CUDA_ERROR_NO_DEVICE, zero
 * devices, ordinal out of range). Built without CUDA: KT_EUNSUP.
 *
 * Ownership: the runner copies its options; kt_cuda_runner_runner() lends
 * the kt_runner_t (freed with the CUDA runner). Thread-safety: as runner.h.
 */
#ifndef KT_MEASURE_CUDA_RUNNER_H
#define KT_MEASURE_CUDA_RUNNER_H

#include "measure/hw_params.h"
#include "measure/runner.h"

typedef struct kt_cuda_runner kt_cuda_runner_t;

/* The driver library loaded when the options name none. */
#define KT_CUDA_DRIVER_LIB "libcuda.so.1"

typedef struct {
    kt_runner_opts_t run;       /* timing, timeout, correctness, seed (runner.h); leave
                                   enable_cpu_cache_flush and flush_weights 0: they flush
                                   nothing on the GPU but still force number = 1 */
    int device;                 /* CUDA device ordinal */
    int enable_l2_flush;        /* flush the GPU's L2 before each timed run */
    const char *driver_lib;     /* NULL = KT_CUDA_DRIVER_LIB (tests name the toolkit's stub) */
    double probe_timeout;       /* seconds allowed for probing the device; 0 = 60 */
} kt_cuda_runner_opts_t;

/* ---- create / destroy ---- */

void kt_cuda_runner_opts_default(kt_cuda_runner_opts_t *o);
/* Probe the device (in a child) and make the runner. NULL with kt_err set:
 * KT_ENOTFOUND "no CUDA device (...)", KT_EUNSUP without CUDA, KT_EINVAL
 * for bad options. */
kt_cuda_runner_t *kt_cuda_runner_new(const kt_cuda_runner_opts_t *o);
void kt_cuda_runner_free(kt_cuda_runner_t *c);

/* ---- use ---- */

/* The runner to pass to kt_runner_run() or kt_measurer_new(); owned by c. */
kt_runner_t *kt_cuda_runner_runner(kt_cuda_runner_t *c);
/* What the probe read from the device: SMs, compute capability (arch),
 * shared memory per block, threads per block, warp size, clock, memory,
 * name; TVM's defaults for the rest. */
const kt_hw_params_t *kt_cuda_runner_hw_params(const kt_cuda_runner_t *c);

/* ---- probe ---- */

/* Read device `device`'s parameters in a short-lived child process (so this
 * process never initialises CUDA). driver_lib NULL = KT_CUDA_DRIVER_LIB;
 * timeout 0 = 60 s. 0, or KT_ENOTFOUND "no CUDA device (...)", KT_ETIMEOUT,
 * KT_EIO (fork/pipe), KT_EUNSUP without CUDA. */
int kt_cuda_device_probe(int device, const char *driver_lib, double timeout,
                         kt_hw_params_t *out);

#endif
