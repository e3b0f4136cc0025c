/*
 * cpu_tp_rows.c - tp_rows of the cpu backend (docs/SPEC.md §8: one phase of the
 * vocabulary-parallel row pass on a chunk of the rank's fp32 logits): OpenMP runs the rows, each
 * whole on one thread with its own scratch row, as fused_rows does. Ignored rows (label
 * ignore_index or outside [0, vocab_total)) get neutral statistics and zero outputs.
 */
#include "cpu_internal.h"
#include "error.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Row i of an ignored row: -inf maxima, 0 sums and terms; FINISH: ce = soft = 0, G = 0. */
static void cpu_tp_ignored(const distil_tp_rows_args *a, int64_t i) {
    double *st = a->phase == DISTIL_TP_MAX    ? (double *)distil_dptr_addr(a->stat_max) + 2 * i
                 : a->phase == DISTIL_TP_SUMS ? (double *)distil_dptr_addr(a->stat_sum) + 3 * i
                                              : (double *)distil_dptr_addr(a->stat_terms) + 3 * i;
    if (a->phase == DISTIL_TP_MAX) {
        st[0] = st[1] = -INFINITY;
    } else if (a->phase != DISTIL_TP_FINISH) {
        st[0] = st[1] = st[2] = 0.0;
    } else {
        ((float *)distil_dptr_addr(a->ce_rows))[i] = 0.0f;
        ((float *)distil_dptr_addr(a->soft_rows))[i] = 0.0f;
        char *g = distil_dptr_addr(a->g);
        size_t es = distil_dtype_size(a->g_dtype);
        if (g) {
            memset(g + (size_t)(i * a->vocab) * es, 0, (size_t)a->vocab * es);
        }
    }
}

static void cpu_tp_one(const cpu_state *st, const distil_tp_rows_args *a, int64_t i,
                       const cpu_tp_row *proto) {
    int64_t label = ((const int64_t *)distil_dptr_addr(a->labels))[i];
    if (label == a->ignore_index || label < 0 || label >= a->vocab_total) {
        cpu_tp_ignored(a, i);
        return;
    }
    cpu_tp_row t = *proto;
    char *g = distil_dptr_addr(a->g);
    t.f.g = g ? g + (size_t)(i * a->vocab) * distil_dtype_size(a->g_dtype) : NULL;
    t.f.zs = (const float *)distil_dptr_addr(a->zs) + i * a->vocab;
    t.f.zt = (const float *)distil_dptr_addr(a->zt) + i * a->vocab;
    int64_t local = label - a->vocab_offset;
    t.f.label = local >= 0 && local < a->vocab ? local : -1;
    t.smax = (double *)distil_dptr_addr(a->stat_max) + 2 * i;
    t.ssum = (double *)distil_dptr_addr(a->stat_sum) + 3 * i;
    t.sterm = (double *)distil_dptr_addr(a->stat_terms) + 3 * i;
    st->k->tp_row(&t);
    if (a->phase == DISTIL_TP_FINISH) {
        ((float *)distil_dptr_addr(a->ce_rows))[i] = t.f.ce;
        ((float *)distil_dptr_addr(a->soft_rows))[i] = t.f.soft;
    }
}

distil_status distil_cpu_tp_rows(void *b, const distil_tp_rows_args *a) {
    cpu_state *st = b;
    const float *nv = distil_dptr_addr(a->n_valid);
    float n = nv ? *nv : 1.0f;
    int64_t per = distil_cpu_fused_scratch_floats(a->vocab);
    int threads = st->threads;
    DISTIL_TRY(distil_cpu_grow(st, &st->rows, &st->rows_bytes,
                               (size_t)threads * (size_t)per * sizeof(float), "fused row"));
    const distil_elem_beta coef = distil_elem_div_make(a->divergence, a->beta, a->alpha);
    cpu_tp_row proto = {.phase = (int)a->phase,
                        .f = {.g_dtype = a->g_dtype,
                              .vocab = a->vocab,
                              .coef = &coef,
                              .inv_t = a->inv_temperature,
                              .inv_tt = a->inv_temperature, /* no head options under tp */
                              .gh = n != 0.0f ? a->weight_hard / n : 0.0f,
                              .gs = n != 0.0f ? a->weight_soft / n : 0.0f}};
#pragma omp parallel num_threads(threads) if (a->rows > 1)
    {
        cpu_tp_row mine = proto;
#ifdef _OPENMP
        mine.f.scratch = (float *)st->rows + (size_t)omp_get_thread_num() * (size_t)per;
#else
        mine.f.scratch = (float *)st->rows;
#endif
#pragma omp for schedule(dynamic)
        for (int64_t i = 0; i < a->rows; i++) {
            cpu_tp_one(st, a, i, &mine);
        }
    }
    return DISTIL_OK;
}
