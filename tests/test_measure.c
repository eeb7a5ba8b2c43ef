/*
 * Suite "measure": builder, runner and measurer against planted kernels
 * written here as C source (good, crashing, hanging, aborting, wrong).
 * No assertion depends on how fast anything runs.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kt_config.h"
#include "measure/artifact_cache.h"
#include "measure/builder.h"
#include "measure/measure.h"
#include "measure/measurer.h"
#include "measure/runner.h"
#include "util/err.h"
#include "util/util.h"
#include "ktune.pb-c.h"

#define N 1024

/* ---- planted kernels -------------------------------------------------------- */

static const char *VADD =
    "int vadd(float **b) {\n"
    "  const float *x = b[0], *y = b[1]; float *z = b[2];\n"
    "  for (int i = 0; i < 1024; i++) z[i] = x[i] + y[i];\n"
    "  return 0;\n"
    "}\n";

/* The reference: same function, written differently. */
static const char *VADD_REF =
    "int vadd_ref(float **b) {\n"
    "  for (int i = 1023; i >= 0; i--) b[2][i] = b[1][i] + b[0][i];\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_WRONG =
    "int vadd(float **b) {\n"
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] - b[1][i];\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_SEGV =
    "int vadd(float **b) {\n"
    "  (void)b; *(volatile int *)16 = 1;\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_HANG =
    "int vadd(float **b) {\n"
    "  volatile int go = 1; (void)b;\n"
    "  while (go) { }\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_ABORT =
    "#include <stdlib.h>\n"
    "int vadd(float **b) { (void)b; abort(); return 0; }\n";

/* Forks a helper that outlives it (holding the runner's socket open), then crashes. */
static const char *VADD_FORK_SEGV =
    "#include <unistd.h>\n"
    "int vadd(float **b) {\n"
    "  (void)b;\n"
    "  if (fork() == 0) { sleep(30); _exit(0); }\n"
    "  *(volatile int *)16 = 1;\n"
    "  return 0;\n"
    "}\n";

/* Sleeps 20 ms per run: wall time, but almost no CPU time. */
static const char *VADD_SLEEP =
    "#include <time.h>\n"
    "int vadd(float **b) {\n"
    "  (void)b; struct timespec ts = {0, 20000000}; nanosleep(&ts, 0);\n"
    "  return 0;\n"
    "}\n";

static const char *VADD_FAILS =
    "int vadd(float **b) { (void)b; return -1; }\n";

/* 32x32 matmul with an OpenMP loop, C = A * B. */
static const char *MATMUL =
    "int mm(float **b) {\n"
    "  const float *A = b[0], *B = b[1]; float *C = b[2];\n"
    "  #pragma omp parallel for\n"
    "  for (int i = 0; i < 32; i++) {\n"
    "    float acc[32] = {0};\n"
    "    for (int k = 0; k < 32; k++)\n"
    "      for (int j = 0; j < 32; j++) acc[j] += A[i * 32 + k] * B[k * 32 + j];\n"
    "    for (int j = 0; j < 32; j++) C[i * 32 + j] = acc[j];\n"
    "  }\n"
    "  return 0;\n"
    "}\n";

static const char *MATMUL_REF =
    "int mm_ref(float **b) {\n"
    "  for (int i = 0; i < 32; i++)\n"
    "    for (int j = 0; j < 32; j++) {\n"
    "      float s = 0;\n"
    "      for (int k = 0; k < 32; k++) s += b[0][i * 32 + k] * b[1][k * 32 + j];\n"
    "      b[2][i * 32 + j] = s;\n"
    "    }\n"
    "  return 0;\n"
    "}\n";

/* Weights laid out ahead (codegen.h's three functions): z = x * w, where
 * vm_packed reads w reversed, as vm_pack lays it out. vm, taking w as it
 * is, answers right once and fails every later call: a runner that times
 * it instead of vm_packed reports RUNTIME_DEVICE. */
#define VMUL_PACK_RIGHT                                                             \
    "int vm_pack(int i, const float *src, float *dst) {\n"                          \
    "  if (i != 1) return 0;\n"                                                     \
    "  if (src && dst) for (int k = 0; k < 1024; k++) dst[k] = src[1023 - k];\n"    \
    "  return 1;\n"                                                                 \
    "}\n"
#define VMUL_PACKED                                                                 \
    "int vm_packed(float **b) {\n"                                                  \
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] * b[1][1023 - i];\n"        \
    "  return 0;\n"                                                                 \
    "}\n"

static const char *VMUL_LAID_OUT =
    "static int calls;\n"
    "int vm(float **b) {\n"
    "  if (calls++) return -1;\n"
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] * b[1][i];\n"
    "  return 0;\n"
    "}\n" VMUL_PACK_RIGHT VMUL_PACKED;

/* vm right, but vm_pack copies w unchanged: vm_packed's answers are wrong. */
static const char *VMUL_WRONG_PACK =
    "int vm(float **b) {\n"
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] * b[1][i];\n"
    "  return 0;\n"
    "}\n"
    "int vm_pack(int i, const float *src, float *dst) {\n"
    "  if (i != 1) return 0;\n"
    "  if (src && dst) for (int k = 0; k < 1024; k++) dst[k] = src[k];\n"
    "  return 1;\n"
    "}\n" VMUL_PACKED;

/* vm wrong (it adds), the packed pair right. */
static const char *VMUL_WRONG_UNPACKED =
    "int vm(float **b) {\n"
    "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] + b[1][i];\n"
    "  return 0;\n"
    "}\n" VMUL_PACK_RIGHT VMUL_PACKED;

static const char *VMUL_REF =
    "int vm_ref(float **b) {\n"
    "  for (int i = 1023; i >= 0; i--) b[2][i] = b[1][i] * b[0][i];\n"
    "  return 0;\n"
    "}\n";

static const char *SYNTAX_ERROR =
    "int vadd(float **b) {\n"
    "  return b[0][0] +;\n"
    "}\n";

static kt_buf_layout_t layout3(int64_t n)
{
    kt_buf_layout_t l = {.num_bufs = 3, .num_outputs = 1};
    l.num_elems[0] = l.num_elems[1] = l.num_elems[2] = n;
    return l;
}

static kt_build_input_t cpu_src(const char *src, const char *entry)
{
    return (kt_build_input_t){.target = KT_MEASURE_TARGET_CPU, .source = src, .entry = entry};
}

static kt_builder_t *new_builder(double timeout, const char *cache_dir)
{
    kt_builder_opts_t o;
    kt_builder_opts_default(&o);
    o.timeout = timeout;
    o.cache_dir = cache_dir;
    kt_builder_t *b = kt_builder_new(&o);
    ck_assert_msg(b != NULL, "builder: %s", kt_err_msg());
    return b;
}

/* A runner of `number` runs per repeat, `repeat` repeats, no minimum
 * repeat time, timeout seconds per candidate (0: the default). */
static kt_runner_t *short_runner(int number, int repeat, double timeout)
{
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.timeout = timeout;
    ro.number = number;
    ro.repeat = repeat;
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* Build one source that must compile; the caller clears the result. */
static void build_ok(kt_builder_t *b, const char *src, const char *entry, kt_build_result_t *out)
{
    kt_build_input_t in = cpu_src(src, entry);
    ck_assert_int_eq(kt_builder_build(b, &in, 1, out), 0);
    ck_assert_msg(out->error_no == KT_MEASURE_NO_ERROR, "build failed: %s",
                  out->error_msg ? out->error_msg : "");
}

static void print_spread(const char *what, const kt_measure_result_t *r)
{
    double lo = r->costs[0], hi = r->costs[0], sum = 0, sq = 0;
    for (int k = 0; k < r->n_costs; k++) {
        lo = fmin(lo, r->costs[k]);
        hi = fmax(hi, r->costs[k]);
        sum += r->costs[k];
    }
    double mean = sum / r->n_costs;
    for (int k = 0; k < r->n_costs; k++)
        sq += (r->costs[k] - mean) * (r->costs[k] - mean);
    printf("%s: number=%d repeats=%d mean=%.3g s min=%.3g max=%.3g stdev/mean=%.2f%%\n", what,
           r->number, r->n_costs, mean, lo, hi, 100.0 * sqrt(sq / r->n_costs) / mean);
}

/* ---- vocabulary ----------------------------------------------------------------- */

START_TEST(result_range_gives_fastest_and_slowest_repeat)
{
    double costs[4] = {3e-3, 1e-3, 4e-3, 2e-3};
    kt_measure_result_t r = {.costs = costs, .n_costs = 4, .mean = 2.5e-3};
    double lo = 0, hi = 0;
    kt_measure_result_range(&r, &lo, &hi);
    ck_assert(lo == 1e-3 && hi == 4e-3);
    kt_measure_result_range(&r, NULL, &hi);   /* either output may be left out */
    ck_assert(hi == 4e-3);
    kt_measure_result_t none = {.mean = 7e-3};
    kt_measure_result_range(&none, &lo, &hi);
    ck_assert(lo == 7e-3 && hi == 7e-3);
}
END_TEST

START_TEST(error_names_match_tvm_and_proto)
{
    ck_assert_str_eq(kt_measure_error_name(KT_MEASURE_NO_ERROR), "NO_ERROR");
    ck_assert_str_eq(kt_measure_error_name(KT_MEASURE_COMPILE_HOST), "COMPILE_HOST");
    ck_assert_str_eq(kt_measure_error_name(KT_MEASURE_RUN_TIMEOUT), "RUN_TIMEOUT");
    ck_assert_str_eq(kt_measure_error_name(99), "UNKNOWN_ERROR");
    ck_assert_str_eq(kt_measure_error_name(-1), "UNKNOWN_ERROR");
    ck_assert_int_eq(KT_MEASURE_WRONG_ANSWER, KTUNE__V1__MEASURE_ERROR__WRONG_ANSWER);
    ck_assert_int_eq(KT_MEASURE_BUILD_TIMEOUT, 6);
    for (int e = 0; e < KT_MEASURE_NUM_ERRORS; e++) {
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value(&ktune__v1__measure_error__descriptor, e);
        ck_assert_ptr_nonnull(v);
        ck_assert_str_eq(v->name, kt_measure_error_name(e));
        ck_assert_int_gt((int)strlen(kt_measure_error_desc(e)), 10);
    }
    kt_buf_layout_t l = layout3(4);
    ck_assert_int_eq(kt_buf_layout_check(&l), 0);
    l.num_outputs = 4;
    ck_assert_int_eq(kt_buf_layout_check(&l), KT_EINVAL);
    l = layout3(0);
    ck_assert_int_eq(kt_buf_layout_check(&l), KT_EINVAL);
}
END_TEST

/* ---- builder ------------------------------------------------------------------- */

START_TEST(builder_reports_compile_error_with_compiler_message)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_input_t in = cpu_src(SYNTAX_ERROR, "vadd");
    kt_build_result_t r = {0};
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_COMPILE_HOST);
    ck_assert_ptr_nonnull(r.error_msg);
    ck_assert_msg(strstr(r.error_msg, "error") && strstr(r.error_msg, "exited with status"),
                  "message: %s", r.error_msg);
    ck_assert_ptr_null(r.artifact);
    kt_build_result_clear(&r);

    /* A compile error is deterministic: the second build is answered from the cache. */
    kt_builder_stats_t st;
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_COMPILE_HOST);
    ck_assert_int_eq(r.cached, 1);
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);
    kt_build_result_clear(&r);

    /* No source and no entry are instantiation errors. */
    kt_build_input_t bad[2] = {
        {.target = KT_MEASURE_TARGET_CPU, .source = NULL, .entry = "f",
         .instantiation_error = "split factor does not divide"},
        cpu_src(VADD, ""),
    };
    kt_build_result_t br[2] = {{0}};
    ck_assert_int_eq(kt_builder_build(b, bad, 2, br), 0);
    ck_assert_int_eq(br[0].error_no, KT_MEASURE_INSTANTIATION_ERROR);
    ck_assert_str_eq(br[0].error_msg, "split factor does not divide");
    ck_assert_int_eq(br[1].error_no, KT_MEASURE_INSTANTIATION_ERROR);
    kt_build_result_clear(&br[0]);
    kt_build_result_clear(&br[1]);
    /* CUDA source: a device compile error with NVRTC (suite cuda covers that
     * path), refused without it. */
    kt_build_input_t cuda = {.target = KT_MEASURE_TARGET_CUDA, .source = "x", .entry = "k"};
#if KT_HAVE_CUDA
    ck_assert_int_eq(kt_builder_build(b, &cuda, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_COMPILE_DEVICE);
    kt_build_result_clear(&r);
#else
    ck_assert_int_eq(kt_builder_build(b, &cuda, 1, &r), KT_EUNSUP);
#endif
    kt_builder_free(b);
}
END_TEST

START_TEST(builder_kills_whole_process_group_past_timeout)
{
    /* A "compiler" that starts a grandchild and never finishes. */
    char dir[] = "/tmp/kt_measure_slowccXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char script[256], pidfile[256];
    snprintf(script, sizeof script, "%s/slowcc", dir);
    snprintf(pidfile, sizeof pidfile, "%s/pid", dir);
    char text[512];
    snprintf(text, sizeof text, "#!/bin/sh\necho $$ > %s\nsleep 30\n", pidfile);
    ck_assert_int_eq(kt_file_write(script, text, strlen(text)), 0);
    ck_assert_int_eq(chmod(script, 0755), 0);

    kt_builder_opts_t o;
    kt_builder_opts_default(&o);
    o.compiler = script;
    o.timeout = 1;
    kt_builder_t *b = kt_builder_new(&o);
    ck_assert_msg(b != NULL, "%s", kt_err_msg());
    kt_build_input_t in = cpu_src(VADD, "vadd");
    kt_build_result_t r = {0};
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_BUILD_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(r.error_msg, "timeout"));
    kt_build_result_clear(&r);
    kt_builder_stats_t st;
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.timeouts, 1);

    /* The shell's process group (it and its sleep) must be gone; init may
     * take a moment to reap the orphaned sleep, so poll, boundedly. */
    char *pid_text = kt_file_read(pidfile, NULL);
    ck_assert_ptr_nonnull(pid_text);
    pid_t pgid = (pid_t)atoi(pid_text);
    free(pid_text);
    ck_assert_int_gt(pgid, 1);
    int gone = 0;
    for (int k = 0; k < 500 && !gone; k++) {
        if (kill(-pgid, 0) < 0 && errno == ESRCH)
            gone = 1;
        else
            usleep(10000);
    }
    ck_assert_msg(gone, "process group %d survived the timeout", (int)pgid);

    /* Timeouts are not cached: the next build tries again. */
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_BUILD_TIMEOUT);
    ck_assert_int_eq(r.cached, 0);
    kt_build_result_clear(&r);
    kt_builder_free(b);
    unlink(pidfile);
    unlink(script);
    rmdir(dir);
}
END_TEST

START_TEST(builder_cache_avoids_second_compile)
{
    char dir[] = "/tmp/kt_measure_cacheXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    kt_builder_t *b = new_builder(30, dir);
    kt_build_result_t first = {0}, again = {0};
    build_ok(b, VADD, "vadd", &first);
    ck_assert_int_eq(first.cached, 0);
    ck_assert_uint_eq(first.artifact_hash, kt_hash64(first.artifact, first.artifact_len));
    kt_builder_stats_t st;
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);

    build_ok(b, VADD, "vadd", &again);
    ck_assert_int_eq(again.cached, 1);
    ck_assert_uint_eq(again.artifact_hash, first.artifact_hash);
    ck_assert_uint_eq(again.artifact_len, first.artifact_len);
    ck_assert_int_eq(memcmp(again.artifact, first.artifact, first.artifact_len), 0);
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);
    ck_assert_uint_eq(st.cache.mem_hits, 1);
    kt_build_result_clear(&again);

    /* Identical candidates within one batch compile once. */
    kt_build_input_t twice[2] = {cpu_src(VADD_REF, "vadd_ref"), cpu_src(VADD_REF, "vadd_ref")};
    kt_build_result_t tr[2] = {{0}};
    ck_assert_int_eq(kt_builder_build(b, twice, 2, tr), 0);
    ck_assert_int_eq(tr[0].error_no, 0);
    ck_assert_int_eq(tr[1].error_no, 0);
    ck_assert_uint_eq(tr[0].artifact_hash, tr[1].artifact_hash);
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 2);
    kt_build_result_clear(&tr[0]);
    kt_build_result_clear(&tr[1]);

    /* Another builder on the same directory finds the artifact on disk. */
    kt_builder_t *b2 = new_builder(30, dir);
    build_ok(b2, VADD, "vadd", &again);
    ck_assert_int_eq(again.cached, 1);
    ck_assert_uint_eq(again.artifact_hash, first.artifact_hash);
    kt_builder_stats(b2, &st);
    ck_assert_uint_eq(st.compiles, 0);
    ck_assert_uint_eq(st.cache.disk_hits, 1);
    kt_build_result_clear(&again);
    /* A different entry name is a different candidate. */
    kt_build_input_t one = cpu_src(VADD, "vadd"), other = cpu_src(VADD, "vadd2");
    ck_assert_uint_ne(kt_builder_key(b2, &one), kt_builder_key(b2, &other));

    kt_build_result_clear(&first);
    kt_builder_free(b);
    kt_builder_free(b2);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(artifact_cache_evicts_least_recently_used)
{
    kt_artifact_cache_t *c = kt_artifact_cache_new(NULL, 3000);
    unsigned char blob[1000];
    memset(blob, 7, sizeof blob);
    ck_assert_int_eq(kt_artifact_cache_put(c, 1, 0, NULL, blob, sizeof blob), 0);
    ck_assert_int_eq(kt_artifact_cache_put(c, 2, 0, NULL, blob, sizeof blob), 0);
    int e;
    char *msg;
    unsigned char *data;
    size_t len;
    /* Touch 1 so 2 is the least recently used when 3 arrives. */
    ck_assert_int_eq(kt_artifact_cache_get(c, 1, &e, &msg, &data, &len), 1);
    ck_assert_uint_eq(len, sizeof blob);
    free(data);
    ck_assert_int_eq(kt_artifact_cache_put(c, 3, KT_MEASURE_COMPILE_HOST, "bad", NULL, 0), 0);
    ck_assert_int_eq(kt_artifact_cache_put(c, 4, 0, NULL, blob, sizeof blob), 0);
    ck_assert_int_eq(kt_artifact_cache_get(c, 2, &e, &msg, &data, &len), 0);
    ck_assert_int_eq(kt_artifact_cache_get(c, 3, &e, &msg, &data, &len), 1);
    ck_assert_int_eq(e, KT_MEASURE_COMPILE_HOST);
    ck_assert_str_eq(msg, "bad");
    ck_assert_ptr_null(data);
    free(msg);
    kt_artifact_cache_stats_t st;
    kt_artifact_cache_stats(c, &st);
    ck_assert_uint_ge(st.evictions, 1);
    ck_assert_uint_le(st.mem_bytes, 3000);
    kt_artifact_cache_free(c);
}
END_TEST

/* ---- runner ------------------------------------------------------------------------ */

START_TEST(measurer_isolates_crash_hang_abort_and_wrong_answer_in_one_batch)
{
    kt_builder_t *b = new_builder(60, NULL);
    kt_runner_t *r = short_runner(2, 2, 2);
    kt_measurer_t *m = kt_measurer_new(b, r, 0);
    ck_assert_ptr_nonnull(m);

    kt_build_input_t vref = cpu_src(VADD_REF, "vadd_ref"), mref = cpu_src(MATMUL_REF, "mm_ref");
    struct {
        const char *src, *entry;
        const kt_build_input_t *ref;
        int64_t n;
        int want;
    } plan[] = {
        {VADD, "vadd", &vref, N, KT_MEASURE_NO_ERROR},
        {VADD_SEGV, "vadd", &vref, N, KT_MEASURE_RUNTIME_DEVICE},
        {MATMUL, "mm", &mref, 32 * 32, KT_MEASURE_NO_ERROR},
        {VADD_HANG, "vadd", &vref, N, KT_MEASURE_RUN_TIMEOUT},
        {VADD_ABORT, "vadd", &vref, N, KT_MEASURE_RUNTIME_DEVICE},
        {VADD, "vadd", &vref, N, KT_MEASURE_NO_ERROR},
        {VADD_WRONG, "vadd", &vref, N, KT_MEASURE_WRONG_ANSWER},
        {VADD_FAILS, "vadd", &vref, N, KT_MEASURE_RUNTIME_DEVICE},
        {MATMUL, "mm", &mref, 32 * 32, KT_MEASURE_NO_ERROR},
    };
    enum { NP = sizeof plan / sizeof plan[0] };
    kt_measure_input_t in[NP];
    for (int i = 0; i < NP; i++)
        in[i] = (kt_measure_input_t){.prog = cpu_src(plan[i].src, plan[i].entry),
                                     .ref = plan[i].ref, .layout = layout3(plan[i].n)};
    kt_measure_result_t out[NP];
    int rc = kt_measurer_measure(m, in, NP, out);
    ck_assert_msg(rc == 0, "measure: %d %s", rc, kt_err_msg());

    for (int i = 0; i < NP; i++) {
        printf("candidate %d: %s %s\n", i, kt_measure_error_name(out[i].error_no),
               out[i].error_msg ? out[i].error_msg : "");
        ck_assert_msg(out[i].error_no == plan[i].want, "candidate %d: got %s (%s), want %s", i,
                      kt_measure_error_name(out[i].error_no),
                      out[i].error_msg ? out[i].error_msg : "",
                      kt_measure_error_name(plan[i].want));
        ck_assert_int_ge(out[i].n_costs, 1);
        ck_assert(out[i].all_cost > 0);
        ck_assert(out[i].timestamp > 1.6e9);
        if (plan[i].want == KT_MEASURE_NO_ERROR) {
            ck_assert_ptr_null(out[i].error_msg);
            ck_assert_int_eq(out[i].n_costs, 2);
            ck_assert_int_eq(out[i].number, 2);
            ck_assert(out[i].costs[0] > 0 && out[i].costs[1] > 0);
            ck_assert(out[i].mean < KT_MEASURE_MAX_COST);
            ck_assert(out[i].max_error >= 0 && out[i].max_error <= KT_RUNNER_DEFAULT_TOLERANCE);
        } else {
            ck_assert_ptr_nonnull(out[i].error_msg);
            ck_assert(out[i].mean == KT_MEASURE_MAX_COST);
        }
    }
    ck_assert_ptr_nonnull(strstr(out[1].error_msg, "SIGSEGV"));
    ck_assert_ptr_nonnull(strstr(out[3].error_msg, "timeout"));
    ck_assert_ptr_nonnull(strstr(out[4].error_msg, "SIGABRT"));
    ck_assert_ptr_nonnull(strstr(out[6].error_msg, "max relative error"));
    ck_assert(out[6].max_error > KT_RUNNER_DEFAULT_TOLERANCE);
    ck_assert_ptr_nonnull(strstr(out[7].error_msg, "returned -1"));
    /* One child for the batch and one after each candidate that killed its child. */
    ck_assert_uint_eq(kt_runner_children_started(r), 4);

    kt_measurer_stats_t st;
    kt_measurer_stats(m, &st);
    ck_assert_uint_eq(st.measured, NP);
    ck_assert_uint_eq(st.errors, 5);
    ck_assert_int_eq(st.continuous_errors, 0);
    ck_assert(st.best_cost > 0);

    for (int i = 0; i < NP; i++)
        kt_measure_result_clear(&out[i]);
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
}
END_TEST

/* A candidate whose artifact exports <entry>_packed and <entry>_pack is
 * timed as a built network runs it: its weights packed once, the packed
 * variant timed, the entry taking weights as they are run once to check
 * it. Both variants are checked: a wrong pack or a wrong unpacked entry is
 * WRONG_ANSWER, naming the variant. */
START_TEST(runner_times_the_packed_variant_and_checks_both)
{
    kt_builder_t *b = new_builder(60, NULL);
    kt_runner_t *r = short_runner(3, 2, 0);
    kt_measurer_t *m = kt_measurer_new(b, r, 0);
    ck_assert_ptr_nonnull(m);
    kt_build_input_t ref = cpu_src(VMUL_REF, "vm_ref");
    const char *srcs[] = {VMUL_LAID_OUT, VMUL_WRONG_PACK, VMUL_WRONG_UNPACKED};
    const int want[] = {KT_MEASURE_NO_ERROR, KT_MEASURE_WRONG_ANSWER, KT_MEASURE_WRONG_ANSWER};
    kt_measure_input_t in[3];
    for (int i = 0; i < 3; i++)
        in[i] = (kt_measure_input_t){.prog = cpu_src(srcs[i], "vm"), .ref = &ref,
                                     .layout = layout3(N)};
    kt_measure_result_t out[3];
    ck_assert_msg(kt_measurer_measure(m, in, 3, out) == 0, "%s", kt_err_msg());
    for (int i = 0; i < 3; i++)
        ck_assert_msg(out[i].error_no == want[i], "candidate %d: %s (%s)", i,
                      kt_measure_error_name(out[i].error_no),
                      out[i].error_msg ? out[i].error_msg : "");
    ck_assert_int_eq(out[0].n_costs, 2);
    ck_assert(out[0].max_error >= 0 && out[0].max_error <= KT_RUNNER_DEFAULT_TOLERANCE);
    ck_assert_ptr_nonnull(strstr(out[1].error_msg, "weights packed: max relative error"));
    ck_assert_ptr_nonnull(strstr(out[2].error_msg, "weights unpacked: max relative error"));
    for (int i = 0; i < 3; i++)
        kt_measure_result_clear(&out[i]);
    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
}
END_TEST

START_TEST(runner_grows_number_until_a_repeat_lasts_min_repeat_ms)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t art = {0};
    build_ok(b, VADD, "vadd", &art);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.number = 1;
    ro.repeat = 4;
    ro.min_repeat_ms = 40;
    ro.cooldown_interval = 0.001;
    kt_runner_t *r = kt_runner_new(&ro);
    kt_run_input_t in = {.target = KT_MEASURE_TARGET_CPU,
                         .prog = {art.artifact, art.artifact_len, art.artifact_hash, "vadd"},
                         .layout = layout3(N)};
    kt_measure_result_t res = {0};
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_msg(res.error_no == 0, "%s", res.error_msg ? res.error_msg : "");
    ck_assert_int_eq(res.n_costs, 4);
    ck_assert_int_eq(res.max_error, -1); /* no reference given */
    /* A 1024-element add takes microseconds: one run cannot fill 40 ms. */
    ck_assert_int_gt(res.number, 1);
    for (int k = 0; k < res.n_costs; k++) {
        /* Each reported cost is a repeat's duration / number, and the repeat
         * lasted at least min_repeat_ms. */
        ck_assert_msg(res.costs[k] * res.number >= 0.040 * (1 - 1e-9),
                      "repeat %d: %.6g s x %d runs < 40 ms", k, res.costs[k], res.number);
    }
    print_spread("vadd min_repeat_ms=40", &res);
    kt_measure_result_clear(&res);

    /* Cache flushing forces one run per repeat, as TVM. */
    kt_runner_free(r);
    ro.enable_cpu_cache_flush = 1;
    ro.number = 5;
    ro.repeat = 3;
    ro.cooldown_interval = 0;
    r = kt_runner_new(&ro);
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_int_eq(res.error_no, 0);
    ck_assert_int_eq(res.number, 1);
    ck_assert_int_eq(res.n_costs, 3);
    print_spread("vadd with cache flush", &res);
    kt_measure_result_clear(&res);

    /* Evicting only the weights (here the second addend) likewise. */
    kt_runner_free(r);
    ro.enable_cpu_cache_flush = 0;
    ro.flush_weights = 1;
    r = kt_runner_new(&ro);
    in.layout.weights = 1u << 1;
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_msg(res.error_no == 0, "%s", res.error_msg ? res.error_msg : "");
    ck_assert_int_eq(res.number, 1);
    ck_assert_int_eq(res.n_costs, 3);
    print_spread("vadd with its weight evicted", &res);
    kt_measure_result_clear(&res);

    /* A kernel with no weights keeps the warm repeats of min_repeat_ms. */
    kt_runner_free(r);
    ro.number = 1;
    r = kt_runner_new(&ro);
    in.layout.weights = 0;
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_msg(res.error_no == 0, "%s", res.error_msg ? res.error_msg : "");
    ck_assert_int_gt(res.number, 1);
    ck_assert(res.costs[0] * res.number >= 0.040 * (1 - 1e-9));
    kt_measure_result_clear(&res);

    /* A weight mask naming the output is refused before anything runs. */
    in.layout.weights = 1u << 2;
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_int_eq(res.error_no, KT_MEASURE_INSTANTIATION_ERROR);
    ck_assert_ptr_nonnull(strstr(res.error_msg, "weight mask"));
    kt_measure_result_clear(&res);
    kt_runner_free(r);
    kt_build_result_clear(&art);
    kt_builder_free(b);
}
END_TEST

START_TEST(runner_cpu_timer_leaves_out_time_off_the_cpu)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t art = {0};
    build_ok(b, VADD_SLEEP, "vadd", &art);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.number = 2;
    ro.repeat = 2;
    ro.min_repeat_ms = 0;
    ro.num_threads = 1;
    kt_run_input_t in = {.target = KT_MEASURE_TARGET_CPU,
                         .prog = {art.artifact, art.artifact_len, art.artifact_hash, "vadd"},
                         .layout = layout3(N)};
    kt_measure_result_t wall = {0}, cpu = {0};
    kt_runner_t *r = kt_runner_new(&ro);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &wall), 0);
    kt_runner_free(r);
    ro.timer = KT_RUNNER_TIMER_CPU;
    r = kt_runner_new(&ro);
    ck_assert_msg(r != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &cpu), 0);
    kt_runner_free(r);
    ck_assert_int_eq(wall.error_no, 0);
    ck_assert_int_eq(cpu.error_no, 0);
    /* a sleeping run lasts its 20 ms but spends microseconds of CPU */
    ck_assert_msg(wall.mean >= 0.020, "wall %.6g s", wall.mean);
    ck_assert_msg(cpu.mean < 0.010, "cpu %.6g s", cpu.mean);
    kt_measure_result_clear(&wall);
    kt_measure_result_clear(&cpu);

    /* the CPU time of several threads adds up: refused */
    ro.num_threads = 2;
    ck_assert_ptr_null(kt_runner_new(&ro));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "num_threads 1"));
    ro.num_threads = 1;
    ro.timer = 7;
    ck_assert_ptr_null(kt_runner_new(&ro));
    ck_assert_int_eq(kt_runner_timer_parse("wall"), KT_RUNNER_TIMER_WALL);
    ck_assert_int_eq(kt_runner_timer_parse("cpu"), KT_RUNNER_TIMER_CPU);
    ck_assert_int_eq(kt_runner_timer_parse("tsc"), -1);
    ck_assert_int_eq(kt_runner_timer_parse(NULL), -1);
    kt_build_result_clear(&art);
    kt_builder_free(b);
}
END_TEST

START_TEST(runner_runs_shared_reference_once_per_batch)
{
    /* The reference appends a byte to a file each time it runs. */
    char path[] = "/tmp/kt_measure_refcountXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char ref_src[1024];
    snprintf(ref_src, sizeof ref_src,
             "#include <stdio.h>\n"
             "int vadd_ref(float **b) {\n"
             "  FILE *f = fopen(\"%s\", \"a\"); if (f) { fputc('x', f); fclose(f); }\n"
             "  for (int i = 0; i < 1024; i++) b[2][i] = b[0][i] + b[1][i];\n"
             "  return 0;\n"
             "}\n", path);
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t prog = {0}, ref = {0};
    build_ok(b, VADD, "vadd", &prog);
    build_ok(b, ref_src, "vadd_ref", &ref);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.number = 1;
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    kt_run_input_t in[4];
    for (int i = 0; i < 4; i++)
        in[i] = (kt_run_input_t){.target = KT_MEASURE_TARGET_CPU,
                                 .prog = {prog.artifact, prog.artifact_len, 0, "vadd"},
                                 .ref = {ref.artifact, ref.artifact_len, 0, "vadd_ref"},
                                 .layout = layout3(N)};
    /* A missing entry point is a runtime error of that candidate alone. */
    in[2].prog.entry = "no_such_kernel";
    kt_measure_result_t res[4];
    ck_assert_int_eq(kt_runner_run(r, in, 4, res), 0);
    ck_assert_int_eq(res[0].error_no, 0);
    ck_assert_int_eq(res[1].error_no, 0);
    ck_assert_int_eq(res[2].error_no, KT_MEASURE_RUNTIME_DEVICE);
    ck_assert_ptr_nonnull(strstr(res[2].error_msg, "no_such_kernel"));
    ck_assert_int_eq(res[3].error_no, 0);
    ck_assert(res[0].max_error == 0); /* same additions, same order of operands' rounding */
    size_t runs = 0;
    char *text = kt_file_read(path, &runs);
    ck_assert_ptr_nonnull(text);
    free(text);
    ck_assert_uint_eq(runs, 1);
    for (int i = 0; i < 4; i++)
        kt_measure_result_clear(&res[i]);
    kt_runner_free(r);
    kt_build_result_clear(&prog);
    kt_build_result_clear(&ref);
    kt_builder_free(b);
    unlink(path);
}
END_TEST

START_TEST(runner_reports_hanging_reference_once_and_skips_it_after)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t prog = {0}, ref = {0};
    build_ok(b, VADD, "vadd", &prog);
    build_ok(b, VADD_HANG, "vadd", &ref);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.timeout = 1;
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    kt_run_input_t in[3];
    for (int i = 0; i < 3; i++)
        in[i] = (kt_run_input_t){.target = KT_MEASURE_TARGET_CPU,
                                 .prog = {prog.artifact, prog.artifact_len, 0, "vadd"},
                                 .ref = {ref.artifact, ref.artifact_len, 0, "vadd"},
                                 .layout = layout3(N)};
    in[2].ref.data = NULL; /* unchecked: unaffected by the bad reference */
    kt_measure_result_t res[3];
    ck_assert_int_eq(kt_runner_run(r, in, 3, res), 0);
    ck_assert_int_eq(res[0].error_no, KT_MEASURE_UNKNOWN_ERROR);
    ck_assert_ptr_nonnull(strstr(res[0].error_msg, "reference"));
    ck_assert_int_eq(res[1].error_no, KT_MEASURE_UNKNOWN_ERROR);
    ck_assert_ptr_nonnull(strstr(res[1].error_msg, "failed earlier"));
    ck_assert_int_eq(res[2].error_no, 0);
    for (int i = 0; i < 3; i++)
        kt_measure_result_clear(&res[i]);
    kt_runner_free(r);
    kt_build_result_clear(&prog);
    kt_build_result_clear(&ref);
    kt_builder_free(b);
}
END_TEST

START_TEST(runner_sees_crash_while_a_forked_helper_keeps_the_socket_open)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t bad = {0}, good = {0};
    build_ok(b, VADD_FORK_SEGV, "vadd", &bad);
    build_ok(b, VADD, "vadd", &good);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.timeout = 20; /* far longer than the crash takes to notice */
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    kt_run_input_t in[2] = {
        {.target = KT_MEASURE_TARGET_CPU, .prog = {bad.artifact, bad.artifact_len, 0, "vadd"},
         .layout = layout3(N)},
        {.target = KT_MEASURE_TARGET_CPU, .prog = {good.artifact, good.artifact_len, 0, "vadd"},
         .layout = layout3(N)},
    };
    kt_measure_result_t res[2];
    ck_assert_int_eq(kt_runner_run(r, in, 2, res), 0);
    ck_assert_msg(res[0].error_no == KT_MEASURE_RUNTIME_DEVICE, "%s: %s",
                  kt_measure_error_name(res[0].error_no), res[0].error_msg);
    ck_assert_ptr_nonnull(strstr(res[0].error_msg, "SIGSEGV"));
    ck_assert_int_eq(res[1].error_no, 0);
    kt_measure_result_clear(&res[0]);
    kt_measure_result_clear(&res[1]);
    kt_runner_free(r);
    kt_build_result_clear(&bad);
    kt_build_result_clear(&good);
    kt_builder_free(b);
}
END_TEST

START_TEST(runner_pins_threads_and_rejects_bad_cpu_list)
{
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.cpu_list = "3-1";
    ck_assert_ptr_null(kt_runner_new(&ro));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    ro.cpu_list = "0,x";
    ck_assert_ptr_null(kt_runner_new(&ro));

    cpu_set_t allowed;
    ck_assert_int_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int core = 0;
    while (!CPU_ISSET(core, &allowed))
        core++;
    char list[16];
    snprintf(list, sizeof list, "%d", core);
    ro.cpu_list = list;
    ro.num_threads = 1;
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    ck_assert_msg(r != NULL, "%s", kt_err_msg());

    kt_builder_t *b = new_builder(30, NULL);
    kt_build_result_t prog = {0}, ref = {0};
    build_ok(b, MATMUL, "mm", &prog);
    build_ok(b, MATMUL_REF, "mm_ref", &ref);
    kt_run_input_t in = {.target = KT_MEASURE_TARGET_CPU,
                         .prog = {prog.artifact, prog.artifact_len, prog.artifact_hash, "mm"},
                         .ref = {ref.artifact, ref.artifact_len, ref.artifact_hash, "mm_ref"},
                         .layout = layout3(32 * 32)};
    kt_measure_result_t res = {0};
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &res), 0);
    ck_assert_msg(res.error_no == 0, "%s", res.error_msg ? res.error_msg : "");
    ck_assert(res.max_error >= 0 && res.max_error <= KT_RUNNER_DEFAULT_TOLERANCE);
    kt_measure_result_clear(&res);
    kt_runner_free(r);
    kt_build_result_clear(&prog);
    kt_build_result_clear(&ref);
    kt_builder_free(b);
}
END_TEST

/* ---- measurer ------------------------------------------------------------------------ */

typedef struct {
    int calls;
    int seen;
} cb_count_t;

static int count_cb(void *arg, const kt_measure_input_t *in, const kt_measure_result_t *res, int n)
{
    (void)in;
    (void)res;
    cb_count_t *c = arg;
    c->calls++;
    c->seen += n;
    return 0;
}

static int failing_cb(void *arg, const kt_measure_input_t *in, const kt_measure_result_t *res,
                      int n)
{
    (void)arg;
    (void)in;
    (void)res;
    (void)n;
    return kt_err_set(KT_EIO, "disk full");
}

START_TEST(measurer_reports_too_many_errors_in_a_row)
{
    kt_builder_t *b = new_builder(30, NULL);
    kt_runner_opts_t ro;
    kt_runner_opts_default(&ro);
    ro.min_repeat_ms = 0;
    kt_runner_t *r = kt_runner_new(&ro);
    kt_measurer_t *m = kt_measurer_new(b, r, 2);
    cb_count_t cnt = {0};
    ck_assert_int_eq(kt_measurer_add_callback(m, count_cb, &cnt), 0);

    kt_measure_input_t bad = {.prog = cpu_src(SYNTAX_ERROR, "vadd"), .layout = layout3(N)};
    kt_measure_input_t batch[2] = {bad, bad};
    kt_measure_result_t out[2];
    ck_assert_int_eq(kt_measurer_measure(m, batch, 2, out), 0); /* 2 in a row: allowed */
    ck_assert_int_eq(out[0].error_no, KT_MEASURE_COMPILE_HOST);
    ck_assert_str_eq(kt_measurer_stop_reason(m), "");
    kt_measure_result_clear(&out[0]);
    kt_measure_result_clear(&out[1]);
    ck_assert_int_eq(kt_measurer_measure(m, &bad, 1, out), KT_MEASURER_TOO_MANY_ERRORS);
    ck_assert_ptr_nonnull(strstr(kt_measurer_stop_reason(m), "too many errors in a row"));
    kt_measure_result_clear(&out[0]);
    ck_assert_int_eq(cnt.calls, 2);
    ck_assert_int_eq(cnt.seen, 3);

    /* A success ends the run of errors. A reference that does not build makes
     * its candidate an UNKNOWN_ERROR. */
    kt_build_input_t broken_ref = cpu_src(SYNTAX_ERROR, "vadd_ref");
    kt_build_input_t vref = cpu_src(VADD_REF, "vadd_ref");
    kt_measure_input_t mix[2] = {
        {.prog = cpu_src(VADD, "vadd"), .ref = &vref, .layout = layout3(N)},
        {.prog = cpu_src(VADD, "vadd"), .ref = &broken_ref, .layout = layout3(N)},
    };
    ck_assert_int_eq(kt_measurer_measure(m, mix, 2, out), 0);
    ck_assert_int_eq(out[0].error_no, 0);
    ck_assert(out[0].all_cost > 0);
    ck_assert_int_eq(out[1].error_no, KT_MEASURE_UNKNOWN_ERROR);
    ck_assert_ptr_nonnull(strstr(out[1].error_msg, "reference kernel failed to build"));
    kt_measurer_stats_t st;
    kt_measurer_stats(m, &st);
    ck_assert_int_eq(st.continuous_errors, 1);
    ck_assert_uint_eq(st.measured, 5);
    kt_measure_result_clear(&out[0]);
    kt_measure_result_clear(&out[1]);

    /* A failing callback is reported; the results stay valid. */
    ck_assert_int_eq(kt_measurer_add_callback(m, failing_cb, NULL), 0);
    ck_assert_int_eq(kt_measurer_measure(m, mix, 1, out), KT_EIO);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "disk full"));
    ck_assert_int_eq(out[0].error_no, 0);
    ck_assert_int_eq(cnt.calls, 4);
    kt_measure_result_clear(&out[0]);

    kt_measurer_free(m);
    kt_runner_free(r);
    kt_builder_free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("measure");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, error_names_match_tvm_and_proto);
    tcase_add_test(tc, result_range_gives_fastest_and_slowest_repeat);
    tcase_add_test(tc, builder_reports_compile_error_with_compiler_message);
    tcase_add_test(tc, builder_kills_whole_process_group_past_timeout);
    tcase_add_test(tc, builder_cache_avoids_second_compile);
    tcase_add_test(tc, artifact_cache_evicts_least_recently_used);
    tcase_add_test(tc, measurer_isolates_crash_hang_abort_and_wrong_answer_in_one_batch);
    tcase_add_test(tc, runner_grows_number_until_a_repeat_lasts_min_repeat_ms);
    tcase_add_test(tc, runner_times_the_packed_variant_and_checks_both);
    tcase_add_test(tc, runner_runs_shared_reference_once_per_batch);
    tcase_add_test(tc, runner_reports_hanging_reference_once_and_skips_it_after);
    tcase_add_test(tc, runner_cpu_timer_leaves_out_time_off_the_cpu);
    tcase_add_test(tc, runner_sees_crash_while_a_forked_helper_keeps_the_socket_open);
    tcase_add_test(tc, runner_pins_threads_and_rejects_bad_cpu_list);
    tcase_add_test(tc, measurer_reports_too_many_errors_in_a_row);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
