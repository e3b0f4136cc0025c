/*
 * fused_rows.cuh - the streaming fused_rows kernel's device pieces (fused_rows.cu), and the
 * entry points of the resident kernel (fused_rows_resident.cu), which runs instead where a row
 * fits on chip. The streaming kernel gives a row one block, in three passes over global memory:
 *   1. row maxima of zs and zt and sums of exponentials relative to them (a running maximum per
 *      thread, sums in double, exp2 of (z - m) cx, cx = log2(e) / tau; cy = log2(e) / tau_t for
 *      zt), giving the LSEs of zs / tau and zt / tau_t (natural log) and the base-2 LSE of zs
 *      (CE);
 *   2. sums (double) of the JSD element terms e and of their x-derivatives g (div_math.cuh, the
 *      shared core/backend_api/math/distil_elem.h);
 *   3. G = w_hard/n (s - onehot) + w_soft/(n tau) (g - q sum g).
 * As the resident kernel: x = log q = (zs - ms) / tau - lx, the difference taken before the
 * scaling.
 * Partials are combined in a fixed order (a warp butterfly, then warps 0, 1, ...), so reruns are
 * bitwise identical.
 */
#ifndef DISTIL_GPU_FUSED_ROWS_CUH
#define DISTIL_GPU_FUSED_ROWS_CUH

#include "gpu_state.cuh"
#include "dtype.cuh"
#include "div_math.cuh"
#include "reduce.cuh"
#include "row_sums.cuh"

#include <type_traits>

namespace DISTIL_GPU_NS {

struct fused_params {
    const float *zs; /* (rows, V) fp32 dense */
    const float *zt;
    const int64_t *labels; /* (rows) */
    float *ce;             /* (rows) */
    float *soft;           /* (rows) */
    void *g;               /* (rows, V) of the G dtype, optional, may be zs */
    const float *n_valid;
    int64_t rows, vocab, ignore_index;
    float inv_t, weight_hard, weight_soft;
    bool unit_temp; /* inv_t == 1: zs / tau is zs, one LSE serves CE and JSD */
    div_coef coef;
    float cx; /* log2(e) * inv_t */
    /* docs/SPEC.md §6: the teacher's 1 / temperature and cy = log2(e) * inv_tt (inv_t, cx by
     * default); dz (rows, V) fp32 or nullptr: zs holds the student's scaled / capped logits z',
     * and each element of G is multiplied by dz'/dz from dz (a uniform branch, off by default) */
    float inv_tt, cy;
    const float *dz;
    /* The row statistics of zs and zt from their GEMMs, or nullptr (distil_fused_rows_args):
     * element t rows + r of each, t < tiles. */
    const float *zs_max, *zs_s1, *zt_max, *zt_s1;
    int64_t tiles;
    /* docs/SPEC.md §6: (rows) fp32, the student's entropy -sum q x, or nullptr. Both row kernels
     * sum it (the loss-only kernel on the GEMMs' row statistics declines such a call). */
    float *entropy;
};

constexpr float FUSED_LOG2E = 1.4426950408889634f;
constexpr float FUSED_LN2 = 0.6931471805599453f;

/* Calls f(MODE) with the row's divergence mode as a compile-time constant (div_with_mode). */
template <typename F>
__device__ __forceinline__ void fused_with_mode(const fused_params &p, F &&f) {
    div_with_mode(p.coef, static_cast<F &&>(f));
}

/* The same with (tau == 1) as a second constant: f(MODE, UNIT). */
template <typename F>
__device__ __forceinline__ void fused_with_mode_unit(const fused_params &p, F &&f) {
    fused_with_mode(p, [&](auto mode) {
        if (p.unit_temp) {
            f(mode, std::true_type{});
        } else {
            f(mode, std::false_type{});
        }
    });
}

constexpr int FUSED_UNROLL = 2;

/* Shared memory of one block: the per-warp partials of its reductions. */
struct fused_smem {
    float wmax[2][DISTIL_GPU_MAX_WARPS];
    double wsum[3][DISTIL_GPU_MAX_WARPS];
};

/* A thread's pass-1 state: running maxima of its zs and zt, and the sums relative to them of
 * 2^((zs - ms) cx), 2^((zt - mt) cy) and (tau != 1) 2^((zs - ms) log2 e). */
struct fused_exp_acc {
    float ms, mt;
    double sx, sy, sc;
};

/* The row's statistics, the same in every thread: maxima, LSEs relative to them
 * (x = (zs - ms) / tau - lx, y = (zt - mt) / tau - ly, log2 s = (zs - ms) log2 e - lce), the
 * weights hw = weight_hard / n, sw = weight_soft / (n tau), and (pass 3) sum of g. */
struct fused_row_stats {
    float ms, mt, lx, ly, lce, hw, sw, sum_g;
    float sm1; /* the label's s - 1 (fused_label_sm1) */
    int64_t label;
};

/* The CE gradient's s - 1 at the label, as expm1 of the label's log-softmax (z_label - ms) - LSE:
 * at a confident correct label s rounds to 1 in fp32, and s - 1 then carries only the rounding of
 * s (exp2f's 2 ulp: 10x the careful fp32 error of grad_xs on an H200 with a small soft part,
 * docs/GPU-NOTES.md "Fused row pass"), while expm1 keeps it to an ulp of itself. */
__device__ __forceinline__ float fused_label_sm1(float z_label, float ms, float lce) {
    return expm1f((z_label - ms) - lce * FUSED_LN2);
}

/* Whether the row's label l takes part (in [0, V) and not ignore_index). Both row kernels use it;
 * invalid labels were recorded by count_valid (the one label check), their rows are ignored. */
__device__ inline bool fused_label_valid(const fused_params &p, int64_t l) {
    return l != p.ignore_index && l >= 0 && l < p.vocab;
}

/* The loss weights over n: hw = weight_hard / n, sw = weight_soft / (n tau) (0 when n is 0). */
__device__ inline void fused_weights(const fused_params &p, float *hw, float *sw) {
    const float nv = p.n_valid ? *p.n_valid : 1.0f;
    *hw = nv > 0.0f ? p.weight_hard / nv : 0.0f;
    *sw = nv > 0.0f ? p.weight_soft * p.inv_t / nv : 0.0f;
}

/* ------------------------------------------------------------------ block reductions */

/* The block's maxima of (a, b) over its first `warps` warps, the same bits in every thread;
 * wmax is scratch in shared memory. fmaxf skips NaN: a NaN logit propagates through the sums
 * instead. Both row kernels use it. */
template <int CAP>
__device__ inline void fused_block_max(float (&wmax)[2][CAP], int warps, float &a, float &b) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        a = fmaxf(a, distil_warp_xor(a, o));
        b = fmaxf(b, distil_warp_xor(b, o));
    }
    if (lane == 0) {
        wmax[0][warp] = a;
        wmax[1][warp] = b;
    }
    __syncthreads();
    a = wmax[0][0];
    b = wmax[1][0];
    for (int w = 1; w < warps; w++) {
        a = fmaxf(a, wmax[0][w]);
        b = fmaxf(b, wmax[1][w]);
    }
}

/* Each warp's sums of v[0..N) (a fixed butterfly) into wsum[k][warp], then a barrier: the caller
 * adds the warps' entries in order. Both row kernels use it; wsum is scratch in shared memory. */
template <int N, int K, int CAP>
__device__ inline void fused_warp_sums_to(double (&wsum)[K][CAP], double (&v)[N]) {
    static_assert(N <= K, "a row of wsum per sum");
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
#pragma unroll
    for (int k = 0; k < N; k++) {
        v[k] = warp_sum(v[k]);
        if (lane == 0) {
            wsum[k][warp] = v[k];
        }
    }
    __syncthreads();
}

/* The block's sums of v[0..N) in double, fixed order, the same bits in every thread. Begins with
 * a barrier: the previous call's readers are done with sm.wsum. */
template <int N> __device__ inline void fused_block_sums(fused_smem &sm, double (&v)[N]) {
    __syncthreads();
    fused_warp_sums_to(sm.wsum, v);
#pragma unroll
    for (int k = 0; k < N; k++) {
        v[k] = sm.wsum[k][0];
        for (int w = 1; w < static_cast<int>(blockDim.x / DISTIL_GPU_WARP); w++) {
            v[k] += sm.wsum[k][w];
        }
    }
}

/* ------------------------------------------------------------------------ the passes */

/* Calls f(a, b, j) on each vector of VW columns [j, j + VW) of the row that this thread owns
 * (j = VW t, VW (t + T), ...; the same columns in every pass), FUSED_UNROLL vectors loaded
 * before the first is used. zs, zt aligned to VW floats. */
template <int VW, typename F>
__device__ __forceinline__ void fused_for_vectors(const float *zs, const float *zt, int64_t n,
                                                  F f) {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VW; j0 < n; j0 += step * FUSED_UNROLL) {
        float a[FUSED_UNROLL][VW];
        float b[FUSED_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < FUSED_UNROLL; u++) {
            if (j0 + u * step < n) {
                vload<DISTIL_F32, VW>(zs, j0 + u * step, a[u]);
                vload<DISTIL_F32, VW>(zt, j0 + u * step, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < FUSED_UNROLL; u++) {
            if (j0 + u * step < n) {
                f(a[u], b[u], j0 + u * step);
            }
        }
    }
}

/* Whether some v[k] equals r (row_add_exps's has_r where the maximum is known beforehand). */
template <int VW> __device__ __forceinline__ bool fused_vec_has(const float (&v)[VW], float r) {
    bool h = false;
#pragma unroll
    for (int k = 0; k < VW; k++) {
        h |= v[k] == r;
    }
    return h;
}

/* exp2f as an object, for row_add_exps. */
struct fused_exp2 {
    __device__ __forceinline__ float operator()(float t) const {
        return exp2f(t);
    }
};

/* s *= 2^((m - m_new) c): the sum relative to m moved to the larger m_new. */
__device__ __forceinline__ void fused_rescale(double &s, float m, float m_new, float c) {
    s *= static_cast<double>(exp2f((m - m_new) * c));
}

/* Pass 1 on one vector: raise the running maxima first (rescaling the sums: the branch runs only
 * when a maximum grows, a few times per thread), then add the vector's terms, summed in fp32, to
 * the double sums. While a maximum is -inf (its columns all -inf so far) the terms are taken
 * relative to 0: they are 0, or NaN from a NaN logit, which must propagate. The vector that raised
 * a maximum (or equals it) holds it: its terms are summed in double (row_add_exps). */
template <int VW, bool UNIT>
__device__ __forceinline__ void fused_exp_add(const fused_params &p, fused_exp_acc &t,
                                              const float (&a)[VW], const float (&b)[VW]) {
    float va = a[0];
    float vb = b[0];
#pragma unroll
    for (int k = 1; k < VW; k++) {
        va = fmaxf(va, a[k]);
        vb = fmaxf(vb, b[k]);
    }
    if (va > t.ms) {
        fused_rescale(t.sx, t.ms, va, p.cx);
        if (!UNIT) {
            fused_rescale(t.sc, t.ms, va, FUSED_LOG2E);
        }
        t.ms = va;
    }
    if (vb > t.mt) {
        fused_rescale(t.sy, t.mt, vb, p.cy);
        t.mt = vb;
    }
    const float ra = t.ms == -INFINITY ? 0.0f : t.ms;
    const float rb = t.mt == -INFINITY ? 0.0f : t.mt;
    row_add_exps(t.sx, a, ra, p.cx, va == ra, fused_exp2{});
    row_add_exps(t.sy, b, rb, p.cy, vb == rb, fused_exp2{});
    if (!UNIT) {
        row_add_exps(t.sc, a, ra, FUSED_LOG2E, va == ra, fused_exp2{});
    }
}

template <int VW, bool UNIT>
__device__ inline fused_exp_acc fused_pass_exp(const fused_params &p, const float *zs,
                                               const float *zt, int64_t n) {
    fused_exp_acc t = {-INFINITY, -INFINITY, 0.0, 0.0, 0.0};
    fused_for_vectors<VW>(zs, zt, n, [&](const float(&a)[VW], const float(&b)[VW], int64_t) {
        fused_exp_add<VW, UNIT>(p, t, a, b);
    });
    return t;
}

/* A thread's sum moved to the row maximum. A sum of 0 (no columns, or all -inf) adds nothing:
 * skip its factor, NaN when both maxima are -inf. A NaN sum stays NaN. */
__device__ __forceinline__ double fused_to_row(double s, float m, float row_m, float c) {
    if (s != 0.0) {
        fused_rescale(s, m, row_m, c);
    }
    return s;
}

/* The threads' pass-1 states combined: the row's maxima and LSEs, and the weights, into st. */
__device__ inline void fused_row_stats_reduce(const fused_params &p, fused_smem &sm,
                                              const fused_exp_acc &t, fused_row_stats &st) {
    st.ms = t.ms;
    st.mt = t.mt;
    fused_block_max(sm.wmax, static_cast<int>(blockDim.x / DISTIL_GPU_WARP), st.ms, st.mt);
    double v[3] = {fused_to_row(t.sx, t.ms, st.ms, p.cx), fused_to_row(t.sy, t.mt, st.mt, p.cy),
                   fused_to_row(t.sc, t.ms, st.ms, FUSED_LOG2E)};
    fused_block_sums<3>(sm, v);
    st.lx = static_cast<float>(log(v[0]));
    st.ly = static_cast<float>(log(v[1]));
    st.lce = static_cast<float>(log2(p.unit_temp ? v[0] : v[2]));
    fused_weights(p, &st.hw, &st.sw);
}

/* Pass 1 and its reductions. */
template <int VW>
__device__ inline void fused_row_stats_of(const fused_params &p, fused_smem &sm, const float *zs,
                                          const float *zt, int64_t n, fused_row_stats &st) {
    const fused_exp_acc t = p.unit_temp ? fused_pass_exp<VW, true>(p, zs, zt, n)
                                        : fused_pass_exp<VW, false>(p, zs, zt, n);
    fused_row_stats_reduce(p, sm, t, st);
}

/* A tile's sum ts relative to its maximum tm, added to a running sum s relative to m >= tm. A
 * tile sum of 0 adds nothing (its factor is NaN when both maxima are -inf); NaN propagates. */
__device__ __forceinline__ void fused_tile_add(double &s, float ts, float tm, float m, float c) {
    if (ts != 0.0f) {
        s += static_cast<double>(ts) * static_cast<double>(exp2f((tm - m) * c));
    }
}

/* The row statistics from the GEMMs' tiles (p.zs_max ...) instead of pass 1: each thread merges
 * tiles tid, tid + T, ... into a pass-1 state (its sums moved to a larger maximum first), then the
 * same reductions. The CE's sum at tau != 1 is not among the tiles' (st.lce is then -inf): the
 * caller sums it in its pass over the row. */
__device__ inline void fused_row_stats_tiles(const fused_params &p, fused_smem &sm, int64_t row,
                                             fused_row_stats &st) {
    fused_exp_acc t = {-INFINITY, -INFINITY, 0.0, 0.0, 0.0};
    for (int64_t k = threadIdx.x; k < p.tiles; k += blockDim.x) {
        const int64_t i = k * p.rows + row;
        const float ms = p.zs_max[i];
        const float mt = p.zt_max[i];
        if (ms > t.ms) {
            t.sx = fused_to_row(t.sx, t.ms, ms, p.cx);
            t.ms = ms;
        }
        if (mt > t.mt) {
            t.sy = fused_to_row(t.sy, t.mt, mt, p.cy);
            t.mt = mt;
        }
        fused_tile_add(t.sx, p.zs_s1[i], ms, t.ms, p.cx);
        fused_tile_add(t.sy, p.zt_s1[i], mt, t.mt, p.cy);
    }
    fused_row_stats_reduce(p, sm, t, st);
}

/* The log-probabilities of one vector: x = (zs - ms) / tau - lx, y = (zt - mt) / tau_t - ly. Every
 * row kernel takes them from here. */
template <int VW, typename S>
__device__ __forceinline__ void fused_logp(const fused_params &p, const S &st, const float (&a)[VW],
                                           const float (&b)[VW], float (&x)[VW], float (&y)[VW]) {
#pragma unroll
    for (int k = 0; k < VW; k++) {
        x[k] = (a[k] - st.ms) * p.inv_t - st.lx;
        y[k] = (b[k] - st.mt) * p.inv_tt - st.ly;
    }
}

/* Pass 2: the thread's sums of e (acc[0]) and, for the gradient (SUM_G), g (acc[1]), in double;
 * the finite form of the terms where a vector's log-probabilities are finite (div_with_sv). With
 * ENT, *h gets the student's entropy terms -q x (docs/SPEC.md §6; q == 0 adds 0). */
template <int VW, int MODE, bool SUM_G = true, bool ENT = false>
__device__ inline void fused_pass_soft(const fused_params &p, const fused_row_stats &st,
                                       const float *zs, const float *zt, int64_t n,
                                       double (&acc)[2], double *h = nullptr) {
    fused_for_vectors<VW>(zs, zt, n, [&](const float(&a)[VW], const float(&b)[VW], int64_t) {
        float x[VW], y[VW];
        fused_logp(p, st, a, b, x, y);
        div_with_sv(x, y, [&](auto sv) {
#pragma unroll
            for (int k = 0; k < VW; k++) {
                float g, q;
                acc[0] += div_elem_q<MODE, decltype(sv)::value>(p.coef, x[k], y[k], &g, &q);
                if (SUM_G) {
                    acc[1] += g;
                }
                if (ENT) {
                    *h -= q > 0.0f ? q * x[k] : 0.0f;
                }
            }
        });
    });
}

/* One element of G: hw (s - onehot) + sw (g - q sum g), s = softmax(zs) (q when tau == 1); at the
 * label s - 1 is the row's st.sm1. x, y: its log-probabilities (fused_logp); SV as div_elem_q. */
template <int MODE, bool UNIT, bool SV>
__device__ __forceinline__ float fused_grad_elem(const fused_params &p, const fused_row_stats &st,
                                                 float x, float y, float zs, bool is_label) {
    float g, q;
    (void)div_elem_q<MODE, SV>(p.coef, x, y, &g, &q);
    const float s = UNIT ? q : exp2f((zs - st.ms) * FUSED_LOG2E - st.lce);
    return st.hw * (is_label ? st.sm1 : s) + st.sw * de_soft_grad(g, q, st.sum_g);
}

/* Pass 3: the row g of G. In place (g aliasing zs, F32) is safe: each thread reads its own
 * columns before it writes them, no other thread reads them in this pass, and the label's logit
 * was read before pass 2's barriers. dz: the row of dz'/dz (docs/SPEC.md §6), or nullptr. */
template <int GDT, int VW, int MODE, bool UNIT>
__device__ inline void fused_pass_grad(const fused_params &p, const fused_row_stats &st,
                                       const float *zs, const float *zt, int64_t n, void *g,
                                       const float *dz) {
    fused_for_vectors<VW>(zs, zt, n, [&](const float(&a)[VW], const float(&b)[VW], int64_t j) {
        float x[VW], y[VW], o[VW];
        fused_logp(p, st, a, b, x, y);
        div_with_sv(x, y, [&](auto sv) {
#pragma unroll
            for (int k = 0; k < VW; k++) {
                o[k] = fused_grad_elem<MODE, UNIT, decltype(sv)::value>(p, st, x[k], y[k], a[k],
                                                                        j + k == st.label);
            }
        });
#pragma unroll
        for (int k = 0; k < VW; k++) {
            if (dz != nullptr) { /* uniform */
                o[k] *= dz[j + k];
            }
        }
        vstore<GDT, VW>(g, j, o);
    });
}

/* ----------------------------------------------------------------------------- one row */

template <int GDT, int VW> __device__ inline void fused_zero(void *g, int64_t c0, int64_t n) {
    float z[VW];
#pragma unroll
    for (int k = 0; k < VW; k++) {
        z[k] = 0.0f;
    }
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * VW; j < n;
         j += static_cast<int64_t>(blockDim.x) * VW) {
        vstore<GDT, VW>(g, c0 + j, z);
    }
}

/* The row's CE and JSD from its statistics: CE = LSE(zs) - zs[label] with LSE = ms + lce ln 2,
 * summed as (ms - zs[label]) + lce ln 2 (exact difference first: a CE far below an ulp of the
 * logits survives), JSD = the sum of the element terms. Both row kernels use it (one thread). */
__device__ inline void fused_row_results(const fused_params &p, int64_t row, float ms, float lce,
                                         float z_label, double sum_e) {
    p.ce[row] = (ms - z_label) + lce * FUSED_LN2;
    p.soft[row] = static_cast<float>(sum_e);
}

/* An ignored row: `lead` writes its ce and soft (0), and every thread zeroes its columns of
 * [c0, c0 + n) of the row g of G. Both row kernels use it. */
template <int GDT, bool HAS_G, int VW>
__device__ inline void fused_ignored_row(const fused_params &p, int64_t row, void *g, int64_t c0,
                                         int64_t n, bool lead) {
    if (HAS_G) {
        fused_zero<GDT, VW>(g, c0, n);
    }
    if (lead) {
        p.ce[row] = 0.0f;
        p.soft[row] = 0.0f;
        if (p.entropy != nullptr) {
            p.entropy[row] = 0.0f;
        }
    }
}

/* The three passes of a row with a valid label: its CE, JSD and G (n columns). z_label: zs at the
 * label (every thread), read before any thread may write G over zs. */
template <int GDT, bool HAS_G, int VW>
__device__ inline void fused_stream_row(const fused_params &p, fused_smem &sm, const float *zs,
                                        const float *zt, int64_t n, void *g, int64_t row,
                                        int64_t label, float z_label) {
    fused_row_stats st;
    fused_row_stats_of<VW>(p, sm, zs, zt, n, st);
    double acc[2] = {0.0, 0.0};
    if (p.entropy != nullptr) { /* uniform; docs/SPEC.md §6 student entropy */
        double h = 0.0;
        fused_with_mode(p, [&](auto mode) {
            fused_pass_soft<VW, decltype(mode)::value, HAS_G, true>(p, st, zs, zt, n, acc, &h);
        });
        double v[3] = {acc[0], acc[1], h};
        fused_block_sums<3>(sm, v); /* its barriers order pass 3's writes after every read */
        acc[0] = v[0];
        acc[1] = v[1];
        if (threadIdx.x == 0) {
            p.entropy[row] = static_cast<float>(v[2]);
        }
    } else {
        fused_with_mode(p, [&](auto mode) {
            fused_pass_soft<VW, decltype(mode)::value, HAS_G>(p, st, zs, zt, n, acc);
        });
        fused_block_sums<2>(sm, acc); /* its barriers order pass 3's writes after every read */
    }
    if (threadIdx.x == 0) {
        fused_row_results(p, row, st.ms, st.lce, z_label, acc[0]);
    }
    if (HAS_G) {
        st.sum_g = static_cast<float>(acc[1]);
        st.sm1 = fused_label_sm1(z_label, st.ms, st.lce);
        st.label = label;
        fused_with_mode_unit(p, [&](auto mode, auto unit) {
            fused_pass_grad<GDT, VW, decltype(mode)::value, decltype(unit)::value>(
                p, st, zs, zt, n, g, p.dz != nullptr ? p.dz + row * p.vocab : nullptr);
        });
    }
}

/* fused_rows_resident.cu: allow its shared memory and cluster sizes (at create), and launch it
 * when it applies (*done false: the caller uses the streaming kernel). */
distil_status fused_resident_setup(gpu_state *b);
cudaError_t fused_resident_launch(gpu_state *b, const fused_params &p, distil_dtype gdt,
                                  cudaStream_t s, bool *done);

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_FUSED_ROWS_CUH */
