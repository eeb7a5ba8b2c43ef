/* Hardware parameters: presets, checks and overrides (hw_params.h), JSON and
 * DeviceInfo conversions (hw_params_json.h). */
#include "measure/hw_params.h"
#include "measure/hw_params_json.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

/* ---- presets ----------------------------------------------------------------- */

/* Reference parts per architecture: SM count, boost clock and memory of the
 * part as cuDeviceGetAttribute reports them; the launch limits are those of
 * every device since sm_30, and the search hints are TVM's CUDA defaults
 * (vector 16 bytes, cache line 64, max vthread = warp / 4). */
typedef struct {
    const char *arch;
    const char *name;
    int sms;
    int64_t clock_khz;
    int64_t memory_gib;
} gpu_preset_t;

static const gpu_preset_t gpu_presets[] = {
    {"sm_70", "Tesla V100-SXM2-16GB", 80, 1530000, 16},
    {"sm_80", "NVIDIA A100-SXM4-40GB", 108, 1410000, 40},
    {"sm_86", "NVIDIA GeForce RTX 3090", 82, 1695000, 24},
    {"sm_89", "NVIDIA L4", 58, 2040000, 24},
    {"sm_90", "NVIDIA H100 80GB HBM3", 132, 1980000, 80},
};

static const char *const preset_names[] = {"cpu", "sm_70", "sm_80", "sm_86", "sm_89", "sm_90",
                                           NULL};

const char *const *kt_hw_params_preset_names(void)
{
    return preset_names;
}

/* The first "model name" (x86) or "Model" (arm) line of /proc/cpuinfo. */
static void cpu_model_name(char *buf, size_t n)
{
    snprintf(buf, n, "cpu");
    size_t len = 0;
    char *text = kt_file_read("/proc/cpuinfo", &len);
    if (!text) {
        kt_err_clear();
        return;
    }
    static const char *const keys[] = {"model name", "Model"};
    for (size_t k = 0; k < KT_ARRAY_LEN(keys); k++) {
        for (char *line = text; line && *line;) {
            char *eol = strchr(line, '\n');
            if (eol)
                *eol = '\0';
            size_t kl = strlen(keys[k]);
            char *colon = strchr(line, ':');
            if (colon && strncmp(line, keys[k], kl) == 0 &&
                strspn(line + kl, " \t") == (size_t)(colon - line - (ptrdiff_t)kl)) {
                const char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                    v++;
                if (*v) {
                    snprintf(buf, n, "%s", v);
                    free(text);
                    return;
                }
            }
            if (eol)
                *eol = '\n';
            line = eol ? eol + 1 : NULL;
        }
    }
    free(text);
}

void kt_hw_params_local_cpu(kt_hw_params_t *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->target, sizeof out->target, "cpu");
    /* The cores this process may run on (a container's cpuset), which is what
     * parallel loops will get; all online cores when that is unknown. */
    cpu_set_t set;
    long cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cores = CPU_COUNT(&set);
    if (cores <= 0)
        cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->num_cores = cores > 0 ? (int)cores : 1;
    out->vector_unit_bytes = 16;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        out->vector_unit_bytes = 64;
        snprintf(out->arch, sizeof out->arch, "x86-64-v4");
    } else if (__builtin_cpu_supports("avx2")) {
        out->vector_unit_bytes = 32;
        snprintf(out->arch, sizeof out->arch, "x86-64-v3");
    } else if (__builtin_cpu_supports("sse4.2")) {
        snprintf(out->arch, sizeof out->arch, "x86-64-v2");
    } else {
        snprintf(out->arch, sizeof out->arch, "x86-64");
    }
#endif
    long line = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
    out->cache_line_bytes = line > 0 ? (int)line : 64;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        out->memory_bytes = (int64_t)pages * page;
    cpu_model_name(out->name, sizeof out->name);
}

int kt_hw_params_preset(const char *name, kt_hw_params_t *out)
{
    if (!name || !out)
        return kt_err_set(KT_EINVAL, "hw params: no preset name");
    if (strcmp(name, "cpu") == 0) {
        kt_hw_params_local_cpu(out);
        return KT_OK;
    }
    for (size_t i = 0; i < KT_ARRAY_LEN(gpu_presets); i++) {
        const gpu_preset_t *p = &gpu_presets[i];
        if (strcmp(name, p->arch) != 0)
            continue;
        memset(out, 0, sizeof *out);
        snprintf(out->target, sizeof out->target, "cuda");
        snprintf(out->arch, sizeof out->arch, "%s", p->arch);
        snprintf(out->name, sizeof out->name, "%s", p->name);
        kt_hw_params_parse_arch(p->arch, &out->cc_major, &out->cc_minor);
        out->num_cores = p->sms;
        out->vector_unit_bytes = 16;
        out->cache_line_bytes = 64;
        out->max_shared_memory_per_block = 48 * 1024;
        out->max_local_memory_per_block = KT_HW_NO_LOCAL_MEMORY_LIMIT;
        out->max_threads_per_block = 1024;
        out->warp_size = 32;
        out->max_vthread_extent = out->warp_size / 4;
        out->clock_khz = p->clock_khz;
        out->memory_bytes = p->memory_gib << 30;
        return KT_OK;
    }
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    for (const char *const *n = preset_names; *n; n++)
        kt_sbuf_printf(&s, "%s%s", n == preset_names ? "" : ", ", *n);
    kt_err_set(KT_ENOTFOUND, "hw params: no preset '%s' (known: %s)", name,
               s.data ? s.data : "");
    kt_sbuf_free(&s);
    return KT_ENOTFOUND;
}

/* ---- checks -------------------------------------------------------------------- */

int kt_hw_params_parse_arch(const char *arch, int *major, int *minor)
{
    const char *p = NULL;
    if (arch && strncmp(arch, "sm_", 3) == 0)
        p = arch + 3;
    else if (arch && strncmp(arch, "compute_", 8) == 0)
        p = arch + 8;
    size_t nd = p ? strspn(p, "0123456789") : 0;
    /* Two or three digits, then nothing or one feature-set letter (sm_90a, sm_100f). */
    if (!p || nd < 2 || nd > 3 || p[0] == '0' ||
        !(p[nd] == '\0' || ((p[nd] == 'a' || p[nd] == 'f') && p[nd + 1] == '\0')))
        return kt_err_set(KT_EINVAL, "bad CUDA architecture '%s' (expected sm_XY, e.g. sm_80)",
                          arch ? arch : "(null)");
    int v = atoi(p);
    if (major)
        *major = v / 10;
    if (minor)
        *minor = v % 10;
    return KT_OK;
}

int kt_hw_params_validate(const kt_hw_params_t *hw)
{
    if (!hw)
        return kt_err_set(KT_EINVAL, "hw params: none");
    int cuda = strcmp(hw->target, "cuda") == 0;
    if (!cuda && strcmp(hw->target, "cpu") != 0)
        return kt_err_set(KT_EINVAL, "hw params: target '%s' (expected cpu or cuda)", hw->target);
    if (hw->num_cores < 1 && !(cuda && hw->num_cores == -1))
        return kt_err_set(KT_EINVAL, "hw params: num_cores %d must be positive", hw->num_cores);
    if (hw->vector_unit_bytes < 1)
        return kt_err_set(KT_EINVAL, "hw params: vector_unit_bytes must be positive");
    if (hw->cache_line_bytes < 1)
        return kt_err_set(KT_EINVAL, "hw params: cache_line_bytes must be positive");
    if (hw->max_shared_memory_per_block < 0 || hw->max_local_memory_per_block < 0 ||
        hw->max_threads_per_block < 0 || hw->max_vthread_extent < 0 || hw->warp_size < 0 ||
        hw->clock_khz < 0 || hw->memory_bytes < 0)
        return kt_err_set(KT_EINVAL, "hw params: limits must not be negative");
    if (!cuda) {
        if (hw->cc_major || hw->cc_minor)
            return kt_err_set(KT_EINVAL, "hw params: a cpu target has no compute capability");
        return KT_OK;
    }
    int major, minor;
    if (kt_hw_params_parse_arch(hw->arch, &major, &minor) < 0)
        return kt_err_prefix("hw params: arch");
    if (major != hw->cc_major || minor != hw->cc_minor)
        return kt_err_set(KT_EINVAL, "hw params: arch %s does not match compute capability %d.%d",
                          hw->arch, hw->cc_major, hw->cc_minor);
    if (hw->max_threads_per_block < 1)
        return kt_err_set(KT_EINVAL, "hw params: max_threads_per_block must be positive on cuda");
    if (hw->warp_size < 1)
        return kt_err_set(KT_EINVAL, "hw params: warp_size must be positive on cuda");
    if (hw->max_vthread_extent < 1)
        return kt_err_set(KT_EINVAL, "hw params: max_vthread_extent must be positive on cuda");
    return KT_OK;
}

int kt_hw_params_equal(const kt_hw_params_t *a, const kt_hw_params_t *b)
{
    return strcmp(a->target, b->target) == 0 && strcmp(a->arch, b->arch) == 0 &&
           strcmp(a->name, b->name) == 0 && a->num_cores == b->num_cores &&
           a->vector_unit_bytes == b->vector_unit_bytes &&
           a->cache_line_bytes == b->cache_line_bytes &&
           a->max_shared_memory_per_block == b->max_shared_memory_per_block &&
           a->max_local_memory_per_block == b->max_local_memory_per_block &&
           a->max_threads_per_block == b->max_threads_per_block &&
           a->max_vthread_extent == b->max_vthread_extent && a->warp_size == b->warp_size &&
           a->cc_major == b->cc_major && a->cc_minor == b->cc_minor &&
           a->clock_khz == b->clock_khz && a->memory_bytes == b->memory_bytes;
}

/* ---- fields by name ---------------------------------------------------------------- */

enum { F_STR, F_INT, F_I64 };

typedef struct {
    const char *key;
    int kind;
    size_t off;
    size_t size; /* F_STR: buffer size */
} field_t;

#define FS(k) {#k, F_STR, offsetof(kt_hw_params_t, k), sizeof(((kt_hw_params_t *)0)->k)}
#define FI(k) {#k, F_INT, offsetof(kt_hw_params_t, k), 0}
#define FL(k) {#k, F_I64, offsetof(kt_hw_params_t, k), 0}

/* Every field but cc_major/cc_minor, which follow arch. */
static const field_t fields[] = {
    FS(target), FS(arch), FS(name), FI(num_cores), FI(vector_unit_bytes), FI(cache_line_bytes),
    FI(max_shared_memory_per_block), FI(max_local_memory_per_block), FI(max_threads_per_block),
    FI(max_vthread_extent), FI(warp_size), FL(clock_khz), FL(memory_bytes),
};

static const field_t *find_field(const char *key)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(fields); i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

static int unknown_key(const char *what, const char *key)
{
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    for (size_t i = 0; i < KT_ARRAY_LEN(fields); i++)
        kt_sbuf_printf(&s, "%s%s", i ? ", " : "", fields[i].key);
    kt_err_set(KT_EINVAL, "hw params: unknown %s '%s' (known: %s)", what, key,
               s.data ? s.data : "");
    kt_sbuf_free(&s);
    return KT_EINVAL;
}

/* Store a string into field f of hw; arch also sets the compute capability
 * (when it parses: a cpu arch is free text). */
static int put_str(kt_hw_params_t *hw, const field_t *f, const char *v)
{
    if (strlen(v) >= f->size)
        return kt_err_set(KT_EINVAL, "hw params: %s '%s' is longer than %zu characters", f->key,
                          v, f->size - 1);
    snprintf((char *)hw + f->off, f->size, "%s", v);
    if (f->off == offsetof(kt_hw_params_t, arch)) {
        int major = 0, minor = 0;
        if (kt_hw_params_parse_arch(v, &major, &minor) < 0)
            kt_err_clear();
        hw->cc_major = major;
        hw->cc_minor = minor;
    }
    return KT_OK;
}

static int put_int(kt_hw_params_t *hw, const field_t *f, long long v)
{
    if (f->kind == F_INT) {
        if (v < INT_MIN || v > INT_MAX)
            return kt_err_set(KT_EINVAL, "hw params: %s %lld is out of range", f->key, v);
        *(int *)((char *)hw + f->off) = (int)v;
    } else {
        *(int64_t *)((char *)hw + f->off) = (int64_t)v;
    }
    return KT_OK;
}

int kt_hw_params_set(kt_hw_params_t *hw, const char *key, const char *value)
{
    if (!hw || !key || !value)
        return kt_err_set(KT_EINVAL, "hw params: bad arguments");
    const field_t *f = find_field(key);
    if (!f)
        return unknown_key("key", key);
    kt_hw_params_t t = *hw;
    if (f->kind == F_STR) {
        if (put_str(&t, f, value) < 0)
            return KT_EINVAL;
    } else {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        while (end != value && isspace((unsigned char)*end))
            end++;
        if (end == value || *end || errno == ERANGE)
            return kt_err_set(KT_EINVAL, "hw params: %s: '%s' is not an integer", key, value);
        if (put_int(&t, f, v) < 0)
            return KT_EINVAL;
    }
    *hw = t;
    return KT_OK;
}

/* Copy [s, e) without surrounding blanks into buf. */
static void trimmed(const char *s, const char *e, char *buf, size_t n)
{
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    size_t len = (size_t)(e - s) < n - 1 ? (size_t)(e - s) : n - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
}

int kt_hw_params_override(kt_hw_params_t *hw, const char *spec)
{
    if (!hw || !spec)
        return kt_err_set(KT_EINVAL, "hw params: bad arguments");
    kt_hw_params_t t = *hw;
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        char key[64], value[256];
        if (!eq) {
            trimmed(p, end, key, sizeof key);
            if (*key || comma)
                return kt_err_set(KT_EINVAL, "hw params: '%s' is not key=value", key);
            break;
        }
        trimmed(p, eq, key, sizeof key);
        trimmed(eq + 1, end, value, sizeof value);
        if (kt_hw_params_set(&t, key, value) < 0)
            return KT_EINVAL;
        p = comma ? comma + 1 : end;
    }
    if (kt_hw_params_validate(&t) < 0)
        return kt_err_prefix("after '%s'", spec);
    *hw = t;
    return KT_OK;
}

/* ---- JSON ------------------------------------------------------------------------- */

json_t *kt_hw_params_to_json(const kt_hw_params_t *hw)
{
    json_t *o = json_object();
    if (!o)
        goto oom;
    for (size_t i = 0; i < KT_ARRAY_LEN(fields); i++) {
        const field_t *f = &fields[i];
        const char *base = (const char *)hw + f->off;
        json_t *v = f->kind == F_STR   ? json_string(base)
                    : f->kind == F_INT ? json_integer(*(const int *)base)
                                       : json_integer(*(const int64_t *)base);
        if (!v && f->kind == F_STR) {
            json_decref(o);
            kt_err_set(KT_EINVAL, "hw params: %s is not valid UTF-8", f->key);
            return NULL;
        }
        if (json_object_set_new(o, f->key, v) < 0)
            goto oom;
    }
    return o;
oom:
    json_decref(o);
    kt_err_set(KT_ENOMEM, "out of memory");
    return NULL;
}

int kt_hw_params_from_json(const json_t *obj, kt_hw_params_t *hw)
{
    if (!obj || !hw)
        return kt_err_set(KT_EINVAL, "hw params: bad arguments");
    if (!json_is_object(obj))
        return kt_err_set(KT_EINVAL, "hw params: JSON is not an object");
    kt_hw_params_t t = *hw;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const field_t *f = find_field(key);
        if (!f)
            return unknown_key("member", key);
        if (f->kind == F_STR) {
            if (!json_is_string(v))
                return kt_err_set(KT_EINVAL, "hw params: member '%s' must be a string", key);
            if (put_str(&t, f, json_string_value(v)) < 0)
                return KT_EINVAL;
        } else {
            if (!json_is_integer(v))
                return kt_err_set(KT_EINVAL, "hw params: member '%s' must be an integer", key);
            if (put_int(&t, f, json_integer_value(v)) < 0)
                return KT_EINVAL;
        }
    }
    if (kt_hw_params_validate(&t) < 0)
        return KT_EINVAL;
    *hw = t;
    return KT_OK;
}

/* ---- proto -------------------------------------------------------------------------- */

void kt_hw_params_to_proto(const kt_hw_params_t *hw, Ktune__V1__DeviceInfo *msg)
{
    ktune__v1__device_info__init(msg);
    msg->target = (char *)hw->target;
    msg->name = (char *)hw->name;
    msg->arch = (char *)hw->arch;
    msg->num_cores = hw->num_cores;
    msg->vector_unit_bytes = hw->vector_unit_bytes;
    msg->cache_line_bytes = hw->cache_line_bytes;
    msg->max_shared_memory_per_block = hw->max_shared_memory_per_block;
    msg->max_local_memory_per_block = hw->max_local_memory_per_block;
    msg->max_threads_per_block = hw->max_threads_per_block;
    msg->max_vthread_extent = hw->max_vthread_extent;
    msg->warp_size = hw->warp_size;
    msg->clock_khz = hw->clock_khz;
    msg->memory_bytes = hw->memory_bytes;
}

int kt_hw_params_from_proto(const Ktune__V1__DeviceInfo *msg, kt_hw_params_t *hw)
{
    if (!msg || !hw)
        return kt_err_set(KT_EINVAL, "hw params: bad arguments");
    kt_hw_params_t t;
    memset(&t, 0, sizeof t);
    if (put_str(&t, find_field("target"), msg->target ? msg->target : "") < 0 ||
        put_str(&t, find_field("name"), msg->name ? msg->name : "") < 0 ||
        put_str(&t, find_field("arch"), msg->arch ? msg->arch : "") < 0)
        return KT_EINVAL;
    t.num_cores = msg->num_cores;
    t.vector_unit_bytes = msg->vector_unit_bytes;
    t.cache_line_bytes = msg->cache_line_bytes;
    t.max_shared_memory_per_block = msg->max_shared_memory_per_block;
    t.max_local_memory_per_block = msg->max_local_memory_per_block;
    t.max_threads_per_block = msg->max_threads_per_block;
    t.max_vthread_extent = msg->max_vthread_extent;
    t.warp_size = msg->warp_size;
    t.clock_khz = msg->clock_khz;
    t.memory_bytes = msg->memory_bytes;
    if (kt_hw_params_validate(&t) < 0)
        return kt_err_prefix("DeviceInfo");
    *hw = t;
    return KT_OK;
}
