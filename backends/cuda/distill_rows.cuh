/*
 * distill_rows.cuh - the streaming distill_rows kernel's device pieces (distill_rows.cu), and the
 * entry points of the resident kernel (distill_rows_resident.cu), which runs instead where a row
 * fits on chip. The streaming kernel gives a row one block, in three passes over global memory:
 *   1. log-sum-exp of zs (CE), zs / tau and zt / tau;
 *   2. sum of the JSD element terms e and of their x-derivatives g (needs the three LSEs);
 *   3. G = wh/n (s - onehot) + ws/(n tau) (g - q sum g)  (needs the sums).
 * Partials are combined in a fixed order (a warp butterfly, then warps 0, 1, ...), so reruns are
 * bitwise identical.
 */
#ifndef DISTIL_GPU_DISTILL_ROWS_CUH
#define DISTIL_GPU_DISTILL_ROWS_CUH

#include "gpu_state.cuh"
#include "dtype.cuh"
#include "jsd_math.cuh"
#include "reduce.cuh"

namespace DISTIL_GPU_NS {

struct distill_params {
    const float *zs; /* (rows, V) fp32 dense */
    const float *zt;
    const int64_t *labels; /* (rows) */
    float *ce;             /* (rows) */
    float *jsd;            /* (rows) */
    void *g;               /* (rows, V) of the G dtype, optional, may be zs */
    const float *n_valid;
    gpu_label_error *err;
    int64_t rows, vocab, row_offset, ignore_index;
    float inv_t, weight_hard, weight_soft;
    bool unit_temp; /* inv_t == 1: zs / tau is zs, one LSE serves CE and JSD */
    jsd_coef coef;
};

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

/* Everything pass 3 needs besides the logits. */
struct distill_grad_coef {
    float lce, lx, ly; /* the three LSEs */
    float hw, sw;      /* weight_hard / n, weight_soft / (n tau) */
    float sum_g;
    int64_t label;
};

/* Record an invalid label of global row `row`: the smallest (row, label) key wins. Labels are
 * coded in 32 bits, saturated at the ends (code 0: <= INT32_MIN, code 0xffffffff: >= INT32_MAX). */
__device__ inline void distill_record_bad_label(gpu_label_error *err, int64_t vocab, int64_t row,
                                                int64_t label) {
    const long long lo = -2147483648LL;
    const long long hi = 2147483647LL;
    const long long l = label < lo ? lo : (label > hi ? hi : label);
    const unsigned long long code = static_cast<unsigned long long>(l - lo);
    unsigned long long r = static_cast<unsigned long long>(row);
    r = r > 0xffffffffull ? 0xffffffffull : r;
    atomicMin(&err->key, (r << 32) | code);
    err->vocab = vocab;
}

/* The row's label: valid (in [0, V) and not ignore_index) or ignored; thread 0 records bad ones. */
__device__ inline bool distill_label(const distill_params &p, int64_t row, int64_t *label) {
    const int64_t l = p.labels[row];
    *label = l;
    if (l == p.ignore_index) {
        return false;
    }
    if (l < 0 || l >= p.vocab) {
        if (threadIdx.x == 0) {
            distill_record_bad_label(p.err, p.vocab, p.row_offset + row, l);
        }
        return false;
    }
    return true;
}

/* Merge this block's per-thread LSEs: warp butterflies, then warps 0, 1, ... in order. */
__device__ inline row_lse distill_block_lse(row_lse t, distill_smem &sm) {
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
__device__ inline void distill_block_sums(float &a, float &b, distill_smem &sm) {
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

/*
 * The three passes over a slice of n columns: zs[j], zt[j] for j in [0, n) (global or shared
 * memory, aligned to VW floats), column c0 + j of the row. Each thread takes VW columns at a
 * time, DISTILL_UNROLL vectors in flight.
 */
template <int VW>
__device__ inline row_lse distill_pass_stats(const distill_params &p, const float *zs,
                                             const float *zt, int64_t n) {
    row_lse t = {lse_empty(), lse_empty(), lse_empty()};
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VW; j0 < n; j0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
                vload<DISTIL_F32, VW>(zs, j, a[u]);
                vload<DISTIL_F32, VW>(zt, j, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
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

template <int VW>
__device__ inline void distill_pass_sums(const distill_params &p, const float *zs, const float *zt,
                                         int64_t n, float lx, float ly, float &se, float &sg) {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VW; j0 < n; j0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
                vload<DISTIL_F32, VW>(zs, j, a[u]);
                vload<DISTIL_F32, VW>(zt, j, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float g;
                    se += jsd_elem<false, true>(p.coef, a[u][k] * p.inv_t - lx,
                                                b[u][k] * p.inv_t - ly, &g, nullptr);
                    sg += g;
                }
            }
        }
    }
}

__device__ __forceinline__ float distill_grad_elem(const distill_params &p,
                                                   const distill_grad_coef &c, float zs, float zt,
                                                   int64_t col) {
    float g;
    float q;
    (void)jsd_elem<true, true>(p.coef, zs * p.inv_t - c.lx, zt * p.inv_t - c.ly, &g, &q);
    const float s = p.unit_temp ? q : expf(zs - c.lce);
    const float hard = s - (col == c.label ? 1.0f : 0.0f);
    return c.hw * hard + c.sw * (g - q * c.sum_g);
}

/* Pass 3: g[c0 + j] for j in [0, n) (g is the row of G). In place (g aliasing zs) is safe: each
 * element is read before the same thread writes it. */
template <int GDT, int VW>
__device__ inline void distill_pass_grad(const distill_params &p, const distill_grad_coef &c,
                                         const float *zs, const float *zt, int64_t n, void *g,
                                         int64_t c0) {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW * DISTILL_UNROLL;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VW; j0 < n; j0 += step) {
        float a[DISTILL_UNROLL][VW];
        float b[DISTILL_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
                vload<DISTIL_F32, VW>(zs, j, a[u]);
                vload<DISTIL_F32, VW>(zt, j, b[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < DISTILL_UNROLL; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * blockDim.x * VW;
            if (j < n) {
                float o[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    o[k] = distill_grad_elem(p, c, a[u][k], b[u][k], c0 + j + k);
                }
                vstore<GDT, VW>(g, c0 + j, o);
            }
        }
    }
}

template <int GDT, int VW> __device__ inline void distill_zero(void *g, int64_t c0, int64_t n) {
    float z[VW];
#pragma unroll
    for (int k = 0; k < VW; k++) {
        z[k] = 0.0f;
    }
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * VW; j < n;
         j += static_cast<int64_t>(blockDim.x) * VW) {
        vstore<GDT, VW>(g, c0 + j, z);
    }
}

/* Writes ce / jsd of an ignored row and zeroes its row of G (n columns). */
template <int GDT, bool HAS_G, int VW>
__device__ inline void distill_ignored_row(const distill_params &p, int64_t row, void *g,
                                           int64_t n) {
    if (HAS_G) {
        distill_zero<GDT, VW>(g, 0, n);
    }
    if (threadIdx.x == 0) {
        p.ce[row] = 0.0f;
        p.jsd[row] = 0.0f;
    }
}

/* Passes 2 and 3 after the LSEs are known: the row's CE, JSD and G (n columns). */
template <int GDT, bool HAS_G, int VW>
__device__ inline void distill_finish_row(const distill_params &p, distill_smem &sm, row_lse l,
                                          const float *zs, const float *zt, int64_t n, void *g,
                                          int64_t row, int64_t label, float z_label) {
    distill_grad_coef c;
    c.lce = lse_value(l.ce);
    c.lx = p.unit_temp ? c.lce : lse_value(l.x);
    c.ly = lse_value(l.y);
    float se = 0.0f;
    float sg = 0.0f;
    distill_pass_sums<VW>(p, zs, zt, n, c.lx, c.ly, se, sg);
    distill_block_sums(se, sg, sm);
    if (threadIdx.x == 0) {
        p.ce[row] = c.lce - z_label;
        p.jsd[row] = se;
    }
    if (HAS_G) {
        const float nv = p.n_valid ? *p.n_valid : 1.0f;
        c.hw = nv > 0.0f ? p.weight_hard / nv : 0.0f;
        c.sw = nv > 0.0f ? p.weight_soft * p.inv_t / nv : 0.0f;
        c.sum_g = sg;
        c.label = label;
        distill_pass_grad<GDT, VW>(p, c, zs, zt, n, g, 0);
    }
}

/* distill_rows_resident.cu: allow its shared memory and cluster sizes (at create), and launch it
 * when it applies (*done false: the caller uses the streaming kernel). */
distil_status distill_resident_setup(gpu_state *b);
cudaError_t distill_resident_launch(gpu_state *b, const distill_params &p, distil_dtype gdt,
                                    cudaStream_t s, bool *done);

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_DISTILL_ROWS_CUH */
