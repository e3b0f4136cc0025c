/*
 * test_cuda_e4m3.cu - the cuda backend's e4m3 conversion (__nv_cvt_float_to_fp8 with
 * __NV_SATFINITE, the hardware converter on sm_89+, used by backends/cuda/fp8.cu) against the
 * shared rounding of core/backend_api/math/distil_e4m3.h, bit for bit, over every one of the 2^32
 * fp32 bit patterns (NaN inputs: both must give a NaN code), and the decoding of all 256 codes.
 * docs/SPEC.md §6 (fp8 teacher head): every backend must quantise to the same codes.
 * No device: skipped (exit 77, with a message).
 */
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#define DE8_FN __device__ __forceinline__
#include "math/distil_e4m3.h"

#include <stdio.h>

struct result {
    unsigned long long mismatches;
    unsigned first; /* the smallest mismatching input (0xffffffff: none) */
};

__global__ void encode_all(result *r) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < (1ull << 32); i += stride) {
        const unsigned u = (unsigned)i;
        const float f = __uint_as_float(u);
        const unsigned hw = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
        const unsigned sw = distil_e4m3_from_bits(u);
        const bool ok = f != f ? ((hw & 0x7fu) == 0x7fu && (sw & 0x7fu) == 0x7fu) : hw == sw;
        if (!ok) {
            atomicAdd(&r->mismatches, 1ull);
            atomicMin(&r->first, u);
        }
    }
}

__global__ void decode_all(result *r) {
    const unsigned c = threadIdx.x;
    __nv_fp8_e4m3 v;
    v.__x = (__nv_fp8_storage_t)c;
    const float hw = (float)v;
    const float sw = distil_e4m3_value(c);
    const bool ok = hw != hw ? sw != sw : __float_as_uint(hw) == __float_as_uint(sw);
    if (!ok) {
        atomicAdd(&r->mismatches, 1ull);
        atomicMin(&r->first, c);
    }
}

static int run(void (*launch)(result *), const char *what) {
    result h = {0, 0xffffffffu}, *d = NULL;
    if (cudaMalloc(&d, sizeof h) != cudaSuccess ||
        cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "%s: cuda allocation failed\n", what);
        return 1;
    }
    launch(d);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "%s: kernel failed: %s\n", what, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    cudaFree(d);
    if (h.mismatches != 0) {
        fprintf(stderr, "%s: %llu mismatches, first input 0x%08x\n", what, h.mismatches, h.first);
        return 1;
    }
    printf("%s: all agree\n", what);
    return 0;
}

static void launch_encode(result *d) {
    encode_all<<<4096, 256>>>(d);
}

static void launch_decode(result *d) {
    decode_all<<<1, 256>>>(d);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("skipped: no cuda device\n");
        return 77;
    }
    return run(launch_encode, "encode (every fp32)") + run(launch_decode, "decode (every code)");
}
