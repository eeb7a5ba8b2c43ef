/* Candidates (source, entry, buffer layout of a state) and local measurement
 * through a kt_measurer_t. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "measure/measurer.h"
#include "search_int.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

#define DEFAULT_ENTRY "kt_main"
#define REFERENCE_ENTRY "ref_main"

int kt_search_buf_layout(const kt_dag_t *dag, kt_buf_layout_t *l)
{
    memset(l, 0, sizeof(*l));
    int nb = kt_codegen_num_bufs(dag);
    if (nb < 1 || nb > KT_MEASURE_MAX_BUFS)
        return kt_err_set(KT_EINVAL, "candidate: %d kernel buffers (at most %d)", nb,
                          KT_MEASURE_MAX_BUFS);
    l->num_bufs = nb;
    for (int i = 0; i < nb; i++) {
        int s = kt_codegen_buf_stage(dag, i);
        const kt_stage_t *st = s >= 0 ? kt_dag_stage(dag, s) : NULL;
        if (!st)
            return kt_err_set(KT_EINTERNAL, "candidate: buffer %d has no stage", i);
        l->num_elems[i] = kt_stage_numel(st);
        if (st->kind == KT_STAGE_PLACEHOLDER && st->layout_free)
            l->weights |= 1u << i;
        /* the calling convention puts the outputs last */
        if (st->kind == KT_STAGE_COMPUTE)
            l->num_outputs++;
    }
    return kt_buf_layout_check(l);
}

static int entry_ok(const char *e)
{
    if (!e || !*e || strlen(e) >= 64 || (*e >= '0' && *e <= '9'))
        return 0;
    for (const char *c = e; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_'))
            return 0;
    return 1;
}

int kt_search_candidate_make(const kt_workload_t *w, const kt_sched_state_t *st,
                             const char *entry, kt_search_candidate_t *out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "candidate: no output");
    memset(out, 0, sizeof(*out));
    if (!w || !st)
        return kt_err_set(KT_EINVAL, "candidate: no workload or state");
    if (!entry)
        entry = DEFAULT_ENTRY;
    if (!entry_ok(entry))
        return kt_err_set(KT_EINVAL, "candidate: entry '%s' is not a short C identifier", entry);
    const kt_dag_t *dag = kt_workload_dag(w);
    int rc = kt_search_buf_layout(dag, &out->layout);
    if (rc)
        return rc;
    snprintf(out->entry, sizeof(out->entry), "%s", entry);
    if (strncmp(entry, "kt_", 3) != 0) {
        out->source = kt_codegen_emit_c(dag, st, entry);
        return out->source ? 0 : (kt_err_code() ? kt_err_code() : KT_EINVAL);
    }
    /* The emitter reserves the kt_ prefix for its helpers; an entry such as
     * the default kt_main is an exported wrapper around the kernel (and its
     * _packed and _pack functions, codegen.h). */
    char inner[80];
    snprintf(inner, sizeof(inner), "ktune_%s_body", entry);
    char *src = kt_codegen_emit_c(dag, st, inner);
    if (!src)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, src);
    free(src);
    kt_sbuf_printf(&b,
                   "\nint %s(float **bufs)\n{\n    return %s(bufs);\n}\n"
                   "\nint %s_packed(float **bufs)\n{\n    return %s_packed(bufs);\n}\n"
                   "\nint %s_pack(int i, const float *src, float *dst)\n{\n"
                   "    return %s_pack(i, src, dst);\n}\n",
                   entry, inner, entry, inner, entry, inner);
    if (kt_sbuf_ok(&b) != 0) {
        kt_sbuf_free(&b);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    out->source = kt_sbuf_take(&b);
    return 0;
}

int kt_search_candidate_reference(const kt_workload_t *w, kt_search_candidate_t *out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "candidate: no output");
    memset(out, 0, sizeof(*out));
    if (!w)
        return kt_err_set(KT_EINVAL, "candidate: no workload");
    const kt_dag_t *dag = kt_workload_dag(w);
    int rc = kt_search_buf_layout(dag, &out->layout);
    if (rc)
        return rc;
    snprintf(out->entry, sizeof(out->entry), "%s", REFERENCE_ENTRY);
    out->source = kt_codegen_reference_c(dag, REFERENCE_ENTRY);
    return out->source ? 0 : (kt_err_code() ? kt_err_code() : KT_EINVAL);
}

void kt_search_candidate_clear(kt_search_candidate_t *c)
{
    if (!c)
        return;
    free(c->source);
    memset(c, 0, sizeof(*c));
}

int kt_search_measure_local(void *user, const kt_workload_t *w, kt_sched_state_t *const *states,
                            int n, kt_measure_result_t *results)
{
    kt_measurer_t *m = user;
    if (!m || !w || n < 0 || (n > 0 && (!states || !results)))
        return kt_err_set(KT_EINVAL, "measure local: bad arguments");
    if (n == 0)
        return 0;
    kt_search_candidate_t ref;
    int rc = kt_search_candidate_reference(w, &ref);
    if (rc)
        return rc;
    kt_search_candidate_t *cand = calloc((size_t)n, sizeof(*cand));
    kt_measure_input_t *in = calloc((size_t)n, sizeof(*in));
    char **why = calloc((size_t)n, sizeof(char *));
    if (!cand || !in || !why) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    kt_build_input_t ref_in = {.target = KT_MEASURE_TARGET_CPU, .source = ref.source,
                               .entry = ref.entry};
    for (int i = 0; i < n; i++) {
        in[i].ref = &ref_in;
        in[i].layout = ref.layout;
        in[i].prog.target = KT_MEASURE_TARGET_CPU;
        in[i].user = states[i];
        if (kt_search_candidate_make(w, states[i], NULL, &cand[i]) == 0) {
            in[i].prog.source = cand[i].source;
            in[i].prog.entry = cand[i].entry;
        } else {
            /* the measurer reports it as an instantiation error */
            why[i] = kt_strdup(kt_err_msg());
            in[i].prog.entry = DEFAULT_ENTRY;
            in[i].prog.instantiation_error = why[i] ? why[i] : "candidate could not be made";
        }
    }
    rc = kt_measurer_measure(m, in, n, results);
out:
    if (cand)
        for (int i = 0; i < n; i++)
            kt_search_candidate_clear(&cand[i]);
    if (why)
        for (int i = 0; i < n; i++)
            free(why[i]);
    free(cand);
    free(in);
    free(why);
    kt_search_candidate_clear(&ref);
    return rc;
}
