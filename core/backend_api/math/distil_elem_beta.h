/*
 * distil_elem_beta.h - the constants of one beta for the element terms of distil_elem.h, computed
 * once on the host in float64 and rounded once by each backend (DE_COEF_SET): log(1 - beta) as
 * log1p(-beta) and their difference, so that no backend rounds 1 - beta before a log.
 * distil_elem_div_make maps a divergence of docs/SPEC.md §6 and its parameter to the same
 * constants and a mode.
 */
#ifndef DISTIL_ELEM_BETA_H
#define DISTIL_ELEM_BETA_H

#include "distil_div_list.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct distil_elem_beta {
    double beta, omb; /* beta, 1 - beta: the teacher's and the student's weight in m */
    double lb, l1b;   /* log beta, log(1 - beta) (0 where a mode has no m) */
    double c;         /* lb - l1b */
    double kd;        /* |1 - 2 beta| */
    int mode;         /* a DE_ mode (distil_div_list.h) */
} distil_elem_beta;

/* The generalised JSD of one beta: DE_MIX (0 < beta <= 1/2), DE_MIXH (1/2 < beta < 1), or
 * DE_FWD (beta == 0) / DE_REV (beta == 1). */
distil_elem_beta distil_elem_beta_make(float beta);

/* Any divergence (a distil_divergence of distil.h), by its line of distil_div_list.h: JSD uses
 * beta, SKEW_KL and SKEW_REVERSE_KL use alpha (0: the plain KL, exactly; 1: ZERO), the others
 * neither. Values already validated (in [0, 1]); an unknown divergence gives the JSD. */
distil_elem_beta distil_elem_div_make(int divergence, float beta, float alpha);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_ELEM_BETA_H */
