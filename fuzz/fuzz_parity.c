/*
 * fuzz_parity.c - the numeric oracles of a successful call on tame inputs (no special values):
 * a rerun gives the same bits (docs/SPEC.md §4), and a backend other than ref agrees with the
 * float64 ref within a loose multiple of the docs/SPEC.md §3 tolerances. Loose, because fuzzed
 * shapes are odd (V = 1, one row, tiny losses): these oracles look for logic errors, not ulps.
 */
#include "fuzz.h"

#include <math.h>
#include <string.h>

/* Loss: relative bound and absolute floor; gradients: bound on ||got - ref|| / ||ref||. */
static double fz_tol_loss(distil_dtype dt) {
    return dt == DISTIL_F32 ? 1e-4 : 6e-3;
}

static double fz_tol_grad(distil_dtype dt, bool fused) {
    if (dt == DISTIL_F32) {
        return fused ? 1e-3 : 1e-4;
    }
    return 3e-2;
}

void fz_same_bits(const char *what, const void *first, const void *second, size_t bytes) {
    if (memcmp(first, second, bytes) != 0) {
        const unsigned char *a = first, *b = second;
        size_t k = 0;
        while (a[k] == b[k]) {
            k++;
        }
        fz_fail("%s: a rerun on the same context differs at byte %zu of %zu", what, k, bytes);
    }
}

void fz_parity_loss(const char *what, const float *got, const float *ref, size_t n,
                    distil_dtype dt) {
    for (size_t k = 0; k < n; k++) {
        double g = got[k], r = ref[k];
        double floor = dt == DISTIL_F32 ? 1e-5 : 1e-3;
        bool same = g == r || (isnan(g) && isnan(r));
        if (!same && !(fabs(g - r) <= fz_tol_loss(dt) * fabs(r) + floor)) {
            fz_fail("%s: loss[%zu] = %.9g but ref gives %.9g", what, k, g, r);
        }
    }
}

void fz_parity_tensor(const char *what, const void *got, const void *ref, distil_dtype dt,
                      int64_t rows, int64_t width, int64_t ld, bool fused) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t v = 0; v < width; v++) {
            double g = fz_get_value(got, dt, (size_t)(i * ld + v));
            double r = fz_get_value(ref, dt, (size_t)(i * ld + v));
            if (g == r || (isnan(g) && isnan(r))) { /* NaN: both unwritten, or both NaN */
                den += isfinite(r) ? r * r : 0.0;
                continue;
            }
            num += (g - r) * (g - r);
            den += r * r;
        }
    }
    double floor = dt == DISTIL_F32 ? 1e-12 : 1e-6; /* a gradient that is all but zero */
    if (!(num <= fz_tol_grad(dt, fused) * fz_tol_grad(dt, fused) * den + floor)) {
        fz_fail("%s: ||got - ref|| / ||ref|| = %g (||ref|| = %g) over (%lld, %lld)", what,
                sqrt(num / (den > 0 ? den : 1e-300)), sqrt(den), (long long)rows, (long long)width);
    }
}
