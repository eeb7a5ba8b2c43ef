/* The local builder and runner the measuring benches share: candidates are
 * compiled with a generous timeout (a loaded machine compiles slowly) and
 * timed with one thread, `repeat` repeats of at least min_repeat_ms, by the
 * given timer (KT_RUNNER_TIMER_CPU on a shared machine). KT_BENCH_ARTIFACTS=DIR
 * keeps the compiled candidates in DIR, so a second run (another pass, the
 * same seed) builds none of them again. Exits with a
 * message naming `bench` when either cannot be made. The caller frees both
 * with kt_runner_free and kt_builder_free. kt_bench_state_line writes the
 * JSON lines of measured states that the benches keep (--cache, --dump);
 * kt_bench_bin_path finds the build tree's programs (ktune) for the benches
 * that run them. Header-only: benches are single files. */
#ifndef KT_BENCH_LOCAL_H
#define KT_BENCH_LOCAL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure/builder.h"
#include "measure/runner.h"
#include "model/model.h"
#include "sched/state.h"
#include "search/search.h"
#include "util/err.h"

/* A bench's --timer value; exits 2 naming `bench` for anything but wall or cpu. */
static inline int kt_bench_timer(const char *bench, const char *name)
{
    int t = kt_runner_timer_parse(name);
    if (t < 0) {
        fprintf(stderr, "%s: --timer is wall or cpu, not '%s'\n", bench, name ? name : "");
        exit(2);
    }
    return t;
}

/* A bench's --label value as KT_MODEL_LABEL_*; exits 2 naming `bench` for
 * anything but throughput, log or rank. */
static inline int kt_bench_label_option(const char *bench, const char *name)
{
    int label = kt_model_label_parse(name);
    if (label < 0) {
        fprintf(stderr, "%s: --label is throughput, log or rank\n", bench);
        exit(2);
    }
    return label;
}

/* A bench's --xgb value (kt_model_params_set list), checked against the
 * default parameters; exits 2 naming `bench` when it is refused. */
static inline const char *kt_bench_xgb_option(const char *bench, const char *list)
{
    kt_model_params_t check;
    kt_model_params_default(&check);
    if (kt_model_params_set(&check, list)) {
        fprintf(stderr, "%s: --xgb: %s\n", bench, kt_err_msg());
        exit(2);
    }
    return list;
}

/* A bench's --search value (kt_search_opts_set list), checked against the
 * default options; exits 2 naming `bench` when it is refused. */
static inline const char *kt_bench_search_option(const char *bench, const char *list)
{
    kt_search_opts_t check;
    kt_search_opts_default(&check);
    if (kt_search_opts_set(&check, list)) {
        fprintf(stderr, "%s: --search: %s\n", bench, kt_err_msg());
        exit(2);
    }
    return list;
}

static inline void kt_bench_local(const char *bench, int min_repeat_ms, int repeat, int timer,
                                  kt_builder_t **b, kt_runner_t **r)
{
    setenv("OMP_NUM_THREADS", "1", 1);
    kt_builder_opts_t bo;
    kt_builder_opts_default(&bo);
    bo.timeout = 60;
    const char *dir = getenv("KT_BENCH_ARTIFACTS");
    if (dir && *dir)
        bo.cache_dir = dir;
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.num_threads = 1;
    ro.timer = timer;
    ro.min_repeat_ms = min_repeat_ms;
    ro.repeat = repeat > 0 ? repeat : 1;
    ro.timeout = 20;
    if (!(*b = kt_builder_new(&bo)) || !(*r = kt_runner_new(&ro))) {
        fprintf(stderr, "%s: local builder and runner: %s\n", bench, kt_err_msg());
        exit(1);
    }
}

/* The build tree's binary `rel` ("cli/ktune") for a bench started as
 * `self` (argv[0]; benches live in <build>/bench), into out. */
static inline void kt_bench_bin_path(char *out, size_t cap, const char *self, const char *rel)
{
    char dir[2048];
    snprintf(dir, sizeof dir, "%.2000s", self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    snprintf(out, cap, "%.2000s/../%.200s", dir, rel);
}

/* One line to f: the object o (taken over, NULL accepted) with "state" set
 * to st's JSON; nothing is written when either cannot be made. */
static inline void kt_bench_state_line(FILE *f, json_t *o, const kt_dag_t *dag,
                                       const kt_sched_state_t *st)
{
    char *sj = kt_sched_state_to_json(st, dag);
    json_t *state = sj ? json_loads(sj, 0, NULL) : NULL;
    char *line = NULL;
    if (o && state && json_object_set_new(o, "state", state) == 0)
        line = json_dumps(o, JSON_COMPACT);
    else
        json_decref(state);
    if (line)
        fprintf(f, "%s\n", line);
    free(line);
    json_decref(o);
    free(sj);
}

#endif
