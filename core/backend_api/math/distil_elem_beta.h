/*
 * distil_elem_beta.h - the constants of one beta for the element terms of distil_elem.h, computed
 * once on the host in float64 and rounded once by each backend (DE_COEF_SET): log(1 - beta) as
 * log1p(-beta), and the ratios of the weights, so that no backend rounds 1 - beta before a log.
 */
#ifndef DISTIL_ELEM_BETA_H
#define DISTIL_ELEM_BETA_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct distil_elem_beta {
    double beta, omb; /* beta, 1 - beta */
    double lb, l1b;   /* log beta, log1p(-beta) (0 at the endpoints) */
    double c;         /* lb - l1b */
    double ka, kb;    /* (1 - beta) / beta, beta / (1 - beta) (0 at the endpoints) */
    int mode;         /* DE_MIX (0), DE_FWD (1, beta == 0) or DE_REV (2, beta == 1) */
} distil_elem_beta;

distil_elem_beta distil_elem_beta_make(float beta);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_ELEM_BETA_H */
