/*
 * A CPU stand-in for the part of the CUDA Driver API that a generated
 * NAME_host.c (ktune build --target cuda) uses, so that host file runs
 * unchanged on a machine without a GPU: the test links it against this
 * library instead of -lcuda. The kernels are the exact CUDA text of NAME.cu,
 * compiled by g++ through codegen/cuda_cpu.h into a module library
 * (kt_cuda_cpu_module_compile) that the test writes beside the cubin as
 * NAME.cpu.so; cuModuleLoad("NAME.cubin") checks the cubin is there (as the
 * driver would read it) and loads that library instead; so does
 * cuModuleLoad("NAME.ptx") for a file that looks like PTX. With
 * $KT_CUDA_CPU_NEWER_GPU set, a cubin is refused with
 * CUDA_ERROR_NO_BINARY_FOR_GPU, as on a GPU newer than its architecture.
 *
 * What it models, so a wrong host file fails here as it would on a GPU:
 * - cuInit before anything; device 0 only; the primary context counted by
 *   Retain/Release and current per thread (cuCtxSetCurrent), needed by every
 *   call that touches memory, modules or launches.
 * - Device memory is host memory (a CUdeviceptr is the host address), 256-
 *   byte aligned like cuMemAlloc's, filled with NaN (never zero: a read of
 *   something nobody wrote shows), inside 4 KiB NaN red zones that are
 *   checked after every launch and copy: a kernel writing outside its
 *   allocation is CUDA_ERROR_ILLEGAL_ADDRESS.
 * - Copies must lie inside one allocation (CUDA_ERROR_INVALID_VALUE).
 * - cuLaunchKernel: the default stream only, kernelParams only (no `extra`),
 *   no dynamic shared memory (the CPU prelude has none, and every kernel
 *   ktune prints declares its shared memory statically, so asking for some
 *   is a host bug); CUDA's grid/block limits and the kernel's
 *   __launch_bounds__ are checked. Launches run synchronously in order.
 * - A fault while a kernel runs (cuda_cpu.h lists them) is sticky, as on a
 *   GPU: that call and every later one return the error; the reason is
 *   printed on stderr ("cuda_driver_cpu: ...").
 *
 * Not modelled: streams, events, asynchrony, more than one device, several
 * contexts, peer access. Not thread-safe beyond the per-thread current
 * context (the generated runner uses one thread per instance).
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RED_ZONE 4096u
#define MSG_CAP 1024

typedef int (*find_fn)(const char *name);
typedef int (*launch_fn)(int k, const unsigned grid[3], const unsigned block[3], void **params,
                         char *msg, size_t cap);

struct CUctx_st {
    int retained;   /* Retain count; 0: the primary context is not there */
};

struct CUmod_st {
    void *so;
    find_fn find;
    launch_fn launch;
    struct CUfunc_st *funcs;   /* the functions handed out, freed with the module */
};

struct CUfunc_st {
    struct CUmod_st *mod;
    int index;
    char name[256];
    struct CUfunc_st *next;
};

/* One allocation: base is what malloc gave, p = base + RED_ZONE the device address. */
typedef struct alloc {
    unsigned char *base;
    size_t bytes, total;
    struct alloc *next;
} alloc_t;

static int initialized;
static struct CUctx_st primary;
static _Thread_local CUcontext current;
static alloc_t *allocs;
static CUresult sticky = CUDA_SUCCESS;   /* a fault poisons the context, as on a GPU */

static void say(const char *what) { fprintf(stderr, "cuda_driver_cpu: %s\n", what); }

static CUresult poison(CUresult r, const char *what)
{
    say(what);
    sticky = r;
    return r;
}

/* The state every context call needs. */
static CUresult need_ctx(void)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (sticky != CUDA_SUCCESS)
        return sticky;
    if (!current || current != &primary || !primary.retained)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

static size_t round256(size_t n) { return (n + 255) / 256 * 256; }

/* The allocation holding [p, p + n), or NULL. */
static alloc_t *find_alloc(CUdeviceptr p, size_t n)
{
    for (alloc_t *a = allocs; a; a = a->next) {
        uintptr_t lo = (uintptr_t)(a->base + RED_ZONE);
        if (p >= lo && p - lo <= a->bytes && n <= a->bytes - (p - lo))
            return a;
    }
    return NULL;
}

/* Every red zone still NaN; else the fault, with `who` did it. */
static CUresult check_zones(const char *who)
{
    for (alloc_t *a = allocs; a; a = a->next) {
        size_t tail = a->total - RED_ZONE - a->bytes;
        const unsigned char *t = a->base + RED_ZONE + a->bytes;
        int bad = 0;
        for (size_t i = 0; i < RED_ZONE && !bad; i++)
            bad = a->base[i] != 0xff;
        for (size_t i = 0; i < tail && !bad; i++)
            bad = t[i] != 0xff;
        if (bad) {
            char msg[MSG_CAP];
            snprintf(msg, sizeof msg, "%s wrote outside the %zu-byte allocation at %p", who,
                     a->bytes, (void *)(a->base + RED_ZONE));
            return poison(CUDA_ERROR_ILLEGAL_ADDRESS, msg);
        }
    }
    return CUDA_SUCCESS;
}

static void free_all(void)
{
    while (allocs) {
        alloc_t *a = allocs;
        allocs = a->next;
        free(a->base);
        free(a);
    }
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    static const struct {
        CUresult r;
        const char *name;
    } names[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
        {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
        {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
        {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
        {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
    };
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].r == error) {
            *pStr = names[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    primary.retained++;
    *pctx = &primary;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (primary.retained < 1)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--primary.retained == 0) {
        /* the context goes, and with it its memory and a fault's poison */
        free_all();
        sticky = CUDA_SUCCESS;
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && (ctx != &primary || !primary.retained))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    CUresult r = need_ctx();
    return r != CUDA_SUCCESS ? r : check_zones("a kernel");
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    struct stat st;
    if (stat(fname, &st) != 0 || !S_ISREG(st.st_mode))
        return CUDA_ERROR_FILE_NOT_FOUND;
    size_t len = strlen(fname), ext = 0;
    if (len >= 6 && strcmp(fname + len - 6, ".cubin") == 0) {
        /* $KT_CUDA_CPU_NEWER_GPU: a GPU newer than any cubin, as an sm_80
         * cubin is to an sm_90 device; only PTX (JIT-compiled) loads */
        if (getenv("KT_CUDA_CPU_NEWER_GPU"))
            return CUDA_ERROR_NO_BINARY_FOR_GPU;
        ext = 6;
    } else if (len >= 4 && strcmp(fname + len - 4, ".ptx") == 0) {
        FILE *f = fopen(fname, "r");
        char head[4096] = "";
        size_t got = f ? fread(head, 1, sizeof head - 1, f) : 0;
        if (f)
            fclose(f);
        head[got] = '\0';
        if (!strstr(head, ".version") || !strstr(head, ".target")) {
            say("cuModuleLoad: a .ptx file without .version and .target");
            return CUDA_ERROR_INVALID_PTX;
        }
        ext = 4;
    } else {
        say("cuModuleLoad: only NAME.cubin and NAME.ptx map to a CPU module (NAME.cpu.so)");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    char *so = malloc(len + 10);
    if (!so)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* "./" for a bare name: dlopen would search the library path instead */
    snprintf(so, len + 10, "%s%.*s.cpu.so", strchr(fname, '/') ? "" : "./", (int)(len - ext),
             fname);
    if (stat(so, &st) != 0) {
        char msg[MSG_CAP];
        snprintf(msg, sizeof msg, "cuModuleLoad(%s): no CPU build %s", fname, so);
        say(msg);
        free(so);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) {
        free(so);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* RTLD_LOCAL: each module keeps its own runtime state (threadIdx, ...) */
    m->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    free(so);
    if (m->so) {
        *(void **)&m->find = dlsym(m->so, "kt_cuda_cpu_module_find");
        *(void **)&m->launch = dlsym(m->so, "kt_cuda_cpu_module_launch");
    }
    if (!m->so || !m->find || !m->launch) {
        say(m->so ? "cuModuleLoad: not a cuda_cpu module" : dlerror());
        if (m->so)
            dlclose(m->so);
        free(m);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *module = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hmod)
        return CUDA_ERROR_INVALID_HANDLE;
    while (hmod->funcs) {
        struct CUfunc_st *f = hmod->funcs;
        hmod->funcs = f->next;
        free(f);
    }
    dlclose(hmod->so);
    free(hmod);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!hmod)
        return CUDA_ERROR_INVALID_HANDLE;
    int k = hmod->find(name);
    if (k < 0)
        return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->mod = hmod;
    f->index = k;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->next = hmod->funcs;
    hmod->funcs = f;
    *hfunc = f;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    alloc_t *a = calloc(1, sizeof *a);
    if (!a || bytesize > SIZE_MAX / 2) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->bytes = bytesize;
    a->total = RED_ZONE + round256(bytesize) + RED_ZONE;
    a->base = aligned_alloc(256, a->total);
    if (!a->base) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(a->base, 0xff, a->total);   /* NaN: never-written memory shows */
    a->next = allocs;
    allocs = a;
    *dptr = (CUdeviceptr)(uintptr_t)(a->base + RED_ZONE);
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    for (alloc_t **pp = &allocs; *pp; pp = &(*pp)->next) {
        alloc_t *a = *pp;
        if ((uintptr_t)(a->base + RED_ZONE) != dptr)
            continue;
        r = check_zones("a kernel");
        *pp = a->next;
        free(a->base);
        free(a);
        return r;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!srcHost || !find_alloc(dstDevice, ByteCount))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dstHost || !find_alloc(srcDevice, ByteCount))
        return CUDA_ERROR_INVALID_VALUE;
    /* a copy back synchronizes: a kernel's stray write shows here at the latest */
    if ((r = check_zones("a kernel")) != CUDA_SUCCESS)
        return r;
    memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!find_alloc(dstDevice, ByteCount) || !find_alloc(srcDevice, ByteCount))
        return CUDA_ERROR_INVALID_VALUE;
    /* cuMemcpy's ranges may not overlap; memmove keeps a bad host deterministic */
    memmove((void *)(uintptr_t)dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    char msg[MSG_CAP];
    if (hStream || extra) {
        snprintf(msg, sizeof msg, "cuLaunchKernel(%s): only the default stream and kernelParams",
                 f->name);
        say(msg);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (sharedMemBytes) {
        snprintf(msg, sizeof msg,
                 "cuLaunchKernel(%s): %u bytes of dynamic shared memory for a kernel that "
                 "declares its shared memory statically", f->name, sharedMemBytes);
        say(msg);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    int rc = f->mod->launch(f->index, grid, block, kernelParams, msg, sizeof msg);
    if (rc == 1) {
        say(msg);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (rc != 0)
        return poison(CUDA_ERROR_LAUNCH_FAILED, msg);
    snprintf(msg, sizeof msg, "kernel %s", f->name);
    return check_zones(msg);
}
