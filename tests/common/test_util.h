/*
 * test_util.h - shared helpers of the distil CMocka suite: seeded random inputs, NaN poison,
 * device copies through the public API, the tolerance table of docs/SPEC.md §3 and the checks
 * that use it, and the list of backends under test (DISTIL_TEST_BACKEND).
 * Every check reports through cmocka (print_error + _fail at the caller's line).
 */
#ifndef DISTIL_TEST_UTIL_H
#define DISTIL_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "distil.h"
#include "distil_testing.h"

#define TU_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Exit code that ctest reads as "skipped" (SKIP_RETURN_CODE): every backend had no device. */
#define TU_EXIT_SKIPPED 77

/* ---------------------------------------------------------------- random inputs */

typedef struct tu_rng {
    uint64_t s;
} tu_rng;

tu_rng tu_rng_make(uint64_t seed);
double tu_rand_uniform(tu_rng *r);         /* in (0, 1) */
double tu_rand_normal(tu_rng *r);          /* standard normal */
int64_t tu_rand_int(tu_rng *r, int64_t n); /* in [0, n) */

/* Host element access for every dtype (bf16 / fp16 stored as raw uint16). */
float tu_get(const void *p, distil_dtype dtype, size_t i);
void tu_set(void *p, distil_dtype dtype, size_t i, float v);
/* v rounded to the dtype and back (what the library will see). */
float tu_round(distil_dtype dtype, float v);

/*
 * Student or teacher log-probabilities: (rows, width) with row stride ld, each row the
 * log-softmax (in double) of random logits of standard deviation logit_std, rounded to dtype.
 * mask (rows * width, may be NULL): nonzero elements get a -inf logit (a masked token, log-prob
 * -inf). With width == 1, where a log-softmax is identically 0, each row gets a random
 * log-probability in [log 0.05, log 0.95] instead (docs/SPEC.md §1 does not renormalise), so that
 * V = 1 cases still compare non-zero losses. Padding (ld > width) is left as it was.
 */
void tu_fill_logp(tu_rng *r, void *dst, distil_dtype dtype, int64_t rows, int64_t width, int64_t ld,
                  double logit_std, const unsigned char *mask);

/* n normal values of standard deviation std rounded to dtype, none of them 0 (|v| >= std/64). */
void tu_fill_normal(tu_rng *r, void *dst, distil_dtype dtype, size_t n, double std);

/* ---------------------------------------------------------------- poison */

/* A NaN bit pattern as fp32 (0x7FDE7FDE) and as bf16 or fp16 (0x7FDE); filled bytewise. */
#define TU_POISON16 0x7FDEu
#define TU_POISON32 0x7FDE7FDEu

void tu_poison(void *host, size_t bytes);
bool tu_is_poison(const void *p, distil_dtype dtype, size_t i);

/* ---------------------------------------------------------------- device memory */

/* distil_malloc + upload; fails the test on error. bytes == 0 gives NULL. */
void *tu_upload(distil_ctx *ctx, const void *host, size_t bytes);
/* distil_malloc filled with the poison pattern. */
void *tu_alloc_poisoned(distil_ctx *ctx, size_t bytes);
void tu_download(distil_ctx *ctx, void *host, const void *dev, size_t bytes);

/* Create a context on a backend, failing the test with the library's message otherwise. */
distil_ctx *tu_ctx(const char *backend);

/* Fail (at the caller's line) unless status == want, printing the context's last message. */
#define TU_EXPECT(ctx, want, expr)                                                                 \
    tu_expect_status((ctx), (want), (expr), #expr, __FILE__, __LINE__)
#define TU_OK(ctx, expr) TU_EXPECT((ctx), DISTIL_OK, (expr))
void tu_expect_status(const distil_ctx *ctx, distil_status want, distil_status got,
                      const char *expr, const char *file, int line);

/* ---------------------------------------------------------------- tolerances */

typedef enum tu_quantity {
    TU_LOSS,       /* relative error of a loss value */
    TU_GRAD,       /* ||out - ref|| / ||ref|| of a distil_jsd gradient */
    TU_GRAD_FUSED, /* the same for a distil_fused_linear_jsd gradient */
} tu_quantity;

/* The docs/SPEC.md §3 bound for a dtype and quantity (the one table, in test_util.c). */
double tu_tolerance(distil_dtype dtype, tu_quantity q);

/* Whether ctx's backend stores the fused loss's logit gradient G in the 16-bit input dtype dtype
 * before its GEMMs (docs/SPEC.md §3: cuda and hip, whose GEMMs run in the input dtype; cpu and
 * opencl keep G in fp32). That rounding is then part of the formula the backend evaluates. */
bool tu_g_rounded(const distil_ctx *ctx, distil_dtype dtype);

/* |got - ref| / |ref|; 0 when both are equal (including equal infinities), +inf when ref == 0
 * and got != 0, NaN when exactly one of them is NaN. */
double tu_rel_err(double got, double ref);

/* ||got - ref||_2 / ||ref||_2 over (rows, width) row stride ld; 0 when both are all zero,
 * +inf when only ref is. */
double tu_norm_rel_err(const void *got, const void *ref, distil_dtype dtype, int64_t rows,
                       int64_t width, int64_t ld);

/* ---------------------------------------------------------------- checks (fail the test) */

#define TU_CHECK_WRITTEN(what, p, dt, rows, width, ld, nan_ok)                                     \
    tu_check_written((what), (p), (dt), (rows), (width), (ld), (nan_ok), __FILE__, __LINE__)
#define TU_CHECK_POISONED(what, p, dt, first, count)                                               \
    tu_check_poisoned((what), (p), (dt), (first), (count), __FILE__, __LINE__)
#define TU_CHECK_PADDING(what, p, dt, rows, width, ld)                                             \
    tu_check_padding((what), (p), (dt), (rows), (width), (ld), __FILE__, __LINE__)
#define TU_CHECK_REL(what, got, ref, tol)                                                          \
    tu_check_rel((what), (got), (ref), (tol), __FILE__, __LINE__)
#define TU_CHECK_TENSOR(what, got, ref, dt, rows, width, ld, tol)                                  \
    tu_check_tensor((what), (got), (ref), (dt), (rows), (width), (ld), (tol), __FILE__, __LINE__)
#define TU_CHECK_BITWISE(what, got, ref, bytes)                                                    \
    tu_check_bitwise((what), (got), (ref), (bytes), __FILE__, __LINE__)

/* Every element of (rows, width) row stride ld was written: no poison left, and no NaN unless
 * nan_ok (an input was NaN). */
void tu_check_written(const char *what, const void *p, distil_dtype dtype, int64_t rows,
                      int64_t width, int64_t ld, bool nan_ok, const char *file, int line);
/* Elements [first, first + count) still hold the poison pattern (nothing wrote there). */
void tu_check_poisoned(const char *what, const void *p, distil_dtype dtype, size_t first,
                       size_t count, const char *file, int line);
/* The padding columns [width, ld) of every row still hold the poison pattern. */
void tu_check_padding(const char *what, const void *p, distil_dtype dtype, int64_t rows,
                      int64_t width, int64_t ld, const char *file, int line);
void tu_check_rel(const char *what, double got, double ref, double tol, const char *file, int line);
void tu_check_tensor(const char *what, const void *got, const void *ref, distil_dtype dtype,
                     int64_t rows, int64_t width, int64_t ld, double tol, const char *file,
                     int line);
void tu_check_bitwise(const char *what, const void *got, const void *ref, size_t bytes,
                      const char *file, int line);
/* The message on ctx (or the thread's, ctx == NULL) names the argument: it contains one of the
 * '|'-separated alternatives of names (e.g. "student_stride|student_logp"). */
#define TU_CHECK_MESSAGE(ctx, names) tu_check_message((ctx), (names), __FILE__, __LINE__)
void tu_check_message(const distil_ctx *ctx, const char *names, const char *file, int line);

/* ---------------------------------------------------------------- backends under test */

/*
 * Runs run_group(name) for every compiled backend (except "ref", the oracle, unless with_ref),
 * or only for the one named by the environment variable DISTIL_TEST_BACKEND. A backend without a
 * device gets a one-test group that prints "<name>: no device, skipped" and calls skip(), so it is
 * never counted as passed. Applies the test variables first (tu_apply_env). Returns
 * the number of failed tests, or TU_EXIT_SKIPPED when every backend was skipped.
 */
int tu_run_per_backend(int (*run_group)(const char *backend), bool with_ref);

/* The test variables: cmocka's test filter from DISTIL_TEST_FILTER (a pattern such as "jsd f32*"),
 * if given, and the library's test hooks from DISTIL_TEST_HOOKS (a spec of
 * distil_testing_hooks_set, core/testing/distil_testing.h, such as
 * "gemm=portable,fused_rows=stream"), for every context created after; a bad spec ends the program
 * with the library's message. */
void tu_apply_env(void);

/* Whether DISTIL_TEST_HOOKS names the item (e.g. "fp8=emulate"). */
bool tu_hook(const char *item);

/* Whether DISTIL_TEST_FILTER, when given, selects at least one of the n tests (else says so on
 * stderr): a filter that matches nothing would make a ctest entry that cannot fail. */
bool tu_filter_selects(const struct CMUnitTest *tests, size_t n);

/* Whether the named backend has at least one device. */
bool tu_backend_has_device(const char *name);

/* The group name "<suite>[<backend>]" in a static buffer (valid until the next call). */
const char *tu_group_name(const char *suite, const char *backend);

#endif /* DISTIL_TEST_UTIL_H */
