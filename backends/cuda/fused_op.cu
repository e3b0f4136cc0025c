/*
 * fused_op.cu - the whole fused loss (optional op fused_linear_jsd): the core's chunk loop
 * (core/fused_linear_jsd.c) with one change that the loop cannot make for every backend: when
 * the batch is a single chunk, grad_Ws and grad_bs are written by their GEMMs directly in the
 * output dtype (accumulated in fp32 inside the GEMM, rounded once, as docs/SPEC.md §2 asks), so
 * the fp32 accumulators and their final casts (1.5 GB of traffic for the seed workload) vanish;
 * and the next chunk's logits GEMMs (for F32, whose G lives in zs: the teacher's) run on a second
 * lane (internal stream, joined by events) while this chunk's gradient GEMMs run on the
 * context's stream (fused_step).
 * The workspace is the core's plan (core/chunk.h) for a->chunk_rows.
 */
#include "gpu_state.cuh"

extern "C" {
#include "chunk.h"
}

namespace DISTIL_GPU_NS {

/* Everything one chunk step needs, resolved once per call. */
struct fused_loop {
    void *b;
    const distil_fused_args *a;
    distil_fused_plan p;
    distil_dptr gw, gb; /* where grad_Ws / grad_bs accumulate (absent: not wanted) */
    distil_dtype gw_dtype;
    size_t es;
};

static distil_dptr fused_ws(const fused_loop &L, size_t off) {
    return distil_dptr_add(L.a->workspace, off);
}

/* zs = xs_c Ws^T + bs (student) or zt = xt_c Wt^T + bt (teacher) for rows [r0, r0 + c). */
static distil_status fused_logits_of(const fused_loop &L, int64_t r0, int64_t c, bool teacher) {
    const distil_fused_args *a = L.a;
    const int64_t h = teacher ? a->ht : a->hs;
    distil_gemm_args g = {};
    g.trans_b = true;
    g.m = c;
    g.n = a->vocab;
    g.k = h;
    g.alpha = 1.0f;
    g.a_dtype = g.b_dtype = a->dtype;
    g.c_dtype = DISTIL_F32;
    g.a = distil_dptr_add(teacher ? a->xt : a->xs, static_cast<size_t>(r0 * h) * L.es);
    g.lda = h;
    g.b = teacher ? a->wt : a->ws;
    g.ldb = h;
    g.c = fused_ws(L, teacher ? L.p.off_zt : L.p.off_zs);
    g.ldc = a->vocab;
    g.bias = teacher ? a->bt : a->bs;
    return DISTIL_GPU_FN(gemm)(L.b, &g);
}

static distil_status fused_logits(const fused_loop &L, int64_t r0, int64_t c) {
    DISTIL_TRY(fused_logits_of(L, r0, c, false));
    return fused_logits_of(L, r0, c, true);
}

static distil_status fused_rows(const fused_loop &L, int64_t r0, int64_t c, bool grads) {
    const distil_fused_args *a = L.a;
    distil_distill_rows_args r = {};
    r.zs = fused_ws(L, L.p.off_zs);
    r.zt = fused_ws(L, L.p.off_zt);
    r.rows = c;
    r.vocab = a->vocab;
    r.row_offset = r0;
    r.labels = distil_dptr_add(a->labels, static_cast<size_t>(r0) * sizeof(int64_t));
    r.ignore_index = a->ignore_index;
    r.beta = a->beta;
    r.inv_temperature = a->inv_temperature;
    r.weight_hard = a->weight_hard;
    r.weight_soft = a->weight_soft;
    r.ce_rows = fused_ws(L, L.p.off_ce + static_cast<size_t>(r0) * sizeof(float));
    r.jsd_rows = fused_ws(L, L.p.off_jsd + static_cast<size_t>(r0) * sizeof(float));
    r.g = grads ? fused_ws(L, L.p.off_g) : distil_dptr_make(nullptr, 0);
    r.g_dtype = a->dtype;
    r.n_valid = fused_ws(L, L.p.off_n);
    return DISTIL_GPU_FN(distill_rows)(L.b, &r);
}

/* grad_xs_c = G Ws;  gw (+)= G^T xs_c;  gb (+)= 1^T G. `first` overwrites gw and gb. */
static distil_status fused_backward(const fused_loop &L, int64_t r0, int64_t c, bool first) {
    const distil_fused_args *a = L.a;
    const distil_dptr g = fused_ws(L, L.p.off_g);
    distil_gemm_args m = {};
    m.alpha = 1.0f;
    m.a_dtype = m.b_dtype = a->dtype;
    if (distil_dptr_present(a->grad_xs)) {
        m.m = c;
        m.n = a->hs;
        m.k = a->vocab;
        m.c_dtype = a->dtype;
        m.a = g;
        m.lda = a->vocab;
        m.b = a->ws;
        m.ldb = a->hs;
        m.c = distil_dptr_add(a->grad_xs, static_cast<size_t>(r0 * a->hs) * L.es);
        m.ldc = a->hs;
        DISTIL_TRY(DISTIL_GPU_FN(gemm)(L.b, &m));
    }
    m.beta = first ? 0.0f : 1.0f;
    m.c_dtype = L.gw_dtype;
    if (distil_dptr_present(L.gw)) {
        m.trans_a = true;
        m.m = a->vocab;
        m.n = a->hs;
        m.k = c;
        m.a = g;
        m.lda = a->vocab;
        m.b = distil_dptr_add(a->xs, static_cast<size_t>(r0 * a->hs) * L.es);
        m.ldb = a->hs;
        m.c = L.gw;
        m.ldc = a->hs;
        DISTIL_TRY(DISTIL_GPU_FN(gemm)(L.b, &m));
    }
    if (distil_dptr_present(L.gb)) {
        m.trans_a = false;
        m.m = 1;
        m.n = a->vocab;
        m.k = c;
        m.a = fused_ws(L, L.p.off_ones);
        m.lda = c;
        m.b = g;
        m.ldb = a->vocab;
        m.c = L.gb;
        m.ldc = a->vocab;
        DISTIL_TRY(DISTIL_GPU_FN(gemm)(L.b, &m));
    }
    return DISTIL_OK;
}

/* n on the device, and the ones vector of the bias gradient. */
static distil_status fused_prologue(const fused_loop &L) {
    const distil_fused_args *a = L.a;
    distil_count_args c = {};
    c.labels = a->labels;
    c.rows = a->rows;
    c.ignore_index = a->ignore_index;
    c.vocab = a->vocab;
    c.min_one = true;
    c.n_out = fused_ws(L, L.p.off_n);
    DISTIL_TRY(DISTIL_GPU_FN(count_valid)(L.b, &c));
    if (distil_dptr_present(L.gb)) {
        distil_fill_args f = {};
        f.dst = fused_ws(L, L.p.off_ones);
        f.dtype = a->dtype;
        f.count = L.p.chunk_rows;
        f.value = 1.0f;
        DISTIL_TRY(DISTIL_GPU_FN(fill)(L.b, &f));
    }
    return DISTIL_OK;
}

/* fp32 accumulators to the output dtype (only when several chunks accumulated), then the loss. */
static distil_status fused_epilogue(const fused_loop &L) {
    const distil_fused_args *a = L.a;
    distil_cast_args c = {};
    c.src_dtype = DISTIL_F32;
    c.dst_dtype = a->dtype;
    if (distil_dptr_present(L.gw) && L.gw_dtype != a->dtype) {
        c.src = L.gw;
        c.dst = a->grad_ws;
        c.count = a->vocab * a->hs;
        DISTIL_TRY(DISTIL_GPU_FN(cast)(L.b, &c));
    }
    if (distil_dptr_present(L.gb) && L.gw_dtype != a->dtype) {
        c.src = L.gb;
        c.dst = a->grad_bs;
        c.count = a->vocab;
        DISTIL_TRY(DISTIL_GPU_FN(cast)(L.b, &c));
    }
    distil_reduce_args r = {};
    r.a = fused_ws(L, L.p.off_ce);
    r.b = fused_ws(L, L.p.off_jsd);
    r.count = a->rows;
    r.wa = a->weight_hard;
    r.wb = a->weight_soft;
    r.n_valid = fused_ws(L, L.p.off_n);
    r.parts = a->return_parts;
    r.out = a->loss;
    return DISTIL_GPU_FN(reduce)(L.b, &r);
}

/* The accumulators: the outputs themselves for F32 or a single chunk, else the workspace's. */
static void fused_targets(fused_loop &L) {
    const distil_fused_args *a = L.a;
    const bool direct = a->dtype == DISTIL_F32 || a->rows <= L.p.chunk_rows;
    L.gw_dtype = direct ? a->dtype : DISTIL_F32;
    L.gw = a->grad_ws;
    L.gb = a->grad_bs;
    if (!direct && distil_dptr_present(a->grad_ws)) {
        L.gw = fused_ws(L, L.p.off_gw);
    }
    if (!direct && distil_dptr_present(a->grad_bs)) {
        L.gb = fused_ws(L, L.p.off_gb);
    }
}

/* Rows of the chunk that starts at r0 (0 past the end). */
static int64_t fused_chunk_len(const fused_loop &L, int64_t r0) {
    const int64_t left = L.a->rows - r0;
    return left <= 0 ? 0 : (left < L.p.chunk_rows ? left : L.p.chunk_rows);
}

/* The first failure of a step, else the join's runtime status. */
static distil_status fused_first(gpu_state *b, distil_status s, cudaError_t e, const char *what) {
    return s != DISTIL_OK ? s : (e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, what));
}

/*
 * The next chunk's logits on the side lane, forked from the stream after this chunk's row pass.
 * Safe beside this chunk's gradient GEMMs because the logits GEMMs write only zs and zt (which
 * the row pass has finished reading) and read only the call's inputs, none of which the gradient
 * GEMMs write; the gradient GEMMs read G, xs, Ws and the ones vector, none of which the logits
 * GEMMs write. With G in place in zs (F32) only the teacher's GEMM moves; the student's runs on
 * the stream after the gradients. *forked says whether the caller must join the lane.
 */
static distil_status fused_fork_logits(const fused_loop &L, int64_t r0, int64_t c, bool *forked) {
    gpu_state *b = gpu_of(L.b);
    *forked = false;
    GPU_TRY(b, cudaEventRecord(b->fork, b->lane.stream), "fused loss: fork");
    GPU_TRY(b, cudaStreamWaitEvent(b->side.stream, b->fork, 0), "fused loss: fork");
    distil_status s = gpu_side_delay(b);
    if (s == DISTIL_OK) {
        gpu_side_scope side(b);
        s = L.p.g_in_place ? fused_logits_of(L, r0, c, true) : fused_logits(L, r0, c);
    }
    /* Recorded after a failure too: the join must follow the lane's last work. */
    const cudaError_t e = cudaEventRecord(b->join, b->side.stream);
    *forked = e == cudaSuccess;
    return fused_first(b, s, e, "fused loss: join");
}

/* One chunk, rows [r0, r0 + c): its row pass and gradient GEMMs, and the next chunk's logits
 * (on the side lane while the gradients run, when overlap is on). A forked lane is joined back
 * into the stream before this returns, failure or not (a captured stream must end joined). */
static distil_status fused_step(const fused_loop &L, int64_t r0, bool grads) {
    gpu_state *b = gpu_of(L.b);
    const int64_t c = fused_chunk_len(L, r0);
    const int64_t r1 = r0 + c;
    const int64_t c1 = fused_chunk_len(L, r1);
    DISTIL_TRY(fused_rows(L, r0, c, grads));
    if (c1 == 0) {
        return grads ? fused_backward(L, r0, c, r0 == 0) : DISTIL_OK;
    }
    if (!grads || !b->overlap) {
        DISTIL_TRY(grads ? fused_backward(L, r0, c, r0 == 0) : DISTIL_OK);
        return fused_logits(L, r1, c1);
    }
    bool forked = false;
    distil_status s = fused_fork_logits(L, r1, c1, &forked);
    if (s == DISTIL_OK) {
        s = fused_backward(L, r0, c, r0 == 0);
    }
    if (s == DISTIL_OK && L.p.g_in_place) {
        s = fused_logits_of(L, r1, c1, false);
    }
    const cudaError_t e = forked ? cudaStreamWaitEvent(b->lane.stream, b->join, 0) : cudaSuccess;
    return fused_first(b, s, e, "fused loss: join");
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(fused_linear_jsd)(void *vb, const distil_fused_args *a) {
    gpu_device_guard guard(gpu_of(vb)); /* the events below resolve streams on this device */
    fused_loop L = {};
    L.b = vb;
    L.a = a;
    L.es = distil_dtype_size(a->dtype);
    distil_fused_shape s = {};
    s.rows = a->rows;
    s.vocab = a->vocab;
    s.hs = a->hs;
    s.ht = a->ht;
    s.dtype = a->dtype;
    s.g_dtype = a->dtype; /* G in the dtype of the tensor-core GEMMs that read it */
    s.want_gx = distil_dptr_present(a->grad_xs);
    s.want_gw = distil_dptr_present(a->grad_ws);
    s.want_gb = distil_dptr_present(a->grad_bs);
    distil_chunk_plan(&s, a->chunk_rows, &L.p);
    fused_targets(L);
    const bool grads = s.want_gx || s.want_gw || s.want_gb;
    DISTIL_TRY(fused_prologue(L));
    DISTIL_TRY(fused_logits(L, 0, fused_chunk_len(L, 0)));
    for (int64_t r0 = 0; r0 < a->rows; r0 += L.p.chunk_rows) {
        DISTIL_TRY(fused_step(L, r0, grads));
    }
    return fused_epilogue(L);
}
