/*
 * opencl_options.c - validation of DISTIL_OPENCL_BUILD_OPTIONS at context creation (docs/SPEC.md
 * §5): options that would give wrong results, hang a kernel or crash the OpenCL C
 * compiler are refused with a message instead of reaching clBuildProgram.
 *
 * The kernels' tunables and what breaks without a rule:
 *   WG_SIZE    the tree reductions halve it (common.cl): not a power of two drops partial sums
 *              (silently wrong losses); above the device's work-group limit the launch fails
 *   VEC        row loops step by WG_SIZE * VEC: VEC < 1 never advances (a hung kernel)
 *   GEMM_TILE  the fallback gemm.cl's tile edge: < 1 never advances; tile^2 work-items per group
 *   DISTIL_FAST_MATH  0 or 1
 *   DTYPE, SRC_DTYPE, DST_DTYPE  chosen per program by the backend: the user's would clash
 * A bare -D (nothing after it) or -D=... with no name makes some compilers (PoCL) crash.
 */
#include "opencl_internal.h"

#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OCL_OPT_FN "opencl: DISTIL_OPENCL_BUILD_OPTIONS"

/* The device limits the tunables must respect. */
typedef struct ocl_limits {
    size_t max_wg;
    cl_ulong local_mem;
} ocl_limits;

/* value as a decimal integer in [lo, hi]; false when it is not one. */
static bool ocl_opt_int(const char *value, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *out = v;
    return true;
}

/* One macro NAME=VALUE (VALUE "1" when the option has no '='). */
static distil_status ocl_opt_macro(distil_ocl *b, const ocl_limits *lim, const char *name,
                                   const char *value) {
    long v = 0;
    if (strcmp(name, "WG_SIZE") == 0) {
        long max = (long)lim->max_wg;
        if (!ocl_opt_int(value, 1, max, &v) || (v & (v - 1)) != 0 ||
            (cl_ulong)v * 2 * sizeof(float) > lim->local_mem) {
            return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: WG_SIZE=%s must be a power of two in [1, %ld] (the "
                                    "device's work-group limit; its reductions halve it)",
                                    OCL_OPT_FN, value, max);
        }
    } else if (strcmp(name, "VEC") == 0) {
        if (!ocl_opt_int(value, 1, 64, &v)) {
            return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: VEC=%s must be an integer in [1, 64]", OCL_OPT_FN, value);
        }
    } else if (strcmp(name, "GEMM_TILE") == 0) {
        if (!ocl_opt_int(value, 1, 1024, &v) || (size_t)(v * v) > lim->max_wg) {
            return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: GEMM_TILE=%s must be an integer >= 1 whose square is at "
                                    "most the device's work-group limit %zu",
                                    OCL_OPT_FN, value, lim->max_wg);
        }
    } else if (strcmp(name, "DISTIL_FAST_MATH") == 0) {
        if (!ocl_opt_int(value, 0, 1, &v)) {
            return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: DISTIL_FAST_MATH=%s must be 0 or 1", OCL_OPT_FN, value);
        }
    } else if (strcmp(name, "DTYPE") == 0 || strcmp(name, "SRC_DTYPE") == 0 ||
               strcmp(name, "DST_DTYPE") == 0) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "%s: %s is chosen per kernel by distil and cannot be set",
                                OCL_OPT_FN, name);
    }
    return DISTIL_OK;
}

/* The text of one -D (after "-D" or the separate token): "NAME", "NAME=VALUE". */
static distil_status ocl_opt_define(distil_ocl *b, const ocl_limits *lim, const char *def) {
    char name[128];
    const char *eq = strchr(def, '=');
    size_t len = eq ? (size_t)(eq - def) : strlen(def);
    bool ok = len > 0 && len < sizeof name && (isalpha((unsigned char)def[0]) || def[0] == '_');
    for (size_t i = 0; ok && i < len; i++) {
        ok = isalnum((unsigned char)def[i]) || def[i] == '_';
    }
    if (!ok) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG, "%s: '-D%s' does not name a macro",
                                OCL_OPT_FN, def);
    }
    memcpy(name, def, len);
    name[len] = '\0';
    return ocl_opt_macro(b, lim, name, eq ? eq + 1 : "1");
}

/* The next whitespace-separated token of *cur, NUL-terminated in place; NULL at the end. */
static char *ocl_opt_next(char **cur) {
    char *p = *cur;
    while (*p != '\0' && isspace((unsigned char)*p)) {
        p++;
    }
    if (*p == '\0') {
        return NULL;
    }
    char *tok = p;
    while (*p != '\0' && !isspace((unsigned char)*p)) {
        p++;
    }
    if (*p != '\0') {
        *p++ = '\0';
    }
    *cur = p;
    return tok;
}

distil_status distil_ocl_options_check(distil_ocl *b, const char *user) {
    ocl_limits lim = {64, 16384};
    clGetDeviceInfo(b->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof lim.max_wg, &lim.max_wg, NULL);
    clGetDeviceInfo(b->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lim.local_mem, &lim.local_mem,
                    NULL);
    char buf[512];
    if (strlen(user) >= sizeof buf) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG, "%s: longer than %zu characters",
                                OCL_OPT_FN, sizeof buf - 1);
    }
    snprintf(buf, sizeof buf, "%s", user);
    char *cur = buf;
    for (char *tok = ocl_opt_next(&cur); tok != NULL; tok = ocl_opt_next(&cur)) {
        if (strncmp(tok, "-D", 2) != 0) {
            continue; /* other options are the compiler's to judge */
        }
        const char *def = tok[2] != '\0' ? tok + 2 : ocl_opt_next(&cur);
        if (def == NULL) {
            return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                    "%s: a bare -D at the end (give -DNAME or -DNAME=VALUE)",
                                    OCL_OPT_FN);
        }
        DISTIL_TRY(ocl_opt_define(b, &lim, def));
    }
    return DISTIL_OK;
}
