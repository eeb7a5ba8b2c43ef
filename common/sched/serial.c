/* State JSON: canonical serialization, strict parsing, hashing. */
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "util/err.h"
#include "util/util.h"

#define KT_SCHED_JSON_VERSION 1

static json_t *ann_json(const kt_sched_ann_t *a)
{
    return json_pack("[iii]", (json_int_t)a->parallel, (json_int_t)a->vectorize,
                     (json_int_t)a->unroll);
}

static json_t *stage_json(const kt_dag_t *dag, const kt_sched_state_t *st, int s)
{
    const kt_sched_stage_t *e = &st->stages[s];
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    json_t *o = json_pack("{ssss}", "name", ss->name, "kind", kt_sched_kind_name(e->kind));
    if (!o)
        return NULL;
    int ok = 1;
    switch (e->kind) {
    case KT_SK_ROOT:
        if (e->at_stage >= 0 && e->at_stage < st->nstages)
            ok &= !json_object_set_new(o, "at",
                                       json_pack("[si]", kt_dag_stage(dag, e->at_stage)->name,
                                                 (json_int_t)e->at_depth));
        ok &= !json_object_set_new(o, "ann", ann_json(&e->ann));
        break;
    case KT_SK_TILED: {
        json_t *tile = json_array();
        for (int a = 0; tile && a < ss->ndim + ss->nreduce; a++) {
            int nlev = a < ss->ndim ? KT_SCHED_SPATIAL_LEVELS : KT_SCHED_REDUCE_LEVELS;
            json_t *f = json_array();
            for (int l = 0; f && l < nlev; l++)
                ok &= !json_array_append_new(f, json_integer(e->split[a][l]));
            ok &= !json_array_append_new(tile, f);
        }
        ok &= !json_object_set_new(o, "tile", tile);
        if (e->fuse >= 0 && e->fuse < st->nstages)
            ok &= !json_object_set_new(o, "fuse", json_string(kt_dag_stage(dag, e->fuse)->name));
        if (e->cache_write)
            ok &= !json_object_set_new(o, "cache_write", json_true());
        if (e->fuse >= 0 || e->cache_write)
            ok &= !json_object_set_new(o, "level", json_integer(e->level));
        ok &= !json_object_set_new(o, "ann", ann_json(&e->ann));
        if (e->cache_write)
            ok &= !json_object_set_new(o, "ann2", ann_json(&e->ann2));
        break;
    }
    case KT_SK_FUSED:
        ok &= !json_object_set_new(o, "ann", ann_json(&e->ann));
        break;
    case KT_SK_SIMPLIFY: {
        /* [S0, S1] of each spatial axis that does not index a constant */
        json_t *tile = json_array();
        for (int a = 0; tile && a < ss->ndim; a++)
            if (!((ss->const_axes >> a) & 1u))
                ok &= !json_array_append_new(tile, json_pack("[ii]", (json_int_t)e->split[a][0],
                                                             (json_int_t)e->split[a][1]));
        ok &= !json_object_set_new(o, "tile", tile);
        ok &= !json_object_set_new(o, "ann", ann_json(&e->ann));
        break;
    }
    case KT_SK_RFACTOR:
        ok &= !json_object_set_new(o, "split", json_pack("[ii]", (json_int_t)e->split[0][0],
                                                         (json_int_t)e->split[0][1]));
        ok &= !json_object_set_new(o, "inner", json_boolean(e->rf_inner));
        ok &= !json_object_set_new(o, "ann", ann_json(&e->ann));
        ok &= !json_object_set_new(o, "ann2", ann_json(&e->ann2));
        break;
    default:
        break;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *kt_sched_state_to_json(const kt_sched_state_t *st, const kt_dag_t *dag)
{
    if (!st || !dag || st->nstages != kt_dag_num_stages(dag)) {
        kt_err_set(KT_EINVAL, "state JSON: state does not match the DAG");
        return NULL;
    }
    if (st->target == KT_SCHED_TARGET_CUDA)
        return kt_sched_gpu_to_json(st, dag);
    json_t *arr = json_array();
    int ok = arr != NULL;
    for (int s = 0; ok && s < st->nstages; s++) {
        json_t *o = stage_json(dag, st, s);
        ok = o && !json_array_append_new(arr, o);
    }
    json_t *root = ok ? json_pack("{sisO}", "version", KT_SCHED_JSON_VERSION, "stages", arr) : NULL;
    json_decref(arr);
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        kt_err_set(KT_ENOMEM, "state JSON: out of memory");
    return text;
}

uint64_t kt_sched_state_hash(const kt_sched_state_t *st, const kt_dag_t *dag)
{
    char *j = kt_sched_state_to_json(st, dag);
    if (!j)
        return 0;
    uint64_t h = kt_hash64(j, strlen(j));
    free(j);
    return h;
}

/* ---- parsing -------------------------------------------------------------------- */

static int perr(int s, const char *fmt, const char *detail)
{
    if (s < 0)
        return kt_err_set(KT_EINVAL, "state JSON: %s%s", fmt, detail ? detail : "");
    return kt_err_set(KT_EINVAL, "state JSON: stage %d: %s%s", s, fmt, detail ? detail : "");
}

int kt_sched_json_int(const json_t *v, long long lo, long long hi, long long *out)
{
    if (!json_is_integer(v))
        return 0;
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return 0;
    *out = x;
    return 1;
}

static int parse_ann(const json_t *v, kt_sched_ann_t *a, int s, const char *key)
{
    long long p, vec, u;
    if (!json_is_array(v) || json_array_size(v) != 3 ||
        !kt_sched_json_int(json_array_get(v, 0), 0, KT_SCHED_MAX_LOOPS, &p) ||
        !kt_sched_json_int(json_array_get(v, 1), 0, KT_SCHED_MAX_LOOPS, &vec) ||
        !kt_sched_json_int(json_array_get(v, 2), 0, 4096, &u))
        return perr(s, "bad annotation (want [parallel, vectorize, unroll]) in ", key);
    a->parallel = (uint8_t)p;
    a->vectorize = (uint8_t)vec;
    a->unroll = (int16_t)u;
    return 0;
}

int kt_sched_stage_by_name(const kt_dag_t *dag, const json_t *v)
{
    if (!json_is_string(v))
        return -1;
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, json_string_value(v)) == 0)
            return i;
    return -1;
}

static int parse_stage(const kt_dag_t *dag, const json_t *o, int s, kt_sched_stage_t *e)
{
    const kt_stage_t *ss = kt_dag_stage(dag, s);
    if (!json_is_object(o))
        return perr(s, "not an object", NULL);
    const json_t *name = json_object_get(o, "name");
    if (!json_is_string(name) || strcmp(json_string_value(name), ss->name) != 0)
        return kt_err_set(KT_EINVAL, "state JSON: stage %d: name must be '%s'", s, ss->name);
    int kind = kt_sched_kind_parse(json_string_value(json_object_get(o, "kind")));
    if (kind < 0 || (kind > KT_SK_RFACTOR && kind != KT_SK_SIMPLIFY))
        return perr(s, "missing or unknown kind (CPU state)", NULL);
    memset(e, 0, sizeof(*e));
    e->kind = (int8_t)kind;
    e->fuse = -1;
    e->at_stage = -1;
    /* Only the keys of the kind are allowed: a typo must not pass silently. */
    static const char *const allowed[][8] = {
        [KT_SK_INPUT] = {NULL},
        [KT_SK_ROOT] = {"at", "ann", NULL},
        [KT_SK_INLINE] = {NULL},
        [KT_SK_TILED] = {"tile", "fuse", "cache_write", "level", "ann", "ann2", NULL},
        [KT_SK_FUSED] = {"ann", NULL},
        [KT_SK_RFACTOR] = {"split", "inner", "ann", "ann2", NULL},
        [KT_SK_XREDUCE] = {NULL},
        [KT_SK_SIMPLIFY] = {"tile", "ann", NULL},
    };
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        if (!strcmp(key, "name") || !strcmp(key, "kind"))
            continue;
        int ok = 0;
        for (int i = 0; allowed[kind][i]; i++)
            ok |= !strcmp(allowed[kind][i], key);
        if (!ok)
            return kt_err_set(KT_EINVAL, "state JSON: stage %d: unexpected key '%s' for kind %s",
                              s, key, kt_sched_kind_name(kind));
    }
    const json_t *ann = json_object_get(o, "ann");
    const json_t *ann2 = json_object_get(o, "ann2");
    int rc = 0;
    switch (kind) {
    case KT_SK_ROOT: {
        const json_t *at = json_object_get(o, "at");
        if (at) {
            long long d;
            int c = json_is_array(at) && json_array_size(at) == 2
                        ? kt_sched_stage_by_name(dag, json_array_get(at, 0))
                        : -1;
            if (c < 0 || !kt_sched_json_int(json_array_get(at, 1), 1, KT_TE_MAX_DIMS, &d))
                return perr(s, "bad \"at\" (want [stage name, depth])", NULL);
            e->at_stage = (int8_t)c;
            e->at_depth = (int8_t)d;
        }
        if (!ann)
            return perr(s, "missing \"ann\"", NULL);
        rc = parse_ann(ann, &e->ann, s, "ann");
        break;
    }
    case KT_SK_TILED: {
        const json_t *tile = json_object_get(o, "tile");
        int naxes = ss->ndim + ss->nreduce;
        if (!json_is_array(tile) || (int)json_array_size(tile) != naxes)
            return kt_err_set(KT_EINVAL, "state JSON: stage %d: \"tile\" needs %d axes", s, naxes);
        for (int a = 0; a < naxes; a++) {
            const json_t *f = json_array_get(tile, (size_t)a);
            int nlev = a < ss->ndim ? KT_SCHED_SPATIAL_LEVELS : KT_SCHED_REDUCE_LEVELS;
            if (!json_is_array(f) || (int)json_array_size(f) != nlev)
                return kt_err_set(KT_EINVAL, "state JSON: stage %d: axis %d needs %d factors", s,
                                  a, nlev);
            for (int l = 0; l < nlev; l++) {
                long long x;
                if (!kt_sched_json_int(json_array_get(f, (size_t)l), 1, KT_TE_MAX_EXTENT, &x))
                    return perr(s, "split factors must be integers in [1, 2^30]", NULL);
                e->split[a][l] = (int32_t)x;
            }
        }
        const json_t *fuse = json_object_get(o, "fuse");
        if (fuse) {
            int c = kt_sched_stage_by_name(dag, fuse);
            if (c < 0)
                return perr(s, "\"fuse\" names no stage", NULL);
            e->fuse = (int8_t)c;
        }
        const json_t *cw = json_object_get(o, "cache_write");
        if (cw && !json_is_boolean(cw))
            return perr(s, "\"cache_write\" must be a boolean", NULL);
        e->cache_write = cw && json_is_true(cw);
        const json_t *lv = json_object_get(o, "level");
        if (lv) {
            long long l;
            if (!kt_sched_json_int(lv, 0, 3, &l))
                return perr(s, "bad \"level\"", NULL);
            e->level = (int8_t)l;
        }
        if (!ann)
            return perr(s, "missing \"ann\"", NULL);
        rc = parse_ann(ann, &e->ann, s, "ann");
        if (!rc && ann2)
            rc = parse_ann(ann2, &e->ann2, s, "ann2");
        break;
    }
    case KT_SK_FUSED:
        if (!ann)
            return perr(s, "missing \"ann\"", NULL);
        rc = parse_ann(ann, &e->ann, s, "ann");
        break;
    case KT_SK_SIMPLIFY: {
        const json_t *tile = json_object_get(o, "tile");
        int nt = 0;
        for (int a = 0; a < ss->ndim; a++)
            nt += !((ss->const_axes >> a) & 1u);
        if (!json_is_array(tile) || (int)json_array_size(tile) != nt)
            return kt_err_set(KT_EINVAL, "state JSON: stage %d: \"tile\" needs %d axes", s, nt);
        for (int a = 0, k = 0; a < ss->ndim; a++) {
            if ((ss->const_axes >> a) & 1u)
                continue;
            const json_t *f = json_array_get(tile, (size_t)k++);
            long long x0, x1;
            if (!json_is_array(f) || json_array_size(f) != 2 ||
                !kt_sched_json_int(json_array_get(f, 0), 1, KT_TE_MAX_EXTENT, &x0) ||
                !kt_sched_json_int(json_array_get(f, 1), 1, KT_TE_MAX_EXTENT, &x1))
                return perr(s, "each \"tile\" entry must be [outer, inner] in [1, 2^30]", NULL);
            e->split[a][0] = (int32_t)x0;
            e->split[a][1] = (int32_t)x1;
        }
        if (!ann)
            return perr(s, "missing \"ann\"", NULL);
        rc = parse_ann(ann, &e->ann, s, "ann");
        break;
    }
    case KT_SK_RFACTOR: {
        const json_t *sp = json_object_get(o, "split");
        long long ko, ki;
        if (!json_is_array(sp) || json_array_size(sp) != 2 ||
            !kt_sched_json_int(json_array_get(sp, 0), 1, LLONG_MAX / 2, &ko) ||
            !kt_sched_json_int(json_array_get(sp, 1), 1, KT_TE_MAX_EXTENT, &ki) || ko > INT32_MAX)
            return perr(s, "bad \"split\" (want [outer, inner])", NULL);
        e->split[0][0] = (int32_t)ko;
        e->split[0][1] = (int32_t)ki;
        const json_t *in = json_object_get(o, "inner");
        if (!json_is_boolean(in))
            return perr(s, "\"inner\" must be a boolean", NULL);
        e->rf_inner = json_is_true(in);
        if (!ann || !ann2)
            return perr(s, "missing \"ann\" or \"ann2\"", NULL);
        rc = parse_ann(ann, &e->ann, s, "ann");
        if (!rc)
            rc = parse_ann(ann2, &e->ann2, s, "ann2");
        break;
    }
    default:
        break;
    }
    return rc;
}

kt_sched_state_t *kt_sched_state_from_json(const char *text, const kt_dag_t *dag,
                                           const kt_sched_params_t *p)
{
    if (!text || !dag) {
        kt_err_set(KT_EINVAL, "state JSON: no text or DAG");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        kt_err_set(KT_EINVAL, "state JSON: line %d: %s", jerr.line, jerr.text);
        return NULL;
    }
    kt_sched_state_t *st = NULL;
    const json_t *target = json_is_object(root) ? json_object_get(root, "target") : NULL;
    if (target) {
        /* Only GPU states name their target; CPU ones are the original form. */
        if (json_is_string(target) && strcmp(json_string_value(target), "cuda") == 0)
            st = kt_sched_gpu_from_json(root, dag, p);
        else
            perr(-1, "unknown \"target\" (want \"cuda\", or none for CPU)", NULL);
        json_decref(root);
        return st;
    }
    const json_t *ver = json_object_get(root, "version");
    const json_t *stages = json_object_get(root, "stages");
    int n = kt_dag_num_stages(dag);
    if (!json_is_object(root) || json_object_size(root) != 2) {
        perr(-1, "want an object with exactly \"version\" and \"stages\"", NULL);
    } else if (!json_is_integer(ver) || json_integer_value(ver) != KT_SCHED_JSON_VERSION) {
        perr(-1, "unsupported \"version\" (want 1)", NULL);
    } else if (!json_is_array(stages) || (int)json_array_size(stages) != n) {
        kt_err_set(KT_EINVAL, "state JSON: \"stages\" must list the DAG's %d stages", n);
    } else if ((st = kt_sched_state_new(dag)) != NULL) {
        int rc = 0;
        for (int s = 0; s < n && !rc; s++)
            rc = parse_stage(dag, json_array_get(stages, (size_t)s), s, &st->stages[s]);
        /* A fused stage's producer is named by the producer only. */
        for (int s = 0; s < n && !rc; s++) {
            int c = st->stages[s].kind == KT_SK_TILED ? st->stages[s].fuse : -1;
            if (c >= 0 && st->stages[c].kind == KT_SK_FUSED)
                st->stages[c].fuse = (int8_t)s;
        }
        if (!rc)
            rc = kt_sched_state_validate(dag, p, st);
        if (rc) {
            kt_sched_state_free(st);
            st = NULL;
        }
    }
    json_decref(root);
    return st;
}
