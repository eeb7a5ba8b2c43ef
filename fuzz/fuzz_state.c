/* kt_sched_state_from_json on arbitrary text against fixed DAGs (a conv2d
 * with bias and relu, a dense layer), for the CPU and the GPU parameters. */
#include "fuzz_common.h"
#include "sched/state.h"
#include "te/workload.h"

static kt_workload_t *wl[2];
static kt_sched_params_t cpu, gpu;

static void init(void)
{
    if (wl[0])
        return;
    wl[0] = kt_workload_parse("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":8,"
                              "\"CO\":16,\"KH\":3,\"KW\":3,\"padding\":[1,1],"
                              "\"epilogue\":[\"bias_add\",\"relu\"]}");
    wl[1] = kt_workload_parse("{\"op\":\"dense\",\"M\":16,\"N\":32,\"K\":64}");
    if (!wl[0] || !wl[1]) {
        fprintf(stderr, "fuzz_state: fixture workloads: %s\n", kt_err_msg());
        abort();   /* a broken fixture, not an input: stop the run loudly */
    }
    kt_sched_params_default(&cpu);
    kt_sched_params_default_gpu(&gpu);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    init();
    if (size < 1)
        return 0;
    /* The first byte picks the DAG and the parameters. */
    const kt_dag_t *dag = kt_workload_dag(wl[data[0] & 1]);
    const kt_sched_params_t *p = data[0] & 2 ? &gpu : &cpu;
    char *s = kt_fuzz_str(data + 1, size - 1);
    if (!s)
        return 0;
    kt_sched_state_t *st = kt_sched_state_from_json(s, dag, p);
    if (st) {
        /* What it accepts must serialize again. */
        free(kt_sched_state_to_json(st, dag));
        kt_sched_state_free(st);
    }
    free(s);
    return 0;
}
