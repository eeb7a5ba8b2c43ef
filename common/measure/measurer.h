/*
 * The program measurer (TVM's ProgramMeasurer): builds a batch of candidates
 * with a builder, times the ones that built with a runner, checks each
 * against its reference kernel, hands every batch to the registered
 * callbacks (where records get written, as TVM's RecordToFile), and counts
 * errors in a row so a task whose candidates keep failing can be stopped.
 *
 * Continuous errors: every candidate, in batch order, either resets the
 * count (NO_ERROR) or increments it. When after a batch the count exceeds
 * max_continuous_error (TVM's default 150), kt_measurer_measure() returns
 * KT_MEASURER_TOO_MANY_ERRORS and kt_measurer_stop_reason() says so; the
 * caller should stop tuning the task. The count persists across batches
 * until a success or kt_measurer_reset_errors(). Use one measurer per task
 * (it is small; the builder and runner can be shared).
 *
 * Ownership: the measurer borrows the builder and the runner (the caller
 * frees them after the measurer); inputs are borrowed for the call; results
 * are the caller's (kt_measure_result_clear()). Thread-safety: one thread at a
 * time per measurer, and its builder and runner must not be used by another
 * thread during kt_measurer_measure().
 */
#ifndef KT_MEASURE_MEASURER_H
#define KT_MEASURE_MEASURER_H

#include "measure/builder.h"
#include "measure/measure.h"
#include "measure/runner.h"

typedef struct kt_measurer kt_measurer_t;

/* TVM's DEFAULT_MAX_CONTINUOUS_ERROR. */
#define KT_MEASURER_DEFAULT_MAX_CONTINUOUS_ERROR 150
/* kt_measurer_measure()'s return when the task should stop (not an error:
 * every result is filled and every callback ran). */
#define KT_MEASURER_TOO_MANY_ERRORS 1

/* One candidate: its source, the naive reference to check it against (NULL:
 * unchecked), how its kernel is called, and an opaque pointer for the
 * callbacks (the search state, the task). */
typedef struct {
    kt_build_input_t prog;
    const kt_build_input_t *ref;
    kt_buf_layout_t layout;
    const void *user;
} kt_measure_input_t;

/* Called after each batch with all its inputs and results, in order of
 * registration. Returns 0 or a negative KT_E* code (with kt_err set). */
typedef int (*kt_measure_callback_fn)(void *arg, const kt_measure_input_t *in,
                                      const kt_measure_result_t *res, int n);

/* Counters since the measurer was made (or since kt_measurer_reset_errors()
 * for continuous_errors). */
typedef struct {
    uint64_t measured;         /* candidates measured */
    uint64_t errors;           /* of which ended with an error */
    int continuous_errors;     /* current run of errors */
    double best_cost;          /* lowest mean cost seen (seconds); 0 when none valid yet */
} kt_measurer_stats_t;

/* ---- create / destroy ---- */

/* max_continuous_error: 0 = KT_MEASURER_DEFAULT_MAX_CONTINUOUS_ERROR,
 * negative = never stop. NULL with kt_err set when b or r is NULL. */
kt_measurer_t *kt_measurer_new(kt_builder_t *b, kt_runner_t *r, int max_continuous_error);
void kt_measurer_free(kt_measurer_t *m);

/* Register a callback (arg is passed back untouched). 0 or KT_ENOMEM. */
int kt_measurer_add_callback(kt_measurer_t *m, kt_measure_callback_fn fn, void *arg);

/* ---- measure ---- */

/* Build, run and check n candidates; out[i] gets in[i]'s result, with
 * all_cost = its build time + its run time. A candidate whose reference does
 * not build gets UNKNOWN_ERROR. Returns 0; KT_MEASURER_TOO_MANY_ERRORS (see
 * above); or negative when the builder or runner could not proceed (out[]
 * cleared, no callbacks) or a callback failed (results valid; the first
 * callback error is returned, the other callbacks still ran). */
int kt_measurer_measure(kt_measurer_t *m, const kt_measure_input_t *in, int n,
                        kt_measure_result_t *out);

/* ---- state ---- */

void kt_measurer_stats(const kt_measurer_t *m, kt_measurer_stats_t *out);
/* Why the last batch asked to stop ("" when it did not); owned by the measurer. */
const char *kt_measurer_stop_reason(const kt_measurer_t *m);
void kt_measurer_reset_errors(kt_measurer_t *m);

#endif
