/*
 * chunk.h - the chunk planner of the fused loss (pure: no context, no allocation).
 *
 * Workspace layout, every region aligned to DISTIL_WORKSPACE_ALIGN bytes:
 *   fixed    n (1 fp32) | ce (T) fp32 | soft (T) fp32 | gw (V, Hs) fp32 | gb (V) fp32 |
 *            labels (T) int64
 *   chunk    zs (C, V) fp32 | zt (C, V) fp32 | g (K C, V) g_dtype | ones (C) dtype |
 *            dz (C, V) fp32 | the teacher source's regions | stats 4 x (tiles, C) fp32
 * soft holds each row's soft part (its divergence). zt exists only for a teacher source with
 * logits (a cached top-k teacher, docs/SPEC.md §7, has none). dz (docs/SPEC.md §6) exists only
 * with gradients and a scaled or capped student head. The teacher source's regions are its own
 * (the fp8 teacher head, docs/SPEC.md §6: Wt's e4m3 rows and scales per call, the chunk's xt
 * rows and scales per chunk; core/fused_teacher_fp8.c), each call_bytes + C row_bytes.
 * gw / gb exist only when that gradient is wanted, the dtype is not F32 (an F32 output is
 * accumulated in place) and there is more than one chunk (one chunk writes grad_Ws / grad_bs in
 * the output dtype directly, rounded once, beta = 0: no accumulator); g exists only when gradients
 * are wanted and is not in place (an F32 logit gradient of one-chunk groups overwrites zs). K =
 * gw_chunks: G of K chunks, one slot a chunk, for one grad_Ws GEMM over their K C rows (docs/
 * DESIGN.md "Weight-gradient groups"); gw is needed only when there are more chunks than one
 * group holds. ones only when grad_bs is wanted; labels only without a hard part (weight_hard ==
 * 0), where the caller may give no labels and the core stands in a row of zeros (every row
 * counts); stats only with the shape's stats_cols (tiles = ceil(V / stats_cols)).
 */
#ifndef DISTIL_CORE_CHUNK_H
#define DISTIL_CORE_CHUNK_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Regions a teacher source may ask of the plan, in this order after dz. */
enum { DISTIL_TEACHER_REGIONS = 4 };

/* A region of call_bytes plus row_bytes per chunk row (0 and 0: none). */
typedef struct distil_region_ask {
    size_t call_bytes, row_bytes;
} distil_region_ask;

typedef struct distil_fused_shape {
    int64_t rows, vocab, hs;
    distil_dtype dtype;   /* of the inputs and the gradient outputs */
    distil_dtype g_dtype; /* of the logit gradient G: F32, or dtype (see fp32_gemm in backend.h) */
    bool want_gx, want_gw, want_gb;
    bool gw_f32;     /* grad_Ws and grad_bs are fp32 outputs: their own accumulators */
    bool own_labels; /* weight_hard == 0: room for labels of the core's own */
    bool want_dz;    /* the student's head scaled or capped, with gradients: room for dz'/dz */
    /* The teacher source's part (its shape op): zt, a (C, V) fp32 region for the teacher's
     * logits; its own regions. */
    bool zt;
    distil_region_ask teacher[DISTIL_TEACHER_REGIONS];
    /* Row statistics from the logits GEMMs (docs/DESIGN.md): columns per tile, 0: none */
    int stats_cols;
    /* Chunks per weight-gradient GEMM (distil_fused_gw_chunks); 0, 1: one */
    int gw_chunks;
} distil_fused_shape;

typedef struct distil_fused_plan {
    int64_t chunk_rows;
    distil_dtype g_dtype; /* the shape's */
    bool g_in_place;      /* G (F32) overwrites zs (groups of one chunk only) */
    int64_t gw_chunks;    /* chunks per grad_Ws GEMM: G slots, each C rows (1 without grad_Ws) */
    bool gw_acc, gb_acc;  /* fp32 accumulators in the workspace (several chunks or groups, half
                             dtype) */
    size_t off_n, off_ce, off_soft, off_gw, off_gb, off_labels, off_zs, off_zt, off_g, off_ones;
    size_t off_dz; /* (C, V) fp32 dz'/dz of the student's head (docs/SPEC.md §6), want_dz only */
    size_t off_teacher[DISTIL_TEACHER_REGIONS]; /* the shape's teacher regions */
    /* Row statistics (stats_cols only): four (stats_tiles, C) fp32 planes, zs's maxima and sums,
     * zt's maxima and sums, stats_plane floats apart from off_stats. */
    int64_t stats_tiles;
    size_t off_stats, stats_plane;
    size_t bytes;
} distil_fused_plan;

/* The one chunk-size policy: the largest power of two C in [min_rows, max_rows] of the backend's
 * policy (the core's default when it states none: max_rows == 0) whose fp32 logit blocks zs and
 * zt (8 C V bytes) fit its logit_bytes, then clamped to [1, rows]. */
int64_t distil_chunk_rows(const distil_chunk_policy *policy, int64_t rows, int64_t vocab);

/* Lay out the workspace for chunk_rows (clamped to [1, rows]). */
void distil_chunk_plan(const distil_fused_shape *s, int64_t chunk_rows, distil_fused_plan *p);

/* The plan of chunk_rows with the shape's weight-gradient groups where it fits in `available`
 * bytes, else with groups of one (groups are a speed choice; the chunk comes first). */
void distil_chunk_plan_within(const distil_fused_shape *s, int64_t chunk_rows, size_t available,
                              distil_fused_plan *p);

/* The largest chunk <= preferred whose plan fits in `available` bytes, with the shape's
 * weight-gradient groups where they fit at the preferred chunk, else with groups of one chunk;
 * false when even one row does not fit (p then holds the one-row plan). */
bool distil_chunk_plan_fit(const distil_fused_shape *s, int64_t preferred, size_t available,
                           distil_fused_plan *p);

#endif /* DISTIL_CORE_CHUNK_H */
