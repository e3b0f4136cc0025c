/*
 * cpu_topk_rows.c - topk_rows of the cpu backend (docs/SPEC.md §7): OpenMP over rows, each row
 * whole on one thread in a fixed order (sums in double), so the result does not depend on the
 * thread count. Per row: gather the k slots (checking the ids), the student's log-sum-exp, the
 * ids marked -inf in an fp32 row so that one pass sums the tail Q_t directly, the (k + 1) element
 * terms of distil_elem.h, then G over V with the row constants of distil_topk.h. Scalar code
 * (fp32 exps, double sums) that the compiler vectorises where it can; the fused loss's GEMMs
 * dominate its time.
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

/* The student side of a valid row: z (V) fp32 logits or log-probs; fills s->x, s->z of the n
 * slots, marks the ids -inf in z, returns Q_t; *lse1 / *lset the log-sum-exps at temperature 1
 * and tau (0 for log-probs, which are taken as given). */
static double cpu_topk_student(const cpu_topk_call *C, float *z, int64_t n, cpu_topk_scratch *s,
                               double *lse1, double *lset) {
    const distil_topk_rows_args *a = C->a;
    const float it = a->logits ? a->inv_temperature : 1.0f;
    *lse1 = a->logits ? cpu_topk_lse(z, a->vocab, 1.0f) : 0.0;
    *lset = a->logits ? cpu_topk_lse(z, a->vocab, it) : 0.0;
    for (int64_t j = 0; j < n; j++) {
        s->z[j] = z[s->id[j]];
        s->x[j] = (float)((double)(s->z[j] * it) - *lset);
    }
    for (int64_t j = 0; j < n; j++) {
        z[s->id[j]] = -INFINITY;
    }
    return cpu_topk_sum_exp(z, a->vocab, it, (float)*lset);
}

/* The soft loss of the k (+ 1) outcomes; s->g the slots' de/dX, *sum_g their sum, *g_t the
 * tail's. */
static float cpu_topk_outcomes(const cpu_topk_call *C, int64_t n, cpu_topk_scratch *s, double qt,
                               float *sum_g, float *g_t, float *qk_out) {
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
    *qk_out = expf(lqk);
    return (float)loss;
}

/* G over the row: off K from z (ids marked -inf), then the slots from their saved logits. */
static void cpu_topk_grad(const cpu_topk_call *C, const float *z, int64_t n,
                          const cpu_topk_scratch *s, int64_t label, double lse1, double lset,
                          float c_on, float a_off, void *g) {
    const distil_topk_rows_args *a = C->a;
    const bool lg = a->logits;
    const float it = lg ? a->inv_temperature : 1.0f;
    const float lsetf = (float)lset, lse1f = (float)lse1;
    for (int64_t v0 = 0; v0 < a->vocab; v0 += CPU_VW) { /* the exps in lanes, G per element */
        float q[CPU_VW], sv[CPU_VW] = {0};
        const int64_t n_lanes = a->vocab - v0 < CPU_VW ? a->vocab - v0 : CPU_VW;
        if (n_lanes == CPU_VW) {
            const vf zv = vf_load(z + v0);
            vf_store(q, vf_exp(zv * it - lsetf));
            if (lg) {
                vf_store(sv, vf_exp(zv - lse1f));
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
        float q = expf(s->x[j]);
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
    float sum_g, g_t, qk, c_on, a_off;
    soft[i] = cpu_topk_outcomes(C, n, s, qt, &sum_g, &g_t, &qk);
    if (g && C->zero_grad) {
        memset(g, 0, (size_t)a->vocab * ges);
    } else if (g) {
        dk_grad_consts(a->t.tail, a->logits, sum_g, g_t, (float)qt, qk, &c_on, &a_off);
        cpu_topk_grad(C, z, n, s, label, lse1, lset, c_on, a_off, g);
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
