/* The network options every network command shares: --network, --network-file,
 * --onnx, --input, --layout, --batch, --seq-len (cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "util/err.h"

const char *const KT_CLI_NET_HELP =
    "  --network NAME        a built-in network (ktune tasks --list)\n"
    "  --network-file FILE   a JSON network file (format in NETWORKS.md)\n"
    "  --onnx FILE           an ONNX model\n"
    "  --input NAME=DIMS     shape of an ONNX graph input, e.g. data=1x3x224x224\n"
    "  --layout L            te operators for 4-D tensors: NHWC (default) or NCHW\n"
    "  --batch N             batch size of a built-in network (default 1), or of an\n"
    "                        ONNX model's symbolic first input dimension\n"
    "  --seq-len L           sequence length of bert-base (default 128)\n"
    "  --winograd            NHWC: each 3x3 stride-1 conv2d task also gets a Winograd\n"
    "                        task for the same layers; tuning measures both, the\n"
    "                        build uses the faster (docs/network.md). The default\n"
    "                        for NHWC CPU tasks (CUDA: give it)\n"
    "  --no-winograd         direct convolutions only\n";

void kt_cli_net_init(kt_cli_net_t *n)
{
    memset(n, 0, sizeof *n);
    n->layout = KT_NET_NHWC;
}

/* An int option in lo..hi: 0, or 2 after saying why. */
static int parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    long long v = 0;
    if (kt_cli_parse_num(cmd, opt, s, lo, hi, &v))
        return 2;
    *out = (int)v;
    return 0;
}

/* A name or path option: 1 taken, 2 when empty (said). */
static int taken(const char *cmd, const char *opt, const char *arg)
{
    return kt_cli_nonempty(cmd, opt, arg) ? 2 : 1;
}

int kt_cli_net_option(const char *cmd, kt_cli_net_t *n, int code, const char *arg)
{
    switch (code) {
    case KT_CLI_O_NETWORK: n->network = arg; return taken(cmd, "--network", arg);
    case KT_CLI_O_NETFILE: n->file = arg; return taken(cmd, "--network-file", arg);
    case KT_CLI_O_ONNX: n->onnx = arg; return taken(cmd, "--onnx", arg);
    case KT_CLI_O_LAYOUT:
        if (kt_net_layout_parse(arg, &n->layout)) {
            fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
            return 2;
        }
        n->layout_given = 1;
        return 1;
    case KT_CLI_O_WINOGRAD: n->winograd = 1; return 1;
    case KT_CLI_O_NO_WINOGRAD: n->winograd = -1; return 1;
    case KT_CLI_O_BATCH:
        return parse_int(cmd, "--batch", arg, 1, 65536, &n->batch) ? 2 : 1;
    case KT_CLI_O_SEQLEN:
        return parse_int(cmd, "--seq-len", arg, 1, 65536, &n->seq_len) ? 2 : 1;
    case KT_CLI_O_INPUT:
        if (n->ninputs == KT_CLI_MAX_INPUTS) {
            fprintf(stderr, "ktune %s: at most %d --input options\n", cmd, KT_CLI_MAX_INPUTS);
            return 2;
        }
        if (kt_net_parse_input_spec(arg, &n->inputs[n->ninputs]) != 0) {
            fprintf(stderr, "ktune %s: %s\n", cmd, kt_err_msg());
            return 2;
        }
        n->ninputs++;
        return 1;
    default:
        return 0;
    }
}

int kt_cli_net_given(const kt_cli_net_t *n)
{
    return !!n->network + !!n->file + !!n->onnx;
}

int kt_cli_net_check(const char *cmd, const kt_cli_net_t *n)
{
    if (kt_cli_net_given(n) != 1) {
        fprintf(stderr, "ktune %s: give exactly one of --network, --network-file, --onnx\n", cmd);
        return 2;
    }
    if (n->ninputs && !n->onnx) {
        fprintf(stderr, "ktune %s: --input applies to --onnx only\n", cmd);
        return 2;
    }
    if (n->seq_len && !(n->network && strcmp(n->network, "bert-base") == 0)) {
        fprintf(stderr, "ktune %s: --seq-len applies to --network bert-base only\n", cmd);
        return 2;
    }
    if (n->winograd > 0 && n->layout == KT_NET_NCHW) {
        fprintf(stderr, "ktune %s: --winograd applies to the NHWC layout only\n", cmd);
        return 2;
    }
    if (n->batch && n->file) {
        fprintf(stderr, "ktune %s: --batch does not apply to --network-file (its input "
                        "layers give the shapes)\n", cmd);
        return 2;
    }
    return 0;
}

kt_net_t *kt_cli_net_load(const char *cmd, const kt_cli_net_t *n)
{
    kt_net_t *net = n->network ? kt_net_builtin(n->network, n->batch ? n->batch : 1, n->seq_len)
                    : n->file  ? kt_net_load_file(n->file)
                               : kt_net_onnx_load(n->onnx, n->inputs, n->ninputs, n->batch);
    if (!net)
        fprintf(stderr, "ktune %s: %s: %s\n", cmd, kt_cli_net_source(n), kt_err_msg());
    return net;
}

const char *kt_cli_net_source(const kt_cli_net_t *n)
{
    return n->network ? n->network : n->file ? n->file : n->onnx ? n->onnx : "";
}

int kt_cli_net_extract_flags(const kt_cli_net_t *n, const char *target)
{
    /* On by default where it was measured to win (CPU, NHWC: docs/benchmarks.md);
     * the CUDA path is checked on the CPU only, so it stays opt-in there. */
    int cpu = !target || strcmp(target, "cpu") == 0;
    int on = n->winograd > 0 || (n->winograd == 0 && cpu && n->layout == KT_NET_NHWC);
    return on ? KT_NET_EXTRACT_WINOGRAD : 0;
}
