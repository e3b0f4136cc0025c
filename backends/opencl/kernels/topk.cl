/*
 * topk.cl - the row pass of the cached top-k teacher (docs/SPEC.md §7) for the opencl backend
 * (after common.cl, distil_elem.h, div_rows.cl for distil_coef_of, and distil_topk.h). One
 * work-group per row, fixed-order reductions, no float atomics. Build options: DTYPE (of G),
 * SRC_DTYPE (of x: f32 logits, or the student's log-probs), TDTYPE (of the teacher's log-probs),
 * IDS_I64 (ids are long, else int), TK_MAX (slots held in local memory per row: k <= TK_MAX,
 * checked on the host).
 */

#ifndef TDTYPE
#define TDTYPE f32
#endif
#ifndef TK_MAX
#define TK_MAX 512
#endif
#define TT STORAGE(TDTYPE)
#if IDS_I64
typedef long distil_id_t;
#else
typedef int distil_id_t;
#endif

/* The first bad slot of a row (LONG_MAX: none): an id outside [0, vocab) other than pad_id, or
 * the second of two equal ids. Slots j = lid, lid + WG_SIZE, ...; the whole group gets the
 * minimum. sid: the row's k ids in local memory. */
long distil_topk_first_bad(__local const long *sid, long k, long pad_id, long vocab,
                           __local long *red) {
    const int lid = (int)get_local_id(0);
    long bad = LONG_MAX;
    for (long j0 = 0; j0 < k; j0 += WG_SIZE) {
        const long j = j0 + lid;
        const long id = j < k ? sid[j] : pad_id;
        bool b = id != pad_id && (id < 0 || id >= vocab);
        for (long u = 0; id != pad_id && u < j; u++) {
            b = b || sid[u] == id;
        }
        bad = (b && bad == LONG_MAX) ? j : bad;
    }
    /* the group minimum, a fixed tree */
    red[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            red[lid] = min(red[lid], red[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const long m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

void distil_topk_load_ids(__global const distil_id_t *ids, ulong off, long k, __local long *sid) {
    for (long j0 = 0; j0 < k; j0 += WG_SIZE) {
        const long j = j0 + (long)get_local_id(0);
        if (j < k) {
            sid[j] = (long)ids[off + (ulong)j];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/*
 * After distil_topk_rows, one work-group: each row's group checked its own ids (in parallel over
 * the rows) and put the smallest bad row of the block in bad_row[0] (atomic_min: the same row
 * whatever the order; INT_MAX: none). That row's first bad slot is found again and goes to
 * state {row0 + row, its id, vocab, 1 out of range | 2 twice} when nothing is recorded
 * (state[0] < 0, so the first error of a call stands: a label found by count_valid, or an
 * earlier block's); bad_row is reset for the next launch.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_topk_commit(__global const distil_id_t *ids, ulong ids_off, long k, long pad_id, long vocab,
                   long row0, __global int *bad_row, __global long *state) {
    __local long sid[TK_MAX];
    __local long red[WG_SIZE];
    const int first = bad_row[0]; /* read by every item before item 0 resets it below */
    const bool any = first != INT_MAX;
    const long row = any ? (long)first : 0; /* no early exit: every item meets the barriers */
    distil_topk_load_ids(ids, ids_off + (ulong)(row * k), k, sid);
    const long bad = distil_topk_first_bad(sid, k, pad_id, vocab, red);
    if (get_local_id(0) == 0) {
        if (any && bad != LONG_MAX && state[0] < 0) {
            const long id = sid[bad];
            state[0] = row0 + row;
            state[1] = id;
            state[2] = vocab;
            state[3] = (id < 0 || id >= vocab) ? 1 : 2;
        }
        bad_row[0] = INT_MAX;
    }
}

/*
 * Online (max, sums at it and at 1) of the fused loss's logits, as distil_lse_add with two scales
 * sharing one max: (m, s, s1) stands for s exp(m it) and s1 exp(m). -inf entries add nothing;
 * NaN makes both sums NaN.
 */
void distil_topk_online_add(float *m, distil_acc *s, distil_acc *s1, float v, float it) {
    if (v > *m) {
        *s = *s * exp((*m - v) * it) + 1.0f;
        *s1 = *s1 * exp(*m - v) + 1.0f;
        *m = v;
    } else if (v != -INFINITY) {
        *s += exp((v - *m) * it);
        *s1 += exp(v - *m);
    }
}

/* Merge the group's (m, s, s1) in a fixed tree order; every item gets the result. lm, ls, ls1:
 * WG_SIZE values each. */
void distil_topk_group_online(float *m, distil_acc *s, distil_acc *s1, float it, __local float *lm,
                              __local distil_acc *ls, __local distil_acc *ls1) {
    const uint lid = get_local_id(0);
    lm[lid] = *m;
    ls[lid] = *s;
    ls1[lid] = *s1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = WG_SIZE / 2; h > 0; h >>= 1) {
        if (lid < h) {
            float mm = lm[lid];
            distil_acc ss = ls[lid], ss1 = ls1[lid];
            const float m2 = lm[lid + h];
            const float mx = mm > m2 ? mm : m2;
            if (mx != -INFINITY) {
                ss = ss * exp((mm - mx) * it) + ls[lid + h] * exp((m2 - mx) * it);
                ss1 = ss1 * exp(mm - mx) + ls1[lid + h] * exp(m2 - mx);
            }
            lm[lid] = mx;
            ls[lid] = ss;
            ls1[lid] = ss1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *m = lm[0];
    *s = ls[0];
    *s1 = ls1[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/*
 * The fused loss's fp32 logits, one read of the row (the ids' entries already -inf, their logits
 * in sz): the tail's (max, sums at it and 1) online, the slots' likewise, merged. Returns l1 =
 * (max, log sum) at temperature 1 (for CE and s), *lset the log-sum-exp at it and *qt = Q_t, the
 * tail summed directly (no 1 - Q_K).
 */
float2 distil_topk_row_online(__global const SRC_T *xr, long vocab, __local const long *sid,
                              __local const float *sz, long k, long pad_id, float it, float *lset,
                              distil_acc *qt, __local float *lm, __local distil_acc *ls,
                              __local distil_acc *ls1) {
    float mt = -INFINITY, mk = -INFINITY;
    distil_acc st = 0.0f, st1 = 0.0f, sk = 0.0f, sk1 = 0.0f;
    for (long j = get_local_id(0); j < vocab; j += WG_SIZE) {
        distil_topk_online_add(&mt, &st, &st1, LOAD(SRC_DTYPE, xr, j), it);
    }
    for (long j = get_local_id(0); j < k; j += WG_SIZE) {
        distil_topk_online_add(&mk, &sk, &sk1, sid[j] == pad_id ? -INFINITY : sz[j], it);
    }
    distil_topk_group_online(&mt, &st, &st1, it, lm, ls, ls1);
    distil_topk_group_online(&mk, &sk, &sk1, it, lm, ls, ls1);
    const float m = mt > mk ? mt : mk;
    const distil_acc at = mt == -INFINITY ? 0.0f : st * exp((mt - m) * it);
    const distil_acc a = at + (mk == -INFINITY ? 0.0f : sk * exp((mk - m) * it));
    const distil_acc a1 =
        (mt == -INFINITY ? 0.0f : st1 * exp(mt - m)) + (mk == -INFINITY ? 0.0f : sk1 * exp(mk - m));
    *lset = m * it + (float)log(a);
    *qt = at / a;
    return (float2)(m, (float)log(a1));
}

/* sum over the row of exp(x * it - lset) in distil_acc. */
distil_acc distil_topk_row_q(__global const SRC_T *xr, long vocab, float it, float lset,
                             __local distil_acc *red) {
    distil_acc s = 0.0f;
    for (long j = get_local_id(0); j < vocab; j += WG_SIZE) {
        s += exp(LOAD(SRC_DTYPE, xr, j) * it - lset);
    }
    return distil_group_sum_acc(s, red);
}

/*
 * log P_K of the row's used slots given their maximum ym, as ym + log1p(the other slots' exp(y -
 * ym)) in distil_acc (ties with ym count 1 each), as cpu_topk_teacher_lse: P_t = 1 - P_K cancels
 * where the slots hold nearly all the mass, and fp32 exps or a sum holding the maximum's 1 would
 * leave it a relative error of u sum_K p |y| / P_t (docs/SPEC.md §7). A maximum of -inf (every
 * used slot -inf), +inf or NaN is the result itself. Group-uniform.
 */
float distil_topk_teacher_lse(__global const TT *yr, __local const long *sid, long k, long pad_id,
                              float ym, __local distil_acc *red) {
    if (!(ym > -INFINITY && ym < INFINITY)) {
        return ym; /* uniform */
    }
    distil_acc rest = 0.0f, ties = 0.0f;
    for (long j = get_local_id(0); j < k; j += WG_SIZE) {
        const float y = LOAD(TDTYPE, yr, j);
        const bool used = sid[j] != pad_id;
        ties += used && y == ym ? 1.0f : 0.0f;
        rest += used && y != ym ? exp((distil_acc)y - (distil_acc)ym) : 0.0f;
    }
    rest = distil_group_sum_acc(rest, red);
    ties = distil_group_sum_acc(ties, red);
    return (float)((distil_acc)ym + log1p((ties - 1.0f) + rest));
}

/*
 * x     (rows, vocab) SRC_DTYPE at x_off, row stride x_stride: fp32 logits (logits != 0: softmax
 *       at inv_t, CE at 1, the softmax Jacobian; the ids are marked -inf in it to sum Q_t) or
 *       the student's log-probs as given (read only; Q_t = sum exp(x) - Q_K in distil_acc)
 * ids, tlogp (rows, k) at ids_off / t_off; pad_id; tail (DK_*)
 * labels (rows) long, optional; ce (optional), soft (rows) float; g (rows, vocab) DTYPE row
 *       stride g_stride, optional: G = w_hard / n (s - onehot) + w_soft / n (/ tau) dsoft/dx
 * bad_row (1) int: every row's ids are checked here, ignored rows' too (docs/SPEC.md §7); a row
 *       with a bad id is ignored like an ignored label and atomic_min's its index into bad_row
 *       (distil_topk_commit records it).
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void distil_topk_rows(
    __global SRC_T *x, ulong x_off, ulong x_stride, int logits, __global const distil_id_t *ids,
    ulong ids_off, __global const TT *tlogp, ulong t_off, long k, long pad_id, int tail, long vocab,
    __global const long *labels, ulong lab_off, int has_labels, long ignore_index, float8 coef,
    float inv_t, float w_hard, float w_soft, __global float *ce, ulong ce_off, int has_ce,
    __global float *soft, ulong soft_off, __global T *g, ulong g_off, ulong g_stride, int has_g,
    __global const float *n_valid, ulong n_off, int has_n, __global int *bad_row) {
    __local long sid[TK_MAX];
    __local float sz[TK_MAX], sg[TK_MAX];
    __local long red_l[WG_SIZE];
    __local float red_m[WG_SIZE];
    __local distil_acc red_s[WG_SIZE], red_s1[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global SRC_T *xr = x + x_off + row * x_stride;
    __global T *gr = g + g_off + row * g_stride;
    __global const TT *yr = tlogp + t_off + row * (ulong)k;
    const long label = has_labels ? labels[lab_off + row] : -1;
    bool skip = has_labels && (label == ignore_index || (logits && (label < 0 || label >= vocab)));
    distil_topk_load_ids(ids, ids_off + row * (ulong)k, k, sid);
    if (distil_topk_first_bad(sid, k, pad_id, vocab, red_l) != LONG_MAX) {
        skip = true;
        if (lid == 0) {
            atomic_min(bad_row, (int)row); /* rows <= INT_MAX: checked on the host */
        }
    }
    if (skip) { /* uniform over the group */
        if (lid == 0) {
            soft[soft_off + row] = 0.0f;
            if (has_ce) {
                ce[ce_off + row] = 0.0f;
            }
        }
        for (long j = lid; has_g && j < vocab; j += WG_SIZE) {
            STORE(DTYPE, gr, j, 0.0f);
        }
        return;
    }
    const float it = logits ? inv_t : 1.0f;
    const float z_label = (logits && has_labels) ? LOAD(SRC_DTYPE, xr, label) : 0.0f;
    /* The slots: raw value (logit or log-prob) into local memory; pads get -inf x and y. */
    float ym = -INFINITY;
    distil_acc ys = 0.0f;
    int used = 0;
    for (long j = lid; j < k; j += WG_SIZE) {
        const bool pad = sid[j] == pad_id;
        sz[j] = pad ? -INFINITY : LOAD(SRC_DTYPE, xr, sid[j]);
        const float y = pad ? -INFINITY : LOAD(TDTYPE, yr, j);
        distil_lse_add(&ym, &ys, y, 1.0f);
        used += pad ? 0 : 1;
    }
    const float lpk = distil_topk_teacher_lse(
        yr, sid, k, pad_id, distil_group_lse(ym, ys, red_m, red_s, 1.0f).x, red_s);
    const int n_used = (int)distil_group_sum(convert_float(used), red_m);
    /* The student: with logits, the ids marked -inf (after every item has read z_label and its
     * slots), then one read of the row for both log-sum-exps and the tail Q_t summed directly;
     * the log-prob form (read only): Q_t = sum exp(x) - Q_K in distil_acc, lset = 0. */
    float2 l1 = (float2)(0.0f);
    float lset = 0.0f;
    distil_acc qt;
    if (logits) {
        for (long j0 = 0; j0 < k; j0 += WG_SIZE) {
            const long j = j0 + lid;
            if (j < k && sid[j] != pad_id) {
                STORE(SRC_DTYPE, xr, sid[j], -INFINITY);
            }
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        l1 = distil_topk_row_online(xr, vocab, sid, sz, k, pad_id, it, &lset, &qt, red_m, red_s,
                                    red_s1);
    }
    if (!logits) {
        distil_acc qk = 0.0f;
        for (long j = lid; j < k; j += WG_SIZE) {
            qk += exp(sz[j] * it - lset);
        }
        const distil_acc qk_all = distil_group_sum_acc(qk, red_s);
        const distil_acc all = distil_topk_row_q(xr, vocab, 1.0f, 0.0f, red_s);
        qt = all - qk_all > 0.0f ? all - qk_all : 0.0f;
    }
    /* log Q_K as the slots' log-sum-exp (distil_topk.h: Q_K itself underflows where the student
     * puts almost no mass on the ids); only renormalise uses it. Uniform branch. */
    float lqk = 0.0f;
    if (tail == DK_RENORM) {
        float xm = -INFINITY;
        distil_acc xs = 0.0f;
        for (long j = lid; j < k; j += WG_SIZE) {
            distil_lse_add(&xm, &xs, sz[j] * it - lset, 1.0f); /* pads: -inf, nothing */
        }
        const float2 l = distil_group_lse(xm, xs, red_m, red_s, 1.0f);
        lqk = l.x + l.y;
    }
    /* the element terms of the slots, and of the tail */
    const de_coef kc = distil_coef_of(coef);
    distil_acc se = 0.0f, sgs = 0.0f;
    for (long j = lid; j < k; j += WG_SIZE) {
        float gj = 0.0f;
        if (sid[j] != pad_id) {
            const float xj = sz[j] * it - lset;
            se += dk_slot_elem(&kc, tail, xj, LOAD(TDTYPE, yr, j), lqk, lpk, &gj);
        }
        sg[j] = gj;
        sgs += gj;
    }
    float loss = (float)distil_group_sum_acc(se, red_s);
    const float sum_g = (float)distil_group_sum_acc(sgs, red_s);
    float g_t = 0.0f, q;
    if (tail != DK_RENORM) {
        loss +=
            de_elem(kc.mode, &kc, log((float)qt), dk_tail_y(tail, lpk, n_used == vocab), &g_t, &q);
    }
    if (lid == 0) {
        soft[soft_off + row] = loss;
        if (has_ce) {
            ce[ce_off + row] = has_labels ? (l1.x - z_label) + l1.y : 0.0f;
        }
    }
    if (has_g) { /* uniform */
        const float n = has_n ? n_valid[n_off] : 1.0f;
        const float gh = n == 0.0f ? 0.0f : w_hard / n;
        const float gsi = n == 0.0f ? 0.0f : w_soft / n * it;
        float c_on, a_off;
        dk_grad_consts(tail, logits, sum_g, g_t, (float)qt, &c_on, &a_off);
        if (n == 0.0f) {
            c_on = a_off = 0.0f; /* the gradient is 0 (an infinite a_off times gsi = 0 is NaN) */
        }
        for (long j = lid; j < vocab; j += WG_SIZE) { /* off K (the ids' entries are rewritten) */
            const float zv = LOAD(SRC_DTYPE, xr, j);
            const float sv = logits ? exp((zv - l1.x) - l1.y) : 0.0f;
            const float oh = j == label && logits ? 1.0f : 0.0f;
            STORE(DTYPE, gr, j, dk_g_off(gh, gsi, sv, oh, exp(zv * it - lset), a_off));
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        for (long j0 = 0; j0 < k; j0 += WG_SIZE) { /* a uniform trip count (PoCL) */
            const long j = j0 + lid;
            if (j < k && sid[j] != pad_id) {
                const float sv = logits ? exp((sz[j] - l1.x) - l1.y) : 0.0f;
                const float oh = sid[j] == label && logits ? 1.0f : 0.0f;
                const float qv = dk_slot_q(tail, sz[j] * it - lset, lqk);
                STORE(DTYPE, gr, sid[j], dk_g_on(gh, gsi, sv, oh, sg[j], qv, c_on));
            }
        }
    }
}
