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

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        v += distil_warp_xor(v, o);
    }
    return v;
}

/* Sum over the block; scratch holds DISTIL_GPU_MAX_WARPS values. Ends with a barrier-free read,
 * so the next call begins with a barrier before it reuses scratch. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *scratch) {
    v = warp_sum(v);
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
        r += scratch[w];
    }
    return r;
}

/* A running log-sum-exp: sum of exp(v - m) over the values seen, m their maximum.
 * -inf values add nothing; m == -inf with s == 0 is the empty set. */
struct lse_acc {
    float m;
    float s;
};

__device__ __forceinline__ lse_acc lse_empty() {
    lse_acc a;
    a.m = -INFINITY;
    a.s = 0.0f;
    return a;
}

/* Add one value: one exponential per value; the rescale branch runs only when the max grows. */
__device__ __forceinline__ void lse_add(lse_acc &a, float v) {
    const float d = v - a.m;
    if (d > 0.0f) {
        a.s = a.s * __expf(-d) + 1.0f;
        a.m = v;
    } else if (d == d) { /* d is NaN for -inf - -inf: that value adds exp(-inf) = 0 */
        a.s += __expf(d);
    }
}

__device__ __forceinline__ lse_acc lse_merge(lse_acc a, lse_acc b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) {
        return a;
    }
    lse_acc r;
    r.m = m;
    r.s = a.s * __expf(a.m - m) + b.s * __expf(b.m - m);
    return r;
}

__device__ __forceinline__ float lse_value(lse_acc a) {
    return a.m + __logf(a.s);
}

__device__ __forceinline__ lse_acc warp_lse(lse_acc a) {
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        lse_acc b;
        b.m = distil_warp_xor(a.m, o);
        b.s = distil_warp_xor(a.s, o);
        a = lse_merge(a, b);
    }
    return a;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_REDUCE_CUH */
