/*
 * fused_fp8.c - the fp8 teacher head (docs/SPEC.md §6) as the entry point and distil_e4m3_head_make
 * see it, see fused_fp8.h: the checks, a head's layout and header. Its teacher source, which the
 * chunk loop runs, is fused_teacher_fp8.c.
 */
#include "fused_fp8.h"

#include "error.h"
#include "fused_head.h"
#include "validate.h"

#include <stdint.h>
#include <string.h>

_Static_assert(sizeof(distil_e4m3_header) == 32, "the head's header is 32 bytes (fused_fp8.h)");

distil_status distil_e4m3_head_check_size(distil_ctx *ctx, const char *fn, const char *name,
                                          int64_t rows, int64_t cols) {
    DISTIL_TRY(distil_check_size(ctx, fn, name, rows, cols, 4)); /* before the 16-rounding */
    return distil_check_size(ctx, fn, name, rows, distil_e4m3_ld(cols), 4);
}

distil_e4m3_layout distil_e4m3_head_layout(int eb, int64_t rows, int64_t cols) {
    distil_e4m3_layout l;
    l.ld = distil_e4m3_ld(cols);
    l.off_codes = sizeof(distil_e4m3_header);
    /* a multiple of 16 bytes (ld is): the scales follow with no gap, 16-byte aligned */
    l.off_scale = l.off_codes + (size_t)rows * (size_t)l.ld * (size_t)eb;
    l.bytes = l.off_scale + (size_t)rows * sizeof(float);
    return l;
}

distil_e4m3_header distil_e4m3_head_header(int eb, int64_t rows, int64_t cols) {
    const distil_e4m3_header h = {.magic = DISTIL_E4M3_HEAD_MAGIC,
                                  .layout = DISTIL_E4M3_HEAD_LAYOUT,
                                  .e4m3_bytes = eb,
                                  .reserved = 0,
                                  .rows = rows,
                                  .cols = cols};
    return h;
}

distil_status distil_e4m3_head_write_header(distil_ctx *ctx, void *head, int64_t rows,
                                            int64_t cols) {
    const distil_e4m3_header h = distil_e4m3_head_header(ctx->be->tuning.e4m3_bytes, rows, cols);
    if (ctx->be->host_memory) {
        memcpy(head, &h, sizeof h);
        return DISTIL_OK;
    }
    /* e4m3_head.c refused a device backend without the op */
    const distil_e4m3_header_args a = {.head = distil_dptr_make(head, 0), .want = h, .write = true};
    return ctx->be->fp8->e4m3_header(ctx->b, &a);
}

distil_status distil_e4m3_head_check_align(distil_ctx *ctx, const char *fn, const char *arg,
                                           const void *head) {
    if ((uintptr_t)head % 16 != 0) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG, "%s: %s %p is not 16-byte aligned", fn,
                                arg, head);
    }
    return DISTIL_OK;
}

/* The head made once: given only with the fp8 head, on a backend that makes heads, 16-byte
 * aligned and of the size this backend makes for Wt (its header is checked by the call:
 * distil_fused_fp8_check_given, distil_fused_fp8_weights). */
static distil_status distil_fused_fp8_check_head(distil_ctx *ctx, const char *fn,
                                                 const distil_fused_linear_jsd_desc *d) {
    if (d->teacher_weight_e4m3 == NULL) {
        return DISTIL_OK;
    }
    if (d->teacher_head_precision != DISTIL_HEAD_PRECISION_FP8_E4M3) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3 is given but teacher_head_precision is "
                                "not FP8_E4M3",
                                fn);
    }
    const distil_backend *be = ctx->be;
    if (be->fp8 == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: teacher_weight_e4m3: backend '%s' makes no fp8 teacher head",
                                fn, be->name);
    }
    DISTIL_TRY(
        distil_e4m3_head_check_align(ctx, fn, "teacher_weight_e4m3", d->teacher_weight_e4m3));
    /* (Vt, Ht) passed distil_e4m3_head_check_size in distil_fused_fp8_check, before this */
    const int64_t vt = distil_fused_teacher_vocab(d);
    const size_t want = distil_e4m3_head_layout(be->tuning.e4m3_bytes, vt, d->teacher_hidden).bytes;
    if (d->teacher_weight_e4m3_bytes != want) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3_bytes %zu != %zu, distil_e4m3_head_size "
                                "of the teacher's head (%lld rows, %lld columns) on backend '%s'",
                                fn, d->teacher_weight_e4m3_bytes, want, (long long)vt,
                                (long long)d->teacher_hidden, be->name);
    }
    return DISTIL_OK;
}

void distil_fused_fp8_given(const distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                            distil_teacher_e4m3 *q) {
    if (d->teacher_weight_e4m3 == NULL) { /* checked: only with fp8 */
        return;
    }
    const distil_e4m3_layout l = distil_e4m3_head_layout(ctx->be->tuning.e4m3_bytes,
                                                         distil_fused_teacher_vocab(d), q->head.ht);
    q->wq_head = distil_dptr_make(d->teacher_weight_e4m3, 0);
    q->wq_bytes = d->teacher_weight_e4m3_bytes;
    q->wq = distil_dptr_add(q->wq_head, l.off_codes);
    q->wq_ld = l.ld;
    q->wq_scale = distil_dptr_add(q->wq_head, l.off_scale);
}

distil_status distil_fused_fp8_check_given(distil_ctx *ctx, const char *fn,
                                           const distil_fused_args *a,
                                           const distil_teacher_e4m3 *q) {
    if (!distil_dptr_present(q->wq_head) || !ctx->be->host_memory) {
        return DISTIL_OK; /* a device backend compares it on the device (fused_teacher_fp8.c) */
    }
    const int eb = ctx->be->tuning.e4m3_bytes;
    const distil_e4m3_header want = distil_e4m3_head_header(eb, a->teacher_vocab, q->head.ht);
    distil_e4m3_header got;
    memcpy(&got, distil_dptr_addr(q->wq_head), sizeof got);
    if (got.magic != want.magic || got.layout != want.layout) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3 is not a head of distil_e4m3_head_make "
                                "(no header of layout %u): made for another shape / backend, or "
                                "not a head",
                                fn, DISTIL_E4M3_HEAD_LAYOUT);
    }
    if (got.e4m3_bytes != want.e4m3_bytes || got.rows != want.rows || got.cols != want.cols ||
        got.reserved != 0) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_weight_e4m3 was made for another shape / backend: "
                                "%lld rows, %lld columns, %d-byte codes; this call's teacher "
                                "head has %lld rows, %lld columns, and backend '%s' %d-byte codes",
                                fn, (long long)got.rows, (long long)got.cols, (int)got.e4m3_bytes,
                                (long long)want.rows, (long long)want.cols, ctx->be->name, eb);
    }
    return DISTIL_OK;
}

distil_status distil_fused_fp8_check(distil_ctx *ctx, const char *fn,
                                     const distil_fused_linear_jsd_desc *d) {
    const distil_head_precision h = d->teacher_head_precision;
    if (h == DISTIL_HEAD_PRECISION_DEFAULT) {
        return distil_fused_fp8_check_head(ctx, fn, d); /* refuses a head made once */
    }
    if (h != DISTIL_HEAD_PRECISION_FP8_E4M3) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: teacher_head_precision %d is not DEFAULT (0) or FP8_E4M3 (1)",
                                fn, (int)h);
    }
    const distil_backend *be = ctx->be;
    if (!distil_backend_has_fp8_head(be)) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: teacher_head_precision FP8_E4M3: backend '%s' has no fp8 "
                                "teacher head",
                                fn, be->name);
    }
    /* The plan's e4m3 regions (fused_teacher_fp8.c) before anything rounds their rows to 16: Wt's
     * rows and a chunk's rows of xt (up to all rows), each with its scales. */
    DISTIL_TRY(distil_e4m3_head_check_size(ctx, fn, "teacher_weight", distil_fused_teacher_vocab(d),
                                           d->teacher_hidden));
    DISTIL_TRY(distil_e4m3_head_check_size(ctx, fn, "teacher_hidden", d->rows, d->teacher_hidden));
    return distil_fused_fp8_check_head(ctx, fn, d);
}
