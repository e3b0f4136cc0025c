/*
 * cpu_topk_rows.c - topk_rows of the cpu backend (docs/SPEC.md §7): OpenMP over rows, each row
 * whole on one thread in a fixed order (sums in double), so the result does not depend on the
 * thread count. Per row: gather the k slots (checking the ids) and mark the ids -inf in the fp32
 * row, so that the tail Q_t is a direct sum; with the fused loss's logits one read of the row
 * gives both log-sum-exps and Q_t (a running maximum, blocks of the row kept in L1 between their
 * maximum and their sums, the double sums rescaled when the maximum rises, the slots' terms added
 * at the row's maximum: docs/DESIGN.md, the top-k paragraph), the log-prob form sums Q_t over its
 * copy of the row; then the (k + 1) element terms of distil_elem.h and G over V (a second read)
 * with the row constants of distil_topk.h. Four-lane vector exps (cpu_vmath.h), double sums.
 */
#include "cpu_internal.h"
#include "error.h"
#include "half.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define DE_T            float
#define DE_S            float
#define DE_M            int
#define DE_FN           static inline
#define DE_K(lit)       lit##f
#define DE_V(s)         (s)
#define DE_SEL(m, a, b) ((m) ? (a) : (b))
#define DE_ABS(a)       fabsf(a)
#define DE_EXP(a)       expf(a)
#define DE_LOG(a)       logf(a)
#define DE_EXPM1(a)     expm1f(a)
#include "math/distil_elem.h"
#include "math/distil_elem_beta.h"
#include "math/distil_topk.h"

/* The O(V) exps four lanes at a time (the generic unit's vector width; cpu_vmath.h's exp). */
#define CPU_VW 4
#include "cpu_vmath.h"

/* sum of exp(v[j] * scale - sub) over n floats, in double: lanes, then their sum, then the tail
 * (a fixed order for a given n). */
static double cpu_topk_sum_exp(const float *v, int64_t n, float scale, float sub) {
    vd acc = {0};
    int64_t j = 0;
    for (; j + CPU_VW <= n; j += CPU_VW) {
        acc += VF_TO_VD(vf_exp(vf_load(v + j) * scale - sub));
    }
    double sum = vd_hsum(&acc);
    for (; j < n; j++) {
        sum += (double)expf(v[j] * scale - sub);
    }
    return sum;
}

/* Per-thread scratch: an fp32 row (V) and the k slots' id, x, y, g and z. */
typedef struct cpu_topk_scratch {
    float *row;
    int64_t *id;
    float *x, *y, *g, *z;
} cpu_topk_scratch;

/* Floats of the fp32 row: V and slack, even so that the int64 ids after it stay aligned. */
static int64_t cpu_topk_row_floats(int64_t vocab) {
    return (vocab + 17) / 2 * 2;
}

static int64_t cpu_topk_scratch_bytes(int64_t vocab, int64_t k) {
    return cpu_topk_row_floats(vocab) * 4 + k * (8 + 4 * 4) + 64;
}

static cpu_topk_scratch cpu_topk_scratch_at(void *base, int64_t vocab, int64_t k) {
    cpu_topk_scratch s;
    s.row = base;
    s.id = (int64_t *)(void *)(s.row + cpu_topk_row_floats(vocab));
    s.x = (float *)(void *)(s.id + k);
    s.y = s.x + k;
    s.g = s.y + k;
    s.z = s.g + k;
    return s;
}

/* What one row's pass needs beyond its index. */
typedef struct cpu_topk_call {
    const cpu_state *st;
    const distil_topk_rows_args *a;
    de_coef kc;
    float gh, gsi;  /* weight_hard / n; weight_soft / n (/ tau with logits) */
    bool zero_grad; /* n == 0: the gradient is 0 */
} cpu_topk_call;

/* A bad row: its first bad id and what is wrong with it. */
typedef struct cpu_topk_bad {
    int kind; /* 0 none, CPU_BAD_ID_RANGE, CPU_BAD_ID_TWICE */
    int64_t id;
} cpu_topk_bad;

static int64_t cpu_topk_id(const distil_topk_teacher *t, int64_t i) {
    const void *p = distil_dptr_addr(t->ids);
    return t->ids_i64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

static float cpu_topk_load(const void *p, distil_dtype dt, int64_t i) {
    switch (dt) {
    case DISTIL_BF16:
        return distil_bf16_to_f32(((const uint16_t *)p)[i]);
    case DISTIL_F16:
        return distil_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

static void cpu_topk_store(void *p, distil_dtype dt, int64_t i, float v) {
    switch (dt) {
    case DISTIL_BF16:
        ((uint16_t *)p)[i] = distil_f32_to_bf16(v);
        break;
    case DISTIL_F16:
        ((uint16_t *)p)[i] = distil_f32_to_f16(v);
        break;
    default:
        ((float *)p)[i] = v;
        break;
    }
}

/* Row i's used slots into s (pads skipped); returns their count, *bad the first bad id. */
static int64_t cpu_topk_slots(const distil_topk_rows_args *a, int64_t i, cpu_topk_scratch *s,
                              cpu_topk_bad *bad) {
    const distil_topk_teacher *t = &a->t;
    int64_t n = 0;
    bad->kind = 0;
    for (int64_t j = 0; j < t->k; j++) {
        int64_t id = cpu_topk_id(t, i * t->k + j);
        if (id == t->pad_id) {
            continue;
        }
        if (id < 0 || id >= a->vocab) {
            bad->kind = CPU_BAD_ID_RANGE;
            bad->id = id;
            return n;
        }
        for (int64_t u = 0; u < n; u++) {
            if (s->id[u] == id) {
                bad->kind = CPU_BAD_ID_TWICE;
                bad->id = id;
                return n;
            }
        }
        s->id[n] = id;
        s->y[n] = cpu_topk_load(distil_dptr_addr(t->logp), t->logp_dtype, i * t->k + j);
        n++;
    }
    return n;
}

/* log sum exp of n floats, in double. */
static double cpu_topk_lse(const float *v, int64_t n, float scale) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        m = fmaxf(m, v[j] * scale);
    }
    if (!(m > -INFINITY) || m == INFINITY) {
        return m; /* all -inf, +inf, or NaN (fmaxf drops NaN: caught by the element terms) */
    }
    return (double)m + log(cpu_topk_sum_exp(v, n, scale, m));
}

/* log P_K of the teacher's n slots, in double, as m + log1p(sum of the other slots' exp(y - m))
 * (m the maximum; ties with it count 1 each): the tail P_t = 1 - P_K = -expm1(log P_K) cancels
 * where the slots hold nearly all of the teacher's mass, and fp32 exps, or a sum that holds the
 * maximum's 1, would leave P_t a relative error of u sum_K p |y| / P_t or 1e-16 / P_t
 * (docs/SPEC.md §7; measured 1e-3 at P_t = 8e-13 under a peaky teacher). */
static double cpu_topk_teacher_lse(const float *y, int64_t n) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        m = fmax(m, (double)y[j]);
    }
    if (!(m > -INFINITY) || m == INFINITY) {
        return m; /* as cpu_topk_lse */
    }
    double ties = 0.0, rest = 0.0;
    for (int64_t j = 0; j < n; j++) {
        if ((double)y[j] == m) {
            ties += 1.0;
        } else {
            rest += exp((double)y[j] - m); /* NaN stays NaN */
        }
    }
    return m + log1p((ties - 1.0) + rest);
}

/* The fused form's row statistics, one read of z (V fp32 logits, the ids' entries already -inf):
 * in blocks of CPU_TOPK_BLOCK floats, each block's maximum and then its terms (the block is in L1
 * between the two), sums in double lanes rescaled by exp(old - new) in double when a block
 * raises the running maximum m. s1 / st: the sums of exp(v - m) and exp(v it - m it), each term
 * an fp32 exp (m's own term exactly 1), the lanes in a fixed order for a given V. */
#define CPU_TOPK_BLOCK 256
typedef struct cpu_topk_run {
    float m;
    vd s1, st;     /* the lanes */
    double r1, rt; /* the last V % CPU_VW floats */
} cpu_topk_run;

/* The maximum of n floats, NaN ignored (the sums catch it); -inf where there is none. */
static float cpu_topk_max(const float *v, int64_t n) {
    vf mv = vf_set(-INFINITY);
    int64_t j = 0;
    for (; j + CPU_VW <= n; j += CPU_VW) {
        mv = vf_max(mv, vf_load(v + j));
    }
    float m = vf_hmax(mv);
    for (; j < n; j++) {
        m = v[j] > m ? v[j] : m;
    }
    return m;
}

/* One block of n floats into o; it == 1 leaves st to the caller (its terms are s1's). */
static void cpu_topk_run_add(cpu_topk_run *o, const float *v, int64_t n, float it) {
    const float bm = cpu_topk_max(v, n);
    vd s1 = o->s1, st = o->st;
    double r1 = o->r1, rt = o->rt;
    if (bm > o->m) {
        const double f1 = exp((double)o->m - (double)bm);
        const double ft = exp((double)(o->m * it) - (double)(bm * it)); /* 0 from m = -inf */
        s1 *= f1, st *= ft, r1 *= f1, rt *= ft;
        o->m = bm;
    }
    /* while all so far is -inf (or NaN) the terms are taken against 0: 0, or a NaN kept */
    const float m1 = o->m == -INFINITY ? 0.0f : o->m, mt = m1 * it;
    const bool one = it == 1.0f;
    int64_t j = 0;
    for (; j + CPU_VW <= n; j += CPU_VW) {
        const vf x = vf_load(v + j);
        s1 += VF_TO_VD(vf_exp(x - m1));
        if (!one) {
            st += VF_TO_VD(vf_exp(x * it - mt));
        }
    }
    for (; j < n; j++) {
        r1 += (double)expf(v[j] - m1);
        rt += one ? 0.0 : (double)expf(v[j] * it - mt);
    }
    o->s1 = s1, o->st = st, o->r1 = r1, o->rt = rt;
}

/* lse1, lset (temperature 1 and tau) and Q_t of a fused row: z (V) with the ids' entries -inf,
 * the n slots' logits in s->z. The tail's sums (one read, cpu_topk_run) rescaled to the row's
 * maximum mx, the slots' terms added at mx in double; Q_t the tail's own sum, shifted by lset
 * rounded to fp32 as G's terms are. A row without a finite maximum gives NaN sums. */
static double cpu_topk_logit_stats(const float *z, int64_t vocab, const cpu_topk_scratch *s,
                                   int64_t n, float it, double *lse1, double *lset) {
    cpu_topk_run o = {.m = -INFINITY};
    for (int64_t b = 0; b < vocab; b += CPU_TOPK_BLOCK) {
        cpu_topk_run_add(&o, z + b, vocab - b < CPU_TOPK_BLOCK ? vocab - b : CPU_TOPK_BLOCK, it);
    }
    double t1 = vd_hsum(&o.s1) + o.r1;
    double tt = it == 1.0f ? t1 : vd_hsum(&o.st) + o.rt;
    const float kmax = cpu_topk_max(s->z, n);
    const float mx = kmax > o.m ? kmax : o.m, mt = mx * it; /* it > 0: mt is the max at tau */
    /* a tail sum of 0 (no finite tail entry) needs no factor; NaN is kept */
    t1 = t1 == 0.0 ? 0.0 : t1 * exp((double)o.m - (double)mx);
    tt = tt == 0.0 ? 0.0 : tt * exp((double)(o.m * it) - (double)mt);
    double k1 = 0.0, kt = 0.0;
    for (int64_t j = 0; j < n; j++) {
        k1 += (double)expf(s->z[j] - mx);
        kt += (double)expf(s->z[j] * it - mt);
    }
    *lse1 = (double)mx + log(mx == -INFINITY ? NAN : t1 + k1);
    *lset = (double)mt + log(mx == -INFINITY ? NAN : tt + kt);
    return tt * exp((double)mt - (double)(float)*lset);
}

/* The student side of a valid row: z (V) fp32 logits or log-probs; fills s->x, s->z of the n
 * slots, marks the ids -inf in z, returns Q_t; *lse1 / *lset the log-sum-exps at temperature 1
 * and tau (0 for log-probs, which are taken as given, Q_t then summed directly over z). */
static double cpu_topk_student(const cpu_topk_call *C, float *z, int64_t n, cpu_topk_scratch *s,
                               double *lse1, double *lset) {
    const distil_topk_rows_args *a = C->a;
    const float it = a->logits ? a->inv_temperature : 1.0f;
    for (int64_t j = 0; j < n; j++) {
        s->z[j] = z[s->id[j]];
    }
    for (int64_t j = 0; j < n; j++) {
        z[s->id[j]] = -INFINITY;
    }
    double qt;
    if (a->logits) {
        qt = cpu_topk_logit_stats(z, a->vocab, s, n, it, lse1, lset);
    } else {
        *lse1 = *lset = 0.0;
        qt = cpu_topk_sum_exp(z, a->vocab, 1.0f, 0.0f);
    }
    for (int64_t j = 0; j < n; j++) {
        s->x[j] = (float)((double)(s->z[j] * it) - *lset);
    }
    return qt;
}

/* The soft loss of the k (+ 1) outcomes; s->g the slots' de/dX, *sum_g their sum, *g_t the
 * tail's, *lqk_out log Q_K (the slots' log-sum-exp, distil_topk.h). */
static float cpu_topk_outcomes(const cpu_topk_call *C, int64_t n, cpu_topk_scratch *s, double qt,
                               float *sum_g, float *g_t, float *lqk_out) {
    const int tail = C->a->t.tail;
    const float lqk = (float)cpu_topk_lse(s->x, n, 1.0f);
    const float lpk = (float)cpu_topk_teacher_lse(s->y, n);
    double loss = 0.0, sg = 0.0;
    float q;
    for (int64_t j = 0; j < n; j++) {
        loss += dk_slot_elem(&C->kc, tail, s->x[j], s->y[j], lqk, lpk, &s->g[j]);
        sg += s->g[j];
    }
    *g_t = 0.0f;
    if (tail != DK_RENORM) {
        float yt = dk_tail_y(tail, lpk, n == C->a->vocab);
        loss += de_elem(C->kc.mode, &C->kc, logf((float)qt), yt, g_t, &q);
    }
    *sum_g = (float)sg;
    *lqk_out = lqk;
    return (float)loss;
}

/* G over the row: off K from z (ids marked -inf), then the slots from their saved logits. */
static void cpu_topk_grad(const cpu_topk_call *C, const float *z, int64_t n,
                          const cpu_topk_scratch *s, int64_t label, double lse1, double lset,
                          float lqk, float c_on, float a_off, void *g) {
    const distil_topk_rows_args *a = C->a;
    const bool lg = a->logits;
    const float it = lg ? a->inv_temperature : 1.0f;
    const float lsetf = (float)lset, lse1f = (float)lse1;
    /* tau = 1: s and q are the same exp (the row statistics give lse1 and lset the same bits) */
    const bool same = lg && it == 1.0f && lse1f == lsetf;
    for (int64_t v0 = 0; v0 < a->vocab; v0 += CPU_VW) { /* the exps in lanes, G per element */
        float q[CPU_VW], sv[CPU_VW] = {0};
        const int64_t n_lanes = a->vocab - v0 < CPU_VW ? a->vocab - v0 : CPU_VW;
        if (n_lanes == CPU_VW) {
            const vf zv = vf_load(z + v0);
            const vf qv = vf_exp(zv * it - lsetf);
            vf_store(q, qv);
            if (lg) {
                vf_store(sv, same ? qv : vf_exp(zv - lse1f));
            }
        } else {
            for (int64_t l = 0; l < n_lanes; l++) {
                q[l] = expf(z[v0 + l] * it - lsetf);
                sv[l] = lg ? expf(z[v0 + l] - lse1f) : 0.0f;
            }
        }
        for (int64_t l = 0; l < n_lanes; l++) {
            const float oh = v0 + l == label ? 1.0f : 0.0f;
            cpu_topk_store(g, a->g_dtype, v0 + l, dk_g_off(C->gh, C->gsi, sv[l], oh, q[l], a_off));
        }
    }
    for (int64_t j = 0; j < n; j++) {
        float q = dk_slot_q(a->t.tail, s->x[j], lqk);
        float sv = lg ? (float)exp((double)s->z[j] - lse1) : 0.0f;
        float oh = s->id[j] == label ? 1.0f : 0.0f;
        cpu_topk_store(g, a->g_dtype, s->id[j], dk_g_on(C->gh, C->gsi, sv, oh, s->g[j], q, c_on));
    }
}

/* Is row i taking part? ignore_index, and with logits a label outside [0, V) (recorded by
 * count_valid). Sets *label (-1: none). */
static bool cpu_topk_row_counts(const distil_topk_rows_args *a, int64_t i, int64_t *label) {
    const int64_t *labels = distil_dptr_addr(a->labels);
    *label = -1;
    if (labels == NULL) {
        return true;
    }
    int64_t l = labels[i];
    if (l == a->ignore_index) {
        return false;
    }
    if (a->logits) {
        if (l < 0 || l >= a->vocab) {
            return false;
        }
        *label = l;
    }
    return true;
}

/* One row; returns its bad id, if any (the row is then ignored). */
static cpu_topk_bad cpu_topk_one(const cpu_topk_call *C, int64_t i, cpu_topk_scratch *s) {
    const distil_topk_rows_args *a = C->a;
    const size_t ges = distil_dtype_size(a->g_dtype);
    char *g = distil_dptr_addr(a->g);
    g = g ? g + (size_t)(i * a->g_stride) * ges : NULL;
    float *ce = distil_dptr_addr(a->ce_rows);
    float *soft = distil_dptr_addr(a->soft_rows);
    cpu_topk_bad bad = {0, 0};
    int64_t label;
    const int64_t n = cpu_topk_slots(a, i, s, &bad); /* every row's ids are checked */
    const bool counts = cpu_topk_row_counts(a, i, &label);
    if (!counts || bad.kind != 0) {
        soft[i] = 0.0f;
        if (ce) {
            ce[i] = 0.0f;
        }
        if (g) {
            memset(g, 0, (size_t)a->vocab * ges);
        }
        return bad;
    }
    float *z = s->row;
    if (a->logits) {
        z = (float *)distil_dptr_addr(a->x) + i * a->x_stride;
    } else {
        size_t xes = distil_dtype_size(a->x_dtype);
        C->st->k->to_f32(a->x_dtype,
                         (const char *)distil_dptr_addr(a->x) + (size_t)(i * a->x_stride) * xes, z,
                         a->vocab);
    }
    double lse1, lset;
    const float z_label = label >= 0 ? z[label] : 0.0f; /* before the ids are marked */
    double qt = cpu_topk_student(C, z, n, s, &lse1, &lset);
    if (ce) {
        ce[i] = label >= 0 ? (float)(lse1 - (double)z_label) : 0.0f;
    }
    float sum_g, g_t, lqk, c_on, a_off;
    soft[i] = cpu_topk_outcomes(C, n, s, qt, &sum_g, &g_t, &lqk);
    if (g && C->zero_grad) {
        memset(g, 0, (size_t)a->vocab * ges);
    } else if (g) {
        dk_grad_consts(a->t.tail, a->logits, sum_g, g_t, (float)qt, &c_on, &a_off);
        cpu_topk_grad(C, z, n, s, label, lse1, lset, lqk, c_on, a_off, g);
    }
    return bad;
}

/* The first bad row of this block, kept for synchronize unless an earlier error is kept. */
static void cpu_topk_record(cpu_state *st, int64_t row, cpu_topk_bad bad, int64_t vocab) {
    if (!st->bad_label) {
        st->bad_label = true;
        st->bad_kind = bad.kind;
        st->bad_row = row;
        st->bad_value = bad.id;
        st->bad_vocab = vocab;
    }
}

distil_status distil_cpu_topk_rows(void *b, const distil_topk_rows_args *a) {
    cpu_state *st = b;
    const float *nv = distil_dptr_addr(a->n_valid);
    const float n = nv ? *nv : 1.0f;
    cpu_topk_call C = {.st = st, .a = a, .zero_grad = n == 0.0f};
    distil_elem_beta kb = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    DE_COEF_SET(C.kc, kb);
    C.gh = n != 0.0f ? a->weight_hard / n : 0.0f;
    C.gsi = n != 0.0f ? a->weight_soft / n * (a->logits ? a->inv_temperature : 1.0f) : 0.0f;
    const int64_t per = (cpu_topk_scratch_bytes(a->vocab, a->t.k) + 63) / 64 * 64;
    const int threads = st->threads;
    DISTIL_TRY(distil_cpu_grow(st, &st->rows, &st->rows_bytes, (size_t)threads * (size_t)per,
                               "top-k row"));
    int64_t first_bad = a->rows;
#pragma omp parallel num_threads(threads) if (a->rows > 1)
    {
#ifdef _OPENMP
        char *mine = (char *)st->rows + (size_t)omp_get_thread_num() * (size_t)per;
#else
        char *mine = st->rows;
#endif
        cpu_topk_scratch s = cpu_topk_scratch_at(mine, a->vocab, a->t.k);
#pragma omp for schedule(dynamic) reduction(min : first_bad)
        for (int64_t i = 0; i < a->rows; i++) {
            cpu_topk_bad bad = cpu_topk_one(&C, i, &s);
            if (bad.kind != 0 && i < first_bad) {
                first_bad = i;
            }
        }
    }
    if (first_bad < a->rows) { /* the first bad row again, for its id */
        cpu_topk_scratch s = cpu_topk_scratch_at(st->rows, a->vocab, a->t.k);
        cpu_topk_bad bad;
        (void)cpu_topk_slots(a, first_bad, &s, &bad);
        cpu_topk_record(st, a->row0 + first_bad, bad, a->vocab);
    }
    return DISTIL_OK;
}
