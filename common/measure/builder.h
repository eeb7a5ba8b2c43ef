/*
 * The local builder (TVM's LocalBuilder): compiles a batch of candidates in
 * parallel into artifacts the runner can load. For the CPU target a
 * candidate's C source becomes a shared object through the system compiler:
 *
 *     <compiler> <flags> -march=<march> -o <tmp>.so <tmp>.c <libs>
 *
 * Each compile is a child process in its own process group with its own
 * timeout; on timeout the whole group (driver, cc1, as, ld) is killed and the
 * candidate gets BUILD_TIMEOUT. A failing compile gets COMPILE_HOST with the
 * compiler's output in the message. The artifact is the .so's bytes (so it
 * can travel over RPC) plus their hash.
 *
 * Every outcome passes through an artifact cache (artifact_cache.h) keyed by
 * kt_builder_key(), so the same candidate is compiled once per builder (and
 * once per cache directory across processes); identical candidates inside
 * one batch are compiled once too. Timeouts are not cached.
 *
 * For the CUDA target a candidate's CUDA C++ source becomes a cubin for
 * opts.cuda_arch through NVRTC (nvrtc.h). NVRTC is a library, so each compile
 * is a forked child of the caller (not exec'd; the builder never initialises
 * the CUDA driver, so forking is safe) with the same process group, timeout
 * and caching as the CPU path; a failing compile gets COMPILE_DEVICE with
 * NVRTC's log in the message. The artifact is the cubin's bytes. A batch
 * with CUDA candidates is refused with KT_EUNSUP when libktune was built
 * without the CUDA toolkit.
 *
 * Ownership: the builder copies its options; results own their artifact and
 * message (kt_build_result_clear()). Thread-safety: a builder is used from one
 * thread at a time; separate builders may run in separate threads (children
 * are waited for by pid, never with wait(-1)). Building never installs signal
 * handlers; if the caller ignores SIGCHLD, exit statuses are unavailable and
 * compiles are judged by their output file alone.
 */
#ifndef KT_MEASURE_BUILDER_H
#define KT_MEASURE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "measure/artifact_cache.h"
#include "measure/measure.h"

typedef struct kt_builder kt_builder_t;

/* Flags and libraries of the default CPU compile (-march is added apart). */
#define KT_BUILDER_DEFAULT_FLAGS "-O3 -fno-math-errno -fopenmp -shared -fPIC -std=c17"
#define KT_BUILDER_DEFAULT_LIBS "-lm"
/* Most bytes of compiler output kept in an error message (its head: the first
 * diagnostics are the useful ones). */
#define KT_BUILDER_MAX_MSG 8192

typedef struct {
    int n_parallel;          /* concurrent compiles; 0 = online CPU cores */
    double timeout;          /* seconds per compile; 0 = 15 (TVM's default) */
    const char *compiler;    /* command words (split on blanks, no quoting); NULL = "cc" */
    const char *flags;       /* NULL = KT_BUILDER_DEFAULT_FLAGS */
    const char *march;       /* -march value; NULL = "native"; "" = no -march (the runner's arch goes here) */
    const char *libs;        /* words after the source; NULL = KT_BUILDER_DEFAULT_LIBS */
    const char *compiler_id; /* identity folded into cache keys; NULL = the compiler
                                executable's resolved path, size and mtime */
    const char *cache_dir;   /* on-disk artifact cache; NULL = memory only */
    size_t cache_mem_bytes;  /* in-memory cache budget; 0 = KT_ARTIFACT_CACHE_DEFAULT_MEM */
    const char *work_dir;    /* parent of the scratch directory; NULL = $TMPDIR or /tmp */
    const char *cuda_arch;   /* CUDA candidates: real architecture (sm_XY) to compile for;
                                NULL = KT_NVRTC_DEFAULT_ARCH; checked against NVRTC's list */
    const char *nvrtc_options; /* CUDA candidates: extra NVRTC options (words); NULL = none */
} kt_builder_opts_t;

/* One candidate to build. */
typedef struct {
    kt_measure_target_t target;
    const char *source;      /* C (CPU) or CUDA C++ (CUDA) source; NULL = the candidate
                                failed before it had source */
    const char *entry;       /* exported function name (CUDA: the first kernel's name) */
    const char *instantiation_error; /* when source is NULL: why (copied into the result) */
} kt_build_input_t;

/* The outcome of one build. */
typedef struct {
    int error_no;            /* NO_ERROR, INSTANTIATION_ERROR, COMPILE_HOST (CPU),
                                COMPILE_DEVICE (CUDA), BUILD_TIMEOUT */
    char *error_msg;         /* malloc'd; NULL on success */
    unsigned char *artifact; /* malloc'd shared-object (CPU) or cubin (CUDA) bytes; NULL on error */
    size_t artifact_len;
    uint64_t artifact_hash;  /* kt_hash64 of the artifact bytes; 0 on error */
    uint64_t key;            /* kt_builder_key() of the input */
    double time_cost;        /* seconds this build took in this call (about 0 when cached) */
    int cached;              /* 1 when the outcome came from the cache */
} kt_build_result_t;

/* Counters since the builder was made. */
typedef struct {
    uint64_t compiles;       /* compiler processes started (CPU and NVRTC) */
    uint64_t timeouts;       /* of which were killed for BUILD_TIMEOUT */
    kt_artifact_cache_stats_t cache;
} kt_builder_stats_t;

/* ---- create / destroy ---- */

void kt_builder_opts_default(kt_builder_opts_t *o);
/* Copies the options, finds the compiler in PATH (KT_ENOTFOUND when absent),
 * checks cuda_arch (KT_EINVAL when NVRTC cannot target it; not checked
 * without CUDA), makes a scratch directory and opens the cache. NULL with
 * kt_err set. */
kt_builder_t *kt_builder_new(const kt_builder_opts_t *o);
/* Removes the scratch directory. NULL is accepted. */
void kt_builder_free(kt_builder_t *b);

/* ---- build ---- */

/* Build n candidates; out[i] receives the outcome of in[i] (out must have n
 * zeroed or cleared slots). Per-candidate failures are results, not errors:
 * the return is 0 unless the call itself could not proceed (bad arguments,
 * KT_EUNSUP for a target this builder cannot build, no memory, scratch
 * directory unusable), in which case every out[i] is cleared. */
int kt_builder_build(kt_builder_t *b, const kt_build_input_t *in, int n, kt_build_result_t *out);

/* The cache key of a candidate under this builder's compiler and flags (for
 * CUDA: NVRTC's identity, cuda_arch and nvrtc_options). */
uint64_t kt_builder_key(const kt_builder_t *b, const kt_build_input_t *in);

void kt_build_result_clear(kt_build_result_t *r);

/* ---- query ---- */

void kt_builder_stats(const kt_builder_t *b, kt_builder_stats_t *out);
/* The C compiler identity used in keys of CPU candidates (owned by the builder). */
const char *kt_builder_compiler_id(const kt_builder_t *b);

#endif
