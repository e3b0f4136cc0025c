/*
 * gemm_portable.cu - a plain tiled GEMM for any vendor: C (m, n) = alpha op(A) op(B) + beta C
 * (+ bias), row-major, A and B in f32 / bf16 / f16, accumulation in fp32, C in fp32 or the input
 * dtype. 64 x 64 tiles of C per block of 256 threads (4 x 4 per thread), K in steps of 16 through
 * shared memory as fp32. Correct for every shape and stride; not tuned (the vendor BLAS is).
 */
#include "gemm_portable.cuh"
#include "dtype.cuh"

namespace DISTIL_GPU_NS {

constexpr int PG_BM = 64;
constexpr int PG_BN = 64;
constexpr int PG_BK = 16;
constexpr int PG_THREADS = 256;

struct pg_params {
    const void *a;
    const void *b;
    void *c;
    const void *bias;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    bool trans_a, trans_b;
};

/* op(A)[i][kk]: A is (m, k) row stride lda, or (k, m) when trans_a. Zero outside the matrix. */
template <int DT>
__device__ __forceinline__ float pg_load_a(const pg_params &p, int64_t i, int64_t kk) {
    if (i >= p.m || kk >= p.k) {
        return 0.0f;
    }
    return load1<DT>(p.a, p.trans_a ? kk * p.lda + i : i * p.lda + kk);
}

/* op(B)[kk][j]: B is (k, n) row stride ldb, or (n, k) when trans_b. */
template <int DT>
__device__ __forceinline__ float pg_load_b(const pg_params &p, int64_t kk, int64_t j) {
    if (kk >= p.k || j >= p.n) {
        return 0.0f;
    }
    return load1<DT>(p.b, p.trans_b ? j * p.ldb + kk : kk * p.ldb + j);
}

/* Stage one K-step of the A and B tiles into shared memory (as fp32). */
template <int DT>
__device__ void pg_stage(const pg_params &p, int64_t row0, int64_t col0, int64_t k0,
                         float (&as)[PG_BK][PG_BM + 1], float (&bs)[PG_BK][PG_BN + 1]) {
    for (int t = threadIdx.x; t < PG_BM * PG_BK; t += PG_THREADS) {
        /* Consecutive threads walk the contiguous dimension of A in memory. */
        const int r = p.trans_a ? t % PG_BM : t / PG_BK;
        const int kk = p.trans_a ? t / PG_BM : t % PG_BK;
        as[kk][r] = pg_load_a<DT>(p, row0 + r, k0 + kk);
    }
    for (int t = threadIdx.x; t < PG_BK * PG_BN; t += PG_THREADS) {
        const int kk = p.trans_b ? t % PG_BK : t / PG_BN;
        const int c = p.trans_b ? t / PG_BK : t % PG_BN;
        bs[kk][c] = pg_load_b<DT>(p, k0 + kk, col0 + c);
    }
}

template <int ADT, int CDT>
__global__ void __launch_bounds__(PG_THREADS) distil_gemm_portable_kernel(pg_params p) {
    __shared__ float as[PG_BK][PG_BM + 1];
    __shared__ float bs[PG_BK][PG_BN + 1];
    const int64_t row0 = static_cast<int64_t>(blockIdx.y) * PG_BM;
    const int64_t col0 = static_cast<int64_t>(blockIdx.x) * PG_BN;
    const int tr = threadIdx.x / 16; /* rows tr + 16 * i, columns tc + 16 * j of the tile */
    const int tc = threadIdx.x % 16;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += PG_BK) {
        pg_stage<ADT>(p, row0, col0, k0, as, bs);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < PG_BK; kk++) {
            float av[4];
            float bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                av[i] = as[kk][tr + 16 * i];
                bv[i] = bs[kk][tc + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = row0 + tr + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t c = col0 + tc + 16 * j;
            if (r < p.m && c < p.n) {
                float v = p.alpha * acc[i][j];
                if (p.beta != 0.0f) {
                    v += p.beta * load1<CDT>(p.c, r * p.ldc + c);
                }
                if (p.bias != nullptr) {
                    v += load1<ADT>(p.bias, c);
                }
                store1<CDT>(p.c, r * p.ldc + c, v);
            }
        }
    }
}

/* C[r][c] += bias[c] over the (m, n) block of C. */
template <int BDT, int CDT>
__global__ void distil_bias_add_kernel(void *c, const void *bias, int64_t m, int64_t n,
                                       int64_t ldc) {
    const int64_t total = m * n;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += stride) {
        const int64_t r = t / n;
        const int64_t col = t % n;
        store1<CDT>(c, r * ldc + col, load1<CDT>(c, r * ldc + col) + load1<BDT>(bias, col));
    }
}

static pg_params pg_params_of(const distil_gemm_args *a) {
    pg_params p;
    p.a = distil_dptr_addr(a->a);
    p.b = distil_dptr_addr(a->b);
    p.c = distil_dptr_addr(a->c);
    p.bias = distil_dptr_addr(a->bias);
    p.m = a->m;
    p.n = a->n;
    p.k = a->k;
    p.lda = a->lda;
    p.ldb = a->ldb;
    p.ldc = a->ldc;
    p.alpha = a->alpha;
    p.beta = a->beta;
    p.trans_a = a->trans_a;
    p.trans_b = a->trans_b;
    return p;
}

template <int ADT> static cudaError_t pg_launch(const pg_params &p, bool c_f32, cudaStream_t s) {
    const dim3 grid(static_cast<unsigned>((p.n + PG_BN - 1) / PG_BN),
                    static_cast<unsigned>((p.m + PG_BM - 1) / PG_BM));
    if (c_f32) {
        distil_gemm_portable_kernel<ADT, DISTIL_F32><<<grid, PG_THREADS, 0, s>>>(p);
    } else {
        distil_gemm_portable_kernel<ADT, ADT><<<grid, PG_THREADS, 0, s>>>(p);
    }
    return cudaGetLastError();
}

cudaError_t gemm_portable_launch(const distil_gemm_args *a, cudaStream_t s) {
    if ((a->m + PG_BM - 1) / PG_BM > 65535 || (a->n + PG_BN - 1) / PG_BN > 0x7fffffff) {
        return cudaErrorInvalidValue;
    }
    const pg_params p = pg_params_of(a);
    const bool c_f32 = a->c_dtype == DISTIL_F32; /* (F32 inputs: C is F32 either way) */
    return dt_dispatch(a->b_dtype,
                       [&](auto d) { return pg_launch<decltype(d)::value>(p, c_f32, s); });
}

template <int BDT> static cudaError_t bias_launch(const distil_gemm_args *a, cudaStream_t s) {
    const unsigned grid = gpu_grid_for(a->m * a->n, 256, 65536);
    void *c = distil_dptr_addr(a->c);
    const void *bias = distil_dptr_addr(a->bias);
    switch (a->c_dtype) {
    case DISTIL_F32:
        distil_bias_add_kernel<BDT, DISTIL_F32><<<grid, 256, 0, s>>>(c, bias, a->m, a->n, a->ldc);
        break;
    default:
        distil_bias_add_kernel<BDT, BDT><<<grid, 256, 0, s>>>(c, bias, a->m, a->n, a->ldc);
        break;
    }
    return cudaGetLastError();
}

cudaError_t gemm_bias_add_launch(const distil_gemm_args *a, cudaStream_t s) {
    return dt_dispatch(a->b_dtype, [&](auto d) { return bias_launch<decltype(d)::value>(a, s); });
}

} // namespace DISTIL_GPU_NS
