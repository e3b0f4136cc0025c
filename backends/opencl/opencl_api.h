/*
 * opencl_api.h - the OpenCL entry points the backend calls, resolved at run time from the ICD
 * loader (libOpenCL.so.1) instead of linked: libdistil then loads, and its other backends run,
 * on a machine without an OpenCL loader (a binary wheel cannot assume one). The loader is opened
 * when the backend first asks for platforms; without it (or without one of these entry points)
 * clGetPlatformIDs answers CL_PLATFORM_NOT_FOUND_KHR and the backend has no device, as with a
 * loader that finds no ICD. Every other entry point is reached only through a platform found
 * first. Included after <CL/cl.h> by opencl_internal.h: the macros below turn each call
 * clName(...) into (distil_ocl_fn.Name)(...).
 */
#ifndef DISTIL_OPENCL_API_H
#define DISTIL_OPENCL_API_H

#include <CL/cl.h>

/* X(Name) for each clName the backend calls. */
#define DISTIL_OCL_ENTRY_POINTS(X)                                                                 \
    X(BuildProgram)                                                                                \
    X(CreateBuffer)                                                                                \
    X(CreateCommandQueue)                                                                          \
    X(CreateContext)                                                                               \
    X(CreateKernel)                                                                                \
    X(CreateProgramWithSource)                                                                     \
    X(EnqueueMigrateMemObjects)                                                                    \
    X(EnqueueNDRangeKernel)                                                                        \
    X(EnqueueReadBuffer)                                                                           \
    X(EnqueueWriteBuffer)                                                                          \
    X(Finish)                                                                                      \
    X(GetCommandQueueInfo)                                                                         \
    X(GetDeviceIDs)                                                                                \
    X(GetDeviceInfo)                                                                               \
    X(GetEventInfo)                                                                                \
    X(GetKernelWorkGroupInfo)                                                                      \
    X(GetMemObjectInfo)                                                                            \
    X(GetPlatformIDs)                                                                              \
    X(GetPlatformInfo)                                                                             \
    X(GetProgramBuildInfo)                                                                         \
    X(ReleaseCommandQueue)                                                                         \
    X(ReleaseContext)                                                                              \
    X(ReleaseEvent)                                                                                \
    X(ReleaseKernel)                                                                               \
    X(ReleaseMemObject)                                                                            \
    X(ReleaseProgram)                                                                              \
    X(SetKernelArg)                                                                                \
    X(WaitForEvents)

#define DISTIL_OCL_FIELD(name) __typeof__(&cl##name) name;
typedef struct distil_ocl_api {
    DISTIL_OCL_ENTRY_POINTS(DISTIL_OCL_FIELD)
} distil_ocl_api;
#undef DISTIL_OCL_FIELD

/* Filled by distil_ocl_api_platform_ids on its first call; read-only afterwards. */
extern distil_ocl_api distil_ocl_fn;

/* clGetPlatformIDs, opening the loader first (once, thread-safe). */
cl_int distil_ocl_api_platform_ids(cl_uint num_entries, cl_platform_id *platforms,
                                   cl_uint *num_platforms);

#ifndef DISTIL_OCL_API_IMPL
#define clGetPlatformIDs           distil_ocl_api_platform_ids
#define clBuildProgram             (distil_ocl_fn.BuildProgram)
#define clCreateBuffer             (distil_ocl_fn.CreateBuffer)
#define clCreateCommandQueue       (distil_ocl_fn.CreateCommandQueue)
#define clCreateContext            (distil_ocl_fn.CreateContext)
#define clCreateKernel             (distil_ocl_fn.CreateKernel)
#define clCreateProgramWithSource  (distil_ocl_fn.CreateProgramWithSource)
#define clEnqueueMigrateMemObjects (distil_ocl_fn.EnqueueMigrateMemObjects)
#define clEnqueueNDRangeKernel     (distil_ocl_fn.EnqueueNDRangeKernel)
#define clEnqueueReadBuffer        (distil_ocl_fn.EnqueueReadBuffer)
#define clEnqueueWriteBuffer       (distil_ocl_fn.EnqueueWriteBuffer)
#define clFinish                   (distil_ocl_fn.Finish)
#define clGetCommandQueueInfo      (distil_ocl_fn.GetCommandQueueInfo)
#define clGetDeviceIDs             (distil_ocl_fn.GetDeviceIDs)
#define clGetDeviceInfo            (distil_ocl_fn.GetDeviceInfo)
#define clGetEventInfo             (distil_ocl_fn.GetEventInfo)
#define clGetKernelWorkGroupInfo   (distil_ocl_fn.GetKernelWorkGroupInfo)
#define clGetMemObjectInfo         (distil_ocl_fn.GetMemObjectInfo)
#define clGetPlatformInfo          (distil_ocl_fn.GetPlatformInfo)
#define clGetProgramBuildInfo      (distil_ocl_fn.GetProgramBuildInfo)
#define clReleaseCommandQueue      (distil_ocl_fn.ReleaseCommandQueue)
#define clReleaseContext           (distil_ocl_fn.ReleaseContext)
#define clReleaseEvent             (distil_ocl_fn.ReleaseEvent)
#define clReleaseKernel            (distil_ocl_fn.ReleaseKernel)
#define clReleaseMemObject         (distil_ocl_fn.ReleaseMemObject)
#define clReleaseProgram           (distil_ocl_fn.ReleaseProgram)
#define clSetKernelArg             (distil_ocl_fn.SetKernelArg)
#define clWaitForEvents            (distil_ocl_fn.WaitForEvents)
#endif

#endif
