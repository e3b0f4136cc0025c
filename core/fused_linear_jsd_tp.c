/*
 * fused_linear_jsd_tp.c - the public entry points of the fused loss on a vocabulary shard
 * (docs/SPEC.md §8): the shard's checks and the head options it refuses, then the body of
 * distil_fused_linear_jsd (fused_linear_jsd.c) with the vocabulary-parallel row pass
 * (fused_pass_tp.c).
 */
#include "error.h"
#include "fused_linear_jsd.h"
#include "fused_sources.h"
#include "validate.h"

/* The head options of docs/SPEC.md §6 (scale, softcap, a teacher temperature of its own, heads
 * of different sizes, LSE outputs) are not applied by the vocabulary-parallel row op: refused
 * rather than ignored. A descriptor of another size is left to the version check. */
static distil_status distil_tp_check_head(distil_ctx *ctx, const char *fn,
                                          const distil_fused_linear_jsd_desc *d) {
    if (d->struct_size != sizeof *d) {
        return DISTIL_OK;
    }
    bool tt = d->teacher_temperature != 0.0f && d->teacher_temperature != d->temperature;
    if ((d->teacher_vocab != 0 && d->teacher_vocab != d->vocab) || tt ||
        d->student_logit_scale != 1.0f || d->student_softcap != 0.0f ||
        d->teacher_logit_scale != 1.0f || d->teacher_softcap != 0.0f || d->student_lse != NULL ||
        d->teacher_lse != NULL) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: the head options (teacher_vocab, teacher_temperature, logit "
                                "scales, softcaps, student_lse / teacher_lse) are not supported "
                                "by the vocabulary-parallel loss",
                                fn);
    }
    if (d->student_entropy != NULL) { /* its sum would need one more all-reduce per chunk */
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: student_entropy is not supported by the vocabulary-parallel "
                                "loss",
                                fn);
    }
    if (d->teacher_head_precision != DISTIL_HEAD_PRECISION_DEFAULT) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: teacher_head_precision (the fp8 teacher head) is not "
                                "supported by the vocabulary-parallel loss",
                                fn);
    }
    if (d->grad_weight_fp32) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: grad_weight_fp32 is not supported by the vocabulary-parallel "
                                "loss",
                                fn);
    }
    return DISTIL_OK;
}

static distil_status distil_fused_tp_run(distil_ctx *ctx, const char *fn,
                                         const distil_fused_linear_jsd_desc *desc,
                                         const distil_vocab_shard *shard, int phase, double *stats,
                                         const void *const in[6], const int64_t *labels,
                                         float *loss, void *const grads[3]) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", desc));
    DISTIL_TRY(distil_tp_check_head(ctx, fn, desc));
    distil_fused_tp tp = {.phase = -1};
    DISTIL_TRY(distil_tp_check(ctx, fn, shard, desc->vocab, phase < 0, &tp.shard));
    if (phase >= 0) {
        if (phase > DISTIL_TP_FINISH) {
            return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: phase %d outside [0, 3]", fn,
                                    phase);
        }
        DISTIL_TRY(distil_check_not_null(ctx, fn, "stats", stats));
        DISTIL_TRY(distil_check_device_ptr(ctx, fn, "stats", stats));
        tp.phase = phase;
        tp.stats = distil_dptr_make(stats, 0);
    }
    return distil_fused_linear_jsd_run(ctx, desc, distil_fused_pass_tp(&tp), in, labels, loss,
                                       grads);
}

distil_status distil_fused_linear_jsd_tp(distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc,
                                         const distil_vocab_shard *shard,
                                         const void *student_hidden, const void *student_weight,
                                         const void *student_bias, const void *teacher_hidden,
                                         const void *teacher_weight, const void *teacher_bias,
                                         const int64_t *labels, float *loss,
                                         void *grad_student_hidden, void *grad_student_weight,
                                         void *grad_student_bias) {
    const void *const in[6] = {student_hidden, student_weight, student_bias,
                               teacher_hidden, teacher_weight, teacher_bias};
    void *const grads[3] = {grad_student_hidden, grad_student_weight, grad_student_bias};
    DISTIL_GUARDED(ctx, "fused_linear_jsd_tp",
                   distil_fused_tp_run(ctx, "fused_linear_jsd_tp", desc, shard, -1, NULL, in,
                                       labels, loss, grads));
}

distil_status distil_fused_linear_jsd_tp_phase(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, const distil_vocab_shard *shard,
    int phase, double *stats, const void *student_hidden, const void *student_weight,
    const void *student_bias, const void *teacher_hidden, const void *teacher_weight,
    const void *teacher_bias, const int64_t *labels, float *loss, void *grad_student_hidden,
    void *grad_student_weight, void *grad_student_bias) {
    const void *const in[6] = {student_hidden, student_weight, student_bias,
                               teacher_hidden, teacher_weight, teacher_bias};
    void *const grads[3] = {grad_student_hidden, grad_student_weight, grad_student_bias};
    DISTIL_GUARDED(ctx, "fused_linear_jsd_tp_phase",
                   distil_fused_tp_run(ctx, "fused_linear_jsd_tp_phase", desc, shard,
                                       phase < 0 ? DISTIL_TP_FINISH + 1 : phase, stats, in, labels,
                                       loss, grads));
}

static distil_status distil_fused_tp_ws_run(distil_ctx *ctx,
                                            const distil_fused_linear_jsd_desc *desc,
                                            int want_grads, size_t *bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "fused_linear_jsd_tp_workspace_size: ctx is NULL");
    }
    if (desc != NULL) {
        DISTIL_TRY(distil_tp_check_head(ctx, "fused_linear_jsd_tp_workspace_size", desc));
    }
    /* The plan of a call with a communicator: the statistics live in the workspace. */
    distil_comm stand_in = {.size = 1};
    distil_fused_tp tp = {.shard = {.comm = &stand_in}, .phase = -1};
    return distil_fused_linear_jsd_workspace_run(ctx, desc, distil_fused_pass_tp(&tp), want_grads,
                                                 bytes);
}

distil_status distil_fused_linear_jsd_tp_workspace_size(distil_ctx *ctx,
                                                        const distil_fused_linear_jsd_desc *desc,
                                                        int want_grads, size_t *bytes) {
    DISTIL_GUARDED(ctx, "fused_linear_jsd_tp_workspace_size",
                   distil_fused_tp_ws_run(ctx, desc, want_grads, bytes));
}
