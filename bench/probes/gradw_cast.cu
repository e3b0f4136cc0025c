/*
 * gradw_cast.cu - a probe of the fused loss's last weight-gradient GEMM (docs/GPU-NOTES.md,
 * "Chunk loop"): past one chunk, grad_Ws is accumulated in fp32 and, after the last chunk,
 * cast to the output dtype by a kernel of its own (0.38 ms at the seed shape). Times, on one GPU,
 *   cuBLAS:  acc (V x H fp32) += G^T x (G: C x V bf16, x: C x H bf16), then the cast to bf16;
 *   CUTLASS: out (V x H bf16) = G^T x + acc, one sm90 GEMM whose epilogue reads the fp32
 *            accumulator and writes bf16 (the cast fused, the fp32 result never written),
 * and checks that both give the same bf16 grad_Ws (the same fp32 sum rounded once; a few
 * elements may differ by an ulp where the two GEMMs' summation orders differ).
 * Not part of the build (CUTLASS's headers: `pip download nvidia-cutlass`, unzip):
 *   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I$CUTLASS/include \
 *        -I$CUTLASS/tools/util/include bench/probes/gradw_cast.cu -lcublas -o gradw_cast
 *   ./gradw_cast [C V H reps]                            (default 1024 128256 2048 20)
 */
#include <cublas_v2.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "probe_util.cuh"

using namespace cute;

/* D (M x N bf16, row-major) = A B + C: A = G^T (M = V, K = C; G row-major, so A is M-major),
 * B = x (K x N row-major: N-major), C the fp32 accumulator (row-major). */
template <class Tile, class Cluster, class MainSched, class EpiSched> struct GradW {
    using Op =
        cutlass::epilogue::fusion::LinearCombination<cutlass::bfloat16_t, float, float, float>;
    using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, float,
        cutlass::layout::RowMajor, 4, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, EpiSched,
        Op>::CollectiveOp;
    using Main = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t,
        cutlass::layout::ColumnMajor, 8, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, float,
        Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epi::SharedStorage))>,
        MainSched>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    Gemm gemm;
    void *ws = nullptr;

    bool setup(int M, int N, int K, const void *g, const void *x, const float *acc, void *out) {
        using SA = typename Gemm::GemmKernel::StrideA;
        using SB = typename Gemm::GemmKernel::StrideB;
        using SC = typename Gemm::GemmKernel::StrideC;
        using SD = typename Gemm::GemmKernel::StrideD;
        typename Gemm::Arguments a{cutlass::gemm::GemmUniversalMode::kGemm,
                                   {M, N, K, 1},
                                   {static_cast<const cutlass::bfloat16_t *>(g),
                                    cutlass::make_cute_packed_stride(SA{}, make_shape(M, K, 1)),
                                    static_cast<const cutlass::bfloat16_t *>(x),
                                    cutlass::make_cute_packed_stride(SB{}, make_shape(N, K, 1))},
                                   {{1.0f, 1.0f},
                                    acc,
                                    cutlass::make_cute_packed_stride(SC{}, make_shape(M, N, 1)),
                                    static_cast<cutlass::bfloat16_t *>(out),
                                    cutlass::make_cute_packed_stride(SD{}, make_shape(M, N, 1))}};
        if (gemm.can_implement(a) != cutlass::Status::kSuccess) {
            return false;
        }
        const size_t bytes = Gemm::get_workspace_size(a);
        if (bytes) {
            CK(cudaMalloc(&ws, bytes));
        }
        return gemm.initialize(a, ws) == cutlass::Status::kSuccess;
    }
};

__global__ void probe_cast(const float *src, __nv_bfloat16 *dst, size_t n) {
    const size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        const float4 v = *reinterpret_cast<const float4 *>(src + i);
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 w;
        w.x = *reinterpret_cast<unsigned *>(&lo);
        w.y = *reinterpret_cast<unsigned *>(&hi);
        *reinterpret_cast<uint2 *>(dst + i) = w;
    } else {
        for (size_t j = i; j < n; j++) {
            dst[j] = __float2bfloat16(src[j]);
        }
    }
}

/* Elements whose bf16 differ, and the largest difference in units of the larger's ulp. */
static void probe_compare_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b, size_t n,
                               size_t *differ, double *ulps) {
    *differ = 0;
    *ulps = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
        if (x != y) {
            ++*differ;
            const float big = std::max(std::fabs(x), std::fabs(y));
            int e;
            std::frexp(big, &e);
            *ulps = std::max(*ulps, std::fabs(x - y) / std::ldexp(1.0, e - 8));
        }
    }
}

template <class P>
static void probe_cutlass(const char *name, int C, int V, int H, int reps, const void *g,
                          const void *x, const float *acc0, void *out, const void *want,
                          double flops, cudaStream_t s) {
    P p;
    if (!p.setup(V, H, C, g, x, acc0, out)) {
        printf("%-40s cannot run this shape\n", name);
        return;
    }
    const size_t n = (size_t)V * H;
    CK(cudaMemset(out, 0xff, n * 2)); /* NaN poison */
    if (p.gemm.run(s) != cutlass::Status::kSuccess) {
        printf("%-40s run failed\n", name);
        return;
    }
    CK(cudaStreamSynchronize(s));
    std::vector<__nv_bfloat16> a(n), b(n);
    CK(cudaMemcpy(a.data(), out, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), want, n * 2, cudaMemcpyDeviceToHost));
    size_t differ;
    double ulps;
    probe_compare_bf16(a.data(), b.data(), n, &differ, &ulps);
    const float ms = time_ms([&] { p.gemm.run(s); }, reps, s);
    printf("%-40s %8.3f ms %6.1f TFLOP/s  differ from cuBLAS+cast: %zu of %zu (max %.1f ulp)\n",
           name, ms, flops / ms / 1e9, differ, n, ulps);
    if (p.ws) {
        cudaFree(p.ws);
    }
}

int main(int argc, char **argv) {
    const int C = argc > 1 ? atoi(argv[1]) : 1024;
    const int V = argc > 2 ? atoi(argv[2]) : 128256;
    const int H = argc > 3 ? atoi(argv[3]) : 2048;
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, the last grad_Ws GEMM: C %d V %d H %d, median of %d\n", prop.name, C, V, H, reps);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const size_t n = (size_t)V * H;
    void *g, *x, *out, *want, *scratch;
    float *acc0, *acc;
    CK(cudaMalloc(&g, (size_t)C * V * 2));
    CK(cudaMalloc(&x, (size_t)C * H * 2));
    CK(cudaMalloc(&acc0, n * 4));
    CK(cudaMalloc(&acc, n * 4));
    CK(cudaMalloc(&out, n * 2));
    CK(cudaMalloc(&want, n * 2));
    CK(cudaMalloc(&scratch, n * 2));
    probe_fill<<<1024, 256>>>((__nv_bfloat16 *)g, (size_t)C * V, 3u, 1e-3f);
    probe_fill<<<1024, 256>>>((__nv_bfloat16 *)x, (size_t)C * H, 5u, 2.0f);
    probe_fill<<<1024, 256>>>(acc0, n, 9u, 4.0f);
    CK(cudaDeviceSynchronize());
    const double flops = 2.0 * C * V * (double)H;

    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    const float one = 1.0f;
    /* column-major: acc^T (H x V, ld H) += x^T (H x C, ld H) G (C x V: G^T's view, ld V) */
    auto gemm = [&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, H, V, C, &one, x, CUDA_R_16BF, H, g, CUDA_R_16BF,
                     V, &one, acc, CUDA_R_32F, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    const unsigned blocks = (unsigned)((n / 4 + 255) / 256);
    /* the reference once, from acc0; the timed casts write elsewhere */
    CK(cudaMemcpyAsync(acc, acc0, n * 4, cudaMemcpyDeviceToDevice, s));
    gemm();
    probe_cast<<<blocks, 256, 0, s>>>(acc, (__nv_bfloat16 *)want, n);
    auto cast = [&] { probe_cast<<<blocks, 256, 0, s>>>(acc, (__nv_bfloat16 *)scratch, n); };
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    const float tg = time_ms(gemm, reps, s);
    const float tc = time_ms(cast, reps, s);
    const float tb = time_ms(
        [&] {
            gemm();
            cast();
        },
        reps, s);
    printf("%-40s %8.3f ms %6.1f TFLOP/s\n", "cuBLAS GEMM (fp32 C += ...)", tg, flops / tg / 1e9);
    printf("%-40s %8.3f ms\n", "cast fp32 -> bf16", tc);
    printf("%-40s %8.3f ms\n", "cuBLAS GEMM + cast", tb);

    using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
    using PingE = cutlass::epilogue::TmaWarpSpecialized;
    using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
    using CoopE = cutlass::epilogue::TmaWarpSpecializedCooperative;
    probe_cutlass<GradW<Shape<_128, _128, _64>, Shape<_2, _1, _1>, Ping, PingE>>(
        "cutlass pingpong 128x128 2x1, cast fused", C, V, H, reps, g, x, acc0, out, want, flops, s);
    probe_cutlass<GradW<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, CoopE>>(
        "cutlass coop 128x256 2x1, cast fused", C, V, H, reps, g, x, acc0, out, want, flops, s);
    return 0;
}
