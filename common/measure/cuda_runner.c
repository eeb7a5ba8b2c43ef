#include "measure/cuda_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt_config.h"
#include "measure/measure_int.h"
#include "util/err.h"
#include "util/util.h"

struct kt_cuda_runner {
    kt_runner_t *runner;
    kt_hw_params_t hw;
};

void kt_cuda_runner_opts_default(kt_cuda_runner_opts_t *o)
{
    memset(o, 0, sizeof *o);
    kt_runner_opts_default(&o->run);
    o->probe_timeout = 60;
}

kt_cuda_runner_t *kt_cuda_runner_new(const kt_cuda_runner_opts_t *o)
{
    kt_cuda_runner_opts_t d;
    if (!o) {
        kt_cuda_runner_opts_default(&d);
        o = &d;
    }
    if (o->device < 0 || o->probe_timeout < 0) {
        kt_err_set(KT_EINVAL, "cuda runner: device and probe_timeout must not be negative");
        return NULL;
    }
    kt_hw_params_t hw;
    if (kt_cuda_device_probe(o->device, o->driver_lib, o->probe_timeout, &hw) < 0)
        return NULL;
    kt_cuda_runner_t *c = calloc(1, sizeof *c);
    if (!c) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    c->hw = hw;
    c->runner = kt_runner_new(&o->run);
    if (!c->runner ||
        kt_runner_set_cuda(c->runner, o->device, o->driver_lib ? o->driver_lib : KT_CUDA_DRIVER_LIB,
                           o->enable_l2_flush) < 0) {
        kt_cuda_runner_free(c);
        return NULL;
    }
    return c;
}

void kt_cuda_runner_free(kt_cuda_runner_t *c)
{
    if (!c)
        return;
    kt_runner_free(c->runner);
    free(c);
}

kt_runner_t *kt_cuda_runner_runner(kt_cuda_runner_t *c)
{
    return c->runner;
}

const kt_hw_params_t *kt_cuda_runner_hw_params(const kt_cuda_runner_t *c)
{
    return &c->hw;
}

#if KT_HAVE_CUDA

#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>

/* ---- the driver, loaded at run time ------------------------------------------ */

/* The Driver API entry points used. __typeof__ of cuda.h's prototypes keeps
 * the types exact; the symbol names are the versioned ones cuda.h's macros
 * map to (cuMemAlloc -> cuMemAlloc_v2). */
typedef struct {
    __typeof__(cuGetErrorName) *GetErrorName;
    __typeof__(cuGetErrorString) *GetErrorString;
    __typeof__(cuInit) *Init;
    __typeof__(cuDeviceGetCount) *DeviceGetCount;
    __typeof__(cuDeviceGet) *DeviceGet;
    __typeof__(cuDeviceGetName) *DeviceGetName;
    __typeof__(cuDeviceGetAttribute) *DeviceGetAttribute;
    __typeof__(cuDeviceTotalMem_v2) *DeviceTotalMem;
    __typeof__(cuDevicePrimaryCtxRetain) *DevicePrimaryCtxRetain;
    __typeof__(cuCtxSetCurrent) *CtxSetCurrent;
    __typeof__(cuCtxSynchronize) *CtxSynchronize;
    __typeof__(cuModuleLoadData) *ModuleLoadData;
    __typeof__(cuModuleUnload) *ModuleUnload;
    __typeof__(cuModuleGetFunction) *ModuleGetFunction;
    __typeof__(cuFuncSetAttribute) *FuncSetAttribute;
    __typeof__(cuMemAlloc_v2) *MemAlloc;
    __typeof__(cuMemFree_v2) *MemFree;
    __typeof__(cuMemcpyHtoD_v2) *MemcpyHtoD;
    __typeof__(cuMemcpyDtoH_v2) *MemcpyDtoH;
    __typeof__(cuMemsetD8_v2) *MemsetD8;
    __typeof__(cuMemsetD32_v2) *MemsetD32;
    __typeof__(cuLaunchKernel) *LaunchKernel;
    __typeof__(cuEventCreate) *EventCreate;
    __typeof__(cuEventRecord) *EventRecord;
    __typeof__(cuEventSynchronize) *EventSynchronize;
    __typeof__(cuEventElapsedTime) *EventElapsedTime; /* _v2 from CUDA 12.8, same type */
    __typeof__(cuEventDestroy_v2) *EventDestroy;
} drv_t;

#define SYM(field, name, alt) {name, alt, offsetof(drv_t, field)}
static const struct {
    const char *name, *alt; /* alt: the older symbol, for drivers before the new one */
    size_t off;
} drv_syms[] = {
    SYM(GetErrorName, "cuGetErrorName", NULL),
    SYM(GetErrorString, "cuGetErrorString", NULL),
    SYM(Init, "cuInit", NULL),
    SYM(DeviceGetCount, "cuDeviceGetCount", NULL),
    SYM(DeviceGet, "cuDeviceGet", NULL),
    SYM(DeviceGetName, "cuDeviceGetName", NULL),
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
    SYM(CtxSetCurrent, "cuCtxSetCurrent", NULL),
    SYM(CtxSynchronize, "cuCtxSynchronize", NULL),
    SYM(ModuleLoadData, "cuModuleLoadData", NULL),
    SYM(ModuleUnload, "cuModuleUnload", NULL),
    SYM(ModuleGetFunction, "cuModuleGetFunction", NULL),
    SYM(FuncSetAttribute, "cuFuncSetAttribute", NULL),
    SYM(MemAlloc, "cuMemAlloc_v2", NULL),
    SYM(MemFree, "cuMemFree_v2", NULL),
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL),
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL),
    SYM(MemsetD8, "cuMemsetD8_v2", NULL),
    SYM(MemsetD32, "cuMemsetD32_v2", NULL),
    SYM(LaunchKernel, "cuLaunchKernel", NULL),
    SYM(EventCreate, "cuEventCreate", NULL),
    SYM(EventRecord, "cuEventRecord", NULL),
    SYM(EventSynchronize, "cuEventSynchronize", NULL),
    SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
    SYM(EventDestroy, "cuEventDestroy_v2", NULL),
};
#undef SYM

/* This process's driver table. Only children of ktune processes fill it. */
static drv_t drv;
static void *drv_handle;

static int drv_load(const char *lib, char *err, size_t n)
{
    if (drv_handle)
        return 0;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, n, "cannot load the CUDA driver library: %s", e ? e : lib);
        return -1;
    }
    for (size_t i = 0; i < KT_ARRAY_LEN(drv_syms); i++) {
        void *p = dlsym(h, drv_syms[i].name);
        if (!p && drv_syms[i].alt)
            p = dlsym(h, drv_syms[i].alt);
        if (!p) {
            snprintf(err, n, "the CUDA driver library %s has no %s (driver too old)", lib,
                     drv_syms[i].name);
            dlclose(h);
            memset(&drv, 0, sizeof drv);
            return -1;
        }
        memcpy((char *)&drv + drv_syms[i].off, &p, sizeof p);
    }
    drv_handle = h;
    return 0;
}

/* "CUDA_ERROR_X: description". The toolkit's stub library answers every
 * call, cuGetErrorName included, with CUDA_ERROR_STUB_LIBRARY; the names
 * likely before a working driver are known here. */
static void cu_text(CUresult rc, char *buf, size_t n)
{
    const char *name = NULL, *desc = NULL;
    if (drv.GetErrorName && drv.GetErrorName(rc, &name) != CUDA_SUCCESS)
        name = NULL;
    if (drv.GetErrorString && drv.GetErrorString(rc, &desc) != CUDA_SUCCESS)
        desc = NULL;
    if (!name) {
        switch (rc) {
        case CUDA_ERROR_STUB_LIBRARY: name = "CUDA_ERROR_STUB_LIBRARY"; break;
        case CUDA_ERROR_NO_DEVICE: name = "CUDA_ERROR_NO_DEVICE"; break;
        case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: name = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"; break;
        case CUDA_ERROR_NOT_INITIALIZED: name = "CUDA_ERROR_NOT_INITIALIZED"; break;
        case CUDA_ERROR_DEVICE_UNAVAILABLE: name = "CUDA_ERROR_DEVICE_UNAVAILABLE"; break;
        default: break;
        }
    }
    if (name && desc)
        snprintf(buf, n, "%s: %s", name, desc);
    else if (name)
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "CUresult %d", (int)rc);
}

/* err = "<what>: <cu_text>". */
static void cu_fail(CUresult rc, char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cu_fail(CUresult rc, char *err, size_t n, const char *fmt, ...)
{
    char what[256], text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cu_text(rc, text, sizeof text);
    snprintf(err, n, "%s: %s", what, text);
}

/* Check a driver call in the measuring child: on failure, fill err and
 * return RUNTIME_DEVICE (CU_RET) or set rc and jump to fail (CU_GOTO). */
#define CU_RET(call, ...)                                    \
    do {                                                     \
        CUresult cr_ = (call);                               \
        if (cr_ != CUDA_SUCCESS) {                           \
            cu_fail(cr_, err, n, __VA_ARGS__);               \
            return KT_MEASURE_RUNTIME_DEVICE;                \
        }                                                    \
    } while (0)
#define CU_GOTO(call, ...)                                   \
    do {                                                     \
        CUresult cr_ = (call);                               \
        if (cr_ != CUDA_SUCCESS) {                           \
            cu_fail(cr_, err, n, __VA_ARGS__);               \
            rc = KT_MEASURE_RUNTIME_DEVICE;                  \
            goto fail;                                       \
        }                                                    \
    } while (0)

/* ---- probe ----------------------------------------------------------------------- */

typedef struct {
    int rc;
    kt_hw_params_t hw;
    char msg[512];
} probe_msg_t;

static void probe_in_child(int device, const char *lib, probe_msg_t *m)
{
    char err[400], text[256];
    m->rc = KT_ENOTFOUND;
    if (drv_load(lib, err, sizeof err) < 0) {
        snprintf(m->msg, sizeof m->msg, "no CUDA device (%s)", err);
        return;
    }
    CUresult rc = drv.Init(0);
    if (rc == CUDA_ERROR_NOT_INITIALIZED) {
        /* A driver and a device, but a parent that had started CUDA (NVRTC
         * compiles do) before forking: a bug of the caller, not "no GPU". */
        m->rc = KT_EINTERNAL;
        snprintf(m->msg, sizeof m->msg, "CUDA device %d: cuInit failed with "
                 "CUDA_ERROR_NOT_INITIALIZED in the probe process: the process that forked it "
                 "had started CUDA (compile with kt_nvrtc_compile_isolated there)", device);
        return;
    }
    if (rc != CUDA_SUCCESS) {
        cu_text(rc, text, sizeof text);
        snprintf(m->msg, sizeof m->msg, "no CUDA device (cuInit failed: %s)", text);
        return;
    }
    int count = 0;
    if ((rc = drv.DeviceGetCount(&count)) != CUDA_SUCCESS) {
        cu_text(rc, text, sizeof text);
        snprintf(m->msg, sizeof m->msg, "no CUDA device (cuDeviceGetCount failed: %s)", text);
        return;
    }
    if (count <= 0) {
        snprintf(m->msg, sizeof m->msg, "no CUDA device (the driver reports none)");
        return;
    }
    if (device >= count) {
        snprintf(m->msg, sizeof m->msg, "no CUDA device %d (the driver reports %d)", device,
                 count);
        return;
    }
    m->rc = KT_EIO;
    CUdevice dev;
    if ((rc = drv.DeviceGet(&dev, device)) != CUDA_SUCCESS) {
        cu_text(rc, text, sizeof text);
        snprintf(m->msg, sizeof m->msg, "CUDA device %d: cuDeviceGet: %s", device, text);
        return;
    }
    static const CUdevice_attribute attrs[] = {
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
    };
    int v[KT_ARRAY_LEN(attrs)];
    for (size_t i = 0; i < KT_ARRAY_LEN(attrs); i++) {
        if ((rc = drv.DeviceGetAttribute(&v[i], attrs[i], dev)) != CUDA_SUCCESS) {
            cu_text(rc, text, sizeof text);
            snprintf(m->msg, sizeof m->msg, "CUDA device %d: cuDeviceGetAttribute(%d): %s",
                     device, (int)attrs[i], text);
            return;
        }
    }
    size_t mem = 0;
    char name[KT_HW_NAME_LEN] = "";
    if ((rc = drv.DeviceTotalMem(&mem, dev)) != CUDA_SUCCESS ||
        (rc = drv.DeviceGetName(name, (int)sizeof name, dev)) != CUDA_SUCCESS) {
        cu_text(rc, text, sizeof text);
        snprintf(m->msg, sizeof m->msg, "CUDA device %d: %s", device, text);
        return;
    }
    kt_hw_params_t *hw = &m->hw;
    memset(hw, 0, sizeof *hw);
    snprintf(hw->target, sizeof hw->target, "cuda");
    snprintf(hw->arch, sizeof hw->arch, "sm_%d%d", v[1], v[2]);
    snprintf(hw->name, sizeof hw->name, "%s", name);
    hw->cc_major = v[1];
    hw->cc_minor = v[2];
    hw->num_cores = v[0];
    hw->max_shared_memory_per_block = v[3];
    hw->max_threads_per_block = v[4];
    hw->warp_size = v[5];
    hw->clock_khz = v[6];
    hw->memory_bytes = (int64_t)mem;
    /* As TVM's defaults for CUDA devices. */
    hw->vector_unit_bytes = 16;
    hw->cache_line_bytes = 64;
    hw->max_local_memory_per_block = KT_HW_NO_LOCAL_MEMORY_LIMIT;
    hw->max_vthread_extent = hw->warp_size / 4 > 0 ? hw->warp_size / 4 : 1;
    m->rc = KT_OK;
}

int kt_cuda_device_probe(int device, const char *driver_lib, double timeout,
                         kt_hw_params_t *out)
{
    if (device < 0 || !out)
        return kt_err_set(KT_EINVAL, "cuda probe: bad arguments");
    if (timeout <= 0)
        timeout = 60;
    const char *lib = driver_lib ? driver_lib : KT_CUDA_DRIVER_LIB;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return kt_err_set(KT_EIO, "cuda probe: pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kt_err_set(KT_EIO, "cuda probe: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(2);
        probe_msg_t m;
        memset(&m, 0, sizeof m);
        probe_in_child(device, lib, &m);
        _exit(kt_fd_write_all(fds[1], &m, sizeof m) == 0 ? 0 : 3);
    }
    setpgid(pid, pid);
    close(fds[1]);

    probe_msg_t m;
    size_t got = 0;
    int timed_out = 0;
    double deadline = kt_time_mono() + timeout;
    while (got < sizeof m) {
        double left = deadline - kt_time_mono();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1e3) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* the deadline check above ends it */
        ssize_t r = read(fds[0], (char *)&m + got, sizeof m - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    if (got < sizeof m) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
    int status = -1;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return kt_err_set(KT_ETIMEOUT, "probing CUDA device %d took longer than %.3g s", device,
                          timeout);
    if (got < sizeof m) {
        char why[160] = "ended unexpectedly";
        if (status != -1 && WIFSIGNALED(status)) {
            char sig[128];
            kt_measure_signal_text(WTERMSIG(status), sig, sizeof sig);
            snprintf(why, sizeof why, "was killed by %s", sig);
        }
        return kt_err_set(KT_EIO, "probing CUDA device %d: the probe process %s", device, why);
    }
    m.msg[sizeof m.msg - 1] = '\0';
    if (m.rc < 0)
        return kt_err_set(m.rc, "%s", m.msg);
    if (kt_hw_params_validate(&m.hw) < 0)
        return kt_err_prefix("CUDA device %d", device);
    *out = m.hw;
    return KT_OK;
}

/* ---- the measuring child ----------------------------------------------------------- */

/* The child's device; zero in every freshly forked child (the parent never
 * opens it). */
static struct {
    int tried, rc;
    char err[512];
    CUdevice dev;
    CUcontext ctx;
    int l2_flush;
    CUdeviceptr flush_buf;
    size_t flush_bytes;
    unsigned char flush_value;
} cu;

static int child_open(int device, const char *lib, int l2_flush, char *err, size_t n)
{
    if (drv_load(lib, err, n) < 0)
        return KT_MEASURE_RUNTIME_DEVICE;
    CU_RET(drv.Init(0), "cuInit");
    CU_RET(drv.DeviceGet(&cu.dev, device), "cuDeviceGet(%d)", device);
    CU_RET(drv.DevicePrimaryCtxRetain(&cu.ctx, cu.dev), "cuDevicePrimaryCtxRetain");
    CU_RET(drv.CtxSetCurrent(cu.ctx), "cuCtxSetCurrent");
    if (l2_flush) {
        int l2 = 0;
        CU_RET(drv.DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cu.dev),
               "cuDeviceGetAttribute(L2 cache size)");
        /* Twice the L2, so writing it evicts everything a kernel left there. */
        cu.flush_bytes = l2 > 0 ? 2 * (size_t)l2 : (size_t)128 << 20;
        CU_RET(drv.MemAlloc(&cu.flush_buf, cu.flush_bytes), "cuMemAlloc(%zu bytes for L2 flush)",
               cu.flush_bytes);
        cu.l2_flush = 1;
    }
    return 0;
}

int kt_cuda_child_open(int device, const char *driver_lib, int l2_flush, char *err, size_t n)
{
    if (!cu.tried) {
        cu.tried = 1;
        cu.rc = child_open(device, driver_lib, l2_flush, cu.err, sizeof cu.err);
    }
    if (cu.rc)
        snprintf(err, n, "cannot use CUDA device %d: %s", device, cu.err);
    return cu.rc;
}

int kt_cuda_child_usable(void)
{
    if (!cu.tried || cu.rc)
        return 1;
    /* A sticky error (illegal address, launch failure) makes every later
     * call fail, this one included. */
    return drv.CtxSynchronize() == CUDA_SUCCESS;
}

struct kt_cuda_exec {
    CUmodule mod;
    int n_launches;
    kt_cuda_launch_t launch[KT_RUNNER_MAX_LAUNCHES];
    const char *name[KT_RUNNER_MAX_LAUNCHES]; /* borrowed from the run input */
    CUfunction fn[KT_RUNNER_MAX_LAUNCHES];
    kt_buf_layout_t layout;
    int nargs;
    CUdeviceptr buf[KT_MEASURE_MAX_BUFS + 1];   /* the layout's buffers, then the workspace */
    void *args[KT_MEASURE_MAX_BUFS + 1];        /* &buf[k], as cuLaunchKernel wants */
    CUevent start, stop;
};

void kt_cuda_exec_free(kt_cuda_exec_t *x)
{
    if (!x)
        return;
    /* Failures are ignored: after a sticky error every call fails, and the
     * child is about to be replaced anyway. */
    if (x->start)
        drv.EventDestroy(x->start);
    if (x->stop)
        drv.EventDestroy(x->stop);
    for (int k = 0; k < KT_MEASURE_MAX_BUFS + 1; k++)
        if (x->buf[k])
            drv.MemFree(x->buf[k]);
    if (x->mod)
        drv.ModuleUnload(x->mod);
    free(x);
}

int kt_cuda_exec_new(const kt_run_input_t *in, float *const *bufs, kt_cuda_exec_t **out,
                     char *err, size_t n)
{
    *out = NULL;
    const kt_cuda_launch_t *ls = in->launches ? in->launches : &in->launch;
    int nl = in->launches ? in->n_launches : 1;
    if (nl < 1 || nl > KT_RUNNER_MAX_LAUNCHES) {
        snprintf(err, n, "the candidate has %d kernel launches (allowed 1..%d)", nl,
                 KT_RUNNER_MAX_LAUNCHES);
        return KT_MEASURE_INSTANTIATION_ERROR;
    }
    for (int k = 0; k < nl; k++) {
        const char *name = ls[k].name ? ls[k].name : in->prog.entry;
        if (!name || !*name) {
            snprintf(err, n, "launch %d names no kernel", k);
            return KT_MEASURE_INSTANTIATION_ERROR;
        }
        for (int d = 0; d < 3; d++) {
            if (ls[k].grid[d] < 1 || ls[k].block[d] < 1) {
                snprintf(err, n, "launch %d (%s): grid %ux%ux%u, block %ux%ux%u: every "
                         "dimension must be at least 1", k, name, ls[k].grid[0], ls[k].grid[1],
                         ls[k].grid[2], ls[k].block[0], ls[k].block[1], ls[k].block[2]);
                return KT_MEASURE_INSTANTIATION_ERROR;
            }
        }
        if (ls[k].shared_bytes > INT_MAX) {
            snprintf(err, n, "launch %d (%s): %u bytes of shared memory", k, name,
                     ls[k].shared_bytes);
            return KT_MEASURE_INSTANTIATION_ERROR;
        }
    }
    if (!cu.ctx) {
        snprintf(err, n, "the CUDA device is not open");
        return KT_MEASURE_RUNTIME_DEVICE;
    }

    int rc = 0;
    kt_cuda_exec_t *x = calloc(1, sizeof *x);
    /* The driver parses the image in place: give it aligned, NUL-ended bytes
     * whatever buffer the artifact came in. */
    unsigned char *image = malloc(in->prog.len + 1);
    if (!x || !image) {
        free(x);
        free(image);
        snprintf(err, n, "out of memory");
        return KT_MEASURE_RUNTIME_DEVICE;
    }
    memcpy(image, in->prog.data, in->prog.len);
    image[in->prog.len] = 0;
    x->n_launches = nl;
    x->layout = in->layout;
    CUresult lr = drv.ModuleLoadData(&x->mod, image);
    free(image);
    if (lr != CUDA_SUCCESS) {
        x->mod = NULL;
        cu_fail(lr, err, n, "cuModuleLoadData");
        rc = KT_MEASURE_RUNTIME_DEVICE;
        goto fail;
    }
    for (int k = 0; k < nl; k++) {
        x->launch[k] = ls[k];
        x->name[k] = ls[k].name ? ls[k].name : in->prog.entry;
        CU_GOTO(drv.ModuleGetFunction(&x->fn[k], x->mod, x->name[k]), "cuModuleGetFunction(%s)",
                x->name[k]);
        /* Dynamic shared memory beyond 48 KiB needs an opt-in per kernel. */
        if (ls[k].shared_bytes > 0)
            CU_GOTO(drv.FuncSetAttribute(x->fn[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         (int)ls[k].shared_bytes),
                    "cuFuncSetAttribute(%s, %u bytes of dynamic shared memory)", x->name[k],
                    ls[k].shared_bytes);
    }
    const kt_buf_layout_t *l = &in->layout;
    for (int b = 0; b < l->num_bufs; b++) {
        size_t bytes = sizeof(float) * (size_t)l->num_elems[b];
        CU_GOTO(drv.MemAlloc(&x->buf[b], bytes), "cuMemAlloc(%zu bytes for buffer %d)", bytes, b);
        if (b < l->num_bufs - l->num_outputs)
            CU_GOTO(drv.MemcpyHtoD(x->buf[b], bufs[b], bytes), "cuMemcpyHtoD(buffer %d)", b);
        x->args[x->nargs++] = &x->buf[b];
    }
    if (in->workspace_bytes > 0) {
        int w = l->num_bufs;
        CU_GOTO(drv.MemAlloc(&x->buf[w], in->workspace_bytes), "cuMemAlloc(%zu bytes of workspace)",
                in->workspace_bytes);
        CU_GOTO(drv.MemsetD8(x->buf[w], 0, in->workspace_bytes), "cuMemsetD8(workspace)");
        x->args[x->nargs++] = &x->buf[w];
    }
    CU_GOTO(drv.EventCreate(&x->start, CU_EVENT_DEFAULT), "cuEventCreate");
    CU_GOTO(drv.EventCreate(&x->stop, CU_EVENT_DEFAULT), "cuEventCreate");
    *out = x;
    return 0;
fail:
    kt_cuda_exec_free(x);
    return rc;
}

/* Queue one run: every kernel once, in order, on the default stream. */
static int launch_all(kt_cuda_exec_t *x, char *err, size_t n)
{
    for (int k = 0; k < x->n_launches; k++) {
        const kt_cuda_launch_t *L = &x->launch[k];
        CU_RET(drv.LaunchKernel(x->fn[k], L->grid[0], L->grid[1], L->grid[2], L->block[0],
                                L->block[1], L->block[2], L->shared_bytes, NULL, x->args, NULL),
               "cuLaunchKernel(%s, grid %ux%ux%u, block %ux%ux%u, %u bytes shared)", x->name[k],
               L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2],
               L->shared_bytes);
    }
    return 0;
}

int kt_cuda_exec_checked_run(kt_cuda_exec_t *x, float **bufs, char *err, size_t n)
{
    const kt_buf_layout_t *l = &x->layout;
    int first = l->num_bufs - l->num_outputs;
    /* 0x7FC00000 is a quiet NaN: an element the kernel never writes fails the check. */
    for (int b = first; b < l->num_bufs; b++)
        CU_RET(drv.MemsetD32(x->buf[b], 0x7FC00000u, (size_t)l->num_elems[b]),
               "cuMemsetD32(buffer %d)", b);
    int rc = launch_all(x, err, n);
    if (rc)
        return rc;
    /* Faults inside the kernels surface here. */
    CU_RET(drv.CtxSynchronize(), "running the kernels (cuCtxSynchronize)");
    for (int b = first; b < l->num_bufs; b++)
        CU_RET(drv.MemcpyDtoH(bufs[b], x->buf[b], sizeof(float) * (size_t)l->num_elems[b]),
               "cuMemcpyDtoH(buffer %d)", b);
    return 0;
}

int kt_cuda_exec_timed(kt_cuda_exec_t *x, int number, double *seconds, char *err, size_t n)
{
    float ms = 0;
    int rc;
    if (!cu.l2_flush) {
        CU_RET(drv.EventRecord(x->start, NULL), "cuEventRecord");
        for (int k = 0; k < number; k++)
            if ((rc = launch_all(x, err, n)))
                return rc;
        CU_RET(drv.EventRecord(x->stop, NULL), "cuEventRecord");
        CU_RET(drv.EventSynchronize(x->stop), "running the kernels (cuEventSynchronize)");
        CU_RET(drv.EventElapsedTime(&ms, x->start, x->stop), "cuEventElapsedTime");
        *seconds = ms * 1e-3;
        return 0;
    }
    /* Each run by itself, after an untimed write of the flush buffer. */
    double total = 0;
    for (int k = 0; k < number; k++) {
        CU_RET(drv.MemsetD8(cu.flush_buf, ++cu.flush_value, cu.flush_bytes), "cuMemsetD8(L2 flush)");
        CU_RET(drv.EventRecord(x->start, NULL), "cuEventRecord");
        if ((rc = launch_all(x, err, n)))
            return rc;
        CU_RET(drv.EventRecord(x->stop, NULL), "cuEventRecord");
        CU_RET(drv.EventSynchronize(x->stop), "running the kernels (cuEventSynchronize)");
        CU_RET(drv.EventElapsedTime(&ms, x->start, x->stop), "cuEventElapsedTime");
        total += ms * 1e-3;
    }
    *seconds = total;
    return 0;
}

#else /* !KT_HAVE_CUDA */

int kt_cuda_device_probe(int device, const char *driver_lib, double timeout,
                         kt_hw_params_t *out)
{
    (void)device;
    (void)driver_lib;
    (void)timeout;
    (void)out;
    return kt_err_set(KT_EUNSUP, "cuda runner: built without CUDA (no toolkit at configure time)");
}

#endif
