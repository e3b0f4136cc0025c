/*
 * fused_head.c - the head options of the fused loss (docs/SPEC.md §6), see fused_head.h. The
 * transform and the LSEs run as one pass over a chunk's logits (backend op head_rows) between
 * the logits GEMMs and the row pass, only when asked for: the default call runs none of it.
 */
#include "fused_head.h"

#include "error.h"
#include "validate.h"

#include <math.h>

int64_t distil_fused_teacher_vocab(const distil_fused_linear_jsd_desc *d) {
    return d->teacher_vocab != 0 ? d->teacher_vocab : d->vocab;
}

int64_t distil_fused_common_vocab(const distil_fused_linear_jsd_desc *d) {
    const int64_t vt = distil_fused_teacher_vocab(d);
    return vt < d->vocab ? vt : d->vocab;
}

/* A softcap: finite and >= 0, and when > 0 its reciprocal finite (the row kernels multiply by
 * it). */
static distil_status distil_fused_check_cap(distil_ctx *ctx, const char *fn, const char *name,
                                            float cap) {
    DISTIL_TRY(distil_check_nonneg(ctx, fn, name, cap));
    if (cap > 0.0f && !isfinite(1.0f / cap)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %s %g is too small: its reciprocal is not finite in fp32", fn,
                                name, (double)cap);
    }
    return DISTIL_OK;
}

distil_status distil_fused_head_check_desc(distil_ctx *ctx, const char *fn,
                                           const distil_fused_linear_jsd_desc *d) {
    DISTIL_TRY(distil_check_positive(ctx, fn, "student_logit_scale", d->student_logit_scale));
    DISTIL_TRY(distil_check_positive(ctx, fn, "teacher_logit_scale", d->teacher_logit_scale));
    DISTIL_TRY(distil_fused_check_cap(ctx, fn, "student_softcap", d->student_softcap));
    DISTIL_TRY(distil_fused_check_cap(ctx, fn, "teacher_softcap", d->teacher_softcap));
    if (d->teacher_temperature != 0.0f) {
        DISTIL_TRY(
            distil_check_temperature(ctx, fn, "teacher_temperature", d->teacher_temperature));
    }
    return DISTIL_OK;
}

void distil_fused_head_fill(const distil_fused_linear_jsd_desc *d, distil_fused_args *a) {
    a->student_vocab = d->vocab;
    a->teacher_vocab = distil_fused_teacher_vocab(d);
    a->vocab = distil_fused_common_vocab(d);
    a->student_scale = d->student_logit_scale;
    a->student_cap = d->student_softcap;
    a->teacher_scale = d->teacher_logit_scale;
    a->teacher_cap = d->teacher_softcap;
    a->inv_teacher_temperature =
        d->teacher_temperature != 0.0f ? 1.0f / d->teacher_temperature : a->inv_temperature;
    a->student_lse = distil_dptr_make(d->student_lse, 0);
    a->teacher_lse = distil_dptr_make(d->teacher_lse, 0);
    a->student_entropy = distil_dptr_make(d->student_entropy, 0);
}

void distil_fused_head_defaults(distil_fused_args *a) {
    a->student_vocab = a->vocab;
    a->teacher_vocab = a->vocab;
    a->student_scale = 1.0f;
    a->student_cap = 0.0f;
    a->teacher_scale = 1.0f;
    a->teacher_cap = 0.0f;
    a->inv_teacher_temperature = a->inv_temperature;
    a->student_lse = distil_dptr_make(NULL, 0);
    a->teacher_lse = distil_dptr_make(NULL, 0);
    a->student_entropy = distil_dptr_make(NULL, 0);
}

bool distil_fused_student_head(const distil_fused_args *a) {
    return a->student_scale != 1.0f || a->student_cap != 0.0f;
}

static bool distil_fused_teacher_head(const distil_fused_args *a) {
    return a->teacher_scale != 1.0f || a->teacher_cap != 0.0f;
}

bool distil_fused_head_needed(const distil_fused_args *a) {
    return distil_fused_student_head(a) || distil_fused_teacher_head(a) ||
           distil_dptr_present(a->student_lse) || distil_dptr_present(a->teacher_lse);
}

/* One head of chunk [r0, r0 + c): z (c, vocab) at its plan offset. */
static distil_status distil_fused_head_one(const distil_backend *be, void *b,
                                           const distil_fused_args *a, size_t off, bool transform,
                                           float scale, float cap, distil_dptr dz, distil_dptr lse,
                                           int64_t r0, int64_t c) {
    if (!transform && !distil_dptr_present(lse)) {
        return DISTIL_OK;
    }
    distil_head_rows_args h = {
        .z = distil_dptr_add(a->workspace, off),
        .rows = c,
        .vocab = a->vocab,
        .transform = transform,
        .scale = scale,
        .cap = cap,
        .dz = dz,
        .lse = distil_dptr_present(lse) ? distil_dptr_add(lse, (size_t)r0 * sizeof(float)) : lse};
    return be->head_rows(b, &h);
}

distil_dptr distil_fused_head_dz(const distil_fused_args *a, const distil_fused_plan *p,
                                 bool wanted) {
    return wanted ? distil_dptr_add(a->workspace, p->off_dz) : distil_dptr_make(NULL, 0);
}

distil_status distil_fused_head_pass(const distil_backend *be, void *b, const distil_fused_args *a,
                                     const distil_fused_plan *p, distil_dptr dz, int64_t r0,
                                     int64_t c) {
    DISTIL_TRY(distil_fused_head_one(be, b, a, p->off_zs, distil_fused_student_head(a),
                                     a->student_scale, a->student_cap, dz, a->student_lse, r0, c));
    return distil_fused_head_one(be, b, a, p->off_zt, distil_fused_teacher_head(a),
                                 a->teacher_scale, a->teacher_cap, distil_dptr_make(NULL, 0),
                                 a->teacher_lse, r0, c);
}

distil_status distil_fused_head_zero_tail(const distil_backend *be, void *b,
                                          const distil_fused_args *a) {
    const int64_t extra = a->student_vocab - a->vocab;
    if (extra <= 0) {
        return DISTIL_OK;
    }
    const distil_dtype gdt = distil_fused_gw_dtype(a);
    const size_t es = distil_dtype_size(gdt);
    if (distil_dptr_present(a->grad_ws)) {
        distil_fill_args f = {.dst = distil_dptr_add(a->grad_ws, (size_t)(a->vocab * a->hs) * es),
                              .dtype = gdt,
                              .count = extra * a->hs};
        DISTIL_TRY(be->fill(b, &f));
    }
    if (distil_dptr_present(a->grad_bs)) {
        distil_fill_args f = {.dst = distil_dptr_add(a->grad_bs, (size_t)a->vocab * es),
                              .dtype = gdt,
                              .count = extra};
        DISTIL_TRY(be->fill(b, &f));
    }
    return DISTIL_OK;
}
