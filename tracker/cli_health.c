/* ktune health: ask a tracker, runner or worker whether it is serving. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune health --tracker HOST:PORT [options]\n"
            "\n"
            "Call the Health method of a ktune daemon and print its answer.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT   address of the daemon to ask\n"
            "  --service S           tracker (default), runner or worker\n"
            "  --token-file F        file holding the shared token (default: $KT_TOKEN_FILE)\n"
            "  --tls-ca F            CA certificate (PEM) to verify a TLS daemon; enables TLS\n"
            "  --timeout MS          give up after MS milliseconds (default 5000)\n"
            "  -h, --help            print this help and exit\n");
}

int kt_cli_health(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tracker", required_argument, 0, 'a'}, {"service", required_argument, 0, 's'},
        {"token-file", required_argument, 0, 't'}, {"tls-ca", required_argument, 0, 'C'},
        {"timeout", required_argument, 0, 'T'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *addr = NULL, *service = "tracker", *token_file = getenv("KT_TOKEN_FILE");
    const char *ca = NULL;
    long timeout_ms = 5000;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'a': addr = optarg; break;
        case 's': service = optarg; break;
        case 't': token_file = optarg; break;
        case 'C': ca = optarg; break;
        case 'T': {
            char *end;
            timeout_ms = strtol(optarg, &end, 10);
            if (*end || timeout_ms <= 0 || timeout_ms > 3600000) {
                fprintf(stderr, "ktune health: --timeout wants milliseconds, got '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!addr || optind < argc) {
        usage(stderr);
        return 2;
    }
    const char *svc;
    if (strcmp(service, "tracker") == 0)
        svc = "Tracker";
    else if (strcmp(service, "runner") == 0)
        svc = "Runner";
    else if (strcmp(service, "worker") == 0)
        svc = "Worker";
    else {
        fprintf(stderr, "ktune health: --service is tracker, runner or worker, not '%s'\n",
                service);
        return 2;
    }

    char *token = NULL;
    if (token_file && *token_file && !(token = kt_token_read(token_file)))
        return kt_cli_fail("health");
    /* A CLI answers quickly: a few tries spread over at most the timeout. */
    kt_rpc_client_opts_t co = {.token = token, .tls_ca = ca, .deadline_ms = (int)timeout_ms,
                               .retry_attempts = 3, .retry_total_ms = (int)timeout_ms};
    kt_rpc_client_t *cl = kt_rpc_client_new(addr, &co);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    if (!cl)
        return kt_cli_fail("health");
    char method[64];
    snprintf(method, sizeof method, "/ktune.v1.%s/Health", svc);
    Ktune__V1__HealthRequest req = KTUNE__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(cl, method, &req.base, &ktune__v1__health_response__descriptor,
                               (int)timeout_ms, &out, &st);
    kt_rpc_client_free(cl);
    if (rc != 0) {
        if (st.code == KT_RPC_UNAVAILABLE)
            fprintf(stderr, "ktune health: cannot reach %s (%s)\n", addr, st.msg);
        else if (st.code == KT_RPC_UNAUTHENTICATED)
            fprintf(stderr, "ktune health: %s refused the call: UNAUTHENTICATED (%s)\n", addr,
                    token_file ? "wrong token" : "a token is required; use --token-file");
        else if (st.code == KT_RPC_DEADLINE_EXCEEDED)
            fprintf(stderr, "ktune health: %s did not answer within %ld ms\n", addr, timeout_ms);
        else if (st.code == KT_RPC_UNIMPLEMENTED)
            fprintf(stderr, "ktune health: %s is not a ktune %s\n", addr, service);
        else
            fprintf(stderr, "ktune health: %s: %s: %s\n", addr, kt_rpc_code_name(st.code),
                    st.msg);
        return 1;
    }
    Ktune__V1__HealthResponse *h = (Ktune__V1__HealthResponse *)out;
    printf("%s (%s %s)\n", h->status, h->role, h->version);
    int serving = strcmp(h->status, "SERVING") == 0;
    protobuf_c_message_free_unpacked(out, NULL);
    return serving ? 0 : 1;
}
