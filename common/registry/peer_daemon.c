/*
 * The peer daemon: what ktune-runner and ktune-worker share. See registry.h.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_config.h"
#include "registry.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

static const struct option common_opts[] = {
    {"tracker", required_argument, 0, 'T'},    {"listen", required_argument, 0, 'l'},
    {"advertise", required_argument, 0, 'A'},  {"token-file", required_argument, 0, 't'},
    {"tls-cert", required_argument, 0, 'c'},   {"tls-key", required_argument, 0, 'k'},
    {"tls-ca", required_argument, 0, 'C'},     {"version", no_argument, 0, 'V'},
    {"help", no_argument, 0, 'h'}};
#define NCOMMON (sizeof common_opts / sizeof common_opts[0])
#define MAX_OPTS 64

int kt_peer_cmdline_parse(kt_peer_cmdline_t *cl, const char *prog, int argc, char **argv,
                          const struct option *extra, kt_peer_option_fn fn, void *user,
                          void (*usage)(FILE *out))
{
    *cl = (kt_peer_cmdline_t){.prog = prog,
                              .listen = "127.0.0.1:0",
                              .token_file = getenv("KT_TOKEN_FILE")};
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
    int c;
    optind = 0;   /* GNU getopt: start over completely (a process may parse twice) */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
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
    return -1;
}

struct kt_peer_daemon {
    kt_peer_cmdline_t cl;
    const char *role;
    sigset_t sigs;
    char *token;
    kt_rpc_server_t *srv;
    kt_peer_agent_t *agent;
    char addr[KT_REGISTRY_ADDR_MAX];
};

kt_peer_daemon_t *kt_peer_daemon_start(const kt_peer_cmdline_t *cl, const kt_peer_service_t *svc)
{
    kt_peer_daemon_t *d = calloc(1, sizeof *d);
    if (!d) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    d->cl = *cl;
    d->role = svc->role;
    /* Blocked before any thread exists so that every thread inherits the
     * mask and the signals reach only kt_peer_daemon_wait. */
    sigemptyset(&d->sigs);
    sigaddset(&d->sigs, SIGINT);
    sigaddset(&d->sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &d->sigs, NULL);
    if (cl->token_file && *cl->token_file && !(d->token = kt_token_read(cl->token_file)))
        goto fail;
    kt_rpc_server_opts_t so = {.listen = cl->listen,
                               .token = d->token,
                               .tls_cert = cl->tls_cert,
                               .tls_key = cl->tls_key};
    if (!(d->srv = kt_rpc_server_new(&so)) ||
        kt_rpc_server_add_health(d->srv, svc->health_service, svc->role) != 0 ||
        kt_rpc_server_add_unary(d->srv, svc->method, svc->req_desc, svc->resp_desc, svc->fn,
                                svc->user) != 0 ||
        kt_rpc_server_start(d->srv) != 0)
        goto fail;
    const char *bound = kt_rpc_server_address(d->srv);
    if (!d->token && strncmp(bound, "127.", 4) != 0)
        KT_WARN("no token: anyone who reaches %s can run code on this host "
                "(set --token-file or KT_TOKEN_FILE)", bound);
    return d;
fail:
    kt_peer_daemon_stop(d, 0);
    return NULL;
}

const char *kt_peer_daemon_address(const kt_peer_daemon_t *d)
{
    return kt_rpc_server_address(d->srv);
}

int kt_peer_daemon_has_token(const kt_peer_daemon_t *d) { return d->token != NULL; }

int kt_peer_daemon_register(kt_peer_daemon_t *d, Ktune__V1__PeerInfo *me,
                            kt_peer_in_flight_fn in_flight, void *user, const char **addr)
{
    if (!d->cl.tracker)
        return 0;
    if (d->cl.advertise)
        snprintf(d->addr, sizeof d->addr, "%s", d->cl.advertise);
    else if (kt_peer_advertise_address(kt_rpc_server_address(d->srv), d->cl.tracker, d->addr,
                                       sizeof d->addr) != 0)
        return kt_err_code();
    me->role = (char *)d->role;
    me->address = d->addr;
    kt_peer_agent_opts_t ao = {.tracker = d->cl.tracker,
                               .token = d->token,
                               .tls_ca = d->cl.tls_ca,
                               .self = me,
                               .in_flight = in_flight,
                               .user = user};
    if (!(d->agent = kt_peer_agent_start(&ao)))
        return kt_err_code();
    if (addr)
        *addr = d->addr;
    return 0;
}

int kt_peer_daemon_wait(kt_peer_daemon_t *d)
{
    int sig = 0;
    sigwait(&d->sigs, &sig);
    return sig;
}

void kt_peer_daemon_stop(kt_peer_daemon_t *d, int drain_ms)
{
    if (!d)
        return;
    /* The tracker stops leasing us once heartbeats stop; calls it sends
     * meanwhile are refused and go elsewhere. */
    kt_peer_agent_stop(d->agent);
    kt_rpc_server_stop(d->srv, drain_ms);
    if (d->token) {
        memset(d->token, 0, strlen(d->token));
        free(d->token);
    }
    free(d);
}
