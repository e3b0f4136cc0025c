/*
 * comm_mpi.c - the MPI adapter of distil_comm (docs/SPEC.md §8): MPI_Allreduce in place on host
 * memory, over the caller's MPI_Comm. Built when CMake finds MPI (DISTIL_MPI); without it
 * distil_comm_create_mpi reports DISTIL_ERR_NOT_AVAILABLE.
 */
#include "comm.h"

#include "error.h"

#ifdef DISTIL_HAVE_MPI
#include <mpi.h>

#include <limits.h>
#include <stdlib.h>

static int distil_comm_mpi_allreduce(void *user, void *buf, int64_t count, distil_comm_dtype dtype,
                                     distil_comm_op op, void *stream) {
    (void)stream; /* host memory: the call is synchronous */
    if (count > INT_MAX) {
        return MPI_ERR_COUNT;
    }
    MPI_Datatype t = dtype == DISTIL_COMM_F64 ? MPI_DOUBLE : MPI_FLOAT;
    MPI_Op o = op == DISTIL_COMM_MAX ? MPI_MAX : MPI_SUM;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, t, o, *(MPI_Comm *)user);
}

distil_status distil_comm_create_mpi(distil_comm **out, const void *mpi_comm) {
    if (out == NULL || mpi_comm == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "comm_create_mpi: %s is NULL",
                                out == NULL ? "out" : "mpi_comm");
    }
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "comm_create_mpi: MPI is not initialised (call MPI_Init first)");
    }
    MPI_Comm *c = malloc(sizeof *c);
    if (c == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_OUT_OF_MEMORY, "comm_create_mpi: out of memory");
    }
    *c = *(const MPI_Comm *)mpi_comm;
    int rank = -1, size = 0;
    if (MPI_Comm_rank(*c, &rank) != MPI_SUCCESS || MPI_Comm_size(*c, &size) != MPI_SUCCESS) {
        free(c);
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "comm_create_mpi: mpi_comm: MPI_Comm_rank / MPI_Comm_size failed");
    }
    return distil_comm_make(out, DISTIL_COMM_KIND_MPI, rank, size, distil_comm_mpi_allreduce, c, c,
                            free);
}

#else

distil_status distil_comm_create_mpi(distil_comm **out, const void *mpi_comm) {
    (void)mpi_comm;
    if (out != NULL) {
        *out = NULL;
    }
    return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                            "comm_create_mpi: this libdistil was built without MPI "
                            "(configure with -DDISTIL_MPI=ON and an MPI installed)");
}

#endif
