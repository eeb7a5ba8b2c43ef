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
            KT_CLI_MTLS_HELP
            "  --timeout MS          give up after MS milliseconds (default 5000)\n"
            "  -h, --help            print this help and exit\n");
}

int kt_cli_health(int argc, char **argv)
{
    static const struct option opts[] = {KT_CLI_CONN_OPTIONS,
                                         {"service", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    kt_cli_conn_t conn;
    kt_cli_conn_init(&conn, 5000);
    const char *service = "tracker";
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int taken = kt_cli_conn_option("health", &conn, c, optarg);
        if (taken == 2)
            return 2;
        switch (taken ? 0 : c) {
        case 0: break;
        case 's': service = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "ktune health: bad option '%s' (see ktune health --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    const char *addr = conn.tracker, *token_file = conn.token_file;
    long timeout_ms = conn.timeout_ms;
    if (optind < argc) {
        fprintf(stderr, "ktune health: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!addr) {
        fprintf(stderr, "ktune health: --tracker HOST:PORT is required\n");
        usage(stderr);
        return 2;
    }
    if (kt_cli_conn_check("health", &conn))
        return 2;
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

    kt_rpc_client_t *cl = kt_cli_connect("health", &conn);
    if (!cl)
        return 1;
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
