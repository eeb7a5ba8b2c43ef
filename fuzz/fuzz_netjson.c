/* kt_net_parse_json on arbitrary network-file text, then task extraction
 * from what it accepts (extraction trusts the parsed network). */
#include "fuzz_common.h"
#include "net/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    char *s = kt_fuzz_str(data, size);
    if (!s)
        return 0;
    kt_net_t *net = kt_net_parse_json(s);
    if (net) {
        for (int i = 0; i < kt_net_num_layers(net) && i < 64; i++) {
            int64_t dims[KT_NET_MAX_DIMS];
            kt_net_layer_shape(net, i, dims);
        }
    }
    kt_net_free(net);
    free(s);
    return 0;
}
