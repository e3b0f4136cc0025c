/*
 * test_backend_table.c - the registry's check of a backend's table (core/backend_check.c, compiled
 * into this test): a table with the required operations and nothing else is complete; one that
 * lacks a required operation, or gives an optional sub-table in part, is refused naming the
 * member. Also: the public header declares none of the library's test hooks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend_check.h"

/* distil.h (included by backend.h) declares none of the test hooks of core/testing: these
 * definitions would clash with its declarations. */
static const int distil_testing_fail_allocations = 0;
static const int distil_testing_hooks_set = 0;
static const int distil_debug_fail_allocations = 0;

/* Stand-ins: the check looks only at which members are set. */
static distil_status op_probe(int *n) {
    *n = 1;
    return DISTIL_OK;
}
static distil_status op_create(distil_ctx *ctx, int device, void **b) {
    (void)ctx;
    (void)device;
    *b = NULL;
    return DISTIL_OK;
}
static void op_destroy(void *b) {
    (void)b;
}
static void op_describe(void *b, char *buf, size_t n) {
    (void)b;
    (void)buf;
    (void)n;
}
static distil_status op_state(void *b) {
    (void)b;
    return DISTIL_OK;
}
static distil_status op_alloc(void *b, size_t bytes, void **p) {
    (void)b;
    (void)bytes;
    *p = NULL;
    return DISTIL_OK;
}
static void op_free(void *b, void *p) {
    (void)b;
    (void)p;
}
static distil_status op_upload(void *b, distil_dptr d, const void *s, size_t n) {
    (void)b;
    (void)d;
    (void)s;
    (void)n;
    return DISTIL_OK;
}
static distil_status op_download(void *b, void *d, distil_dptr s, size_t n) {
    (void)b;
    (void)d;
    (void)s;
    (void)n;
    return DISTIL_OK;
}
/* One stand-in per argument type: ops of type distil_status (*)(void *, const T *). */
#define OP_OF(T)                                                                                   \
    static distil_status op_##T(void *b, const distil_##T *a) {                                    \
        (void)b;                                                                                   \
        (void)a;                                                                                   \
        return DISTIL_OK;                                                                          \
    }
OP_OF(cast_args)
OP_OF(fill_args)
OP_OF(scale_args)
OP_OF(gemm_args)
OP_OF(count_args)
OP_OF(div_rows_args)
OP_OF(fused_rows_args)
OP_OF(reduce_args)
OP_OF(head_rows_args)
OP_OF(topk_rows_args)
OP_OF(quant_rows_args)
OP_OF(gemm_e4m3_args)
OP_OF(gemm_stats_args)
OP_OF(gemm_cast_args)
static bool ask_fit(void *b, const distil_gemm_stats_shape *s) {
    (void)b;
    (void)s;
    return true;
}
static bool ask_stats(void *b, const distil_gemm_stats_args *a) {
    (void)b;
    (void)a;
    return true;
}
static bool ask_cast(void *b, const distil_gemm_cast_args *a) {
    (void)b;
    (void)a;
    return true;
}

/* The required operations and nothing else: what a new backend writes first. */
static distil_backend required(void) {
    const distil_backend be = {.api_version = DISTIL_BACKEND_API_VERSION,
                               .name = "new",
                               .probe = op_probe,
                               .create = op_create,
                               .destroy = op_destroy,
                               .describe = op_describe,
                               .synchronize = op_state,
                               .mem_alloc = op_alloc,
                               .mem_free = op_free,
                               .mem_upload = op_upload,
                               .mem_download = op_download,
                               .cast = op_cast_args,
                               .fill = op_fill_args,
                               .scale = op_scale_args,
                               .gemm = op_gemm_args,
                               .count_valid = op_count_args,
                               .div_rows = op_div_rows_args,
                               .fused_rows = op_fused_rows_args,
                               .reduce = op_reduce_args,
                               .head_rows = op_head_rows_args,
                               .topk_rows = op_topk_rows_args};
    return be;
}

static void expect_lacks(const distil_backend *be, const char *want) {
    const char *got = distil_backend_lacks(be);
    if (got == NULL || strcmp(got, want) != 0) {
        fail_msg("the check says the table lacks %s, want %s", got ? got : "nothing", want);
    }
}

static void test_required_is_complete(void **state) {
    (void)state;
    const distil_backend be = required();
    assert_null(distil_backend_lacks(&be));
    (void)distil_testing_fail_allocations;
    (void)distil_testing_hooks_set;
    (void)distil_debug_fail_allocations;
}

/* Each required operation removed in turn is named. */
static void test_each_required_op(void **state) {
    (void)state;
    static const struct {
        size_t off;
        const char *name;
    } ops[] = {
#define REQ(m) {offsetof(distil_backend, m), #m}
        REQ(probe),      REQ(create),   REQ(destroy),    REQ(describe),     REQ(synchronize),
        REQ(mem_alloc),  REQ(mem_free), REQ(mem_upload), REQ(mem_download), REQ(cast),
        REQ(fill),       REQ(scale),    REQ(gemm),       REQ(count_valid),  REQ(div_rows),
        REQ(fused_rows), REQ(reduce),   REQ(head_rows),  REQ(topk_rows),
#undef REQ
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        distil_backend be = required();
        memset((char *)&be + ops[i].off, 0, sizeof(void (*)(void)));
        expect_lacks(&be, ops[i].name);
    }
    distil_backend be = required();
    be.api_version = DISTIL_BACKEND_API_VERSION + 1;
    expect_lacks(&be, "api_version (DISTIL_BACKEND_API_VERSION)");
}

/* A backend that computes every loss whole needs none of the kernels, but all three whole ops. */
static void test_whole(void **state) {
    (void)state;
    static const distil_backend_whole part = {.jsd = NULL};
    distil_backend be = required();
    be.gemm = NULL;
    be.topk_rows = NULL;
    be.whole = &part;
    expect_lacks(&be, "whole->jsd");
}

/* Sub-tables given in part are named; fp8 needs its header op on a device backend and its bytes. */
static void test_sub_tables_in_part(void **state) {
    (void)state;
    static const distil_backend_side side = {.end = op_state, .join = op_state};
    static const distil_backend_tp tp = {.native_stream = NULL};
    static const distil_backend_fp8 fp8 = {.quant_rows = op_quant_rows_args,
                                           .gemm_e4m3 = op_gemm_e4m3_args};
    static const distil_backend_epilogue stats = {.stats_fit = ask_fit,
                                                  .gemm_stats = op_gemm_stats_args};
    static const distil_backend_epilogue cast = {.cast_ok = ask_cast,
                                                 .gemm_cast = op_gemm_cast_args};
    static const distil_backend_epilogue stats_whole = {
        .stats_fit = ask_fit, .stats_ok = ask_stats, .gemm_stats = op_gemm_stats_args};
    static const distil_backend_epilogue empty = {.cast_ok = NULL};
    distil_backend be = required();
    be.side = &side;
    expect_lacks(&be, "side->begin");
    be = required();
    be.tp = &tp;
    expect_lacks(&be, "tp->tp_rows");
    be = required();
    be.fp8 = &fp8;
    expect_lacks(&be, "fp8->e4m3_header");
    be.host_memory = true;
    expect_lacks(&be, "tuning.e4m3_bytes (1 or 2)");
    be.tuning.e4m3_bytes = 2;
    assert_null(distil_backend_lacks(&be));
    be = required();
    be.epilogue = &stats;
    expect_lacks(&be, "epilogue->stats_ok");
    be.epilogue = &stats_whole;
    expect_lacks(&be, "tuning.stats_cols");
    be.tuning.stats_cols = 128;
    assert_null(distil_backend_lacks(&be));
    be.epilogue = &cast;
    assert_null(distil_backend_lacks(&be));
    be.epilogue = &empty;
    expect_lacks(&be, "epilogue->gemm_stats or epilogue->gemm_cast");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_is_complete),
        cmocka_unit_test(test_each_required_op),
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_sub_tables_in_part),
    };
    return cmocka_run_group_tests_name("backend table", tests, NULL, NULL);
}
