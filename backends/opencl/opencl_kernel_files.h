/*
 * opencl_kernel_files.h - the one list of the opencl backend's kernel sources: X(name, NAME, path)
 * for each, in the order of distil_ocl_src (opencl_internal.h), with its path relative to
 * kernels/ (the element terms come from core/backend_api/math/distil_elem.h, shared with every
 * backend, and their modes from distil_div_list.h beside it, which comes first). The C code expands
 * it into the enum, the file names and the embedded texts (opencl_sources.c), and
 * backends/opencl/CMakeLists.txt reads the same lines to embed the files, so a new source is named
 * here only (one X(...) per line, as CMake reads them).
 */
#ifndef DISTIL_OPENCL_KERNEL_FILES_H
#define DISTIL_OPENCL_KERNEL_FILES_H

#define DISTIL_OCL_KERNEL_FILES(X)                                                                 \
    X(common, COMMON, "common.cl")                                                                 \
    X(div_list, DIV_LIST, "../../../core/backend_api/math/distil_div_list.h")                      \
    X(elem, ELEM, "../../../core/backend_api/math/distil_elem.h")                                  \
    X(div_rows, DIV_ROWS, "div_rows.cl")                                                           \
    X(fused_rows, FUSED_ROWS, "fused_rows.cl")                                                     \
    X(reduce, REDUCE, "reduce.cl")                                                                 \
    X(elementwise, ELEMENTWISE, "elementwise.cl")                                                  \
    X(gemm, GEMM, "gemm.cl")                                                                       \
    X(topk_math, TOPK_MATH, "../../../core/backend_api/math/distil_topk.h")                        \
    X(topk, TOPK, "topk.cl")                                                                       \
    X(head_math, HEAD_MATH, "../../../core/backend_api/math/distil_head.h")                        \
    X(head, HEAD, "head.cl")                                                                       \
    X(tp, TP, "tp.cl")

#endif
