/*
 * topk_cond.c - how far the fp32 roundings of the top-k gradient formula can move a correct
 * result where the problem is ill-conditioned (docs/SPEC.md §3, "the fused gradient where the
 * Jacobian's sum is large", and §7), for tk_check. The top-k gradient is, per row,
 *   on K  g_j - q_j c_on    off K  q_v a_off            (docs/SPEC.md §7, distil_topk.h)
 * with c_on the sum S = S_K + g_t (fused, tail / zero), S_K / Q_K (renormalise), or 0. Where |S|
 * or a_off's terms dwarf the result (renormalise with one used slot, whose exact gradient is 0;
 * reverse KL with a peaky teacher; alpha near 1, where de/dX = (1 - alpha) q cancels to order
 * (1 - alpha)^2), every fp32 evaluation errs by their roundings, to first order
 *   |dG_j| <= e (|g_j| + q_j (sum_K |g| + |g_t|) / Q) + q_j |c_on| (2u + dx_j)
 *   |dG_v| <= e q_v (|g_t| / Q_t + sum_K |g| + |g_t|) + q_v |a_off| (2u + dx_v)
 * (e = 16u for an element term and the sums of a few of them, u = 2^-24; Q = Q_K for
 * renormalise, else 1; dx_v = u (|x_v| + |lse| + |z_v - m| / tau) + the logits' GEMM rounding
 * 2u sum_h |xs_h Ws_vh| / tau, as pr_soft_sum_share in test_precision.c, and for renormalise
 * u (|x_j| + 2 |log Q_K| + 2) more, the roundings of Q_K, its log and x_j - log Q_K). Where nothing
 * cancels this is ~16u of the gradient, far below §3's bounds, so the check is unchanged there. The
 * losses get the same kind of allowance: each outcome's e to 16u, and what the roundings of its X
 * and Y move it by (the renormalised x_j - log Q_K, y_j - log P_K; the fused x; log Q_t), and the
 * fused CE's lse - z_label to 16u of its terms with the logits' GEMM rounding. The allowance is
 * computed in float64 from the problem's inputs (the element terms of distil_elem.h in float64,
 * like the reference) and carried through the head as in pr_soft_sum_share: grad_xs[i, h] gets
 * sum_v |dG_iv| |Ws[v, h]|, grad_Ws[v, h] sum_i |dG_iv| |xs[i, h]|, grad_bs[v] sum_i |dG_iv|. */
#include "topk_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/distil_elem_f64.h"
#include "math/distil_elem_beta.h"

static const double TC_U = 0x1p-24, TC_E = 16.0 * 0x1p-24;

static int64_t tc_id(const tk_problem *p, size_t i) {
    return p->s.idt == DISTIL_IDS_I64 ? ((const int64_t *)p->ids)[i] : ((const int32_t *)p->ids)[i];
}

/* Row i's used slots (ids into id, log-probs into y); -1 when the row has a bad id. */
static int64_t tc_slots(const tk_problem *p, int64_t i, int64_t *id, double *y) {
    int64_t n = 0;
    for (int64_t j = 0; j < p->s.k; j++) {
        int64_t v = tc_id(p, (size_t)(i * p->s.k + j));
        if (v == -1) {
            continue;
        }
        for (int64_t u = 0; u < n; u++) {
            if (id[u] == v) {
                return -1;
            }
        }
        id[n] = v;
        y[n++] = tu_get(p->logp, p->s.tdtype, (size_t)(i * p->s.k + j));
    }
    return n;
}

/* The student's log-probs x (V) of row i and their rounding dx (V); *ce the rounding of the
 * fused loss's CE, lse - z_label (2u |lse| + |z_label| and the two logits' GEMM roundings). */
static void tc_student(const tk_problem *p, int64_t i, double *x, double *dx, double *ce) {
    const tk_spec *s = &p->s;
    const int64_t V = s->v;
    *ce = 0.0;
    if (!s->fused) {
        for (int64_t v = 0; v < V; v++) {
            x[v] = tu_get(p->x, p->dtype, (size_t)(i * V + v));
            dx[v] = 0.0; /* given */
        }
        return;
    }
    double m = -INFINITY, sum = 0.0, m1 = -INFINITY, sum1 = 0.0, dz_max = 0.0;
    for (int64_t v = 0; v < V; v++) {
        double z = s->bias ? tu_get(p->bs, p->dtype, (size_t)v) : 0.0, za = fabs(z);
        for (int64_t h = 0; h < s->hs; h++) {
            double t = (double)tu_get(p->xs, p->dtype, (size_t)(i * s->hs + h)) *
                       tu_get(p->ws, p->dtype, (size_t)(v * s->hs + h));
            z += t;
            za += fabs(t);
        }
        x[v] = z / s->tau;
        dx[v] = 2.0 * TC_U * za / s->tau;
        dz_max = fmax(dz_max, 2.0 * TC_U * za);
        m = fmax(m, x[v]);
        m1 = fmax(m1, z);
        *ce += v == p->labels[i] ? TC_E * fabs(z) + 2.0 * TC_U * za : 0.0;
    }
    for (int64_t v = 0; v < V; v++) {
        sum += exp(x[v] - m);
        sum1 += exp(x[v] * s->tau - m1);
    }
    *ce += TC_E * fabs(m1 + log(sum1)) + dz_max;
    double lse = m + log(sum);
    for (int64_t v = 0; v < V; v++) {
        dx[v] += TC_U * (fabs(x[v] - lse) + fabs(lse) + fabs(x[v] - m));
        x[v] -= lse;
    }
}

/* One outcome's share of the soft loss's allowance: e's own rounding, and what the roundings
 * dX, dY of its arguments move it by (|de/dY| <= |e| + p + q for every divergence of §6), with
 * the second-order term (p + q)(dX + dY)^2 where the first-order one vanishes (X = Y: e and
 * de/dX are 0 there, and an fp32 X a few ulp off gives e of their square). */
static double tc_outcome(double e, double g, double X, double Y, double dX, double dY) {
    if (!isfinite(e) || !isfinite(g)) {
        return 0.0;
    }
    const double pq = exp(X) + exp(Y);
    return TC_E * fabs(e) + fabs(g) * dX + (fabs(e) + pq) * dY + pq * (dX + dY) * (dX + dY);
}

/* The allowance dG (V) of one valid row, before the gradient's scale; returns the soft loss's
 * (the sum over the outcomes of tc_outcome). */
static double tc_row(const tk_problem *p, const de_coef *kc, int64_t n, const int64_t *id,
                     const double *y, const double *x, const double *dx, unsigned char *mark,
                     double *dG) {
    const tk_spec *s = &p->s;
    const int64_t V = s->v;
    double qk = 0.0, qt = 0.0, pk = 0.0, sk = 0.0, sabs = 0.0, q;
    for (int64_t j = 0; j < n; j++) {
        mark[id[j]] = 1;
        qk += exp(x[id[j]]);
        pk += exp(y[j]);
    }
    for (int64_t v = 0; v < V; v++) {
        qt += mark[v] ? 0.0 : exp(x[v]);
        dG[v] = 0.0;
    }
    const bool renorm = s->tail == DISTIL_TOPK_RENORMALISE;
    const double lqk = log(qk), lpk = log(pk);
    /* gj: each slot's de/dX; sens_j: how far the roundings of its X and Y move it, bounded by
     * (q + p)(dX + dY) (|d^2 e / dX dX|, |d^2 e / dX dY| <= q + p for the divergences of §6 to
     * first order; it is what is left where de/dX itself is 0, at X = Y) */
    double *gj = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * 2), loss = 0.0, ssum = 0.0;
    double *sens = gj + (n > 0 ? n : 1);
    for (int64_t j = 0; j < n; j++) {
        const double X = renorm ? x[id[j]] - lqk : x[id[j]], Y = renorm ? y[j] - lpk : y[j];
        const double e = de_elem(kc->mode, kc, X, Y, &gj[j], &q);
        const double dxj =
            dx[id[j]] + (renorm ? TC_U * (fabs(x[id[j]]) + 2.0 * fabs(lqk) + 2.0) : 0.0);
        const double dyj = renorm ? TC_U * (fabs(y[j]) + 2.0 * fabs(lpk) + 2.0) : 0.0;
        loss += tc_outcome(e, gj[j], X, Y, dxj, dyj);
        sens[j] = isfinite(X) && isfinite(Y) ? (exp(X) + exp(Y)) * (dxj + dyj) : 0.0;
        ssum += sens[j];
        gj[j] = isfinite(gj[j]) ? gj[j] : 0.0;
        sk += gj[j];
        sabs += fabs(gj[j]);
    }
    double gt = 0.0, sens_t = 0.0;
    if (!renorm) {
        double pt = (s->tail == DISTIL_TOPK_ZERO || n == V) ? 0.0 : fmax(0.0, 1.0 - pk);
        double dxt = TC_E; /* Q_t summed to a few ulp, and its elements' roundings */
        for (int64_t v = 0; v < V && qt > 0.0; v++) {
            dxt += mark[v] ? 0.0 : exp(x[v]) * dx[v] / qt;
        }
        const double e = de_elem(kc->mode, kc, log(qt), log(pt), &gt, &q);
        loss += tc_outcome(e, gt, log(qt), log(pt), dxt, TC_E);
        sens_t = qt > 0.0 ? (qt + pt) * (dxt + TC_E) : 0.0;
        ssum += sens_t;
        gt = isfinite(gt) ? gt : 0.0;
    }
    const double jac = s->fused && !renorm ? 1.0 : 0.0;
    const double c_on = renorm ? (qk > 0.0 ? sk / qk : 0.0) : jac * (sk + gt);
    const double a_off = renorm ? 0.0 : (qt > 0.0 ? gt / qt : 0.0) - jac * (sk + gt);
    const double share = renorm ? (qk > 0.0 ? sabs / qk : 0.0) : jac * (sabs + fabs(gt));
    const double off = renorm ? 0.0 : (qt > 0.0 ? fabs(gt) / qt : 0.0) + jac * (sabs + fabs(gt));
    const double sshare = renorm ? (qk > 0.0 ? ssum / qk : 0.0) : jac * ssum;
    const double soff = renorm ? 0.0 : (qt > 0.0 ? sens_t / qt : 0.0) + jac * ssum;
    for (int64_t v = 0; v < V; v++) {
        double qv = exp(x[v]);
        dG[v] = mark[v] ? 0.0 : qv * (TC_E * off + soff + fabs(a_off) * (2.0 * TC_U + dx[v]));
    }
    for (int64_t j = 0; j < n; j++) {
        double qv = exp(x[id[j]]);
        double dxj = dx[id[j]] + (renorm ? TC_U * (fabs(x[id[j]]) + 2.0 * fabs(lqk) + 2.0) : 0.0);
        dG[id[j]] = TC_E * (fabs(gj[j]) + qv * share) + sens[j] + qv * sshare +
                    qv * fabs(c_on) * (2.0 * TC_U + dxj);
        mark[id[j]] = 0;
    }
    free(gj);
    return loss;
}

/* 1 / N as the losses count N (docs/SPEC.md §7; 1 for sum and none, 0 for N = 0). */
static double tc_inv_n(const tk_problem *p) {
    const tk_spec *s = &p->s;
    double count = 0.0;
    for (int64_t i = 0; i < s->t; i++) {
        bool ignored = s->mixed_labels && p->labels[i] == -100;
        count += ignored ? 0.0 : 1.0;
    }
    double n = s->normaliser > 0.0f ? (double)s->normaliser : count;
    if (s->fused) {
        n = s->red == DISTIL_REDUCTION_SUM ? 1.0 : (s->normaliser > 0.0f ? n : fmax(1.0, n));
    } else if (s->red != DISTIL_REDUCTION_BATCHMEAN) {
        n = 1.0;
    }
    return n > 0.0 ? 1.0 / n : 0.0;
}

static double tc_norm(const double *a, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += a[i] * a[i];
    }
    return sqrt(s);
}

/* The loss values' allowances (tk_nloss of them) from the rows' soft and CE allowances. */
static void tc_losses(const tk_problem *p, const double *soft, const double *ce, double inv_n,
                      double *out) {
    const tk_spec *s = &p->s;
    double ss = 0.0, sc = 0.0;
    for (int64_t i = 0; i < s->t; i++) {
        ss += soft[i];
        sc += ce[i];
        if (!s->fused && s->red == DISTIL_REDUCTION_NONE) {
            out[i] = soft[i];
        }
    }
    if (s->fused) {
        out[0] = ((double)s->w_hard * sc + (double)s->w_soft * ss) * inv_n;
        out[1] = sc * inv_n;
        out[2] = ss * inv_n;
    } else if (s->red != DISTIL_REDUCTION_NONE) {
        out[0] = ss * inv_n;
    }
}

tk_allowance tk_allowance_of(const tk_problem *p) {
    const tk_spec *s = &p->s;
    const int64_t V = s->v, T = s->t, H = s->hs;
    tk_allowance out = {0.0, 0.0, 0.0, calloc((size_t)T + 3, sizeof(double))};
    double *soft = calloc((size_t)T, sizeof(double)), *ce = calloc((size_t)T, sizeof(double));
    distil_elem_beta kb = distil_elem_div_make(s->div, s->beta, s->alpha);
    de_coef kc;
    DE_COEF_SET(kc, kb);
    double *x = malloc(sizeof(double) * (size_t)V * 3), *dx = x + V, *dG = dx + V;
    double *y = malloc(sizeof(double) * (size_t)s->k);
    int64_t *id = malloc(sizeof(int64_t) * (size_t)s->k);
    unsigned char *mark = calloc((size_t)V, 1);
    double *gx = calloc((size_t)(T * (s->fused ? H : V)), sizeof(double));
    double *gw = calloc((size_t)(V * H), sizeof(double)), *gb = calloc((size_t)V, sizeof(double));
    const double inv_n = tc_inv_n(p);
    const double scale = s->fused ? (double)s->w_soft * inv_n / (double)s->tau : inv_n;
    for (int64_t i = 0; i < T; i++) {
        int64_t n = tc_slots(p, i, id, y);
        int64_t l = p->labels[i];
        bool valid = n >= 0 && !(s->mixed_labels && l == -100) && !(s->fused && (l < 0 || l >= V));
        if (!valid) {
            continue;
        }
        tc_student(p, i, x, dx, &ce[i]);
        soft[i] = tc_row(p, &kc, n, id, y, x, dx, mark, dG);
        for (int64_t v = 0; v < V; v++) {
            double d = scale * dG[v];
            if (!s->fused) {
                gx[i * V + v] = d;
                continue;
            }
            gb[v] += d;
            for (int64_t h = 0; h < H; h++) {
                gx[i * H + h] += d * fabs(tu_get(p->ws, p->dtype, (size_t)(v * H + h)));
                gw[v * H + h] += d * fabs(tu_get(p->xs, p->dtype, (size_t)(i * H + h)));
            }
        }
    }
    out.gx = tc_norm(gx, (size_t)(T * (s->fused ? H : V)));
    out.gw = s->fused ? tc_norm(gw, (size_t)(V * H)) : 0.0;
    out.gb = s->fused ? tc_norm(gb, (size_t)V) : 0.0;
    tc_losses(p, soft, ce, inv_n, out.loss);
    free(x), free(y), free(id), free(mark), free(gx), free(gw), free(gb), free(soft), free(ce);
    return out;
}
