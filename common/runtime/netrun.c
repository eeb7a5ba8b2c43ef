/* Compiling a written network library and running it in this process (netlib.h). */
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt_config.h"
#include "netlib.h"
#include "util/err.h"
#include "util/util.h"

extern char **environ;

#define MAX_DIMS 8

struct kt_netlib {
    void *so;
    void *inst;
    int check;
    int nin;                           /* inputs (NAME_NUM_INPUTS; 1 in older builds) */
    int in_ndim[KT_PLAN_MAX_INPUTS], out_ndim;
    int in_int[KT_PLAN_MAX_INPUTS];            /* the input's NAME_INPUTk_DTYPE is "int" */
    char in_name[KT_PLAN_MAX_INPUTS][128];
    int64_t in_dims[KT_PLAN_MAX_INPUTS][MAX_DIMS], out_dims[MAX_DIMS];
    void *(*create)(const char *);
    int (*run)(void *, const float *, float *);
    int (*run_timed)(void *, const float *, float *, double *);
    int (*check_fn)(void *, const float *, float *, double *);
    int (*run_inputs)(void *, const float *const *, float *, double *);
    int (*check_inputs)(void *, const float *const *, float *, double *);
    void (*destroy)(void *);
    int (*set_threads)(int);
    const char *(*last_error)(void);
    int (*num_steps)(void);
    const char *(*step_name)(int);
    int (*step_task)(int);
    const char *(*step_kind)(int);   /* NULL: a library built before step kinds */
};

/* Run the compiler; its output goes to log. 0, or KT_EIO with the log. */
static int compile(const char *src, const char *so, int flags, const char *log)
{
    const char *cc = getenv("CC");
    char inc[4200], lib[4200];
    snprintf(inc, sizeof inc, "-I%s/include", KT_CUDA_PATH);
    snprintf(lib, sizeof lib, "-L%s/lib64/stubs", KT_CUDA_PATH);
    char *const cpu[] = {(char *)(cc && *cc ? cc : "cc"), "-O3", "-fno-math-errno", "-march=native", "-fopenmp",
                         "-shared", "-fPIC", "-std=c17",
                         (char *)(flags & KT_NETLIB_CHECK ? "-DKTUNE_CHECK" : "-DKTUNE"), "-o",
                         (char *)so, (char *)src, "-lm", NULL};
    /* The host runner links the driver by its SONAME (the toolkit's stub
     * stands in at link time). */
    char *const gpu[] = {(char *)(cc && *cc ? cc : "cc"), "-O2", "-shared", "-fPIC", "-std=c17",
                         inc, "-o", (char *)so, (char *)src, lib, "-lcuda", NULL};
    char *const *argv = flags & KT_NETLIB_CUDA ? gpu : cpu;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return kt_err_set(KT_EIO, "cannot run the C compiler '%s'", argv[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KT_OK;
    size_t n = 0;
    char *text = kt_file_read(log, &n);
    kt_err_set(KT_EIO, "compiling %s failed: %.2000s", src, text ? text : "(no output)");
    free(text);
    return KT_EIO;
}

static int sym(kt_netlib_t *n, const char *name, const char *what, void **out, int required)
{
    char s[KT_NETLIB_MAX_NAME + 32];
    snprintf(s, sizeof s, "%s_%s", name, what);
    *out = dlsym(n->so, s);
    if (!*out && required)
        return kt_err_set(KT_EINVAL, "the library has no %s", s);
    return KT_OK;
}

/* The shape in "#define KEY {d0, d1, ...}" of header text h; -1 if absent. */
static int read_dims(const char *h, const char *key, int64_t *dims)
{
    const char *p = strstr(h, key);
    if (!p)
        return -1;
    p += strlen(key);
    int nd = 0;
    while (*p && *p != '}' && nd < MAX_DIMS) {
        char *e;
        long long v = strtoll(p, &e, 10);
        if (e == p)
            break;
        dims[nd++] = v;
        p = e;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return nd;
}

/* The shapes, names and types are read back from the header's macros, so
 * the handle needs no other description of the network. */
static int read_shapes(kt_netlib_t *n, const char *hpath, const char *name)
{
    size_t len = 0;
    char *h = kt_file_read(hpath, &len);
    if (!h)
        return kt_err_prefix("reading %s", hpath);
    char key[KT_NETLIB_MAX_NAME + 64];
    int rc = KT_OK;
    snprintf(key, sizeof key, "#define %s_NUM_INPUTS ", name);
    const char *p = strstr(h, key);
    n->nin = p ? atoi(p + strlen(key)) : 1;
    if (n->nin < 1 || n->nin > KT_PLAN_MAX_INPUTS)
        rc = kt_err_set(KT_EINVAL, "%s: %d inputs (1 to %d)", hpath, n->nin, KT_PLAN_MAX_INPUTS);
    for (int k = 0; k < n->nin && rc == KT_OK; k++) {
        char tag[16] = "";
        if (k)
            snprintf(tag, sizeof tag, "%d", k);
        snprintf(key, sizeof key, "#define %s_INPUT%s_SHAPE {", name, tag);
        if ((n->in_ndim[k] = read_dims(h, key, n->in_dims[k])) < 0) {
            rc = kt_err_set(KT_EINVAL, "%s has no %s", hpath, key);
            break;
        }
        snprintf(key, sizeof key, "#define %s_INPUT%s_DTYPE \"int\"", name, tag);
        n->in_int[k] = strstr(h, key) != NULL;
        snprintf(key, sizeof key, "#define %s_INPUT%s_NAME \"", name, tag);
        const char *q = strstr(h, key);
        size_t m = 0;
        for (q = q ? q + strlen(key) : NULL; q && *q && *q != '"' && m + 1 < sizeof n->in_name[k];)
            n->in_name[k][m++] = *q++;
        n->in_name[k][m] = '\0';
    }
    snprintf(key, sizeof key, "#define %s_OUTPUT_SHAPE {", name);
    if (rc == KT_OK && (n->out_ndim = read_dims(h, key, n->out_dims)) < 0)
        rc = kt_err_set(KT_EINVAL, "%s has no %s", hpath, key);
    free(h);
    return rc;
}

kt_netlib_t *kt_netlib_open(const char *dir, const char *name, int flags)
{
    char src[4096], so[4096], log[4096], hdr[4096], weights[4096];
    int check = flags & KT_NETLIB_CHECK, cuda = flags & KT_NETLIB_CUDA;
    const char *variant = cuda ? "_host" : check ? "_check" : "";
    if (check && cuda) {
        kt_err_set(KT_EUNSUP, "--check runs the CPU build's reference kernels: not for cuda");
        return NULL;
    }
    snprintf(src, sizeof src, "%s/%s%s.c", dir, name, cuda ? "_host" : "");
    snprintf(hdr, sizeof hdr, "%s/%s.h", dir, name);
    snprintf(so, sizeof so, "%s/%s%s.so", dir, name, variant);
    snprintf(log, sizeof log, "%s/%s%s.log", dir, name, variant);
    snprintf(weights, sizeof weights, "%s/%s.safetensors", dir, name);
    kt_netlib_t *n = calloc(1, sizeof(*n));
    if (!n) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    n->check = check;
    if (read_shapes(n, hdr, name) || compile(src, so, flags, log))
        goto fail;
    unlink(log);
    /* RTLD_LOCAL: two networks (or two builds of one) never share symbols. */
    n->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!n->so) {
        kt_err_set(KT_EIO, "loading %s: %s", so, dlerror());
        goto fail;
    }
    if (sym(n, name, "create", (void **)&n->create, 1) ||
        sym(n, name, "run", (void **)&n->run, 1) ||
        sym(n, name, "run_timed", (void **)&n->run_timed, 1) ||
        sym(n, name, "destroy", (void **)&n->destroy, 1) ||
        sym(n, name, "set_threads", (void **)&n->set_threads, 1) ||
        sym(n, name, "last_error", (void **)&n->last_error, 1) ||
        sym(n, name, "num_steps", (void **)&n->num_steps, 1) ||
        sym(n, name, "step_name", (void **)&n->step_name, 1) ||
        sym(n, name, "step_task", (void **)&n->step_task, 1) ||
        sym(n, name, "step_kind", (void **)&n->step_kind, 0) ||
        sym(n, name, "check", (void **)&n->check_fn, check) ||
        sym(n, name, "run_inputs", (void **)&n->run_inputs, n->nin > 1) ||
        sym(n, name, "check_inputs", (void **)&n->check_inputs, check && n->nin > 1))
        goto fail;
    n->inst = n->create(weights);
    if (!n->inst) {
        kt_err_set(KT_EINVAL, "%s", n->last_error());
        goto fail;
    }
    return n;
fail:
    kt_netlib_close(n);
    return NULL;
}

void kt_netlib_close(kt_netlib_t *n)
{
    if (!n)
        return;
    if (n->inst)
        n->destroy(n->inst);
    if (n->so)
        dlclose(n->so);
    free(n);
}

int kt_netlib_num_inputs(const kt_netlib_t *n) { return n->nin; }

int kt_netlib_input_shape(const kt_netlib_t *n, int64_t *dims)
{
    return kt_netlib_input_shape_at(n, 0, dims);
}

int kt_netlib_input_shape_at(const kt_netlib_t *n, int k, int64_t *dims)
{
    if (k < 0 || k >= n->nin)
        return -1;
    memcpy(dims, n->in_dims[k], (size_t)n->in_ndim[k] * sizeof(int64_t));
    return n->in_ndim[k];
}

int kt_netlib_input_is_int(const kt_netlib_t *n) { return kt_netlib_input_is_int_at(n, 0); }

int kt_netlib_input_is_int_at(const kt_netlib_t *n, int k)
{
    return k >= 0 && k < n->nin && n->in_int[k];
}

const char *kt_netlib_input_name(const kt_netlib_t *n, int k)
{
    return k >= 0 && k < n->nin ? n->in_name[k] : NULL;
}

int kt_netlib_output_shape(const kt_netlib_t *n, int64_t *dims)
{
    memcpy(dims, n->out_dims, (size_t)n->out_ndim * sizeof(int64_t));
    return n->out_ndim;
}

int kt_netlib_set_threads(kt_netlib_t *n, int threads)
{
    if (n->set_threads(threads) != 0)
        return kt_err_set(KT_EINVAL, "cannot run on %d threads (built without OpenMP?)",
                          threads);
    return KT_OK;
}

int kt_netlib_run(kt_netlib_t *n, const float *input, float *output, double *step_seconds)
{
    int rc = step_seconds ? n->run_timed(n->inst, input, output, step_seconds)
                          : n->run(n->inst, input, output);
    return rc == 0 ? KT_OK : kt_err_set(KT_EINVAL, "%s", n->last_error());
}

int kt_netlib_run_inputs(kt_netlib_t *n, const float *const *inputs, float *output,
                         double *step_seconds)
{
    if (n->nin == 1)
        return kt_netlib_run(n, inputs[0], output, step_seconds);
    return n->run_inputs(n->inst, inputs, output, step_seconds) == 0
               ? KT_OK
               : kt_err_set(KT_EINVAL, "%s", n->last_error());
}

int kt_netlib_check(kt_netlib_t *n, const float *input, float *output, double *step_err)
{
    return kt_netlib_check_inputs(n, &input, output, step_err);
}

int kt_netlib_check_inputs(kt_netlib_t *n, const float *const *inputs, float *output,
                           double *step_err)
{
    if (!n->check_fn)
        return kt_err_set(KT_ESTATE, "the library was not opened for checking");
    int rc = n->nin == 1 ? n->check_fn(n->inst, inputs[0], output, step_err)
                         : n->check_inputs(n->inst, inputs, output, step_err);
    return rc == 0 ? KT_OK : kt_err_set(KT_EINVAL, "%s", n->last_error());
}

int kt_netlib_num_steps(const kt_netlib_t *n) { return n->num_steps(); }
const char *kt_netlib_step_name(const kt_netlib_t *n, int i) { return n->step_name(i); }
int kt_netlib_step_task(const kt_netlib_t *n, int i) { return n->step_task(i); }
const char *kt_netlib_step_kind(const kt_netlib_t *n, int i)
{
    return n->step_kind ? n->step_kind(i) : NULL;
}
