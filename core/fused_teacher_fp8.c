/*
 * fused_teacher_fp8.c - the teacher source of the fp8 teacher head (docs/SPEC.md §6): the dense
 * head's logits from e4m3 rows with a scale per row. Per call: one pass over Wt (quant_rows: amax
 * and e4m3 per row), unless the caller made it once (distil_e4m3_head_make, e4m3_head.c: the same
 * quant_rows, so the same bits); per chunk: one pass over the chunk's xt, then one e4m3 product
 * whose epilogue applies both scales and the bias, so the (C, V) logits are written once and never
 * read back before the row pass. Its regions of the plan, in this order:
 *   wq (V, ldq) e4m3 | sw (V) fp32    Wt's rows and scales, per call (none when made once)
 *   xq (C, ldq) e4m3 | sx (C) fp32    the chunk's xt rows and scales
 * ldq = distil_e4m3_ld(Ht); e4m3 elements of the backend's e4m3_bytes.
 */
#include "fused_sources.h"

#include "error.h"
#include "fused_fp8.h"

enum { DISTIL_FP8_WQ, DISTIL_FP8_SW, DISTIL_FP8_XQ, DISTIL_FP8_SX };

static void distil_teacher_fp8_shape(const void *self, const distil_ctx *ctx,
                                     distil_fused_shape *s) {
    const distil_teacher_e4m3 *q = self;
    s->zt = true;
    /* a backend that computes the loss whole (ref) needs none of the loop's regions */
    const size_t eb = ctx->be->whole != NULL ? 0 : (size_t)ctx->be->tuning.e4m3_bytes;
    if (eb == 0) {
        return;
    }
    const size_t ldq = (size_t)distil_e4m3_ld(q->head.ht), v = (size_t)s->vocab;
    const bool wq = !distil_dptr_present(q->wq_head); /* Wt's rows, unless made once */
    s->teacher[DISTIL_FP8_WQ].call_bytes = wq ? v * ldq * eb : 0;
    s->teacher[DISTIL_FP8_SW].call_bytes = wq ? v * sizeof(float) : 0;
    s->teacher[DISTIL_FP8_XQ].row_bytes = ldq * eb;
    s->teacher[DISTIL_FP8_SX].row_bytes = sizeof(float);
}

/* rows (rows, ht) of src, dtype, dense, into the regions iq (codes) and is (scales). */
static distil_status distil_teacher_fp8_quant(const distil_fused_view *view,
                                              const distil_teacher_e4m3 *q, distil_dptr src,
                                              int64_t rows, int iq, int is) {
    const distil_fused_args *a = view->a;
    distil_quant_rows_args r = {.src = src,
                                .src_ld = q->head.ht,
                                .src_dtype = a->dtype,
                                .rows = rows,
                                .cols = q->head.ht,
                                .dst = distil_fused_region(a, view->p->off_teacher[iq]),
                                .dst_ld = distil_e4m3_ld(q->head.ht),
                                .scale = distil_fused_region(a, view->p->off_teacher[is])};
    return view->ctx->be->fp8->quant_rows(view->ctx->b, &r);
}

/* Before the loop: Wt's rows [0, vocab) into wq and sw, or, with a head made once on a device
 * backend, its header compared with the call's on the device (e4m3_header; synchronize reports a
 * difference). A device without fp8 refuses here, before anything is written. */
static distil_status distil_teacher_fp8_prologue(const distil_fused_view *view, const void *self) {
    const distil_teacher_e4m3 *q = self;
    const distil_backend *be = view->ctx->be;
    if (distil_dptr_present(q->wq)) { /* made once (distil_e4m3_head_make) */
        if (be->host_memory) {
            return DISTIL_OK; /* its header was read: distil_fused_fp8_check_given */
        }
        const distil_e4m3_header_args h = {
            .head = q->wq_head,
            .want =
                distil_e4m3_head_header(be->tuning.e4m3_bytes, view->a->teacher_vocab, q->head.ht),
            .write = false};
        return be->fp8->e4m3_header(view->ctx->b, &h);
    }
    return distil_teacher_fp8_quant(view, q, q->head.wt, view->a->vocab, DISTIL_FP8_WQ,
                                    DISTIL_FP8_SW);
}

/* zt of rows [r0, r0 + c): xt's rows into xq and sx, then zt = sx sw^T (xq wq^T) + bt. */
static distil_status distil_teacher_fp8_logits(const distil_fused_view *view, const void *self,
                                               int64_t r0, int64_t c) {
    const distil_teacher_e4m3 *q = self;
    const distil_fused_args *a = view->a;
    const distil_fused_plan *p = view->p;
    const int64_t ht = q->head.ht, ldq = distil_e4m3_ld(ht);
    const size_t es = distil_dtype_size(a->dtype);
    const distil_dptr xt = distil_dptr_add(q->head.xt, (size_t)(r0 * ht) * es);
    DISTIL_TRY(distil_teacher_fp8_quant(view, q, xt, c, DISTIL_FP8_XQ, DISTIL_FP8_SX));
    const bool given = distil_dptr_present(q->wq); /* Wt's rows made once */
    distil_gemm_e4m3_args g = {
        .m = c,
        .n = a->vocab,
        .k = ht,
        .a = distil_fused_region(a, p->off_teacher[DISTIL_FP8_XQ]),
        .lda = ldq,
        .sa = distil_fused_region(a, p->off_teacher[DISTIL_FP8_SX]),
        .b = given ? q->wq : distil_fused_region(a, p->off_teacher[DISTIL_FP8_WQ]),
        .ldb = given ? q->wq_ld : ldq,
        .sb = given ? q->wq_scale : distil_fused_region(a, p->off_teacher[DISTIL_FP8_SW]),
        .c = distil_fused_region(a, p->off_zt),
        .ldc = a->vocab,
        .bias = q->head.bt,
        .bias_dtype = a->dtype};
    return view->ctx->be->fp8->gemm_e4m3(view->ctx->b, &g);
}

static void distil_teacher_fp8_whole(const void *self, distil_fused_args *a) {
    const distil_teacher_e4m3 *q = self;
    a->teacher_head = &q->head;
    a->teacher_e4m3 = q;
}

static const distil_teacher_ops distil_teacher_fp8_ops = {
    .shape = distil_teacher_fp8_shape,
    .prologue = distil_teacher_fp8_prologue,
    .logits = distil_teacher_fp8_logits,
    .whole = distil_teacher_fp8_whole,
};

distil_teacher_source distil_teacher_e4m3_source(const distil_teacher_e4m3 *e4m3) {
    const distil_teacher_source t = {.ops = &distil_teacher_fp8_ops, .self = e4m3};
    return t;
}
