/* Writing a tuned network for CUDA: kernels (.cu, .cubin) and a Driver API host runner (netlib.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure/hw_params.h"
#include "measure/nvrtc.h"
#include "netlib_int.h"
#include "sched/state.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

/* Threads per block of the simple layers' kernels (grid-stride loops). */
#define SIMPLE_BLOCK 256
#define SIMPLE_MAX_GRID 65535

/* The simple layers' kernels: every plan step that is no task, as
 * grid-stride loops; their names are in SIMPLE_NAMES, in enum order. */
enum { K_TO_NHWC = 0, K_TO_NCHW, K_COPY, K_UNARY, K_CHANNEL, K_BINARY, K_BCAST, K_TRANSPOSE,
       K_COPY2D, K__COUNT };
static const char *const SIMPLE_NAMES[K__COUNT] = {
    "kt_net_to_nhwc", "kt_net_to_nchw", "kt_net_copy",      "kt_net_unary",  "kt_net_channel",
    "kt_net_binary",  "kt_net_bcast",   "kt_net_transpose", "kt_net_copy2d",
};

/* kt_net_unary's op codes are kt_plan_unary_t's values. */
_Static_assert(KT_PLAN_RELU == 0 && KT_PLAN_SIGMOID == 2 && KT_PLAN_CLIP == 4 &&
                   KT_PLAN_HARDSWISH == 5 && KT_PLAN_HARDSIGMOID == 6 && KT_PLAN_SILU == 7,
               "kt_net_unary's op codes");
static const char *const SIMPLE_CU =
    "/* ---- the layers that are no task ---- */\n"
    "struct kt_net_shape {\n    int nd;\n    long long D[8], SX[8], SZ[8];\n};\n\n"
    "#define KT_NET_LOOP(n) \\\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \\\n"
    "         i += (long long)gridDim.x * blockDim.x)\n\n"
    "extern \"C\" __global__ void kt_net_to_nhwc(const float *__restrict__ x, float *__restrict__ y,\n"
    "                                          long long N, long long C, long long H, long long W)\n"
    "{\n    KT_NET_LOOP(N * C * H * W) {\n"
    "        long long c = i % C, w = (i / C) % W, h = (i / (C * W)) % H, b = i / (C * W * H);\n"
    "        y[i] = x[((b * C + c) * H + h) * W + w];\n    }\n}\n\n"
    "extern \"C\" __global__ void kt_net_to_nchw(const float *__restrict__ x, float *__restrict__ y,\n"
    "                                          long long N, long long C, long long H, long long W)\n"
    "{\n    KT_NET_LOOP(N * C * H * W) {\n"
    "        long long w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);\n"
    "        y[i] = x[((b * H + h) * W + w) * C + c];\n    }\n}\n\n"
    "extern \"C\" __global__ void kt_net_copy(const float *__restrict__ x, float *__restrict__ y,\n"
    "                                       long long n)\n"
    "{\n    KT_NET_LOOP(n) y[i] = x[i];\n}\n\n"
    "extern \"C\" __global__ void kt_net_unary(const float *__restrict__ x, float *__restrict__ y,\n"
    "                                        long long n, int op, float lo, float hi)\n"
    "{\n    KT_NET_LOOP(n) {\n        float v = x[i];\n"
    "        y[i] = op == 0 ? (v > 0.0f ? v : 0.0f)\n"
    "             : op == 1 ? 0.5f * v * (1.0f + erff(v * 0.70710678118654752f))\n"
    "             : op == 2 ? 1.0f / (1.0f + expf(-v))\n"
    "             : op == 3 ? tanhf(v)\n"
    "             : op == 5 ? v * fmaxf(fminf(v / 6.0f + 0.5f, 1.0f), 0.0f)\n"
    "             : op == 6 ? fmaxf(fminf(lo * v + hi, 1.0f), 0.0f)\n"
    "             : op == 7 ? v * (1.0f / (1.0f + expf(-v)))\n"
    "                       : fmaxf(fminf(v, hi), lo);\n    }\n}\n\n"
    "extern \"C\" __global__ void kt_net_channel(const float *__restrict__ x,\n"
    "                                          const float *__restrict__ sc,\n"
    "                                          const float *__restrict__ sh, float *__restrict__ y,\n"
    "                                          long long n, long long chan, long long inner)\n"
    "{\n    KT_NET_LOOP(n) {\n        long long c = (i / inner) % chan;\n"
    "        y[i] = x[i] * (sc ? sc[c] : 1.0f) + (sh ? sh[c] : 0.0f);\n    }\n}\n\n"
    "__device__ __forceinline__ float kt_net_op(int op, float a, float b)\n"
    "{\n    return op == 0 ? a + b : op == 1 ? a * b : op == 2 ? a - b : a / b;\n}\n\n"
    "extern \"C\" __global__ void kt_net_binary(const float *__restrict__ x,\n"
    "                                         const float *__restrict__ z, float *__restrict__ y,\n"
    "                                         long long n, int op)\n"
    "{\n    KT_NET_LOOP(n) y[i] = kt_net_op(op, x[i], z[i]);\n}\n\n"
    "extern \"C\" __global__ void kt_net_bcast(const float *__restrict__ x,\n"
    "                                        const float *__restrict__ z, float *__restrict__ y,\n"
    "                                        long long n, int op, struct kt_net_shape s)\n"
    "{\n    KT_NET_LOOP(n) {\n        long long r = i, ix = 0, iz = 0;\n"
    "        for (int d = s.nd - 1; d >= 0; d--) {\n            long long q = r % s.D[d];\n"
    "            r /= s.D[d];\n            ix += q * s.SX[d];\n            iz += q * s.SZ[d];\n"
    "        }\n        y[i] = kt_net_op(op, x[ix], z[iz]);\n    }\n}\n\n"
    "extern \"C\" __global__ void kt_net_transpose(const float *__restrict__ x,\n"
    "                                            float *__restrict__ y, long long n,\n"
    "                                            struct kt_net_shape s)\n"
    "{\n    KT_NET_LOOP(n) {\n        long long r = i, ix = 0;\n"
    "        for (int d = s.nd - 1; d >= 0; d--) {\n            ix += (r % s.D[d]) * s.SX[d];\n"
    "            r /= s.D[d];\n        }\n        y[i] = x[ix];\n    }\n}\n\n"
    "extern \"C\" __global__ void kt_net_copy2d(const float *__restrict__ x, float *__restrict__ y,\n"
    "                                         long long outer, long long chunk, long long ystride,\n"
    "                                         long long yoff)\n"
    "{\n    KT_NET_LOOP(outer * chunk) y[(i / chunk) * ystride + yoff + i % chunk] = x[i];\n}\n";

/* A GPU state for a task without a record: the first sketch that samples
 * a valid state, seeded so builds repeat. NULL with a message when none. */
static kt_sched_state_t *default_gpu_state(const kt_dag_t *dag, const kt_sched_params_t *params)
{
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    if (kt_sched_sketches(dag, params, &sk, &nsk) != 0)
        return NULL;
    kt_sched_state_t *best = NULL;
    kt_rng_t rng;
    kt_rng_seed(&rng, 0);
    for (int tries = 0; tries < 64 && !best; tries++)
        for (int k = 0; k < nsk && !best; k++) {
            kt_sched_state_t *st = kt_sched_sample(dag, params, sk[k], &rng);
            if (st && kt_sched_state_validate(dag, params, st) == 0)
                best = st;
            else
                kt_sched_state_free(st);
        }
    for (int k = 0; k < nsk; k++)
        kt_sched_state_free(sk[k]);
    free(sk);
    if (!best)
        kt_err_set(KT_EINVAL, "no valid GPU schedule could be sampled");
    return best;
}

/* The device pointer expression of value v (a CUdeviceptr). */
static void put_dvalue(kt_sbuf_t *b, const kt_net_plan_t *p, int v)
{
    v = kt_net_plan_root(p, v);
    const kt_plan_value_t *x = &p->values[v];
    if (x->kind == KT_PLAN_V_INPUT)
        kt_sbuf_puts(b, "m->din");
    else if (x->kind == KT_PLAN_V_OUTPUT)
        kt_sbuf_puts(b, "m->dout");
    else
        kt_sbuf_printf(b, "(A + %lldULL)", (long long)x->offset);
}

static void put_dref(kt_sbuf_t *b, const kt_net_plan_t *p, kt_plan_ref_t r)
{
    if (r.id < 0)
        kt_sbuf_puts(b, "(CUdeviceptr)0");
    else if (r.weight)
        kt_sbuf_printf(b, "m->dw[%d]", r.id);
    else
        put_dvalue(b, p, r.id);
}

/* Whether step s is a reference view that kt_net_transpose can run: one
 * input value, no period on any axis (a slice, a split, a broadcast of a
 * size-1 axis; not a tile), so out[i] = in[offset + sum_d i_d * step_d]. */
static int strided_view(const kt_plan_step_t *s)
{
    const kt_refop_t *r = &s->rop;
    if (s->kind != KT_PLAN_REFOP || r->op != KT_REFOP_VIEW || r->nin != 1 || s->nin != 1 ||
        s->in[0].weight || r->ondim < 1 || r->ondim > 8)
        return 0;
    for (int d = 0; d < r->ondim; d++) {
        int64_t period = r->ia[1 + KT_REFOP_MAX_DIMS + d];
        if (period > 0 && period < r->dout[d])
            return 0;
    }
    return 1;
}

/* A launch of simple kernel k over n elements with the argument
 * declarations `decl` (C statements) and the pointers to them `args`. */
static void put_simple(kt_sbuf_t *b, int k, long long n, const char *decl, const char *args)
{
    long long grid = (n + SIMPLE_BLOCK - 1) / SIMPLE_BLOCK;
    if (grid > SIMPLE_MAX_GRID)
        grid = SIMPLE_MAX_GRID;
    if (grid < 1)
        grid = 1;
    kt_sbuf_printf(b, "%s        void *a[] = {%s};\n"
                      "        CK(cuLaunchKernel(m->f[KT_SIMPLE + %d], %lldu, 1, 1, %d, 1, 1, 0, 0, a, "
                      "NULL));\n",
                   decl, args, k, grid, SIMPLE_BLOCK);
}

static void put_shape_struct(kt_sbuf_t *b, const int64_t *d, const int64_t *sx, const int64_t *sz,
                             int nd)
{
    kt_sbuf_printf(b, "        struct kt_net_shape s = {%d, {", nd);
    for (int q = 0; q < nd; q++)
        kt_sbuf_printf(b, "%s%lldLL", q ? ", " : "", (long long)d[q]);
    kt_sbuf_puts(b, "}, {");
    for (int q = 0; q < nd; q++)
        kt_sbuf_printf(b, "%s%lldLL", q ? ", " : "", (long long)sx[q]);
    kt_sbuf_puts(b, "}, {");
    for (int q = 0; sz && q < nd; q++)
        kt_sbuf_printf(b, "%s%lldLL", q ? ", " : "", (long long)sz[q]);
    kt_sbuf_puts(b, "}};\n");
}

typedef struct {
    int first_fn;             /* index of its first kernel in kt_fn_names */
    kt_codegen_cuda_t meta;   /* launches, workspace */
} task_cu_t;

static void emit_host_step(kt_sbuf_t *b, const kt_net_plan_t *p, const task_cu_t *tc, int k)
{
    const kt_plan_step_t *s = &p->steps[k];
    const kt_plan_value_t *o = &p->values[s->out];
    long long n = (long long)o->numel;
    kt_sbuf_printf(b, "    { /* step %d: ", k);
    kt_netlib_put_comment(b, s->name);
    kt_sbuf_puts(b, " */\n");
    if (s->kind == KT_PLAN_TASK) {
        const task_cu_t *t = &tc[s->task];
        kt_sbuf_puts(b, "        CUdeviceptr p[] = {");
        for (int q = 0; q < s->nin; q++) {
            put_dref(b, p, s->in[q]);
            kt_sbuf_puts(b, ", ");
        }
        put_dvalue(b, p, s->out);
        kt_sbuf_puts(b, ", m->ws};\n        void *a[] = {");
        int nargs = s->nin + 1 + (t->meta.workspace_bytes > 0);
        for (int q = 0; q < nargs; q++)
            kt_sbuf_printf(b, "%s&p[%d]", q ? ", " : "", q);
        kt_sbuf_puts(b, "};\n");
        /* No dynamic shared memory: smem_bytes is what the kernel declares
         * statically; asking for it again as dynamic doubles the block's
         * shared memory, and past 48 KiB in all CUDA refuses the launch. */
        for (int l = 0; l < t->meta.n_launches; l++) {
            const kt_codegen_launch_t *L = &t->meta.launches[l];
            kt_sbuf_printf(b, "        CK(cuLaunchKernel(m->f[%d], %uu, %uu, %uu, %uu, %uu, %uu, 0, "
                              "0, a, NULL));   /* %u bytes of static shared memory */\n",
                           t->first_fn + l, L->grid[0], L->grid[1], L->grid[2], L->block[0],
                           L->block[1], L->block[2], L->smem_bytes);
        }
    } else {
        kt_sbuf_t args;
        kt_sbuf_init(&args);
        kt_sbuf_puts(b, "        CUdeviceptr y = ");
        put_dvalue(b, p, s->out);
        kt_sbuf_printf(b, ";\n        long long n = %lldLL;\n        (void)n;\n", n);
        if (s->kind != KT_PLAN_CONCAT) {
            kt_sbuf_puts(b, "        CUdeviceptr x = ");
            put_dvalue(b, p, s->in[0].id);
            kt_sbuf_puts(b, ";\n");
        }
        switch (s->kind) {
        case KT_PLAN_TASK:
            break;
        case KT_PLAN_REFOP: {
            /* only strided views get here (kt_netlib_write_cuda refuses the rest) */
            const kt_refop_t *r = &s->rop;
            kt_sbuf_printf(b, "        CUdeviceptr xv = x + %lluULL;\n",
                           (unsigned long long)(r->ia[0] * 4));
            put_shape_struct(b, r->dout, &r->ia[1], NULL, r->ondim);
            put_simple(b, K_TRANSPOSE, n, "", "&xv, &y, &n, &s");
            break;
        }
        case KT_PLAN_LAYOUT:
            kt_sbuf_printf(b, "        long long N = %lldLL, C = %lldLL, H = %lldLL, W = %lldLL;\n",
                           (long long)o->dims[0], (long long)o->dims[1], (long long)o->dims[2],
                           (long long)o->dims[3]);
            put_simple(b, o->nhwc ? K_TO_NHWC : K_TO_NCHW, n, "", "&x, &y, &N, &C, &H, &W");
            break;
        case KT_PLAN_COPY:
            kt_sbuf_puts(b, "        if (y != x)\n            CK(cuMemcpyDtoD(y, x, sizeof(float) * "
                            "(size_t)n));\n");
            break;
        case KT_PLAN_UNARY:
            /* %e, not %g: "0f" or "6f" is no float literal (an integer with a suffix) */
            kt_sbuf_printf(b, "        int op = %d;\n        float lo = %.9ef, hi = %.9ef;\n",
                           (int)s->unary, s->lo, s->hi);
            put_simple(b, K_UNARY, n, "", "&x, &y, &n, &op, &lo, &hi");
            break;
        case KT_PLAN_CHANNEL:
            kt_sbuf_puts(b, "        CUdeviceptr sc = ");
            put_dref(b, p, s->in[1]);
            kt_sbuf_puts(b, ", sh = ");
            put_dref(b, p, s->in[2]);
            kt_sbuf_printf(b, ";\n        long long chan = %lldLL, inner = %lldLL;\n",
                           (long long)s->chan, (long long)s->inner);
            put_simple(b, K_CHANNEL, n, "", "&x, &sc, &sh, &y, &n, &chan, &inner");
            break;
        case KT_PLAN_BINARY: {
            kt_sbuf_puts(b, "        CUdeviceptr z = ");
            put_dvalue(b, p, s->in[1].id);
            kt_sbuf_printf(b, ";\n        int op = %d;\n", s->binary_mul);
            if (!s->chan) {
                put_simple(b, K_BINARY, n, "", "&x, &z, &y, &n, &op");
                break;
            }
            int64_t sx[KT_NET_MAX_DIMS], sz[KT_NET_MAX_DIMS];
            kt_netlib_bcast_strides(p, s, sx, sz);
            put_shape_struct(b, o->dims, sx, sz, o->ndim);
            put_simple(b, K_BCAST, n, "", "&x, &z, &y, &n, &op, &s");
            break;
        }
        case KT_PLAN_TRANSPOSE: {
            int64_t sp[KT_NET_MAX_DIMS];
            kt_netlib_transpose_strides(p, s, sp);
            put_shape_struct(b, o->dims, sp, NULL, o->ndim);
            put_simple(b, K_TRANSPOSE, n, "", "&x, &y, &n, &s");
            break;
        }
        case KT_PLAN_CONCAT: {
            int64_t outer, inner, at = 0;
            kt_netlib_concat_dims(p, s, &outer, &inner);
            for (int q = 0; q < s->nin; q++) {
                int64_t a = p->values[s->in[q].id].dims[s->axis];
                kt_sbuf_puts(b, "        {\n            CUdeviceptr x = ");
                put_dvalue(b, p, s->in[q].id);
                kt_sbuf_printf(b, ";\n            long long outer = %lldLL, chunk = %lldLL, "
                                  "ystride = %lldLL, yoff = %lldLL;\n",
                               (long long)outer, (long long)(a * inner),
                               (long long)(o->dims[s->axis] * inner), (long long)(at * inner));
                put_simple(b, K_COPY2D, (long long)(outer * a * inner), "",
                           "&x, &y, &outer, &chunk, &ystride, &yoff");
                kt_sbuf_puts(b, "        }\n");
                at += a;
            }
            break;
        }
        }
        kt_sbuf_free(&args);
    }
    kt_sbuf_printf(b, "    }\n    if (t) {\n        CK(cuCtxSynchronize());\n"
                      "        t[%d] = kt_lap(&t0);\n    }\n", k);
}

static int emit_host(kt_sbuf_t *b, const kt_net_plan_t *p, const kt_net_tasks_t *tasks,
                     const task_cu_t *tc, int nfn, const char *name)
{
    kt_sbuf_t t;
    kt_sbuf_init(&t);
    kt_sbuf_puts(&t, "/* NET_host.c: the network NET on a CUDA GPU as built by ktune build (see\n"
                     " * NET.h): loads NET.cubin beside the weights file and launches its kernels\n"
                     " * in order on the default stream with the Driver API. */\n"
                     "#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c17 */\n"
                     "#include <cuda.h>\n#include <stdarg.h>\n#include <stdio.h>\n"
                     "#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n\n"
                     "#include \"NET.h\"\n\n");
    kt_netlib_put_tables(&t, p);
    kt_sbuf_printf(&t, "#define KT_NF %d\n#define KT_SIMPLE %d   /* the first simple kernel */\n"
                       "static const char *const kt_fn_names[KT_NF] = {\n",
                   nfn, nfn - K__COUNT);
    for (int i = 0; i < tasks->ntasks; i++)
        for (int l = 0; l < tc[i].meta.n_launches; l++)
            kt_sbuf_printf(&t, "    \"%s\",\n", tc[i].meta.launches[l].name);
    for (int k = 0; k < K__COUNT; k++)
        kt_sbuf_printf(&t, "    \"%s\",\n", SIMPLE_NAMES[k]);
    size_t ws = 4;
    for (int i = 0; i < tasks->ntasks; i++)
        if (tc[i].meta.workspace_bytes > ws)
            ws = tc[i].meta.workspace_bytes;
    const kt_plan_value_t *in = &p->values[p->input], *out = &p->values[p->output];
    kt_sbuf_printf(&t, "};\n\nstruct kt_net_shape {\n    int nd;\n    long long D[8], SX[8], SZ[8];\n};\n\n"
                       "struct NET {\n    float *blob;   /* the weights on the host while loading */\n"
                       "    long long blob_bytes;\n    float *w[KT_NW + 1];\n"
                       "    CUcontext ctx;\n    CUdevice dev;\n    CUmodule mod;\n"
                       "    CUfunction f[KT_NF];\n"
                       "    CUdeviceptr arena, dblob, din, dout, ws;\n    CUdeviceptr dw[KT_NW + 1];\n"
                       "};\n\nstatic _Thread_local char kt_msg[512];\n\n"
                       "const char *NET_last_error(void)\n{\n    return kt_msg;\n}\n\n"
                       "static int kt_fail(const char *fmt, ...)\n{\n    va_list ap;\n"
                       "    va_start(ap, fmt);\n    vsnprintf(kt_msg, sizeof kt_msg, fmt, ap);\n"
                       "    va_end(ap);\n    return -1;\n}\n\n"
                       "static int kt_ck(CUresult r, const char *what)\n{\n"
                       "    if (r == CUDA_SUCCESS)\n        return 0;\n    const char *e = NULL;\n"
                       "    cuGetErrorName(r, &e);\n"
                       "    return kt_fail(\"%%s: %%s\", what, e ? e : \"CUDA error\");\n}\n\n"
                       "#define CK(x) do { if (kt_ck((x), #x)) return -1; } while (0)\n\n");
    kt_sbuf_puts(&t, KT_NETLIB_LOADER);
    kt_sbuf_printf(&t,
        "\nvoid NET_destroy(NET_t *m)\n{\n    if (!m)\n        return;\n"
        "    if (m->ctx) {\n        cuCtxSetCurrent(m->ctx);\n"
        "        CUdeviceptr d[] = {m->arena, m->dblob, m->din, m->dout, m->ws};\n"
        "        for (int i = 0; i < 5; i++)\n            if (d[i])\n                cuMemFree(d[i]);\n"
        "        if (m->mod)\n            cuModuleUnload(m->mod);\n"
        "        cuDevicePrimaryCtxRelease(m->dev);\n    }\n    free(m->blob);\n    free(m);\n}\n\n"
        "static int kt_setup(NET_t *m, const char *weights_path)\n{\n"
        "    if (kt_load(m, weights_path) != 0)\n        return -1;\n"
        "    /* The kernels: NET.cubin beside the weights file; on a GPU newer than\n"
        "     * the cubin's architecture, NET.ptx, which the driver compiles. */\n"
        "    size_t len = strlen(weights_path);\n    char *cubin = malloc(len + 8);\n"
        "    if (!cubin)\n        return kt_fail(\"out of memory\");\n"
        "    memcpy(cubin, weights_path, len + 1);\n"
        "    if (len > 12 && strcmp(cubin + len - 12, \".safetensors\") == 0)\n"
        "        cubin[len - 12] = '\\0';\n    len = strlen(cubin);\n"
        "    strcat(cubin, \".cubin\");\n"
        "    CUresult r = cuInit(0);\n"
        "    if (r == CUDA_SUCCESS)\n        r = cuDeviceGet(&m->dev, 0);\n"
        "    if (r == CUDA_SUCCESS)\n        r = cuDevicePrimaryCtxRetain(&m->ctx, m->dev);\n"
        "    if (r == CUDA_SUCCESS)\n        r = cuCtxSetCurrent(m->ctx);\n"
        "    if (r == CUDA_SUCCESS)\n        r = cuModuleLoad(&m->mod, cubin);\n"
        "    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) {\n"
        "        strcpy(cubin + len, \".ptx\");\n        r = cuModuleLoad(&m->mod, cubin);\n"
        "    }\n"
        "    if (r != CUDA_SUCCESS) {\n        kt_ck(r, cubin);\n        free(cubin);\n"
        "        return -1;\n    }\n    free(cubin);\n"
        "    for (int i = 0; i < KT_NF; i++)\n"
        "        CK(cuModuleGetFunction(&m->f[i], m->mod, kt_fn_names[i]));\n"
        "    CK(cuMemAlloc(&m->arena, %lluULL));\n    CK(cuMemAlloc(&m->din, %lluULL));\n"
        "    CK(cuMemAlloc(&m->dout, %lluULL));\n    CK(cuMemAlloc(&m->ws, %lluULL));\n"
        "    CK(cuMemAlloc(&m->dblob, m->blob_bytes > 0 ? (size_t)m->blob_bytes : 4));\n"
        "    if (m->blob_bytes > 0)\n"
        "        CK(cuMemcpyHtoD(m->dblob, m->blob, (size_t)m->blob_bytes));\n"
        "    for (int i = 0; i < KT_NW; i++)\n"
        "        m->dw[i] = m->dblob + (CUdeviceptr)((char *)m->w[i] - (char *)m->blob);\n"
        "    free(m->blob);\n    m->blob = NULL;\n    return 0;\n}\n\n"
        "NET_t *NET_create(const char *weights_path)\n{\n"
        "    NET_t *m = calloc(1, sizeof(*m));\n"
        "    if (!m) {\n        kt_fail(\"out of memory\");\n        return NULL;\n    }\n"
        "    if (!weights_path || kt_setup(m, weights_path) != 0) {\n"
        "        if (!weights_path)\n            kt_fail(\"NET_create: no weights file\");\n"
        "        NET_destroy(m);\n        return NULL;\n    }\n    return m;\n}\n\n"
        "int NET_set_threads(int n)\n{\n    return n >= 1 ? 0 : -1;   /* one stream whatever n */\n}\n\n"
        "static double kt_lap(double *t0)\n{\n    struct timespec ts;\n"
        "    clock_gettime(CLOCK_MONOTONIC, &ts);\n"
        "    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, d = now - *t0;\n"
        "    *t0 = now;\n    return d;\n}\n\n"
        "static int kt_exec(NET_t *m, const float *input, float *output, double *t)\n{\n"
        "    double t0 = 0;\n    CK(cuCtxSetCurrent(m->ctx));\n"
        "    CK(cuMemcpyHtoD(m->din, input, %lluULL));\n    CUdeviceptr A = m->arena;\n"
        "    (void)A;\n    if (t)\n        kt_lap(&t0);\n",
        (unsigned long long)((p->arena_bytes + 64) / 64 * 64),
        (unsigned long long)(in->numel * 4), (unsigned long long)(out->numel * 4),
        (unsigned long long)ws, (unsigned long long)(in->numel * 4));
    for (int k = 0; k < p->nsteps; k++)
        emit_host_step(&t, p, tc, k);
    kt_sbuf_printf(&t,
        "    CK(cuMemcpyDtoH(output, m->dout, %lluULL));\n    return 0;\n}\n\n"
        "int NET_run(NET_t *m, const float *input, float *output)\n{\n"
        "    if (!m || !input || !output)\n        return kt_fail(\"NET_run: a NULL argument\");\n"
        "    return kt_exec(m, input, output, NULL);\n}\n\n"
        "int NET_run_timed(NET_t *m, const float *input, float *output, double *step_seconds)\n{\n"
        "    if (!m || !input || !output || !step_seconds)\n"
        "        return kt_fail(\"NET_run_timed: a NULL argument\");\n"
        "    return kt_exec(m, input, output, step_seconds);\n}\n",
        (unsigned long long)(out->numel * 4));
    int rc = kt_sbuf_ok(&t);
    if (rc == KT_OK) {
        kt_netlib_put_named(b, t.data, name);
        rc = kt_sbuf_ok(b);
    }
    kt_sbuf_free(&t);
    return rc;
}

int kt_netlib_write_cuda(const kt_net_plan_t *plan, const kt_net_tasks_t *tasks,
                         const kt_netlib_kernel_t *kernels, const char *name, const char *source,
                         const char *arch, const char *dir, kt_netlib_info_t *info)
{
    if (plan->ninputs != 1)
        return kt_err_set(KT_EUNSUP, "the network has %d inputs; the CUDA build runs networks "
                          "of one input (build it with --target cpu)", plan->ninputs);
    for (int k = 0; k < plan->nsteps; k++)
        if (plan->steps[k].kind == KT_PLAN_REFOP && !strided_view(&plan->steps[k]))
            return kt_err_set(KT_EUNSUP, "step %d '%s' runs a reference operator, which the "
                              "CUDA build has no kernel for (build it with --target cpu)", k,
                              plan->steps[k].name);
    kt_netlib_info_t inf;
    memset(&inf, 0, sizeof inf);
    kt_netlib_c_name(name, inf.name, sizeof inf.name);
    inf.ntasks = tasks->ntasks;
    inf.nsteps = plan->nsteps;
    inf.arena_bytes = plan->arena_bytes;
    inf.naive_bytes = plan->naive_bytes;
    kt_hw_params_t hw;
    kt_sched_params_t params;
    if (kt_hw_params_preset(arch, &hw) != 0 || kt_sched_params_from_hw(&hw, &params) != 0)
        return kt_err_prefix("--arch %s", arch);
    task_cu_t *tc = calloc((size_t)tasks->ntasks + 1, sizeof *tc);
    if (!tc)
        return kt_err_set(KT_ENOMEM, "out of memory");
    kt_sbuf_t cu, host, h;
    kt_sbuf_init(&cu);
    kt_sbuf_init(&host);
    kt_sbuf_init(&h);
    kt_codegen_preamble_cuda(&cu);
    int rc = KT_OK, nfn = 0;
    for (int i = 0; i < tasks->ntasks && rc == KT_OK; i++) {
        const kt_dag_t *dag = kt_workload_dag(tasks->tasks[i].wl);
        kt_sched_state_t *st = NULL;
        if (kernels[i].state_json) {
            st = kt_sched_state_from_json(kernels[i].state_json, dag, &params);
            if (!st)
                rc = kt_err_prefix("task %d: its record's state", i);
            else if (st->target != KT_SCHED_TARGET_CUDA)
                rc = kt_err_set(KT_EINVAL, "task %d: its record is a CPU schedule", i);
        } else {
            inf.ndefault++;
            if (!(st = default_gpu_state(dag, &params)))
                rc = kt_err_prefix("task %d (%s)", i, tasks->tasks[i].desc);
        }
        char entry[KT_NETLIB_MAX_NAME + 32];
        snprintf(entry, sizeof entry, "%s_task%d", inf.name, i);
        kt_sbuf_printf(&cu, "/* Task %d: ", i);
        kt_netlib_put_comment(&cu, tasks->tasks[i].desc);
        kt_sbuf_printf(&cu, "%s */\n", kernels[i].state_json ? "" : " (no record: a default schedule)");
        if (rc == KT_OK)
            rc = kt_codegen_emit_cuda_into(dag, st, entry, &cu, &tc[i].meta);
        tc[i].first_fn = nfn;
        nfn += tc[i].meta.n_launches;
        kt_sched_state_free(st);
    }
    kt_sbuf_puts(&cu, SIMPLE_CU);
    nfn += K__COUNT;
    if (rc == KT_OK)
        rc = kt_sbuf_ok(&cu);
    if (rc == KT_OK)
        rc = emit_host(&host, plan, tasks, tc, nfn, inf.name);
    if (rc == KT_OK)
        rc = kt_netlib_emit_header(&h, plan, tasks, inf.name, source ? source : inf.name,
                                   inf.ndefault, arch);
    if (rc == KT_OK)
        rc = kt_netlib_write_text(dir, inf.name, ".cu", &cu);
    if (rc == KT_OK) {
        char hname[KT_NETLIB_MAX_NAME + 8];
        snprintf(hname, sizeof hname, "%s_host", inf.name);
        rc = kt_netlib_write_text(dir, hname, ".c", &host);
    }
    if (rc == KT_OK)
        rc = kt_netlib_write_text(dir, inf.name, ".h", &h);
    if (rc == KT_OK)
        rc = kt_netlib_write_weights(plan, NULL, dir, inf.name, &inf.weight_bytes);
    if (rc == KT_OK) {
        /* The cubin now, so a compile error shows at build time, not on the GPU host. */
        kt_nvrtc_result_t r;
        memset(&r, 0, sizeof r);
        int c = kt_nvrtc_compile(cu.data, arch, NULL, KT_NVRTC_KEEP_PTX, &r);
        if (c == KT_OK) {
            /* and its PTX, which the driver compiles for a newer GPU than arch */
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.cubin", dir, inf.name);
            if (kt_file_write(path, r.cubin, r.cubin_len) != 0)
                rc = kt_err_prefix("writing %s", path);
            snprintf(path, sizeof path, "%s/%s.ptx", dir, inf.name);
            if (rc == KT_OK && kt_file_write(path, r.ptx, r.ptx_len) != 0)
                rc = kt_err_prefix("writing %s", path);
            inf.cubin = 1;
        } else if (c != KT_EUNSUP) {
            rc = kt_err_prefix("NVRTC");
        } else {
            kt_err_clear();   /* built without CUDA: the .cu is there to compile by hand */
        }
        kt_nvrtc_result_clear(&r);
    }
    for (int i = 0; i < tasks->ntasks; i++)
        kt_codegen_cuda_clear(&tc[i].meta);
    free(tc);
    kt_sbuf_free(&cu);
    kt_sbuf_free(&host);
    kt_sbuf_free(&h);
    if (rc == KT_OK && info)
        *info = inf;
    return rc;
}
