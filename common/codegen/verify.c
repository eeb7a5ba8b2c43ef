/* Compile, load, run and compare generated kernels (see verify.h). */
#include "verify.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "util/err.h"
#include "util/util.h"

extern char **environ;

/* ---- temp directories ---------------------------------------------------- */

static int make_tmpdir(char *out, size_t cap)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(out, cap, "%s/ktune-cc-XXXXXX", base);
    if (!mkdtemp(out))
        return kt_err_set(KT_EIO, "cannot create a temp directory under %s: %s", base,
                          strerror(errno));
    return KT_OK;
}

/* ---- compile --------------------------------------------------------------- */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Wait for pid up to timeout seconds; kills it on timeout. Returns 0 with
 * *status, or KT_ETIMEOUT / KT_EIO. */
static int wait_child(pid_t pid, double timeout, int *status)
{
    double start = kt_time_mono(), nap = 0.0005;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return KT_OK;
        if (r < 0 && errno != EINTR)
            return kt_err_set(KT_EIO, "waitpid: %s", strerror(errno));
        if (kt_time_mono() - start > timeout) {
            kill(pid, SIGKILL);
            while (waitpid(pid, status, 0) < 0 && errno == EINTR)
                ;
            return kt_err_set(KT_ETIMEOUT, "timed out after %.0f s", timeout);
        }
        sleep_s(nap);
        if (nap < 0.02)
            nap *= 2;
    }
}

int kt_codegen_compile(const char *src, const char *out_so_path, char **log)
{
    return kt_codegen_compile_flags(src, out_so_path, NULL, log);
}

int kt_codegen_compile_flags(const char *src, const char *out_so_path, const char *cflags,
                             char **log)
{
    if (log)
        *log = NULL;
    if (!src)
        return kt_err_set(KT_EINVAL, "compile: no source or output path");
    kt_codegen_file_t f = {.name = "kernel.c", .text = src, .include = 0};
    return kt_codegen_compile_files("KT_CC", "cc", &f, 1, cflags ? cflags : KT_CODEGEN_CFLAGS,
                                    out_so_path, log);
}

int kt_codegen_compile_files(const char *cc_env, const char *cc_default,
                             const kt_codegen_file_t *files, int nfiles, const char *cflags,
                             const char *out_so_path, char **log)
{
    if (log)
        *log = NULL;
    if (!files || nfiles < 1 || nfiles > 4 || !cflags || !out_so_path || !cc_default)
        return kt_err_set(KT_EINVAL, "compile: no files, flags or output path");
    char dir[512], paths[4][600] = {{0}}, lpath[600];
    int rc = make_tmpdir(dir, sizeof(dir));
    if (rc)
        return rc;
    snprintf(lpath, sizeof(lpath), "%s/cc.log", dir);
    int written = 0;
    for (; rc == KT_OK && written < nfiles; written++) {
        if (!files[written].name || !files[written].text || strchr(files[written].name, '/'))
            rc = kt_err_set(KT_EINVAL, "compile: file %d has no name or text", written);
        else {
            snprintf(paths[written], sizeof(paths[written]), "%s/%s", dir, files[written].name);
            rc = kt_file_write(paths[written], files[written].text, strlen(files[written].text));
        }
    }
    if (rc == KT_OK) {
        const char *cc = cc_env ? getenv(cc_env) : NULL;
        if (!cc || !*cc)
            cc = cc_default;
        char flags[512];
        snprintf(flags, sizeof(flags), "%s", cflags);
        char *argv[40];
        int argc = 0;
        argv[argc++] = (char *)cc;
        char *save = NULL;
        for (char *tok = strtok_r(flags, " ", &save); tok && argc < 24;
             tok = strtok_r(NULL, " ", &save))
            argv[argc++] = tok;
        argv[argc++] = "-o";
        argv[argc++] = (char *)out_so_path;
        /* headers first: -include applies to the sources named after it */
        for (int i = 0; i < nfiles; i++)
            if (files[i].include) {
                argv[argc++] = "-include";
                argv[argc++] = paths[i];
            }
        for (int i = 0; i < nfiles; i++)
            if (!files[i].include)
                argv[argc++] = paths[i];
        argv[argc++] = "-lm";
        argv[argc] = NULL;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, lpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        pid_t pid;
        int err = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (err) {
            rc = kt_err_set(KT_EIO, "cannot run the compiler '%s': %s", cc, strerror(err));
        } else {
            int status = 0;
            rc = wait_child(pid, KT_CODEGEN_COMPILE_TIMEOUT, &status);
            if (rc)
                kt_err_prefix("compiling kernel");
            char *text = kt_file_read(lpath, NULL);
            if (rc == KT_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                /* The first lines of the log say what went wrong. */
                char head[600];
                snprintf(head, sizeof(head), "%s", text ? text : "");
                rc = kt_err_set(KT_EINVAL, "compiling kernel failed (%s %d): %s",
                                WIFEXITED(status) ? "exit" : "signal",
                                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), head);
            }
            if (log)
                *log = text ? text : kt_strdup("");
            else
                free(text);
        }
    }
    for (int i = 0; i < written; i++)
        if (paths[i][0])
            unlink(paths[i]);
    unlink(lpath);
    rmdir(dir);
    return rc;
}

/* ---- load ------------------------------------------------------------------ */

struct kt_codegen_lib {
    void *handle;
    kt_kernel_fn fn;
};

kt_codegen_lib_t *kt_codegen_load(const char *so_path, const char *entry)
{
    void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        kt_err_set(KT_EIO, "cannot load %s: %s", so_path, dlerror());
        return NULL;
    }
    void *sym = dlsym(h, entry);
    if (!sym) {
        kt_err_set(KT_ENOTFOUND, "%s has no entry '%s'", so_path, entry);
        dlclose(h);
        return NULL;
    }
    kt_codegen_lib_t *lib = malloc(sizeof(*lib));
    if (!lib) {
        dlclose(h);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    lib->handle = h;
    /* POSIX guarantees a function pointer round-trips through dlsym's void *. */
    memcpy(&lib->fn, &sym, sizeof(lib->fn));
    return lib;
}

kt_kernel_fn kt_codegen_lib_fn(const kt_codegen_lib_t *lib) { return lib ? lib->fn : NULL; }

void kt_codegen_unload(kt_codegen_lib_t *lib)
{
    if (!lib)
        return;
    dlclose(lib->handle);
    free(lib);
}

/* ---- buffers ----------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void kt_codegen_fill_random(float *buf, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&s);
        float mag = 0.125f + 0.875f * (float)((r >> 40) & 0xffffff) / (float)0xffffff;
        buf[i] = (r & 1u) ? -mag : mag;
    }
}

static uint64_t buf_seed(uint64_t seed, int i)
{
    uint64_t s = seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(i + 1));
    return splitmix64(&s);
}

float **kt_codegen_bufs_new(const kt_dag_t *dag, uint64_t seed)
{
    int n = kt_codegen_num_bufs(dag);
    float **bufs = calloc((size_t)n + 1, sizeof(*bufs));
    if (!bufs) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, i));
        size_t cnt = (size_t)kt_stage_numel(s);
        size_t bytes = (cnt * sizeof(float) + 63) & ~(size_t)63;
        bufs[i] = aligned_alloc(64, bytes);
        if (!bufs[i]) {
            kt_codegen_bufs_free(dag, bufs);
            kt_err_set(KT_ENOMEM, "out of memory for buffer '%s'", s->name);
            return NULL;
        }
        if (s->kind == KT_STAGE_PLACEHOLDER)
            kt_codegen_fill_random(bufs[i], cnt, buf_seed(seed, i));
        else
            memset(bufs[i], 0xff, cnt * sizeof(float));   /* NaN */
    }
    return bufs;
}

void kt_codegen_bufs_free(const kt_dag_t *dag, float **bufs)
{
    if (!bufs)
        return;
    int n = kt_codegen_num_bufs(dag);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
}

double kt_codegen_rel_err(const float *got, const float *want, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(want[i]))
            ss += (double)want[i] * (double)want[i];
    double rms = n ? sqrt(ss / (double)n) : 0.0;
    double floor = rms > FLT_MIN ? rms : FLT_MIN;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double r = want[i], c = got[i];
        if (!isfinite(r) || !isfinite(c)) {
            if (!(r == c))   /* equal infinities pass; NaN never equals */
                return INFINITY;
            continue;
        }
        double den = fabs(r) > floor ? fabs(r) : floor;
        double e = fabs(c - r) / den;
        if (e > worst)
            worst = e;
    }
    return worst;
}

/* ---- checker -------------------------------------------------------------------- */

struct kt_codegen_ref {
    const kt_dag_t *dag;
    char dir[512];
    int nbufs;
    float **inputs;      /* private: placeholders */
    float *shared;       /* MAP_SHARED block the child writes outputs into */
    size_t shared_bytes;
    float **run_bufs;    /* inputs + pointers into shared */
    float **expected;    /* per buffer; NULL for inputs */
    size_t *count;
    unsigned serial;
};

/* What the child printed on stderr, for a failure's message: the head
 * (where a kernel's fault report is), "" when nothing. */
static const char *child_stderr(const char *path, char *buf, size_t cap)
{
    char *text = kt_file_read(path, NULL);
    snprintf(buf, cap, "%s%s", text && *text ? ": " : "", text ? text : "");
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    free(text);
    return buf;
}

/* The child's run of <entry>_packed: the weights <entry>_pack names are
 * re-laid out into fresh buffers first. Its exit status: 0, 121 (the kernel
 * failed), 122 (no packed variant), 123 (out of memory). */
static int run_packed_child(kt_codegen_ref_t *ref, void *h, const char *entry)
{
    char name[300];
    snprintf(name, sizeof(name), "%s_packed", entry);
    void *ksym = dlsym(h, name);
    snprintf(name, sizeof(name), "%s_pack", entry);
    void *psym = dlsym(h, name);
    if (!ksym || !psym)
        return 122;
    kt_kernel_fn fn;
    int (*pack)(int, const float *, float *);
    memcpy(&fn, &ksym, sizeof(fn));
    memcpy(&pack, &psym, sizeof(pack));
    float **args = calloc((size_t)ref->nbufs + 1, sizeof(float *));
    if (!args)
        return 123;
    for (int i = 0; i < ref->nbufs; i++) {
        args[i] = ref->run_bufs[i];
        const kt_stage_t *s = kt_dag_stage(ref->dag, kt_codegen_buf_stage(ref->dag, i));
        if (s->kind != KT_STAGE_PLACEHOLDER || pack(i, NULL, NULL) != 1)
            continue;
        args[i] = aligned_alloc(64, (ref->count[i] * sizeof(float) + 63) & ~(size_t)63);
        if (!args[i])
            return 123;
        pack(i, ref->run_bufs[i], args[i]);
    }
    return fn(args) == 0 ? 0 : 121;   /* the child exits: nothing to free */
}

/* Run the kernel in so_path in a child; outputs land in ref->shared. With
 * packed set, its <entry>_packed variant on packed weights instead:
 * KT_ENOTFOUND when the library has none. */
static int run_isolated(kt_codegen_ref_t *ref, const char *so_path, const char *entry, int packed)
{
    memset(ref->shared, 0xff, ref->shared_bytes);
    char epath[600], ebuf[700];
    snprintf(epath, sizeof(epath), "%s/stderr.txt", ref->dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return kt_err_set(KT_EIO, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* Die by the signal itself, even where a sanitizer or the caller
         * installed handlers, so the parent can report it. */
        static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t i = 0; i < KT_ARRAY_LEN(fatal); i++)
            signal(fatal[i], SIG_DFL);
        /* a kernel that reports a fault says why on stderr */
        int efd = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (efd >= 0) {
            dup2(efd, 2);
            close(efd);
        }
        void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
        if (h && packed)
            _exit(run_packed_child(ref, h, entry));
        void *sym = h ? dlsym(h, entry) : NULL;
        if (!sym)
            _exit(120);
        kt_kernel_fn fn;
        memcpy(&fn, &sym, sizeof(fn));
        _exit(fn(ref->run_bufs) == 0 ? 0 : 121);
    }
    int status = 0;
    int rc = wait_child(pid, KT_CODEGEN_RUN_TIMEOUT, &status);
    child_stderr(epath, ebuf, sizeof(ebuf));
    unlink(epath);
    if (rc)
        return kt_err_prefix("running kernel");
    if (WIFSIGNALED(status))
        return kt_err_set(KT_EIO, "kernel crashed with signal %d (%s)%s", WTERMSIG(status),
                          strsignal(WTERMSIG(status)), ebuf);
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 120)
        return kt_err_set(KT_EIO, "cannot load kernel entry '%s'%s", entry, ebuf);
    if (WEXITSTATUS(status) == 122)
        return kt_err_set(KT_ENOTFOUND, "no packed variant of '%s'", entry);
    if (WEXITSTATUS(status) == 123)
        return kt_err_set(KT_EIO, "out of memory for the packed weights");
    if (WEXITSTATUS(status) != 0)
        return kt_err_set(KT_EIO, "kernel returned an error%s", *ebuf ? ebuf : " (allocation failed?)");
    return KT_OK;
}

static int so_path(kt_codegen_ref_t *ref, char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "%s/%s_%u.so", ref->dir, what, ref->serial++);
    return KT_OK;
}

kt_codegen_ref_t *kt_codegen_ref_new(const kt_dag_t *dag, uint64_t seed)
{
    kt_codegen_ref_t *ref = calloc(1, sizeof(*ref));
    if (!ref) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    ref->dag = dag;
    ref->nbufs = kt_codegen_num_bufs(dag);
    if (make_tmpdir(ref->dir, sizeof(ref->dir))) {
        ref->dir[0] = '\0';
        kt_codegen_ref_free(ref);
        return NULL;
    }
    ref->inputs = kt_codegen_bufs_new(dag, seed);
    ref->run_bufs = calloc((size_t)ref->nbufs + 1, sizeof(float *));
    ref->expected = calloc((size_t)ref->nbufs + 1, sizeof(float *));
    ref->count = calloc((size_t)ref->nbufs + 1, sizeof(size_t));
    if (!ref->inputs || !ref->run_bufs || !ref->expected || !ref->count) {
        kt_codegen_ref_free(ref);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    size_t off[KT_TE_MAX_STAGES + 1] = {0}, total = 0;
    for (int i = 0; i < ref->nbufs; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, i));
        ref->count[i] = (size_t)kt_stage_numel(s);
        if (s->kind != KT_STAGE_PLACEHOLDER) {
            off[i] = total;
            total += (ref->count[i] * sizeof(float) + 63) & ~(size_t)63;
        }
    }
    ref->shared_bytes = total;
    void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        kt_codegen_ref_free(ref);
        kt_err_set(KT_ENOMEM, "cannot map %zu bytes for kernel outputs", total);
        return NULL;
    }
    ref->shared = m;
    for (int i = 0; i < ref->nbufs; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, i));
        ref->run_bufs[i] = s->kind == KT_STAGE_PLACEHOLDER ? ref->inputs[i]
                                                            : (float *)((char *)m + off[i]);
    }
    char *src = kt_codegen_reference_c(dag, "kt_reference");
    char path[600];
    so_path(ref, path, sizeof(path), "ref");
    int rc = src ? kt_codegen_compile(src, path, NULL) : KT_ENOMEM;
    free(src);
    if (rc == KT_OK)
        rc = run_isolated(ref, path, "kt_reference", 0);
    unlink(path);
    for (int i = 0; rc == KT_OK && i < ref->nbufs; i++) {
        const kt_stage_t *s = kt_dag_stage(dag, kt_codegen_buf_stage(dag, i));
        if (s->kind == KT_STAGE_PLACEHOLDER)
            continue;
        ref->expected[i] = malloc(ref->count[i] * sizeof(float));
        if (!ref->expected[i])
            rc = kt_err_set(KT_ENOMEM, "out of memory");
        else
            memcpy(ref->expected[i], ref->run_bufs[i], ref->count[i] * sizeof(float));
    }
    if (rc) {
        kt_err_prefix("reference kernel");
        kt_codegen_ref_free(ref);
        return NULL;
    }
    return ref;
}

static int compare(kt_codegen_ref_t *ref, double *max_rel_err)
{
    double worst = 0;
    int wi = -1;
    for (int i = 0; i < ref->nbufs; i++) {
        if (!ref->expected[i])
            continue;
        double e = kt_codegen_rel_err(ref->run_bufs[i], ref->expected[i], ref->count[i]);
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    if (max_rel_err)
        *max_rel_err = worst;
    if (!(worst <= KT_CODEGEN_MAX_REL_ERR))
        return kt_err_set(KT_EINVAL, "wrong answers: max relative error %.3g in '%s' exceeds %g",
                          worst, kt_dag_stage(ref->dag, kt_codegen_buf_stage(ref->dag, wi))->name,
                          KT_CODEGEN_MAX_REL_ERR);
    return KT_OK;
}

int kt_codegen_ref_check_so(kt_codegen_ref_t *ref, const char *so, const char *entry,
                            double *max_rel_err)
{
    if (max_rel_err)
        *max_rel_err = INFINITY;
    if (!ref || !so || !entry)
        return kt_err_set(KT_EINVAL, "check: no checker, library or entry");
    int rc = run_isolated(ref, so, entry, 0);
    if (rc == KT_OK)
        rc = compare(ref, max_rel_err);
    if (rc != KT_OK)
        return rc;
    /* The variant that is measured and deployed, on weights packed once. */
    double first = max_rel_err ? *max_rel_err : 0;
    rc = run_isolated(ref, so, entry, 1);
    if (rc == KT_ENOTFOUND) {
        kt_err_clear();
        return KT_OK;
    }
    if (rc == KT_OK)
        rc = compare(ref, max_rel_err);
    if (max_rel_err && *max_rel_err < first)
        *max_rel_err = first;
    return rc ? kt_err_prefix("%s_packed on packed weights", entry) : KT_OK;
}

int kt_codegen_ref_check(kt_codegen_ref_t *ref, const char *src, const char *entry,
                         double *max_rel_err)
{
    return kt_codegen_ref_check_flags(ref, src, entry, NULL, max_rel_err);
}

int kt_codegen_ref_check_flags(kt_codegen_ref_t *ref, const char *src, const char *entry,
                               const char *cflags, double *max_rel_err)
{
    if (max_rel_err)
        *max_rel_err = INFINITY;
    if (!ref || !src || !entry)
        return kt_err_set(KT_EINVAL, "check: no checker, source or entry");
    char path[600];
    so_path(ref, path, sizeof(path), "cand");
    int rc = kt_codegen_compile_flags(src, path, cflags, NULL);
    if (rc == KT_OK)
        rc = kt_codegen_ref_check_so(ref, path, entry, max_rel_err);
    unlink(path);
    return rc;
}

const float *kt_codegen_ref_expected(const kt_codegen_ref_t *ref, int i, size_t *n)
{
    if (!ref || i < 0 || i >= ref->nbufs || !ref->expected[i])
        return NULL;
    if (n)
        *n = ref->count[i];
    return ref->expected[i];
}

void kt_codegen_ref_free(kt_codegen_ref_t *ref)
{
    if (!ref)
        return;
    if (ref->inputs) {
        /* Only the input slots hold private allocations; outputs were NaN
         * buffers from kt_codegen_bufs_new and are freed with them. */
        kt_codegen_bufs_free(ref->dag, ref->inputs);
    }
    if (ref->shared)
        munmap(ref->shared, ref->shared_bytes);
    for (int i = 0; ref->expected && i < ref->nbufs; i++)
        free(ref->expected[i]);
    free(ref->expected);
    free(ref->run_bufs);
    free(ref->count);
    if (ref->dir[0])
        rmdir(ref->dir);
    free(ref);
}

int kt_codegen_check(const kt_dag_t *dag, const char *src, const char *entry, uint64_t seed,
                     double *max_rel_err)
{
    if (max_rel_err)
        *max_rel_err = INFINITY;
    kt_codegen_ref_t *ref = kt_codegen_ref_new(dag, seed);
    if (!ref)
        return kt_err_code() ? kt_err_code() : KT_EINTERNAL;
    int rc = kt_codegen_ref_check(ref, src, entry, max_rel_err);
    kt_codegen_ref_free(ref);
    return rc;
}
