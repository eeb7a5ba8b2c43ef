#include "measure/artifact_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/util.h"

typedef struct entry {
    uint64_t key;
    int error_no;
    char *msg;
    unsigned char *data;
    size_t len;
    size_t cost;             /* bytes charged against the budget */
    struct entry *chain;     /* next in the hash bucket */
    struct entry *prev, *next; /* LRU list: head is most recent */
} entry_t;

struct kt_artifact_cache {
    char *dir;
    size_t budget;
    entry_t **buckets;
    size_t nbuckets;         /* power of two */
    entry_t *head, *tail;
    kt_artifact_cache_stats_t st;
};

kt_artifact_cache_t *kt_artifact_cache_new(const char *dir, size_t mem_budget)
{
    kt_artifact_cache_t *c = calloc(1, sizeof *c);
    if (!c) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    c->budget = mem_budget ? mem_budget : KT_ARTIFACT_CACHE_DEFAULT_MEM;
    c->nbuckets = 64;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    if (dir && *dir) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            kt_err_set(KT_EIO, "artifact cache directory %s: %s", dir, strerror(errno));
            kt_artifact_cache_free(c);
            return NULL;
        }
        c->dir = kt_strdup(dir);
        if (!c->dir) {
            kt_artifact_cache_free(c);
            return NULL;
        }
    }
    return c;
}

static void entry_free(entry_t *e)
{
    free(e->msg);
    free(e->data);
    free(e);
}

void kt_artifact_cache_free(kt_artifact_cache_t *c)
{
    if (!c)
        return;
    for (entry_t *e = c->head; e;) {
        entry_t *n = e->next;
        entry_free(e);
        e = n;
    }
    free(c->buckets);
    free(c->dir);
    free(c);
}

static size_t bucket_of(const kt_artifact_cache_t *c, uint64_t key)
{
    /* Keys are already xxHash outputs: their low bits are well mixed. */
    return (size_t)(key & (c->nbuckets - 1));
}

static entry_t *find(const kt_artifact_cache_t *c, uint64_t key)
{
    for (entry_t *e = c->buckets[bucket_of(c, key)]; e; e = e->chain)
        if (e->key == key)
            return e;
    return NULL;
}

static void lru_unlink(kt_artifact_cache_t *c, entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(kt_artifact_cache_t *c, entry_t *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static void remove_entry(kt_artifact_cache_t *c, entry_t *e)
{
    entry_t **pp = &c->buckets[bucket_of(c, e->key)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    lru_unlink(c, e);
    c->st.mem_bytes -= e->cost;
    c->st.mem_entries--;
    entry_free(e);
}

static void grow(kt_artifact_cache_t *c)
{
    size_t nb = c->nbuckets * 2;
    entry_t **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < c->nbuckets; i++) {
        for (entry_t *e = c->buckets[i]; e;) {
            entry_t *n = e->chain;
            size_t j = (size_t)(e->key & (nb - 1));
            e->chain = b[j];
            b[j] = e;
            e = n;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
}

/* Insert into memory only; takes ownership of msg/data. */
static int mem_insert(kt_artifact_cache_t *c, uint64_t key, int error_no, char *msg,
                      unsigned char *data, size_t len)
{
    entry_t *old = find(c, key);
    if (old)
        remove_entry(c, old);
    entry_t *e = calloc(1, sizeof *e);
    if (!e) {
        free(msg);
        free(data);
        return kt_err_set(KT_ENOMEM, "out of memory");
    }
    e->key = key;
    e->error_no = error_no;
    e->msg = msg;
    e->data = data;
    e->len = len;
    e->cost = sizeof *e + len + (msg ? strlen(msg) + 1 : 0);
    if (c->st.mem_entries + 1 > c->nbuckets)
        grow(c);
    size_t b = bucket_of(c, key);
    e->chain = c->buckets[b];
    c->buckets[b] = e;
    lru_push_front(c, e);
    c->st.mem_bytes += e->cost;
    c->st.mem_entries++;
    /* Evict least recently used entries, but never the one just added. */
    while (c->st.mem_bytes > c->budget && c->tail && c->tail != e) {
        remove_entry(c, c->tail);
        c->st.evictions++;
    }
    return KT_OK;
}

static char *disk_path(const kt_artifact_cache_t *c, uint64_t key)
{
    size_t n = strlen(c->dir) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%016llx.so", c->dir, (unsigned long long)key);
    return p;
}

static int copy_out(const entry_t *e, int *error_no, char **msg, unsigned char **data, size_t *len)
{
    *error_no = e->error_no;
    *msg = NULL;
    *data = NULL;
    *len = 0;
    if (e->error_no != 0) {
        *msg = strdup(e->msg ? e->msg : "");
        if (!*msg)
            return kt_err_set(KT_ENOMEM, "out of memory");
        return 1;
    }
    *data = malloc(e->len ? e->len : 1);
    if (!*data)
        return kt_err_set(KT_ENOMEM, "out of memory");
    memcpy(*data, e->data, e->len);
    *len = e->len;
    return 1;
}

int kt_artifact_cache_get(kt_artifact_cache_t *c, uint64_t key, int *error_no, char **msg,
                          unsigned char **data, size_t *len)
{
    entry_t *e = find(c, key);
    if (e) {
        lru_unlink(c, e);
        lru_push_front(c, e);
        c->st.mem_hits++;
        return copy_out(e, error_no, msg, data, len);
    }
    if (c->dir) {
        char *path = disk_path(c, key);
        if (!path)
            return kt_err_set(KT_ENOMEM, "out of memory");
        size_t n = 0;
        char *bytes = NULL;
        if (access(path, R_OK) == 0)
            bytes = kt_file_read(path, &n);
        free(path);
        if (bytes && n > 0) {
            c->st.disk_hits++;
            unsigned char *copy = malloc(n);
            if (!copy) {
                free(bytes);
                return kt_err_set(KT_ENOMEM, "out of memory");
            }
            memcpy(copy, bytes, n);
            *error_no = 0;
            *msg = NULL;
            *data = copy;
            *len = n;
            /* Promote: the memory entry takes the buffer kt_file_read made. */
            mem_insert(c, key, 0, NULL, (unsigned char *)bytes, n);
            return 1;
        }
        free(bytes);
        kt_err_clear(); /* an unreadable cache file is just a miss */
    }
    c->st.misses++;
    return 0;
}

int kt_artifact_cache_put(kt_artifact_cache_t *c, uint64_t key, int error_no, const char *msg,
                          const unsigned char *data, size_t len)
{
    char *m = NULL;
    unsigned char *d = NULL;
    if (error_no != 0) {
        m = strdup(msg ? msg : "");
        if (!m)
            return kt_err_set(KT_ENOMEM, "out of memory");
        len = 0;
    } else {
        d = malloc(len ? len : 1);
        if (!d)
            return kt_err_set(KT_ENOMEM, "out of memory");
        memcpy(d, data, len);
    }
    int rc = mem_insert(c, key, error_no, m, d, len);
    if (rc < 0)
        return rc;
    c->st.inserts++;
    if (error_no == 0 && c->dir) {
        char *path = disk_path(c, key);
        if (!path)
            return kt_err_set(KT_ENOMEM, "out of memory");
        rc = kt_file_write(path, data, len);
        free(path);
        if (rc < 0)
            return kt_err_prefix("artifact cache");
    }
    return KT_OK;
}

void kt_artifact_cache_stats(const kt_artifact_cache_t *c, kt_artifact_cache_stats_t *out)
{
    *out = c->st;
}
