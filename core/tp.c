/* tp.c - the vocabulary shard of docs/SPEC.md §8: its initialiser and its checks. */
#include "tp.h"

#include "error.h"
#include "validate.h"

void distil_vocab_shard_init(distil_vocab_shard *shard) {
    if (shard == NULL) {
        return;
    }
    distil_vocab_shard s = {0};
    s.struct_size = sizeof s;
    *shard = s;
}

distil_status distil_tp_check(distil_ctx *ctx, const char *fn, const distil_vocab_shard *shard,
                              int64_t vocab, bool need_comm, distil_tp *out) {
    DISTIL_TRY(distil_check_not_null(ctx, fn, "shard", shard));
    DISTIL_TRY(distil_check_struct_size(ctx, fn, "shard", shard->struct_size, sizeof *shard,
                                        "distil_vocab_shard_init"));
    DISTIL_TRY(distil_check_min(ctx, fn, "shard.vocab_offset", shard->vocab_offset, 0));
    if (shard->vocab_total < 1 || shard->vocab_offset > shard->vocab_total - vocab) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: shard: vocab_offset %lld + vocab %lld > vocab_total %lld", fn,
                                (long long)shard->vocab_offset, (long long)vocab,
                                (long long)shard->vocab_total);
    }
    if (need_comm) {
        DISTIL_TRY(distil_check_not_null(ctx, fn, "shard.comm", shard->comm));
        DISTIL_TRY(distil_comm_check(ctx, fn, shard->comm));
    }
    *out = (distil_tp){.offset = shard->vocab_offset,
                       .total = shard->vocab_total,
                       .comm = need_comm ? shard->comm : NULL};
    return DISTIL_OK;
}
