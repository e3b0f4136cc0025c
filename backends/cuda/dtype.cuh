/*
 * dtype.cuh - device loads and stores of f32 / bf16 / f16 elements as fp32, one element or a
 * vector of N at once (N * element size = 2, 4, 8 or 16 bytes, one memory instruction).
 * bf16 and fp16 are raw bits; fp32 -> bf16 / fp16 by the vendor's conversion (round to nearest
 * even).
 */
#ifndef DISTIL_GPU_DTYPE_CUH
#define DISTIL_GPU_DTYPE_CUH

#include "vendor.h"

#include "distil.h"

#include <stdint.h>
#include <type_traits>

namespace DISTIL_GPU_NS {

__device__ __forceinline__ float bf16_bits_to_float(unsigned short h) {
    return __uint_as_float(static_cast<unsigned>(h) << 16);
}

__device__ __forceinline__ unsigned short float_to_bf16_bits(float f) {
    return distil_float_to_bf16_bits(f);
}

/* A dtype as a compile-time constant: what dt_dispatch hands its function. */
template <int DT> using dt_const = std::integral_constant<int, DT>;

/* The one dtype switch of the .cu files (host code): calls f(dt_const<DT>{}) for the run-time
 * dtype dt, F32, BF16 or F16 (the core validated it), so that a launcher names its templated
 * kernel once: dt_dispatch(dt, [&](auto d) { kernel<decltype(d)::value><<<...>>>(...); }).
 * Returns what f returns. */
template <typename F>
static inline auto dt_dispatch(distil_dtype dt, F &&f) -> decltype(f(dt_const<DISTIL_F32>{})) {
    switch (dt) {
    case DISTIL_F32:
        return f(dt_const<DISTIL_F32>{});
    case DISTIL_BF16:
        return f(dt_const<DISTIL_BF16>{});
    default:
        return f(dt_const<DISTIL_F16>{});
    }
}

template <int DT> struct dt_traits;
template <> struct dt_traits<DISTIL_F32> {
    typedef float T;
    static __device__ __forceinline__ float to_f(float v) {
        return v;
    }
    static __device__ __forceinline__ float from_f(float v) {
        return v;
    }
};
template <> struct dt_traits<DISTIL_BF16> {
    typedef unsigned short T;
    static __device__ __forceinline__ float to_f(unsigned short v) {
        return bf16_bits_to_float(v);
    }
    static __device__ __forceinline__ unsigned short from_f(float v) {
        return float_to_bf16_bits(v);
    }
};
template <> struct dt_traits<DISTIL_F16> {
    typedef unsigned short T;
    static __device__ __forceinline__ float to_f(unsigned short v) {
        return distil_f16_bits_to_float(v);
    }
    static __device__ __forceinline__ unsigned short from_f(float v) {
        return distil_float_to_f16_bits(v);
    }
};

/* The unsigned type of a given byte width: one load / store instruction. */
template <int BYTES> struct bytes_type;
template <> struct bytes_type<2> { typedef unsigned short T; };
template <> struct bytes_type<4> { typedef unsigned T; };
template <> struct bytes_type<8> { typedef uint2 T; };
template <> struct bytes_type<16> { typedef uint4 T; };

/* o[0..N) = base[i .. i + N) as fp32; base + i must be aligned to N elements. STREAM marks data
 * read once (evict first). */
template <int DT, int N, bool STREAM = false>
__device__ __forceinline__ void vload(const void *base, int64_t i, float (&o)[N]) {
    typedef typename dt_traits<DT>::T E;
    typedef typename bytes_type<N * sizeof(E)>::T W;
    union {
        W w;
        E e[N];
    } u;
    const W *p = reinterpret_cast<const W *>(static_cast<const E *>(base) + i);
    if constexpr (STREAM && sizeof(W) == 16) {
        u.w = distil_load_stream(p);
    } else {
        u.w = *p;
    }
#pragma unroll
    for (int k = 0; k < N; k++) {
        o[k] = dt_traits<DT>::to_f(u.e[k]);
    }
}

/* NW 32-bit words as one store of 4, 8 or 16 bytes (p aligned to it), the 8-byte halves joined
 * by distil_pack64 (vendor.h): a uint2 built from two words was stored as two 4-byte stores
 * (NVVM split it), and a 64-bit value built by shifts and ors was miscompiled by CUDA 13.0's
 * ptxas (the bfi.b64 chain left half of the stored register pair unwritten). */
template <int NW> __device__ __forceinline__ void store_words(void *p, const unsigned (&w)[NW]) {
    if constexpr (NW == 1) {
        *static_cast<unsigned *>(p) = w[0];
    } else if constexpr (NW == 2) {
        *static_cast<unsigned long long *>(p) = distil_pack64(w[0], w[1]);
    } else {
        static_assert(NW == 4, "a vector of 4, 8 or 16 bytes");
        *static_cast<ulonglong2 *>(p) =
            make_ulonglong2(distil_pack64(w[0], w[1]), distil_pack64(w[2], w[3]));
    }
}

/* base[i .. i + N) = v[0..N) rounded to DT; same alignment rule as vload. 16-bit elements are
 * packed into 32-bit words first: through a union of shorts the compiler split an 8-byte bf16
 * store into two 4-byte ones (half of every sector of G's stores wasted, Nsight Compute on the
 * resident row kernel, docs/GPU-NOTES.md "Compiler pitfalls"). */
template <int DT, int N>
__device__ __forceinline__ void vstore(void *base, int64_t i, const float (&v)[N]) {
    typedef typename dt_traits<DT>::T E;
    E *p = static_cast<E *>(base) + i;
    if constexpr (sizeof(E) == 2 && N >= 2) {
        unsigned w[N / 2];
#pragma unroll
        for (int k = 0; k < N / 2; k++) {
            w[k] = static_cast<unsigned>(dt_traits<DT>::from_f(v[2 * k])) |
                   static_cast<unsigned>(dt_traits<DT>::from_f(v[2 * k + 1])) << 16;
        }
        store_words<N / 2>(p, w);
    } else {
        typedef typename bytes_type<N * sizeof(E)>::T W;
        union {
            W w;
            E e[N];
        } u;
#pragma unroll
        for (int k = 0; k < N; k++) {
            u.e[k] = dt_traits<DT>::from_f(v[k]);
        }
        *reinterpret_cast<W *>(p) = u.w;
    }
}

template <int DT> __device__ __forceinline__ float load1(const void *base, int64_t i) {
    return dt_traits<DT>::to_f(static_cast<const typename dt_traits<DT>::T *>(base)[i]);
}

template <int DT> __device__ __forceinline__ void store1(void *base, int64_t i, float v) {
    static_cast<typename dt_traits<DT>::T *>(base)[i] = dt_traits<DT>::from_f(v);
}

/* Elements of DT in 16 bytes: the vector width of the streaming kernels. */
template <int DT> struct vec16 {
    static constexpr int N = 16 / static_cast<int>(sizeof(typename dt_traits<DT>::T));
};

} // namespace DISTIL_GPU_NS

#endif /* DISTIL_GPU_DTYPE_CUH */
