/*
 * A small seeded pseudo-random generator (xoshiro256**, seeded through
 * splitmix64) for the search: sampling schedules, mutations, epsilon-greedy
 * picks. Results depend only on the seed, so searches are reproducible.
 *
 * Ownership: a kt_rng_t is a plain value the caller owns (stack or struct
 * member); nothing to free. Not thread-safe per generator: give every thread
 * its own (kt_rng_seed with distinct seeds).
 */
#ifndef KT_UTIL_RNG_H
#define KT_UTIL_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} kt_rng_t;

/* Seed a generator; any seed (0 included) gives a valid stream. */
void kt_rng_seed(kt_rng_t *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t kt_rng_next(kt_rng_t *r);

/* Uniform integer in [0, n); n must be > 0 (returns 0 for n <= 1). */
uint64_t kt_rng_below(kt_rng_t *r, uint64_t n);

/* Uniform double in [0, 1). */
double kt_rng_double(kt_rng_t *r);

#endif
