/*
 * fused_loop.h - the chunk loop of the fused loss (docs/SPEC.md §2), once for every backend that
 * has no whole fused op: the backends compute the GEMMs and the row pass, the core drives them.
 * The teacher's side and the row pass are the call's strategies (fused_strategy.h).
 */
#ifndef DISTIL_CORE_FUSED_LOOP_H
#define DISTIL_CORE_FUSED_LOOP_H

#include "fused_strategy.h"

/* Run the loss of a (validated, rows >= 1, workspace acquired) on ctx's backend by plan p, with
 * teacher source t and row pass pass (its regions bound). */
distil_status distil_fused_loop_run(distil_ctx *ctx, const distil_fused_args *a,
                                    const distil_fused_plan *p, const distil_teacher_source *t,
                                    const distil_fused_pass *pass);

#endif /* DISTIL_CORE_FUSED_LOOP_H */
