/*
 * Helpers shared by the measure module's sources; not installed, not API.
 */
#ifndef KT_MEASURE_MEASURE_INT_H
#define KT_MEASURE_MEASURE_INT_H

#include <stddef.h>

#include "measure/runner.h"

/* "signal 11 (SIGSEGV, Segmentation fault)" into buf. */
void kt_measure_signal_text(int sig, char *buf, size_t n);

/* Split s on blanks into a NULL-terminated, malloc'd argv whose strings are
 * malloc'd; *argc gets the count. NULL (kt_err set) when out of memory. */
char **kt_measure_split_words(const char *s, int *argc);
void kt_measure_free_words(char **words);

/* ---- runner.c <-> cuda_runner.c ---- */

/* Give a runner a CUDA device: its children open device `device` through
 * `driver_lib` (copied) for CUDA candidates. 0 or KT_ENOMEM. */
int kt_runner_set_cuda(kt_runner_t *r, int device, const char *driver_lib, int l2_flush);

/* The measuring child's side of CUDA (cuda_runner.c; defined only when
 * KT_HAVE_CUDA). Each returns 0 or a kt_measure_error_t code with a message
 * in err[0..n). */
typedef struct kt_cuda_exec kt_cuda_exec_t;
/* Load the driver and make the device's primary context current, once per
 * child (later calls return the first outcome). */
int kt_cuda_child_open(int device, const char *driver_lib, int l2_flush, char *err, size_t n);
/* 0 when the context was lost to a sticky error: the child must exit. */
int kt_cuda_child_usable(void);
/* Load in->prog's cubin, resolve its kernels, allocate device buffers and
 * upload the inputs from bufs (host buffers of in->layout). */
int kt_cuda_exec_new(const kt_run_input_t *in, float *const *bufs, kt_cuda_exec_t **out,
                     char *err, size_t n);
/* One run with NaN-filled outputs, copied back into bufs' output buffers. */
int kt_cuda_exec_checked_run(kt_cuda_exec_t *x, float **bufs, char *err, size_t n);
/* `number` runs timed with events; *seconds is their total time. */
int kt_cuda_exec_timed(kt_cuda_exec_t *x, int number, double *seconds, char *err, size_t n);
void kt_cuda_exec_free(kt_cuda_exec_t *x);

#endif
