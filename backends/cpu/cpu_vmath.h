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
/* m ? a : 0: one AND. Used to give 0 * inf and 0 * -inf the value 0 (SPEC 1, 0 log 0 = 0). */
static inline vf vf_and(vi m, vf a) {
    return (vf)((vi)a & m);
}
static inline vf vf_abs(vf a) {
    return (vf)((vi)a & 0x7fffffff);
}
/* min(a, 0) and max(a, 0); NaN stays NaN. */
static inline vf vf_min0(vf a) {
    return vf_sel(a > 0.0f, vf_set(0.0f), a);
}
static inline vf vf_max0(vf a) {
    return vf_sel(a < 0.0f, vf_set(0.0f), a);
}
/* Lane-wise maximum that ignores NaN in b (a NaN row is caught by the sum that follows). */
static inline vf vf_max(vf a, vf b) {
    return vf_sel(b > a, b, a);
}
static inline int vi_any(vi m) {
    int r = 0;
    for (int i = 0; i < CPU_VW; i++) {
        r |= m[i];
    }
    return r != 0;
}
/* Sum of the lanes in double, in lane order (deterministic). */
static inline double vf_hsum(vf a) {
    double s = 0.0;
    for (int i = 0; i < CPU_VW; i++) {
        s += (double)a[i];
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
 * so that n = 128 (x up to ln FLT_MAX) needs no special case. Below ln FLT_MIN the result is 0
 * (no subnormals: they cost microcode assists and carry no digits at our tolerances); above
 * ln FLT_MAX it is +inf; exp(-inf) = 0, exp(+inf) = +inf, NaN stays NaN.
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
    p = vf_and(~(x < -87.33654f), p); /* -inf and underflow to 0; NaN lanes keep their NaN */
    return vf_sel(x > 88.7228391f, vf_set(__builtin_inff()), p);
}

/*
 * log1p(e) for e in [-1/2, 1] (or NaN), about 1 ulp: with s = e / (2 + e) in [-1/3, 1/3],
 * log1p(e) = 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...); the series to s^12/13 leaves a relative
 * error below 2e-8 since s^2 <= 1/9. Exact at e = 0, and relative accuracy holds for tiny e.
 */
static inline vf vf_log1p_small(vf e) {
    vf s = e / (e + 2.0f);
    vf z = s * s;
    vf p = vf_set(1.0f / 13.0f);
    p = p * z + 1.0f / 11.0f;
    p = p * z + 1.0f / 9.0f;
    p = p * z + 1.0f / 7.0f;
    p = p * z + 1.0f / 5.0f;
    p = p * z + 1.0f / 3.0f;
    vf s2 = s + s;
    return s2 + s2 * z * p;
}

/*
 * expm1(d) for |d| <= 1/2 as its odd and even parts, so that expm1(d) = o + v and
 * expm1(-d) = v - o both keep full relative accuracy near 0 (Taylor series to d^10: relative
 * error below 1e-9 on that range).
 */
static inline void vf_expm1_parts(vf d, vf *o, vf *v) {
    vf z = d * d;
    vf po = vf_set(1.0f / 362880.0f);
    po = po * z + 1.0f / 5040.0f;
    po = po * z + 1.0f / 120.0f;
    po = po * z + 1.0f / 6.0f;
    *o = d + d * z * po;
    vf pe = vf_set(1.0f / 3628800.0f);
    pe = pe * z + 1.0f / 40320.0f;
    pe = pe * z + 1.0f / 720.0f;
    pe = pe * z + 1.0f / 24.0f;
    pe = pe * z + 0.5f;
    *v = z * pe;
}

#endif /* DISTIL_CPU_VMATH_H */
