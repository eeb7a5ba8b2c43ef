/* kt_safetensors_open on arbitrary file contents (through a memfd), then
 * every tensor it accepts read to its last element. */
#include "fuzz_common.h"
#include "tensorio/tensorio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    char path[64];
    int fd = kt_fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    kt_safetensors_t *st = kt_safetensors_open(path);
    if (st) {
        for (int i = 0; i < kt_safetensors_count(st); i++) {
            const char *name = kt_safetensors_name(st, i);
            int64_t dims[8];
            int ndim = 0;
            const float *x = name ? kt_safetensors_get(st, name, dims, &ndim) : NULL;
            int64_t n = 1;
            for (int k = 0; x && k < ndim; k++)
                n *= dims[k];
            volatile float sum = 0;
            for (int64_t k = 0; x && k < n; k++)
                sum += x[k];
        }
        kt_safetensors_metadata(st, "format");
        kt_safetensors_close(st);
    }
    close(fd);
    return 0;
}
