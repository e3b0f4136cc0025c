/*
 * tp_fused.c - the vocabulary-parallel fused loss (docs/SPEC.md §8): its entry points, the plan's
 * extra regions, and the phased row pass that the core's chunk loop (fused_loop.c) runs on a
 * shard in place of fused_rows. Per chunk of C rows:
 *   TP_MAX    -> all-reduce max  of (C, 2) f64   row maxima of zs, zt
 *   TP_SUMS   -> all-reduce sum  of (C, 3) f64   sum exp of zs / tau, zt / tau, zs
 *   TP_TERMS  -> all-reduce sum  of (C, 3) f64   zs[label] - m (owner), sum e, sum de/dx
 *   TP_FINISH                                    ce, jsd rows and G, local
 * and the loop all-reduces the chunk's grad_xs partial (C, Hs) f32 before rounding it.
 */
#include "tp.h"

#include "error.h"
#include "validate.h"
#include "workspace.h"

/* The statistics of rows [r0, ...) of a call of `rows` rows: (rows, 2) maxima, then (rows, 3)
 * sums, then (rows, 3) terms, each block contiguous so that a chunk's piece is one all-reduce. */
static const struct {
    int64_t width, before; /* doubles per row; rows-blocks before this one, in doubles per row */
    distil_comm_op op;
} distil_tp_stat[3] = {{2, 0, DISTIL_COMM_MAX}, {3, 2, DISTIL_COMM_SUM}, {3, 5, DISTIL_COMM_SUM}};

static distil_dptr distil_tp_stat_at(const distil_tp *tp, int k, int64_t rows, int64_t r0) {
    size_t doubles = (size_t)(distil_tp_stat[k].before * rows + distil_tp_stat[k].width * r0);
    return distil_dptr_add(tp->stats, doubles * sizeof(double));
}

distil_status distil_tp_fused_rows(distil_ctx *ctx, const distil_tp *tp,
                                   const distil_fused_rows_args *r, int64_t rows, int64_t r0) {
    distil_tp_rows_args t = {.zs = r->zs,
                             .zt = r->zt,
                             .rows = r->rows,
                             .vocab = r->vocab,
                             .vocab_offset = tp->offset,
                             .vocab_total = tp->total,
                             .labels = r->labels,
                             .ignore_index = r->ignore_index,
                             .beta = r->beta,
                             .inv_temperature = r->inv_temperature,
                             .weight_hard = r->weight_hard,
                             .weight_soft = r->weight_soft,
                             .divergence = r->divergence,
                             .alpha = r->alpha,
                             .stat_max = distil_tp_stat_at(tp, 0, rows, r0),
                             .stat_sum = distil_tp_stat_at(tp, 1, rows, r0),
                             .stat_terms = distil_tp_stat_at(tp, 2, rows, r0),
                             .ce_rows = r->ce_rows,
                             .jsd_rows = r->jsd_rows,
                             .g = r->g,
                             .g_dtype = r->g_dtype,
                             .n_valid = r->n_valid};
    for (int ph = DISTIL_TP_MAX; ph <= DISTIL_TP_FINISH; ph++) {
        if (tp->phase >= 0 && ph != tp->phase) {
            continue;
        }
        t.phase = (distil_tp_phase)ph;
        DISTIL_TRY(ctx->be->tp->tp_rows(ctx->b, &t));
        if (ph != DISTIL_TP_FINISH && tp->comm != NULL) {
            DISTIL_TRY(distil_comm_allreduce(ctx, tp->comm, distil_tp_stat_at(tp, ph, rows, r0),
                                             distil_tp_stat[ph].width * r->rows, DISTIL_COMM_F64,
                                             distil_tp_stat[ph].op));
        }
    }
    return DISTIL_OK;
}

/* p grown by tp's regions, offsets into tp. */
static void distil_tp_fused_grow(distil_tp *tp, const distil_fused_shape *s, distil_fused_plan *p) {
    size_t off = distil_workspace_round(p->bytes);
    tp->own_stats = !distil_dptr_present(tp->stats);
    if (tp->own_stats) {
        tp->off_stats = off;
        off += distil_workspace_round((size_t)(8 * s->rows) * sizeof(double));
    }
    tp->want_gx = s->want_gx && tp->comm != NULL;
    if (tp->want_gx) {
        tp->off_gx = off;
        off += distil_workspace_round((size_t)(p->chunk_rows * s->hs) * sizeof(float));
    }
    p->bytes = off;
}

distil_status distil_tp_fused_plan(distil_ctx *ctx, distil_tp *tp, const distil_fused_shape *s,
                                   bool auto_chunk, distil_fused_plan *p) {
    if (ctx->be->tp == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "fused_linear_jsd_tp: backend '%s' has no vocabulary-parallel row "
                                "pass (docs/SPEC.md §8)",
                                ctx->be->name);
    }
    distil_fused_plan base = *p;
    distil_tp_fused_grow(tp, s, p);
    /* A chosen chunk fitted to a lent workspace without tp's regions: halve it until both fit,
     * with weight-gradient groups of one (groups are a speed choice; docs/DESIGN.md). */
    const size_t avail = distil_workspace_available(ctx);
    distil_fused_shape one = *s;
    one.gw_chunks = 1;
    while (auto_chunk && p->bytes > avail && base.chunk_rows > 1) {
        distil_chunk_plan(&one, base.chunk_rows / 2, &base);
        *p = base;
        distil_tp_fused_grow(tp, &one, p);
    }
    return DISTIL_OK;
}

void distil_tp_fused_bind(distil_tp *tp, distil_dptr workspace) {
    if (tp->own_stats) {
        tp->stats = distil_dptr_add(workspace, tp->off_stats);
    }
    tp->gx = tp->want_gx ? distil_dptr_add(workspace, tp->off_gx) : distil_dptr_make(NULL, 0);
}

/* ---------------------------------------------------------------- entry points */

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
    distil_tp tp;
    DISTIL_TRY(distil_tp_check(ctx, fn, shard, desc->vocab, phase < 0, &tp));
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
    return distil_fused_call(ctx, desc, &tp, in, labels, loss, grads);
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
    distil_tp tp = {.comm = &stand_in, .phase = -1};
    return distil_fused_workspace_call(ctx, desc, &tp, want_grads, bytes);
}

distil_status distil_fused_linear_jsd_tp_workspace_size(distil_ctx *ctx,
                                                        const distil_fused_linear_jsd_desc *desc,
                                                        int want_grads, size_t *bytes) {
    DISTIL_GUARDED(ctx, "fused_linear_jsd_tp_workspace_size",
                   distil_fused_tp_ws_run(ctx, desc, want_grads, bytes));
}
