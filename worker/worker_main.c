/* ktune-worker: builds batches of candidates for the tracker. */
#include <stdio.h>
#include <string.h>

#include "kt_config.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("ktune-worker %s\n", KT_VERSION);
            return 0;
        }
    }
    printf("usage: ktune-worker --tracker HOST:9190 [--jobs N]\n");
    return 0;
}
