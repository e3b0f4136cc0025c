/*
 * backend_table.c - the vtable of the cuda backend, or of the hip backend when this file is
 * compiled with DISTIL_USE_HIP (backends/hip builds the same sources). Written in C11 so the
 * designated initialisers stay plain C; the operations live in the .cu files.
 */
#include "gpu_backend.h"

#ifdef DISTIL_USE_HIP
#define DISTIL_GPU_TABLE          distil_backend_hip
#define DISTIL_GPU_TABLE_NAME     "hip"
#define DISTIL_GPU_TABLE_PRIORITY 300
#else
#define DISTIL_GPU_TABLE          distil_backend_cuda
#define DISTIL_GPU_TABLE_NAME     "cuda"
#define DISTIL_GPU_TABLE_PRIORITY 400
#endif

/* Queues: a caller's stream; a pointer that is not device memory is refused. */
static const distil_backend_device gpu_device = {
    .set_stream = DISTIL_GPU_FN(set_stream),
    .check_pointer = DISTIL_GPU_FN(check_pointer),
};

/* The fused loss's second lane (gpu_side.cu). */
static const distil_backend_side gpu_side = {
    .begin = DISTIL_GPU_FN(side_begin),
    .end = DISTIL_GPU_FN(side_end),
    .join = DISTIL_GPU_FN(side_join),
};

/* docs/SPEC.md §8 (tp_rows.cu); the communicator's all-reduce runs on the bound stream. */
static const distil_backend_tp gpu_tp = {
    .tp_rows = DISTIL_GPU_FN(tp_rows),
    .native_stream = DISTIL_GPU_FN(native_stream),
};

/* docs/SPEC.md §6 fp8 teacher head (fp8.cu): e4m3 codes, one byte each; a head made once has its
 * header written and checked on the device. */
static const distil_backend_fp8 gpu_fp8 = {
    .quant_rows = DISTIL_GPU_FN(quant_rows),
    .gemm_e4m3 = DISTIL_GPU_FN(gemm_e4m3),
    .e4m3_header = DISTIL_GPU_FN(e4m3_header),
};

#if DISTIL_GPU_HAVE_CUTLASS
/* The logits GEMMs' row statistics (gemm_stats.cu: 128-column tiles), and the last grad_Ws GEMM
 * writing the output dtype itself (gemm_gradw.cu). */
static const distil_backend_epilogue gpu_epilogue = {
    .stats_fit = DISTIL_GPU_FN(stats_fit),
    .stats_ok = DISTIL_GPU_FN(stats_ok),
    .gemm_stats = DISTIL_GPU_FN(gemm_stats),
    .cast_ok = DISTIL_GPU_FN(cast_ok),
    .gemm_cast = DISTIL_GPU_FN(gemm_cast),
};
#define DISTIL_GPU_EPILOGUE   (&gpu_epilogue)
#define DISTIL_GPU_STATS_COLS 128
#else
#define DISTIL_GPU_EPILOGUE   NULL
#define DISTIL_GPU_STATS_COLS 0
#endif

#ifdef DISTIL_USE_HIP
#define DISTIL_GPU_ENV_NAMES NULL
#else
/* The backend reads no variable of its own; scripts/cuda-toolkit.sh reads DISTIL_CUDA_PYPI. */
static const char *const gpu_env_names[] = {"DISTIL_CUDA_PYPI", NULL};
#define DISTIL_GPU_ENV_NAMES gpu_env_names
#endif

const distil_backend DISTIL_GPU_TABLE = {
    .api_version = DISTIL_BACKEND_API_VERSION,
    .name = DISTIL_GPU_TABLE_NAME,
    .priority = DISTIL_GPU_TABLE_PRIORITY,
    .host_memory = false,
    .env_names = DISTIL_GPU_ENV_NAMES,
    .tuning =
        {
            /* zs + zt in fp32 plus G in the input dtype: about 10 bytes per logit. 1.5 GB of them
             * (1.2 GB of zs + zt) keeps the chunks large enough for the weight-gradient GEMM to
             * run near peak: the seed workload (V = 128256) gets 1024 rows. G of two chunks per
             * grad_Ws GEMM: half the passes over its fp32 accumulator, for one more chunk of G
             * (0.26 GB at the seed shape; a call of two chunks needs no accumulator at all). On
             * an H100 the loss + gradients at T 8192 42.1-42.3 -> 40.6-40.7 ms, T 2048 10.4 ->
             * 10.0 (docs/GPU-NOTES.md, "Chunk loop"). */
            .chunk = {.logit_bytes = 1.2e9, .min_rows = 64, .max_rows = 65536, .gw_chunks = 2},
            .e4m3_bytes = 1,
            .stats_cols = DISTIL_GPU_STATS_COLS,
        },
    .probe = DISTIL_GPU_FN(probe),
    .create = DISTIL_GPU_FN(create),
    .destroy = DISTIL_GPU_FN(destroy),
    .describe = DISTIL_GPU_FN(describe),
    .synchronize = DISTIL_GPU_FN(synchronize),
    .mem_alloc = DISTIL_GPU_FN(mem_alloc),
    .mem_free = DISTIL_GPU_FN(mem_free),
    .mem_upload = DISTIL_GPU_FN(mem_upload),
    .mem_download = DISTIL_GPU_FN(mem_download),
    .cast = DISTIL_GPU_FN(cast),
    .fill = DISTIL_GPU_FN(fill),
    .scale = DISTIL_GPU_FN(scale),
    .gemm = DISTIL_GPU_FN(gemm),
    .count_valid = DISTIL_GPU_FN(count_valid),
    .div_rows = DISTIL_GPU_FN(div_rows), /* with count_valid and reduce: measured best for jsd */
    .fused_rows = DISTIL_GPU_FN(fused_rows),
    .reduce = DISTIL_GPU_FN(reduce),
    .head_rows = DISTIL_GPU_FN(head_rows),
    .topk_rows = DISTIL_GPU_FN(topk_rows), /* docs/SPEC.md §7, topk_rows.cu */
    .device = &gpu_device,
    .side = &gpu_side,
    .tp = &gpu_tp,
    .fp8 = &gpu_fp8,
    .epilogue = DISTIL_GPU_EPILOGUE,
};
