/*
 * Certificates for the TLS tests (rpc, service, hosts), made with the
 * openssl CLI (a test dependency: deploy/install-deps.sh) in a directory the
 * test owns: private CAs and certificates they sign, EC P-256, valid for two
 * days. A missing openssl CLI fails the test, saying so.
 *
 * Included by one test file each (everything is static). Call from the
 * test's main thread.
 */
#ifndef KT_TEST_TLS_H
#define KT_TEST_TLS_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Run a shell command in dir, its output discarded; 1 when it exited 0. */
__attribute__((format(printf, 2, 3))) static int kt_test_tls_sh(const char *dir,
                                                                const char *fmt, ...)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd, "cd '%s' && ( ", dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    strncat(cmd, " ) >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
    fflush(NULL);
    int st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* A self-signed CA: dir/<name>.pem and its key dir/<name>.key. */
__attribute__((unused)) static void kt_test_tls_ca(const char *dir, const char *name)
{
    ck_assert_msg(kt_test_tls_sh(dir, "openssl version"),
                  "the openssl CLI does not run: install openssl (deploy/install-deps.sh)");
    ck_assert_msg(kt_test_tls_sh(dir,
                                 "openssl req -x509 -newkey ec -pkeyopt "
                                 "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.pem "
                                 "-days 2 -subj /CN=%s && chmod 600 %s.key",
                                 name, name, name, name),
                  "openssl could not make the CA %s in %s", name, dir);
}

/* dir/<name>.pem for subjectAltName `san` ("IP:127.0.0.1,DNS:localhost"),
 * signed by the CA dir/<ca>.pem, and its key dir/<name>.key (mode 0600). */
__attribute__((unused)) static void kt_test_tls_cert(const char *dir, const char *name,
                                                     const char *ca, const char *san)
{
    ck_assert_msg(kt_test_tls_sh(dir,
                                 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                                 "-nodes -keyout %s.key -out %s.csr -subj /CN=%s && "
                                 "printf 'subjectAltName=%s\\n' > %s.ext && "
                                 "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key "
                                 "-CAcreateserial -days 2 -extfile %s.ext -out %s.pem && "
                                 "chmod 600 %s.key",
                                 name, name, name, san, name, name, ca, ca, name, name, name),
                  "openssl could not make the certificate %s in %s", name, dir);
}

#endif
