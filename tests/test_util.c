#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
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

START_TEST(hash64_is_stable)
{
    /* Golden value: workload keys and state hashes depend on it never changing. */
    ck_assert_uint_eq(kt_hash64("ktune", 5), 0x19a5060b2530ee02ULL);
    ck_assert_uint_ne(kt_hash64("ktune", 5), kt_hash64("ktunf", 5));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, err_set_and_prefix_compose_message);
    tcase_add_test(tc, token_read_strips_whitespace_and_rejects_empty);
    tcase_add_test(tc, hash64_is_stable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
