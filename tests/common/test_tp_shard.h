/*
 * test_tp_shard.h - vocabulary-parallel runs of the fused loss for the tests of docs/SPEC.md §8:
 * the unequal shard bounds of a world size, one rank's run through a communicator, and checks of
 * a rank's outputs against the unsharded float64 reference.
 */
#ifndef DISTIL_TEST_TP_SHARD_H
#define DISTIL_TEST_TP_SHARD_H

#include "test_problems.h"

/* Rank r of world w holds [*v0, *v1) of v: widths proportional to r + 1 (unequal), each >= 1. */
void tps_bounds(int64_t v, int world, int rank, int64_t *v0, int64_t *v1);

/* One rank's outputs: loss (4, the unwritten poisoned), grad_xs whole, grad_Ws / grad_bs of the
 * rank's rows. */
typedef struct tps_out {
    float loss[4];
    void *gxs, *gws, *gbs;
} tps_out;

/* distil_fused_linear_jsd_tp of rank [v0, v1) of p through comm (host outputs in o). */
void tps_fused_run(distil_ctx *ctx, const tp_fused *p, int64_t v0, int64_t v1, distil_comm *comm,
                   tps_out *o);
void tps_out_free(tps_out *o);

/* o (rank [v0, v1)) against the unsharded ref outputs r within docs/SPEC.md §3. */
void tps_check(const tp_fused *p, int64_t v0, int64_t v1, const tps_out *o, const tp_fused_out *r);

/* A rerun b of rank [v0, v1) gave the bits of a (docs/SPEC.md §4): the 4 loss values, grad_xs
 * (t, hs) and the rank's rows of grad_Ws (v1 - v0, hs). */
void tps_check_rerun(const tp_fused *p, int64_t v0, int64_t v1, const tps_out *a, const tps_out *b);

#endif /* DISTIL_TEST_TP_SHARD_H */
