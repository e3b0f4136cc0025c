/*
 * fused_args.h - the arguments of the fused loss (docs/SPEC.md §2) as the core hands them on
 * after validation: what every form of the call shares, and the teacher's state as the call's
 * teacher source (core/fused_strategy.h) holds it. The core's chunk loop reads only the shared
 * part; a backend's whole op (the float64 reference) reads the teacher's too.
 */
#ifndef DISTIL_CORE_FUSED_ARGS_H
#define DISTIL_CORE_FUSED_ARGS_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dense teacher head (docs/SPEC.md §2 step 1): zt = xt Wt^T + bt with xt (rows, ht), Wt
 * (teacher_vocab, ht) and bt (teacher_vocab, optional), of the call's dtype. */
typedef struct distil_teacher_head {
    distil_dptr xt, wt, bt;
    int64_t ht;
} distil_teacher_head;

/* The fp8 teacher head (docs/SPEC.md §6): the dense head's logits from e4m3 rows of xt and Wt
 * with per-row scales (quant_rows, gemm_e4m3) instead of the exact GEMM. Wt's rows made once by
 * distil_e4m3_head_make: the head as given (wq_head, wq_bytes bytes, its header first:
 * core/fused_fp8.h), its codes (teacher_vocab, wq_ld) in the backend's e4m3 form at wq and its
 * scales (teacher_vocab) fp32 at wq_scale; or NULL wq_head and wq: made in each call from
 * head.wt. */
typedef struct distil_teacher_e4m3 {
    distil_teacher_head head;
    distil_dptr wq_head;
    size_t wq_bytes;
    distil_dptr wq;
    int64_t wq_ld;
    distil_dptr wq_scale;
} distil_teacher_e4m3;

/* The whole of distil_fused_linear_jsd in one backend call (optional op `fused_linear_jsd`: the
 * float64 reference computes the loss whole; every other backend runs the core's chunk loop).
 * rows >= 1; absent gradients have a NULL base; workspace is what the core planned (the backend
 * may use less). */
struct distil_fused_args {
    distil_dptr xs, ws, bs, labels, loss;
    distil_dptr grad_xs, grad_ws, grad_bs;
    int64_t rows, vocab, hs;
    distil_dtype dtype;
    bool gw_f32; /* grad_ws and grad_bs are fp32 (else dtype): distil_fused_gw_dtype */
    float weight_hard, weight_soft, beta, inv_temperature;
    int64_t ignore_index;
    bool return_parts;
    distil_dptr workspace;
    /* docs/SPEC.md §6: the soft part's divergence and N given by the caller, as in
     * distil_jsd_args (weight_soft already carries the tau^2 factor when it is asked for; a sum
     * reduction is N = 1 given). */
    distil_divergence divergence;
    float alpha;
    float normaliser;
    distil_dptr normaliser_device;
    /* docs/SPEC.md §6 head options: vocab above is the common prefix min(student_vocab,
     * teacher_vocab) over which the loss runs; each head's own rows (for its weight, bias and
     * gradient outputs); per head the logit scale and softcap (1, 0: unchanged); 1 / the
     * teacher's temperature (= inv_temperature unless given); optional (rows) fp32 LSE outputs. */
    int64_t student_vocab, teacher_vocab;
    float student_scale, student_cap, teacher_scale, teacher_cap;
    float inv_teacher_temperature;
    distil_dptr student_lse, teacher_lse;
    /* docs/SPEC.md §6 student entropy: (rows) fp32, optional; written by the row pass */
    distil_dptr student_entropy;
    /* The teacher, for a whole op only (its teacher source sets these; the chunk loop never reads
     * them): a dense head (teacher_head; with teacher_e4m3 too, its fp8 form), or a cached top-k
     * teacher (docs/SPEC.md §7: topk, and no teacher_head). */
    const distil_teacher_head *teacher_head;
    const distil_teacher_e4m3 *teacher_e4m3;
    const distil_topk_teacher *topk;
};

/* The dtype of grad_ws and grad_bs (distil_fused_linear_jsd_desc.grad_weight_fp32). */
static inline distil_dtype distil_fused_gw_dtype(const distil_fused_args *a) {
    return a->gw_f32 ? DISTIL_F32 : a->dtype;
}

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_CORE_FUSED_ARGS_H */
