/* A Worker/Build request as the worker decodes and validates it: protobuf-c
 * unpack, then the handler's checks (kt_build_service_check), building
 * nothing. */
#include "fuzz_common.h"
#include "ktune.pb-c.h"
#include "measure/build_service.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    Ktune__V1__BuildRequest *req = ktune__v1__build_request__unpack(NULL, size, data);
    if (!req)
        return 0;
    int bad = 0;
    kt_build_service_check(req, &bad);
    ktune__v1__build_request__free_unpacked(req, NULL);
    return 0;
}
