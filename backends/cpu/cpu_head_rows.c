/*
 * cpu_head_rows.c - head_rows of the cpu backend (docs/SPEC.md §6): a chunk's logits scaled and
 * capped in place (math/distil_head.h in float), the student's dz'/dz, and each row's logsumexp,
 * one row per OpenMP iteration. Runs only when a head option is asked for. The exp sum is taken in
 * double in column order, so the result does not depend on the thread count.
 */
#include "cpu_internal.h"

#include <math.h>

#define DE_T      float
#define DE_S      float
#define DE_FN     static inline
#define DE_K(lit) lit##f
#define DH_TANH   tanhf
#define DH_EXP    expf
#include "math/distil_head.h"

/* logsumexp of z (n fp32); -inf or +inf when the maximum is, NaN when any z is NaN. */
static float cpu_head_lse(const float *z, int64_t n) {
    float m = -INFINITY;
    for (int64_t v = 0; v < n; v++) {
        m = z[v] > m || isnan(z[v]) ? z[v] : m;
        if (isnan(m)) {
            return m;
        }
    }
    if (isinf(m)) {
        return m;
    }
    double s = 0.0;
    for (int64_t v = 0; v < n; v++) {
        s += exp((double)(z[v] - m));
    }
    return (float)((double)m + log(s));
}

distil_status distil_cpu_head_rows(void *b, const distil_head_rows_args *a) {
    const cpu_state *st = b;
    float *z = distil_dptr_addr(a->z);
    float *lse = distil_dptr_addr(a->lse);
    float *dz = distil_dptr_addr(a->dz);
#pragma omp parallel for num_threads(st->threads) schedule(static) if (a->rows > 1)
    for (int64_t i = 0; i < a->rows; i++) {
        float *row = z + i * a->vocab;
        float *drow = dz != NULL ? dz + i * a->vocab : NULL;
        for (int64_t v = 0; a->transform && v < a->vocab; v++) {
            if (drow != NULL) {
                drow[v] = dh_dcap(row[v], a->scale, a->cap); /* from z, before it goes */
            }
            row[v] = dh_cap(row[v], a->scale, a->cap);
        }
        if (lse != NULL) {
            lse[i] = cpu_head_lse(row, a->vocab);
        }
    }
    return DISTIL_OK;
}
