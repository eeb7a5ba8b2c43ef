/* ktune queue: the tracker's runners, workers and per-key queues, printed like
 * TVM's `python -m tvm.exec.query_rpc_tracker`. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ktune queue --tracker HOST:PORT [options]\n"
            "\n"
            "Show the runners and workers registered with a tracker and, per device key,\n"
            "how many runners there are, how many are free and how many batches wait.\n"
            "\n"
            "options:\n"
            "  --tracker HOST:PORT   the tracker (its gRPC address)\n"
            "  --token-file F        file holding the shared token (default: $KT_TOKEN_FILE)\n"
            "  --tls-ca F            CA certificate (PEM) to verify a TLS tracker; enables TLS\n"
            KT_CLI_MTLS_HELP
            "  --timeout MS          give up after MS milliseconds (default 5000)\n"
            "  --json                print one JSON object instead of tables\n"
            "  -h, --help            print this help and exit\n");
}

/* "runner:cpu" / "worker:cpu,cuda": TVM prints "server:<key>" here. */
static void role_key(const Ktune__V1__PeerInfo *p, kt_sbuf_t *b)
{
    kt_sbuf_clear(b);
    kt_sbuf_printf(b, "%s:", p->role);
    if (strcmp(p->role, "runner") == 0) {
        kt_sbuf_puts(b, p->key);
    } else {
        for (size_t i = 0; i < p->n_targets; i++)
            kt_sbuf_printf(b, "%s%s", i ? "," : "", p->targets[i]);
    }
}

static void rule(int width)
{
    for (int i = 0; i < width; i++)
        putchar('-');
    putchar('\n');
}

static void print_tables(const char *addr, const Ktune__V1__QueueStatusResponse *r)
{
    int wa = (int)strlen("server-address"), wk = (int)strlen("key"), ws = (int)strlen("state");
    kt_sbuf_t b;
    kt_sbuf_init(&b);
    for (size_t i = 0; i < r->n_peers; i++) {
        const Ktune__V1__PeerInfo *p = r->peers[i];
        role_key(p, &b);
        if ((int)strlen(p->address) > wa)
            wa = (int)strlen(p->address);
        if ((int)b.len > wk)
            wk = (int)b.len;
        if ((int)strlen(p->state) > ws)
            ws = (int)strlen(p->state);
    }
    int width = wa + 2 + wk + 2 + ws;
    printf("Tracker address %s\n\nServer List\n", addr);
    rule(width);
    printf("%-*s  %-*s  %s\n", wa, "server-address", wk, "key", "state");
    rule(width);
    for (size_t i = 0; i < r->n_peers; i++) {
        const Ktune__V1__PeerInfo *p = r->peers[i];
        role_key(p, &b);
        printf("%-*s  %-*s  %s\n", wa, p->address, wk, b.data ? b.data : "", p->state);
    }
    rule(width);
    kt_sbuf_free(&b);

    int wq = (int)strlen("key");
    for (size_t i = 0; i < r->n_queues; i++)
        if ((int)strlen(r->queues[i]->key) > wq)
            wq = (int)strlen(r->queues[i]->key);
    printf("\nQueue Status\n");
    rule(wq + 22);
    printf("%-*s  %5s  %4s  %7s\n", wq, "key", "total", "free", "pending");
    rule(wq + 22);
    for (size_t i = 0; i < r->n_queues; i++) {
        const Ktune__V1__QueueInfo *q = r->queues[i];
        printf("%-*s  %5d  %4d  %7d\n", wq, q->key, q->total, q->free, q->pending);
    }
    rule(wq + 22);
}

static int print_json(const char *addr, const Ktune__V1__QueueStatusResponse *r)
{
    json_t *peers = json_array(), *queues = json_array();
    for (size_t i = 0; i < r->n_peers; i++) {
        const Ktune__V1__PeerInfo *p = r->peers[i];
        json_t *targets = json_array();
        for (size_t k = 0; k < p->n_targets; k++)
            json_array_append_new(targets, json_string(p->targets[k]));
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:f, s:o}", "id", p->peer_id,
                              "role", p->role, "address", p->address, "key", p->key, "state",
                              p->state, "capacity", p->capacity, "in_flight", p->in_flight,
                              "last_seen", p->last_seen, "targets", targets);
        if (o && p->device)
            json_object_set_new(o, "device",
                                json_pack("{s:s, s:s, s:s, s:i, s:i, s:i}", "target",
                                          p->device->target, "name", p->device->name, "arch",
                                          p->device->arch, "num_cores", p->device->num_cores,
                                          "vector_unit_bytes", p->device->vector_unit_bytes,
                                          "cache_line_bytes", p->device->cache_line_bytes));
        json_array_append_new(peers, o);
    }
    for (size_t i = 0; i < r->n_queues; i++) {
        const Ktune__V1__QueueInfo *q = r->queues[i];
        json_array_append_new(queues, json_pack("{s:s, s:i, s:i, s:i}", "key", q->key, "total",
                                                q->total, "free", q->free, "pending", q->pending));
    }
    json_t *all = json_pack("{s:s, s:o, s:o}", "tracker", addr, "peers", peers, "queues", queues);
    char *text = all ? json_dumps(all, JSON_INDENT(2)) : NULL;
    json_decref(all);
    if (!text) {
        kt_err_set(KT_ENOMEM, "out of memory");
        return kt_cli_fail("queue");
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

int kt_cli_queue(int argc, char **argv)
{
    static const struct option opts[] = {KT_CLI_CONN_OPTIONS,
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    kt_cli_conn_t conn;
    kt_cli_conn_init(&conn, 5000);
    int json = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int taken = kt_cli_conn_option("queue", &conn, c, optarg);
        if (taken == 2)
            return 2;
        switch (taken ? 0 : c) {
        case 0: break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "ktune queue: bad option '%s' (see ktune queue --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    const char *addr = conn.tracker, *token_file = conn.token_file;
    long timeout_ms = conn.timeout_ms;
    if (optind < argc) {
        fprintf(stderr, "ktune queue: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!addr) {
        fprintf(stderr, "ktune queue: --tracker HOST:PORT is required\n");
        usage(stderr);
        return 2;
    }
    if (kt_cli_conn_check("queue", &conn))
        return 2;
    kt_rpc_client_t *cl = kt_cli_connect("queue", &conn);
    if (!cl)
        return 1;
    Ktune__V1__QueueStatusRequest req = KTUNE__V1__QUEUE_STATUS_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    kt_rpc_status_t st;
    int rc = kt_rpc_call_unary(cl, "/ktune.v1.Tracker/QueueStatus", &req.base,
                               &ktune__v1__queue_status_response__descriptor, (int)timeout_ms,
                               &out, &st);
    kt_rpc_client_free(cl);
    if (rc != 0) {
        if (st.code == KT_RPC_UNAVAILABLE)
            fprintf(stderr, "ktune queue: cannot reach %s (%s)\n", addr, st.msg);
        else if (st.code == KT_RPC_UNAUTHENTICATED)
            fprintf(stderr, "ktune queue: %s refused the call: UNAUTHENTICATED (%s)\n", addr,
                    token_file && *token_file ? "wrong token"
                                              : "a token is required; use --token-file");
        else if (st.code == KT_RPC_DEADLINE_EXCEEDED)
            fprintf(stderr, "ktune queue: %s did not answer within %ld ms\n", addr, timeout_ms);
        else
            fprintf(stderr, "ktune queue: %s: %s: %s\n", addr, kt_rpc_code_name(st.code),
                    st.msg);
        return 1;
    }
    Ktune__V1__QueueStatusResponse *r = (Ktune__V1__QueueStatusResponse *)out;
    int ret = 0;
    if (json)
        ret = print_json(addr, r);
    else
        print_tables(addr, r);
    protobuf_c_message_free_unpacked(out, NULL);
    return ret;
}
