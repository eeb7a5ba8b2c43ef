/* ktune-worker: serves the Build service (common/measure/build_service.h) for a tracker. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "measure/build_service.h"
#include "peer_cmdline.h"
#include "service/peer_daemon.h"
#include "util/err.h"
#include "util/log.h"

/* In-flight calls get this long to finish after SIGINT/SIGTERM. */
#define DRAIN_MS 30000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-worker [options]\n"
            "\n"
            "The ktune worker: builds batches of candidates for a tracker, --jobs at a time,\n"
            "each compile in its own process with the request's timeout. Identical\n"
            "candidates are compiled once per process (or once per --cache-dir).\n"
            "Runs until SIGINT or SIGTERM.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT  register with this tracker and heartbeat (default: none,\n"
            "                       serve Build calls only)\n"
            "  --jobs N             parallel compiles (default: online cores)\n"
            "  --cache-dir DIR      keep built artifacts here across restarts (default: a\n"
            "                       private directory removed at exit)\n"
            "  --listen ADDR        gRPC address to serve (default 127.0.0.1:0, a free port;\n"
            "                       use 0.0.0.0:PORT for a tracker on another host, which\n"
            "                       needs --token-file or --insecure)\n"
            "  --advertise ADDR     address the tracker should dial (default: the bound\n"
            "                       address; a wildcard host becomes the local address that\n"
            "                       routes to the tracker, 127.0.0.1 for a local tracker)\n"
            "  --token-file F       shared token required from every caller and sent to the\n"
            "                       tracker (first line of F; default: $KT_TOKEN_FILE)\n"
            "  --tls-cert F         server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F          server private key (PEM)\n"
            "  --tls-ca F           CA (PEM) to verify a tracker served over TLS\n"
            KT_PEER_CMDLINE_MTLS_HELP
            "  --insecure           serve beyond loopback without a token (anyone who\n"
            "                       reaches the port can run code here; docs/security.md)\n"
            "  --version            print the version and exit\n"
            "  -h, --help           print this help and exit\n");
}

/* The worker's own options. */
typedef struct {
    long jobs;
    const char *cache_dir;
} worker_args_t;

static int worker_option(void *user, int c, const char *arg)
{
    worker_args_t *a = user;
    char *end;
    switch (c) {
    case 'j':
        a->jobs = strtol(arg, &end, 10);
        if (end == arg || *end || a->jobs < 1 || a->jobs > 1024) {
            fprintf(stderr, "ktune-worker: --jobs wants 1..1024, got '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'D': a->cache_dir = arg; return 0;
    default: usage(stderr); return 2;
    }
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-worker: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {{"jobs", required_argument, 0, 'j'},
                                         {"cache-dir", required_argument, 0, 'D'},
                                         {0, 0, 0, 0}};
    worker_args_t a = {.jobs = sysconf(_SC_NPROCESSORS_ONLN)};
    kt_peer_daemon_opts_t cl;
    int exit_code = kt_peer_cmdline_parse(&cl, "ktune-worker", argc, argv, opts, worker_option,
                                          &a, usage);
    if (exit_code >= 0)
        return exit_code;
    long jobs = a.jobs < 1 ? 1 : a.jobs;

    kt_build_service_opts_t bo = {.jobs = (int)jobs, .cache_dir = a.cache_dir};
    kt_build_service_t *x = kt_build_service_new(&bo);
    if (!x) {
        KT_ERROR("%s", kt_err_msg());
        return 1;
    }
    int rc = 1;
    kt_peer_service_t svc = {.health_service = "Worker",
                             .role = "worker",
                             .method = KT_BUILD_SERVICE_METHOD,
                             .req_desc = &ktune__v1__build_request__descriptor,
                             .resp_desc = &ktune__v1__build_response__descriptor,
                             .fn = kt_build_service_handle,
                             .user = x};
    kt_peer_daemon_t *d = kt_peer_daemon_start(&cl, &svc);
    if (!d) {
        KT_ERROR("%s", kt_err_msg());
        /* Refused for security (a token others can read): a usage error. */
        if (kt_err_code() == KT_EAUTH)
            rc = 2;
        goto out;
    }
    KT_INFO("ktune-worker %s listening on %s (%s%s), %ld parallel builds", KT_VERSION,
            kt_peer_daemon_address(d),
            cl.tls_client_ca ? "mutual TLS" : cl.tls_cert ? "TLS" : "plaintext",
            kt_peer_daemon_has_token(d) ? ", token required" : "", jobs);
    /* CUDA builds go through NVRTC, present when built with CUDA. */
    char *targets[] = {"cpu", "cuda"};
    Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
    me.capacity = (int32_t)jobs;
    me.targets = targets;
    me.n_targets = KT_HAVE_CUDA ? 2 : 1;
    const char *addr = NULL;
    if (kt_peer_daemon_register(d, &me, kt_build_service_in_flight, x, &addr) != 0) {
        KT_ERROR("%s", kt_err_msg());
        goto out;
    }
    if (addr)
        KT_INFO("registering with tracker %s at %s (targets cpu%s)", cl.tracker, addr,
                KT_HAVE_CUDA ? ", cuda" : "");
    int sig = kt_peer_daemon_wait(d);
    KT_INFO("%s: stopping (in-flight builds get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
            DRAIN_MS);
    kt_peer_daemon_stop(d, DRAIN_MS);
    d = NULL;
    rc = 0;
    KT_INFO("stopped");
out:
    kt_peer_daemon_stop(d, 0);
    kt_build_service_free(x);
    return rc;
}
