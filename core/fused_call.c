/* fused_call.c - see fused_call.h. */
#include "fused_call.h"

#include "error.h"
#include "fused_head.h"
#include "fused_loop.h"
#include "fused_stats.h"
#include "workspace.h"

/* Chunks per weight-gradient group for a logit gradient G of g_dtype on ctx (docs/DESIGN.md
 * "Weight-gradient groups"): DISTIL_GW_CHUNKS where it was set, else the backend's policy for a
 * G in a half dtype and 1 for an fp32 G (which groups of one keep in place in zs; more would take
 * 4 C V bytes a slot). 0 or 1: groups of one. */
static int distil_fused_gw_chunks(const distil_ctx *ctx, distil_dtype g_dtype) {
    if (ctx->gw_chunks_env > 0) {
        return ctx->gw_chunks_env;
    }
    return g_dtype != DISTIL_F32 ? ctx->be->tuning.chunk.gw_chunks : 1;
}

/* The shape of call c with the gradients gx, gw, gb on ctx's backend: G stays fp32 where the
 * backend's GEMMs compute in fp32 anyway (fp32_gemm), else it takes the input dtype its GEMMs run
 * in; the teacher source's part is its own. */
static distil_fused_shape distil_fused_shape_of(const distil_ctx *ctx, const distil_fused_call *c,
                                                bool gx, bool gw, bool gb) {
    const distil_fused_args *a = c->a;
    distil_fused_shape s = {
        .rows = a->rows,
        .vocab = a->vocab,
        .hs = a->hs,
        .dtype = a->dtype,
        .g_dtype = ctx->be->tuning.fp32_gemm ? DISTIL_F32 : a->dtype,
        .want_gx = gx,
        .want_gw = gw,
        .want_gb = gb,
        .gw_f32 = a->gw_f32,
        .own_labels = a->weight_hard == 0.0f,
        .want_dz = distil_fused_student_head(a),
        .stats_cols = distil_fused_stats_cols(ctx, a, &c->teacher, &c->pass, gx || gw || gb)};
    c->teacher.ops->shape(c->teacher.self, ctx, &s);
    s.gw_chunks = distil_fused_gw_chunks(ctx, s.g_dtype);
    return s;
}

/* The plan of shape s: chunk_rows as asked, or (0) the backend's chunk policy for policy_vocab
 * columns fitted to a lent workspace (DISTIL_ERR_WORKSPACE when one row does not fit). Either
 * way, weight-gradient groups that a lent workspace cannot hold become groups of one. */
static distil_status distil_fused_plan_make(distil_ctx *ctx, const char *fn,
                                            const distil_fused_shape *s, int64_t chunk_rows,
                                            int64_t policy_vocab, distil_fused_plan *p) {
    size_t avail = distil_workspace_available(ctx);
    if (chunk_rows != 0) {
        distil_chunk_plan_within(s, chunk_rows, avail, p);
        return DISTIL_OK; /* (a lent workspace still too small: the run says so) */
    }
    int64_t chunk = distil_chunk_rows(&ctx->be->tuning.chunk, s->rows, policy_vocab);
    if (!distil_chunk_plan_fit(s, chunk, avail, p)) {
        return distil_error_set(ctx, DISTIL_ERR_WORKSPACE,
                                "%s: lent workspace holds %zu bytes, one row needs %zu", fn, avail,
                                p->bytes);
    }
    return DISTIL_OK;
}

/* The plan of call c with the gradients gx, gw, gb, then the row pass's regions. The chunk
 * policy's budget is for zs and zt: without zt the same budget holds twice the rows. */
static distil_status distil_fused_call_plan(distil_ctx *ctx, const distil_fused_call *c, bool gx,
                                            bool gw, bool gb, distil_fused_plan *p) {
    const distil_fused_shape s = distil_fused_shape_of(ctx, c, gx, gw, gb);
    const int64_t policy_vocab = s.zt ? s.vocab : (s.vocab + 1) / 2;
    DISTIL_TRY(distil_fused_plan_make(ctx, c->fn, &s, c->chunk_rows, policy_vocab, p));
    const distil_fused_pass_ops *o = c->pass.ops;
    return o->plan != NULL ? o->plan(ctx, c->pass.self, &s, c->chunk_rows == 0, p) : DISTIL_OK;
}

distil_status distil_fused_call_workspace(distil_ctx *ctx, const distil_fused_call *c, bool grads,
                                          size_t *bytes) {
    if (c->a->rows == 0) {
        *bytes = 0;
        return DISTIL_OK;
    }
    distil_fused_plan p;
    DISTIL_TRY(distil_fused_call_plan(ctx, c, grads, grads, grads, &p));
    *bytes = p.bytes;
    return DISTIL_OK;
}

/* rows == 0: loss (and its parts) 0, nothing else written. */
static distil_status distil_fused_empty(distil_ctx *ctx, const distil_fused_args *a) {
    distil_fill_args f = {
        .dst = a->loss, .dtype = DISTIL_F32, .count = a->return_parts ? 3 : 1, .value = 0.0f};
    return ctx->be->fill(ctx->b, &f);
}

/* No labels (weight_hard == 0): label 0 for every row, in the plan's region of the workspace,
 * so that every row counts (N = rows) and the row kernels need no case of their own; the hard
 * part of G is then weight_hard / N = 0 times a finite value. Two fp32 zeros are an int64 0. */
static distil_status distil_fused_stand_in_labels(distil_ctx *ctx, distil_fused_args *a,
                                                  const distil_fused_plan *p) {
    a->labels = distil_fused_region(a, p->off_labels);
    distil_fill_args f = {.dst = a->labels, .dtype = DISTIL_F32, .count = 2 * a->rows};
    return ctx->be->fill(ctx->b, &f);
}

/* Without labels the hard part (loss[1]) is 0, whatever the stand-in labels gave. */
static distil_status distil_fused_no_hard_part(distil_ctx *ctx, const distil_fused_args *a) {
    distil_fill_args f = {
        .dst = distil_dptr_add(a->loss, sizeof(float)), .dtype = DISTIL_F32, .count = 1};
    return ctx->be->fill(ctx->b, &f);
}

/* The loss: the backend's whole op where it has one and both strategies allow it (the
 * unsharded loss of a teacher a whole op reads), else the chunk loop. */
static distil_status distil_fused_compute(distil_ctx *ctx, const distil_fused_call *c,
                                          const distil_fused_plan *p) {
    const distil_teacher_source *t = &c->teacher;
    if (ctx->be->whole == NULL || !c->pass.ops->whole || t->ops->whole == NULL) {
        return distil_fused_loop_run(ctx, c->a, p, t, &c->pass);
    }
    t->ops->whole(t->self, c->a);
    return ctx->be->whole->fused_linear_jsd(ctx->b, c->a);
}

distil_status distil_fused_call_run(distil_ctx *ctx, const distil_fused_call *c) {
    distil_fused_args *a = c->a;
    if (a->rows == 0) {
        return distil_fused_empty(ctx, a);
    }
    distil_fused_plan p;
    DISTIL_TRY(distil_fused_call_plan(ctx, c, distil_dptr_present(a->grad_xs),
                                      distil_dptr_present(a->grad_ws),
                                      distil_dptr_present(a->grad_bs), &p));
    DISTIL_TRY(distil_workspace_acquire(ctx, p.bytes, c->fn, &a->workspace));
    if (c->pass.ops->bind != NULL) {
        c->pass.ops->bind(c->pass.self, a->workspace);
    }
    const bool own_labels = !distil_dptr_present(a->labels);
    if (own_labels) {
        DISTIL_TRY(distil_fused_stand_in_labels(ctx, a, &p));
    }
    distil_status st = distil_fused_compute(ctx, c, &p);
    if (st == DISTIL_OK && own_labels && a->return_parts) {
        st = distil_fused_no_hard_part(ctx, a); /* the rows' CE against the stand-in is moot */
    }
    if (st == DISTIL_OK && ctx->be->host_memory) {
        st = ctx->be->synchronize(ctx->b); /* reports an invalid label or id from this call */
    }
    return st;
}
