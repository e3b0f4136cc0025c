/*
 * vendors/hip.h - the HIP side of vendor.h: maps only the cuda* (and, with hipBLAS, cublas*)
 * names the .cu sources use onto their hip* equivalents, plus the warp width (64 on gfx9 / CDNA,
 * 32 on RDNA) and warp primitives. Only vendor.h includes this file.
 */
#ifndef DISTIL_VENDORS_HIP_H
#define DISTIL_VENDORS_HIP_H

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define DISTIL_GPU_NAME        "hip"
#define DISTIL_GPU_PRIORITY    300
#define DISTIL_GPU_NS          distil_hip_impl
#define DISTIL_GPU_HAVE_BLASLT 0
/* No fp8 GEMM: the fp8 teacher head runs fp8.cu's emulation. */
#define DISTIL_GPU_HAVE_FP8      0
#define DISTIL_GPU_HAVE_CLUSTERS 0

/* The wavefront width of the target (the compiler defines it for host and device passes). */
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define DISTIL_GPU_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define DISTIL_GPU_WARP 64
#endif

/* Runtime. */
#define cudaError_t               hipError_t
#define cudaSuccess               hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorInvalidValue     hipErrorInvalidValue
#define cudaGetErrorString        hipGetErrorString
#define cudaGetLastError          hipGetLastError
#define cudaGetDeviceCount        hipGetDeviceCount
#define cudaGetDevice             hipGetDevice
#define cudaSetDevice             hipSetDevice
#define cudaDeviceProp            hipDeviceProp_t
#define cudaGetDeviceProperties   hipGetDeviceProperties
#define cudaStream_t              hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking     hipStreamNonBlocking
#define cudaStreamDestroy         hipStreamDestroy
#define cudaStreamSynchronize     hipStreamSynchronize
#define cudaMalloc                hipMalloc
#define cudaFree                  hipFree
#define cudaMemcpy                hipMemcpy
#define cudaMemcpyAsync           hipMemcpyAsync
#define cudaMemcpyHostToDevice    hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost    hipMemcpyDeviceToHost
#define cudaEvent_t               hipEvent_t
#define cudaEventCreateWithFlags  hipEventCreateWithFlags
#define cudaEventDisableTiming    hipEventDisableTiming
#define cudaEventRecord           hipEventRecord
#define cudaEventDestroy          hipEventDestroy
#define cudaStreamWaitEvent       hipStreamWaitEvent

/* BLAS: hipBLAS when the build found it (DISTIL_HIP_HIPBLAS), else the portable GEMM. */
#ifdef DISTIL_HIP_HIPBLAS
#include <hipblas/hipblas.h>
#define DISTIL_GPU_HAVE_BLAS       1
#define cublasHandle_t             hipblasHandle_t
#define cublasStatus_t             hipblasStatus_t
#define cublasOperation_t          hipblasOperation_t
#define cublasCreate               hipblasCreate
#define cublasDestroy              hipblasDestroy
#define cublasSetStream            hipblasSetStream
#define cublasGemmEx               hipblasGemmEx
#define cublasGetStatusString      hipblasStatusToString
#define cudaDataType_t             hipblasDatatype_t
#define CUDA_R_32F                 HIPBLAS_R_32F
#define CUDA_R_16F                 HIPBLAS_R_16F
#define CUDA_R_16BF                HIPBLAS_R_16B
#define CUBLAS_OP_N                HIPBLAS_OP_N
#define CUBLAS_OP_T                HIPBLAS_OP_T
#define CUBLAS_COMPUTE_32F         HIPBLAS_R_32F
#define CUBLAS_GEMM_DEFAULT        HIPBLAS_GEMM_DEFAULT
#define CUBLAS_STATUS_SUCCESS      HIPBLAS_STATUS_SUCCESS
#define CUBLAS_STATUS_ALLOC_FAILED HIPBLAS_STATUS_ALLOC_FAILED
/* hipBLAS manages its own workspace. */
static inline hipblasStatus_t cublasSetWorkspace(hipblasHandle_t, void *, size_t) {
    return HIPBLAS_STATUS_SUCCESS;
}
#else
#define DISTIL_GPU_HAVE_BLAS 0
#endif

__device__ __forceinline__ float distil_warp_xor(float v, int lane_mask) {
    return __shfl_xor(v, lane_mask);
}
__device__ __forceinline__ double distil_warp_xor(double v, int lane_mask) {
    return __shfl_xor(v, lane_mask);
}
__device__ __forceinline__ long long distil_warp_xor(long long v, int lane_mask) {
    return __shfl_xor(v, lane_mask);
}

/* The 64-bit value whose low word is lo and high word hi (dtype.cuh's store_words). */
__device__ __forceinline__ unsigned long long distil_pack64(unsigned lo, unsigned hi) {
    return static_cast<unsigned long long>(hi) << 32 | lo;
}

/* 2^x, fast: AMD's exp2f is the hardware instruction already (results below 2^-126 may flush). */
__device__ __forceinline__ float distil_exp2_ftz(float x) {
    return exp2f(x);
}

/* a / b for b in [2^-126, 2^126], fast (the CUDA side's contract; AMD's __fdividef is the
 * reciprocal instruction and a product already). */
__device__ __forceinline__ float distil_div_fast(float a, float b) {
    return __fdividef(a, b);
}

/* fp32 -> bf16 bits, round to nearest even; NaN kept quiet. */
__device__ __forceinline__ unsigned short distil_float_to_bf16_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<unsigned short>((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
}

__device__ __forceinline__ float distil_f16_bits_to_float(unsigned short h) {
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ unsigned short distil_float_to_f16_bits(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

/* The CUDA side's register hint for a loop's pointer; AMD's compiler is left to its own choice. */
template <typename T> __device__ __forceinline__ void gpu_keep_in_register(T *&p) {
    (void)p;
}

/* Load of data read once (a plain load: the nontemporal builtin takes no HIP vector types). */
template <typename T> __device__ __forceinline__ T distil_load_stream(const T *p) {
    return *p;
}

static inline hipError_t distil_gpu_pointer_device(const void *p, int *is_device, int *device) {
    hipPointerAttribute_t at;
    hipError_t e = hipPointerGetAttributes(&at, p);
    *is_device = 0;
    *device = -1;
    if (e != hipSuccess) {
        return e;
    }
    *is_device = at.memoryType == hipMemoryTypeDevice || at.isManaged;
    *device = at.device;
    return hipSuccess;
}

#endif /* DISTIL_VENDORS_HIP_H */
