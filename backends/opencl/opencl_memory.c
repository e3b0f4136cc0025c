/*
 * opencl_memory.c - device memory of the opencl backend: cl_mem buffers handed out as void *,
 * blocking copies on the context's queue, backend-owned scratch, and check_pointer, which must
 * tell a cl_mem of this context from any other pointer without crashing (see below).
 */
#define _POSIX_C_SOURCE 200809L

#include "fault.h"
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#define OCL_HAVE_PIPE 1
#endif

/* Make the driver allocate now, so that running out of memory shows up here rather than in a
 * later kernel. Uses a private queue: a new buffer needs no ordering with the caller's work. */
static cl_int ocl_buffer_touch(distil_ocl *b, cl_mem mem) {
    cl_event ev = NULL;
    cl_int err = clEnqueueMigrateMemObjects(b->alloc_queue, 1, &mem,
                                            CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED, 0, NULL, &ev);
    if (err != CL_SUCCESS) {
        return err;
    }
    err = clWaitForEvents(1, &ev);
    cl_int status = CL_COMPLETE;
    if (err == CL_SUCCESS) {
        err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    }
    clReleaseEvent(ev);
    return err != CL_SUCCESS ? err : status < 0 ? status : CL_SUCCESS;
}

distil_status distil_ocl_buffer_new(distil_ocl *b, size_t bytes, cl_mem *out) {
    *out = NULL;
    if ((cl_ulong)bytes > b->max_alloc) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "opencl: %zu bytes exceed the largest buffer %s can allocate "
                                "(CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu)",
                                bytes, b->name, (unsigned long long)b->max_alloc);
    }
    if (distil_fault_alloc()) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "opencl: allocating %zu bytes failed (injected)", bytes);
    }
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(b->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err == CL_SUCCESS) {
        err = ocl_buffer_touch(b, mem);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(mem);
        }
    }
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "allocating %zu bytes", bytes);
        /* Any failure to allocate is a memory failure for the caller. */
        distil_ocl_fail(b, err, what);
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    *out = mem;
    return DISTIL_OK;
}

distil_status distil_ocl_mem_alloc(void *vb, size_t bytes, void **ptr) {
    distil_ocl *b = vb;
    *ptr = NULL;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    cl_mem mem = NULL;
    DISTIL_TRY(distil_ocl_buffer_new(b, bytes, &mem));
    distil_status s = distil_ocl_allocs_add(b, mem, bytes);
    if (s != DISTIL_OK) {
        clReleaseMemObject(mem);
        return s;
    }
    *ptr = (void *)mem;
    return DISTIL_OK;
}

/* Released buffers stay alive inside OpenCL until the kernels queued on them finish. */
void distil_ocl_mem_free(void *vb, void *ptr) {
    distil_ocl *b = vb;
    if (ptr != NULL) {
        distil_ocl_allocs_remove(b, (cl_mem)ptr);
        clReleaseMemObject((cl_mem)ptr);
    }
}

distil_status distil_ocl_mem_upload(void *vb, distil_dptr dst, const void *src, size_t bytes) {
    distil_ocl *b = vb;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    cl_int err = clEnqueueWriteBuffer(b->queue, distil_ocl_mem(dst), CL_TRUE, dst.off, bytes, src,
                                      0, NULL, NULL);
    return err == CL_SUCCESS ? DISTIL_OK : distil_ocl_fail(b, err, "copy to device");
}

distil_status distil_ocl_mem_download(void *vb, void *dst, distil_dptr src, size_t bytes) {
    distil_ocl *b = vb;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    cl_int err = clEnqueueReadBuffer(b->queue, distil_ocl_mem(src), CL_TRUE, src.off, bytes, dst, 0,
                                     NULL, NULL);
    return err == CL_SUCCESS ? DISTIL_OK : distil_ocl_fail(b, err, "copy to host");
}

distil_status distil_ocl_scratch_get(distil_ocl *b, int slot, size_t bytes, cl_mem *out) {
    distil_ocl_scratch *s = &b->scratch[slot];
    if (s->mem == NULL || s->bytes < bytes) {
        if (s->mem != NULL) {
            clReleaseMemObject(s->mem);
        }
        s->mem = NULL;
        s->bytes = 0;
        const size_t mib = (size_t)1 << 20;
        size_t want = (bytes + mib - 1) / mib * mib; /* fewer regrowths for similar sizes */
        if ((cl_ulong)want > b->max_alloc) {
            want = bytes;
        }
        DISTIL_TRY(distil_ocl_buffer_new(b, want, &s->mem));
        s->bytes = want;
    }
    *out = s->mem;
    return DISTIL_OK;
}

void distil_ocl_scratch_release(distil_ocl *b) {
    for (int i = 0; i < DISTIL_OCL_SCRATCH_N; i++) {
        if (b->scratch[i].mem != NULL) {
            clReleaseMemObject(b->scratch[i].mem);
        }
        b->scratch[i].mem = NULL;
        b->scratch[i].bytes = 0;
    }
}

/*
 * Reading an arbitrary pointer can fault (a CUDA device pointer, a freed block). Writing the
 * bytes into a pipe makes the kernel do the read: an unreadable address gives EFAULT instead of
 * a crash. Returns false when p cannot be read or no pipe is available. n <= PIPE_BUF.
 */
static bool ocl_read_bytes(distil_ocl *b, const void *p, void *dst, size_t n) {
#ifdef OCL_HAVE_PIPE
    if (b->probe_pipe[0] < 0) {
        return false;
    }
    if (write(b->probe_pipe[1], p, n) != (ssize_t)n) {
        return false;
    }
    return read(b->probe_pipe[0], dst, n) == (ssize_t)n;
#else
    (void)b;
    (void)p;
    (void)dst;
    (void)n;
    return false;
#endif
}

/* Does `table` hold the same entry points as our platform's dispatch table? An ICD whose
 * objects do not all share one table still points them at the same driver functions. */
static bool ocl_same_dispatch(distil_ocl *b, const void *table) {
    void *theirs[4];
    void *ours[4];
    if (!ocl_read_bytes(b, table, theirs, sizeof theirs)) {
        return false;
    }
    memcpy(ours, b->mem_dispatch, sizeof ours);
    const bool any = ours[0] || ours[1] || ours[2] || ours[3];
    return any && memcmp(theirs, ours, sizeof ours) == 0;
}

bool distil_ocl_is_platform_object(distil_ocl *b, const void *p) {
    void *word = NULL;
    if (b->mem_dispatch == NULL || !ocl_read_bytes(b, p, &word, sizeof word)) {
        return false;
    }
    return word == b->mem_dispatch || ocl_same_dispatch(b, word);
}

/*
 * An OpenCL ICD object starts with its platform's dispatch-table pointer, and the ICD loader
 * calls through it: clGetMemObjectInfo on a host pointer would jump through garbage. So first
 * check (safely) that p starts with the dispatch pointer of our own buffers, and only then ask
 * OpenCL whether it is a buffer of our context. Without a pipe we cannot tell: accept. The
 * context's own distil_malloc buffers are known without either (opencl_handles.c).
 */
distil_status distil_ocl_check_pointer(void *vb, const void *p, const char *what) {
    distil_ocl *b = vb;
    if (distil_ocl_allocs_find(b, p) != 0 || b->probe_pipe[0] < 0) {
        return DISTIL_OK;
    }
    if (!distil_ocl_is_platform_object(b, p)) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%s (%p) is not a cl_mem of this OpenCL platform (opencl device "
                                "pointers are cl_mem handles, e.g. from distil_malloc)",
                                what, p);
    }
    cl_mem_object_type type = 0;
    cl_context context = NULL;
    cl_int err = clGetMemObjectInfo((cl_mem)p, CL_MEM_TYPE, sizeof type, &type, NULL);
    if (err == CL_SUCCESS) {
        err = clGetMemObjectInfo((cl_mem)p, CL_MEM_CONTEXT, sizeof context, &context, NULL);
    }
    if (err != CL_SUCCESS || type != CL_MEM_OBJECT_BUFFER) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG, "%s (%p) is not a cl_mem buffer",
                                what, p);
    }
    if (context != b->context) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%s is a cl_mem of another cl_context than this distil context's",
                                what);
    }
    return DISTIL_OK;
}
