/* ktune records: export, import and count the measurement records of a store. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "store/store.h"
#include "util/err.h"

static void records_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune records export --db PATH [--out FILE|-] [--workload KEY|JSON]\n"
            "                            [--target T] [--job ID] [--runner ID|HOST]\n"
            "       ktune records import --db PATH [--in FILE|-]\n"
            "       ktune records count  --db PATH [--workload KEY|JSON] [--target T]\n"
            "                            [--job ID] [--runner ID|HOST]\n"
            "\n"
            "  export  write the selected records as JSON lines, one record per line, to\n"
            "          FILE or standard output (default); the format is in RECORDS.md\n"
            "  import  read JSON lines from FILE or standard input (default) into the\n"
            "          database (created if missing); records already present (same\n"
            "          workload, target, state hash and timestamp) are skipped; prints\n"
            "          \"imported N records, skipped M duplicates, K bad lines\" and each\n"
            "          bad line's number and reason\n"
            "  count   print the number of selected records, in total and per error code\n"
            "\n"
            "  --workload KEY|JSON  only the records of that workload: its key as ktune\n"
            "          prints it, or its workload JSON\n"
            "  --target T  cpu or cuda\n"
            "  --job ID  only the records that job measured (it must be in the store)\n"
            "  --runner ID|HOST  only the records timed by that runner: its peer id (as the\n"
            "          tracker's log and `ktune queue` print it) or its host, which selects\n"
            "          every runner of that machine; records stored before ktune kept this\n"
            "          (schema 1) match neither\n"
            "\n"
            "exit status: 0 success; 1 failure, or import found bad lines (the good lines\n"
            "are imported all the same); 2 bad usage\n");
}

typedef struct {
    const char *db;
    const char *out;
    const char *in;
    char *key;                 /* --workload's key, owned */
    kt_store_filter_t filter;
} records_args_t;

/* Parse the options after the subcommand; 0, or 2 for bad usage, or -1 for --help. */
static int parse_args(const char *sub, int argc, char **argv, int allow_filter, int allow_out,
                      int allow_in, records_args_t *a)
{
    static const struct option opts[] = {
        {"db", required_argument, NULL, 'd'},  {"out", required_argument, NULL, 'o'},
        {"in", required_argument, NULL, 'i'},  {"workload", required_argument, NULL, 'w'},
        {"target", required_argument, NULL, 't'}, {"job", required_argument, NULL, 'j'},
        {"runner", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, "", opts, &li)) != -1) {
        switch (c) {
        case 'd':
            if (kt_cli_nonempty("records", "--db", optarg))
                return 2;
            a->db = optarg;
            break;
        case 'o':
            if (!allow_out)
                goto bad;
            if (kt_cli_nonempty("records", "--out", optarg))
                return 2;
            a->out = optarg;
            break;
        case 'i':
            if (!allow_in)
                goto bad;
            if (kt_cli_nonempty("records", "--in", optarg))
                return 2;
            a->in = optarg;
            break;
        case 'w':
            if (!allow_filter)
                goto bad;
            free(a->key);
            if (!(a->key = kt_cli_workload_key("records", "--workload", optarg)))
                return 2;
            a->filter.workload_key = a->key;
            break;
        case 't':
            if (!allow_filter)
                goto bad;
            if (kt_cli_check_target("records", "--target", optarg))
                return 2;
            a->filter.target = optarg;
            break;
        case 'r':
            if (!allow_filter)
                goto bad;
            if (!*optarg) {
                fprintf(stderr, "ktune records: --runner needs a runner id or host\n");
                return 2;
            }
            a->filter.runner = optarg;
            break;
        case 'j':
            if (!allow_filter)
                goto bad;
            if (kt_cli_parse_id("records", "--job", optarg, &a->filter.job_id))
                return 2;
            break;
        case 'h': return -1;
        default: goto bad;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ktune records: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!a->db) {
        fprintf(stderr, "ktune records: --db PATH is required\n");
        return 2;
    }
    return 0;
bad:
    if (c != '?' && li >= 0)
        fprintf(stderr, "ktune records %s: --%s does not apply here\n", sub, opts[li].name);
    else
        fprintf(stderr, "ktune records %s: bad option '%s'\n", sub, argv[optind - 1]);
    return 2;
}

/* export and count open read-write (without create) although they only read:
 * a read-only SQLite handle on a WAL database leaves -wal and -shm files
 * behind, which a read-write handle removes when it closes last. */
/* A --job filter naming no job of the store would select nothing and read
 * as "no records": 0, or 1 after saying so. */
static int check_job(const char *sub, kt_store_t *s, const records_args_t *a)
{
    if (!a->filter.job_id)
        return 0;
    kt_store_job_info_t *info = NULL;
    int rc = kt_store_get_job(s, a->filter.job_id, &info);
    kt_store_job_info_free(info);
    if (rc == KT_ENOTFOUND) {
        fprintf(stderr, "ktune records %s: --job: no job %" PRId64 " in %s\n", sub,
                a->filter.job_id, a->db);
        return 1;
    }
    return rc ? kt_cli_fail(sub) : 0;
}

static int cmd_export(const records_args_t *a)
{
    kt_store_t *s = kt_store_open(a->db, 0);
    if (!s)
        return kt_cli_fail("export");
    if (check_job("export", s, a)) {
        kt_store_close(s);
        return 1;
    }
    int to_stdout = !a->out || strcmp(a->out, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(a->out, "w");
    if (!out) {
        fprintf(stderr, "ktune: export: %s: %s\n", a->out, strerror(errno));
        kt_store_close(s);
        return 1;
    }
    int64_t n = 0;
    int rc = kt_store_export_jsonl(s, &a->filter, out, &n);
    if (!to_stdout && fclose(out) != 0 && rc == 0)
        rc = kt_err_set(KT_EIO, "%s: %s", a->out, strerror(errno));
    kt_store_close(s);
    if (rc != 0)
        return kt_cli_fail("export");
    fprintf(stderr, "exported %" PRId64 " records\n", n);
    return 0;
}

static int cmd_import(const records_args_t *a)
{
    int from_stdin = !a->in || strcmp(a->in, "-") == 0;
    FILE *in = from_stdin ? stdin : fopen(a->in, "r");
    if (!in) {
        fprintf(stderr, "ktune: import: %s: %s\n", a->in, strerror(errno));
        return 1;
    }
    kt_store_t *s = kt_store_open(a->db, KT_STORE_CREATE);
    if (!s) {
        if (!from_stdin)
            fclose(in);
        return kt_cli_fail("import");
    }
    kt_store_import_report_t rep;
    int rc = kt_store_import_jsonl(s, in, &rep);
    if (!from_stdin)
        fclose(in);
    kt_store_close(s);
    printf("imported %" PRId64 " records, skipped %" PRId64 " duplicates, %" PRId64
           " bad lines\n",
           rep.imported, rep.duplicates, rep.bad);
    for (int i = 0; i < rep.nlisted; i++)
        printf("  line %ld: %s\n", rep.bad_lines[i].line, rep.bad_lines[i].reason);
    if (rep.bad > rep.nlisted)
        printf("  ... and %" PRId64 " more bad lines\n", rep.bad - rep.nlisted);
    if (rc != 0)
        return kt_cli_fail("import");
    return rep.bad > 0 ? 1 : 0;
}

static int cmd_count(const records_args_t *a)
{
    kt_store_t *s = kt_store_open(a->db, 0);
    if (!s)
        return kt_cli_fail("count");
    if (check_job("count", s, a)) {
        kt_store_close(s);
        return 1;
    }
    kt_store_counts_t c;
    int rc = kt_store_count_records(s, &a->filter, &c);
    kt_store_close(s);
    if (rc != 0)
        return kt_cli_fail("count");
    printf("records: %" PRId64 "\n", c.total);
    for (int i = 0; i < KT_MEASURE_NUM_ERRORS; i++)
        printf("  %-20s %" PRId64 "\n", kt_measure_error_name(i), c.by_error[i]);
    return 0;
}

int kt_cli_records(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        records_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    int is_export = strcmp(sub, "export") == 0, is_import = strcmp(sub, "import") == 0,
        is_count = strcmp(sub, "count") == 0;
    if (!is_export && !is_import && !is_count) {
        fprintf(stderr, "ktune records: unknown subcommand '%s'\n", sub);
        records_usage(stderr);
        return 2;
    }
    records_args_t a;
    int rc = parse_args(sub, argc - 1, argv + 1, !is_import, is_export, is_import, &a);
    if (rc == -1) {
        records_usage(stdout);
        rc = 0;
    } else if (rc == 0) {
        rc = is_export ? cmd_export(&a) : is_import ? cmd_import(&a) : cmd_count(&a);
    }
    free(a.key);
    return rc;
}
