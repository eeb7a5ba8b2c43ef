/*
 * Suite "cuda": hardware parameters (presets, overrides, JSON, DeviceInfo),
 * NVRTC compilation, the builder's CUDA path, and the CUDA runner.
 *
 * Tests that need the toolkit fail in a build without it; tests that need a
 * GPU skip where there is none, after checking that the runner says "no CUDA
 * device" (tests/kt_skip.h).
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt_config.h"
#if KT_HAVE_CUDA
#include <cuda.h>
#endif
#include "ktune.pb-c.h"
#include "measure/builder.h"
#include "measure/cuda_runner.h"
#include "measure/hw_params.h"
#include "measure/hw_params_json.h"
#include "measure/measure.h"
#include "measure/nvrtc.h"
#include "measure/runner.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_skip.h"

#define N 1024

/* ---- planted kernels ------------------------------------------------------------- */

/* c = a + b, staged through 1 KiB of static shared memory. */
static const char *VADD_CU =
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c) {\n"
    "  __shared__ float t[256];\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  t[threadIdx.x] = a[i];\n"
    "  __syncthreads();\n"
    "  c[i] = t[threadIdx.x] + b[i];\n"
    "}\n";

#if KT_HAVE_CUDA
static const char *VADD_WRONG_CU =
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  c[i] = a[i] - b[i];\n"
    "}\n";

/* Writes to address 16: an illegal address, a sticky error. */
static const char *VADD_FAULT_CU =
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  ((volatile float *)16)[i] = a[i];\n"
    "  c[i] = b[i];\n"
    "}\n";

/* Two kernels per run: c = a, then c += b. */
static const char *VADD_TWO_CU =
    "extern \"C\" __global__ void copy_a(const float *a, const float *b, float *c) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; (void)b; c[i] = a[i];\n"
    "}\n"
    "extern \"C\" __global__ void add_b(const float *a, const float *b, float *c) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; (void)a; c[i] += b[i];\n"
    "}\n";

static const char *SYNTAX_ERROR_CU =
    "extern \"C\" __global__ void vadd(float *a) { a[0] = undeclared_thing; }\n";

static const char *VADD_REF_C =
    "int vadd_ref(float **b) {\n"
    "  for (int i = 1023; i >= 0; i--) b[2][i] = b[1][i] + b[0][i];\n"
    "  return 0;\n"
    "}\n";

#endif

static kt_buf_layout_t layout3(int64_t n)
{
    kt_buf_layout_t l = {.num_bufs = 3, .num_outputs = 1};
    l.num_elems[0] = l.num_elems[1] = l.num_elems[2] = n;
    return l;
}

static kt_build_input_t cuda_src(const char *src, const char *entry)
{
    return (kt_build_input_t){.target = KT_MEASURE_TARGET_CUDA, .source = src, .entry = entry};
}

#if KT_HAVE_CUDA
static int starts_with_elf(const unsigned char *p, size_t len)
{
    return len >= 4 && memcmp(p, "\x7f" "ELF", 4) == 0;
}
#endif

/* ---- hardware parameters ------------------------------------------------------------ */

START_TEST(hw_params_presets_hold_reference_values)
{
    kt_hw_params_t hw;
    ck_assert_int_eq(kt_hw_params_preset("sm_80", &hw), 0);
    ck_assert_str_eq(hw.target, "cuda");
    ck_assert_str_eq(hw.arch, "sm_80");
    ck_assert_int_eq(hw.cc_major, 8);
    ck_assert_int_eq(hw.cc_minor, 0);
    ck_assert_int_eq(hw.num_cores, 108);
    ck_assert_int_eq(hw.max_shared_memory_per_block, 48 * 1024);
    ck_assert_int_eq(hw.max_local_memory_per_block, INT_MAX);
    ck_assert_int_eq(hw.max_threads_per_block, 1024);
    ck_assert_int_eq(hw.warp_size, 32);
    ck_assert_int_eq(hw.max_vthread_extent, 8);
    ck_assert_int_eq(hw.vector_unit_bytes, 16);
    ck_assert_int_eq(kt_hw_params_preset("sm_90", &hw), 0);
    ck_assert_int_eq(hw.num_cores, 132);
    ck_assert_int_eq(hw.cc_major, 9);
    ck_assert_int_eq(kt_hw_params_preset("sm_86", &hw), 0);
    ck_assert_int_eq(hw.cc_minor, 6);

    int n = 0;
    for (const char *const *p = kt_hw_params_preset_names(); *p; p++, n++) {
        ck_assert_int_eq(kt_hw_params_preset(*p, &hw), 0);
        ck_assert_msg(kt_hw_params_validate(&hw) == 0, "%s: %s", *p, kt_err_msg());
    }
    ck_assert_int_eq(n, 6);

    /* The local CPU, detected. */
    ck_assert_int_eq(kt_hw_params_preset("cpu", &hw), 0);
    ck_assert_str_eq(hw.target, "cpu");
    ck_assert_int_ge(hw.num_cores, 1);
    ck_assert_int_eq(hw.cc_major, 0);
    ck_assert_int_eq(hw.max_threads_per_block, 0);
    ck_assert_int_gt(hw.cache_line_bytes, 0);
#if defined(__x86_64__)
    __builtin_cpu_init();
    int want = __builtin_cpu_supports("avx512f") ? 64 : __builtin_cpu_supports("avx2") ? 32 : 16;
    ck_assert_int_eq(hw.vector_unit_bytes, want);
#endif

    ck_assert_int_eq(kt_hw_params_preset("sm_99", &hw), KT_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "sm_99"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "sm_80"));
}
END_TEST

START_TEST(hw_params_parse_arch_accepts_sm_and_compute_forms)
{
    int a = -1, b = -1;
    ck_assert_int_eq(kt_hw_params_parse_arch("sm_90a", &a, &b), 0);
    ck_assert_int_eq(a, 9);
    ck_assert_int_eq(b, 0);
    ck_assert_int_eq(kt_hw_params_parse_arch("compute_86", &a, &b), 0);
    ck_assert_int_eq(a, 8);
    ck_assert_int_eq(b, 6);
    ck_assert_int_eq(kt_hw_params_parse_arch("sm_100", &a, &b), 0);
    ck_assert_int_eq(a, 10);
    ck_assert_int_eq(b, 0);
    const char *bad[] = {"sm_9", "sm90", "sm_090", "sm_80x", "", "sm_", "sm_1000"};
    for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++)
        ck_assert_msg(kt_hw_params_parse_arch(bad[i], &a, &b) == KT_EINVAL, "%s parsed", bad[i]);
}
END_TEST

START_TEST(hw_params_override_applies_all_or_names_bad_key)
{
    kt_hw_params_t hw, before;
    ck_assert_int_eq(kt_hw_params_preset("sm_80", &hw), 0);
    ck_assert_int_eq(kt_hw_params_override(&hw, " max_threads_per_block = 512 ,warp_size=16,"
                                                "arch=sm_86,name=Test GPU"), 0);
    ck_assert_int_eq(hw.max_threads_per_block, 512);
    ck_assert_int_eq(hw.warp_size, 16);
    ck_assert_str_eq(hw.arch, "sm_86");
    ck_assert_int_eq(hw.cc_minor, 6);
    ck_assert_str_eq(hw.name, "Test GPU");
    ck_assert_int_eq(kt_hw_params_override(&hw, ""), 0);

    before = hw;
    /* Unknown key: named, nothing applied (num_cores came first). */
    ck_assert_int_eq(kt_hw_params_override(&hw, "num_cores=10,max_threads=512"), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'max_threads'"));
    ck_assert(kt_hw_params_equal(&hw, &before));
    /* A value that is not an integer names its key. */
    ck_assert_int_eq(kt_hw_params_override(&hw, "warp_size=lots"), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "warp_size"));
    ck_assert_int_eq(kt_hw_params_override(&hw, "num_cores"), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "num_cores"));
    /* Values that parse but make the parameters invalid. */
    ck_assert_int_eq(kt_hw_params_override(&hw, "max_threads_per_block=-1"), KT_EINVAL);
    ck_assert_int_eq(kt_hw_params_override(&hw, "target=gpu"), KT_EINVAL);
    ck_assert_int_eq(kt_hw_params_override(&hw, "arch=sm_x"), KT_EINVAL);
    ck_assert_int_eq(kt_hw_params_override(&hw, "max_shared_memory_per_block=99999999999"),
                     KT_EINVAL);
    ck_assert(kt_hw_params_equal(&hw, &before));
}
END_TEST

START_TEST(hw_params_json_round_trip_and_errors_name_member)
{
    const char *names[] = {"sm_90", "cpu"};
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++) {
        kt_hw_params_t hw, back;
        ck_assert_int_eq(kt_hw_params_preset(names[i], &hw), 0);
        json_t *j = kt_hw_params_to_json(&hw);
        ck_assert_ptr_nonnull(j);
        char *text = json_dumps(j, JSON_SORT_KEYS);
        json_decref(j);
        json_t *parsed = json_loads(text, 0, NULL);
        free(text);
        ck_assert_ptr_nonnull(parsed);
        memset(&back, 0, sizeof back);
        ck_assert_msg(kt_hw_params_from_json(parsed, &back) == 0, "%s", kt_err_msg());
        json_decref(parsed);
        ck_assert(kt_hw_params_equal(&hw, &back));
    }

    /* Members apply onto a base: a preset plus one change. */
    kt_hw_params_t hw;
    ck_assert_int_eq(kt_hw_params_preset("sm_89", &hw), 0);
    json_t *o = json_pack("{s:i}", "max_shared_memory_per_block", 99 * 1024);
    ck_assert_int_eq(kt_hw_params_from_json(o, &hw), 0);
    json_decref(o);
    ck_assert_int_eq(hw.max_shared_memory_per_block, 99 * 1024);
    ck_assert_int_eq(hw.num_cores, 58);

    o = json_pack("{s:i}", "max_blocks", 4);
    ck_assert_int_eq(kt_hw_params_from_json(o, &hw), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'max_blocks'"));
    json_decref(o);
    o = json_pack("{s:s}", "warp_size", "32");
    ck_assert_int_eq(kt_hw_params_from_json(o, &hw), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "warp_size"));
    json_decref(o);
    o = json_pack("[]");
    ck_assert_int_eq(kt_hw_params_from_json(o, &hw), KT_EINVAL);
    json_decref(o);
    ck_assert_int_eq(hw.warp_size, 32);
}
END_TEST

START_TEST(hw_params_device_info_round_trip)
{
    const char *names[] = {"sm_86", "cpu"};
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++) {
        kt_hw_params_t hw, back;
        ck_assert_int_eq(kt_hw_params_preset(names[i], &hw), 0);
        Ktune__V1__DeviceInfo msg;
        kt_hw_params_to_proto(&hw, &msg);
        size_t len = ktune__v1__device_info__get_packed_size(&msg);
        uint8_t *buf = malloc(len + 1);
        ck_assert_ptr_nonnull(buf);
        ktune__v1__device_info__pack(&msg, buf);
        Ktune__V1__DeviceInfo *un = ktune__v1__device_info__unpack(NULL, len, buf);
        free(buf);
        ck_assert_ptr_nonnull(un);
        ck_assert_int_eq(kt_hw_params_from_proto(un, &back), 0);
        ktune__v1__device_info__free_unpacked(un, NULL);
        ck_assert(kt_hw_params_equal(&hw, &back));
    }
    /* A runner registering nonsense is refused. */
    kt_hw_params_t hw;
    ck_assert_int_eq(kt_hw_params_preset("sm_80", &hw), 0);
    Ktune__V1__DeviceInfo bad;
    kt_hw_params_to_proto(&hw, &bad);
    bad.arch = "ampere";
    ck_assert_int_eq(kt_hw_params_from_proto(&bad, &hw), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "ampere"));
    ck_assert_str_eq(hw.arch, "sm_80");
    bad = (Ktune__V1__DeviceInfo)KTUNE__V1__DEVICE_INFO__INIT;
    bad.target = "cuda";
    ck_assert_int_eq(kt_hw_params_from_proto(&bad, &hw), KT_EINVAL);
}
END_TEST

/* ---- NVRTC ---------------------------------------------------------------------------- */

START_TEST(nvrtc_compiles_kernel_to_cubin_with_resource_usage)
{
#if !KT_HAVE_CUDA
    kt_nvrtc_result_t res;
    ck_assert_int_eq(kt_nvrtc_compile(VADD_CU, NULL, NULL, 0, &res), KT_EUNSUP);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "built without CUDA"));
    kt_fail_without_cuda("NVRTC compile tests");
#else
    int major = 0, minor = 0;
    ck_assert_int_eq(kt_nvrtc_version(&major, &minor), 0);
    ck_assert_int_ge(major, 11);
    const char *archs[] = {"sm_80", "sm_90"};
    for (size_t i = 0; i < KT_ARRAY_LEN(archs); i++) {
        kt_nvrtc_result_t res;
        int rc = kt_nvrtc_compile(VADD_CU, archs[i], "--use_fast_math", KT_NVRTC_KEEP_PTX, &res);
        ck_assert_msg(rc == 0, "%s: %s", archs[i], kt_err_msg());
        ck_assert(starts_with_elf(res.cubin, res.cubin_len));
        ck_assert_ptr_nonnull(res.ptx);
        ck_assert_ptr_nonnull(strstr(res.ptx, ".entry vadd"));
        ck_assert_uint_eq(strlen(res.ptx), res.ptx_len);
        /* ptxas -v: this NVRTC reports every entry's usage. */
        const kt_nvrtc_kernel_t *k = kt_nvrtc_result_kernel(&res, "vadd");
        ck_assert_msg(k != NULL, "no usage for vadd in log:\n%s", res.log);
        ck_assert_int_eq(res.n_kernels, 1);
        ck_assert_int_gt(k->registers, 0);
        ck_assert_int_eq(k->spill_store_bytes, 0);
        ck_assert_int_eq(k->spill_load_bytes, 0);
        ck_assert_int_eq(k->static_smem_bytes, 1024);
        kt_nvrtc_result_clear(&res);
    }

    /* Two kernels, no PTX kept; a virtual architecture gives PTX only. */
    kt_nvrtc_result_t res;
    ck_assert_int_eq(kt_nvrtc_compile(VADD_TWO_CU, NULL, NULL, 0, &res), 0);
    ck_assert_ptr_null(res.ptx);
    ck_assert_int_eq(res.n_kernels, 2);
    ck_assert_ptr_nonnull(kt_nvrtc_result_kernel(&res, "copy_a"));
    ck_assert_ptr_nonnull(kt_nvrtc_result_kernel(&res, "add_b"));
    ck_assert_int_eq(kt_nvrtc_result_kernel(&res, "add_b")->static_smem_bytes, 0);
    kt_nvrtc_result_clear(&res);
    ck_assert_int_eq(kt_nvrtc_compile(VADD_CU, "compute_80", NULL, 0, &res), 0);
    ck_assert_ptr_null(res.cubin);
    ck_assert_ptr_nonnull(strstr(res.ptx, ".target sm_80"));
    kt_nvrtc_result_clear(&res);
#endif
}
END_TEST

START_TEST(nvrtc_syntax_error_carries_program_log)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("NVRTC error test");
#else
    kt_nvrtc_result_t res;
    ck_assert_int_eq(kt_nvrtc_compile(SYNTAX_ERROR_CU, "sm_80", NULL, 0, &res), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "compilation failed"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "undeclared_thing"));
    ck_assert_ptr_nonnull(res.log);
    ck_assert_ptr_nonnull(strstr(res.log, "error"));
    ck_assert_ptr_null(res.cubin);
    kt_nvrtc_result_clear(&res);
    /* A refused option is the caller's error too, with NVRTC's word on it. */
    ck_assert_int_eq(kt_nvrtc_compile(VADD_CU, "sm_80", "--no-such-option", 0, &res), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(res.log, "no-such-option"));
    kt_nvrtc_result_clear(&res);
#endif
}
END_TEST

/* The compile in a child (for processes that fork CUDA children later)
 * hands back what the compile in the process gives: the same cubin, PTX and
 * usage, the log; a source error with its log. */
START_TEST(nvrtc_isolated_compile_gives_the_in_process_result)
{
#if !KT_HAVE_CUDA
    kt_nvrtc_result_t res;
    ck_assert_int_eq(kt_nvrtc_compile_isolated(VADD_CU, NULL, NULL, 0, &res), KT_EUNSUP);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "built without CUDA"));
    kt_fail_without_cuda("NVRTC compile tests");
#else
    kt_nvrtc_result_t a, b;
    ck_assert_int_eq(kt_nvrtc_compile(VADD_TWO_CU, "sm_80", NULL, KT_NVRTC_KEEP_PTX, &a), 0);
    ck_assert_int_eq(kt_nvrtc_compile_isolated(VADD_TWO_CU, "sm_80", NULL, KT_NVRTC_KEEP_PTX, &b),
                     0);
    ck_assert_uint_eq(a.cubin_len, b.cubin_len);
    ck_assert(memcmp(a.cubin, b.cubin, a.cubin_len) == 0);
    ck_assert_uint_eq(a.ptx_len, b.ptx_len);
    ck_assert_str_eq(a.ptx, b.ptx);
    /* the logs differ only in ptxas's compile times */
    ck_assert_ptr_nonnull(strstr(b.log, "Compiling entry function 'add_b' for 'sm_80'"));
    ck_assert_int_eq(b.n_kernels, 2);
    ck_assert(memcmp(a.kernels, b.kernels, sizeof(kt_nvrtc_kernel_t) * 2) == 0);
    kt_nvrtc_result_clear(&a);
    kt_nvrtc_result_clear(&b);
    ck_assert_int_eq(kt_nvrtc_compile_isolated(VADD_CU, "compute_80", NULL, 0, &b), 0);
    ck_assert_ptr_null(b.cubin);
    ck_assert_ptr_nonnull(strstr(b.ptx, ".target sm_80"));
    kt_nvrtc_result_clear(&b);
    ck_assert_int_eq(kt_nvrtc_compile_isolated(SYNTAX_ERROR_CU, "sm_80", NULL, 0, &b), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "undeclared_thing"));
    ck_assert_ptr_nonnull(strstr(b.log, "error"));
    ck_assert_ptr_null(b.cubin);
    kt_nvrtc_result_clear(&b);
#endif
}
END_TEST

START_TEST(nvrtc_refuses_architectures_it_cannot_target)
{
#if !KT_HAVE_CUDA
    ck_assert_int_eq(kt_nvrtc_check_arch("sm_80"), KT_EUNSUP);
    kt_fail_without_cuda("NVRTC architecture test");
#else
    int archs[64];
    int n = kt_nvrtc_supported_archs(archs, 64);
    ck_assert_int_gt(n, 0);
    int has70 = 0, has80 = 0;
    for (int i = 0; i < n && i < 64; i++) {
        has70 |= archs[i] == 70;
        has80 |= archs[i] == 80;
    }
    ck_assert(has80);
    ck_assert_int_eq(kt_nvrtc_check_arch("sm_80"), 0);
    /* CUDA 13 dropped Volta: the sm_70 preset then cannot be compiled for. */
    ck_assert_int_eq(kt_nvrtc_check_arch("sm_70"), has70 ? 0 : KT_EINVAL);
    kt_nvrtc_result_t res;
    ck_assert_int_eq(kt_nvrtc_compile(VADD_CU, "sm_10", NULL, 0, &res), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "cannot compile for sm_10"));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "sm_80"));
    kt_nvrtc_result_clear(&res);
    ck_assert_int_eq(kt_nvrtc_compile(VADD_CU, "gfx90a", NULL, 0, &res), KT_EINVAL);
    kt_nvrtc_result_clear(&res);
    if (!has70)
        printf("note: %s\n", (kt_nvrtc_check_arch("sm_70"), kt_err_msg()));
#endif
}
END_TEST

/* ---- builder ---------------------------------------------------------------------------- */

START_TEST(builder_builds_cuda_once_through_the_cache)
{
    kt_builder_opts_t o;
    kt_builder_opts_default(&o);
    o.cuda_arch = "sm_80";
    kt_builder_t *b = kt_builder_new(&o);
    ck_assert_msg(b != NULL, "builder: %s", kt_err_msg());
    kt_build_input_t in = cuda_src(VADD_CU, "vadd");
    kt_build_result_t r = {0};
#if !KT_HAVE_CUDA
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), KT_EUNSUP);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "without CUDA"));
    kt_fail_without_cuda("builder CUDA path");
#else
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_msg(r.error_no == KT_MEASURE_NO_ERROR, "%s", r.error_msg ? r.error_msg : "");
    ck_assert(starts_with_elf(r.artifact, r.artifact_len));
    ck_assert_int_eq(r.cached, 0);
    uint64_t hash = r.artifact_hash;
    kt_build_result_clear(&r);
    kt_builder_stats_t st;
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);

    /* The second build is a cache hit: no NVRTC run. */
    ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
    ck_assert_int_eq(r.error_no, KT_MEASURE_NO_ERROR);
    ck_assert_int_eq(r.cached, 1);
    ck_assert_uint_eq(r.artifact_hash, hash);
    kt_build_result_clear(&r);
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 1);

    /* The same source for the CPU target is another key. */
    kt_build_input_t cpu = in;
    cpu.target = KT_MEASURE_TARGET_CPU;
    ck_assert_uint_ne(kt_builder_key(b, &in), kt_builder_key(b, &cpu));

    /* Bad source: COMPILE_DEVICE with NVRTC's log, cached too. A mixed batch
     * builds CPU and CUDA candidates side by side. */
    kt_build_input_t mix[2] = {cuda_src(SYNTAX_ERROR_CU, "vadd"),
                               {.target = KT_MEASURE_TARGET_CPU, .source = VADD_REF_C,
                                .entry = "vadd_ref"}};
    kt_build_result_t mr[2] = {{0}};
    ck_assert_int_eq(kt_builder_build(b, mix, 2, mr), 0);
    ck_assert_int_eq(mr[0].error_no, KT_MEASURE_COMPILE_DEVICE);
    ck_assert_ptr_nonnull(strstr(mr[0].error_msg, "undeclared_thing"));
    ck_assert_int_eq(mr[1].error_no, KT_MEASURE_NO_ERROR);
    ck_assert(starts_with_elf(mr[1].artifact, mr[1].artifact_len));
    kt_build_result_clear(&mr[0]);
    kt_build_result_clear(&mr[1]);
    ck_assert_int_eq(kt_builder_build(b, mix, 1, mr), 0);
    ck_assert_int_eq(mr[0].error_no, KT_MEASURE_COMPILE_DEVICE);
    ck_assert_int_eq(mr[0].cached, 1);
    kt_build_result_clear(&mr[0]);
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.compiles, 3);
#endif
    kt_builder_free(b);
}
END_TEST

START_TEST(builder_cuda_options_checked_and_timeout_kills_nvrtc)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("builder CUDA options");
#else
    kt_builder_opts_t o;
    kt_builder_opts_default(&o);
    o.cuda_arch = "sm_10";
    ck_assert_ptr_null(kt_builder_new(&o));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "sm_10"));
    o.cuda_arch = "compute_80";
    ck_assert_ptr_null(kt_builder_new(&o));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "real architecture"));

    /* A millisecond is far less than any NVRTC run takes: the child is
     * killed, and the timeout is not cached. */
    o.cuda_arch = NULL;
    o.timeout = 0.001;
    kt_builder_t *b = kt_builder_new(&o);
    ck_assert_ptr_nonnull(b);
    kt_build_input_t in = cuda_src(VADD_CU, "vadd");
    kt_build_result_t r = {0};
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(kt_builder_build(b, &in, 1, &r), 0);
        ck_assert_int_eq(r.error_no, KT_MEASURE_BUILD_TIMEOUT);
        ck_assert_int_eq(r.cached, 0);
        kt_build_result_clear(&r);
    }
    kt_builder_stats_t st;
    kt_builder_stats(b, &st);
    ck_assert_uint_eq(st.timeouts, 2);
    kt_builder_free(b);
#endif
}
END_TEST

/* ---- runner ------------------------------------------------------------------------------ */

START_TEST(runner_without_cuda_device_refuses_cuda_candidates)
{
    kt_runner_t *r = kt_runner_new(NULL);
    ck_assert_ptr_nonnull(r);
    static const unsigned char fake[] = "\x7f" "ELF";
    kt_run_input_t in = {.target = KT_MEASURE_TARGET_CUDA,
                         .prog = {.data = fake, .len = 4, .entry = "vadd"},
                         .layout = layout3(N),
                         .launch = {.grid = {4, 1, 1}, .block = {256, 1, 1}}};
    kt_measure_result_t out = {0};
    ck_assert_int_eq(kt_runner_run(r, &in, 1, &out), KT_EUNSUP);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device"));
    ck_assert_ptr_null(out.costs);
    kt_runner_free(r);
}
END_TEST

START_TEST(cuda_runner_reports_why_there_is_no_device)
{
    kt_cuda_runner_opts_t o;
    kt_cuda_runner_opts_default(&o);
#if !KT_HAVE_CUDA
    ck_assert_ptr_null(kt_cuda_runner_new(&o));
    ck_assert_int_eq(kt_err_code(), KT_EUNSUP);
    kt_fail_without_cuda("CUDA runner");
#else
    /* The toolkit's stub loads but answers cuInit with CUDA_ERROR_STUB_LIBRARY. */
    char stub[512];
    snprintf(stub, sizeof stub, "%s/lib64/stubs/libcuda.so", KT_CUDA_PATH);
    if (access(stub, R_OK) == 0) {
        o.driver_lib = stub;
        ck_assert_ptr_null(kt_cuda_runner_new(&o));
        ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
        ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device (cuInit failed"));
        ck_assert_ptr_nonnull(strstr(kt_err_msg(), "CUDA_ERROR_STUB_LIBRARY"));
    } else {
        printf("note: no stub at %s\n", stub);
    }
    o.driver_lib = "/nonexistent/libcuda.so.1";
    ck_assert_ptr_null(kt_cuda_runner_new(&o));
    ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device (cannot load the CUDA driver"));

    /* The real driver: a device, or the reason there is none. */
    o.driver_lib = NULL;
    kt_cuda_runner_t *c = kt_cuda_runner_new(&o);
    if (!c) {
        ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
        ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device"));
        KT_SKIP_NO_GPU("%s", kt_err_msg());
    }
    const kt_hw_params_t *hw = kt_cuda_runner_hw_params(c);
    ck_assert_str_eq(hw->target, "cuda");
    ck_assert_int_gt(hw->num_cores, 0);
    ck_assert_int_gt(hw->max_threads_per_block, 0);
    ck_assert_int_eq(kt_hw_params_validate(hw), 0);
    printf("CUDA device 0: %s (%s, %d SMs)\n", hw->name, hw->arch, hw->num_cores);
    kt_cuda_runner_free(c);
#endif
}
END_TEST

#if KT_HAVE_CUDA
/* Build one source, which must succeed; the caller clears the result. */
static void build_ok(kt_builder_t *b, kt_build_input_t in, kt_build_result_t *out)
{
    ck_assert_int_eq(kt_builder_build(b, &in, 1, out), 0);
    ck_assert_msg(out->error_no == 0, "build: %s", out->error_msg ? out->error_msg : "");
}

/* The planted programs of one batch, built for the device at hand. */
typedef struct {
    kt_build_result_t good, wrong, fault, two, ref;
} planted_t;

static void planted_clear(planted_t *p)
{
    kt_build_result_clear(&p->good);
    kt_build_result_clear(&p->wrong);
    kt_build_result_clear(&p->fault);
    kt_build_result_clear(&p->two);
    kt_build_result_clear(&p->ref);
}

/* One batch through the CUDA runner: a good kernel, a wrong one, one that
 * faults (losing the child's context), the good one again, a two-kernel
 * candidate, zero launch dimensions and a block too large for the device. */
static void check_fault_batch(kt_cuda_runner_t *c, const planted_t *p)
{
    kt_artifact_t rart = {p->ref.artifact, p->ref.artifact_len, p->ref.artifact_hash, "vadd_ref"};
    kt_cuda_launch_t one = {.grid = {N / 256, 1, 1}, .block = {256, 1, 1}};
    kt_cuda_launch_t pair[2] = {{.name = "copy_a", .grid = {N / 256, 1, 1}, .block = {256, 1, 1}},
                                {.name = "add_b", .grid = {N / 128, 1, 1}, .block = {128, 1, 1}}};
    kt_cuda_launch_t zero = {.grid = {0, 1, 1}, .block = {256, 1, 1}};
    kt_cuda_launch_t huge = {.grid = {1, 1, 1}, .block = {4096, 1, 1}};
#define CAND(art, ent, l)                                                                  \
    {.target = KT_MEASURE_TARGET_CUDA,                                                     \
     .prog = {(art).artifact, (art).artifact_len, (art).artifact_hash, ent}, .ref = rart, \
     .layout = layout3(N), .launch = l}
    kt_run_input_t in[7] = {
        CAND(p->good, "vadd", one), CAND(p->wrong, "vadd", one), CAND(p->fault, "vadd", one),
        CAND(p->good, "vadd", one), CAND(p->two, NULL, one),     CAND(p->good, "vadd", zero),
        CAND(p->good, "vadd", huge),
    };
#undef CAND
    in[4].launches = pair;
    in[4].n_launches = 2;
    const int want[7] = {KT_MEASURE_NO_ERROR, KT_MEASURE_WRONG_ANSWER, KT_MEASURE_RUNTIME_DEVICE,
                         KT_MEASURE_NO_ERROR, KT_MEASURE_NO_ERROR,
                         KT_MEASURE_INSTANTIATION_ERROR, KT_MEASURE_RUNTIME_DEVICE};
    kt_measure_result_t out[7] = {{0}};
    kt_runner_t *r = kt_cuda_runner_runner(c);
    uint64_t children = kt_runner_children_started(r);
    ck_assert_int_eq(kt_runner_run(r, in, 7, out), 0);
    for (int i = 0; i < 7; i++) {
        ck_assert_msg(out[i].error_no == want[i], "candidate %d: %s %s", i,
                      kt_measure_error_name(out[i].error_no),
                      out[i].error_msg ? out[i].error_msg : "");
        if (want[i] == KT_MEASURE_NO_ERROR) {
            ck_assert_int_eq(out[i].n_costs, 2);
            ck_assert(out[i].costs[0] > 0 && out[i].costs[1] > 0);
            ck_assert(out[i].max_error >= 0 && out[i].max_error <= 1e-4);
            ck_assert_int_ge(out[i].number, 1);
        }
    }
    /* An illegal address on a GPU (some parts may call it a launch failure). */
    ck_assert_ptr_nonnull(strstr(out[2].error_msg, "CUDA_ERROR_"));
    ck_assert_ptr_nonnull(strstr(out[5].error_msg, "at least 1"));
    ck_assert_ptr_nonnull(strstr(out[6].error_msg, "cuLaunchKernel(vadd"));
    for (int i = 0; i < 7; i++)
        kt_measure_result_clear(&out[i]);
    /* The fault lost the first child's context: a second child measured the rest. */
    ck_assert_uint_eq(kt_runner_children_started(r) - children, 2);
}
#endif

START_TEST(cuda_runner_on_gpu_measures_checks_and_survives_faults)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("GPU measurement");
#else
    kt_cuda_runner_opts_t o;
    kt_cuda_runner_opts_default(&o);
    o.run.min_repeat_ms = 1;
    o.run.repeat = 2;
    kt_cuda_runner_t *c = kt_cuda_runner_new(&o);
    if (!c) {
        ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
        ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device"));
        KT_SKIP_NO_GPU("%s", kt_err_msg());
    }
    const kt_hw_params_t *hw = kt_cuda_runner_hw_params(c);
    /* A GPU the toolkit cannot compile for is a failure, not a skip. */
    ck_assert_msg(kt_nvrtc_check_arch(hw->arch) == 0, "GPU %s (%s): %s", hw->name, hw->arch,
                  kt_err_msg());
    kt_builder_opts_t bo;
    kt_builder_opts_default(&bo);
    bo.cuda_arch = hw->arch;
    kt_builder_t *b = kt_builder_new(&bo);
    ck_assert_ptr_nonnull(b);
    planted_t p;
    build_ok(b, cuda_src(VADD_CU, "vadd"), &p.good);
    build_ok(b, cuda_src(VADD_WRONG_CU, "vadd"), &p.wrong);
    build_ok(b, cuda_src(VADD_FAULT_CU, "vadd"), &p.fault);
    build_ok(b, cuda_src(VADD_TWO_CU, "copy_a"), &p.two);
    build_ok(b, (kt_build_input_t){.target = KT_MEASURE_TARGET_CPU, .source = VADD_REF_C,
                                   .entry = "vadd_ref"}, &p.ref);
    check_fault_batch(c, &p);
    planted_clear(&p);
    kt_builder_free(b);
    kt_cuda_runner_free(c);
#endif
}
END_TEST

#if KT_HAVE_CUDA
/* An emulation of the Driver API subset the runner uses, on the CPU, so its
 * CUDA path (driver loading, probe, module load, launches, events, the
 * correctness check, sticky errors and child replacement) runs without a
 * GPU. A "cubin" is a CPU shared object whose kernels take the launch's
 * parameter array and dimensions and emulate the whole grid; a kernel
 * returning non-zero is a fault that, as on a GPU, fails every later call. */
static const char *EMU_DRIVER =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n#include <elf.h>\n#include <stdint.h>\n#include <stdio.h>\n"
    "#include <stdlib.h>\n#include <string.h>\n#include <sys/mman.h>\n#include <time.h>\n"
    "#include <unistd.h>\n"
    "typedef unsigned long long dptr;\n"
    "typedef int (*kernel)(void **, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned);\n"
    "static int lost;\n"
    "#define CHECK() do { if (lost) return E_ILLEGAL; } while (0)\n"
    "int cuGetErrorName(int e, const char **s) {\n"
    "  *s = e == E_ILLEGAL ? \"CUDA_ERROR_ILLEGAL_ADDRESS\" : e == E_INVALID ?\n"
    "       \"CUDA_ERROR_INVALID_VALUE\" : \"CUDA_ERROR_NOT_FOUND\"; return 0; }\n"
    "int cuGetErrorString(int e, const char **s) { (void)e; *s = \"emulated\"; return 0; }\n"
    "int cuInit(unsigned f) { (void)f; return 0; }\n"
    "int cuDeviceGetCount(int *n) { *n = 1; return 0; }\n"
    "int cuDeviceGet(int *d, int i) { if (i != 0) return E_INVALID; *d = 0; return 0; }\n"
    "int cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, (size_t)n, \"Emulated GPU\");"
    " return 0; }\n"
    "int cuDeviceGetAttribute(int *v, int a, int d) { (void)d;\n"
    "  *v = a == A_SMS ? 4 : a == A_MAJOR ? 8 : a == A_MINOR ? 0 : a == A_SHARED ? 49152 :\n"
    "       a == A_THREADS ? 1024 : a == A_WARP ? 32 : a == A_CLOCK ? 1000000 :\n"
    "       a == A_L2 ? (1 << 20) : 0; return 0; }\n"
    "int cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)1 << 30; return 0; }\n"
    "int cuDevicePrimaryCtxRetain(void **c, int d) { static int ctx; (void)d; *c = &ctx; return 0; }\n"
    "int cuCtxSetCurrent(void *c) { (void)c; return 0; }\n"
    "int cuCtxSynchronize(void) { CHECK(); return 0; }\n"
    "int cuModuleLoadData(void **m, const void *image) { CHECK();\n"
    "  const Elf64_Ehdr *h = image;\n"
    "  size_t len = h->e_shoff + (size_t)h->e_shnum * h->e_shentsize;\n"
    "  int fd = memfd_create(\"emulated-cubin\", 0);\n"
    "  if (fd < 0 || write(fd, image, len) != (ssize_t)len) return E_INVALID;\n"
    "  char path[64]; snprintf(path, sizeof path, \"/proc/self/fd/%d\", fd);\n"
    "  *m = dlopen(path, RTLD_NOW | RTLD_LOCAL); return *m ? 0 : E_INVALID; }\n"
    "int cuModuleUnload(void *m) { (void)m; return 0; }\n"
    "int cuModuleGetFunction(void **f, void *m, const char *name) { CHECK();\n"
    "  *f = dlsym(m, name); return *f ? 0 : E_NOT_FOUND; }\n"
    "int cuFuncSetAttribute(void *f, int a, int v) { (void)f; (void)a; return v > 49152 ? E_INVALID"
    " : 0; }\n"
    "int cuMemAlloc_v2(dptr *p, size_t n) { CHECK(); void *q = malloc(n); if (!q) return 2;\n"
    "  *p = (dptr)(uintptr_t)q; return 0; }\n"
    "int cuMemFree_v2(dptr p) { free((void *)(uintptr_t)p); return 0; }\n"
    "int cuMemcpyHtoD_v2(dptr d, const void *s, size_t n) { CHECK();\n"
    "  memcpy((void *)(uintptr_t)d, s, n); return 0; }\n"
    "int cuMemcpyDtoH_v2(void *d, dptr s, size_t n) { CHECK();\n"
    "  memcpy(d, (void *)(uintptr_t)s, n); return 0; }\n"
    "int cuMemsetD8_v2(dptr d, unsigned char v, size_t n) { CHECK();\n"
    "  memset((void *)(uintptr_t)d, v, n); return 0; }\n"
    "int cuMemsetD32_v2(dptr d, unsigned v, size_t n) { CHECK();\n"
    "  unsigned *p = (unsigned *)(uintptr_t)d; for (size_t i = 0; i < n; i++) p[i] = v; return 0; }\n"
    "int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n"
    "                   unsigned bz, unsigned shm, void *st, void **params, void **extra) {\n"
    "  (void)shm; (void)st; (void)extra; CHECK();\n"
    "  if ((unsigned long long)bx * by * bz > 1024) return E_INVALID;\n"
    "  kernel k; memcpy(&k, &f, sizeof k);\n"
    "  if (k(params, gx, gy, gz, bx, by, bz) != 0) lost = 1; return 0; }\n"
    "int cuEventCreate(void **e, unsigned f) { (void)f; CHECK(); *e = calloc(1, sizeof(double));"
    " return 0; }\n"
    "int cuEventRecord(void *e, void *s) { (void)s; CHECK(); struct timespec ts;\n"
    "  clock_gettime(CLOCK_MONOTONIC, &ts); *(double *)e = ts.tv_sec + ts.tv_nsec * 1e-9;"
    " return 0; }\n"
    "int cuEventSynchronize(void *e) { (void)e; CHECK(); return 0; }\n"
    "int cuEventElapsedTime_v2(float *ms, void *a, void *b) { CHECK();\n"
    "  *ms = (float)((*(double *)b - *(double *)a) * 1e3); return 0; }\n"
    "int cuEventDestroy_v2(void *e) { free(e); return 0; }\n";

/* Emulated kernels: buffers through the parameter array, the grid in a loop. */
#define EMU_HEAD                                                                        \
    "(void **p, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {\n" \
    "  float *a = *(float **)p[0], *b = *(float **)p[1], *c = *(float **)p[2];\n"         \
    "  unsigned n = gx * gy * gz * bx * by * bz;\n"
static const char *EMU_VADD = "int vadd" EMU_HEAD
    "  for (unsigned i = 0; i < n; i++) c[i] = a[i] + b[i];\n  return 0;\n}\n";
static const char *EMU_WRONG = "int vadd" EMU_HEAD
    "  for (unsigned i = 0; i < n; i++) c[i] = a[i] - b[i];\n  return 0;\n}\n";
static const char *EMU_FAULT = "int vadd" EMU_HEAD
    "  (void)a; (void)b; (void)c; (void)n;\n  return 1;\n}\n";
static const char *EMU_TWO = "int copy_a" EMU_HEAD
    "  (void)b; for (unsigned i = 0; i < n; i++) c[i] = a[i];\n  return 0;\n}\n"
    "int add_b" EMU_HEAD
    "  (void)a; for (unsigned i = 0; i < n; i++) c[i] += b[i];\n  return 0;\n}\n";

static kt_build_input_t cpu_src(const char *src, const char *entry)
{
    return (kt_build_input_t){.target = KT_MEASURE_TARGET_CPU, .source = src, .entry = entry};
}
#endif

START_TEST(cuda_runner_path_runs_against_emulated_driver)
{
#if !KT_HAVE_CUDA
    kt_fail_without_cuda("CUDA runner path");
#else
    /* The emulated driver, with the attribute and error numbers of cuda.h. */
    char defs[512];
    snprintf(defs, sizeof defs,
             "#define A_SMS %d\n#define A_MAJOR %d\n#define A_MINOR %d\n#define A_SHARED %d\n"
             "#define A_THREADS %d\n#define A_WARP %d\n#define A_CLOCK %d\n#define A_L2 %d\n"
             "#define E_ILLEGAL %d\n#define E_INVALID %d\n#define E_NOT_FOUND %d\n",
             CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
             CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
             CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_WARP_SIZE,
             CU_DEVICE_ATTRIBUTE_CLOCK_RATE, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
             CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND);
    size_t dl = strlen(defs), el = strlen(EMU_DRIVER);
    char *driver_src = malloc(dl + el + 1);
    ck_assert_ptr_nonnull(driver_src);
    memcpy(driver_src, defs, dl);
    memcpy(driver_src + dl, EMU_DRIVER, el + 1);

    kt_builder_t *b = kt_builder_new(NULL);
    ck_assert_ptr_nonnull(b);
    kt_build_result_t drv;
    build_ok(b, cpu_src(driver_src, "cuInit"), &drv);
    free(driver_src);
    char dir[] = "/tmp/kt_cuda_emuXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char lib[256];
    snprintf(lib, sizeof lib, "%s/libcuda-emulated.so", dir);
    ck_assert_int_eq(kt_file_write(lib, drv.artifact, drv.artifact_len), 0);
    kt_build_result_clear(&drv);

    kt_cuda_runner_opts_t o;
    kt_cuda_runner_opts_default(&o);
    o.run.min_repeat_ms = 1;
    o.run.repeat = 2;
    o.driver_lib = lib;
    kt_cuda_runner_t *c = kt_cuda_runner_new(&o);
    ck_assert_msg(c != NULL, "%s", kt_err_msg());
    /* The probe read the device's attributes. */
    const kt_hw_params_t *hw = kt_cuda_runner_hw_params(c);
    ck_assert_str_eq(hw->name, "Emulated GPU");
    ck_assert_str_eq(hw->arch, "sm_80");
    ck_assert_int_eq(hw->num_cores, 4);
    ck_assert_int_eq(hw->max_threads_per_block, 1024);
    ck_assert_int_eq(hw->max_vthread_extent, 8);
    ck_assert_int_eq(hw->clock_khz, 1000000);
    ck_assert_int_eq(hw->memory_bytes, (int64_t)1 << 30);
    o.device = 1;
    ck_assert_ptr_null(kt_cuda_runner_new(&o));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "no CUDA device 1 (the driver reports 1)"));

    planted_t p;
    build_ok(b, cpu_src(EMU_VADD, "vadd"), &p.good);
    build_ok(b, cpu_src(EMU_WRONG, "vadd"), &p.wrong);
    build_ok(b, cpu_src(EMU_FAULT, "vadd"), &p.fault);
    build_ok(b, cpu_src(EMU_TWO, "copy_a"), &p.two);
    build_ok(b, cpu_src(VADD_REF_C, "vadd_ref"), &p.ref);
    check_fault_batch(c, &p);
    kt_cuda_runner_free(c);

    /* With the L2 flush each run is timed alone; a missing kernel and too
     * much dynamic shared memory are the device's errors. */
    o.device = 0;
    o.enable_l2_flush = 1;
    c = kt_cuda_runner_new(&o);
    ck_assert_ptr_nonnull(c);
    kt_cuda_launch_t one = {.grid = {4, 1, 1}, .block = {256, 1, 1}};
    kt_cuda_launch_t big = {.grid = {4, 1, 1}, .block = {256, 1, 1}, .shared_bytes = 1 << 20};
    kt_artifact_t prog = {p.good.artifact, p.good.artifact_len, p.good.artifact_hash, "vadd"};
    kt_artifact_t ref = {p.ref.artifact, p.ref.artifact_len, p.ref.artifact_hash, "vadd_ref"};
    kt_run_input_t in[3] = {
        {.target = KT_MEASURE_TARGET_CUDA, .prog = prog, .ref = ref, .layout = layout3(N),
         .launch = one, .workspace_bytes = 4096},
        {.target = KT_MEASURE_TARGET_CUDA, .prog = prog, .layout = layout3(N), .launch = one},
        {.target = KT_MEASURE_TARGET_CUDA, .prog = prog, .layout = layout3(N), .launch = big},
    };
    in[1].prog.entry = "no_such_kernel";
    kt_measure_result_t out[3] = {{0}};
    ck_assert_int_eq(kt_runner_run(kt_cuda_runner_runner(c), in, 3, out), 0);
    ck_assert_msg(out[0].error_no == 0, "%s", out[0].error_msg ? out[0].error_msg : "");
    ck_assert(out[0].mean > 0);
    ck_assert_int_eq(out[1].error_no, KT_MEASURE_RUNTIME_DEVICE);
    ck_assert_ptr_nonnull(strstr(out[1].error_msg, "cuModuleGetFunction(no_such_kernel)"));
    ck_assert_int_eq(out[2].error_no, KT_MEASURE_RUNTIME_DEVICE);
    ck_assert_ptr_nonnull(strstr(out[2].error_msg, "cuFuncSetAttribute"));
    for (int i = 0; i < 3; i++)
        kt_measure_result_clear(&out[i]);
    ck_assert_uint_eq(kt_runner_children_started(kt_cuda_runner_runner(c)), 1);
    kt_cuda_runner_free(c);

    planted_clear(&p);
    kt_builder_free(b);
    unlink(lib);
    rmdir(dir);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, hw_params_presets_hold_reference_values);
    tcase_add_test(tc, hw_params_parse_arch_accepts_sm_and_compute_forms);
    tcase_add_test(tc, hw_params_override_applies_all_or_names_bad_key);
    tcase_add_test(tc, hw_params_json_round_trip_and_errors_name_member);
    tcase_add_test(tc, hw_params_device_info_round_trip);
    tcase_add_test(tc, nvrtc_compiles_kernel_to_cubin_with_resource_usage);
    tcase_add_test(tc, nvrtc_syntax_error_carries_program_log);
    tcase_add_test(tc, nvrtc_isolated_compile_gives_the_in_process_result);
    tcase_add_test(tc, nvrtc_refuses_architectures_it_cannot_target);
    tcase_add_test(tc, builder_builds_cuda_once_through_the_cache);
    tcase_add_test(tc, builder_cuda_options_checked_and_timeout_kills_nvrtc);
    tcase_add_test(tc, runner_without_cuda_device_refuses_cuda_candidates);
    tcase_add_test(tc, cuda_runner_reports_why_there_is_no_device);
    tcase_add_test(tc, cuda_runner_path_runs_against_emulated_driver);
    tcase_add_test(tc, cuda_runner_on_gpu_measures_checks_and_survives_faults);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
