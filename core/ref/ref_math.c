/* ref_math.c - the float64 row math of SPEC section 1, shared by both reference losses. */
#include "ref.h"
#include "half.h"

#include <math.h>

double distil_ref_load(const void *p, distil_dtype dtype, int64_t i) {
    switch (dtype) {
    case DISTIL_BF16:
        return distil_bf16_to_f32(((const uint16_t *)p)[i]);
    case DISTIL_F16:
        return distil_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

void distil_ref_store(void *p, distil_dtype dtype, int64_t i, double v) {
    float f = (float)v;
    switch (dtype) {
    case DISTIL_BF16:
        ((uint16_t *)p)[i] = distil_f32_to_bf16(f);
        break;
    case DISTIL_F16:
        ((uint16_t *)p)[i] = distil_f32_to_f16(f);
        break;
    default:
        ((float *)p)[i] = f;
        break;
    }
}

double distil_ref_logaddexp(double a, double b) {
    if (isnan(a) || isnan(b)) {
        return NAN;
    }
    double m = a > b ? a : b;
    if (m == -INFINITY) {
        return -INFINITY;
    }
    return m + log1p(exp(-fabs(a - b)));
}

double distil_ref_logsumexp(const double *z, int64_t n, double scale) {
    double m = -INFINITY;
    for (int64_t v = 0; v < n; v++) {
        double t = z[v] * scale;
        if (isnan(t)) {
            return NAN;
        }
        m = t > m ? t : m;
    }
    if (m == -INFINITY || m == INFINITY) {
        return m;
    }
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        s += exp(z[v] * scale - m);
    }
    return m + log(s);
}

/* prob * (a - b) with the convention 0 * anything = 0 (a zero probability contributes 0). */
static double distil_ref_xlogy_term(double prob, double diff) {
    return prob == 0.0 ? 0.0 : prob * diff;
}

double distil_ref_jsd_row(const double *x, const double *y, int64_t n, double beta, double *grad) {
    double sum = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double q = exp(x[v]);
        double p = exp(y[v]);
        double e, g;
        if (beta == 0.0) { /* forward KL(p || q) */
            e = distil_ref_xlogy_term(p, y[v] - x[v]);
            g = -p;
        } else if (beta == 1.0) { /* reverse KL(q || p) */
            e = distil_ref_xlogy_term(q, x[v] - y[v]);
            g = q == 0.0 ? 0.0 : q * (x[v] - y[v] + 1.0);
        } else {
            double lm = distil_ref_logaddexp(log(beta) + y[v], log1p(-beta) + x[v]);
            e = beta * distil_ref_xlogy_term(p, y[v] - lm) +
                (1.0 - beta) * distil_ref_xlogy_term(q, x[v] - lm);
            g = (1.0 - beta) * distil_ref_xlogy_term(q, x[v] - lm);
        }
        sum += e;
        if (grad != NULL) {
            grad[v] = g;
        }
    }
    return sum;
}
