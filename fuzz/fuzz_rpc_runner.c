/* A Runner/Run request as the runner decodes and validates it: protobuf-c
 * unpack, then the handler's checks (kt_run_service_check), running nothing.
 * The first byte picks the runner: CPU wall clock, CPU time, or a GPU. */
#include "fuzz_common.h"
#include "ktune.pb-c.h"
#include "measure/run_service.h"

static kt_run_service_t *svc[3];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    if (!svc[0]) {
        kt_run_service_opts_t o[3] = {
            {.threads = 0, .cuda_device = -1, .timer = KT_RUNNER_TIMER_WALL},
            {.threads = 1, .cuda_device = -1, .timer = KT_RUNNER_TIMER_CPU},
            {.threads = 0, .cuda_device = 0, .timer = KT_RUNNER_TIMER_WALL}};
        for (int i = 0; i < 3; i++)
            if (!(svc[i] = kt_run_service_new(&o[i]))) {
                fprintf(stderr, "fuzz_rpc_runner: %s\n", kt_err_msg());
                abort();   /* the fixture, not the input, failed: stop loudly */
            }
    }
    if (size < 1)
        return 0;
    Ktune__V1__RunRequest *req = ktune__v1__run_request__unpack(NULL, size - 1, data + 1);
    if (!req)
        return 0;
    int bad = 0;
    kt_run_service_check(svc[data[0] % 3], req, &bad);
    ktune__v1__run_request__free_unpacked(req, NULL);
    return 0;
}
