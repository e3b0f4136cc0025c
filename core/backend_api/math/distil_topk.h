/*
 * distil_topk.h - the row math of the cached top-k teacher (docs/SPEC.md §7) beyond the element
 * terms, written once for every backend's top-k row pass (float on cpu / cuda / opencl, double in
 * the reference's checks). Include distil_elem.h first; the includer also defines
 *   DE_LOG(a)    natural log (log(0) = -inf)
 *   DE_EXPM1(a)  exp(a) - 1, accurate near 0
 * (and distil_elem.h's DE_EXP).
 * Only scalar DE_T is used here (the k outcomes are few; the O(V) passes are the backend's).
 *
 * A row has the student's log-probs x over V (the fused loss: x = z / tau - lse), the teacher's k
 * slots (id, y), and the student's tail Q_t = sum of exp(x) outside the ids, summed directly
 * (never 1 - Q_K, which cancels when the ids hold nearly all of the mass). The outcomes are
 *   tail, zero:   (x_j, y_j) per slot and the tail (log Q_t, log P_t), P_t = max(0, 1 - sum p)
 *                 for tail and 0 for zero (the zero policy's off-K elements all have p = 0, and
 *                 every element term is linear in q where p = 0, so they sum to the one outcome)
 *   renormalise:  (x_j - log Q_K, y_j - log P_K) per slot, no tail
 * With g_j = de/dX of each outcome from de_elem (S_K their sum over the slots, g_t the tail's),
 * the gradient of the row loss with respect to a free x is, by the chain rule,
 *   tail, zero:   on K  g_j                      off K  q_v g_t / Q_t
 *   renormalise:  on K  g_j - (q_v / Q_K) S_K    off K  0
 * and the fused loss's softmax Jacobian subtracts q_v times its sum (S_K + g_t; 0 for
 * renormalise). Both cases are one formula with two row constants, c_on and a_off:
 *   on K   g_j - q'_v c_on         off K   q_v a_off
 * with q'_v = q_v, or for renormalise q_v / Q_K = exp(x_v - log Q_K) (dk_slot_q) and c_on = S_K.
 * log Q_K is the slots' log-sum-exp of x in the log domain, never the log of a sum of exp(x):
 * where the student puts almost no mass on the ids, Q_K underflows fp32 (every x_j below
 * about -103) while the renormalised outcomes x_j - log Q_K are ordinary numbers.
 */
#ifndef DISTIL_TOPK_MATH_H
#define DISTIL_TOPK_MATH_H

/* Tail policies, the values of distil_topk_tail. */
#define DK_TAIL   0
#define DK_RENORM 1
#define DK_ZERO   2

/* log P_t = log(max(0, 1 - exp(lp))) for lp = log sum_K p: -inf when lp >= 0; NaN stays NaN. */
DE_FN DE_T dk_tail_logp(DE_T lp) {
    return lp >= DE_K(0.0) ? -DE_K(1.0) / DE_K(0.0) : DE_LOG(-DE_EXPM1(lp));
}

/* The outcome of slot j: X, Y from its log-probs, shifted by the log-normalisers for
 * renormalise (lqk = log Q_K, lpk = log P_K; unused otherwise). */
DE_FN DE_T dk_slot_x(int tail, DE_T x, DE_T lqk) {
    return tail == DK_RENORM ? x - lqk : x;
}
DE_FN DE_T dk_slot_y(int tail, DE_T y, DE_T lpk) {
    return tail == DK_RENORM ? y - lpk : y;
}

/* The element term of slot j from its log-probs x, y (lqk, lpk as for dk_slot_x / dk_slot_y),
 * *g its de/dX. Renormalise where every used teacher slot is -inf (P_K = 0, lpk = -inf) has no
 * renormalised teacher: the row's soft part is then that of a row without used slots, loss 0
 * and gradient 0 (docs/SPEC.md §7), NaN only where x or y is NaN. */
DE_FN DE_T dk_slot_elem(const de_coef *kc, int tail, DE_T x, DE_T y, DE_T lqk, DE_T lpk, DE_T *g) {
    if (tail == DK_RENORM && lpk == -DE_K(1.0) / DE_K(0.0)) {
        *g = de_nan_pass(x, y, DE_K(0.0));
        return *g;
    }
    DE_T q;
    return de_elem(kc->mode, kc, dk_slot_x(tail, x, lqk), dk_slot_y(tail, y, lpk), g, &q);
}

/* log P_t of the tail outcome: -inf for zero, and when the ids cover all of V (no tail: a P_t
 * left by rounding would meet Q_t = 0 and give +inf). */
DE_FN DE_T dk_tail_y(int tail, DE_T lpk, int covers_vocab) {
    return (tail == DK_ZERO || covers_vocab) ? -DE_K(1.0) / DE_K(0.0) : dk_tail_logp(lpk);
}

/* q'_v of slot v (header comment) from its log-prob x: exp(x), or for renormalise
 * exp(x - lqk), lqk = log Q_K (-inf: no student mass on the ids at all, q' = 0). */
DE_FN DE_T dk_slot_q(int tail, DE_T x, DE_T lqk) {
    if (tail != DK_RENORM) {
        return DE_EXP(x);
    }
    return lqk > -DE_K(1.0) / DE_K(0.0) ? DE_EXP(x - lqk) : DE_K(0.0);
}

/* The row constants (header comment): sum_gk = S_K, g_t the tail's de/dX (0 for renormalise),
 * qt = Q_t; jac: with the softmax Jacobian (fused loss). */
DE_FN void dk_grad_consts(int tail, int jac, DE_T sum_gk, DE_T g_t, DE_T qt, DE_T *c_on,
                          DE_T *a_off) {
    if (tail == DK_RENORM) {
        *c_on = sum_gk;
        *a_off = DE_K(0.0);
        return;
    }
    DE_T free_sum = jac ? sum_gk + g_t : DE_K(0.0);
    *c_on = free_sum;
    *a_off = (qt > DE_K(0.0) ? g_t / qt : DE_K(0.0)) - free_sum;
}

/* One element of G = gh (s - onehot) + gsi * dsoft/dx, gsi = (weight_soft / n) / tau (fused) or
 * grad_scale / n (log-prob form, gh = 0). On K: slot gradient g; off K: g unused. */
DE_FN DE_T dk_g_on(DE_T gh, DE_T gsi, DE_T s, DE_T onehot, DE_T g, DE_T q, DE_T c_on) {
    return gh * (s - onehot) + gsi * (g - q * c_on);
}
DE_FN DE_T dk_g_off(DE_T gh, DE_T gsi, DE_T s, DE_T onehot, DE_T q, DE_T a_off) {
    return gh * (s - onehot) + gsi * (q * a_off);
}

#endif /* DISTIL_TOPK_MATH_H */
