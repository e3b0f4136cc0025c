/*
 * gemm_stats.cu - see gemm_stats.cuh. A CUTLASS 3 pingpong kernel (128 x 128 x 64 tiles, cluster
 * 2 x 1, persistent): one warpgroup's epilogue runs beside the other's MMAs, so the statistics
 * cost about nothing there (docs/GPU-NOTES.md, "Row statistics": 0.785 ms against cuBLAS's
 * 0.771 for the plain GEMM of a 1024 x 128256 x 2048 chunk). The epilogue tree is RowStats(acc),
 * z = acc stored by TMA.
 * RowStats keeps, per thread and row it holds, the maximum and the sum relative to it, in fp32
 * with ex2.approx (each term <= 1; the tile's sum of 128 terms errs by a few 1e-7 relative), and
 * merges the quad's lanes by shuffles after the tile's last subtile. Elements of a tile that lies
 * wholly inside the problem skip their bounds checks (a branch per element otherwise).
 */
#include "gemm_stats.cuh"

#include "cutlass_util.cuh"

#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace gemm_stats_impl {

using namespace cute;
namespace fu = cutlass::epilogue::fusion;

__device__ __forceinline__ float ex2(float t) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
    return r;
}

/* s moved from maximum m to m_new >= m (a sum of 0 stays 0, also when both are -inf). */
__device__ __forceinline__ float moved(float s, float m, float m_new, float c) {
    return s == 0.0f ? 0.0f : s * ex2((m - m_new) * c);
}

/* The statistics node: z passes through. */
template <class Tile> struct RowStats {
    struct SharedStorage {};
    struct Arguments {
        float *pmax = nullptr, *ps1 = nullptr;
        float c1 = 1.0f;
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
    CUTLASS_HOST_DEVICE RowStats() {}
    CUTLASS_HOST_DEVICE RowStats(Params const &p, SharedStorage const &) : params(p) {}
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
                                  cutlass::Array<EI, FS> const &frg) {
            auto &[tMax, tS1, tCc, residue, rest] = args_tuple;
            Tensor mx = tMax(_, _, _, epi_m, epi_n);
            Tensor s1 = tS1(_, _, _, epi_m, epi_n);
            Tensor cc = tCc(_, _, _, epi_m, epi_n);
            const float c1 = params.c1;
            const bool all_in = interior;
            Tensor fm = filter(mx);
            Tensor f1 = filter(s1);
            float old[decltype(size(fm))::value];
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < size(fm); ++j) {
                old[j] = fm(j);
            }
            /* 1. the rows' maxima over this fragment too */
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FS; ++i) {
                if (all_in || elem_less(cc(epi_v * FS + i), residue)) {
                    float &m = mx(epi_v * FS + i);
                    m = fmaxf(m, static_cast<float>(frg[i]));
                }
            }
            /* 2. each row's sums moved to its new maximum once */
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < size(fm); ++j) {
                f1(j) = moved(f1(j), old[j], fm(j), c1);
            }
            /* 3. the fragment's terms, each <= 1 (m = -inf only while every z so far is -inf:
             * the terms are 0 then; a NaN z gives a NaN term, which propagates) */
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FS; ++i) {
                const float z = static_cast<float>(frg[i]);
                const float m = mx(epi_v * FS + i);
                const bool in = all_in || elem_less(cc(epi_v * FS + i), residue);
                const bool live = in && m != -INFINITY;
                s1(epi_v * FS + i) += live ? ex2(fmaf(z, c1, -m * c1)) : 0.0f;
            }
            return frg;
        }

        template <class STensor, class SyncFn, class VTensor>
        CUTLASS_DEVICE void reduce(STensor &&, SyncFn const &, int, int, bool is_last_iteration,
                                   VTensor) {
            if (!is_last_iteration) {
                return;
            }
            auto &[tMax, tS1, tCc, residue, rest] = args_tuple;
            auto &[ref_src, lane_layout_MN, lane_mn, gMax, gS1, cCol, residue_cCol, epi_tile,
                   tiled_copy, thread_idx] = rest;
            if (!elem_less(cCol(_0{}, _0{}), residue_cCol)) {
                return; /* a CTA wholly outside the problem */
            }
            Tensor fm = filter(tMax);
            Tensor f1 = filter(tS1);
            const float c1 = params.c1;
            CUTLASS_PRAGMA_UNROLL
            for (int cols = size<1>(lane_layout_MN) / 2; cols > 0; cols /= 2) {
                const int off = lane_layout_MN(_0{}, cols);
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(fm); ++i) {
                    const float m2 = __shfl_down_sync(0xffffffffu, fm(i), off);
                    const float a2 = __shfl_down_sync(0xffffffffu, f1(i), off);
                    const float mm = fmaxf(fm(i), m2);
                    f1(i) = moved(f1(i), fm(i), mm, c1) + moved(a2, m2, mm, c1);
                    fm(i) = mm;
                }
            }
            constexpr bool RS = decltype(ref_src)::value;
            if (get<1>(lane_mn) != 0) {
                return;
            }
            Tensor pMax =
                fu::sm90_partition_for_epilogue<RS>(gMax, epi_tile, tiled_copy, thread_idx);
            Tensor pS1 = fu::sm90_partition_for_epilogue<RS>(gS1, epi_tile, tiled_copy, thread_idx);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < size(tMax); ++i) {
                if (elem_less(tCc(i), residue)) {
                    pMax(i) = tMax(i);
                    pS1(i) = tS1(i);
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
        constexpr int TM = size<0>(Tile{});
        constexpr int TN = size<1>(Tile{});
        /* tile column n's partials: rows [m TM, m TM + TM) of its (M) vector, stride 0 along N */
        auto tile = make_layout(make_shape(Int<TM>{}, Int<TN>{}), make_stride(_1{}, _0{}));
        const size_t base =
            static_cast<size_t>(n) * static_cast<size_t>(M) + static_cast<size_t>(m) * TM;
        Tensor gMax = make_tensor(make_gmem_ptr(params.pmax + base), tile);
        Tensor gS1 = make_tensor(make_gmem_ptr(params.ps1 + base), tile);
        Tensor tCgMax = fu::sm90_partition_for_epilogue<ReferenceSrc>(
            gMax, args.epi_tile, args.tiled_copy, args.thread_idx);
        Tensor tMax = make_tensor_like<float>(tCgMax);
        Tensor tS1 = make_tensor_like<float>(tCgMax);
        fill(tMax, -INFINITY);
        fill(tS1, 0.0f);
        auto rest =
            make_tuple(bool_constant<ReferenceSrc>{}, lane_layout_MN, lane_mn, gMax, gS1, args.cD,
                       args.residue_cD, args.epi_tile, args.tiled_copy, args.thread_idx);
        auto t = make_tuple(cute::move(tMax), cute::move(tS1), args.tCcD, args.residue_tCcD, rest);
        (void)K;
        (void)L;
        (void)k;
        (void)l;
        ConsumerStoreCallbacks<decltype(t)> cb(std::move(t), params);
        cb.interior = (m + 1) * TM <= M && (n + 1) * TN <= N;
        return cb;
    }
};

using Tile = Shape<_128, Int<GEMM_STATS_COLS>, _64>;
using Bf16 = cutlass::bfloat16_t;

/* z = acc and its statistics. (A bias node, a row broadcast, cost the K 2048 GEMM 0.46 ms in the
 * loop: its per-tile shared-memory fill and barrier no longer hid behind the other warpgroup's
 * MMAs; docs/GPU-NOTES.md, "Row statistics". Heads with a bias take cuBLAS.) */
using EVT = fu::Sm90EVT<RowStats<Tile>, fu::Sm90AccFetch>;

using Pingpong = cutlass_util::PingpongBf16<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
                                            void, 4, float, 4, Tile, EVT>;
using Kernel = Pingpong::Kernel;
using Gemm = Pingpong::Gemm;

static typename Gemm::Arguments arguments_of(const gemm_stats_args &a) {
    using SA = typename Kernel::StrideA;
    using SB = typename Kernel::StrideB;
    using SD = typename Kernel::StrideD;
    const SA sa = cutlass::make_cute_packed_stride(SA{}, make_shape(a.m, a.k, 1));
    const SB sb = cutlass::make_cute_packed_stride(SB{}, make_shape(a.n, a.k, 1));
    const SD sd = cutlass::make_cute_packed_stride(SD{}, make_shape(a.m, a.n, 1));
    typename Gemm::Arguments g{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.m, a.n, a.k, 1},
        {static_cast<const Bf16 *>(a.x), sa, static_cast<const Bf16 *>(a.w), sb},
        {{}, nullptr, {}, a.z, sd}};
    g.epilogue.thread = {{}, {a.pmax, a.ps1, a.c1}};
    g.hw_info.device_id = a.device;
    g.hw_info.sm_count = a.sm_count;
    return g;
}

} // namespace gemm_stats_impl

using namespace gemm_stats_impl;
using cutlass_util::aligned16;

/* TMA: 16-byte aligned bases and row strides (k bf16, n fp32). */
static bool stats_operands_ok(const gemm_stats_args &a) {
    return a.m >= 1 && a.n >= 1 && a.k >= 1 && a.k % 8 == 0 && a.n % 4 == 0 && aligned16(a.x) &&
           aligned16(a.w) && aligned16(a.z);
}

bool gemm_stats_fits(const gemm_stats_args &a) {
    return stats_operands_ok(a) && cutlass_util::fits<Gemm>(arguments_of(a));
}

cudaError_t gemm_stats_setup(void) {
    return cutlass_util::setup<Gemm>();
}

cudaError_t gemm_stats_launch(const gemm_stats_args &a, cudaStream_t s, bool *fits) {
    return cutlass_util::run_if<Gemm>(stats_operands_ok(a), arguments_of(a), s, fits);
}
