/*
 * host_memory.c - memory ops shared by the host-memory backends (cpu, ref); see
 * backend_api/host_memory.h.
 */
#include "host_memory.h"

#include "error.h"
#include "fault.h"

#include <stdlib.h>
#include <string.h>

distil_status distil_host_alloc(distil_ctx *ctx, const char *who, size_t bytes, void **ptr) {
    size_t rounded = (bytes + 255) / 256 * 256; /* 0 when bytes is within 255 of SIZE_MAX */
    *ptr = distil_fault_alloc() || rounded < bytes ? NULL : aligned_alloc(256, rounded);
    if (*ptr == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", who,
                                bytes);
    }
    return DISTIL_OK;
}

void distil_host_free(void *b, void *ptr) {
    (void)b;
    free(ptr);
}

distil_status distil_host_upload(void *b, distil_dptr dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes > 0) {
        memcpy(distil_dptr_addr(dst), src, bytes);
    }
    return DISTIL_OK;
}

distil_status distil_host_download(void *b, void *dst, distil_dptr src, size_t bytes) {
    (void)b;
    if (bytes > 0) {
        memcpy(dst, distil_dptr_addr(src), bytes);
    }
    return DISTIL_OK;
}
