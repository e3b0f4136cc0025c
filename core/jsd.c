/*
 * jsd.c - the public entry point distil_jsd: validate, plan the workspace, then either the
 * backend's whole `jsd` op or count_valid -> div_rows -> reduce (docs/SPEC.md §1), on the row
 * loss skeleton of row_loss.h (shared with distil_topk).
 */
#include "ctx.h"
#include "divergence.h"
#include "jsd.h"
#include "error.h"
#include "overlap.h"
#include "row_loss.h"
#include "validate.h"
#include "workspace.h"

static const char *const fn = "jsd";

void distil_jsd_desc_init(distil_jsd_desc *desc) {
    if (desc == NULL) {
        return;
    }
    distil_jsd_desc d = {0};
    d.struct_size = sizeof d;
    d.dtype = DISTIL_F32;
    d.beta = 0.5f;
    d.ignore_index = -100;
    d.reduction = DISTIL_REDUCTION_BATCHMEAN;
    d.grad_scale = 1.0f;
    d.divergence = DISTIL_DIVERGENCE_JSD;
    d.alpha = 0.1f;
    *desc = d;
}

/* Descriptor-only checks (shared with the workspace query); fills the scalar part of args. */
static distil_status distil_jsd_check_desc(distil_ctx *ctx, const distil_jsd_desc *d,
                                           distil_jsd_args *a) {
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", d));
    DISTIL_TRY(distil_check_struct_size(ctx, fn, "desc", d->struct_size, sizeof *d,
                                        "distil_jsd_desc_init"));
    DISTIL_TRY(distil_check_dtype(ctx, fn, "dtype", d->dtype));
    if (d->reduction < DISTIL_REDUCTION_BATCHMEAN || d->reduction > DISTIL_REDUCTION_NONE) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: reduction %d is not one of "
                                "BATCHMEAN, SUM, NONE",
                                fn, (int)d->reduction);
    }
    DISTIL_TRY(distil_check_min(ctx, fn, "rows", d->rows, 0));
    DISTIL_TRY(distil_check_min(ctx, fn, "vocab", d->vocab, 1));
    DISTIL_TRY(
        distil_check_stride(ctx, fn, "student_logp", d->student_stride, d->vocab, &a->x_stride));
    DISTIL_TRY(
        distil_check_stride(ctx, fn, "teacher_logp", d->teacher_stride, d->vocab, &a->y_stride));
    DISTIL_TRY(
        distil_check_stride(ctx, fn, "grad_student", d->grad_stride, d->vocab, &a->grad_stride));
    size_t es = distil_dtype_size(d->dtype);
    DISTIL_TRY(distil_check_size(ctx, fn, "student_logp", d->rows, a->x_stride, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "teacher_logp", d->rows, a->y_stride, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "grad_student", d->rows, a->grad_stride, es));
    DISTIL_TRY(distil_check_unit(ctx, fn, "beta", d->beta));
    DISTIL_TRY(distil_check_finite(ctx, fn, "grad_scale", d->grad_scale));
    DISTIL_TRY(distil_check_divergence(ctx, fn, d->divergence, d->alpha));
    DISTIL_TRY(distil_check_normaliser(ctx, fn, d->normaliser, d->normaliser_device));
    if ((d->normaliser != 0.0f || d->normaliser_device != NULL) &&
        d->reduction != DISTIL_REDUCTION_BATCHMEAN) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: normaliser / normaliser_device is given but reduction is "
                                "not BATCHMEAN (the only reduction that divides by N)",
                                fn);
    }
    a->rows = d->rows;
    a->vocab = d->vocab;
    a->dtype = d->dtype;
    a->beta = d->beta;
    a->grad_scale = d->grad_scale;
    a->ignore_index = d->ignore_index;
    a->reduction = d->reduction;
    a->divergence = d->divergence;
    a->alpha = d->alpha;
    a->normaliser = d->normaliser;
    a->normaliser_device = distil_dptr_make(d->normaliser_device, 0);
    return DISTIL_OK;
}

/* What the call touches, in bytes from each pointer (core/overlap.h). */
enum { JSD_X, JSD_Y, JSD_LABELS, JSD_NORM, JSD_LOSS, JSD_GRAD, JSD_WORK, JSD_SPANS };

static void distil_jsd_spans(const distil_ctx *ctx, const distil_jsd_args *a, const void *x,
                             const void *y, const int64_t *labels, const float *loss,
                             const void *grad, distil_span s[JSD_SPANS]) {
    size_t es = distil_dtype_size(a->dtype);
    bool none = a->reduction == DISTIL_REDUCTION_NONE;
    s[JSD_X] = (distil_span){"student_logp", x,
                             distil_span_bytes(a->rows, a->vocab, a->x_stride, es), false};
    s[JSD_Y] = (distil_span){"teacher_logp", y,
                             distil_span_bytes(a->rows, a->vocab, a->y_stride, es), false};
    s[JSD_LABELS] = (distil_span){"labels", labels, (size_t)a->rows * sizeof(int64_t), false};
    s[JSD_NORM] =
        (distil_span){"normaliser_device", a->normaliser_device.base, sizeof(float), false};
    s[JSD_LOSS] = (distil_span){"loss", loss, (none ? (size_t)a->rows : 1) * sizeof(float), true};
    s[JSD_GRAD] = (distil_span){"grad_student", grad,
                                distil_span_bytes(a->rows, a->vocab, a->grad_stride, es), true};
    s[JSD_WORK] = (distil_span){"workspace", ctx->work_lent, ctx->work_lent_bytes, true};
}

/* Pointer checks, in the fixed order NULL -> backend ownership -> in-place stride -> sizes and
 * overlaps (docs/SPEC.md §5). */
static distil_status distil_jsd_check_ptrs(distil_ctx *ctx, const distil_jsd_args *a, const void *x,
                                           const void *y, const int64_t *labels, const float *loss,
                                           const void *grad) {
    if (a->rows > 0) {
        DISTIL_TRY(distil_check_not_null(ctx, fn, "student_logp", x));
        DISTIL_TRY(distil_check_not_null(ctx, fn, "teacher_logp", y));
    }
    if (a->rows > 0 || a->reduction != DISTIL_REDUCTION_NONE) {
        DISTIL_TRY(distil_check_not_null(ctx, fn, "loss", loss));
    }
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "student_logp", x));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "teacher_logp", y));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "labels", labels));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "normaliser_device", a->normaliser_device.base));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "loss", loss));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "grad_student", grad));
    if (grad != NULL && grad == x && a->grad_stride != a->x_stride) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: grad_student is student_logp (in place) but its row stride "
                                "%lld != %lld",
                                fn, (long long)a->grad_stride, (long long)a->x_stride);
    }
    distil_span s[JSD_SPANS];
    distil_jsd_spans(ctx, a, x, y, labels, loss, grad, s);
    bool strides_equal = a->grad_stride == a->x_stride; /* else in place is refused above */
    return distil_spans_check(ctx, fn, s, JSD_SPANS, strides_equal ? JSD_GRAD : -1,
                              strides_equal ? JSD_X : -1);
}

static size_t distil_jsd_work_bytes(const distil_ctx *ctx, const distil_jsd_args *a) {
    return distil_workspace_row_loss(ctx->be->whole != NULL, a->rows, a->reduction);
}

static distil_status distil_jsd_workspace_size_run(distil_ctx *ctx, const distil_jsd_desc *desc,
                                                   size_t *bytes) {
    DISTIL_TRY(distil_check_query(ctx, "jsd_workspace_size", bytes));
    distil_jsd_args a = {0};
    DISTIL_TRY(distil_jsd_check_desc(ctx, desc, &a));
    *bytes = distil_jsd_work_bytes(ctx, &a);
    return DISTIL_OK;
}

distil_status distil_jsd_workspace_size(distil_ctx *ctx, const distil_jsd_desc *desc,
                                        size_t *bytes) {
    DISTIL_GUARDED(ctx, "jsd_workspace_size", distil_jsd_workspace_size_run(ctx, desc, bytes));
}

/* The row pass of the composed loss (distil_row_pass): div_rows. */
static distil_status distil_jsd_pass(distil_ctx *ctx, const void *op, distil_dptr row_loss,
                                     distil_dptr n) {
    const distil_jsd_args *a = op;
    distil_div_rows_args r = {.x = a->x,
                              .y = a->y,
                              .x_stride = a->x_stride,
                              .y_stride = a->y_stride,
                              .rows = a->rows,
                              .vocab = a->vocab,
                              .dtype = a->dtype,
                              .beta = a->beta,
                              .labels = a->labels,
                              .ignore_index = a->ignore_index,
                              .row_loss = row_loss,
                              .grad = a->grad,
                              .grad_stride = a->grad_stride,
                              .grad_scale = a->grad_scale,
                              .n_valid = n,
                              .divergence = a->divergence,
                              .alpha = a->alpha};
    return ctx->be->div_rows(ctx->b, &r);
}

/* count_valid -> div_rows -> reduce on the backend's kernels. */
static distil_status distil_jsd_compose(distil_ctx *ctx, const distil_jsd_args *a) {
    distil_row_loss r = DISTIL_ROW_LOSS_OF(a);
    return distil_row_loss_compose(ctx, fn, &r, distil_jsd_pass, a);
}

distil_status distil_jsd_run(distil_ctx *ctx, const distil_jsd_desc *desc, const void *student_logp,
                             const void *teacher_logp, const int64_t *labels, float *loss,
                             void *grad_student) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    distil_jsd_args a = {0};
    DISTIL_TRY(distil_jsd_check_desc(ctx, desc, &a));
    DISTIL_TRY(
        distil_jsd_check_ptrs(ctx, &a, student_logp, teacher_logp, labels, loss, grad_student));
    a.x = distil_dptr_make(student_logp, 0);
    a.y = distil_dptr_make(teacher_logp, 0);
    a.labels = distil_dptr_make(labels, 0);
    a.loss = distil_dptr_make(loss, 0);
    a.grad = distil_dptr_make(grad_student, 0);
    if (a.rows == 0) {
        distil_row_loss r = DISTIL_ROW_LOSS_OF(&a);
        return distil_row_loss_empty(ctx, &r);
    }
    if (ctx->be->whole != NULL) {
        return ctx->be->whole->jsd(ctx->b, &a);
    }
    return distil_jsd_compose(ctx, &a);
}

distil_status distil_jsd(distil_ctx *ctx, const distil_jsd_desc *desc, const void *student_logp,
                         const void *teacher_logp, const int64_t *labels, float *loss,
                         void *grad_student) {
    DISTIL_GUARDED(
        ctx, fn, distil_jsd_run(ctx, desc, student_logp, teacher_logp, labels, loss, grad_student));
}
