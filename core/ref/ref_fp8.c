/*
 * ref_fp8.c - the fp8 teacher head of docs/SPEC.md §6 in the float64 reference: each row of Wt
 * (once per call, or decoded from a head made once by quant_rows below: the e4m3 byte per code)
 * and of xt quantised by math/distil_e4m3.h in fp32, exactly as the SPEC states, then zt[v] = s_x
 * s_w[v] sum_h qx[h] qw[v, h] + bt[v] in double.
 */
#include "ref.h"

#include "math/distil_e4m3.h"

#include <math.h>
#include <stdlib.h>

/* The row of x in dtype at element offset off (n wide): its scale; its e4m3 values (fp32,
 * exact) into q and, with c not NULL, its codes into c. */
static float distil_ref_fp8_row(const void *x, distil_dtype dtype, size_t off, int64_t n, float *q,
                                unsigned char *c) {
    float amax = 0.0f;
    for (int64_t h = 0; h < n; h++) {
        q[h] = (float)distil_ref_load(x, dtype, (int64_t)off + h); /* exact: fp32, bf16 or fp16 */
        const float m = fabsf(q[h]);
        amax = (m > amax || m != m) ? m : amax; /* a NaN stays */
    }
    const float s = distil_e4m3_row_scale(amax);
    for (int64_t h = 0; h < n; h++) {
        const unsigned int code = distil_e4m3_quant(q[h], s);
        q[h] = distil_e4m3_value(code);
        if (c != NULL) {
            c[h] = (unsigned char)code;
        }
    }
    return s;
}

distil_status distil_ref_quant_rows(void *b, const distil_quant_rows_args *a) {
    distil_ref_state *st = b;
    float *q = malloc((size_t)a->cols * sizeof(float));
    if (q == NULL) {
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "quant_rows: ref: out of host memory");
    }
    unsigned char *dst = distil_dptr_addr(a->dst);
    float *scale = distil_dptr_addr(a->scale);
    for (int64_t i = 0; i < a->rows; i++) {
        unsigned char *c = dst + i * a->dst_ld;
        scale[i] = distil_ref_fp8_row(distil_dptr_addr(a->src), a->src_dtype,
                                      (size_t)(i * a->src_ld), a->cols, q, c);
        for (int64_t h = a->cols; h < a->dst_ld; h++) {
            c[h] = 0;
        }
    }
    free(q);
    return DISTIL_OK;
}

/* Wt's rows of a head made once (q->wq: codes, then scales) as values into B. */
static void distil_ref_fp8_decode(const distil_fused_args *a, const distil_teacher_e4m3 *q,
                                  distil_ref_fused_buf *B) {
    const unsigned char *codes = distil_dptr_addr(q->wq);
    const float *scale = distil_dptr_addr(q->wq_scale);
    const int64_t H = q->head.ht;
    for (int64_t v = 0; v < a->vocab; v++) {
        B->sw[v] = scale[v];
        for (int64_t h = 0; h < H; h++) {
            B->wq[v * H + h] = distil_e4m3_value(codes[v * q->wq_ld + h]);
        }
    }
}

distil_status distil_ref_fp8_alloc(distil_ref_state *st, const distil_fused_args *a,
                                   distil_ref_fused_buf *B) {
    const distil_teacher_e4m3 *q = a->teacher_e4m3;
    if (q == NULL) {
        return DISTIL_OK;
    }
    const size_t V = (size_t)a->vocab, H = (size_t)q->head.ht;
    B->wq = malloc((V * H + V + H) * sizeof(float));
    if (B->wq == NULL) {
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "fused_linear_jsd: ref: out of host memory (fp8 teacher head)");
    }
    B->sw = B->wq + V * H;
    B->xq = B->sw + V;
    if (distil_dptr_present(q->wq)) { /* made once (distil_e4m3_head_make) */
        distil_ref_fp8_decode(a, q, B);
        return DISTIL_OK;
    }
    for (int64_t v = 0; v < a->vocab; v++) {
        B->sw[v] = distil_ref_fp8_row(distil_dptr_addr(q->head.wt), a->dtype, (size_t)v * H,
                                      q->head.ht, B->wq + (size_t)v * H, NULL);
    }
    return DISTIL_OK;
}

void distil_ref_fp8_logits(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i,
                           double *z) {
    const distil_teacher_head *t = &a->teacher_e4m3->head;
    const void *bias = distil_dptr_addr(t->bt);
    const int64_t H = t->ht;
    const double sx =
        distil_ref_fp8_row(distil_dptr_addr(t->xt), a->dtype, (size_t)(i * H), H, B->xq, NULL);
    for (int64_t v = 0; v < a->vocab; v++) {
        const float *w = B->wq + v * H;
        double acc = 0.0;
        for (int64_t h = 0; h < H; h++) {
            acc += (double)B->xq[h] * (double)w[h];
        }
        z[v] = sx * (double)B->sw[v] * acc + (bias ? distil_ref_load(bias, a->dtype, v) : 0.0);
    }
}
