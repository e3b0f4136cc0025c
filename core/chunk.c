/* chunk.c - see chunk.h. */
#include "chunk.h"
#include "workspace.h"

static int64_t distil_clamp_rows(int64_t c, int64_t rows) {
    if (c > rows) {
        c = rows;
    }
    return c < 1 ? 1 : c;
}

/* zs + zt near 256 MiB, up to 2^20 rows: for backends that state no policy. */
static const distil_chunk_policy distil_chunk_default = {
    .logit_bytes = 256.0 * 1024 * 1024, .min_rows = 1, .max_rows = (int64_t)1 << 20};

int64_t distil_chunk_rows(const distil_chunk_policy *policy, int64_t rows, int64_t vocab) {
    const distil_chunk_policy *pol = policy->max_rows > 0 ? policy : &distil_chunk_default;
    const double per_row = 8.0 * (double)vocab; /* zs and zt, fp32 */
    int64_t c = pol->min_rows < 1 ? 1 : pol->min_rows;
    while (c * 2 <= pol->max_rows && (double)(c * 2) * per_row <= pol->logit_bytes) {
        c *= 2;
    }
    return distil_clamp_rows(c, rows);
}

/* Append a region of `bytes` at *cursor and return its offset. */
static size_t distil_take(size_t *cursor, size_t bytes) {
    size_t off = *cursor;
    *cursor += distil_workspace_round(bytes);
    return off;
}

/* The teacher source's own regions, each of its call bytes and its row bytes for c rows. */
static void distil_chunk_plan_teacher(const distil_fused_shape *s, size_t c, distil_fused_plan *p,
                                      size_t *cur) {
    for (int i = 0; i < DISTIL_TEACHER_REGIONS; i++) {
        p->off_teacher[i] =
            distil_take(cur, s->teacher[i].call_bytes + c * s->teacher[i].row_bytes);
    }
}

/* Chunks per grad_Ws GEMM for chunks of c rows: the shape's, at most the call's chunks; 1
 * without grad_Ws (G is then read only by its own chunk's GEMMs). */
static int64_t distil_chunk_gw_group(const distil_fused_shape *s, int64_t c) {
    const int64_t chunks = (s->rows + c - 1) / c;
    const int64_t k = s->gw_chunks > 1 ? s->gw_chunks : 1;
    return !s->want_gw ? 1 : (k < chunks ? k : chunks);
}

void distil_chunk_plan(const distil_fused_shape *s, int64_t chunk_rows, distil_fused_plan *p) {
    size_t es = distil_dtype_size(s->dtype);
    size_t ges = distil_dtype_size(s->g_dtype);
    size_t c = (size_t)distil_clamp_rows(chunk_rows, s->rows);
    size_t v = (size_t)s->vocab;
    bool f32 = s->dtype == DISTIL_F32;
    bool grads = s->want_gx || s->want_gw || s->want_gb;
    bool chunks = (int64_t)c < s->rows; /* several: grad_bs accumulates over them */
    size_t cur = 0;
    p->chunk_rows = (int64_t)c;
    p->g_dtype = s->g_dtype;
    p->gw_chunks = distil_chunk_gw_group(s, (int64_t)c);
    p->g_in_place = s->g_dtype == DISTIL_F32 && p->gw_chunks == 1;
    /* grad_Ws accumulates over groups: several when one group does not hold every chunk */
    p->gw_acc = s->want_gw && !f32 && !s->gw_f32 && (int64_t)c * p->gw_chunks < s->rows;
    p->gb_acc = s->want_gb && !f32 && !s->gw_f32 && chunks;
    p->off_n = distil_take(&cur, sizeof(float));
    p->off_ce = distil_take(&cur, (size_t)s->rows * sizeof(float));
    p->off_soft = distil_take(&cur, (size_t)s->rows * sizeof(float));
    p->off_gw = distil_take(&cur, p->gw_acc ? v * (size_t)s->hs * sizeof(float) : 0);
    p->off_gb = distil_take(&cur, p->gb_acc ? v * sizeof(float) : 0);
    p->off_labels = distil_take(&cur, s->own_labels ? (size_t)s->rows * sizeof(int64_t) : 0);
    p->off_zs = distil_take(&cur, c * v * sizeof(float));
    p->off_zt = distil_take(&cur, s->zt ? c * v * sizeof(float) : 0);
    /* G's slots: K chunks, or the call's rows where one group holds them all */
    const size_t g_rows =
        (size_t)p->gw_chunks * c < (size_t)s->rows ? (size_t)p->gw_chunks * c : (size_t)s->rows;
    p->off_g = p->g_in_place ? p->off_zs : distil_take(&cur, grads ? g_rows * v * ges : 0);
    p->off_ones = distil_take(&cur, s->want_gb ? c * es : 0);
    p->off_dz = distil_take(&cur, s->want_dz && grads ? c * v * sizeof(float) : 0);
    distil_chunk_plan_teacher(s, c, p, &cur);
    p->stats_tiles = s->stats_cols > 0 ? (s->vocab + s->stats_cols - 1) / s->stats_cols : 0;
    p->stats_plane = (size_t)p->stats_tiles * c;
    p->off_stats = distil_take(&cur, 4 * p->stats_plane * sizeof(float));
    p->bytes = cur;
}

/* distil_chunk_plan_fit with the shape's groups as they are. */
static bool distil_chunk_plan_fit_as(const distil_fused_shape *s, int64_t preferred,
                                     size_t available, distil_fused_plan *p) {
    distil_chunk_plan(s, preferred, p);
    if (p->bytes <= available) {
        return true;
    }
    /* Below one chunk (which needs no accumulator) the bytes grow linearly with the chunk: solve
     * for the largest chunk that fits between one row and hi. */
    int64_t hi = p->chunk_rows < s->rows ? p->chunk_rows : s->rows - 1;
    distil_fused_plan one;
    distil_chunk_plan(s, 1, &one);
    if (hi <= 1 || one.bytes > available) {
        *p = one;
        return one.bytes <= available;
    }
    distil_chunk_plan(s, hi, p);
    size_t per_row = (p->bytes - one.bytes) / (size_t)(hi - 1);
    int64_t c = 1 + (int64_t)((available - one.bytes) / (per_row + 1));
    c = c < hi ? c : hi - 1; /* plan(hi) does not fit */
    for (; c > 1; c--) {
        distil_chunk_plan(s, c, p);
        if (p->bytes <= available) {
            return true;
        }
    }
    *p = one;
    return true;
}

void distil_chunk_plan_within(const distil_fused_shape *s, int64_t chunk_rows, size_t available,
                              distil_fused_plan *p) {
    distil_chunk_plan(s, chunk_rows, p);
    if (p->bytes > available && s->gw_chunks > 1) {
        distil_fused_shape one = *s;
        one.gw_chunks = 1;
        distil_chunk_plan(&one, chunk_rows, p);
    }
}

bool distil_chunk_plan_fit(const distil_fused_shape *s, int64_t preferred, size_t available,
                           distil_fused_plan *p) {
    distil_chunk_plan_within(s, preferred, available, p);
    if (p->bytes <= available) {
        return true;
    }
    distil_fused_shape one = *s; /* below the preferred chunk: groups of one */
    one.gw_chunks = 1;
    return distil_chunk_plan_fit_as(&one, preferred, available, p);
}
