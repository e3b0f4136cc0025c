/*
 * check_common.cuh - helpers of distil-cuda-check (check.cu): seeded host RNG, dtype access,
 * comparisons against the float64 reference with the tolerances of SPEC section 3, device
 * buffers through the public API, and the pass/fail tally. A developer tool, not the library.
 */
#ifndef DISTIL_CHECK_COMMON_CUH
#define DISTIL_CHECK_COMMON_CUH

#include "distil.h"
#include "half.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static int g_failures = 0;
static int g_checks = 0;

#define CK_DIE(...)                                                                                \
    do {                                                                                           \
        fprintf(stderr, "FATAL %s:%d: ", __FILE__, __LINE__);                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(2);                                                                                   \
    } while (0)

#define CK_OK(ctx, expr)                                                                           \
    do {                                                                                           \
        distil_status ck_s_ = (expr);                                                              \
        if (ck_s_ != DISTIL_OK) {                                                                  \
            CK_DIE("%s -> %s: %s", #expr, distil_status_string(ck_s_),                             \
                   distil_ctx_last_error(ctx));                                                    \
        }                                                                                          \
    } while (0)

#define CK_CUDA(expr)                                                                              \
    do {                                                                                           \
        cudaError_t ck_e_ = (expr);                                                                \
        if (ck_e_ != cudaSuccess) {                                                                \
            CK_DIE("%s -> %s", #expr, cudaGetErrorString(ck_e_));                                  \
        }                                                                                          \
    } while (0)

struct ck_rng {
    uint64_t s;
    explicit ck_rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { /* (0, 1) */
        return ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
    }
    double normal() {
        return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
    }
};

static size_t ck_es(distil_dtype d) {
    return distil_dtype_size(d);
}

static float ck_get(const void *p, distil_dtype d, size_t i) {
    if (d == DISTIL_F32) {
        return ((const float *)p)[i];
    }
    uint16_t h = ((const uint16_t *)p)[i];
    return d == DISTIL_BF16 ? distil_bf16_to_f32(h) : distil_f16_to_f32(h);
}

static void ck_set(void *p, distil_dtype d, size_t i, float v) {
    if (d == DISTIL_F32) {
        ((float *)p)[i] = v;
    } else {
        ((uint16_t *)p)[i] = d == DISTIL_BF16 ? distil_f32_to_bf16(v) : distil_f32_to_f16(v);
    }
}

/* A host array of n elements of dtype d. */
struct ck_host {
    distil_dtype d;
    size_t n;
    std::vector<unsigned char> bytes;
    ck_host(distil_dtype dt, size_t count) : d(dt), n(count), bytes(count * ck_es(dt) + 16, 0) {}
    void *ptr() {
        return bytes.data();
    }
    float get(size_t i) const {
        return ck_get(bytes.data(), d, i);
    }
    void set(size_t i, float v) {
        ck_set(bytes.data(), d, i, v);
    }
};

/* A device copy (through the public API) of a host array; freed with the context. */
struct ck_dev {
    distil_ctx *ctx;
    void *p;
    size_t bytes;
    ck_dev(distil_ctx *c, size_t b) : ctx(c), p(nullptr), bytes(b) {
        CK_OK(ctx, distil_malloc(ctx, bytes, &p));
    }
    ck_dev(distil_ctx *c, ck_host &h) : ck_dev(c, h.n * ck_es(h.d)) {
        CK_OK(ctx, distil_memcpy_to_device(ctx, p, h.ptr(), bytes));
    }
    ~ck_dev() {
        distil_free(ctx, p);
    }
    ck_dev(const ck_dev &) = delete;
    ck_dev &operator=(const ck_dev &) = delete;
    /* NaN bytes everywhere: any element the call forgets to write stays NaN. */
    void poison() {
        CK_CUDA(cudaMemset(p, 0xff, bytes));
        CK_CUDA(cudaDeviceSynchronize());
    }
    void download(ck_host &h) {
        CK_OK(ctx, distil_memcpy_to_host(ctx, h.ptr(), p, h.n * ck_es(h.d)));
    }
};

/* ||got - ref|| / ||ref|| over n elements (ref == 0 everywhere: ||got||). NaN in got where ref
 * is finite counts as a failure (unwritten or broken). Prints one line; returns pass. */
static bool ck_compare(const char *what, const ck_host &got, const ck_host &ref, double tol) {
    double num = 0.0, den = 0.0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < ref.n; i++) {
        double r = ref.get(i), g = got.get(i);
        if (isnan(g) != isnan(r) || (isinf(r) && g != r)) {
            if (bad++ == 0) {
                first_bad = i;
            }
            continue;
        }
        if (isnan(r) || isinf(r)) {
            continue;
        }
        num += (g - r) * (g - r);
        den += r * r;
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    bool pass = bad == 0 && err <= tol;
    g_checks++;
    if (!pass) {
        g_failures++;
    }
    printf("  %-4s %-34s rel %.2e (tol %.0e)", pass ? "ok" : "FAIL", what, err, tol);
    if (bad) {
        printf("  %zu non-finite mismatches, first at %zu: got %g ref %g", bad, first_bad,
               got.get(first_bad), ref.get(first_bad));
    }
    printf("\n");
    return pass;
}

static void ck_expect(bool cond, const char *what) {
    g_checks++;
    if (!cond) {
        g_failures++;
    }
    printf("  %-4s %s\n", cond ? "ok" : "FAIL", what);
}

/* Tolerances of SPEC section 3. */
static double ck_tol_loss(distil_dtype d) {
    return d == DISTIL_F32 ? 1e-5 : 2e-3;
}
static double ck_tol_grad(distil_dtype d, bool fused) {
    return d == DISTIL_F32 ? (fused ? 1e-4 : 1e-5) : 1e-2;
}

#endif /* DISTIL_CHECK_COMMON_CUH */
