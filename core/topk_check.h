/*
 * topk_check.h - the argument rules of the cached top-k teacher (docs/SPEC.md §5, §7), shared by
 * both top-k entry points (topk.c, fused_linear_topk.c).
 */
#ifndef DISTIL_CORE_TOPK_CHECK_H
#define DISTIL_CORE_TOPK_CHECK_H

#include "backend.h"

/* The teacher fields of either descriptor, gathered for the checks. */
typedef struct distil_topk_fields {
    int64_t rows, vocab, k, pad_id;
    distil_dtype teacher_dtype;
    distil_id_dtype id_dtype;
    distil_topk_tail tail;
    distil_divergence divergence;
    float beta, alpha, normaliser;
    const float *normaliser_device;
} distil_topk_fields;

/* The cached teacher's defaults of docs/SPEC.md §7, the same in both descriptors (d: either). */
#define DISTIL_TOPK_TEACHER_DEFAULTS(d)                                                            \
    do {                                                                                           \
        (d).teacher_dtype = DISTIL_F32;                                                            \
        (d).id_dtype = DISTIL_IDS_I64;                                                             \
        (d).pad_id = -1;                                                                           \
        (d).tail = DISTIL_TOPK_TAIL;                                                               \
        (d).divergence = DISTIL_DIVERGENCE_FORWARD_KL;                                             \
        (d).beta = 0.5f;                                                                           \
        (d).alpha = 0.1f;                                                                          \
    } while (0)

/* The dtypes, the tail policy, the divergence (any of docs/SPEC.md §6) and alpha, k in [1, vocab],
 * pad_id outside [0, vocab), beta, the normaliser (finite, >= 0, not both forms), and the (rows,
 * k) sizes. */
distil_status distil_topk_check_fields(distil_ctx *ctx, const char *fn,
                                       const distil_topk_fields *f);

/* The teacher of a call (ids, logp as given). */
distil_topk_teacher distil_topk_teacher_of(const distil_topk_fields *f, const void *ids,
                                           const void *logp);

/* Bytes of the (rows, k) ids and log-probs. */
size_t distil_topk_ids_bytes(const distil_topk_fields *f);
size_t distil_topk_logp_bytes(const distil_topk_fields *f);

#endif /* DISTIL_CORE_TOPK_CHECK_H */
