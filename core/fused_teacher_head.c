/*
 * fused_teacher_head.c - the teacher source of a dense teacher head (docs/SPEC.md §2 step 1): each
 * chunk's zt = xt_c Wt^T + bt by the same GEMM as the student's logits, with the row statistics
 * where the loop takes them.
 */
#include "fused_sources.h"

#include "fused_logits.h"

static distil_fused_linear distil_teacher_head_linear(const distil_fused_args *a,
                                                      const distil_teacher_head *h) {
    const distil_fused_linear l = {.x = h->xt,
                                   .w = h->wt,
                                   .bias = h->bt,
                                   .h = h->ht,
                                   .inv_temperature = a->inv_teacher_temperature,
                                   .teacher = true};
    return l;
}

static void distil_teacher_head_shape(const void *self, const distil_ctx *ctx,
                                      distil_fused_shape *s) {
    (void)self;
    (void)ctx;
    s->zt = true;
}

static distil_status distil_teacher_head_logits(const distil_fused_view *view, const void *self,
                                                int64_t r0, int64_t c) {
    const distil_fused_linear l = distil_teacher_head_linear(view->a, self);
    const distil_gemm_args g = distil_fused_logits_gemm(view->a, view->p, &l, r0, c, view->stats);
    return view->ctx->be->gemm(view->ctx->b, &g);
}

static bool distil_teacher_head_stats_ok(const distil_ctx *ctx, const distil_fused_args *a,
                                         const void *self, const distil_fused_plan *p, int64_t c,
                                         bool grads) {
    const distil_fused_linear l = distil_teacher_head_linear(a, self);
    const distil_gemm_args g = distil_fused_logits_gemm(a, p, &l, 0, c, true);
    return ctx->be->stats_ok(ctx->b, &g, grads);
}

static void distil_teacher_head_whole(const void *self, distil_fused_args *a) {
    a->teacher_head = self;
}

static const distil_teacher_ops distil_teacher_head_ops = {
    .shape = distil_teacher_head_shape,
    .logits = distil_teacher_head_logits,
    .stats_ok = distil_teacher_head_stats_ok,
    .whole = distil_teacher_head_whole,
};

distil_teacher_source distil_teacher_head_source(const distil_teacher_head *head) {
    const distil_teacher_source t = {.ops = &distil_teacher_head_ops, .self = head};
    return t;
}
