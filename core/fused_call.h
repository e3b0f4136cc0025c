/*
 * fused_call.h - one fused call, as its entry point has chosen it: the arguments every form
 * shares, a teacher source and a row pass (fused_strategy.h). Planned here (the chunk plan from
 * the shape of all three, rows == 0) and run here (workspace, stand-in labels, the backend's whole
 * op or the chunk loop, host synchronisation), for distil_fused_linear_jsd, its vocabulary-
 * parallel form (docs/SPEC.md §8) and distil_fused_linear_topk (§7) alike. Each entry point keeps
 * its own checks.
 */
#ifndef DISTIL_CORE_FUSED_CALL_H
#define DISTIL_CORE_FUSED_CALL_H

#include "fused_strategy.h"

typedef struct distil_fused_call {
    const char *fn;       /* the entry point's name, for messages */
    distil_fused_args *a; /* validated; without pointers for a workspace query */
    distil_teacher_source teacher;
    distil_fused_pass pass;
    int64_t chunk_rows; /* as asked; 0: the backend's chunk policy */
} distil_fused_call;

/* The workspace bytes of call c with every gradient (grads) or none: 0 for rows == 0. */
distil_status distil_fused_call_workspace(distil_ctx *ctx, const distil_fused_call *c, bool grads,
                                          size_t *bytes);

/* Run call c (every argument checked): rows == 0 writes loss 0 (and its parts) and nothing else;
 * else the plan, then the whole op or the chunk loop; without labels loss[1] = 0; on host-memory
 * backends the synchronize that reports a bad label or id. */
distil_status distil_fused_call_run(distil_ctx *ctx, const distil_fused_call *c);

#endif /* DISTIL_CORE_FUSED_CALL_H */
