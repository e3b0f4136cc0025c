/*
 * e4m3_head.c - the public entry points distil_e4m3_head_size and distil_e4m3_head_make: a frozen
 * teacher's head rounded to e4m3 once (docs/SPEC.md §6), by the same backend quant_rows that a
 * fused call runs on Wt itself, so that a fused call given the head computes the same bits.
 * Layout (fused_fp8.h, distil_e4m3_head_layout): a 32-byte header naming what the head was made
 * for (checked by every fused call given it), codes (rows, distil_e4m3_ld(cols)) in the backend's
 * e4m3 form, then the scales (rows) fp32.
 */
#include "ctx.h"
#include "error.h"
#include "fused_fp8.h"
#include "overlap.h"
#include "validate.h"

static const char *const fn_size = "e4m3_head_size";
static const char *const fn_make = "e4m3_head_make";

/* rows, cols >= 1 and their bytes representable; the backend rounds to e4m3. */
static distil_status distil_e4m3_head_check(distil_ctx *ctx, const char *fn, int64_t rows,
                                            int64_t cols) {
    DISTIL_TRY(distil_check_min(ctx, fn, "rows", rows, 1));
    DISTIL_TRY(distil_check_min(ctx, fn, "cols", cols, 1));
    /* cols first: distil_e4m3_ld(cols) must not overflow (cols near INT64_MAX wrapped it) */
    DISTIL_TRY(distil_e4m3_head_check_size(ctx, fn, "weight", rows, cols));
    if (ctx->be->fp8 == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "%s: backend '%s' has no fp8 teacher head", fn, ctx->be->name);
    }
    return DISTIL_OK;
}

static distil_status distil_e4m3_head_size_call(distil_ctx *ctx, int64_t rows, int64_t cols,
                                                size_t *bytes) {
    DISTIL_TRY(distil_check_not_null(ctx, fn_size, "bytes", bytes));
    DISTIL_TRY(distil_e4m3_head_check(ctx, fn_size, rows, cols));
    *bytes = distil_e4m3_head_layout(ctx->be->tuning.e4m3_bytes, rows, cols).bytes;
    return DISTIL_OK;
}

distil_status distil_e4m3_head_size(distil_ctx *ctx, int64_t rows, int64_t cols, size_t *bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn_size);
    }
    DISTIL_GUARDED(ctx, fn_size, distil_e4m3_head_size_call(ctx, rows, cols, bytes));
}

static distil_status distil_e4m3_head_make_call(distil_ctx *ctx, distil_dtype dtype,
                                                const void *weight, int64_t rows, int64_t cols,
                                                void *head, size_t bytes) {
    DISTIL_TRY(distil_check_dtype(ctx, fn_make, "dtype", dtype));
    DISTIL_TRY(distil_e4m3_head_check(ctx, fn_make, rows, cols));
    const distil_e4m3_layout l = distil_e4m3_head_layout(ctx->be->tuning.e4m3_bytes, rows, cols);
    const size_t want = l.bytes;
    if (bytes != want) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: bytes %zu != %zu, distil_e4m3_head_size of %lld rows and "
                                "%lld columns",
                                fn_make, bytes, want, (long long)rows, (long long)cols);
    }
    DISTIL_TRY(distil_e4m3_head_check_align(ctx, fn_make, "head", head));
    const size_t es = distil_dtype_size(dtype);
    const distil_ptr_rule ptrs[] = {
        {"weight", distil_dptr_make(weight, 0), true, (size_t)(rows * cols) * es, false},
        {"head", distil_dptr_make(head, 0), true, bytes, true},
    };
    DISTIL_TRY(distil_ptr_rules_present(ctx, fn_make, ptrs, 2));
    /* Sizes and overlap of the two; not against a lent workspace, which this call does not use
     * (a fused call given the head checks it against its workspace). */
    const distil_span s[2] = {{"weight", weight, ptrs[0].bytes, false},
                              {"head", head, bytes, true}};
    DISTIL_TRY(distil_spans_check(ctx, fn_make, s, 2, -1, -1));
    const distil_quant_rows_args q = {.src = ptrs[0].p,
                                      .src_ld = cols,
                                      .src_dtype = dtype,
                                      .rows = rows,
                                      .cols = cols,
                                      .dst = distil_dptr_add(ptrs[1].p, l.off_codes),
                                      .dst_ld = l.ld,
                                      .scale = distil_dptr_add(ptrs[1].p, l.off_scale)};
    DISTIL_TRY(ctx->be->fp8->quant_rows(ctx->b, &q));
    return distil_e4m3_head_write_header(ctx, head, rows, cols);
}

distil_status distil_e4m3_head_make(distil_ctx *ctx, distil_dtype dtype, const void *weight,
                                    int64_t rows, int64_t cols, void *head, size_t bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: ctx is NULL", fn_make);
    }
    DISTIL_GUARDED(ctx, fn_make,
                   distil_e4m3_head_make_call(ctx, dtype, weight, rows, cols, head, bytes));
}
