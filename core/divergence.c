/* divergence.c - see divergence.h (docs/SPEC.md §6). */
#include "divergence.h"
#include "ctx.h"
#include "error.h"
#include "validate.h"

#include <math.h>

distil_status distil_check_divergence(distil_ctx *ctx, const char *fn, distil_divergence divergence,
                                      float alpha) {
    if (divergence < DISTIL_DIVERGENCE_JSD || divergence > DISTIL_DIVERGENCE_TVD) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: divergence %d is not one of JSD, FORWARD_KL, REVERSE_KL, "
                                "SKEW_KL, SKEW_REVERSE_KL, TVD",
                                fn, (int)divergence);
    }
    return distil_check_unit(ctx, fn, "alpha", alpha);
}

distil_status distil_check_normaliser(distil_ctx *ctx, const char *fn, float normaliser,
                                      const float *normaliser_device) {
    if (normaliser != 0.0f && normaliser_device != NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: normaliser %g and normaliser_device are both given (at most "
                                "one)",
                                fn, (double)normaliser);
    }
    if (normaliser != 0.0f) {
        return distil_check_temperature(ctx, fn, "normaliser", normaliser); /* 1 / N finite too */
    }
    return DISTIL_OK;
}

distil_status distil_normaliser_put(distil_ctx *ctx, const distil_count_args *c, float normaliser,
                                    distil_dptr normaliser_device) {
    const distil_backend *be = ctx->be;
    const bool given = normaliser != 0.0f || distil_dptr_present(normaliser_device);
    if (!given || c->vocab > 0) {
        DISTIL_TRY(be->count_valid(ctx->b, c));
    }
    if (!given) {
        return DISTIL_OK;
    }
    if (normaliser != 0.0f) {
        distil_fill_args f = {
            .dst = c->n_out, .dtype = DISTIL_F32, .count = 1, .value = normaliser};
        return be->fill(ctx->b, &f);
    }
    distil_cast_args k = {.src = normaliser_device,
                          .dst = c->n_out,
                          .src_dtype = DISTIL_F32,
                          .dst_dtype = DISTIL_F32,
                          .count = 1};
    return be->cast(ctx->b, &k);
}
