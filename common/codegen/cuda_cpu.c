/* Drivers, compilation and checking of CUDA text run on the CPU (see
 * cuda_cpu.h; the C++ side is cuda_cpu_prelude.h and cuda_cpu_runtime.cpp,
 * embedded by embed_text.py). */
#include "cuda_cpu.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"

extern const char kt_cuda_cpu_prelude_text[];
extern const char kt_cuda_cpu_runtime_text[];

const char *kt_cuda_cpu_prelude(void) { return kt_cuda_cpu_prelude_text; }
const char *kt_cuda_cpu_runtime(void) { return kt_cuda_cpu_runtime_text; }

/* The N of `__launch_bounds__(N) name(` in src; 0 when the kernel has none. */
static unsigned launch_bounds(const char *src, const char *name)
{
    static const char key[] = "__launch_bounds__(";
    size_t nl = strlen(name);
    for (const char *p = strstr(src, key); p; p = strstr(p + 1, key)) {
        char *end;
        unsigned long v = strtoul(p + sizeof(key) - 1, &end, 10);
        if (end[0] == ')' && end[1] == ' ' && strncmp(end + 2, name, nl) == 0 && end[2 + nl] == '(')
            return (unsigned)v;
    }
    return 0;
}

int kt_cuda_cpu_driver_into(const kt_dag_t *dag, const char *src, const kt_codegen_cuda_t *cu,
                            const char *entry, kt_sbuf_t *b)
{
    if (!dag || !src || !cu || !entry || !b || cu->n_launches < 1)
        return kt_err_set(KT_EINVAL, "CUDA on CPU: missing DAG, source, launches or entry");
    int nb = kt_codegen_num_bufs(dag);
    int ws = cu->workspace_bytes > 0;
    /* every kernel takes the inputs, the outputs, then the workspace */
    kt_sbuf_t params, args;
    kt_sbuf_init(&params);
    kt_sbuf_init(&args);
    for (int i = 0; i < nb + ws; i++) {
        int in = i < nb && kt_dag_stage(dag, kt_codegen_buf_stage(dag, i))->kind ==
                               KT_STAGE_PLACEHOLDER;
        kt_sbuf_printf(&params, "%s%sfloat *", i ? ", " : "", in ? "const " : "");
        kt_sbuf_printf(&args, "%sa[%d]", i ? ", " : "", i);
    }
    for (int k = 0; k < cu->n_launches; k++) {
        const char *n = cu->launches[k].name;
        kt_sbuf_printf(b, "extern \"C\" void %s(%s);\n", n, params.data ? params.data : "");
        kt_sbuf_printf(b, "static void kt_body_%s(float **a) { %s(%s); }\n", n, n,
                       args.data ? args.data : "");
    }
    kt_sbuf_printf(b, "extern \"C\" int %s(float **bufs)\n{\n", entry);
    kt_sbuf_puts(b, "    static const size_t numel[] = {");
    for (int i = 0; i < nb; i++)
        kt_sbuf_printf(b, "%s%lldu", i ? ", " : "",
                       (long long)kt_stage_numel(kt_dag_stage(dag, kt_codegen_buf_stage(dag, i))));
    kt_sbuf_puts(b, "};\n    static const int is_input[] = {");
    for (int i = 0; i < nb; i++)
        kt_sbuf_printf(b, "%s%d", i ? ", " : "",
                       kt_dag_stage(dag, kt_codegen_buf_stage(dag, i))->kind ==
                           KT_STAGE_PLACEHOLDER);
    kt_sbuf_puts(b, "};\n    static const kt_cuda_cpu_launch launches[] = {\n");
    for (int k = 0; k < cu->n_launches; k++) {
        const kt_codegen_launch_t *l = &cu->launches[k];
        kt_sbuf_printf(b, "        {\"%s\", {%uu, %uu, %uu}, {%uu, %uu, %uu}, %uu, kt_body_%s},\n",
                       l->name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                       l->block[2], launch_bounds(src, l->name), l->name);
    }
    kt_sbuf_printf(b, "    };\n    return kt_cuda_cpu_run(bufs, %d, numel, is_input, %zuu, launches, "
                      "%d);\n}\n\n",
                   nb, cu->workspace_bytes, cu->n_launches);
    int failed = params.failed || args.failed;
    kt_sbuf_free(&params);
    kt_sbuf_free(&args);
    if (failed)
        b->failed = 1;
    return kt_sbuf_ok(b);
}

int kt_cuda_cpu_compile(const char *src, const char *driver, const char *so_path, char **log)
{
    if (log)
        *log = NULL;
    if (!src || !driver || !so_path)
        return kt_err_set(KT_EINVAL, "CUDA on CPU: no source, driver or output");
    kt_codegen_file_t files[] = {
        {.name = "cuda_cpu_prelude.h", .text = kt_cuda_cpu_prelude(), .include = 1},
        {.name = "kernel.cu", .text = src, .include = 0},
        {.name = "driver.cpp", .text = driver, .include = 0},
    };
    int rc = kt_codegen_compile_files("KT_CXX", KT_CUDA_CPU_CXX, files, 3, KT_CUDA_CPU_CXXFLAGS,
                                      so_path, log);
    return rc ? kt_err_prefix("CUDA on CPU") : 0;
}

int kt_cuda_cpu_check(kt_codegen_ref_t *ref, const kt_dag_t *dag, const kt_codegen_cuda_t *cu,
                      const char *entry, double *max_rel_err)
{
    if (max_rel_err)
        *max_rel_err = INFINITY;
    if (!ref || !cu || !cu->src)
        return kt_err_set(KT_EINVAL, "CUDA on CPU: no checker or source");
    kt_sbuf_t drv;
    kt_sbuf_init(&drv);
    kt_sbuf_puts(&drv, kt_cuda_cpu_runtime());
    int rc = kt_cuda_cpu_driver_into(dag, cu->src, cu, entry, &drv);
    if (rc) {
        kt_sbuf_free(&drv);
        return rc;
    }
    const char *base = getenv("TMPDIR");
    char dir[512], so[600];
    snprintf(dir, sizeof(dir), "%s/ktune-cucpu-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        kt_sbuf_free(&drv);
        return kt_err_set(KT_EIO, "cannot create a temp directory: %s", strerror(errno));
    }
    snprintf(so, sizeof(so), "%s/cuda_cpu.so", dir);
    rc = kt_cuda_cpu_compile(cu->src, drv.data, so, NULL);
    if (!rc)
        rc = kt_codegen_ref_check_so(ref, so, entry, max_rel_err);
    unlink(so);
    rmdir(dir);
    kt_sbuf_free(&drv);
    return rc;
}
