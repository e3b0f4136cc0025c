/*
 * opencl_backend.c - the "opencl" backend's vtable and lifecycle: device choice, one cl_context
 * and in-order queue per distil context (or a queue the caller lends), and synchronize, which
 * reports a deferred invalid label once. Targets OpenCL 1.2: PoCL, NVIDIA, AMD, Intel.
 */
#define _POSIX_C_SOURCE 200809L

#include "opencl_internal.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#define OCL_HAVE_PIPE 1
#endif

/* No device where DISTIL_OPENCL_PLATFORM is set: the variable's value is why (the registry says
 * so when the backend is asked for). */
static distil_status ocl_probe(int *n_devices) {
    distil_ocl_device devs[DISTIL_OCL_MAX_DEVICES];
    distil_ocl_devices(devs, DISTIL_OCL_MAX_DEVICES, n_devices);
    const char *want = getenv("DISTIL_OPENCL_PLATFORM");
    if (*n_devices == 0 && want != NULL && want[0] != '\0') {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "DISTIL_OPENCL_PLATFORM '%s' matches no OpenCL platform with a "
                                "usable device",
                                want);
    }
    return DISTIL_OK;
}

/* A GPU or accelerator ranks above the cpu backend for automatic selection; an OpenCL CPU
 * device (PoCL) ranks below it, since the native cpu backend is faster there. */
static int ocl_auto_priority(void) {
    distil_ocl_device devs[DISTIL_OCL_MAX_DEVICES];
    int n = 0;
    cl_device_type type = 0;
    distil_ocl_devices(devs, DISTIL_OCL_MAX_DEVICES, &n);
    if (n > 0 &&
        clGetDeviceInfo(devs[0].device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
        (type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0) {
        return 200;
    }
    return 50;
}

/* The label state's "nothing recorded" value, see count_valid in reduce.cl. */
static distil_status ocl_label_state_reset(distil_ocl *b) {
    const cl_long init[DISTIL_OCL_LABEL_LONGS] = {-1, 0, 0, 0};
    cl_int err = clEnqueueWriteBuffer(b->queue, b->label_state, CL_TRUE, 0, sizeof init, init, 0,
                                      NULL, NULL);
    return err == CL_SUCCESS ? DISTIL_OK : distil_ocl_fail(b, err, "resetting the label state");
}

/* topk_bad_row, holding "none" (INT_MAX) from the start; distil_topk_commit keeps it so. */
static distil_status ocl_topk_bad_row_new(distil_ocl *b) {
    DISTIL_TRY(distil_ocl_buffer_new(b, sizeof(cl_int), &b->topk_bad_row));
    const cl_int none = CL_INT_MAX;
    cl_int err = clEnqueueWriteBuffer(b->queue, b->topk_bad_row, CL_TRUE, 0, sizeof none, &none, 0,
                                      NULL, NULL);
    return err == CL_SUCCESS ? DISTIL_OK : distil_ocl_fail(b, err, "initialising topk_bad_row");
}

static void ocl_pipe_open(distil_ocl *b) {
    b->probe_pipe[0] = b->probe_pipe[1] = -1;
#ifdef OCL_HAVE_PIPE
    if (pipe(b->probe_pipe) != 0) {
        b->probe_pipe[0] = b->probe_pipe[1] = -1;
        return;
    }
    fcntl(b->probe_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(b->probe_pipe[1], F_SETFD, FD_CLOEXEC);
#endif
}

static void ocl_destroy(void *vb) {
    distil_ocl *b = vb;
    if (b == NULL) {
        return;
    }
    /* Queued commands keep the kernels and buffers they use alive, so nothing needs to wait
     * here; a lent queue is the caller's and is left alone. */
    distil_ocl_programs_release(b);
    distil_ocl_scratch_release(b);
    if (b->label_state != NULL) {
        clReleaseMemObject(b->label_state);
    }
    if (b->topk_bad_row != NULL) {
        clReleaseMemObject(b->topk_bad_row);
    }
    if (b->alloc_queue != NULL) {
        clReleaseCommandQueue(b->alloc_queue);
    }
    if (b->own_queue != NULL) {
        clReleaseCommandQueue(b->own_queue);
    }
    if (b->context != NULL) {
        clReleaseContext(b->context);
    }
#ifdef OCL_HAVE_PIPE
    if (b->probe_pipe[0] >= 0) {
        close(b->probe_pipe[0]);
        close(b->probe_pipe[1]);
    }
#endif
    if (b->gemm_attached) {
        distil_ocl_gemm_detach();
    }
    free(b->allocs);
    free(b);
}

/* Device name, limits, tuning and build options (the user's checked first). */
static distil_status ocl_describe_device(distil_ocl *b) {
    char dev[160] = "";
    char plat[96] = "";
    clGetDeviceInfo(b->device, CL_DEVICE_NAME, sizeof dev - 1, dev, NULL);
    clGetPlatformInfo(b->platform, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
    snprintf(b->name, sizeof b->name, "%s (%s)", dev, plat);
    b->max_alloc = 0;
    clGetDeviceInfo(b->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof b->max_alloc, &b->max_alloc,
                    NULL);
    b->tuning = distil_ocl_tuning_pick(b->device);
    const char *user = getenv("DISTIL_OPENCL_BUILD_OPTIONS");
    DISTIL_TRY(distil_ocl_options_check(b, user ? user : ""));
    snprintf(b->user_options, sizeof b->user_options, "%s", user ? user : "");
    char tune[128];
    distil_ocl_tuning_options(&b->tuning, b->user_options, tune, sizeof tune);
    snprintf(b->options, sizeof b->options, "-cl-std=CL1.2%s", tune);
    return DISTIL_OK;
}

/* Context, queues, label state: everything create needs after the device is known. */
static distil_status ocl_open(distil_ocl *b) {
    cl_int err = CL_SUCCESS;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)b->platform,
                                           0};
    b->context = clCreateContext(props, 1, &b->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, "clCreateContext");
    }
    b->own_queue = clCreateCommandQueue(b->context, b->device, 0, &err);
    if (err == CL_SUCCESS) {
        b->alloc_queue = clCreateCommandQueue(b->context, b->device, 0, &err);
    }
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, "clCreateCommandQueue");
    }
    b->queue = b->own_queue;
    DISTIL_TRY(ocl_describe_device(b));
    DISTIL_TRY(distil_ocl_sources_load(b));
    DISTIL_TRY(distil_ocl_buffer_new(b, DISTIL_OCL_LABEL_LONGS * sizeof(cl_long), &b->label_state));
    DISTIL_TRY(ocl_label_state_reset(b));
    DISTIL_TRY(ocl_topk_bad_row_new(b));
    /* Every cl_mem of this platform starts with the same dispatch pointer (check_pointer). */
    memcpy(&b->mem_dispatch, (const void *)b->label_state, sizeof b->mem_dispatch);
    ocl_pipe_open(b);
    b->gemm_attached = true;
    return DISTIL_OK;
}

static distil_status ocl_create(distil_ctx *ctx, int device, void **out) {
    *out = NULL;
    distil_ocl_device devs[DISTIL_OCL_MAX_DEVICES];
    int n = 0;
    distil_ocl_devices(devs, DISTIL_OCL_MAX_DEVICES, &n);
    if (n == 0) {
        const char *want = getenv("DISTIL_OPENCL_PLATFORM");
        return distil_error_set(ctx, DISTIL_ERR_NOT_AVAILABLE,
                                "opencl: no usable OpenCL device%s%s%s (is an ICD installed, "
                                "e.g. pocl-opencl-icd or the GPU driver's?)",
                                want ? " on a platform matching DISTIL_OPENCL_PLATFORM='" : "",
                                want ? want : "", want ? "'" : "");
    }
    if (device < 0 || device >= n) {
        return distil_error_set(ctx, DISTIL_ERR_NOT_AVAILABLE,
                                "opencl: device %d does not exist (%d device%s)", device, n,
                                n == 1 ? "" : "s");
    }
    distil_ocl *b = calloc(1, sizeof *b);
    if (b == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "opencl: backend state");
    }
    b->ctx = ctx;
    b->platform = devs[device].platform;
    b->device = devs[device].device;
    b->probe_pipe[0] = b->probe_pipe[1] = -1;
    distil_status s = ocl_open(b);
    if (s != DISTIL_OK) {
        ocl_destroy(b);
        return s;
    }
    *out = b;
    return DISTIL_OK;
}

static void ocl_describe(void *vb, char *buf, size_t n) {
    const distil_ocl *b = vb;
    if (n > 0) {
        snprintf(buf, n, "%s", b->name);
    }
}

/* Ask OpenCL about a queue only after checking (safely) that it is an object of our platform. */
static distil_status ocl_check_queue(distil_ocl *b, cl_command_queue q) {
    cl_context c = NULL;
    cl_device_id d = NULL;
    cl_command_queue_properties props = 0;
    if ((b->probe_pipe[0] >= 0 && !distil_ocl_is_platform_object(b, q)) ||
        clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof c, &c, NULL) != CL_SUCCESS ||
        clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof d, &d, NULL) != CL_SUCCESS ||
        clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) != CL_SUCCESS) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "ctx_set_stream: stream is not a cl_command_queue of this OpenCL "
                                "platform");
    }
    if (c != b->context || d != b->device) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "ctx_set_stream: the queue belongs to another cl_context or "
                                "device; create it on this context's cl_context (CL_MEM_CONTEXT "
                                "of a distil_malloc buffer) and device");
    }
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
        return distil_error_set(b->ctx, DISTIL_ERR_UNSUPPORTED,
                                "ctx_set_stream: out-of-order queues are not supported (the "
                                "kernels of a call depend on each other in order)");
    }
    return DISTIL_OK;
}

static distil_status ocl_set_stream(void *vb, void *stream) {
    distil_ocl *b = vb;
    /* OpenCL has no default queue: NULL means the context's own, like DISTIL_STREAM_OWN. */
    const bool own = stream == NULL || stream == DISTIL_STREAM_OWN;
    cl_command_queue q = own ? b->own_queue : (cl_command_queue)stream;
    if (q == b->queue) {
        return DISTIL_OK;
    }
    if (!own) {
        DISTIL_TRY(ocl_check_queue(b, q));
    }
    /* Work queued so far must finish before the other queue may depend on it. */
    cl_int err = clFinish(b->queue);
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, "clFinish before switching queues");
    }
    b->queue = q;
    return DISTIL_OK;
}

/* Report the first invalid label recorded by count_valid, once. */
static distil_status ocl_label_report(distil_ocl *b) {
    cl_long st[DISTIL_OCL_LABEL_LONGS];
    cl_int err =
        clEnqueueReadBuffer(b->queue, b->label_state, CL_TRUE, 0, sizeof st, st, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        return distil_ocl_fail(b, err, "reading the label state");
    }
    b->label_pending = false;
    if (st[0] < 0) {
        return DISTIL_OK;
    }
    DISTIL_TRY(ocl_label_state_reset(b));
    if (st[3] == 2) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld twice", (long long)st[0],
                                (long long)st[1]);
    }
    if (st[3] == 1) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld outside [0, %lld)",
                                (long long)st[0], (long long)st[1], (long long)st[2]);
    }
    return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                            "labels: row %lld has label %lld outside [0, %lld)", (long long)st[0],
                            (long long)st[1], (long long)st[2]);
}

static distil_status ocl_synchronize(void *vb) {
    distil_ocl *b = vb;
    cl_int err = clFinish(b->queue);
    if (err != CL_SUCCESS) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND,
                                "opencl: clFinish failed: %s (%d); the device may have faulted "
                                "or been lost",
                                distil_ocl_error_name(err), (int)err);
    }
    return b->label_pending ? ocl_label_report(b) : DISTIL_OK;
}

/* cl_mem handles: queues, and the checks that a pointer is one of this context's buffers. */
static const distil_backend_device ocl_device = {
    .auto_priority = ocl_auto_priority,
    .set_stream = ocl_set_stream,
    .check_pointer = distil_ocl_check_pointer,
    .mem_extent = distil_ocl_mem_extent,
    .check_free = distil_ocl_check_free,
};

static const distil_backend_tp ocl_tp = {.tp_rows = distil_ocl_tp_rows};

static const char *const ocl_env_names[] = {"DISTIL_OPENCL_PLATFORM", "DISTIL_OPENCL_BUILD_OPTIONS",
                                            "DISTIL_OPENCL_KERNEL_DIR", NULL};

const distil_backend distil_backend_opencl = {
    .api_version = DISTIL_BACKEND_API_VERSION,
    .name = "opencl",
    .priority = 200,
    .host_memory = false,
    .env_names = ocl_env_names,
    .tuning = {.fp32_gemm = true},
    .probe = ocl_probe,
    .create = ocl_create,
    .destroy = ocl_destroy,
    .describe = ocl_describe,
    .synchronize = ocl_synchronize,
    .mem_alloc = distil_ocl_mem_alloc,
    .mem_free = distil_ocl_mem_free,
    .mem_upload = distil_ocl_mem_upload,
    .mem_download = distil_ocl_mem_download,
    .cast = distil_ocl_cast,
    .fill = distil_ocl_fill,
    .scale = distil_ocl_scale,
    .gemm = distil_ocl_gemm,
    .count_valid = distil_ocl_count_valid,
    .div_rows = distil_ocl_div_rows,
    .fused_rows = distil_ocl_fused_rows,
    .reduce = distil_ocl_reduce,
    .head_rows = distil_ocl_head_rows,
    .topk_rows = distil_ocl_topk_rows,
    .device = &ocl_device,
    .tp = &ocl_tp,
};
