/*
 * Leveled logging to stderr with a timestamp and the program's name. Safe to
 * call from any thread (one fprintf per line). The level is process-wide and
 * set once at start-up (KT_LOG_LEVEL=debug|info|warn|error or kt_log_set_level).
 */
#ifndef KT_UTIL_LOG_H
#define KT_UTIL_LOG_H

typedef enum { KT_LOG_DEBUG = 0, KT_LOG_INFO, KT_LOG_WARN, KT_LOG_ERROR } kt_log_level_t;

void kt_log_set_level(kt_log_level_t level);
void kt_log_set_name(const char *progname);   /* not copied: pass a literal or argv[0] */
/* Reads KT_LOG_LEVEL from the environment; returns 0 or KT_EINVAL. */
int kt_log_init_from_env(void);
void kt_log(kt_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define KT_DEBUG(...) kt_log(KT_LOG_DEBUG, __VA_ARGS__)
#define KT_INFO(...) kt_log(KT_LOG_INFO, __VA_ARGS__)
#define KT_WARN(...) kt_log(KT_LOG_WARN, __VA_ARGS__)
#define KT_ERROR(...) kt_log(KT_LOG_ERROR, __VA_ARGS__)

#endif
