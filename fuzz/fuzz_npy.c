/* kt_npy_read on arbitrary file contents (through a memfd). */
#include "fuzz_common.h"
#include "tensorio/tensorio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    char path[64];
    int fd = kt_fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    float *x = NULL;
    int64_t dims[8];
    int ndim = 0;
    if (kt_npy_read(path, &x, dims, &ndim) == 0) {
        /* Every element the shape promises must be readable. */
        int64_t n = 1;
        for (int i = 0; i < ndim; i++)
            n *= dims[i];
        volatile float sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += x[i];
    }
    free(x);
    close(fd);
    return 0;
}
