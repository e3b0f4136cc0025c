/* divergence.c - see divergence.h (docs/SPEC.md §6). */
#include "divergence.h"
#include "ctx.h"
#include "error.h"
#include "validate.h"

#include "math/distil_div_list.h"

#include <math.h>
#include <string.h>

/* Each line of distil_div_list.h is the public value of its position: names are looked up by
 * value, and a value is valid when it has a name. */
#define DIV_POSITION(NAME, name, MODE, term, make) DIV_POS_##NAME,
enum { DISTIL_DIVERGENCES(DIV_POSITION) DIV_COUNT };
#define DIV_AT_POSITION(NAME, name, MODE, term, make)                                              \
    _Static_assert((int)DISTIL_DIVERGENCE_##NAME == (int)DIV_POS_##NAME,                           \
                   "distil_div_list.h lists DISTIL_DIVERGENCE_" #NAME " out of its place");
DISTIL_DIVERGENCES(DIV_AT_POSITION)

#define DIV_NAME(NAME, name, MODE, term, make) name,
static const char *const div_names[DIV_COUNT] = {DISTIL_DIVERGENCES(DIV_NAME)};

/* "JSD, FORWARD_KL, ..." and "jsd, forward_kl, ...": each entry adds ", NAME", the first ", " is
 * skipped. */
#define DIV_ENUM_WORD(NAME, name, MODE, term, make) ", " #NAME
#define DIV_NAME_WORD(NAME, name, MODE, term, make) ", " name
static const char *const div_enum_words = DISTIL_DIVERGENCES(DIV_ENUM_WORD) + 2;
static const char *const div_name_words = DISTIL_DIVERGENCES(DIV_NAME_WORD) + 2;

const char *distil_divergence_name(distil_divergence divergence) {
    return (unsigned)divergence < DIV_COUNT ? div_names[divergence] : NULL;
}

distil_status distil_divergence_from_name(const char *name, distil_divergence *divergence) {
    const char *fn = "divergence_from_name";
    if (name == NULL || divergence == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                                name == NULL ? "name" : "divergence");
    }
    for (int i = 0; i < DIV_COUNT; i++) {
        if (strcmp(name, div_names[i]) == 0) {
            *divergence = (distil_divergence)i;
            return DISTIL_OK;
        }
    }
    return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: name \"%.64s\" is not one of %s", fn,
                            name, div_name_words);
}

distil_status distil_check_divergence(distil_ctx *ctx, const char *fn, distil_divergence divergence,
                                      float alpha) {
    if (distil_divergence_name(divergence) == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: divergence %d is not one of %s",
                                fn, (int)divergence, div_enum_words);
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
