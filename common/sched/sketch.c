/* Sketch generation: Ansor's CPU derivation rules applied to every stage
 * from the output backwards; every way a rule applies forks a sketch. */
#include <stdint.h>
#include <stdlib.h>

#include "sched_int.h"
#include "util/err.h"

void kt_sched_sketch_push(kt_sched_sketch_ctx_t *c, const kt_sched_state_t *st)
{
    if (c->rc)
        return;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        kt_sched_state_t **v = realloc(c->v, (size_t)cap * sizeof(*v));
        if (!v) {
            c->rc = kt_err_set(KT_ENOMEM, "out of memory");
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    kt_sched_state_t *cl = kt_sched_state_clone(st);
    if (!cl) {
        c->rc = KT_ENOMEM;
        return;
    }
    c->v[c->n++] = cl;
}

int kt_sched_sketch_done(kt_sched_sketch_ctx_t *c,
                         void (*finish)(const kt_dag_t *dag, kt_sched_state_t *st),
                         kt_sched_state_t ***out, int *n)
{
    for (int i = 0; i < c->n && !c->rc && finish; i++)
        finish(c->dag, c->v[i]);
    if (c->rc) {
        for (int i = 0; i < c->n; i++)
            kt_sched_state_free(c->v[i]);
        free(c->v);
        return c->rc;
    }
    *out = c->v;
    *n = c->n;
    return 0;
}

/* Ansor's NeedsRfactor: reductions whose spatial part offers too little
 * parallelism for the cores while the reduction is long. */
static int needs_rfactor(const kt_dag_t *dag, const kt_sched_params_t *p, int s)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    if (ss->nreduce == 0 || kt_sched_reduce_len(ss) > INT32_MAX)
        return 0;
    int64_t space = kt_stage_numel(ss), red = kt_sched_reduce_len(ss);
    if (kt_dag_has_data_reuse(dag, s))
        return !(space > red || space > (int64_t)p->num_cores * 16);
    return red > 1 && red > p->num_cores;
}

int kt_sched_matched_consumer(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    int cons[KT_TE_MAX_STAGES];
    if (kt_sched_eff_consumers(dag, st, s, cons) != 1)
        return -1;
    if (st->stages[cons[0]].kind != KT_SK_ROOT)
        return -1;
    return kt_sched_elementwise_matched(dag, st, s, cons[0]) ? cons[0] : -1;
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

    /* always-inline: apply and skip the rest. */
    if (kt_sched_always_inline(dag, s)) {
        e->kind = KT_SK_INLINE;
        derive(c, st, s - 1);
        *e = saved;
        return;
    }
    /* simplify-compute-with-const-tensor: apply and skip the rest. */
    if (ss->const_axes) {
        e->kind = KT_SK_SIMPLIFY;
        derive(c, st, s - 1);
        *e = saved;
        return;
    }
    int mlt = kt_dag_has_data_reuse(dag, s);

    /* add-rfactor: two variants (partial-result axis outer or inner); the
     * unchanged state goes on to the next rules. */
    if (needs_rfactor(dag, c->p, s)) {
        for (int inner = 0; inner < 2; inner++) {
            e->kind = KT_SK_RFACTOR;
            e->rf_inner = (int8_t)inner;
            e->split[0][0] = (int32_t)kt_sched_reduce_len(ss);
            e->split[0][1] = 1;
            derive(c, st, s - 1);
            *e = saved;
        }
    }

    int consumer = mlt ? kt_sched_matched_consumer(dag, st, s) : -1;

    /* add-cache-write, then multi-level-tiling-with-fusion on the cache stage
     * (its consumer is the copy-out); the unchanged state goes on. */
    if (mlt && consumer < 0) {
        for (int level = 1; level <= 2; level++) {
            e->kind = KT_SK_TILED;
            e->cache_write = 1;
            e->level = (int8_t)level;
            derive(c, st, s - 1);
            *e = saved;
        }
    }

    /* multi-level-tiling-with-fusion: the consumer computed at spatial tile
     * level 1 or 2; skip the rest. */
    if (mlt && consumer >= 0) {
        kt_sched_stage_t *ce = &st->stages[consumer];
        const kt_sched_stage_t csaved = *ce;
        for (int level = 1; level <= 2; level++) {
            e->kind = KT_SK_TILED;
            e->fuse = (int8_t)consumer;
            e->level = (int8_t)level;
            ce->kind = KT_SK_FUSED;
            ce->fuse = (int8_t)s;
            derive(c, st, s - 1);
            *e = saved;
            *ce = csaved;
        }
        return;
    }

    /* multi-level-tiling: skip the rest. */
    if (mlt) {
        e->kind = KT_SK_TILED;
        derive(c, st, s - 1);
        *e = saved;
        return;
    }

    /* skip-stage */
    derive(c, st, s - 1);
}

/* Sketches leave every split at its trivial factorization (all in the
 * outermost level) so they are valid states before annotation. */
static void trivial_splits(const kt_dag_t *dag, kt_sched_state_t *st)
{
    for (int s = 0; s < st->nstages; s++) {
        kt_sched_stage_t *e = &st->stages[s];
        const kt_stage_t *ss = kt_dag_stage(dag, s);
        if (e->kind == KT_SK_SIMPLIFY)
            for (int a = 0; a < ss->ndim; a++)
                if (!((ss->const_axes >> a) & 1u)) {
                    e->split[a][0] = (int32_t)ss->shape[a];
                    e->split[a][1] = 1;
                }
        if (e->kind != KT_SK_TILED)
            continue;
        for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
            int nlev = a < ss->ndim ? KT_SCHED_SPATIAL_LEVELS : KT_SCHED_REDUCE_LEVELS;
            e->split[a][0] = (int32_t)(a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim]);
            for (int l = 1; l < nlev; l++)
                e->split[a][l] = 1;
        }
    }
}

int kt_sched_sketches(const kt_dag_t *dag, const kt_sched_params_t *p, kt_sched_state_t ***out,
                      int *n)
{
    kt_sched_params_t defp;
    if (!p) {
        kt_sched_params_default(&defp);
        p = &defp;
    }
    *out = NULL;
    *n = 0;
    if (p->target == KT_SCHED_TARGET_CUDA)
        return kt_sched_gpu_sketches(dag, p, out, n);
    kt_sched_state_t *init = kt_sched_state_new(dag);
    if (!init)
        return kt_err_code() ? kt_err_code() : KT_ENOMEM;
    kt_sched_sketch_ctx_t c = {.dag = dag, .p = p};
    derive(&c, init, kt_dag_num_stages(dag) - 1);
    kt_sched_state_free(init);
    return kt_sched_sketch_done(&c, trivial_splits, out, n);
}
