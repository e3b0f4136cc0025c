/*
 * comm_nccl.c - the NCCL / RCCL adapter of distil_comm (docs/SPEC.md §8): ncclAllReduce in place
 * on the context's bound stream, over the caller's ncclComm_t. distil neither links nor loads
 * NCCL: the functions come from the NCCL library the process has loaded already (PyTorch,
 * the caller's own), found with dlopen(RTLD_NOLOAD) and, failing that, in the global symbol
 * table. The few declarations below are NCCL's ABI (nccl.h), stable across NCCL 2.x and RCCL.
 */
#define _GNU_SOURCE 1
#include "comm.h"

#include "error.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef int nccl_result;                     /* ncclResult_t; ncclSuccess = 0 */
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8 }; /* ncclDataType_t */
enum { NCCL_SUM = 0, NCCL_MAX = 2 };         /* ncclRedOp_t */
typedef nccl_result (*nccl_allreduce_fn)(const void *send, void *recv, size_t count, int dtype,
                                         int op, void *comm, void *stream);
typedef nccl_result (*nccl_int_query_fn)(void *comm, int *out);

typedef struct distil_nccl {
    void *comm; /* ncclComm_t */
    nccl_allreduce_fn allreduce;
} distil_nccl;

/* A symbol of the NCCL (or RCCL) already in the process, or NULL. */
static void *distil_nccl_symbol(const char *name) {
    static const char *const libs[] = {"libnccl.so.2", "libnccl.so", "librccl.so.1", "librccl.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = dlopen(libs[i], RTLD_NOLOAD | RTLD_LAZY);
        if (h != NULL) {
            void *f = dlsym(h, name);
            dlclose(h); /* only drops the reference RTLD_NOLOAD took */
            if (f != NULL) {
                return f;
            }
        }
    }
    return dlsym(RTLD_DEFAULT, name);
}

static int distil_nccl_allreduce(void *user, void *buf, int64_t count, distil_comm_dtype dtype,
                                 distil_comm_op op, void *stream) {
    const distil_nccl *n = user;
    return n->allreduce(buf, buf, (size_t)count,
                        dtype == DISTIL_COMM_F64 ? NCCL_FLOAT64 : NCCL_FLOAT32,
                        op == DISTIL_COMM_MAX ? NCCL_MAX : NCCL_SUM, n->comm, stream);
}

distil_status distil_comm_create_nccl(distil_comm **out, void *nccl_comm) {
    if (out == NULL || nccl_comm == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "comm_create_nccl: %s is NULL",
                                out == NULL ? "out" : "nccl_comm");
    }
    *out = NULL;
    nccl_allreduce_fn ar = (nccl_allreduce_fn)distil_nccl_symbol("ncclAllReduce");
    nccl_int_query_fn rank_of = (nccl_int_query_fn)distil_nccl_symbol("ncclCommUserRank");
    nccl_int_query_fn count_of = (nccl_int_query_fn)distil_nccl_symbol("ncclCommCount");
    if (ar == NULL || rank_of == NULL || count_of == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "comm_create_nccl: NCCL is not loaded in this process (no "
                                "libnccl.so.2 / librccl.so and no global ncclAllReduce); load it "
                                "first (the program that made nccl_comm has)");
    }
    int rank = -1, size = 0;
    if (rank_of(nccl_comm, &rank) != 0 || count_of(nccl_comm, &size) != 0) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "comm_create_nccl: nccl_comm: ncclCommUserRank / ncclCommCount "
                                "failed");
    }
    distil_nccl *n = malloc(sizeof *n);
    if (n == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_OUT_OF_MEMORY, "comm_create_nccl: out of memory");
    }
    n->comm = nccl_comm;
    n->allreduce = ar;
    return distil_comm_make(out, DISTIL_COMM_KIND_NCCL, rank, size, distil_nccl_allreduce, n, n,
                            free);
}
