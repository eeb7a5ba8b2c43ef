/*
 * The Runner service (proto ktune.v1.Runner/Run) of a runner process: a
 * RunRequest's candidates are checked one by one (a malformed one becomes
 * its own INSTANTIATION_ERROR, the rest still run) and timed as one batch by
 * the local runner (runner.h) or, for a GPU, the CUDA runner (cuda_runner.h),
 * each batch in a child process, so a crashing kernel never takes the runner
 * down. Batches run one at a time: concurrent timings would disturb each
 * other. A request's MeasureOptions are taken as given (zeros: the runner's
 * defaults); without them the local runner's defaults apply.
 *
 * It is the remote side of measurement, beside the local runner as in TVM:
 * the tracker's job manager (common/service) calls it over gRPC; ktune-runner
 * serves it through the peer daemon (common/service/peer_daemon.h); a test
 * may serve it on any kt_rpc server.
 *
 * Ownership: the service copies its options; free it after the server that
 * serves it stopped. Threads: kt_run_service_handle runs on any gRPC thread
 * (it serialises batches); new and free from one thread.
 */
#ifndef KT_MEASURE_RUN_SERVICE_H
#define KT_MEASURE_RUN_SERVICE_H

#include "ktune.pb-c.h"
#include "measure/hw_params.h"
#include "measure/runner.h"
#include "rpc/rpc.h"

/* The method it serves. */
#define KT_RUN_SERVICE_METHOD "/ktune.v1.Runner/Run"
/* Most candidates one Run request may carry. */
#define KT_RUN_SERVICE_MAX_CANDIDATES KT_LIMIT_CANDIDATES

/* MeasureOptions as a SubmitJob or a Run request carries them: 0 when every
 * field is within 0..its KT_LIMIT_MEASURE_* (finite), else KT_EINVAL naming
 * the field and its range. Accepts NULL (no options). Thread-safe. */
int kt_run_service_check_options(const Ktune__V1__MeasureOptions *m);

typedef struct kt_run_service kt_run_service_t;

typedef struct {
    int threads;              /* OpenMP threads when a request sets none; 0 = OpenMP's default */
    const char *cpus;         /* pin timed children to these cores ("0-3,6"), or NULL */
    int cuda_device;          /* ordinal of the GPU it times; -1 = the CPU */
    int timer;                /* KT_RUNNER_TIMER_*; CPU time only for CPU kernels on one thread */
} kt_run_service_opts_t;

/* ---- create / free ---------------------------------------------------------------------- */

/* NULL with kt_err: KT_EINVAL for a bad cpu list or a CPU-time timer with a
 * GPU or threads != 1; KT_ENOMEM. */
kt_run_service_t *kt_run_service_new(const kt_run_service_opts_t *opts);
/* Accepts NULL. */
void kt_run_service_free(kt_run_service_t *svc);

/* ---- the device ------------------------------------------------------------------------- */

/* "cpu" -> -1, "cuda:N" -> N into *ordinal. KT_EINVAL for anything else. */
int kt_run_service_parse_device(const char *device, int *ordinal);
/* The device's parameters as the search sees them: GPU `ordinal` probed (in
 * a child process, so this process never initialises CUDA), or for -1 the
 * local CPU with num_cores = cores (when cores > 0). The probe's error
 * otherwise (no driver, no such device, built without CUDA). */
int kt_run_service_device_params(int ordinal, int cores, kt_hw_params_t *hw);

/* ---- serving -------------------------------------------------------------------------------- */

/* The kt_rpc_unary_fn of Runner/Run (RunRequest -> RunResponse); ud is the
 * service. */
int kt_run_service_handle(kt_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage *resp, void *ud);
/* Batches running or waiting now (a kt_peer_in_flight_fn; svc is the service). */
int kt_run_service_in_flight(void *svc);

/* Validate a Run request as the handler does, running nothing (the fuzz
 * targets decode and validate every request this way, without sockets).
 * KT_EINVAL with the INVALID_ARGUMENT text the handler would answer, or 0
 * with *bad (may be NULL) the number of candidates that would fail alone
 * with INSTANTIATION_ERROR. */
int kt_run_service_check(const kt_run_service_t *svc, const Ktune__V1__RunRequest *req,
                         int *bad);

#endif
