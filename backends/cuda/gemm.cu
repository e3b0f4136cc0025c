/*
 * gemm.cu - distil_gemm_args on the vendor BLAS: row-major C (m, n) = alpha op(A) op(B) + beta C
 * is the column-major C^T (n, m) = op(B)^T op(A)^T, so B goes first and the shapes swap.
 * fp32 accumulation always (CUBLAS_COMPUTE_32F, no TF32). A bias is fused with cuBLASLt's bias
 * epilogue when the library accepts it, else added by a small kernel after the product.
 * The portable kernel (gemm_portable.cu) serves when there is no vendor BLAS or when the test hook
 * gemm=portable asks for it (core/testing/distil_testing.h). The epilogue table's GEMMs: the
 * statistics GEMM runs gemm_stats.cu's kernel (only where stats_ok said yes); the fused-cast GEMM,
 * gemm_gradw.cu's (only where cast_ok said yes: the fused loss's last grad_Ws GEMM).
 */
#include "gemm_portable.cuh"
#include "div_rows.cuh" /* DIV_SPAN_MAX_VOCAB: the loss-only row pass */
#include "lt_plan.cuh"

#if DISTIL_GPU_HAVE_CUTLASS
#include "gemm_gradw.cuh"
#include "gemm_stats.cuh"
#endif

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_BLAS
static cudaDataType_t gemm_type(distil_dtype d) {
    return d == DISTIL_F32 ? CUDA_R_32F : (d == DISTIL_BF16 ? CUDA_R_16BF : CUDA_R_16F);
}

static distil_status gemm_blas_fail(gpu_state *b, cublasStatus_t st, const char *what) {
    const distil_status s =
        st == CUBLAS_STATUS_ALLOC_FAILED ? DISTIL_ERR_OUT_OF_MEMORY : DISTIL_ERR_BACKEND;
    return distil_error_set(b->ctx, s, "%s: gemm: %s: %s", DISTIL_GPU_NAME, what,
                            cublasGetStatusString(st));
}

static distil_status gemm_blas(gpu_state *b, const distil_gemm_args *a) {
    const cublasOperation_t op_b = a->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = a->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t ab = gemm_type(a->b_dtype);
    const cublasStatus_t st = cublasGemmEx(
        b->lane.blas, op_b, op_a, static_cast<int>(a->n), static_cast<int>(a->m),
        static_cast<int>(a->k), &a->alpha, distil_dptr_addr(a->b), ab, static_cast<int>(a->ldb),
        distil_dptr_addr(a->a), ab, static_cast<int>(a->lda), &a->beta, distil_dptr_addr(a->c),
        gemm_type(a->c_dtype), static_cast<int>(a->ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        return gemm_blas_fail(b, st, "cublasGemmEx");
    }
    return DISTIL_OK;
}
#endif

#if DISTIL_GPU_HAVE_BLAS || DISTIL_GPU_HAVE_CUTLASS
/* The sizes and strides fit the int arguments of cuBLAS and CUTLASS. */
static bool gemm_fits_int(const distil_gemm_args *a) {
    const int64_t lim = 0x7fffffff;
    return a->m <= lim && a->n <= lim && a->k <= lim && a->lda <= lim && a->ldb <= lim &&
           a->ldc <= lim;
}
#endif

#if DISTIL_GPU_HAVE_BLASLT
/* Column-major view: first operand op(B^T) (n, k), second op(A^T) (k, m), D = C^T (n, m). */
static cublasStatus_t lt_describe(const gpu_state *b, const distil_gemm_args *a, lt_plan &pl) {
    const cudaDataType_t ab = gemm_type(a->b_dtype);
    const cublasOperation_t op_b = a->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = a->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const void *bias = distil_dptr_addr(a->bias);
    const int32_t bias_type = ab;
    const uint64_t work_bytes = b->lane.blas_work_bytes;
    cublasStatus_t st = cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    st =
        st ? st
           : cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b);
    st =
        st ? st
           : cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a);
    st =
        st ? st
           : cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    st = st ? st
            : cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof bias);
    st = st ? st
            : cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                             sizeof bias_type);
    st = st ? st
            : cublasLtMatrixLayoutCreate(&pl.la, ab, a->trans_b ? a->k : a->n,
                                         a->trans_b ? a->n : a->k, a->ldb);
    st = st ? st
            : cublasLtMatrixLayoutCreate(&pl.lb, ab, a->trans_a ? a->m : a->k,
                                         a->trans_a ? a->k : a->m, a->lda);
    st = st ? st : cublasLtMatrixLayoutCreate(&pl.lc, gemm_type(a->c_dtype), a->n, a->m, a->ldc);
    st = st ? st : cublasLtMatmulPreferenceCreate(&pl.pref);
    st =
        st ? st
           : cublasLtMatmulPreferenceSetAttribute(pl.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &work_bytes, sizeof work_bytes);
    return st;
}

/* The product with the bias fused; false when cuBLASLt has no kernel for it (then the caller
 * adds the bias itself). */
static bool gemm_lt_bias(gpu_state *b, const distil_gemm_args *a) {
    lt_plan pl;
    if (lt_describe(b, a, pl) != CUBLAS_STATUS_SUCCESS) {
        return false;
    }
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(b->lt, pl.op, pl.la, pl.lb, pl.lc, pl.lc, pl.pref, 1, &h,
                                       &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1) {
        return false;
    }
    void *c = distil_dptr_addr(a->c);
    return cublasLtMatmul(b->lt, pl.op, &a->alpha, distil_dptr_addr(a->b), pl.la,
                          distil_dptr_addr(a->a), pl.lb, &a->beta, c, pl.lc, c, pl.lc, &h.algo,
                          b->lane.blas_work, b->lane.blas_work_bytes,
                          b->lane.stream) == CUBLAS_STATUS_SUCCESS;
}
#endif

#if DISTIL_GPU_HAVE_CUTLASS
/* The kernel's arguments for the statistics GEMM a (gemm_stats.cuh). */
static gemm_stats_args gemm_stats_of(const gpu_state *b, const distil_gemm_stats_args *a) {
    gemm_stats_args g;
    g.x = distil_dptr_addr(a->gemm.a);
    g.w = distil_dptr_addr(a->gemm.b);
    g.z = static_cast<float *>(distil_dptr_addr(a->gemm.c));
    g.m = static_cast<int>(a->gemm.m);
    g.n = static_cast<int>(a->gemm.n);
    g.k = static_cast<int>(a->gemm.k);
    g.pmax = static_cast<float *>(distil_dptr_addr(a->max));
    g.ps1 = static_cast<float *>(distil_dptr_addr(a->s1));
    g.c1 = a->c1;
    g.device = b->device;
    g.sm_count = b->sm_count;
    return g;
}

/* Whether this context's kernel computes shapes of m x n x k (int arguments, the planes' int
 * offsets) in dtype: bf16, on an sm_90 device (the kernel is sm_90a code). */
static bool gemm_stats_size(const gpu_state *b, int64_t m, int64_t n, int64_t k,
                            distil_dtype dtype) {
    const int64_t lim = 0x7fffffff;
    return gpu_stats_device(b) && dtype == DISTIL_BF16 && m <= lim && n <= lim && k <= lim &&
           m * ((n + GEMM_STATS_COLS - 1) / GEMM_STATS_COLS) <= lim;
}

/* What the kernel computes: z (m, n) fp32 dense = x W^T, no bias, bf16 operands with row strides
 * k. */
static bool gemm_stats_form(const gpu_state *b, const distil_gemm_args *a) {
    return gemm_stats_size(b, a->m, a->n, a->k, a->a_dtype) && !a->trans_a && a->trans_b &&
           a->b_dtype == a->a_dtype && a->c_dtype == DISTIL_F32 && a->alpha == 1.0f &&
           a->beta == 0.0f && !distil_dptr_present(a->bias) && a->lda == a->k && a->ldb == a->k &&
           a->ldc == a->n && gemm_fits_int(a);
}
#endif

#if DISTIL_GPU_HAVE_CUTLASS
/* Whether a has gemm_gradw.cu's form (gemm_gradw.cuh): d (m, n) bf16 = A^T B + beta C, A (k, m)
 * and B (k, n) bf16 and dense, C (m, n) fp32 given, k >= 1, alpha 1, no bias. */
static bool gemm_gradw_form(const distil_gemm_cast_args *c) {
    const distil_gemm_args *a = &c->gemm;
    return distil_dptr_present(c->d) && c->d_dtype == DISTIL_BF16 && a->trans_a && !a->trans_b &&
           a->a_dtype == DISTIL_BF16 && a->b_dtype == DISTIL_BF16 && a->c_dtype == DISTIL_F32 &&
           distil_dptr_present(a->c) && a->k >= 1 && a->alpha == 1.0f &&
           !distil_dptr_present(a->bias) && a->lda == a->m && a->ldb == a->n && a->ldc == a->n &&
           gemm_fits_int(a);
}

/* The kernel's arguments for a GEMM of gemm_gradw_form. */
static gemm_gradw_args gemm_gradw_of(const gpu_state *b, const distil_gemm_cast_args *c) {
    const distil_gemm_args *a = &c->gemm;
    gemm_gradw_args g;
    g.g = distil_dptr_addr(a->a);
    g.x = distil_dptr_addr(a->b);
    g.c = static_cast<const float *>(distil_dptr_addr(a->c));
    g.d = distil_dptr_addr(c->d);
    g.beta = a->beta;
    g.m = static_cast<int>(a->m);
    g.n = static_cast<int>(a->n);
    g.k = static_cast<int>(a->k);
    g.device = b->device;
    g.sm_count = b->sm_count;
    return g;
}

/* Why the kernel refused a (asked after the refusal, for the message). */
static const char *gemm_gradw_refusal(const gpu_state *b, const distil_gemm_cast_args *a) {
    if (!gpu_gradw_device(b)) {
        return "the kernel is off on this device (its setup failed)";
    }
    if (!gemm_gradw_form(a)) {
        return "not bf16 operands into an fp32 accumulator and a bf16 output, dense, k >= 1";
    }
    const char *why = gemm_gradw_why(gemm_gradw_of(b, a));
    return why != nullptr ? why : "the kernel refused its operands";
}

#endif

static distil_status gemm_portable(gpu_state *b, const distil_gemm_args *a) {
    const cudaError_t e = gemm_portable_launch(a, b->lane.stream);
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "gemm (portable)");
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(gemm)(void *vb, const distil_gemm_args *a) {
    gpu_state *b = gpu_of(vb);
    if (a->m <= 0 || a->n <= 0) {
        return DISTIL_OK;
    }
    if (a->a_dtype != a->b_dtype) { /* fp32_gemm is not set: the core never asks */
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: gemm of operands of two dtypes", DISTIL_GPU_NAME);
    }
    gpu_device_guard guard(b);
#if DISTIL_GPU_HAVE_BLAS
    if (!b->portable_gemm && gemm_fits_int(a)) {
        const bool bias = distil_dptr_present(a->bias);
#if DISTIL_GPU_HAVE_BLASLT
        if (bias && gemm_lt_bias(b, a)) {
            return DISTIL_OK;
        }
#endif
        DISTIL_TRY(gemm_blas(b, a));
        if (!bias) {
            return DISTIL_OK;
        }
        const cudaError_t e = gemm_bias_add_launch(a, b->lane.stream);
        return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "gemm bias");
    }
#endif
    return gemm_portable(b, a);
}

#if DISTIL_GPU_HAVE_CUTLASS
/* The statistics are taken by the loss-only row pass (fused_rows.cu); the resident kernel of the
 * gradient pass finds its own. The operands' alignment is stats_ok's question. */
extern "C" bool DISTIL_GPU_FN(stats_fit)(void *vb, const distil_gemm_stats_shape *s) {
    const gpu_state *b = gpu_of(vb);
    if (s->grads || s->n > DIV_SPAN_MAX_VOCAB || !gemm_stats_size(b, s->m, s->n, s->k, s->dtype)) {
        return false;
    }
    gemm_stats_args g = {}; /* no operands yet: the kernel's sizes alone */
    g.m = static_cast<int>(s->m);
    g.n = static_cast<int>(s->n);
    g.k = static_cast<int>(s->k);
    g.c1 = 1.0f;
    g.device = b->device;
    g.sm_count = b->sm_count;
    return gemm_stats_fits(g);
}

extern "C" bool DISTIL_GPU_FN(stats_ok)(void *vb, const distil_gemm_stats_args *a) {
    const gpu_state *b = gpu_of(vb);
    return gemm_stats_form(b, &a->gemm) && gemm_stats_fits(gemm_stats_of(b, a));
}

/* The core asked stats_ok first: a refusal here is the core's error. */
extern "C" distil_status DISTIL_GPU_FN(gemm_stats)(void *vb, const distil_gemm_stats_args *a) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    bool fits = false;
    cudaError_t e = cudaSuccess;
    if (gemm_stats_form(b, &a->gemm)) {
        e = gemm_stats_launch(gemm_stats_of(b, a), b->lane.stream, &fits);
    }
    if (!fits) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                                "%s: gemm_stats: a GEMM that stats_ok refuses", DISTIL_GPU_NAME);
    }
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "gemm (row statistics)");
}

/* Under the test hook gradw=require the form alone answers, so that a GEMM the kernel does not fit
 * fails in gemm_cast instead of passing on the core's cast (the tests that prove the path ran). */
extern "C" bool DISTIL_GPU_FN(cast_ok)(void *vb, const distil_gemm_cast_args *a) {
    const gpu_state *b = gpu_of(vb);
    return gpu_gradw_device(b) && gemm_gradw_form(a) &&
           (b->gradw_require || gemm_gradw_why(gemm_gradw_of(b, a)) == nullptr);
}

/* The fused-cast GEMM on gemm_gradw.cu. The core asked cast_ok first: a refusal here is the
 * core's error, or under gradw=require a GEMM the kernel does not fit, and the message says which
 * check failed (asked only then: the launch itself checks the fit once). */
extern "C" distil_status DISTIL_GPU_FN(gemm_cast)(void *vb, const distil_gemm_cast_args *a) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    bool fits = false;
    cudaError_t e = cudaSuccess;
    if (gpu_gradw_device(b) && gemm_gradw_form(a)) {
        e = gemm_gradw_launch(gemm_gradw_of(b, a), b->lane.stream, &fits);
    }
    if (!fits) {
        return distil_error_set(
            b->ctx, DISTIL_ERR_BACKEND,
            "%s: gemm_cast: %sthe last grad_Ws GEMM (m %lld, n %lld, k %lld) "
            "with its own output: %s",
            DISTIL_GPU_NAME, b->gradw_require ? "test hook gradw=require: " : "",
            static_cast<long long>(a->gemm.m), static_cast<long long>(a->gemm.n),
            static_cast<long long>(a->gemm.k), gemm_gradw_refusal(b, a));
    }
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, "gemm (last grad_Ws GEMM)");
}
#endif
