/*
 * ref_backend.c - the "ref" backend's vtable: host memory, life cycle, fill / cast, and the two
 * whole-loss ops of ref_jsd.c and ref_fused.c. Always compiled in; always has one device.
 */
#include "fault.h"
#include "host_memory.h"
#include "ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static distil_status distil_ref_probe(int *n_devices) {
    *n_devices = 1;
    return DISTIL_OK;
}

static distil_status distil_ref_create(distil_ctx *ctx, int device, void **b) {
    distil_ref_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "ref: out of host memory");
    }
    st->ctx = ctx;
    st->bad_label_row = -1;
    *b = st;
    return DISTIL_OK;
}

static void distil_ref_destroy(void *b) {
    free(b);
}

static void distil_ref_describe(void *b, char *buf, size_t n) {
    snprintf(buf, n, "float64 reference (host)");
}

static distil_status distil_ref_synchronize(void *b) {
    distil_ref_state *st = b;
    if (st->bad_label_row < 0) {
        return DISTIL_OK;
    }
    int64_t row = st->bad_label_row;
    st->bad_label_row = -1;
    if (st->bad_kind == DISTIL_REF_BAD_ID_TWICE) {
        return distil_error_set(st->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld twice", (long long)row,
                                (long long)st->bad_label);
    }
    if (st->bad_kind == DISTIL_REF_BAD_ID_RANGE) {
        return distil_error_set(st->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld outside [0, vocab)",
                                (long long)row, (long long)st->bad_label);
    }
    return distil_error_set(st->ctx, DISTIL_ERR_INVALID_LABEL,
                            "labels: row %lld has label %lld outside [0, vocab)", (long long)row,
                            (long long)st->bad_label);
}

static distil_status distil_ref_alloc(void *b, size_t bytes, void **ptr) {
    return distil_host_alloc(((distil_ref_state *)b)->ctx, "ref", bytes, ptr);
}

static distil_status distil_ref_fill(void *b, const distil_fill_args *a) {
    for (int64_t i = 0; i < a->count; i++) {
        distil_ref_store(distil_dptr_addr(a->dst), a->dtype, i, a->value);
    }
    return DISTIL_OK;
}

static distil_status distil_ref_scale(void *b, const distil_scale_args *a) {
    const float s = *(const float *)distil_dptr_addr(a->scale);
    if (s == 1.0f) {
        return DISTIL_OK;
    }
    /* The product in fp32, as every backend forms it, then rounded once more to the dtype. */
    for (int64_t i = 0; i < a->count; i++) {
        float v = (float)distil_ref_load(distil_dptr_addr(a->x), a->dtype, i) * s;
        distil_ref_store(distil_dptr_addr(a->x), a->dtype, i, v);
    }
    return DISTIL_OK;
}

static distil_status distil_ref_cast(void *b, const distil_cast_args *a) {
    for (int64_t i = 0; i < a->count; i++) {
        double v = distil_ref_load(distil_dptr_addr(a->src), a->src_dtype, i);
        distil_ref_store(distil_dptr_addr(a->dst), a->dst_dtype, i, v);
    }
    return DISTIL_OK;
}

/* Every loss computed whole, in float64 (ref_jsd.c, ref_fused.c, ref_topk.c). */
static const distil_backend_whole distil_ref_whole = {
    .jsd = distil_ref_jsd,
    .fused_linear_jsd = distil_ref_fused,
    .topk = distil_ref_topk,
};

/* distil_e4m3_head_make's rows (ref_fp8.c); the whole fused loss makes its own. */
static const distil_backend_fp8 distil_ref_fp8 = {.quant_rows = distil_ref_quant_rows};

const distil_backend distil_backend_ref = {
    .api_version = DISTIL_BACKEND_API_VERSION,
    .name = "ref",
    .priority = 0,
    .host_memory = true,
    /* The whole ops ignore the core's chunk workspace: keep it one row small. */
    .tuning = {.chunk = {.min_rows = 1, .max_rows = 1}, .e4m3_bytes = 1},
    .probe = distil_ref_probe,
    .create = distil_ref_create,
    .destroy = distil_ref_destroy,
    .describe = distil_ref_describe,
    .synchronize = distil_ref_synchronize,
    .mem_alloc = distil_ref_alloc,
    .mem_free = distil_host_free,
    .mem_upload = distil_host_upload,
    .mem_download = distil_host_download,
    .cast = distil_ref_cast,
    .fill = distil_ref_fill,
    .scale = distil_ref_scale,
    .whole = &distil_ref_whole,
    .fp8 = &distil_ref_fp8,
};
