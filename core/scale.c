/*
 * scale.c - the public entry point distil_scale: x *= s with s a device scalar, the step that
 * applies autograd's upstream gradient to gradients a loss call already wrote (no host read).
 */
#include "ctx.h"
#include "error.h"
#include "validate.h"

static const char *const fn = "scale";

distil_status distil_scale(distil_ctx *ctx, void *x, distil_dtype dtype, int64_t count,
                           const float *scale) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    DISTIL_TRY(distil_check_dtype(ctx, fn, "dtype", dtype));
    DISTIL_TRY(distil_check_min(ctx, fn, "count", count, 0));
    DISTIL_TRY(distil_check_size(ctx, fn, "x", count, 1, distil_dtype_size(dtype)));
    DISTIL_TRY(distil_check_not_null(ctx, fn, "scale", scale));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "scale", scale));
    if (count == 0) {
        return DISTIL_OK;
    }
    DISTIL_TRY(distil_check_not_null(ctx, fn, "x", x));
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, "x", x));
    distil_scale_args a = {.x = distil_dptr_make(x, 0),
                           .dtype = dtype,
                           .count = count,
                           .scale = distil_dptr_make(scale, 0)};
    return ctx->be->scale(ctx->b, &a);
}
