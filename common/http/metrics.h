/*
 * A small metrics registry rendered in the Prometheus text exposition format
 * 0.0.4. It holds metric families (counter, gauge, histogram with fixed
 * buckets), each with up to KT_METRICS_MAX_LABELS label names; a family
 * holds one series per distinct tuple of label values, created on first
 * use. It is not a client library for pushing anywhere: the tracker's HTTP
 * server renders it on GET /metrics.
 *
 * Names: the registry's namespace ("ktune") is prepended with an underscore
 * to every family name, so kt_metrics_counter(m, "measurements_total", ...)
 * renders as ktune_measurements_total. Metric names must match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and must not
 * start with "__"; histograms may not use the label name "le". Label values
 * are any UTF-8 text (escaped on output). Registering a name again with the
 * same kind, labels (and buckets) returns the existing family, so modules can
 * register lazily; a conflicting registration is KT_EINVAL.
 *
 * Output: families in registration order, each with "# HELP" and "# TYPE"
 * lines, then its series sorted by label values; histograms as cumulative
 * name_bucket{...,le="..."} lines ending with le="+Inf", then name_sum and
 * name_count. Numbers use the shortest text that reads back exactly (Go's
 * strconv style: 1, 0.25, 1e-06, +Inf, -Inf, NaN).
 *
 * Ownership: the registry owns its families; a family handle (kt_metric_t *)
 * stays valid until kt_metrics_free(). Every string argument is copied.
 * kt_metrics_render() returns a malloc'd string the caller frees.
 *
 * Thread-safety: every function may be called from any thread at any time
 * (one mutex per registry; a hot path of a few increments per measurement
 * does not need more). Collectors run inside kt_metrics_render() on the
 * rendering thread, without the registry lock held, so they may set gauges.
 */
#ifndef KT_HTTP_METRICS_H
#define KT_HTTP_METRICS_H

#include <stddef.h>

typedef struct kt_metrics kt_metrics_t;
typedef struct kt_metric kt_metric_t;

/* Label names a family may have. */
#define KT_METRICS_MAX_LABELS 4
/* Finite bucket bounds a histogram may have (+Inf is implicit). */
#define KT_METRICS_MAX_BUCKETS 32
/* The namespace the tracker registers its metrics under. */
#define KT_METRICS_NAMESPACE "ktune"
/* The Content-Type of kt_metrics_render()'s output. */
#define KT_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Called by kt_metrics_render() before rendering, to refresh gauges that are
 * cheaper to compute on scrape (queue depth per key, runners per key). */
typedef void (*kt_metrics_collect_fn)(void *user, kt_metrics_t *m);

/* --- create / destroy ------------------------------------------------ */

/* namespace: prefix of every family name (validated); NULL or "" = none.
 * NULL + kt_err on bad input or out of memory. */
kt_metrics_t *kt_metrics_new(const char *namespace_);
void kt_metrics_free(kt_metrics_t *m);

/* --- register families ----------------------------------------------- */

/* label_names: n_labels names (0..KT_METRICS_MAX_LABELS; NULL when 0).
 * NULL + kt_err (KT_EINVAL) on an invalid name, too many labels or a
 * conflicting earlier registration. */
kt_metric_t *kt_metrics_counter(kt_metrics_t *m, const char *name, const char *help,
                                int n_labels, const char *const *label_names);
kt_metric_t *kt_metrics_gauge(kt_metrics_t *m, const char *name, const char *help,
                              int n_labels, const char *const *label_names);
/* buckets: n_buckets finite upper bounds, strictly increasing (1..
 * KT_METRICS_MAX_BUCKETS); the +Inf bucket is added. */
kt_metric_t *kt_metrics_histogram(kt_metrics_t *m, const char *name, const char *help,
                                  int n_labels, const char *const *label_names,
                                  const double *buckets, int n_buckets);

/* Buckets for RPC latencies in seconds: 0.5 ms .. 60 s, roughly x2.5 apart. */
extern const double kt_metrics_latency_buckets[];
extern const int kt_metrics_latency_buckets_len;

/* Run fn(user, m) at the start of every render (several may be added; they
 * run in the order added). 0 or KT_ENOMEM. */
int kt_metrics_add_collector(kt_metrics_t *m, kt_metrics_collect_fn fn, void *user);

/* --- update series ----------------------------------------------------
 * label_values: as many values as the family has label names (NULL when it
 * has none); a NULL value is KT_EINVAL. The series is created on first use.
 * 0 or a negative KT_E* code (wrong kind, negative counter increment,
 * out of memory). */

/* Counter: add v >= 0. Gauge: add v (any sign). */
int kt_metrics_add(kt_metric_t *f, const char *const *label_values, double v);
/* Gauge only: set the value. */
int kt_metrics_set(kt_metric_t *f, const char *const *label_values, double v);
/* Histogram only: count one observation of v (NaN is KT_EINVAL). */
int kt_metrics_observe(kt_metric_t *f, const char *const *label_values, double v);
/* Drop every series of the family (e.g. before a collector re-sets the
 * gauges of the keys that still exist). */
void kt_metrics_clear(kt_metric_t *f);

/* --- query ------------------------------------------------------------ */

/* The value of a counter or gauge series, or a histogram series' count;
 * 0 when the series does not exist. */
double kt_metrics_value(kt_metric_t *f, const char *const *label_values);

/* The whole registry in the text format (collectors run first). Caller frees;
 * NULL + kt_err on out of memory. */
char *kt_metrics_render(kt_metrics_t *m);

/* Write v to buf as the text format writes a sample value (size >= 32). */
void kt_metrics_format_value(char *buf, size_t size, double v);

#endif
