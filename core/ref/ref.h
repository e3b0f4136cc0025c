/*
 * ref.h - the float64 reference backend "ref": the oracle of every test. Plain C, double
 * accumulators, no threads, written for clarity. It computes each loss whole (the optional
 * whole ops of the vtable) straight from docs/SPEC.md, sharing only the row math below.
 */
#ifndef DISTIL_REF_H
#define DISTIL_REF_H

#include "backend.h"
#include "error.h"
#include "fused_args.h"
#include "math/distil_elem_beta.h"

typedef struct distil_ref_state {
    distil_ctx *ctx;
    int64_t bad_label_row; /* first row with an invalid label since the last synchronize, or -1 */
    int64_t bad_label;
    int bad_kind; /* what bad_label is: DISTIL_REF_BAD_LABEL, _ID_RANGE or _ID_TWICE */
} distil_ref_state;

/* Element i of a (dtype) array at host address p, widened to double. */
double distil_ref_load(const void *p, distil_dtype dtype, int64_t i);
/* Store v at element i, rounded to dtype (via fp32). */
void distil_ref_store(void *p, distil_dtype dtype, int64_t i, double v);

/* log(exp(a) + exp(b)) without overflow; -inf when both are -inf; NaN in, NaN out. */
double distil_ref_logaddexp(double a, double b);
/* log sum_v exp(z[v] * scale) over n values. */
double distil_ref_logsumexp(const double *z, int64_t n, double scale);

/*
 * docs/SPEC.md §1 / §6 for one row: returns sum_v e_v of the divergence of k
 * (distil_elem_div_make) for student x = log q and teacher y = log p (n values each) and, when
 * grad != NULL, writes de/dx for each v.
 */
double distil_ref_div_row(const double *x, const double *y, int64_t n, const distil_elem_beta *k,
                          double *grad);

/* The batchmean normaliser of a call (docs/SPEC.md §6): the caller's host value or device scalar
 * (host memory here) when given, else `counted`. Returns 0 for N <= 0 or NaN: loss and gradient
 * 0 then. */
double distil_ref_normaliser(float normaliser, distil_dptr normaliser_device, double counted);

/* docs/SPEC.md §6 (ref_head.c): z <- cap tanh(scale z / cap) (scale z when cap is 0) over n
 * values, and dz'/dz at each into dz (when not NULL). */
void distil_ref_head_apply(double *z, double *dz, int64_t n, double scale, double cap);

distil_status distil_ref_jsd(void *b, const distil_jsd_args *a);
distil_status distil_ref_fused(void *b, const distil_fused_args *a);

/* ---- pieces of the fused reference that its top-k form (ref_topk.c) shares */

/* Row-wise scratch and double accumulators of one call. */
typedef struct distil_ref_fused_buf {
    double *zs, *zt, *x, *y, *g, *G; /* (V) each */
    double *dz;                      /* (V): dz'/dz of the student's head (docs/SPEC.md §6) */
    double *xs_row;                  /* (Hs) */
    double *gw;                      /* (V, Hs) or NULL */
    double *gb;                      /* (V) or NULL */
    /* fp8 teacher head (docs/SPEC.md §6, ref_fp8.c): Wt's e4m3 values (V, Ht) and scales (V),
     * one xt row's values (Ht); one allocation at wq, NULL with the exact head */
    float *wq, *sw, *xq;
} distil_ref_fused_buf;

/* The fp8 teacher head (ref_fp8.c): Wt quantised into B (nothing with the exact head), and row
 * i's teacher logits z (V) from the e4m3 rows. */
distil_status distil_ref_fp8_alloc(distil_ref_state *st, const distil_fused_args *a,
                                   distil_ref_fused_buf *B);
/* quant_rows of the backend table (docs/SPEC.md §6): codes one byte each, for
 * distil_e4m3_head_make; the padding columns get 0. */
distil_status distil_ref_quant_rows(void *b, const distil_quant_rows_args *a);
void distil_ref_fp8_logits(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i,
                           double *z);

/* z[v] = sum_h x[h] W[v, h] + bias[v] for row i of hidden states (H wide). */
void distil_ref_logits(const distil_fused_args *a, distil_dptr xp, distil_dptr wp, distil_dptr bp,
                       int64_t H, int64_t i, double *z);
/* grad_xs row i = B->G Ws, and B's double accumulators of grad_Ws and grad_bs. */
void distil_ref_row_backward(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i);
distil_status distil_ref_fused_alloc(distil_ref_state *st, const distil_fused_args *a,
                                     distil_ref_fused_buf *B);
/* Valid rows for the mean; records the first invalid label. */
int64_t distil_ref_count_valid(distil_ref_state *st, const distil_fused_args *a);

/* ---- cached top-k teacher, docs/SPEC.md §7 (ref_topk.c) */

enum { DISTIL_REF_BAD_LABEL = 0, DISTIL_REF_BAD_ID_RANGE = 1, DISTIL_REF_BAD_ID_TWICE = 2 };

/* One element term of docs/SPEC.md §1 / §6 in float64 (distil_elem.h) for k (distil_elem_div_make):
 * e, and *g = de/dx. */
double distil_ref_elem(const distil_elem_beta *k, double x, double y, double *g);

distil_status distil_ref_topk(void *b, const distil_topk_args *a);
distil_status distil_ref_fused_topk(distil_ref_state *st, const distil_fused_args *a);

#endif /* DISTIL_REF_H */
