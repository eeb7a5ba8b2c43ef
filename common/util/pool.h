/*
 * A fixed pool of threads for data-parallel loops (kt_pool_for): the
 * tracker's searches score their populations on it.
 *
 * kt_pool_for(p, n, fn, ctx) calls fn(ctx, i) once for every i in [0, n) and
 * returns when all calls have returned. The calling thread takes items too,
 * so a loop finishes even when every pool thread is busy with other loops
 * (several callers share one pool: its threads take items from the loops in
 * the order they were started), and a pool of 1 thread (or NULL) runs the
 * loop inline, in order. Which thread runs an item is up to scheduling: fn
 * must write its result to a slot of its own (item i's), never depend on
 * the order of items, and take its randomness, if any, from its index.
 *
 * Ownership: the creator owns the pool; kt_pool_free joins its threads and
 * must not run while a loop is in progress. Threads: kt_pool_for from any
 * number of threads at once, but not from inside fn (a nested loop).
 */
#ifndef KT_UTIL_POOL_H
#define KT_UTIL_POOL_H

typedef struct kt_pool kt_pool_t;

/* Largest thread count a pool accepts. */
#define KT_POOL_MAX_THREADS 256

/* A pool for loops `threads` wide: threads - 1 pool threads plus the caller.
 * threads 1..KT_POOL_MAX_THREADS; NULL + KT_EINVAL otherwise, KT_ENOMEM or
 * KT_EIO when a thread cannot start. */
kt_pool_t *kt_pool_new(int threads);
void kt_pool_free(kt_pool_t *p);       /* accepts NULL */
/* The width given to kt_pool_new; 1 for NULL. */
int kt_pool_threads(const kt_pool_t *p);

typedef void (*kt_pool_fn)(void *ctx, int i);
/* fn(ctx, i) for each i in [0, n), spread over the pool and the caller;
 * p NULL runs them here in order. n <= 0 does nothing. */
void kt_pool_for(kt_pool_t *p, int n, kt_pool_fn fn, void *ctx);

/* The number of online cores (at least 1, at most KT_POOL_MAX_THREADS): the
 * default width of the tracker's search pool. */
int kt_pool_online_cores(void);

#endif
