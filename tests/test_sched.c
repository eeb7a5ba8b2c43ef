/* Suite "sched": sketches, random annotation, JSON, hashing, mutation and
 * validity of CPU schedule states. Nothing here compiles kernels. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lower.h"
#include "sched/state.h"
#include "te/ops.h"
#include "util/err.h"
#include "util/rng.h"

#include "states_harness.h"

/* Fixed parameters: sketch rules depend on the core count (rfactor). */
static kt_sched_params_t params16(void)
{
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 16;
    p.vector_bytes = 64;
    p.max_innermost_split_factor = 64;
    p.max_vectorize_size = 16;
    return p;
}

static const kt_epilogue_t EPI_RELU[] = {KT_EPI_RELU};
static const kt_epilogue_t EPI_BIAS_RELU[] = {KT_EPI_BIAS_ADD, KT_EPI_RELU};

/* A set of DAGs covering every sketch rule. */
static int make_dags(kt_dag_t **d)
{
    int n = 0;
    kt_conv2d_params_t c1 = kt_test_conv_p(1, 1, 1), c2 = kt_test_conv_p(2, 1, 1);
    d[n++] = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    d[n++] = kt_ops_matmul(7, 13, 17, 0, EPI_RELU, 1);
    d[n++] = kt_ops_matmul(4, 4, 4096, 0, NULL, 0);   /* rfactor on a tiled stage */
    d[n++] = kt_ops_conv2d_nhwc(1, 9, 9, 8, 16, 3, 3, &c1, EPI_BIAS_RELU, 2);
    d[n++] = kt_ops_conv2d_nchw(1, 8, 8, 4, 6, 3, 3, &c2, NULL, 0);
    d[n++] = kt_ops_softmax(2, (int64_t[]){8, 100});
    d[n++] = kt_ops_layer_norm(2, (int64_t[]){6, 40}, 1);
    d[n++] = kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 9, 9, 4, 3, 3, &c2);
    d[n++] = kt_ops_batch_matmul(2, 16, 12, 20, NULL, 0);
    for (int i = 0; i < n; i++)
        ck_assert_msg(d[i] != NULL, "dag %d: %s", i, kt_err_msg());
    return n;
}

static void free_all(kt_sched_state_t **v, int n)
{
    for (int i = 0; i < n; i++)
        kt_sched_state_free(v[i]);
    free(v);
}

static int stage_index(const kt_dag_t *dag, const char *name)
{
    for (int i = 0; i < kt_dag_num_stages(dag); i++)
        if (strcmp(kt_dag_stage(dag, i)->name, name) == 0)
            return i;
    return -1;
}

static int last_compute(const kt_dag_t *dag, int before)
{
    for (int i = before - 1; i >= 0; i--)
        if (kt_dag_stage(dag, i)->kind == KT_STAGE_COMPUTE)
            return i;
    return -1;
}

START_TEST(sched_sketch_counts_match_ansor)
{
    kt_sched_params_t p = params16();
    kt_sched_state_t **sk;
    int n;
    kt_conv2d_params_t c1 = kt_test_conv_p(1, 1, 1);

    /* matmul: cache-write fused at level 1 and 2, plus plain tiling. */
    kt_dag_t *mm = kt_ops_matmul(512, 512, 512, 0, NULL, 0);
    ck_assert_int_eq(kt_sched_sketches(mm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 3);
    int C = stage_index(mm, "C");
    ck_assert_int_ge(C, 0);
    ck_assert_int_eq(sk[0]->stages[C].kind, KT_SK_TILED);
    ck_assert_int_eq(sk[0]->stages[C].cache_write, 1);
    ck_assert_int_eq(sk[0]->stages[C].level, 1);
    ck_assert_int_eq(sk[1]->stages[C].level, 2);
    ck_assert_int_eq(sk[2]->stages[C].cache_write, 0);
    ck_assert_int_eq(sk[2]->stages[C].fuse, -1);
    for (int i = 0; i < n; i++)
        ck_assert_msg(kt_sched_state_validate(mm, &p, sk[i]) == 0, "%s", kt_err_msg());
    free_all(sk, n);
    kt_dag_free(mm);

    /* matmul + relu: the relu is fused at level 1 or 2; no cache write. */
    mm = kt_ops_matmul(512, 512, 512, 0, EPI_RELU, 1);
    ck_assert_int_eq(kt_sched_sketches(mm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 2);
    int R = kt_dag_num_stages(mm) - 1;
    C = last_compute(mm, R);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(sk[i]->stages[C].kind, KT_SK_TILED);
        ck_assert_int_eq(sk[i]->stages[C].fuse, R);
        ck_assert_int_eq(sk[i]->stages[C].cache_write, 0);
        ck_assert_int_eq(sk[i]->stages[R].kind, KT_SK_FUSED);
        ck_assert_int_eq(sk[i]->stages[C].level, i + 1);
    }
    free_all(sk, n);
    kt_dag_free(mm);

    /* conv2d with padding: pad stays a plain stage (a select is not
     * strictly inlinable), the conv gets the three matmul-like sketches. */
    kt_dag_t *cv = kt_ops_conv2d_nhwc(1, 14, 14, 16, 32, 3, 3, &c1, NULL, 0);
    ck_assert_int_eq(kt_sched_sketches(cv, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 3);
    int pad = stage_index(cv, "pad_temp");
    ck_assert_int_ge(pad, 0);
    ck_assert_int_eq(sk[0]->stages[pad].kind, KT_SK_ROOT);
    free_all(sk, n);
    kt_dag_free(cv);

    /* conv2d + bias + relu: bias_add is inlined, relu fused: 2 sketches. */
    cv = kt_ops_conv2d_nhwc(1, 14, 14, 16, 32, 3, 3, &c1, EPI_BIAS_RELU, 2);
    ck_assert_int_eq(kt_sched_sketches(cv, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 2);
    int bias = kt_dag_num_stages(cv) - 2;
    ck_assert_int_eq(sk[0]->stages[kt_dag_num_stages(cv) - 1].kind, KT_SK_FUSED);
    ck_assert_int_eq(sk[0]->stages[bias].kind, KT_SK_INLINE);
    free_all(sk, n);
    kt_dag_free(cv);

    /* Small spatial, long reduction: two rfactor variants join the three. */
    mm = kt_ops_matmul(4, 4, 4096, 0, NULL, 0);
    ck_assert_int_eq(kt_sched_sketches(mm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(sk[0]->stages[2].kind, KT_SK_RFACTOR);
    ck_assert_int_eq(sk[0]->stages[2].rf_inner, 0);
    ck_assert_int_eq(sk[1]->stages[2].rf_inner, 1);
    free_all(sk, n);
    kt_dag_free(mm);

    /* softmax: max and sum are reductions without reuse longer than the
     * cores: each is plain or rfactor'd two ways. */
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    ck_assert_int_eq(kt_sched_sketches(sm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 9);
    free_all(sk, n);
    p.num_cores = 128;   /* no rfactor when the reduction is shorter than the cores */
    ck_assert_int_eq(kt_sched_sketches(sm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 1);
    free_all(sk, n);
    kt_dag_free(sm);
}
END_TEST

START_TEST(sched_sampled_splits_are_exact_factorizations)
{
    kt_sched_params_t p = params16();
    kt_dag_t *d[16];
    int nd = make_dags(d);
    kt_rng_t rng;
    kt_rng_seed(&rng, 7);
    int nontrivial_inner = 0, distinct = 0;
    int32_t seen[64][KT_SCHED_SPATIAL_LEVELS];
    for (int k = 0; k < nd; k++) {
        kt_sched_state_t **sk;
        int n;
        ck_assert_int_eq(kt_sched_sketches(d[k], &p, &sk, &n), 0);
        for (int t = 0; t < 200; t++) {
            kt_sched_state_t *st = kt_sched_sample(d[k], &p, sk[t % n], &rng);
            ck_assert_msg(st != NULL, "dag %d: %s", k, kt_err_msg());
            ck_assert_int_eq(kt_sched_state_validate(d[k], &p, st), 0);
            for (int s = 0; s < st->nstages; s++) {
                const kt_sched_stage_t *e = &st->stages[s];
                const kt_stage_t *ss = kt_dag_stage(d[k], s);
                if (e->kind == KT_SK_TILED) {
                    for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
                        int nlev = a < ss->ndim ? 4 : 2;
                        int64_t ext = a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim];
                        int64_t prod = 1;
                        for (int l = 0; l < nlev; l++) {
                            ck_assert_int_ge(e->split[a][l], 1);
                            prod *= e->split[a][l];
                        }
                        ck_assert_int_eq(prod, ext);
                        ck_assert_int_le(e->split[a][nlev - 1], 64);
                        nontrivial_inner += e->split[a][nlev - 1] > 1;
                    }
                    /* the 64-long axis of the first matmul: count distinct schemes */
                    if (k == 0 && ss->shape[0] == 64 && distinct < 64) {
                        int dup = 0;
                        for (int i = 0; i < distinct && !dup; i++)
                            dup = !memcmp(seen[i], e->split[0], sizeof(seen[i]));
                        if (!dup)
                            memcpy(seen[distinct++], e->split[0], sizeof(seen[0]));
                    }
                } else if (e->kind == KT_SK_RFACTOR) {
                    int64_t red = 1;
                    for (int r = 0; r < ss->nreduce; r++)
                        red *= ss->reduce_ext[r];
                    ck_assert_int_eq((int64_t)e->split[0][0] * e->split[0][1], red);
                    ck_assert_int_le(e->split[0][1], 64);
                }
            }
            kt_sched_state_free(st);
        }
        free_all(sk, n);
    }
    ck_assert_int_gt(nontrivial_inner, 100);
    /* 64 = 2^6 over 4 levels has 84 factorizations; 200 draws see many. */
    ck_assert_int_ge(distinct, 30);
    /* A large prime extent forces every prime factor > 64 out of the
     * innermost level. */
    kt_dag_t *big = kt_ops_matmul(67 * 71, 8, 8, 0, NULL, 0);
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(big, &p, &sk, &n), 0);
    for (int t = 0; t < 50; t++) {
        kt_sched_state_t *st = kt_sched_sample(big, &p, sk[t % n], &rng);
        ck_assert_ptr_nonnull(st);
        ck_assert_int_eq(st->stages[2].split[0][3], 1);
        kt_sched_state_free(st);
    }
    free_all(sk, n);
    kt_dag_free(big);
    for (int k = 0; k < nd; k++)
        kt_dag_free(d[k]);
}
END_TEST

START_TEST(sched_json_round_trip_keeps_state_and_hash)
{
    kt_sched_params_t p = params16();
    kt_dag_t *d[16];
    int nd = make_dags(d);
    kt_rng_t rng;
    kt_rng_seed(&rng, 11);
    for (int k = 0; k < nd; k++) {
        kt_sched_state_t **sk;
        int n;
        ck_assert_int_eq(kt_sched_sketches(d[k], &p, &sk, &n), 0);
        for (int t = 0; t < 60; t++) {
            kt_sched_state_t *st = kt_sched_sample(d[k], &p, sk[t % n], &rng);
            ck_assert_ptr_nonnull(st);
            char *j = kt_sched_state_to_json(st, d[k]);
            ck_assert_ptr_nonnull(j);
            kt_sched_state_t *back = kt_sched_state_from_json(j, d[k], &p);
            ck_assert_msg(back != NULL, "%s: %s", j, kt_err_msg());
            ck_assert(kt_sched_state_equal(st, back));
            ck_assert_uint_eq(kt_sched_state_hash(st, d[k]), kt_sched_state_hash(back, d[k]));
            char *j2 = kt_sched_state_to_json(back, d[k]);
            ck_assert_str_eq(j, j2);
            free(j);
            free(j2);
            kt_sched_state_free(back);
            kt_sched_state_free(st);
        }
        free_all(sk, n);
        kt_dag_free(d[k]);
    }
}
END_TEST

/* Replace the first occurrence of `from` in s by `to` (test helper). */
static char *subst(const char *s, const char *from, const char *to)
{
    const char *q = strstr(s, from);
    ck_assert_msg(q != NULL, "'%s' not in %s", from, s);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *r = malloc(n);
    snprintf(r, n, "%.*s%s%s", (int)(q - s), s, to, q + strlen(from));
    return r;
}

static void expect_reject(const kt_dag_t *dag, const kt_sched_params_t *p, const char *text,
                          const char *msg_part)
{
    kt_err_clear();
    kt_sched_state_t *st = kt_sched_state_from_json(text, dag, p);
    ck_assert_msg(st == NULL, "accepted: %s", text);
    ck_assert_int_eq(kt_err_code(), KT_EINVAL);
    ck_assert_msg(strstr(kt_err_msg(), msg_part) != NULL, "message '%s' lacks '%s' for %s",
                  kt_err_msg(), msg_part, text);
}

START_TEST(sched_parse_rejects_bad_states_with_message)
{
    kt_sched_params_t p = params16();
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    const char *good =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[2,1,64],\"kind\":\"tiled\",\"name\":\"C\",\"tile\":[[2,4,2,4],[3,1,4,4],[8,4]]}"
        "],\"version\":1}";
    kt_sched_state_t *st = kt_sched_state_from_json(good, mm, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_sched_state_free(st);

    expect_reject(mm, &p, "{\"stages\":", "line");
    expect_reject(mm, &p, "[]", "version");
    expect_reject(mm, &p, "{\"stages\":[],\"version\":1}", "3 stages");
    char *bad;
    struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"version\":1", "\"version\":2", "version"},
        {"\"name\":\"C\"", "\"name\":\"D\"", "name must be 'C'"},
        {"\"kind\":\"tiled\"", "\"kind\":\"tilde\"", "kind"},
        {"[2,4,2,4]", "[2,4,2,2]", "do not multiply"},
        {"[8,4]", "[8,4,1]", "needs 2 factors"},
        {"[2,4,2,4]", "[2,4,2,-4]", "integers"},
        {"[2,4,2,4]", "[2,4,2,4.5]", "integers"},
        {"\"ann\":[2,1,64]", "\"ann\":[9,1,64]", "parallel over 9 loops"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,3,64]", "vectorize over 3 loops"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,1,65]", "auto_unroll"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,1]", "annotation"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,1,64],\"color\":1", "unexpected key 'color'"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,1,64],\"fuse\":\"A\",\"level\":1", "fused consumer"},
        {"\"ann\":[2,1,64]", "\"ann\":[2,1,64],\"level\":1", "compute level"},
        {"\"kind\":\"input\",\"name\":\"A\"", "\"ann\":[0,0,0],\"kind\":\"root\",\"name\":\"A\"", "placeholder"},
        {"\"kind\":\"tiled\"", "\"kind\":\"inline\"", "unexpected key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bad = subst(good, cases[i].from, cases[i].to);
        expect_reject(mm, &p, bad, cases[i].msg);
        free(bad);
    }
    /* the innermost bound comes from the parameters */
    kt_sched_params_t p8 = p;
    p8.max_innermost_split_factor = 8;
    bad = subst(good, "[2,4,2,4]", "[1,2,2,16]");
    kt_sched_state_t *ok16 = kt_sched_state_from_json(bad, mm, &p);
    ck_assert_ptr_nonnull(ok16);
    kt_sched_state_free(ok16);
    expect_reject(mm, &p8, bad, "innermost split factor 16 exceeds 8");
    free(bad);
    /* inline needs an inlinable stage */
    expect_reject(mm, &p,
                  "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":"
                  "\"B\"},{\"kind\":\"inline\",\"name\":\"C\"}],\"version\":1}",
                  "cannot be inlined");
    /* a plain nest on a reduction with reuse is fine; compute-at an input is not */
    expect_reject(mm, &p,
                  "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":"
                  "\"B\"},{\"ann\":[1,0,0],\"at\":[\"A\",1],\"kind\":\"root\",\"name\":\"C\"}],"
                  "\"version\":1}",
                  "computed at");

    /* Byte-level corruption of valid states never crashes the parser, and
     * whatever it accepts is valid. */
    kt_rng_t rng;
    kt_rng_seed(&rng, 5);
    size_t len = strlen(good);
    char *buf = malloc(len + 1);
    int accepted = 0;
    for (int t = 0; t < 3000; t++) {
        memcpy(buf, good, len + 1);
        int edits = 1 + (int)kt_rng_below(&rng, 3);
        for (int e = 0; e < edits; e++)
            buf[kt_rng_below(&rng, len)] = "0123456789[]{},:\"ax-"[kt_rng_below(&rng, 20)];
        kt_sched_state_t *s = kt_sched_state_from_json(buf, mm, &p);
        if (s) {
            accepted++;
            ck_assert_int_eq(kt_sched_state_validate(mm, &p, s), 0);
            kt_sched_state_free(s);
        } else {
            ck_assert(strlen(kt_err_msg()) > 0);
        }
    }
    ck_assert_int_lt(accepted, 3000);
    free(buf);
    kt_dag_free(mm);
}
END_TEST

START_TEST(sched_random_mutations_keep_validity)
{
    kt_sched_params_t p = params16();
    kt_dag_t *d[16];
    int nd = make_dags(d);
    kt_rng_t rng;
    kt_rng_seed(&rng, 3);
    int changed[KT_MUT__COUNT] = {0}, total = 0;
    for (int k = 0; k < nd; k++) {
        kt_sched_state_t **sk;
        int n;
        ck_assert_int_eq(kt_sched_sketches(d[k], &p, &sk, &n), 0);
        for (int chain = 0; chain < 12; chain++) {
            kt_sched_state_t *st = kt_sched_sample(d[k], &p, sk[chain % n], &rng);
            ck_assert_ptr_nonnull(st);
            for (int step = 0; step < 95; step++, total++) {
                int rule = (int)kt_rng_below(&rng, KT_MUT__COUNT + 1) - 1;   /* -1: by weight */
                kt_sched_state_t *m = NULL;
                int rc = kt_sched_mutate(d[k], &p, st, rule, &rng, &m);
                ck_assert_int_ge(rc, 0);
                if (rc == 0) {
                    ck_assert_ptr_null(m);
                    continue;
                }
                ck_assert_msg(kt_sched_state_validate(d[k], &p, m) == 0, "%s", kt_err_msg());
                ck_assert(!kt_sched_state_equal(m, st));
                if (rule >= 0)
                    changed[rule]++;
                kt_sched_state_free(st);
                st = m;
            }
            kt_sched_state_free(st);
        }
        free_all(sk, n);
        kt_dag_free(d[k]);
    }
    ck_assert_int_ge(total, 10000);
    for (int r = 0; r < KT_MUT__COUNT; r++)
        ck_assert_msg(changed[r] > 0, "rule %d never changed a state", r);
}
END_TEST

/* A 28x28 stride-2 conv2d and its state with a 7-row x 2-column register
 * tile (x 32 channels) whose channel reduction splits [2,8]; *s: its tiled
 * stage. */
static kt_sched_state_t *tile_7x2(const kt_sched_params_t *p, kt_dag_t **cv, int *s)
{
    *cv = kt_test_pad_tile_conv(28, 2);
    kt_sched_state_t *st =
        kt_sched_state_from_json(KT_TEST_PAD_TILE_STATE("[1,1,2,7]", "[1,1,7,2]"), *cv, p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    *s = kt_test_tiled_stage(st);
    return st;
}

/* Deterministic rule `rule` makes want of st and nothing new of want. */
static void check_rule_once(const kt_dag_t *cv, const kt_sched_params_t *p,
                            const kt_sched_state_t *st, const kt_sched_state_t *want, int rule,
                            kt_rng_t *rng)
{
    kt_sched_state_t *m = NULL, *again = NULL;
    ck_assert_int_eq(kt_sched_mutate(cv, p, st, rule, rng, &m), 1);
    ck_assert(kt_sched_state_equal(m, want));
    ck_assert_int_eq(kt_sched_mutate(cv, p, m, rule, rng, &again), 0);
    ck_assert_ptr_null(again);
    kt_sched_state_free(m);
}

/* The reduce-in rule moves every outer reduce factor of the tiled stage
 * into its inner level (channels [2,8] -> [1,16]) and changes nothing else;
 * a state whose reduction already ends in the tile, or one where an inner
 * factor would exceed kt_sched_direct_reduce_cap, has nothing to change. */
START_TEST(sched_reduce_in_ends_the_reduction_inside_the_register_tile)
{
    kt_sched_params_t p = params16();
    kt_dag_t *cv;
    int s;
    kt_sched_state_t *st = tile_7x2(&p, &cv, &s);
    int ci = kt_dag_stage(cv, s)->ndim + 2;
    kt_sched_state_t *want = kt_sched_state_clone(st);
    want->stages[s].split[ci][0] = 1;
    want->stages[s].split[ci][1] = 16;
    kt_rng_t rng;
    kt_rng_seed(&rng, 6);
    check_rule_once(cv, &p, st, want, KT_MUT_REDUCE_IN, &rng);
    kt_sched_state_t *again = NULL;
    p.max_innermost_split_factor = 8;
    p.max_direct_reduce_factor = 8;
    ck_assert_int_eq(kt_sched_mutate(cv, &p, st, KT_MUT_REDUCE_IN, &rng, &again), 0);
    ck_assert_ptr_null(again);
    kt_sched_state_free(want);
    kt_sched_state_free(st);
    kt_dag_free(cv);
}
END_TEST

/* The rows-out rule makes a row sweep: the outer factors of a
 * convolution's output rows in the outermost level ([1,1,2,7] -> [2,1,1,7]:
 * the 7-row register tile stays), those of its columns in the last level
 * outside the tile ([7,1,1,2] -> [1,1,7,2]), the padding inlined, and
 * nothing else changed; a row sweep has nothing to change. The same state
 * with its padding materialized, or with its columns split outside, gives
 * the same sweep. */
START_TEST(sched_rows_out_gathers_the_rows_outermost)
{
    kt_sched_params_t p = params16();
    kt_dag_t *cv;
    int s;
    kt_sched_state_t *st = tile_7x2(&p, &cv, &s);
    kt_sched_state_t *want = kt_sched_state_clone(st);
    int32_t rows[4] = {2, 1, 1, 7};
    memcpy(want->stages[s].split[1], rows, sizeof rows);
    kt_rng_t rng;
    kt_rng_seed(&rng, 7);
    check_rule_once(cv, &p, st, want, KT_MUT_ROWS_OUT, &rng);
    static const char *const others[] = {
        KT_TEST_PAD_TILE_STATE("[1,1,2,7]", "[7,1,1,2]"),
        KT_TEST_PAD_TILE_STATE("[1,2,1,7]", "[1,7,1,2]"),
    };
    for (int k = 0; k < 3; k++) {
        char *json = k < 2 ? strdup(others[k])
                           : kt_test_materialize_pad(
                                 KT_TEST_PAD_TILE_STATE("[1,1,2,7]", "[1,1,7,2]"));
        kt_sched_state_t *o = kt_sched_state_from_json(json, cv, &p);
        ck_assert_msg(o != NULL, "%s", kt_err_msg());
        ck_assert(!kt_sched_state_equal(o, want));
        check_rule_once(cv, &p, o, want, KT_MUT_ROWS_OUT, &rng);
        kt_sched_state_free(o);
        free(json);
    }
    kt_sched_state_free(want);
    kt_sched_state_free(st);
    kt_dag_free(cv);
}
END_TEST

/* The stage st and m place differently, -1 where they differ elsewhere or
 * in more than one stage's placement. */
static int moved_stage(const kt_sched_state_t *st, const kt_sched_state_t *m)
{
    int moved = -1;
    for (int i = 0; i < st->nstages; i++) {
        const kt_sched_stage_t *a = &st->stages[i], *b = &m->stages[i];
        if (a->kind == b->kind && a->at_stage == b->at_stage && a->at_depth == b->at_depth) {
            if (memcmp(a, b, sizeof(*a)) != 0)
                return -1;
            continue;
        }
        if (moved >= 0)
            return -1;
        moved = i;
    }
    return moved;
}

/* Checks kt_sched_relocate over st's placements: every k moves one stage
 * and changes no other, no two k give one placement, and together they are
 * exactly the placements 400 draws of the compute-location rule reach; a k
 * out of range is an error. Returns the number of placements. */
static int check_relocations(const kt_dag_t *d, const kt_sched_params_t *p,
                             const kt_sched_state_t *st, kt_rng_t *rng, int first[4])
{
    int n = kt_sched_relocations(d, st);
    ck_assert_int_le(n, 64);
    int place[64][4], np = 0;
    for (int k = 0; k < n; k++) {
        kt_sched_state_t *m = NULL;
        int rc = kt_sched_relocate(d, p, st, k, rng, &m);
        ck_assert_int_ge(rc, 0);
        if (rc == 0) {
            ck_assert_ptr_null(m);
            continue;
        }
        int i = moved_stage(st, m);
        ck_assert_int_ge(i, 0);
        int q[4] = {i, m->stages[i].kind, m->stages[i].at_stage, m->stages[i].at_depth};
        for (int j = 0; j < np; j++)
            ck_assert_msg(memcmp(place[j], q, sizeof(q)) != 0, "placement %d again at %d", j, k);
        memcpy(place[np++], q, sizeof(q));
        kt_sched_state_free(m);
    }
    if (np > 0)
        memcpy(first, place[0], sizeof(place[0]));
    int reached[64] = {0};
    for (int t = 0; t < 400; t++) {
        kt_sched_state_t *m = NULL;
        if (kt_sched_mutate(d, p, st, KT_MUT_COMPUTE_LOC, rng, &m) != 1)
            continue;
        int i = moved_stage(st, m), j = 0;
        ck_assert_int_ge(i, 0);
        int q[4] = {i, m->stages[i].kind, m->stages[i].at_stage, m->stages[i].at_depth};
        while (j < np && memcmp(place[j], q, sizeof(q)) != 0)
            j++;
        ck_assert_msg(j < np, "the rule drew a placement relocate never gave (stage %d)", i);
        reached[j] = 1;
        kt_sched_state_free(m);
    }
    for (int j = 0; j < np; j++)
        ck_assert_msg(reached[j], "placement %d never drawn by the rule", j);
    kt_sched_state_t *m = NULL;
    ck_assert_int_lt(kt_sched_relocate(d, p, st, n, rng, &m), 0);
    ck_assert_msg(strstr(kt_err_msg(), "no placement") != NULL, "%s", kt_err_msg());
    ck_assert_int_lt(kt_sched_relocate(d, p, st, -1, rng, &m), 0);
    ck_assert_ptr_null(m);
    return np;
}

/* kt_sched_relocate takes each placement the compute-location rule can
 * draw once, in a fixed order (check_relocations): a conv2d whose padding
 * is inlined has one, the padding at root; a padded max pool has two (its
 * padding placed at two of root, inlined, at the pool's loops); a matmul
 * (one placement per stage) has none. */
START_TEST(sched_relocate_takes_each_placement_once)
{
    kt_sched_params_t p = params16();
    kt_rng_t rng;
    kt_rng_seed(&rng, 8);
    kt_dag_t *cv;
    int s, first[4];
    kt_sched_state_t *st = tile_7x2(&p, &cv, &s);
    ck_assert_int_eq(check_relocations(cv, &p, st, &rng, first), 1);
    ck_assert_str_eq(kt_dag_stage(cv, first[0])->name, "pad_temp");
    ck_assert_int_eq(first[1], KT_SK_ROOT);
    ck_assert_int_eq(first[2], -1);
    kt_sched_state_free(st);
    kt_dag_free(cv);
    kt_conv2d_params_t pp = kt_test_conv_p(2, 1, 1);
    kt_dag_t *d[2] = {kt_ops_pool2d_nhwc(KT_POOL_MAX, 1, 16, 16, 32, 3, 3, &pp),
                      kt_ops_matmul(64, 64, 64, 0, NULL, 0)};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(d[k] != NULL, "%s", kt_err_msg());
        kt_sched_state_t **sk;
        int nsk, most = 0;
        ck_assert_int_eq(kt_sched_sketches(d[k], &p, &sk, &nsk), 0);
        for (int t = 0; t < 12; t++) {
            kt_sched_state_t *x = kt_sched_sample(d[k], &p, sk[t % nsk], &rng);
            ck_assert_ptr_nonnull(x);
            int n = check_relocations(d[k], &p, x, &rng, first);
            most = n > most ? n : most;
            kt_sched_state_free(x);
        }
        if (k == 0)
            ck_assert_int_ge(most, 2);
        else
            ck_assert_int_eq(most, 0);
        free_all(sk, nsk);
        kt_dag_free(d[k]);
    }
}
END_TEST

/* A direct tile may run a reduction longer than max_innermost_split_factor
 * whole: matmul 512's k [8,64] moves in to [1,512], which validates, while
 * [2,256] (not direct) does not; at max_direct_reduce_factor 256 the rule
 * leaves the state and [1,512] is out of bounds. */
START_TEST(sched_reduce_in_runs_a_long_reduction_whole)
{
    kt_sched_params_t p = params16();
    kt_dag_t *mm = kt_ops_matmul(512, 512, 512, 0, NULL, 0);
    const char *fmt = "{\"version\":1,\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},"
                      "{\"kind\":\"input\",\"name\":\"B\"},{\"kind\":\"tiled\","
                      "\"name\":\"C\",\"ann\":[2,0,0],\"tile\":[[2,8,4,8],[2,2,4,32],%s]}]}";
    char js[512];
    snprintf(js, sizeof(js), fmt, "[8,64]");
    kt_sched_state_t *st = kt_sched_state_from_json(js, mm, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    snprintf(js, sizeof(js), fmt, "[1,512]");
    kt_sched_state_t *want = kt_sched_state_from_json(js, mm, &p);
    ck_assert_msg(want != NULL, "%s", kt_err_msg());
    snprintf(js, sizeof(js), fmt, "[2,256]");
    ck_assert_ptr_null(kt_sched_state_from_json(js, mm, &p));
    ck_assert_msg(strstr(kt_err_msg(), "innermost split factor 256 exceeds 64") != NULL, "%s",
                  kt_err_msg());
    kt_rng_t rng;
    kt_rng_seed(&rng, 6);
    kt_sched_state_t *m = NULL;
    ck_assert_int_eq(kt_sched_mutate(mm, &p, st, KT_MUT_REDUCE_IN, &rng, &m), 1);
    ck_assert(kt_sched_state_equal(m, want));
    ck_assert_msg(kt_sched_state_validate(mm, &p, m) == 0, "%s", kt_err_msg());
    kt_sched_state_free(m);
    m = NULL;
    p.max_direct_reduce_factor = 256;
    ck_assert_int_eq(kt_sched_mutate(mm, &p, st, KT_MUT_REDUCE_IN, &rng, &m), 0);
    ck_assert_ptr_null(m);
    ck_assert_int_ne(kt_sched_state_validate(mm, &p, want), 0);
    ck_assert_msg(strstr(kt_err_msg(), "innermost split factor 512 exceeds 256") != NULL, "%s",
                  kt_err_msg());
    kt_sched_state_free(want);
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

/* The tile-shape rule on a 7-row x 2-column register tile (x 32 channels)
 * of a stride-2 conv2d: every result exchanges one prime between two
 * spatial axes, the innermost level of one and an outer level of the other,
 * so each axis keeps its extent, each loop level its trip count and the
 * register tile its size (the same prime was there to take); among them the
 * 1-row x 14-column tile. A one-spatial-axis tile (dense with M = 1) has
 * nothing to exchange. */
START_TEST(sched_tile_shape_exchanges_a_prime_between_axes)
{
    kt_sched_params_t p = params16();
    kt_dag_t *cv;
    int s;
    kt_sched_state_t *st = tile_7x2(&p, &cv, &s);
    const kt_stage_t *ss = kt_dag_stage(cv, s);
    const int32_t(*f0)[KT_SCHED_MAX_LEVELS] = st->stages[s].split;
    kt_rng_t rng;
    kt_rng_seed(&rng, 5);
    int one_row = 0;
    for (int k = 0; k < 64; k++) {
        kt_sched_state_t *m = NULL;
        ck_assert_int_eq(kt_sched_mutate(cv, &p, st, KT_MUT_TILE_SHAPE, &rng, &m), 1);
        const int32_t(*f)[KT_SCHED_MAX_LEVELS] = m->stages[s].split;
        int changed_axes = 0;
        for (int a = 0; a < ss->ndim + ss->nreduce; a++) {
            int64_t e = 1;
            for (int l = 0; l < KT_SCHED_SPATIAL_LEVELS; l++)
                e *= a < ss->ndim || l < KT_SCHED_REDUCE_LEVELS ? f[a][l] : 1;
            ck_assert_int_eq(e, a < ss->ndim ? ss->shape[a] : ss->reduce_ext[a - ss->ndim]);
            changed_axes += memcmp(f[a], f0[a], sizeof(f[a])) != 0;
            if (a >= ss->ndim)
                ck_assert_msg(memcmp(f[a], f0[a], sizeof(f[a])) == 0, "reduce axis %d", a);
        }
        ck_assert_int_eq(changed_axes, 2);
        for (int l = 0; l < KT_SCHED_SPATIAL_LEVELS; l++) {
            int64_t t = 1, t0 = 1;
            for (int a = 0; a < ss->ndim; a++)
                t *= f[a][l], t0 *= f0[a][l];
            ck_assert_int_eq(t, t0);
        }
        one_row += f[1][3] == 1 && f[2][3] == 14 && f[3][3] == 32;
        kt_sched_state_free(m);
    }
    ck_assert_int_gt(one_row, 0);
    kt_sched_state_free(st);
    kt_dag_free(cv);
    kt_dag_t *dn = kt_ops_dense(1, 64, 32, NULL, 0);
    ck_assert_ptr_nonnull(dn);
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(dn, &p, &sk, &n), 0);
    for (int i = 0; i < n; i++) {
        kt_sched_state_t *d = kt_sched_sample(dn, &p, sk[i], &rng), *m = NULL;
        ck_assert_ptr_nonnull(d);
        ck_assert_int_eq(kt_sched_mutate(dn, &p, d, KT_MUT_TILE_SHAPE, &rng, &m), 0);
        ck_assert_ptr_null(m);
        kt_sched_state_free(d);
    }
    free_all(sk, n);
    kt_dag_free(dn);
}
END_TEST

/* Corrupt fields of valid states at random: validation never crashes, and
 * every state it accepts serializes, parses back and lowers. */
START_TEST(sched_validate_survives_corrupted_states)
{
    kt_sched_params_t p = params16();
    kt_dag_t *d[16];
    int nd = make_dags(d);
    kt_rng_t rng;
    kt_rng_seed(&rng, 77);
    int accepted = 0, rejected = 0;
    for (int k = 0; k < nd; k++) {
        kt_sched_state_t **sk;
        int n;
        ck_assert_int_eq(kt_sched_sketches(d[k], &p, &sk, &n), 0);
        for (int t = 0; t < 600; t++) {
            kt_sched_state_t *st = kt_sched_sample(d[k], &p, sk[t % n], &rng);
            ck_assert_ptr_nonnull(st);
            int edits = 1 + (int)kt_rng_below(&rng, 3);
            for (int e = 0; e < edits; e++) {
                kt_sched_stage_t *x = &st->stages[kt_rng_below(&rng, (uint64_t)st->nstages)];
                int8_t small = (int8_t)((int)kt_rng_below(&rng, 12) - 2);
                switch (kt_rng_below(&rng, 9)) {
                case 0: x->kind = small; break;
                case 1: x->fuse = small; break;
                case 2: x->level = small; break;
                case 3: x->at_stage = small; break;
                case 4: x->at_depth = small; break;
                case 5: x->cache_write = small; break;
                case 6:
                    x->split[kt_rng_below(&rng, KT_SCHED_MAX_AXES)][kt_rng_below(&rng, 4)] =
                        (int32_t)kt_rng_below(&rng, 70) - 2;
                    break;
                case 7: x->ann.parallel = (uint8_t)kt_rng_below(&rng, 20); break;
                default: x->ann2.vectorize = (uint8_t)kt_rng_below(&rng, 4); break;
                }
            }
            if (kt_sched_state_validate(d[k], &p, st) != 0) {
                ck_assert(strlen(kt_err_msg()) > 0);
                rejected++;
            } else {
                accepted++;
                char *j = kt_sched_state_to_json(st, d[k]);
                ck_assert_ptr_nonnull(j);
                kt_sched_state_t *back = kt_sched_state_from_json(j, d[k], &p);
                ck_assert_msg(back != NULL, "%s: %s", j, kt_err_msg());
                ck_assert(kt_sched_state_equal(back, st));
                char *pr = kt_sched_state_print(d[k], st);
                ck_assert_msg(pr != NULL, "%s: %s", j, kt_err_msg());
                free(pr);
                free(j);
                kt_sched_state_free(back);
            }
            kt_sched_state_free(st);
        }
        free_all(sk, n);
        kt_dag_free(d[k]);
    }
    ck_assert_int_gt(rejected, 1000);
    ck_assert_int_gt(accepted, 100);
}
END_TEST

/* matmul 64x48x32 + relu and its sketches under params16(). */
static kt_dag_t *mm_relu_sketches(kt_sched_params_t *p, kt_sched_state_t ***sk, int *n)
{
    *p = params16();
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, EPI_RELU, 1);
    ck_assert_ptr_nonnull(mm);
    ck_assert_int_eq(kt_sched_sketches(mm, p, sk, n), 0);
    return mm;
}

START_TEST(sched_hashes_differ_for_different_states)
{
    kt_sched_params_t p;
    kt_sched_state_t **sk;
    int n;
    kt_dag_t *mm = mm_relu_sketches(&p, &sk, &n);
    kt_rng_t rng;
    kt_rng_seed(&rng, 9);
    enum { N = 300 };
    kt_sched_state_t *v[N];
    uint64_t h[N];
    for (int i = 0; i < N; i++) {
        v[i] = kt_sched_sample(mm, &p, sk[i % n], &rng);
        ck_assert_ptr_nonnull(v[i]);
        h[i] = kt_sched_state_hash(v[i], mm);
        ck_assert_uint_ne(h[i], 0);
    }
    int distinct_pairs = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            if (kt_sched_state_equal(v[i], v[j])) {
                ck_assert_uint_eq(h[i], h[j]);
            } else {
                ck_assert_uint_ne(h[i], h[j]);
                distinct_pairs++;
            }
        }
    ck_assert_int_gt(distinct_pairs, N * (N - 1) / 4);
    /* One changed annotation changes the hash. */
    kt_sched_state_t *c = kt_sched_state_clone(v[0]);
    c->stages[2].ann.unroll = c->stages[2].ann.unroll == 16 ? 64 : 16;
    ck_assert_uint_ne(kt_sched_state_hash(c, mm), h[0]);
    kt_sched_state_free(c);
    for (int i = 0; i < N; i++)
        kt_sched_state_free(v[i]);
    free_all(sk, n);
    kt_dag_free(mm);
}
END_TEST

/* Keys of a that b lacks. */
static int knobs_missing(const uint64_t *a, int na, const uint64_t *b, int nb)
{
    int miss = 0;
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int j = 0; j < nb && !found; j++)
            found = a[i] == b[j];
        miss += !found;
    }
    return miss;
}

/* The first TILED stage of a state (every sampled matmul state has one). */
static int first_tiled(const kt_sched_state_t *st)
{
    for (int s = 0; s < st->nstages; s++)
        if (st->stages[s].kind == KT_SK_TILED)
            return s;
    return -1;
}

START_TEST(sched_knobs_name_each_decision_once)
{
    kt_sched_params_t p;
    kt_sched_state_t **sk;
    int n;
    kt_dag_t *mm = mm_relu_sketches(&p, &sk, &n);
    kt_rng_t rng;
    kt_rng_seed(&rng, 21);
    enum { CAP = 8 * KT_SCHED_KNOBS_PER_STAGE };
    uint64_t ka[CAP], kb[CAP];
    for (int t = 0; t < 40; t++) {
        kt_sched_state_t *a = kt_sched_sample(mm, &p, sk[t % n], &rng);
        ck_assert_ptr_nonnull(a);
        int na = kt_sched_state_knobs(a, ka, CAP);
        ck_assert_int_gt(na, 0);
        ck_assert_int_le(na, a->nstages * KT_SCHED_KNOBS_PER_STAGE);
        for (int i = 0; i < na; i++) {
            ck_assert_uint_ne(ka[i], 0);
            for (int j = i + 1; j < na; j++)
                ck_assert_uint_ne(ka[i], ka[j]);   /* one key per decision */
        }
        /* the same state, the same keys */
        kt_sched_state_t *b = kt_sched_state_clone(a);
        ck_assert_int_eq(kt_sched_state_knobs(b, kb, CAP), na);
        ck_assert_mem_eq(ka, kb, (size_t)na * sizeof(uint64_t));
        /* one decision changed: exactly one key differs each way */
        int tiled = first_tiled(a);
        ck_assert_int_ge(tiled, 0);
        b->stages[tiled].ann.unroll = a->stages[tiled].ann.unroll == 16 ? 64 : 16;
        int nb = kt_sched_state_knobs(b, kb, CAP);
        ck_assert_int_eq(nb, na);
        ck_assert_int_eq(knobs_missing(ka, na, kb, nb), 1);
        /* the same value at another level is another decision */
        kt_sched_state_t *c = kt_sched_state_clone(a);
        int32_t *sp = c->stages[tiled].split[0];
        int32_t x = sp[2];
        sp[2] = sp[3];
        sp[3] = x;
        int nc = kt_sched_state_knobs(c, kb, CAP);
        ck_assert_int_eq(knobs_missing(ka, na, kb, nc), sp[2] == sp[3] ? 0 : 2);
        kt_sched_state_free(a);
        kt_sched_state_free(b);
        kt_sched_state_free(c);
    }
    /* too little room: an error, not a short list */
    kt_sched_state_t *a = kt_sched_sample(mm, &p, sk[0], &rng);
    ck_assert_int_eq(kt_sched_state_knobs(a, ka, KT_SCHED_KNOBS_PER_STAGE), KT_EINVAL);
    ck_assert_int_eq(kt_sched_state_knobs(NULL, ka, CAP), KT_EINVAL);
    kt_sched_state_free(a);
    free_all(sk, n);
    kt_dag_free(mm);
}
END_TEST

START_TEST(sched_tile_key_names_the_register_tile)
{
    kt_sched_params_t p;
    kt_sched_state_t **sk;
    int n;
    kt_dag_t *mm = mm_relu_sketches(&p, &sk, &n);
    kt_rng_t rng;
    kt_rng_seed(&rng, 33);
    for (int t = 0; t < 40; t++) {
        kt_sched_state_t *a = kt_sched_sample(mm, &p, sk[t % n], &rng);
        ck_assert_ptr_nonnull(a);
        int s = first_tiled(a);
        ck_assert_int_ge(s, 0);
        uint64_t key = kt_sched_state_tile_key(a);
        ck_assert_uint_ne(key, 0);
        kt_sched_state_t *b = kt_sched_state_clone(a);
        /* outer levels, reduce splits and annotations: the same tile */
        int32_t *sp = b->stages[s].split[0];
        int32_t x = sp[0];
        sp[0] = sp[1];
        sp[1] = x;
        b->stages[s].split[2][0] += 1;   /* the reduce axis */
        b->stages[s].ann.unroll = a->stages[s].ann.unroll == 16 ? 64 : 16;
        ck_assert_uint_eq(kt_sched_state_tile_key(b), key);
        /* another innermost factor of either spatial axis: another tile */
        for (int ax = 0; ax < 2; ax++) {
            kt_sched_state_t *c = kt_sched_state_clone(a);
            c->stages[s].split[ax][KT_SCHED_SPATIAL_LEVELS - 1] *= 2;
            ck_assert_uint_ne(kt_sched_state_tile_key(c), key);
            kt_sched_state_free(c);
        }
        kt_sched_state_free(a);
        kt_sched_state_free(b);
    }
    /* no tiled stage, no family */
    kt_sched_state_t *plain = kt_sched_state_new(mm);
    ck_assert_uint_eq(kt_sched_state_tile_key(plain), 0);
    ck_assert_uint_eq(kt_sched_state_tile_key(NULL), 0);
    kt_sched_state_free(plain);
    free_all(sk, n);
    kt_dag_free(mm);
}
END_TEST

START_TEST(sched_print_shows_loop_nest_and_annotations)
{
    kt_sched_params_t p = params16();
    kt_dag_t *mm = kt_ops_matmul(64, 48, 32, 0, NULL, 0);
    const char *j =
        "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"
        "{\"ann\":[0,1,0],\"ann2\":[2,1,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"
        "\"name\":\"C\",\"tile\":[[2,4,2,4],[3,1,4,4],[8,4]]}],\"version\":1}";
    kt_sched_state_t *st = kt_sched_state_from_json(j, mm, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    char *pr = kt_sched_state_print(mm, st);
    ck_assert_ptr_nonnull(pr);
    ck_assert_msg(strstr(pr, "Placeholder: A, B\n") == pr, "%s", pr);
    ck_assert_msg(strstr(pr, "\nparallel i.0 (0,2)\n  parallel j.0 (0,3)\n") != NULL, "%s", pr);
    ck_assert_msg(strstr(pr, "for k.0 (0,8)") != NULL, "%s", pr);
    ck_assert_msg(strstr(pr, "vectorize j.3 (0,4)") != NULL, "%s", pr);
    ck_assert_msg(strstr(pr, "C.local = 0") != NULL, "%s", pr);
    ck_assert_msg(strstr(pr, "C = ...") != NULL, "%s", pr);
    free(pr);
    /* auto-unroll 64 unrolls the small inner loops */
    st->stages[2].ann.unroll = 64;
    pr = kt_sched_state_print(mm, st);
    ck_assert_msg(strstr(pr, "unroll i.3 (0,4)") != NULL, "%s", pr);
    ck_assert_msg(strstr(pr, "for k.0 (0,8)") != NULL, "%s", pr);   /* 8*... > 64 */
    free(pr);
    kt_sched_state_free(st);
    kt_dag_free(mm);
}
END_TEST

START_TEST(sched_validate_rejects_inconsistent_states)
{
    kt_sched_params_t p;
    kt_sched_state_t **sk;
    int n;
    kt_dag_t *mm = mm_relu_sketches(&p, &sk, &n);
    kt_rng_t rng;
    kt_rng_seed(&rng, 1);
    kt_sched_state_t *st = kt_sched_sample(mm, &p, sk[0], &rng);
    ck_assert_int_eq(kt_sched_state_validate(mm, &p, st), 0);
    kt_sched_state_t *b = kt_sched_state_clone(st);
    b->stages[3].kind = KT_SK_ROOT;   /* producer still says fused */
    b->stages[3].fuse = -1;
    ck_assert_int_eq(kt_sched_state_validate(mm, &p, b), KT_EINVAL);
    ck_assert_ptr_nonnull(strstr(kt_err_msg(), "'C'"));
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[2].level = 3;
    ck_assert_int_eq(kt_sched_state_validate(mm, &p, b), KT_EINVAL);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->stages[3].ann.parallel = 0;
    b->stages[2].ann.parallel = 1;   /* a nest computed inside another is not parallel */
    ck_assert_int_eq(kt_sched_state_validate(mm, &p, b), KT_EINVAL);
    kt_sched_state_free(b);
    b = kt_sched_state_clone(st);
    b->nstages = 3;
    ck_assert_int_eq(kt_sched_state_validate(mm, &p, b), KT_EINVAL);
    kt_sched_state_free(b);
    kt_sched_state_free(st);
    free_all(sk, n);
    kt_dag_free(mm);
}
END_TEST

START_TEST(sched_compute_location_choices_follow_consumers)
{
    kt_sched_params_t p = params16();
    p.num_cores = 256;   /* no rfactor: plain reductions only */
    kt_dag_t *sm = kt_ops_softmax(2, (int64_t[]){8, 100});
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(sm, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 1);
    kt_rng_t rng;
    kt_rng_seed(&rng, 2);
    int at = 0, root = 0;
    int maxe = stage_index(sm, "T_softmax_maxelem"), expsum = stage_index(sm, "T_softmax_expsum");
    for (int t = 0; t < 100; t++) {
        kt_sched_state_t *st = kt_sched_sample(sm, &p, sk[0], &rng);
        ck_assert_ptr_nonnull(st);
        const kt_sched_stage_t *e = &st->stages[expsum];
        if (e->at_stage >= 0) {
            /* the sum is read only by the norm stage, at its row loop */
            ck_assert_int_eq(e->at_stage, stage_index(sm, "T_softmax_norm"));
            ck_assert_int_eq(e->at_depth, 1);
            at++;
        } else {
            root++;
        }
        if (st->stages[maxe].at_stage >= 0)
            ck_assert_int_eq(st->stages[maxe].at_stage, stage_index(sm, "T_softmax_exp"));
        kt_sched_state_free(st);
    }
    ck_assert_int_gt(at, 10);
    ck_assert_int_gt(root, 10);
    free_all(sk, n);
    kt_dag_free(sm);
}
END_TEST

/* Winograd's transform matrices are constant tables (stages reading no
 * tensor): sampling and mutation keep them one array at root, never inlined
 * (a select chain per use in the transforms' inner loops) nor recomputed at
 * a consumer. data_pack and inverse get simplify-compute-with-const-tensor
 * (their input never inlined into the unrolled terms), bgemm multi-level
 * tiling. */
START_TEST(sched_winograd_constant_tables_stay_at_root)
{
    kt_sched_params_t p = params16();
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *d = kt_ops_conv2d_winograd_nhwc(1, 8, 8, 16, 16, 3, 3, 2, &s1p1, NULL, 0);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(d, &p, &sk, &n), 0);
    ck_assert_int_eq(n, 3);   /* bgemm plain or with a cache write at 1 or 2 */
    const int tables[2] = {stage_index(d, "A"), stage_index(d, "B")};
    const char *const simplified[] = {"data_pack", "inverse"};
    kt_rng_t rng;
    kt_rng_seed(&rng, 5);
    for (int t = 0; t < 60; t++) {
        kt_sched_state_t *st = kt_sched_sample(d, &p, sk[t % n], &rng);
        ck_assert_ptr_nonnull(st);
        for (int k = 0; k < 4; k++) {
            kt_sched_state_t *m = NULL;
            if (kt_sched_mutate(d, &p, st, KT_MUT_COMPUTE_LOC, &rng, &m) == 1) {
                kt_sched_state_free(st);
                st = m;
            }
        }
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(st->stages[tables[k]].kind, KT_SK_ROOT);
            ck_assert_int_eq(st->stages[tables[k]].at_stage, -1);
            ck_assert_int_eq(st->stages[stage_index(d, simplified[k])].kind, KT_SK_SIMPLIFY);
        }
        ck_assert_int_eq(st->stages[stage_index(d, "bgemm")].kind, KT_SK_TILED);
        ck_assert_int_ne(st->stages[stage_index(d, "input_tile")].kind, KT_SK_INLINE);
        kt_sched_state_free(st);
    }
    free_all(sk, n);
    kt_dag_free(d);
}
END_TEST

/* simplify-compute-with-const-tensor (TVM's RuleSimplifyComputeWithConstTensor)
 * on Winograd's data_pack (eps, nu, p, ci; r_a, r_b): p and ci tiled in two
 * levels outermost, then eps, nu, r_a, r_b innermost; a sampled state
 * vectorizes ci.1 and survives JSON and tile-size mutations with exact
 * factorizations. Fails without the rule (data_pack tiled "SSRSRS"). */
START_TEST(sched_winograd_const_axes_are_innermost)
{
    kt_sched_params_t p = params16();
    kt_conv2d_params_t s1p1 = kt_test_conv_p(1, 1, 1);
    kt_dag_t *d = kt_ops_conv2d_winograd_nhwc(1, 12, 12, 24, 16, 3, 3, 4, &s1p1, NULL, 0);
    ck_assert_msg(d != NULL, "%s", kt_err_msg());
    int dp = stage_index(d, "data_pack");
    ck_assert_uint_eq(kt_dag_stage(d, dp)->const_axes, 0x33u);
    kt_sched_state_t **sk;
    int n;
    ck_assert_int_eq(kt_sched_sketches(d, &p, &sk, &n), 0);
    kt_rng_t rng;
    kt_rng_seed(&rng, 11);
    for (int t = 0; t < 20; t++) {
        kt_sched_state_t *st = kt_sched_sample(d, &p, sk[t % n], &rng);
        ck_assert_ptr_nonnull(st);
        kt_sched_state_t *m = NULL;
        if (kt_sched_mutate(d, &p, st, KT_MUT_TILE_SIZE, &rng, &m) == 1) {
            kt_sched_state_free(st);
            st = m;
        }
        const kt_sched_stage_t *e = &st->stages[dp];
        ck_assert_int_eq(e->kind, KT_SK_SIMPLIFY);
        ck_assert_int_eq(e->split[2][0] * e->split[2][1], 9);    /* p: 3 x 3 tiles */
        ck_assert_int_eq(e->split[3][0] * e->split[3][1], 24);   /* ci */
        kt_sched_nest_t nest;
        ck_assert(kt_sched_nest(d, st, dp, 0, &nest));
        ck_assert_int_eq(nest.nloops, 8);
        static const int axis[8] = {2, 3, 2, 3, 0, 1, 4, 5}, level[8] = {0, 0, 1, 1};
        for (int i = 0; i < 8; i++) {
            ck_assert_int_eq(nest.loops[i].axis, axis[i]);
            ck_assert_int_eq(nest.loops[i].level, level[i]);
            if (i >= 4)
                ck_assert_int_eq(nest.loops[i].extent, 6);
        }
        ck_assert_int_eq(e->ann.vectorize, 1);
        ck_assert_int_le(e->ann.parallel, 2);
        ck_assert_int_eq(e->ann.unroll, 0);
        char *j = kt_sched_state_to_json(st, d);
        ck_assert_ptr_nonnull(strstr(j, "\"kind\":\"simplify\""));
        kt_sched_state_t *back = kt_sched_state_from_json(j, d, &p);
        ck_assert_msg(back != NULL, "%s", kt_err_msg());
        ck_assert(kt_sched_state_equal(st, back));
        kt_sched_state_free(back);
        free(j);
        kt_sched_state_free(st);
    }
    free_all(sk, n);
    kt_dag_free(d);
}
END_TEST

START_TEST(sched_rng_is_deterministic_and_bounded)
{
    kt_rng_t a, b;
    kt_rng_seed(&a, 42);
    kt_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(kt_rng_next(&a), kt_rng_next(&b));
    kt_rng_seed(&b, 43);
    ck_assert_uint_ne(kt_rng_next(&a), kt_rng_next(&b));
    int hist[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t x = kt_rng_below(&a, 7);
        ck_assert_uint_lt(x, 7);
        hist[x]++;
        double d = kt_rng_double(&a);
        ck_assert(d >= 0.0 && d < 1.0);
    }
    for (int i = 0; i < 7; i++)
        ck_assert_int_gt(hist[i], 800);
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    ck_assert_int_ge(p.num_cores, 1);
    ck_assert(p.vector_bytes == 16 || p.vector_bytes == 32 || p.vector_bytes == 64);
    ck_assert_int_eq(p.max_innermost_split_factor, 64);
    ck_assert_int_eq(p.max_vectorize_size, 16);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sched_sketch_counts_match_ansor);
    tcase_add_test(tc, sched_sampled_splits_are_exact_factorizations);
    tcase_add_test(tc, sched_json_round_trip_keeps_state_and_hash);
    tcase_add_test(tc, sched_parse_rejects_bad_states_with_message);
    tcase_add_test(tc, sched_random_mutations_keep_validity);
    tcase_add_test(tc, sched_tile_shape_exchanges_a_prime_between_axes);
    tcase_add_test(tc, sched_reduce_in_ends_the_reduction_inside_the_register_tile);
    tcase_add_test(tc, sched_reduce_in_runs_a_long_reduction_whole);
    tcase_add_test(tc, sched_rows_out_gathers_the_rows_outermost);
    tcase_add_test(tc, sched_relocate_takes_each_placement_once);
    tcase_add_test(tc, sched_validate_survives_corrupted_states);
    tcase_add_test(tc, sched_hashes_differ_for_different_states);
    tcase_add_test(tc, sched_knobs_name_each_decision_once);
    tcase_add_test(tc, sched_tile_key_names_the_register_tile);
    tcase_add_test(tc, sched_print_shows_loop_nest_and_annotations);
    tcase_add_test(tc, sched_validate_rejects_inconsistent_states);
    tcase_add_test(tc, sched_compute_location_choices_follow_consumers);
    tcase_add_test(tc, sched_winograd_constant_tables_stay_at_root);
    tcase_add_test(tc, sched_winograd_const_axes_are_innermost);
    tcase_add_test(tc, sched_rng_is_deterministic_and_bounded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
