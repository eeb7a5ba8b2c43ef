/* ktune records: export, import, count, distill and vacuum the records of a store; its stats. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "store/store.h"
#include "util/err.h"
#include "util/util.h"

static void records_usage(FILE *out)
{
    fprintf(out,
            "usage: ktune records export --db PATH [--out FILE|-] [--workload KEY|JSON]\n"
            "                            [--target T] [--job ID] [--runner ID|HOST]\n"
            "       ktune records import --db PATH [--in FILE|-]\n"
            "       ktune records count  --db PATH [--workload KEY|JSON] [--target T]\n"
            "                            [--job ID] [--runner ID|HOST]\n"
            "       ktune records distill --db PATH [--keep N] [--dry-run]\n"
            "       ktune records vacuum --db PATH\n"
            "       ktune records stats  --db PATH [--json]\n"
            "\n"
            "  export  write the selected records as JSON lines, one record per line, to\n"
            "          FILE or standard output (default); the format is in RECORDS.md\n"
            "  import  read JSON lines from FILE or standard input (default) into the\n"
            "          database (created if missing); records already present (same\n"
            "          workload, target, state hash and timestamp) are skipped; prints\n"
            "          \"imported N records, skipped M duplicates, K bad lines\" and each\n"
            "          bad line's number and reason\n"
            "  count   print the number of selected records, in total and per error code\n"
            "  distill keep the N (--keep, default 1) fastest valid records of every\n"
            "          workload and target and delete the others, failed ones too (TVM's\n"
            "          measure_record --mode distill); their states stay known, so none\n"
            "          is measured again; refused while a job is queued or running;\n"
            "          --dry-run only says what it would delete\n"
            "  vacuum  give the space of deleted records back to the file system\n"
            "  stats   the store's size, records, workloads and records per device key\n"
            "          (--json: as JSON)\n"
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
    int keep;                  /* distill --keep */
    int dry_run, json;
} records_args_t;

/* The options a subcommand takes beside --db and --help. */
enum { A_FILTER = 1, A_OUT = 2, A_IN = 4, A_KEEP = 8, A_DRY = 16, A_JSON = 32 };

/* Parse the options after the subcommand; 0, or 2 for bad usage, or -1 for --help. */
static int parse_args(const char *sub, int argc, char **argv, int allow, records_args_t *a)
{
    static const struct option opts[] = {
        {"db", required_argument, NULL, 'd'},  {"out", required_argument, NULL, 'o'},
        {"in", required_argument, NULL, 'i'},  {"workload", required_argument, NULL, 'w'},
        {"target", required_argument, NULL, 't'}, {"job", required_argument, NULL, 'j'},
        {"runner", required_argument, NULL, 'r'}, {"keep", required_argument, NULL, 'k'},
        {"dry-run", no_argument, NULL, 'n'},   {"json", no_argument, NULL, 'J'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    int allow_filter = allow & A_FILTER, allow_out = allow & A_OUT, allow_in = allow & A_IN;
    memset(a, 0, sizeof *a);
    a->keep = 1;
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
        case 'k': {
            long long v = 0;
            if (!(allow & A_KEEP))
                goto bad;
            if (kt_cli_parse_num("records", "--keep", optarg, 1, 1000000, &v))
                return 2;
            a->keep = (int)v;
            break;
        }
        case 'n':
            if (!(allow & A_DRY))
                goto bad;
            a->dry_run = 1;
            break;
        case 'J':
            if (!(allow & A_JSON))
                goto bad;
            a->json = 1;
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

static int cmd_distill(const records_args_t *a)
{
    kt_store_t *s = kt_store_open(a->db, 0);
    if (!s)
        return kt_cli_fail("distill");
    kt_store_distill_t d;
    int rc = kt_store_distill(s, a->keep, a->dry_run, &d);
    kt_store_close(s);
    if (rc != 0)
        return kt_cli_fail("distill");
    printf("%s %" PRId64 " of %" PRId64 " records (the best %d of each of %" PRId64
           " workload/target pairs); %" PRId64 " states %s remembered as measured\n",
           a->dry_run ? "would keep" : "kept", d.records_after, d.records_before, a->keep,
           d.workloads, d.states_remembered, a->dry_run ? "would be" : "newly");
    if (!a->dry_run && d.records_after < d.records_before)
        printf("run `ktune records vacuum --db %s` to give the space back\n", a->db);
    return 0;
}

static int cmd_vacuum(const records_args_t *a)
{
    kt_store_t *s = kt_store_open(a->db, 0);
    if (!s)
        return kt_cli_fail("vacuum");
    int64_t before = 0, after = 0;
    int rc = kt_store_vacuum(s, &before, &after);
    kt_store_close(s);
    if (rc != 0)
        return kt_cli_fail("vacuum");
    printf("%s: %.2f MiB -> %.2f MiB\n", a->db, (double)before / 1048576.0,
           (double)after / 1048576.0);
    return 0;
}

static int cmd_stats(const records_args_t *a)
{
    kt_store_t *s = kt_store_open(a->db, 0);
    if (!s)
        return kt_cli_fail("stats");
    kt_store_stats_t st;
    int rc = kt_store_stats(s, &st);
    kt_store_close(s);
    if (rc != 0)
        return kt_cli_fail("stats");
    if (a->json) {
        json_t *o = kt_store_stats_json(&st, a->db);
        kt_store_stats_clear(&st);
        return kt_cli_print_json(o);
    }
    printf("store:      %s (schema %d)\n", a->db, st.schema_version);
    printf("size:       %.2f MiB\n", (double)st.bytes / 1048576.0);
    printf("records:    %" PRId64 " (%" PRId64 " valid)\n", st.records, st.valid);
    printf("workloads:  %" PRId64 "\n", st.workloads);
    printf("distilled:  %" PRId64 " states remembered without their records\n", st.distilled);
    printf("per device key:\n");
    for (size_t i = 0; i < st.nkeys; i++)
        printf("  %-24s %" PRId64 "\n", *st.keys[i].key ? st.keys[i].key : "(none)",
               st.keys[i].records);
    printf("cost models:%s\n", st.nmodels ? "" : " none");
    for (size_t i = 0; i < st.nmodels; i++) {
        const kt_store_cost_model_t *m = &st.models[i];
        printf("  %-5s %-18s v%" PRId64 ", %" PRId64 " records (up to id %" PRId64
               "), features %d, %.1f KiB\n",
               m->target, m->device_key, m->version, m->records, m->max_record_id,
               m->feature_version, (double)m->model_len / 1024.0);
    }
    kt_store_stats_clear(&st);
    return 0;
}

/* Each subcommand, the options it takes and what runs it. */
static const struct {
    const char *name;
    int allow;
    int (*run)(const records_args_t *a);
} subcommands[] = {
    {"export", A_FILTER | A_OUT, cmd_export},
    {"import", A_IN, cmd_import},
    {"count", A_FILTER, cmd_count},
    {"distill", A_KEEP | A_DRY, cmd_distill},
    {"vacuum", 0, cmd_vacuum},
    {"stats", A_JSON, cmd_stats},
};

int kt_cli_records(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        records_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    size_t k = 0;
    while (k < KT_ARRAY_LEN(subcommands) && strcmp(sub, subcommands[k].name) != 0)
        k++;
    if (k == KT_ARRAY_LEN(subcommands)) {
        fprintf(stderr, "ktune records: unknown subcommand '%s'\n", sub);
        records_usage(stderr);
        return 2;
    }
    records_args_t a;
    int rc = parse_args(sub, argc - 1, argv + 1, subcommands[k].allow, &a);
    if (rc == -1) {
        records_usage(stdout);
        rc = 0;
    } else if (rc == 0) {
        rc = subcommands[k].run(&a);
    }
    free(a.key);
    return rc;
}
