/*
 * gpu_state.cuh - the per-context state of the cuda / hip backend and the helpers every .cu file
 * shares: vendor errors to distil statuses (with the vendor's message), the device guard, the
 * swap that sends work to the second lane (gpu_lanes_swap), and dptr -> typed pointer. Backend
 * layer; C++17, included after vendor.h.
 */
#ifndef DISTIL_GPU_STATE_CUH
#define DISTIL_GPU_STATE_CUH

#include "vendor.h"

#include "error.h"
#include "fault.h"
#include "gpu_backend.h"
#include "test_hooks.h"

#include <stdint.h>

/* 1 where CMake builds the CUTLASS kernels gemm_stats.cu and gemm_gradw.cu (cuda with sm_90a and
 * CUTLASS's headers) */
#ifndef DISTIL_GPU_HAVE_CUTLASS
#define DISTIL_GPU_HAVE_CUTLASS 0
#endif

namespace DISTIL_GPU_NS {

/* The kinds of gpu_label_error. */
enum {
    GPU_ERR_LABEL = 0,      /* a label outside [0, vocab) */
    GPU_ERR_TOPK_RANGE = 1, /* a teacher id outside [0, vocab) */
    GPU_ERR_TOPK_TWICE = 2, /* a teacher id twice in a row */
    GPU_ERR_HEAD_SHAPE = 3, /* a head made once for another shape / backend (docs/SPEC.md §6) */
    GPU_ERR_HEAD_NONE = 4,  /* a head made once without a header of this layout */
};

/* The first invalid label found by count_valid (the one label check), the first bad teacher id
 * found by topk_rows (docs/SPEC.md §7), or a head made once whose header is not the fused call's
 * (fp8.cu, docs/SPEC.md §6), in device memory: synchronize reports the first one recorded. */
struct gpu_label_error {
    long long row; /* -1: none; 0 for a head */
    long long label, vocab;
    long long kind; /* GPU_ERR_* */
    /* topk_rows: the first row with a bad id in the current call of it (atomicMin over the row
     * blocks; ULLONG_MAX: none), moved into row / label / kind by one block after them. */
    unsigned long long topk_row;
    /* GPU_ERR_HEAD_SHAPE: the header's rows, columns and e4m3 bytes, and the call's rows and
     * columns (its e4m3 bytes are the backend's). */
    long long head_rows, head_cols, head_eb, want_rows, want_cols;
};

/* The record of no error (row -1, no top-k row), what create and synchronize store. */
static inline gpu_label_error gpu_label_none() {
    gpu_label_error e = {};
    e.row = -1;
    e.topk_row = ~0ull;
    return e;
}

/* The last plan of the resident fused row kernel (fused_rows_resident.cu), per (kernel, V). */
struct resident_plan {
    const void *kernel;
    int64_t vocab;
    int cl;       /* blocks per row (a cluster); 0: the kernel does not apply */
    int64_t span; /* columns per block */
    int groups;   /* clusters (or blocks when cl == 1) resident at once */
};

/* Where GEMMs and kernels are enqueued: a stream, the BLAS handle bound to it and that handle's
 * workspace (two GEMMs running at once must not share one). */
struct gpu_lane {
    cudaStream_t stream;
#if DISTIL_GPU_HAVE_BLAS
    cublasHandle_t blas;
#endif
    void *blas_work;
    size_t blas_work_bytes;
};

struct gpu_state {
    distil_ctx *ctx; /* where messages go */
    int device;
    int sm_count;
    int cc_major;
    int cc_minor;
    size_t smem_optin; /* most shared memory one block may opt in to (static + dynamic) */
    char name[256];
    cudaStream_t own_stream; /* created at create, used when no stream is bound */
    /* Where every call enqueues: the bound stream, its BLAS handle and their explicit workspace
     * (capturable and deterministic). */
    gpu_lane lane;
#if DISTIL_GPU_HAVE_BLASLT
    cublasLtHandle_t lt;
#endif
    gpu_label_error *label_err; /* device */
    bool portable_gemm;         /* test hook gemm=portable, or no vendor BLAS */
    bool fused_stream;          /* test hook fused_rows=stream: the streaming row kernel only */
    bool fused_resident;    /* test hook fused_rows=resident: a row pass it declines is an error */
    gpu_lane side;          /* the second lane: an internal stream, handle and workspace */
    cudaEvent_t fork, join; /* side waits on fork (recorded on stream), stream on join */
    bool side_joinable;     /* join was recorded by side_end and not yet waited for */
    long long side_delay;   /* test hook: clock cycles the side lane spins after each fork */
    resident_plan resident;
    distil_hook_fp8 fp8_mode; /* test hook fp8=: AUTO, LT (cuBLASLt only), EMULATE (fp8.cu) */
    bool gemm_stats;          /* row statistics from the logits GEMMs (off when its setup failed) */
    bool stats_require;       /* test hook stats=require: a loss-only row pass without them fails */
    bool gemm_gradw;    /* the last grad_Ws GEMM on gemm_gradw.cu (off when its setup failed) */
    bool gradw_require; /* test hook gradw=require: one that it does not take fails */
};

static inline gpu_state *gpu_of(void *b) {
    return static_cast<gpu_state *>(b);
}

/* Whether this context can run the CUTLASS kernels at all: they are built (sm_90a code), the
 * device is sm_90, and the test hook gemm=portable did not turn the vendor GEMMs off. */
static inline bool gpu_cutlass_device(const gpu_state *b) {
    return DISTIL_GPU_HAVE_CUTLASS && !b->portable_gemm && b->cc_major == 9 && b->cc_minor == 0;
}

/* Whether the logits GEMMs of this context can write row statistics at all (gemm.cu asks the
 * shape); whether its fused-cast GEMM can run (gemm_gradw.cu, cast_ok). */
static inline bool gpu_stats_device(const gpu_state *b) {
    return gpu_cutlass_device(b) && b->gemm_stats;
}
static inline bool gpu_gradw_device(const gpu_state *b) {
    return gpu_cutlass_device(b) && b->gemm_gradw;
}

/* The test hook's spin on the side lane (side_delay_us; nothing when 0), so that a
 * missing join would let the next row pass read logits not yet written: tests then fail every
 * time instead of passing by the luck of timing. small_ops.cu. */
distil_status gpu_side_delay(gpu_state *b);

/* A failed runtime call as a status: OUT_OF_MEMORY for allocation failures, BACKEND otherwise.
 * The error is cleared from the runtime so that the context stays usable. */
distil_status gpu_fail(gpu_state *b, cudaError_t e, const char *what);
/* The launch status of the last kernel (what names the operation). */
distil_status gpu_check_launch(gpu_state *b, const char *what);

#define GPU_TRY(b, expr, what)                                                                     \
    do {                                                                                           \
        cudaError_t gpu_try_e_ = (expr);                                                           \
        if (gpu_try_e_ != cudaSuccess) {                                                           \
            return gpu_fail((b), gpu_try_e_, (what));                                              \
        }                                                                                          \
    } while (0)

/* Makes b->device current for the scope and restores the caller's device after. */
class gpu_device_guard {
  public:
    explicit gpu_device_guard(const gpu_state *b) : prev_(-1) {
        int cur = -1;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != b->device &&
            cudaSetDevice(b->device) == cudaSuccess) {
            prev_ = cur;
        }
    }
    ~gpu_device_guard() {
        if (prev_ >= 0) {
            (void)cudaSetDevice(prev_);
        }
    }
    gpu_device_guard(const gpu_device_guard &) = delete;
    gpu_device_guard &operator=(const gpu_device_guard &) = delete;

  private:
    int prev_;
};

/* The context's lane and the side's trade places: what is enqueued next goes to the other one
 * (side_begin and side_end, gpu_side.cu). */
static inline void gpu_lanes_swap(gpu_state *b) {
    const gpu_lane t = b->lane;
    b->lane = b->side;
    b->side = t;
}

template <typename T> static inline T *gpu_ptr(distil_dptr p) {
    return static_cast<T *>(distil_dptr_addr(p));
}

static inline bool gpu_aligned(const void *p, size_t bytes) {
    return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

/* Blocks for a grid-stride loop over n items of `per_block` each, capped to keep launches small. */
static inline unsigned gpu_grid_for(int64_t n, int64_t per_block, int64_t cap) {
    int64_t g = (n + per_block - 1) / per_block;
    if (g < 1) {
        g = 1;
    }
    return static_cast<unsigned>(g < cap ? g : cap);
}

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_STATE_CUH */
