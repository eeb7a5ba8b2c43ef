/* key=value parameter lists (kv.h). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/kv.h"
#include "util/util.h"

int kt_kv_each(const char *list, const char *what,
               int (*fn)(void *user, const char *key, const char *val), void *user)
{
    if (!list || !fn)
        return kt_err_set(KT_EINVAL, "%s: nothing to set", what);
    char *dup = kt_strdup(list);
    if (!dup)
        return KT_ENOMEM;
    int rc = KT_OK;
    char *save = NULL;
    for (char *kv = strtok_r(dup, ",", &save); kv && rc == KT_OK; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            rc = kt_err_set(KT_EINVAL, "%s: '%s' is not key=value", what, kv);
            break;
        }
        *eq = '\0';
        rc = fn(user, kv, eq + 1);
    }
    free(dup);
    return rc;
}

int kt_kv_update(void *obj, size_t size, const char *list, const char *what,
                 int (*set)(void *obj, const char *key, const char *val),
                 int (*check)(const void *obj))
{
    if (!obj || !list)
        return kt_err_set(KT_EINVAL, "%s: nothing to set", what);
    void *copy = malloc(size);
    if (!copy)
        return kt_err_set(KT_ENOMEM, "%s: out of memory", what);
    memcpy(copy, obj, size);
    int rc = kt_kv_each(list, what, set, copy);
    if (rc == KT_OK && (rc = check(copy)) == KT_OK)
        memcpy(obj, copy, size);
    free(copy);
    return rc;
}

int kt_kv_set_number(void *obj, const kt_kv_field_t *fields, size_t n, const char *what,
                     const char *key, const char *val)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, fields[i].name) != 0)
            continue;
        char type = fields[i].type;
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        /* Integers: whole, within int range (uint64 fields hold seeds: >= 0). */
        if (end == val || *end || errno || !isfinite(d) ||
            (type != 'd' && (d != floor(d) || fabs(d) > 2e9 || (type == 'u' && d < 0))))
            return kt_err_set(KT_EINVAL, "%s %s: '%s' is not %s", what, key, val,
                              type == 'd' ? "a number" : "an integer");
        char *at = (char *)obj + fields[i].off;
        if (type == 'i')
            *(int *)at = (int)d;
        else if (type == 'u')
            *(uint64_t *)at = (uint64_t)d;
        else
            *(double *)at = d;
        return KT_OK;
    }
    return kt_err_set(KT_EINVAL, "unknown %s '%s'", what, key);
}
