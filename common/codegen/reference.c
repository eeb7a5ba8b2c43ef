/* The naive reference kernel: every stage materialized by one plain loop
 * nest in stage order, accumulating in float. Obviously correct by
 * construction, used to check every tuned candidate. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "util/err.h"

int kt_codegen_reference_c_into(const kt_dag_t *dag, const char *entry, kt_sbuf_t *b)
{
    if (!dag || kt_dag_num_stages(dag) == 0 || !entry || !*entry)
        return kt_err_set(KT_EINVAL, "reference kernel: no DAG or entry name");
    for (const char *c = entry; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' ||
              (c > entry && *c >= '0' && *c <= '9')) || c - entry > 200)
            return kt_err_set(KT_EINVAL, "reference kernel: entry '%s' is not a C identifier",
                              entry);
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, entry) == 0)
            return kt_err_set(KT_EINVAL, "reference kernel: entry '%s' is a stage name", entry);
    /* GCC 12 at -O3 (AVX2 or AVX-512) miscompiles padding loops, the
     * select on shifted indices: loop unswitching + if-conversion +
     * vectorization yield wrong, even run-to-run varying values. The
     * reference must be right, so it opts out of unswitching. */
    kt_sbuf_puts(b, "#if defined(__GNUC__) && !defined(__clang__)\n"
                    "#pragma GCC push_options\n"
                    "#pragma GCC optimize(\"no-unswitch-loops\")\n"
                    "#endif\n");
    kt_sbuf_printf(b, "int %s(float **kt_bufs)\n{\n", entry);

    int nstages = kt_dag_num_stages(dag), nbufs = kt_codegen_num_bufs(dag);
    for (int i = 0; i < nbufs; i++)
        kt_sbuf_printf(b, "    float *%s = kt_bufs[%d];\n",
                       kt_dag_stage(dag, kt_codegen_buf_stage(dag, i))->name, i);
    int ninter = 0;
    for (int i = 0; i < nstages; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        if (s->kind == KT_STAGE_COMPUTE && !s->is_output) {
            kt_sbuf_printf(b, "    float *%s = (float *)malloc(sizeof(float) * %lldULL);\n",
                           s->name, (long long)kt_stage_numel(s));
            ninter++;
        }
    }
    if (ninter > 0) {
        kt_sbuf_puts(b, "    if (");
        int k = 0;
        for (int i = 0; i < nstages; i++) {
            const kt_stage_t *s = kt_dag_stage(dag, i);
            if (s->kind == KT_STAGE_COMPUTE && !s->is_output)
                kt_sbuf_printf(b, "%s!%s", k++ ? " || " : "", s->name);
        }
        kt_sbuf_puts(b, ") {\n");
        for (int i = 0; i < nstages; i++) {
            const kt_stage_t *s = kt_dag_stage(dag, i);
            if (s->kind == KT_STAGE_COMPUTE && !s->is_output)
                kt_sbuf_printf(b, "        free(%s);\n", s->name);
        }
        kt_sbuf_puts(b, "        return -1;\n    }\n");
    }

    int rc = KT_OK;
    for (int i = 0; i < nstages && rc == KT_OK; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        if (s->kind != KT_STAGE_COMPUTE)
            continue;
        const char *axis_c[KT_TE_MAX_DIMS + KT_TE_MAX_REDUCE];
        for (int a = 0; a < s->ndim; a++)
            axis_c[a] = s->axis_names[a];
        for (int r = 0; r < s->nreduce; r++)
            axis_c[s->ndim + r] = s->reduce_names[r];
        kt_sbuf_printf(b, "    /* %s */\n", s->name);
        int lvl = 1;
        for (int a = 0; a < s->ndim; a++, lvl++) {
            kt_sbuf_indent(b, lvl * 2);
            kt_sbuf_printf(b, "for (long long %s = 0; %s < %lldLL; %s++) {\n", s->axis_names[a],
                           s->axis_names[a], (long long)s->shape[a], s->axis_names[a]);
        }
        /* The output element, as the flat index of an identity load. */
        kt_sbuf_t dst;
        kt_sbuf_init(&dst);
        {
            kt_expr_t ax[KT_TE_MAX_DIMS], *axp[KT_TE_MAX_DIMS];
            for (int a = 0; a < s->ndim; a++) {
                memset(&ax[a], 0, sizeof(ax[a]));
                ax[a].kind = KT_EX_AXIS;
                ax[a].dtype = KT_DT_INT;
                ax[a].axis = a;
                axp[a] = &ax[a];
            }
            kt_expr_t self = {.kind = KT_EX_LOAD, .dtype = KT_DT_F32, .tensor = i,
                              .nargs = s->ndim, .args = axp};
            rc = kt_codegen_expr_c(dag, i, &self, axis_c, 0, &dst);
        }
        if (s->nreduce == 0) {
            kt_sbuf_indent(b, lvl * 2);
            kt_sbuf_printf(b, "%s = ", dst.data ? dst.data : "");
            if (rc == KT_OK)
                rc = kt_codegen_expr_c(dag, i, s->body, axis_c, 0, b);
            kt_sbuf_puts(b, ";\n");
        } else {
            kt_sbuf_indent(b, lvl * 2);
            kt_sbuf_printf(b, "float kt_acc = %s;\n",
                           s->rop == KT_RED_MAX ? "(-INFINITY)" : "0.0f");
            int rl = lvl;
            for (int r = 0; r < s->nreduce; r++, rl++) {
                const char *rn = s->reduce_names[r];
                kt_sbuf_indent(b, rl * 2);
                kt_sbuf_printf(b, "for (long long %s = 0; %s < %lldLL; %s++) {\n", rn, rn,
                               (long long)s->reduce_ext[r], rn);
            }
            kt_sbuf_indent(b, rl * 2);
            kt_sbuf_puts(b, s->rop == KT_RED_MAX ? "kt_acc = kt_maxf(kt_acc, " : "kt_acc = kt_acc + ");
            if (rc == KT_OK)
                rc = kt_codegen_expr_c(dag, i, s->body, axis_c, 0, b);
            kt_sbuf_puts(b, s->rop == KT_RED_MAX ? ");\n" : ";\n");
            for (rl--; rl >= lvl; rl--) {
                kt_sbuf_indent(b, rl * 2);
                kt_sbuf_puts(b, "}\n");
            }
            kt_sbuf_indent(b, lvl * 2);
            kt_sbuf_printf(b, "%s = kt_acc;\n", dst.data ? dst.data : "");
        }
        kt_sbuf_free(&dst);
        for (lvl--; lvl >= 1; lvl--) {
            kt_sbuf_indent(b, lvl * 2);
            kt_sbuf_puts(b, "}\n");
        }
    }
    for (int i = 0; i < nstages; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, i);
        if (s->kind == KT_STAGE_COMPUTE && !s->is_output)
            kt_sbuf_printf(b, "    free(%s);\n", s->name);
    }
    kt_sbuf_puts(b, "    return 0;\n}\n"
                    "#if defined(__GNUC__) && !defined(__clang__)\n"
                    "#pragma GCC pop_options\n"
                    "#endif\n");
    if (rc)
        kt_err_prefix("reference kernel");
    return rc;
}


char *kt_codegen_reference_c(const kt_dag_t *dag, const char *entry)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    if (!dag || kt_dag_num_stages(dag) == 0) {
        kt_err_set(KT_EINVAL, "reference kernel: no DAG or entry name");
        return NULL;
    }
    kt_sbuf_puts(&b, "/* ktune reference kernel */\n");
    char *text = kt_dag_to_text(dag);
    if (!text) {
        kt_sbuf_free(&b);
        return NULL;
    }
    /* The DAG as line comments, so no printed expression can end a comment. */
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        kt_sbuf_puts(&b, "// ");
        kt_sbuf_putn(&b, line, n);
        kt_sbuf_puts(&b, "\n");
        line += n + (nl ? 1 : 0);
    }
    free(text);
    kt_codegen_preamble_c(&b);
    if (kt_codegen_reference_c_into(dag, entry, &b) != KT_OK || kt_sbuf_ok(&b)) {
        kt_sbuf_free(&b);
        return NULL;
    }
    return kt_sbuf_take(&b);
}
