/*
 * row_loss.h - the skeleton shared by the two row losses, distil_jsd (docs/SPEC.md §1) and
 * distil_topk (§7): rows == 0, and the composition of the
 * loss on a backend's kernels, count (or the given N, §6) -> the loss's row pass -> reduce, with
 * the workspace of distil_workspace_row_loss. Each loss keeps its own checks and row pass.
 */
#ifndef DISTIL_CORE_ROW_LOSS_H
#define DISTIL_CORE_ROW_LOSS_H

#include "backend.h"

/* What the skeleton needs of a call (filled from the loss's validated args). */
typedef struct distil_row_loss {
    int64_t rows;
    distil_reduction reduction;
    distil_dptr labels; /* (rows) int64, optional: ignore_index ignores a row */
    int64_t ignore_index;
    float normaliser; /* docs/SPEC.md §6: N given on the host (> 0), or on the device */
    distil_dptr normaliser_device;
    distil_dptr loss; /* 1 fp32, or (rows) for NONE */
} distil_row_loss;

/* The skeleton's view of a loss's validated args `a` (a pointer to any struct with these fields:
 * distil_jsd_args, distil_topk_args), written once for both. */
#define DISTIL_ROW_LOSS_OF(a)                                                                      \
    ((distil_row_loss){.rows = (a)->rows,                                                          \
                       .reduction = (a)->reduction,                                                \
                       .labels = (a)->labels,                                                      \
                       .ignore_index = (a)->ignore_index,                                          \
                       .normaliser = (a)->normaliser,                                              \
                       .normaliser_device = (a)->normaliser_device,                                \
                       .loss = (a)->loss})

/* The loss's row pass: per-row losses into row_loss, its gradient with N at n (batchmean: the
 * fp32 that the skeleton put there; else a NULL base, N = 1). op: the loss's own args. */
typedef distil_status (*distil_row_pass)(distil_ctx *ctx, const void *op, distil_dptr row_loss,
                                         distil_dptr n);

/* rows == 0: the loss is 0 (one fp32), nothing is written for NONE. */
distil_status distil_row_loss_empty(distil_ctx *ctx, const distil_row_loss *r);

/* The loss on the backend's kernels (count_valid, reduce, and the row pass, whose presence the
 * caller has checked): workspace (fn names the call), N, pass, reduce. */
distil_status distil_row_loss_compose(distil_ctx *ctx, const char *fn, const distil_row_loss *r,
                                      distil_row_pass pass, const void *op);

#endif /* DISTIL_CORE_ROW_LOSS_H */
