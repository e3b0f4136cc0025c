/*
 * distil_elem.h - the element terms of docs/SPEC.md §1 (generalised JSD, forward and reverse KL)
 * and §6 (skew KL, skew reverse KL, total variation) and their x-derivative, written once for
 * every backend: the float64 reference, the cpu kernels (GCC vectors of floats), CUDA/HIP device
 * code and OpenCL C all evaluate this text.
 * x = log q (student), y = log p (teacher), d = x - y.
 *
 * The includer defines, before including (no other header is included here):
 *   DE_T             value type: float, double, or a GCC vector of floats
 *   DE_S             its scalar type (the type of the coefficients)
 *   DE_M             type of a comparison of two DE_T (int, bool, or a vector of int)
 *   DE_FN            qualifiers of a function (static inline, __device__ __forceinline__, ...)
 *   DE_K(lit)        a decimal literal as a DE_S constant (lit##f for float)
 *   DE_V(s)          a DE_S broadcast to a DE_T
 *   DE_SEL(m, a, b)  m ? a : b, lane by lane (a and b of type DE_T)
 *   DE_ABS(a)        |a|
 *   DE_EXP(a)        exp(a) to about 1 ulp; subnormal results are kept (docs/SPEC.md §1:
 *                    a subnormal probability is not 0); exp(-inf) = 0; NaN stays NaN
 *   DE_F64           (optional) DE_T is double: libm's expm1 replaces the polynomial and the
 *                    series run to double precision
 *   DE_DIV(a, b)     (optional, default a / b) a / b for b in [1/2, 3] to 2 ulp: the series'
 *                    s = t / (2 + t) and the shares of m (de_mix_parts); a fast division is
 *                    harmless there (its error is the result's, relative)
 *   DE_RATIO(a, b)   (optional, default a / b) a / b for 0 <= a <= b, b in [2^-126, 1], to 2 ulp:
 *                    the far form's r; any value where b is 0 or subnormal (de_far_quotient then
 *                    takes r = 0)
 *
 * Forms (chosen for docs/SPEC.md §3's regimes; each factor relatively accurate, so an element term
 * is good to a few ulp; at |d| just above 0.69 the far form's two terms cancel by a factor of ~5,
 * about 2e-6 relative in the worst element; the endpoints' row sums cancel by their nature,
 * sum |e| / |sum e|, which no elementwise form avoids):
 *  - 0 < beta < 1, |d| <= 0.69 < ln 2 (student close to teacher): with u = expm1(d), w = expm1(-d),
 *      y - log m = -log1p((1 - beta) u),   x - log m = -log1p(beta w),
 *    and since beta p (1 - beta) u + (1 - beta) q beta w = beta (1 - beta) (q - p + p - q) = 0,
 *      e = beta p h((1 - beta) u) + (1 - beta) q h(beta w),   h(t) = t - log1p(t) >= 0,
 *    a sum of two non-negative terms, second order in d, exact at d = 0 (the plain form adds two
 *    first-order terms of opposite sign and loses digits as d -> 0). The JSD takes one series, on
 *    the side of the smaller weight, and the other h from h1 - h2 = (sinh d - d) +
 *    (1 - 2 beta) (cosh d - 1) (de_mix); the skew KLs use one side each.
 *  - 0 < beta < 1, |d| > 0.69: log m = logaddexp(log beta + y, log(1 - beta) + x), taken from the
 *    larger argument: r = ((1 - beta) q) / (beta p) = e^(d - c) where the teacher's part is the
 *    larger (d <= c, c = log beta - log1p(-beta)), else r = (beta p) / ((1 - beta) q); so r is in
 *    [0, 1] (for the JSD the quotient of the two parts as computed, de_far_quotient; for the skew
 *    KLs e^-|d - c|), and L = log1p(r),
 *      teacher part larger:  y - log m = -(log beta + L),      x - log m = d + (y - log m)
 *      student part larger:  x - log m = -(log1p(-beta) + L),  y - log m = (x - log m) - d.
 *    The logs and c are constants rounded once from float64 (distil_elem_beta_make), so beta =
 *    1e-9 or 1 - 6e-8 loses nothing (log(1 - beta) is log1p(-beta), not log of a rounded 1 - beta),
 *    and r is never the weights' ratio times e^d, which overflows fp32 for a subnormal beta
 *    (1.4e-45: (1 - beta) / beta = 7e44) and gave inf * 0.
 *  - beta == 0: e = p (y - x), de/dx = -p;  beta == 1: e = q (x - y), de/dx = q (x - y + 1).
 *  - The skew KLs (docs/SPEC.md §6) take y - log m and x - log m from the same two forms, with the
 *    teacher's weight in m as "beta"; their gradients need the shares of m, beta p / m and
 *    (1 - beta) q / m, taken as ratios of the form's own terms (near: (1 + w) / (1 + beta w) and
 *    (1 + u) / (1 + (1 - beta) u); far: 1 / (1 + r) and r / (1 + r)), never as a difference.
 *    Their row sums cancel like the plain KLs'.
 *  - Total variation: q - p is p expm1(d) for |d| <= 0.69, so p = q gives exactly 0 and nearly
 *    equal rows keep their digits; its sign picks the gradient's.
 * log1p and h on [-1/2, 1] come from one series in s = t / (2 + t), |s| <= 1/3:
 *   log1p(t) = 2 atanh(s) = 2s (1 + z Q(z)), z = s^2, Q(z) = 1/3 + z/5 + z^2/7 + ...,
 *   h(t) = t - 2s - 2s z Q = s (t - 2 z Q)   (t - 2s = t s as an identity),
 * so the polynomials are the same on every backend; only exp is each backend's own.
 *
 * Special values (docs/SPEC.md §1), the same on every backend: a term whose probability is 0 is
 * exactly 0 (0 log 0 = 0, 0 * -inf = 0), so x = y = -inf gives e = 0 and de/dx = 0; NaN in x or y
 * gives a NaN e also where the partner probability is 0; an infinite true divergence (beta == 0
 * with p > 0 = q, beta == 1 with q > 0 = p) gives +inf.
 */
#ifndef DISTIL_ELEM_H
#define DISTIL_ELEM_H

#ifndef DE_DIV
#define DE_DIV(a, b) ((a) / (b))
#endif
#ifndef DE_RATIO
#define DE_RATIO(a, b) ((a) / (b))
#endif

/* The modes (DE_MIX, DE_FWD, ...) and the divergences they compute: distil_div_list.h, which
 * OpenCL embeds as a source of its own before this one. A mode's term below is de_<term> of its
 * line there, with the arguments (sv, k, x, y, g, q) of de_elem_sv. */
#ifndef __OPENCL_VERSION__
#include "distil_div_list.h"
#endif

/* Constants of one beta, rounded from float64 (see distil_elem_beta_make / DE_COEF_SET). For the
 * skew KLs "beta" is the teacher's weight in m (alpha, or 1 - alpha: distil_elem_div_make). */
typedef struct de_coef {
    DE_S beta, omb; /* beta, 1 - beta */
    DE_S lb, l1b;   /* log beta, log1p(-beta) */
    DE_S c;         /* lb - l1b: d <= c where the teacher's part beta p of m is the larger */
    DE_S kd;        /* |1 - 2 beta| */
    int mode;       /* a DE_ mode */
} de_coef;

/* Fill a de_coef from anything with the same fields (a distil_elem_beta of float64 values). */
#define DE_COEF_SET(k, b)                                                                          \
    do {                                                                                           \
        (k).beta = (DE_S)(b).beta;                                                                 \
        (k).omb = (DE_S)(b).omb;                                                                   \
        (k).lb = (DE_S)(b).lb;                                                                     \
        (k).l1b = (DE_S)(b).l1b;                                                                   \
        (k).c = (DE_S)(b).c;                                                                       \
        (k).kd = (DE_S)(b).kd;                                                                     \
        (k).mode = (b).mode;                                                                       \
    } while (0)

/* Q(z) = sum_k z^(k-1) / (2k + 1) = (atanh(s) / s - 1) / z for z = s^2 <= 1/9. double: the
 * series truncated where z^n / (2n + 3) is below the rounding (16 terms, 2e-17). float: a
 * polynomial of 5 coefficients fitted on [0, 1/9] (fit_poly.py beside this header, which also
 * measures it): log1p and h to 1.81 and 2.68 ulp in fp32, where the 8-term series gave 1.82 and
 * 2.82 with three more multiply-adds per series. */
DE_FN DE_T de_atanh_q(DE_T z) {
#ifdef DE_F64
    DE_T p = z * DE_K(0.030303030303030304) + DE_K(0.03225806451612903);
    p = p * z + DE_K(0.034482758620689655);
    p = p * z + DE_K(0.037037037037037035);
    p = p * z + DE_K(0.04);
    p = p * z + DE_K(0.043478260869565216);
    p = p * z + DE_K(0.047619047619047616);
    p = p * z + DE_K(0.05263157894736842);
    p = p * z + DE_K(0.058823529411764705);
    p = p * z + DE_K(0.06666666666666667);
    p = p * z + DE_K(0.07692307692307693);
    p = p * z + DE_K(0.09090909090909091);
    p = p * z + DE_K(0.1111111111111111);
    p = p * z + DE_K(0.14285714285714285);
    p = p * z + DE_K(0.2);
    return p * z + DE_K(0.3333333333333333);
#else
    DE_T p = z * DE_K(1.1626886905e-01) + DE_K(1.0850021603e-01);
    p = p * z + DE_K(1.4296405312e-01);
    p = p * z + DE_K(1.9999848153e-01);
    return p * z + DE_K(3.3333333678e-01);
#endif
}

/* log1p(t) and h(t) = t - log1p(t) for t in [-1/2, 1] (or NaN), both to a few ulp relative. */
DE_FN void de_log1p_h(DE_T t, DE_T *l, DE_T *h) {
    DE_T s = DE_DIV(t, t + DE_K(2.0));
    DE_T z = s * s;
    DE_T zq = z * de_atanh_q(z);
    DE_T s2 = s + s;
    *l = s2 + s2 * zq;
    *h = s * (t - (zq + zq));
}

/* The parts of expm1 for |d| <= 0.69 (other lanes: any value, discarded by the caller): o3 =
 * sinh(d) - d (odd, ~d^3 / 6) and v = cosh(d) - 1 (even, ~d^2 / 2), each to a few ulp relative,
 * so that expm1(d) = (d + o3) + v and expm1(-d) = v - (d + o3) keep full relative accuracy near 0
 * and the JSD's near form can take the difference of its two sides' h from them (de_mix). */
DE_FN void de_expm1_parts(DE_T d, DE_T *o3, DE_T *v) {
    DE_T z = d * d;
#ifdef DE_F64
    /* sinh(d) - d = d z sum z^k / (2k + 3)!, cosh(d) - 1 = z sum z^k / (2k + 2)!, to 1e-17 */
    DE_T po = z * DE_K(2.8114572543455206e-15) + DE_K(7.647163731819816e-13);
    po = po * z + DE_K(1.6059043836821613e-10);
    po = po * z + DE_K(2.505210838544172e-08);
    po = po * z + DE_K(2.7557319223985893e-06);
    po = po * z + DE_K(1.984126984126984e-04);
    po = po * z + DE_K(8.333333333333333e-03);
    po = po * z + DE_K(1.6666666666666666e-01);
    DE_T pe = z * DE_K(4.779477332387385e-14) + DE_K(1.1470745597729725e-11);
    pe = pe * z + DE_K(2.08767569878681e-09);
    pe = pe * z + DE_K(2.755731922398589e-07);
    pe = pe * z + DE_K(2.48015873015873e-05);
    pe = pe * z + DE_K(1.3888888888888889e-03);
    pe = pe * z + DE_K(4.1666666666666664e-02);
    pe = pe * z + DE_K(0.5);
#else
    /* Fitted on |d| <= 0.69 (fit_poly.py: 3 and 4 coefficients, expm1(d) and expm1(-d) to 2.25
     * ulp in fp32, where the Taylor parts to d^10 gave 2.38 with two more multiply-adds). */
    DE_T po = z * DE_K(2.0039103211e-04) + DE_K(8.3329794258e-03);
    po = po * z + DE_K(1.6666667604e-01);
    DE_T pe = z * DE_K(2.5065353910e-05) + DE_K(1.3888102563e-03);
    pe = pe * z + DE_K(4.1666674162e-02);
    pe = pe * z + DE_K(4.9999999989e-01);
#endif
    *o3 = d * z * po;
    *v = z * pe;
}

/* expm1(d) and expm1(-d) for |d| <= 0.69 (other lanes: any value, discarded by the caller). */
DE_FN void de_expm1_pair(DE_T d, DE_T *u, DE_T *w) {
#ifdef DE_F64
    *u = expm1(d);
    *w = expm1(-d);
#else
    DE_T o3, v;
    de_expm1_parts(d, &o3, &v);
    DE_T o = d + o3;
    *u = o + v;
    *w = v - o;
#endif
}

/* NaN when x or y is NaN, else e (docs/SPEC.md §1: NaN propagates where a probability is 0).
 *
 * Every mode below takes `sv` (special values), a constant of its caller: 1 applies this pass and
 * the masks that make a zero probability's term exactly 0 when its log factor is infinite; 0
 * leaves them out, which gives the same values whenever x and y are both finite (every log factor
 * is then finite, so a zero probability times it is an exact 0, and no NaN is there to pass). A
 * kernel that knows a group of elements to be finite (x - y finite) takes sv = 0 there
 * (de_elem_finite): about 9 fewer instructions per element on a GPU. */
DE_FN DE_T de_nan_pass(DE_T x, DE_T y, DE_T e) {
    e = DE_SEL(x == x, e, x);
    return DE_SEL(y == y, e, y);
}

/* e where a special value may be present (sv), else e as it is. */
DE_FN DE_T de_sv_pass(int sv, DE_T x, DE_T y, DE_T e) {
    return sv ? de_nan_pass(x, y, e) : e;
}

/* t, or 0 where the mask m is set, when sv (a zero probability times an infinite log factor). */
DE_FN DE_T de_sv_zero(int sv, DE_M m, DE_T t) {
    return sv ? DE_SEL(m, DE_V(DE_K(0.0)), t) : t;
}

/* beta == 0, forward KL(p || q): e = p (y - x), de/dx = -p. */
DE_FN DE_T de_fwd(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    (void)k;
    DE_T p = DE_EXP(y);
    *q = DE_EXP(x);
    *g = -p;
    return de_sv_pass(sv, x, y, de_sv_zero(sv, p == DE_K(0.0), p * (y - x)));
}

/* beta == 1, reverse KL(q || p): e = q (x - y), de/dx = q (x - y + 1). */
DE_FN DE_T de_rev(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    (void)k;
    DE_T qq = DE_EXP(x);
    DE_T d = x - y;
    DE_M dead = qq == DE_K(0.0);
    *q = qq;
    *g = de_sv_zero(sv, dead, qq * (d + DE_K(1.0)));
    return de_sv_pass(sv, x, y, de_sv_zero(sv, dead, qq * d));
}

/* The parts of m = beta p + (1 - beta) q (the weights of k: beta for the JSD, alpha or 1 - alpha
 * for the skew KLs, docs/SPEC.md §6) that the skew KLs share, in the forms of the header:
 * p, q, near (|d| <= 0.69), the series values h1 =
 * h((1 - beta) u) and h2 = h(beta w) (near only), y - log m (lp) and x - log m (lq) in both
 * regimes, and the shares of m sp = beta p / m, sq = (1 - beta) q / m (sp + sq = 1; each from the
 * ratio it is accurate in). */
typedef struct de_mixp {
    DE_T p, q, h1, h2, lp, lq, sp, sq;
    DE_M near;
} de_mixp;

/* The far form's r for the JSD, and which part of m is the larger (*teach: the teacher's): the
 * quotient of m's two parts bp = beta p and oq = (1 - beta) q as computed, a few ulp from two
 * accurate exponentials. (e^-|d - c| would carry the roundings of d and d - c in its argument,
 * |d - c| ulp of r, tens at |d| ~ 14, and cost an exponential more.) Where the larger part is 0 or
 * below DE_RATIO's range (m < 2^-125: both probabilities at the bottom of fp32) the quotient is
 * NaN or inf and r is taken as 0, exact when the smaller part is 0. */
DE_FN DE_T de_far_quotient(DE_T bp, DE_T oq, DE_M *teach) {
    *teach = oq <= bp;
    DE_T r = DE_RATIO(DE_SEL(*teach, oq, bp), DE_SEL(*teach, bp, oq));
    return DE_SEL(r <= DE_K(1.0), r, DE_V(DE_K(0.0)));
}

/* The far form's y - log m (*lp) and x - log m (*lq) from L = log1p(r), teach as de_far_quotient
 * or d <= c decides: -(log beta + L) and d + that where the teacher's part is the larger, else
 * -(log1p(-beta) + L) and that - d. */
DE_FN void de_far_logs(const de_coef *k, DE_T d, DE_T l, DE_M teach, DE_T *lp, DE_T *lq) {
    DE_T lp_t = -(k->lb + l);
    DE_T lq_s = -(k->l1b + l);
    *lq = DE_SEL(teach, d + lp_t, lq_s);
    *lp = DE_SEL(teach, lp_t, lq_s - d);
}

/* The skew KLs' parts (de_mixp). Their r is e^-|d - c|: each uses only one of p and q, so the
 * quotient would cost the other's exponential. */
DE_FN de_mixp de_mix_parts(const de_coef *k, DE_T x, DE_T y) {
    de_mixp m;
    m.p = DE_EXP(y);
    m.q = DE_EXP(x);
    DE_T d = x - y;
    m.near = DE_ABS(d) <= DE_K(0.69); /* u, w in [-1/2, 1]: the series' range */
    DE_M teach = d <= k->c;
    DE_T r = DE_EXP(-DE_ABS(d - k->c)); /* the smaller part of m over the larger */
    DE_T u, w;
    de_expm1_pair(d, &u, &w);
    /* One series serves h((1 - beta) u) near and log1p(r) far; the other h and log1p of beta w. */
    DE_T l1, l2;
    DE_T tu = DE_SEL(m.near, k->omb * u, r);
    DE_T tw = k->beta * w;
    de_log1p_h(tu, &l1, &m.h1);
    de_log1p_h(tw, &l2, &m.h2);
    DE_T lp_far, lq_far;
    de_far_logs(k, d, l1, teach, &lp_far, &lq_far);
    m.lq = DE_SEL(m.near, -l2, lq_far);
    m.lp = DE_SEL(m.near, -l1, lp_far);
    /* near: m = p (1 + (1 - beta) u) = q (1 + beta w); far: m = (larger part) (1 + r). */
    DE_T one = DE_V(DE_K(1.0));
    /* Divisors in [1/2, 2] on the lanes kept (DE_DIV's range); one reciprocal serves both. */
    DE_T ir = DE_DIV(one, one + r);
    DE_T rr = r * ir;
    m.sq = DE_SEL(m.near, DE_DIV(k->omb * (one + u), one + tu), DE_SEL(teach, rr, ir));
    m.sp = DE_SEL(m.near, DE_DIV(k->beta * (one + w), one + tw), DE_SEL(teach, ir, rr));
    return m;
}

/* 0 < beta < 1 (hi: beta > 1/2, DE_MIXH): returns e, *g = de/dx = (1 - beta) q (x - log m),
 * *q = q. One series per element: the far form's log1p(r), or the near form's on the side of the
 * smaller weight, t = beta w (lo) or (1 - beta) u (hi), whose h it gives; the other side's h is
 * that h plus or minus h1 - h2 = (o - d) + (1 - 2 beta) v, with o - d = o3 and v the parts of
 * expm1 (exact identities: 1 + t1 = m / p, 1 + t2 = m / q, so log1p(t1) - log1p(t2) = d). The
 * terms added are all smaller than the larger h on that side (|1 - 2 beta| v <= the h of the
 * larger weight); at |d| = 0.69 and beta = 1/2 they cancel by up to 4x, which leaves the element
 * within the old two-series form's 4-8 ulp (measured in emulated fp32 over the near range). */
DE_FN DE_T de_mix(int sv, int hi, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    DE_T p = DE_EXP(y);
    DE_T qq = DE_EXP(x);
    DE_T bp = k->beta * p;
    DE_T oq = k->omb * qq;
    DE_T d = x - y;
    DE_M near = DE_ABS(d) <= DE_K(0.69); /* u, w in [-1/2, 1]: the series' range */
    DE_M teach;
    DE_T r = de_far_quotient(bp, oq, &teach); /* the smaller part of m over the larger */
    DE_T o3, v;
    de_expm1_parts(d, &o3, &v);
    DE_T o = d + o3;
    DE_T t2 = k->beta * (v - o); /* beta expm1(-d) */
    DE_T ts = hi ? k->omb * (o + v) : t2;
    DE_T l, h;
    de_log1p_h(DE_SEL(near, ts, r), &l, &h);
    DE_T kv = k->kd * v;
    DE_T h1 = hi ? h : h + o3 + kv;
    DE_T h2 = hi ? h - o3 + kv : h;
    DE_T lq_near = hi ? h2 - t2 : -l; /* x - log m = -log1p(t2) = h2 - t2 */
    DE_T lp_far, lq_far;
    de_far_logs(k, d, l, teach, &lp_far, &lq_far);
    DE_T lq = DE_SEL(near, lq_near, lq_far);
    DE_T ep = bp * DE_SEL(near, h1, lp_far);
    DE_T eq = oq * DE_SEL(near, h2, lq);
    DE_M p0 = p == DE_K(0.0);
    DE_M q0 = qq == DE_K(0.0);
    *g = de_sv_zero(sv, q0, oq * lq);
    *q = qq;
    DE_T e = de_sv_zero(sv, p0, ep) + de_sv_zero(sv, q0, eq);
    return de_sv_pass(sv, x, y, e);
}

/* DE_MIX (0 < beta <= 1/2) and DE_MIXH (1/2 < beta < 1): de_mix on the smaller weight's side. */
DE_FN DE_T de_mix_lo(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    return de_mix(sv, 0, k, x, y, g, q);
}
DE_FN DE_T de_mix_hi(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    return de_mix(sv, 1, k, x, y, g, q);
}

/* Skew KL(p || m), m = alpha p + (1 - alpha) q (k's beta = alpha, 0 < alpha < 1):
 * e = p (y - log m), de/dx = -p (1 - alpha) q / m = -p sq. */
DE_FN DE_T de_skl(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    de_mixp m = de_mix_parts(k, x, y);
    DE_M p0 = m.p == DE_K(0.0);
    *g = de_sv_zero(sv, p0, -(m.p * m.sq));
    *q = m.q;
    return de_sv_pass(sv, x, y, de_sv_zero(sv, p0, m.p * m.lp));
}

/* Skew reverse KL(q || m), m = (1 - alpha) p + alpha q (k's beta = 1 - alpha, 0 < alpha < 1):
 * e = q (x - log m), de/dx = q (x - log m) + q - alpha q^2 / m = q ((x - log m) + sp). */
DE_FN DE_T de_srkl(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    de_mixp m = de_mix_parts(k, x, y);
    DE_M q0 = m.q == DE_K(0.0);
    *g = de_sv_zero(sv, q0, m.q * (m.lq + m.sp));
    *q = m.q;
    return de_sv_pass(sv, x, y, de_sv_zero(sv, q0, m.q * m.lq));
}

/* Total variation: e = |p - q| / 2, de/dx = sign(q - p) q / 2 (0 where p = q). q - p is
 * p expm1(d) near (no cancellation as d -> 0), the plain difference far. */
DE_FN DE_T de_tvd(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    (void)k;
    DE_T p = DE_EXP(y);
    DE_T qq = DE_EXP(x);
    DE_T d = x - y;
    DE_T u, w;
    de_expm1_pair(d, &u, &w);
    DE_T diff = DE_SEL(DE_ABS(d) <= DE_K(0.69), p * u, qq - p); /* q - p */
    DE_T hf = DE_V(DE_K(0.5));                                  /* not "half": a type in OpenCL C */
    DE_T zero = DE_V(DE_K(0.0));
    DE_T sg = DE_SEL(diff > DE_K(0.0), hf, DE_SEL(diff < DE_K(0.0), -hf, zero));
    *g = sg * qq;
    *q = qq;
    return de_sv_pass(sv, x, y, hf * DE_ABS(diff));
}

/* A skew KL at alpha = 1: m is the divergence's own argument, so e = 0 and de/dx = 0. */
DE_FN DE_T de_zero(int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    (void)k;
    *g = DE_V(DE_K(0.0));
    *q = DE_EXP(x);
    return de_sv_pass(sv, x, y, DE_V(DE_K(0.0)));
}

/* The element term of any mode, special values (sv) handled or not (de_nan_pass says when they
 * may be left out): returns e, *g = de/dx, *q = exp(x). With a constant mode and sv (template
 * parameters, a kernel's per-row branch) the compiler keeps only one formula. */
DE_FN DE_T de_elem_sv(int mode, int sv, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
#define DE_ELEM_CASE(MODE, term)                                                                   \
    if (mode == DE_##MODE) {                                                                       \
        return de_##term(sv, k, x, y, g, q);                                                       \
    }
    DE_MODES(DE_ELEM_CASE)
#undef DE_ELEM_CASE
    return de_zero(sv, k, x, y, g, q);
}

/* Any x and y (docs/SPEC.md §1's special values included). */
DE_FN DE_T de_elem(int mode, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    return de_elem_sv(mode, 1, k, x, y, g, q);
}

/* Only where x - y is finite (x and y both finite): the same values as de_elem, faster. */
DE_FN DE_T de_elem_finite(int mode, const de_coef *k, DE_T x, DE_T y, DE_T *g, DE_T *q) {
    return de_elem_sv(mode, 0, k, x, y, g, q);
}

/* The soft part of the fused loss's logit gradient (docs/SPEC.md §2 step 5) before its weight and
 * 1/tau: g - q sum_u g_u, with sum_g the row's sum of de/dx. */
DE_FN DE_T de_soft_grad(DE_T g, DE_T q, DE_S sum_g) {
    return g - q * sum_g;
}

/* de_soft_grad at the student's mode, where q is near 1 and g - q sum_g cancels (a confident
 * student: 1 - q = 5e-6 left 0.3% of G there in fp32): the same value as g (1 - q) - q (sum_g - g)
 * with one_minus_q = -expm1(x) from the mode's log-probability and sum_rest = sum_g - g taken by
 * the caller in its double sum, so neither product cancels (docs/SPEC.md §3). */
DE_FN DE_T de_soft_grad_mode(DE_T g, DE_T q, DE_T one_minus_q, DE_T sum_rest) {
    return g * one_minus_q - q * sum_rest;
}

#endif /* DISTIL_ELEM_H */
