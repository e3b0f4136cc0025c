/*
 * cpu_internal.h - state and shared declarations of the "cpu" backend (OpenMP + OpenBLAS).
 *
 * Device memory is host memory. Row kernels come from one template compiled once per ISA
 * (cpu_kern_*.c); the backend picks a table at create time. Every row is computed by exactly one
 * thread in a fixed order, so results do not depend on the thread count or the scheduling.
 */
#ifndef DISTIL_CPU_INTERNAL_H
#define DISTIL_CPU_INTERNAL_H

#include "backend.h"
#include "math/distil_elem_beta.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One row of docs/SPEC.md §1: x, y (vocab) of dtype; grad (vocab) of dtype or NULL (loss only).
 * grad = gscale * de/dx; grad may equal x. */
typedef struct cpu_div_row {
    const void *x, *y;
    void *grad;
    int64_t vocab;
    distil_dtype dtype;
    const distil_elem_beta *coef; /* the divergence's constants (distil_elem_div_make) */
    float gscale;
} cpu_div_row;

/* One valid row of docs/SPEC.md §2 steps 2-5 on fp32 logits zs, zt (vocab); label in [0, vocab).
 * g (vocab) of g_dtype or NULL; it may equal zs when g_dtype is F32.
 * G = gh (s - onehot) + gs inv_t (g - q sum g), with gh = weight_hard / n, gs = weight_soft / n.
 * scratch holds cpu_fused_scratch_floats(vocab) floats of the calling thread. */
typedef struct cpu_fused_row {
    const float *zs, *zt;
    void *g;
    distil_dtype g_dtype;
    int64_t vocab, label;
    const distil_elem_beta *coef; /* the divergence's constants (distil_elem_div_make) */
    float inv_t, gh, gs;
    /* docs/SPEC.md §6: the teacher's 1 / temperature; dz (vocab), or NULL: G times the
     * student's dz'/dz (zs holds z') */
    float inv_tt;
    const float *dz;
    float *scratch;
    bool want_h;    /* docs/SPEC.md §6: the student's entropy -sum q x into h */
    float ce, soft; /* out */
    float h;        /* out, with want_h */
} cpu_fused_row;

/* docs/SPEC.md §8: one phase (distil_tp_phase) of the vocabulary-parallel row pass on one valid
 * row of the rank's columns: f holds the row as for fused_row (its label the local column, or -1
 * where another rank owns it); the statistics are this row's, reduced over the ranks where the
 * phase reads them: smax (2) maxima of zs, zt; ssum (3) sum exp of zs / tau, zt / tau, zs;
 * sterm (3) zs[label] - max (owner), sum e, sum de/dx. FINISH writes f.ce, f.soft and f.g. */
typedef struct cpu_tp_row {
    int phase;
    cpu_fused_row f;
    double *smax, *ssum, *sterm;
} cpu_tp_row;

/* A table of row kernels built for one instruction set. */
typedef struct cpu_kernels {
    const char *isa;
    /* dst (n) fp32 = src (n) dtype, and back (round to nearest even). */
    void (*to_f32)(distil_dtype dtype, const void *src, float *dst, int64_t n);
    void (*from_f32)(distil_dtype dtype, const float *src, void *dst, int64_t n);
    /* Returns the row loss; writes the whole grad row when grad is not NULL. */
    double (*div_row)(const cpu_div_row *r);
    /* Writes ce, soft and, when g is not NULL, the whole G row. */
    void (*fused_row)(cpu_fused_row *r);
    /* One phase of the vocabulary-parallel row pass (docs/SPEC.md §8). */
    void (*tp_row)(cpu_tp_row *r);
} cpu_kernels;

extern const cpu_kernels distil_cpu_kernels_generic;
#if defined(DISTIL_CPU_HAVE_AVX2)
extern const cpu_kernels distil_cpu_kernels_avx2;
#endif
#if defined(DISTIL_CPU_HAVE_AVX512)
extern const cpu_kernels distil_cpu_kernels_avx512;
#endif

/* Per-context state. A context serves one host thread at a time, so the scratch buffers need no
 * lock. */
typedef struct cpu_state {
    distil_ctx *ctx;
    int threads;
    const cpu_kernels *k;
    void *scratch; /* gemm operand conversion and C staging, grown on demand */
    size_t scratch_bytes;
    void *rows; /* per-thread fused rows (scratch) */
    size_t rows_bytes;
    bool bad_label; /* first invalid label since the last synchronize (count_valid) */
    int64_t bad_row, bad_value, bad_vocab;
    int bad_kind; /* what bad_value is: CPU_BAD_LABEL, or a teacher id (topk_rows) */
    char name[96];
} cpu_state;

/* Floats of per-thread scratch that fused_row needs for a vocabulary. */
int64_t distil_cpu_fused_scratch_floats(int64_t vocab);

/* Make *buf hold at least bytes (64-byte aligned, contents not kept); OOM reported on ctx. */
distil_status distil_cpu_grow(cpu_state *st, void **buf, size_t *cap, size_t bytes,
                              const char *what);

/* The operations of the vtable, one file each. */
distil_status distil_cpu_gemm(void *b, const distil_gemm_args *a);
/* The fused-cast GEMM (the vtable's epilogue): gemm with its result rounded into d. */
bool distil_cpu_gemm_cast_ok(void *b, const distil_gemm_cast_args *a);
distil_status distil_cpu_gemm_cast(void *b, const distil_gemm_cast_args *a);
distil_status distil_cpu_count_valid(void *b, const distil_count_args *a);
distil_status distil_cpu_div_rows(void *b, const distil_div_rows_args *a);
distil_status distil_cpu_fused_rows(void *b, const distil_fused_rows_args *a);
distil_status distil_cpu_reduce(void *b, const distil_reduce_args *a);
distil_status distil_cpu_cast(void *b, const distil_cast_args *a);
distil_status distil_cpu_fill(void *b, const distil_fill_args *a);
distil_status distil_cpu_scale(void *b, const distil_scale_args *a);
/* docs/SPEC.md §6 head options (cpu_head_rows.c) */
distil_status distil_cpu_head_rows(void *b, const distil_head_rows_args *a);

/* Cached top-k teacher (docs/SPEC.md §7, cpu_topk_rows.c); kinds of a recorded bad value. */
enum { CPU_BAD_LABEL = 0, CPU_BAD_ID_RANGE = 1, CPU_BAD_ID_TWICE = 2 };
distil_status distil_cpu_topk_rows(void *b, const distil_topk_rows_args *a);
distil_status distil_cpu_tp_rows(void *b, const distil_tp_rows_args *a);
/* docs/SPEC.md §6 fp8 teacher head (cpu_fp8.c): e4m3 values stored as fp16 */
distil_status distil_cpu_quant_rows(void *b, const distil_quant_rows_args *a);
distil_status distil_cpu_gemm_e4m3(void *b, const distil_gemm_e4m3_args *a);

#endif /* DISTIL_CPU_INTERNAL_H */
