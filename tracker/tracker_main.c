/* ktune-tracker: the stateful daemon (jobs, scheduler, registry, store). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "service/jobs.h"
#include "kt_config.h"
#include "registry/registry.h"
#include "service/tracker.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/util.h"

/* In-flight calls get this long to finish after SIGINT/SIGTERM. */
#define DRAIN_MS 5000

/* getopt codes of the long options without a letter. */
enum { O_CLIENT_CA = 1100, O_CLIENT_CERT, O_CLIENT_KEY };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-tracker [options]\n"
            "\n"
            "The ktune tracker: owns jobs, the task scheduler, the runner/worker registry\n"
            "and the record store. Runs until SIGINT or SIGTERM; jobs still running then\n"
            "resume from the store when a tracker starts again on it.\n"
            "\n"
            "options:\n"
            "  --listen ADDR        gRPC address to serve (default " KT_TRACKER_DEFAULT_LISTEN
            "; port 0 picks one);\n"
            "                       beyond loopback it needs --token-file or --insecure\n"
            "  --http ADDR          status page and /metrics (default " KT_HTTP_DEFAULT_BIND
            "; 'off' for none);\n"
            "                       beyond loopback it needs --token-file or --insecure, and\n"
            "                       with a token every route but /healthz needs\n"
            "                       'Authorization: Bearer <token>'\n"
            "  --db PATH            record store (SQLite; created if missing; default " KT_JOBS_DEFAULT_DB ")\n"
            "  --port-file F        once serving, write the bound gRPC address to F\n"
            "  --heartbeat-ms N     heartbeat interval given to runners and workers (default %d);\n"
            "                       a peer silent for %d intervals is dropped\n"
            "  --token-file F       shared token required from every peer and sent to runners\n"
            "                       and workers (first line of F; default: $KT_TOKEN_FILE)\n"
            "  --tls-cert F         server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F          server private key (PEM)\n"
            "  --tls-ca F           CA (PEM) to verify runners and workers served over TLS\n"
            "  --tls-client-ca F    mutual TLS: require of every caller (CLI, runners,\n"
            "                       workers) a client certificate signed by this CA (PEM);\n"
            "                       needs --tls-cert\n"
            "  --tls-client-cert F  client certificate (PEM) shown to runners and workers\n"
            "                       that require one; needs --tls-ca and --tls-client-key\n"
            "  --tls-client-key F   its private key (PEM)\n"
            "  --search-threads N   threads for the searches (candidate generation, scoring,\n"
            "                       model training) of all jobs (1..%d; default: the online\n"
            "                       cores, here %d); a seeded job proposes the same states\n"
            "                       whatever N\n"
            "  --insecure           serve beyond loopback without a token (anyone who reaches\n"
            "                       the port can submit jobs and read the status; see\n"
            "                       docs/security.md)\n"
            "  --version            print the version and exit\n"
            "  -h, --help           print this help and exit\n",
            KT_REGISTRY_DEFAULT_HEARTBEAT_MS, KT_REGISTRY_MISSED_BEATS, KT_POOL_MAX_THREADS,
            kt_pool_online_cores());
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    if (kt_log_init_from_env() != 0) {
        fprintf(stderr, "ktune-tracker: %s\n", kt_err_msg());
        return 2;
    }
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},   {"http", required_argument, 0, 'H'},
        {"heartbeat-ms", required_argument, 0, 'b'}, {"token-file", required_argument, 0, 't'},
        {"tls-cert", required_argument, 0, 'c'}, {"tls-key", required_argument, 0, 'k'},
        {"tls-ca", required_argument, 0, 'C'},   {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},           {"db", required_argument, 0, 'd'},
        {"port-file", required_argument, 0, 'p'}, {"search-threads", required_argument, 0, 's'},
        {"insecure", no_argument, 0, 'I'},
        {"tls-client-ca", required_argument, 0, O_CLIENT_CA},
        {"tls-client-cert", required_argument, 0, O_CLIENT_CERT},
        {"tls-client-key", required_argument, 0, O_CLIENT_KEY},
        {0, 0, 0, 0}};
    kt_tracker_opts_t to = {.listen = KT_TRACKER_DEFAULT_LISTEN, .http = KT_HTTP_DEFAULT_BIND};
    const char *token_file = getenv("KT_TOKEN_FILE");
    const char *db = KT_JOBS_DEFAULT_DB, *port_file = NULL;
    int search_threads = 0;   /* 0: the job manager's default, the online cores */
    int c, li = -1, insecure = 0;
    while ((c = getopt_long(argc, argv, "h", opts, &li)) != -1) {
        /* An empty path or address would read as "not given" (an empty
         * --token-file as no token at all): refused, as ktune does. */
        if (optarg && !*optarg && li >= 0) {
            fprintf(stderr, "ktune-tracker: --%s needs a value\n", opts[li].name);
            return 2;
        }
        li = -1;
        switch (c) {
        case 'V': printf("ktune-tracker %s\n", KT_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        case 'l': to.listen = optarg; break;
        case 'H': to.http = strcmp(optarg, "off") == 0 ? NULL : optarg; break;
        case 'b': {
            char *end;
            long ms = strtol(optarg, &end, 10);
            if (end == optarg || *end || ms < 10 || ms > 600000) {
                fprintf(stderr, "ktune-tracker: --heartbeat-ms wants 10..600000, got '%s'\n",
                        optarg);
                return 2;
            }
            to.heartbeat_ms = (int)ms;
            break;
        }
        case 's': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end || n < 1 || n > KT_POOL_MAX_THREADS) {
                fprintf(stderr, "ktune-tracker: --search-threads wants 1..%d, got '%s'\n",
                        KT_POOL_MAX_THREADS, optarg);
                return 2;
            }
            search_threads = (int)n;
            break;
        }
        case 't': token_file = optarg; break;
        case 'd': db = optarg; break;
        case 'p': port_file = optarg; break;
        case 'c': to.tls_cert = optarg; break;
        case 'k': to.tls_key = optarg; break;
        case 'C': to.tls_ca = optarg; break;
        case 'I': insecure = 1; break;
        case O_CLIENT_CA: to.tls_client_ca = optarg; break;
        case O_CLIENT_CERT: to.tls_client_cert = optarg; break;
        case O_CLIENT_KEY: to.tls_client_key = optarg; break;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ktune-tracker: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    kt_rpc_tls_files_t tls = {.cert = to.tls_cert, .key = to.tls_key,
                              .client_ca = to.tls_client_ca, .ca = to.tls_ca,
                              .client_cert = to.tls_client_cert,
                              .client_key = to.tls_client_key};
    if (kt_rpc_tls_check(&tls) != 0) {
        fprintf(stderr, "ktune-tracker: %s\n", kt_err_msg());
        return 2;
    }
    /* Secure by default: decided from the command line alone, before
     * anything is bound, so a refused start leaves no port open. */
    int token_given = token_file && *token_file;
    if (kt_listen_check("gRPC", to.listen, token_given, insecure) != 0 ||
        (to.http && kt_listen_check("HTTP", to.http, token_given, insecure) != 0)) {
        fprintf(stderr, "ktune-tracker: %s\n", kt_err_msg());
        return 2;
    }
    char *token = NULL;
    if (token_given && !(token = kt_token_read(token_file))) {
        /* A token other users can read is refused like an open port (2);
         * a missing file stays a start-up failure (1). */
        fprintf(stderr, "ktune-tracker: %s\n", kt_err_msg());
        return kt_err_code() == KT_EAUTH ? 2 : 1;
    }
    to.token = token;
    int have_token = token != NULL;

    /* Blocked before any thread exists so that every thread inherits the
     * mask and the signals reach only sigwait below. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    kt_tracker_t *t = kt_tracker_new(&to);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    kt_jobs_t *jobs = t ? kt_jobs_new(t, db) : NULL;
    if (!t || !jobs || (search_threads && kt_jobs_set_search_threads(jobs, search_threads) != 0) ||
        kt_tracker_start(t) != 0) {
        KT_ERROR("%s", kt_err_msg());
        kt_jobs_free(jobs);
        kt_tracker_stop(t, 0);
        return 1;
    }
    KT_INFO("ktune-tracker %s listening on %s (%s%s), heartbeat %d ms", KT_VERSION,
            kt_tracker_address(t),
            to.tls_client_ca ? "mutual TLS" : to.tls_cert ? "TLS" : "plaintext",
            have_token ? ", token required" : "",
            kt_registry_heartbeat_ms(kt_tracker_registry(t)));
    if (kt_tracker_http_port(t) > 0)
        KT_INFO("status page and /metrics on http port %d", kt_tracker_http_port(t));
    KT_INFO("record store %s; %d search threads", db, kt_jobs_search_threads(jobs));
    int rc = 0;
    if (kt_jobs_start(jobs) != 0) {
        KT_ERROR("resuming jobs: %s", kt_err_msg());
        rc = 1;
    }
    if (rc == 0 && port_file) {
        char line[300];
        int n = snprintf(line, sizeof line, "%s\n", kt_tracker_address(t));
        if (kt_file_write(port_file, line, (size_t)n) != 0) {
            KT_ERROR("--port-file: %s", kt_err_msg());
            rc = 1;
        }
    }
    int sig = 0;
    if (rc == 0) {
        sigwait(&sigs, &sig);
        KT_INFO("%s: stopping (in-flight calls get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
                DRAIN_MS);
    }
    /* Jobs first: their rounds call runners and workers through the tracker. */
    kt_jobs_stop(jobs);
    kt_tracker_stop(t, DRAIN_MS);
    kt_jobs_free(jobs);
    if (rc != 0)
        return rc;
    KT_INFO("stopped");
    return 0;
}
