/* kt_store_import_jsonl on arbitrary record lines into one in-memory store
 * (opened once: the import, not SQLite's start-up, is what is fuzzed). */
#include "fuzz_common.h"
#include "store/store.h"

static kt_store_t *store;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    if (!store && !(store = kt_store_open(":memory:", KT_STORE_CREATE))) {
        fprintf(stderr, "fuzz_import: %s\n", kt_err_msg());
        abort();   /* the fixture, not the input, failed: stop loudly */
    }
    if (size == 0)
        return 0;
    FILE *in = fmemopen((void *)data, size, "r");
    if (!in)
        return 0;
    kt_store_import_report_t rep;
    kt_store_import_jsonl(store, in, &rep);
    fclose(in);
    return 0;
}
