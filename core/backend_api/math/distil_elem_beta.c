/* distil_elem_beta.c - the float64 constants of one beta (distil_elem_beta.h). */
#include "distil_elem_beta.h"

#include <math.h>

distil_elem_beta distil_elem_beta_make(float beta) {
    distil_elem_beta k = {0};
    double b = (double)beta;
    k.beta = b;
    k.omb = 1.0 - b; /* exact in double for a float beta */
    if (beta == 0.0f || beta == 1.0f) {
        k.mode = beta == 0.0f ? 1 : 2;
        return k;
    }
    k.lb = log(b);
    k.l1b = log1p(-b);
    k.c = k.lb - k.l1b;
    k.ka = k.omb / b;
    k.kb = b / k.omb;
    return k;
}
