/* The CPU emulation of a lowered GPU program (see codegen.h): the CUDA
 * kernel's code, run for every block and, region by region between
 * barriers, for every thread of the block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "codegen_int.h"
#include "lower.h"
#include "util/err.h"

static int64_t buf_numel(const kt_lower_buf_t *bf)
{
    int64_t n = 1;
    for (int d = 0; d < bf->ndim; d++)
        n *= bf->shape[d];
    return n;
}

/* The subtree at x (x itself, not its siblings) synchronizes the block. */
static int has_sync(const kt_lower_t *L, int x)
{
    const kt_lower_node_t *nd = &L->nodes[x];
    if (nd->kind == KT_NODE_BARRIER)
        return 1;
    if (nd->kind == KT_NODE_STMT)
        return L->stmts[nd->stmt].kind == KT_STMT_ALLREDUCE;
    for (int c = nd->child; c >= 0; c = L->nodes[c].next)
        if (has_sync(L, c))
            return 1;
    return 0;
}

typedef struct {
    kt_gpu_emit_t *e;
    int lets[64];     /* the thread's LET nodes, re-declared in every region */
    int nlets;
} emu_t;

static void emu_list(emu_t *m, int first, int depth);
static void emu_list_cb(void *m, int first, int depth)
{
    emu_list(m, first, depth);
}

/* Plain per-thread code (inside a region): as in CUDA, without pragmas. */
static void emu_node(emu_t *m, int x, int depth)
{
    kt_gpu_emit_t *e = m->e;
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *nd = &L->nodes[x];
    switch (nd->kind) {
    case KT_NODE_LOOP:
    case KT_NODE_LET:
    case KT_NODE_GUARD:
        kt_gpu_emit_nest(e, x, depth, emu_list_cb, m);
        return;
    case KT_NODE_ALLOC:
        return;   /* registers and shared memory are allocated per kernel */
    case KT_NODE_STMT:
        kt_gpu_emit_stmt(e, nd->stmt, depth);
        return;
    default:
        if (!e->rc)
            e->rc = kt_err_set(KT_EINTERNAL, "emulation: unexpected node kind %d", nd->kind);
        return;
    }
}

static void emu_list(emu_t *m, int first, int depth)
{
    for (int x = first; x >= 0 && !m->e->rc; x = m->e->L->nodes[x].next)
        emu_node(m, x, depth);
}

/* One region: the nodes for every thread of the block. */
static void region(emu_t *m, const int *nodes, int n, int depth)
{
    kt_gpu_emit_t *e = m->e;
    kt_sbuf_t *b = e->out;
    const kt_lower_iter_t *t = &e->L->iters[e->thread];
    kt_sbuf_indent(b, depth);
    if (t->extent > 1)
        kt_sbuf_printf(b, "for (int %s = 0; %s < %lld; ++%s) {\n", t->name, t->name,
                       (long long)t->extent, t->name);
    else
        kt_sbuf_puts(b, "{\n");
    for (int i = 0; i < m->nlets; i++)
        kt_gpu_emit_let(e, m->lets[i], depth + 1);
    for (int i = 0; i < n && !e->rc; i++)
        emu_node(m, nodes[i], depth + 1);
    kt_sbuf_indent(b, depth);
    kt_sbuf_puts(b, "}\n");
}

/* __shfl_down_sync over the 32 lanes of warp `w` (text): every lane adds
 * (or maxes) the value of lane + off, or its own where that is past the
 * warp, all reading before any writes. */
static void emu_warp_pass(emu_t *m, const char *part, const char *w, int is_max, int depth)
{
    kt_sbuf_t *b = m->e->out;
    int W = KT_SCHED_GPU_WARP;
    kt_sbuf_indent(b, depth);
    kt_sbuf_printf(b, "for (int kt_off = %d; kt_off > 0; kt_off >>= 1) {\n", W / 2);
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "float kt_sh[%d];\n", W);
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "for (int kt_l = 0; kt_l < %d; ++kt_l)\n", W);
    kt_sbuf_indent(b, depth + 2);
    kt_sbuf_printf(b, "kt_sh[kt_l] = %s[%s * %d + (kt_l + kt_off < %d ? kt_l + kt_off : kt_l)];\n",
                   part, w, W, W);
    kt_sbuf_indent(b, depth + 1);
    kt_sbuf_printf(b, "for (int kt_l = 0; kt_l < %d; ++kt_l)\n", W);
    kt_sbuf_indent(b, depth + 2);
    if (is_max)
        kt_sbuf_printf(b, "%s[%s * %d + kt_l] = kt_maxf(%s[%s * %d + kt_l], kt_sh[kt_l]);\n",
                       part, w, W, part, w, W);
    else
        kt_sbuf_printf(b, "%s[%s * %d + kt_l] = %s[%s * %d + kt_l] + kt_sh[kt_l];\n", part, w, W,
                       part, w, W);
    kt_sbuf_indent(b, depth);
    kt_sbuf_puts(b, "}\n");
}

/* The CUDA cross-thread reduction step by step: shuffles in every warp,
 * lane 0 of each warp to shared memory, barrier, the first warp loads the
 * per-warp values (identity past them) and shuffles again. */
static void emu_allreduce(emu_t *m, int si, int depth)
{
    kt_gpu_emit_t *e = m->e;
    const kt_lower_t *L = e->L;
    const kt_lower_stmt_t *s = &L->stmts[si];
    const kt_stage_t *ss = kt_dag_stage(e->dag, s->stage);
    kt_sbuf_t *b = e->out;
    const char *part = L->bufs[s->dst].name;   /* one float per thread */
    int op = ss->rop == KT_RED_MAX;
    int64_t nw = e->threads / KT_SCHED_GPU_WARP;
    kt_sbuf_indent(b, depth);
    kt_sbuf_printf(b, "/* cross-thread reduction: warp shuffles */\n");
    kt_sbuf_indent(b, depth);
    kt_sbuf_printf(b, "for (int kt_w = 0; kt_w < %lld; ++kt_w) {\n", (long long)nw);
    emu_warp_pass(m, part, "kt_w", op, depth + 1);
    kt_sbuf_indent(b, depth);
    kt_sbuf_puts(b, "}\n");
    if (nw > 1) {
        const char *red = L->bufs[s->src].name;
        kt_sbuf_indent(b, depth);
        kt_sbuf_printf(b, "for (int kt_w = 0; kt_w < %lld; ++kt_w)\n", (long long)nw);
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_printf(b, "%s[kt_w] = %s[kt_w * %d];\n", red, part, KT_SCHED_GPU_WARP);
        kt_sbuf_indent(b, depth);
        kt_sbuf_puts(b, "/* __syncthreads() */\n");
        kt_sbuf_indent(b, depth);
        kt_sbuf_printf(b, "for (int kt_l = 0; kt_l < %d; ++kt_l)\n", KT_SCHED_GPU_WARP);
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_printf(b, "%s[kt_l] = kt_l < %lld ? %s[kt_l] : %s;\n", part, (long long)nw, red,
                       kt_lower_identity_c(ss->rop));
        kt_sbuf_indent(b, depth);
        kt_sbuf_puts(b, "{\n");
        kt_sbuf_indent(b, depth + 1);
        kt_sbuf_puts(b, "const int kt_w = 0;\n");
        emu_warp_pass(m, part, "kt_w", op, depth + 1);
        kt_sbuf_indent(b, depth);
        kt_sbuf_puts(b, "}\n");
    }
}

/* The children of the THREAD loop or of a uniform loop: barrier-free runs
 * become regions; loops holding barriers run for the whole block. */
static void regions(emu_t *m, int first, int depth)
{
    kt_gpu_emit_t *e = m->e;
    const kt_lower_t *L = e->L;
    int run[512], n = 0;
    for (int x = first; x >= 0 && !e->rc; x = L->nodes[x].next) {
        const kt_lower_node_t *nd = &L->nodes[x];
        int thread_let = 0;
        for (int i = 0; i < m->nlets; i++)
            thread_let |= m->lets[i] == x;
        if (thread_let)
            continue;   /* declared at the top of every region */
        int sync = has_sync(L, x);
        if (!sync) {
            if (n == (int)(sizeof(run) / sizeof(run[0]))) {
                region(m, run, n, depth);
                n = 0;
            }
            run[n++] = x;
            continue;
        }
        if (n) {
            region(m, run, n, depth);
            n = 0;
        }
        if (nd->kind == KT_NODE_BARRIER) {
            kt_sbuf_indent(e->out, depth);
            kt_sbuf_puts(e->out, "/* __syncthreads() */\n");
        } else if (nd->kind == KT_NODE_STMT) {
            emu_allreduce(m, nd->stmt, depth);
        } else if (nd->kind == KT_NODE_LOOP && nd->ann != KT_LOOP_THREAD &&
                   nd->ann != KT_LOOP_BLOCK) {
            /* a uniform loop: the same iterations in every thread */
            const kt_lower_iter_t *it = &L->iters[nd->iter];
            if (it->extent > 1) {
                kt_sbuf_indent(e->out, depth);
                kt_sbuf_printf(e->out, "for (int %s = 0; %s < %lld; ++%s) {\n", it->name,
                               it->name, (long long)it->extent, it->name);
            } else {
                kt_sbuf_indent(e->out, depth);
                kt_sbuf_puts(e->out, "{\n");
            }
            regions(m, nd->child, depth + 1);
            kt_sbuf_indent(e->out, depth);
            kt_sbuf_puts(e->out, "}\n");
        } else {
            e->rc = kt_err_set(KT_EINTERNAL, "emulation: a barrier under a %s",
                               nd->kind == KT_NODE_GUARD ? "guard" : "non-uniform node");
        }
    }
    if (n && !e->rc)
        region(m, run, n, depth);
}

/* The buffers ALLOC nodes under x allocate (shared and per-thread). */
static int collect_allocs(const kt_lower_t *L, int x, int *out, int n, int cap)
{
    const kt_lower_node_t *nd = &L->nodes[x];
    if (nd->kind == KT_NODE_ALLOC && n < cap)
        out[n++] = nd->buf;
    for (int c = nd->child; c >= 0; c = L->nodes[c].next)
        n = collect_allocs(L, c, out, n, cap);
    return n;
}

/* Floats the emulation allocates for bf: every thread's copy of a LOCAL. */
static int64_t alloc_floats(const kt_gpu_emit_t *e, const kt_lower_buf_t *bf)
{
    return buf_numel(bf) * (bf->kind == KT_BUF_LOCAL ? e->threads : 1);
}

/* One kernel as a static function returning 0, or -1 when an allocation
 * failed. */
static void emu_kernel(kt_gpu_emit_t *e, int kn, int k, kt_sbuf_t *out)
{
    const kt_lower_t *L = e->L;
    const kt_lower_node_t *knode = &L->nodes[kn];
    /* the block loop and, under it, the thread loop */
    int bn = -1, tn = -1;
    for (int c = knode->child; c >= 0; c = L->nodes[c].next)
        if (L->nodes[c].kind == KT_NODE_LOOP && L->nodes[c].ann == KT_LOOP_BLOCK)
            bn = c;
    for (int c = bn >= 0 ? L->nodes[bn].child : -1; c >= 0; c = L->nodes[c].next)
        if (L->nodes[c].kind == KT_NODE_LOOP && L->nodes[c].ann == KT_LOOP_THREAD)
            tn = c;
    if (bn < 0 || tn < 0) {
        e->rc = kt_err_set(KT_EINTERNAL, "emulation: kernel %d has no block or thread loop", k);
        return;
    }
    e->thread = L->nodes[tn].iter;
    e->threads = L->iters[e->thread].extent;
    emu_t m = {.e = e};
    for (int c = L->nodes[tn].child; c >= 0; c = L->nodes[c].next)
        if (L->nodes[c].kind == KT_NODE_LET && m.nlets < 64)
            m.lets[m.nlets++] = c;

    kt_sbuf_t body;
    kt_sbuf_init(&body);
    e->out = &body;
    const kt_lower_iter_t *bi = &L->iters[L->nodes[bn].iter];
    kt_sbuf_printf(&body, "    for (int %s = 0; %s < %lld; ++%s) {\n", bi->name, bi->name,
                   (long long)bi->extent, bi->name);
    /* shared memory starts every block as NaN: reading an element no
     * thread fetched shows in the answer */
    for (int c = knode->child; c >= 0; c = L->nodes[c].next)
        if (L->nodes[c].kind == KT_NODE_ALLOC) {
            const kt_lower_buf_t *bf = &L->bufs[L->nodes[c].buf];
            kt_sbuf_printf(&body, "        memset(%s, 0xff, sizeof(float) * %lldULL);\n",
                           bf->name, (long long)buf_numel(bf));
        }
    for (int c = L->nodes[bn].child; c >= 0 && !e->rc; c = L->nodes[c].next) {
        if (c == tn)
            regions(&m, L->nodes[tn].child, 2);
        else
            emu_node(&m, c, 2);
    }
    kt_sbuf_puts(&body, "    }\n");

    kt_sbuf_printf(out, "static int %s_k%d", e->entry, k);
    kt_gpu_emit_params(e, out);
    kt_sbuf_puts(out, "\n{\n");
    kt_gpu_emit_heap_decls(e, body.data, 2, out);
    /* per-block shared memory and per-thread registers (NaN at first) */
    int bufs[256];
    int nb = collect_allocs(L, kn, bufs, 0, 256);
    for (int i = 0; i < nb; i++) {
        const kt_lower_buf_t *bf = &L->bufs[bufs[i]];
        kt_sbuf_printf(out, "    float *%s = (float *)malloc(sizeof(float) * %lldULL);\n",
                       bf->name, (long long)alloc_floats(e, bf));
    }
    kt_sbuf_puts(out, "    int kt_ok = 1;\n");
    for (int i = 0; i < nb; i++)
        kt_sbuf_printf(out, "    kt_ok &= %s != NULL;\n", L->bufs[bufs[i]].name);
    kt_sbuf_puts(out, "    if (kt_ok) {\n");
    for (int i = 0; i < nb; i++) {
        const kt_lower_buf_t *bf = &L->bufs[bufs[i]];
        if (bf->kind == KT_BUF_LOCAL)
            kt_sbuf_printf(out, "    memset(%s, 0xff, sizeof(float) * %lldULL);\n", bf->name,
                           (long long)alloc_floats(e, bf));
    }
    kt_sbuf_puts(out, body.data ? body.data : "");
    kt_sbuf_puts(out, "    }\n");
    for (int i = 0; i < nb; i++)
        kt_sbuf_printf(out, "    free(%s);\n", L->bufs[bufs[i]].name);
    kt_sbuf_puts(out, "    return kt_ok ? 0 : -1;\n}\n\n");
    if (body.failed)
        out->failed = 1;
    kt_sbuf_free(&body);
}

int kt_codegen_emit_cuda_emu_into(const kt_dag_t *dag, const struct kt_sched_state *st,
                                  const char *entry, kt_sbuf_t *b)
{
    if (!dag || !st || !b)
        return kt_err_set(KT_EINVAL, "emulation: missing DAG, state or buffer");
    if (st->target != KT_SCHED_TARGET_CUDA)
        return kt_err_set(KT_EINVAL, "emulation: needs a GPU state (target cuda)");
    int rc = kt_codegen_check_entry(dag, entry);
    if (rc)
        return rc;
    kt_lower_t *L = kt_lower(dag, st);
    if (!L)
        return kt_err_code() ? kt_err_code() : KT_EINVAL;
    kt_gpu_emit_t e = {.dag = dag, .L = L, .entry = entry, .emu = 1, .thread = -1,
                       .zero_iter = -1};
    rc = kt_gpu_emit_mark_used(&e);
    int k = 0;
    for (int x = L->first; x >= 0 && !rc; x = L->nodes[x].next, k++) {
        emu_kernel(&e, x, k, b);
        rc = e.rc;
    }
    if (!rc) {
        /* the entry: the workspace, then every kernel in launch order */
        kt_sbuf_printf(b, "int %s(float **kt_bufs)\n{\n", entry);
        if (L->workspace > 0) {
            kt_sbuf_printf(b, "    float *kt_ws = (float *)malloc(sizeof(float) * %lldULL);\n",
                           (long long)L->workspace);
            kt_sbuf_puts(b, "    if (!kt_ws)\n        return -1;\n");
            kt_sbuf_printf(b, "    memset(kt_ws, 0xff, sizeof(float) * %lldULL);\n",
                           (long long)L->workspace);
        }
        kt_sbuf_puts(b, "    int kt_rc = 0;\n");
        for (int i = 0; i < L->nkernels; i++) {
            kt_sbuf_printf(b, "    if (kt_rc == 0)\n        kt_rc = %s_k%d(", entry, i);
            int n = 0;
            for (int pass = 0; pass < 2; pass++)
                for (int j = 0; j < L->nbufs; j++)
                    if (L->bufs[j].kind == (pass ? KT_BUF_OUTPUT : KT_BUF_INPUT))
                        kt_sbuf_printf(b, "%skt_bufs[%d]", n++ ? ", " : "", L->bufs[j].arg);
            if (L->workspace > 0)
                kt_sbuf_printf(b, "%skt_ws", n ? ", " : "");
            kt_sbuf_puts(b, ");\n");
        }
        if (L->workspace > 0)
            kt_sbuf_puts(b, "    free(kt_ws);\n");
        kt_sbuf_puts(b, "    return kt_rc;\n}\n\n");
    }
    free(e.used);
    kt_lower_free(L);
    if (!rc)
        rc = kt_sbuf_ok(b);
    return rc ? kt_err_prefix("emulation") : 0;
}

char *kt_codegen_emit_cuda_emu(const kt_dag_t *dag, const struct kt_sched_state *st,
                               const char *entry)
{
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    kt_sbuf_puts(&b, "/* ktune CPU emulation of CUDA kernels */\n");
    kt_codegen_preamble_c(&b);
    if (kt_codegen_emit_cuda_emu_into(dag, st, entry, &b) != 0) {
        kt_sbuf_free(&b);
        return NULL;
    }
    return kt_sbuf_take(&b);
}
