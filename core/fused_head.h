/*
 * fused_head.h - the head options of the fused loss (docs/SPEC.md §6): heads of different
 * vocabulary sizes, per-head logit scale and softcap, the teacher's own temperature and the
 * per-row LSE outputs. The entry point checks and fills them here; the chunk loop runs the
 * head pass and zeroes the student's rows beyond the common prefix here.
 */
#ifndef DISTIL_CORE_FUSED_HEAD_H
#define DISTIL_CORE_FUSED_HEAD_H

#include "chunk.h"
#include "ctx.h"
#include "fused_args.h"

/* Rows of the teacher's head (teacher_vocab, 0 = vocab), and the common prefix of both heads. */
int64_t distil_fused_teacher_vocab(const distil_fused_linear_jsd_desc *d);
int64_t distil_fused_common_vocab(const distil_fused_linear_jsd_desc *d);

/* Values of the head options: scales finite and > 0, caps finite and >= 0 (1 / cap finite),
 * teacher_temperature 0 or a temperature. */
distil_status distil_fused_head_check_desc(distil_ctx *ctx, const char *fn,
                                           const distil_fused_linear_jsd_desc *d);

/* The head options into the backend's arguments; a->vocab becomes the common prefix. Needs
 * a->inv_temperature. */
void distil_fused_head_fill(const distil_fused_linear_jsd_desc *d, distil_fused_args *a);

/* The head options' defaults (one vocabulary, no scale or cap, the student's temperature, no
 * LSEs), for entry points without them (the top-k loss). Needs a->vocab, a->inv_temperature. */
void distil_fused_head_defaults(distil_fused_args *a);

/* Whether the student's logits are transformed (scale != 1 or cap != 0). */
bool distil_fused_student_head(const distil_fused_args *a);

/* Whether a call needs the backend's head_rows op. */
bool distil_fused_head_needed(const distil_fused_args *a);

/* The head pass of chunk [r0, r0 + c) on its logits zs, zt (plan p), before fused_rows: each
 * head's transform and LSE, where asked for, and the student's dz'/dz into dz (present when
 * gradients are wanted and the student's head is transformed: distil_fused_head_dz). */
distil_status distil_fused_head_pass(const distil_backend *be, void *b, const distil_fused_args *a,
                                     const distil_fused_plan *p, distil_dptr dz, int64_t r0,
                                     int64_t c);

/* The plan's dz'/dz region (absent unless wanted). */
distil_dptr distil_fused_head_dz(const distil_fused_args *a, const distil_fused_plan *p,
                                 bool wanted);

/* After the loop: the student's gradient rows [vocab, student_vocab) of grad_Ws and grad_bs are
 * 0 (those logits take no part). */
distil_status distil_fused_head_zero_tail(const distil_backend *be, void *b,
                                          const distil_fused_args *a);

#endif /* DISTIL_CORE_FUSED_HEAD_H */
