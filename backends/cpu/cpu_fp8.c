/*
 * cpu_fp8.c - the fp8 teacher head of docs/SPEC.md §6 on the cpu backend. quant_rows stores each
 * e4m3 code as its value in fp16 (exact: every e4m3 value is an fp16), so that gemm_e4m3 is the
 * backend's fp32 GEMM on those values (products of two e4m3 values are exact in fp32) followed by
 * the scales and the bias, one pass over the (m, n) result.
 */
#include "cpu_internal.h"

#include "error.h"
#include "half.h"
#include "math/distil_e4m3.h"

#include <math.h>

/* Element i of a row of dtype as fp32 (exact). */
static float cpu_fp8_load(const void *p, distil_dtype dt, int64_t i) {
    if (dt == DISTIL_F32) {
        return ((const float *)p)[i];
    }
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == DISTIL_BF16 ? distil_bf16_to_f32(h) : distil_f16_to_f32(h);
}

/* One row: its scale, and its codes' values as fp16 into q. */
static float cpu_fp8_row(const void *src, distil_dtype dt, int64_t n, uint16_t *q) {
    float amax = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float m = fabsf(cpu_fp8_load(src, dt, j));
        amax = (m > amax || m != m) ? m : amax; /* a NaN stays */
    }
    const float s = distil_e4m3_row_scale(amax);
    for (int64_t j = 0; j < n; j++) {
        const unsigned int c = distil_e4m3_quant(cpu_fp8_load(src, dt, j), s);
        q[j] = distil_f32_to_f16(distil_e4m3_value(c));
    }
    return s;
}

distil_status distil_cpu_quant_rows(void *b, const distil_quant_rows_args *a) {
    const cpu_state *st = b;
    const char *src = distil_dptr_addr(a->src);
    uint16_t *dst = distil_dptr_addr(a->dst);
    float *scale = distil_dptr_addr(a->scale);
    const size_t es = distil_dtype_size(a->src_dtype);
#pragma omp parallel for num_threads(st->threads) schedule(static) if (a->rows * a->cols >= 65536)
    for (int64_t i = 0; i < a->rows; i++) {
        uint16_t *q = dst + i * a->dst_ld;
        scale[i] = cpu_fp8_row(src + (size_t)(i * a->src_ld) * es, a->src_dtype, a->cols, q);
        for (int64_t j = a->cols; j < a->dst_ld; j++) {
            q[j] = 0; /* unread by gemm_e4m3; zeroed so that a head made once has fixed bytes */
        }
    }
    return DISTIL_OK;
}

distil_status distil_cpu_gemm_e4m3(void *b, const distil_gemm_e4m3_args *a) {
    const cpu_state *st = b;
    distil_gemm_args g = {.trans_b = true,
                          .m = a->m,
                          .n = a->n,
                          .k = a->k,
                          .alpha = 1.0f,
                          .a_dtype = DISTIL_F16,
                          .b_dtype = DISTIL_F16,
                          .c_dtype = DISTIL_F32,
                          .a = a->a,
                          .lda = a->lda,
                          .b = a->b,
                          .ldb = a->ldb,
                          .c = a->c,
                          .ldc = a->ldc};
    DISTIL_TRY(distil_cpu_gemm(b, &g));
    float *c = distil_dptr_addr(a->c);
    const float *sa = distil_dptr_addr(a->sa), *sb = distil_dptr_addr(a->sb);
    const void *bias = distil_dptr_addr(a->bias);
#pragma omp parallel for num_threads(st->threads) schedule(static) if (a->m * a->n >= 65536)
    for (int64_t i = 0; i < a->m; i++) {
        float *row = c + i * a->ldc;
        for (int64_t j = 0; j < a->n; j++) {
            const float z = (sa[i] * sb[j]) * row[j];
            row[j] = bias != NULL ? z + cpu_fp8_load(bias, a->bias_dtype, j) : z;
        }
    }
    return DISTIL_OK;
}
