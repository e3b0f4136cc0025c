/*
 * ref_head.c - the per-head logit options of docs/SPEC.md §6 in float64: the one formulation of
 * core/backend_api/math/distil_head.h instantiated in double.
 */
#include "ref.h"

#include <math.h>

#define DE_T      double
#define DE_S      double
#define DE_FN     static inline
#define DE_K(lit) lit
#define DH_TANH   tanh
#define DH_EXP    exp
#include "math/distil_head.h"

void distil_ref_head_apply(double *z, double *dz, int64_t n, double scale, double cap) {
    for (int64_t v = 0; v < n; v++) {
        if (dz != NULL) {
            dz[v] = dh_dcap(z[v], scale, cap);
        }
        z[v] = dh_cap(z[v], scale, cap);
    }
}
