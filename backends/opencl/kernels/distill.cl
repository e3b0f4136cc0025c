/*
 * distill.cl - SPEC section 2 steps 2-5 on one chunk of fp32 logits (opencl backend;
 * common.cl comes first): per-row hard CE, soft JSD at temperature tau, and the logit gradient
 * G in DTYPE. One work-group per row, fixed-order reductions, no float atomics.
 */

/*
 * zs, zt    (rows, vocab) float, dense, at element offsets zs_off / zt_off: student and teacher
 *           logits. g may be zs itself (in place, DTYPE f32).
 * labels    (rows) long at lab_off. A label outside [0, vocab) that is not ignore_index ignores
 *           the row and lowers state[0] to the global row (row_offset + i) with atomic_min.
 * ce, jsd   (rows) float at ce_off / jsd_off: CE_i and JSD_i, 0 for ignored rows
 * g         (rows, vocab) DTYPE at g_off, written when has_g:
 *           G = wh / n (s - onehot(label)) + ws / n * inv_t (dx - q sum_u dx_u)
 *           with s = softmax(zs), q = softmax(zs inv_t), dx = de/dx of SPEC section 1 at
 *           x = log q, y = log softmax(zt inv_t); n = n_valid[n_off] (1 when !has_n).
 * Passes over a row: (1) online max / sum-exp of zs, zs inv_t and zt inv_t; (2) the JSD terms
 * and sum dx, which G needs before any element of it can be written; (3) G. Pass 3 re-reads
 * zs[j] and writes g[j] from the same work-item, which makes g == zs safe; zs[label] is read by
 * everyone before the first barrier, long before any write.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_distill_rows(__global float *zs, ulong zs_off, __global const float *zt, ulong zt_off,
                    long vocab, long row_offset, __global const long *labels, ulong lab_off,
                    long ignore_index, float beta, float inv_t, float wh, float ws,
                    __global float *ce, ulong ce_off, __global float *jsd, ulong jsd_off,
                    __global T *g, ulong g_off, int has_g, __global const float *n_valid,
                    ulong n_off, int has_n, __global int *state) {
    __local float red_m[WG_SIZE];
    __local float red_s[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global const float *zsr = zs + zs_off + row * (ulong)vocab;
    __global const float *ztr = zt + zt_off + row * (ulong)vocab;
    __global T *gr = g + g_off + row * (ulong)vocab;

    const long label = labels[lab_off + row];
    if (label == ignore_index || label < 0 || label >= vocab) {
        if (lid == 0) {
            ce[ce_off + row] = 0.0f;
            jsd[jsd_off + row] = 0.0f;
            if (label != ignore_index) {
                const long r = min(row_offset + (long)row, (long)INT_MAX - 1);
                atomic_min(state, (int)r);
            }
        }
        if (has_g) {
            for (long j = lid; j < vocab; j += WG_SIZE) {
                STORE(DTYPE, gr, j, 0.0f);
            }
        }
        return; /* uniform: the label is the same for the whole work-group */
    }
    const float z_label = zsr[label];
    const bool same_t = inv_t == 1.0f; /* zs * inv_t == zs exactly: share the statistics */

    /* Pass 1: three online log-sum-exps. */
    float ms = -INFINITY, ss = 0.0f, ma = -INFINITY, sa = 0.0f, mt = -INFINITY, st = 0.0f;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                const float zsv = zsr[j];
                distil_lse_add(&ms, &ss, zsv);
                if (!same_t) {
                    distil_lse_add(&ma, &sa, zsv * inv_t);
                }
                distil_lse_add(&mt, &st, ztr[j] * inv_t);
            }
        }
    }
    /* (max, log sum) of zs, zs / tau and zt / tau: log_softmax(z)_j = (z_j - max) - log sum. */
    const float2 stat_s = distil_group_lse(ms, ss, red_m, red_s);
    const float2 stat_a = same_t ? stat_s : distil_group_lse(ma, sa, red_m, red_s);
    const float2 stat_t = distil_group_lse(mt, st, red_m, red_s);

    /* Pass 2: the JSD row sum and sum_u dx_u. */
    const float lbeta = distil_log_beta(beta);
    const float l1beta = distil_log_1m_beta(beta);
    float se = 0.0f, sg = 0.0f;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                float dx;
                se += distil_jsd_elem((zsr[j] * inv_t - stat_a.x) - stat_a.y,
                                      (ztr[j] * inv_t - stat_t.x) - stat_t.y, beta, lbeta, l1beta,
                                      &dx);
                sg += dx;
            }
        }
    }
    const float jsd_row = distil_group_sum(se, red_m);
    const float sum_dx = distil_group_sum(sg, red_s);
    if (lid == 0) {
        ce[ce_off + row] = (stat_s.x - z_label) + stat_s.y;
        jsd[jsd_off + row] = jsd_row;
    }
    if (!has_g) {
        return;
    }

    /* Pass 3: G. */
    const float n = has_n ? n_valid[n_off] : 1.0f;
    const float hard = n == 0.0f ? 0.0f : wh / n;
    const float soft = n == 0.0f ? 0.0f : ws / n * inv_t;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                const float zsv = zsr[j];
                const float x = (zsv * inv_t - stat_a.x) - stat_a.y;
                float dx;
                distil_jsd_elem(x, (ztr[j] * inv_t - stat_t.x) - stat_t.y, beta, lbeta, l1beta,
                                &dx);
                const float s = exp((zsv - stat_s.x) - stat_s.y) - (j == label ? 1.0f : 0.0f);
                STORE(DTYPE, gr, j, hard * s + soft * (dx - exp(x) * sum_dx));
            }
        }
    }
}

/*
 * Runs (one work-item) after distil_distill_rows on the same in-order queue: when state[0], the
 * first invalid row so far, lies in this chunk and its label was not captured yet, store the
 * label in state[1] (low 32 bits) and state[2] (high) and mark the row in state[3]. The labels
 * buffer may be gone by the time the host reads the state in synchronize.
 */
__kernel void distil_label_capture(__global const long *labels, ulong lab_off, long rows,
                                   long row_offset, __global int *state) {
    if (get_global_id(0) != 0) {
        return;
    }
    const int r = state[0];
    if (r != INT_MAX && r != state[3] && r >= row_offset && r < row_offset + rows) {
        const long label = labels[lab_off + (ulong)(r - row_offset)];
        state[1] = (int)(label & 0xffffffffL);
        state[2] = (int)(label >> 32);
        state[3] = r;
    }
}
