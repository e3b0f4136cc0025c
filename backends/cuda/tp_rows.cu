/*
 * tp_rows.cu - tp_rows of the cuda / hip backend (docs/SPEC.md §8): one phase of the
 * vocabulary-parallel row pass on a chunk of the rank's fp32 logits, one block per row, built from
 * the streaming fused_rows kernel's passes (fused_rows.cuh) with the row statistics, reduced over
 * the ranks by the core's all-reduces between the phases, in f64 (rows, 2 | 3) buffers:
 *   MAX     block maxima of zs, zt                              -> smax
 *   SUMS    sum exp((z - m) / tau) of zs, zt, sum exp(zs - m)   -> ssum (m the group's maxima)
 *   TERMS   zs[label] - m_s (owner), sum e, sum de/dx           -> sterm
 *   FINISH  ce, soft and G from the group's statistics
 * Partials combine in the fixed order of fused_rows.cuh: reruns are bitwise identical.
 */
#include "fused_rows.cuh"

namespace DISTIL_GPU_NS {

constexpr int TP_THREADS = 512;

struct tp_params {
    fused_params f; /* the chunk as for fused_rows; f.vocab the rank's width */
    int phase;
    int64_t v0, vocab_total;
    double *smax, *ssum, *sterm;
};

/* An ignored row's neutral statistics (thread 0), or its zero outputs (FINISH). */
template <int GDT, bool HAS_G, int VW>
__device__ inline void tp_ignored(const tp_params &p, int64_t row, void *g) {
    if (p.phase == DISTIL_TP_FINISH) {
        fused_ignored_row<GDT, HAS_G, VW>(p.f, row, g, 0, p.f.vocab, threadIdx.x == 0);
        return;
    }
    if (threadIdx.x != 0) {
        return;
    }
    if (p.phase == DISTIL_TP_MAX) {
        p.smax[2 * row] = p.smax[2 * row + 1] = -INFINITY;
        return;
    }
    double *s = p.phase == DISTIL_TP_SUMS ? p.ssum + 3 * row : p.sterm + 3 * row;
    s[0] = s[1] = s[2] = 0.0;
}

/* MAX: the block's maxima of its columns of zs and zt. */
template <int VW>
__device__ inline void tp_max(const tp_params &p, fused_smem &sm, const float *zs, const float *zt,
                              int64_t row) {
    float a = -INFINITY, b = -INFINITY;
    fused_for_vectors<VW>(zs, zt, p.f.vocab,
                          [&](const float(&x)[VW], const float(&y)[VW], int64_t) {
#pragma unroll
                              for (int k = 0; k < VW; k++) {
                                  a = fmaxf(a, x[k]);
                                  b = fmaxf(b, y[k]);
                              }
                          });
    fused_block_max(sm.wmax, static_cast<int>(blockDim.x / DISTIL_GPU_WARP), a, b);
    if (threadIdx.x == 0) {
        p.smax[2 * row] = a;
        p.smax[2 * row + 1] = b;
    }
}

/* SUMS: sums relative to the group's maxima (0 in place of -inf, as fused_exp_add). */
template <int VW>
__device__ inline void tp_sums(const tp_params &p, fused_smem &sm, const float *zs, const float *zt,
                               int64_t row) {
    const float ms = static_cast<float>(p.smax[2 * row]),
                mt = static_cast<float>(p.smax[2 * row + 1]);
    const float ra = ms == -INFINITY ? 0.0f : ms, rb = mt == -INFINITY ? 0.0f : mt;
    double v[3] = {0.0, 0.0, 0.0};
    fused_for_vectors<VW>(zs, zt, p.f.vocab,
                          [&](const float(&x)[VW], const float(&y)[VW], int64_t) {
                              const bool hx = fused_vec_has(x, ra);
                              row_add_exps(v[0], x, ra, p.f.cx, hx, fused_exp2{});
                              row_add_exps(v[1], y, rb, p.f.cx, fused_vec_has(y, rb), fused_exp2{});
                              row_add_exps(v[2], x, ra, FUSED_LOG2E, hx, fused_exp2{});
                          });
    fused_block_sums<3>(sm, v);
    if (threadIdx.x == 0) {
        p.ssum[3 * row] = v[0];
        p.ssum[3 * row + 1] = v[1];
        p.ssum[3 * row + 2] = p.f.unit_temp ? v[0] : v[2];
    }
}

/* The row's statistics from the group's: maxima, LSEs (natural for x, y; base 2 for CE). */
__device__ inline fused_row_stats tp_stats(const tp_params &p, int64_t row, int64_t local) {
    fused_row_stats st;
    st.ms = static_cast<float>(p.smax[2 * row]);
    st.mt = static_cast<float>(p.smax[2 * row + 1]);
    st.lx = static_cast<float>(log(p.ssum[3 * row]));
    st.ly = static_cast<float>(log(p.ssum[3 * row + 1]));
    st.lce = static_cast<float>(log2(p.ssum[3 * row + 2]));
    fused_weights(p.f, &st.hw, &st.sw);
    st.sum_g = static_cast<float>(p.sterm[3 * row + 2]);
    st.label = local;
    return st;
}

/* TERMS: the owner's zs[label] - m_s, and the block's sums of e and g. */
template <int VW>
__device__ inline void tp_terms(const tp_params &p, fused_smem &sm, const float *zs,
                                const float *zt, int64_t row, int64_t local) {
    const fused_row_stats st = tp_stats(p, row, local);
    double acc[2] = {0.0, 0.0};
    fused_with_mode(p.f, [&](auto mode) {
        fused_pass_soft<VW, decltype(mode)::value>(p.f, st, zs, zt, p.f.vocab, acc);
    });
    fused_block_sums<2>(sm, acc);
    if (threadIdx.x == 0) {
        p.sterm[3 * row] = local >= 0 ? static_cast<double>(zs[local]) - st.ms : 0.0;
        p.sterm[3 * row + 1] = acc[0];
        p.sterm[3 * row + 2] = acc[1];
    }
}

/* FINISH: ce = LSE(zs) - zs[label] = log(sum exp(zs - m)) - (zs[label] - m), soft, and G. */
template <int GDT, bool HAS_G, int VW>
__device__ inline void tp_finish(const tp_params &p, const float *zs, const float *zt, int64_t row,
                                 int64_t local, void *g) {
    if (threadIdx.x == 0) {
        p.f.ce[row] = static_cast<float>(log(p.ssum[3 * row + 2]) - p.sterm[3 * row]);
        p.f.soft[row] = static_cast<float>(p.sterm[3 * row + 1]);
    }
    if (HAS_G) {
        fused_row_stats st = tp_stats(p, row, local);
        /* the label's s - 1 (fused_label_sm1) from the gathered zs[label] - m_s and CE sum */
        st.sm1 = static_cast<float>(expm1(p.sterm[3 * row] - log(p.ssum[3 * row + 2])));
        fused_with_mode_unit(p.f, [&](auto mode, auto unit) {
            fused_pass_grad<GDT, VW, decltype(mode)::value, decltype(unit)::value>(
                p.f, st, zs, zt, p.f.vocab, g, nullptr); /* no head transform under tp */
        });
    }
}

template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(TP_THREADS) distil_tp_rows_kernel(tp_params p) {
    __shared__ fused_smem sm;
    const int64_t row = blockIdx.x;
    const float *zs = p.f.zs + row * p.f.vocab;
    const float *zt = p.f.zt + row * p.f.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.f.g) + row * p.f.vocab : nullptr;
    const int64_t label = p.f.labels[row];
    if (label == p.f.ignore_index || label < 0 || label >= p.vocab_total) {
        tp_ignored<GDT, HAS_G, VW>(p, row, g);
        return;
    }
    const int64_t local =
        label >= p.v0 && label < p.v0 + p.f.vocab ? label - p.v0 : static_cast<int64_t>(-1);
    switch (p.phase) {
    case DISTIL_TP_MAX:
        tp_max<VW>(p, sm, zs, zt, row);
        break;
    case DISTIL_TP_SUMS:
        tp_sums<VW>(p, sm, zs, zt, row);
        break;
    case DISTIL_TP_TERMS:
        tp_terms<VW>(p, sm, zs, zt, row, local);
        break;
    default:
        tp_finish<GDT, HAS_G, VW>(p, zs, zt, row, local, g);
        break;
    }
}

template <int GDT, bool HAS_G, int VW>
static cudaError_t tp_launch(const tp_params &p, cudaStream_t s) {
    distil_tp_rows_kernel<GDT, HAS_G, VW><<<static_cast<unsigned>(p.f.rows), TP_THREADS, 0, s>>>(p);
    return cudaGetLastError();
}

template <int VW>
static cudaError_t tp_launch_vw(const tp_params &p, distil_dtype gdt, cudaStream_t s) {
    if (p.f.g == nullptr || p.phase != DISTIL_TP_FINISH) {
        return tp_launch<DISTIL_F32, false, VW>(p, s);
    }
    return dt_dispatch(gdt, [&](auto g) { return tp_launch<decltype(g)::value, true, VW>(p, s); });
}

static tp_params tp_params_of(const distil_tp_rows_args *a) {
    tp_params p;
    p.f.zs = gpu_ptr<const float>(a->zs);
    p.f.zt = gpu_ptr<const float>(a->zt);
    p.f.labels = gpu_ptr<const int64_t>(a->labels);
    p.f.ce = gpu_ptr<float>(a->ce_rows);
    p.f.soft = gpu_ptr<float>(a->soft_rows);
    p.f.g = distil_dptr_addr(a->g);
    p.f.n_valid = gpu_ptr<const float>(a->n_valid);
    p.f.rows = a->rows;
    p.f.vocab = a->vocab;
    p.f.ignore_index = a->ignore_index;
    p.f.inv_t = a->inv_temperature;
    p.f.weight_hard = a->weight_hard;
    p.f.weight_soft = a->weight_soft;
    p.f.unit_temp = a->inv_temperature == 1.0f;
    p.f.coef = div_coef_make(a->divergence, a->beta, a->alpha);
    p.f.cx = FUSED_LOG2E * a->inv_temperature;
    /* one temperature and no head transform: fused_linear_jsd_tp.c refuses the head options */
    p.f.inv_tt = a->inv_temperature;
    p.f.cy = p.f.cx;
    p.f.dz = nullptr;
    p.f.entropy = nullptr; /* refused on a shard too */
    p.phase = static_cast<int>(a->phase);
    p.v0 = a->vocab_offset;
    p.vocab_total = a->vocab_total;
    p.smax = gpu_ptr<double>(a->stat_max);
    p.ssum = gpu_ptr<double>(a->stat_sum);
    p.sterm = gpu_ptr<double>(a->stat_terms);
    return p;
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(tp_rows)(void *vb, const distil_tp_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > 0x7fffffff) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "tp_rows: %lld rows in one chunk (at most 2^31 - 1)",
                                (long long)a->rows);
    }
    const tp_params p = tp_params_of(a);
    gpu_device_guard guard(b);
    const bool vec = p.f.vocab % 4 == 0 && gpu_aligned(p.f.zs, 16) && gpu_aligned(p.f.zt, 16) &&
                     (p.f.g == nullptr || gpu_aligned(p.f.g, 16));
    const cudaError_t e = vec ? tp_launch_vw<4>(p, a->g_dtype, b->lane.stream)
                              : tp_launch_vw<1>(p, a->g_dtype, b->lane.stream);
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "tp_rows");
}

extern "C" void *DISTIL_GPU_FN(native_stream)(void *vb) {
    return static_cast<void *>(gpu_of(vb)->lane.stream);
}
