/*
 * fused_pass_local.c - the row pass of a chunk on one device: fused_rows on its zs and zt
 * (docs/SPEC.md §2 steps 2-5), which may take the row statistics of the logits GEMMs; the
 * unsharded loss, which a backend's whole op may compute instead.
 */
#include "fused_sources.h"

static bool distil_fused_pass_local_ready(const distil_backend *be) {
    return be->fused_rows != NULL;
}

static distil_status distil_fused_pass_local_rows(const distil_fused_view *view, const void *self,
                                                  const distil_fused_rows_args *r, int64_t r0) {
    (void)self;
    (void)r0;
    return view->ctx->be->fused_rows(view->ctx->b, r);
}

static const distil_fused_pass_ops distil_fused_pass_local_ops = {
    .ready = distil_fused_pass_local_ready,
    .rows = distil_fused_pass_local_rows,
    .whole = true,
    .takes_stats = true,
};

distil_fused_pass distil_fused_pass_local(void) {
    const distil_fused_pass p = {.ops = &distil_fused_pass_local_ops, .self = NULL};
    return p;
}
