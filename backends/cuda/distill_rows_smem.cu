/*
 * distill_rows_smem.cu - distill_rows with each block's slice of the row held in shared memory
 * (CUDA sm_80+; clusters of up to 16 blocks per row on sm_90+): zs and zt are read from HBM
 * exactly once (cp.async, all of a thread's copies in flight), the three passes run from shared
 * memory, and G is written once. Opt-in (DISTIL_CUDA_DISTILL=smem): on an H200 (2026-11-30) it
 * lost to the streaming kernel, 1.8 ms against 0.6 ms for the forward row pass of 1024 rows of
 * V = 128256 (16 blocks of 64 KB per row, 3 per SM): cluster co-scheduling and the serial
 * load -> compute -> exchange of each block leave the SMs idle. Kept, tested by
 * distil-cuda-check, as the starting point of a pipelined version (TODO(#3)).
 * Needs V % 4 == 0 and 16-byte aligned zs, zt, g; HIP builds this file to nothing.
 */
#include "distill_rows.cuh"

namespace DISTIL_GPU_NS {

#if DISTIL_GPU_HAVE_CLUSTERS

constexpr int SMEM_THREADS = 512;
constexpr int SMEM_VW = 4;
/* Shared bytes of a slice (zs and zt) that still let two blocks share an SM. */
constexpr size_t SMEM_SLICE_BYTES = 96u << 10;

/* Copy the block's slice of zs and zt (n floats each, n % 4 == 0) into shared memory. */
__device__ inline void smem_load_slice(const float *zs, const float *zt, int64_t n, float *s_zs,
                                       float *s_zt) {
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * SMEM_VW; j < n;
         j += static_cast<int64_t>(blockDim.x) * SMEM_VW) {
        distil_cp_async16(s_zs + j, zs + j);
        distil_cp_async16(s_zt + j, zt + j);
    }
    distil_cp_async_wait_all();
    __syncthreads();
}

/* Grid: rows * cl blocks in clusters of cl; dynamic shared memory 2 * span floats. */
template <int GDT, bool HAS_G>
__global__ void __launch_bounds__(SMEM_THREADS, 3)
    distil_distill_rows_smem_kernel(distill_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ float4 smem_dyn[];
    __shared__ distill_smem sm;
    float *s_zs = reinterpret_cast<float *>(smem_dyn);
    float *s_zt = s_zs + p.span;
    const int rank = static_cast<int>(blockIdx.x % p.cl);
    const int64_t row = blockIdx.x / p.cl;
    int64_t c0;
    int64_t n;
    distill_slice(p, rank, &c0, &n);
    const float *zs = p.zs + row * p.vocab;
    const float *zt = p.zt + row * p.vocab;
    void *g = HAS_G ? static_cast<typename dt_traits<GDT>::T *>(p.g) + row * p.vocab : nullptr;
    int64_t label;
    if (!distill_label(p, row, rank, &label)) {
        distill_ignored_row<GDT, HAS_G, SMEM_VW>(p, row, rank, g, c0, n);
        return;
    }
    /* Before any block of the row writes G over zs (in place): ordered by the barriers below. */
    const float z_label = rank == 0 && threadIdx.x == 0 ? zs[label] : 0.0f;
    smem_load_slice(zs + c0, zt + c0, n, s_zs, s_zt);
    const row_lse l = distill_row_lse(p, distill_pass_stats<SMEM_VW>(p, s_zs, s_zt, n), sm);
    distill_finish_row<GDT, HAS_G, SMEM_VW>(p, sm, l, s_zs, s_zt, n, g, c0, row, rank, label,
                                            z_label);
#endif
}

template <int GDT, bool HAS_G> static void *smem_kernel() {
    return reinterpret_cast<void *>(&distil_distill_rows_smem_kernel<GDT, HAS_G>);
}

static void *smem_kernel_of(distil_dtype gdt, bool has_g) {
    if (!has_g) {
        return smem_kernel<DISTIL_F32, false>();
    }
    return gdt == DISTIL_F32    ? smem_kernel<DISTIL_F32, true>()
           : gdt == DISTIL_BF16 ? smem_kernel<DISTIL_BF16, true>()
                                : smem_kernel<DISTIL_F16, true>();
}

/* Allow the dynamic shared memory and the 16-block clusters the kernels use (once, at create). */
distil_status distill_smem_setup(gpu_state *b) {
    if (b->cc_major < 8) {
        return DISTIL_OK;
    }
    const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};
    for (int has_g = 0; has_g < 2; has_g++) {
        for (distil_dtype d : dts) {
            const void *k = smem_kernel_of(d, has_g != 0);
            GPU_TRY(b,
                    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(SMEM_SLICE_BYTES)),
                    "distill_rows setup");
            if (b->cc_major >= 9) {
                GPU_TRY(b,
                        cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                        "distill_rows setup");
            }
        }
    }
    return DISTIL_OK;
}

static cudaLaunchConfig_t smem_config(const distill_params &p, size_t bytes, cudaStream_t s,
                                      cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(p.cl);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(p.rows * p.cl));
    cfg.blockDim = dim3(SMEM_THREADS);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = p.cl > 1 ? 1 : 0;
    return cfg;
}

/* Blocks per row so that a slice fits SMEM_SLICE_BYTES; 0 when none does or the cluster cannot
 * be scheduled on this device. */
static int smem_cluster_size(const gpu_state *b, const distill_params &p, const void *kernel,
                             int64_t *span) {
    const int max_cl = b->cc_major >= 9 ? 16 : 1;
    for (int cl = 1; cl <= max_cl; cl *= 2) {
        int64_t s = (p.vocab + cl - 1) / cl;
        s = (s + SMEM_VW - 1) / SMEM_VW * SMEM_VW;
        if (static_cast<size_t>(s) * 8 > SMEM_SLICE_BYTES) {
            continue;
        }
        if (cl > 1) {
            distill_params q = p;
            q.cl = cl;
            cudaLaunchAttribute attr[1];
            cudaLaunchConfig_t cfg = smem_config(q, static_cast<size_t>(s) * 8, nullptr, attr);
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess || n < 1) {
                (void)cudaGetLastError();
                return 0;
            }
        }
        *span = s;
        return cl;
    }
    return 0;
}

/* Launches the shared-memory kernel when it applies; *done says whether it did. */
cudaError_t distill_smem_launch(gpu_state *b, distill_params p, distil_dtype gdt, cudaStream_t s,
                                bool *done) {
    *done = false;
    const bool aligned =
        gpu_aligned(p.zs, 16) && gpu_aligned(p.zt, 16) && (p.g == nullptr || gpu_aligned(p.g, 16));
    if (b->cc_major < 8 || !b->distill_smem || p.vocab % SMEM_VW != 0 || !aligned) {
        return cudaSuccess;
    }
    const void *kernel = smem_kernel_of(gdt, p.g != nullptr);
    /* The occupancy query is a host call per distinct (kernel, V): remember the last answer. */
    smem_plan_cache &c = b->smem_cache;
    if (c.kernel != kernel || c.vocab != p.vocab) {
        c.cl = smem_cluster_size(b, p, kernel, &c.span);
        c.kernel = kernel;
        c.vocab = p.vocab;
    }
    p.cl = c.cl;
    p.span = c.span;
    if (p.cl == 0 || p.rows * p.cl > 0x7fffffff) {
        return cudaSuccess;
    }
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = smem_config(p, static_cast<size_t>(p.span) * 8, s, attr);
    void *args[] = {&p};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, kernel, args);
    *done = e == cudaSuccess;
    return e;
}

#else

distil_status distill_smem_setup(gpu_state *) {
    return DISTIL_OK;
}

cudaError_t distill_smem_launch(gpu_state *, distill_params, distil_dtype, cudaStream_t,
                                bool *done) {
    *done = false;
    return cudaSuccess;
}

#endif

} // namespace DISTIL_GPU_NS
