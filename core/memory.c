/*
 * memory.c - distil_malloc / distil_free / host copies in the context's address space.
 */
#include "ctx.h"
#include "error.h"

distil_status distil_malloc(distil_ctx *ctx, size_t bytes, void **ptr) {
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

void distil_free(distil_ctx *ctx, void *ptr) {
    if (ctx != NULL && ptr != NULL) {
        ctx->be->mem_free(ctx->b, ptr);
    }
}

/* Shared checks of the two copies. */
static distil_status distil_memcpy_check(distil_ctx *ctx, const char *fn, const void *dst,
                                         const void *src, size_t bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn);
    }
    if (bytes > 0 && dst == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: dst is NULL", fn);
    }
    if (bytes > 0 && src == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: src is NULL", fn);
    }
    return DISTIL_OK;
}

distil_status distil_memcpy_to_device(distil_ctx *ctx, void *dst, const void *src_host,
                                      size_t bytes) {
    DISTIL_TRY(distil_memcpy_check(ctx, "memcpy_to_device", dst, src_host, bytes));
    if (bytes == 0) {
        return DISTIL_OK;
    }
    return ctx->be->mem_upload(ctx->b, distil_dptr_make(dst, 0), src_host, bytes);
}

distil_status distil_memcpy_to_host(distil_ctx *ctx, void *dst_host, const void *src,
                                    size_t bytes) {
    DISTIL_TRY(distil_memcpy_check(ctx, "memcpy_to_host", dst_host, src, bytes));
    if (bytes == 0) {
        return DISTIL_OK;
    }
    return ctx->be->mem_download(ctx->b, dst_host, distil_dptr_make(src, 0), bytes);
}
