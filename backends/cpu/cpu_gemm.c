/*
 * cpu_gemm.c - gemm of the cpu backend: C = alpha op(A) op(B) + beta C (+ bias), row-major,
 * through OpenBLAS cblas_sgemm.
 *
 * fp32 operands go to BLAS in place. bf16 / fp16 operands are converted to fp32 in panels along
 * the largest of m, n, k, so the backend's scratch stays near CPU_GEMM_BUDGET floats however
 * large the weight matrix is (a bf16 128k x 4k head would need 2 GiB converted whole); a C of
 * the input dtype is staged in fp32 and rounded once, and so is a result with its own output d.
 * Conversions run in OpenMP regions, and so do the BLAS calls: each OpenMP thread makes a
 * single-threaded OpenBLAS call on its own block of C (cpu_sgemm_par), so that OpenBLAS's pthread
 * pool never competes with OpenMP's.
 */
#include "cpu_internal.h"
#include "error.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

/* Target scratch of one gemm call in floats (32 MiB): a panel of a few thousand weight rows.
 * Overridable at compile time so that a test can force every panel shape on small matrices. */
#ifndef CPU_GEMM_BUDGET
#define CPU_GEMM_BUDGET ((size_t)8 << 20)
#endif

/* A stored matrix: rows of ld elements of dtype. */
typedef struct cpu_mat {
    const char *p;
    distil_dtype dt;
    int64_t ld;
} cpu_mat;

/* An fp32 matrix as BLAS sees it. */
typedef struct cpu_view {
    float *p;
    int64_t ld;
} cpu_view;

/* A block of the product: C rows [m0, m0 + m), columns [n0, n0 + n), summed over k [k0, k0 + k). */
typedef struct cpu_panel {
    int64_t m0, m, n0, n, k0, k;
} cpu_panel;

/* The fp32 view of rows [r0, r0 + nr), columns [c0, c0 + nc) of a stored matrix: the matrix
 * itself when it is fp32, else converted into buf (dense, ld = nc). */
static cpu_view cpu_block(const cpu_state *st, cpu_mat m, int64_t r0, int64_t nr, int64_t c0,
                          int64_t nc, float *buf) {
    size_t es = distil_dtype_size(m.dt);
    if (m.dt == DISTIL_F32) {
        cpu_view v = {(float *)m.p + r0 * m.ld + c0, m.ld};
        return v;
    }
#pragma omp parallel for num_threads(st->threads) schedule(static) if (nr * nc >= 65536)
    for (int64_t i = 0; i < nr; i++) {
        st->k->to_f32(m.dt, m.p + (size_t)((r0 + i) * m.ld + c0) * es, buf + i * nc, nc);
    }
    cpu_view v = {buf, nc};
    return v;
}

/* Rows [0, nr) x nc of the fp32 view back into the stored matrix at (r0, c0). */
static void cpu_unblock(const cpu_state *st, cpu_view v, cpu_mat m, int64_t r0, int64_t nr,
                        int64_t c0, int64_t nc) {
    size_t es = distil_dtype_size(m.dt);
#pragma omp parallel for num_threads(st->threads) schedule(static) if (nr * nc >= 65536)
    for (int64_t i = 0; i < nr; i++) {
        st->k->from_f32(m.dt, v.p + i * v.ld, (char *)m.p + (size_t)((r0 + i) * m.ld + c0) * es,
                        nc);
    }
}

/* C rows += bias, or = bias when overwrite (then C is not read). */
static void cpu_add_bias(const cpu_state *st, cpu_view c, int64_t m, int64_t n, const float *bias,
                         bool overwrite) {
#pragma omp parallel for num_threads(st->threads) schedule(static) if (m * n >= 65536)
    for (int64_t i = 0; i < m; i++) {
        float *row = c.p + i * c.ld;
        for (int64_t j = 0; j < n; j++) {
            row[j] = overwrite ? bias[j] : row[j] + bias[j];
        }
    }
}

/* Scratch floats of one panel: converted A and B blocks and the staged C block. */
static size_t cpu_panel_floats(const distil_gemm_args *a, int64_t m, int64_t n, int64_t k) {
    size_t f = 0;
    if (a->a_dtype != DISTIL_F32) {
        f += (size_t)m * (size_t)k;
    }
    if (a->b_dtype != DISTIL_F32) {
        f += (size_t)k * (size_t)n;
    }
    if (a->c_dtype != DISTIL_F32) {
        f += (size_t)m * (size_t)n;
    }
    return f;
}

/* The panel shape: the whole product when it fits the budget, else slices of the largest
 * dimension, a multiple of 64 long, sized to the budget. The scratch of a slice of length d is
 * fixed + d * unit (cpu_panel_floats is linear in each dimension). */
static cpu_panel cpu_pick_panel(const distil_gemm_args *a) {
    cpu_panel p = {0, a->m, 0, a->n, 0, a->k};
    if (cpu_panel_floats(a, a->m, a->n, a->k) <= CPU_GEMM_BUDGET) {
        return p;
    }
    int64_t *dim = &p.n;
    if (a->m >= a->n && a->m >= a->k) {
        dim = &p.m;
    } else if (a->k > a->n) {
        dim = &p.k;
    }
    int64_t full = *dim;
    *dim = 0;
    size_t fixed = cpu_panel_floats(a, p.m, p.n, p.k);
    *dim = 1;
    size_t unit = cpu_panel_floats(a, p.m, p.n, p.k) - fixed;
    size_t room = CPU_GEMM_BUDGET > fixed ? CPU_GEMM_BUDGET - fixed : 0;
    int64_t step = unit > 0 ? (int64_t)(room / unit) / 64 * 64 : full;
    *dim = step < 64 ? 64 : (step < full ? step : full);
    return p;
}

/* Everything one call shares between its panels. */
typedef struct cpu_gemm_ctx {
    const cpu_state *st;
    const distil_gemm_args *a;
    cpu_mat A, B, C;
    cpu_mat D;         /* the result's own output (distil_gemm_cast_args.d), or D.p NULL: C */
    const float *bias; /* fp32, or NULL */
    float *stage;      /* fp32 C block when C is not fp32 */
    float *abuf, *bbuf;
    int64_t akey[4], bkey[4]; /* the block now in abuf / bbuf: reused across m or n slices */
} cpu_gemm_ctx;

/* The fp32 C of a panel: C itself, or the stage (dense; the whole C when k is split). */
static cpu_view cpu_panel_c(const cpu_gemm_ctx *g, const cpu_panel *p) {
    if (g->a->c_dtype == DISTIL_F32) {
        cpu_view v = {(float *)g->C.p + p->m0 * g->C.ld + p->n0, g->C.ld};
        return v;
    }
    cpu_view v = {g->stage, p->n};
    return v;
}

/* Before the first k slice: load a staged C that beta reads; put the bias in when C is not read.
 * Returns the beta to give BLAS. */
static float cpu_panel_begin(const cpu_gemm_ctx *g, const cpu_panel *p, cpu_view c) {
    const distil_gemm_args *a = g->a;
    if (a->beta != 0.0f && a->c_dtype != DISTIL_F32) {
        cpu_block(g->st, g->C, p->m0, p->m, p->n0, p->n, c.p);
    }
    if (a->beta == 0.0f && g->bias) {
        cpu_add_bias(g->st, c, p->m, p->n, g->bias + p->n0, true);
        return 1.0f;
    }
    return a->beta;
}

/* After the last k slice: the bias when beta read C, then the staged C out, or the panel into
 * its own output D (rounded once to D's dtype; an fp32 C then holds the fp32 result too). */
static void cpu_panel_end(const cpu_gemm_ctx *g, const cpu_panel *p, cpu_view c) {
    if (g->a->beta != 0.0f && g->bias) {
        cpu_add_bias(g->st, c, p->m, p->n, g->bias + p->n0, false);
    }
    if (g->D.p != NULL) {
        cpu_unblock(g->st, c, g->D, p->m0, p->m, p->n0, p->n);
    } else if (g->a->c_dtype != DISTIL_F32) {
        cpu_unblock(g->st, c, g->C, p->m0, p->m, p->n0, p->n);
    }
}

/* cpu_block, unless buf already holds that block of a converted matrix. */
static cpu_view cpu_block_cached(const cpu_state *st, cpu_mat m, int64_t r0, int64_t nr, int64_t c0,
                                 int64_t nc, float *buf, int64_t key[4]) {
    if (m.dt != DISTIL_F32 && key[0] == r0 && key[1] == nr && key[2] == c0 && key[3] == nc) {
        cpu_view v = {buf, nc};
        return v;
    }
    key[0] = r0;
    key[1] = nr;
    key[2] = c0;
    key[3] = nc;
    return cpu_block(st, m, r0, nr, c0, nc, buf);
}

/*
 * One sgemm split by blocks of columns (or rows, when m > n) across the backend's OpenMP
 * threads, each block a single-threaded OpenBLAS call. One thread pool then does all of the
 * backend's work: with OpenBLAS's own pool, the OpenMP threads of the row pass spin-wait
 * against it on every multiply (about 5% of the fused loss on 2 cores). The blocks are fixed by
 * the shape alone (at most CPU_GEMM_PARTS, each a multiple of 16 and at least 64 long), never by
 * the thread count: OpenBLAS picks its kernels and k blocking by each call's m, n and k, so a
 * partition that followed the thread count changed the bits (docs/SPEC.md §4).
 */
#define CPU_GEMM_PARTS 64

static void cpu_sgemm_par(const cpu_state *st, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc) {
    const bool by_n = n >= m;
    const int64_t len = by_n ? n : m;
    int64_t blk = ((len + CPU_GEMM_PARTS - 1) / CPU_GEMM_PARTS + 15) / 16 * 16;
    blk = blk < 64 ? 64 : blk;
    const int64_t parts = (len + blk - 1) / blk;
#pragma omp parallel for num_threads(st->threads) schedule(static) if (parts > 1)
    for (int64_t t = 0; t < parts; t++) {
        const int64_t s = t * blk;
        const int64_t e = s + blk < len ? s + blk : len;
        const float *As = by_n ? A : (ta ? A + s : A + s * lda);
        const float *Bs = by_n ? (tb ? B + s * ldb : B + s) : B;
        float *Cs = by_n ? C + s : C + s * ldc;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)(by_n ? m : e - s), (int)(by_n ? e - s : n), (int)k, alpha, As, (int)lda,
                    Bs, (int)ldb, beta, Cs, (int)ldc);
    }
}

/* One BLAS call on one panel (k slice), operands converted as needed. */
static void cpu_panel_run(cpu_gemm_ctx *g, const cpu_panel *p, cpu_view c, float beta) {
    const distil_gemm_args *a = g->a;
    if (p->k == 0) { /* C = beta C: no product to add */
        for (int64_t i = 0; i < p->m; i++) {
            for (int64_t j = 0; j < p->n; j++) {
                float *e = c.p + i * c.ld + j;
                *e = beta == 0.0f ? 0.0f : beta * *e;
            }
        }
        return;
    }
    cpu_view av = a->trans_a
                      ? cpu_block_cached(g->st, g->A, p->k0, p->k, p->m0, p->m, g->abuf, g->akey)
                      : cpu_block_cached(g->st, g->A, p->m0, p->m, p->k0, p->k, g->abuf, g->akey);
    cpu_view bv = a->trans_b
                      ? cpu_block_cached(g->st, g->B, p->n0, p->n, p->k0, p->k, g->bbuf, g->bkey)
                      : cpu_block_cached(g->st, g->B, p->k0, p->k, p->n0, p->n, g->bbuf, g->bkey);
    cpu_sgemm_par(g->st, a->trans_a, a->trans_b, p->m, p->n, p->k, a->alpha, av.p, av.ld, bv.p,
                  bv.ld, beta, c.p, c.ld);
}

/* Walk the panels: slices of m or n are independent; slices of k accumulate into one C. */
static void cpu_gemm_panels(cpu_gemm_ctx *g, cpu_panel shape) {
    const distil_gemm_args *a = g->a;
    for (int64_t m0 = 0; m0 < a->m; m0 += shape.m) {
        for (int64_t n0 = 0; n0 < a->n; n0 += shape.n) {
            cpu_panel p = {m0, a->m - m0 < shape.m ? a->m - m0 : shape.m,
                           n0, a->n - n0 < shape.n ? a->n - n0 : shape.n,
                           0,  0};
            cpu_view c = cpu_panel_c(g, &p);
            float beta = cpu_panel_begin(g, &p, c);
            int64_t k0 = 0;
            do {
                p.k0 = k0;
                p.k = a->k - k0 < shape.k ? a->k - k0 : shape.k;
                cpu_panel_run(g, &p, c, k0 == 0 ? beta : 1.0f);
                k0 += shape.k;
            } while (k0 < a->k);
            cpu_panel_end(g, &p, c);
        }
    }
}

/* cblas takes int sizes: refuse what does not fit rather than wrap. */
static distil_status cpu_gemm_check(const cpu_state *st, const distil_gemm_args *a) {
    int64_t big = a->m | a->n | a->k | a->lda | a->ldb | a->ldc;
    if (big > INT_MAX) {
        return distil_error_set(st->ctx, DISTIL_ERR_UNSUPPORTED,
                                "cpu: gemm of %lld x %lld x %lld exceeds the BLAS int range",
                                (long long)a->m, (long long)a->n, (long long)a->k);
    }
    return DISTIL_OK;
}

/* The product of a into C, or rounded into D (D.p not NULL). */
static distil_status cpu_gemm_run(cpu_state *st, const distil_gemm_args *a, cpu_mat D) {
    if (a->m <= 0 || a->n <= 0) {
        return DISTIL_OK;
    }
    DISTIL_TRY(cpu_gemm_check(st, a));
    cpu_panel shape = cpu_pick_panel(a);
    bool bias = distil_dptr_present(a->bias);
    bool bias_cvt = bias && a->b_dtype != DISTIL_F32;
    size_t a_fl = a->a_dtype != DISTIL_F32 ? (size_t)shape.m * (size_t)shape.k : 0;
    size_t b_fl = a->b_dtype != DISTIL_F32 ? (size_t)shape.k * (size_t)shape.n : 0;
    size_t s_fl = a->c_dtype != DISTIL_F32 ? (size_t)shape.m * (size_t)shape.n : 0;
    size_t bias_fl = bias_cvt ? (size_t)a->n : 0;
    size_t total = a_fl + b_fl + s_fl + bias_fl;
    DISTIL_TRY(
        distil_cpu_grow(st, &st->scratch, &st->scratch_bytes, total * sizeof(float), "gemm"));
    float *s = st->scratch;
    /* With no scratch needed (f32 in and out, no bias) s may be NULL: no offsets from it. */
    float *bbuf = s != NULL ? s + a_fl : NULL;
    float *stage = s != NULL ? s + a_fl + b_fl : NULL;
    cpu_gemm_ctx g = {.st = st,
                      .a = a,
                      .A = {distil_dptr_addr(a->a), a->a_dtype, a->lda},
                      .B = {distil_dptr_addr(a->b), a->b_dtype, a->ldb},
                      .C = {distil_dptr_addr(a->c), a->c_dtype, a->ldc},
                      .D = D,
                      .bias = bias && !bias_cvt ? distil_dptr_addr(a->bias) : NULL,
                      .abuf = s,
                      .bbuf = bbuf,
                      .stage = stage,
                      .akey = {-1, -1, -1, -1},
                      .bkey = {-1, -1, -1, -1}};
    if (bias_cvt) {
        float *bb = s + a_fl + b_fl + s_fl;
        st->k->to_f32(a->b_dtype, distil_dptr_addr(a->bias), bb, a->n);
        g.bias = bb;
    }
#ifdef DISTIL_CPU_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(1); /* the threads are cpu_sgemm_par's */
#endif
    cpu_gemm_panels(&g, shape);
    return DISTIL_OK;
}

distil_status distil_cpu_gemm(void *b, const distil_gemm_args *a) {
    const cpu_mat none = {NULL, DISTIL_F32, 0};
    return cpu_gemm_run(b, a, none);
}

distil_status distil_cpu_gemm_cast(void *b, const distil_gemm_cast_args *a) {
    const cpu_mat d = {distil_dptr_addr(a->d), a->d_dtype, a->gemm.ldc};
    return cpu_gemm_run(b, &a->gemm, d);
}

/* Every GEMM can write its result to an output of its own (cpu_panel_end). */
bool distil_cpu_gemm_cast_ok(void *b, const distil_gemm_cast_args *a) {
    (void)b;
    return a->d_dtype == DISTIL_F32 || a->d_dtype == DISTIL_BF16 || a->d_dtype == DISTIL_F16;
}
