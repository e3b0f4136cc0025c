/* row_loss.c - see row_loss.h. */
#include "row_loss.h"

#include "ctx.h"
#include "divergence.h"
#include "error.h"
#include "workspace.h"

distil_status distil_row_loss_empty(distil_ctx *ctx, const distil_row_loss *r) {
    if (r->reduction == DISTIL_REDUCTION_NONE) {
        return DISTIL_OK;
    }
    distil_fill_args f = {.dst = r->loss, .dtype = DISTIL_F32, .count = 1, .value = 0.0f};
    return ctx->be->fill(ctx->b, &f);
}

distil_status distil_row_loss_compose(distil_ctx *ctx, const char *fn, const distil_row_loss *r,
                                      distil_row_pass pass, const void *op) {
    const distil_backend *be = ctx->be;
    distil_dptr work;
    DISTIL_TRY(distil_workspace_acquire(
        ctx, distil_workspace_row_loss(false, r->rows, r->reduction), fn, &work));
    const bool mean = r->reduction == DISTIL_REDUCTION_BATCHMEAN;
    const bool none = r->reduction == DISTIL_REDUCTION_NONE;
    distil_dptr n = mean ? work : distil_dptr_make(NULL, 0);
    distil_dptr row_loss = none ? r->loss : distil_dptr_add(work, DISTIL_WORKSPACE_ALIGN);
    if (mean) {
        distil_count_args c = {
            .labels = r->labels, .rows = r->rows, .ignore_index = r->ignore_index, .n_out = n};
        DISTIL_TRY(distil_normaliser_put(ctx, &c, r->normaliser, r->normaliser_device));
    }
    DISTIL_TRY(pass(ctx, op, row_loss, n));
    if (none) {
        return DISTIL_OK;
    }
    distil_reduce_args red = {
        .a = row_loss, .count = r->rows, .wa = 1.0f, .n_valid = n, .out = r->loss};
    return be->reduce(ctx->b, &red);
}
