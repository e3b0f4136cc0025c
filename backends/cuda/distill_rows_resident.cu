/*
 * distill_rows_resident.cu - distill_rows with each row resident on chip: the row's logits are
 * spread over a cluster of CL blocks (CL > 1 on sm_90+, else 1), each block holding its slice of
 * zs and zt in registers (16 columns of each per thread), read from HBM once. While a block works
 * on one row it copies its slice of the cluster's next row into shared memory (cp.async), so the
 * load of a row overlaps the work and the exchanges of the previous one. Two exchanges of row
 * statistics through distributed shared memory (block maxima with sums of exponentials relative
 * to them; JSD sums), and the element work done once: the JSD pass leaves P = hw s + sw g and q in
 * the registers, and the store writes G = P - sw (sum g) q - hw onehot. Math in base 2
 * (x2 = log2 q), row sums in double. Each thread stages and reads only its own columns, so the
 * staging buffer needs no barrier; only the statistics do.
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, jsd (rows) fp32; g (rows, V) optional.
 */
#include "distill_elem.cuh"
#include "distill_rows.cuh"

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_CLUSTERS /* CUDA: cp.async, cudaLaunchKernelExC; cl = 1 before sm_90 */

constexpr int RES_THREADS = 512;
constexpr int RES_WARPS = RES_THREADS / DISTIL_GPU_WARP;
/* Columns of zs (and of zt) each thread holds in registers: 32 registers of data, so that two
 * blocks share an SM (64 registers a thread) and a block's slice is at most RES_MAX_SPAN. */
constexpr int RES_ELEMS = 16;
constexpr int RES_MAX_SPAN = RES_THREADS * RES_ELEMS;

/* The kernel's arguments: the row pass's (distill_rows.cuh) and the plan's. */
struct res_params : distill_params {
    int64_t span; /* columns per block */
    int cl;       /* blocks per row (the cluster) */
};

/* Block statistics: per-warp partials; this block's value of each exchange, read by the cluster
 * (one slot per exchange: a block may write the next exchange's while others still read this
 * one's); the row's values, broadcast to the block. */
struct res_exp_slot {
    float ms, mt;  /* the block's maxima of zs and zt */
    double sum[3]; /* its sums of exponentials relative to them (res_exp_sums) */
};
struct res_smem {
    float wmax[2][RES_WARPS];
    double wsum[3][RES_WARPS];
    res_exp_slot xexp;
    double xjsd[2];
    float row[5];
};

/* --------------------------------------------------------------- exchanges of statistics */

__device__ inline void res_cluster_sync(const res_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.cl > 1) {
        cooperative_groups::this_cluster().sync();
        return;
    }
#endif
    __syncthreads();
}

/* A partial of rank r (lanes of warp 0 fetch one rank each; r < cl). */
template <typename T> __device__ inline const T *res_rank_ptr(const res_params &p, T *mine, int r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.cl > 1) {
        return cooperative_groups::this_cluster().map_shared_rank(mine, r);
    }
#endif
    (void)p;
    (void)r;
    return mine;
}

/* The block's maxima of (a, b); same bits in every thread. */
__device__ inline void res_block_max(res_smem &sm, float a, float b, float *ra, float *rb) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        a = fmaxf(a, distil_warp_xor(a, o));
        b = fmaxf(b, distil_warp_xor(b, o));
    }
    if (lane == 0) {
        sm.wmax[0][warp] = a;
        sm.wmax[1][warp] = b;
    }
    __syncthreads();
    a = sm.wmax[0][0];
    b = sm.wmax[1][0];
    for (int w = 1; w < RES_WARPS; w++) {
        a = fmaxf(a, sm.wmax[0][w]);
        b = fmaxf(b, sm.wmax[1][w]);
    }
    *ra = a;
    *rb = b;
}

/* The block's sums of v[0..N) in double, fixed order, into slot[] by thread 0. */
template <int N> __device__ inline void res_block_sums(res_smem &sm, double (&v)[N], double *slot) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
#pragma unroll
    for (int k = 0; k < N; k++) {
        v[k] = warp_sum(v[k]);
        if (lane == 0) {
            sm.wsum[k][warp] = v[k];
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < N; k++) {
            double s = sm.wsum[k][0];
            for (int w = 1; w < RES_WARPS; w++) {
                s += sm.wsum[k][w];
            }
            slot[k] = s;
        }
    }
}

/* The row sums of v[0..N) in double over every block, in a fixed order; lane 0 of warp 0 gets
 * them in out[] (other threads: unspecified). Ends before any thread reads sm.row. */
template <int N>
__device__ inline void res_row_sums(const res_params &p, res_smem &sm, double *slot, double (&v)[N],
                                    double (&out)[N]) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    res_block_sums<N>(sm, v, slot);
    res_cluster_sync(p);
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < N; k++) {
            double s = lane < p.cl ? res_rank_ptr(p, slot, lane)[k] : 0.0;
            out[k] = warp_sum(s);
        }
    }
}

/* ------------------------------------------------------------------------ element work */

/* A thread's columns of the block's slice, in registers: vector i (VW columns) starts at column
 * (threadIdx.x + RES_THREADS i) VW. Columns past the slice hold -inf (they add 0 to every sum
 * and are never stored). After the JSD pass s holds P and t holds q. */
template <int VW> struct res_regs {
    static constexpr int NV = RES_ELEMS / VW;
    float s[NV][VW], t[NV][VW];
};

template <int VW> __device__ __forceinline__ int res_col(int i) {
    return (static_cast<int>(threadIdx.x) + RES_THREADS * i) * VW;
}

/* Start copying the thread's columns of zs and zt (n columns from the slice's start) into its own
 * staging slots sa, sb (shared). */
template <int VW>
__device__ inline void res_stage(const float *zs, const float *zt, int n, float *sa, float *sb) {
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
        const int j = res_col<VW>(i);
        if (j < n) {
            distil_cp_async<VW * 4>(sa + j, zs + j);
            distil_cp_async<VW * 4>(sb + j, zt + j);
        }
    }
    distil_cp_async_commit();
}

/* Wait for the thread's staged columns and take them into registers. Each thread reads only the
 * slots it filled, so neither this nor the next res_stage needs a barrier. */
template <int VW>
__device__ inline void res_take(const float *sa, const float *sb, int n, res_regs<VW> &r) {
    distil_cp_async_wait_all();
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
        const int j = res_col<VW>(i);
        if (j < n) {
            vload<DISTIL_F32, VW>(sa, j, r.s[i]);
            vload<DISTIL_F32, VW>(sb, j, r.t[i]);
        } else {
#pragma unroll
            for (int k = 0; k < VW; k++) {
                r.s[i][k] = -INFINITY;
                r.t[i][k] = -INFINITY;
            }
        }
    }
}

/* The thread's maxima of its columns of zs and zt. */
template <int VW> __device__ inline void res_max(const res_regs<VW> &r, float *ma, float *mb) {
    float a = -INFINITY, b = -INFINITY;
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
#pragma unroll
        for (int k = 0; k < VW; k++) {
            a = fmaxf(a, r.s[i][k]);
            b = fmaxf(b, r.t[i][k]);
        }
    }
    *ma = a;
    *mb = b;
}

/* Sums of 2^((zs - ms) cx), 2^((zt - mt) cx) and, for tau != 1 (!UNIT), 2^((zs - ms) log2 e):
 * each vector summed in fp32, then added in double. */
template <int VW, bool UNIT>
__device__ inline void res_exp_sums(const res_params &p, const res_regs<VW> &r, float ms, float mt,
                                    double (&acc)[3]) {
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
        float sx = 0.0f, sy = 0.0f, sc = 0.0f;
#pragma unroll
        for (int k = 0; k < VW; k++) {
            sx += distil_exp2_ftz((r.s[i][k] - ms) * p.cx);
            sy += distil_exp2_ftz((r.t[i][k] - mt) * p.cx);
            if (!UNIT) {
                sc += distil_exp2_ftz((r.s[i][k] - ms) * DISTILL_ELEM_LOG2E);
            }
        }
        acc[0] += sx;
        acc[1] += sy;
        acc[2] += sc;
    }
}

/* Row statistics in base 2: x2 = (zs - ms) cx - lx, y2 = (zt - mt) cx - ly, s2 = (zs - ms) log2e
 * - lce; hw = weight_hard / n, sw = weight_soft / (n tau). */
struct res_row_stats {
    float ms, mt, lx, ly, lce, hw, sw;
};

/* The JSD terms once: sums of e2 and g into acc[0], acc[1]; with G wanted, P = hw s + sw g into
 * r.s and q into r.t. */
template <bool HAS_G, int VW, int MODE, bool UNIT>
__device__ inline void res_jsd(const res_params &p, const res_row_stats &st, res_regs<VW> &r,
                               double (&acc)[2]) {
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
        float se = 0.0f, sg = 0.0f;
#pragma unroll
        for (int k = 0; k < VW; k++) {
            const float x2 = (r.s[i][k] - st.ms) * p.cx - st.lx;
            const float y2 = (r.t[i][k] - st.mt) * p.cx - st.ly;
            const float q = distil_exp2_ftz(x2);
            float g;
            se += distill_elem_term<MODE>(p.elem, x2, y2, q, distil_exp2_ftz(y2), &g);
            sg += g;
            if (HAS_G) {
                const float s =
                    UNIT ? q : distil_exp2_ftz((r.s[i][k] - st.ms) * DISTILL_ELEM_LOG2E - st.lce);
                r.s[i][k] = st.hw * s + st.sw * g;
                r.t[i][k] = q;
            }
        }
        acc[0] += se;
        acc[1] += sg;
    }
}

/* res_jsd for the row's (mode, tau == 1): the branch is taken once per row. */
template <bool HAS_G, int VW>
__device__ inline void res_jsd_any(const res_params &p, const res_row_stats &st, res_regs<VW> &r,
                                   double (&acc)[2]) {
    if (p.unit_temp) {
        if (p.coef.mode == JSD_MIXED) {
            res_jsd<HAS_G, VW, JSD_MIXED, true>(p, st, r, acc);
        } else if (p.coef.mode == JSD_FORWARD_KL) {
            res_jsd<HAS_G, VW, JSD_FORWARD_KL, true>(p, st, r, acc);
        } else {
            res_jsd<HAS_G, VW, JSD_REVERSE_KL, true>(p, st, r, acc);
        }
    } else if (p.coef.mode == JSD_MIXED) {
        res_jsd<HAS_G, VW, JSD_MIXED, false>(p, st, r, acc);
    } else if (p.coef.mode == JSD_FORWARD_KL) {
        res_jsd<HAS_G, VW, JSD_FORWARD_KL, false>(p, st, r, acc);
    } else {
        res_jsd<HAS_G, VW, JSD_REVERSE_KL, false>(p, st, r, acc);
    }
}

/* G = P - kappa q - hw [column == lc] for the thread's columns, written to g (the slice's start);
 * lc is the label's column in the slice (may lie outside it). */
template <int GDT, int VW>
__device__ inline void res_store_grad(const res_regs<VW> &r, int n, float kappa, float hw,
                                      int64_t lc, void *g) {
    const int64_t d = lc - res_col<VW>(0); /* the label's offset from the thread's first column */
#pragma unroll
    for (int i = 0; i < RES_ELEMS / VW; i++) {
        const int j = res_col<VW>(i);
        if (j < n) {
            float o[VW];
#pragma unroll
            for (int k = 0; k < VW; k++) {
                o[k] = r.s[i][k] - kappa * r.t[i][k];
                o[k] -= d == RES_THREADS * VW * i + k ? hw : 0.0f;
            }
            vstore<GDT, VW>(g, j, o);
        }
    }
}

/* ----------------------------------------------------------------------------- one row */

/* Merge the blocks' (max, sums relative to it) in rank order on warp 0: each lane rescales one
 * block's sums to the row maxima (one exp2f per block: the rounding of one element term), then a
 * fixed-order warp sum in double. Lane 0 leaves the row's maxima and base-2 LSEs in sm.row. */
__device__ inline void res_merge_exp(const res_params &p, res_smem &sm) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    res_exp_slot b = {-INFINITY, -INFINITY, {0.0, 0.0, 0.0}};
    if (lane < p.cl) {
        b = *res_rank_ptr(p, &sm.xexp, lane);
    }
    float ms = b.ms, mt = b.mt;
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        ms = fmaxf(ms, distil_warp_xor(ms, o));
        mt = fmaxf(mt, distil_warp_xor(mt, o));
    }
    /* A block whose sum is 0 (its slice all -inf, or a lane past the cluster) adds nothing: skip
     * its factor, which is NaN when the maxima are -inf. A NaN sum (NaN logits, whose maximum
     * fmaxf may report as -inf) still propagates. */
    double sum[3];
    sum[0] = b.sum[0] != 0.0 ? b.sum[0] * static_cast<double>(exp2f((b.ms - ms) * p.cx)) : 0.0;
    sum[1] = b.sum[1] != 0.0 ? b.sum[1] * static_cast<double>(exp2f((b.mt - mt) * p.cx)) : 0.0;
    sum[2] = b.sum[2] != 0.0
                 ? b.sum[2] * static_cast<double>(exp2f((b.ms - ms) * DISTILL_ELEM_LOG2E))
                 : 0.0;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        sum[k] = warp_sum(sum[k]);
    }
    if (lane == 0) {
        sm.row[0] = static_cast<float>(log2(sum[0]));
        sm.row[1] = static_cast<float>(log2(sum[1]));
        sm.row[2] = p.unit_temp ? sm.row[0] : static_cast<float>(log2(sum[2]));
        sm.row[3] = ms;
        sm.row[4] = mt;
    }
}

/* Statistics of the row into st (one exchange): block maxima, sums of exponentials relative to
 * them, then the cluster merge. */
template <int VW>
__device__ inline void res_row_stats_of(const res_params &p, res_smem &sm, const res_regs<VW> &r,
                                        res_row_stats &st) {
    float ma, mb;
    res_max<VW>(r, &ma, &mb);
    float bms, bmt;
    res_block_max(sm, ma, mb, &bms, &bmt);
    double acc[3] = {0.0, 0.0, 0.0};
    /* An all -inf block slice would give NaN terms; its sums are 0. */
    const float ems = bms == -INFINITY ? 0.0f : bms, emt = bmt == -INFINITY ? 0.0f : bmt;
    if (p.unit_temp) {
        res_exp_sums<VW, true>(p, r, ems, emt, acc);
    } else {
        res_exp_sums<VW, false>(p, r, ems, emt, acc);
    }
    res_block_sums<3>(sm, acc, sm.xexp.sum);
    if (threadIdx.x == 0) {
        sm.xexp.ms = bms;
        sm.xexp.mt = bmt;
    }
    res_cluster_sync(p);
    if (threadIdx.x < DISTIL_GPU_WARP) {
        res_merge_exp(p, sm);
    }
    __syncthreads();
    st.lx = sm.row[0];
    st.ly = sm.row[1];
    st.lce = sm.row[2];
    st.ms = sm.row[3];
    st.mt = sm.row[4];
    const float nv = p.n_valid ? *p.n_valid : 1.0f;
    st.hw = nv > 0.0f ? p.weight_hard / nv : 0.0f;
    st.sw = nv > 0.0f ? p.weight_soft * p.inv_t / nv : 0.0f;
}

/* One row whose slice is in r: CE and JSD of the row (rank 0), G of the slice. */
template <int GDT, bool HAS_G, int VW>
__device__ inline void res_row(const res_params &p, res_smem &sm, res_regs<VW> &r, int64_t row,
                               int rank, int64_t c0, int n) {
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab + c0 : nullptr;
    const int64_t label = p.labels[row];
    if (label == p.ignore_index || label < 0 || label >= p.vocab) {
        if (label != p.ignore_index && rank == 0 && threadIdx.x == 0) {
            distill_record_bad_label(p.err, p.vocab, p.row_offset + row, label);
        }
        if (HAS_G) {
            distill_zero<GDT, VW>(g, 0, n);
        }
        if (rank == 0 && threadIdx.x == 0) {
            p.ce[row] = 0.0f;
            p.jsd[row] = 0.0f;
        }
        return;
    }
    /* Read before G may overwrite zs (in place, F32): the exchanges order it before any write. */
    const float z_label = rank == 0 && threadIdx.x == 0 ? p.zs[row * p.vocab + label] : 0.0f;
    res_row_stats st;
    res_row_stats_of<VW>(p, sm, r, st);
    double acc[2] = {0.0, 0.0};
    res_jsd_any<HAS_G, VW>(p, st, r, acc);
    double tot[2];
    res_row_sums<2>(p, sm, sm.xjsd, acc, tot);
    if (threadIdx.x == 0) {
        sm.row[0] = static_cast<float>(tot[1]) * st.sw; /* kappa = sw sum g */
        if (rank == 0) {
            p.ce[row] = (st.ms + st.lce * DISTILL_ELEM_LN2) - z_label;
            p.jsd[row] = static_cast<float>(tot[0] * DISTILL_ELEM_LN2);
        }
    }
    __syncthreads();
    if (HAS_G) { /* sm.row is next written after the next row's first exchange barrier */
        res_store_grad<GDT, VW>(r, n, sm.row[0], st.hw, label - c0, g);
    }
}

/* Grid: clusters of cl blocks, a persistent loop over rows (cluster k: rows k, k + K, ...). Each
 * block copies its slice of the cluster's next row into shared memory (cp.async) while it works
 * on the current one in registers. Dynamic shared memory: 2 * span floats. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(RES_THREADS, 2) distil_distill_resident_kernel(res_params p) {
    extern __shared__ float4 res_dyn[];
    __shared__ res_smem sm;
    float *sa = reinterpret_cast<float *>(res_dyn);
    float *sb = sa + p.span;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t c0 = p.span * rank < p.vocab ? p.span * rank : p.vocab;
    const int n = static_cast<int>(c0 + p.span < p.vocab ? p.span : p.vocab - c0);
    const int64_t clusters = gridDim.x / p.cl;
    int64_t row = blockIdx.x / p.cl;
    if (row < p.rows) {
        res_stage<VW>(p.zs + row * p.vocab + c0, p.zt + row * p.vocab + c0, n, sa, sb);
    }
    for (; row < p.rows; row += clusters) {
        res_regs<VW> r;
        res_take<VW>(sa, sb, n, r);
        const int64_t next = row + clusters;
        if (next < p.rows) {
            res_stage<VW>(p.zs + next * p.vocab + c0, p.zt + next * p.vocab + c0, n, sa, sb);
        }
        res_row<GDT, HAS_G, VW>(p, sm, r, row, rank, c0, n);
    }
    /* No block leaves while another may still read its statistics. */
    res_cluster_sync(p);
}

/* ------------------------------------------------------------------------------- host */

template <int GDT, bool HAS_G, int VW> static const void *res_kernel() {
    return reinterpret_cast<const void *>(&distil_distill_resident_kernel<GDT, HAS_G, VW>);
}

template <int VW> static const void *res_kernel_vw(distil_dtype gdt, bool has_g) {
    if (!has_g) {
        return res_kernel<DISTIL_F32, false, VW>();
    }
    return gdt == DISTIL_F32    ? res_kernel<DISTIL_F32, true, VW>()
           : gdt == DISTIL_BF16 ? res_kernel<DISTIL_BF16, true, VW>()
                                : res_kernel<DISTIL_F16, true, VW>();
}

static const void *res_kernel_of(distil_dtype gdt, bool has_g, int vw) {
    return vw == 4 ? res_kernel_vw<4>(gdt, has_g) : res_kernel_vw<1>(gdt, has_g);
}

/* Dynamic shared memory a block of the kernel may take on this device (its static part aside). */
static size_t res_max_dynamic(const gpu_state *b) {
    const size_t cap = b->smem_optin > sizeof(res_smem) ? b->smem_optin - sizeof(res_smem) : 0;
    const size_t most = static_cast<size_t>(RES_MAX_SPAN) * 2 * sizeof(float);
    return cap < most ? cap : most;
}

distil_status distill_resident_setup(gpu_state *b) {
    const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};
    for (int vw = 1; vw <= 4; vw += 3) {
        for (int has_g = 0; has_g < 2; has_g++) {
            for (distil_dtype d : dts) {
                const void *k = res_kernel_of(d, has_g != 0, vw);
                GPU_TRY(b,
                        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(res_max_dynamic(b))),
                        "distill_rows setup");
                if (b->cc_major >= 9) {
                    GPU_TRY(
                        b,
                        cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                        "distill_rows setup");
                }
            }
        }
    }
    return DISTIL_OK;
}

static cudaLaunchConfig_t res_config(int cl, unsigned grid, size_t bytes, cudaStream_t s,
                                     cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(RES_THREADS);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cl);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cl > 1 ? 1 : 0;
    return cfg;
}

/* Clusters (or, for cl == 1, blocks) of one launch that fit on the device at once; 0: none. */
static int res_resident_groups(const gpu_state *b, const void *kernel, int cl, size_t bytes) {
    if (cl == 1) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, RES_THREADS, bytes) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return per_sm * b->sm_count;
    }
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = res_config(cl, static_cast<unsigned>(cl), bytes, nullptr, attr);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Blocks per row the kernel may use: clusters need an sm_90+ device *and* device code compiled
 * for it (code built for an older target runs there without the cluster exchanges). */
static int res_max_cluster(const gpu_state *b, const void *kernel) {
    cudaFuncAttributes fa;
    if (b->cc_major < 9 || cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return fa.ptxVersion >= 90 ? 16 : 1;
}

/* The plan for (kernel, V): the fewest blocks per row whose slice fits in registers (at most
 * RES_MAX_SPAN columns) and of which a cluster can be resident. */
static void res_plan(const gpu_state *b, const void *kernel, int64_t vocab, resident_plan &pl) {
    const int max_cl = res_max_cluster(b, kernel);
    pl.cl = 0;
    for (int cl = 1; cl <= max_cl; cl *= 2) {
        const int64_t span = ((vocab + cl - 1) / cl + 3) / 4 * 4;
        const size_t bytes = static_cast<size_t>(span) * 2 * sizeof(float);
        if (span > RES_MAX_SPAN || bytes > res_max_dynamic(b)) {
            continue;
        }
        const int groups = res_resident_groups(b, kernel, cl, bytes);
        if (groups > 0) {
            pl.cl = cl;
            pl.span = span;
            pl.groups = groups;
            return;
        }
    }
}

cudaError_t distill_resident_launch(gpu_state *b, const distill_params &d, distil_dtype gdt,
                                    cudaStream_t s, bool *done) {
    *done = false;
    const bool vec = d.vocab % 4 == 0 && gpu_aligned(d.zs, 16) && gpu_aligned(d.zt, 16) &&
                     (d.g == nullptr || gpu_aligned(d.g, 16));
    const void *kernel = res_kernel_of(gdt, d.g != nullptr, vec ? 4 : 1);
    resident_plan &pl = b->resident;
    if (pl.kernel != kernel || pl.vocab != d.vocab) { /* occupancy queries: once per shape */
        res_plan(b, kernel, d.vocab, pl);
        pl.kernel = kernel;
        pl.vocab = d.vocab;
    }
    if (pl.cl == 0) {
        return cudaSuccess;
    }
    res_params p;
    static_cast<distill_params &>(p) = d;
    p.span = pl.span;
    p.cl = pl.cl;
    const int64_t groups = d.rows < pl.groups ? d.rows : pl.groups;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg =
        res_config(pl.cl, static_cast<unsigned>(groups * pl.cl),
                   static_cast<size_t>(pl.span) * 2 * sizeof(float), s, attr);
    void *args[] = {&p};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, kernel, args);
    *done = e == cudaSuccess;
    return e;
}

#else /* HIP: no cp.async or cluster launch here; the streaming kernel runs */

distil_status distill_resident_setup(gpu_state *) {
    return DISTIL_OK;
}

cudaError_t distill_resident_launch(gpu_state *, const distill_params &, distil_dtype, cudaStream_t,
                                    bool *done) {
    *done = false;
    return cudaSuccess;
}

#endif

} // namespace DISTIL_GPU_NS
