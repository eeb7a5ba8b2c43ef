/* Shared tensorio helpers: checked file input, atomic file output, shapes. */
#include "tensorio/tensorio_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorio/tensorio.h"
#include "util/err.h"

int kt_tio_in_open(kt_tio_in_t *in, const char *path)
{
    memset(in, 0, sizeof *in);
    in->path = path;
    in->f = fopen(path, "rb");
    if (!in->f)
        return kt_err_set(KT_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(in->f), &st) != 0) {
        int e = errno;
        kt_tio_in_close(in);
        return kt_err_set(KT_EIO, "cannot stat %s: %s", path, strerror(e));
    }
    /* A pipe or directory has no size to check the header against. */
    if (!S_ISREG(st.st_mode)) {
        kt_tio_in_close(in);
        return kt_err_set(KT_EINVAL, "%s: not a regular file", path);
    }
    in->size = (uint64_t)st.st_size;
    return KT_OK;
}

int kt_tio_in_read(kt_tio_in_t *in, void *buf, size_t n, const char *what)
{
    if (n > kt_tio_in_left(in))
        return kt_err_set(KT_EINVAL,
                          "%s: truncated %s: needs %zu bytes at offset %" PRIu64
                          ", the file has %" PRIu64 " bytes",
                          in->path, what, n, in->pos, in->size);
    if (n > 0 && fread(buf, 1, n, in->f) != n)
        return kt_err_set(KT_EIO, "%s: reading %s failed%s", in->path, what,
                          feof(in->f) ? " (file shrank while reading)" : "");
    in->pos += n;
    return KT_OK;
}

void kt_tio_in_close(kt_tio_in_t *in)
{
    if (in->f)
        fclose(in->f);
    in->f = NULL;
}

int kt_tio_out_open(kt_tio_out_t *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    size_t plen = strlen(path) + 16;
    o->tmp = malloc(plen);
    if (!o->tmp)
        return kt_err_set(KT_ENOMEM, "out of memory");
    /* A unique name, so two processes saving the same path never write into
     * one temporary file. */
    snprintf(o->tmp, plen, "%s.tmpXXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        return kt_err_set(KT_EIO, "cannot create a file beside %s: %s", path, strerror(e));
    }
    fchmod(fd, 0644);   /* mkstemp makes it 0600; a tensor file is not secret */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return kt_err_set(KT_EIO, "writing %s: %s", path, strerror(e));
    }
    return KT_OK;
}

void kt_tio_out_write(kt_tio_out_t *o, const void *p, size_t n)
{
    if (o->err || n == 0)
        return;
    if (fwrite(p, 1, n, o->f) != n)
        o->err = errno ? errno : EIO;
}

void kt_tio_out_write_f32le(kt_tio_out_t *o, const float *p, size_t n)
{
    if (kt_tio_host_le()) {
        kt_tio_out_write(o, p, n * sizeof(float));
        return;
    }
    unsigned char chunk[4096];
    while (n > 0 && !o->err) {
        size_t k = n < sizeof chunk / 4 ? n : sizeof chunk / 4;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &p[i], 4);
            for (int b = 0; b < 4; b++)
                chunk[4 * i + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        kt_tio_out_write(o, chunk, 4 * k);
        p += k;
        n -= k;
    }
}

void kt_tio_out_abort(kt_tio_out_t *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp) {
        unlink(o->tmp);
        free(o->tmp);
    }
    o->f = NULL;
    o->tmp = NULL;
}

int kt_tio_out_commit(kt_tio_out_t *o)
{
    /* fsync before rename: otherwise a crash can leave the new name on an
     * empty file, the half-written state the rename is there to avoid. */
    if (!o->err && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0))
        o->err = errno ? errno : EIO;
    int cerr = fclose(o->f);
    o->f = NULL;
    if (!o->err && cerr != 0)
        o->err = errno ? errno : EIO;
    if (!o->err && rename(o->tmp, o->path) != 0)
        o->err = errno ? errno : EIO;
    if (o->err) {
        int e = o->err;
        kt_tio_out_abort(o);
        return kt_err_set(KT_EIO, "writing %s: %s", o->path, strerror(e));
    }
    free(o->tmp);
    o->tmp = NULL;
    return KT_OK;
}

int64_t kt_tio_numel(const int64_t *dims, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (dims[i] < 0)
            return -1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == 0)
            return 0;   /* a zero anywhere wins over a huge product elsewhere */
        if (n > INT64_MAX / 8 / dims[i])
            return -1;
        n *= dims[i];
    }
    return n;
}

void kt_tio_shape_str(char *buf, size_t cap, const int64_t *dims, int ndim)
{
    if (cap == 0)
        return;
    size_t len = 0;
    buf[0] = '\0';
#define PUT(...)                                                                   \
    do {                                                                           \
        if (len < cap) {                                                           \
            int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                  \
            len = w_ < 0 ? cap : len + (size_t)w_;                                 \
        }                                                                          \
    } while (0)
    PUT("[");
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0)
            PUT("%s?", i ? ", " : "");
        else
            PUT("%s%" PRId64, i ? ", " : "", dims[i]);
    }
    PUT("]");
#undef PUT
}
