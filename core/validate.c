/* validate.c - see validate.h. */
#include "validate.h"
#include "ctx.h"
#include "error.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

distil_status distil_check_not_null(distil_ctx *ctx, const char *fn, const char *name,
                                    const void *p) {
    if (p == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
    }
    return DISTIL_OK;
}

distil_status distil_check_device_ptr(distil_ctx *ctx, const char *fn, const char *name,
                                      const void *p) {
    const distil_backend_device *dev = distil_backend_device_of(ctx->be);
    if (p == NULL || dev->check_pointer == NULL) {
        return DISTIL_OK;
    }
    distil_status s = dev->check_pointer(ctx->b, p, name);
    if (s != DISTIL_OK) {
        char why[DISTIL_MSG_BYTES];
        snprintf(why, sizeof why, "%s", ctx->msg);
        return distil_error_set(ctx, s, "%s: %s", fn, why);
    }
    return DISTIL_OK;
}

distil_status distil_check_dtype(distil_ctx *ctx, const char *fn, const char *name,
                                 distil_dtype dtype) {
    if (distil_dtype_size(dtype) == 0) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %s %d is not a dtype (F32, BF16 or F16)", fn, name,
                                (int)dtype);
    }
    return DISTIL_OK;
}

distil_status distil_check_min(distil_ctx *ctx, const char *fn, const char *name, int64_t v,
                               int64_t min) {
    if (v < min) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %lld < %lld", fn, name,
                                (long long)v, (long long)min);
    }
    return DISTIL_OK;
}

distil_status distil_check_stride(distil_ctx *ctx, const char *fn, const char *name, int64_t stride,
                                  int64_t width, int64_t *resolved) {
    if (stride == 0) {
        *resolved = width;
        return DISTIL_OK;
    }
    if (stride < width) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s: row stride %lld < vocab %lld",
                                fn, name, (long long)stride, (long long)width);
    }
    *resolved = stride;
    return DISTIL_OK;
}

distil_status distil_check_unit(distil_ctx *ctx, const char *fn, const char *name, float v) {
    if (!(v >= 0.0f && v <= 1.0f)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %g is not in [0, 1]", fn, name,
                                (double)v);
    }
    return DISTIL_OK;
}

distil_status distil_check_nonneg(distil_ctx *ctx, const char *fn, const char *name, float v) {
    if (!(v >= 0.0f) || isinf(v)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %g must be finite and >= 0",
                                fn, name, (double)v);
    }
    return DISTIL_OK;
}

distil_status distil_check_positive(distil_ctx *ctx, const char *fn, const char *name, float v) {
    if (!(v > 0.0f) || isinf(v)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %g must be finite and > 0", fn,
                                name, (double)v);
    }
    return DISTIL_OK;
}

distil_status distil_check_temperature(distil_ctx *ctx, const char *fn, const char *name, float v) {
    DISTIL_TRY(distil_check_positive(ctx, fn, name, v));
    if (!isfinite(1.0f / v)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %s %g is too small: its reciprocal is not finite in fp32", fn,
                                name, (double)v);
    }
    return DISTIL_OK;
}

distil_status distil_check_finite(distil_ctx *ctx, const char *fn, const char *name, float v) {
    if (!isfinite(v)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %g is not finite", fn, name,
                                (double)v);
    }
    return DISTIL_OK;
}

distil_status distil_check_size(distil_ctx *ctx, const char *fn, const char *name, int64_t rows,
                                int64_t cols, size_t elem) {
    /* Both are >= 0 here; keep rows * cols * elem below 2^62 so that offsets never wrap. */
    const double limit = 4611686018427387904.0;
    if ((double)rows * (double)cols * (double)elem >= limit) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s of %lld x %lld is too large",
                                fn, name, (long long)rows, (long long)cols);
    }
    return DISTIL_OK;
}

distil_status distil_check_query(distil_ctx *ctx, const char *wfn, const size_t *bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", wfn);
    }
    return distil_check_not_null(ctx, wfn, "bytes", bytes);
}

distil_status distil_check_struct_size(distil_ctx *ctx, const char *fn, const char *name,
                                       size_t got, size_t want, const char *init) {
    if (got != want) {
        return distil_error_set(ctx, DISTIL_ERR_VERSION, "%s: %s.struct_size %zu != %zu (use %s)",
                                fn, name, got, want, init);
    }
    return DISTIL_OK;
}

distil_status distil_check_weights(distil_ctx *ctx, const char *fn, float weight_hard,
                                   float weight_soft) {
    DISTIL_TRY(distil_check_nonneg(ctx, fn, "weight_hard", weight_hard));
    DISTIL_TRY(distil_check_nonneg(ctx, fn, "weight_soft", weight_soft));
    if (weight_hard == 0.0f && weight_soft == 0.0f) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: weight_hard and weight_soft are both 0", fn);
    }
    return DISTIL_OK;
}
