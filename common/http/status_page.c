/* The tracker's HTML status page: one self-contained document (inline CSS
 * and SVG, no scripts) rendered from the snapshot described in http.h. The
 * renderer trusts nothing in the snapshot: every string is escaped and every
 * missing or mistyped field prints as "-". */
#include "http/http.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Plot geometry (SVG user units). */
#define PLOT_W 560
#define PLOT_H 280
#define PLOT_L 70    /* room for the y tick labels and axis title */
#define PLOT_R 18
#define PLOT_T 14
#define PLOT_B 46    /* room for the x tick labels and axis title */
/* Tick count the axis aims for. */
#define PLOT_TICKS 5

static const char *const page_css =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:1.5em;"
    "color:#1d2330;background:#fafbfc}"
    "h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.2em;margin:1.6em 0 .5em;"
    "border-bottom:1px solid #d8dde6;padding-bottom:.2em}"
    "h3{font-size:1.05em;margin:0 0 .3em}"
    ".meta{color:#5a6478;margin:.2em 0 .8em}"
    ".job{background:#fff;border:1px solid #d8dde6;border-radius:6px;padding:1em;"
    "margin-bottom:1.2em}"
    ".jobbody{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}"
    "table{border-collapse:collapse;font-size:.9em;background:#fff}"
    "th,td{border:1px solid #d8dde6;padding:.3em .6em;text-align:left}"
    "th{background:#eef1f6}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "td.key{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em;"
    "max-width:28em;word-break:break-all}"
    ".state{display:inline-block;padding:.05em .5em;border-radius:1em;font-size:.8em;"
    "background:#e4e8ef;margin-left:.4em;vertical-align:middle}"
    ".st-running{background:#d4f0dc}.st-failed,.st-error{background:#f8d7da}"
    ".st-done,.st-finished{background:#dbe7fb}"
    ".summary{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em;margin:.5em 0}"
    ".empty{color:#5a6478;font-style:italic}"
    ".pages{margin:.5em 0 1em}.pages a{color:#2563eb}"
    "svg{background:#fff;border:1px solid #d8dde6;border-radius:4px}"
    "svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#3b4456}"
    "svg .grid{stroke:#e6e9ef;stroke-width:1}svg .axis{stroke:#3b4456;stroke-width:1}"
    "svg .curve{fill:none;stroke:#2563eb;stroke-width:2;stroke-linejoin:round}"
    "svg .dot{fill:#2563eb}";

/* --- escaping and scalars --------------------------------------------------- */

static void put_html(kt_sbuf_t *b, const char *s)
{
    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '&': kt_sbuf_puts(b, "&amp;"); break;
        case '<': kt_sbuf_puts(b, "&lt;"); break;
        case '>': kt_sbuf_puts(b, "&gt;"); break;
        case '"': kt_sbuf_puts(b, "&quot;"); break;
        case '\'': kt_sbuf_puts(b, "&#39;"); break;
        default: kt_sbuf_putn(b, p, 1);
        }
    }
}

static const char *str_of(const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int num_of(const json_t *o, const char *key, double *out)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    if (!json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return 1;
}

/* Any scalar as escaped text; "-" for null, missing or containers. */
static void put_scalar(kt_sbuf_t *b, const json_t *v)
{
    if (json_is_string(v))
        put_html(b, json_string_value(v));
    else if (json_is_integer(v))
        kt_sbuf_printf(b, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        kt_sbuf_printf(b, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        kt_sbuf_puts(b, json_is_true(v) ? "yes" : "no");
    else
        kt_sbuf_puts(b, "-");
}

static void put_duration(kt_sbuf_t *b, double s)
{
    if (!(s >= 0) || !isfinite(s)) {
        kt_sbuf_puts(b, "-");
        return;
    }
    if (s < 60) {
        kt_sbuf_printf(b, "%.1f s", s);
        return;
    }
    long t = (long)s;
    if (t >= 86400)
        kt_sbuf_printf(b, "%ldd ", t / 86400);
    kt_sbuf_printf(b, "%ldh %02ldm %02lds", t % 86400 / 3600, t % 3600 / 60, t % 60);
}

/* --- tables -------------------------------------------------------------------- */

typedef enum {
    COL_TEXT,   /* any scalar */
    COL_KEY,    /* a scalar in monospace (workload keys, addresses) */
    COL_INT,    /* a number printed without decimals */
    COL_MS,     /* seconds printed as milliseconds, 3 decimals (TVM's table) */
    COL_FIX2,   /* a number with 2 decimals (TVM's GFLOPS) */
    COL_NUM,    /* a number, %g */
} col_kind_t;

typedef struct {
    const char *field;
    const char *header;
    col_kind_t kind;
} col_t;

static void put_cell(kt_sbuf_t *b, const json_t *row, const col_t *c)
{
    const json_t *v = json_is_object(row) ? json_object_get(row, c->field) : NULL;
    if (c->kind == COL_TEXT || c->kind == COL_KEY || !json_is_number(v)) {
        kt_sbuf_puts(b, c->kind == COL_KEY ? "<td class=\"key\">" : "<td>");
        put_scalar(b, json_is_number(v) || json_is_string(v) || json_is_boolean(v) ? v : NULL);
        kt_sbuf_puts(b, "</td>");
        return;
    }
    double x = json_number_value(v);
    kt_sbuf_puts(b, "<td class=\"num\">");
    switch (c->kind) {
    case COL_INT: kt_sbuf_printf(b, "%.0f", x); break;
    case COL_MS: kt_sbuf_printf(b, "%.3f", x * 1e3); break;
    case COL_FIX2: kt_sbuf_printf(b, "%.2f", x); break;
    default: kt_sbuf_printf(b, "%g", x); break;
    }
    kt_sbuf_puts(b, "</td>");
}

static void put_table(kt_sbuf_t *b, const char *cls, const json_t *rows, const col_t *cols,
                      int n_cols, const char *empty)
{
    if (!json_is_array(rows) || json_array_size(rows) == 0) {
        kt_sbuf_printf(b, "<p class=\"empty\">%s</p>\n", empty);
        return;
    }
    kt_sbuf_printf(b, "<table class=\"%s\">\n<thead><tr>", cls);
    for (int c = 0; c < n_cols; c++)
        kt_sbuf_printf(b, "<th>%s</th>", cols[c].header);
    kt_sbuf_puts(b, "</tr></thead>\n<tbody>\n");
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row) {
        kt_sbuf_puts(b, "<tr>");
        for (int c = 0; c < n_cols; c++)
            put_cell(b, row, &cols[c]);
        kt_sbuf_puts(b, "</tr>\n");
    }
    kt_sbuf_puts(b, "</tbody>\n</table>\n");
}

/* --- the latency plot ------------------------------------------------------------ */

/* The record store: its file, size and counts, records per device key, the
 * cost models. */
static void put_store(kt_sbuf_t *b, const json_t *st, const col_t *cols, int n_cols)
{
    if (!json_is_object(st))
        return;
    double bytes = -1, records = -1, valid = -1, workloads = -1, distilled = -1, age = -1;
    num_of(st, "bytes", &bytes);
    num_of(st, "records", &records);
    num_of(st, "valid", &valid);
    num_of(st, "workloads", &workloads);
    num_of(st, "distilled", &distilled);
    num_of(st, "age_s", &age);
    kt_sbuf_puts(b, "<h2>Store</h2>\n<p class=\"meta\">");
    put_scalar(b, json_object_get(st, "path"));
    kt_sbuf_printf(b, " &middot; %.1f MiB &middot; %.0f records (%.0f valid) &middot; %.0f "
                      "workloads &middot; %.0f states remembered by distill &middot; counted "
                      "%.0f s ago</p>\n",
                   bytes / 1048576.0, records, valid, workloads, distilled, age);
    put_table(b, "store", json_object_get(st, "keys"), cols, n_cols, "No records.");
    /* What a new job's cost model starts from, per key (docs/search.md). */
    static const col_t model_cols[] = {
        {"target", "Target", COL_TEXT},
        {"key", "Device key", COL_TEXT},
        {"version", "Cost model", COL_INT},
        {"records", "Trained on", COL_INT},
        {"feature_version", "Features", COL_INT},
    };
    put_table(b, "cost_models", json_object_get(st, "cost_models"), model_cols,
              (int)KT_ARRAY_LEN(model_cols), "No cost models.");
}

typedef struct {
    double lo, hi, step;
    int decimals;   /* for the tick labels */
} axis_t;

/* Round [lo, hi] out to multiples of a 1/2/5 x 10^k step giving about
 * PLOT_TICKS intervals. A flat range is widened first. */
static axis_t nice_axis(double lo, double hi)
{
    /* A range lost in rounding (or empty) would give a zero step. */
    if (!(hi - lo > fmax(fabs(lo), fabs(hi)) * 1e-9)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / PLOT_TICKS;
    double e = floor(log10(raw)), f = raw / pow(10, e);
    double nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    axis_t a;
    a.step = nf * pow(10, e);
    a.lo = floor(lo / a.step) * a.step;
    a.hi = ceil(hi / a.step) * a.step;
    double d = -floor(log10(a.step) + 1e-9);
    a.decimals = d > 0 ? (int)d : 0;
    return a;
}

/* Curve points with a numeric trials count and a finite latency (s). */
static size_t curve_points(const json_t *curve, double *xs, double *ys)
{
    size_t n = 0, i;
    const json_t *pt;
    json_array_foreach(curve, i, pt) {
        const json_t *x = json_array_get(pt, 0), *y = json_array_get(pt, 1);
        if (!json_is_number(x) || !json_is_number(y) || !isfinite(json_number_value(y)))
            continue;
        xs[n] = json_number_value(x);
        ys[n] = json_number_value(y) * 1e3;
        n++;
    }
    return n;
}

static void put_plot(kt_sbuf_t *b, const json_t *curve)
{
    size_t total = json_is_array(curve) ? json_array_size(curve) : 0;
    double *xs = total ? malloc(total * sizeof *xs) : NULL;
    double *ys = total ? malloc(total * sizeof *ys) : NULL;
    size_t n = xs && ys ? curve_points(curve, xs, ys) : 0;

    const double pw = PLOT_W - PLOT_L - PLOT_R, ph = PLOT_H - PLOT_T - PLOT_B;
    kt_sbuf_printf(b,
                   "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                   "height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n"
                   "<title>Estimated total latency (ms) against trials</title>\n",
                   PLOT_W, PLOT_H, PLOT_W, PLOT_H);
    double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || xs[i] > xmax)
            xmax = xs[i];
        if (xs[i] < xmin)
            xmin = xs[i];
        if (i == 0 || ys[i] < ymin)
            ymin = ys[i];
        if (i == 0 || ys[i] > ymax)
            ymax = ys[i];
    }
    axis_t ax = nice_axis(xmin, xmax), ay = nice_axis(ymin, ymax);
#define SX(v) (PLOT_L + ((v) - ax.lo) / (ax.hi - ax.lo) * pw)
#define SY(v) (PLOT_T + ph - ((v) - ay.lo) / (ay.hi - ay.lo) * ph)
    /* Grid lines and tick labels. */
    for (int k = 0; k <= 4 * PLOT_TICKS && ax.lo + k * ax.step <= ax.hi + ax.step * 1e-6; k++) {
        double v = ax.lo + k * ax.step, x = SX(v);
        kt_sbuf_printf(b,
                       "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>\n",
                       x, PLOT_T, x, PLOT_T + ph, x, PLOT_T + ph + 15, ax.decimals, v);
    }
    for (int k = 0; k <= 4 * PLOT_TICKS && ay.lo + k * ay.step <= ay.hi + ay.step * 1e-6; k++) {
        double v = ay.lo + k * ay.step, y = SY(v);
        kt_sbuf_printf(b,
                       "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n",
                       PLOT_L, y, PLOT_L + pw, y, PLOT_L - 6, y + 4, ay.decimals, v);
    }
    /* Axes and their titles. */
    kt_sbuf_printf(b,
                   "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                   "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\"/>\n"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">Trials</text>\n"
                   "<text transform=\"translate(14 %.1f) rotate(-90)\" "
                   "text-anchor=\"middle\">Estimated total latency (ms)</text>\n",
                   PLOT_L, PLOT_T + ph, PLOT_L + pw, PLOT_T + ph, PLOT_L, PLOT_T, PLOT_L,
                   PLOT_T + ph, PLOT_L + pw / 2, PLOT_H - 6, PLOT_T + ph / 2);
    if (n == 0) {
        kt_sbuf_printf(b,
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                       "no estimate yet</text>\n",
                       PLOT_L + pw / 2, PLOT_T + ph / 2);
    } else {
        kt_sbuf_puts(b, "<polyline class=\"curve\" points=\"");
        for (size_t i = 0; i < n; i++)
            kt_sbuf_printf(b, "%s%.1f,%.1f", i ? " " : "", SX(xs[i]), SY(ys[i]));
        kt_sbuf_puts(b, "\"/>\n");
        /* A polyline of one point draws nothing: mark it. */
        if (n == 1)
            kt_sbuf_printf(b, "<circle class=\"dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"/>\n",
                           SX(xs[0]), SY(ys[0]));
    }
#undef SX
#undef SY
    kt_sbuf_puts(b, "</svg>\n");
    free(xs);
    free(ys);
}

/* --- sections ------------------------------------------------------------------------- */

/* A CSS class for a state word: letters, digits and '-' only, so a hostile
 * state string cannot leave the attribute. */
static void put_state(kt_sbuf_t *b, const char *state)
{
    if (!state)
        return;
    kt_sbuf_puts(b, " <span class=\"state st-");
    for (const char *p = state; *p; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')
            kt_sbuf_putn(b, p, 1);
    kt_sbuf_puts(b, "\">");
    put_html(b, state);
    kt_sbuf_puts(b, "</span>");
}

static void put_meta_field(kt_sbuf_t *b, int *first, const char *label, const json_t *job,
                           const char *key)
{
    const json_t *v = json_object_get(job, key);
    if (!v || json_is_null(v))
        return;
    kt_sbuf_printf(b, "%s%s ", *first ? "" : " &middot; ", label);
    put_scalar(b, v);
    *first = 0;
}

static void put_job(kt_sbuf_t *b, const json_t *job)
{
    static const col_t task_cols[] = {
        {"id", "ID", COL_TEXT},
        {"workload_key", "Workload key", COL_KEY},
        {"latency_s", "Latency (ms)", COL_MS},
        {"gflops", "Speed (GFLOPS)", COL_FIX2},
        {"trials", "Trials", COL_INT},
        {"weight", "Weight", COL_NUM},
        {"status", "Status", COL_TEXT},
        /* What proposed the best record: transfer, model, random, sibling
         * or unknown ("-" while the task has none). */
        {"best_origin", "Best from", COL_TEXT},
        /* Last, so the long "conv0 + bn0 + relu0" names do not push the
         * numbers apart; "-" for workloads given without a network. */
        {"desc", "Layers", COL_TEXT},
    };
    kt_sbuf_puts(b, "<section class=\"job\">\n<h3>Job ");
    put_scalar(b, json_object_get(job, "id"));
    put_state(b, str_of(job, "state"));
    kt_sbuf_puts(b, "</h3>\n<p class=\"meta\">");
    int first = 1;
    put_meta_field(b, &first, "target", job, "target");
    put_meta_field(b, &first, "strategy", job, "strategy");
    put_meta_field(b, &first, "policy", job, "policy");
    put_meta_field(b, &first, "search params", job, "search_params");
    put_meta_field(b, &first, "store model", job, "store_model");
    put_meta_field(b, &first, "budget", job, "budget");
    put_meta_field(b, &first, "per round", job, "measures_per_round");
    kt_sbuf_puts(b, "</p>\n");
    const char *fin = str_of(job, "finish_message");
    if (fin && *fin) {
        kt_sbuf_puts(b, "<p class=\"meta\">");
        put_html(b, fin);
        kt_sbuf_puts(b, "</p>\n");
    }

    kt_sbuf_puts(b, "<div class=\"jobbody\">\n<div>\n");
    put_table(b, "tasks", json_object_get(job, "tasks"), task_cols,
              (int)KT_ARRAY_LEN(task_cols), "No tasks.");
    /* TVM's summary line under its task table. */
    double v;
    kt_sbuf_puts(b, "<p class=\"summary\">Estimated total latency: ");
    if (num_of(job, "estimated_latency_s", &v))
        kt_sbuf_printf(b, "%.3f ms", v * 1e3);
    else
        kt_sbuf_puts(b, "-");
    kt_sbuf_puts(b, " &middot; Trials: ");
    put_scalar(b, json_object_get(job, "total_trials"));
    kt_sbuf_puts(b, " &middot; Used time: ");
    put_duration(b, num_of(job, "elapsed_s", &v) ? v : -1);
    kt_sbuf_puts(b, "</p>\n</div>\n");
    put_plot(b, json_object_get(job, "curve"));
    kt_sbuf_puts(b, "</div>\n</section>\n");
}

/* Links to the newer and older pages around page `no` of `pages`. */
static void put_page_nav(kt_sbuf_t *b, int64_t no, int64_t pages)
{
    kt_sbuf_puts(b, "<p class=\"pages\">");
    if (no > 1)
        kt_sbuf_printf(b, "<a href=\"/?page=1\">newest</a> &middot; "
                          "<a href=\"/?page=%lld\">&laquo; newer</a> &middot; ",
                       (long long)(no - 1));
    kt_sbuf_printf(b, "page %lld of %lld", (long long)no, (long long)pages);
    if (no < pages)
        kt_sbuf_printf(b, " &middot; <a href=\"/?page=%lld\">older &raquo;</a> &middot; "
                          "<a href=\"/?page=%lld\">oldest</a>",
                       (long long)(no + 1), (long long)pages);
    kt_sbuf_puts(b, "</p>\n");
}

char *kt_http_status_page(const json_t *snap, int refresh_s)
{
    return kt_http_status_page_at(snap, refresh_s, NULL);
}

char *kt_http_status_page_at(const json_t *snap, int refresh_s, const kt_http_page_t *page)
{
    static const col_t runner_cols[] = {
        {"address", "Address", COL_KEY},
        {"key", "Key", COL_TEXT},
        {"state", "State", COL_TEXT},
        {"in_flight", "In flight", COL_INT},
    };
    static const col_t worker_cols[] = {
        {"address", "Address", COL_KEY},
        {"state", "State", COL_TEXT},
        {"in_flight", "In flight", COL_INT},
        {"slots", "Slots", COL_INT},
    };
    static const col_t queue_cols[] = {
        {"key", "Key", COL_TEXT},
        {"total", "Total", COL_INT},
        {"free", "Free", COL_INT},
        {"pending", "Pending", COL_INT},
    };
    static const col_t store_key_cols[] = {
        {"key", "Device key", COL_TEXT},
        {"records", "Records", COL_INT},
    };
    if (!json_is_object(snap))
        snap = NULL;   /* every lookup below then yields "-" or an empty section */

    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    if (refresh_s > 0)
        kt_sbuf_printf(&b, "<meta http-equiv=\"refresh\" content=\"%d\">\n", refresh_s);
    kt_sbuf_printf(&b, "<title>ktune tracker</title>\n<style>%s</style>\n</head>\n<body>\n",
                   page_css);
    kt_sbuf_puts(&b, "<h1>ktune tracker</h1>\n<p class=\"meta\">version ");
    put_scalar(&b, json_object_get(snap, "version"));
    double up;
    kt_sbuf_puts(&b, " &middot; up ");
    put_duration(&b, num_of(snap, "uptime_s", &up) ? up : -1);
    const json_t *jobs = json_object_get(snap, "jobs"), *runners = json_object_get(snap, "runners"),
                 *workers = json_object_get(snap, "workers"), *queue = json_object_get(snap, "queue");
    kt_http_page_t pg = {.offset = 0, .limit = KT_HTTP_PAGE_SIZE};
    if (page && page->offset >= 0 && page->limit > 0)
        pg = *page;
    size_t n = json_array_size(jobs);
    /* jobs_total may be missing, or stale (fewer than the page shows): what
     * is shown counts then. An empty page past the end keeps it. */
    double total = 0;
    if (!num_of(snap, "jobs_total", &total) || !(total >= 0) ||
        (n > 0 && total < (double)pg.offset + (double)n))
        total = (double)pg.offset + (double)n;
    kt_sbuf_printf(&b, " &middot; %.0f jobs &middot; %zu runners &middot; %zu workers</p>\n",
                   total, json_array_size(runners), json_array_size(workers));

    kt_sbuf_puts(&b, "<h2>Jobs</h2>\n");
    int64_t no = pg.offset / pg.limit + 1,
            pages = total > 0 ? (int64_t)ceil(total / pg.limit) : 1;
    if (n == 0 && pg.offset > 0) {
        /* Past the end (the store shrank, or a hand-made link): say where
         * the jobs are instead of an empty page. */
        kt_sbuf_printf(&b, "<p class=\"empty\">No jobs on page %lld: %.0f jobs fill %lld "
                           "page%s. <a href=\"/?page=%lld\">Back to page %lld</a>.</p>\n",
                       (long long)no, total, (long long)pages, pages == 1 ? "" : "s",
                       (long long)pages, (long long)pages);
    } else if (n == 0) {
        kt_sbuf_puts(&b, "<p class=\"empty\">No jobs.</p>\n");
    }
    size_t i;
    const json_t *job;
    json_array_foreach(jobs, i, job) put_job(&b, job);
    /* A store of thousands of jobs: the page shows some, and says which. */
    if (n > 0 && pg.offset == 0 && total > (double)n)
        kt_sbuf_printf(&b, "<p class=\"meta\">Showing the %zu most recent of %.0f jobs.</p>\n",
                       n, total);
    else if (n > 0 && pg.offset > 0)
        kt_sbuf_printf(&b, "<p class=\"meta\">Showing jobs %lld to %lld of %.0f, the most "
                           "recent first.</p>\n",
                       (long long)pg.offset + 1, (long long)pg.offset + (long long)n, total);
    if (n > 0 && (pages > 1 || pg.offset > 0))
        put_page_nav(&b, no, pages);

    kt_sbuf_puts(&b, "<h2>Runners</h2>\n");
    put_table(&b, "runners", runners, runner_cols, (int)KT_ARRAY_LEN(runner_cols), "No runners registered.");
    kt_sbuf_puts(&b, "<h2>Workers</h2>\n");
    put_table(&b, "workers", workers, worker_cols, (int)KT_ARRAY_LEN(worker_cols), "No workers registered.");
    kt_sbuf_puts(&b, "<h2>Queue</h2>\n");
    put_table(&b, "queue", queue, queue_cols, (int)KT_ARRAY_LEN(queue_cols), "Queue empty.");
    put_store(&b, json_object_get(snap, "store"), store_key_cols,
              (int)KT_ARRAY_LEN(store_key_cols));
    kt_sbuf_puts(&b, "</body>\n</html>\n");
    return kt_sbuf_take(&b);
}
