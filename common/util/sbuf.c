#include "sbuf.h"
#include "err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kt_sbuf_init(kt_sbuf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = 0;
}

void kt_sbuf_free(kt_sbuf_t *b)
{
    if (!b)
        return;
    free(b->data);
    kt_sbuf_init(b);
}

void kt_sbuf_clear(kt_sbuf_t *b)
{
    kt_sbuf_truncate(b, 0);
}

void kt_sbuf_truncate(kt_sbuf_t *b, size_t len)
{
    if (len < b->len)
        b->len = len;
    if (b->data)
        b->data[b->len] = '\0';
}

static int reserve(kt_sbuf_t *b, size_t extra)
{
    if (b->failed)
        return -1;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *nd = realloc(b->data, cap);
    if (!nd) {
        b->failed = 1;
        return -1;
    }
    b->data = nd;
    b->cap = cap;
    return 0;
}

void kt_sbuf_putn(kt_sbuf_t *b, const char *s, size_t n)
{
    if (reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void kt_sbuf_puts(kt_sbuf_t *b, const char *s) { kt_sbuf_putn(b, s, strlen(s)); }

void kt_sbuf_vprintf(kt_sbuf_t *b, const char *fmt, va_list ap)
{
    if (b->failed)
        return;   /* nothing is appended: skip the formatting */
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || reserve(b, (size_t)n) != 0)
        return;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void kt_sbuf_printf(kt_sbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kt_sbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void kt_sbuf_indent(kt_sbuf_t *b, int level)
{
    for (int i = 0; i < level; i++)
        kt_sbuf_putn(b, "  ", 2);
}

int kt_sbuf_ok(const kt_sbuf_t *b)
{
    if (b->failed)
        return kt_err_set(KT_ENOMEM, "out of memory while building a string");
    return KT_OK;
}

char *kt_sbuf_take(kt_sbuf_t *b)
{
    if (b->failed) {
        kt_sbuf_free(b);
        kt_err_set(KT_ENOMEM, "out of memory while building a string");
        return NULL;
    }
    char *s = b->data ? b->data : strdup("");
    kt_sbuf_init(b);
    if (!s)
        kt_err_set(KT_ENOMEM, "out of memory");
    return s;
}
