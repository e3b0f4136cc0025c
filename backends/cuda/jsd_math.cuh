/*
 * jsd_math.cuh - the element term of the generalised JSD (SPEC section 1) and its derivative in
 * x for jsd_rows, and the beta constants both losses use (the fused loss's base-2 element term is
 * distill_elem.cuh). x = log q (student), y = log p (teacher).
 *   0 < beta < 1:  e = beta p (y - log m) + (1 - beta) q (x - log m),  de/dx = (1 - beta) q (x -
 * log m) beta == 0:     e = p (y - x),  de/dx = -p          beta == 1:  e = q (x - y),  de/dx = q
 * (x - y + 1) A term whose probability is 0 is exactly 0 (0 log 0 = 0, 0 * -inf = 0); NaN inputs
 * stay NaN.
 */
#ifndef DISTIL_GPU_JSD_MATH_CUH
#define DISTIL_GPU_JSD_MATH_CUH

#include "vendor.h"

namespace DISTIL_GPU_NS {

enum jsd_mode { JSD_MIXED = 0, JSD_FORWARD_KL = 1, JSD_REVERSE_KL = 2 };

/* Constants of one beta, computed on the host. */
struct jsd_coef {
    int mode;
    float beta, one_minus_beta;
    float log_beta, log_one_minus_beta;
};

static inline jsd_coef jsd_coef_make(float beta) {
    jsd_coef c;
    c.mode = beta == 0.0f ? JSD_FORWARD_KL : (beta == 1.0f ? JSD_REVERSE_KL : JSD_MIXED);
    c.beta = beta;
    c.one_minus_beta = 1.0f - beta;
    c.log_beta = beta > 0.0f ? logf(beta) : -INFINITY;
    c.log_one_minus_beta = beta < 1.0f ? logf(1.0f - beta) : -INFINITY;
    return c;
}

/* log m = log(beta p + (1 - beta) q), in log space when the mixture is tiny: the direct form
 * would underflow to log 0 there (SPEC section 1). The fast intrinsics (up to 2 + 1.17 |x| ulp)
 * suffice: the loss is memory-bound and its gradient is not a difference of large terms. */
__device__ __forceinline__ float jsd_log_mix(const jsd_coef &c, float x, float y, float q,
                                             float p) {
    const float mix = c.beta * p + c.one_minus_beta * q;
    if (mix >= 1e-30f) {
        return __logf(mix);
    }
    const float a = c.log_beta + y;
    const float b = c.log_one_minus_beta + x;
    const float hi = fmaxf(a, b);
    if (hi == -INFINITY) {
        return -INFINITY;
    }
    return hi + log1pf(__expf(-fabsf(a - b)));
}

/* p * t with 0 * anything = 0 when p == 0 (NaN p keeps NaN). */
__device__ __forceinline__ float jsd_weighted(float p, float t) {
    return p == 0.0f ? 0.0f : p * t;
}

/* The element term e; *g = de/dx. */
__device__ __forceinline__ float jsd_elem(const jsd_coef &c, float x, float y, float *g) {
    if (c.mode == JSD_FORWARD_KL) {
        const float p = __expf(y);
        *g = -p;
        return jsd_weighted(p, y - x);
    }
    const float qx = __expf(x);
    if (c.mode == JSD_REVERSE_KL) {
        const float d = x - y;
        *g = jsd_weighted(qx, d + 1.0f);
        return jsd_weighted(qx, d);
    }
    const float p = __expf(y);
    const float lm = jsd_log_mix(c, x, y, qx, p);
    const float tq = jsd_weighted(qx, c.one_minus_beta * (x - lm));
    *g = tq;
    return jsd_weighted(p, c.beta * (y - lm)) + tq;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_JSD_MATH_CUH */
