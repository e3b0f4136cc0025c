/*
 * check_bench.cu - `distil-cuda-check bench [quick]`: times the seed workloads of DESIGN.md on
 * the cuda backend with CUDA events on a bound stream (warm-up, then the median and p20/p80 of
 * at least 20 runs; inputs generated on the device, random and non-zero), and the floors they
 * are measured against: a device copy and the cuBLAS logits GEMMs alone.
 */
#include "check_common.cuh"
#include "vendor.h"

#include <algorithm>
#include <cublas_v2.h>

/* Counter-based uniform in (-1, 1), never 0: hash of (seed, index). */
__device__ float bk_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((float)(z >> 40) + 0.5f) / 8388608.0f - 1.0f;
}

__global__ void bk_fill(void *p, int dtype, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = scale * bk_uniform(seed, i);
        if (dtype == DISTIL_F32) {
            ((float *)p)[i] = v;
        } else {
            ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
        }
    }
}

/* In place: each row of (rows, v) fp32 becomes its log-softmax (one block per row). */
__global__ void bk_log_softmax(float *z, int64_t v) {
    __shared__ float red[DISTIL_GPU_MAX_WARPS];
    float *row = z + blockIdx.x * v;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
        m = fmaxf(m, row[i]);
    }
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        m = fmaxf(m, distil_warp_xor(m, o));
    }
    if (threadIdx.x % DISTIL_GPU_WARP == 0) {
        red[threadIdx.x / DISTIL_GPU_WARP] = m;
    }
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)blockDim.x / DISTIL_GPU_WARP; w++) {
        m = fmaxf(m, red[w]);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
        s += expf(row[i] - m);
    }
    for (int o = DISTIL_GPU_WARP / 2; o > 0; o >>= 1) {
        s += distil_warp_xor(s, o);
    }
    if (threadIdx.x % DISTIL_GPU_WARP == 0) {
        red[threadIdx.x / DISTIL_GPU_WARP] = s;
    }
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / DISTIL_GPU_WARP; w++) {
        s += red[w];
    }
    const float l = m + logf(s);
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
        row[i] -= l;
    }
}

__global__ void bk_labels(int64_t *l, int64_t n, int64_t v, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        l[i] = (int64_t)((bk_uniform(seed, (uint64_t)i) * 0.5f + 0.5f) * (float)v) % v;
    }
}

static void *bk_alloc(size_t bytes) {
    void *p = nullptr;
    CK_CUDA(cudaMalloc(&p, bytes));
    return p;
}

static void bk_random(void *p, distil_dtype d, size_t n, uint64_t seed, float scale) {
    bk_fill<<<4096, 256>>>(p, (int)d, n, seed, scale);
    CK_CUDA(cudaGetLastError());
}

struct bk_stats {
    double median, p20, p80;
};

/* Times fn() n times with events on stream s (after `warm` untimed runs). */
template <typename F> static bk_stats bk_time(cudaStream_t s, int warm, int n, F fn) {
    for (int i = 0; i < warm; i++) {
        fn();
    }
    CK_CUDA(cudaStreamSynchronize(s));
    std::vector<double> ms;
    cudaEvent_t a, b;
    CK_CUDA(cudaEventCreate(&a));
    CK_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < n; i++) {
        CK_CUDA(cudaEventRecord(a, s));
        fn();
        CK_CUDA(cudaEventRecord(b, s));
        CK_CUDA(cudaEventSynchronize(b));
        float t = 0;
        CK_CUDA(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[ms.size() / 5], ms[ms.size() * 4 / 5]};
}

static void bk_row(const char *what, bk_stats t, double amount, const char *unit, double target) {
    printf("%-44s %8.3f ms  [p20 %.3f p80 %.3f]  %7.2f %s  target %s%.2f ms %s\n", what, t.median,
           t.p20, t.p80, amount / (t.median * 1e-3), unit, target > 0 ? "<= " : "", target,
           target > 0 ? (t.median <= target ? "MET" : "MISSED") : "");
}

/* Device copy bandwidth (bytes read + written), the floor of the JSD kernels. */
static void bk_copy(cudaStream_t s) {
    const size_t bytes = (size_t)2 << 30;
    void *a = bk_alloc(bytes), *b = bk_alloc(bytes);
    bk_stats t = bk_time(
        s, 3, 20, [&] { CK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
    bk_row("copy 2 GiB device to device", t, 2.0 * (double)bytes / 1e12, "TB/s", 0);
    cudaFree(a);
    cudaFree(b);
}

static void bk_jsd(distil_ctx *ctx, cudaStream_t s, int64_t rows, int n_runs, const char *tag) {
    const int64_t v = 128256;
    const size_t n = (size_t)(rows * v);
    float *x = (float *)bk_alloc(n * 4), *y = (float *)bk_alloc(n * 4),
          *g = (float *)bk_alloc(n * 4);
    float *loss = (float *)bk_alloc(4);
    bk_random(x, DISTIL_F32, n, 11, 4.0f);
    bk_random(y, DISTIL_F32, n, 12, 4.0f);
    bk_log_softmax<<<(unsigned)rows, 1024>>>(x, v);
    bk_log_softmax<<<(unsigned)rows, 1024>>>(y, v);
    CK_CUDA(cudaDeviceSynchronize());
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = rows;
    d.vocab = v;
    char what[96];
    for (int full = 0; full < 2; full++) {
        bk_stats t = bk_time(s, 3, n_runs, [&] {
            CK_OK(ctx, distil_jsd(ctx, &d, x, y, nullptr, loss, full ? g : nullptr));
        });
        snprintf(what, sizeof what, "jsd f32 V=128256 T=%lld %s%s", (long long)rows,
                 full ? "full" : "forward", tag);
        const double bytes = (double)n * 4.0 * (full ? 3.0 : 2.0);
        const double target = rows == 1024 ? (full ? 0.45 : 0.30) : (full ? 3.5 : 2.4);
        bk_row(what, t, bytes / 1e12, "TB/s", rows == 1024 || rows == 8192 ? target : 0);
    }
    CK_OK(ctx, distil_ctx_synchronize(ctx));
    cudaFree(x);
    cudaFree(y);
    cudaFree(g);
    cudaFree(loss);
}

/* The seed distillation workload's buffers (bf16, Hs = 2048, Ht = 4096, V = 128256). */
struct bk_fused_bufs {
    int64_t rows, v = 128256, hs = 2048, ht = 4096;
    void *xs, *ws, *xt, *wt, *gx, *gw;
    int64_t *labels;
    float *loss;
    explicit bk_fused_bufs(int64_t t) : rows(t) {
        xs = bk_alloc((size_t)(rows * hs) * 2);
        xt = bk_alloc((size_t)(rows * ht) * 2);
        ws = bk_alloc((size_t)(v * hs) * 2);
        wt = bk_alloc((size_t)(v * ht) * 2);
        gx = bk_alloc((size_t)(rows * hs) * 2);
        gw = bk_alloc((size_t)(v * hs) * 2);
        labels = (int64_t *)bk_alloc((size_t)rows * 8);
        loss = (float *)bk_alloc(12);
        bk_random(xs, DISTIL_BF16, (size_t)(rows * hs), 21, 1.0f);
        bk_random(xt, DISTIL_BF16, (size_t)(rows * ht), 22, 1.0f);
        bk_random(ws, DISTIL_BF16, (size_t)(v * hs), 23, 3.0f * sqrtf(3.0f / (float)hs));
        bk_random(wt, DISTIL_BF16, (size_t)(v * ht), 24, 3.0f * sqrtf(3.0f / (float)ht));
        bk_labels<<<256, 256>>>(labels, rows, v, 25);
        CK_CUDA(cudaDeviceSynchronize());
    }
    ~bk_fused_bufs() {
        for (void *p : {xs, ws, xt, wt, gx, gw, (void *)labels, (void *)loss}) {
            cudaFree(p);
        }
    }
};

static void bk_fused(distil_ctx *ctx, cudaStream_t s, bk_fused_bufs &b, const char *tag, int n_runs,
                     bool forward_too) {
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = b.rows;
    d.vocab = b.v;
    d.student_hidden = b.hs;
    d.teacher_hidden = b.ht;
    size_t ws_bytes = 0;
    CK_OK(ctx, distil_fused_linear_jsd_workspace_size(ctx, &d, 1, &ws_bytes));
    char what[96];
    for (int full = forward_too ? 0 : 1; full < 2; full++) {
        size_t free0 = 0, total = 0;
        CK_CUDA(cudaMemGetInfo(&free0, &total));
        bk_stats t = bk_time(s, 2, n_runs, [&] {
            CK_OK(ctx, distil_fused_linear_jsd(ctx, &d, b.xs, b.ws, nullptr, b.xt, b.wt, nullptr,
                                               b.labels, b.loss, full ? b.gx : nullptr,
                                               full ? b.gw : nullptr, nullptr));
        });
        size_t free1 = 0;
        CK_CUDA(cudaMemGetInfo(&free1, &total));
        const double flop = 2.0 * (double)b.rows * (double)b.v * (double)(b.hs + b.ht) +
                            (full ? 4.0 * (double)b.rows * (double)b.v * (double)b.hs : 0.0);
        snprintf(what, sizeof what, "fused bf16 T=%lld %s%s", (long long)b.rows,
                 full ? "full" : "forward", tag);
        const double target = full ? (b.rows == 1024 ? 4.4 : (b.rows == 8192 ? 35.0 : 0)) : 0;
        bk_row(what, t, flop / 1e12, "TFLOP/s", target);
        printf("%-44s workspace %.2f GB (query, grads), device memory taken %.2f GB\n", "",
               (double)ws_bytes / 1e9, ((double)free0 - (double)free1) / 1e9);
    }
    float loss = 0;
    CK_CUDA(cudaMemcpy(&loss, b.loss, 4, cudaMemcpyDeviceToHost));
    printf("%-44s loss %.6f\n", "", loss);
}

/* The two logits GEMMs of one chunk alone through cuBLAS: the floor of the forward pass. */
static void bk_gemm_floor(cudaStream_t s, bk_fused_bufs &b, int64_t c) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        CK_DIE("cublasCreate");
    }
    cublasSetStream(h, s);
    float *z = (float *)bk_alloc((size_t)(c * b.v) * 4);
    const float one = 1.0f, zero = 0.0f;
    bk_stats t = bk_time(s, 2, 20, [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)b.v, (int)c, (int)b.hs, &one, b.ws,
                     CUDA_R_16BF, (int)b.hs, b.xs, CUDA_R_16BF, (int)b.hs, &zero, z, CUDA_R_32F,
                     (int)b.v, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)b.v, (int)c, (int)b.ht, &one, b.wt,
                     CUDA_R_16BF, (int)b.ht, b.xt, CUDA_R_16BF, (int)b.ht, &zero, z, CUDA_R_32F,
                     (int)b.v, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    char what[96];
    snprintf(what, sizeof what, "cuBLAS zs+zt logits GEMMs, C=%lld", (long long)c);
    bk_row(what, t, 2.0 * (double)c * (double)b.v * (double)(b.hs + b.ht) / 1e12, "TFLOP/s", 0);
    cudaFree(z);
    cublasDestroy(h);
}

static distil_ctx *bk_ctx(cudaStream_t s) {
    distil_ctx *ctx = nullptr;
    if (distil_ctx_create(&ctx, "cuda", 0) != DISTIL_OK) {
        CK_DIE("ctx: %s", distil_ctx_last_error(nullptr));
    }
    CK_OK(ctx, distil_ctx_set_stream(ctx, s));
    return ctx;
}

int ck_bench_main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    cudaStream_t s;
    CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    distil_ctx *ctx = bk_ctx(s);
    printf("device: %s\n", distil_ctx_device_name(ctx));
    bk_copy(s);
    bk_jsd(ctx, s, 1024, 30, "");
    bk_jsd(ctx, s, 8192, 20, "");
    {
        bk_fused_bufs b(1024);
        bk_gemm_floor(s, b, 1024);
        bk_fused(ctx, s, b, "", 20, true);
        if (!quick) {
            /* Variants of the row pass, chosen at context creation. */
            const char *vars[][2] = {{"DISTIL_CUDA_DISTILL", "stream"}};
            for (const auto &v : vars) {
                setenv(v[0], v[1], 1);
                distil_ctx *c2 = bk_ctx(s);
                char tag[64];
                snprintf(tag, sizeof tag, " (%s=%s)", v[0] + 12, v[1]);
                bk_fused(c2, s, b, tag, 20, true);
                distil_ctx_destroy(c2);
                unsetenv(v[0]);
            }
        }
    }
    {
        bk_fused_bufs b(8192);
        bk_fused(ctx, s, b, "", 20, !quick);
    }
    distil_ctx_destroy(ctx);
    cudaStreamDestroy(s);
    return 0;
}
