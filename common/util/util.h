/*
 * Small helpers every module uses: clocks, whole-file reads, string copies.
 * All functions are thread-safe. Returned buffers are malloc'd and owned by
 * the caller (free()).
 */
#ifndef KT_UTIL_UTIL_H
#define KT_UTIL_UTIL_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic seconds (for durations) and wall-clock seconds since the epoch. */
double kt_time_mono(void);
double kt_time_wall(void);

/* Read a whole file; NUL-terminates the buffer (len excludes the NUL).
 * Returns NULL and sets kt_err on failure. */
char *kt_file_read(const char *path, size_t *len);

/* Write a whole file atomically (temp file + rename). 0 or negative. */
int kt_file_write(const char *path, const void *data, size_t len);

/* Read a secret token from a file: first line, surrounding whitespace
 * stripped; an empty token is an error. Caller frees. */
char *kt_token_read(const char *path);

/* strdup that sets kt_err on failure. */
char *kt_strdup(const char *s);

/* Parse a CPU list ("0-3,6": cores and inclusive ranges, comma-separated)
 * into *set (may be NULL to only check it). Returns the number of distinct
 * cores (> 0), or KT_EINVAL naming the list when it does not parse, is empty
 * or names a core >= CPU_SETSIZE. Whether this process may use the cores is
 * the caller's check. */
int kt_cpu_list_parse(const char *list, cpu_set_t *set);

/* 64-bit xxHash of a buffer (XXH3), stable across runs and machines. */
uint64_t kt_hash64(const void *data, size_t len);

#define KT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
