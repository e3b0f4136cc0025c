/*
 * opencl_device.c - which OpenCL devices the backend sees, and in which order (opencl backend).
 * Never platform 0 blindly: an NVIDIA machine may list PoCL first. Devices are numbered GPUs
 * first, then accelerators, then CPUs; within a type, vendor drivers before Mesa and PoCL. The
 * environment variable DISTIL_OPENCL_PLATFORM (a case-insensitive substring of the platform
 * name or vendor) keeps only matching platforms. probe and create share this one list.
 */
#include "opencl_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define DISTIL_OCL_MAX_PLATFORMS 16

typedef struct ocl_candidate {
    distil_ocl_device dev;
    int type_rank;
    int vendor_rank;
    int order; /* platform index * 1000 + device index: keeps the driver's order within ties */
} ocl_candidate;

static bool ocl_contains_ci(const char *hay, const char *needle) {
    for (; *hay != '\0'; hay++) {
        size_t i = 0;
        while (needle[i] != '\0' && hay[i] != '\0' &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) {
            i++;
        }
        if (needle[i] == '\0') {
            return true;
        }
    }
    return needle[0] == '\0';
}

static void ocl_platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t n) {
    buf[0] = '\0';
    if (clGetPlatformInfo(p, what, n, buf, NULL) != CL_SUCCESS) {
        buf[0] = '\0';
    }
    buf[n - 1] = '\0';
}

/* Vendor drivers first; Mesa (Clover, rusticl) and PoCL last, as they may duplicate a GPU. */
static int ocl_vendor_rank(const char *name, const char *vendor) {
    if (ocl_contains_ci(vendor, "NVIDIA")) {
        return 0;
    }
    if (ocl_contains_ci(vendor, "Advanced Micro Devices") || ocl_contains_ci(vendor, "AMD")) {
        return 1;
    }
    if (ocl_contains_ci(vendor, "Intel") || ocl_contains_ci(vendor, "Apple")) {
        return 2;
    }
    if (ocl_contains_ci(name, "Portable Computing Language") || ocl_contains_ci(name, "pocl")) {
        return 9;
    }
    if (ocl_contains_ci(name, "Clover") || ocl_contains_ci(name, "rusticl") ||
        ocl_contains_ci(vendor, "Mesa")) {
        return 8;
    }
    return 5;
}

static int ocl_type_rank(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) {
        return 0;
    }
    if (t & CL_DEVICE_TYPE_ACCELERATOR) {
        return 1;
    }
    if (t & CL_DEVICE_TYPE_CPU) {
        return 2;
    }
    return 3;
}

/* A device we can use: available and with a compiler (we build from source). */
static bool ocl_device_usable(cl_device_id d) {
    cl_bool available = CL_FALSE;
    cl_bool compiler = CL_FALSE;
    if (clGetDeviceInfo(d, CL_DEVICE_AVAILABLE, sizeof available, &available, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(d, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL) !=
            CL_SUCCESS) {
        return false;
    }
    return available && compiler;
}

static int ocl_candidate_cmp(const void *pa, const void *pb) {
    const ocl_candidate *a = pa;
    const ocl_candidate *b = pb;
    if (a->type_rank != b->type_rank) {
        return a->type_rank - b->type_rank;
    }
    if (a->vendor_rank != b->vendor_rank) {
        return a->vendor_rank - b->vendor_rank;
    }
    return a->order - b->order;
}

/* Append the usable devices of platform `pi` to c[*n ..]. */
static void ocl_add_platform(cl_platform_id p, int pi, ocl_candidate *c, int cap, int *n) {
    char name[256];
    char vendor[256];
    ocl_platform_string(p, CL_PLATFORM_NAME, name, sizeof name);
    ocl_platform_string(p, CL_PLATFORM_VENDOR, vendor, sizeof vendor);
    const char *want = getenv("DISTIL_OPENCL_PLATFORM");
    if (want != NULL && want[0] != '\0' && !ocl_contains_ci(name, want) &&
        !ocl_contains_ci(vendor, want)) {
        return;
    }
    cl_device_id ids[DISTIL_OCL_MAX_DEVICES];
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, DISTIL_OCL_MAX_DEVICES, ids, &nd) != CL_SUCCESS) {
        return;
    }
    if (nd > DISTIL_OCL_MAX_DEVICES) {
        nd = DISTIL_OCL_MAX_DEVICES;
    }
    for (cl_uint di = 0; di < nd && *n < cap; di++) {
        cl_device_type type = 0;
        if (!ocl_device_usable(ids[di]) ||
            clGetDeviceInfo(ids[di], CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS) {
            continue;
        }
        ocl_candidate *k = &c[(*n)++];
        k->dev.platform = p;
        k->dev.device = ids[di];
        k->type_rank = ocl_type_rank(type);
        k->vendor_rank = ocl_vendor_rank(name, vendor);
        k->order = pi * 1000 + (int)di;
    }
}

void distil_ocl_devices(distil_ocl_device *out, int cap, int *n) {
    *n = 0;
    cl_platform_id plats[DISTIL_OCL_MAX_PLATFORMS];
    cl_uint np = 0;
    /* With no ICD installed, ocl-icd returns CL_PLATFORM_NOT_FOUND_KHR: simply no devices. */
    if (clGetPlatformIDs(DISTIL_OCL_MAX_PLATFORMS, plats, &np) != CL_SUCCESS) {
        return;
    }
    if (np > DISTIL_OCL_MAX_PLATFORMS) {
        np = DISTIL_OCL_MAX_PLATFORMS;
    }
    ocl_candidate c[DISTIL_OCL_MAX_DEVICES];
    int nc = 0;
    for (cl_uint pi = 0; pi < np; pi++) {
        ocl_add_platform(plats[pi], (int)pi, c, DISTIL_OCL_MAX_DEVICES, &nc);
    }
    qsort(c, (size_t)nc, sizeof c[0], ocl_candidate_cmp);
    for (int i = 0; i < nc && i < cap; i++) {
        out[i] = c[i].dev;
    }
    *n = nc < cap ? nc : cap;
}
