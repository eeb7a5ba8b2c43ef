/* The CUDA emitter: a lowered GPU program printed as `extern "C"
 * __global__` kernels for NVRTC, plus the printing both it and the CPU
 * emulation (emit_cuda_emu.c) use for indices, statements and guards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "lower.h"
#include "util/err.h"

/* ---- which iterators are read ------------------------------------------------------ */

static int live(const kt_lower_t *L, int it) { return it >= 0 && L->iters[it].extent > 1; }

static void mark_index(uint8_t *used, const kt_lower_t *L, const kt_lower_index_t *x)
{
    for (int t = 0; t < x->nterms; t++)
        if (live(L, x->iter[t]) && x->coef[t] != 0)
            used[x->iter[t]] = 1;
}

int kt_gpu_emit_mark_used(kt_gpu_emit_t *e)
{
    const kt_lower_t *L = e->L;
    e->used = calloc((size_t)L->niters + 1, 1);
    if (!e->used)
        return kt_err_set(KT_ENOMEM, "emit: out of memory");
    for (int i = 0; i < L->nstmts; i++) {
        const kt_lower_stmt_t *s = &L->stmts[i];
        for (int a = 0; a < KT_SCHED_MAX_AXES; a++)
            mark_index(e->used, L, &s->axis[a]);
        for (int d = 0; d <= KT_TE_MAX_DIMS; d++) {
            mark_index(e->used, L, &s->dst_idx[d]);
            mark_index(e->used, L, &s->src_idx[d]);
        }
    }
    for (int i = 0; i < L->nsubs; i++)
        for (int d = 0; d <= KT_TE_MAX_DIMS; d++)
            mark_index(e->used, L, &L->subs[i].idx[d]);
    for (int i = 0; i < L->nguards; i++)
        mark_index(e->used, L, &L->guards[i].idx);
    for (int i = 0; i < L->nnodes; i++) {
        const kt_lower_node_t *nd = &L->nodes[i];
        /* the thread number is read by the cross-thread reduction too */
        if (nd->kind == KT_NODE_LOOP && (nd->ann == KT_LOOP_THREAD || nd->ann == KT_LOOP_BLOCK) &&
            live(L, nd->iter))
            e->used[nd->iter] = 1;
    }
    /* a used LET makes what it reads used; LETs only read earlier iterators */
    for (int i = L->niters - 1; i >= 0; i--)
        if (e->used[i] && L->iters[i].derived)
            mark_index(e->used, L, &L->iters[i].def);
    return 0;
}

/* ---- indices ---------------------------------------------------------------------------- */

static void index_wide(kt_gpu_emit_t *e, const kt_lower_index_t *x, int wide, kt_sbuf_t *b)
{
    kt_codegen_index_style_t st = {.L = e->L, .hide = e->zero_iter,
                                   .cast = wide ? "(long long)" : "", .suffix = ""};
    kt_codegen_index(&st, x, b);
}

void kt_gpu_emit_index(kt_gpu_emit_t *e, const kt_lower_index_t *x, kt_sbuf_t *b)
{
    index_wide(e, x, 0, b);
}

static int64_t buf_numel(const kt_lower_buf_t *bf)
{
    int64_t n = 1;
    for (int d = 0; d < bf->ndim; d++)
        n *= bf->shape[d];
    return n;
}

/* Row-major flat index, in long long where the buffer needs it. */
static void flat(kt_gpu_emit_t *e, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    int wide = buf_numel(&e->L->bufs[buf]) > INT32_MAX;
    kt_codegen_index_style_t st = {.L = e->L, .hide = e->zero_iter,
                                   .cast = wide ? "(long long)" : "", .suffix = ""};
    kt_codegen_flat_index(&st, buf, idx, b);
}

void kt_gpu_emit_access(kt_gpu_emit_t *e, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    const kt_lower_buf_t *bf = &e->L->bufs[buf];
    kt_sbuf_printf(b, "%s[", bf->name);
    if (e->emu && bf->kind == KT_BUF_LOCAL) {
        /* the emulation keeps every thread's registers in one array */
        int64_t n = buf_numel(bf);
        if (live(e->L, e->thread)) {
            kt_sbuf_puts(b, e->L->iters[e->thread].name);
            if (n != 1)
                kt_sbuf_printf(b, "*%lld", (long long)n);
            kt_sbuf_puts(b, " + ");
        }
    }
    flat(e, buf, idx, b);
    kt_sbuf_puts(b, "]");
}

/* ---- statements ------------------------------------------------------------------------ */

static void gpu_access_fn(void *ctx, int buf, const kt_lower_index_t *idx, kt_sbuf_t *b)
{
    kt_gpu_emit_access(ctx, buf, idx, b);
}

static void body(kt_gpu_emit_t *e, int si, kt_sbuf_t *b)
{
    const kt_lower_t *L = e->L;
    const kt_lower_stmt_t *s = &L->stmts[si];
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    int na = ss->ndim + ss->nreduce;
    kt_sbuf_t ax[KT_SCHED_MAX_AXES];
    const char *axis_c[KT_SCHED_MAX_AXES];
    for (int a = 0; a < na; a++) {
        kt_sbuf_init(&ax[a]);
        kt_gpu_emit_index(e, &s->axis[a], &ax[a]);
        axis_c[a] = ax[a].data ? ax[a].data : "0";
    }
    /* Loads replaced by a shared box or the register tile print as loads. */
    uint64_t mask = L->inline_mask;
    for (int i = 0; i < L->nsubs; i++)
        if (L->subs[i].stmt == si)
            mask &= ~(1ULL << L->subs[i].stage);
    kt_sbuf_t text;
    kt_sbuf_init(&text);
    int rc = kt_codegen_expr_c(e->dag, s->stage, ss->body, axis_c, mask, &text);
    if (rc && !e->rc)
        e->rc = rc;
    if (!rc)
        kt_codegen_apply_subs(e->dag, L, si, gpu_access_fn, e, &text);
    if (!rc && s->kind == KT_STMT_COMPUTE && s->src >= 0) {
        kt_sbuf_t repl;
        kt_sbuf_init(&repl);
        kt_gpu_emit_access(e, s->src, s->src_idx, &repl);
        kt_codegen_replace_loads(text.data, kt_dag_stage(e->dag, s->src_stage)->name, repl.data,
                                 b);
        kt_sbuf_free(&repl);
    } else if (!rc) {
        kt_sbuf_puts(b, text.data ? text.data : "");
    }
    if (text.failed)
        b->failed = 1;
    kt_sbuf_free(&text);
    for (int a = 0; a < na; a++)
        kt_sbuf_free(&ax[a]);
}

/* The value a FETCH stores: the inlined producer at the coordinates, or its
 * global buffer. */
static void fetch_value(kt_gpu_emit_t *e, const kt_lower_stmt_t *s, kt_sbuf_t *b)
{
    if (s->src >= 0) {
        kt_gpu_emit_access(e, s->src, s->src_idx, b);
        return;
    }
    const kt_stage_t *ps = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t ax[KT_TE_MAX_DIMS];
    const char *axis_c[KT_TE_MAX_DIMS];
    for (int d = 0; d < ps->ndim; d++) {
        kt_sbuf_init(&ax[d]);
        kt_gpu_emit_index(e, &s->axis[d], &ax[d]);
        axis_c[d] = ax[d].data ? ax[d].data : "0";
    }
    int rc = kt_codegen_expr_c(e->dag, s->stage, ps->body, axis_c, e->L->inline_mask, b);
    if (rc && !e->rc)
        e->rc = rc;
    for (int d = 0; d < ps->ndim; d++)
        kt_sbuf_free(&ax[d]);
}

void kt_gpu_emit_stmt(kt_gpu_emit_t *e, int si, int depth)
{
    const kt_lower_stmt_t *s = &e->L->stmts[si];
    kt_sbuf_t *b = e->out;
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t dst;
    kt_sbuf_init(&dst);
    kt_gpu_emit_access(e, s->dst, s->dst_idx, &dst);
    kt_sbuf_indent(b, depth);
    int is_max = ss->rop == KT_RED_MAX;
    switch (s->kind) {
    case KT_STMT_COMPUTE:
        kt_sbuf_printf(b, "%s = ", dst.data);
        body(e, si, b);
        break;
    case KT_STMT_INIT:
        kt_sbuf_printf(b, "%s = %s", dst.data, kt_lower_identity_c(ss->rop));
        break;
    case KT_STMT_UPDATE:
        kt_sbuf_printf(b, is_max ? "%s = kt_maxf(%s, " : "%s = %s + ", dst.data, dst.data);
        body(e, si, b);
        if (is_max)
            kt_sbuf_puts(b, ")");
        break;
    case KT_STMT_COPY:
        kt_sbuf_printf(b, "%s = ", dst.data);
        kt_gpu_emit_access(e, s->src, s->src_idx, b);
        break;
    case KT_STMT_FETCH:
        if (e->vec > 1 && s->src >= 0) {
            /* a vector load and store of the group starting here */
            kt_sbuf_printf(b, "*(float%d *)&%s = *(const float%d *)&", e->vec, dst.data, e->vec);
            kt_gpu_emit_access(e, s->src, s->src_idx, b);
            break;
        }
        kt_sbuf_printf(b, "%s = ", dst.data);
        fetch_value(e, s, b);
        break;
    default:
        if (!e->rc)
            e->rc = kt_err_set(KT_EINTERNAL, "emit: unexpected statement kind %d", s->kind);
        break;
    }
    kt_sbuf_puts(b, ";\n");
    if (dst.failed)
        b->failed = 1;
    kt_sbuf_free(&dst);
}

void kt_gpu_emit_let(kt_gpu_emit_t *e, int node, int depth)
{
    int it = e->L->nodes[node].iter;
    if (!e->used[it])
        return;
    kt_sbuf_indent(e->out, depth);
    kt_sbuf_printf(e->out, "const int %s = ", e->L->iters[it].name);
    kt_gpu_emit_index(e, &e->L->iters[it].def, e->out);
    kt_sbuf_puts(e->out, ";\n");
}

void kt_gpu_emit_guard_open(kt_gpu_emit_t *e, int node, int depth)
{
    const kt_lower_guard_t *g = &e->L->guards[e->L->nodes[node].guard];
    kt_sbuf_indent(e->out, depth);
    kt_sbuf_puts(e->out, "if (");
    kt_gpu_emit_index(e, &g->idx, e->out);
    kt_sbuf_printf(e->out, " < %lld) {\n", (long long)g->bound);
}

void kt_gpu_emit_for(kt_gpu_emit_t *e, int node, int depth)
{
    const kt_lower_node_t *nd = &e->L->nodes[node];
    const kt_lower_iter_t *it = &e->L->iters[nd->iter];
    kt_sbuf_t *b = e->out;
    if (!e->emu && (nd->ann == KT_LOOP_UNROLL || nd->ann == KT_LOOP_VTHREAD)) {
        kt_sbuf_indent(b, depth);
        kt_sbuf_puts(b, "#pragma unroll\n");
    }
    kt_sbuf_indent(b, depth);
    kt_sbuf_printf(b, "for (int %s = 0; %s < %lld; ++%s) {\n", it->name, it->name,
                   (long long)it->extent, it->name);
}

int kt_gpu_emit_nest(kt_gpu_emit_t *e, int x, int depth,
                     void (*list)(void *ctx, int first, int depth), void *ctx)
{
    const kt_lower_node_t *nd = &e->L->nodes[x];
    kt_sbuf_t *b = e->out;
    switch (nd->kind) {
    case KT_NODE_LOOP:
        if (e->L->iters[nd->iter].extent <= 1) {
            kt_sbuf_indent(b, depth);
            kt_sbuf_puts(b, "{\n");
        } else {
            kt_gpu_emit_for(e, x, depth);
        }
        break;
    case KT_NODE_LET:
        kt_gpu_emit_let(e, x, depth);
        return 1;
    case KT_NODE_GUARD:
        kt_gpu_emit_guard_open(e, x, depth);
        break;
    default:
        return 0;
    }
    list(ctx, nd->child, depth + 1);
    kt_sbuf_indent(b, depth);
    kt_sbuf_puts(b, "}\n");
    return 1;
}

void kt_gpu_emit_params(kt_gpu_emit_t *e, kt_sbuf_t *b)
{
    const kt_lower_t *L = e->L;
    const char *restr = e->emu ? "restrict" : "__restrict__";
    int n = 0;
    kt_sbuf_puts(b, "(");
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < L->nbufs; i++) {
            const kt_lower_buf_t *bf = &L->bufs[i];
            if (bf->kind != (pass ? KT_BUF_OUTPUT : KT_BUF_INPUT))
                continue;
            kt_sbuf_printf(b, "%s%sfloat *%s %s", n++ ? ", " : "", pass ? "" : "const ", restr,
                           bf->name);
        }
    if (L->workspace > 0)
        kt_sbuf_printf(b, "%sfloat *%s kt_ws", n++ ? ", " : "", restr);
    kt_sbuf_puts(b, ")");
}

static int is_ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* text holds `name[` as a whole identifier. */
static int reads_buffer(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *q = text ? strstr(text, name) : NULL; q; q = strstr(q + 1, name))
        if ((q == text || !is_ident_char(q[-1])) && q[nl] == '[')
            return 1;
    return 0;
}

void kt_gpu_emit_heap_decls(kt_gpu_emit_t *e, const char *text, int depth, kt_sbuf_t *b)
{
    for (int i = 0; i < e->L->nbufs; i++) {
        const kt_lower_buf_t *bf = &e->L->bufs[i];
        if (bf->kind != KT_BUF_HEAP || !reads_buffer(text, bf->name))
            continue;
        kt_sbuf_indent(b, depth);
        kt_sbuf_printf(b, "float *%s %s = kt_ws + %lld;\n", e->emu ? "restrict" : "__restrict__",
                       bf->name, (long long)bf->offset);
    }
}

/* ---- CUDA ------------------------------------------------------------------------------- */

void kt_codegen_preamble_cuda(kt_sbuf_t *out)
{
    kt_sbuf_puts(out,
        "/* ktune CUDA kernels (NVRTC: no headers) */\n"
        "#ifndef INFINITY\n"
        "#define INFINITY __int_as_float(0x7f800000)\n"
        "#endif\n"
        "#ifndef NAN\n"
        "#define NAN __int_as_float(0x7fffffff)\n"
        "#endif\n"
        "__device__ __forceinline__ float kt_maxf(float a, float b) { return a > b ? a : b; }\n"
        "__device__ __forceinline__ float kt_minf(float a, float b) { return a < b ? a : b; }\n"
        "__device__ __forceinline__ long long kt_maxi(long long a, long long b)\n"
        "{\n"
        "    return a > b ? a : b;\n"
        "}\n"
        "__device__ __forceinline__ long long kt_mini(long long a, long long b)\n"
        "{\n"
        "    return a < b ? a : b;\n"
        "}\n"
        "__device__ __forceinline__ long long kt_floordiv(long long a, long long b)\n"
        "{\n"
        "    long long q = a / b;\n"
        "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
        "}\n"
        "__device__ __forceinline__ long long kt_floormod(long long a, long long b)\n"
        "{\n"
        "    long long r = a % b;\n"
        "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
        "}\n"
        "__device__ __forceinline__ float kt_rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
        "\n");
}

static void cuda_list(kt_gpu_emit_t *e, int first, int depth);
static void cuda_list_cb(void *e, int first, int depth)
{
    cuda_list(e, first, depth);
}

/* Warp shuffles, then (several warps) one value per warp through shared
 * memory and a last warp-level pass: thread 0 ends with the block's result. */
static void cuda_allreduce(kt_gpu_emit_t *e, int si, int depth)
{
    const kt_lower_stmt_t *s = &e->L->stmts[si];
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t *b = e->out;
    const char *t = e->L->iters[e->thread].name;
    int64_t nw = e->threads / KT_SCHED_GPU_WARP;
    const char *op = ss->rop == KT_RED_MAX ? "kt_v = kt_maxf(kt_v, %s);\n" : "kt_v = kt_v + %s;\n";
    kt_sbuf_t part;
    kt_sbuf_init(&part);
    kt_gpu_emit_access(e, s->dst, s->dst_idx, &part);
    const char *shfl = "__shfl_down_sync(0xffffffffu, kt_v, kt_off)";
    kt_sbuf_indent(b, depth);
    kt_sbuf_printf(b, "{\n");
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "float kt_v = %s;\n", part.data);
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "#pragma unroll\n");
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "for (int kt_off = %d; kt_off > 0; kt_off >>= 1)\n", KT_SCHED_GPU_WARP / 2);
    kt_sbuf_indent(b, depth + 2);
    kt_sbuf_printf(b, op, shfl);
    if (nw > 1) {
        const char *red = e->L->bufs[s->src].name;
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_printf(b, "if ((%s & %d) == 0)\n", t, KT_SCHED_GPU_WARP - 1);
        kt_sbuf_indent(b, depth + 2);
        kt_sbuf_printf(b, "%s[%s / %d] = kt_v;\n", red, t, KT_SCHED_GPU_WARP);
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_puts(b, "__syncthreads();\n");
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_printf(b, "if (%s < %d) {\n", t, KT_SCHED_GPU_WARP);
        kt_sbuf_indent(b, depth + 2);
        kt_sbuf_printf(b, "kt_v = %s < %lld ? %s[%s] : %s;\n", t, (long long)nw, red, t,
                       kt_lower_identity_c(ss->rop));
        kt_sbuf_indent(b, depth + 2);
        kt_sbuf_printf(b, "#pragma unroll\n");
        kt_sbuf_indent(b, depth + 2);
        kt_sbuf_printf(b, "for (int kt_off = %d; kt_off > 0; kt_off >>= 1)\n",
                       KT_SCHED_GPU_WARP / 2);
        kt_sbuf_indent(b, depth + 3);
        kt_sbuf_printf(b, op, shfl);
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_puts(b, "}\n");
    }
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "%s = kt_v;\n", part.data);
    kt_sbuf_indent(b, depth);
    kt_sbuf_puts(b, "}\n");
    if (part.failed)
        b->failed = 1;
    kt_sbuf_free(&part);
}

static void cuda_node(kt_gpu_emit_t *e, int x, int depth)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[x];
    kt_sbuf_t *b = e->out;
    switch (nd->kind) {
    case KT_NODE_LOOP: {
        const kt_lower_iter_t *it = &L->iters[nd->iter];
        if (nd->ann == KT_LOOP_BLOCK || nd->ann == KT_LOOP_THREAD) {
            if (e->used[nd->iter]) {
                kt_sbuf_indent(b, depth);
                kt_sbuf_printf(b, "const int %s = %s;\n", it->name,
                               nd->ann == KT_LOOP_BLOCK ? "(int)blockIdx.x" : "(int)threadIdx.x");
            }
            if (nd->ann == KT_LOOP_THREAD) {
                e->thread = nd->iter;
                e->threads = it->extent;
            }
            cuda_list(e, nd->child, depth);
            return;
        }
        if (nd->ann == KT_LOOP_VECTORIZE && it->extent > 1) {
            /* the whole group by one thread: iteration 0 with vector types */
            kt_sbuf_indent(b, depth);
            kt_sbuf_puts(b, "{\n");
            e->zero_iter = nd->iter;
            e->vec = (int)it->extent;
            cuda_list(e, nd->child, depth + 1);
            e->zero_iter = -1;
            e->vec = 0;
            kt_sbuf_indent(b, depth);
            kt_sbuf_puts(b, "}\n");
            return;
        }
        kt_gpu_emit_nest(e, x, depth, cuda_list_cb, e);
        return;
    }
    case KT_NODE_LET:
    case KT_NODE_GUARD:
        kt_gpu_emit_nest(e, x, depth, cuda_list_cb, e);
        return;
    case KT_NODE_BARRIER:
        kt_sbuf_indent(b, depth);
        kt_sbuf_puts(b, "__syncthreads();\n");
        return;
    case KT_NODE_ALLOC: {
        const kt_lower_buf_t *bf = &L->bufs[nd->buf];
        if (bf->kind != KT_BUF_LOCAL)
            return;   /* shared buffers open the kernel */
        kt_sbuf_indent(b, depth);
        kt_sbuf_printf(b, "float %s[%lld];\n", bf->name, (long long)buf_numel(bf));
        return;
    }
    case KT_NODE_STMT:
        if (L->stmts[nd->stmt].kind == KT_STMT_ALLREDUCE)
            cuda_allreduce(e, nd->stmt, depth);
        else
            kt_gpu_emit_stmt(e, nd->stmt, depth);
        return;
    default:
        if (!e->rc)
            e->rc = kt_err_set(KT_EINTERNAL, "emit: unexpected node kind %d", nd->kind);
        return;
    }
}

static void cuda_list(kt_gpu_emit_t *e, int first, int depth)
{
    for (int x = first; x >= 0 && !e->rc; x = e->L->nodes[x].next)
        cuda_node(e, x, depth);
}

static void fill_launch(const kt_lower_t *L, int k, const char *entry, kt_codegen_launch_t *l)
{
    const kt_lower_kernel_t *kk = &L->kernels[k];
    memset(l, 0, sizeof(*l));
    snprintf(l->name, sizeof(l->name), "%s_k%d", entry, k);
    l->stage = kk->stage;
    l->grid[0] = (unsigned)kk->grid;
    l->block[0] = (unsigned)kk->threads;
    l->grid[1] = l->grid[2] = l->block[1] = l->block[2] = 1;
    l->smem_bytes = (unsigned)kk->smem_bytes;
}

int kt_codegen_emit_cuda_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                              const char *entry, kt_sbuf_t *b, kt_codegen_cuda_t *meta)
{
    if (meta)
        memset(meta, 0, sizeof(*meta));
    if (!dag || !st || !b)
        return kt_err_set(KT_EINVAL, "emit: missing DAG, state or buffer");
    if (st->target != KT_SCHED_TARGET_CUDA)
        return kt_err_set(KT_EINVAL, "emit: CUDA needs a GPU state (target cuda)");
    int rc = kt_codegen_check_entry(dag, entry);
    if (rc)
        return rc;
    kt_lower_t *L = kt_lower(dag, st);
    if (!L)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    kt_gpu_emit_t e = {.dag = dag, .L = L, .entry = entry, .thread = -1, .zero_iter = -1};
    rc = kt_gpu_emit_mark_used(&e);
    if (meta && !rc) {
        meta->launches = calloc((size_t)L->nkernels + 1, sizeof(*meta->launches));
        if (!meta->launches)
            rc = kt_err_set(KT_ENOMEM, "emit: out of memory");
    }
    int k = 0;
    for (int x = L->first; x >= 0 && !rc; x = L->nodes[x].next, k++) {
        const kt_lower_node_t *kn = &L->nodes[x];
        const kt_lower_kernel_t *kk = &L->kernels[kn->kernel];
        kt_sbuf_t bodytext;
        kt_sbuf_init(&bodytext);
        e.out = &bodytext;
        e.thread = -1;
        for (int c = kn->child; c >= 0; c = L->nodes[c].next) {
            const kt_lower_node_t *cn = &L->nodes[c];
            if (cn->kind == KT_NODE_ALLOC && L->bufs[cn->buf].kind == KT_BUF_SHARED) {
                const kt_lower_buf_t *bf = &L->bufs[cn->buf];
                kt_sbuf_printf(&bodytext, "    __shared__ __align__(16) float %s[%lld];\n",
                               bf->name, (long long)buf_numel(bf));
            }
        }
        cuda_list(&e, kn->child, 2);
        kt_sbuf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%lld) %s_k%d",
                       (long long)kk->threads, entry, k);
        kt_gpu_emit_params(&e, b);
        kt_sbuf_puts(b, "\n{\n");
        kt_gpu_emit_heap_decls(&e, bodytext.data, 2, b);
        kt_sbuf_puts(b, bodytext.data ? bodytext.data : "");
        kt_sbuf_puts(b, "}\n\n");
        if (bodytext.failed)
            b->failed = 1;
        kt_sbuf_free(&bodytext);
        rc = e.rc;
        if (meta && !rc)
            fill_launch(L, kn->kernel, entry, &meta->launches[meta->n_launches++]);
    }
    if (meta && !rc)
        meta->workspace_bytes = (size_t)L->workspace * sizeof(float);
    free(e.used);
    kt_lower_free(L);
    if (!rc)
        rc = kt_sbuf_ok(b);
    if (rc) {
        if (meta)
            kt_codegen_cuda_clear(meta);
        return kt_err_prefix("emit CUDA");
    }
    return 0;
}

int kt_codegen_emit_cuda(const kt_dag_t *dag, const struct kt_sched_state *st, const char *entry,
                         kt_codegen_cuda_t *out)
{
    if (!out)
        return kt_err_set(KT_EINVAL, "emit: no output");
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_codegen_preamble_cuda(&b);
    int rc = kt_codegen_emit_cuda_into(dag, st, entry, &b, out);
    if (rc) {
        kt_sbuf_free(&b);
        return rc;
    }
    out->src = kt_sbuf_take(&b);
    if (!out->src) {
        kt_codegen_cuda_clear(out);
        return kt_err_set(KT_ENOMEM, "emit: out of memory");
    }
    return 0;
}

void kt_codegen_cuda_clear(kt_codegen_cuda_t *c)
{
    if (!c)
        return;
    free(c->src);
    free(c->launches);
    memset(c, 0, sizeof(*c));
}
