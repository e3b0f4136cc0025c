/*
 * fused_linear_jsd.c - the public entry points of the fused loss (docs/SPEC.md §2): validate,
 * choose the teacher source (the dense head, or its fp8 form), then one fused call (fused_call.c:
 * the plan, then the backend's whole op or the core's chunk loop) with the local row pass. The
 * vocabulary-parallel entry points run the same body with their own row pass.
 */
#include "fused_linear_jsd.h"

#include "divergence.h"
#include "error.h"
#include "fused_call.h"
#include "fused_fp8.h"
#include "fused_head.h"
#include "fused_sources.h"
#include "overlap.h"
#include "validate.h"

#include <math.h>

static const char *const fn = "fused_linear_jsd";

void distil_fused_linear_jsd_desc_init(distil_fused_linear_jsd_desc *desc) {
    if (desc == NULL) {
        return;
    }
    distil_fused_linear_jsd_desc d = {0};
    d.struct_size = sizeof d;
    d.dtype = DISTIL_BF16;
    d.weight_hard = 0.5f;
    d.weight_soft = 0.5f;
    d.beta = 0.5f;
    d.temperature = 1.0f;
    d.ignore_index = -100;
    d.divergence = DISTIL_DIVERGENCE_JSD;
    d.alpha = 0.1f;
    d.student_logit_scale = 1.0f;
    d.teacher_logit_scale = 1.0f;
    *desc = d;
}

/* Shapes of the descriptor. */
static distil_status distil_fused_check_shapes(distil_ctx *ctx,
                                               const distil_fused_linear_jsd_desc *d) {
    DISTIL_TRY(distil_check_min(ctx, fn, "rows", d->rows, 0));
    DISTIL_TRY(distil_check_min(ctx, fn, "vocab", d->vocab, 1));
    DISTIL_TRY(distil_check_min(ctx, fn, "student_hidden", d->student_hidden, 1));
    DISTIL_TRY(distil_check_min(ctx, fn, "teacher_hidden", d->teacher_hidden, 1));
    if (d->student_weight_hidden != 0 && d->student_weight_hidden != d->student_hidden) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: student_weight: hidden %lld != student_hidden %lld", fn,
                                (long long)d->student_weight_hidden, (long long)d->student_hidden);
    }
    if (d->teacher_weight_hidden != 0 && d->teacher_weight_hidden != d->teacher_hidden) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight: hidden %lld != teacher_hidden %lld", fn,
                                (long long)d->teacher_weight_hidden, (long long)d->teacher_hidden);
    }
    DISTIL_TRY(distil_check_min(ctx, fn, "teacher_vocab", d->teacher_vocab, 0));
    const int64_t vt = distil_fused_teacher_vocab(d);
    size_t es = distil_dtype_size(d->dtype);
    DISTIL_TRY(distil_check_size(ctx, fn, "student_hidden", d->rows, d->student_hidden, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "teacher_hidden", d->rows, d->teacher_hidden, es));
    DISTIL_TRY(distil_check_size(ctx, fn, "student_weight", d->vocab, d->student_hidden, 4));
    DISTIL_TRY(distil_check_size(ctx, fn, "teacher_weight", vt, d->teacher_hidden, es));
    /* Chunk buffers hold up to rows x (common) vocab logits (two fp32 and one dtype copy). */
    DISTIL_TRY(distil_check_size(ctx, fn, "logits", d->rows, distil_fused_common_vocab(d), 16));
    return distil_check_min(ctx, fn, "chunk_rows", d->chunk_rows, 0);
}

/* Descriptor checks (shared with the workspace query): version, dtype, shapes, values. */
static distil_status distil_fused_check_desc(distil_ctx *ctx,
                                             const distil_fused_linear_jsd_desc *d) {
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", d));
    DISTIL_TRY(distil_check_struct_size(ctx, fn, "desc", d->struct_size, sizeof *d,
                                        "distil_fused_linear_jsd_desc_init"));
    DISTIL_TRY(distil_check_dtype(ctx, fn, "dtype", d->dtype));
    DISTIL_TRY(distil_fused_check_shapes(ctx, d));
    DISTIL_TRY(distil_check_weights(ctx, fn, d->weight_hard, d->weight_soft));
    DISTIL_TRY(distil_check_unit(ctx, fn, "beta", d->beta));
    DISTIL_TRY(distil_check_temperature(ctx, fn, "temperature", d->temperature));
    if (d->temperature_squared &&
        !isfinite((float)((double)d->weight_soft * d->temperature * d->temperature))) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: weight_soft %g times temperature^2 (temperature_squared) is "
                                "not finite in fp32",
                                fn, (double)d->weight_soft);
    }
    DISTIL_TRY(distil_check_divergence(ctx, fn, d->divergence, d->alpha));
    DISTIL_TRY(distil_check_normaliser(ctx, fn, d->normaliser, d->normaliser_device));
    /* docs/SPEC.md §6 head options (fused_head.c) */
    DISTIL_TRY(distil_fused_head_check_desc(ctx, fn, d));
    return distil_fused_fp8_check(ctx, fn, d); /* docs/SPEC.md §6 fp8 teacher head */
}

/* Pointer checks: NULL where data is required, then backend ownership, then bias rules, then
 * sizes and overlaps (docs/SPEC.md §5). q: the teacher's head (and its fp8 head made once). */
static distil_status distil_fused_check_ptrs(distil_ctx *ctx, const distil_fused_args *a,
                                             const distil_teacher_e4m3 *q) {
    const size_t es = distil_dtype_size(a->dtype);
    const size_t ges = distil_dtype_size(distil_fused_gw_dtype(a));
    /* Each head's buffers by its own rows (docs/SPEC.md §6). */
    const size_t t = (size_t)a->rows, v = (size_t)a->student_vocab, hs = (size_t)a->hs;
    const size_t vt = (size_t)a->teacher_vocab, ht = (size_t)q->head.ht;
    const distil_ptr_rule ptrs[] = {
        {"student_hidden", a->xs, a->rows > 0, t * hs * es, false},
        {"student_weight", a->ws, true, v * hs * es, false},
        {"student_bias", a->bs, false, v * es, false},
        {"teacher_hidden", q->head.xt, a->rows > 0, t * ht * es, false},
        {"teacher_weight", q->head.wt, !distil_dptr_present(q->wq_head), vt * ht * es, false},
        {"teacher_weight_e4m3", q->wq_head, false, q->wq_bytes, false},
        {"teacher_bias", q->head.bt, false, vt * es, false},
        {"labels", a->labels, a->rows > 0 && a->weight_hard != 0.0f, t * sizeof(int64_t), false},
        {"normaliser_device", a->normaliser_device, false, sizeof(float), false},
        {"loss", a->loss, true, (a->return_parts ? 3u : 1u) * sizeof(float), true},
        {"grad_student_hidden", a->grad_xs, false, t * hs * es, true},
        {"grad_student_weight", a->grad_ws, false, v * hs * ges, true},
        {"grad_student_bias", a->grad_bs, false, v * ges, true},
        {"student_lse", a->student_lse, false, t * sizeof(float), true},
        {"teacher_lse", a->teacher_lse, false, t * sizeof(float), true},
        {"student_entropy", a->student_entropy, false, t * sizeof(float), true},
    };
    enum { N = sizeof ptrs / sizeof ptrs[0] };
    DISTIL_TRY(distil_ptr_rules_present(ctx, fn, ptrs, N));
    if (distil_dptr_present(a->grad_bs) && !distil_dptr_present(a->bs)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: grad_student_bias is given but student_bias is NULL", fn);
    }
    return distil_ptr_rules_spans(ctx, fn, ptrs, N);
}

static void distil_fused_fill_args(const distil_fused_linear_jsd_desc *d, distil_fused_args *a) {
    a->rows = d->rows;
    a->vocab = d->vocab;
    a->hs = d->student_hidden;
    a->dtype = d->dtype;
    a->gw_f32 = d->grad_weight_fp32 != 0;
    a->weight_hard = d->weight_hard;
    a->weight_soft = d->weight_soft;
    if (d->temperature_squared) { /* docs/SPEC.md §6: the soft part, loss and gradient, times tau^2
                                   */
        double t = (double)d->temperature;
        a->weight_soft = (float)((double)d->weight_soft * t * t);
    }
    a->beta = d->beta;
    a->inv_temperature = 1.0f / d->temperature;
    a->ignore_index = d->ignore_index;
    a->return_parts = d->return_parts != 0;
    a->divergence = d->divergence;
    a->alpha = d->alpha;
    a->normaliser = d->normaliser;
    a->normaliser_device = distil_dptr_make(d->normaliser_device, 0);
    distil_fused_head_fill(d, a); /* vocab becomes the common prefix */
}

/* The teacher's head as the caller gave it (the pointers of in, or none for a workspace query),
 * with its fp8 head made once where the descriptor gives one. */
static distil_teacher_e4m3 distil_fused_teacher_of(const distil_ctx *ctx,
                                                   const distil_fused_linear_jsd_desc *d,
                                                   const void *const in[6]) {
    distil_teacher_e4m3 q = {.head = {.ht = d->teacher_hidden}};
    if (in != NULL) {
        q.head.xt = distil_dptr_make(in[3], 0);
        q.head.wt = distil_dptr_make(in[4], 0);
        q.head.bt = distil_dptr_make(in[5], 0);
    }
    distil_fused_fp8_given(ctx, d, &q);
    return q;
}

/* The call of the checked descriptor d with args a, teacher q and row pass `pass`: the teacher
 * source is the fp8 head's where d asks for it (docs/SPEC.md §6), else the dense head's. */
static distil_fused_call distil_fused_call_of(const distil_fused_linear_jsd_desc *d,
                                              distil_fused_args *a, const distil_teacher_e4m3 *q,
                                              distil_fused_pass pass) {
    const bool fp8 = d->teacher_head_precision == DISTIL_HEAD_PRECISION_FP8_E4M3;
    distil_fused_call c = {.fn = fn,
                           .a = a,
                           .teacher = fp8 ? distil_teacher_e4m3_source(q)
                                          : distil_teacher_head_source(&q->head),
                           .pass = pass,
                           .chunk_rows = d->chunk_rows};
    return c;
}

distil_status distil_fused_linear_jsd_workspace_run(distil_ctx *ctx,
                                                    const distil_fused_linear_jsd_desc *desc,
                                                    distil_fused_pass pass, int want_grads,
                                                    size_t *bytes) {
    DISTIL_TRY(distil_check_query(ctx, "fused_linear_jsd_workspace_size", bytes));
    DISTIL_TRY(distil_fused_check_desc(ctx, desc));
    distil_fused_args a = {0};
    distil_fused_fill_args(desc, &a);
    const distil_teacher_e4m3 q = distil_fused_teacher_of(ctx, desc, NULL);
    const distil_fused_call c = distil_fused_call_of(desc, &a, &q, pass);
    return distil_fused_call_workspace(ctx, &c, want_grads != 0, bytes);
}

distil_status distil_fused_linear_jsd_workspace_size(distil_ctx *ctx,
                                                     const distil_fused_linear_jsd_desc *desc,
                                                     int want_grads, size_t *bytes) {
    DISTIL_GUARDED(ctx, "fused_linear_jsd_workspace_size",
                   distil_fused_linear_jsd_workspace_run(ctx, desc, distil_fused_pass_local(),
                                                         want_grads, bytes));
}

distil_status distil_fused_linear_jsd_run(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                          distil_fused_pass pass, const void *const in[6],
                                          const int64_t *labels, float *loss,
                                          void *const grads[3]) {
    distil_fused_args a = {.xs = distil_dptr_make(in[0], 0),
                           .ws = distil_dptr_make(in[1], 0),
                           .bs = distil_dptr_make(in[2], 0),
                           .labels = distil_dptr_make(labels, 0),
                           .loss = distil_dptr_make(loss, 0),
                           .grad_xs = distil_dptr_make(grads[0], 0),
                           .grad_ws = distil_dptr_make(grads[1], 0),
                           .grad_bs = distil_dptr_make(grads[2], 0)};
    DISTIL_TRY(distil_fused_check_desc(ctx, desc));
    distil_fused_fill_args(desc, &a);
    const distil_teacher_e4m3 q = distil_fused_teacher_of(ctx, desc, in);
    DISTIL_TRY(distil_fused_check_ptrs(ctx, &a, &q));
    DISTIL_TRY(distil_fused_fp8_check_given(ctx, fn, &a, &q)); /* docs/SPEC.md §6: its header */
    const distil_fused_call c = distil_fused_call_of(desc, &a, &q, pass);
    return distil_fused_call_run(ctx, &c);
}

distil_status distil_fused_linear_jsd(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                      const void *student_hidden, const void *student_weight,
                                      const void *student_bias, const void *teacher_hidden,
                                      const void *teacher_weight, const void *teacher_bias,
                                      const int64_t *labels, float *loss, void *grad_student_hidden,
                                      void *grad_student_weight, void *grad_student_bias) {
    const void *const in[6] = {student_hidden, student_weight, student_bias,
                               teacher_hidden, teacher_weight, teacher_bias};
    void *const grads[3] = {grad_student_hidden, grad_student_weight, grad_student_bias};
    DISTIL_GUARDED(ctx, fn,
                   ctx == NULL
                       ? distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn)
                       : distil_fused_linear_jsd_run(ctx, desc, distil_fused_pass_local(), in,
                                                     labels, loss, grads));
}
