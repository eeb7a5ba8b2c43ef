/*
 * bench_network: a whole network, tuned and run by ktune, against PyTorch
 * on the same machine in the same run (TVM's network tutorial, end to end).
 *
 * ResNet-18 (torchvision's architecture, random weights, batch norm with
 * non-trivial statistics; bench/network_torch.py) is exported to ONNX by
 * PyTorch, which also times itself eager in NCHW and channels-last on one
 * thread. ktune then tunes the model's tasks with N trials (one thread:
 * OMP_NUM_THREADS=1 for the embedded runner), builds the network from the
 * records and runs it on one thread (`ktune run`). Printed: the machine's
 * multiply-add ceiling, both latencies, ktune over PyTorch's faster layout,
 * the tuning time, and the largest difference between the two outputs.
 * Figures are printed, never asserted. ktune tune times a network's
 * candidates with their weights evicted (its default); --cache-flush tunes
 * with `ktune tune --cache-flush` (every cache flushed), --warm with
 * `ktune tune --no-flush-weights` (nothing flushed).
 *
 * usage: bench_network [--trials N] [--batch B] [--repeat R] [--db PATH]
 *                      [--dir DIR] [--skip-tune] [--cache-flush | --warm]
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_local.h"
#include "fma_peak.h"
#include "tensorio/tensorio.h"
#include "util/util.h"

/* Run cmd through the shell, echoing its output; v[i] gets the number after
 * keys[i] on the last line that has it (NAN when none). The exit status. */
static int run_capture(const char *cmd, const char *const *keys, double *v, int n)
{
    for (int i = 0; i < n; i++)
        v[i] = NAN;
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[4096];
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        for (int i = 0; i < n; i++) {
            char *k = strstr(line, keys[i]);
            if (k)
                v[i] = strtod(k + strlen(keys[i]), NULL);
        }
    }
    fflush(stdout);
    return pclose(p);
}

static double npy_rel_diff(const char *a, const char *b)
{
    float *x = NULL, *y = NULL;
    int64_t dx[8], dy[8];
    int nx = 0, ny = 0;
    double out = NAN;
    if (kt_npy_read(a, &x, dx, &nx) == 0 && kt_npy_read(b, &y, dy, &ny) == 0 && nx == ny) {
        int64_t n = 1;
        for (int d = 0; d < nx; d++)
            n *= dx[d];
        double big = 0, diff = 0;
        for (int64_t i = 0; i < n; i++) {
            big = fmax(big, fabs(y[i]));
            diff = fmax(diff, fabs((double)x[i] - y[i]));
        }
        out = big > 0 ? diff / big : diff;
    }
    free(x);
    free(y);
    return out;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trials", required_argument, 0, 't'}, {"batch", required_argument, 0, 'b'},
        {"repeat", required_argument, 0, 'r'}, {"db", required_argument, 0, 'd'},
        {"dir", required_argument, 0, 'o'},    {"skip-tune", no_argument, 0, 's'},
        {"cache-flush", no_argument, 0, 'f'},  {"warm", no_argument, 0, 'w'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    long trials = 2400, batch = 1, repeat = 30;
    const char *db = NULL, *dir = NULL;
    int skip_tune = 0, c;
    const char *flush = "";   /* what ktune tune is told to evict */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': trials = strtol(optarg, NULL, 10); break;
        case 'b': batch = strtol(optarg, NULL, 10); break;
        case 'r': repeat = strtol(optarg, NULL, 10); break;
        case 'd': db = optarg; break;
        case 'o': dir = optarg; break;
        case 's': skip_tune = 1; break;
        case 'f': flush = " --cache-flush"; break;
        case 'w': flush = " --no-flush-weights"; break;
        default:
            printf("usage: bench_network [--trials N (2400)] [--batch B (1)] [--repeat R (30)]\n"
                   "                     [--db PATH] [--dir DIR] [--skip-tune]\n"
                   "                     [--cache-flush | --warm]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (trials < 1 || batch < 1 || repeat < 1) {
        fprintf(stderr, "bench_network: --trials, --batch and --repeat must be >= 1\n");
        return 2;
    }
    char tmpl[] = "/tmp/bench_network_XXXXXX";
    if (!dir && !(dir = mkdtemp(tmpl))) {
        fprintf(stderr, "bench_network: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    mkdir(dir, 0755);
    char dbpath[2048], ktune[2400], script[2048], cmd[32768];
    snprintf(dbpath, sizeof dbpath, "%s", db ? db : "");
    if (!db)
        snprintf(dbpath, sizeof dbpath, "%s/ktune.db", dir);
    kt_bench_bin_path(ktune, sizeof ktune, argv[0], "cli/ktune");
    const char *src = getenv("KT_SOURCE_ROOT");
    snprintf(script, sizeof script, "%s/bench/network_torch.py", src ? src : ".");
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "bench_network: %s not found (run from the source root or set "
                        "KT_SOURCE_ROOT)\n", script);
        return 1;
    }

    int vb = 0;
    double peak = kt_bench_fma_peak_gflops(&vb);
    printf("machine: ");
    fflush(stdout);
    if (system("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'") != 0)
        printf("(unknown)\n");
    printf("one core's multiply-add ceiling: %.1f GFLOPS (%d-byte vectors)\n", peak, vb);
    printf("work directory: %s, store: %s\n\n", dir, dbpath);

    static const char *const torch_keys[] = {"torch_nchw_ms ", "torch_channels_last_ms "};
    double t_torch[2];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -W ignore '%s' '%s' %ld %ld 2>&1", script, dir,
             batch, repeat);
    int rc = run_capture(cmd, torch_keys, t_torch, 2);
    if (rc != 0 || isnan(t_torch[0]) || isnan(t_torch[1])) {
        fprintf(stderr, "bench_network: %s failed\n", script);
        return 1;
    }
    char onnx[2300], x[2300], y[2300], yt[2300];
    snprintf(onnx, sizeof onnx, "%s/resnet18.onnx", dir);
    snprintf(x, sizeof x, "%s/x.npy", dir);
    snprintf(y, sizeof y, "%s/y_ktune.npy", dir);
    snprintf(yt, sizeof yt, "%s/y_torch.npy", dir);

    double tune_s = 0;
    if (!skip_tune) {
        snprintf(cmd, sizeof cmd,
                 "OMP_NUM_THREADS=1 '%s' tune --onnx '%s' --trials %ld --db '%s'%s 2>&1 | "
                 "grep -E '^Estimated total latency|^Job|done'", ktune, onnx, trials, dbpath,
                 flush);
        double t0 = kt_time_mono();
        rc = run_capture(cmd, NULL, NULL, 0);
        tune_s = kt_time_mono() - t0;
        if (rc != 0) {
            fprintf(stderr, "bench_network: tuning failed\n");
            return 1;
        }
    }
    snprintf(cmd, sizeof cmd,
             "'%s' run --onnx '%s' --db '%s' --input '%s' --output '%s' --repeat %ld "
             "--threads 1 2>&1", ktune, onnx, dbpath, x, y, repeat);
    static const char *const run_keys[] = {"latency: "};
    double t_ktune;
    rc = run_capture(cmd, run_keys, &t_ktune, 1);
    if (rc != 0 || isnan(t_ktune)) {
        fprintf(stderr, "bench_network: ktune run failed\n");
        return 1;
    }
    double t_nchw = t_torch[0], t_cl = t_torch[1], best = t_nchw < t_cl ? t_nchw : t_cl;
    printf("\nResNet-18, batch %ld, one thread:\n", batch);
    printf("  PyTorch eager NCHW           %10.3f ms\n", t_nchw);
    printf("  PyTorch eager channels-last  %10.3f ms\n", t_cl);
    char label[64];
    snprintf(label, sizeof label, "ktune (%ld trials%s)", trials, skip_tune ? ", stored" : "");
    printf("  %-28s %10.3f ms\n", label, t_ktune);
    printf("  ktune / PyTorch's faster     %10.3f (goal <= 0.8)\n", t_ktune / best);
    if (!skip_tune)
        printf("  tuning time                  %10.0f s\n", tune_s);
    printf("  outputs differ by            %10.2g (relative to PyTorch's largest)\n",
           npy_rel_diff(y, yt));
    return 0;
}
