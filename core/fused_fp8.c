/*
 * fused_fp8.c - the fp8 teacher head (docs/SPEC.md §6), see fused_fp8.h. Per call: one pass over
 * Wt (quant_rows: amax and e4m3 per row), unless the caller made it once (distil_e4m3_head_make,
 * e4m3_head.c: the same quant_rows, so the same bits); per chunk: one pass over the chunk's xt,
 * then one e4m3 product whose epilogue applies both scales and the bias, so the (C, V) logits are
 * written once and never read back before the row pass.
 */
#include "fused_fp8.h"

#include "error.h"
#include "fused_head.h"

#include <stdint.h>

size_t distil_e4m3_head_bytes(int eb, int64_t rows, int64_t cols, size_t *off_scale) {
    /* a multiple of 16 bytes (ldq is): the scales follow with no gap, 16-byte aligned */
    *off_scale = (size_t)rows * (size_t)distil_e4m3_ld(cols) * (size_t)eb;
    return *off_scale + (size_t)rows * sizeof(float);
}

distil_status distil_e4m3_head_check_align(distil_ctx *ctx, const char *fn, const char *arg,
                                           const void *head) {
    if ((uintptr_t)head % 16 != 0) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %p is not 16-byte aligned", fn,
                                arg, head);
    }
    return DISTIL_OK;
}

/* The head made once: given only with the fp8 head, aligned, of the size this backend makes for
 * Wt. */
static distil_status distil_fused_fp8_check_head(distil_ctx *ctx, const char *fn,
                                                 const distil_fused_linear_jsd_desc *d) {
    if (d->teacher_weight_e4m3 == NULL) {
        return DISTIL_OK;
    }
    if (d->teacher_head_precision != DISTIL_HEAD_PRECISION_FP8_E4M3) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3 is given but teacher_head_precision is "
                                "not FP8_E4M3",
                                fn);
    }
    DISTIL_TRY(
        distil_e4m3_head_check_align(ctx, fn, "teacher_weight_e4m3", d->teacher_weight_e4m3));
    size_t off;
    const int64_t vt = distil_fused_teacher_vocab(d);
    const size_t want = distil_e4m3_head_bytes(ctx->be->e4m3_bytes, vt, d->teacher_hidden, &off);
    if (ctx->be->e4m3_bytes <= 0 || d->teacher_weight_e4m3_bytes != want) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3_bytes %zu != %zu, distil_e4m3_head_size "
                                "of the teacher's head (%lld rows, %lld columns) on backend '%s'",
                                fn, d->teacher_weight_e4m3_bytes, want, (long long)vt,
                                (long long)d->teacher_hidden, ctx->be->name);
    }
    return DISTIL_OK;
}

void distil_fused_fp8_head_args(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                                distil_fused_args *a) {
    if (!a->teacher_fp8 || d->teacher_weight_e4m3 == NULL) { /* checked: only with fp8 */
        return;
    }
    size_t off;
    (void)distil_e4m3_head_bytes(ctx->be->e4m3_bytes, distil_fused_teacher_vocab(d), a->ht, &off);
    a->wq = distil_dptr_make(d->teacher_weight_e4m3, 0);
    a->wq_bytes = d->teacher_weight_e4m3_bytes;
    a->wq_ld = distil_e4m3_ld(a->ht);
    a->wq_scale = distil_dptr_add(a->wq, off);
}

distil_status distil_fused_fp8_check(distil_ctx *ctx, const char *fn,
                                     const distil_fused_linear_jsd_desc *d) {
    const distil_head_precision h = d->teacher_head_precision;
    if (h == DISTIL_HEAD_PRECISION_DEFAULT) {
        return distil_fused_fp8_check_head(ctx, fn, d); /* refuses a head made once */
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
    return distil_fused_fp8_check_head(ctx, fn, d);
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
    if (distil_dptr_present(a->wq)) {
        return DISTIL_OK; /* made once (distil_e4m3_head_make) */
    }
    return distil_fused_fp8_quant(be, b, a, p, a->wt, a->vocab, p->off_wq, p->off_sw);
}

distil_status distil_fused_fp8_logits(const distil_backend *be, void *b, const distil_fused_args *a,
                                      const distil_fused_plan *p, int64_t r0, int64_t c) {
    const size_t es = distil_dtype_size(a->dtype);
    const distil_dptr xt = distil_dptr_add(a->xt, (size_t)(r0 * a->ht) * es);
    DISTIL_TRY(distil_fused_fp8_quant(be, b, a, p, xt, c, p->off_xq, p->off_sx));
    const bool given = distil_dptr_present(a->wq); /* Wt's rows made once */
    distil_gemm_e4m3_args g = {.m = c,
                               .n = a->vocab,
                               .k = a->ht,
                               .a = distil_dptr_add(a->workspace, p->off_xq),
                               .lda = p->ldq,
                               .sa = distil_dptr_add(a->workspace, p->off_sx),
                               .b = given ? a->wq : distil_dptr_add(a->workspace, p->off_wq),
                               .ldb = given ? a->wq_ld : p->ldq,
                               .sb = given ? a->wq_scale : distil_dptr_add(a->workspace, p->off_sw),
                               .c = distil_dptr_add(a->workspace, p->off_zt),
                               .ldc = a->vocab,
                               .bias = a->bt,
                               .bias_dtype = a->dtype};
    return be->gemm_e4m3(b, &g);
}
