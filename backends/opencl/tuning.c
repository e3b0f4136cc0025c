/*
 * tuning.c - per-device kernel parameters of the opencl backend (CLBlast's database, in
 * miniature). Lookup: the device vendor, then a device-name substring within that vendor, then
 * the vendor's default, then a default by device type. The values become -D options at build
 * time; DISTIL_OPENCL_BUILD_OPTIONS, appended after them, overrides any of them.
 */
#include "opencl_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct ocl_tuning_entry {
    const char *vendor; /* substring of CL_DEVICE_VENDOR */
    const char *device; /* substring of CL_DEVICE_NAME, NULL: any device of the vendor */
    distil_ocl_tuning t;
} ocl_tuning_entry;

/* GPUs only: a CPU device reports its CPU's vendor (PoCL on an EPYC says "AuthenticAMD"), so
 * CPUs take the CPU default below. Rows are long (V up to 256k), so wide work-groups with a few
 * loads in flight per work-item keep the memory system busy. */
/* No fast-math entry any more: the element terms (core/backend_api/math/distil_elem.h) use the
 * accurate exp everywhere, since native_exp may flush subnormal probabilities (docs/SPEC.md §1). On
 * an H200 base-2 terms with accurate exp2/log2 measured 2.3x the CUDA time; the current terms
 * (three exp, no log) are not timed there. */
static const ocl_tuning_entry ocl_tuning_table[] = {
    {"NVIDIA", "H100", {512, 4, 16}},
    {"NVIDIA", "H200", {512, 4, 16}},
    {"NVIDIA", "B200", {512, 4, 16}},
    {"NVIDIA", NULL, {256, 4, 16}},
    {"Advanced Micro Devices", NULL, {256, 4, 16}},
    {"AMD", NULL, {256, 4, 16}},
    {"Intel", NULL, {256, 2, 16}},
};

/* A CPU runs a work-group as a loop on one core: small groups, many of them. */
static const distil_ocl_tuning ocl_tuning_cpu = {64, 1, 16};
static const distil_ocl_tuning ocl_tuning_gpu = {256, 1, 16};

static bool ocl_has(const char *hay, const char *needle) {
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
    return false;
}

static distil_ocl_tuning ocl_tuning_lookup(const char *vendor, const char *name, bool gpu) {
    const size_t n = sizeof ocl_tuning_table / sizeof ocl_tuning_table[0];
    if (!gpu) {
        return ocl_tuning_cpu;
    }
    for (size_t i = 0; i < n; i++) { /* vendor and device name */
        const ocl_tuning_entry *e = &ocl_tuning_table[i];
        if (e->device != NULL && ocl_has(vendor, e->vendor) && ocl_has(name, e->device)) {
            return e->t;
        }
    }
    for (size_t i = 0; i < n; i++) { /* vendor only */
        const ocl_tuning_entry *e = &ocl_tuning_table[i];
        if (e->device == NULL && ocl_has(vendor, e->vendor)) {
            return e->t;
        }
    }
    return ocl_tuning_gpu;
}

/* Largest power of two <= v (v >= 1). */
static int ocl_pow2_floor(size_t v) {
    int p = 1;
    while ((size_t)p * 2 <= v && p < (1 << 16)) {
        p *= 2;
    }
    return p;
}

distil_ocl_tuning distil_ocl_tuning_pick(cl_device_id device) {
    char vendor[256] = "";
    char name[256] = "";
    cl_device_type type = 0;
    size_t max_wg = 64;
    cl_ulong local_mem = 16384;
    clGetDeviceInfo(device, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    distil_ocl_tuning t = ocl_tuning_lookup(vendor, name, (type & CL_DEVICE_TYPE_GPU) != 0);
    /* The row kernels keep two floats per work-item in local memory. */
    while ((size_t)t.wg_size > max_wg || (cl_ulong)t.wg_size * 2 * sizeof(float) > local_mem) {
        t.wg_size /= 2;
    }
    t.wg_size = ocl_pow2_floor(t.wg_size > 0 ? (size_t)t.wg_size : 1);
    while ((size_t)(t.gemm_tile * t.gemm_tile) > max_wg && t.gemm_tile > 1) {
        t.gemm_tile /= 2;
    }
    return t;
}

/* Append " -DNAME=value" unless the user's options define NAME themselves (a second -D of the
 * same macro would only warn about the redefinition). */
static void ocl_define(char *buf, size_t n, const char *user, const char *name, int value) {
    char probe[64];
    snprintf(probe, sizeof probe, "-D%s=", name);
    if (strstr(user, probe) == NULL) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " -D%s=%d", name, value);
    }
}

void distil_ocl_tuning_options(const distil_ocl_tuning *t, const char *user, char *buf, size_t n) {
    buf[0] = '\0';
    ocl_define(buf, n, user, "WG_SIZE", t->wg_size);
    ocl_define(buf, n, user, "VEC", t->vec);
    ocl_define(buf, n, user, "GEMM_TILE", t->gemm_tile);
}
