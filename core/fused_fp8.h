/*
 * fused_fp8.h - the fp8 teacher head of the fused loss (docs/SPEC.md §6): the teacher's logits
 * from e4m3 rows of Wt (quantised once per call, or once for all calls by distil_e4m3_head_make)
 * and of each chunk's xt, with a scale per row, in the chunk loop's place of the teacher's exact
 * GEMM.
 */
#ifndef DISTIL_CORE_FUSED_FP8_H
#define DISTIL_CORE_FUSED_FP8_H

#include "chunk.h"
#include "ctx.h"

/* Bytes of a head made once (distil_e4m3_head_make) of rows x cols on a backend whose e4m3
 * elements take eb bytes: codes (rows, distil_e4m3_ld(cols), chunk.h), then at *off_scale (right
 * after them, 16-byte aligned) the scales (rows) fp32: no byte is left unwritten. */
size_t distil_e4m3_head_bytes(int eb, int64_t rows, int64_t cols, size_t *off_scale);

/* A head's address is 16-byte aligned (docs/SPEC.md §6: its scales are read as fp32 and its code
 * rows as 16-byte vectors); else DISTIL_ERR_INVALID_ARG naming arg. */
distil_status distil_e4m3_head_check_align(distil_ctx *ctx, const char *fn, const char *arg,
                                           const void *head);

/* teacher_head_precision is a known value, the context's backend computes it, and a head made
 * once (teacher_weight_e4m3) comes with the precision and the size it must have. */
distil_status distil_fused_fp8_check(distil_ctx *ctx, const char *fn,
                                     const distil_fused_linear_jsd_desc *d);

/* Bytes of a stored e4m3 element of this call's plan: 0 for the exact head, and for a backend
 * that computes the loss whole (ref). */
int distil_fused_fp8_bytes(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d);

/* a's head made once (wq, wq_ld, wq_scale) from the descriptor, or a NULL wq. */
void distil_fused_fp8_head_args(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                                distil_fused_args *a);

/* Before the loop: Wt's rows [0, vocab) into the plan's wq and sw (nothing when a head made once
 * is given). */
distil_status distil_fused_fp8_weights(const distil_backend *be, void *b,
                                       const distil_fused_args *a, const distil_fused_plan *p);

/* zt of rows [r0, r0 + c): xt's rows into xq and sx, then zt = sx sw^T (xq wq^T) + bt. */
distil_status distil_fused_fp8_logits(const distil_backend *be, void *b, const distil_fused_args *a,
                                      const distil_fused_plan *p, int64_t r0, int64_t c);

#endif /* DISTIL_CORE_FUSED_FP8_H */
