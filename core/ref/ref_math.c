/* ref_math.c - the float64 row math of docs/SPEC.md §1, shared by both reference losses. */
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

/* The element terms of docs/SPEC.md §1 (core/backend_api/math/distil_elem.h) instantiated in
 * float64. */
#include "math/distil_elem_f64.h"

double distil_ref_div_row(const double *x, const double *y, int64_t n, const distil_elem_beta *kb,
                          double *grad) {
    de_coef k;
    DE_COEF_SET(k, *kb);
    double sum = 0.0;
    for (int64_t v = 0; v < n; v++) {
        double g, q;
        sum += de_elem(k.mode, &k, x[v], y[v], &g, &q);
        if (grad != NULL) {
            grad[v] = g;
        }
    }
    return sum;
}

double distil_ref_normaliser(float normaliser, distil_dptr normaliser_device, double counted) {
    double n = counted;
    if (normaliser != 0.0f) {
        n = normaliser;
    } else if (distil_dptr_present(normaliser_device)) {
        n = *(const float *)distil_dptr_addr(normaliser_device);
    }
    return n > 0.0 ? n : 0.0;
}

double distil_ref_elem(const distil_elem_beta *kb, double x, double y, double *g) {
    de_coef k;
    DE_COEF_SET(k, *kb);
    double q;
    return de_elem(k.mode, &k, x, y, g, &q);
}
