/* Library baselines for the benches: how fast this machine runs a matmul or
 * an NHWC conv2d (+ bias + relu) through OpenBLAS's sgemm on one thread, so
 * a bench can print its kernels' speed as a share of what a tuned library
 * reaches in the same run (a ratio target between two search policies means
 * little when both are already close to that ceiling).
 *
 * The conv2d baseline is im2col into a [OH*OW, KH*KW*CI] matrix, one sgemm
 * with the HWIO weight ([KH*KW*CI, CO]), then bias and relu: the standard
 * library route (oneDNN's direct convolution can be faster). Its answers are
 * checked at sampled points against a direct loop; a mismatch is fatal.
 *
 * Times are thread CPU time, the fastest of repeats lasting >= 0.2 s in all
 * (the machine may be shared). Everything is allocated and freed inside.
 * Not thread-safe: OpenBLAS is set to one thread for the whole process. */
#ifndef KT_BENCH_BLAS_H
#define KT_BENCH_BLAS_H

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double kt_bench_blas_cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline float *kt_bench_blas_fill(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench baseline: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 16) & 0x7fff) / 32768.0f - 0.5f;
    }
    return p;
}

/* Fastest of repeats of fn(arg) after a warm-up, in seconds. */
static inline double kt_bench_blas_time(void (*fn)(void *), void *arg)
{
    fn(arg);
    double best = INFINITY, spent = 0;
    for (int r = 0; r < 200 && (r < 5 || spent < 0.2); r++) {
        double t0 = kt_bench_blas_cpu_now();
        fn(arg);
        double dt = kt_bench_blas_cpu_now() - t0;
        spent += dt;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    int M, N, K;
    const float *A, *B;
    float *C;
} kt_bench_gemm_t;

static inline void kt_bench_blas_gemm_run(void *arg)
{
    kt_bench_gemm_t *g = arg;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->M, g->N, g->K, 1.0f, g->A, g->K,
                g->B, g->N, 0.0f, g->C, g->N);
}

/* Seconds of one C[M,N] = A[M,K] B[K,N] with OpenBLAS on one thread. */
static inline double kt_bench_blas_matmul(int M, int N, int K)
{
    openblas_set_num_threads(1);
    float *A = kt_bench_blas_fill((size_t)M * K, 1), *B = kt_bench_blas_fill((size_t)K * N, 2);
    float *C = kt_bench_blas_fill((size_t)M * N, 3);
    kt_bench_gemm_t g = {M, N, K, A, B, C};
    double t = kt_bench_blas_time(kt_bench_blas_gemm_run, &g);
    free(A);
    free(B);
    free(C);
    return t;
}

typedef struct {
    int H, W, CI, CO, KH, KW, pad, OH, OW;
    const float *data, *weight, *bias;
    float *col, *out;
} kt_bench_conv_t;

static inline void kt_bench_blas_conv_run(void *arg)
{
    kt_bench_conv_t *c = arg;
    int kc = c->KH * c->KW * c->CI;
    for (int oh = 0; oh < c->OH; oh++)
        for (int ow = 0; ow < c->OW; ow++) {
            float *row = c->col + ((size_t)oh * c->OW + ow) * kc;
            for (int kh = 0; kh < c->KH; kh++)
                for (int kw = 0; kw < c->KW; kw++) {
                    int h = oh + kh - c->pad, w = ow + kw - c->pad;
                    float *dst = row + (kh * c->KW + kw) * c->CI;
                    if (h < 0 || h >= c->H || w < 0 || w >= c->W) {
                        for (int ci = 0; ci < c->CI; ci++)
                            dst[ci] = 0.0f;
                    } else {
                        const float *src = c->data + ((size_t)h * c->W + w) * c->CI;
                        for (int ci = 0; ci < c->CI; ci++)
                            dst[ci] = src[ci];
                    }
                }
        }
    int m = c->OH * c->OW;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, c->CO, kc, 1.0f, c->col, kc,
                c->weight, c->CO, 0.0f, c->out, c->CO);
    for (int i = 0; i < m; i++)
        for (int co = 0; co < c->CO; co++) {
            float v = c->out[(size_t)i * c->CO + co] + c->bias[co];
            c->out[(size_t)i * c->CO + co] = v > 0.0f ? v : 0.0f;
        }
}

/* Seconds of one NHWC conv2d (batch 1, stride 1, HWIO weight, symmetric
 * padding) with bias and relu, through im2col + OpenBLAS on one thread. */
static inline double kt_bench_blas_conv2d(int H, int W, int CI, int CO, int KH, int KW, int pad)
{
    openblas_set_num_threads(1);
    kt_bench_conv_t c = {.H = H, .W = W, .CI = CI, .CO = CO, .KH = KH, .KW = KW, .pad = pad,
                         .OH = H + 2 * pad - KH + 1, .OW = W + 2 * pad - KW + 1};
    float *data = kt_bench_blas_fill((size_t)H * W * CI, 4);
    float *weight = kt_bench_blas_fill((size_t)KH * KW * CI * CO, 5);
    float *bias = kt_bench_blas_fill((size_t)CO, 6);
    c.data = data;
    c.weight = weight;
    c.bias = bias;
    c.col = kt_bench_blas_fill((size_t)c.OH * c.OW * KH * KW * CI, 7);
    c.out = kt_bench_blas_fill((size_t)c.OH * c.OW * CO, 8);
    double t = kt_bench_blas_time(kt_bench_blas_conv_run, &c);
    /* a direct loop at sampled outputs: the baseline must compute the op */
    for (int s = 0; s < 64; s++) {
        int oh = (s * 37) % c.OH, ow = (s * 53 + s / 7) % c.OW, co = (s * 29) % CO;
        double want = bias[co];
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                int h = oh + kh - pad, w = ow + kw - pad;
                if (h < 0 || h >= H || w < 0 || w >= W)
                    continue;
                for (int ci = 0; ci < CI; ci++)
                    want += (double)data[((size_t)h * W + w) * CI + ci] *
                            weight[(((size_t)kh * KW + kw) * CI + ci) * CO + co];
            }
        want = want > 0 ? want : 0;
        double got = c.out[((size_t)oh * c.OW + ow) * CO + co];
        if (fabs(got - want) > 1e-3 * (1 + fabs(want))) {
            fprintf(stderr, "bench baseline: im2col conv2d disagrees with a direct loop "
                            "(%g against %g)\n", got, want);
            exit(1);
        }
    }
    free(data);
    free(weight);
    free(bias);
    free(c.col);
    free(c.out);
    return t;
}

#endif
