/*
 * small_ops.cu - the small kernels of the backend: count_valid (N on the device and the label
 * check), reduce (the
 * deterministic scalar loss), cast and fill; and the test hook's spin on the second lane.
 * count_valid and reduce run as one block with a fixed summation order (integer counts, double
 * sums), so their results are bitwise reproducible.
 */
#include "gpu_state.cuh"
#include "dtype.cuh"
#include "reduce.cuh"

namespace DISTIL_GPU_NS {

constexpr int SMALL_THREADS = 512;

/* n_out = max(count, min_one), count = rows with label != ignore (and in [0, vocab) if vocab > 0),
 * or rows when labels is NULL. One block. Also the label check (vocab > 0): the first row whose
 * label is neither ignore nor in [0, vocab) goes to *err unless a row is recorded there already. */
__global__ void __launch_bounds__(SMALL_THREADS)
    distil_count_valid_kernel(const int64_t *labels, int64_t rows, int64_t ignore, int64_t vocab,
                              bool min_one, float *n_out, gpu_label_error *err) {
    __shared__ long long scratch[DISTIL_GPU_MAX_WARPS];
    const long long none = 0x7fffffffffffffffLL;
    long long c = 0;
    long long bad = none; /* this thread's first invalid row (its rows ascend) */
    if (labels != nullptr) {
        for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
            const int64_t l = labels[i];
            const bool in_range = vocab <= 0 || (l >= 0 && l < vocab);
            c += l != ignore && in_range ? 1 : 0;
            bad = l != ignore && !in_range && bad == none ? i : bad;
        }
    } else if (threadIdx.x == 0) {
        c = rows;
    }
    c = block_sum(c, scratch);
    bad = block_min(bad, scratch);
    if (threadIdx.x == 0) {
        *n_out = static_cast<float>(c < 1 && min_one ? 1 : c);
        if (bad != none && err->row < 0) {
            err->row = bad;
            err->label = labels[bad];
            err->vocab = vocab;
        }
    }
}

/* out[0] = wa sum(a) / n + wb sum(b) / n (and the parts). One block, double accumulation. */
__global__ void __launch_bounds__(SMALL_THREADS)
    distil_reduce_kernel(const float *a, const float *b, int64_t count, float wa, float wb,
                         const float *n_valid, bool parts, float *out) {
    __shared__ double scratch[DISTIL_GPU_MAX_WARPS];
    double sa = 0.0;
    double sb = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        sa += a[i];
        if (b != nullptr) {
            sb += b[i];
        }
    }
    sa = block_sum(sa, scratch);
    sb = block_sum(sb, scratch);
    if (threadIdx.x == 0) {
        const double n = n_valid != nullptr ? static_cast<double>(*n_valid) : 1.0;
        /* n <= 0 or NaN (a normaliser given on the device, docs/SPEC.md §6): as none counted */
        const double pa = n > 0.0 ? sa / n : 0.0;
        const double pb = n > 0.0 ? sb / n : 0.0;
        out[0] = static_cast<float>(wa * pa + (b != nullptr ? wb * pb : 0.0));
        if (parts) {
            out[1] = static_cast<float>(pa);
            out[2] = static_cast<float>(pb);
        }
    }
}

/* dst = src element by element; N-element vectors over the body when VEC, scalar tail. */
template <int SDT, int DDT, int N>
__global__ void distil_cast_kernel(const void *src, void *dst, int64_t count) {
    const int64_t n_vec = count / N;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < n_vec;
         v += stride) {
        float t[N];
        vload<SDT, N, true>(src, v * N, t);
        vstore<DDT, N>(dst, v * N, t);
    }
    for (int64_t i = n_vec * N + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         i < count; i += stride) {
        store1<DDT>(dst, i, load1<SDT>(src, i));
    }
}

template <int DT> __global__ void distil_fill_kernel(void *dst, int64_t count, float value) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += stride) {
        store1<DT>(dst, i, value);
    }
}

/* x *= *scale, N-element vectors over the body when N > 1, scalar tail. Every thread reads the
 * scalar first: at exactly 1 (autograd's usual upstream gradient) nothing is read or written. */
template <int DT, int N>
__global__ void distil_scale_kernel(void *x, int64_t count, const float *scale) {
    const float s = *scale;
    if (s == 1.0f) {
        return;
    }
    const int64_t n_vec = count / N;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < n_vec;
         v += stride) {
        float t[N];
        vload<DT, N, true>(x, v * N, t);
#pragma unroll
        for (int j = 0; j < N; j++) {
            t[j] *= s;
        }
        vstore<DT, N>(x, v * N, t);
    }
    for (int64_t i = n_vec * N + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         i < count; i += stride) {
        store1<DT>(x, i, load1<DT>(x, i) * s);
    }
}

/* One thread that spins for `cycles` clock ticks (gpu_side_delay). */
__global__ void distil_spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

distil_status gpu_side_delay(gpu_state *b) {
    if (b->side_delay <= 0) {
        return DISTIL_OK;
    }
    distil_spin_kernel<<<1, 1, 0, b->side.stream>>>(b->side_delay);
    return gpu_check_launch(b, "side lane delay");
}

template <int SDT, int DDT>
static void cast_launch(const void *src, void *dst, int64_t count, cudaStream_t s) {
    constexpr int N = 4;
    const unsigned grid = gpu_grid_for(count, 256 * N, 65536);
    if (gpu_aligned(src, N * sizeof(typename dt_traits<SDT>::T)) &&
        gpu_aligned(dst, N * sizeof(typename dt_traits<DDT>::T))) {
        distil_cast_kernel<SDT, DDT, N><<<grid, 256, 0, s>>>(src, dst, count);
    } else {
        distil_cast_kernel<SDT, DDT, 1><<<grid, 256, 0, s>>>(src, dst, count);
    }
}

/* At most SCALE_BLOCKS blocks, each striding over the tensor: at s == 1 (the usual case) the whole
 * launch is then one or two waves of blocks that read the scalar and return (the former cap of
 * 65536 blocks made about sixty such waves after every distil.torch backward at T = 8192,
 * V = 128256); at s != 1 that many blocks of 256 threads still keep the copy rate. */
constexpr int64_t SCALE_BLOCKS = 2048;

template <int DT>
static void scale_launch(void *x, int64_t count, const float *scale, cudaStream_t s) {
    constexpr int N = 4;
    const unsigned grid = gpu_grid_for(count, 256 * N, SCALE_BLOCKS);
    if (gpu_aligned(x, N * sizeof(typename dt_traits<DT>::T))) {
        distil_scale_kernel<DT, N><<<grid, 256, 0, s>>>(x, count, scale);
    } else {
        distil_scale_kernel<DT, 1><<<grid, 256, 0, s>>>(x, count, scale);
    }
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(count_valid)(void *vb, const distil_count_args *a) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    distil_count_valid_kernel<<<1, SMALL_THREADS, 0, b->lane.stream>>>(
        gpu_ptr<const int64_t>(a->labels), a->rows, a->ignore_index, a->vocab, a->min_one,
        gpu_ptr<float>(a->n_out), b->label_err);
    return gpu_check_launch(b, "count_valid");
}

extern "C" distil_status DISTIL_GPU_FN(reduce)(void *vb, const distil_reduce_args *a) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    distil_reduce_kernel<<<1, SMALL_THREADS, 0, b->lane.stream>>>(
        gpu_ptr<const float>(a->a), gpu_ptr<const float>(a->b), a->count, a->wa, a->wb,
        gpu_ptr<const float>(a->n_valid), a->parts, gpu_ptr<float>(a->out));
    return gpu_check_launch(b, "reduce");
}

extern "C" distil_status DISTIL_GPU_FN(cast)(void *vb, const distil_cast_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    const void *src = distil_dptr_addr(a->src);
    void *dst = distil_dptr_addr(a->dst);
    dt_dispatch(a->src_dtype, [&](auto s) {
        dt_dispatch(a->dst_dtype, [&](auto d) {
            cast_launch<decltype(s)::value, decltype(d)::value>(src, dst, a->count, b->lane.stream);
        });
    });
    return gpu_check_launch(b, "cast");
}

extern "C" distil_status DISTIL_GPU_FN(fill)(void *vb, const distil_fill_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    void *dst = distil_dptr_addr(a->dst);
    const unsigned grid = gpu_grid_for(a->count, 256, 65536);
    dt_dispatch(a->dtype, [&](auto d) {
        distil_fill_kernel<decltype(d)::value>
            <<<grid, 256, 0, b->lane.stream>>>(dst, a->count, a->value);
    });
    return gpu_check_launch(b, "fill");
}

extern "C" distil_status DISTIL_GPU_FN(scale)(void *vb, const distil_scale_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    void *x = distil_dptr_addr(a->x);
    const float *scale = static_cast<const float *>(distil_dptr_addr(a->scale));
    dt_dispatch(a->dtype, [&](auto d) {
        scale_launch<decltype(d)::value>(x, a->count, scale, b->lane.stream);
    });
    return gpu_check_launch(b, "scale");
}
