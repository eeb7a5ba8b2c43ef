/*
 * Every bound ktune puts on what a peer may ask of it, in one place (see
 * docs/security.md, "Limits"). A request past one is refused with KT_ELIMIT
 * (gRPC RESOURCE_EXHAUSTED) and a message naming the limit, so that one
 * client cannot take a daemon's memory, disk or threads from the others.
 */
#ifndef KT_UTIL_KT_LIMITS_H
#define KT_UTIL_KT_LIMITS_H

/* Bytes of one gRPC message, received and sent, on servers and client channels:
 * bounds the memory one call can make a peer allocate. */
#define KT_LIMIT_RPC_MESSAGE ((size_t)64 << 20)
/* Candidates in one Build or Run request: a request is one batch, kept short. */
#define KT_LIMIT_CANDIDATES 4096
/* Bytes of one candidate's artifact (shared object or cubin) in a Run request
 * or out of a build: tuned kernels are tens of KiB; more is a runaway unroll. */
#define KT_LIMIT_ARTIFACT_BYTES ((size_t)16 << 20)
/* QueryBest's top_k: the best records per workload one reply may carry. */
#define KT_LIMIT_TOP_K 10000
/* Records in one QueryBest reply (top_k times the job's tasks) or one
 * ListRecords stream: a reader asking for more narrows its filter. */
#define KT_LIMIT_RECORDS 200000
/* Jobs queued or running on one tracker: each holds a thread, policies and models. */
#define KT_LIMIT_JOBS 256
/* Jobs queued or running submitted over one client connection, so that one
 * client cannot take all KT_LIMIT_JOBS. */
#define KT_LIMIT_JOBS_PER_CLIENT 32
/* Tasks in one job: each has a search policy and a cost model in memory. */
#define KT_LIMIT_TASKS 1024
/* Concurrent WatchJob streams over one client connection: a stream holds one
 * of the tracker's RPC threads while it lasts. */
#define KT_LIMIT_WATCH_PER_CLIENT 4
/* Concurrent WatchJob streams on one tracker, as a share of its RPC threads:
 * the rest stay free for unary calls (SubmitJob, heartbeats, ...). */
#define KT_LIMIT_WATCH_SHARE_NUM 1
#define KT_LIMIT_WATCH_SHARE_DEN 2
/* MeasureOptions over RPC: one candidate's timing is bounded, so a request
 * cannot keep a runner busy for hours (runs per repeat, repeats, the
 * repeat's minimum length and the run timeout in ms, the pause between
 * repeats in seconds, OpenMP threads). */
#define KT_LIMIT_MEASURE_NUMBER 1000000
#define KT_LIMIT_MEASURE_REPEAT 1000
#define KT_LIMIT_MEASURE_MIN_REPEAT_MS 60000
#define KT_LIMIT_MEASURE_TIMEOUT_MS 3600000
#define KT_LIMIT_MEASURE_COOLDOWN_S 60.0
#define KT_LIMIT_MEASURE_THREADS 4096

#endif
