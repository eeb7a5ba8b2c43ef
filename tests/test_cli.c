/*
 * Suite "cli": the ktune client's job commands as a user runs them.
 * `ktune tune` without --tracker (its own tracker, worker and runner as
 * child processes on 127.0.0.1) finishes a small job, prints the task
 * scheduler table and leaves no process or temporary file behind; run again,
 * or after Ctrl-C, it resumes from the store without measuring a state
 * twice and within the total budget; status, best and export read the store
 * file; bad input gives a message naming the cause and exit status 1 or 2.
 *
 * Each test runs in its own process (Check's fork mode), which becomes a
 * child subreaper: a daemon that ktune failed to stop would be re-parented
 * to it and is found by waitpid(-1). Nothing asserts how fast anything is.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "measure/nvrtc.h"
#include "rpc/rpc.h"
#include "service/jobs.h"
#include "sched/state.h"
#include "store/store.h"
#include "te/workload.h"
#include "util/rng.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_skip.h"

#include "kt_test_proc.h"
#include "kt_test_records.h"

/* Upper bound of one ktune run (the machine may be slow and busy). */
#define RUN_MS 240000
#define MATMUL "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}"

static void suite_setup(void) { kt_test_suite_dir("kt_cli_"); }

static void suite_teardown(void) { kt_test_suite_dir_remove(); }

static void test_setup(void)
{
    kt_test_make_dir();
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/tmp", kt_test_dir);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    /* Orphaned daemons come to this process, where the test sees them. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

typedef kt_test_proc_t run_t;

/* Start build-root binary `rel` with args, output to <dir>/<name>.out;
 * TMPDIR is <dir>/tmp so ktune's temporary files can be checked. */
static void start(run_t *r, const char *name, const char *rel, char *const args[])
{
    static char tmp_var[300];
    snprintf(tmp_var, sizeof tmp_var, "TMPDIR=%s/tmp", kt_test_dir);
    static const char *const drop[] = {"TMPDIR=", "KT_TOKEN_FILE=", NULL};
    char *add[] = {tmp_var, NULL};
    char file[64];
    snprintf(file, sizeof file, "%s.out", name);
    kt_test_spawn(r, file, 0, rel, args, drop, add);
}

static char *output(const run_t *r) { return kt_test_output(r); }

/* Wait for r to exit (SIGKILL after RUN_MS); its exit status, 128 + signal. */
static int finish(run_t *r)
{
    int st = 0;
    if (!kt_test_wait(r, RUN_MS, &st))
        ck_abort_msg("%s did not finish", r->log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Run ktune to the end; its exit status and output (caller frees). */
static int ktune(char *const args[], char **out)
{
    static int n;
    char name[32];
    snprintf(name, sizeof name, "ktune%d", n++);
    run_t r;
    start(&r, name, "cli/ktune", args);
    int rc = finish(&r);
    *out = output(&r);
    return rc;
}

/* No process left running (this process is their subreaper: a daemon
 * ktune did not stop would be our child now) and no file left in ktune's
 * TMPDIR. An orphan that is already dying (a timing child following its
 * runner) is reaped; one still alive after a grace period fails the test. */
static void assert_nothing_left(void)
{
    pid_t p = 0;
    char name[512] = "";
    for (int waited = 0; waited < 10000; waited += 20) {
        int st;
        p = waitpid(-1, &st, WNOHANG);
        if (p == -1 && errno == ECHILD)
            break;
        if (p == 0)
            kt_test_sleep_ms(20);
    }
    if (p == 0) {
        /* Name what is still running (the shell's parent is this process). */
        FILE *f = popen("ps -o pid=,comm= --ppid $PPID 2>/dev/null", "r");
        if (f) {
            size_t n = fread(name, 1, sizeof name - 1, f);
            name[n] = '\0';
            pclose(f);
        }
    }
    ck_assert_msg(p == -1 && errno == ECHILD, "a process was left running: %s", name);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/tmp", kt_test_dir);
    int removed = rmdir(tmp) == 0;
    if (!removed) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "ls -laR %s >&2", tmp);
        ck_assert_int_ge(system(cmd), 0);
    }
    ck_assert_msg(removed, "ktune left files in %s", tmp);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
}

typedef struct {
    int64_t n;
    int dups;
} hashes_t;

static int count_hash(const kt_record_t *r, void *ctx)
{
    (void)r;
    ((hashes_t *)ctx)->n++;
    return 0;
}

/* Records in the store, and how many state hashes appear more than once. */
static hashes_t store_records(const char *db)
{
    kt_store_t *s = kt_store_open(db, 0);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    hashes_t h = {0};
    ck_assert_int_eq(kt_store_foreach_record(s, NULL, count_hash, &h), 0);
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    for (size_t i = 0; i < l->n; i++)
        for (size_t k = i + 1; k < l->n; k++)
            h.dups += l->items[i].state_hash == l->items[k].state_hash &&
                      strcmp(l->items[i].workload_key, l->items[k].workload_key) == 0;
    kt_record_list_free(l);
    kt_store_close(s);
    return h;
}

/* The records of the store at db whose candidate reached a runner
 * (kt_test_records_timed). */
static int64_t store_records_timed(const char *db)
{
    kt_store_t *s = kt_store_open(db, 0);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_store_counts_t c;
    ck_assert_int_eq(kt_store_count_records(s, NULL, &c), 0);
    kt_store_close(s);
    return kt_test_records_timed(c.total, c.by_error);
}

static int count_lines(const char *path)
{
    char *s = kt_file_read(path, NULL);
    ck_assert_msg(s != NULL, "%s", path);
    int n = 0;
    for (char *p = s; *p; p++)
        n += *p == '\n';
    free(s);
    return n;
}

/* ---- Tests -------------------------------------------------------------------------------- */

START_TEST(cli_tune_embedded_finishes_and_read_commands_use_the_store)
{
    char db[256];
    snprintf(db, sizeof db, "%s/k.db", kt_test_dir);
    char *out = NULL;
    char *args[] = {"tune", "--workload", MATMUL, "--trials", "16", "--per-round", "8",
                    "--min-repeat-ms", "0", "--db", db, NULL};
    int rc = ktune(args, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "[ Task Scheduler ]") && strstr(out, "|  ID  | Latency (ms) |") &&
                      strstr(out, "Estimated total latency:") && strstr(out, "Job 1 done") &&
                      strstr(out, "Best kernels of job 1") && strstr(out, "| Origin   |") &&
                      strstr(out, "Best from: "),
                  "%s", out);
    free(out);
    assert_nothing_left();
    hashes_t h = store_records(db);
    ck_assert_int_eq(h.n, 16);
    ck_assert_int_eq(h.dups, 0);

    /* status: the list and one job's table, as text and JSON. */
    char *st_args[] = {"status", "--db", db, NULL};
    ck_assert_int_eq(ktune(st_args, &out), 0);
    ck_assert_msg(strstr(out, "STATE") && strstr(out, "done") && strstr(out, "sketch.xgb"), "%s",
                  out);
    free(out);
    char *st1_args[] = {"status", "1", "--db", db, "--json", NULL};
    ck_assert_int_eq(ktune(st1_args, &out), 0);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    ck_assert_msg(j != NULL, "%s: %s", jerr.text, out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "done");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "total_trials")), 16);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "budget")), 16);
    json_t *t0 = json_array_get(json_object_get(j, "tasks"), 0);
    ck_assert(json_number_value(json_object_get(t0, "latency_s")) > 0);
    double best_s = json_number_value(json_object_get(t0, "latency_s"));
    char origin[32] = "";
    const char *o0 = json_string_value(json_object_get(t0, "best_origin"));
    ck_assert_msg(o0 != NULL, "%s", out);
    snprintf(origin, sizeof origin, "%s", o0);
    json_decref(j);
    free(out);
    char *st1_text[] = {"status", "1", "--db", db, NULL};
    ck_assert_int_eq(ktune(st1_text, &out), 0);
    char want[64];
    snprintf(want, sizeof want, "Best from: %s 1 (tasks)", origin);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);

    /* best: the job's task and the workload (by its JSON) agree with status. */
    char *b_args[] = {"best", "--workload", MATMUL, "--db", db, "--json", NULL};
    ck_assert_int_eq(ktune(b_args, &out), 0);
    j = json_loads(out, 0, &jerr);
    ck_assert_msg(j != NULL, "%s", out);
    json_t *r0 = json_array_get(json_object_get(j, "records"), 0);
    ck_assert_double_eq_tol(json_number_value(json_object_get(r0, "mean_cost")), best_s,
                            best_s * 1e-9);
    /* status names the origin of that record */
    ck_assert_str_eq(json_string_value(json_object_get(r0, "origin")), origin);
    json_decref(j);
    free(out);
    /* a single workload is timed warm by default (a network is not) */
    char *opts = kt_test_job_options(db, 1);
    ck_assert_msg(opts && strstr(opts, "\"flush_weights\":false"), "%s", opts ? opts : "?");
    /* schedule transfer is on unless --no-transfer */
    ck_assert_msg(opts && strstr(opts, "\"transfer\":true"), "%s", opts ? opts : "?");
    free(opts);
    char *bj_args[] = {"best", "--job", "1", "--db", db, NULL};
    ck_assert_int_eq(ktune(bj_args, &out), 0);
    ck_assert_msg(strstr(out, "Latency (ms)") && strstr(out, "[64, 64]"), "%s", out);
    free(out);

    /* export: a compilable C file with its header, and the records. */
    char exp[256];
    snprintf(exp, sizeof exp, "%s/export", kt_test_dir);
    char *ec_args[] = {"export", "--job", "1", "--format", "c", "--out", exp, "--db", db, NULL};
    ck_assert_int_eq(ktune(ec_args, &out), 0);
    free(out);
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s/ktune_kernels.h", exp);
    char *h_text = kt_file_read(path, NULL);
    ck_assert_msg(h_text && strstr(h_text, "int ktune_task0(float **bufs);") &&
                      strstr(h_text, "int ktune_task0_packed(float **bufs);") &&
                      strstr(h_text, "int ktune_task0_pack(int i, const float *src, float *dst);") &&
                      strstr(h_text, "bufs[2] output C float32[64][64]"),
                  "%s", h_text ? h_text : "(none)");
    free(h_text);
    snprintf(cmd, sizeof cmd, "cc -std=c17 -O1 -fopenmp -c %s/ktune_task0.c -o %s/t0.o", exp,
             exp);
    ck_assert_int_eq(system(cmd), 0);
    char *ej_args[] = {"export", "--job", "1", "--format", "json", "--out", exp, "--db", db,
                       NULL};
    ck_assert_int_eq(ktune(ej_args, &out), 0);
    free(out);
    snprintf(path, sizeof path, "%s/job1.jsonl", exp);
    ck_assert_int_eq(count_lines(path), 16);
}
END_TEST

/* A FamilySeer policy through the embedded tracker: two matmul tasks of one
 * family share a model; the job finishes with every trial stored once.
 * --cache-flush and --flush-weights reach the job's measure options,
 * --no-transfer its stored options. */
START_TEST(cli_tune_with_a_family_policy_finishes)
{
    char db[256];
    snprintf(db, sizeof db, "%s/k.db", kt_test_dir);
    char *out = NULL;
    char *args[] = {"tune", "--workload",
                    "[" MATMUL ", {\"workload\": {\"op\":\"matmul\",\"M\":32,\"N\":48,"
                    "\"K\":64}, \"weight\": 2}]",
                    "--trials", "16", "--per-round", "4", "--policy", "sketch.xgb.family-op",
                    "--search-params", "evolutionary_search_population=256,model_label=log",
                    "--min-repeat-ms", "0", "--cache-flush", "--flush-weights", "--no-transfer",
                    "--db", db, NULL};
    int rc = ktune(args, &out);
    ck_assert_msg(rc == 0 && strstr(out, "Job 1 done"), "exit %d: %s", rc, out);
    free(out);
    assert_nothing_left();
    hashes_t h = store_records(db);
    ck_assert_int_eq(h.n, 16);
    ck_assert_int_eq(h.dups, 0);
    char *st_args[] = {"status", "--db", db, NULL};
    ck_assert_int_eq(ktune(st_args, &out), 0);
    ck_assert_msg(strstr(out, "sketch.xgb.family-op"), "%s", out);
    free(out);
    char *st1_args[] = {"status", "1", "--db", db, "--json", NULL};
    ck_assert_int_eq(ktune(st1_args, &out), 0);
    ck_assert_msg(strstr(out, "\"search_params\": \"evolutionary_search_population=256,"
                              "model_label=log\""),
                  "%s", out);
    free(out);
    /* the stored job's measure options carry both flushes */
    char *opts = kt_test_job_options(db, 1);
    ck_assert_msg(opts && strstr(opts, "\"enable_cpu_cache_flush\":true") &&
                      strstr(opts, "\"flush_weights\":true") && strstr(opts, "\"repeat\":3") &&
                      strstr(opts, "\"transfer\":false"),
                  "%s", opts ? opts : kt_err_msg());
    free(opts);
}
END_TEST

START_TEST(cli_tune_resumes_after_ctrl_c_without_measuring_twice)
{
    char db[256];
    snprintf(db, sizeof db, "%s/k.db", kt_test_dir);
    char *args[] = {"tune", "--workload", MATMUL, "--trials", "32", "--per-round", "8",
                    "--policy", "sketch.random", "--min-repeat-ms", "0", "--db", db, NULL};
    run_t r;
    start(&r, "first", "cli/ktune", args);
    /* Ctrl-C once the first round is stored. */
    int seen = 0;
    for (int waited = 0; waited < RUN_MS && !seen; waited += 50) {
        char *s = output(&r);
        seen = strstr(s, " 8/32 trials") != NULL;
        free(s);
        if (!seen)
            kt_test_sleep_ms(50);
    }
    ck_assert_msg(seen, "no round finished");
    ck_assert_int_eq(kill(r.pid, SIGINT), 0);
    int rc = finish(&r);
    char *out = output(&r);
    /* Exit 130 (a Ctrl-C) saying where the job stopped and how to go on;
     * the tracker it stopped itself is not "unreachable". */
    ck_assert_msg(rc == 130 && strstr(out, "interrupted") && strstr(out, "job 1 stopped at ") &&
                      strstr(out, " of 32 trials; run the same command again to resume") &&
                      !strstr(out, "cannot reach"),
                  "exit %d: %s", rc, out);
    free(out);
    assert_nothing_left();
    hashes_t first = store_records(db);
    ck_assert_int_ge(first.n, 8);
    ck_assert_int_lt(first.n, 32);

    /* Again: the unfinished job resumes and ends at its budget. */
    rc = ktune(args, &out);
    ck_assert_msg(rc == 0 && strstr(out, "Resuming job 1") && strstr(out, "Job 1 done"),
                  "exit %d: %s", rc, out);
    free(out);
    assert_nothing_left();
    hashes_t second = store_records(db);
    ck_assert_int_eq(second.n, 32);
    ck_assert_int_eq(second.dups, 0);

    /* And again: the stored records count; the budget is spent already,
     * which the tracker's answer says before the job ends, with the way on. */
    rc = ktune(args, &out);
    ck_assert_msg(rc == 0 && strstr(out, "Job 2 done") && strstr(out, "32/32 trials"),
                  "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "job 2: the store already holds 32 trials of these tasks, which "
                              "covers the budget of 32 trials") &&
                      strstr(out, "--more N"),
                  "%s", out);
    ck_assert_msg(strstr(out, "covers the budget") < strstr(out, "Job 2 done"), "%s", out);
    free(out);
    assert_nothing_left();
    ck_assert_int_eq(store_records(db).n, 32);

    /* --more 8: eight trials beyond the stored 32. */
    char *more_args[] = {"tune", "--workload", MATMUL, "--more", "8", "--per-round", "8",
                         "--policy", "sketch.random", "--min-repeat-ms", "0", "--db", db, NULL};
    rc = ktune(more_args, &out);
    ck_assert_msg(rc == 0 && strstr(out, "Job 3 done") && strstr(out, "40/40 trials") &&
                      strstr(out, "measures up to 8 more (budget 40 trials)"),
                  "exit %d: %s", rc, out);
    free(out);
    assert_nothing_left();
    hashes_t third = store_records(db);
    ck_assert_int_eq(third.n, 40);
    ck_assert_int_eq(third.dups, 0);

    /* Every record names its runner: the embedded one on 127.0.0.1. */
    char *cnt_args[] = {"records", "count", "--db", db, "--runner", "127.0.0.1", NULL};
    ck_assert_int_eq(ktune(cnt_args, &out), 0);
    char want[64];
    int64_t timed = store_records_timed(db);
    ck_assert_int_gt(timed, 0);
    snprintf(want, sizeof want, "records: %lld\n", (long long)timed);
    ck_assert_msg(strstr(out, want), "want %s: %s", want, out);
    free(out);
    char *none_args[] = {"records", "count", "--db", db, "--runner", "elsewhere", NULL};
    ck_assert_int_eq(ktune(none_args, &out), 0);
    ck_assert_msg(strstr(out, "records: 0\n"), "%s", out);
    free(out);
    char *both_args[] = {"tune", "--workload", MATMUL, "--more", "8", "--trials", "8", "--db",
                         db, NULL};
    ck_assert_int_eq(ktune(both_args, &out), 2);
    free(out);
}
END_TEST

/* The set of state hashes of db's records. */
static hashes_t store_hashes(const char *db, uint64_t *out, int cap)
{
    kt_store_t *s = kt_store_open(db, 0);
    ck_assert_msg(s != NULL, "%s", kt_err_msg());
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, NULL, &l), 0);
    hashes_t h = {.n = (int64_t)l->n};
    ck_assert_int_le((int)l->n, cap);
    for (size_t i = 0; i < l->n; i++)
        out[i] = l->items[i].state_hash;
    kt_record_list_free(l);
    kt_store_close(s);
    return h;
}

/* A distilled store keeps the best records, gives its space back, and a
 * later job still measures none of the states whose records it dropped. */
START_TEST(cli_distilled_store_never_measures_a_dropped_state_again)
{
    char db[256];
    snprintf(db, sizeof db, "%s/k.db", kt_test_dir);
    char *out = NULL;
    char *args[] = {"tune", "--workload", MATMUL, "--trials", "24", "--per-round", "8",
                    "--policy", "sketch.random", "--min-repeat-ms", "0", "--db", db, NULL};
    ck_assert_int_eq(ktune(args, &out), 0);
    free(out);
    uint64_t first[64], now[64];
    hashes_t h0 = store_hashes(db, first, 64);
    ck_assert_int_eq(h0.n, 24);

    char *dry[] = {"records", "distill", "--db", db, "--keep", "2", "--dry-run", NULL};
    ck_assert_int_eq(ktune(dry, &out), 0);
    ck_assert_msg(strstr(out, "would keep 2 of 24 records"), "%s", out);
    free(out);
    ck_assert_int_eq(store_records(db).n, 24);
    char *distill[] = {"records", "distill", "--db", db, "--keep", "2", NULL};
    ck_assert_int_eq(ktune(distill, &out), 0);
    ck_assert_msg(strstr(out, "kept 2 of 24 records") && strstr(out, "22 states newly"), "%s",
                  out);
    free(out);
    char *vacuum[] = {"records", "vacuum", "--db", db, NULL};
    ck_assert_int_eq(ktune(vacuum, &out), 0);
    ck_assert_msg(strstr(out, " MiB -> "), "%s", out);
    free(out);
    char *stats[] = {"records", "stats", "--db", db, "--json", NULL};
    ck_assert_int_eq(ktune(stats, &out), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_msg(j != NULL, "%s", out);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "records")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "distilled")), 22);
    json_decref(j);
    free(out);

    /* 16 more trials: 18 records, the two kept among them, no dropped state. */
    char *more[] = {"tune", "--workload", MATMUL, "--more", "16", "--per-round", "8",
                    "--policy", "sketch.random", "--min-repeat-ms", "0", "--db", db, NULL};
    ck_assert_int_eq(ktune(more, &out), 0);
    free(out);
    assert_nothing_left();
    hashes_t h1 = store_hashes(db, now, 64);
    ck_assert_int_eq(h1.n, 18);
    ck_assert_int_eq(store_records(db).dups, 0);
    int again = 0;
    for (int i = 0; i < h1.n; i++)
        for (int k = 0; k < h0.n; k++)
            again += now[i] == first[k];
    ck_assert_msg(again == 2, "%d of the new job's states were stored before distilling", again);
}
END_TEST

/* A cuda job's store (one task, one record of a sampled GPU state) exports
 * as .cu kernels and a header with their launches; NVRTC compiles them. */
START_TEST(cli_export_cuda_writes_kernels_and_launches)
{
    char db[256], exp[256];
    snprintf(db, sizeof db, "%s/cuda.db", kt_test_dir);
    snprintf(exp, sizeof exp, "%s/export-cuda", kt_test_dir);
    kt_workload_t *w = kt_workload_parse(MATMUL);
    ck_assert_ptr_nonnull(w);
    kt_sched_params_t p;
    kt_sched_params_default_gpu(&p);
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    ck_assert_int_eq(kt_sched_sketches(kt_workload_dag(w), &p, &sk, &nsk), 0);
    ck_assert_int_gt(nsk, 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 3);
    kt_sched_state_t *st = kt_sched_sample(kt_workload_dag(w), &p, sk[0], &rng);
    ck_assert_ptr_nonnull(st);
    char *json = kt_sched_state_to_json(st, kt_workload_dag(w));
    ck_assert_ptr_nonnull(json);

    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)), 0);
    kt_store_task_t task = {.index = 0, .workload_key = kt_workload_key(w), .weight = 1,
                            .target = "cuda"};
    kt_store_job_t job = {.created = kt_time_wall(), .state = "done", .target = "cuda",
                          .runner_key = "cuda", .strategy = "gradient", .policy = "sketch.xgb",
                          .options_json = "{\"num_measure_trials\":8}"};
    ck_assert_int_eq(kt_store_put_job(s, &job, &task, 1), 0);
    double cost = 1e-5;
    kt_record_t rec = {.workload_key = kt_workload_key(w), .target = "cuda", .state_json = json,
                       .state_hash = kt_sched_state_hash(st, kt_workload_dag(w)), .costs = &cost,
                       .ncosts = 1, .all_cost = 0.1, .timestamp = kt_time_wall(),
                       .runner_key = "cuda", .job_id = job.id};
    ck_assert_int_eq(kt_store_put_records(s, &rec, 1), 0);
    kt_store_close(s);

    char jid[32];
    snprintf(jid, sizeof jid, "%lld", (long long)job.id);
    char *args[] = {"export", "--job", jid, "--format", "cuda", "--out", exp, "--db", db, NULL};
    char *out = NULL;
    ck_assert_msg(ktune(args, &out) == 0, "%s", out);
    free(out);
    char path[512];
    snprintf(path, sizeof path, "%s/ktune_kernels.h", exp);
    size_t len = 0;
    char *h = kt_file_read(path, &len);
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "ktune_task0_k0<<<dim3("));
    ck_assert_ptr_nonnull(strstr(h, "static const ktune_launch_t ktune_task0_launches[]"));
    ck_assert_ptr_nonnull(strstr(h, "ktune_task0_WORKSPACE_BYTES"));
    free(h);
    snprintf(path, sizeof path, "%s/ktune_task0.cu", exp);
    char *cu = kt_file_read(path, &len);
    ck_assert_ptr_nonnull(cu);
    ck_assert_ptr_nonnull(strstr(cu, "__global__"));
#if KT_HAVE_CUDA
    kt_nvrtc_result_t r;
    ck_assert_msg(kt_nvrtc_compile(cu, NULL, NULL, 0, &r) == 0, "%s", kt_err_msg());
    ck_assert_ptr_nonnull(kt_nvrtc_result_kernel(&r, "ktune_task0_k0"));
    kt_nvrtc_result_clear(&r);
#else
    kt_fail_without_cuda("NVRTC compile of the exported kernels");
#endif
    free(cu);
    /* The same job as C is refused: its states are GPU schedules. */
    char *cargs[] = {"export", "--job", jid, "--format", "c", "--out", exp, "--db", db, NULL};
    ck_assert_int_eq(ktune(cargs, &out), 1);
    free(out);
    free(json);
    kt_sched_state_free(st);
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    kt_workload_free(w);
}
END_TEST

START_TEST(cli_bad_input_names_the_cause)
{
    char db[256], none[256];
    snprintf(db, sizeof db, "%s/empty.db", kt_test_dir);
    snprintf(none, sizeof none, "%s/missing.db", kt_test_dir);
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_store_close(s);
    struct {
        char *args[12];
        int rc;
        const char *msg;
    } cases[] = {
        {{"tune", NULL}, 2, "--onnx MODEL or --workload FILE|JSON"},
        {{"tune", "--network", "resnet-18", "--onnx", "m.onnx", NULL}, 2, "give one of"},
        {{"tune", "--workload", MATMUL, "--layout", "NCHW", NULL}, 2, "apply to networks"},
        {{"submit", "--onnx", "/nonexistent.onnx", "--tracker", "127.0.0.1:1", NULL}, 1,
         "/nonexistent.onnx"},
        {{"tune", "--workload", "{\"op\":\"matmul\",\"M\":8}", "--db", db, NULL}, 1,
         "field 'N' is missing"},
        {{"tune", "--workload", MATMUL, "--target", "tpu", NULL}, 2, "unknown --target"},
        {{"tune", "--workload", MATMUL, "--policy", "sketch.magic", NULL}, 2, "unknown --policy"},
        {{"tune", "--workload", MATMUL, "--trials", "0", NULL}, 2, "--trials"},
        {{"tune", "--workload", MATMUL, "--search-params", "eps_greedy=2", NULL}, 2,
         "--search-params: search: eps_greedy must be in [0, 1]"},
        {{"tune", "--workload", MATMUL, "--search-params", "nosuch=1", NULL}, 2,
         "unknown search parameter 'nosuch'"},
        {{"tune", "--workload", MATMUL, "--tracker", "127.0.0.1:1", NULL}, 1,
         "cannot reach the tracker at 127.0.0.1:1"},
        {{"status", "7", "--db", db, NULL}, 1, "no job 7"},
        {{"status", "--db", none, NULL}, 1, "no store at"},
        {{"status", "--db", db, "--tracker", "127.0.0.1:1", NULL}, 2, "not both"},
        {{"status", "x1", "--db", db, NULL}, 2, "job id"},
        {{"best", "--db", db, NULL}, 2, "--workload KEY or --job JOB"},
        {{"best", "--job", "3", "--db", db, NULL}, 1, "no job 3"},
        {{"export", "--job", "1", "--format", "pdf", "--out", kt_test_dir, "--db", db, NULL}, 2,
         "c, cuda or json"},
        {{"cancel", "1", NULL}, 2, "--tracker"},
        {{"watch", "1", "--tracker", "127.0.0.1:1", NULL}, 1, "cannot reach"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = ktune(cases[i].args, &out);
        ck_assert_msg(rc == cases[i].rc && strstr(out, cases[i].msg),
                      "case %zu (%s %s): exit %d, want %d and '%s': %s", i, cases[i].args[0],
                      cases[i].args[1] ? cases[i].args[1] : "", rc, cases[i].rc, cases[i].msg,
                      out);
        free(out);
    }
    char *out = NULL;
    char *help[] = {"--help", NULL};
    ck_assert_int_eq(ktune(help, &out), 0);
    ck_assert_msg(strstr(out, "exit status: 0 success; 1") && strstr(out, "tune"), "%s", out);
    free(out);
    assert_nothing_left();
}
END_TEST

/* One user's typo per case, in every command: an unknown or malformed value
 * (a workload that is neither a key nor JSON, a target, a number, an empty
 * path or address, a job the store lacks), an unknown flag, a stray
 * argument. Each exits 2 (bad usage) or 1 (the named thing is missing) with
 * a message naming the argument; the store's bytes stay as they were, and a
 * read command given a missing store creates none. */
START_TEST(cli_bad_arguments_are_refused_and_change_nothing)
{
    char db[256], none[256], dir[256];
    snprintf(db, sizeof db, "%s/one.db", kt_test_dir);
    snprintf(none, sizeof none, "%s/missing.db", kt_test_dir);
    snprintf(dir, sizeof dir, "%s/out", kt_test_dir);
    kt_workload_t *w = kt_workload_parse(MATMUL);
    ck_assert_ptr_nonnull(w);
    char key[256];
    snprintf(key, sizeof key, "%s", kt_workload_key(w));
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kt_store_put_workload(s, key, kt_workload_json(w), kt_workload_flops(w)), 0);
    kt_store_task_t task = {.index = 0, .workload_key = key, .weight = 1, .target = "cpu"};
    kt_store_job_t job = {.created = 1.0, .state = "done", .target = "cpu", .runner_key = "cpu",
                          .strategy = "gradient", .policy = "sketch.xgb",
                          .options_json = "{\"num_measure_trials\":1}"};
    ck_assert_int_eq(kt_store_put_job(s, &job, &task, 1), 0);
    double cost = 1e-5;
    kt_record_t rec = {.workload_key = key, .target = "cpu", .state_json = "{}",
                       .state_hash = 1, .costs = &cost, .ncosts = 1, .all_cost = 0.1,
                       .timestamp = 1.0, .runner_key = "cpu", .job_id = job.id};
    ck_assert_int_eq(kt_store_put_records(s, &rec, 1), 0);
    kt_store_close(s);
    kt_workload_free(w);
    char lines[256];
    snprintf(lines, sizeof lines, "%s/bad.jsonl", kt_test_dir);
    static const char bad_lines[] =
        "{\"workload_key\":\"w\",\"target\":\"cpu\",\"state\":\"s\",\"state_hash\":"
        "\"00000000000000aa\",\"costs\":[1],\"error_code\":0,\"all_cost\":1,\"timestamp\":1}\n";
    ck_assert_int_eq(kt_file_write(lines, bad_lines, strlen(bad_lines)), 0);
    size_t nbefore = 0;
    char *before = kt_file_read(db, &nbefore);
    ck_assert_ptr_nonnull(before);
    int cwd_db = access("ktune.db", F_OK) == 0;
    char T[] = "127.0.0.1:1";   /* no tracker: every case fails before calling it */
    struct {
        char *args[14];
        int rc;
        const char *msg;
    } cases[] = {
        /* best: the workload, the target, numbers, paths, flags */
        {{"best", "--workload", "garbage", "--db", db, "--json"}, 2,
         "ktune best: --workload: 'garbage' is neither a workload key [\"<hash>\", [shape], ...]"
         " as ktune prints it nor a workload's JSON"},
        {{"best", "--workload", "", "--db", db}, 2, "--workload: empty; expected a workload key"},
        {{"best", "--workload", "[\"abc\", 5]", "--db", db}, 2, "item 1 is not a shape"},
        {{"best", "--workload", "[{\"op\": \"matmul\"}]", "--db", db}, 2, "a list of workloads"},
        {{"best", "--workload", key, "--db", db, "--target", "gpu"}, 2,
         "unknown --target 'gpu' (cpu or cuda)"},
        {{"best", "--workload", key, "--db", db, "--top", "0"}, 2,
         "--top wants an integer in 1..10000, not '0'"},
        {{"best", "--workload", key, "--db", db, "--top", "3x"}, 2, "--top wants an integer"},
        {{"best", "--job", "-1", "--db", db}, 2, "--job wants a job id >= 1, not '-1'"},
        {{"best", "--workload", key, "--db", none}, 1, "no store at"},
        {{"best", "--workload", key, "--db", ""}, 2, "--db needs a value"},
        {{"best", "--workload", key, "--db", db, "extra"}, 2, "unexpected argument 'extra'"},
        {{"best", "--workload", key, "--db", db, "--bogus"}, 2, "bad option '--bogus'"},
        {{"best", "--job", "1", "--tracker", T, "--timeout", "0"}, 2, "--timeout"},
        {{"best", "--job", "1", "--tracker", ""}, 2, "--tracker needs a value"},
        {{"best", "--job", "1", "--tracker", T, "--token-file", ""}, 2,
         "--token-file needs a value"},
        /* records */
        {{"records", "count", "--db", db, "--workload", "garbage"}, 2,
         "ktune records: --workload: 'garbage' is neither a workload key"},
        {{"records", "export", "--db", db, "--target", "gpu"}, 2, "unknown --target 'gpu'"},
        {{"records", "count", "--db", db, "--job", "0"}, 2, "--job wants a job id"},
        {{"records", "count", "--db", db, "--job", "99"}, 1, "--job: no job 99 in"},
        {{"records", "export", "--db", db, "--job", "99"}, 1, "--job: no job 99 in"},
        {{"records", "count", "--db", none}, 1, "missing.db"},
        {{"records", "export", "--db", none}, 1, "missing.db"},
        {{"records", "export", "--db", db, "stray"}, 2, "unexpected argument 'stray'"},
        {{"records", "count", "--db", db, "--in", "x"}, 2, "--in does not apply here"},
        {{"records", "import", "--db", db, "--in", ""}, 2, "--in needs a value"},
        {{"records", "frob"}, 2, "unknown subcommand 'frob'"},
        {{"build", "--network-file", "x.json", "--name", "1 bad", "--out", dir}, 2,
         "--name: '1 bad' is not a C identifier"},
        {{"kernel", "sample", "--workload", MATMUL, "--hw", ""}, 2, "--hw needs a value"},
        {{"records", "distill", "--db", db, "--keep", "0"}, 2, "--keep wants an integer"},
        {{"records", "distill", "--db", db, "--keep", "two"}, 2, "not 'two'"},
        {{"records", "distill", "--db", db, "--workload", key}, 2,
         "--workload does not apply here"},
        {{"records", "distill", "--db", none}, 1, "missing.db"},
        {{"records", "vacuum", "--db", none}, 1, "missing.db"},
        {{"records", "vacuum", "--db", db, "--dry-run"}, 2, "--dry-run does not apply here"},
        {{"records", "stats", "--db", none}, 1, "missing.db"},
        {{"records", "stats", "--db", db, "--keep", "3"}, 2, "--keep does not apply here"},
        {{"records", "import", "--db", db, "--in", lines}, 1,
         "line 1: \"workload_key\": 'w' is not a workload key"},
        /* status, export, cancel, watch */
        {{"status", "1", "2", "--db", db}, 2, "unexpected argument '2'"},
        {{"status", "--db", none}, 1, "no store at"},
        {{"export", "--job", "1", "--format", "json", "--out", dir, "--db", db, "--target",
          "gpu"}, 2, "unknown --target 'gpu'"},
        {{"export", "--job", "99", "--format", "json", "--out", dir, "--db", db}, 1,
         "no job 99"},
        {{"export", "--job", "1", "--format", "c", "--out", "", "--db", db}, 2,
         "--out needs a value"},
        {{"export", "--job", "1", "--format", "c", "--out", dir, "--db", db, "--top", "2"}, 2,
         "bad option '--top'"},
        {{"cancel", "x", "--tracker", T}, 2, "JOB wants a job id >= 1, not 'x'"},
        {{"cancel", "1", "2", "--tracker", T}, 2, "unexpected argument '2'"},
        {{"watch", "0", "--tracker", T}, 2, "JOB wants a job id >= 1, not '0'"},
        {{"watch", "1", "2", "--tracker", T}, 2, "unexpected argument '2'"},
        {{"watch", "1"}, 2, "--tracker HOST:PORT is required"},
        /* tune, submit, tasks */
        {{"tune", "--workload", ""}, 2, "--workload needs a value"},
        {{"tune", "--workload", key, "--db", db}, 1, "this is a workload key"},
        {{"tune", "--workload", "nofile.json", "--db", db}, 1,
         "'nofile.json' is neither workload JSON (an object or a list) nor a readable file"},
        {{"tune", "--workload", MATMUL, "--seed", ""}, 2, "--seed wants a non-negative integer"},
        {{"tune", "--workload", MATMUL, "--seed", " -1"}, 2,
         "--seed wants a non-negative integer"},
        {{"tune", "--workload", MATMUL, "--key", ""}, 2, "--key '': a device key is"},
        {{"tune", "--workload", MATMUL, "--key", "a b"}, 2, "--key 'a b'"},
        {{"tune", "--workload", MATMUL, "--priority", "2000000000"}, 2,
         "--priority wants an integer in -1000000..1000000000"},
        {{"tune", "--workload", MATMUL, "--trials", "abc"}, 2, "--trials wants an integer"},
        {{"tune", "--workload", MATMUL, "--per-round", "-4"}, 2, "--per-round"},
        {{"tune", "--workload", MATMUL, "--strategy", "fastest"}, 2, "unknown --strategy"},
        {{"tune", "--workload", MATMUL, "stray"}, 2, "unexpected argument 'stray'"},
        {{"tune", "--workload", MATMUL, "--db", ""}, 2, "--db needs a value"},
        {{"submit", "--workload", MATMUL, "--tracker", ""}, 2, "--tracker needs a value"},
        {{"submit", "--workload", MATMUL, "--tracker", T, "--timeout", "soon"}, 2,
         "--timeout (milliseconds) wants an integer"},
        {{"tasks", "--network", ""}, 2, "--network needs a value"},
        {{"tasks", "--network", "resnet-18", "--batch", "0"}, 2, "--batch wants an integer"},
        {{"tasks", "--list", "stray"}, 2, "unexpected argument 'stray'"},
        {{"tasks", "--network", "resnet-18", "--out", ""}, 2, "--out needs a value"},
        /* build, run */
        {{"build", "--network", "resnet-18", "--out", dir, "--db", db, "--job", "99"}, 1,
         "--job: no job 99 in"},
        {{"build", "--network", "resnet-18", "--out", dir, "--db", db, "--job", "1", "--target",
          "cuda"}, 1, "job 1 tuned for cpu, not cuda"},
        {{"build", "--network", "resnet-18", "--out", dir, "--job", "1", "--db", none}, 1,
         "no store at"},
        {{"build", "--network", "resnet-18", "--out", dir, "--target", "cuda", "--arch",
          "sm_1"}, 2, "--arch: hw params: no preset 'sm_1'"},
        {{"build", "--network", "resnet-18", "--out", ""}, 2, "--out needs a value"},
        {{"build", "--network", "resnet-18", "--out", dir, "--name", ""}, 2,
         "--name needs a value"},
        {{"run", "--network", "resnet-18", "--threads", "0"}, 2, "--threads wants an integer"},
        {{"run", "--network", "resnet-18", "--output", ""}, 2, "--output needs a value"},
        {{"build", "--network", "resnet-18", "--out", dir, "--key", "a b"}, 2,
         "--key 'a b': a device key is"},
        {{"build", "--network", "resnet-18", "--out", dir, "--key", "cpu", "--job", "1"}, 2,
         "--job takes that job's records"},
        {{"build", "--network", "resnet-18", "--out", dir, "--transfer-trials", "4"}, 2,
         "--transfer-trials is the candidates --transfer times per task"},
        {{"build", "--network", "resnet-18", "--out", dir, "--transfer", "--transfer-trials",
          "0", "--tracker", "127.0.0.1:1"}, 2, "--transfer-trials wants an integer"},
        {{"build", "--network", "resnet-18", "--out", dir, "--transfer", "--target", "cuda"}, 2,
         "--transfer --target cuda checks its kernels on a GPU runner: give --tracker"},
        {{"build", "--network", "resnet-18", "--out", dir, "--transfer", "--job", "1"}, 2,
         "--transfer builds the tasks without a record: not with --job"},
        /* kernel */
        {{"kernel", "sample", "--workload", "garbage"}, 1, "'garbage' is neither workload JSON"},
        {{"kernel", "sample", "--workload", key}, 1, "this is a workload key"},
        {{"kernel", "sample", "--workload", MATMUL, "-n", "99999999999999999999"}, 2,
         "-n wants an integer in 1..1000000"},
        {{"kernel", "sample", "--workload", MATMUL, "--seed", "-1"}, 2, "--seed wants"},
        {{"kernel", "show", "--workload", MATMUL, "--reference", "--bogus"}, 2,
         "unknown option '--bogus'"},
        {{"kernel", "measure", "--workload", MATMUL, "-n", "2", "--threads", "0"}, 2,
         "--threads wants an integer in 1..1024"},
        {{"kernel", "measure", "--workload", MATMUL, "-n", "2", "--number", "1e3"}, 2,
         "--number wants an integer"},
        {{"kernel", "frob"}, 2, "unknown subcommand 'frob'"},
        /* queue, health, the command itself */
        {{"queue", "stray", "--tracker", T}, 2, "unexpected argument 'stray'"},
        {{"queue", "--bogus"}, 2, "bad option '--bogus'"},
        {{"queue"}, 2, "--tracker HOST:PORT is required"},
        {{"health", "--tracker", T, "--service", "db"}, 2,
         "--service is tracker, runner or worker, not 'db'"},
        {{"health", "--tracker", T, "--timeout", "-5"}, 2, "--timeout"},
        {{"health", "--tracker", T, "stray"}, 2, "unexpected argument 'stray'"},
        {{"frob"}, 2, "unknown command 'frob'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = ktune(cases[i].args, &out);
        ck_assert_msg(rc == cases[i].rc && strstr(out, cases[i].msg),
                      "case %zu (%s %s %s): exit %d, want %d and '%s': %s", i, cases[i].args[0],
                      cases[i].args[1] ? cases[i].args[1] : "",
                      cases[i].args[1] && cases[i].args[2] ? cases[i].args[2] : "", rc,
                      cases[i].rc, cases[i].msg, out);
        free(out);
    }
    size_t nafter = 0;
    char *after = kt_file_read(db, &nafter);
    ck_assert_ptr_nonnull(after);
    ck_assert_msg(nafter == nbefore && memcmp(before, after, nbefore) == 0,
                  "a refused command changed %s", db);
    free(before);
    free(after);
    ck_assert_msg(access(none, F_OK) != 0, "a read command created %s", none);
    ck_assert_int_eq(access("ktune.db", F_OK) == 0, cwd_db);
    ck_assert_msg(access(dir, F_OK) != 0, "a refused export or build created %s", dir);
    assert_nothing_left();
}
END_TEST

START_TEST(cli_kernel_measure_times_states_and_names_bad_input)
{
    char *out = NULL;
    char *two[] = {"kernel", "measure", "--workload", MATMUL, "-n", "2", "--seed", "3",
                   "--min-repeat-ms", "0", "--threads", "1", NULL};
    ck_assert_msg(ktune(two, &out) == 0, "%s", out);
    const char *at = out;
    int timed = 0;
    while ((at = strstr(at, "mean "))) {
        /* "mean M ms, G GFLOPS (number N, R repeats, LO..HI ms)": LO <= M <= HI */
        double mean, lo, hi;
        const char *spread = strstr(at, " repeat");
        ck_assert_msg(sscanf(at, "mean %lf ms", &mean) == 1 && spread &&
                          (spread = strchr(spread, ',')) &&
                          sscanf(spread, ", %lf..%lf ms)", &lo, &hi) == 2,
                      "%s", out);
        ck_assert_msg(lo <= mean && mean <= hi && lo > 0, "%s", out);
        timed++;
        at++;
    }
    ck_assert_msg(timed == 2 && strstr(out, "2 measured, 0 failed"), "%s", out);
    free(out);
    char *both[] = {"kernel", "measure", "--workload", MATMUL, NULL};
    ck_assert_int_eq(ktune(both, &out), 2);
    ck_assert_msg(strstr(out, "exactly one of --state and -n") != NULL, "%s", out);
    free(out);
    char *bad[] = {"kernel", "measure", "--workload", MATMUL, "--state", "{\"stages\":[]}",
                   NULL};
    ck_assert_int_eq(ktune(bad, &out), 1);
    ck_assert_msg(strstr(out, "--state") != NULL, "%s", out);
    free(out);
    assert_nothing_left();
}
END_TEST

/* A GPU state of MATMUL (4 blocks of 32 threads, 8192 bytes of shared memory). */
#define MATMUL_GPU_STATE                                                                     \
    "{\"launches\":[{\"block\":[32,1,1],\"grid\":[4,1,1],\"smem\":8192,\"stage\":\"C\"}],"  \
    "\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"      \
    "{\"cache_write\":true,\"kind\":\"tiled\",\"level\":3,\"name\":\"C\",\"smem\":[\"A\",\"B\"],"    \
    "\"tile\":[[2,2,2,4,2],[2,2,16,1,1],[2,16,2]],\"unroll\":512,\"vec\":2}],"              \
    "\"target\":\"cuda\",\"version\":1}"

START_TEST(cli_kernel_features_of_a_gpu_state_follow_the_target)
{
    char *out = NULL;
    char *gpu[] = {"kernel", "features", "--workload", MATMUL, "--state", MATMUL_GPU_STATE,
                   "--target", "cuda", "--arch", "sm_80", NULL};
    ck_assert_msg(ktune(gpu, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "row 1: stores A.shared") && strstr(out, "gpu.threads_per_block") &&
                      strstr(out, "gpu.smem_bytes"),
                  "%s", out);
    free(out);
    /* the launch exceeds a block limit set with --hw */
    char *small[] = {"kernel", "features", "--workload", MATMUL, "--state", MATMUL_GPU_STATE,
                     "--target", "cuda", "--hw", "max_shared_memory_per_block=4096", NULL};
    ck_assert_int_eq(ktune(small, &out), 1);
    ck_assert_msg(strstr(out, "shared memory") != NULL, "%s", out);
    free(out);
    char *cpu[] = {"kernel", "features", "--workload", MATMUL, "--state", MATMUL_GPU_STATE,
                   "--target", "cpu", NULL};
    ck_assert_int_eq(ktune(cpu, &out), 1);
    ck_assert_msg(strstr(out, "a cuda state, but --target cpu") != NULL, "%s", out);
    free(out);
    char *arch[] = {"kernel", "features", "--workload", MATMUL, "--state", MATMUL_GPU_STATE,
                    "--arch", "sm_80", NULL};
    ck_assert_int_eq(ktune(arch, &out), 2);
    ck_assert_msg(strstr(out, "--arch needs --target cuda") != NULL, "%s", out);
    free(out);
    assert_nothing_left();
}
END_TEST

/* The address a daemon started with --port-file F writes there, once it
 * listens (malloc'd, the newline cut). */
static char *wait_port_file(const char *port_file)
{
    char *addr = NULL;
    for (int waited = 0; waited < RUN_MS && !addr; waited += 20) {
        addr = kt_file_read(port_file, NULL);
        if (!addr)
            kt_test_sleep_ms(20);
    }
    ck_assert_ptr_nonnull(addr);
    addr[strcspn(addr, "\n")] = '\0';
    return addr;
}

START_TEST(cli_read_commands_against_a_tracker_need_its_token)
{
    char tok[256], db[256], port_file[256];
    snprintf(tok, sizeof tok, "%s/token", kt_test_dir);
    snprintf(db, sizeof db, "%s/t.db", kt_test_dir);
    snprintf(port_file, sizeof port_file, "%s/addr", kt_test_dir);
    ck_assert_int_eq(kt_file_write(tok, "cli-secret\n", 11), 0);
    /* Daemons refuse token files other users can read (docs/security.md). */
    ck_assert_int_eq(chmod(tok, 0600), 0);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--token-file", tok,
                     "--port-file", port_file, NULL};
    run_t tr;
    start(&tr, "tracker", "tracker/ktune-tracker", targs);
    char *addr = wait_port_file(port_file);
    char *out = NULL;
    char *no_tok[] = {"status", "--tracker", addr, NULL};
    ck_assert_int_eq(ktune(no_tok, &out), 1);
    ck_assert_msg(strstr(out, "UNAUTHENTICATED") && strstr(out, addr), "%s", out);
    free(out);
    char *with_tok[] = {"status", "--tracker", addr, "--token-file", tok, "--json", NULL};
    ck_assert_int_eq(ktune(with_tok, &out), 0);
    ck_assert_msg(strstr(out, "\"jobs\": []"), "%s", out);
    free(out);
    char *unknown[] = {"status", "4", "--tracker", addr, "--token-file", tok, NULL};
    ck_assert_int_eq(ktune(unknown, &out), 1);
    ck_assert_msg(strstr(out, "no job 4"), "%s", out);
    free(out);
    free(addr);
    kill(tr.pid, SIGTERM);
    ck_assert_int_eq(finish(&tr), 0);
    assert_nothing_left();
}
END_TEST

/* The origin of "best --json"'s record i, or NULL. */
static const char *json_origin(json_t *j, size_t i)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(j, "records"), i),
                                             "origin"));
}

/* ktune best shows what proposed each best record, from a store and from a
 * tracker alike: a transfer seed, the model, and "unknown" for a record
 * stored without one. */
START_TEST(cli_best_shows_the_origin_of_each_best)
{
    char db[256], port_file[256];
    snprintf(db, sizeof db, "%s/o.db", kt_test_dir);
    snprintf(port_file, sizeof port_file, "%s/addr", kt_test_dir);
    static const char *const json[] = {MATMUL, "{\"op\":\"matmul\",\"M\":32,\"N\":64,\"K\":64}"};
    kt_workload_t *w[2];
    kt_store_task_t task[2];
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(w[i] = kt_workload_parse(json[i]));
        ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w[i]), kt_workload_json(w[i]),
                                               kt_workload_flops(w[i])),
                         0);
        task[i] = (kt_store_task_t){.index = i, .workload_key = kt_workload_key(w[i]),
                                    .weight = 1, .target = "cpu"};
    }
    kt_store_job_t job = {.created = 1.0, .state = "done", .target = "cpu", .runner_key = "cpu",
                          .strategy = "gradient", .policy = "sketch.xgb",
                          .options_json = "{\"num_measure_trials\":3}"};
    ck_assert_int_eq(kt_store_put_job(s, &job, task, 2), 0);
    double cost[] = {1e-5, 2e-5, 3e-5};
    kt_record_t rec[3];
    for (int i = 0; i < 3; i++)
        rec[i] = (kt_record_t){.workload_key = kt_workload_key(w[i / 2]), .target = "cpu",
                               .state_json = "{}", .state_hash = (uint64_t)i + 1,
                               .costs = &cost[i], .ncosts = 1, .all_cost = 0.1,
                               .timestamp = 1.0, .runner_key = "cpu", .job_id = job.id};
    rec[0].origin = KT_STORE_ORIGIN_TRANSFER;   /* the first workload's best */
    rec[1].origin = KT_STORE_ORIGIN_MODEL;      /* its second */
    ck_assert_int_eq(kt_store_put_records(s, rec, 3), 0);   /* rec[2]: unknown */
    kt_store_close(s);

    char *out = NULL;
    char *text[] = {"best", "--job", "1", "--db", db, NULL};
    ck_assert_int_eq(ktune(text, &out), 0);
    ck_assert_msg(strstr(out, "Target  Origin    Workload key") &&
                      strstr(out, "cpu     transfer  [") && strstr(out, "cpu     unknown   [") &&
                      !strstr(out, "model"),
                  "%s", out);
    free(out);

    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--port-file",
                     port_file, NULL};
    run_t tr;
    start(&tr, "tracker", "tracker/ktune-tracker", targs);
    char *addr = wait_port_file(port_file);
    for (int remote = 0; remote < 2; remote++) {
        char *top[] = {"best", "--workload", MATMUL, "--top", "2", remote ? "--tracker" : "--db",
                       remote ? addr : db, "--json", NULL};
        ck_assert_int_eq(ktune(top, &out), 0);
        json_t *j = json_loads(out, 0, NULL);
        ck_assert_msg(j && json_origin(j, 0) && json_origin(j, 1), "%s", out);
        ck_assert_str_eq(json_origin(j, 0), "transfer");
        ck_assert_str_eq(json_origin(j, 1), "model");
        json_decref(j);
        free(out);
        char *job_best[] = {"best", "--job", "1", remote ? "--tracker" : "--db",
                            remote ? addr : db, "--json", NULL};
        ck_assert_int_eq(ktune(job_best, &out), 0);
        j = json_loads(out, 0, NULL);
        ck_assert_msg(j && json_origin(j, 0) && json_origin(j, 1), "%s", out);
        ck_assert_str_eq(json_origin(j, 0), "transfer");
        ck_assert_str_eq(json_origin(j, 1), "unknown");
        json_decref(j);
        free(out);
        /* status: the origin of each task's best, as JSON and counted */
        char *st_json[] = {"status", "1", remote ? "--tracker" : "--db", remote ? addr : db,
                           "--json", NULL};
        ck_assert_int_eq(ktune(st_json, &out), 0);
        j = json_loads(out, 0, NULL);
        json_t *tasks = json_object_get(j, "tasks");
        ck_assert_msg(json_array_size(tasks) == 2, "%s", out);
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(tasks, 0),
                                                           "best_origin")), "transfer");
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(tasks, 1),
                                                           "best_origin")), "unknown");
        json_decref(j);
        free(out);
        char *st_text[] = {"status", "1", remote ? "--tracker" : "--db", remote ? addr : db,
                           NULL};
        ck_assert_int_eq(ktune(st_text, &out), 0);
        ck_assert_msg(strstr(out, "Best from: transfer 1, unknown 1 (tasks)"), "%s", out);
        free(out);
    }
    free(addr);
    kill(tr.pid, SIGTERM);
    ck_assert_int_eq(finish(&tr), 0);
    for (int i = 0; i < 2; i++)
        kt_workload_free(w[i]);
    assert_nothing_left();
}
END_TEST

/* A tracker that answers SubmitJob only: the first call of every two with
 * UNAVAILABLE (an answer lost, as a stopping tracker's calls end), the
 * second with job 7; it keeps the request ids it was sent. */
typedef struct {
    atomic_int calls;
    char rid[8][KT_JOBS_REQUEST_ID_MAX + 1];
} lossy_tracker_t;

static int lossy_submit(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                        void *ud)
{
    lossy_tracker_t *t = ud;
    const Ktune__V1__SubmitJobRequest *in = (const Ktune__V1__SubmitJobRequest *)req;
    int n = atomic_fetch_add(&t->calls, 1);
    if (n < 8)
        snprintf(t->rid[n], sizeof t->rid[n], "%s", in->request_id ? in->request_id : "");
    if (n % 2 == 0)
        return kt_rpc_call_fail(call, KT_RPC_UNAVAILABLE, "the answer was lost");
    ((Ktune__V1__SubmitJobResponse *)resp)->job_id = 7;
    /* the answer of a tracker that made the job at the lost call */
    ((Ktune__V1__SubmitJobResponse *)resp)->existing = 1;
    return KT_RPC_OK;
}

/* `ktune submit` sends a request id of its own in every run (32 random hex
 * digits, or --request-id's) and the same one when it retries, so that a
 * tracker that made the job before the answer was lost answers that job
 * instead of making a second. */
START_TEST(cli_submit_sends_a_request_id_per_run_and_the_same_on_its_retry)
{
    lossy_tracker_t lt;
    memset(&lt, 0, sizeof lt);
    kt_rpc_server_opts_t so = {.listen = "127.0.0.1:0", .threads = 2};
    kt_rpc_server_t *srv = kt_rpc_server_new(&so);
    ck_assert_ptr_nonnull(srv);
    ck_assert_int_eq(kt_rpc_server_add_unary(srv, "/ktune.v1.Tracker/SubmitJob",
                                             &ktune__v1__submit_job_request__descriptor,
                                             &ktune__v1__submit_job_response__descriptor,
                                             lossy_submit, &lt),
                     0);
    ck_assert_int_eq(kt_rpc_server_start(srv), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kt_rpc_server_port(srv));
    char *out = NULL;
    char *plain[] = {"submit", "--tracker", addr, "--workload", MATMUL, NULL};
    char *named[] = {"submit", "--tracker", addr, "--workload", MATMUL, "--request-id",
                     "nightly-42", NULL};
    for (int run = 0; run < 3; run++) {
        ck_assert_int_eq(ktune(run < 2 ? plain : named, &out), 0);
        ck_assert_msg(strcmp(out, "7\n") == 0, "run %d: %s", run, out);
        free(out);
        ck_assert_int_eq(atomic_load(&lt.calls), 2 * (run + 1));
        const char *a = lt.rid[2 * run], *b = lt.rid[2 * run + 1];
        ck_assert_msg(strcmp(a, b) == 0, "run %d: retried as '%s', sent as '%s'", run, b, a);
        if (run < 2)
            ck_assert_msg(strlen(a) == 32 && strspn(a, "0123456789abcdef") == 32, "'%s'", a);
        else
            ck_assert_str_eq(a, "nightly-42");
    }
    ck_assert_str_ne(lt.rid[0], lt.rid[2]);
    /* One of bad form is refused before any call. */
    char *bad[] = {"submit", "--tracker", addr, "--workload", MATMUL, "--request-id", "a b",
                   NULL};
    ck_assert_int_eq(ktune(bad, &out), 2);
    ck_assert_msg(strstr(out, "--request-id") && strstr(out, "letters, digits"), "%s", out);
    free(out);
    ck_assert_int_eq(atomic_load(&lt.calls), 6);
    /* --json says that the job was the tracker's already */
    char *json[] = {"submit", "--tracker", addr, "--workload", MATMUL, "--request-id",
                    "nightly-42", "--json", NULL};
    ck_assert_int_eq(ktune(json, &out), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_msg(j && json_integer_value(json_object_get(j, "job_id")) == 7 &&
                      json_is_true(json_object_get(j, "existing")),
                  "%s", out);
    json_decref(j);
    free(out);
    ck_assert_int_eq(atomic_load(&lt.calls), 8);
    kt_rpc_server_stop(srv, 0);
    assert_nothing_left();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 400);
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_add_checked_fixture(tc, test_setup, NULL);
    tcase_add_test(tc, cli_tune_embedded_finishes_and_read_commands_use_the_store);
    tcase_add_test(tc, cli_tune_with_a_family_policy_finishes);
    tcase_add_test(tc, cli_tune_resumes_after_ctrl_c_without_measuring_twice);
    tcase_add_test(tc, cli_distilled_store_never_measures_a_dropped_state_again);

    tcase_add_test(tc, cli_export_cuda_writes_kernels_and_launches);
    tcase_add_test(tc, cli_read_commands_against_a_tracker_need_its_token);
    tcase_add_test(tc, cli_kernel_measure_times_states_and_names_bad_input);
    tcase_add_test(tc, cli_kernel_features_of_a_gpu_state_follow_the_target);
    suite_add_tcase(s, tc);
    TCase *best = tcase_create("best");
    tcase_set_timeout(best, 120);
    tcase_add_unchecked_fixture(best, suite_setup, suite_teardown);
    tcase_add_checked_fixture(best, test_setup, NULL);
    tcase_add_test(best, cli_best_shows_the_origin_of_each_best);
    suite_add_tcase(s, best);
    TCase *sub = tcase_create("submit");
    tcase_set_timeout(sub, 120);
    tcase_add_unchecked_fixture(sub, suite_setup, suite_teardown);
    tcase_add_checked_fixture(sub, test_setup, NULL);
    tcase_add_test(sub, cli_submit_sends_a_request_id_per_run_and_the_same_on_its_retry);
    suite_add_tcase(s, sub);
    TCase *bad = tcase_create("bad_input");
    tcase_set_timeout(bad, 400);
    tcase_add_unchecked_fixture(bad, suite_setup, suite_teardown);
    tcase_add_checked_fixture(bad, test_setup, NULL);
    tcase_add_test(bad, cli_bad_input_names_the_cause);
    tcase_add_test(bad, cli_bad_arguments_are_refused_and_change_nothing);
    suite_add_tcase(s, bad);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
