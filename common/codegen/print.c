/* The TVM-style printed loop nest of a state (built from its lowering). */
#include <stdlib.h>

#include "codegen/lower.h"
#include "sched/state.h"
#include "util/err.h"
#include "util/sbuf.h"

static void print_list(const kt_dag_t *dag, const kt_lower_t *L, int first, int depth,
                       kt_sbuf_t *b)
{
    static const char *const ann_word[] = {
        [KT_LOOP_SERIAL] = "for", [KT_LOOP_PARALLEL] = "parallel",
        [KT_LOOP_VECTORIZE] = "vectorize", [KT_LOOP_UNROLL] = "unroll",
        [KT_LOOP_BLOCK] = "blockIdx.x", [KT_LOOP_THREAD] = "threadIdx.x",
        [KT_LOOP_VTHREAD] = "vthread"};
    for (int x = first; x >= 0; x = L->nodes[x].next) {
        const kt_lower_node_t *nd = &L->nodes[x];
        if (nd->kind == KT_NODE_ALLOC || nd->kind == KT_NODE_LET)
            continue;
        if (nd->kind == KT_NODE_GUARD) {   /* bounds checks: shown as their body */
            print_list(dag, L, nd->child, depth, b);
            continue;
        }
        kt_sbuf_indent(b, depth);
        if (nd->kind == KT_NODE_KERNEL) {
            const kt_lower_kernel_t *k = &L->kernels[nd->kernel];
            kt_sbuf_printf(b, "kernel %s: grid %lld, block %lld, shared %lld bytes\n",
                           kt_dag_stage(dag, k->stage)->name, (long long)k->grid,
                           (long long)k->threads, (long long)k->smem_bytes);
            print_list(dag, L, nd->child, depth + 1, b);
            continue;
        }
        if (nd->kind == KT_NODE_BARRIER) {
            kt_sbuf_puts(b, "__syncthreads()\n");
            continue;
        }
        if (nd->kind == KT_NODE_LOOP) {
            const kt_lower_iter_t *it = &L->iters[nd->iter];
            kt_sbuf_printf(b, "%s %s (0,%lld)\n", ann_word[nd->ann], it->label,
                           (long long)it->extent);
            print_list(dag, L, nd->child, depth + 1, b);
            continue;
        }
        const kt_lower_stmt_t *s = &L->stmts[nd->stmt];
        const char *dst = L->bufs[s->dst].label;
        if (s->kind == KT_STMT_INIT)
            kt_sbuf_printf(b, "%s = %s\n", dst,
                           kt_dag_stage(dag, s->stage)->rop == KT_RED_MAX ? "-inf" : "0");
        else if (s->kind == KT_STMT_ALLREDUCE)
            kt_sbuf_printf(b, "%s = allreduce(%s over threadIdx.x)\n", dst, dst);
        else
            kt_sbuf_printf(b, "%s = ...\n", dst);
    }
}

char *kt_sched_state_print(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    kt_lower_t *L = kt_lower(dag, st);
    if (!L)
        return NULL;
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "Placeholder:");
    int k = 0;
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (kt_dag_stage(dag, i)->kind == KT_STAGE_PLACEHOLDER)
            kt_sbuf_printf(&b, "%s %s", k++ ? "," : "", kt_dag_stage(dag, i)->name);
    kt_sbuf_puts(&b, "\n");
    print_list(dag, L, L->first, 0, &b);
    kt_lower_free(L);
    return kt_sbuf_take(&b);
}
