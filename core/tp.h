/*
 * tp.h - a vocabulary shard of docs/SPEC.md §8 after its checks (offset, total, communicator), as
 * the vocabulary-parallel losses take it: distil_jsd_tp (tp_jsd.c) and the fused loss's row pass
 * on a shard (fused_pass_tp.c).
 */
#ifndef DISTIL_CORE_TP_H
#define DISTIL_CORE_TP_H

#include "comm.h"

/* A shard after its checks: columns / head rows [offset, offset + vocab) of total. */
typedef struct distil_tp {
    int64_t offset, total;
    const distil_comm *comm; /* NULL: split phase (the caller reduces) */
} distil_tp;

/* shard's checks against the descriptor's vocab (the rank's width); need_comm: a _tp call. */
distil_status distil_tp_check(distil_ctx *ctx, const char *fn, const distil_vocab_shard *shard,
                              int64_t vocab, bool need_comm, distil_tp *out);

#endif /* DISTIL_CORE_TP_H */
