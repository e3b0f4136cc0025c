/*
 * fused_sources.h - the strategies a fused entry point chooses from (fused_strategy.h), one
 * constructor each, defined in the strategy's own file. The state a constructor is given is the
 * strategy's own; it must outlive the call.
 */
#ifndef DISTIL_CORE_FUSED_SOURCES_H
#define DISTIL_CORE_FUSED_SOURCES_H

#include "fused_strategy.h"
#include "tp.h"

/* ---- teacher sources */

/* A dense teacher head (docs/SPEC.md §2): zt by the exact GEMM (fused_teacher_head.c). */
distil_teacher_source distil_teacher_head_source(const distil_teacher_head *head);

/* The fp8 teacher head (docs/SPEC.md §6): zt by e4m3 rows (fused_teacher_fp8.c). */
distil_teacher_source distil_teacher_e4m3_source(const distil_teacher_e4m3 *e4m3);

/* A cached top-k teacher (docs/SPEC.md §7): no zt; its row pass, distil_fused_pass_topk, reads
 * the ids and log-probs (fused_teacher_topk.c). */
distil_teacher_source distil_teacher_topk_source(const distil_topk_teacher *topk);

/* ---- row passes */

/* fused_rows on the chunk's zs and zt, on one device (fused_pass_local.c). */
distil_fused_pass distil_fused_pass_local(void);

/* topk_rows on the chunk's zs against the cached teacher topk (fused_teacher_topk.c). */
distil_fused_pass distil_fused_pass_topk(distil_topk_teacher *topk);

/* The row pass on a vocabulary shard (docs/SPEC.md §8, fused_pass_tp.c): the checked shard, the
 * phase a split call runs, and the row statistics. */
typedef struct distil_fused_tp {
    distil_tp shard;
    int phase; /* split phase: the one distil_tp_phase to run; -1: all */
    /* The row statistics (8 rows) f64, the caller's in a split phase, else the workspace's at
     * off_stats; with a communicator and grad_student_hidden, the fp32 partial of a chunk's
     * grad_xs (chunk, Hs) at off_gx, all-reduced before its cast to the output dtype (absent:
     * grad_xs is written straight in the output dtype). */
    distil_dptr stats, gx;
    size_t off_stats, off_gx;
    bool own_stats, want_gx;
} distil_fused_tp;

distil_fused_pass distil_fused_pass_tp(distil_fused_tp *tp);

#endif /* DISTIL_CORE_FUSED_SOURCES_H */
