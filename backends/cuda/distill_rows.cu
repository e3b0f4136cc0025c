/*
 * distill_rows.cu - docs/SPEC.md §2 steps 2-5 on one chunk of fp32 logits: the resident kernel
 * (distill_rows_resident.cu: each row read from HBM once, held in the shared memory of a block
 * cluster) where it applies, else the streaming kernel here (distill_rows.cuh has its passes):
 * one block per row reading zs and zt from global memory in each of three passes. The streaming
 * kernel serves HIP and rows too long for shared memory; DISTIL_CUDA_DISTILL=stream forces it.
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, jsd (rows) fp32; g (rows, V) optional.
 */
#include "distill_rows.cuh"

#include <stdlib.h>

namespace DISTIL_GPU_NS {

constexpr int DISTILL_THREADS = 512;

/* Grid: one block per row. VW = 4 needs V % 4 == 0 and 16-byte aligned bases; VW = 1
 * otherwise. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(DISTILL_THREADS) distil_distill_rows_kernel(distill_params p) {
    __shared__ distill_smem sm;
    const int64_t row = blockIdx.x;
    const float *zs = p.zs + row * p.vocab;
    const float *zt = p.zt + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    const int64_t n = p.vocab;
    const int64_t label = p.labels[row];
    if (!distill_label_valid(p, row, label, threadIdx.x == 0)) {
        distill_ignored_row<GDT, HAS_G, VW>(p, row, g, 0, n, threadIdx.x == 0);
        return;
    }
    /* Read before the block may write G over zs (in place): the barriers of pass 2's sums order
     * it before any write. */
    const float z_label = threadIdx.x == 0 ? zs[label] : 0.0f;
    distill_stream_row<GDT, HAS_G, VW>(p, sm, zs, zt, n, g, row, label, z_label);
}

template <int GDT, bool HAS_G, int VW>
static cudaError_t distill_launch(const distill_params &p, cudaStream_t s) {
    distil_distill_rows_kernel<GDT, HAS_G, VW>
        <<<static_cast<unsigned>(p.rows), DISTILL_THREADS, 0, s>>>(p);
    return cudaGetLastError();
}

template <int VW>
static cudaError_t distill_launch_vw(const distill_params &p, distil_dtype gdt, cudaStream_t s) {
    if (p.g == nullptr) {
        return distill_launch<DISTIL_F32, false, VW>(p, s);
    }
    switch (gdt) {
    case DISTIL_F32:
        return distill_launch<DISTIL_F32, true, VW>(p, s);
    case DISTIL_BF16:
        return distill_launch<DISTIL_BF16, true, VW>(p, s);
    default:
        return distill_launch<DISTIL_F16, true, VW>(p, s);
    }
}

static distill_params distill_params_of(gpu_state *b, const distil_distill_rows_args *a) {
    distill_params p;
    p.zs = gpu_ptr<const float>(a->zs);
    p.zt = gpu_ptr<const float>(a->zt);
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.ce = gpu_ptr<float>(a->ce_rows);
    p.jsd = gpu_ptr<float>(a->jsd_rows);
    p.g = distil_dptr_addr(a->g);
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.err = b->label_err;
    p.launch = ++b->label_launch;
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.row_offset = a->row_offset;
    p.ignore_index = a->ignore_index;
    p.inv_t = a->inv_temperature;
    p.weight_hard = a->weight_hard;
    p.weight_soft = a->weight_soft;
    p.unit_temp = a->inv_temperature == 1.0f;
    p.coef = jsd_coef_make(a->beta);
    p.cx = DISTILL_LOG2E * a->inv_temperature;
    return p;
}

/* The streaming kernel, 16-byte vectors when the buffers allow. */
static cudaError_t distill_stream_launch(const distill_params &q, distil_dtype gdt,
                                         cudaStream_t s) {
    const bool vec = q.vocab % 4 == 0 && gpu_aligned(q.zs, 16) && gpu_aligned(q.zt, 16) &&
                     (q.g == nullptr || gpu_aligned(q.g, 16));
    return vec ? distill_launch_vw<4>(q, gdt, s) : distill_launch_vw<1>(q, gdt, s);
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(distill_rows)(void *vb, const distil_distill_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > 0x7fffffff) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "distill_rows: %lld rows in one chunk (at most 2^31 - 1)",
                                (long long)a->rows);
    }
    const distill_params p = distill_params_of(b, a);
    gpu_device_guard guard(b);
    bool done = false;
    cudaError_t e = cudaSuccess;
    if (!b->distill_stream) {
        e = distill_resident_launch(b, p, a->g_dtype, b->lane.stream, &done);
    }
    if (!done) {
        (void)cudaGetLastError(); /* a refused cluster launch: the streaming kernel instead */
        e = distill_stream_launch(p, a->g_dtype, b->lane.stream);
    }
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "distill_rows");
}

extern "C" int64_t DISTIL_GPU_FN(preferred_chunk_rows)(void *vb, int64_t vocab, int64_t hs,
                                                       int64_t ht) {
    (void)vb;
    (void)hs;
    (void)ht;
    /* zs + zt in fp32 plus G: about 10 bytes per logit. 1.5 GB of them keeps the extra memory of
     * the seed workload (V = 128256, 1024 rows) under 2.5 GB with the fp32 grad_Ws accumulator,
     * and the chunks large enough for the weight-gradient GEMM to run near peak. */
    const double budget = 1.5e9 / 10.0;
    int64_t c = 64;
    while (static_cast<double>(c) * 2 * static_cast<double>(vocab) <= budget && c < (1 << 16)) {
        c *= 2;
    }
    return c;
}
