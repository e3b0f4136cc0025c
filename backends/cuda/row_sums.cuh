/*
 * row_sums.cuh - the double row sums of exponentials that every cuda / hip row pass takes
 * (fused_rows.cuh and its resident and tensor-parallel kernels, topk_rows.cu), one vector of a
 * thread's elements at a time.
 */
#ifndef DISTIL_GPU_ROW_SUMS_CUH
#define DISTIL_GPU_ROW_SUMS_CUH

#include "vendor.h"

namespace DISTIL_GPU_NS {

/* acc += sum_k ex((v[k] - r) c) over one vector, ex an exponential (base 2 in the
 * dense row passes, e in the top-k pass). The VW terms are summed in fp32 and
 * the vector's sum added to the double acc, except in a vector that holds r itself (has_r: a few
 * vectors per row): its own term is 2^0 = 1, beside which fp32 keeps only 2^-24 of the small
 * terms, and at a peaky row those are all of LSE - max (the CE gradient s - 1 at a confident
 * label, x at the row's mode); there each term goes to the double sum on its own, as in the
 * careful evaluation and on cpu (the fp32 vector sum gave 10x the careful error on an H200,
 * docs/GPU-NOTES.md "Fused row pass"). Every row pass's exp sums go through here (fused_rows.cuh,
 * the resident and tensor-parallel kernels, topk_rows.cu). */
template <int VW, typename E>
__device__ __forceinline__ void row_add_exps(double &acc, const float (&v)[VW], float r, float c,
                                             bool has_r, E ex) {
    if (has_r) {
#pragma unroll
        for (int k = 0; k < VW; k++) {
            acc += static_cast<double>(ex((v[k] - r) * c));
        }
        return;
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VW; k++) {
        s += ex((v[k] - r) * c);
    }
    acc += s;
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_ROW_SUMS_CUH */
