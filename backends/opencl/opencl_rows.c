/*
 * opencl_rows.c - launchers of the row kernels div_rows (div_rows.cl) and fused_rows
 * (fused_rows.cl) of the opencl backend: one work-group per row. Absent optional buffers are passed
 * as the backend's label-state buffer with a has_* flag of 0, so kernels never see a NULL cl_mem.
 */
#include "opencl_internal.h"

#include "error.h"
#include "math/distil_elem_beta.h"

#include <stdio.h>

/* The constants of the divergence (beta, alpha) for the kernels' distil_coef_of (div_rows.cl),
 * rounded once from float64. */
cl_float8 distil_ocl_coef(distil_divergence divergence, float beta, float alpha) {
    distil_elem_beta k = distil_elem_div_make(divergence, beta, alpha);
    cl_float8 c = {{(cl_float)k.beta, (cl_float)k.omb, (cl_float)k.lb, (cl_float)k.l1b,
                    (cl_float)k.c, (cl_float)k.mode, (cl_float)k.kd, 0.0f}};
    return c;
}

/* An optional operand: its buffer and element offset, or the dummy buffer and 0. */
cl_int distil_ocl_optional(distil_ocl *b, distil_dptr p, size_t elem, cl_mem *mem, cl_ulong *off) {
    const bool present = distil_dptr_present(p);
    *mem = present ? distil_ocl_mem(p) : b->label_state;
    *off = present ? distil_ocl_elems(p, elem) : 0;
    return present ? 1 : 0;
}

distil_status distil_ocl_div_rows(void *vb, const distil_div_rows_args *a) {
    distil_ocl *b = vb;
    char defs[64];
    snprintf(defs, sizeof defs, "-DDTYPE=%s", distil_ocl_dtype_token(a->dtype));
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_ROWS, defs, "distil_div_rows", &k));
    const size_t es = distil_dtype_size(a->dtype);
    cl_mem x = distil_ocl_mem(a->x), y = distil_ocl_mem(a->y);
    cl_mem loss = distil_ocl_mem(a->row_loss);
    cl_ulong x_off = distil_ocl_elems(a->x, es), y_off = distil_ocl_elems(a->y, es);
    cl_ulong loss_off = distil_ocl_elems(a->row_loss, sizeof(float));
    cl_ulong x_stride = (cl_ulong)a->x_stride, y_stride = (cl_ulong)a->y_stride;
    cl_ulong grad_stride = (cl_ulong)a->grad_stride;
    cl_long vocab = a->vocab, ignore = a->ignore_index;
    cl_float8 coef = distil_ocl_coef(a->divergence, a->beta, a->alpha);
    cl_float grad_scale = a->grad_scale;
    cl_mem labels, grad, n_valid;
    cl_ulong lab_off, grad_off, n_off;
    cl_int has_labels = distil_ocl_optional(b, a->labels, sizeof(int64_t), &labels, &lab_off);
    cl_int has_grad = distil_ocl_optional(b, a->grad, es, &grad, &grad_off);
    cl_int has_n = distil_ocl_optional(b, a->n_valid, sizeof(float), &n_valid, &n_off);
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(x),          DISTIL_OCL_ARG(x_off),       DISTIL_OCL_ARG(x_stride),
        DISTIL_OCL_ARG(y),          DISTIL_OCL_ARG(y_off),       DISTIL_OCL_ARG(y_stride),
        DISTIL_OCL_ARG(vocab),      DISTIL_OCL_ARG(coef),        DISTIL_OCL_ARG(labels),
        DISTIL_OCL_ARG(lab_off),    DISTIL_OCL_ARG(has_labels),  DISTIL_OCL_ARG(ignore),
        DISTIL_OCL_ARG(loss),       DISTIL_OCL_ARG(loss_off),    DISTIL_OCL_ARG(grad),
        DISTIL_OCL_ARG(grad_off),   DISTIL_OCL_ARG(grad_stride), DISTIL_OCL_ARG(has_grad),
        DISTIL_OCL_ARG(grad_scale), DISTIL_OCL_ARG(n_valid),     DISTIL_OCL_ARG(n_off),
        DISTIL_OCL_ARG(has_n),
    };
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), (size_t)a->rows, 0);
}

distil_status distil_ocl_fused_rows(void *vb, const distil_fused_rows_args *a) {
    distil_ocl *b = vb;
    char defs[64];
    snprintf(defs, sizeof defs, "-DDTYPE=%s", distil_ocl_dtype_token(a->g_dtype));
    distil_ocl_kernel k;
    DISTIL_TRY(distil_ocl_kernel_get(b, DISTIL_OCL_PROG_ROWS, defs, "distil_fused_rows", &k));
    cl_mem zs = distil_ocl_mem(a->zs), zt = distil_ocl_mem(a->zt);
    cl_mem labels = distil_ocl_mem(a->labels);
    cl_mem ce = distil_ocl_mem(a->ce_rows), soft = distil_ocl_mem(a->soft_rows);
    cl_ulong zs_off = distil_ocl_elems(a->zs, sizeof(float));
    cl_ulong zt_off = distil_ocl_elems(a->zt, sizeof(float));
    cl_ulong lab_off = distil_ocl_elems(a->labels, sizeof(int64_t));
    cl_ulong ce_off = distil_ocl_elems(a->ce_rows, sizeof(float));
    cl_ulong soft_off = distil_ocl_elems(a->soft_rows, sizeof(float));
    cl_long vocab = a->vocab, ignore = a->ignore_index;
    cl_float8 coef = distil_ocl_coef(a->divergence, a->beta, a->alpha);
    cl_float inv_t = a->inv_temperature;
    cl_float w_hard = a->weight_hard, w_soft = a->weight_soft;
    cl_mem g, n_valid;
    cl_ulong g_off, n_off;
    cl_int has_g = distil_ocl_optional(b, a->g, distil_dtype_size(a->g_dtype), &g, &g_off);
    cl_int has_n = distil_ocl_optional(b, a->n_valid, sizeof(float), &n_valid, &n_off);
    /* docs/SPEC.md §6 head options */
    cl_float inv_tt = a->inv_teacher_temperature;
    cl_mem dz;
    cl_ulong dz_off;
    cl_int has_dz = distil_ocl_optional(b, a->dz, sizeof(float), &dz, &dz_off);
    cl_mem ent;
    cl_ulong ent_off;
    cl_int has_h = distil_ocl_optional(b, a->entropy, sizeof(float), &ent, &ent_off);
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(zs),       DISTIL_OCL_ARG(zs_off),  DISTIL_OCL_ARG(zt),
        DISTIL_OCL_ARG(zt_off),   DISTIL_OCL_ARG(vocab),   DISTIL_OCL_ARG(labels),
        DISTIL_OCL_ARG(lab_off),  DISTIL_OCL_ARG(ignore),  DISTIL_OCL_ARG(coef),
        DISTIL_OCL_ARG(inv_t),    DISTIL_OCL_ARG(w_hard),  DISTIL_OCL_ARG(w_soft),
        DISTIL_OCL_ARG(ce),       DISTIL_OCL_ARG(ce_off),  DISTIL_OCL_ARG(soft),
        DISTIL_OCL_ARG(soft_off), DISTIL_OCL_ARG(g),       DISTIL_OCL_ARG(g_off),
        DISTIL_OCL_ARG(has_g),    DISTIL_OCL_ARG(n_valid), DISTIL_OCL_ARG(n_off),
        DISTIL_OCL_ARG(has_n),    DISTIL_OCL_ARG(inv_tt),  DISTIL_OCL_ARG(dz),
        DISTIL_OCL_ARG(dz_off),   DISTIL_OCL_ARG(has_dz),  DISTIL_OCL_ARG(ent),
        DISTIL_OCL_ARG(ent_off),  DISTIL_OCL_ARG(has_h),
    };
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), (size_t)a->rows, 0);
}

distil_status distil_ocl_head_rows(void *vb, const distil_head_rows_args *a) {
    distil_ocl *b = vb;
    distil_ocl_kernel k;
    DISTIL_TRY(
        distil_ocl_kernel_get(b, DISTIL_OCL_PROG_ROWS, "-DDTYPE=f32", "distil_head_rows", &k));
    cl_mem z = distil_ocl_mem(a->z);
    cl_ulong z_off = distil_ocl_elems(a->z, sizeof(float));
    cl_long vocab = a->vocab;
    cl_int transform = a->transform;
    cl_float scale = a->scale, cap = a->cap;
    cl_mem lse;
    cl_ulong lse_off;
    cl_int has_lse = distil_ocl_optional(b, a->lse, sizeof(float), &lse, &lse_off);
    cl_mem dz;
    cl_ulong dz_off;
    cl_int has_dz = distil_ocl_optional(b, a->dz, sizeof(float), &dz, &dz_off);
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(z),         DISTIL_OCL_ARG(z_off),   DISTIL_OCL_ARG(vocab),
        DISTIL_OCL_ARG(transform), DISTIL_OCL_ARG(scale),   DISTIL_OCL_ARG(cap),
        DISTIL_OCL_ARG(lse),       DISTIL_OCL_ARG(lse_off), DISTIL_OCL_ARG(has_lse),
        DISTIL_OCL_ARG(dz),        DISTIL_OCL_ARG(dz_off),  DISTIL_OCL_ARG(has_dz),
    };
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), (size_t)a->rows, 0);
}
