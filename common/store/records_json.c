/* Records as JSON lines: export, import (format in store.h and RECORDS.md). */
#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "te/workload.h"
#include "util/util.h"
#include "util/err.h"

/* Compact, 17 significant digits (every double reads back exactly), keys in
 * insertion order. A state is embedded as JSON only when this encoding of it
 * reproduces its text, so the same flags must encode the line and check it. */
#define LINE_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))

/* The state as embedded JSON when that round-trips to the same text, else as
 * a string. NULL only on allocation failure or invalid UTF-8. */
static json_t *state_value(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, 0, &jerr);   /* objects and arrays only */
    if (v) {
        char *again = json_dumps(v, LINE_FLAGS);
        int same = again && strcmp(again, text) == 0;
        free(again);
        if (same)
            return v;
        json_decref(v);
    }
    return json_string(text);
}

static int set(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

/* The record's line, with its workload's canonical JSON as "workload" when
 * given (borrowed). */
static char *record_json(const kt_record_t *r, json_t *workload)
{
    if (!r || !r->workload_key || !r->target || !r->state_json || r->ncosts < 0 ||
        (r->ncosts > 0 && !r->costs)) {
        kt_err_set(KT_EINVAL, "record to JSON: incomplete record");
        return NULL;
    }
    json_t *o = json_object(), *costs = json_array();
    int bad = !o || !costs;
    for (int i = 0; !bad && i < r->ncosts; i++)
        bad = json_array_append_new(costs, json_real(r->costs[i])) != 0;
    char hash[17];
    snprintf(hash, sizeof hash, "%016" PRIx64, r->state_hash);
    /* mean_cost is derived from costs, so write the derivation, not the field. */
    json_t *mean = r->ncosts > 0 ? json_real(kt_store_mean(r->costs, r->ncosts)) : json_null();
    bad = bad || set(o, "workload_key", json_string(r->workload_key)) ||
          set(o, "target", json_string(r->target)) ||
          set(o, "state", state_value(r->state_json)) ||
          set(o, "state_hash", json_string(hash)) || set(o, "costs", json_incref(costs)) ||
          set(o, "mean_cost", json_incref(mean)) ||
          set(o, "error_code", json_integer(r->error_code)) ||
          set(o, "error_msg", json_string(r->error_msg ? r->error_msg : "")) ||
          set(o, "all_cost", json_real(r->all_cost)) ||
          set(o, "timestamp", json_real(r->timestamp)) ||
          set(o, "runner_key", json_string(r->runner_key ? r->runner_key : "")) ||
          set(o, "job_id", r->job_id > 0 ? json_integer(r->job_id) : json_null()) ||
          set(o, "runner_id", json_string(r->runner_id ? r->runner_id : "")) ||
          set(o, "runner_host", json_string(r->runner_host ? r->runner_host : ""));
    /* Only when known: a record without one exports as it did before origins. */
    const char *origin = kt_store_origin_name(r->origin);
    if (!bad && r->origin != KT_STORE_ORIGIN_UNKNOWN)
        bad = !origin || set(o, "origin", json_string(origin));
    if (!bad && workload)
        bad = set(o, "workload", json_incref(workload));
    json_decref(costs);
    json_decref(mean);
    char *text = bad ? NULL : json_dumps(o, LINE_FLAGS);
    json_decref(o);
    if (!text)
        kt_err_set(KT_EINVAL, "record %" PRId64 " to JSON: a string is not valid UTF-8 or a "
                              "number is not finite", r->id);
    return text;
}

char *kt_store_record_to_json(const kt_record_t *r)
{
    return record_json(r, NULL);
}

/* ---- Export ------------------------------------------------------------ */

typedef struct {
    FILE *out;
    int64_t n;
    json_t *wl;       /* workload key -> its canonical JSON, every stored workload */
} export_t;

/* Every stored workload's canonical JSON by key, read before the walk (the
 * store takes no call from inside its own callback); a record imported
 * without its workload has none. */
static int export_workloads(kt_store_t *s, json_t **out)
{
    *out = json_object();
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(kt_store_db(s), "SELECT key, canonical FROM workloads", -1, &st,
                                NULL);
    if (rc != SQLITE_OK)
        return kt_store_db_err(s, rc, "export: reading workloads");
    while (*out && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        json_t *v = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
        if (key && v)
            json_object_set_new(*out, key, v);
        else
            json_decref(v);
    }
    sqlite3_finalize(st);
    if (!*out)
        return kt_err_set(KT_ENOMEM, "export: out of memory");
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return kt_store_db_err(s, rc, "export: reading workloads");
    return 0;
}

static int export_one(const kt_record_t *r, void *ctx)
{
    export_t *e = ctx;
    char *line = record_json(r, json_object_get(e->wl, r->workload_key));
    if (!line)
        return kt_err_code();
    int ok = fputs(line, e->out) >= 0 && fputc('\n', e->out) != EOF;
    free(line);
    if (!ok)
        return kt_err_set(KT_EIO, "export: write failed");
    e->n++;
    return 0;
}

int kt_store_export_jsonl(kt_store_t *s, const kt_store_filter_t *f, FILE *out, int64_t *n)
{
    if (n)
        *n = 0;
    if (!out)
        return kt_err_set(KT_EINVAL, "export: no output stream");
    export_t e = {.out = out};
    int rc = kt_store_usable(s);
    if (rc == 0)
        rc = export_workloads(s, &e.wl);
    if (rc == 0)
        rc = kt_store_foreach_record(s, f, export_one, &e);
    json_decref(e.wl);
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = kt_err_set(KT_EIO, "export: write failed");
    if (n)
        *n = e.n;
    return rc;
}

/* ---- Import ------------------------------------------------------------ */

/* One parsed line: the record borrows from root, costs, state_owned and key_owned. */
typedef struct {
    json_t *root;
    double *costs;
    char *state_owned;
    char *key_owned;           /* the workload key as kt_workload_key() writes it */
    kt_workload_t *wl;         /* the line's "workload", when it has one */
    kt_record_t rec;
} parsed_t;

static void parsed_free(parsed_t *p)
{
    json_decref(p->root);
    free(p->costs);
    free(p->state_owned);
    free(p->key_owned);
    kt_workload_free(p->wl);
    memset(p, 0, sizeof *p);
}

/* Fill p from one line; 0, or -1 with the reason written to `why`. */
static int parse_line(const char *line, parsed_t *p, char *why, size_t whysz)
{
    memset(p, 0, sizeof *p);
    json_error_t jerr;
    p->root = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
    if (!p->root) {
        snprintf(why, whysz, "invalid JSON at column %d: %s", jerr.column, jerr.text);
        return -1;
    }
    json_t *o = p->root, *v;
    if (!json_is_object(o)) {
        snprintf(why, whysz, "not a JSON object");
        return -1;
    }
    kt_record_t *r = &p->rec;
    static const char *const required_strings[] = {"workload_key", "target", "state_hash"};
    for (size_t i = 0; i < 3; i++)
        if (!json_is_string(json_object_get(o, required_strings[i]))) {
            snprintf(why, whysz, "missing or non-string \"%s\"", required_strings[i]);
            return -1;
        }
    /* A record no query could name (a malformed key, an unknown target) is a
     * bad line, not a record stored for ever out of reach. */
    if (kt_workload_key_parse(json_string_value(json_object_get(o, "workload_key")),
                              &p->key_owned) != 0 ||
        kt_measure_target_parse(json_string_value(json_object_get(o, "target")), NULL) != 0) {
        snprintf(why, whysz, "\"%s\": %s", p->key_owned ? "target" : "workload_key",
                 kt_err_msg());
        kt_err_clear();
        return -1;
    }
    r->workload_key = p->key_owned;
    r->target = json_string_value(json_object_get(o, "target"));

    const char *hash = json_string_value(json_object_get(o, "state_hash"));
    size_t hexlen = strspn(hash, "0123456789abcdefABCDEF");
    if (strlen(hash) != 16 || hexlen != 16) {
        snprintf(why, whysz, "\"state_hash\" is not 16 hex digits");
        return -1;
    }
    r->state_hash = strtoull(hash, NULL, 16);

    v = json_object_get(o, "state");
    if (json_is_string(v)) {
        r->state_json = json_string_value(v);
    } else if (json_is_object(v) || json_is_array(v)) {
        if (!(p->state_owned = json_dumps(v, LINE_FLAGS))) {
            snprintf(why, whysz, "out of memory");
            return -1;
        }
        r->state_json = p->state_owned;
    } else {
        snprintf(why, whysz, "missing \"state\" (object, array or string)");
        return -1;
    }

    v = json_object_get(o, "costs");
    if (!json_is_array(v)) {
        snprintf(why, whysz, "missing or non-array \"costs\"");
        return -1;
    }
    size_t n = json_array_size(v);
    if (n > 0 && !(p->costs = malloc(n * sizeof *p->costs))) {
        snprintf(why, whysz, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i);
        if (!json_is_number(c)) {
            snprintf(why, whysz, "cost %zu is not a number", i);
            return -1;
        }
        p->costs[i] = json_number_value(c);
    }
    r->costs = p->costs;
    r->ncosts = (int)n;

    v = json_object_get(o, "error_code");
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= KT_MEASURE_NUM_ERRORS) {
        snprintf(why, whysz, "\"error_code\" is not an integer 0..%d", KT_MEASURE_NUM_ERRORS - 1);
        return -1;
    }
    r->error_code = (int)json_integer_value(v);

    static const char *const required_numbers[] = {"all_cost", "timestamp"};
    for (size_t i = 0; i < 2; i++)
        if (!json_is_number(json_object_get(o, required_numbers[i]))) {
            snprintf(why, whysz, "missing or non-number \"%s\"", required_numbers[i]);
            return -1;
        }
    r->all_cost = json_number_value(json_object_get(o, "all_cost"));
    r->timestamp = json_number_value(json_object_get(o, "timestamp"));

    static const char *const optional_strings[] = {"error_msg", "runner_key", "runner_id",
                                                   "runner_host"};
    const char **dst[] = {&r->error_msg, &r->runner_key, &r->runner_id, &r->runner_host};
    for (size_t i = 0; i < KT_ARRAY_LEN(dst); i++) {
        v = json_object_get(o, optional_strings[i]);
        if (v && !json_is_string(v)) {
            snprintf(why, whysz, "\"%s\" is not a string", optional_strings[i]);
            return -1;
        }
        *dst[i] = v ? json_string_value(v) : "";
    }

    v = json_object_get(o, "job_id");
    if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 1)) {
        snprintf(why, whysz, "\"job_id\" is neither null nor an integer >= 1");
        return -1;
    }
    r->job_id = json_is_integer(v) ? json_integer_value(v) : 0;

    v = json_object_get(o, "origin");
    if (v)
        r->origin = json_is_string(v) ? kt_store_origin_parse(json_string_value(v)) : -1;
    if (r->origin < 0) {
        snprintf(why, whysz, "\"origin\" is not " KT_STORE_ORIGIN_NAMES);
        return -1;
    }

    if (kt_store_record_check(r) != 0) {
        snprintf(why, whysz, "%s", kt_err_msg());
        kt_err_clear();
        return -1;
    }

    /* The workload itself, so that a store made by import can re-fit the
     * record for other shapes and train on it; it must be the key's. */
    v = json_object_get(o, "workload");
    if (v) {
        char *text = json_is_object(v) ? json_dumps(v, JSON_COMPACT) : NULL;
        p->wl = text ? kt_workload_parse(text) : NULL;
        free(text);
        if (!p->wl) {
            snprintf(why, whysz, "\"workload\" is not a workload: %s",
                     json_is_object(v) ? kt_err_msg() : "not an object");
            kt_err_clear();
            return -1;
        }
        if (strcmp(kt_workload_key(p->wl), r->workload_key) != 0) {
            snprintf(why, whysz, "\"workload\" is %.120s, not the workload of \"workload_key\"",
                     kt_workload_key(p->wl));
            return -1;
        }
    }
    return 0;
}

static void report_bad(kt_store_import_report_t *rep, long line, const char *why)
{
    rep->bad++;
    if (rep->nlisted < KT_STORE_IMPORT_MAX_BAD) {
        kt_store_bad_line_t *b = &rep->bad_lines[rep->nlisted++];
        b->line = line;
        snprintf(b->reason, sizeof b->reason, "%s", why);
    }
}

static int blank(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

int kt_store_import_jsonl(kt_store_t *s, FILE *in, kt_store_import_report_t *rep)
{
    kt_store_import_report_t local;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    int rc = kt_store_usable(s);
    if (rc != 0)
        return rc;
    if (!in)
        return kt_err_set(KT_EINVAL, "import: no input stream");

    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int in_tx = 0, in_batch = 0;
    int64_t pending_new = 0, pending_dup = 0;   /* counted once their batch commits */
    char why[sizeof rep->bad_lines[0].reason];
    /* An export writes a workload's records together: its workload is
     * stored once per run of them, not once per line (the same canonical
     * text, so the same key: put again, it would change nothing). */
    char *put_text = NULL;

    while ((len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        int had_newline = len > 0 && line[len - 1] == '\n';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (strlen(line) != (size_t)len) {
            report_bad(rep, lineno, "contains a NUL byte");
            continue;
        }
        if (blank(line))
            continue;
        parsed_t p;
        if (parse_line(line, &p, why, sizeof why) != 0) {
            if (!had_newline) {
                size_t used = strlen(why);
                snprintf(why + used, sizeof why - used, " (last line, no newline: truncated?)");
            }
            report_bad(rep, lineno, why);
            parsed_free(&p);
            continue;
        }
        if (!in_tx) {
            if ((rc = kt_store_tx_begin(s)) != 0) {
                parsed_free(&p);
                break;
            }
            in_tx = 1;
        }
        if (p.wl && !(put_text && strcmp(put_text, kt_workload_json(p.wl)) == 0)) {
            rc = kt_store_put_workload(s, kt_workload_key(p.wl), kt_workload_json(p.wl),
                                       kt_workload_flops(p.wl));
            if (rc == KT_EINVAL) {
                /* another text under the same key: the store's stays */
                report_bad(rep, lineno, kt_err_msg());
                kt_err_clear();
                parsed_free(&p);
                rc = 0;
                continue;
            }
            free(put_text);
            put_text = rc == 0 ? kt_strdup(kt_workload_json(p.wl)) : NULL;
        }
        if (rc == 0)
            rc = kt_store_is_duplicate(s, &p.rec);
        if (rc == 1) {
            pending_dup++;
            rc = 0;
        } else if (rc == 0 && (rc = kt_store_insert_record(s, &p.rec)) == 0) {
            pending_new++;
        }
        parsed_free(&p);
        if (rc != 0) {
            kt_err_prefix("import: line %ld", lineno);
            break;
        }
        if (++in_batch == KT_STORE_IMPORT_BATCH) {
            in_tx = in_batch = 0;
            if ((rc = kt_store_tx_commit(s)) != 0)
                break;
            rep->imported += pending_new;
            rep->duplicates += pending_dup;
            pending_new = pending_dup = 0;
        }
    }
    free(line);
    free(put_text);
    if (rc == 0 && ferror(in))
        rc = kt_err_set(KT_EIO, "import: read error after line %ld", lineno);
    if (in_tx) {
        if (rc == 0) {
            rc = kt_store_tx_commit(s);
        } else {
            kt_store_tx_rollback(s);
        }
        if (rc == 0) {
            rep->imported += pending_new;
            rep->duplicates += pending_dup;
        }
    }
    return rc;
}
