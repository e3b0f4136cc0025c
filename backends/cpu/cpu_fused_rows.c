/*
 * cpu_fused_rows.c - fused_rows of the cpu backend (docs/SPEC.md §2 steps 2-5 on one chunk of
 * fp32 logits): OpenMP runs the rows, each whole on one thread with its own scratch row. Labels
 * were checked by count_valid; an invalid one's row is ignored here.
 */
#include "cpu_internal.h"
#include "error.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int64_t distil_cpu_fused_scratch_floats(int64_t vocab) {
    /* dq and q rows, each rounded up to a whole widest vector, plus a cache line of slack */
    return 2 * ((vocab + 15) / 16 * 16) + 16;
}

static void cpu_fused_one(const cpu_state *st, const distil_fused_rows_args *a, int64_t i,
                          const cpu_fused_row *proto) {
    size_t es = distil_dtype_size(a->g_dtype);
    int64_t label = ((const int64_t *)distil_dptr_addr(a->labels))[i];
    float *ce = distil_dptr_addr(a->ce_rows);
    float *soft = distil_dptr_addr(a->soft_rows);
    float *ent = distil_dptr_addr(a->entropy); /* docs/SPEC.md §6, optional */
    char *g = distil_dptr_addr(a->g);
    cpu_fused_row r = *proto;
    r.g = g ? g + (size_t)(i * a->vocab) * es : NULL;
    if (label == a->ignore_index || label < 0 || label >= a->vocab) { /* invalid: ignored too */
        ce[i] = 0.0f;
        soft[i] = 0.0f;
        if (ent != NULL) {
            ent[i] = 0.0f;
        }
        if (r.g) {
            memset(r.g, 0, (size_t)a->vocab * es);
        }
        return;
    }
    r.zs = (const float *)distil_dptr_addr(a->zs) + i * a->vocab;
    r.zt = (const float *)distil_dptr_addr(a->zt) + i * a->vocab;
    r.label = label;
    const float *dz = distil_dptr_addr(a->dz);
    r.dz = dz != NULL ? dz + i * a->vocab : NULL;
    st->k->fused_row(&r);
    ce[i] = r.ce;
    soft[i] = r.soft;
    if (ent != NULL) {
        ent[i] = r.h;
    }
}

distil_status distil_cpu_fused_rows(void *b, const distil_fused_rows_args *a) {
    cpu_state *st = b;
    const float *nv = distil_dptr_addr(a->n_valid);
    float n = nv ? *nv : 1.0f;
    int64_t per = distil_cpu_fused_scratch_floats(a->vocab);
    int threads = st->threads;
    DISTIL_TRY(distil_cpu_grow(st, &st->rows, &st->rows_bytes,
                               (size_t)threads * (size_t)per * sizeof(float), "fused row"));
    /* n <= 0 or NaN (a normaliser given on the device, docs/SPEC.md §6) acts as n == 0 */
    const bool some = n > 0.0f;
    const distil_elem_beta coef = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    cpu_fused_row proto = {.g_dtype = a->g_dtype,
                           .vocab = a->vocab,
                           .coef = &coef,
                           .inv_t = a->inv_temperature,
                           .gh = some ? a->weight_hard / n : 0.0f,
                           .gs = some ? a->weight_soft / n : 0.0f,
                           .inv_tt = a->inv_teacher_temperature,
                           .want_h = distil_dptr_present(a->entropy)};
#pragma omp parallel num_threads(threads) if (a->rows > 1)
    {
        cpu_fused_row mine = proto;
#ifdef _OPENMP
        mine.scratch = (float *)st->rows + (size_t)omp_get_thread_num() * (size_t)per;
#else
        mine.scratch = (float *)st->rows;
#endif
        /* Any schedule gives the same bits (a row is one thread's work); dynamic balances batches
         * whose cheap ignored rows cluster, as padding does. */
#pragma omp for schedule(dynamic)
        for (int64_t i = 0; i < a->rows; i++) {
            cpu_fused_one(st, a, i, &mine);
        }
    }
    return DISTIL_OK;
}
