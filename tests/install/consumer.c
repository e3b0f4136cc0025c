/*
 * consumer.c - a program outside the project that uses an installed distil (scripts/
 * install-check.sh builds it with find_package(distil) and with pkg-config, against a shared
 * and a static libdistil). It runs both losses on a small problem on "cpu" (OpenMP, BLAS) and
 * on "ref", checks that the two agree, and asks the opencl loader for devices, so that every
 * dependency a static libdistil pulls in is linked and called. Exit 0 on success.
 */
#include <distil.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { ROWS = 3, VOCAB = 5, HIDDEN = 4 };

/* Fixed non-zero inputs: log-probabilities of two different distributions per row. */
static void consumer_inputs(float *x, float *y) {
    for (int i = 0; i < ROWS; i++) {
        float zx = 0.0f, zy = 0.0f;
        for (int v = 0; v < VOCAB; v++) {
            zx += expf(0.3f * (float)(v + i));
            zy += expf(-0.2f * (float)(v * i + 1));
        }
        for (int v = 0; v < VOCAB; v++) {
            x[i * VOCAB + v] = 0.3f * (float)(v + i) - logf(zx);
            y[i * VOCAB + v] = -0.2f * (float)(v * i + 1) - logf(zy);
        }
    }
}

/* Copies n bytes of host data into a new buffer of ctx; NULL on failure. */
static void *consumer_upload(distil_ctx *ctx, const void *host, size_t n) {
    void *dev = NULL;
    if (distil_malloc(ctx, n, &dev) != DISTIL_OK) {
        return NULL;
    }
    if (distil_memcpy_to_device(ctx, dev, host, n) != DISTIL_OK) {
        distil_free(ctx, dev);
        return NULL;
    }
    return dev;
}

/* The JSD loss and the fused loss of the fixed problem on backend `name` into out[2]. */
static int consumer_losses(const char *name, float out[2]) {
    distil_ctx *ctx = NULL;
    if (distil_ctx_create(&ctx, name, 0) != DISTIL_OK) {
        fprintf(stderr, "consumer: no context on %s\n", name);
        return 1;
    }
    float x[ROWS * VOCAB], y[ROWS * VOCAB], h[ROWS * HIDDEN], w[VOCAB * HIDDEN];
    consumer_inputs(x, y);
    for (int k = 0; k < ROWS * HIDDEN; k++) {
        h[k] = 0.1f * (float)(k % 7) - 0.25f;
    }
    for (int k = 0; k < VOCAB * HIDDEN; k++) {
        w[k] = 0.05f * (float)(k % 11) - 0.2f;
    }
    const int64_t labels[ROWS] = {1, 4, 0};
    void *dx = consumer_upload(ctx, x, sizeof x), *dy = consumer_upload(ctx, y, sizeof y);
    void *dh = consumer_upload(ctx, h, sizeof h), *dw = consumer_upload(ctx, w, sizeof w);
    void *dl = consumer_upload(ctx, labels, sizeof labels);
    void *dloss = consumer_upload(ctx, out, 2 * sizeof(float));
    int rc = 1;
    if (dx && dy && dh && dw && dl && dloss) {
        distil_jsd_desc jd;
        distil_jsd_desc_init(&jd);
        jd.rows = ROWS;
        jd.vocab = VOCAB;
        distil_fused_linear_jsd_desc fd;
        distil_fused_linear_jsd_desc_init(&fd);
        fd.rows = ROWS;
        fd.vocab = VOCAB;
        fd.student_hidden = fd.teacher_hidden = HIDDEN;
        fd.dtype = DISTIL_F32;
        float *loss = dloss;
        if (distil_jsd(ctx, &jd, dx, dy, NULL, loss, NULL) == DISTIL_OK &&
            distil_fused_linear_jsd(ctx, &fd, dh, dw, NULL, dh, dw, NULL, dl,
                                    (float *)((char *)dloss + sizeof(float)), NULL, NULL,
                                    NULL) == DISTIL_OK &&
            distil_ctx_synchronize(ctx) == DISTIL_OK &&
            distil_memcpy_to_host(ctx, out, dloss, 2 * sizeof(float)) == DISTIL_OK) {
            rc = 0;
        } else {
            fprintf(stderr, "consumer: %s: %s\n", name, distil_ctx_last_error(ctx));
        }
    }
    void *bufs[] = {dx, dy, dh, dw, dl, dloss};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
        distil_free(ctx, bufs[k]);
    }
    distil_ctx_destroy(ctx);
    return rc;
}

int main(void) {
    printf("consumer: distil %s, backends:", distil_version_string());
    for (int k = 0; k < distil_backend_count(); k++) {
        int n = 0;
        const char *name = distil_backend_name(k);
        if (distil_backend_device_count(name, &n) != DISTIL_OK) {
            n = 0;
        }
        printf(" %s (%d)", name, n);
    }
    printf("\n");
    float ref[2] = {0.0f, 0.0f}, cpu[2] = {0.0f, 0.0f};
    if (consumer_losses("ref", ref) != 0 || consumer_losses("cpu", cpu) != 0) {
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        /* docs/SPEC.md §3: fp32 loss within 1e-5 of the float64 reference. */
        if (!(ref[k] > 0.0f) || !(fabsf(cpu[k] - ref[k]) <= 1e-5f * ref[k])) {
            fprintf(stderr, "consumer: loss %d: cpu %.9g, ref %.9g\n", k, cpu[k], ref[k]);
            return 1;
        }
    }
    printf("consumer: jsd %.7g, fused %.7g on cpu and ref\n", cpu[0], cpu[1]);
    return 0;
}
