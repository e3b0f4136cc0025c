/*
 * cpu_reduce.c - the small operations of the cpu backend: count_valid (also the label check),
 * reduce (sequential double sums, so the loss is bitwise the same for any thread count), cast and
 * fill.
 */
#include "cpu_internal.h"
#include "half.h"

#include <string.h>

/* The first invalid label of the call (a label outside [0, vocab) that is not ignore_index),
 * kept for synchronize unless one is kept already. */
static void cpu_record_bad_label(cpu_state *st, int64_t row, int64_t label, int64_t vocab) {
    if (!st->bad_label) {
        st->bad_label = true;
        st->bad_kind = CPU_BAD_LABEL;
        st->bad_row = row;
        st->bad_value = label;
        st->bad_vocab = vocab;
    }
}

distil_status distil_cpu_count_valid(void *b, const distil_count_args *a) {
    const int64_t *labels = distil_dptr_addr(a->labels);
    int64_t count = a->rows;
    if (labels != NULL) {
        count = 0;
        for (int64_t i = 0; i < a->rows; i++) {
            int64_t l = labels[i];
            bool in_range = a->vocab <= 0 || (l >= 0 && l < a->vocab);
            count += l != a->ignore_index && in_range;
            if (!in_range && l != a->ignore_index) {
                cpu_record_bad_label(b, i, l, a->vocab);
            }
        }
    }
    if (a->min_one && count < 1) {
        count = 1;
    }
    *(float *)distil_dptr_addr(a->n_out) = (float)count;
    return DISTIL_OK;
}

static double cpu_sum(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)x[i];
    }
    return s;
}

distil_status distil_cpu_reduce(void *b, const distil_reduce_args *a) {
    const float *nv = distil_dptr_addr(a->n_valid);
    double n = nv ? (double)*nv : 1.0;
    const float *pa = distil_dptr_addr(a->a);
    const float *pb = distil_dptr_addr(a->b);
    double sa = cpu_sum(pa, a->count) / n;
    double sb = pb ? cpu_sum(pb, a->count) / n : 0.0;
    if (!(n > 0.0)) { /* none counted, or a given N <= 0 / NaN (docs/SPEC.md §6) */
        sa = 0.0;
        sb = 0.0;
    }
    float *out = distil_dptr_addr(a->out);
    out[0] = (float)((double)a->wa * sa + (pb ? (double)a->wb * sb : 0.0));
    if (a->parts) {
        out[1] = (float)sa;
        out[2] = (float)sb;
    }
    return DISTIL_OK;
}

/* Elements per OpenMP work item of cast: big enough to amortise, small enough to spread. */
#define CPU_CAST_BLOCK 16384

/* dst = src for one block, through an fp32 stack buffer when neither side is fp32. */
static void cpu_cast_block(const cpu_kernels *k, const distil_cast_args *a, int64_t off,
                           int64_t n) {
    const char *src =
        (const char *)distil_dptr_addr(a->src) + (size_t)off * distil_dtype_size(a->src_dtype);
    char *dst = (char *)distil_dptr_addr(a->dst) + (size_t)off * distil_dtype_size(a->dst_dtype);
    if (a->src_dtype == a->dst_dtype) {
        memmove(dst, src, (size_t)n * distil_dtype_size(a->src_dtype));
    } else if (a->src_dtype == DISTIL_F32) {
        k->from_f32(a->dst_dtype, (const float *)src, dst, n);
    } else if (a->dst_dtype == DISTIL_F32) {
        k->to_f32(a->src_dtype, src, (float *)dst, n);
    } else {
        float buf[1024];
        for (int64_t i = 0; i < n; i += 1024) {
            int64_t m = n - i < 1024 ? n - i : 1024;
            k->to_f32(a->src_dtype, src + (size_t)i * 2, buf, m);
            k->from_f32(a->dst_dtype, buf, dst + (size_t)i * 2, m);
        }
    }
}

distil_status distil_cpu_cast(void *b, const distil_cast_args *a) {
    const cpu_state *st = b;
    int64_t blocks = (a->count + CPU_CAST_BLOCK - 1) / CPU_CAST_BLOCK;
    if (distil_dptr_addr(a->src) == distil_dptr_addr(a->dst) && a->src_dtype == a->dst_dtype) {
        return DISTIL_OK;
    }
#pragma omp parallel for num_threads(st->threads) schedule(static) if (blocks > 1)
    for (int64_t i = 0; i < blocks; i++) {
        int64_t off = i * CPU_CAST_BLOCK;
        int64_t n = a->count - off < CPU_CAST_BLOCK ? a->count - off : CPU_CAST_BLOCK;
        cpu_cast_block(st->k, a, off, n);
    }
    return DISTIL_OK;
}

distil_status distil_cpu_fill(void *b, const distil_fill_args *a) {
    void *dst = distil_dptr_addr(a->dst);
    if (a->dtype == DISTIL_F32) {
        float *f = dst;
        for (int64_t i = 0; i < a->count; i++) {
            f[i] = a->value;
        }
        return DISTIL_OK;
    }
    uint16_t h =
        a->dtype == DISTIL_BF16 ? distil_f32_to_bf16(a->value) : distil_f32_to_f16(a->value);
    uint16_t *p = dst;
    for (int64_t i = 0; i < a->count; i++) {
        p[i] = h;
    }
    return DISTIL_OK;
}

/* x *= s with s read from host memory; s == 1 writes nothing. Element-wise, so the thread
 * count changes no result; on the context's threads, and on one below a cast block (an OpenMP
 * region costs more than a small scale). */
distil_status distil_cpu_scale(void *b, const distil_scale_args *a) {
    const cpu_state *st = b;
    const float s = *(const float *)distil_dptr_addr(a->scale);
    if (s == 1.0f) {
        return DISTIL_OK;
    }
    void *x = distil_dptr_addr(a->x);
    const int64_t n = a->count;
    if (a->dtype == DISTIL_F32) {
        float *f = x;
#pragma omp parallel for num_threads(st->threads) schedule(static) if (n > CPU_CAST_BLOCK)
        for (int64_t i = 0; i < n; i++) {
            f[i] *= s;
        }
        return DISTIL_OK;
    }
    uint16_t *h = x;
    const bool bf = a->dtype == DISTIL_BF16;
#pragma omp parallel for num_threads(st->threads) schedule(static) if (n > CPU_CAST_BLOCK)
    for (int64_t i = 0; i < n; i++) {
        float v = (bf ? distil_bf16_to_f32(h[i]) : distil_f16_to_f32(h[i])) * s;
        h[i] = bf ? distil_f32_to_bf16(v) : distil_f32_to_f16(v);
    }
    return DISTIL_OK;
}
