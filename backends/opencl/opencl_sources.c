/*
 * opencl_sources.c - the text of the kernel files (opencl backend). Normally embedded at build
 * time by distil_embed_text() (cmake/DistilEmbed.cmake); with DISTIL_OPENCL_EMBED_KERNELS=OFF
 * they are read at run time from $DISTIL_OPENCL_KERNEL_DIR, else from the directory configured
 * at build time, so that kernels can be edited without rebuilding the library.
 */
#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* distil_elem.h is read from the source tree's core/backend_api/math, relative to the kernels
 * folder. */
static const char *const ocl_source_files[DISTIL_OCL_SRC_COUNT] = {
    "common.cl", "../../../core/backend_api/math/distil_elem.h",
    "jsd.cl",    "distill.cl",
    "reduce.cl", "elementwise.cl",
    "gemm.cl",
};

#ifdef DISTIL_OPENCL_EMBED_KERNELS

extern const char distil_opencl_src_common[];
extern const size_t distil_opencl_src_common_len;
extern const char distil_opencl_src_elem[];
extern const size_t distil_opencl_src_elem_len;
extern const char distil_opencl_src_jsd[];
extern const size_t distil_opencl_src_jsd_len;
extern const char distil_opencl_src_distill[];
extern const size_t distil_opencl_src_distill_len;
extern const char distil_opencl_src_reduce[];
extern const size_t distil_opencl_src_reduce_len;
extern const char distil_opencl_src_elementwise[];
extern const size_t distil_opencl_src_elementwise_len;
extern const char distil_opencl_src_gemm[];
extern const size_t distil_opencl_src_gemm_len;

distil_status distil_ocl_source_get(distil_ocl *b, distil_ocl_src src, const char **text,
                                    size_t *len) {
    (void)b;
    static const char *const texts[DISTIL_OCL_SRC_COUNT] = {
        distil_opencl_src_common,  distil_opencl_src_elem,   distil_opencl_src_jsd,
        distil_opencl_src_distill, distil_opencl_src_reduce, distil_opencl_src_elementwise,
        distil_opencl_src_gemm,
    };
    const size_t *const lens[DISTIL_OCL_SRC_COUNT] = {
        &distil_opencl_src_common_len, &distil_opencl_src_elem_len,
        &distil_opencl_src_jsd_len,    &distil_opencl_src_distill_len,
        &distil_opencl_src_reduce_len, &distil_opencl_src_elementwise_len,
        &distil_opencl_src_gemm_len,
    };
    *text = texts[src];
    *len = *lens[src];
    return DISTIL_OK;
}

#else /* read from a directory at run time */

#ifndef DISTIL_OPENCL_KERNEL_DIR_DEFAULT
#define DISTIL_OPENCL_KERNEL_DIR_DEFAULT "."
#endif

/* Read the whole file into a NUL-terminated malloc'd buffer. */
static distil_status ocl_read_file(distil_ocl *b, const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                                "opencl: cannot open kernel file %s (set DISTIL_OPENCL_KERNEL_DIR "
                                "to the kernels/ folder)",
                                path);
    }
    size_t cap = 1 << 16;
    size_t len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) {
            break;
        }
        char *grown = realloc(buf, cap * 2);
        if (grown == NULL) {
            free(buf);
        }
        buf = grown;
        cap *= 2;
    }
    const bool bad = buf == NULL || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "opencl: cannot read %s", path);
    }
    buf[len] = '\0';
    *out = buf;
    return DISTIL_OK;
}

distil_status distil_ocl_source_get(distil_ocl *b, distil_ocl_src src, const char **text,
                                    size_t *len) {
    if (b->sources[src] == NULL) {
        const char *dir = getenv("DISTIL_OPENCL_KERNEL_DIR");
        if (dir == NULL || dir[0] == '\0') {
            dir = DISTIL_OPENCL_KERNEL_DIR_DEFAULT;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, ocl_source_files[src]);
        DISTIL_TRY(ocl_read_file(b, path, &b->sources[src]));
    }
    *text = b->sources[src];
    *len = strlen(b->sources[src]);
    return DISTIL_OK;
}

#endif

const char *distil_ocl_source_file(distil_ocl_src src) {
    return ocl_source_files[src];
}
