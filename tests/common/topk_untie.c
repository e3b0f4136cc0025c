/*
 * topk_untie.c - keeps a TVD top-k problem away from TVD's kink (docs/SPEC.md §6: the gradient
 * of |p - q| / 2 jumps by q where p = q, and the side is decided by rounding there). Every
 * outcome (X, Y) of a row (docs/SPEC.md §7: a slot, the renormalised slot, the tail) whose
 * float64 |X - Y| is below TK_TIE_GAP gets its teacher log-prob moved down (slot j, or the
 * first slot with a finite log-prob for the tail) until none is, so that ref and every backend take
 * the same side, whatever the seed, and central differences (test_topk_ref.c) do not step across
 * the kink.
 */
#include "topk_problem.h"

#include <math.h>
#include <stdlib.h>

/* log-space distance from a tie: above the fp32 rounding of the fused loss's log-softmax and of
 * a fp32 tail sum, and above a finite-difference step's effect (2e-3 times |Ws| entries). */
#define TK_TIE_GAP 0.03

static int64_t tk_untie_id(const tk_problem *p, size_t e) {
    return p->s.idt == DISTIL_IDS_I64 ? ((const int64_t *)p->ids)[e]
                                      : (int64_t)((const int32_t *)p->ids)[e];
}

/* Row i's student log-probs in float64 (the fused loss: log_softmax of its logits / tau). */
static void tk_untie_student(const tk_problem *p, int64_t i, double *x) {
    const tk_spec *s = &p->s;
    if (!s->fused) {
        for (int64_t u = 0; u < s->v; u++) {
            x[u] = tu_get(p->x, p->dtype, (size_t)(i * s->v + u));
        }
        return;
    }
    double m = -INFINITY, sum = 0.0;
    for (int64_t u = 0; u < s->v; u++) {
        double z = s->bias ? tu_get(p->bs, p->dtype, (size_t)u) : 0.0;
        for (int64_t h = 0; h < s->hs; h++) {
            z += (double)tu_get(p->xs, p->dtype, (size_t)(i * s->hs + h)) *
                 (double)tu_get(p->ws, p->dtype, (size_t)(u * s->hs + h));
        }
        x[u] = z / s->tau;
        m = fmax(m, x[u]);
    }
    for (int64_t u = 0; u < s->v; u++) {
        sum += exp(x[u] - m);
    }
    for (int64_t u = 0; u < s->v; u++) {
        x[u] -= m + log(sum);
    }
}

static bool tk_tied(double a, double b) {
    return isfinite(a) && isfinite(b) && fabs(a - b) < TK_TIE_GAP;
}

/* The slot of row i to move (its index in the row), or -1 when no outcome is tied. */
static int64_t tk_untie_find(const tk_problem *p, int64_t i, const double *x, unsigned char *mark) {
    const tk_spec *s = &p->s;
    double qk = 0.0, pk = 0.0, qt = 0.0;
    int64_t used = 0, first = -1, found = -1;
    for (int64_t j = 0; j < s->k; j++) {
        int64_t id = tk_untie_id(p, (size_t)(i * s->k + j));
        if (id >= 0 && id < s->v && !mark[id]) {
            const double y = tu_get(p->logp, s->tdtype, (size_t)(i * s->k + j));
            mark[id] = 1;
            qk += exp(x[id]);
            pk += exp(y);
            used++;
            first = first < 0 && isfinite(y) ? j : first;
        }
    }
    for (int64_t u = 0; u < s->v; u++) {
        qt += mark[u] ? 0.0 : exp(x[u]);
    }
    const bool renorm = s->tail == DISTIL_TOPK_RENORMALISE;
    const double lqk = renorm ? log(qk) : 0.0, lpk = renorm ? log(pk) : 0.0;
    for (int64_t j = 0; j < s->k; j++) {
        int64_t id = tk_untie_id(p, (size_t)(i * s->k + j));
        if (id >= 0 && id < s->v && mark[id]) {
            double y = tu_get(p->logp, s->tdtype, (size_t)(i * s->k + j));
            /* renormalise with one slot: X = Y = 0 exactly, and its gradient is 0 either way */
            if (found < 0 && !(renorm && used == 1) && tk_tied(x[id] - lqk, y - lpk)) {
                found = j;
            }
            mark[id] = 0;
        }
    }
    /* (no finite slot: P_t = 1 > Q_t, which stays strictly below 1 unless Q_K rounds away) */
    if (found < 0 && s->tail == DISTIL_TOPK_TAIL && used < s->v && pk < 1.0 &&
        tk_tied(log(qt), log(1.0 - pk))) {
        found = first;
    }
    return found;
}

void tk_untie(tk_problem *p) {
    const tk_spec *s = &p->s;
    double *x = malloc(sizeof(double) * (size_t)s->v);
    unsigned char *mark = calloc((size_t)s->v, 1);
    for (int64_t i = 0; i < s->t; i++) {
        tk_untie_student(p, i, x);
        for (int tries = 0; tries < 64; tries++) {
            int64_t j = tk_untie_find(p, i, x, mark);
            if (j < 0) {
                break;
            }
            const size_t e = (size_t)(i * s->k + j);
            const float y = tu_get(p->logp, s->tdtype, e);
            /* down by 2 gaps, or more where the teacher's dtype rounds that away (bf16) */
            for (double step = 2.0 * TK_TIE_GAP; tu_get(p->logp, s->tdtype, e) == y; step *= 2.0) {
                tu_set(p->logp, s->tdtype, e, (float)((double)y - step));
            }
        }
    }
    free(x);
    free(mark);
}
