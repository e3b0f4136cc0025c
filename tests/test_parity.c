/*
 * test_parity.c - every backend with a device against the float64 "ref", within the docs/SPEC.md
 * section 3 tolerances, on seeded random non-zero inputs with poisoned outputs. The grid is two
 * tables of cases (distil_jsd, distil_fused_linear_jsd), each run in every dtype through one
 * compare function; every (case, dtype) is one named cmocka test.
 */
#include "test_problems.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static distil_ctx *g_ctx; /* the backend under test */
static distil_ctx *g_ref;

static const distil_dtype dtypes[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};

/* ---------------------------------------------------------------- distil_jsd cases */

/* One row per case; every case runs in every dtype. Pads widen the row strides of student,
 * teacher and gradient (0: dense, passed as stride 0). */
#define NEG_INF TP_NEG_INF
#define TINY    TP_TINY
// clang-format off
#define J(t, v, px, py, pg, beta, red, labels, grad, special, scale) \
    {t, v, px, py, pg, beta, DISTIL_REDUCTION_##red, TP_LABELS_##labels, TP_GRAD_##grad, special, \
     scale, .div = DISTIL_DIVERGENCE_JSD}

static const tp_jsd_spec jsd_cases[] = {
    /* V = 1: unnormalised log-probs (see tu_fill_logp), so the loss is not identically 0 */
   /* T    V       pads       beta  reduction  labels       grad     special         scale */
    J(5,   1,      0, 0, 0,  0.5f, BATCHMEAN, NONE,        OUT,     0,              1.0f),
    J(5,   1,      2, 3, 1,  0.0f, SUM,       MIXED,       OUT,     0,              1.0f),
    J(5,   1,      0, 0, 0,  1.0f, NONE,      MIXED,       INPLACE, 0,              1.0f),
    /* V = 3; T = 1 and T = 0 (loss 0, nothing else written) */
    J(1,   3,      0, 0, 0,  0.1f, BATCHMEAN, NONE,        OUT,     0,              1.0f),
    J(7,   3,      1, 0, 2,  0.9f, SUM,       MIXED,       OUT,     NEG_INF,        1.0f),
    J(7,   3,      0, 0, 0,  0.5f, NONE,      ALL_IGNORED, OUT,     0,              1.0f),
    J(0,   3,      0, 0, 0,  0.5f, BATCHMEAN, NONE,        OUT,     0,              1.0f),
    J(0,   3,      0, 0, 0,  0.5f, SUM,       MIXED,       OUT,     0,              1.0f),
    J(0,   3,      0, 0, 0,  0.5f, NONE,      NONE,        OUT,     0,              1.0f),
    /* V = 1271: the beta grid, every reduction, strides, in place, -inf, tiny, ignored */
    J(16,  1271,   0, 0, 0,  0.0f, BATCHMEAN, MIXED,       OUT,     0,              1.0f),
    J(16,  1271,   0, 0, 0,  0.1f, SUM,       NONE,        NULL,    0,              1.0f),
    J(16,  1271,   5, 9, 3,  0.5f, BATCHMEAN, MIXED,       OUT,     NEG_INF,        1.0f),
    J(16,  1271,   0, 0, 0,  0.9f, NONE,      MIXED,       INPLACE, 0,              1.0f),
    J(16,  1271,   7, 0, 0,  1.0f, BATCHMEAN, NONE,        INPLACE, NEG_INF,        1.0f),
    J(16,  1271,   0, 0, 0,  0.5f, BATCHMEAN, ALL_IGNORED, OUT,     0,              1.0f),
    J(16,  1271,   0, 0, 0,  0.5f, SUM,       ALL_IGNORED, OUT,     0,              1.0f),
    J(16,  1271,   0, 0, 0,  0.1f, NONE,      ALL_IGNORED, NULL,    0,              1.0f),
    J(16,  1271,   0, 0, 0,  1.0f, SUM,       MIXED,       OUT,     TINY,           1.0f),
    J(16,  1271,   0, 0, 0,  0.5f, BATCHMEAN, NONE,        OUT,     TINY,           0.25f),
    J(16,  1271,   0, 0, 0,  0.0f, NONE,      NONE,        OUT,     NEG_INF | TINY, 1.0f),
    J(1,   1271,   0, 0, 1,  0.9f, SUM,       NONE,        OUT,     0,              1.0f),
    /* many rows, narrow and wide, for backends that split rows over threads or blocks */
    J(200, 33,     0, 0, 0,  0.5f, BATCHMEAN, MIXED,       OUT,     0,              1.0f),
    J(40,  4099,   3, 3, 3,  0.1f, SUM,       MIXED,       OUT,     NEG_INF,        1.0f),
    /* the seed vocabulary over many rows (every row a block of its own on a GPU) */
    J(32,  128256, 0, 0, 0,  0.5f, BATCHMEAN, MIXED,       OUT,     0,              1.0f),
    /* V = 128257 (a Llama-3 vocabulary + 1): few rows, the reference is float64 */
    J(3,   128257, 0, 0, 0,  0.5f, BATCHMEAN, NONE,        OUT,     0,              1.0f),
    J(3,   128257, 64,0, 64, 0.0f, SUM,       MIXED,       OUT,     NEG_INF,        1.0f),
    J(2,   128257, 0, 0, 0,  1.0f, NONE,      NONE,        INPLACE, 0,              1.0f),
    J(3,   128257, 0, 0, 0,  0.9f, BATCHMEAN, MIXED,       NULL,    TINY,           1.0f),
    J(3,   128257, 0, 0, 0,  0.1f, BATCHMEAN, NONE,        OUT,     0,              1.0f),
    /* docs/SPEC.md §6: every divergence (alpha 0 and 1: the plain KL and 0), the given N */
#define D(t, v, red, labels, grad, special, div, alpha, norm, dev) \
    {t, v, 0, 0, 0, 0.5f, DISTIL_REDUCTION_##red, TP_LABELS_##labels, TP_GRAD_##grad, special, \
     1.0f, DISTIL_DIVERGENCE_##div, alpha, norm, dev}
   /* T    V     reduction  labels  grad     special  divergence       alpha  N      device */
    D(16,  1271, BATCHMEAN, MIXED,  OUT,     NEG_INF, FORWARD_KL,      0.0f,  0.0f,  false),
    D(16,  1271, SUM,       NONE,   INPLACE, NEG_INF, REVERSE_KL,      0.0f,  0.0f,  false),
    D(16,  1271, NONE,      MIXED,  OUT,     NEG_INF, SKEW_KL,         0.1f,  0.0f,  false),
    D(16,  1271, BATCHMEAN, NONE,   OUT,     TINY,    SKEW_KL,         0.9f,  0.0f,  false),
    D(7,   33,   SUM,       NONE,   OUT,     0,       SKEW_KL,         1.0f,  0.0f,  false),
    D(16,  1271, BATCHMEAN, MIXED,  OUT,     NEG_INF, SKEW_REVERSE_KL, 0.1f,  0.0f,  false),
    D(16,  1271, NONE,      NONE,   INPLACE, TINY,    SKEW_REVERSE_KL, 0.5f,  0.0f,  false),
    D(7,   33,   SUM,       MIXED,  OUT,     NEG_INF, SKEW_REVERSE_KL, 0.0f,  0.0f,  false),
    D(16,  1271, BATCHMEAN, MIXED,  OUT,     NEG_INF, TVD,             0.0f,  0.0f,  false),
    D(16,  1271, NONE,      NONE,   OUT,     TINY,    TVD,             0.0f,  0.0f,  false),
    D(40,  4099, SUM,       MIXED,  OUT,     NEG_INF, SKEW_KL,         0.3f,  0.0f,  false),
    D(3,   128257, BATCHMEAN, NONE, OUT,     0,       SKEW_REVERSE_KL, 0.2f,  0.0f,  false),
    D(3,   128257, SUM,     MIXED,  OUT,     NEG_INF, TVD,             0.0f,  0.0f,  false),
    D(16,  1271, BATCHMEAN, MIXED,  OUT,     0,       JSD,             0.0f,  37.5f, false),
    D(16,  1271, BATCHMEAN, NONE,   INPLACE, 0,       SKEW_KL,         0.1f,  1e4f,  true),
    D(16,  1271, BATCHMEAN, MIXED,  OUT,     0,       TVD,             0.0f,  0.0f,  true),
    D(16,  1271, BATCHMEAN, NONE,   OUT,     0,       REVERSE_KL,      0.0f,  -3.0f, true),
#undef D
};
// clang-format on

static bool row_ignored(const int64_t *labels, int64_t i, int64_t ignore_index) {
    return labels && labels[i] == ignore_index;
}

/* Everything the backend wrote, checked on its own: written, not NaN (no input is), padding
 * untouched, ignored rows exactly 0. */
static void jsd_check_written(const tp_jsd *p, const tp_jsd_out *o) {
    distil_dtype dt = p->d.dtype;
    int64_t nl = (int64_t)p->nloss;
    TU_CHECK_WRITTEN("loss", o->loss, DISTIL_F32, 1, nl, nl, false);
    TU_CHECK_POISONED("loss past its last value", o->loss, DISTIL_F32, p->nloss, 1);
    if (!o->grad) {
        return;
    }
    TU_CHECK_WRITTEN("grad_student", o->grad, dt, p->s.t, p->s.v, p->gs, false);
    TU_CHECK_PADDING("grad_student row padding", o->grad, dt, p->s.t, p->s.v, p->gs);
    for (int64_t i = 0; i < p->s.t; i++) {
        for (int64_t v = 0; row_ignored(p->labels, i, p->d.ignore_index) && v < p->s.v; v++) {
            assert_true(tu_get(o->grad, dt, (size_t)(i * p->gs + v)) == 0.0f);
        }
    }
}

static void jsd_compare(const tp_jsd_spec *s, distil_dtype dt, uint64_t seed) {
    tp_jsd p;
    tp_jsd_make(&p, s, dt, seed);
    tp_jsd_out got, ref;
    tp_jsd_run(g_ref, &p, &ref);
    tp_jsd_run(g_ctx, &p, &got);
    jsd_check_written(&p, &got);
    for (size_t i = 0; i < p.nloss; i++) {
        TU_CHECK_REL("loss", got.loss[i], ref.loss[i], tu_tolerance(dt, TU_LOSS));
    }
    if (got.grad) {
        TU_CHECK_TENSOR("grad_student", got.grad, ref.grad, dt, s->t, s->v, p.gs,
                        tu_tolerance(dt, TU_GRAD));
    }
    tp_jsd_out_free(&got), tp_jsd_out_free(&ref);
    tp_jsd_free(&p);
}

/* ---------------------------------------------------------------- fused cases */

/* One row per case; every case runs in every dtype. wh, ws: weight_hard, weight_soft; bias:
 * which heads have one; grads: the gradients asked for; std: spread of the logits (0: 3);
 * chunk: chunk_rows (0: auto). */
#define BIAS_ST  true, true
#define BIAS_S   true, false
#define BIAS_T   false, true
#define NO_BIAS  false, false
#define NO_GRADS 0
#define XS       TP_WANT_XS
#define WS_BS    (TP_WANT_WS | TP_WANT_BS)
#define ALL      TP_WANT_ALL
// clang-format off
#define F(t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, labels, std, chunk) \
    {t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, TP_LABELS_##labels, std, chunk, \
     .div = DISTIL_DIVERGENCE_JSD}

#define FH(t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, labels, std, chunk, hd) \
    {t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, TP_LABELS_##labels, std, chunk, \
     .div = DISTIL_DIVERGENCE_JSD, .head = hd}

/* FH named "#gradw": the cases test_parity_cuda_gradw runs under the test hook gradw=require */
#define GW(t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, labels, std, chunk, hd) \
    {t, v, hs, ht, wh, ws, beta, tau, bias, parts, grads, TP_LABELS_##labels, std, chunk, \
     .div = DISTIL_DIVERGENCE_JSD, .head = hd, .tag = "gradw"}

/* Head options (docs/SPEC.md §6): vt, student scale / cap, teacher scale / cap, tau_t, lse. */
static const tp_head H_TEACHER_WIDER = {.vt = 1271 + 37};
static const tp_head H_STUDENT_WIDER = {.vt = 1271 - 29, .lse = true};
static const tp_head H_CAP = {.s_cap = 4.0f, .t_cap = 7.0f};
static const tp_head H_SCALE = {.s_scale = 0.7f, .t_scale = 1.6f};
static const tp_head H_CAP_SCALE = {.s_scale = 2.0f, .s_cap = 3.0f, .t_scale = 0.5f, .t_cap = 30.0f};
static const tp_head H_TAU_T = {.tau_t = 2.5f};
static const tp_head H_LSE = {.s_cap = 5.0f, .t_scale = 1.25f, .lse = true};
static const tp_head H_ALL = {
    .vt = -64, .s_scale = 1.5f, .s_cap = 6.0f, .t_cap = 9.0f, .tau_t = 0.75f, .lse = true};
/* docs/SPEC.md §6 fp8 teacher head, alone and with the other head options */
static const tp_head H_FP8 = {.t_fp8 = true};
static const tp_head H_FP8_ALL = {.vt = 1271 + 37, .s_cap = 5.0f, .t_scale = 1.25f, .t_cap = 9.0f,
                                  .tau_t = 0.75f, .lse = true, .t_fp8 = true};
static const tp_head H_FP8_NARROW = {.vt = -64, .t_fp8 = true};
/* the student's head wider and capped, in the last grad_Ws GEMM kernel's shapes (V 4040 % 8 == 0) */
static const tp_head H_WIDE_CAP = {.vt = 4104 - 64, .s_cap = 5.0f, .lse = true};
/* docs/SPEC.md §6 student entropy: alone (no head pass), with a cap and a scale (the soft part's
 * distribution of z'), with every head option */
static const tp_head H_ENT = {.entropy = true};
static const tp_head H_ENT_CAP = {.s_scale = 0.8f, .s_cap = 4.0f, .t_cap = 30.0f, .entropy = true};
static const tp_head H_ENT_ALL = {.vt = -64,
                                  .s_scale = 1.5f,
                                  .s_cap = 6.0f,
                                  .t_cap = 9.0f,
                                  .tau_t = 0.75f,
                                  .lse = true,
                                  .entropy = true};

static const tp_fused_spec fused_cases[] = {
   /* T   V      Hs  Ht  wh    ws    beta  tau   bias     parts  grads     labels       std chunk */
    /* V = 1: softmax over one class, every output is 0 */
    F(4,  1,     8,  8,  0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      NONE,        0,   0),
    /* V = 3, T = 1 */
    F(5,  3,     6,  10, 1.0f, 0.0f, 0.0f, 2.0f, BIAS_S,  true,  ALL,      NONE,        0,   0),
    F(1,  3,     6,  10, 0.0f, 1.0f, 1.0f, 0.5f, NO_BIAS, false, XS,       NONE,        0,   0),
    /* V = 1271: tau, beta and weight grids, bias, gradient subsets, ignored rows */
    F(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0),
    F(13, 1271,  24, 40, 1.0f, 0.0f, 0.1f, 2.0f, NO_BIAS, false, ALL,      NONE,        0,   0),
    F(13, 1271,  24, 40, 0.0f, 1.0f, 0.9f, 0.5f, BIAS_ST, false, ALL,      MIXED,       0,   0),
    F(13, 1271,  24, 40, 0.3f, 0.7f, 0.0f, 1.0f, BIAS_T,  true,  NO_GRADS, NONE,        0,   0),
    F(13, 1271,  24, 40, 0.5f, 0.5f, 1.0f, 2.0f, BIAS_ST, false, XS,       MIXED,       0,   0),
    F(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_S,  false, WS_BS,    NONE,        0,   0),
    F(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      ALL_IGNORED, 0,   0),
    F(13, 1271,  24, 40, 0.5f, 0.5f, 0.1f, 0.5f, BIAS_ST, false, ALL,      NONE,        100, 0),
    F(40, 1271,  32, 32, 0.7f, 0.3f, 0.5f, 1.0f, BIAS_S,  false, ALL,      MIXED,       0,   7),
    F(0,  1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_S,  true,  ALL,      NONE,        0,   0),
    /* V = 32003 (odd): the seed shape's proportions, Hs = Ht / 2 */
    F(6,  32003, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0),
    F(6,  32003, 16, 32, 1.0f, 0.0f, 0.0f, 2.0f, NO_BIAS, false, XS,       NONE,        0,   0),
    F(6,  32003, 16, 32, 0.0f, 1.0f, 1.0f, 0.5f, BIAS_S,  false, NO_GRADS, NONE,        0,   0),
    F(5,  32003, 16, 32, 0.5f, 0.5f, 0.9f, 1.0f, BIAS_ST, false, ALL,      NONE,        0,   2),
    /* V % 4 == 0, rows spread over 8 and 16 blocks of a GPU (the seed vocabulary last) */
    F(9,  65536, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0),
    F(4,  128256, 8, 16, 0.2f, 0.8f, 0.7f, 2.0f, BIAS_S,  false, ALL,      MIXED,       0,   0),
    /* more rows than a GPU holds clusters at once (cuda's resident kernel: each cluster takes
     * several rows in turn, its exchanges' barrier phases, with ignored rows among them) */
    F(200, 32004, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true, ALL,      MIXED,       0,   0),
    F(200, 32004, 16, 32, 0.3f, 0.7f, 0.5f, 2.0f, BIAS_S,  false, NO_GRADS, MIXED,      0,   0),
    F(60, 128256, 8, 16, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, false, ALL,      MIXED,       0,   0),
    F(60, 128256, 8, 16, 0.5f, 0.5f, 0.1f, 1.0f, BIAS_S,  false, NO_GRADS, MIXED,       0,   0),
    /* the loss alone in the shapes whose logits GEMMs can give the row statistics (docs/DESIGN.md:
     * bf16, V % 4 == 0, hidden sizes % 8 == 0; cuda on sm_90): chunks of a partial row tile, a
     * partial last column tile, tau != 1 (the CE's own sums) and 1, biases (V % 8 == 0), ignored
     * rows, the divergences */
    F(300, 4100, 16, 32, 0.5f, 0.5f, 0.5f, 2.0f, NO_BIAS, true,  NO_GRADS, MIXED,       0,   130),
    F(140, 4096, 24, 40, 0.3f, 0.7f, 0.1f, 1.0f, BIAS_ST, false, NO_GRADS, NONE,        0,   0),
    F(70,  4104, 8,  16, 0.5f, 0.5f, 0.9f, 0.5f, BIAS_T,  true,  NO_GRADS, ALL_IGNORED, 0,   0),
    F(129, 2052, 16, 24, 0.5f, 0.5f, 0.5f, 1.0f, NO_BIAS, true,  NO_GRADS, MIXED,       8,   64),
    {64, 4100, 16, 32, 0.5f, 0.5f, 0.5f, 1.5f, BIAS_S, true, NO_GRADS, TP_LABELS_MIXED, 0, 0,
     .div = DISTIL_DIVERGENCE_REVERSE_KL},
    {64, 4100, 16, 32, 0.5f, 0.5f, 0.5f, 0.7f, NO_BIAS, false, NO_GRADS, TP_LABELS_NONE, 0, 0,
     .div = DISTIL_DIVERGENCE_SKEW_KL, .alpha = 0.1f},
    /* (the statistics path without a bias: ignored rows, the reverse KL at tau != 1) */
    F(70,  4104, 8,  16, 0.5f, 0.5f, 0.9f, 0.5f, NO_BIAS, false, NO_GRADS, ALL_IGNORED, 0,   0),
    {96, 4096, 24, 40, 0.5f, 0.5f, 0.5f, 1.5f, NO_BIAS, true, NO_GRADS, TP_LABELS_MIXED, 0, 40,
     .div = DISTIL_DIVERGENCE_REVERSE_KL},
    /* grad_Ws over several chunks in the shapes of cuda's last weight-gradient GEMM (docs/
     * DESIGN.md: bf16, V % 8 == 0, Hs % 8 == 0; named "#gradw" for test_parity_cuda_gradw):
     * partial row and column tiles, a last chunk of one row, chunks shorter than a K tile, a
     * bias; one chunk (no accumulator: cuBLAS writes grad_Ws); rows a multiple of the chunk
     * (four chunks: two full groups of two on cuda, docs/DESIGN.md "Weight-gradient groups"),
     * alone and with a wider, capped student head */
    GW(41,  4104, 40, 24, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   20, NULL),
    GW(29,  4096, 136, 24, 0.3f, 0.7f, 0.1f, 2.0f, NO_BIAS, false, WS_BS,   NONE,        0,   7,  NULL),
    GW(12,  4104, 40, 24, 0.5f, 0.5f, 0.9f, 1.0f, BIAS_S,  false, WS_BS,    MIXED,       0,   0,  NULL),
    GW(40,  4104, 40, 24, 0.5f, 0.5f, 0.5f, 1.0f, NO_BIAS, false, ALL,      NONE,        0,   10, NULL),
    GW(40,  4104, 40, 24, 0.5f, 0.5f, 0.5f, 2.0f, BIAS_ST, true,  ALL,      MIXED,       0,   10, &H_WIDE_CAP),
    /* hidden sizes of GEMM-tile scale (Hs = Ht / 2), chunks of 20 rows with a partial last one */
    F(48, 2053,  256, 512, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true, ALL,      MIXED,       0,   20),
    /* docs/SPEC.md §6: every divergence in the soft part, tau^2, the given N */
#define D(t, v, wh, ws, tau, labels, chunk, div, alpha, norm, dev, tsq) \
    {t, v, 24, 40, wh, ws, 0.5f, tau, BIAS_ST, true, ALL, TP_LABELS_##labels, 0, chunk, \
     DISTIL_DIVERGENCE_##div, alpha, norm, dev, tsq, NULL, NULL, false}
   /* T   V      wh    ws    tau   labels chunk divergence       alpha  N      device tau^2 */
    D(13, 1271,  0.5f, 0.5f, 1.0f, MIXED, 0,    FORWARD_KL,      0.0f,  0.0f,  false, false),
    D(13, 1271,  0.0f, 1.0f, 2.0f, NONE,  0,    REVERSE_KL,      0.0f,  0.0f,  false, true),
    D(13, 1271,  0.5f, 0.5f, 0.5f, MIXED, 5,    SKEW_KL,         0.1f,  0.0f,  false, false),
    D(13, 1271,  0.2f, 0.8f, 1.0f, NONE,  0,    SKEW_KL,         1.0f,  0.0f,  false, false),
    D(13, 1271,  0.5f, 0.5f, 2.0f, MIXED, 0,    SKEW_REVERSE_KL, 0.1f,  0.0f,  false, true),
    D(13, 1271,  0.5f, 0.5f, 1.0f, NONE,  4,    SKEW_REVERSE_KL, 0.7f,  0.0f,  false, false),
    D(13, 1271,  0.5f, 0.5f, 1.0f, MIXED, 0,    TVD,             0.0f,  0.0f,  false, false),
    D(6,  32003, 0.5f, 0.5f, 0.7f, MIXED, 2,    TVD,             0.0f,  0.0f,  false, true),
    D(6,  32003, 0.5f, 0.5f, 1.0f, NONE,  0,    SKEW_KL,         0.5f,  0.0f,  false, false),
    D(13, 1271,  0.5f, 0.5f, 1.0f, MIXED, 5,    JSD,             0.0f,  120.0f, false, false),
    D(13, 1271,  0.5f, 0.5f, 2.0f, MIXED, 0,    SKEW_KL,         0.1f,  2.5f,  true,  true),
    D(13, 1271,  0.5f, 0.5f, 1.0f, NONE,  0,    JSD,             0.0f,  0.0f,  true,  false),
#undef D
    /* docs/SPEC.md §6 head options: vocabularies of different sizes (teacher padded, student
     * padded), scale and softcap per head (caps below the logits' spread: saturation), a teacher
     * temperature, the LSE outputs; one chunk and several */
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0,  &H_TEACHER_WIDER),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 2.0f, BIAS_ST, true,  ALL,      MIXED,       0,   4,  &H_STUDENT_WIDER),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_S,  true,  ALL,      MIXED,       10,  0,  &H_CAP),
    FH(13, 1271,  24, 40, 0.3f, 0.7f, 0.1f, 0.5f, NO_BIAS, false, ALL,      NONE,        0,   5,  &H_SCALE),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.9f, 2.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0,  &H_CAP_SCALE),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0,  &H_TAU_T),
    FH(13, 1271,  24, 40, 0.0f, 1.0f, 0.0f, 0.5f, NO_BIAS, true,  XS,       NONE,        0,   0,  &H_TAU_T),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 1.0f, 2.0f, BIAS_ST, true,  NO_GRADS, MIXED,       0,   6,  &H_LSE),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      ALL_IGNORED, 0,   0,  &H_LSE),
    FH(40, 2053,  32, 48, 0.7f, 0.3f, 0.5f, 1.5f, BIAS_ST, true,  ALL,      MIXED,       8,   7,  &H_ALL),
    FH(5,  32003, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   2,  &H_ALL),
    /* docs/SPEC.md §6 student entropy: tau, ignored rows (mixed and all), chunks, no labels
     * (weight_hard 0), no gradients, peaky rows, every divergence's row kernel, the shapes of
     * the statistics path and of cuda's resident kernel (one block per row at V 1271, 2053 and
     * 4100; clusters of 4 at 32003; of 8 or 16 at 65536 and 128256, the last two at tau != 1:
     * extreme logits with G, every head option with the loss alone) */
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0,  &H_ENT),
    FH(13, 1271,  24, 40, 0.0f, 1.0f, 0.0f, 2.0f, NO_BIAS, false, ALL,      NONE,        0,   4,  &H_ENT),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 1.0f, 0.5f, BIAS_S,  true,  NO_GRADS, MIXED,       100, 0,  &H_ENT),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      ALL_IGNORED, 0,   0,  &H_ENT),
    FH(13, 1271,  24, 40, 0.3f, 0.7f, 0.5f, 1.5f, BIAS_ST, true,  ALL,      MIXED,       10,  5,  &H_ENT_CAP),
    FH(40, 2053,  32, 48, 0.7f, 0.3f, 0.5f, 1.5f, BIAS_ST, true,  ALL,      MIXED,       8,   7,  &H_ENT_ALL),
    FH(6,  32003, 16, 32, 0.0f, 1.0f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   2,  &H_ENT),
    FH(60, 128256, 8, 16, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, false, ALL,      MIXED,       0,   0,  &H_ENT),
    FH(9,  65536, 16, 32, 0.5f, 0.5f, 0.5f, 2.0f, BIAS_ST, true,  ALL,      MIXED,       100, 0,  &H_ENT),
    FH(8,  128256, 8, 16, 0.3f, 0.7f, 0.9f, 0.5f, BIAS_S,  false, NO_GRADS, MIXED,       0,   3,  &H_ENT_ALL),
    FH(300, 4100, 16, 32, 0.5f, 0.5f, 0.5f, 2.0f, NO_BIAS, true,  NO_GRADS, MIXED,       0,   130, &H_ENT),
    {64, 4100, 16, 32, 0.5f, 0.5f, 0.5f, 1.5f, BIAS_S, true, ALL, TP_LABELS_MIXED, 0, 0,
     .div = DISTIL_DIVERGENCE_REVERSE_KL, .head = &H_ENT},
    {13, 1271, 24, 40, 0.5f, 0.5f, 0.5f, 0.7f, BIAS_S, true, ALL, TP_LABELS_NONE, 0, 0,
     .div = DISTIL_DIVERGENCE_TVD, .head = &H_ENT},
    /* docs/SPEC.md §6 fp8 teacher head: Ht not a multiple of 16 (40, 48, 13), biases, tau,
     * ignored rows, chunking, no gradients, extreme logits, with the other head options */
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   0,  &H_FP8),
    FH(13, 1271,  24, 13, 0.3f, 0.7f, 0.1f, 2.0f, BIAS_T,  false, XS,       NONE,        0,   4,  &H_FP8),
    FH(13, 1271,  24, 40, 0.0f, 1.0f, 1.0f, 0.5f, NO_BIAS, true,  NO_GRADS, NONE,        100, 5,  &H_FP8),
    FH(40, 2053,  32, 48, 0.7f, 0.3f, 0.5f, 1.5f, BIAS_ST, true,  ALL,      MIXED,       8,   7,  &H_FP8_NARROW),
    FH(13, 1271,  24, 40, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   3,  &H_FP8_ALL),
    FH(5,  32003, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   2,  &H_FP8),
    /* aligned shapes (V % 16 == 0, Ht % 16 == 0) that cuBLASLt's fp8 product takes on cuda */
    FH(9,  65536, 16, 32, 0.5f, 0.5f, 0.5f, 1.0f, BIAS_ST, true,  ALL,      MIXED,       0,   4,  &H_FP8),
    FH(40, 2048,  32, 64, 0.3f, 0.7f, 0.9f, 2.0f, NO_BIAS, false, XS,       NONE,        0,   16, &H_FP8),
    /* docs/SPEC.md §2 grad_weight_fp32: grad_Ws and grad_bs in fp32 beside 16-bit inputs; one
     * chunk, several (the output its own accumulator), a padded student head (its zeroed tail) */
#define FG(t, v, hs, ht, bias, grads, labels, chunk, hd) \
    {t, v, hs, ht, 0.5f, 0.5f, 0.5f, 1.0f, bias, true, grads, TP_LABELS_##labels, 0, chunk, \
     .div = DISTIL_DIVERGENCE_JSD, .head = hd, .gw_f32 = true}
    FG(13, 1271,  24, 40, BIAS_ST, ALL,      MIXED,       0,   NULL),
    FG(40, 1271,  32, 32, BIAS_S,  ALL,      MIXED,       7,   NULL),
    FG(13, 1271,  24, 40, BIAS_S,  WS_BS,    NONE,        4,   &H_STUDENT_WIDER),
#undef FG
};
// clang-format on

/* What a case's gradients must be, whatever ref says. */
typedef enum grad_expect {
    EXPECT_CLOSE,     /* within tolerance of ref */
    EXPECT_UNTOUCHED, /* rows == 0: nothing but the loss is written */
    EXPECT_ZERO,      /* no valid row: exactly 0 */
    EXPECT_TINY,      /* V = 1: softmax over one class, 0 up to fp32 rounding */
} grad_expect;

/* One gradient: written, not NaN, and as expected. */
static void fused_check_grad(const char *what, const void *got, const void *ref, distil_dtype dt,
                             int64_t rows, int64_t cols, grad_expect e, distil_dtype tol_dt) {
    size_t n = (size_t)(rows * cols);
    if (!got) {
        return;
    }
    if (e == EXPECT_UNTOUCHED) {
        TU_CHECK_POISONED(what, got, dt, 0, n);
        return;
    }
    TU_CHECK_WRITTEN(what, got, dt, rows, cols, cols, false);
    for (size_t k = 0; e != EXPECT_CLOSE && k < n; k++) {
        float g = tu_get(got, dt, k);
        assert_true(e == EXPECT_ZERO ? g == 0.0f : fabsf(g) <= 1e-6f);
    }
    if (e == EXPECT_CLOSE) {
        /* tol_dt: the inputs' dtype (an fp32 grad_Ws of 16-bit inputs has their error) */
        TU_CHECK_TENSOR(what, got, ref, dt, rows, cols, cols, tu_tolerance(tol_dt, TU_GRAD_FUSED));
    }
}

/* docs/SPEC.md §6: the per-row LSEs (every row, ignored ones too) within the loss bound. */
static void fused_check_lse(const char *what, const float *got, const float *ref, int64_t rows) {
    if (got == NULL) {
        return;
    }
    TU_CHECK_WRITTEN(what, got, DISTIL_F32, 1, rows, rows, false);
    for (int64_t i = 0; i < rows; i++) {
        TU_CHECK_REL(what, got[i], ref[i], tu_tolerance(DISTIL_F32, TU_LOSS));
    }
}

/* docs/SPEC.md §6 student entropy: every row written, an ignored row's exactly 0 (as ref's), a
 * valid row's within the loss bound of max(H, 1e-2) (a confident row's H is far below the
 * rounding of its logits' largest terms). */
static void fused_check_entropy(const float *got, const float *ref, int64_t rows, distil_dtype dt) {
    if (got == NULL) {
        return;
    }
    TU_CHECK_WRITTEN("student_entropy", got, DISTIL_F32, 1, rows, rows, false);
    const double tol = tu_tolerance(dt, TU_LOSS);
    for (int64_t i = 0; i < rows; i++) {
        if (ref[i] == 0.0f) {
            assert_true(got[i] == 0.0f);
            continue;
        }
        const double err = fabs((double)got[i] - (double)ref[i]) / fmax((double)ref[i], 1e-2);
        if (!(err <= tol)) {
            print_error("student_entropy row %lld: got %.9g, ref %.9g, error %.3g > %.3g\n",
                        (long long)i, (double)got[i], (double)ref[i], err, tol);
            fail();
        }
    }
}

/* docs/SPEC.md §6: the student's rows beyond the common vocabulary prefix get gradient 0
 * exactly (their logits take no part). */
static void fused_check_tail(const tp_fused_spec *c, const tp_fused *h, const tp_fused_out *o) {
    const int64_t common = h->vt < c->v ? h->vt : c->v;
    const distil_dtype gdt = tp_fused_gw_dtype(h);
    for (int64_t k = common * c->hs; o->gws != NULL && k < c->v * c->hs; k++) {
        assert_true(tu_get(o->gws, gdt, (size_t)k) == 0.0f);
    }
    for (int64_t k = common; o->gbs != NULL && k < c->v; k++) {
        assert_true(tu_get(o->gbs, gdt, (size_t)k) == 0.0f);
    }
}

static void fused_compare(const tp_fused_spec *c, distil_dtype dt, uint64_t seed) {
    tp_fused h;
    tp_fused_make(&h, c, dt, seed);
    if (tp_fused_skip_unsupported(g_ctx, &h)) { /* the fp8 head where the backend has none */
        tp_fused_free(&h);
        skip();
    }
    tp_fused_out got, ref;
    tp_fused_run(g_ref, &h, &ref);
    tp_fused_run(g_ctx, &h, &got);
    size_t nloss = c->parts ? 3 : 1;
    TU_CHECK_WRITTEN("loss", got.loss, DISTIL_F32, 1, (int64_t)nloss, (int64_t)nloss, false);
    TU_CHECK_POISONED("loss past its last value", got.loss, DISTIL_F32, nloss, 4 - nloss);
    bool n_zero = c->norm_device && !(c->normaliser > 0.0f); /* docs/SPEC.md §6: as N == 0 */
    grad_expect e = c->t == 0                                      ? EXPECT_UNTOUCHED
                    : c->labels == TP_LABELS_ALL_IGNORED || n_zero ? EXPECT_ZERO
                    : c->v == 1                                    ? EXPECT_TINY
                                                                   : EXPECT_CLOSE;
    for (size_t i = 0; i < nloss; i++) {
        const char *what = i == 0 ? "loss" : i == 1 ? "hard part" : "soft part";
        if (e == EXPECT_TINY) { /* log(beta + (1 - beta)) is 0 only up to rounding */
            assert_true(fabsf(got.loss[i]) <= 1e-6f);
        } else if (e != EXPECT_CLOSE) {
            assert_true(got.loss[i] == 0.0f);
        } else {
            TU_CHECK_REL(what, got.loss[i], ref.loss[i], tu_tolerance(dt, TU_LOSS));
        }
    }
    fused_check_lse("student_lse", got.lse_s, ref.lse_s, c->t);
    fused_check_lse("teacher_lse", got.lse_t, ref.lse_t, c->t);
    fused_check_entropy(got.ent, ref.ent, c->t, dt);
    fused_check_tail(c, &h, &got);
    const distil_dtype gdt = tp_fused_gw_dtype(&h);
    fused_check_grad("grad_student_hidden", got.gxs, ref.gxs, dt, c->t, c->hs, e, dt);
    fused_check_grad("grad_student_weight", got.gws, ref.gws, gdt, c->v, c->hs, e, dt);
    fused_check_grad("grad_student_bias", got.gbs, ref.gbs, gdt, 1, c->v, e, dt);
    tp_fused_out_free(&got), tp_fused_out_free(&ref);
    tp_fused_free(&h);
}

/* ---------------------------------------------------------------- every divergence */

/* Every divergence the library has (distil_divergence_name up to the first NULL), the tables'
 * or not: one distil_jsd and one fused case each, in every dtype. */
static void run_every_divergence(void **state) {
    (void)state;
    for (int d = 0; d < tp_div_count(); d++) {
        const tp_jsd_spec j = {.t = 16,
                               .v = 1271,
                               .beta = 0.3f,
                               .red = DISTIL_REDUCTION_BATCHMEAN,
                               .labels = TP_LABELS_MIXED,
                               .grad = TP_GRAD_OUT,
                               .special = TP_NEG_INF,
                               .grad_scale = 1.0f,
                               .div = (distil_divergence)d,
                               .alpha = 0.3f};
        const tp_fused_spec f = {.t = 13,
                                 .v = 1271,
                                 .hs = 24,
                                 .ht = 40,
                                 .w_hard = 0.5f,
                                 .w_soft = 0.5f,
                                 .beta = 0.3f,
                                 .tau = 2.0f,
                                 .bias_s = true,
                                 .bias_t = true,
                                 .parts = true,
                                 .grads = TP_WANT_ALL,
                                 .labels = TP_LABELS_MIXED,
                                 .chunk = 5,
                                 .div = (distil_divergence)d,
                                 .alpha = 0.3f};
        for (size_t k = 0; k < TU_LEN(dtypes); k++) {
            jsd_compare(&j, dtypes[k], 7001u * (uint64_t)(d + 1) + k);
            fused_compare(&f, dtypes[k], 7013u * (uint64_t)(d + 1) + k);
        }
    }
}

/* ---------------------------------------------------------------- the cmocka tests */

enum { N_JSD = TU_LEN(jsd_cases), N_FUSED = TU_LEN(fused_cases), N_DT = TU_LEN(dtypes) };
enum { N_TESTS = (N_JSD + N_FUSED) * N_DT + 1 };

/* One test: a case of one table in one dtype. */
typedef struct param {
    bool fused;
    size_t index;
    distil_dtype dtype;
} param;

static void run_case(void **state) {
    const param *p = *state;
    uint64_t seed = 1000003u * (p->index + 1) + 17u * (uint64_t)p->dtype + (p->fused ? 7 : 0);
    if (p->fused) {
        fused_compare(&fused_cases[p->index], p->dtype, seed);
    } else {
        jsd_compare(&jsd_cases[p->index], p->dtype, seed);
    }
}

static struct CMUnitTest g_tests[N_TESTS];
static param g_params[N_TESTS];
static char g_names[N_TESTS][256];

static void build_tests(void) {
    size_t k = 0;
    for (size_t i = 0; i < N_JSD + N_FUSED; i++) {
        for (size_t d = 0; d < N_DT; d++, k++) {
            bool fused = i >= N_JSD;
            g_params[k] = (param){fused, fused ? i - N_JSD : i, dtypes[d]};
            if (fused) {
                tp_fused_name(g_names[k], sizeof g_names[k], &fused_cases[i - N_JSD], dtypes[d]);
            } else {
                tp_jsd_name(g_names[k], sizeof g_names[k], &jsd_cases[i], dtypes[d]);
            }
            g_tests[k] = (struct CMUnitTest){
                .name = g_names[k], .test_func = run_case, .initial_state = &g_params[k]};
        }
    }
    g_tests[k] = (struct CMUnitTest){.name = "every divergence of the library",
                                     .test_func = run_every_divergence};
}

static const char *g_backend;

static int group_setup(void **state) {
    (void)state; /* no group state: each test's state is its param */
    if (distil_ctx_create(&g_ref, "ref", 0) != DISTIL_OK) {
        return -1;
    }
    return distil_ctx_create(&g_ctx, g_backend, 0) == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    distil_ctx_destroy(g_ref);
    g_ctx = g_ref = NULL;
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("parity", backend), g_tests, group_setup,
                                       group_teardown);
}

int main(void) {
    build_tests();
    if (!tu_filter_selects(g_tests, N_TESTS)) {
        return 1;
    }
    return tu_run_per_backend(run_group, false);
}
