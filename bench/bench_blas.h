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
 * With oneDNN (KT_HAVE_DNNL: meson finds libdnnl), kt_bench_dnnl_conv2d times
 * the same conv2d with oneDNN's direct convolution, the faster library route.
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

/* One conv2d's shape and buffers (NHWC data and out, HWIO weight; col:
 * the im2col route's matrix, NULL otherwise), all owned. */
typedef struct {
    int H, W, CI, CO, KH, KW, pad, OH, OW;
    float *data, *weight, *bias, *col, *out;
} kt_bench_conv_t;

static inline kt_bench_conv_t kt_bench_conv_new(int H, int W, int CI, int CO, int KH, int KW,
                                                int pad)
{
    kt_bench_conv_t c = {.H = H, .W = W, .CI = CI, .CO = CO, .KH = KH, .KW = KW, .pad = pad,
                         .OH = H + 2 * pad - KH + 1, .OW = W + 2 * pad - KW + 1};
    c.data = kt_bench_blas_fill((size_t)H * W * CI, 4);
    c.weight = kt_bench_blas_fill((size_t)KH * KW * CI * CO, 5);
    c.bias = kt_bench_blas_fill((size_t)CO, 6);
    c.out = kt_bench_blas_fill((size_t)c.OH * c.OW * CO, 8);
    return c;
}

static inline void kt_bench_conv_free(kt_bench_conv_t *c)
{
    free(c->data);
    free(c->weight);
    free(c->bias);
    free(c->col);
    free(c->out);
}

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

/* Exits when out (NHWC) is not c's conv2d + bias + relu at 64 sampled
 * outputs, computed by a direct loop: a baseline must compute the op. */
static inline void kt_bench_conv_check(const char *what, const kt_bench_conv_t *c,
                                       const float *out)
{
    for (int s = 0; s < 64; s++) {
        int oh = (s * 37) % c->OH, ow = (s * 53 + s / 7) % c->OW, co = (s * 29) % c->CO;
        double want = c->bias[co];
        for (int kh = 0; kh < c->KH; kh++)
            for (int kw = 0; kw < c->KW; kw++) {
                int h = oh + kh - c->pad, w = ow + kw - c->pad;
                if (h < 0 || h >= c->H || w < 0 || w >= c->W)
                    continue;
                for (int ci = 0; ci < c->CI; ci++)
                    want += (double)c->data[((size_t)h * c->W + w) * c->CI + ci] *
                            c->weight[(((size_t)kh * c->KW + kw) * c->CI + ci) * c->CO + co];
            }
        want = want > 0 ? want : 0;
        double got = out[((size_t)oh * c->OW + ow) * c->CO + co];
        if (fabs(got - want) > 1e-3 * (1 + fabs(want))) {
            fprintf(stderr, "bench baseline: %s disagrees with a direct loop (%g against %g)\n",
                    what, got, want);
            exit(1);
        }
    }
}

/* Seconds of one NHWC conv2d (batch 1, stride 1, HWIO weight, symmetric
 * padding) with bias and relu, through im2col + OpenBLAS on one thread. */
static inline double kt_bench_blas_conv2d(int H, int W, int CI, int CO, int KH, int KW, int pad)
{
    openblas_set_num_threads(1);
    kt_bench_conv_t c = kt_bench_conv_new(H, W, CI, CO, KH, KW, pad);
    c.col = kt_bench_blas_fill((size_t)c.OH * c.OW * KH * KW * CI, 7);
    double t = kt_bench_blas_time(kt_bench_blas_conv_run, &c);
    kt_bench_conv_check("im2col conv2d", &c, c.out);
    kt_bench_conv_free(&c);
    return t;
}

#ifdef KT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

void omp_set_num_threads(int);   /* oneDNN runs on libgomp here */

typedef struct {
    dnnl_primitive_t conv;
    dnnl_stream_t stream;
    dnnl_exec_arg_t args[4];
} kt_bench_dnnl_t;

static inline void kt_bench_dnnl_run(void *arg)
{
    kt_bench_dnnl_t *d = arg;
    if (dnnl_primitive_execute(d->conv, d->stream, 4, d->args) != dnnl_success ||
        dnnl_stream_wait(d->stream) != dnnl_success) {
        fprintf(stderr, "bench baseline: oneDNN convolution failed\n");
        exit(1);
    }
}

#define KT_BENCH_DNNL(call)                                                              \
    do {                                                                                 \
        if ((call) != dnnl_success) {                                                    \
            fprintf(stderr, "bench baseline: oneDNN: %s failed\n", #call);               \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Seconds of the same conv2d + bias + relu as kt_bench_blas_conv2d with
 * oneDNN's direct convolution on one thread: NHWC in and out as ktune's
 * kernels, relu a post-op, the weights reordered once (outside the timing)
 * into the layout the primitive prefers, as Ansor's layout rewrite does. */
static inline double kt_bench_dnnl_conv2d(int H, int W, int CI, int CO, int KH, int KW, int pad)
{
    omp_set_num_threads(1);
    kt_bench_conv_t c = kt_bench_conv_new(H, W, CI, CO, KH, KW, pad);
    dnnl_engine_t eng;
    kt_bench_dnnl_t d;
    KT_BENCH_DNNL(dnnl_engine_create(&eng, dnnl_cpu, 0));
    KT_BENCH_DNNL(dnnl_stream_create(&d.stream, eng, dnnl_stream_default_flags));
    dnnl_dims_t src_dims = {1, CI, H, W}, wei_dims = {CO, CI, KH, KW}, bia_dims = {CO},
                dst_dims = {1, CO, c.OH, c.OW}, strides = {1, 1}, padding = {pad, pad};
    dnnl_memory_desc_t src_md, wei_user_md, wei_any_md, bia_md, dst_md;
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&wei_user_md, 4, wei_dims, dnnl_f32, dnnl_hwio));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&wei_any_md, 4, wei_dims, dnnl_f32,
                                               dnnl_format_tag_any));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&bia_md, 1, bia_dims, dnnl_f32, dnnl_x));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc));
    dnnl_convolution_desc_t cd;
    KT_BENCH_DNNL(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                     dnnl_convolution_direct, &src_md,
                                                     &wei_any_md, &bia_md, &dst_md, strides,
                                                     padding, padding));
    dnnl_post_ops_t po;
    dnnl_primitive_attr_t attr;
    KT_BENCH_DNNL(dnnl_post_ops_create(&po));
    KT_BENCH_DNNL(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    KT_BENCH_DNNL(dnnl_primitive_attr_create(&attr));
    KT_BENCH_DNNL(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd, rpd;
    KT_BENCH_DNNL(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    const dnnl_memory_desc_t *wei_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t src_m, wei_user_m, wei_m, bia_m, dst_m;
    KT_BENCH_DNNL(dnnl_memory_create(&src_m, &src_md, eng, c.data));
    KT_BENCH_DNNL(dnnl_memory_create(&wei_user_m, &wei_user_md, eng, c.weight));
    KT_BENCH_DNNL(dnnl_memory_create(&wei_m, wei_md, eng, DNNL_MEMORY_ALLOCATE));
    KT_BENCH_DNNL(dnnl_memory_create(&bia_m, &bia_md, eng, c.bias));
    KT_BENCH_DNNL(dnnl_memory_create(&dst_m, &dst_md, eng, c.out));
    /* the weights' layout rewrite, once */
    dnnl_primitive_t reorder;
    KT_BENCH_DNNL(dnnl_reorder_primitive_desc_create(&rpd, &wei_user_md, eng, wei_md, eng, NULL));
    KT_BENCH_DNNL(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, wei_user_m}, {DNNL_ARG_TO, wei_m}};
    KT_BENCH_DNNL(dnnl_primitive_execute(reorder, d.stream, 2, rargs));
    KT_BENCH_DNNL(dnnl_stream_wait(d.stream));
    KT_BENCH_DNNL(dnnl_primitive_create(&d.conv, pd));
    d.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, src_m};
    d.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wei_m};
    d.args[2] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bia_m};
    d.args[3] = (dnnl_exec_arg_t){DNNL_ARG_DST, dst_m};
    double t = kt_bench_blas_time(kt_bench_dnnl_run, &d);
    kt_bench_conv_check("oneDNN conv2d", &c, c.out);
    dnnl_primitive_destroy(d.conv);
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    dnnl_memory_destroy(src_m);
    dnnl_memory_destroy(wei_user_m);
    dnnl_memory_destroy(wei_m);
    dnnl_memory_destroy(bia_m);
    dnnl_memory_destroy(dst_m);
    dnnl_stream_destroy(d.stream);
    dnnl_engine_destroy(eng);
    kt_bench_conv_free(&c);
    return t;
}
#endif

#endif
