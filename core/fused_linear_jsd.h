/*
 * fused_linear_jsd.h - the body of distil_fused_linear_jsd behind its guard (fused_linear_jsd.c):
 * the descriptor's and pointers' checks, the teacher source the descriptor asks for, then the
 * fused call with the row pass of the entry point that runs it: distil_fused_linear_jsd's own
 * (the local pass) or the vocabulary-parallel entry points' (fused_linear_jsd_tp.c).
 */
#ifndef DISTIL_CORE_FUSED_LINEAR_JSD_H
#define DISTIL_CORE_FUSED_LINEAR_JSD_H

#include "fused_strategy.h"

/* The loss with row pass `pass`. in: student hidden, weight, bias, teacher hidden, weight, bias;
 * grads: hidden, weight, bias. */
distil_status distil_fused_linear_jsd_run(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                          distil_fused_pass pass, const void *const in[6],
                                          const int64_t *labels, float *loss, void *const grads[3]);

/* The workspace query of the loss with row pass `pass`. */
distil_status distil_fused_linear_jsd_workspace_run(distil_ctx *ctx,
                                                    const distil_fused_linear_jsd_desc *desc,
                                                    distil_fused_pass pass, int want_grads,
                                                    size_t *bytes);

#endif /* DISTIL_CORE_FUSED_LINEAR_JSD_H */
