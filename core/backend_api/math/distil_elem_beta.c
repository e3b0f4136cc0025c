/* distil_elem_beta.c - the float64 constants of one beta or divergence (distil_elem_beta.h). */
#include "distil_elem_beta.h"

#include "distil.h"

#include <math.h>
#include <stdbool.h>

distil_elem_beta distil_elem_beta_make(float beta) {
    distil_elem_beta k = {0};
    double b = (double)beta;
    k.beta = b;
    k.omb = 1.0 - b; /* exact in double for a float beta */
    if (beta == 0.0f || beta == 1.0f) {
        k.mode = beta == 0.0f ? DE_FWD : DE_REV;
        return k;
    }
    k.lb = log(b);
    k.l1b = log1p(-b);
    k.c = k.lb - k.l1b;
    k.kd = fabs(1.0 - 2.0 * b);
    k.mode = b > 0.5 ? DE_MIXH : DE_MIX;
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
 * else m's constants with the teacher's weight alpha, or 1 - alpha (swap: the weights
 * exchanged, so that log alpha and log1p(-alpha) are both taken from alpha itself). */
static distil_elem_beta distil_elem_skew_make(float alpha, int plain, int mode, bool swap) {
    distil_elem_beta k = {0};
    if (alpha == 0.0f || alpha == 1.0f) {
        k.mode = alpha == 0.0f ? plain : DE_ZERO;
        return k;
    }
    k = distil_elem_beta_make(alpha);
    if (swap) {
        k = distil_elem_beta_swap(k);
    }
    k.mode = mode;
    return k;
}

/* The `make` kinds of distil_div_list.h: a divergence's mode and constants from its line's MODE
 * and the parameters. */
static distil_elem_beta distil_elem_make_plain(int mode, float beta, float alpha) {
    (void)beta, (void)alpha;
    distil_elem_beta k = {0};
    k.mode = mode;
    return k;
}

static distil_elem_beta distil_elem_make_beta(int mode, float beta, float alpha) {
    (void)mode, (void)alpha;
    return distil_elem_beta_make(beta);
}

/* KL(p || m), m = alpha p + (1 - alpha) q: the forward KL at alpha = 0. */
static distil_elem_beta distil_elem_make_skew(int mode, float beta, float alpha) {
    (void)beta;
    return distil_elem_skew_make(alpha, DE_FWD, mode, false);
}

/* KL(q || m), m = (1 - alpha) p + alpha q: the reverse KL at alpha = 0; the teacher's weight in
 * m is 1 - alpha. */
static distil_elem_beta distil_elem_make_skew_reverse(int mode, float beta, float alpha) {
    (void)beta;
    return distil_elem_skew_make(alpha, DE_REV, mode, true);
}

distil_elem_beta distil_elem_div_make(int divergence, float beta, float alpha) {
    switch (divergence) {
#define DISTIL_ELEM_DIV_CASE(NAME, name, MODE, term, make)                                         \
    case DISTIL_DIVERGENCE_##NAME:                                                                 \
        return distil_elem_make_##make(DE_##MODE, beta, alpha);
        DISTIL_DIVERGENCES(DISTIL_ELEM_DIV_CASE)
#undef DISTIL_ELEM_DIV_CASE
    default:
        return distil_elem_beta_make(beta);
    }
}
