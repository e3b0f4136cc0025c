/*
 * test_hooks.c - the library's private test interface (core/testing/distil_testing.h):
 * distil_testing_hooks_set takes every hook of docs/USAGE.md and refuses a bad spec with
 * DISTIL_ERR_INVALID_ARG and a message naming the item; NULL and "" clear the hooks. A context
 * created under hooks that its backend does not use (every backend but cuda) is the same.
 */
#include "test_util.h"

static void test_good_specs(void **state) {
    (void)state;
    const char *good[] = {NULL,
                          "",
                          "gemm=portable",
                          "fused_rows=stream",
                          "fused_rows=resident",
                          "fp8=lt",
                          "fp8=emulate",
                          "stats=require",
                          "gradw=require",
                          "side_delay_us=300",
                          "gemm=portable,fused_rows=stream,fp8=emulate,side_delay_us=1"};
    for (size_t i = 0; i < TU_LEN(good); i++) {
        if (distil_testing_hooks_set(good[i]) != DISTIL_OK) {
            fail_msg("'%s' refused: %s", good[i] ? good[i] : "(NULL)", distil_ctx_last_error(NULL));
        }
    }
    TU_OK(NULL, distil_testing_hooks_set(NULL));
}

static void test_bad_specs(void **state) {
    (void)state;
    const struct {
        const char *spec, *names;
    } bad[] = {
        {"overlap=off", "overlap"},
        {"gemm=cublas", "gemm"},
        {"fused_rows=fast", "fused_rows"},
        {"fp8=auto", "fp8"},
        {"stats=off", "stats"},
        {"gradw=off", "gradw"},
        {"side_delay_us=0", "side_delay_us"},
        {"side_delay_us=1000000", "side_delay_us"},
        {"side_delay_us=3us", "side_delay_us"},
        {"gemm=portable,fp8", "fp8"},
        {"gemm", "gemm"},
    };
    for (size_t i = 0; i < TU_LEN(bad); i++) {
        TU_EXPECT(NULL, DISTIL_ERR_INVALID_ARG, distil_testing_hooks_set(bad[i].spec));
        TU_CHECK_MESSAGE(NULL, bad[i].names);
    }
}

/* Hooks are for the cuda backend: another backend's context is still created under them (their
 * effect on cuda's calls runs on a GPU: scripts/gpu-check.sh sets DISTIL_TEST_HOOKS). */
static void test_other_backend_created_under_hooks(void **state) {
    (void)state;
    TU_OK(NULL, distil_testing_hooks_set("gemm=portable,fused_rows=stream,fp8=lt"));
    distil_ctx *ctx = NULL;
    const distil_status s = distil_ctx_create(&ctx, "ref", 0);
    TU_OK(NULL, distil_testing_hooks_set(NULL));
    TU_OK(NULL, s);
    distil_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_specs),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_other_backend_created_under_hooks),
    };
    tu_apply_env();
    return cmocka_run_group_tests_name("testing hooks", tests, NULL, NULL);
}
