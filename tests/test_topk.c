/*
 * test_topk.c - both losses against a cached top-k teacher (docs/SPEC.md §7) on every backend
 * against the float64 reference: parity (every tail policy, every divergence of docs/SPEC.md §6,
 * dtype, id type, padding,
 * ignored rows, the given normaliser, sum, no labels), precision (peaky and Zipf-like teachers,
 * k from 1 to 128 and k = V), chunking (chunk_rows 1, 7, T and auto against the reference),
 * determinism (bitwise reruns and a fresh context) and bad ids (a duplicate id: the row ignored,
 * DISTIL_ERR_INVALID_LABEL naming the row, outputs as the reference's) and renormalise where a
 * row's teacher has no mass on its slots.
 */
#include "test_problems.h" /* tp_div_count */
#include "topk_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static distil_ctx *g_ctx, *g_ref;
static const char *g_backend;

#define F(...)                                                                                     \
    { .fused = true, __VA_ARGS__ }
#define L(...)                                                                                     \
    { .fused = false, __VA_ARGS__ }

/* Parity cases, each in fp32, bf16 and fp16. */
static const tk_spec parity_cases[] = {
    F(.t = 37, .v = 1000, .k = 8, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
      .mixed_labels = true, .bias = true, .parts = true, .pad = true),
    F(.t = 37, .v = 1000, .k = 8, .tail = DISTIL_TOPK_RENORMALISE, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.5f, .tau = 2.0f, .mixed_labels = true, .bias = true, .parts = true, .chunk = 7),
    F(.t = 29, .v = 777, .k = 32, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_FORWARD_KL,
      .teacher = TK_ZIPF, .idt = DISTIL_IDS_I32, .tdtype = DISTIL_BF16, .chunk = 16, .parts = true,
      .pad = true),
    F(.t = 21, .v = 500, .k = 16, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_REVERSE_KL,
      .bias = true, .parts = true, .tau = 0.7f),
    F(.t = 21, .v = 500, .k = 16, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.3f, .mixed_labels = true, .parts = true),
    F(.t = 19, .v = 300, .k = 1, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.7f, .teacher = TK_PEAKY, .parts = true),
    F(.t = 17, .v = 128, .k = 128, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
      .teacher = TK_PEAKY, .parts = true, .bias = true),
    F(.t = 23, .v = 640, .k = 8, .w_hard = 0.0f, .w_soft = 1.0f, .tail = DISTIL_TOPK_TAIL,
      .div = DISTIL_DIVERGENCE_FORWARD_KL, .tdtype = DISTIL_F16, .parts = true),
    F(.t = 23, .v = 640, .k = 8, .tail = DISTIL_TOPK_RENORMALISE,
      .div = DISTIL_DIVERGENCE_REVERSE_KL, .red = DISTIL_REDUCTION_SUM, .parts = true),
    F(.t = 23, .v = 640, .k = 8, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.5f, .normaliser = 100.0f, .mixed_labels = true, .parts = true),
    L(.t = 33, .v = 1000, .k = 8, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
      .mixed_labels = true, .pad = true),
    L(.t = 33, .v = 1000, .k = 8, .tail = DISTIL_TOPK_RENORMALISE, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.5f, .red = DISTIL_REDUCTION_NONE, .mixed_labels = true),
    L(.t = 25, .v = 900, .k = 64, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_FORWARD_KL,
      .teacher = TK_ZIPF, .idt = DISTIL_IDS_I32, .red = DISTIL_REDUCTION_SUM,
      .tdtype = DISTIL_BF16),
    L(.t = 25, .v = 64, .k = 64, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_REVERSE_KL),
    L(.t = 25, .v = 300, .k = 1, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.2f, .teacher = TK_PEAKY, .normaliser = 7.0f),
    L(.t = 25, .v = 300, .k = 12, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_JSD,
      .beta = 0.9f, .mixed_labels = true),
    /* the rest of docs/SPEC.md §6: skew KLs (alpha) and TVD (kept off its kink: topk_untie.c) */
    F(.t = 23, .v = 640, .k = 8, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_SKEW_KL,
      .alpha = 0.1f, .tau = 1.3f, .mixed_labels = true, .bias = true, .parts = true),
    F(.t = 21, .v = 500, .k = 16, .tail = DISTIL_TOPK_RENORMALISE,
      .div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL, .alpha = 0.7f, .chunk = 5, .parts = true),
    F(.t = 29, .v = 777, .k = 32, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_TVD,
      .teacher = TK_ZIPF, .tdtype = DISTIL_BF16, .pad = true, .parts = true),
    F(.t = 21, .v = 500, .k = 16, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_TVD,
      .tau = 0.7f, .bias = true, .mixed_labels = true, .parts = true),
    F(.t = 19, .v = 300, .k = 8, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL,
      .alpha = 0.05f, .teacher = TK_PEAKY, .parts = true),
    L(.t = 25, .v = 300, .k = 12, .tail = DISTIL_TOPK_ZERO, .div = DISTIL_DIVERGENCE_SKEW_KL,
      .alpha = 0.4f, .mixed_labels = true),
    L(.t = 33, .v = 1000, .k = 8, .tail = DISTIL_TOPK_TAIL,
      .div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL, .alpha = 0.2f, .pad = true, .idt = DISTIL_IDS_I32),
    L(.t = 33, .v = 1000, .k = 8, .tail = DISTIL_TOPK_RENORMALISE, .div = DISTIL_DIVERGENCE_TVD,
      .red = DISTIL_REDUCTION_NONE, .tdtype = DISTIL_F16),
    L(.t = 25, .v = 900, .k = 64, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_TVD,
      .teacher = TK_ZIPF, .mixed_labels = true, .normaliser = 9.0f),
};

enum { N_PARITY = TU_LEN(parity_cases) };
static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};
enum { N_DT = TU_LEN(dtypes) };

/* Precision: peaky and Zipf-like teachers, k from 1 to 128, fused in fp32 and bf16; V 4099 (the
 * gpu row kernels' element-wise path) and 16384 at tau 1 and 0.8 (their vector path, with and
 * without the one-exponential form of tau = 1, many vectors per thread); a peaky student too
 * (logits of std 14: a row's largest probabilities near 1, whose tail sums and s - 1 are the
 * small differences the row sums must keep). */
static const int64_t precision_k[] = {1, 2, 8, 32, 128};
enum { N_PK = TU_LEN(precision_k) };
static const struct {
    int64_t t, v;
    float tau, student_std; /* student_std 0: tk_spec's default */
} precision_rows[] = {{16, 4099, 1.0f, 0.0f},
                      {6, 16384, 1.0f, 0.0f},
                      {6, 16384, 0.8f, 0.0f},
                      {6, 16384, 1.0f, 14.0f},
                      {16, 4099, 0.8f, 14.0f}};

static void run_against_ref(const tk_spec *s, distil_dtype dt, uint64_t seed) {
    tk_problem p;
    tk_make(&p, s, dt, seed);
    tk_out o, r;
    tk_run(g_ctx, &p, &o);
    tk_run(g_ref, &p, &r);
    if (o.st != DISTIL_OK) {
        print_error("%s\n", o.msg);
    }
    assert_int_equal(r.st, DISTIL_OK); /* a case both refuse would compare poison with poison */
    tk_check(&p, &o, &r);
    tk_out_free(&o), tk_out_free(&r);
    tk_free(&p);
}

typedef struct param {
    const tk_spec *s;
    distil_dtype dt;
    uint64_t seed;
} param;

static void test_case(void **state) {
    const param *pr = *state;
    run_against_ref(pr->s, pr->dt, pr->seed);
}

/* s as given (forward KL, tail), then renormalise with JSD, then tail with the skew reverse KL. */
static void precision_divergences(tk_spec s, distil_dtype dt, uint64_t seed) {
    run_against_ref(&s, dt, seed);
    s.tail = DISTIL_TOPK_RENORMALISE;
    s.div = DISTIL_DIVERGENCE_JSD;
    s.beta = 0.5f;
    run_against_ref(&s, dt, seed + 10);
    s.tail = DISTIL_TOPK_TAIL;
    s.div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL;
    s.alpha = 0.2f;
    run_against_ref(&s, dt, seed + 20);
}

static void test_precision(void **state) {
    const distil_dtype dt = *(const distil_dtype *)*state;
    for (size_t w = 0; w < TU_LEN(precision_rows); w++) {
        for (int teacher = TK_PEAKY; teacher <= TK_ZIPF; teacher++) {
            for (size_t i = 0; i < N_PK; i++) {
                const tk_spec s =
                    F(.t = precision_rows[w].t, .v = precision_rows[w].v, .k = precision_k[i],
                      .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
                      .teacher = (tk_teacher)teacher, .tau = precision_rows[w].tau, .parts = true,
                      .bias = true, .student_std = precision_rows[w].student_std);
                precision_divergences(s, dt, 300 + i + 100 * w);
            }
        }
    }
}

/* chunk_rows 1, 7 (a partial last chunk), T and 0 (auto) against the reference. */
static void test_chunking(void **state) {
    const distil_dtype dt = *(const distil_dtype *)*state;
    static const int64_t chunks[] = {1, 7, 41, 0};
    for (size_t i = 0; i < TU_LEN(chunks); i++) {
        tk_spec s = F(.t = 41, .v = 513, .k = 16, .tail = DISTIL_TOPK_TAIL,
                      .div = DISTIL_DIVERGENCE_FORWARD_KL, .mixed_labels = true, .bias = true,
                      .parts = true, .chunk = chunks[i], .tau = 1.5f);
        run_against_ref(&s, dt, 400);
    }
}

static void test_determinism(void **state) {
    const distil_dtype dt = *(const distil_dtype *)*state;
    const tk_spec specs[] = {
        F(.t = 48, .v = 2053, .k = 32, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_JSD,
          .beta = 0.5f, .bias = true, .parts = true, .chunk = 7, .mixed_labels = true),
        L(.t = 64, .v = 3001, .k = 16, .tail = DISTIL_TOPK_RENORMALISE,
          .div = DISTIL_DIVERGENCE_FORWARD_KL, .mixed_labels = true),
    };
    for (size_t i = 0; i < TU_LEN(specs); i++) {
        tk_problem p;
        tk_make(&p, &specs[i], dt, 500 + i);
        tk_out first, again;
        tk_run(g_ctx, &p, &first);
        tk_run(g_ctx, &p, &again);
        tk_check_same(&p, &again, &first);
        tk_out_free(&again);
        distil_ctx *fresh = tu_ctx(g_backend);
        tk_run(fresh, &p, &again);
        distil_ctx_destroy(fresh);
        tk_check_same(&p, &again, &first);
        tk_out_free(&again), tk_out_free(&first);
        tk_free(&p);
    }
}

/* A duplicate id in row 3 (and, in the second case, an invalid label in row 5 before it is
 * reached: the first error of the call stands, which is the label, found by the count). */
static void test_bad_ids(void **state) {
    (void)state;
    const tk_spec specs[] = {
        F(.t = 9, .v = 200, .k = 4, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
          .dup_row = 3, .parts = true, .bias = true, .chunk = 2),
        L(.t = 9, .v = 200, .k = 4, .tail = DISTIL_TOPK_TAIL, .div = DISTIL_DIVERGENCE_FORWARD_KL,
          .dup_row = 3),
    };
    for (size_t i = 0; i < TU_LEN(specs); i++) {
        tk_problem p;
        tk_make(&p, &specs[i], DISTIL_F32, 600 + i);
        tk_out o, r;
        tk_run(g_ctx, &p, &o);
        tk_run(g_ref, &p, &r);
        assert_int_equal(o.st, DISTIL_ERR_INVALID_LABEL);
        if (strstr(o.msg, "teacher_ids") == NULL || strstr(o.msg, "row 3 ") == NULL) {
            fail_msg("message '%s' does not name teacher_ids and row 3", o.msg);
        }
        tk_check(&p, &o, &r);
        distil_status again = distil_ctx_synchronize(g_ctx);
        if (again != DISTIL_OK) {
            fail_msg("reported twice: '%s' then '%s'", o.msg, distil_ctx_last_error(g_ctx));
        }
        tk_out_free(&o), tk_out_free(&r);
        tk_free(&p);
    }
}

/* Renormalise where every used teacher slot of a row is -inf (P_K = 0, docs/SPEC.md §7): the row's
 * soft part is that of a row without used slots, loss 0 and gradient 0. Rows 0, 3, 6, ... get
 * -inf in every slot; the result must match ref's and the same problem with those rows' slots all
 * pad_id, and be finite. Every divergence, both forms. */
static void void_rows(tk_problem *p, bool as_pads) {
    for (int64_t i = 0; i < p->s.t; i += 3) {
        for (int64_t j = 0; j < p->s.k; j++) {
            size_t e = (size_t)(i * p->s.k + j);
            if (as_pads) {
                ((int64_t *)p->ids)[e] = -1;
            } else {
                tu_set(p->logp, p->s.tdtype, e, -INFINITY);
            }
        }
    }
}

static void check_finite(const char *what, const void *v, distil_dtype dt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(tu_get(v, dt, i))) {
            fail_msg("%s[%zu] = %g: not finite", what, i, (double)tu_get(v, dt, i));
        }
    }
}

static void test_renorm_no_mass(void **state) {
    (void)state;
    /* every divergence the library has */
    for (int d = 0; d < tp_div_count(); d++) {
        for (int fused = 0; fused < 2; fused++) {
            tk_spec s = {.fused = fused,
                         .t = 7,
                         .v = 300,
                         .k = 8,
                         .idt = DISTIL_IDS_I64,
                         .tail = DISTIL_TOPK_RENORMALISE,
                         .div = (distil_divergence)d,
                         .beta = 0.4f,
                         .alpha = 0.3f,
                         .tau = 1.5f,
                         .parts = true,
                         .bias = true,
                         .red = fused ? DISTIL_REDUCTION_BATCHMEAN : DISTIL_REDUCTION_NONE};
            tk_problem p, pads;
            tk_make(&p, &s, DISTIL_F32, 700 + d);
            tk_make(&pads, &s, DISTIL_F32, 700 + d);
            void_rows(&p, false);
            void_rows(&pads, true);
            tk_out o, r, op;
            tk_run(g_ctx, &p, &o);
            tk_run(g_ref, &p, &r);
            tk_run(g_ctx, &pads, &op);
            assert_int_equal(o.st, DISTIL_OK);
            check_finite("loss", o.loss, DISTIL_F32, tk_nloss(&p));
            check_finite("grad", o.gx, DISTIL_F32, (size_t)(s.t * (fused ? s.hs : s.v)));
            tk_check(&p, &o, &r);
            tk_check(&p, &o, &op);
            for (int64_t i = 0; !fused && i < s.t; i += 3) {
                assert_true(o.loss[i] == 0.0f && r.loss[i] == 0.0f);
                for (int64_t v = 0; v < s.v; v++) {
                    assert_true(tu_get(o.gx, DISTIL_F32, (size_t)(i * s.v + v)) == 0.0f);
                }
            }
            tk_out_free(&o), tk_out_free(&r), tk_out_free(&op);
            tk_free(&p), tk_free(&pads);
        }
    }
}

enum { N_TESTS = N_PARITY * N_DT + 2 + N_DT + N_DT + 2 };
static struct CMUnitTest g_tests[N_TESTS];
static param g_params[N_PARITY * N_DT];
static char g_names[N_PARITY * N_DT][192];

static void build_tests(void) {
    size_t n = 0;
    for (size_t i = 0; i < N_PARITY; i++) {
        for (size_t d = 0; d < N_DT; d++, n++) {
            g_params[n] = (param){&parity_cases[i], dtypes[d], 100 + i};
            tk_name(g_names[n], sizeof g_names[n], &parity_cases[i], dtypes[d]);
            g_tests[n] = (struct CMUnitTest){
                .name = g_names[n], .test_func = test_case, .initial_state = &g_params[n]};
        }
    }
    g_tests[n++] =
        (struct CMUnitTest){"precision f32", test_precision, NULL, NULL, (void *)&dtypes[0]};
    g_tests[n++] =
        (struct CMUnitTest){"precision bf16", test_precision, NULL, NULL, (void *)&dtypes[1]};
    static const char *const cn[] = {"chunking f32", "chunking bf16", "chunking f16"};
    static const char *const dn[] = {"determinism f32", "determinism bf16", "determinism f16"};
    for (size_t d = 0; d < N_DT; d++) {
        g_tests[n++] = (struct CMUnitTest){cn[d], test_chunking, NULL, NULL, (void *)&dtypes[d]};
    }
    for (size_t d = 0; d < N_DT; d++) {
        g_tests[n++] = (struct CMUnitTest){dn[d], test_determinism, NULL, NULL, (void *)&dtypes[d]};
    }
    g_tests[n++] = (struct CMUnitTest){"bad ids", test_bad_ids, NULL, NULL, NULL};
    g_tests[n++] = (struct CMUnitTest){"renormalise without teacher mass", test_renorm_no_mass,
                                       NULL, NULL, NULL};
}

static int group_setup(void **state) {
    (void)state;
    if (distil_ctx_create(&g_ref, "ref", 0) != DISTIL_OK) {
        return -1;
    }
    return distil_ctx_create(&g_ctx, g_backend, 0) == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    distil_ctx_destroy(g_ref);
    g_ctx = g_ref = NULL;
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("topk", backend), g_tests, group_setup,
                                       group_teardown);
}

int main(void) {
    build_tests();
    return tu_run_per_backend(run_group, false);
}
