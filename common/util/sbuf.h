/*
 * A growable NUL-terminated string buffer for code emission and printing.
 * Not thread-safe per buffer. The buffer owns its memory: kt_sbuf_free() or
 * take it with kt_sbuf_take() (caller frees). After an allocation failure
 * the buffer is marked failed, further appends do nothing, and
 * kt_sbuf_take()/kt_sbuf_ok() report it.
 */
#ifndef KT_UTIL_SBUF_H
#define KT_UTIL_SBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
    char *data;   /* always NUL-terminated when len > 0 or after init */
    size_t len;
    size_t cap;
    int failed;
} kt_sbuf_t;

void kt_sbuf_init(kt_sbuf_t *b);
void kt_sbuf_free(kt_sbuf_t *b);
void kt_sbuf_clear(kt_sbuf_t *b);   /* len = 0, keeps memory */
void kt_sbuf_truncate(kt_sbuf_t *b, size_t len);   /* len = min(len, b->len) */
void kt_sbuf_puts(kt_sbuf_t *b, const char *s);
void kt_sbuf_putn(kt_sbuf_t *b, const char *s, size_t n);
void kt_sbuf_printf(kt_sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kt_sbuf_vprintf(kt_sbuf_t *b, const char *fmt, va_list ap);
/* Append `n` spaces of indentation times 2. */
void kt_sbuf_indent(kt_sbuf_t *b, int level);
/* 0 when every append succeeded, KT_ENOMEM (with kt_err set) otherwise. */
int kt_sbuf_ok(const kt_sbuf_t *b);
/* Hand the string to the caller (NULL after a failure); the buffer is reset. */
char *kt_sbuf_take(kt_sbuf_t *b);

#endif
