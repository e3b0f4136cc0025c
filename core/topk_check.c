/* topk_check.c - the argument rules of the cached top-k teacher, see topk_check.h. */
#include "topk_check.h"

#include "divergence.h"
#include "error.h"
#include "validate.h"

static distil_status distil_topk_check_enums(distil_ctx *ctx, const char *fn,
                                             const distil_topk_fields *f) {
    DISTIL_TRY(distil_check_dtype(ctx, fn, "teacher_dtype", f->teacher_dtype));
    if (f->id_dtype != DISTIL_IDS_I64 && f->id_dtype != DISTIL_IDS_I32) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: id_dtype %d is not one of IDS_I64, IDS_I32", fn,
                                (int)f->id_dtype);
    }
    if (f->tail != DISTIL_TOPK_TAIL && f->tail != DISTIL_TOPK_RENORMALISE &&
        f->tail != DISTIL_TOPK_ZERO) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: tail %d is not one of TAIL, RENORMALISE, ZERO", fn,
                                (int)f->tail);
    }
    return distil_check_divergence(ctx, fn, f->divergence, f->alpha); /* alpha too (§6) */
}

distil_status distil_topk_check_fields(distil_ctx *ctx, const char *fn,
                                       const distil_topk_fields *f) {
    DISTIL_TRY(distil_topk_check_enums(ctx, fn, f));
    DISTIL_TRY(distil_check_min(ctx, fn, "k", f->k, 1));
    if (f->k > f->vocab) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: k %lld > vocab %lld", fn,
                                (long long)f->k, (long long)f->vocab);
    }
    if (f->pad_id >= 0 && f->pad_id < f->vocab) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: pad_id %lld is a token id in [0, vocab %lld)", fn,
                                (long long)f->pad_id, (long long)f->vocab);
    }
    if (f->id_dtype == DISTIL_IDS_I32 &&
        (f->vocab > INT32_MAX || f->pad_id < INT32_MIN || f->pad_id > INT32_MAX)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: pad_id %lld / vocab %lld do not fit the int32 teacher_ids", fn,
                                (long long)f->pad_id, (long long)f->vocab);
    }
    DISTIL_TRY(distil_check_unit(ctx, fn, "beta", f->beta));
    DISTIL_TRY(distil_check_normaliser(ctx, fn, f->normaliser, f->normaliser_device));
    DISTIL_TRY(distil_check_size(ctx, fn, "teacher_ids", f->rows, f->k, sizeof(int64_t)));
    return distil_check_size(ctx, fn, "teacher_logp", f->rows, f->k, sizeof(float));
}

distil_topk_teacher distil_topk_teacher_of(const distil_topk_fields *f, const void *ids,
                                           const void *logp) {
    distil_topk_teacher t = {.ids = distil_dptr_make(ids, 0),
                             .logp = distil_dptr_make(logp, 0),
                             .ids_i64 = f->id_dtype == DISTIL_IDS_I64,
                             .logp_dtype = f->teacher_dtype,
                             .k = f->k,
                             .pad_id = f->pad_id,
                             .tail = (int)f->tail};
    return t;
}

size_t distil_topk_ids_bytes(const distil_topk_fields *f) {
    return (size_t)f->rows * (size_t)f->k * (f->id_dtype == DISTIL_IDS_I64 ? 8u : 4u);
}

size_t distil_topk_logp_bytes(const distil_topk_fields *f) {
    return (size_t)f->rows * (size_t)f->k * distil_dtype_size(f->teacher_dtype);
}
