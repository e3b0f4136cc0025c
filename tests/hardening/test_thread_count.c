/*
 * test_thread_count.c - docs/SPEC.md §4 on the cpu backend: results do not depend on the number
 * of threads. Contexts made with DISTIL_NUM_THREADS (and OMP_NUM_THREADS) = 1, 2, 3 and 7 must
 * give the bits of the one-thread context for both losses and both top-k losses (docs/SPEC.md
 * §7), in fp32 and bf16, with several chunks (the weight-gradient GEMM accumulates over them),
 * shapes that split every GEMM, and rows longer than the cpu top-k pass's blocks.
 */
#define _POSIX_C_SOURCE 200809L

#include "test_problems.h"
#include "topk_problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int counts[] = {1, 2, 3, 7};

static const tp_jsd_spec jsd_spec = {.t = 37,
                                     .v = 5003,
                                     .beta = 0.5f,
                                     .red = DISTIL_REDUCTION_BATCHMEAN,
                                     .labels = TP_LABELS_MIXED,
                                     .grad = TP_GRAD_OUT};

static const tp_fused_spec fused_specs[] = {
    {.t = 45,
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
     .chunk = 16},
    {.t = 33,
     .v = 1031,
     .hs = 200,
     .ht = 72,
     .w_hard = 0.7f,
     .w_soft = 0.3f,
     .beta = 0.3f,
     .tau = 2.0f,
     .bias_s = true,
     .parts = true,
     .grads = TP_WANT_ALL,
     .labels = TP_LABELS_MIXED},
};

/* A cpu context with n threads. */
static distil_ctx *ctx_with_threads(int n) {
    char v[16];
    snprintf(v, sizeof v, "%d", n);
    setenv("DISTIL_NUM_THREADS", v, 1);
    setenv("OMP_NUM_THREADS", v, 1);
    distil_ctx *ctx = tu_ctx("cpu");
    unsetenv("DISTIL_NUM_THREADS");
    print_message("%s\n", distil_ctx_device_name(ctx));
    return ctx;
}

static void test_jsd(void **state) {
    distil_dtype dt = *(const distil_dtype *)*state;
    tp_jsd p;
    tp_jsd_make(&p, &jsd_spec, dt, 31);
    tp_jsd_out first;
    for (size_t i = 0; i < TU_LEN(counts); i++) {
        distil_ctx *ctx = ctx_with_threads(counts[i]);
        tp_jsd_out o;
        tp_jsd_run(ctx, &p, i == 0 ? &first : &o);
        distil_ctx_destroy(ctx);
        if (i > 0) {
            print_message("jsd: %d threads against 1\n", counts[i]);
            tp_jsd_check_same(&p, &o, &first);
            tp_jsd_out_free(&o);
        }
    }
    tp_jsd_out_free(&first);
    tp_jsd_free(&p);
}

static void test_fused(void **state) {
    distil_dtype dt = *(const distil_dtype *)*state;
    for (size_t s = 0; s < TU_LEN(fused_specs); s++) {
        tp_fused p;
        tp_fused_make(&p, &fused_specs[s], dt, 41 + s);
        tp_fused_out first;
        for (size_t i = 0; i < TU_LEN(counts); i++) {
            distil_ctx *ctx = ctx_with_threads(counts[i]);
            tp_fused_out o;
            tp_fused_run(ctx, &p, i == 0 ? &first : &o);
            distil_ctx_destroy(ctx);
            if (i > 0) {
                print_message("fused: %d threads against 1\n", counts[i]);
                tp_fused_check_same(&p, &o, &first);
                tp_fused_out_free(&o);
            }
        }
        tp_fused_out_free(&first);
        tp_fused_free(&p);
    }
}

/* The fused top-k (V spans many of the cpu row pass's 256-float blocks, tau != 1, several chunks)
 * and the log-prob form. */
static const tk_spec topk_specs[] = {
    {.t = 45,
     .v = 4099,
     .hs = 64,
     .k = 32,
     .fused = true,
     .tdtype = DISTIL_F32,
     .div = DISTIL_DIVERGENCE_JSD,
     .beta = 0.5f,
     .tau = 2.0f,
     .teacher = TK_ZIPF,
     .pad = true,
     .mixed_labels = true,
     .bias = true,
     .parts = true,
     .chunk = 16},
    {.t = 37,
     .v = 5003,
     .k = 16,
     .tdtype = DISTIL_BF16,
     .div = DISTIL_DIVERGENCE_FORWARD_KL,
     .teacher = TK_PEAKY,
     .mixed_labels = true,
     .red = DISTIL_REDUCTION_BATCHMEAN},
};

static void test_topk(void **state) {
    distil_dtype dt = *(const distil_dtype *)*state;
    for (size_t s = 0; s < TU_LEN(topk_specs); s++) {
        tk_problem p;
        tk_make(&p, &topk_specs[s], dt, 51 + s);
        tk_out first;
        for (size_t i = 0; i < TU_LEN(counts); i++) {
            distil_ctx *ctx = ctx_with_threads(counts[i]);
            tk_out o;
            tk_run(ctx, &p, i == 0 ? &first : &o);
            distil_ctx_destroy(ctx);
            if (i > 0) {
                print_message("top-k%s: %d threads against 1\n", p.s.fused ? " fused" : "",
                              counts[i]);
                tk_check_same(&p, &o, &first);
                tk_out_free(&o);
            }
        }
        tk_out_free(&first);
        tk_free(&p);
    }
}

static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16};

static int run_group(const char *backend) {
    static const struct CMUnitTest tests[] = {
        {"jsd f32", test_jsd, NULL, NULL, (void *)&dtypes[0]},
        {"jsd bf16", test_jsd, NULL, NULL, (void *)&dtypes[1]},
        {"fused f32", test_fused, NULL, NULL, (void *)&dtypes[0]},
        {"fused bf16", test_fused, NULL, NULL, (void *)&dtypes[1]},
        {"topk f32", test_topk, NULL, NULL, (void *)&dtypes[0]},
        {"topk bf16", test_topk, NULL, NULL, (void *)&dtypes[1]},
    };
    return cmocka_run_group_tests_name(tu_group_name("thread_count", backend), tests, NULL, NULL);
}

int main(void) {
    setenv("DISTIL_TEST_BACKEND", "cpu", 0);
    return tu_run_per_backend(run_group, false);
}
