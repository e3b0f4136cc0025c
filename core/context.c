/*
 * context.c - context life cycle, stream binding, synchronisation and the lent workspace.
 */
#include "ctx.h"
#include "error.h"
#include "overlap.h"
#include "registry.h"
#include "validate.h"
#include "workspace.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ; /* POSIX: the application declares it */

/* device == -1: DISTIL_DEVICE, else 0. The index must be one the backend has. */
static distil_status distil_ctx_pick_device(const distil_backend *be, int device, int *out) {
    if (device == -1) {
        const char *env = getenv("DISTIL_DEVICE");
        char *end = NULL;
        device = 0;
        if (env != NULL && env[0] != '\0') {
            long v = strtol(env, &end, 10);
            if (*end != '\0' || v < 0 || v > 1 << 20) {
                return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                        "ctx_create: DISTIL_DEVICE '%s' is not a device index",
                                        env);
            }
            device = (int)v;
        }
    }
    int n = 0;
    (void)distil_backend_device_count(be->name, &n);
    if (device < 0 || device >= n) {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "ctx_create: device %d of backend '%s' does not exist (%d found)",
                                device, be->name, n);
    }
    *out = device;
    return DISTIL_OK;
}

/* DISTIL_GW_CHUNKS, chunks per weight-gradient GEMM of the fused loss: 1 to DISTIL_GW_CHUNKS_MAX,
 * or 0 when unset. */
#define DISTIL_GW_CHUNKS_MAX 16
static distil_status distil_ctx_pick_gw_chunks(int *out) {
    const char *env = getenv("DISTIL_GW_CHUNKS");
    *out = 0;
    if (env == NULL || env[0] == '\0') {
        return DISTIL_OK;
    }
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (*end != '\0' || v < 1 || v > DISTIL_GW_CHUNKS_MAX) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "ctx_create: DISTIL_GW_CHUNKS '%s' is not a count in [1, %d]", env,
                                DISTIL_GW_CHUNKS_MAX);
    }
    *out = (int)v;
    return DISTIL_OK;
}

/* Whether the variable name (len characters) is one of names (NULL-terminated, or NULL). */
static bool distil_env_listed(const char *const *names, const char *name, size_t len) {
    for (; names != NULL && *names != NULL; names++) {
        if (strlen(*names) == len && strncmp(*names, name, len) == 0) {
            return true;
        }
    }
    return false;
}

/* Every variable of be's prefix DISTIL_<NAME>_ is one it reads (be->env_names): a mistyped or
 * removed one fails here instead of being ignored. */
static distil_status distil_ctx_check_env(const distil_backend *be) {
    char prefix[48] = "DISTIL_";
    size_t n = strlen(prefix);
    for (const char *c = be->name; *c != '\0' && n + 2 < sizeof prefix; c++) {
        prefix[n++] = (char)toupper((unsigned char)*c);
    }
    prefix[n++] = '_';
    prefix[n] = '\0';
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const size_t len = strcspn(*e, "=");
        if (strncmp(*e, prefix, n) == 0 && !distil_env_listed(be->env_names, *e, len)) {
            return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                    "ctx_create: %.*s is not a variable of backend '%s' "
                                    "(docs/USAGE.md lists them)",
                                    (int)len, *e, be->name);
        }
    }
    return DISTIL_OK;
}

distil_status distil_ctx_create(distil_ctx **out, const char *backend, int device) {
    if (out == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "ctx_create: out is NULL");
    }
    *out = NULL;
    const distil_backend *be = NULL;
    DISTIL_TRY(distil_registry_select(backend, &be));
    DISTIL_TRY(distil_ctx_pick_device(be, device, &device));
    DISTIL_TRY(distil_ctx_check_env(be));
    int gw_chunks = 0;
    DISTIL_TRY(distil_ctx_pick_gw_chunks(&gw_chunks));
    distil_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_OUT_OF_MEMORY, "ctx_create: out of host memory");
    }
    ctx->be = be;
    ctx->gw_chunks_env = gw_chunks;
    distil_status s = be->create(ctx, device, &ctx->b);
    if (s != DISTIL_OK) {
        distil_error_set(NULL, s, "ctx_create: %s", ctx->msg);
        free(ctx);
        return s;
    }
    be->describe(ctx->b, ctx->device_name, sizeof ctx->device_name);
    *out = ctx;
    return DISTIL_OK;
}

distil_status distil_ctx_enter(distil_ctx *ctx, const char *fn) {
    if (ctx != NULL && atomic_exchange(&ctx->busy, 1) != 0) {
        return distil_error_set(NULL, DISTIL_ERR_BUSY,
                                "%s: the context is in use by another thread (a context serves "
                                "one thread at a time)",
                                fn);
    }
    return DISTIL_OK;
}

void distil_ctx_leave(distil_ctx *ctx) {
    if (ctx != NULL) {
        atomic_store(&ctx->busy, 0);
    }
}

/* A context that another thread is inside is left alone (leaked, not freed under it); the
 * refusal is recorded on the calling thread. The flag stays set: later calls are refused. */
void distil_ctx_destroy(distil_ctx *ctx) {
    if (ctx == NULL || distil_ctx_enter(ctx, "ctx_destroy") != DISTIL_OK) {
        return;
    }
    if (ctx->work_own != NULL) {
        ctx->be->mem_free(ctx->b, ctx->work_own);
    }
    ctx->be->destroy(ctx->b);
    free(ctx);
}

const char *distil_ctx_backend_name(const distil_ctx *ctx) {
    return ctx ? ctx->be->name : "";
}

const char *distil_ctx_device_name(const distil_ctx *ctx) {
    return ctx ? ctx->device_name : "";
}

static distil_status distil_ctx_set_stream_run(distil_ctx *ctx, void *stream) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "ctx_set_stream: ctx is NULL");
    }
    const distil_backend_device *dev = distil_backend_device_of(ctx->be);
    if (dev->set_stream == NULL) {
        if (stream == NULL || stream == DISTIL_STREAM_OWN) {
            return DISTIL_OK;
        }
        return distil_error_set(ctx, DISTIL_ERR_UNSUPPORTED,
                                "ctx_set_stream: backend '%s' has no streams; stream must be NULL "
                                "or DISTIL_STREAM_OWN",
                                ctx->be->name);
    }
    return dev->set_stream(ctx->b, stream);
}

distil_status distil_ctx_set_stream(distil_ctx *ctx, void *stream) {
    DISTIL_GUARDED(ctx, "ctx_set_stream", distil_ctx_set_stream_run(ctx, stream));
}

distil_status distil_ctx_wait(distil_ctx *ctx) {
    distil_status s = ctx->be->synchronize(ctx->b);
    /* A device backend's deferred error of an earlier call's input, kept for
     * distil_ctx_synchronize: an invalid label or teacher id (INVALID_LABEL), or a head made once
     * for another shape (INVALID_ARG naming teacher_weight_e4m3, docs/SPEC.md §6). */
    if (s == DISTIL_ERR_INVALID_LABEL || s == DISTIL_ERR_INVALID_ARG) {
        if (ctx->deferred == DISTIL_OK) {
            ctx->deferred = s;
            snprintf(ctx->deferred_msg, sizeof ctx->deferred_msg, "%s", ctx->msg);
        }
        return DISTIL_OK;
    }
    return s;
}

static distil_status distil_ctx_synchronize_run(distil_ctx *ctx) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "ctx_synchronize: ctx is NULL");
    }
    distil_status s = distil_ctx_wait(ctx);
    if (s == DISTIL_OK && ctx->deferred != DISTIL_OK) {
        s = ctx->deferred;
        ctx->deferred = DISTIL_OK;
        snprintf(ctx->msg, sizeof ctx->msg, "%s", ctx->deferred_msg);
    }
    return s;
}

distil_status distil_ctx_synchronize(distil_ctx *ctx) {
    DISTIL_GUARDED(ctx, "ctx_synchronize", distil_ctx_synchronize_run(ctx));
}

static distil_status distil_ctx_set_workspace_run(distil_ctx *ctx, void *ptr, size_t bytes) {
    if (ctx == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "ctx_set_workspace: ctx is NULL");
    }
    if ((ptr == NULL) != (bytes == 0)) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "ctx_set_workspace: ptr is %s but bytes is %zu (give both or "
                                "neither)",
                                ptr ? "set" : "NULL", bytes);
    }
    if (ptr != NULL) {
        DISTIL_TRY(distil_check_device_ptr(ctx, "ctx_set_workspace", "ptr", ptr));
        distil_mem_extent e;
        DISTIL_TRY(distil_span_extent(ctx, "ctx_set_workspace", "ptr", ptr, &e));
        if (e.size != 0 && bytes > e.size) {
            return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                    "ctx_set_workspace: ptr holds %zu bytes, not the %zu given",
                                    e.size, bytes);
        }
    }
    ctx->work_lent = ptr;
    ctx->work_lent_bytes = bytes;
    return DISTIL_OK;
}

distil_status distil_ctx_set_workspace(distil_ctx *ctx, void *ptr, size_t bytes) {
    DISTIL_GUARDED(ctx, "ctx_set_workspace", distil_ctx_set_workspace_run(ctx, ptr, bytes));
}
