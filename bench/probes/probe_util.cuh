/*
 * probe_util.cuh - what the probes of bench/probes/ share: a CUDA error check that exits (a probe
 * is a measurement program, not the library), the median of event-timed calls, a fill of bf16
 * buffers with hashed non-zero values, and the largest difference of two float arrays.
 */
#ifndef DISTIL_PROBE_UTIL_CUH
#define DISTIL_PROBE_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* The median time of f alone, each call run right after pre (not timed): pre stands for the
 * kernel the fused loop runs before a GEMM (the row pass, memory-bound), so that f starts on a
 * card in the state the loop leaves it in. */
template <class P, class F> static float time_ms_after(P &&pre, F &&f, int reps, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < reps + 3; i++) {
        pre();
        CK(cudaEventRecord(a, s));
        f();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) {
            t.push_back(ms);
        }
    }
    CK(cudaGetLastError());
    return median(t);
}

/* The median of reps event-timed calls of f, after 3 untimed ones. */
template <class F> static float time_ms(F &&f, int reps, cudaStream_t s) {
    return time_ms_after([] {}, f, reps, s);
}

/* Reads n floats and writes one sum per block (the row pass's reads, in a kernel of its own). */
__global__ void probe_read(const float4 *p, size_t n4, float *out) {
    float acc = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 12345.678f) { /* never: keeps the loads */
        out[blockIdx.x] = acc;
    }
}

/* p[i] = hashed uniform values in [-scale/2, scale/2), never all zero (T: __nv_bfloat16, float) */
template <class T> __global__ void probe_fill(T *p, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        p[i] = static_cast<T>(((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
    }
}

/* n floats of device buffer z on the host, after stream s has finished. */
static std::vector<float> probe_fetch(const float *z, size_t n, cudaStream_t s) {
    CK(cudaStreamSynchronize(s));
    std::vector<float> h(n);
    CK(cudaMemcpy(h.data(), z, sizeof(float) * n, cudaMemcpyDeviceToHost));
    return h;
}

/* Largest |a - b| over n floats, and the largest |b|. */
static void probe_diff(const float *a, const float *b, size_t n, double *d, double *m) {
    *d = 0;
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        *d = std::max(*d, (double)std::fabs(a[i] - b[i]));
        *m = std::max(*m, (double)std::fabs(b[i]));
    }
}

#endif /* DISTIL_PROBE_UTIL_CUH */
