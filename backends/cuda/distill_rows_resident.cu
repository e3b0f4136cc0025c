/*
 * distill_rows_resident.cu - distill_rows with each row resident on chip: the row's logits are
 * spread over a cluster of CL blocks (CL > 1 on sm_90+, else 1), each holding its slice of zs and
 * zt in shared memory, read from HBM once. Two exchanges of row statistics through distributed
 * shared memory: the blocks' maxima with their sums of exponentials relative to them (each
 * thread's found online in one pass), then the JSD sums. After each exchange barrier every warp
 * merges the cluster's slots itself, so no block barrier follows. The element work is done once:
 * the JSD pass leaves P = hw s + sw g and q in shared memory in place of zs and zt, and the last
 * pass writes G = P - sw (sum g) q. Math in base 2 (x2 = log2 q), row sums in double.
 * Each thread owns the same vectors of the slice in every pass (t, t + T, t + 2T, ...), so the
 * slice itself needs no barrier; only the statistics do.
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, jsd (rows) fp32; g (rows, V) optional.
 */
#include "distill_elem.cuh"
#include "distill_rows.cuh"

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_CLUSTERS /* CUDA: cp.async, cudaLaunchKernelExC; cl = 1 before sm_90 */

constexpr int RES_THREADS = 256;
constexpr int RES_WARPS = RES_THREADS / DISTIL_GPU_WARP;
/* Largest slice of a block (zs + zt bytes), and the budgets tried in turn: a slice that lets
 * three blocks share an SM first (one computes while others load), then two, then one. */
constexpr size_t RES_MAX_SLICE = 200u << 10;
static const size_t RES_BUDGETS[] = {72u << 10, 110u << 10, RES_MAX_SLICE};

/* The kernel's arguments: the row pass's (distill_rows.cuh) and the plan's. */
struct res_params : distill_params {
    int64_t span; /* columns per block */
    int cl;       /* blocks per row (the cluster) */
};

/* Statistics of some columns of a row (a thread's, a warp's, a block's or the whole row's): the
 * maxima of zs and zt and sums of exponentials relative to them: sum[0] of 2^((zs - ms) cx),
 * sum[1] of 2^((zt - mt) cx), sum[2] of 2^((zs - ms) log2 e) (tau != 1 only). */
struct res_part {
    float ms, mt;
    double sum[3];
};

/* Block state: the warps' parts; this block's part and JSD sums, read by the whole cluster (one
 * slot per exchange: a block may write the next exchange's while others still read this one's);
 * the warps' JSD sums. */
struct res_smem {
    res_part wpart[RES_WARPS];
    double wsum[2][RES_WARPS];
    res_part xexp;
    double xjsd[2];
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

__device__ inline res_part res_part_empty() {
    res_part e = {-INFINITY, -INFINITY, {0.0, 0.0, 0.0}};
    return e;
}

/* s 2^((m - to) c), s a sum relative to m: 0 for s == 0 (the factor is NaN when m = to = -inf),
 * NaN for a NaN s (NaN logits, which fmaxf leaves out of the maxima). */
__device__ __forceinline__ double res_rescale(double s, float m, float to, float c) {
    return s != 0.0 ? s * static_cast<double>(exp2f((m - to) * c)) : 0.0;
}

/* The part of the union of a's and b's columns. Commutative bit for bit, so every lane of a
 * butterfly ends with the same bits. */
__device__ inline res_part res_part_merge(const res_params &p, const res_part &a,
                                          const res_part &b) {
    res_part r;
    r.ms = fmaxf(a.ms, b.ms);
    r.mt = fmaxf(a.mt, b.mt);
    r.sum[0] = res_rescale(a.sum[0], a.ms, r.ms, p.cx) + res_rescale(b.sum[0], b.ms, r.ms, p.cx);
    r.sum[1] = res_rescale(a.sum[1], a.mt, r.mt, p.cx) + res_rescale(b.sum[1], b.mt, r.mt, p.cx);
    r.sum[2] = res_rescale(a.sum[2], a.ms, r.ms, DISTILL_ELEM_LOG2E) +
               res_rescale(b.sum[2], b.ms, r.ms, DISTILL_ELEM_LOG2E);
    return r;
}

/* The merge of every lane's part, in every lane (xor butterfly). */
__device__ inline res_part res_warp_merge(const res_params &p, res_part a) {
#pragma unroll
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        res_part b;
        b.ms = distil_warp_xor(a.ms, o);
        b.mt = distil_warp_xor(a.mt, o);
#pragma unroll
        for (int k = 0; k < 3; k++) {
            b.sum[k] = distil_warp_xor(a.sum[k], o);
        }
        a = res_part_merge(p, a, b);
    }
    return a;
}

/* The block's part (of the threads' parts t) into sm.xexp, by warp 0 after one barrier. */
__device__ inline void res_block_part(const res_params &p, res_smem &sm, res_part t) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    t = res_warp_merge(p, t);
    if (lane == 0) {
        sm.wpart[warp] = t;
    }
    __syncthreads();
    if (warp == 0) {
        t = res_warp_merge(p, lane < RES_WARPS ? sm.wpart[lane] : res_part_empty());
        if (lane == 0) {
            sm.xexp = t;
        }
    }
}

/* The row's part, after the exchange barrier: every warp reads the cluster's slots itself (lane
 * r < cl reads rank r's), so no barrier follows. */
__device__ inline res_part res_row_part(const res_params &p, res_smem &sm) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    return res_warp_merge(p, lane < p.cl ? *res_rank_ptr(p, &sm.xexp, lane) : res_part_empty());
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

/* The row sums of v[0..N) in double over every block, in a fixed order, in every thread: each
 * warp reads the cluster's slots itself after the exchange barrier. */
template <int N>
__device__ inline void res_row_sums(const res_params &p, res_smem &sm, double *slot, double (&v)[N],
                                    double (&out)[N]) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    res_block_sums<N>(sm, v, slot);
    res_cluster_sync(p);
#pragma unroll
    for (int k = 0; k < N; k++) {
        out[k] = warp_sum(lane < p.cl ? res_rank_ptr(p, slot, lane)[k] : 0.0);
    }
}

/* ------------------------------------------------------------------------ element work */

/* Pass 1, online: the thread's part of its columns. A vector whose maximum exceeds the running
 * one first rescales the sums (rarely after the first vectors); sums of VW terms in fp32, then
 * added in double. */
template <int VW, bool UNIT>
__device__ inline res_part res_pass_stats(const res_params &p, const float *sa, const float *sb,
                                          int n) {
    res_part t = res_part_empty();
    for (int j = threadIdx.x * VW; j < n; j += RES_THREADS * VW) {
        float x[VW], y[VW];
        vload<DISTIL_F32, VW>(sa, j, x);
        vload<DISTIL_F32, VW>(sb, j, y);
        float vx = x[0], vy = y[0];
#pragma unroll
        for (int k = 1; k < VW; k++) {
            vx = fmaxf(vx, x[k]);
            vy = fmaxf(vy, y[k]);
        }
        if (vx > t.ms) {
            t.sum[0] = res_rescale(t.sum[0], t.ms, vx, p.cx);
            t.sum[2] = UNIT ? 0.0 : res_rescale(t.sum[2], t.ms, vx, DISTILL_ELEM_LOG2E);
            t.ms = vx;
        }
        if (vy > t.mt) {
            t.sum[1] = res_rescale(t.sum[1], t.mt, vy, p.cx);
            t.mt = vy;
        }
        /* While every column so far is -inf, its terms are 0 relative to 0 (not NaN). */
        const float ms = t.ms == -INFINITY ? 0.0f : t.ms, mt = t.mt == -INFINITY ? 0.0f : t.mt;
        float sx = 0.0f, sy = 0.0f, sc = 0.0f;
#pragma unroll
        for (int k = 0; k < VW; k++) {
            sx += distil_exp2_ftz((x[k] - ms) * p.cx);
            sy += distil_exp2_ftz((y[k] - mt) * p.cx);
            if (!UNIT) {
                sc += distil_exp2_ftz((x[k] - ms) * DISTILL_ELEM_LOG2E);
            }
        }
        t.sum[0] += sx;
        t.sum[1] += sy;
        t.sum[2] += sc;
    }
    return t;
}

/* Row statistics in base 2: x2 = (zs - ms) cx - lx, y2 = (zt - mt) cx - ly, s2 = (zs - ms) log2e
 * - lce; hw = weight_hard / n, sw = weight_soft / (n tau). */
struct res_row_stats {
    float ms, mt, lx, ly, lce, hw, sw;
};

/* Pass 3: the JSD terms once; with G wanted, P into sa and q into sb (in place). Sums of e2 and
 * g go to acc[0], acc[1]. */
template <bool HAS_G, int VW, int MODE, bool UNIT>
__device__ inline void res_pass_jsd(const res_params &p, const res_row_stats &st, float *sa,
                                    float *sb, int n, double (&acc)[2]) {
    for (int j = threadIdx.x * VW; j < n; j += RES_THREADS * VW) {
        float a[VW], b[VW];
        vload<DISTIL_F32, VW>(sa, j, a);
        vload<DISTIL_F32, VW>(sb, j, b);
        float se = 0.0f, sg = 0.0f;
#pragma unroll
        for (int k = 0; k < VW; k++) {
            const float x2 = (a[k] - st.ms) * p.cx - st.lx;
            const float y2 = (b[k] - st.mt) * p.cx - st.ly;
            const float q = distil_exp2_ftz(x2);
            float g;
            se += distill_elem_term<MODE>(p.elem, x2, y2, q, distil_exp2_ftz(y2), &g);
            sg += g;
            if (HAS_G) {
                const float s =
                    UNIT ? q : distil_exp2_ftz((a[k] - st.ms) * DISTILL_ELEM_LOG2E - st.lce);
                a[k] = st.hw * s + st.sw * g;
                b[k] = q;
            }
        }
        if (HAS_G) {
            vstore<DISTIL_F32, VW>(sa, j, a);
            vstore<DISTIL_F32, VW>(sb, j, b);
        }
        acc[0] += se;
        acc[1] += sg;
    }
}

/* res_pass_jsd for the row's (mode, tau == 1): the branch is taken once per row. */
template <bool HAS_G, int VW>
__device__ inline void res_pass_jsd_any(const res_params &p, const res_row_stats &st, float *sa,
                                        float *sb, int n, double (&acc)[2]) {
    if (p.unit_temp) {
        if (p.coef.mode == JSD_MIXED) {
            res_pass_jsd<HAS_G, VW, JSD_MIXED, true>(p, st, sa, sb, n, acc);
        } else if (p.coef.mode == JSD_FORWARD_KL) {
            res_pass_jsd<HAS_G, VW, JSD_FORWARD_KL, true>(p, st, sa, sb, n, acc);
        } else {
            res_pass_jsd<HAS_G, VW, JSD_REVERSE_KL, true>(p, st, sa, sb, n, acc);
        }
    } else if (p.coef.mode == JSD_MIXED) {
        res_pass_jsd<HAS_G, VW, JSD_MIXED, false>(p, st, sa, sb, n, acc);
    } else if (p.coef.mode == JSD_FORWARD_KL) {
        res_pass_jsd<HAS_G, VW, JSD_FORWARD_KL, false>(p, st, sa, sb, n, acc);
    } else {
        res_pass_jsd<HAS_G, VW, JSD_REVERSE_KL, false>(p, st, sa, sb, n, acc);
    }
}

/* Pass 4: G = P - kappa q for the slice, written to g + c0. */
template <int GDT, int VW>
__device__ inline void res_pass_grad(const float *sa, const float *sb, int n, float kappa, void *g,
                                     int64_t c0) {
    for (int j = threadIdx.x * VW; j < n; j += RES_THREADS * VW) {
        float a[VW], b[VW];
        vload<DISTIL_F32, VW>(sa, j, a);
        vload<DISTIL_F32, VW>(sb, j, b);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            a[k] -= kappa * b[k];
        }
        vstore<GDT, VW>(g, c0 + j, a);
    }
}

/* ----------------------------------------------------------------------------- one row */

/* Start copying the thread's vectors of the slice, global -> shared (each thread later reads only
 * its own, so res_load_wait needs no barrier). */
template <int VW>
__device__ inline void res_load_issue(const float *zs, const float *zt, int n, float *sa,
                                      float *sb) {
    for (int j = threadIdx.x * VW; j < n; j += RES_THREADS * VW) {
        if (VW == 4) {
            distil_cp_async16(sa + j, zs + j);
            distil_cp_async16(sb + j, zt + j);
        } else {
            sa[j] = zs[j];
            sb[j] = zt[j];
        }
    }
}

template <int VW> __device__ inline void res_load_wait() {
    if (VW == 4) {
        distil_cp_async_wait_all();
    }
}

/* log2 of a positive sum as a float: its exponent plus log2f of its mantissa (about as exact as
 * rounding the double log2; 0 gives -inf, NaN stays NaN). */
__device__ inline float res_log2(double s) {
    int e;
    const double m = frexp(s, &e);
    return static_cast<float>(e) + log2f(static_cast<float>(m));
}

/* Statistics of the row into st (one exchange): the threads' online parts, the block's part, the
 * cluster's merge in every warp. st.hw and st.sw are the caller's (the same for every row). */
template <int VW>
__device__ inline void res_row_stats_of(const res_params &p, res_smem &sm, const float *sa,
                                        const float *sb, int n, res_row_stats &st) {
    res_block_part(p, sm,
                   p.unit_temp ? res_pass_stats<VW, true>(p, sa, sb, n)
                               : res_pass_stats<VW, false>(p, sa, sb, n));
    res_cluster_sync(p);
    const res_part r = res_row_part(p, sm);
    /* Lanes 0, 1, 2 take one logarithm each; the warp shares them. */
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const float l = res_log2(lane == 0 ? r.sum[0] : (lane == 1 ? r.sum[1] : r.sum[2]));
    st.lx = distil_warp_bcast(l, 0);
    st.ly = distil_warp_bcast(l, 1);
    st.lce = p.unit_temp ? st.lx : distil_warp_bcast(l, 2);
    st.ms = r.ms;
    st.mt = r.mt;
}

template <int GDT, bool HAS_G, int VW>
__device__ inline void res_row(const res_params &p, res_smem &sm, float *sa, float *sb, int64_t row,
                               int64_t label, int rank, int64_t c0, int n, res_row_stats st) {
    const float *zs = p.zs + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    res_load_issue<VW>(zs + c0, p.zt + row * p.vocab + c0, n, sa, sb);
    if (label == p.ignore_index || label < 0 || label >= p.vocab) {
        res_load_wait<VW>(); /* the next row's copies reuse the slots */
        if (label != p.ignore_index && rank == 0 && threadIdx.x == 0) {
            distill_record_bad_label(p.err, p.vocab, p.row_offset + row, label);
        }
        if (HAS_G) {
            distill_zero<GDT, VW>(g, c0, n);
        }
        if (rank == 0 && threadIdx.x == 0) {
            p.ce[row] = 0.0f;
            p.jsd[row] = 0.0f;
        }
        return;
    }
    /* Read before G may overwrite zs (in place, F32): the exchanges order it before any write. */
    const float z_label = rank == 0 && threadIdx.x == 0 ? zs[label] : 0.0f;
    res_load_wait<VW>();
    res_row_stats_of<VW>(p, sm, sa, sb, n, st);
    double acc[2] = {0.0, 0.0};
    res_pass_jsd_any<HAS_G, VW>(p, st, sa, sb, n, acc);
    const int64_t lc = label - c0; /* the label's column: its owner takes hw off P there */
    if (HAS_G && lc >= 0 && lc < n && (lc / VW) % RES_THREADS == threadIdx.x) {
        sa[lc] -= st.hw;
    }
    double tot[2];
    res_row_sums<2>(p, sm, sm.xjsd, acc, tot);
    if (rank == 0 && threadIdx.x == 0) {
        p.ce[row] = (st.ms + st.lce * DISTILL_ELEM_LN2) - z_label;
        p.jsd[row] = static_cast<float>(tot[0] * DISTILL_ELEM_LN2);
    }
    if (HAS_G) { /* kappa = sw sum g */
        res_pass_grad<GDT, VW>(sa, sb, n, static_cast<float>(tot[1]) * st.sw, g, c0);
    }
}

/* Grid: clusters of cl blocks, a persistent loop over rows (cluster k: rows k, k + K, ...).
 * Dynamic shared memory: 2 * span floats. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(RES_THREADS) distil_distill_resident_kernel(res_params p) {
    extern __shared__ float4 res_dyn[];
    __shared__ res_smem sm;
    float *sa = reinterpret_cast<float *>(res_dyn);
    float *sb = sa + p.span;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t c0 = p.span * rank < p.vocab ? p.span * rank : p.vocab;
    const int n = static_cast<int>(c0 + p.span < p.vocab ? p.span : p.vocab - c0);
    const int64_t clusters = gridDim.x / p.cl;
    res_row_stats w = {}; /* the weights over n, read once: n is the same for every row */
    const float nv = p.n_valid ? *p.n_valid : 1.0f;
    w.hw = nv > 0.0f ? p.weight_hard / nv : 0.0f;
    w.sw = nv > 0.0f ? p.weight_soft * p.inv_t / nv : 0.0f;
    int64_t row = blockIdx.x / p.cl;
    int64_t label = row < p.rows ? p.labels[row] : 0;
    for (; row < p.rows; row += clusters) {
        /* The next row's label is read a row ahead: its latency no longer starts each row. */
        const int64_t next_label = row + clusters < p.rows ? p.labels[row + clusters] : 0;
        res_row<GDT, HAS_G, VW>(p, sm, sa, sb, row, label, rank, c0, n, w);
        label = next_label;
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
    return cap < RES_MAX_SLICE ? cap : RES_MAX_SLICE;
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

/* The plan for (kernel, V): the fewest blocks per row whose slice fits the first budget that
 * some cluster size meets. */
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

static void res_plan(const gpu_state *b, const void *kernel, int64_t vocab, resident_plan &pl) {
    const int max_cl = res_max_cluster(b, kernel);
    const size_t max_bytes = res_max_dynamic(b);
    pl.cl = 0;
    for (size_t budget : RES_BUDGETS) {
        for (int cl = 1; cl <= max_cl; cl *= 2) {
            const int64_t span = ((vocab + cl - 1) / cl + 3) / 4 * 4;
            const size_t bytes = static_cast<size_t>(span) * 2 * sizeof(float);
            if (bytes > budget || bytes > max_bytes) {
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
