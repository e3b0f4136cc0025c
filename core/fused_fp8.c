/*
 * fused_fp8.c - the fp8 teacher head (docs/SPEC.md §6), see fused_fp8.h. Per call: one pass over
 * Wt (quant_rows: amax and e4m3 per row); per chunk: one pass over the chunk's xt, then one
 * e4m3 product whose epilogue applies both scales and the bias, so the (C, V) logits are written
 * once and never read back before the row pass.
 */
#include "fused_fp8.h"

#include "error.h"

distil_status distil_fused_fp8_check(distil_ctx *ctx, const char *fn,
                                     const distil_fused_linear_jsd_desc *d) {
    const distil_head_precision h = d->teacher_head_precision;
    if (h == DISTIL_HEAD_PRECISION_DEFAULT) {
        return DISTIL_OK;
    }
    if (h != DISTIL_HEAD_PRECISION_FP8_E4M3) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_head_precision %d is not DEFAULT (0) or FP8_E4M3 (1)",
                                fn, (int)h);
    }
    const distil_backend *be = ctx->be;
    if (be->fused_linear_jsd == NULL && (be->quant_rows == NULL || be->gemm_e4m3 == NULL)) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: teacher_head_precision FP8_E4M3: backend '%s' has no fp8 "
                                "teacher head",
                                fn, be->name);
    }
    return DISTIL_OK;
}

int distil_fused_fp8_bytes(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d) {
    if (d->teacher_head_precision != DISTIL_HEAD_PRECISION_FP8_E4M3 ||
        ctx->be->fused_linear_jsd != NULL) {
        return 0;
    }
    return ctx->be->e4m3_bytes;
}

/* rows (rows, ht) of src, dtype, dense, into dst (ldq) and scale. */
static distil_status distil_fused_fp8_quant(const distil_backend *be, void *b,
                                            const distil_fused_args *a, const distil_fused_plan *p,
                                            distil_dptr src, int64_t rows, size_t off_q,
                                            size_t off_s) {
    distil_quant_rows_args q = {.src = src,
                                .src_ld = a->ht,
                                .src_dtype = a->dtype,
                                .rows = rows,
                                .cols = a->ht,
                                .dst = distil_dptr_add(a->workspace, off_q),
                                .dst_ld = p->ldq,
                                .scale = distil_dptr_add(a->workspace, off_s)};
    return be->quant_rows(b, &q);
}

distil_status distil_fused_fp8_weights(const distil_backend *be, void *b,
                                       const distil_fused_args *a, const distil_fused_plan *p) {
    return distil_fused_fp8_quant(be, b, a, p, a->wt, a->vocab, p->off_wq, p->off_sw);
}

distil_status distil_fused_fp8_logits(const distil_backend *be, void *b, const distil_fused_args *a,
                                      const distil_fused_plan *p, int64_t r0, int64_t c) {
    const size_t es = distil_dtype_size(a->dtype);
    const distil_dptr xt = distil_dptr_add(a->xt, (size_t)(r0 * a->ht) * es);
    DISTIL_TRY(distil_fused_fp8_quant(be, b, a, p, xt, c, p->off_xq, p->off_sx));
    distil_gemm_e4m3_args g = {.m = c,
                               .n = a->vocab,
                               .k = a->ht,
                               .a = distil_dptr_add(a->workspace, p->off_xq),
                               .lda = p->ldq,
                               .sa = distil_dptr_add(a->workspace, p->off_sx),
                               .b = distil_dptr_add(a->workspace, p->off_wq),
                               .ldb = p->ldq,
                               .sb = distil_dptr_add(a->workspace, p->off_sw),
                               .c = distil_dptr_add(a->workspace, p->off_zt),
                               .ldc = a->vocab,
                               .bias = a->bt,
                               .bias_dtype = a->dtype};
    return be->gemm_e4m3(b, &g);
}
