/*
 * "key=value,key=value" parameter lists, the command-line form of TVM's
 * params dicts (model parameters, search policy parameters).
 *
 * kt_kv_each() splits a list and hands each pair to a callback, stopping at
 * the first error; kt_kv_update() does that on a copy of a struct and keeps
 * the result only when all of it is valid; kt_kv_set_number() parses one
 * value into the struct field a table names. None keeps a pointer into its
 * arguments. Thread-safe.
 */
#ifndef KT_UTIL_KV_H
#define KT_UTIL_KV_H

#include <stddef.h>

/* A numeric field of a struct: its key, offset and C type
 * ('i' int, 'd' double, 'u' uint64_t). */
typedef struct {
    const char *name;
    size_t off;
    char type;
} kt_kv_field_t;

/* Calls fn(user, key, value) for each "key=value" of the comma-separated
 * list (key non-empty, value possibly empty). An empty list calls nothing.
 * Returns 0, fn's first non-zero return, or KT_EINVAL (message names `what`)
 * for an item that is not key=value. */
int kt_kv_each(const char *list, const char *what,
               int (*fn)(void *user, const char *key, const char *val), void *user);

/* All or nothing: applies the list to a copy of obj (size bytes) with
 * set(copy, key, value) for each pair, then check(copy), and copies the
 * result back only when every call returned 0. Returns 0, the first error
 * (KT_EINVAL from kt_kv_each, set or check), or KT_ENOMEM; obj is unchanged
 * on error. `what` names the list in messages ("model parameters"). */
int kt_kv_update(void *obj, size_t size, const char *list, const char *what,
                 int (*set)(void *obj, const char *key, const char *val),
                 int (*check)(const void *obj));

/* Stores `val` into the field of `obj` that fields[0..n) names `key`:
 * KT_OK, or KT_EINVAL with a message naming `what` ("model parameter") when
 * no field has that name ("unknown model parameter 'x'"), when val is not a
 * finite number, or for 'i' and 'u' not an integer in range (non-negative
 * for 'u'). */
int kt_kv_set_number(void *obj, const kt_kv_field_t *fields, size_t n, const char *what,
                     const char *key, const char *val);

#endif
