/*
 * test_chunking.c - the fused loss does not depend on how rows are chunked: chunk_rows of 1, a
 * prime, T, more than T and 0 (auto) give the loss and gradients of chunk_rows = T on the same
 * backend, within a tight tolerance (the fp32 accumulation order of grad_Ws over chunks may
 * differ, so not necessarily bitwise). chunk_rows = T is one chunk (grad_Ws written directly in
 * the output dtype), 1 and 7 are many (7 with a partial last chunk): the core's one chunk loop,
 * which every backend but ref runs, in both of its modes. Each chunking runs twice: with the
 * backend's weight-gradient groups and with groups of three chunks (DISTIL_GW_CHUNKS=3: one
 * grad_Ws GEMM per three chunks, a partial last group; docs/DESIGN.md "Weight-gradient groups").
 */
#include "test_problems.h"

#include <stdio.h>
#include <stdlib.h>

static distil_ctx *g_ctx;
static distil_ctx *g_ctx_groups; /* DISTIL_GW_CHUNKS=3 */
static const char *g_backend;

/* docs/SPEC.md §6 head options: the student's head wider than the teacher's (its extra rows of
 * grad_Ws / grad_bs are 0 in every chunking), with softcaps, a teacher temperature and the LSE
 * outputs; and the teacher's wider, with a logit scale. */
static const tp_head head_student_wider = {
    .vt = 1031 - 17, .s_cap = 5.0f, .t_cap = 8.0f, .tau_t = 0.8f, .lse = true};
static const tp_head head_teacher_wider = {.vt = 1031 + 40, .s_scale = 1.5f, .lse = true};

/* Shapes: a small odd one, one large enough that an auto chunk may split it, and the small one
 * with the head options. */
static const tp_fused_spec shapes[] = {
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
     .labels = TP_LABELS_MIXED},
    {.t = 257,
     .v = 4099,
     .hs = 64,
     .ht = 64,
     .w_hard = 0.3f,
     .w_soft = 0.7f,
     .beta = 0.1f,
     .tau = 1.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED},
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
     .head = &head_student_wider},
    {.t = 29,
     .v = 1031,
     .hs = 32,
     .ht = 48,
     .w_hard = 0.3f,
     .w_soft = 0.7f,
     .beta = 0.9f,
     .tau = 1.0f,
     .bias_s = true,
     .bias_t = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .head = &head_teacher_wider},
};

static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};

/*
 * Against the same backend with chunk_rows = T. The math of a row does not depend on the chunk,
 * but the rounding may: sums over rows (grad_Ws, grad_bs in fp32, the loss) change order, and a
 * GPU GEMM library picks another kernel for another chunk height, so the fp32 logits of every
 * row can differ in the last bit.
 *   loss: fp32 sums of T values in another order, logits an ulp apart: 1e-6.
 *   gradients, fp32: 1e-5. grad_student_hidden = G Ws is one GEMM per chunk, and a GEMM of
 *     m = 1 rows and one of m = 257 take different BLAS kernels (gemv-like against blocked),
 *     whose fp32 sums round differently: 1.1e-6 was measured on a 2-core EPYC (OpenBLAS 0.3.21,
 *     -O3). A lost or doubled row moves the norm by >= 6e-2, so 1e-5 still catches it.
 *   gradients, bf16 / fp16: an ulp of difference in fp32 flips the rounding of G (stored in the
 *     input dtype) and of the outputs (2^-8 relative for bf16) on many elements at once: a few
 *     1e-3 in norm was measured on the H200. A real chunking bug (a row lost or counted twice)
 *     moves the norm by about sqrt(1 / T) >= 6e-2 for these shapes, so 1e-2 (docs/SPEC.md §3's bf16
 *     gradient bound) still catches it.
 */
static double chunk_tolerance(distil_dtype dt, bool grad) {
    if (!grad) {
        return 1e-6;
    }
    return dt == DISTIL_F32 ? 1e-5 : 1e-2;
}

typedef struct param {
    size_t shape;
    distil_dtype dtype;
} param;

static void check_same(const char *chunk, const tp_fused *p, const tp_fused_out *got,
                       const tp_fused_out *want) {
    const tp_fused_spec *s = &p->s;
    distil_dtype dt = p->d.dtype;
    char what[96];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s: loss[%d]", chunk, i);
        TU_CHECK_REL(what, got->loss[i], want->loss[i], chunk_tolerance(dt, false));
    }
    TU_CHECK_POISONED("loss[3]", got->loss, DISTIL_F32, 3, 1);
    snprintf(what, sizeof what, "%s: grad_student_hidden", chunk);
    TU_CHECK_WRITTEN(what, got->gxs, dt, s->t, s->hs, s->hs, false);
    TU_CHECK_TENSOR(what, got->gxs, want->gxs, dt, s->t, s->hs, s->hs, chunk_tolerance(dt, true));
    snprintf(what, sizeof what, "%s: grad_student_weight", chunk);
    TU_CHECK_WRITTEN(what, got->gws, dt, s->v, s->hs, s->hs, false);
    TU_CHECK_TENSOR(what, got->gws, want->gws, dt, s->v, s->hs, s->hs, chunk_tolerance(dt, true));
    snprintf(what, sizeof what, "%s: grad_student_bias", chunk);
    TU_CHECK_WRITTEN(what, got->gbs, dt, 1, s->v, s->v, false);
    TU_CHECK_TENSOR(what, got->gbs, want->gbs, dt, 1, s->v, s->v, chunk_tolerance(dt, true));
    for (int64_t i = 0; want->lse_s != NULL && i < s->t; i++) { /* docs/SPEC.md §6 */
        snprintf(what, sizeof what, "%s: student_lse / teacher_lse", chunk);
        TU_CHECK_REL(what, got->lse_s[i], want->lse_s[i], chunk_tolerance(dt, false));
        TU_CHECK_REL(what, got->lse_t[i], want->lse_t[i], chunk_tolerance(dt, false));
    }
    const int64_t common = p->vt < s->v ? p->vt : s->v;
    for (int64_t k = common * s->hs; k < s->v * s->hs; k++) {
        assert_true(tu_get(got->gws, dt, (size_t)k) == 0.0f);
    }
}

static void test_chunk_sizes(void **state) {
    const param *prm = *state;
    tp_fused p;
    tp_fused_make(&p, &shapes[prm->shape], prm->dtype, 77 + prm->shape);
    int64_t t = p.s.t;
    /* 10 and 15: three and two chunks, one weight-gradient group of three (two) where grad_bs
     * still accumulates over chunks */
    const int64_t chunks[] = {1, 7, 10, 15, t + 5, 0};
    tp_fused_out want, got;
    p.d.chunk_rows = t;
    tp_fused_run(g_ctx, &p, &want);
    for (size_t i = 0; i < 2 * TU_LEN(chunks); i++) {
        const bool groups = i >= TU_LEN(chunks);
        char name[64];
        p.d.chunk_rows = chunks[i % TU_LEN(chunks)];
        snprintf(name, sizeof name, "%schunk_rows=%lld", groups ? "gw_chunks=3 " : "",
                 (long long)p.d.chunk_rows);
        tp_fused_run(groups ? g_ctx_groups : g_ctx, &p, &got);
        check_same(name, &p, &got, &want);
        tp_fused_out_free(&got);
    }
    tp_fused_out_free(&want);
    tp_fused_free(&p);
}

/* The workspace of rows chunked by `chunk` on ctx, against the fp32 grad_Ws accumulator's
 * bytes: whether it holds one (at V = 4096, Hs = 1024 the accumulator, 16 MiB, dwarfs the chunk
 * buffers of these calls, under 1 MiB). */
static bool workspace_has_accumulator(distil_ctx *ctx, int64_t rows, int64_t chunk) {
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = rows, d.vocab = 4096, d.student_hidden = 1024, d.teacher_hidden = 8;
    d.dtype = DISTIL_BF16;
    d.chunk_rows = chunk;
    size_t bytes = 0;
    TU_OK(ctx, distil_fused_linear_jsd_workspace_size(ctx, &d, 1, &bytes));
    return bytes >= (size_t)d.vocab * (size_t)d.student_hidden * sizeof(float);
}

/*
 * One chunk holds no fp32 grad_Ws accumulator (grad_Ws is written in the output dtype directly,
 * docs/SPEC.md §2), nor does one weight-gradient group of several chunks; more chunks than a group
 * holds (at most 16, DISTIL_GW_CHUNKS's bound) need one.
 */
static void test_workspace_one_chunk(void **state) {
    (void)state;
    if (workspace_has_accumulator(g_ctx, 4, 4) || !workspace_has_accumulator(g_ctx, 40, 1)) {
        fail_msg("workspace: one chunk of 4 rows holds a grad_Ws accumulator, or 40 chunks do not");
    }
    /* groups of three chunks: three chunks of 2 rows are one group, six are two */
    if (workspace_has_accumulator(g_ctx_groups, 6, 2) ||
        !workspace_has_accumulator(g_ctx_groups, 6, 1)) {
        fail_msg("workspace with DISTIL_GW_CHUNKS=3: one group of three chunks holds a grad_Ws "
                 "accumulator, or two groups do not");
    }
}

/* The fused loss's workspace for p's descriptor on ctx (gradients wanted). */
static size_t fused_workspace(distil_ctx *ctx, const tp_fused *p) {
    size_t bytes = 0;
    TU_OK(ctx, distil_fused_linear_jsd_workspace_size(ctx, &p->d, 1, &bytes));
    return bytes;
}

/*
 * Groups of three chunks (DISTIL_GW_CHUNKS=3): rows that are whole groups give the result of one
 * chunk; and a lent workspace that holds the chunk but not its groups (the size of groups of one)
 * runs with groups of one, for the chunk asked (4) and for the policy's (0), with the same result.
 */
static void test_groups(void **state) {
    (void)state;
    /* the first shape with rows that are two full groups of three chunks of 4: the group's end
     * and the call's end coincide */
    tp_fused_spec spec = shapes[0];
    spec.t = 24;
    tp_fused p;
    tp_fused_make(&p, &spec, DISTIL_BF16, 123);
    tp_fused_out want, got;
    p.d.chunk_rows = p.s.t;
    tp_fused_run(g_ctx, &p, &want);
    p.d.chunk_rows = 4;
    tp_fused_run(g_ctx_groups, &p, &got);
    check_same("gw_chunks=3 chunk_rows=4", &p, &got, &want);
    tp_fused_out_free(&got);
    /* the workspace of groups of one: a context without groups */
    setenv("DISTIL_GW_CHUNKS", "1", 1);
    distil_ctx *ones = NULL;
    const distil_status s = distil_ctx_create(&ones, g_backend, 0);
    unsetenv("DISTIL_GW_CHUNKS");
    TU_OK(NULL, s);
    const size_t small = fused_workspace(ones, &p), grouped = fused_workspace(g_ctx_groups, &p);
    distil_ctx_destroy(ones);
    if (small >= grouped) {
        fail_msg("workspace of groups of one %zu bytes, of three %zu: want fewer", small, grouped);
    }
    void *ws = NULL;
    TU_OK(g_ctx_groups, distil_malloc(g_ctx_groups, small, &ws));
    TU_OK(g_ctx_groups, distil_ctx_set_workspace(g_ctx_groups, ws, small));
    const int64_t chunks[] = {4, 0};
    for (size_t i = 0; i < TU_LEN(chunks); i++) {
        char name[64];
        snprintf(name, sizeof name, "lent workspace, chunk_rows=%lld", (long long)chunks[i]);
        p.d.chunk_rows = chunks[i];
        tp_fused_run(g_ctx_groups, &p, &got);
        check_same(name, &p, &got, &want);
        tp_fused_out_free(&got);
    }
    TU_OK(g_ctx_groups, distil_ctx_set_workspace(g_ctx_groups, NULL, 0));
    distil_free(g_ctx_groups, ws);
    tp_fused_out_free(&want);
    tp_fused_free(&p);
}

/*
 * Without a hard part (weight_hard == 0) the labels may be NULL (docs/SPEC.md §2): every row
 * counts, and loss, soft part and gradients are bit for bit those of a call whose labels are
 * all valid; the hard part is 0. One chunk and several.
 */
static void test_no_labels(void **state) {
    (void)state;
    const tp_fused_spec spec = {.t = 29,
                                .v = 1031,
                                .hs = 32,
                                .ht = 48,
                                .w_hard = 0.0f,
                                .w_soft = 1.0f,
                                .beta = 0.3f,
                                .tau = 2.0f,
                                .bias_s = true,
                                .parts = true,
                                .grads = TP_WANT_ALL,
                                .labels = TP_LABELS_NONE};
    tp_fused p;
    tp_fused_make(&p, &spec, DISTIL_BF16, 91);
    int64_t *labels = p.labels;
    const int64_t chunks[] = {0, 7};
    for (size_t i = 0; i < TU_LEN(chunks); i++) {
        tp_fused_out want, got;
        p.d.chunk_rows = chunks[i];
        p.labels = labels;
        tp_fused_run(g_ctx, &p, &want);
        p.labels = NULL;
        tp_fused_run(g_ctx, &p, &got);
        TU_CHECK_BITWISE("loss", &got.loss[0], &want.loss[0], sizeof(float));
        TU_CHECK_BITWISE("soft part", &got.loss[2], &want.loss[2], sizeof(float));
        if (got.loss[1] != 0.0f) {
            fail_msg("hard part without labels is %g, want 0", (double)got.loss[1]);
        }
        const size_t es = distil_dtype_size(p.d.dtype);
        TU_CHECK_BITWISE("grad_student_hidden", got.gxs, want.gxs, p.n_xs * es);
        TU_CHECK_BITWISE("grad_student_weight", got.gws, want.gws, p.n_ws * es);
        TU_CHECK_BITWISE("grad_student_bias", got.gbs, want.gbs, (size_t)spec.v * es);
        tp_fused_out_free(&want), tp_fused_out_free(&got);
    }
    p.labels = labels;
    tp_fused_free(&p);
}

enum { N_TESTS = TU_LEN(shapes) * TU_LEN(dtypes) + 3 };
static struct CMUnitTest g_tests[N_TESTS];
static param g_params[N_TESTS];
static char g_names[N_TESTS][160];

static void build_tests(void) {
    for (size_t i = 0, k = 0; i < TU_LEN(shapes); i++) {
        for (size_t d = 0; d < TU_LEN(dtypes); d++, k++) {
            g_params[k] = (param){i, dtypes[d]};
            tp_fused_name(g_names[k], sizeof g_names[k], &shapes[i], dtypes[d]);
            g_tests[k] = (struct CMUnitTest){
                .name = g_names[k], .test_func = test_chunk_sizes, .initial_state = &g_params[k]};
        }
    }
    g_tests[N_TESTS - 3] = (struct CMUnitTest){.name = "groups: whole groups, a lent workspace",
                                               .test_func = test_groups};
    g_tests[N_TESTS - 2] =
        (struct CMUnitTest){.name = "workspace: one chunk or group, no accumulator",
                            .test_func = test_workspace_one_chunk};
    g_tests[N_TESTS - 1] =
        (struct CMUnitTest){.name = "no labels without a hard part", .test_func = test_no_labels};
}

static int group_setup(void **state) {
    (void)state;
    if (distil_ctx_create(&g_ctx, g_backend, 0) != DISTIL_OK) {
        return -1;
    }
    setenv("DISTIL_GW_CHUNKS", "3", 1); /* read once, at the context's creation */
    const distil_status s = distil_ctx_create(&g_ctx_groups, g_backend, 0);
    unsetenv("DISTIL_GW_CHUNKS");
    return s == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    distil_ctx_destroy(g_ctx_groups);
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("chunking", backend), g_tests, group_setup,
                                       group_teardown);
}

int main(void) {
    build_tests();
    return tu_run_per_backend(run_group, false);
}
