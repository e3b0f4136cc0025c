/*
 * error.h - recording failures on a context (core and backends).
 *
 * distil_error_set formats "message" into the context's last-error buffer (or, for ctx == NULL,
 * into a thread-local buffer read by distil_ctx_last_error(NULL)) and returns the status, so
 * that a check is one line:  return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "...", ...);
 */
#ifndef DISTIL_CORE_ERROR_H
#define DISTIL_CORE_ERROR_H

#include "distil.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DISTIL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DISTIL_PRINTF(f, a)
#endif

distil_status distil_error_set(distil_ctx *ctx, distil_status status, const char *fmt, ...)
    DISTIL_PRINTF(3, 4);

/* Pass a non-OK status up unchanged. */
#define DISTIL_TRY(expr)                                                                           \
    do {                                                                                           \
        distil_status distil_try_s_ = (expr);                                                      \
        if (distil_try_s_ != DISTIL_OK) {                                                          \
            return distil_try_s_;                                                                  \
        }                                                                                          \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_CORE_ERROR_H */
