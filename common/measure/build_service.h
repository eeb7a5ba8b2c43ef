/*
 * The Worker service (proto ktune.v1.Worker/Build) of a build worker: a
 * BuildRequest's candidates (C or CUDA source with an entry name) are
 * compiled as one batch, `jobs` at a time, each compile in its own process
 * with the request's timeout (builder.h). A candidate without source or with
 * a malformed entry fails alone. Builders are kept per (timeout, arch) pair
 * (a few, least recently used replaced), so identical candidates are compiled
 * once per process, or once per cache directory when one is given.
 *
 * The tracker's job manager (common/service) calls it over gRPC;
 * ktune-worker serves it through the peer daemon
 * (common/service/peer_daemon.h); a test may serve it on any kt_rpc server.
 *
 * Ownership: the service copies its options; without a cache directory it
 * makes a private one, removed by kt_build_service_free (after the server
 * serving it stopped). Threads: kt_build_service_handle runs on any gRPC
 * thread (batches are built one at a time); new and free from one thread.
 */
#ifndef KT_MEASURE_BUILD_SERVICE_H
#define KT_MEASURE_BUILD_SERVICE_H

#include "ktune.pb-c.h"
#include "rpc/rpc.h"

/* The method it serves. */
#define KT_BUILD_SERVICE_METHOD "/ktune.v1.Worker/Build"
/* Most candidates one Build request may carry. */
#define KT_BUILD_SERVICE_MAX_CANDIDATES KT_LIMIT_CANDIDATES

typedef struct kt_build_service kt_build_service_t;

typedef struct {
    int jobs;                 /* parallel compiles; <= 0 = 1 */
    const char *cache_dir;    /* keep built artifacts here; NULL = a private directory */
} kt_build_service_opts_t;

/* ---- create / free ---------------------------------------------------------------------- */

/* opts may be NULL. NULL with kt_err (KT_EIO when the private directory
 * cannot be made, KT_ENOMEM). */
kt_build_service_t *kt_build_service_new(const kt_build_service_opts_t *opts);
/* Free the builders and remove the private directory. Accepts NULL. */
void kt_build_service_free(kt_build_service_t *svc);
/* The cache directory in use. */
const char *kt_build_service_cache_dir(const kt_build_service_t *svc);

/* ---- serving -------------------------------------------------------------------------------- */

/* The kt_rpc_unary_fn of Worker/Build (BuildRequest -> BuildResponse); ud
 * is the service. */
int kt_build_service_handle(kt_rpc_call_t *call, const ProtobufCMessage *req,
                            ProtobufCMessage *resp, void *ud);
/* Candidates being built or waiting now (a kt_peer_in_flight_fn). */
int kt_build_service_in_flight(void *svc);

/* Validate a Build request as the handler does, building nothing (the fuzz
 * targets use it without sockets). KT_EINVAL with the INVALID_ARGUMENT text
 * the handler would answer, or 0 with *bad (may be NULL) the number of
 * candidates that would fail alone with INSTANTIATION_ERROR. */
int kt_build_service_check(const Ktune__V1__BuildRequest *req, int *bad);

#endif
