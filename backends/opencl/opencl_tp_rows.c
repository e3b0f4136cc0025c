/*
 * opencl_tp_rows.c - the launcher of tp_rows (kernels/tp.cl, docs/SPEC.md §8): one work-group per
 * row, the phase an argument. The row statistics are double: a device without cl_khr_fp64 gets
 * DISTIL_ERR_UNSUPPORTED.
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ocl_has_fp64(distil_ocl *b) {
    size_t n = 0;
    if (clGetDeviceInfo(b->device, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) {
        return false;
    }
    char *ext = malloc(n + 1);
    bool yes = ext && clGetDeviceInfo(b->device, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS;
    if (yes) {
        ext[n] = '\0';
        yes = strstr(ext, "cl_khr_fp64") != NULL;
    }
    free(ext);
    return yes;
}

distil_status distil_ocl_tp_rows(void *vb, const distil_tp_rows_args *a) {
    distil_ocl *b = vb;
    if (!ocl_has_fp64(b)) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "fused_linear_jsd_tp: the OpenCL device has no cl_khr_fp64 (the "
                                "row statistics are double)");
    }
    char defs[64];
    snprintf(defs, sizeof defs, "-DDTYPE=%s", distil_ocl_dtype_token(a->g_dtype));
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_TP, defs, "distil_tp_rows", &k));
    cl_int phase = (cl_int)a->phase;
    cl_mem zs = distil_ocl_mem(a->zs), zt = distil_ocl_mem(a->zt);
    cl_mem labels = distil_ocl_mem(a->labels), stats = distil_ocl_mem(a->stat_max);
    cl_mem ce = distil_ocl_mem(a->ce_rows), soft = distil_ocl_mem(a->soft_rows);
    cl_ulong zs_off = distil_ocl_elems(a->zs, sizeof(float));
    cl_ulong zt_off = distil_ocl_elems(a->zt, sizeof(float));
    cl_ulong lab_off = distil_ocl_elems(a->labels, sizeof(int64_t));
    /* The three statistics blocks are one workspace region (core/fused_pass_tp.c): one cl_mem. */
    cl_ulong smax_off = distil_ocl_elems(a->stat_max, sizeof(double));
    cl_ulong ssum_off = distil_ocl_elems(a->stat_sum, sizeof(double));
    cl_ulong sterm_off = distil_ocl_elems(a->stat_terms, sizeof(double));
    cl_ulong ce_off = distil_ocl_elems(a->ce_rows, sizeof(float));
    cl_ulong soft_off = distil_ocl_elems(a->soft_rows, sizeof(float));
    cl_long vocab = a->vocab, v0 = a->vocab_offset, total = a->vocab_total;
    cl_long ignore = a->ignore_index;
    cl_float8 coef = distil_ocl_coef(a->divergence, a->beta, a->alpha);
    cl_float inv_t = a->inv_temperature, w_hard = a->weight_hard, w_soft = a->weight_soft;
    const bool has_g_now = a->phase == DISTIL_TP_FINISH && distil_dptr_present(a->g);
    cl_mem g = has_g_now ? distil_ocl_mem(a->g) : b->label_state;
    cl_ulong g_off = has_g_now ? distil_ocl_elems(a->g, distil_dtype_size(a->g_dtype)) : 0;
    cl_int has_g = has_g_now ? 1 : 0;
    const bool has_n_now = distil_dptr_present(a->n_valid);
    cl_mem n_valid = has_n_now ? distil_ocl_mem(a->n_valid) : b->label_state;
    cl_ulong n_off = has_n_now ? distil_ocl_elems(a->n_valid, sizeof(float)) : 0;
    cl_int has_n = has_n_now ? 1 : 0;
    if (a->phase != DISTIL_TP_FINISH) { /* ce and soft are not written: any buffer will do */
        ce = soft = stats;
        ce_off = soft_off = 0;
    }
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(phase),     DISTIL_OCL_ARG(zs),       DISTIL_OCL_ARG(zs_off),
        DISTIL_OCL_ARG(zt),        DISTIL_OCL_ARG(zt_off),   DISTIL_OCL_ARG(vocab),
        DISTIL_OCL_ARG(v0),        DISTIL_OCL_ARG(total),    DISTIL_OCL_ARG(labels),
        DISTIL_OCL_ARG(lab_off),   DISTIL_OCL_ARG(ignore),   DISTIL_OCL_ARG(coef),
        DISTIL_OCL_ARG(inv_t),     DISTIL_OCL_ARG(w_hard),   DISTIL_OCL_ARG(w_soft),
        DISTIL_OCL_ARG(stats),     DISTIL_OCL_ARG(smax_off), DISTIL_OCL_ARG(ssum_off),
        DISTIL_OCL_ARG(sterm_off), DISTIL_OCL_ARG(ce),       DISTIL_OCL_ARG(ce_off),
        DISTIL_OCL_ARG(soft),      DISTIL_OCL_ARG(soft_off), DISTIL_OCL_ARG(g),
        DISTIL_OCL_ARG(g_off),     DISTIL_OCL_ARG(has_g),    DISTIL_OCL_ARG(n_valid),
        DISTIL_OCL_ARG(n_off),     DISTIL_OCL_ARG(has_n),
    };
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), (size_t)a->rows, 0);
}
