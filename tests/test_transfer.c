/* Suite 'transfer': schedule transfer. States re-fitted from one workload's
 * shapes to another's validate and compute what the reference computes; the
 * ones that cannot be re-fitted are dropped with a reason; the shape
 * distance; a store's records of nearby workloads seed a task's first round
 * through the search's dedup. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "net/net.h"
#include "search/search.h"
#include "store/store.h"
#include "transfer/transfer.h"
#include "util/err.h"
#include "util/util.h"

#include "kt_test_proc.h"
#include "states_harness.h"

/* States of each source workload re-fitted and checked against the reference. */
#define REFIT_STATES 6

static kt_workload_t *workload(const char *json)
{
    kt_workload_t *w = kt_workload_parse(json);
    ck_assert_msg(w != NULL, "workload %s: %s", json, kt_err_msg());
    return w;
}

static kt_sched_params_t test_params(void)
{
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    p.num_cores = 8;   /* fixed: the rfactor rule depends on it */
    return p;
}

/* The state JSON round trip a record makes: serialize against A. */
static char *to_json(const kt_dag_t *dag, const kt_sched_state_t *st)
{
    char *j = kt_sched_state_to_json(st, dag);
    ck_assert_msg(j != NULL, "%s", kt_err_msg());
    return j;
}

/* Each pair: a source workload whose sampled states are re-fitted to the
 * target workload (other shapes; the target's extents share few factors
 * with the source's, so most splits must change). */
static const struct {
    const char *what, *src, *dst;
} PAIRS[] = {
    {"conv2d", "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,\"CO\":32,\"KH\":3,"
               "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":10,\"W\":12,\"CI\":24,\"CO\":20,\"KH\":3,\"KW\":3,"
     "\"stride\":[2,2],\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}"},
    {"matmul", "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}",
     "{\"op\":\"matmul\",\"M\":48,\"N\":80,\"K\":36}"},
    {"dense", "{\"op\":\"dense\",\"M\":16,\"N\":64,\"K\":128,\"epilogue\":[\"bias_add\"]}",
     "{\"op\":\"dense\",\"M\":12,\"N\":96,\"K\":72,\"epilogue\":[\"bias_add\"]}"},
    {"depthwise", "{\"op\":\"depthwise_conv2d_nhwc\",\"N\":1,\"H\":16,\"W\":16,\"C\":32,\"KH\":3,"
                  "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu6\"]}",
     "{\"op\":\"depthwise_conv2d_nhwc\",\"N\":1,\"H\":9,\"W\":15,\"C\":24,\"KH\":3,\"KW\":3,"
     "\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu6\"]}"},
    {"batch_matmul", "{\"op\":\"batch_matmul\",\"B\":4,\"M\":32,\"N\":32,\"K\":32}",
     "{\"op\":\"batch_matmul\",\"B\":6,\"M\":20,\"N\":28,\"K\":18}"},
    /* an epilogue reading no tensor stands for another (a ResNet's relu
     * for a MobileNet's relu6) */
    {"conv2d relu to clip",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,\"CO\":32,\"KH\":3,"
     "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu\"]}",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":10,\"W\":12,\"CI\":24,\"CO\":20,\"KH\":3,\"KW\":3,"
     "\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"relu6\"]}"},
    {"dense sigmoid to gelu",
     "{\"op\":\"dense\",\"M\":16,\"N\":64,\"K\":128,\"epilogue\":[\"bias_add\",\"sigmoid\"]}",
     "{\"op\":\"dense\",\"M\":12,\"N\":96,\"K\":72,\"epilogue\":[\"bias_add\",\"gelu\"]}"},
};

/* ---- re-fit ------------------------------------------------------------------ */

START_TEST(transfer_refit_states_validate_and_match_the_reference)
{
    int i = _i;
    kt_sched_params_t p = test_params();
    kt_workload_t *a = workload(PAIRS[i].src), *b = workload(PAIRS[i].dst);
    const kt_dag_t *da = kt_workload_dag(a), *db = kt_workload_dag(b);
    kt_sched_state_t *src[REFIT_STATES], *out[REFIT_STATES];
    int n = kt_test_collect_states(da, &p, 1000 + (uint64_t)i, src, REFIT_STATES);
    ck_assert_int_eq(n, REFIT_STATES);
    int changed = 0;
    for (int k = 0; k < n; k++) {
        char *j = to_json(da, src[k]);
        out[k] = kt_transfer_refit(a, j, db, &p);
        ck_assert_msg(out[k] != NULL, "%s: state %d: %s\n%s", PAIRS[i].what, k, kt_err_msg(), j);
        ck_assert_msg(kt_sched_state_validate(db, &p, out[k]) == 0, "%s: %s", PAIRS[i].what,
                      kt_err_msg());
        /* the same structure, stage by stage */
        for (int s = 0; s < out[k]->nstages; s++) {
            ck_assert_int_eq(out[k]->stages[s].fuse, src[k]->stages[s].fuse);
            ck_assert_int_eq(out[k]->stages[s].cache_write, src[k]->stages[s].cache_write);
            ck_assert_int_eq(out[k]->stages[s].level, src[k]->stages[s].level);
            ck_assert_int_eq(out[k]->stages[s].ann.unroll, src[k]->stages[s].ann.unroll);
        }
        changed += memcmp(out[k]->stages, src[k]->stages,
                          (size_t)out[k]->nstages * sizeof out[k]->stages[0]) != 0;
        free(j);
    }
    ck_assert_int_eq(changed, n);   /* other extents: every state's splits changed */
    kt_test_check_states(PAIRS[i].what, db, out, n, 7 + (uint64_t)i, "tr",
                         kt_codegen_emit_c_variants_into, NULL);
    for (int k = 0; k < n; k++) {
        kt_sched_state_free(src[k]);
        kt_sched_state_free(out[k]);
    }
    kt_workload_free(a);
    kt_workload_free(b);
}
END_TEST

START_TEST(transfer_refit_to_the_same_shapes_gives_the_state_back)
{
    kt_sched_params_t p = test_params();
    for (size_t i = 0; i < KT_ARRAY_LEN(PAIRS); i++) {
        kt_workload_t *a = workload(PAIRS[i].src);
        const kt_dag_t *da = kt_workload_dag(a);
        kt_sched_state_t *src[4];
        int n = kt_test_collect_states(da, &p, 77 + i, src, 4);
        for (int k = 0; k < n; k++) {
            kt_sched_state_t *same = kt_sched_refit(da, src[k], da, &p);
            ck_assert_msg(same != NULL, "%s: %s", PAIRS[i].what, kt_err_msg());
            ck_assert_msg(kt_sched_state_equal(same, src[k]), "%s: state %d changed",
                          PAIRS[i].what, k);
            kt_sched_state_free(same);
            kt_sched_state_free(src[k]);
        }
        kt_workload_free(a);
    }
}
END_TEST

/* Pairs whose epilogue lists differ by one trailing unary epilogue: a
 * ResNet's residual conv + add + relu from a MobileNet's conv + add, and the
 * other way, a 1x1 conv + relu6 from a plain projection, a dense without its
 * gelu. */
static const struct {
    const char *what, *src, *dst;
} TAIL_PAIRS[] = {
    {"conv2d + add to + add + relu",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,\"CO\":32,\"KH\":3,"
     "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"add\"]}",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":10,\"W\":12,\"CI\":24,\"CO\":20,\"KH\":3,\"KW\":3,"
     "\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"add\",\"relu\"]}"},
    {"conv2d 1x1 to + relu6",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":32,\"CO\":16,\"KH\":1,"
     "\"KW\":1,\"epilogue\":[\"bias_add\"]}",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":12,\"W\":12,\"CI\":24,\"CO\":40,\"KH\":1,\"KW\":1,"
     "\"epilogue\":[\"bias_add\",\"relu6\"]}"},
    {"dense + gelu to bias only",
     "{\"op\":\"dense\",\"M\":16,\"N\":64,\"K\":128,\"epilogue\":[\"bias_add\",\"gelu\"]}",
     "{\"op\":\"dense\",\"M\":12,\"N\":96,\"K\":72,\"epilogue\":[\"bias_add\"]}"},
    {"conv2d + add + relu to + add",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":10,\"W\":12,\"CI\":24,\"CO\":20,\"KH\":3,\"KW\":3,"
     "\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"add\",\"relu\"]}",
     "{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,\"CO\":32,\"KH\":3,"
     "\"KW\":3,\"padding\":[1,1],\"epilogue\":[\"bias_add\",\"add\"]}"},
};

START_TEST(transfer_refit_across_one_trailing_unary_epilogue)
{
    int i = _i;
    kt_sched_params_t p = test_params();
    kt_workload_t *a = workload(TAIL_PAIRS[i].src), *b = workload(TAIL_PAIRS[i].dst);
    const kt_dag_t *da = kt_workload_dag(a), *db = kt_workload_dag(b);
    int na = kt_dag_num_stages(da), nb = kt_dag_num_stages(db);
    ck_assert_int_eq(abs(na - nb), 1);
    kt_sched_state_t *src[REFIT_STATES], *out[REFIT_STATES];
    int n = kt_test_collect_states(da, &p, 2000 + (uint64_t)i, src, REFIT_STATES);
    ck_assert_int_eq(n, REFIT_STATES);
    for (int k = 0; k < n; k++) {
        char *j = to_json(da, src[k]);
        out[k] = kt_transfer_refit(a, j, db, &p);
        ck_assert_msg(out[k] != NULL, "%s: state %d: %s\n%s", TAIL_PAIRS[i].what, k,
                      kt_err_msg(), j);
        /* the output takes the old output's schedule; the stages before
         * its producer keep theirs (the tiled stage's consumer is the new
         * output) */
        ck_assert_int_eq(out[k]->stages[nb - 1].kind, src[k]->stages[na - 1].kind);
        ck_assert_int_eq(out[k]->stages[nb - 1].ann.parallel, src[k]->stages[na - 1].ann.parallel);
        for (int s = 0; s < (na < nb ? na : nb) - 1; s++) {
            ck_assert_int_eq(out[k]->stages[s].kind, src[k]->stages[s].kind);
            ck_assert_int_eq(out[k]->stages[s].fuse < 0, src[k]->stages[s].fuse < 0);
        }
        if (nb > na)
            ck_assert_int_eq(out[k]->stages[nb - 2].kind, KT_SK_INLINE);
        free(j);
    }
    kt_test_check_states(TAIL_PAIRS[i].what, db, out, n, 17 + (uint64_t)i, "tt",
                         kt_codegen_emit_c_variants_into, NULL);
    /* the same number of stages is no tail to change */
    ck_assert_ptr_null(kt_sched_retail(da, src[0], da, &p));
    ck_assert_msg(strstr(kt_err_msg(), "one trailing elementwise stage more or less") != NULL,
                  "%s", kt_err_msg());
    for (int k = 0; k < n; k++) {
        kt_sched_state_free(src[k]);
        kt_sched_state_free(out[k]);
    }
    kt_workload_free(a);
    kt_workload_free(b);
}
END_TEST

/* A matmul state tiled with splits I, J, K and its cache write at level
 * 2: i.0@j.0 of the copy-out parallel, j.3 vectorized, unroll 64. */
#define MATMUL_STATE(I, J, K)                                                                  \
    "{\"stages\":[{\"kind\":\"input\",\"name\":\"A\"},{\"kind\":\"input\",\"name\":\"B\"},"    \
    "{\"ann\":[0,1,64],\"ann2\":[2,1,0],\"cache_write\":true,\"kind\":\"tiled\",\"level\":2,"   \
    "\"name\":\"C\",\"tile\":[" I "," J "," K "]}],\"version\":1}"

START_TEST(transfer_refit_takes_the_nearest_factors_and_keeps_the_register_tile)
{
    kt_sched_params_t p = test_params();
    kt_workload_t *a = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    /* M twice as long: the outermost level takes the 2 (every level's
     * doubling is as near, the register tile stays); N 3/4 as long: a 3 in
     * place of a 4 is nearest, at level 2 (level 3's 8 stays); K a prime:
     * all of it outermost, since innermost it would exceed the bound of 64. */
    kt_workload_t *b = workload("{\"op\":\"matmul\",\"M\":128,\"N\":48,\"K\":67}");
    const kt_dag_t *db = kt_workload_dag(b);
    const char *json = MATMUL_STATE("[2,4,2,4]", "[1,2,4,8]", "[8,8]");
    kt_sched_state_t *st = kt_transfer_refit(a, json, db, &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    const int32_t(*f)[KT_SCHED_MAX_LEVELS] = st->stages[2].split;
    int32_t want[3][4] = {{4, 4, 2, 4}, {1, 2, 3, 8}, {67, 1, 0, 0}};
    for (int ax = 0; ax < 3; ax++)
        for (int l = 0; l < (ax < 2 ? 4 : 2); l++)
            ck_assert_msg(f[ax][l] == want[ax][l], "axis %d level %d: %d, want %d", ax, l,
                          f[ax][l], want[ax][l]);
    ck_assert_int_eq(st->stages[2].ann2.parallel, 2);
    ck_assert_int_eq(st->stages[2].ann.vectorize, 1);
    ck_assert_int_eq(st->stages[2].ann.unroll, 64);
    kt_sched_state_free(st);

    /* A direct tile (reduction whole in the register tile) stays direct. */
    kt_workload_t *c = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":96}");
    st = kt_transfer_refit(a, MATMUL_STATE("[2,4,2,4]", "[1,2,4,8]", "[1,64]"),
                           kt_workload_dag(c), &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    ck_assert_int_eq(st->stages[2].split[2][0], 1);
    ck_assert_int_eq(st->stages[2].split[2][1], 96);
    kt_sched_state_free(st);
    kt_workload_free(a);
    kt_workload_free(b);
    kt_workload_free(c);
}
END_TEST

START_TEST(transfer_refit_drops_what_cannot_be_refitted_with_a_reason)
{
    kt_sched_params_t p = test_params();
    kt_workload_t *mm = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    const char *json = MATMUL_STATE("[2,4,2,4]", "[1,2,4,8]", "[8,8]");

    /* another operator */
    kt_workload_t *dense = workload("{\"op\":\"dense\",\"M\":64,\"N\":64,\"K\":64}");
    ck_assert_ptr_null(kt_transfer_refit(mm, json, kt_workload_dag(dense), &p));
    ck_assert_msg(strstr(kt_err_msg(), "re-fit: stage") != NULL, "%s", kt_err_msg());

    /* another epilogue: another number of stages */
    kt_workload_t *relu =
        workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64,\"epilogue\":[\"relu\"]}");
    ck_assert_ptr_null(kt_transfer_refit(mm, json, kt_workload_dag(relu), &p));
    ck_assert_msg(strstr(kt_err_msg(), "no epilogue whose output stage") != NULL, "%s",
                  kt_err_msg());
    kt_workload_t *relu2 = workload(
        "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64,\"epilogue\":[\"relu\",\"relu\"]}");
    ck_assert_ptr_null(kt_transfer_refit(mm, json, kt_workload_dag(relu2), &p));
    ck_assert_msg(strstr(kt_err_msg(), "the state's workload has 3 stages, the task 5") != NULL,
                  "%s", kt_err_msg());
    kt_workload_free(relu2);

    /* the same operator where the task has no sketch of the state's: a
     * single row and column leave no data reuse, so nothing is tiled */
    kt_workload_t *vec = workload("{\"op\":\"matmul\",\"M\":1,\"N\":1,\"K\":4096}");
    ck_assert_ptr_null(kt_transfer_refit(mm, json, kt_workload_dag(vec), &p));
    ck_assert_msg(strstr(kt_err_msg(), "no sketch of the task has the state's structure") != NULL,
                  "%s", kt_err_msg());
    ck_assert_msg(strstr(kt_err_msg(), "'C' is tiled (cache write at level 2)") != NULL, "%s",
                  kt_err_msg());

    /* a state that does not parse against its own workload */
    ck_assert_ptr_null(kt_transfer_refit(dense, json, kt_workload_dag(mm), &p));
    ck_assert_msg(strstr(kt_err_msg(), "does not parse against its own workload") != NULL, "%s",
                  kt_err_msg());

    /* a CPU state for a GPU task */
    kt_sched_params_t gp;
    kt_sched_params_default_gpu(&gp);
    kt_workload_t *mm2 = workload("{\"op\":\"matmul\",\"M\":128,\"N\":64,\"K\":64}");
    kt_sched_state_t *cpu = kt_sched_state_from_json(json, kt_workload_dag(mm), &p);
    ck_assert_ptr_nonnull(cpu);
    ck_assert_ptr_null(kt_sched_refit(kt_workload_dag(mm), cpu, kt_workload_dag(mm2), &gp));
    ck_assert_msg(strstr(kt_err_msg(), "a cpu state cannot be re-fitted for a cuda task") != NULL,
                  "%s", kt_err_msg());
    kt_sched_state_free(cpu);
    kt_workload_free(mm);
    kt_workload_free(mm2);
    kt_workload_free(dense);
    kt_workload_free(relu);
    kt_workload_free(vec);
}
END_TEST

START_TEST(transfer_refit_gpu_states_within_the_limits)
{
    kt_sched_params_t gp;
    kt_sched_params_default_gpu(&gp);
    kt_workload_t *a = workload("{\"op\":\"matmul\",\"M\":256,\"N\":256,\"K\":256,"
                                "\"epilogue\":[\"relu\"]}");
    kt_workload_t *b = workload("{\"op\":\"matmul\",\"M\":192,\"N\":320,\"K\":144,"
                                "\"epilogue\":[\"relu\"]}");
    const kt_dag_t *da = kt_workload_dag(a), *db = kt_workload_dag(b);
    kt_sched_state_t *src[16], *out[16];
    int n = kt_test_collect_states(da, &gp, 5, src, 16), got = 0;
    for (int k = 0; k < n; k++) {
        char *j = to_json(da, src[k]);
        kt_sched_state_t *st = kt_transfer_refit(a, j, db, &gp);
        /* a GPU state may leave the limits (threads, shared memory) on the
         * new shapes: then it is dropped, saying which */
        if (st) {
            ck_assert_int_eq(st->target, KT_SCHED_TARGET_CUDA);
            ck_assert_msg(kt_sched_state_validate(db, &gp, st) == 0, "%s", kt_err_msg());
            out[got++] = st;
        } else {
            ck_assert_msg(strstr(kt_err_msg(), "re-fit") != NULL, "%s", kt_err_msg());
        }
        free(j);
        kt_sched_state_free(src[k]);
    }
    ck_assert_int_ge(got, n / 2);
    kt_test_check_cuda_cpu_states("gpu matmul", db, out, got < 4 ? got : 4, 3, "gtr");
    for (int k = 0; k < got; k++)
        kt_sched_state_free(out[k]);
    kt_workload_free(a);
    kt_workload_free(b);
}
END_TEST

/* ---- shape distance ---------------------------------------------------------- */

START_TEST(transfer_distance_sums_log_ratios_of_the_named_dimensions)
{
    const char *mm = "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}";
    ck_assert(kt_transfer_distance_json(mm, mm) == 0);
    ck_assert_double_eq_tol(
        kt_transfer_distance_json(mm, "{\"op\":\"matmul\",\"M\":128,\"N\":32,\"K\":64}"),
        2 * log(2.0), 1e-12);
    ck_assert(isinf(kt_transfer_distance_json(mm, "{\"op\":\"dense\",\"M\":64,\"N\":64,\"K\":64}")));
    ck_assert(isinf(kt_transfer_distance_json(
        mm, "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64,\"layout\":\"NT\"}")));
    ck_assert(isinf(kt_transfer_distance_json(mm, "not json")));

    /* canonical workloads: epilogue kinds count, a clip's bounds do not */
    kt_workload_t *c1 = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,"
                                 "\"CO\":32,\"KH\":3,\"KW\":3,\"padding\":[1,1],"
                                 "\"epilogue\":[{\"op\":\"clip\",\"min\":0,\"max\":6}]}");
    kt_workload_t *c2 = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":28,\"W\":14,\"CI\":16,"
                                 "\"CO\":32,\"KH\":3,\"KW\":3,\"padding\":[1,1],\"stride\":[2,2],"
                                 "\"epilogue\":[{\"op\":\"clip\",\"min\":-1,\"max\":1}]}");
    kt_workload_t *c3 = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,"
                                 "\"CO\":32,\"KH\":3,\"KW\":3,"
                                 "\"epilogue\":[{\"op\":\"clip\",\"min\":0,\"max\":6}]}");
    kt_workload_t *c4 = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,"
                                 "\"CO\":32,\"KH\":3,\"KW\":3,\"padding\":[1,1],"
                                 "\"epilogue\":[\"relu\"]}");
    kt_workload_t *c5 = workload("{\"op\":\"conv2d_nhwc\",\"N\":1,\"H\":14,\"W\":14,\"CI\":16,"
                                 "\"CO\":32,\"KH\":3,\"KW\":3,\"padding\":[2,2],"
                                 "\"epilogue\":[\"relu6\"]}");
    /* H twice, both strides twice */
    ck_assert_double_eq_tol(kt_transfer_distance(c1, c2), 3 * log(2.0), 1e-12);
    ck_assert_double_eq_tol(kt_transfer_distance(c2, c1), 3 * log(2.0), 1e-12);
    ck_assert(isinf(kt_transfer_distance(c1, c3)));   /* a padding stage or none */
    /* clip against relu: one inlined stage each, at a cost */
    ck_assert_double_eq_tol(kt_transfer_distance(c1, c4), KT_TRANSFER_EPILOGUE_DISTANCE, 1e-12);
    /* a residual add reads a tensor: no stand-in for a relu */
    ck_assert(isinf(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\"]}",
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"add\"]}")));
    /* one trailing unary epilogue more or less re-fits (kt_sched_retail), at a
     * cost; not from no epilogue at all, nor two more, nor a tensor read */
    ck_assert_double_eq_tol(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\"]}",
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\",\"relu\"]}"),
        KT_TRANSFER_EPILOGUE_DISTANCE, 1e-12);
    ck_assert_double_eq_tol(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"bias_add\",\"add\",\"relu\"]}",
        "{\"op\":\"dense\",\"M\":8,\"N\":8,\"K\":8,\"epilogue\":[\"bias_add\",\"add\"]}"),
        KT_TRANSFER_EPILOGUE_DISTANCE + log(2.0), 1e-12);
    ck_assert(isinf(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8}",
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\"]}")));
    ck_assert(isinf(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\"]}",
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\",\"relu\",\"relu\"]}")));
    ck_assert(isinf(kt_transfer_distance_json(
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\"]}",
        "{\"op\":\"dense\",\"M\":4,\"N\":8,\"K\":8,\"epilogue\":[\"relu\",\"add\"]}")));
    /* relu6 is a clip; padding 2 against 1 on four sides: 4 ln(3/2) */
    ck_assert_double_eq_tol(kt_transfer_distance(c1, c5), 4 * log(1.5), 1e-12);
    kt_workload_free(c1);
    kt_workload_free(c2);
    kt_workload_free(c3);
    kt_workload_free(c4);
    kt_workload_free(c5);
}
END_TEST

/* ---- from the store ---------------------------------------------------------- */

static void put_workload(kt_store_t *s, const kt_workload_t *w)
{
    ck_assert_int_eq(kt_store_put_workload(s, kt_workload_key(w), kt_workload_json(w),
                                           kt_workload_flops(w)), 0);
}

/* n sampled states of w stored as valid records with costs 1, 2, ... ms
 * (state i has cost i + 1), runner key `key`; their JSON into json[]
 * (caller frees) when not NULL. */
static void put_sampled(kt_store_t *s, const kt_workload_t *w, const kt_sched_params_t *p,
                        uint64_t seed, int n, const char *key, char **json)
{
    const kt_dag_t *dag = kt_workload_dag(w);
    kt_sched_state_t *st[KT_TEST_MAX_STATES];
    ck_assert_int_eq(kt_test_collect_states(dag, p, seed, st, n), n);
    kt_record_t *recs = calloc((size_t)n, sizeof *recs);
    double *cost = calloc((size_t)n, sizeof *cost);
    char **js = calloc((size_t)n, sizeof *js);
    for (int i = 0; i < n; i++) {
        js[i] = to_json(dag, st[i]);
        cost[i] = 1e-3 * (i + 1);
        recs[i] = (kt_record_t){.workload_key = kt_workload_key(w), .target = "cpu",
                                .state_json = js[i], .state_hash = kt_sched_state_hash(st[i], dag),
                                .costs = &cost[i], .ncosts = 1, .timestamp = 1.0 + i,
                                .runner_key = key};
    }
    ck_assert_int_eq(kt_store_put_records(s, recs, (size_t)n), 0);
    for (int i = 0; i < n; i++) {
        kt_sched_state_free(st[i]);
        if (json)
            json[i] = js[i];
        else
            free(js[i]);
    }
    free(js);
    free(recs);
    free(cost);
}

START_TEST(transfer_nearest_workloads_of_the_same_kind_on_the_same_key)
{
    kt_sched_params_t p = test_params();
    kt_store_t *s = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_workload_t *task = workload("{\"op\":\"matmul\",\"M\":64,\"N\":96,\"K\":64}");
    kt_workload_t *near = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    kt_workload_t *far = workload("{\"op\":\"matmul\",\"M\":512,\"N\":512,\"K\":512}");
    kt_workload_t *other = workload("{\"op\":\"dense\",\"M\":64,\"N\":96,\"K\":64}");
    kt_workload_t *elsewhere = workload("{\"op\":\"matmul\",\"M\":64,\"N\":128,\"K\":64}");
    kt_workload_t *all[] = {task, near, far, other, elsewhere};
    for (size_t i = 0; i < KT_ARRAY_LEN(all); i++)
        put_workload(s, all[i]);
    put_sampled(s, task, &p, 1, 2, "cpu", NULL);   /* the task's own: never a neighbour */
    put_sampled(s, near, &p, 2, 2, "cpu", NULL);
    put_sampled(s, far, &p, 3, 2, "cpu", NULL);
    put_sampled(s, other, &p, 4, 2, "cpu", NULL);
    put_sampled(s, elsewhere, &p, 5, 2, "cpu-b", NULL);   /* another device key */

    kt_transfer_neighbor_t *nb = NULL;
    int n = -1;
    ck_assert_int_eq(kt_transfer_nearest(s, task, "cpu", "cpu", 8, &nb, &n), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(nb[0].key, kt_workload_key(near));
    ck_assert_double_eq_tol(nb[0].distance, log(1.5), 1e-12);
    ck_assert_str_eq(nb[1].key, kt_workload_key(far));
    ck_assert_double_eq_tol(nb[1].distance, log(8.0) + log(512.0 / 96) + log(8.0), 1e-12);
    kt_transfer_neighbors_free(nb, n);
    ck_assert_int_eq(kt_transfer_nearest(s, task, "cpu", "cpu", 1, &nb, &n), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(nb[0].key, kt_workload_key(near));
    kt_transfer_neighbors_free(nb, n);
    /* any key: the other key's workload is nearer still (N 128 against 96) */
    ck_assert_int_eq(kt_transfer_nearest(s, task, "cpu", NULL, 8, &nb, &n), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(nb[0].key, kt_workload_key(elsewhere));
    kt_transfer_neighbors_free(nb, n);
    ck_assert_int_eq(kt_transfer_nearest(s, task, "cuda", NULL, 8, &nb, &n), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(nb);
    for (size_t i = 0; i < KT_ARRAY_LEN(all); i++)
        kt_workload_free(all[i]);
    kt_store_close(s);
}
END_TEST

/* A task policy asking the store whether a state was measured, as the
 * tracker's jobs do. */
typedef struct {
    kt_store_t *s;
    const kt_workload_t *w;
} store_ctx_t;

static int store_has(void *user, uint64_t h)
{
    store_ctx_t *c = user;
    return kt_store_has_measured(c->s, kt_workload_key(c->w), "cpu", h) == 1;
}

static kt_search_policy_t *small_policy(const kt_workload_t *w, const kt_sched_params_t *p,
                                        store_ctx_t *ctx)
{
    kt_search_opts_t o;
    kt_search_opts_default(&o);
    o.evolutionary_search_population = 64;
    o.evolutionary_search_num_iters = 1;
    o.sample_init_min_population = 16;
    o.retry_search_one_round_on_empty = 1;
    kt_search_policy_t *sp = kt_search_policy_new(w, p, &o, NULL, 0);
    ck_assert_msg(sp != NULL, "%s", kt_err_msg());
    kt_search_set_has_measured(sp, store_has, ctx);
    return sp;
}

static int count_in(kt_sched_state_t **st, int n, const kt_dag_t *dag, uint64_t h)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += kt_sched_state_hash(st[i], dag) == h;
    return c;
}

START_TEST(transfer_first_round_holds_refitted_states_measured_once)
{
    kt_sched_params_t p = test_params();
    p.num_cores = 1;
    kt_store_t *s = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_workload_t *a = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    kt_workload_t *b = workload("{\"op\":\"matmul\",\"M\":96,\"N\":64,\"K\":48}");
    const kt_dag_t *db = kt_workload_dag(b);
    put_workload(s, a);
    put_workload(s, b);
    put_sampled(s, a, &p, 21, 12, "cpu", NULL);

    /* the set: A's 6 best records, re-fitted, best first */
    kt_transfer_set_t set;
    ck_assert_int_eq(kt_transfer_gather(s, b, "cpu", "cpu", &p, 6, 4, &set), 0);
    ck_assert_int_eq(set.nworkloads, 1);
    ck_assert_int_eq(set.nrecords, 6);
    ck_assert_int_eq(set.dropped, 0);
    ck_assert_int_ge(set.n, 5);   /* two records may re-fit to one state */
    for (int i = 0; i < set.n; i++) {
        ck_assert_str_eq(set.items[i].source_key, kt_workload_key(a));
        ck_assert(set.items[i].source_cost <= 6e-3 + 1e-12);
        ck_assert_int_eq(kt_sched_state_validate(db, &p, set.items[i].state), 0);
        if (i > 0)
            ck_assert_int_ge(set.items[i].rank, set.items[i - 1].rank);
    }
    ck_assert(set.items[0].source_cost == 1e-3);

    /* One of them is stored for B already (measured by an earlier job). */
    char *stored = to_json(db, set.items[1].state);
    double one = 1e-3;
    kt_record_t rec = {.workload_key = kt_workload_key(b), .target = "cpu", .state_json = stored,
                       .state_hash = set.items[1].hash, .costs = &one, .ncosts = 1,
                       .timestamp = 100, .runner_key = "cpu"};
    ck_assert_int_eq(kt_store_put_records(s, &rec, 1), 0);

    /* transfer on: the first round of 16 holds every other re-fitted state,
     * once, and not the stored one */
    store_ctx_t ctx = {s, b};
    kt_search_policy_t *sp = small_policy(b, &p, &ctx);
    kt_transfer_set_t info;
    int seeded = kt_transfer_seed(sp, s, b, "cpu", "cpu", 6, 4, &info);
    ck_assert_int_eq(seeded, set.n);
    ck_assert_int_eq(info.n, set.n);
    kt_sched_state_t **r1 = NULL;
    int n1 = kt_search_propose(sp, 16, &r1);
    ck_assert_int_eq(n1, 16);
    for (int i = 0; i < set.n; i++)
        ck_assert_int_eq(count_in(r1, n1, db, set.items[i].hash), i == 1 ? 0 : 1);
    kt_search_stats_t stt;
    kt_search_stats(sp, &stt);
    ck_assert_int_eq(stt.last_picked_seeds, set.n - 1);
    ck_assert_uint_eq(stt.seeded, (uint64_t)set.n);
    /* measured, they are never proposed again, even if seeded again */
    double *costs = calloc((size_t)n1, sizeof *costs);
    for (int i = 0; i < n1; i++)
        costs[i] = 1e-3 * (i + 1);
    ck_assert_int_eq(kt_search_feedback(sp, r1, costs, n1), 0);
    ck_assert_int_eq(kt_transfer_seed(sp, s, b, "cpu", "cpu", 6, 4, NULL), set.n);
    kt_sched_state_t **r2 = NULL;
    int n2 = kt_search_propose(sp, 16, &r2);
    ck_assert_int_gt(n2, 0);
    for (int i = 0; i < set.n; i++)
        ck_assert_int_eq(count_in(r2, n2, db, set.items[i].hash), 0);
    kt_search_stats(sp, &stt);
    ck_assert_int_eq(stt.last_picked_seeds, 0);
    for (int i = 0; i < n1; i++)
        kt_sched_state_free(r1[i]);
    for (int i = 0; i < n2; i++)
        kt_sched_state_free(r2[i]);
    free(r1);
    free(r2);
    free(costs);
    kt_search_policy_free(sp);

    /* transfer off (count 0): nothing seeded, a first round of the task's
     * own samples */
    sp = small_policy(b, &p, &ctx);
    ck_assert_int_eq(kt_transfer_seed(sp, s, b, "cpu", "cpu", 0, 4, NULL), 0);
    n1 = kt_search_propose(sp, 16, &r1);
    ck_assert_int_eq(n1, 16);
    int found = 0;
    for (int i = 0; i < set.n; i++)
        found += count_in(r1, n1, db, set.items[i].hash);
    ck_assert_int_eq(found, 0);
    kt_search_stats(sp, &stt);
    ck_assert_uint_eq(stt.seeded, 0);
    for (int i = 0; i < n1; i++)
        kt_sched_state_free(r1[i]);
    free(r1);
    kt_search_policy_free(sp);

    /* a store of another device key's records seeds nothing */
    sp = small_policy(b, &p, &ctx);
    ck_assert_int_eq(kt_transfer_seed(sp, s, b, "cpu", "cpu-b", 6, 4, NULL), 0);
    kt_search_policy_free(sp);

    kt_transfer_set_clear(&info);
    kt_transfer_set_clear(&set);
    free(stored);
    kt_workload_free(a);
    kt_workload_free(b);
    kt_store_close(s);
}
END_TEST

START_TEST(transfer_gather_counts_records_it_cannot_refit)
{
    kt_sched_params_t p = test_params();
    kt_store_t *s = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_workload_t *a = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    kt_workload_t *b = workload("{\"op\":\"matmul\",\"M\":1,\"N\":1,\"K\":64}");
    put_workload(s, a);
    put_sampled(s, a, &p, 31, 4, "cpu", NULL);
    kt_transfer_set_t set;
    ck_assert_int_eq(kt_transfer_gather(s, b, "cpu", "cpu", &p, 8, 4, &set), 0);
    ck_assert_int_eq(set.nworkloads, 1);
    ck_assert_int_eq(set.nrecords, 4);
    /* B's single output element has no data reuse: no state of A's tiled
     * sketches fits (a plain sketch of A might) */
    ck_assert_int_gt(set.dropped, 0);
    ck_assert_int_eq(set.n + set.dropped, 4);
    ck_assert_int_ge(set.nreasons, 1);
    ck_assert_msg(strstr(set.reasons[0], "no sketch of the task") != NULL, "%s", set.reasons[0]);
    kt_transfer_set_clear(&set);
    kt_workload_free(a);
    kt_workload_free(b);
    kt_store_close(s);
}
END_TEST

/* ktune build --transfer (through ktune run --check): a network's layers
 * with no record of their own run a kernel re-fitted from the records of
 * another of its layers (same operator and epilogue, other shapes), checked
 * against the reference before it is used; the network's output matches
 * the reference kernels'; the build says where each task's kernel came
 * from and the library's comments too. */
/* Where nothing re-fits, a zero-shot build takes the store model's pick: a
 * store of matmul records only gives a depthwise task a checked kernel
 * chosen by the model, not the naive one; fewer records than a model needs
 * leave it naive, saying why. */
START_TEST(transfer_fill_takes_the_store_models_pick_where_nothing_refits)
{
    kt_sched_params_t p = test_params();
    kt_store_t *s = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_workload_t *mm = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    kt_workload_t *dw = workload("{\"op\":\"depthwise_conv2d_nhwc\",\"N\":1,\"H\":12,\"W\":12,"
                                 "\"C\":16,\"KH\":3,\"KW\":3,\"padding\":[1,1],"
                                 "\"epilogue\":[\"bias_add\",\"relu6\"]}");
    const kt_workload_t *tasks[] = {dw};
    put_workload(s, mm);
    put_sampled(s, mm, &p, 11, KT_SEARCH_STORE_MODEL_MIN / 2, "cpu", NULL);
    char *states[1] = {NULL}, *origin[1] = {NULL};
    double ms[1] = {0};
    ck_assert_int_eq(kt_transfer_fill(s, tasks, NULL, 1, "cpu", NULL, &p, 4, states, origin, ms),
                     0);
    ck_assert_ptr_null(states[0]);
    ck_assert_msg(origin[0] && strstr(origin[0], "nothing stored to re-fit") &&
                      strstr(origin[0], "no store model"),
                  "%s", origin[0]);
    free(origin[0]);
    origin[0] = NULL;

    put_sampled(s, mm, &p, 12, KT_SEARCH_STORE_MODEL_MIN, "cpu", NULL);
    ck_assert_int_eq(kt_transfer_fill(s, tasks, NULL, 1, "cpu", NULL, &p, 4, states, origin, ms),
                     1);
    ck_assert_ptr_nonnull(states[0]);
    ck_assert_msg(origin[0] && strstr(origin[0], "chosen by the store model of key cpu") &&
                      strstr(origin[0], "the fastest of 4 candidates timed here") &&
                      strstr(origin[0], "checked against the reference"),
                  "%s", origin[0]);
    ck_assert_msg(ms[0] > 0, "%g", ms[0]);
    /* the pick is a valid state of the task, and the model was kept */
    kt_sched_state_t *st = kt_sched_state_from_json(states[0], kt_workload_dag(dw), &p);
    ck_assert_msg(st != NULL, "%s", kt_err_msg());
    kt_sched_state_t *one[] = {st};
    kt_test_check_states("model pick", kt_workload_dag(dw), one, 1, 5, "mp",
                         kt_codegen_emit_c_variants_into, NULL);
    kt_sched_state_free(st);
    kt_store_cost_model_t *row = NULL;
    ck_assert_int_eq(kt_store_get_cost_model(s, "cpu", "cpu", &row), 0);
    ck_assert_int_ge(row->records, KT_SEARCH_STORE_MODEL_MIN);
    kt_store_cost_model_free(row);
    /* the stored model is loaded the next time: the same candidates, timed again */
    char *again[1] = {NULL}, *origin2[1] = {NULL};
    ck_assert_int_eq(kt_transfer_fill(s, tasks, NULL, 1, "cpu", NULL, &p, 4, again, origin2, NULL),
                     1);
    ck_assert_msg(origin2[0] && strstr(origin2[0], "chosen by the store model of key cpu"), "%s",
                  origin2[0]);
    free(again[0]);
    free(origin2[0]);
    free(states[0]);
    free(origin[0]);

    /* a model that is not trained is refused */
    kt_sched_state_t **none = NULL;
    ck_assert_int_eq(kt_transfer_model_rank(dw, NULL, &p, 1, 4, &none), KT_EINVAL);
    ck_assert_ptr_null(none);
    kt_workload_free(mm);
    kt_workload_free(dw);
    kt_store_close(s);
}
END_TEST

/* A zero-shot build where the store model has loaded for one task and a
 * later task re-fits: XGBoost's OpenMP pool is in this process then (a
 * stored model's load starts it), so
 * that check must not fork from here (a parallel kernel forked after it
 * hangs); with two threads the build finishes, the depthwise task on the
 * model's pick and the matmul on the fastest of its re-fitted states and
 * the model's picks, all checked and timed. */
START_TEST(transfer_fill_checks_after_the_store_model_loads_without_hanging)
{
    setenv("OMP_NUM_THREADS", "2", 1);
    kt_sched_params_t p = test_params();
    kt_store_t *s = kt_store_open(":memory:", KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    kt_workload_t *mm = workload("{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}");
    kt_workload_t *mm2 = workload("{\"op\":\"matmul\",\"M\":48,\"N\":64,\"K\":64}");
    kt_workload_t *dw = workload("{\"op\":\"depthwise_conv2d_nhwc\",\"N\":1,\"H\":12,\"W\":12,"
                                 "\"C\":16,\"KH\":3,\"KW\":3,\"padding\":[1,1],"
                                 "\"epilogue\":[\"bias_add\",\"relu6\"]}");
    put_workload(s, mm);
    put_sampled(s, mm, &p, 12, KT_SEARCH_STORE_MODEL_MIN, "cpu", NULL);
    /* the first build trains and stores the model; the second loads it,
     * which is what starts XGBoost's pool of threads */
    const kt_workload_t *tasks[] = {dw, mm2};
    char *states[2] = {NULL, NULL}, *origin[2] = {NULL, NULL};
    ck_assert_int_eq(kt_transfer_fill(s, tasks, NULL, 1, "cpu", NULL, &p, 2, states, origin, NULL),
                     1);
    free(states[0]);
    free(origin[0]);
    states[0] = origin[0] = NULL;
    ck_assert_int_eq(kt_transfer_fill(s, tasks, NULL, 2, "cpu", NULL, &p, 4, states, origin, NULL),
                     2);
    ck_assert_msg(origin[0] && strstr(origin[0], "chosen by the store model"), "%s", origin[0]);
    /* the matmul's candidates: 2 re-fitted, then the model's picks */
    ck_assert_msg(origin[1] && strstr(origin[1], "timed here") &&
                      strstr(origin[1], "2 re-fitted, 2 of the") &&
                      strstr(origin[1], "checked against the reference"),
                  "%s", origin[1]);
    for (int i = 0; i < 2; i++) {
        free(states[i]);
        free(origin[i]);
    }
    kt_workload_free(mm);
    kt_workload_free(mm2);
    kt_workload_free(dw);
    kt_store_close(s);
}
END_TEST

START_TEST(transfer_zero_shot_build_runs_a_network_from_another_layers_records)
{
    kt_test_suite_dir("kt_transfer_");
    kt_test_make_dir();
    const char *src = getenv("KT_SOURCE_ROOT");
    char netfile[512], db[600], out_dir[600];
    snprintf(netfile, sizeof netfile, "%s/tests/net/cnn.json", src ? src : ".");
    snprintf(db, sizeof db, "%s/k.db", kt_test_dir);
    snprintf(out_dir, sizeof out_dir, "%s/lib", kt_test_dir);
    kt_net_t *net = kt_net_load_file(netfile);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_msg(t != NULL, "%s", kt_err_msg());
    /* task 3: conv2d 16x16x16 -> 32, bias, relu; task 0 is the same
     * operator and epilogue at 32x32x3 -> 16 */
    ck_assert_int_gt(t->ntasks, 3);
    const kt_workload_t *c3 = t->tasks[3].wl, *c1 = t->tasks[0].wl;
    ck_assert(isfinite(kt_transfer_distance(c1, c3)));
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    put_workload(s, c3);
    put_sampled(s, c3, &p, 41, 4, "cpu", NULL);
    kt_store_close(s);

    char *args[] = {"run", "--network-file", netfile, "--db", db, "--transfer", "--check",
                    "--repeat", "1", "--out", out_dir, NULL};
    kt_test_proc_t pr;
    kt_test_spawn(&pr, "run.out", 0, "cli/ktune", args, NULL, NULL);
    int st = 0;
    ck_assert_msg(kt_test_wait(&pr, 600000, &st), "ktune run did not finish");
    char *text = kt_test_output(&pr);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d: %s", st, text);
    char want[600];
    snprintf(want, sizeof want, "task 0 (conv2d_nhwc %s): re-fitted from record ", t->tasks[0].desc);
    ck_assert_msg(strstr(text, want) && strstr(text, "checked against the reference"), "%s", text);
    ck_assert_msg(strstr(text, kt_workload_key(c3)), "%s", text);
    snprintf(want, sizeof want, "task 3 (conv2d_nhwc %s): its own record", t->tasks[3].desc);
    ck_assert_msg(strstr(text, want), "%s", text);
    /* the residual conv has another epilogue: nothing near it is stored */
    snprintf(want, sizeof want, "task 1 (conv2d_nhwc %s): nothing stored to re-fit",
             t->tasks[1].desc);
    ck_assert_msg(strstr(text, want), "%s", text);
    ck_assert_msg(strstr(text, "no record, default schedule"), "%s", text);
    free(text);
    char lib[700];
    snprintf(lib, sizeof lib, "%s/small_cnn.c", out_dir);
    char *c = kt_file_read(lib, NULL);
    ck_assert_msg(c && strstr(c, "a schedule not tuned for this task, re-fitted from record"),
                  "%s", lib);
    free(c);
    /* --key: another device key's records are neither task 3's own nor re-fitted */
    char *other[] = {"build", "--network-file", netfile, "--db", db, "--transfer", "--key",
                     "other", "--out", out_dir, NULL};
    kt_test_spawn(&pr, "other.out", 0, "cli/ktune", other, NULL, NULL);
    ck_assert_msg(kt_test_wait(&pr, 600000, &st), "ktune build did not finish");
    text = kt_test_output(&pr);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d: %s", st, text);
    snprintf(want, sizeof want, "task 3 (conv2d_nhwc %s): nothing stored to re-fit",
             t->tasks[3].desc);
    ck_assert_msg(strstr(text, want) && !strstr(text, "its own record") &&
                      !strstr(text, "re-fitted from"),
                  "%s", text);
    free(text);
    kt_net_tasks_free(t);
    kt_net_free(net);
    kt_test_suite_dir_remove();
}
END_TEST

/* Wait for a daemon's --port-file; its address (caller frees). */
static char *port_of(const char *port_file)
{
    char *addr = NULL;
    for (int waited = 0; waited < 60000 && !addr; waited += 20) {
        if (!(addr = kt_file_read(port_file, NULL)))
            kt_test_sleep_ms(20);
    }
    ck_assert_msg(addr != NULL, "no %s", port_file);
    addr[strcspn(addr, "\n")] = '\0';
    return addr;
}

/* Run ktune with args to its end: the exit status (128 + signal when
 * killed) and its output in *out (caller frees). */
static int run_ktune(const char *name, char *args[], char **out)
{
    kt_test_proc_t pr;
    kt_test_spawn(&pr, name, 0, "cli/ktune", args, NULL, NULL);
    int st = 0;
    ck_assert_msg(kt_test_wait(&pr, 600000, &st), "ktune %s did not finish", args[0]);
    *out = kt_test_output(&pr);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* With a tracker, a zero-shot build's candidates are a job on its workers
 * and runners of the key: task 0's round is the states re-fitted from task
 * 3's stored records, measured and checked there; the network runs
 * correctly on the fastest of each; the job's records stay in the store,
 * so the next build needs no job; a key no runner has is refused, not
 * waited for. */
START_TEST(transfer_zero_shot_build_through_a_tracker_measures_on_its_runners)
{
    kt_test_suite_dir("kt_transfer_");
    kt_test_make_dir();
    const char *src = getenv("KT_SOURCE_ROOT");
    char netfile[512], db[600], port_file[600], out_dir[600];
    snprintf(netfile, sizeof netfile, "%s/tests/net/cnn.json", src ? src : ".");
    snprintf(db, sizeof db, "%s/z.db", kt_test_dir);
    snprintf(port_file, sizeof port_file, "%s/addr", kt_test_dir);
    snprintf(out_dir, sizeof out_dir, "%s/lib", kt_test_dir);
    kt_net_t *net = kt_net_load_file(netfile);
    ck_assert_msg(net != NULL, "%s", kt_err_msg());
    kt_net_tasks_t *t = kt_net_extract(net, KT_NET_NHWC);
    ck_assert_msg(t != NULL && t->ntasks > 3, "%s", kt_err_msg());
    kt_sched_params_t p;
    kt_sched_params_default(&p);
    kt_store_t *s = kt_store_open(db, KT_STORE_CREATE);
    ck_assert_ptr_nonnull(s);
    put_workload(s, t->tasks[3].wl);
    put_sampled(s, t->tasks[3].wl, &p, 41, 4, "cpu", NULL);
    kt_store_close(s);
    int njob = 0;   /* the direct tasks without a record: the job's */
    for (int i = 0; i < t->ntasks; i++)
        njob += i != 3 && t->tasks[i].alt_of < 0;

    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--port-file",
                     port_file, "--heartbeat-ms", "500", NULL};
    kt_test_proc_t tr, wk, rn;
    kt_test_spawn(&tr, "tracker.out", 0, "tracker/ktune-tracker", targs, NULL, NULL);
    char *addr = port_of(port_file);
    char *wargs[] = {"--tracker", addr, "--listen", "127.0.0.1:0", NULL};
    char *rargs[] = {"--tracker", addr, "--listen", "127.0.0.1:0", "--key", "cpu", "--device",
                     "cpu", NULL};
    kt_test_spawn(&wk, "worker.out", 0, "worker/ktune-worker", wargs, NULL, NULL);
    kt_test_spawn(&rn, "runner.out", 0, "server/ktune-runner", rargs, NULL, NULL);

    char *out = NULL;
    char *run[] = {"run", "--network-file", netfile, "--tracker", addr, "--transfer",
                   "--transfer-trials", "2", "--check", "--repeat", "1", "--out", out_dir, NULL};
    int run_rc = run_ktune("run.out", run, &out);
    /* the tracker's log says why a candidate failed, should one */
    char *tlog = kt_test_output(&tr);
    char *both = kt_test_story(out, tlog);
    free(out);
    free(tlog);
    out = both;
    ck_assert_msg(run_rc == 0, "%s", out);
    char want[600];
    snprintf(want, sizeof want,
             "task 0 (conv2d_nhwc %s): measured by zero-shot job 1 on runner key cpu: its fastest "
             "of 2 candidates (", t->tasks[0].desc);
    char *line = strstr(out, want);
    ck_assert_msg(line && strstr(line, "origin transfer), checked against the reference"), "%s",
                  out);
    snprintf(want, sizeof want, "task 3 (conv2d_nhwc %s): measured", t->tasks[3].desc);
    ck_assert_msg(!strstr(out, want) && strstr(out, "check: largest relative error") &&
                      !strstr(out, "no record, default schedule"),
                  "%s", out);
    free(out);

    /* what the job measured is stored: the next build has a record per task */
    char *again[] = {"build", "--network-file", netfile, "--tracker", addr, "--transfer",
                     "--out", out_dir, NULL};
    ck_assert_msg(run_ktune("again.out", again, &out) == 0, "%s", out);
    ck_assert_msg(!strstr(out, "zero-shot job") && !strstr(out, "no record"), "%s", out);
    free(out);
    char *nokey[] = {"build", "--network-file", netfile, "--tracker", addr, "--transfer",
                     "--key", "no-such-key", "--out", out_dir, NULL};
    ck_assert_int_eq(run_ktune("nokey.out", nokey, &out), 1);
    /* task 3's records are of key cpu: it too is without a record of this key */
    snprintf(want, sizeof want, "%d tasks without a record", njob + 1);
    ck_assert_msg(strstr(out, want) && strstr(out, "no runner of device key no-such-key"), "%s",
                  out);
    free(out);

    /* A worker whose compiler fails: the job's candidates fail, the build
     * says why and takes the default schedule. */
    int wst = 0;
    kill(wk.pid, SIGTERM);
    ck_assert_msg(kt_test_wait(&wk, 30000, &wst), "the worker did not stop");
    char bin[600], cc[700], path[4096];
    snprintf(bin, sizeof bin, "%s/bin", kt_test_dir);
    snprintf(cc, sizeof cc, "%s/cc", bin);
    ck_assert_int_eq(mkdir(bin, 0755), 0);
    static const char fail[] = "#!/bin/sh\necho 'cc: broken for this test' >&2\nexit 1\n";
    ck_assert_int_eq(kt_file_write(cc, fail, sizeof fail - 1), 0);
    ck_assert_int_eq(chmod(cc, 0755), 0);
    snprintf(path, sizeof path, "PATH=%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin");
    char *bad_cc[] = {path, NULL};
    const char *const drop_path[] = {"PATH=", NULL};
    kt_test_spawn(&wk, "worker2.out", 0, "worker/ktune-worker", wargs, drop_path, bad_cc);
    char net2[600];
    snprintf(net2, sizeof net2, "%s/one.json", kt_test_dir);
    static const char one[] =
        "{\"name\": \"one\", \"layers\": [\n"
        " {\"name\": \"x\", \"op\": \"input\", \"shape\": [1, 3, 9, 9]},\n"
        " {\"name\": \"c\", \"op\": \"conv2d\", \"channels\": 5, \"kernel\": [3, 3]}\n]}\n";
    ck_assert_int_eq(kt_file_write(net2, one, sizeof one - 1), 0);
    char *broken[] = {"build", "--network-file", net2, "--tracker", addr, "--transfer",
                      "--transfer-trials", "1", "--out", out_dir, NULL};
    int brc = run_ktune("broken.out", broken, &out);
    char *wlog = kt_test_output(&wk);
    char *story = kt_test_story(out, wlog);
    free(out);
    free(wlog);
    ck_assert_msg(brc == 0 &&
                      strstr(story, "measured no valid candidate of 1 (COMPILE_HOST: ") &&
                      strstr(story, "no record, default schedule"),
                  "%s", story);
    free(story);

    kt_test_proc_t *procs[] = {&rn, &wk, &tr};
    for (int i = 0; i < 3; i++) {
        int st = 0;
        kill(procs[i]->pid, SIGTERM);
        ck_assert_msg(kt_test_wait(procs[i], 30000, &st), "%s did not stop", procs[i]->log);
    }
    s = kt_store_open(db, 0);
    ck_assert_ptr_nonnull(s);
    kt_store_job_info_t *info = NULL;
    ck_assert_int_eq(kt_store_get_job(s, 1, &info), 0);
    ck_assert_str_eq(info->job.state, "done");
    ck_assert_int_eq(info->ntasks, njob);
    kt_store_job_info_free(info);
    ck_assert_int_eq(kt_store_get_job(s, 2, &info), 0);
    ck_assert_str_eq(info->job.state, "done");
    kt_store_job_info_free(info);
    ck_assert_int_eq(kt_store_get_job(s, 3, &info), KT_ENOTFOUND);
    kt_store_filter_t f = {.job_id = 1};
    kt_record_list_t *l = NULL;
    ck_assert_int_eq(kt_store_get_records(s, &f, &l), 0);
    ck_assert_int_eq((int)l->n, 2 * njob);
    for (size_t i = 0; i < l->n; i++)
        for (size_t j = 0; j < i; j++)
            ck_assert(l->items[i].state_hash != l->items[j].state_hash ||
                      strcmp(l->items[i].workload_key, l->items[j].workload_key) != 0);
    kt_record_list_free(l);
    kt_store_close(s);
    free(addr);
    kt_net_tasks_free(t);
    kt_net_free(net);
    kt_test_suite_dir_remove();
}
END_TEST

int main(void)
{
    Suite *su = suite_create("transfer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, transfer_refit_states_validate_and_match_the_reference, 0,
                        (int)KT_ARRAY_LEN(PAIRS));
    tcase_add_test(tc, transfer_refit_to_the_same_shapes_gives_the_state_back);
    tcase_add_loop_test(tc, transfer_refit_across_one_trailing_unary_epilogue, 0,
                        (int)KT_ARRAY_LEN(TAIL_PAIRS));
    tcase_add_test(tc, transfer_refit_takes_the_nearest_factors_and_keeps_the_register_tile);
    tcase_add_test(tc, transfer_refit_drops_what_cannot_be_refitted_with_a_reason);
    tcase_add_test(tc, transfer_refit_gpu_states_within_the_limits);
    tcase_add_test(tc, transfer_distance_sums_log_ratios_of_the_named_dimensions);
    tcase_add_test(tc, transfer_nearest_workloads_of_the_same_kind_on_the_same_key);
    tcase_add_test(tc, transfer_first_round_holds_refitted_states_measured_once);
    tcase_add_test(tc, transfer_gather_counts_records_it_cannot_refit);
    tcase_add_test(tc, transfer_zero_shot_build_runs_a_network_from_another_layers_records);
    tcase_add_test(tc, transfer_zero_shot_build_through_a_tracker_measures_on_its_runners);
    tcase_add_test(tc, transfer_fill_takes_the_store_models_pick_where_nothing_refits);
    suite_add_tcase(su, tc);
    /* its own case: a hang here times out in 120 s, not the core's 300 */
    TCase *th = tcase_create("threads");
    tcase_set_timeout(th, 120);
    tcase_add_test(th, transfer_fill_checks_after_the_store_model_loads_without_hanging);
    suite_add_tcase(su, th);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
