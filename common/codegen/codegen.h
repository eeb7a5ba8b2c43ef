/*
 * Code generation: C source for a (DAG, schedule state) and the naive
 * reference for any DAG.
 *
 * Calling convention of every generated kernel (tuned or reference):
 *     int <entry>(float **bufs);
 * bufs[] holds the DAG's placeholders in stage order, then its output stages
 * in stage order; all are dense row-major float32. Intermediate stages that
 * are not inlined are allocated by the kernel itself. Returns 0, or -1 when
 * an internal allocation failed. Generated files include only <math.h>,
 * <stdlib.h>, <string.h> (and <omp.h> when parallel), and compile with
 * `cc -O3 -march=native -fopenmp -shared -fPIC`.
 *
 * Ownership: returned source strings are malloc'd; the caller frees them.
 * All functions are thread-safe (they only read the DAG and state).
 */
#ifndef KT_CODEGEN_CODEGEN_H
#define KT_CODEGEN_CODEGEN_H

#include <stdint.h>

#include "te/te.h"
#include "util/sbuf.h"

/* Number of buffers the kernel takes, and the stage index of buffer i. */
int kt_codegen_num_bufs(const kt_dag_t *dag);
int kt_codegen_buf_stage(const kt_dag_t *dag, int i);

/* The start of every generated C file: the standard includes named above
 * and the static inline helpers that kt_codegen_expr_c's output calls
 * (kt_maxf, kt_minf, kt_maxi, kt_mini, kt_floordiv, kt_floormod with floor
 * semantics for negative numerators, kt_rsqrtf). Emitters append it first. */
void kt_codegen_preamble_c(kt_sbuf_t *out);

/* Emit C for expression e of `stage`. Float constants print exactly (%.9g
 * with a decimal point and an f suffix; -INFINITY for -inf), int constants
 * as long long literals (5LL), so index arithmetic is 64-bit whatever type
 * the loop variables have. Every value is fully parenthesized. axis_c[a] is the C text of the value
 * of axis a (spatial axes first, then reduce axes). A load of a stage whose
 * bit is set in inline_mask is replaced by that stage's body with its axes
 * bound to the load's printed indices (recursively); any other load prints
 * as <stage name>[<row-major flat index>]. 0 or negative. */
int kt_codegen_expr_c(const kt_dag_t *dag, int stage, const kt_expr_t *e,
                      const char *const *axis_c, uint64_t inline_mask, kt_sbuf_t *out);

/* The naive reference kernel: one plain loop nest per compute stage, no
 * schedule. Used to check every candidate's answers. */
char *kt_codegen_reference_c(const kt_dag_t *dag, const char *entry);

/* ---- tuned kernels (lower.c, emit_c.c) ------------------------------------ */

struct kt_sched_state;

/* C source of one kernel computing the DAG as schedule state st says (the
 * state is validated first): the preamble, then `int entry(float **bufs)`.
 * entry must be a C identifier, not a stage name, not starting with "kt_".
 * NULL with a message on error. */
char *kt_codegen_emit_c(const kt_dag_t *dag, const struct kt_sched_state *st, const char *entry);

/* The same kernel function without the preamble, appended to b: several
 * kernels (distinct entries) can share one file and one compiler run.
 * 0 or negative. */
int kt_codegen_emit_c_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                           const char *entry, kt_sbuf_t *b);

#endif
