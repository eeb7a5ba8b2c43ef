/* JSON of GPU states: the target, the launch dimensions of every kernel and
 * the GPU form of each stage (see state.h). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "util/err.h"

#define KT_SCHED_JSON_VERSION 1

/* [x, 1, 1]: launches use the x dimension only. */
static json_t *dims3(int64_t x)
{
    return json_pack("[III]", (json_int_t)x, (json_int_t)1, (json_int_t)1);
}

static json_t *launches_json(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    kt_sched_gpu_kernel_t k[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, k);
    if (nk < 0)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; arr && i < nk; i++) {
        json_t *o = json_pack("{sssoso sI}", "stage", kt_dag_stage(dag, k[i].stage)->name, "grid",
                              dims3(k[i].grid), "block", dims3(k[i].threads), "smem",
                              (json_int_t)k[i].smem_bytes);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *stage_json(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    const kt_sched_stage_t *e = &st->stages[s];
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    json_t *o = json_pack("{ssss}", "name", ss->name, "kind", kt_sched_kind_name(e->kind));
    if (!o)
        return NULL;
    int ok = 1;
    if (e->kind == KT_SK_ROOT || e->kind == KT_SK_XREDUCE) {
        ok &= !json_object_set_new(o, "threads", json_integer(e->threads));
        ok &= !json_object_set_new(o, "unroll", json_integer(e->ann.unroll));
    }
    if ((e->kind == KT_SK_XREDUCE || e->kind == KT_SK_TILED) && e->fuse >= 0 &&
        e->fuse < st->nstages)
        ok &= !json_object_set_new(o, "fuse", json_string(kt_dag_stage(dag, e->fuse)->name));
    if (e->kind == KT_SK_TILED) {
        json_t *tile = json_array(), *smem = json_array();
        for (int a = 0; tile && a < ss->ndim + ss->nreduce; a++) {
            int nlev = a < ss->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_GPU_REDUCE_LEVELS;
            json_t *f = json_array();
            for (int l = 0; f && l < nlev; l++)
                ok &= !json_array_append_new(f, json_integer(e->split[a][l]));
            ok &= !json_array_append_new(tile, f);
        }
        for (int p = 0; smem && p < st->nstages && p < 32; p++)
            if ((e->smem >> p) & 1u)
                ok &= !json_array_append_new(smem, json_string(kt_dag_stage(dag, p)->name));
        ok &= !json_object_set_new(o, "tile", tile);
        ok &= !json_object_set_new(o, "smem", smem);
        if (e->cache_write)
            ok &= !json_object_set_new(o, "cache_write", json_true());
        ok &= !json_object_set_new(o, "level", json_integer(e->level));
        ok &= !json_object_set_new(o, "vec", json_integer(e->vec));
        ok &= !json_object_set_new(o, "unroll", json_integer(e->ann.unroll));
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *kt_sched_gpu_to_json(const kt_sched_state_t *st, const kt_dag_t *dag)
{
    json_t *arr = json_array();
    int ok = arr != NULL;
    for (int s = 0; ok && s < st->nstages; s++) {
        json_t *o = stage_json(dag, st, s);
        ok = o && !json_array_append_new(arr, o);
    }
    json_t *launches = ok ? launches_json(dag, st) : NULL;
    json_t *root = ok && launches ? json_pack("{sisssOsO}", "version", KT_SCHED_JSON_VERSION,
                                              "target", "cuda", "stages", arr, "launches",
                                              launches)
                                  : NULL;
    json_decref(arr);
    json_decref(launches);
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        kt_err_set(KT_ENOMEM, "state JSON: out of memory");
    return text;
}

/* ---- parsing ------------------------------------------------------------------------ */

static int perr(int s, const char *what)
{
    if (s < 0)
        return kt_err_set(KT_EINVAL, "GPU state JSON: %s", what);
    return kt_err_set(KT_EINVAL, "GPU state JSON: stage %d: %s", s, what);
}

static int parse_stage(const kt_dag_t *dag, const json_t *o, int s, kt_sched_stage_t *e)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    if (!json_is_object(o))
        return perr(s, "not an object");
    const json_t *name = json_object_get(o, "name");
    if (!json_is_string(name) || strcmp(json_string_value(name), ss->name) != 0)
        return kt_err_set(KT_EINVAL, "GPU state JSON: stage %d: name must be '%s'", s, ss->name);
    int kind = kt_sched_kind_parse(json_string_value(json_object_get(o, "kind")));
    static const char *const allowed[][10] = {
        [KT_SK_INPUT] = {NULL},
        [KT_SK_ROOT] = {"threads", "unroll", NULL},
        [KT_SK_INLINE] = {NULL},
        [KT_SK_TILED] = {"tile", "fuse", "cache_write", "level", "smem", "vec", "unroll", NULL},
        [KT_SK_FUSED] = {NULL},
        [KT_SK_RFACTOR] = {NULL},
        [KT_SK_XREDUCE] = {"threads", "unroll", "fuse", NULL},
    };
    if (kind < 0 || kind == KT_SK_RFACTOR || kind >= (int)(sizeof(allowed) / sizeof(allowed[0])))
        return perr(s, "missing or unknown kind (GPU state)");
    memset(e, 0, sizeof(*e));
    e->kind = (int8_t)kind;
    e->fuse = -1;
    e->at_stage = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        if (!strcmp(key, "name") || !strcmp(key, "kind"))
            continue;
        int ok = 0;
        for (int i = 0; allowed[kind][i]; i++)
            ok |= !strcmp(allowed[kind][i], key);
        if (!ok)
            return kt_err_set(KT_EINVAL,
                              "GPU state JSON: stage %d: unexpected key '%s' for kind %s", s, key,
                              kt_sched_kind_name(kind));
    }
    long long x;
    if (kind == KT_SK_ROOT || kind == KT_SK_XREDUCE || kind == KT_SK_TILED) {
        if (!kt_sched_json_int(json_object_get(o, "unroll"), 0, 4096, &x))
            return perr(s, "missing or bad \"unroll\"");
        e->ann.unroll = (int16_t)x;
    }
    if (kind == KT_SK_ROOT || kind == KT_SK_XREDUCE) {
        if (!kt_sched_json_int(json_object_get(o, "threads"), 1, 1 << 20, &x))
            return perr(s, "missing or bad \"threads\"");
        e->threads = (int32_t)x;
    }
    const json_t *fuse = json_object_get(o, "fuse");
    if (fuse) {
        int c = kt_sched_stage_by_name(dag, fuse);
        if (c < 0)
            return perr(s, "\"fuse\" names no stage");
        e->fuse = (int8_t)c;
    }
    if (kind != KT_SK_TILED)
        return 0;
    const json_t *tile = json_object_get(o, "tile");
    int naxes = ss->ndim + ss->nreduce;
    if (!json_is_array(tile) || (int)json_array_size(tile) != naxes)
        return kt_err_set(KT_EINVAL, "GPU state JSON: stage %d: \"tile\" needs %d axes", s, naxes);
    for (int a = 0; a < naxes; a++) {
        const json_t *f = json_array_get(tile, (size_t)a);
        int nlev = a < ss->ndim ? KT_SCHED_GPU_SPATIAL_LEVELS : KT_SCHED_GPU_REDUCE_LEVELS;
        if (!json_is_array(f) || (int)json_array_size(f) != nlev)
            return kt_err_set(KT_EINVAL, "GPU state JSON: stage %d: axis %d needs %d factors", s,
                              a, nlev);
        for (int l = 0; l < nlev; l++) {
            if (!kt_sched_json_int(json_array_get(f, (size_t)l), 1, KT_TE_MAX_EXTENT, &x))
                return perr(s, "split factors must be integers in [1, 2^30]");
            e->split[a][l] = (int32_t)x;
        }
    }
    const json_t *cw = json_object_get(o, "cache_write");
    if (cw && !json_is_boolean(cw))
        return perr(s, "\"cache_write\" must be a boolean");
    e->cache_write = cw && json_is_true(cw);
    if (!kt_sched_json_int(json_object_get(o, "level"), 0, 5, &x))
        return perr(s, "missing or bad \"level\"");
    e->level = (int8_t)x;
    if (!kt_sched_json_int(json_object_get(o, "vec"), 0, 16, &x))
        return perr(s, "missing or bad \"vec\"");
    e->vec = (int8_t)x;
    const json_t *smem = json_object_get(o, "smem");
    if (!json_is_array(smem))
        return perr(s, "\"smem\" must list stage names");
    for (size_t i = 0; i < json_array_size(smem); i++) {
        int p = kt_sched_stage_by_name(dag, json_array_get(smem, i));
        if (p < 0 || p >= 32 || ((e->smem >> p) & 1u))
            return perr(s, "\"smem\" names an unknown or repeated stage");
        e->smem |= 1u << p;
    }
    return 0;
}

/* The launches recorded in the JSON must be the ones the schedule implies. */
static int check_launches(const kt_dag_t *dag, const kt_sched_state_t *st, const json_t *arr)
{
    kt_sched_gpu_kernel_t k[KT_TE_MAX_STAGES];
    int nk = kt_sched_gpu_kernels(dag, st, k);
    if (nk < 0)
        return nk;
    if (!json_is_array(arr) || (int)json_array_size(arr) != nk)
        return kt_err_set(KT_EINVAL, "GPU state JSON: \"launches\" must list the %d kernels", nk);
    for (int i = 0; i < nk; i++) {
        json_t *want = json_pack("{sssoso sI}", "stage", kt_dag_stage(dag, k[i].stage)->name,
                                 "grid", dims3(k[i].grid), "block", dims3(k[i].threads), "smem",
                                 (json_int_t)k[i].smem_bytes);
        if (!want)
            return kt_err_set(KT_ENOMEM, "out of memory");
        int same = json_equal(want, json_array_get(arr, (size_t)i));
        json_decref(want);
        if (!same)
            return kt_err_set(KT_EINVAL,
                              "GPU state JSON: launch %d does not match the schedule (stage '%s')",
                              i, kt_dag_stage(dag, k[i].stage)->name);
    }
    return 0;
}

kt_sched_state_t *kt_sched_gpu_from_json(const json_t *root, const kt_dag_t *dag,
                                         const kt_sched_params_t *p)
{
    kt_sched_params_t defp;
    if (!p || p->target != KT_SCHED_TARGET_CUDA) {
        kt_sched_params_default_gpu(&defp);
        p = &defp;
    }
    const json_t *ver = json_object_get(root, "version");
    const json_t *stages = json_object_get(root, "stages");
    int n = kt_dag_num_stages(dag);
    if (json_object_size(root) != 4 || !json_object_get(root, "launches")) {
        perr(-1, "want an object with exactly \"version\", \"target\", \"launches\" and "
                 "\"stages\"");
        return NULL;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != KT_SCHED_JSON_VERSION) {
        perr(-1, "unsupported \"version\" (want 1)");
        return NULL;
    }
    if (!json_is_array(stages) || (int)json_array_size(stages) != n) {
        kt_err_set(KT_EINVAL, "GPU state JSON: \"stages\" must list the DAG's %d stages", n);
        return NULL;
    }
    kt_sched_state_t *st = kt_sched_state_new(dag);
    if (!st)
        return NULL;
    st->target = KT_SCHED_TARGET_CUDA;
    int rc = 0;
    for (int s = 0; s < n && !rc; s++)
        rc = parse_stage(dag, json_array_get(stages, (size_t)s), s, &st->stages[s]);
    /* A fused stage's producer is named by the producer only. */
    for (int s = 0; s < n && !rc; s++) {
        int k = st->stages[s].kind;
        int c = k == KT_SK_TILED || k == KT_SK_XREDUCE ? st->stages[s].fuse : -1;
        if (c >= 0 && st->stages[c].kind == KT_SK_FUSED)
            st->stages[c].fuse = (int8_t)s;
    }
    if (!rc)
        rc = kt_sched_gpu_validate(dag, p, st);
    if (!rc)
        rc = check_launches(dag, st, json_object_get(root, "launches"));
    if (rc) {
        kt_sched_state_free(st);
        return NULL;
    }
    return st;
}
