#include "measure/runner.h"

#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "measure/measure_int.h"
#include "util/err.h"
#include "util/util.h"

/* Upper bound of `number`, so min_repeat_ms cannot overflow it. */
#define MAX_NUMBER (1 << 30)
/* Longest message a child sends with a result. */
#define MAX_CHILD_MSG 4096

struct kt_runner {
    kt_runner_opts_t o;      /* cpu_list not kept: parsed into cpus */
    int pin;
    cpu_set_t cpus;
    uint64_t children;
    int cuda_device;         /* -1: CUDA candidates are refused (see cuda_runner.h) */
    int l2_flush;
    char *driver_lib;
};

/* ---- options --------------------------------------------------------------- */

void kt_runner_opts_default(kt_runner_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->number = 3;
    o->repeat = 1;
    o->min_repeat_ms = 100;
    o->timeout = 10;
    o->check_correctness = 1;
    o->tolerance = KT_RUNNER_DEFAULT_TOLERANCE;
    o->seed = 1;
}

/* "0-3,6" -> set; KT_EINVAL on syntax errors or cores out of range or not
 * this process's. */
static int parse_cpu_list(const char *s, cpu_set_t *set)
{
    if (kt_cpu_list_parse(s, set) < 0)
        return kt_err_prefix("runner");
    cpu_set_t allowed, both;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
        CPU_AND(&both, &allowed, set);
        if (CPU_COUNT(&both) != CPU_COUNT(set))
            return kt_err_set(KT_EINVAL, "runner: cpu list '%s' names cores this process may not use", s);
    }
    return KT_OK;
}

kt_runner_t *kt_runner_new(const kt_runner_opts_t *o)
{
    kt_runner_opts_t d;
    if (!o) {
        kt_runner_opts_default(&d);
        o = &d;
    }
    if (o->number < 0 || o->repeat < 0 || o->min_repeat_ms < 0 || o->cooldown_interval < 0 ||
        o->timeout < 0 || o->num_threads < 0 || o->tolerance < 0) {
        kt_err_set(KT_EINVAL, "runner: options must not be negative");
        return NULL;
    }
    if (o->timer != KT_RUNNER_TIMER_WALL && o->timer != KT_RUNNER_TIMER_CPU) {
        kt_err_set(KT_EINVAL, "runner: unknown timer %d (wall or cpu)", o->timer);
        return NULL;
    }
    if (o->timer == KT_RUNNER_TIMER_CPU && o->num_threads != 1) {
        kt_err_set(KT_EINVAL, "runner: the cpu timer needs num_threads 1 (the CPU time of "
                              "several threads adds up)");
        return NULL;
    }
    kt_runner_t *r = calloc(1, sizeof *r);
    if (!r) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    r->o = *o;
    r->o.cpu_list = NULL;
    r->cuda_device = -1;
    if (r->o.number == 0)
        r->o.number = 3;
    if (r->o.repeat == 0)
        r->o.repeat = 1;
    if (r->o.timeout == 0)
        r->o.timeout = 10;
    if (r->o.tolerance == 0)
        r->o.tolerance = KT_RUNNER_DEFAULT_TOLERANCE;
    if (r->o.enable_cpu_cache_flush) {
        /* Each run must start cold, so a repeat is a single run (as TVM). */
        r->o.number = 1;
        r->o.min_repeat_ms = 0;
    }
    if (o->cpu_list) {
        if (parse_cpu_list(o->cpu_list, &r->cpus) < 0) {
            free(r);
            return NULL;
        }
        r->pin = 1;
    }
    return r;
}

void kt_runner_free(kt_runner_t *r)
{
    if (!r)
        return;
    free(r->driver_lib);
    free(r);
}

int kt_runner_set_cuda(kt_runner_t *r, int device, const char *driver_lib, int l2_flush)
{
    char *lib = kt_strdup(driver_lib);
    if (!lib)
        return KT_ENOMEM;
    free(r->driver_lib);
    r->driver_lib = lib;
    r->cuda_device = device;
    r->l2_flush = l2_flush;
    return KT_OK;
}

uint64_t kt_runner_children_started(const kt_runner_t *r)
{
    return r->children;
}

/* ---- protocol ------------------------------------------------------------------ */

/* MSG_RETIRE: the child is done (its CUDA context was lost); a fresh child
 * continues with candidate idx. */
enum { MSG_PHASE = 1, MSG_RESULT = 2, MSG_RETIRE = 3 };
enum { PH_NONE = 0, PH_LOAD, PH_REF, PH_RUN };

typedef struct {
    uint32_t type;
    int32_t idx;
    int32_t phase;
    int32_t error_no;
    int32_t number;
    int32_t n_costs;
    uint32_t msg_len;
    uint32_t pad;
    double max_error;
} msg_hdr_t;

/* What the child knows of the batch (it inherits this through fork). */
typedef struct {
    const kt_runner_t *r;
    const kt_run_input_t *in;
    int n;
    const uint64_t *prog_hash, *ref_hash;
    const uint64_t *bad_refs;    /* references that already failed in this batch */
    int n_bad_refs;
    int fd;
} batch_t;

/* ---- child: loading and data --------------------------------------------------- */

static void child_send(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t w = send(fd, c, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3); /* the parent is gone or gave up on us */
        c += w;
        len -= (size_t)w;
    }
}

static void child_phase(const batch_t *bt, int idx, int phase)
{
    msg_hdr_t h = {.type = MSG_PHASE, .idx = idx, .phase = phase};
    child_send(bt->fd, &h, sizeof h);
}

typedef struct {
    int error_no;
    int number;
    int n_costs;
    double *costs;
    double max_error;
    char msg[MAX_CHILD_MSG];
    int retire;      /* the child must be replaced after this result (not sent) */
} child_result_t;

static void child_result(const batch_t *bt, int idx, const child_result_t *cr)
{
    msg_hdr_t h = {.type = MSG_RESULT, .idx = idx, .error_no = cr->error_no,
                   .number = cr->number, .n_costs = cr->n_costs, .max_error = cr->max_error};
    h.msg_len = cr->error_no ? (uint32_t)strlen(cr->msg) : 0;
    child_send(bt->fd, &h, sizeof h);
    if (h.n_costs > 0)
        child_send(bt->fd, cr->costs, sizeof(double) * (size_t)h.n_costs);
    if (h.msg_len)
        child_send(bt->fd, cr->msg, h.msg_len);
}

typedef int (*kernel_fn)(float **);
/* <entry>_pack of a generated kernel (codegen.h): 1 when the packed variant
 * takes buffer i re-laid out (and then src permuted into dst). */
typedef int (*pack_fn)(int i, const float *src, float *dst);

/* Load an artifact and find its entry. The handle and the memfd stay open
 * until the child exits: closing them could let a later /proc/self/fd/N name
 * match an already loaded object in the dynamic loader, and the kernel's
 * OpenMP runtime may still have threads running its code. */
static kernel_fn child_load(const kt_artifact_t *a, void **handle, char *err, size_t errlen)
{
    char path[64];
    int fd = memfd_create("kt-artifact", MFD_CLOEXEC);
    char tmpl[256] = "";
    if (fd < 0) {
        const char *td = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/kt-artifact-XXXXXX", td && *td ? td : "/tmp");
        fd = mkstemp(tmpl);
        if (fd < 0) {
            snprintf(err, errlen, "cannot make a file for the artifact: %s", strerror(errno));
            return NULL;
        }
    }
    if (kt_fd_write_all(fd, a->data, a->len) != 0) {
        snprintf(err, errlen, "cannot write the artifact: %s", strerror(errno));
        if (*tmpl)
            unlink(tmpl);
        return NULL;
    }
    if (*tmpl)
        snprintf(path, sizeof path, "%s", tmpl);
    else
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    void *h = dlopen(*tmpl ? tmpl : path, RTLD_NOW | RTLD_LOCAL);
    if (*tmpl)
        unlink(tmpl);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, errlen, "cannot load the artifact: %s", e ? e : "dlopen failed");
        return NULL;
    }
    *handle = h;
    kernel_fn fn;
    *(void **)&fn = dlsym(h, a->entry);
    if (!fn)
        snprintf(err, errlen, "the artifact has no function '%s'", a->entry);
    return fn;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t input_seed(uint64_t seed, const kt_buf_layout_t *l)
{
    int64_t words[2 + 2 + KT_MEASURE_MAX_BUFS];
    words[0] = (int64_t)seed;
    words[1] = (int64_t)(seed >> 32);
    words[2] = l->num_bufs;
    words[3] = l->num_outputs;
    for (int i = 0; i < l->num_bufs; i++)
        words[4 + i] = l->num_elems[i];
    return kt_hash64(words, sizeof(int64_t) * (size_t)(4 + l->num_bufs));
}

static void fill_input(float *buf, int64_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (int64_t k = 0; k < n; k++) {
        uint64_t x = splitmix64(&s);
        /* 24 bits of magnitude in [0.25, 1], one bit of sign: never zero. */
        float mag = 0.25f + 0.75f * (float)(x >> 40) / (float)(1u << 24);
        buf[k] = (x & 1) ? -mag : mag;
    }
}

static void poison_outputs(float **bufs, const kt_buf_layout_t *l)
{
    for (int b = l->num_bufs - l->num_outputs; b < l->num_bufs; b++)
        for (int64_t k = 0; k < l->num_elems[b]; k++)
            bufs[b][k] = NAN;
}

typedef struct ref_out {
    uint64_t ref_hash, seed;
    float **outs;                /* num_outputs copies */
    int n_outs;
    struct ref_out *next;
} ref_out_t;

static ref_out_t *ref_cache;     /* the child's; it lives as long as the child */

static ref_out_t *ref_lookup(uint64_t hash, uint64_t seed)
{
    for (ref_out_t *e = ref_cache; e; e = e->next)
        if (e->ref_hash == hash && e->seed == seed)
            return e;
    return NULL;
}

static double compare_outputs(float **bufs, const kt_buf_layout_t *l, const ref_out_t *ref,
                              int *worst_buf, int64_t *worst_k)
{
    double worst = -1;
    *worst_buf = -1;
    *worst_k = -1;
    int first = l->num_bufs - l->num_outputs;
    for (int o = 0; o < l->num_outputs; o++) {
        const float *a = bufs[first + o], *b = ref->outs[o];
        int64_t n = l->num_elems[first + o];
        /* The same metric as the codegen checker (codegen/verify.h): an
         * element is judged against the larger of its own magnitude and the
         * tensor's rms, so float reassociation in long reductions, which
         * cancels to near zero in some elements, is not a wrong answer. */
        double ss = 0;
        int64_t nf = 0;
        for (int64_t k = 0; k < n; k++)
            if (isfinite(b[k])) {
                ss += (double)b[k] * b[k];
                nf++;
            }
        double scale = nf ? sqrt(ss / (double)nf) : 0;
        if (scale < FLT_MIN)
            scale = FLT_MIN;
        for (int64_t k = 0; k < n; k++) {
            double e;
            if (!isfinite(a[k]) || !isfinite(b[k])) {
                int same = (isnan(a[k]) && isnan(b[k])) || a[k] == b[k];
                e = same ? 0 : INFINITY;
            } else {
                double den = fabs(b[k]) > scale ? fabs(b[k]) : scale;
                e = fabs((double)a[k] - (double)b[k]) / den;
            }
            if (e > worst) {
                worst = e;
                *worst_buf = first + o;
                *worst_k = k;
            }
        }
    }
    return worst;
}

/* Write a buffer bigger than the last-level cache so the next run starts cold. */
static void flush_cache(void)
{
    static unsigned char *buf;
    static size_t len;
    if (!buf) {
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (llc <= 0)
            llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
        len = llc > 0 ? (size_t)llc * 2 : (size_t)64 << 20;
        if (len < ((size_t)8 << 20))
            len = (size_t)8 << 20;
        if (len > ((size_t)512 << 20))
            len = (size_t)512 << 20;
        buf = malloc(len);
        if (!buf)
            return;
    }
    static unsigned char v;
    v++;
    memset(buf, v, len);
    /* Keep the compiler from dropping the stores. */
    __asm__ __volatile__("" : : "r"(buf) : "memory");
}

/* Evict the layout's weight buffers of bufs from every cache level. */
static void flush_weights(float **bufs, const kt_buf_layout_t *l)
{
#if defined(__x86_64__) || defined(__i386__)
    for (int b = 0; b < l->num_bufs; b++) {
        if (!(l->weights >> b & 1u))
            continue;
        const char *p = (const char *)bufs[b];
        size_t bytes = sizeof(float) * (size_t)l->num_elems[b];
        for (size_t k = 0; k < bytes; k += 64)
            __asm__ __volatile__("clflush %0" : : "m"(*(const volatile char *)(p + k)));
    }
    __asm__ __volatile__("mfence" ::: "memory");
#else
    (void)bufs;
    (void)l;
    flush_cache();
#endif
}

int kt_runner_timer_parse(const char *name)
{
    if (name && strcmp(name, "wall") == 0)
        return KT_RUNNER_TIMER_WALL;
    if (name && strcmp(name, "cpu") == 0)
        return KT_RUNNER_TIMER_CPU;
    return -1;
}

/* The clock runs are timed with (set in the child from the options). */
static clockid_t run_clock = CLOCK_MONOTONIC;

static double run_time(void)
{
    struct timespec ts;
    clock_gettime(run_clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- child: one candidate --------------------------------------------------------- */

static int is_bad_ref(const batch_t *bt, uint64_t h)
{
    for (int k = 0; k < bt->n_bad_refs; k++)
        if (bt->bad_refs[k] == h)
            return 1;
    return 0;
}

/* How the child runs a loaded candidate: a CPU function or CUDA kernels. */
typedef struct {
    kernel_fn fn;
    kt_cuda_exec_t *cu;
} exec_t;

/* The packed variant of a CPU candidate, when its artifact exports
 * <entry>_packed and <entry>_pack: pbufs are the buffers it runs on (the
 * weights it takes re-laid out, once, into `owned`; the other slots alias
 * bufs). 0 with *packed NULL when there is none; an error code with a
 * message in err. */
static int load_packed(void *h, const kt_artifact_t *a, const kt_buf_layout_t *l, float **bufs,
                       kernel_fn *packed, float **pbufs, float **owned, int *npacked, char *err,
                       size_t n)
{
    char name[512];
    pack_fn pack;
    *packed = NULL;
    *npacked = 0;
    snprintf(name, sizeof name, "%s_packed", a->entry);
    *(void **)packed = dlsym(h, name);
    snprintf(name, sizeof name, "%s_pack", a->entry);
    *(void **)&pack = dlsym(h, name);
    if (!*packed || !pack) {
        *packed = NULL;
        return 0;
    }
    for (int b = 0; b < l->num_bufs; b++) {
        pbufs[b] = bufs[b];
        if (b >= l->num_bufs - l->num_outputs || pack(b, NULL, NULL) != 1)
            continue;
        size_t bytes = sizeof(float) * (size_t)l->num_elems[b];
        owned[b] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!owned[b]) {
            snprintf(err, n, "cannot allocate %zu bytes for packed buffer %d", bytes, b);
            return KT_MEASURE_RUNTIME_DEVICE;
        }
        pack(b, bufs[b], owned[b]);
        pbufs[b] = owned[b];
        (*npacked)++;
    }
    return 0;
}

/* One run whose outputs land in bufs (filled with NaN first). 0, or an
 * error code with a message in err. */
static int exec_checked(exec_t *x, float **bufs, const kt_buf_layout_t *l, char *err, size_t n)
{
#if KT_HAVE_CUDA
    if (x->cu)
        return kt_cuda_exec_checked_run(x->cu, bufs, err, n);
#endif
    poison_outputs(bufs, l);
    int rc = x->fn(bufs);
    if (rc != 0) {
        snprintf(err, n, "the kernel returned %d", rc);
        return KT_MEASURE_RUNTIME_DEVICE;
    }
    return 0;
}

/* What exec_timed evicts before each run. */
enum { FLUSH_NONE, FLUSH_ALL, FLUSH_WEIGHTS };

/* `number` runs; *dur = their time in seconds (cache flushes not counted). */
static int exec_timed(exec_t *x, float **bufs, const kt_buf_layout_t *l, int number, int flush,
                      double *dur, char *err, size_t n)
{
#if KT_HAVE_CUDA
    if (x->cu)
        return kt_cuda_exec_timed(x->cu, number, dur, err, n);
#endif
    int rc = 0;
    *dur = 0;
    if (flush != FLUSH_NONE) {
        for (int k = 0; k < number && rc == 0; k++) {
            if (flush == FLUSH_ALL)
                flush_cache();
            else
                flush_weights(bufs, l);
            double t0 = run_time();
            rc = x->fn(bufs);
            *dur += run_time() - t0;
        }
    } else {
        double t0 = run_time();
        for (int k = 0; k < number && rc == 0; k++)
            rc = x->fn(bufs);
        *dur = run_time() - t0;
    }
    if (rc != 0) {
        snprintf(err, n, "the kernel returned %d", rc);
        return KT_MEASURE_RUNTIME_DEVICE;
    }
    return 0;
}

#define CR_FAIL(code, ...)                                          \
    do {                                                            \
        cr->error_no = (code);                                      \
        snprintf(cr->msg, sizeof cr->msg, __VA_ARGS__);             \
        goto done;                                                  \
    } while (0)

static void child_measure(const batch_t *bt, int i, child_result_t *cr)
{
    const kt_runner_opts_t *o = &bt->r->o;
    const kt_run_input_t *in = &bt->in[i];
    const kt_buf_layout_t *l = &in->layout;
    float *bufs[KT_MEASURE_MAX_BUFS] = {0};
    float *pbufs[KT_MEASURE_MAX_BUFS] = {0}, *owned[KT_MEASURE_MAX_BUFS] = {0};
    kernel_fn packed = NULL;   /* the packed variant, timed when the artifact has one */
    int npacked = 0;
    char err[1024];
    void *h = NULL;
    int cuda = in->target == KT_MEASURE_TARGET_CUDA;
    exec_t x = {0};
    int rc;

    memset(cr, 0, sizeof *cr);
    cr->max_error = -1;
    child_phase(bt, i, PH_LOAD);
    if (!in->prog.data || in->prog.len == 0)
        CR_FAIL(KT_MEASURE_INSTANTIATION_ERROR, "the candidate has no artifact");
    /* A CUDA candidate may name its kernels in its launches instead. */
    if (!cuda && (!in->prog.entry || !*in->prog.entry))
        CR_FAIL(KT_MEASURE_INSTANTIATION_ERROR, "the candidate has no entry name");
    if (kt_buf_layout_check(l) < 0)
        CR_FAIL(KT_MEASURE_INSTANTIATION_ERROR, "%s", kt_err_msg());

    for (int b = 0; b < l->num_bufs; b++) {
        size_t bytes = sizeof(float) * (size_t)l->num_elems[b];
        bufs[b] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!bufs[b])
            CR_FAIL(KT_MEASURE_RUNTIME_DEVICE, "cannot allocate %zu bytes for buffer %d", bytes, b);
    }
    uint64_t seed = input_seed(o->seed, l);
    for (int b = 0; b < l->num_bufs - l->num_outputs; b++)
        fill_input(bufs[b], l->num_elems[b], seed + (uint64_t)b);

    if (cuda) {
#if KT_HAVE_CUDA
        rc = kt_cuda_child_open(bt->r->cuda_device, bt->r->driver_lib, bt->r->l2_flush, err,
                                sizeof err);
        if (rc == 0)
            rc = kt_cuda_exec_new(in, bufs, &x.cu, err, sizeof err);
        if (rc != 0)
            CR_FAIL(rc, "%s", err);
#else
        CR_FAIL(KT_MEASURE_RUNTIME_DEVICE, "built without CUDA");
#endif
    } else {
        x.fn = child_load(&in->prog, &h, err, sizeof err);
        if (!x.fn)
            CR_FAIL(KT_MEASURE_RUNTIME_DEVICE, "%s", err);
        rc = load_packed(h, &in->prog, l, bufs, &packed, pbufs, owned, &npacked, err,
                         sizeof err);
        if (rc != 0)
            CR_FAIL(rc, "%s", err);
        if (o->num_threads > 0 && h) {
            void (*set_threads)(int);
            *(void **)&set_threads = dlsym(h, "omp_set_num_threads");
            if (set_threads)
                set_threads(o->num_threads);
        }
    }

    const ref_out_t *ref = NULL;
    if (o->check_correctness && in->ref.data) {
        uint64_t rh = bt->ref_hash[i];
        ref = ref_lookup(rh, seed);
        if (!ref) {
            if (is_bad_ref(bt, rh))
                CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "the reference kernel failed earlier in this batch");
            if (!in->ref.entry || !*in->ref.entry)
                CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "the reference has no entry name");
            child_phase(bt, i, PH_REF);
            void *rhandle = NULL;
            kernel_fn rfn = child_load(&in->ref, &rhandle, err, sizeof err);
            if (!rfn)
                CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "reference kernel: %s", err);
            poison_outputs(bufs, l);
            rc = rfn(bufs);
            if (rc != 0)
                CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "the reference kernel returned %d", rc);
            ref_out_t *e = calloc(1, sizeof *e);
            float **outs = e ? calloc((size_t)l->num_outputs, sizeof *outs) : NULL;
            if (!outs) {
                free(e);
                CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "out of memory for the reference outputs");
            }
            e->outs = outs;
            e->n_outs = l->num_outputs;
            e->ref_hash = rh;
            e->seed = seed;
            for (int k = 0; k < l->num_outputs; k++) {
                int b = l->num_bufs - l->num_outputs + k;
                size_t bytes = sizeof(float) * (size_t)l->num_elems[b];
                outs[k] = malloc(bytes);
                if (!outs[k])
                    CR_FAIL(KT_MEASURE_UNKNOWN_ERROR, "out of memory for the reference outputs");
                memcpy(outs[k], bufs[b], bytes);
            }
            e->next = ref_cache;
            ref_cache = e;
            ref = e;
        }
    }

    child_phase(bt, i, PH_RUN);
    /* Warm-up: untimed, and the run whose outputs are checked. With weights
     * packed, the entry taking them in their original layout is checked
     * first (it runs once), then the packed variant, which is timed. */
    for (int variant = packed && (npacked > 0 && ref) ? 0 : 1; variant < 2; variant++) {
        float **vb = variant == 1 && packed ? pbufs : bufs;
        if (variant == 1 && packed)
            x.fn = packed;
        rc = exec_checked(&x, vb, l, err, sizeof err);
        if (rc != 0)
            CR_FAIL(rc, "%s%s", variant == 0 ? "the entry taking weights unpacked: " : "", err);
        if (ref) {
            int wb;
            int64_t wk;
            double e = compare_outputs(bufs, l, ref, &wb, &wk);
            cr->max_error = e > cr->max_error ? e : cr->max_error;
            if (!(e <= o->tolerance)) {
                int oi = wb - (l->num_bufs - l->num_outputs);
                CR_FAIL(KT_MEASURE_WRONG_ANSWER,
                        "%smax relative error %.3g > tolerance %.3g (buffer %d element %lld: got "
                        "%.9g, expected %.9g)",
                        npacked == 0 ? ""
                        : variant == 0 ? "weights unpacked: " : "weights packed: ",
                        e, o->tolerance, wb, (long long)wk, (double)bufs[wb][wk],
                        (double)ref->outs[oi][wk]);
            }
        }
    }
    float **tb = packed ? pbufs : bufs;   /* what is timed */

    run_clock = o->timer == KT_RUNNER_TIMER_CPU ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    cr->costs = calloc((size_t)o->repeat, sizeof *cr->costs);
    if (!cr->costs)
        CR_FAIL(KT_MEASURE_RUNTIME_DEVICE, "out of memory for %d costs", o->repeat);
    int number = o->number;
    int min_repeat_ms = o->min_repeat_ms;
    int flush = o->enable_cpu_cache_flush ? FLUSH_ALL : FLUSH_NONE;
    if (!flush && o->flush_weights && l->weights && !cuda) {
        /* A run after an eviction is single; a kernel without weights
         * (pooling, softmax) keeps the warm repeats that time it well. */
        flush = FLUSH_WEIGHTS;
        number = 1;
        min_repeat_ms = 0;
    }
    for (int rep = 0; rep < o->repeat; rep++) {
        if (rep > 0 && o->cooldown_interval > 0) {
            double s = o->cooldown_interval;
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
        double dur;
        for (;;) {
            rc = exec_timed(&x, tb, l, number, flush, &dur, err, sizeof err);
            if (rc != 0)
                CR_FAIL(rc, "%s", err);
            if (dur * 1e3 >= (double)min_repeat_ms || number >= MAX_NUMBER)
                break;
            /* As TVM's time evaluator: aim straight at min_repeat_ms from the
             * measured per-run time, but grow by at least the golden ratio. */
            double per_run_ms = dur * 1e3 / number;
            double want = per_run_ms > 0 ? (double)min_repeat_ms / per_run_ms + 1 : 0;
            double grown = (double)number * 1.618;
            double next = want > grown ? want : grown;
            number = next >= (double)MAX_NUMBER ? MAX_NUMBER : (int)next;
        }
        cr->costs[rep] = dur / number;
    }
    cr->n_costs = o->repeat;
    cr->number = number;
    cr->error_no = KT_MEASURE_NO_ERROR;
done:
#if KT_HAVE_CUDA
    kt_cuda_exec_free(x.cu);
    /* After a sticky error the context is lost for every later candidate. */
    if (cuda && cr->error_no != KT_MEASURE_NO_ERROR && !kt_cuda_child_usable())
        cr->retire = 1;
#endif
    for (int b = 0; b < KT_MEASURE_MAX_BUFS; b++) {
        free(bufs[b]);
        free(owned[b]);
    }
}

static void child_main(const batch_t *bt, int start)
{
    const kt_runner_t *r = bt->r;
    /* Crashes must kill this process with their signal (the parent reports
     * it), whatever handlers the caller installed. */
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS,
                               SIGPIPE, SIGTERM, SIGINT, SIGXCPU};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (size_t k = 0; k < KT_ARRAY_LEN(sigs); k++)
        sigaction(sigs[k], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    char setup_err[256] = "";
    if (r->o.num_threads > 0) {
        char nt[32];
        snprintf(nt, sizeof nt, "%d", r->o.num_threads);
        setenv("OMP_NUM_THREADS", nt, 1);
    }
    if (r->pin && sched_setaffinity(0, sizeof r->cpus, &r->cpus) != 0)
        snprintf(setup_err, sizeof setup_err, "cannot pin the runner to its cores: %s",
                 strerror(errno));

    child_result_t cr;
    for (int i = start; i < bt->n; i++) {
        if (*setup_err) {
            memset(&cr, 0, sizeof cr);
            cr.error_no = KT_MEASURE_UNKNOWN_ERROR;
            cr.max_error = -1;
            snprintf(cr.msg, sizeof cr.msg, "%s", setup_err);
            child_phase(bt, i, PH_LOAD);
        } else {
            child_measure(bt, i, &cr);
        }
        child_result(bt, i, &cr);
        free(cr.costs);
        if (cr.retire) {
            msg_hdr_t h = {.type = MSG_RETIRE, .idx = i + 1};
            child_send(bt->fd, &h, sizeof h);
            return;
        }
    }
}

/* ---- parent ------------------------------------------------------------------------ */

/* The parent's view of one child. */
typedef struct {
    pid_t pid;
    int fd;
    int reaped;      /* status holds its wait status (-1: unknowable) */
    int status;
} child_t;

/* Has the child ended? Reaps it when it has, after killing what is left
 * of its process group (helpers a kernel forked), so the group id cannot
 * have been recycled when it is signalled. */
static int child_ended(child_t *c)
{
    if (c->reaped)
        return 1;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
        if (si.si_pid != c->pid)
            return 0;
        kill(-c->pid, SIGKILL);
        while (waitpid(c->pid, &c->status, 0) < 0) {
            if (errno != EINTR) {
                c->status = -1;
                break;
            }
        }
        c->reaped = 1;
    } else if (errno == ECHILD) {
        /* SIGCHLD ignored by the caller: the kernel reaps, the status is lost. */
        if (kill(c->pid, 0) < 0 && errno == ESRCH) {
            c->reaped = 1;
            c->status = -1;
        }
    }
    return c->reaped;
}

/* Read exactly len bytes before the deadline: 0, -1 when the child is gone
 * (EOF, or it died while something it started keeps the socket open), -2 on
 * timeout. */
static int read_full(child_t *c, void *p, size_t len, double deadline)
{
    char *buf = p;
    while (len > 0) {
        double left = deadline - kt_time_mono();
        if (left <= 0)
            return -2;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        /* Wake up every 50 ms to see whether the child is still alive. */
        int ms = left < 0.05 ? (int)(left * 1e3) + 1 : 50;
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -1;
        if (pr == 0) {
            if (child_ended(c) && poll(&pfd, 1, 0) == 0)
                return -1;
            continue;
        }
        ssize_t got = read(c->fd, buf, len);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0)
            return -1;
        buf += got;
        len -= (size_t)got;
    }
    return 0;
}

/* Reap the child, waiting up to `grace` seconds before killing its process
 * group. Returns the wait status, or -1 when it is unknowable. */
static int reap(child_t *c, double grace)
{
    double until = kt_time_mono() + grace;
    while (!child_ended(c)) {
        if (kt_time_mono() >= until) {
            kill(-c->pid, SIGKILL);
            kill(c->pid, SIGKILL);
            int st;
            pid_t w;
            while ((w = waitpid(c->pid, &st, 0)) < 0 && errno == EINTR)
                ;
            c->reaped = 1;
            c->status = w == c->pid ? st : -1;
            break;
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return c->status;
}

static void describe_death(int status, char *buf, size_t n)
{
    if (status == -1)
        snprintf(buf, n, "the measuring process ended unexpectedly");
    else if (WIFSIGNALED(status)) {
        char sig[128];
        kt_measure_signal_text(WTERMSIG(status), sig, sizeof sig);
        snprintf(buf, n, "the measuring process was killed by %s", sig);
    } else if (WIFEXITED(status))
        snprintf(buf, n, "the measuring process exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, n, "the measuring process ended unexpectedly");
}

static pid_t spawn_child(kt_runner_t *r, batch_t *bt, int start, int *fd_out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        kt_err_set(KT_EIO, "runner: socketpair: %s", strerror(errno));
        return -1;
    }
    /* Unflushed stdio would otherwise be written twice if a kernel calls exit(). */
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        kt_err_set(KT_EIO, "runner: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(2);
        bt->fd = sv[1];
        child_main(bt, start);
        _exit(0);
    }
    setpgid(pid, pid); /* also here, so a kill of the group cannot race the child's own call */
    close(sv[1]);
    r->children++;
    *fd_out = sv[0];
    return pid;
}

static int fill_from_child(kt_measure_result_t *res, const msg_hdr_t *h, const double *costs,
                           const char *msg)
{
    if (h->error_no != KT_MEASURE_NO_ERROR) {
        int rc = kt_measure_result_set_error(res, h->error_no, "%s", msg);
        res->max_error = h->max_error;
        return rc;
    }
    kt_measure_result_clear(res);
    res->costs = malloc(sizeof *res->costs * (size_t)h->n_costs);
    if (!res->costs)
        return kt_err_set(KT_ENOMEM, "out of memory");
    double sum = 0;
    for (int k = 0; k < h->n_costs; k++) {
        res->costs[k] = costs[k];
        sum += costs[k];
    }
    res->n_costs = h->n_costs;
    res->mean = sum / h->n_costs;
    res->number = h->number;
    res->error_no = KT_MEASURE_NO_ERROR;
    res->max_error = h->max_error;
    return KT_OK;
}

int kt_runner_run(kt_runner_t *r, const kt_run_input_t *in, int n, kt_measure_result_t *out)
{
    if (!r || n < 0 || (n > 0 && (!in || !out)))
        return kt_err_set(KT_EINVAL, "runner: bad arguments");
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (in[i].target == KT_MEASURE_TARGET_CUDA && r->cuda_device < 0)
            return kt_err_set(KT_EUNSUP, "runner: candidate %d targets CUDA, but this runner has "
                              "no CUDA device (make one with kt_cuda_runner_new)", i);
        if (in[i].target != KT_MEASURE_TARGET_CPU && in[i].target != KT_MEASURE_TARGET_CUDA)
            return kt_err_set(KT_EUNSUP, "runner: candidate %d: unknown target %d", i,
                              (int)in[i].target);
    }
    if (n == 0)
        return KT_OK;

    uint64_t *hashes = calloc((size_t)n * 3, sizeof *hashes);
    double *costs = calloc((size_t)r->o.repeat, sizeof *costs);
    char *msg = malloc(MAX_CHILD_MSG + 1);
    if (!hashes || !costs || !msg) {
        free(hashes);
        free(costs);
        free(msg);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    batch_t bt = {.r = r, .in = in, .n = n, .prog_hash = hashes, .ref_hash = hashes + n,
                  .bad_refs = hashes + 2 * (size_t)n, .n_bad_refs = 0, .fd = -1};
    uint64_t *bad_refs = hashes + 2 * (size_t)n;
    for (int i = 0; i < n; i++) {
        const kt_artifact_t *p = &in[i].prog, *f = &in[i].ref;
        hashes[i] = p->hash ? p->hash : (p->data ? kt_hash64(p->data, p->len) : 0);
        hashes[n + i] = f->hash ? f->hash : (f->data ? kt_hash64(f->data, f->len) : 0);
    }

    int rc = KT_OK;
    int next = 0;
    while (next < n && rc == KT_OK) {
        child_t ch = {0};
        ch.pid = spawn_child(r, &bt, next, &ch.fd);
        if (ch.pid < 0) {
            rc = kt_err_code();
            break;
        }
        int cur = next, phase = PH_NONE;
        double t_start = kt_time_mono();
        double deadline = t_start + r->o.timeout;
        int failed = 0; /* 1: child died, 2: timed out, 3: protocol broken */
        while (cur < n) {
            msg_hdr_t h;
            int got = read_full(&ch, &h, sizeof h, deadline);
            if (got == 0 && (h.idx != cur || (h.type != MSG_PHASE && h.type != MSG_RESULT &&
                                              h.type != MSG_RETIRE)))
                got = -3;
            if (got == 0 && h.type == MSG_RETIRE)
                break; /* a fresh child goes on with cur */
            if (got == 0 && h.type == MSG_PHASE) {
                if (h.phase == PH_LOAD) {
                    t_start = kt_time_mono();
                    deadline = t_start + r->o.timeout;
                }
                phase = h.phase;
                continue;
            }
            if (got == 0) {
                if (h.n_costs < 0 || h.n_costs > r->o.repeat || h.msg_len > MAX_CHILD_MSG ||
                    (h.error_no == 0 && h.n_costs < 1) || h.error_no < 0 ||
                    h.error_no >= KT_MEASURE_NUM_ERRORS)
                    got = -3;
            }
            if (got == 0 && h.n_costs > 0)
                got = read_full(&ch, costs, sizeof(double) * (size_t)h.n_costs, deadline);
            if (got == 0 && h.msg_len > 0)
                got = read_full(&ch, msg, h.msg_len, deadline);
            if (got < 0) {
                failed = got == -2 ? 2 : got == -3 ? 3 : 1;
                break;
            }
            msg[h.msg_len] = '\0';
            if (fill_from_child(&out[cur], &h, costs, msg) < 0) {
                rc = KT_ENOMEM;
                break;
            }
            double now = kt_time_mono();
            out[cur].all_cost = now - t_start;
            out[cur].timestamp = kt_time_wall();
            cur++;
            phase = PH_NONE;
            t_start = now;
            deadline = now + r->o.timeout;
        }
        close(ch.fd);
        if (!failed) {
            /* Done (or out of memory): the child exits by itself. */
            reap(&ch, 1.0);
            next = cur;
            continue;
        }
        char why[512];
        int status;
        if (failed == 2) {
            kill(-ch.pid, SIGKILL);
            status = reap(&ch, 0);
        } else {
            status = reap(&ch, 1.0);
        }
        kt_measure_result_t *res = &out[cur];
        double spent = kt_time_mono() - t_start;
        int is_ref = phase == PH_REF;
        if (failed == 2)
            snprintf(why, sizeof why, "the %s exceeded the run timeout of %.3g s and was killed",
                     is_ref ? "reference kernel" : "run", r->o.timeout);
        else if (failed == 3)
            snprintf(why, sizeof why, "the measuring process sent a malformed message "
                     "(the kernel may have corrupted memory)");
        else
            describe_death(status, why, sizeof why);
        int code = is_ref ? KT_MEASURE_UNKNOWN_ERROR
                   : failed == 2 ? KT_MEASURE_RUN_TIMEOUT : KT_MEASURE_RUNTIME_DEVICE;
        const char *where = is_ref ? "reference kernel: " : phase == PH_LOAD ? "while loading: " : "";
        if (kt_measure_result_set_error(res, code, "%s%s", where, why) < 0) {
            rc = KT_ENOMEM;
            break;
        }
        res->all_cost = spent;
        res->timestamp = kt_time_wall();
        if (is_ref && bt.n_bad_refs < n)
            bad_refs[bt.n_bad_refs++] = bt.ref_hash[cur];
        next = cur + 1;
    }
    free(hashes);
    free(costs);
    free(msg);
    if (rc < 0) {
        for (int i = 0; i < n; i++)
            kt_measure_result_clear(&out[i]);
        if (rc == KT_ENOMEM)
            kt_err_set(KT_ENOMEM, "runner: out of memory");
    }
    return rc;
}
