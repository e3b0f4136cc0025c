/*
 * test_problems.h - the two losses as test problems: a spec (shape, parameters, which inputs
 * and outputs), its seeded host inputs in one dtype, and a run on any context with poisoned
 * outputs, downloaded for checking. Shared by the parity, chunking and determinism suites.
 */
#ifndef DISTIL_TEST_PROBLEMS_H
#define DISTIL_TEST_PROBLEMS_H

#include "test_util.h"

typedef enum tp_labels {
    TP_LABELS_NONE,        /* distil_jsd: NULL labels; fused: every row valid */
    TP_LABELS_MIXED,       /* rows 1, 4, 7, ... ignored */
    TP_LABELS_ALL_IGNORED, /* N = 0 */
} tp_labels;

/* ---------------------------------------------------------------- distil_jsd */

typedef enum tp_grad {
    TP_GRAD_OUT,     /* a separate gradient buffer, row stride vocab + pad_g */
    TP_GRAD_NULL,    /* loss only */
    TP_GRAD_INPLACE, /* the gradient overwrites student_logp */
} tp_grad;

enum { TP_NEG_INF = 1, TP_TINY = 2 };

typedef struct tp_jsd_spec {
    int64_t t, v;
    int64_t pad_x, pad_y, pad_g; /* row stride = v + pad; 0 is passed as stride 0 (dense) */
    float beta;
    distil_reduction red;
    tp_labels labels;
    tp_grad grad;
    unsigned special; /* TP_NEG_INF: masked tokens (-inf); TP_TINY: log-probs near -120 */
    float grad_scale; /* 0 means 1 */
    /* docs/SPEC.md §6 (0 / false: the defaults): the divergence and its alpha (0 means the
     * descriptor's default), and a given normaliser N, passed on the host or, with norm_device,
     * as a device scalar. */
    distil_divergence div;
    float alpha;
    float normaliser;
    bool norm_device;
} tp_jsd_spec;

/* Host inputs of a spec in one dtype; padding columns hold NaN poison (must not be read). */
typedef struct tp_jsd {
    tp_jsd_spec s;
    distil_jsd_desc d;
    int64_t xs, ys, gs; /* resolved row strides */
    void *x, *y;
    int64_t *labels; /* NULL for TP_LABELS_NONE */
    size_t nloss;    /* loss values written: 1, or rows for NONE */
} tp_jsd;

/* Outputs of one run: nloss + 1 loss values (the last must stay poisoned) and the gradient,
 * (rows, gs) in the dtype or NULL. */
typedef struct tp_jsd_out {
    float *loss;
    void *grad;
} tp_jsd_out;

void tp_jsd_make(tp_jsd *p, const tp_jsd_spec *s, distil_dtype dtype, uint64_t seed);
void tp_jsd_free(tp_jsd *p);
void tp_jsd_run(distil_ctx *ctx, const tp_jsd *p, tp_jsd_out *o);
void tp_jsd_out_free(tp_jsd_out *o);
/* Two runs of p gave the same bits (docs/SPEC.md §4): the nloss + 1 loss values (the poisoned
 * one past them included) and the whole (rows, gs) gradient, padding columns included. A
 * gradient absent (NULL) in one run must be absent in the other. */
void tp_jsd_check_same(const tp_jsd *p, const tp_jsd_out *a, const tp_jsd_out *b);
/* A readable one-line description for test names. */
void tp_jsd_name(char *buf, size_t n, const tp_jsd_spec *s, distil_dtype dtype);

/* The name of a divergence (distil_divergence_name: "jsd", "forward_kl", ...; "?" for none). */
const char *tp_div_name(distil_divergence div);

/* The number of divergences the library has (distil_divergence_name up to the first NULL): the
 * values 0 .. count - 1. */
int tp_div_count(void);

/* ---------------------------------------------------------------- fused */

enum { TP_WANT_XS = 1, TP_WANT_WS = 2, TP_WANT_BS = 4, TP_WANT_ALL = 7 };

/* docs/SPEC.md §6 head options of a fused case; a spec without one (NULL) keeps the defaults. */
typedef struct tp_head {
    int64_t vt;           /* rows of the teacher's head; 0 = v, < 0: v + vt */
    float s_scale, s_cap; /* student logit scale (0 = 1) and softcap */
    float t_scale, t_cap; /* teacher's */
    float tau_t;          /* teacher temperature; 0 = tau */
    bool lse;             /* ask for both LSE outputs */
    bool entropy;         /* ask for the student's entropy (student_entropy) */
    bool t_fp8;           /* the fp8 teacher head (teacher_head_precision FP8_E4M3) */
} tp_head;

typedef struct tp_fused_spec {
    int64_t t, v, hs, ht;
    float w_hard, w_soft, beta, tau;
    bool bias_s, bias_t;
    bool parts;
    unsigned grads; /* TP_WANT_*; TP_WANT_BS counts only with bias_s */
    tp_labels labels;
    double logit_std; /* spread of the logits; 0 means 3 */
    int64_t chunk;
    /* docs/SPEC.md §6, as in tp_jsd_spec; tau_sq: the soft part times tau^2 */
    distil_divergence div;
    float alpha;
    float normaliser;
    bool norm_device;
    bool tau_sq;
    const tp_head *head; /* NULL: the default heads */
    const char *tag; /* NULL, or a word the name ends with (" #tag") for a ctest entry's filter */
    bool gw_f32;     /* grad_weight_fp32: grad_Ws and grad_bs fp32 whatever the dtype */
} tp_fused_spec;

typedef struct tp_fused {
    tp_fused_spec s;
    distil_fused_linear_jsd_desc d;
    void *xs, *ws, *bs, *xt, *wt, *bt; /* dense, dtype; bs, bt NULL when absent */
    int64_t *labels;
    size_t n_xs, n_ws, n_xt, n_wt; /* elements */
    int64_t vt;                    /* rows of the teacher's head */
} tp_fused;

/* Outputs of one run: 4 loss values (those not written stay poisoned) and the gradients asked
 * for (NULL otherwise), dense in the dtype (grad_Ws and grad_bs: tp_fused_gw_dtype). */
typedef struct tp_fused_out {
    float loss[4];
    void *gxs, *gws, *gbs;
    float *lse_s, *lse_t; /* (t) each when the head asks for them, else NULL */
    float *ent;           /* (t) when the head asks for the entropy, else NULL */
} tp_fused_out;

/* The gradients a spec asks for: grad_student_bias only exists with student_bias. */
unsigned tp_fused_grads(const tp_fused_spec *s);
/* The dtype of grad_Ws and grad_bs: F32 with gw_f32, else the inputs'. */
distil_dtype tp_fused_gw_dtype(const tp_fused *p);
void tp_fused_make(tp_fused *p, const tp_fused_spec *s, distil_dtype dtype, uint64_t seed);
void tp_fused_free(tp_fused *p);
/* The seven inputs of distil_fused_linear_jsd in its argument order (student hidden, weight,
 * bias, teacher hidden, weight, bias, labels): host pointers (NULL where absent) and sizes in
 * bytes, written once for tp_fused_run and the tests that upload them their own way. */
enum { TP_FUSED_INPUTS = 7 };
void tp_fused_inputs(const tp_fused *p, const void *host[TP_FUSED_INPUTS],
                     size_t bytes[TP_FUSED_INPUTS]);
/* Device copies of those inputs in in[] (NULL where absent), freed with distil_free. */
void tp_fused_upload(distil_ctx *ctx, const tp_fused *p, void *in[TP_FUSED_INPUTS]);
void tp_fused_run(distil_ctx *ctx, const tp_fused *p, tp_fused_out *o);
void tp_fused_out_free(tp_fused_out *o);
/* Two runs of p gave the same bits (docs/SPEC.md §4): all 4 loss values (the unwritten ones
 * poisoned), every gradient (dense) and both LSE outputs. An output absent (NULL) in one run must
 * be absent in the other. */
void tp_fused_check_same(const tp_fused *p, const tp_fused_out *a, const tp_fused_out *b);
/* True (with a message) when ctx's backend refuses the problem as UNSUPPORTED (the fp8
 * teacher head on opencl, hip): the caller skips it. Any other status of the query fails. */
bool tp_fused_skip_unsupported(distil_ctx *ctx, const tp_fused *p);
void tp_fused_name(char *buf, size_t n, const tp_fused_spec *s, distil_dtype dtype);

#endif /* DISTIL_TEST_PROBLEMS_H */
