/* The command line ktune-runner and ktune-worker share; see peer_cmdline.h. */
#include "peer_cmdline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_config.h"
#include "util/err.h"
#include "util/util.h"

static const struct option common_opts[] = {
    {"tracker", required_argument, 0, 'T'},    {"listen", required_argument, 0, 'l'},
    {"advertise", required_argument, 0, 'A'},  {"token-file", required_argument, 0, 't'},
    {"tls-cert", required_argument, 0, 'c'},   {"tls-key", required_argument, 0, 'k'},
    {"tls-ca", required_argument, 0, 'C'},     {"version", no_argument, 0, 'V'},
    {"help", no_argument, 0, 'h'},             {"insecure", no_argument, 0, 'I'},
    {"tls-client-ca", required_argument, 0, KT_PEER_O_CLIENT_CA},
    {"tls-client-cert", required_argument, 0, KT_PEER_O_CLIENT_CERT},
    {"tls-client-key", required_argument, 0, KT_PEER_O_CLIENT_KEY}};
#define NCOMMON (sizeof common_opts / sizeof common_opts[0])
#define MAX_OPTS 64

int kt_peer_cmdline_parse(kt_peer_daemon_opts_t *cl, const char *prog, int argc, char **argv,
                          const struct option *extra, kt_peer_option_fn fn, void *user,
                          void (*usage)(FILE *out))
{
    *cl = (kt_peer_daemon_opts_t){.listen = "127.0.0.1:0", .token_file = getenv("KT_TOKEN_FILE")};
    struct option opts[MAX_OPTS];
    size_t n = 0;
    for (size_t i = 0; i < NCOMMON; i++)
        opts[n++] = common_opts[i];
    for (size_t i = 0; extra && extra[i].name && n + 1 < MAX_OPTS; i++) {
        /* A daemon's own option must not reuse a common option's code: the
         * switch below would take it for the common one. */
        for (size_t k = 0; k < NCOMMON; k++)
            if (extra[i].val == common_opts[k].val) {
                fprintf(stderr, "%s: option --%s clashes with --%s (code '%c')\n", prog,
                        extra[i].name, common_opts[k].name, common_opts[k].val);
                return 2;
            }
        opts[n++] = extra[i];
    }
    opts[n] = (struct option){0, 0, 0, 0};
    int c, li = -1;
    optind = 0;   /* GNU getopt: start over completely (a process may parse twice) */
    while ((c = getopt_long(argc, argv, "h", opts, &li)) != -1) {
        /* An empty path or address would read as "not given" (an empty
         * --token-file as no token at all): refused, as ktune does. */
        if (optarg && !*optarg && li >= 0) {
            fprintf(stderr, "%s: --%s needs a value\n", prog, opts[li].name);
            return 2;
        }
        li = -1;
        switch (c) {
        case 'V': printf("%s %s\n", prog, KT_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        case 'T': cl->tracker = optarg; break;
        case 'l': cl->listen = optarg; break;
        case 'A': cl->advertise = optarg; break;
        case 't': cl->token_file = optarg; break;
        case 'c': cl->tls_cert = optarg; break;
        case 'k': cl->tls_key = optarg; break;
        case 'C': cl->tls_ca = optarg; break;
        case 'I': cl->insecure = 1; break;
        case KT_PEER_O_CLIENT_CA: cl->tls_client_ca = optarg; break;
        case KT_PEER_O_CLIENT_CERT: cl->tls_client_cert = optarg; break;
        case KT_PEER_O_CLIENT_KEY: cl->tls_client_key = optarg; break;
        case '?': usage(stderr); return 2;
        default: {
            int rc = fn ? fn(user, c, optarg) : 2;
            if (rc != 0)
                return rc;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((cl->tls_cert == NULL) != (cl->tls_key == NULL)) {
        fprintf(stderr, "%s: --tls-cert and --tls-key go together\n", prog);
        return 2;
    }
    kt_rpc_tls_files_t tls = {.cert = cl->tls_cert, .key = cl->tls_key,
                              .client_ca = cl->tls_client_ca, .ca = cl->tls_ca,
                              .client_cert = cl->tls_client_cert,
                              .client_key = cl->tls_client_key};
    if (kt_rpc_tls_check(&tls) != 0) {
        fprintf(stderr, "%s: %s\n", prog, kt_err_msg());
        return 2;
    }
    /* Secure by default, decided before anything is bound: a runner or
     * worker runs the code it is sent, so an open port needs a token. */
    int token_given = cl->token_file && *cl->token_file;
    if (kt_listen_check("gRPC", cl->listen, token_given, cl->insecure) != 0) {
        fprintf(stderr, "%s: %s\n", prog, kt_err_msg());
        return 2;
    }
    return -1;
}
