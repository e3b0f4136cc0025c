/*
 * reduce.cuh - deterministic warp and block reductions, parameterised by the vendor's warp width
 * (DISTIL_GPU_WARP). Every thread of the block gets the same result: partial values are combined
 * in a fixed order (a butterfly inside the warp, then warp 0, 1, 2, ... in sequence), never with
 * floating-point atomics. blockDim.x must be a multiple of the warp width.
 */
#ifndef DISTIL_GPU_REDUCE_CUH
#define DISTIL_GPU_REDUCE_CUH

#include "vendor.h"

namespace DISTIL_GPU_NS {

/* The two combining operations of the reductions below. */
struct reduce_add {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
        return a + b;
    }
};
struct reduce_min {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
        return b < a ? b : a;
    }
};

/* op over the warp by a butterfly: every lane gets the result. */
template <typename T, typename Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        v = op(v, distil_warp_xor(v, o));
    }
    return v;
}

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    return warp_reduce(v, reduce_add{});
}

/* op over the block; scratch holds DISTIL_GPU_MAX_WARPS values. Ends with a barrier-free read,
 * so the next call begins with a barrier before it reuses scratch. */
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T *scratch, Op op) {
    v = warp_reduce(v, op);
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    const int n_warps = blockDim.x / DISTIL_GPU_WARP;
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    T r = scratch[0];
    for (int w = 1; w < n_warps; w++) {
        r = op(r, scratch[w]);
    }
    return r;
}

template <typename T> __device__ __forceinline__ T block_sum(T v, T *scratch) {
    return block_reduce(v, scratch, reduce_add{});
}

template <typename T> __device__ __forceinline__ T block_min(T v, T *scratch) {
    return block_reduce(v, scratch, reduce_min{});
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_REDUCE_CUH */
