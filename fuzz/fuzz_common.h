/*
 * Shared helpers of the libFuzzer targets (fuzz/README in docs/security.md):
 * inputs as NUL-terminated strings, and as files for the readers that take a
 * path (a memfd, so nothing is left on disk and no two runs share a name).
 */
#ifndef KT_FUZZ_COMMON_H
#define KT_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/err.h"

#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a C string (malloc'd; NULL on OOM). Text parsers stop at the
 * first NUL, as they would for a string read from a file. */
static char *kt_fuzz_str(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return NULL;
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* The input as a file: its /proc path in path[], the fd returned (close
 * it), or -1. */
static int kt_fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("kt_fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Errors are the expected outcome of most inputs: keep the log quiet. */
static void kt_fuzz_quiet(void)
{
    kt_log_set_level(KT_LOG_ERROR);
}

#endif
