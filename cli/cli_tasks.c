/* ktune tasks: extract a network's tuning tasks and their weights. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "net/net.h"
#include "util/err.h"
#include "util/util.h"

static void tasks_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune tasks (--network NAME | --network-file FILE | --onnx FILE)\n"
            "                   [--layout NHWC|NCHW] [--batch N] [--seq-len L]\n"
            "                   [--input NAME=DxDx...]... [--json] [--out FILE]\n"
            "       ktune tasks --list\n"
            "\n"
            "Partition a network into tuning tasks as TVM's extract_tasks does (fused\n"
            "subgraphs such as conv2d + bias + relu) and print each with its workload key,\n"
            "compute DAG and weight (the number of times it appears).\n"
            "\n"
            "  --network NAME       a built-in network (see --list)\n"
            "  --network-file FILE  a JSON network file (format in NETWORKS.md)\n"
            "  --onnx FILE          an ONNX model\n"
            "  --layout L           te operators to use for 4-D tensors: NHWC (default) or NCHW\n"
            "  --batch N            batch size of a built-in network (default 1), or of an\n"
            "                       ONNX model's symbolic first input dimension\n"
            "  --seq-len L          sequence length of bert-base (default 128)\n"
            "  --input NAME=DIMS    shape of an ONNX graph input, e.g. data=1x3x224x224\n"
            "  --json               print [{\"workload\", \"weight\", \"key\", \"desc\"}, ...]\n"
            "                       instead of the listing (issues go to standard error)\n"
            "  --out FILE           write to FILE instead of standard output\n"
            "  --list               list the built-in networks\n"
            "\n"
            "Layers that have no task (shape-only and stand-alone elementwise layers) are\n"
            "skipped as TVM does; layers te cannot express are listed after the tasks as\n"
            "\"unsupported\" or \"not fused\" lines.\n"
            "\n"
            "exit status: 0 success (also with unsupported layers); 1 the network could not\n"
            "be loaded or has no task; 2 bad usage\n");
}

int kt_cli_tasks(int argc, char **argv)
{
    static const struct option opts[] = {
        KT_CLI_NET_OPTIONS,
        {"json", no_argument, NULL, 'j'},
        {"out", required_argument, NULL, 'o'},
        {"list", no_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    kt_cli_net_t n;
    kt_cli_net_init(&n);
    const char *out_path = NULL;
    int json = 0, list = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int taken = kt_cli_net_option("tasks", &n, c, optarg);
        if (taken == 2)
            return 2;
        if (taken)
            continue;
        switch (c) {
        case 'j': json = 1; break;
        case 'o':
            if (kt_cli_nonempty("tasks", "--out", optarg))
                return 2;
            out_path = optarg;
            break;
        case 'L': list = 1; break;
        case 'h': tasks_usage(stdout); return 0;
        default:
            fprintf(stderr, "ktune tasks: bad option '%s'\n", argv[optind - 1]);
            tasks_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ktune tasks: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (list) {
        for (const char *const *nm = kt_net_builtin_names(); *nm; nm++)
            printf("%s\n", *nm);
        return 0;
    }
    if (kt_cli_net_check("tasks", &n))
        return 2;
    kt_net_t *net = kt_cli_net_load("tasks", &n);
    if (!net)
        return 1;
    kt_net_tasks_t *t = kt_net_extract_ex(net, n.layout, kt_cli_net_extract_flags(&n, NULL));
    char *plain = t ? kt_net_plain_steps_text(net) : NULL;
    kt_net_free(net);
    if (!t || !plain) {
        kt_net_tasks_free(t);
        return kt_cli_fail("extracting tasks");
    }
    int rc = 0;
    char *text = json ? kt_net_tasks_json(t) : kt_net_tasks_text(t);
    if (!text) {
        rc = kt_cli_fail(NULL);
    } else if (out_path && strcmp(out_path, "-") != 0) {
        if (kt_file_write(out_path, text, strlen(text)) != 0)
            rc = kt_cli_fail("writing the task list");
    } else {
        fputs(text, stdout);
        if (!json)
            fputs(plain, stdout);
        fflush(stdout);
    }
    free(text);
    /* Which layers no task covers: with a listing file or JSON, on stderr. */
    if (rc == 0 && (json || (out_path && strcmp(out_path, "-") != 0)))
        fputs(plain, stderr);
    free(plain);
    if (json && rc == 0) {
        /* Keep standard output a loadable list; issues go to standard error. */
        char *issues = NULL;
        kt_net_tasks_t only = {.issues = t->issues, .nissues = t->nissues};
        if (t->nissues && (issues = kt_net_tasks_text(&only)))
            fputs(issues, stderr);
        free(issues);
    }
    if (rc == 0 && t->ntasks == 0) {
        fprintf(stderr, "ktune tasks: the network has no task\n");
        rc = 1;
    }
    kt_net_tasks_free(t);
    return rc;
}
