/* fused_logits.c - see fused_logits.h. */
#include "fused_logits.h"

distil_fused_linear distil_fused_student_linear(const distil_fused_args *a) {
    const distil_fused_linear l = {
        .x = a->xs, .w = a->ws, .bias = a->bs, .h = a->hs, .inv_temperature = a->inv_temperature};
    return l;
}

distil_dptr distil_fused_stats_plane(const distil_fused_args *a, const distil_fused_plan *p,
                                     int i) {
    if (p == NULL) {
        return distil_dptr_make(NULL, 0);
    }
    return distil_dptr_add(a->workspace, p->off_stats + (size_t)i * p->stats_plane * sizeof(float));
}

distil_gemm_args distil_fused_logits_gemm(const distil_fused_args *a, const distil_fused_plan *p,
                                          const distil_fused_linear *l, int64_t r0, int64_t c,
                                          bool stats) {
    const size_t es = distil_dtype_size(a->dtype);
    const distil_dptr none = distil_dptr_make(NULL, 0);
    const float log2e = 1.4426950408889634f;
    distil_gemm_args g = {.trans_b = true,
                          .m = c,
                          .n = a->vocab,
                          .k = l->h,
                          .alpha = 1.0f,
                          .a_dtype = a->dtype,
                          .b_dtype = a->dtype,
                          .c_dtype = DISTIL_F32,
                          .a = p ? distil_dptr_add(l->x, (size_t)(r0 * l->h) * es) : none,
                          .lda = l->h,
                          .b = p ? l->w : none,
                          .ldb = l->h,
                          .c = p ? distil_dptr_add(a->workspace, l->teacher ? p->off_zt : p->off_zs)
                                 : none,
                          .ldc = a->vocab,
                          .bias = p ? l->bias : none,
                          .stats_c1 = log2e * l->inv_temperature};
    if (stats) {
        g.stats_max = distil_fused_stats_plane(a, p, l->teacher ? 2 : 0);
        g.stats_s1 = distil_fused_stats_plane(a, p, l->teacher ? 3 : 1);
    }
    return g;
}
