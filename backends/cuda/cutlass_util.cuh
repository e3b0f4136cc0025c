/*
 * cutlass_util.cuh - what the CUTLASS kernels of the cuda backend (gemm_stats.cu, gemm_gradw.cu)
 * share: the kernel's build (PingpongBf16), the fit check, the once-per-context setup and the
 * launch of a GemmUniversalAdapter Gemm whose kernel needs no workspace. Included only by files
 * compiled with CUTLASS's headers.
 */
#ifndef DISTIL_GPU_CUTLASS_UTIL_CUH
#define DISTIL_GPU_CUTLASS_UTIL_CUH

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include <cuda_runtime.h>
#include <stdint.h>

namespace cutlass_util {

/* The bf16 GEMM both kernels are: sm_90 TMA warp-specialised pingpong (one warpgroup's epilogue
 * beside the other's MMAs), cluster 2 x 1, persistent, fp32 accumulation; A and B of layouts LA and
 * LB (8-element TMA rows), C (ElementC, void: none) and D (ElementD) row-major with AlignC / AlignD
 * elements per 16 bytes, and the epilogue's fusion Fusion (an operation or an EVT tree). */
template <class LA, class LB, class ElementC, int AlignC, class ElementD, int AlignD, class Tile,
          class Fusion>
struct PingpongBf16 {
    using Bf16 = cutlass::bfloat16_t;
    using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
    using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC,
        cutlass::layout::RowMajor, AlignC, ElementD, cutlass::layout::RowMajor, AlignD,
        cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
    using Main = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, LA, 8, Bf16, LB, 8, float, Tile,
        Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epi::SharedStorage))>,
        cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

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

/* One launch of g on stream s where the caller's operand checks (ok) and fits accept it (*taken);
 * nothing launched otherwise. No workspace; setup has run. */
template <class Gemm>
cudaError_t run_if(bool ok, const typename Gemm::Arguments &g, cudaStream_t s, bool *taken) {
    *taken = ok && fits<Gemm>(g);
    if (!*taken) {
        return cudaSuccess;
    }
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
