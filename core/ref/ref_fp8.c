/*
 * ref_fp8.c - the fp8 teacher head of docs/SPEC.md §6 in the float64 reference: each row of Wt
 * (once per call) and of xt quantised by math/distil_e4m3.h in fp32, exactly as the SPEC states,
 * then zt[v] = s_x s_w[v] sum_h qx[h] qw[v, h] + bt[v] in double.
 */
#include "ref.h"

#include "math/distil_e4m3.h"

#include <math.h>
#include <stdlib.h>

/* Row i (n wide) of x in dtype into the e4m3 values q (fp32, exact) and its scale. */
static float distil_ref_fp8_row(const void *x, distil_dtype dtype, int64_t i, int64_t n, float *q) {
    float amax = 0.0f;
    for (int64_t h = 0; h < n; h++) {
        q[h] = (float)distil_ref_load(x, dtype, i * n + h); /* exact: an fp32, bf16 or fp16 */
        const float m = fabsf(q[h]);
        amax = (m > amax || m != m) ? m : amax; /* a NaN stays */
    }
    const float s = distil_e4m3_row_scale(amax);
    for (int64_t h = 0; h < n; h++) {
        q[h] = distil_e4m3_value(distil_e4m3_quant(q[h], s));
    }
    return s;
}

distil_status distil_ref_fp8_alloc(distil_ref_state *st, const distil_fused_args *a,
                                   distil_ref_fused_buf *B) {
    if (!a->teacher_fp8) {
        return DISTIL_OK;
    }
    const size_t V = (size_t)a->vocab, H = (size_t)a->ht;
    B->wq = malloc((V * H + V + H) * sizeof(float));
    if (B->wq == NULL) {
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "fused_linear_jsd: ref: out of host memory (fp8 teacher head)");
    }
    B->sw = B->wq + V * H;
    B->xq = B->sw + V;
    for (int64_t v = 0; v < a->vocab; v++) {
        B->sw[v] =
            distil_ref_fp8_row(distil_dptr_addr(a->wt), a->dtype, v, a->ht, B->wq + (size_t)v * H);
    }
    return DISTIL_OK;
}

void distil_ref_fp8_logits(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i,
                           double *z) {
    const void *bias = distil_dptr_addr(a->bt);
    const int64_t H = a->ht;
    const double sx = distil_ref_fp8_row(distil_dptr_addr(a->xt), a->dtype, i, H, B->xq);
    for (int64_t v = 0; v < a->vocab; v++) {
        const float *w = B->wq + v * H;
        double acc = 0.0;
        for (int64_t h = 0; h < H; h++) {
            acc += (double)B->xq[h] * (double)w[h];
        }
        z[v] = sx * (double)B->sw[v] * acc + (bias ? distil_ref_load(bias, a->dtype, v) : 0.0);
    }
}
