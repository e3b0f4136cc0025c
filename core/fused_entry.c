/* fused_entry.c - see fused_entry.h. */
#include "fused_entry.h"

#include "ctx.h"
#include "error.h"
#include "fused_loop.h"
#include "workspace.h"

distil_status distil_fused_plan_make(distil_ctx *ctx, const char *fn, const distil_fused_shape *s,
                                     int64_t chunk_rows, int64_t policy_vocab,
                                     distil_fused_plan *p) {
    size_t avail = distil_workspace_available(ctx);
    if (chunk_rows != 0) {
        distil_chunk_plan_within(s, chunk_rows, avail, p);
        return DISTIL_OK; /* (a lent workspace still too small: the run says so) */
    }
    int64_t chunk = distil_chunk_rows(&ctx->be->tuning.chunk, s->rows, policy_vocab);
    if (!distil_chunk_plan_fit(s, chunk, avail, p)) {
        return distil_error_set(ctx, DISTIL_ERR_WORKSPACE,
                                "%s: lent workspace holds %zu bytes, one row needs %zu", fn, avail,
                                p->bytes);
    }
    return DISTIL_OK;
}

int distil_fused_gw_chunks(const distil_ctx *ctx, distil_dtype g_dtype) {
    if (ctx->gw_chunks_env > 0) {
        return ctx->gw_chunks_env;
    }
    return g_dtype != DISTIL_F32 ? ctx->be->tuning.chunk.gw_chunks : 1;
}

distil_status distil_fused_empty(distil_ctx *ctx, const distil_fused_args *a) {
    distil_fill_args f = {
        .dst = a->loss, .dtype = DISTIL_F32, .count = a->return_parts ? 3 : 1, .value = 0.0f};
    return ctx->be->fill(ctx->b, &f);
}

/* No labels (weight_hard == 0): label 0 for every row, in the plan's region of the workspace,
 * so that every row counts (N = rows) and the row kernels need no case of their own; the hard
 * part of G is then weight_hard / N = 0 times a finite value. Two fp32 zeros are an int64 0. */
static distil_status distil_fused_stand_in_labels(distil_ctx *ctx, distil_fused_args *a,
                                                  const distil_fused_plan *p) {
    a->labels = distil_dptr_add(a->workspace, p->off_labels);
    distil_fill_args f = {.dst = a->labels, .dtype = DISTIL_F32, .count = 2 * a->rows};
    return ctx->be->fill(ctx->b, &f);
}

/* Without labels the hard part (loss[1]) is 0, whatever the stand-in labels gave. */
static distil_status distil_fused_no_hard_part(distil_ctx *ctx, const distil_fused_args *a) {
    distil_fill_args f = {
        .dst = distil_dptr_add(a->loss, sizeof(float)), .dtype = DISTIL_F32, .count = 1};
    return ctx->be->fill(ctx->b, &f);
}

distil_status distil_fused_run_planned(distil_ctx *ctx, const char *fn, distil_fused_args *a,
                                       const distil_fused_plan *p, distil_tp *tp) {
    DISTIL_TRY(distil_workspace_acquire(ctx, p->bytes, fn, &a->workspace));
    if (tp != NULL) {
        distil_tp_fused_bind(tp, a->workspace);
    }
    a->workspace_bytes = p->bytes;
    a->chunk_rows = p->chunk_rows;
    const bool own_labels = !distil_dptr_present(a->labels);
    if (own_labels) {
        DISTIL_TRY(distil_fused_stand_in_labels(ctx, a, p));
    }
    distil_status st = tp != NULL               ? distil_fused_loop_run_tp(ctx, a, p, tp)
                       : ctx->be->whole != NULL ? ctx->be->whole->fused_linear_jsd(ctx->b, a)
                                                : distil_fused_loop_run(ctx, a, p);
    if (st == DISTIL_OK && own_labels && a->return_parts) {
        st = distil_fused_no_hard_part(ctx, a); /* the rows' CE against the stand-in is moot */
    }
    if (st == DISTIL_OK && ctx->be->host_memory) {
        st = ctx->be->synchronize(ctx->b); /* reports an invalid label or id from this call */
    }
    return st;
}
