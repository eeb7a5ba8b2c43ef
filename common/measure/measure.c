#include "measure/measure.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktune.pb-c.h"
#include "measure/measure_int.h"
#include "util/err.h"
#include "util/util.h"

/* The codes travel over RPC and into records as the proto enum's numbers. */
#define SAME_AS_PROTO(x) \
    _Static_assert((int)KT_MEASURE_##x == (int)KTUNE__V1__MEASURE_ERROR__##x, #x " differs from the proto")
SAME_AS_PROTO(NO_ERROR);
SAME_AS_PROTO(INSTANTIATION_ERROR);
SAME_AS_PROTO(COMPILE_HOST);
SAME_AS_PROTO(COMPILE_DEVICE);
SAME_AS_PROTO(RUNTIME_DEVICE);
SAME_AS_PROTO(WRONG_ANSWER);
SAME_AS_PROTO(BUILD_TIMEOUT);
SAME_AS_PROTO(RUN_TIMEOUT);
SAME_AS_PROTO(UNKNOWN_ERROR);
#undef SAME_AS_PROTO

static const char *const error_names[KT_MEASURE_NUM_ERRORS] = {
    "NO_ERROR", "INSTANTIATION_ERROR", "COMPILE_HOST", "COMPILE_DEVICE", "RUNTIME_DEVICE",
    "WRONG_ANSWER", "BUILD_TIMEOUT", "RUN_TIMEOUT", "UNKNOWN_ERROR",
};

static const char *const error_descs[KT_MEASURE_NUM_ERRORS] = {
    "measured without error",
    "the candidate could not be instantiated",
    "the host compiler failed",
    "the device compiler failed",
    "the kernel failed or crashed while loading or running",
    "the kernel's outputs differ from the reference",
    "the build exceeded its timeout",
    "the run exceeded its timeout",
    "an unexpected error occurred",
};

const char *kt_measure_error_name(int error_no)
{
    if (error_no < 0 || error_no >= KT_MEASURE_NUM_ERRORS)
        return error_names[KT_MEASURE_UNKNOWN_ERROR];
    return error_names[error_no];
}

int kt_measure_error_from_name(const char *name)
{
    for (int i = 0; name && i < KT_MEASURE_NUM_ERRORS; i++)
        if (strcmp(error_names[i], name) == 0)
            return i;
    return -1;
}

int kt_measure_target_parse(const char *name, kt_measure_target_t *out)
{
    kt_measure_target_t t;
    if (name && strcmp(name, "cpu") == 0)
        t = KT_MEASURE_TARGET_CPU;
    else if (name && strcmp(name, "cuda") == 0)
        t = KT_MEASURE_TARGET_CUDA;
    else
        return kt_err_set(KT_EINVAL, "unknown target '%s' (cpu or cuda)", name ? name : "");
    if (out)
        *out = t;
    return 0;
}

const char *kt_measure_error_desc(int error_no)
{
    if (error_no < 0 || error_no >= KT_MEASURE_NUM_ERRORS)
        return error_descs[KT_MEASURE_UNKNOWN_ERROR];
    return error_descs[error_no];
}

int kt_buf_layout_check(const kt_buf_layout_t *layout)
{
    if (!layout)
        return kt_err_set(KT_EINVAL, "no buffer layout");
    if (layout->num_bufs < 1 || layout->num_bufs > KT_MEASURE_MAX_BUFS)
        return kt_err_set(KT_EINVAL, "buffer layout: %d buffers (allowed 1..%d)", layout->num_bufs,
                          KT_MEASURE_MAX_BUFS);
    if (layout->num_outputs < 1 || layout->num_outputs > layout->num_bufs)
        return kt_err_set(KT_EINVAL, "buffer layout: %d outputs of %d buffers", layout->num_outputs,
                          layout->num_bufs);
    for (int i = 0; i < layout->num_bufs; i++) {
        /* The bound keeps byte counts far from overflow (2^40 floats = 4 TiB). */
        if (layout->num_elems[i] < 1 || layout->num_elems[i] > ((int64_t)1 << 40))
            return kt_err_set(KT_EINVAL, "buffer layout: buffer %d has %lld elements", i,
                              (long long)layout->num_elems[i]);
    }
    int ninputs = layout->num_bufs - layout->num_outputs;
    if (layout->weights >> ninputs)
        return kt_err_set(KT_EINVAL,
                          "buffer layout: weight mask 0x%x names a buffer past the %d inputs",
                          (unsigned)layout->weights, ninputs);
    return KT_OK;
}

void kt_measure_result_clear(kt_measure_result_t *r)
{
    if (!r)
        return;
    free(r->costs);
    free(r->error_msg);
    memset(r, 0, sizeof *r);
}

int kt_measure_result_set_error(kt_measure_result_t *r, int error_no, const char *fmt, ...)
{
    free(r->costs);
    free(r->error_msg);
    r->costs = NULL;
    r->error_msg = NULL;
    r->n_costs = 0;
    r->number = 0;
    r->mean = KT_MEASURE_MAX_COST;
    r->error_no = error_no;
    r->max_error = -1;
    r->costs = malloc(sizeof *r->costs);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0)
        r->error_msg = malloc((size_t)n + 1);
    if (!r->costs || !r->error_msg) {
        free(r->costs);
        free(r->error_msg);
        r->costs = NULL;
        r->error_msg = NULL;
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    va_start(ap, fmt);
    vsnprintf(r->error_msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->costs[0] = KT_MEASURE_MAX_COST;
    r->n_costs = 1;
    return KT_OK;
}

void kt_measure_result_range(const kt_measure_result_t *r, double *lo, double *hi)
{
    double a = r->n_costs > 0 ? r->costs[0] : r->mean, b = a;
    for (int k = 1; k < r->n_costs; k++) {
        a = r->costs[k] < a ? r->costs[k] : a;
        b = r->costs[k] > b ? r->costs[k] : b;
    }
    if (lo)
        *lo = a;
    if (hi)
        *hi = b;
}

int kt_measure_result_copy(kt_measure_result_t *dst, const kt_measure_result_t *src)
{
    *dst = *src;
    dst->costs = NULL;
    dst->error_msg = NULL;
    if (src->n_costs > 0) {
        dst->costs = malloc(sizeof *dst->costs * (size_t)src->n_costs);
        if (!dst->costs)
            goto oom;
        memcpy(dst->costs, src->costs, sizeof *dst->costs * (size_t)src->n_costs);
    }
    if (src->error_msg) {
        dst->error_msg = strdup(src->error_msg);
        if (!dst->error_msg)
            goto oom;
    }
    return KT_OK;
oom:
    free(dst->costs);
    dst->costs = NULL;
    dst->n_costs = 0;
    return kt_err_set(KT_ENOMEM, "out of memory");
}

void kt_measure_signal_text(int sig, char *buf, size_t n)
{
    const char *abbrev = sigabbrev_np(sig);
    const char *desc = sigdescr_np(sig);
    snprintf(buf, n, "signal %d (SIG%s, %s)", sig, abbrev ? abbrev : "?",
             desc ? desc : "unknown signal");
}

char **kt_measure_split_words(const char *s, int *argc)
{
    int cap = 8, n = 0;
    char **w = calloc((size_t)cap, sizeof *w);
    if (!w)
        goto oom;
    for (const char *p = s ? s : ""; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        const char *q = p;
        while (*q && *q != ' ' && *q != '\t' && *q != '\n')
            q++;
        if (n + 1 >= cap) {
            char **nw = realloc(w, sizeof *w * (size_t)cap * 2);
            if (!nw)
                goto oom;
            memset(nw + cap, 0, sizeof *nw * (size_t)cap);
            w = nw;
            cap *= 2;
        }
        w[n] = strndup(p, (size_t)(q - p));
        if (!w[n])
            goto oom;
        n++;
        p = q;
    }
    w[n] = NULL;
    if (argc)
        *argc = n;
    return w;
oom:
    kt_measure_free_words(w);
    kt_err_set(KT_ENOMEM, "out of memory");
    return NULL;
}

void kt_measure_free_words(char **words)
{
    if (!words)
        return;
    for (char **p = words; *p; p++)
        free(*p);
    free(words);
}
