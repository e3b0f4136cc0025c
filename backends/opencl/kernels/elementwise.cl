/*
 * elementwise.cl - dtype casts, fills and the GEMM bias (opencl backend; common.cl comes first).
 * SRC_DTYPE and DST_DTYPE are tokens (f32, bf16, f16); conversions round to nearest even.
 * The 1-D kernels are grid-stride loops, so the host may launch fewer work-items than elements.
 */

/* dst[dst_off + i] = src[src_off + i] for i in [0, count). */
__kernel void distil_cast(__global const SRC_T *src, ulong src_off, __global DST_T *dst,
                          ulong dst_off, ulong count) {
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) {
        STORE(DST_DTYPE, dst, dst_off + i, LOAD(SRC_DTYPE, src, src_off + i));
    }
}

/* The same on (rows, cols) with row strides src_ld / dst_ld: one work-group per row at a time. */
__kernel void distil_cast_rows(__global const SRC_T *src, ulong src_off, ulong src_ld,
                               __global DST_T *dst, ulong dst_off, ulong dst_ld, ulong rows,
                               ulong cols) {
    for (ulong r = get_group_id(0); r < rows; r += get_num_groups(0)) {
        for (ulong c = get_local_id(0); c < cols; c += get_local_size(0)) {
            STORE(DST_DTYPE, dst, dst_off + r * dst_ld + c,
                  LOAD(SRC_DTYPE, src, src_off + r * src_ld + c));
        }
    }
}

/* dst[dst_off + i] = value (rounded to DST_DTYPE) for i in [0, count). */
__kernel void distil_fill(__global DST_T *dst, ulong dst_off, ulong count, float value) {
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) {
        STORE(DST_DTYPE, dst, dst_off + i, value);
    }
}

/* x[x_off + i] *= scale[scale_off] for i in [0, count), x of DST_DTYPE; a scale of exactly 1
 * writes nothing (autograd's usual upstream gradient costs no pass). */
__kernel void distil_scale(__global DST_T *x, ulong x_off, ulong count, __global const float *scale,
                           ulong scale_off) {
    const float s = scale[scale_off];
    if (s == 1.0f) {
        return;
    }
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) {
        STORE(DST_DTYPE, x, x_off + i, LOAD(DST_DTYPE, x, x_off + i) * s);
    }
}

/* c (rows, cols) float, row stride ldc: c[r][j] += bias[j], bias (cols) SRC_DTYPE. */
__kernel void distil_bias_add(__global float *c, ulong c_off, ulong ldc, ulong rows, ulong cols,
                              __global const SRC_T *bias, ulong bias_off) {
    for (ulong r = get_group_id(0); r < rows; r += get_num_groups(0)) {
        for (ulong j = get_local_id(0); j < cols; j += get_local_size(0)) {
            c[c_off + r * ldc + j] += LOAD(SRC_DTYPE, bias, bias_off + j);
        }
    }
}
