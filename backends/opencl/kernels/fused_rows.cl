/*
 * fused_rows.cl - docs/SPEC.md §2 steps 2-5 on one chunk of fp32 logits (opencl backend;
 * common.cl comes first): per-row hard CE, soft JSD at temperature tau, and the logit gradient
 * G in DTYPE. One work-group per row, fixed-order reductions, no float atomics.
 */

/* Per-row softmax statistics: (max, log sum) of zs, zs / tau and zt / tau, with max the maximum of
 * the unscaled logits, so that log_softmax(z / tau)_j = (z_j - max) / tau - log sum, plus the JSD
 * constants. */
typedef struct distil_row_stats {
    float2 s, a, t;
    float inv_t;
    float inv_tt; /* the teacher's 1 / temperature (docs/SPEC.md §6; inv_t by default) */
    de_coef k;    /* the constants of beta */
} distil_row_stats;

/* x = log q_j = log_softmax(zs / tau)_j and y = log p_j = log_softmax(zt / tau)_j. */
float distil_row_x(const distil_row_stats *st, float zs) {
    return (zs - st->a.x) * st->inv_t - st->a.y;
}
float distil_row_y(const distil_row_stats *st, float zt) {
    return (zt - st->t.x) * st->inv_tt - st->t.y;
}

/* Pass 1: three online log-sum-exps over the row, merged over the work-group. */
distil_row_stats distil_row_stats_of(__global const float *zsr, __global const float *ztr,
                                     long vocab, float inv_t, float inv_tt, __local float *red_m,
                                     __local distil_acc *red_s) {
    const int lid = (int)get_local_id(0);
    const bool same_t = inv_t == 1.0f; /* zs * inv_t == zs exactly: share the statistics */
    float ms = -INFINITY, ma = -INFINITY, mt = -INFINITY;
    distil_acc ss = 0.0f, sa = 0.0f, st = 0.0f;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                const float zsv = zsr[j];
                distil_lse_add(&ms, &ss, zsv, 1.0f);
                if (!same_t) {
                    distil_lse_add(&ma, &sa, zsv, inv_t);
                }
                distil_lse_add(&mt, &st, ztr[j], inv_tt);
            }
        }
    }
    distil_row_stats r;
    r.s = distil_group_lse(ms, ss, red_m, red_s, 1.0f);
    r.a = same_t ? r.s : distil_group_lse(ma, sa, red_m, red_s, inv_t);
    r.t = distil_group_lse(mt, st, red_m, red_s, inv_tt);
    r.inv_t = inv_t;
    r.inv_tt = inv_tt;
    return r;
}

/* Pass 2: the JSD row sum and sum_u dx_u over the work-group (in distil_acc); with has_h (uniform)
 * also the student's entropy -sum_u q_u x_u (docs/SPEC.md §6; a term with q == 0 is 0). */
void distil_row_soft_sums(__global const float *zsr, __global const float *ztr, long vocab,
                          const distil_row_stats *st, __local distil_acc *red, float *sum_e,
                          distil_acc *sum_dx, int has_h, float *ent) {
    const int lid = (int)get_local_id(0);
    distil_acc se = 0.0f, sg = 0.0f, sh = 0.0f;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                float dx, q;
                const float x = distil_row_x(st, zsr[j]);
                se += de_elem(st->k.mode, &st->k, x, distil_row_y(st, ztr[j]), &dx, &q);
                sg += dx;
                if (has_h && q > 0.0f) {
                    sh -= q * x;
                }
            }
        }
    }
    *sum_e = (float)distil_group_sum_acc(se, red);
    *sum_dx = distil_group_sum_acc(sg, red);
    *ent = has_h ? (float)distil_group_sum_acc(sh, red) : 0.0f;
}

/* The soft part dx - q sum_dx of one column; at the student's mode (q > 1/2, where it cancels) as
 * de_soft_grad_mode with 1 - q = -expm1(x) and the rest of the sum in distil_acc (docs/SPEC.md
 * §3). */
float distil_row_soft(float dx, float q, float x, distil_acc sum_dx) {
    if (q > 0.5f) {
        return de_soft_grad_mode(dx, q, -expm1(x), (float)(sum_dx - (distil_acc)dx));
    }
    return de_soft_grad(dx, q, (float)sum_dx);
}

/* Pass 3: G_j = hard (s_j - [j == label]) + soft (dx_j - q_j sum_dx), times dz'/dz of the
 * student's scale and cap when has_dz (docs/SPEC.md §6: zs holds z', dzr the row of dz'/dz); s - 1
 * at the label as expm1 of its log-softmax (a confident label's s rounds to 1). Each work-item
 * reads zs[j] before it writes g[j], so g may be zs. */
void distil_row_write_g(__global const float *zsr, __global const float *ztr, __global T *gr,
                        long vocab, long label, const distil_row_stats *st, float hard, float soft,
                        distil_acc sum_dx, __global const float *dzr, int has_dz) {
    const int lid = (int)get_local_id(0);
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                const float zsv = zsr[j];
                float dx, q;
                const float x = distil_row_x(st, zsv);
                de_elem(st->k.mode, &st->k, x, distil_row_y(st, ztr[j]), &dx, &q);
                const float ls = (zsv - st->s.x) - st->s.y;
                const float s = j == label ? expm1(ls) : exp(ls);
                const float o = hard * s + soft * distil_row_soft(dx, q, x, sum_dx);
                STORE(DTYPE, gr, j, has_dz ? o * dzr[j] : o);
            }
        }
    }
}

/*
 * zs, zt    (rows, vocab) float, dense, at element offsets zs_off / zt_off: student and teacher
 *           logits. g may be zs itself (in place, DTYPE f32).
 * labels    (rows) long at lab_off. A label that is ignore_index or outside [0, vocab) ignores
 *           the row (count_valid, reduce.cl, has recorded the invalid ones).
 * ce, soft  (rows) float at ce_off / soft_off: CE_i and the soft part D_i, 0 for ignored rows
 * g         (rows, vocab) DTYPE at g_off, written when has_g:
 *           G = w_hard / n (s - onehot(label)) + w_soft / n * inv_t (dx - q sum_u dx_u)
 *           with s = softmax(zs), q = softmax(zs inv_t), dx = de/dx of docs/SPEC.md §1 at
 *           x = log q, y = log softmax(zt inv_tt); n = n_valid[n_off] (1 when !has_n).
 *           docs/SPEC.md §6: inv_tt is the teacher's 1 / temperature; with has_dz, zs holds the
 *           student's scaled / capped logits and G is multiplied by dz (rows, vocab) at dz_off,
 *           their dz'/dz (head.cl wrote it).
 * ent       (rows) float at ent_off, written when has_h: the student's entropy -sum q x of
 *           valid rows, 0 for ignored rows (docs/SPEC.md §6)
 * Passes over a row: (1) online max / sum-exp of zs, zs inv_t and zt inv_t; (2) the JSD terms
 * and sum dx, which G needs before any element of it can be written; (3) G. zs[label] is read
 * by everyone before the first barrier, long before any write to g.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_fused_rows(__global float *zs, ulong zs_off, __global const float *zt, ulong zt_off,
                  long vocab, __global const long *labels, ulong lab_off, long ignore_index,
                  float8 coef, float inv_t, float w_hard, float w_soft, __global float *ce,
                  ulong ce_off, __global float *soft, ulong soft_off, __global T *g, ulong g_off,
                  int has_g, __global const float *n_valid, ulong n_off, int has_n, float inv_tt,
                  __global const float *dz, ulong dz_off, int has_dz, __global float *ent,
                  ulong ent_off, int has_h) {
    __local float red_m[WG_SIZE];
    __local distil_acc red_s[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global const float *zsr = zs + zs_off + row * (ulong)vocab;
    __global const float *ztr = zt + zt_off + row * (ulong)vocab;
    __global T *gr = g + g_off + row * (ulong)vocab;

    const long label = labels[lab_off + row];
    if (label == ignore_index || label < 0 || label >= vocab) {
        if (lid == 0) {
            ce[ce_off + row] = 0.0f;
            soft[soft_off + row] = 0.0f;
            if (has_h) {
                ent[ent_off + row] = 0.0f;
            }
        }
        for (long j = lid; has_g && j < vocab; j += WG_SIZE) {
            STORE(DTYPE, gr, j, 0.0f);
        }
        return; /* uniform: the label is the same for the whole work-group */
    }
    const float z_label = zsr[label];
    distil_row_stats st = distil_row_stats_of(zsr, ztr, vocab, inv_t, inv_tt, red_m, red_s);
    st.k = distil_coef_of(coef);
    float sum_e;
    distil_acc sum_dx;
    float h;
    distil_row_soft_sums(zsr, ztr, vocab, &st, red_s, &sum_e, &sum_dx, has_h, &h);
    if (lid == 0) {
        ce[ce_off + row] = (st.s.x - z_label) + st.s.y; /* logsumexp(zs) - zs[label] */
        soft[soft_off + row] = sum_e;
        if (has_h) {
            ent[ent_off + row] = h;
        }
    }
    if (has_g) {
        const float n = has_n ? n_valid[n_off] : 1.0f;
        const float hard = n > 0.0f ? w_hard / n : 0.0f; /* n <= 0 or NaN: docs/SPEC.md §6 */
        const float soft = n > 0.0f ? w_soft / n * inv_t : 0.0f;
        distil_row_write_g(zsr, ztr, gr, vocab, label, &st, hard, soft, sum_dx,
                           dz + dz_off + row * (ulong)vocab, has_dz);
    }
}
