/*
 * fp8.cu - the fp8 teacher head of docs/SPEC.md §6 on cuda / hip: quant_rows (one warp per row:
 * the row's amax, then scale and convert, one pass over the row in HBM) and gemm_e4m3.
 *
 * gemm_e4m3 runs, first that applies:
 *   1. cuBLASLt fp8 (sm_89+): CUDA_R_8F_E4M3 A and B in the "TN" layout (both K-major: Wt's and
 *      xt's quantised rows, row stride ldq, a multiple of 16 bytes), fp32 compute and output; the
 *      per-row scales as CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F vectors, so D = sa sb acc
 *      leaves the GEMM already scaled; the bias by the BIAS epilogue. The logits are written
 *      once and not read again before the row pass.
 *   2. the same without the bias epilogue, then the bias added by a kernel (one more pass);
 *   3. cuBLASLt fp8 with unit scales (a cuBLASLt without outer-vector scaling), then one kernel
 *      applies both scales and the bias (one more pass over the logits);
 *   4. the emulation kernel below (a tiled product of the decoded codes with fp32 accumulation,
 *      scales and bias in its epilogue): GPUs before sm_89, hip, and shapes for which cuBLASLt
 *      has no fp8 kernel (e.g. a vocabulary that is not a multiple of 4: D's leading dimension is
 *      then not 16-byte aligned). Correct everywhere, not fast.
 * The test hook fp8=lt (core/testing/distil_testing.h) refuses step 4 (DISTIL_ERR_UNSUPPORTED
 * naming the reason) so that a benchmark cannot measure the emulation unknowingly; fp8=emulate
 * forces it (tests). Verified
 * on an H200 (docs/GPU-NOTES.md, "fp8 teacher head"): test_cuda_e4m3 over every fp32, the fp8
 * suites with each product, bench/python/fp8_teacher.py.
 * The codes: __nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3) on cuda (the hardware
 * converter on sm_89+), which tests/test_cuda_e4m3.cu checks bit for bit against
 * core/backend_api/math/distil_e4m3.h over every fp32; that header's rounding on hip.
 */
#include "dtype.cuh"
#include "gemm_portable.cuh"
#include "lt_plan.cuh"
#include "reduce.cuh"

#define DE8_FN __device__ __forceinline__
#include "math/distil_e4m3.h"

namespace DISTIL_GPU_NS {

constexpr int QUANT_THREADS = 256;

/* max(|a|, |b|) that keeps a NaN (fmaxf would drop it: the row must become NaN). */
struct reduce_amax {
    __device__ __forceinline__ float operator()(float a, float b) const {
        return (b > a || b != b) ? b : a;
    }
};

__device__ __forceinline__ unsigned char fp8_code(float x, float s) {
    if (s != s) {
        return 0x7f; /* a row with a NaN or an inf: NaN throughout */
    }
#if DISTIL_GPU_HAVE_FP8
    return static_cast<unsigned char>(__nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3));
#else
    return static_cast<unsigned char>(distil_e4m3_quant(x, s));
#endif
}

/* VW codes into q[0..VW): one store (q is aligned to VW bytes). */
template <int VW>
__device__ __forceinline__ void fp8_store_codes(unsigned char *q, const unsigned char (&c)[VW]) {
    if constexpr (VW == 1) {
        q[0] = c[0];
    } else {
        union {
            typename bytes_type<VW>::T w;
            unsigned char e[VW];
        } u;
#pragma unroll
        for (int k = 0; k < VW; k++) {
            u.e[k] = c[k];
        }
        *reinterpret_cast<typename bytes_type<VW>::T *>(q) = u.w;
    }
}

/* One warp per row (QUANT_ROWS rows per block): row r of src (rows, cols), stride src_ld, ->
 * dst (rows, dst_ld) codes and scale[r]. Vectors of VW elements (one 16-byte load each where the
 * host found the rows aligned, else VW = 1); the second pass re-reads the row the warp has just
 * read (from cache), so HBM sees the row once. The padding columns [cols, dst_ld) get 0, so that
 * a product over dst_ld columns equals one over cols. (One block per row with scalar loads ran
 * at 0.95 TB/s on an H200 for Wt (128256, 4096) bf16: docs/GPU-NOTES.md, "fp8 teacher head".) */
constexpr int QUANT_ROWS = QUANT_THREADS / DISTIL_GPU_WARP;

template <int DT, int VW>
__global__ void __launch_bounds__(QUANT_THREADS)
    fp8_quant_kernel(const typename dt_traits<DT>::T *src, int64_t src_ld, int64_t rows,
                     int64_t cols, unsigned char *dst, int64_t dst_ld, float *scale) {
    const int lane = threadIdx.x % DISTIL_GPU_WARP;
    const int64_t row =
        static_cast<int64_t>(blockIdx.x) * QUANT_ROWS + threadIdx.x / DISTIL_GPU_WARP;
    if (row >= rows) { /* the whole warp: no block barrier below */
        return;
    }
    const typename dt_traits<DT>::T *x = src + row * src_ld;
    unsigned char *q = dst + row * dst_ld;
    float m = 0.0f;
#pragma unroll 4
    for (int64_t j = static_cast<int64_t>(lane) * VW; j < cols; j += DISTIL_GPU_WARP * VW) {
        float v[VW];
        vload<DT, VW>(x, j, v);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            m = reduce_amax{}(m, fabsf(v[k]));
        }
    }
    const float s = distil_e4m3_row_scale(warp_reduce(m, reduce_amax{}));
#pragma unroll 4
    for (int64_t j = static_cast<int64_t>(lane) * VW; j < cols; j += DISTIL_GPU_WARP * VW) {
        float v[VW];
        unsigned char c[VW];
        vload<DT, VW>(x, j, v);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            c[k] = fp8_code(v[k], s);
        }
        fp8_store_codes<VW>(q + j, c);
    }
    for (int64_t j = cols + lane; j < dst_ld; j += DISTIL_GPU_WARP) {
        q[j] = 0;
    }
    if (lane == 0) {
        scale[row] = s;
    }
}

/* The emulation: C (m, n) = sa_i sb_j sum_k A[i][k] B[j][k] + bias_j, 16 x 16 tiles. */
constexpr int FP8_TILE = 16;

/* The product's operands as device pointers (distil_gemm_e4m3_args resolved on the host). */
struct fp8_mm {
    const unsigned char *a, *b;
    const float *sa, *sb;
    float *c;
    int64_t m, n, k, lda, ldb, ldc;
};

template <int DT>
__global__ void fp8_gemm_emulate_kernel(fp8_mm g, const typename dt_traits<DT>::T *bias) {
    __shared__ float ta[FP8_TILE][FP8_TILE + 1], tb[FP8_TILE][FP8_TILE + 1];
    const unsigned char *A = g.a, *B = g.b;
    const int64_t i = static_cast<int64_t>(blockIdx.y) * FP8_TILE + threadIdx.y;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * FP8_TILE + threadIdx.x;
    const int64_t jb = static_cast<int64_t>(blockIdx.x) * FP8_TILE + threadIdx.y; /* B's row */
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < g.k; k0 += FP8_TILE) {
        const int64_t k = k0 + threadIdx.x;
        ta[threadIdx.y][threadIdx.x] =
            i < g.m && k < g.k ? distil_e4m3_value(A[i * g.lda + k]) : 0.0f;
        tb[threadIdx.y][threadIdx.x] =
            jb < g.n && k < g.k ? distil_e4m3_value(B[jb * g.ldb + k]) : 0.0f;
        __syncthreads();
        for (int t = 0; t < FP8_TILE; t++) {
            acc += ta[threadIdx.y][t] * tb[threadIdx.x][t]; /* each product exact in fp32 */
        }
        __syncthreads();
    }
    if (i < g.m && j < g.n) {
        const float z = (g.sa[i] * g.sb[j]) * acc;
        g.c[i * g.ldc + j] = bias != nullptr ? z + dt_traits<DT>::to_f(bias[j]) : z;
    }
}

static distil_status fp8_emulate(gpu_state *b, const distil_gemm_e4m3_args *a) {
    const dim3 block(FP8_TILE, FP8_TILE);
    const dim3 grid(static_cast<unsigned>((a->n + FP8_TILE - 1) / FP8_TILE),
                    static_cast<unsigned>((a->m + FP8_TILE - 1) / FP8_TILE));
    const fp8_mm g = {gpu_ptr<const unsigned char>(a->a),
                      gpu_ptr<const unsigned char>(a->b),
                      gpu_ptr<const float>(a->sa),
                      gpu_ptr<const float>(a->sb),
                      gpu_ptr<float>(a->c),
                      a->m,
                      a->n,
                      a->k,
                      a->lda,
                      a->ldb,
                      a->ldc};
    dt_dispatch(a->bias_dtype, [&](auto d) {
        constexpr int DT = decltype(d)::value;
        fp8_gemm_emulate_kernel<DT><<<grid, block, 0, b->lane.stream>>>(
            g, gpu_ptr<const typename dt_traits<DT>::T>(a->bias));
    });
    return gpu_check_launch(b, "gemm_e4m3 (emulation)");
}

#if DISTIL_GPU_HAVE_FP8
/* C (m, n) = (sa_i sb_j) C_ij + bias_j in place: the scales of a unit-scale product (step 3). */
template <int DT>
__global__ void fp8_scale_bias_kernel(float *c, int64_t m, int64_t n, int64_t ldc, const float *sa,
                                      const float *sb, const typename dt_traits<DT>::T *bias) {
    const int64_t total = m * n;
    for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = e / n, j = e % n;
        const float z = (sa[i] * sb[j]) * c[i * ldc + j];
        c[i * ldc + j] = bias != nullptr ? z + dt_traits<DT>::to_f(bias[j]) : z;
    }
}

static distil_status fp8_scale_bias(gpu_state *b, const distil_gemm_e4m3_args *a) {
    const unsigned grid = gpu_grid_for(a->m * a->n, 256, 65535);
    dt_dispatch(a->bias_dtype, [&](auto d) {
        constexpr int DT = decltype(d)::value;
        fp8_scale_bias_kernel<DT><<<grid, 256, 0, b->lane.stream>>>(
            gpu_ptr<float>(a->c), a->m, a->n, a->ldc, gpu_ptr<const float>(a->sa),
            gpu_ptr<const float>(a->sb), gpu_ptr<const typename dt_traits<DT>::T>(a->bias));
    });
    return gpu_check_launch(b, "gemm_e4m3 scales");
}

static cublasStatus_t fp8_attr(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t what,
                               const void *v, size_t n, cublasStatus_t st) {
    return st != CUBLAS_STATUS_SUCCESS ? st : cublasLtMatmulDescSetAttribute(op, what, v, n);
}

/*
 * Column-major view of the row-major C (m, n): D = C^T (n, m), ld ldc, = op(A') op(B') with
 * A' = B's rows (k x n stored K-major: op T) and B' = A's rows (k x m, op N): "TN". The outer
 * vectors: A' has n rows (sb), B' has m columns (sa). K runs over the padded row (lda = ldb,
 * zeros past k: quant_rows), so K is a multiple of 16.
 */
/* What cuBLASLt is asked for: the scales as outer vectors and the bias in the epilogue; the
 * scales only; neither (unit scales: the caller applies them). */
enum fp8_lt_kind { FP8_LT_FULL, FP8_LT_SCALES, FP8_LT_UNIT };

/* cuBLAS 12.9 added outer-vector scales; built against an older one (the wheel's CUDA 12.4
 * library) only the unit-scale form exists, and fp8_scale_bias applies the scales after it. */
#if CUBLAS_VERSION >= 120900
#define DISTIL_FP8_LT_VECTOR_SCALES 1
#else
#define DISTIL_FP8_LT_VECTOR_SCALES 0
#endif

static cublasStatus_t fp8_describe(const gpu_state *b, const distil_gemm_e4m3_args *a,
                                   fp8_lt_kind kind, lt_plan &pl) {
    if (!DISTIL_FP8_LT_VECTOR_SCALES && kind != FP8_LT_UNIT) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool bias = kind == FP8_LT_FULL;
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    const void *bp = distil_dptr_addr(a->bias);
    const int32_t bt = a->bias_dtype == DISTIL_F32    ? CUDA_R_32F
                       : a->bias_dtype == DISTIL_BF16 ? CUDA_R_16BF
                                                      : CUDA_R_16F;
    const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const uint64_t work_bytes = b->lane.blas_work_bytes;
    const int64_t kp = a->lda; /* the padded K */
    cublasStatus_t st = cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t, st);
    st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n, st);
#if DISTIL_FP8_LT_VECTOR_SCALES
    if (kind != FP8_LT_UNIT) {
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        const void *sa = distil_dptr_addr(a->sb), *sb = distil_dptr_addr(a->sa);
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode, st);
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode, st);
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa, st);
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb, st);
    }
#endif
    st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, st);
    if (bias) {
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp, st);
        st = fp8_attr(pl.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt, st);
    }
    st = st ? st : cublasLtMatrixLayoutCreate(&pl.la, CUDA_R_8F_E4M3, kp, a->n, a->ldb);
    st = st ? st : cublasLtMatrixLayoutCreate(&pl.lb, CUDA_R_8F_E4M3, kp, a->m, a->lda);
    st = st ? st : cublasLtMatrixLayoutCreate(&pl.lc, CUDA_R_32F, a->n, a->m, a->ldc);
    st = st ? st : cublasLtMatmulPreferenceCreate(&pl.pref);
    st =
        st ? st
           : cublasLtMatmulPreferenceSetAttribute(pl.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &work_bytes, sizeof work_bytes);
    return st;
}

/* One cuBLASLt attempt; false when it has no kernel for it (nothing was enqueued then). */
static bool fp8_lt(gpu_state *b, const distil_gemm_e4m3_args *a, fp8_lt_kind kind) {
    lt_plan pl;
    if (fp8_describe(b, a, kind, pl) != CUBLAS_STATUS_SUCCESS) {
        return false;
    }
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(b->lt, pl.op, pl.la, pl.lb, pl.lc, pl.lc, pl.pref, 1, &h,
                                       &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1) {
        return false;
    }
    const float one = 1.0f, zero = 0.0f;
    void *c = distil_dptr_addr(a->c);
    return cublasLtMatmul(b->lt, pl.op, &one, distil_dptr_addr(a->b), pl.la, distil_dptr_addr(a->a),
                          pl.lb, &zero, c, pl.lc, c, pl.lc, &h.algo, b->lane.blas_work,
                          b->lane.blas_work_bytes, b->lane.stream) == CUBLAS_STATUS_SUCCESS;
}

/* sm_89+ (Ada, Hopper, Blackwell) has fp8 tensor cores; cuBLASLt's fp8 needs them. */
static bool fp8_device(const gpu_state *b) {
    return b->cc_major > 8 || (b->cc_major == 8 && b->cc_minor >= 9);
}

/* Steps 1, 2 and 3 of the file comment; false: none ran (nothing was enqueued). */
static bool fp8_vendor(gpu_state *b, const distil_gemm_e4m3_args *a, distil_status *s) {
    *s = DISTIL_OK;
    const bool bias = distil_dptr_present(a->bias);
    if (fp8_lt(b, a, bias ? FP8_LT_FULL : FP8_LT_SCALES)) {
        return true;
    }
    if (bias && fp8_lt(b, a, FP8_LT_SCALES)) {
        distil_gemm_args g = {};
        g.m = a->m, g.n = a->n, g.c = a->c, g.ldc = a->ldc, g.c_dtype = DISTIL_F32;
        g.bias = a->bias, g.b_dtype = a->bias_dtype;
        const cudaError_t e = gemm_bias_add_launch(&g, b->lane.stream);
        *s = e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "gemm_e4m3 bias");
        return true;
    }
    if (!fp8_lt(b, a, FP8_LT_UNIT)) {
        return false;
    }
    *s = fp8_scale_bias(b, a);
    return true;
}
#endif

/* The header of a head made once (distil_e4m3_header_args, docs/SPEC.md §6): written, or compared
 * with the call's and a difference recorded in the deferred-error word unless an error is
 * recorded already (synchronize reports it naming teacher_weight_e4m3). One thread of one block:
 * 32 bytes in stream order, no host synchronisation, so a captured graph checks on every replay. */
__global__ void fp8_header_kernel(distil_e4m3_header *head, distil_e4m3_header want, bool write,
                                  gpu_label_error *err) {
    if (write) {
        *head = want;
        return;
    }
    const distil_e4m3_header got = *head;
    const bool ours = got.magic == want.magic && got.layout == want.layout;
    const bool same = ours && got.e4m3_bytes == want.e4m3_bytes && got.reserved == 0 &&
                      got.rows == want.rows && got.cols == want.cols;
    if (same || err->row >= 0) {
        return;
    }
    err->row = 0;
    err->kind = ours ? GPU_ERR_HEAD_SHAPE : GPU_ERR_HEAD_NONE;
    err->head_rows = got.rows;
    err->head_cols = got.cols;
    err->head_eb = got.e4m3_bytes;
    err->want_rows = want.rows;
    err->want_cols = want.cols;
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(e4m3_header)(void *vb, const distil_e4m3_header_args *a) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    fp8_header_kernel<<<1, 1, 0, b->lane.stream>>>(gpu_ptr<distil_e4m3_header>(a->head), a->want,
                                                   a->write, b->label_err);
    return gpu_check_launch(b, a->write ? "e4m3_head_make header" : "teacher_weight_e4m3 header");
}

extern "C" distil_status DISTIL_GPU_FN(quant_rows)(void *vb, const distil_quant_rows_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
    const unsigned grid = static_cast<unsigned>((a->rows + QUANT_ROWS - 1) / QUANT_ROWS);
    dt_dispatch(a->src_dtype, [&](auto d) {
        constexpr int DT = decltype(d)::value;
        typedef typename dt_traits<DT>::T E;
        constexpr int VW = vec16<DT>::N;
        const E *src = gpu_ptr<const E>(a->src);
        unsigned char *dst = gpu_ptr<unsigned char>(a->dst);
        const bool vec = a->cols % VW == 0 && a->src_ld % VW == 0 && gpu_aligned(src, 16) &&
                         gpu_aligned(dst, VW) && a->dst_ld % VW == 0;
        if (vec) {
            fp8_quant_kernel<DT, VW><<<grid, QUANT_THREADS, 0, b->lane.stream>>>(
                src, a->src_ld, a->rows, a->cols, dst, a->dst_ld, gpu_ptr<float>(a->scale));
        } else {
            fp8_quant_kernel<DT, 1><<<grid, QUANT_THREADS, 0, b->lane.stream>>>(
                src, a->src_ld, a->rows, a->cols, dst, a->dst_ld, gpu_ptr<float>(a->scale));
        }
    });
    return gpu_check_launch(b, "quant_rows");
}

extern "C" distil_status DISTIL_GPU_FN(gemm_e4m3)(void *vb, const distil_gemm_e4m3_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->m <= 0 || a->n <= 0) {
        return DISTIL_OK;
    }
    gpu_device_guard guard(b);
#if DISTIL_GPU_HAVE_FP8
    if (b->fp8_mode != DISTIL_HOOK_FP8_EMULATE && fp8_device(b) && !b->portable_gemm) {
        distil_status s;
        if (fp8_vendor(b, a, &s)) {
            return s;
        }
    }
#endif
    if (b->fp8_mode == DISTIL_HOOK_FP8_LT) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: gemm_e4m3: test hook fp8=lt, and cuBLASLt fp8 does not run "
                                "this product (m %lld, n %lld, k %lld, ldc %lld; device sm_%d%d: "
                                "fp8 needs sm_89+)",
                                DISTIL_GPU_NAME, (long long)a->m, (long long)a->n, (long long)a->k,
                                (long long)a->ldc, b->cc_major, b->cc_minor);
    }
    return fp8_emulate(b, a);
}
