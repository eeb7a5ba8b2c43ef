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
#include <time.h>

/* Monotonic seconds (for durations) and wall-clock seconds since the epoch. */
double kt_time_mono(void);
double kt_time_wall(void);

/* The CLOCK_MONOTONIC time ms (< 0: 0) milliseconds from now, as
 * pthread_cond_timedwait takes it on a condition variable set to that clock. */
struct timespec kt_time_mono_after_ms(long ms);

/* Sleep ms milliseconds (< 0: none), whatever signals interrupt it. */
void kt_sleep_ms(long ms);

/* Read a whole file; NUL-terminates the buffer (len excludes the NUL).
 * Returns NULL and sets kt_err on failure. */
char *kt_file_read(const char *path, size_t *len);

/* Write a whole file atomically (temp file + rename). 0 or negative. */
int kt_file_write(const char *path, const void *data, size_t len);

/* Write / read exactly n bytes on fd, retrying short transfers and EINTR.
 * 0, or -1 with errno set (0 at end of file); kt_err is not touched, so
 * they are safe in a forked child. */
int kt_fd_write_all(int fd, const void *p, size_t n);
int kt_fd_read_all(int fd, void *p, size_t n);

/* Read a secret token from a file: first line, surrounding whitespace
 * stripped; an empty token is an error. A file other users may read or
 * write (mode & 077) is refused with KT_EAUTH: the token authorizes running
 * code on every runner, so a world-readable copy is a leaked one. Caller
 * frees. */
char *kt_token_read(const char *path);

/* 1 when a listen address ("host:port", "[v6]:port", "unix:path") only
 * accepts connections from this host: 127.0.0.0/8, ::1, "localhost" or a
 * Unix socket. 0 for anything else, a wildcard or empty host included. */
int kt_addr_is_loopback(const char *addr);

/* The secure-by-default rule for a daemon serving `what` ("gRPC", "HTTP")
 * on `addr`: loopback is always allowed; beyond loopback only with a token
 * or with insecure set (--insecure). 0, or KT_EAUTH with a message naming
 * --token-file, KT_TOKEN_FILE and --insecure. */
int kt_listen_check(const char *what, const char *addr, int have_token, int insecure);

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
