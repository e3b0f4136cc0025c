/*
 * fused_loop.c - the chunk loop of the fused loss, see fused_loop.h. With C = the plan's chunk:
 *   n = max(1, valid rows), or the caller's N                count_valid (docs/SPEC.md §6)
 *   zs, zt of chunk 0                                        two GEMMs, (C, V) fp32
 *   per chunk k:  [head_rows: scale / cap zs, zt in place, their LSEs (docs/SPEC.md §6)]
 *                 fused_rows -> ce, jsd (C) and G (C, V) into G's slot k mod K
 *                 grad_xs_k = G Ws;  gb (+)= 1^T G
 *                 the last chunk of a group of K: gw (+)= G^T xs over the group's rows
 *                 zs, zt of chunk k + 1
 *   cast the fp32 accumulators (several chunks only) to the output dtype (grad_Ws's not, where the
 *   backend's fused-cast GEMM writes the output itself: epilogue->cast_ok); the student's rows
 *   beyond the common vocabulary prefix V of grad_Ws / grad_bs = 0; loss = reduce(ce, jsd)
 * K = the plan's gw_chunks (docs/DESIGN.md "Weight-gradient groups"): G of K chunks is kept so
 * that one grad_Ws GEMM of K C rows replaces K GEMMs of C, each a pass over the accumulator.
 * gw / gb are the workspace's fp32 accumulators, or the outputs themselves when there is one
 * group (chunk for gb; written in the output dtype, rounded once, beta = 0) or the dtype is F32.
 * With a cached top-k teacher (docs/SPEC.md §7, args.topk) the teacher side is its ids and
 * log-probs instead of zt: no teacher GEMM, and topk_rows instead of fused_rows. With the fp8
 * teacher head (docs/SPEC.md §6, args.teacher_fp8) Wt is quantised once before the loop and each
 * chunk's zt comes from quant_rows of its xt and gemm_e4m3 (fused_fp8.c). A backend with a second
 * lane (side) computes chunk k + 1's logits there while the stream runs chunk k's gradient
 * GEMMs. The accumulation order over chunks and groups is fixed, so results are reproducible.
 */
#include "fused_loop.h"

#include "divergence.h"
#include "error.h"
#include "fused_fp8.h"
#include "fused_head.h"
#include "tp.h"

/* Everything one chunk step needs, resolved once per call. */
typedef struct distil_fused_loop {
    distil_ctx *ctx;
    const distil_backend *be;
    void *b;
    const distil_fused_args *a;
    const distil_fused_plan *p;
    distil_dptr gw, gb; /* where grad_Ws / grad_bs go (absent: not wanted) */
    /* of gw, gb: F32 (accumulators), or the output dtype; they differ where one group of
     * grad_Ws holds every chunk while grad_bs still accumulates over chunks */
    distil_dtype gw_dtype, gb_dtype;
    size_t es;           /* bytes of an input element */
    bool grads;          /* any gradient wanted */
    bool head;           /* a head pass before each row pass (docs/SPEC.md §6, fused_head.c) */
    bool stats;          /* row statistics from the logits GEMMs (distil_fused_stats_wanted) */
    bool gw_direct;      /* the last grad_Ws GEMM writes grad_Ws (distil_fused_gw_direct) */
    const distil_tp *tp; /* vocabulary shard (docs/SPEC.md §8), or NULL */
} distil_fused_loop;

/* A split phase of a vocabulary-parallel call that stops before FINISH: statistics only. */
static bool distil_fused_stats_only(const distil_fused_loop *L) {
    return L->tp != NULL && L->tp->phase >= 0 && L->tp->phase != DISTIL_TP_FINISH;
}

static distil_dptr distil_fused_ws(const distil_fused_loop *L, size_t off) {
    return distil_dptr_add(L->a->workspace, off);
}

/* Rows of the chunk that starts at r0 (0 past the end). */
static int64_t distil_fused_chunk_len(const distil_fused_loop *L, int64_t r0) {
    const int64_t left = L->a->rows - r0;
    return left <= 0 ? 0 : (left < L->p->chunk_rows ? left : L->p->chunk_rows);
}

/* G of the chunk that starts at r0: its slot of the plan's gw_chunks, (C, V) g_dtype each. */
static distil_dptr distil_fused_g(const distil_fused_loop *L, int64_t r0) {
    const distil_fused_plan *p = L->p;
    const size_t slot = (size_t)((r0 / p->chunk_rows) % p->gw_chunks);
    const size_t bytes =
        (size_t)p->chunk_rows * (size_t)L->a->vocab * distil_dtype_size(p->g_dtype);
    return distil_fused_ws(L, p->off_g + slot * bytes);
}

/* The first failure: s, else t. */
static distil_status distil_fused_first(distil_status s, distil_status t) {
    return s != DISTIL_OK ? s : t;
}

/* Plane i of the row statistics in plan p's workspace: 0, 1 the maxima and sums of zs, 2, 3 of
 * zt. */
static distil_dptr distil_fused_stats_plane(const distil_fused_args *a, const distil_fused_plan *p,
                                            int i) {
    return distil_dptr_add(a->workspace, p->off_stats + (size_t)i * p->stats_plane * sizeof(float));
}

/* The GEMM zs = xs_c Ws^T + bs (student) or zt = xt_c Wt^T + bt (teacher) of rows [r0, r0 + c),
 * into plan p's workspace. */
static distil_gemm_args distil_fused_logits_gemm(const distil_fused_args *a,
                                                 const distil_fused_plan *p, int64_t r0, int64_t c,
                                                 bool teacher) {
    const int64_t h = teacher ? a->ht : a->hs;
    const size_t es = distil_dtype_size(a->dtype);
    distil_gemm_args g = {.trans_b = true,
                          .m = c,
                          .n = a->vocab,
                          .k = h,
                          .alpha = 1.0f,
                          .a_dtype = a->dtype,
                          .b_dtype = a->dtype,
                          .c_dtype = DISTIL_F32,
                          .a = distil_dptr_add(teacher ? a->xt : a->xs, (size_t)(r0 * h) * es),
                          .lda = h,
                          .b = teacher ? a->wt : a->ws,
                          .ldb = h,
                          .c = distil_dptr_add(a->workspace, teacher ? p->off_zt : p->off_zs),
                          .ldc = a->vocab,
                          .bias = teacher ? a->bt : a->bs};
    return g;
}

/* The logits GEMM with its row statistics into p's planes (docs/DESIGN.md "Row statistics from
 * the logits GEMM"). */
static distil_gemm_stats_args distil_fused_logits_stats(const distil_fused_args *a,
                                                        const distil_fused_plan *p, int64_t r0,
                                                        int64_t c, bool teacher) {
    const float log2e = 1.4426950408889634f;
    const distil_gemm_stats_args g = {
        .gemm = distil_fused_logits_gemm(a, p, r0, c, teacher),
        .max = distil_fused_stats_plane(a, p, teacher ? 2 : 0),
        .s1 = distil_fused_stats_plane(a, p, teacher ? 3 : 1),
        .c1 = log2e * (teacher ? a->inv_teacher_temperature : a->inv_temperature)};
    return g;
}

/* Whether be's statistics GEMM takes both logits GEMMs of the chunk at r0 (c rows). */
static bool distil_fused_stats_ask(const distil_backend *be, void *b, const distil_fused_args *a,
                                   const distil_fused_plan *p, int64_t c) {
    const distil_gemm_stats_args s = distil_fused_logits_stats(a, p, 0, c, false);
    const distil_gemm_stats_args t = distil_fused_logits_stats(a, p, 0, c, true);
    return be->epilogue->stats_ok(b, &s) && be->epilogue->stats_ok(b, &t);
}

/* The statistics GEMM's question about one of the call's logits GEMMs, before the plan. */
static bool distil_fused_stats_fit(const distil_backend *be, void *b, const distil_fused_args *a,
                                   bool teacher, bool grads) {
    const distil_gemm_stats_shape s = {.m = a->rows,
                                       .n = a->vocab,
                                       .k = teacher ? a->ht : a->hs,
                                       .dtype = a->dtype,
                                       .grads = grads};
    return be->epilogue->stats_fit(b, &s);
}

bool distil_fused_stats_wanted(const distil_ctx *ctx, const distil_fused_args *a, bool grads) {
    const distil_backend *be = ctx->be;
    /* the student's entropy (docs/SPEC.md §6) is summed by the row kernels that read the rows */
    if (be->epilogue == NULL || be->epilogue->gemm_stats == NULL || a->topk != NULL ||
        a->teacher_fp8 || distil_fused_head_needed(a) || distil_dptr_present(a->student_entropy)) {
        return false;
    }
    return distil_fused_stats_fit(be, ctx->b, a, false, grads) &&
           distil_fused_stats_fit(be, ctx->b, a, true, grads);
}

static distil_status distil_fused_logits_of(const distil_fused_loop *L, int64_t r0, int64_t c,
                                            bool teacher) {
    if (L->stats) {
        const distil_gemm_stats_args g = distil_fused_logits_stats(L->a, L->p, r0, c, teacher);
        return L->be->epilogue->gemm_stats(L->b, &g);
    }
    const distil_gemm_args g = distil_fused_logits_gemm(L->a, L->p, r0, c, teacher);
    return L->be->gemm(L->b, &g);
}

/* The teacher's logits GEMM: only with a dense teacher head (a cached top-k teacher, docs/SPEC.md
 * §7, has none). */
static distil_status distil_fused_teacher_logits(const distil_fused_loop *L, int64_t r0,
                                                 int64_t c) {
    if (L->a->teacher_fp8) { /* docs/SPEC.md §6 fp8 teacher head (fused_fp8.c) */
        return distil_fused_fp8_logits(L->be, L->b, L->a, L->p, r0, c);
    }
    return L->a->topk != NULL ? DISTIL_OK : distil_fused_logits_of(L, r0, c, true);
}

static distil_status distil_fused_logits(const distil_fused_loop *L, int64_t r0, int64_t c) {
    DISTIL_TRY(distil_fused_logits_of(L, r0, c, false));
    return distil_fused_teacher_logits(L, r0, c);
}

/* The row pass of a cached top-k teacher (docs/SPEC.md §7): the teacher's rows of the chunk. */
static distil_status distil_fused_topk_rows(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const distil_fused_args *a = L->a;
    const distil_fused_plan *p = L->p;
    distil_topk_teacher t = *a->topk;
    const size_t slots = (size_t)(r0 * t.k);
    t.ids = distil_dptr_add(t.ids, slots * (t.ids_i64 ? 8u : 4u));
    t.logp = distil_dptr_add(t.logp, slots * distil_dtype_size(t.logp_dtype));
    distil_topk_rows_args r = {
        .x = distil_fused_ws(L, p->off_zs),
        .x_stride = a->vocab,
        .x_dtype = DISTIL_F32,
        .logits = true,
        .t = t,
        .rows = c,
        .vocab = a->vocab,
        .row0 = r0,
        .labels = distil_dptr_add(a->labels, (size_t)r0 * sizeof(int64_t)),
        .ignore_index = a->ignore_index,
        .beta = a->beta,
        .inv_temperature = a->inv_temperature,
        .weight_hard = a->weight_hard,
        .weight_soft = a->weight_soft,
        .ce_rows = distil_fused_ws(L, p->off_ce + (size_t)r0 * sizeof(float)),
        .soft_rows = distil_fused_ws(L, p->off_jsd + (size_t)r0 * sizeof(float)),
        .g = L->grads ? distil_fused_g(L, r0) : distil_dptr_make(NULL, 0),
        .g_dtype = p->g_dtype,
        .g_stride = a->vocab,
        .n_valid = distil_fused_ws(L, p->off_n),
        .divergence = a->divergence,
        .alpha = a->alpha};
    return L->be->topk_rows(L->b, &r);
}

/* Per-row CE / JSD of the chunk, and G when gradients are wanted. */
static distil_status distil_fused_rows(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const distil_fused_args *a = L->a;
    const distil_fused_plan *p = L->p;
    if (a->topk != NULL) {
        return distil_fused_topk_rows(L, r0, c);
    }
    distil_fused_rows_args r = {
        .zs = distil_fused_ws(L, p->off_zs),
        .zt = distil_fused_ws(L, p->off_zt),
        .rows = c,
        .vocab = a->vocab,
        .labels = distil_dptr_add(a->labels, (size_t)r0 * sizeof(int64_t)),
        .ignore_index = a->ignore_index,
        .beta = a->beta,
        .inv_temperature = a->inv_temperature,
        .weight_hard = a->weight_hard,
        .weight_soft = a->weight_soft,
        .ce_rows = distil_fused_ws(L, p->off_ce + (size_t)r0 * sizeof(float)),
        .jsd_rows = distil_fused_ws(L, p->off_jsd + (size_t)r0 * sizeof(float)),
        .g = L->grads ? distil_fused_g(L, r0) : distil_dptr_make(NULL, 0),
        .g_dtype = p->g_dtype,
        .n_valid = distil_fused_ws(L, p->off_n),
        .divergence = a->divergence,
        .alpha = a->alpha,
        .inv_teacher_temperature = a->inv_teacher_temperature,
        .dz = distil_fused_head_dz(a, p, L->grads && distil_fused_student_head(a)),
        .entropy = distil_dptr_present(a->student_entropy)
                       ? distil_dptr_add(a->student_entropy, (size_t)r0 * sizeof(float))
                       : a->student_entropy};
    if (L->stats) {
        r.zs_max = distil_fused_stats_plane(a, p, 0);
        r.zs_s1 = distil_fused_stats_plane(a, p, 1);
        r.zt_max = distil_fused_stats_plane(a, p, 2);
        r.zt_s1 = distil_fused_stats_plane(a, p, 3);
        r.stats_tiles = p->stats_tiles;
    }
    if (L->head) {
        DISTIL_TRY(distil_fused_head_pass(L->be, L->b, a, p, r.dz, r0, c));
    }
    if (L->tp != NULL) {
        return distil_tp_fused_rows(L->ctx, L->tp, &r, a->rows, r0);
    }
    return L->be->fused_rows(L->b, &r);
}

/* grad_xs_c = G Ws (c, Hs), in the output dtype. */
static distil_status distil_fused_grad_x(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const distil_fused_args *a = L->a;
    distil_gemm_args m = {.m = c,
                          .n = a->hs,
                          .k = a->vocab,
                          .alpha = 1.0f,
                          .a_dtype = L->p->g_dtype,
                          .b_dtype = a->dtype,
                          .c_dtype = a->dtype,
                          .a = distil_fused_g(L, r0),
                          .lda = a->vocab,
                          .b = a->ws,
                          .ldb = a->hs,
                          .c = distil_dptr_add(a->grad_xs, (size_t)(r0 * a->hs) * L->es),
                          .ldc = a->hs};
    if (L->tp == NULL || !distil_dptr_present(L->tp->gx)) {
        return L->be->gemm(L->b, &m);
    }
    /* Vocabulary parallel: the rank's fp32 partial, summed over the ranks, then rounded once. */
    m.c_dtype = DISTIL_F32;
    m.c = L->tp->gx;
    DISTIL_TRY(L->be->gemm(L->b, &m));
    DISTIL_TRY(distil_comm_allreduce(L->ctx, L->tp->comm, m.c, c * a->hs, DISTIL_COMM_F32,
                                     DISTIL_COMM_SUM));
    distil_cast_args k = {.src = L->tp->gx,
                          .dst = distil_dptr_add(a->grad_xs, (size_t)(r0 * a->hs) * L->es),
                          .src_dtype = DISTIL_F32,
                          .dst_dtype = a->dtype,
                          .count = c * a->hs};
    return L->be->cast(L->b, &k);
}

/* The first row of the weight-gradient group that holds the chunk starting at r0 (its G is in
 * slot 0: a group's slots are its rows in order, (rows, V) with leading dimension V). */
static int64_t distil_fused_group_start(const distil_fused_loop *L, int64_t r0) {
    const int64_t span = L->p->chunk_rows * L->p->gw_chunks;
    return r0 / span * span;
}

/* gw (V, Hs) (+)= G^T xs over the group's rows [g0, g0 + k); the first group overwrites. */
static distil_gemm_args distil_fused_grad_w_args(const distil_fused_loop *L, int64_t g0,
                                                 int64_t k) {
    const distil_fused_args *a = L->a;
    distil_gemm_args m = {.trans_a = true,
                          .m = a->vocab,
                          .n = a->hs,
                          .k = k,
                          .alpha = 1.0f,
                          .beta = g0 == 0 ? 0.0f : 1.0f,
                          .a_dtype = L->p->g_dtype,
                          .b_dtype = a->dtype,
                          .c_dtype = L->gw_dtype,
                          .a = distil_fused_g(L, g0),
                          .lda = a->vocab,
                          .b = distil_dptr_add(a->xs, (size_t)(g0 * a->hs) * L->es),
                          .ldb = a->hs,
                          .c = L->gw,
                          .ldc = a->hs};
    return m;
}

/* The last group's GEMM with its sum going to grad_Ws in the output dtype (the fused-cast GEMM)
 * instead of back into gw. */
static distil_gemm_cast_args distil_fused_grad_w_cast(const distil_fused_loop *L, int64_t g0,
                                                      int64_t k) {
    const distil_gemm_cast_args m = {
        .gemm = distil_fused_grad_w_args(L, g0, k), .d = L->a->grad_ws, .d_dtype = L->a->dtype};
    return m;
}

/* grad_Ws's GEMM after chunk [r0, r0 + c): only when it ends its group (or the call). */
static distil_status distil_fused_grad_w(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const bool last = r0 + c >= L->a->rows;
    const int64_t g0 = distil_fused_group_start(L, r0);
    if (!last && r0 + c < g0 + L->p->chunk_rows * L->p->gw_chunks) {
        return DISTIL_OK; /* G stays in its slot for the group's GEMM */
    }
    if (L->gw_direct && last) {
        const distil_gemm_cast_args m = distil_fused_grad_w_cast(L, g0, r0 + c - g0);
        return L->be->epilogue->gemm_cast(L->b, &m);
    }
    const distil_gemm_args m = distil_fused_grad_w_args(L, g0, r0 + c - g0);
    return L->be->gemm(L->b, &m);
}

/* Whether the last chunk's grad_Ws GEMM writes grad_Ws in the output dtype itself (the backend's
 * fused-cast GEMM), so that the fp32 accumulator needs no cast pass after the loop. */
static bool distil_fused_gw_direct(const distil_fused_loop *L) {
    const distil_backend_epilogue *e = L->be->epilogue;
    if (!L->p->gw_acc || e == NULL || e->cast_ok == NULL || distil_fused_stats_only(L)) {
        return false;
    }
    const int64_t g0 = distil_fused_group_start(L, L->a->rows - 1);
    const distil_gemm_cast_args m = distil_fused_grad_w_cast(L, g0, L->a->rows - g0);
    return e->cast_ok(L->b, &m);
}

/* gb (1, V) (+)= 1^T G; the first chunk overwrites. */
static distil_status distil_fused_grad_b(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const distil_fused_args *a = L->a;
    distil_gemm_args m = {.m = 1,
                          .n = a->vocab,
                          .k = c,
                          .alpha = 1.0f,
                          .beta = r0 == 0 ? 0.0f : 1.0f,
                          .a_dtype = a->dtype,
                          .b_dtype = L->p->g_dtype,
                          .c_dtype = L->gb_dtype,
                          .a = distil_fused_ws(L, L->p->off_ones),
                          .lda = c,
                          .b = distil_fused_g(L, r0),
                          .ldb = a->vocab,
                          .c = L->gb,
                          .ldc = a->vocab};
    return L->be->gemm(L->b, &m);
}

/* The gradient GEMMs of chunk [r0, r0 + c). */
static distil_status distil_fused_backward(const distil_fused_loop *L, int64_t r0, int64_t c) {
    if (distil_dptr_present(L->a->grad_xs)) {
        DISTIL_TRY(distil_fused_grad_x(L, r0, c));
    }
    if (distil_dptr_present(L->gw)) {
        DISTIL_TRY(distil_fused_grad_w(L, r0, c));
    }
    if (distil_dptr_present(L->gb)) {
        DISTIL_TRY(distil_fused_grad_b(L, r0, c));
    }
    return DISTIL_OK;
}

/*
 * The next chunk's logits on the side lane, when the backend has one (*opened). Safe beside this
 * chunk's gradient GEMMs: the logits GEMMs write only zs and zt (which the row pass has finished
 * reading) and read only the call's inputs, none of which the gradient GEMMs write; those read G,
 * xs, Ws and the ones vector, none of which the logits GEMMs write. With G in place in zs only
 * the teacher's GEMM moves; the student's runs on the stream after the gradients.
 */
static distil_status distil_fused_side_logits(const distil_fused_loop *L, int64_t r1, int64_t c1,
                                              bool *opened) {
    *opened = false;
    if (L->be->side == NULL || (L->a->topk != NULL && L->p->g_in_place)) {
        /* (a top-k teacher with G in place: nothing would move to the side lane) */
        return DISTIL_OK;
    }
    distil_status s = L->be->side->begin(L->b, opened);
    if (!*opened) {
        return s;
    }
    if (s == DISTIL_OK) {
        s = L->p->g_in_place ? distil_fused_teacher_logits(L, r1, c1)
                             : distil_fused_logits(L, r1, c1);
    }
    return distil_fused_first(s, L->be->side->end(L->b));
}

/* Chunk [r0, r0 + c): its row pass and gradient GEMMs, then the next chunk's logits (beside the
 * gradients on the side lane, where there is one). An opened side lane is joined before this
 * returns, failure or not (a captured stream must end joined). */
static distil_status distil_fused_step(const distil_fused_loop *L, int64_t r0) {
    const int64_t c = distil_fused_chunk_len(L, r0);
    const int64_t c1 = distil_fused_chunk_len(L, r0 + c);
    DISTIL_TRY(distil_fused_rows(L, r0, c));
    bool side = false;
    distil_status s = DISTIL_OK;
    if (c1 > 0 && L->grads) {
        s = distil_fused_side_logits(L, r0 + c, c1, &side);
    }
    if (s == DISTIL_OK && L->grads && !distil_fused_stats_only(L)) {
        s = distil_fused_backward(L, r0, c);
    }
    if (s == DISTIL_OK && c1 > 0 && !(side && !L->p->g_in_place)) {
        s = distil_fused_logits_of(L, r0 + c, c1, false);
    }
    if (s == DISTIL_OK && c1 > 0 && !side) {
        s = distil_fused_teacher_logits(L, r0 + c, c1);
    }
    return side ? distil_fused_first(s, L->be->side->join(L->b)) : s;
}

/* Before the loop: n on the device, and the ones vector of the bias gradient. */
static distil_status distil_fused_prologue(const distil_fused_loop *L) {
    const distil_fused_args *a = L->a;
    if (a->teacher_fp8) { /* first: a device without fp8 refuses here, before any write */
        DISTIL_TRY(distil_fused_fp8_weights(L->be, L->b, a, L->p));
    }
    distil_count_args c = {.labels = a->labels,
                           .rows = a->rows,
                           .ignore_index = a->ignore_index,
                           .vocab = L->tp ? L->tp->total : a->vocab, /* labels are global */
                           .min_one = true,
                           .n_out = distil_fused_ws(L, L->p->off_n)};
    DISTIL_TRY(distil_normaliser_put(L->ctx, &c, a->normaliser, a->normaliser_device));
    if (a->sum_reduction) { /* N = 1 (docs/SPEC.md §7); the labels were checked above */
        distil_fill_args one = {.dst = c.n_out, .dtype = DISTIL_F32, .count = 1, .value = 1.0f};
        DISTIL_TRY(L->be->fill(L->b, &one));
    }
    if (distil_dptr_present(L->gb)) {
        distil_fill_args f = {.dst = distil_fused_ws(L, L->p->off_ones),
                              .dtype = a->dtype,
                              .count = L->p->chunk_rows,
                              .value = 1.0f};
        DISTIL_TRY(L->be->fill(L->b, &f));
    }
    return DISTIL_OK;
}

/* After the loop: the accumulators to the output dtype, then the scalar loss. */
static distil_status distil_fused_epilogue(const distil_fused_loop *L) {
    const distil_fused_args *a = L->a;
    const distil_fused_plan *p = L->p;
    if (distil_fused_stats_only(L)) {
        return DISTIL_OK;
    }
    distil_cast_args c = {.src_dtype = DISTIL_F32, .dst_dtype = a->dtype};
    if (p->gw_acc && !L->gw_direct) {
        c.src = L->gw;
        c.dst = a->grad_ws;
        c.count = a->vocab * a->hs;
        DISTIL_TRY(L->be->cast(L->b, &c));
    }
    if (p->gb_acc) {
        c.src = L->gb;
        c.dst = a->grad_bs;
        c.count = a->vocab;
        DISTIL_TRY(L->be->cast(L->b, &c));
    }
    distil_reduce_args r = {.a = distil_fused_ws(L, p->off_ce),
                            .b = distil_fused_ws(L, p->off_jsd),
                            .count = a->rows,
                            .wa = a->weight_hard,
                            .wb = a->weight_soft,
                            .n_valid = distil_fused_ws(L, p->off_n),
                            .parts = a->return_parts,
                            .out = a->loss};
    DISTIL_TRY(distil_fused_head_zero_tail(L->be, L->b, a));
    return L->be->reduce(L->b, &r);
}

distil_status distil_fused_loop_run(distil_ctx *ctx, const distil_fused_args *a,
                                    const distil_fused_plan *p) {
    return distil_fused_loop_run_tp(ctx, a, p, NULL);
}

distil_status distil_fused_loop_run_tp(distil_ctx *ctx, const distil_fused_args *a,
                                       const distil_fused_plan *p, const distil_tp *tp) {
    const distil_backend *be = ctx->be;
    distil_fused_loop L = {.ctx = ctx, .be = be, .b = ctx->b, .a = a, .p = p, .tp = tp};
    L.head = distil_fused_head_needed(a);
    L.es = distil_dtype_size(a->dtype);
    L.gw = p->gw_acc ? distil_fused_ws(&L, p->off_gw) : a->grad_ws;
    L.gb = p->gb_acc ? distil_fused_ws(&L, p->off_gb) : a->grad_bs;
    L.gw_dtype = p->gw_acc ? DISTIL_F32 : distil_fused_gw_dtype(a);
    L.gb_dtype = p->gb_acc ? DISTIL_F32 : distil_fused_gw_dtype(a);
    L.grads =
        distil_dptr_present(a->grad_xs) || distil_dptr_present(L.gw) || distil_dptr_present(L.gb);
    /* planned for (stats_tiles), and the backend takes this call's pointers too */
    /* (chunk 0's pointers: every chunk's rows start at a multiple of the hidden size, so what
     * the alignment allows for the first holds for all) */
    L.stats = tp == NULL && p->stats_tiles > 0 &&
              distil_fused_stats_ask(be, L.b, a, p, distil_fused_chunk_len(&L, 0));
    L.gw_direct = distil_fused_gw_direct(&L);
    DISTIL_TRY(distil_fused_prologue(&L));
    DISTIL_TRY(distil_fused_logits(&L, 0, distil_fused_chunk_len(&L, 0)));
    for (int64_t r0 = 0; r0 < a->rows; r0 += p->chunk_rows) {
        DISTIL_TRY(distil_fused_step(&L, r0));
    }
    return distil_fused_epilogue(&L);
}
