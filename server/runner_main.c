/* ktune-runner: serves the Run service (common/measure/run_service.h) on one device for a tracker. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "measure/hw_params_json.h"
#include "measure/run_service.h"
#include "peer_cmdline.h"
#include "registry/registry.h"
#include "service/peer_daemon.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

/* A running batch gets this long to finish after SIGINT/SIGTERM. */
#define DEFAULT_DRAIN_MS 60000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-runner [options]\n"
            "\n"
            "The ktune runner: times candidates on one device for a tracker. Each batch runs\n"
            "in a child process, so a crashing or hanging kernel never takes the runner down.\n"
            "Runs until SIGINT or SIGTERM, which stop new calls and let the running batch\n"
            "finish (see --drain-ms) before the runner exits.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT  register with this tracker and heartbeat (default: none,\n"
            "                       serve Run calls only)\n"
            "  --key KEY            device key to register under (default: cpu)\n"
            "  --device DEV         cpu (default) or cuda:N\n"
            "  --listen ADDR        gRPC address to serve (default 127.0.0.1:0, a free port;\n"
            "                       use 0.0.0.0:PORT for a tracker on another host, which\n"
            "                       needs --token-file or --insecure)\n"
            "  --advertise ADDR     address the tracker should dial (default: the bound\n"
            "                       address; a wildcard host becomes the local address that\n"
            "                       routes to the tracker, 127.0.0.1 for a local tracker)\n"
            "  --threads N          OpenMP threads per kernel when a request sets none\n"
            "                       (default: the number of --cpus, else OpenMP's default)\n"
            "  --cpus LIST          pin timed children to these cores (\"0-3,6\")\n"
            "  --timer wall|cpu     time runs by elapsed time (default, as TVM) or by the\n"
            "                       CPU time of the timed child, which leaves out time it\n"
            "                       was preempted on a shared host; cpu implies --threads 1\n"
            "  --drain-ms N         on SIGTERM, time the running batch may take (default %d)\n"
            "  --token-file F       shared token required from every caller and sent to the\n"
            "                       tracker (first line of F; default: $KT_TOKEN_FILE)\n"
            "  --tls-cert F         server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F          server private key (PEM)\n"
            "  --tls-ca F           CA (PEM) to verify a tracker served over TLS\n"
            KT_PEER_CMDLINE_MTLS_HELP
            "  --insecure           serve beyond loopback without a token (anyone who\n"
            "                       reaches the port can run code here; docs/security.md)\n"
            "  --version            print the version and exit\n"
            "  -h, --help           print this help and exit\n"
            "\n"
            "A Run request's MeasureOptions are taken as given (min_repeat_ms 0 is off,\n"
            "check_correctness false skips the check); zero number, repeat and timeout_ms\n"
            "mean 3, 1 and 10 s. Without MeasureOptions the local runner's defaults apply.\n",
            DEFAULT_DRAIN_MS);
}

/* ---- The device ----------------------------------------------------------------------- */

/* ---- main ---------------------------------------------------------------------------------- */

/* The runner's own options. */
typedef struct {
    const char *dev_key, *device, *cpus;
    int timer;                /* KT_RUNNER_TIMER_* */
    long threads, drain_ms;
} runner_args_t;

static int runner_option(void *user, int c, const char *arg)
{
    runner_args_t *a = user;
    char *end;
    switch (c) {
    case 'K': a->dev_key = arg; return 0;
    case 'D': a->device = arg; return 0;
    case 'P': a->cpus = arg; return 0;
    case 'm':
        if ((a->timer = kt_runner_timer_parse(arg)) < 0) {
            fprintf(stderr, "ktune-runner: --timer is wall or cpu, not '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'n':
        a->threads = strtol(arg, &end, 10);
        if (end == arg || *end || a->threads < 1 || a->threads > 4096) {
            fprintf(stderr, "ktune-runner: --threads wants 1..4096, got '%s'\n", arg);
            return 2;
        }
        return 0;
    case 'd':
        a->drain_ms = strtol(arg, &end, 10);
        if (end == arg || *end || a->drain_ms < 0 || a->drain_ms > 3600000) {
            fprintf(stderr, "ktune-runner: --drain-ms wants 0..3600000, got '%s'\n", arg);
            return 2;
        }
        return 0;
    default: usage(stderr); return 2;
    }
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-runner: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {
        {"key", required_argument, 0, 'K'},      {"device", required_argument, 0, 'D'},
        {"threads", required_argument, 0, 'n'},  {"cpus", required_argument, 0, 'P'},
        {"drain-ms", required_argument, 0, 'd'}, {"timer", required_argument, 0, 'm'},
        {0, 0, 0, 0}};
    runner_args_t a = {.dev_key = "cpu", .device = "cpu", .timer = KT_RUNNER_TIMER_WALL,
                       .drain_ms = DEFAULT_DRAIN_MS};
    kt_peer_daemon_opts_t cl;
    int exit_code = kt_peer_cmdline_parse(&cl, "ktune-runner", argc, argv, opts, runner_option,
                                          &a, usage);
    if (exit_code >= 0)
        return exit_code;
    /* The tracker refuses other keys; say so now rather than retry forever. */
    if (!kt_registry_key_ok(a.dev_key)) {
        fprintf(stderr, "ktune-runner: --key wants letters, digits and ._:- (under %d bytes), "
                "not '%s'\n", KT_REGISTRY_KEY_MAX, a.dev_key);
        return 2;
    }
    int ordinal;      /* --device cuda:N; -1 for the CPU */
    if (kt_run_service_parse_device(a.device, &ordinal) != 0) {
        fprintf(stderr, "ktune-runner: --device is cpu or cuda:N, not '%s'\n", a.device);
        return 2;
    }
    int cores = a.cpus ? kt_cpu_list_parse(a.cpus, NULL) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores <= 0) {
        fprintf(stderr, "ktune-runner: --cpus wants a list like 0-3,6, not '%s'\n", a.cpus);
        return 2;
    }
    /* Fail at start-up, not at the first batch: no driver, no device or a
     * bad ordinal is said here (a GPU is probed in a child). */
    kt_hw_params_t hw;
    if (kt_run_service_device_params(ordinal, cores, &hw) != 0) {
        fprintf(stderr, "ktune-runner: --device %s: %s\n", a.device, kt_err_msg());
        return 1;
    }
    kt_run_service_opts_t ro = {.threads = a.threads ? (int)a.threads : (a.cpus ? cores : 0),
                                .cpus = a.cpus, .cuda_device = ordinal, .timer = a.timer};
    if (ro.timer == KT_RUNNER_TIMER_CPU) {
        if (ordinal >= 0 || a.threads > 1) {
            fprintf(stderr, ordinal >= 0 ? "ktune-runner: --timer cpu times CPU kernels; a GPU "
                                           "is timed by its events\n"
                                         : "ktune-runner: --timer cpu needs --threads 1 (the "
                                           "CPU time of several threads adds up)\n");
            return 2;
        }
        ro.threads = 1;
    }
    kt_run_service_t *x = kt_run_service_new(&ro);
    if (!x) {
        KT_ERROR("%s", kt_err_msg());
        return 1;
    }
    kt_peer_service_t svc = {.health_service = "Runner",
                             .role = "runner",
                             .method = KT_RUN_SERVICE_METHOD,
                             .req_desc = &ktune__v1__run_request__descriptor,
                             .resp_desc = &ktune__v1__run_response__descriptor,
                             .fn = kt_run_service_handle,
                             .user = x};
    kt_peer_daemon_t *d = kt_peer_daemon_start(&cl, &svc);
    if (!d) {
        KT_ERROR("%s", kt_err_msg());
        kt_run_service_free(x);
        /* Refused for security (a token others can read): a usage error. */
        return kt_err_code() == KT_EAUTH ? 2 : 1;
    }
    KT_INFO("ktune-runner %s listening on %s (%s%s), device %s", KT_VERSION,
            kt_peer_daemon_address(d),
            cl.tls_client_ca ? "mutual TLS" : cl.tls_cert ? "TLS" : "plaintext",
            kt_peer_daemon_has_token(d) ? ", token required" : "", a.device);
    if (cl.tracker) {
        Ktune__V1__DeviceInfo dev;
        kt_hw_params_to_proto(&hw, &dev);
        Ktune__V1__PeerInfo me = KTUNE__V1__PEER_INFO__INIT;
        me.key = (char *)a.dev_key;
        me.device = &dev;
        me.capacity = 1;
        const char *addr = NULL;
        if (kt_peer_daemon_register(d, &me, kt_run_service_in_flight, x, &addr) != 0) {
            KT_ERROR("%s", kt_err_msg());
            kt_peer_daemon_stop(d, 0);
            kt_run_service_free(x);
            return 1;
        }
        KT_INFO("registering with tracker %s as key %s at %s (%s, %s, %d cores)", cl.tracker,
                a.dev_key, addr, hw.name, hw.arch, cores);
    }
    int sig = kt_peer_daemon_wait(d);
    KT_INFO("%s: draining (no new calls; a running batch gets %ld ms)",
            sig == SIGINT ? "SIGINT" : "SIGTERM", a.drain_ms);
    /* A batch that outlives the drain is abandoned (its child dies with us). */
    kt_peer_daemon_exit_after(d, (int)a.drain_ms + 5000);
    kt_peer_daemon_stop(d, (int)a.drain_ms);
    kt_run_service_free(x);
    KT_INFO("stopped");
    return 0;
}
