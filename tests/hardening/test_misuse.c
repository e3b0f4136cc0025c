/*
 * test_misuse.c - docs/SPEC.md §5 at the edges, on every backend with a device: outputs that
 * overlap inputs or each other (both losses), temperatures whose reciprocal overflows, the first
 * of two deferred label errors, a context entered by a second thread; on opencl also host and
 * garbage pointers at every entry point, buffers smaller than the descriptor, sub-buffers and
 * DISTIL_OPENCL_BUILD_OPTIONS. Each refusal must name the arguments and write no output.
 */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DISTIL_TEST_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

static const char *g_backend;
static distil_ctx *g_ctx;

enum { T = 4, V = 16, HS = 4, HT = 6, PAD = 64 }; /* PAD: floats of room after each buffer */

static bool is_opencl(void) {
    return strcmp(g_backend, "opencl") == 0;
}

/* A device buffer of n random log-prob-like floats (plus PAD poisoned floats of room). */
static void *dev_floats(size_t n, uint64_t seed) {
    tu_rng r = tu_rng_make(seed);
    float *h = malloc((n + PAD) * sizeof(float));
    tu_poison(h, (n + PAD) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)(-3.0 - tu_rand_uniform(&r));
    }
    void *d = tu_upload(g_ctx, h, (n + PAD) * sizeof(float));
    free(h);
    return d;
}

/* p advanced by `floats` elements: pointer backends only (a cl_mem is a handle). */
static void *shifted(void *p, size_t floats) {
    return (char *)p + floats * sizeof(float);
}

/* The first `n` floats at dev are still the poison pattern. */
static void expect_poisoned(const void *dev, size_t n) {
    float h[T * V + PAD];
    tu_download(g_ctx, h, dev, n * sizeof(float));
    TU_CHECK_POISONED("output of a refused call", h, DISTIL_F32, 0, n);
}

/* ---------------------------------------------------------------- distil_jsd */

typedef struct jsd_bufs {
    void *x, *y, *loss, *grad;
} jsd_bufs;

static jsd_bufs jsd_bufs_make(void) {
    jsd_bufs b = {dev_floats(T * V, 1), dev_floats(T * V, 2), tu_alloc_poisoned(g_ctx, 64),
                  tu_alloc_poisoned(g_ctx, (T * V + PAD) * sizeof(float))};
    return b;
}

static void jsd_bufs_free(jsd_bufs *b) {
    distil_free(g_ctx, b->x), distil_free(g_ctx, b->y);
    distil_free(g_ctx, b->loss), distil_free(g_ctx, b->grad);
}

static distil_status jsd_call(const distil_jsd_desc *d, const void *x, const void *y, float *loss,
                              void *grad) {
    return distil_jsd(g_ctx, d, x, y, NULL, loss, grad);
}

static distil_jsd_desc jsd_desc(void) {
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = T, d.vocab = V;
    return d;
}

static void jsd_refused(const distil_jsd_desc *d, const void *x, const void *y, float *loss,
                        void *grad, const char *names) {
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, jsd_call(d, x, y, loss, grad));
    TU_CHECK_MESSAGE(g_ctx, names);
}

/* Overlaps that exist on every backend: the same buffer for two arguments. */
static void test_jsd_same_buffer(void **state) {
    (void)state;
    jsd_bufs b = jsd_bufs_make();
    distil_jsd_desc d = jsd_desc();
    jsd_refused(&d, b.x, b.y, b.grad, b.grad, "overlaps");
    TU_CHECK_MESSAGE(g_ctx, "loss");
    TU_CHECK_MESSAGE(g_ctx, "grad_student");
    jsd_refused(&d, b.x, b.y, b.y, b.grad, "teacher_logp");
    TU_CHECK_MESSAGE(g_ctx, "loss");
    jsd_refused(&d, b.x, b.y, b.x, NULL, "student_logp");
    jsd_refused(&d, b.x, b.y, b.loss, b.y, "teacher_logp");
    TU_CHECK_MESSAGE(g_ctx, "grad_student");
    expect_poisoned(b.grad, T * V);
    expect_poisoned(b.loss, 1);
    /* the documented exception: in place, equal strides */
    TU_OK(g_ctx, jsd_call(&d, b.x, b.y, b.loss, b.x));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    jsd_bufs_free(&b);
}

/* Partial overlaps by pointer arithmetic (pointer backends). */
static void test_jsd_partial(void **state) {
    (void)state;
    if (is_opencl()) {
        skip(); /* cl_mem handles: see test_opencl_sub_buffers */
    }
    jsd_bufs b = jsd_bufs_make();
    distil_jsd_desc d = jsd_desc();
    jsd_refused(&d, b.x, b.y, b.loss, shifted(b.y, 1), "teacher_logp");
    TU_CHECK_MESSAGE(g_ctx, "grad_student");
    jsd_refused(&d, b.x, b.y, b.loss, shifted(b.x, 1), "student_logp");
    jsd_refused(&d, b.x, b.y, shifted(b.grad, 5), b.grad, "loss");
    jsd_refused(&d, b.x, b.y, shifted(b.x, T * V - 1), NULL, "student_logp");
    d.reduction = DISTIL_REDUCTION_NONE; /* T loss values: the last two reach into x */
    jsd_refused(&d, shifted(b.grad, T - 2), b.y, b.grad, NULL, "loss");
    d = jsd_desc();
    d.grad_stride = 2 * V; /* rows of grad interleave with y's: byte ranges still overlap */
    jsd_refused(&d, b.x, b.grad, b.loss, shifted(b.grad, V), "teacher_logp");
    expect_poisoned(b.loss, 1);
    /* adjacent, not overlapping: accepted */
    d = jsd_desc();
    TU_OK(g_ctx, jsd_call(&d, b.x, b.y, b.loss, NULL));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    jsd_bufs_free(&b);
}

/* ---------------------------------------------------------------- distil_fused_linear_jsd */

typedef struct fused_bufs {
    void *xs, *ws, *bs, *xt, *wt, *labels, *loss, *gxs, *gws, *gbs;
} fused_bufs;

static fused_bufs fused_bufs_make(void) {
    int64_t labels[T] = {1, -100, 3, 7};
    fused_bufs b = {.xs = dev_floats(T * HS, 3),
                    .ws = dev_floats(V * HS, 4),
                    .bs = dev_floats(V, 5),
                    .xt = dev_floats(T * HT, 6),
                    .wt = dev_floats(V * HT, 7),
                    .labels = tu_upload(g_ctx, labels, sizeof labels),
                    .loss = tu_alloc_poisoned(g_ctx, 64),
                    .gxs = tu_alloc_poisoned(g_ctx, T * HS * sizeof(float)),
                    .gws = tu_alloc_poisoned(g_ctx, V * HS * sizeof(float)),
                    .gbs = tu_alloc_poisoned(g_ctx, V * sizeof(float))};
    return b;
}

static void fused_bufs_free(fused_bufs *b) {
    void *all[] = {b->xs, b->ws, b->bs, b->xt, b->wt, b->labels, b->loss, b->gxs, b->gws, b->gbs};
    for (size_t i = 0; i < TU_LEN(all); i++) {
        distil_free(g_ctx, all[i]);
    }
}

static distil_fused_linear_jsd_desc fused_desc(void) {
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = T, d.vocab = V, d.student_hidden = HS, d.teacher_hidden = HT;
    d.dtype = DISTIL_F32;
    return d;
}

static distil_status fused_call(const distil_fused_linear_jsd_desc *d, const fused_bufs *b) {
    return distil_fused_linear_jsd(g_ctx, d, b->xs, b->ws, b->bs, b->xt, b->wt, NULL, b->labels,
                                   b->loss, b->gxs, b->gws, b->gbs);
}

static void fused_refused(const fused_bufs *b, const char *out, const char *in) {
    distil_fused_linear_jsd_desc d = fused_desc();
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, fused_call(&d, b));
    TU_CHECK_MESSAGE(g_ctx, out);
    TU_CHECK_MESSAGE(g_ctx, in);
}

/* Each gradient written over the input it is the gradient of, the loss over a gradient or the
 * labels, two gradients in one buffer: all returned OK with wrong results before. */
static void test_fused_same_buffer(void **state) {
    (void)state;
    fused_bufs b = fused_bufs_make();
    fused_bufs c = b;
    c.gxs = b.xs;
    fused_refused(&c, "grad_student_hidden", "student_hidden");
    c = b, c.gws = b.ws;
    fused_refused(&c, "grad_student_weight", "student_weight");
    c = b, c.gbs = b.bs;
    fused_refused(&c, "grad_student_bias", "student_bias");
    c = b, c.loss = b.gbs;
    fused_refused(&c, "loss", "grad_student_bias");
    c = b, c.loss = b.labels;
    fused_refused(&c, "loss", "labels");
    c = b, c.gxs = b.gws;
    fused_refused(&c, "grad_student_hidden", "grad_student_weight");
    c = b, c.gbs = b.wt; /* V floats over the teacher head */
    fused_refused(&c, "grad_student_bias", "teacher_weight");
    expect_poisoned(b.gxs, T * HS);
    expect_poisoned(b.gws, V * HS);
    expect_poisoned(b.loss, 1);
    distil_fused_linear_jsd_desc d = fused_desc();
    TU_OK(g_ctx, fused_call(&d, &b));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    fused_bufs_free(&b);
}

static void test_fused_partial(void **state) {
    (void)state;
    if (is_opencl()) {
        skip();
    }
    fused_bufs b = fused_bufs_make();
    fused_bufs c = b;
    c.gxs = shifted(b.xs, T * HS - 1); /* one element in common */
    fused_refused(&c, "grad_student_hidden", "student_hidden");
    c = b, c.loss = shifted(b.gws, 3);
    fused_refused(&c, "loss", "grad_student_weight");
    fused_bufs_free(&b);
}

/* docs/SPEC.md §5: a temperature whose reciprocal is not finite (1e-39 gave NaN from finite
 * inputs; the workspace query refuses it too). */
static void test_tiny_temperature(void **state) {
    (void)state;
    fused_bufs b = fused_bufs_make();
    const float taus[] = {1e-39f, FLT_MIN / 8, FLT_TRUE_MIN};
    for (size_t i = 0; i < TU_LEN(taus); i++) {
        distil_fused_linear_jsd_desc d = fused_desc();
        d.temperature = taus[i];
        TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, fused_call(&d, &b));
        TU_CHECK_MESSAGE(g_ctx, "temperature");
        size_t bytes = 0;
        TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG,
                  distil_fused_linear_jsd_workspace_size(g_ctx, &d, 1, &bytes));
    }
    expect_poisoned(b.loss, 1);
    fused_bufs_free(&b);
}

/* ---------------------------------------------------------------- deferred labels */

/* Two calls with bad labels before one synchronize: the first call's first bad row is the one
 * reported (not the lowest row over both calls), once. */
static void test_first_label_error(void **state) {
    (void)state;
    fused_bufs b = fused_bufs_make();
    const int64_t first[T] = {0, 2, 99, 1};   /* row 2 */
    const int64_t second[T] = {-7, 1, 2, 99}; /* rows 0 and 3 */
    int64_t *dl = tu_upload(g_ctx, first, sizeof first);
    int64_t *dl2 = tu_upload(g_ctx, second, sizeof second);
    distil_fused_linear_jsd_desc d = fused_desc();
    d.chunk_rows = 1; /* every row its own launch: the rule holds across chunks too */
    char msg[1024] = "";
    for (int k = 0; k < 3; k++) {
        distil_status s = k == 0 ? distil_fused_linear_jsd(g_ctx, &d, b.xs, b.ws, b.bs, b.xt, b.wt,
                                                           NULL, dl, b.loss, b.gxs, b.gws, b.gbs)
                          : k == 1
                              ? distil_fused_linear_jsd(g_ctx, &d, b.xs, b.ws, b.bs, b.xt, b.wt,
                                                        NULL, dl2, b.loss, b.gxs, b.gws, b.gbs)
                              : distil_ctx_synchronize(g_ctx);
        assert_true(s == DISTIL_OK || s == DISTIL_ERR_INVALID_LABEL);
        if (s == DISTIL_ERR_INVALID_LABEL && msg[0] == '\0') {
            snprintf(msg, sizeof msg, "%s", distil_ctx_last_error(g_ctx));
        }
    }
    print_message("first label error: %s\n", msg);
    assert_non_null(strstr(msg, "row 2 "));
    assert_non_null(strstr(msg, "label 99"));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    distil_free(g_ctx, dl), distil_free(g_ctx, dl2);
    fused_bufs_free(&b);
}

/* ---------------------------------------------------------------- two threads */

typedef struct busy_run {
    fused_bufs *b;
    atomic_int stop;
    int calls, failed;
} busy_run;

static void *busy_worker(void *arg) {
    busy_run *r = arg;
    distil_fused_linear_jsd_desc d = fused_desc();
    for (r->calls = 0; r->calls < 20000 && !atomic_load(&r->stop); r->calls++) {
        distil_status s = fused_call(&d, r->b);
        r->failed += s != DISTIL_OK && s != DISTIL_ERR_BUSY; /* busy: the other thread was in */
        if (s != DISTIL_OK && s != DISTIL_ERR_BUSY) {
            print_error("worker: %s\n", distil_ctx_last_error(g_ctx));
        }
    }
    atomic_store(&r->stop, 1);
    return NULL;
}

/* A second thread that enters the context while a call runs gets DISTIL_ERR_BUSY with a
 * message on its own thread; the first thread's calls are unharmed. */
static void test_second_thread(void **state) {
    (void)state;
    fused_bufs b = fused_bufs_make();
    busy_run r = {.b = &b};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, busy_worker, &r), 0);
    distil_jsd_desc d = jsd_desc();
    int busy = 0;
    while (!atomic_load(&r.stop) && busy == 0) {
        size_t bytes = 0;
        distil_status s = distil_jsd_workspace_size(g_ctx, &d, &bytes);
        assert_true(s == DISTIL_OK || s == DISTIL_ERR_BUSY);
        if (s == DISTIL_ERR_BUSY) {
            busy++;
            assert_non_null(strstr(distil_ctx_last_error(NULL), "another thread"));
        }
        const struct timespec gap = {0, 20000}; /* leave the worker room to get in */
        nanosleep(&gap, NULL);
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    print_message("second thread refused %d time(s) during %d calls\n", busy, r.calls);
    assert_int_equal(r.failed, 0);
    assert_true(busy > 0);
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    fused_bufs_free(&b);
}

/* ---------------------------------------------------------------- opencl handles */

/* Host and garbage pointers at the memory entry points, buffers smaller than they must be. */
static void test_opencl_pointers(void **state) {
    (void)state;
    if (!is_opencl()) {
        skip(); /* pointer backends cannot tell a host pointer from theirs */
    }
    float host[T * V] = {0};
    void *garbage = (void *)(uintptr_t)0x1234;
    void *small = tu_alloc_poisoned(g_ctx, 128); /* (T, V) fp32 needs 256 bytes */
    void *dev = tu_alloc_poisoned(g_ctx, sizeof host);
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_memcpy_to_device(g_ctx, host, host, 64));
    TU_CHECK_MESSAGE(g_ctx, "dst");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_memcpy_to_host(g_ctx, host, garbage, 64));
    TU_CHECK_MESSAGE(g_ctx, "src");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_memcpy_to_device(g_ctx, small, host, 129));
    TU_CHECK_MESSAGE(g_ctx, "128");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_memcpy_to_host(g_ctx, host, small, 512));
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG,
              distil_ctx_set_workspace(g_ctx, small, (size_t)1 << 30));
    TU_CHECK_MESSAGE(g_ctx, "128");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_ctx_set_workspace(g_ctx, host, 64));
    distil_free(g_ctx, host); /* refused with a message, nothing freed */
    TU_CHECK_MESSAGE(g_ctx, "free");
    distil_free(g_ctx, garbage);
    TU_CHECK_MESSAGE(g_ctx, "free");
    /* a gradient buffer smaller than (rows, vocab) */
    jsd_bufs b = jsd_bufs_make();
    distil_jsd_desc d = jsd_desc();
    jsd_refused(&d, b.x, b.y, b.loss, small, "grad_student");
    TU_CHECK_MESSAGE(g_ctx, "128");
    jsd_refused(&d, b.x, b.y, (float *)host, NULL, "loss");
    distil_free(g_ctx, dev);
    distil_free(g_ctx, dev); /* a second free is refused, not passed to the driver */
    TU_CHECK_MESSAGE(g_ctx, "not a live distil_malloc buffer");
    distil_free(g_ctx, small);
    jsd_bufs_free(&b);
}

#ifdef DISTIL_TEST_HAVE_OPENCL
/* Sub-buffers of one cl_mem: overlap is judged by origin and size within the parent. */
static void test_opencl_sub_buffers(void **state) {
    (void)state;
    if (!is_opencl()) {
        skip();
    }
    const size_t half = 4096; /* a multiple of every device's base address alignment */
    float *h = malloc(2 * half + 512);
    tu_rng r = tu_rng_make(9);
    for (size_t i = 0; i < (2 * half + 512) / sizeof(float); i++) {
        h[i] = (float)(-3.0 - tu_rand_uniform(&r));
    }
    cl_mem parent = tu_upload(g_ctx, h, 2 * half + 512);
    free(h);
    cl_int err = CL_SUCCESS;
    cl_buffer_region lo = {0, half}, hi = {half, half}, mid = {half / 2, half};
    const int64_t rows = (int64_t)(half / (V * sizeof(float))); /* a whole half per tensor */
    cl_mem a = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &lo, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem b = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &hi, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem m = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &mid, &err);
    assert_int_equal(err, CL_SUCCESS);
    void *loss = tu_alloc_poisoned(g_ctx, 64);
    distil_jsd_desc d = jsd_desc();
    d.rows = rows;
    jsd_refused(&d, a, b, loss, m, "grad_student"); /* m overlaps both halves */
    TU_CHECK_MESSAGE(g_ctx, "student_logp|teacher_logp");
    jsd_refused(&d, b, a, loss, parent, "teacher_logp"); /* parent's first half is a */
    TU_OK(g_ctx, jsd_call(&d, a, b, loss, parent));      /* the same bytes as a: in place */
    d.rows = rows + 1;                                   /* a needs more than its half */
    jsd_refused(&d, a, b, loss, NULL, "student_logp");
    d.rows = rows;
    TU_OK(g_ctx, jsd_call(&d, a, parent, loss, b)); /* inputs may overlap; b is apart from a */
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, jsd_call(&d, a, m, loss, b));
    TU_CHECK_MESSAGE(g_ctx, "teacher_logp");
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    clReleaseMemObject(a), clReleaseMemObject(b), clReleaseMemObject(m);
    distil_free(g_ctx, loss);
    distil_free(g_ctx, parent);
}
#endif

/* DISTIL_OPENCL_BUILD_OPTIONS that hung a kernel (VEC=0), gave wrong results (a work-group size
 * not a power of two) or crashed PoCL's compiler (a bare -D) fail context creation. */
static void test_opencl_build_options(void **state) {
    (void)state;
    if (!is_opencl()) {
        skip();
    }
    const char *bad[] = {"-DVEC=0",      "-DWG_SIZE=48", "-D",   "-cl-mad-enable -D",
                         "-D WG_SIZE=3", "-DVEC=-1",     "-D=4", "-DGEMM_TILE=0",
                         "-DDTYPE=f32",  "-DWG_SIZE=x"};
    for (size_t i = 0; i < TU_LEN(bad); i++) {
        setenv("DISTIL_OPENCL_BUILD_OPTIONS", bad[i], 1);
        distil_ctx *c = NULL;
        distil_status s = distil_ctx_create(&c, "opencl", 0);
        distil_ctx_destroy(c);
        if (s != DISTIL_ERR_INVALID_ARG) {
            unsetenv("DISTIL_OPENCL_BUILD_OPTIONS");
            print_error("options '%s' gave status %d\n", bad[i], (int)s);
            fail();
        }
        TU_CHECK_MESSAGE(NULL, "DISTIL_OPENCL_BUILD_OPTIONS");
    }
    setenv("DISTIL_OPENCL_BUILD_OPTIONS", "-DWG_SIZE=64 -D VEC=2 -cl-mad-enable", 1);
    distil_ctx *c = NULL;
    distil_status s = distil_ctx_create(&c, "opencl", 0);
    unsetenv("DISTIL_OPENCL_BUILD_OPTIONS");
    TU_OK(NULL, s);
    distil_ctx_destroy(c);
}

static int group_setup(void **state) {
    (void)state;
    return distil_ctx_create(&g_ctx, g_backend, 0) == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    return 0;
}

static int run_group(const char *backend) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsd_same_buffer),      cmocka_unit_test(test_jsd_partial),
        cmocka_unit_test(test_fused_same_buffer),    cmocka_unit_test(test_fused_partial),
        cmocka_unit_test(test_tiny_temperature),     cmocka_unit_test(test_first_label_error),
        cmocka_unit_test(test_second_thread),        cmocka_unit_test(test_opencl_pointers),
#ifdef DISTIL_TEST_HAVE_OPENCL
        cmocka_unit_test(test_opencl_sub_buffers),
#endif
        cmocka_unit_test(test_opencl_build_options),
    };
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("misuse", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
