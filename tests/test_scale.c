/*
 * test_scale.c - distil_scale (x *= s, s a device scalar; docs/SPEC.md §2, the autograd step of
 * the Python package) on every backend: each element equals the host product rounded once to
 * the dtype, s == 1 leaves x bit for bit as it was, and bad arguments are refused with a
 * message naming them and nothing written.
 */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *g_backend;
static distil_ctx *g_ctx;

static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};

/* Scale n random values by s on the device; compare every element with the host product. */
static void scale_check(distil_dtype dt, size_t n, float s, uint64_t seed) {
    tu_rng r = tu_rng_make(seed);
    const size_t bytes = n * distil_dtype_size(dt);
    void *h = malloc(bytes), *got = malloc(bytes);
    assert_non_null(h);
    assert_non_null(got);
    tu_fill_normal(&r, h, dt, n, 3.0);
    void *x = tu_upload(g_ctx, h, bytes);
    float *sd = tu_upload(g_ctx, &s, sizeof s);
    TU_OK(g_ctx, distil_scale(g_ctx, x, dt, (int64_t)n, sd));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    tu_download(g_ctx, got, x, bytes);
    if (s == 1.0f) {
        TU_CHECK_BITWISE("scale by 1", got, h, bytes);
    }
    for (size_t i = 0; i < n; i++) {
        float want = tu_round(dt, tu_get(h, dt, i) * s);
        float g = tu_get(got, dt, i);
        if (memcmp(&want, &g, sizeof g) != 0 && !(want == 0.0f && g == 0.0f)) {
            fail_msg("%s scale %g: element %zu is %.9g, want %.9g", distil_dtype_name(dt),
                     (double)s, i, (double)g, (double)want);
        }
    }
    distil_free(g_ctx, x);
    distil_free(g_ctx, sd);
    free(h);
    free(got);
}

static void test_values(void **state) {
    const distil_dtype dt = *(const distil_dtype *)*state;
    const size_t sizes[] = {1, 7, 4099, 1 << 20};
    const float scales[] = {1.0f, 0.3712f, -2.0f, 0.0f, 1e-3f};
    uint64_t seed = 11;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t j = 0; j < sizeof scales / sizeof scales[0]; j++) {
            scale_check(dt, sizes[i], scales[j], seed++);
        }
    }
}

static void test_bad_args(void **state) {
    (void)state;
    float s = 2.0f, v[4] = {1, 2, 3, 4};
    float *x = tu_upload(g_ctx, v, sizeof v), *sd = tu_upload(g_ctx, &s, sizeof s);
    assert_int_equal(distil_scale(NULL, x, DISTIL_F32, 4, sd), DISTIL_ERR_INVALID_ARG);
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_scale(g_ctx, x, DISTIL_F32, 4, NULL));
    TU_CHECK_MESSAGE(g_ctx, "scale: scale");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_scale(g_ctx, NULL, DISTIL_F32, 4, sd));
    TU_CHECK_MESSAGE(g_ctx, "scale: x");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_scale(g_ctx, x, DISTIL_F32, -1, sd));
    TU_CHECK_MESSAGE(g_ctx, "scale: count");
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_ARG, distil_scale(g_ctx, x, (distil_dtype)7, 4, sd));
    TU_CHECK_MESSAGE(g_ctx, "scale: dtype");
    TU_OK(g_ctx, distil_scale(g_ctx, NULL, DISTIL_F32, 0, sd));
    float got[4];
    tu_download(g_ctx, got, x, sizeof got);
    TU_CHECK_BITWISE("refused scale", got, v, sizeof v);
    distil_free(g_ctx, x);
    distil_free(g_ctx, sd);
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
        {"scale f32", test_values, NULL, NULL, (void *)&dtypes[0]},
        {"scale bf16", test_values, NULL, NULL, (void *)&dtypes[1]},
        {"scale f16", test_values, NULL, NULL, (void *)&dtypes[2]},
        {"scale bad arguments", test_bad_args, NULL, NULL, NULL},
    };
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("scale", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
