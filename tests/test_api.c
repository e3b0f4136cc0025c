/*
 * test_api.c - the non-numeric public API: version, status, dtype and divergence names, backend
 * enumeration, context creation by name / "auto" / DISTIL_BACKEND, last_error, NULL handling,
 * memory, streams, workspace lending and descriptor versioning (struct_size).
 */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- library-wide */

static void test_version(void **state) {
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DISTIL_VERSION_MAJOR, DISTIL_VERSION_MINOR,
             DISTIL_VERSION_PATCH);
    assert_int_equal(distil_version_number(), DISTIL_VERSION_NUMBER);
    assert_string_equal(distil_version_string(), want);
}

static void test_status_strings(void **state) {
    (void)state;
    const char *seen[DISTIL_ERR_VERSION + 1];
    for (int s = DISTIL_OK; s <= DISTIL_ERR_VERSION; s++) {
        seen[s] = distil_status_string((distil_status)s);
        assert_non_null(seen[s]);
        assert_true(strlen(seen[s]) > 0);
        assert_string_not_equal(seen[s], "unknown status");
        for (int t = 0; t < s; t++) {
            assert_string_not_equal(seen[s], seen[t]);
        }
    }
    assert_string_equal(distil_status_string((distil_status)99), "unknown status");
    assert_string_equal(distil_status_string((distil_status)-1), "unknown status");
}

static void test_dtypes(void **state) {
    (void)state;
    assert_int_equal(distil_dtype_size(DISTIL_F32), 4);
    assert_int_equal(distil_dtype_size(DISTIL_BF16), 2);
    assert_int_equal(distil_dtype_size(DISTIL_F16), 2);
    assert_int_equal(distil_dtype_size((distil_dtype)7), 0);
    assert_string_equal(distil_dtype_name(DISTIL_F32), "f32");
    assert_string_equal(distil_dtype_name(DISTIL_BF16), "bf16");
    assert_string_equal(distil_dtype_name(DISTIL_F16), "f16");
    assert_string_equal(distil_dtype_name((distil_dtype)7), "unknown");
}

/* Position of name in the documented priority order, -1 if it is not a backend name. */
static int priority_rank(const char *name) {
    static const char *order[] = {"cuda", "hip", "opencl", "cpu", "ref"};
    for (int i = 0; i < (int)TU_LEN(order); i++) {
        if (strcmp(order[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

/* docs/SPEC.md §6: the divergences' names, their pinned values, and the lookup's refusals. */
static void test_divergence_names(void **state) {
    (void)state;
    static const char *const pinned[] = {"jsd",     "forward_kl",      "reverse_kl",
                                         "skew_kl", "skew_reverse_kl", "tvd"};
    for (int d = 0; d < (int)TU_LEN(pinned); d++) {
        assert_string_equal(distil_divergence_name((distil_divergence)d), pinned[d]);
    }
    int n = 0; /* every name round-trips, and the names end in NULL */
    for (; distil_divergence_name((distil_divergence)n) != NULL; n++) {
        distil_divergence got = (distil_divergence)-1;
        assert_int_equal(
            distil_divergence_from_name(distil_divergence_name((distil_divergence)n), &got),
            DISTIL_OK);
        assert_int_equal(got, n);
    }
    assert_true(n >= (int)TU_LEN(pinned));
    assert_null(distil_divergence_name((distil_divergence)-1));
    assert_null(distil_divergence_name((distil_divergence)(n + 1000)));

    const struct {
        const char *name;
        const char *word; /* what the message names */
    } bad[] = {{"JSD", "JSD"}, {"", "name"}, {"jsd ", "forward_kl"}, {"kl", "tvd"}};
    for (size_t i = 0; i < TU_LEN(bad); i++) {
        distil_divergence d = DISTIL_DIVERGENCE_TVD;
        assert_int_equal(distil_divergence_from_name(bad[i].name, &d), DISTIL_ERR_INVALID_ARG);
        assert_int_equal(d, DISTIL_DIVERGENCE_TVD); /* untouched */
        assert_non_null(strstr(distil_ctx_last_error(NULL), bad[i].word));
    }
    distil_divergence d = DISTIL_DIVERGENCE_TVD;
    assert_int_equal(distil_divergence_from_name(NULL, &d), DISTIL_ERR_INVALID_ARG);
    assert_int_equal(d, DISTIL_DIVERGENCE_TVD);
    assert_non_null(strstr(distil_ctx_last_error(NULL), "name is NULL"));
    assert_int_equal(distil_divergence_from_name("jsd", NULL), DISTIL_ERR_INVALID_ARG);
    assert_non_null(strstr(distil_ctx_last_error(NULL), "divergence is NULL"));
}

static void test_backend_enumeration(void **state) {
    (void)state;
    int count = distil_backend_count();
    assert_true(count >= 1);
    assert_null(distil_backend_name(-1));
    assert_null(distil_backend_name(count));
    int last_rank = -1;
    for (int i = 0; i < count; i++) {
        const char *name = distil_backend_name(i);
        assert_non_null(name);
        int rank = priority_rank(name);
        assert_true(rank > last_rank); /* known, unique, in priority order */
        last_rank = rank;
        int n = -1;
        distil_status s = distil_backend_device_count(name, &n);
        assert_true((s == DISTIL_OK && n >= 1) || (s == DISTIL_ERR_NOT_AVAILABLE && n == 0));
    }
    assert_string_equal(distil_backend_name(count - 1), "ref"); /* always compiled, last */
    int n = -1;
    TU_OK(NULL, distil_backend_device_count("ref", &n));
    assert_true(n >= 1);
    n = -1;
    TU_EXPECT(NULL, DISTIL_ERR_INVALID_ARG, distil_backend_device_count("nosuch", &n));
    assert_int_equal(n, 0);
    assert_true(strlen(distil_ctx_last_error(NULL)) > 0);
}

/* Every name that must fail: unknown, compiled without a device, or not compiled at all. */
static void test_ctx_create_by_name(void **state) {
    (void)state;
    distil_ctx *ctx = (distil_ctx *)&ctx; /* must be reset to NULL on failure */
    distil_status s = distil_ctx_create(&ctx, "nosuch", 0);
    assert_true(s == DISTIL_ERR_INVALID_ARG || s == DISTIL_ERR_NOT_AVAILABLE);
    assert_null(ctx);
    TU_CHECK_MESSAGE(NULL, "nosuch");

    static const char *known[] = {"cuda", "hip", "opencl", "cpu"};
    for (size_t i = 0; i < TU_LEN(known); i++) {
        if (tu_backend_has_device(known[i])) {
            continue;
        }
        ctx = (distil_ctx *)&ctx;
        s = distil_ctx_create(&ctx, known[i], 0);
        assert_true(s == DISTIL_ERR_NOT_AVAILABLE || s == DISTIL_ERR_INVALID_ARG);
        assert_null(ctx); /* no silent fallback to another backend */
        assert_true(strlen(distil_ctx_last_error(NULL)) > 0);
    }
    ctx = (distil_ctx *)&ctx;
    assert_int_not_equal(distil_ctx_create(&ctx, "ref", 1000), DISTIL_OK);
    assert_null(ctx);
    assert_true(strlen(distil_ctx_last_error(NULL)) > 0);

    TU_OK(NULL, distil_ctx_create(&ctx, "ReF", 0)); /* case-insensitive */
    assert_string_equal(distil_ctx_backend_name(ctx), "ref");
    assert_string_equal(distil_ctx_last_error(ctx), "");
    assert_non_null(distil_ctx_device_name(ctx));
    distil_ctx_destroy(ctx);
}

/* The first compiled backend with a device after `skip` (NULL: none skipped). */
static const char *first_with_device(const char *skip) {
    for (int i = 0; i < distil_backend_count(); i++) {
        const char *name = distil_backend_name(i);
        if ((skip == NULL || strcmp(name, skip) != 0) && tu_backend_has_device(name)) {
            return name;
        }
    }
    return NULL;
}

static void expect_backend(const char *arg, const char *want) {
    distil_ctx *ctx = NULL;
    TU_OK(NULL, distil_ctx_create(&ctx, arg, -1));
    assert_string_equal(distil_ctx_backend_name(ctx), want);
    distil_ctx_destroy(ctx);
}

/* "auto" takes the first backend (in priority order) with a device, except that an OpenCL
 * device that is a CPU ranks below the cpu backend; the test cannot see the device type, so for
 * opencl it accepts either. */
static void expect_auto(const char *arg) {
    const char *first = first_with_device(NULL);
    distil_ctx *ctx = NULL;
    TU_OK(NULL, distil_ctx_create(&ctx, arg, -1));
    const char *got = distil_ctx_backend_name(ctx);
    if (strcmp(first, "opencl") == 0 && strcmp(got, "opencl") != 0) {
        assert_string_equal(got, first_with_device("opencl"));
    } else {
        assert_string_equal(got, first);
    }
    distil_ctx_destroy(ctx);
}

static void test_ctx_create_auto_and_env(void **state) {
    (void)state;
    unsetenv("DISTIL_BACKEND");
    unsetenv("DISTIL_DEVICE");
    expect_auto(NULL);
    expect_auto("auto");
    expect_auto("AUTO");

    setenv("DISTIL_BACKEND", "ref", 1);
    expect_backend(NULL, "ref");
    expect_backend("auto", "ref");

    /* A backend named in the environment that does not exist: an error, never a fallback. */
    setenv("DISTIL_BACKEND", "nosuch", 1);
    distil_ctx *ctx = (distil_ctx *)&ctx;
    assert_int_not_equal(distil_ctx_create(&ctx, NULL, 0), DISTIL_OK);
    assert_null(ctx);
    TU_CHECK_MESSAGE(NULL, "nosuch");
    ctx = (distil_ctx *)&ctx;
    assert_int_not_equal(distil_ctx_create(&ctx, "auto", 0), DISTIL_OK);
    assert_null(ctx);
    expect_backend("ref", "ref"); /* an explicit argument wins over the environment */
    unsetenv("DISTIL_BACKEND");

    setenv("DISTIL_DEVICE", "1000", 1); /* device -1 reads DISTIL_DEVICE */
    ctx = (distil_ctx *)&ctx;
    assert_int_not_equal(distil_ctx_create(&ctx, "ref", -1), DISTIL_OK);
    assert_null(ctx);
    setenv("DISTIL_DEVICE", "0", 1);
    expect_backend("ref", "ref");
    unsetenv("DISTIL_DEVICE");

    /* DISTIL_GW_CHUNKS (chunks per weight-gradient GEMM): a count in [1, 16], else an error that
     * names it */
    const char *bad[] = {"0", "17", "2x", "-1"};
    for (size_t i = 0; i < TU_LEN(bad); i++) {
        setenv("DISTIL_GW_CHUNKS", bad[i], 1);
        ctx = (distil_ctx *)&ctx;
        assert_int_not_equal(distil_ctx_create(&ctx, "ref", 0), DISTIL_OK);
        assert_null(ctx);
        TU_CHECK_MESSAGE(NULL, "DISTIL_GW_CHUNKS");
    }
    setenv("DISTIL_GW_CHUNKS", "16", 1);
    expect_backend("ref", "ref");
    unsetenv("DISTIL_GW_CHUNKS");
}

static void test_null_handling(void **state) {
    (void)state;
    distil_ctx_destroy(NULL);
    assert_string_equal(distil_ctx_backend_name(NULL), "");
    assert_non_null(distil_ctx_device_name(NULL));
    assert_non_null(distil_ctx_last_error(NULL));
    assert_int_not_equal(distil_ctx_create(NULL, "ref", 0), DISTIL_OK);
    assert_int_not_equal(distil_ctx_synchronize(NULL), DISTIL_OK);
    assert_int_not_equal(distil_ctx_set_stream(NULL, NULL), DISTIL_OK);
    int n = -1;
    assert_int_not_equal(distil_backend_device_count(NULL, &n), DISTIL_OK);
    assert_int_not_equal(distil_backend_device_count("ref", NULL), DISTIL_OK);
}

static void test_desc_defaults(void **state) {
    (void)state;
    distil_jsd_desc j;
    memset(&j, 0x5A, sizeof j);
    distil_jsd_desc_init(&j);
    assert_int_equal(j.struct_size, sizeof j);
    assert_int_equal(j.student_stride, 0);
    assert_int_equal(j.teacher_stride, 0);
    assert_int_equal(j.grad_stride, 0);
    assert_int_equal(j.dtype, DISTIL_F32);
    assert_int_equal(j.ignore_index, -100);
    assert_int_equal(j.reduction, DISTIL_REDUCTION_BATCHMEAN);
    assert_true(j.grad_scale == 1.0f);
    assert_true(j.beta >= 0.0f && j.beta <= 1.0f);

    distil_fused_linear_jsd_desc f;
    memset(&f, 0x5A, sizeof f);
    distil_fused_linear_jsd_desc_init(&f);
    assert_int_equal(f.struct_size, sizeof f);
    assert_int_equal(f.dtype, DISTIL_BF16);
    assert_true(f.weight_hard == 0.5f && f.weight_soft == 0.5f);
    assert_true(f.beta == 0.5f && f.temperature == 1.0f);
    assert_int_equal(f.ignore_index, -100);
    assert_int_equal(f.chunk_rows, 0);
    assert_int_equal(f.return_parts, 0);
    assert_int_equal(f.teacher_vocab, 0);
    assert_int_equal(f.student_weight_hidden, 0);
    assert_int_equal(f.teacher_weight_hidden, 0);
}

/* ---------------------------------------------------------------- per backend */

static const char *g_backend;
static distil_ctx *g_ctx;

static int backend_setup(void **state) {
    (void)state;
    return distil_ctx_create(&g_ctx, g_backend, 0) == DISTIL_OK ? 0 : -1;
}

static int backend_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    g_ctx = NULL;
    return 0;
}

static bool host_backend(void) {
    return strcmp(g_backend, "cpu") == 0 || strcmp(g_backend, "ref") == 0;
}

static void test_ctx_basics(void **state) {
    (void)state;
    assert_string_equal(distil_ctx_backend_name(g_ctx), g_backend);
    assert_true(strlen(distil_ctx_device_name(g_ctx)) > 0);
    assert_string_equal(distil_ctx_last_error(g_ctx), "");
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    TU_OK(g_ctx, distil_ctx_set_stream(g_ctx, DISTIL_STREAM_OWN));
    if (host_backend()) {
        int dummy;
        TU_OK(g_ctx, distil_ctx_set_stream(g_ctx, NULL));
        TU_EXPECT(g_ctx, DISTIL_ERR_UNSUPPORTED, distil_ctx_set_stream(g_ctx, &dummy));
        assert_true(strlen(distil_ctx_last_error(g_ctx)) > 0);
        TU_OK(g_ctx, distil_ctx_set_stream(g_ctx, DISTIL_STREAM_OWN));
    }
}

static void test_memory(void **state) {
    (void)state;
    void *p = &p;
    TU_OK(g_ctx, distil_malloc(g_ctx, 0, &p));
    assert_null(p);
    distil_free(g_ctx, NULL);
    TU_OK(g_ctx, distil_malloc(g_ctx, 1000, &p));
    assert_non_null(p);
    if (host_backend()) {
        assert_int_equal((uintptr_t)p % 256, 0);
    }
    unsigned char in[1000], out[1000];
    for (int i = 0; i < 1000; i++) {
        in[i] = (unsigned char)(i * 7 + 3);
    }
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, p, in, sizeof in));
    memset(in, 0, sizeof in); /* the copy is synchronous: the host buffer may be reused */
    TU_OK(g_ctx, distil_memcpy_to_host(g_ctx, out, p, sizeof out));
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(out[i], (unsigned char)(i * 7 + 3));
    }
    distil_free(g_ctx, p);
}

/* A small distil_fused_linear_jsd problem on g_ctx (fp32, T = 9, V = 37). */
typedef struct fused_problem {
    distil_fused_linear_jsd_desc d;
    void *xs, *ws, *bs, *xt, *wt, *labels, *loss, *gxs, *gws, *gbs;
} fused_problem;

static void fused_problem_make(fused_problem *p) {
    enum { T = 9, V = 37, HS = 8, HT = 12 };
    distil_fused_linear_jsd_desc_init(&p->d);
    p->d.rows = T, p->d.vocab = V, p->d.student_hidden = HS, p->d.teacher_hidden = HT;
    p->d.dtype = DISTIL_F32;
    tu_rng r = tu_rng_make(11);
    float xs[T * HS], ws[V * HS], bs[V], xt[T * HT], wt[V * HT];
    tu_fill_normal(&r, xs, DISTIL_F32, T * HS, 1.0);
    tu_fill_normal(&r, ws, DISTIL_F32, V * HS, 0.7);
    tu_fill_normal(&r, bs, DISTIL_F32, V, 0.5);
    tu_fill_normal(&r, xt, DISTIL_F32, T * HT, 1.0);
    tu_fill_normal(&r, wt, DISTIL_F32, V * HT, 0.6);
    int64_t labels[T];
    for (int i = 0; i < T; i++) {
        labels[i] = i == 4 ? -100 : tu_rand_int(&r, V);
    }
    p->xs = tu_upload(g_ctx, xs, sizeof xs), p->ws = tu_upload(g_ctx, ws, sizeof ws);
    p->bs = tu_upload(g_ctx, bs, sizeof bs), p->xt = tu_upload(g_ctx, xt, sizeof xt);
    p->wt = tu_upload(g_ctx, wt, sizeof wt), p->labels = tu_upload(g_ctx, labels, sizeof labels);
    p->loss = tu_alloc_poisoned(g_ctx, 3 * sizeof(float));
    p->gxs = tu_alloc_poisoned(g_ctx, sizeof xs);
    p->gws = tu_alloc_poisoned(g_ctx, sizeof ws);
    p->gbs = tu_alloc_poisoned(g_ctx, sizeof bs);
}

static void fused_problem_free(fused_problem *p) {
    void *all[] = {p->xs, p->ws, p->bs, p->xt, p->wt, p->labels, p->loss, p->gxs, p->gws, p->gbs};
    for (size_t i = 0; i < TU_LEN(all); i++) {
        distil_free(g_ctx, all[i]);
    }
}

static distil_status fused_run(fused_problem *p) {
    return distil_fused_linear_jsd(g_ctx, &p->d, p->xs, p->ws, p->bs, p->xt, p->wt, NULL, p->labels,
                                   p->loss, p->gxs, p->gws, p->gbs);
}

/* All outputs of the last fused_run, downloaded into one host buffer. */
typedef struct fused_out {
    float loss[1], gxs[9 * 8], gws[37 * 8], gbs[37];
} fused_out;

static void fused_download(fused_problem *p, fused_out *o) {
    tu_download(g_ctx, o->loss, p->loss, sizeof o->loss);
    tu_download(g_ctx, o->gxs, p->gxs, sizeof o->gxs);
    tu_download(g_ctx, o->gws, p->gws, sizeof o->gws);
    tu_download(g_ctx, o->gbs, p->gbs, sizeof o->gbs);
}

static void fused_poison_outputs(fused_problem *p) {
    fused_out o;
    tu_poison(&o, sizeof o);
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, p->loss, o.loss, sizeof o.loss));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, p->gxs, o.gxs, sizeof o.gxs));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, p->gws, o.gws, sizeof o.gws));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, p->gbs, o.gbs, sizeof o.gbs));
}

/* The message of the last lent-workspace run (later calls may replace the context's). */
static char g_lent_msg[256];

/* Run with the context's own workspace, then with `bytes` of lent workspace. */
static distil_status fused_run_lent(fused_problem *p, size_t bytes, fused_out *own,
                                    fused_out *lent) {
    fused_poison_outputs(p);
    TU_OK(g_ctx, fused_run(p));
    fused_download(p, own);
    void *workspace = NULL;
    TU_OK(g_ctx, distil_malloc(g_ctx, bytes, &workspace));
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, workspace, bytes));
    fused_poison_outputs(p);
    distil_status s = fused_run(p);
    snprintf(g_lent_msg, sizeof g_lent_msg, "%s", distil_ctx_last_error(g_ctx));
    fused_download(p, lent);
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, NULL, 0));
    distil_free(g_ctx, workspace);
    return s;
}

static void test_workspace_fused(void **state) {
    (void)state;
    fused_problem p;
    fused_problem_make(&p);
    p.d.chunk_rows = 4;
    size_t need = 0;
    TU_OK(g_ctx, distil_fused_linear_jsd_workspace_size(g_ctx, &p.d, 1, &need));
    assert_true(need > 0); /* at least the fp32 logits of a chunk */
    fused_out own, lent;

    /* Exactly enough: the same bits as with the context's own workspace. */
    TU_OK(g_ctx, fused_run_lent(&p, need, &own, &lent));
    TU_CHECK_BITWISE("lent workspace vs own", &lent, &own, sizeof own);

    /* One byte short: refused with a message, nothing written. */
    fused_out poisoned;
    tu_poison(&poisoned, sizeof poisoned);
    TU_EXPECT(g_ctx, DISTIL_ERR_WORKSPACE, fused_run_lent(&p, need - 1, &own, &lent));
    assert_non_null(strstr(g_lent_msg, "workspace"));
    TU_CHECK_BITWISE("outputs after DISTIL_ERR_WORKSPACE", &lent, &poisoned, sizeof lent);

    /* chunk_rows = 0 with a lent workspace that fits only 1-row chunks: picks a chunk that fits. */
    p.d.chunk_rows = 1;
    TU_OK(g_ctx, distil_fused_linear_jsd_workspace_size(g_ctx, &p.d, 1, &need));
    p.d.chunk_rows = 0;
    TU_OK(g_ctx, fused_run_lent(&p, need, &own, &lent));
    TU_CHECK_REL("loss, auto chunk in a small workspace", lent.loss[0], own.loss[0], 1e-6);
    TU_CHECK_TENSOR("grad_student_weight, auto chunk in a small workspace", lent.gws, own.gws,
                    DISTIL_F32, 37, 8, 8, 1e-6);

    /* Unset again: the own workspace grows as needed. */
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, NULL, 0));
    p.d.chunk_rows = 9;
    TU_OK(g_ctx, fused_run(&p));
    fused_problem_free(&p);
}

static void test_workspace_jsd(void **state) {
    (void)state;
    enum { T = 5, V = 33 };
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = T, d.vocab = V, d.beta = 0.3f;
    tu_rng r = tu_rng_make(12);
    float x[T * V], y[T * V];
    tu_fill_logp(&r, x, DISTIL_F32, T, V, V, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, V, 2.0, NULL);
    int64_t labels[T] = {1, -100, 3, 4, 5};
    void *dx = tu_upload(g_ctx, x, sizeof x), *dy = tu_upload(g_ctx, y, sizeof y);
    void *dl = tu_upload(g_ctx, labels, sizeof labels);
    void *loss = tu_alloc_poisoned(g_ctx, sizeof(float)),
         *grad = tu_alloc_poisoned(g_ctx, sizeof x);
    size_t need = 0;
    TU_OK(g_ctx, distil_jsd_workspace_size(g_ctx, &d, &need));
    struct {
        float loss, grad[T * V];
    } own, lent;
    TU_OK(g_ctx, distil_jsd(g_ctx, &d, dx, dy, dl, loss, grad));
    tu_download(g_ctx, &own.loss, loss, sizeof own.loss);
    tu_download(g_ctx, own.grad, grad, sizeof own.grad);

    void *workspace = NULL;
    TU_OK(g_ctx, distil_malloc(g_ctx, need + 256, &workspace));
    if (need > 0) { /* one byte short is refused */
        TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, workspace, need - 1));
        TU_EXPECT(g_ctx, DISTIL_ERR_WORKSPACE, distil_jsd(g_ctx, &d, dx, dy, dl, loss, grad));
        assert_true(strlen(distil_ctx_last_error(g_ctx)) > 0);
    }
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, workspace, need + 256));
    TU_OK(g_ctx, distil_jsd(g_ctx, &d, dx, dy, dl, loss, grad));
    tu_download(g_ctx, &lent.loss, loss, sizeof lent.loss);
    tu_download(g_ctx, lent.grad, grad, sizeof lent.grad);
    TU_CHECK_BITWISE("jsd with a lent workspace vs own", &lent, &own, sizeof own);
    TU_OK(g_ctx, distil_ctx_set_workspace(g_ctx, NULL, 0));
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_ctx_set_workspace(g_ctx, NULL, 64));
    distil_free(g_ctx, workspace);
    void *all[] = {dx, dy, dl, loss, grad};
    for (size_t i = 0; i < TU_LEN(all); i++) {
        distil_free(g_ctx, all[i]);
    }
}

/* A descriptor from a mismatched header is refused before anything else is looked at. */
static void test_struct_size(void **state) {
    (void)state;
    size_t sizes[] = {0, sizeof(distil_jsd_desc) / 2, sizeof(distil_jsd_desc) + 8};
    float loss = 0.0f;
    size_t bytes = 0;
    for (size_t i = 0; i < TU_LEN(sizes); i++) {
        distil_jsd_desc d;
        distil_jsd_desc_init(&d);
        d.rows = 1, d.vocab = 1, d.struct_size = sizes[i];
        TU_EXPECT(g_ctx, DISTIL_ERR_VERSION,
                  distil_jsd(g_ctx, &d, &loss, &loss, NULL, &loss, NULL));
        TU_CHECK_MESSAGE(g_ctx, "struct_size");
        TU_EXPECT(g_ctx, DISTIL_ERR_VERSION, distil_jsd_workspace_size(g_ctx, &d, &bytes));
    }
    size_t fsizes[] = {0, sizeof(distil_fused_linear_jsd_desc) - 8,
                       sizeof(distil_fused_linear_jsd_desc) + 8};
    for (size_t i = 0; i < TU_LEN(fsizes); i++) {
        distil_fused_linear_jsd_desc d;
        distil_fused_linear_jsd_desc_init(&d);
        d.rows = 0, d.vocab = 1, d.student_hidden = 1, d.teacher_hidden = 1;
        d.struct_size = fsizes[i];
        TU_EXPECT(g_ctx, DISTIL_ERR_VERSION,
                  distil_fused_linear_jsd(g_ctx, &d, &loss, &loss, NULL, NULL, &loss, NULL, NULL,
                                          &loss, NULL, NULL, NULL));
        TU_CHECK_MESSAGE(g_ctx, "struct_size");
        TU_EXPECT(g_ctx, DISTIL_ERR_VERSION,
                  distil_fused_linear_jsd_workspace_size(g_ctx, &d, 1, &bytes));
    }
}

static int run_backend_group(const char *backend) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_basics),    cmocka_unit_test(test_memory),
        cmocka_unit_test(test_workspace_jsd), cmocka_unit_test(test_workspace_fused),
        cmocka_unit_test(test_struct_size),
    };
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("api", backend), tests, backend_setup,
                                       backend_teardown);
}

int main(void) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_divergence_names),
        cmocka_unit_test(test_backend_enumeration),
        cmocka_unit_test(test_ctx_create_by_name),
        cmocka_unit_test(test_ctx_create_auto_and_env),
        cmocka_unit_test(test_null_handling),
        cmocka_unit_test(test_desc_defaults),
    };
    tu_apply_env();
    int failed = cmocka_run_group_tests_name("api", tests, NULL, NULL);
    int per_backend = tu_run_per_backend(run_backend_group, true);
    return failed + (per_backend == TU_EXIT_SKIPPED ? 0 : per_backend);
}
