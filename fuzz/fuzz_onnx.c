/* kt_net_onnx_parse on arbitrary bytes (protobuf ModelProto). */
#include "fuzz_common.h"
#include "net/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    kt_net_free(kt_net_onnx_parse(data, size, NULL, 0, 1));
    return 0;
}
