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

/* The terms of the JSD_UNROLL vectors loaded at v0, v0 + blockDim.x, ... (those below n_vec)
 * into acc and, when GRAD, their gradients (times gf) into g. SV: the special-value form
 * (distil_elem.h's de_elem_sv), or the finite one. */
template <int DT, bool GRAD, int VW, int MODE, bool SV>
__device__ __forceinline__ void jsd_group(const jsd_rows_params &p,
                                          const float (&xv)[JSD_UNROLL][VW],
                                          const float (&yv)[JSD_UNROLL][VW], int64_t v0,
                                          int64_t n_vec, float gf, void *g, double &acc) {
#pragma unroll
    for (int u = 0; u < JSD_UNROLL; u++) {
        const int64_t v = v0 + static_cast<int64_t>(u) * blockDim.x;
        if (v < n_vec) {
            float gv[VW];
#pragma unroll
            for (int k = 0; k < VW; k++) {
                float d, q;
                acc += jsd_elem_q<MODE, SV>(p.coef, xv[u][k], yv[u][k], &d, &q);
                gv[k] = d * gf;
            }
            if (GRAD) {
                vstore<DT, VW>(g, v * VW, gv);
            }
        }
    }
}

/*
 * This thread's part of the loss (and gradient) over vectors [v_begin, v_end) of a row, VW
 * elements per vector (16 bytes when vectorised, else 1), plus the scalar tail of the row past
 * the last whole vector when `tail`. Summed in double: a KL's row sum cancels, and fp32 partial
 * sums would add their rounding to it. A group of loaded vectors takes the finite form of the
 * terms where its x - y sum to a finite number (jsd_with_sv_of: the kernel is issue-bound on an
 * H200, docs/CUDA-NOTES.md).
 */
template <int DT, bool GRAD, int VW, int MODE>
__device__ inline double jsd_span(const jsd_rows_params &p, int64_t row, int64_t v_begin,
                                  int64_t v_end, bool tail, float gf) {
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
        float fs = 0.0f; /* sum of the group's x - y */
#pragma unroll
        for (int u = 0; u < JSD_UNROLL; u++) {
            if (v0 + static_cast<int64_t>(u) * blockDim.x < n_vec) {
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    fs += xv[u][k] - yv[u][k];
                }
            }
        }
        jsd_with_sv_of(fs, [&](auto sv) {
            jsd_group<DT, GRAD, VW, MODE, decltype(sv)::value>(p, xv, yv, v0, n_vec, gf, g, acc);
        });
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
