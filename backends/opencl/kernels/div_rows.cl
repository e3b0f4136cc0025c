/*
 * div_rows.cl - docs/SPEC.md §1 and §6 on a block of rows: per-row divergence (the JSD or any
 * other of distil_divergence) and its gradient with respect to the student, in one pass over each
 * row (opencl backend; common.cl comes first). Inputs are log-probs, so no max or log-sum-exp is
 * needed. One work-group per row; all math in float whatever DTYPE is.
 */

/* The constants of one beta as the host packs them (distil_ocl_coef: beta, 1 - beta, log beta,
 * log1p(-beta), their difference, the mode, |1 - 2 beta|, one unused). */
de_coef distil_coef_of(float8 c) {
    de_coef k;
    k.beta = c.s0;
    k.omb = c.s1;
    k.lb = c.s2;
    k.l1b = c.s3;
    k.c = c.s4;
    k.mode = (int)c.s5;
    k.kd = c.s6;
    return k;
}

/*
 * x, y       (rows, vocab) DTYPE, row strides x_stride / y_stride, at element offsets x_off,
 *            y_off: student and teacher log-probs
 * coef       the constants of beta (distil_coef_of)
 * labels     (rows) long at lab_off, read when has_labels: label == ignore_index ignores the row
 * row_loss   (rows) float at loss_off: sum over the row of the element term, 0 when ignored
 * grad       (rows, vocab) DTYPE, row stride grad_stride, written when has_grad:
 *            grad_scale / n * de/dx with n = n_valid[n_off] (1 when !has_n); 0 when n == 0 or the
 *            row is ignored. grad may be x itself (in place): each work-item reads x[j] before it
 *            writes grad[j], and no other work-item touches j.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_div_rows(__global const T *x, ulong x_off, ulong x_stride, __global const T *y, ulong y_off,
                ulong y_stride, long vocab, float8 coef, __global const long *labels, ulong lab_off,
                int has_labels, long ignore_index, __global float *row_loss, ulong loss_off,
                __global T *grad, ulong grad_off, ulong grad_stride, int has_grad, float grad_scale,
                __global const float *n_valid, ulong n_off, int has_n) {
    __local distil_acc red[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global const T *xr = x + x_off + row * x_stride;
    __global const T *yr = y + y_off + row * y_stride;
    __global T *gr = grad + grad_off + row * grad_stride;

    if (has_labels && labels[lab_off + row] == ignore_index) {
        /* Uniform over the work-group, so returning before the reduction is safe. */
        if (has_grad) {
            for (long j = lid; j < vocab; j += WG_SIZE) {
                STORE(DTYPE, gr, j, 0.0f);
            }
        }
        if (lid == 0) {
            row_loss[loss_off + row] = 0.0f;
        }
        return;
    }
    /* n == 0 when every row is ignored, n <= 0 or NaN from a normaliser given on the device
     * (docs/SPEC.md §6): the gradient is 0 then rather than 0 / 0. */
    const float n = has_n ? n_valid[n_off] : 1.0f;
    const float scale = n > 0.0f ? grad_scale / n : 0.0f;
    const de_coef kc = distil_coef_of(coef);

    distil_acc acc = 0.0f;
    for (long base = 0; base < vocab; base += WG_SIZE * VEC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const long j = base + k * WG_SIZE + lid;
            if (j < vocab) {
                float dx, q;
                acc += de_elem(kc.mode, &kc, LOAD(DTYPE, xr, j), LOAD(DTYPE, yr, j), &dx, &q);
                if (has_grad) {
                    STORE(DTYPE, gr, j, scale * dx);
                }
            }
        }
    }
    const distil_acc total = distil_group_sum_acc(acc, red);
    if (lid == 0) {
        row_loss[loss_off + row] = (float)total;
    }
}
