/*
 * Internal helpers shared by the files of common/codegen (not installed).
 */
#ifndef KT_CODEGEN_INT_H
#define KT_CODEGEN_INT_H

#include "codegen.h"
#include "lower.h"

/* Lowering of a GPU state (lower_gpu.c); kt_lower() dispatches to it. */
kt_lower_t *kt_lower_gpu(const kt_dag_t *dag, const kt_sched_state_t *st);

/* Append text to b with every load `name[...]` replaced by repl (the
 * bracketed index skipped, nested brackets included). */
void kt_codegen_replace_loads(const char *text, const char *name, const char *repl, kt_sbuf_t *b);

/* ---- GPU emission shared by emit_cuda.c and emit_cuda_emu.c ------------------- */

/* One emission of a lowered GPU program: CUDA (emu 0) or its CPU emulation
 * (emu 1). Both print every index, statement and guard with the same text,
 * so the emulation runs the CUDA kernel's exact index arithmetic (in int,
 * widened to long long only for buffers of more than 2^31 - 1 elements). */
typedef struct {
    const kt_dag_t *dag;
    const kt_lower_t *L;
    kt_sbuf_t *out;
    int rc;
    int emu;
    const char *entry;
    uint8_t *used;     /* iterators some printed expression reads */
    int thread;        /* THREAD iterator of the kernel being printed, -1 outside */
    int64_t threads;   /* its extent */
    int zero_iter;     /* CUDA, inside a VECTORIZE fetch loop: its iterator, printed as 0 */
    int vec;           /* ... and its width: FETCH copies float2/float4 */
} kt_gpu_emit_t;

/* Fill e->used (malloc'd, freed by the caller). 0 or KT_ENOMEM. */
int kt_gpu_emit_mark_used(kt_gpu_emit_t *e);
/* The index expression of x (int arithmetic). */
void kt_gpu_emit_index(kt_gpu_emit_t *e, const kt_lower_index_t *x, kt_sbuf_t *b);
/* name[flat index] of a buffer; per-thread LOCAL buffers of the emulation
 * are indexed by the current thread too. */
void kt_gpu_emit_access(kt_gpu_emit_t *e, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b);
/* A statement (not ALLREDUCE) as one line at `depth`. */
void kt_gpu_emit_stmt(kt_gpu_emit_t *e, int stmt, int depth);
/* A LET as `const int name = ...;` (nothing when unused). */
void kt_gpu_emit_let(kt_gpu_emit_t *e, int node, int depth);
/* `if (guard) {` of a GUARD node. */
void kt_gpu_emit_guard_open(kt_gpu_emit_t *e, int node, int depth);
/* The loop header `for (...) {` (with its pragma) of a LOOP node. */
void kt_gpu_emit_for(kt_gpu_emit_t *e, int node, int depth);
/* The kernel parameters: `(const float *A, ..., float *kt_ws)`, restrict
 * spelled for CUDA or C. */
void kt_gpu_emit_params(kt_gpu_emit_t *e, kt_sbuf_t *b);
/* Declarations of the workspace buffers `text` uses (pointers into kt_ws). */
void kt_gpu_emit_heap_decls(kt_gpu_emit_t *e, const char *text, int depth, kt_sbuf_t *b);
/* Validate an entry name (a C identifier, not a stage, not kt_...). */
int kt_gpu_emit_check_entry(const kt_dag_t *dag, const char *entry);

#endif
