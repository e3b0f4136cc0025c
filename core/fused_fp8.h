/*
 * fused_fp8.h - the fp8 teacher head of the fused loss (docs/SPEC.md §6): the teacher's logits
 * from e4m3 rows of Wt (quantised once per call, or once for all calls by distil_e4m3_head_make)
 * and of each chunk's xt, with a scale per row, in place of the teacher's exact GEMM. Here: its
 * checks, and the layout and header of a head made once; its teacher source is
 * fused_teacher_fp8.c.
 */
#ifndef DISTIL_CORE_FUSED_FP8_H
#define DISTIL_CORE_FUSED_FP8_H

#include "ctx.h"
#include "fused_args.h"

/* Row stride of e4m3 codes of `cols` columns (docs/SPEC.md §6 fp8 teacher head): cols rounded up
 * to 16 (cuBLASLt's fp8 takes K-major rows of a multiple of 16 bytes; the padding codes are 0). */
static inline int64_t distil_e4m3_ld(int64_t cols) {
    return (cols + 15) / 16 * 16;
}

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

/* q's head made once (wq_head, wq_bytes, wq, wq_ld, wq_scale) from the descriptor (checked by
 * distil_fused_fp8_check; needs q->head.ht), or, none given, q's left as they are. */
void distil_fused_fp8_given(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                            distil_teacher_e4m3 *q);

/* The fused call's head made once (q), after its pointer checks, on a host-memory backend: its
 * header is that of the call's teacher head (a's Vt, Ht) on this backend, else INVALID_ARG naming
 * teacher_weight_e4m3 (made for another shape / backend). A device backend compares the header
 * on the device instead (the teacher source's prologue; synchronize reports it). */
distil_status distil_fused_fp8_check_given(distil_ctx *ctx, const char *fn,
                                           const distil_fused_args *a,
                                           const distil_teacher_e4m3 *q);

#endif /* DISTIL_CORE_FUSED_FP8_H */
