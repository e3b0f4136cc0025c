/*
 * test_topk_ref.c - the float64 reference of the top-k losses (docs/SPEC.md §7) against central
 * finite differences of its own loss: for every tail policy and divergence of docs/SPEC.md §6
 * (forward KL, reverse KL, JSD(0.3), skew KL and skew reverse KL (alpha 0.3), TVD away from its
 * kink: topk_untie.c), the gradient of the log-prob form with respect to every student log-prob,
 * and of the fused form with respect to every student bias and hidden-state element (the CE, the
 * temperature and the softmax Jacobian included). This holds §7's gradient formulas to the loss
 * they differentiate; test_topk.c then holds every backend to the reference.
 */
#include "topk_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static distil_ctx *g_ref;

static const distil_topk_tail tails[] = {DISTIL_TOPK_TAIL, DISTIL_TOPK_RENORMALISE,
                                         DISTIL_TOPK_ZERO};
static const distil_divergence divs[] = {
    DISTIL_DIVERGENCE_FORWARD_KL, DISTIL_DIVERGENCE_REVERSE_KL,      DISTIL_DIVERGENCE_JSD,
    DISTIL_DIVERGENCE_SKEW_KL,    DISTIL_DIVERGENCE_SKEW_REVERSE_KL, DISTIL_DIVERGENCE_TVD};

static double loss_of(const tk_problem *p) {
    tk_out o;
    tk_run(g_ref, p, &o);
    assert_int_equal(o.st, DISTIL_OK);
    double l = o.loss[0];
    tk_out_free(&o);
    return l;
}

/* d loss / d v[i] by central differences (fp32 inputs: the step actually taken is used). */
static double fd_at(tk_problem *p, float *v, size_t i) {
    const float h = 2e-3f, x = v[i];
    v[i] = x + h;
    float up = v[i];
    double lp = loss_of(p);
    v[i] = x - h;
    float dn = v[i];
    double lm = loss_of(p);
    v[i] = x;
    return (lp - lm) / ((double)up - (double)dn);
}

/* ||fd - g|| / ||g|| over n values of v against the reference's gradient g. */
static void check_fd(const char *what, tk_problem *p, float *v, const float *g, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fd_at(p, v, i) - (double)g[i];
        num += d * d;
        den += (double)g[i] * (double)g[i];
    }
    double err = sqrt(num / den);
    if (!(err <= 2e-3)) {
        fail_msg("%s: finite differences differ by %.3g (norm, relative)", what, err);
    }
}

static bool infinite(distil_topk_tail tail, distil_divergence div) {
    return tail == DISTIL_TOPK_ZERO && div == DISTIL_DIVERGENCE_REVERSE_KL; /* q > 0 = p */
}

static void test_logp(void **state) {
    (void)state;
    for (size_t a = 0; a < TU_LEN(tails); a++) {
        for (size_t b = 0; b < TU_LEN(divs); b++) {
            if (infinite(tails[a], divs[b])) {
                continue;
            }
            tk_spec s = {.t = 3,
                         .v = 11,
                         .k = 4,
                         .tail = tails[a],
                         .div = divs[b],
                         .beta = 0.3f,
                         .alpha = 0.3f,
                         .red = DISTIL_REDUCTION_SUM,
                         .pad = true};
            tk_problem p;
            tk_make(&p, &s, DISTIL_F32, 700 + 8 * a + b);
            tk_out o;
            tk_run(g_ref, &p, &o);
            check_fd("grad_student", &p, p.x, o.gx, (size_t)(s.t * s.v));
            tk_out_free(&o);
            tk_free(&p);
        }
    }
}

static void test_fused(void **state) {
    (void)state;
    for (size_t a = 0; a < TU_LEN(tails); a++) {
        for (size_t b = 0; b < TU_LEN(divs); b++) {
            if (infinite(tails[a], divs[b])) {
                continue;
            }
            tk_spec s = {.fused = true,
                         .t = 3,
                         .v = 11,
                         .hs = 3,
                         .k = 4,
                         .tail = tails[a],
                         .div = divs[b],
                         .beta = 0.3f,
                         .alpha = 0.3f,
                         .w_hard = 0.3f,
                         .w_soft = 0.7f,
                         .tau = 1.5f,
                         .bias = true,
                         .red = DISTIL_REDUCTION_SUM,
                         .pad = true};
            tk_problem p;
            tk_make(&p, &s, DISTIL_F32, 800 + 8 * a + b);
            tk_out o;
            tk_run(g_ref, &p, &o);
            check_fd("grad_student_bias", &p, p.bs, o.gb, (size_t)s.v);
            check_fd("grad_student_hidden", &p, p.xs, o.gx, (size_t)(s.t * s.hs));
            tk_out_free(&o);
            tk_free(&p);
        }
    }
}

/* docs/SPEC.md §7's argument for the zero policy: every element term is linear in q where p = 0,
 * so the dense loss (distil_jsd) against the teacher p on K and 0 (log-prob -inf) elsewhere
 * equals the top-k loss with its one tail outcome (log Q_t, -inf), loss and gradient, for each
 * divergence (reverse KL: both +inf, compared as such). */
static void test_zero_is_dense(void **state) {
    (void)state;
    for (size_t b = 0; b < TU_LEN(divs); b++) {
        tk_spec s = {.t = 3,
                     .v = 11,
                     .k = 4,
                     .tail = DISTIL_TOPK_ZERO,
                     .div = divs[b],
                     .beta = 0.3f,
                     .alpha = 0.3f,
                     .red = DISTIL_REDUCTION_SUM,
                     .pad = true};
        tk_problem p;
        tk_make(&p, &s, DISTIL_F32, 900 + b);
        float y[3 * 11], loss, *g = malloc(sizeof(float) * 3 * 11);
        for (size_t e = 0; e < TU_LEN(y); e++) {
            y[e] = -INFINITY;
        }
        for (int64_t e = 0; e < s.t * s.k; e++) {
            int64_t id = ((const int64_t *)p.ids)[e];
            if (id >= 0) {
                y[(e / s.k) * s.v + id] = ((const float *)p.logp)[e];
            }
        }
        distil_jsd_desc d;
        distil_jsd_desc_init(&d);
        d.rows = s.t, d.vocab = s.v, d.reduction = DISTIL_REDUCTION_SUM;
        d.divergence = s.div, d.beta = s.beta, d.alpha = s.alpha;
        assert_int_equal(distil_jsd(g_ref, &d, p.x, y, NULL, &loss, g), DISTIL_OK);
        tk_out o;
        tk_run(g_ref, &p, &o);
        assert_int_equal(o.st, DISTIL_OK);
        if (isinf(loss) || isinf(o.loss[0])) {
            assert_true(loss == o.loss[0]); /* reverse KL: q > 0 = p off K */
        } else {
            TU_CHECK_REL("loss", o.loss[0], loss, 1e-6);
            TU_CHECK_TENSOR("grad", o.gx, g, DISTIL_F32, s.t, s.v, s.v, 1e-6);
        }
        tk_out_free(&o);
        free(g);
        tk_free(&p);
    }
}

/* docs/SPEC.md §7's closed forms for forward KL, tau = 1, one row: the tail loss is
 * sum_K p (y - x) + P_t (log P_t - log Q_t), the zero policy's sum_K p (y - x). */
static void test_closed_forms(void **state) {
    (void)state;
    for (int zero = 0; zero <= 1; zero++) {
        tk_spec s = {.t = 1,
                     .v = 9,
                     .k = 3,
                     .tail = zero ? DISTIL_TOPK_ZERO : DISTIL_TOPK_TAIL,
                     .div = DISTIL_DIVERGENCE_FORWARD_KL,
                     .red = DISTIL_REDUCTION_SUM};
        tk_problem p;
        tk_make(&p, &s, DISTIL_F32, 740 + (uint64_t)zero);
        const float *x = p.x, *y = p.logp;
        const int64_t *id = p.ids;
        double want = 0.0, pk = 0.0, qk = 0.0, q_all = 0.0;
        for (int64_t j = 0; j < s.k; j++) {
            want += exp(y[j]) * (y[j] - x[id[j]]);
            pk += exp(y[j]);
            qk += exp(x[id[j]]);
        }
        for (int64_t v = 0; v < s.v; v++) {
            q_all += exp(x[v]);
        }
        if (!zero) {
            want += (1.0 - pk) * (log(1.0 - pk) - log(q_all - qk));
        }
        TU_CHECK_REL("loss", loss_of(&p), want, 1e-6);
        tk_free(&p);
    }
}

int main(void) {
    if (distil_ctx_create(&g_ref, "ref", 0) != DISTIL_OK) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logp),
        cmocka_unit_test(test_fused),
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_zero_is_dense),
    };
    int rc = cmocka_run_group_tests_name("topk_ref", tests, NULL, NULL);
    distil_ctx_destroy(g_ref);
    return rc;
}
