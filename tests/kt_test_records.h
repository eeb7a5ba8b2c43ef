/*
 * What the suites expect of stored records, shared by the suites that run
 * whole jobs. Header-only; no state, any thread.
 */
#ifndef KT_TEST_RECORDS_H
#define KT_TEST_RECORDS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "measure/measure.h"
#include "store/store.h"

/* Of `total` records counted per error code in by_error (indexed by
 * kt_measure error code), those whose candidate reached a runner: a build
 * that failed (a compile timing out on a busy machine) names no runner. */
static inline int64_t kt_test_records_timed(int64_t total, const int64_t *by_error)
{
    return total - by_error[KT_MEASURE_INSTANTIATION_ERROR] - by_error[KT_MEASURE_COMPILE_HOST] -
           by_error[KT_MEASURE_COMPILE_DEVICE] - by_error[KT_MEASURE_BUILD_TIMEOUT];
}

/* Job `id`'s stored options (JSON text, malloc'd), NULL when the store or
 * the job cannot be read. */
static inline char *kt_test_job_options(const char *db, int64_t id)
{
    kt_store_t *s = kt_store_open(db, 0);
    kt_store_job_info_t *j = NULL;
    char *text = NULL;
    if (s && kt_store_get_job(s, id, &j) == 0 && j->job.options_json)
        text = strdup(j->job.options_json);
    kt_store_job_info_free(j);
    kt_store_close(s);
    return text;
}

/* 1 when the store at db passes PRAGMA integrity_check and holds job `id`
 * in `state`, else 0 (a store that did not open or check leaves kt_err). */
static inline int kt_test_job_stored_as(const char *db, int64_t id, const char *state)
{
    kt_store_t *s = kt_store_open(db, 0);
    kt_store_job_info_t *j = NULL;
    int ok = s && kt_store_integrity_check(s) == 0 && kt_store_get_job(s, id, &j) == 0 &&
             strcmp(j->job.state, state) == 0;
    kt_store_job_info_free(j);
    kt_store_close(s);
    return ok;
}

#endif
