#include "measure/builder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "measure/measure_int.h"
#include "measure/nvrtc.h"
#include "util/err.h"
#include "util/kt_limits.h"
#include "util/sbuf.h"
#include "util/util.h"

extern char **environ;

struct kt_builder {
    int n_parallel;
    double timeout;
    char **compiler;       /* argv words of the compiler command */
    char **flags;
    char **libs;
    char *march;           /* NULL: no -march */
    char *flags_text;      /* normalised option text folded into keys */
    char *compiler_id;
    char *scratch;         /* private scratch directory */
    uint64_t serial;       /* names scratch files uniquely across calls */
    kt_artifact_cache_t *cache;
    uint64_t compiles, timeouts;
    char *cuda_arch;       /* NVRTC target of CUDA candidates */
    char *nvrtc_options;
    char *cuda_flags_text; /* normalised CUDA options folded into keys */
    char *nvrtc_id;        /* NULL without CUDA (CUDA batches are refused then) */
};

/* ---- create / destroy ---------------------------------------------------- */

void kt_builder_opts_default(kt_builder_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->timeout = 15;
    o->compiler = "cc";
    o->flags = KT_BUILDER_DEFAULT_FLAGS;
    o->march = "native";
    o->libs = KT_BUILDER_DEFAULT_LIBS;
}

/* Find argv0 in PATH the way execvp would; malloc'd resolved path or NULL. */
static char *find_in_path(const char *argv0)
{
    if (strchr(argv0, '/'))
        return access(argv0, X_OK) == 0 ? realpath(argv0, NULL) : NULL;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t dl = colon ? (size_t)(colon - path) : strlen(path);
        char cand[PATH_MAX];
        if (dl == 0)
            snprintf(cand, sizeof cand, "./%s", argv0);
        else
            snprintf(cand, sizeof cand, "%.*s/%s", (int)dl, path, argv0);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
            return realpath(cand, NULL);
        if (!colon)
            break;
        path = colon + 1;
    }
    return NULL;
}

kt_builder_t *kt_builder_new(const kt_builder_opts_t *o)
{
    kt_builder_opts_t d;
    if (!o) {
        kt_builder_opts_default(&d);
        o = &d;
    }
    if (o->n_parallel < 0 || o->timeout < 0) {
        kt_err_set(KT_EINVAL, "builder: n_parallel and timeout must not be negative");
        return NULL;
    }
    kt_builder_t *b = calloc(1, sizeof *b);
    if (!b) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    b->n_parallel = o->n_parallel > 0 ? o->n_parallel : (ncpu > 0 ? (int)ncpu : 1);
    b->timeout = o->timeout > 0 ? o->timeout : 15;
    int ncomp = 0;
    b->compiler = kt_measure_split_words(o->compiler ? o->compiler : "cc", &ncomp);
    b->flags = kt_measure_split_words(o->flags ? o->flags : KT_BUILDER_DEFAULT_FLAGS, NULL);
    b->libs = kt_measure_split_words(o->libs ? o->libs : KT_BUILDER_DEFAULT_LIBS, NULL);
    const char *march = o->march ? o->march : "native";
    if (*march)
        b->march = kt_strdup(march);
    if (!b->compiler || !b->flags || !b->libs || (*march && !b->march))
        goto fail;
    if (ncomp == 0) {
        kt_err_set(KT_EINVAL, "builder: empty compiler command");
        goto fail;
    }

    kt_sbuf_t s;
    kt_sbuf_init(&s);
    kt_sbuf_printf(&s, "flags=%s|march=%s|libs=%s", o->flags ? o->flags : KT_BUILDER_DEFAULT_FLAGS,
                   march, o->libs ? o->libs : KT_BUILDER_DEFAULT_LIBS);
    b->flags_text = kt_sbuf_take(&s);
    if (!b->flags_text)
        goto fail;

    char *resolved = find_in_path(b->compiler[0]);
    if (!resolved) {
        kt_err_set(KT_ENOTFOUND, "builder: compiler '%s' not found in PATH", b->compiler[0]);
        goto fail;
    }
    if (o->compiler_id) {
        b->compiler_id = kt_strdup(o->compiler_id);
    } else {
        /* Path, size and mtime change whenever the compiler is upgraded, and
         * reading them costs nothing (running `cc --version` would). */
        struct stat st;
        stat(resolved, &st);
        kt_sbuf_init(&s);
        kt_sbuf_printf(&s, "%s:%lld:%lld", resolved, (long long)st.st_size,
                       (long long)st.st_mtime);
        for (int i = 1; i < ncomp; i++)
            kt_sbuf_printf(&s, " %s", b->compiler[i]);
        b->compiler_id = kt_sbuf_take(&s);
    }
    free(resolved);
    if (!b->compiler_id)
        goto fail;

    const char *wd = o->work_dir ? o->work_dir : getenv("TMPDIR");
    if (!wd || !*wd)
        wd = "/tmp";
    kt_sbuf_init(&s);
    kt_sbuf_printf(&s, "%s/kt-build-XXXXXX", wd);
    b->scratch = kt_sbuf_take(&s);
    if (!b->scratch)
        goto fail;
    if (!mkdtemp(b->scratch)) {
        kt_err_set(KT_EIO, "builder: cannot make a scratch directory in %s: %s", wd,
                   strerror(errno));
        free(b->scratch);
        b->scratch = NULL;
        goto fail;
    }
    b->cache = kt_artifact_cache_new(o->cache_dir, o->cache_mem_bytes);
    if (!b->cache)
        goto fail;

    b->cuda_arch = kt_strdup(o->cuda_arch ? o->cuda_arch : KT_NVRTC_DEFAULT_ARCH);
    b->nvrtc_options = kt_strdup(o->nvrtc_options ? o->nvrtc_options : "");
    if (!b->cuda_arch || !b->nvrtc_options)
        goto fail;
    kt_sbuf_init(&s);
    kt_sbuf_printf(&s, "arch=%s|options=%s", b->cuda_arch, b->nvrtc_options);
    b->cuda_flags_text = kt_sbuf_take(&s);
    if (!b->cuda_flags_text)
        goto fail;
#if KT_HAVE_CUDA
    /* A cubin needs a real architecture, and one NVRTC can target: refusing
     * here beats failing every candidate with the same message. */
    if (strncmp(b->cuda_arch, "sm_", 3) != 0) {
        kt_err_set(KT_EINVAL, "builder: cuda_arch '%s' is not a real architecture (sm_XY)",
                   b->cuda_arch);
        goto fail;
    }
    if (kt_nvrtc_check_arch(b->cuda_arch) < 0) {
        kt_err_prefix("builder");
        goto fail;
    }
    b->nvrtc_id = kt_nvrtc_identity();
    if (!b->nvrtc_id)
        goto fail;
#endif
    return b;
fail:
    kt_builder_free(b);
    return NULL;
}

void kt_builder_free(kt_builder_t *b)
{
    if (!b)
        return;
    if (b->scratch)
        rmdir(b->scratch); /* each build removes its own files */
    kt_measure_free_words(b->compiler);
    kt_measure_free_words(b->flags);
    kt_measure_free_words(b->libs);
    free(b->march);
    free(b->flags_text);
    free(b->compiler_id);
    free(b->scratch);
    kt_artifact_cache_free(b->cache);
    free(b->cuda_arch);
    free(b->nvrtc_options);
    free(b->cuda_flags_text);
    free(b->nvrtc_id);
    free(b);
}

/* ---- keys and results ---------------------------------------------------- */

uint64_t kt_builder_key(const kt_builder_t *b, const kt_build_input_t *in)
{
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    /* The unit separator cannot appear in a compiler id or an entry name. */
    int cuda = in->target == KT_MEASURE_TARGET_CUDA;
    const char *id = cuda ? (b->nvrtc_id ? b->nvrtc_id : "no-nvrtc") : b->compiler_id;
    kt_sbuf_printf(&s, "target=%d\x1f%s\x1f%s\x1f%s\x1f", (int)in->target, id,
                   cuda ? b->cuda_flags_text : b->flags_text, in->entry ? in->entry : "");
    if (in->source)
        kt_sbuf_puts(&s, in->source);
    uint64_t h = kt_hash64(s.data ? s.data : "", s.len);
    kt_sbuf_free(&s);
    return h;
}

void kt_build_result_clear(kt_build_result_t *r)
{
    if (!r)
        return;
    free(r->error_msg);
    free(r->artifact);
    memset(r, 0, sizeof *r);
}

static int set_error(kt_build_result_t *r, int error_no, const char *msg)
{
    free(r->error_msg);
    r->error_no = error_no;
    r->error_msg = strdup(msg);
    if (!r->error_msg)
        return kt_err_set(KT_ENOMEM, "out of memory");
    return KT_OK;
}

static int set_artifact(kt_build_result_t *r, unsigned char *data, size_t len)
{
    /* A runner refuses a Run request carrying an artifact past the cap, so
     * such a build fails here, alone, instead of failing its whole batch later. */
    if (len > KT_LIMIT_ARTIFACT_BYTES) {
        free(data);
        char msg[128];
        snprintf(msg, sizeof msg, "artifact of %zu bytes; at most %zu (KT_LIMIT_ARTIFACT_BYTES)",
                 len, KT_LIMIT_ARTIFACT_BYTES);
        return set_error(r, KT_MEASURE_COMPILE_HOST, msg);
    }
    r->error_no = KT_MEASURE_NO_ERROR;
    r->artifact = data;
    r->artifact_len = len;
    r->artifact_hash = kt_hash64(data, len);
    return KT_OK;
}

static int copy_result(kt_build_result_t *dst, const kt_build_result_t *src)
{
    *dst = *src;
    dst->error_msg = NULL;
    dst->artifact = NULL;
    if (src->error_msg && !(dst->error_msg = strdup(src->error_msg)))
        return kt_err_set(KT_ENOMEM, "out of memory");
    if (src->artifact) {
        dst->artifact = malloc(src->artifact_len ? src->artifact_len : 1);
        if (!dst->artifact)
            return kt_err_set(KT_ENOMEM, "out of memory");
        memcpy(dst->artifact, src->artifact, src->artifact_len);
    }
    return KT_OK;
}

/* ---- one compile ----------------------------------------------------------- */

typedef struct {
    int idx;               /* index into the batch */
    int cuda;              /* an NVRTC child rather than the C compiler */
    pid_t pid;             /* 0 when not started or finished */
    double start, deadline;
    char src[PATH_MAX], so[PATH_MAX], log[PATH_MAX];
} job_t;

static void job_remove_files(job_t *j)
{
    if (j->src[0])
        unlink(j->src);
    unlink(j->so);
    unlink(j->log);
}

/* Start the compiler for j; on failure fills the result and returns < 0
 * (the candidate's error, not the call's). */
static int job_start(kt_builder_t *b, job_t *j, const kt_build_input_t *in, kt_build_result_t *r)
{
    uint64_t id = b->serial++;
    snprintf(j->src, sizeof j->src, "%s/c%llu.c", b->scratch, (unsigned long long)id);
    snprintf(j->so, sizeof j->so, "%s/c%llu.so", b->scratch, (unsigned long long)id);
    snprintf(j->log, sizeof j->log, "%s/c%llu.log", b->scratch, (unsigned long long)id);
    j->start = kt_time_mono();
    if (kt_file_write(j->src, in->source, strlen(in->source)) < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "cannot write the source: %s", kt_err_msg());
        set_error(r, KT_MEASURE_COMPILE_HOST, msg);
        return -1;
    }

    int nargs = 0;
    for (char **p = b->compiler; *p; p++)
        nargs++;
    for (char **p = b->flags; *p; p++)
        nargs++;
    for (char **p = b->libs; *p; p++)
        nargs++;
    char **argv = calloc((size_t)nargs + 6, sizeof *argv);
    char march[256];
    if (!argv) {
        set_error(r, KT_MEASURE_COMPILE_HOST, "out of memory");
        job_remove_files(j);
        return -1;
    }
    int k = 0;
    for (char **p = b->compiler; *p; p++)
        argv[k++] = *p;
    for (char **p = b->flags; *p; p++)
        argv[k++] = *p;
    if (b->march) {
        snprintf(march, sizeof march, "-march=%s", b->march);
        argv[k++] = march;
    }
    argv[k++] = "-o";
    argv[k++] = j->so;
    argv[k++] = j->src;
    for (char **p = b->libs; *p; p++)
        argv[k++] = *p;
    argv[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, j->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    /* Own process group: a timeout kills the driver and everything it started. */
    sigset_t none, defs;
    sigemptyset(&none);
    sigemptyset(&defs);
    sigaddset(&defs, SIGPIPE);
    sigaddset(&defs, SIGINT);
    sigaddset(&defs, SIGTERM);
    sigaddset(&defs, SIGCHLD);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &defs);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    pid_t pid = 0;
    int e = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(argv);
    if (e != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "cannot start the compiler '%s': %s", b->compiler[0],
                 strerror(e));
        set_error(r, KT_MEASURE_COMPILE_HOST, msg);
        job_remove_files(j);
        return -1;
    }
    b->compiles++;
    j->pid = pid;
    j->deadline = j->start + b->timeout;
    return 0;
}

#if KT_HAVE_CUDA
/* Exit statuses of an NVRTC child. */
enum { NVRTC_CHILD_OK = 0, NVRTC_CHILD_BAD_SOURCE = 1, NVRTC_CHILD_FAILED = 2 };

/* The forked child: compile, leave the cubin in j->so or the message in
 * j->log, and return the exit status. */
static int nvrtc_child(const kt_builder_t *b, const job_t *j, const kt_build_input_t *in)
{
    kt_nvrtc_result_t res;
    int rc = kt_nvrtc_compile(in->source, b->cuda_arch, b->nvrtc_options, 0, &res);
    if (rc == 0 && kt_file_write(j->so, res.cubin, res.cubin_len) == 0) {
        kt_nvrtc_result_clear(&res);
        return NVRTC_CHILD_OK;
    }
    kt_nvrtc_result_clear(&res);
    const char *msg = kt_err_msg();
    kt_file_write(j->log, msg, strlen(msg));
    /* A compile error repeats for the same source; anything else may not. */
    return rc == KT_EINVAL ? NVRTC_CHILD_BAD_SOURCE : NVRTC_CHILD_FAILED;
}

static int job_start_cuda(kt_builder_t *b, job_t *j, const kt_build_input_t *in,
                          kt_build_result_t *r)
{
    uint64_t id = b->serial++;
    j->cuda = 1;
    j->src[0] = '\0';
    snprintf(j->so, sizeof j->so, "%s/c%llu.cubin", b->scratch, (unsigned long long)id);
    snprintf(j->log, sizeof j->log, "%s/c%llu.log", b->scratch, (unsigned long long)id);
    j->start = kt_time_mono();
    fflush(NULL); /* or the child's exit could write buffered output twice */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot fork for NVRTC: %s", strerror(errno));
        set_error(r, KT_MEASURE_COMPILE_DEVICE, msg);
        return -1;
    }
    if (pid == 0) {
        /* Own process group, as a compiler's, so a timeout kill is complete;
         * and no orphan compiles once the builder's thread is gone. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(NVRTC_CHILD_FAILED);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        _exit(nvrtc_child(b, j, in));
    }
    setpgid(pid, pid); /* also here, so a kill of the group cannot race the child's own call */
    b->compiles++;
    j->pid = pid;
    j->deadline = j->start + b->timeout;
    return 0;
}
#endif

/* The head of the compiler's output, at most KT_BUILDER_MAX_MSG bytes. */
static char *read_log(const char *path)
{
    size_t n = 0;
    char *text = kt_file_read(path, &n);
    if (!text) {
        kt_err_clear();
        return kt_strdup("");
    }
    if (n > KT_BUILDER_MAX_MSG) {
        strcpy(text + KT_BUILDER_MAX_MSG - 16, "\n[truncated]");
    }
    return text;
}

/* An NVRTC child finished: its cubin, or COMPILE_DEVICE with its message. */
static int job_finish_cuda(job_t *j, int status, kt_build_result_t *r)
{
    int cacheable = 0;
    r->time_cost = kt_time_mono() - j->start;
    int exited = status != -1 && WIFEXITED(status);
    size_t len = 0;
    char *cubin = NULL;
    if (status == -1 || (exited && WEXITSTATUS(status) == 0)) {
        cubin = kt_file_read(j->so, &len);
        if (!cubin)
            kt_err_clear();
    }
    if (cubin && len > 0) {
        set_artifact(r, (unsigned char *)cubin, len);
        cacheable = 1;
    } else {
        free(cubin);
        char *log = read_log(j->log);
        kt_sbuf_t m;
        kt_sbuf_init(&m);
        if (exited && WEXITSTATUS(status) == 1) {
            cacheable = 1; /* NVRTC_CHILD_BAD_SOURCE: the message is NVRTC's */
        } else if (status == -1 || (exited && WEXITSTATUS(status) == 0)) {
            kt_sbuf_printf(&m, "NVRTC produced no cubin");
        } else if (exited) {
            kt_sbuf_printf(&m, "the NVRTC process exited with status %d", WEXITSTATUS(status));
        } else if (WIFSIGNALED(status)) {
            char sig[128];
            kt_measure_signal_text(WTERMSIG(status), sig, sizeof sig);
            kt_sbuf_printf(&m, "the NVRTC process was killed by %s", sig);
        }
        if (log && *log)
            kt_sbuf_printf(&m, "%s%s", m.len ? ": " : "", log);
        free(log);
        char *msg = kt_sbuf_take(&m);
        set_error(r, KT_MEASURE_COMPILE_DEVICE, msg && *msg ? msg : "NVRTC failed");
        free(msg);
    }
    unlink(j->so);
    unlink(j->log);
    j->pid = 0;
    return cacheable;
}

/* The compiler finished (status from waitpid, or -1 when unknowable):
 * judge it and fill r. Returns 1 when the outcome is deterministic enough to
 * cache, 0 otherwise. */
static int job_finish(kt_builder_t *b, job_t *j, int status, kt_build_result_t *r)
{
    (void)b;
    if (j->cuda)
        return job_finish_cuda(j, status, r);
    int cacheable = 0;
    r->time_cost = kt_time_mono() - j->start;
    int exited_ok = status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
    size_t len = 0;
    char *so = NULL;
    if (exited_ok) {
        so = kt_file_read(j->so, &len);
        if (!so)
            kt_err_clear();
    }
    if (exited_ok && so && len > 0) {
        set_artifact(r, (unsigned char *)so, len);
        cacheable = 1;
    } else {
        free(so);
        char *log = read_log(j->log);
        kt_sbuf_t m;
        kt_sbuf_init(&m);
        if (status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            kt_sbuf_printf(&m, "the compiler produced no shared object");
        } else if (WIFEXITED(status)) {
            kt_sbuf_printf(&m, "the compiler exited with status %d", WEXITSTATUS(status));
            cacheable = 1; /* a plain compile error repeats for the same input */
        } else if (WIFSIGNALED(status)) {
            char sig[128];
            kt_measure_signal_text(WTERMSIG(status), sig, sizeof sig);
            kt_sbuf_printf(&m, "the compiler was killed by %s", sig);
        }
        if (log && *log)
            kt_sbuf_printf(&m, ":\n%s", log);
        free(log);
        char *msg = kt_sbuf_take(&m);
        set_error(r, KT_MEASURE_COMPILE_HOST, msg ? msg : "the compiler failed");
        free(msg);
    }
    job_remove_files(j);
    j->pid = 0;
    return cacheable;
}

static void job_kill(kt_builder_t *b, job_t *j, kt_build_result_t *r)
{
    kill(-j->pid, SIGKILL);
    kill(j->pid, SIGKILL);
    while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    b->timeouts++;
    r->time_cost = kt_time_mono() - j->start;
    char msg[256];
    snprintf(msg, sizeof msg, "the build exceeded its timeout of %.3g s and was killed",
             b->timeout);
    set_error(r, KT_MEASURE_BUILD_TIMEOUT, msg);
    job_remove_files(j);
    j->pid = 0;
}

/* Has j's compiler ended? 1 with *status, 0 while running. */
static int job_poll(job_t *j, int *status)
{
    pid_t w = waitpid(j->pid, status, WNOHANG);
    if (w == j->pid)
        return 1;
    if (w < 0 && errno == ECHILD) {
        /* The caller ignores SIGCHLD: children are reaped by the kernel and
         * their status is lost; the process simply disappears when done. */
        if (kill(j->pid, 0) < 0 && errno == ESRCH) {
            *status = -1;
            return 1;
        }
    }
    return 0;
}

/* ---- batch ----------------------------------------------------------------- */

int kt_builder_build(kt_builder_t *b, const kt_build_input_t *in, int n, kt_build_result_t *out)
{
    if (!b || n < 0 || (n > 0 && (!in || !out)))
        return kt_err_set(KT_EINVAL, "builder: bad arguments");
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (in[i].target == KT_MEASURE_TARGET_CUDA && !b->nvrtc_id)
            return kt_err_set(KT_EUNSUP, "builder: candidate %d targets CUDA, but ktune was built "
                              "without CUDA (no NVRTC)", i);
        if (in[i].target != KT_MEASURE_TARGET_CPU && in[i].target != KT_MEASURE_TARGET_CUDA)
            return kt_err_set(KT_EUNSUP, "builder: candidate %d: unknown target %d", i,
                              (int)in[i].target);
    }
    if (n == 0)
        return KT_OK;

    int *dup_of = malloc(sizeof *dup_of * (size_t)n);
    job_t *jobs = calloc((size_t)n, sizeof *jobs);
    if (!dup_of || !jobs) {
        free(dup_of);
        free(jobs);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    int njobs = 0, rc = KT_OK;

    /* Resolve what needs no compiler: bad inputs, cache hits, duplicates. */
    for (int i = 0; i < n && rc == KT_OK; i++) {
        kt_build_result_t *r = &out[i];
        dup_of[i] = -1;
        r->key = kt_builder_key(b, &in[i]);
        if (!in[i].source) {
            rc = set_error(r, KT_MEASURE_INSTANTIATION_ERROR,
                           in[i].instantiation_error ? in[i].instantiation_error
                                                     : "the candidate has no source");
            continue;
        }
        if (!in[i].entry || !*in[i].entry) {
            rc = set_error(r, KT_MEASURE_INSTANTIATION_ERROR, "the candidate has no entry name");
            continue;
        }
        for (int k = 0; k < i; k++) {
            if (out[k].key == r->key && in[k].source && dup_of[k] < 0) {
                dup_of[i] = k;
                break;
            }
        }
        if (dup_of[i] >= 0)
            continue;
        int error_no = 0;
        char *msg = NULL;
        unsigned char *data = NULL;
        size_t len = 0;
        double t0 = kt_time_mono();
        int hit = kt_artifact_cache_get(b->cache, r->key, &error_no, &msg, &data, &len);
        if (hit < 0) {
            rc = hit;
        } else if (hit) {
            r->cached = 1;
            if (error_no) {
                r->error_no = error_no;
                r->error_msg = msg;
            } else {
                set_artifact(r, data, len);
            }
            r->time_cost = kt_time_mono() - t0;
        } else {
            jobs[njobs++].idx = i;
        }
    }

    /* Compile the rest, n_parallel at a time. */
    int next = 0, running = 0;
    while (rc == KT_OK && (next < njobs || running > 0)) {
        while (next < njobs && running < b->n_parallel) {
            job_t *j = &jobs[next++];
            int started;
#if KT_HAVE_CUDA
            if (in[j->idx].target == KT_MEASURE_TARGET_CUDA)
                started = job_start_cuda(b, j, &in[j->idx], &out[j->idx]);
            else
#endif
                started = job_start(b, j, &in[j->idx], &out[j->idx]);
            if (started == 0)
                running++;
        }
        int progressed = 0;
        double now = kt_time_mono();
        for (int k = 0; k < next; k++) {
            job_t *j = &jobs[k];
            if (!j->pid)
                continue;
            kt_build_result_t *r = &out[j->idx];
            int status = 0;
            if (job_poll(j, &status)) {
                if (job_finish(b, j, status, r)) {
                    int prc = kt_artifact_cache_put(b->cache, r->key, r->error_no, r->error_msg,
                                                    r->artifact, r->artifact_len);
                    if (prc < 0) /* a cache that cannot store is not the candidate's fault */
                        kt_err_clear();
                }
                running--;
                progressed = 1;
            } else if (now > j->deadline) {
                job_kill(b, j, r);
                running--;
                progressed = 1;
            }
        }
        if (!progressed && running > 0) {
            /* Compiles take tens of milliseconds at least; polling every 2 ms
             * costs nothing and needs no SIGCHLD handler. */
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }

    for (int i = 0; i < n && rc == KT_OK; i++) {
        if (dup_of[i] < 0)
            continue;
        rc = copy_result(&out[i], &out[dup_of[i]]);
        out[i].cached = 1;
        out[i].time_cost = 0;
    }
    free(dup_of);
    free(jobs);
    if (rc < 0) {
        for (int i = 0; i < n; i++)
            kt_build_result_clear(&out[i]);
    }
    return rc;
}

/* ---- query ------------------------------------------------------------------- */

void kt_builder_stats(const kt_builder_t *b, kt_builder_stats_t *out)
{
    memset(out, 0, sizeof *out);
    out->compiles = b->compiles;
    out->timeouts = b->timeouts;
    kt_artifact_cache_stats(b->cache, &out->cache);
}

const char *kt_builder_compiler_id(const kt_builder_t *b)
{
    return b->compiler_id;
}
