/* ktune kernel measure: build and time schedules of a workload on this
 * machine with the measurement module (isolated runner, reference check),
 * printing each candidate's mean cost, GFLOPS and error. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "measure/builder.h"
#include "measure/measurer.h"
#include "measure/runner.h"
#include "sched/state.h"
#include "search/search.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

static void measure_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune kernel measure --workload <file-or-json> [--target cpu]\n"
            "                            (--state <json-or-file> | -n N) [--seed S]\n"
            "                            [--number N] [--repeat N] [--min-repeat-ms N]\n"
            "                            [--threads N] [--timeout-ms N] [--no-check]\n"
            "                            [--timer wall|cpu]\n"
            "\n"
            "Builds one state (or N random states drawn from the workload's sketches),\n"
            "times each in an isolated child process as a runner does (one discarded\n"
            "warm-up, `number` runs per repeat, `repeat` repeats, number raised until a\n"
            "repeat lasts min-repeat-ms; defaults 3, 1, 100), checks its answers against\n"
            "the reference kernel unless --no-check, and prints per candidate its mean\n"
            "cost, GFLOPS and error code. --timer cpu times runs by CPU time, which\n"
            "leaves out time the kernel was preempted (a shared machine); it needs\n"
            "--threads 1.\n"
            "\n"
            "exit status: 0 every candidate measured without error; 1 some candidate\n"
            "failed (its error is printed) or the measurement could not run; 2 bad usage\n");
}

static int measure_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ktune kernel measure: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'ktune kernel measure --help' for usage.\n");
    return 2;
}

/* An integer option in min..max (kt_cli_parse_num): 0 or 2. */
static int int_arg(const char *name, const char *v, long min, long max, long *out)
{
    long long x = 0;
    if (kt_cli_parse_num("kernel measure", name, v, min, max, &x))
        return 2;
    *out = (long)x;
    return 0;
}

/* The states to measure: the one given, or n sampled from random sketches. */
static int pick_states(const kt_workload_t *w, const char *state, long n, uint64_t seed,
                       kt_sched_state_t ***out, int *count)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    if (state) {
        const char *p = state;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        char *text = *p == '{' ? kt_strdup(p) : kt_file_read(state, NULL);
        kt_sched_state_t *st = text ? kt_sched_state_from_json(text, dag, NULL) : NULL;
        free(text);
        if (!st)
            return kt_err_prefix("--state");
        if (!(*out = malloc(sizeof **out))) {
            kt_sched_state_free(st);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        (*out)[0] = st;
        *count = 1;
        return 0;
    }
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    if (kt_sched_sketches(dag, NULL, &sk, &nsk) != 0)
        return kt_err_prefix("sketches");
    int rc = 0;
    *count = 0;
    if (!(*out = calloc((size_t)n, sizeof **out)))
        rc = kt_err_set(KT_ENOMEM, "out of memory");
    kt_rng_t rng;
    kt_rng_seed(&rng, seed);
    for (long i = 0; rc == 0 && i < n; i++) {
        kt_sched_state_t *st =
            kt_sched_sample(dag, NULL, sk[kt_rng_below(&rng, (uint64_t)nsk)], &rng);
        if (!st)
            rc = kt_err_prefix("sampling a state");
        else
            (*out)[(*count)++] = st;
    }
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    return rc;
}

int kt_cli_kernel_measure(int argc, char **argv)
{
    const char *workload = NULL, *target = "cpu", *state = NULL;
    int timer = KT_RUNNER_TIMER_WALL;
    long n = 0, seed = 0, number = 0, repeat = 0, min_repeat_ms = 100, threads = 0,
         timeout_ms = 10000;
    int check = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            measure_usage(stdout);
            return 0;
        } else if (strcmp(a, "--no-check") == 0) {
            check = 0;
            continue;
        } else if (!v) {
            return measure_usage_error("%s needs a value (or is unknown)", a);
        } else if (strcmp(a, "--workload") == 0 || strcmp(a, "-w") == 0) {
            workload = v;
        } else if (strcmp(a, "--target") == 0) {
            target = v;
        } else if (strcmp(a, "--state") == 0) {
            state = v;
        } else if (strcmp(a, "-n") == 0) {
            rc = int_arg(a, v, 1, 100000, &n);
        } else if (strcmp(a, "--seed") == 0) {
            rc = int_arg(a, v, 0, LONG_MAX, &seed);
        } else if (strcmp(a, "--number") == 0) {
            rc = int_arg(a, v, 1, 1000000000, &number);
        } else if (strcmp(a, "--repeat") == 0) {
            rc = int_arg(a, v, 1, 1000000000, &repeat);
        } else if (strcmp(a, "--min-repeat-ms") == 0) {
            rc = int_arg(a, v, 0, 1000000000, &min_repeat_ms);
        } else if (strcmp(a, "--threads") == 0) {
            rc = int_arg(a, v, 1, 1024, &threads);
        } else if (strcmp(a, "--timer") == 0) {
            if ((timer = kt_runner_timer_parse(v)) < 0)
                return measure_usage_error("--timer must be wall or cpu, not '%s'", v);
        } else if (strcmp(a, "--timeout-ms") == 0) {
            rc = int_arg(a, v, 1, 1000000000, &timeout_ms);
        } else {
            return measure_usage_error("unknown option '%s'", a);
        }
        if (rc)
            return rc;
        i++;
    }
    if (!workload)
        return measure_usage_error("%s", "--workload is required");
    if (strcmp(target, "cpu") != 0)
        return measure_usage_error("target '%s' cannot be measured here (only cpu)", target);
    if (!state == !n)
        return measure_usage_error("%s", "give exactly one of --state and -n");

    kt_workload_t **ws = NULL;
    double *weights = NULL;
    int nw = 0;
    if (kt_workload_load(workload, &ws, &weights, &nw) != 0)
        return kt_cli_fail("--workload");
    int rc = 0, failed = 0, count = 0;
    kt_sched_state_t **states = NULL;
    kt_measure_result_t *res = NULL;
    kt_builder_t *b = NULL;
    kt_runner_t *r = NULL;
    kt_measurer_t *m = NULL;
    if (nw != 1) {
        kt_err_set(KT_EINVAL, "holds %d workloads; measure takes one", nw);
        rc = kt_cli_fail("--workload");
        goto out;
    }
    if (pick_states(ws[0], state, n, (uint64_t)seed, &states, &count) != 0) {
        rc = kt_cli_fail(NULL);
        goto out;
    }
    kt_builder_opts_t bo;
    kt_builder_opts_default(&bo);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.number = (int)number;
    ro.repeat = (int)repeat;
    ro.min_repeat_ms = (int)min_repeat_ms;
    ro.num_threads = (int)threads;
    ro.timer = timer;
    ro.timeout = (double)timeout_ms / 1000.0;
    ro.check_correctness = check;
    ro.seed = (uint64_t)seed;
    if (!(b = kt_builder_new(&bo)) || !(r = kt_runner_new(&ro)) ||
        !(m = kt_measurer_new(b, r, -1))) {
        rc = kt_cli_fail("measurement set-up");
        goto out;
    }
    if (!(res = calloc((size_t)count, sizeof *res))) {
        kt_err_set(KT_ENOMEM, "out of memory");
        rc = kt_cli_fail(NULL);
        goto out;
    }
    if (kt_search_measure_local(m, ws[0], states, count, res) < 0) {
        rc = kt_cli_fail("measuring");
        goto out;
    }
    double flops = kt_workload_flops(ws[0]);
    const kt_dag_t *dag = kt_workload_dag(ws[0]);
    for (int i = 0; i < count; i++) {
        printf("candidate %d: state %016llx: ", i,
               (unsigned long long)kt_sched_state_hash(states[i], dag));
        if (res[i].error_no == KT_MEASURE_NO_ERROR) {
            /* the spread of the repeats says how far the mean can be trusted */
            double lo, hi;
            kt_measure_result_range(&res[i], &lo, &hi);
            printf("mean %.6f ms, %.2f GFLOPS (number %d, %d repeat%s, %.6f..%.6f ms)\n",
                   res[i].mean * 1e3, flops / res[i].mean / 1e9, res[i].number, res[i].n_costs,
                   res[i].n_costs == 1 ? "" : "s", lo * 1e3, hi * 1e3);
        } else {
            failed++;
            printf("%s: %s\n", kt_measure_error_name(res[i].error_no),
                   res[i].error_msg ? res[i].error_msg : "");
        }
    }
    printf("%d measured, %d failed\n", count - failed, failed);
    rc = failed ? 1 : 0;
out:
    for (int i = 0; res && i < count; i++)
        kt_measure_result_clear(&res[i]);
    free(res);
    for (int i = 0; states && i < count; i++)
        kt_sched_state_free(states[i]);
    free(states);
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
    for (int i = 0; i < nw; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    return rc;
}
