/*
 * topk.c - the public entry point distil_topk (docs/SPEC.md §7, the log-prob-input form):
 * validate, plan the workspace, then the backend's whole `topk` op (the float64 reference) or
 * count_valid -> topk_rows -> reduce, on the row loss skeleton that distil_jsd shares
 * (row_loss.h).
 */
#include "ctx.h"
#include "error.h"
#include "divergence.h"
#include "overlap.h"
#include "row_loss.h"
#include "topk_check.h"
#include "validate.h"
#include "workspace.h"

static const char *const fn = "topk";

void distil_topk_desc_init(distil_topk_desc *desc) {
    if (desc == NULL) {
        return;
    }
    distil_topk_desc d = {0};
    d.struct_size = sizeof d;
    d.dtype = DISTIL_F32;
    DISTIL_TOPK_TEACHER_DEFAULTS(d);
    d.ignore_index = -100;
    d.reduction = DISTIL_REDUCTION_BATCHMEAN;
    d.grad_scale = 1.0f;
    *desc = d;
}

static distil_topk_fields distil_topk_fields_of(const distil_topk_desc *d) {
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

/* Descriptor-only checks (shared with the workspace query); fills the scalar part of args. */
static distil_status distil_topk_check_desc(distil_ctx *ctx, const distil_topk_desc *d,
                                            distil_topk_args *a) {
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", d));
    DISTIL_TRY(distil_check_struct_size(ctx, fn, "desc", d->struct_size, sizeof *d,
                                        "distil_topk_desc_init"));
    DISTIL_TRY(distil_check_dtype(ctx, fn, "dtype", d->dtype));
    if (d->reduction < DISTIL_REDUCTION_BATCHMEAN || d->reduction > DISTIL_REDUCTION_NONE) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: reduction %d is not one of BATCHMEAN, SUM, NONE", fn,
                                (int)d->reduction);
    }
    DISTIL_TRY(distil_check_min(ctx, fn, "rows", d->rows, 0));
    DISTIL_TRY(distil_check_min(ctx, fn, "vocab", d->vocab, 1));
    DISTIL_TRY(
        distil_check_stride(ctx, fn, "student_logp", d->student_stride, d->vocab, &a->x_stride));
    DISTIL_TRY(
        distil_check_stride(ctx, fn, "grad_student", d->grad_stride, d->vocab, &a->grad_stride));
    size_t es = distil_dtype_size(d->dtype);
    DISTIL_TRY(distil_check_size(ctx, fn, "student_logp", d->rows, a->x_stride, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "grad_student", d->rows, a->grad_stride, es));
    distil_topk_fields f = distil_topk_fields_of(d);
    DISTIL_TRY(distil_topk_check_fields(ctx, fn, &f));
    DISTIL_TRY(distil_check_finite(ctx, fn, "grad_scale", d->grad_scale));
    a->rows = d->rows;
    a->vocab = d->vocab;
    a->dtype = d->dtype;
    a->beta = d->beta;
    a->divergence = d->divergence;
    a->alpha = d->alpha;
    a->grad_scale = d->grad_scale;
    a->ignore_index = d->ignore_index;
    a->reduction = d->reduction;
    a->normaliser = d->normaliser;
    a->normaliser_device = distil_dptr_make(d->normaliser_device, 0);
    return DISTIL_OK;
}

enum { TK_X, TK_IDS, TK_LOGP, TK_LABELS, TK_NORM, TK_LOSS, TK_GRAD, TK_WORK, TK_SPANS };

/* Pointer checks in the fixed order NULL -> backend ownership -> sizes and overlaps. */
static distil_status distil_topk_check_ptrs(distil_ctx *ctx, const distil_topk_desc *d,
                                            const distil_topk_args *a, const void *x,
                                            const void *ids, const void *logp,
                                            const int64_t *labels, const float *loss,
                                            const void *grad) {
    const void *norm = d->normaliser_device;
    if (a->rows > 0) {
        DISTIL_TRY(distil_check_not_null(ctx, fn, "student_logp", x));
        DISTIL_TRY(distil_check_not_null(ctx, fn, "teacher_ids", ids));
        DISTIL_TRY(distil_check_not_null(ctx, fn, "teacher_logp", logp));
    }
    if (a->rows > 0 || a->reduction != DISTIL_REDUCTION_NONE) {
        DISTIL_TRY(distil_check_not_null(ctx, fn, "loss", loss));
    }
    const char *names[] = {"student_logp",      "teacher_ids", "teacher_logp", "labels",
                           "normaliser_device", "loss",        "grad_student"};
    const void *ptrs[] = {x, ids, logp, labels, norm, loss, grad};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        DISTIL_TRY(distil_check_device_ptr(ctx, fn, names[i], ptrs[i]));
    }
    distil_topk_fields f = distil_topk_fields_of(d);
    size_t es = distil_dtype_size(a->dtype);
    bool none = a->reduction == DISTIL_REDUCTION_NONE;
    distil_span s[TK_SPANS] = {
        [TK_X] = {"student_logp", x, distil_span_bytes(a->rows, a->vocab, a->x_stride, es), false},
        [TK_IDS] = {"teacher_ids", ids, distil_topk_ids_bytes(&f), false},
        [TK_LOGP] = {"teacher_logp", logp, distil_topk_logp_bytes(&f), false},
        [TK_LABELS] = {"labels", labels, (size_t)a->rows * sizeof(int64_t), false},
        [TK_NORM] = {"normaliser_device", norm, sizeof(float), false},
        [TK_LOSS] = {"loss", loss, (none ? (size_t)a->rows : 1) * sizeof(float), true},
        [TK_GRAD] = {"grad_student", grad, distil_span_bytes(a->rows, a->vocab, a->grad_stride, es),
                     true},
        [TK_WORK] = {"workspace", ctx->work_lent, ctx->work_lent_bytes, true},
    };
    return distil_spans_check(ctx, fn, s, TK_SPANS, -1, -1);
}

static size_t distil_topk_work_bytes(const distil_ctx *ctx, const distil_topk_args *a) {
    return distil_workspace_row_loss(ctx->be->whole != NULL, a->rows, a->reduction);
}

static distil_status distil_topk_workspace_size_run(distil_ctx *ctx, const distil_topk_desc *desc,
                                                    size_t *bytes) {
    DISTIL_TRY(distil_check_query(ctx, "topk_workspace_size", bytes));
    distil_topk_args a = {0};
    DISTIL_TRY(distil_topk_check_desc(ctx, desc, &a));
    *bytes = distil_topk_work_bytes(ctx, &a);
    return DISTIL_OK;
}

distil_status distil_topk_workspace_size(distil_ctx *ctx, const distil_topk_desc *desc,
                                         size_t *bytes) {
    DISTIL_GUARDED(ctx, "topk_workspace_size", distil_topk_workspace_size_run(ctx, desc, bytes));
}

/* The row pass of the composed loss (distil_row_pass): topk_rows on the log-probs as given. */
static distil_status distil_topk_pass(distil_ctx *ctx, const void *op, distil_dptr row_loss,
                                      distil_dptr n) {
    const distil_topk_args *a = op;
    distil_topk_rows_args r = {.x = a->x,
                               .x_stride = a->x_stride,
                               .x_dtype = a->dtype,
                               .logits = false,
                               .t = a->t,
                               .rows = a->rows,
                               .vocab = a->vocab,
                               .labels = a->labels,
                               .ignore_index = a->ignore_index,
                               .beta = a->beta,
                               .divergence = a->divergence,
                               .alpha = a->alpha,
                               .inv_temperature = 1.0f,
                               .weight_soft = a->grad_scale,
                               .soft_rows = row_loss,
                               .g = a->grad,
                               .g_dtype = a->dtype,
                               .g_stride = a->grad_stride,
                               .n_valid = n};
    return ctx->be->topk_rows(ctx->b, &r);
}

/* count_valid -> topk_rows -> reduce on the backend's kernels. */
static distil_status distil_topk_compose(distil_ctx *ctx, const distil_topk_args *a) {
    distil_row_loss r = DISTIL_ROW_LOSS_OF(a);
    return distil_row_loss_compose(ctx, fn, &r, distil_topk_pass, a);
}

static distil_status distil_topk_run(distil_ctx *ctx, const distil_topk_desc *desc,
                                     const void *student_logp, const void *teacher_ids,
                                     const void *teacher_logp, const int64_t *labels, float *loss,
                                     void *grad_student) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    distil_topk_args a = {0};
    DISTIL_TRY(distil_topk_check_desc(ctx, desc, &a));
    DISTIL_TRY(distil_topk_check_ptrs(ctx, desc, &a, student_logp, teacher_ids, teacher_logp,
                                      labels, loss, grad_student));
    distil_topk_fields f = distil_topk_fields_of(desc);
    a.t = distil_topk_teacher_of(&f, teacher_ids, teacher_logp);
    a.x = distil_dptr_make(student_logp, 0);
    a.labels = distil_dptr_make(labels, 0);
    a.loss = distil_dptr_make(loss, 0);
    a.grad = distil_dptr_make(grad_student, 0);
    if (a.rows == 0) {
        distil_row_loss r = DISTIL_ROW_LOSS_OF(&a);
        return distil_row_loss_empty(ctx, &r);
    }
    distil_status st =
        ctx->be->whole != NULL ? ctx->be->whole->topk(ctx->b, &a) : distil_topk_compose(ctx, &a);
    if (st == DISTIL_OK && ctx->be->host_memory) {
        st = ctx->be->synchronize(ctx->b); /* reports an invalid id from this call */
    }
    return st;
}

distil_status distil_topk(distil_ctx *ctx, const distil_topk_desc *desc, const void *student_logp,
                          const void *teacher_ids, const void *teacher_logp, const int64_t *labels,
                          float *loss, void *grad_student) {
    DISTIL_GUARDED(ctx, fn,
                   distil_topk_run(ctx, desc, student_logp, teacher_ids, teacher_logp, labels, loss,
                                   grad_student));
}
