/* ktune kernel: sample schedules of a workload, print their loop nests and
 * C or CUDA source, and verify them against the reference kernel (CUDA:
 * compiled with NVRTC, the same text run on the CPU, and on the GPU when
 * there is one). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "codegen/codegen.h"
#include "codegen/cuda_cpu.h"
#include "codegen/lower.h"
#include "codegen/verify.h"
#include "feature/feature.h"
#include "measure/cuda_runner.h"
#include "measure/hw_params.h"
#include "measure/nvrtc.h"
#include "search/search.h"
#include "sched/state.h"
#include "te/workload.h"
#include "util/err.h"
#include "util/rng.h"
#include "util/util.h"

#define ENTRY "ktune_kernel"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune kernel sample --workload <file-or-json> [--target cpu|cuda]\n"
            "                           [--arch sm_XY] [--hw key=value,...] [-n N]\n"
            "                           [--seed S] [--verify] [--print]\n"
            "       ktune kernel show --workload <file-or-json> [--target cpu|cuda]\n"
            "                         [--arch sm_XY] [--hw key=value,...]\n"
            "                         (--state <json-or-file> [--emulation] | --reference)\n"
            "\n"
            "sample  draws N random schedules (states) of each workload from its sketches;\n"
            "        --print shows each loop nest, --verify compiles each and compares its\n"
            "        answers with the reference kernel (max relative error <= %g) and ends\n"
            "        with 'P passed, F failed' (exit 1 if any failed).\n"
            "        --target cuda samples GPU states within the limits of --arch (a preset:\n"
            "        sm_70 ... sm_90, default %s) and the --hw overrides; --verify then\n"
            "        compiles every kernel with NVRTC for the arch, runs that CUDA text on\n"
            "        the CPU (g++, threads of a block as fibers) against the reference and,\n"
            "        when this machine has a GPU, also runs the kernels on it. Without\n"
            "        NVRTC the kernels are counted as unverified (exit 1).\n"
            "show    prints the C source of one state (its JSON as printed by sample), the\n"
            "        CUDA source of a GPU state (--emulation: its CPU emulation), or the\n"
            "        naive reference kernel.\n"
            "features prints the cost-model features of one state\n"
            "        (ktune kernel features --help).\n"
            "measure builds and times one state or N random states on this machine\n"
            "        (ktune kernel measure --help).\n",
            KT_CODEGEN_MAX_REL_ERR, KT_NVRTC_DEFAULT_ARCH);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ktune kernel: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'ktune kernel --help' for usage.\n");
    return 2;
}

typedef struct {
    const char *workload, *target, *state, *arch, *hw;
    long n;
    uint64_t seed;
    int verify, print, reference, emulation;
    int target_set, cuda;
    kt_sched_params_t params;   /* for the target, arch and overrides */
} opts_t;

/* Most states one sample command draws: enough for any study, and a typo of
 * a few more digits is refused rather than run for days. */
#define MAX_SAMPLES 1000000

static int target_params(opts_t *o);

/* Options shared by both subcommands; returns 0, or the exit status. */
static int parse_opts(int argc, char **argv, int sample, opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->target = "cpu";
    o->n = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if (strcmp(a, "--workload") == 0 || strcmp(a, "-w") == 0) {
            o->workload = v;
        } else if (strcmp(a, "--target") == 0) {
            o->target = v;
            o->target_set = 1;
        } else if (strcmp(a, "--arch") == 0) {
            o->arch = v;
        } else if (strcmp(a, "--hw") == 0) {
            if (v && kt_cli_nonempty("kernel", "--hw", v))
                return 2;
            o->hw = v;
        } else if (sample && strcmp(a, "-n") == 0) {
            long long n = 0;
            if (v && kt_cli_parse_num("kernel", "-n", v, 1, MAX_SAMPLES, &n))
                return 2;
            o->n = (long)n;
        } else if (sample && strcmp(a, "--seed") == 0) {
            long long seed = 0;
            if (v && kt_cli_parse_num("kernel", "--seed", v, 0, INT64_MAX, &seed))
                return 2;
            o->seed = (uint64_t)seed;
        } else if (!sample && strcmp(a, "--state") == 0) {
            o->state = v;
        } else {
            takes = 0;
            if (sample && strcmp(a, "--verify") == 0)
                o->verify = 1;
            else if (sample && strcmp(a, "--print") == 0)
                o->print = 1;
            else if (!sample && strcmp(a, "--reference") == 0)
                o->reference = 1;
            else if (!sample && strcmp(a, "--emulation") == 0)
                o->emulation = 1;
            else
                return usage_error("unknown option '%s'", a);
        }
        if (takes) {
            if (!v)
                return usage_error("%s needs a value", a);
            i++;
        }
    }
    if (!o->workload)
        return usage_error("%s", "--workload is required");
    if (strcmp(o->target, "cpu") != 0 && strcmp(o->target, "cuda") != 0)
        return usage_error("target '%s' is not supported (cpu or cuda)", o->target);
    o->cuda = strcmp(o->target, "cuda") == 0;
    if (!o->cuda && o->arch)
        return usage_error("%s", "--arch needs --target cuda");
    if (!sample && !!o->state == o->reference)
        return usage_error("%s", "show needs exactly one of --state and --reference");
    if (o->emulation && !o->state)
        return usage_error("%s", "--emulation needs --state");
    return target_params(o);
}

/* o->params from o->cuda, o->arch and o->hw; 0, or the exit status. */
static int target_params(opts_t *o)
{
    /* the schedule parameters: a preset, then the overrides */
    kt_hw_params_t hw;
    if (!o->cuda && !o->hw) {
        kt_sched_params_default(&o->params);   /* this host, as before */
        return 0;
    }
    if (!o->arch)
        o->arch = KT_NVRTC_DEFAULT_ARCH;
    if (kt_hw_params_preset(o->cuda ? o->arch : "cpu", &hw) != 0)
        return kt_cli_fail("--arch");
    if (o->hw && kt_hw_params_override(&hw, o->hw) != 0)
        return kt_cli_fail("--hw");
    if (kt_sched_params_from_hw(&hw, &o->params) != 0)
        return kt_cli_fail("--hw");
    return 0;
}

/* ---- GPU verification ---------------------------------------------------------------- */

/* What --verify of GPU states needs once per run: the GPU, if any. */
typedef struct {
    kt_cuda_runner_t *cr;       /* NULL: no GPU here */
    char device_arch[KT_HW_ARCH_LEN];
} gpu_t;

static void gpu_open(gpu_t *g, uint64_t seed)
{
    memset(g, 0, sizeof(*g));
    kt_cuda_runner_opts_t o;
    kt_cuda_runner_opts_default(&o);
    o.run.number = 1;
    o.run.repeat = 1;
    o.run.min_repeat_ms = 0;
    o.run.seed = seed;
    g->cr = kt_cuda_runner_new(&o);
    if (!g->cr) {
        printf("no GPU here (%s): checking answers by running the CUDA text on the CPU\n",
               kt_err_msg());
        kt_err_clear();
        return;
    }
    const kt_hw_params_t *hw = kt_cuda_runner_hw_params(g->cr);
    snprintf(g->device_arch, sizeof(g->device_arch), "%s", hw->arch);
    printf("GPU %s (%s): running the kernels on it, and the CUDA text on the CPU too\n",
           hw->name, hw->arch);
}

/* The reference kernel as a shared object's bytes (the runner's reference
 * artifact); NULL with kt_err on failure. */
static char *reference_so(const kt_dag_t *dag, size_t *len)
{
    char dir[] = "/tmp/ktune-kernel-XXXXXX";
    if (!mkdtemp(dir)) {
        kt_err_set(KT_EIO, "cannot create a temp directory");
        return NULL;
    }
    char path[64];
    snprintf(path, sizeof(path), "%s/ref.so", dir);
    char *src = kt_codegen_reference_c(dag, "kt_reference");
    char *bytes = NULL;
    if (src && kt_codegen_compile(src, path, NULL) == 0)
        bytes = kt_file_read(path, len);
    free(src);
    unlink(path);
    rmdir(dir);
    return bytes;
}

/* Run the kernels of cu (compiled into cubin) on the GPU against the
 * reference; 0 with *err, or negative with kt_err. */
static int gpu_run(gpu_t *g, const kt_dag_t *dag, const char *ref, size_t ref_len,
                   const kt_nvrtc_result_t *cubin, const kt_codegen_cuda_t *cu, double *err)
{
    kt_run_input_t in;
    memset(&in, 0, sizeof(in));
    kt_cuda_launch_t launches[KT_RUNNER_MAX_LAUNCHES];
    if (cu->n_launches > KT_RUNNER_MAX_LAUNCHES)
        return kt_err_set(KT_EUNSUP, "%d kernels: the runner launches at most %d",
                          cu->n_launches, KT_RUNNER_MAX_LAUNCHES);
    for (int i = 0; i < cu->n_launches; i++) {
        const kt_codegen_launch_t *l = &cu->launches[i];
        launches[i] = (kt_cuda_launch_t){.name = l->name, .shared_bytes = 0};
        memcpy(launches[i].grid, l->grid, sizeof(l->grid));
        memcpy(launches[i].block, l->block, sizeof(l->block));
    }
    in.target = KT_MEASURE_TARGET_CUDA;
    in.prog = (kt_artifact_t){.data = cubin->cubin, .len = cubin->cubin_len,
                              .entry = cu->launches[0].name};
    in.ref = (kt_artifact_t){.data = ref, .len = ref_len, .entry = "kt_reference"};
    if (kt_search_buf_layout(dag, &in.layout) < 0)
        return -1;
    in.launches = launches;
    in.n_launches = cu->n_launches;
    in.workspace_bytes = cu->workspace_bytes;
    kt_measure_result_t res;
    memset(&res, 0, sizeof(res));
    int rc = kt_runner_run(kt_cuda_runner_runner(g->cr), &in, 1, &res);
    if (rc == 0 && res.error_no != KT_MEASURE_NO_ERROR)
        rc = kt_err_set(KT_EINVAL, "%s: %s", kt_measure_error_name(res.error_no),
                        res.error_msg ? res.error_msg : "");
    *err = res.max_error;
    kt_measure_result_clear(&res);
    return rc;
}

/* What verify_gpu found. */
enum { GPU_FAILED, GPU_PASSED, GPU_UNVERIFIED };

/* Verify one GPU state: NVRTC for the arch (errors and warnings fail), the
 * exact CUDA text NVRTC compiled run on the CPU against the reference
 * (cuda_cpu.h), and the GPU run when there is one. The CPU emulation
 * printed from the same lowering (emit_cuda_emu.c) is not run: the CUDA
 * text run on the CPU checks everything it checks and the printer too.
 * A kernel NVRTC could not compile (a build without CUDA) is UNVERIFIED,
 * whatever the CPU run says: what would run on a GPU was never built.
 * Prints the state's line. */
static int verify_gpu(const opts_t *o, gpu_t *g, const kt_dag_t *dag, kt_codegen_ref_t *ref,
                      const char *ref_so, size_t ref_len, const kt_sched_state_t *st, long i)
{
    kt_codegen_cuda_t cu;
    if (kt_codegen_emit_cuda(dag, st, ENTRY, &cu) != 0) {
        printf("state %ld: FAILED: %s\n", i, kt_err_msg());
        return GPU_FAILED;
    }
    int ok = 1, compiled = 0;
    kt_sbuf_t line;
    kt_sbuf_init(&line);
    kt_nvrtc_result_t r;
    /* NVRTC in a child: after a compile in this process, the runner's
     * measuring processes forked from it could not initialize CUDA. */
    int rc = kt_nvrtc_compile_isolated(cu.src, o->arch, NULL, 0, &r);
    if (rc == KT_EUNSUP) {
        kt_sbuf_printf(&line, "; not compiled by NVRTC (%s)", kt_err_msg());
    } else if (rc != 0) {
        kt_sbuf_printf(&line, "; NVRTC %s: %s", o->arch, kt_err_msg());
        ok = 0;
    } else if (r.log && strstr(r.log, "warning")) {
        kt_sbuf_printf(&line, "; NVRTC %s warns:\n%s", o->arch, r.log);
        ok = 0;
    } else {
        compiled = 1;
        kt_sbuf_printf(&line, "; NVRTC %s:", o->arch);
        for (int k = 0; k < r.n_kernels; k++)
            kt_sbuf_printf(&line, " %s %d regs %d B spilled %d B smem", r.kernels[k].name,
                           r.kernels[k].registers, r.kernels[k].spill_store_bytes,
                           r.kernels[k].static_smem_bytes);
    }
    double err = 0;
    if (kt_cuda_cpu_check(ref, dag, &cu, ENTRY, &err) != 0) {
        printf("state %ld: FAILED: CUDA on CPU: %s%s\n", i, kt_err_msg(),
               line.data ? line.data : "");
        ok = 0;
    } else {
        kt_sbuf_t gl;
        kt_sbuf_init(&gl);
        if (g->cr && ok && compiled) {
            /* the device's own architecture: a cubin runs only there */
            kt_nvrtc_result_t dr;
            int same = strcmp(g->device_arch, o->arch) == 0;
            int drc = same ? 0
                          : kt_nvrtc_compile_isolated(cu.src, g->device_arch, NULL, 0, &dr);
            double gerr = 0;
            if (drc == 0 && gpu_run(g, dag, ref_so, ref_len, same ? &r : &dr, &cu, &gerr) == 0) {
                kt_sbuf_printf(&gl, "; GPU %s max error %.3g", g->device_arch, gerr);
            } else {
                kt_sbuf_printf(&gl, "; GPU %s: %s", g->device_arch, kt_err_msg());
                ok = 0;
            }
            if (!same && drc == 0)
                kt_nvrtc_result_clear(&dr);
        }
        printf("state %ld: %s (CUDA on CPU: max relative error %.3g%s%s)\n", i,
               !ok ? "FAILED" : compiled ? "ok" : "UNVERIFIED", err, gl.data ? gl.data : "",
               line.data ? line.data : "");
        kt_sbuf_free(&gl);
    }
    if (rc == 0)
        kt_nvrtc_result_clear(&r);
    kt_sbuf_free(&line);
    kt_codegen_cuda_clear(&cu);
    return !ok ? GPU_FAILED : compiled ? GPU_PASSED : GPU_UNVERIFIED;
}

/* Sample and optionally verify n states of one workload; adds to the counts. */
static int sample_one(const kt_workload_t *w, const opts_t *o, gpu_t *g, kt_rng_t *rng,
                      long *passed, long *failed, long *unverified)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_params_t p = o->params;
    kt_sched_state_t **sk = NULL;
    int nsk = 0;
    if (kt_sched_sketches(dag, &p, &sk, &nsk) != 0 || nsk == 0) {
        if (nsk == 0 && kt_err_code() == KT_OK)
            kt_err_set(KT_EINTERNAL, "no sketch");
        return kt_cli_fail("generating sketches");
    }
    printf("workload %s\n%s (%d sketches, %.0f flops)\n", kt_workload_key(w),
           kt_workload_json(w), nsk, kt_workload_flops(w));
    if (o->cuda)
        printf("target cuda %s: at most %d threads and %d bytes of shared memory per block, "
               "vthread extent %d\n",
               o->arch, p.max_threads_per_block, p.max_shared_memory_per_block,
               p.max_vthread_extent);
    kt_codegen_ref_t *ref = NULL;
    char *ref_so = NULL;
    size_t ref_len = 0;
    int rc = 0;
    if (o->verify) {
        ref = kt_codegen_ref_new(dag, o->seed);
        if (!ref)
            rc = kt_cli_fail("building the reference kernel");
        if (!rc && g->cr && !(ref_so = reference_so(dag, &ref_len)))
            rc = kt_cli_fail("building the reference kernel");
    }
    for (long i = 0; rc == 0 && i < o->n; i++) {
        int which = (int)kt_rng_below(rng, (uint64_t)nsk);
        kt_sched_state_t *st = kt_sched_sample(dag, &p, sk[which], rng);
        if (!st) {
            printf("state %ld: sketch %d: FAILED: sampling: %s\n", i, which, kt_err_msg());
            (*failed)++;
            continue;
        }
        char *json = kt_sched_state_to_json(st, dag);
        printf("state %ld: sketch %d: %016" PRIx64 " %s\n", i, which,
               kt_sched_state_hash(st, dag), json ? json : "?");
        free(json);
        if (o->print) {
            char *nest = kt_sched_state_print(dag, st);
            printf("%s", nest ? nest : "(cannot print the loop nest)\n");
            free(nest);
        }
        if (o->verify && o->cuda) {
            int v = verify_gpu(o, g, dag, ref, ref_so, ref_len, st, i);
            (*(v == GPU_PASSED ? passed : v == GPU_FAILED ? failed : unverified))++;
        } else if (o->verify) {
            double err = 0;
            char *src = kt_codegen_emit_c(dag, st, ENTRY);
            int crc = src ? kt_codegen_ref_check(ref, src, ENTRY, &err) : KT_EINVAL;
            if (crc == 0) {
                printf("state %ld: ok (max relative error %.3g)\n", i, err);
                (*passed)++;
            } else {
                printf("state %ld: FAILED: %s\n", i, kt_err_msg());
                (*failed)++;
            }
            free(src);
        }
        fflush(stdout);
        kt_sched_state_free(st);
    }
    kt_codegen_ref_free(ref);
    free(ref_so);
    for (int i = 0; i < nsk; i++)
        kt_sched_state_free(sk[i]);
    free(sk);
    return rc;
}

static int cmd_sample(int argc, char **argv)
{
    opts_t o;
    int rc = parse_opts(argc, argv, 1, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kt_workload_t **ws;
    double *weights;
    int n;
    if (kt_workload_load(o.workload, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    kt_rng_t rng;
    kt_rng_seed(&rng, o.seed);
    long passed = 0, failed = 0, unverified = 0;
    gpu_t g = {0};
    if (o.verify && o.cuda) {
        /* an architecture NVRTC refuses fails every state: say so once */
        int arc = kt_nvrtc_check_arch(o.arch);
        if (arc != 0 && arc != KT_EUNSUP) {
            rc = kt_cli_fail("--arch");
        } else {
            if (arc == KT_EUNSUP)
                printf("NVRTC unavailable (%s): no kernel can be compiled for the GPU, so none "
                       "is verified (the CUDA text still runs on the CPU)\n", kt_err_msg());
            gpu_open(&g, o.seed);
        }
    }
    for (int i = 0; rc == 0 && i < n; i++)
        rc = sample_one(ws[i], &o, &g, &rng, &passed, &failed, &unverified);
    kt_cuda_runner_free(g.cr);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    if (rc)
        return rc;
    if (o.verify && unverified)
        printf("%ld passed, %ld failed, %ld unverified (not compiled by NVRTC)\n", passed, failed,
               unverified);
    else if (o.verify)
        printf("%ld passed, %ld failed\n", passed, failed);
    return failed || unverified ? 1 : 0;
}

static int cmd_show(int argc, char **argv)
{
    opts_t o;
    int rc = parse_opts(argc, argv, 0, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kt_workload_t **ws;
    double *weights;
    int n;
    if (kt_workload_load(o.workload, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    char *src = NULL;
    if (n != 1) {
        kt_err_set(KT_EINVAL, "holds %d workloads; show takes one", n);
        rc = kt_cli_fail("--workload");
    } else if (o.reference) {
        src = kt_codegen_reference_c(kt_workload_dag(ws[0]), ENTRY);
        if (!src)
            rc = kt_cli_fail("reference kernel");
    } else {
        const char *p = o.state;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        char *text = *p == '{' ? kt_strdup(p) : kt_file_read(o.state, NULL);
        const kt_dag_t *dag = kt_workload_dag(ws[0]);
        kt_sched_state_t *st = text ? kt_sched_state_from_json(text, dag, &o.params) : NULL;
        free(text);
        kt_codegen_cuda_t cu = {0};
        if (!st) {
            rc = kt_cli_fail("--state");
        } else if (st->target == KT_SCHED_TARGET_CUDA && o.target_set && !o.cuda) {
            kt_err_set(KT_EINVAL, "the state is for target cuda");
            rc = kt_cli_fail("--state");
        } else if (st->target != KT_SCHED_TARGET_CUDA && (o.cuda || o.emulation)) {
            kt_err_set(KT_EINVAL, "the state is for target cpu");
            rc = kt_cli_fail("--state");
        } else if (st->target != KT_SCHED_TARGET_CUDA) {
            if (!(src = kt_codegen_emit_c(dag, st, ENTRY)))
                rc = kt_cli_fail("generating C");
        } else if (o.emulation) {
            if (!(src = kt_codegen_emit_cuda_emu(dag, st, ENTRY)))
                rc = kt_cli_fail("generating the CPU emulation");
        } else if (kt_codegen_emit_cuda(dag, st, ENTRY, &cu) != 0) {
            rc = kt_cli_fail("generating CUDA");
        } else {
            /* the launches first, as comments the source keeps compiling with */
            kt_sbuf_t b;
            kt_sbuf_init(&b);
            for (int k = 0; k < cu.n_launches; k++)
                kt_sbuf_printf(&b, "// launch %s: grid (%u, %u, %u), block (%u, %u, %u), %u bytes "
                                   "of shared memory (stage %s)\n",
                               cu.launches[k].name, cu.launches[k].grid[0], cu.launches[k].grid[1],
                               cu.launches[k].grid[2], cu.launches[k].block[0],
                               cu.launches[k].block[1], cu.launches[k].block[2],
                               cu.launches[k].smem_bytes,
                               kt_dag_stage(dag, cu.launches[k].stage)->name);
            if (cu.workspace_bytes)
                kt_sbuf_printf(&b, "// workspace: %zu bytes, passed last to every kernel\n",
                               cu.workspace_bytes);
            kt_sbuf_puts(&b, cu.src);
            src = kt_sbuf_take(&b);
            if (!src)
                rc = kt_cli_fail("generating CUDA");
        }
        kt_codegen_cuda_clear(&cu);
        kt_sched_state_free(st);
    }
    if (src)
        fputs(src, stdout);
    free(src);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    return rc;
}

/* ktune kernel features --workload W --state S [--target T [--arch A] [--hw H]]
 * [--json]: the cost-model features of one state, one row per stored buffer. */
static int cmd_features(int argc, char **argv)
{
    const char *wl = NULL, *state = NULL;
    int as_json = 0;
    opts_t o;
    memset(&o, 0, sizeof(o));
    o.target = "cpu";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            as_json = 1;
        } else if ((strcmp(argv[i], "--workload") == 0 || strcmp(argv[i], "-w") == 0) &&
                   i + 1 < argc) {
            wl = argv[++i];
        } else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            state = argv[++i];
        } else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc) {
            o.target = argv[++i];
            o.target_set = 1;
        } else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
            o.arch = argv[++i];
        } else if (strcmp(argv[i], "--hw") == 0 && i + 1 < argc) {
            o.hw = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: ktune kernel features --workload <file-or-json> --state <json-or-file>\n"
                   "                             [--target cpu|cuda] [--arch sm_XY] "
                   "[--hw key=value,...] [--json]\n\n"
                   "prints the cost-model features of one state: one row per buffer the loop "
                   "nest\nstores (%d values; the nonzero ones by name, or all as JSON). A GPU "
                   "state (as\nsampled with --target cuda) is checked against the limits of "
                   "--arch (default %s)\nand the --hw overrides; --target, when given, must "
                   "be the state's.\n", KT_FEATURE_COUNT, KT_NVRTC_DEFAULT_ARCH);
            return 0;
        } else {
            return usage_error("features: bad or incomplete option '%s'", argv[i]);
        }
    }
    if (!wl || !state)
        return usage_error("%s", "features needs --workload and --state");
    if (strcmp(o.target, "cpu") != 0 && strcmp(o.target, "cuda") != 0)
        return usage_error("target '%s' is not supported (cpu or cuda)", o.target);
    o.cuda = strcmp(o.target, "cuda") == 0;
    if (!o.cuda && o.arch)
        return usage_error("%s", "--arch needs --target cuda");
    int prc = target_params(&o);
    if (prc)
        return prc;
    kt_workload_t **ws;
    double *weights;
    int n, rc = 0;
    if (kt_workload_load(wl, &ws, &weights, &n) != 0)
        return kt_cli_fail("--workload");
    const kt_dag_t *dag = n == 1 ? kt_workload_dag(ws[0]) : NULL;
    const char *p = state;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = !dag ? NULL : *p == '{' ? kt_strdup(p) : kt_file_read(state, NULL);
    /* GPU states are checked against the --arch limits; CPU states as before */
    kt_sched_state_t *st = text ? kt_sched_state_from_json(text, dag, o.cuda ? &o.params : NULL)
                                : NULL;
    if (st && o.target_set && (st->target == KT_SCHED_TARGET_CUDA) != o.cuda) {
        kt_err_set(KT_EINVAL, "a %s state, but --target %s",
                   st->target == KT_SCHED_TARGET_CUDA ? "cuda" : "cpu", o.target);
        kt_sched_state_free(st);
        st = NULL;
    }
    kt_lower_t *L = st ? kt_lower_ex(dag, st, 1) : NULL;   /* as kt_feature_extract */
    float *rows = NULL;
    uint32_t nrows = 0;
    int *rb = NULL;
    if (!dag) {
        kt_err_set(KT_EINVAL, "holds %d workloads; features takes one", n);
        rc = kt_cli_fail("--workload");
    } else if (!st) {
        rc = kt_cli_fail("--state");
    } else if (!L || kt_feature_extract_lower(dag, st, L, &rows, &nrows, &rb) != 0) {
        rc = kt_cli_fail("extracting features");
    }
    json_t *out = rc || !as_json ? NULL : json_pack("{s:i, s:[], s:[]}", "count", KT_FEATURE_COUNT,
                                                     "names", "rows");
    for (int f = 0; out && f < KT_FEATURE_COUNT; f++)
        json_array_append_new(json_object_get(out, "names"), json_string(kt_feature_name(f)));
    for (uint32_t r = 0; rc == 0 && r < nrows; r++) {
        const float *v = rows + (size_t)r * KT_FEATURE_COUNT;
        const kt_lower_buf_t *b = &L->bufs[rb[r]];
        json_t *vals = out ? json_array() : NULL;
        if (!out)
            printf("row %u: stores %s (stage %s)\n", r, b->label,
                   kt_dag_stage(dag, b->stage)->name);
        for (int f = 0; f < KT_FEATURE_COUNT; f++) {
            if (vals)
                json_array_append_new(vals, json_real(v[f]));
            else if (v[f] != 0)
                printf("  %-32s %.6g\n", kt_feature_name(f), v[f]);
        }
        if (out)
            json_array_append_new(json_object_get(out, "rows"),
                                  json_pack("{s:s, s:s, s:o}", "buffer", b->label, "stage",
                                            kt_dag_stage(dag, b->stage)->name, "values", vals));
    }
    if (out) {
        char *js = json_dumps(out, JSON_COMPACT);
        if (js)
            printf("%s\n", js);
        else
            rc = kt_cli_fail("printing JSON");
        free(js);
        json_decref(out);
    }
    free(rows);
    free(rb);
    kt_lower_free(L);
    kt_sched_state_free(st);
    free(text);
    for (int i = 0; i < n; i++)
        kt_workload_free(ws[i]);
    free(ws);
    free(weights);
    return rc;
}

int kt_cli_kernel(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "sample") == 0)
        return cmd_sample(argc, argv);
    if (strcmp(argv[1], "show") == 0)
        return cmd_show(argc, argv);
    if (strcmp(argv[1], "features") == 0)
        return cmd_features(argc, argv);
    if (strcmp(argv[1], "measure") == 0)
        return kt_cli_kernel_measure(argc, argv);
    return usage_error("unknown subcommand '%s'", argv[1]);
}
