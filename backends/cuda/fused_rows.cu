/*
 * fused_rows.cu - docs/SPEC.md §2 steps 2-5 on one chunk of fp32 logits: the resident kernel
 * (fused_rows_resident.cu: each row read from HBM once, held in the shared memory of a block
 * cluster) where it applies, else the streaming kernel here (fused_rows.cuh has its passes):
 * one block per row reading zs and zt from global memory in each of three passes. The streaming
 * kernel serves HIP and rows too long for shared memory; the test hook fused_rows=stream forces it.
 * Given the row statistics from the logits GEMMs (the loss alone), one pass: fused_loss_kernel,
 * the JSD kernel's loop (div_rows.cuh) on the rows' log-probabilities.
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, soft (rows) fp32; g (rows, V) optional.
 */
#include "fused_rows.cuh"
#include "div_rows.cuh"

#include <stdlib.h>

namespace DISTIL_GPU_NS {

constexpr int FUSED_THREADS = 512;

/* Grid: one block per row. VW = 4 needs V % 4 == 0 and 16-byte aligned bases; VW = 1
 * otherwise. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(FUSED_THREADS) distil_fused_rows_kernel(fused_params p) {
    __shared__ fused_smem sm;
    const int64_t row = blockIdx.x;
    const float *zs = p.zs + row * p.vocab;
    const float *zt = p.zt + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    const int64_t n = p.vocab;
    const int64_t label = p.labels[row];
    if (!fused_label_valid(p, label)) {
        fused_ignored_row<GDT, HAS_G, VW>(p, row, g, 0, n, threadIdx.x == 0);
        return;
    }
    /* Read before the block may write G over zs (in place): the barriers of pass 2's sums order
     * it before any write. */
    const float z_label = zs[label]; /* every thread: fused_label_sm1 */
    fused_stream_row<GDT, HAS_G, VW>(p, sm, zs, zt, n, g, row, label, z_label);
}

/* div_span's input map for the loss alone: the logits of a vector to their log-probabilities
 * (fused_logp) and, unless UNIT (tau == 1, where the JSD's sum is the CE's), the CE's sum of
 * 2^((zs - ms) log2 e) (each vector's terms, <= 1, added in fp32 first, then in double). */
template <bool UNIT> struct fused_in_logits {
    const fused_params &p;
    const fused_row_stats &st;
    double ce;
    template <int N> __device__ __forceinline__ void operator()(float (&a)[N], float (&b)[N]) {
        if (!UNIT) {
            float c = 0.0f;
#pragma unroll
            for (int k = 0; k < N; k++) {
                c += exp2f((a[k] - st.ms) * FUSED_LOG2E);
            }
            ce += c;
        }
        float x[N], y[N];
        fused_logp(p, st, a, b, x, y);
#pragma unroll
        for (int k = 0; k < N; k++) {
            a[k] = x[k];
            b[k] = y[k];
        }
    }
};

/* The loss alone with the row statistics from the GEMMs: one block per row, one pass over zs and
 * zt, the JSD kernel's own loop (div_span) on the log-probabilities. VW = 4 needs V % 4 == 0
 * and 16-byte aligned bases (the rows are then aligned too); VW = 1 otherwise. Two blocks per SM,
 * as the JSD kernel's fp32 loop. */
template <int VW>
__global__ void __launch_bounds__(FUSED_THREADS, 2) distil_fused_loss_kernel(fused_params p) {
    __shared__ fused_smem sm;
    const int64_t row = blockIdx.x;
    const int64_t label = p.labels[row];
    if (!fused_label_valid(p, label)) {
        fused_ignored_row<DISTIL_F32, false, VW>(p, row, nullptr, 0, p.vocab, threadIdx.x == 0);
        return;
    }
    const float z_label = p.zs[row * p.vocab + label];
    fused_row_stats st;
    fused_row_stats_tiles(p, sm, row, st);
    div_rows_params jp = {};
    jp.x = p.zs;
    jp.y = p.zt;
    jp.x_stride = jp.y_stride = p.vocab;
    jp.rows = p.rows;
    jp.vocab = p.vocab;
    jp.coef = p.coef;
    double acc[2] = {0.0, 0.0};
    fused_with_mode_unit(p, [&](auto mode, auto unit) {
        fused_in_logits<decltype(unit)::value> in{p, st, 0.0};
        acc[0] = div_span<DISTIL_F32, false, VW, decltype(mode)::value>(jp, row, 0, p.vocab / VW,
                                                                        true, 0.0f, in);
        acc[1] = in.ce;
    });
    fused_block_sums<2>(sm, acc);
    if (!p.unit_temp) {
        st.lce = static_cast<float>(log2(acc[1]));
    }
    if (threadIdx.x == 0) {
        fused_row_results(p, row, st.ms, st.lce, z_label, acc[0]);
    }
}

template <int GDT, bool HAS_G, int VW>
static cudaError_t fused_launch(const fused_params &p, cudaStream_t s) {
    distil_fused_rows_kernel<GDT, HAS_G, VW>
        <<<static_cast<unsigned>(p.rows), FUSED_THREADS, 0, s>>>(p);
    return cudaGetLastError();
}

template <int VW>
static cudaError_t fused_launch_vw(const fused_params &p, distil_dtype gdt, cudaStream_t s) {
    if (p.g == nullptr) {
        return fused_launch<DISTIL_F32, false, VW>(p, s);
    }
    return dt_dispatch(gdt,
                       [&](auto g) { return fused_launch<decltype(g)::value, true, VW>(p, s); });
}

static fused_params fused_params_of(const distil_fused_rows_args *a) {
    fused_params p;
    p.zs = gpu_ptr<const float>(a->zs);
    p.zt = gpu_ptr<const float>(a->zt);
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.ce = gpu_ptr<float>(a->ce_rows);
    p.soft = gpu_ptr<float>(a->soft_rows);
    p.g = distil_dptr_addr(a->g);
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.ignore_index = a->ignore_index;
    p.inv_t = a->inv_temperature;
    p.weight_hard = a->weight_hard;
    p.weight_soft = a->weight_soft;
    p.unit_temp = a->inv_temperature == 1.0f;
    p.coef = div_coef_make(a->divergence, a->beta, a->alpha);
    p.cx = FUSED_LOG2E * a->inv_temperature;
    p.inv_tt = a->inv_teacher_temperature; /* docs/SPEC.md §6 head options */
    p.cy = FUSED_LOG2E * a->inv_teacher_temperature;
    p.dz = gpu_ptr<const float>(a->dz);
    p.zs_max = gpu_ptr<const float>(a->zs_max);
    p.zs_s1 = gpu_ptr<const float>(a->zs_s1);
    p.zt_max = gpu_ptr<const float>(a->zt_max);
    p.zt_s1 = gpu_ptr<const float>(a->zt_s1);
    p.tiles = a->stats_tiles;
    p.entropy = gpu_ptr<float>(a->entropy);
    return p;
}

/* The loss-only kernel with the GEMMs' statistics. */
static cudaError_t fused_loss_launch(const fused_params &q, cudaStream_t s) {
    const bool vec = q.vocab % 4 == 0 && gpu_aligned(q.zs, 16) && gpu_aligned(q.zt, 16);
    const unsigned blocks = static_cast<unsigned>(q.rows);
    if (vec) {
        distil_fused_loss_kernel<4><<<blocks, FUSED_THREADS, 0, s>>>(q);
    } else {
        distil_fused_loss_kernel<1><<<blocks, FUSED_THREADS, 0, s>>>(q);
    }
    return cudaGetLastError();
}

/* The streaming kernel, 16-byte vectors when the buffers allow. */
static cudaError_t fused_stream_launch(const fused_params &q, distil_dtype gdt, cudaStream_t s) {
    const bool vec = q.vocab % 4 == 0 && gpu_aligned(q.zs, 16) && gpu_aligned(q.zt, 16) &&
                     (q.g == nullptr || gpu_aligned(q.g, 16));
    return vec ? fused_launch_vw<4>(q, gdt, s) : fused_launch_vw<1>(q, gdt, s);
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(fused_rows)(void *vb, const distil_fused_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > 0x7fffffff) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "fused_rows: %lld rows in one chunk (at most 2^31 - 1)",
                                (long long)a->rows);
    }
    const fused_params p = fused_params_of(a);
    gpu_device_guard guard(b);
    /* statistics given (stats_fit, the loss alone, no entropy); div_span's 32-bit offsets */
    if (p.zs_max != nullptr && p.g == nullptr && p.entropy == nullptr &&
        p.vocab <= DIV_SPAN_MAX_VOCAB) {
        const cudaError_t e = fused_loss_launch(p, b->lane.stream);
        return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "fused_rows");
    }
    if (p.g == nullptr && p.entropy == nullptr && b->stats_require && gpu_stats_device(b)) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                                "%s: fused_rows: test hook stats=require, and this loss-only row "
                                "pass does not take the row statistics",
                                DISTIL_GPU_NAME);
    }
    bool done = false;
    cudaError_t e = cudaSuccess;
    /* the student's entropy (docs/SPEC.md §6): either row kernel sums it in its JSD pass */
    if (!b->fused_stream) {
        e = fused_resident_launch(b, p, a->g_dtype, b->lane.stream, &done);
    }
    if (!done && b->fused_resident) {
        (void)cudaGetLastError();
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                                "%s: fused_rows: test hook fused_rows=resident, and the resident "
                                "row kernel declined this row pass (V %lld)",
                                DISTIL_GPU_NAME, (long long)p.vocab);
    }
    if (!done) {
        (void)cudaGetLastError(); /* a refused cluster launch: the streaming kernel instead */
        e = fused_stream_launch(p, a->g_dtype, b->lane.stream);
    }
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "fused_rows");
}
