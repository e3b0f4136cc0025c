/*
 * head_rows.cu - the head options of docs/SPEC.md §6 on one chunk of one head's fp32 logits:
 * each logit scaled and capped in place (dh_cap of core/backend_api/math/distil_head.h, through
 * div_math.cuh), the student's dz'/dz at each logit (dh_dcap, when asked), and each row's
 * logsumexp at temperature 1. One block per row; the maximum and the
 * double sum of exponentials are combined in a fixed order (reduce.cuh), so reruns give the same
 * bits. The core runs it only when an option is on: the default fused loss never launches it.
 * Cost when on: one read of the chunk's logits of that head (and one write with scale / cap).
 */
#include "gpu_state.cuh"
#include "div_math.cuh"
#include "reduce.cuh"

namespace DISTIL_GPU_NS {

constexpr int HEAD_THREADS = 512;

struct reduce_max {
    __device__ __forceinline__ float operator()(float a, float b) const {
        return fmaxf(a, b);
    }
};

/* z (rows, vocab) dense; lse (rows) or nullptr. fmaxf skips NaN; a NaN logit still makes the
 * sum NaN, so the row's LSE is NaN as on the other backends. */
__global__ void __launch_bounds__(HEAD_THREADS)
    distil_head_rows_kernel(float *z, int64_t vocab, bool transform, float scale, float cap,
                            float *dz, float *lse) {
    __shared__ float fscratch[DISTIL_GPU_MAX_WARPS];
    __shared__ double dscratch[DISTIL_GPU_MAX_WARPS];
    float *zr = z + static_cast<int64_t>(blockIdx.x) * vocab;
    float *dzr = dz != nullptr ? dz + static_cast<int64_t>(blockIdx.x) * vocab : nullptr;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        float v = zr[j];
        if (transform) { /* uniform */
            if (dzr != nullptr) {
                dzr[j] = dh_dcap(v, scale, cap); /* from z, before it goes */
            }
            v = dh_cap(v, scale, cap);
            zr[j] = v; /* each thread reads and writes only its own columns */
        }
        m = fmaxf(m, v);
    }
    if (lse == nullptr) {
        return;
    }
    m = block_reduce(m, fscratch, reduce_max{});
    const float r = m == -INFINITY || m == INFINITY ? 0.0f : m; /* all -inf or +inf: no shift */
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        s += static_cast<double>(expf(zr[j] - r));
    }
    s = block_sum(s, dscratch);
    if (threadIdx.x == 0) {
        lse[blockIdx.x] = m == INFINITY ? m : static_cast<float>(static_cast<double>(r) + log(s));
    }
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(head_rows)(void *vb, const distil_head_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > 0x7fffffff) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "head_rows: %lld rows in one chunk (at most 2^31 - 1)",
                                (long long)a->rows);
    }
    gpu_device_guard guard(b);
    distil_head_rows_kernel<<<static_cast<unsigned>(a->rows), HEAD_THREADS, 0, b->lane.stream>>>(
        gpu_ptr<float>(a->z), a->vocab, a->transform, a->scale, a->cap, gpu_ptr<float>(a->dz),
        gpu_ptr<float>(a->lse));
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "head_rows");
}
