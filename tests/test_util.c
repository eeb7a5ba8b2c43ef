#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/pool.h"
#include "util/util.h"

START_TEST(err_set_and_prefix_compose_message)
{
    ck_assert_int_eq(kt_err_set(KT_EINVAL, "field %s missing", "M"), KT_EINVAL);
    kt_err_prefix("workload %d", 3);
    ck_assert_str_eq(kt_err_msg(), "workload 3: field M missing");
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    kt_err_clear();
    ck_assert_str_eq(kt_err_msg(), "");
}
END_TEST

START_TEST(token_read_strips_whitespace_and_rejects_empty)
{
    char path[] = "/tmp/kt_tokXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "  s3cret \n second\n", 18), 18);
    close(fd);
    char *t = kt_token_read(path);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t, "s3cret");
    free(t);
    ck_assert_int_eq(kt_file_write(path, "\n\n", 2), 0);
    ck_assert_ptr_null(kt_token_read(path));
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "empty"));
    unlink(path);
    ck_assert_ptr_null(kt_token_read("/nonexistent/kt/token"));
    ck_assert_int_eq(kt_err_code(), KT_EIO);
}
END_TEST

START_TEST(token_read_refuses_a_file_other_users_can_read)
{
    char path[] = "/tmp/kt_tokXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "s3cret\n", 7), 7);
    close(fd);
    const mode_t refused[] = {0640, 0604, 0660, 0644, 0620, 0602};
    for (size_t i = 0; i < KT_ARRAY_LEN(refused); i++) {
        ck_assert_int_eq(chmod(path, refused[i]), 0);
        kt_err_clear();
        ck_assert_ptr_null(kt_token_read(path));
        ck_assert_int_eq(kt_err_code(), KT_EAUTH);
        ck_assert_msg(strstr(kt_err_msg(), "other users") && strstr(kt_err_msg(), "chmod 600"),
                      "%s", kt_err_msg());
    }
    const mode_t allowed[] = {0600, 0400};
    for (size_t i = 0; i < KT_ARRAY_LEN(allowed); i++) {
        ck_assert_int_eq(chmod(path, allowed[i]), 0);
        char *t = kt_token_read(path);
        ck_assert_msg(t != NULL, "%s", kt_err_msg());
        ck_assert_str_eq(t, "s3cret");
        free(t);
    }
    unlink(path);
}
END_TEST

START_TEST(listen_addresses_beyond_loopback_need_a_token)
{
    const char *loop[] = {"127.0.0.1:9190", "127.1.2.3:0", "localhost:9190", "LOCALHOST:1",
                          "[::1]:9190", "ipv4:127.0.0.1:5", "[::ffff:127.0.0.1]:1",
                          "unix:/tmp/kt.sock", "127.0.0.1"};
    const char *open_[] = {"0.0.0.0:9190", ":9190", "[::]:9190", "10.0.0.1:9190",
                           "myhost:9190", "128.0.0.1:1", "[::2]:1", "[::1:1", "",
                           "127.0.0.1.evil.com:1", "[::ffff:10.0.0.1]:1", "0.0.0.0"};
    for (size_t i = 0; i < KT_ARRAY_LEN(loop); i++) {
        ck_assert_msg(kt_addr_is_loopback(loop[i]) == 1, "%s", loop[i]);
        ck_assert_int_eq(kt_listen_check("gRPC", loop[i], 0, 0), 0);
    }
    for (size_t i = 0; i < KT_ARRAY_LEN(open_); i++) {
        ck_assert_msg(kt_addr_is_loopback(open_[i]) == 0, "%s", open_[i]);
        ck_assert_int_eq(kt_listen_check("gRPC", open_[i], 1, 0), 0);   /* a token */
        ck_assert_int_eq(kt_listen_check("gRPC", open_[i], 0, 1), 0);   /* --insecure */
        ck_assert_int_eq(kt_listen_check("gRPC", open_[i], 0, 0), KT_EAUTH);
        ck_assert_msg(strstr(kt_err_msg(), "--token-file") && strstr(kt_err_msg(), "KT_TOKEN_FILE") &&
                          strstr(kt_err_msg(), "--insecure"),
                      "%s", kt_err_msg());
    }
    ck_assert_int_eq(kt_addr_is_loopback(NULL), 0);
}
END_TEST

START_TEST(hash64_is_stable)
{
    /* Golden value: workload keys and state hashes depend on it never changing. */
    ck_assert_uint_eq(kt_hash64("ktune", 5), 0x19a5060b2530ee02ULL);
    ck_assert_uint_ne(kt_hash64("ktune", 5), kt_hash64("ktunf", 5));
}
END_TEST

/* ---- thread pool ---- */

typedef struct {
    atomic_int hits[1000];
    atomic_int started1;
    int waited_ok;
} pool_ctx_t;

static void count_item(void *arg, int i)
{
    pool_ctx_t *c = arg;
    atomic_fetch_add(&c->hits[i], 1);
}

START_TEST(pool_for_runs_every_item_once)
{
    static pool_ctx_t c;
    ck_assert_ptr_null(kt_pool_new(0));
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    ck_assert_ptr_null(kt_pool_new(KT_POOL_MAX_THREADS + 1));
    ck_assert_int_eq(kt_pool_threads(NULL), 1);
    kt_pool_for(NULL, 1000, count_item, &c);   /* inline */
    for (int w = 1; w <= 3; w++) {
        kt_pool_t *p = kt_pool_new(w);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(kt_pool_threads(p), w);
        kt_pool_for(p, 1000, count_item, &c);
        kt_pool_for(p, 0, count_item, &c);
        kt_pool_free(p);
    }
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(atomic_load(&c.hits[i]), 4);
    ck_assert_int_ge(kt_pool_online_cores(), 1);
}
END_TEST

/* Item 0 returns only once item 1 has started (or after 10 s): with a pool 2
 * wide they run at the same time, on two threads. */
static void wait_for_item1(void *arg, int i)
{
    pool_ctx_t *c = arg;
    if (i == 1) {
        atomic_store(&c->started1, 1);
        return;
    }
    for (int ms = 0; ms < 10000 && !atomic_load(&c->started1); ms++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    c->waited_ok = atomic_load(&c->started1);
}

START_TEST(pool_for_runs_items_on_two_threads_at_once)
{
    static pool_ctx_t c;
    kt_pool_t *p = kt_pool_new(2);
    ck_assert_ptr_nonnull(p);
    kt_pool_for(p, 2, wait_for_item1, &c);
    ck_assert_msg(c.waited_ok, "item 1 did not start while item 0 ran");
    kt_pool_free(p);
}
END_TEST

typedef struct {
    kt_pool_t *p;
    pool_ctx_t *c;
} caller_t;

static void *caller(void *arg)
{
    caller_t *a = arg;
    for (int r = 0; r < 20; r++)
        kt_pool_for(a->p, 1000, count_item, a->c);
    return NULL;
}

START_TEST(pool_is_shared_by_concurrent_loops)
{
    static pool_ctx_t c;
    kt_pool_t *p = kt_pool_new(2);
    ck_assert_ptr_nonnull(p);
    caller_t a = {p, &c};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, caller, &a), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    kt_pool_free(p);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(atomic_load(&c.hits[i]), 80);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, err_set_and_prefix_compose_message);
    tcase_add_test(tc, token_read_strips_whitespace_and_rejects_empty);
    tcase_add_test(tc, token_read_refuses_a_file_other_users_can_read);
    tcase_add_test(tc, listen_addresses_beyond_loopback_need_a_token);
    tcase_add_test(tc, hash64_is_stable);
    tcase_add_test(tc, pool_for_runs_every_item_once);
    tcase_add_test(tc, pool_for_runs_items_on_two_threads_at_once);
    tcase_add_test(tc, pool_is_shared_by_concurrent_loops);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
