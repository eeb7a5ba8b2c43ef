/*
 * Content-addressed cache of build outcomes, so one candidate is never
 * compiled twice. An entry is keyed by a 64-bit hash of everything that
 * determines the compiler's output (target, compiler identity, flags, entry
 * name, source; see kt_builder_key()) and holds either the artifact bytes or
 * a deterministic compile failure (its error code and message).
 *
 * Two levels: an in-memory LRU map bounded by a byte budget, and an optional
 * directory holding one <16 hex digits>.so file per successful artifact
 * (written atomically, so several processes may share a directory).
 * Failures are kept in memory only: they are cheap to redo and a compiler
 * upgrade should be allowed to fix them.
 *
 * Ownership: the cache copies what it is given; lookups hand out malloc'd
 * copies the caller frees. Thread-safety: none; use one cache from one
 * thread at a time.
 */
#ifndef KT_MEASURE_ARTIFACT_CACHE_H
#define KT_MEASURE_ARTIFACT_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kt_artifact_cache kt_artifact_cache_t;

/* Counters since the cache was made. */
typedef struct {
    uint64_t mem_hits;    /* lookups answered from memory */
    uint64_t disk_hits;   /* lookups answered from the directory */
    uint64_t misses;      /* lookups answered by neither */
    uint64_t inserts;     /* entries stored */
    uint64_t evictions;   /* entries dropped from memory to honour the budget */
    size_t mem_bytes;     /* bytes held in memory now */
    size_t mem_entries;   /* entries held in memory now */
} kt_artifact_cache_stats_t;

/* Default in-memory budget. */
#define KT_ARTIFACT_CACHE_DEFAULT_MEM (256u << 20)

/* ---- create / destroy ---- */

/* dir: NULL for memory only; created (one level) when missing.
 * mem_budget: bytes of artifacts and messages kept in memory; 0 = default.
 * NULL with kt_err set on failure. */
kt_artifact_cache_t *kt_artifact_cache_new(const char *dir, size_t mem_budget);
void kt_artifact_cache_free(kt_artifact_cache_t *c);

/* ---- lookup / store ---- */

/* Look `key` up, in memory first, then on disk (a disk hit is promoted into
 * memory). On a hit returns 1 and sets *error_no; for a success *data and *len
 * hold a malloc'd copy of the artifact and *msg is NULL; for a cached failure
 * *msg is a malloc'd copy of the message and *data is NULL. Returns 0 on a
 * miss, negative on an allocation failure. */
int kt_artifact_cache_get(kt_artifact_cache_t *c, uint64_t key, int *error_no, char **msg,
                          unsigned char **data, size_t *len);

/* Store a success (error_no 0, data/len) or a failure (error_no != 0, msg).
 * A success also goes to the directory when there is one; a failure to write
 * it is returned (negative) but the memory entry stays. Replaces any entry
 * under the same key. */
int kt_artifact_cache_put(kt_artifact_cache_t *c, uint64_t key, int error_no, const char *msg,
                          const unsigned char *data, size_t len);

/* ---- statistics ---- */

void kt_artifact_cache_stats(const kt_artifact_cache_t *c, kt_artifact_cache_stats_t *out);

#endif
