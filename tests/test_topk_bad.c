/*
 * test_topk_bad.c - docs/SPEC.md §5 for both top-k losses (§7): every invalid argument is refused
 * with its status and a message naming the argument, and no output is touched (outputs poisoned
 * before, still poisoned after); an id out of range is reported like an invalid label.
 */
#include "test_util.h"

#include <math.h>
#include <string.h>

enum { T = 4, V = 8, K = 3, HS = 3 };

static const char *g_backend;
static distil_ctx *g_ctx;

static struct { void *x, *ids, *logp, *labels, *loss, *grad, *xs, *ws, *bs, *gxs, *gws, *gbs; } g;

static int group_setup(void **state) {
    (void)state;
    if (distil_ctx_create(&g_ctx, g_backend, 0) != DISTIL_OK) {
        return -1;
    }
    tu_rng r = tu_rng_make(9);
    float x[T * V], logp[T * K], xs[T * HS], ws[V * HS], bs[V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_normal(&r, xs, DISTIL_F32, TU_LEN(xs), 1.0);
    tu_fill_normal(&r, ws, DISTIL_F32, TU_LEN(ws), 0.5);
    tu_fill_normal(&r, bs, DISTIL_F32, TU_LEN(bs), 0.5);
    int64_t ids[T * K] = {0, 1, 2, 3, 4, 5, 6, 7, -1, 2, 4, 6};
    for (size_t i = 0; i < TU_LEN(logp); i++) {
        logp[i] = -1.5f - 0.25f * (float)i;
    }
    int64_t labels[T] = {1, -100, 7, 0};
    g.x = tu_upload(g_ctx, x, sizeof x), g.ids = tu_upload(g_ctx, ids, sizeof ids);
    g.logp = tu_upload(g_ctx, logp, sizeof logp), g.labels = tu_upload(g_ctx, labels, 32);
    g.xs = tu_upload(g_ctx, xs, sizeof xs), g.ws = tu_upload(g_ctx, ws, sizeof ws);
    g.bs = tu_upload(g_ctx, bs, sizeof bs);
    g.loss = tu_alloc_poisoned(g_ctx, (T + 3) * 4), g.grad = tu_alloc_poisoned(g_ctx, T * V * 4);
    g.gxs = tu_alloc_poisoned(g_ctx, sizeof xs), g.gws = tu_alloc_poisoned(g_ctx, sizeof ws);
    g.gbs = tu_alloc_poisoned(g_ctx, sizeof bs);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    void *b[] = {g.x,  g.ids, g.logp, g.labels, g.loss, g.grad,
                 g.xs, g.ws,  g.bs,   g.gxs,    g.gws,  g.gbs};
    for (size_t i = 0; i < TU_LEN(b); i++) {
        distil_free(g_ctx, b[i]);
    }
    distil_ctx_destroy(g_ctx);
    return 0;
}

/* The outputs still hold the poison pattern. */
static void untouched(void) {
    float loss[T + 3], grad[T * V], gxs[T * HS];
    tu_download(g_ctx, loss, g.loss, sizeof loss);
    tu_download(g_ctx, grad, g.grad, sizeof grad);
    tu_download(g_ctx, gxs, g.gxs, sizeof gxs);
    TU_CHECK_POISONED("loss", loss, DISTIL_F32, 0, TU_LEN(loss));
    TU_CHECK_POISONED("grad_student", grad, DISTIL_F32, 0, TU_LEN(grad));
    TU_CHECK_POISONED("grad_student_hidden", gxs, DISTIL_F32, 0, TU_LEN(gxs));
}

static void lp_desc(distil_topk_desc *d) {
    distil_topk_desc_init(d);
    d->rows = T, d->vocab = V, d->k = K;
}

static void fu_desc(distil_fused_linear_topk_desc *d) {
    distil_fused_linear_topk_desc_init(d);
    d->rows = T, d->vocab = V, d->k = K, d->student_hidden = HS, d->dtype = DISTIL_F32;
}

static distil_status lp_call(const distil_topk_desc *d) {
    return distil_topk(g_ctx, d, g.x, g.ids, g.logp, g.labels, g.loss, g.grad);
}

static distil_status fu_call(const distil_fused_linear_topk_desc *d) {
    return distil_fused_linear_topk(g_ctx, d, g.xs, g.ws, g.bs, g.ids, g.logp, g.labels, g.loss,
                                    g.gxs, g.gws, g.gbs);
}

#define REFUSED(want, call, names)                                                                 \
    do {                                                                                           \
        TU_EXPECT(g_ctx, (want), (call));                                                          \
        TU_CHECK_MESSAGE(g_ctx, (names));                                                          \
        untouched();                                                                               \
    } while (0)

static void test_logp_desc(void **state) {
    (void)state;
    distil_topk_desc d;
    lp_desc(&d), d.struct_size--;
    REFUSED(DISTIL_ERR_VERSION, lp_call(&d), "struct_size");
    lp_desc(&d), d.k = 0;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "k");
    lp_desc(&d), d.k = V + 1;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "k");
    lp_desc(&d), d.pad_id = 3;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "pad_id");
    lp_desc(&d), d.tail = (distil_topk_tail)7;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "tail");
    lp_desc(&d), d.id_dtype = (distil_id_dtype)5;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "id_dtype");
    lp_desc(&d), d.teacher_dtype = (distil_dtype)9;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "teacher_dtype");
    lp_desc(&d), d.divergence = (distil_divergence)42;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "divergence");
    lp_desc(&d), d.divergence = DISTIL_DIVERGENCE_JSD, d.beta = 1.5f;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "beta");
    lp_desc(&d), d.divergence = DISTIL_DIVERGENCE_SKEW_KL, d.alpha = 1.5f;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "alpha");
    lp_desc(&d), d.divergence = DISTIL_DIVERGENCE_TVD, d.alpha = NAN; /* checked whatever the div */
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "alpha");
    lp_desc(&d), d.normaliser = -1.0f;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "normaliser");
    lp_desc(&d), d.normaliser = NAN;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "normaliser");
    lp_desc(&d), d.normaliser = 2.0f, d.normaliser_device = g.loss;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "normaliser");
    lp_desc(&d), d.student_stride = V - 1;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "student_logp");
    lp_desc(&d), d.reduction = (distil_reduction)9;
    REFUSED(DISTIL_ERR_INVALID_ARG, lp_call(&d), "reduction");
    lp_desc(&d);
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_topk(g_ctx, &d, g.x, NULL, g.logp, g.labels, g.loss, g.grad), "teacher_ids");
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_topk(g_ctx, &d, g.x, g.ids, NULL, g.labels, g.loss, g.grad), "teacher_logp");
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_topk(g_ctx, &d, g.x, g.ids, g.logp, g.labels, g.loss, g.x), "grad_student");
    TU_EXPECT(NULL, DISTIL_ERR_INVALID_ARG,
              distil_topk(NULL, &d, g.x, g.ids, g.logp, g.labels, g.loss, g.grad));
    TU_CHECK_MESSAGE(NULL, "ctx");
}

static void test_fused_desc(void **state) {
    (void)state;
    distil_fused_linear_topk_desc d;
    fu_desc(&d), d.struct_size++;
    REFUSED(DISTIL_ERR_VERSION, fu_call(&d), "struct_size");
    fu_desc(&d), d.k = -2;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "k");
    fu_desc(&d), d.weight_hard = 0.0f, d.weight_soft = 0.0f;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "weight_hard");
    fu_desc(&d), d.temperature = 0.0f;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "temperature");
    fu_desc(&d), d.reduction = DISTIL_REDUCTION_NONE;
    REFUSED(DISTIL_ERR_UNSUPPORTED, fu_call(&d), "reduction");
    fu_desc(&d), d.divergence = DISTIL_DIVERGENCE_SKEW_REVERSE_KL, d.alpha = -0.5f;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "alpha");
    fu_desc(&d), d.divergence = (distil_divergence)-1;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "divergence");
    fu_desc(&d), d.student_weight_hidden = HS + 1;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "student_weight");
    fu_desc(&d), d.id_dtype = DISTIL_IDS_I32, d.pad_id = INT64_MIN;
    REFUSED(DISTIL_ERR_INVALID_ARG, fu_call(&d), "pad_id");
    fu_desc(&d);
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_fused_linear_topk(g_ctx, &d, g.xs, g.ws, NULL, g.ids, g.logp, g.labels, g.loss,
                                     g.gxs, g.gws, g.gbs),
            "grad_student_bias");
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_fused_linear_topk(g_ctx, &d, g.xs, g.ws, g.bs, g.ids, g.logp, NULL, g.loss,
                                     g.gxs, g.gws, g.gbs),
            "labels");
    REFUSED(DISTIL_ERR_INVALID_ARG,
            distil_fused_linear_topk(g_ctx, &d, g.xs, g.ws, g.bs, g.ids, g.logp, g.labels, g.loss,
                                     g.xs, g.gws, g.gbs),
            "grad_student_hidden|student_hidden");
    size_t bytes = 0;
    fu_desc(&d), d.k = 0;
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG,
              distil_fused_linear_topk_workspace_size(g_ctx, &d, 1, &bytes));
    TU_CHECK_MESSAGE(g_ctx, "k");
}

static void repoison(void *dev, size_t bytes) {
    unsigned char host[T * V * 4];
    tu_poison(host, bytes);
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, dev, host, bytes));
}

/* A call with bad teacher ids, status s: the call (cpu, ref) or the next synchronize reports
 * DISTIL_ERR_INVALID_LABEL with `want` in the message, once. */
static void expect_bad_ids(distil_status s, const char *want) {
    if (s == DISTIL_OK) {
        s = distil_ctx_synchronize(g_ctx);
    }
    assert_int_equal(s, DISTIL_ERR_INVALID_LABEL);
    TU_CHECK_MESSAGE(g_ctx, want);
    assert_int_equal(distil_ctx_synchronize(g_ctx), DISTIL_OK);
}

/* An id outside [0, V) in row 2: the call (cpu, ref) or the next synchronize reports it, once. */
static void test_bad_id(void **state) {
    (void)state;
    int64_t ids[T * K] = {0, 1, 2, 3, 4, 5, 6, 99, -1, 2, 4, 6};
    void *bad = tu_upload(g_ctx, ids, sizeof ids);
    distil_topk_desc d;
    lp_desc(&d);
    expect_bad_ids(distil_topk(g_ctx, &d, g.x, bad, g.logp, g.labels, g.loss, g.grad),
                   "teacher_ids: row 2 ");
    distil_free(g_ctx, bad);
    repoison(g.loss, (T + 3) * 4), repoison(g.grad, T * V * 4);
}

/* docs/SPEC.md §7: every row's ids are checked, ignored rows' too, and the first bad row of the
 * call is reported, whichever row's check finishes first (opencl and cuda check the rows in
 * parallel): row 1 (label -100) repeats an id, row 3 has one out of range; both forms. */
static void test_bad_id_first_row(void **state) {
    (void)state;
    int64_t ids[T * K] = {0, 1, 2, 3, 4, 3, 6, 7, -1, 2, 99, 6};
    void *bad = tu_upload(g_ctx, ids, sizeof ids);
    distil_topk_desc d;
    lp_desc(&d);
    expect_bad_ids(distil_topk(g_ctx, &d, g.x, bad, g.logp, g.labels, g.loss, g.grad),
                   "teacher_ids: row 1 has id 3 twice");
    distil_fused_linear_topk_desc f;
    fu_desc(&f);
    f.chunk_rows = 2; /* the bad rows in two chunks: the first chunk's stands */
    expect_bad_ids(distil_fused_linear_topk(g_ctx, &f, g.xs, g.ws, g.bs, bad, g.logp, g.labels,
                                            g.loss, g.gxs, g.gws, g.gbs),
                   "teacher_ids: row 1 has id 3 twice");
    distil_free(g_ctx, bad);
    repoison(g.loss, (T + 3) * 4), repoison(g.grad, T * V * 4);
    repoison(g.gxs, T * HS * 4);
}

/* docs/SPEC.md §5's memory rules: the workspace query's bytes, lent, run the call (same loss as
 * the context's own workspace); one byte less than one row's need is DISTIL_ERR_WORKSPACE; an
 * injected allocation failure is DISTIL_ERR_OUT_OF_MEMORY and the context stays usable. */
static void test_workspace_and_faults(void **state) {
    (void)state;
    distil_fused_linear_topk_desc d;
    fu_desc(&d);
    float own[T + 3], lent[T + 3];
    TU_OK(g_ctx, fu_call(&d));
    tu_download(g_ctx, own, g.loss, sizeof own);
    size_t need = 0;
    TU_OK(g_ctx, distil_fused_linear_topk_workspace_size(g_ctx, &d, 1, &need));
    void *work = need ? tu_alloc_poisoned(g_ctx, need) : NULL;
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, work, need));
    TU_OK(g_ctx, fu_call(&d));
    tu_download(g_ctx, lent, g.loss, sizeof lent);
    TU_CHECK_BITWISE("loss with the lent workspace", lent, own, sizeof(float));
    if (need > 1) {
        TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, work, 1));
        TU_EXPECT(g_ctx, DISTIL_ERR_WORKSPACE, fu_call(&d));
        TU_CHECK_MESSAGE(g_ctx, "workspace");
    }
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, NULL, 0));
    distil_free(g_ctx, work);
    distil_ctx *fresh = tu_ctx(g_backend); /* its workspace and scratch are not grown yet */
    void *x = tu_upload(fresh, (float[T * V]){0}, sizeof(float) * T * V);
    void *ids = tu_upload(fresh, (int64_t[T * K]){0, 1, 2, 3, 4, 5, 6, 7, -1, 2, 4, 6},
                          sizeof(int64_t) * T * K);
    void *logp = tu_upload(fresh, (float[T * K]){-1, -2, -3, -1, -2, -3, -1, -2, -3, -1, -2, -3},
                           sizeof(float) * T * K);
    void *loss = tu_alloc_poisoned(fresh, sizeof(float));
    distil_topk_desc t;
    lp_desc(&t);
    distil_testing_fail_allocations(0);
    distil_status st = distil_topk(fresh, &t, x, ids, logp, NULL, loss, NULL);
    distil_testing_fail_allocations(-1);
    if (strcmp(g_backend, "ref") != 0) { /* ref's whole op needs no workspace */
        TU_EXPECT(fresh, DISTIL_ERR_OUT_OF_MEMORY, st);
    }
    TU_OK(fresh, distil_topk(fresh, &t, x, ids, logp, NULL, loss, NULL)); /* still usable */
    void *b[] = {x, ids, logp, loss};
    for (size_t i = 0; i < TU_LEN(b); i++) {
        distil_free(fresh, b[i]);
    }
    distil_ctx_destroy(fresh);
    repoison(g.loss, (T + 3) * 4), repoison(g.grad, T * V * 4);
    repoison(g.gxs, T * HS * 4);
}

static int run_group(const char *backend) {
    g_backend = backend;
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logp_desc),
        cmocka_unit_test(test_fused_desc),
        cmocka_unit_test(test_bad_id),
        cmocka_unit_test(test_bad_id_first_row),
        cmocka_unit_test(test_workspace_and_faults),
    };
    return cmocka_run_group_tests_name(tu_group_name("topk_bad", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
