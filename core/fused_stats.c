/* fused_stats.c - see fused_stats.h. */
#include "fused_stats.h"

#include "fused_head.h"
#include "fused_logits.h"

bool distil_fused_stats_ask(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_plan *p, int64_t c) {
    const distil_fused_linear l = distil_fused_student_linear(a);
    const distil_gemm_stats_args s = distil_fused_logits_stats(a, p, &l, 0, c);
    return ctx->be->epilogue->stats_ok(ctx->b, &s) && t->ops->stats_ok(ctx, a, t->self, p, c);
}

int distil_fused_stats_cols(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_pass *pass,
                            bool grads) {
    const distil_backend *be = ctx->be;
    if (!pass->ops->takes_stats || be->epilogue == NULL || be->epilogue->gemm_stats == NULL ||
        t->ops->stats_fit == NULL || distil_fused_head_needed(a) ||
        distil_dptr_present(a->student_entropy)) {
        return 0;
    }
    const distil_fused_linear l = distil_fused_student_linear(a);
    const distil_gemm_stats_shape s = distil_fused_logits_shape(a, &l, grads);
    return be->epilogue->stats_fit(ctx->b, &s) && t->ops->stats_fit(ctx, a, t->self, grads)
               ? be->tuning.stats_cols
               : 0;
}
