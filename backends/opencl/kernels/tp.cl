/*
 * tp.cl - tp_rows of the opencl backend (docs/SPEC.md §8): one phase of the vocabulary-parallel
 * row pass on a chunk of the rank's fp32 logits, one work-group per row, from fused_rows.cl's
 * passes (which come before this file) with the row statistics of the whole group, reduced over the
 * ranks by the core between the phases, in double (rows, 2 | 3) buffers:
 *   phase 0  work-group maxima of zs, zt                                        -> smax
 *   phase 1  sum exp((zs - m) / tau), sum exp((zt - m) / tau), sum exp(zs - m)  -> ssum
 *   phase 2  zs[label] - m_s (the owner), sum e, sum de/dx                      -> sterm
 *   phase 3  ce, soft and G from the group's statistics
 * Needs cl_khr_fp64 (the launcher checks); fixed-order reductions, no float atomics.
 */
#ifdef cl_khr_fp64

/* The maxima of (a, b) over the work-group, fixed tree order; lm: 2 WG_SIZE floats. */
float2 distil_tp_group_max2(float a, float b, __local float *lm) {
    const uint lid = get_local_id(0);
    lm[lid] = a;
    lm[WG_SIZE + lid] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = WG_SIZE / 2; h > 0; h >>= 1) {
        if (lid < h) {
            lm[lid] = fmax(lm[lid], lm[lid + h]);
            lm[WG_SIZE + lid] = fmax(lm[WG_SIZE + lid], lm[WG_SIZE + lid + h]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 r = (float2)(lm[0], lm[WG_SIZE]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* The row's statistics from the group's (fused_rows.cl's layout: (max, log sum) pairs). */
distil_row_stats distil_tp_stats(__global const double *smax, __global const double *ssum,
                                 float inv_t, float8 coef) {
    distil_row_stats st;
    st.s = (float2)((float)smax[0], (float)log(ssum[2]));
    st.a = (float2)((float)smax[0], (float)log(ssum[0]));
    st.t = (float2)((float)smax[1], (float)log(ssum[1]));
    st.inv_t = inv_t;
    st.inv_tt = inv_t; /* one temperature: tp refuses the head options */
    st.k = distil_coef_of(coef);
    return st;
}

/*
 * zs, zt (rows, vocab) float dense at zs_off / zt_off: the rank's columns [v0, v0 + vocab) of
 * vocab_total. labels (rows) long, global ids. stats: double, smax (rows, 2) at smax_off, ssum
 * (rows, 3) at ssum_off, sterm (rows, 3) at sterm_off. ce, soft, g, n_valid as distil_fused_rows.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_tp_rows(int phase, __global float *zs, ulong zs_off, __global const float *zt, ulong zt_off,
               long vocab, long v0, long vocab_total, __global const long *labels, ulong lab_off,
               long ignore_index, float8 coef, float inv_t, float w_hard, float w_soft,
               __global double *stats, ulong smax_off, ulong ssum_off, ulong sterm_off,
               __global float *ce, ulong ce_off, __global float *soft, ulong soft_off,
               __global T *g, ulong g_off, int has_g, __global const float *n_valid, ulong n_off,
               int has_n) {
    __local float red_m[2 * WG_SIZE];
    __local distil_acc red_s[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global const float *zsr = zs + zs_off + row * (ulong)vocab;
    __global const float *ztr = zt + zt_off + row * (ulong)vocab;
    __global T *gr = g + g_off + row * (ulong)vocab;
    __global double *smax = stats + smax_off + 2 * row;
    __global double *ssum = stats + ssum_off + 3 * row;
    __global double *sterm = stats + sterm_off + 3 * row;
    const long label = labels[lab_off + row];
    if (label == ignore_index || label < 0 || label >= vocab_total) { /* uniform in the group */
        if (phase == 3) {
            if (lid == 0) {
                ce[ce_off + row] = 0.0f;
                soft[soft_off + row] = 0.0f;
            }
            for (long j = lid; has_g && j < vocab; j += WG_SIZE) {
                STORE(DTYPE, gr, j, 0.0f);
            }
        } else if (lid == 0 && phase == 0) {
            smax[0] = smax[1] = -INFINITY;
        } else if (lid == 0) {
            __global double *s = phase == 1 ? ssum : sterm;
            s[0] = s[1] = s[2] = 0.0;
        }
        return;
    }
    const long own = label >= v0 && label < v0 + vocab ? label - v0 : -1;
    if (phase == 0) {
        float a = -INFINITY, b = -INFINITY;
        for (long j = lid; j < vocab; j += WG_SIZE) {
            a = fmax(a, zsr[j]);
            b = fmax(b, ztr[j]);
        }
        const float2 m = distil_tp_group_max2(a, b, red_m);
        if (lid == 0) {
            smax[0] = m.x;
            smax[1] = m.y;
        }
        return;
    }
    if (phase == 1) {
        const float ms = (float)smax[0], mt = (float)smax[1];
        const float ra = ms == -INFINITY ? 0.0f : ms, rb = mt == -INFINITY ? 0.0f : mt;
        distil_acc sx = 0.0f, sy = 0.0f, sc = 0.0f;
        for (long j = lid; j < vocab; j += WG_SIZE) {
            sx += exp((zsr[j] - ra) * inv_t);
            sy += exp((ztr[j] - rb) * inv_t);
            sc += exp(zsr[j] - ra);
        }
        sx = distil_group_sum_acc(sx, red_s);
        sy = distil_group_sum_acc(sy, red_s);
        sc = distil_group_sum_acc(sc, red_s);
        if (lid == 0) {
            ssum[0] = sx;
            ssum[1] = sy;
            ssum[2] = inv_t == 1.0f ? sx : sc;
        }
        return;
    }
    distil_row_stats st = distil_tp_stats(smax, ssum, inv_t, coef);
    if (phase == 2) {
        const float z_label = own >= 0 ? zsr[own] : 0.0f;
        float sum_e;
        distil_acc sum_dx;
        float no_h; /* the entropy is refused on a vocabulary shard */
        distil_row_soft_sums(zsr, ztr, vocab, &st, red_s, &sum_e, &sum_dx, 0, &no_h);
        if (lid == 0) {
            sterm[0] = own >= 0 ? (double)z_label - (double)st.s.x : 0.0;
            sterm[1] = sum_e;
            sterm[2] = sum_dx;
        }
        return;
    }
    if (lid == 0) {
        ce[ce_off + row] = (float)(log(ssum[2]) - sterm[0]);
        soft[soft_off + row] = (float)sterm[1];
    }
    if (has_g) {
        const float n = has_n ? n_valid[n_off] : 1.0f;
        const float hard = n == 0.0f ? 0.0f : w_hard / n;
        const float soft = n == 0.0f ? 0.0f : w_soft / n * inv_t;
        distil_row_write_g(zsr, ztr, gr, vocab, own, &st, hard, soft, (distil_acc)sterm[2], 0, 0);
    }
}

#endif /* cl_khr_fp64 */
