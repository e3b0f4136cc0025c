/*
 * tp_jsd.c - distil_jsd_tp (docs/SPEC.md §8): the JSD's element terms and gradient need nothing
 * beyond the rank's own columns, and every reduction is linear in the row sums, so the loss of a
 * shard is the rank's share of the loss: distil_jsd on the shard, then one all-reduce (sum, fp32)
 * of its loss output (1 value, or rows for DISTIL_REDUCTION_NONE).
 */
#include "tp.h"

#include "error.h"
#include "jsd.h"
#include "validate.h"

static const char *const fn = "jsd_tp";

static distil_status distil_jsd_tp_run(distil_ctx *ctx, const distil_jsd_desc *desc,
                                       const distil_vocab_shard *shard, const void *x,
                                       const void *y, const int64_t *labels, float *loss,
                                       void *grad) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    DISTIL_TRY(distil_check_not_null(ctx, fn, "desc", desc));
    distil_tp tp;
    DISTIL_TRY(distil_tp_check(ctx, fn, shard, desc->vocab, true, &tp));
    DISTIL_TRY(distil_jsd_run(ctx, desc, x, y, labels, loss, grad));
    bool none = desc->reduction == DISTIL_REDUCTION_NONE;
    int64_t count = none ? desc->rows : 1;
    return distil_comm_allreduce(ctx, tp.comm, distil_dptr_make(loss, 0), count, DISTIL_COMM_F32,
                                 DISTIL_COMM_SUM);
}

distil_status distil_jsd_tp(distil_ctx *ctx, const distil_jsd_desc *desc,
                            const distil_vocab_shard *shard, const void *student_logp,
                            const void *teacher_logp, const int64_t *labels, float *loss,
                            void *grad_student) {
    DISTIL_GUARDED(ctx, fn,
                   distil_jsd_tp_run(ctx, desc, shard, student_logp, teacher_logp, labels, loss,
                                     grad_student));
}
