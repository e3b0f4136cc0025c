/*
 * distil_elem_beta.h - the constants of one beta for the element terms of distil_elem.h, computed
 * once on the host in float64 and rounded once by each backend (DE_COEF_SET): log(1 - beta) as
 * log1p(-beta) and their difference, so that no backend rounds 1 - beta before a log.
 * distil_elem_div_make maps a divergence of docs/SPEC.md §6 and its parameter to the same
 * constants and a mode.
 */
#ifndef DISTIL_ELEM_BETA_H
#define DISTIL_ELEM_BETA_H

#ifdef __cplusplus
extern "C" {
#endif

/* The modes of distil_elem.h (its DE_ values, which equal these). */
enum {
    DISTIL_ELEM_MIX = 0,
    DISTIL_ELEM_FWD = 1,
    DISTIL_ELEM_REV = 2,
    DISTIL_ELEM_SKL = 3,
    DISTIL_ELEM_SRKL = 4,
    DISTIL_ELEM_TVD = 5,
    DISTIL_ELEM_ZERO = 6,
    DISTIL_ELEM_MIXH = 7,
};

typedef struct distil_elem_beta {
    double beta, omb; /* beta, 1 - beta: the teacher's and the student's weight in m */
    double lb, l1b;   /* log beta, log(1 - beta) (0 where a mode has no m) */
    double c;         /* lb - l1b */
    double kd;        /* |1 - 2 beta| */
    int mode;         /* a DISTIL_ELEM_ mode */
} distil_elem_beta;

/* The generalised JSD of one beta: DISTIL_ELEM_MIX (0 < beta <= 1/2), MIXH (1/2 < beta < 1), or
 * FWD (beta == 0) / REV (beta == 1). */
distil_elem_beta distil_elem_beta_make(float beta);

/* Any divergence (a distil_divergence of distil.h): JSD uses beta, SKEW_KL and SKEW_REVERSE_KL
 * use alpha (0: the plain KL, exactly; 1: ZERO). Values already validated (in [0, 1]); an
 * unknown divergence gives the JSD. */
distil_elem_beta distil_elem_div_make(int divergence, float beta, float alpha);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_ELEM_BETA_H */
