/*
 * distil_e4m3.h - the fp8 e4m3 rounding of the fp8 teacher head (docs/SPEC.md §6, "fp8 teacher
 * head"), written once on the bits of an fp32, so that it compiles as C (ref, cpu, tests), CUDA /
 * HIP device code and OpenCL C and gives the same bits everywhere.
 *
 * e4m3 (OCP "E4M3FN", CUDA's __nv_fp8_e4m3): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
 * infinities; S.1111.111 is NaN. Finite values: normals 2^(e-7) (1 + m/8), e = 1..15 (e = 15 with
 * m <= 6), up to 448; subnormals m 2^-9, m = 1..7; and +-0.
 * fp32 -> e4m3: round to nearest, ties to even; a magnitude that rounds above 448, and +-inf,
 * saturate to +-448; NaN gives NaN (0x7f with the sign). This is __nv_cvt_float_to_fp8(x,
 * __NV_SATFINITE, __NV_E4M3), which tests/test_cuda_e4m3.cu checks against this text bit for bit
 * over every fp32.
 *
 * The row scale of docs/SPEC.md §6 is here too (distil_e4m3_row_scale, distil_e4m3_quant), so
 * that every backend quantises a row to the same codes.
 *
 * The includer may define DE8_FN (the qualifier: __device__ __forceinline__ for CUDA); the
 * default is static inline (C) / inline (OpenCL C). Types: unsigned int is 32 bits on every
 * target. DE8_BITS(f) / DE8_FLOAT(u) reinterpret an fp32 (defaults per language below).
 */
#ifndef DISTIL_E4M3_H
#define DISTIL_E4M3_H

#ifndef DE8_FN
#ifdef __OPENCL_VERSION__
#define DE8_FN inline
#else
#define DE8_FN static inline
#endif
#endif

#ifndef DE8_BITS
#if defined(__OPENCL_VERSION__)
#define DE8_BITS(f)  as_uint(f)
#define DE8_FLOAT(u) as_float(u)
#elif defined(__CUDACC__) || defined(__HIPCC__)
#define DE8_BITS(f)  __float_as_uint(f)
#define DE8_FLOAT(u) __uint_as_float(u)
#else
#include <string.h>
static inline unsigned int distil_e4m3_bits_of(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float distil_e4m3_float_of(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define DE8_BITS(f)  distil_e4m3_bits_of(f)
#define DE8_FLOAT(u) distil_e4m3_float_of(u)
#endif
#endif

/* The largest finite e4m3 magnitude and its code. */
#define DISTIL_E4M3_MAX      448.0f
#define DISTIL_E4M3_MAX_CODE 0x7eu

/* fp32 (as its bits) -> e4m3 code (low 8 bits). */
DE8_FN unsigned int distil_e4m3_from_bits(unsigned int u) {
    const unsigned int sign = (u >> 24) & 0x80u;
    const unsigned int a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7fu; /* NaN */
    }
    if (a >= 0x3c800000u) { /* >= 2^-6: an e4m3 normal (or saturation) */
        if (a >= 0x43e00000u) {
            return sign | DISTIL_E4M3_MAX_CODE; /* >= 448 (inf included): 448 */
        }
        /* keep 3 of 23 mantissa bits, ties to even; the carry moves into the exponent */
        const unsigned int r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
        const unsigned int code = r - (120u << 3); /* fp32 exponent bias 127 -> e4m3 bias 7 */
        return sign | (code > DISTIL_E4M3_MAX_CODE ? DISTIL_E4M3_MAX_CODE : code);
    }
    /* below 2^-6: the multiple of 2^-9 nearest to |x|, ties to even (8 is the smallest normal) */
    const unsigned int e = a >> 23;
    if (e < 117u) {
        return sign; /* < 2^-10: rounds to 0 (fp32 subnormals included) */
    }
    const unsigned int m = (a & 0x7fffffu) | 0x800000u; /* |x| = m 2^(e - 150) */
    const unsigned int shift = 141u - e;                /* |x| / 2^-9 = m / 2^shift, 21..24 */
    const unsigned int q = m >> shift;
    const unsigned int rem = m & ((1u << shift) - 1u);
    const unsigned int half = 1u << (shift - 1u);
    return sign | (q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u));
}

/* e4m3 code (low 8 bits) -> the bits of the fp32 of the same value (exact). */
DE8_FN unsigned int distil_e4m3_to_bits(unsigned int c) {
    const unsigned int sign = (c & 0x80u) << 24;
    const unsigned int e = (c >> 3) & 15u;
    const unsigned int m = c & 7u;
    if (e == 15u && m == 7u) {
        return sign | 0x7fc00000u;
    }
    if (e != 0u) {
        return sign | ((e + 120u) << 23) | (m << 20);
    }
    if (m == 0u) {
        return sign;
    }
    /* subnormal m 2^-9 = 2^(p - 9) (1 + (m - 2^p) / 2^p), p the top bit of m */
    const unsigned int p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
    return sign | ((p + 118u) << 23) | ((m ^ (1u << p)) << (23u - p));
}

/* The fp32 value of a code. */
DE8_FN float distil_e4m3_value(unsigned int c) {
    return DE8_FLOAT(distil_e4m3_to_bits(c));
}

/* docs/SPEC.md §6: the scale of a row whose largest magnitude is amax: amax / 448 (correctly
 * rounded fp32 division); 1 where that is 0 (an all-zero row, or an amax so small that the
 * quotient underflows); NaN for an amax that is not finite (a NaN or an inf in the row). */
DE8_FN float distil_e4m3_row_scale(float amax) {
    if (!(amax <= 3.40282347e38f)) {
        return DE8_FLOAT(0x7fc00000u);
    }
    const float s = amax / DISTIL_E4M3_MAX;
    return s > 0.0f ? s : 1.0f;
}

/* docs/SPEC.md §6: the code of x in a row of scale s: e4m3(x / s) (correctly rounded fp32
 * division); NaN where s is NaN (the whole row). */
DE8_FN unsigned int distil_e4m3_quant(float x, float s) {
    return s != s ? 0x7fu : distil_e4m3_from_bits(DE8_BITS(x / s));
}

#endif /* DISTIL_E4M3_H */
