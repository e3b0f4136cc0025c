/*
 * gpu_memory.cu - device memory of the cuda / hip backend: allocation, host <-> device copies
 * (blocking for the host, ordered on the context's stream) and the check that a pointer is
 * device memory of this context's device.
 */
#include "gpu_state.cuh"

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(mem_alloc)(void *vb, size_t bytes, void **ptr) {
    gpu_state *b = gpu_of(vb);
    *ptr = nullptr;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    if (distil_fault_alloc()) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "%s: cudaMalloc of %zu bytes failed (injected)", DISTIL_GPU_NAME,
                                bytes);
    }
    gpu_device_guard guard(b);
    const cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        *ptr = nullptr;
        (void)cudaGetLastError();
        const distil_status s =
            e == cudaErrorMemoryAllocation ? DISTIL_ERR_OUT_OF_MEMORY : DISTIL_ERR_BACKEND;
        return distil_error_set(b->ctx, s, "%s: cudaMalloc of %zu bytes: %s", DISTIL_GPU_NAME,
                                bytes, cudaGetErrorString(e));
    }
    return DISTIL_OK;
}

extern "C" void DISTIL_GPU_FN(mem_free)(void *vb, void *ptr) {
    if (ptr == nullptr) {
        return;
    }
    gpu_device_guard guard(gpu_of(vb));
    (void)cudaFree(ptr);
    (void)cudaGetLastError();
}

extern "C" distil_status DISTIL_GPU_FN(mem_upload)(void *vb, distil_dptr dst, const void *src,
                                                   size_t bytes) {
    gpu_state *b = gpu_of(vb);
    if (bytes == 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    GPU_TRY(
        b,
        cudaMemcpyAsync(distil_dptr_addr(dst), src, bytes, cudaMemcpyHostToDevice, b->lane.stream),
        "memcpy to device");
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "memcpy to device");
    return DISTIL_OK;
}

extern "C" distil_status DISTIL_GPU_FN(mem_download)(void *vb, void *dst, distil_dptr src,
                                                     size_t bytes) {
    gpu_state *b = gpu_of(vb);
    if (bytes == 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    GPU_TRY(
        b,
        cudaMemcpyAsync(dst, distil_dptr_addr(src), bytes, cudaMemcpyDeviceToHost, b->lane.stream),
        "memcpy to host");
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "memcpy to host");
    return DISTIL_OK;
}

extern "C" distil_status DISTIL_GPU_FN(check_pointer)(void *vb, const void *p, const char *what) {
    gpu_state *b = gpu_of(vb);
    int is_device = 0;
    int device = -1;
    /* An error here means the runtime does not know the pointer: host memory. */
    if (distil_gpu_pointer_device(p, &is_device, &device) != cudaSuccess) {
        (void)cudaGetLastError();
        is_device = 0;
    }
    if (!is_device) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %p is not %s device memory (host or unknown pointer)", what, p,
                                DISTIL_GPU_NAME);
    }
    if (device != b->device) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %p is memory of %s device %d, the context uses device %d",
                                what, p, DISTIL_GPU_NAME, device, b->device);
    }
    return DISTIL_OK;
}
