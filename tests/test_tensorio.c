/* Check suite "tensorio": .npy and safetensors files, against numpy and by hand. */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensorio/tensorio.h"
#include "util/err.h"
#include "util/util.h"

/* ---- Fixtures ---------------------------------------------------------
 * The base directory is made and removed in the runner process (unchecked
 * fixture), so it goes even when a test fails in its fork; each test gets a
 * fresh directory below it. */

static char basedir[64];
static char tmpdir[96];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void base_setup(void)
{
    snprintf(basedir, sizeof basedir, "/tmp/kt_tensorio_XXXXXX");
    if (!mkdtemp(basedir))
        abort();   /* no test can run without it */
}

static void base_teardown(void)
{
    nftw(basedir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/t_XXXXXX", basedir);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* A path in the test's directory; a ring of buffers so a few can be live. */
static const char *P(const char *name)
{
    static char ring[8][256];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* Run a Python script with Debian's interpreter (numpy comes with
 * python3-torch) in the test directory; returns its exit status. A missing
 * interpreter or numpy fails the test through a non-zero status: these
 * checks are the point of the suite, so they never skip. */
static int run_py(const char *code)
{
    write_bytes(P("script.py"), code, strlen(code));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd '%s' && /usr/bin/python3 script.py > py.log 2>&1", tmpdir);
    int st = system(cmd);
    ck_assert_int_ne(st, -1);
    if (!WIFEXITED(st))
        return -1;
    if (WEXITSTATUS(st) != 0) {
        size_t n;
        char *log = kt_file_read(P("py.log"), &n);
        fprintf(stderr, "python exited %d:\n%s\n", WEXITSTATUS(st), log ? log : "(no log)");
        free(log);
    }
    return WEXITSTATUS(st);
}

/* Run a script that must succeed (its output goes to the test log). */
#define PY_OK(code)                                                                \
    do {                                                                           \
        int rc_ = run_py(code);                                                    \
        ck_assert_msg(rc_ == 0, "python script failed with status %d", rc_);       \
    } while (0)

/* Number of files in the test directory whose name contains ".tmp": a
 * failed save must leave none behind. */
static int tmp_leftovers(void)
{
    DIR *d = opendir(tmpdir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp"))
            n++;
    closedir(d);
    return n;
}

static void assert_msg_has(const char *want)
{
    ck_assert_msg(strstr(kt_err_msg(), want) != NULL, "message '%s' lacks '%s'", kt_err_msg(),
                  want);
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- .npy: our own files -------------------------------------------------- */

static void npy_roundtrip(const int64_t *dims, int ndim, const float *vals, int64_t n)
{
    const char *path = P("rt.npy");
    ck_assert_msg(kt_npy_write(path, vals, dims, ndim) == 0, "%s", kt_err_msg());
    float *got = NULL;
    int64_t gd[KT_TENSORIO_MAX_RANK];
    int gn = -1;
    ck_assert_msg(kt_npy_read(path, &got, gd, &gn) == 0, "%s", kt_err_msg());
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(gn, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_int_eq(gd[i], dims[i]);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(same_bits(got[i], vals[i]), "element %ld differs", (long)i);
    free(got);
}

START_TEST(npy_roundtrip_ranks_0_1_4)
{
    float scalar = 3.5f;
    npy_roundtrip(NULL, 0, &scalar, 1);

    /* Special values must come back bit for bit. */
    float v1[5] = {1.0f, -0.0f, INFINITY, NAN, 1e-40f};
    int64_t d1[1] = {5};
    npy_roundtrip(d1, 1, v1, 5);

    int64_t d4[4] = {2, 3, 1, 4};
    float v4[24];
    for (int i = 0; i < 24; i++)
        v4[i] = (float)i * 0.25f - 1.0f;
    npy_roundtrip(d4, 4, v4, 24);

    /* Zero elements: data may be NULL on write and is non-NULL on read. */
    int64_t d0[4] = {2, 0, 3, 1};
    npy_roundtrip(d0, 4, NULL, 0);
}
END_TEST

START_TEST(npy_write_matches_numpy_bytes)
{
    /* Our header must be byte for byte numpy's (including the growth padding
     * after the dict), and numpy must load our values. */
    float s = 2.5f;
    ck_assert_int_eq(kt_npy_write(P("r0.npy"), &s, NULL, 0), 0);
    float v1[5];
    for (int i = 0; i < 5; i++)
        v1[i] = (float)i / 3.0f;
    int64_t d1[1] = {5};
    ck_assert_int_eq(kt_npy_write(P("r1.npy"), v1, d1, 1), 0);
    float v4[24];
    for (int i = 0; i < 24; i++)
        v4[i] = (float)i - 7.5f;
    int64_t d4[4] = {2, 3, 1, 4};
    ck_assert_int_eq(kt_npy_write(P("r4.npy"), v4, d4, 4), 0);
    int64_t dbig[2] = {1000000000000LL, 0};   /* long first axis: less growth padding */
    ck_assert_int_eq(kt_npy_write(P("rbig.npy"), NULL, dbig, 2), 0);

    PY_OK("import numpy as np, sys\n"
                            "cases = {\n"
                            "  'r0': np.float32(2.5).reshape(()),\n"
                            "  'r1': (np.arange(5, dtype=np.float32) / np.float32(3)),\n"
                            "  'r4': (np.arange(24, dtype=np.float32) - 7.5).reshape(2,3,1,4),\n"
                            "  'rbig': np.zeros((10**12, 0), np.float32),\n"
                            "}\n"
                            "for i, (k, a) in enumerate(cases.items()):\n"
                            "    np.save(k + '_np.npy', a)\n"
                            "    ours = open(k + '.npy', 'rb').read()\n"
                            "    ref = open(k + '_np.npy', 'rb').read()\n"
                            "    if ours != ref:\n"
                            "        print(k, ours[:128], ref[:128]); sys.exit(10 + i)\n"
                            "    b = np.load(k + '.npy')\n"
                            "    if b.dtype != np.float32 or b.shape != a.shape or not np.array_equal(a, b):\n"
                            "        print(k, b); sys.exit(20 + i)\n");
}
END_TEST

/* ---- .npy: files numpy wrote ------------------------------------------------ */

static float *read_ok(const char *path, int64_t *dims, int *ndim)
{
    float *d = NULL;
    int rc = kt_npy_read(path, &d, dims, ndim);
    ck_assert_msg(rc == 0, "%s: %s", path, kt_err_msg());
    return d;
}

START_TEST(npy_reads_numpy_files)
{
    PY_OK("import numpy as np\n"
                            "from numpy.lib import format as F\n"
                            "a = (np.arange(6) / 7.0).reshape(2, 3)\n"
                            "np.save('f4.npy', a.astype('<f4'))\n"
                            "np.save('f8.npy', a.astype('<f8'))\n"
                            "np.save('be4.npy', a.astype('>f4'))\n"
                            "np.save('be8.npy', a.astype('>f8'))\n"
                            "np.save('scalar.npy', np.float32(-1.25))\n"
                            "for v in ((2, 0), (3, 0)):\n"
                            "    with open('v%d.npy' % v[0], 'wb') as f:\n"
                            "        F.write_array(f, a.astype('<f4'), version=v)\n");
    const char *names[] = {"f4.npy", "f8.npy", "be4.npy", "be8.npy", "v2.npy", "v3.npy"};
    for (size_t k = 0; k < KT_ARRAY_LEN(names); k++) {
        int64_t dims[KT_TENSORIO_MAX_RANK];
        int nd;
        float *d = read_ok(P(names[k]), dims, &nd);
        ck_assert_int_eq(nd, 2);
        ck_assert_int_eq(dims[0], 2);
        ck_assert_int_eq(dims[1], 3);
        /* numpy computes i / 7.0 in double and rounds to float32, as here. */
        for (int i = 0; i < 6; i++)
            ck_assert_msg(same_bits(d[i], (float)(i / 7.0)), "%s[%d] = %.9g", names[k], i,
                          (double)d[i]);
        free(d);
    }
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int nd = -1;
    float *d = read_ok(P("scalar.npy"), dims, &nd);
    ck_assert_int_eq(nd, 0);
    ck_assert(same_bits(d[0], -1.25f));
    free(d);
}
END_TEST

static void expect_npy_err(const char *path, int code, const char *want)
{
    float *d = (float *)(uintptr_t)1;   /* must be reset to NULL on failure */
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int nd = 5;
    kt_err_clear();
    int rc = kt_npy_read(path, &d, dims, &nd);
    ck_assert_msg(rc == code, "%s: rc %d (want %d), message '%s'", path, rc, code, kt_err_msg());
    ck_assert_ptr_null(d);
    ck_assert_int_eq(nd, 0);
    assert_msg_has(want);
    assert_msg_has(path);
}

START_TEST(npy_rejects_numpy_files_it_cannot_read)
{
    PY_OK("import numpy as np\n"
                            "np.save('fortran.npy', np.asfortranarray(np.ones((2, 3), np.float32)))\n"
                            "np.save('i8.npy', np.arange(3, dtype='<i8'))\n"
                            "np.save('f2.npy', np.ones(3, np.float16))\n"
                            "np.save('rec.npy', np.zeros(2, dtype=[('x', '<f4'), ('y', '<f4')]))\n"
                            "np.save('rank9.npy', np.zeros((1,) * 9, np.float32))\n");
    expect_npy_err(P("fortran.npy"), KT_EINVAL, "fortran_order is True");
    expect_npy_err(P("i8.npy"), KT_EINVAL, "dtype '<i8' not supported: ktune reads float32");
    expect_npy_err(P("f2.npy"), KT_EINVAL, "dtype '<f2' not supported");
    expect_npy_err(P("rec.npy"), KT_EINVAL, "structured dtypes are not supported");
    expect_npy_err(P("rank9.npy"), KT_EINVAL, "rank 9 not supported");
}
END_TEST

/* ---- .npy: hand-made broken files ------------------------------------------ */

/* magic, version, header length (u16 for 1.x, u32 otherwise), the header
 * text as given, then `ndata` bytes of data. */
static void make_npy(const char *path, int major, int minor, const char *hdr, size_t ndata)
{
    size_t hl = strlen(hdr), lsize = major == 1 ? 2 : 4;
    size_t total = 8 + lsize + hl + ndata;
    unsigned char *b = calloc(1, total);
    ck_assert_ptr_nonnull(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = (unsigned char)minor;
    for (size_t i = 0; i < lsize; i++)
        b[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8 + lsize, hdr, hl);
    write_bytes(path, b, total);
    free(b);
}

#define HDR(shape) "{'descr': '<f4', 'fortran_order': False, 'shape': " shape ", }\n"

START_TEST(npy_header_errors_have_messages)
{
    /* The well-formed baseline, so each case below fails for its own reason. */
    make_npy(P("ok.npy"), 1, 0, HDR("(2,)"), 8);
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int nd;
    free(read_ok(P("ok.npy"), dims, &nd));
    make_npy(P("ok2.npy"), 2, 0, "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}", 24);
    free(read_ok(P("ok2.npy"), dims, &nd));
    ck_assert_int_eq(nd, 2);

    static const struct {
        const char *hdr;
        size_t ndata;
        const char *want;
    } cases[] = {
        {"[1, 2]", 0, "not a valid Python dict literal"},
        {"{'descr': '<f4', 'fortran_order': False}", 0, "no 'shape' key"},
        {"{'fortran_order': False, 'shape': (2,)}", 8, "no 'descr' key"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8,
         "unexpected key 'x'"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8,
         "'fortran_order' is not True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}", 8,
         "'fortran_order' is not True or False"},
        {HDR("(2)"), 8, "'shape' is not a tuple"},
        {HDR("[2]"), 8, "'shape' is not a tuple"},
        {HDR("(2,,)"), 8, "expected an integer in shape"},
        {HDR("(2 3)"), 8, "expected ',' or ')' in shape"},
        {HDR("(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4, "rank 9 not supported"},
        {HDR("(-2, 3)"), 0, "negative dimension -2"},
        {HDR("(99999999999999999999,)"), 0, "dimension 99999999999999999999 in shape is too large"},
        {HDR("(4611686018427387904, 4)"), 0, "shape [4611686018427387904, 4] is too large"},
        {HDR("(3,)"), 8, "truncated data: shape [3] of <f4 needs 12 bytes, the file has 8"},
        {HDR("(2,)"), 12, "4 trailing bytes after the data"},
        {"{'descr': '<f4", 0, "unterminated string"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
         "duplicate key 'descr'"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,)}", 8,
         "dtype '<i4' not supported: ktune reads float32"},
        {"{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8, "dtype '|f4' not supported"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, "text after the closing"},
        {"{'descr': '<f4',", 0, "expected a quoted string"},
        {"{'descr' '<f4'}", 0, "expected ':'"},
        {"", 0, "expected '{'"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        make_npy(P("bad.npy"), 1, 0, cases[i].hdr, cases[i].ndata);
        expect_npy_err(P("bad.npy"), KT_EINVAL, cases[i].want);
    }
}
END_TEST

START_TEST(npy_file_errors_have_messages)
{
    write_bytes(P("text.npy"), "hello, world\n", 13);
    expect_npy_err(P("text.npy"), KT_EINVAL, "not a .npy file (bad magic)");
    write_bytes(P("empty.npy"), "", 0);
    expect_npy_err(P("empty.npy"), KT_EINVAL, "not a .npy file (bad magic)");
    write_bytes(P("short.npy"), "\x93NUM", 4);
    expect_npy_err(P("short.npy"), KT_EINVAL, "truncated .npy file");
    make_npy(P("v4.npy"), 4, 0, HDR("(2,)"), 8);
    expect_npy_err(P("v4.npy"), KT_EINVAL, "unsupported .npy format version 4.0");
    make_npy(P("v11.npy"), 1, 1, HDR("(2,)"), 8);
    expect_npy_err(P("v11.npy"), KT_EINVAL, "unsupported .npy format version 1.1");
    /* Header length field larger than the rest of the file. */
    unsigned char b[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x00, '{', '}'};
    write_bytes(P("hlen.npy"), b, sizeof b);
    expect_npy_err(P("hlen.npy"), KT_EINVAL, "truncated .npy header: 255 bytes promised, 2 in");
    unsigned char b2[14] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    write_bytes(P("hlen2.npy"), b2, sizeof b2);
    expect_npy_err(P("hlen2.npy"), KT_EINVAL, "header length 2147483647 is too large");
    write_bytes(P("noversion.npy"), "\x93NUMPY\x01", 7);
    expect_npy_err(P("noversion.npy"), KT_EINVAL, "truncated .npy file (7 bytes)");
    expect_npy_err(P("missing.npy"), KT_EIO, "cannot open");
    expect_npy_err(tmpdir, KT_EINVAL, "not a regular file");
}
END_TEST

/* Every truncation of a valid file, and every byte of its header set to a
 * few nasty values, must give an error or a consistent array, never a crash
 * or an out-of-bounds read (the ASan build checks the latter). */
START_TEST(npy_truncated_or_corrupted_never_crashes)
{
    int64_t d[3] = {2, 3, 4};
    float v[24];
    for (int i = 0; i < 24; i++)
        v[i] = (float)i;
    ck_assert_int_eq(kt_npy_write(P("good.npy"), v, d, 3), 0);
    size_t len;
    char *good = kt_file_read(P("good.npy"), &len);
    ck_assert_ptr_nonnull(good);
    ck_assert_uint_eq(len, 128 + 24 * 4);
    for (size_t cut = 0; cut < len; cut++) {
        write_bytes(P("cut.npy"), good, cut);
        float *x = NULL;
        int64_t dims[KT_TENSORIO_MAX_RANK];
        int nd;
        kt_err_clear();
        ck_assert_msg(kt_npy_read(P("cut.npy"), &x, dims, &nd) < 0, "cut at %zu read", cut);
        ck_assert_msg(kt_err_msg()[0] != '\0', "cut at %zu: no message", cut);
        ck_assert_ptr_null(x);
    }
    static const unsigned char nasty[] = {0, '\'', '"', '(', ')', '{', '}', ',', '-', '9', 0xff};
    for (size_t pos = 0; pos < 128; pos++) {
        for (size_t k = 0; k < sizeof nasty; k++) {
            char *bad = malloc(len);
            ck_assert_ptr_nonnull(bad);
            memcpy(bad, good, len);
            bad[pos] = (char)nasty[k];
            write_bytes(P("flip.npy"), bad, len);
            free(bad);
            float *x = NULL;
            int64_t dims[KT_TENSORIO_MAX_RANK];
            int nd;
            kt_err_clear();
            int rc = kt_npy_read(P("flip.npy"), &x, dims, &nd);
            if (rc == 0) {
                /* Only a change the header allows (e.g. a space) may pass,
                 * and then the array is still the 24 floats. */
                int64_t n = 1;
                for (int i = 0; i < nd; i++)
                    n *= dims[i];
                ck_assert_int_eq(n, 24);
                free(x);
            } else {
                ck_assert_ptr_null(x);
                ck_assert_msg(kt_err_msg()[0] != '\0', "byte %zu: no message", pos);
            }
        }
    }
    free(good);
}
END_TEST

START_TEST(npy_write_errors_leave_no_file)
{
    float v[2] = {1, 2};
    int64_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    ck_assert_int_eq(kt_npy_write(P("a.npy"), v, d9, 9), KT_EINVAL);
    assert_msg_has("rank 9 not supported");
    ck_assert_int_eq(kt_npy_write(P("a.npy"), v, d9, -1), KT_EINVAL);
    int64_t neg[2] = {2, -1};
    ck_assert_int_eq(kt_npy_write(P("a.npy"), v, neg, 2), KT_EINVAL);
    assert_msg_has("invalid shape [2, ?]");
    int64_t d1[1] = {2};
    ck_assert_int_eq(kt_npy_write(P("a.npy"), NULL, d1, 1), KT_EINVAL);
    assert_msg_has("NULL data");
    ck_assert_int_ne(access(P("a.npy"), F_OK), 0);
    ck_assert_int_eq(kt_npy_write(P("nodir/a.npy"), v, d1, 1), KT_EIO);
    assert_msg_has("nodir/a.npy");
    /* Renaming onto a directory fails after the data is written: the
     * temporary file must go and the directory stay. */
    ck_assert_int_eq(mkdir(P("isdir.npy"), 0755), 0);
    ck_assert_int_eq(kt_npy_write(P("isdir.npy"), v, d1, 1), KT_EIO);
    ck_assert_int_eq(tmp_leftovers(), 0);
    /* Overwriting an existing file replaces it whole. */
    ck_assert_int_eq(kt_npy_write(P("b.npy"), v, d1, 1), 0);
    float w = 9.0f;
    ck_assert_int_eq(kt_npy_write(P("b.npy"), &w, NULL, 0), 0);
    int64_t dims[KT_TENSORIO_MAX_RANK];
    int nd;
    float *x = read_ok(P("b.npy"), dims, &nd);
    ck_assert_int_eq(nd, 0);
    ck_assert(same_bits(x[0], 9.0f));
    free(x);
    ck_assert_int_eq(tmp_leftovers(), 0);
}
END_TEST

START_TEST(npy_check_shape_messages)
{
    int64_t want[4] = {1, 3, 224, 224};
    int64_t got3[3] = {1, 3, 224};
    ck_assert_int_eq(kt_npy_check_shape(want, 4, want, 4), 0);
    ck_assert_int_eq(kt_npy_check_shape(got3, 3, want, 4), KT_EINVAL);
    ck_assert_str_eq(kt_err_msg(), "expected shape [1, 3, 224, 224], got [1, 3, 224]");
    int64_t got4[4] = {1, 3, 224, 225};
    ck_assert_int_eq(kt_npy_check_shape(got4, 4, want, 4), KT_EINVAL);
    ck_assert_str_eq(kt_err_msg(), "expected shape [1, 3, 224, 224], got [1, 3, 224, 225]");
    /* A negative wanted size is a wildcard, printed as '?'. */
    int64_t any_batch[4] = {-1, 3, 224, 224};
    int64_t b8[4] = {8, 3, 224, 224};
    ck_assert_int_eq(kt_npy_check_shape(b8, 4, any_batch, 4), 0);
    int64_t b8c1[4] = {8, 1, 224, 224};
    ck_assert_int_eq(kt_npy_check_shape(b8c1, 4, any_batch, 4), KT_EINVAL);
    ck_assert_str_eq(kt_err_msg(), "expected shape [?, 3, 224, 224], got [8, 1, 224, 224]");
    ck_assert_int_eq(kt_npy_check_shape(NULL, 0, NULL, 0), 0);
    int64_t one[1] = {1};
    ck_assert_int_eq(kt_npy_check_shape(NULL, 0, one, 1), KT_EINVAL);
    ck_assert_str_eq(kt_err_msg(), "expected shape [1], got []");
}
END_TEST

/* ---- safetensors ------------------------------------------------------------ */

static kt_safetensors_t *open_ok(const char *path)
{
    kt_safetensors_t *st = kt_safetensors_open(path);
    ck_assert_msg(st != NULL, "%s: %s", path, kt_err_msg());
    return st;
}

static void assert_tensor(const kt_safetensors_t *st, const char *name, const int64_t *dims,
                          int ndim, const float *vals)
{
    int64_t gd[KT_TENSORIO_MAX_RANK];
    int gn = -1;
    const float *d = kt_safetensors_get(st, name, gd, &gn);
    ck_assert_msg(d != NULL, "%s: %s", name, kt_err_msg());
    ck_assert_msg((uintptr_t)d % 4 == 0, "%s: data not float-aligned", name);
    ck_assert_int_eq(gn, ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        ck_assert_int_eq(gd[i], dims[i]);
        n *= dims[i];
    }
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(same_bits(d[i], vals[i]), "%s[%ld] = %g", name, (long)i, (double)d[i]);
}

static float W[6] = {1, 2, 3, 4, 5, 6};
static const int64_t WD[2] = {2, 3};
static float B[3] = {-0.5f, 0.0f, 0.5f};
static const int64_t BD[1] = {3};
static float S = 42.0f;
static const int64_t ED[2] = {0, 4};

static void save_sample(const char *path)
{
    kt_safetensors_writer_t *w = kt_safetensors_writer_new();
    ck_assert_ptr_nonnull(w);
    float wcopy[6];
    memcpy(wcopy, W, sizeof W);
    ck_assert_int_eq(kt_safetensors_writer_add(w, "weight", wcopy, WD, 2), 0);
    wcopy[0] = 99.0f;   /* the writer copied: this must not reach the file */
    ck_assert_int_eq(kt_safetensors_writer_add(w, "bias", B, BD, 1), 0);
    ck_assert_int_eq(kt_safetensors_writer_add(w, "scalar", &S, NULL, 0), 0);
    ck_assert_int_eq(kt_safetensors_writer_add(w, "empty", NULL, ED, 2), 0);
    ck_assert_int_eq(kt_safetensors_writer_set_metadata(w, "format", "np"), 0);
    ck_assert_int_eq(kt_safetensors_writer_set_metadata(w, "format", "pt"), 0);   /* replaces */
    ck_assert_int_eq(kt_safetensors_writer_set_metadata(w, "ktune.task", "conv2d \"x\""), 0);
    ck_assert_msg(kt_safetensors_writer_save(w, path) == 0, "%s", kt_err_msg());
    kt_safetensors_writer_free(w);
}

START_TEST(st_roundtrip_with_metadata)
{
    save_sample(P("m.safetensors"));
    ck_assert_int_eq(tmp_leftovers(), 0);
    kt_safetensors_t *st = open_ok(P("m.safetensors"));
    ck_assert_int_eq(kt_safetensors_count(st), 4);
    /* Data-offset order is the order added; "scalar" precedes the empty
     * tensor, which sits at the end of the data section. */
    const char *order[] = {"weight", "bias", "scalar", "empty"};
    for (int i = 0; i < 4; i++)
        ck_assert_str_eq(kt_safetensors_name(st, i), order[i]);
    ck_assert_ptr_null(kt_safetensors_name(st, 4));
    assert_msg_has("out of range");
    assert_tensor(st, "weight", WD, 2, W);
    assert_tensor(st, "bias", BD, 1, B);
    assert_tensor(st, "scalar", NULL, 0, &S);
    assert_tensor(st, "empty", ED, 2, NULL);
    ck_assert_str_eq(kt_safetensors_metadata(st, "format"), "pt");
    ck_assert_str_eq(kt_safetensors_metadata(st, "ktune.task"), "conv2d \"x\"");
    ck_assert_ptr_null(kt_safetensors_metadata(st, "missing"));
    kt_err_clear();
    ck_assert_ptr_null(kt_safetensors_get(st, "nope", NULL, NULL));
    ck_assert_int_eq(kt_err_code(), KT_ENOTFOUND);
    assert_msg_has("no tensor named 'nope'");
    kt_safetensors_close(st);
}
END_TEST

/* Python parses our file with only json and struct, as the format describes
 * it: 8-byte-aligned data section, contiguous offsets in the order added,
 * little-endian float32 values. */
START_TEST(st_python_reads_ours)
{
    save_sample(P("m.safetensors"));
    PY_OK("import json, struct, sys\n"
               "import numpy as np\n"
               "b = open('m.safetensors', 'rb').read()\n"
               "n, = struct.unpack('<Q', b[:8])\n"
               "if (8 + n) % 8: sys.exit(2)\n"
               "h = json.loads(b[8:8 + n])\n"
               "data = b[8 + n:]\n"
               "if h.pop('__metadata__') != {'format': 'pt', 'ktune.task': 'conv2d \"x\"'}: sys.exit(3)\n"
               "want = {'weight': ([2, 3], [1, 2, 3, 4, 5, 6]), 'bias': ([3], [-0.5, 0, 0.5]),\n"
               "        'scalar': ([], [42]), 'empty': ([0, 4], [])}\n"
               "if list(h) != list(want): sys.exit(4)\n"
               "at = 0\n"
               "for k, (shape, vals) in want.items():\n"
               "    e = h[k]\n"
               "    if e['dtype'] != 'F32' or e['shape'] != shape: sys.exit(5)\n"
               "    s, t = e['data_offsets']\n"
               "    if s != at: sys.exit(6)\n"
               "    a = np.frombuffer(data[s:t], '<f4')\n"
               "    if a.tolist() != vals: sys.exit(7)\n"
               "    at = t\n"
               "if at != len(data): sys.exit(8)\n");
}
END_TEST

/* A file laid out as the reference serializer does (metadata first, tensors
 * sorted by name, compact JSON padded with spaces to 8 bytes), written by
 * hand in Python; and one with an unpadded 3-byte-off header, whose data
 * must still come back float-aligned. */
START_TEST(st_reads_reference_layout)
{
    PY_OK("import json, struct\n"
               "import numpy as np\n"
               "def save(path, tensors, meta, pad):\n"
               "    h, blobs, at = {}, [], 0\n"
               "    if meta: h['__metadata__'] = meta\n"
               "    for k in sorted(tensors):\n"
               "        a = np.asarray(tensors[k], '<f4')  # ascontiguousarray would make 0-d 1-d\n"
               "        h[k] = {'dtype': 'F32', 'shape': list(a.shape),\n"
               "                'data_offsets': [at, at + a.nbytes]}\n"
               "        at += a.nbytes; blobs.append(a.tobytes())\n"
               "    s = json.dumps(h, separators=(',', ':')).encode()\n"
               "    if pad: s += b' ' * ((8 - len(s) % 8) % 8)\n"
               "    open(path, 'wb').write(struct.pack('<Q', len(s)) + s + b''.join(blobs))\n"
               "    return len(s)\n"
               "t = {'a.weight': np.arange(12).reshape(3, 4) / 8, 'a.bias': np.array([1.5, -2.0]),\n"
               "     'z': np.array(7.0)}\n"
               "save('ref.safetensors', t, {'format': 'pt'}, True)\n"
               "t['zz'] = np.array([1.0])\n"
               "n = save('odd.safetensors', t, {'k': 'abcde'}, False)\n"
               "assert n % 4 != 0, n\n");
    float wv[12];
    for (int i = 0; i < 12; i++)
        wv[i] = (float)i / 8.0f;
    const int64_t wd[2] = {3, 4}, bd[1] = {2}, one[1] = {1};
    const float bv[2] = {1.5f, -2.0f}, zv = 7.0f, zzv = 1.0f;
    const char *files[] = {"ref.safetensors", "odd.safetensors"};
    for (int f = 0; f < 2; f++) {
        kt_safetensors_t *st = open_ok(P(files[f]));
        ck_assert_int_eq(kt_safetensors_count(st), f == 0 ? 3 : 4);
        ck_assert_str_eq(kt_safetensors_name(st, 0), "a.bias");   /* offset order */
        assert_tensor(st, "a.weight", wd, 2, wv);
        assert_tensor(st, "a.bias", bd, 1, bv);
        assert_tensor(st, "z", NULL, 0, &zv);
        if (f == 1)
            assert_tensor(st, "zz", one, 1, &zzv);
        ck_assert_str_eq(kt_safetensors_metadata(st, f == 0 ? "format" : "k"),
                         f == 0 ? "pt" : "abcde");
        kt_safetensors_close(st);
    }
}
END_TEST

/* 8-byte length (`hlen` when not -1, else the JSON's own), the JSON, then
 * `ndata` bytes of data. */
static void make_st(const char *path, const char *json, int64_t hlen, size_t ndata)
{
    size_t jl = strlen(json);
    unsigned char *b = calloc(1, 8 + jl + ndata);
    ck_assert_ptr_nonnull(b);
    uint64_t n = hlen < 0 ? jl : (uint64_t)hlen;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    memcpy(b + 8, json, jl);
    write_bytes(path, b, 8 + jl + ndata);
    free(b);
}

static void expect_st_err(const char *path, int code, const char *want)
{
    kt_err_clear();
    kt_safetensors_t *st = kt_safetensors_open(path);
    ck_assert_msg(st == NULL, "%s opened", path);
    ck_assert_msg(kt_err_code() == code, "code %d (want %d): %s", kt_err_code(), code,
                  kt_err_msg());
    assert_msg_has(want);
    assert_msg_has(path);
}

#define T(name, shape, offs) "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}"

START_TEST(st_corrupt_files_have_messages)
{
    /* The well-formed baseline, so each case below fails for its own reason. */
    make_st(P("ok.safetensors"), "{" T("a", "[2]", "[0,8]") "," T("b", "[1]", "[8,12]") "}", -1,
            12);
    kt_safetensors_close(open_ok(P("ok.safetensors")));

    static const struct {
        const char *json;
        int64_t hlen;
        size_t ndata;
        const char *want;
    } cases[] = {
        {"{}", 1000, 0, "header length 1000 runs past the end of the file"},
        {"{}", INT64_MAX, 0, "runs past the end of the file"},
        {"{}", 0, 0, "header length 0 is too small"},
        {"{\"a\": ", -1, 0, "header is not valid JSON"},
        {"[]", -1, 0, "header is not a JSON object"},
        {"{" T("a", "[2]", "[0,8]") "," T("a", "[2]", "[0,8]") "}", -1, 8, "duplicate"},
        {"{" T("a", "[2]", "[0,8]") "," T("b", "[2]", "[4,12]") "}", -1, 12,
         "tensor 'b' at [4, 12] overlaps 'a' which ends at 8"},
        {"{" T("a", "[2]", "[0,8]") "," T("b", "[2]", "[12,20]") "}", -1, 20,
         "hole in the data section: no tensor covers bytes [8, 12)"},
        {"{" T("a", "[2]", "[4,12]") "}", -1, 12, "hole in the data section: no tensor covers bytes [0, 4)"},
        {"{" T("a", "[3]", "[0,8]") "}", -1, 8,
         "tensor 'a': shape [3] of F32 is 12 bytes but data_offsets [0, 8] span 8"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", -1, 4,
         "tensor 'a' has dtype 'F16': ktune reads F32 only"},
        {"{" T("a", "[4]", "[0,16]") "}", -1, 8,
         "tensor 'a': data_offsets [0, 16] run past the data section (8 bytes): truncated file?"},
        {"{" T("a", "[2]", "[0,8]") "}", -1, 12, "4 bytes after the last tensor"},
        {"{" T("a", "[0]", "[8,0]") "}", -1, 0, "data_offsets must be [begin, end]"},
        {"{" T("a", "[2]", "[0.0,8]") "}", -1, 8, "data_offsets must be [begin, end]"},
        {"{" T("a", "[2]", "[0,8,9]") "}", -1, 8, "data_offsets must be [begin, end]"},
        {"{" T("a", "[-2]", "[0,8]") "}", -1, 8, "shape entry 0 is not a non-negative integer"},
        {"{" T("a", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", -1, 4, "tensor 'a' has rank 9"},
        {"{" T("a", "[4611686018427387904,4]", "[0,4]") "}", -1, 4,
         "shape [4611686018427387904, 4] is too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, 8, "needs a string 'dtype'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", -1, 8,
         "fields other than"},
        {"{\"a\":[]}", -1, 0, "tensor 'a' is not an object"},
        {"{\"__metadata__\":{\"k\":1}}", -1, 0, "__metadata__ value for 'k' is not a string"},
        {"{\"__metadata__\":[]}", -1, 0, "__metadata__ is not an object"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        make_st(P("bad.safetensors"), cases[i].json, cases[i].hlen, cases[i].ndata);
        expect_st_err(P("bad.safetensors"), KT_EINVAL, cases[i].want);
    }
    write_bytes(P("tiny.safetensors"), "\x02\0\0\0", 4);
    expect_st_err(P("tiny.safetensors"), KT_EINVAL, "not a safetensors file (4 bytes");
    expect_st_err(P("missing.safetensors"), KT_EIO, "cannot open");
    /* An empty file with only metadata, or nothing, is valid. */
    make_st(P("none.safetensors"), "{}      ", -1, 0);
    kt_safetensors_t *st = open_ok(P("none.safetensors"));
    ck_assert_int_eq(kt_safetensors_count(st), 0);
    kt_safetensors_close(st);
}
END_TEST

START_TEST(st_truncated_or_corrupted_never_crashes)
{
    save_sample(P("good.safetensors"));
    size_t len;
    char *good = kt_file_read(P("good.safetensors"), &len);
    ck_assert_ptr_nonnull(good);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | (unsigned char)good[i];
    ck_assert_uint_lt(8 + hl, len);
    for (size_t cut = 0; cut < len; cut++) {
        write_bytes(P("cut.safetensors"), good, cut);
        kt_err_clear();
        kt_safetensors_t *st = kt_safetensors_open(P("cut.safetensors"));
        ck_assert_msg(st == NULL, "cut at %zu opened", cut);
        ck_assert_msg(kt_err_msg()[0] != '\0', "cut at %zu: no message", cut);
    }
    static const unsigned char nasty[] = {0, '"', '{', '}', '[', ']', ',', ':', '-', '9', 0xff};
    for (size_t pos = 0; pos < 8 + hl; pos++) {
        for (size_t k = 0; k < sizeof nasty; k++) {
            char *bad = malloc(len);
            ck_assert_ptr_nonnull(bad);
            memcpy(bad, good, len);
            bad[pos] = (char)nasty[k];
            write_bytes(P("flip.safetensors"), bad, len);
            free(bad);
            kt_err_clear();
            kt_safetensors_t *st = kt_safetensors_open(P("flip.safetensors"));
            if (st) {
                /* Whatever survives must still be self-consistent. */
                for (int i = 0; i < kt_safetensors_count(st); i++) {
                    int64_t dims[KT_TENSORIO_MAX_RANK];
                    int nd;
                    ck_assert_ptr_nonnull(
                        kt_safetensors_get(st, kt_safetensors_name(st, i), dims, &nd));
                }
                kt_safetensors_close(st);
            } else {
                ck_assert_msg(kt_err_msg()[0] != '\0', "byte %zu: no message", pos);
            }
        }
    }
    free(good);
}
END_TEST

START_TEST(st_writer_errors)
{
    kt_safetensors_writer_t *w = kt_safetensors_writer_new();
    ck_assert_ptr_nonnull(w);
    float v[2] = {1, 2};
    int64_t d[1] = {2};
    ck_assert_int_eq(kt_safetensors_writer_add(w, "x", v, d, 1), 0);
    ck_assert_int_eq(kt_safetensors_writer_add(w, "x", v, d, 1), KT_EINVAL);
    assert_msg_has("tensor 'x' added twice");
    ck_assert_int_eq(kt_safetensors_writer_add(w, "", v, d, 1), KT_EINVAL);
    assert_msg_has("invalid tensor name");
    ck_assert_int_eq(kt_safetensors_writer_add(w, "__metadata__", v, d, 1), KT_EINVAL);
    assert_msg_has("invalid tensor name '__metadata__'");
    ck_assert_int_eq(kt_safetensors_writer_add(w, "bad\xff", v, d, 1), KT_EINVAL);
    assert_msg_has("not UTF-8");
    int64_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    ck_assert_int_eq(kt_safetensors_writer_add(w, "y", v, d9, 9), KT_EINVAL);
    assert_msg_has("rank 9 not supported");
    int64_t neg[1] = {-2};
    ck_assert_int_eq(kt_safetensors_writer_add(w, "y", v, neg, 1), KT_EINVAL);
    assert_msg_has("invalid shape [?]");
    ck_assert_int_eq(kt_safetensors_writer_add(w, "y", NULL, d, 1), KT_EINVAL);
    assert_msg_has("NULL data");
    ck_assert_int_eq(kt_safetensors_writer_set_metadata(w, "k", "\xff"), KT_EINVAL);

    ck_assert_int_eq(kt_safetensors_writer_save(w, P("nodir/x.safetensors")), KT_EIO);
    assert_msg_has("nodir/x.safetensors");
    /* Rename onto a directory fails after all bytes are written. */
    ck_assert_int_eq(mkdir(P("isdir.safetensors"), 0755), 0);
    ck_assert_int_eq(kt_safetensors_writer_save(w, P("isdir.safetensors")), KT_EIO);
    ck_assert_int_eq(tmp_leftovers(), 0);
    /* The failed calls changed nothing: the writer still saves just "x". */
    ck_assert_int_eq(kt_safetensors_writer_save(w, P("x.safetensors")), 0);
    kt_safetensors_writer_free(w);
    kt_safetensors_t *st = open_ok(P("x.safetensors"));
    ck_assert_int_eq(kt_safetensors_count(st), 1);
    assert_tensor(st, "x", d, 1, v);
    ck_assert_ptr_null(kt_safetensors_metadata(st, "k"));
    kt_safetensors_close(st);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tensorio");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, npy_roundtrip_ranks_0_1_4);
    tcase_add_test(tc, npy_write_matches_numpy_bytes);
    tcase_add_test(tc, npy_reads_numpy_files);
    tcase_add_test(tc, npy_rejects_numpy_files_it_cannot_read);
    tcase_add_test(tc, npy_header_errors_have_messages);
    tcase_add_test(tc, npy_file_errors_have_messages);
    tcase_add_test(tc, npy_truncated_or_corrupted_never_crashes);
    tcase_add_test(tc, npy_write_errors_leave_no_file);
    tcase_add_test(tc, npy_check_shape_messages);
    tcase_add_test(tc, st_roundtrip_with_metadata);
    tcase_add_test(tc, st_python_reads_ours);
    tcase_add_test(tc, st_reads_reference_layout);
    tcase_add_test(tc, st_corrupt_files_have_messages);
    tcase_add_test(tc, st_truncated_or_corrupted_never_crashes);
    tcase_add_test(tc, st_writer_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
