/*
 * bench_query: the record store's reads at scale. Fills a store with N
 * records (default 10 million; batched transactions of 1000; 40 workloads,
 * 2 targets, 20 jobs, one record in ten an error; state JSON of 300-600
 * bytes, as sketch states serialize) and prints:
 *   - the fill rate and the store's size per million records;
 *   - EXPLAIN QUERY PLAN of QueryBest (kt_store_top_k's statement) and of
 *     every ListRecords filter shape (kt_store_foreach_record's statements),
 *     so a missing index shows as a SCAN or a temporary B-tree;
 *   - ms per query of kt_store_best, kt_store_top_k(10), and of ListRecords-
 *     style walks by job, by workload and target, by workload, target and
 *     valid_only (and the time to each walk's first record, what a
 *     ListRecords stream waits before it sends anything).
 * Figures only, never asserted.
 *
 * usage: bench_query [records] [--db PATH] [--keep]
 *   --db PATH  the store to fill (default a temporary directory under /tmp;
 *              an existing store at PATH is queried as it is, not filled)
 *   --keep     keep the store afterwards
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"
#include "util/err.h"
#include "util/util.h"

#define BATCH 1000
#define WORKLOADS 40
#define TARGETS 2
#define JOBS 20

static const char *const TARGET_NAMES[TARGETS] = {"cuda", "cpu"};

static void workload_key(int w, char *out, size_t size)
{
    snprintf(out, size, "[\"%016llx\", [1, %d, %d, %d], [3, 3, %d, %d]]",
             (unsigned long long)kt_hash64(&w, sizeof w), 7 << (w % 4), 7 << (w % 4),
             64 << (w % 3), 64 << (w % 3), 64 << ((w + 1) % 3));
}

/* A sketch state's JSON: a few steps with split factors, 300-600 bytes. */
static size_t state_json(uint64_t h, char *out, size_t size)
{
    int steps = 3 + (int)(h % 7);
    size_t n = (size_t)snprintf(out, size, "{\"sketch\":%d,\"steps\":[", (int)(h >> 8) % 4);
    for (int s = 0; s < steps && n + 80 < size; s++) {
        uint64_t g = h >> (s * 5);
        n += (size_t)snprintf(out + n, size - n,
                              "%s{\"k\":\"SP\",\"stage\":%d,\"iter\":%d,\"ext\":%d,"
                              "\"lens\":[%d,%d,%d]}",
                              s ? "," : "", s % 3, s, 64 << (g % 3), 1 << (g % 4),
                              1 << ((g >> 2) % 4), 2 << ((g >> 4) % 3));
    }
    n += (size_t)snprintf(out + n, size - n,
                          "],\"annot\":{\"unroll\":%d,\"vector\":%d,\"bind\":[\"blockIdx.x\","
                          "\"threadIdx.x\"],\"cache\":\"shared\"}}",
                          16 << (h % 4), 4 << ((h >> 3) % 3));
    return n;
}

static void fill(kt_store_t *s, long n)
{
    kt_record_t *rs = calloc(BATCH, sizeof *rs);
    char(*wk)[96] = calloc(BATCH, sizeof *wk);
    char(*st)[700] = calloc(BATCH, sizeof *st);
    double *cost = calloc(BATCH, sizeof *cost);
    if (!rs || !wk || !st || !cost) {
        fprintf(stderr, "bench_query: out of memory\n");
        exit(1);
    }
    double t0 = kt_time_mono(), last = t0;
    size_t json_bytes = 0;
    for (long i = 0; i < n; i += BATCH) {
        int m = n - i < BATCH ? (int)(n - i) : BATCH;
        for (int j = 0; j < m; j++) {
            long id = i + j;
            uint64_t h = kt_hash64(&id, sizeof id);
            int w = (int)(h % WORKLOADS), t = (int)((h >> 20) % TARGETS);
            workload_key(w, wk[j], sizeof wk[j]);
            json_bytes += state_json(h, st[j], sizeof st[j]);
            cost[j] = 1e-5 * (1.0 + (double)((h >> 24) % 100000) / 1000.0);
            rs[j] = (kt_record_t){.workload_key = wk[j], .target = TARGET_NAMES[t],
                                  .state_json = st[j], .state_hash = h, .costs = &cost[j],
                                  .ncosts = 1,
                                  .error_code = (h >> 40) % 10 == 0 ? KT_MEASURE_RUN_TIMEOUT : 0,
                                  .all_cost = 0.5, .timestamp = 1.7e9 + (double)id,
                                  .runner_key = t ? "cpu-avx512" : "cuda-sm90",
                                  .job_id = 1 + (int64_t)(id * JOBS / n)};
            if (rs[j].error_code) {
                rs[j].ncosts = 0;
                rs[j].error_msg = "timed out after 10 s";
            }
        }
        if (kt_store_put_records(s, rs, (size_t)m) != 0) {
            fprintf(stderr, "bench_query: %s\n", kt_err_msg());
            exit(1);
        }
        double now = kt_time_mono();
        if (now - last > 30) {
            fprintf(stderr, "  %ld records, %.0f s\n", i + m, now - t0);
            last = now;
        }
    }
    double dt = kt_time_mono() - t0;
    printf("fill: %ld records in %.1f s (%.0f records/s, batches of %d), state JSON %.0f bytes "
           "on average\n",
           n, dt, (double)n / dt, BATCH, (double)json_bytes / (double)n);
    free(rs);
    free(wk);
    free(st);
    free(cost);
}

/* The statements of store.c (ST_TOP_K and filtered()), printed with their
 * query plans: a copy, so a change there must be made here too. */
static void plans(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_query: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    const char *names[] = {"QueryBest / top_k", "list: all", "list: workload", "list: target",
                           "list: workload+target", "list: job", "list: valid",
                           "list: workload+target+valid", "list: job+valid",
                           "list: target+valid"};
    const char *where[] = {NULL, "", " AND workload_key = ?1", " AND target = ?2",
                           " AND workload_key = ?1 AND target = ?2", " AND job_id = ?3",
                           " AND error_code = 0",
                           " AND workload_key = ?1 AND target = ?2 AND error_code = 0",
                           " AND job_id = ?3 AND error_code = 0",
                           " AND target = ?2 AND error_code = 0"};
    printf("\nquery plans (EXPLAIN QUERY PLAN):\n");
    for (size_t q = 0; q < KT_ARRAY_LEN(names); q++) {
        char sql[512];
        if (!where[q])
            snprintf(sql, sizeof sql,
                     "EXPLAIN QUERY PLAN SELECT * FROM records WHERE workload_key = ?1 AND "
                     "target = ?2 AND error_code = 0 ORDER BY mean_cost, id LIMIT 10");
        else
            snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN SELECT * FROM records WHERE 1%s "
                                      "ORDER BY id", where[q]);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            fprintf(stderr, "bench_query: %s\n", sqlite3_errmsg(db));
            exit(1);
        }
        printf("  %-28s", names[q]);
        const char *sep = "";
        while (sqlite3_step(st) == SQLITE_ROW) {
            printf("%s%s", sep, (const char *)sqlite3_column_text(st, 3));
            sep = "; ";
        }
        printf("\n");
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
}

typedef struct {
    long n;
    double t0;      /* when the walk started */
    double first;   /* seconds to its first record: what a ListRecords stream waits */
} walk_t;

static int count_cb(const kt_record_t *r, void *ctx)
{
    (void)r;
    walk_t *w = ctx;
    if (w->n++ == 0)
        w->first += kt_time_mono() - w->t0;
    return 0;
}

/* Walk the records of filter f `reps` times; prints ms per walk and to the
 * first record. */
static void time_walk(kt_store_t *s, const char *what, kt_store_filter_t *fs, int reps)
{
    walk_t w = {0};
    double t0 = kt_time_mono();
    for (int r = 0; r < reps; r++) {
        w.t0 = kt_time_mono();
        if (kt_store_foreach_record(s, &fs[r], count_cb, &w) != 0) {
            fprintf(stderr, "bench_query: %s\n", kt_err_msg());
            exit(1);
        }
    }
    double dt = (kt_time_mono() - t0) / reps;
    printf("  %-34s %9.2f ms per walk, %8ld records each, %6.2f us per record, first after "
           "%.3f ms\n",
           what, dt * 1e3, w.n / reps, dt * 1e6 / ((double)w.n / reps), w.first / reps * 1e3);
}

int main(int argc, char **argv)
{
    long n = 10000000;
    const char *db = NULL;
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            db = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else
            n = atol(argv[i]);
    }
    if (n < BATCH)
        n = BATCH;
    char dir[] = "/tmp/kt_bench_query_XXXXXX", path[512];
    if (!db) {
        if (!mkdtemp(dir))
            return 1;
        snprintf(path, sizeof path, "%s/bench.db", dir);
    } else {
        snprintf(path, sizeof path, "%s", db);
    }
    int existing = access(path, F_OK) == 0;
    kt_store_t *s = kt_store_open(path, KT_STORE_CREATE);
    if (!s) {
        fprintf(stderr, "bench_query: %s\n", kt_err_msg());
        return 1;
    }
    if (!existing)
        fill(s, n);
    kt_store_counts_t c;
    kt_store_count_records(s, NULL, &c);
    n = (long)c.total;
    kt_store_close(s);   /* checkpoints the WAL into the file */
    struct stat sb;
    stat(path, &sb);
    printf("store: %ld records, %.1f MB, %.1f MB per million records\n", n, sb.st_size / 1e6,
           sb.st_size / 1e6 / ((double)n / 1e6));
    plans(path);

    s = kt_store_open(path, 0);
    if (!s) {
        fprintf(stderr, "bench_query: %s\n", kt_err_msg());
        return 1;
    }
    printf("\nqueries (ms per query):\n");
    enum { REPS = 200 };
    char wk[REPS][96];
    for (int r = 0; r < REPS; r++)
        workload_key((r * 7) % WORKLOADS, wk[r], sizeof wk[r]);
    double t0 = kt_time_mono();
    int hits = 0;
    for (int r = 0; r < REPS; r++) {
        kt_record_list_t *l = NULL;
        hits += kt_store_best(s, wk[r], TARGET_NAMES[r % TARGETS], &l) == 0;
        kt_record_list_free(l);
    }
    printf("  %-34s %9.3f ms  (%d of %d found)\n", "QueryBest (kt_store_best)",
           (kt_time_mono() - t0) / REPS * 1e3, hits, REPS);
    t0 = kt_time_mono();
    for (int r = 0; r < REPS; r++) {
        kt_record_list_t *l = NULL;
        kt_store_top_k(s, wk[r], TARGET_NAMES[r % TARGETS], 10, &l);
        kt_record_list_free(l);
    }
    printf("  %-34s %9.3f ms\n", "QueryBest top_k=10", (kt_time_mono() - t0) / REPS * 1e3);

    enum { WALKS = 3 };
    kt_store_filter_t fs[WALKS];
    for (int r = 0; r < WALKS; r++)
        fs[r] = (kt_store_filter_t){.job_id = 1 + r * 7};
    time_walk(s, "ListRecords job", fs, WALKS);
    for (int r = 0; r < WALKS; r++)
        fs[r] = (kt_store_filter_t){.workload_key = wk[r], .target = TARGET_NAMES[r % TARGETS]};
    time_walk(s, "ListRecords workload+target", fs, WALKS);
    for (int r = 0; r < WALKS; r++)
        fs[r] = (kt_store_filter_t){.workload_key = wk[r], .target = TARGET_NAMES[r % TARGETS],
                                    .valid_only = 1};
    time_walk(s, "ListRecords workload+target+valid", fs, WALKS);
    kt_store_close(s);
    if (!keep && !db) {
        unlink(path);
        char side[600];
        snprintf(side, sizeof side, "%s-wal", path);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", path);
        unlink(side);
        rmdir(dir);
    } else {
        printf("kept %s\n", path);
    }
    return 0;
}
