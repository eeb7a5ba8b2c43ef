/*
 * Error reporting for libktune. A failing function returns a negative KT_E*
 * code (or NULL) and records a readable message with kt_err_set(); callers
 * may add context with kt_err_prefix(); the edge of the program prints
 * kt_err_msg(). The message is thread-local, so threads never see each
 * other's errors. Nothing here allocates memory the caller must free.
 */
#ifndef KT_UTIL_ERR_H
#define KT_UTIL_ERR_H

#include <stdarg.h>

/* Status codes. 0 is success; every error is negative. */
#define KT_OK        0
#define KT_EINVAL   -1   /* bad input from a user or peer */
#define KT_ENOMEM   -2   /* allocation failed */
#define KT_EIO      -3   /* file, socket or database I/O failed */
#define KT_ENOTFOUND -4  /* the named thing does not exist */
#define KT_ETIMEOUT -5   /* a deadline passed */
#define KT_EUNAVAIL -6   /* a peer could not be reached */
#define KT_EAUTH    -7   /* authentication failed */
#define KT_ESTATE   -8   /* call not valid in the object's current state */
#define KT_EINTERNAL -9  /* a bug in ktune or a library */
#define KT_EUNSUP   -10  /* not supported in this build or on this target */
#define KT_ELIMIT   -11  /* a limit of util/kt_limits.h was reached (RESOURCE_EXHAUSTED) */
#define KT_EFULL    -12  /* a file system is full: nothing was written (RESOURCE_EXHAUSTED) */

/* Record a message (printf-style) for the calling thread; returns `code` so
 * callers can write `return kt_err_set(KT_EINVAL, "...")`. */
int kt_err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kt_err_vset(int code, const char *fmt, va_list ap);

/* Prepend "context: " to the current message; returns the current code. */
int kt_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The calling thread's last message ("" when none); valid until the next
 * kt_err_* call on this thread. */
const char *kt_err_msg(void);

/* The calling thread's last code (KT_OK when none). */
int kt_err_code(void);

/* Forget the calling thread's error. */
void kt_err_clear(void);

/* A short name for a status code ("invalid argument"). */
const char *kt_err_name(int code);

#endif
