/*
 * validate.h - small argument checks shared by the entry points. Each returns DISTIL_OK or
 * records "fn: name rule (values)" on the context and returns DISTIL_ERR_INVALID_ARG.
 */
#ifndef DISTIL_CORE_VALIDATE_H
#define DISTIL_CORE_VALIDATE_H

#include "backend.h"

#include <stdbool.h>

distil_status distil_check_not_null(distil_ctx *ctx, const char *fn, const char *name,
                                    const void *p);
/* Asks the backend whether p is its memory, when it can tell (NULL p passes). */
distil_status distil_check_device_ptr(distil_ctx *ctx, const char *fn, const char *name,
                                      const void *p);
distil_status distil_check_dtype(distil_ctx *ctx, const char *fn, const char *name,
                                 distil_dtype dtype);
distil_status distil_check_min(distil_ctx *ctx, const char *fn, const char *name, int64_t v,
                               int64_t min);
/* stride 0 resolves to width; otherwise stride >= width. */
distil_status distil_check_stride(distil_ctx *ctx, const char *fn, const char *name, int64_t stride,
                                  int64_t width, int64_t *resolved);
distil_status distil_check_unit(distil_ctx *ctx, const char *fn, const char *name, float v);
distil_status distil_check_nonneg(distil_ctx *ctx, const char *fn, const char *name, float v);
distil_status distil_check_positive(distil_ctx *ctx, const char *fn, const char *name, float v);
/* A temperature: finite, > 0, and 1 / v finite in fp32 (the kernels multiply by it). */
distil_status distil_check_temperature(distil_ctx *ctx, const char *fn, const char *name, float v);
distil_status distil_check_finite(distil_ctx *ctx, const char *fn, const char *name, float v);
/* rows * cols * elem must fit in size_t (and in int64 elements). */
distil_status distil_check_size(distil_ctx *ctx, const char *fn, const char *name, int64_t rows,
                                int64_t cols, size_t elem);

/* The version rule of the public structs (docs/SPEC.md §5): `name`.struct_size, as `init` set it,
 * equals the library's sizeof. */
distil_status distil_check_struct_size(distil_ctx *ctx, const char *fn, const char *name,
                                       size_t got, size_t want, const char *init);

/* The fused losses' weights (docs/SPEC.md §2): each >= 0 and finite, not both 0. */
distil_status distil_check_weights(distil_ctx *ctx, const char *fn, float weight_hard,
                                   float weight_soft);

/* The first checks of a workspace query (wfn: its name): ctx, then bytes, not NULL. */
distil_status distil_check_query(distil_ctx *ctx, const char *wfn, const size_t *bytes);

#endif /* DISTIL_CORE_VALIDATE_H */
