/*
 * div_math.cuh - the element terms of docs/SPEC.md §1 for the CUDA/HIP kernels:
 * core/backend_api/math/ distil_elem.h instantiated in float device code (one formulation for every
 * backend), and the constants of one divergence made on the host (distil_elem_div_make: float64,
 * rounded once). x = log q (student), y = log p (teacher). The probabilities' exp is the accurate
 * expf: the fast __expf flushes subnormal probabilities (docs/SPEC.md §1) and loses |x| ulp.
 */
#ifndef DISTIL_GPU_DIV_MATH_CUH
#define DISTIL_GPU_DIV_MATH_CUH

#include "vendor.h"
#include "math/distil_elem_beta.h"

#include <type_traits>

namespace DISTIL_GPU_NS {

#define DE_T            float
#define DE_S            float
#define DE_M            bool
#define DE_FN           __device__ __forceinline__
#define DE_K(lit)       lit##f
#define DE_V(s)         (s)
#define DE_SEL(m, a, b) ((m) ? (a) : (b))
#define DE_ABS(a)       fabsf(a)
#define DE_EXP(a)       expf(a)
/* The one place where a fast intrinsic is harmless (distil_elem.h says why; the precision suite
 * checks it): the divisions by a number in [1/2, 3] (the series' and the shares of m). (A fast exp
 * of the far form's ratio is not: at beta near 1 its |d| ulp reach the loss, which cancels to
 * (1 - beta).) */
#define DE_DIV(a, b)   distil_div_fast(a, b)
#define DE_RATIO(a, b) distil_div_fast(a, b)
#include "math/distil_elem.h"
/* and the head options of docs/SPEC.md §6 (scale, softcap), the same text in float */
#define DH_TANH(a) tanhf(a)
#define DH_EXP(a)  expf(a)
#include "math/distil_head.h"

/* Constants of one divergence (mode, the weights of m, logs, ratios), computed on the host. */
typedef de_coef div_coef;

static inline div_coef div_coef_make(int divergence, float beta, float alpha) {
    const distil_elem_beta b = distil_elem_div_make(divergence, beta, alpha);
    div_coef c;
    DE_COEF_SET(c, b);
    return c;
}

/* The element term e of the row's mode; *g = de/dx, *q = exp(x). MODE: a DE_ mode of DE_MODES;
 * SV: false only where x - y is known to be finite (distil_elem.h's de_elem_finite). */
template <int MODE, bool SV = true>
__device__ __forceinline__ float div_elem_q(const div_coef &c, float x, float y, float *g,
                                            float *q) {
    return de_elem_sv(MODE, SV ? 1 : 0, &c, x, y, g, q);
}

/* div_with_sv for a group given by its sum of x - y (div_rows.cuh: vectors of which some lie past
 * the row's end take no part). */
template <typename F> __device__ __forceinline__ void div_with_sv_of(float sum_d, F &&f) {
    if (fabsf(sum_d) < INFINITY) {
        f(std::false_type{});
    } else {
        f(std::true_type{});
    }
}

/* Calls f(SV), SV a std::integral_constant<bool>: false when the N pairs x[k], y[k] are all
 * finite, true otherwise. Their x - y sum to a finite number only then (a NaN or an infinity makes
 * the sum NaN or infinite; a finite sum that overflows only takes the slower form), and the finite
 * form of the terms (distil_elem.h's de_elem_finite) gives the same values with fewer
 * instructions (the JSD kernel on an H200: 105 -> 97 per element, -6% time; docs/GPU-NOTES.md "JSD
 * row kernel"). One branch per group, uniform but for a rare group with a special value, so the
 * group's terms still interleave. */
template <int N, typename F>
__device__ __forceinline__ void div_with_sv(const float (&x)[N], const float (&y)[N], F &&f) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        s += x[k] - y[k];
    }
    div_with_sv_of(s, static_cast<F &&>(f));
}

/* Calls f(MODE) with c's mode as a compile-time constant (std::integral_constant), so that the
 * element loops hold no branch on it and the compiler can interleave several elements' terms: the
 * branch is taken once, outside the loop. (With the mode read per element every term sat in its
 * own basic block behind a chain of compares: measured 1.6x the copy floor on an H200,
 * docs/GPU-NOTES.md "JSD row kernel".) One case per mode of DE_MODES (distil_div_list.h). */
template <typename F> __device__ __forceinline__ void div_with_mode(const div_coef &c, F &&f) {
#define DIV_MODE_CASE(M, term)                                                                     \
    if (c.mode == DE_##M) {                                                                        \
        f(std::integral_constant<int, DE_##M>{});                                                  \
        return;                                                                                    \
    }
    DE_MODES(DIV_MODE_CASE)
#undef DIV_MODE_CASE
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_DIV_MATH_CUH */
