/*
 * bench_store: what batching and the indexes buy. Prints records/s for one
 * commit per batch against one commit per record (the baseline), and the
 * indexed lookups (has-measured, best) against a full scan, all in one run
 * on a temporary database.
 *
 * usage: bench_store [records]   (default 20000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "util/err.h"
#include "util/util.h"

#define BATCH 64
#define WORKLOADS 20
#define LOOKUPS 2000

static kt_record_t make(int i, char *wk, size_t wksz, double *cost)
{
    snprintf(wk, wksz, "[\"w%02d\", [1, 56, 56, 64]]", i % WORKLOADS);
    *cost = 1e-4 * (1 + (i * 7919) % 1000);
    kt_record_t r = {0};
    r.workload_key = wk;
    r.target = "cuda";
    r.state_json = "{\"sketch\":0,\"split\":[[4,8,2],[2,2,16]],\"unroll\":64}";
    r.state_hash = kt_hash64(&i, sizeof i);
    r.costs = cost;
    r.ncosts = 1;
    r.error_code = (i / WORKLOADS) % 10 == 0 ? KT_MEASURE_RUN_TIMEOUT : 0;   /* every workload has some */
    r.all_cost = 1.0;
    r.timestamp = 1.7e9 + i;
    r.runner_key = "cuda-sm90";
    return r;
}

/* Insert records [from, to) in batches of `batch`; returns seconds. */
static double insert(kt_store_t *s, int from, int to, int batch)
{
    kt_record_t rs[BATCH];
    char wk[BATCH][48];
    double cost[BATCH];
    double t0 = kt_time_mono();
    for (int i = from; i < to; i += batch) {
        int n = to - i < batch ? to - i : batch;
        for (int j = 0; j < n; j++)
            rs[j] = make(i + j, wk[j], sizeof wk[j], &cost[j]);
        if (kt_store_put_records(s, rs, (size_t)n) != 0) {
            fprintf(stderr, "bench_store: %s\n", kt_err_msg());
            exit(1);
        }
    }
    return kt_time_mono() - t0;
}

typedef struct {
    const char *wk;
    uint64_t hash;
    int found;
} scan_t;

static int scan_cb(const kt_record_t *r, void *ctx)
{
    scan_t *sc = ctx;
    if (r->state_hash == sc->hash && strcmp(r->workload_key, sc->wk) == 0 &&
        strcmp(r->target, "cuda") == 0)
        sc->found = 1;
    return sc->found;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < 1000)
        n = 1000;
    char dir[] = "/tmp/kt_bench_store_XXXXXX", path[128];
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof path, "%s/bench.db", dir);
    kt_store_t *s = kt_store_open(path, KT_STORE_CREATE);
    if (!s) {
        fprintf(stderr, "bench_store: %s\n", kt_err_msg());
        return 1;
    }

    int single = n / 20;   /* one fsync per record: keep the baseline short */
    double t_single = insert(s, 0, single, 1);
    double t_batch = insert(s, single, n, BATCH);
    double rate_single = single / t_single, rate_batch = (n - single) / t_batch;
    printf("put, 1 record per commit:   %10.0f records/s\n", rate_single);
    printf("put, %d records per commit: %10.0f records/s  (x%.1f)\n", BATCH, rate_batch,
           rate_batch / rate_single);

    char wk[48];
    double cost;
    double t0 = kt_time_mono();
    int hits = 0;
    for (int k = 0; k < LOOKUPS; k++) {
        kt_record_t r = make((k * 104729) % n, wk, sizeof wk, &cost);
        hits += kt_store_has_measured(s, r.workload_key, r.target, r.state_hash) == 1;
    }
    double t_idx = (kt_time_mono() - t0) / LOOKUPS;
    int scans = 20;
    t0 = kt_time_mono();
    for (int k = 0; k < scans; k++) {
        kt_record_t r = make((k * 104729) % n, wk, sizeof wk, &cost);
        scan_t sc = {r.workload_key, r.state_hash, 0};
        kt_store_foreach_record(s, NULL, scan_cb, &sc);
        hits += sc.found;
    }
    double t_scan = (kt_time_mono() - t0) / scans;
    printf("has-measured (index):       %10.1f us   full scan %10.1f us  (x%.0f)\n", t_idx * 1e6,
           t_scan * 1e6, t_scan / t_idx);

    t0 = kt_time_mono();
    for (int k = 0; k < LOOKUPS; k++) {
        kt_record_list_t *l = NULL;
        snprintf(wk, sizeof wk, "[\"w%02d\", [1, 56, 56, 64]]", k % WORKLOADS);
        if (kt_store_best(s, wk, "cuda", &l) == 0)
            hits++;
        kt_record_list_free(l);
    }
    printf("best (index):               %10.1f us   (%d of %d lookups hit)\n",
           (kt_time_mono() - t0) / LOOKUPS * 1e6, hits, 2 * LOOKUPS + scans);

    kt_store_close(s);
    unlink(path);
    rmdir(dir);
    return 0;
}
