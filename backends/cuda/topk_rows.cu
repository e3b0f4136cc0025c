/*
 * topk_rows.cu - the row pass of the cached top-k teacher (docs/SPEC.md §7) for cuda and hip:
 * one block per row, which checks its row's ids (a bad row is ignored, and its index goes to the
 * label word's topk_row by atomicMin: deterministic, the minimum of the rows), then
 * one block that records the first bad row like count_valid records a label. A valid row:
 *   slots   x_j, y_j of the k slots in shared memory (k <= TOPK_MAX)
 *   pass 1  the fused loss's fp32 logits: the ids' entries set to -inf, then one online pass
 *           (running max, sums rescaled) of the tail Q_t at tau and at 1 (CE), summed directly
 *           (no 1 - Q_K), the slots' terms added at the block's max (topk_student_logits); the
 *           log-prob form (read only): max, then A = sum exp(x - m), Q_t = A - S_K with S_K the
 *           very terms of A at the ids (topk_student_logp, two reads)
 *   then    the k (+ 1) element terms of distil_elem.h, the row constants of distil_topk.h
 *   pass 2  G over V (off K), then the slots' entries of G rewritten (on K)
 * Two reads of the row (three in the log-prob form) and one write of G: less than the dense
 * kernel's three passes over zs and zt. The logits form reads and writes vectors of 4 columns
 * where the row's layout allows (topk_launch) and takes one exponential per element at tau = 1. G
 * may overwrite x (fp32, in place): the slots' logits are kept in shared memory first.
 */
#include "gpu_state.cuh"
#include "dtype.cuh"
#include "div_math.cuh"
#include "reduce.cuh"
#include "row_sums.cuh"

namespace DISTIL_GPU_NS {

#define DE_LOG(a)   logf(a)
#define DE_EXPM1(a) expm1f(a)
#include "math/distil_topk.h"

constexpr int TOPK_THREADS = 256;
/* Blocks per SM that the compiler must fit for the logits form at tau = 1 (registers <= 40 at 256
 * threads, no spills): 6 rows of a chunk per SM instead of 4 at its own 64 registers, -11% on the
 * row kernel on an H200 (docs/GPU-NOTES.md, "Cached top-k"). At tau != 1 (two exponentials
 * and two double sums per element) 40 registers spill, and the log-prob form is not the fused
 * loss's: both are left to the compiler. */
constexpr int TOPK_MIN_BLOCKS = 6;
constexpr int TOPK_MAX = 1024;
constexpr long long TOPK_NONE = 0x7fffffffffffffffLL;

struct topk_params {
    void *x; /* (rows, vocab) XDT, row stride x_stride */
    int64_t x_stride;
    bool logits;
    const void *ids, *tlogp; /* (rows, k) */
    bool ids_i64;
    int tdt; /* dtype of tlogp */
    int64_t k, pad_id;
    int tail;
    int64_t rows, vocab, row0;
    const int64_t *labels; /* optional */
    int64_t ignore_index;
    div_coef coef;
    float inv_t, weight_hard, weight_soft;
    float *ce, *soft; /* ce optional */
    void *g;          /* optional, GDT, row stride g_stride */
    int64_t g_stride;
    const float *n_valid; /* optional */
    gpu_label_error *err;
};

__device__ __forceinline__ int64_t topk_id(const topk_params &p, int64_t i) {
    return p.ids_i64 ? static_cast<const int64_t *>(p.ids)[i]
                     : static_cast<int64_t>(static_cast<const int32_t *>(p.ids)[i]);
}

__device__ __forceinline__ float topk_y(const topk_params &p, int64_t i) {
    switch (p.tdt) {
    case DISTIL_BF16:
        return load1<DISTIL_BF16>(p.tlogp, i);
    case DISTIL_F16:
        return load1<DISTIL_F16>(p.tlogp, i);
    default:
        return load1<DISTIL_F32>(p.tlogp, i);
    }
}

/* The row's ids into shared memory. */
__device__ void topk_load_ids(const topk_params &p, int64_t row, int64_t *sid) {
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        sid[j] = topk_id(p, row * p.k + j);
    }
    __syncthreads();
}

/* The first bad slot (TOPK_NONE: none): an id outside [0, vocab) other than pad_id, or the
 * second of two equal ids. Every thread gets it. */
__device__ long long topk_first_bad(const topk_params &p, const int64_t *sid, long long *scratch) {
    long long bad = TOPK_NONE;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        const int64_t id = sid[j];
        bool b = id != p.pad_id && (id < 0 || id >= p.vocab);
        for (int64_t u = 0; id != p.pad_id && !b && u < j; u++) {
            b = sid[u] == id;
        }
        bad = b && bad == TOPK_NONE ? j : bad;
    }
    return block_min(bad, scratch);
}

/* One block, after the row blocks: the first bad row they found (err->topk_row), its first bad
 * id found again, recorded unless an error is recorded already (a label found by count_valid,
 * or an earlier chunk's or call's); then topk_row is cleared for the next launch. */
__global__ void __launch_bounds__(TOPK_THREADS) topk_commit_kernel(topk_params p) {
    __shared__ int64_t sid[TOPK_MAX];
    __shared__ long long scratch[DISTIL_GPU_MAX_WARPS];
    const unsigned long long first = p.err->topk_row;
    if (first == ~0ull) {
        return; /* uniform */
    }
    const int64_t row = static_cast<int64_t>(first) - p.row0;
    topk_load_ids(p, row, sid);
    const long long bad = topk_first_bad(p, sid, scratch);
    if (threadIdx.x == 0) {
        if (p.err->row < 0 && bad != TOPK_NONE) {
            const long long id = sid[bad];
            p.err->row = static_cast<long long>(first);
            p.err->label = id;
            p.err->vocab = p.vocab;
            p.err->kind = (id < 0 || id >= p.vocab) ? 1 : 2;
        }
        p.err->topk_row = ~0ull;
    }
}

struct topk_smem {
    int64_t sid[TOPK_MAX];
    float sz[TOPK_MAX], sg[TOPK_MAX];
    double dscr[DISTIL_GPU_MAX_WARPS];
    float fscr[DISTIL_GPU_MAX_WARPS];
    long long lscr[DISTIL_GPU_MAX_WARPS];
};

/* The log-prob form's row sums (x as given, read only): pass 1 m = max x, pass 2 A = sum exp(x -
 * m) in double; Q_t is then A - S_K with S_K the same terms at the ids (topk_student_logp). */
template <int XDT>
__device__ void topk_row_sums(const void *xr, int64_t n, topk_smem &sm, float *m, double *a) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        mx = fmaxf(mx, load1<XDT>(xr, j));
    }
    mx = -block_min(-mx, sm.fscr);
    *m = mx;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        s += expf(load1<XDT>(xr, j) - mx);
    }
    *a = block_sum(s, sm.dscr);
}

/* One thread's online (max, sums) of its elements of a row of fp32 logits: mx the running max of
 * z, s = sum exp((z - mx) it) and s1 = sum exp(z - mx) in double. A new max rescales both sums
 * by exp(old - new) in double (rare: a thread's running max rises O(log n) times on a row in
 * random order). Elements come in vectors of VW (topk_for_vectors), each vector's terms added by
 * row_add_exps (in fp32, or in double in the vector that holds the running max). While the max is
 * -inf the terms are taken relative to 0: an element of -inf adds 0 (exp(-inf - -inf) would be
 * NaN); NaN fails every compare and makes the sums NaN; +inf makes its term NaN, as the two-pass
 * form (max, then sums) did. UNIT (it == 1): s1 is s, not summed. */
struct topk_online {
    float mx = -INFINITY;
    double s = 0.0, s1 = 0.0;
};

/* expf as an object, for row_add_exps. */
struct topk_exp {
    __device__ __forceinline__ float operator()(float t) const {
        return expf(t);
    }
};

template <int VW, bool UNIT>
__device__ __forceinline__ void topk_online_add(topk_online &o, const float (&v)[VW], float it) {
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VW; k++) {
        vm = fmaxf(vm, v[k]);
    }
    if (vm > o.mx) {
        o.s *= exp(static_cast<double>(o.mx * it) - static_cast<double>(vm * it));
        if (!UNIT) {
            o.s1 *= exp(static_cast<double>(o.mx) - static_cast<double>(vm));
        }
        o.mx = vm;
    }
    const float r = o.mx == -INFINITY ? 0.0f : o.mx;
    row_add_exps(o.s, v, r, UNIT ? 1.0f : it, vm == r, topk_exp{}); /* (it is 1 at UNIT) */
    if (!UNIT) {
        row_add_exps(o.s1, v, r, 1.0f, vm == r, topk_exp{});
    }
}

/* Calls f(v, j) on each vector of VW columns [j, j + VW) of the row z that this thread owns (j =
 * VW t, VW (t + T), ...: the same columns in both passes), two vectors loaded before the first is
 * used. z aligned to VW floats, n a multiple of VW. */
template <int VW, typename F>
__device__ __forceinline__ void topk_for_vectors(const float *z, int64_t n, F f) {
    constexpr int UNROLL = 2;
    const int64_t step = static_cast<int64_t>(blockDim.x) * VW;
    for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VW; j0 < n; j0 += step * UNROLL) {
        float a[UNROLL][VW];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (j0 + u * step < n) {
                vload<DISTIL_F32, VW>(z, j0 + u * step, a[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (j0 + u * step < n) {
                f(a[u], j0 + u * step);
            }
        }
    }
}

/* What the row pass needs of the student: lnorm (x it - lnorm are the log-probs; 0 for the
 * log-prob form), lse1 (the log-sum-exp at temperature 1, for CE; 0 for the log-prob form) and
 * Q_t (renormalise's log Q_K is topk_slots_lse's, in the log domain). */
struct topk_student {
    float lnorm, lse1, qt;
};

/* The log-prob form: two reads of the row (topk_row_sums), Q_t = A - S_K with S_K the very terms
 * of A at the ids, so that the difference is the tail summed (no 1 - Q_K). */
template <int XDT>
__device__ topk_student topk_student_logp(const topk_params &p, const void *xr, topk_smem &sm) {
    float m;
    double a, sk = 0.0;
    topk_row_sums<XDT>(xr, p.vocab, sm, &m, &a);
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        sk += sm.sid[j] == p.pad_id ? 0.0f : expf(sm.sz[j] - m); /* the very terms of A */
    }
    sk = block_sum(sk, sm.dscr);
    const double scale = exp(static_cast<double>(m));
    return {0.0f, 0.0f, static_cast<float>(fmax(a - sk, 0.0) * scale)};
}

/* The fused loss's fp32 logits z, one read of the row: the ids' entries (their logits already in
 * sm.sz) are set to -inf in z (G overwrites z afterwards anyway), so that one online pass
 * (topk_online) sums the tail Q_t directly at both temperatures (no 1 - Q_K, no A - S_K between
 * sums of differently rounded terms) and finds the max of the rest; the slots' terms are added at
 * the block's max. A row of -inf only gives NaN sums, as the two-pass form did. */
template <int VW, bool UNIT>
__device__ topk_student topk_student_logits(const topk_params &p, float *zr, float it,
                                            topk_smem &sm) {
    float smax = -INFINITY;
    __syncthreads(); /* every thread has read z_label and its slots' logits */
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        if (sm.sid[j] != p.pad_id) {
            smax = fmaxf(smax, sm.sz[j]);
            zr[sm.sid[j]] = -INFINITY;
        }
    }
    __syncthreads(); /* the marks are seen by the whole block */
    topk_online o;
    topk_for_vectors<VW>(
        zr, p.vocab, [&](const float(&v)[VW], int64_t) { topk_online_add<VW, UNIT>(o, v, it); });
    if (UNIT) {
        o.s1 = o.s; /* it == 1: the same terms */
    }
    const float mx = -block_min(-fmaxf(o.mx, smax), sm.fscr);
    const float m = mx * it; /* it > 0 */
    /* a thread that saw no finite element has s = 0 (or NaN, kept): its factor is not needed */
    double at = o.s == 0.0 ? 0.0 : o.s * exp(static_cast<double>(o.mx * it) - m);
    double at1 = o.s1 == 0.0 ? 0.0 : o.s1 * exp(static_cast<double>(o.mx) - mx);
    double sk = 0.0, sk1 = 0.0;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        sk += sm.sid[j] == p.pad_id ? 0.0f : expf(sm.sz[j] * it - m);
        sk1 += sm.sid[j] == p.pad_id ? 0.0f : expf(sm.sz[j] - mx);
    }
    at = block_sum(at, sm.dscr);
    at1 = block_sum(at1, sm.dscr);
    sk = block_sum(sk, sm.dscr);
    sk1 = block_sum(sk1, sm.dscr);
    const double a = mx == -INFINITY ? NAN : at + sk, a1 = mx == -INFINITY ? NAN : at1 + sk1;
    const float lnorm = m + static_cast<float>(log(a));
    const double scale = exp(static_cast<double>(m) - static_cast<double>(lnorm));
    return {lnorm, mx + static_cast<float>(log(a1)), static_cast<float>(at * scale)};
}

/* q = exp(v it - lnorm), the student's soft probability; s = exp(v - lse1) its probability at
 * temperature 1 (the logits form: CE; 0 otherwise). UNIT (it == 1, the logits form): lnorm and
 * lse1 are the same number (topk_student_logits), so q is s. */
template <bool UNIT>
__device__ __forceinline__ void topk_probs(const topk_params &p, float v, float it, float lnorm,
                                           float lse1, float *s, float *q) {
    *s = p.logits ? expf(v - lse1) : 0.0f;
    *q = UNIT ? *s : expf(v * it - lnorm);
}

/* G at columns [j, j + VW) off K (topk_row_grad's vector path). */
template <int GDT, int VW, bool UNIT>
__device__ __forceinline__ void
topk_grad_vector(const topk_params &p, const float (&v)[VW], int64_t j, void *gr, int64_t label,
                 float it, float lnorm, float lse1, float a_off, float gh, float gsi) {
    float g[VW];
#pragma unroll
    for (int k = 0; k < VW; k++) {
        float s, q;
        topk_probs<UNIT>(p, v[k], it, lnorm, lse1, &s, &q);
        g[k] = dk_g_off(gh, gsi, s, j + k == label ? 1.0f : 0.0f, q, a_off);
    }
    vstore<GDT, VW>(gr, j, g);
}

/* log Q_K: the log-sum-exp of the student's log-probs x_j = z_j it - lnorm over the used slots,
 * in the log domain (Q_K underflows where the student puts almost no mass on the ids,
 * distil_topk.h); -inf, +inf or NaN maxima are the result itself, as cpu_topk_lse. Uniform. */
__device__ float topk_slots_lse(const topk_params &p, topk_smem &sm, float it, float lnorm) {
    float xm = -INFINITY;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        xm = sm.sid[j] != p.pad_id ? fmaxf(xm, sm.sz[j] * it - lnorm) : xm;
    }
    xm = -block_min(-xm, sm.fscr);
    if (!(xm > -INFINITY && xm < INFINITY)) {
        return xm;
    }
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        const float x = sm.sz[j] * it - lnorm;
        sum += sm.sid[j] != p.pad_id ? exp(static_cast<double>(x) - static_cast<double>(xm)) : 0.0;
    }
    sum = block_sum(sum, sm.dscr);
    return static_cast<float>(static_cast<double>(xm) + log(sum));
}

/* G over the row: every entry by the off-K formula, then the slots' entries (on K). VW > 1 (the
 * logits form, xr and gr aligned to VW elements, V a multiple of VW): VW columns per load and
 * store, in topk_for_vectors' order. */
template <int XDT, int GDT, int VW, bool UNIT>
__device__ void topk_row_grad(const topk_params &p, const void *xr, void *gr, int64_t label,
                              topk_smem &sm, float it, float lnorm, float lse1, float c_on,
                              float a_off, float gh, float gsi) {
    if constexpr (VW > 1) {
        static_assert(XDT == DISTIL_F32, "vectors are the logits form's");
        topk_for_vectors<VW>(static_cast<const float *>(xr), p.vocab,
                             [&](const float(&v)[VW], int64_t j) {
                                 topk_grad_vector<GDT, VW, UNIT>(p, v, j, gr, label, it, lnorm,
                                                                 lse1, a_off, gh, gsi);
                             });
    } else {
        for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) {
            float s, q;
            topk_probs<UNIT>(p, load1<XDT>(xr, j), it, lnorm, lse1, &s, &q);
            const float oh = p.logits && j == label ? 1.0f : 0.0f;
            store1<GDT>(gr, j, dk_g_off(gh, gsi, s, oh, q, a_off));
        }
    }
    __syncthreads(); /* the off-K writes of the ids' entries come first */
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        const int64_t id = sm.sid[j];
        if (id != p.pad_id) {
            float s, q;
            topk_probs<UNIT>(p, sm.sz[j], it, lnorm, lse1, &s, &q);
            const float oh = p.logits && id == label ? 1.0f : 0.0f;
            store1<GDT>(gr, id, dk_g_on(gh, gsi, s, oh, sm.sg[j], q, c_on));
        }
    }
}

/* The ignored row: losses 0, G 0. */
template <int GDT> __device__ void topk_row_zero(const topk_params &p, int64_t row, void *gr) {
    if (threadIdx.x == 0) {
        p.soft[row] = 0.0f;
        if (p.ce != nullptr) {
            p.ce[row] = 0.0f;
        }
    }
    for (int64_t j = threadIdx.x; gr != nullptr && j < p.vocab; j += blockDim.x) {
        store1<GDT>(gr, j, 0.0f);
    }
}

/* One block per row. VW, UNIT: the logits form's vectors and it == 1 (topk_launch); 1, false for
 * the log-prob form. MINB: blocks per SM for __launch_bounds__ (TOPK_MIN_BLOCKS, or 1). */
template <int XDT, int GDT, int VW, bool UNIT, int MINB>
__global__ void __launch_bounds__(TOPK_THREADS, MINB) topk_rows_kernel(topk_params p) {
    __shared__ topk_smem sm;
    const int64_t row = blockIdx.x;
    const void *xr = static_cast<const typename dt_traits<XDT>::T *>(p.x) + row * p.x_stride;
    void *gr = p.g ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.g_stride : nullptr;
    const int64_t label = p.labels ? p.labels[row] : -1;
    bool skip =
        p.labels && (label == p.ignore_index || (p.logits && (label < 0 || label >= p.vocab)));
    topk_load_ids(p, row, sm.sid); /* every row's ids are checked, ignored rows' too */
    if (topk_first_bad(p, sm.sid, sm.lscr) != TOPK_NONE) {
        skip = true;
        if (threadIdx.x == 0) {
            atomicMin(&p.err->topk_row, static_cast<unsigned long long>(p.row0 + row));
        }
    }
    if (skip) { /* uniform over the block */
        topk_row_zero<GDT>(p, row, gr);
        return;
    }
    const float it = p.logits ? p.inv_t : 1.0f;
    const float z_label = p.logits && label >= 0 ? load1<XDT>(xr, label) : 0.0f;
    float ym = -INFINITY;
    long long used = 0;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        const bool pad = sm.sid[j] == p.pad_id;
        sm.sz[j] = pad ? -INFINITY : load1<XDT>(xr, sm.sid[j]);
        ym = fmaxf(ym, pad ? -INFINITY : topk_y(p, row * p.k + j));
        used += pad ? 0 : 1;
    }
    ym = -block_min(-ym, sm.fscr);
    used = block_sum(used, sm.lscr);
    /* the fused loss's logits are fp32 and the pass's own (XDT = F32): marked in place */
    const topk_student st =
        p.logits
            ? topk_student_logits<VW, UNIT>(p, static_cast<float *>(const_cast<void *>(xr)), it, sm)
            : topk_student_logp<XDT>(p, xr, sm);
    const float lnorm = st.lnorm, lse1 = st.lse1, qt = st.qt;
    double ys = 0.0;
    /* As cpu_topk_lse: a maximum of -inf (every used slot's teacher log-prob -inf), +inf or NaN
     * is the log-sum-exp itself (exp(y - ym) would be exp(NaN) there). ym is uniform. Else, as
     * cpu_topk_teacher_lse, log P_K = ym + log1p(the other slots' exp(y - ym)) in double (ties
     * with ym count 1 each): P_t = 1 - P_K cancels where the slots hold nearly all the mass. */
    const bool ym_finite = ym > -INFINITY && ym < INFINITY;
    long long ties = 0;
    if (ym_finite) {
        for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
            const float y = topk_y(p, row * p.k + j);
            const bool used_j = sm.sid[j] != p.pad_id;
            ties += used_j && y == ym ? 1 : 0;
            ys += used_j && y != ym ? exp(static_cast<double>(y) - static_cast<double>(ym)) : 0.0;
        }
        ys = block_sum(ys, sm.dscr);
        ties = block_sum(ties, sm.lscr);
    }
    const float lqk = p.tail == DK_RENORM ? topk_slots_lse(p, sm, it, lnorm) : 0.0f;
    const float lpk = ym_finite ? static_cast<float>(static_cast<double>(ym) +
                                                     log1p(static_cast<double>(ties - 1) + ys))
                                : ym;
    double se = 0.0, sg = 0.0;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        float gj = 0.0f;
        if (sm.sid[j] != p.pad_id) {
            const float xj = sm.sz[j] * it - lnorm;
            se += dk_slot_elem(&p.coef, p.tail, xj, topk_y(p, row * p.k + j), lqk, lpk, &gj);
        }
        sm.sg[j] = gj;
        sg += gj;
    }
    float loss = static_cast<float>(block_sum(se, sm.dscr));
    const float sum_g = static_cast<float>(block_sum(sg, sm.dscr));
    float g_t = 0.0f, q;
    if (p.tail != DK_RENORM) {
        loss += de_elem(p.coef.mode, &p.coef, logf(qt), dk_tail_y(p.tail, lpk, used == p.vocab),
                        &g_t, &q);
    }
    if (threadIdx.x == 0) {
        p.soft[row] = loss;
        if (p.ce != nullptr) {
            p.ce[row] = p.labels ? lse1 - z_label : 0.0f;
        }
    }
    if (gr == nullptr) {
        return;
    }
    const float n = p.n_valid ? *p.n_valid : 1.0f;
    const float gh = n == 0.0f ? 0.0f : p.weight_hard / n;
    const float gsi = n == 0.0f ? 0.0f : p.weight_soft / n * it;
    float c_on, a_off;
    dk_grad_consts(p.tail, p.logits, sum_g, g_t, qt, &c_on, &a_off);
    if (n == 0.0f) {
        c_on = a_off = 0.0f; /* the gradient is 0 (an infinite a_off times gsi = 0 is NaN) */
    }
    __syncthreads(); /* every thread has read the row's logits it needs before G overwrites them */
    if (p.tail == DK_RENORM) {
        /* renormalise's on-K term q'_j c_on with q'_j = q_j / Q_K from log Q_K (distil_topk.h),
         * taken into the slots' g here (each thread its own slots, as topk_row_grad reads them),
         * so that log Q_K is not live through the gradient pass */
        for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
            sm.sg[j] -= dk_slot_q(p.tail, sm.sz[j] * it - lnorm, lqk) * c_on;
        }
        c_on = 0.0f;
    }
    topk_row_grad<XDT, GDT, VW, UNIT>(p, xr, gr, label, sm, it, lnorm, lse1, c_on, a_off, gh, gsi);
}

static topk_params topk_params_of(gpu_state *b, const distil_topk_rows_args *a) {
    topk_params p;
    p.x = distil_dptr_addr(a->x);
    p.x_stride = a->x_stride;
    p.logits = a->logits;
    p.ids = distil_dptr_addr(a->t.ids);
    p.tlogp = distil_dptr_addr(a->t.logp);
    p.ids_i64 = a->t.ids_i64;
    p.tdt = a->t.logp_dtype;
    p.k = a->t.k;
    p.pad_id = a->t.pad_id;
    p.tail = a->t.tail;
    p.rows = a->rows;
    p.vocab = a->vocab;
    p.row0 = a->row0;
    p.labels = gpu_ptr<const int64_t>(a->labels);
    p.ignore_index = a->ignore_index;
    p.coef = div_coef_make(a->divergence, a->beta, a->alpha);
    p.inv_t = a->inv_temperature;
    p.weight_hard = a->weight_hard;
    p.weight_soft = a->weight_soft;
    p.ce = gpu_ptr<float>(a->ce_rows);
    p.soft = gpu_ptr<float>(a->soft_rows);
    p.g = distil_dptr_addr(a->g);
    p.g_stride = a->g_stride;
    p.n_valid = gpu_ptr<const float>(a->n_valid);
    p.err = b->label_err;
    return p;
}

template <int XDT, int GDT, int VW, bool UNIT, int MINB>
static cudaError_t topk_launch_as(const topk_params &p, cudaStream_t s) {
    topk_rows_kernel<XDT, GDT, VW, UNIT, MINB>
        <<<static_cast<unsigned>(p.rows), TOPK_THREADS, 0, s>>>(p);
    return cudaGetLastError();
}

/* The logits form (fp32, the pass's own buffer) by vectors of 4 where V, both row strides and
 * both bases allow, and with one exponential per element at it == 1; the log-prob form
 * (XDT = GDT, the caller's strides) element by element. */
template <int GDT> static cudaError_t topk_launch(const topk_params &p, cudaStream_t s) {
    if (!p.logits) {
        return topk_launch_as<GDT, GDT, 1, false, 1>(p, s);
    }
    constexpr int GB = static_cast<int>(sizeof(typename dt_traits<GDT>::T));
    const bool vec = p.vocab % 4 == 0 && p.x_stride % 4 == 0 && gpu_aligned(p.x, 16) &&
                     (p.g == nullptr || (p.g_stride % 4 == 0 && gpu_aligned(p.g, 4 * GB)));
    const bool unit = p.inv_t == 1.0f;
    if (vec) {
        return unit ? topk_launch_as<DISTIL_F32, GDT, 4, true, TOPK_MIN_BLOCKS>(p, s)
                    : topk_launch_as<DISTIL_F32, GDT, 4, false, 1>(p, s);
    }
    return unit ? topk_launch_as<DISTIL_F32, GDT, 1, true, TOPK_MIN_BLOCKS>(p, s)
                : topk_launch_as<DISTIL_F32, GDT, 1, false, 1>(p, s);
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(topk_rows)(void *vb, const distil_topk_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > 0x7fffffff || a->t.k > TOPK_MAX) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "topk: %lld rows, k %lld: the %s backend takes at most 2^31 - 1 "
                                "rows and k <= %d per call",
                                (long long)a->rows, (long long)a->t.k, DISTIL_GPU_NAME, TOPK_MAX);
    }
    const topk_params p = topk_params_of(b, a);
    gpu_device_guard guard(b);
    const cudaError_t e = dt_dispatch(a->g_dtype, [&](auto g) {
        constexpr int G = decltype(g)::value;
        return topk_launch<G>(p, b->lane.stream);
    });
    if (e != cudaSuccess) {
        return gpu_fail(b, e, "topk_rows");
    }
    topk_commit_kernel<<<1, TOPK_THREADS, 0, b->lane.stream>>>(p);
    return gpu_check_launch(b, "topk_rows (bad ids)");
}
