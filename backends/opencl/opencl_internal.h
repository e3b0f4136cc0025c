/*
 * opencl_internal.h - state and helpers shared by the files of the opencl backend (OpenCL 1.2
 * host API). Device pointers are cl_mem handles; a distil_dptr is (cl_mem, byte offset) and
 * kernels take the buffer plus an element offset. Nothing here is visible outside the backend.
 */
#ifndef DISTIL_OPENCL_INTERNAL_H
#define DISTIL_OPENCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "backend.h"
#include "opencl_api.h"
#include "opencl_kernel_files.h"

#include <stdbool.h>
#include <stddef.h>

/* ---------------------------------------------------------------- devices (opencl_device.c) */

/* One usable device, in the order the backend numbers them (GPUs first, see the .c file). */
typedef struct distil_ocl_device {
    cl_platform_id platform;
    cl_device_id device;
} distil_ocl_device;

#define DISTIL_OCL_MAX_DEVICES 64

/* Fill out[0 .. *n) in selection order, honouring DISTIL_OPENCL_PLATFORM; *n = 0 when OpenCL
 * has no platform. Never fails. */
void distil_ocl_devices(distil_ocl_device *out, int cap, int *n);

/* ---------------------------------------------------------------- tuning (tuning.c) */

typedef struct distil_ocl_tuning {
    int wg_size;   /* work-group size of the row and reduction kernels (power of two) */
    int vec;       /* elements per work-item per step of a row loop */
    int gemm_tile; /* tile edge of the fallback gemm.cl */
} distil_ocl_tuning;

/* Pick the tuning for a device: vendor first, then a device-name substring, then defaults,
 * clamped to the device's largest work-group. */
distil_ocl_tuning distil_ocl_tuning_pick(cl_device_id device);
/* " -DWG_SIZE=.. -DVEC=.. -DGEMM_TILE=.." into buf, leaving out what `user`
 * defines. */
void distil_ocl_tuning_options(const distil_ocl_tuning *t, const char *user, char *buf, size_t n);

/* ---------------------------------------------------------------- programs (opencl_program.c) */

/* The programs: each is common.cl followed by the listed kernel files. */
typedef enum distil_ocl_prog {
    DISTIL_OCL_PROG_ROWS,        /* div_rows.cl + fused_rows.cl, -DDTYPE */
    DISTIL_OCL_PROG_REDUCE,      /* reduce.cl */
    DISTIL_OCL_PROG_ELEMENTWISE, /* elementwise.cl, -DSRC_DTYPE -DDST_DTYPE */
    DISTIL_OCL_PROG_GEMM,        /* gemm.cl */
    DISTIL_OCL_PROG_TOPK,        /* div_rows.cl + distil_topk.h + topk.cl (docs/SPEC.md §7) */
    DISTIL_OCL_PROG_TP, /* div_rows.cl + fused_rows.cl + tp.cl, -DDTYPE (docs/SPEC.md §8) */
    DISTIL_OCL_PROG_COUNT
} distil_ocl_prog;

#define DISTIL_OCL_MAX_KERNELS 4

typedef struct distil_ocl_program {
    char *key; /* program id and the full option string */
    cl_program program;
    const char *names[DISTIL_OCL_MAX_KERNELS];
    cl_kernel kernels[DISTIL_OCL_MAX_KERNELS];
    size_t local[DISTIL_OCL_MAX_KERNELS][3]; /* reqd_work_group_size of each kernel */
    int n_kernels;
} distil_ocl_program;

/* A kernel ready to launch, with the work-group size it was compiled for. */
typedef struct distil_ocl_kernel {
    cl_kernel kernel;
    const char *name;
    size_t local[3];
} distil_ocl_kernel;

/* Kernel source text of one file: embedded, or read from DISTIL_OPENCL_KERNEL_DIR.
 * DISTIL_OCL_SRC_<NAME> for each source of opencl_kernel_files.h (ELEM is
 * core/backend_api/math/distil_elem.h, the element terms every backend shares, and DIV_LIST
 * distil_div_list.h, their modes). */
#define DISTIL_OCL_SRC_ENUM(name, NAME, path) DISTIL_OCL_SRC_##NAME,
typedef enum distil_ocl_src {
    DISTIL_OCL_KERNEL_FILES(DISTIL_OCL_SRC_ENUM) DISTIL_OCL_SRC_COUNT
} distil_ocl_src;
#undef DISTIL_OCL_SRC_ENUM

/* ---------------------------------------------------------------- backend state */

/* A backend-owned device buffer that only grows. */
typedef struct distil_ocl_scratch {
    cl_mem mem;
    size_t bytes;
} distil_ocl_scratch;

enum { DISTIL_OCL_SCRATCH_A, DISTIL_OCL_SCRATCH_B, DISTIL_OCL_SCRATCH_C, DISTIL_OCL_SCRATCH_N };

/* A buffer this context allocated for the caller (distil_malloc), see opencl_handles.c. */
typedef struct distil_ocl_alloc {
    cl_mem mem;
    size_t bytes;
} distil_ocl_alloc;

#define DISTIL_OCL_LABEL_LONGS 4

typedef struct distil_ocl {
    distil_ctx *ctx; /* where messages go */
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue own_queue;   /* made by create, in order */
    cl_command_queue queue;       /* own_queue or the one lent with set_stream */
    cl_command_queue alloc_queue; /* private: forces allocations without waiting on `queue` */
    char name[256];
    cl_ulong max_alloc;
    distil_ocl_tuning tuning;
    char options[512];      /* "-cl-std=CL1.2" and the tuning's -D options */
    char user_options[512]; /* DISTIL_OPENCL_BUILD_OPTIONS, appended last */

    distil_ocl_program *programs; /* the program cache, keyed by program + options */
    int n_programs;
    int cap_programs;
    char *sources[DISTIL_OCL_SRC_COUNT]; /* texts read from disk (runtime loading only) */

    distil_ocl_scratch scratch[DISTIL_OCL_SCRATCH_N];
    /* Deferred invalid label: long[DISTIL_OCL_LABEL_LONGS] {first bad row or -1, its label, V,
     * kind: 0 label, 1 / 2 a teacher id out of range / twice}, written by count_valid (reduce.cl)
     * or distil_topk_commit (topk.cl). label_pending: the label check ran since the last
     * synchronize. */
    cl_mem label_state;
    bool label_pending;
    /* One int: the smallest bad row of a topk_rows launch (INT_MAX: none), atomic_min'd by
     * distil_topk_rows and read and reset by distil_topk_commit (kernels/topk.cl). */
    cl_mem topk_bad_row;
    void *mem_dispatch;       /* first word of a cl_mem of this platform (check_pointer) */
    bool gemm_attached;       /* fully created: destroy clears CLBlast's cache */
    int probe_pipe[2];        /* for reading unknown pointers safely (check_pointer), -1 if none */
    distil_ocl_alloc *allocs; /* the caller's live distil_malloc buffers, sorted by handle */
    size_t n_allocs, cap_allocs;
} distil_ocl;

/* ---------------------------------------------------------------- errors (opencl_error.c) */

const char *distil_ocl_error_name(cl_int err);
/* Map an OpenCL error to a status (allocation failures -> OUT_OF_MEMORY, others -> BACKEND)
 * and record "opencl: <what>: <name> (<code>)" on the context. */
distil_status distil_ocl_fail(distil_ocl *b, cl_int err, const char *what);

/* ---------------------------------------------------------------- launching (opencl_launch.c) */

typedef struct distil_ocl_arg {
    size_t size;
    const void *value;
} distil_ocl_arg;
#define DISTIL_OCL_ARG(v)                                                                          \
    { sizeof(v), &(v) }

/* Get a kernel of a program built with `defines` (e.g. "-DDTYPE=bf16", may be ""). */
distil_status distil_ocl_kernel_get(distil_ocl *b, distil_ocl_prog prog, const char *defines,
                                    const char *name, distil_ocl_kernel *out);
/* Set the arguments and enqueue on b->queue: `groups` work-groups of the kernel's size in
 * dimension 0 (and groups_y in dimension 1). */
distil_status distil_ocl_launch(distil_ocl *b, const distil_ocl_kernel *k,
                                const distil_ocl_arg *args, int n_args, size_t groups,
                                size_t groups_y);
/* Work-groups for a grid-stride loop over `count` items with `per_group` items per group. */
size_t distil_ocl_groups(size_t count, size_t per_group);
/* The dtype as a kernel token: "f32", "bf16", "f16". */
const char *distil_ocl_dtype_token(distil_dtype dtype);
/* A distil_dptr's buffer and its offset in elements of `elem` bytes. */
cl_mem distil_ocl_mem(distil_dptr p);
cl_ulong distil_ocl_elems(distil_dptr p, size_t elem);

/* ---------------------------------------------------------------- programs and sources */

void distil_ocl_programs_release(distil_ocl *b);
/* Text of one source file; the embedded copy or DISTIL_OPENCL_KERNEL_DIR/<file>. */
distil_status distil_ocl_source_get(distil_ocl *b, distil_ocl_src src, const char **text,
                                    size_t *len);
/* Every source read now (a build that reads them at run time: a DISTIL_OPENCL_KERNEL_DIR without
 * them fails the context's creation, naming the variable); nothing for embedded kernels. */
distil_status distil_ocl_sources_load(distil_ocl *b);
/* The file name of a source ("div_rows.cl"), for messages. */
const char *distil_ocl_source_file(distil_ocl_src src);

/* ---------------------------------------------------------------- memory (opencl_memory.c) */

distil_status distil_ocl_buffer_new(distil_ocl *b, size_t bytes, cl_mem *out);
/* A scratch buffer of at least `bytes`, grown (and never shrunk) as needed. */
distil_status distil_ocl_scratch_get(distil_ocl *b, int slot, size_t bytes, cl_mem *out);
void distil_ocl_scratch_release(distil_ocl *b);
/* Does p (safely read) start like an OpenCL object of this context's platform? False when it
 * cannot be told (no pipe) or p is unreadable. */
bool distil_ocl_is_platform_object(distil_ocl *b, const void *p);

/* Refuse DISTIL_OPENCL_BUILD_OPTIONS that would give wrong results (opencl_options.c). */
distil_status distil_ocl_options_check(distil_ocl *b, const char *user);

/* ---------------------------------------------------------------- handles (opencl_handles.c) */

/* Bytes of p when it is a live distil_malloc buffer of this context, else 0 (p untouched). */
size_t distil_ocl_allocs_find(const distil_ocl *b, const void *p);
distil_status distil_ocl_allocs_add(distil_ocl *b, cl_mem mem, size_t bytes);
void distil_ocl_allocs_remove(distil_ocl *b, cl_mem mem);

/* ---------------------------------------------------------------- vtable operations */

distil_status distil_ocl_mem_alloc(void *vb, size_t bytes, void **ptr);
void distil_ocl_mem_free(void *vb, void *ptr);
distil_status distil_ocl_mem_upload(void *vb, distil_dptr dst, const void *src, size_t bytes);
distil_status distil_ocl_mem_download(void *vb, void *dst, distil_dptr src, size_t bytes);
distil_status distil_ocl_check_pointer(void *vb, const void *p, const char *what);
distil_status distil_ocl_mem_extent(void *vb, const void *p, distil_mem_extent *out);
distil_status distil_ocl_check_free(void *vb, const void *p);

distil_status distil_ocl_gemm(void *vb, const distil_gemm_args *a);
/* Count the contexts that may use the GEMM library (create / destroy). */
void distil_ocl_gemm_detach(void);
distil_status distil_ocl_count_valid(void *vb, const distil_count_args *a);
distil_status distil_ocl_div_rows(void *vb, const distil_div_rows_args *a);
distil_status distil_ocl_tp_rows(void *b, const distil_tp_rows_args *a); /* opencl_tp_rows.c */
distil_status distil_ocl_fused_rows(void *vb, const distil_fused_rows_args *a);
distil_status distil_ocl_topk_rows(void *vb, const distil_topk_rows_args *a); /* opencl_topk.c */
/* Shared by the row launchers (opencl_rows.c): the constants of a divergence for the kernels'
 * distil_coef_of (div_rows.cl), and an optional operand as its buffer and element offset, or the
 * label-state buffer and 0 (returns whether it is present). */
cl_float8 distil_ocl_coef(distil_divergence divergence, float beta, float alpha);
cl_int distil_ocl_optional(distil_ocl *b, distil_dptr p, size_t elem, cl_mem *mem, cl_ulong *off);
/* docs/SPEC.md §6 head options (head.cl) */
distil_status distil_ocl_head_rows(void *vb, const distil_head_rows_args *a);
distil_status distil_ocl_reduce(void *vb, const distil_reduce_args *a);
distil_status distil_ocl_cast(void *vb, const distil_cast_args *a);
distil_status distil_ocl_fill(void *vb, const distil_fill_args *a);
distil_status distil_ocl_scale(void *vb, const distil_scale_args *a);

/* Strided 2-D cast (rows, cols) between element offsets, used by gemm for its operands. */
distil_status distil_ocl_cast_rows(distil_ocl *b, cl_mem src, cl_ulong src_off, cl_ulong src_ld,
                                   distil_dtype src_dtype, cl_mem dst, cl_ulong dst_off,
                                   cl_ulong dst_ld, distil_dtype dst_dtype, cl_ulong rows,
                                   cl_ulong cols);
/* c (rows, cols) fp32 += bias (cols) broadcast over rows. */
distil_status distil_ocl_bias_add(distil_ocl *b, cl_mem c, cl_ulong c_off, cl_ulong ldc,
                                  cl_ulong rows, cl_ulong cols, distil_dptr bias,
                                  distil_dtype bias_dtype);

#endif /* DISTIL_OPENCL_INTERNAL_H */
