/* safetensors files: a validating reader and a writer, float32 tensors only. */
#include "tensorio/tensorio.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tensorio/tensorio_internal.h"
#include "util/err.h"

/* The reference implementation refuses headers over 100 MB: a larger length
 * field means a corrupt file, not a real header. */
#define ST_MAX_HEADER 100000000u

typedef struct {
    char *name;
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int ndim;
    uint64_t begin, end;   /* within the data section */
} st_tensor_t;

struct kt_safetensors {
    st_tensor_t *t;   /* in data-offset order */
    size_t n;
    size_t *by_name;  /* indices into t sorted by name, for bsearch */
    char **meta_k, **meta_v;
    size_t nmeta;
    /* The data section in its own malloc'd block, so every tensor (at a
     * multiple of 4 from its start) is float-aligned whatever the header
     * length was. */
    unsigned char *data;
    uint64_t data_len;
};

/* ---- Reader ---------------------------------------------------------------- */

void kt_safetensors_close(kt_safetensors_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        free(st->t[i].name);
    for (size_t i = 0; i < st->nmeta; i++) {
        free(st->meta_k[i]);
        free(st->meta_v[i]);
    }
    free(st->t);
    free(st->by_name);
    free(st->meta_k);
    free(st->meta_v);
    free(st->data);
    free(st);
}

static int parse_metadata(kt_safetensors_t *st, json_t *m, const char *path)
{
    if (!json_is_object(m))
        return kt_err_set(KT_EINVAL, "%s: __metadata__ is not an object", path);
    size_t n = json_object_size(m);
    st->meta_k = calloc(n ? n : 1, sizeof *st->meta_k);
    st->meta_v = calloc(n ? n : 1, sizeof *st->meta_v);
    if (!st->meta_k || !st->meta_v)
        return kt_err_set(KT_ENOMEM, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return kt_err_set(KT_EINVAL, "%s: __metadata__ value for '%s' is not a string", path,
                              k);
        st->meta_k[st->nmeta] = strdup(k);
        st->meta_v[st->nmeta] = strdup(json_string_value(v));
        st->nmeta++;
        if (!st->meta_k[st->nmeta - 1] || !st->meta_v[st->nmeta - 1])
            return kt_err_set(KT_ENOMEM, "out of memory");
    }
    return KT_OK;
}

/* A non-negative JSON integer; jansson itself rejects ones beyond int64. */
static bool get_uint(json_t *j, uint64_t *v)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *v = (uint64_t)json_integer_value(j);
    return true;
}

static int parse_tensor(st_tensor_t *t, const char *name, json_t *e, const char *path,
                        uint64_t data_len)
{
    if (!json_is_object(e))
        return kt_err_set(KT_EINVAL, "%s: tensor '%s' is not an object", path, name);
    json_t *dtype = json_object_get(e, "dtype");
    json_t *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offs))
        return kt_err_set(KT_EINVAL,
                          "%s: tensor '%s' needs a string 'dtype', an array 'shape' and an "
                          "array 'data_offsets'",
                          path, name);
    /* Unknown fields are more likely a writer bug than an extension. */
    if (json_object_size(e) != 3)
        return kt_err_set(KT_EINVAL, "%s: tensor '%s' has fields other than dtype, shape, "
                          "data_offsets", path, name);
    if (strcmp(json_string_value(dtype), "F32") != 0)
        return kt_err_set(KT_EINVAL, "%s: tensor '%s' has dtype '%s': ktune reads F32 only", path,
                          name, json_string_value(dtype));
    size_t nd = json_array_size(shape);
    if (nd > KT_TENSORIO_MAX_RANK)
        return kt_err_set(KT_EINVAL, "%s: tensor '%s' has rank %zu (at most %d)", path, name, nd,
                          KT_TENSORIO_MAX_RANK);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!get_uint(json_array_get(shape, i), &d))
            return kt_err_set(KT_EINVAL,
                              "%s: tensor '%s': shape entry %zu is not a non-negative integer",
                              path, name, i);
        t->dims[i] = (int64_t)d;
    }
    if (json_array_size(offs) != 2 || !get_uint(json_array_get(offs, 0), &t->begin) ||
        !get_uint(json_array_get(offs, 1), &t->end) || t->begin > t->end)
        return kt_err_set(KT_EINVAL,
                          "%s: tensor '%s': data_offsets must be [begin, end] with "
                          "0 <= begin <= end",
                          path, name);
    char sh[256];
    kt_tio_shape_str(sh, sizeof sh, t->dims, t->ndim);
    int64_t numel = kt_tio_numel(t->dims, t->ndim);
    if (numel < 0)
        return kt_err_set(KT_EINVAL, "%s: tensor '%s': shape %s is too large", path, name, sh);
    if ((uint64_t)numel * 4 != t->end - t->begin)
        return kt_err_set(KT_EINVAL,
                          "%s: tensor '%s': shape %s of F32 is %" PRIu64
                          " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64,
                          path, name, sh, (uint64_t)numel * 4, t->begin, t->end,
                          t->end - t->begin);
    if (t->end > data_len)
        return kt_err_set(KT_EINVAL,
                          "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] run past the data section (%" PRIu64 " bytes): truncated file?",
                          path, name, t->begin, t->end, data_len);
    t->name = strdup(name);
    if (!t->name)
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const st_tensor_t *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort has no context argument in C17, so the index sort compares names
 * through a pointer the index carries: sort pairs, then keep the indices. */
typedef struct {
    const char *name;
    size_t idx;
} name_idx_t;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const name_idx_t *)a)->name, ((const name_idx_t *)b)->name);
}

static int parse_header(kt_safetensors_t *st, json_t *root, const char *path)
{
    size_t cap = json_object_size(root);
    st->t = calloc(cap ? cap : 1, sizeof *st->t);
    if (!st->t)
        return kt_err_set(KT_ENOMEM, "out of memory");
    const char *k;
    json_t *v;
    int rc;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if ((rc = parse_metadata(st, v, path)) != 0)
                return rc;
            continue;
        }
        if ((rc = parse_tensor(&st->t[st->n], k, v, path, st->data_len)) != 0)
            return rc;
        st->n++;
    }
    qsort(st->t, st->n, sizeof *st->t, cmp_offset);
    /* The tensors must tile the data section exactly: each begins where the
     * previous one ended (zero-size ones may sit anywhere on that chain),
     * the first at 0, the last ending at the section's end. */
    uint64_t at = 0;
    for (size_t i = 0; i < st->n; i++) {
        const st_tensor_t *t = &st->t[i];
        if (t->begin < at)
            return kt_err_set(KT_EINVAL,
                              "%s: tensor '%s' at [%" PRIu64 ", %" PRIu64
                              "] overlaps '%s' which ends at %" PRIu64,
                              path, t->name, t->begin, t->end, st->t[i - 1].name, at);
        if (t->begin > at)
            return kt_err_set(KT_EINVAL,
                              "%s: hole in the data section: no tensor covers bytes [%" PRIu64
                              ", %" PRIu64 ")",
                              path, at, t->begin);
        at = t->end;
    }
    if (at != st->data_len)
        return kt_err_set(KT_EINVAL,
                          "%s: %" PRIu64 " bytes after the last tensor in the data section", path,
                          st->data_len - at);

    name_idx_t *ni = malloc((st->n ? st->n : 1) * sizeof *ni);
    st->by_name = malloc((st->n ? st->n : 1) * sizeof *st->by_name);
    if (!ni || !st->by_name) {
        free(ni);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < st->n; i++)
        ni[i] = (name_idx_t){st->t[i].name, i};
    qsort(ni, st->n, sizeof *ni, cmp_name);
    for (size_t i = 0; i < st->n; i++)
        st->by_name[i] = ni[i].idx;
    free(ni);
    return KT_OK;
}

static int st_read(kt_safetensors_t *st, kt_tio_in_t *in)
{
    const char *path = in->path;
    unsigned char lb[8];
    if (in->size < 8)
        return kt_err_set(KT_EINVAL, "%s: not a safetensors file (%" PRIu64 " bytes, less than "
                          "the 8-byte header length)", path, in->size);
    int rc = kt_tio_in_read(in, lb, 8, "header length");
    if (rc != 0)
        return rc;
    uint64_t n = kt_tio_le64(lb);
    if (n > kt_tio_in_left(in))
        return kt_err_set(KT_EINVAL,
                          "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                          " bytes): not a safetensors file or truncated",
                          path, n, in->size);
    if (n > ST_MAX_HEADER)
        return kt_err_set(KT_EINVAL, "%s: header length %" PRIu64 " is too large", path, n);
    if (n < 2)
        return kt_err_set(KT_EINVAL, "%s: header length %" PRIu64 " is too small", path, n);
    char *text = malloc((size_t)n);
    if (!text)
        return kt_err_set(KT_ENOMEM, "out of memory");
    if ((rc = kt_tio_in_read(in, text, (size_t)n, "header")) != 0) {
        free(text);
        return rc;
    }
    /* Duplicate keys would make a name ambiguous: jansson rejects them. */
    json_error_t jerr;
    json_t *root = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return kt_err_set(KT_EINVAL, "%s: header is not valid JSON: %s (byte %d)", path,
                          jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return kt_err_set(KT_EINVAL, "%s: header is not a JSON object", path);
    }
    st->data_len = kt_tio_in_left(in);
    rc = parse_header(st, root, path);
    json_decref(root);
    if (rc != 0)
        return rc;
    if (st->data_len > SIZE_MAX)
        return kt_err_set(KT_ENOMEM, "%s: data section does not fit in memory", path);
    st->data = malloc(st->data_len ? (size_t)st->data_len : 1);
    if (!st->data)
        return kt_err_set(KT_ENOMEM, "%s: out of memory for %" PRIu64 " bytes of data", path,
                          st->data_len);
    if ((rc = kt_tio_in_read(in, st->data, (size_t)st->data_len, "data")) != 0)
        return rc;
    if (!kt_tio_host_le()) {
        for (uint64_t i = 0; i + 4 <= st->data_len; i += 4) {
            unsigned char *p = st->data + i, a = p[0], b = p[1];
            p[0] = p[3];
            p[1] = p[2];
            p[2] = b;
            p[3] = a;
        }
    }
    return KT_OK;
}

kt_safetensors_t *kt_safetensors_open(const char *path)
{
    if (!path) {
        kt_err_set(KT_EINVAL, "kt_safetensors_open: NULL path");
        return NULL;
    }
    kt_safetensors_t *st = calloc(1, sizeof *st);
    if (!st) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    kt_tio_in_t in;
    int rc = kt_tio_in_open(&in, path);
    if (rc == 0) {
        rc = st_read(st, &in);
        kt_tio_in_close(&in);
    }
    if (rc != 0) {
        kt_safetensors_close(st);
        return NULL;
    }
    return st;
}

int kt_safetensors_count(const kt_safetensors_t *st)
{
    return st ? (int)st->n : 0;
}

const char *kt_safetensors_name(const kt_safetensors_t *st, int i)
{
    if (!st || i < 0 || (size_t)i >= st->n) {
        kt_err_set(KT_EINVAL, "safetensors: tensor index %d out of range (%zu tensors)", i,
                   st ? st->n : 0);
        return NULL;
    }
    return st->t[i].name;
}

const float *kt_safetensors_get(const kt_safetensors_t *st, const char *name, int64_t *dims,
                                int *ndim)
{
    if (!st || !name) {
        kt_err_set(KT_EINVAL, "kt_safetensors_get: NULL argument");
        return NULL;
    }
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor_t *t = &st->t[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) {
            if (dims)
                memcpy(dims, t->dims, (size_t)t->ndim * sizeof *dims);
            if (ndim)
                *ndim = t->ndim;
            return (const float *)(const void *)(st->data + t->begin);
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    kt_err_set(KT_ENOTFOUND, "safetensors: no tensor named '%s'", name);
    return NULL;
}

const char *kt_safetensors_metadata(const kt_safetensors_t *st, const char *key)
{
    if (!st || !key)
        return NULL;
    for (size_t i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta_k[i], key) == 0)
            return st->meta_v[i];
    return NULL;
}

/* ---- Writer ---------------------------------------------------------------- */

typedef struct {
    char *name;
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int ndim;
    float *data;
    size_t numel;
} wt_tensor_t;

struct kt_safetensors_writer {
    wt_tensor_t *t;
    size_t n, cap;
    json_t *meta;   /* string -> string, in insertion order */
};

kt_safetensors_writer_t *kt_safetensors_writer_new(void)
{
    kt_safetensors_writer_t *w = calloc(1, sizeof *w);
    if (w)
        w->meta = json_object();
    if (!w || !w->meta) {
        free(w);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return w;
}

void kt_safetensors_writer_free(kt_safetensors_writer_t *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    json_decref(w->meta);
    free(w);
}

int kt_safetensors_writer_add(kt_safetensors_writer_t *w, const char *name, const float *data,
                              const int64_t *dims, int ndim)
{
    if (!w || !name)
        return kt_err_set(KT_EINVAL, "kt_safetensors_writer_add: NULL argument");
    if (name[0] == '\0' || strcmp(name, "__metadata__") == 0)
        return kt_err_set(KT_EINVAL, "safetensors: invalid tensor name '%s'", name);
    if (ndim < 0 || ndim > KT_TENSORIO_MAX_RANK || (ndim > 0 && !dims))
        return kt_err_set(KT_EINVAL, "safetensors: tensor '%s': rank %d not supported (0..%d)",
                          name, ndim, KT_TENSORIO_MAX_RANK);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return kt_err_set(KT_EINVAL, "safetensors: tensor '%s' added twice", name);
    /* The name becomes a JSON key, which must be UTF-8; better refused here
     * than at save time. */
    json_t *probe = json_string(name);
    if (!probe)
        return kt_err_set(KT_EINVAL, "safetensors: tensor name '%s' is not UTF-8", name);
    json_decref(probe);
    int64_t numel = kt_tio_numel(dims, ndim);
    if (numel < 0) {
        char sh[256];
        kt_tio_shape_str(sh, sizeof sh, dims, ndim);
        return kt_err_set(KT_EINVAL, "safetensors: tensor '%s': invalid shape %s", name, sh);
    }
    if (numel > 0 && !data)
        return kt_err_set(KT_EINVAL, "safetensors: tensor '%s': NULL data", name);
    if ((uint64_t)numel > SIZE_MAX / sizeof(float))
        return kt_err_set(KT_ENOMEM, "safetensors: tensor '%s' does not fit in memory", name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 8;
        wt_tensor_t *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt)
            return kt_err_set(KT_ENOMEM, "out of memory");
        w->t = nt;
        w->cap = nc;
    }
    wt_tensor_t *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = malloc(numel ? (size_t)numel * sizeof(float) : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    if (numel)
        memcpy(t->data, data, (size_t)numel * sizeof(float));
    if (ndim)
        memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
    t->ndim = ndim;
    t->numel = (size_t)numel;
    w->n++;
    return KT_OK;
}

int kt_safetensors_writer_set_metadata(kt_safetensors_writer_t *w, const char *key,
                                       const char *value)
{
    if (!w || !key || !value)
        return kt_err_set(KT_EINVAL, "kt_safetensors_writer_set_metadata: NULL argument");
    json_t *s = json_string(value);
    if (!s)   /* also NULL for invalid UTF-8, which JSON cannot carry */
        return kt_err_set(KT_EINVAL, "safetensors: metadata value for '%s' is not UTF-8", key);
    if (json_object_set_new(w->meta, key, s) != 0)
        return kt_err_set(KT_EINVAL, "safetensors: metadata key '%s' is not UTF-8", key);
    return KT_OK;
}

static json_t *build_header(const kt_safetensors_writer_t *w)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    if (json_object_size(w->meta) > 0 && json_object_set(root, "__metadata__", w->meta) != 0)
        goto fail;
    uint64_t at = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wt_tensor_t *t = &w->t[i];
        json_t *shape = json_array();
        if (!shape)
            goto fail;
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->dims[d]));
        if (json_array_size(shape) != (size_t)t->ndim) {   /* an allocation failed */
            json_decref(shape);
            goto fail;
        }
        uint64_t bytes = (uint64_t)t->numel * 4;
        /* "o" hands shape to the new object (jansson frees it on failure too). */
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                              "data_offsets", (json_int_t)at, (json_int_t)(at + bytes));
        if (!e || json_object_set_new(root, t->name, e) != 0)
            goto fail;
        at += bytes;
    }
    return root;
fail:
    json_decref(root);
    return NULL;
}

int kt_safetensors_writer_save(const kt_safetensors_writer_t *w, const char *path)
{
    if (!w || !path)
        return kt_err_set(KT_EINVAL, "kt_safetensors_writer_save: NULL argument");
    /* The sum of tensor sizes must stay a valid JSON integer (int64). */
    uint64_t total = 0;
    for (size_t i = 0; i < w->n; i++) {
        if ((uint64_t)w->t[i].numel * 4 > (uint64_t)INT64_MAX - total)
            return kt_err_set(KT_EINVAL, "%s: tensors too large for one file", path);
        total += (uint64_t)w->t[i].numel * 4;
    }
    json_t *root = build_header(w);
    if (!root)
        return kt_err_set(KT_ENOMEM, "%s: building the header failed (out of memory?)", path);
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!hdr)
        return kt_err_set(KT_ENOMEM, "%s: out of memory for the header", path);
    size_t hlen = strlen(hdr);
    /* Spaces after the JSON (valid whitespace) bring 8 + N to a multiple of
     * 8, as the reference writer does, so the data section starts aligned. */
    size_t pad = (8 - hlen % 8) % 8;
    unsigned char lb[8];
    kt_tio_put_le64(lb, (uint64_t)(hlen + pad));

    kt_tio_out_t o;
    int rc = kt_tio_out_open(&o, path);
    if (rc != 0) {
        free(hdr);
        return rc;
    }
    kt_tio_out_write(&o, lb, 8);
    kt_tio_out_write(&o, hdr, hlen);
    kt_tio_out_write(&o, "        ", pad);
    free(hdr);
    for (size_t i = 0; i < w->n; i++)
        kt_tio_out_write_f32le(&o, w->t[i].data, w->t[i].numel);
    return kt_tio_out_commit(&o);
}
