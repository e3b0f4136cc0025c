/*
 * gemm_stats.cuh - the logits GEMM that also writes each row's statistics (gemm_stats.cu, a CUTLASS
 * 3 kernel for sm_90a; docs/DESIGN.md "Row statistics from the logits GEMM"):
 *   z (m, n) fp32, row stride n = x (m, k) W^T (W (n, k), both bf16, row strides k), no bias
 * and, per row r and tile t of GEMM_STATS_COLS columns, m-major (element t m + r):
 *   pmax = max of the tile's z,  ps1 = sum 2^((z - pmax) c1)
 * The cuda backend's gemm takes it for distil_gemm_args with stats; without CUTLASS's
 * headers (or on HIP) DISTIL_GPU_HAVE_CUTLASS is 0 and gemm never writes statistics. The file is
 * compiled for sm_90a alone; the caller checks the device before it launches.
 */
#ifndef DISTIL_GPU_GEMM_STATS_CUH
#define DISTIL_GPU_GEMM_STATS_CUH

#include <cuda_runtime.h>

#include <stdint.h>

/* Columns per tile of the statistics (the kernel's N tile). */
constexpr int GEMM_STATS_COLS = 128;

struct gemm_stats_args {
    const void *x, *w; /* bf16 */
    float *z;
    int m, n, k;
    float *pmax, *ps1; /* (ceil(n / GEMM_STATS_COLS), m) each */
    float c1;
    int device, sm_count;
};

/* Whether the kernel takes these operands (alignment of the TMA copies, sizes). Host only. */
bool gemm_stats_fits(const gemm_stats_args &a);

/* Once per context, on its (sm_90) device: the kernel's shared-memory attribute. */
cudaError_t gemm_stats_setup(void);

/* The product and the statistics on stream s; *fits false (and nothing launched) when the kernel
 * does not take these operands (gemm_stats_fits). */
cudaError_t gemm_stats_launch(const gemm_stats_args &a, cudaStream_t s, bool *fits);

#endif /* DISTIL_GPU_GEMM_STATS_CUH */
