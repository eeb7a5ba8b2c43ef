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
 * the same conv2d with oneDNN's direct convolution, the faster library route,
 * and kt_bench_dnnl_conv_init / _dense_init / _matmul_init set up oneDNN's
 * convolution (any algorithm, any of the implementations it offers),
 * inner product or matmul primitive for any of ktune's conv2d_nhwc, dense or
 * matmul workloads on the caller's buffers: the epilogues as the primitive's
 * bias and post-ops (a residual add as the sum post-op, dst refilled before
 * each call by kt_bench_dnnl_prep), the weights in the format the primitive
 * chooses, reordered once; to be timed with kt_bench_time_prep beside a
 * ktune kernel. sgemm: dnnl_sgemm.
 *
 * Times are thread CPU time (wall time where asked), the fastest of repeats
 * lasting >= 0.2 s in all (the machine may be shared). The kt_bench_blas_*
 * and kt_bench_dnnl_conv2d calls allocate and free everything inside. Not
 * thread-safe: OpenBLAS is set to one thread for the whole process, oneDNN
 * takes OpenMP's thread count (omp_set_num_threads). */
#ifndef KT_BENCH_BLAS_H
#define KT_BENCH_BLAS_H

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static inline double kt_bench_wall_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Fastest of repeats of fn(arg) after a warm-up, in seconds: at least 5
 * repeats and 0.2 s in all (at most 200), timed in this thread's CPU time
 * or, with wall set, in wall time (for kernels on several threads, whose CPU
 * times add up). prep(arg), when not NULL, runs before every call outside
 * the timing: it restores what a call consumes (the residual a sum post-op
 * accumulates into its output). */
static inline double kt_bench_time_prep(void (*fn)(void *), void (*prep)(void *), void *arg,
                                        int wall)
{
    double (*now)(void) = wall ? kt_bench_wall_now : kt_bench_blas_cpu_now;
    if (prep)
        prep(arg);
    fn(arg);
    double best = INFINITY, spent = 0;
    for (int r = 0; r < 200 && (r < 5 || spent < 0.2); r++) {
        if (prep)
            prep(arg);
        double t0 = now();
        fn(arg);
        double dt = now() - t0;
        spent += dt;
        best = dt < best ? dt : best;
    }
    return best;
}

/* kt_bench_time_prep without a prep step. */
static inline double kt_bench_time(void (*fn)(void *), void *arg, int wall)
{
    return kt_bench_time_prep(fn, NULL, arg, wall);
}

/* kt_bench_time in thread CPU time. */
static inline double kt_bench_blas_time(void (*fn)(void *), void *arg)
{
    return kt_bench_time(fn, arg, 0);
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

#define KT_BENCH_DNNL(call)                                                              \
    do {                                                                                 \
        if ((call) != dnnl_success) {                                                    \
            fprintf(stderr, "bench baseline: oneDNN: %s failed\n", #call);               \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define KT_BENCH_DNNL_MAX_ARGS 16

/* A oneDNN primitive ready to run on borrowed buffers: its arguments, and
 * what kt_bench_dnnl_free destroys (the engine, stream, primitive, its
 * memories and the copies it holds in its own layouts). impl: oneDNN's name
 * for the implementation it chose ("brgconv:avx512_core", "gemm:jit", ...).
 * dst: the primitive's output; dst_user: the caller's when the primitive
 * writes another layout (kt_bench_dnnl_output reorders into it), else NULL;
 * sum: with a sum post-op, the residual in dst's layout, which
 * kt_bench_dnnl_prep copies into dst before each call (the post-op adds the
 * result to what dst holds), else NULL. */
typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[KT_BENCH_DNNL_MAX_ARGS];
    int nargs;
    dnnl_memory_t mem[KT_BENCH_DNNL_MAX_ARGS];
    int nmem;
    dnnl_memory_t dst, dst_user, sum;
    size_t dst_bytes;
    char impl[64];
} kt_bench_dnnl_t;

static inline void kt_bench_dnnl_run(void *arg)
{
    kt_bench_dnnl_t *d = arg;
    if (dnnl_primitive_execute(d->prim, d->stream, d->nargs, d->args) != dnnl_success ||
        dnnl_stream_wait(d->stream) != dnnl_success) {
        fprintf(stderr, "bench baseline: oneDNN primitive failed\n");
        exit(1);
    }
}

/* kt_bench_time_prep's step for a kt_bench_dnnl_t: dst gets the residual
 * again, as in a network where the residual's buffer is the output's, so
 * each call computes the layer (a no-op without a sum post-op). */
static inline void kt_bench_dnnl_prep(void *arg)
{
    kt_bench_dnnl_t *d = arg;
    if (!d->sum)
        return;
    void *to = NULL, *from = NULL;
    KT_BENCH_DNNL(dnnl_memory_get_data_handle(d->dst, &to));
    KT_BENCH_DNNL(dnnl_memory_get_data_handle(d->sum, &from));
    memcpy(to, from, d->dst_bytes);
}

static inline void kt_bench_dnnl_free(kt_bench_dnnl_t *d)
{
    if (d->prim)
        dnnl_primitive_destroy(d->prim);
    for (int i = 0; i < d->nmem; i++)
        dnnl_memory_destroy(d->mem[i]);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->eng);
    memset(d, 0, sizeof *d);
}

/* A memory on the borrowed buffer p (DNNL_MEMORY_ALLOCATE: oneDNN's own),
 * destroyed with d; passed to the primitive as argument `arg` unless 0. */
static inline dnnl_memory_t kt_bench_dnnl_mem(kt_bench_dnnl_t *d, const dnnl_memory_desc_t *md,
                                              const void *p, int arg)
{
    if (d->nmem == KT_BENCH_DNNL_MAX_ARGS || d->nargs == KT_BENCH_DNNL_MAX_ARGS) {
        fprintf(stderr, "bench baseline: oneDNN: too many arguments\n");
        exit(1);
    }
    dnnl_memory_t m;
    KT_BENCH_DNNL(dnnl_memory_create(&m, md, d->eng, (void *)p));
    d->mem[d->nmem++] = m;
    if (arg)
        d->args[d->nargs++] = (dnnl_exec_arg_t){arg, m};
    return m;
}

/* One reorder of from into to (set-up or read-back, never timed). */
static inline void kt_bench_dnnl_reorder(kt_bench_dnnl_t *d, dnnl_memory_t from, dnnl_memory_t to)
{
    const dnnl_memory_desc_t *fmd, *tmd;
    KT_BENCH_DNNL(dnnl_memory_get_memory_desc(from, &fmd));
    KT_BENCH_DNNL(dnnl_memory_get_memory_desc(to, &tmd));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    KT_BENCH_DNNL(dnnl_reorder_primitive_desc_create(&rpd, fmd, d->eng, tmd, d->eng, NULL));
    KT_BENCH_DNNL(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    KT_BENCH_DNNL(dnnl_primitive_execute(reorder, d->stream, 2, args));
    KT_BENCH_DNNL(dnnl_stream_wait(d->stream));
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
}

/* The last call's output into the caller's buffer, where the primitive
 * writes a layout of its own (untimed: a network kept in oneDNN's layout
 * reorders once at its end). */
static inline void kt_bench_dnnl_output(kt_bench_dnnl_t *d)
{
    if (d->dst_user)
        kt_bench_dnnl_reorder(d, d->dst, d->dst_user);
}

/* ktune's epilogues (te/ops.h names, in order) as oneDNN post-ops on an
 * output of dims out[0..ndims) whose channel axis is 1 (nchw or ab order;
 * full_tag: the caller's layout of the output). The first bias_add that
 * only additions precede becomes the primitive's own bias, as a library
 * user fuses it (*bias_epi: its index, -1 when none). The first residual
 * add becomes a sum post-op, as frameworks fuse a residual: the primitive
 * adds its result into dst, which holds the residual before each call
 * (*sum_epi: its index, -1 when none; kt_bench_dnnl_prep). Further adds and
 * the other channel-wise operands are binary post-ops whose operands
 * (params[e], borrowed) join d's arguments; relu, gelu, sigmoid and tanh
 * are eltwise post-ops. Exits for an epilogue with no post-op here. */
static inline dnnl_primitive_attr_t kt_bench_dnnl_epilogue(kt_bench_dnnl_t *d,
                                                           const char *const *epi, int nepi,
                                                           const float *const *params,
                                                           int ndims, const dnnl_dims_t out,
                                                           dnnl_format_tag_t full_tag,
                                                           int *bias_epi, int *sum_epi)
{
    dnnl_post_ops_t po;
    dnnl_primitive_attr_t attr;
    KT_BENCH_DNNL(dnnl_post_ops_create(&po));
    dnnl_dims_t chan;
    for (int i = 0; i < ndims; i++)
        chan[i] = i == 1 ? out[1] : 1;
    dnnl_format_tag_t plain = ndims == 4 ? dnnl_nchw : dnnl_ab;
    int only_adds = 1;
    *bias_epi = *sum_epi = -1;
    for (int e = 0; e < nepi; e++) {
        const char *x = epi[e];
        int channel = strcmp(x, "bias_add") == 0 || strcmp(x, "multiply") == 0;
        if (strcmp(x, "bias_add") == 0 && only_adds && *bias_epi < 0) {
            *bias_epi = e;
        } else if (strcmp(x, "add") == 0 && *sum_epi < 0) {
            *sum_epi = e;
            KT_BENCH_DNNL(dnnl_post_ops_append_sum(po, 1.0f));
        } else if (channel || strcmp(x, "add") == 0) {
            dnnl_memory_desc_t md;
            KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&md, ndims, channel ? chan : out,
                                                       dnnl_f32, channel ? plain : full_tag));
            int at = dnnl_post_ops_len(po);
            KT_BENCH_DNNL(dnnl_post_ops_append_binary(
                po, strcmp(x, "multiply") == 0 ? dnnl_binary_mul : dnnl_binary_add, &md));
            kt_bench_dnnl_mem(d, &md, params[e], DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1);
        } else {
            dnnl_alg_kind_t alg = strcmp(x, "relu") == 0      ? dnnl_eltwise_relu
                                  : strcmp(x, "gelu") == 0    ? dnnl_eltwise_gelu_erf
                                  : strcmp(x, "sigmoid") == 0 ? dnnl_eltwise_logistic
                                  : strcmp(x, "tanh") == 0    ? dnnl_eltwise_tanh
                                                              : dnnl_alg_kind_undef;
            if (alg == dnnl_alg_kind_undef) {
                fprintf(stderr, "bench baseline: epilogue %s has no oneDNN post-op here\n", x);
                exit(1);
            }
            KT_BENCH_DNNL(dnnl_post_ops_append_eltwise(po, 1.0f, alg, 0.0f, 0.0f));
        }
        only_adds = only_adds && (strcmp(x, "add") == 0 || strcmp(x, "bias_add") == 0);
    }
    KT_BENCH_DNNL(dnnl_primitive_attr_create(&attr));
    KT_BENCH_DNNL(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
    return attr;
}

/* The memory descriptors of a primitive with weights: the caller's src and
 * dst in the layout act and its weights in wtag; the primitive's src and
 * dst in op_act (act itself, or format tag any: the primitive's choice)
 * and its weights as format tag any; the bias [dst[1]], or [1, dst[1]]
 * with bias_2d (matmul's bias has the output's rank). */
typedef struct {
    dnnl_memory_desc_t src, wei_user, bia, dst;
    dnnl_memory_desc_t src_op, wei_any, dst_op;
} kt_bench_dnnl_mds_t;

static inline void kt_bench_dnnl_mds(kt_bench_dnnl_mds_t *m, int ndims, const dnnl_dims_t src,
                                     const dnnl_dims_t wei, const dnnl_dims_t dst,
                                     dnnl_format_tag_t act, dnnl_format_tag_t wtag,
                                     dnnl_format_tag_t op_act, int bias_2d)
{
    dnnl_dims_t bia = {bias_2d ? 1 : dst[1], dst[1]};
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->src, ndims, src, dnnl_f32, act));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->wei_user, ndims, wei, dnnl_f32, wtag));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->bia, bias_2d ? 2 : 1, bia, dnnl_f32,
                                               bias_2d ? dnnl_ab : dnnl_x));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->dst, ndims, dst, dnnl_f32, act));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->src_op, ndims, src, dnnl_f32, op_act));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->wei_any, ndims, wei, dnnl_f32,
                                               dnnl_format_tag_any));
    KT_BENCH_DNNL(dnnl_memory_desc_init_by_tag(&m->dst_op, ndims, dst, dnnl_f32, op_act));
}

/* The primitive's memory for argument arg (query: its descriptor in pd) on
 * the caller's buffer p, whose layout is user: p itself where the primitive
 * takes that layout, else memory of its own, into which p is reordered once
 * with copy_in (untimed, as a network built once does); *user (when not
 * NULL) gets the caller's memory in that case, NULL otherwise. */
static inline dnnl_memory_t kt_bench_dnnl_bind(kt_bench_dnnl_t *d, const_dnnl_primitive_desc_t pd,
                                               dnnl_query_t query,
                                               const dnnl_memory_desc_t *user, const void *p,
                                               int arg, int copy_in, dnnl_memory_t *user_mem)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, query, 0);
    if (user_mem)
        *user_mem = NULL;
    if (!md) {
        fprintf(stderr, "bench baseline: oneDNN: a primitive without a memory it needs\n");
        exit(1);
    }
    if (dnnl_memory_desc_equal(md, user))
        return kt_bench_dnnl_mem(d, user, p, arg);
    dnnl_memory_t u = kt_bench_dnnl_mem(d, user, p, 0);
    dnnl_memory_t own = kt_bench_dnnl_mem(d, md, DNNL_MEMORY_ALLOCATE, arg);
    if (copy_in)
        kt_bench_dnnl_reorder(d, u, own);
    if (user_mem)
        *user_mem = u;
    return own;
}

/* The rest of a primitive with weights: creates oneDNN's nth implementation
 * of op_desc with attr (0: the one oneDNN picks; the others in its order of
 * preference) and binds src, weights, bias (when not NULL) and dst to the
 * caller's buffers (kt_bench_dnnl_bind); with sum (the residual of a sum
 * post-op, in the caller's layout of dst) it keeps the residual's copy in
 * dst's layout for kt_bench_dnnl_prep. Takes attr. Returns 0, or 1 when
 * oneDNN has no nth implementation (d released); exits on other failures. */
static inline int kt_bench_dnnl_finish(kt_bench_dnnl_t *d, const void *op_desc,
                                       dnnl_primitive_attr_t attr, const kt_bench_dnnl_mds_t *m,
                                       int nth, const float *src, const float *weight,
                                       const float *bias, const float *sum, float *dst)
{
    /* the nth of distinct names: after oneDNN's primitive cache has one of
     * them, the iterator offers that one first and again in its turn */
    enum { SEEN = 8 };
    char seen[SEEN][sizeof d->impl];
    int nseen = 0;
    dnnl_primitive_desc_iterator_t it = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, op_desc, attr, d->eng, NULL);
    if (st != dnnl_success)
        it = NULL;
    while (st == dnnl_success) {
        const char *impl = NULL;
        if (!(pd = dnnl_primitive_desc_iterator_fetch(it)) ||
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
            impl = NULL;
        snprintf(d->impl, sizeof d->impl, "%s", impl ? impl : "?");
        int dup = 0;
        for (int i = 0; i < nseen; i++)
            dup = dup || strcmp(seen[i], d->impl) == 0;
        if (!dup && nseen == nth)
            break;
        if (!dup && nseen < SEEN)
            memcpy(seen[nseen++], d->impl, sizeof d->impl);
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        st = dnnl_primitive_desc_iterator_next(it);
    }
    if (it)
        dnnl_primitive_desc_iterator_destroy(it);
    dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_unimplemented || st == dnnl_iterator_ends) {
        kt_bench_dnnl_free(d);
        return 1;
    }
    if (st != dnnl_success || !pd) {
        fprintf(stderr, "bench baseline: oneDNN: creating a primitive failed (status %d)\n",
                (int)st);
        exit(1);
    }
    kt_bench_dnnl_bind(d, pd, dnnl_query_src_md, &m->src, src, DNNL_ARG_SRC, 1, NULL);
    kt_bench_dnnl_bind(d, pd, dnnl_query_weights_md, &m->wei_user, weight, DNNL_ARG_WEIGHTS, 1,
                       NULL);
    if (bias)
        kt_bench_dnnl_mem(d, &m->bia, bias, DNNL_ARG_BIAS);
    d->dst = kt_bench_dnnl_bind(d, pd, dnnl_query_dst_md, &m->dst, dst, DNNL_ARG_DST, 0,
                                &d->dst_user);
    if (sum) {
        const dnnl_memory_desc_t *md;
        KT_BENCH_DNNL(dnnl_memory_get_memory_desc(d->dst, &md));
        d->sum = kt_bench_dnnl_mem(d, md, DNNL_MEMORY_ALLOCATE, 0);
        kt_bench_dnnl_reorder(d, kt_bench_dnnl_mem(d, &m->dst, sum, 0), d->sum);
        d->dst_bytes = dnnl_memory_desc_get_size(md);
    }
    KT_BENCH_DNNL(dnnl_primitive_create(&d->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static inline void kt_bench_dnnl_start(kt_bench_dnnl_t *d)
{
    memset(d, 0, sizeof *d);
    KT_BENCH_DNNL(dnnl_engine_create(&d->eng, dnnl_cpu, 0));
    KT_BENCH_DNNL(dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags));
}

/* The operand of epilogue e, or NULL for e < 0. */
static inline const float *kt_bench_dnnl_param(const float *const *params, int e)
{
    return e >= 0 ? params[e] : NULL;
}

/* One NHWC conv2d (batch 1, HWIO weight) with ktune's epilogues, on
 * borrowed buffers: params[e] is epilogue e's operand (bias or scale [CO],
 * residual in the output's NHWC shape; NULL for the others). */
typedef struct {
    int H, W, CI, CO, KH, KW;
    int stride[2], dilation[2];
    int pad[4];                  /* top, left, bottom, right */
    const char *const *epi;
    int nepi;
    const float *const *params;
    const float *data, *weight;
    float *out;
} kt_bench_dnnl_conv_t;

/* d gets oneDNN's convolution of c with algorithm alg (dnnl_convolution_auto:
 * oneDNN's choice; _direct; _winograd), its nth implementation
 * (kt_bench_dnnl_finish): src and dst NHWC as ktune's kernels, except with
 * Winograd, which oneDNN implements on its blocked layout only (nChw16c):
 * there they take the primitive's layout, the input and the residual
 * reordered into it once and the output read back by kt_bench_dnnl_output,
 * untimed, as in a network kept in oneDNN's layout from layer to layer. The
 * weights take the primitive's format (format tag any), reordered once; the
 * epilogues are fused (kt_bench_dnnl_epilogue). Returns 0, or 1 when oneDNN
 * has no such implementation (Winograd for a 1x1 or strided convolution). */
static inline int kt_bench_dnnl_conv_init(kt_bench_dnnl_t *d, const kt_bench_dnnl_conv_t *c,
                                          dnnl_alg_kind_t alg, int nth)
{
    kt_bench_dnnl_start(d);
    int OH = (c->H + c->pad[0] + c->pad[2] - c->dilation[0] * (c->KH - 1) - 1) / c->stride[0] + 1;
    int OW = (c->W + c->pad[1] + c->pad[3] - c->dilation[1] * (c->KW - 1) - 1) / c->stride[1] + 1;
    dnnl_dims_t src_dims = {1, c->CI, c->H, c->W}, wei_dims = {c->CO, c->CI, c->KH, c->KW},
                dst_dims = {1, c->CO, OH, OW}, strides = {c->stride[0], c->stride[1]},
                dilates = {c->dilation[0] - 1, c->dilation[1] - 1}, pad_l = {c->pad[0], c->pad[1]},
                pad_r = {c->pad[2], c->pad[3]};
    kt_bench_dnnl_mds_t m;
    kt_bench_dnnl_mds(&m, 4, src_dims, wei_dims, dst_dims, dnnl_nhwc, dnnl_hwio,
                      alg == dnnl_convolution_winograd ? dnnl_format_tag_any : dnnl_nhwc, 0);
    int bias_epi, sum_epi;
    dnnl_primitive_attr_t attr = kt_bench_dnnl_epilogue(d, c->epi, c->nepi, c->params, 4,
                                                        dst_dims, dnnl_nhwc, &bias_epi, &sum_epi);
    dnnl_convolution_desc_t cd;
    KT_BENCH_DNNL(dnnl_dilated_convolution_forward_desc_init(
        &cd, dnnl_forward_inference, alg, &m.src_op, &m.wei_any, bias_epi >= 0 ? &m.bia : NULL,
        &m.dst_op, strides, dilates, pad_l, pad_r));
    return kt_bench_dnnl_finish(d, &cd, attr, &m, nth, c->data, c->weight,
                                kt_bench_dnnl_param(c->params, bias_epi),
                                kt_bench_dnnl_param(c->params, sum_epi), c->out);
}

/* d gets oneDNN's inner product out[M, N] = data[M, K] weight[N, K]^T (ktune's
 * dense) with its epilogues, as kt_bench_dnnl_conv_init does (0, or 1 when
 * oneDNN has no implementation). */
static inline int kt_bench_dnnl_dense_init(kt_bench_dnnl_t *d, int M, int N, int K,
                                           const char *const *epi, int nepi,
                                           const float *const *params, const float *data,
                                           const float *weight, float *out)
{
    kt_bench_dnnl_start(d);
    dnnl_dims_t src_dims = {M, K}, wei_dims = {N, K}, dst_dims = {M, N};
    kt_bench_dnnl_mds_t m;
    kt_bench_dnnl_mds(&m, 2, src_dims, wei_dims, dst_dims, dnnl_ab, dnnl_ab, dnnl_ab, 0);
    int bias_epi, sum_epi;
    dnnl_primitive_attr_t attr =
        kt_bench_dnnl_epilogue(d, epi, nepi, params, 2, dst_dims, dnnl_ab, &bias_epi, &sum_epi);
    dnnl_inner_product_desc_t ipd;
    KT_BENCH_DNNL(dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_inference, &m.src_op,
                                                       &m.wei_any,
                                                       bias_epi >= 0 ? &m.bia : NULL, &m.dst_op));
    return kt_bench_dnnl_finish(d, &ipd, attr, &m, 0, data, weight,
                                kt_bench_dnnl_param(params, bias_epi),
                                kt_bench_dnnl_param(params, sum_epi), out);
}

/* d gets oneDNN's matmul primitive out[M, N] = a[M, K] b[K, N] with
 * ktune's epilogues (the bias as the primitive's bias), b given row-major
 * [K, N] (ktune's matmul) or, with b_nk, [N, K] (ktune's dense weight). a
 * and out are plain row-major; b takes the format the primitive chooses
 * (format tag any: pre-packed for its kernel), reordered once, untimed, as
 * an inference framework packs a weight once (dnnl_sgemm repacks it on
 * every call). Returns 0, or 1 when oneDNN has no implementation. */
static inline int kt_bench_dnnl_matmul_init(kt_bench_dnnl_t *d, int M, int N, int K, int b_nk,
                                            const char *const *epi, int nepi,
                                            const float *const *params, const float *a,
                                            const float *b, float *out)
{
    kt_bench_dnnl_start(d);
    dnnl_dims_t src_dims = {M, K}, wei_dims = {K, N}, dst_dims = {M, N};
    kt_bench_dnnl_mds_t m;
    kt_bench_dnnl_mds(&m, 2, src_dims, wei_dims, dst_dims, dnnl_ab, b_nk ? dnnl_ba : dnnl_ab,
                      dnnl_ab, 1);
    int bias_epi, sum_epi;
    dnnl_primitive_attr_t attr =
        kt_bench_dnnl_epilogue(d, epi, nepi, params, 2, dst_dims, dnnl_ab, &bias_epi, &sum_epi);
    dnnl_matmul_desc_t md;
    KT_BENCH_DNNL(dnnl_matmul_desc_init(&md, &m.src_op, &m.wei_any,
                                        bias_epi >= 0 ? &m.bia : NULL, &m.dst_op));
    return kt_bench_dnnl_finish(d, &md, attr, &m, 0, a, b, kt_bench_dnnl_param(params, bias_epi),
                                kt_bench_dnnl_param(params, sum_epi), out);
}

/* dnnl_sgemm's C[M,N] = A[M,K] B[K,N] of a kt_bench_gemm_t, row-major, no
 * transposes (it packs B on every call: sgemm has no pre-packed form). */
static inline void kt_bench_dnnl_sgemm_run(void *arg)
{
    kt_bench_gemm_t *g = arg;
    if (dnnl_sgemm('N', 'N', g->M, g->N, g->K, 1.0f, g->A, g->K, g->B, g->N, 0.0f, g->C, g->N) !=
        dnnl_success) {
        fprintf(stderr, "bench baseline: dnnl_sgemm failed\n");
        exit(1);
    }
}

/* Seconds of the same conv2d + bias + relu as kt_bench_blas_conv2d with
 * oneDNN's direct convolution on one thread: NHWC in and out as ktune's
 * kernels, relu a post-op, the weights reordered once (outside the timing)
 * into the layout the primitive prefers, as Ansor's layout rewrite does. */
static inline double kt_bench_dnnl_conv2d(int H, int W, int CI, int CO, int KH, int KW, int pad)
{
    omp_set_num_threads(1);
    kt_bench_conv_t c = kt_bench_conv_new(H, W, CI, CO, KH, KW, pad);
    static const char *const epi[] = {"bias_add", "relu"};
    const float *params[] = {c.bias, NULL};
    kt_bench_dnnl_conv_t cv = {.H = H, .W = W, .CI = CI, .CO = CO, .KH = KH, .KW = KW,
                               .stride = {1, 1}, .dilation = {1, 1}, .pad = {pad, pad, pad, pad},
                               .epi = epi, .nepi = 2, .params = params, .data = c.data,
                               .weight = c.weight, .out = c.out};
    kt_bench_dnnl_t d;
    if (kt_bench_dnnl_conv_init(&d, &cv, dnnl_convolution_direct, 0) != 0) {
        fprintf(stderr, "bench baseline: oneDNN has no direct convolution here\n");
        exit(1);
    }
    double t = kt_bench_blas_time(kt_bench_dnnl_run, &d);
    kt_bench_conv_check("oneDNN conv2d", &c, c.out);
    kt_bench_dnnl_free(&d);
    kt_bench_conv_free(&c);
    return t;
}
#endif

#endif
