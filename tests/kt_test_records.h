/*
 * What the suites expect of stored records, shared by the suites that run
 * whole jobs. Header-only; no state, any thread.
 */
#ifndef KT_TEST_RECORDS_H
#define KT_TEST_RECORDS_H

#include <stdint.h>

#include "measure/measure.h"

/* Of `total` records counted per error code in by_error (indexed by
 * kt_measure error code), those whose candidate reached a runner: a build
 * that failed (a compile timing out on a busy machine) names no runner. */
static inline int64_t kt_test_records_timed(int64_t total, const int64_t *by_error)
{
    return total - by_error[KT_MEASURE_INSTANTIATION_ERROR] - by_error[KT_MEASURE_COMPILE_HOST] -
           by_error[KT_MEASURE_COMPILE_DEVICE] - by_error[KT_MEASURE_BUILD_TIMEOUT];
}

#endif
