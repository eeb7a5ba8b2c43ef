/*
 * CUDA C++ source -> cubin through NVRTC, the runtime compilation library of
 * the CUDA toolkit, for one GPU architecture. It is what the builder runs for
 * KT_MEASURE_TARGET_CUDA candidates (in a child process; see builder.h); it
 * does not load or run anything (cuda_runner.h does).
 *
 * Compilation: nvrtcCompileProgram with --gpu-architecture=<arch> and the
 * caller's options. A real architecture (sm_XY) yields a cubin and, with
 * KT_NVRTC_KEEP_PTX, the PTX NVRTC generated on the way (NVRTC keeps it; no
 * second compile); a virtual one (compute_XY) yields PTX only. An
 * architecture this NVRTC cannot target (CUDA 13 dropped sm_50...sm_72, so
 * the sm_70 preset cannot be compiled for) is refused before compiling with
 * the supported list in the message.
 *
 * Resource usage: for real architectures ptxas runs with -v and its info
 * lines in the program log are parsed per kernel (entry function): registers,
 * spill store/load bytes, stack frame bytes and static shared memory bytes.
 * ptxas prints them for every entry with NVRTC 11 to 13; a field it did not
 * print stays -1. Kernels are named as ptxas names them: the plain name for
 * extern "C" kernels, the mangled one otherwise.
 *
 * Without the toolkit (KT_HAVE_CUDA 0) every function returns KT_EUNSUP with
 * "built without CUDA".
 *
 * Ownership: results own their buffers (kt_nvrtc_result_clear()).
 * Thread-safety: all functions may be called from several threads (NVRTC
 * programs are per call).
 */
#ifndef KT_MEASURE_NVRTC_H
#define KT_MEASURE_NVRTC_H

#include <stddef.h>

/* Architecture used when the caller names none. */
#define KT_NVRTC_DEFAULT_ARCH "sm_90"
/* Flag: keep the PTX of a real-architecture compile in the result. */
#define KT_NVRTC_KEEP_PTX 1
/* Most bytes of program log put in an error message (the head; the result
 * keeps the whole log). */
#define KT_NVRTC_MAX_MSG 8192

/* Resource usage of one kernel as ptxas reported it; -1 = not reported. */
typedef struct {
    char name[256];
    int registers;
    int spill_store_bytes;
    int spill_load_bytes;
    int stack_bytes;
    int static_smem_bytes;
} kt_nvrtc_kernel_t;

typedef struct {
    unsigned char *cubin;       /* ELF bytes; NULL for a virtual architecture */
    size_t cubin_len;
    char *ptx;                  /* NUL-terminated; NULL unless kept or virtual */
    size_t ptx_len;             /* excluding the NUL */
    char *log;                  /* NVRTC's program log ("" when it printed nothing) */
    kt_nvrtc_kernel_t *kernels; /* in the order ptxas compiled them */
    int n_kernels;
} kt_nvrtc_result_t;

/* ---- version and architectures ---- */

/* NVRTC's version. */
int kt_nvrtc_version(int *major, int *minor);
/* The architectures NVRTC can target as numbers (75 = sm_75), ascending,
 * into archs[0..max); returns how many there are (may exceed max). */
int kt_nvrtc_supported_archs(int *archs, int max);
/* 0 when `arch` (sm_XY[a|f] or compute_XY[a|f]) parses and NVRTC supports it;
 * KT_EINVAL naming the supported ones otherwise. */
int kt_nvrtc_check_arch(const char *arch);

/* ---- compile ---- */

/* Compile `source` for `arch` (NULL = KT_NVRTC_DEFAULT_ARCH) with extra
 * NVRTC options `options` (blank-separated words, no quoting; NULL = none)
 * into *out (cleared first). flags: KT_NVRTC_KEEP_PTX or 0.
 * Returns 0; KT_EINVAL when the source does not compile (the message holds
 * the head of the log, out->log all of it) or arch/options are refused;
 * KT_ENOMEM; KT_EINTERNAL for other NVRTC failures; KT_EUNSUP without CUDA.
 * On failure out holds at most the log. */
int kt_nvrtc_compile(const char *source, const char *arch, const char *options, int flags,
                     kt_nvrtc_result_t *out);

/* kt_nvrtc_compile in a child process, the result passed back through a
 * pipe: same returns, same result. For a process that forks CUDA children
 * afterwards (the runner's measuring processes): NVRTC's compile can leave
 * the CUDA driver initialized in the calling process, after which cuInit
 * fails with CUDA_ERROR_NOT_INITIALIZED in every child it forks. KT_EIO when
 * the child cannot be made or ends without an answer. */
int kt_nvrtc_compile_isolated(const char *source, const char *arch, const char *options,
                              int flags, kt_nvrtc_result_t *out);

/* The kernel named `name` in a result, or NULL. */
const kt_nvrtc_kernel_t *kt_nvrtc_result_kernel(const kt_nvrtc_result_t *r, const char *name);

void kt_nvrtc_result_clear(kt_nvrtc_result_t *r);

/* ---- identity ---- */

/* A string that changes whenever the NVRTC library does (version, resolved
 * path, size and mtime of libnvrtc), for build cache keys. Malloc'd; NULL
 * with kt_err set (KT_EUNSUP without CUDA). */
char *kt_nvrtc_identity(void);

#endif
