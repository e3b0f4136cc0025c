/* workspace.c - see workspace.h. */
#include "workspace.h"
#include "ctx.h"
#include "error.h"

#include <stdint.h>
#include <stdio.h>

size_t distil_workspace_available(const distil_ctx *ctx) {
    return ctx->work_lent != NULL ? ctx->work_lent_bytes : SIZE_MAX;
}

distil_status distil_workspace_acquire(distil_ctx *ctx, size_t bytes, const char *what,
                                       distil_dptr *out) {
    if (ctx->work_lent != NULL) {
        if (bytes > ctx->work_lent_bytes) {
            return distil_error_set(ctx, DISTIL_ERR_WORKSPACE,
                                    "%s: lent workspace holds %zu bytes, the call needs %zu", what,
                                    ctx->work_lent_bytes, bytes);
        }
        *out = distil_dptr_make(ctx->work_lent, 0);
        return DISTIL_OK;
    }
    if (bytes > ctx->work_own_bytes) {
        /* Work queued on the stream may still use the old buffer. */
        DISTIL_TRY(distil_ctx_wait(ctx));
        if (ctx->work_own != NULL) {
            ctx->be->mem_free(ctx->b, ctx->work_own);
            ctx->work_own = NULL;
            ctx->work_own_bytes = 0;
        }
        void *p = NULL;
        distil_status s = ctx->be->mem_alloc(ctx->b, bytes, &p);
        if (s != DISTIL_OK) {
            char why[DISTIL_MSG_BYTES];
            snprintf(why, sizeof why, "%s", ctx->msg);
            return distil_error_set(ctx, s, "%s: cannot allocate a workspace of %zu bytes: %s",
                                    what, bytes, why);
        }
        ctx->work_own = p;
        ctx->work_own_bytes = bytes;
    }
    *out = distil_dptr_make(ctx->work_own, 0);
    return DISTIL_OK;
}
