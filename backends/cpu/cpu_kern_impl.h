/*
 * cpu_kern_impl.h - the row kernels of the cpu backend, as a template over the vector width.
 *
 * Included by cpu_kern_{generic,avx2,avx512}.c, which define CPU_VW (lanes) and CPU_KTABLE (the
 * name of the exported table) and are compiled with their own ISA flags. A row is walked in tiles
 * of CPU_TILE fp32 values: fp32 data is used in place, bf16/fp16 data and ragged tails are
 * converted into stack tiles first (tails padded with -inf, which every formula maps to 0).
 * Sums are taken per tile in fp32 lanes and carried across tiles in double.
 */
#include "cpu_internal.h"
#include "cpu_vmath.h"
#include "half.h"

#include <math.h>
#include <stdalign.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define CPU_TILE 512

static inline int64_t k_round_up(int64_t n) {
    return (n + CPU_VW - 1) / CPU_VW * CPU_VW;
}

/* ------------------------------------------------------------------ dtype conversion */

static inline vf k_f16_to_f32(vh h) {
#if CPU_VW == 16 && defined(__AVX512F__)
    return (vf)_mm512_cvtph_ps((__m256i)h);
#elif CPU_VW == 8 && defined(__F16C__)
    return (vf)_mm256_cvtph_ps((__m128i)h);
#else
    /* Put the 15 magnitude bits under the fp32 exponent and rescale by 2^(127-15): exact for
     * normals and subnormals. Inf/NaN (exponent 31) get the fp32 all-ones exponent instead. */
    vu u = __builtin_convertvector(h, vu);
    vu em = u & 0x7fffu;
    vf f = (vf)(em << 13) * 0x1p112f;
    f = vf_sel((vi)(em >= 0x7c00u), (vf)((em << 13) | 0x7f800000u), f);
    return (vf)((vu)f | ((u & 0x8000u) << 16));
#endif
}

/* Round to nearest even; NaN stays a quiet NaN (as half.h). */
static inline vh k_f32_to_bf16(vf f) {
    vu u = (vu)f;
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
    r = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
    return __builtin_convertvector(r, vh);
}

static void k_to_f32(distil_dtype dt, const void *src, float *dst, int64_t n) {
    if (dt == DISTIL_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)src;
    int64_t i = 0;
    for (; i + CPU_VW <= n; i += CPU_VW) {
        vh v;
        memcpy(&v, h + i, sizeof v);
        vf f = dt == DISTIL_BF16 ? (vf)(__builtin_convertvector(v, vu) << 16) : k_f16_to_f32(v);
        vf_store(dst + i, f);
    }
    for (; i < n; i++) {
        dst[i] = dt == DISTIL_BF16 ? distil_bf16_to_f32(h[i]) : distil_f16_to_f32(h[i]);
    }
}

static void k_f32_to_f16(const float *src, uint16_t *h, int64_t n) {
    int64_t i = 0;
#if CPU_VW == 16 && defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)(h + i), v);
    }
#elif CPU_VW == 8 && defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
        __m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(h + i), v);
    }
#endif
    for (; i < n; i++) {
        h[i] = distil_f32_to_f16(src[i]);
    }
}

static void k_from_f32(distil_dtype dt, const float *src, void *dst, int64_t n) {
    if (dt == DISTIL_F32) {
        memmove(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    if (dt == DISTIL_F16) {
        k_f32_to_f16(src, h, n);
        return;
    }
    int64_t i = 0;
    for (; i + CPU_VW <= n; i += CPU_VW) {
        vh v = k_f32_to_bf16(vf_load(src + i));
        memcpy(h + i, &v, sizeof v);
    }
    for (; i < n; i++) {
        h[i] = distil_f32_to_bf16(src[i]);
    }
}

/* Elements [off, off + n) of a row of dtype as fp32: in place when possible, else converted into
 * buf and padded with -inf up to a whole vector. */
static inline const float *k_tile_in(distil_dtype dt, const void *row, int64_t off, int64_t n,
                                     float *buf) {
    int64_t nr = k_round_up(n);
    if (dt == DISTIL_F32 && n == nr) {
        return (const float *)row + off;
    }
    k_to_f32(dt, (const char *)row + (size_t)off * distil_dtype_size(dt), buf, n);
    for (int64_t i = n; i < nr; i++) {
        buf[i] = -__builtin_inff();
    }
    return buf;
}

/* ------------------------------------------------------------------ JSD element terms */

/* The element terms of docs/SPEC.md §1 (core/backend_api/math/distil_elem.h) on vectors of CPU_VW
 * floats. */
#define DE_T            vf
#define DE_S            float
#define DE_M            vi
#define DE_FN           static inline __attribute__((always_inline))
#define DE_K(lit)       lit##f
#define DE_V(s)         vf_set(s)
#define DE_SEL(m, a, b) vf_sel(m, a, b)
#define DE_ABS(a)       vf_abs(a)
#define DE_EXP(a)       vf_exp(a)
#include "math/distil_elem.h"
#include "math/distil_elem_beta.h"

static void k_div_init(de_coef *k, const distil_elem_beta *b) {
    DE_COEF_SET(*k, *b);
}

/* de_elem of a vector, the special values' masks left out when every lane's x - y is finite
 * (distil_elem.h's de_elem_finite: the same values there; x - y is finite only where x and y
 * both are). */
static inline __attribute__((always_inline)) vf k_elem(int mode, const de_coef *k, vf x, vf y,
                                                       vf *dq, vf *q) {
    if (__builtin_expect(!vf_any_nonfinite(x - y), 1)) {
        return de_elem_finite(mode, k, x, y, dq, q);
    }
    return de_elem(mode, k, x, y, dq, q);
}

/* ------------------------------------------------------------------ div_row */

/* n (a multiple of CPU_VW) elements: returns the lane sums of e (in double: the row sum of a KL
 * cancels, and fp32 lanes would add their rounding to it) and writes g = gscale de/dx when g is
 * not NULL (g may equal x). A NaN input gives a NaN e (distil_elem.h), so a NaN sum. */
static inline __attribute__((always_inline)) double k_div_tile(int mode, bool want_g,
                                                               const float *x, const float *y,
                                                               float *g, int64_t n,
                                                               const de_coef *k, float gscale) {
    vd acc = {0};
    for (int64_t i = 0; i < n; i += CPU_VW) {
        vf dq;
        vf q;
        acc += VF_TO_VD(k_elem(mode, k, vf_load(x + i), vf_load(y + i), &dq, &q));
        if (want_g) {
            vf_store(g + i, dq * gscale);
        }
    }
    return vd_hsum(&acc);
}

static double k_div_tile_any(int mode, const float *x, const float *y, float *g, int64_t n,
                             const de_coef *k, float gscale) {
    /* One case per mode of DE_MODES and gradient on / off. */
#define K_DIV_CASES(M, term)                                                                       \
    case DE_##M * 2:                                                                               \
        return k_div_tile(DE_##M, false, x, y, g, n, k, gscale);                                   \
    case DE_##M * 2 + 1:                                                                           \
        return k_div_tile(DE_##M, true, x, y, g, n, k, gscale);
    switch (mode * 2 + (g != NULL)) {
        DE_MODES(K_DIV_CASES)
    default:
        return 0.0; /* no such mode: the core never passes one */
    }
#undef K_DIV_CASES
}

/* docs/SPEC.md §1 on one row in a single streaming pass: each x, y element is read once and each
 * gradient element written once (after its x was read, so grad may alias x). Ragged tails are
 * padded with -inf, whose terms are 0. */
static double k_div_row(const cpu_div_row *r) {
    alignas(64) float xb[CPU_TILE];
    alignas(64) float yb[CPU_TILE];
    alignas(64) float gb[CPU_TILE];
    de_coef k;
    k_div_init(&k, r->coef);
    size_t es = distil_dtype_size(r->dtype);
    double sum = 0.0;
    for (int64_t off = 0; off < r->vocab; off += CPU_TILE) {
        int64_t n = r->vocab - off < CPU_TILE ? r->vocab - off : CPU_TILE;
        const float *xp = k_tile_in(r->dtype, r->x, off, n, xb);
        const float *yp = k_tile_in(r->dtype, r->y, off, n, yb);
        bool direct = xp != xb; /* fp32 and a whole number of vectors */
        float *gp = r->grad ? (direct ? (float *)r->grad + off : gb) : NULL;
        sum += k_div_tile_any(k.mode, xp, yp, gp, k_round_up(n), &k, r->gscale);
        if (r->grad && !direct) {
            k_from_f32(r->dtype, gb, (char *)r->grad + (size_t)off * es, n);
        }
    }
    return sum;
}

/* ------------------------------------------------------------------ fused_row */

/* Row maxima of zs and zt (vocab fp32 each). */
static void k_max2(const float *zs, const float *zt, int64_t vocab, float *ms, float *mt) {
    alignas(64) float sb[CPU_TILE];
    alignas(64) float tb[CPU_TILE];
    vf a = vf_set(-__builtin_inff());
    vf b = a;
    for (int64_t off = 0; off < vocab; off += CPU_TILE) {
        int64_t n = vocab - off < CPU_TILE ? vocab - off : CPU_TILE;
        const float *sp = k_tile_in(DISTIL_F32, zs, off, n, sb);
        const float *tp = k_tile_in(DISTIL_F32, zt, off, n, tb);
        for (int64_t i = 0; i < n; i += CPU_VW) {
            a = vf_max(a, vf_load(sp + i));
            b = vf_max(b, vf_load(tp + i));
        }
    }
    *ms = vf_hmax(a);
    *mt = vf_hmax(b);
}

/* sum_v exp((z_v - m) * scale), added in double lanes: its log is subtracted from every
 * log-probability, so its rounding enters a KL of nearly equal rows at first order. NaN if any
 * z is NaN. */
static double k_sum_exp(const float *z, int64_t vocab, float m, float scale) {
    alignas(64) float zb[CPU_TILE];
    vd acc = {0};
    for (int64_t off = 0; off < vocab; off += CPU_TILE) {
        int64_t n = vocab - off < CPU_TILE ? vocab - off : CPU_TILE;
        const float *zp = k_tile_in(DISTIL_F32, z, off, n, zb);
        for (int64_t i = 0; i < n; i += CPU_VW) {
            acc += VF_TO_VD(vf_exp((vf_load(zp + i) - m) * scale));
        }
    }
    return vd_hsum(&acc);
}

/* Log-softmax of one row, kept as (max, log of the shifted sum): x_v = (z_v - m) s - l. */
typedef struct k_lsm {
    float m, s, l;
} k_lsm;

/* Pass 3: x, y from the logits, e and dq, q into scratch. Returns sum e; *sg = sum dq; with
 * want_h, *hs = -sum q x (docs/SPEC.md §6 student entropy; q == 0 adds 0, also in the -inf
 * padding of a ragged tile). */
static inline __attribute__((always_inline)) double
k_fused_soft(int mode, bool want_h, const cpu_fused_row *r, const k_lsm *ls, const k_lsm *lt,
             const de_coef *k, double *sg, double *hs) {
    alignas(64) float sb[CPU_TILE];
    alignas(64) float tb[CPU_TILE];
    float *dqs = r->scratch;
    float *qs = r->scratch + k_round_up(r->vocab);
    double se = 0.0;
    double sd = 0.0;
    double sh = 0.0;
    for (int64_t off = 0; off < r->vocab; off += CPU_TILE) {
        int64_t n = r->vocab - off < CPU_TILE ? r->vocab - off : CPU_TILE;
        const float *sp = k_tile_in(DISTIL_F32, r->zs, off, n, sb);
        const float *tp = k_tile_in(DISTIL_F32, r->zt, off, n, tb);
        vd ae = {0};
        vd ad = {0};
        vd ah = {0};
        for (int64_t i = 0; i < n; i += CPU_VW) {
            vf x = (vf_load(sp + i) - ls->m) * ls->s - ls->l;
            vf y = (vf_load(tp + i) - lt->m) * lt->s - lt->l;
            vf dq;
            vf q;
            ae += VF_TO_VD(k_elem(mode, k, x, y, &dq, &q));
            ad += VF_TO_VD(dq);
            if (want_h) {
                ah += VF_TO_VD(vf_sel(q > vf_set(0.0f), q * x, vf_set(0.0f)));
            }
            vf_store(dqs + off + i, dq);
            vf_store(qs + off + i, q);
        }
        se += vd_hsum(&ae);
        sd += vd_hsum(&ad);
        if (want_h) {
            sh -= vd_hsum(&ah);
        }
    }
    *sg = sd;
    *hs = sh;
    return se;
}

/* The soft part of G at column j by de_soft_grad_mode (for the student's mode: q > 1/2, where the
 * plain form cancels): 1 - q = -expm1(x) from the column's log-probability and the rest of the sum
 * in double. zs[j] is read before G is written there. */
static float k_soft_at_mode(const cpu_fused_row *r, const k_lsm *ls, int64_t j, double sg) {
    const float *dqs = r->scratch;
    const float *qs = r->scratch + k_round_up(r->vocab);
    const float g = dqs[j];
    const float x = (r->zs[j] - ls->m) * ls->s - ls->l;
    const vf o = de_soft_grad_mode(vf_set(g), vf_set(qs[j]), vf_set(-expm1f(x)),
                                   vf_set((float)(sg - (double)g)));
    return o[0];
}

/* Pass 4: G = gh (s - onehot) + gs inv_t (dq - q sum_dq), s = softmax(zs) (= q when inv_t is 1),
 * the soft part at a column with q > 1/2 by k_soft_at_mode. zs is read before g is written at the
 * same place, so g may be zs. */
static void k_fused_grad(const cpu_fused_row *r, const k_lsm *ls, const k_lsm *l1, double sg) {
    alignas(64) float sb[CPU_TILE];
    alignas(64) float gb[CPU_TILE];
    const float *dqs = r->scratch;
    const float *qs = r->scratch + k_round_up(r->vocab);
    float gsi = r->gs * r->inv_t;
    float gsum = (float)sg;
    bool unscaled = r->inv_t == 1.0f;
    alignas(64) float db[CPU_TILE];
    bool head = r->dz != NULL; /* docs/SPEC.md §6: G times dz'/dz of the student's head */
    size_t es = distil_dtype_size(r->g_dtype);
    /* s - 1 at the label as expm1 of its log-softmax: at a confident label s = 1 - 2e-5 keeps only
     * exp's rounding in s - 1, expm1 keeps it to an ulp (l1.s is 1 here). Label -1: a rank of the
     * vocabulary-parallel row whose shard does not hold it. */
    const float sm1 = r->label >= 0 ? expm1f((r->zs[r->label] - l1->m) - l1->l) : 0.0f;
    for (int64_t off = 0; off < r->vocab; off += CPU_TILE) {
        int64_t n = r->vocab - off < CPU_TILE ? r->vocab - off : CPU_TILE;
        bool direct = r->g_dtype == DISTIL_F32 && n == k_round_up(n);
        const float *sp = unscaled ? NULL : k_tile_in(DISTIL_F32, r->zs, off, n, sb);
        const float *dp = head ? k_tile_in(DISTIL_F32, r->dz, off, n, db) : NULL;
        float *gp = direct ? (float *)r->g + off : gb;
        for (int64_t i = 0; i < n; i += CPU_VW) {
            vf q = vf_load(qs + off + i);
            vf s = unscaled ? q : vf_exp((vf_load(sp + i) - l1->m) - l1->l);
            /* s - onehot before the weights and the soft part: s = 1 - 5e-10 at a confident label
             * is 1 in fp32, and (gh s + soft) - gh would keep the soft part to an ulp of gh */
            if (r->label >= off + i && r->label < off + i + CPU_VW) {
                s[r->label - off - i] = sm1;
            }
            vf soft = de_soft_grad(vf_load(dqs + off + i), q, gsum);
            const vi mode = q > vf_set(0.5f); /* the mode, where it holds most of the mass */
            if (__builtin_expect(vi_any(mode), 0)) {
                for (int z = 0; z < CPU_VW; z++) {
                    if (mode[z] && off + i + z < r->vocab) {
                        soft[z] = k_soft_at_mode(r, ls, off + i + z, sg);
                    }
                }
            }
            vf o = s * r->gh + soft * gsi;
            vf_store(gp + i, head ? o * vf_load(dp + i) : o);
        }
        if (!direct) {
            k_from_f32(r->g_dtype, gb, (char *)r->g + (size_t)off * es, n);
        }
    }
}

/* docs/SPEC.md §2 steps 2-5 on one valid row, in four passes over the row (kept in cache between
 * them): maxima, exp sums, the JSD terms, the gradient. */
static void k_fused_row(cpu_fused_row *r) {
    float ms;
    float mt;
    k_max2(r->zs, r->zt, r->vocab, &ms, &mt);
    k_lsm ls = {ms, r->inv_t, (float)log(k_sum_exp(r->zs, r->vocab, ms, r->inv_t))};
    k_lsm lt = {mt, r->inv_tt, (float)log(k_sum_exp(r->zt, r->vocab, mt, r->inv_tt))};
    k_lsm l1 = ls;
    if (r->inv_t != 1.0f) {
        l1.s = 1.0f;
        l1.l = (float)log(k_sum_exp(r->zs, r->vocab, ms, 1.0f));
    }
    /* CE = logsumexp(zs) - zs[label] = l1 - (zs[label] - max) */
    r->ce = (float)((double)l1.l - ((double)r->zs[r->label] - (double)ms));
    de_coef k;
    k_div_init(&k, r->coef);
    double sg = 0.0;
    double sh = 0.0;
    /* One case per mode of DE_MODES and entropy on / off. */
#define K_FUSED_CASE(M, term)                                                                      \
    case DE_##M * 2:                                                                               \
        r->soft = (float)k_fused_soft(DE_##M, false, r, &ls, &lt, &k, &sg, &sh);                   \
        break;                                                                                     \
    case DE_##M * 2 + 1:                                                                           \
        r->soft = (float)k_fused_soft(DE_##M, true, r, &ls, &lt, &k, &sg, &sh);                    \
        break;
    switch (k.mode * 2 + r->want_h) {
        DE_MODES(K_FUSED_CASE)
    default:
        break;
    }
#undef K_FUSED_CASE
    r->h = (float)sh;
    if (r->g) {
        k_fused_grad(r, &ls, &l1, sg);
    }
}

/* ------------------------------------------------------------------ tp_row (docs/SPEC.md §8) */

/* The soft pass of k_fused_row over the rank's columns with the group's log-softmax statistics:
 * returns sum e, *sg = sum de/dx; dq and q land in the scratch as for k_fused_grad. */
static double k_tp_soft(const cpu_fused_row *r, const k_lsm *ls, const k_lsm *lt, double *sg) {
    de_coef k;
    k_div_init(&k, r->coef);
    double sh = 0.0; /* the entropy is refused on a vocabulary shard */
#define K_TP_CASE(M, term)                                                                         \
    case DE_##M:                                                                                   \
        return k_fused_soft(DE_##M, false, r, ls, lt, &k, sg, &sh);
    switch (k.mode) {
        DE_MODES(K_TP_CASE)
    default:
        return 0.0;
    }
#undef K_TP_CASE
}

/* One phase of the vocabulary-parallel row pass: the passes of k_fused_row, with the row
 * statistics all-reduced over the ranks between them by the core. */
static void k_tp_row(cpu_tp_row *t) {
    cpu_fused_row *r = &t->f;
    if (t->phase == DISTIL_TP_MAX) {
        float ms, mt;
        k_max2(r->zs, r->zt, r->vocab, &ms, &mt);
        t->smax[0] = ms;
        t->smax[1] = mt;
        return;
    }
    const float ms = (float)t->smax[0], mt = (float)t->smax[1];
    if (t->phase == DISTIL_TP_SUMS) {
        t->ssum[0] = k_sum_exp(r->zs, r->vocab, ms, r->inv_t);
        t->ssum[1] = k_sum_exp(r->zt, r->vocab, mt, r->inv_t);
        t->ssum[2] = r->inv_t != 1.0f ? k_sum_exp(r->zs, r->vocab, ms, 1.0f) : t->ssum[0];
        return;
    }
    k_lsm ls = {ms, r->inv_t, (float)log(t->ssum[0])};
    k_lsm lt = {mt, r->inv_t, (float)log(t->ssum[1])};
    k_lsm l1 = {ms, 1.0f, (float)log(t->ssum[2])};
    if (r->inv_t == 1.0f) {
        l1 = ls;
    }
    if (t->phase == DISTIL_TP_TERMS) {
        double sg = 0.0;
        t->sterm[0] = r->label >= 0 ? (double)r->zs[r->label] - (double)ms : 0.0;
        t->sterm[1] = k_tp_soft(r, &ls, &lt, &sg);
        t->sterm[2] = sg;
        return;
    }
    /* FINISH: CE = logsumexp(zs) - zs[label] = l1 - (zs[label] - max), as k_fused_row. */
    r->ce = (float)((double)l1.l - t->sterm[0]);
    r->soft = (float)t->sterm[1];
    if (r->g) {
        double sg_local = 0.0;
        (void)k_tp_soft(r, &ls, &lt, &sg_local); /* dq and q again, into the scratch */
        k_fused_grad(r, &ls, &l1, t->sterm[2]);
    }
}

const cpu_kernels CPU_KTABLE = {
    .isa = CPU_ISA_NAME,
    .to_f32 = k_to_f32,
    .from_f32 = k_from_f32,
    .div_row = k_div_row,
    .fused_row = k_fused_row,
    .tp_row = k_tp_row,
};
