/*
 * distill_rows.cu - SPEC section 2 steps 2-5 on one chunk of fp32 logits (distill_rows.cuh has
 * the passes): the streaming kernel, one block per row reading zs and zt from global memory in
 * each of the three passes (the fastest variant measured on an H200; see tools/results). The
 * shared-memory kernel (distill_rows_smem.cu) runs instead when DISTIL_CUDA_DISTILL=smem asks
 * and it applies; DISTIL_CUDA_CLUSTER=n splits a row over a cluster of n blocks (sm_90+).
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, jsd (rows) fp32; g (rows, V) optional.
 */
#include "distill_rows.cuh"

#include <stdlib.h>

namespace DISTIL_GPU_NS {

constexpr int DISTILL_THREADS = 512;

/* Grid: rows * cl blocks, clusters of cl consecutive blocks (one row each). VW = 4 needs
 * V % 4 == 0 and 16-byte aligned bases; VW = 1 otherwise. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(DISTILL_THREADS) distil_distill_rows_kernel(distill_params p) {
    __shared__ distill_smem sm;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t row = blockIdx.x / p.cl;
    int64_t c0;
    int64_t n;
    distill_slice(p, rank, &c0, &n);
    const float *zs = p.zs + row * p.vocab;
    const float *zt = p.zt + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    int64_t label;
    if (!distill_label(p, row, rank, &label)) {
        distill_ignored_row<GDT, HAS_G, VW>(p, row, rank, g, c0, n);
        return;
    }
    /* Read before any block of the row may write G over zs (in place): the barriers of the sums
     * exchange order this read before every write. */
    const float z_label = rank == 0 && threadIdx.x == 0 ? zs[label] : 0.0f;
    const row_lse l = distill_row_lse(p, distill_pass_stats<VW>(p, zs + c0, zt + c0, n), sm);
    distill_finish_row<GDT, HAS_G, VW>(p, sm, l, zs + c0, zt + c0, n, g, c0, row, rank, label,
                                       z_label);
}

/* Blocks per row of the streaming kernel: 1 unless DISTIL_CUDA_CLUSTER asks (sm_90+). On an
 * H200 one block per row measured faster than clusters of 4 or 8 (2026-11-30: the row pass of
 * 1024 x 128256 took ~0.8 ms with 1, ~1.0 with 4, ~1.2 with 8): the cluster barriers and
 * co-scheduling cost more than the L2 reuse saved. */
static int distill_cluster_size(const gpu_state *b, int64_t rows) {
#if DISTIL_GPU_HAVE_CLUSTERS
    if (b->cc_major < 9 || b->cluster <= 1 || rows * b->cluster > 0x7fffffff) {
        return 1;
    }
    return b->cluster;
#else
    (void)b;
    (void)rows;
    return 1;
#endif
}

template <int GDT, bool HAS_G, int VW>
static cudaError_t distill_launch(const distill_params &p, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>(p.rows * p.cl);
#if DISTIL_GPU_HAVE_CLUSTERS
    if (p.cl > 1) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = static_cast<unsigned>(p.cl);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(DISTILL_THREADS);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, distil_distill_rows_kernel<GDT, HAS_G, VW>, p);
    }
#endif
    distil_distill_rows_kernel<GDT, HAS_G, VW><<<grid, DISTILL_THREADS, 0, s>>>(p);
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

static distill_params distill_params_of(const gpu_state *b, const distil_distill_rows_args *a) {
    distill_params p;
    p.zs = gpu_ptr<const float>(a->zs);
    p.zt = gpu_ptr<const float>(a->zt);
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.ce = gpu_ptr<float>(a->ce_rows);
    p.jsd = gpu_ptr<float>(a->jsd_rows);
    p.g = distil_dptr_addr(a->g);
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.err = b->label_err;
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.row_offset = a->row_offset;
    p.ignore_index = a->ignore_index;
    p.inv_t = a->inv_temperature;
    p.weight_hard = a->weight_hard;
    p.weight_soft = a->weight_soft;
    p.unit_temp = a->inv_temperature == 1.0f;
    p.coef = jsd_coef_make(a->beta);
    p.cl = distill_cluster_size(b, a->rows);
    p.span = a->vocab;
    return p;
}

/* The streaming kernel with q.cl blocks per row, 16-byte vectors when the buffers allow. */
static cudaError_t distill_stream_try(distill_params q, distil_dtype gdt, cudaStream_t s) {
    const bool vec = q.vocab % 4 == 0 && gpu_aligned(q.zs, 16) && gpu_aligned(q.zt, 16) &&
                     (q.g == nullptr || gpu_aligned(q.g, 16));
    const int64_t vw = vec ? 4 : 1;
    q.span = ((q.vocab + q.cl - 1) / q.cl + vw - 1) / vw * vw;
    return vec ? distill_launch_vw<4>(q, gdt, s) : distill_launch_vw<1>(q, gdt, s);
}

static cudaError_t distill_stream_launch(const distill_params &p, distil_dtype gdt,
                                         cudaStream_t s) {
    cudaError_t e = distill_stream_try(p, gdt, s);
    if (e != cudaSuccess && p.cl > 1) {
        /* The cluster did not fit: one block per row. */
        (void)cudaGetLastError();
        distill_params q = p;
        q.cl = 1;
        e = distill_stream_try(q, gdt, s);
    }
    return e;
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
    cudaError_t e = distill_smem_launch(b, p, a->g_dtype, b->stream, &done);
    if (!done) {
        (void)cudaGetLastError(); /* a refused cluster launch: the streaming kernel instead */
        e = distill_stream_launch(p, a->g_dtype, b->stream);
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
