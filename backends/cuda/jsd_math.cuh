/*
 * jsd_math.cuh - the element terms of docs/SPEC.md §1 for the CUDA/HIP kernels:
 * core/backend_api/math/ distil_elem.h instantiated in float device code (one formulation for every
 * backend), and the constants of one divergence made on the host (distil_elem_div_make: float64,
 * rounded once). x = log q (student), y = log p (teacher). The probabilities' exp is the accurate
 * expf: the fast __expf flushes subnormal probabilities (docs/SPEC.md §1) and loses |x| ulp.
 */
#ifndef DISTIL_GPU_JSD_MATH_CUH
#define DISTIL_GPU_JSD_MATH_CUH

#include "vendor.h"
#include "math/distil_elem_beta.h"

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
#define DE_DIV(a, b) __fdividef(a, b)
#include "math/distil_elem.h"
/* and the head options of docs/SPEC.md §6 (scale, softcap), the same text in float */
#define DH_TANH(a) tanhf(a)
#define DH_EXP(a)  expf(a)
#include "math/distil_head.h"

/* Constants of one divergence (mode, the weights of m, logs, ratios), computed on the host. */
typedef de_coef jsd_coef;

static inline jsd_coef jsd_coef_make(int divergence, float beta, float alpha) {
    const distil_elem_beta b = distil_elem_div_make(divergence, beta, alpha);
    jsd_coef c;
    DE_COEF_SET(c, b);
    return c;
}

/* The element term e of the row's mode; *g = de/dx, *q = exp(x). MODE: a DE_ mode of DE_MODES. */
template <int MODE>
__device__ __forceinline__ float jsd_elem_q(const jsd_coef &c, float x, float y, float *g,
                                            float *q) {
    return de_elem(MODE, &c, x, y, g, q);
}

/* The same with the mode read at run time (uniform over a row, so the branch does not diverge). */
__device__ __forceinline__ float jsd_elem(const jsd_coef &c, float x, float y, float *g) {
    float q;
    return de_elem(c.mode, &c, x, y, g, &q);
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_JSD_MATH_CUH */
