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

/* A head made once (distil_e4m3_head_make, docs/SPEC.md §6; drawn in docs/DESIGN.md "The fp8
 * teacher head") is, from its first byte, which is 16-byte aligned:
 *   header  distil_e4m3_header (backend.h), 32 bytes: magic, layout, e4m3_bytes, rows, cols
 *   codes   (rows, ld) in the backend's e4m3 form, eb bytes each, ld = distil_e4m3_ld(cols)
 *   scales  (rows) fp32
 * with no gap: 32 and a row of codes (ld * eb bytes) are multiples of 16, so the codes and the
 * scales are 16-byte aligned (cuda's 16-byte code stores, cuBLASLt's fp8 operands, fp32 loads),
 * and every byte is written. This file is the one place of that layout. */
#define DISTIL_E4M3_HEAD_MAGIC  0x48344544u /* "DE4H" in memory order on a little-endian host */
#define DISTIL_E4M3_HEAD_LAYOUT 1u

/* Where a head's parts lie, in bytes from its first. */
typedef struct distil_e4m3_layout {
    int64_t ld;       /* the codes' row stride, elements */
    size_t off_codes; /* = the header's size */
    size_t off_scale; /* right after the codes */
    size_t bytes;     /* the whole head: distil_e4m3_head_size */
} distil_e4m3_layout;

/* rows x cols (>= 1, checked by the caller) of a head, or of the fused call's e4m3 rows, within
 * validate.h's size limit: cols first (so that its 16-rounding cannot overflow: cols near
 * INT64_MAX wrapped it), then the rounded rows at 4 bytes per element, which bounds the whole
 * head (codes of at most 2 bytes, a 4-byte scale per row of >= 16, the header). `name` is the
 * argument the message names. */
distil_status distil_e4m3_head_check_size(distil_ctx *ctx, const char *fn, const char *name,
                                          int64_t rows, int64_t cols);

/* The layout of a head of rows x cols with eb-byte codes, once distil_e4m3_head_check_size
 * accepted them. */
distil_e4m3_layout distil_e4m3_head_layout(int eb, int64_t rows, int64_t cols);

/* The header of a head of rows x cols made by a backend of eb-byte codes. */
distil_e4m3_header distil_e4m3_head_header(int eb, int64_t rows, int64_t cols);

/* Store the header of a head of rows x cols at head (in ctx's memory, checked): directly on a
 * host-memory backend, else by the backend's e4m3_header op (in stream order). */
distil_status distil_e4m3_head_write_header(distil_ctx *ctx, void *head, int64_t rows,
                                            int64_t cols);

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

/* a's head made once (wq_head, wq_bytes, wq, wq_ld, wq_scale) from the descriptor (checked by
 * distil_fused_fp8_check), or NULL wq_head and wq. */
void distil_fused_fp8_head_args(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                                distil_fused_args *a);

/* The fused call's head made once, after its pointer checks, on a host-memory backend: its
 * header is that of the call's teacher head (Vt, Ht) on this backend, else INVALID_ARG naming
 * teacher_weight_e4m3 (made for another shape / backend). A device backend compares the header
 * on the device instead (distil_fused_fp8_weights; synchronize reports it). */
distil_status distil_fused_fp8_check_given(distil_ctx *ctx, const char *fn,
                                           const distil_fused_args *a);

/* Before the loop: Wt's rows [0, vocab) into the plan's wq and sw, or, with a head made once on a
 * device backend, its header compared with the call's on the device (e4m3_header). */
distil_status distil_fused_fp8_weights(const distil_backend *be, void *b,
                                       const distil_fused_args *a, const distil_fused_plan *p);

/* zt of rows [r0, r0 + c): xt's rows into xq and sx, then zt = sx sw^T (xq wq^T) + bt. */
distil_status distil_fused_fp8_logits(const distil_backend *be, void *b, const distil_fused_args *a,
                                      const distil_fused_plan *p, int64_t r0, int64_t c);

#endif /* DISTIL_CORE_FUSED_FP8_H */
