/*
 * vendor.h - the only GPU include of the .cu sources: vendors/hip.h when DISTIL_USE_HIP is
 * defined (the hip backend compiles these same files), vendors/cuda.h otherwise. Both provide the
 * cuda* names we use, DISTIL_GPU_WARP (threads of a warp, a compile-time constant), the warp
 * primitives and DISTIL_GPU_NAME / DISTIL_GPU_PRIORITY of the backend.
 */
#ifndef DISTIL_VENDOR_H
#define DISTIL_VENDOR_H

#ifdef DISTIL_USE_HIP
#include "vendors/hip.h"
#else
#include "vendors/cuda.h"
#endif

/* Most warps of a block of 1024 threads: block reductions size their shared arrays with it. */
#define DISTIL_GPU_MAX_WARPS (1024 / DISTIL_GPU_WARP)

#endif /* DISTIL_VENDOR_H */
