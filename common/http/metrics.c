#include "http/metrics.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } kind_t;

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

typedef struct {
    char **values;        /* n_labels copies */
    uint64_t hash;        /* of the values, to skip most string compares */
    double value;         /* counter / gauge */
    uint64_t *counts;     /* histogram: per bucket (not cumulative), n_buckets + 1 */
    double sum;
    uint64_t count;
} series_t;

struct kt_metric {
    kt_metrics_t *reg;
    kind_t kind;
    char *name;           /* with the namespace */
    char *help;
    int n_labels;
    char *labels[KT_METRICS_MAX_LABELS];
    int n_buckets;
    double buckets[KT_METRICS_MAX_BUCKETS];
    series_t *series;
    size_t n_series, cap_series;
    kt_metric_t *next;
};

typedef struct {
    kt_metrics_collect_fn fn;
    void *user;
} collector_t;

struct kt_metrics {
    pthread_mutex_t mu;
    char *ns;
    kt_metric_t *first, *last;
    collector_t *collectors;
    int n_collectors;
};

const double kt_metrics_latency_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,  0.5,    1,     2.5,  5,     10,
                                             25,     60};
const int kt_metrics_latency_buckets_len = (int)KT_ARRAY_LEN(kt_metrics_latency_buckets);

/* --- names and values --------------------------------------------------- */

static int is_alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int valid_metric_name(const char *s)
{
    if (!s || !(is_alpha_(s[0]) || s[0] == ':'))
        return 0;
    for (const char *p = s + 1; *p; p++)
        if (!(is_alpha_(*p) || is_digit(*p) || *p == ':'))
            return 0;
    return 1;
}

static int valid_label_name(const char *s)
{
    if (!s || !is_alpha_(s[0]) || strncmp(s, "__", 2) == 0)
        return 0;
    for (const char *p = s + 1; *p; p++)
        if (!(is_alpha_(*p) || is_digit(*p)))
            return 0;
    return 1;
}

void kt_metrics_format_value(char *buf, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Go's strconv.FormatFloat(v, 'g', -1, 64), which Prometheus' own
     * clients use: the fewest significant digits that read back exactly,
     * in exponent form when the exponent is < -4 or >= 6. */
    char e[40];
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(e, sizeof e, "%.*e", digits - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    snprintf(e, sizeof e, "%.*e", digits - 1, v);
    int exp = atoi(strchr(e, 'e') + 1);
    if (exp < -4 || exp >= 6)
        snprintf(buf, size, "%s", e);
    else
        snprintf(buf, size, "%.*f", digits - 1 - exp > 0 ? digits - 1 - exp : 0, v);
}

static void put_escaped(kt_sbuf_t *b, const char *s, int quotes)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            kt_sbuf_puts(b, "\\\\");
        else if (*p == '\n')
            kt_sbuf_puts(b, "\\n");
        else if (*p == '"' && quotes)
            kt_sbuf_puts(b, "\\\"");
        else
            kt_sbuf_putn(b, p, 1);
    }
}

static void put_value(kt_sbuf_t *b, double v)
{
    char buf[40];
    kt_metrics_format_value(buf, sizeof buf, v);
    kt_sbuf_puts(b, buf);
}

/* --- registry ------------------------------------------------------------ */

kt_metrics_t *kt_metrics_new(const char *namespace_)
{
    if (namespace_ && *namespace_ && !valid_metric_name(namespace_)) {
        kt_err_set(KT_EINVAL, "invalid metrics namespace '%s'", namespace_);
        return NULL;
    }
    kt_metrics_t *m = calloc(1, sizeof *m);
    if (!m) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    m->ns = kt_strdup(namespace_ ? namespace_ : "");
    if (!m->ns) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void series_release(series_t *s, int n_labels)
{
    for (int i = 0; i < n_labels; i++)
        free(s->values[i]);
    free(s->values);
    free(s->counts);
}

static void family_clear_locked(kt_metric_t *f)
{
    for (size_t i = 0; i < f->n_series; i++)
        series_release(&f->series[i], f->n_labels);
    free(f->series);
    f->series = NULL;
    f->n_series = f->cap_series = 0;
}

static void family_free(kt_metric_t *f)
{
    family_clear_locked(f);
    for (int i = 0; i < f->n_labels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    free(f);
}

void kt_metrics_free(kt_metrics_t *m)
{
    if (!m)
        return;
    for (kt_metric_t *f = m->first, *next; f; f = next) {
        next = f->next;
        family_free(f);
    }
    free(m->collectors);
    free(m->ns);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int same_shape(const kt_metric_t *f, kind_t kind, int n_labels, const char *const *labels,
                      const double *buckets, int n_buckets)
{
    if (f->kind != kind || f->n_labels != n_labels)
        return 0;
    for (int i = 0; i < n_labels; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return 0;
    if (kind == KIND_HISTOGRAM) {
        if (f->n_buckets != n_buckets)
            return 0;
        for (int i = 0; i < n_buckets; i++)
            if (f->buckets[i] != buckets[i])
                return 0;
    }
    return 1;
}

static kt_metric_t *family_register(kt_metrics_t *m, kind_t kind, const char *name,
                                    const char *help, int n_labels, const char *const *labels,
                                    const double *buckets, int n_buckets)
{
    if (!m || !name) {
        kt_err_set(KT_EINVAL, "metric registration without registry or name");
        return NULL;
    }
    if (n_labels < 0 || n_labels > KT_METRICS_MAX_LABELS || (n_labels > 0 && !labels)) {
        kt_err_set(KT_EINVAL, "metric '%s': %d labels (at most %d)", name, n_labels,
                   KT_METRICS_MAX_LABELS);
        return NULL;
    }
    for (int i = 0; i < n_labels; i++) {
        if (!valid_label_name(labels[i]) ||
            (kind == KIND_HISTOGRAM && strcmp(labels[i], "le") == 0)) {
            kt_err_set(KT_EINVAL, "metric '%s': invalid label name '%s'", name,
                       labels[i] ? labels[i] : "(null)");
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0) {
                kt_err_set(KT_EINVAL, "metric '%s': label '%s' given twice", name, labels[i]);
                return NULL;
            }
    }
    if (kind == KIND_HISTOGRAM) {
        if (!buckets || n_buckets < 1 || n_buckets > KT_METRICS_MAX_BUCKETS) {
            kt_err_set(KT_EINVAL, "histogram '%s': %d buckets (1..%d)", name, n_buckets,
                       KT_METRICS_MAX_BUCKETS);
            return NULL;
        }
        for (int i = 0; i < n_buckets; i++)
            if (!isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1])) {
                kt_err_set(KT_EINVAL, "histogram '%s': bucket bounds must be finite and increasing",
                           name);
                return NULL;
            }
    }

    kt_sbuf_t full;
    kt_sbuf_init(&full);
    if (*m->ns)
        kt_sbuf_printf(&full, "%s_", m->ns);
    kt_sbuf_puts(&full, name);
    char *fname = kt_sbuf_take(&full);
    if (!fname)
        return NULL;
    if (!valid_metric_name(fname)) {
        kt_err_set(KT_EINVAL, "invalid metric name '%s'", fname);
        free(fname);
        return NULL;
    }

    pthread_mutex_lock(&m->mu);
    for (kt_metric_t *f = m->first; f; f = f->next) {
        if (strcmp(f->name, fname) != 0)
            continue;
        int same = same_shape(f, kind, n_labels, labels, buckets, n_buckets);
        pthread_mutex_unlock(&m->mu);
        if (!same)
            kt_err_set(KT_EINVAL, "metric '%s' already registered with another kind or labels",
                       fname);
        free(fname);
        return same ? f : NULL;
    }
    kt_metric_t *f = calloc(1, sizeof *f);
    int ok = f != NULL;
    if (ok) {
        f->reg = m;
        f->kind = kind;
        f->name = fname;
        fname = NULL;
        f->help = strdup(help ? help : "");
        ok = f->help != NULL;
        for (int i = 0; ok && i < n_labels; i++) {
            f->labels[i] = strdup(labels[i]);
            ok = f->labels[i] != NULL;
            f->n_labels = i + 1;
        }
        if (kind == KIND_HISTOGRAM) {
            memcpy(f->buckets, buckets, (size_t)n_buckets * sizeof *buckets);
            f->n_buckets = n_buckets;
        }
    }
    if (ok) {
        if (m->last)
            m->last->next = f;
        else
            m->first = f;
        m->last = f;
    }
    pthread_mutex_unlock(&m->mu);
    if (!ok) {
        free(fname);
        if (f)
            family_free(f);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return f;
}

kt_metric_t *kt_metrics_counter(kt_metrics_t *m, const char *name, const char *help,
                                int n_labels, const char *const *label_names)
{
    return family_register(m, KIND_COUNTER, name, help, n_labels, label_names, NULL, 0);
}

kt_metric_t *kt_metrics_gauge(kt_metrics_t *m, const char *name, const char *help,
                              int n_labels, const char *const *label_names)
{
    return family_register(m, KIND_GAUGE, name, help, n_labels, label_names, NULL, 0);
}

kt_metric_t *kt_metrics_histogram(kt_metrics_t *m, const char *name, const char *help,
                                  int n_labels, const char *const *label_names,
                                  const double *buckets, int n_buckets)
{
    return family_register(m, KIND_HISTOGRAM, name, help, n_labels, label_names, buckets,
                           n_buckets);
}

int kt_metrics_add_collector(kt_metrics_t *m, kt_metrics_collect_fn fn, void *user)
{
    if (!m || !fn)
        return kt_err_set(KT_EINVAL, "collector without registry or function");
    pthread_mutex_lock(&m->mu);
    collector_t *nc = realloc(m->collectors, (size_t)(m->n_collectors + 1) * sizeof *nc);
    if (nc) {
        nc[m->n_collectors++] = (collector_t){fn, user};
        m->collectors = nc;
    }
    pthread_mutex_unlock(&m->mu);
    return nc ? KT_OK : kt_err_set(KT_ENOMEM, "out of memory");
}

/* --- series -------------------------------------------------------------- */

static int check_values(const kt_metric_t *f, const char *const *values)
{
    if (f->n_labels > 0 && !values)
        return kt_err_set(KT_EINVAL, "metric '%s' needs %d label values", f->name, f->n_labels);
    for (int i = 0; i < f->n_labels; i++)
        if (!values[i])
            return kt_err_set(KT_EINVAL, "metric '%s': label '%s' has no value", f->name,
                              f->labels[i]);
    return KT_OK;
}

static uint64_t values_hash(const kt_metric_t *f, const char *const *values)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < f->n_labels; i++)
        h = (h ^ kt_hash64(values[i], strlen(values[i]))) * 0x100000001b3ull;
    return h;
}

/* The series for `values`, created if absent; NULL (out of memory) otherwise.
 * Called with the registry lock held. */
static series_t *series_get_locked(kt_metric_t *f, const char *const *values, int create)
{
    uint64_t h = values_hash(f, values);
    for (size_t i = 0; i < f->n_series; i++) {
        series_t *s = &f->series[i];
        if (s->hash != h)
            continue;
        int eq = 1;
        for (int j = 0; eq && j < f->n_labels; j++)
            eq = strcmp(s->values[j], values[j]) == 0;
        if (eq)
            return s;
    }
    if (!create)
        return NULL;
    if (f->n_series == f->cap_series) {
        size_t cap = f->cap_series ? 2 * f->cap_series : 4;
        series_t *ns = realloc(f->series, cap * sizeof *ns);
        if (!ns)
            return NULL;
        f->series = ns;
        f->cap_series = cap;
    }
    series_t s = {.hash = h};
    int ok = 1;
    if (f->n_labels > 0) {
        s.values = calloc((size_t)f->n_labels, sizeof *s.values);
        ok = s.values != NULL;
        for (int j = 0; ok && j < f->n_labels; j++)
            ok = (s.values[j] = strdup(values[j])) != NULL;
    }
    if (ok && f->kind == KIND_HISTOGRAM)
        ok = (s.counts = calloc((size_t)f->n_buckets + 1, sizeof *s.counts)) != NULL;
    if (!ok) {
        series_release(&s, s.values ? f->n_labels : 0);
        return NULL;
    }
    f->series[f->n_series] = s;
    return &f->series[f->n_series++];
}

typedef enum { OP_ADD, OP_SET, OP_OBSERVE } op_t;

static int update(kt_metric_t *f, const char *const *values, double v, op_t op)
{
    if (!f)
        return kt_err_set(KT_EINVAL, "update of a NULL metric");
    int rc = check_values(f, values);
    if (rc < 0)
        return rc;
    if ((op == OP_OBSERVE) != (f->kind == KIND_HISTOGRAM) ||
        (op == OP_SET && f->kind != KIND_GAUGE))
        return kt_err_set(KT_EINVAL, "metric '%s' is a %s: wrong update", f->name,
                          kind_names[f->kind]);
    if (isnan(v) || (op == OP_ADD && f->kind == KIND_COUNTER && !(v >= 0)))
        return kt_err_set(KT_EINVAL, "metric '%s': invalid value %g", f->name, v);
    pthread_mutex_lock(&f->reg->mu);
    series_t *s = series_get_locked(f, values, 1);
    if (s) {
        if (op == OP_ADD)
            s->value += v;
        else if (op == OP_SET)
            s->value = v;
        else {
            int b = 0;
            while (b < f->n_buckets && v > f->buckets[b])
                b++;
            s->counts[b]++;
            s->count++;
            s->sum += v;
        }
    }
    pthread_mutex_unlock(&f->reg->mu);
    return s ? KT_OK : kt_err_set(KT_ENOMEM, "out of memory");
}

int kt_metrics_add(kt_metric_t *f, const char *const *label_values, double v)
{
    return update(f, label_values, v, OP_ADD);
}

int kt_metrics_set(kt_metric_t *f, const char *const *label_values, double v)
{
    return update(f, label_values, v, OP_SET);
}

int kt_metrics_observe(kt_metric_t *f, const char *const *label_values, double v)
{
    return update(f, label_values, v, OP_OBSERVE);
}

void kt_metrics_clear(kt_metric_t *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->reg->mu);
    family_clear_locked(f);
    pthread_mutex_unlock(&f->reg->mu);
}

double kt_metrics_value(kt_metric_t *f, const char *const *label_values)
{
    if (!f || check_values(f, label_values) < 0)
        return 0;
    pthread_mutex_lock(&f->reg->mu);
    series_t *s = series_get_locked(f, label_values, 0);
    double v = !s ? 0 : f->kind == KIND_HISTOGRAM ? (double)s->count : s->value;
    pthread_mutex_unlock(&f->reg->mu);
    return v;
}

/* --- rendering ------------------------------------------------------------ */

static int cmp_series(const void *a, const void *b, void *n_labels)
{
    const series_t *x = *(const series_t *const *)a, *y = *(const series_t *const *)b;
    for (int i = 0; i < *(const int *)n_labels; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c)
            return c;
    }
    return 0;
}

/* name{l1="v1",...[,le="b"]} */
static void put_series_name(kt_sbuf_t *b, const kt_metric_t *f, const series_t *s,
                            const char *suffix, const char *le)
{
    kt_sbuf_puts(b, f->name);
    kt_sbuf_puts(b, suffix);
    if (f->n_labels == 0 && !le)
        return;
    kt_sbuf_puts(b, "{");
    for (int i = 0; i < f->n_labels; i++) {
        kt_sbuf_printf(b, "%s%s=\"", i ? "," : "", f->labels[i]);
        put_escaped(b, s->values[i], 1);
        kt_sbuf_puts(b, "\"");
    }
    if (le)
        kt_sbuf_printf(b, "%sle=\"%s\"", f->n_labels ? "," : "", le);
    kt_sbuf_puts(b, "}");
}

static void render_family(kt_sbuf_t *b, const kt_metric_t *f, const series_t **order)
{
    kt_sbuf_printf(b, "# HELP %s ", f->name);
    put_escaped(b, f->help, 0);
    kt_sbuf_printf(b, "\n# TYPE %s %s\n", f->name, kind_names[f->kind]);
    for (size_t i = 0; i < f->n_series; i++) {
        const series_t *s = order[i];
        if (f->kind != KIND_HISTOGRAM) {
            put_series_name(b, f, s, "", NULL);
            kt_sbuf_puts(b, " ");
            put_value(b, s->value);
            kt_sbuf_puts(b, "\n");
            continue;
        }
        uint64_t cum = 0;
        for (int k = 0; k <= f->n_buckets; k++) {
            char le[40];
            if (k < f->n_buckets)
                kt_metrics_format_value(le, sizeof le, f->buckets[k]);
            else
                snprintf(le, sizeof le, "+Inf");
            cum += s->counts[k];
            put_series_name(b, f, s, "_bucket", le);
            kt_sbuf_printf(b, " %llu\n", (unsigned long long)cum);
        }
        put_series_name(b, f, s, "_sum", NULL);
        kt_sbuf_puts(b, " ");
        put_value(b, s->sum);
        kt_sbuf_puts(b, "\n");
        put_series_name(b, f, s, "_count", NULL);
        kt_sbuf_printf(b, " %llu\n", (unsigned long long)s->count);
    }
}

char *kt_metrics_render(kt_metrics_t *m)
{
    if (!m) {
        kt_err_set(KT_EINVAL, "render of a NULL registry");
        return NULL;
    }
    /* Collectors run unlocked so they can update gauges; copy the list first. */
    pthread_mutex_lock(&m->mu);
    int nc = m->n_collectors;
    collector_t *cs = nc ? malloc((size_t)nc * sizeof *cs) : NULL;
    if (cs)
        memcpy(cs, m->collectors, (size_t)nc * sizeof *cs);
    pthread_mutex_unlock(&m->mu);
    if (nc && !cs) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < nc; i++)
        cs[i].fn(cs[i].user, m);
    free(cs);

    kt_sbuf_t b;
    kt_sbuf_init(&b);
    const series_t **order = NULL;
    size_t cap = 0;
    int oom = 0;
    pthread_mutex_lock(&m->mu);
    for (kt_metric_t *f = m->first; f && !oom; f = f->next) {
        if (f->n_series > cap) {
            const series_t **no = realloc(order, f->n_series * sizeof *no);
            if (!no) {
                oom = 1;
                break;
            }
            order = no;
            cap = f->n_series;
        }
        for (size_t i = 0; i < f->n_series; i++)
            order[i] = &f->series[i];
        if (f->n_series > 1)
            qsort_r(order, f->n_series, sizeof *order, cmp_series, &f->n_labels);
        render_family(&b, f, order);
    }
    pthread_mutex_unlock(&m->mu);
    free(order);
    if (oom) {
        kt_sbuf_free(&b);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    return kt_sbuf_take(&b);
}
