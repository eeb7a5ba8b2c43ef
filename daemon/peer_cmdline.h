/*
 * The command line every peer daemon (ktune-runner, ktune-worker) takes:
 * --tracker, --listen, --advertise, --token-file, --tls-cert, --tls-key,
 * --tls-ca, --tls-client-ca, --tls-client-cert, --tls-client-key, --insecure,
 * --version and --help, plus the daemon's own options, parsed into
 * the library's kt_peer_daemon_opts_t. Not part of libktune: it is compiled
 * into the daemons (daemon/meson.build), since only a program's edge reads
 * argv and writes usage to stderr.
 *
 * The options point into argv. Not thread-safe (getopt's globals).
 */
#ifndef KT_DAEMON_PEER_CMDLINE_H
#define KT_DAEMON_PEER_CMDLINE_H

#include <getopt.h>
#include <stdio.h>

#include "service/peer_daemon.h"

/* A daemon's own option: getopt's code c with its argument (NULL for a flag).
 * 0 when taken, or 2 after printing why it is bad to stderr. */
typedef int (*kt_peer_option_fn)(void *user, int c, const char *arg);

/* The --help lines of the mutual TLS options, after --tls-ca's. */
#define KT_PEER_CMDLINE_MTLS_HELP                                                              \
    "  --tls-client-ca F    mutual TLS: require of every caller (the tracker, the CLI)\n"     \
    "                       a client certificate signed by this CA (PEM); needs\n"           \
    "                       --tls-cert\n"                                                      \
    "  --tls-client-cert F  client certificate (PEM) shown to a tracker that requires\n"     \
    "                       one; needs --tls-ca and --tls-client-key\n"                       \
    "  --tls-client-key F   its private key (PEM)\n"

/* getopt codes of the mutual TLS options (beyond any character). */
enum { KT_PEER_O_CLIENT_CA = 1100, KT_PEER_O_CLIENT_CERT, KT_PEER_O_CLIENT_KEY };

/* Parse argv: the common options plus `extra` (getopt_long entries ending
 * with a zero entry; their codes must not be T l A t c k C V h I or the
 * KT_PEER_O_* above), handed to `fn`. -1 to go on; otherwise the exit
 * code: 0 after --help or --version (usage() or "<prog> <version>"
 * printed), 2 on a usage error (said on stderr), a listen address beyond
 * loopback without a token file or --insecure and bad TLS files
 * (kt_rpc_tls_check: unreadable, not PEM, a key not matching its
 * certificate) included (the token file itself is read by
 * kt_peer_daemon_start). Defaults: listen 127.0.0.1:0, token file $KT_TOKEN_FILE. */
int kt_peer_cmdline_parse(kt_peer_daemon_opts_t *opts, const char *prog, int argc, char **argv,
                          const struct option *extra, kt_peer_option_fn fn, void *user,
                          void (*usage)(FILE *out));

#endif
