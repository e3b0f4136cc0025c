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

/* Bytes the context can offer without allocating: the lent size, or SIZE_MAX when it may grow. */
size_t distil_workspace_available(const distil_ctx *ctx);

/* A workspace of at least `bytes` (`what` names the call for messages). */
distil_status distil_workspace_acquire(distil_ctx *ctx, size_t bytes, const char *what,
                                       distil_dptr *out);

#endif /* DISTIL_CORE_WORKSPACE_H */
