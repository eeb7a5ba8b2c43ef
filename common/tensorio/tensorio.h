/*
 * Tensor file formats ktune reads and writes: NumPy .npy (one array) and
 * safetensors (named arrays plus string metadata). Data is always float32 in
 * C (row-major) order, rank 0..KT_TENSORIO_MAX_RANK; callers pass `dims`
 * arrays of at least KT_TENSORIO_MAX_RANK entries to receive shapes.
 *
 * Contract: every function returns 0 (or a non-NULL pointer) on success and
 * a negative KT_E* code (or NULL) on failure, with a kt_err message naming
 * the file and what is wrong. Bad input never aborts, never reads out of
 * bounds and never leaves a half-written file: writers write to a temporary
 * file beside the target and rename it into place.
 *
 * Ownership: kt_npy_read() hands the caller a malloc'd array (free()). A
 * kt_safetensors_t owns all it returns (names, data, metadata), valid until
 * kt_safetensors_close(). A writer copies each tensor's data when it is
 * added, so the caller may free or reuse its buffer straight away.
 *
 * Thread-safety: all functions are re-entrant and there is no global state.
 * An opened kt_safetensors_t is read-only and may be shared between threads;
 * a writer must be used by one thread at a time.
 */
#ifndef KT_TENSORIO_TENSORIO_H
#define KT_TENSORIO_TENSORIO_H

#include <stddef.h>
#include <stdint.h>

#define KT_TENSORIO_MAX_RANK 8

/* ---- NumPy .npy ----------------------------------------------------------
 * Reads format versions 1.0, 2.0 and 3.0 with dtype '<f4', plus '>f4'
 * (byte-swapped) and '<f8'/'>f8' (converted to float32, rounding to
 * nearest; values beyond float range become +-inf). fortran_order True,
 * other dtypes, rank > 8, and bytes after the data are errors: a file whose
 * size does not match its header is more likely wrong than padded. */

/* Read `path`. On success *data is malloc'd (caller frees; non-NULL even for
 * zero elements), dims[0..*ndim) holds the shape. On failure *data is NULL. */
int kt_npy_read(const char *path, float **data, int64_t *dims, int *ndim);

/* kt_npy_read that also takes integer and boolean dtypes ('<i8', '<i4',
 * '|u1', '|b1'...: token ids, masks), each value converted to float32 and
 * required to be exact (within +-2^24); *was_int (may be NULL) says which
 * it read. */
int kt_npy_read_ints(const char *path, float **data, int64_t *dims, int *ndim, int *was_int);

/* Write `data` (product of dims floats) as version 1.0 '<f4' C-order with
 * the header bytes numpy itself writes (2.0 only if the header outgrows 1.0's
 * 64 KiB, which rank <= 8 never does). `data` may be NULL for zero elements. */
int kt_npy_write(const char *path, const float *data, const int64_t *dims, int ndim);

/* 0 when dims[0..ndim) equals want[0..wndim); a negative want[i] matches any
 * size. Otherwise KT_EINVAL with the message
 * "expected shape [1, 3, 224, 224], got [1, 3, 224]" (a wildcard prints as
 * '?'); callers add the file name with kt_err_prefix(). Works for any
 * tensor's shape, not only .npy ones. */
int kt_npy_check_shape(const int64_t *dims, int ndim, const int64_t *want, int wndim);

/* ---- safetensors ---------------------------------------------------------
 * Layout: u64 little-endian header length N, N bytes of JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *  "__metadata__": {"key": "value"}}, then the data section; offsets are
 * relative to its start. Only dtype F32 is supported. */

typedef struct kt_safetensors kt_safetensors_t;
typedef struct kt_safetensors_writer kt_safetensors_writer_t;

/* Read and validate the whole file into memory: header length within the
 * file, a JSON object whose entries have exactly dtype/shape/data_offsets,
 * dtype F32 (anything else is an error naming the tensor and dtype), rank
 * <= 8, shape product * 4 == end - begin, tensors that tile the data
 * section exactly (no overlap, no hole, nothing after the last), unique
 * names, and __metadata__ a string-to-string object. Tensor data is 4-byte
 * aligned whatever the header length. NULL + kt_err on failure. */
kt_safetensors_t *kt_safetensors_open(const char *path);
void kt_safetensors_close(kt_safetensors_t *st);

/* Number of tensors, and the i-th name in data-offset order (the order a
 * kt_safetensors_writer added them). NULL + kt_err when i is out of range. */
int kt_safetensors_count(const kt_safetensors_t *st);
const char *kt_safetensors_name(const kt_safetensors_t *st, int i);

/* The tensor called `name`: its data and shape (dims may be NULL to skip).
 * NULL + KT_ENOTFOUND when there is no such tensor. */
const float *kt_safetensors_get(const kt_safetensors_t *st, const char *name, int64_t *dims,
                                int *ndim);

/* The __metadata__ value for `key`, or NULL (no kt_err: absence is normal). */
const char *kt_safetensors_metadata(const kt_safetensors_t *st, const char *key);

/* A writer collects tensors (copied) and metadata, then saves them in one
 * go. Tensors are laid out contiguously in the order added; the header is
 * padded with spaces so the data section starts 8-byte aligned, as the
 * reference writer does. */
kt_safetensors_writer_t *kt_safetensors_writer_new(void);
void kt_safetensors_writer_free(kt_safetensors_writer_t *w);

/* Add a tensor. Errors: empty name or "__metadata__", a name already added,
 * rank outside 0..8, a negative dimension, NULL data with elements. */
int kt_safetensors_writer_add(kt_safetensors_writer_t *w, const char *name, const float *data,
                              const int64_t *dims, int ndim);

/* Set a metadata entry; setting a key again replaces its value. */
int kt_safetensors_writer_set_metadata(kt_safetensors_writer_t *w, const char *key,
                                       const char *value);

/* Write everything to `path` through a temporary file and rename; on
 * failure the target is untouched and no temporary file remains. The writer
 * stays usable (save again, or free). */
int kt_safetensors_writer_save(const kt_safetensors_writer_t *w, const char *path);

#endif
