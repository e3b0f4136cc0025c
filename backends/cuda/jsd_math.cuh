/*
 * jsd_math.cuh - the element term of the generalised JSD (SPEC section 1) and its derivative in
 * x, shared by jsd_rows and distill_rows. x = log q (student), y = log p (teacher).
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

/*
 * exp and log, fast or accurate. The fast intrinsics err by up to 2 + 1.17 |x| ulp, which a
 * memory-bound loss never notices; the fused loss's logit gradient G sums to zero over a row, so
 * grad_xs = G Ws is a small difference of large terms that magnifies such errors about 100-fold
 * (seen on the H200 as 1.5e-4 against the 1e-4 bound): its row kernel uses the accurate forms.
 */
template <bool ACC> __device__ __forceinline__ float jsd_exp(float x) {
    return ACC ? expf(x) : __expf(x);
}
template <bool ACC> __device__ __forceinline__ float jsd_log(float x) {
    return ACC ? logf(x) : __logf(x);
}

/* log m = log(beta p + (1 - beta) q), in log space when the mixture is tiny: the direct form
 * would underflow to log 0 there (SPEC section 1). */
template <bool ACC = false>
__device__ __forceinline__ float jsd_log_mix(const jsd_coef &c, float x, float y, float q,
                                             float p) {
    const float mix = c.beta * p + c.one_minus_beta * q;
    if (mix >= 1e-30f) {
        return jsd_log<ACC>(mix);
    }
    const float a = c.log_beta + y;
    const float b = c.log_one_minus_beta + x;
    const float hi = fmaxf(a, b);
    if (hi == -INFINITY) {
        return -INFINITY;
    }
    return hi + log1pf(jsd_exp<ACC>(-fabsf(a - b)));
}

/* p * t with 0 * anything = 0 when p == 0 (NaN p keeps NaN). */
__device__ __forceinline__ float jsd_weighted(float p, float t) {
    return p == 0.0f ? 0.0f : p * t;
}

/* The element term e; *g = de/dx; *q = exp(x) when WANT_Q (the soft-gradient needs it). */
template <bool WANT_Q, bool ACC = false>
__device__ __forceinline__ float jsd_elem(const jsd_coef &c, float x, float y, float *g, float *q) {
    if (c.mode == JSD_FORWARD_KL) {
        const float p = jsd_exp<ACC>(y);
        *g = -p;
        if (WANT_Q) {
            *q = jsd_exp<ACC>(x);
        }
        return jsd_weighted(p, y - x);
    }
    const float qx = jsd_exp<ACC>(x);
    if (WANT_Q) {
        *q = qx;
    }
    if (c.mode == JSD_REVERSE_KL) {
        const float d = x - y;
        *g = jsd_weighted(qx, d + 1.0f);
        return jsd_weighted(qx, d);
    }
    const float p = jsd_exp<ACC>(y);
    const float lm = jsd_log_mix<ACC>(c, x, y, qx, p);
    const float tq = jsd_weighted(qx, c.one_minus_beta * (x - lm));
    *g = tq;
    return jsd_weighted(p, c.beta * (y - lm)) + tq;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_JSD_MATH_CUH */
