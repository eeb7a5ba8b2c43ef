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

/* The kernels cuModuleGetFunction can find by name: `extern "C" __global__
 * void [__launch_bounds__(N)] NAME(`. Appends each NAME to b as a table
 * entry; returns how many, or -1 on a malformed declaration. */
static int module_table(const char *src, kt_sbuf_t *b)
{
    static const char key[] = "extern \"C\" __global__ void ";
    int n = 0;
    for (const char *p = strstr(src, key); p; p = strstr(p + 1, key)) {
        const char *q = p + sizeof(key) - 1;
        if (strncmp(q, "__launch_bounds__(", 18) == 0) {
            q = strchr(q, ')');
            if (!q)
                return -1;
            q++;
            while (*q == ' ')
                q++;
        }
        size_t len = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (len == 0 || len > 200 || q[len] != '(')
            return -1;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)len, q);
        kt_sbuf_printf(b, "    {\"%s\", {1u, 1u, 1u}, {1u, 1u, 1u}, %uu, kt_cuda_cpu_module::body<%s>},\n",
                       name, launch_bounds(src, name), name);
        n++;
    }
    return n;
}

int kt_cuda_cpu_module_into(const char *src, kt_sbuf_t *b)
{
    if (!src || !b)
        return kt_err_set(KT_EINVAL, "CUDA on CPU: no module source");
    kt_sbuf_t table;
    kt_sbuf_init(&table);
    int n = module_table(src, &table);
    if (n <= 0 || kt_sbuf_ok(&table) != KT_OK) {
        kt_sbuf_free(&table);
        return n < 0 ? kt_err_set(KT_EINVAL, "CUDA on CPU: a malformed extern \"C\" __global__ "
                                             "declaration")
                     : n == 0 ? kt_err_set(KT_EINVAL, "CUDA on CPU: no extern \"C\" __global__ "
                                                      "kernel in the module")
                              : kt_err_set(KT_ENOMEM, "out of memory");
    }
    kt_sbuf_puts(b, src);
    kt_sbuf_puts(b,
        "\n\n/* ---- the module's kernel table (cuda_cpu.c) ---- */\n"
        "#include <stddef.h>\n#include <stdio.h>\n#include <utility>\n#include <type_traits>\n\n"
        "struct kt_cuda_cpu_launch {\n    const char *name;\n    unsigned grid[3], block[3];\n"
        "    unsigned bounds;\n    void (*body)(float **args);\n};\n"
        "extern \"C\" int kt_cuda_cpu_launch_params(const kt_cuda_cpu_launch *l, void **params,\n"
        "                                         char *msg, size_t cap);\n\n"
        "namespace kt_cuda_cpu_module {\n"
        "/* Each parameter read from its own slot as its own type: the layout\n"
        " * comes from the kernel's signature, as in CUDA's launch. */\n"
        "template <class... A, size_t... I>\n"
        "void call(void (*f)(A...), void **p, std::index_sequence<I...>)\n{\n"
        "    f(*static_cast<std::remove_cv_t<A> *>(p[I])...);\n}\n"
        "template <class... A>\nvoid call(void (*f)(A...), void **p)\n{\n"
        "    call(f, p, std::index_sequence_for<A...>{});\n}\n"
        "template <auto F>\nvoid body(float **a)\n{\n"
        "    call(F, reinterpret_cast<void **>(a));\n}\n"
        "const kt_cuda_cpu_launch kernels[] = {\n");
    kt_sbuf_puts(b, table.data);
    kt_sbuf_printf(b,
        "};\nconstexpr int nkernels = %d;\n} // namespace kt_cuda_cpu_module\n\n"
        "extern \"C\" int kt_cuda_cpu_module_find(const char *name)\n{\n"
        "    for (int k = 0; k < kt_cuda_cpu_module::nkernels; k++)\n"
        "        if (strcmp(kt_cuda_cpu_module::kernels[k].name, name) == 0)\n"
        "            return k;\n    return -1;\n}\n\n"
        "extern \"C\" int kt_cuda_cpu_module_launch(int k, const unsigned grid[3],\n"
        "                                         const unsigned block[3], void **params,\n"
        "                                         char *msg, size_t cap)\n{\n"
        "    if (k < 0 || k >= kt_cuda_cpu_module::nkernels) {\n"
        "        snprintf(msg, cap, \"no kernel %%d in the module\", k);\n        return 1;\n    }\n"
        "    kt_cuda_cpu_launch l = kt_cuda_cpu_module::kernels[k];\n"
        "    for (int d = 0; d < 3; d++) {\n        l.grid[d] = grid[d];\n"
        "        l.block[d] = block[d];\n    }\n"
        "    return kt_cuda_cpu_launch_params(&l, params, msg, cap);\n}\n",
        n);
    kt_sbuf_free(&table);
    return kt_sbuf_ok(b);
}

int kt_cuda_cpu_module_compile(const char *src, const char *so_path, char **log)
{
    if (log)
        *log = NULL;
    if (!src || !so_path)
        return kt_err_set(KT_EINVAL, "CUDA on CPU: no module source or output");
    kt_sbuf_t mod;
    kt_sbuf_init(&mod);
    int rc = kt_cuda_cpu_module_into(src, &mod);
    if (rc) {
        kt_sbuf_free(&mod);
        return rc;
    }
    rc = kt_cuda_cpu_compile(mod.data, kt_cuda_cpu_runtime(), so_path, log);
    kt_sbuf_free(&mod);
    return rc;
}
