/*
 * div_rows.cuh - the divergence's element loop of div_rows.cu (one block per row), over any span of
 * a row's vectors, for one divergence mode MODE (distil_elem.h). x (rows, V) row stride x_stride, y
 * likewise (y_stride), dtype DT; grad (rows, V) row stride g_stride, optional, may be x itself:
 * each thread reads an element before it writes the same element.
 */
#ifndef DISTIL_GPU_DIV_ROWS_CUH
#define DISTIL_GPU_DIV_ROWS_CUH

#include "gpu_state.cuh"
#include "dtype.cuh"
#include "div_math.cuh"
#include "reduce.cuh"

namespace DISTIL_GPU_NS {

struct div_rows_params {
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
    div_coef coef;
};

/* Vectors each thread keeps in flight per step (x and y each). */
constexpr int DIV_UNROLL = 2;

/* The longest row div_span takes: its 32-bit offsets, with a step past the end. */
constexpr int64_t DIV_SPAN_MAX_VOCAB = 0x7fffffff - 8 * 1024;

/* grad_scale / n, or 0 when n == 0 (no valid row: the gradient is all zero). */
__device__ __forceinline__ float div_grad_factor(const div_rows_params &p) {
    const float n = p.n_valid ? *p.n_valid : 1.0f;
    return n > 0.0f ? p.grad_scale / n : 0.0f;
}

/* Zero gradient over elements [e0, e1) of a row (an ignored row). */
template <int DT>
__device__ inline void div_zero_span(const div_rows_params &p, int64_t row, int64_t e0,
                                     int64_t e1) {
    void *g = static_cast<typename dt_traits<DT>::T *>(p.grad) + row * p.g_stride;
    for (int64_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) {
        store1<DT>(g, i, 0.0f);
    }
}

/* This thread's pointers into one row of x, y and the gradient (dtype E), made once per row and
 * kept in registers (gpu_keep_in_register), and the element offset from them of its next group:
 * a 32-bit offset (a row holds < 2^31 elements). With 64-bit indices from the row's start the
 * compiler re-derived row * stride + v at every access: ~5 of the loop's ~96 instructions per
 * element (docs/GPU-NOTES.md "JSD row kernel"). */
template <typename E> struct div_cursor {
    const E *x, *y;
    E *g;
    int off;
};

/* The input map of the JSD itself: x and y are the log-probabilities as loaded. (The fused loss
 * alone maps logits to log-probabilities: fused_rows.cu's fused_in_logits.) */
struct div_in_logp {
    template <int N> __device__ __forceinline__ void operator()(float (&)[N], float (&)[N]) const {}
};

/* One group of this thread: the DIV_UNROLL vectors v0, v0 + blockDim.x, ... at c's offset, each
 * passed through the input map in, their terms into acc and, when GRAD, their gradients (times
 * gf) into the row. CHECKED: some of the vectors may lie at or past n_vec (a thread's last
 * group), so each is tested, and the terms take the special-value form (distil_elem.h's de_elem_sv:
 * right for any input; one group of ~31 per row at V 128256, and a second copy of the finite form
 * would double the kernels' compile time); otherwise no vector is tested, and the group takes the
 * finite form where its x - y, the same values as the terms' own, sum to a finite number
 * (div_with_sv_of). */
template <int DT, bool GRAD, int VW, int MODE, bool CHECKED, typename In>
__device__ __forceinline__ void div_step(const div_rows_params &p,
                                         const div_cursor<typename dt_traits<DT>::T> &c, int v0,
                                         int n_vec, float gf, double &acc, In &in) {
    const int nt = static_cast<int>(blockDim.x);
    float xv[DIV_UNROLL][VW];
    float yv[DIV_UNROLL][VW];
#pragma unroll
    for (int u = 0; u < DIV_UNROLL; u++) {
        if (!CHECKED || v0 + u * nt < n_vec) {
            vload<DT, VW, true>(c.x, c.off + u * nt * VW, xv[u]);
            vload<DT, VW, true>(c.y, c.off + u * nt * VW, yv[u]);
        }
    }
#pragma unroll
    for (int u = 0; u < DIV_UNROLL; u++) {
        if (!CHECKED || v0 + u * nt < n_vec) {
            in(xv[u], yv[u]);
        }
    }
    float fs = 0.0f; /* sum of the group's x - y */
    if (!CHECKED) {
#pragma unroll
        for (int u = 0; u < DIV_UNROLL; u++) {
#pragma unroll
            for (int k = 0; k < VW; k++) {
                fs += xv[u][k] - yv[u][k];
            }
        }
    } else {
        fs = INFINITY; /* a thread's last group: the special-value form, one copy of the code */
    }
    div_with_sv_of(fs, [&](auto sv) {
#pragma unroll
        for (int u = 0; u < DIV_UNROLL; u++) {
            if (!CHECKED || v0 + u * nt < n_vec) {
                float gv[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float d, q;
                    acc +=
                        div_elem_q<MODE, decltype(sv)::value>(p.coef, xv[u][k], yv[u][k], &d, &q);
                    gv[k] = d * gf;
                }
                if (GRAD) {
                    vstore<DT, VW>(c.g, c.off + u * nt * VW, gv);
                }
            }
        }
    });
}

/*
 * This thread's part of the loss (and gradient) over vectors [v_begin, v_end) of a row, VW
 * elements per vector (16 bytes when vectorised, else 1), plus the scalar tail of the row past
 * the last whole vector when `tail`. Summed in double: a KL's row sum cancels, and fp32 partial
 * sums would add their rounding to it. A group of loaded vectors takes the finite form of the
 * terms where its x - y sum to a finite number (div_with_sv_of: the kernel is issue-bound on an
 * H200, docs/GPU-NOTES.md "JSD row kernel"). The groups that lie wholly in the span run without
 * bounds tests; a thread's last group, if partial, with them. Every element passes through the
 * input map in (div_in_logp for the JSD itself) before its terms.
 */
template <int DT, bool GRAD, int VW, int MODE, typename In>
__device__ inline double div_span(const div_rows_params &p, int64_t row, int64_t v_begin,
                                  int64_t v_end, bool tail, float gf, In &in) {
    typedef typename dt_traits<DT>::T E;
    const int first = static_cast<int>(v_begin) + static_cast<int>(threadIdx.x);
    const E *x = static_cast<const E *>(p.x) + row * p.x_stride;
    const E *y = static_cast<const E *>(p.y) + row * p.y_stride;
    E *g = GRAD ? static_cast<E *>(p.grad) + row * p.g_stride : nullptr;
    div_cursor<E> c;
    c.x = x + static_cast<int64_t>(first) * VW;
    c.y = y + static_cast<int64_t>(first) * VW;
    c.g = GRAD ? g + static_cast<int64_t>(first) * VW : nullptr;
    c.off = 0;
    gpu_keep_in_register(c.x);
    gpu_keep_in_register(c.y);
    gpu_keep_in_register(c.g);
    const int n_vec = static_cast<int>(v_end);
    const int step = static_cast<int>(blockDim.x) * DIV_UNROLL;
    const int last = (DIV_UNROLL - 1) * static_cast<int>(blockDim.x); /* v0 to its last vector */
    double acc = 0.0;
    int v0 = first;
    for (; v0 + last < n_vec; v0 += step, c.off += step * VW) {
        div_step<DT, GRAD, VW, MODE, false>(p, c, v0, n_vec, gf, acc, in);
    }
    if (v0 < n_vec) {
        div_step<DT, GRAD, VW, MODE, true>(p, c, v0, n_vec, gf, acc, in);
    }
    const int64_t t0 = tail ? p.vocab / VW * VW : p.vocab;
    for (int64_t i = t0 + threadIdx.x; i < p.vocab; i += blockDim.x) {
        float d, q, xi[1] = {load1<DT>(x, i)}, yi[1] = {load1<DT>(y, i)};
        in(xi, yi);
        acc += div_elem_q<MODE>(p.coef, xi[0], yi[0], &d, &q);
        if (GRAD) {
            store1<DT>(g, i, d * gf);
        }
    }
    return acc;
}

/* 16-byte vectors need every row start aligned: aligned bases and strides of whole vectors. */
static inline bool div_can_vectorise(const div_rows_params &p, size_t es) {
    const int64_t w = static_cast<int64_t>(16 / es);
    bool ok =
        gpu_aligned(p.x, 16) && gpu_aligned(p.y, 16) && p.x_stride % w == 0 && p.y_stride % w == 0;
    if (p.grad != nullptr) {
        ok = ok && gpu_aligned(p.grad, 16) && p.g_stride % w == 0;
    }
    return ok;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_DIV_ROWS_CUH */
