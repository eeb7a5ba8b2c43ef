/* HTTP side tests: the Prometheus text of a small registry, concurrent
 * updates, the status page renderer, and the evhttp server answered through
 * a raw-socket HTTP/1.1 client on 127.0.0.1. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "http/http.h"
#include "http/metrics.h"
#include "util/err.h"
#include "util/util.h"

#define LV(...) ((const char *const[]){__VA_ARGS__})

/* --- a tiny HTTP client ------------------------------------------------------ */

typedef struct {
    int status;        /* -1 when no response */
    char *head;        /* status line and headers */
    char *body;
    size_t body_len;
} resp_t;

static void resp_free(resp_t *r)
{
    free(r->head);
    free(r->body);
}

static resp_t http_do_auth(int port, const char *method, const char *path, const char *auth);

static resp_t http_do(int port, const char *method, const char *path)
{
    return http_do_auth(port, method, path, NULL);
}

/* As http_do, with "Authorization: <auth>" when auth is not NULL. */
static resp_t http_do_auth(int port, const char *method, const char *path, const char *auth)
{
    resp_t r = {.status = -1};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {.tv_sec = 20};   /* a bound, not a timing assertion */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "%s%s%sContent-Length: 0\r\n\r\n",
                     method, path, auth ? "Authorization: " : "", auth ? auth : "",
                     auth ? "\r\n" : "");
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        if (cap - len < 2048)
            buf = realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (sep && sscanf(buf, "HTTP/1.%*d %d", &r.status) == 1) {
        r.head = strndup(buf, (size_t)(sep - buf) + 2);
        r.body_len = len - (size_t)(sep + 4 - buf);
        r.body = strndup(sep + 4, r.body_len);
    }
    free(buf);
    return r;
}

/* The value of a response header (case-insensitive name), copied into out. */
static int header(const resp_t *r, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    const char *p = r->head;
    while (p && *p) {
        const char *eol = strstr(p, "\r\n");
        if (!eol)
            break;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, size, "%.*s", (int)(eol - v), v);
            return 1;
        }
        p = eol + 2;
    }
    return 0;
}

/* --- metrics --------------------------------------------------------------- */

START_TEST(metrics_render_exact_text)
{
    kt_metrics_t *m = kt_metrics_new("ktune");
    ck_assert_ptr_nonnull(m);
    kt_metric_t *meas = kt_metrics_counter(m, "measurements_total",
                                           "Measurements done, by error code.", 1, LV("error"));
    kt_metric_t *depth = kt_metrics_gauge(m, "queue_depth", "Pending measurement requests.", 2,
                                          LV("key", "note"));
    kt_metric_t *up = kt_metrics_gauge(m, "up", "Help with a \\ backslash\nand a newline.", 0,
                                       NULL);
    const double buckets[] = {0.125, 0.5, 1};
    kt_metric_t *lat = kt_metrics_histogram(m, "rpc_latency_seconds", "RPC latency.", 1,
                                            LV("method"), buckets, 3);
    ck_assert(meas && depth && up && lat);

    ck_assert_int_eq(kt_metrics_add(meas, LV("RUN_TIMEOUT"), 1), 0);
    ck_assert_int_eq(kt_metrics_add(meas, LV("NO_ERROR"), 2), 0);
    ck_assert_int_eq(kt_metrics_add(meas, LV("NO_ERROR"), 1), 0);
    ck_assert_int_eq(kt_metrics_set(depth, LV("cpu", "a\\b \"q\"\nz"), 7), 0);
    ck_assert_int_eq(kt_metrics_set(depth, LV("cuda-sm90", ""), 0.5), 0);
    ck_assert_int_eq(kt_metrics_add(depth, LV("cuda-sm90", ""), -1.5), 0);
    ck_assert_int_eq(kt_metrics_set(up, NULL, 1), 0);
    const double obs[] = {0.0625, 0.25, 0.25, 2};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(kt_metrics_observe(lat, LV("Run"), obs[i]), 0);
    ck_assert_int_eq(kt_metrics_observe(lat, LV("Build"), 1), 0);

    char *text = kt_metrics_render(m);
    ck_assert_ptr_nonnull(text);
    const char *want =
        "# HELP ktune_measurements_total Measurements done, by error code.\n"
        "# TYPE ktune_measurements_total counter\n"
        "ktune_measurements_total{error=\"NO_ERROR\"} 3\n"
        "ktune_measurements_total{error=\"RUN_TIMEOUT\"} 1\n"
        "# HELP ktune_queue_depth Pending measurement requests.\n"
        "# TYPE ktune_queue_depth gauge\n"
        "ktune_queue_depth{key=\"cpu\",note=\"a\\\\b \\\"q\\\"\\nz\"} 7\n"
        "ktune_queue_depth{key=\"cuda-sm90\",note=\"\"} -1\n"
        "# HELP ktune_up Help with a \\\\ backslash\\nand a newline.\n"
        "# TYPE ktune_up gauge\n"
        "ktune_up 1\n"
        "# HELP ktune_rpc_latency_seconds RPC latency.\n"
        "# TYPE ktune_rpc_latency_seconds histogram\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Build\",le=\"0.125\"} 0\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Build\",le=\"0.5\"} 0\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Build\",le=\"1\"} 1\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Build\",le=\"+Inf\"} 1\n"
        "ktune_rpc_latency_seconds_sum{method=\"Build\"} 1\n"
        "ktune_rpc_latency_seconds_count{method=\"Build\"} 1\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Run\",le=\"0.125\"} 1\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Run\",le=\"0.5\"} 3\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Run\",le=\"1\"} 3\n"
        "ktune_rpc_latency_seconds_bucket{method=\"Run\",le=\"+Inf\"} 4\n"
        "ktune_rpc_latency_seconds_sum{method=\"Run\"} 2.5625\n"
        "ktune_rpc_latency_seconds_count{method=\"Run\"} 4\n";
    ck_assert_str_eq(text, want);
    free(text);
    kt_metrics_free(m);
}
END_TEST

START_TEST(metrics_values_use_shortest_exact_text)
{
    char buf[40];
    const struct {
        double v;
        const char *text;
    } cases[] = {{1, "1"},        {0.25, "0.25"}, {1e-06, "1e-06"}, {1234567, "1.234567e+06"},
                 {60000, "60000"},  {1e6, "1e+06"},  {0.0001234, "0.0001234"}, {0, "0"},
                 {0.1, "0.1"},    {-2.5, "-2.5"}, {1.0 / 0.0, "+Inf"}, {-1.0 / 0.0, "-Inf"},
                 {0.0 / 0.0, "NaN"}, {0.30000000000000004, "0.30000000000000004"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kt_metrics_format_value(buf, sizeof buf, cases[i].v);
        ck_assert_str_eq(buf, cases[i].text);
    }
}
END_TEST

START_TEST(metrics_reject_bad_names_and_updates)
{
    ck_assert_ptr_null(kt_metrics_new("9lives"));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    kt_metrics_t *m = kt_metrics_new("ktune");
    const double b[] = {1, 2};
    const double bad_b[] = {2, 1};
    ck_assert_ptr_null(kt_metrics_counter(m, "bad-name", "", 0, NULL));
    ck_assert_ptr_null(kt_metrics_counter(m, "x", "", 1, LV("__reserved")));
    ck_assert_ptr_null(kt_metrics_counter(m, "x", "", 1, LV("a-b")));
    ck_assert_ptr_null(kt_metrics_counter(m, "x", "", 2, LV("a", "a")));
    ck_assert_ptr_null(kt_metrics_counter(m, "x", "", KT_METRICS_MAX_LABELS + 1,
                                          LV("a", "b", "c", "d", "e")));
    ck_assert_ptr_null(kt_metrics_histogram(m, "h", "", 1, LV("le"), b, 2));
    ck_assert_ptr_null(kt_metrics_histogram(m, "h", "", 0, NULL, bad_b, 2));
    ck_assert_ptr_null(kt_metrics_histogram(m, "h", "", 0, NULL, b, 0));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);

    kt_metric_t *c = kt_metrics_counter(m, "x_total", "x", 1, LV("a"));
    ck_assert_ptr_nonnull(c);
    /* The same registration again is the same family; another shape is not. */
    ck_assert_ptr_eq(kt_metrics_counter(m, "x_total", "x", 1, LV("a")), c);
    ck_assert_ptr_null(kt_metrics_gauge(m, "x_total", "x", 1, LV("a")));
    ck_assert_ptr_null(kt_metrics_counter(m, "x_total", "x", 1, LV("b")));

    ck_assert_int_eq(kt_metrics_add(c, LV("v"), -1), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_set(c, LV("v"), 1), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_observe(c, LV("v"), 1), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_add(c, NULL, 1), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_add(c, LV(NULL), 1), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_add(c, LV("v"), 0.0 / 0.0), KT_EINVAL);
    ck_assert_int_eq(kt_metrics_add(NULL, NULL, 1), KT_EINVAL);
    kt_metric_t *h = kt_metrics_histogram(m, "h", "", 0, NULL, b, 2);
    ck_assert_int_eq(kt_metrics_add(h, NULL, 1), KT_EINVAL);
    /* Nothing was recorded by the failed updates. */
    ck_assert(kt_metrics_value(c, LV("v")) == 0);
    char *text = kt_metrics_render(m);
    ck_assert_ptr_null(strstr(text, "x_total{"));
    free(text);
    kt_metrics_free(m);
    kt_metrics_free(NULL);
}
END_TEST

typedef struct {
    kt_metric_t *counter, *hist;
    kt_metrics_t *m;
    int id;
} worker_arg_t;

#define PER_THREAD 20000

static void *hammer(void *p)
{
    worker_arg_t *w = p;
    for (int i = 0; i < PER_THREAD; i++) {
        kt_metrics_add(w->counter, LV(i % 2 ? "NO_ERROR" : "RUN_TIMEOUT"), 1);
        kt_metrics_observe(w->hist, LV("Run"), (i % 4) * 0.5);
        if (w->id == 0 && i % 5000 == 0)
            free(kt_metrics_render(w->m));   /* renders interleave with updates */
    }
    return NULL;
}

START_TEST(metrics_concurrent_increments_sum)
{
    kt_metrics_t *m = kt_metrics_new("ktune");
    const double b[] = {0.25, 1};
    worker_arg_t w[4];
    pthread_t t[4];
    kt_metric_t *c = kt_metrics_counter(m, "measurements_total", "", 1, LV("error"));
    kt_metric_t *h = kt_metrics_histogram(m, "lat", "", 1, LV("method"), b, 2);
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_arg_t){c, h, m, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert(kt_metrics_value(c, LV("NO_ERROR")) == 2 * PER_THREAD);
    ck_assert(kt_metrics_value(c, LV("RUN_TIMEOUT")) == 2 * PER_THREAD);
    ck_assert(kt_metrics_value(h, LV("Run")) == 4 * PER_THREAD);
    char *text = kt_metrics_render(m);
    /* observations 0, 0.5, 1, 1.5 in equal shares */
    ck_assert_ptr_nonnull(strstr(text, "ktune_lat_bucket{method=\"Run\",le=\"0.25\"} 20000\n"));
    ck_assert_ptr_nonnull(strstr(text, "ktune_lat_bucket{method=\"Run\",le=\"1\"} 60000\n"));
    ck_assert_ptr_nonnull(strstr(text, "ktune_lat_bucket{method=\"Run\",le=\"+Inf\"} 80000\n"));
    ck_assert_ptr_nonnull(strstr(text, "ktune_lat_sum{method=\"Run\"} 60000\n"));
    free(text);
    kt_metrics_free(m);
}
END_TEST

typedef struct {
    kt_metric_t *runners;
    int calls;
    int n_keys;
} collect_state_t;

static void collect_runners(void *user, kt_metrics_t *m)
{
    (void)m;
    collect_state_t *st = user;
    st->calls++;
    kt_metrics_clear(st->runners);
    static const char *const keys[] = {"cpu", "cuda-sm90"};
    for (int i = 0; i < st->n_keys; i++)
        kt_metrics_set(st->runners, &keys[i], i + 1);
}

START_TEST(metrics_collector_refreshes_gauges_on_render)
{
    kt_metrics_t *m = kt_metrics_new(NULL);
    collect_state_t st = {.n_keys = 2};
    st.runners = kt_metrics_gauge(m, "runners", "Runners per key.", 1, LV("key"));
    ck_assert_int_eq(kt_metrics_add_collector(m, collect_runners, &st), 0);
    char *text = kt_metrics_render(m);
    ck_assert_int_eq(st.calls, 1);
    ck_assert_ptr_nonnull(strstr(text, "\nrunners{key=\"cpu\"} 1\nrunners{key=\"cuda-sm90\"} 2\n"));
    free(text);
    st.n_keys = 1;   /* the cuda runner left: its series must disappear */
    text = kt_metrics_render(m);
    ck_assert_int_eq(st.calls, 2);
    ck_assert_ptr_nonnull(strstr(text, "runners{key=\"cpu\"} 1\n"));
    ck_assert_ptr_null(strstr(text, "cuda-sm90"));
    free(text);
    kt_metrics_free(m);
}
END_TEST

/* --- the status page ----------------------------------------------------------------- */

#define HOSTILE_KEY "[\"conv2d\", \"<script>alert('x')</script>\" & more]"
#define HOSTILE_KEY_HTML                                                                      \
    "[&quot;conv2d&quot;, &quot;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot; &amp; " \
    "more]"

/* A snapshot as a tracker would make it; curve of n_curve points. */
static json_t *sample_snapshot(int n_curve)
{
    json_t *curve = json_array();
    for (int i = 0; i < n_curve; i++)
        json_array_append_new(curve, json_pack("[i, f]", 64 * (i + 1), 0.004 / (i + 1)));
    json_t *snap = json_pack(
        "{s:s, s:f, s:[{s:s, s:s, s:s, s:s, s:s,"
        " s:[{s:i, s:s, s:f, s:f, s:f, s:f, s:i, s:s},"
        "    {s:i, s:s, s:f, s:n, s:n, s:i, s:s}],"
        " s:f, s:i, s:i, s:f, s:s, s:o}],"
        " s:[{s:s, s:s, s:s, s:i}], s:[{s:s, s:s, s:i, s:i}], s:[{s:s, s:i, s:i, s:i}]}",
        "version", "0.1.0", "uptime_s", 3723.0, "jobs", "id", "job-7", "state", "running",
        "target", "cuda", "strategy", "gradient", "policy", "sketch.xgb", "tasks", "id", 0,
        "workload_key", "[\"abc123\", [1, 56, 56, 64]]", "weight", 2.0, "flops", 1.2e9,
        "latency_s", 0.0015, "gflops", 800.0, "trials", 128, "status", "live", "id", 1,
        "workload_key", HOSTILE_KEY, "weight", 1.0, "latency_s", "gflops", "trials", 0,
        "status", "live", "estimated_latency_s", 0.003, "total_trials", 128, "budget", 1000,
        "elapsed_s", 42.0, "finish_message", "", "curve", curve, "runners", "address",
        "127.0.0.1:9300", "key", "cuda-sm90", "state", "busy", "in_flight", 1, "workers",
        "address", "127.0.0.1:9400", "state", "idle", "in_flight", 0, "slots", 8, "queue", "key",
        "cuda-sm90", "total", 2, "free", 1, "pending", 17);
    ck_assert_ptr_nonnull(snap);
    json_object_set_new(json_array_get(json_object_get(snap, "jobs"), 0), "search_params",
                        json_string("eps_greedy=0.1,model_label=<log>"));
    return snap;
}

/* Points in the first curve polyline of a page; -1 when there is none. */
static int polyline_points(const char *page)
{
    static const char tag[] = "<polyline class=\"curve\" points=\"";
    const char *p = strstr(page, tag);
    if (!p)
        return -1;
    p += strlen(tag);
    const char *end = strchr(p, '"');
    int n = 0;
    for (const char *q = p; q < end; q++)
        if (*q == ',')
            n++;
    return n;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Tasks show the origin of their best and the layers they stand for; a
 * store of thousands of jobs shows the most recent and says how many there
 * are. */
START_TEST(status_page_shows_task_layers_and_the_total_of_jobs)
{
    json_error_t jerr;
    json_t *snap = json_loads(
        "{\"jobs_total\": 5000, \"jobs\": [{\"id\": 5000, \"state\": \"done\", \"tasks\": "
        "[{\"id\": 0, \"workload_key\": \"k\", \"status\": \"live\", "
        "\"best_origin\": \"sibling\", \"desc\": \"conv0 + bn0 + relu0\"}, "
        "{\"id\": 1, \"workload_key\": \"k2\", \"status\": \"live\", \"best_origin\": null, "
        "\"desc\": \"\"}]}]}",
        0, &jerr);
    ck_assert_ptr_nonnull(snap);
    char *page = kt_http_status_page(snap, 5);
    ck_assert_ptr_nonnull(page);
    ck_assert_msg(strstr(page, "<th>Layers</th>") && strstr(page, "<td>conv0 + bn0 + relu0</td>"),
                  "%s", page);
    /* the origin of each task's best, "-" while it has none */
    ck_assert_msg(strstr(page, "<th>Best from</th><th>Layers</th>") &&
                      strstr(page, "<td>live</td><td>sibling</td>") &&
                      strstr(page, "<td>live</td><td>-</td>"),
                  "%s", page);
    ck_assert_msg(strstr(page, "5000 jobs") &&
                      strstr(page, "Showing the 1 most recent of 5000 jobs"),
                  "%s", page);
    free(page);
    json_decref(snap);
}
END_TEST

START_TEST(status_page_shows_tables_plot_and_escapes)
{
    json_t *snap = sample_snapshot(5);
    char *page = kt_http_status_page(snap, 5);
    ck_assert_ptr_nonnull(page);
    ck_assert_ptr_nonnull(strstr(page, "<meta http-equiv=\"refresh\" content=\"5\">"));
    ck_assert_ptr_nonnull(strstr(page, "<td>0</td><td class=\"key\">[&quot;abc123&quot;, [1, 56, "
                                       "56, 64]]</td><td class=\"num\">1.500</td><td "
                                       "class=\"num\">800.00</td><td class=\"num\">128</td><td "
                                       "class=\"num\">2</td><td>live</td>"));
    /* no measurement yet: latency and speed are "-" */
    ck_assert_ptr_nonnull(strstr(page, "<td>1</td><td class=\"key\">" HOSTILE_KEY_HTML
                                       "</td><td>-</td><td>-</td><td class=\"num\">0</td>"));
    ck_assert_ptr_null(strstr(page, "<script"));
    ck_assert_ptr_nonnull(strstr(page, "policy sketch.xgb &middot; search params "
                                       "eps_greedy=0.1,model_label=&lt;log&gt; &middot;"));
    ck_assert_ptr_nonnull(strstr(page, "Estimated total latency: 3.000 ms"));
    ck_assert_ptr_nonnull(strstr(page, "<td class=\"key\">127.0.0.1:9300</td><td>cuda-sm90</td>"
                                       "<td>busy</td><td class=\"num\">1</td>"));
    ck_assert_ptr_nonnull(strstr(page, "<td class=\"key\">127.0.0.1:9400</td><td>idle</td>"
                                       "<td class=\"num\">0</td><td class=\"num\">8</td>"));
    ck_assert_ptr_nonnull(strstr(page, "<td>cuda-sm90</td><td class=\"num\">2</td><td "
                                       "class=\"num\">1</td><td class=\"num\">17</td>"));
    ck_assert_ptr_nonnull(strstr(page, "<svg"));
    ck_assert_int_eq(polyline_points(page), 5);
    ck_assert_ptr_null(strstr(page, "no estimate yet"));
    free(page);
    json_decref(snap);
}
END_TEST

START_TEST(status_page_handles_short_and_odd_curves)
{
    /* one point: a polyline of one point plus a marker */
    json_t *snap = sample_snapshot(1);
    char *page = kt_http_status_page(snap, 0);
    ck_assert_int_eq(polyline_points(page), 1);
    ck_assert_ptr_nonnull(strstr(page, "<circle class=\"dot\""));
    ck_assert_ptr_null(strstr(page, "http-equiv"));
    free(page);
    json_decref(snap);

    /* empty curve: axes and a note, no polyline */
    snap = sample_snapshot(0);
    page = kt_http_status_page(snap, 5);
    ck_assert_int_eq(polyline_points(page), -1);
    ck_assert_ptr_nonnull(strstr(page, "no estimate yet"));
    ck_assert_int_eq(count_of(page, "<svg"), 1);
    free(page);

    /* null latencies (some task unmeasured) and malformed points are skipped */
    json_t *curve = json_object_get(json_array_get(json_object_get(snap, "jobs"), 0), "curve");
    json_array_append_new(curve, json_pack("[i, n]", 64));
    json_array_append_new(curve, json_pack("[i, f]", 128, 0.002));
    json_array_append_new(curve, json_string("junk"));
    json_array_append_new(curve, json_pack("[i, f]", 192, 0.001));
    page = kt_http_status_page(snap, 5);
    ck_assert_int_eq(polyline_points(page), 2);
    free(page);
    json_decref(snap);
}
END_TEST

START_TEST(status_page_tolerates_missing_and_mistyped_fields)
{
    char *page = kt_http_status_page(NULL, 5);
    ck_assert_ptr_nonnull(page);
    ck_assert_ptr_nonnull(strstr(page, "No jobs."));
    ck_assert_ptr_nonnull(strstr(page, "No runners registered."));
    ck_assert_ptr_nonnull(strstr(page, "Queue empty."));
    free(page);

    json_t *snap = json_pack("{s:i, s:[{s:[i, {s:[i]}], s:s, s:{}}], s:s, s:[s]}", "version", 3,
                             "jobs", "tasks", 7, "trials", 1, "state", "<b>\"x\"", "curve",
                             "runners", "nope", "queue", "junk");
    page = kt_http_status_page(snap, 5);
    ck_assert_ptr_nonnull(page);
    ck_assert_ptr_nonnull(strstr(page, "version 3"));
    ck_assert_ptr_nonnull(strstr(page, "st-bx\">&lt;b&gt;&quot;x&quot;</span>"));
    ck_assert_ptr_nonnull(strstr(page, "<td>-</td>"));
    ck_assert_ptr_nonnull(strstr(page, "no estimate yet"));
    free(page);
    json_decref(snap);
}
END_TEST

/* --- the server ------------------------------------------------------------------------------ */

typedef struct {
    json_t *snap;
    int fail;
    json_t *all;            /* when set: every job, the newest first, paged into "jobs" */
    kt_http_page_t last;    /* the page the server asked for last */
    int calls;
} provider_t;

static json_t *provide(void *user, const kt_http_page_t *page)
{
    provider_t *p = user;
    p->last = *page;
    p->calls++;
    if (p->fail) {
        kt_err_set(KT_ESTATE, "tracker state locked for <maintenance>");
        return NULL;
    }
    if (!p->all)
        return json_incref(p->snap);
    /* As a tracker does: only the page's jobs, and the count of all. */
    json_t *snap = json_copy(p->snap), *jobs = json_array();
    for (int64_t k = page->offset;
         k < page->offset + page->limit && k < (int64_t)json_array_size(p->all); k++)
        json_array_append(jobs, json_array_get(p->all, (size_t)k));
    json_object_set_new(snap, "jobs", jobs);
    json_object_set_new(snap, "jobs_total", json_integer((json_int_t)json_array_size(p->all)));
    return snap;
}

static kt_http_server_t *start_server(provider_t *p, kt_metrics_t *m)
{
    kt_http_config_t cfg = {.bind = "127.0.0.1:0", .metrics = m, .snapshot = provide,
                            .snapshot_user = p};
    kt_http_server_t *s = kt_http_server_start(&cfg);
    ck_assert_msg(s != NULL, "start: %s", kt_err_msg());
    ck_assert_int_gt(kt_http_server_port(s), 0);
    return s;
}

START_TEST(server_answers_every_route)
{
    kt_metrics_t *m = kt_metrics_new("ktune");
    kt_metric_t *c = kt_metrics_counter(m, "measurements_total", "Measurements.", 1, LV("error"));
    kt_metrics_add(c, LV("NO_ERROR"), 5);
    provider_t p = {.snap = sample_snapshot(4)};
    kt_http_server_t *s = start_server(&p, m);
    int port = kt_http_server_port(s);
    char v[256];

    resp_t r = http_do(port, "GET", "/healthz");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    resp_free(&r);

    r = http_do(port, "GET", "/metrics");
    ck_assert_int_eq(r.status, 200);
    ck_assert(header(&r, "Content-Type", v, sizeof v));
    ck_assert_str_eq(v, KT_METRICS_CONTENT_TYPE);
    char *want = kt_metrics_render(m);
    ck_assert_str_eq(r.body, want);
    free(want);
    resp_free(&r);

    r = http_do(port, "GET", "/api/status?pretty=1");
    ck_assert_int_eq(r.status, 200);
    ck_assert(header(&r, "Content-Type", v, sizeof v));
    ck_assert_str_eq(v, "application/json");
    json_t *got = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(got);
    ck_assert(json_equal(got, p.snap));
    json_decref(got);
    resp_free(&r);

    r = http_do(port, "GET", "/");
    ck_assert_int_eq(r.status, 200);
    ck_assert(header(&r, "Content-Type", v, sizeof v));
    ck_assert_str_eq(v, "text/html; charset=utf-8");
    ck_assert_ptr_nonnull(strstr(r.body, "<td class=\"num\">1.500</td><td class=\"num\">800.00</td>"));
    ck_assert_ptr_nonnull(strstr(r.body, HOSTILE_KEY_HTML));
    ck_assert_ptr_null(strstr(r.body, "<script"));
    ck_assert_ptr_nonnull(strstr(r.body, "<svg"));
    ck_assert_int_eq(polyline_points(r.body), 4);
    resp_free(&r);

    r = http_do(port, "GET", "/nope");
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    r = http_do(port, "POST", "/metrics");
    ck_assert_int_eq(r.status, 405);
    ck_assert(header(&r, "Allow", v, sizeof v));
    ck_assert_str_eq(v, "GET, HEAD");
    resp_free(&r);
    r = http_do(port, "DELETE", "/");
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);
    r = http_do(port, "HEAD", "/healthz");
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq((int)r.body_len, 0);
    ck_assert(header(&r, "Content-Length", v, sizeof v));
    ck_assert_str_eq(v, "3");
    resp_free(&r);

    kt_http_server_stop(s);
    json_decref(p.snap);
    kt_metrics_free(m);
}
END_TEST

/* Job ids shown on a page, in order, as "45,44,..." */
static void page_ids(const char *page, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = strstr(page, "<h3>Job "); p; p = strstr(p + 1, "<h3>Job ")) {
        int id = atoi(p + strlen("<h3>Job "));
        len += (size_t)snprintf(out + len, size - len, "%s%d", len ? "," : "", id);
        ck_assert_uint_lt(len, size);
    }
}

/* The ids of /api/status's "jobs", the same way. */
static void api_ids(const char *body, char *out, size_t size, json_int_t *total)
{
    json_t *got = json_loads(body, 0, NULL);
    ck_assert_msg(got != NULL, "%s", body);
    size_t len = 0, i;
    json_t *job;
    out[0] = '\0';
    json_array_foreach(json_object_get(got, "jobs"), i, job) {
        len += (size_t)snprintf(out + len, size - len, "%s%lld", len ? "," : "",
                                (long long)json_integer_value(json_object_get(job, "id")));
        ck_assert_uint_lt(len, size);
    }
    *total = json_integer_value(json_object_get(got, "jobs_total"));
    json_decref(got);
}

/* 45 jobs: / pages them 20 at a time, the newest first, with links to the
 * other pages; /api/status takes limit and offset; bad values are 400 with
 * the reason, and the provider is not asked for anything then. */
START_TEST(server_pages_the_jobs)
{
    provider_t p = {.snap = json_pack("{s:s}", "version", "t"), .all = json_array()};
    for (int id = 45; id >= 1; id--)
        json_array_append_new(p.all, json_pack("{s:i, s:s, s:[]}", "id", id, "state", "done",
                                               "tasks"));
    kt_http_server_t *s = start_server(&p, NULL);
    int port = kt_http_server_port(s);
    char ids[512];

    resp_t r = http_do(port, "GET", "/");
    ck_assert_int_eq(r.status, 200);
    ck_assert(p.last.offset == 0 && p.last.limit == KT_HTTP_PAGE_SIZE);
    page_ids(r.body, ids, sizeof ids);
    ck_assert_str_eq(ids, "45,44,43,42,41,40,39,38,37,36,35,34,33,32,31,30,29,28,27,26");
    ck_assert_msg(strstr(r.body, "45 jobs") && strstr(r.body, "Showing the 20 most recent of 45") &&
                      strstr(r.body, "page 1 of 3") && strstr(r.body, "href=\"/?page=2\"") &&
                      strstr(r.body, "href=\"/?page=3\">oldest"),
                  "%s", r.body);
    resp_free(&r);

    r = http_do(port, "GET", "/?page=2");
    ck_assert_int_eq(r.status, 200);
    page_ids(r.body, ids, sizeof ids);
    ck_assert_str_eq(ids, "25,24,23,22,21,20,19,18,17,16,15,14,13,12,11,10,9,8,7,6");
    ck_assert_msg(strstr(r.body, "href=\"/?page=1\"") && strstr(r.body, "href=\"/?page=3\"") &&
                      strstr(r.body, "Showing jobs 21 to 40 of 45"),
                  "%s", r.body);
    resp_free(&r);

    r = http_do(port, "GET", "/?page=3");
    ck_assert_int_eq(r.status, 200);
    ck_assert(p.last.offset == 40 && p.last.limit == KT_HTTP_PAGE_SIZE);
    page_ids(r.body, ids, sizeof ids);
    ck_assert_str_eq(ids, "5,4,3,2,1");
    ck_assert_msg(strstr(r.body, "page 3 of 3") && strstr(r.body, "href=\"/?page=2\"") &&
                      !strstr(r.body, "older &raquo;"),
                  "%s", r.body);
    resp_free(&r);

    /* Past the end: no jobs, and the way back. */
    r = http_do(port, "GET", "/?page=7");
    ck_assert_int_eq(r.status, 200);
    page_ids(r.body, ids, sizeof ids);
    ck_assert_str_eq(ids, "");
    ck_assert_msg(strstr(r.body, "No jobs on page 7") && strstr(r.body, "href=\"/?page=3\""),
                  "%s", r.body);
    resp_free(&r);

    json_int_t total = 0;
    r = http_do(port, "GET", "/api/status");
    ck_assert_int_eq(r.status, 200);
    api_ids(r.body, ids, sizeof ids, &total);
    ck_assert_str_eq(ids, "45,44,43,42,41,40,39,38,37,36,35,34,33,32,31,30,29,28,27,26");
    ck_assert_int_eq(total, 45);
    resp_free(&r);
    r = http_do(port, "GET", "/api/status?limit=5&offset=40&pretty=1");
    ck_assert_int_eq(r.status, 200);
    ck_assert(p.last.offset == 40 && p.last.limit == 5);
    api_ids(r.body, ids, sizeof ids, &total);
    ck_assert_str_eq(ids, "5,4,3,2,1");
    ck_assert_int_eq(total, 45);
    resp_free(&r);
    r = http_do(port, "GET", "/api/status?offset=44&limit=100");
    ck_assert_int_eq(r.status, 200);
    api_ids(r.body, ids, sizeof ids, &total);
    ck_assert_str_eq(ids, "1");
    resp_free(&r);

    /* Bad values: 400 with what was wrong, before the provider is asked. */
    const struct {
        const char *path, *why;
    } bad[] = {
        {"/?page=0", "page: 0 is below 1"},
        {"/?page=-1", "page: '-1' is not a number"},
        {"/?page=", "page: empty"},
        {"/?page=2x", "page: '2x' is not a number"},
        {"/?page=%2B2", "page: '+2' is not a number"},
        {"/?page=99999999999999999999", "is not a number"},
        {"/?page", "malformed query"},
        {"/api/status?limit=0", "limit: 0 is below 1"},
        {"/api/status?limit=101", "limit: '101' is not a number in 1..100"},
        {"/api/status?limit=ten", "limit: 'ten'"},
        {"/api/status?offset=-5", "offset: '-5'"},
        {"/api/status?limit=5&offset=", "offset: empty"},
    };
    int calls = p.calls;
    for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
        r = http_do(port, "GET", bad[i].path);
        ck_assert_msg(r.status == 400 && r.body && strstr(r.body, bad[i].why), "%s: %d %s",
                      bad[i].path, r.status, r.body ? r.body : "");
        resp_free(&r);
    }
    ck_assert_int_eq(p.calls, calls);

    kt_http_server_stop(s);
    json_decref(p.all);
    json_decref(p.snap);
}
END_TEST

START_TEST(server_with_a_token_needs_the_bearer_everywhere_but_healthz)
{
    kt_metrics_t *m = kt_metrics_new("ktune");
    provider_t p = {.snap = sample_snapshot(2)};
    char secret[] = "s3cret-token";
    kt_http_config_t cfg = {.bind = "127.0.0.1:0", .metrics = m, .snapshot = provide,
                            .snapshot_user = &p, .token = secret};
    kt_http_server_t *s = kt_http_server_start(&cfg);
    ck_assert_msg(s != NULL, "start: %s", kt_err_msg());
    /* The server keeps its own copy: the caller may wipe its string. */
    memset(secret, 'x', strlen(secret));
    int port = kt_http_server_port(s);
    char v[256];

    resp_t r = http_do(port, "GET", "/healthz");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    const char *paths[] = {"/api/status", "/", "/metrics"};
    const char *wrong[] = {NULL, "", "Bearer", "Bearer ", "Bearer s3cret-toke", "Bearer s3cret-tokenn",
                           "bearer s3cret-token", "s3cret-token", "Basic s3cret-token",
                           "Bearer xxxxxxxxxxxx"};
    for (size_t i = 0; i < KT_ARRAY_LEN(paths); i++) {
        for (size_t k = 0; k < KT_ARRAY_LEN(wrong); k++) {
            r = http_do_auth(port, "GET", paths[i], wrong[k]);
            ck_assert_msg(r.status == 401, "%s with '%s': %d", paths[i],
                          wrong[k] ? wrong[k] : "(none)", r.status);
            ck_assert(header(&r, "WWW-Authenticate", v, sizeof v));
            ck_assert_ptr_null(strstr(r.body, "conv2d"));   /* nothing of the snapshot */
            resp_free(&r);
        }
        r = http_do_auth(port, "GET", paths[i], "Bearer s3cret-token");
        ck_assert_int_eq(r.status, 200);
        resp_free(&r);
    }
    r = http_do_auth(port, "GET", "/api/status", "Bearer s3cret-token");
    json_t *got = json_loads(r.body, 0, NULL);
    ck_assert(json_equal(got, p.snap));
    json_decref(got);
    resp_free(&r);
    kt_http_server_stop(s);
    json_decref(p.snap);
    kt_metrics_free(m);
}
END_TEST

START_TEST(server_default_address_is_loopback)
{
    /* The status lists every job's workloads: serving it wider is a choice. */
    ck_assert(kt_addr_is_loopback(KT_HTTP_DEFAULT_BIND));
}
END_TEST

START_TEST(server_reports_provider_failure_as_500)
{
    provider_t p = {.snap = sample_snapshot(2), .fail = 1};
    kt_http_server_t *s = start_server(&p, NULL);
    int port = kt_http_server_port(s);
    const char *paths[] = {"/", "/api/status"};
    for (int i = 0; i < 2; i++) {
        resp_t r = http_do(port, "GET", paths[i]);
        ck_assert_int_eq(r.status, 500);
        ck_assert_ptr_nonnull(strstr(r.body, "tracker state locked for <maintenance>"));
        resp_free(&r);
    }
    /* no registry: /metrics does not exist */
    resp_t r = http_do(port, "GET", "/metrics");
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    /* the server survives and recovers with the provider */
    p.fail = 0;
    r = http_do(port, "GET", "/api/status");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    kt_http_server_stop(s);
    json_decref(p.snap);
}
END_TEST

START_TEST(server_stops_and_starts_twice)
{
    provider_t p = {.snap = sample_snapshot(3)};
    for (int round = 0; round < 2; round++) {
        kt_http_server_t *s = start_server(&p, NULL);
        resp_t r = http_do(kt_http_server_port(s), "GET", "/healthz");
        ck_assert_int_eq(r.status, 200);
        resp_free(&r);
        kt_http_server_stop(s);
    }
    /* stop right after start, before the loop may have run */
    kt_http_server_stop(start_server(&p, NULL));
    kt_http_server_stop(NULL);
    json_decref(p.snap);
}
END_TEST

START_TEST(server_rejects_bad_or_busy_address)
{
    const char *bad[] = {"nocolon", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:80x", "[::1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kt_http_config_t cfg = {.bind = bad[i]};
        ck_assert_ptr_null(kt_http_server_start(&cfg));
        ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    }
    ck_assert_ptr_null(kt_http_server_start(NULL));

    provider_t p = {.snap = sample_snapshot(1)};
    kt_http_server_t *s = start_server(&p, NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kt_http_server_port(s));
    kt_http_config_t cfg = {.bind = addr};
    ck_assert_ptr_null(kt_http_server_start(&cfg));
    ck_assert_int_eq(kt_err_code(), KT_EIO);
    kt_http_server_stop(s);
    /* the port is free again after stop */
    kt_http_server_t *again = kt_http_server_start(&cfg);
    ck_assert_msg(again != NULL, "restart on %s: %s", addr, kt_err_msg());
    resp_t r = http_do(kt_http_server_port(again), "GET", "/");
    ck_assert_int_eq(r.status, 404);   /* no provider configured */
    resp_free(&r);
    kt_http_server_stop(again);
    json_decref(p.snap);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, metrics_render_exact_text);
    tcase_add_test(tc, metrics_values_use_shortest_exact_text);
    tcase_add_test(tc, metrics_reject_bad_names_and_updates);
    tcase_add_test(tc, metrics_concurrent_increments_sum);
    tcase_add_test(tc, metrics_collector_refreshes_gauges_on_render);
    tcase_add_test(tc, status_page_shows_tables_plot_and_escapes);
    tcase_add_test(tc, status_page_shows_task_layers_and_the_total_of_jobs);
    tcase_add_test(tc, status_page_handles_short_and_odd_curves);
    tcase_add_test(tc, status_page_tolerates_missing_and_mistyped_fields);
    tcase_add_test(tc, server_answers_every_route);
    tcase_add_test(tc, server_pages_the_jobs);
    tcase_add_test(tc, server_with_a_token_needs_the_bearer_everywhere_but_healthz);
    tcase_add_test(tc, server_default_address_is_loopback);
    tcase_add_test(tc, server_reports_provider_failure_as_500);
    tcase_add_test(tc, server_stops_and_starts_twice);
    tcase_add_test(tc, server_rejects_bad_or_busy_address);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
