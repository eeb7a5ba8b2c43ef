#include "measure/measurer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/util.h"

typedef struct {
    kt_measure_callback_fn fn;
    void *arg;
} callback_t;

struct kt_measurer {
    kt_builder_t *builder;
    kt_runner_t *runner;
    int max_continuous_error;
    callback_t *cbs;
    int n_cbs;
    kt_measurer_stats_t st;
    char stop_reason[256];
};

kt_measurer_t *kt_measurer_new(kt_builder_t *b, kt_runner_t *r, int max_continuous_error)
{
    if (!b || !r) {
        kt_err_set(KT_EINVAL, "measurer: needs a builder and a runner");
        return NULL;
    }
    kt_measurer_t *m = calloc(1, sizeof *m);
    if (!m) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    m->builder = b;
    m->runner = r;
    m->max_continuous_error =
        max_continuous_error == 0 ? KT_MEASURER_DEFAULT_MAX_CONTINUOUS_ERROR : max_continuous_error;
    return m;
}

void kt_measurer_free(kt_measurer_t *m)
{
    if (!m)
        return;
    free(m->cbs);
    free(m);
}

int kt_measurer_add_callback(kt_measurer_t *m, kt_measure_callback_fn fn, void *arg)
{
    if (!m || !fn)
        return kt_err_set(KT_EINVAL, "measurer: no callback");
    callback_t *c = realloc(m->cbs, sizeof *c * (size_t)(m->n_cbs + 1));
    if (!c)
        return kt_err_set(KT_ENOMEM, "out of memory");
    m->cbs = c;
    m->cbs[m->n_cbs++] = (callback_t){fn, arg};
    return KT_OK;
}

/* Carry a build failure into a measurement result. */
static int result_from_build(kt_measure_result_t *res, const kt_build_result_t *b, int is_ref)
{
    int rc;
    if (is_ref)
        rc = kt_measure_result_set_error(res, KT_MEASURE_UNKNOWN_ERROR,
                                         "the reference kernel failed to build (%s): %s",
                                         kt_measure_error_name(b->error_no),
                                         b->error_msg ? b->error_msg : "");
    else
        rc = kt_measure_result_set_error(res, b->error_no, "%s", b->error_msg ? b->error_msg : "");
    res->all_cost = b->time_cost;
    res->timestamp = kt_time_wall();
    return rc;
}

int kt_measurer_measure(kt_measurer_t *m, const kt_measure_input_t *in, int n,
                        kt_measure_result_t *out)
{
    if (!m || n < 0 || (n > 0 && (!in || !out)))
        return kt_err_set(KT_EINVAL, "measurer: bad arguments");
    m->stop_reason[0] = '\0';
    if (n == 0)
        return KT_OK;
    for (int i = 0; i < n; i++)
        memset(&out[i], 0, sizeof out[i]);

    /* One build batch: candidates first, then their references (the builder
     * compiles a reference shared by many candidates once). */
    kt_build_input_t *bin = calloc((size_t)n * 2, sizeof *bin);
    kt_build_result_t *bres = calloc((size_t)n * 2, sizeof *bres);
    int *ref_slot = malloc(sizeof *ref_slot * (size_t)n);
    kt_run_input_t *rin = calloc((size_t)n, sizeof *rin);
    kt_measure_result_t *rres = calloc((size_t)n, sizeof *rres);
    int *run_of = malloc(sizeof *run_of * (size_t)n);
    int rc = KT_OK, nb = 0, nr = 0, results_valid = 0;
    if (!bin || !bres || !ref_slot || !rin || !rres || !run_of) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        bin[nb++] = in[i].prog;
    for (int i = 0; i < n; i++) {
        ref_slot[i] = -1;
        if (in[i].ref) {
            ref_slot[i] = nb;
            bin[nb++] = *in[i].ref;
        }
    }
    rc = kt_builder_build(m->builder, bin, nb, bres);
    if (rc < 0) {
        kt_err_prefix("measurer");
        goto out;
    }

    for (int i = 0; i < n; i++) {
        run_of[i] = -1;
        const kt_build_result_t *pb = &bres[i];
        const kt_build_result_t *rb = ref_slot[i] >= 0 ? &bres[ref_slot[i]] : NULL;
        if (pb->error_no != KT_MEASURE_NO_ERROR) {
            rc = result_from_build(&out[i], pb, 0);
        } else if (rb && rb->error_no != KT_MEASURE_NO_ERROR) {
            rc = result_from_build(&out[i], rb, 1);
            out[i].all_cost += pb->time_cost;
        } else {
            kt_run_input_t *ri = &rin[nr];
            ri->target = in[i].prog.target;
            ri->prog = (kt_artifact_t){pb->artifact, pb->artifact_len, pb->artifact_hash,
                                       in[i].prog.entry};
            if (rb)
                ri->ref = (kt_artifact_t){rb->artifact, rb->artifact_len, rb->artifact_hash,
                                          in[i].ref->entry};
            ri->layout = in[i].layout;
            run_of[i] = nr++;
        }
        if (rc < 0)
            goto out;
    }
    rc = kt_runner_run(m->runner, rin, nr, rres);
    if (rc < 0) {
        kt_err_prefix("measurer");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (run_of[i] < 0)
            continue;
        /* Move the runner's result; the build time joins its cost. */
        out[i] = rres[run_of[i]];
        memset(&rres[run_of[i]], 0, sizeof rres[0]);
        out[i].all_cost += bres[i].time_cost;
        if (ref_slot[i] >= 0 && !bres[ref_slot[i]].cached)
            out[i].all_cost += bres[ref_slot[i]].time_cost;
    }

    for (int i = 0; i < n; i++) {
        m->st.measured++;
        if (out[i].error_no == KT_MEASURE_NO_ERROR) {
            m->st.continuous_errors = 0;
            if (m->st.best_cost == 0 || out[i].mean < m->st.best_cost)
                m->st.best_cost = out[i].mean;
        } else {
            m->st.errors++;
            m->st.continuous_errors++;
        }
    }

    results_valid = 1;
    int cb_rc = KT_OK;
    for (int k = 0; k < m->n_cbs; k++) {
        int r = m->cbs[k].fn(m->cbs[k].arg, in, out, n);
        if (r < 0 && cb_rc == KT_OK) {
            cb_rc = r;
            kt_err_prefix("measure callback %d", k);
        }
    }
    if (cb_rc < 0) {
        rc = cb_rc;
    } else if (m->max_continuous_error >= 0 &&
               m->st.continuous_errors > m->max_continuous_error) {
        snprintf(m->stop_reason, sizeof m->stop_reason,
                 "too many errors in a row: the last %d candidates all failed (limit %d)",
                 m->st.continuous_errors, m->max_continuous_error);
        rc = KT_MEASURER_TOO_MANY_ERRORS;
    }

out:
    if (bres)
        for (int i = 0; i < nb; i++)
            kt_build_result_clear(&bres[i]);
    if (rres)
        for (int i = 0; i < nr; i++)
            kt_measure_result_clear(&rres[i]);
    if (!results_valid)
        for (int i = 0; i < n; i++)
            kt_measure_result_clear(&out[i]);
    free(bin);
    free(bres);
    free(ref_slot);
    free(rin);
    free(rres);
    free(run_of);
    return rc;
}

void kt_measurer_stats(const kt_measurer_t *m, kt_measurer_stats_t *out)
{
    *out = m->st;
}

const char *kt_measurer_stop_reason(const kt_measurer_t *m)
{
    return m->stop_reason;
}

void kt_measurer_reset_errors(kt_measurer_t *m)
{
    m->st.continuous_errors = 0;
    m->stop_reason[0] = '\0';
}
