/*
 * error.c - status names and the last-error messages (per context, or per thread without one).
 */
#include "error.h"
#include "ctx.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char distil_thread_msg[DISTIL_MSG_BYTES];

const char *distil_status_string(distil_status status) {
    switch (status) {
    case DISTIL_OK:
        return "ok";
    case DISTIL_ERR_INVALID_ARG:
        return "invalid argument";
    case DISTIL_ERR_UNSUPPORTED:
        return "unsupported";
    case DISTIL_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case DISTIL_ERR_BACKEND:
        return "backend error";
    case DISTIL_ERR_NOT_AVAILABLE:
        return "not available";
    case DISTIL_ERR_INVALID_LABEL:
        return "invalid label";
    case DISTIL_ERR_WORKSPACE:
        return "workspace too small";
    case DISTIL_ERR_VERSION:
        return "version mismatch";
    case DISTIL_ERR_BUSY:
        return "context busy";
    }
    return "unknown status";
}

distil_status distil_error_set(distil_ctx *ctx, distil_status status, const char *fmt, ...) {
    char *buf = ctx ? ctx->msg : distil_thread_msg;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, DISTIL_MSG_BYTES, fmt, ap);
    va_end(ap);
    return status;
}

const char *distil_ctx_last_error(const distil_ctx *ctx) {
    return ctx ? ctx->msg : distil_thread_msg;
}
