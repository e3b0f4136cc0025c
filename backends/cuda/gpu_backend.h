/*
 * gpu_backend.h - the operations of the cuda / hip backend as plain C declarations, so that the
 * vtable (backend_table.c, C11) can list them. The same sources build both backends; the name
 * prefix keeps the two sets of symbols apart when one library holds both.
 */
#ifndef DISTIL_GPU_BACKEND_H
#define DISTIL_GPU_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef DISTIL_USE_HIP
#define DISTIL_GPU_FN(name) distil_hip_##name
#else
#define DISTIL_GPU_FN(name) distil_cuda_##name
#endif

distil_status DISTIL_GPU_FN(probe)(int *n_devices);
distil_status DISTIL_GPU_FN(create)(distil_ctx *ctx, int device, void **b);
void DISTIL_GPU_FN(destroy)(void *b);
void DISTIL_GPU_FN(describe)(void *b, char *buf, size_t n);
distil_status DISTIL_GPU_FN(set_stream)(void *b, void *stream);
distil_status DISTIL_GPU_FN(synchronize)(void *b);

distil_status DISTIL_GPU_FN(mem_alloc)(void *b, size_t bytes, void **ptr);
void DISTIL_GPU_FN(mem_free)(void *b, void *ptr);
distil_status DISTIL_GPU_FN(mem_upload)(void *b, distil_dptr dst, const void *src, size_t bytes);
distil_status DISTIL_GPU_FN(mem_download)(void *b, void *dst, distil_dptr src, size_t bytes);
distil_status DISTIL_GPU_FN(check_pointer)(void *b, const void *p, const char *what);

distil_status DISTIL_GPU_FN(gemm)(void *b, const distil_gemm_args *a);
distil_status DISTIL_GPU_FN(count_valid)(void *b, const distil_count_args *a);
distil_status DISTIL_GPU_FN(div_rows)(void *b, const distil_div_rows_args *a);
distil_status DISTIL_GPU_FN(fused_rows)(void *b, const distil_fused_rows_args *a);
distil_status DISTIL_GPU_FN(reduce)(void *b, const distil_reduce_args *a);
distil_status DISTIL_GPU_FN(cast)(void *b, const distil_cast_args *a);
distil_status DISTIL_GPU_FN(fill)(void *b, const distil_fill_args *a);
distil_status DISTIL_GPU_FN(scale)(void *b, const distil_scale_args *a);
/* docs/SPEC.md §6 head options (head_rows.cu) */
distil_status DISTIL_GPU_FN(head_rows)(void *b, const distil_head_rows_args *a);
distil_status DISTIL_GPU_FN(side_begin)(void *b, bool *opened);
distil_status DISTIL_GPU_FN(side_end)(void *b);
distil_status DISTIL_GPU_FN(side_join)(void *b);
distil_status DISTIL_GPU_FN(topk_rows)(void *b, const distil_topk_rows_args *a);
/* docs/SPEC.md §8 (tp_rows.cu) */
distil_status DISTIL_GPU_FN(tp_rows)(void *b, const distil_tp_rows_args *a);
void *DISTIL_GPU_FN(native_stream)(void *b);
/* docs/SPEC.md §6 fp8 teacher head (fp8.cu) */
distil_status DISTIL_GPU_FN(quant_rows)(void *b, const distil_quant_rows_args *a);
distil_status DISTIL_GPU_FN(gemm_e4m3)(void *b, const distil_gemm_e4m3_args *a);
distil_status DISTIL_GPU_FN(e4m3_header)(void *b, const distil_e4m3_header_args *a);
/* the epilogue table, cuda with CUTLASS only: the statistics GEMM (gemm.cu, gemm_stats.cu) and
 * the fused-cast GEMM (gemm.cu, gemm_gradw.cu) */
bool DISTIL_GPU_FN(stats_fit)(void *b, const distil_gemm_stats_shape *s);
bool DISTIL_GPU_FN(stats_ok)(void *b, const distil_gemm_stats_args *a);
distil_status DISTIL_GPU_FN(gemm_stats)(void *b, const distil_gemm_stats_args *a);
bool DISTIL_GPU_FN(cast_ok)(void *b, const distil_gemm_cast_args *a);
distil_status DISTIL_GPU_FN(gemm_cast)(void *b, const distil_gemm_cast_args *a);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_GPU_BACKEND_H */
