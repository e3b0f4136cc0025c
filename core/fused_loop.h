/*
 * fused_loop.h - the chunk loop of the fused loss (docs/SPEC.md §2), once for every backend that
 * has no whole fused op: the backends compute the GEMMs and the row pass, the core drives them.
 */
#ifndef DISTIL_CORE_FUSED_LOOP_H
#define DISTIL_CORE_FUSED_LOOP_H

#include "chunk.h"
#include "ctx.h"

/* Whether the chunk loop takes the row statistics from the logits GEMMs (docs/DESIGN.md "Row
 * statistics from the logits GEMM") for a call like a: a dense teacher with the exact head, no head
 * pass, and the backend's statistics GEMM fit for both GEMMs' shapes and the row pass with or
 * without gradients (asked by the workspace plan, before the operands are known; the loop asks
 * about them once more). Unsharded calls only.
 */
bool distil_fused_stats_wanted(const distil_ctx *ctx, const distil_fused_args *a, bool grads);

/* Run the loss of a (validated, rows >= 1, workspace acquired) on ctx's backend by plan p. */
distil_status distil_fused_loop_run(distil_ctx *ctx, const distil_fused_args *a,
                                    const distil_fused_plan *p);

/* The same loop on a vocabulary shard (docs/SPEC.md §8): the row pass runs tp's phases with their
 * all-reduces, grad_xs is summed over the ranks; a split phase before FINISH writes only the
 * statistics. */
typedef struct distil_tp distil_tp;
distil_status distil_fused_loop_run_tp(distil_ctx *ctx, const distil_fused_args *a,
                                       const distil_fused_plan *p, const distil_tp *tp);

#endif /* DISTIL_CORE_FUSED_LOOP_H */
