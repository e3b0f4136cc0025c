/*
 * ref_topk.c - both losses against a cached top-k teacher in float64 (docs/SPEC.md §7), straight
 * from the definitions: the student's tail Q_t summed over the ids' complement, the teacher's
 * P_t = max(0, 1 - sum p) (as -expm1(log sum p), which keeps its digits), one element term per
 * outcome (distil_elem.h), and the gradient by the chain rule written out per policy (not through
 * the backends' row constants of distil_topk.h), then, for the fused loss, the softmax Jacobian
 * applied explicitly as in ref_fused.c.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One row's teacher: the used slots (pads skipped), their ids and log-probs, and a mark per
 * vocabulary entry that is one of them. */
typedef struct ref_topk_row {
    int64_t n;           /* used slots */
    int64_t *id;         /* (k) */
    double *y;           /* (k) */
    unsigned char *mark; /* (V), all 0 between rows */
    int bad;             /* DISTIL_REF_BAD_* other than LABEL, or -1 */
    int64_t bad_id;
} ref_topk_row;

static int64_t ref_topk_id(const distil_topk_teacher *t, int64_t i) {
    const void *p = distil_dptr_addr(t->ids);
    return t->ids_i64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* Read row i's slots into R; R->bad says whether the row is invalid (the first bad slot). */
static void ref_topk_load(const distil_topk_teacher *t, int64_t i, int64_t V, ref_topk_row *R) {
    R->n = 0;
    R->bad = -1;
    for (int64_t j = 0; j < t->k; j++) {
        int64_t id = ref_topk_id(t, i * t->k + j);
        if (id == t->pad_id) {
            continue;
        }
        if (R->bad < 0 && (id < 0 || id >= V || R->mark[id])) {
            R->bad = (id < 0 || id >= V) ? DISTIL_REF_BAD_ID_RANGE : DISTIL_REF_BAD_ID_TWICE;
            R->bad_id = id;
        }
        if (id < 0 || id >= V) {
            continue;
        }
        R->mark[id] = 1;
        R->id[R->n] = id;
        R->y[R->n] = distil_ref_load(distil_dptr_addr(t->logp), t->logp_dtype, i * t->k + j);
        R->n++;
    }
}

static void ref_topk_unmark(ref_topk_row *R) {
    for (int64_t j = 0; j < R->n; j++) {
        R->mark[R->id[j]] = 0;
    }
}

static void ref_topk_record(distil_ref_state *st, int64_t row, const ref_topk_row *R) {
    if (st->bad_label_row < 0) {
        st->bad_label_row = row;
        st->bad_label = R->bad_id;
        st->bad_kind = R->bad;
    }
}

/* log P_K = log sum_K p of the row's slots as m + log1p(the other slots' exp(y - m)), m their
 * maximum (ties count 1 each): P_t = 1 - P_K = -expm1(log P_K) of a peaky teacher is 1e-12 or
 * less, and 1 - sum p in float64 would keep only its first few digits (docs/SPEC.md §7). */
static double ref_topk_teacher_lse(const ref_topk_row *R) {
    double m = -INFINITY, ties = 0.0, rest = 0.0;
    for (int64_t j = 0; j < R->n; j++) {
        if (isnan(R->y[j])) {
            return NAN;
        }
        m = fmax(m, R->y[j]);
    }
    if (!(m > -INFINITY) || m == INFINITY) {
        return m; /* no slots or all -inf: log 0; +inf */
    }
    for (int64_t j = 0; j < R->n; j++) {
        if (R->y[j] == m) {
            ties += 1.0;
        } else {
            rest += exp(R->y[j] - m);
        }
    }
    return m + log1p((ties - 1.0) + rest);
}

/* log Q_K: the log-sum-exp of the student's log-probs x at the row's slots. */
static double ref_topk_student_lse(const ref_topk_row *R, const double *x) {
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < R->n; j++) {
        m = fmax(m, x[R->id[j]]);
    }
    if (!(m > -INFINITY) || m == INFINITY) {
        return m;
    }
    for (int64_t j = 0; j < R->n; j++) {
        sum += exp(x[R->id[j]] - m);
    }
    return m + log(sum);
}

/* The soft row loss for student log-probs x (V) and, when grad != NULL, its gradient with
 * respect to a free x (V). */
static double ref_topk_soft(int tail, const distil_elem_beta *k, const ref_topk_row *R,
                            const double *x, int64_t V, double *grad) {
    double qt = 0.0, lpk = ref_topk_teacher_lse(R);
    for (int64_t v = 0; v < V; v++) {
        qt += R->mark[v] ? 0.0 : exp(x[v]);
    }
    for (int64_t v = 0; grad != NULL && v < V; v++) {
        grad[v] = 0.0;
    }
    double loss = 0.0, g;
    if (tail == DISTIL_TOPK_RENORMALISE && lpk == -INFINITY) {
        /* Every used teacher slot -inf: no renormalised teacher; the row's soft part is that of
         * a row without used slots, 0 (NaN where an input is), docs/SPEC.md §7. */
        for (int64_t j = 0; j < R->n; j++) {
            loss += isnan(x[R->id[j]]) || isnan(R->y[j]) ? NAN : 0.0;
        }
        return loss;
    }
    if (tail == DISTIL_TOPK_RENORMALISE) {
        /* x^_j = x_j - log Q_K: d x^_j / d x_v = [v = id_j] - q_v / Q_K on K, 0 off K; log Q_K
         * the slots' log-sum-exp (Q_K itself may underflow, distil_topk.h). */
        double lqk = ref_topk_student_lse(R, x), S = 0.0;
        for (int64_t j = 0; j < R->n; j++) {
            loss += distil_ref_elem(k, x[R->id[j]] - lqk, R->y[j] - lpk, &g);
            S += g;
            if (grad != NULL) {
                grad[R->id[j]] = g;
            }
        }
        for (int64_t j = 0; grad != NULL && j < R->n; j++) {
            grad[R->id[j]] -= (lqk > -INFINITY ? exp(x[R->id[j]] - lqk) : 0.0) * S;
        }
        return loss;
    }
    for (int64_t j = 0; j < R->n; j++) {
        loss += distil_ref_elem(k, x[R->id[j]], R->y[j], &g);
        if (grad != NULL) {
            grad[R->id[j]] = g;
        }
    }
    double pt = (tail == DISTIL_TOPK_ZERO || R->n == V || !(lpk < 0.0)) ? 0.0 : -expm1(lpk);
    loss += distil_ref_elem(k, log(qt), log(pt), &g);
    /* X_t = log sum_{v not in K} exp(x_v): d X_t / d x_v = q_v / Q_t off K. */
    for (int64_t v = 0; grad != NULL && qt > 0.0 && v < V; v++) {
        if (!R->mark[v]) {
            grad[v] = g * exp(x[v]) / qt;
        }
    }
    return loss;
}

static distil_status ref_topk_alloc(distil_ref_state *st, int64_t k, int64_t V, ref_topk_row *R,
                                    double **rows, int nrows) {
    R->id = malloc(sizeof(int64_t) * (size_t)k);
    R->y = malloc(sizeof(double) * (size_t)k);
    R->mark = calloc((size_t)V, 1);
    *rows = malloc(sizeof(double) * (size_t)V * (size_t)nrows);
    if (R->id == NULL || R->y == NULL || R->mark == NULL || *rows == NULL) {
        free(R->id);
        free(R->y);
        free(R->mark);
        free(*rows);
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY, "topk: ref: out of host memory");
    }
    return DISTIL_OK;
}

static void ref_topk_free(ref_topk_row *R, double *rows) {
    free(R->id);
    free(R->y);
    free(R->mark);
    free(rows);
}

distil_status distil_ref_topk(void *b, const distil_topk_args *a) {
    distil_ref_state *st = b;
    const int64_t *labels = distil_dptr_addr(a->labels);
    float *loss = distil_dptr_addr(a->loss);
    void *grad = distil_dptr_addr(a->grad);
    const int64_t V = a->vocab;
    ref_topk_row R;
    double *x;
    DISTIL_TRY(ref_topk_alloc(st, a->t.k, V, &R, &x, 2));
    double *g = x + V;
    const distil_elem_beta kb = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    int64_t counted = 0;
    for (int64_t i = 0; i < a->rows; i++) {
        counted += labels == NULL || labels[i] != a->ignore_index;
    }
    bool mean = a->reduction == DISTIL_REDUCTION_BATCHMEAN;
    double n =
        mean ? distil_ref_normaliser(a->normaliser, a->normaliser_device, (double)counted) : 1.0;
    double scale = n != 0.0 ? a->grad_scale / n : 0.0;
    double total = 0.0;
    for (int64_t i = 0; i < a->rows; i++) {
        bool valid = labels == NULL || labels[i] != a->ignore_index;
        double row = 0.0;
        ref_topk_load(&a->t, i, V, &R); /* every row's ids are checked, ignored or not */
        if (R.bad >= 0) {
            ref_topk_record(st, i, &R);
            valid = false;
        }
        if (valid) {
            for (int64_t v = 0; v < V; v++) {
                x[v] = distil_ref_load(distil_dptr_addr(a->x), a->dtype, i * a->x_stride + v);
            }
            row = ref_topk_soft(a->t.tail, &kb, &R, x, V, g);
        }
        ref_topk_unmark(&R);
        total += row;
        if (a->reduction == DISTIL_REDUCTION_NONE) {
            loss[i] = (float)row;
        }
        for (int64_t v = 0; grad != NULL && v < V; v++) {
            distil_ref_store(grad, a->dtype, i * a->grad_stride + v, valid ? scale * g[v] : 0.0);
        }
    }
    if (a->reduction != DISTIL_REDUCTION_NONE) {
        loss[0] = (float)(mean ? (n != 0.0 ? total / n : 0.0) : total);
    }
    ref_topk_free(&R, x);
    return DISTIL_OK;
}

/* One valid row of the fused loss: CE and soft loss of zs (B->zs), and G (already / n). */
static void ref_topk_fused_row(const distil_fused_args *a, distil_ref_fused_buf *B,
                               const ref_topk_row *R, int64_t label, double inv_n, double *ce,
                               double *soft) {
    const int64_t V = a->vocab;
    const double it = a->inv_temperature;
    double lse = distil_ref_logsumexp(B->zs, V, 1.0);
    double lse_s = distil_ref_logsumexp(B->zs, V, it);
    for (int64_t v = 0; v < V; v++) {
        B->x[v] = B->zs[v] * it - lse_s;
    }
    *ce = lse - B->zs[label];
    const distil_elem_beta kb = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    *soft = ref_topk_soft(a->topk->tail, &kb, R, B->x, V, B->g);
    double gsum = 0.0;
    for (int64_t v = 0; v < V; v++) {
        gsum += B->g[v];
    }
    for (int64_t v = 0; v < V; v++) {
        double s = exp(B->zs[v] - lse) - (v == label ? 1.0 : 0.0);
        double q = exp(B->x[v]);
        B->G[v] = a->weight_hard * inv_n * s + a->weight_soft * inv_n * it * (B->g[v] - q * gsum);
    }
}

static void ref_topk_fused_finish(const distil_fused_args *a, distil_ref_fused_buf *B, double ce,
                                  double soft, double inv_n) {
    float *loss = distil_dptr_addr(a->loss);
    loss[0] = (float)(a->weight_hard * ce * inv_n + a->weight_soft * soft * inv_n);
    if (a->return_parts) {
        loss[1] = (float)(ce * inv_n);
        loss[2] = (float)(soft * inv_n);
    }
    for (int64_t k = 0; B->gw != NULL && k < a->vocab * a->hs; k++) {
        distil_ref_store(distil_dptr_addr(a->grad_ws), a->dtype, k, B->gw[k]);
    }
    for (int64_t v = 0; B->gb != NULL && v < a->vocab; v++) {
        distil_ref_store(distil_dptr_addr(a->grad_bs), a->dtype, v, B->gb[v]);
    }
}

distil_status distil_ref_fused_topk(distil_ref_state *st, const distil_fused_args *a) {
    distil_ref_fused_buf B = {0};
    DISTIL_TRY(distil_ref_fused_alloc(st, a, &B));
    ref_topk_row R;
    double *unused;
    distil_status s = ref_topk_alloc(st, a->topk->k, a->vocab, &R, &unused, 1);
    if (s != DISTIL_OK) {
        free(B.zs);
        free(B.gw);
        free(B.gb);
        return s;
    }
    const int64_t *labels = distil_dptr_addr(a->labels);
    int64_t count = distil_ref_count_valid(st, a);
    /* (a sum reduction comes as a given N of 1) */
    double n =
        distil_ref_normaliser(a->normaliser, a->normaliser_device, count > 0 ? (double)count : 1.0);
    double inv_n = n != 0.0 ? 1.0 / n : 0.0;
    double ce_sum = 0.0, soft_sum = 0.0;
    for (int64_t i = 0; i < a->rows; i++) {
        int64_t l = labels[i];
        bool valid = l != a->ignore_index && l >= 0 && l < a->vocab;
        memset(B.G, 0, sizeof(double) * (size_t)a->vocab);
        ref_topk_load(a->topk, i, a->vocab, &R); /* every row's ids are checked */
        if (R.bad >= 0) {
            ref_topk_record(st, i, &R);
            valid = false;
        }
        if (valid) {
            double ce, soft;
            distil_ref_logits(a, a->xs, a->ws, a->bs, a->hs, i, B.zs);
            ref_topk_fused_row(a, &B, &R, l, inv_n, &ce, &soft);
            ce_sum += ce;
            soft_sum += soft;
        }
        ref_topk_unmark(&R);
        distil_ref_row_backward(a, &B, i);
    }
    ref_topk_fused_finish(a, &B, ce_sum, soft_sum, inv_n);
    ref_topk_free(&R, unused);
    free(B.zs);
    free(B.gw);
    free(B.gb);
    return DISTIL_OK;
}
