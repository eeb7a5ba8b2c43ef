/*
 * Internal to common/runtime: the pieces the C (netlib.c) and CUDA
 * (netlib_cuda.c) network writers share. Text is generated with "NET" for
 * the network's C name and renamed by kt_netlib_put_named().
 */
#ifndef KT_RUNTIME_NETLIB_INT_H
#define KT_RUNTIME_NETLIB_INT_H

#include "codegen/codegen.h"
#include "netlib.h"
#include "util/sbuf.h"

/* The safetensors reader of generated files: static int kt_load(NET_t *m,
 * const char *path) filling m->blob, m->blob_bytes and m->w[] (KT_NW of
 * them, named kt_weight_names[], sized kt_weight_numel[]); kt_fail(). */
extern const char *const KT_NETLIB_LOADER;

void kt_netlib_put_cstr(kt_sbuf_t *b, const char *s);      /* a C string literal */
void kt_netlib_put_comment(kt_sbuf_t *b, const char *s);   /* text safe inside a comment */
void kt_netlib_put_named(kt_sbuf_t *b, const char *t, const char *name);   /* NET -> name */
void kt_netlib_strides(const int64_t *dims, int ndim, int64_t *st);
/* "        static const long long NAME[n] = {...};\n" */
void kt_netlib_put_ll_array(kt_sbuf_t *b, const char *name, const int64_t *v, int n);

/* Index arithmetic of the simple steps, the same for C and CUDA: the
 * strides of a broadcasting binary step's two inputs per output axis (0
 * where an input repeats), a transpose's input stride per output axis, and
 * a concat's element counts before and after its axis in memory order (an
 * NHWC value's channels are innermost). */
void kt_netlib_bcast_strides(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *sx,
                             int64_t *sz);
void kt_netlib_transpose_strides(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *sp);
void kt_netlib_concat_dims(const kt_net_plan_t *p, const kt_plan_step_t *s, int64_t *outer,
                           int64_t *inner);

/* NAME.h: the API, shapes, build line (CUDA's when arch is set). */
int kt_netlib_emit_header(kt_sbuf_t *b, const kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                          const char *name, const char *source, int ndefault, const char *arch);
/* dir/name + ext holding b's text. */
int kt_netlib_write_text(const char *dir, const char *name, const char *ext, kt_sbuf_t *b);
/* dir/name.safetensors: the plan's weights, weight k packed as how[k] says
 * (how or how[k] NULL: as planned); *bytes their size. */
int kt_netlib_write_weights(const kt_net_plan_t *plan, const kt_codegen_pack_t *const *how,
                            const char *dir, const char *name, int64_t *bytes);

/* The tables every generated runner has: KT_NSTEPS, KT_NW, kt_step_names,
 * kt_step_tasks, kt_weight_names, kt_weight_numel. */
void kt_netlib_put_tables(kt_sbuf_t *b, const kt_net_plan_t *p);

#endif
