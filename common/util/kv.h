/*
 * "key=value,key=value" parameter lists, the command-line form of TVM's
 * params dicts (model parameters, search policy parameters).
 *
 * kt_kv_each() splits a list and hands each pair to a callback, stopping at
 * the first error; kt_kv_set_number() parses one value into the struct field
 * a table names. Neither keeps a pointer into its arguments. Thread-safe.
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

/* Stores `val` into the field of `obj` that fields[0..n) names `key`:
 * KT_OK; KT_ENOTFOUND (no message set) when no field has that name;
 * KT_EINVAL with a message naming `what` when val is not a finite number, or
 * for 'i' and 'u' not an integer in range (non-negative for 'u'). */
int kt_kv_set_number(void *obj, const kt_kv_field_t *fields, size_t n, const char *what,
                     const char *key, const char *val);

#endif
