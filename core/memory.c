/*
 * memory.c - distil_malloc / distil_free / host copies in the context's address space.
 */
#include "ctx.h"
#include "error.h"
#include "overlap.h"
#include "validate.h"

#include <stdio.h>

static distil_status distil_malloc_run(distil_ctx *ctx, size_t bytes, void **ptr) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "malloc: ctx is NULL");
    }
    if (ptr == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "malloc: ptr is NULL");
    }
    *ptr = NULL;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    return ctx->be->mem_alloc(ctx->b, bytes, ptr);
}

distil_status distil_malloc(distil_ctx *ctx, size_t bytes, void **ptr) {
    DISTIL_GUARDED(ctx, "malloc", distil_malloc_run(ctx, bytes, ptr));
}

/* May ptr be freed? The backend's own record of its allocations where it keeps one, else
 * whether it is the backend's memory at all. */
static distil_status distil_free_check(distil_ctx *ctx, void *ptr) {
    const distil_backend_device *dev = distil_backend_device_of(ctx->be);
    if (dev->check_free == NULL) {
        return distil_check_device_ptr(ctx, "free", "ptr", ptr);
    }
    distil_status s = dev->check_free(ctx->b, ptr);
    if (s != DISTIL_OK) {
        char why[DISTIL_MSG_BYTES];
        snprintf(why, sizeof why, "%s", ctx->msg);
        return distil_error_set(ctx, s, "free: %s", why);
    }
    return DISTIL_OK;
}

/* A pointer the backend can tell is not its live memory is refused with a message, not freed. */
void distil_free(distil_ctx *ctx, void *ptr) {
    if (ctx == NULL || ptr == NULL || distil_ctx_enter(ctx, "free") != DISTIL_OK) {
        return;
    }
    if (distil_free_check(ctx, ptr) == DISTIL_OK) {
        ctx->be->mem_free(ctx->b, ptr);
    }
    distil_ctx_leave(ctx);
}

/* Shared checks of the two copies: NULLs, then the device side (`dev`, named dev_name) is the
 * backend's memory and holds `bytes`. */
static distil_status distil_memcpy_check(distil_ctx *ctx, const char *fn, const void *dst,
                                         const void *src, size_t bytes, const char *dev_name,
                                         const void *dev) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    if (bytes > 0 && dst == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: dst is NULL", fn);
    }
    if (bytes > 0 && src == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: src is NULL", fn);
    }
    if (bytes == 0) {
        return DISTIL_OK;
    }
    distil_span s = {dev_name, dev, bytes, false};
    DISTIL_TRY(distil_check_device_ptr(ctx, fn, dev_name, dev));
    return distil_spans_check(ctx, fn, &s, 1, -1, -1);
}

static distil_status distil_memcpy_to_device_run(distil_ctx *ctx, void *dst, const void *src_host,
                                                 size_t bytes) {
    DISTIL_TRY(distil_memcpy_check(ctx, "memcpy_to_device", dst, src_host, bytes, "dst", dst));
    if (bytes == 0) {
        return DISTIL_OK;
    }
    return ctx->be->mem_upload(ctx->b, distil_dptr_make(dst, 0), src_host, bytes);
}

distil_status distil_memcpy_to_device(distil_ctx *ctx, void *dst, const void *src_host,
                                      size_t bytes) {
    DISTIL_GUARDED(ctx, "memcpy_to_device", distil_memcpy_to_device_run(ctx, dst, src_host, bytes));
}

static distil_status distil_memcpy_to_host_run(distil_ctx *ctx, void *dst_host, const void *src,
                                               size_t bytes) {
    DISTIL_TRY(distil_memcpy_check(ctx, "memcpy_to_host", dst_host, src, bytes, "src", src));
    if (bytes == 0) {
        return DISTIL_OK;
    }
    return ctx->be->mem_download(ctx->b, dst_host, distil_dptr_make(src, 0), bytes);
}

distil_status distil_memcpy_to_host(distil_ctx *ctx, void *dst_host, const void *src,
                                    size_t bytes) {
    DISTIL_GUARDED(ctx, "memcpy_to_host", distil_memcpy_to_host_run(ctx, dst_host, src, bytes));
}
