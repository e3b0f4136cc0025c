/*
 * jsd_rows.cu - SPEC section 1 on a block of rows in one pass: each element of x and y is read
 * once (16-byte loads, several in flight per thread) and, when asked, its gradient written once.
 * One block per row; the row loss is a deterministic block sum.
 *   x (rows, V) row stride xs, y (rows, V) row stride ys, dtype DT; grad (rows, V) stride gs, may
 *   be x itself (each thread reads an element before it writes the same element).
 */
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
    int64_t xs, ys, gs;
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

/* Zero gradient row of an ignored row. */
template <int DT> __device__ void jsd_zero_row(const jsd_rows_params &p, int64_t row) {
    void *g = static_cast<typename dt_traits<DT>::T *>(p.grad) + row * p.gs;
    for (int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x) {
        store1<DT>(g, i, 0.0f);
    }
}

/*
 * Loss (and gradient) of one row. VW elements per vector (16 bytes when VEC, else 1); the body
 * covers the first (V / VW) * VW elements, a scalar tail the rest.
 */
template <int DT, bool GRAD, int VW>
__device__ float jsd_row(const jsd_rows_params &p, int64_t row, float gf) {
    const void *x = static_cast<const typename dt_traits<DT>::T *>(p.x) + row * p.xs;
    const void *y = static_cast<const typename dt_traits<DT>::T *>(p.y) + row * p.ys;
    void *g = GRAD ? static_cast<typename dt_traits<DT>::T *>(p.grad) + row * p.gs : nullptr;
    const int64_t n_vec = p.vocab / VW;
    const int64_t step = static_cast<int64_t>(blockDim.x) * JSD_UNROLL;
    float acc = 0.0f;
    for (int64_t v0 = threadIdx.x; v0 < n_vec; v0 += step) {
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
#pragma unroll
        for (int u = 0; u < JSD_UNROLL; u++) {
            const int64_t v = v0 + static_cast<int64_t>(u) * blockDim.x;
            if (v < n_vec) {
                float gv[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float d;
                    acc += jsd_elem<false>(p.coef, xv[u][k], yv[u][k], &d, nullptr);
                    gv[k] = d * gf;
                }
                if (GRAD) {
                    vstore<DT, VW>(g, v * VW, gv);
                }
            }
        }
    }
    for (int64_t i = n_vec * VW + threadIdx.x; i < p.vocab; i += blockDim.x) {
        float d;
        acc += jsd_elem<false>(p.coef, load1<DT>(x, i), load1<DT>(y, i), &d, nullptr);
        if (GRAD) {
            store1<DT>(g, i, d * gf);
        }
    }
    return acc;
}

template <int DT, bool GRAD, int VW>
__global__ void __launch_bounds__(1024) distil_jsd_rows_kernel(jsd_rows_params p) {
    __shared__ float scratch[DISTIL_GPU_MAX_WARPS];
    const float gf = GRAD ? jsd_grad_factor(p) : 0.0f;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        if (p.labels != nullptr && p.labels[row] == p.ignore_index) {
            if (GRAD) {
                jsd_zero_row<DT>(p, row);
            }
            if (threadIdx.x == 0) {
                p.row_loss[row] = 0.0f;
            }
            continue;
        }
        const float loss = block_sum(jsd_row<DT, GRAD, VW>(p, row, gf), scratch);
        if (threadIdx.x == 0) {
            p.row_loss[row] = loss;
        }
    }
}

/* Threads per row: enough vectors per thread to keep loads in flight, at most max_threads (512,
 * or 1024 with DISTIL_CUDA_JSD_THREADS=1024: half the time per row, so a shorter tail when the
 * last wave of rows is partial). */
static unsigned jsd_threads(int64_t n_vec, unsigned max_threads) {
    unsigned t = 64;
    while (t < max_threads && static_cast<int64_t>(t) * JSD_UNROLL * 4 < n_vec) {
        t *= 2;
    }
    return t;
}

template <int DT, bool GRAD>
static void jsd_launch(const jsd_rows_params &p, bool vec, unsigned max_t, cudaStream_t s) {
    constexpr int VW = vec16<DT>::N;
    const unsigned grid = gpu_grid_for(p.rows, 1, 0x7fffffff);
    if (vec) {
        distil_jsd_rows_kernel<DT, GRAD, VW><<<grid, jsd_threads(p.vocab / VW, max_t), 0, s>>>(p);
    } else {
        distil_jsd_rows_kernel<DT, GRAD, 1><<<grid, jsd_threads(p.vocab, max_t), 0, s>>>(p);
    }
}

template <int DT>
static void jsd_launch_dt(const jsd_rows_params &p, bool vec, unsigned max_t, cudaStream_t s) {
    if (p.grad != nullptr) {
        jsd_launch<DT, true>(p, vec, max_t, s);
    } else {
        jsd_launch<DT, false>(p, vec, max_t, s);
    }
}

/* 16-byte vectors need every row start aligned: aligned bases and strides of whole vectors. */
static bool jsd_can_vectorise(const jsd_rows_params &p, size_t es) {
    const int64_t w = static_cast<int64_t>(16 / es);
    bool ok = gpu_aligned(p.x, 16) && gpu_aligned(p.y, 16) && p.xs % w == 0 && p.ys % w == 0;
    if (p.grad != nullptr) {
        ok = ok && gpu_aligned(p.grad, 16) && p.gs % w == 0;
    }
    return ok;
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(jsd_rows)(void *vb, const distil_jsd_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    jsd_rows_params p;
    p.x = distil_dptr_addr(a->x);
    p.y = distil_dptr_addr(a->y);
    p.grad = distil_dptr_addr(a->grad);
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.row_loss = gpu_ptr<float>(a->row_loss);
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.xs = a->x_stride;
    p.ys = a->y_stride;
    p.gs = a->grad_stride;
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.ignore_index = a->ignore_index;
    p.grad_scale = a->grad_scale;
    p.coef = jsd_coef_make(a->beta);
    gpu_device_guard guard(b);
    const bool vec = jsd_can_vectorise(p, distil_dtype_size(a->dtype));
    switch (a->dtype) {
    case DISTIL_F32:
        jsd_launch_dt<DISTIL_F32>(p, vec, b->jsd_threads, b->stream);
        break;
    case DISTIL_BF16:
        jsd_launch_dt<DISTIL_BF16>(p, vec, b->jsd_threads, b->stream);
        break;
    default:
        jsd_launch_dt<DISTIL_F16>(p, vec, b->jsd_threads, b->stream);
        break;
    }
    return gpu_check_launch(b, "jsd_rows");
}
