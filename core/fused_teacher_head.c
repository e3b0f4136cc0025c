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
    return distil_fused_logits_run(view, &l, r0, c);
}

static bool distil_teacher_head_stats_fit(const distil_ctx *ctx, const distil_fused_args *a,
                                          const void *self, bool grads) {
    const distil_fused_linear l = distil_teacher_head_linear(a, self);
    const distil_gemm_stats_shape s = distil_fused_logits_shape(a, &l, grads);
    return ctx->be->epilogue->stats_fit(ctx->b, &s);
}

static bool distil_teacher_head_stats_ok(const distil_ctx *ctx, const distil_fused_args *a,
                                         const void *self, const distil_fused_plan *p, int64_t c) {
    const distil_fused_linear l = distil_teacher_head_linear(a, self);
    const distil_gemm_stats_args g = distil_fused_logits_stats(a, p, &l, 0, c);
    return ctx->be->epilogue->stats_ok(ctx->b, &g);
}

static void distil_teacher_head_whole(const void *self, distil_fused_args *a) {
    a->teacher_head = self;
}

static const distil_teacher_ops distil_teacher_head_ops = {
    .shape = distil_teacher_head_shape,
    .logits = distil_teacher_head_logits,
    .stats_fit = distil_teacher_head_stats_fit,
    .stats_ok = distil_teacher_head_stats_ok,
    .whole = distil_teacher_head_whole,
};

distil_teacher_source distil_teacher_head_source(const distil_teacher_head *head) {
    const distil_teacher_source t = {.ops = &distil_teacher_head_ops, .self = head};
    return t;
}
