/*
 * demo.c - distil's main job in one program: the JSD, the fused linear distillation loss and the
 * fused loss against a cached top-k teacher, forward and backward, on the best backend available
 * (or the one named by DISTIL_BACKEND / argv[1]), on the seed workloads of docs/DESIGN.md; scaled
 * down on host backends.
 *   usage: distil-demo [backend] [--small]     (--small: the host sizes on any backend)
 */
#define _POSIX_C_SOURCE 200809L
#include "distil.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Workload sizes: the seed shapes on GPUs, a smaller version on the host. */
typedef struct demo_shape {
    int64_t jsd_rows, jsd_vocab;
    int64_t rows, vocab, hs, ht;
    distil_dtype dtype;
} demo_shape;

static double demo_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t demo_rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1), never exactly 0 in practice; xorshift64*. */
static float demo_uniform(void) {
    demo_rng ^= demo_rng >> 12;
    demo_rng ^= demo_rng << 25;
    demo_rng ^= demo_rng >> 27;
    uint64_t r = demo_rng * 2685821657736338717ull;
    return (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* bf16 by truncation after rounding to nearest even. */
static uint16_t demo_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* n random values of dtype scaled by `scale`, uploaded into fresh device memory. */
static distil_status demo_upload_random(distil_ctx *ctx, distil_dtype dt, size_t n, float scale,
                                        void **out) {
    size_t es = distil_dtype_size(dt);
    unsigned char *host = malloc(n * es);
    if (host == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        float v = scale * demo_uniform();
        if (dt == DISTIL_F32) {
            memcpy(host + 4 * i, &v, 4);
        } else {
            uint16_t h = demo_bf16(v);
            memcpy(host + 2 * i, &h, 2);
        }
    }
    distil_status s = distil_malloc(ctx, n * es, out);
    if (s == DISTIL_OK) {
        s = distil_memcpy_to_device(ctx, *out, host, n * es);
    }
    free(host);
    return s;
}

/* Log-probabilities: random logits, log-softmax per row, fp32. */
static distil_status demo_upload_logp(distil_ctx *ctx, int64_t rows, int64_t vocab, void **out) {
    float *h = malloc((size_t)(rows * vocab) * sizeof(float));
    if (h == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < rows; i++) {
        float *r = h + i * vocab;
        double z = 0.0;
        for (int64_t v = 0; v < vocab; v++) {
            r[v] = 4.0f * demo_uniform();
            z += exp((double)r[v]);
        }
        for (int64_t v = 0; v < vocab; v++) {
            r[v] -= (float)log(z);
        }
    }
    distil_status s = distil_malloc(ctx, (size_t)(rows * vocab) * 4, out);
    if (s == DISTIL_OK) {
        s = distil_memcpy_to_device(ctx, *out, h, (size_t)(rows * vocab) * 4);
    }
    free(h);
    return s;
}

static distil_status demo_upload_labels(distil_ctx *ctx, int64_t rows, int64_t vocab,
                                        int64_t **out) {
    int64_t *h = malloc((size_t)rows * sizeof(int64_t));
    if (h == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < rows; i++) {
        /* every 8th token is padding */
        h[i] = i % 8 == 7 ? -100 : (int64_t)((demo_uniform() * 0.5f + 0.5f) * (float)(vocab - 1));
    }
    distil_status s = distil_malloc(ctx, (size_t)rows * sizeof(int64_t), (void **)out);
    if (s == DISTIL_OK) {
        s = distil_memcpy_to_device(ctx, *out, h, (size_t)rows * sizeof(int64_t));
    }
    free(h);
    return s;
}

#define DEMO_TRY(expr, what)                                                                       \
    do {                                                                                           \
        distil_status s_ = (expr);                                                                 \
        if (s_ != DISTIL_OK) {                                                                     \
            fprintf(stderr, "distil-demo: %s failed: %s: %s\n", what, distil_status_string(s_),    \
                    distil_ctx_last_error(ctx));                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Each loss runs twice; the second run is timed (the first warms up). */
static int demo_jsd(distil_ctx *ctx, const demo_shape *sh) {
    void *x, *y, *g, *loss;
    DEMO_TRY(demo_upload_logp(ctx, sh->jsd_rows, sh->jsd_vocab, &x), "student upload");
    DEMO_TRY(demo_upload_logp(ctx, sh->jsd_rows, sh->jsd_vocab, &y), "teacher upload");
    DEMO_TRY(distil_malloc(ctx, (size_t)(sh->jsd_rows * sh->jsd_vocab) * 4, &g), "malloc");
    DEMO_TRY(distil_malloc(ctx, sizeof(float), &loss), "malloc");
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = sh->jsd_rows;
    d.vocab = sh->jsd_vocab;
    double ms = 0.0;
    for (int it = 0; it < 2; it++) {
        double t0 = demo_now();
        DEMO_TRY(distil_jsd(ctx, &d, x, y, NULL, loss, g), "distil_jsd");
        DEMO_TRY(distil_ctx_synchronize(ctx), "synchronize");
        ms = 1e3 * (demo_now() - t0);
    }
    float l = 0.0f;
    DEMO_TRY(distil_memcpy_to_host(ctx, &l, loss, sizeof l), "download");
    printf("jsd               T=%lld V=%lld f32 beta=0.5   loss %.6f   %.3f ms (loss + grad)\n",
           (long long)d.rows, (long long)d.vocab, (double)l, ms);
    distil_free(ctx, x);
    distil_free(ctx, y);
    distil_free(ctx, g);
    distil_free(ctx, loss);
    return 0;
}

static int demo_fused(distil_ctx *ctx, const demo_shape *sh) {
    void *xs, *ws, *xt, *wt, *gx, *gw, *loss;
    int64_t *labels;
    size_t es = distil_dtype_size(sh->dtype);
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->rows * sh->hs), 1.0f, &xs), "xs");
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->vocab * sh->hs), 0.05f, &ws), "Ws");
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->rows * sh->ht), 1.0f, &xt), "xt");
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->vocab * sh->ht), 0.05f, &wt), "Wt");
    DEMO_TRY(demo_upload_labels(ctx, sh->rows, sh->vocab, &labels), "labels");
    DEMO_TRY(distil_malloc(ctx, (size_t)(sh->rows * sh->hs) * es, &gx), "malloc");
    DEMO_TRY(distil_malloc(ctx, (size_t)(sh->vocab * sh->hs) * es, &gw), "malloc");
    DEMO_TRY(distil_malloc(ctx, 3 * sizeof(float), &loss), "malloc");
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = sh->rows;
    d.vocab = sh->vocab;
    d.student_hidden = sh->hs;
    d.teacher_hidden = sh->ht;
    d.dtype = sh->dtype;
    d.return_parts = 1;
    size_t ws_bytes = 0;
    DEMO_TRY(distil_fused_linear_jsd_workspace_size(ctx, &d, 1, &ws_bytes), "workspace size");
    double ms = 0.0;
    for (int it = 0; it < 2; it++) {
        double t0 = demo_now();
        DEMO_TRY(distil_fused_linear_jsd(ctx, &d, xs, ws, NULL, xt, wt, NULL, labels, loss, gx, gw,
                                         NULL),
                 "distil_fused_linear_jsd");
        DEMO_TRY(distil_ctx_synchronize(ctx), "synchronize");
        ms = 1e3 * (demo_now() - t0);
    }
    float l[3] = {0};
    DEMO_TRY(distil_memcpy_to_host(ctx, l, loss, sizeof l), "download");
    printf("fused_linear_jsd  T=%lld V=%lld Hs=%lld Ht=%lld %s   loss %.6f (CE %.4f, JSD %.6f)"
           "   %.3f ms (loss + grads), workspace %.1f MiB\n",
           (long long)d.rows, (long long)d.vocab, (long long)d.student_hidden,
           (long long)d.teacher_hidden, distil_dtype_name(d.dtype), (double)l[0], (double)l[1],
           (double)l[2], ms, (double)ws_bytes / 1048576.0);
    void *bufs[] = {xs, ws, xt, wt, labels, gx, gw, loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        distil_free(ctx, bufs[i]);
    }
    return 0;
}

/* A cached top-k teacher (docs/SPEC.md §7): k = 32 ids per row from a random start, with falling
 * log-probabilities whose mass leaves a tail. */
static distil_status demo_upload_topk(distil_ctx *ctx, int64_t rows, int64_t vocab, int64_t k,
                                      void **ids, void **logp) {
    int64_t *hi = malloc((size_t)(rows * k) * sizeof(int64_t));
    float *hl = malloc((size_t)(rows * k) * sizeof(float));
    distil_status s = hi && hl ? DISTIL_OK : DISTIL_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; s == DISTIL_OK && i < rows; i++) {
        int64_t start = (int64_t)((demo_uniform() * 0.5f + 0.5f) * (float)(vocab - 1));
        for (int64_t j = 0; j < k; j++) {
            hi[i * k + j] = (start + j) % vocab;
            hl[i * k + j] = -1.0f - 0.25f * (float)j;
        }
    }
    if (s == DISTIL_OK) {
        s = distil_malloc(ctx, (size_t)(rows * k) * sizeof(int64_t), ids);
    }
    if (s == DISTIL_OK) {
        s = distil_memcpy_to_device(ctx, *ids, hi, (size_t)(rows * k) * sizeof(int64_t));
    }
    if (s == DISTIL_OK) {
        s = distil_malloc(ctx, (size_t)(rows * k) * sizeof(float), logp);
    }
    if (s == DISTIL_OK) {
        s = distil_memcpy_to_device(ctx, *logp, hl, (size_t)(rows * k) * sizeof(float));
    }
    free(hi);
    free(hl);
    return s;
}

/* The fused loss against the cached top-32 teacher: the student's head only. */
static int demo_topk(distil_ctx *ctx, const demo_shape *sh) {
    void *xs, *ws, *ids, *logp, *gx, *gw, *loss;
    int64_t *labels;
    const int64_t k = 32;
    size_t es = distil_dtype_size(sh->dtype);
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->rows * sh->hs), 1.0f, &xs), "xs");
    DEMO_TRY(demo_upload_random(ctx, sh->dtype, (size_t)(sh->vocab * sh->hs), 0.05f, &ws), "Ws");
    DEMO_TRY(demo_upload_topk(ctx, sh->rows, sh->vocab, k, &ids, &logp), "teacher top-k");
    DEMO_TRY(demo_upload_labels(ctx, sh->rows, sh->vocab, &labels), "labels");
    DEMO_TRY(distil_malloc(ctx, (size_t)(sh->rows * sh->hs) * es, &gx), "malloc");
    DEMO_TRY(distil_malloc(ctx, (size_t)(sh->vocab * sh->hs) * es, &gw), "malloc");
    DEMO_TRY(distil_malloc(ctx, 3 * sizeof(float), &loss), "malloc");
    distil_fused_linear_topk_desc d;
    distil_fused_linear_topk_desc_init(&d);
    d.rows = sh->rows;
    d.vocab = sh->vocab;
    d.student_hidden = sh->hs;
    d.k = k;
    d.dtype = sh->dtype;
    d.return_parts = 1;
    double ms = 0.0;
    for (int it = 0; it < 2; it++) {
        double t0 = demo_now();
        DEMO_TRY(
            distil_fused_linear_topk(ctx, &d, xs, ws, NULL, ids, logp, labels, loss, gx, gw, NULL),
            "distil_fused_linear_topk");
        DEMO_TRY(distil_ctx_synchronize(ctx), "synchronize");
        ms = 1e3 * (demo_now() - t0);
    }
    float l[3] = {0};
    DEMO_TRY(distil_memcpy_to_host(ctx, l, loss, sizeof l), "download");
    printf("fused_linear_topk T=%lld V=%lld Hs=%lld k=%lld %s   loss %.6f (CE %.4f, KL %.6f)"
           "   %.3f ms (loss + grads)\n",
           (long long)d.rows, (long long)d.vocab, (long long)d.student_hidden, (long long)k,
           distil_dtype_name(d.dtype), (double)l[0], (double)l[1], (double)l[2], ms);
    void *bufs[] = {xs, ws, ids, logp, labels, gx, gw, loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        distil_free(ctx, bufs[i]);
    }
    return 0;
}

int main(int argc, char **argv) {
    distil_ctx *ctx = NULL;
    const char *want = NULL;
    bool small = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0) {
            small = true;
        } else {
            want = argv[i];
        }
    }
    distil_status s = distil_ctx_create(&ctx, want, -1);
    if (s != DISTIL_OK) {
        fprintf(stderr, "distil-demo: no context: %s: %s\n", distil_status_string(s),
                distil_ctx_last_error(NULL));
        return 1;
    }
    const char *be = distil_ctx_backend_name(ctx);
    printf("distil %s   backend %s   device %s\n", distil_version_string(), be,
           distil_ctx_device_name(ctx));
    /* GPUs get the seed workloads; host backends a scaled-down version (ref is float64). */
    demo_shape gpu = {1024, 128256, 1024, 128256, 2048, 4096, DISTIL_BF16};
    demo_shape cpu = {64, 128256, 256, 32000, 512, 1024, DISTIL_F32};
    demo_shape ref = {4, 128256, 8, 4096, 64, 128, DISTIL_F32};
    const demo_shape *sh = strcmp(be, "ref") == 0            ? &ref
                           : small || strcmp(be, "cpu") == 0 ? &cpu
                                                             : &gpu;
    int rc = demo_jsd(ctx, sh);
    if (rc == 0) {
        rc = demo_fused(ctx, sh);
    }
    if (rc == 0) {
        rc = demo_topk(ctx, sh);
    }
    distil_ctx_destroy(ctx);
    return rc;
}
