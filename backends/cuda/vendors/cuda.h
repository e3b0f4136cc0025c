/*
 * vendors/cuda.h - the CUDA side of vendor.h: runtime, cuBLAS/cuBLASLt and fp16 headers, the
 * warp width and the warp primitives. Only vendor.h includes this file.
 */
#ifndef DISTIL_VENDORS_CUDA_H
#define DISTIL_VENDORS_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#define DISTIL_GPU_NAME     "cuda"
#define DISTIL_GPU_PRIORITY 400
/* Namespace of the internal C++ symbols, distinct from the hip build of the same sources. */
#define DISTIL_GPU_NS          distil_cuda_impl
#define DISTIL_GPU_HAVE_BLAS   1
#define DISTIL_GPU_HAVE_BLASLT 1
/* fp8 e4m3 conversions (cuda_fp8.h) and cuBLASLt fp8 GEMMs (sm_89+: checked at run time). */
#define DISTIL_GPU_HAVE_FP8 1
/* Thread block clusters (distributed shared memory) exist from sm_90 on. */
#define DISTIL_GPU_HAVE_CLUSTERS 1

/* Threads of a warp; a compile-time constant so reductions unroll. */
#define DISTIL_GPU_WARP       32
#define DISTIL_GPU_LANES_MASK 0xffffffffu

__device__ __forceinline__ float distil_warp_xor(float v, int lane_mask) {
    return __shfl_xor_sync(DISTIL_GPU_LANES_MASK, v, lane_mask);
}
__device__ __forceinline__ double distil_warp_xor(double v, int lane_mask) {
    return __shfl_xor_sync(DISTIL_GPU_LANES_MASK, v, lane_mask);
}
__device__ __forceinline__ long long distil_warp_xor(long long v, int lane_mask) {
    return __shfl_xor_sync(DISTIL_GPU_LANES_MASK, v, lane_mask);
}

/* fp16 bits <-> fp32, round to nearest even. */
__device__ __forceinline__ float distil_f16_bits_to_float(unsigned short h) {
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ unsigned short distil_float_to_f16_bits(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

/* fp32 -> bf16 bits, round to nearest even, by the converter of sm_80+ (one instruction; older
 * targets get the library's emulation); NaN stays NaN. */
__device__ __forceinline__ unsigned short distil_float_to_bf16_bits(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* A 16-byte load that tells the cache the line will not be read again (streaming). */
template <typename T> __device__ __forceinline__ T distil_load_stream(const T *p) {
    return __ldcs(p);
}

/* Keeps a pointer that a loop uses in a register: an empty asm makes its value opaque, so the
 * compiler cannot re-derive it from the kernel's parameters at every use (it did, for a row base
 * row * stride + base, at ~4 instructions per access of the JSD loop). */
template <typename T> __device__ __forceinline__ void gpu_keep_in_register(T *&p) {
    asm("" : "+l"(p));
}

/* Asynchronous 16-byte copy global -> shared (sm_80+), and the wait for all of a thread's. */
__device__ __forceinline__ void distil_cp_async16(void *smem, const void *gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    *static_cast<uint4 *>(smem) = *static_cast<const uint4 *>(gmem);
#endif
}
__device__ __forceinline__ void distil_cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

/* The 64-bit value whose low word is lo and high word hi, as one register-pair move (the shift
 * and or form was miscompiled by CUDA 13.0's ptxas: dtype.cuh's store_words). */
__device__ __forceinline__ unsigned long long distil_pack64(unsigned lo, unsigned hi) {
    unsigned long long r;
    asm("mov.b64 %0, {%1, %2};" : "=l"(r) : "r"(lo), "r"(hi));
    return r;
}

/* Pushes between the blocks of a cluster (sm_90+): a 16-byte store into block `rank`'s shared
 * memory at the address that `local` has in this block, counted on that block's barrier at
 * `bar` (st.async: no fence, the receiver's wait makes it visible), and the local barrier's
 * init, arming (one arrival that expects `bytes`) and wait for a phase of given parity.
 * Before sm_90 these are never called (a cluster of one needs no push). */
__device__ __forceinline__ void distil_cluster_push16(void *local, unsigned long long *bar,
                                                      int rank, unsigned long long a,
                                                      unsigned long long b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(d) : "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(m) : "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b64 [%0], {%1, %2}, "
                 "[%3];" ::"r"(d),
                 "l"(a), "l"(b), "r"(m)
                 : "memory");
#else
    (void)local, (void)bar, (void)rank, (void)a, (void)b;
#endif
}
__device__ __forceinline__ void distil_cluster_bar_init(unsigned long long *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;" ::"r"(m)
                 : "memory");
#else
    (void)bar;
#endif
}
__device__ __forceinline__ void distil_cluster_bar_arm(unsigned long long *bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(m), "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
#endif
}
__device__ __forceinline__ void distil_cluster_bar_wait(unsigned long long *bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(m), "r"(parity)
                     : "memory");
    }
#else
    (void)bar, (void)parity;
#endif
}

/* 2^x by the special-function unit alone: relative error ~2 ulp, results below 2^-126 flushed to
 * 0 (exp2f adds the denormal range for ~3 more instructions per call). */
__device__ __forceinline__ float distil_exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* a / b for b in [2^-126, 2^126], fast: one approximate reciprocal (1 ulp) and a product, so
 * 2 ulp. (__fdividef carries a guard for |b| > 2^126 that costs five more instructions per
 * division; distil_elem.h's DE_DIV divisors lie in [1/2, 3].) */
__device__ __forceinline__ float distil_div_fast(float a, float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(b));
    return a * r;
}

/* Pointer kind as the runtime sees it: 1 device (or managed) memory, 0 anything else. */
static inline cudaError_t distil_gpu_pointer_device(const void *p, int *is_device, int *device) {
    cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    *is_device = 0;
    *device = -1;
    if (e != cudaSuccess) {
        return e;
    }
    *is_device = at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
    *device = at.device;
    return cudaSuccess;
}

#endif /* DISTIL_VENDORS_CUDA_H */
