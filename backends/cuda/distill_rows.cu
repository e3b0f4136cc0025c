/*
 * distill_rows.cu - SPEC section 2 steps 2-5 on one chunk of fp32 logits, one fused row kernel.
 *   zs, zt (rows, V) fp32 dense: student / teacher logits; labels (rows) int64
 *   ce, jsd (rows) fp32: per-row CE and JSD; g (rows, V) dtype GDT dense, optional (may be zs)
 * A row is processed by a cluster of CL blocks (sm_90+: thread block clusters; CL = 1 elsewhere),
 * each owning a slice of the columns, in three passes over its slice:
 *   1. online max / log-sum-exp of zs (CE), zs/tau and zt/tau;
 *   2. sum of the JSD element terms and of their x-derivatives g (needs the three LSEs);
 *   3. G = wh/n (s - onehot) + ws/(n tau) (g - q sum g)   (needs the sums).
 * Partial results are combined in a fixed order (block, then cluster rank 0, 1, ...), so every
 * block of the row sees bitwise the same statistics. Passes 2 and 3 re-read the slice: with CL
 * blocks per row only about (resident blocks / CL) rows are live at once, so those re-reads hit
 * L2 instead of HBM (V = 128256: a row of zs + zt is 1 MB; 8 blocks per row keep ~33 MB live).
 */
#include "gpu_state.cuh"
#include "dtype.cuh"
#include "jsd_math.cuh"
#include "reduce.cuh"

#include <stdlib.h>

namespace DISTIL_GPU_NS {

struct distill_params {
    const float *zs;
    const float *zt;
    const int64_t *labels;
    float *ce;
    float *jsd;
    void *g;
    const float *n_valid;
    gpu_label_error *err;
    int64_t rows, vocab, row_offset, ignore_index;
    float inv_t, weight_hard, weight_soft;
    int cl;         /* blocks per row (cluster size) */
    bool unit_temp; /* inv_t == 1: zs/tau is zs, one LSE serves CE and JSD */
    jsd_coef coef;
};

constexpr int DISTILL_THREADS = 512;
constexpr int DISTILL_UNROLL = 2;

/* The three LSEs of a row: zs (for CE), zs * inv_t and zt * inv_t. */
struct row_lse {
    lse_acc ce, x, y;
};

/* Shared memory of one block: block-level partials, then the values the cluster exchanges. */
struct distill_smem {
    lse_acc warp_lse[3][DISTIL_GPU_MAX_WARPS];
    float warp_sum[2][DISTIL_GPU_MAX_WARPS];
    lse_acc xchg_lse[3];
    float xchg_sum[2];
};

/* Record an invalid label: the smallest (row, label) key wins. Labels are coded in 32 bits,
 * saturated at the ends (code 0: <= INT32_MIN, code 0xffffffff: >= INT32_MAX). */
__device__ void distill_record_bad_label(const distill_params &p, int64_t row, int64_t label) {
    const long long lo = -2147483648LL;
    const long long hi = 2147483647LL;
    const long long l = label < lo ? lo : (label > hi ? hi : label);
    const unsigned long long code = static_cast<unsigned long long>(l - lo);
    unsigned long long r = static_cast<unsigned long long>(p.row_offset + row);
    r = r > 0xffffffffull ? 0xffffffffull : r;
    atomicMin(&p.err->key, (r << 32) | code);
    p.err->vocab = p.vocab;
}

/* Merge this block's per-thread LSEs: warp butterflies, then warps 0, 1, ... in order. */
__device__ row_lse distill_block_lse(row_lse t, distill_smem &sm) {
    lse_acc v[3] = {warp_lse(t.ce), warp_lse(t.x), warp_lse(t.y)};
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    if (lane == 0) {
        for (int k = 0; k < 3; k++) {
            sm.warp_lse[k][warp] = v[k];
        }
    }
    __syncthreads();
    lse_acc r[3];
    for (int k = 0; k < 3; k++) {
        r[k] = sm.warp_lse[k][0];
        for (int w = 1; w < static_cast<int>(blockDim.x / DISTIL_GPU_WARP); w++) {
            r[k] = lse_merge(r[k], sm.warp_lse[k][w]);
        }
    }
    row_lse out = {r[0], r[1], r[2]};
    return out;
}

/* Sums of two values over the block, same fixed order. */
__device__ void distill_block_sums(float &a, float &b, distill_smem &sm) {
    a = warp_sum(a);
    b = warp_sum(b);
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    if (lane == 0) {
        sm.warp_sum[0][warp] = a;
        sm.warp_sum[1][warp] = b;
    }
    __syncthreads();
    a = sm.warp_sum[0][0];
    b = sm.warp_sum[1][0];
    for (int w = 1; w < static_cast<int>(blockDim.x / DISTIL_GPU_WARP); w++) {
        a += sm.warp_sum[0][w];
        b += sm.warp_sum[1][w];
    }
}

#if DISTIL_GPU_HAVE_CLUSTERS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DISTIL_DISTILL_CLUSTERS 1
/* Combine the blocks of the cluster through distributed shared memory, rank 0 first. */
__device__ row_lse distill_cluster_lse(row_lse r, distill_smem &sm) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) {
        sm.xchg_lse[0] = r.ce;
        sm.xchg_lse[1] = r.x;
        sm.xchg_lse[2] = r.y;
    }
    cl.sync();
    const lse_acc *r0 = cl.map_shared_rank(sm.xchg_lse, 0);
    row_lse out = {r0[0], r0[1], r0[2]};
    for (unsigned k = 1; k < cl.num_blocks(); k++) {
        const lse_acc *o = cl.map_shared_rank(sm.xchg_lse, k);
        out.ce = lse_merge(out.ce, o[0]);
        out.x = lse_merge(out.x, o[1]);
        out.y = lse_merge(out.y, o[2]);
    }
    return out;
}

/* Same for the two sums; ends with a cluster barrier so no block leaves while others still read
 * its shared memory. */
__device__ void distill_cluster_sums(float &a, float &b, distill_smem &sm) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) {
        sm.xchg_sum[0] = a;
        sm.xchg_sum[1] = b;
    }
    cl.sync();
    const float *r0 = cl.map_shared_rank(sm.xchg_sum, 0);
    a = r0[0];
    b = r0[1];
    for (unsigned k = 1; k < cl.num_blocks(); k++) {
        const float *o = cl.map_shared_rank(sm.xchg_sum, k);
        a += o[0];
        b += o[1];
    }
    cl.sync();
}
#else
#define DISTIL_DISTILL_CLUSTERS 0
#endif

/* Pass 1 over the columns [c0, c1) of one row: per-thread LSEs. */
template <int VW>
__device__ row_lse distill_pass_stats(const distill_params &p, const float *zs, const float *zt,
                                      int64_t c0, int64_t c1) {
    row_lse t = {lse_empty(), lse_empty(), lse_empty()};
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t i0 = c0 + static_cast<int64_t>(threadIdx.x) * VW; i0 < c1; i0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
                vload<DISTIL_F32, VW>(zs, i, a[u]);
                vload<DISTIL_F32, VW>(zt, i, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    lse_add(t.ce, a[u][k]);
                    if (!p.unit_temp) {
                        lse_add(t.x, a[u][k] * p.inv_t);
                    }
                    lse_add(t.y, b[u][k] * p.inv_t);
                }
            }
        }
    }
    return t;
}

/* Pass 2: sum of the JSD terms and of their x-derivatives over [c0, c1). */
template <int VW>
__device__ void distill_pass_sums(const distill_params &p, const float *zs, const float *zt,
                                  int64_t c0, int64_t c1, float lx, float ly, float &se,
                                  float &sg) {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t i0 = c0 + static_cast<int64_t>(threadIdx.x) * VW; i0 < c1; i0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
                vload<DISTIL_F32, VW>(zs, i, a[u]);
                vload<DISTIL_F32, VW>(zt, i, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float g;
                    se += jsd_elem<false>(p.coef, a[u][k] * p.inv_t - lx, b[u][k] * p.inv_t - ly,
                                          &g, nullptr);
                    sg += g;
                }
            }
        }
    }
}

/* Everything pass 3 needs besides the logits. */
struct distill_grad_coef {
    float lce, lx, ly; /* the three LSEs */
    float hw, sw;      /* weight_hard / n, weight_soft / (n tau) */
    float sum_g;
    int64_t label;
};

__device__ __forceinline__ float distill_grad_elem(const distill_params &p,
                                                   const distill_grad_coef &c, float zs, float zt,
                                                   int64_t col) {
    float g;
    float q;
    (void)jsd_elem<true>(p.coef, zs * p.inv_t - c.lx, zt * p.inv_t - c.ly, &g, &q);
    const float s = p.unit_temp ? q : __expf(zs - c.lce);
    const float hard = s - (col == c.label ? 1.0f : 0.0f);
    return c.hw * hard + c.sw * (g - q * c.sum_g);
}

/* Pass 3: G over [c0, c1). In place (g == zs) is safe: each element is read before the same
 * thread writes it. */
template <int GDT, int VW>
__device__ void distill_pass_grad(const distill_params &p, const distill_grad_coef &c,
                                  const float *zs, const float *zt, void *g, int64_t c0,
                                  int64_t c1) {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t i0 = c0 + static_cast<int64_t>(threadIdx.x) * VW; i0 < c1; i0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
                vload<DISTIL_F32, VW>(zs, i, a[u]);
                vload<DISTIL_F32, VW>(zt, i, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (i < c1) {
                float o[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    o[k] = distill_grad_elem(p, c, a[u][k], b[u][k], i + k);
                }
                vstore<GDT, VW>(g, i, o);
            }
        }
    }
}

template <int GDT, int VW> __device__ void distill_zero(void *g, int64_t c0, int64_t c1) {
    float z[VW];
#pragma unroll
    for (int k = 0; k < VW; k++) {
        z[k] = 0.0f;
    }
    for (int64_t i = c0 + static_cast<int64_t>(threadIdx.x) * VW; i < c1;
         i += static_cast<int64_t>(blockDim.x) * VW) {
        vstore<GDT, VW>(g, i, z);
    }
}

/* The row's label: valid (in [0, V) and not ignore_index) or ignored; rank 0 records bad ones. */
__device__ bool distill_label(const distill_params &p, int64_t row, int rank, int64_t *label) {
    const int64_t l = p.labels[row];
    *label = l;
    if (l == p.ignore_index) {
        return false;
    }
    if (l < 0 || l >= p.vocab) {
        if (rank == 0 && threadIdx.x == 0) {
            distill_record_bad_label(p, row, l);
        }
        return false;
    }
    return true;
}

/* Columns [c0, c1) of rank `rank`: equal slices, rounded to whole vectors. */
template <int VW>
__device__ void distill_slice(const distill_params &p, int rank, int64_t *c0, int64_t *c1) {
    int64_t span = (p.vocab + p.cl - 1) / p.cl;
    span = (span + VW - 1) / VW * VW;
    *c0 = span * rank < p.vocab ? span * rank : p.vocab;
    *c1 = *c0 + span < p.vocab ? *c0 + span : p.vocab;
}

/*
 * Grid: rows * cl blocks, clusters of cl consecutive blocks (one row each). VW = 4 needs V % 4 == 0
 * and 16-byte aligned bases; VW = 1 otherwise.
 */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(DISTILL_THREADS) distil_distill_rows_kernel(distill_params p) {
    __shared__ distill_smem sm;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t row = blockIdx.x / p.cl;
    int64_t c0;
    int64_t c1;
    distill_slice<VW>(p, rank, &c0, &c1);
    const float *zs = p.zs + row * p.vocab;
    const float *zt = p.zt + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    int64_t label;
    if (!distill_label(p, row, rank, &label)) {
        if (HAS_G) {
            distill_zero<GDT, VW>(g, c0, c1);
        }
        if (rank == 0 && threadIdx.x == 0) {
            p.ce[row] = 0.0f;
            p.jsd[row] = 0.0f;
        }
        return;
    }
    /* Read before any block of the row may write G over zs (in place): the barriers of the sums
     * exchange below order this read before every write. */
    const float z_label = rank == 0 && threadIdx.x == 0 ? zs[label] : 0.0f;
    row_lse l = distill_block_lse(distill_pass_stats<VW>(p, zs, zt, c0, c1), sm);
#if DISTIL_DISTILL_CLUSTERS
    if (p.cl > 1) {
        l = distill_cluster_lse(l, sm);
    }
#endif
    distill_grad_coef c;
    c.lce = lse_value(l.ce);
    c.lx = p.unit_temp ? c.lce : lse_value(l.x);
    c.ly = lse_value(l.y);
    float se = 0.0f;
    float sg = 0.0f;
    distill_pass_sums<VW>(p, zs, zt, c0, c1, c.lx, c.ly, se, sg);
    distill_block_sums(se, sg, sm);
#if DISTIL_DISTILL_CLUSTERS
    if (p.cl > 1) {
        distill_cluster_sums(se, sg, sm);
    }
#endif
    if (rank == 0 && threadIdx.x == 0) {
        p.ce[row] = c.lce - z_label;
        p.jsd[row] = se;
    }
    if (HAS_G) {
        const float n = p.n_valid ? *p.n_valid : 1.0f;
        c.hw = n > 0.0f ? p.weight_hard / n : 0.0f;
        c.sw = n > 0.0f ? p.weight_soft * p.inv_t / n : 0.0f;
        c.sum_g = sg;
        c.label = label;
        distill_pass_grad<GDT, VW>(p, c, zs, zt, g, c0, c1);
    }
}

/* Blocks per row: sm_90+ splits a long row over a cluster so its re-reads stay in L2. */
static int distill_cluster_size(const gpu_state *b, int64_t vocab, int64_t rows) {
#if DISTIL_GPU_HAVE_CLUSTERS
    if (b->cc_major < 9) {
        return 1;
    }
    if (b->cluster > 0) {
        return b->cluster;
    }
    int cl = 1;
    while (cl < 8 && vocab >= static_cast<int64_t>(cl) * 2 * 4096) {
        cl *= 2;
    }
    return rows * cl > 0x7fffffff ? 1 : cl;
#else
    (void)b;
    (void)vocab;
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
    p.cl = distill_cluster_size(b, a->vocab, a->rows);
    return p;
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
    distill_params p = distill_params_of(b, a);
    const bool vec = a->vocab % 4 == 0 && gpu_aligned(p.zs, 16) && gpu_aligned(p.zt, 16) &&
                     (p.g == nullptr || gpu_aligned(p.g, 16));
    gpu_device_guard guard(b);
    cudaError_t e = vec ? distill_launch_vw<4>(p, a->g_dtype, b->stream)
                        : distill_launch_vw<1>(p, a->g_dtype, b->stream);
    if (e != cudaSuccess && p.cl > 1) {
        /* The cluster did not fit (another kernel holds the SMs, say): one block per row. */
        (void)cudaGetLastError();
        p.cl = 1;
        e = vec ? distill_launch_vw<4>(p, a->g_dtype, b->stream)
                : distill_launch_vw<1>(p, a->g_dtype, b->stream);
    }
    if (e != cudaSuccess) {
        return gpu_fail(b, e, "distill_rows");
    }
    return DISTIL_OK;
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
