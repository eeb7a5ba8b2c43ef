/* ktune-runner: times candidates on one device for the tracker. */
#include <stdio.h>
#include <string.h>

#include "kt_config.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("ktune-runner %s\n", KT_VERSION);
            return 0;
        }
    }
    printf("usage: ktune-runner --tracker HOST:9190 --key KEY --device cpu|cuda:N\n");
    return 0;
}
