/*
 * opencl_api.c - opens the OpenCL ICD loader with dlopen and fills distil_ocl_fn (see
 * opencl_api.h for why the backend does not link it).
 */
#define DISTIL_OCL_API_IMPL 1
#include "opencl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

distil_ocl_api distil_ocl_fn;

static pthread_once_t distil_ocl_api_once = PTHREAD_ONCE_INIT;
static int distil_ocl_api_ready;

/* The loader's names: the versioned soname first (what the ICD loader packages install), then
 * the development link; macOS's framework. */
static void *distil_ocl_api_open_loader(void) {
    static const char *const names[] = {
#ifdef __APPLE__
        "/System/Library/Frameworks/OpenCL.framework/OpenCL",
#endif
        "libOpenCL.so.1",
        "libOpenCL.so",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) {
            return h;
        }
    }
    return NULL;
}

static void distil_ocl_api_load(void) {
    void *h = distil_ocl_api_open_loader();
    if (h == NULL) {
        return;
    }
    distil_ocl_api fn;
    int missing = 0;
#define DISTIL_OCL_RESOLVE(name)                                                                   \
    fn.name = (__typeof__(fn.name))dlsym(h, "cl" #name);                                           \
    missing |= fn.name == NULL;
    DISTIL_OCL_ENTRY_POINTS(DISTIL_OCL_RESOLVE)
#undef DISTIL_OCL_RESOLVE
    if (missing) { /* an OpenCL 1.1 loader: no clEnqueueMigrateMemObjects */
        dlclose(h);
        return;
    }
    distil_ocl_fn = fn;
    distil_ocl_api_ready = 1;
}

cl_int distil_ocl_api_platform_ids(cl_uint num_entries, cl_platform_id *platforms,
                                   cl_uint *num_platforms) {
    pthread_once(&distil_ocl_api_once, distil_ocl_api_load);
    if (!distil_ocl_api_ready) {
        if (num_platforms != NULL) {
            *num_platforms = 0;
        }
        return -1001; /* CL_PLATFORM_NOT_FOUND_KHR (cl_ext.h): no loader, so no platform */
    }
    return distil_ocl_fn.GetPlatformIDs(num_entries, platforms, num_platforms);
}
