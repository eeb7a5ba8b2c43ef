#include "log.h"
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static kt_log_level_t log_level = KT_LOG_INFO;
static const char *log_name = "ktune";

void kt_log_set_level(kt_log_level_t level) { log_level = level; }

void kt_log_set_name(const char *progname)
{
    const char *slash = progname ? strrchr(progname, '/') : NULL;
    log_name = slash ? slash + 1 : (progname ? progname : "ktune");
}

int kt_log_init_from_env(void)
{
    const char *v = getenv("KT_LOG_LEVEL");
    if (!v || !*v)
        return KT_OK;
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            log_level = (kt_log_level_t)i;
            return KT_OK;
        }
    return kt_err_set(KT_EINVAL, "KT_LOG_LEVEL=%s: expected debug, info, warn or error", v);
}

void kt_log(kt_log_level_t level, const char *fmt, ...)
{
    if (level < log_level)
        return;
    static const char tag[] = "DIWE";
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %s: %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            tag[level], log_name, msg);
}
