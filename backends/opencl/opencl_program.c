/*
 * opencl_program.c - the per-context program cache and kernel launches (opencl backend).
 * A program is common.cl plus its own files, built with "-cl-std=CL1.2", the device's tuning
 * -D options, the caller's defines (dtype tokens) and DISTIL_OPENCL_BUILD_OPTIONS, in that order;
 * it is cached under its program id and that whole option string, so each variant is compiled
 * once per context. A failed build puts the compiler log into the context's error message.
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OCL_MAX_PARTS 10

/* The files of each program, common.cl first; DISTIL_OCL_SRC_COUNT ends a list. */
static const distil_ocl_src ocl_prog_parts[DISTIL_OCL_PROG_COUNT][OCL_MAX_PARTS] = {
    [DISTIL_OCL_PROG_ROWS] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_DIV_LIST, DISTIL_OCL_SRC_ELEM,
                              DISTIL_OCL_SRC_HEAD_MATH, DISTIL_OCL_SRC_DIV_ROWS,
                              DISTIL_OCL_SRC_HEAD, DISTIL_OCL_SRC_FUSED_ROWS, DISTIL_OCL_SRC_COUNT},
    [DISTIL_OCL_PROG_REDUCE] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_REDUCE, DISTIL_OCL_SRC_COUNT},
    [DISTIL_OCL_PROG_ELEMENTWISE] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_ELEMENTWISE,
                                     DISTIL_OCL_SRC_COUNT},
    [DISTIL_OCL_PROG_GEMM] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_GEMM, DISTIL_OCL_SRC_COUNT},
    [DISTIL_OCL_PROG_TOPK] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_DIV_LIST, DISTIL_OCL_SRC_ELEM,
                              DISTIL_OCL_SRC_DIV_ROWS, DISTIL_OCL_SRC_TOPK_MATH,
                              DISTIL_OCL_SRC_TOPK, DISTIL_OCL_SRC_COUNT},
    [DISTIL_OCL_PROG_TP] = {DISTIL_OCL_SRC_COMMON, DISTIL_OCL_SRC_DIV_LIST, DISTIL_OCL_SRC_ELEM,
                            DISTIL_OCL_SRC_HEAD_MATH, DISTIL_OCL_SRC_DIV_ROWS, DISTIL_OCL_SRC_HEAD,
                            DISTIL_OCL_SRC_FUSED_ROWS, DISTIL_OCL_SRC_TP, DISTIL_OCL_SRC_COUNT},
};

/* The program's own file (its last part), for messages. */
static const char *ocl_prog_file(distil_ocl_prog prog) {
    int i = 1;
    while (i + 1 < OCL_MAX_PARTS && ocl_prog_parts[prog][i + 1] != DISTIL_OCL_SRC_COUNT) {
        i++;
    }
    return distil_ocl_source_file(ocl_prog_parts[prog][i]);
}

/* Record a build failure with as much of the compiler log as the message holds. */
static distil_status ocl_build_failed(distil_ocl *b, cl_program p, cl_int err, distil_ocl_prog prog,
                                      const char *options) {
    size_t n = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(p, b->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS &&
        n > 0 && (log = malloc(n + 1)) != NULL) {
        if (clGetProgramBuildInfo(p, b->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) {
            log[0] = '\0';
        }
        log[n] = '\0';
    }
    distil_status s = distil_error_set(
        b->ctx, err == CL_OUT_OF_HOST_MEMORY ? DISTIL_ERR_OUT_OF_MEMORY : DISTIL_ERR_BACKEND,
        "opencl: building %s (options \"%s\") failed: %s (%d)\n%s", ocl_prog_file(prog), options,
        distil_ocl_error_name(err), (int)err, log ? log : "(no build log)");
    free(log);
    return s;
}

static distil_status ocl_program_build(distil_ocl *b, distil_ocl_prog prog, const char *options,
                                       cl_program *out) {
    const char *texts[OCL_MAX_PARTS];
    size_t lens[OCL_MAX_PARTS];
    cl_uint n = 0;
    for (int i = 0; i < OCL_MAX_PARTS && ocl_prog_parts[prog][i] != DISTIL_OCL_SRC_COUNT; i++) {
        DISTIL_TRY(distil_ocl_source_get(b, ocl_prog_parts[prog][i], &texts[n], &lens[n]));
        n++;
    }
    cl_int err = CL_SUCCESS;
    cl_program p = clCreateProgramWithSource(b->context, n, texts, lens, &err);
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, "clCreateProgramWithSource");
    }
    err = clBuildProgram(p, 1, &b->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        distil_status s = ocl_build_failed(b, p, err, prog, options);
        clReleaseProgram(p);
        return s;
    }
    *out = p;
    return DISTIL_OK;
}

/* The cache entry for (prog, options), built on first use. */
static distil_status ocl_program_get(distil_ocl *b, distil_ocl_prog prog, const char *options,
                                     distil_ocl_program **out) {
    char key[2048];
    snprintf(key, sizeof key, "%d|%s", (int)prog, options);
    for (int i = 0; i < b->n_programs; i++) {
        if (strcmp(b->programs[i].key, key) == 0) {
            *out = &b->programs[i];
            return DISTIL_OK;
        }
    }
    if (b->n_programs == b->cap_programs) {
        int cap = b->cap_programs ? 2 * b->cap_programs : 8;
        distil_ocl_program *grown = realloc(b->programs, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY, "opencl: program cache");
        }
        b->programs = grown;
        b->cap_programs = cap;
    }
    distil_ocl_program *e = &b->programs[b->n_programs];
    memset(e, 0, sizeof *e);
    e->key = malloc(strlen(key) + 1);
    if (e->key == NULL) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY, "opencl: program cache");
    }
    strcpy(e->key, key);
    distil_status s = ocl_program_build(b, prog, options, &e->program);
    if (s != DISTIL_OK) {
        free(e->key);
        return s;
    }
    b->n_programs++;
    *out = e;
    return DISTIL_OK;
}

/* The work-group size a kernel was compiled for (reqd_work_group_size), else the tuning's. */
static void ocl_kernel_local(distil_ocl *b, cl_kernel k, size_t local[3]) {
    size_t req[3] = {0, 0, 0};
    if (clGetKernelWorkGroupInfo(k, b->device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof req, req,
                                 NULL) != CL_SUCCESS ||
        req[0] == 0) {
        size_t max = (size_t)b->tuning.wg_size;
        clGetKernelWorkGroupInfo(k, b->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof max, &max, NULL);
        req[0] = max < (size_t)b->tuning.wg_size ? max : (size_t)b->tuning.wg_size;
        req[1] = 1;
        req[2] = 1;
    }
    memcpy(local, req, sizeof req);
}

distil_status distil_ocl_kernel_get(distil_ocl *b, distil_ocl_prog prog, const char *defines,
                                    const char *name, distil_ocl_kernel *out) {
    char options[1536];
    snprintf(options, sizeof options, "%s %s %s", b->options, defines, b->user_options);
    distil_ocl_program *e = NULL;
    DISTIL_TRY(ocl_program_get(b, prog, options, &e));
    int i = 0;
    while (i < e->n_kernels && strcmp(e->names[i], name) != 0) {
        i++;
    }
    if (i == e->n_kernels) {
        if (i == DISTIL_OCL_MAX_KERNELS) {
            return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "opencl: too many kernels");
        }
        cl_int err = CL_SUCCESS;
        cl_kernel k = clCreateKernel(e->program, name, &err);
        if (err != CL_SUCCESS) {
            return distil_ocl_fail(b, err, name);
        }
        e->names[i] = name;
        e->kernels[i] = k;
        ocl_kernel_local(b, k, e->local[i]);
        e->n_kernels++;
    }
    out->kernel = e->kernels[i];
    out->name = e->names[i];
    memcpy(out->local, e->local[i], sizeof out->local);
    return DISTIL_OK;
}

void distil_ocl_programs_release(distil_ocl *b) {
    for (int i = 0; i < b->n_programs; i++) {
        for (int k = 0; k < b->programs[i].n_kernels; k++) {
            clReleaseKernel(b->programs[i].kernels[k]);
        }
        clReleaseProgram(b->programs[i].program);
        free(b->programs[i].key);
    }
    free(b->programs);
    b->programs = NULL;
    b->n_programs = 0;
    b->cap_programs = 0;
    for (int s = 0; s < DISTIL_OCL_SRC_COUNT; s++) {
        free(b->sources[s]);
        b->sources[s] = NULL;
    }
}

distil_status distil_ocl_launch(distil_ocl *b, const distil_ocl_kernel *k,
                                const distil_ocl_arg *args, int n_args, size_t groups,
                                size_t groups_y) {
    if (groups == 0) {
        return DISTIL_OK;
    }
    for (int i = 0; i < n_args; i++) {
        cl_int err = clSetKernelArg(k->kernel, (cl_uint)i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            char what[128];
            snprintf(what, sizeof what, "argument %d of %s", i, k->name);
            return distil_ocl_fail(b, err, what);
        }
    }
    const size_t global[2] = {groups * k->local[0], (groups_y ? groups_y : 1) * k->local[1]};
    cl_int err = clEnqueueNDRangeKernel(b->queue, k->kernel, groups_y ? 2 : 1, NULL, global,
                                        k->local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, k->name);
    }
    return DISTIL_OK;
}

size_t distil_ocl_groups(size_t count, size_t per_group) {
    size_t g = (count + per_group - 1) / per_group;
    return g < 8192 ? g : 8192; /* grid-stride loops cover the rest */
}

const char *distil_ocl_dtype_token(distil_dtype dtype) {
    return dtype == DISTIL_BF16 ? "bf16" : dtype == DISTIL_F16 ? "f16" : "f32";
}

cl_mem distil_ocl_mem(distil_dptr p) {
    return (cl_mem)p.base;
}

cl_ulong distil_ocl_elems(distil_dptr p, size_t elem) {
    return (cl_ulong)(p.off / elem);
}
