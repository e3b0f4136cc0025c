/*
 * opencl_gemm.c - GEMM of the opencl backend: C = alpha op(A) op(B) + beta C (+ bias), row-major.
 * The product always runs in fp32 (CLBlastSgemm, or gemm.cl without CLBlast): bf16/fp16
 * operands are converted to fp32 scratch first, because CLBlastHgemm would accumulate in half and
 * the logits must be fp32. A C in bf16/fp16 goes through fp32 scratch and is cast at the end.
 */
#include "opencl_internal.h"

#include "error.h"

#ifdef DISTIL_OPENCL_HAVE_CLBLAST
#include <clblast_c.h>
#endif

/* CLBlast caches compiled programs per cl_context for the life of the process, and each entry
 * keeps its context alive (about 3 MB on PoCL). It has no per-context eviction, so every
 * destroyed distil context clears the whole cache: otherwise create/destroy cycles next to one
 * long-lived context grow without bound (200 cycles: +600 MB). The price is that other live
 * contexts recompile CLBlast's kernels on their next product. Entries are copies of reference-
 * counted programs, so a product running on another thread keeps its program. */
void distil_ocl_gemm_detach(void) {
#ifdef DISTIL_OPENCL_HAVE_CLBLAST
    CLBlastClearCache();
#endif
}

/* An fp32 matrix as OpenCL sees it: buffer, element offset, row stride. */
typedef struct ocl_mat {
    cl_mem mem;
    cl_ulong off;
    cl_ulong ld;
} ocl_mat;

/* The stored operand (rows, cols) with row stride ld, as fp32: itself, or a dense copy. */
static distil_status ocl_operand_f32(distil_ocl *b, distil_dptr p, int64_t ld, int64_t rows,
                                     int64_t cols, distil_dtype dtype, int slot, ocl_mat *out) {
    if (dtype == DISTIL_F32) {
        *out = (ocl_mat){distil_ocl_mem(p), distil_ocl_elems(p, sizeof(float)), (cl_ulong)ld};
        return DISTIL_OK;
    }
    cl_mem s = NULL;
    DISTIL_TRY(distil_ocl_scratch_get(b, slot, (size_t)rows * (size_t)cols * sizeof(float), &s));
    DISTIL_TRY(distil_ocl_cast_rows(
        b, distil_ocl_mem(p), distil_ocl_elems(p, distil_dtype_size(dtype)), (cl_ulong)ld, dtype, s,
        0, (cl_ulong)cols, DISTIL_F32, (cl_ulong)rows, (cl_ulong)cols));
    *out = (ocl_mat){s, 0, (cl_ulong)cols};
    return DISTIL_OK;
}

#ifdef DISTIL_OPENCL_HAVE_CLBLAST

static distil_status ocl_clblast_fail(distil_ocl *b, CLBlastStatusCode st) {
    if (st == CLBlastTempBufferAllocFailure || st == CLBlastOpenCLOutOfResources ||
        st == CLBlastOpenCLOutOfHostMemory) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "opencl: CLBlastSgemm ran out of memory (status %d)", (int)st);
    }
    if (st > -1024) { /* the OpenCL range */
        return distil_ocl_fail(b, (cl_int)st, "CLBlastSgemm");
    }
    return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                            "opencl: CLBlastSgemm failed with CLBlast status %d (see "
                            "clblast_c.h)",
                            (int)st);
}

static distil_status ocl_sgemm(distil_ocl *b, const distil_gemm_args *a, const ocl_mat *A,
                               const ocl_mat *B, const ocl_mat *C) {
    CLBlastStatusCode st = CLBlastSgemm(
        CLBlastLayoutRowMajor, a->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
        a->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)a->m, (size_t)a->n,
        (size_t)a->k, a->alpha, A->mem, (size_t)A->off, (size_t)A->ld, B->mem, (size_t)B->off,
        (size_t)B->ld, a->beta, C->mem, (size_t)C->off, (size_t)C->ld, &b->queue, NULL);
    return st == CLBlastSuccess ? DISTIL_OK : ocl_clblast_fail(b, st);
}

#else /* gemm.cl */

static distil_status ocl_sgemm(distil_ocl *b, const distil_gemm_args *a, const ocl_mat *A,
                               const ocl_mat *B, const ocl_mat *C) {
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_GEMM, "", "distil_gemm", &k));
    cl_int ta = a->trans_a, tb = a->trans_b;
    cl_long m = a->m, n = a->n, kk = a->k;
    cl_long lda = (cl_long)A->ld, ldb = (cl_long)B->ld, ldc = (cl_long)C->ld;
    cl_float alpha = a->alpha, beta = a->beta;
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(ta),     DISTIL_OCL_ARG(tb),     DISTIL_OCL_ARG(m),
        DISTIL_OCL_ARG(n),      DISTIL_OCL_ARG(kk),     DISTIL_OCL_ARG(alpha),
        DISTIL_OCL_ARG(A->mem), DISTIL_OCL_ARG(A->off), DISTIL_OCL_ARG(lda),
        DISTIL_OCL_ARG(B->mem), DISTIL_OCL_ARG(B->off), DISTIL_OCL_ARG(ldb),
        DISTIL_OCL_ARG(beta),   DISTIL_OCL_ARG(C->mem), DISTIL_OCL_ARG(C->off),
        DISTIL_OCL_ARG(ldc),
    };
    const size_t gx = ((size_t)a->n + k.local[0] - 1) / k.local[0];
    const size_t gy = ((size_t)a->m + k.local[1] - 1) / k.local[1];
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), gx, gy);
}

#endif

distil_status distil_ocl_gemm(void *vb, const distil_gemm_args *a) {
    distil_ocl *b = vb;
    if (a->m <= 0 || a->n <= 0) {
        return DISTIL_OK;
    }
    if (a->k <= 0) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED, "opencl: gemm with k = 0");
    }
    ocl_mat A, B, C;
    DISTIL_TRY(ocl_operand_f32(b, a->a, a->lda, a->trans_a ? a->k : a->m, a->trans_a ? a->m : a->k,
                               a->a_dtype, DISTIL_OCL_SCRATCH_A, &A));
    DISTIL_TRY(ocl_operand_f32(b, a->b, a->ldb, a->trans_b ? a->n : a->k, a->trans_b ? a->k : a->n,
                               a->b_dtype, DISTIL_OCL_SCRATCH_B, &B));
    const bool c_f32 = a->c_dtype == DISTIL_F32;
    if (c_f32) {
        C = (ocl_mat){distil_ocl_mem(a->c), distil_ocl_elems(a->c, sizeof(float)),
                      (cl_ulong)a->ldc};
    } else if (a->beta != 0.0f) { /* C is read: bring it to fp32 */
        DISTIL_TRY(
            ocl_operand_f32(b, a->c, a->ldc, a->m, a->n, a->c_dtype, DISTIL_OCL_SCRATCH_C, &C));
    } else {
        cl_mem s = NULL;
        DISTIL_TRY(distil_ocl_scratch_get(b, DISTIL_OCL_SCRATCH_C,
                                          (size_t)a->m * (size_t)a->n * sizeof(float), &s));
        C = (ocl_mat){s, 0, (cl_ulong)a->n};
    }
    DISTIL_TRY(ocl_sgemm(b, a, &A, &B, &C));
    if (distil_dptr_present(a->bias)) {
        DISTIL_TRY(distil_ocl_bias_add(b, C.mem, C.off, C.ld, (cl_ulong)a->m, (cl_ulong)a->n,
                                       a->bias, a->b_dtype));
    }
    if (!c_f32) {
        DISTIL_TRY(distil_ocl_cast_rows(b, C.mem, C.off, C.ld, DISTIL_F32, distil_ocl_mem(a->c),
                                        distil_ocl_elems(a->c, distil_dtype_size(a->c_dtype)),
                                        (cl_ulong)a->ldc, a->c_dtype, (cl_ulong)a->m,
                                        (cl_ulong)a->n));
    }
    return DISTIL_OK;
}
