/* ktune-tracker: the stateful daemon (jobs, scheduler, registry, store). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_config.h"
#include "util/err.h"
#include "util/log.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune-tracker [options]\n"
            "\n"
            "The ktune tracker: owns jobs, the task scheduler, the runner/worker registry\n"
            "and the SQLite record store.\n"
            "\n"
            "options:\n"
            "  --listen ADDR       gRPC address to serve (default 0.0.0.0:9190)\n"
            "  --http ADDR         HTTP status page and /metrics (default 0.0.0.0:9191)\n"
            "  --db PATH           record store (default ./ktune.db)\n"
            "  --token-file F      shared token required from every peer\n"
            "  --tls-cert F        server certificate (PEM); enables TLS with --tls-key\n"
            "  --tls-key F         server private key (PEM)\n"
            "  --version           print the version and exit\n"
            "  -h, --help          print this help and exit\n");
}

int main(int argc, char **argv)
{
    kt_log_set_name(argv[0]);
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'}, {"http", required_argument, 0, 'H'},
        {"db", required_argument, 0, 'd'},     {"token-file", required_argument, 0, 't'},
        {"tls-cert", required_argument, 0, 'c'}, {"tls-key", required_argument, 0, 'k'},
        {"version", no_argument, 0, 'V'},      {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'V': printf("ktune-tracker %s\n", KT_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        case 'l': case 'H': case 'd': case 't': case 'c': case 'k': break;
        default: usage(stderr); return 2;
        }
    }
    fprintf(stderr, "ktune-tracker: the tracker service is not built yet in this version\n");
    return 1;
}
