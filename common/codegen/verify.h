/*
 * Compiling, loading and checking generated C kernels: the harness that
 * proves a tuned candidate computes what the naive reference computes.
 *
 * - kt_codegen_compile runs the system C compiler ($KT_CC, default "cc")
 *   with KT_CODEGEN_CFLAGS in a child process, with a time limit, capturing
 *   its diagnostics; the source goes through a private temp directory that
 *   is removed afterwards.
 * - A checker (kt_codegen_ref_t) compiles and runs the reference kernel of
 *   one DAG once, on seeded random inputs, and keeps the expected outputs;
 *   each candidate is then compiled and run on the same inputs and compared.
 *   Kernels run in a forked child (outputs in shared memory), so a crashing
 *   or hanging candidate is reported, never fatal. Forking is safe as long
 *   as no other thread of the caller is inside the dynamic loader.
 *
 * Error metric (exact): for each output buffer with expected values r and
 * candidate values c,
 *     err = max_i |c_i - r_i| / max(|r_i|, rms(r), FLT_MIN)
 * where rms(r) = sqrt(mean(r_i^2)); the floor keeps elements that happen to
 * be near zero (cancellation in a sum) from inflating the error. A NaN or
 * infinite c_i where r_i is finite (or differs) gives +inf. The error of a
 * kernel is the max over its outputs; it passes when err <= 1e-4
 * (KT_CODEGEN_MAX_REL_ERR). Both sides accumulate in float.
 *
 * Inputs: every placeholder is filled from a splitmix64 stream seeded by
 * (seed, buffer index) with values whose magnitude is uniform in [0.125, 1]
 * and whose sign is random: never zero, so a kernel that skips a term shows.
 * Output buffers are filled with NaN before every run, so a kernel that
 * leaves an element unwritten fails.
 *
 * Ownership: returned strings, buffers and objects are the caller's, freed
 * with the matching _free. A checker is used by one thread at a time;
 * different checkers are independent.
 */
#ifndef KT_CODEGEN_VERIFY_H
#define KT_CODEGEN_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "te/te.h"

#define KT_CODEGEN_CFLAGS "-O3 -fno-math-errno -march=native -fopenmp -shared -fPIC -std=c17"
#define KT_CODEGEN_EMU_CFLAGS "-O1 -shared -fPIC -std=c17"
#define KT_CODEGEN_MAX_REL_ERR 1e-4      /* pass threshold of the error metric */
#define KT_CODEGEN_COMPILE_TIMEOUT 120.0 /* seconds for one compile */
#define KT_CODEGEN_RUN_TIMEOUT 300.0     /* seconds for one checked kernel run */

/* Every generated kernel: int entry(float **bufs), see codegen.h. */
typedef int (*kt_kernel_fn)(float **bufs);

/* ---- compile and load ---------------------------------------------------- */

/* Compile C source `src` into the shared object `out_so_path`. On return
 * *log (when log is not NULL) holds the compiler's output, malloc'd, possibly
 * empty; warnings do not fail. 0, or KT_EINVAL (compile error, message holds
 * the first lines of the log), KT_ETIMEOUT, KT_EIO. */
int kt_codegen_compile(const char *src, const char *out_so_path, char **log);

/* The same with other flags (blank-separated, at most 20 words; NULL:
 * KT_CODEGEN_CFLAGS): e.g. KT_CODEGEN_EMU_CFLAGS for CPU emulations of GPU
 * kernels, which only check answers, so a light optimization compiles them
 * several times faster. */
int kt_codegen_compile_flags(const char *src, const char *out_so_path, const char *cflags,
                             char **log);

/* One file of a compile with several (kt_codegen_compile_files). */
typedef struct {
    const char *name;   /* its name in the private temp directory, no '/' */
    const char *text;
    int include;        /* 1: passed as -include <file> before the sources; 0: a source */
} kt_codegen_file_t;

/* Compile 1 to 4 files into the shared object out_so_path with the compiler
 * named by the environment variable cc_env (NULL or unset: cc_default) and
 * cflags (blank-separated, at most 20 words): e.g. the CUDA-on-CPU check
 * (cuda_cpu.h) compiles CUDA source with a prelude through $KT_CXX / g++.
 * Errors, log and time limit as kt_codegen_compile. */
int kt_codegen_compile_files(const char *cc_env, const char *cc_default,
                             const kt_codegen_file_t *files, int nfiles, const char *cflags,
                             const char *out_so_path, char **log);

/* A loaded kernel library (dlopen in this process). */
typedef struct kt_codegen_lib kt_codegen_lib_t;

kt_codegen_lib_t *kt_codegen_load(const char *so_path, const char *entry);
kt_kernel_fn kt_codegen_lib_fn(const kt_codegen_lib_t *lib);
void kt_codegen_unload(kt_codegen_lib_t *lib);   /* accepts NULL */

/* ---- buffers ----------------------------------------------------------- */

/* Fill buf with the seeded input values described above. */
void kt_codegen_fill_random(float *buf, size_t n, uint64_t seed);

/* The kernel's kt_codegen_num_bufs(dag) buffers, 64-byte aligned: inputs
 * filled with kt_codegen_fill_random(seed, buffer index), outputs with NaN.
 * Free with kt_codegen_bufs_free. NULL on OOM. */
float **kt_codegen_bufs_new(const kt_dag_t *dag, uint64_t seed);
void kt_codegen_bufs_free(const kt_dag_t *dag, float **bufs);   /* accepts NULL */

/* The error metric above for one buffer of n values. */
double kt_codegen_rel_err(const float *got, const float *want, size_t n);

/* ---- checking ------------------------------------------------------------ */

typedef struct kt_codegen_ref kt_codegen_ref_t;

/* Compile and run the DAG's reference kernel on seeded inputs (the DAG must
 * outlive the checker). NULL with kt_err on failure. */
kt_codegen_ref_t *kt_codegen_ref_new(const kt_dag_t *dag, uint64_t seed);

/* Compile `src`, run its `entry` on the checker's inputs, compare; when the
 * library also exports <entry>_packed and <entry>_pack (codegen.h), run
 * <entry>_packed on the inputs with the weights _pack names re-laid out by
 * it, and compare that too (the error is the larger of the two). Sets
 * *max_rel_err (when not NULL) to the error, +inf when the kernel could not
 * be compiled or run. 0 when it passes; KT_EINVAL when it does not compile
 * or its answers differ (the message says which), KT_EIO when it crashed or
 * returned non-zero (the message ends with what the kernel printed on
 * stderr: a fault report), KT_ETIMEOUT when it ran too long. */
int kt_codegen_ref_check(kt_codegen_ref_t *ref, const char *src, const char *entry,
                         double *max_rel_err);

/* The same with compiler flags (NULL: KT_CODEGEN_CFLAGS), e.g.
 * KT_CODEGEN_EMU_CFLAGS for the CPU emulation of GPU kernels. */
int kt_codegen_ref_check_flags(kt_codegen_ref_t *ref, const char *src, const char *entry,
                               const char *cflags, double *max_rel_err);

/* Run an already compiled shared object instead of source. */
int kt_codegen_ref_check_so(kt_codegen_ref_t *ref, const char *so_path, const char *entry,
                            double *max_rel_err);

/* The checker's expected output for buffer i (an output buffer index of the
 * calling convention), or NULL; n receives its element count. */
const float *kt_codegen_ref_expected(const kt_codegen_ref_t *ref, int i, size_t *n);

void kt_codegen_ref_free(kt_codegen_ref_t *ref);   /* accepts NULL */

/* One-shot: kt_codegen_ref_new + kt_codegen_ref_check + free. */
int kt_codegen_check(const kt_dag_t *dag, const char *src, const char *entry, uint64_t seed,
                     double *max_rel_err);

#endif
