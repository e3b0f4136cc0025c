/*
 * gpu_timeline.c - where one fused call spends its time on an NVIDIA GPU, in the pipeline: CUPTI
 * records the start and end of every kernel of `reps` back-to-back calls (no serialisation, unlike
 * Nsight Compute), so the gaps between kernels and the kernels' in-flight durations (clocks as the
 * running load leaves them) are seen. Nsight Systems is not needed.
 *   usage: [TL_SYNC=1] [TL_LIST=1] [TL_TOPK=k] [TL_FP8=1] [TL_LOSS=1] [DISTIL_TEST_HOOKS=spec]
 *          distil-gpu-timeline [T] [reps] [chunk_rows]
 *   (bf16, Hs 2048, Ht 4096, V 128256, loss + gradients; calls back to back unless TL_SYNC;
 *   TL_TOPK: distil_fused_linear_topk against a cached teacher of k fp32 entries per row
 *   instead, docs/SPEC.md §7; TL_FP8: the fp8 teacher head, docs/SPEC.md §6; TL_LOSS: the loss
 *   only, no gradients)
 * Prints, for the median call: its period, span, busy time, idle gaps, and per kernel name the
 * count and time (TL_LIST: every kernel in order).
 */
#include <cupti.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distil.h"
#include "distil_testing.h"

enum { TL_MAX = 1 << 16 };

typedef struct tl_kernel {
    uint64_t start, end;
    char name[96];
} tl_kernel;

static tl_kernel tl_k[TL_MAX];
static int tl_n;
static int tl_dropped; /* kernels past TL_MAX */

static void CUPTIAPI tl_buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI tl_buffer_completed(CUcontext c, uint32_t stream, uint8_t *buf, size_t size,
                                         size_t valid) {
    (void)c;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            continue;
        }
        if (tl_n >= TL_MAX) {
            tl_dropped++;
            continue;
        }
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        tl_kernel *t = &tl_k[tl_n++];
        t->start = k->start;
        t->end = k->end;
        snprintf(t->name, sizeof t->name, "%s", k->name ? k->name : "?");
    }
    free(buf);
}

/* A CUPTI call's result; a failure (e.g. no permission to profile) is said once. */
static int tl_cupti_ok(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) {
        return 1;
    }
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "%s: %s\n", what, msg ? msg : "CUPTI error");
    return 0;
}

static int tl_cmp_start(const void *a, const void *b) {
    const tl_kernel *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int tl_cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Random bf16 in [-a, a) (the high half of an fp32). */
static void tl_fill_bf16(uint16_t *h, size_t n, float a, unsigned *seed) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        float f = ((float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)(u >> 16);
    }
}

static void *tl_upload_bf16(distil_ctx *ctx, size_t n, float a, unsigned *seed) {
    uint16_t *h = malloc(n * 2);
    void *d = NULL;
    if (h == NULL) {
        fprintf(stderr, "upload: out of host memory\n");
        exit(1);
    }
    tl_fill_bf16(h, n, a, seed);
    if (distil_malloc(ctx, n * 2, &d) != DISTIL_OK || distil_memcpy_to_device(ctx, d, h, n * 2)) {
        fprintf(stderr, "upload: %s\n", distil_ctx_last_error(ctx));
        exit(1);
    }
    free(h);
    return d;
}

/* A cached top-k teacher (rows, k): ids distinct within each row (1009 is prime and does not
 * divide v), log-probabilities of 0.9 / k each (the tail holds 0.1). */
static void tl_upload_topk(distil_ctx *ctx, int64_t t, int64_t v, int64_t k, void **ids,
                           void **logp) {
    const size_t n = (size_t)(t * k);
    int64_t *hi = malloc(n * sizeof *hi);
    float *hl = malloc(n * sizeof *hl);
    if (hi == NULL || hl == NULL) {
        fprintf(stderr, "upload: out of host memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < t; r++) {
        for (int64_t j = 0; j < k; j++) {
            hi[r * k + j] = (r * 7919 + j * 1009) % v;
            hl[r * k + j] = logf(0.9f / (float)k);
        }
    }
    if (distil_malloc(ctx, n * 8, ids) || distil_malloc(ctx, n * 4, logp) ||
        distil_memcpy_to_device(ctx, *ids, hi, n * 8) ||
        distil_memcpy_to_device(ctx, *logp, hl, n * 4)) {
        fprintf(stderr, "upload: %s\n", distil_ctx_last_error(ctx));
        exit(1);
    }
    free(hi);
    free(hl);
}

/* The kernels starting in [lo, hi): one call. */
static void tl_report(uint64_t lo, uint64_t hi) {
    uint64_t first = UINT64_MAX, last = 0, busy = 0, gaps = 0, prev_end = 0;
    char names[64][96];
    double ms[64];
    int cnt[64], nn = 0;
    for (int i = 0; i < tl_n; i++) {
        const tl_kernel *k = &tl_k[i];
        if (k->start < lo || k->start >= hi) {
            continue;
        }
        if (first == UINT64_MAX) {
            first = k->start;
        } else if (k->start > prev_end) {
            gaps += k->start - prev_end;
        }
        if (getenv("TL_LIST")) { /* every kernel: start offset, gap before, duration */
            printf("    +%9.3f  gap %7.3f  %7.3f ms  %.60s\n", (double)(k->start - first) / 1e6,
                   prev_end && k->start > prev_end ? (double)(k->start - prev_end) / 1e6 : 0.0,
                   (double)(k->end - k->start) / 1e6, k->name);
        }
        prev_end = k->end > prev_end ? k->end : prev_end;
        last = k->end > last ? k->end : last;
        busy += k->end - k->start;
        int j = 0;
        while (j < nn && strcmp(names[j], k->name) != 0) {
            j++;
        }
        if (j == nn && nn < 64) {
            snprintf(names[nn], sizeof names[nn], "%s", k->name);
            ms[nn] = 0.0;
            cnt[nn++] = 0;
        }
        if (j < nn) {
            ms[j] += (double)(k->end - k->start) / 1e6;
            cnt[j]++;
        }
    }
    printf("span %.3f ms  kernels %.3f ms  gaps %.3f ms\n", (double)(last - first) / 1e6,
           (double)busy / 1e6, (double)gaps / 1e6);
    for (int j = 0; j < nn; j++) {
        printf("  %8.3f ms  x%-3d %.80s\n", ms[j], cnt[j], names[j]);
    }
}

int main(int argc, char **argv) {
    const int64_t t = argc > 1 ? atoll(argv[1]) : 1024, v = 128256, hs = 2048, ht = 4096;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    distil_ctx *ctx = NULL;
    if (distil_testing_hooks_set(getenv("DISTIL_TEST_HOOKS")) != DISTIL_OK) {
        fprintf(stderr, "DISTIL_TEST_HOOKS: %s\n", distil_ctx_last_error(NULL));
        return 2;
    }
    if (distil_ctx_create(&ctx, "cuda", 0) != DISTIL_OK) {
        fprintf(stderr, "no cuda context: %s\n", distil_ctx_last_error(NULL));
        return 77;
    }
    unsigned seed = 1;
    void *xs = tl_upload_bf16(ctx, (size_t)(t * hs), 1.0f, &seed);
    void *ws = tl_upload_bf16(ctx, (size_t)(v * hs), 0.02f, &seed);
    void *xt = tl_upload_bf16(ctx, (size_t)(t * ht), 1.0f, &seed);
    void *wt = tl_upload_bf16(ctx, (size_t)(v * ht), 0.02f, &seed);
    void *gx = tl_upload_bf16(ctx, (size_t)(t * hs), 0.0f, &seed);
    void *gw = tl_upload_bf16(ctx, (size_t)(v * hs), 0.0f, &seed);
    int64_t *lab = malloc((size_t)t * sizeof *lab);
    if (lab == NULL) {
        return 1;
    }
    for (int64_t i = 0; i < t; i++) {
        seed = seed * 1664525u + 1013904223u;
        lab[i] = (int64_t)(seed % (unsigned)v);
    }
    void *labels = NULL, *loss = NULL;
    if (distil_malloc(ctx, (size_t)t * 8, &labels) || distil_malloc(ctx, 16, &loss) ||
        distil_memcpy_to_device(ctx, labels, lab, (size_t)t * 8)) {
        return 1;
    }
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = t;
    d.vocab = v;
    d.student_hidden = hs;
    d.teacher_hidden = ht;
    d.chunk_rows = argc > 3 ? atoll(argv[3]) : 0;
    if (getenv("TL_FP8")) {
        d.teacher_head_precision = DISTIL_HEAD_PRECISION_FP8_E4M3;
    }
    if (getenv("TL_LOSS")) {
        gx = gw = NULL;
    }
    const char *topk = getenv("TL_TOPK");
    distil_fused_linear_topk_desc dk;
    distil_fused_linear_topk_desc_init(&dk);
    dk.rows = t;
    dk.vocab = v;
    dk.student_hidden = hs;
    dk.k = topk ? atoll(topk) : 0;
    dk.chunk_rows = d.chunk_rows;
    void *ids = NULL, *tlogp = NULL;
    if (topk) {
        tl_upload_topk(ctx, t, v, dk.k, &ids, &tlogp);
    }
    /* Calls back to back as a training step makes them (TL_SYNC=1: a synchronize after each,
     * every call starting on an idle GPU); each call begins with its count_valid kernel. */
    const int n = reps < 64 ? (reps > 1 ? reps : 2) : 64;
    const int sync_each = getenv("TL_SYNC") != NULL;
    for (int i = 0; i < 3 + n; i++) {
        if (i == 3) { /* warm: module load, plans and handles are out of the record */
            if (distil_ctx_synchronize(ctx) != DISTIL_OK) {
                return 1;
            }
            if (!tl_cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                             "cuptiActivityEnable") ||
                !tl_cupti_ok(
                    cuptiActivityRegisterCallbacks(tl_buffer_requested, tl_buffer_completed),
                    "cuptiActivityRegisterCallbacks")) {
                return 1;
            }
        }
        const distil_status st = topk ? distil_fused_linear_topk(ctx, &dk, xs, ws, NULL, ids, tlogp,
                                                                 labels, loss, gx, gw, NULL)
                                      : distil_fused_linear_jsd(ctx, &d, xs, ws, NULL, xt, wt, NULL,
                                                                labels, loss, gx, gw, NULL);
        if (st != DISTIL_OK || ((sync_each || i < 3) && distil_ctx_synchronize(ctx) != DISTIL_OK)) {
            fprintf(stderr, "call: %s\n", distil_ctx_last_error(ctx));
            return 1;
        }
    }
    if (distil_ctx_synchronize(ctx) != DISTIL_OK) {
        return 1;
    }
    if (!tl_cupti_ok(cuptiActivityFlushAll(1), "cuptiActivityFlushAll")) {
        return 1;
    }
    if (tl_dropped > 0) {
        fprintf(stderr, "note: %d kernels past the first %d were not recorded\n", tl_dropped,
                TL_MAX);
    }
    qsort(tl_k, (size_t)tl_n, sizeof tl_k[0], tl_cmp_start);
    uint64_t mark[65];
    int calls = 0;
    for (int j = 0; j < tl_n && calls < n; j++) {
        if (strstr(tl_k[j].name, "count_valid") != NULL) {
            mark[calls++] = tl_k[j].start;
        }
    }
    mark[calls] = UINT64_MAX;
    if (calls != n) {
        fprintf(stderr, "found %d calls of %d\n", calls, n);
        return 1;
    }
    /* The median call by period (start to the next call's start; the last call by its span). */
    uint64_t period[64], sorted[64];
    for (int i = 0; i < n; i++) {
        uint64_t end = 0;
        for (int j = 0; j < tl_n; j++) {
            if (tl_k[j].start >= mark[i] && tl_k[j].start < mark[i + 1] && tl_k[j].end > end) {
                end = tl_k[j].end;
            }
        }
        period[i] = sorted[i] = (i + 1 < n ? mark[i + 1] : end) - mark[i];
    }
    qsort(sorted, (size_t)n, sizeof sorted[0], tl_cmp_u64);
    int med = 0;
    while (period[med] != sorted[n / 2]) {
        med++;
    }
    printf("fused bf16 %s%s T=%lld V=%lld Hs=%lld Ht=%lld, %s, call %d of %d (median period "
           "%.3f ms; min %.3f max %.3f)\n",
           gx ? "full" : "loss only", d.teacher_head_precision ? ", fp8 teacher head" : "",
           (long long)t, (long long)v, (long long)hs, (long long)ht,
           sync_each ? "synchronized after each call" : "back to back", med + 1, n,
           (double)sorted[n / 2] / 1e6, (double)sorted[0] / 1e6, (double)sorted[n - 1] / 1e6);
    tl_report(mark[med], mark[med + 1]);
    distil_ctx_destroy(ctx);
    return 0;
}
