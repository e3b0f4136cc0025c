/*
 * fused_rows_resident.cu - fused_rows with each row resident on chip: the row's logits are
 * spread over a cluster of CL blocks (CL > 1 on sm_90+, else 1), each holding its slice of zs and
 * zt in shared memory, read from HBM once (an ignored row is not read at all). Two exchanges of
 * row statistics through distributed shared memory: the blocks' maxima with their sums of
 * exponentials relative to them, then the JSD sums. Each block pushes its value into every
 * block's slot for it (st.async, counted on the receiver's barrier), so an exchange is one
 * one-way trip with no cluster barrier and no fence (res_push_wait says why one slot per
 * exchange is enough). The element work is done once: the JSD pass
 * leaves P = hw s + sw g and q in shared memory in place of zs and zt, and the last pass writes
 * G = dz'/dz (P - kappa q), kappa = sw (sum g) (res_pass_grad says how each is rounded). Element
 * terms from div_math.cuh (x = log q), row sums in double. The student's entropy -sum q x
 * (docs/SPEC.md §6), when asked, is one more sum of the JSD pass and of its exchange.
 * Each thread owns the same vectors of the slice in every pass (t, t + T, t + 2T, ...), so the
 * slice itself needs no barrier; only the statistics do.
 *   zs, zt (rows, V) fp32 dense; labels (rows); ce, soft (rows) fp32; g (rows, V) optional.
 */
#include "fused_rows.cuh"

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_CLUSTERS /* CUDA: cp.async, cudaLaunchKernelExC; cl = 1 before sm_90 */

constexpr int RES_THREADS = 256;
constexpr int RES_WARPS = RES_THREADS / DISTIL_GPU_WARP;
constexpr int RES_MAX_CL = 16; /* the largest cluster res_plan tries (non-portable on sm_90) */
constexpr double RES_INV_LN2 = 1.4426950408889634074; /* 1 / ln 2 */
/* Largest slice of a block (zs + zt bytes), and the budgets tried in turn: a slice that lets
 * three blocks share an SM first (one computes while others load), then two, then one. */
constexpr size_t RES_MAX_SLICE = 200u << 10;
static const size_t RES_BUDGETS[] = {72u << 10, 110u << 10, RES_MAX_SLICE};

/* The kernel's arguments: the row pass's (fused_rows.cuh) and the plan's. */
struct res_params : fused_params {
    int64_t span; /* columns per block */
    int cl;       /* blocks per row (the cluster) */
};

/* Block statistics: per-warp partials; this block's value of each exchange (xexp, xsoft: written
 * by thread 0, read by its own warp 0, which pushes it to the cluster); the row's values,
 * broadcast to the block. */
struct alignas(16) res_exp_slot {
    float ms, mt;  /* the block's maxima of zs and zt */
    double sum[3]; /* its sums of exponentials relative to them (res_pass_exp) */
};
struct alignas(16) res_soft_slot {
    /* the block's sums of e, g and (entropy asked) -q x (res_pass_soft); the first 16 bytes alone
     * are pushed when the entropy is not asked (res_soft_words) */
    double sum[3];
};
static_assert(sizeof(res_soft_slot) == 32, "two 16-byte words");

/* 16-byte words of res_soft_slot pushed per block and row: the entropy's sum is the second. */
__device__ inline int res_soft_words(const fused_params &p) {
    return p.entropy != nullptr ? 2 : 1;
}
/* in_exp, in_soft: every block's value of each exchange, by rank (pushed, cl > 1); bar: one
 * barrier per exchange, a phase per row. */
struct res_smem {
    float wmax[2][RES_WARPS];
    double wsum[3][RES_WARPS];
    res_exp_slot xexp;
    res_soft_slot xsoft;
    res_exp_slot in_exp[RES_MAX_CL];
    res_soft_slot in_soft[RES_MAX_CL];
    unsigned long long bar[2];
    float row[5];
};

/* --------------------------------------------------------------- exchanges of statistics */

/* A barrier over the cluster (the kernel's first and last step; cl = 1: the block's). */
__device__ inline void res_cluster_sync(const res_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.cl > 1) {
        cooperative_groups::this_cluster().sync();
        return;
    }
#endif
    __syncthreads();
}

/* Before the first row: the two exchange barriers, made visible to the cluster. */
__device__ inline void res_exchange_init(const res_params &p, res_smem &sm) {
    if (p.cl > 1 && threadIdx.x == 0) {
        distil_cluster_bar_init(&sm.bar[0]);
        distil_cluster_bar_init(&sm.bar[1]);
    }
    res_cluster_sync(p);
}

/* At the start of a row (thread 0): both barriers expect the cluster's cl values. Their previous
 * phases are complete: thread 0's warp waited on them in the previous row. */
__device__ inline void res_exchange_arm(const res_params &p, res_smem &sm) {
    if (p.cl > 1 && threadIdx.x == 0) {
        distil_cluster_bar_arm(&sm.bar[0], static_cast<unsigned>(p.cl * sizeof(res_exp_slot)));
        distil_cluster_bar_arm(&sm.bar[1], static_cast<unsigned>(p.cl * 16 * res_soft_words(p)));
    }
}

/* One exchange, on warp 0: thread 0 has written this block's value `mine`; lane r < cl pushes its
 * first `words` 16-byte words into block r's in[rank], then the warp waits for the phase (parity
 * ph) in which all cl values have arrived. Returns the slots in rank order (cl = 1: mine, which
 * thread 0 itself wrote). The other warps wait at the caller's block barrier. One slot per block
 * and exchange is enough: a block pushes row k + 1's value of an exchange only after it has
 * received every block's value of the other exchange of row k, and each block pushes that only
 * after reading its slots of this exchange of row k (its push carries values computed from them),
 * so no push overwrites a slot that is still to be read. */
template <typename S>
__device__ inline const S *res_push_wait(const res_params &p, res_smem &sm, const S &mine, S *in,
                                         int which, unsigned ph,
                                         int words = static_cast<int>(sizeof(S) / 16)) {
    if (p.cl == 1) {
        return &mine;
    }
    static_assert(sizeof(S) % 16 == 0, "slots of 16-byte words");
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    __syncwarp();
    if (lane < p.cl) {
        const ulonglong2 *w = reinterpret_cast<const ulonglong2 *>(&mine);
        for (int k = 0; k < words; k++) {
            const ulonglong2 v = w[k];
            distil_cluster_push16(reinterpret_cast<char *>(&in[rank]) + 16 * k, &sm.bar[which],
                                  lane, v.x, v.y);
        }
    }
    distil_cluster_bar_wait(&sm.bar[which], ph & 1u);
    return in;
}

/* The block's sums of v[0..N) in double, fixed order, into slot[] by thread 0. */
template <int N> __device__ inline void res_block_sums(res_smem &sm, double (&v)[N], double *slot) {
    fused_warp_sums_to(sm.wsum, v);
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

/* The row sums of v[0..N) (e, g, and with N = 3 the entropy's -q x) in double over every block, in
 * a fixed order; lane 0 of warp 0 gets them in out[] (other threads: unspecified). Ends before any
 * thread reads sm.row. */
template <int N>
__device__ inline void res_row_sums_n(const res_params &p, res_smem &sm, unsigned ph,
                                      double (&v)[N], double (&out)[N]) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int warp = threadIdx.x / DISTIL_GPU_WARP;
    res_block_sums<N>(sm, v, sm.xsoft.sum);
    if (warp == 0) {
        const res_soft_slot *in = res_push_wait(p, sm, sm.xsoft, sm.in_soft, 1, ph, N > 2 ? 2 : 1);
#pragma unroll
        for (int k = 0; k < N; k++) {
            out[k] = warp_sum(lane < p.cl ? in[lane].sum[k] : 0.0);
        }
    }
}

/* The same for v[0..2), and v[2] too where the entropy is asked (res_soft_words: its push). */
__device__ inline void res_row_sums(const res_params &p, res_smem &sm, unsigned ph, double (&v)[3],
                                    double (&out)[3]) {
    if (p.entropy != nullptr) { /* uniform */
        res_row_sums_n<3>(p, sm, ph, v, out);
        return;
    }
    double v2[2] = {v[0], v[1]};
    double o2[2];
    res_row_sums_n<2>(p, sm, ph, v2, o2);
    out[0] = o2[0];
    out[1] = o2[1];
    out[2] = 0.0;
}

/* ------------------------------------------------------------------------ element work */

/* Calls f(a, b, j) on each of the thread's vectors of the slice: VW columns [j, j + VW) of zs (a)
 * and zt (b) read from shared memory, j = VW t, VW (t + T), ... (the same columns in every pass).
 */
template <int VW, typename F>
__device__ __forceinline__ void res_for_vectors(const float *sa, const float *sb, int n, F &&f) {
    for (int j = threadIdx.x * VW; j < n; j += RES_THREADS * VW) {
        float a[VW], b[VW];
        vload<DISTIL_F32, VW>(sa, j, a);
        vload<DISTIL_F32, VW>(sb, j, b);
        f(a, b, j);
    }
}

/* Pass 1: the thread's maxima of its columns of zs and zt. */
template <int VW>
__device__ inline void res_pass_max(const float *sa, const float *sb, int n, float *ma, float *mb) {
    float a = -INFINITY;
    float b = -INFINITY;
    res_for_vectors<VW>(sa, sb, n, [&](const float(&x)[VW], const float(&y)[VW], int) {
#pragma unroll
        for (int k = 0; k < VW; k++) {
            a = fmaxf(a, x[k]);
            b = fmaxf(b, y[k]);
        }
    });
    *ma = a;
    *mb = b;
}

/* Pass 2: sums of 2^((zs - ms) cx), 2^((zt - mt) cy) and, for tau != 1 (!UNIT),
 * 2^((zs - ms) log2 e). Vectors of VW summed in fp32, then added in double, except a vector
 * holding the block's maximum (row_add_exps). */
template <int VW, bool UNIT>
__device__ inline void res_pass_exp(const res_params &p, const float *sa, const float *sb, int n,
                                    float ms, float mt, double (&acc)[3]) {
    res_for_vectors<VW>(sa, sb, n, [&](const float(&x)[VW], const float(&y)[VW], int) {
        const auto ex = [](float t) { return distil_exp2_ftz(t); };
        const bool hx = fused_vec_has(x, ms);
        row_add_exps(acc[0], x, ms, p.cx, hx, ex);
        row_add_exps(acc[1], y, mt, p.cy, fused_vec_has(y, mt), ex);
        if (!UNIT) {
            row_add_exps(acc[2], x, ms, FUSED_LOG2E, hx, ex);
        }
    });
}

/* Row statistics: x = (zs - ms) / tau - lx, y = (zt - mt) / tau - ly (natural logs), log2 s =
 * (zs - ms) log2e - lce; hw = weight_hard / n, sw = weight_soft / (n tau). */
struct res_row_stats {
    float ms, mt, lx, ly, lce, hw, sw;
    float sm1; /* the label's s - 1 (fused_label_sm1) */
};

/* Pass 3: the JSD terms once (the finite form where a vector's log-probabilities are finite,
 * div_with_sv); with G wanted, P = hw s + sw g into sa (one rounding: a fused
 * multiply-add onto hw s) and q into sb (in place). Sums of e and, with G wanted, g (in double)
 * go to acc[0], acc[1]. lc: the label's column in the slice (-1: not in it), where P is hw (s - 1)
 * + sw g with s - 1 the row's st.sm1 (fused_label_sm1), taken before the soft part is added, so
 * that a confident correct label (s = 1 in fp32) keeps the soft part whole (adding hw s + sw g
 * before taking hw off kept it to an ulp of hw).
 * ENT: the student's entropy terms -q x (docs/SPEC.md §6) go to acc[2], as one fused multiply-add
 * per element onto the vector's fp32 sum of q x, added to the double sum once per vector: the
 * terms share one sign (x <= 0: lx >= 0, zs <= ms), so the fp32 sum of VW of them is good to a
 * few ulp of itself. A term with q == 0 adds 0, as in the streaming kernel (x may then be -inf or
 * NaN: only where the vector is not all finite, so the finite form needs no select). */
template <bool HAS_G, int VW, int MODE, bool UNIT, bool ENT>
__device__ inline void res_pass_soft(const res_params &p, const res_row_stats &st, float *sa,
                                     float *sb, int n, int lc, double (&acc)[3]) {
    res_for_vectors<VW>(sa, sb, n, [&](const float(&a)[VW], const float(&b)[VW], int j) {
        float x[VW], y[VW], pv[VW], qv[VW];
        float qx = 0.0f; /* ENT: the vector's sum of q x */
        fused_logp(p, st, a, b, x, y);
        div_with_sv(x, y, [&](auto sv) {
#pragma unroll
            for (int k = 0; k < VW; k++) {
                float g, q;
                acc[0] += div_elem_q<MODE, decltype(sv)::value>(p.coef, x[k], y[k], &g, &q);
                if (ENT) {
                    qx = !decltype(sv)::value || q > 0.0f ? fmaf(q, x[k], qx) : qx;
                }
                if (HAS_G) { /* the loss alone needs no g: its terms are left out */
                    acc[1] += g;
                    const float s =
                        UNIT ? q : distil_exp2_ftz((a[k] - st.ms) * FUSED_LOG2E - st.lce);
                    pv[k] = fmaf(st.sw, g, st.hw * (j + k == lc ? st.sm1 : s));
                    qv[k] = q;
                }
            }
        });
        if (ENT) {
            acc[2] -= qx;
        }
        if (HAS_G) {
            vstore<DISTIL_F32, VW>(sa, j, pv);
            vstore<DISTIL_F32, VW>(sb, j, qv);
        }
    });
}

/* Pass 4: G = f (P - kappa q) for the slice, written to g + c0; f = dz'/dz of the student's head
 * (docs/SPEC.md §6), read here from dz (the slice's, or nullptr: f = 1). Where the Jacobian's sum
 * is large (docs/SPEC.md §3), P and kappa q nearly cancel at the mode (q ~ 1), and every rounding
 * of either is a rounding of |kappa|, far above G: so kappa comes as an unevaluated sum kh + kl
 * of floats (the double product sw sum g, not rounded to fp32), the products with q are fused,
 * and f multiplies the difference, not P and q each (that was 4 roundings of |kappa| where the
 * streaming kernel's g - q sum g makes 2: grad_xs 3x the streaming kernel's error, 8.6x the
 * careful evaluation's, on an H200, docs/GPU-NOTES.md "Fused row pass"). */
template <int GDT, int VW>
__device__ inline void res_pass_grad(const float *sa, const float *sb, int n, float kh, float kl,
                                     const float *dz, void *g, int64_t c0) {
    res_for_vectors<VW>(sa, sb, n, [&](const float(&a)[VW], const float(&b)[VW], int j) {
        float o[VW];
#pragma unroll
        for (int k = 0; k < VW; k++) {
            o[k] = fmaf(-kl, b[k], fmaf(-kh, b[k], a[k]));
            if (dz != nullptr) { /* uniform */
                o[k] *= dz[j + k];
            }
        }
        vstore<GDT, VW>(g, c0 + j, o);
    });
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

/* Merge the blocks' (max, sums relative to it) in rank order on warp 0: each lane rescales one
 * block's sums to the row maxima (one exp2f per block: the rounding of one element term), then a
 * fixed-order warp sum in double. Lane 0 leaves the row's maxima and LSEs (natural for x and y,
 * base 2 for the CE's s) in sm.row. */
__device__ inline void res_merge_exp(const res_params &p, res_smem &sm, const res_exp_slot *in) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    res_exp_slot b = {-INFINITY, -INFINITY, {0.0, 0.0, 0.0}};
    if (lane < p.cl) {
        b = in[lane];
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
    sum[1] = b.sum[1] != 0.0 ? b.sum[1] * static_cast<double>(exp2f((b.mt - mt) * p.cy)) : 0.0;
    sum[2] =
        b.sum[2] != 0.0 ? b.sum[2] * static_cast<double>(exp2f((b.ms - ms) * FUSED_LOG2E)) : 0.0;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        sum[k] = warp_sum(sum[k]);
    }
    /* The three logarithms on three lanes at once (every lane holds the sums): the merge is
     * what the block's other warps wait for. log2 s as ln s / ln 2 in double, then rounded. */
    if (lane < 3) {
        const double v = lane == 0 ? sum[0] : lane == 1 ? sum[1] : p.unit_temp ? sum[0] : sum[2];
        const double l = log(v);
        sm.row[lane] = static_cast<float>(lane == 2 ? l * RES_INV_LN2 : l);
    }
    if (lane == 0) {
        sm.row[3] = ms;
        sm.row[4] = mt;
    }
}

/* Statistics of the row into st (one exchange): block maxima, sums of exponentials relative to
 * them, then the cluster merge. */
template <int VW>
__device__ inline void res_row_stats_of(const res_params &p, res_smem &sm, const float *sa,
                                        const float *sb, int n, unsigned ph, res_row_stats &st) {
    /* st.hw and st.sw are the caller's (the same for every row). */
    float ma, mb;
    res_pass_max<VW>(sa, sb, n, &ma, &mb);
    float bms = ma, bmt = mb;
    fused_block_max(sm.wmax, RES_WARPS, bms, bmt);
    double acc[3] = {0.0, 0.0, 0.0};
    /* An all -inf block slice would give NaN terms; its sums are 0. */
    const float ems = bms == -INFINITY ? 0.0f : bms, emt = bmt == -INFINITY ? 0.0f : bmt;
    if (p.unit_temp) {
        res_pass_exp<VW, true>(p, sa, sb, n, ems, emt, acc);
    } else {
        res_pass_exp<VW, false>(p, sa, sb, n, ems, emt, acc);
    }
    res_block_sums<3>(sm, acc, sm.xexp.sum);
    if (threadIdx.x == 0) {
        sm.xexp.ms = bms;
        sm.xexp.mt = bmt;
    }
    if (threadIdx.x < DISTIL_GPU_WARP) {
        res_merge_exp(p, sm, res_push_wait(p, sm, sm.xexp, sm.in_exp, 0, ph));
    }
    __syncthreads();
    st.lx = sm.row[0];
    st.ly = sm.row[1];
    st.lce = sm.row[2];
    st.ms = sm.row[3];
    st.mt = sm.row[4];
}

/* The row's slice of zs and zt copied in (res_load_issue), or nothing for an ignored row. */
template <int VW>
__device__ inline bool res_row_load(const res_params &p, int64_t row, int64_t label, int64_t c0,
                                    int n, float *sa, float *sb) {
    if (row < 0 || row >= p.rows || !fused_label_valid(p, label)) {
        return false;
    }
    res_load_issue<VW>(p.zs + row * p.vocab + c0, p.zt + row * p.vocab + c0, n, sa, sb);
    return true;
}

/* One row: `loaded` says whether its copy is already under way (issued by the previous row);
 * the next row's (next, next_label) copy is issued as soon as this thread's last pass over the
 * slice is done (the loss alone: after the JSD pass, so that it overlaps the second exchange;
 * with G: after the G pass). Returns whether it was issued. ph: the valid rows done before.
 * Inlined by force: with the JSD pass in two forms (with and without the entropy) the compiler
 * made it a call (VW 4 with G: 128 registers and a stack frame, so 2 blocks per SM, not the first
 * budget's 3); inlined, ptxas -v gives 80 there against 72 without the entropy (3 blocks need at
 * most 80), and no kernel loses a block per SM. */
template <int GDT, bool HAS_G, int VW>
__device__ __forceinline__ bool res_row(const res_params &p, res_smem &sm, float *sa, float *sb,
                                        int64_t row, int64_t label, int64_t next,
                                        int64_t next_label, bool loaded, int rank, int64_t c0,
                                        int n, unsigned ph, res_row_stats st) {
    const float *zs = p.zs + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    const bool lead = rank == 0 && threadIdx.x == 0; /* writes the row's results */
    if (!fused_label_valid(p, label)) {              /* no copy: nothing to read */
        fused_ignored_row<GDT, HAS_G, VW>(p, row, g, c0, n, lead);
        return false;
    }
    if (!loaded) {
        res_row_load<VW>(p, row, label, c0, n, sa, sb);
    }
    res_exchange_arm(p, sm);
    /* docs/SPEC.md §6: the slice's dz'/dz of the student's head, or nullptr */
    const float *dzs = p.dz != nullptr ? p.dz + row * p.vocab + c0 : nullptr;
    /* Read before G may overwrite zs (in place, F32): every thread consumes it (st.sm1 in the JSD
     * pass) before the barriers that precede its block's second push, and G is written only
     * after every block's second push has arrived. */
    const float z_label = zs[label];
    res_load_wait<VW>();
    res_row_stats_of<VW>(p, sm, sa, sb, n, ph, st);
    st.sm1 = fused_label_sm1(z_label, st.ms, st.lce);
    double acc[3] = {0.0, 0.0, 0.0};
    const int64_t lc = label - c0; /* the label's column in this block's slice */
    const int lcol = lc >= 0 && lc < n ? static_cast<int>(lc) : -1;
    fused_with_mode_unit(p, [&](auto mode, auto unit) {
        const auto pass = [&](auto ent) {
            res_pass_soft<HAS_G, VW, decltype(mode)::value, decltype(unit)::value,
                          decltype(ent)::value>(p, st, sa, sb, n, lcol, acc);
        };
        if (p.entropy != nullptr) { /* uniform; docs/SPEC.md §6 student entropy */
            pass(std::true_type{});
        } else {
            pass(std::false_type{});
        }
    });
    bool issued = false;
    if (!HAS_G) { /* the slice is no longer read: the next row's copy overlaps the exchange */
        issued = res_row_load<VW>(p, next, next_label, c0, n, sa, sb);
    }
    double tot[3];
    res_row_sums(p, sm, ph, acc, tot);
    if (threadIdx.x == 0) {
        const double kappa = static_cast<double>(st.sw) * tot[1]; /* sw sum g, as kh + kl */
        sm.row[0] = static_cast<float>(kappa);
        sm.row[1] = static_cast<float>(kappa - static_cast<double>(sm.row[0]));
        if (lead) {
            fused_row_results(p, row, st.ms, st.lce, z_label, tot[0]);
            if (p.entropy != nullptr) {
                p.entropy[row] = static_cast<float>(tot[2]);
            }
        }
    }
    __syncthreads();
    if (HAS_G) { /* sm.row is next written after the next row's first exchange */
        res_pass_grad<GDT, VW>(sa, sb, n, sm.row[0], sm.row[1], dzs, g, c0);
        issued = res_row_load<VW>(p, next, next_label, c0, n, sa, sb);
    }
    return issued;
}

/* Grid: clusters of cl blocks, a persistent loop over rows (cluster k: rows k, k + K, ...).
 * Dynamic shared memory: 2 * span floats. */
template <int GDT, bool HAS_G, int VW>
__global__ void __launch_bounds__(RES_THREADS) distil_fused_resident_kernel(res_params p) {
    extern __shared__ float4 res_dyn[];
    __shared__ res_smem sm;
    float *sa = reinterpret_cast<float *>(res_dyn);
    float *sb = sa + p.span;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t c0 = p.span * rank < p.vocab ? p.span * rank : p.vocab;
    const int n = static_cast<int>(c0 + p.span < p.vocab ? p.span : p.vocab - c0);
    const int64_t clusters = gridDim.x / p.cl;
    res_row_stats w = {}; /* the weights over n, read once: n is the same for every row */
    fused_weights(p, &w.hw, &w.sw);
    int64_t row = blockIdx.x / p.cl;
    int64_t label = row < p.rows ? p.labels[row] : 0;
    res_exchange_init(p, sm);
    bool loaded = false; /* this row's copy was issued by the previous one */
    unsigned ph = 0;     /* valid rows done: the exchange barriers' phase */
    for (; row < p.rows; row += clusters) {
        /* The next row's label is read a row ahead: its latency no longer starts each row. */
        const int64_t next = row + clusters;
        const int64_t next_label = next < p.rows ? p.labels[next] : 0;
        const bool valid = fused_label_valid(p, label);
        loaded = res_row<GDT, HAS_G, VW>(p, sm, sa, sb, row, label, next, next_label, loaded, rank,
                                         c0, n, ph, w);
        ph += valid ? 1u : 0u;
        label = next_label;
    }
    /* No block leaves while another may still push into its shared memory. */
    res_cluster_sync(p);
}

/* ------------------------------------------------------------------------------- host */

template <int GDT, bool HAS_G, int VW> static const void *res_kernel() {
    return reinterpret_cast<const void *>(&distil_fused_resident_kernel<GDT, HAS_G, VW>);
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

distil_status fused_resident_setup(gpu_state *b) {
    const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};
    for (int vw = 1; vw <= 4; vw += 3) {
        for (int has_g = 0; has_g < 2; has_g++) {
            for (distil_dtype d : dts) {
                const void *k = res_kernel_of(d, has_g != 0, vw);
                GPU_TRY(b,
                        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(res_max_dynamic(b))),
                        "fused_rows setup");
                if (b->cc_major >= 9) {
                    GPU_TRY(
                        b,
                        cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                        "fused_rows setup");
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

cudaError_t fused_resident_launch(gpu_state *b, const fused_params &d, distil_dtype gdt,
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
    static_cast<fused_params &>(p) = d;
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

distil_status fused_resident_setup(gpu_state *) {
    return DISTIL_OK;
}

cudaError_t fused_resident_launch(gpu_state *, const fused_params &, distil_dtype, cudaStream_t,
                                  bool *done) {
    *done = false;
    return cudaSuccess;
}

#endif

} // namespace DISTIL_GPU_NS
