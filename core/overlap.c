/* overlap.c - see overlap.h. */
#include "overlap.h"
#include "ctx.h"
#include "error.h"
#include "validate.h"

#include <stdio.h>

size_t distil_span_bytes(int64_t rows, int64_t cols, int64_t ld, size_t elem) {
    if (rows <= 0 || cols <= 0) {
        return 0;
    }
    /* Sizes were checked to stay below 2^62 bytes (distil_check_size): no wrap. */
    return ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * elem;
}

distil_status distil_span_extent(distil_ctx *ctx, const char *fn, const char *name, const void *p,
                                 distil_mem_extent *out) {
    distil_mem_extent e = {NULL, (uintptr_t)p, 0};
    const distil_backend_device *dev = distil_backend_device_of(ctx->be);
    if (dev->mem_extent != NULL) {
        distil_status s = dev->mem_extent(ctx->b, p, &e);
        if (s != DISTIL_OK) {
            char why[DISTIL_MSG_BYTES];
            snprintf(why, sizeof why, "%s", ctx->msg);
            return distil_error_set(ctx, s, "%s: %s: %s", fn, name, why);
        }
    }
    *out = e;
    return DISTIL_OK;
}

/* One end past the span, saturated (a garbage pointer near the top of the address space). */
static uintptr_t distil_span_end(uintptr_t origin, size_t bytes) {
    uintptr_t end = origin + (uintptr_t)bytes;
    return end < origin ? UINTPTR_MAX : end;
}

static bool distil_extents_overlap(const distil_mem_extent *a, size_t na,
                                   const distil_mem_extent *b, size_t nb) {
    return a->parent == b->parent && a->origin < distil_span_end(b->origin, nb) &&
           b->origin < distil_span_end(a->origin, na);
}

/* The spans that take part (present, nonempty), resolved; sizes checked. Returns how many. */
static distil_status distil_spans_resolve(distil_ctx *ctx, const char *fn, const distil_span *s,
                                          int n, distil_mem_extent *e, int *used) {
    for (int i = 0; i < n; i++) {
        if (s[i].p == NULL || s[i].bytes == 0) {
            continue;
        }
        DISTIL_TRY(distil_span_extent(ctx, fn, s[i].name, s[i].p, &e[i]));
        if (e[i].size != 0 && s[i].bytes > e[i].size) {
            return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: %s holds %zu bytes, the descriptor needs %zu", fn,
                                    s[i].name, e[i].size, s[i].bytes);
        }
        used[i] = 1;
    }
    return DISTIL_OK;
}

#define DISTIL_SPANS_MAX 24 /* the fused loss has 17 */

distil_status distil_spans_check(distil_ctx *ctx, const char *fn, const distil_span *s, int n,
                                 int in_place_out, int in_place_in) {
    distil_mem_extent e[DISTIL_SPANS_MAX];
    int used[DISTIL_SPANS_MAX] = {0};
    if (n > DISTIL_SPANS_MAX) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: too many spans", fn);
    }
    DISTIL_TRY(distil_spans_resolve(ctx, fn, s, n, e, used));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n && used[i]; j++) {
            if (j == i || !used[j] || !s[i].out || (s[j].out && j < i)) {
                continue; /* each output against every other span, each output pair once */
            }
            bool in_place = i == in_place_out && j == in_place_in && e[i].parent == e[j].parent &&
                            e[i].origin == e[j].origin;
            if (!in_place && distil_extents_overlap(&e[i], s[i].bytes, &e[j], s[j].bytes)) {
                return distil_error_set(
                    ctx, DISTIL_ERR_INVALID_ARG,
                    "%s: %s overlaps %s (%zu and %zu bytes from %p and %p)%s", fn, s[i].name,
                    s[j].name, s[i].bytes, s[j].bytes, s[i].p, s[j].p,
                    i == in_place_out && j == in_place_in ? "; in place it must start where it does"
                                                          : "");
            }
        }
    }
    return DISTIL_OK;
}

distil_status distil_ptr_rules_present(distil_ctx *ctx, const char *fn, const distil_ptr_rule *r,
                                       size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (r[i].required) {
            DISTIL_TRY(distil_check_not_null(ctx, fn, r[i].name, r[i].p.base));
        }
    }
    for (size_t i = 0; i < n; i++) {
        DISTIL_TRY(distil_check_device_ptr(ctx, fn, r[i].name, r[i].p.base));
    }
    return DISTIL_OK;
}

distil_status distil_ptr_rules_spans(distil_ctx *ctx, const char *fn, const distil_ptr_rule *r,
                                     size_t n) {
    enum { MAX_RULES = 32 };
    distil_span s[MAX_RULES + 1];
    if (n > MAX_RULES) {
        return distil_error_set(ctx, DISTIL_ERR_BACKEND, "%s: %zu pointer arguments (internal)", fn,
                                n);
    }
    for (size_t i = 0; i < n; i++) {
        s[i] = (distil_span){r[i].name, r[i].p.base, r[i].bytes, r[i].out};
    }
    s[n] = (distil_span){"workspace", ctx->work_lent, ctx->work_lent_bytes, true};
    return distil_spans_check(ctx, fn, s, (int)n + 1, -1, -1);
}
