/*
 * gpu_context.cu - lifecycle of the cuda / hip backend: probe, create (own stream, BLAS handles
 * bound to it, an explicit BLAS workspace, the fused loss's second lane with its own stream,
 * handle and workspace, the deferred-error word), destroy, describe,
 * set_stream and synchronize (which reports a recorded invalid label once). Also the mapping of
 * runtime errors to statuses shared by every file.
 */
#include "fused_rows.cuh"
#include "gpu_state.cuh"
#if DISTIL_GPU_HAVE_CUTLASS
#include "gemm_gradw.cuh"
#include "gemm_stats.cuh"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_BLAS
/* 32 MiB: what cuBLAS itself recommends on Hopper for its workspace. */
constexpr size_t GPU_BLAS_WS_BYTES = 32u << 20;
#endif

distil_status gpu_fail(gpu_state *b, cudaError_t e, const char *what) {
    (void)cudaGetLastError(); /* clear a non-sticky error so the context stays usable */
    const distil_status s =
        e == cudaErrorMemoryAllocation ? DISTIL_ERR_OUT_OF_MEMORY : DISTIL_ERR_BACKEND;
    return distil_error_set(b ? b->ctx : nullptr, s, "%s: %s: %s", DISTIL_GPU_NAME, what,
                            cudaGetErrorString(e));
}

distil_status gpu_check_launch(gpu_state *b, const char *what) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DISTIL_OK : gpu_fail(b, e, what);
}

/* The test hooks in force at create (core/testing/distil_testing.h), so that the test suite can
 * cover the paths other devices take: gemm=portable (the GEMM of HIP without hipBLAS) and
 * fused_rows=stream (the row kernel of HIP and of rows too long for shared memory), and prove that
 * a path ran: fused_rows=resident, stats=require (fused_rows.cu), gradw=require (gemm.cu);
 * fp8=lt|emulate picks the fp8 teacher head's product (fp8.cu); side_delay_us delays the second
 * lane after each fork (tests of the join). The CUTLASS kernels start on; a failed setup turns
 * one off (gpu_init_cutlass). */
static void gpu_read_hooks(gpu_state *b) {
    const distil_test_hooks h = distil_test_hooks_now();
    b->portable_gemm = !DISTIL_GPU_HAVE_BLAS || h.gemm_portable;
    b->fused_stream = h.rows == DISTIL_HOOK_ROWS_STREAM;
    b->fused_resident = h.rows == DISTIL_HOOK_ROWS_RESIDENT;
    b->side_delay = h.side_delay_us * 2000; /* ~2 GHz: a test hook, not a clock */
    b->fp8_mode = h.fp8;
    b->gemm_stats = true;
    b->stats_require = h.stats_require;
    b->gemm_gradw = true;
    b->gradw_require = h.gradw_require;
}

static distil_status gpu_query_device(gpu_state *b) {
    cudaDeviceProp prop;
    GPU_TRY(b, cudaGetDeviceProperties(&prop, b->device), "cudaGetDeviceProperties");
    snprintf(b->name, sizeof b->name, "%s", prop.name);
    b->sm_count = prop.multiProcessorCount;
    b->cc_major = prop.major;
    b->cc_minor = prop.minor;
#ifdef DISTIL_USE_HIP /* ROCm 5.2 has no opt-in limit: the plain one */
    b->smem_optin = prop.sharedMemPerBlock;
#else
    b->smem_optin = prop.sharedMemPerBlockOptin;
#endif
    return DISTIL_OK;
}

/* A BLAS handle bound to lane->stream, with its own workspace; `which` ends the messages ("" or
 * " (second lane)"). On failure the lane keeps what was made, for gpu_release. */
static distil_status gpu_lane_blas(gpu_state *b, gpu_lane *lane, const char *which) {
#if DISTIL_GPU_HAVE_BLAS
    if (cublasCreate(&lane->blas) != CUBLAS_STATUS_SUCCESS) {
        lane->blas = nullptr;
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "%s: cublasCreate failed%s",
                                DISTIL_GPU_NAME, which);
    }
    if (distil_fault_alloc()) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "%s: allocating the BLAS workspace%s failed (injected)",
                                DISTIL_GPU_NAME, which);
    }
    GPU_TRY(b, cudaMalloc(&lane->blas_work, GPU_BLAS_WS_BYTES), "BLAS workspace");
    lane->blas_work_bytes = GPU_BLAS_WS_BYTES;
    if (cublasSetStream(lane->blas, lane->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(lane->blas, lane->blas_work, lane->blas_work_bytes) !=
            CUBLAS_STATUS_SUCCESS) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "%s: cuBLAS stream/workspace setup%s",
                                DISTIL_GPU_NAME, which);
    }
#else
    (void)b;
    (void)lane;
    (void)which;
#endif
    return DISTIL_OK;
}

/* The context stream's BLAS handle and workspace, and the cuBLASLt handle. */
static distil_status gpu_init_blas(gpu_state *b) {
    DISTIL_TRY(gpu_lane_blas(b, &b->lane, ""));
#if DISTIL_GPU_HAVE_BLASLT
    if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) {
        b->lt = nullptr;
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "%s: cublasLtCreate failed",
                                DISTIL_GPU_NAME);
    }
#endif
    return DISTIL_OK;
}

/* The second lane of the fused loss: its stream, BLAS handle and workspace, and the two events
 * that fork work to it and join it back. */
static distil_status gpu_init_side(gpu_state *b) {
    GPU_TRY(b, cudaStreamCreateWithFlags(&b->side.stream, cudaStreamNonBlocking),
            "stream create (second lane)");
    GPU_TRY(b, cudaEventCreateWithFlags(&b->fork, cudaEventDisableTiming),
            "event create (second lane)");
    GPU_TRY(b, cudaEventCreateWithFlags(&b->join, cudaEventDisableTiming),
            "event create (second lane)");
    return gpu_lane_blas(b, &b->side, " (second lane)");
}

#if DISTIL_GPU_HAVE_CUTLASS
/* One CUTLASS kernel's setup result: a failure turns the kernel off (its work goes to cuBLAS), or
 * fails the context when its test hook says require (the test must not pass on the other path). */
static distil_status gpu_cutlass_setup_result(gpu_state *b, cudaError_t e, bool require,
                                              bool *enabled, const char *what) {
    if (e != cudaSuccess && require) {
        return gpu_fail(b, e, what);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *enabled = false;
    }
    return DISTIL_OK;
}
#endif

/* The CUTLASS kernels' shared-memory attributes, once per context (gemm_stats, gemm_gradw). */
static distil_status gpu_init_cutlass(gpu_state *b) {
#if DISTIL_GPU_HAVE_CUTLASS
    const cudaError_t se = gpu_stats_device(b) ? gemm_stats_setup() : cudaSuccess;
    DISTIL_TRY(gpu_cutlass_setup_result(b, se, b->stats_require, &b->gemm_stats,
                                        "test hook stats=require: the statistics GEMM's setup"));
    const cudaError_t ge = gpu_gradw_device(b) ? gemm_gradw_setup() : cudaSuccess;
    return gpu_cutlass_setup_result(b, ge, b->gradw_require, &b->gemm_gradw,
                                    "test hook gradw=require: the weight-gradient GEMM's setup");
#else
    (void)b;
    return DISTIL_OK;
#endif
}

static distil_status gpu_init(gpu_state *b) {
    DISTIL_TRY(gpu_query_device(b));
    DISTIL_TRY(fused_resident_setup(b));
    DISTIL_TRY(gpu_init_cutlass(b));
    GPU_TRY(b, cudaStreamCreateWithFlags(&b->own_stream, cudaStreamNonBlocking), "stream create");
    b->lane.stream = b->own_stream;
    DISTIL_TRY(gpu_init_blas(b));
    DISTIL_TRY(gpu_init_side(b)); /* here, never inside a call: a call may be being captured */
    if (distil_fault_alloc()) {
        return distil_error_set(b->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "%s: allocating the label error word failed (injected)",
                                DISTIL_GPU_NAME);
    }
    GPU_TRY(b, cudaMalloc(&b->label_err, sizeof(gpu_label_error)), "label error word");
    /* On the context's own stream, and waited for: a plain cudaMemcpy from pageable memory may
     * return before the write lands, and it is not ordered with a non-blocking stream. */
    const gpu_label_error none = gpu_label_none();
    GPU_TRY(
        b,
        cudaMemcpyAsync(b->label_err, &none, sizeof none, cudaMemcpyHostToDevice, b->lane.stream),
        "label error word");
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "label error word");
    return DISTIL_OK;
}

static void gpu_release(gpu_state *b) {
#if DISTIL_GPU_HAVE_BLASLT
    if (b->lt) {
        cublasLtDestroy(b->lt);
    }
#endif
#if DISTIL_GPU_HAVE_BLAS
    if (b->lane.blas) {
        cublasDestroy(b->lane.blas);
    }
    if (b->side.blas) {
        cublasDestroy(b->side.blas);
    }
#endif
    if (b->own_stream) {
        (void)cudaStreamSynchronize(b->own_stream);
        (void)cudaStreamDestroy(b->own_stream);
    }
    if (b->side.stream) {
        (void)cudaStreamSynchronize(b->side.stream);
        (void)cudaStreamDestroy(b->side.stream);
    }
    if (b->fork) {
        (void)cudaEventDestroy(b->fork);
    }
    if (b->join) {
        (void)cudaEventDestroy(b->join);
    }
    (void)cudaFree(b->lane.blas_work);
    (void)cudaFree(b->side.blas_work);
    (void)cudaFree(b->label_err);
    (void)cudaGetLastError();
    free(b);
}

/* The recorded deferred input error (a label, a teacher id, a head made once), if any, as a
 * status (and reset the word). */
static distil_status gpu_take_label_error(gpu_state *b) {
    gpu_label_error e;
    GPU_TRY(b, cudaMemcpyAsync(&e, b->label_err, sizeof e, cudaMemcpyDeviceToHost, b->lane.stream),
            "synchronize");
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "synchronize");
    if (e.row < 0) {
        return DISTIL_OK;
    }
    const gpu_label_error none = gpu_label_none();
    GPU_TRY(
        b,
        cudaMemcpyAsync(b->label_err, &none, sizeof none, cudaMemcpyHostToDevice, b->lane.stream),
        "synchronize");
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "synchronize");
    if (e.kind == GPU_ERR_HEAD_SHAPE) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "fused_linear_jsd: teacher_weight_e4m3 was made for another shape "
                                "/ backend: %lld rows, %lld columns, %lld-byte codes; the call's "
                                "teacher head has %lld rows, %lld columns, and backend '%s' "
                                "1-byte codes",
                                e.head_rows, e.head_cols, e.head_eb, e.want_rows, e.want_cols,
                                DISTIL_GPU_NAME);
    }
    if (e.kind == GPU_ERR_HEAD_NONE) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_ARG,
                                "fused_linear_jsd: teacher_weight_e4m3 is not a head of "
                                "distil_e4m3_head_make (no header of this library's layout): made "
                                "for another shape / backend, or not a head");
    }
    if (e.kind == 2) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld twice", e.row, e.label);
    }
    if (e.kind == 1) {
        return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld outside [0, %lld)", e.row,
                                e.label, e.vocab);
    }
    return distil_error_set(b->ctx, DISTIL_ERR_INVALID_LABEL,
                            "labels: row %lld has label %lld outside [0, %lld)", e.row, e.label,
                            e.vocab);
}

} // namespace DISTIL_GPU_NS

using namespace DISTIL_GPU_NS;

extern "C" distil_status DISTIL_GPU_FN(probe)(int *n_devices) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        n = 0;
    }
    (void)cudaGetLastError();
    *n_devices = n;
    return DISTIL_OK;
}

extern "C" distil_status DISTIL_GPU_FN(create)(distil_ctx *ctx, int device, void **out) {
    *out = nullptr;
    gpu_state *b = static_cast<gpu_state *>(calloc(1, sizeof(gpu_state)));
    if (b == nullptr) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "%s: backend state",
                                DISTIL_GPU_NAME);
    }
    b->ctx = ctx;
    b->device = device;
    gpu_read_hooks(b);
    distil_status s;
    {
        gpu_device_guard guard(b);
        s = gpu_init(b);
    }
    if (s != DISTIL_OK) {
        gpu_device_guard guard(b);
        gpu_release(b);
        return s;
    }
    *out = b;
    return DISTIL_OK;
}

extern "C" void DISTIL_GPU_FN(destroy)(void *vb) {
    if (vb == nullptr) {
        return;
    }
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    gpu_release(b);
}

extern "C" void DISTIL_GPU_FN(describe)(void *vb, char *buf, size_t n) {
    if (n > 0) {
        snprintf(buf, n, "%s", gpu_of(vb)->name);
    }
}

extern "C" distil_status DISTIL_GPU_FN(set_stream)(void *vb, void *stream) {
    gpu_state *b = gpu_of(vb);
    /* NULL is the runtime's default stream (handle 0), a handle like any other. */
    b->lane.stream =
        stream == DISTIL_STREAM_OWN ? b->own_stream : static_cast<cudaStream_t>(stream);
#if DISTIL_GPU_HAVE_BLAS
    /* cublasSetStream resets the workspace to cuBLAS's own pool: set ours again. */
    if (cublasSetStream(b->lane.blas, b->lane.stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(b->lane.blas, b->lane.blas_work, b->lane.blas_work_bytes) !=
            CUBLAS_STATUS_SUCCESS) {
        return distil_error_set(b->ctx, DISTIL_ERR_BACKEND, "%s: set_stream: cuBLAS rebinding",
                                DISTIL_GPU_NAME);
    }
#endif
    return DISTIL_OK;
}

extern "C" distil_status DISTIL_GPU_FN(synchronize)(void *vb) {
    gpu_state *b = gpu_of(vb);
    gpu_device_guard guard(b);
    GPU_TRY(b, cudaStreamSynchronize(b->lane.stream), "synchronize");
    return gpu_take_label_error(b);
}
