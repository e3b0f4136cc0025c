/*
 * comm.h - the communicator behind distil_comm (docs/SPEC.md §8, docs/DESIGN.md): every adapter
 * (a caller's callback, MPI, NCCL / RCCL) is one in-place all-reduce function with its state, so
 * the core calls one thing whatever the engine.
 */
#ifndef DISTIL_CORE_COMM_H
#define DISTIL_CORE_COMM_H

#include "ctx.h"

typedef enum distil_comm_kind {
    DISTIL_COMM_KIND_CALLBACK = 0,
    DISTIL_COMM_KIND_MPI = 1,  /* host memory only (cpu, ref) */
    DISTIL_COMM_KIND_NCCL = 2, /* cuda / hip device memory on the bound stream */
} distil_comm_kind;

struct distil_comm {
    distil_comm_kind kind;
    int rank, size;
    distil_comm_allreduce_fn fn; /* the caller's, or the adapter's */
    void *user;                  /* passed to fn */
    void *engine;                /* the adapter's own state (freed by destroy) */
    void (*engine_free)(void *engine);
};

/* A comm of the given kind around fn / user; rank and size checked. Fails on ctx NULL's message. */
distil_status distil_comm_make(distil_comm **out, distil_comm_kind kind, int rank, int size,
                               distil_comm_allreduce_fn fn, void *user, void *engine,
                               void (*engine_free)(void *));

/* Can comm serve ctx's backend (MPI: host memory; NCCL: cuda / hip)? INVALID_ARG naming fn. */
distil_status distil_comm_check(distil_ctx *ctx, const char *fn, const distil_comm *comm);

/* buf (count elements of dtype, in ctx's memory) <- op over the group, in place, on ctx's bound
 * stream. count == 0 does nothing. */
distil_status distil_comm_allreduce(distil_ctx *ctx, const distil_comm *comm, distil_dptr buf,
                                    int64_t count, distil_comm_dtype dtype, distil_comm_op op);

#endif /* DISTIL_CORE_COMM_H */
