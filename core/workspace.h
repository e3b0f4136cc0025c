/*
 * workspace.h - scratch memory of a call: carved from the caller's lent workspace, or from the
 * context's own buffer, which grows (never shrinks) to the largest request seen.
 */
#ifndef DISTIL_CORE_WORKSPACE_H
#define DISTIL_CORE_WORKSPACE_H

#include "backend.h"

#define DISTIL_WORKSPACE_ALIGN 256

/* Bytes rounded up to DISTIL_WORKSPACE_ALIGN, so that every carved region stays aligned. */
static inline size_t distil_workspace_round(size_t bytes) {
    return (bytes + DISTIL_WORKSPACE_ALIGN - 1) / DISTIL_WORKSPACE_ALIGN * DISTIL_WORKSPACE_ALIGN;
}

/* Workspace of a composed row loss (distil_jsd, distil_topk): [n (one fp32, padded)]
 * [row_loss (rows) fp32, unless the reduction is NONE]; nothing when the backend computes the
 * loss whole (whole_op) or there are no rows. */
static inline size_t distil_workspace_row_loss(bool whole_op, int64_t rows,
                                               distil_reduction reduction) {
    if (whole_op || rows == 0) {
        return 0;
    }
    size_t bytes = DISTIL_WORKSPACE_ALIGN;
    if (reduction != DISTIL_REDUCTION_NONE) {
        bytes += distil_workspace_round((size_t)rows * sizeof(float));
    }
    return bytes;
}

/* Bytes the context can offer without allocating: the lent size, or SIZE_MAX when it may grow. */
size_t distil_workspace_available(const distil_ctx *ctx);

/* A workspace of at least `bytes` (`what` names the call for messages). */
distil_status distil_workspace_acquire(distil_ctx *ctx, size_t bytes, const char *what,
                                       distil_dptr *out);

#endif /* DISTIL_CORE_WORKSPACE_H */
