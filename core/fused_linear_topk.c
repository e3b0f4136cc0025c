/*
 * fused_linear_topk.c - the public entry points of the fused loss against a cached top-k teacher
 * (docs/SPEC.md §2 with §7's soft part): validate, then one fused call (fused_call.c, shared with
 * distil_fused_linear_jsd) with the top-k teacher source and its row pass
 * (fused_teacher_topk.c), which the reference's whole fused op reads too.
 */
#include "error.h"
#include "fused_call.h"
#include "fused_head.h"
#include "fused_sources.h"
#include "overlap.h"
#include "topk_check.h"
#include "validate.h"

static const char *const fn = "fused_linear_topk";

void distil_fused_linear_topk_desc_init(distil_fused_linear_topk_desc *desc) {
    if (desc == NULL) {
        return;
    }
    distil_fused_linear_topk_desc d = {0};
    d.struct_size = sizeof d;
    d.dtype = DISTIL_BF16;
    DISTIL_TOPK_TEACHER_DEFAULTS(d);
    d.weight_hard = 0.5f;
    d.weight_soft = 0.5f;
    d.temperature = 1.0f;
    d.ignore_index = -100;
    d.reduction = DISTIL_REDUCTION_BATCHMEAN;
    *desc = d;
}

static distil_topk_fields distil_flt_fields(const distil_fused_linear_topk_desc *d) {
    distil_topk_fields f = {.rows = d->rows,
                            .vocab = d->vocab,
                            .k = d->k,
                            .pad_id = d->pad_id,
                            .teacher_dtype = d->teacher_dtype,
                            .id_dtype = d->id_dtype,
                            .tail = d->tail,
                            .divergence = d->divergence,
                            .beta = d->beta,
                            .alpha = d->alpha,
                            .normaliser = d->normaliser,
                            .normaliser_device = d->normaliser_device};
    return f;
}

/* Shapes of the descriptor. */
static distil_status distil_flt_check_shapes(distil_ctx *ctx,
                                             const distil_fused_linear_topk_desc *d) {
    DISTIL_TRY(distil_check_min(ctx, fn, "rows", d->rows, 0));
    DISTIL_TRY(distil_check_min(ctx, fn, "vocab", d->vocab, 1));
    DISTIL_TRY(distil_check_min(ctx, fn, "student_hidden", d->student_hidden, 1));
    if (d->student_weight_hidden != 0 && d->student_weight_hidden != d->student_hidden) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: student_weight: hidden %lld != student_hidden %lld", fn,
                                (long long)d->student_weight_hidden, (long long)d->student_hidden);
    }
    size_t es = distil_dtype_size(d->dtype);
    DISTIL_TRY(distil_check_size(ctx, fn, "student_hidden", d->rows, d->student_hidden, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "student_weight", d->vocab, d->student_hidden, 4));
    DISTIL_TRY(distil_check_size(ctx, fn, "logits", d->rows, d->vocab, 16));
    return distil_check_min(ctx, fn, "chunk_rows", d->chunk_rows, 0);
}

/* Descriptor checks (shared with the workspace query): version, dtype, shapes, values. */
static distil_status distil_flt_check_desc(distil_ctx *ctx,
                                           const distil_fused_linear_topk_desc *d) {
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", d));
    DISTIL_TRY(distil_check_struct_size(ctx, fn, "desc", d->struct_size, sizeof *d,
                                        "distil_fused_linear_topk_desc_init"));
    DISTIL_TRY(distil_check_dtype(ctx, fn, "dtype", d->dtype));
    DISTIL_TRY(distil_flt_check_shapes(ctx, d));
    distil_topk_fields f = distil_flt_fields(d);
    DISTIL_TRY(distil_topk_check_fields(ctx, fn, &f));
    DISTIL_TRY(distil_check_weights(ctx, fn, d->weight_hard, d->weight_soft));
    DISTIL_TRY(distil_check_temperature(ctx, fn, "temperature", d->temperature));
    if (d->reduction == DISTIL_REDUCTION_NONE) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: reduction NONE: the fused loss returns BATCHMEAN or SUM", fn);
    }
    if (d->reduction != DISTIL_REDUCTION_BATCHMEAN && d->reduction != DISTIL_REDUCTION_SUM) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: reduction %d is not one of BATCHMEAN, SUM", fn,
                                (int)d->reduction);
    }
    return DISTIL_OK;
}

/* Pointer checks: NULL where data is required, backend ownership, bias rule, sizes, overlaps. */
static distil_status distil_flt_check_ptrs(distil_ctx *ctx, const distil_fused_linear_topk_desc *d,
                                           const distil_fused_args *a,
                                           const distil_topk_teacher *teacher) {
    const distil_topk_fields f = distil_flt_fields(d);
    const size_t es = distil_dtype_size(a->dtype);
    const size_t t = (size_t)a->rows, v = (size_t)a->vocab, hs = (size_t)a->hs;
    const distil_ptr_rule ptrs[] = {
        {"student_hidden", a->xs, a->rows > 0, t * hs * es, false},
        {"student_weight", a->ws, true, v * hs * es, false},
        {"student_bias", a->bs, false, v * es, false},
        {"teacher_ids", teacher->ids, a->rows > 0, distil_topk_ids_bytes(&f), false},
        {"teacher_logp", teacher->logp, a->rows > 0, distil_topk_logp_bytes(&f), false},
        {"labels", a->labels, a->rows > 0 && a->weight_hard != 0.0f, t * sizeof(int64_t), false},
        {"normaliser_device", a->normaliser_device, false, sizeof(float), false},
        {"loss", a->loss, true, (a->return_parts ? 3u : 1u) * sizeof(float), true},
        {"grad_student_hidden", a->grad_xs, false, t * hs * es, true},
        {"grad_student_weight", a->grad_ws, false, v * hs * es, true},
        {"grad_student_bias", a->grad_bs, false, v * es, true},
    };
    enum { N = sizeof ptrs / sizeof ptrs[0] };
    DISTIL_TRY(distil_ptr_rules_present(ctx, fn, ptrs, N));
    if (distil_dptr_present(a->grad_bs) && !distil_dptr_present(a->bs)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: grad_student_bias is given but student_bias is NULL", fn);
    }
    return distil_ptr_rules_spans(ctx, fn, ptrs, N);
}

static void distil_flt_fill_args(const distil_fused_linear_topk_desc *d, distil_fused_args *a) {
    a->rows = d->rows;
    a->vocab = d->vocab;
    a->hs = d->student_hidden;
    a->dtype = d->dtype;
    a->weight_hard = d->weight_hard;
    a->weight_soft = d->weight_soft;
    a->beta = d->beta;
    a->divergence = d->divergence;
    a->alpha = d->alpha;
    a->inv_temperature = 1.0f / d->temperature;
    a->ignore_index = d->ignore_index;
    a->return_parts = d->return_parts != 0;
    a->normaliser = d->normaliser;
    a->normaliser_device = distil_dptr_make(d->normaliser_device, 0);
    distil_fused_head_defaults(a); /* docs/SPEC.md §6 head options: none here */
}

/* SUM: N = 1 (docs/SPEC.md §7), given like a caller's normaliser (whose pointer, if any, has
 * passed its checks: the labels are still checked, not counted). */
static void distil_flt_reduction(const distil_fused_linear_topk_desc *d, distil_fused_args *a) {
    if (d->reduction == DISTIL_REDUCTION_SUM) {
        a->normaliser = 1.0f;
        a->normaliser_device = distil_dptr_make(NULL, 0);
    }
}

/* The call of the checked descriptor d with args a and the cached teacher t. */
static distil_fused_call distil_flt_call_of(const distil_fused_linear_topk_desc *d,
                                            distil_fused_args *a, distil_topk_teacher *t) {
    distil_fused_call c = {.fn = fn,
                           .a = a,
                           .teacher = distil_teacher_topk_source(t),
                           .pass = distil_fused_pass_topk(t),
                           .chunk_rows = d->chunk_rows};
    return c;
}

static distil_status distil_flt_workspace_size_run(distil_ctx *ctx,
                                                   const distil_fused_linear_topk_desc *desc,
                                                   int want_grads, size_t *bytes) {
    DISTIL_TRY(distil_check_query(ctx, "fused_linear_topk_workspace_size", bytes));
    DISTIL_TRY(distil_flt_check_desc(ctx, desc));
    distil_fused_args a = {0};
    distil_flt_fill_args(desc, &a);
    distil_topk_teacher t = {0};
    const distil_fused_call c = distil_flt_call_of(desc, &a, &t);
    return distil_fused_call_workspace(ctx, &c, want_grads != 0, bytes);
}

distil_status distil_fused_linear_topk_workspace_size(distil_ctx *ctx,
                                                      const distil_fused_linear_topk_desc *desc,
                                                      int want_grads, size_t *bytes) {
    DISTIL_GUARDED(ctx, "fused_linear_topk_workspace_size",
                   distil_flt_workspace_size_run(ctx, desc, want_grads, bytes));
}

static distil_status distil_flt_run(distil_ctx *ctx, const distil_fused_linear_topk_desc *desc,
                                    const void *xs, const void *ws, const void *bs, const void *ids,
                                    const void *logp, const int64_t *labels, float *loss, void *gxs,
                                    void *gws, void *gbs) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    DISTIL_TRY(distil_flt_check_desc(ctx, desc));
    distil_topk_fields f = distil_flt_fields(desc);
    distil_topk_teacher t = distil_topk_teacher_of(&f, ids, logp);
    distil_fused_args a = {.xs = distil_dptr_make(xs, 0),
                           .ws = distil_dptr_make(ws, 0),
                           .bs = distil_dptr_make(bs, 0),
                           .labels = distil_dptr_make(labels, 0),
                           .loss = distil_dptr_make(loss, 0),
                           .grad_xs = distil_dptr_make(gxs, 0),
                           .grad_ws = distil_dptr_make(gws, 0),
                           .grad_bs = distil_dptr_make(gbs, 0)};
    distil_flt_fill_args(desc, &a);
    DISTIL_TRY(distil_flt_check_ptrs(ctx, desc, &a, &t));
    distil_flt_reduction(desc, &a);
    const distil_fused_call c = distil_flt_call_of(desc, &a, &t);
    return distil_fused_call_run(ctx, &c);
}

distil_status distil_fused_linear_topk(distil_ctx *ctx, const distil_fused_linear_topk_desc *desc,
                                       const void *student_hidden, const void *student_weight,
                                       const void *student_bias, const void *teacher_ids,
                                       const void *teacher_logp, const int64_t *labels, float *loss,
                                       void *grad_student_hidden, void *grad_student_weight,
                                       void *grad_student_bias) {
    DISTIL_GUARDED(ctx, fn,
                   distil_flt_run(ctx, desc, student_hidden, student_weight, student_bias,
                                  teacher_ids, teacher_logp, labels, loss, grad_student_hidden,
                                  grad_student_weight, grad_student_bias));
}
