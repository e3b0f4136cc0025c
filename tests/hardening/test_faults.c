/*
 * test_faults.c - allocation-failure injection (docs/RELIABILITY.md). For both losses on every
 * backend with a device, let k = 0, 1, 2, ... allocations succeed and fail the next, until the call
 * succeeds; on a fresh context and on one that already served a smaller call. Every failing call
 * must return DISTIL_ERR_OUT_OF_MEMORY with a message, leak nothing (ASan / valgrind runs), and
 * leave the context usable: the same call with injection off then gives the bits of a clean run.
 * Also: context creation and distil_malloc under injection, and requests no machine can serve.
 */
#include "test_problems.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Under ASan a huge malloc must return NULL (as libc does) rather than abort the test.
 * (Visible and exported, see CMakeLists.txt, for GCC's shared ASan runtime.) */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}

#define HF_MAX_K 200

static const char *g_backend;
static long g_faults; /* calls failed on purpose, over the whole run */

typedef struct hf_case {
    const char *name;
    bool fused;
    tp_jsd_spec j;
    tp_fused_spec f;
    distil_dtype dt;
    bool lend; /* lend a workspace of the queried size: no workspace allocation is left */
} hf_case;

typedef struct hf_problem {
    tp_jsd j;
    tp_fused f;
} hf_problem;

/* Device copies of a problem's inputs, its outputs (loss first) and a lent workspace. */
typedef struct hf_dev {
    void *in[TP_FUSED_INPUTS];
    void *out[4];
    size_t out_bytes[4];
    void *work;
} hf_dev;

static void hf_make(const hf_case *c, hf_problem *p, int64_t rows) {
    if (c->fused) {
        tp_fused_spec s = c->f;
        s.t = rows;
        tp_fused_make(&p->f, &s, c->dt, 7);
    } else {
        tp_jsd_spec s = c->j;
        s.t = rows;
        tp_jsd_make(&p->j, &s, c->dt, 7);
    }
}

static void hf_problem_free(const hf_case *c, hf_problem *p) {
    if (c->fused) {
        tp_fused_free(&p->f);
    } else {
        tp_jsd_free(&p->j);
    }
}

/* ---------------------------------------------------------------- device side */

static void hf_outputs_jsd(distil_ctx *ctx, const tp_jsd *p, hf_dev *d) {
    size_t es = distil_dtype_size(p->d.dtype);
    d->out_bytes[0] = p->nloss * sizeof(float);
    d->out_bytes[1] = p->s.grad == TP_GRAD_OUT ? (size_t)(p->s.t * p->gs) * es : 0;
    for (int i = 0; i < 2; i++) {
        d->out[i] = d->out_bytes[i] ? tu_alloc_poisoned(ctx, d->out_bytes[i]) : NULL;
    }
}

static void hf_upload_jsd(distil_ctx *ctx, const tp_jsd *p, hf_dev *d) {
    size_t es = distil_dtype_size(p->d.dtype);
    d->in[0] = tu_upload(ctx, p->x, (size_t)(p->s.t * p->xs) * es);
    d->in[1] = tu_upload(ctx, p->y, (size_t)(p->s.t * p->ys) * es);
    d->in[2] = p->labels ? tu_upload(ctx, p->labels, (size_t)p->s.t * sizeof(int64_t)) : NULL;
    hf_outputs_jsd(ctx, p, d);
}

static void hf_upload_fused(distil_ctx *ctx, const tp_fused *p, hf_dev *d) {
    size_t es = distil_dtype_size(p->d.dtype), vb = (size_t)p->s.v * es;
    tp_fused_upload(ctx, p, d->in);
    unsigned want = tp_fused_grads(&p->s);
    d->out_bytes[0] = 3 * sizeof(float);
    d->out_bytes[1] = (want & TP_WANT_XS) ? p->n_xs * es : 0;
    d->out_bytes[2] = (want & TP_WANT_WS) ? p->n_ws * es : 0;
    d->out_bytes[3] = (want & TP_WANT_BS) ? vb : 0;
    for (int i = 0; i < 4; i++) {
        d->out[i] = d->out_bytes[i] ? tu_alloc_poisoned(ctx, d->out_bytes[i]) : NULL;
    }
}

/* Lend a workspace of exactly the queried size (injection must be off). */
static void hf_lend(distil_ctx *ctx, const hf_case *c, const hf_problem *p, hf_dev *d) {
    size_t bytes = 0;
    if (c->fused) {
        TU_OK(ctx, distil_fused_linear_jsd_workspace_size(ctx, &p->f.d, 1, &bytes));
    } else {
        TU_OK(ctx, distil_jsd_workspace_size(ctx, &p->j.d, &bytes));
    }
    d->work = NULL;
    if (bytes > 0) {
        TU_OK(ctx, distil_malloc(ctx, bytes, &d->work));
        TU_OK(ctx, distil_ctx_set_workspace(ctx, d->work, bytes));
    }
}

static void hf_upload(distil_ctx *ctx, const hf_case *c, const hf_problem *p, hf_dev *d) {
    memset(d, 0, sizeof *d);
    if (c->fused) {
        hf_upload_fused(ctx, &p->f, d);
    } else {
        hf_upload_jsd(ctx, &p->j, d);
    }
    if (c->lend) {
        hf_lend(ctx, c, p, d);
    }
}

static distil_status hf_call(distil_ctx *ctx, const hf_case *c, const hf_problem *p,
                             const hf_dev *d) {
    void *const *in = d->in;
    if (c->fused) {
        return distil_fused_linear_jsd(ctx, &p->f.d, in[0], in[1], in[2], in[3], in[4], in[5],
                                       in[6], d->out[0], d->out[1], d->out[2], d->out[3]);
    }
    return distil_jsd(ctx, &p->j.d, in[0], in[1], in[2], d->out[0], d->out[1]);
}

/* All outputs, concatenated into one host buffer of *bytes. */
static unsigned char *hf_results(distil_ctx *ctx, const hf_dev *d, size_t *bytes) {
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        n += d->out_bytes[i];
    }
    unsigned char *h = malloc(n), *at = h;
    assert_non_null(h);
    for (int i = 0; i < 4; i++) {
        tu_download(ctx, at, d->out[i], d->out_bytes[i]);
        at += d->out_bytes[i];
    }
    *bytes = n;
    return h;
}

static void hf_release(distil_ctx *ctx, hf_dev *d) {
    TU_OK(ctx, distil_ctx_set_workspace(ctx, NULL, 0));
    for (int i = 0; i < TP_FUSED_INPUTS; i++) {
        distil_free(ctx, d->in[i]);
    }
    for (int i = 0; i < 4; i++) {
        distil_free(ctx, d->out[i]);
    }
    distil_free(ctx, d->work);
}

/* ---------------------------------------------------------------- the injection loop */

static int64_t hf_rows(const hf_case *c) {
    return c->fused ? c->f.t : c->j.t;
}

/* A smaller call of the same kind first, so that the context owns a workspace and scratch
 * buffers that the measured call must grow. */
static void hf_warm_up(distil_ctx *ctx, const hf_case *c) {
    hf_problem small;
    hf_dev d;
    hf_make(c, &small, hf_rows(c) / 4 > 0 ? hf_rows(c) / 4 : 1);
    hf_upload(ctx, c, &small, &d);
    TU_OK(ctx, hf_call(ctx, c, &small, &d));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    hf_release(ctx, &d);
    hf_problem_free(c, &small);
}

/* The results of a context that never saw a fault. */
static unsigned char *hf_clean(const hf_case *c, const hf_problem *p, size_t *bytes) {
    distil_ctx *ctx = tu_ctx(g_backend);
    hf_dev d;
    hf_upload(ctx, c, p, &d);
    TU_OK(ctx, hf_call(ctx, c, p, &d));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    unsigned char *r = hf_results(ctx, &d, bytes);
    hf_release(ctx, &d);
    distil_ctx_destroy(ctx);
    return r;
}

/* A call that failed on purpose: the status, the message, and the context after it. */
static void hf_check_failure(distil_ctx *ctx, const hf_case *c, const hf_problem *p, hf_dev *d,
                             distil_status s) {
    TU_EXPECT(ctx, DISTIL_ERR_OUT_OF_MEMORY, s);
    TU_CHECK_MESSAGE(ctx, "alloc|memory");
    g_faults++;
    TU_OK(ctx, distil_ctx_synchronize(ctx)); /* nothing deferred from a refused call */
    for (int i = 0; i < 4; i++) {
        distil_free(ctx, d->out[i]);
        d->out[i] = d->out_bytes[i] ? tu_alloc_poisoned(ctx, d->out_bytes[i]) : NULL;
    }
    TU_OK(ctx, hf_call(ctx, c, p, d));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
}

/* One attempt with k allocations allowed; true when the call itself succeeded. */
static bool hf_attempt(const hf_case *c, const hf_problem *p, long k, bool warm,
                       const unsigned char *clean, size_t clean_bytes) {
    distil_ctx *ctx = tu_ctx(g_backend);
    if (warm) {
        hf_warm_up(ctx, c);
    }
    hf_dev d;
    hf_upload(ctx, c, p, &d);
    distil_testing_fail_allocations(k);
    distil_status s = hf_call(ctx, c, p, &d);
    distil_testing_fail_allocations(-1);
    if (s == DISTIL_OK) {
        TU_OK(ctx, distil_ctx_synchronize(ctx));
    } else {
        hf_check_failure(ctx, c, p, &d, s);
    }
    size_t n = 0;
    unsigned char *r = hf_results(ctx, &d, &n);
    assert_int_equal(n, clean_bytes);
    TU_CHECK_BITWISE(c->name, r, clean, n);
    free(r);
    hf_release(ctx, &d);
    distil_ctx_destroy(ctx);
    return s == DISTIL_OK;
}

static void hf_run(const hf_case *c, bool warm) {
    hf_problem p;
    hf_make(c, &p, hf_rows(c));
    size_t n = 0;
    unsigned char *clean = hf_clean(c, &p, &n);
    long k = 0;
    while (k < HF_MAX_K && !hf_attempt(c, &p, k, warm, clean, n)) {
        k++;
    }
    assert_true(k < HF_MAX_K);
    printf("  %ld injected failures before success\n", k);
    if (c->fused && !c->lend && !warm) {
        /* A fresh context must allocate its workspace: the very first allocation is asked. */
        assert_true(k > 0);
    }
    free(clean);
    hf_problem_free(c, &p);
}

static void test_fresh(void **state) {
    hf_run(*state, false);
}

static void test_used(void **state) {
    hf_run(*state, true);
}

/* ---------------------------------------------------------------- other allocations */

static void test_create(void **state) {
    (void)state;
    long k = 0;
    for (; k < HF_MAX_K; k++) {
        distil_ctx *ctx = (distil_ctx *)&k;
        distil_testing_fail_allocations(k);
        distil_status s = distil_ctx_create(&ctx, g_backend, 0);
        distil_testing_fail_allocations(-1);
        if (s == DISTIL_OK) {
            distil_ctx_destroy(ctx);
            break;
        }
        assert_null(ctx);
        assert_true(s == DISTIL_ERR_OUT_OF_MEMORY || s == DISTIL_ERR_NOT_AVAILABLE);
        assert_true(distil_ctx_last_error(NULL)[0] != '\0');
        g_faults++;
    }
    assert_true(k < HF_MAX_K);
    printf("  ctx_create: %ld injected failures before success\n", k);
}

static void test_malloc_failure(void **state) {
    (void)state;
    distil_ctx *ctx = tu_ctx(g_backend);
    void *p = &p;
    distil_testing_fail_allocations(0);
    distil_status s = distil_malloc(ctx, 4096, &p);
    distil_testing_fail_allocations(-1);
    TU_EXPECT(ctx, DISTIL_ERR_OUT_OF_MEMORY, s);
    TU_CHECK_MESSAGE(ctx, "alloc|memory");
    assert_null(p);
    g_faults++;
    TU_OK(ctx, distil_malloc(ctx, 4096, &p));
    assert_non_null(p);
    distil_free(ctx, p);
    distil_ctx_destroy(ctx);
}

/* Sizes no machine has: refused as out of memory, never rounded into a small allocation. */
static void test_huge_malloc(void **state) {
    (void)state;
    distil_ctx *ctx = tu_ctx(g_backend);
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 100, (size_t)1 << 62, (size_t)1 << 50};
    for (size_t i = 0; i < TU_LEN(sizes); i++) {
        void *p = &p;
        distil_status s = distil_malloc(ctx, sizes[i], &p);
        if (s != DISTIL_ERR_OUT_OF_MEMORY || p != NULL) {
            print_error("malloc(%zu) returned %s with %p\n", sizes[i], distil_status_string(s), p);
            fail();
        }
        TU_CHECK_MESSAGE(ctx, "alloc|memory|exceed");
    }
    void *p = NULL;
    TU_OK(ctx, distil_malloc(ctx, 256, &p)); /* the context still serves */
    distil_free(ctx, p);
    distil_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------- cases */

static const hf_case g_cases[] = {
    {.name = "jsd f32 batchmean",
     .j = {.t = 37, .v = 300, .beta = 0.5f, .labels = TP_LABELS_MIXED, .grad = TP_GRAD_OUT},
     .dt = DISTIL_F32},
    {.name = "jsd bf16 none, padded, loss only",
     .j = {.t = 21,
           .v = 129,
           .pad_x = 3,
           .pad_y = 1,
           .beta = 0.25f,
           .red = DISTIL_REDUCTION_NONE,
           .grad = TP_GRAD_NULL},
     .dt = DISTIL_BF16},
    {.name = "jsd f16 sum, lent workspace",
     .j = {.t = 16, .v = 77, .beta = 1.0f, .red = DISTIL_REDUCTION_SUM, .grad = TP_GRAD_OUT},
     .dt = DISTIL_F16,
     .lend = true},
    {.name = "fused bf16 all grads, 4 chunks",
     .fused = true,
     .f = {.t = 19,
           .v = 200,
           .hs = 16,
           .ht = 24,
           .w_hard = 0.5f,
           .w_soft = 0.5f,
           .beta = 0.5f,
           .tau = 2.0f,
           .bias_s = true,
           .bias_t = true,
           .parts = true,
           .grads = TP_WANT_ALL,
           .labels = TP_LABELS_MIXED,
           .chunk = 5},
     .dt = DISTIL_BF16},
    {.name = "fused f32 grads xs and Ws, auto chunk",
     .fused = true,
     .f = {.t = 23,
           .v = 150,
           .hs = 8,
           .ht = 12,
           .w_hard = 1.0f,
           .w_soft = 0.3f,
           .beta = 0.0f,
           .tau = 1.0f,
           .grads = TP_WANT_XS | TP_WANT_WS},
     .dt = DISTIL_F32},
    {.name = "fused f16 loss only",
     .fused = true,
     .f = {.t = 12,
           .v = 64,
           .hs = 8,
           .ht = 8,
           .w_hard = 0.5f,
           .w_soft = 0.5f,
           .beta = 1.0f,
           .tau = 1.0f},
     .dt = DISTIL_F16},
    {.name = "fused bf16 all grads, lent workspace",
     .fused = true,
     .f = {.t = 17,
           .v = 96,
           .hs = 8,
           .ht = 16,
           .w_hard = 0.5f,
           .w_soft = 0.5f,
           .beta = 0.5f,
           .tau = 1.0f,
           .bias_s = true,
           .grads = TP_WANT_ALL,
           .chunk = 4},
     .dt = DISTIL_BF16,
     .lend = true},
};

#define HF_N_CASES ((int)TU_LEN(g_cases))

static struct CMUnitTest g_tests[2 * HF_N_CASES + 3];
static char g_names[2 * HF_N_CASES][96];

static int run_group(const char *backend) {
    g_backend = backend;
    int n = 0;
    for (int i = 0; i < HF_N_CASES; i++) {
        for (int used = 0; used < 2; used++) {
            snprintf(g_names[n], sizeof g_names[n], "%s, %s context", g_cases[i].name,
                     used ? "used" : "fresh");
            g_tests[n] = (struct CMUnitTest){.name = g_names[n],
                                             .test_func = used ? test_used : test_fresh,
                                             .initial_state = (void *)&g_cases[i]};
            n++;
        }
    }
    g_tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_create);
    g_tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_malloc_failure);
    g_tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_huge_malloc);
    int failed =
        _cmocka_run_group_tests(tu_group_name("faults", backend), g_tests, (size_t)n, NULL, NULL);
    printf("faults[%s]: %ld allocation failures injected in all\n", backend, g_faults);
    return failed;
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
