/* NumPy .npy files: read versions 1.0-3.0 into float32, write version 1.0. */
#include "tensorio/tensorio.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tensorio/tensorio_internal.h"
#include "util/err.h"

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* numpy itself refuses headers over 10,000 bytes by default; a generous cap
 * still stops a corrupt length from allocating gigabytes. */
#define NPY_MAX_HEADER (1u << 20)

/* ---- Header parsing ------------------------------------------------------
 * The header is the repr() of a Python dict such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a newline. This parser accepts exactly that
 * grammar: string keys, the three known keys once each, a string descr, a
 * True/False fortran_order, a tuple of decimal ints for shape, optional
 * trailing commas, and whitespace between tokens. Everything is bounded by
 * `end`; the buffer need not be NUL-terminated. */

typedef struct {
    const char *p, *start, *end;
    const char *path;
} hdr_t;

typedef struct {
    char descr[16];
    bool have_descr, have_fortran, have_shape;
    bool fortran;
    int ndim;   /* may exceed KT_TENSORIO_MAX_RANK: only the first 8 are stored */
    int64_t dims[KT_TENSORIO_MAX_RANK];
} npy_header_t;

static int hdr_fail(const hdr_t *h, const char *what)
{
    return kt_err_set(KT_EINVAL,
                      "%s: .npy header is not a valid Python dict literal: %s at byte %td",
                      h->path, what, h->p - h->start);
}

static void hdr_ws(hdr_t *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static bool hdr_peek(hdr_t *h, char c)
{
    hdr_ws(h);
    return h->p < h->end && *h->p == c;
}

/* A quoted string without escapes (numpy never writes any). */
static int hdr_string(hdr_t *h, const char **s, size_t *n)
{
    hdr_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return hdr_fail(h, "expected a quoted string");
    char q = *h->p++;
    const char *b = h->p;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\' || *h->p == '\n')
            return hdr_fail(h, "unsupported character in string");
        h->p++;
    }
    if (h->p >= h->end)
        return hdr_fail(h, "unterminated string");
    *s = b;
    *n = (size_t)(h->p - b);
    h->p++;
    return KT_OK;
}

static bool hdr_word(hdr_t *h, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n) != 0)
        return false;
    /* "Truex" is a name, not True. */
    if ((size_t)(h->end - h->p) > n) {
        char c = h->p[n];
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return false;
    }
    h->p += n;
    return true;
}

static int hdr_shape(hdr_t *h, npy_header_t *out)
{
    if (!hdr_peek(h, '('))
        return hdr_fail(h, "'shape' is not a tuple");
    h->p++;
    int n = 0;
    bool comma = false;
    while (!hdr_peek(h, ')')) {
        if (h->p >= h->end)
            return hdr_fail(h, "unterminated shape tuple");
        bool neg = false;
        if (*h->p == '-') {
            neg = true;
            h->p++;
        }
        if (h->p >= h->end || *h->p < '0' || *h->p > '9')
            return hdr_fail(h, "expected an integer in shape");
        const char *digits = h->p;
        uint64_t v = 0;
        bool big = false;
        while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
            unsigned d = (unsigned)(*h->p - '0');
            if (v > (UINT64_MAX - d) / 10)
                big = true;
            else
                v = v * 10 + d;
            h->p++;
        }
        if (h->p - digits > 1 && digits[0] == '0')
            return hdr_fail(h, "integer with a leading zero in shape");
        if (neg && v != 0)
            return kt_err_set(KT_EINVAL, "%s: negative dimension -%.*s in shape", h->path,
                              (int)(h->p - digits), digits);
        if (big || v > (uint64_t)INT64_MAX)
            return kt_err_set(KT_EINVAL, "%s: dimension %.*s in shape is too large", h->path,
                              (int)(h->p - digits), digits);
        if (n < KT_TENSORIO_MAX_RANK)
            out->dims[n] = (int64_t)v;
        if (n == INT32_MAX / 2)
            return hdr_fail(h, "too many dimensions");
        n++;
        if (hdr_peek(h, ',')) {
            h->p++;
            comma = true;
        } else if (!hdr_peek(h, ')')) {
            return hdr_fail(h, "expected ',' or ')' in shape");
        }
    }
    h->p++;
    /* "(3)" is the int 3 in Python, not a tuple: numpy rejects it too. */
    if (n == 1 && !comma)
        return hdr_fail(h, "'shape' is not a tuple");
    out->ndim = n;
    return KT_OK;
}

static int hdr_parse(hdr_t *h, npy_header_t *out)
{
    int rc;
    memset(out, 0, sizeof *out);
    if (!hdr_peek(h, '{'))
        return hdr_fail(h, "expected '{'");
    h->p++;
    while (!hdr_peek(h, '}')) {
        const char *k;
        size_t kn;
        if ((rc = hdr_string(h, &k, &kn)) != 0)
            return rc;
        if (!hdr_peek(h, ':'))
            return hdr_fail(h, "expected ':'");
        h->p++;
        hdr_ws(h);
        if (kn == 5 && memcmp(k, "descr", 5) == 0) {
            if (out->have_descr)
                return hdr_fail(h, "duplicate key 'descr'");
            const char *s;
            size_t sn;
            if (!hdr_peek(h, '\'') && !hdr_peek(h, '"'))
                return kt_err_set(KT_EINVAL,
                                  "%s: 'descr' is not a dtype string (structured dtypes are "
                                  "not supported: ktune reads float32)",
                                  h->path);
            if ((rc = hdr_string(h, &s, &sn)) != 0)
                return rc;
            if (sn >= sizeof out->descr)
                return kt_err_set(KT_EINVAL, "%s: dtype '%.*s' not supported: ktune reads float32",
                                  h->path, (int)(sn > 64 ? 64 : sn), s);
            memcpy(out->descr, s, sn);
            out->descr[sn] = '\0';
            out->have_descr = true;
        } else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0) {
            if (out->have_fortran)
                return hdr_fail(h, "duplicate key 'fortran_order'");
            if (hdr_word(h, "True"))
                out->fortran = true;
            else if (hdr_word(h, "False"))
                out->fortran = false;
            else
                return hdr_fail(h, "'fortran_order' is not True or False");
            out->have_fortran = true;
        } else if (kn == 5 && memcmp(k, "shape", 5) == 0) {
            if (out->have_shape)
                return hdr_fail(h, "duplicate key 'shape'");
            if ((rc = hdr_shape(h, out)) != 0)
                return rc;
            out->have_shape = true;
        } else {
            return kt_err_set(KT_EINVAL, "%s: .npy header has an unexpected key '%.*s'", h->path,
                              (int)(kn > 64 ? 64 : kn), k);
        }
        if (hdr_peek(h, ','))
            h->p++;
        else if (!hdr_peek(h, '}'))
            return hdr_fail(h, "expected ',' or '}'");
    }
    h->p++;
    hdr_ws(h);
    if (h->p != h->end)
        return hdr_fail(h, "text after the closing '}'");
    const char *missing = !out->have_descr     ? "descr"
                          : !out->have_fortran ? "fortran_order"
                          : !out->have_shape   ? "shape"
                                               : NULL;
    if (missing)
        return kt_err_set(KT_EINVAL, "%s: .npy header has no '%s' key", h->path, missing);
    return KT_OK;
}

/* ---- Reading --------------------------------------------------------------- */

static uint32_t bswap32(uint32_t v)
{
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

static uint64_t bswap64(uint64_t v)
{
    return ((uint64_t)bswap32((uint32_t)v) << 32) | bswap32((uint32_t)(v >> 32));
}

/* Read n elements of esize bytes (4 or 8), `swap` when the file's byte
 * order differs from the host's, into float32 `out`. */
static int read_elems(kt_tio_in_t *in, float *out, size_t n, int esize, bool swap)
{
    if (esize == 4 && !swap)
        return kt_tio_in_read(in, out, n * 4, "data");
    unsigned char chunk[8192];
    size_t per = sizeof chunk / (size_t)esize;
    while (n > 0) {
        size_t k = n < per ? n : per;
        int rc = kt_tio_in_read(in, chunk, k * (size_t)esize, "data");
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < k; i++) {
            if (esize == 4) {
                uint32_t u;
                memcpy(&u, chunk + 4 * i, 4);
                u = bswap32(u);
                memcpy(&out[i], &u, 4);
            } else {
                uint64_t u;
                double d;
                memcpy(&u, chunk + 8 * i, 8);
                if (swap)
                    u = bswap64(u);
                memcpy(&d, &u, 8);
                out[i] = (float)d;
            }
        }
        out += k;
        n -= k;
    }
    return KT_OK;
}

/* Integer and boolean elements (kind 'i', 'u' or 'b') as float32 values,
 * each of which must be exact (|v| <= 2^24: token ids, masks, indices). */
static int read_int_elems(kt_tio_in_t *in, float *out, size_t n, int esize, char kind, bool le,
                          const char *path)
{
    unsigned char chunk[8192];
    size_t per = sizeof chunk / (size_t)esize, at = 0;
    while (n > 0) {
        size_t k = n < per ? n : per;
        int rc = kt_tio_in_read(in, chunk, k * (size_t)esize, "data");
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < k; i++, at++) {
            uint64_t u = 0;
            for (int b = 0; b < esize; b++)
                u |= (uint64_t)chunk[(size_t)esize * i + (size_t)(le ? b : esize - 1 - b)] << (8 * b);
            int64_t v;
            if (kind == 'i' && esize < 8 && (u >> (8 * esize - 1) & 1))
                v = (int64_t)(u | ~((1ULL << (8 * esize)) - 1));   /* sign-extend */
            else
                v = (int64_t)u;
            if ((kind == 'u' && esize == 8 && u > (1ULL << 24)) || v > (1LL << 24) ||
                v < -(1LL << 24))
                return kt_err_set(KT_EINVAL, "%s: element %zu (%lld) is not exactly a float32 "
                                  "(integer inputs must lie within +-2^24)", path, at,
                                  (long long)v);
            out[i] = (float)v;
        }
        out += k;
        n -= k;
    }
    return KT_OK;
}

static int npy_read_file(kt_tio_in_t *in, float **data, int64_t *dims, int *ndim,
                         int allow_int, int *was_int)
{
    const char *path = in->path;
    unsigned char pre[8];
    if (in->size < sizeof pre) {
        /* A prefix of the magic is a cut-off .npy file, anything else is not
         * one at all. */
        size_t m = in->size < sizeof npy_magic ? (size_t)in->size : sizeof npy_magic;
        if (in->size > 0 && kt_tio_in_read(in, pre, (size_t)in->size, "magic") == 0 &&
            memcmp(pre, npy_magic, m) == 0)
            return kt_err_set(KT_EINVAL, "%s: truncated .npy file (%" PRIu64 " bytes)", path,
                              in->size);
        return kt_err_set(KT_EINVAL, "%s: not a .npy file (bad magic)", path);
    }
    int rc = kt_tio_in_read(in, pre, sizeof pre, "magic");
    if (rc != 0)
        return rc;
    if (memcmp(pre, npy_magic, sizeof npy_magic) != 0)
        return kt_err_set(KT_EINVAL, "%s: not a .npy file (bad magic)", path);
    int major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return kt_err_set(KT_EINVAL,
                          "%s: unsupported .npy format version %d.%d (ktune reads 1.0, 2.0, 3.0)",
                          path, major, minor);
    /* 1.0 has a u16 header length, 2.0 and 3.0 a u32 (3.0 only changes the
     * header's encoding to UTF-8, which an ASCII-only parser need not see). */
    unsigned char lb[4] = {0};
    size_t lsize = major == 1 ? 2 : 4;
    if ((rc = kt_tio_in_read(in, lb, lsize, "header length")) != 0)
        return rc;
    uint32_t hlen = (uint32_t)lb[0] | (uint32_t)lb[1] << 8 | (uint32_t)lb[2] << 16 |
                    (uint32_t)lb[3] << 24;
    if (hlen > NPY_MAX_HEADER)
        return kt_err_set(KT_EINVAL, "%s: .npy header length %" PRIu32 " is too large", path,
                          hlen);
    if (hlen > kt_tio_in_left(in))
        return kt_err_set(KT_EINVAL,
                          "%s: truncated .npy header: %" PRIu32 " bytes promised, %" PRIu64
                          " in the file",
                          path, hlen, kt_tio_in_left(in));
    char *text = malloc(hlen ? hlen : 1);
    if (!text)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if ((rc = kt_tio_in_read(in, text, hlen, "header")) != 0) {
        free(text);
        return rc;
    }
    hdr_t h = {.p = text, .start = text, .end = text + hlen, .path = path};
    npy_header_t hd;
    rc = hdr_parse(&h, &hd);
    free(text);
    if (rc != 0)
        return rc;

    int esize;
    bool file_le;
    char kind = 'f';
    const char *ds = hd.descr;
    if (strcmp(ds, "<f4") == 0 || strcmp(ds, ">f4") == 0)
        esize = 4;
    else if (strcmp(ds, "<f8") == 0 || strcmp(ds, ">f8") == 0)
        esize = 8;
    else if (allow_int && strlen(ds) == 3 && strchr("<>|", ds[0]) && strchr("iub", ds[1]) &&
             strchr("1248", ds[2]) && (ds[0] == '|' || ds[2] != '1'))
        esize = ds[2] - '0', kind = ds[1];
    else
        return kt_err_set(KT_EINVAL, "%s: dtype '%s' not supported: ktune reads float32%s", path,
                          hd.descr, allow_int ? " and integers" : "");
    file_le = hd.descr[0] != '>';
    if (was_int)
        *was_int = kind != 'f';
    if (hd.fortran)
        return kt_err_set(KT_EINVAL,
                          "%s: fortran_order is True: ktune reads C-order arrays only "
                          "(save np.ascontiguousarray(a))",
                          path);
    if (hd.ndim > KT_TENSORIO_MAX_RANK)
        return kt_err_set(KT_EINVAL, "%s: rank %d not supported (at most %d dimensions)", path,
                          hd.ndim, KT_TENSORIO_MAX_RANK);
    char shape[256];
    kt_tio_shape_str(shape, sizeof shape, hd.dims, hd.ndim);
    int64_t numel = kt_tio_numel(hd.dims, hd.ndim);
    if (numel < 0)
        return kt_err_set(KT_EINVAL, "%s: shape %s is too large", path, shape);
    uint64_t need = (uint64_t)numel * (uint64_t)esize;
    if (need > kt_tio_in_left(in))
        return kt_err_set(KT_EINVAL,
                          "%s: truncated data: shape %s of %s needs %" PRIu64
                          " bytes, the file has %" PRIu64 " after the header",
                          path, shape, hd.descr, need, kt_tio_in_left(in));
    if (need < kt_tio_in_left(in))
        return kt_err_set(KT_EINVAL,
                          "%s: %" PRIu64 " trailing bytes after the data of shape %s", path,
                          kt_tio_in_left(in) - need, shape);
    if ((uint64_t)numel > SIZE_MAX / 8)
        return kt_err_set(KT_ENOMEM, "%s: shape %s does not fit in memory", path, shape);
    float *out = malloc(numel ? (size_t)numel * sizeof(float) : 1);
    if (!out)
        return kt_err_set(KT_ENOMEM, "%s: out of memory for shape %s", path, shape);
    rc = kind != 'f' ? read_int_elems(in, out, (size_t)numel, esize, kind, file_le, path)
                     : read_elems(in, out, (size_t)numel, esize, file_le != (bool)kt_tio_host_le());
    if (rc != 0) {
        free(out);
        return rc;
    }
    *data = out;
    memcpy(dims, hd.dims, (size_t)hd.ndim * sizeof *dims);
    *ndim = hd.ndim;
    return KT_OK;
}

static int npy_read(const char *path, float **data, int64_t *dims, int *ndim, int allow_int,
                    int *was_int)
{
    if (!data || !dims || !ndim)
        return kt_err_set(KT_EINVAL, "kt_npy_read: NULL argument");
    *data = NULL;
    *ndim = 0;
    if (!path)
        return kt_err_set(KT_EINVAL, "kt_npy_read: NULL path");
    kt_tio_in_t in;
    int rc = kt_tio_in_open(&in, path);
    if (rc != 0)
        return rc;
    rc = npy_read_file(&in, data, dims, ndim, allow_int, was_int);
    kt_tio_in_close(&in);
    return rc;
}

int kt_npy_read(const char *path, float **data, int64_t *dims, int *ndim)
{
    return npy_read(path, data, dims, ndim, 0, NULL);
}

int kt_npy_read_ints(const char *path, float **data, int64_t *dims, int *ndim, int *was_int)
{
    int w = 0, rc = npy_read(path, data, dims, ndim, 1, &w);
    if (was_int)
        *was_int = w;
    return rc;
}

/* ---- Writing --------------------------------------------------------------- */

int kt_npy_write(const char *path, const float *data, const int64_t *dims, int ndim)
{
    if (!path)
        return kt_err_set(KT_EINVAL, "kt_npy_write: NULL path");
    if (ndim < 0 || ndim > KT_TENSORIO_MAX_RANK)
        return kt_err_set(KT_EINVAL, "%s: rank %d not supported (0..%d)", path, ndim,
                          KT_TENSORIO_MAX_RANK);
    if (ndim > 0 && !dims)
        return kt_err_set(KT_EINVAL, "%s: NULL dims", path);
    int64_t numel = kt_tio_numel(dims, ndim);
    if (numel < 0) {
        char shape[256];
        kt_tio_shape_str(shape, sizeof shape, dims, ndim);
        return kt_err_set(KT_EINVAL, "%s: invalid shape %s (negative or too large)", path,
                          shape);
    }
    if (numel > 0 && !data)
        return kt_err_set(KT_EINVAL, "%s: NULL data", path);

    /* Byte for byte what numpy's _write_array_header produces: sorted keys,
     * repr() of the shape tuple, 21 - len(repr(shape[0])) spare spaces so the
     * first axis can grow in place, then spaces to a 64-byte boundary and a
     * final newline. Rank <= 8 keeps it far below 1.0's u16 limit. */
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < ndim; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%" PRId64, i ? ", " : "", dims[i]);
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    if (ndim > 0) {
        int d0 = snprintf(NULL, 0, "%" PRId64, dims[0]);
        for (int i = d0; i < 21; i++)
            hdr[n++] = ' ';
    }
    size_t hlen = (size_t)n + 1;   /* + the newline */
    int major = 1;
    size_t prefix = 6 + 2 + 2;
    size_t pad = 64 - (prefix + hlen) % 64;
    if (hlen + pad > 0xffff) {   /* unreachable at rank <= 8; kept for the format's sake */
        major = 2;
        prefix = 6 + 2 + 4;
        pad = 64 - (prefix + hlen) % 64;
    }
    uint32_t total = (uint32_t)(hlen + pad);
    unsigned char pre[12];
    memcpy(pre, npy_magic, 6);
    pre[6] = (unsigned char)major;
    pre[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++)
        pre[8 + i] = (unsigned char)(total >> (8 * i));

    kt_tio_out_t o;
    int rc = kt_tio_out_open(&o, path);
    if (rc != 0)
        return rc;
    kt_tio_out_write(&o, pre, prefix);
    kt_tio_out_write(&o, hdr, (size_t)n);
    char spaces[64];
    memset(spaces, ' ', sizeof spaces);
    kt_tio_out_write(&o, spaces, pad);
    kt_tio_out_write(&o, "\n", 1);
    kt_tio_out_write_f32le(&o, data, (size_t)numel);
    return kt_tio_out_commit(&o);
}

/* ---- Shapes ---------------------------------------------------------------- */

int kt_npy_check_shape(const int64_t *dims, int ndim, const int64_t *want, int wndim)
{
    bool same = ndim == wndim;
    for (int i = 0; same && i < ndim; i++)
        if (want[i] >= 0 && dims[i] != want[i])
            same = false;
    if (same)
        return KT_OK;
    char a[256], b[256];
    kt_tio_shape_str(a, sizeof a, want, wndim < 0 ? 0 : wndim);
    kt_tio_shape_str(b, sizeof b, dims, ndim < 0 ? 0 : ndim);
    return kt_err_set(KT_EINVAL, "expected shape %s, got %s", a, b);
}
