/*
 * fused_teacher_topk.c - the teacher source of a cached top-k teacher (docs/SPEC.md §7) and its
 * row pass: no teacher logits (the plan has no zt, the loop no teacher GEMM), and topk_rows on
 * each chunk's zs against the teacher's ids and log-probs of the chunk's rows.
 */
#include "fused_sources.h"

static void distil_teacher_topk_shape(const void *self, const distil_ctx *ctx,
                                      distil_fused_shape *s) {
    (void)self;
    (void)ctx;
    s->zt = false;
}

static void distil_teacher_topk_whole(const void *self, distil_fused_args *a) {
    a->topk = self;
}

static const distil_teacher_ops distil_teacher_topk_ops = {
    .shape = distil_teacher_topk_shape,
    .whole = distil_teacher_topk_whole,
};

distil_teacher_source distil_teacher_topk_source(const distil_topk_teacher *topk) {
    const distil_teacher_source t = {.ops = &distil_teacher_topk_ops, .self = topk};
    return t;
}

/* ---- its row pass */

static bool distil_fused_pass_topk_ready(const distil_backend *be) {
    return be->topk_rows != NULL;
}

/* The chunk's rows against the teacher's rows [r0, r0 + r->rows). */
static distil_status distil_fused_pass_topk_rows(const distil_fused_view *view, const void *self,
                                                 const distil_fused_rows_args *r, int64_t r0) {
    distil_topk_teacher t = *(const distil_topk_teacher *)self;
    const size_t slots = (size_t)(r0 * t.k);
    t.ids = distil_dptr_add(t.ids, slots * (t.ids_i64 ? 8u : 4u));
    t.logp = distil_dptr_add(t.logp, slots * distil_dtype_size(t.logp_dtype));
    distil_topk_rows_args k = {.x = r->zs,
                               .x_stride = r->vocab,
                               .x_dtype = DISTIL_F32,
                               .logits = true,
                               .t = t,
                               .rows = r->rows,
                               .vocab = r->vocab,
                               .row0 = r0,
                               .labels = r->labels,
                               .ignore_index = r->ignore_index,
                               .beta = r->beta,
                               .inv_temperature = r->inv_temperature,
                               .weight_hard = r->weight_hard,
                               .weight_soft = r->weight_soft,
                               .ce_rows = r->ce_rows,
                               .soft_rows = r->soft_rows,
                               .g = r->g,
                               .g_dtype = r->g_dtype,
                               .g_stride = r->vocab,
                               .n_valid = r->n_valid,
                               .divergence = r->divergence,
                               .alpha = r->alpha};
    return view->ctx->be->topk_rows(view->ctx->b, &k);
}

static const distil_fused_pass_ops distil_fused_pass_topk_ops = {
    .ready = distil_fused_pass_topk_ready,
    .rows = distil_fused_pass_topk_rows,
    .whole = true,
};

distil_fused_pass distil_fused_pass_topk(distil_topk_teacher *topk) {
    const distil_fused_pass p = {.ops = &distil_fused_pass_topk_ops, .self = topk};
    return p;
}
