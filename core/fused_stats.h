/*
 * fused_stats.h - whether the chunk loop takes the row statistics from the logits GEMMs
 * (docs/DESIGN.md "Row statistics from the logits GEMM"): asked once by the plan about the
 * GEMMs' shapes (the backend's epilogue->stats_fit), which makes room for them, and again by the
 * loop about the call's operands (epilogue->stats_ok).
 */
#ifndef DISTIL_CORE_FUSED_STATS_H
#define DISTIL_CORE_FUSED_STATS_H

#include "fused_strategy.h"

/* Columns per tile of the row statistics for a call like a (grads: with gradients), 0: none.
 * Only for a row pass that takes them and a teacher source whose logits have them, no head pass
 * and no student entropy (which the row kernels sum while they read the rows), where the
 * backend's statistics GEMM fits both logits GEMMs' shapes. */
int distil_fused_stats_cols(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_pass *pass,
                            bool grads);

/* Whether the backend's statistics GEMM takes the operands of both logits GEMMs of c rows into
 * plan p (the first chunk's: what their alignment allows holds for every chunk). */
bool distil_fused_stats_ask(const distil_ctx *ctx, const distil_fused_args *a,
                            const distil_teacher_source *t, const distil_fused_plan *p, int64_t c);

#endif /* DISTIL_CORE_FUSED_STATS_H */
