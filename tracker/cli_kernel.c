/* ktune kernel: sample schedules of a workload, print their loop nests and
 * C source, and verify them against the reference kernel. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "codegen/codegen.h"
#include "codegen/verify.h"
#include "feature/feature.h"
#include "sched/state.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#define ENTRY "ktune_kernel"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune kernel sample --workload <file-or-json> [--target cpu] [-n N]\n"
            "                           [--seed S] [--verify] [--print]\n"
            "       ktune kernel show --workload <file-or-json> (--state <json-or-file> | "
            "--reference)\n"
            "\n"
            "sample  draws N random schedules (states) of each workload from its sketches;\n"
            "        --print shows each loop nest, --verify compiles each and compares its\n"
            "        answers with the reference kernel (max relative error <= %g) and ends\n"
            "        with 'P passed, F failed' (exit 1 if any failed).\n"
            "show    prints the C source of one state (its JSON as printed by sample), or\n"
            "        of the naive reference kernel.\n"
            "features prints the cost-model features of one state\n"
            "        (ktune kernel features --help).\n"
            "measure builds and times one state or N random states on this machine\n"
            "        (ktune kernel measure --help).\n",
            KT_CODEGEN_MAX_REL_ERR);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ktune kernel: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'ktune kernel --help' for usage.\n");
    return 2;
}

typedef struct {
    const char *workload, *target, *state;
    long n;
    uint64_t seed;
    int verify, print, reference;
} opts_t;

static int parse_long(const char *s, long min, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

/* Options shared by both subcommands; returns 0, or the exit status. */
static int parse_opts(int argc, char **argv, int sample, opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->target = "cpu";
    o->n = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if (strcmp(a, "--workload") == 0 || strcmp(a, "-w") == 0) {
            o->workload = v;
        } else if (sample && strcmp(a, "--target") == 0) {
            o->target = v;
        } else if (sample && strcmp(a, "-n") == 0) {
            if (v && parse_long(v, 1, &o->n))
                return usage_error("-n needs a positive integer, not '%s'", v);
        } else if (sample && strcmp(a, "--seed") == 0) {
            long s = 0;
            if (v && parse_long(v, 0, &s))
                return usage_error("--seed needs a non-negative integer, not '%s'", v);
            o->seed = (uint64_t)s;
        } else if (!sample && strcmp(a, "--state") == 0) {
            o->state = v;
        } else {
            takes = 0;
            if (sample && strcmp(a, "--verify") == 0)
                o->verify = 1;
            else if (sample && strcmp(a, "--print") == 0)
                o->print = 1;
            else if (!sample && strcmp(a, "--reference") == 0)
                o->reference = 1;
            else
                return usage_error("unknown option '%s'", a);
        }
        if (takes) {
            if (!v)
                return usage_error("%s needs a value", a);
            i++;
        }
    }
    if (!o->workload)
        return usage_error("%s", "--workload is required");
    if (strcmp(o->target, "cpu") != 0)
        return usage_error("target '%s' is not supported (only cpu)", o->target);
    if (!sample && !!o->state == o->reference)
        return usage_error("%s", "show needs exactly one of --state and --reference");
    return 0;
}

/* Sample and optionally verify n states of one workload; adds to the counts. */
static int sample_one(const kt_workload_t *w, const opts_t *o, kt_rng_t *rng, long *passed,
                      long *failed)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    if (kt_sched_sketches(dag, &p, &sk, &nsk) != 0 || nsk == 0) {
        if (nsk == 0 && kt_err_code() == KT_OK)
            kt_err_set(KT_EINTERNAL, "no sketch");
        return kt_cli_fail("generating sketches");
    }
    printf("workload %s\n%s (%d sketches, %.0f flops)\n", kt_workload_key(w),
           kt_workload_json(w), nsk, kt_workload_flops(w));
    kt_codegen_ref_t *ref = NULL;
    int rc = 0;
    if (o->verify) {
        ref = kt_codegen_ref_new(dag, o->seed);
        if (!ref)
            rc = kt_cli_fail("building the reference kernel");
    }
    for (long i = 0; rc == 0 && i < o->n; i++) {
        int which = (int)kt_rng_below(rng, (uint64_t)nsk);
        kt_sched_state_t *st = kt_sched_sample(dag, &p, sk[which], rng);
        if (!st) {
            printf("state %ld: sketch %d: FAILED: sampling: %s\n", i, which, kt_err_msg());
            (*failed)++;
            continue;
        }
        char *json = kt_sched_state_to_json(st, dag);
        printf("state %ld: sketch %d: %016" PRIx64 " %s\n", i, which,
               kt_sched_state_hash(st, dag), json ? json : "?");
        free(json);
        if (o->print) {
            char *nest = kt_sched_state_print(dag, st);
            printf("%s", nest ? nest : "(cannot print the loop nest)\n");
            free(nest);
        }
        if (o->verify) {
            double err = 0;
            char *src = kt_codegen_emit_c(dag, st, ENTRY);
            int crc = src ? kt_codegen_ref_check(ref, src, ENTRY, &err) : KT_EINVAL;
            if (crc == 0) {
                printf("state %ld: ok (max relative error %.3g)\n", i, err);
                (*passed)++;
            } else {
                printf("state %ld: FAILED: %s\n", i, kt_err_msg());
                (*failed)++;
            }
            free(src);
        }
        fflush(stdout);
        kt_sched_state_free(st);
    }
    kt_codegen_ref_free(ref);
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    return rc;
}

static int cmd_sample(int argc, char **argv)
{
    opts_t o;
    int rc = parse_opts(argc, argv, 1, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kt_workload_t **ws;
    double *weights;
    int n;
    if (kt_workload_load(o.workload, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    kt_rng_t rng;
    kt_rng_seed(&rng, o.seed);
    long passed = 0, failed = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = sample_one(ws[i], &o, &rng, &passed, &failed);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    if (rc)
        return rc;
    if (o.verify)
        printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}

static int cmd_show(int argc, char **argv)
{
    opts_t o;
    int rc = parse_opts(argc, argv, 0, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kt_workload_t **ws;
    double *weights;
    int n;
    if (kt_workload_load(o.workload, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    char *src = NULL;
    if (n != 1) {
        kt_err_set(KT_EINVAL, "holds %d workloads; show takes one", n);
        rc = kt_cli_fail("--workload");
    } else if (o.reference) {
        src = kt_codegen_reference_c(kt_workload_dag(ws[0]), ENTRY);
        if (!src)
            rc = kt_cli_fail("reference kernel");
    } else {
        const char *p = o.state;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        char *text = *p == '{' ? kt_strdup(p) : kt_file_read(o.state, NULL);
        kt_sched_state_t *st = text ? kt_sched_state_from_json(text, kt_workload_dag(ws[0]), NULL)
                                    : NULL;
        free(text);
        if (!st)
            rc = kt_cli_fail("--state");
        else if (!(src = kt_codegen_emit_c(kt_workload_dag(ws[0]), st, ENTRY)))
            rc = kt_cli_fail("generating C");
        kt_sched_state_free(st);
    }
    if (src)
        fputs(src, stdout);
    free(src);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    return rc;
}

/* ktune kernel features --workload W --state S [--json]: the cost-model
 * features of one state, one row per stored buffer. */
static int cmd_features(int argc, char **argv)
{
    const char *wl = NULL, *state = NULL;
    int as_json = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            as_json = 1;
        } else if ((strcmp(argv[i], "--workload") == 0 || strcmp(argv[i], "-w") == 0) &&
                   i + 1 < argc) {
            wl = argv[++i];
        } else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            state = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: ktune kernel features --workload <file-or-json> --state <json-or-file> "
                   "[--json]\n\nprints the cost-model features of one state: one row per "
                   "buffer the loop nest stores\n(%d values; the nonzero ones by name, or all "
                   "as JSON).\n", KT_FEATURE_COUNT);
            return 0;
        } else {
            return usage_error("features: bad or incomplete option '%s'", argv[i]);
        }
    }
    if (!wl || !state)
        return usage_error("%s", "features needs --workload and --state");
    kt_workload_t **ws;
    double *weights;
    int n, rc = 0;
    if (kt_workload_load(wl, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    const kt_dag_t *dag = n == 1 ? kt_workload_dag(ws[0]) : NULL;
    const char *p = state;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = !dag ? NULL : *p == '{' ? kt_strdup(p) : kt_file_read(state, NULL);
    kt_sched_state_t *st = text ? kt_sched_state_from_json(text, dag, NULL) : NULL;
    kt_lower_t *L = st ? kt_lower(dag, st) : NULL;
    float *rows = NULL;
    uint32_t nrows = 0;
    int *rb = NULL;
    if (!dag) {
        kt_err_set(KT_EINVAL, "holds %d workloads; features takes one", n);
        rc = kt_cli_fail("--workload");
    } else if (!st) {
        rc = kt_cli_fail("--state");
    } else if (!L || kt_feature_extract_lower(dag, st, L, &rows, &nrows, &rb) != 0) {
        rc = kt_cli_fail("extracting features");
    }
    json_t *out = rc || !as_json ? NULL : json_pack("{s:i, s:[], s:[]}", "count", KT_FEATURE_COUNT,
                                                     "names", "rows");
    for (int f = 0; out && f < KT_FEATURE_COUNT; f++)
        json_array_append_new(json_object_get(out, "names"), json_string(kt_feature_name(f)));
    for (uint32_t r = 0; rc == 0 && r < nrows; r++) {
        const float *v = rows + (size_t)r * KT_FEATURE_COUNT;
        const kt_lower_buf_t *b = &L->bufs[rb[r]];
        json_t *vals = out ? json_array() : NULL;
        if (!out)
            printf("row %u: stores %s (stage %s)\n", r, b->label,
                   kt_dag_stage(dag, b->stage)->name);
        for (int f = 0; f < KT_FEATURE_COUNT; f++) {
            if (vals)
                json_array_append_new(vals, json_real(v[f]));
            else if (v[f] != 0)
                printf("  %-32s %.6g\n", kt_feature_name(f), v[f]);
        }
        if (out)
            json_array_append_new(json_object_get(out, "rows"),
                                  json_pack("{s:s, s:s, s:o}", "buffer", b->label, "stage",
                                            kt_dag_stage(dag, b->stage)->name, "values", vals));
    }
    if (out) {
        char *js = json_dumps(out, JSON_COMPACT);
        if (js)
            printf("%s\n", js);
        else
            rc = kt_cli_fail("printing JSON");
        free(js);
        json_decref(out);
    }
    free(rows);
    free(rb);
    kt_lower_free(L);
    kt_sched_state_free(st);
    free(text);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    return rc;
}

int kt_cli_kernel(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "sample") == 0)
        return cmd_sample(argc, argv);
    if (strcmp(argv[1], "show") == 0)
        return cmd_show(argc, argv);
    if (strcmp(argv[1], "features") == 0)
        return cmd_features(argc, argv);
    if (strcmp(argv[1], "measure") == 0)
        return kt_cli_kernel_measure(argc, argv);
    return usage_error("unknown subcommand '%s'", argv[1]);
}
