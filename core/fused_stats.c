/* fused_stats.c - see fused_stats.h. */
#include "fused_stats.h"

#include "fused_head.h"
#include "fused_logits.h"

bool distil_fused_stats_ask(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_plan *p, int64_t c,
                            bool grads) {
    const distil_fused_linear l = distil_fused_student_linear(a);
    const distil_gemm_args s = distil_fused_logits_gemm(a, p, &l, 0, c, true);
    return ctx->be->stats_ok(ctx->b, &s, grads) && t->ops->stats_ok(ctx, a, t->self, p, c, grads);
}

int distil_fused_stats_cols(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_pass *pass,
                            bool grads) {
    const distil_backend *be = ctx->be;
    if (!pass->ops->takes_stats || be->stats_ok == NULL || be->stats_cols <= 0 ||
        t->ops->stats_ok == NULL || distil_fused_head_needed(a) ||
        distil_dptr_present(a->student_entropy)) {
        return 0;
    }
    /* the shape; the chunk's rows do not change what is asked */
    return distil_fused_stats_ask(ctx, a, t, NULL, a->rows, grads) ? be->stats_cols : 0;
}
