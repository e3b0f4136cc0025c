/*
 * test_ref.c - the float64 reference backend "ref" (the oracle of every parity test) against
 * closed forms computed here in double: zero divergence of identical inputs, the beta endpoints
 * as the two KL directions, the beta <-> 1 - beta symmetry, reductions and ignored rows, the
 * 0 log 0 rules for -inf, NaN propagation, tiny probabilities, the fused loss forward, and
 * central finite differences of every gradient (docs/SPEC.md §1 and §2); the divergences of
 * docs/SPEC.md §6 against their direct forms, their exact endpoints and central differences,
 * tau^2 and the given normaliser.
 */
#include "test_problems.h" /* tp_div_count */
#include "test_util.h"

#include "math/distil_elem_beta.h" /* distil_elem_div_make: which divergences read alpha */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static distil_ctx *g_ref;

static int group_setup(void **state) {
    (void)state;
    return distil_ctx_create(&g_ref, "ref", 0) == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ref);
    return 0;
}

/* ---------------------------------------------------------------- running ref */

/* distil_jsd on ref, fp32 host arrays in and out through the public memory API.
 * loss: 1 value, or rows values for NONE; grad (rows, d->grad_stride or vocab) or NULL. */
static void ref_jsd(const distil_jsd_desc *d, const float *x, const float *y, const int64_t *labels,
                    float *loss, float *grad) {
    int64_t xs = d->student_stride ? d->student_stride : d->vocab;
    int64_t ys = d->teacher_stride ? d->teacher_stride : d->vocab;
    int64_t gs = d->grad_stride ? d->grad_stride : d->vocab;
    size_t nloss = d->reduction == DISTIL_REDUCTION_NONE ? (size_t)d->rows : 1;
    void *dx = tu_upload(g_ref, x, (size_t)(d->rows * xs) * 4);
    void *dy = tu_upload(g_ref, y, (size_t)(d->rows * ys) * 4);
    void *dl = labels ? tu_upload(g_ref, labels, (size_t)d->rows * 8) : NULL;
    void *dloss = tu_alloc_poisoned(g_ref, nloss * 4);
    void *dgrad = grad ? tu_alloc_poisoned(g_ref, (size_t)(d->rows * gs) * 4) : NULL;
    TU_OK(g_ref, distil_jsd(g_ref, d, dx, dy, dl, dloss, dgrad));
    tu_download(g_ref, loss, dloss, nloss * 4);
    TU_CHECK_WRITTEN("ref loss", loss, DISTIL_F32, 1, (int64_t)nloss, (int64_t)nloss, true);
    if (grad) {
        tu_download(g_ref, grad, dgrad, (size_t)(d->rows * gs) * 4);
        TU_CHECK_WRITTEN("ref grad", grad, DISTIL_F32, d->rows, d->vocab, gs, true);
    }
    void *all[] = {dx, dy, dl, dloss, dgrad};
    for (size_t i = 0; i < TU_LEN(all); i++) {
        distil_free(g_ref, all[i]);
    }
}

static distil_jsd_desc jsd_desc(int64_t rows, int64_t vocab, float beta, distil_reduction red) {
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = rows, d.vocab = vocab, d.beta = beta, d.reduction = red;
    return d;
}

/* Host fp32 inputs of a fused problem (dense). */
typedef struct fused_in {
    int64_t t, v, hs, ht;
    float *xs, *ws, *bs, *xt, *wt, *bt; /* bs, bt may be NULL */
    int64_t *labels;
} fused_in;

static fused_in fused_in_make(tu_rng *r, int64_t t, int64_t v, int64_t hs, int64_t ht, bool bias,
                              double scale) {
    fused_in p = {t, v, hs, ht, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    p.xs = malloc((size_t)(t * hs) * 4), p.ws = malloc((size_t)(v * hs) * 4);
    p.xt = malloc((size_t)(t * ht) * 4), p.wt = malloc((size_t)(v * ht) * 4);
    p.labels = malloc((size_t)t * 8);
    tu_fill_normal(r, p.xs, DISTIL_F32, (size_t)(t * hs), 1.0);
    tu_fill_normal(r, p.ws, DISTIL_F32, (size_t)(v * hs), scale / sqrt((double)hs));
    tu_fill_normal(r, p.xt, DISTIL_F32, (size_t)(t * ht), 1.0);
    tu_fill_normal(r, p.wt, DISTIL_F32, (size_t)(v * ht), scale / sqrt((double)ht));
    if (bias) {
        p.bs = malloc((size_t)v * 4), p.bt = malloc((size_t)v * 4);
        tu_fill_normal(r, p.bs, DISTIL_F32, (size_t)v, 0.5);
        tu_fill_normal(r, p.bt, DISTIL_F32, (size_t)v, 0.5);
    }
    for (int64_t i = 0; i < t; i++) {
        p.labels[i] = tu_rand_int(r, v);
    }
    return p;
}

static void fused_in_free(fused_in *p) {
    free(p->xs), free(p->ws), free(p->bs), free(p->xt), free(p->wt), free(p->bt);
    free(p->labels);
}

static distil_fused_linear_jsd_desc fused_desc(const fused_in *p, float w_hard, float w_soft,
                                               float beta, float tau) {
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = p->t, d.vocab = p->v, d.student_hidden = p->hs, d.teacher_hidden = p->ht;
    d.dtype = DISTIL_F32, d.weight_hard = w_hard, d.weight_soft = w_soft, d.beta = beta;
    d.temperature = tau, d.return_parts = 1;
    return d;
}

/* Gradients of a fused call; NULL members are not asked for. */
typedef struct fused_grads {
    float *gxs, *gws, *gbs;
} fused_grads;

static void ref_fused(const distil_fused_linear_jsd_desc *d, const fused_in *p, float loss[3],
                      fused_grads g) {
    size_t nxs = (size_t)(p->t * p->hs), nws = (size_t)(p->v * p->hs), nv = (size_t)p->v;
    void *dxs = tu_upload(g_ref, p->xs, nxs * 4), *dws = tu_upload(g_ref, p->ws, nws * 4);
    void *dxt = tu_upload(g_ref, p->xt, (size_t)(p->t * p->ht) * 4);
    void *dwt = tu_upload(g_ref, p->wt, (size_t)(p->v * p->ht) * 4);
    void *dbs = p->bs ? tu_upload(g_ref, p->bs, nv * 4) : NULL;
    void *dbt = p->bt ? tu_upload(g_ref, p->bt, nv * 4) : NULL;
    void *dl = tu_upload(g_ref, p->labels, (size_t)p->t * 8);
    void *dloss = tu_alloc_poisoned(g_ref, 3 * 4);
    void *dgxs = g.gxs ? tu_alloc_poisoned(g_ref, nxs * 4) : NULL;
    void *dgws = g.gws ? tu_alloc_poisoned(g_ref, nws * 4) : NULL;
    void *dgbs = g.gbs ? tu_alloc_poisoned(g_ref, nv * 4) : NULL;
    TU_OK(g_ref, distil_fused_linear_jsd(g_ref, d, dxs, dws, dbs, dxt, dwt, dbt, dl, dloss, dgxs,
                                         dgws, dgbs));
    tu_download(g_ref, loss, dloss, (d->return_parts ? 3 : 1) * 4);
    tu_download(g_ref, g.gxs, dgxs, g.gxs ? nxs * 4 : 0);
    tu_download(g_ref, g.gws, dgws, g.gws ? nws * 4 : 0);
    tu_download(g_ref, g.gbs, dgbs, g.gbs ? nv * 4 : 0);
    void *all[] = {dxs, dws, dxt, dwt, dbs, dbt, dl, dloss, dgxs, dgws, dgbs};
    for (size_t i = 0; i < TU_LEN(all); i++) {
        distil_free(g_ref, all[i]);
    }
}

/* ---------------------------------------------------------------- closed forms in double */

/* KL(a || b) over log-probs la, lb, with 0 log 0 = 0: sum exp(la) (la - lb). */
static double kl(const float *la, const float *lb, int64_t n) {
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double pa = exp((double)la[v]);
        s += pa == 0.0 ? 0.0 : pa * ((double)la[v] - (double)lb[v]);
    }
    return s;
}

/* beta KL(p || m) + (1 - beta) KL(q || m), m = beta p + (1 - beta) q formed directly (valid
 * while the probabilities do not underflow). */
static double jsd_direct(const float *x, const float *y, int64_t n, double beta) {
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double q = exp((double)x[v]), p = exp((double)y[v]);
        double m = beta * p + (1.0 - beta) * q;
        s += (p > 0 ? beta * p * log(p / m) : 0.0) + (q > 0 ? (1.0 - beta) * q * log(q / m) : 0.0);
    }
    return s;
}

static double logaddexp(double a, double b) {
    double mx = a > b ? a : b;
    return mx == -INFINITY ? -INFINITY : mx + log(exp(a - mx) + exp(b - mx));
}

/* docs/SPEC.md §1: the element terms and d/dx, in log space, with the 0-probability rules. */
static double jsd_row_spec(const float *xr, const float *yr, int64_t n, double beta, double *grad) {
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double x = xr[v], y = yr[v], q = exp(x), p = exp(y), e, g;
        if (beta == 0.0) {
            e = p == 0 ? 0.0 : p * (y - x), g = -p;
        } else if (beta == 1.0) {
            e = q == 0 ? 0.0 : q * (x - y), g = q == 0 ? 0.0 : q * (x - y + 1.0);
        } else {
            double lm = logaddexp(log(beta) + y, log(1.0 - beta) + x);
            double tp = p == 0 ? 0.0 : beta * p * (y - lm);
            double tq = q == 0 ? 0.0 : (1.0 - beta) * q * (x - lm);
            e = tp + tq, g = tq;
        }
        s += e;
        if (grad) {
            grad[v] = g;
        }
    }
    return s;
}

/* log_softmax(z / tau) of one row into out. */
static void log_softmax(const double *z, int64_t n, double tau, double *out) {
    double mx = -INFINITY, s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        mx = fmax(mx, z[v] / tau);
    }
    for (int64_t v = 0; v < n; v++) {
        s += exp(z[v] / tau - mx);
    }
    for (int64_t v = 0; v < n; v++) {
        out[v] = z[v] / tau - mx - log(s);
    }
}

/* Row i of x (rows, h) times W (v, h) transposed plus bias, in double. */
static void logits_row(const float *x, const float *w, const float *b, int64_t i, int64_t v,
                       int64_t h, double *z) {
    for (int64_t c = 0; c < v; c++) {
        double s = b ? b[c] : 0.0;
        for (int64_t k = 0; k < h; k++) {
            s += (double)x[i * h + k] * w[c * h + k];
        }
        z[c] = s;
    }
}

/* docs/SPEC.md §2 forward: out = {loss, sum CE / N, sum JSD / N}. */
static void fused_forward(const fused_in *p, const distil_fused_linear_jsd_desc *d, double out[3]) {
    int64_t v = p->v, n = 0;
    double *buf = malloc((size_t)(5 * v) * sizeof(double));
    assert_non_null(buf);
    double *zs = buf, *zt = buf + v, *ls = buf + 2 * v, *lt = buf + 3 * v, *l1 = buf + 4 * v;
    double ce = 0.0, js = 0.0;
    for (int64_t i = 0; i < p->t; i++) {
        if (p->labels[i] == d->ignore_index) {
            continue;
        }
        n++;
        logits_row(p->xs, p->ws, p->bs, i, v, p->hs, zs);
        logits_row(p->xt, p->wt, p->bt, i, v, p->ht, zt);
        log_softmax(zs, v, 1.0, l1);
        ce -= l1[p->labels[i]];
        log_softmax(zs, v, d->temperature, ls);
        log_softmax(zt, v, d->temperature, lt);
        double row = 0.0;
        for (int64_t c = 0; c < v; c++) {
            double x = ls[c], y = lt[c], q = exp(x), pp = exp(y), b = d->beta;
            if (b == 0.0) {
                row += pp * (y - x);
            } else if (b == 1.0) {
                row += q * (x - y);
            } else {
                double lm = logaddexp(log(b) + y, log(1.0 - b) + x);
                row += b * pp * (y - lm) + (1.0 - b) * q * (x - lm);
            }
        }
        js += row;
    }
    double nn = n > 0 ? (double)n : 1.0;
    out[1] = ce / nn, out[2] = js / nn;
    out[0] = d->weight_hard * out[1] + d->weight_soft * out[2];
    free(buf);
}

/* Element-wise |got - want| <= rtol |want| + atol. */
#define CHECK_ELEMS(what, got, want, n, rtol, atol)                                                \
    check_elems((what), (got), (want), (n), (rtol), (atol), __FILE__, __LINE__)
static void check_elems(const char *what, const float *got, const double *want, size_t n,
                        double rtol, double atol, const char *file, int line) {
    for (size_t k = 0; k < n; k++) {
        double err = fabs((double)got[k] - want[k]);
        if (!(err <= rtol * fabs(want[k]) + atol)) {
            print_error("%s[%zu]: got %.9g, want %.9g (|diff| %.3g)\n", what, k, (double)got[k],
                        want[k], err);
            _fail(file, line);
        }
    }
}

/* ref computes in double and rounds the result to fp32 once (2^-24 ~ 6e-8 relative); summing
 * in another order in double changes ~1e-15. 1e-6 leaves a wide margin for that and nothing
 * for a real formula error, which shows at >= 1e-3 here. */
#define REF_RTOL 1e-6

enum { T = 6, V = 9 };

static const float betas[] = {0.0f, 0.3f, 0.5f, 1.0f};

/* ---------------------------------------------------------------- JSD closed forms */

static void test_identical_inputs(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(1);
    float x[T * V], loss, grad[T * V];
    double want[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    for (size_t b = 0; b < TU_LEN(betas); b++) {
        distil_jsd_desc d = jsd_desc(T, V, betas[b], DISTIL_REDUCTION_SUM);
        ref_jsd(&d, x, x, NULL, &loss, grad);
        /* Divergence 0 up to double rounding in log m (~1e-16 per term). */
        assert_true(fabs(loss) <= 1e-12);
        /* x is a free variable: d/dx is -p at beta 0, q at beta 1, and 0 in between. */
        for (int k = 0; k < T * V; k++) {
            double q = exp((double)x[k]);
            want[k] = betas[b] == 0.0f ? -q : betas[b] == 1.0f ? q : 0.0;
        }
        CHECK_ELEMS("grad of identical inputs", grad, want, T * V, REF_RTOL, 1e-12);
    }
}

/* beta 0 is KL(p || q), beta 1 is KL(q || p), between them the direct mixture form. */
static void test_beta_closed_forms(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(2);
    float x[T * V], y[T * V], loss[T], grad[T * V];
    double want_grad[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    const float bs[] = {0.0f, 0.1f, 0.3f, 0.5f, 0.9f, 1.0f};
    for (size_t b = 0; b < TU_LEN(bs); b++) {
        distil_jsd_desc d = jsd_desc(T, V, bs[b], DISTIL_REDUCTION_NONE);
        ref_jsd(&d, x, y, NULL, loss, grad);
        for (int i = 0; i < T; i++) {
            const float *xi = x + i * V, *yi = y + i * V;
            double want = bs[b] == 0.0f   ? kl(yi, xi, V)
                          : bs[b] == 1.0f ? kl(xi, yi, V)
                                          : jsd_direct(xi, yi, V, bs[b]);
            TU_CHECK_REL("row loss vs closed form", loss[i], want, REF_RTOL);
            jsd_row_spec(xi, yi, V, bs[b], want_grad + i * V);
        }
        CHECK_ELEMS("grad vs docs/SPEC.md table", grad, want_grad, T * V, REF_RTOL, 1e-12);
    }
}

/* Swapping student and teacher and beta <-> 1 - beta leaves the loss unchanged (at 0.5: the
 * plain symmetry of the JSD). */
static void test_symmetry(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(3);
    float x[T * V], y[T * V], a, b;
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    const float bs[] = {0.5f, 0.0f, 0.3f};
    for (size_t k = 0; k < TU_LEN(bs); k++) {
        distil_jsd_desc d = jsd_desc(T, V, bs[k], DISTIL_REDUCTION_SUM);
        ref_jsd(&d, x, y, NULL, &a, NULL);
        d.beta = 1.0f - bs[k];
        ref_jsd(&d, y, x, NULL, &b, NULL);
        TU_CHECK_REL("loss with student and teacher swapped", b, a, REF_RTOL);
        assert_true(a > 0.0f);
    }
}

static void test_reductions(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(4);
    float x[T * V], y[T * V], rows[T], sum, mean, gsum[T * V], gmean[T * V], gnone[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    const int64_t labels[T] = {3, 7, 5, 7, 0, 2}; /* ignore_index 7: N = 4 */
    distil_jsd_desc d = jsd_desc(T, V, 0.4f, DISTIL_REDUCTION_NONE);
    d.ignore_index = 7;
    ref_jsd(&d, x, y, labels, rows, gnone);
    d.reduction = DISTIL_REDUCTION_SUM;
    ref_jsd(&d, x, y, labels, &sum, gsum);
    d.reduction = DISTIL_REDUCTION_BATCHMEAN;
    ref_jsd(&d, x, y, labels, &mean, gmean);
    double total = 0.0, want_g[T * V], want_mean[T * V];
    for (int i = 0; i < T; i++) {
        bool ignored = labels[i] == 7;
        double row = jsd_row_spec(x + i * V, y + i * V, V, 0.4, want_g + i * V);
        for (int v = 0; v < V; v++) {
            want_g[i * V + v] = ignored ? 0.0 : want_g[i * V + v];
            want_mean[i * V + v] = want_g[i * V + v] / 4.0;
        }
        if (ignored) {
            assert_true(rows[i] == 0.0f); /* exactly 0 */
        } else {
            TU_CHECK_REL("none: row loss", rows[i], row, REF_RTOL);
            total += row;
        }
    }
    TU_CHECK_REL("sum", sum, total, REF_RTOL);
    TU_CHECK_REL("batchmean = sum / N", mean, total / 4.0, REF_RTOL);
    CHECK_ELEMS("sum: grad", gsum, want_g, T * V, REF_RTOL, 0.0);
    CHECK_ELEMS("none: grad (of each row's own loss)", gnone, want_g, T * V, REF_RTOL, 0.0);
    CHECK_ELEMS("batchmean: grad / N", gmean, want_mean, T * V, REF_RTOL, 0.0);

    /* grad_scale multiplies the gradient only; no labels means N = T. */
    d.grad_scale = 2.5f;
    ref_jsd(&d, x, y, NULL, &mean, gmean);
    double all = 0.0;
    for (int i = 0; i < T; i++) {
        all += jsd_row_spec(x + i * V, y + i * V, V, 0.4, want_g + i * V);
    }
    for (int k = 0; k < T * V; k++) {
        want_g[k] *= 2.5 / T;
    }
    TU_CHECK_REL("batchmean without labels", mean, all / T, REF_RTOL);
    CHECK_ELEMS("grad_scale 2.5", gmean, want_g, T * V, REF_RTOL, 0.0);
}

static void test_all_ignored(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(5);
    float x[T * V], y[T * V], loss[T], grad[T * V];
    double zeros[T * V] = {0};
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    int64_t labels[T];
    for (int i = 0; i < T; i++) {
        labels[i] = -100;
    }
    for (int red = 0; red < 3; red++) {
        distil_jsd_desc d = jsd_desc(T, V, 0.5f, (distil_reduction)red);
        ref_jsd(&d, x, y, labels, loss, grad);
        for (int i = 0; i < (red == DISTIL_REDUCTION_NONE ? T : 1); i++) {
            assert_true(loss[i] == 0.0f);
        }
        CHECK_ELEMS("grad of an all-ignored batch", grad, zeros, T * V, 0.0, 0.0);
    }
}

/* -inf log-probs: 0 log 0 = 0, and an infinite divergence is +inf, never NaN. */
static void test_neg_inf(void **state) {
    (void)state;
    enum { W = 5 };
    const float ninf = -INFINITY;
    /* Row 0: a token masked in both; row 1: masked in the teacher only (p = 0, q > 0);
     * row 2: masked in the student only (q = 0, p > 0). */
    const float x[3 * W] = {-1.0f, ninf,  -2.0f, -0.7f, -3.0f, -1.2f, -0.9f, -2.5f,
                            -1.9f, -3.3f, ninf,  -0.4f, -1.6f, -2.2f, -3.1f};
    const float y[3 * W] = {-1.5f, ninf,  -1.0f, -1.3f, -2.0f, ninf,  -0.6f, -1.1f,
                            -2.8f, -2.4f, -2.6f, -0.9f, -1.3f, -1.7f, -2.9f};
    float loss[3], grad[3 * W];
    double want_g[3 * W];
    for (size_t b = 0; b < TU_LEN(betas); b++) {
        distil_jsd_desc d = jsd_desc(3, W, betas[b], DISTIL_REDUCTION_NONE);
        ref_jsd(&d, x, y, NULL, loss, grad);
        for (int i = 0; i < 3; i++) {
            double want = jsd_row_spec(x + i * W, y + i * W, W, betas[b], want_g + i * W);
            assert_false(isnan(loss[i]));
            TU_CHECK_REL("row loss with -inf entries", loss[i], want, REF_RTOL);
        }
        /* +inf at beta 1 for row 1 (q > 0 = p) and at beta 0 for row 2 (p > 0 = q). */
        assert_true((isinf(loss[1]) != 0) == (betas[b] == 1.0f));
        assert_true((isinf(loss[2]) != 0) == (betas[b] == 0.0f));
        for (int k = 0; k < 3 * W; k++) {
            assert_false(isnan(grad[k]));
            if (isfinite(want_g[k])) {
                CHECK_ELEMS("grad with -inf entries", grad + k, want_g + k, 1, REF_RTOL, 1e-12);
            }
        }
        assert_true(grad[1] == 0.0f); /* p = q = 0: no gradient */
    }
}

static void test_nan_propagates(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(6);
    float x[T * V], y[T * V], loss[T], grad[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    for (int which = 0; which < 2; which++) {
        float *p = which ? y : x;
        float keep = p[2 * V + 4];
        p[2 * V + 4] = NAN;
        for (size_t b = 0; b < TU_LEN(betas); b++) {
            distil_jsd_desc d = jsd_desc(T, V, betas[b], DISTIL_REDUCTION_NONE);
            ref_jsd(&d, x, y, NULL, loss, grad);
            for (int i = 0; i < T; i++) {
                assert_true((isnan(loss[i]) != 0) == (i == 2));
            }
            d.reduction = DISTIL_REDUCTION_BATCHMEAN;
            ref_jsd(&d, x, y, NULL, loss, grad);
            assert_true(isnan(loss[0]));
        }
        p[2 * V + 4] = keep;
    }
}

/* Probabilities that underflow even in double (log-probs near -800): log m must come from
 * logaddexp, not log(beta e^y + (1 - beta) e^x), or 0 * log 0 turns into NaN. */
static void test_tiny_probabilities(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(7);
    float x[T * V], y[T * V], loss[T], grad[T * V];
    double want_g[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    for (int i = 0; i < T; i++) {
        x[i * V + 1] = -800.0f, y[i * V + 1] = -760.0f;
        x[i * V + 5] = -900.0f - (float)i, y[i * V + 5] = -905.0f;
    }
    for (size_t b = 0; b < TU_LEN(betas); b++) {
        distil_jsd_desc d = jsd_desc(T, V, betas[b], DISTIL_REDUCTION_NONE);
        ref_jsd(&d, x, y, NULL, loss, grad);
        for (int i = 0; i < T; i++) {
            double want = jsd_row_spec(x + i * V, y + i * V, V, betas[b], want_g + i * V);
            TU_CHECK_REL("row loss with tiny probabilities", loss[i], want, REF_RTOL);
        }
        CHECK_ELEMS("grad with tiny probabilities", grad, want_g, T * V, REF_RTOL, 1e-12);
    }
}

/* ---------------------------------------------------------------- fused loss closed forms */

enum { FT = 3, FV = 7, FHS = 4, FHT = 5 };

typedef struct fused_cfg {
    float w_hard, w_soft, beta, tau;
    bool bias;
    int64_t ignored_row; /* -1: none */
} fused_cfg;

static const fused_cfg fused_cfgs[] = {
    {0.5f, 0.5f, 0.5f, 1.0f, true, -1},  {0.3f, 1.0f, 0.0f, 2.0f, true, 1},
    {1.0f, 0.2f, 1.0f, 0.5f, false, -1}, {0.0f, 1.0f, 0.3f, 1.5f, true, 0},
    {1.0f, 0.0f, 0.7f, 1.0f, true, -1},  {0.5f, 0.5f, 0.9f, 0.7f, false, 2},
};

static void test_fused_forward(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(20);
    for (size_t c = 0; c < TU_LEN(fused_cfgs); c++) {
        const fused_cfg *k = &fused_cfgs[c];
        fused_in p = fused_in_make(&r, 6, 11, FHS, FHT, k->bias, 3.0);
        if (k->ignored_row >= 0) {
            p.labels[k->ignored_row] = -100;
        }
        distil_fused_linear_jsd_desc d = fused_desc(&p, k->w_hard, k->w_soft, k->beta, k->tau);
        float loss[3];
        double want[3];
        ref_fused(&d, &p, loss, (fused_grads){NULL, NULL, NULL});
        fused_forward(&p, &d, want);
        TU_CHECK_REL("fused loss", loss[0], want[0], REF_RTOL);
        TU_CHECK_REL("fused sum CE / N", loss[1], want[1], REF_RTOL);
        TU_CHECK_REL("fused sum JSD / N", loss[2], want[2], REF_RTOL);
        fused_in_free(&p);
    }
}

/* Student == teacher: the soft loss and its gradient vanish, whatever beta and tau. */
static void test_fused_identical(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(21);
    fused_in p = fused_in_make(&r, FT, FV, FHS, FHS, true, 3.0);
    memcpy(p.xt, p.xs, sizeof(float) * FT * FHS);
    memcpy(p.wt, p.ws, sizeof(float) * FV * FHS);
    memcpy(p.bt, p.bs, sizeof(float) * FV);
    float loss[3], gxs[FT * FHS], gws[FV * FHS], gbs[FV];
    double zeros[FV * FHS] = {0};
    for (size_t b = 0; b < TU_LEN(betas); b++) {
        distil_fused_linear_jsd_desc d = fused_desc(&p, 0.0f, 1.0f, betas[b], 1.7f);
        ref_fused(&d, &p, loss, (fused_grads){gxs, gws, gbs});
        /* Double rounding only (~1e-16 per term). */
        assert_true(fabs(loss[0]) <= 1e-12 && fabs(loss[2]) <= 1e-12);
        CHECK_ELEMS("grad_student_hidden", gxs, zeros, FT * FHS, 0.0, 1e-12);
        CHECK_ELEMS("grad_student_weight", gws, zeros, FV * FHS, 0.0, 1e-12);
        CHECK_ELEMS("grad_student_bias", gbs, zeros, FV, 0.0, 1e-12);
    }
    fused_in_free(&p);
}

/* Logits of about +-400 (800 after tau = 0.5, beyond exp's double range): a stable
 * log-sum-exp gives finite values equal to the closed form. */
static void test_fused_extreme_logits(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(22);
    fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, true, 400.0);
    distil_fused_linear_jsd_desc d = fused_desc(&p, 0.5f, 0.5f, 0.5f, 0.5f);
    float loss[3], gxs[FT * FHS], gws[FV * FHS], gbs[FV];
    double want[3];
    ref_fused(&d, &p, loss, (fused_grads){gxs, gws, gbs});
    fused_forward(&p, &d, want);
    assert_true(isfinite(want[0]));
    TU_CHECK_REL("fused loss, extreme logits", loss[0], want[0], REF_RTOL);
    TU_CHECK_WRITTEN("grad_student_hidden", gxs, DISTIL_F32, 1, FT * FHS, FT * FHS, false);
    TU_CHECK_WRITTEN("grad_student_weight", gws, DISTIL_F32, 1, FV * FHS, FV * FHS, false);
    fused_in_free(&p);
}

static void test_fused_nan_and_ignored(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(23);
    fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, false, 3.0);
    distil_fused_linear_jsd_desc d = fused_desc(&p, 0.5f, 0.5f, 0.5f, 1.0f);
    float loss[3], gws[FV * FHS];
    double zeros[FV * FHS] = {0};
    p.xt[FHT + 2] = NAN; /* the teacher of row 1 */
    ref_fused(&d, &p, loss, (fused_grads){NULL, gws, NULL});
    assert_true(isnan(loss[0]));
    p.xt[FHT + 2] = 0.5f;
    /* All rows ignored: N = max(1, 0), loss 0 and zero gradients. */
    for (int i = 0; i < FT; i++) {
        p.labels[i] = d.ignore_index = 5;
    }
    ref_fused(&d, &p, loss, (fused_grads){NULL, gws, NULL});
    assert_true(loss[0] == 0.0f && loss[1] == 0.0f && loss[2] == 0.0f);
    CHECK_ELEMS("grad_student_weight, all ignored", gws, zeros, FV * FHS, 0.0, 0.0);
    fused_in_free(&p);
}

/* ---------------------------------------------------------------- finite differences */

/*
 * Central differences of the ref loss, taken in fp32 inputs: the perturbed input is rounded to
 * fp32, so the step used is the difference of the two rounded values (exact in double), and the
 * loss comes back rounded to fp32. The error of a difference quotient is then about
 *   rounding:   2^-24 |L| / h          (the two fp32 losses, each off by half an ulp)
 *   truncation: h^2 |f'''| / 6
 * With h = 1e-2 and |L| <= ~5 the rounding term is ~3e-5 and the truncation term ~2e-5 |f'''|;
 * the bound below is 4x that estimate (|f'''| taken as 5 for tau = 0.5), plus 1e-3 relative.
 * A wrong gradient formula (a missing 1/tau, a sign, a dropped term) is off by >= 1e-1 here.
 */
#define FD_STEP 1e-2

static double fd_tolerance(double loss, double grad) {
    double rounding = ldexp(fabs(loss), -24) / FD_STEP;
    double truncation = FD_STEP * FD_STEP * 5.0 / 6.0;
    return 4.0 * (rounding + truncation) + 1e-3 * fabs(grad);
}

typedef double (*loss_of_inputs)(const void *arg);

/* Central difference of f with respect to a[k]. */
static double central_difference(float *a, size_t k, loss_of_inputs f, const void *arg) {
    float keep = a[k];
    float up = (float)(keep + FD_STEP), down = (float)(keep - FD_STEP);
    a[k] = up;
    double lu = f(arg);
    a[k] = down;
    double ld = f(arg);
    a[k] = keep;
    return (lu - ld) / ((double)up - (double)down);
}

static void check_fd(const char *what, float *a, const float *grad, size_t n, double loss,
                     loss_of_inputs f, const void *arg) {
    for (size_t k = 0; k < n; k++) {
        double fd = central_difference(a, k, f, arg);
        double tol = fd_tolerance(loss, grad[k]);
        if (!(fabs(fd - grad[k]) <= tol)) {
            print_error("%s[%zu]: analytic %.8g, central difference %.8g (tolerance %.3g)\n", what,
                        k, (double)grad[k], fd, tol);
            fail();
        }
    }
}

typedef struct jsd_fd_arg {
    const distil_jsd_desc *d;
    const float *x, *y;
} jsd_fd_arg;

static double jsd_loss_of(const void *arg) {
    const jsd_fd_arg *a = arg;
    float loss;
    ref_jsd(a->d, a->x, a->y, NULL, &loss, NULL);
    return loss;
}

/* d(sum of row losses)/dx for beta in {0, 0.3, 0.5, 1}; x is a free variable (no softmax). */
static void test_fd_jsd(void **state) {
    (void)state;
    enum { N = 3, W = 7 };
    tu_rng r = tu_rng_make(30);
    float x[N * W], y[N * W], loss, grad[N * W];
    tu_fill_logp(&r, x, DISTIL_F32, N, W, W, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, N, W, W, 2.0, NULL);
    for (size_t b = 0; b < TU_LEN(betas); b++) {
        distil_jsd_desc d = jsd_desc(N, W, betas[b], DISTIL_REDUCTION_SUM);
        ref_jsd(&d, x, y, NULL, &loss, grad);
        jsd_fd_arg arg = {&d, x, y};
        check_fd("d loss / d student_logp", x, grad, N * W, loss, jsd_loss_of, &arg);
    }
}

typedef struct fused_fd_arg {
    const distil_fused_linear_jsd_desc *d;
    const fused_in *p;
} fused_fd_arg;

static double fused_loss_of(const void *arg) {
    const fused_fd_arg *a = arg;
    float loss[3];
    ref_fused(a->d, a->p, loss, (fused_grads){NULL, NULL, NULL});
    return loss[0];
}

/* grad_xs, grad_Ws and grad_bs against central differences, over the configurations above
 * (several tau, beta, weights, an ignored row, bias present or absent). */
static void test_fd_fused(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(31);
    for (size_t c = 0; c < TU_LEN(fused_cfgs); c++) {
        const fused_cfg *k = &fused_cfgs[c];
        fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, true, 3.0);
        if (k->ignored_row >= 0) {
            p.labels[k->ignored_row] = -100;
        }
        distil_fused_linear_jsd_desc d = fused_desc(&p, k->w_hard, k->w_soft, k->beta, k->tau);
        float loss[3], gxs[FT * FHS], gws[FV * FHS], gbs[FV];
        ref_fused(&d, &p, loss, (fused_grads){gxs, gws, gbs});
        fused_fd_arg arg = {&d, &p};
        check_fd("grad_student_hidden", p.xs, gxs, FT * FHS, loss[0], fused_loss_of, &arg);
        check_fd("grad_student_weight", p.ws, gws, FV * FHS, loss[0], fused_loss_of, &arg);
        check_fd("grad_student_bias", p.bs, gbs, FV, loss[0], fused_loss_of, &arg);
        fused_in_free(&p);
    }
}

/* ---------------------------------------------------------------- docs/SPEC.md §6 */

/* Every divergence with the parameter it reads (beta for the JSD, alpha for the skew KLs), in
 * double, straight from docs/SPEC.md §1 and §6's row losses: m formed directly (valid for moderate
 * log-probs). */
static double div_direct(distil_divergence div, double beta, double alpha, const float *x,
                         const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double q = exp((double)x[v]), p = exp((double)y[v]), m = beta * p + (1.0 - beta) * q;
        switch (div) {
        case DISTIL_DIVERGENCE_JSD:
            s += beta * p * (log(p) - log(m)) + (1.0 - beta) * q * (log(q) - log(m));
            break;
        case DISTIL_DIVERGENCE_FORWARD_KL:
            s += p * (log(p) - log(q));
            break;
        case DISTIL_DIVERGENCE_REVERSE_KL:
            s += q * (log(q) - log(p));
            break;
        case DISTIL_DIVERGENCE_SKEW_KL:
            s += p * (log(p) - log(alpha * p + (1.0 - alpha) * q));
            break;
        case DISTIL_DIVERGENCE_SKEW_REVERSE_KL:
            s += q * (log(q) - log((1.0 - alpha) * p + alpha * q));
            break;
        case DISTIL_DIVERGENCE_TVD:
            s += 0.5 * fabs(p - q);
            break;
        default: /* a divergence of the library's list without its direct form here */
            fail_msg("div_direct: no direct form of divergence %s", distil_divergence_name(div));
        }
    }
    return s;
}

typedef struct div_case {
    distil_divergence div;
    float alpha;
} div_case;

/* Whether the divergence's mode and constants differ at alphas a and b (it reads alpha). */
static bool div_reads_alpha(distil_divergence div, float a, float b) {
    distil_elem_beta x = distil_elem_div_make(div, 0.5f, a), y = distil_elem_div_make(div, 0.5f, b);
    return x.mode != y.mode || x.beta != y.beta || x.omb != y.omb || x.lb != y.lb ||
           x.l1b != y.l1b || x.c != y.c || x.kd != y.kd;
}

/* Every divergence the library has (distil_divergence_name up to the first NULL): at alphas 0.1,
 * 0.5 and 0.9 where it reads alpha (the skew KLs), else once; the JSD's beta is jsd_desc's 0.5.
 * At most `max` cases. */
static size_t div_cases_make(div_case *cases, size_t max) {
    static const float alphas[] = {0.1f, 0.5f, 0.9f};
    size_t n = 0;
    for (int d = 0; d < tp_div_count(); d++) {
        distil_divergence div = (distil_divergence)d;
        for (size_t a = 0; a < TU_LEN(alphas) && n < max; a++) {
            if (a == 0 || div_reads_alpha(div, alphas[0], alphas[a])) {
                cases[n++] = (div_case){div, alphas[a]};
            }
        }
    }
    return n;
}

enum { DIV_MAX_CASES = 96 };

static distil_jsd_desc div_desc(const div_case *c, distil_reduction red) {
    distil_jsd_desc d = jsd_desc(T, V, 0.5f, red);
    d.divergence = c->div, d.alpha = c->alpha;
    return d;
}

/* Row losses against the direct forms of docs/SPEC.md §6. */
static void test_div_closed_forms(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(40);
    float x[T * V], y[T * V], loss[T];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    div_case cases[DIV_MAX_CASES];
    size_t n = div_cases_make(cases, TU_LEN(cases));
    for (size_t c = 0; c < n; c++) {
        distil_jsd_desc d = div_desc(&cases[c], DISTIL_REDUCTION_NONE);
        ref_jsd(&d, x, y, NULL, loss, NULL);
        for (int i = 0; i < T; i++) {
            double want = div_direct(d.divergence, d.beta, d.alpha, x + i * V, y + i * V, V);
            TU_CHECK_REL("row loss", loss[i], want, REF_RTOL);
        }
    }
}

/* One call's loss and gradient, as one array of T + T V floats, to compare two calls bitwise. */
static void div_run(const distil_jsd_desc *d, const float *x, const float *y, float *out) {
    ref_jsd(d, x, y, NULL, out, out + T);
}

/* The exact endpoints (docs/SPEC.md §6): FORWARD_KL / REVERSE_KL are the JSD at beta 0 / 1 and
 * the skew KLs at alpha 0, bit for bit; the skew KLs at alpha 1 are 0 with a zero gradient. */
static void test_div_endpoints(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(41);
    float x[T * V], y[T * V], a[T + T * V], b[T + T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    const struct {
        distil_divergence div;
        float beta;
        distil_divergence skew;
    } ends[] = {{DISTIL_DIVERGENCE_FORWARD_KL, 0.0f, DISTIL_DIVERGENCE_SKEW_KL},
                {DISTIL_DIVERGENCE_REVERSE_KL, 1.0f, DISTIL_DIVERGENCE_SKEW_REVERSE_KL}};
    for (size_t e = 0; e < TU_LEN(ends); e++) {
        distil_jsd_desc d = jsd_desc(T, V, ends[e].beta, DISTIL_REDUCTION_NONE);
        div_run(&d, x, y, a);
        d.beta = 0.5f, d.divergence = ends[e].div;
        div_run(&d, x, y, b);
        TU_CHECK_BITWISE("KL against the JSD endpoint", b, a, sizeof a);
        d.divergence = ends[e].skew, d.alpha = 0.0f;
        div_run(&d, x, y, b);
        TU_CHECK_BITWISE("skew KL at alpha 0 against the KL", b, a, sizeof a);
        d.alpha = 1.0f;
        div_run(&d, x, y, b);
        for (size_t k = 0; k < TU_LEN(b); k++) {
            assert_true(b[k] == 0.0f);
        }
    }
}

/* TVD: p = q gives exactly 0 and a zero gradient; a probability of 0 on either side is finite. */
static void test_div_tvd_special(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(42);
    float x[T * V], y[T * V], loss[T], grad[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    const div_case tvd = {DISTIL_DIVERGENCE_TVD, 0.1f};
    distil_jsd_desc d = div_desc(&tvd, DISTIL_REDUCTION_NONE);
    ref_jsd(&d, x, x, NULL, loss, grad);
    for (int k = 0; k < T * V; k++) {
        assert_true(grad[k] == 0.0f && (k >= T || loss[k] == 0.0f));
    }
    memcpy(y, x, sizeof y);
    x[1] = -INFINITY, y[V + 2] = -INFINITY;
    ref_jsd(&d, x, y, NULL, loss, grad);
    assert_true(isfinite(loss[0]) && isfinite(loss[1]));
    /* the inputs are not renormalised (docs/SPEC.md §1): one element differs in each row */
    TU_CHECK_REL("TVD with q = 0", loss[0], 0.5 * exp((double)y[1]), REF_RTOL);
    TU_CHECK_REL("TVD with p = 0", loss[1], 0.5 * exp((double)x[V + 2]), REF_RTOL);
}

/* docs/SPEC.md §6's element gradients against central differences of ref's loss, every
 * divergence (x free, no softmax). TVD's kink at p = q is not met by random inputs. */
static void test_div_fd_jsd(void **state) {
    (void)state;
    enum { N = 3, W = 7 };
    tu_rng r = tu_rng_make(43);
    float x[N * W], y[N * W], loss, grad[N * W];
    tu_fill_logp(&r, x, DISTIL_F32, N, W, W, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, N, W, W, 2.0, NULL);
    div_case cases[DIV_MAX_CASES];
    size_t n = div_cases_make(cases, TU_LEN(cases));
    for (size_t c = 0; c < n; c++) {
        distil_jsd_desc d = jsd_desc(N, W, 0.5f, DISTIL_REDUCTION_SUM);
        d.divergence = cases[c].div, d.alpha = cases[c].alpha;
        ref_jsd(&d, x, y, NULL, &loss, grad);
        jsd_fd_arg arg = {&d, x, y};
        check_fd("d divergence / d student_logp", x, grad, N * W, loss, jsd_loss_of, &arg);
    }
}

/* The fused loss with every divergence in its soft part (the softmax Jacobian of docs/SPEC.md §2
 * step 5 on top of §6's element gradient), and with tau^2, against central differences. */
static void test_div_fd_fused(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(44);
    div_case cases[DIV_MAX_CASES];
    size_t n = div_cases_make(cases, TU_LEN(cases));
    for (size_t c = 0; c < n; c++) {
        fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, true, 3.0);
        p.labels[1] = -100;
        distil_fused_linear_jsd_desc d = fused_desc(&p, 0.3f, 0.7f, 0.5f, c % 2 ? 1.5f : 0.8f);
        d.divergence = cases[c].div, d.alpha = cases[c].alpha;
        d.temperature_squared = (int)(c % 3 == 0);
        float loss[3], gxs[FT * FHS], gws[FV * FHS], gbs[FV];
        ref_fused(&d, &p, loss, (fused_grads){gxs, gws, gbs});
        fused_fd_arg arg = {&d, &p};
        check_fd("grad_student_hidden", p.xs, gxs, FT * FHS, loss[0], fused_loss_of, &arg);
        check_fd("grad_student_weight", p.ws, gws, FV * FHS, loss[0], fused_loss_of, &arg);
        check_fd("grad_student_bias", p.bs, gbs, FV, loss[0], fused_loss_of, &arg);
        fused_in_free(&p);
    }
}

/* tau^2 (docs/SPEC.md §6): loss = wh CE + tau^2 ws D, the parts as without it; the gradient is
 * that of weight_soft tau^2 without the option. */
static void test_div_tau_squared(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(45);
    fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, true, 3.0);
    const float tau = 1.7f;
    distil_fused_linear_jsd_desc d = fused_desc(&p, 0.4f, 0.6f, 0.5f, tau);
    float plain[3], sq[3], scaled[3], g1[FT * FHS], g2[FT * FHS];
    ref_fused(&d, &p, plain, (fused_grads){NULL, NULL, NULL});
    d.temperature_squared = 1;
    ref_fused(&d, &p, sq, (fused_grads){g1, NULL, NULL});
    TU_CHECK_REL("loss with tau^2", sq[0], 0.4 * plain[1] + (double)tau * tau * 0.6 * plain[2],
                 1e-6);
    assert_true(sq[1] == plain[1] && sq[2] == plain[2]);
    d.temperature_squared = 0;
    d.weight_soft = (float)((double)0.6f * (double)tau * (double)tau);
    ref_fused(&d, &p, scaled, (fused_grads){g2, NULL, NULL});
    TU_CHECK_BITWISE("grad with tau^2", g1, g2, sizeof g1);
    fused_in_free(&p);
}

/* A given N (docs/SPEC.md §6) replaces the count: host value and device scalar alike; labels
 * still ignore rows; N <= 0 from the device gives loss and gradient 0. */
static void test_div_normaliser(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(46);
    float x[T * V], y[T * V], sum, sum_g[T * V], loss, grad[T * V];
    int64_t labels[T] = {1, -100, 2, 3, -100, 0};
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    distil_jsd_desc d = jsd_desc(T, V, 0.3f, DISTIL_REDUCTION_SUM);
    ref_jsd(&d, x, y, labels, &sum, sum_g);
    const float n = 11.5f;
    double want_g[T * V];
    for (int k = 0; k < T * V; k++) {
        want_g[k] = sum_g[k] / (double)n;
    }
    d.reduction = DISTIL_REDUCTION_BATCHMEAN, d.normaliser = n;
    ref_jsd(&d, x, y, labels, &loss, grad);
    TU_CHECK_REL("loss / host N", loss, sum / (double)n, REF_RTOL);
    CHECK_ELEMS("grad / host N", grad, want_g, T * V, REF_RTOL, 0.0);
    const float dev_values[] = {n, 0.0f, -2.0f};
    for (size_t k = 0; k < TU_LEN(dev_values); k++) {
        float *dn = tu_upload(g_ref, &dev_values[k], sizeof(float));
        d.normaliser = 0.0f, d.normaliser_device = dn;
        ref_jsd(&d, x, y, labels, &loss, grad);
        d.normaliser_device = NULL;
        distil_free(g_ref, dn);
        double scale = dev_values[k] > 0.0f ? 1.0 / (double)dev_values[k] : 0.0;
        for (int e = 0; e < T * V; e++) {
            want_g[e] = sum_g[e] * scale;
        }
        TU_CHECK_REL("loss / device N", loss, sum * scale, REF_RTOL);
        CHECK_ELEMS("grad / device N", grad, want_g, T * V, REF_RTOL, 0.0);
    }
}

/* The fused loss with a given N: loss and parts are the counted ones times count / N. */
static void test_div_normaliser_fused(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(47);
    fused_in p = fused_in_make(&r, FT, FV, FHS, FHT, true, 3.0);
    p.labels[0] = -100; /* FT - 1 rows counted */
    distil_fused_linear_jsd_desc d = fused_desc(&p, 0.5f, 0.5f, 0.5f, 1.0f);
    float counted[3], given[3];
    ref_fused(&d, &p, counted, (fused_grads){NULL, NULL, NULL});
    d.normaliser = 64.0f;
    ref_fused(&d, &p, given, (fused_grads){NULL, NULL, NULL});
    for (int k = 0; k < 3; k++) {
        TU_CHECK_REL("fused loss / host N", given[k], counted[k] * (FT - 1) / 64.0, REF_RTOL);
    }
    fused_in_free(&p);
}

int main(void) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_inputs),
        cmocka_unit_test(test_beta_closed_forms),
        cmocka_unit_test(test_symmetry),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_all_ignored),
        cmocka_unit_test(test_neg_inf),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_tiny_probabilities),
        cmocka_unit_test(test_fused_forward),
        cmocka_unit_test(test_fused_identical),
        cmocka_unit_test(test_fused_extreme_logits),
        cmocka_unit_test(test_fused_nan_and_ignored),
        cmocka_unit_test(test_fd_jsd),
        cmocka_unit_test(test_fd_fused),
        cmocka_unit_test(test_div_closed_forms),
        cmocka_unit_test(test_div_endpoints),
        cmocka_unit_test(test_div_tvd_special),
        cmocka_unit_test(test_div_fd_jsd),
        cmocka_unit_test(test_div_fd_fused),
        cmocka_unit_test(test_div_tau_squared),
        cmocka_unit_test(test_div_normaliser),
        cmocka_unit_test(test_div_normaliser_fused),
    };
    tu_apply_env();
    return cmocka_run_group_tests_name("ref", tests, group_setup, group_teardown);
}
