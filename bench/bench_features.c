/* bench_features: feature extraction throughput. 2,048 random states of
 * ResNet-18's 3x3 conv2d on 56x56x64 (NHWC, batch 1, pad 1, bias + relu as
 * TVM's task extraction fuses them), sampled from every sketch, then
 * featurized three ways on one thread: lowering alone (the floor), state
 * by state (kt_feature_extract) and in one batch (kt_feature_extract_batch).
 * Prints states/second and rows per state. argv[1] overrides the count. */
#include <stdio.h>
#include <stdlib.h>

#include "codegen/lower.h"
#include "feature/feature.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    if (n <= 0) {
        fprintf(stderr, "usage: bench_features [states]\n");
        return 2;
    }
    kt_conv2d_params_t cp = kt_ops_conv2d_default();
    for (int i = 0; i < 4; i++)
        cp.pad[i] = 1;
    kt_epilogue_t epi[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};
    kt_dag_t *dag = kt_ops_conv2d_nhwc(1, 56, 56, 64, 64, 3, 3, &cp, epi, 2);
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    kt_sched_state_t **sk;
    int nsk;
    if (!dag || kt_sched_sketches(dag, &p, &sk, &nsk) != 0 || nsk == 0) {
        fprintf(stderr, "bench_features: %s\n", kt_err_msg());
        return 1;
    }
    kt_sched_state_t **st = calloc((size_t)n, sizeof(*st));
    uint32_t *counts = calloc((size_t)n, sizeof(*counts));
    if (!st || !counts)
        return 1;
    kt_rng_t rng;
    kt_rng_seed(&rng, 42);
    double t0 = kt_time_mono();
    for (int i = 0; i < n; i++)
        if (!(st[i] = kt_sched_sample(dag, &p, sk[i % nsk], &rng))) {
            fprintf(stderr, "bench_features: sampling: %s\n", kt_err_msg());
            return 1;
        }
    double sample_s = kt_time_mono() - t0;

    t0 = kt_time_mono();
    for (int i = 0; i < n; i++)
        kt_lower_free(kt_lower(dag, st[i]));
    double lower_s = kt_time_mono() - t0;

    t0 = kt_time_mono();
    uint64_t rows_single = 0;
    for (int i = 0; i < n; i++) {
        float *rows;
        uint32_t nr;
        if (kt_feature_extract(dag, st[i], &rows, &nr) != 0) {
            fprintf(stderr, "bench_features: state %d: %s\n", i, kt_err_msg());
            return 1;
        }
        rows_single += nr;
        free(rows);
    }
    double single_s = kt_time_mono() - t0;

    t0 = kt_time_mono();
    float *all;
    if (kt_feature_extract_batch(dag, (const kt_sched_state_t *const *)st, n, &all, counts) != 0) {
        fprintf(stderr, "bench_features: batch: %s\n", kt_err_msg());
        return 1;
    }
    double batch_s = kt_time_mono() - t0;
    uint64_t rows_batch = 0;
    for (int i = 0; i < n; i++)
        rows_batch += counts[i];
    free(all);

    printf("conv2d_nhwc 1x56x56x64 -> 64, 3x3 pad 1, bias+relu: %d states from %d sketches "
           "(sampled in %.3f s)\n", n, nsk, sample_s);
    printf("  lowering only       %10.0f states/s\n", n / lower_s);
    printf("  kt_feature_extract  %10.0f states/s  (%.3f s, %.2f rows/state, %d values/row)\n",
           n / single_s, single_s, (double)rows_single / n, KT_FEATURE_COUNT);
    printf("  batch               %10.0f states/s  (%.3f s, %.2f rows/state)\n", n / batch_s,
           batch_s, (double)rows_batch / n);
    for (int i = 0; i < n; i++)
        kt_sched_state_free(st[i]);
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    free(st);
    free(counts);
    kt_dag_free(dag);
    return rows_single == rows_batch ? 0 : 1;
}
