/* The peer daemon around a runner's or worker's one service; see peer_daemon.h. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kt_config.h"
#include "service/peer_daemon.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

struct kt_peer_daemon {
    kt_peer_daemon_opts_t cl;
    const char *role;
    sigset_t sigs;
    char *token;
    kt_rpc_server_t *srv;
    kt_peer_agent_t *agent;
    char addr[KT_REGISTRY_ADDR_MAX];
};

kt_peer_daemon_t *kt_peer_daemon_start(const kt_peer_daemon_opts_t *cl,
                                       const kt_peer_service_t *svc)
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
    /* The command line checked this already; a library caller gets the
     * same rule, since the service runs whatever code it is sent. */
    if (kt_listen_check("gRPC", cl->listen, d->token != NULL, cl->insecure) != 0)
        goto fail;
    kt_rpc_server_opts_t so = {.listen = cl->listen,
                               .token = d->token,
                               .tls_cert = cl->tls_cert,
                               .tls_key = cl->tls_key,
                               .tls_client_ca = cl->tls_client_ca};
    if (!(d->srv = kt_rpc_server_new(&so)) ||
        kt_rpc_server_add_health(d->srv, svc->health_service, svc->role) != 0 ||
        kt_rpc_server_add_unary(d->srv, svc->method, svc->req_desc, svc->resp_desc, svc->fn,
                                svc->user) != 0 ||
        kt_rpc_server_start(d->srv) != 0)
        goto fail;
    const char *bound = kt_rpc_server_address(d->srv);
    if (!d->token && !kt_addr_is_loopback(bound))
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
                               .tls_cert = d->cl.tls_client_cert,
                               .tls_key = d->cl.tls_client_key,
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

/* The drain deadline passed: the process exits and a batch's timing child
 * dies with its parent thread. */
static void *exit_timer(void *arg)
{
    int ms = (int)(intptr_t)arg;
    kt_sleep_ms(ms);
    KT_ERROR("the running batch did not finish within the drain time; exiting without it");
    _exit(1);
}

int kt_peer_daemon_exit_after(kt_peer_daemon_t *d, int ms)
{
    (void)d;
    pthread_t t;
    if (pthread_create(&t, NULL, exit_timer, (void *)(intptr_t)(ms < 0 ? 0 : ms)) != 0)
        return kt_err_set(KT_ENOMEM, "cannot start the drain timer");
    pthread_detach(t);
    return 0;
}
