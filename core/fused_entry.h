/*
 * fused_entry.h - the parts of the fused entry points shared by distil_fused_linear_jsd (and its
 * vocabulary-parallel form, docs/SPEC.md §8) and distil_fused_linear_topk (§7): the chunk plan,
 * rows == 0, and the run of a planned call (workspace, stand-in labels, the chunk loop or the
 * backend's whole op, host synchronisation). Each entry point keeps its own checks and shape.
 */
#ifndef DISTIL_CORE_FUSED_ENTRY_H
#define DISTIL_CORE_FUSED_ENTRY_H

#include "chunk.h"
#include "tp.h"

/* The plan of a call (fn names it): chunk_rows as asked, or (0) the backend's chunk policy for
 * policy_vocab columns fitted to a lent workspace (DISTIL_ERR_WORKSPACE when one row does not
 * fit). Either way, weight-gradient groups that a lent workspace cannot hold become groups of
 * one. */
distil_status distil_fused_plan_make(distil_ctx *ctx, const char *fn, const distil_fused_shape *s,
                                     int64_t chunk_rows, int64_t policy_vocab,
                                     distil_fused_plan *p);

/* Chunks per weight-gradient group for a logit gradient G of g_dtype on ctx (docs/DESIGN.md
 * "Weight-gradient groups"): DISTIL_GW_CHUNKS where it was set, else the backend's policy for a
 * G in a half dtype and 1 for an fp32 G (which groups of one keep in place in zs; more would take
 * 4 C V bytes a slot). 0 or 1: groups of one. */
int distil_fused_gw_chunks(const distil_ctx *ctx, distil_dtype g_dtype);

/* rows == 0: loss (and its parts) 0, nothing else written. */
distil_status distil_fused_empty(distil_ctx *ctx, const distil_fused_args *a);

/* A validated, planned call: acquire the workspace (bound to tp when sharded), stand-in labels
 * without labels, then the tp loop, the backend's whole op or the chunk loop; without labels
 * loss[1] = 0; on host-memory backends the synchronize that reports a bad label or id. */
distil_status distil_fused_run_planned(distil_ctx *ctx, const char *fn, distil_fused_args *a,
                                       const distil_fused_plan *p, distil_tp *tp);

#endif /* DISTIL_CORE_FUSED_ENTRY_H */
