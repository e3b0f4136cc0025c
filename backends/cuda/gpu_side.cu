/*
 * gpu_side.cu - the second lane of the cuda / hip backend: the vtable's side_begin, side_end
 * and side_join (core/backend_api/backend.h), which the core's fused loop drives so that the next
 * chunk's logits GEMMs run beside this chunk's gradient GEMMs. The side lane (gpu_state.side: an
 * internal stream, its own BLAS handle and workspace) is made at create, never inside a call (a
 * call may be being captured); two events fork it from the stream and join it back.
 */
#include "gpu_state.cuh"

using namespace DISTIL_GPU_NS;

/* The side waits for everything queued on the stream so far (fork), then the lanes trade places.
 * The test hook's spin (gpu_side_delay) runs on the side after the fork. */
extern "C" distil_status DISTIL_GPU_FN(side_begin)(void *vb, bool *opened) {
    gpu_state *b = gpu_of(vb);
    *opened = false;
    gpu_device_guard guard(b); /* events resolve streams on this device */
    GPU_TRY(b, cudaEventRecord(b->fork, b->lane.stream), "fused loss: fork");
    GPU_TRY(b, cudaStreamWaitEvent(b->side.stream, b->fork, 0), "fused loss: fork");
    const distil_status s = gpu_side_delay(b);
    gpu_lanes_swap(b);
    *opened = true;
    return s;
}

/* Back to the stream; the join event marks the side's work so far (recorded after a failure too:
 * the join must follow the lane's last work). */
extern "C" distil_status DISTIL_GPU_FN(side_end)(void *vb) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    gpu_lanes_swap(b);
    const cudaError_t e = cudaEventRecord(b->join, b->side.stream);
    b->side_joinable = e == cudaSuccess;
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "fused loss: join");
}

/* The stream waits for the side's work; only a recorded join is waited for. */
extern "C" distil_status DISTIL_GPU_FN(side_join)(void *vb) {
    gpu_state *b = gpu_of(vb);
    if (!b->side_joinable) {
        return DISTIL_OK;
    }
    b->side_joinable = false;
    gpu_device_guard guard(b);
    GPU_TRY(b, cudaStreamWaitEvent(b->lane.stream, b->join, 0), "fused loss: join");
    return DISTIL_OK;
}
