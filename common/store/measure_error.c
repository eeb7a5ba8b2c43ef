#include "store/measure_error.h"

#include <string.h>

static const char *const names[KT_MEASURE_ERROR_COUNT] = {
    "NO_ERROR",      "INSTANTIATION_ERROR", "COMPILE_HOST",  "COMPILE_DEVICE", "RUNTIME_DEVICE",
    "WRONG_ANSWER",  "BUILD_TIMEOUT",       "RUN_TIMEOUT",   "UNKNOWN_ERROR",
};

const char *kt_measure_error_name(int code)
{
    if (code < 0 || code >= KT_MEASURE_ERROR_COUNT)
        return NULL;
    return names[code];
}

int kt_measure_error_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < KT_MEASURE_ERROR_COUNT; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}
