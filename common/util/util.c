#include "util.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

double kt_time_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec kt_time_mono_after_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 0)
        ms = 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void kt_sleep_ms(long ms)
{
    if (ms < 0)
        ms = 0;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

double kt_time_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *kt_file_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        kt_err_set(KT_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf) {
        kt_err_set(KT_ENOMEM, "reading %s: out of memory", path);
        return NULL;
    }
    if (rerr) {
        free(buf);
        kt_err_set(KT_EIO, "reading %s failed", path);
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int kt_fd_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int kt_fd_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

int kt_file_write(const char *path, const void *data, size_t len)
{
    size_t plen = strlen(path) + 16;
    char *tmp = malloc(plen);
    if (!tmp)
        return kt_err_set(KT_ENOMEM, "out of memory");
    snprintf(tmp, plen, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return kt_err_set(KT_EIO, "cannot create a file beside %s: %s", path, strerror(e));
    }
    if (kt_fd_write_all(fd, data, len) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return kt_err_set(KT_EIO, "writing %s: %s", path, strerror(e));
    }
    fchmod(fd, 0644);
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return kt_err_set(KT_EIO, "writing %s: %s", path, strerror(e));
    }
    free(tmp);
    return KT_OK;
}

char *kt_token_read(const char *path)
{
    size_t n;
    char *buf = kt_file_read(path, &n);
    if (!buf) {
        kt_err_prefix("token file");
        return NULL;
    }
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    char *e = s;
    while (*e && *e != '\n' && *e != '\r')
        e++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = '\0';
    if (*s == '\0') {
        free(buf);
        kt_err_set(KT_EINVAL, "token file %s is empty", path);
        return NULL;
    }
    /* Checked once the file proved readable, so a missing or empty file is
     * reported as such first. */
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077) != 0) {
        memset(buf, 0, strlen(s) + (size_t)(s - buf));
        free(buf);
        kt_err_set(KT_EAUTH,
                   "token file %s is accessible by other users (mode %04o); "
                   "make it private with: chmod 600 %s",
                   path, (unsigned)(st.st_mode & 07777), path);
        return NULL;
    }
    char *tok = kt_strdup(s);
    free(buf);
    return tok;
}

char *kt_strdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        kt_err_set(KT_ENOMEM, "out of memory");
    return d;
}

uint64_t kt_hash64(const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits(data, len);
}

int kt_cpu_list_parse(const char *list, cpu_set_t *set)
{
    cpu_set_t mine;
    if (!set)
        set = &mine;
    CPU_ZERO(set);
    if (!list)
        return kt_err_set(KT_EINVAL, "no cpu list");
    const char *p = list;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10);
        if (end == p || a < 0 || a >= CPU_SETSIZE)
            return kt_err_set(KT_EINVAL, "bad cpu list '%s'", list);
        long b = a;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a || b >= CPU_SETSIZE)
                return kt_err_set(KT_EINVAL, "bad cpu list '%s'", list);
            p = end;
        }
        for (long c = a; c <= b; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
        else if (*p)
            return kt_err_set(KT_EINVAL, "bad cpu list '%s'", list);
    }
    if (CPU_COUNT(set) == 0)
        return kt_err_set(KT_EINVAL, "empty cpu list");
    return CPU_COUNT(set);
}

int kt_addr_is_loopback(const char *addr)
{
    if (!addr)
        return 0;
    /* A Unix socket is reachable only through the file system of this host. */
    if (strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "unix-abstract:", 14) == 0)
        return 1;
    /* gRPC accepts scheme prefixes; the host follows them. */
    if (strncmp(addr, "ipv4:", 5) == 0 || strncmp(addr, "ipv6:", 5) == 0)
        addr += 5;
    else if (strncmp(addr, "dns:", 4) == 0)
        addr += 4;
    char host[256];
    const char *hs = addr, *he;
    if (addr[0] == '[') {
        hs = addr + 1;
        he = strchr(hs, ']');
        if (!he)
            return 0;
    } else {
        he = strrchr(addr, ':');
        if (!he)
            he = addr + strlen(addr);
    }
    size_t n = (size_t)(he - hs);
    if (n == 0 || n >= sizeof host)
        return 0;
    memcpy(host, hs, n);
    host[n] = '\0';
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return 0;
}

int kt_listen_check(const char *what, const char *addr, int have_token, int insecure)
{
    if (have_token || insecure || kt_addr_is_loopback(addr))
        return KT_OK;
    return kt_err_set(KT_EAUTH,
                      "refusing to serve %s on %s without a token: anyone who can reach it "
                      "could %s; give a token with --token-file F (or KT_TOKEN_FILE=F, a file "
                      "of mode 600), listen on 127.0.0.1, or pass --insecure to accept the risk",
                      what, addr ? addr : "(default)",
                      strcmp(what, "HTTP") == 0 ? "read every job's workloads"
                                                : "submit work and run code on this host");
}
