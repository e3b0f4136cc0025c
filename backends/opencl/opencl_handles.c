/*
 * opencl_handles.c - which cl_mem handles the opencl backend may trust, and where they lie
 * (docs/SPEC.md §5: a handle that is not a cl_mem of the context, or one smaller than the
 * descriptor needs, is refused).
 *
 * What is safe to ask about an unknown pointer p:
 *   - the buffers this context allocated (distil_malloc) are kept in a sorted table with their
 *     sizes: a lookup never touches p, so a host pointer, garbage or an already freed handle
 *     is answered without the driver. distil_free accepts only these (a second free of the
 *     same handle is refused, unless a later distil_malloc got the same address back);
 *   - any other p is read (its first word, through a pipe: an unreadable address gives EFAULT,
 *     not a crash, see opencl_memory.c) and must start with this platform's dispatch pointer
 *     before the driver is asked about it (clGetMemObjectInfo jumps through that pointer).
 *     A released cl_mem whose memory still holds the dispatch pointer passes that test and
 *     then reaches the driver: use after free stays undefined (listed in distil.h).
 * Handles seen once are not remembered: the caller may release one and the allocator reuse its
 * address for anything, so a cache of foreign handles would turn into trusting garbage.
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first entry whose handle is >= mem. */
static size_t ocl_allocs_lower(const distil_ocl *b, cl_mem mem) {
    size_t lo = 0;
    size_t hi = b->n_allocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)b->allocs[mid].mem < (uintptr_t)mem) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

size_t distil_ocl_allocs_find(const distil_ocl *b, const void *p) {
    size_t i = ocl_allocs_lower(b, (cl_mem)p);
    return i < b->n_allocs && b->allocs[i].mem == (cl_mem)p ? b->allocs[i].bytes : 0;
}

distil_status distil_ocl_allocs_add(distil_ocl *b, cl_mem mem, size_t bytes) {
    if (b->n_allocs == b->cap_allocs) {
        size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 64;
        distil_ocl_alloc *grown = realloc(b->allocs, cap * sizeof *grown);
        if (grown == NULL) {
            return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                    "opencl: out of host memory for the table of buffers");
        }
        b->allocs = grown;
        b->cap_allocs = cap;
    }
    size_t i = ocl_allocs_lower(b, mem);
    memmove(&b->allocs[i + 1], &b->allocs[i], (b->n_allocs - i) * sizeof b->allocs[0]);
    b->allocs[i].mem = mem;
    b->allocs[i].bytes = bytes;
    b->n_allocs++;
    return DISTIL_OK;
}

void distil_ocl_allocs_remove(distil_ocl *b, cl_mem mem) {
    size_t i = ocl_allocs_lower(b, mem);
    if (i < b->n_allocs && b->allocs[i].mem == mem) {
        memmove(&b->allocs[i], &b->allocs[i + 1], (b->n_allocs - i - 1) * sizeof b->allocs[0]);
        b->n_allocs--;
    }
}

distil_status distil_ocl_check_free(void *vb, const void *p) {
    const distil_ocl *b = vb;
    if (distil_ocl_allocs_find(b, p) == 0) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "ptr (%p) is not a live distil_malloc buffer of this context "
                                "(freed already, or not from distil_malloc)",
                                p);
    }
    return DISTIL_OK;
}

/* A handle check_pointer accepted: its parent buffer (itself unless a sub-buffer), its origin
 * in the parent and its size. */
distil_status distil_ocl_mem_extent(void *vb, const void *p, distil_mem_extent *out) {
    const distil_ocl *b = vb;
    size_t own = distil_ocl_allocs_find(b, p);
    if (own != 0) {
        *out = (distil_mem_extent){p, 0, own};
        return DISTIL_OK;
    }
    cl_mem mem = (cl_mem)p;
    cl_mem parent = NULL;
    size_t origin = 0;
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS) {
        err = clGetMemObjectInfo(mem, CL_MEM_OFFSET, sizeof origin, &origin, NULL);
    }
    if (err == CL_SUCCESS) {
        err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    }
    if (err != CL_SUCCESS) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%p is not a cl_mem buffer (%s asking its size)", p,
                                distil_ocl_error_name(err));
    }
    *out = (distil_mem_extent){parent != NULL ? (const void *)parent : p, (uintptr_t)origin,
                               size != 0 ? size : 1};
    return DISTIL_OK;
}
