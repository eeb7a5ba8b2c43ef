/* kt_workload_parse on arbitrary text: an error or a workload, never a crash. */
#include "fuzz_common.h"
#include "te/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    char *s = kt_fuzz_str(data, size);
    if (!s)
        return 0;
    kt_workload_free(kt_workload_parse(s));
    free(s);
    return 0;
}
