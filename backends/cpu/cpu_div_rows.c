/*
 * cpu_div_rows.c - div_rows of the cpu backend (docs/SPEC.md §1 on a block of rows): OpenMP over
 * rows, each row computed whole by one thread with the ISA kernel table, so the result does not
 * depend on the thread count.
 */
#include "cpu_internal.h"

#include <string.h>

/* One row: ignored rows get loss 0 and a zero gradient; n == 0 zeroes the gradient after the
 * loss is taken (grad may be x itself, so x is read first). */
static void cpu_div_one(const cpu_state *st, const distil_div_rows_args *a,
                        const distil_elem_beta *coef, int64_t i, float gscale, bool zero_grad) {
    size_t es = distil_dtype_size(a->dtype);
    const int64_t *labels = distil_dptr_addr(a->labels);
    float *row_loss = distil_dptr_addr(a->row_loss);
    char *grad = distil_dptr_addr(a->grad);
    char *g = grad ? grad + (size_t)(i * a->grad_stride) * es : NULL;
    if (labels != NULL && labels[i] == a->ignore_index) {
        row_loss[i] = 0.0f;
        if (g) {
            memset(g, 0, (size_t)a->vocab * es);
        }
        return;
    }
    cpu_div_row r = {.x = (const char *)distil_dptr_addr(a->x) + (size_t)(i * a->x_stride) * es,
                     .y = (const char *)distil_dptr_addr(a->y) + (size_t)(i * a->y_stride) * es,
                     .grad = zero_grad ? NULL : g,
                     .vocab = a->vocab,
                     .dtype = a->dtype,
                     .coef = coef,
                     .gscale = gscale};
    row_loss[i] = (float)st->k->div_row(&r);
    if (g && zero_grad) {
        memset(g, 0, (size_t)a->vocab * es);
    }
}

distil_status distil_cpu_div_rows(void *b, const distil_div_rows_args *a) {
    const cpu_state *st = b;
    const float *nv = distil_dptr_addr(a->n_valid);
    float n = nv ? *nv : 1.0f;
    /* n <= 0 or NaN (a normaliser given on the device, docs/SPEC.md §6) acts as none counted */
    bool zero_grad = !(n > 0.0f);
    float gscale = zero_grad ? 0.0f : (float)((double)a->grad_scale / (double)n);
    distil_elem_beta coef = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    /* Any schedule gives the same bits (a row is one thread's work); dynamic balances batches
     * whose cheap ignored rows cluster, as padding does. */
#pragma omp parallel for num_threads(st->threads) schedule(dynamic) if (a->rows > 1)
    for (int64_t i = 0; i < a->rows; i++) {
        cpu_div_one(st, a, &coef, i, gscale, zero_grad);
    }
    return DISTIL_OK;
}
