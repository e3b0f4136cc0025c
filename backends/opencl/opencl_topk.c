/*
 * opencl_topk.c - topk_rows of the opencl backend (docs/SPEC.md §7, kernels/topk.cl): one
 * work-group per row, which also checks its row's ids (in parallel over the rows; the smallest
 * bad row goes to topk_bad_row), then one work-group that records that row like count_valid
 * records a label. The slots of a row live in local memory: k <= DISTIL_OCL_TOPK_MAX.
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>

#define DISTIL_OCL_TOPK_MAX 512

static distil_status ocl_topk_kernel(distil_ocl *b, const distil_topk_rows_args *a,
                                     const char *name, distil_ocl_kernel *k) {
    char defs[160];
    snprintf(defs, sizeof defs, "-DDTYPE=%s -DSRC_DTYPE=%s -DTDTYPE=%s -DIDS_I64=%d -DTK_MAX=%d",
             distil_ocl_dtype_token(a->g_dtype), distil_ocl_dtype_token(a->x_dtype),
             distil_ocl_dtype_token(a->t.logp_dtype), a->t.ids_i64 ? 1 : 0, DISTIL_OCL_TOPK_MAX);
    return distil_ocl_kernel_get(b, DISTIL_OCL_PROG_TOPK, defs, name, k);
}

static size_t ocl_topk_id_size(const distil_topk_rows_args *a) {
    return a->t.ids_i64 ? sizeof(int64_t) : sizeof(int32_t);
}

/* After the rows: the block's first bad row (topk_bad_row) into the label state. */
static distil_status ocl_topk_commit(distil_ocl *b, const distil_topk_rows_args *a) {
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_topk_kernel(b, a, "distil_topk_commit", &k));
    cl_mem ids = distil_ocl_mem(a->t.ids);
    cl_ulong ids_off = distil_ocl_elems(a->t.ids, ocl_topk_id_size(a));
    cl_long kk = a->t.k, pad = a->t.pad_id, vocab = a->vocab, row0 = a->row0;
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(ids),
        DISTIL_OCL_ARG(ids_off),
        DISTIL_OCL_ARG(kk),
        DISTIL_OCL_ARG(pad),
        DISTIL_OCL_ARG(vocab),
        DISTIL_OCL_ARG(row0),
        DISTIL_OCL_ARG(b->topk_bad_row),
        DISTIL_OCL_ARG(b->label_state),
    };
    DISTIL_TRY(distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), 1, 0));
    b->label_pending = true;
    return DISTIL_OK;
}

/* One work-group per row (kernels/topk.cl distil_topk_rows). */
static distil_status ocl_topk_rows_launch(distil_ocl *b, const distil_topk_rows_args *a) {
    distil_ocl_kernel k;
    DISTIL_TRY(ocl_topk_kernel(b, a, "distil_topk_rows", &k));
    const size_t xes = distil_dtype_size(a->x_dtype), ges = distil_dtype_size(a->g_dtype);
    cl_mem x = distil_ocl_mem(a->x), ids = distil_ocl_mem(a->t.ids);
    cl_mem tlogp = distil_ocl_mem(a->t.logp), soft = distil_ocl_mem(a->soft_rows);
    cl_ulong x_off = distil_ocl_elems(a->x, xes), x_stride = (cl_ulong)a->x_stride;
    cl_ulong ids_off = distil_ocl_elems(a->t.ids, ocl_topk_id_size(a));
    cl_ulong t_off = distil_ocl_elems(a->t.logp, distil_dtype_size(a->t.logp_dtype));
    cl_ulong soft_off = distil_ocl_elems(a->soft_rows, sizeof(float));
    cl_ulong g_stride = (cl_ulong)a->g_stride;
    cl_int logits = a->logits ? 1 : 0, tail = a->t.tail;
    cl_long kk = a->t.k, pad = a->t.pad_id, vocab = a->vocab, ignore = a->ignore_index;
    cl_float8 coef = distil_ocl_coef(a->divergence, a->beta, a->alpha);
    cl_float inv_t = a->inv_temperature, w_hard = a->weight_hard, w_soft = a->weight_soft;
    cl_mem labels, ce, g, n_valid;
    cl_ulong lab_off, ce_off, g_off, n_off;
    cl_int has_labels = distil_ocl_optional(b, a->labels, sizeof(int64_t), &labels, &lab_off);
    cl_int has_ce = distil_ocl_optional(b, a->ce_rows, sizeof(float), &ce, &ce_off);
    cl_int has_g = distil_ocl_optional(b, a->g, ges, &g, &g_off);
    cl_int has_n = distil_ocl_optional(b, a->n_valid, sizeof(float), &n_valid, &n_off);
    const distil_ocl_arg args[] = {
        DISTIL_OCL_ARG(x),        DISTIL_OCL_ARG(x_off),   DISTIL_OCL_ARG(x_stride),
        DISTIL_OCL_ARG(logits),   DISTIL_OCL_ARG(ids),     DISTIL_OCL_ARG(ids_off),
        DISTIL_OCL_ARG(tlogp),    DISTIL_OCL_ARG(t_off),   DISTIL_OCL_ARG(kk),
        DISTIL_OCL_ARG(pad),      DISTIL_OCL_ARG(tail),    DISTIL_OCL_ARG(vocab),
        DISTIL_OCL_ARG(labels),   DISTIL_OCL_ARG(lab_off), DISTIL_OCL_ARG(has_labels),
        DISTIL_OCL_ARG(ignore),   DISTIL_OCL_ARG(coef),    DISTIL_OCL_ARG(inv_t),
        DISTIL_OCL_ARG(w_hard),   DISTIL_OCL_ARG(w_soft),  DISTIL_OCL_ARG(ce),
        DISTIL_OCL_ARG(ce_off),   DISTIL_OCL_ARG(has_ce),  DISTIL_OCL_ARG(soft),
        DISTIL_OCL_ARG(soft_off), DISTIL_OCL_ARG(g),       DISTIL_OCL_ARG(g_off),
        DISTIL_OCL_ARG(g_stride), DISTIL_OCL_ARG(has_g),   DISTIL_OCL_ARG(n_valid),
        DISTIL_OCL_ARG(n_off),    DISTIL_OCL_ARG(has_n),   DISTIL_OCL_ARG(b->topk_bad_row),
    };
    return distil_ocl_launch(b, &k, args, (int)(sizeof args / sizeof args[0]), (size_t)a->rows, 0);
}

distil_status distil_ocl_topk_rows(void *vb, const distil_topk_rows_args *a) {
    distil_ocl *b = vb;
    if (a->t.k > DISTIL_OCL_TOPK_MAX) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "topk: k %lld > %d: the opencl backend holds at most %d teacher "
                                "entries per row",
                                (long long)a->t.k, DISTIL_OCL_TOPK_MAX, DISTIL_OCL_TOPK_MAX);
    }
    if (a->rows <= 0) {
        return DISTIL_OK;
    }
    if (a->rows > INT32_MAX) { /* the bad row is an int (atomic_min) */
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "topk: %lld rows: the opencl backend takes at most 2^31 - 1 rows "
                                "per call",
                                (long long)a->rows);
    }
    DISTIL_TRY(ocl_topk_rows_launch(b, a));
    return ocl_topk_commit(b, a);
}
