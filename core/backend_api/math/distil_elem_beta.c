/* distil_elem_beta.c - the float64 constants of one beta or divergence (distil_elem_beta.h). */
#include "distil_elem_beta.h"

#include "distil.h"

#include <math.h>

distil_elem_beta distil_elem_beta_make(float beta) {
    distil_elem_beta k = {0};
    double b = (double)beta;
    k.beta = b;
    k.omb = 1.0 - b; /* exact in double for a float beta */
    if (beta == 0.0f || beta == 1.0f) {
        k.mode = beta == 0.0f ? DISTIL_ELEM_FWD : DISTIL_ELEM_REV;
        return k;
    }
    k.lb = log(b);
    k.l1b = log1p(-b);
    k.c = k.lb - k.l1b;
    k.kd = fabs(1.0 - 2.0 * b);
    k.mode = b > 0.5 ? DISTIL_ELEM_MIXH : DISTIL_ELEM_MIX;
    return k;
}

/* The constants with the two weights exchanged: m = (1 - beta) p + beta q. */
static distil_elem_beta distil_elem_beta_swap(distil_elem_beta k) {
    distil_elem_beta s = k;
    s.beta = k.omb;
    s.omb = k.beta;
    s.lb = k.l1b;
    s.l1b = k.lb;
    s.c = -k.c;
    return s;
}

/* A skew KL of alpha (docs/SPEC.md §6): alpha == 0 is the plain KL `plain`, alpha == 1 gives 0,
 * else m's constants with the teacher's weight alpha (SKL) or 1 - alpha (SRKL, swapped, so that
 * log alpha and log1p(-alpha) are both taken from alpha itself). */
static distil_elem_beta distil_elem_skew_make(float alpha, int plain, int mode) {
    distil_elem_beta k = {0};
    if (alpha == 0.0f || alpha == 1.0f) {
        k.mode = alpha == 0.0f ? plain : DISTIL_ELEM_ZERO;
        return k;
    }
    k = distil_elem_beta_make(alpha);
    if (mode == DISTIL_ELEM_SRKL) {
        k = distil_elem_beta_swap(k);
    }
    k.mode = mode;
    return k;
}

distil_elem_beta distil_elem_div_make(int divergence, float beta, float alpha) {
    distil_elem_beta k = {0};
    switch (divergence) {
    case DISTIL_DIVERGENCE_FORWARD_KL:
        return distil_elem_beta_make(0.0f);
    case DISTIL_DIVERGENCE_REVERSE_KL:
        return distil_elem_beta_make(1.0f);
    case DISTIL_DIVERGENCE_SKEW_KL:
        return distil_elem_skew_make(alpha, DISTIL_ELEM_FWD, DISTIL_ELEM_SKL);
    case DISTIL_DIVERGENCE_SKEW_REVERSE_KL:
        return distil_elem_skew_make(alpha, DISTIL_ELEM_REV, DISTIL_ELEM_SRKL);
    case DISTIL_DIVERGENCE_TVD:
        k.mode = DISTIL_ELEM_TVD;
        return k;
    default:
        return distil_elem_beta_make(beta);
    }
}
