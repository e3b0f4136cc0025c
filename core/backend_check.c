/*
 * backend_check.c - see backend_check.h. Each group of members is a list of (present, name); the
 * first absent one is the answer.
 */
#include "backend_check.h"

typedef struct distil_member {
    bool present;
    const char *name;
} distil_member;

/* A member of the main table, and one of a sub-table (named "sub->member"). */
#define DISTIL_OP(be, m)                                                                           \
    { (be)->m != NULL, #m }
#define DISTIL_SUB(sub, m)                                                                         \
    { (sub)->m != NULL, #sub "->" #m }

static const char *distil_member_absent(const distil_member *m, int n) {
    for (int i = 0; i < n; i++) {
        if (!m[i].present) {
            return m[i].name;
        }
    }
    return NULL;
}

/* All of m, or none: the first absent one when some are present. */
static const char *distil_members_paired(const distil_member *m, int n) {
    for (int i = 0; i < n; i++) {
        if (m[i].present) {
            return distil_member_absent(m, n);
        }
    }
    return NULL;
}

#define DISTIL_ABSENT(list) distil_member_absent((list), (int)(sizeof(list) / sizeof((list)[0])))
#define DISTIL_PAIRED(list) distil_members_paired((list), (int)(sizeof(list) / sizeof((list)[0])))

/* Life cycle and memory, and the kernels unless the backend computes every loss whole. */
static const char *distil_backend_lacks_main(const distil_backend *be) {
    const distil_member base[] = {
        {be->name != NULL, "name"},  DISTIL_OP(be, probe),    DISTIL_OP(be, create),
        DISTIL_OP(be, destroy),      DISTIL_OP(be, describe), DISTIL_OP(be, synchronize),
        DISTIL_OP(be, mem_alloc),    DISTIL_OP(be, mem_free), DISTIL_OP(be, mem_upload),
        DISTIL_OP(be, mem_download), DISTIL_OP(be, cast),     DISTIL_OP(be, fill),
        DISTIL_OP(be, scale)};
    const distil_member kernels[] = {DISTIL_OP(be, gemm),     DISTIL_OP(be, count_valid),
                                     DISTIL_OP(be, div_rows), DISTIL_OP(be, fused_rows),
                                     DISTIL_OP(be, reduce),   DISTIL_OP(be, head_rows),
                                     DISTIL_OP(be, topk_rows)};
    const char *lacks = DISTIL_ABSENT(base);
    return lacks != NULL || be->whole != NULL ? lacks : DISTIL_ABSENT(kernels);
}

/* (each sub-table: NULL is complete) */
static const char *distil_backend_lacks_whole(const distil_backend_whole *whole) {
    if (whole == NULL) {
        return NULL;
    }
    const distil_member m[] = {DISTIL_SUB(whole, jsd), DISTIL_SUB(whole, fused_linear_jsd),
                               DISTIL_SUB(whole, topk)};
    return DISTIL_ABSENT(m);
}

static const char *distil_backend_lacks_side(const distil_backend_side *side) {
    if (side == NULL) {
        return NULL;
    }
    const distil_member m[] = {DISTIL_SUB(side, begin), DISTIL_SUB(side, end),
                               DISTIL_SUB(side, join)};
    return DISTIL_ABSENT(m);
}

static const char *distil_backend_lacks_tp(const distil_backend_tp *tp) {
    if (tp == NULL) {
        return NULL;
    }
    const distil_member m[] = {DISTIL_SUB(tp, tp_rows)};
    return DISTIL_ABSENT(m);
}

/* gemm_e4m3 unless the fused loss is computed whole; the header op on a device backend. */
static const char *distil_backend_lacks_fp8(const distil_backend *be) {
    const distil_backend_fp8 *fp8 = be->fp8;
    if (fp8 == NULL) {
        return NULL;
    }
    const int eb = be->tuning.e4m3_bytes;
    const distil_member m[] = {DISTIL_SUB(fp8, quant_rows),
                               {fp8->gemm_e4m3 != NULL || be->whole != NULL, "fp8->gemm_e4m3"},
                               {fp8->e4m3_header != NULL || be->host_memory, "fp8->e4m3_header"},
                               {eb == 1 || eb == 2, "tuning.e4m3_bytes (1 or 2)"}};
    return DISTIL_ABSENT(m);
}

/* Each pair of ops whole or absent, and not both absent (an empty table). */
static const char *distil_backend_lacks_epilogue(const distil_backend *be) {
    const distil_backend_epilogue *epilogue = be->epilogue;
    if (epilogue == NULL) {
        return NULL;
    }
    const distil_member stats[] = {DISTIL_SUB(epilogue, stats_fit), DISTIL_SUB(epilogue, stats_ok),
                                   DISTIL_SUB(epilogue, gemm_stats)};
    const distil_member cast[] = {DISTIL_SUB(epilogue, cast_ok), DISTIL_SUB(epilogue, gemm_cast)};
    const char *lacks = DISTIL_PAIRED(stats);
    lacks = lacks != NULL ? lacks : DISTIL_PAIRED(cast);
    if (lacks == NULL && epilogue->gemm_stats != NULL && be->tuning.stats_cols <= 0) {
        lacks = "tuning.stats_cols";
    }
    if (lacks == NULL && epilogue->gemm_stats == NULL && epilogue->gemm_cast == NULL) {
        lacks = "epilogue->gemm_stats or epilogue->gemm_cast";
    }
    return lacks;
}

const char *distil_backend_lacks(const distil_backend *be) {
    if (be->api_version != DISTIL_BACKEND_API_VERSION) {
        return "api_version (DISTIL_BACKEND_API_VERSION)";
    }
    const char *checks[] = {
        distil_backend_lacks_main(be),       distil_backend_lacks_whole(be->whole),
        distil_backend_lacks_side(be->side), distil_backend_lacks_tp(be->tp),
        distil_backend_lacks_fp8(be),        distil_backend_lacks_epilogue(be)};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (checks[i] != NULL) {
            return checks[i];
        }
    }
    return NULL;
}
