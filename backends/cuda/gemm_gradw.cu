/*
 * gemm_gradw.cu - see gemm_gradw.cuh. A CUTLASS 3 pingpong kernel (128 x 128 x 64 tiles, cluster
 * 2 x 1, persistent). In CUTLASS's terms A = g^T is (m, k) column-major, B = x is (k, n) row-major
 * and C, D are (m, n) row-major; the epilogue is D = 1 acc + beta C (CUTLASS skips the C load
 * when beta == 0). At a 1024 x 128256 x 2048 chunk on the H200 it takes 0.846 ms against cuBLAS's
 * fp32 GEMM 0.964 + cast 0.374 (bench/probes/gradw_cast.cu). Only the last chunk takes it: the
 * same kernel with an fp32 D for the accumulating chunks, faster than cuBLAS alone, made the
 * whole loss slower beside the second lane's logits GEMMs (docs/GPU-NOTES.md, "Chunk loop").
 */
#include "gemm_gradw.cuh"

#include "cutlass_util.cuh"

#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace gemm_gradw_impl {

using namespace cute;
using Bf16 = cutlass::bfloat16_t;
using Tile = Shape<_128, _128, _64>;
using Op = cutlass::epilogue::fusion::LinearCombination<Bf16, float, float, float>;
using Pingpong = cutlass_util::PingpongBf16<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor,
                                            float, 4, Bf16, 8, Tile, Op>;
using Kernel = Pingpong::Kernel;
using Gemm = Pingpong::Gemm;

static typename Gemm::Arguments arguments_of(const gemm_gradw_args &a) {
    using SA = typename Kernel::StrideA;
    using SB = typename Kernel::StrideB;
    using SC = typename Kernel::StrideC;
    using SD = typename Kernel::StrideD;
    typename Gemm::Arguments g{cutlass::gemm::GemmUniversalMode::kGemm,
                               {a.m, a.n, a.k, 1},
                               {static_cast<const Bf16 *>(a.g),
                                cutlass::make_cute_packed_stride(SA{}, make_shape(a.m, a.k, 1)),
                                static_cast<const Bf16 *>(a.x),
                                cutlass::make_cute_packed_stride(SB{}, make_shape(a.n, a.k, 1))},
                               {{1.0f, a.beta},
                                a.c,
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

/* The first operand check that fails (TMA: 16-byte aligned bases and row strides, m and n bf16,
 * n fp32), NULL when all pass. */
static const char *gradw_operands_why(const gemm_gradw_args &a) {
    if (a.m < 1 || a.n < 1 || a.k < 1) {
        return "an empty product";
    }
    if (a.m % 8 != 0 || a.n % 8 != 0) {
        return "m (the vocabulary) and n (the hidden size) must be multiples of 8";
    }
    if (!aligned16(a.g) || !aligned16(a.x) || !aligned16(a.c) || !aligned16(a.d)) {
        return "an operand (G, xs, the accumulator or grad_Ws) not 16-byte aligned";
    }
    return nullptr;
}

const char *gemm_gradw_why(const gemm_gradw_args &a) {
    const char *why = gradw_operands_why(a);
    if (why == nullptr && !cutlass_util::fits<Gemm>(arguments_of(a))) {
        why = "CUTLASS's can_implement refuses the shape";
    }
    return why;
}

cudaError_t gemm_gradw_setup(void) {
    return cutlass_util::setup<Gemm>();
}

cudaError_t gemm_gradw_launch(const gemm_gradw_args &a, cudaStream_t s, bool *fits) {
    return cutlass_util::run_if<Gemm>(gradw_operands_why(a) == nullptr, arguments_of(a), s, fits);
}
