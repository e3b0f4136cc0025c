/* test_caps.c - distil_testing_capabilities (core/testing/distil_testing.h): what the backend's
 * optional sub-tables let the public calls do, as the core decides it (fused_fp8.c, tp_fused.c). */
#include "ctx.h"
#include "distil_testing.h"

distil_testing_caps distil_testing_capabilities(const distil_ctx *ctx) {
    distil_testing_caps c = {0};
    if (ctx != NULL) {
        c.fp8_head = distil_backend_has_fp8_head(ctx->be);
        c.tp = ctx->be->tp != NULL;
    }
    return c;
}
