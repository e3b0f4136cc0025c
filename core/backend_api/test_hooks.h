/*
 * test_hooks.h - the test hooks in force for contexts created now (core/test_hooks.c), as the
 * backends read them at create. They are set only through the private test interface
 * (core/testing/distil_testing.h, distil_testing_hooks_set), never by the environment; all zero
 * when no test set them.
 */
#ifndef DISTIL_CORE_TEST_HOOKS_H
#define DISTIL_CORE_TEST_HOOKS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which fused row kernel (fused_rows=): the backend's choice, the streaming one, or the resident
 * one required. */
typedef enum distil_hook_rows {
    DISTIL_HOOK_ROWS_AUTO = 0,
    DISTIL_HOOK_ROWS_STREAM = 1,
    DISTIL_HOOK_ROWS_RESIDENT = 2,
} distil_hook_rows;

/* The fp8 product (fp8=): the backend's choice, the vendor's only, or the emulation always. */
typedef enum distil_hook_fp8 {
    DISTIL_HOOK_FP8_AUTO = 0,
    DISTIL_HOOK_FP8_LT = 1,
    DISTIL_HOOK_FP8_EMULATE = 2,
} distil_hook_fp8;

typedef struct distil_test_hooks {
    bool gemm_portable;      /* gemm=portable */
    distil_hook_rows rows;   /* fused_rows= */
    distil_hook_fp8 fp8;     /* fp8= */
    bool stats_require;      /* stats=require */
    bool gradw_require;      /* gradw=require */
    long long side_delay_us; /* side_delay_us=, 0: none */
} distil_test_hooks;

/* A copy of the hooks in force now. */
distil_test_hooks distil_test_hooks_now(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_CORE_TEST_HOOKS_H */
