/*
 * gemm.cl - fallback fp32 GEMM for builds without CLBlast (opencl backend; common.cl comes
 * first). A plain local-memory tiled kernel: correct everywhere, not fast.
 *
 * C (m, n) = alpha * op(A) op(B) + beta * C, row-major, fp32, element offsets and row strides:
 *   op(A) (m, k): A is (m, k) with row stride lda, or (k, m) when trans_a
 *   op(B) (k, n): B is (k, n) with row stride ldb, or (n, k) when trans_b
 * beta == 0 does not read C (it may hold NaN). Accumulation order along k is fixed.
 * Work-group (GEMM_TILE, GEMM_TILE); dimension 0 walks the columns of C, dimension 1 its rows.
 */

#ifndef GEMM_TILE
#define GEMM_TILE 16
#endif

__kernel __attribute__((reqd_work_group_size(GEMM_TILE, GEMM_TILE, 1))) void
distil_gemm(int trans_a, int trans_b, long m, long n, long k, float alpha, __global const float *a,
            ulong a_off, long lda, __global const float *b, ulong b_off, long ldb, float beta,
            __global float *c, ulong c_off, long ldc) {
    /* +1 column avoids local-memory bank conflicts on the transposed reads. */
    __local float ta[GEMM_TILE][GEMM_TILE + 1];
    __local float tb[GEMM_TILE][GEMM_TILE + 1];
    const int li = (int)get_local_id(1);
    const int lj = (int)get_local_id(0);
    const long row = (long)get_group_id(1) * GEMM_TILE + li;
    const long col = (long)get_group_id(0) * GEMM_TILE + lj;
    float acc = 0.0f;
    for (long t = 0; t < k; t += GEMM_TILE) {
        const long ak = t + lj; /* A element (row, ak) */
        const long bk = t + li; /* B element (bk, col) */
        float av = 0.0f;
        float bv = 0.0f;
        if (row < m && ak < k) {
            av = trans_a ? a[a_off + ak * lda + row] : a[a_off + row * lda + ak];
        }
        if (bk < k && col < n) {
            bv = trans_b ? b[b_off + col * ldb + bk] : b[b_off + bk * ldb + col];
        }
        ta[li][lj] = av;
        tb[li][lj] = bv;
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int kk = 0; kk < GEMM_TILE; kk++) {
            acc = fma(ta[li][kk], tb[kk][lj], acc);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < m && col < n) {
        const ulong idx = c_off + (ulong)(row * ldc + col);
        c[idx] = beta == 0.0f ? alpha * acc : alpha * acc + beta * c[idx];
    }
}
