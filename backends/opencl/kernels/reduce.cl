/*
 * reduce.cl - the device-side normaliser N and the final loss sums (opencl backend; common.cl
 * comes first). Both kernels run as one work-group of WG_SIZE so that the summation order is
 * fixed: work-item i sums elements i, i + WG_SIZE, ... in order, then a tree.
 */

/* The smallest v over the work-group (every work-item gets it). */
long distil_group_min_long(long v, __local long *scratch) {
    const uint lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            scratch[lid] = min(scratch[lid], scratch[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const long m = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

/*
 * n_out[n_off] = max(count, min_one ? 1 : 0) as a float, where count is the number of rows in
 * [0, rows) with labels[lab_off + i] != ignore_index and, when vocab > 0, within [0, vocab).
 * Without labels (has_labels == 0) every row counts.
 * The label check (docs/SPEC.md §5): the first row whose label is neither ignore_index nor in
 * [0, vocab) (vocab > 0) goes to state {row, label, vocab} when state[0] < 0 (nothing recorded
 * since the last synchronize: an earlier call's first error stands, docs/SPEC.md §5).
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_count_valid(__global const long *labels, ulong lab_off, int has_labels, long rows,
                   long ignore_index, long vocab, int min_one, __global float *n_out, ulong n_off,
                   __global long *state) {
    __local uint red[WG_SIZE];
    __local long first[WG_SIZE];
    const int lid = (int)get_local_id(0);
    uint count = 0;
    long bad = LONG_MAX; /* this work-item's first invalid row (its rows ascend) */
    if (has_labels) {
        for (long i = lid; i < rows; i += WG_SIZE) {
            const long l = labels[lab_off + i];
            const bool in_range = vocab <= 0 || (l >= 0 && l < vocab);
            if (l != ignore_index && in_range) {
                count++;
            } else if (l != ignore_index && bad == LONG_MAX) {
                bad = i;
            }
        }
    } else if (lid == 0) {
        count = (uint)rows;
    }
    const uint total = distil_group_sum_uint(count, red);
    const long first_bad = distil_group_min_long(bad, first);
    if (lid == 0) {
        n_out[n_off] = (float)(min_one && total == 0 ? 1u : total);
        if (first_bad != LONG_MAX && state[0] < 0) {
            state[0] = first_bad;
            state[1] = labels[lab_off + (ulong)first_bad];
            state[2] = vocab;
        }
    }
}

/*
 * out[0] = wa * sum(a) / n + wb * sum(b) / n, n = n_valid[n_off] (1 when !has_n), all 0 when
 * n == 0. With parts, out[1] = sum(a) / n and out[2] = sum(b) / n. a, b: (count) float; b is
 * read only when has_b.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_reduce(__global const float *a, ulong a_off, __global const float *b, ulong b_off, int has_b,
              long count, float wa, float wb, __global const float *n_valid, ulong n_off, int has_n,
              int parts, __global float *out, ulong out_off) {
    __local float red[WG_SIZE];
    const int lid = (int)get_local_id(0);
    float pa = 0.0f, pb = 0.0f;
    for (long i = lid; i < count; i += WG_SIZE) {
        pa += a[a_off + i];
        if (has_b) {
            pb += b[b_off + i];
        }
    }
    const float sa = distil_group_sum(pa, red);
    const float sb = has_b ? distil_group_sum(pb, red) : 0.0f;
    if (lid != 0) {
        return;
    }
    const float n = has_n ? n_valid[n_off] : 1.0f;
    const float ra = n > 0.0f ? sa / n : 0.0f; /* n <= 0 or NaN: docs/SPEC.md §6 */
    const float rb = n > 0.0f ? sb / n : 0.0f;
    out[out_off] = has_b ? wa * ra + wb * rb : wa * ra;
    if (parts) {
        out[out_off + 1] = ra;
        out[out_off + 2] = rb;
    }
}
