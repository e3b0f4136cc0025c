/*
 * test_tp.c - the vocabulary-parallel losses of docs/SPEC.md §8 in one process, on every backend:
 *   - world size 1 through a communicator (a callback whose all-reduce is the identity);
 *   - world sizes 1-4 with unequal shards through the split-phase entry points, the test doing
 *     each all-reduce on the host in rank order between the phases;
 * each rank's loss, grad_xs (whole) and grad_Ws / grad_bs rows against the unsharded float64
 * reference within docs/SPEC.md §3, every rank's loss bitwise equal, and a rerun bitwise equal.
 * The JSD's shards are plain distil_jsd calls whose losses sum to the loss (and distil_jsd_tp at
 * world size 1). Bad shards are refused with a message. Multi-process runs: test_tp_mpi.c.
 */
#include "test_tp_shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static distil_ctx *g_ctx;
static const char *g_backend;

static const tp_fused_spec fused_cases[] = {
    {.t = 29,
     .v = 1031,
     .hs = 32,
     .ht = 48,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .beta = 0.5f,
     .tau = 1.5f,
     .bias_s = true,
     .bias_t = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .chunk = 8},
    {.t = 17,
     .v = 523,
     .hs = 16,
     .ht = 24,
     .w_hard = 0.3f,
     .w_soft = 0.7f,
     .beta = 0.0f,
     .tau = 1.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_NONE},
    /* docs/SPEC.md §6's divergences through the same phases */
    {.t = 13,
     .v = 301,
     .hs = 8,
     .ht = 12,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .tau = 2.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .chunk = 5,
     .div = DISTIL_DIVERGENCE_SKEW_KL,
     .alpha = 0.3f,
     .normaliser = 7.0f,
     .tau_sq = true},
    {.t = 13,
     .v = 301,
     .hs = 8,
     .ht = 12,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .tau = 1.0f,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .div = DISTIL_DIVERGENCE_TVD}};

static int identity_allreduce(void *user, void *buf, int64_t count, distil_comm_dtype dtype,
                              distil_comm_op op, void *stream) {
    (void)buf, (void)count, (void)dtype, (void)op, (void)stream;
    ++*(int *)user;
    return 0;
}

/* The backend's table has the vocabulary-parallel row pass; without it the fused loss is refused
 * (bad_shards checks the refusal's message where it reaches the backend). */
static bool fused_supported(void) {
    if (distil_testing_capabilities(g_ctx).tp) {
        return true;
    }
    printf("%s: no vocabulary-parallel row pass on this backend, skipped\n", g_backend);
    return false;
}

static void fused_world1_comm(void **state) {
    (void)state;
    if (!fused_supported()) {
        skip();
    }
    for (size_t c = 0; c < TU_LEN(fused_cases); c++) {
        tp_fused p;
        tp_fused_make(&p, &fused_cases[c], DISTIL_F32, 100 + c);
        distil_ctx *ref = tu_ctx("ref");
        tp_fused_out r;
        tp_fused_run(ref, &p, &r);
        int calls = 0;
        distil_comm *comm = NULL;
        TU_OK(NULL, distil_comm_create_callback(&comm, 0, 1, identity_allreduce, &calls));
        tps_out o, o2;
        tps_fused_run(g_ctx, &p, 0, p.s.v, comm, &o);
        assert_true(calls > 0);
        tps_check(&p, 0, p.s.v, &o, &r);
        tps_fused_run(g_ctx, &p, 0, p.s.v, comm, &o2);
        tps_check_rerun(&p, 0, p.s.v, &o, &o2);
        tps_out_free(&o), tps_out_free(&o2);
        distil_comm_destroy(comm);
        tp_fused_out_free(&r);
        distil_ctx_destroy(ref);
        tp_fused_free(&p);
    }
}

/* A lent workspace one byte short of the query's: the library's chunk shrinks until the plan and
 * the statistics fit (docs/SPEC.md §8), the result still the unsharded loss. */
static void fused_lent_workspace(void **state) {
    (void)state;
    if (!fused_supported()) {
        skip();
    }
    tp_fused_spec s = fused_cases[0];
    s.chunk = 0;
    tp_fused p;
    tp_fused_make(&p, &s, DISTIL_F32, 150);
    distil_ctx *ref = tu_ctx("ref");
    tp_fused_out r;
    tp_fused_run(ref, &p, &r);
    size_t need = 0;
    TU_OK(g_ctx, distil_fused_linear_jsd_tp_workspace_size(g_ctx, &p.d, 1, &need));
    void *work = tu_alloc_poisoned(g_ctx, need - 1);
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, work, need - 1));
    int calls = 0;
    distil_comm *comm = NULL;
    TU_OK(NULL, distil_comm_create_callback(&comm, 0, 1, identity_allreduce, &calls));
    tps_out o;
    tps_fused_run(g_ctx, &p, 0, p.s.v, comm, &o);
    tps_check(&p, 0, p.s.v, &o, &r);
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, NULL, 0));
    distil_free(g_ctx, work);
    tps_out_free(&o);
    distil_comm_destroy(comm);
    tp_fused_out_free(&r);
    distil_ctx_destroy(ref);
    tp_fused_free(&p);
}

/* ---------------------------------------------------------------- split phase, world 1-4 */

/* One rank's device buffers of a split-phase run. */
typedef struct rank_bufs {
    int64_t v0, v1;
    void *in[7]; /* xs, ws, bs, xt, wt, bt, labels */
    void *loss, *gxs, *gws, *gbs;
    double *stats;
} rank_bufs;

static void rank_setup(const tp_fused *p, rank_bufs *R) {
    const tp_fused_spec *s = &p->s;
    size_t es = distil_dtype_size(p->d.dtype), w = (size_t)(R->v1 - R->v0);
    const void *src[7] = {p->xs,
                          (const char *)p->ws + (size_t)(R->v0 * s->hs) * es,
                          p->bs ? (const char *)p->bs + (size_t)R->v0 * es : NULL,
                          p->xt,
                          (const char *)p->wt + (size_t)(R->v0 * s->ht) * es,
                          p->bt ? (const char *)p->bt + (size_t)R->v0 * es : NULL,
                          p->labels};
    size_t bytes[7] = {
        p->n_xs * es, w * (size_t)s->hs * es,        w * es, p->n_xt * es, w * (size_t)s->ht * es,
        w * es,       (size_t)s->t * sizeof(int64_t)};
    for (int i = 0; i < 7; i++) {
        R->in[i] = src[i] ? tu_upload(g_ctx, src[i], bytes[i]) : NULL;
    }
    unsigned want = tp_fused_grads(s);
    R->loss = tu_alloc_poisoned(g_ctx, 4 * sizeof(float));
    R->gxs = (want & TP_WANT_XS) ? tu_alloc_poisoned(g_ctx, p->n_xs * es) : NULL;
    R->gws = (want & TP_WANT_WS) ? tu_alloc_poisoned(g_ctx, bytes[1]) : NULL;
    R->gbs = (want & TP_WANT_BS) ? tu_alloc_poisoned(g_ctx, w * es) : NULL;
    R->stats = tu_alloc_poisoned(g_ctx, (size_t)(8 * s->t) * sizeof(double));
}

static void rank_phase(const tp_fused *p, rank_bufs *R, int phase) {
    distil_fused_linear_jsd_desc d = p->d;
    d.vocab = R->v1 - R->v0;
    distil_vocab_shard sh;
    distil_vocab_shard_init(&sh);
    sh.vocab_offset = R->v0;
    sh.vocab_total = p->s.v;
    TU_OK(g_ctx, distil_fused_linear_jsd_tp_phase(g_ctx, &d, &sh, phase, R->stats, R->in[0],
                                                  R->in[1], R->in[2], R->in[3], R->in[4], R->in[5],
                                                  R->in[6], R->loss, R->gxs, R->gws, R->gbs));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
}

/* The caller's all-reduce after a phase: max or sum over the ranks, in rank order, of the
 * phase's block of the statistics (whole buffers copied: opencl's are handles). */
static void host_allreduce(rank_bufs *R, int world, int64_t t, int phase) {
    static const int64_t first[3] = {0, 2, 5}, width[3] = {2, 3, 3};
    size_t all = (size_t)(8 * t), n = (size_t)(width[phase] * t), off = (size_t)(first[phase] * t);
    double *acc = malloc(all * sizeof(double)), *mine = malloc(all * sizeof(double));
    for (int r = 0; r < world; r++) {
        tu_download(g_ctx, r == 0 ? acc : mine, R[r].stats, all * sizeof(double));
        for (size_t i = off; r > 0 && i < off + n; i++) {
            acc[i] = phase == 0 ? fmax(acc[i], mine[i]) : acc[i] + mine[i];
        }
    }
    for (int r = 0; r < world; r++) {
        tu_download(g_ctx, mine, R[r].stats, all * sizeof(double));
        memcpy(mine + off, acc + off, n * sizeof(double));
        TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, R[r].stats, mine, all * sizeof(double)));
    }
    free(acc), free(mine);
}

/* grad_xs partials summed over the ranks in fp32, in rank order, rounded to the dtype. */
static void *host_sum_gxs(const tp_fused *p, rank_bufs *R, int world) {
    size_t n = p->n_xs, es = distil_dtype_size(p->d.dtype);
    void *h = malloc(n * es), *out = malloc(n * es);
    float *acc = calloc(n, sizeof(float));
    for (int r = 0; r < world; r++) {
        tu_download(g_ctx, h, R[r].gxs, n * es);
        for (size_t i = 0; i < n; i++) {
            acc[i] += tu_get(h, p->d.dtype, i);
        }
    }
    for (size_t i = 0; i < n; i++) {
        tu_set(out, p->d.dtype, i, acc[i]);
    }
    free(h), free(acc);
    return out;
}

static void rank_outputs(const tp_fused *p, rank_bufs *R, tps_out *o) {
    size_t es = distil_dtype_size(p->d.dtype), w = (size_t)(R->v1 - R->v0);
    tu_download(g_ctx, o->loss, R->loss, sizeof o->loss);
    o->gxs = NULL;
    o->gws = R->gws ? malloc(w * (size_t)p->s.hs * es) : NULL;
    o->gbs = R->gbs ? malloc(w * es) : NULL;
    if (o->gws) {
        tu_download(g_ctx, o->gws, R->gws, w * (size_t)p->s.hs * es);
    }
    if (o->gbs) {
        tu_download(g_ctx, o->gbs, R->gbs, w * es);
    }
}

static void rank_free(rank_bufs *R) {
    for (int i = 0; i < 7; i++) {
        distil_free(g_ctx, R->in[i]);
    }
    distil_free(g_ctx, R->loss), distil_free(g_ctx, R->gxs), distil_free(g_ctx, R->gws);
    distil_free(g_ctx, R->gbs), distil_free(g_ctx, R->stats);
}

/* A whole split-phase run at world size `world`: every rank checked; *loss0 = rank 0's loss. */
static void split_run(const tp_fused *p, const tp_fused_out *ref, int world, float loss0[4]) {
    rank_bufs R[4];
    for (int r = 0; r < world; r++) {
        tps_bounds(p->s.v, world, r, &R[r].v0, &R[r].v1);
        rank_setup(p, &R[r]);
    }
    for (int phase = 0; phase < 4; phase++) {
        for (int r = 0; r < world; r++) {
            rank_phase(p, &R[r], phase);
        }
        if (phase < 3) {
            host_allreduce(R, world, p->s.t, phase);
        }
    }
    void *gxs = R[0].gxs ? host_sum_gxs(p, R, world) : NULL;
    for (int r = 0; r < world; r++) {
        tps_out o;
        rank_outputs(p, &R[r], &o);
        o.gxs = gxs;
        tps_check(p, R[r].v0, R[r].v1, &o, ref);
        if (r == 0) {
            memcpy(loss0, o.loss, sizeof o.loss);
        }
        TU_CHECK_BITWISE("loss of every rank", o.loss, loss0, sizeof o.loss);
        o.gxs = NULL;
        tps_out_free(&o);
        rank_free(&R[r]);
    }
    free(gxs);
}

static void fused_split_phase(void **state) {
    (void)state;
    if (!fused_supported()) {
        skip();
    }
    static const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16};
    for (size_t c = 0; c < TU_LEN(fused_cases); c++) {
        for (size_t k = 0; k < TU_LEN(dts); k++) {
            tp_fused p;
            tp_fused_make(&p, &fused_cases[c], dts[k], 200 + c);
            distil_ctx *ref = tu_ctx("ref");
            tp_fused_out r;
            tp_fused_run(ref, &p, &r);
            for (int world = 1; world <= 4; world++) {
                float a[4], b[4];
                split_run(&p, &r, world, a);
                split_run(&p, &r, world, b);
                TU_CHECK_BITWISE("loss rerun", b, a, sizeof a);
            }
            tp_fused_out_free(&r);
            distil_ctx_destroy(ref);
            tp_fused_free(&p);
        }
    }
}

/* ---------------------------------------------------------------- JSD */

/* Columns [v0, v1) of a (t, ld) fp32 host matrix, dense (t, v1 - v0). */
static float *columns(const float *m, int64_t t, int64_t ld, int64_t v0, int64_t v1) {
    float *out = malloc((size_t)(t * (v1 - v0)) * sizeof(float));
    for (int64_t i = 0; i < t; i++) {
        memcpy(out + i * (v1 - v0), m + i * ld + v0, (size_t)(v1 - v0) * sizeof(float));
    }
    return out;
}

/* One rank's distil_jsd_tp on its columns (a world-1 communicator: the test sums the ranks). */
static void jsd_rank(const tp_jsd *p, int64_t v0, int64_t v1, void *lab, float *part, float *g) {
    int64_t t = p->s.t, w = v1 - v0;
    float *xh = columns(p->x, t, p->xs, v0, v1), *yh = columns(p->y, t, p->ys, v0, v1);
    void *x = tu_upload(g_ctx, xh, (size_t)(t * w) * 4),
         *y = tu_upload(g_ctx, yh, (size_t)(t * w) * 4);
    void *loss = tu_alloc_poisoned(g_ctx, p->nloss * sizeof(float));
    void *grad = tu_alloc_poisoned(g_ctx, (size_t)(t * w) * 4);
    distil_jsd_desc d = p->d;
    d.vocab = w;
    d.student_stride = d.teacher_stride = d.grad_stride = 0;
    distil_vocab_shard sh;
    distil_vocab_shard_init(&sh);
    sh.vocab_offset = v0, sh.vocab_total = p->s.v;
    int calls = 0;
    TU_OK(NULL, distil_comm_create_callback(&sh.comm, 0, 1, identity_allreduce, &calls));
    TU_OK(g_ctx, distil_jsd_tp(g_ctx, &d, &sh, x, y, lab, loss, grad));
    distil_comm_destroy(sh.comm);
    assert_int_equal(calls, 1);
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    tu_download(g_ctx, part, loss, p->nloss * sizeof(float));
    tu_download(g_ctx, xh, grad, (size_t)(t * w) * 4);
    TU_CHECK_WRITTEN("grad_student", xh, DISTIL_F32, t, w, w, false);
    for (int64_t i = 0; i < t; i++) {
        memcpy(g + i * p->s.v + v0, xh + i * w, (size_t)w * 4);
    }
    distil_free(g_ctx, x), distil_free(g_ctx, y), distil_free(g_ctx, loss),
        distil_free(g_ctx, grad);
    free(xh), free(yh);
}

/* The JSD on shards of columns: the ranks' losses sum to the loss, the gradients are the whole
 * gradient's columns. */
static void jsd_shards(void **state) {
    (void)state;
    static const distil_reduction reds[] = {DISTIL_REDUCTION_BATCHMEAN, DISTIL_REDUCTION_SUM,
                                            DISTIL_REDUCTION_NONE};
    for (size_t k = 0; k < TU_LEN(reds); k++) {
        tp_jsd_spec s = {.t = 13,
                         .v = 777,
                         .beta = 0.3f,
                         .red = reds[k],
                         .labels = TP_LABELS_MIXED,
                         .grad = TP_GRAD_OUT};
        tp_jsd p;
        tp_jsd_make(&p, &s, DISTIL_F32, 300 + k);
        distil_ctx *ref = tu_ctx("ref");
        tp_jsd_out r;
        tp_jsd_run(ref, &p, &r);
        int64_t t = s.t, v = s.v;
        size_t nl = p.nloss;
        void *lab = tu_upload(g_ctx, p.labels, (size_t)t * sizeof(int64_t));
        for (int world = 1; world <= 4; world++) {
            float *sum = calloc(nl, sizeof(float)), *part = malloc(nl * sizeof(float));
            float *g = malloc((size_t)(t * v) * 4);
            for (int rk = 0; rk < world; rk++) {
                int64_t v0, v1;
                tps_bounds(v, world, rk, &v0, &v1);
                jsd_rank(&p, v0, v1, lab, part, g);
                for (size_t i = 0; i < nl; i++) {
                    sum[i] += part[i];
                }
            }
            for (size_t i = 0; i < nl; i++) {
                TU_CHECK_REL("loss", sum[i], r.loss[i], tu_tolerance(DISTIL_F32, TU_LOSS));
            }
            TU_CHECK_TENSOR("grad_student", g, r.grad, DISTIL_F32, t, v, p.gs,
                            tu_tolerance(DISTIL_F32, TU_GRAD));
            free(sum), free(part), free(g);
        }
        distil_free(g_ctx, lab);
        tp_jsd_out_free(&r);
        distil_ctx_destroy(ref);
        tp_jsd_free(&p);
    }
}

/* ---------------------------------------------------------------- bad shards */

static void bad_shards(void **state) {
    (void)state;
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = 2, d.vocab = 8;
    void *x = tu_alloc_poisoned(g_ctx, 64), *y = tu_alloc_poisoned(g_ctx, 64);
    void *loss = tu_alloc_poisoned(g_ctx, 4);
    int calls = 0;
    distil_comm *comm = NULL;
    TU_OK(NULL, distil_comm_create_callback(&comm, 0, 1, identity_allreduce, &calls));
    distil_vocab_shard sh;
    distil_vocab_shard_init(&sh);
    sh.vocab_total = 10, sh.vocab_offset = 3, sh.comm = comm;
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG,
              distil_jsd_tp(g_ctx, &d, NULL, x, y, NULL, loss, NULL));
    TU_CHECK_MESSAGE(g_ctx, "shard");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_jsd_tp(g_ctx, &d, &sh, x, y, NULL, loss, NULL));
    TU_CHECK_MESSAGE(g_ctx, "vocab_offset");
    sh.vocab_offset = 2, sh.comm = NULL;
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_jsd_tp(g_ctx, &d, &sh, x, y, NULL, loss, NULL));
    TU_CHECK_MESSAGE(g_ctx, "shard.comm");
    sh.struct_size = 1;
    TU_EXPECT(g_ctx, DISTIL_ERR_VERSION, distil_jsd_tp(g_ctx, &d, &sh, x, y, NULL, loss, NULL));
    TU_CHECK_MESSAGE(g_ctx, "struct_size");
    assert_int_equal(calls, 0); /* nothing reached the communicator */
    /* the fused loss's head options are refused, not ignored (docs/SPEC.md §8) */
    distil_fused_linear_jsd_desc f;
    distil_fused_linear_jsd_desc_init(&f);
    f.rows = 2, f.vocab = 7, f.student_hidden = 4, f.teacher_hidden = 4;
    f.student_softcap = 30.0f;
    sh.struct_size = sizeof sh, sh.vocab_offset = 3, sh.comm = comm;
    TU_EXPECT(g_ctx, DISTIL_ERR_UNSUPPORTED,
              distil_fused_linear_jsd_tp(g_ctx, &f, &sh, x, x, NULL, y, y, NULL, NULL, loss, NULL,
                                         NULL, NULL));
    TU_CHECK_MESSAGE(g_ctx, "head options");
    f.student_softcap = 0.0f, f.teacher_vocab = 8;
    TU_EXPECT(g_ctx, DISTIL_ERR_UNSUPPORTED,
              distil_fused_linear_jsd_tp(g_ctx, &f, &sh, x, x, NULL, y, y, NULL, NULL, loss, NULL,
                                         NULL, NULL));
    f.teacher_vocab = 0, f.student_entropy = (float *)y; /* docs/SPEC.md §6 student entropy */
    TU_EXPECT(g_ctx, DISTIL_ERR_UNSUPPORTED,
              distil_fused_linear_jsd_tp(g_ctx, &f, &sh, x, x, NULL, y, y, NULL, NULL, loss, NULL,
                                         NULL, NULL));
    TU_CHECK_MESSAGE(g_ctx, "student_entropy");
    assert_int_equal(calls, 0);
    distil_comm *c1 = NULL;
    TU_EXPECT(NULL, DISTIL_ERR_INVALID_ARG, distil_comm_create_callback(&c1, 1, 1, NULL, NULL));
    TU_CHECK_MESSAGE(NULL, "fn");
    distil_comm *c2 = NULL;
    TU_EXPECT(NULL, DISTIL_ERR_INVALID_ARG,
              distil_comm_create_callback(&c2, 2, 2, identity_allreduce, NULL));
    TU_CHECK_MESSAGE(NULL, "rank");
    assert_null(c2);
    /* This process has not loaded NCCL: the adapter says so instead of touching the handle. */
    TU_EXPECT(NULL, DISTIL_ERR_NOT_AVAILABLE, distil_comm_create_nccl(&c2, (void *)&calls));
    TU_CHECK_MESSAGE(NULL, "not loaded");
    distil_comm_destroy(comm);
    distil_free(g_ctx, x), distil_free(g_ctx, y), distil_free(g_ctx, loss);
}

static int group_setup(void **state) {
    (void)state;
    g_ctx = tu_ctx(g_backend);
    return g_ctx ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fused_world1_comm), cmocka_unit_test(fused_lent_workspace),
        cmocka_unit_test(fused_split_phase), cmocka_unit_test(jsd_shards),
        cmocka_unit_test(bad_shards),
    };
    return _cmocka_run_group_tests(tu_group_name("tp", backend), tests, TU_LEN(tests), group_setup,
                                   group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, false);
}
