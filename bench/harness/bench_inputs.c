/*
 * bench_inputs.c - random, non-zero inputs of one benchmark point in the context's memory, and
 * the call of the loss on one input set. Several sets are kept so that consecutive calls read
 * different memory (no last-level-cache reuse). Values come from a table of normal samples so
 * that filling gigabytes costs about a nanosecond per element.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { IN_A, IN_B, IN_C, IN_D, IN_LABELS, IN_COUNT };
/* jsd:   A = student_logp (T, V), B = teacher_logp (T, V), labels (T) or NULL
 * fused: A = xs (T, Hs), B = Ws (V, Hs), C = xt (T, Ht), D = Wt (V, Ht), labels (T)
 * fused with --topk K: C = teacher ids (T, K) int64, D = teacher log-probs (T, K) fp32 */

struct bench_buffers {
    int sets;
    void *in[BENCH_MAX_SETS][IN_COUNT];
    float *loss;    /* 4 floats */
    void *grad_a;   /* jsd: grad_student (T, V); fused: grad_xs (T, Hs) */
    void *grad_b;   /* fused: grad_Ws (V, Hs) */
    float *entropy; /* fused --entropy: the student's entropy (T) fp32 */
    /* --teacher-fp8-head: each set's Wt made once (distil_e4m3_head_make), head_bytes each */
    void *head[BENCH_MAX_SETS];
    size_t head_bytes;
};

#define BENCH_TABLE 4096
static float bench_normal_table[BENCH_TABLE]; /* N(0, 1) samples */
static double bench_exp_table[BENCH_TABLE];   /* exp(2 * sample), for log-prob rows */

typedef struct bench_rng {
    uint64_t s;
} bench_rng;

/* splitmix64: fast, and good enough to pick table entries. */
static uint64_t bench_rng_next(bench_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void bench_table_init(uint64_t seed) {
    bench_rng r = {seed ^ 0x5eedULL};
    for (int i = 0; i < BENCH_TABLE; i += 2) { /* Box-Muller, two samples per draw */
        double u1 = ((double)(bench_rng_next(&r) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (double)(bench_rng_next(&r) >> 11) / 9007199254740992.0;
        double rad = sqrt(-2.0 * log(u1));
        bench_normal_table[i] = (float)(rad * cos(6.283185307179586 * u2));
        bench_normal_table[i + 1] = (float)(rad * sin(6.283185307179586 * u2));
    }
    for (int i = 0; i < BENCH_TABLE; i++) {
        bench_exp_table[i] = exp(2.0 * (double)bench_normal_table[i]);
    }
}

/* n samples of scale * N(0, 1), five table picks per 64-bit draw. */
static void bench_fill_normal(float *dst, int64_t n, float scale, bench_rng *r) {
    uint64_t bits = 0;
    int left = 0;
    for (int64_t i = 0; i < n; i++) {
        if (left == 0) {
            bits = bench_rng_next(r);
            left = 5;
        }
        float v = scale * bench_normal_table[bits & (BENCH_TABLE - 1)];
        dst[i] = v != 0.0f ? v : scale; /* never an exact zero */
        bits >>= 12;
        left--;
    }
}

/* A row of log-probabilities: log_softmax of logits 2 * N(0, 1), with exp() from a table. */
static void bench_fill_logp_row(float *row, int64_t v, bench_rng *r) {
    uint64_t bits = 0;
    int left = 0;
    double sum = 0.0;
    for (int64_t i = 0; i < v; i++) {
        if (left == 0) {
            bits = bench_rng_next(r);
            left = 5;
        }
        unsigned k = (unsigned)(bits & (BENCH_TABLE - 1));
        row[i] = 2.0f * bench_normal_table[k];
        sum += bench_exp_table[k]; /* logits are bounded by ~10: no overflow */
        bits >>= 12;
        left--;
    }
    float lse = (float)log(sum);
    for (int64_t i = 0; i < v; i++) {
        row[i] -= lse; /* finite and below 0: never an exact zero in practice */
    }
}

static uint16_t bench_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    }
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* fp32 -> IEEE half, round to nearest even, with subnormals; inputs here are finite. */
static uint16_t bench_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a >= 65520.0f) {
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 6.103515625e-05f) { /* subnormal: units of 2^-24 */
        return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));
    }
    uint32_t m = u & 0x7fffffu;
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
        h++; /* may carry into the exponent, which is still right */
    }
    return (uint16_t)(sign | h);
}

/* Store n floats as dtype at element offset `at` of dst. */
static void bench_store(void *dst, int64_t at, const float *src, int64_t n, distil_dtype dt) {
    if (dt == DISTIL_F32) {
        memcpy((float *)dst + at, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = (uint16_t *)dst + at;
    for (int64_t i = 0; i < n; i++) {
        d[i] = dt == DISTIL_BF16 ? bench_f32_to_bf16(src[i]) : bench_f32_to_f16(src[i]);
    }
}

/* Fill a (rows, cols) host tensor: log-prob rows, or scale * N(0, 1). */
static int bench_fill_tensor(void *dst, int64_t rows, int64_t cols, distil_dtype dt, int logp,
                             float scale, bench_rng *r) {
    float *row = malloc((size_t)cols * sizeof(float));
    if (row == NULL) {
        return -1;
    }
    for (int64_t i = 0; i < rows; i++) {
        if (logp) {
            bench_fill_logp_row(row, cols, r);
        } else {
            bench_fill_normal(row, cols, scale, r);
        }
        bench_store(dst, i * cols, row, cols, dt);
    }
    free(row);
    return 0;
}

/* One input tensor of a point: (rows, cols) of the point's dtype, or labels (rows) int64. */
typedef struct bench_tensor {
    int64_t rows;
    int64_t cols; /* 0: labels */
    int logp;     /* 1: log-prob rows; BENCH_TOPK_IDS / _LOGP: a cached top-k teacher's (T, K) */
    float scale;
} bench_tensor;

enum { BENCH_TOPK_IDS = 2, BENCH_TOPK_LOGP = 3 }; /* int64 ids; fp32 log-probs */

static void bench_tensors_of(const bench_shape *s, bench_tensor t[IN_COUNT]) {
    memset(t, 0, IN_COUNT * sizeof *t);
    if (s->workload == BENCH_JSD) {
        t[IN_A] = (bench_tensor){s->rows, s->vocab, 1, 1.0f};
        t[IN_B] = (bench_tensor){s->rows, s->vocab, 1, 1.0f};
        t[IN_LABELS].rows = s->ignore_frac > 0.0 ? s->rows : 0; /* no labels: none ignored */
        return;
    }
    /* Weights of std 1/sqrt(H) give student logits of std ~1; the teacher's are sharper. */
    t[IN_A] = (bench_tensor){s->rows, s->hs, 0, 1.0f};
    t[IN_B] = (bench_tensor){s->vocab, s->hs, 0, (float)(1.0 / sqrt((double)s->hs))};
    t[IN_C] = (bench_tensor){s->rows, s->ht, 0, 1.0f};
    const int64_t vt = s->teacher_vocab > 0 ? s->teacher_vocab : s->vocab;
    t[IN_D] = (bench_tensor){vt, s->ht, 0, (float)(2.0 / sqrt((double)s->ht))};
    if (s->topk_k > 0) {
        t[IN_C] = (bench_tensor){s->rows, s->topk_k, BENCH_TOPK_IDS, 0.0f};
        t[IN_D] = (bench_tensor){s->rows, s->topk_k, BENCH_TOPK_LOGP, 0.0f};
    }
    t[IN_LABELS].rows = s->rows;
}

static double bench_tensor_bytes(const bench_shape *s, const bench_tensor *t) {
    if (t->cols == 0 || t->logp >= BENCH_TOPK_IDS) {
        double elem = t->logp == BENCH_TOPK_LOGP ? 4.0 : 8.0;
        return elem * (double)t->rows * (double)(t->cols ? t->cols : 1);
    }
    return (double)t->rows * (double)t->cols * (double)distil_dtype_size(s->dtype);
}

double bench_set_bytes(const bench_shape *s) {
    bench_tensor t[IN_COUNT];
    bench_tensors_of(s, t);
    double sum = 0.0;
    for (int k = 0; k < IN_COUNT; k++) {
        sum += bench_tensor_bytes(s, &t[k]);
    }
    return sum;
}

double bench_output_bytes(const bench_shape *s, int want_grads) {
    double dsz = (double)distil_dtype_size(s->dtype);
    if (!want_grads) {
        return 4.0;
    }
    if (s->workload == BENCH_JSD) {
        return 4.0 + (double)s->rows * (double)s->vocab * dsz;
    }
    return 4.0 + ((double)s->rows + (double)s->vocab) * (double)s->hs * dsz;
}

/* Labels uniform in [0, V) (the heads' common prefix, docs/SPEC.md §6); a fraction ignore_frac
 * of them is ignore_index (-100). */
static void bench_fill_labels(int64_t *lab, int64_t n, const bench_shape *s, bench_rng *r) {
    const int64_t v =
        s->teacher_vocab > 0 && s->teacher_vocab < s->vocab ? s->teacher_vocab : s->vocab;
    for (int64_t i = 0; i < n; i++) {
        lab[i] = (int64_t)(bench_rng_next(r) % (uint64_t)v);
        double u = (double)(bench_rng_next(r) >> 11) / 9007199254740992.0; /* [0, 1) */
        if (u < s->ignore_frac) {
            lab[i] = -100;
        }
    }
}

/* A cached top-k teacher row by row: K consecutive ids from a random start (distinct while
 * K <= V), and log-probs -2 - j / 4, falling, whose mass stays below 1 for every K (at most
 * e^-2 / (1 - e^-1/4) = 0.61, so a tail remains and reverse KL is finite). */
static void bench_fill_topk(void *dst, const bench_tensor *t, const bench_shape *s, bench_rng *r) {
    for (int64_t i = 0; i < t->rows; i++) {
        int64_t start = (int64_t)(bench_rng_next(r) % (uint64_t)s->vocab);
        for (int64_t j = 0; j < t->cols; j++) {
            if (t->logp == BENCH_TOPK_IDS) {
                ((int64_t *)dst)[i * t->cols + j] = (start + j) % s->vocab;
            } else {
                ((float *)dst)[i * t->cols + j] = -2.0f - 0.25f * (float)j;
            }
        }
    }
}

/* Allocate one tensor in the context's memory and fill it, through a host copy on devices. */
static distil_status bench_tensor_make(distil_ctx *ctx, const bench_shape *s, const bench_tensor *t,
                                       int host_direct, bench_rng *r, void **out) {
    size_t bytes = (size_t)bench_tensor_bytes(s, t);
    *out = NULL;
    if (bytes == 0) {
        return DISTIL_OK;
    }
    distil_status st = distil_malloc(ctx, bytes, out);
    if (st != DISTIL_OK) {
        return st;
    }
    void *host = host_direct ? *out : malloc(bytes);
    if (host == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    int rc = 0;
    if (t->logp >= BENCH_TOPK_IDS) {
        bench_fill_topk(host, t, s, r);
    } else if (t->cols == 0) {
        bench_fill_labels(host, t->rows, s, r);
    } else {
        rc = bench_fill_tensor(host, t->rows, t->cols, s->dtype, t->logp, t->scale, r);
    }
    if (rc == 0 && !host_direct) {
        st = distil_memcpy_to_device(ctx, *out, host, bytes);
    }
    if (!host_direct) {
        free(host);
    }
    return rc != 0 ? DISTIL_ERR_OUT_OF_MEMORY : st;
}

/* Outputs are shared by all sets. On the host they are written once so that their pages are
 * resident before the peak-memory baseline is read. */
static distil_status bench_outputs_make(distil_ctx *ctx, const bench_shape *s, int want_grads,
                                        int host_direct, bench_buffers *b) {
    size_t dsz = distil_dtype_size(s->dtype);
    size_t ga = 0;
    size_t gb = 0;
    if (want_grads) {
        ga = (size_t)s->rows * (size_t)(s->workload == BENCH_JSD ? s->vocab : s->hs) * dsz;
        gb = s->workload == BENCH_FUSED ? (size_t)s->vocab * (size_t)s->hs * dsz : 0;
    }
    distil_status st = distil_malloc(ctx, 4 * sizeof(float), (void **)&b->loss);
    if (st == DISTIL_OK) {
        st = distil_malloc(ctx, ga, &b->grad_a);
    }
    if (st == DISTIL_OK) {
        st = distil_malloc(ctx, gb, &b->grad_b);
    }
    const int ent = s->workload == BENCH_FUSED && s->entropy && s->topk_k == 0;
    if (st == DISTIL_OK && ent) {
        st = distil_malloc(ctx, (size_t)s->rows * sizeof(float), (void **)&b->entropy);
    }
    if (st == DISTIL_OK && host_direct) {
        memset(b->loss, 0xff, 4 * sizeof(float)); /* NaN poison */
        if (ga > 0) {
            memset(b->grad_a, 0xff, ga);
        }
        if (gb > 0) {
            memset(b->grad_b, 0xff, gb);
        }
    }
    return st;
}

/* --teacher-fp8-head: each set's teacher head (IN_D, teacher_vocab or vocab rows) made once. */
static distil_status bench_heads_make(distil_ctx *ctx, const bench_shape *s, bench_buffers *b) {
    const int64_t vt = s->teacher_vocab > 0 ? s->teacher_vocab : s->vocab;
    distil_status st = distil_e4m3_head_size(ctx, vt, s->ht, &b->head_bytes);
    for (int k = 0; k < b->sets && st == DISTIL_OK; k++) {
        st = distil_malloc(ctx, b->head_bytes, &b->head[k]);
        if (st == DISTIL_OK) {
            st = distil_e4m3_head_make(ctx, s->dtype, b->in[k][IN_D], vt, s->ht, b->head[k],
                                       b->head_bytes);
        }
    }
    return st == DISTIL_OK ? distil_ctx_synchronize(ctx) : st;
}

distil_status bench_buffers_create(distil_ctx *ctx, const bench_shape *s, int want_grads, int sets,
                                   uint64_t seed, bench_buffers **out) {
    static int table_ready = 0;
    if (!table_ready) {
        bench_table_init(seed);
        table_ready = 1;
    }
    *out = NULL;
    bench_buffers *b = calloc(1, sizeof *b);
    if (b == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    b->sets = sets < 1 ? 1 : (sets > BENCH_MAX_SETS ? BENCH_MAX_SETS : sets);
    int host_direct = bench_is_host_backend(distil_ctx_backend_name(ctx));
    bench_tensor t[IN_COUNT];
    bench_tensors_of(s, t);
    bench_rng r = {seed};
    distil_status st = DISTIL_OK;
    for (int k = 0; k < b->sets && st == DISTIL_OK; k++) {
        for (int i = 0; i < IN_COUNT && st == DISTIL_OK; i++) {
            st = bench_tensor_make(ctx, s, &t[i], host_direct, &r, &b->in[k][i]);
        }
    }
    if (st == DISTIL_OK) {
        st = bench_outputs_make(ctx, s, want_grads, host_direct, b);
    }
    if (st == DISTIL_OK && s->teacher_fp8_head) {
        st = bench_heads_make(ctx, s, b);
    }
    if (st != DISTIL_OK) {
        bench_buffers_destroy(ctx, b);
        return st;
    }
    *out = b;
    return DISTIL_OK;
}

void bench_buffers_destroy(distil_ctx *ctx, bench_buffers *b) {
    if (b == NULL) {
        return;
    }
    for (int k = 0; k < BENCH_MAX_SETS; k++) {
        for (int i = 0; i < IN_COUNT; i++) {
            distil_free(ctx, b->in[k][i]);
        }
    }
    for (int k = 0; k < BENCH_MAX_SETS; k++) {
        distil_free(ctx, b->head[k]);
    }
    distil_free(ctx, b->loss);
    distil_free(ctx, b->grad_a);
    distil_free(ctx, b->grad_b);
    distil_free(ctx, b->entropy);
    free(b);
}

static void bench_jsd_desc_of(const bench_shape *s, distil_jsd_desc *d) {
    distil_jsd_desc_init(d);
    d->rows = s->rows;
    d->vocab = s->vocab;
    d->dtype = s->dtype;
    d->beta = s->beta;
    d->divergence = s->divergence;
    d->alpha = s->alpha;
}

/* b (NULL: none yet) and set: the head made once of --teacher-fp8-head. */
static void bench_fused_desc_of(const bench_shape *s, const bench_buffers *b, int set,
                                distil_fused_linear_jsd_desc *d) {
    distil_fused_linear_jsd_desc_init(d);
    d->rows = s->rows;
    d->vocab = s->vocab;
    d->student_hidden = s->hs;
    d->teacher_hidden = s->ht;
    d->dtype = s->dtype;
    d->weight_hard = s->weight_hard;
    d->weight_soft = s->weight_soft;
    d->beta = s->beta;
    d->temperature = s->tau;
    d->chunk_rows = s->chunk_rows;
    d->divergence = s->divergence;
    d->alpha = s->alpha;
    d->teacher_vocab = s->teacher_vocab; /* docs/SPEC.md §6 head options */
    d->student_softcap = s->softcap;
    d->teacher_softcap = s->softcap;
    d->teacher_head_precision = s->teacher_fp8 || s->teacher_fp8_head
                                    ? DISTIL_HEAD_PRECISION_FP8_E4M3
                                    : DISTIL_HEAD_PRECISION_DEFAULT;
    if (s->teacher_fp8_head && b != NULL) {
        d->teacher_weight_e4m3 = b->head[set % b->sets];
        d->teacher_weight_e4m3_bytes = b->head_bytes;
    }
    d->student_entropy = b != NULL ? b->entropy : NULL; /* --entropy */
}

static void bench_topk_desc_of(const bench_shape *s, distil_fused_linear_topk_desc *d) {
    distil_fused_linear_topk_desc_init(d);
    d->rows = s->rows;
    d->vocab = s->vocab;
    d->student_hidden = s->hs;
    d->k = s->topk_k;
    d->dtype = s->dtype;
    d->weight_hard = s->weight_hard;
    d->weight_soft = s->weight_soft;
    d->temperature = s->tau;
    d->chunk_rows = s->chunk_rows;
    d->tail = s->topk_tail; /* docs/SPEC.md §7 */
    d->divergence = s->divergence;
    d->beta = s->beta;
    d->alpha = s->alpha;
}

distil_status bench_call(distil_ctx *ctx, const bench_shape *s, bench_mode mode,
                         const bench_buffers *b, int set) {
    void *const *in = b->in[set % b->sets];
    int full = mode == BENCH_FULL;
    if (s->workload == BENCH_JSD) {
        distil_jsd_desc d;
        bench_jsd_desc_of(s, &d);
        return distil_jsd(ctx, &d, in[IN_A], in[IN_B], in[IN_LABELS], b->loss,
                          full ? b->grad_a : NULL);
    }
    if (s->topk_k > 0) {
        distil_fused_linear_topk_desc d;
        bench_topk_desc_of(s, &d);
        return distil_fused_linear_topk(ctx, &d, in[IN_A], in[IN_B], NULL, in[IN_C], in[IN_D],
                                        in[IN_LABELS], b->loss, full ? b->grad_a : NULL,
                                        full ? b->grad_b : NULL, NULL);
    }
    distil_fused_linear_jsd_desc d;
    bench_fused_desc_of(s, b, set, &d);
    return distil_fused_linear_jsd(ctx, &d, in[IN_A], in[IN_B], NULL, in[IN_C], in[IN_D], NULL,
                                   in[IN_LABELS], b->loss, full ? b->grad_a : NULL,
                                   full ? b->grad_b : NULL, NULL);
}

distil_status bench_workspace_bytes(distil_ctx *ctx, const bench_shape *s, bench_mode mode,
                                    const bench_buffers *b, size_t *bytes) {
    if (s->workload == BENCH_JSD) {
        distil_jsd_desc d;
        bench_jsd_desc_of(s, &d);
        return distil_jsd_workspace_size(ctx, &d, bytes);
    }
    if (s->topk_k > 0) {
        distil_fused_linear_topk_desc d;
        bench_topk_desc_of(s, &d);
        return distil_fused_linear_topk_workspace_size(ctx, &d, mode == BENCH_FULL, bytes);
    }
    distil_fused_linear_jsd_desc d;
    bench_fused_desc_of(s, b, 0, &d);
    return distil_fused_linear_jsd_workspace_size(ctx, &d, mode == BENCH_FULL, bytes);
}

distil_status bench_read_loss(distil_ctx *ctx, const bench_buffers *b, double *loss) {
    float v = 0.0f;
    distil_status st = distil_memcpy_to_host(ctx, &v, b->loss, sizeof v);
    *loss = (double)v;
    return st;
}
