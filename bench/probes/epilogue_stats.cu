/*
 * epilogue_stats.cu - a probe of the row statistics in the logits GEMM (docs/GPU-NOTES.md, "Row
 * statistics"): what do the row statistics cost inside the logits GEMM's epilogue? Times, on one
 * GPU, the logits product z = x W^T (x: M x K bf16, W: N x K bf16, z: M x N fp32, the fused loss's
 * per-chunk shape) through cuBLAS and through CUTLASS 3 sm90 kernels, each CUTLASS kernel with the
 * plain epilogue (z stored) and with z stored beside the row statistics of each CTA tile
 * (Sm90RowStats: per row and N-tile the maximum and the sum of exponentials relative to it, the
 * first exchange of the fused loss's row pass). Checks z against cuBLAS and the statistics
 * against the stored z (in double on the host). Kernels: cooperative 128x256 (cluster 2x1) and
 * pingpong 128x128 / 64x256 (cluster 2x1), whose epilogue runs beside the other warpgroup's MMAs;
 * PROBE_ALL=1 adds the rejected variants (double sums, cluster 1x2). Results: docs/GPU-NOTES.md
 * ("Row statistics").
 * Not part of the build (it needs CUTLASS's headers: scripts/install-deps.sh puts them in
 * deps/cutlass). -DPROBE_LIB with backends/cuda/gemm_stats.cu also times the library's kernel;
 * PROBE_PRE=1 times each GEMM right after a read of 2 M N floats (the loop's row pass):
 *   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Ideps/cutlass/include \
 *        -Ideps/cutlass/tools/util/include -Ibackends/cuda -DPROBE_LIB \
 *        bench/probes/epilogue_stats.cu backends/cuda/gemm_stats.cu -lcublas -o epilogue_stats
 *   [PROBE_PRE=1] ./epilogue_stats [M N K reps]          (default 1024 128256 2048 20)
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "probe_util.cuh"

#ifdef PROBE_LIB
#include "gemm_stats.cuh"
#endif

using namespace cute;

/* PROBE_PRE=1: every timed GEMM runs right after a read of 2 M N floats (the row pass's zs and zt,
 * as in the fused loop), not back to back. */
static float *g_pre_buf = nullptr;
static size_t g_pre_n4 = 0;
static float *g_pre_out = nullptr;

template <class F> static float timed(F &&f, int reps, cudaStream_t s) {
    if (g_pre_buf == nullptr) {
        return time_ms(f, reps, s);
    }
    auto pre = [&] {
        probe_read<<<1056, 512, 0, s>>>((const float4 *)g_pre_buf, g_pre_n4, g_pre_out);
    };
    return time_ms_after(pre, f, reps, s);
}

namespace fu = cutlass::epilogue::fusion;
constexpr auto RND = cutlass::FloatRoundStyle::round_to_nearest;

/* 2^t: the accurate exp2f, or (FAST) the bare ex2.approx.ftz (the row kernel's distil_exp2_ftz). */
template <bool FAST> __device__ __forceinline__ float probe_exp2(float t) {
    if constexpr (FAST) {
        float r;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
        return r;
    } else {
        return exp2f(t);
    }
}

/* The fused loss's row statistics over one CTA tile's columns, as an epilogue node beside the
 * store of z: per row and N-tile, the maximum m and s = sum 2^((z - m) cx) (cx = log2 e / tau),
 * written m-major to two (round(M, CTA_M), ceil(N / CTA_N)) float buffers; z passes through.
 * Each thread keeps (m, s) per row it holds (registers aliased along N, as Sm90ColReduction
 * does). Per fragment: the maxima first, each row's s rescaled once to its new maximum, then the
 * fragment's terms added (independent exponentials <= 1; the first run updated (m, s) per
 * element, docs/GPU-NOTES.md "Row statistics"). The lanes that hold
 * a row's other columns are merged by shuffles at the tile's last subtile. Only layouts with one
 * warp along N (wgmma tiles: a row's columns are in one quad of lanes).
 * S: the type of the sums (double, or float with the fast exponential). */
template <class CtaTileShapeMNK, class S> struct Sm90RowStats {
    static constexpr bool FAST = std::is_same_v<S, float>;
    struct SharedStorage {};
    struct Arguments {
        float *ptr_max = nullptr;
        float *ptr_sum = nullptr;
        float cx = 1.4426950408889634f;
    };
    using Params = Arguments;
    template <class PS>
    static constexpr Params to_underlying_arguments(PS const &, Arguments const &a, void *) {
        return a;
    }
    template <class PS> static bool can_implement(PS const &, Arguments const &) {
        return true;
    }
    template <class PS> static size_t get_workspace_size(PS const &, Arguments const &) {
        return 0;
    }
    template <class PS>
    static cutlass::Status initialize_workspace(PS const &, Arguments const &, void *, cudaStream_t,
                                                cutlass::CudaHostAdapter * = nullptr) {
        return cutlass::Status::kSuccess;
    }
    CUTLASS_DEVICE bool is_producer_load_needed() const {
        return false;
    }
    CUTLASS_DEVICE bool is_C_load_needed() const {
        return false;
    }
    CUTLASS_HOST_DEVICE Sm90RowStats() {}
    CUTLASS_HOST_DEVICE Sm90RowStats(Params const &p, SharedStorage const &) : params(p) {}
    Params params;

    template <class... Args>
    CUTLASS_DEVICE auto get_producer_load_callbacks(fu::ProducerLoadArgs<Args...> const &) {
        return fu::EmptyProducerLoadCallbacks{};
    }

    template <class ArgsTuple> struct ConsumerStoreCallbacks : fu::EmptyConsumerStoreCallbacks {
        CUTLASS_DEVICE ConsumerStoreCallbacks(ArgsTuple &&t, Params const &p)
            : args_tuple(cute::forward<ArgsTuple>(t)), params(p) {}
        ArgsTuple args_tuple;
        Params const &params;
        bool interior = false; /* the CTA tile lies wholly inside the problem */

        template <typename EA, typename EI, int FS>
        CUTLASS_DEVICE auto visit(cutlass::Array<EA, FS> const &, int epi_v, int epi_m, int epi_n,
                                  cutlass::Array<EI, FS> const &frg_input) {
            auto &[tCrMax, tCrSum, tCcCol, residue_tCcCol, rest] = args_tuple;
            Tensor mx = tCrMax(_, _, _, epi_m, epi_n);
            Tensor sm = tCrSum(_, _, _, epi_m, epi_n);
            Tensor cc = tCcCol(_, _, _, epi_m, epi_n);
            const float cx = params.cx;
            /* 1. the rows' maxima over this fragment too (a short chain: max only) */
            Tensor fm = filter(mx);
            Tensor fs = filter(sm);
            float old[decltype(size(fm))::value];
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < size(fm); ++j) {
                old[j] = fm(j);
            }
            /* Inside the problem (a tile-uniform test) no element needs its own bounds check:
             * the checks were a branch per element (docs/GPU-NOTES.md, "Row statistics"). */
            const bool all_in = interior;
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FS; ++i) {
                if (all_in || elem_less(cc(epi_v * FS + i), residue_tCcCol)) {
                    float &m = mx(epi_v * FS + i);
                    m = fmaxf(m, static_cast<float>(frg_input[i]));
                }
            }
            /* 2. each row's sum rescaled to its new maximum once (a sum of 0 stays 0) */
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < size(fm); ++j) {
                const S f = static_cast<S>(probe_exp2<FAST>((old[j] - fm(j)) * cx));
                fs(j) = fs(j) == S(0) ? S(0) : fs(j) * f;
            }
            /* 3. the fragment's terms, each <= 1 (z = -inf gives 0; m = -inf only when every
             * term so far is -inf, whose sum stays 0) */
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FS; ++i) {
                const float z = static_cast<float>(frg_input[i]);
                const float m = mx(epi_v * FS + i);
                float e = probe_exp2<FAST>(fmaf(z, cx, -m * cx));
                e = m == -INFINITY ? 0.0f : e;
                if (!all_in && !elem_less(cc(epi_v * FS + i), residue_tCcCol)) {
                    e = 0.0f;
                }
                sm(epi_v * FS + i) += static_cast<S>(e);
            }
            return frg_input;
        }

        template <class STensor, class SyncFn, class VTensor>
        CUTLASS_DEVICE void reduce(STensor &&, SyncFn const &, int, int, bool is_last_iteration,
                                   VTensor) {
            if (!is_last_iteration) {
                return;
            }
            auto &[tCrMax, tCrSum, tCcCol, residue_tCcCol, rest] = args_tuple;
            auto &[ref_src, lane_layout_MN, lane_mn, gMax, gSum, cCol, residue_cCol, epi_tile,
                   tiled_copy, thread_idx] = rest;
            if (!elem_less(cCol(_0{}, _0{}), residue_cCol)) {
                return; /* a CTA wholly outside the problem */
            }
            Tensor fm = filter(tCrMax);
            Tensor fs = filter(tCrSum);
            const float cx = params.cx;
            CUTLASS_PRAGMA_UNROLL
            for (int cols = size<1>(lane_layout_MN) / 2; cols > 0; cols /= 2) {
                const int off = lane_layout_MN(_0{}, cols);
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(fm); ++i) {
                    const float m2 = __shfl_down_sync(0xffffffffu, fm(i), off);
                    const S s2 = __shfl_down_sync(0xffffffffu, fs(i), off);
                    const float m1 = fm(i);
                    const S s1 = fs(i);
                    const float mm = fmaxf(m1, m2);
                    const S a = s1 == S(0) ? S(0) : s1 * static_cast<S>(exp2f((m1 - mm) * cx));
                    const S b = s2 == S(0) ? S(0) : s2 * static_cast<S>(exp2f((m2 - mm) * cx));
                    fm(i) = mm;
                    fs(i) = a + b;
                }
            }
            constexpr bool RS = decltype(ref_src)::value;
            if (get<1>(lane_mn) == 0) {
                Tensor tMax =
                    fu::sm90_partition_for_epilogue<RS>(gMax, epi_tile, tiled_copy, thread_idx);
                Tensor tSum =
                    fu::sm90_partition_for_epilogue<RS>(gSum, epi_tile, tiled_copy, thread_idx);
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(tCrMax); ++i) {
                    if (elem_less(tCcCol(i), residue_tCcCol)) {
                        tMax(i) = tCrMax(i);
                        tSum(i) = static_cast<float>(tCrSum(i));
                    }
                }
            }
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(fu::ConsumerStoreArgs<Args...> const &args) {
        Layout ref_layout_MN = [&]() {
            auto mn_shape = shape(typename decltype(args.tiled_copy)::Tiler_MN{});
            if constexpr (ReferenceSrc) {
                return right_inverse(args.tiled_copy.get_layoutS_TV()).with_shape(mn_shape);
            } else {
                return right_inverse(args.tiled_copy.get_layoutD_TV()).with_shape(mn_shape);
            }
        }();
        using W = Int<decltype(args.tiled_copy)::TiledNumThr::value / cutlass::NumThreadsPerWarp>;
        Layout tv2lane =
            Layout<Shape<Int<cutlass::NumThreadsPerWarp>, W, _1>, Stride<_1, _0, _0>>{};
        Layout ref2lane = composition(tv2lane, ref_layout_MN);
        Layout lane_layout_MN = make_layout(filter(get<0>(ref2lane)), filter(get<1>(ref2lane)));
        Layout inv_lane_layout_MN = right_inverse(lane_layout_MN);
        auto lane_mn =
            idx2crd(inv_lane_layout_MN(cutlass::canonical_lane_idx()), shape(lane_layout_MN));
        Layout tv2warp =
            Layout<Shape<Int<cutlass::NumThreadsPerWarp>, W, _1>, Stride<_0, _1, _0>>{};
        Layout ref2warp = composition(tv2warp, ref_layout_MN);
        Layout warp_layout_MN = make_layout(filter(get<0>(ref2warp)), filter(get<1>(ref2warp)));
        static_assert(decltype(size<1>(warp_layout_MN))::value <= 1, "one warp along N");

        auto [M, N, K, L] = args.problem_shape_mnkl;
        auto [m, n, k, l] = args.tile_coord_mnkl;
        constexpr int TM = size<0>(CtaTileShapeMNK{});
        constexpr int TN = size<1>(CtaTileShapeMNK{});
        const int mr = (M + TM - 1) / TM * TM;
        /* the (m-major) partials of tile column n: rows [m TM, m TM + TM), stride 0 along N */
        auto tile = make_layout(make_shape(Int<TM>{}, Int<TN>{}), make_stride(_1{}, _0{}));
        const size_t base = static_cast<size_t>(n) * mr + static_cast<size_t>(m) * TM;
        Tensor gMax = make_tensor(make_gmem_ptr(params.ptr_max + base), tile);
        Tensor gSum = make_tensor(make_gmem_ptr(params.ptr_sum + base), tile);
        Tensor tCgMax = fu::sm90_partition_for_epilogue<ReferenceSrc>(
            gMax, args.epi_tile, args.tiled_copy, args.thread_idx);
        Tensor tCrMax = make_tensor_like<float>(tCgMax);
        Tensor tCrSum = make_tensor_like<S>(tCgMax);
        fill(tCrMax, -INFINITY);
        fill(tCrSum, S(0));
        auto rest =
            make_tuple(bool_constant<ReferenceSrc>{}, lane_layout_MN, lane_mn, gMax, gSum, args.cD,
                       args.residue_cD, args.epi_tile, args.tiled_copy, args.thread_idx);
        auto t =
            make_tuple(cute::move(tCrMax), cute::move(tCrSum), args.tCcD, args.residue_tCcD, rest);
        (void)L;
        (void)K;
        (void)k;
        (void)l;
        ConsumerStoreCallbacks<decltype(t)> cb(std::move(t), params);
        cb.interior = (m + 1) * TM <= M && (n + 1) * TN <= N;
        return cb;
    }
};

/* z stored; with STATS also the row statistics of each tile (z passes through). */
/* STATS: 0 none, 1 sums in double, 2 in float with the fast exponential */
template <class Tile, int STATS>
using ProbeEVT = cute::conditional_t<
    STATS != 0,
    fu::Sm90EVT<Sm90RowStats<Tile, cute::conditional_t<STATS == 1, double, float>>,
                fu::Sm90AccFetch>,
    fu::Sm90EVT<fu::Sm90Compute<cutlass::epilogue::thread::Identity, float, float, RND>,
                fu::Sm90AccFetch>>;

template <class Tile, class Cluster, class MainSched, class EpiSched, int STATS_> struct Probe {
    using EVT = ProbeEVT<Tile, STATS_>;
    using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
        cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4, EpiSched,
        EVT>::CollectiveOp;
    using Main = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t,
        cutlass::layout::RowMajor, 8, cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float,
        Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epi::SharedStorage))>,
        MainSched>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    static constexpr int TM = size<0>(Tile{});
    static constexpr int TN = size<1>(Tile{});
    static constexpr bool STATS = STATS_ != 0;

    Gemm gemm;
    void *ws = nullptr;

    typename Gemm::Arguments args(int M, int N, int K, const void *x, const void *w, float *z,
                                  float *tmax, float *tsum) {
        using SA = typename Gemm::GemmKernel::StrideA;
        using SB = typename Gemm::GemmKernel::StrideB;
        using SD = typename Gemm::GemmKernel::StrideD;
        SA sa = cutlass::make_cute_packed_stride(SA{}, make_shape(M, K, 1));
        SB sb = cutlass::make_cute_packed_stride(SB{}, make_shape(N, K, 1));
        SD sd = cutlass::make_cute_packed_stride(SD{}, make_shape(M, N, 1));
        typename Gemm::Arguments a{cutlass::gemm::GemmUniversalMode::kGemm,
                                   {M, N, K, 1},
                                   {static_cast<const cutlass::bfloat16_t *>(x), sa,
                                    static_cast<const cutlass::bfloat16_t *>(w), sb},
                                   {{}, nullptr, {}, z, sd}};
        if constexpr (STATS_ != 0) {
            a.epilogue.thread = {{}, {tmax, tsum, 1.4426950408889634f}};
        } else {
            a.epilogue.thread = {{}, {}};
            (void)tmax;
            (void)tsum;
        }
        return a;
    }

    bool setup(int M, int N, int K, const void *x, const void *w, float *z, float *tmax,
               float *tsum) {
        auto a = args(M, N, K, x, w, z, tmax, tsum);
        if (gemm.can_implement(a) != cutlass::Status::kSuccess) {
            return false;
        }
        size_t bytes = Gemm::get_workspace_size(a);
        if (bytes) {
            CK(cudaMalloc(&ws, bytes));
        }
        return gemm.initialize(a, ws) == cutlass::Status::kSuccess;
    }
    bool run(cudaStream_t s) {
        return gemm.run(s) == cutlass::Status::kSuccess;
    }
};

template <class P>
static void probe_one(const char *name, int M, int N, int K, int reps, const void *x, const void *w,
                      float *z, const std::vector<float> &zref, double flops, cudaStream_t s) {
    P p;
    const int nt = (N + P::TN - 1) / P::TN;
    const int mr = (M + P::TM - 1) / P::TM * P::TM;
    float *tmax = nullptr, *tsum = nullptr;
    CK(cudaMalloc(&tmax, sizeof(float) * mr * nt));
    CK(cudaMalloc(&tsum, sizeof(float) * mr * nt));
    if (!p.setup(M, N, K, x, w, z, tmax, tsum)) {
        printf("%-40s cannot run this shape\n", name);
        return;
    }
    CK(cudaMemset(z, 0xff, sizeof(float) * M * N)); /* NaN poison */
    if (!p.run(s)) {
        printf("%-40s run failed\n", name);
        return;
    }
    const std::vector<float> zh = probe_fetch(z, (size_t)M * N, s);
    double d, m;
    probe_diff(zh.data(), zref.data(), zh.size(), &d, &m);
    double dmax = -1, dsum = -1;
    if (P::STATS) { /* the partials, m-major (mr, nt): [r + mr t], against the stored z */
        std::vector<float> th((size_t)mr * nt), ts((size_t)mr * nt);
        CK(cudaMemcpy(th.data(), tmax, sizeof(float) * th.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ts.data(), tsum, sizeof(float) * ts.size(), cudaMemcpyDeviceToHost));
        dmax = 0;
        dsum = 0;
        for (int r = 0; r < M; r++) {
            for (int t = 0; t < nt; t++) {
                const float *zr = zh.data() + (size_t)r * N;
                const int c1 = std::min(N, (t + 1) * P::TN);
                float want = -INFINITY;
                for (int c = t * P::TN; c < c1; c++) {
                    want = std::max(want, zr[c]);
                }
                double sum = 0;
                for (int c = t * P::TN; c < c1; c++) {
                    sum += std::exp((double)zr[c] - want);
                }
                const size_t i = r + (size_t)mr * t;
                dmax = std::max(dmax, (double)std::fabs(th[i] - want));
                dsum = std::max(dsum, std::fabs(ts[i] - sum) / sum);
            }
        }
    }
    const float ms = timed([&] { p.run(s); }, reps, s);
    printf(
        "%-36s %8.3f ms %6.1f TFLOP/s  |z - cublas| %.2g (|z| %.2g)  max err %.2g  sum rel %.2g\n",
        name, ms, flops / ms / 1e9, d, m, dmax, dsum);
    cudaFree(tmax);
    cudaFree(tsum);
    if (p.ws) {
        cudaFree(p.ws);
    }
}

#ifdef PROBE_LIB
/* The library's kernel (backends/cuda/gemm_stats.cu, linked in): z against cuBLAS, its time. */
static void probe_lib(int M, int N, int K, int reps, const void *x, const void *w, float *z,
                      const std::vector<float> &zref, double flops, cudaStream_t s) {
    const int nt = (N + GEMM_STATS_COLS - 1) / GEMM_STATS_COLS;
    float *pm = nullptr, *p1 = nullptr;
    CK(cudaMalloc(&pm, sizeof(float) * M * nt));
    CK(cudaMalloc(&p1, sizeof(float) * M * nt));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    gemm_stats_args a{x, w, z, M, N, K, pm, p1, 1.4426950408889634f, 0, prop.multiProcessorCount};
    CK(gemm_stats_setup());
    CK(cudaMemset(z, 0xff, sizeof(float) * M * N));
    bool fits = false;
    CK(gemm_stats_launch(a, s, &fits));
    if (!fits) {
        printf("library gemm_stats.cu: cannot run this shape\n");
        return;
    }
    const std::vector<float> zh = probe_fetch(z, (size_t)M * N, s);
    double d, m;
    probe_diff(zh.data(), zref.data(), zh.size(), &d, &m);
    const float ms = timed([&] { CK(gemm_stats_launch(a, s, &fits)); }, reps, s);
    printf("%-36s %8.3f ms %6.1f TFLOP/s  |z - cublas| %.2g (|z| %.2g)\n", "library gemm_stats.cu",
           ms, flops / ms / 1e9, d, m);
    cudaFree(pm);
    cudaFree(p1);
}
#endif

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopE = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingE = cutlass::epilogue::TmaWarpSpecialized;
using T128x256 = Shape<_128, _256, _64>;
using T64x256 = Shape<_64, _256, _64>;
using T128x128 = Shape<_128, _128, _64>;
using C2x1 = Shape<_2, _1, _1>;
using C1x2 = Shape<_1, _2, _1>;

int main(int argc, char **argv) {
    const int M = argc > 1 ? atoi(argv[1]) : 1024;
    const int N = argc > 2 ? atoi(argv[2]) : 128256;
    const int K = argc > 3 ? atoi(argv[3]) : 2048;
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, M %d N %d K %d, median of %d\n", prop.name, M, N, K, reps);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *x, *w;
    float *z;
    CK(cudaMalloc(&x, (size_t)M * K * 2));
    CK(cudaMalloc(&w, (size_t)N * K * 2));
    CK(cudaMalloc(&z, (size_t)M * N * 4));
    probe_fill<<<1024, 256>>>((__nv_bfloat16 *)x, (size_t)M * K, 1u, 2.0f);
    probe_fill<<<1024, 256>>>((__nv_bfloat16 *)w, (size_t)N * K, 7u, 0.1f);
    CK(cudaDeviceSynchronize());
    const double flops = 2.0 * M * N * (double)K;

    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    const float one = 1.0f, zero = 0.0f;
    /* column-major: z^T (N x M) = W (N x K, ld K, transposed view) x^T */
    auto cub = [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, x, CUDA_R_16BF,
                     K, &zero, z, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    cub();
    CK(cudaStreamSynchronize(s));
    std::vector<float> zref((size_t)M * N);
    CK(cudaMemcpy(zref.data(), z, sizeof(float) * zref.size(), cudaMemcpyDeviceToHost));
    if (getenv("PROBE_PRE") != nullptr) {
        g_pre_n4 = (size_t)M * N / 2; /* 2 M N floats */
        CK(cudaMalloc(&g_pre_buf, g_pre_n4 * 16));
        CK(cudaMalloc(&g_pre_out, 4096 * sizeof(float)));
        CK(cudaMemset(g_pre_buf, 0, g_pre_n4 * 16));
        printf("each GEMM timed after a read of %.2f GB\n", g_pre_n4 * 16 / 1e9);
    }
    const float ms = timed(cub, reps, s);
    printf("%-40s %8.3f ms %6.1f TFLOP/s\n", "cuBLAS", ms, flops / ms / 1e9);

#ifndef PROBE_FEW /* -DPROBE_FEW: only the pingpong 128x128 kernels (and the library's) */
    probe_one<Probe<T128x256, C2x1, Coop, CoopE, 0>>("cutlass coop 128x256 2x1", M, N, K, reps, x,
                                                     w, z, zref, flops, s);
    if (getenv("PROBE_ALL") != nullptr) { /* the first call's variants */
        probe_one<Probe<T128x256, C2x1, Coop, CoopE, 1>>("  + stats, double sums", M, N, K, reps, x,
                                                         w, z, zref, flops, s);
        probe_one<Probe<T128x256, C1x2, Coop, CoopE, 2>>("coop 1x2 + stats, float sums", M, N, K,
                                                         reps, x, w, z, zref, flops, s);
    }
    probe_one<Probe<T128x256, C2x1, Coop, CoopE, 2>>("  + stats, float sums, ex2.approx", M, N, K,
                                                     reps, x, w, z, zref, flops, s);
#endif
    /* pingpong: one warpgroup's epilogue beside the other's MMAs */
    probe_one<Probe<T128x128, C2x1, Ping, PingE, 0>>("cutlass pingpong 128x128 2x1", M, N, K, reps,
                                                     x, w, z, zref, flops, s);
    probe_one<Probe<T128x128, C2x1, Ping, PingE, 2>>("  + stats, float sums", M, N, K, reps, x, w,
                                                     z, zref, flops, s);
#ifndef PROBE_FEW
    probe_one<Probe<T64x256, C2x1, Ping, PingE, 0>>("cutlass pingpong 64x256 2x1", M, N, K, reps, x,
                                                    w, z, zref, flops, s);
    probe_one<Probe<T64x256, C2x1, Ping, PingE, 2>>("  + stats, float sums", M, N, K, reps, x, w, z,
                                                    zref, flops, s);
#endif
#ifdef PROBE_LIB
    probe_lib(M, N, K, reps, x, w, z, zref, flops, s);
#endif
    /* cuBLAS again: the card's clock after the others */
    const float ms2 = timed(cub, reps, s);
    printf("%-40s %8.3f ms %6.1f TFLOP/s\n", "cuBLAS (again)", ms2, flops / ms2 / 1e9);
    return 0;
}
