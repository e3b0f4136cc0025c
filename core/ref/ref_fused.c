/*
 * ref_fused.c - distil_fused_linear_jsd in float64 (docs/SPEC.md §2), row by row with no
 * chunking: logits, CE, soft JSD and the logit gradient G in double; grad_Ws and grad_bs
 * accumulated in double and rounded once. With the head options of docs/SPEC.md §6: the loss
 * over the common vocabulary prefix, each head's logits scaled and capped first, the teacher at
 * its own temperature, and the per-row LSEs.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

/* z[v] = sum_h x[h] W[v, h] + bias[v] for one row of hidden states. */
void distil_ref_logits(const distil_fused_args *a, distil_dptr xp, distil_dptr wp, distil_dptr bp,
                       int64_t H, int64_t i, double *z) {
    const void *x = distil_dptr_addr(xp), *w = distil_dptr_addr(wp), *bias = distil_dptr_addr(bp);
    for (int64_t v = 0; v < a->vocab; v++) {
        double s = bias ? distil_ref_load(bias, a->dtype, v) : 0.0;
        for (int64_t h = 0; h < H; h++) {
            s += distil_ref_load(x, a->dtype, i * H + h) * distil_ref_load(w, a->dtype, v * H + h);
        }
        z[v] = s;
    }
}

static bool distil_ref_lse_wanted(const distil_fused_args *a) {
    return distil_dptr_present(a->student_lse) || distil_dptr_present(a->teacher_lse);
}

/* Row i's logits of both heads over the common prefix, scaled and capped, and their LSEs at
 * temperature 1 where asked for (docs/SPEC.md §6: every row, ignored ones included). */
static void distil_ref_head_logits(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i) {
    distil_ref_logits(a, a->xs, a->ws, a->bs, a->hs, i, B->zs);
    const distil_teacher_head *t = a->teacher_head;
    if (a->teacher_e4m3 != NULL) { /* docs/SPEC.md §6 fp8 teacher head */
        distil_ref_fp8_logits(a, B, i, B->zt);
    } else {
        distil_ref_logits(a, t->xt, t->wt, t->bt, t->ht, i, B->zt);
    }
    distil_ref_head_apply(B->zs, B->dz, a->vocab, a->student_scale, a->student_cap);
    distil_ref_head_apply(B->zt, NULL, a->vocab, a->teacher_scale, a->teacher_cap);
    float *ls = distil_dptr_addr(a->student_lse), *lt = distil_dptr_addr(a->teacher_lse);
    if (ls != NULL) {
        ls[i] = (float)distil_ref_logsumexp(B->zs, a->vocab, 1.0);
    }
    if (lt != NULL) {
        lt[i] = (float)distil_ref_logsumexp(B->zt, a->vocab, 1.0);
    }
}

/* CE and JSD of one valid row; fills G = dloss/dzs (already divided by n) when wanted. */
static void distil_ref_row(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t label,
                           double n, double *ce, double *jsd) {
    distil_elem_beta k = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    int64_t V = a->vocab;
    double tau_inv = a->inv_temperature;
    double tau_t_inv = a->inv_teacher_temperature; /* docs/SPEC.md §6 */
    double lse = distil_ref_logsumexp(B->zs, V, 1.0);
    double lse_s = distil_ref_logsumexp(B->zs, V, tau_inv);
    double lse_t = distil_ref_logsumexp(B->zt, V, tau_t_inv);
    for (int64_t v = 0; v < V; v++) {
        B->x[v] = B->zs[v] * tau_inv - lse_s;
        B->y[v] = B->zt[v] * tau_t_inv - lse_t;
    }
    *ce = lse - B->zs[label];
    *jsd = distil_ref_div_row(B->x, B->y, V, &k, B->g);
    double gsum = 0.0;
    for (int64_t v = 0; v < V; v++) {
        gsum += B->g[v];
    }
    for (int64_t v = 0; v < V; v++) {
        double s = exp(B->zs[v] - lse) - (v == label ? 1.0 : 0.0);
        double q = exp(B->x[v]);
        B->G[v] = n > 0
                      ? a->weight_hard / n * s + a->weight_soft / n * tau_inv * (B->g[v] - q * gsum)
                      : 0.0;
        B->G[v] *= B->dz[v]; /* through the head's scale and cap, docs/SPEC.md §6 */
    }
}

/* docs/SPEC.md §6 student entropy of a valid row from its soft-part log-probabilities x (V):
 * -sum q x, q = exp(x), a term with q == 0 taken as 0. */
static double distil_ref_entropy(const double *x, int64_t V) {
    double h = 0.0;
    for (int64_t v = 0; v < V; v++) {
        const double q = exp(x[v]);
        h -= q > 0.0 ? q * x[v] : 0.0;
    }
    return h;
}

/* grad_xs row i = G Ws, and the double accumulators of grad_Ws and grad_bs. */
void distil_ref_row_backward(const distil_fused_args *a, distil_ref_fused_buf *B, int64_t i) {
    int64_t V = a->vocab, H = a->hs;
    const void *w = distil_dptr_addr(a->ws);
    void *gx = distil_dptr_addr(a->grad_xs);
    for (int64_t h = 0; h < H; h++) {
        B->xs_row[h] = distil_ref_load(distil_dptr_addr(a->xs), a->dtype, i * H + h);
    }
    for (int64_t h = 0; gx != NULL && h < H; h++) {
        double s = 0.0;
        for (int64_t v = 0; v < V; v++) {
            s += B->G[v] * distil_ref_load(w, a->dtype, v * H + h);
        }
        distil_ref_store(gx, a->dtype, i * H + h, s);
    }
    for (int64_t v = 0; v < V; v++) {
        for (int64_t h = 0; B->gw != NULL && h < H; h++) {
            B->gw[v * H + h] += B->G[v] * B->xs_row[h];
        }
        if (B->gb != NULL) {
            B->gb[v] += B->G[v];
        }
    }
}

distil_status distil_ref_fused_alloc(distil_ref_state *st, const distil_fused_args *a,
                                     distil_ref_fused_buf *B) {
    size_t V = (size_t)a->vocab, H = (size_t)a->hs;
    double *row = calloc(7 * V + H, sizeof(double));
    /* The student's own rows: those beyond the common prefix V stay 0 (docs/SPEC.md §6). */
    size_t Vs = (size_t)a->student_vocab;
    B->gw = distil_dptr_present(a->grad_ws) ? calloc(Vs * H, sizeof(double)) : NULL;
    B->gb = distil_dptr_present(a->grad_bs) ? calloc(Vs, sizeof(double)) : NULL;
    if (row == NULL || (distil_dptr_present(a->grad_ws) && B->gw == NULL) ||
        (distil_dptr_present(a->grad_bs) && B->gb == NULL)) {
        free(row);
        free(B->gw);
        free(B->gb);
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "fused_linear_jsd: ref: out of host memory");
    }
    B->zs = row;
    B->zt = row + V;
    B->x = row + 2 * V;
    B->y = row + 3 * V;
    B->g = row + 4 * V;
    B->G = row + 5 * V;
    B->xs_row = row + 6 * V;
    B->dz = row + 6 * V + H;
    distil_status s = distil_ref_fp8_alloc(st, a, B);
    if (s != DISTIL_OK) {
        free(row);
        free(B->gw);
        free(B->gb);
    }
    return s;
}

/* Valid rows for the mean; records the first invalid label. */
int64_t distil_ref_count_valid(distil_ref_state *st, const distil_fused_args *a) {
    const int64_t *labels = distil_dptr_addr(a->labels);
    int64_t n = 0;
    for (int64_t i = 0; i < a->rows; i++) {
        int64_t l = labels[i];
        if (l == a->ignore_index) {
            continue;
        }
        if (l < 0 || l >= a->vocab) {
            if (st->bad_label_row < 0) {
                st->bad_label_row = i;
                st->bad_label = l;
                st->bad_kind = DISTIL_REF_BAD_LABEL;
            }
            continue;
        }
        n++;
    }
    return n;
}

static void distil_ref_fused_finish(const distil_fused_args *a, distil_ref_fused_buf *B, double ce,
                                    double jsd, double n) {
    float *loss = distil_dptr_addr(a->loss);
    double pc = n > 0 ? ce / n : 0.0, pj = n > 0 ? jsd / n : 0.0;
    loss[0] = (float)(a->weight_hard * pc + a->weight_soft * pj);
    if (a->return_parts) {
        loss[1] = (float)pc;
        loss[2] = (float)pj;
    }
    for (int64_t k = 0; B->gw != NULL && k < a->student_vocab * a->hs; k++) {
        distil_ref_store(distil_dptr_addr(a->grad_ws), distil_fused_gw_dtype(a), k, B->gw[k]);
    }
    for (int64_t v = 0; B->gb != NULL && v < a->student_vocab; v++) {
        distil_ref_store(distil_dptr_addr(a->grad_bs), distil_fused_gw_dtype(a), v, B->gb[v]);
    }
}

distil_status distil_ref_fused(void *b, const distil_fused_args *a) {
    distil_ref_state *st = b;
    if (a->topk != NULL) {
        return distil_ref_fused_topk(st, a); /* docs/SPEC.md §7 */
    }
    distil_ref_fused_buf B = {0};
    DISTIL_TRY(distil_ref_fused_alloc(st, a, &B));
    const int64_t *labels = distil_dptr_addr(a->labels);
    int64_t count = distil_ref_count_valid(st, a);
    double n =
        distil_ref_normaliser(a->normaliser, a->normaliser_device, count > 0 ? (double)count : 1.0);
    double ce_sum = 0.0, jsd_sum = 0.0;
    for (int64_t i = 0; i < a->rows; i++) {
        int64_t l = labels[i];
        bool valid = l != a->ignore_index && l >= 0 && l < a->vocab;
        for (int64_t v = 0; v < a->vocab; v++) {
            B.G[v] = 0.0;
        }
        if (valid || distil_ref_lse_wanted(a)) {
            distil_ref_head_logits(a, &B, i);
        }
        if (valid) {
            double ce, jsd;
            distil_ref_row(a, &B, l, n, &ce, &jsd);
            ce_sum += ce;
            jsd_sum += jsd;
        }
        float *ent = distil_dptr_addr(a->student_entropy);
        if (ent != NULL) { /* ignored rows: 0 */
            ent[i] = valid ? (float)distil_ref_entropy(B.x, a->vocab) : 0.0f;
        }
        distil_ref_row_backward(a, &B, i);
    }
    distil_ref_fused_finish(a, &B, ce_sum, jsd_sum, n);
    free(B.zs);
    free(B.gw);
    free(B.gb);
    free(B.wq);
    return DISTIL_OK;
}
