/*
 * Hardware parameters of a measurement target (TVM's HardwareParams plus the
 * device's identity): what the search policy needs to know about a CPU or a
 * GPU to generate valid, sensible schedules, and what a runner reports about
 * its device when it registers (proto DeviceInfo).
 *
 * Sources of a kt_hw_params_t:
 *   - built-in presets for NVIDIA GPUs by architecture ("sm_70" ... "sm_90",
 *     each the values of a reference part, see kt_hw_params_preset());
 *   - the local CPU, detected ("cpu");
 *   - a CUDA runner reading its device (cuda_runner.h);
 *   - JSON (records, CLI files) and DeviceInfo messages (RPC), hw_params_json.h;
 * and overrides from a "key=value,key=value" string (CLI --hw).
 *
 * Shared memory: max_shared_memory_per_block is the 48 KiB every CUDA device
 * gives a block without opting in (static __shared__ arrays may not exceed
 * it); the sketches plan shared-memory staging within this limit. Larger
 * dynamic allocations need cuFuncSetAttribute opt-in (up to 96 KiB on sm_70,
 * 163 KiB on sm_80, 99 KiB on sm_86/sm_89, 227 KiB on sm_90); schedules that
 * want them can raise the limit with an override.
 *
 * This header is the plain value and what needs nothing but libc; the
 * schedule state (common/sched) includes it. The JSON and DeviceInfo
 * conversions are in hw_params_json.h.
 *
 * A kt_hw_params_t is a plain value (fixed-size strings, no pointers): copy it
 * freely, nothing to free. Everything here is thread-safe.
 */
#ifndef KT_MEASURE_HW_PARAMS_H
#define KT_MEASURE_HW_PARAMS_H

#include <stdint.h>

/* String field sizes, NUL included. */
#define KT_HW_TARGET_LEN 16
#define KT_HW_ARCH_LEN 32
#define KT_HW_NAME_LEN 128

/* TVM's max_local_memory_per_block for GPUs: CUDA sets no per-block limit on
 * local memory, so the check is disabled with INT32_MAX. */
#define KT_HW_NO_LOCAL_MEMORY_LIMIT 2147483647

typedef struct {
    char target[KT_HW_TARGET_LEN];   /* "cpu" or "cuda" */
    char arch[KT_HW_ARCH_LEN];       /* "sm_90" (cuda); "x86-64-v4"... or "" (cpu) */
    char name[KT_HW_NAME_LEN];       /* "NVIDIA H100 80GB HBM3", CPU model name */
    int num_cores;                   /* CPU cores, or streaming multiprocessors */
    int vector_unit_bytes;           /* SIMD width (cpu); widest vector load (cuda: 16) */
    int cache_line_bytes;
    int max_shared_memory_per_block; /* bytes without opt-in (see above); 0 on cpu */
    int max_local_memory_per_block;  /* bytes; KT_HW_NO_LOCAL_MEMORY_LIMIT on cuda, 0 on cpu */
    int max_threads_per_block;       /* 0 on cpu */
    int max_vthread_extent;          /* TVM's warp_size / 4 on cuda; 0 on cpu */
    int warp_size;                   /* 0 on cpu */
    int cc_major, cc_minor;          /* compute capability, derived from arch; 0 on cpu */
    int64_t clock_khz;               /* peak clock; 0 = unknown */
    int64_t memory_bytes;            /* device (or host) memory; 0 = unknown */
} kt_hw_params_t;

/* ---- presets ---- */

/* The parameters named `name`: "cpu" (the local CPU, detected) or a CUDA
 * architecture "sm_70", "sm_80", "sm_86", "sm_89", "sm_90" (reference parts:
 * V100, A100, RTX 3090, L4, H100 SXM). KT_ENOTFOUND naming the known presets
 * otherwise. */
int kt_hw_params_preset(const char *name, kt_hw_params_t *out);
/* The preset names, NULL-terminated. */
const char *const *kt_hw_params_preset_names(void);
/* The local CPU: online cores, vector width from the CPU's features (64 with
 * AVX-512, 32 with AVX2, 16 otherwise), L1 line size (64 when unknown). */
void kt_hw_params_local_cpu(kt_hw_params_t *out);

/* ---- checks ---- */

/* "sm_90" / "sm_90a" / "compute_86" -> (9, 0) / (9, 0) / (8, 6). KT_EINVAL
 * for anything else. */
int kt_hw_params_parse_arch(const char *arch, int *major, int *minor);
/* 0 when the values are consistent (target known, CUDA arch parses and
 * matches cc_major/cc_minor, counts in range); KT_EINVAL naming the field. */
int kt_hw_params_validate(const kt_hw_params_t *hw);
/* 1 when every field is equal. */
int kt_hw_params_equal(const kt_hw_params_t *a, const kt_hw_params_t *b);

/* ---- overrides ---- */

/* Set one field by its name (the JSON key) from text. Setting "arch" also
 * sets cc_major/cc_minor. KT_EINVAL naming the key when it is unknown or the
 * value does not parse or is out of range; hw is unchanged then. */
int kt_hw_params_set(kt_hw_params_t *hw, const char *key, const char *value);
/* Apply "key=value,key=value" (blanks around keys and values ignored; values
 * cannot contain commas) and validate the result; all or nothing. */
int kt_hw_params_override(kt_hw_params_t *hw, const char *spec);

#endif
