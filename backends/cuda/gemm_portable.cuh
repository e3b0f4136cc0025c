/*
 * gemm_portable.cuh - the vendor-free GEMM of the backend (gemm_portable.cu): used on HIP when
 * hipBLAS is absent, and on CUDA with the test hook gemm=portable (so the parity suite tests it on
 * NVIDIA). Also the bias epilogue used when the BLAS library cannot fuse the bias.
 */
#ifndef DISTIL_GPU_GEMM_PORTABLE_CUH
#define DISTIL_GPU_GEMM_PORTABLE_CUH

#include "gpu_state.cuh"

namespace DISTIL_GPU_NS {

/* The whole of distil_gemm_args (row-major, trans flags, alpha, beta, bias), fp32 accumulation. */
cudaError_t gemm_portable_launch(const distil_gemm_args *a, cudaStream_t s);

/* C (m, n) row stride ldc, dtype c_dtype, += bias (n) of dtype bias_dtype on every row. */
cudaError_t gemm_bias_add_launch(const distil_gemm_args *a, cudaStream_t s);

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_GEMM_PORTABLE_CUH */
