/*
 * host_memory.h - the memory ops of the backends whose device memory is host memory (cpu, ref):
 * 256-byte aligned allocations that honour the fault-injection hook, and plain copies. The
 * copy and free functions have the vtable's signatures and serve as its entries directly.
 */
#ifndef DISTIL_CORE_HOST_MEMORY_H
#define DISTIL_CORE_HOST_MEMORY_H

#include "backend.h"

/* bytes of host memory, 256-byte aligned, into *ptr; "<who>: cannot allocate N bytes" on ctx and
 * DISTIL_ERR_OUT_OF_MEMORY when it fails (or the fault hook says so). */
distil_status distil_host_alloc(distil_ctx *ctx, const char *who, size_t bytes, void **ptr);
void distil_host_free(void *b, void *ptr);
distil_status distil_host_upload(void *b, distil_dptr dst, const void *src, size_t bytes);
distil_status distil_host_download(void *b, void *dst, distil_dptr src, size_t bytes);

#endif /* DISTIL_CORE_HOST_MEMORY_H */
