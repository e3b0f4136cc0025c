#!/bin/sh
# tp_mpi_run.sh N EXE: run EXE on N MPI ranks (ctest's test_tp_mpi_N); skipped (77) with a
# message when mpirun is missing. One OpenMP thread a rank: the ranks share the cores.
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: test_tp_mpi skipped"; exit 77; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun --oversubscribe -n "$1" "$2"
