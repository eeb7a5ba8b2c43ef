/*
 * Measurement error codes, numbered as proto/ktune.proto's MeasureError (and
 * TVM's MeasureErrorNo). Stored records, RPC messages and the measure module
 * share these integers, so they never change meaning. The names returned by
 * kt_measure_error_name() are static strings; every function is thread-safe.
 */
#ifndef KT_STORE_MEASURE_ERROR_H
#define KT_STORE_MEASURE_ERROR_H

#define KT_MEASURE_NO_ERROR            0  /* measured successfully */
#define KT_MEASURE_INSTANTIATION_ERROR 1  /* the state could not be lowered to a program */
#define KT_MEASURE_COMPILE_HOST        2  /* the host (C) compiler failed */
#define KT_MEASURE_COMPILE_DEVICE      3  /* the device compiler (NVRTC) failed */
#define KT_MEASURE_RUNTIME_DEVICE      4  /* the program failed while running */
#define KT_MEASURE_WRONG_ANSWER        5  /* the output differs from the reference */
#define KT_MEASURE_BUILD_TIMEOUT       6  /* the build exceeded its time limit */
#define KT_MEASURE_RUN_TIMEOUT         7  /* the run exceeded its time limit */
#define KT_MEASURE_UNKNOWN_ERROR       8  /* any other failure */
#define KT_MEASURE_ERROR_COUNT         9  /* number of codes; valid codes are 0..COUNT-1 */

/* "NO_ERROR", "COMPILE_HOST", ...; NULL for a code outside 0..COUNT-1. */
const char *kt_measure_error_name(int code);

/* The code for a name as above (exact, upper case); -1 when unknown. */
int kt_measure_error_from_name(const char *name);

#endif
