/*
 * div_rows.cu - docs/SPEC.md §1 on a block of rows in one pass: each element of x and y is read
 * once (16-byte loads, several in flight per thread) and, when asked, its gradient written once.
 * One block per row; the row loss is a deterministic block sum. (A whole-op variant on a
 * persistent grid of row segments, one launch with the reduce in the last block, measured no
 * better on an H200 and 5% slower at T = 8192: see docs/GPU-NOTES.md, "JSD row kernel".)
 */
#include "div_rows.cuh"

namespace DISTIL_GPU_NS {

/* Two blocks of 512 per SM for fp32 (64 registers: ptxas takes ~90 unbounded, one block per SM);
 * the 16-bit loops hold 16 elements per group and would spill at 64, so one block. */
template <int DT> constexpr int div_min_blocks() {
    return DT == DISTIL_F32 ? 2 : 1;
}

template <int DT, bool GRAD, int VW>
__global__ void __launch_bounds__(512, div_min_blocks<DT>())
    distil_div_rows_kernel(div_rows_params p) {
    __shared__ double scratch[DISTIL_GPU_MAX_WARPS];
    const float gf = GRAD ? div_grad_factor(p) : 0.0f;
    div_with_mode(p.coef, [&](auto mode) {
        for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
            if (p.labels != nullptr && p.labels[row] == p.ignore_index) {
                if (GRAD) {
                    div_zero_span<DT>(p, row, 0, p.vocab);
                }
                if (threadIdx.x == 0) {
                    p.row_loss[row] = 0.0f;
                }
                continue;
            }
            div_in_logp in;
            const double acc = div_span<DT, GRAD, VW, decltype(mode)::value>(
                p, row, 0, p.vocab / VW, true, gf, in);
            const float loss = static_cast<float>(block_sum(acc, scratch));
            if (threadIdx.x == 0) {
                p.row_loss[row] = loss;
            }
        }
    });
}

/* Threads per row: enough vectors per thread to keep loads in flight, at most 512 (1024 measured
 * slower on an H200: 0.326 against 0.312 ms for T = 1024, V = 128256). */
static unsigned div_threads(int64_t n_vec) {
    unsigned t = 64;
    while (t < 512 && static_cast<int64_t>(t) * DIV_UNROLL * 4 < n_vec) {
        t *= 2;
    }
    return t;
}

template <int DT, bool GRAD>
static void div_launch(const div_rows_params &p, bool vec, cudaStream_t s) {
    constexpr int VW = vec16<DT>::N;
    const unsigned grid = gpu_grid_for(p.rows, 1, 0x7fffffff);
    if (vec) {
        distil_div_rows_kernel<DT, GRAD, VW><<<grid, div_threads(p.vocab / VW), 0, s>>>(p);
    } else {
        distil_div_rows_kernel<DT, GRAD, 1><<<grid, div_threads(p.vocab), 0, s>>>(p);
    }
}

template <int DT> static void div_launch_dt(const div_rows_params &p, bool vec, cudaStream_t s) {
    if (p.grad != nullptr) {
        div_launch<DT, true>(p, vec, s);
    } else {
        div_launch<DT, false>(p, vec, s);
    }
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(div_rows)(void *vb, const distil_div_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->vocab > DIV_SPAN_MAX_VOCAB) { /* div_span's 32-bit offsets, a step past the end */
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "div_rows: vocab %lld (at most 2^31 - 8192 elements per row)",
                                (long long)a->vocab);
    }
    div_rows_params p;
    p.x = distil_dptr_addr(a->x);
    p.y = distil_dptr_addr(a->y);
    p.grad = distil_dptr_addr(a->grad);
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.row_loss = gpu_ptr<float>(a->row_loss);
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.x_stride = a->x_stride;
    p.y_stride = a->y_stride;
    p.g_stride = a->grad_stride;
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.ignore_index = a->ignore_index;
    p.grad_scale = a->grad_scale;
    p.coef = div_coef_make(a->divergence, a->beta, a->alpha);
    gpu_device_guard guard(b);
    const bool vec = div_can_vectorise(p, distil_dtype_size(a->dtype));
    dt_dispatch(a->dtype,
                [&](auto d) { div_launch_dt<decltype(d)::value>(p, vec, b->lane.stream); });
    return gpu_check_launch(b, "div_rows");
}
