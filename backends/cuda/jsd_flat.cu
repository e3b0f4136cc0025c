/*
 * jsd_flat.cu - the whole of distil_jsd (optional op `jsd`). For batchmean and sum the loss is a
 * sum over every element of the valid rows, so rows need not stay whole: a persistent grid (two
 * blocks per SM) walks units of (row, segment of FLAT_SEG_VECS vectors) in a fixed round-robin,
 * which keeps every SM busy to the end (one block per row left a partial last wave of 65 us
 * rows: ~10% of the T = 1024 time). Each block writes one partial sum; the last block to finish
 * (an integer ticket) adds the partials in index order and divides by N. One launch for the loss
 * alone, two with the gradient (N first: the gradient is scaled by 1 / N). Deterministic: the
 * grid size is fixed per device and every sum has a fixed order.
 * Reduction none writes per-row losses: that is jsd_rows itself.
 */
#include "jsd_rows.cuh"

namespace DISTIL_GPU_NS {

constexpr int FLAT_THREADS = 512;
constexpr int64_t FLAT_SEG_VECS = 4096;

struct jsd_flat_params {
    jsd_rows_params r; /* row_loss unused; n_valid: N when the gradient needs it, else NULL */
    int64_t segs;      /* segments per row */
    int64_t units;     /* rows * segs */
    float *partials;   /* (gridDim.x) */
    unsigned *ticket;
    float *loss;
    bool mean; /* batchmean: divide by N */
};

/* N: rows whose label is not ignore_index (all rows without labels). One block, integer sum. */
__device__ inline float flat_count(const jsd_rows_params &r, long long *scratch) {
    if (r.labels == nullptr) {
        return static_cast<float>(r.rows);
    }
    long long c = 0;
    for (int64_t i = threadIdx.x; i < r.rows; i += blockDim.x) {
        c += r.labels[i] != r.ignore_index ? 1 : 0;
    }
    return static_cast<float>(block_sum(c, scratch));
}

/* The last block: the partials in index order, then / N for batchmean; resets the ticket. */
__device__ inline void flat_finish(const jsd_flat_params &p, double *dscratch,
                                   long long *cscratch) {
    const volatile float *part = p.partials;
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
        s += part[i];
    }
    s = block_sum(s, dscratch);
    float n = 1.0f;
    if (p.mean) {
        n = p.r.n_valid != nullptr ? *p.r.n_valid : flat_count(p.r, cscratch);
    }
    if (threadIdx.x == 0) {
        *p.loss = p.mean ? (n > 0.0f ? static_cast<float>(s / n) : 0.0f) : static_cast<float>(s);
        *p.ticket = 0u;
    }
}

template <int DT, bool GRAD, int VW>
__global__ void __launch_bounds__(FLAT_THREADS) distil_jsd_flat_kernel(jsd_flat_params p) {
    __shared__ double dscratch[DISTIL_GPU_MAX_WARPS];
    __shared__ long long cscratch[DISTIL_GPU_MAX_WARPS];
    __shared__ bool is_last;
    const float gf = GRAD ? jsd_grad_factor(p.r) : 0.0f;
    const int64_t n_vec = p.r.vocab / VW;
    double acc = 0.0; /* a block adds up to millions of terms: keep the running sum in double */
    for (int64_t u = blockIdx.x; u < p.units; u += gridDim.x) {
        const int64_t row = u / p.segs;
        const int64_t seg = u % p.segs;
        const int64_t v0 = seg * FLAT_SEG_VECS;
        const int64_t v1 = v0 + FLAT_SEG_VECS < n_vec ? v0 + FLAT_SEG_VECS : n_vec;
        const bool last_seg = seg == p.segs - 1;
        if (p.r.labels != nullptr && p.r.labels[row] == p.r.ignore_index) {
            if (GRAD) {
                jsd_zero_span<DT>(p.r, row, v0 * VW, last_seg ? p.r.vocab : v1 * VW);
            }
            continue;
        }
        acc += jsd_span<DT, GRAD, VW>(p.r, row, v0, v1, last_seg, gf);
    }
    const double total = block_sum(acc, dscratch);
    if (threadIdx.x == 0) {
        p.partials[blockIdx.x] = static_cast<float>(total);
        __threadfence(); /* the partial is visible before the ticket says so */
        is_last = atomicAdd(p.ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last) {
        __threadfence();
        flat_finish(p, dscratch, cscratch);
    }
}

template <int DT, bool GRAD>
static void flat_launch(const jsd_flat_params &p, unsigned grid, bool vec, cudaStream_t s) {
    if (vec) {
        distil_jsd_flat_kernel<DT, GRAD, vec16<DT>::N><<<grid, FLAT_THREADS, 0, s>>>(p);
    } else {
        distil_jsd_flat_kernel<DT, GRAD, 1><<<grid, FLAT_THREADS, 0, s>>>(p);
    }
}

template <int DT>
static void flat_launch_dt(const jsd_flat_params &p, unsigned grid, bool vec, cudaStream_t s) {
    if (p.r.grad != nullptr) {
        flat_launch<DT, true>(p, grid, vec, s);
    } else {
        flat_launch<DT, false>(p, grid, vec, s);
    }
}

static jsd_rows_params flat_rows_params(const distil_jsd_args *a) {
    jsd_rows_params r;
    r.x = distil_dptr_addr(a->x);
    r.y = distil_dptr_addr(a->y);
    r.grad = distil_dptr_addr(a->grad);
    r.labels = gpu_ptr<const int64_t>(a->labels);
    r.row_loss = nullptr;
    r.n_valid = nullptr;
    r.xs = a->x_stride;
    r.ys = a->y_stride;
    r.gs = a->grad_stride;
    r.rows = a->rows;
    r.vocab = a->vocab;
    r.ignore_index = a->ignore_index;
    r.grad_scale = a->grad_scale;
    r.coef = jsd_coef_make(a->beta);
    return r;
}

/* Reduction none: per-row losses straight into the output, the gradient unscaled by N. */
static distil_status flat_none(void *vb, const distil_jsd_args *a) {
    distil_jsd_rows_args r = {};
    r.x = a->x;
    r.y = a->y;
    r.x_stride = a->x_stride;
    r.y_stride = a->y_stride;
    r.rows = a->rows;
    r.vocab = a->vocab;
    r.dtype = a->dtype;
    r.beta = a->beta;
    r.labels = a->labels;
    r.ignore_index = a->ignore_index;
    r.row_loss = a->loss;
    r.grad = a->grad;
    r.grad_stride = a->grad_stride;
    r.grad_scale = a->grad_scale;
    return DISTIL_GPU_FN(jsd_rows)(vb, &r);
}

/* N into the backend's own word when the gradient needs it before the loss is known. */
static distil_status flat_count_first(void *vb, const distil_jsd_args *a, float *n_out) {
    distil_count_args c = {};
    c.labels = a->labels;
    c.rows = a->rows;
    c.ignore_index = a->ignore_index;
    c.n_out = distil_dptr_make(n_out, 0);
    return DISTIL_GPU_FN(count_valid)(vb, &c);
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(jsd)(void *vb, const distil_jsd_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->reduction == DISTIL_REDUCTION_NONE) {
        return flat_none(vb, a);
    }
    jsd_flat_params p;
    p.r = flat_rows_params(a);
    p.mean = a->reduction == DISTIL_REDUCTION_BATCHMEAN;
    const bool vec = jsd_can_vectorise(p.r, distil_dtype_size(a->dtype));
    const int64_t vw = vec ? static_cast<int64_t>(16 / distil_dtype_size(a->dtype)) : 1;
    const int64_t vecs = a->vocab / vw;
    p.segs = vecs > FLAT_SEG_VECS ? (vecs + FLAT_SEG_VECS - 1) / FLAT_SEG_VECS : 1;
    p.units = a->rows * p.segs;
    p.partials = b->flat_partials;
    p.ticket = b->flat_ticket;
    p.loss = gpu_ptr<float>(a->loss);
    if (p.mean && p.r.grad != nullptr) {
        DISTIL_TRY(flat_count_first(vb, a, b->flat_n));
        p.r.n_valid = b->flat_n;
    }
    int64_t grid = static_cast<int64_t>(b->sm_count) * 2;
    grid = grid < p.units ? grid : p.units;
    grid = grid < GPU_FLAT_MAX_BLOCKS ? grid : GPU_FLAT_MAX_BLOCKS;
    gpu_device_guard guard(b);
    switch (a->dtype) {
    case DISTIL_F32:
        flat_launch_dt<DISTIL_F32>(p, static_cast<unsigned>(grid), vec, b->stream);
        break;
    case DISTIL_BF16:
        flat_launch_dt<DISTIL_BF16>(p, static_cast<unsigned>(grid), vec, b->stream);
        break;
    default:
        flat_launch_dt<DISTIL_F16>(p, static_cast<unsigned>(grid), vec, b->stream);
        break;
    }
    return gpu_check_launch(b, "jsd");
}
