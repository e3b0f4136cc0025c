/*
 * fused_logits.h - the logits GEMM of one head of the fused loss, z = x_c W^T + bias over a
 * chunk's rows into the plan's zs or zt (docs/SPEC.md §2 step 1), and the planes of its row
 * statistics (docs/DESIGN.md "Row statistics from the logits GEMM"), written by the backend's
 * statistics GEMM where the loop takes them. The chunk loop runs the student's; a teacher source
 * with a dense head runs the teacher's.
 */
#ifndef DISTIL_CORE_FUSED_LOGITS_H
#define DISTIL_CORE_FUSED_LOGITS_H

#include "fused_strategy.h"

/* One head: x (rows, h), w (vocab rows, h), bias (optional), of the call's dtype; the soft
 * part's 1 / temperature of its logits (the statistics' scale); teacher: into zt and the
 * teacher's planes (else zs and the student's). */
typedef struct distil_fused_linear {
    distil_dptr x, w, bias;
    int64_t h;
    float inv_temperature;
    bool teacher;
} distil_fused_linear;

/* The student's head of a. */
distil_fused_linear distil_fused_student_linear(const distil_fused_args *a);

/* Plane i of the row statistics in plan p's workspace: 0, 1 the maxima and sums of zs, 2, 3 of
 * zt. */
distil_dptr distil_fused_stats_plane(const distil_fused_args *a, const distil_fused_plan *p, int i);

/* The GEMM of head l over rows [r0, r0 + c) into plan p's workspace. */
distil_gemm_args distil_fused_logits_gemm(const distil_fused_args *a, const distil_fused_plan *p,
                                          const distil_fused_linear *l, int64_t r0, int64_t c);

/* The same GEMM with its row statistics into p's planes (the backend's statistics GEMM). */
distil_gemm_stats_args distil_fused_logits_stats(const distil_fused_args *a,
                                                 const distil_fused_plan *p,
                                                 const distil_fused_linear *l, int64_t r0,
                                                 int64_t c);

/* What the statistics GEMM is asked about head l's GEMMs before the plan (the call's rows; a
 * row pass with or without gradients). */
distil_gemm_stats_shape distil_fused_logits_shape(const distil_fused_args *a,
                                                  const distil_fused_linear *l, bool grads);

/* Head l's logits of rows [r0, r0 + c): the statistics GEMM where view->stats, else gemm. */
distil_status distil_fused_logits_run(const distil_fused_view *view, const distil_fused_linear *l,
                                      int64_t r0, int64_t c);

#endif /* DISTIL_CORE_FUSED_LOGITS_H */
