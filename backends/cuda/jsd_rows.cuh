/*
 * jsd_rows.cuh - the JSD element loop of jsd_rows.cu (one block per row), over any span of a
 * row's vectors, for one divergence mode MODE (distil_elem.h). x (rows, V) row stride x_stride, y
 * likewise (y_stride), dtype DT; grad (rows, V) row stride g_stride, optional, may be x itself:
 * each thread reads an element before it writes the same element.
 */
#ifndef DISTIL_GPU_JSD_ROWS_CUH
#define DISTIL_GPU_JSD_ROWS_CUH

#include "gpu_state.cuh"
#include "dtype.cuh"
#include "jsd_math.cuh"
#include "reduce.cuh"

namespace DISTIL_GPU_NS {

struct jsd_rows_params {
    const void *x;
    const void *y;
    void *grad;
    const int64_t *labels;
    float *row_loss;
    const float *n_valid;
    int64_t x_stride, y_stride, g_stride;
    int64_t rows, vocab;
    int64_t ignore_index;
    float grad_scale;
    jsd_coef coef;
};

/* Vectors each thread keeps in flight per step (x and y each). */
constexpr int JSD_UNROLL = 2;

/*
 * The regime sort (docs/CUDA-NOTES.md, seventh session). The mixing modes' near and far forms
 * (distil_elem.h, DE_SPLITS) share little: evaluated lane by lane, a warp computes both for every
 * element. Here a warp's JSD_SPLIT_E x 32 loaded elements are sorted by regime through shared
 * memory, the near ones first (padded to a whole warp) and then the far ones, each regime's half of
 * the formula runs alone (de_elem_in with a constant `near`), and each gradient goes back to the
 * slot of the thread that loaded the element. Only where every lane of the warp holds a whole
 * step of vectors; the ends of a row take the lane-by-lane form.
 */
constexpr int JSD_SPLIT_E = 8; /* elements per thread per sort */
constexpr int JSD_SPLIT_SLOTS = DISTIL_GPU_WARP * (JSD_SPLIT_E + 1); /* + the near list's padding */
constexpr int JSD_SPLIT_THREADS = 256; /* block size of the sorting kernels (shared memory) */

struct jsd_split_buf {
    float2 xy[JSD_SPLIT_SLOTS]; /* (x, y) by sorted position */
    float g[JSD_SPLIT_SLOTS];   /* de/dx * grad factor by sorted position */
};

template <int MODE, bool GRAD, bool NEAR>
__device__ __forceinline__ double jsd_split_elem(const jsd_coef &c, jsd_split_buf &b, int i,
                                                 float gf) {
    const float2 v = b.xy[i];
    float g, q;
    const float e = de_elem_in(MODE, &c, v.x, v.y, NEAR, &g, &q);
    if (GRAD) {
        b.g[i] = g * gf;
    }
    return e;
}

#ifdef DISTIL_GPU_HAVE_BALLOT32
/* The sum of the terms of x[0..E), y[0..E) of every lane, *g[j] their gradients (times gf). */
template <int MODE, bool GRAD>
__device__ inline double jsd_split_round(const jsd_coef &c, const float *x, const float *y,
                                         float *g, float gf, jsd_split_buf &b) {
    const unsigned lane = threadIdx.x % DISTIL_GPU_WARP;
    const unsigned below = (1u << lane) - 1u;
    unsigned ball[JSD_SPLIT_E];
    int n_near = 0;
#pragma unroll
    for (int j = 0; j < JSD_SPLIT_E; j++) {
        ball[j] = distil_warp_ballot(de_near(x[j] - y[j]));
        n_near += __popc(ball[j]);
    }
    /* Position of element (j, lane): its rank among the near ones in (j, lane) order, or far0 +
     * its rank among the far ones. */
    const int far0 = (n_near + DISTIL_GPU_WARP - 1) / DISTIL_GPU_WARP * DISTIL_GPU_WARP;
    int pos[JSD_SPLIT_E];
    int seen = 0;
#pragma unroll
    for (int j = 0; j < JSD_SPLIT_E; j++) {
        const int rank = seen + __popc(ball[j] & below);
        const int order = j * DISTIL_GPU_WARP + static_cast<int>(lane);
        pos[j] = (ball[j] >> lane) & 1u ? rank : far0 + (order - rank);
        b.xy[pos[j]] = make_float2(x[j], y[j]);
        seen += __popc(ball[j]);
    }
    distil_warp_sync();
    double acc = 0.0;
    for (int i = static_cast<int>(lane); i < n_near; i += DISTIL_GPU_WARP) {
        acc += jsd_split_elem<MODE, GRAD, true>(c, b, i, gf);
    }
    const int end = far0 + JSD_SPLIT_E * DISTIL_GPU_WARP - n_near;
    for (int i = far0 + static_cast<int>(lane); i < end; i += DISTIL_GPU_WARP) {
        acc += jsd_split_elem<MODE, GRAD, false>(c, b, i, gf);
    }
    distil_warp_sync();
    if (GRAD) {
#pragma unroll
        for (int j = 0; j < JSD_SPLIT_E; j++) {
            g[j] = b.g[pos[j]];
        }
    }
    distil_warp_sync(); /* the next round overwrites the buffer */
    return acc;
}
#endif

/* Whether jsd_span sorts by regime: a mode of DE_SPLITS, whole sorts per step, 32-lane warps. */
template <int VW, int MODE> __host__ __device__ constexpr bool jsd_splits() {
#ifdef DISTIL_GPU_HAVE_BALLOT32
    return DE_SPLITS(MODE) && VW > 1 && (JSD_UNROLL * VW) % JSD_SPLIT_E == 0;
#else
    return false;
#endif
}

/* grad_scale / n, or 0 when n == 0 (no valid row: the gradient is all zero). */
__device__ __forceinline__ float jsd_grad_factor(const jsd_rows_params &p) {
    const float n = p.n_valid ? *p.n_valid : 1.0f;
    return n > 0.0f ? p.grad_scale / n : 0.0f;
}

/* Zero gradient over elements [e0, e1) of a row (an ignored row). */
template <int DT>
__device__ inline void jsd_zero_span(const jsd_rows_params &p, int64_t row, int64_t e0,
                                     int64_t e1) {
    void *g = static_cast<typename dt_traits<DT>::T *>(p.grad) + row * p.g_stride;
    for (int64_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) {
        store1<DT>(g, i, 0.0f);
    }
}

/*
 * This thread's part of the loss (and gradient) over vectors [v_begin, v_end) of a row, VW
 * elements per vector (16 bytes when vectorised, else 1), plus the scalar tail of the row past
 * the last whole vector when `tail`. Summed in double: a KL's row sum cancels, and fp32 partial
 * sums would add their rounding to it.
 */
template <int DT, bool GRAD, int VW, int MODE>
__device__ inline double jsd_span(const jsd_rows_params &p, int64_t row, int64_t v_begin,
                                  int64_t v_end, bool tail, float gf, jsd_split_buf *split) {
    const void *x = static_cast<const typename dt_traits<DT>::T *>(p.x) + row * p.x_stride;
    const void *y = static_cast<const typename dt_traits<DT>::T *>(p.y) + row * p.y_stride;
    void *g = GRAD ? static_cast<typename dt_traits<DT>::T *>(p.grad) + row * p.g_stride : nullptr;
    const int64_t n_vec = v_end;
    const int64_t step = static_cast<int64_t>(blockDim.x) * JSD_UNROLL;
    double acc = 0.0;
    for (int64_t v0 = v_begin + threadIdx.x; v0 < n_vec; v0 += step) {
        float xv[JSD_UNROLL][VW];
        float yv[JSD_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < JSD_UNROLL; u++) {
            const int64_t v = v0 + static_cast<int64_t>(u) * blockDim.x;
            if (v < n_vec) {
                vload<DT, VW, true>(x, v * VW, xv[u]);
                vload<DT, VW, true>(y, v * VW, yv[u]);
            }
        }
#ifdef DISTIL_GPU_HAVE_BALLOT32
        if constexpr (jsd_splits<VW, MODE>()) {
            const int64_t lane = threadIdx.x % DISTIL_GPU_WARP;
            const int64_t warp_last = v0 - lane + (DISTIL_GPU_WARP - 1) +
                                      static_cast<int64_t>(JSD_UNROLL - 1) * blockDim.x;
            if (warp_last < n_vec) { /* uniform over the warp */
                float gv[JSD_UNROLL][VW];
#pragma unroll
                for (int r = 0; r < JSD_UNROLL * VW; r += JSD_SPLIT_E) {
                    acc += jsd_split_round<MODE, GRAD>(p.coef, &xv[0][0] + r, &yv[0][0] + r,
                                                       &gv[0][0] + r, gf, *split);
                }
                if (GRAD) {
#pragma unroll
                    for (int u = 0; u < JSD_UNROLL; u++) {
                        vstore<DT, VW>(g, (v0 + static_cast<int64_t>(u) * blockDim.x) * VW, gv[u]);
                    }
                }
                continue;
            }
        }
#endif
#pragma unroll
        for (int u = 0; u < JSD_UNROLL; u++) {
            const int64_t v = v0 + static_cast<int64_t>(u) * blockDim.x;
            if (v < n_vec) {
                float gv[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float d, q;
                    acc += jsd_elem_q<MODE>(p.coef, xv[u][k], yv[u][k], &d, &q);
                    gv[k] = d * gf;
                }
                if (GRAD) {
                    vstore<DT, VW>(g, v * VW, gv);
                }
            }
        }
    }
    const int64_t t0 = tail ? p.vocab / VW * VW : p.vocab;
    for (int64_t i = t0 + threadIdx.x; i < p.vocab; i += blockDim.x) {
        float d, q;
        acc += jsd_elem_q<MODE>(p.coef, load1<DT>(x, i), load1<DT>(y, i), &d, &q);
        if (GRAD) {
            store1<DT>(g, i, d * gf);
        }
    }
    return acc;
}

/* 16-byte vectors need every row start aligned: aligned bases and strides of whole vectors. */
static inline bool jsd_can_vectorise(const jsd_rows_params &p, size_t es) {
    const int64_t w = static_cast<int64_t>(16 / es);
    bool ok =
        gpu_aligned(p.x, 16) && gpu_aligned(p.y, 16) && p.x_stride % w == 0 && p.y_stride % w == 0;
    if (p.grad != nullptr) {
        ok = ok && gpu_aligned(p.grad, 16) && p.g_stride % w == 0;
    }
    return ok;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_JSD_ROWS_CUH */
