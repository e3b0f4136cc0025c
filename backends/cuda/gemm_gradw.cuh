/*
 * gemm_gradw.cuh - the fused loss's last weight-gradient GEMM on CUTLASS (gemm_gradw.cu, sm_90a;
 * docs/DESIGN.md "The weight-gradient GEMM"):
 *   d (m, n) bf16 = g^T x + beta c    g (k, m) and x (k, n) bf16, row strides m and n, k >= 1;
 *                                     c (m, n) fp32, read when beta != 0
 * all row-major and dense: the last chunk's grad_Ws, its sum with the fp32 accumulator c rounded to
 * the output in the GEMM's epilogue, so that the fp32 result is never written and no cast pass
 * runs. The cuda backend's fused-cast GEMM (gemm_cast) takes it for distil_gemm_cast_args of that
 * form; without CUTLASS's headers (or on HIP) DISTIL_GPU_HAVE_CUTLASS is 0 and the backend has no
 * epilogue table. The file is compiled for sm_90a alone; the caller checks the device before it
 * launches.
 */
#ifndef DISTIL_GPU_GEMM_GRADW_CUH
#define DISTIL_GPU_GEMM_GRADW_CUH

#include <cuda_runtime.h>

struct gemm_gradw_args {
    const void *g, *x; /* bf16 */
    const float *c;    /* read when beta != 0 */
    void *d;           /* bf16 */
    float beta;
    int m, n, k;
    int device, sm_count;
};

/* Why the kernel does not take these operands (TMA alignment, sizes), NULL when it does. Host
 * only. */
const char *gemm_gradw_why(const gemm_gradw_args &a);

/* Once per context, on its (sm_90) device: the kernel's shared-memory attribute. */
cudaError_t gemm_gradw_setup(void);

/* The product on stream s; *fits false (and nothing launched) when gemm_gradw_why gives a reason.
 */
cudaError_t gemm_gradw_launch(const gemm_gradw_args &a, cudaStream_t s, bool *fits);

#endif /* DISTIL_GPU_GEMM_GRADW_CUH */
