/* fused_logits.c - see fused_logits.h. */
#include "fused_logits.h"

distil_fused_linear distil_fused_student_linear(const distil_fused_args *a) {
    const distil_fused_linear l = {
        .x = a->xs, .w = a->ws, .bias = a->bs, .h = a->hs, .inv_temperature = a->inv_temperature};
    return l;
}

distil_dptr distil_fused_stats_plane(const distil_fused_args *a, const distil_fused_plan *p,
                                     int i) {
    return distil_dptr_add(a->workspace, p->off_stats + (size_t)i * p->stats_plane * sizeof(float));
}

distil_gemm_args distil_fused_logits_gemm(const distil_fused_args *a, const distil_fused_plan *p,
                                          const distil_fused_linear *l, int64_t r0, int64_t c) {
    const size_t es = distil_dtype_size(a->dtype);
    const distil_gemm_args g = {
        .trans_b = true,
        .m = c,
        .n = a->vocab,
        .k = l->h,
        .alpha = 1.0f,
        .a_dtype = a->dtype,
        .b_dtype = a->dtype,
        .c_dtype = DISTIL_F32,
        .a = distil_dptr_add(l->x, (size_t)(r0 * l->h) * es),
        .lda = l->h,
        .b = l->w,
        .ldb = l->h,
        .c = distil_dptr_add(a->workspace, l->teacher ? p->off_zt : p->off_zs),
        .ldc = a->vocab,
        .bias = l->bias};
    return g;
}

distil_gemm_stats_args distil_fused_logits_stats(const distil_fused_args *a,
                                                 const distil_fused_plan *p,
                                                 const distil_fused_linear *l, int64_t r0,
                                                 int64_t c) {
    const float log2e = 1.4426950408889634f;
    const distil_gemm_stats_args g = {.gemm = distil_fused_logits_gemm(a, p, l, r0, c),
                                      .max = distil_fused_stats_plane(a, p, l->teacher ? 2 : 0),
                                      .s1 = distil_fused_stats_plane(a, p, l->teacher ? 3 : 1),
                                      .c1 = log2e * l->inv_temperature};
    return g;
}

distil_gemm_stats_shape distil_fused_logits_shape(const distil_fused_args *a,
                                                  const distil_fused_linear *l, bool grads) {
    const distil_gemm_stats_shape s = {
        .m = a->rows, .n = a->vocab, .k = l->h, .dtype = a->dtype, .grads = grads};
    return s;
}

distil_status distil_fused_logits_run(const distil_fused_view *view, const distil_fused_linear *l,
                                      int64_t r0, int64_t c) {
    const distil_backend *be = view->ctx->be;
    if (view->stats) {
        const distil_gemm_stats_args g = distil_fused_logits_stats(view->a, view->p, l, r0, c);
        return be->epilogue->gemm_stats(view->ctx->b, &g);
    }
    const distil_gemm_args g = distil_fused_logits_gemm(view->a, view->p, l, r0, c);
    return be->gemm(view->ctx->b, &g);
}
