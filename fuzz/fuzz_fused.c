/*
 * fuzz_fused.c - distil_fused_linear_jsd and its workspace query under fuzzed descriptors,
 * NULL and optional pointers, labels (ignored, out of range), special values, chunk sizes,
 * lent workspaces and allocation faults. Expected statuses follow distil.h / docs/SPEC.md §5.
 */
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Buffers in call order: xs ws bs xt wt bt labels loss gxs gws gbs, then the descriptor's LSE
 * outputs (docs/SPEC.md §6). */
enum {
    B_XS,
    B_WS,
    B_BS,
    B_XT,
    B_WT,
    B_BT,
    B_LABELS,
    B_LOSS,
    B_GXS,
    B_GWS,
    B_GBS,
    B_LSES,
    B_LSET,
    B_COUNT
};
static const char *const fz_names[B_COUNT] = {"student_hidden",
                                              "student_weight",
                                              "student_bias",
                                              "teacher_hidden",
                                              "teacher_weight",
                                              "teacher_bias",
                                              "labels",
                                              "loss",
                                              "grad_student_hidden",
                                              "grad_student_weight",
                                              "grad_student_bias",
                                              "student_lse",
                                              "teacher_lse"};

typedef struct fz_fused {
    distil_fused_linear_jsd_desc d;
    bool desc_null;
    unsigned present; /* bit per buffer: passed (else NULL) */
    size_t lend;
    long fault;
    bool backed, special, bad_label, tame;
    int alias_out, alias_in; /* an output passed as this other buffer (docs/SPEC.md §5), or -1 */
    size_t es;
    int64_t rows, vocab, hs, ht; /* the descriptor's, clamped to what buffers hold */
    int64_t vt, common;          /* the teacher's rows (clamped), the common prefix */
    bool no_fp8; /* the backend has no fp8 teacher head (opencl): UNSUPPORTED (docs/SPEC.md §6) */
    fz_buf b[B_COUNT], work;
} fz_fused;

static int64_t fz_clamp(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static void fz_fused_read_desc(fz_in *in, distil_fused_linear_jsd_desc *d) {
    distil_fused_linear_jsd_desc_init(d);
    if (fz_byte(in) >= 240) {
        d->struct_size = (size_t)fz_i64_field(in, 0, 0, (int64_t)sizeof *d + 16);
    }
    d->rows = fz_i64_field(in, 3, 0, FZ_MAX_ROWS);
    d->vocab = fz_i64_field(in, 16, 1, fz_vocab_cap(in));
    d->student_hidden = fz_i64_field(in, 4, 1, FZ_MAX_HIDDEN);
    d->teacher_hidden = fz_i64_field(in, 6, 1, FZ_MAX_HIDDEN);
    d->dtype = (distil_dtype)fz_i64_field(in, fz_pick(in, 3), 0, 3);
    d->weight_hard = fz_float_field(in, 0.5f, 0.0f, 2.0f);
    d->weight_soft = fz_float_field(in, 0.5f, 0.0f, 2.0f);
    d->beta = fz_float_field(in, 0.5f, 0.0f, 1.0f);
    d->temperature = fz_float_field(in, 1.0f, 0.1f, 4.0f);
    d->ignore_index = fz_i64_field(in, -100, -100, FZ_NARROW_VOCAB);
    d->chunk_rows = fz_i64_field(in, 0, 0, FZ_MAX_ROWS + 1);
    d->return_parts = fz_bool(in);
    if (fz_byte(in) >= 200) {
        d->teacher_vocab = fz_bool(in) ? d->vocab : fz_i64_field(in, 0, 0, fz_vocab_cap(in));
        d->student_weight_hidden = fz_bool(in) ? d->student_hidden : fz_i64_field(in, 0, 0, 16);
        d->teacher_weight_hidden = fz_bool(in) ? d->teacher_hidden : fz_i64_field(in, 0, 0, 16);
    }
    fz_read_divergence(in, &d->divergence, &d->alpha, &d->normaliser);
    d->temperature_squared = fz_byte(in) >= 192;
    if (fz_byte(in) >= 160) { /* docs/SPEC.md §6 head options */
        d->student_logit_scale = fz_float_field(in, 1.0f, 0.25f, 4.0f);
        d->student_softcap = fz_float_field(in, 0.0f, 0.5f, 30.0f);
        d->teacher_logit_scale = fz_float_field(in, 1.0f, 0.25f, 4.0f);
        d->teacher_softcap = fz_float_field(in, 0.0f, 0.5f, 30.0f);
        d->teacher_temperature = fz_float_field(in, 0.0f, 0.1f, 4.0f);
    }
}

static void fz_fused_read(fz_in *in, fz_fused *c) {
    memset(c, 0, sizeof *c);
    fz_fused_read_desc(in, &c->d);
    const distil_fused_linear_jsd_desc *d = &c->d;
    /* Required pointers are passed unless the input says otherwise; optional ones by choice. */
    unsigned nulls = fz_byte(in) >= 224 ? fz_u32(in) : 0;
    unsigned optional = fz_byte(in);
    c->present = ((1u << B_XS) | (1u << B_WS) | (1u << B_XT) | (1u << B_WT) | (1u << B_LABELS) |
                  (1u << B_LOSS)) &
                 ~nulls;
    c->present |= (optional & 1 ? 1u << B_BS : 0) | (optional & 2 ? 1u << B_BT : 0) |
                  (optional & 4 ? 1u << B_GXS : 0) | (optional & 8 ? 1u << B_GWS : 0) |
                  (optional & 16 ? 1u << B_GBS : 0) | (optional & 32 ? 1u << B_LSES : 0) |
                  (optional & 64 ? 1u << B_LSET : 0);
    c->desc_null = nulls & (1u << 31);
    /* docs/SPEC.md §6 fp8 teacher head, from bits no other draw uses (the corpus keeps its
     * meaning otherwise): the optional byte's top bit, and now and then a value out of range. */
    c->d.teacher_head_precision = (nulls & (1u << 29))
                                      ? (distil_head_precision)(2 + (nulls >> 24) % 4)
                                  : (optional & 128) ? DISTIL_HEAD_PRECISION_FP8_E4M3
                                                     : DISTIL_HEAD_PRECISION_DEFAULT;
    c->lend = fz_byte(in) >= 224 ? fz_u32(in) % 65536 : 0;
    c->fault = fz_fault_countdown(in);
    c->backed = d->rows >= 0 && d->rows <= FZ_MAX_ROWS && d->vocab <= FZ_MAX_VOCAB &&
                d->student_hidden <= FZ_MAX_HIDDEN && d->teacher_hidden <= FZ_MAX_HIDDEN &&
                d->teacher_vocab <= FZ_MAX_VOCAB;
    c->rows = fz_clamp(d->rows, 0, FZ_MAX_ROWS);
    c->vocab = fz_clamp(d->vocab, 1, FZ_MAX_VOCAB);
    c->vt = d->teacher_vocab > 0 ? fz_clamp(d->teacher_vocab, 1, FZ_MAX_VOCAB) : c->vocab;
    c->common = c->vt < c->vocab ? c->vt : c->vocab;
    c->hs = fz_clamp(d->student_hidden, 1, FZ_MAX_HIDDEN);
    c->ht = fz_clamp(d->teacher_hidden, 1, FZ_MAX_HIDDEN);
    size_t es = distil_dtype_size(d->dtype);
    c->es = es ? es : 4;
    /* Now and then one output overlaps an input: each gradient its own input, or the loss the
     * labels. The library must refuse it. */
    static const int outs[] = {B_GXS, B_GWS, B_GBS, B_LOSS};
    static const int ins[] = {B_XS, B_WS, B_BS, B_LABELS};
    unsigned pick = fz_byte(in) >= 232 ? fz_pick(in, 4) : 4u;
    c->alias_out = pick < 4 ? outs[pick] : -1;
    c->alias_in = pick < 4 ? ins[pick] : -1;
}

static bool fz_bad_float(float v, bool positive) {
    return positive ? !(v > 0.0f) || isinf(v) : !(v >= 0.0f) || isinf(v);
}

/* docs/SPEC.md §6: scales finite > 0, caps finite >= 0 with 1 / cap finite, the teacher's
 * temperature 0 or a temperature. */
static bool fz_bad_head(const distil_fused_linear_jsd_desc *d) {
    const float caps[] = {d->student_softcap, d->teacher_softcap};
    bool bad = fz_bad_float(d->student_logit_scale, true) ||
               fz_bad_float(d->teacher_logit_scale, true) || d->teacher_vocab < 0;
    for (int i = 0; i < 2; i++) {
        bad |= fz_bad_float(caps[i], false) || (caps[i] > 0.0f && !isfinite(1.0f / caps[i]));
    }
    float tt = d->teacher_temperature;
    return bad || (tt != 0.0f && (fz_bad_float(tt, true) || !isfinite(1.0f / tt)));
}

/* Statuses the descriptor alone allows: OK when it is valid. */
static fz_statuses fz_fused_expect_desc(const fz_fused *c) {
    const distil_fused_linear_jsd_desc *d = &c->d;
    if (c->desc_null) {
        return FZ_S(DISTIL_ERR_INVALID_ARG);
    }
    if (d->struct_size != sizeof *d) {
        return FZ_S(DISTIL_ERR_VERSION);
    }
    bool bad = distil_dtype_size(d->dtype) == 0 || d->rows < 0 || d->vocab < 1 ||
               d->student_hidden < 1 || d->teacher_hidden < 1 ||
               (d->student_weight_hidden != 0 && d->student_weight_hidden != d->student_hidden) ||
               (d->teacher_weight_hidden != 0 && d->teacher_weight_hidden != d->teacher_hidden) ||
               d->chunk_rows < 0 || fz_bad_float(d->weight_hard, false) ||
               fz_bad_float(d->weight_soft, false) ||
               (d->weight_hard == 0.0f && d->weight_soft == 0.0f) ||
               !(d->beta >= 0.0f && d->beta <= 1.0f) || fz_bad_float(d->temperature, true) ||
               !isfinite(1.0f / d->temperature) ||
               fz_bad_divergence(d->divergence, d->alpha, d->normaliser) ||
               (d->temperature_squared &&
                !isfinite((float)((double)d->weight_soft * d->temperature * d->temperature))) ||
               fz_bad_head(d) || (unsigned)d->teacher_head_precision > 1u;
    if (!bad && d->teacher_head_precision == DISTIL_HEAD_PRECISION_FP8_E4M3 && c->no_fp8) {
        return FZ_S(DISTIL_ERR_UNSUPPORTED);
    }
    return bad ? FZ_S(DISTIL_ERR_INVALID_ARG) : FZ_S(DISTIL_OK);
}

/* The aliased output is passed and both it and its input span bytes (rows > 0 for the row
 * tensors): an overlap to refuse. */
static bool fz_fused_aliased(const fz_fused *c) {
    if (c->alias_out < 0) {
        return false; /* no alias drawn: also keeps the shifts below defined */
    }
    unsigned both = (1u << (unsigned)c->alias_out) | (1u << (unsigned)c->alias_in);
    bool rows_needed = c->alias_in == B_XS || c->alias_in == B_LABELS;
    return (c->present & both) == both && (c->d.rows > 0 || !rows_needed);
}

/* Statuses the whole call allows (before faults and lent workspaces). */
static fz_statuses fz_fused_expect(const fz_fused *c) {
    fz_statuses s = fz_fused_expect_desc(c);
    if (s != FZ_S(DISTIL_OK)) {
        return s;
    }
    unsigned required = (1u << B_WS) | (1u << B_WT) | (1u << B_LOSS);
    if (c->d.rows > 0) {
        /* Labels may be NULL only without a hard part (docs/SPEC.md §2). */
        required |= (1u << B_XS) | (1u << B_XT) | (c->d.weight_hard != 0.0f ? 1u << B_LABELS : 0);
    }
    bool gbs_without_bs = (c->present & (1u << B_GBS)) && !(c->present & (1u << B_BS));
    if (!c->backed || (c->present & required) != required || gbs_without_bs ||
        fz_fused_aliased(c)) {
        return FZ_S(DISTIL_ERR_INVALID_ARG);
    }
    return c->bad_label ? FZ_S(DISTIL_OK) | FZ_S(DISTIL_ERR_INVALID_LABEL) : FZ_S(DISTIL_OK);
}

static size_t fz_fused_bytes(const fz_fused *c, int i) {
    size_t R = (size_t)c->rows, V = (size_t)c->vocab, hs = (size_t)c->hs, ht = (size_t)c->ht;
    size_t Vt = (size_t)c->vt;
    size_t elems[B_COUNT] = {R * hs, V * hs, V, R * ht, Vt * ht, Vt, 0, 0, R * hs, V * hs, V};
    if (i == B_LABELS) {
        return R * sizeof(int64_t);
    }
    if (i == B_LSES || i == B_LSET) {
        return R * sizeof(float);
    }
    return i == B_LOSS ? 3 * sizeof(float) : elems[i] * c->es;
}

static bool fz_fused_alloc(distil_ctx *ctx, fz_fused *c) {
    for (int i = 0; i < B_COUNT; i++) {
        if (!fz_buf_alloc(ctx, &c->b[i], fz_fused_bytes(c, i))) {
            return false;
        }
    }
    return fz_buf_alloc(ctx, &c->work, c->lend);
}

static void fz_fused_labels(fz_in *in, fz_fused *c) {
    int64_t *l = c->b[B_LABELS].host;
    for (int64_t i = 0; i < c->rows; i++) {
        unsigned m = fz_pick(in, 6);
        l[i] = m == 0   ? c->d.ignore_index
               : m == 1 ? (fz_bool(in) ? -1 : c->vocab + fz_pick(in, 3))
               : m == 2 ? (int64_t)fz_u64(in)
                        : (int64_t)(fz_u32(in) % (uint32_t)c->vocab);
        bool valid = l[i] >= 0 && l[i] < c->common; /* the heads' common prefix */
        c->bad_label |= !valid && l[i] != c->d.ignore_index;
    }
    if (!(c->present & (1u << B_LABELS))) {
        c->bad_label = false; /* labels not passed: nothing to find */
    }
}

/* Head options in a range where fp32 and float64 agree to the oracle's bounds (docs/SPEC.md §6):
 * a huge cap turns an fp32 logit that overflowed to inf into a finite c, where float64 has a
 * finite logit and a smaller tanh; a tiny cap or scale amplifies the logits' rounding. */
static bool fz_tame_head(const distil_fused_linear_jsd_desc *d) {
    const float caps[] = {d->student_softcap, d->teacher_softcap};
    const float scales[] = {d->student_logit_scale, d->teacher_logit_scale};
    bool tame = d->teacher_temperature == 0.0f || d->teacher_temperature >= 0.05f;
    for (int i = 0; i < 2; i++) {
        tame &= caps[i] == 0.0f || (caps[i] >= 0.1f && caps[i] <= 1e4f);
        tame &= scales[i] >= 1e-2f && scales[i] <= 1e2f;
    }
    return tame;
}

static void fz_fused_fill(fz_in *in, distil_ctx *ctx, fz_fused *c) {
    const int data[] = {B_XS, B_WS, B_BS, B_XT, B_WT, B_BT};
    for (size_t k = 0; k < sizeof data / sizeof data[0]; k++) {
        fz_buf *b = &c->b[data[k]];
        c->special |= fz_fill_data(in, b->host, c->d.dtype, b->bytes / c->es, false);
    }
    fz_fused_labels(in, c);
    const distil_fused_linear_jsd_desc *d = &c->d;
    c->tame =
        !c->special && d->temperature >= 0.05f && d->weight_hard <= 1e3f &&
        d->weight_soft <= 1e3f && (d->normaliser == 0.0f || d->normaliser >= 1e-3f) &&
        (!d->temperature_squared || d->weight_soft * d->temperature * d->temperature <= 1e3f) &&
        fz_tame_head(d);
    for (int i = B_LOSS; i < B_COUNT; i++) {
        fz_buf_poison(&c->b[i]);
    }
    for (int i = 0; i < B_COUNT; i++) {
        fz_buf_upload(ctx, &c->b[i]);
    }
}

static void *fz_fused_ptr(const fz_fused *c, int i) {
    if (i == c->alias_out && fz_fused_aliased(c)) {
        return c->b[c->alias_in].dev;
    }
    return (c->present & (1u << i)) ? c->b[i].dev : NULL;
}

static distil_status fz_fused_call(distil_ctx *ctx, fz_fused *c) {
    if (c->lend > 0) {
        distil_status s = distil_ctx_set_workspace(ctx, c->work.dev, c->work.bytes);
        fz_check_status(ctx, "ctx_set_workspace", s, FZ_S(DISTIL_OK));
    }
    fz_mark_message(ctx);
    distil_testing_fail_allocations(c->fault);
    distil_fused_linear_jsd_desc d = c->d;
    d.student_lse = fz_fused_ptr(c, B_LSES);
    d.teacher_lse = fz_fused_ptr(c, B_LSET);
    distil_status s = distil_fused_linear_jsd(
        ctx, c->desc_null ? NULL : &d, fz_fused_ptr(c, B_XS), fz_fused_ptr(c, B_WS),
        fz_fused_ptr(c, B_BS), fz_fused_ptr(c, B_XT), fz_fused_ptr(c, B_WT), fz_fused_ptr(c, B_BT),
        fz_fused_ptr(c, B_LABELS), fz_fused_ptr(c, B_LOSS), fz_fused_ptr(c, B_GXS),
        fz_fused_ptr(c, B_GWS), fz_fused_ptr(c, B_GBS));
    distil_testing_fail_allocations(-1);
    if (c->lend > 0) {
        distil_status u = distil_ctx_set_workspace(ctx, NULL, 0);
        fz_check_status(ctx, "ctx_set_workspace(NULL)", u, FZ_S(DISTIL_OK));
    }
    return s;
}

/* Row i of the batch takes part in the loss. */
static bool fz_fused_valid_row(const fz_fused *c, int64_t i) {
    if (!(c->present & (1u << B_LABELS))) {
        return true; /* no labels: every row counts */
    }
    int64_t l = ((const int64_t *)c->b[B_LABELS].host)[i];
    return l != c->d.ignore_index && l >= 0 && l < c->common;
}

/* One output after a successful call with rows > 0: all written, NaN-free when tame, and the
 * rows of grad_student_hidden that are ignored exactly 0. */
static void fz_fused_check_output(distil_ctx *ctx, fz_fused *c, int i) {
    fz_buf *b = &c->b[i];
    const bool f32 = i == B_LOSS || i == B_LSES || i == B_LSET;
    distil_dtype dt = f32 ? DISTIL_F32 : c->d.dtype;
    size_t es = f32 ? 4 : c->es;
    size_t n = i == B_LOSS ? (c->d.return_parts ? 3 : 1) : b->bytes / es;
    void *h = malloc(b->bytes);
    fz_buf_download(ctx, b, h);
    for (size_t k = 0; k < n; k++) {
        float v = fz_get_value(h, dt, k);
        if (fz_is_poison(h, dt, k) || (c->tame && isnan(v))) {
            fz_fail("fused: %s[%zu] = %g: %s", fz_names[i], k, v,
                    fz_is_poison(h, dt, k) ? "never written" : "NaN from tame inputs");
        }
        if (i == B_GXS && c->tame && !fz_fused_valid_row(c, (int64_t)(k / (size_t)c->hs)) &&
            v != 0.0f) {
            fz_fail("fused: grad_student_hidden of ignored row %zu is %g", k / (size_t)c->hs, v);
        }
    }
    free(h);
}

static void fz_fused_check_outputs(distil_ctx *ctx, fz_fused *c, distil_status s) {
    bool wrote = s == DISTIL_OK || s == DISTIL_ERR_INVALID_LABEL;
    for (int i = B_LOSS; i < B_COUNT; i++) {
        bool passed = (c->present & (1u << i)) != 0;
        if (!wrote || !passed || c->d.rows == 0) {
            bool may_write = s == DISTIL_ERR_OUT_OF_MEMORY || (wrote && i == B_LOSS && passed);
            if (!may_write && !fz_buf_unchanged(ctx, &c->b[i])) {
                fz_fail("fused: status %d but %s was written", (int)s, fz_names[i]);
            }
            continue;
        }
        fz_fused_check_output(ctx, c, i);
    }
    if (wrote && c->d.rows == 0) {
        float loss[3];
        fz_buf_download(ctx, &c->b[B_LOSS], loss);
        for (int k = 0; k < (c->d.return_parts ? 3 : 1); k++) {
            if (loss[k] != 0.0f) {
                fz_fail("fused: rows == 0 but loss[%d] = %g", k, loss[k]);
            }
        }
    }
}

/* Inputs untouched; outputs as the status says; a deferred label error reported exactly once. */
static void fz_fused_check_after(distil_ctx *ctx, fz_fused *c, distil_status s) {
    for (int i = 0; i <= B_LABELS; i++) {
        if (!fz_buf_unchanged(ctx, &c->b[i])) {
            fz_fail("fused: input %s was modified (status %d)", fz_names[i], (int)s);
        }
    }
    fz_fused_check_outputs(ctx, c, s);
    fz_statuses sync = FZ_S(DISTIL_OK);
    if (c->bad_label && (s == DISTIL_OK || s == DISTIL_ERR_OUT_OF_MEMORY)) {
        sync =
            s == DISTIL_OK ? FZ_S(DISTIL_ERR_INVALID_LABEL) : sync | FZ_S(DISTIL_ERR_INVALID_LABEL);
    }
    fz_mark_message(ctx);
    fz_check_status(ctx, "ctx_synchronize after fused", distil_ctx_synchronize(ctx), sync);
    fz_mark_message(ctx);
    fz_check_status(ctx, "second ctx_synchronize", distil_ctx_synchronize(ctx), FZ_S(DISTIL_OK));
}

/* The query must answer any descriptor, and never with a size that wrapped around. */
static void fz_fused_query(distil_ctx *ctx, fz_fused *c, int want_grads) {
    size_t bytes = 0;
    fz_statuses allowed = fz_fused_expect_desc(c);
    const distil_fused_linear_jsd_desc *d = &c->d;
    fz_mark_message(ctx);
    distil_status s =
        distil_fused_linear_jsd_workspace_size(ctx, c->desc_null ? NULL : d, want_grads, &bytes);
    if (allowed == FZ_S(DISTIL_OK) && !c->backed && s == DISTIL_ERR_INVALID_ARG) {
        fz_check_too_large(ctx, "fused_linear_jsd_workspace_size");
        return;
    }
    fz_check_status(ctx, "fused_linear_jsd_workspace_size", s, allowed);
    if (s == DISTIL_OK && d->rows > 0) {
        double chunk =
            d->chunk_rows > 0 ? (double)(d->chunk_rows < d->rows ? d->chunk_rows : d->rows) : 1.0;
        /* over the heads' common vocabulary prefix (docs/SPEC.md §6) */
        int64_t v =
            d->teacher_vocab > 0 && d->teacher_vocab < d->vocab ? d->teacher_vocab : d->vocab;
        double least = 2.0 * chunk * (double)v * 4.0;
        if ((double)bytes < least) {
            fz_fail("fused_linear_jsd_workspace_size: %zu bytes for rows %lld vocab %lld chunk "
                    "%lld: below the %g bytes of two fp32 logit chunks (size arithmetic wrapped)",
                    bytes, (long long)d->rows, (long long)d->vocab, (long long)d->chunk_rows,
                    least);
        }
    }
}

static void fz_fused_free(distil_ctx *ctx, fz_fused *c) {
    for (int i = 0; i < B_COUNT; i++) {
        fz_buf_free(ctx, &c->b[i]);
    }
    fz_buf_free(ctx, &c->work);
}

/* ---------------------------------------------------------------- numeric oracles */

/* The outputs of the last call: loss (3 floats) and the three gradient buffers, concatenated. */
static unsigned char *fz_fused_outputs(distil_ctx *ctx, fz_fused *c, size_t *n) {
    *n = 0;
    for (int i = B_LOSS; i < B_COUNT; i++) {
        *n += c->b[i].bytes;
    }
    unsigned char *h = malloc(*n), *at = h;
    if (h == NULL) {
        fz_fail("harness out of memory");
    }
    for (int i = B_LOSS; i < B_COUNT; i++) {
        fz_buf_download(ctx, &c->b[i], at);
        at += c->b[i].bytes;
    }
    return h;
}

/* The call again without faults, outputs re-poisoned; a label error is consumed. */
static void fz_fused_rerun(distil_ctx *ctx, fz_fused *c, const char *what) {
    for (int i = B_LOSS; i < B_COUNT; i++) {
        fz_buf_upload(ctx, &c->b[i]);
    }
    long fault = c->fault;
    c->fault = -1;
    fz_statuses ok = FZ_S(DISTIL_OK) | (c->bad_label ? FZ_S(DISTIL_ERR_INVALID_LABEL) : 0);
    fz_check_status(ctx, what, fz_fused_call(ctx, c), ok);
    fz_check_status(ctx, what, distil_ctx_synchronize(ctx), ok);
    c->fault = fault;
}

/* The same case on the ref context: its outputs, or NULL if the harness cannot allocate. */
static unsigned char *fz_fused_on_ref(const fz_fused *c, size_t *n) {
    distil_ctx *ref = fz_ref_context();
    fz_fused r = *c;
    r.lend = 0;
    r.work = (fz_buf){0};
    for (int i = 0; i < B_COUNT; i++) {
        r.b[i] = (fz_buf){0};
    }
    bool ok = true;
    for (int i = 0; ok && i < B_COUNT; i++) {
        ok = fz_buf_alloc(ref, &r.b[i], c->b[i].bytes);
        if (ok) {
            memcpy(r.b[i].host, c->b[i].host, c->b[i].bytes);
            fz_buf_upload(ref, &r.b[i]);
        }
    }
    unsigned char *out = NULL;
    if (ok) {
        fz_fused_rerun(ref, &r, "fused on ref");
        out = fz_fused_outputs(ref, &r, n);
    }
    fz_fused_free(ref, &r);
    return out;
}

/* The (rows) fp32 LSEs (docs/SPEC.md §6) within the loss bound; copied out first, since they sit
 * after the gradients in the concatenated outputs, not necessarily 4-byte aligned. */
static void fz_fused_compare_lse(const char *what, const unsigned char *got,
                                 const unsigned char *ref, size_t rows, distil_dtype dt) {
    float *g = malloc(rows * sizeof(float) + 1), *r = malloc(rows * sizeof(float) + 1);
    if (g == NULL || r == NULL) {
        fz_fail("harness out of memory");
    }
    memcpy(g, got, rows * sizeof(float));
    memcpy(r, ref, rows * sizeof(float));
    fz_parity_loss(what, g, r, rows, dt);
    free(g), free(r);
}

static void fz_fused_compare(const fz_fused *c, const unsigned char *got,
                             const unsigned char *ref) {
    fz_parity_loss("fused vs ref", (const float *)got, (const float *)ref,
                   c->d.return_parts ? 3 : 1, c->d.dtype);
    size_t at = c->b[B_LOSS].bytes;
    const int64_t shape[3][2] = {{c->rows, c->hs}, {c->vocab, c->hs}, {1, c->vocab}};
    for (int i = B_GXS; i < B_COUNT; i++) {
        if ((c->present & (1u << i)) && i >= B_LSES) {
            fz_fused_compare_lse(fz_names[i], got + at, ref + at, (size_t)c->rows, c->d.dtype);
        } else if (c->present & (1u << i)) {
            const int64_t *sh = shape[i - B_GXS];
            fz_parity_tensor(fz_names[i], got + at, ref + at, c->d.dtype, sh[0], sh[1], sh[1],
                             true);
        }
        at += c->b[i].bytes;
    }
}

/* Successful call on tame inputs: a rerun gives the same bits, and ref agrees. */
static void fz_fused_numeric(distil_ctx *ctx, fz_fused *c) {
    size_t n = 0, n2 = 0, nr = 0;
    unsigned char *first = fz_fused_outputs(ctx, c, &n);
    fz_fused_rerun(ctx, c, "fused rerun");
    unsigned char *second = fz_fused_outputs(ctx, c, &n2);
    fz_same_bits("fused", first, second, n);
    bool other = strcmp(distil_ctx_backend_name(ctx), "ref") != 0;
    unsigned char *ref = other ? fz_fused_on_ref(c, &nr) : NULL;
    if (ref != NULL) {
        fz_fused_compare(c, first, ref);
    }
    free(first), free(second), free(ref);
}

static void fz_fused_run(distil_ctx *ctx, fz_fused *c) {
    fz_statuses want = fz_fused_expect(c);
    fz_statuses allowed = want;
    if (want & FZ_S(DISTIL_OK)) {
        allowed |= (c->fault >= 0 ? FZ_S(DISTIL_ERR_OUT_OF_MEMORY) : 0) |
                   (c->lend > 0 ? FZ_S(DISTIL_ERR_WORKSPACE) : 0);
    }
    distil_status s = fz_fused_call(ctx, c);
    fz_check_status(ctx, "fused_linear_jsd", s, allowed);
    fz_fused_check_after(ctx, c, s);
    if ((s == DISTIL_OK || s == DISTIL_ERR_INVALID_LABEL) && c->tame) {
        fz_fused_numeric(ctx, c);
    }
    if (s == DISTIL_ERR_OUT_OF_MEMORY) { /* the context must work afterwards */
        for (int i = B_LOSS; i < B_COUNT; i++) {
            fz_buf_upload(ctx, &c->b[i]);
        }
        c->fault = -1;
        s = fz_fused_call(ctx, c);
        fz_check_status(ctx, "fused_linear_jsd after an allocation fault", s,
                        allowed & ~FZ_S(DISTIL_ERR_OUT_OF_MEMORY));
        fz_fused_check_after(ctx, c, s);
    }
}

/* DISTIL_FUZZ_VERBOSE=1: what the input decoded to, for reading a crash. */
static void fz_fused_print(const fz_fused *c, const char *backend) {
    const distil_fused_linear_jsd_desc *d = &c->d;
    fprintf(stderr,
            "fused on %s: struct_size %zu rows %lld vocab %lld hidden %lld %lld dtype %d "
            "weights %g %g beta %g tau %g ignore %lld chunk %lld parts %d heads %lld %lld %lld "
            "divergence %d alpha %g normaliser %g tau^2 %d scale %g %g cap %g %g tau_t %g "
            "precision %d | "
            "desc_null %d present 0x%x lend %zu fault %ld backed %d\n",
            backend, d->struct_size, (long long)d->rows, (long long)d->vocab,
            (long long)d->student_hidden, (long long)d->teacher_hidden, (int)d->dtype,
            (double)d->weight_hard, (double)d->weight_soft, (double)d->beta, (double)d->temperature,
            (long long)d->ignore_index, (long long)d->chunk_rows, d->return_parts,
            (long long)d->teacher_vocab, (long long)d->student_weight_hidden,
            (long long)d->teacher_weight_hidden, (int)d->divergence, (double)d->alpha,
            (double)d->normaliser, d->temperature_squared, (double)d->student_logit_scale,
            (double)d->teacher_logit_scale, (double)d->student_softcap, (double)d->teacher_softcap,
            (double)d->teacher_temperature, (int)d->teacher_head_precision, c->desc_null,
            c->present, c->lend, c->fault, c->backed);
}

void fz_case_fused(fz_in *in, distil_ctx *ctx) {
    fz_fused c;
    fz_fused_read(in, &c);
    c.no_fp8 = !distil_testing_capabilities(ctx).fp8_head;
    if (fz_verbose()) {
        fz_fused_print(&c, distil_ctx_backend_name(ctx));
    }
    fz_fused_query(ctx, &c, fz_bool(in));
    if (!c.backed) {
        fz_mark_message(ctx);
        distil_status s = distil_fused_linear_jsd(ctx, c.desc_null ? NULL : &c.d, NULL, NULL, NULL,
                                                  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        fz_statuses want = fz_fused_expect_desc(&c);
        fz_check_status(ctx, "fused_linear_jsd (unbacked, NULL data)", s,
                        want == FZ_S(DISTIL_OK) ? FZ_S(DISTIL_ERR_INVALID_ARG) : want);
        return;
    }
    if (fz_fused_alloc(ctx, &c)) {
        fz_fused_fill(in, ctx, &c);
        fz_fused_run(ctx, &c);
    }
    fz_fused_free(ctx, &c);
}
