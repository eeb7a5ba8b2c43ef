/* ktune-runner: times candidates on one device for the tracker. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_config.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

/* In-flight calls get this long to finish after SIGINT/SIGTERM. */
#define DRAIN_MS 5000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-runner [options]\n"
            "\n"
            "The ktune runner: times candidates on one device for a tracker.\n"
            "Runs until SIGINT or SIGTERM.\n"
            "\n"
            "options:\n"
            "  --listen ADDR       gRPC address to serve (default 127.0.0.1:0, a free port)\n"
            "  --token-file F      shared token required from every peer (first line of F)\n"
            "  --tls-cert F        server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F         server private key (PEM)\n"
            "  --version           print the version and exit\n"
            "  -h, --help          print this help and exit\n");
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-runner: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},   {"token-file", required_argument, 0, 't'},
        {"tls-cert", required_argument, 0, 'c'}, {"tls-key", required_argument, 0, 'k'},
        {"version", no_argument, 0, 'V'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *listen = "127.0.0.1:0", *token_file = NULL, *cert = NULL, *key = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'V': printf("ktune-runner %s\n", KT_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        case 'l': listen = optarg; break;
        case 't': token_file = optarg; break;
        case 'c': cert = optarg; break;
        case 'k': key = optarg; break;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ktune-runner: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((cert == NULL) != (key == NULL)) {
        fprintf(stderr, "ktune-runner: --tls-cert and --tls-key go together\n");
        return 2;
    }
    char *token = NULL;
    if (token_file && !(token = kt_token_read(token_file))) {
        KT_ERROR("%s", kt_err_msg());
        return 1;
    }

    /* Blocked before any thread exists so that every thread inherits the
     * mask and the signals reach only sigwait below. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    kt_rpc_server_opts_t so = {.listen = listen, .token = token, .tls_cert = cert, .tls_key = key};
    kt_rpc_server_t *srv = kt_rpc_server_new(&so);
    if (!srv || kt_rpc_server_add_health(srv, "Runner", "runner") != 0 ||
        kt_rpc_server_start(srv) != 0) {
        KT_ERROR("%s", kt_err_msg());
        kt_rpc_server_stop(srv, 0);
        free(token);
        return 1;
    }
    KT_INFO("ktune-runner %s listening on %s (%s%s)", KT_VERSION, kt_rpc_server_address(srv),
            cert ? "TLS" : "plaintext", token ? ", token required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    KT_INFO("%s: stopping (in-flight calls get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
            DRAIN_MS);
    kt_rpc_server_stop(srv, DRAIN_MS);
    free(token);
    KT_INFO("stopped");
    return 0;
}
