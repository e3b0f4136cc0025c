/*
 * ctx.h - the context as the core sees it (internal; the public type is opaque).
 * A context binds one backend and one device, owns the backend's state, the last-error message
 * and the workspace (its own, grown lazily, or one lent by the caller).
 */
#ifndef DISTIL_CORE_CTX_H
#define DISTIL_CORE_CTX_H

#include "backend.h"

#include <stdatomic.h>

#define DISTIL_MSG_BYTES 1024

struct distil_ctx {
    const distil_backend *be;
    void *b; /* backend state */
    char device_name[128];
    char msg[DISTIL_MSG_BYTES];
    void *work_own; /* the context's own workspace, allocated by the backend */
    size_t work_own_bytes;
    void *work_lent; /* workspace lent by the caller, or NULL */
    size_t work_lent_bytes;
    /* A deferred error (invalid label) that an internal wait collected before the caller's
     * distil_ctx_synchronize did: kept here so that the caller still gets it, once. */
    distil_status deferred;
    char deferred_msg[DISTIL_MSG_BYTES];
    /* 1 while a public call runs on the context: a second thread that enters meanwhile is
     * refused (distil_ctx_enter) instead of racing on the backend state. */
    atomic_int busy;
    /* DISTIL_GW_CHUNKS at creation (chunks per weight-gradient GEMM of the fused loss), 0 when
     * unset: the backend's policy then (distil_fused_gw_chunks). */
    int gw_chunks_env;
};

/* be's device table, or an empty one (each of its members may be NULL anyway). */
static inline const distil_backend_device *distil_backend_device_of(const distil_backend *be) {
    static const distil_backend_device none = {0};
    return be->device != NULL ? be->device : &none;
}

/* Whether be can take a teacher head in fp8 (docs/SPEC.md §6): its fp8 sub-table, or a whole op
 * that computes the call itself. */
static inline bool distil_backend_has_fp8_head(const distil_backend *be) {
    return be->whole != NULL || be->fp8 != NULL;
}

/* Enter ctx for the public call fn (a NULL ctx passes: the call reports it): DISTIL_ERR_BUSY, with
 * the message on the calling thread (distil_ctx_last_error(NULL): the context's buffer belongs to
 * the thread inside), when another call is running on it. Every DISTIL_OK is paired with one
 * distil_ctx_leave. */
distil_status distil_ctx_enter(distil_ctx *ctx, const char *fn);
void distil_ctx_leave(distil_ctx *ctx);

/* Return `call` (an expression giving a status), run inside enter / leave. */
#define DISTIL_GUARDED(ctx, fn, call)                                                              \
    do {                                                                                           \
        DISTIL_TRY(distil_ctx_enter((ctx), (fn)));                                                 \
        distil_status distil_guarded_s_ = (call);                                                  \
        distil_ctx_leave(ctx);                                                                     \
        return distil_guarded_s_;                                                                  \
    } while (0)

/* Wait for the context's queued work. A deferred invalid label is kept for the caller's next
 * distil_ctx_synchronize instead of failing the call that waited; other failures return. */
distil_status distil_ctx_wait(distil_ctx *ctx);

#endif /* DISTIL_CORE_CTX_H */
