/*
 * fused_pass_tp.c - the row pass of the fused loss on a vocabulary shard (docs/SPEC.md §8): the
 * plan's extra regions, and the phased row pass that the chunk loop (fused_loop.c) runs in place
 * of fused_rows. Per chunk of C rows:
 *   TP_MAX    -> all-reduce max  of (C, 2) f64   row maxima of zs, zt
 *   TP_SUMS   -> all-reduce sum  of (C, 3) f64   sum exp of zs / tau, zt / tau, zs
 *   TP_TERMS  -> all-reduce sum  of (C, 3) f64   zs[label] - m (owner), sum e, sum de/dx
 *   TP_FINISH                                    ce, soft rows and G, local
 * and the chunk's grad_xs partial (C, Hs) f32 all-reduced before it is rounded. Labels are
 * global ids (checked against vocab_total); a split phase before FINISH writes only the
 * statistics.
 */
#include "fused_sources.h"

#include "error.h"
#include "workspace.h"

/* The statistics of rows [r0, ...) of a call of `rows` rows: (rows, 2) maxima, then (rows, 3)
 * sums, then (rows, 3) terms, each block contiguous so that a chunk's piece is one all-reduce. */
static const struct {
    int64_t width, before; /* doubles per row; rows-blocks before this one, in doubles per row */
    distil_comm_op op;
} distil_tp_stat[3] = {{2, 0, DISTIL_COMM_MAX}, {3, 2, DISTIL_COMM_SUM}, {3, 5, DISTIL_COMM_SUM}};

static distil_dptr distil_tp_stat_at(const distil_fused_tp *tp, int k, int64_t rows, int64_t r0) {
    size_t doubles = (size_t)(distil_tp_stat[k].before * rows + distil_tp_stat[k].width * r0);
    return distil_dptr_add(tp->stats, doubles * sizeof(double));
}

static bool distil_fused_pass_tp_ready(const distil_backend *be) {
    return be->tp != NULL;
}

/* Chunk [r0, r0 + r->rows): the phases of tp (all, or the split phase's one) with the all-reduces
 * between them. r is the chunk's fused_rows arguments (its vocab the rank's width). */
static distil_status distil_fused_pass_tp_rows(const distil_fused_view *view, const void *self,
                                               const distil_fused_rows_args *r, int64_t r0) {
    const distil_fused_tp *tp = self;
    distil_ctx *ctx = view->ctx;
    const int64_t rows = view->a->rows;
    distil_tp_rows_args t = {.zs = r->zs,
                             .zt = r->zt,
                             .rows = r->rows,
                             .vocab = r->vocab,
                             .vocab_offset = tp->shard.offset,
                             .vocab_total = tp->shard.total,
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
                             .soft_rows = r->soft_rows,
                             .g = r->g,
                             .g_dtype = r->g_dtype,
                             .n_valid = r->n_valid};
    for (int ph = DISTIL_TP_MAX; ph <= DISTIL_TP_FINISH; ph++) {
        if (tp->phase >= 0 && ph != tp->phase) {
            continue;
        }
        t.phase = (distil_tp_phase)ph;
        DISTIL_TRY(ctx->be->tp->tp_rows(ctx->b, &t));
        if (ph != DISTIL_TP_FINISH && tp->shard.comm != NULL) {
            DISTIL_TRY(distil_comm_allreduce(
                ctx, tp->shard.comm, distil_tp_stat_at(tp, ph, rows, r0),
                distil_tp_stat[ph].width * r->rows, DISTIL_COMM_F64, distil_tp_stat[ph].op));
        }
    }
    return DISTIL_OK;
}

/* grad_xs of a chunk: the rank's fp32 partial, summed over the ranks, then rounded once (without
 * a partial: the GEMM as it is). */
static distil_status distil_fused_pass_tp_grad_x(const distil_fused_view *view, const void *self,
                                                 const distil_gemm_args *m) {
    const distil_fused_tp *tp = self;
    distil_ctx *ctx = view->ctx;
    if (!distil_dptr_present(tp->gx)) {
        return ctx->be->gemm(ctx->b, m);
    }
    distil_gemm_args g = *m;
    g.c_dtype = DISTIL_F32;
    g.c = tp->gx;
    DISTIL_TRY(ctx->be->gemm(ctx->b, &g));
    DISTIL_TRY(distil_comm_allreduce(ctx, tp->shard.comm, g.c, m->m * m->n, DISTIL_COMM_F32,
                                     DISTIL_COMM_SUM));
    distil_cast_args k = {.src = tp->gx,
                          .dst = m->c,
                          .src_dtype = DISTIL_F32,
                          .dst_dtype = m->c_dtype,
                          .count = m->m * m->n};
    return ctx->be->cast(ctx->b, &k);
}

static int64_t distil_fused_pass_tp_label_vocab(const void *self, const distil_fused_args *a) {
    (void)a;
    return ((const distil_fused_tp *)self)->shard.total; /* labels are global */
}

static bool distil_fused_pass_tp_stats_only(const void *self) {
    const distil_fused_tp *tp = self;
    return tp->phase >= 0 && tp->phase != DISTIL_TP_FINISH;
}

/* p grown by tp's regions, offsets into tp. */
static void distil_tp_fused_grow(distil_fused_tp *tp, const distil_fused_shape *s,
                                 distil_fused_plan *p) {
    size_t off = distil_workspace_round(p->bytes);
    tp->own_stats = !distil_dptr_present(tp->stats);
    if (tp->own_stats) {
        tp->off_stats = off;
        off += distil_workspace_round((size_t)(8 * s->rows) * sizeof(double));
    }
    tp->want_gx = s->want_gx && tp->shard.comm != NULL;
    if (tp->want_gx) {
        tp->off_gx = off;
        off += distil_workspace_round((size_t)(p->chunk_rows * s->hs) * sizeof(float));
    }
    p->bytes = off;
}

/* The plan p grown by tp's regions, its chunk halved while it does not fit a lent workspace when
 * the chunk is the library's choice (auto_chunk); UNSUPPORTED when the backend has no tp_rows op.
 */
static distil_status distil_fused_pass_tp_plan(distil_ctx *ctx, void *self,
                                               const distil_fused_shape *s, bool auto_chunk,
                                               distil_fused_plan *p) {
    distil_fused_tp *tp = self;
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

/* tp's regions in the acquired workspace. */
static void distil_fused_pass_tp_bind(void *self, distil_dptr workspace) {
    distil_fused_tp *tp = self;
    if (tp->own_stats) {
        tp->stats = distil_dptr_add(workspace, tp->off_stats);
    }
    tp->gx = tp->want_gx ? distil_dptr_add(workspace, tp->off_gx) : distil_dptr_make(NULL, 0);
}

static const distil_fused_pass_ops distil_fused_pass_tp_ops = {
    .ready = distil_fused_pass_tp_ready,
    .plan = distil_fused_pass_tp_plan,
    .bind = distil_fused_pass_tp_bind,
    .rows = distil_fused_pass_tp_rows,
    .grad_x = distil_fused_pass_tp_grad_x,
    .label_vocab = distil_fused_pass_tp_label_vocab,
    .stats_only = distil_fused_pass_tp_stats_only,
};

distil_fused_pass distil_fused_pass_tp(distil_fused_tp *tp) {
    const distil_fused_pass p = {.ops = &distil_fused_pass_tp_ops, .self = tp};
    return p;
}
