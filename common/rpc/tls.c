/* TLS file checks with OpenSSL (certificates, keys, CAs) before gRPC gets them; see rpc.h. */
#include "rpc_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "util/err.h"

/* Never ask for a passphrase on the terminal: gRPC cannot use an encrypted
 * key anyway, so one is refused like any unreadable key. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* OpenSSL's reason for the last failure, and an empty error queue after it
 * (gRPC's own TLS calls on this thread must not see our errors). */
static const char *ssl_reason(char *buf, size_t size)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, size, "%s", r ? r : "no PEM data");
    ERR_clear_error();
    return buf;
}

/* The first certificate of a PEM file; NULL with kt_err naming it. */
static X509 *read_cert(const char *path, const char *flag)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        kt_err_set(KT_EINVAL, "%s %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    X509 *x = PEM_read_X509(f, NULL, no_passphrase, NULL);
    fclose(f);
    if (!x) {
        char why[160];
        kt_err_set(KT_EINVAL, "%s %s: not a PEM certificate (%s)", flag, path,
                   ssl_reason(why, sizeof why));
    }
    return x;
}

static int check_ca(const char *ca, const char *flag)
{
    if (!ca)
        return 0;
    X509 *x = read_cert(ca, flag);
    if (!x)
        return kt_err_code();
    X509_free(x);
    return 0;
}

static int check_pair(const char *cert, const char *key, const char *cert_flag,
                      const char *key_flag)
{
    if (!cert && !key)
        return 0;
    if (!cert || !key)
        return kt_err_set(KT_EINVAL, "%s and %s go together", cert_flag, key_flag);
    X509 *x = read_cert(cert, cert_flag);
    if (!x)
        return kt_err_code();
    FILE *f = fopen(key, "r");
    if (!f) {
        X509_free(x);
        return kt_err_set(KT_EINVAL, "%s %s: %s", key_flag, key, strerror(errno));
    }
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
    fclose(f);
    int rc = 0;
    char why[160];
    if (!k)
        rc = kt_err_set(KT_EINVAL, "%s %s: not an unencrypted PEM private key (%s)", key_flag,
                        key, ssl_reason(why, sizeof why));
    else if (X509_check_private_key(x, k) != 1)
        rc = kt_err_set(KT_EINVAL, "%s %s does not belong to the certificate %s %s (%s)",
                        key_flag, key, cert_flag, cert, ssl_reason(why, sizeof why));
    ERR_clear_error();
    EVP_PKEY_free(k);
    X509_free(x);
    return rc;
}

int kt_rpc_tls_check(const kt_rpc_tls_files_t *f)
{
    if (!f)
        return 0;
    if (check_pair(f->cert, f->key, "--tls-cert", "--tls-key") != 0 ||
        check_pair(f->client_cert, f->client_key, "--tls-client-cert", "--tls-client-key") != 0)
        return kt_err_code();
    if (f->client_ca && !f->cert)
        return kt_err_set(KT_EINVAL, "--tls-client-ca (certificates required of callers) "
                                     "needs TLS served: --tls-cert and --tls-key");
    if (f->client_cert && !f->ca)
        return kt_err_set(KT_EINVAL, "--tls-client-cert needs TLS to the server: --tls-ca, "
                                     "the CA that signed the server's certificate");
    if (check_ca(f->ca, "--tls-ca") != 0 || check_ca(f->client_ca, "--tls-client-ca") != 0)
        return kt_err_code();
    return 0;
}
