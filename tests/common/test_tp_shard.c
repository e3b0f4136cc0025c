/* test_tp_shard.c - see test_tp_shard.h. */
#include "test_tp_shard.h"

#include <stdlib.h>
#include <string.h>

void tps_bounds(int64_t v, int world, int rank, int64_t *v0, int64_t *v1) {
    int64_t total = (int64_t)world * (world + 1) / 2, acc = 0;
    for (int r = 0; r < rank; r++) {
        acc += r + 1;
    }
    *v0 = v * acc / total;
    *v1 = rank == world - 1 ? v : v * (acc + rank + 1) / total;
}

static void *tps_upload_opt(distil_ctx *ctx, const void *host, size_t bytes) {
    return host ? tu_upload(ctx, host, bytes) : NULL;
}

static void *tps_download_free(distil_ctx *ctx, void *dev, size_t bytes) {
    if (dev == NULL) {
        return NULL;
    }
    void *h = malloc(bytes);
    tu_download(ctx, h, dev, bytes);
    distil_free(ctx, dev);
    return h;
}

void tps_fused_run(distil_ctx *ctx, const tp_fused *p, int64_t v0, int64_t v1, distil_comm *comm,
                   tps_out *o) {
    const tp_fused_spec *s = &p->s;
    size_t es = distil_dtype_size(p->d.dtype), w = (size_t)(v1 - v0);
    const char *ws = (const char *)p->ws + (size_t)(v0 * s->hs) * es;
    const char *wt = (const char *)p->wt + (size_t)(v0 * s->ht) * es;
    const char *bs = p->bs ? (const char *)p->bs + (size_t)v0 * es : NULL;
    const char *bt = p->bt ? (const char *)p->bt + (size_t)v0 * es : NULL;
    void *in[] = {tps_upload_opt(ctx, p->xs, p->n_xs * es),
                  tps_upload_opt(ctx, ws, w * (size_t)s->hs * es),
                  tps_upload_opt(ctx, bs, w * es),
                  tps_upload_opt(ctx, p->xt, p->n_xt * es),
                  tps_upload_opt(ctx, wt, w * (size_t)s->ht * es),
                  tps_upload_opt(ctx, bt, w * es),
                  tps_upload_opt(ctx, p->labels, (size_t)s->t * sizeof(int64_t))};
    unsigned want = tp_fused_grads(s);
    void *dloss = tu_alloc_poisoned(ctx, sizeof o->loss);
    void *gxs = (want & TP_WANT_XS) ? tu_alloc_poisoned(ctx, p->n_xs * es) : NULL;
    void *gws = (want & TP_WANT_WS) ? tu_alloc_poisoned(ctx, w * (size_t)s->hs * es) : NULL;
    void *gbs = (want & TP_WANT_BS) ? tu_alloc_poisoned(ctx, w * es) : NULL;
    distil_fused_linear_jsd_desc d = p->d;
    d.vocab = v1 - v0;
    distil_vocab_shard sh;
    distil_vocab_shard_init(&sh);
    sh.vocab_offset = v0;
    sh.vocab_total = s->v;
    sh.comm = comm;
    TU_OK(ctx, distil_fused_linear_jsd_tp(ctx, &d, &sh, in[0], in[1], in[2], in[3], in[4], in[5],
                                          in[6], dloss, gxs, gws, gbs));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    tu_download(ctx, o->loss, dloss, sizeof o->loss);
    distil_free(ctx, dloss);
    o->gxs = tps_download_free(ctx, gxs, p->n_xs * es);
    o->gws = tps_download_free(ctx, gws, w * (size_t)s->hs * es);
    o->gbs = tps_download_free(ctx, gbs, w * es);
    for (size_t i = 0; i < TU_LEN(in); i++) {
        distil_free(ctx, in[i]);
    }
}

void tps_out_free(tps_out *o) {
    free(o->gxs), free(o->gws), free(o->gbs);
}

void tps_check(const tp_fused *p, int64_t v0, int64_t v1, const tps_out *o, const tp_fused_out *r) {
    const tp_fused_spec *s = &p->s;
    distil_dtype dt = p->d.dtype;
    size_t es = distil_dtype_size(dt);
    double tl = tu_tolerance(dt, TU_LOSS), tg = tu_tolerance(dt, TU_GRAD_FUSED);
    int nloss = s->parts ? 3 : 1;
    for (int k = 0; k < nloss; k++) {
        TU_CHECK_REL("loss", o->loss[k], r->loss[k], tl);
    }
    TU_CHECK_POISONED("loss past its values", o->loss, DISTIL_F32, (size_t)nloss, 1);
    if (o->gxs) {
        TU_CHECK_WRITTEN("grad_student_hidden", o->gxs, dt, s->t, s->hs, s->hs, false);
        TU_CHECK_TENSOR("grad_student_hidden", o->gxs, r->gxs, dt, s->t, s->hs, s->hs, tg);
    }
    if (o->gws) {
        const char *ref = (const char *)r->gws + (size_t)(v0 * s->hs) * es;
        TU_CHECK_WRITTEN("grad_student_weight", o->gws, dt, v1 - v0, s->hs, s->hs, false);
        TU_CHECK_TENSOR("grad_student_weight", o->gws, ref, dt, v1 - v0, s->hs, s->hs, tg);
    }
    if (o->gbs) {
        const char *ref = (const char *)r->gbs + (size_t)v0 * es;
        TU_CHECK_WRITTEN("grad_student_bias", o->gbs, dt, 1, v1 - v0, v1 - v0, false);
        TU_CHECK_TENSOR("grad_student_bias", o->gbs, ref, dt, 1, v1 - v0, v1 - v0, tg);
    }
}

void tps_check_rerun(const tp_fused *p, int64_t v0, int64_t v1, const tps_out *a,
                     const tps_out *b) {
    size_t es = distil_dtype_size(p->d.dtype);
    TU_CHECK_BITWISE("loss rerun", b->loss, a->loss, sizeof a->loss);
    TU_CHECK_BITWISE("grad_xs rerun", b->gxs, a->gxs, p->n_xs * es);
    TU_CHECK_BITWISE("grad_Ws rerun", b->gws, a->gws, (size_t)((v1 - v0) * p->s.hs) * es);
}
