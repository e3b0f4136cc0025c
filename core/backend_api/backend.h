/*
 * backend.h - the internal backend vtable (never installed). The core decides, backends compute.
 *
 * The core validates every public argument, plans chunks and workspace, and then calls these
 * operations with argument structs that are already valid: backends never re-validate and never
 * see a public descriptor. Device memory is addressed as (base, byte offset) pairs so that
 * backends whose buffers are handles (OpenCL cl_mem) work the same as pointer backends.
 */
#ifndef DISTIL_CORE_BACKEND_H
#define DISTIL_CORE_BACKEND_H

#include "distil.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DISTIL_BACKEND_API_VERSION 2

/* A place in the backend's memory: a device pointer / cl_mem / host pointer plus a byte offset.
 * A NULL base means "absent" for optional operands. */
typedef struct distil_dptr {
    void *base;
    size_t off; /* bytes */
} distil_dptr;

static inline distil_dptr distil_dptr_make(const void *base, size_t off) {
    distil_dptr p;
    p.base = (void *)base;
    p.off = off;
    return p;
}
static inline distil_dptr distil_dptr_add(distil_dptr p, size_t bytes) {
    p.off += bytes;
    return p;
}
static inline bool distil_dptr_present(distil_dptr p) {
    return p.base != NULL;
}
/* For pointer backends (cpu, cuda, hip): the address itself. */
static inline void *distil_dptr_addr(distil_dptr p) {
    return p.base ? (void *)((char *)p.base + p.off) : NULL;
}

/*
 * C (m, n) = alpha * op(A) * op(B) + beta * C [+ bias broadcast over rows], row-major.
 *   op(A) is (m, k): A is (m, k) with row stride lda, or (k, m) when trans_a.
 *   op(B) is (k, n): B is (k, n) with row stride ldb, or (n, k) when trans_b.
 *   A has dtype a_dtype and B b_dtype (equal unless the backend's tuning.fp32_gemm is set); C has
 *   c_dtype (F32, or equal to b_dtype; any dtype when fp32_gemm is set); accumulation is fp32.
 *   bias (n) has b_dtype, optional; it is added once to each row of C after the product.
 * beta == 0 means C is not read (it may hold NaN).
 */
typedef struct distil_gemm_args {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    distil_dtype a_dtype, b_dtype, c_dtype;
    distil_dptr a;
    int64_t lda;
    distil_dptr b;
    int64_t ldb;
    distil_dptr c;
    int64_t ldc;
    distil_dptr bias;
} distil_gemm_args;

/*
 * The statistics GEMM (docs/DESIGN.md "Row statistics from the logits GEMM"): a logits GEMM
 *   gemm: C (m, n) fp32 dense = A (m, k) B^T [+ bias] (B (n, k)), both of one dtype, row
 *         strides k
 * that also writes each row's statistics: per row r of C and tile t of the backend's
 * tuning.stats_cols columns, element t m + r of each (ceil(n / stats_cols), m) fp32 plane,
 *   max: the tile's maximum of C,  s1: the sum over the tile of 2^((C - max) c1).
 */
typedef struct distil_gemm_stats_args {
    distil_gemm_args gemm;
    distil_dptr max, s1;
    float c1;
} distil_gemm_stats_args;

/* What the statistics GEMM would be asked for, before the workspace is planned and the operands
 * are known: logits GEMMs C (m, n) fp32 = A (m, k) B^T of dtype operands, whose row pass runs
 * with or without gradients (grads). m is the call's rows (a chunk has at most as many). */
typedef struct distil_gemm_stats_shape {
    int64_t m, n, k;
    distil_dtype dtype;
    bool grads;
} distil_gemm_stats_shape;

/*
 * The fused-cast GEMM: gemm's result, rounded once, goes to its own output d (m, n; row stride
 * gemm.ldc, dtype d_dtype); gemm.c (fp32) is read (gemm.beta != 0) and may be left holding
 * anything. The fused loss's last grad_Ws GEMM, whose fp32 accumulator is rounded into the
 * output without a cast pass of its own.
 */
typedef struct distil_gemm_cast_args {
    distil_gemm_args gemm;
    distil_dptr d;
    distil_dtype d_dtype;
} distil_gemm_cast_args;

/*
 * Count the rows that take part in a mean: label != ignore_index and, when vocab > 0, label in
 * [0, vocab). Writes max(count, min_one ? 1 : 0) as one fp32 value to n_out. Every kernel that
 * divides by such an n treats n <= 0 (or NaN: a normaliser given on the device) as 0: loss and
 * gradient 0. With labels absent
 * it writes rows (or 1 when rows == 0 and min_one). Rows only within [0, rows).
 * When vocab > 0 this is also the one label check (docs/SPEC.md §5): the first row whose label is
 * neither ignore_index nor in [0, vocab) is recorded with its label, unless a row is recorded
 * already, and the backend's synchronize returns DISTIL_ERR_INVALID_LABEL for it once.
 */
typedef struct distil_count_args {
    distil_dptr labels; /* (rows) int64, optional */
    int64_t rows;
    int64_t ignore_index;
    int64_t vocab; /* > 0: labels outside [0, vocab) are not counted */
    bool min_one;
    distil_dptr n_out; /* 1 fp32 */
} distil_count_args;

/*
 * docs/SPEC.md §1 and §6 on a block of rows: per-row divergence (the soft part's: JSD or any
 * other of distil_divergence) and, optionally, its gradient.
 *   x (rows, vocab) row stride x_stride, dtype: student log-probs; y likewise: teacher
 *   labels (rows) int64, optional: rows whose label == ignore_index get loss 0 and gradient 0
 *   row_loss (rows) fp32: written for every row
 *   grad (rows, vocab) row stride grad_stride, dtype, optional; may equal x (in place)
 *   grad = grad_scale / n * dl/dx, where n is the fp32 at n_valid (1 when absent). When n is 0
 *   the gradient is 0.
 */
typedef struct distil_div_rows_args {
    distil_dptr x, y;
    int64_t x_stride, y_stride;
    int64_t rows, vocab;
    distil_dtype dtype;
    float beta;
    distil_dptr labels;
    int64_t ignore_index;
    distil_dptr row_loss;
    distil_dptr grad;
    int64_t grad_stride;
    float grad_scale;
    distil_dptr n_valid;
    /* docs/SPEC.md §6: the divergence (distil_elem_div_make maps it, beta and alpha to a mode). */
    distil_divergence divergence;
    float alpha;
} distil_div_rows_args;

/*
 * docs/SPEC.md §2 steps 2-5 on one chunk of fp32 logits.
 *   zs, zt (rows, vocab) fp32 dense (row stride vocab): student / teacher logits of the chunk
 *   labels (rows) int64: the chunk's labels. A row whose label is ignore_index or outside
 *     [0, vocab) is ignored (count_valid has recorded the invalid ones).
 *   ce_rows, soft_rows (rows) fp32: per-row CE and soft part (0 for ignored rows), always written
 *   g (rows, vocab) dtype g_dtype, row stride vocab, optional: the logit gradient
 *     G = (weight_hard / n) (s - onehot) + (weight_soft / n) (1/tau) (g - q sum g)
 *     with n the fp32 at n_valid. Ignored rows get 0. When g_dtype is F32 the core may pass
 *     g == zs (in place): each element of zs must be read before the same element of g is written.
 */
typedef struct distil_fused_rows_args {
    distil_dptr zs, zt;
    int64_t rows, vocab;
    distil_dptr labels;
    int64_t ignore_index;
    float beta, inv_temperature, weight_hard, weight_soft;
    distil_dptr ce_rows, soft_rows;
    distil_dptr g;
    distil_dtype g_dtype;
    distil_dptr n_valid;
    /* docs/SPEC.md §6: the soft part's divergence, as in distil_div_rows_args. */
    distil_divergence divergence;
    float alpha;
    /* docs/SPEC.md §6 head options. The teacher's logits are divided by its own temperature
     * (inv_teacher_temperature; equal to inv_temperature by default); the 1/tau of G stays the
     * student's. dz (rows, vocab) fp32 dense, optional: with the student's head scaled or capped
     * (zs then holds z', head_rows wrote dz = dz'/dz), each element of G is multiplied by it. */
    float inv_teacher_temperature;
    distil_dptr dz;
    /* Optional: the row statistics of zs and zt from their GEMMs (distil_gemm_stats_args's layout
     * with m = rows, stats_tiles tiles per row): zs_max, zs_s1 (c1 = log2(e) / tau), zt_max, zt_s1
     * (c1 = log2(e) / tau_t); the CE's sum at tau != 1 is the row pass's own. Given only where the
     * backend's stats_fit said yes for this row pass; absent zs_max: none. */
    distil_dptr zs_max, zs_s1, zt_max, zt_s1;
    int64_t stats_tiles;
    /* docs/SPEC.md §6 student entropy, optional: (rows) fp32, the chunk's rows. Each valid row's
     * -sum_v q_v x_v (x = log q of the soft part, q = exp(x); a term with q == 0 is 0), summed
     * beside the soft part's terms in the same pass over the row; ignored rows get 0. */
    distil_dptr entropy;
} distil_fused_rows_args;

/*
 * docs/SPEC.md §6 on one chunk of one head's fp32 logits z (rows, vocab) dense, before fused_rows:
 *   transform: z <- dh_cap(z, scale, cap) in place (math/distil_head.h: cap tanh(scale z / cap),
 *     scale z when cap is 0)
 *   dz (rows, vocab) fp32 dense, optional (transform only): dh_dcap(z, scale, cap) = dz'/dz at
 *     each logit, from z before it is overwritten
 *   lse (rows) fp32, optional: each row's logsumexp of z (after the transform), every row
 * The sums are taken in a fixed order (deterministic).
 */
typedef struct distil_head_rows_args {
    distil_dptr z;
    int64_t rows, vocab;
    bool transform;
    float scale, cap;
    distil_dptr dz;
    distil_dptr lse;
} distil_head_rows_args;

/*
 * out[0] = wa * sum(a) / n + wb * sum(b) / n, n = fp32 at n_valid (1 if absent; n == 0 gives 0).
 * With parts, also out[1] = sum(a) / n and out[2] = sum(b) / n. b is optional (then wb unused).
 * The summation order is fixed (deterministic).
 */
typedef struct distil_reduce_args {
    distil_dptr a, b; /* (count) fp32 */
    int64_t count;
    float wa, wb;
    distil_dptr n_valid;
    bool parts;
    distil_dptr out; /* fp32, 1 or 3 values */
} distil_reduce_args;

/* dst (count) dst_dtype = src (count) src_dtype, element by element (round to nearest even). */
typedef struct distil_cast_args {
    distil_dptr src, dst;
    distil_dtype src_dtype, dst_dtype;
    int64_t count;
} distil_cast_args;

/* dst (count) dtype = value. */
typedef struct distil_fill_args {
    distil_dptr dst;
    distil_dtype dtype;
    int64_t count;
    float value;
} distil_fill_args;

/* x (count) dtype *= s, s = the fp32 at `scale`. When s == 1 the backend writes nothing. */
typedef struct distil_scale_args {
    distil_dptr x;
    distil_dtype dtype;
    int64_t count;
    distil_dptr scale; /* 1 fp32 */
} distil_scale_args;

/* The whole of distil_jsd in one backend call (whole->jsd); the core fills it after
 * validation. Strides are already resolved (never 0). rows >= 1. */
typedef struct distil_jsd_args {
    distil_dptr x, y, labels, loss, grad;
    int64_t x_stride, y_stride, grad_stride;
    int64_t rows, vocab;
    distil_dtype dtype;
    float beta, grad_scale;
    int64_t ignore_index;
    distil_reduction reduction;
    /* docs/SPEC.md §6: the divergence, and N given by the caller for batchmean: normaliser > 0
     * on the host, or the fp32 at normaliser_device (N <= 0 or NaN there: loss and gradient 0);
     * neither (0, NULL base): N counted. */
    distil_divergence divergence;
    float alpha;
    float normaliser;
    distil_dptr normaliser_device;
} distil_jsd_args;

/* The whole of distil_fused_linear_jsd in one backend call (optional op `fused_linear_jsd`), with
 * the teacher's state as the call's teacher source holds it: core/backend_api/fused_args.h. */
typedef struct distil_fused_args distil_fused_args;

/* ---- cached top-k teacher (docs/SPEC.md §7) */

/* The teacher of one call: (rows, k) ids and log-probs, dense; pad_id marks unused slots. */
typedef struct distil_topk_teacher {
    distil_dptr ids, logp;
    bool ids_i64;
    distil_dtype logp_dtype;
    int64_t k, pad_id;
    int tail; /* distil_topk_tail */
} distil_topk_teacher;

/*
 * docs/SPEC.md §7 on a block of rows (the top-k row pass).
 *   x (rows, vocab) row stride x_stride, x_dtype: fp32 student logits of a chunk (logits: the
 *     fused loss; softmax at inv_temperature, CE at temperature 1, G with the softmax Jacobian)
 *     or the student's log-probs as given (!logits: the distil_topk loss; x is a free variable)
 *   t: the teacher, ids / logp already at the block's first row; row0: that row's index in the
 *     call (for the error message)
 *   labels (rows) int64, optional: ignore_index (and, with logits, a label outside [0, vocab))
 *     ignores a row. A row with a duplicate id or an id outside [0, vocab) other than pad_id is
 *     ignored and recorded like an invalid label (the first one stands; synchronize reports it)
 *   ce_rows (rows) fp32, optional (logits only); soft_rows (rows) fp32: per-row losses, 0 for
 *     ignored rows, always written
 *   g (rows, vocab) g_dtype row stride g_stride, optional: G = (weight_hard / n)(s - onehot) +
 *     (weight_soft / n) * (d soft / d x, with the Jacobian and 1/tau when logits), n the fp32 at
 *     n_valid (1 when absent; n == 0 gives 0). With logits and g_dtype F32, g may equal x.
 *     With logits, x is the pass's own: a backend may overwrite it (cpu, opencl and cuda set
 *     the ids' entries to -inf, so that one pass sums the tail Q_t directly).
 */
typedef struct distil_topk_rows_args {
    distil_dptr x;
    int64_t x_stride;
    distil_dtype x_dtype;
    bool logits;
    distil_topk_teacher t;
    int64_t rows, vocab, row0;
    distil_dptr labels;
    int64_t ignore_index;
    float beta, inv_temperature, weight_hard, weight_soft;
    distil_dptr ce_rows, soft_rows;
    distil_dptr g;
    distil_dtype g_dtype;
    int64_t g_stride;
    distil_dptr n_valid;
    /* docs/SPEC.md §7 takes every divergence of §6: distil_elem_div_make maps it, beta and alpha
     * to the element terms' mode. */
    distil_divergence divergence;
    float alpha;
} distil_topk_rows_args;

/* The whole of distil_topk in one backend call (whole->topk, the float64 reference).
 * rows >= 1, strides resolved. */
typedef struct distil_topk_args {
    distil_dptr x, labels, loss, grad;
    int64_t x_stride, grad_stride, rows, vocab;
    distil_dtype dtype;
    distil_topk_teacher t;
    float beta, grad_scale;
    int64_t ignore_index;
    distil_reduction reduction;
    float normaliser;
    distil_dptr normaliser_device;
    /* the divergence, as in distil_topk_rows_args */
    distil_divergence divergence;
    float alpha;
} distil_topk_args;

/* ---- fp8 teacher head (docs/SPEC.md §6) */

/*
 * Rows of src (rows, cols) src_dtype, row stride src_ld, rounded to e4m3 with one scale per row,
 * as docs/SPEC.md §6 defines it (math/distil_e4m3.h): a = max_j |src[i][j]|;
 *   a finite and a / 448 > 0 in fp32:  scale[i] = a / 448,  dst[i][j] = e4m3(src[i][j] / scale[i])
 *   a == 0 (or a / 448 underflows to 0): scale[i] = 1, dst[i][j] = e4m3(src[i][j])
 *   a not finite (a NaN or an inf in the row): scale[i] = NaN, dst[i][j] = NaN
 * with both divisions correctly rounded in fp32. dst (rows, dst_ld) holds the codes in the
 * backend's e4m3 form (e4m3_bytes per element: the e4m3 byte, or its value in fp16); scale (rows)
 * fp32. dst_ld is a multiple of 16 elements; the padding columns [cols, dst_ld) are written 0
 * (cuda's gemm_e4m3 runs over them; every backend writes them, so that distil_e4m3_head_make's
 * bytes are a function of the weight).
 */
typedef struct distil_quant_rows_args {
    distil_dptr src;
    int64_t src_ld;
    distil_dtype src_dtype;
    int64_t rows, cols;
    distil_dptr dst;
    int64_t dst_ld;
    distil_dptr scale;
} distil_quant_rows_args;

/*
 * The header at the start of a head made once (distil_e4m3_head_make, docs/SPEC.md §6; the
 * head's layout is core/fused_fp8.c's, drawn in docs/DESIGN.md "The fp8 teacher head"): 32 bytes
 * naming what the head was made for, so that a fused call refuses a head of another shape or
 * backend whose byte count happens to match. Every field is written; reserved is 0.
 */
typedef struct distil_e4m3_header {
    uint32_t magic;     /* DISTIL_E4M3_HEAD_MAGIC (core/fused_fp8.h) */
    uint32_t layout;    /* DISTIL_E4M3_HEAD_LAYOUT: the version of the head's layout */
    int32_t e4m3_bytes; /* the making backend's e4m3_bytes */
    uint32_t reserved;
    int64_t rows, cols; /* of the weight it was made from */
} distil_e4m3_header;

/*
 * The header of a head made once, on a backend whose memory the host does not read (cuda, hip;
 * the core reads and writes a host-memory backend's header itself). head: the head's first byte
 * in the context's memory, 16-byte aligned. write: store `want` there (distil_e4m3_head_make).
 * !write (a fused call given the head): compare the header there with `want` on the device, in
 * stream order, with no host synchronisation and no copy to the host (CUDA-graph capture safe),
 * and record a difference in the backend's deferred-error state (unless an error is recorded
 * already), which synchronize reports as DISTIL_ERR_INVALID_ARG naming teacher_weight_e4m3.
 */
typedef struct distil_e4m3_header_args {
    distil_dptr head;
    distil_e4m3_header want;
    bool write;
} distil_e4m3_header_args;

/*
 * C (m, n) fp32, row stride ldc: C[i][j] = sa[i] sb[j] sum_k A[i][k] B[j][k] + bias[j], fp32
 * accumulation. A (m, k) and B (n, k) are quant_rows outputs (row strides lda, ldb elements),
 * sa (m) and sb (n) their scales; bias (n) bias_dtype, optional.
 */
typedef struct distil_gemm_e4m3_args {
    int64_t m, n, k;
    distil_dptr a;
    int64_t lda;
    distil_dptr sa;
    distil_dptr b;
    int64_t ldb;
    distil_dptr sb;
    distil_dptr c;
    int64_t ldc;
    distil_dptr bias;
    distil_dtype bias_dtype;
} distil_gemm_e4m3_args;

/* Where a buffer lies (backend mem_extent): `parent` names the allocation it is part of (NULL on
 * pointer backends: one address space), `origin` is its first byte within that allocation (the
 * address itself on pointer backends), `size` its bytes (0: unknown). */
typedef struct distil_mem_extent {
    const void *parent;
    uintptr_t origin;
    size_t size;
} distil_mem_extent;

/* How a backend likes the fused loss's chunks; the core picks the rows (distil_chunk_rows in
 * core/chunk.h): the largest power of two C in [min_rows, max_rows] whose fp32 logit blocks zs
 * and zt (8 C V bytes) fit logit_bytes. max_rows == 0: the core's default policy.
 * gw_chunks: chunks per weight-gradient GEMM (G of that many chunks kept, one GEMM over their
 * rows: fewer passes over the fp32 accumulator; docs/DESIGN.md "Weight-gradient groups");
 * 0 or 1: one GEMM per chunk. DISTIL_GW_CHUNKS overrides it per context. */
typedef struct distil_chunk_policy {
    double logit_bytes;
    int64_t min_rows, max_rows;
    int gw_chunks;
} distil_chunk_policy;

/* ---- vocabulary parallel (docs/SPEC.md §8) */

/* The phases of the vocabulary-parallel row pass; the core all-reduces between them. */
typedef enum distil_tp_phase {
    DISTIL_TP_MAX = 0,    /* stat_max (rows, 2) = local row maxima of zs, zt          -> max */
    DISTIL_TP_SUMS = 1,   /* stat_sum (rows, 3) = local sum exp((z - m) s) of zs at inv_t, zt
                             at inv_t, zs at 1, m the reduced maxima                    -> sum */
    DISTIL_TP_TERMS = 2,  /* stat_terms (rows, 3) = local zs[label] - m_s (owner only), sum e,
                             sum de/dx, with the reduced statistics                      -> sum */
    DISTIL_TP_FINISH = 3, /* ce_rows, soft_rows from the reduced statistics; G when g present */
} distil_tp_phase;

/*
 * One phase of docs/SPEC.md §2 steps 2-5 on a chunk of fp32 logits of the rank's columns
 * [vocab_offset, vocab_offset + vocab) of vocab_total. Labels are global ids; a row whose label
 * is ignore_index or outside [0, vocab_total) is ignored (neutral statistics: -inf maxima, 0 sums;
 * ce = soft = 0, G = 0). The statistics are f64, row-major per row (stride 2 or 3). FINISH writes
 * G as fused_rows does (g may be zs when g_dtype is F32), with -weight_hard / n at the label on
 * the rank that owns it.
 */
typedef struct distil_tp_rows_args {
    distil_tp_phase phase;
    distil_dptr zs, zt; /* (rows, vocab) fp32 dense */
    int64_t rows, vocab, vocab_offset, vocab_total;
    distil_dptr labels; /* (rows) int64 */
    int64_t ignore_index;
    float beta, inv_temperature, weight_hard, weight_soft;
    distil_divergence divergence; /* the soft part's, as in distil_fused_rows_args */
    float alpha;
    distil_dptr stat_max, stat_sum, stat_terms; /* (rows, 2), (rows, 3), (rows, 3) f64 */
    distil_dptr ce_rows, soft_rows;             /* (rows) fp32, FINISH */
    distil_dptr g;                              /* (rows, vocab) g_dtype, optional, FINISH */
    distil_dtype g_dtype;
    distil_dptr n_valid;
} distil_tp_rows_args;

/* Core-side sink for backend error messages; see error.h beside this file. */
typedef struct distil_ctx distil_ctx;

/* What a backend likes, all zero meaning the core's default. */
typedef struct distil_backend_tuning {
    /* gemm computes from fp32 copies of its operands whatever their dtypes, and takes A and B of
     * different dtypes (cpu, opencl): the core's fused loss then keeps the logit gradient G in
     * fp32 (in place of zs), since rounding it to a half dtype would only lose digits. Else G is
     * stored in the input dtype, the one its GEMMs run in. */
    bool fp32_gemm;
    distil_chunk_policy chunk; /* all zero: the core's default */
    /* With the fp8 ops: the bytes of one stored e4m3 element (1: the code; 2: its value as fp16,
     * exact). */
    int e4m3_bytes;
    /* With the statistics GEMM: the columns of its tiles (distil_gemm_stats_args). */
    int stats_cols;
} distil_backend_tuning;

/* Optional: what a backend on a device beside the host adds (opencl, cuda, hip). Each member may
 * be NULL; the note says what the core does then. */
typedef struct distil_backend_device {
    /* Called once after a successful probe: the priority for automatic selection when it depends
     * on the device found (an OpenCL CPU device ranks below the cpu backend). NULL: `priority`. */
    int (*auto_priority)(void);
    /* Bind a native stream/queue, or the backend's own for DISTIL_STREAM_OWN; NULL is the
     * runtime's default stream where it has one (distil.h). NULL op: the core accepts only NULL
     * and DISTIL_STREAM_OWN. */
    distil_status (*set_stream)(void *b, void *stream);
    /* Can the backend tell that p is not its memory? NULL: the core cannot check. */
    distil_status (*check_pointer)(void *b, const void *p, const char *what);
    /* For handle backends: resolve p, which check_pointer accepted, to its extent (a sub-buffer
     * to its parent, origin and size). NULL: p is an address in one address space, size unknown.
     * The core's size and overlap checks (core/overlap.c) use it. */
    distil_status (*mem_extent)(void *b, const void *p, distil_mem_extent *out);
    /* Is p a live allocation of mem_alloc (distil_free)? It must not touch p beyond a lookup: p
     * may have been freed already. NULL: the core asks check_pointer. */
    distil_status (*check_free)(void *b, const void *p);
} distil_backend_device;

/* Optional: each loss computed whole, instead of the core composing it from the kernels of the
 * main table (the float64 reference). A backend with it needs none of those kernels; all three
 * ops are required. */
typedef struct distil_backend_whole {
    distil_status (*jsd)(void *b, const distil_jsd_args *a);
    distil_status (*fused_linear_jsd)(void *b, const struct distil_fused_args *a);
    distil_status (*topk)(void *b, const distil_topk_args *a);
} distil_backend_whole;

/*
 * Optional: a second lane, so that the fused loss's next-chunk logits GEMMs overlap this chunk's
 * gradient GEMMs (cuda, hip). begin: what follows runs on the side lane, after everything queued
 * so far; *opened false: the backend runs no side lane (nothing changed, everything stays on the
 * stream). Once *opened (even with a failure status) the core calls end, which returns to the
 * stream, and later join, after which the stream's work follows all of the side's. All three
 * ops are required.
 */
typedef struct distil_backend_side {
    distil_status (*begin)(void *b, bool *opened);
    distil_status (*end)(void *b);
    distil_status (*join)(void *b);
} distil_backend_side;

/* Optional: vocabulary parallel (docs/SPEC.md §8). NULL: distil_fused_linear_jsd_tp is
 * UNSUPPORTED on the backend. */
typedef struct distil_backend_tp {
    /* One phase of the vocabulary-parallel row pass; required. */
    distil_status (*tp_rows)(void *b, const distil_tp_rows_args *a);
    /* The native stream bound now (cudaStream_t, hipStream_t), handed to a communicator's
     * all-reduce. NULL op: NULL (host backends). */
    void *(*native_stream)(void *b);
} distil_backend_tp;

/* Optional: the fp8 teacher head (docs/SPEC.md §6), with tuning.e4m3_bytes. NULL: the fp8 head
 * is UNSUPPORTED (unless the backend computes the fused loss whole). Either product op may
 * return UNSUPPORTED (a device without fp8), before it writes anything. */
typedef struct distil_backend_fp8 {
    /* Rows to e4m3 with their scales; required (distil_e4m3_head_make and the fused call). */
    distil_status (*quant_rows)(void *b, const distil_quant_rows_args *a);
    /* The e4m3 product; required unless the backend computes the fused loss whole. */
    distil_status (*gemm_e4m3)(void *b, const distil_gemm_e4m3_args *a);
    /* The header of a head made once (distil_e4m3_header_args): required on a backend that is
     * not host_memory; NULL on host-memory backends, whose headers the core reads and writes
     * itself. */
    distil_status (*e4m3_header)(void *b, const distil_e4m3_header_args *a);
} distil_backend_fp8;

/*
 * Optional: GEMMs with more in their epilogue than gemm's, each a pair of ops or neither.
 * NULL table or pair: the core runs gemm (and finds the row statistics in the row pass, or casts
 * the accumulator after the loop).
 */
typedef struct distil_backend_epilogue {
    /* The statistics GEMM (distil_gemm_stats_args), with tuning.stats_cols. stats_fit, asked when
     * the workspace is planned: whether it and fused_rows take logits GEMMs of this shape (both
     * the student's and the teacher's are asked). stats_ok, asked once per call with its first
     * chunk's GEMMs: whether gemm_stats takes these operands (their alignment). */
    bool (*stats_fit)(void *b, const distil_gemm_stats_shape *s);
    bool (*stats_ok)(void *b, const distil_gemm_stats_args *a);
    distil_status (*gemm_stats)(void *b, const distil_gemm_stats_args *a);
    /* The fused-cast GEMM (distil_gemm_cast_args). cast_ok, asked once per call: whether
     * gemm_cast takes a (the fused loss's last grad_Ws GEMM). */
    bool (*cast_ok)(void *b, const distil_gemm_cast_args *a);
    distil_status (*gemm_cast)(void *b, const distil_gemm_cast_args *a);
} distil_backend_epilogue;

/*
 * A backend: a const static struct written with designated initialisers. Every operation takes
 * the backend's own context `b` first, except probe and create. The operations of this struct
 * are required (the registry refuses a backend that lacks one: core/backend_check.c), the
 * kernels only without `whole`; the optional capabilities are the sub-tables, NULL when absent.
 * A backend that fills the required operations passes the test suite.
 */
typedef struct distil_backend {
    int api_version;  /* must be DISTIL_BACKEND_API_VERSION */
    const char *name; /* "cuda", "hip", "opencl", "cpu", "ref" */
    int priority;     /* auto selection prefers higher: cuda 400, hip 300, opencl 200, cpu 100 */
    bool host_memory; /* device pointers are host pointers (cpu, ref) */
    /* The environment variables of the backend's own prefix DISTIL_<NAME>_ that are known (read by
     * it, or by the build's scripts), NULL terminated (NULL: none). ctx_create refuses any other
     * variable of that prefix, so that a mistyped or removed one fails instead of being ignored. */
    const char *const *env_names;
    distil_backend_tuning tuning;

    /* ---- life cycle and memory */
    /* Count devices; cheap, no allocation, safe with missing drivers. 0 = unavailable. A failure
     * status with a message (distil_error_set(NULL, ...)) says why there is none. */
    distil_status (*probe)(int *n_devices);
    /* Per-context state on one device; report failures through distil_error_set(ctx, ...). */
    distil_status (*create)(distil_ctx *ctx, int device, void **b);
    void (*destroy)(void *b);
    /* Write the device name into buf (NUL-terminated, at most n bytes). */
    void (*describe)(void *b, char *buf, size_t n);
    /* Wait for queued work; return deferred errors (invalid label, device fault) once. */
    distil_status (*synchronize)(void *b);
    distil_status (*mem_alloc)(void *b, size_t bytes, void **ptr);
    void (*mem_free)(void *b, void *ptr);
    /* Host <-> device copies, blocking for the host. */
    distil_status (*mem_upload)(void *b, distil_dptr dst, const void *src, size_t bytes);
    distil_status (*mem_download)(void *b, void *dst, distil_dptr src, size_t bytes);
    distil_status (*cast)(void *b, const distil_cast_args *a);
    distil_status (*fill)(void *b, const distil_fill_args *a);
    distil_status (*scale)(void *b, const distil_scale_args *a);

    /* ---- the kernels the core composes every loss from (required unless `whole`) */
    distil_status (*gemm)(void *b, const distil_gemm_args *a);
    distil_status (*count_valid)(void *b, const distil_count_args *a);
    distil_status (*div_rows)(void *b, const distil_div_rows_args *a);
    distil_status (*fused_rows)(void *b, const distil_fused_rows_args *a);
    distil_status (*reduce)(void *b, const distil_reduce_args *a);
    /* docs/SPEC.md §6 head options on a chunk's logits */
    distil_status (*head_rows)(void *b, const distil_head_rows_args *a);
    /* docs/SPEC.md §7 cached top-k teacher: the row pass of both top-k losses */
    distil_status (*topk_rows)(void *b, const distil_topk_rows_args *a);

    /* ---- optional capabilities */
    const distil_backend_device *device;
    const distil_backend_whole *whole;
    const distil_backend_side *side;
    const distil_backend_tp *tp;
    const distil_backend_fp8 *fp8;
    const distil_backend_epilogue *epilogue;
} distil_backend;

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_CORE_BACKEND_H */
