/*
 * test_determinism.c - docs/SPEC.md §4: the same inputs on the same device give bitwise-identical
 * loss and gradients, run after run and on a fresh context (no floating-point atomics, fixed
 * reduction order). Shapes are large enough to use every thread / block of a backend.
 */
#include "test_problems.h"

#include <stdlib.h>
#include <string.h>

static const char *g_backend;
static distil_ctx *g_ctx;

static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};

static const tp_jsd_spec jsd_specs[] = {
    {.t = 64,
     .v = 32003,
     .beta = 0.5f,
     .red = DISTIL_REDUCTION_BATCHMEAN,
     .labels = TP_LABELS_MIXED,
     .grad = TP_GRAD_OUT},
    /* docs/SPEC.md §6: the other divergences, a device normaliser */
    {.t = 24,
     .v = 1031,
     .red = DISTIL_REDUCTION_BATCHMEAN,
     .labels = TP_LABELS_MIXED,
     .grad = TP_GRAD_OUT,
     .special = TP_NEG_INF,
     .div = DISTIL_DIVERGENCE_SKEW_KL,
     .alpha = 0.1f,
     .normaliser = 1000.0f,
     .norm_device = true},
    {.t = 24,
     .v = 1031,
     .red = DISTIL_REDUCTION_SUM,
     .labels = TP_LABELS_NONE,
     .grad = TP_GRAD_OUT,
     .div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL,
     .alpha = 0.3f},
    {.t = 24,
     .v = 1031,
     .red = DISTIL_REDUCTION_BATCHMEAN,
     .labels = TP_LABELS_MIXED,
     .grad = TP_GRAD_OUT,
     .div = DISTIL_DIVERGENCE_TVD},
};

/* docs/SPEC.md §6 head options: heads of different sizes, softcap, scale, teacher temperature,
 * LSE outputs. */
static const tp_head head_all = {
    .vt = 4099 - 35, .s_scale = 1.3f, .s_cap = 6.0f, .t_cap = 10.0f, .tau_t = 1.7f, .lse = true};

static const tp_fused_spec fused_specs[] = {
    {.t = 48,
     .v = 4099,
     .hs = 64,
     .ht = 96,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .beta = 0.5f,
     .tau = 1.0f,
     .bias_s = true,
     .bias_t = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED},
    {.t = 48,
     .v = 4099,
     .hs = 64,
     .ht = 96,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .beta = 0.3f,
     .tau = 2.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .chunk = 7},
    /* docs/SPEC.md §6: other divergences, tau^2, a device normaliser */
    {.t = 24,
     .v = 1031,
     .hs = 32,
     .ht = 48,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .tau = 2.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .chunk = 7,
     .div = DISTIL_DIVERGENCE_TVD,
     .normaliser = 300.0f,
     .norm_device = true,
     .tau_sq = true},
    {.t = 24,
     .v = 1031,
     .hs = 32,
     .ht = 48,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .tau = 1.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_NONE,
     .div = DISTIL_DIVERGENCE_SKEW_REVERSE_KL,
     .alpha = 0.2f},
    {.t = 48,
     .v = 4099,
     .hs = 64,
     .ht = 96,
     .w_hard = 0.5f,
     .w_soft = 0.5f,
     .beta = 0.5f,
     .tau = 1.0f,
     .bias_s = true,
     .bias_t = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED,
     .chunk = 11,
     .head = &head_all},
};

static void test_jsd(void **state) {
    distil_dtype dt = *(const distil_dtype *)*state;
    for (size_t i = 0; i < TU_LEN(jsd_specs); i++) {
        tp_jsd p;
        tp_jsd_make(&p, &jsd_specs[i], dt, 91 + i);
        tp_jsd_out first, again;
        tp_jsd_run(g_ctx, &p, &first);
        tp_jsd_run(g_ctx, &p, &again);
        tp_jsd_check_same(&p, &again, &first);
        tp_jsd_out_free(&again);
        distil_ctx *fresh = tu_ctx(g_backend);
        tp_jsd_run(fresh, &p, &again);
        distil_ctx_destroy(fresh);
        tp_jsd_check_same(&p, &again, &first);
        tp_jsd_out_free(&again), tp_jsd_out_free(&first);
        tp_jsd_free(&p);
    }
}

static void test_fused(void **state) {
    distil_dtype dt = *(const distil_dtype *)*state;
    for (size_t i = 0; i < TU_LEN(fused_specs); i++) {
        tp_fused p;
        tp_fused_make(&p, &fused_specs[i], dt, 92 + i);
        tp_fused_out first, again;
        tp_fused_run(g_ctx, &p, &first);
        tp_fused_run(g_ctx, &p, &again);
        tp_fused_check_same(&p, &again, &first);
        tp_fused_out_free(&again);
        distil_ctx *fresh = tu_ctx(g_backend);
        tp_fused_run(fresh, &p, &again);
        distil_ctx_destroy(fresh);
        tp_fused_check_same(&p, &again, &first);
        tp_fused_out_free(&again), tp_fused_out_free(&first);
        tp_fused_free(&p);
    }
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
        {"jsd f32", test_jsd, NULL, NULL, (void *)&dtypes[0]},
        {"jsd bf16", test_jsd, NULL, NULL, (void *)&dtypes[1]},
        {"jsd f16", test_jsd, NULL, NULL, (void *)&dtypes[2]},
        {"fused f32", test_fused, NULL, NULL, (void *)&dtypes[0]},
        {"fused bf16", test_fused, NULL, NULL, (void *)&dtypes[1]},
        {"fused f16", test_fused, NULL, NULL, (void *)&dtypes[2]},
    };
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("determinism", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, false);
}
