/*
 * cutlass_util.cuh - what the CUTLASS kernels of the cuda backend (gemm_stats.cu, gemm_gradw.cu)
 * share: the fit check, the once-per-context setup and the launch of a GemmUniversalAdapter Gemm
 * whose kernel needs no workspace. Included only by files compiled with CUTLASS's headers.
 */
#ifndef DISTIL_GPU_CUTLASS_UTIL_CUH
#define DISTIL_GPU_CUTLASS_UTIL_CUH

#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"

#include <cuda_runtime.h>
#include <stdint.h>

namespace cutlass_util {

/* TMA copies need 16-byte aligned bases. */
inline bool aligned16(const void *p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/* Whether Gemm takes arguments g without a workspace. Host only. */
template <class Gemm> bool fits(const typename Gemm::Arguments &g) {
    return Gemm::get_workspace_size(g) == 0 && Gemm::can_implement(g) == cutlass::Status::kSuccess;
}

/* The kernel's shared-memory attribute (once per context, on its device). */
template <class Gemm> cudaError_t setup() {
    using Kernel = typename Gemm::GemmKernel;
    const int smem = static_cast<int>(Kernel::SharedStorageSize);
    return cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
}

/* One launch on stream s of arguments that fits accepted (no workspace; setup has run). */
template <class Gemm> cudaError_t run(const typename Gemm::Arguments &g, cudaStream_t s) {
    using Kernel = typename Gemm::GemmKernel;
    typename Kernel::Params params = Kernel::to_underlying_arguments(g, nullptr);
    if (Gemm::run(params, s) != cutlass::Status::kSuccess) {
        const cudaError_t e = cudaGetLastError();
        return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
}

} // namespace cutlass_util

#endif /* DISTIL_GPU_CUTLASS_UTIL_CUH */
