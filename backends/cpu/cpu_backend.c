/*
 * cpu_backend.c - the "cpu" backend's vtable: life cycle, threads, host memory, deferred label
 * errors and the chunk-size preference. The kernels live in cpu_gemm.c, cpu_div_rows.c,
 * cpu_fused_rows.c and cpu_reduce.c; the row kernels in cpu_kern_*.c, one table per ISA.
 */
#include "cpu_internal.h"
#include "host_memory.h"
#include "error.h"
#include "fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef DISTIL_CPU_HAVE_OPENBLAS_CONFIG
#include <cblas.h>
#endif

static distil_status cpu_probe(int *n_devices) {
    *n_devices = 1;
    return DISTIL_OK;
}

/* DISTIL_NUM_THREADS, a count in [1, 4096], or what OpenMP would use when it is unset or empty. */
static distil_status cpu_thread_count(distil_ctx *ctx, int *out) {
    const char *env = getenv("DISTIL_NUM_THREADS");
#ifdef _OPENMP
    *out = omp_get_max_threads();
#else
    *out = 1;
#endif
    if (env == NULL || *env == '\0') {
        return DISTIL_OK;
    }
    char *end = NULL;
    long n = strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "cpu: DISTIL_NUM_THREADS '%s' is not a thread count in [1, 4096]",
                                env);
    }
    *out = (int)n;
    return DISTIL_OK;
}

#if defined(DISTIL_CPU_HAVE_AVX2) || defined(DISTIL_CPU_HAVE_AVX512)
#include <cpuid.h>

/* F16C (cpuid leaf 1, ecx bit 29): not every compiler's __builtin_cpu_supports knows it. */
static bool cpu_has_f16c(void) {
    unsigned a = 0;
    unsigned b = 0;
    unsigned c = 0;
    unsigned d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

/* DISTIL_CPU_ISA: unset or empty (NULL), or one of generic, avx2, avx512 (any case). */
static distil_status cpu_isa_wanted(distil_ctx *ctx, const char **out) {
    const char *want = getenv("DISTIL_CPU_ISA");
    *out = NULL;
    if (want == NULL || *want == '\0') {
        return DISTIL_OK;
    }
    if (strcasecmp(want, "generic") != 0 && strcasecmp(want, "avx2") != 0 &&
        strcasecmp(want, "avx512") != 0) {
        return distil_error_set(ctx, DISTIL_ERR_INVALID_ARG,
                                "cpu: DISTIL_CPU_ISA '%s' is not generic, avx2 or avx512", want);
    }
    *out = want;
    return DISTIL_OK;
}

/* The widest kernel table this CPU runs; DISTIL_CPU_ISA (want: generic, avx2, avx512, or NULL)
 * may narrow it, which lets tests exercise every table on one machine. */
static const cpu_kernels *cpu_pick_kernels(const char *want) {
    const cpu_kernels *best = &distil_cpu_kernels_generic;
    (void)want;
#if defined(DISTIL_CPU_HAVE_AVX2) || defined(DISTIL_CPU_HAVE_AVX512)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#endif
#if defined(DISTIL_CPU_HAVE_AVX2)
    if (avx2 && !(want && strcasecmp(want, "generic") == 0)) {
        best = &distil_cpu_kernels_avx2;
    }
#endif
#if defined(DISTIL_CPU_HAVE_AVX512)
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (avx512 && !(want && (strcasecmp(want, "generic") == 0 || strcasecmp(want, "avx2") == 0))) {
        best = &distil_cpu_kernels_avx512;
    }
#endif
    return best;
}

/* "OpenBLAS 0.3.21" from the library's own configuration string. */
static void cpu_blas_name(char *buf, size_t n) {
#ifdef DISTIL_CPU_HAVE_OPENBLAS_CONFIG
    const char *cfg = openblas_get_config();
    const char *sp = cfg ? strchr(cfg, ' ') : NULL;
    const char *end = sp ? strchr(sp + 1, ' ') : NULL;
    int len = cfg ? (end ? (int)(end - cfg) : (int)strlen(cfg)) : 0;
    snprintf(buf, n, "%.*s", len, cfg ? cfg : "");
#else
    snprintf(buf, n, "BLAS");
#endif
}

static distil_status cpu_create(distil_ctx *ctx, int device, void **b) {
    int threads = 0;
    const char *isa = NULL;
    DISTIL_TRY(cpu_thread_count(ctx, &threads));
    DISTIL_TRY(cpu_isa_wanted(ctx, &isa));
    cpu_state *st = distil_fault_alloc() ? NULL : calloc(1, sizeof *st);
    if (st == NULL) {
        return distil_error_set(ctx, DISTIL_ERR_OUT_OF_MEMORY, "cpu: out of host memory");
    }
    st->ctx = ctx;
    st->threads = threads;
    st->k = cpu_pick_kernels(isa);
    char blas[48];
    cpu_blas_name(blas, sizeof blas);
    snprintf(st->name, sizeof st->name, "CPU (%d thread%s, %s, %s)", st->threads,
             st->threads == 1 ? "" : "s", st->k->isa, blas);
    *b = st;
    return DISTIL_OK;
}

static void cpu_destroy(void *b) {
    cpu_state *st = b;
    if (st == NULL) {
        return;
    }
    free(st->scratch);
    free(st->rows);
    free(st);
}

static void cpu_describe(void *b, char *buf, size_t n) {
    const cpu_state *st = b;
    snprintf(buf, n, "%s", st->name);
}

/* Work is synchronous; only an invalid label found by count_valid is deferred, reported once. */
static distil_status cpu_synchronize(void *b) {
    cpu_state *st = b;
    if (!st->bad_label) {
        return DISTIL_OK;
    }
    st->bad_label = false;
    if (st->bad_kind == CPU_BAD_ID_TWICE) {
        return distil_error_set(st->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld twice", (long long)st->bad_row,
                                (long long)st->bad_value);
    }
    if (st->bad_kind == CPU_BAD_ID_RANGE) {
        return distil_error_set(st->ctx, DISTIL_ERR_INVALID_LABEL,
                                "teacher_ids: row %lld has id %lld outside [0, %lld)",
                                (long long)st->bad_row, (long long)st->bad_value,
                                (long long)st->bad_vocab);
    }
    return distil_error_set(
        st->ctx, DISTIL_ERR_INVALID_LABEL, "labels: row %lld has label %lld outside [0, %lld)",
        (long long)st->bad_row, (long long)st->bad_value, (long long)st->bad_vocab);
}

static distil_status cpu_mem_alloc(void *b, size_t bytes, void **ptr) {
    return distil_host_alloc(((cpu_state *)b)->ctx, "cpu", bytes, ptr);
}

distil_status distil_cpu_grow(cpu_state *st, void **buf, size_t *cap, size_t bytes,
                              const char *what) {
    if (bytes <= *cap) {
        return DISTIL_OK;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = (distil_fault_alloc() || rounded < bytes) ? NULL : aligned_alloc(64, rounded);
    if (p == NULL) {
        return distil_error_set(st->ctx, DISTIL_ERR_OUT_OF_MEMORY,
                                "cpu: cannot allocate %zu bytes of %s scratch", bytes, what);
    }
    free(*buf);
    *buf = p;
    *cap = rounded;
    return DISTIL_OK;
}

static const distil_backend_tp cpu_tp = {.tp_rows = distil_cpu_tp_rows};

/* docs/SPEC.md §6 fp8 teacher head: codes kept as their fp16 values (cpu_fp8.c) */
static const distil_backend_fp8 cpu_fp8 = {
    .quant_rows = distil_cpu_quant_rows,
    .gemm_e4m3 = distil_cpu_gemm_e4m3,
};

/* the last grad_Ws GEMM rounds into grad_Ws itself (cpu_gemm.c) */
static const distil_backend_epilogue cpu_epilogue = {
    .cast_ok = distil_cpu_gemm_cast_ok,
    .gemm_cast = distil_cpu_gemm_cast,
};

static const char *const cpu_env_names[] = {"DISTIL_CPU_ISA", NULL};

const distil_backend distil_backend_cpu = {
    .api_version = DISTIL_BACKEND_API_VERSION,
    .name = "cpu",
    .priority = 100,
    .host_memory = true,
    .env_names = cpu_env_names,
    .tuning =
        {
            .fp32_gemm = true,
            /* Chunks of the fused loss: the two fp32 logit blocks near 128 MiB, a power of two in
             * [32, 512]. Larger chunks keep OpenBLAS efficient (the G^T xs product has k = C, and
             * each chunk rereads the V x Hs accumulator): at V = 32000, Hs = 512, Ht = 1024 the
             * four GEMMs took about 30% longer per row with C = 64 than with C = 256 (2 threads,
             * measured). */
            .chunk = {.logit_bytes = 128.0 * 1024 * 1024, .min_rows = 32, .max_rows = 512},
            .e4m3_bytes = 2,
        },
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .describe = cpu_describe,
    .synchronize = cpu_synchronize,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = distil_host_free,
    .mem_upload = distil_host_upload,
    .mem_download = distil_host_download,
    .cast = distil_cpu_cast,
    .fill = distil_cpu_fill,
    .scale = distil_cpu_scale,
    .gemm = distil_cpu_gemm,
    .count_valid = distil_cpu_count_valid,
    .div_rows = distil_cpu_div_rows,
    .fused_rows = distil_cpu_fused_rows,
    .reduce = distil_cpu_reduce,
    .head_rows = distil_cpu_head_rows,
    .topk_rows = distil_cpu_topk_rows,
    .tp = &cpu_tp,
    .fp8 = &cpu_fp8,
    .epilogue = &cpu_epilogue,
};
