/*
 * opencl_ops.c - launchers of the small kernels of the opencl backend: count_valid (also the
 * label check) and reduce
 * (reduce.cl, one work-group each, fixed order), cast, fill and the GEMM helpers cast_rows and
 * bias_add (elementwise.cl, grid-stride loops).
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>

#define OCL_NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

distil_status distil_ocl_count_valid(void *vb, const distil_count_args *a) {
    distil_ocl *b = vb;
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_REDUCE, "", "distil_count_valid", &k));
    const bool present = distil_dptr_present(a->labels);
    cl_mem labels = present ? distil_ocl_mem(a->labels) : b->label_state;
    cl_ulong lab_off = present ? distil_ocl_elems(a->labels, sizeof(int64_t)) : 0;
    cl_int has_labels = present ? 1 : 0, min_one = a->min_one ? 1 : 0;
    cl_long rows = a->rows, ignore = a->ignore_index, vocab = a->vocab;
    cl_mem n_out = distil_ocl_mem(a->n_out);
    cl_ulong n_off = distil_ocl_elems(a->n_out, sizeof(float));
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(labels),         DISTIL_OCL_ARG(lab_off), DISTIL_OCL_ARG(has_labels),
        DISTIL_OCL_ARG(rows),           DISTIL_OCL_ARG(ignore),  DISTIL_OCL_ARG(vocab),
        DISTIL_OCL_ARG(min_one),        DISTIL_OCL_ARG(n_out),   DISTIL_OCL_ARG(n_off),
        DISTIL_OCL_ARG(b->label_state),
    };
    DISTIL_TRY(distil_ocl_launch(b, &k, args, OCL_NARGS(args), 1, 0));
    if (present && a->vocab > 0) { /* the label check ran: synchronize reads its state */
        b->label_pending = true;
    }
    return DISTIL_OK;
}

distil_status distil_ocl_reduce(void *vb, const distil_reduce_args *a) {
    distil_ocl *b = vb;
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_REDUCE, "", "distil_reduce", &k));
    cl_mem am = distil_ocl_mem(a->a), out = distil_ocl_mem(a->out);
    cl_ulong a_off = distil_ocl_elems(a->a, sizeof(float));
    cl_ulong out_off = distil_ocl_elems(a->out, sizeof(float));
    const bool has_b_ = distil_dptr_present(a->b), has_n_ = distil_dptr_present(a->n_valid);
    cl_mem bm = has_b_ ? distil_ocl_mem(a->b) : b->label_state;
    cl_ulong b_off = has_b_ ? distil_ocl_elems(a->b, sizeof(float)) : 0;
    cl_mem n_valid = has_n_ ? distil_ocl_mem(a->n_valid) : b->label_state;
    cl_ulong n_off = has_n_ ? distil_ocl_elems(a->n_valid, sizeof(float)) : 0;
    cl_int has_b = has_b_, has_n = has_n_, parts = a->parts;
    cl_long count = a->count;
    cl_float wa = a->wa, wb = a->wb;
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(am),    DISTIL_OCL_ARG(a_off),   DISTIL_OCL_ARG(bm),
        DISTIL_OCL_ARG(b_off), DISTIL_OCL_ARG(has_b),   DISTIL_OCL_ARG(count),
        DISTIL_OCL_ARG(wa),    DISTIL_OCL_ARG(wb),      DISTIL_OCL_ARG(n_valid),
        DISTIL_OCL_ARG(n_off), DISTIL_OCL_ARG(has_n),   DISTIL_OCL_ARG(parts),
        DISTIL_OCL_ARG(out),   DISTIL_OCL_ARG(out_off),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), 1, 0);
}

/* An elementwise.cl kernel for (src, dst) dtypes. */
static distil_status ocl_elementwise(distil_ocl *b, distil_dtype src, distil_dtype dst,
                                     const char *name, distil_ocl_kernel *k) {
    char defs[96];
    snprintf(defs, sizeof defs, "-DSRC_DTYPE=%s -DDST_DTYPE=%s", distil_ocl_dtype_token(src),
             distil_ocl_dtype_token(dst));
    return distil_ocl_kernel_get(b, DISTIL_OCL_PROG_ELEMENTWISE, defs, name, k);
}

distil_status distil_ocl_cast(void *vb, const distil_cast_args *a) {
    distil_ocl *b = vb;
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_elementwise(b, a->src_dtype, a->dst_dtype, "distil_cast", &k));
    cl_mem src = distil_ocl_mem(a->src), dst = distil_ocl_mem(a->dst);
    cl_ulong src_off = distil_ocl_elems(a->src, distil_dtype_size(a->src_dtype));
    cl_ulong dst_off = distil_ocl_elems(a->dst, distil_dtype_size(a->dst_dtype));
    cl_ulong count = (cl_ulong)a->count;
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(src),     DISTIL_OCL_ARG(src_off), DISTIL_OCL_ARG(dst),
        DISTIL_OCL_ARG(dst_off), DISTIL_OCL_ARG(count),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), distil_ocl_groups(count, k.local[0]), 0);
}

distil_status distil_ocl_fill(void *vb, const distil_fill_args *a) {
    distil_ocl *b = vb;
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    /* SRC f32 so that fill shares its program with the f32 -> dtype output casts. */
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_elementwise(b, DISTIL_F32, a->dtype, "distil_fill", &k));
    cl_mem dst = distil_ocl_mem(a->dst);
    cl_ulong dst_off = distil_ocl_elems(a->dst, distil_dtype_size(a->dtype));
    cl_ulong count = (cl_ulong)a->count;
    cl_float value = a->value;
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(dst),
        DISTIL_OCL_ARG(dst_off),
        DISTIL_OCL_ARG(count),
        DISTIL_OCL_ARG(value),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), distil_ocl_groups(count, k.local[0]), 0);
}

distil_status distil_ocl_scale(void *vb, const distil_scale_args *a) {
    distil_ocl *b = vb;
    if (a->count <= 0) {
        return DISTIL_OK;
    }
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_elementwise(b, DISTIL_F32, a->dtype, "distil_scale", &k));
    cl_mem x = distil_ocl_mem(a->x);
    cl_ulong x_off = distil_ocl_elems(a->x, distil_dtype_size(a->dtype));
    cl_ulong count = (cl_ulong)a->count;
    cl_mem scale = distil_ocl_mem(a->scale);
    cl_ulong scale_off = distil_ocl_elems(a->scale, sizeof(float));
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(x),     DISTIL_OCL_ARG(x_off),     DISTIL_OCL_ARG(count),
        DISTIL_OCL_ARG(scale), DISTIL_OCL_ARG(scale_off),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), distil_ocl_groups(count, k.local[0]), 0);
}

distil_status distil_ocl_cast_rows(distil_ocl *b, cl_mem src, cl_ulong src_off, cl_ulong src_ld,
                                   distil_dtype src_dtype, cl_mem dst, cl_ulong dst_off,
                                   cl_ulong dst_ld, distil_dtype dst_dtype, cl_ulong rows,
                                   cl_ulong cols) {
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_elementwise(b, src_dtype, dst_dtype, "distil_cast_rows", &k));
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(src),  DISTIL_OCL_ARG(src_off), DISTIL_OCL_ARG(src_ld),
        DISTIL_OCL_ARG(dst),  DISTIL_OCL_ARG(dst_off), DISTIL_OCL_ARG(dst_ld),
        DISTIL_OCL_ARG(rows), DISTIL_OCL_ARG(cols),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), distil_ocl_groups(rows, 1), 0);
}

distil_status distil_ocl_bias_add(distil_ocl *b, cl_mem c, cl_ulong c_off, cl_ulong ldc,
                                  cl_ulong rows, cl_ulong cols, distil_dptr bias,
                                  distil_dtype bias_dtype) {
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_elementwise(b, bias_dtype, DISTIL_F32, "distil_bias_add", &k));
    cl_mem bm = distil_ocl_mem(bias);
    cl_ulong bias_off = distil_ocl_elems(bias, distil_dtype_size(bias_dtype));
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(c),    DISTIL_OCL_ARG(c_off), DISTIL_OCL_ARG(ldc),      DISTIL_OCL_ARG(rows),
        DISTIL_OCL_ARG(cols), DISTIL_OCL_ARG(bm),    DISTIL_OCL_ARG(bias_off),
    };
    return distil_ocl_launch(b, &k, args, OCL_NARGS(args), distil_ocl_groups(rows, 1), 0);
}
