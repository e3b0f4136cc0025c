/*
 * test_edges.c - numerical edge cases (docs/RELIABILITY.md) as parity tests against the float64
 * "ref" on every backend with a device, in every dtype: logits of +-1e4, NaN and +-inf rows (NaN
 * reaches the loss and nothing else), -inf log-probs with finite and infinite divergences,
 * all-ignored batches, labels out of range (DISTIL_ERR_INVALID_LABEL, reported once), V = 1,
 * V = 262144 and T = 1. Rows named "poisoned" may hold anything non-finite; every other row must
 * match ref.
 */
#include "test_problems.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_backend;
static distil_ctx *g_ctx; /* the backend under test */
static distil_ctx *g_ref; /* the oracle */

static const distil_dtype g_dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};

/* ---------------------------------------------------------------- comparisons */

/* A scalar: NaN matches NaN, an infinity itself, anything else within tol relative or `floor`
 * absolute (floor 0: relative only). */
static void he_check_scalar_floor(const char *what, double got, double ref, double tol,
                                  double floor) {
    bool same_special = (isnan(got) && isnan(ref)) || (isinf(ref) && got == ref);
    bool near = isfinite(got) && fabs(got - ref) <= floor;
    if (!same_special && (!isfinite(ref) || !(tu_rel_err(got, ref) <= tol || near))) {
        print_error("%s: got %.9g, ref %.9g (tolerance %.1e, floor %.1e)\n", what, got, ref, tol,
                    floor);
        fail();
    }
}

static void he_check_scalar(const char *what, double got, double ref, double tol) {
    he_check_scalar_floor(what, got, ref, tol, 0.0);
}

/*
 * (rows, width) row stride ld. Rows with skip[i] set are not compared; in the others infinities
 * must match exactly, no NaN may appear, and the finite values must be within tol in the norm,
 * ||got - ref|| <= tol ||ref|| + floor sqrt(n) over the n elements compared (floor: an absolute
 * allowance per element, 0 for none).
 */
static void he_check_rows_floor(const char *what, const void *got, const void *ref, distil_dtype dt,
                                int64_t rows, int64_t width, int64_t ld, double tol, double floor,
                                const bool *skip) {
    double num = 0.0, den = 0.0, n = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t v = 0; (skip == NULL || !skip[i]) && v < width; v++) {
            double g = tu_get(got, dt, (size_t)(i * ld + v));
            double r = tu_get(ref, dt, (size_t)(i * ld + v));
            if (isnan(g) || isnan(r) || (isinf(r) != isinf(g)) || (isinf(r) && g != r)) {
                print_error("%s: (%lld, %lld): got %g, ref %g\n", what, (long long)i, (long long)v,
                            g, r);
                fail();
            }
            if (!isinf(r)) {
                num += (g - r) * (g - r), den += r * r, n += 1.0;
            }
        }
    }
    if (!(sqrt(num) <= tol * sqrt(den) + floor * sqrt(n))) {
        print_error("%s: ||got - ref|| = %.3g, ||ref|| = %.3g: beyond %.1e relative + %.1e\n", what,
                    sqrt(num), sqrt(den), tol, floor);
        fail();
    }
}

static void he_check_rows(const char *what, const void *got, const void *ref, distil_dtype dt,
                          int64_t rows, int64_t width, int64_t ld, double tol, const bool *skip) {
    he_check_rows_floor(what, got, ref, dt, rows, width, ld, tol, 0.0, skip);
}

/* Every element of row i is exactly zero. */
static void he_check_zero_rows(const char *what, const void *p, distil_dtype dt, int64_t rows,
                               int64_t width, int64_t ld) {
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t v = 0; v < width; v++) {
            if (tu_get(p, dt, (size_t)(i * ld + v)) != 0.0f) {
                print_error("%s: (%lld, %lld) is %g, not 0\n", what, (long long)i, (long long)v,
                            (double)tu_get(p, dt, (size_t)(i * ld + v)));
                fail();
            }
        }
    }
}

/* ---------------------------------------------------------------- distil_jsd */

typedef struct he_jsd_expect {
    const bool *poisoned; /* rows whose loss and gradient may be anything non-finite */
    bool total_nonfinite; /* the reduced loss must be NaN or +-inf (on both) */
    double floor;         /* absolute allowance per element (he_check_rows_floor), 0 for none */
} he_jsd_expect;

/* Run on the backend and on ref, then compare loss and gradient row by row. */
static void he_jsd_compare(const char *what, const tp_jsd *p, const he_jsd_expect *e) {
    tp_jsd_out got, ref;
    tp_jsd_run(g_ctx, p, &got);
    tp_jsd_run(g_ref, p, &ref);
    distil_dtype dt = p->d.dtype;
    char name[160];
    bool none = p->d.reduction == DISTIL_REDUCTION_NONE;
    double floor = e ? e->floor : 0.0;
    if (none) {
        snprintf(name, sizeof name, "%s: row losses", what);
        he_check_rows_floor(name, got.loss, ref.loss, DISTIL_F32, p->s.t, 1, 1,
                            tu_tolerance(dt, TU_LOSS), floor * (double)p->s.v,
                            e ? e->poisoned : NULL);
    } else if (e && e->total_nonfinite) {
        if (isfinite(got.loss[0]) || isfinite(ref.loss[0])) {
            print_error("%s: loss %g, ref %g: both must be non-finite\n", what, (double)got.loss[0],
                        (double)ref.loss[0]);
            fail();
        }
    } else {
        snprintf(name, sizeof name, "%s: loss", what);
        he_check_scalar_floor(name, got.loss[0], ref.loss[0], tu_tolerance(dt, TU_LOSS),
                              floor * (double)(p->s.t * p->s.v));
    }
    assert_true(tu_is_poison(got.loss, DISTIL_F32, p->nloss)); /* nothing past the loss */
    if (got.grad != NULL) {
        snprintf(name, sizeof name, "%s: grad", what);
        he_check_rows_floor(name, got.grad, ref.grad, dt, p->s.t, p->s.v, p->gs,
                            tu_tolerance(dt, TU_GRAD), floor, e ? e->poisoned : NULL);
    }
    tp_jsd_out_free(&got), tp_jsd_out_free(&ref);
}

/* Row i of a log-prob matrix: log-softmax of logits that are each +1e4 or -1e4. */
static void he_set_extreme_row(tu_rng *r, void *m, distil_dtype dt, int64_t ld, int64_t i,
                               int64_t v) {
    int64_t npos = 0;
    bool *pos = malloc((size_t)v * sizeof *pos);
    assert_non_null(pos);
    for (int64_t k = 0; k < v; k++) {
        pos[k] = tu_rand_uniform(r) < 0.02 || k == i % v;
        npos += pos[k];
    }
    double lse = 1e4 + log((double)npos);
    for (int64_t k = 0; k < v; k++) {
        tu_set(m, dt, (size_t)(i * ld + k), (float)((pos[k] ? 1e4 : -1e4) - lse));
    }
    free(pos);
}

static void test_jsd_extreme_logits(void **state) {
    (void)state;
    const float betas[] = {0.0f, 0.5f, 1.0f};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t b = 0; b < TU_LEN(betas); b++) {
            tp_jsd_spec s = {.t = 9,
                             .v = 257,
                             .beta = betas[b],
                             .labels = TP_LABELS_MIXED,
                             .grad = TP_GRAD_OUT,
                             .red = DISTIL_REDUCTION_NONE};
            tp_jsd p;
            tp_jsd_make(&p, &s, g_dtypes[d], 100 + b);
            tu_rng r = tu_rng_make(5);
            for (int64_t i = 0; i < s.t; i++) {
                he_set_extreme_row(&r, p.x, g_dtypes[d], p.xs, i, s.v);
                he_set_extreme_row(&r, p.y, g_dtypes[d], p.ys, (i + 3) % s.t, s.v);
            }
            char what[96];
            snprintf(what, sizeof what, "jsd +-1e4 logits %s beta %g",
                     distil_dtype_name(g_dtypes[d]), (double)betas[b]);
            he_jsd_compare(what, &p, NULL);
            tp_jsd_free(&p);
        }
    }
}

/*
 * The weights of m at the ends of the float range: beta (JSD) and alpha (skew KLs) subnormal,
 * tiny, or the float just below 1. A JSD of beta -> 0 is of order beta, so its terms fall below
 * FLT_MIN and may flush to 0 (fp32 holds nothing finer): the allowance is FLT_MIN per element on
 * top of the relative bound. The skew KLs of a small alpha stay of order 1 and keep the plain
 * relative bound; at alpha near 1 they are of order (1 - alpha)^2 and their row sums cancel, which
 * the precision suite bounds by its condition number (test_precision), so they are not taken here.
 * The point is that nothing turns non-finite: (1 - beta) / beta overflowed fp32 for a subnormal
 * beta and made the far form inf * 0 = NaN (docs/SPEC.md §3).
 */
static const float he_edge_weights[] = {0x1p-149f, 1e-41f, 1e-36f, 1e-30f, 1.0f - 0x1p-24f};

static void test_jsd_extreme_weights(void **state) {
    (void)state;
    const distil_divergence divs[] = {DISTIL_DIVERGENCE_JSD, DISTIL_DIVERGENCE_SKEW_KL,
                                      DISTIL_DIVERGENCE_SKEW_REVERSE_KL};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t k = 0; k < TU_LEN(divs); k++) {
            for (size_t b = 0; b < TU_LEN(he_edge_weights); b++) {
                float w = he_edge_weights[b];
                if (divs[k] != DISTIL_DIVERGENCE_JSD && w > 0.5f) {
                    continue;
                }
                tp_jsd_spec s = {.t = 7,
                                 .v = 301,
                                 .beta = divs[k] == DISTIL_DIVERGENCE_JSD ? w : 0.5f,
                                 .div = divs[k],
                                 .alpha = w,
                                 .labels = TP_LABELS_MIXED,
                                 .grad = TP_GRAD_OUT,
                                 .red = b % 2 ? DISTIL_REDUCTION_NONE : DISTIL_REDUCTION_BATCHMEAN};
                tp_jsd p;
                tp_jsd_make(&p, &s, g_dtypes[d], 150 + 10 * k + b);
                char what[128];
                snprintf(what, sizeof what, "jsd %s %s weight %g", tp_div_name(divs[k]),
                         distil_dtype_name(g_dtypes[d]), (double)w);
                he_jsd_expect e = {.floor = (double)FLT_MIN};
                he_jsd_compare(what, &p, &e);
                tp_jsd_free(&p);
            }
        }
    }
}

/* NaN in rows 2 (student) and 4 (teacher), NaN in an ignored row 1, +-inf in rows 5 and 6. */
static void he_poison_jsd(tp_jsd *p, bool *poisoned) {
    distil_dtype dt = p->d.dtype;
    tu_set(p->x, dt, (size_t)(2 * p->xs + 5), NAN);
    tu_set(p->y, dt, (size_t)(4 * p->ys + 0), NAN);
    tu_set(p->x, dt, (size_t)(1 * p->xs + 7), NAN); /* row 1 is ignored (TP_LABELS_MIXED) */
    tu_set(p->x, dt, (size_t)(5 * p->xs + 3), INFINITY);
    tu_set(p->y, dt, (size_t)(6 * p->ys + 9), INFINITY);
    poisoned[2] = poisoned[4] = poisoned[5] = poisoned[6] = true;
}

static void test_jsd_nan_inf_rows(void **state) {
    (void)state;
    const distil_reduction reds[] = {DISTIL_REDUCTION_NONE, DISTIL_REDUCTION_BATCHMEAN,
                                     DISTIL_REDUCTION_SUM};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t k = 0; k < TU_LEN(reds); k++) {
            tp_jsd_spec s = {.t = 8,
                             .v = 100,
                             .pad_x = 2,
                             .beta = 0.3f,
                             .red = reds[k],
                             .labels = TP_LABELS_MIXED,
                             .grad = TP_GRAD_OUT};
            tp_jsd p;
            tp_jsd_make(&p, &s, g_dtypes[d], 200 + k);
            bool poisoned[8] = {false};
            he_poison_jsd(&p, poisoned);
            he_jsd_expect e = {.poisoned = poisoned, .total_nonfinite = true};
            char what[96];
            snprintf(what, sizeof what, "jsd NaN/inf rows %s reduction %d",
                     distil_dtype_name(g_dtypes[d]), (int)reds[k]);
            he_jsd_compare(what, &p, &e);
            tp_jsd_free(&p);
        }
    }
}

/* A NaN in an ignored row is never read: everything stays finite and equal to ref. */
static void test_jsd_nan_in_ignored_row(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_jsd_spec s = {
            .t = 7, .v = 64, .beta = 0.5f, .labels = TP_LABELS_MIXED, .grad = TP_GRAD_OUT};
        tp_jsd p;
        tp_jsd_make(&p, &s, g_dtypes[d], 300);
        for (int64_t v = 0; v < s.v; v += 5) {
            tu_set(p.x, g_dtypes[d], (size_t)(1 * p.xs + v), NAN); /* rows 1 and 4 are ignored */
            tu_set(p.y, g_dtypes[d], (size_t)(4 * p.ys + v), -INFINITY);
            tu_set(p.y, g_dtypes[d], (size_t)(4 * p.ys + v + 1), INFINITY);
        }
        he_jsd_compare("jsd NaN in ignored rows", &p, NULL);
        tp_jsd_free(&p);
    }
}

/* -inf log-probs: masked tokens (finite divergences), and divergences that are +inf. */
static void test_jsd_neg_inf(void **state) {
    (void)state;
    const float betas[] = {0.0f, 0.25f, 1.0f};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t b = 0; b < TU_LEN(betas); b++) {
            tp_jsd_spec s = {.t = 6,
                             .v = 90,
                             .beta = betas[b],
                             .red = DISTIL_REDUCTION_NONE,
                             .grad = TP_GRAD_OUT,
                             .special = TP_NEG_INF};
            tp_jsd p;
            tp_jsd_make(&p, &s, g_dtypes[d], 400 + b);
            char what[96];
            snprintf(what, sizeof what, "jsd masked tokens %s beta %g",
                     distil_dtype_name(g_dtypes[d]), (double)betas[b]);
            he_jsd_compare(what, &p, NULL);
            /* Row 0: teacher 0 where the student is not (infinite reverse KL for beta 1); row 1:
             * student 0 where the teacher is not (infinite forward KL for beta 0); row 2: the
             * student entirely -inf. */
            tu_set(p.y, g_dtypes[d], (size_t)(0 * p.ys + 4), -INFINITY);
            tu_set(p.x, g_dtypes[d], (size_t)(1 * p.xs + 6), -INFINITY);
            for (int64_t v = 0; v < s.v; v++) {
                tu_set(p.x, g_dtypes[d], (size_t)(2 * p.xs + v), -INFINITY);
            }
            snprintf(what, sizeof what, "jsd infinite divergences %s beta %g",
                     distil_dtype_name(g_dtypes[d]), (double)betas[b]);
            he_jsd_compare(what, &p, NULL);
            tp_jsd_free(&p);
        }
    }
}

static void test_jsd_all_ignored(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_jsd_spec s = {
            .t = 5, .v = 33, .beta = 0.5f, .labels = TP_LABELS_ALL_IGNORED, .grad = TP_GRAD_OUT};
        tp_jsd p;
        tp_jsd_make(&p, &s, g_dtypes[d], 500);
        tp_jsd_out got;
        tp_jsd_run(g_ctx, &p, &got);
        assert_true(got.loss[0] == 0.0f);
        he_check_zero_rows("jsd all ignored: grad", got.grad, g_dtypes[d], s.t, s.v, p.gs);
        tp_jsd_out_free(&got);
        tp_jsd_free(&p);
    }
}

/* distil_jsd has no vocabulary check on labels: any label but ignore_index marks a valid row. */
static void test_jsd_labels_any_value(void **state) {
    (void)state;
    tp_jsd_spec s = {.t = 6, .v = 40, .beta = 0.5f, .labels = TP_LABELS_MIXED, .grad = TP_GRAD_OUT};
    tp_jsd p;
    tp_jsd_make(&p, &s, DISTIL_F32, 600);
    p.labels[0] = -1, p.labels[2] = 40, p.labels[3] = INT64_MAX, p.labels[5] = INT64_MIN;
    he_jsd_compare("jsd labels outside [0, V)", &p, NULL);
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    tp_jsd_free(&p);
}

/* V = 1, V = 262144 with few rows, and T = 1. */
static void test_jsd_shapes(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{7, 1}, {3, 262144}, {1, 1000}, {1, 1}};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t k = 0; k < TU_LEN(shapes); k++) {
            tp_jsd_spec s = {.t = shapes[k][0],
                             .v = shapes[k][1],
                             .beta = 0.5f,
                             .labels = TP_LABELS_MIXED,
                             .grad = TP_GRAD_OUT};
            tp_jsd p;
            tp_jsd_make(&p, &s, g_dtypes[d], 700 + k);
            char what[96];
            snprintf(what, sizeof what, "jsd %s T=%lld V=%lld", distil_dtype_name(g_dtypes[d]),
                     (long long)s.t, (long long)s.v);
            he_jsd_compare(what, &p, NULL);
            tp_jsd_free(&p);
        }
    }
}

/* ---------------------------------------------------------------- fused */

typedef struct he_fused_expect {
    const bool *poisoned; /* rows of grad_student_hidden that may be anything */
    bool loss_nan;        /* loss (and the parts) NaN on both */
    bool skip_weight;     /* grad_Ws / grad_bs not compared (a NaN row reaches every element) */
    double tol;           /* bound of loss and gradients instead of the dtype's (0: the dtype's) */
    double floor;         /* absolute allowance per element (he_check_rows_floor), 0 for none */
} he_fused_expect;

static void he_fused_check_loss(const char *what, const tp_fused *p, const tp_fused_out *got,
                                const tp_fused_out *ref, const he_fused_expect *e) {
    int n = p->d.return_parts ? 3 : 1;
    for (int k = 0; k < n; k++) {
        char name[160];
        snprintf(name, sizeof name, "%s: loss[%d]", what, k);
        if (e && e->loss_nan && (!isnan(got->loss[k]) || !isnan(ref->loss[k]))) {
            print_error("%s = %g, ref %g: both must be NaN\n", name, (double)got->loss[k],
                        (double)ref->loss[k]);
            fail();
        }
        if (!(e && e->loss_nan)) {
            double tol = e && e->tol > 0.0 ? e->tol : tu_tolerance(p->d.dtype, TU_LOSS);
            double floor = e ? e->floor * (double)(p->s.t * p->s.v) : 0.0;
            he_check_scalar_floor(name, got->loss[k], ref->loss[k], tol, floor);
        }
    }
    assert_true(tu_is_poison(got->loss, DISTIL_F32, (size_t)n)); /* nothing past the loss */
}

static void he_fused_compare(const char *what, const tp_fused *p, const he_fused_expect *e) {
    tp_fused_out got, ref;
    tp_fused_run(g_ctx, p, &got);
    tp_fused_run(g_ref, p, &ref);
    distil_dtype dt = p->d.dtype;
    double tol = e && e->tol > 0.0 ? e->tol : tu_tolerance(dt, TU_GRAD_FUSED);
    /* G rounded to 16 bits before G Ws (tu_g_rounded) is held to the careful evaluation that
     * rounds it too by test_precision; the fixed 1e-2 does not hold it at this file's sharp rows
     * (tau 0.15: the cpu backend with G rounded to bf16 measured 1.8% on grad_student_hidden,
     * cuda 2.6%), so here those gradients get 4x. */
    if (tu_g_rounded(g_ctx, dt) && !(e && e->tol > 0.0)) {
        tol *= 4.0;
    }
    double floor = e ? e->floor : 0.0;
    char name[160];
    he_fused_check_loss(what, p, &got, &ref, e);
    if (got.gxs) {
        snprintf(name, sizeof name, "%s: grad_student_hidden", what);
        he_check_rows_floor(name, got.gxs, ref.gxs, dt, p->s.t, p->s.hs, p->s.hs, tol, floor,
                            e ? e->poisoned : NULL);
    }
    if (got.gws && !(e && e->skip_weight)) {
        snprintf(name, sizeof name, "%s: grad_student_weight", what);
        he_check_rows_floor(name, got.gws, ref.gws, dt, p->s.v, p->s.hs, p->s.hs, tol, floor, NULL);
    }
    if (got.gbs && !(e && e->skip_weight)) {
        snprintf(name, sizeof name, "%s: grad_student_bias", what);
        he_check_rows_floor(name, got.gbs, ref.gbs, dt, 1, p->s.v, p->s.v, tol, floor, NULL);
    }
    tp_fused_out_free(&got), tp_fused_out_free(&ref);
}

static tp_fused_spec he_fused_spec(int64_t t, int64_t v, int64_t h) {
    tp_fused_spec s = {.t = t,
                       .v = v,
                       .hs = h,
                       .ht = h + 4,
                       .w_hard = 0.5f,
                       .w_soft = 0.5f,
                       .beta = 0.5f,
                       .tau = 1.0f,
                       .bias_s = true,
                       .bias_t = true,
                       .parts = true,
                       .grads = TP_WANT_ALL,
                       .labels = TP_LABELS_MIXED};
    return s;
}

/* Logits of +-1e4: hidden states of +-10 against weights of +-250 over 4 columns. */
static void test_fused_extreme_logits(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_fused_spec s = he_fused_spec(10, 97, 4);
        s.bias_s = s.bias_t = false;
        s.tau = 3.0f;
        tp_fused p;
        tp_fused_make(&p, &s, g_dtypes[d], 800);
        tu_rng r = tu_rng_make(8);
        for (size_t i = 0; i < p.n_xs; i++) {
            tu_set(p.xs, g_dtypes[d], i, tu_rand_uniform(&r) < 0.5 ? -10.0f : 10.0f);
        }
        for (size_t i = 0; i < p.n_ws; i++) {
            tu_set(p.ws, g_dtypes[d], i, tu_rand_uniform(&r) < 0.5 ? -250.0f : 250.0f);
        }
        for (size_t i = 0; i < p.n_wt; i++) {
            tu_set(p.wt, g_dtypes[d], i, (float)(300.0 * tu_rand_normal(&r)));
        }
        char what[96];
        snprintf(what, sizeof what, "fused +-1e4 logits %s", distil_dtype_name(g_dtypes[d]));
        /* docs/SPEC.md §2 keeps logits in fp32: at |z| = 1e4 one ulp is 1e-3, and a softmax passes
         * an absolute logit error straight on as a relative error of s, q and so of G and the loss.
         * Measured: gradients 2.3e-4 on the H200 (cuBLAS), 8e-5 on cpu; JSD part 2.9e-5 on PoCL.
         * Bound: 4 ulps of the largest logit (2.4e-3); the half dtypes keep theirs. */
        he_fused_expect e = {.tol = g_dtypes[d] == DISTIL_F32 ? 4.0 * 1e4 * 0x1p-24 : 0.0};
        he_fused_compare(what, &p, &e);
        tp_fused_free(&p);
    }
}

static void test_fused_nan_rows(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_fused_spec s = he_fused_spec(9, 70, 8);
        tp_fused p;
        tp_fused_make(&p, &s, g_dtypes[d], 900);
        tu_set(p.xs, g_dtypes[d], (size_t)(2 * s.hs + 3), NAN); /* row 2 is valid */
        bool poisoned[9] = {false};
        poisoned[2] = true;
        he_fused_expect e = {.poisoned = poisoned, .loss_nan = true, .skip_weight = true};
        he_fused_compare("fused NaN in a valid row", &p, &e);
        tp_fused_free(&p);
        /* NaN hidden state in an ignored row (1): the loss never reads it. */
        tp_fused_make(&p, &s, g_dtypes[d], 901);
        tu_set(p.xs, g_dtypes[d], (size_t)(1 * s.hs + 1), NAN);
        tu_set(p.xt, g_dtypes[d], (size_t)(1 * s.ht + 2), INFINITY);
        he_fused_expect f = {.skip_weight = true};
        he_fused_compare("fused NaN in an ignored row", &p, &f);
        tp_fused_free(&p);
    }
}

/* The fused loss at he_edge_weights' beta (the soft part's JSD) and skew KL alpha; a low
 * temperature and a one-column teacher as in the fuzz input that found the overflow. */
static void test_fused_extreme_weights(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t b = 0; b < TU_LEN(he_edge_weights); b++) {
            tp_fused_spec s = he_fused_spec(5, 873, 4);
            s.ht = 1;
            s.tau = 0.1546f;
            s.beta = he_edge_weights[b];
            tp_fused p;
            tp_fused_make(&p, &s, g_dtypes[d], 1300 + b);
            char what[128];
            snprintf(what, sizeof what, "fused %s beta %g", distil_dtype_name(g_dtypes[d]),
                     (double)s.beta);
            he_fused_expect e = {.floor = (double)FLT_MIN};
            he_fused_compare(what, &p, &e);
            tp_fused_free(&p);
            if (he_edge_weights[b] > 0.5f) {
                continue; /* the skew KL's cancelling regime (test_jsd_extreme_weights) */
            }
            s.beta = 0.5f;
            s.div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL;
            s.alpha = he_edge_weights[b];
            tp_fused_make(&p, &s, g_dtypes[d], 1310 + b);
            snprintf(what, sizeof what, "fused %s skew reverse KL alpha %g",
                     distil_dtype_name(g_dtypes[d]), (double)s.alpha);
            he_fused_compare(what, &p, &e);
            tp_fused_free(&p);
        }
    }
}

/* A masked vocabulary: -inf biases, in both heads, then in the student only with beta 0 (an
 * infinite forward KL). Labels never point at a masked column. */
static void test_fused_neg_inf_bias(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_fused_spec s = he_fused_spec(8, 60, 8);
        tp_fused p;
        tp_fused_make(&p, &s, g_dtypes[d], 1000);
        for (int64_t i = 0; i < s.t; i++) {
            p.labels[i] = p.labels[i] == p.d.ignore_index ? p.labels[i] : i % 7;
        }
        for (int64_t v = 10; v < s.v; v += 9) {
            tu_set(p.bs, g_dtypes[d], (size_t)v, -INFINITY);
            tu_set(p.bt, g_dtypes[d], (size_t)v, -INFINITY);
        }
        he_fused_compare("fused -inf bias in both heads", &p, NULL);
        tu_set(p.bs, g_dtypes[d], 8, -INFINITY);
        p.d.beta = 0.0f;
        he_fused_compare("fused -inf student bias, beta 0", &p, NULL);
        tp_fused_free(&p);
    }
}

static void test_fused_all_ignored(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_fused_spec s = he_fused_spec(6, 50, 8);
        s.labels = TP_LABELS_ALL_IGNORED;
        tp_fused p;
        tp_fused_make(&p, &s, g_dtypes[d], 1100);
        tp_fused_out got;
        tp_fused_run(g_ctx, &p, &got);
        for (int k = 0; k < 3; k++) {
            assert_true(got.loss[k] == 0.0f);
        }
        he_check_zero_rows("all ignored: grad_student_hidden", got.gxs, g_dtypes[d], s.t, s.hs,
                           s.hs);
        he_check_zero_rows("all ignored: grad_student_weight", got.gws, g_dtypes[d], s.v, s.hs,
                           s.hs);
        he_check_zero_rows("all ignored: grad_student_bias", got.gbs, g_dtypes[d], 1, s.v, s.v);
        tp_fused_out_free(&got);
        tp_fused_free(&p);
    }
}

static void test_fused_shapes(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{6, 1, 8}, {2, 262144, 8}, {1, 300, 16}, {1, 1, 1}};
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        for (size_t k = 0; k < TU_LEN(shapes); k++) {
            tp_fused_spec s = he_fused_spec(shapes[k][0], shapes[k][1], shapes[k][2]);
            s.labels = s.t > 1 ? TP_LABELS_MIXED : TP_LABELS_NONE;
            tp_fused p;
            tp_fused_make(&p, &s, g_dtypes[d], 1200 + k);
            char what[96];
            snprintf(what, sizeof what, "fused %s T=%lld V=%lld", distil_dtype_name(g_dtypes[d]),
                     (long long)s.t, (long long)s.v);
            he_fused_compare(what, &p, NULL);
            tp_fused_free(&p);
        }
    }
}

/* ignore_index may be any int64, also one inside [0, V): such labels are ignored, not valid. */
static void test_ignore_index_in_vocab(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_jsd_spec js = {.t = 8,
                          .v = 50,
                          .beta = 0.5f,
                          .labels = TP_LABELS_MIXED,
                          .grad = TP_GRAD_OUT,
                          .red = DISTIL_REDUCTION_NONE};
        tp_jsd j;
        tp_jsd_make(&j, &js, g_dtypes[d], 1500);
        j.d.ignore_index = 3;
        j.labels[0] = j.labels[5] = 3;
        he_jsd_compare("jsd ignore_index 3", &j, NULL);
        tp_jsd_free(&j);
        tp_fused_spec fs = he_fused_spec(9, 40, 8);
        tp_fused f;
        tp_fused_make(&f, &fs, g_dtypes[d], 1501);
        for (int64_t i = 0; i < fs.t; i++) {
            f.labels[i] = f.labels[i] == f.d.ignore_index || i == 0 ? 0 : f.labels[i];
        }
        f.d.ignore_index = 0;
        he_fused_compare("fused ignore_index 0", &f, NULL);
        tp_fused_free(&f);
    }
}

/* ---------------------------------------------------------------- invalid labels */

/* The call with labels that include out-of-range values; returns the status of the call and
 * the first synchronize after it, and the outputs. The error's message must hold `want`. */
static void he_fused_bad_labels_run(distil_ctx *ctx, const tp_fused *p, tp_fused_out *o,
                                    distil_status st[2], const char *want) {
    size_t es = distil_dtype_size(p->d.dtype), vb = (size_t)p->s.v * es;
    void *in[TP_FUSED_INPUTS];
    tp_fused_upload(ctx, p, in);
    void *loss = tu_alloc_poisoned(ctx, sizeof o->loss);
    void *g[3] = {tu_alloc_poisoned(ctx, p->n_xs * es), tu_alloc_poisoned(ctx, p->n_ws * es),
                  tu_alloc_poisoned(ctx, vb)};
    size_t gb[3] = {p->n_xs * es, p->n_ws * es, vb};
    st[0] = distil_fused_linear_jsd(ctx, &p->d, in[0], in[1], in[2], in[3], in[4], in[5], in[6],
                                    loss, g[0], g[1], g[2]);
    st[1] = distil_ctx_synchronize(ctx);
    if (st[0] == DISTIL_ERR_INVALID_LABEL || st[1] == DISTIL_ERR_INVALID_LABEL) {
        TU_CHECK_MESSAGE(ctx, want);
    }
    TU_OK(ctx, distil_ctx_synchronize(ctx)); /* reported once */
    tu_download(ctx, o->loss, loss, sizeof o->loss);
    void **out[3] = {&o->gxs, &o->gws, &o->gbs};
    for (int i = 0; i < 3; i++) {
        *out[i] = malloc(gb[i]);
        tu_download(ctx, *out[i], g[i], gb[i]);
        distil_free(ctx, g[i]);
    }
    distil_free(ctx, loss);
    for (int i = 0; i < TP_FUSED_INPUTS; i++) {
        distil_free(ctx, in[i]);
    }
}

/* Exactly one of (call, synchronize) reports DISTIL_ERR_INVALID_LABEL, the other is OK. */
static void he_check_deferred(const distil_status st[2]) {
    bool now = st[0] == DISTIL_ERR_INVALID_LABEL && st[1] == DISTIL_OK;
    bool later = st[0] == DISTIL_OK && st[1] == DISTIL_ERR_INVALID_LABEL;
    if (!now && !later) {
        print_error("call %s, synchronize %s: want INVALID_LABEL from exactly one\n",
                    distil_status_string(st[0]), distil_status_string(st[1]));
        fail();
    }
}

/* The bad labels' rows are ignored (outputs as the reference's) and the first is reported. */
static void he_fused_bad_labels_check(tp_fused *p, const char *want) {
    const tp_fused_spec s = p->s;
    const distil_dtype dt = p->d.dtype;
    tp_fused_out got = {0}, ref = {0};
    distil_status sg[2], sr[2];
    he_fused_bad_labels_run(g_ctx, p, &got, sg, want);
    he_fused_bad_labels_run(g_ref, p, &ref, sr, want);
    he_check_deferred(sg);
    he_check_deferred(sr);
    double tol = tu_tolerance(dt, TU_GRAD_FUSED);
    for (int k = 0; k < 3; k++) {
        he_check_scalar("bad labels: loss", got.loss[k], ref.loss[k], tu_tolerance(dt, TU_LOSS));
    }
    he_check_rows("bad labels: gxs", got.gxs, ref.gxs, dt, s.t, s.hs, s.hs, tol, NULL);
    he_check_rows("bad labels: gws", got.gws, ref.gws, dt, s.v, s.hs, s.hs, tol, NULL);
    he_check_rows("bad labels: gbs", got.gbs, ref.gbs, dt, 1, s.v, s.v, tol, NULL);
    tp_fused_out_free(&got), tp_fused_out_free(&ref);
}

/* The first bad row among many, where the one label check (count_valid) runs the rows strided
 * over threads (any power-of-two work-group of 16 to 256 threads): row 261 is met by a thread
 * with a lower index, in a later stride, than row 140, and row 396 by row 140's thread in a later
 * stride; across 64-row chunks. */
static void test_fused_labels_first_bad_row(void **state) {
    (void)state;
    tp_fused_spec s = he_fused_spec(420, 40, 8);
    s.chunk = 64;
    tp_fused p;
    tp_fused_make(&p, &s, DISTIL_F32, 1301);
    p.labels[396] = 5000, p.labels[261] = 40, p.labels[140] = -7, p.labels[290] = INT64_MIN;
    he_fused_bad_labels_check(&p, "row 140 has label -7");
    tp_fused_free(&p);
}

static void test_fused_labels_out_of_range(void **state) {
    (void)state;
    for (size_t d = 0; d < TU_LEN(g_dtypes); d++) {
        tp_fused_spec s = he_fused_spec(12, 40, 8);
        s.chunk = 5;
        tp_fused p;
        tp_fused_make(&p, &s, g_dtypes[d], 1300);
        p.labels[3] = 40, p.labels[6] = -1, p.labels[8] = INT64_MAX, p.labels[11] = INT64_MIN;
        he_fused_bad_labels_check(&p, "row 3");
        tp_fused_free(&p);
    }
}

/* Uploads the inputs of p; in[] as distil_fused_linear_jsd takes them (biases NULL). */
static void he_upload_fused(distil_ctx *ctx, const tp_fused *p, void *in[7]) {
    size_t es = distil_dtype_size(p->d.dtype);
    in[0] = tu_upload(ctx, p->xs, p->n_xs * es);
    in[1] = tu_upload(ctx, p->ws, p->n_ws * es);
    in[2] = NULL;
    in[3] = tu_upload(ctx, p->xt, p->n_xt * es);
    in[4] = tu_upload(ctx, p->wt, p->n_wt * es);
    in[5] = NULL;
    in[6] = tu_upload(ctx, p->labels, (size_t)p->s.t * sizeof(int64_t));
}

/*
 * A deferred label error is the business of distil_ctx_synchronize: a later, valid call that
 * needs a larger workspace (the core waits for the stream before it grows the workspace) must
 * neither fail with it nor lose it. Host backends report it from the bad call itself; GPU
 * backends from the next synchronize, once.
 */
static void test_deferred_label_next_call(void **state) {
    (void)state;
    tp_fused_spec s = he_fused_spec(4, 30, 4);
    s.bias_s = s.bias_t = false;
    s.grads = 0;
    tp_fused bad, good;
    tp_fused_make(&bad, &s, DISTIL_F32, 1400);
    bad.labels[1] = 99;
    s.t = 40;
    tp_fused_make(&good, &s, DISTIL_F32, 1401);
    distil_ctx *ctx = tu_ctx(g_backend);
    void *in_bad[7], *in_good[7];
    he_upload_fused(ctx, &bad, in_bad);
    he_upload_fused(ctx, &good, in_good);
    void *loss = tu_alloc_poisoned(ctx, 4 * sizeof(float));
    distil_status first =
        distil_fused_linear_jsd(ctx, &bad.d, in_bad[0], in_bad[1], NULL, in_bad[3], in_bad[4], NULL,
                                in_bad[6], loss, NULL, NULL, NULL);
    assert_true(first == DISTIL_OK || first == DISTIL_ERR_INVALID_LABEL);
    TU_OK(ctx, distil_fused_linear_jsd(ctx, &good.d, in_good[0], in_good[1], NULL, in_good[3],
                                       in_good[4], NULL, in_good[6], loss, NULL, NULL, NULL));
    distil_status later = distil_ctx_synchronize(ctx);
    assert_int_equal(later, first == DISTIL_OK ? DISTIL_ERR_INVALID_LABEL : DISTIL_OK);
    if (later != DISTIL_OK) {
        TU_CHECK_MESSAGE(ctx, "row 1");
    }
    TU_OK(ctx, distil_ctx_synchronize(ctx)); /* reported once */
    distil_free(ctx, loss);
    for (int i = 0; i < 7; i++) {
        distil_free(ctx, in_bad[i]);
        distil_free(ctx, in_good[i]);
    }
    distil_ctx_destroy(ctx);
    tp_fused_free(&bad), tp_fused_free(&good);
}

/* ---------------------------------------------------------------- groups */

static int group_setup(void **state) {
    (void)state;
    return distil_ctx_create(&g_ctx, g_backend, 0) != DISTIL_OK ||
           distil_ctx_create(&g_ref, "ref", 0) != DISTIL_OK;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx), distil_ctx_destroy(g_ref);
    g_ctx = g_ref = NULL;
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsd_extreme_logits),
        cmocka_unit_test(test_jsd_extreme_weights),
        cmocka_unit_test(test_jsd_nan_inf_rows),
        cmocka_unit_test(test_jsd_nan_in_ignored_row),
        cmocka_unit_test(test_jsd_neg_inf),
        cmocka_unit_test(test_jsd_all_ignored),
        cmocka_unit_test(test_jsd_labels_any_value),
        cmocka_unit_test(test_jsd_shapes),
        cmocka_unit_test(test_fused_extreme_logits),
        cmocka_unit_test(test_fused_extreme_weights),
        cmocka_unit_test(test_fused_nan_rows),
        cmocka_unit_test(test_fused_neg_inf_bias),
        cmocka_unit_test(test_fused_all_ignored),
        cmocka_unit_test(test_fused_shapes),
        cmocka_unit_test(test_ignore_index_in_vocab),
        cmocka_unit_test(test_fused_labels_out_of_range),
        cmocka_unit_test(test_fused_labels_first_bad_row),
        cmocka_unit_test(test_deferred_label_next_call),
    };
    return cmocka_run_group_tests_name(tu_group_name("edges", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, false);
}
