/*
 * fused_stats.h - whether the chunk loop takes the row statistics from the logits GEMMs
 * (docs/DESIGN.md "Row statistics from the logits GEMM"): asked once by the plan, which makes
 * room for them, and again by the loop with the call's pointers.
 */
#ifndef DISTIL_CORE_FUSED_STATS_H
#define DISTIL_CORE_FUSED_STATS_H

#include "fused_strategy.h"

/* Columns per tile of the row statistics for a call like a (grads: with gradients), 0: none.
 * Only for a row pass that takes them and a teacher source whose logits have them, no head pass
 * and no student entropy (which the row kernels sum while they read the rows), where the backend
 * says yes for both logits GEMMs before any pointer is known. */
int distil_fused_stats_cols(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_pass *pass,
                            bool grads);

/* Whether the backend writes the row statistics of both logits GEMMs of c rows into plan p
 * (NULL: not known yet) for a row pass with or without gradients. */
bool distil_fused_stats_ask(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_plan *p, int64_t c,
                            bool grads);

#endif /* DISTIL_CORE_FUSED_STATS_H */
