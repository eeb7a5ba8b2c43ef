#include "err.h"

#include <stdio.h>
#include <string.h>

#define KT_ERR_MAX 4096

static _Thread_local char err_buf[KT_ERR_MAX];
static _Thread_local int err_code;

int kt_err_vset(int code, const char *fmt, va_list ap)
{
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    err_code = code;
    return code;
}

int kt_err_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kt_err_vset(code, fmt, ap);
    va_end(ap);
    return code;
}

int kt_err_prefix(const char *fmt, ...)
{
    char ctx[1024];
    char old[KT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    /* Truncation is fine: a long message loses its tail, never memory. */
    size_t n = strlen(ctx);
    if (n > sizeof err_buf - 3)
        n = sizeof err_buf - 3;
    memcpy(err_buf, ctx, n);
    memcpy(err_buf + n, ": ", 2);
    size_t room = sizeof err_buf - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err_buf + n + 2, old, m);
    err_buf[n + 2 + m] = '\0';
    return err_code;
}

const char *kt_err_msg(void) { return err_buf; }

int kt_err_code(void) { return err_code; }

void kt_err_clear(void)
{
    err_buf[0] = '\0';
    err_code = KT_OK;
}

const char *kt_err_name(int code)
{
    switch (code) {
    case KT_OK: return "ok";
    case KT_EINVAL: return "invalid argument";
    case KT_ENOMEM: return "out of memory";
    case KT_EIO: return "I/O error";
    case KT_ENOTFOUND: return "not found";
    case KT_ETIMEOUT: return "timed out";
    case KT_EUNAVAIL: return "unavailable";
    case KT_EAUTH: return "unauthenticated";
    case KT_ESTATE: return "bad state";
    case KT_EINTERNAL: return "internal error";
    case KT_EUNSUP: return "not supported";
    case KT_ELIMIT: return "limit reached";
    case KT_EFULL: return "file system full";
    default: return "unknown error";
    }
}
