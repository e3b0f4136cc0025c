/*
 * topk_problem.h - the two top-k losses (docs/SPEC.md §7) as test problems: a spec, its seeded
 * host inputs (a student head and hidden states, or student log-probs, and a cached teacher made
 * from teacher logits of a chosen shape: normal, peaky or Zipf-like), and a run on any context
 * with poisoned outputs, downloaded for checking. Shared by test_topk.c and test_topk_ref.c.
 */
#ifndef DISTIL_TOPK_PROBLEM_H
#define DISTIL_TOPK_PROBLEM_H

#include "test_util.h"

typedef enum tk_teacher {
    TK_NORMAL, /* logits of standard deviation 3 */
    TK_PEAKY,  /* one logit 25 above normal ones: nearly all mass on one id */
    TK_ZIPF,   /* p ~ 1 / rank^1.1 over a random order */
} tk_teacher;

typedef struct tk_spec {
    int64_t t, v, hs, k; /* hs 0: 32 */
    bool fused;          /* distil_fused_linear_topk, else distil_topk */
    distil_dtype tdtype; /* of the teacher's log-probs */
    distil_id_dtype idt; /* of the ids */
    distil_topk_tail tail;
    distil_divergence div;
    float beta, w_hard, w_soft, tau; /* both weights 0: 0.5 each; tau 0: 1 */
    float alpha;                     /* of the SKEW_* divergences (docs/SPEC.md §6), as given */
    tk_teacher teacher;
    bool pad;          /* rows 2, 5, 8, ...: only k / 2 slots used, the rest pad_id */
    bool mixed_labels; /* rows 1, 4, 7, ... ignored */
    bool bias, parts;
    distil_reduction red;
    int64_t chunk;
    int64_t dup_row; /* > 0: this row's second slot repeats its first id */
    float normaliser;
    float student_std; /* fused: the student's logits' standard deviation (0: 2) */
} tk_spec;

typedef struct tk_problem {
    tk_spec s;
    distil_dtype dtype;
    void *xs, *ws, *bs; /* fused: (t, hs), (v, hs), (v) or NULL */
    void *x;            /* log-prob form: (t, v) student log-probs */
    void *ids, *logp;   /* (t, k) */
    int64_t *labels;    /* (t) */
} tk_problem;

/* Outputs: loss (t + 4 values; what is not written stays poisoned) and the gradients. */
typedef struct tk_out {
    float *loss;
    void *gx;         /* fused: grad_student_hidden; log-prob form: grad_student (t, v) */
    void *gw, *gb;    /* fused only */
    distil_status st; /* of the call (cpu, ref: a bad id is returned here), else of the sync */
    char msg[256];
} tk_out;

void tk_make(tk_problem *p, const tk_spec *s, distil_dtype dtype, uint64_t seed);
/* TVD: move the teacher's log-probs away from p = q (topk_untie.c); tk_make calls it. */
void tk_untie(tk_problem *p);
void tk_free(tk_problem *p);
/* Run on ctx: every output poisoned first, then downloaded; synchronizes. */
void tk_run(distil_ctx *ctx, const tk_problem *p, tk_out *o);
void tk_out_free(tk_out *o);
/* Loss values the call writes (1, 3 with parts, or t for the log-prob form's NONE). */
size_t tk_nloss(const tk_problem *p);
/* Compare o with the reference r under docs/SPEC.md §3; every element written. */
void tk_check(const tk_problem *p, const tk_out *o, const tk_out *r);
/* Two runs of p gave the same bits (docs/SPEC.md §4): both succeeded (two failed calls leave the
 * same poison, which would compare equal), then the tk_nloss loss values and every gradient:
 * fused grad_student_hidden (t, hs), grad_student_weight (v, hs) and grad_student_bias (v), or
 * the log-prob form's grad_student (t, v). */
void tk_check_same(const tk_problem *p, const tk_out *a, const tk_out *b);
void tk_name(char *buf, size_t n, const tk_spec *s, distil_dtype dtype);

/* What the fp32 roundings of the formulas can move each output where the problem is
 * ill-conditioned (topk_cond.c; docs/SPEC.md §3 and §7): the norms for grad x (log-prob form) or
 * grad_student_hidden, grad_student_weight, grad_student_bias, and each loss value's (tk_nloss;
 * allocated, free it). */
typedef struct tk_allowance {
    double gx, gw, gb;
    double *loss;
} tk_allowance;
tk_allowance tk_allowance_of(const tk_problem *p);

#endif /* DISTIL_TOPK_PROBLEM_H */
