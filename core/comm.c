/*
 * comm.c - the communicator object of docs/SPEC.md §8: life cycle, the caller's callback
 * adapter, and the one all-reduce call the core makes. The MPI and NCCL adapters live in
 * comm_mpi.c and comm_nccl.c.
 */
#include "comm.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

distil_status distil_comm_make(distil_comm **out, distil_comm_kind kind, int rank, int size,
                               distil_comm_allreduce_fn fn, void *user, void *engine,
                               void (*engine_free)(void *)) {
    if (size < 1 || rank < 0 || rank >= size) {
        if (engine_free != NULL) {
            engine_free(engine);
        }
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "comm: rank %d outside [0, size %d) or size < 1", rank, size);
    }
    distil_comm *c = calloc(1, sizeof *c);
    if (c == NULL) {
        if (engine_free != NULL) {
            engine_free(engine);
        }
        return distil_error_set(NULL, DISTIL_ERR_OUT_OF_MEMORY, "comm: out of host memory");
    }
    *c = (distil_comm){.kind = kind,
                       .rank = rank,
                       .size = size,
                       .fn = fn,
                       .user = user,
                       .engine = engine,
                       .engine_free = engine_free};
    *out = c;
    return DISTIL_OK;
}

distil_status distil_comm_create_callback(distil_comm **out, int rank, int size,
                                          distil_comm_allreduce_fn fn, void *user) {
    if (out == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "comm_create_callback: out is NULL");
    }
    *out = NULL;
    if (fn == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "comm_create_callback: fn is NULL");
    }
    return distil_comm_make(out, DISTIL_COMM_KIND_CALLBACK, rank, size, fn, user, NULL, NULL);
}

void distil_comm_destroy(distil_comm *comm) {
    if (comm == NULL) {
        return;
    }
    if (comm->engine_free != NULL) {
        comm->engine_free(comm->engine);
    }
    free(comm);
}

int distil_comm_rank(const distil_comm *comm) {
    return comm ? comm->rank : -1;
}

int distil_comm_size(const distil_comm *comm) {
    return comm ? comm->size : -1;
}

/* Buffers the backend hands out as handles (opencl cl_mem): the all-reduce goes through host
 * memory. */
static bool distil_comm_staged(const distil_ctx *ctx) {
    const char *be = ctx->be->name;
    return !ctx->be->host_memory && strcmp(be, "cuda") != 0 && strcmp(be, "hip") != 0;
}

distil_status distil_comm_check(distil_ctx *ctx, const char *fn, const distil_comm *comm) {
    const char *be = ctx->be->name;
    bool device = !ctx->be->host_memory && !distil_comm_staged(ctx); /* cuda, hip */
    if (comm->kind == DISTIL_COMM_KIND_MPI && device) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: shard.comm: an MPI communicator takes host memory, not '%s' "
                                "device pointers (use NCCL there)",
                                fn, be);
    }
    if (comm->kind == DISTIL_COMM_KIND_NCCL && !device) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: shard.comm: an NCCL communicator needs the cuda or hip "
                                "backend, not '%s'",
                                fn, be);
    }
    return DISTIL_OK;
}

/* The engine's all-reduce on addr (host or device memory). */
static distil_status distil_comm_call(distil_ctx *ctx, const distil_comm *comm, void *addr,
                                      int64_t count, distil_comm_dtype dtype, distil_comm_op op) {
    const distil_backend_tp *tp = ctx->be->tp;
    void *stream = tp != NULL && tp->native_stream != NULL ? tp->native_stream(ctx->b) : NULL;
    int rc = comm->fn(comm->user, addr, count, dtype, op, stream);
    if (rc != 0) {
        static const char *const kinds[] = {"callback", "mpi", "nccl"};
        return distil_error_set(
            ctx, DISTIL_ERR_BACKEND, "comm (%s): all-reduce of %lld %s values returned %d",
            kinds[comm->kind], (long long)count, dtype == DISTIL_COMM_F64 ? "f64" : "f32", rc);
    }
    return DISTIL_OK;
}

distil_status distil_comm_allreduce(distil_ctx *ctx, const distil_comm *comm, distil_dptr buf,
                                    int64_t count, distil_comm_dtype dtype, distil_comm_op op) {
    if (count == 0) {
        return DISTIL_OK;
    }
    if (!distil_comm_staged(ctx)) {
        return distil_comm_call(ctx, comm, distil_dptr_addr(buf), count, dtype, op);
    }
    /* Handles: download (which waits for the queue), all-reduce on the host, upload. The vectors
     * are [rows]-sized statistics or a chunk's grad_xs partial. */
    size_t bytes = (size_t)count * (dtype == DISTIL_COMM_F64 ? 8u : 4u);
    void *host = malloc(bytes);
    if (host == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "comm: out of host memory");
    }
    distil_status s = ctx->be->mem_download(ctx->b, host, buf, bytes);
    if (s == DISTIL_OK) {
        s = distil_comm_call(ctx, comm, host, count, dtype, op);
    }
    if (s == DISTIL_OK) {
        s = ctx->be->mem_upload(ctx->b, buf, host, bytes);
    }
    free(host);
    return s;
}
