/*
 * distill_elem.cuh - the generalised JSD element term (SPEC section 1) in base 2, for the fused
 * loss's row kernels (streaming and resident). x2 = log2 q, y2 = log2 p: the term comes back
 * divided by ln 2 (a row sum is scaled once) and its x-derivative g = de/dx in natural units.
 * The mixture's log is never subtracted from x2 or y2: both differences come from a softplus of
 * d2 = log2((1 - beta) q) - log2(beta p), so no two large numbers cancel (the fused gradient
 * G = ... - q sum g magnifies any such error). CUDA and HIP alike (the vendor's fast exp2,
 * __log2f).
 */
#ifndef DISTIL_GPU_DISTILL_ELEM_CUH
#define DISTIL_GPU_DISTILL_ELEM_CUH

#include "jsd_math.cuh"

namespace DISTIL_GPU_NS {

constexpr float DISTILL_ELEM_LOG2E = 1.4426950408889634f;
constexpr float DISTILL_ELEM_LN2 = 0.6931471805599453f;

/* Constants of one beta: beta, 1 - beta, log2 beta, log2 (1 - beta) (the logs only for
 * JSD_MIXED, else 0). */
struct distill_elem_coef {
    float beta, omb, lb2, l1b2;
};

/* Host side. log2f directly: log(beta) * log2(e) rounds -log2(0.5) off 1. */
static inline distill_elem_coef distill_elem_coef_make(const jsd_coef &c) {
    distill_elem_coef e;
    e.beta = c.beta;
    e.omb = c.one_minus_beta;
    e.lb2 = c.mode == JSD_MIXED ? log2f(c.beta) : 0.0f;
    e.l1b2 = c.mode == JSD_MIXED ? log2f(c.one_minus_beta) : 0.0f;
    return e;
}

/* log2(1 + t) for t in [0, 1] by the hardware log2: absolute error ~2^-22, as small as the
 * rounding of 1 + t, against the constant -log2(1 - beta) or -log2(beta) it is added to. */
__device__ __forceinline__ float distill_elem_log2_1p(float t) {
    return __log2f(1.0f + t);
}

/*
 * One element: returns e / ln 2 and sets *g = de/dx, for x2 = log2 q, y2 = log2 p, q = 2^x2,
 * pt = 2^y2; MODE a jsd_mode. A term whose probability is 0 is exactly 0; NaN stays NaN.
 */
template <int MODE>
__device__ __forceinline__ float distill_elem_term(const distill_elem_coef &c, float x2, float y2,
                                                   float q, float pt, float *g) {
    if (MODE == JSD_FORWARD_KL) {
        *g = -pt;
        return pt == 0.0f ? 0.0f : pt * (y2 - x2);
    }
    if (MODE == JSD_REVERSE_KL) {
        const float d = x2 - y2;
        *g = q == 0.0f ? 0.0f : q * (d * DISTILL_ELEM_LN2 + 1.0f);
        return q == 0.0f ? 0.0f : q * d;
    }
    /* log2 m = y2 + lb2 + sp(d2) = x2 + l1b2 + sp(-d2), sp(t) = log2(1 + 2^t) = max(t, 0) +
     * log2(1 + 2^-|t|). */
    const float d2 = (x2 - y2) + (c.l1b2 - c.lb2);
    const float spn = distill_elem_log2_1p(distil_exp2_ftz(-fabsf(d2)));
    const float sp_neg = d2 > 0.0f ? spn : spn - d2; /* sp(-d2) */
    const float sp_pos = d2 > 0.0f ? spn + d2 : spn; /* sp(d2) */
    const float tq = q == 0.0f ? 0.0f : c.omb * q * (-c.l1b2 - sp_neg);
    const float tp = pt == 0.0f ? 0.0f : c.beta * pt * (-c.lb2 - sp_pos);
    *g = tq * DISTILL_ELEM_LN2;
    return tp + tq;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_DISTILL_ELEM_CUH */
