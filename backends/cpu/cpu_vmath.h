/*
 * cpu_vmath.h - SIMD helpers of the cpu row kernels, written with GCC/Clang vector extensions.
 *
 * Included by each ISA unit (cpu_kern_*.c) with CPU_VW (lanes per vector) defined: the same
 * source becomes SSE2, AVX2 or AVX-512 code from that unit's compile flags. Built without
 * -ffast-math, so infinities and NaN follow IEEE rules; each function says what it does with them.
 */
#ifndef DISTIL_CPU_VMATH_H
#define DISTIL_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(4 * CPU_VW)));
typedef int32_t vi __attribute__((vector_size(4 * CPU_VW)));
typedef uint32_t vu __attribute__((vector_size(4 * CPU_VW)));
typedef uint16_t vh __attribute__((vector_size(2 * CPU_VW)));
typedef double vd __attribute__((vector_size(8 * CPU_VW)));

static inline vf vf_set(float s) {
    vf v = {0};
    return v + s;
}
static inline vf vf_load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vf_store(float *p, vf v) {
    memcpy(p, &v, sizeof v);
}
/* m ? a : b lane by lane (m lanes are all ones or all zeros, as comparisons give). */
static inline vf vf_sel(vi m, vf a, vf b) {
    return (vf)(((vi)a & m) | ((vi)b & ~m));
}
/* m ? a : 0: one AND. Gives 0 * inf and 0 * -inf the value 0 (docs/SPEC.md §1: 0 log 0 = 0). */
static inline vf vf_and(vi m, vf a) {
    return (vf)((vi)a & m);
}
static inline vf vf_abs(vf a) {
    return (vf)((vi)a & 0x7fffffff);
}
/* Whether any lane of a comparison's mask is set: an OR of integer lanes, which the compiler
 * reduces in log2(CPU_VW) steps (a float sum of the lanes may not be reassociated). */
static inline int vi_any(vi m) {
    int32_t r = 0;
    for (int i = 0; i < CPU_VW; i++) {
        r |= m[i];
    }
    return r != 0;
}
/* Whether any lane is inf or NaN (its exponent bits all ones). */
static inline int vf_any_nonfinite(vf a) {
    return vi_any(((vi)a & 0x7f800000) == 0x7f800000);
}
/* Lane-wise maximum that ignores NaN in b (a NaN row is caught by the sum that follows). */
static inline vf vf_max(vf a, vf b) {
    return vf_sel(b > a, b, a);
}
/* The lanes widened to double (a macro: passing a vd by value would change the ABI of the units
 * built without AVX), and the sum of a vd's lanes in lane order. */
#define VF_TO_VD(a) __builtin_convertvector((a), vd)
static inline double vd_hsum(const vd *a) {
    double s = 0.0;
    for (int i = 0; i < CPU_VW; i++) {
        s += (*a)[i];
    }
    return s;
}
static inline float vf_hmax(vf a) {
    float m = a[0];
    for (int i = 1; i < CPU_VW; i++) {
        m = a[i] > m ? a[i] : m;
    }
    return m;
}

/* 2^n for integer-valued lanes n in [-126, 127], built in the exponent field. */
static inline vf vf_pow2i(vi n) {
    return (vf)((vu)(n + 127) << 23);
}

/*
 * exp(x), about 1 ulp. x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact
 * reduction), exp(r) by the Cephes degree-6 polynomial, then scaled by 2^n as 2^(n/2) 2^(n-n/2)
 * so that n = 128 (x up to ln FLT_MAX) and n down to -150 need no special case: results below
 * FLT_MIN come out subnormal, rounded once (docs/SPEC.md §1: a subnormal probability is not 0).
 * Below ln(2^-150) the result is 0; above ln FLT_MAX it is +inf; exp(-inf) = 0, exp(+inf) = +inf,
 * NaN stays NaN.
 */
static inline vf vf_exp(vf x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    vf k = x * 1.44269504088896341f + shifter;
    vf nf = k - shifter;
    vi n = (vi)((vu)k - (vu)vf_set(shifter));
    vf r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    vf p = vf_set(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    vi n1 = n >> 1;
    p = p * vf_pow2i(n1) * vf_pow2i(n - n1);
    p = vf_and(~(x < -103.972077f), p); /* -inf and underflow to 0; NaN lanes keep their NaN */
    return vf_sel(x > 88.7228391f, vf_set(__builtin_inff()), p);
}

#endif /* DISTIL_CPU_VMATH_H */
