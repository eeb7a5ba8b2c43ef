#include "measure/nvrtc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt_config.h"
#include "util/err.h"
#include "util/util.h"

void kt_nvrtc_result_clear(kt_nvrtc_result_t *r)
{
    if (!r)
        return;
    free(r->cubin);
    free(r->ptx);
    free(r->log);
    free(r->kernels);
    memset(r, 0, sizeof *r);
}

const kt_nvrtc_kernel_t *kt_nvrtc_result_kernel(const kt_nvrtc_result_t *r, const char *name)
{
    for (int i = 0; r && name && i < r->n_kernels; i++)
        if (strcmp(r->kernels[i].name, name) == 0)
            return &r->kernels[i];
    return NULL;
}

/* ---- compile in a child ---- */

/* What the child sends ahead of the bytes of cubin, PTX, log and kernels. */
typedef struct {
    int rc, n_kernels, has_ptx;
    size_t cubin_len, ptx_len, log_len;
    char err[1024];
} isolated_head_t;

static void isolated_child(int fd, const char *source, const char *arch, const char *options,
                           int flags)
{
    kt_nvrtc_result_t r;
    isolated_head_t h;
    memset(&h, 0, sizeof h);
    h.rc = kt_nvrtc_compile(source, arch, options, flags, &r);
    snprintf(h.err, sizeof h.err, "%s", h.rc ? kt_err_msg() : "");
    h.cubin_len = r.cubin ? r.cubin_len : 0;
    h.has_ptx = r.ptx != NULL;
    h.ptx_len = r.ptx ? r.ptx_len : 0;
    h.log_len = r.log ? strlen(r.log) : 0;
    h.n_kernels = r.kernels ? r.n_kernels : 0;
    int bad = kt_fd_write_all(fd, &h, sizeof h) || kt_fd_write_all(fd, r.cubin, h.cubin_len) ||
              kt_fd_write_all(fd, r.ptx, h.ptx_len) || kt_fd_write_all(fd, r.log, h.log_len) ||
              kt_fd_write_all(fd, r.kernels, sizeof(kt_nvrtc_kernel_t) * (size_t)h.n_kernels);
    _exit(bad ? 3 : 0);
}

/* A malloc'd copy of n bytes from fd plus a NUL; NULL on failure. */
static char *read_part(int fd, size_t n)
{
    char *b = malloc(n + 1);
    if (b && kt_fd_read_all(fd, b, n) == 0) {
        b[n] = '\0';
        return b;
    }
    free(b);
    return NULL;
}

int kt_nvrtc_compile_isolated(const char *source, const char *arch, const char *options,
                              int flags, kt_nvrtc_result_t *out)
{
    if (!source || !out)
        return kt_err_set(KT_EINVAL, "NVRTC: no source");
    memset(out, 0, sizeof *out);
    int fds[2];
    if (pipe(fds) != 0)
        return kt_err_set(KT_EIO, "NVRTC: pipe: %s", strerror(errno));
    fflush(NULL); /* or the child's exit could write buffered output twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kt_err_set(KT_EIO, "NVRTC: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        isolated_child(fds[1], source, arch, options, flags);
    }
    close(fds[1]);
    isolated_head_t h;
    int ok = kt_fd_read_all(fds[0], &h, sizeof h) == 0;
    if (ok) {
        out->cubin = h.cubin_len ? (unsigned char *)read_part(fds[0], h.cubin_len) : NULL;
        out->cubin_len = out->cubin ? h.cubin_len : 0;
        out->ptx = h.has_ptx ? read_part(fds[0], h.ptx_len) : NULL;
        out->ptx_len = out->ptx ? h.ptx_len : 0;
        out->log = read_part(fds[0], h.log_len);
        if (h.n_kernels > 0) {
            out->kernels = calloc((size_t)h.n_kernels, sizeof(kt_nvrtc_kernel_t));
            size_t kb = sizeof(kt_nvrtc_kernel_t) * (size_t)h.n_kernels;
            if (out->kernels && kt_fd_read_all(fds[0], out->kernels, kb) == 0)
                out->n_kernels = h.n_kernels;
        }
        ok = (out->cubin || !h.cubin_len) && (out->ptx || !h.has_ptx) && out->log &&
             out->n_kernels == h.n_kernels;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        kt_nvrtc_result_clear(out);
        return kt_err_set(KT_EIO, "NVRTC: the compiling process ended without an answer (%s %d)",
                          WIFSIGNALED(status) ? "signal" : "status",
                          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    if (h.rc != 0) {
        h.err[sizeof h.err - 1] = '\0';
        return kt_err_set(h.rc, "%s", h.err);
    }
    return 0;
}

#if KT_HAVE_CUDA

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include "measure/hw_params.h"
#include "measure/measure_int.h"
#include "util/sbuf.h"

int kt_nvrtc_version(int *major, int *minor)
{
    int a = 0, b = 0;
    nvrtcResult rc = nvrtcVersion(&a, &b);
    if (rc != NVRTC_SUCCESS)
        return kt_err_set(KT_EINTERNAL, "nvrtcVersion: %s", nvrtcGetErrorString(rc));
    if (major)
        *major = a;
    if (minor)
        *minor = b;
    return KT_OK;
}

int kt_nvrtc_supported_archs(int *archs, int max)
{
    int n = 0;
    nvrtcResult rc = nvrtcGetNumSupportedArchs(&n);
    if (rc != NVRTC_SUCCESS || n < 0)
        return kt_err_set(KT_EINTERNAL, "nvrtcGetNumSupportedArchs: %s", nvrtcGetErrorString(rc));
    int *all = malloc(sizeof *all * (size_t)(n ? n : 1));
    if (!all)
        return kt_err_set(KT_ENOMEM, "out of memory");
    rc = nvrtcGetSupportedArchs(all);
    if (rc != NVRTC_SUCCESS) {
        free(all);
        return kt_err_set(KT_EINTERNAL, "nvrtcGetSupportedArchs: %s", nvrtcGetErrorString(rc));
    }
    for (int i = 0; i < n && i < max; i++)
        archs[i] = all[i];
    free(all);
    return n;
}

int kt_nvrtc_check_arch(const char *arch)
{
    int major, minor;
    if (kt_hw_params_parse_arch(arch, &major, &minor) < 0)
        return kt_err_prefix("NVRTC");
    int archs[64];
    int n = kt_nvrtc_supported_archs(archs, (int)KT_ARRAY_LEN(archs));
    if (n < 0)
        return n;
    if (n > (int)KT_ARRAY_LEN(archs))
        n = (int)KT_ARRAY_LEN(archs);
    for (int i = 0; i < n; i++)
        if (archs[i] == major * 10 + minor)
            return KT_OK;
    int va = 0, vb = 0;
    kt_nvrtc_version(&va, &vb);
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    for (int i = 0; i < n; i++)
        kt_sbuf_printf(&s, "%ssm_%d", i ? ", " : "", archs[i]);
    kt_err_set(KT_EINVAL, "NVRTC %d.%d cannot compile for %s (supported: %s)", va, vb, arch,
               s.data ? s.data : "none");
    kt_sbuf_free(&s);
    return KT_EINVAL;
}

char *kt_nvrtc_identity(void)
{
    int a = 0, b = 0;
    if (kt_nvrtc_version(&a, &b) < 0)
        return NULL;
    /* nvrtcVersion does not tell patch releases apart; the library file does. */
    Dl_info info;
    memset(&info, 0, sizeof info);
    struct stat st;
    memset(&st, 0, sizeof st);
    char *path = NULL;
    if (dladdr((void *)nvrtcVersion, &info) && info.dli_fname) {
        path = realpath(info.dli_fname, NULL);
        if (path)
            stat(path, &st);
    }
    kt_sbuf_t s;
    kt_sbuf_init(&s);
    kt_sbuf_printf(&s, "nvrtc %d.%d %s:%lld:%lld", a, b, path ? path : "?",
                   (long long)st.st_size, (long long)st.st_mtime);
    free(path);
    char *id = kt_sbuf_take(&s);
    if (!id)
        kt_err_set(KT_ENOMEM, "out of memory");
    return id;
}

/* ---- ptxas -v info ------------------------------------------------------------ */

/* The number written just before `what` in line ("1024 bytes smem"), or -1. */
static int number_before(const char *line, const char *what)
{
    const char *p = strstr(line, what);
    if (!p)
        return -1;
    while (p > line && p[-1] == ' ')
        p--;
    const char *end = p;
    while (p > line && p[-1] >= '0' && p[-1] <= '9')
        p--;
    if (p == end)
        return -1;
    return atoi(p);
}

static kt_nvrtc_kernel_t *kernel_by_name(kt_nvrtc_result_t *r, const char *name, size_t len)
{
    for (int i = 0; i < r->n_kernels; i++)
        if (strlen(r->kernels[i].name) == len && strncmp(r->kernels[i].name, name, len) == 0)
            return &r->kernels[i];
    return NULL;
}

/* Read ptxas' per-entry info lines:
 *   ptxas info    : Compiling entry function 'k' for 'sm_90'
 *   ptxas info    : Function properties for k
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes smem
 * "Function properties" also appears for non-inlined device functions; their
 * lines are skipped since they are not entries. */
static int parse_ptxas_info(kt_nvrtc_result_t *r)
{
    kt_nvrtc_kernel_t *cur = NULL;
    for (const char *line = r->log; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        line = eol ? eol + 1 : NULL;
        if (strncmp(buf, "ptxas", 5) != 0)
            continue;
        const char *p;
        if ((p = strstr(buf, "Compiling entry function '"))) {
            p += strlen("Compiling entry function '");
            const char *q = strchr(p, '\'');
            if (!q || (size_t)(q - p) >= sizeof cur->name)
                continue;
            cur = kernel_by_name(r, p, (size_t)(q - p));
            if (!cur) {
                kt_nvrtc_kernel_t *k = realloc(r->kernels, sizeof *k * (size_t)(r->n_kernels + 1));
                if (!k)
                    return kt_err_set(KT_ENOMEM, "out of memory");
                r->kernels = k;
                cur = &k[r->n_kernels++];
                memset(cur, 0, sizeof *cur);
                memcpy(cur->name, p, (size_t)(q - p));
                cur->registers = cur->spill_store_bytes = cur->spill_load_bytes = -1;
                cur->stack_bytes = cur->static_smem_bytes = -1;
            }
        } else if ((p = strstr(buf, "Function properties for "))) {
            p += strlen("Function properties for ");
            size_t n = strcspn(p, " \r");
            cur = kernel_by_name(r, p, n);
        } else if (cur && strstr(buf, "bytes spill stores")) {
            cur->stack_bytes = number_before(buf, "bytes stack frame");
            cur->spill_store_bytes = number_before(buf, "bytes spill stores");
            cur->spill_load_bytes = number_before(buf, "bytes spill loads");
        } else if (cur && (p = strstr(buf, "Used ")) && strstr(p, " registers")) {
            cur->registers = number_before(buf, "registers");
            int smem = number_before(buf, "bytes smem");
            /* ptxas leaves out "N bytes smem" when N is 0. */
            cur->static_smem_bytes = smem >= 0 ? smem : 0;
        }
    }
    return KT_OK;
}

/* ---- compile --------------------------------------------------------------------- */

static int nvrtc_fail(nvrtcResult rc, const char *what)
{
    return kt_err_set(rc == NVRTC_ERROR_OUT_OF_MEMORY ? KT_ENOMEM : KT_EINTERNAL, "NVRTC: %s: %s",
                      what, nvrtcGetErrorString(rc));
}

int kt_nvrtc_compile(const char *source, const char *arch, const char *options, int flags,
                     kt_nvrtc_result_t *out)
{
    if (!source || !out)
        return kt_err_set(KT_EINVAL, "NVRTC: no source");
    memset(out, 0, sizeof *out);
    if (!arch)
        arch = KT_NVRTC_DEFAULT_ARCH;
    int rc = kt_nvrtc_check_arch(arch);
    if (rc < 0)
        return rc;
    int real = strncmp(arch, "sm_", 3) == 0;

    int nuser = 0;
    char **user = kt_measure_split_words(options ? options : "", &nuser);
    if (!user)
        return KT_ENOMEM;
    const char **argv = calloc((size_t)nuser + 2, sizeof *argv);
    char archopt[64];
    if (!argv) {
        kt_measure_free_words(user);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    int argc = 0;
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    argv[argc++] = archopt;
    if (real)
        argv[argc++] = "--ptxas-options=-v";
    for (int i = 0; i < nuser; i++)
        argv[argc++] = user[i];

    nvrtcProgram prog = NULL;
    nvrtcResult nr = nvrtcCreateProgram(&prog, source, "kernel.cu", 0, NULL, NULL);
    if (nr != NVRTC_SUCCESS) {
        rc = nvrtc_fail(nr, "nvrtcCreateProgram");
        goto done;
    }
    nvrtcResult compiled = nvrtcCompileProgram(prog, argc, argv);
    size_t loglen = 0;
    nr = nvrtcGetProgramLogSize(prog, &loglen);
    if (nr != NVRTC_SUCCESS) {
        rc = nvrtc_fail(nr, "nvrtcGetProgramLogSize");
        goto done;
    }
    out->log = calloc(1, loglen + 1);
    if (!out->log) {
        rc = kt_err_set(KT_ENOMEM, "out of memory");
        goto done;
    }
    if (loglen > 0 && (nr = nvrtcGetProgramLog(prog, out->log)) != NVRTC_SUCCESS) {
        rc = nvrtc_fail(nr, "nvrtcGetProgramLog");
        goto done;
    }
    if (compiled != NVRTC_SUCCESS) {
        /* Bad source or a refused option: deterministic, the caller's fault. */
        int bad = compiled == NVRTC_ERROR_COMPILATION || compiled == NVRTC_ERROR_INVALID_OPTION;
        const char *log = out->log;
        size_t n = strlen(log);
        rc = kt_err_set(bad ? KT_EINVAL : KT_EINTERNAL, "NVRTC: %s for %s: %s%s%.*s%s",
                        compiled == NVRTC_ERROR_COMPILATION ? "compilation failed"
                                                            : "nvrtcCompileProgram failed",
                        arch, nvrtcGetErrorString(compiled), n ? ":\n" : "",
                        (int)(n > KT_NVRTC_MAX_MSG ? KT_NVRTC_MAX_MSG : n), log,
                        n > KT_NVRTC_MAX_MSG ? "\n[truncated]" : "");
        goto done;
    }
    if (real) {
        size_t len = 0;
        if ((nr = nvrtcGetCUBINSize(prog, &len)) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(nr, "nvrtcGetCUBINSize");
            goto done;
        }
        if (len == 0) {
            rc = kt_err_set(KT_EINTERNAL, "NVRTC produced no cubin for %s", arch);
            goto done;
        }
        out->cubin = malloc(len);
        if (!out->cubin) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            goto done;
        }
        if ((nr = nvrtcGetCUBIN(prog, (char *)out->cubin)) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(nr, "nvrtcGetCUBIN");
            goto done;
        }
        out->cubin_len = len;
    }
    if (!real || (flags & KT_NVRTC_KEEP_PTX)) {
        size_t len = 0;
        if ((nr = nvrtcGetPTXSize(prog, &len)) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(nr, "nvrtcGetPTXSize");
            goto done;
        }
        out->ptx = calloc(1, len + 1);
        if (!out->ptx) {
            rc = kt_err_set(KT_ENOMEM, "out of memory");
            goto done;
        }
        if ((nr = nvrtcGetPTX(prog, out->ptx)) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(nr, "nvrtcGetPTX");
            goto done;
        }
        out->ptx_len = strlen(out->ptx); /* the size counts the NUL */
    }
    rc = parse_ptxas_info(out);
done:
    if (prog)
        nvrtcDestroyProgram(&prog);
    free(argv);
    kt_measure_free_words(user);
    if (rc < 0) {
        char *log = out->log;
        out->log = NULL;
        kt_nvrtc_result_clear(out);
        out->log = log;
    }
    return rc;
}

#else /* !KT_HAVE_CUDA */

#define NO_CUDA() kt_err_set(KT_EUNSUP, "NVRTC: built without CUDA (no toolkit at configure time)")

int kt_nvrtc_version(int *major, int *minor)
{
    (void)major;
    (void)minor;
    return NO_CUDA();
}

int kt_nvrtc_supported_archs(int *archs, int max)
{
    (void)archs;
    (void)max;
    return NO_CUDA();
}

int kt_nvrtc_check_arch(const char *arch)
{
    (void)arch;
    return NO_CUDA();
}

int kt_nvrtc_compile(const char *source, const char *arch, const char *options, int flags,
                     kt_nvrtc_result_t *out)
{
    (void)source;
    (void)arch;
    (void)options;
    (void)flags;
    if (out)
        memset(out, 0, sizeof *out);
    return NO_CUDA();
}

char *kt_nvrtc_identity(void)
{
    NO_CUDA();
    return NULL;
}

#endif
