/*
 * lt_plan.cuh - the descriptors of one cuBLASLt product (operation, three layouts, preference),
 * destroyed together when the plan leaves scope: the exact GEMM (gemm.cu) and the fp8 teacher
 * head's product (fp8.cu) both describe theirs in one.
 */
#ifndef DISTIL_GPU_LT_PLAN_CUH
#define DISTIL_GPU_LT_PLAN_CUH

#include "vendor.h"

#if DISTIL_GPU_HAVE_BLASLT
namespace DISTIL_GPU_NS {

struct lt_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~lt_plan() {
        if (pref) {
            cublasLtMatmulPreferenceDestroy(pref);
        }
        if (lc) {
            cublasLtMatrixLayoutDestroy(lc);
        }
        if (lb) {
            cublasLtMatrixLayoutDestroy(lb);
        }
        if (la) {
            cublasLtMatrixLayoutDestroy(la);
        }
        if (op) {
            cublasLtMatmulDescDestroy(op);
        }
    }
};

} // namespace DISTIL_GPU_NS
#endif

#endif /* DISTIL_GPU_LT_PLAN_CUH */
