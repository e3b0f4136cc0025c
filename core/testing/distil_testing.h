/*
 * distil_testing.h - the library's test hooks: a private interface for the test suites, the fuzz
 * targets, the benchmarks and the Python tests (through ctypes). Never installed, and not
 * declared by distil.h: a program that uses it is a test of this library, not a user of it.
 *
 * Test programs take their hooks from one variable of their own, DISTIL_TEST_HOOKS (a spec as
 * below), and pass it to distil_testing_hooks_set before they create a context; the library
 * itself reads no test variable.
 */
#ifndef DISTIL_TESTING_H
#define DISTIL_TESTING_H

#include "distil.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Fault injection: on the calling thread, let `after` more allocations of device or scratch
 * memory succeed, then fail every later one with DISTIL_ERR_OUT_OF_MEMORY until called again with
 * -1 (the default: no injection).
 */
DISTIL_API void distil_testing_fail_allocations(long after);

/*
 * The hooks of every context created after this call (on any thread; call it before creating
 * them): spec is a comma-separated list of name=value, NULL or "" for none:
 *   gemm=portable         cuda: distil's own GEMM kernel instead of cuBLAS (the one hip uses
 *                         without hipBLAS)
 *   fused_rows=stream     cuda: the streaming fused row kernel (hip's, and that of rows too long
 *                         for shared memory) instead of the resident one
 *   fused_rows=resident   cuda: a row pass that the resident kernel declines fails
 *   fp8=lt                cuda: the fp8 teacher head's product on cuBLASLt fp8 only; a product it
 *                         does not run is UNSUPPORTED (a benchmark cannot time the emulation)
 *   fp8=emulate           cuda: the fp8 product's emulation kernel always
 *   stats=require         cuda: where the statistics GEMM can run (sm_90, built with CUTLASS), a
 *                         loss-only row pass given no row statistics fails
 *   gradw=require         cuda: where the fused-cast GEMM's kernel can run, a last grad_Ws GEMM
 *                         of a bf16 call that it does not take fails
 *   side_delay_us=N       cuda: the fused loss's second lane spins N microseconds (0 < N < 10^6)
 *                         after each fork, so that a missing join fails the suites
 * Each spec replaces the hooks before it. A bad spec returns DISTIL_ERR_INVALID_ARG with a message
 * naming the item (distil_ctx_last_error(NULL)) and changes nothing.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_testing_hooks_set(const char *spec);

/*
 * The optional capabilities of ctx's backend (docs/DESIGN.md §2) that decide whether a call runs
 * or is refused as UNSUPPORTED, so that a test expects one or the other by what the backend has,
 * not by its name (a backend that fills only the required operations passes the suite).
 */
typedef struct distil_testing_caps {
    int fp8_head; /* the fused loss's fp8 teacher head (teacher_head_precision FP8_E4M3) */
    int tp;       /* distil_fused_linear_jsd_tp and its phases (docs/SPEC.md §8) */
} distil_testing_caps;

/* ctx's capabilities; all 0 for a NULL ctx. */
DISTIL_API distil_testing_caps distil_testing_capabilities(const distil_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_TESTING_H */
