/*
 * fused_loop.c - the chunk loop of the fused loss, see fused_loop.h. With C = the plan's chunk:
 *   n = max(1, valid rows), or the caller's N                count_valid (docs/SPEC.md §6)
 *   zs, zt of chunk 0                                        GEMM, the teacher's logits
 *   per chunk k:  [head_rows: scale / cap zs, zt in place, their LSEs (docs/SPEC.md §6)]
 *                 the row pass -> ce, soft (C) and G (C, V) into G's slot k mod K
 *                 grad_xs_k = G Ws;  gb (+)= 1^T G
 *                 the last chunk of a group of K: gw (+)= G^T xs over the group's rows
 *                 zs, zt of chunk k + 1
 *   cast the fp32 accumulators (several chunks only) to the output dtype (grad_Ws's not, where the
 *   backend's fused-cast GEMM writes the output itself: epilogue->cast_ok); the student's rows
 *   beyond the common vocabulary prefix V of grad_Ws / grad_bs = 0; loss = reduce(ce, soft)
 * K = the plan's gw_chunks (docs/DESIGN.md "Weight-gradient groups"): G of K chunks is kept so
 * that one grad_Ws GEMM of K C rows replaces K GEMMs of C, each a pass over the accumulator.
 * gw / gb are the workspace's fp32 accumulators, or the outputs themselves when there is one
 * group (chunk for gb; written in the output dtype, rounded once, beta = 0) or the dtype is F32.
 * The teacher's logits (zt) come from the call's teacher source and the row pass is the call's
 * row pass (fused_strategy.h): the loop calls them and knows neither which teacher nor which
 * parallelism. A backend with a second lane (side) computes chunk k + 1's logits there
 * while the stream runs chunk k's gradient GEMMs. The accumulation order over chunks and groups is
 * fixed, so results are reproducible.
 */
#include "fused_loop.h"

#include "divergence.h"
#include "error.h"
#include "fused_head.h"
#include "fused_logits.h"
#include "fused_stats.h"

/* Everything one chunk step needs, resolved once per call. */
typedef struct distil_fused_loop {
    distil_fused_view view; /* what the strategies see: ctx, a, p, stats */
    distil_ctx *ctx;
    const distil_backend *be;
    void *b;
    const distil_fused_args *a;
    const distil_fused_plan *p;
    const distil_teacher_source *t;
    const distil_fused_pass *pass;
    distil_dptr gw, gb; /* where grad_Ws / grad_bs go (absent: not wanted) */
    /* of gw, gb: F32 (accumulators), or the output dtype; they differ where one group of
     * grad_Ws holds every chunk while grad_bs still accumulates over chunks */
    distil_dtype gw_dtype, gb_dtype;
    size_t es;      /* bytes of an input element */
    bool grads;     /* any gradient wanted */
    bool head;      /* a head pass before each row pass (docs/SPEC.md §6, fused_head.c) */
    bool gw_direct; /* the last grad_Ws GEMM writes grad_Ws (distil_fused_gw_direct) */
} distil_fused_loop;

/* The row pass stops after its statistics (a split phase before the last): no gradients, no
 * loss. */
static bool distil_fused_stats_only(const distil_fused_loop *L) {
    return L->pass->ops->stats_only != NULL && L->pass->ops->stats_only(L->pass->self);
}

static distil_dptr distil_fused_at(const distil_fused_loop *L, size_t off) {
    return distil_fused_region(L->a, off);
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
    return distil_fused_at(L, p->off_g + slot * bytes);
}

/* The first failure: s, else t. */
static distil_status distil_fused_first(distil_status s, distil_status t) {
    return s != DISTIL_OK ? s : t;
}

/* The student's logits GEMM of rows [r0, r0 + c). */
static distil_status distil_fused_student_logits(const distil_fused_loop *L, int64_t r0,
                                                 int64_t c) {
    const distil_fused_linear l = distil_fused_student_linear(L->a);
    return distil_fused_logits_run(&L->view, &l, r0, c);
}

/* The teacher's logits of rows [r0, r0 + c), where its source has any. */
static distil_status distil_fused_teacher_logits(const distil_fused_loop *L, int64_t r0,
                                                 int64_t c) {
    const distil_teacher_ops *t = L->t->ops;
    return t->logits != NULL ? t->logits(&L->view, L->t->self, r0, c) : DISTIL_OK;
}

static distil_status distil_fused_logits(const distil_fused_loop *L, int64_t r0, int64_t c) {
    DISTIL_TRY(distil_fused_student_logits(L, r0, c));
    return distil_fused_teacher_logits(L, r0, c);
}

/* Per-row CE and soft part of the chunk, and G when gradients are wanted: the head pass, then the
 * call's row pass. */
static distil_status distil_fused_rows(const distil_fused_loop *L, int64_t r0, int64_t c) {
    const distil_fused_args *a = L->a;
    const distil_fused_plan *p = L->p;
    distil_fused_rows_args r = {
        .zs = distil_fused_at(L, p->off_zs),
        .zt = distil_fused_at(L, p->off_zt),
        .rows = c,
        .vocab = a->vocab,
        .labels = distil_dptr_add(a->labels, (size_t)r0 * sizeof(int64_t)),
        .ignore_index = a->ignore_index,
        .beta = a->beta,
        .inv_temperature = a->inv_temperature,
        .weight_hard = a->weight_hard,
        .weight_soft = a->weight_soft,
        .ce_rows = distil_fused_at(L, p->off_ce + (size_t)r0 * sizeof(float)),
        .soft_rows = distil_fused_at(L, p->off_soft + (size_t)r0 * sizeof(float)),
        .g = L->grads ? distil_fused_g(L, r0) : distil_dptr_make(NULL, 0),
        .g_dtype = p->g_dtype,
        .n_valid = distil_fused_at(L, p->off_n),
        .divergence = a->divergence,
        .alpha = a->alpha,
        .inv_teacher_temperature = a->inv_teacher_temperature,
        .dz = distil_fused_head_dz(a, p, L->grads && distil_fused_student_head(a)),
        .entropy = distil_dptr_present(a->student_entropy)
                       ? distil_dptr_add(a->student_entropy, (size_t)r0 * sizeof(float))
                       : a->student_entropy};
    if (L->view.stats) {
        r.zs_max = distil_fused_stats_plane(a, p, 0);
        r.zs_s1 = distil_fused_stats_plane(a, p, 1);
        r.zt_max = distil_fused_stats_plane(a, p, 2);
        r.zt_s1 = distil_fused_stats_plane(a, p, 3);
        r.stats_tiles = p->stats_tiles;
    }
    if (L->head) {
        DISTIL_TRY(distil_fused_head_pass(L->be, L->b, a, p, r.dz, r0, c));
    }
    return L->pass->ops->rows(&L->view, L->pass->self, &r, r0);
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
    const distil_fused_pass_ops *o = L->pass->ops;
    return o->grad_x != NULL ? o->grad_x(&L->view, L->pass->self, &m) : L->be->gemm(L->b, &m);
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
                          .a = distil_fused_at(L, L->p->off_ones),
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
    if (L->be->side == NULL || (L->t->ops->logits == NULL && L->p->g_in_place)) {
        /* (a teacher source without logits and G in place: nothing would move to the side lane) */
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
        s = distil_fused_student_logits(L, r0 + c, c1);
    }
    if (s == DISTIL_OK && c1 > 0 && !side) {
        s = distil_fused_teacher_logits(L, r0 + c, c1);
    }
    return side ? distil_fused_first(s, L->be->side->join(L->b)) : s;
}

/* Before the loop: the teacher source's prologue (first: it may refuse before any write), n on
 * the device, and the ones vector of the bias gradient. */
static distil_status distil_fused_prologue(const distil_fused_loop *L) {
    const distil_fused_args *a = L->a;
    if (L->t->ops->prologue != NULL) {
        DISTIL_TRY(L->t->ops->prologue(&L->view, L->t->self));
    }
    const distil_fused_pass_ops *o = L->pass->ops;
    distil_count_args c = {.labels = a->labels,
                           .rows = a->rows,
                           .ignore_index = a->ignore_index,
                           .vocab = o->label_vocab ? o->label_vocab(L->pass->self, a) : a->vocab,
                           .min_one = true,
                           .n_out = distil_fused_at(L, L->p->off_n)};
    DISTIL_TRY(distil_normaliser_put(L->ctx, &c, a->normaliser, a->normaliser_device));
    if (distil_dptr_present(L->gb)) {
        distil_fill_args f = {.dst = distil_fused_at(L, L->p->off_ones),
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
    distil_reduce_args r = {.a = distil_fused_at(L, p->off_ce),
                            .b = distil_fused_at(L, p->off_soft),
                            .count = a->rows,
                            .wa = a->weight_hard,
                            .wb = a->weight_soft,
                            .n_valid = distil_fused_at(L, p->off_n),
                            .parts = a->return_parts,
                            .out = a->loss};
    DISTIL_TRY(distil_fused_head_zero_tail(L->be, L->b, a));
    return L->be->reduce(L->b, &r);
}

distil_status distil_fused_loop_run(distil_ctx *ctx, const distil_fused_args *a,
                                    const distil_fused_plan *p, const distil_teacher_source *t,
                                    const distil_fused_pass *pass) {
    const distil_backend *be = ctx->be;
    if (!pass->ops->ready(be)) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "fused_linear_jsd: backend '%s' lacks the row pass's kernel",
                                be->name);
    }
    distil_fused_loop L = {.ctx = ctx, .be = be, .b = ctx->b, .a = a, .p = p, .t = t, .pass = pass};
    L.head = distil_fused_head_needed(a);
    L.es = distil_dtype_size(a->dtype);
    L.gw = p->gw_acc ? distil_fused_at(&L, p->off_gw) : a->grad_ws;
    L.gb = p->gb_acc ? distil_fused_at(&L, p->off_gb) : a->grad_bs;
    L.gw_dtype = p->gw_acc ? DISTIL_F32 : distil_fused_gw_dtype(a);
    L.gb_dtype = p->gb_acc ? DISTIL_F32 : distil_fused_gw_dtype(a);
    L.grads =
        distil_dptr_present(a->grad_xs) || distil_dptr_present(L.gw) || distil_dptr_present(L.gb);
    /* planned for (stats_tiles), and the backend takes this call's pointers too */
    /* (chunk 0's pointers: every chunk's rows start at a multiple of the hidden size, so what
     * the alignment allows for the first holds for all) */
    const bool stats =
        p->stats_tiles > 0 && distil_fused_stats_ask(ctx, a, t, p, distil_fused_chunk_len(&L, 0));
    L.view = (distil_fused_view){.ctx = ctx, .a = a, .p = p, .stats = stats};
    L.gw_direct = distil_fused_gw_direct(&L);
    DISTIL_TRY(distil_fused_prologue(&L));
    DISTIL_TRY(distil_fused_logits(&L, 0, distil_fused_chunk_len(&L, 0)));
    for (int64_t r0 = 0; r0 < a->rows; r0 += p->chunk_rows) {
        DISTIL_TRY(distil_fused_step(&L, r0));
    }
    return distil_fused_epilogue(&L);
}
