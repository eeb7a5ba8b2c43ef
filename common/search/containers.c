/* Containers of the search policy: a set of state hashes and state lists. */
#include <stdlib.h>
#include <string.h>

#include "search_int.h"
#include "util/err.h"
#include "util/util.h"

/* ---- a set of 64-bit state hashes (open addressing, linear probing) ------- */

/* Hash 0 marks an empty slot; kt_sched_state_hash returns 0 only on OOM, and
 * a real 0 is folded onto 1 (a collision that costs nothing but a state). */
static uint64_t key_of(uint64_t h)
{
    return h ? h : 1;
}

static size_t slot_of(const kt_hset_t *s, uint64_t k)
{
    /* the hashes are already uniform: the low bits index directly */
    return (size_t)k & (s->cap - 1);
}

void kt_hset_free(kt_hset_t *s)
{
    free(s->keys);
    memset(s, 0, sizeof(*s));
}

void kt_hset_clear(kt_hset_t *s)
{
    if (s->keys)
        memset(s->keys, 0, s->cap * sizeof(uint64_t));
    s->n = 0;
}

int kt_hset_has(const kt_hset_t *s, uint64_t h)
{
    if (!s->n)
        return 0;
    uint64_t k = key_of(h);
    for (size_t i = slot_of(s, k);; i = (i + 1) & (s->cap - 1)) {
        if (s->keys[i] == k)
            return 1;
        if (s->keys[i] == 0)
            return 0;
    }
}

static int hset_grow(kt_hset_t *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof(uint64_t));
    if (!keys)
        return kt_err_set(KT_ENOMEM, "out of memory");
    uint64_t *old = s->keys;
    size_t oldcap = s->cap;
    s->keys = keys;
    s->cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i]) {
            size_t j = slot_of(s, old[i]);
            while (keys[j])
                j = (j + 1) & (cap - 1);
            keys[j] = old[i];
        }
    free(old);
    return 0;
}

/* 1 when added, 0 when present, negative on OOM. */
int kt_hset_add(kt_hset_t *s, uint64_t h)
{
    if ((s->n + 1) * 2 > s->cap) {
        int rc = hset_grow(s);
        if (rc)
            return rc;
    }
    uint64_t k = key_of(h);
    size_t i = slot_of(s, k);
    while (s->keys[i]) {
        if (s->keys[i] == k)
            return 0;
        i = (i + 1) & (s->cap - 1);
    }
    s->keys[i] = k;
    s->n++;
    return 1;
}

/* Backward-shift deletion keeps every probe chain unbroken. */
void kt_hset_del(kt_hset_t *s, uint64_t h)
{
    if (!s->n)
        return;
    uint64_t k = key_of(h);
    size_t mask = s->cap - 1, i = slot_of(s, k);
    while (s->keys[i] != k) {
        if (s->keys[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    s->keys[i] = 0;
    s->n--;
    for (size_t j = (i + 1) & mask; s->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(s, s->keys[j]);
        /* move keys[j] into the hole when its home is not in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->keys[i] = s->keys[j];
            s->keys[j] = 0;
            i = j;
        }
    }
}

/* ---- growable state lists ---------------------------------------------------- */

void kt_slist_free(kt_slist_t *l)
{
    for (int i = 0; i < l->n; i++)
        kt_sched_state_free(l->st[i]);
    free(l->st);
    free(l->hash);
    free(l->score);
    memset(l, 0, sizeof(*l));
}

void kt_slist_clear(kt_slist_t *l)
{
    for (int i = 0; i < l->n; i++)
        kt_sched_state_free(l->st[i]);
    l->n = 0;
}

/* Append st (taken over, freed on failure) with its hash. */
int kt_slist_push(kt_slist_t *l, kt_sched_state_t *st, uint64_t hash)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        kt_sched_state_t **s = realloc(l->st, (size_t)cap * sizeof(*s));
        if (s)
            l->st = s;
        uint64_t *h = s ? realloc(l->hash, (size_t)cap * sizeof(*h)) : NULL;
        if (h)
            l->hash = h;
        float *sc = h ? realloc(l->score, (size_t)cap * sizeof(*sc)) : NULL;
        if (sc)
            l->score = sc;
        if (!s || !h || !sc) {
            kt_sched_state_free(st);
            return kt_err_set(KT_ENOMEM, "out of memory");
        }
        l->cap = cap;
    }
    l->st[l->n] = st;
    l->hash[l->n] = hash;
    l->score[l->n] = 0;
    l->n++;
    return 0;
}
