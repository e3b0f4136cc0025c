/*
 * fused_strategy.h - the two choices of a fused call, made once by its entry point and then only
 * called through these tables:
 *   teacher source  where the teacher's side of each chunk comes from: a dense head's GEMM
 *                   (fused_teacher_head.c), the fp8 head's (fused_teacher_fp8.c), or none, the
 *                   row pass reading a cached top-k teacher (fused_teacher_topk.c)
 *   row pass        the chunk's rows on one device (fused_pass_local.c; the top-k teacher's own,
 *                   fused_teacher_topk.c) or on a vocabulary shard, phases and all-reduces
 *                   (fused_pass_tp.c)
 * The chunk loop (fused_loop.c) knows chunks, GEMMs and the plan, and reaches a variant only
 * through them; fused_sources.h makes them. docs/DESIGN.md §3 "Teacher sources and row passes"
 * says how to add one.
 */
#ifndef DISTIL_CORE_FUSED_STRATEGY_H
#define DISTIL_CORE_FUSED_STRATEGY_H

#include "chunk.h"
#include "ctx.h"
#include "fused_args.h"

/* What a strategy sees of a running call: its context, arguments and plan (a->workspace
 * acquired), and whether the logits GEMMs write the row statistics (fused_stats.h). */
typedef struct distil_fused_view {
    distil_ctx *ctx;
    const distil_fused_args *a;
    const distil_fused_plan *p;
    bool stats;
} distil_fused_view;

/* The plan's region at byte offset off of a's workspace. */
static inline distil_dptr distil_fused_region(const distil_fused_args *a, size_t off) {
    return distil_dptr_add(a->workspace, off);
}

/* A teacher source. self is its own state (a distil_teacher_head, ...). */
typedef struct distil_teacher_ops {
    /* The teacher's part of the plan's shape s (s->zt, s->teacher) on ctx's backend. */
    void (*shape)(const void *self, const distil_ctx *ctx, distil_fused_shape *s);
    /* Once before the loop writes anything (the fp8 head: a device without fp8 refuses here).
     * NULL: nothing. */
    distil_status (*prologue)(const distil_fused_view *view, const void *self);
    /* zt (c, vocab) of rows [r0, r0 + c) into the plan's region, with its row statistics where
     * view->stats. NULL: the source has no logits (its row pass reads the teacher itself). */
    distil_status (*logits)(const distil_fused_view *view, const void *self, int64_t r0, int64_t c);
    /* Whether the backend's statistics GEMM (epilogue) fits the teacher's logits GEMMs of the
     * call's shape for a row pass with or without gradients; asked by the plan, before any
     * pointer is known. NULL: never (and stats_ok is not asked). */
    bool (*stats_fit)(const distil_ctx *ctx, const distil_fused_args *a, const void *self,
                      bool grads);
    /* Whether it takes the operands of the teacher's logits GEMM of c rows into plan p; asked
     * once per call by the loop. */
    bool (*stats_ok)(const distil_ctx *ctx, const distil_fused_args *a, const void *self,
                     const distil_fused_plan *p, int64_t c);
    /* The teacher as a backend's whole op reads it (fused_args.h), into a. NULL: no whole op
     * computes it (the chunk loop runs it on every backend). */
    void (*whole)(const void *self, distil_fused_args *a);
} distil_teacher_ops;

typedef struct distil_teacher_source {
    const distil_teacher_ops *ops;
    const void *self;
} distil_teacher_source;

/* A row pass. self is its own state (NULL, a distil_tp, a distil_topk_teacher). */
typedef struct distil_fused_pass_ops {
    /* Whether the backend has the pass's row kernel. */
    bool (*ready)(const distil_backend *be);
    /* The plan p grown by the pass's own regions (auto_chunk: the chunk is the library's choice
     * and may shrink so that both fit a lent workspace); UNSUPPORTED where the backend cannot
     * run the pass. NULL: none. */
    distil_status (*plan)(distil_ctx *ctx, void *self, const distil_fused_shape *s, bool auto_chunk,
                          distil_fused_plan *p);
    /* The pass's regions in the acquired workspace. NULL: none. */
    void (*bind)(void *self, distil_dptr workspace);
    /* Chunk r0's rows: r is the chunk's row arguments as fused_rows takes them (zs, zt, the
     * plan's ce / soft rows and G, the head options). */
    distil_status (*rows)(const distil_fused_view *view, const void *self,
                          const distil_fused_rows_args *r, int64_t r0);
    /* grad_xs of a chunk by its GEMM m (written at m->c in m->c_dtype). NULL: the GEMM. */
    distil_status (*grad_x)(const distil_fused_view *view, const void *self,
                            const distil_gemm_args *m);
    /* The vocabulary the labels are ids of (count_valid's check). NULL: a->vocab. */
    int64_t (*label_vocab)(const void *self, const distil_fused_args *a);
    /* Whether the call stops after the row pass's statistics (a split phase before the last):
     * no gradient GEMMs, no loss. NULL: never. */
    bool (*stats_only)(const void *self);
    bool whole;       /* the unsharded loss: a backend's whole op may compute the call instead */
    bool takes_stats; /* the row kernel takes the logits GEMMs' row statistics (fused_rows) */
} distil_fused_pass_ops;

typedef struct distil_fused_pass {
    const distil_fused_pass_ops *ops;
    void *self;
} distil_fused_pass;

#endif /* DISTIL_CORE_FUSED_STRATEGY_H */
