/*
 * gemm_gradw.cu - see gemm_gradw.cuh. A CUTLASS 3 pingpong kernel (128 x 128 x 64 tiles, cluster
 * 2 x 1, persistent). In CUTLASS's terms A = g^T is (m, k) column-major, B = x is (k, n) row-major
 * and C, D are (m, n) row-major; the epilogue is D = 1 acc + beta C, whose C load CUTLASS skips
 * when beta == 0. At a 1024 x 128256 x 2048 chunk on the H200 it takes 0.846 ms against cuBLAS's
 * fp32 GEMM 0.964 + cast 0.374 (bench/probes/gradw_cast.cu). Only the last chunk takes it: the
 * same kernel with an fp32 D for the accumulating chunks, faster than cuBLAS alone, made the
 * whole loss slower beside the second lane's logits GEMMs (docs/CUDA-NOTES.md, twentieth
 * session).
 */
#include "gemm_gradw.cuh"

#include "cutlass_util.cuh"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace gemm_gradw_impl {

using namespace cute;
using Bf16 = cutlass::bfloat16_t;
using Tile = Shape<_128, _128, _64>;
using Cluster = Shape<_2, _1, _1>;

using Op = cutlass::epilogue::fusion::LinearCombination<Bf16, float, float, float>;
using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, float, cutlass::layout::RowMajor,
    4, Bf16, cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecialized, Op>::CollectiveOp;
using Main = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::ColumnMajor, 8,
    Bf16, cutlass::layout::RowMajor, 8, float, Tile, Cluster,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epi::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi,
                                                    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

/* (c absent with beta == 0: d stands in for its address, which the epilogue then never loads
 * from) */
static typename Gemm::Arguments arguments_of(const gemm_gradw_args &a) {
    using SA = typename Kernel::StrideA;
    using SB = typename Kernel::StrideB;
    using SC = typename Kernel::StrideC;
    using SD = typename Kernel::StrideD;
    const float *c = a.c != nullptr ? a.c : static_cast<const float *>(a.d);
    typename Gemm::Arguments g{cutlass::gemm::GemmUniversalMode::kGemm,
                               {a.m, a.n, a.k, 1},
                               {static_cast<const Bf16 *>(a.g),
                                cutlass::make_cute_packed_stride(SA{}, make_shape(a.m, a.k, 1)),
                                static_cast<const Bf16 *>(a.x),
                                cutlass::make_cute_packed_stride(SB{}, make_shape(a.n, a.k, 1))},
                               {{1.0f, a.beta},
                                c,
                                cutlass::make_cute_packed_stride(SC{}, make_shape(a.m, a.n, 1)),
                                static_cast<Bf16 *>(a.d),
                                cutlass::make_cute_packed_stride(SD{}, make_shape(a.m, a.n, 1))}};
    g.hw_info.device_id = a.device;
    g.hw_info.sm_count = a.sm_count;
    return g;
}

} // namespace gemm_gradw_impl

using namespace gemm_gradw_impl;
using cutlass_util::aligned16;

bool gemm_gradw_fits(const gemm_gradw_args &a) {
    /* TMA: 16-byte aligned bases and row strides (m and n bf16, n fp32) */
    const bool c_ok = a.beta == 0.0f || (a.c != nullptr && aligned16(a.c));
    if (a.m < 1 || a.n < 1 || a.k < 1 || a.m % 8 != 0 || a.n % 8 != 0 || !c_ok || !aligned16(a.g) ||
        !aligned16(a.x) || !aligned16(a.d)) {
        return false;
    }
    return cutlass_util::fits<Gemm>(arguments_of(a));
}

cudaError_t gemm_gradw_setup(void) {
    return cutlass_util::setup<Gemm>();
}

cudaError_t gemm_gradw_launch(const gemm_gradw_args &a, cudaStream_t s, bool *fits) {
    *fits = gemm_gradw_fits(a);
    if (!*fits) {
        return cudaSuccess;
    }
    return cutlass_util::run<Gemm>(arguments_of(a), s);
}
