/* ref_jsd.c - distil_jsd in float64 (docs/SPEC.md §1), the whole call at once. */
#include "ref.h"

#include <stdlib.h>

static bool distil_ref_row_valid(const int64_t *labels, int64_t i, int64_t ignore_index) {
    return labels == NULL || labels[i] != ignore_index;
}

/* Row i of a strided (dtype) matrix, widened to double. */
static void distil_ref_load_row(const void *base, distil_dtype dt, int64_t stride, int64_t i,
                                int64_t n, double *out) {
    for (int64_t v = 0; v < n; v++) {
        out[v] = distil_ref_load(base, dt, i * stride + v);
    }
}

distil_status distil_ref_jsd(void *b, const distil_jsd_args *a) {
    distil_ref_state *st = b;
    const int64_t *labels = distil_dptr_addr(a->labels);
    float *loss = distil_dptr_addr(a->loss);
    void *grad = distil_dptr_addr(a->grad);
    int64_t V = a->vocab;
    double *buf = malloc(sizeof(double) * (size_t)(3 * V));
    if (buf == NULL) {
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY, "jsd: ref: out of host memory");
    }
    double *x = buf, *y = buf + V, *g = buf + 2 * V;
    int64_t n_valid = 0;
    for (int64_t i = 0; i < a->rows; i++) {
        n_valid += distil_ref_row_valid(labels, i, a->ignore_index);
    }
    bool mean = a->reduction == DISTIL_REDUCTION_BATCHMEAN;
    double n = distil_ref_normaliser(a->normaliser, a->normaliser_device, (double)n_valid);
    double scale = mean ? (n > 0 ? a->grad_scale / n : 0.0) : a->grad_scale;
    distil_elem_beta k = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    double total = 0.0;
    for (int64_t i = 0; i < a->rows; i++) {
        bool valid = distil_ref_row_valid(labels, i, a->ignore_index);
        double row = 0.0;
        if (valid) {
            distil_ref_load_row(distil_dptr_addr(a->x), a->dtype, a->x_stride, i, V, x);
            distil_ref_load_row(distil_dptr_addr(a->y), a->dtype, a->y_stride, i, V, y);
            row = distil_ref_div_row(x, y, V, &k, g);
        }
        total += row;
        if (a->reduction == DISTIL_REDUCTION_NONE) {
            loss[i] = (float)row;
        }
        /* The gradient may overwrite x in place: x of this row is already read. */
        for (int64_t v = 0; grad != NULL && v < V; v++) {
            distil_ref_store(grad, a->dtype, i * a->grad_stride + v, valid ? scale * g[v] : 0.0);
        }
    }
    if (a->reduction != DISTIL_REDUCTION_NONE) {
        loss[0] = (float)(mean ? (n > 0 ? total / n : 0.0) : total);
    }
    free(buf);
    return DISTIL_OK;
}
