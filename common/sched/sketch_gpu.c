/* GPU sketch generation: Ansor's GPU derivation rules applied to every stage
 * from the output backwards (see "GPU states" in state.h). */
#include <stdint.h>
#include <stdlib.h>

#include "sched_int.h"
#include "util/err.h"

/* Ansor's cross-thread-reduction condition: a stage that needs multi-level
 * tiling but has too little spatial parallelism for the SMs, or any other
 * reduction longer than a warp. */
static int needs_cross_thread(const kt_dag_t *dag, const kt_sched_params_t *p, int s)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    if (ss->nreduce == 0 || p->warp_size != KT_SCHED_GPU_WARP ||
        p->max_threads_per_block < KT_SCHED_GPU_WARP)
        return 0;
    int64_t space = kt_stage_numel(ss), red = kt_sched_reduce_len(ss);
    if (kt_dag_has_data_reuse(dag, s))
        return !(space > red || space > (int64_t)p->num_cores * 16);
    return red > p->warp_size;
}

static void derive(kt_sched_sketch_ctx_t *c, kt_sched_state_t *st, int s)
{
    if (c->rc)
        return;
    if (s < 0) {
        kt_sched_sketch_push(c, st);
        return;
    }
    const kt_dag_t *dag = c->dag;
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    kt_sched_stage_t *e = &st->stages[s];
    if (ss->kind == KT_STAGE_PLACEHOLDER) {
        derive(c, st, s - 1);
        return;
    }
    const kt_sched_stage_t saved = *e;

    /* always-inline: on GPU every inlinable stage (padding too) is inlined
     * into its readers; skip the rest. */
    if (kt_dag_is_inlinable(dag, s)) {
        e->kind = KT_SK_INLINE;
        derive(c, st, s - 1);
        *e = saved;
        return;
    }
    int mlt = kt_dag_has_data_reuse(dag, s);
    int consumer = kt_sched_matched_consumer(dag, st, s);

    /* cross-thread-reduction; the unchanged state goes on to the others.
     * A single elementwise consumer runs on the block's reduced value. */
    if (needs_cross_thread(dag, c->p, s)) {
        e->kind = KT_SK_XREDUCE;
        kt_sched_stage_t *ce = consumer >= 0 ? &st->stages[consumer] : NULL;
        const kt_sched_stage_t csaved = ce ? *ce : saved;
        if (ce) {
            e->fuse = (int8_t)consumer;
            ce->kind = KT_SK_FUSED;
            ce->fuse = (int8_t)s;
        }
        derive(c, st, s - 1);
        *e = saved;
        if (ce)
            *ce = csaved;
    }

    /* add-cache-write (no fusible consumer) or multi-level-tiling-with-fusion,
     * both at the register tile (level 3); skip the rest. The cache-read
     * stages are chosen once the whole sketch is known (finish()). */
    if (mlt) {
        e->kind = KT_SK_TILED;
        e->level = 3;
        kt_sched_stage_t *ce = consumer >= 0 ? &st->stages[consumer] : NULL;
        const kt_sched_stage_t csaved = ce ? *ce : saved;
        if (ce) {
            e->fuse = (int8_t)consumer;
            ce->kind = KT_SK_FUSED;
            ce->fuse = (int8_t)s;
        } else {
            e->cache_write = 1;
        }
        derive(c, st, s - 1);
        *e = saved;
        if (ce)
            *ce = csaved;
        return;
    }

    /* skip-stage: a plain kernel (threads over the fused spatial axes). */
    derive(c, st, s - 1);
}

/* Complete a derived sketch: add-cache-read for every tiled stage (its
 * producers that can be staged, now that the inlined stages are known),
 * trivial splits (all in the outermost level) and one thread per block so
 * the sketch is a valid state before annotation. */
static void finish(const kt_dag_t *dag, kt_sched_state_t *st)
{
    st->target = KT_SCHED_TARGET_CUDA;
    for (int s = 0; s < st->nstages; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_ROOT)
            e->threads = 1;
        else if (e->kind == KT_SK_XREDUCE)
            e->threads = KT_SCHED_GPU_WARP;
        if (e->kind != KT_SK_TILED)
            continue;
        for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
            int nlev = a < ss->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_GPU_REDUCE_LEVELS;
            e->split[a][0] = (int32_t)(a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim]);
            for (int l = 1; l < nlev; l++)
                e->split[a][l] = 1;
        }
        e->smem = kt_sched_gpu_stageable(dag, st, s);
        e->vec = e->smem ? 1 : 0;
    }
}

int kt_sched_gpu_sketches(const kt_dag_t *dag, const kt_sched_params_t *p,
                          kt_sched_state_t ***out, int *n)
{
    *out = NULL;
    *n = 0;
    kt_sched_state_t *init = kt_sched_state_new(dag);
    if (!init)
        return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    init->target = KT_SCHED_TARGET_CUDA;
    kt_sched_sketch_ctx_t c = {.dag = dag, .p = p};
    derive(&c, init, kt_dag_num_stages(dag) - 1);
    kt_sched_state_free(init);
    return kt_sched_sketch_done(&c, finish, out, n);
}
