/*
 * test_threads.c - thread safety (docs/RELIABILITY.md). First, before any other call into the
 * library, threads released together probe the registry and create contexts: the registry must
 * initialise once and give every thread the same answer. Then several threads, each with its own
 * context, run both losses concurrently and must give the bits of a single-threaded run.
 * Built under ThreadSanitizer by scripts/ci-hardening.sh. Worker threads never call cmocka:
 * they record statuses and mismatches, which the main thread checks.
 */
#include "test_problems.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Under ASan: the registry probe may run on a worker thread, where PoCL's LLVM installs an
 * alternate signal stack of its own; ASan would then unmap that stack as if it were its own when
 * the thread exits, and abort ("failed to deallocate"). ASan's own alternate stacks are not
 * needed here. (Visible and exported, see CMakeLists.txt, for GCC's shared ASan runtime.) */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "use_sigaltstack=0";
}

#define HT_THREADS 4
#define HT_REPEATS 3

static const char *g_backend;

/* ---------------------------------------------------------------- one run, no cmocka */

typedef struct ht_run {
    distil_status status;
    char msg[256];
} ht_run;

static bool ht_fail(ht_run *r, distil_ctx *ctx, distil_status s, const char *what) {
    if (s != DISTIL_OK && r->status == DISTIL_OK) {
        r->status = s;
        snprintf(r->msg, sizeof r->msg, "%s: %s", what, distil_ctx_last_error(ctx));
    }
    return s != DISTIL_OK;
}

static void *ht_upload(ht_run *r, distil_ctx *ctx, const void *host, size_t bytes) {
    void *dev = NULL;
    if (host == NULL || bytes == 0 || ht_fail(r, ctx, distil_malloc(ctx, bytes, &dev), "malloc")) {
        return NULL;
    }
    ht_fail(r, ctx, distil_memcpy_to_device(ctx, dev, host, bytes), "upload");
    return dev;
}

/* Outputs of one loss call, concatenated on the host. */
typedef struct ht_out {
    unsigned char *bytes;
    size_t n;
} ht_out;

static void ht_collect(ht_run *r, distil_ctx *ctx, void *const *dev, const size_t *bytes, int k,
                       ht_out *o) {
    o->n = 0;
    for (int i = 0; i < k; i++) {
        o->n += bytes[i];
    }
    o->bytes = calloc(1, o->n);
    size_t at = 0;
    for (int i = 0; i < k; i++) {
        if (dev[i] != NULL && o->bytes != NULL) {
            ht_fail(r, ctx, distil_memcpy_to_host(ctx, o->bytes + at, dev[i], bytes[i]),
                    "download");
        }
        at += bytes[i];
        distil_free(ctx, dev[i]);
    }
}

static void ht_jsd(ht_run *r, distil_ctx *ctx, const tp_jsd *p, ht_out *o) {
    size_t es = distil_dtype_size(p->d.dtype);
    void *x = ht_upload(r, ctx, p->x, (size_t)(p->s.t * p->xs) * es);
    void *y = ht_upload(r, ctx, p->y, (size_t)(p->s.t * p->ys) * es);
    void *l = ht_upload(r, ctx, p->labels, (size_t)p->s.t * sizeof(int64_t));
    size_t bytes[2] = {p->nloss * sizeof(float), (size_t)(p->s.t * p->gs) * es};
    void *out[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        ht_fail(r, ctx, distil_malloc(ctx, bytes[i], &out[i]), "malloc");
    }
    if (r->status == DISTIL_OK) {
        ht_fail(r, ctx, distil_jsd(ctx, &p->d, x, y, l, out[0], out[1]), "jsd");
        ht_fail(r, ctx, distil_ctx_synchronize(ctx), "synchronize");
    }
    ht_collect(r, ctx, out, bytes, 2, o);
    distil_free(ctx, x), distil_free(ctx, y), distil_free(ctx, l);
}

static void ht_fused(ht_run *r, distil_ctx *ctx, const tp_fused *p, ht_out *o) {
    size_t es = distil_dtype_size(p->d.dtype), vb = (size_t)p->s.v * es;
    const void *host[TP_FUSED_INPUTS];
    size_t in_bytes[TP_FUSED_INPUTS];
    tp_fused_inputs(p, host, in_bytes);
    void *in[TP_FUSED_INPUTS];
    for (int i = 0; i < TP_FUSED_INPUTS; i++) {
        in[i] = ht_upload(r, ctx, host[i], in_bytes[i]);
    }
    size_t bytes[4] = {3 * sizeof(float), p->n_xs * es, p->n_ws * es, vb};
    void *out[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        ht_fail(r, ctx, distil_malloc(ctx, bytes[i], &out[i]), "malloc");
    }
    if (r->status == DISTIL_OK) {
        ht_fail(r, ctx,
                distil_fused_linear_jsd(ctx, &p->d, in[0], in[1], in[2], in[3], in[4], in[5], in[6],
                                        out[0], out[1], out[2], out[3]),
                "fused_linear_jsd");
        ht_fail(r, ctx, distil_ctx_synchronize(ctx), "synchronize");
    }
    ht_collect(r, ctx, out, bytes, 4, o);
    for (int i = 0; i < TP_FUSED_INPUTS; i++) {
        distil_free(ctx, in[i]);
    }
}

/* ---------------------------------------------------------------- the problems */

#define HT_N_PROBLEMS 3

typedef struct ht_problems {
    tp_jsd j32, j16;
    tp_fused f;
} ht_problems;

static void ht_make(ht_problems *p) {
    tp_jsd_spec a = {.t = 48,
                     .v = 517,
                     .pad_x = 3,
                     .beta = 0.5f,
                     .labels = TP_LABELS_MIXED,
                     .grad = TP_GRAD_OUT};
    tp_jsd_spec b = {.t = 33,
                     .v = 300,
                     .beta = 0.0f,
                     .red = DISTIL_REDUCTION_NONE,
                     .grad = TP_GRAD_OUT,
                     .special = TP_NEG_INF};
    tp_fused_spec f = {.t = 40,
                       .v = 256,
                       .hs = 32,
                       .ht = 48,
                       .w_hard = 0.5f,
                       .w_soft = 0.5f,
                       .beta = 0.5f,
                       .tau = 2.0f,
                       .bias_s = true,
                       .bias_t = true,
                       .parts = true,
                       .grads = TP_WANT_ALL,
                       .labels = TP_LABELS_MIXED,
                       .chunk = 16};
    tp_jsd_make(&p->j32, &a, DISTIL_F32, 11);
    tp_jsd_make(&p->j16, &b, DISTIL_BF16, 12);
    tp_fused_make(&p->f, &f, DISTIL_BF16, 13);
}

static void ht_problems_free(ht_problems *p) {
    tp_jsd_free(&p->j32), tp_jsd_free(&p->j16), tp_fused_free(&p->f);
}

static void ht_run_all(ht_run *r, distil_ctx *ctx, const ht_problems *p, ht_out o[HT_N_PROBLEMS]) {
    ht_jsd(r, ctx, &p->j32, &o[0]);
    ht_fused(r, ctx, &p->f, &o[1]);
    ht_jsd(r, ctx, &p->j16, &o[2]);
}

/* ---------------------------------------------------------------- workers */

typedef struct ht_worker {
    pthread_t tid;
    pthread_barrier_t *start;
    const ht_problems *p;
    const ht_out *baseline; /* HT_N_PROBLEMS */
    ht_run run;
    int mismatches;
    int n_devices;
} ht_worker;

static void *ht_loss_worker(void *arg) {
    ht_worker *w = arg;
    distil_ctx *ctx = NULL;
    pthread_barrier_wait(w->start);
    if (ht_fail(&w->run, NULL, distil_ctx_create(&ctx, g_backend, 0), "ctx_create")) {
        return NULL;
    }
    for (int rep = 0; rep < HT_REPEATS && w->run.status == DISTIL_OK; rep++) {
        ht_out o[HT_N_PROBLEMS];
        ht_run_all(&w->run, ctx, w->p, o);
        for (int i = 0; i < HT_N_PROBLEMS; i++) {
            w->mismatches += o[i].n != w->baseline[i].n || o[i].bytes == NULL ||
                             memcmp(o[i].bytes, w->baseline[i].bytes, o[i].n) != 0;
            free(o[i].bytes);
        }
    }
    distil_ctx_destroy(ctx);
    return NULL;
}

static void test_concurrent_losses(void **state) {
    (void)state;
    ht_problems p;
    ht_make(&p);
    ht_out base[HT_N_PROBLEMS];
    distil_ctx *ctx = tu_ctx(g_backend);
    ht_run r = {0};
    ht_run_all(&r, ctx, &p, base);
    distil_ctx_destroy(ctx);
    assert_int_equal(r.status, DISTIL_OK);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, HT_THREADS);
    ht_worker w[HT_THREADS];
    for (int i = 0; i < HT_THREADS; i++) {
        w[i] = (ht_worker){.start = &start, .p = &p, .baseline = base};
        assert_int_equal(pthread_create(&w[i].tid, NULL, ht_loss_worker, &w[i]), 0);
    }
    for (int i = 0; i < HT_THREADS; i++) {
        pthread_join(w[i].tid, NULL);
    }
    pthread_barrier_destroy(&start);
    for (int i = 0; i < HT_THREADS; i++) {
        if (w[i].run.status != DISTIL_OK || w[i].mismatches != 0) {
            print_error("thread %d: status %s (%s), %d results differ from one thread's\n", i,
                        distil_status_string(w[i].run.status), w[i].run.msg, w[i].mismatches);
            fail();
        }
    }
    for (int i = 0; i < HT_N_PROBLEMS; i++) {
        free(base[i].bytes);
    }
    ht_problems_free(&p);
}

/* ---------------------------------------------------------------- registry */

/* Probe and create at the same instant: the first calls into the library of this process. */
static void *ht_registry_worker(void *arg) {
    ht_worker *w = arg;
    const char *name = g_backend;
    pthread_barrier_wait(w->start);
    int n = -1;
    distil_status s = distil_backend_device_count(name, &n);
    w->n_devices = n;
    distil_ctx *ctx = NULL;
    if (s == DISTIL_OK && !ht_fail(&w->run, NULL, distil_ctx_create(&ctx, name, 0), "ctx_create")) {
        distil_ctx_destroy(ctx);
    }
    w->run.status = s != DISTIL_OK && s != DISTIL_ERR_NOT_AVAILABLE ? s : w->run.status;
    return NULL;
}

/* Runs in main() before cmocka and before any other call; returns the number of failures. */
static int ht_registry_race(void) {
    enum { N = 8 };
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    ht_worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (ht_worker){.start = &start};
        pthread_create(&w[i].tid, NULL, ht_registry_worker, &w[i]);
    }
    int failed = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].run.status != DISTIL_OK || w[i].n_devices != w[0].n_devices) {
            fprintf(stderr, "registry race: thread %d: %s (%s), %d devices vs %d\n", i,
                    distil_status_string(w[i].run.status), w[i].run.msg, w[i].n_devices,
                    w[0].n_devices);
            failed++;
        }
    }
    pthread_barrier_destroy(&start);
    printf("registry race: %d threads saw %d device(s) of '%s'\n", N, w[0].n_devices, g_backend);
    return failed;
}

static int run_group(const char *backend) {
    g_backend = backend;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_concurrent_losses)};
    return cmocka_run_group_tests_name(tu_group_name("threads", backend), tests, NULL, NULL);
}

int main(void) {
    const char *only = getenv("DISTIL_TEST_BACKEND");
    g_backend = only && *only ? only : "ref";
    int failed = ht_registry_race();
    int rc = tu_run_per_backend(run_group, true);
    return failed ? 1 : rc;
}
