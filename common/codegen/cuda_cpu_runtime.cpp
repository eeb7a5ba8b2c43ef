/*
 * The runtime of CUDA kernels run on the CPU (design in cuda_cpu.h): device
 * buffers with red zones, launches block by block, the threads of a block
 * as fibers, barriers, warp shuffles and faults. C++17, compiled at run
 * time with the kernels (cuda_cpu.c writes it out beside the driver).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

/* Fortified longjmp refuses a jump to another stack, which is every fiber
 * switch here: say so at build time instead of aborting at the first one. */
#if defined(__USE_FORTIFY_LEVEL) && __USE_FORTIFY_LEVEL > 0
#error "the CUDA-on-CPU runtime must be compiled without _FORTIFY_SOURCE (-U_FORTIFY_SOURCE)"
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* The section always exists, so its __start/__stop symbols do too. */
__attribute__((section("kt_shared"), used)) static float kt_shared_anchor[4];
extern char __start_kt_shared[], __stop_kt_shared[];

/* One launch as the generated driver describes it. */
struct kt_cuda_cpu_launch {
    const char *name;
    unsigned grid[3], block[3];
    unsigned bounds;                 /* __launch_bounds__ of the text; 0: none */
    void (*body)(float **args);      /* calls the kernel with the device buffers */
};

namespace {

constexpr int MAX_THREADS = 1024;           /* CUDA's limit per block */
constexpr size_t STACK_BYTES = 256 << 10;   /* per fiber, touched lazily */
constexpr size_t POISON_BYTES = 16 << 10;   /* top of each stack filled with NaN */
constexpr size_t RED_ZONE = 4096;           /* bytes of NaN around each buffer */
constexpr size_t PAGE = 4096;

enum state { RUN, AT_BARRIER, AT_SHUFFLE, DONE };

struct fiber {
    ucontext_t ctx;      /* the first entry only: makecontext needs it */
    jmp_buf jb;          /* later switches: _setjmp/_longjmp skip the signal
                          * mask system call swapcontext makes on every switch */
    char *stack;
    int state, started;
    uint3 tid;
};

struct warp {
    uint32_t arrived, mask;
    uint32_t val[32], res[32];
    int kind[32], arg[32], width[32];
};

struct scheduler {
    jmp_buf main;
    fiber *f;
    warp *w;
    char *stacks;
    size_t stacks_bytes;
    int n, cur, at_barrier, done;
    float **args;
    void (*body)(float **);
    int faulted;
    char fault[512];
};

scheduler S;

[[noreturn]] void to_scheduler()
{
    _longjmp(S.main, 1);
}

void yield()
{
    if (!_setjmp(S.f[S.cur].jb))
        to_scheduler();
}

void trampoline()
{
    S.body(S.args);
    fiber &me = S.f[S.cur];
    if (S.at_barrier > 0)
        kt_cuda_cpu_fault("thread (%u,%u,%u) exited while %d threads wait at __syncthreads()",
                          me.tid.x, me.tid.y, me.tid.z, S.at_barrier);
    me.state = DONE;
    S.done++;
    to_scheduler();
}

int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.fault, sizeof(S.fault), fmt, ap);
    va_end(ap);
    S.faulted = 1;
    return -1;
}

/* Stacks for n fibers, each above a guard page, so an overflow faults. */
int stacks_for(int n)
{
    size_t need = (size_t)n * (STACK_BYTES + PAGE);
    if (need <= S.stacks_bytes)
        return 0;
    if (S.stacks)
        munmap(S.stacks, S.stacks_bytes);
    delete[] S.f;
    delete[] S.w;
    S.f = nullptr;
    S.w = nullptr;
    S.stacks_bytes = 0;
    void *m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return fail("cannot map %zu bytes of fiber stacks", need);
    S.stacks = (char *)m;
    S.stacks_bytes = need;
    S.f = new fiber[(size_t)n];
    S.w = new warp[(size_t)(n + 31) / 32];
    for (int i = 0; i < n; i++) {
        char *base = S.stacks + (size_t)i * (STACK_BYTES + PAGE);
        mprotect(base, PAGE, PROT_NONE);
        S.f[i].stack = base + PAGE;
    }
    return 0;
}

const char *state_name(int s)
{
    return s == AT_BARRIER ? "__syncthreads()" : s == AT_SHUFFLE ? "a warp shuffle" : "running";
}

/* Run one block: every thread as a fiber, round robin until all are done. */
int run_block(int n)
{
    memset(__start_kt_shared, 0xff, (size_t)(__stop_kt_shared - __start_kt_shared));   /* NaN */
    S.at_barrier = S.done = 0;
    memset(S.w, 0, sizeof(warp) * (size_t)((n + 31) / 32));
    for (int i = 0; i < n; i++) {
        fiber &f = S.f[i];
        f.state = RUN;
        f.started = 0;
        unsigned bx = blockDim.x, by = blockDim.y;
        f.tid = uint3{(unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by)};
        /* registers and local arrays start as NaN: a read before a write shows */
        memset(f.stack + STACK_BYTES - POISON_BYTES, 0xff, POISON_BYTES);
    }
    while (S.done < n) {
        int ran = 0;
        for (int i = 0; i < n; i++) {
            fiber &f = S.f[i];
            if (f.state != RUN)
                continue;
            ran = 1;
            S.cur = i;
            threadIdx = f.tid;
            if (!_setjmp(S.main)) {
                if (!f.started) {
                    f.started = 1;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack;
                    f.ctx.uc_stack.ss_size = STACK_BYTES;
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, trampoline, 0);
                    setcontext(&f.ctx);
                }
                _longjmp(f.jb, 1);
            }
            if (S.faulted)
                return -1;
        }
        if (!ran) {
            /* every live thread waits for one that never comes */
            int i = 0;
            while (S.f[i].state == DONE)
                i++;
            const warp &w = S.w[i / 32];
            return fail("deadlock: thread (%u,%u,%u) waits at %s (%d of %d threads at "
                        "__syncthreads(), %d done; its warp's shuffle has lanes %08x of mask %08x)",
                        S.f[i].tid.x, S.f[i].tid.y, S.f[i].tid.z, state_name(S.f[i].state),
                        S.at_barrier, n, S.done, w.arrived, w.mask);
        }
    }
    return 0;
}

int launch(const kt_cuda_cpu_launch &l, float **args)
{
    unsigned n = l.block[0] * l.block[1] * l.block[2];
    for (int d = 0; d < 3; d++)
        if (l.block[d] == 0 || l.grid[d] == 0)
            return fail("launch with an empty grid or block");
    if (n > (unsigned)MAX_THREADS)
        return fail("block of %u threads exceeds CUDA's %d", n, MAX_THREADS);
    if (l.bounds && n > l.bounds)
        return fail("block of %u threads exceeds the kernel's __launch_bounds__(%u): CUDA refuses "
                    "the launch", n, l.bounds);
    if (stacks_for((int)n))
        return -1;
    S.n = (int)n;
    S.args = args;
    S.body = l.body;
    blockDim = dim3{l.block[0], l.block[1], l.block[2]};
    gridDim = dim3{l.grid[0], l.grid[1], l.grid[2]};
    for (unsigned z = 0; z < l.grid[2]; z++)
        for (unsigned y = 0; y < l.grid[1]; y++)
            for (unsigned x = 0; x < l.grid[0]; x++) {
                blockIdx = uint3{x, y, z};
                if (run_block((int)n)) {
                    char msg[sizeof(S.fault)];
                    memcpy(msg, S.fault, sizeof(msg));
                    fiber &f = S.f[S.cur];
                    snprintf(S.fault, sizeof(S.fault), "block (%u,%u,%u) thread (%u,%u,%u): %s", x,
                             y, z, f.tid.x, f.tid.y, f.tid.z, msg);
                    return -1;
                }
            }
    return 0;
}

/* A device buffer: 256-byte aligned like cuMemAlloc's, NaN red zones on
 * both sides (reads there give NaN; writes there are reported). */
struct dbuf {
    char *base;
    float *p;
    size_t bytes, total;
};

int dbuf_new(dbuf *b, size_t bytes)
{
    b->bytes = bytes;
    b->total = RED_ZONE + ((bytes + 255) & ~(size_t)255) + RED_ZONE;
    b->base = (char *)aligned_alloc(256, b->total);
    if (!b->base)
        return fail("out of memory for a %zu-byte device buffer", bytes);
    memset(b->base, 0xff, b->total);
    b->p = (float *)(b->base + RED_ZONE);
    return 0;
}

int dbuf_zones_intact(const dbuf *b)
{
    size_t tail = b->total - RED_ZONE - b->bytes;
    for (size_t i = 0; i < RED_ZONE; i++)
        if ((unsigned char)b->base[i] != 0xff)
            return 0;
    for (size_t i = 0; i < tail; i++)
        if ((unsigned char)b->base[RED_ZONE + b->bytes + i] != 0xff)
            return 0;
    return 1;
}

} // namespace

void kt_cuda_cpu_fault(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.fault, sizeof(S.fault), fmt, ap);
    va_end(ap);
    S.faulted = 1;
    to_scheduler();
}

void __syncthreads()
{
    fiber &me = S.f[S.cur];
    if (S.done > 0)
        kt_cuda_cpu_fault("__syncthreads() after %d threads of the block exited", S.done);
    if (++S.at_barrier == S.n) {
        /* the last thread releases the others and goes on */
        for (int i = 0; i < S.n; i++)
            if (S.f[i].state == AT_BARRIER)
                S.f[i].state = RUN;
        S.at_barrier = 0;
        return;
    }
    me.state = AT_BARRIER;
    yield();
}

uint32_t kt_cuda_cpu_shfl(unsigned mask, uint32_t v, int kind, int arg, int width)
{
    int t = S.cur, lane = t % 32;
    fiber &me = S.f[t];
    warp &w = S.w[t / 32];
    int first = t - lane, lanes = S.n - first < 32 ? S.n - first : 32;
    uint32_t exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    if (!(mask >> lane & 1))
        kt_cuda_cpu_fault("lane %d calls a shuffle whose mask %08x leaves it out", lane, mask);
    if (mask & ~exist)
        kt_cuda_cpu_fault("shuffle mask %08x names lanes the block does not have (%08x)", mask,
                          exist);
    if (width < 1 || width > 32 || (width & (width - 1)))
        kt_cuda_cpu_fault("shuffle width %d is not a power of two up to 32", width);
    if (w.arrived && w.mask != mask)
        kt_cuda_cpu_fault("lanes of a warp shuffle with masks %08x and %08x", w.mask, mask);
    w.mask = mask;
    w.val[lane] = v;
    w.kind[lane] = kind;
    w.arg[lane] = arg;
    w.width[lane] = width;
    w.arrived |= 1u << lane;
    if (w.arrived == mask) {
        /* the last lane exchanges for all at once */
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1))
                continue;
            int wd = w.width[l], seg = l & ~(wd - 1), src = l, a = w.arg[l];
            switch (w.kind[l]) {
            case KT_CUDA_CPU_SHFL_IDX: src = seg + (a & (wd - 1)); break;
            case KT_CUDA_CPU_SHFL_UP: src = l - a >= seg ? l - a : l; break;
            case KT_CUDA_CPU_SHFL_DOWN: src = l + a < seg + wd ? l + a : l; break;
            default: src = (l ^ a) >= seg && (l ^ a) < seg + wd ? l ^ a : l; break;
            }
            if (src < 0 || src > 31 || !(mask >> src & 1))
                kt_cuda_cpu_fault("lane %d reads lane %d, outside the shuffle mask %08x", l, src,
                                  mask);
            w.res[l] = w.val[src];
        }
        for (int l = 0; l < 32; l++)
            if ((mask >> l & 1) && l != lane)
                S.f[first + l].state = RUN;
        w.arrived = 0;
        return w.res[lane];
    }
    me.state = AT_SHUFFLE;
    yield();
    return w.res[lane];
}

/* Copy the inputs to device buffers, run the launches in order, check the
 * red zones and that inputs are unchanged, copy the outputs back. 0; -1
 * out of memory; 2 a fault (printed to stderr, where the checker shows it). */
extern "C" int kt_cuda_cpu_run(float **bufs, int nbufs, const size_t *numel, const int *is_input,
                               size_t ws_bytes, const kt_cuda_cpu_launch *launches, int nlaunches)
{
    dbuf *d = new dbuf[(size_t)nbufs + 1]();
    float **args = new float *[(size_t)nbufs + 1]();
    int rc = 0, made = 0;
    S.faulted = 0;
    for (int i = 0; i <= nbufs && !rc; i++, made++) {
        size_t bytes = i < nbufs ? numel[i] * sizeof(float) : ws_bytes;
        if (i == nbufs && ws_bytes == 0)
            break;
        rc = dbuf_new(&d[i], bytes);
        if (!rc && i < nbufs && is_input[i])
            memcpy(d[i].p, bufs[i], bytes);
        args[i] = d[i].p;
    }
    for (int k = 0; !rc && k < nlaunches; k++) {
        rc = launch(launches[k], args);
        if (rc) {
            char msg[sizeof(S.fault)];
            memcpy(msg, S.fault, sizeof(msg));
            snprintf(S.fault, sizeof(S.fault), "kernel %s: %s", launches[k].name, msg);
        }
    }
    for (int i = 0; !rc && i < made; i++) {
        if (!dbuf_zones_intact(&d[i]) && i == nbufs)
            rc = fail("a kernel wrote outside the workspace");
        else if (!dbuf_zones_intact(&d[i]))
            rc = fail("a kernel wrote outside buffer %d", i);
        else if (i < nbufs && is_input[i] && memcmp(d[i].p, bufs[i], d[i].bytes) != 0)
            rc = fail("a kernel wrote into input buffer %d", i);
    }
    for (int i = 0; !rc && i < nbufs; i++)
        if (!is_input[i])
            memcpy(bufs[i], d[i].p, d[i].bytes);
    for (int i = 0; i < made; i++)
        free(d[i].base);
    delete[] d;
    delete[] args;
    if (rc && S.faulted) {
        fprintf(stderr, "CUDA fault: %s\n", S.fault);
        return 2;
    }
    return rc ? -1 : 0;
}

/* One launch with cuLaunchKernel's parameters (kt_cuda_cpu_module_into's
 * modules call it): params[i] points at the i-th parameter's value, and
 * l->body unpacks them by the kernel's own signature. 0; 1 a configuration
 * CUDA refuses before running anything (nothing ran); 2 a fault while the
 * kernel ran (its memory is then in an unknown state, as on a GPU). The
 * message goes to msg either way. */
extern "C" int kt_cuda_cpu_launch_params(const kt_cuda_cpu_launch *l, void **params, char *msg,
                                         size_t cap)
{
    unsigned n = l->block[0] * l->block[1] * l->block[2];
    S.faulted = 0;
    msg[0] = '\0';
    /* CUDA's own limits first, so a bad launch is refused as the driver does */
    if (!l->block[0] || !l->block[1] || !l->block[2] || !l->grid[0] || !l->grid[1] || !l->grid[2]) {
        snprintf(msg, cap, "kernel %s: empty grid or block", l->name);
        return 1;
    }
    if (l->block[0] > 1024 || l->block[1] > 1024 || l->block[2] > 64 || n > (unsigned)MAX_THREADS ||
        l->grid[1] > 65535 || l->grid[2] > 65535 || l->grid[0] > 0x7fffffffu) {
        snprintf(msg, cap, "kernel %s: grid (%u,%u,%u) or block (%u,%u,%u) beyond CUDA's limits",
                 l->name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                 l->block[2]);
        return 1;
    }
    if (l->bounds && n > l->bounds) {
        snprintf(msg, cap, "kernel %s: block of %u threads exceeds its __launch_bounds__(%u)",
                 l->name, n, l->bounds);
        return 1;
    }
    if (launch(*l, reinterpret_cast<float **>(params))) {
        snprintf(msg, cap, "kernel %s: %s", l->name, S.fault);
        return 2;
    }
    return 0;
}
