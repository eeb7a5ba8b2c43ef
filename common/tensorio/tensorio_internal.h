/*
 * Helpers shared by the tensorio formats (not installed): bounded file reads
 * that report truncation, atomic file output, shape arithmetic and
 * little-endian float conversion. Re-entrant; no global state.
 */
#ifndef KT_TENSORIO_INTERNAL_H
#define KT_TENSORIO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* An input file whose size is known up front, so every length field can be
 * checked against what is really there before anything is allocated. */
typedef struct {
    FILE *f;
    const char *path;
    uint64_t size;   /* bytes in the file */
    uint64_t pos;    /* bytes consumed */
} kt_tio_in_t;

/* Open a regular file for reading; KT_EIO when it cannot be opened. */
int kt_tio_in_open(kt_tio_in_t *in, const char *path);
/* Read exactly n bytes, or fail with "<path>: truncated <what>: ...". */
int kt_tio_in_read(kt_tio_in_t *in, void *buf, size_t n, const char *what);
void kt_tio_in_close(kt_tio_in_t *in);
static inline uint64_t kt_tio_in_left(const kt_tio_in_t *in) { return in->size - in->pos; }

/* Output through "<path>.tmpXXXXXX", renamed onto path by commit. Write
 * errors are sticky and reported once by commit, which removes the
 * temporary file on any failure. */
typedef struct {
    FILE *f;
    char *tmp;
    const char *path;
    int err;   /* first errno seen, 0 when none */
} kt_tio_out_t;

int kt_tio_out_open(kt_tio_out_t *o, const char *path);
void kt_tio_out_write(kt_tio_out_t *o, const void *p, size_t n);
/* Write n floats as little-endian IEEE binary32 whatever the host order. */
void kt_tio_out_write_f32le(kt_tio_out_t *o, const float *p, size_t n);
int kt_tio_out_commit(kt_tio_out_t *o);
void kt_tio_out_abort(kt_tio_out_t *o);

/* Number of elements of a shape; -1 when a dimension is negative or the
 * byte size at 8 bytes an element would overflow int64 (so callers can
 * multiply by 4 or 8 freely). */
int64_t kt_tio_numel(const int64_t *dims, int ndim);

/* "[1, 3, 224]" into buf (truncated to cap; negative dims print as '?'). */
void kt_tio_shape_str(char *buf, size_t cap, const int64_t *dims, int ndim);

/* Host byte order, asked at run time so no configure check is needed. */
static inline int kt_tio_host_le(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

static inline uint64_t kt_tio_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void kt_tio_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

#endif
