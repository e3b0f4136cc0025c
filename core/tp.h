/*
 * tp.h - the vocabulary-parallel losses of docs/SPEC.md §8 as the core sees them: a checked shard
 * (offset, total, communicator) handed to the loss bodies of jsd.c and fused_linear_jsd.c.
 */
#ifndef DISTIL_CORE_TP_H
#define DISTIL_CORE_TP_H

#include "chunk.h"
#include "comm.h"

/* A shard after its checks: columns / head rows [offset, offset + vocab) of total. */
typedef struct distil_tp {
    int64_t offset, total;
    const distil_comm *comm; /* NULL: split phase (the caller reduces) */
    int phase;               /* split phase: the one distil_tp_phase to run; -1: all */
    /* Fused loss: the row statistics (8 rows) f64, the caller's in a split phase, else the
     * workspace's at off_stats; with a communicator and grad_student_hidden, the fp32 partial of
     * a chunk's grad_xs (chunk, Hs) at off_gx, all-reduced before its cast to the output dtype
     * (absent: grad_xs is written straight in the output dtype). */
    distil_dptr stats, gx;
    size_t off_stats, off_gx;
    bool own_stats, want_gx;
} distil_tp;

/* The fused loss's plan p grown by tp's regions (offsets into tp), its chunk halved while it does
 * not fit a lent workspace when the chunk is the library's choice (auto_chunk); UNSUPPORTED when
 * the backend has no tp_rows op. */
distil_status distil_tp_fused_plan(distil_ctx *ctx, distil_tp *tp, const distil_fused_shape *s,
                                   bool auto_chunk, distil_fused_plan *p);
/* tp's regions in the acquired workspace. */
void distil_tp_fused_bind(distil_tp *tp, distil_dptr workspace);

/* The row pass of chunk [r0, r0 + r->rows) of a vocabulary-parallel fused loss: the phases of
 * tp (all, or the split phase's one) with the all-reduces between them (docs/SPEC.md §8). r is
 * the chunk's fused_rows arguments (its vocab the rank's width). */
distil_status distil_tp_fused_rows(distil_ctx *ctx, const distil_tp *tp,
                                   const distil_fused_rows_args *r, int64_t rows, int64_t r0);

/* shard's checks against the descriptor's vocab (the rank's width); need_comm: a _tp call. */
distil_status distil_tp_check(distil_ctx *ctx, const char *fn, const distil_vocab_shard *shard,
                              int64_t vocab, bool need_comm, distil_tp *out);

/* The unguarded bodies of distil_jsd (jsd.c) and distil_fused_linear_jsd (fused_linear_jsd.c);
 * tp NULL: the unsharded loss. */
distil_status distil_jsd_run(distil_ctx *ctx, const distil_jsd_desc *desc, const void *student_logp,
                             const void *teacher_logp, const int64_t *labels, float *loss,
                             void *grad_student);
distil_status distil_fused_call(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                const distil_tp *tp, const void *const in[6], const int64_t *labels,
                                float *loss, void *const grads[3]);
distil_status distil_fused_workspace_call(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                          const distil_tp *tp, int want_grads, size_t *bytes);

#endif /* DISTIL_CORE_TP_H */
