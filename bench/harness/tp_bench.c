/*
 * tp_bench.c - distil-bench-tp: the vocabulary-parallel fused loss (docs/SPEC.md §8) on N ranks of
 * one host, one thread per rank, each rank on its own device (cuda: GPU r; cpu: the host), the
 * vocabulary split into N near-equal shards. Collectives: NCCL on cuda (ncclCommInitAll over
 * GPUs 0..N-1, NCCL loaded with dlopen: DISTIL_BENCH_NCCL names the library, else libnccl.so.2),
 * an in-process all-reduce between the threads on cpu. Per rank count it prints the median time
 * of a call with gradients (the slowest rank's, after a barrier), the same with a communicator
 * whose all-reduce does nothing (so their difference is the collectives' share), the loss of
 * rank 0 (compare across N) and the workspace of a rank. Inputs come from a hash of each
 * element's global index, so every rank makes only its own shard and every N sees the same
 * problem.
 *   distil-bench-tp [--backend cuda|cpu] [--ranks N] [--rows T] [--vocab V] [--hs H] [--ht H]
 *                   [--dtype bf16|f32|f16] [--iters K] [--chunk C]
 */
#define _GNU_SOURCE 1
#include "distil.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TPB_MAX_RANKS 16

typedef struct tpb_args {
    const char *backend;
    int ranks, iters;
    int64_t rows, vocab, hs, ht, chunk;
    distil_dtype dtype;
} tpb_args;

/* ---------------------------------------------------------------- inputs */

static uint64_t tpb_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A value in [-scale, scale) from (stream, index), rounded to dtype, stored at dst[i]. */
static void tpb_fill(void *dst, distil_dtype dt, size_t n, uint64_t stream, uint64_t first,
                     float scale) {
    for (size_t i = 0; i < n; i++) {
        uint64_t h = tpb_mix(stream * 0x100000001b3ull ^ tpb_mix(first + i));
        float v = ((float)(h >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
        if (dt == DISTIL_F32) {
            ((float *)dst)[i] = v;
        } else {
            uint32_t u;
            memcpy(&u, &v, 4);
            /* bf16: the top half rounded; f16 is not made here (bf16 bits reused) */
            ((uint16_t *)dst)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    }
}

/* ---------------------------------------------------------------- the ranks' shared state */

typedef struct tpb_shared {
    tpb_args a;
    pthread_barrier_t bar;
    void *nccl[TPB_MAX_RANKS];
    void *bufs[TPB_MAX_RANKS]; /* the thread comm: each rank's buffer of the current all-reduce */
    double t_call[TPB_MAX_RANKS];
    int failed;
} tpb_shared;

typedef struct tpb_rank {
    tpb_shared *sh;
    int rank;
} tpb_rank;

/* The in-process all-reduce of the cpu run: every rank reduces all buffers in rank order into a
 * copy, then writes it back (the same bits on every rank). */
static int tpb_thread_allreduce(void *user, void *buf, int64_t count, distil_comm_dtype dtype,
                                distil_comm_op op, void *stream) {
    (void)stream;
    tpb_rank *me = user;
    tpb_shared *sh = me->sh;
    size_t es = dtype == DISTIL_COMM_F64 ? 8 : 4;
    void *acc = malloc((size_t)count * es);
    sh->bufs[me->rank] = buf;
    pthread_barrier_wait(&sh->bar);
    for (int64_t i = 0; i < count; i++) {
        double v = 0.0;
        for (int r = 0; r < sh->a.ranks; r++) {
            double x = es == 8 ? ((double *)sh->bufs[r])[i] : ((float *)sh->bufs[r])[i];
            v = r == 0 ? x : (op == DISTIL_COMM_MAX ? fmax(v, x) : v + x);
        }
        if (es == 8) {
            ((double *)acc)[i] = v;
        } else {
            ((float *)acc)[i] = (float)v;
        }
    }
    pthread_barrier_wait(&sh->bar);
    memcpy(buf, acc, (size_t)count * es);
    free(acc);
    return 0;
}

static int tpb_null_allreduce(void *user, void *buf, int64_t count, distil_comm_dtype dtype,
                              distil_comm_op op, void *stream) {
    (void)user, (void)buf, (void)count, (void)dtype, (void)op, (void)stream;
    return 0;
}

static double tpb_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int tpb_cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The rank's buffers: inputs of its shard [v0, v1), outputs. */
typedef struct tpb_bufs {
    void *p[7];
    void *loss, *gx, *gw, *gb;
} tpb_bufs;

static void *tpb_upload(distil_ctx *ctx, const void *h, size_t bytes, int *failed) {
    void *d = NULL;
    if (distil_malloc(ctx, bytes, &d) != DISTIL_OK ||
        distil_memcpy_to_device(ctx, d, h, bytes) != DISTIL_OK) {
        fprintf(stderr, "upload: %s\n", distil_ctx_last_error(ctx));
        *failed = 1;
    }
    return d;
}

static void tpb_make(distil_ctx *ctx, const tpb_args *a, int64_t v0, int64_t v1, tpb_bufs *B,
                     int *failed) {
    size_t es = distil_dtype_size(a->dtype), w = (size_t)(v1 - v0), t = (size_t)a->rows;
    size_t n[6] = {t * (size_t)a->hs, w * (size_t)a->hs, w,
                   t * (size_t)a->ht, w * (size_t)a->ht, w};
    uint64_t first[6] = {0, (uint64_t)v0 * (uint64_t)a->hs, (uint64_t)v0,
                         0, (uint64_t)v0 * (uint64_t)a->ht, (uint64_t)v0};
    float scale[6] = {1.0f, 3.0f / sqrtf((float)a->hs), 0.5f,
                      1.0f, 3.0f / sqrtf((float)a->ht), 0.5f};
    for (int k = 0; k < 6; k++) {
        void *h = malloc(n[k] * es);
        tpb_fill(h, a->dtype, n[k], (uint64_t)k + 1, first[k], scale[k]);
        B->p[k] = tpb_upload(ctx, h, n[k] * es, failed);
        free(h);
    }
    int64_t *lab = malloc(t * sizeof(int64_t));
    for (size_t i = 0; i < t; i++) {
        lab[i] = (int64_t)(tpb_mix(77 + i) % (uint64_t)a->vocab);
    }
    B->p[6] = tpb_upload(ctx, lab, t * sizeof(int64_t), failed);
    free(lab);
    if (distil_malloc(ctx, 16, &B->loss) || distil_malloc(ctx, n[0] * es, &B->gx) ||
        distil_malloc(ctx, n[1] * es, &B->gw) || distil_malloc(ctx, n[2] * es, &B->gb)) {
        fprintf(stderr, "alloc: %s\n", distil_ctx_last_error(ctx));
        *failed = 1;
    }
}

static void tpb_free(distil_ctx *ctx, tpb_bufs *B) {
    for (int k = 0; k < 7; k++) {
        distil_free(ctx, B->p[k]);
    }
    distil_free(ctx, B->loss), distil_free(ctx, B->gx), distil_free(ctx, B->gw);
    distil_free(ctx, B->gb);
}

/* Median over iters of the slowest rank's time of one call (after a barrier). */
static double tpb_time(tpb_rank *me, distil_ctx *ctx, const distil_fused_linear_jsd_desc *d,
                       const distil_vocab_shard *s, tpb_bufs *B) {
    tpb_shared *sh = me->sh;
    int iters = sh->a.iters;
    double *t = calloc((size_t)iters, sizeof(double));
    for (int it = -2; it < iters; it++) { /* two warm-up calls */
        pthread_barrier_wait(&sh->bar);
        double t0 = tpb_now();
        distil_status st =
            distil_fused_linear_jsd_tp(ctx, d, s, B->p[0], B->p[1], B->p[2], B->p[3], B->p[4],
                                       B->p[5], B->p[6], B->loss, B->gx, B->gw, B->gb);
        if (st == DISTIL_OK) {
            st = distil_ctx_synchronize(ctx);
        }
        if (st != DISTIL_OK) {
            fprintf(stderr, "rank %d: %s\n", me->rank, distil_ctx_last_error(ctx));
            sh->failed = 1;
        }
        sh->t_call[me->rank] = tpb_now() - t0;
        pthread_barrier_wait(&sh->bar);
        if (it >= 0) {
            double m = 0.0;
            for (int r = 0; r < sh->a.ranks; r++) {
                m = fmax(m, sh->t_call[r]);
            }
            t[it] = m;
        }
    }
    qsort(t, (size_t)iters, sizeof(double), tpb_cmp);
    double med = t[iters / 2];
    free(t);
    return med;
}

typedef int (*nccl_allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);

static void *tpb_rank_main(void *arg) {
    tpb_rank *me = arg;
    tpb_shared *sh = me->sh;
    const tpb_args *a = &sh->a;
    int64_t v0 = a->vocab * me->rank / a->ranks, v1 = a->vocab * (me->rank + 1) / a->ranks;
    bool gpu = strcmp(a->backend, "cpu") != 0;
    distil_ctx *ctx = NULL;
    if (distil_ctx_create(&ctx, a->backend, gpu ? me->rank : 0) != DISTIL_OK) {
        fprintf(stderr, "rank %d: %s\n", me->rank, distil_ctx_last_error(NULL));
        sh->failed = 1;
        return NULL;
    }
    distil_comm *comm = NULL, *null_comm = NULL;
    distil_status st =
        gpu ? distil_comm_create_nccl(&comm, sh->nccl[me->rank])
            : distil_comm_create_callback(&comm, me->rank, a->ranks, tpb_thread_allreduce, me);
    if (st == DISTIL_OK) {
        st = distil_comm_create_callback(&null_comm, me->rank, a->ranks, tpb_null_allreduce, NULL);
    }
    if (st != DISTIL_OK) {
        fprintf(stderr, "rank %d: %s\n", me->rank, distil_ctx_last_error(NULL));
        sh->failed = 1;
    }
    distil_fused_linear_jsd_desc d;
    distil_fused_linear_jsd_desc_init(&d);
    d.rows = a->rows, d.vocab = v1 - v0, d.student_hidden = a->hs, d.teacher_hidden = a->ht;
    d.dtype = a->dtype, d.chunk_rows = a->chunk, d.return_parts = 1;
    distil_vocab_shard s;
    distil_vocab_shard_init(&s);
    s.vocab_offset = v0, s.vocab_total = a->vocab, s.comm = comm;
    tpb_bufs B = {0};
    tpb_make(ctx, a, v0, v1, &B, &sh->failed);
    size_t workspace = 0;
    if (distil_fused_linear_jsd_tp_workspace_size(ctx, &d, 1, &workspace) != DISTIL_OK) {
        workspace = 0;
    }
    double t_real = sh->failed ? 0.0 : tpb_time(me, ctx, &d, &s, &B);
    float loss[3] = {0};
    if (!sh->failed && distil_memcpy_to_host(ctx, loss, B.loss, sizeof loss) != DISTIL_OK) {
        sh->failed = 1;
    }
    s.comm = null_comm;
    double t_null = sh->failed ? 0.0 : tpb_time(me, ctx, &d, &s, &B);
    if (me->rank == 0 && !sh->failed) {
        printf("%s ranks=%d T=%lld V=%lld Hs=%lld Ht=%lld %s: %.3f ms/call, without collectives "
               "%.3f ms (collectives %.1f%%), loss %.7g (ce %.7g, jsd %.7g), workspace %.1f MiB "
               "per rank\n",
               a->backend, a->ranks, (long long)a->rows, (long long)a->vocab, (long long)a->hs,
               (long long)a->ht, distil_dtype_name(a->dtype), 1e3 * t_real, 1e3 * t_null,
               100.0 * (t_real - t_null) / t_real, (double)loss[0], (double)loss[1],
               (double)loss[2], (double)workspace / 1048576.0);
    }
    tpb_free(ctx, &B);
    distil_comm_destroy(comm);
    distil_comm_destroy(null_comm);
    distil_ctx_destroy(ctx);
    return NULL;
}

/* ---------------------------------------------------------------- setup */

static int tpb_nccl_init(tpb_shared *sh) {
    const char *name = getenv("DISTIL_BENCH_NCCL");
    void *h = dlopen(name ? name : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    typedef int (*init_all_fn)(void **comms, int ndev, const int *devlist);
    init_all_fn init_all = h ? (init_all_fn)dlsym(h, "ncclCommInitAll") : NULL;
    if (init_all == NULL) {
        fprintf(stderr, "distil-bench-tp: NCCL not found (set DISTIL_BENCH_NCCL): %s\n", dlerror());
        return 1;
    }
    int devs[TPB_MAX_RANKS];
    for (int r = 0; r < sh->a.ranks; r++) {
        devs[r] = r;
    }
    int rc = init_all(sh->nccl, sh->a.ranks, devs);
    if (rc != 0) {
        fprintf(stderr, "distil-bench-tp: ncclCommInitAll over %d GPUs failed (%d)\n", sh->a.ranks,
                rc);
    }
    return rc != 0;
}

static int tpb_parse(int argc, char **argv, tpb_args *a) {
    *a = (tpb_args){.backend = "cuda",
                    .ranks = 2,
                    .iters = 10,
                    .rows = 8192,
                    .vocab = 128256,
                    .hs = 2048,
                    .ht = 4096,
                    .dtype = DISTIL_BF16};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            return 1;
        }
        i++;
        if (!strcmp(k, "--backend")) {
            a->backend = v;
        } else if (!strcmp(k, "--ranks")) {
            a->ranks = atoi(v);
        } else if (!strcmp(k, "--iters")) {
            a->iters = atoi(v);
        } else if (!strcmp(k, "--rows")) {
            a->rows = atoll(v);
        } else if (!strcmp(k, "--vocab")) {
            a->vocab = atoll(v);
        } else if (!strcmp(k, "--hs")) {
            a->hs = atoll(v);
        } else if (!strcmp(k, "--ht")) {
            a->ht = atoll(v);
        } else if (!strcmp(k, "--chunk")) {
            a->chunk = atoll(v);
        } else if (!strcmp(k, "--dtype")) {
            a->dtype = !strcmp(v, "f32") ? DISTIL_F32 : DISTIL_BF16;
        } else {
            return 1;
        }
    }
    return a->ranks < 1 || a->ranks > TPB_MAX_RANKS || a->iters < 1 || a->vocab < a->ranks;
}

int main(int argc, char **argv) {
    static tpb_shared sh;
    if (tpb_parse(argc, argv, &sh.a)) {
        fprintf(stderr,
                "usage: %s [--backend cuda|cpu] [--ranks N<=16] [--rows T] [--vocab V] "
                "[--hs H] [--ht H] [--dtype bf16|f32] [--iters K] [--chunk C]\n",
                argv[0]);
        return 2;
    }
    if (strcmp(sh.a.backend, "cpu") != 0 && tpb_nccl_init(&sh)) {
        return 1;
    }
    pthread_barrier_init(&sh.bar, NULL, (unsigned)sh.a.ranks);
    pthread_t th[TPB_MAX_RANKS];
    tpb_rank ranks[TPB_MAX_RANKS];
    for (int r = 0; r < sh.a.ranks; r++) {
        ranks[r] = (tpb_rank){.sh = &sh, .rank = r};
        pthread_create(&th[r], NULL, tpb_rank_main, &ranks[r]);
    }
    for (int r = 0; r < sh.a.ranks; r++) {
        pthread_join(th[r], NULL);
    }
    pthread_barrier_destroy(&sh.bar);
    return sh.failed;
}
