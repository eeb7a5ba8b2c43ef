/*
 * Measurement vocabulary shared by the builder, the runner and the measurer:
 * TVM's MeasureErrorNo codes, the target of a candidate, the buffer layout a
 * kernel is called with, and the result of one measurement. It holds no
 * machinery; builder.h compiles candidates, runner.h times them, measurer.h
 * chains the two.
 *
 * A candidate is C source exporting `int <entry>(float **bufs);` (see
 * codegen/codegen.h): bufs[] are the DAG's input placeholders, then its
 * outputs, each dense row-major float32; it returns 0, or -1 on failure.
 * A CUDA candidate is CUDA C++ source whose extern "C" kernels take the
 * same buffers as float pointers (runner.h, kt_cuda_launch_t).
 *
 * Ownership: a kt_measure_result_t owns its costs[] and error_msg;
 * kt_measure_result_clear() frees them. Everything here is thread-safe (pure
 * functions and constant tables).
 */
#ifndef KT_MEASURE_MEASURE_H
#define KT_MEASURE_MEASURE_H

#include <stdint.h>

/* Error codes of one measurement: the numbers of TVM's MeasureErrorNo and of
 * enum MeasureError in proto/ktune.proto. */
typedef enum {
    KT_MEASURE_NO_ERROR = 0,            /* measured; costs are valid */
    KT_MEASURE_INSTANTIATION_ERROR = 1, /* the candidate could not be turned into source/a callable */
    KT_MEASURE_COMPILE_HOST = 2,        /* the host (C) compiler failed */
    KT_MEASURE_COMPILE_DEVICE = 3,      /* the device (CUDA) compiler failed */
    KT_MEASURE_RUNTIME_DEVICE = 4,      /* loading or running the kernel failed or crashed */
    KT_MEASURE_WRONG_ANSWER = 5,        /* outputs differ from the reference kernel's */
    KT_MEASURE_BUILD_TIMEOUT = 6,       /* the build ran past its timeout */
    KT_MEASURE_RUN_TIMEOUT = 7,         /* the run ran past its timeout */
    KT_MEASURE_UNKNOWN_ERROR = 8,       /* anything else (e.g. the reference kernel failed) */
} kt_measure_error_t;

#define KT_MEASURE_NUM_ERRORS 9

/* "NO_ERROR", "COMPILE_HOST", ...; "UNKNOWN_ERROR" for out-of-range codes. */
const char *kt_measure_error_name(int error_no);
/* A readable sentence ("the run exceeded its timeout"). */
const char *kt_measure_error_desc(int error_no);
/* The code for an exact upper-case name as above; -1 when unknown. */
int kt_measure_error_from_name(const char *name);

/* Which compiler and runtime a candidate is for. CUDA needs a build with the
 * toolkit (builder.h) and a runner made by kt_cuda_runner_new()
 * (cuda_runner.h); elsewhere it is refused with KT_EUNSUP. */
typedef enum {
    KT_MEASURE_TARGET_CPU = 0,   /* C source -> shared object, run in-process in a child */
    KT_MEASURE_TARGET_CUDA = 1,  /* CUDA C++ source -> cubin (NVRTC), timed on a GPU */
} kt_measure_target_t;

/* The target a name selects: "cpu" or "cuda", exactly as jobs and records
 * spell them. 0 with *out (out may be NULL to only check), or KT_EINVAL
 * naming the name and the choices; an empty name is an error too. */
int kt_measure_target_parse(const char *name, kt_measure_target_t *out);

/* The cost an erroneous measurement reports, like TVM's MAX_FLOAT, so every
 * result has at least one finite cost that sorts after every valid one. */
#define KT_MEASURE_MAX_COST 1e10

/* Most buffers one kernel takes (inputs + outputs). */
#define KT_MEASURE_MAX_BUFS 32

/* How a kernel's bufs[] look: num_bufs dense float32 buffers, buffer i holding
 * num_elems[i] elements; the last num_outputs of them are outputs (the
 * calling convention puts inputs first). A plain value: copy it freely. */
typedef struct {
    int num_bufs;                            /* 1..KT_MEASURE_MAX_BUFS */
    int num_outputs;                         /* 1..num_bufs */
    int64_t num_elems[KT_MEASURE_MAX_BUFS];  /* each > 0 */
    uint32_t weights;                        /* bit i: buffer i is a layout-free weight (an
                                                input a built network holds fixed; what
                                                kt_runner_opts_t.flush_weights evicts) */
} kt_buf_layout_t;

/* 0 when the layout is usable; KT_EINVAL with a message otherwise. */
int kt_buf_layout_check(const kt_buf_layout_t *layout);

/* The result of measuring one candidate (TVM's MeasureResult, plus what the
 * runner decided). For an error, costs = { KT_MEASURE_MAX_COST } and
 * mean = KT_MEASURE_MAX_COST, as TVM reports. */
typedef struct {
    double *costs;      /* seconds per run, one entry per repeat (malloc'd) */
    int n_costs;
    double mean;        /* mean of costs[] */
    int number;         /* runs per repeat finally used (min_repeat_ms may raise it); 0 on error */
    int error_no;       /* kt_measure_error_t */
    char *error_msg;    /* malloc'd; NULL when error_no is NO_ERROR */
    double all_cost;    /* seconds spent on this candidate: building (measurer) + running */
    double timestamp;   /* wall-clock seconds since the epoch when the result was made */
    double max_error;   /* correctness metric (runner.h); -1 when outputs were not checked */
} kt_measure_result_t;

/* Free what a result owns and zero it; NULL is accepted. */
void kt_measure_result_clear(kt_measure_result_t *r);

/* Make `r` an error result: costs = {KT_MEASURE_MAX_COST}, message formatted
 * printf-style. Frees what r held before. 0 or KT_ENOMEM. */
int kt_measure_result_set_error(kt_measure_result_t *r, int error_no, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The fastest and slowest repeat of r into *lo and *hi (either may be
 * NULL): how far its mean can be trusted on a noisy machine. Both are r->mean
 * when r has no costs. */
void kt_measure_result_range(const kt_measure_result_t *r, double *lo, double *hi);

/* Deep copy of `src` into `dst` (dst is overwritten, not freed first). 0 or KT_ENOMEM. */
int kt_measure_result_copy(kt_measure_result_t *dst, const kt_measure_result_t *src);

#endif
