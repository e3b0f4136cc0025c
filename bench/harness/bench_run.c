/*
 * bench_run.c - measure one benchmark point: create a context, upload the input sets, warm up,
 * then time calls between synchronizes (host clock). On GPU backends the reported time is N
 * back-to-back calls between two synchronizes divided by N, which hides the ~10 us of launch and
 * synchronisation; on host backends each point may run in a child process so that its peak RSS
 * is its own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

int bench_is_host_backend(const char *backend) {
    return strcmp(backend, "cpu") == 0 || strcmp(backend, "ref") == 0;
}

/* Minimum memory traffic and GEMM work of one call. */
void bench_work_of(const bench_shape *s, bench_mode mode, double *bytes, double *flops) {
    double t = (double)s->rows;
    double v = (double)s->vocab;
    double dsz = (double)distil_dtype_size(s->dtype);
    int full = mode == BENCH_FULL;
    if (s->workload == BENCH_JSD) {
        *bytes = (full ? 3.0 : 2.0) * t * v * dsz; /* read x, y; write grad */
        *flops = 0.0;
        return;
    }
    double hs = (double)s->hs;
    double ht = s->topk_k > 0 ? 0.0 : (double)s->ht; /* a cached top-k teacher: no head */
    *bytes = (t * hs + v * hs + t * ht + v * ht) * dsz + 8.0 * t + 12.0 * t * (double)s->topk_k;
    *flops = 2.0 * t * v * (hs + ht); /* both logits (the student's only with --topk) */
    if (full) {
        *bytes += (t * hs + v * hs) * dsz;
        *flops += 4.0 * t * v * hs; /* grad_xs = G Ws, grad_Ws = G^T xs */
    }
}

/* Enough input sets that one pass over them exceeds the cache size given. */
static int bench_sets_for(const bench_options *opt, const bench_shape *s) {
    double set = bench_set_bytes(s);
    double want = ceil(opt->cache_mb * 1048576.0 / (set > 1.0 ? set : 1.0));
    int max = opt->max_sets < 1 ? 1 : opt->max_sets;
    return want < 1.0 ? 1 : (want > (double)max ? max : (int)want);
}

static void bench_fail(bench_result *r, distil_ctx *ctx, distil_status st, const char *what) {
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s: %s: %s", what, distil_status_string(st),
             distil_ctx_last_error(ctx));
}

/* Call, synchronize; the status of whichever failed first. */
static distil_status bench_call_sync(distil_ctx *ctx, const bench_shape *s, bench_mode mode,
                                     const bench_buffers *b, int set, int calls) {
    for (int i = 0; i < calls; i++) {
        distil_status st = bench_call(ctx, s, mode, b, set + i);
        if (st != DISTIL_OK) {
            return st;
        }
    }
    return distil_ctx_synchronize(ctx);
}

/*
 * Samples of `batch` back-to-back calls each, in ms per call, until min_reps samples and
 * min_time seconds (or max_reps samples). The input set changes with every call.
 */
static distil_status bench_sample(const bench_options *opt, distil_ctx *ctx, const bench_shape *s,
                                  bench_mode mode, const bench_buffers *b, int batch, int max,
                                  double *ms, int *n) {
    static int set = 0;
    double start = bench_now_s();
    *n = 0;
    while (*n < max && (*n < opt->min_reps || bench_now_s() - start < opt->min_time_s)) {
        distil_status st = distil_ctx_synchronize(ctx);
        double t0 = bench_now_s();
        if (st == DISTIL_OK) {
            st = bench_call_sync(ctx, s, mode, b, set, batch);
        }
        double t1 = bench_now_s();
        if (st != DISTIL_OK) {
            return st;
        }
        set += batch;
        ms[(*n)++] = 1e3 * (t1 - t0) / batch;
    }
    return DISTIL_OK;
}

static void bench_summarise(bench_result *r, double *ms, int n) {
    r->reps = n;
    r->ms_p20 = bench_percentile(ms, n, 0.2);
    r->ms_p80 = bench_percentile(ms, n, 0.8);
    r->ms_med = bench_percentile(ms, n, 0.5);
}

/* Warm up, then time one mode by the method the options and the backend ask for. */
static distil_status bench_time_mode(const bench_options *opt, distil_ctx *ctx,
                                     const bench_shape *s, bench_mode mode, const bench_buffers *b,
                                     bench_result *r) {
    int max = opt->max_reps > opt->min_reps ? opt->max_reps : opt->min_reps;
    double *ms = malloc((size_t)max * sizeof *ms);
    if (ms == NULL) {
        return DISTIL_ERR_OUT_OF_MEMORY;
    }
    int batch_mode = opt->timing == BENCH_TIMING_BATCH ||
                     (opt->timing == BENCH_TIMING_AUTO && !bench_is_host_backend(r->backend));
    int n = 0;
    distil_status st = bench_call_sync(ctx, s, mode, b, 0, opt->warmup);
    if (st == DISTIL_OK) { /* single calls: the whole time on the host, and a batch estimate */
        st = bench_sample(opt, ctx, s, mode, b, 1, batch_mode ? (max < 5 ? max : 5) : max, ms, &n);
    }
    if (st == DISTIL_OK) {
        bench_summarise(r, ms, n);
        r->ms_sync_med = r->ms_med;
        r->timing = "host-sync";
        r->batch = 1;
    }
    if (st == DISTIL_OK && batch_mode) {
        int batch = opt->batch > 0 ? opt->batch : (int)ceil(5.0 / (r->ms_sync_med + 1e-6));
        r->batch = batch < 1 ? 1 : (batch > 50 && opt->batch <= 0 ? 50 : batch);
        st = bench_sample(opt, ctx, s, mode, b, r->batch, max, ms, &n);
        if (st == DISTIL_OK) {
            bench_summarise(r, ms, n);
            r->timing = "host-batch";
        }
    }
    free(ms);
    return st;
}

/* Time one mode on buffers already made, then its loss, workspace and memory. */
static void bench_measure(const bench_options *opt, distil_ctx *ctx, const bench_shape *s,
                          const bench_buffers *b, double rss_before, bench_result *r) {
    size_t work = 0;
    distil_status st = bench_workspace_bytes(ctx, s, r->mode, b, &work);
    if (st != DISTIL_OK) {
        bench_fail(r, ctx, st, "workspace size");
        return;
    }
    r->workspace_bytes = (double)work;
    st = bench_time_mode(opt, ctx, s, r->mode, b, r);
    if (st == DISTIL_OK) {
        st = bench_read_loss(ctx, b, &r->loss);
    }
    if (st != DISTIL_OK) {
        bench_fail(r, ctx, st, bench_mode_name(r->mode));
        return;
    }
    if (bench_is_host_backend(r->backend)) {
        r->mem_bytes = bench_max_rss_bytes();
        r->mem_kind = "peak-rss";
        r->working_bytes = r->mem_bytes - rss_before;
    } else {
        double io = bench_set_bytes(s) + bench_output_bytes(s, r->mode == BENCH_FULL);
        r->mem_bytes = io + r->workspace_bytes;
        r->mem_kind = "inputs+outputs+workspace";
        r->working_bytes = r->workspace_bytes;
    }
}

static void bench_result_init(bench_result *r, const char *backend, const bench_shape *s,
                              bench_mode mode, int sets) {
    memset(r, 0, sizeof *r);
    r->shape = *s;
    r->mode = mode;
    snprintf(r->backend, sizeof r->backend, "%s", backend);
    r->timing = "none";
    r->mem_kind = "none";
    r->sets = sets;
    r->loss = NAN;
    bench_work_of(s, mode, &r->bytes, &r->flops);
}

/* Measure the given modes of one shape on one backend, in this process. */
void bench_run_point(const bench_options *opt, const char *backend, const bench_shape *s,
                     const bench_mode *modes, int n_modes, bench_result *out) {
    int sets = bench_sets_for(opt, s);
    int want_grads = 0;
    for (int i = 0; i < n_modes; i++) {
        bench_result_init(&out[i], backend, s, modes[i], sets);
        want_grads |= modes[i] == BENCH_FULL;
    }
    distil_ctx *ctx = NULL;
    bench_buffers *b = NULL;
    distil_status st = distil_ctx_create(&ctx, backend, opt->device);
    const char *what = "context";
    if (st == DISTIL_OK) {
        what = "inputs";
        st = bench_buffers_create(ctx, s, want_grads, sets, opt->seed, &b);
    }
    double rss_before = bench_max_rss_bytes();
    for (int i = 0; i < n_modes; i++) {
        snprintf(out[i].device, sizeof out[i].device, "%s", distil_ctx_device_name(ctx));
        if (st != DISTIL_OK) {
            bench_fail(&out[i], ctx, st, what);
        } else {
            bench_measure(opt, ctx, s, b, rss_before, &out[i]);
        }
    }
    bench_buffers_destroy(ctx, b);
    distil_ctx_destroy(ctx);
}

/* Read exactly n bytes from a pipe; 0 on success. */
static int bench_read_all(int fd, void *dst, size_t n) {
    char *p = dst;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got <= 0) {
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* One mode in a child process; its result comes back through a pipe. */
static void bench_run_child(const bench_options *opt, const char *backend, const bench_shape *s,
                            bench_mode mode, bench_result *out) {
    int fd[2];
    pid_t pid = -1;
    if (pipe(fd) == 0) {
        pid = fork();
    }
    if (pid == 0) {
        close(fd[0]);
        bench_run_point(opt, backend, s, &mode, 1, out);
        ssize_t w = write(fd[1], out, sizeof *out); /* one small write: atomic on a pipe */
        _exit(w == (ssize_t)sizeof *out ? 0 : 1);
    }
    if (pid < 0) {
        bench_run_point(opt, backend, s, &mode, 1, out); /* no fork: measure in place */
        return;
    }
    close(fd[1]);
    int ok = bench_read_all(fd[0], out, sizeof *out) == 0;
    close(fd[0]);
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (!ok) {
        bench_result_init(out, backend, s, mode, 0);
        out->status = DISTIL_ERR_BACKEND;
        snprintf(out->message, sizeof out->message, "child process died (%s %d)",
                 WIFSIGNALED(wst) ? "signal" : "exit",
                 WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
    }
}

/*
 * Measure the modes of one shape. Host backends run each mode in its own child process (unless
 * --isolate=0), so that the peak RSS of each is its own and no OpenMP or BLAS thread pool is
 * created in this process. GPU backends never fork: a CUDA context does not survive fork.
 */
void bench_run_isolated(const bench_options *opt, const char *backend, const bench_shape *s,
                        const bench_mode *modes, int n_modes, bench_result *out) {
    if (!bench_is_host_backend(backend) || opt->isolate == 0) {
        bench_run_point(opt, backend, s, modes, n_modes, out);
        return;
    }
    for (int i = 0; i < n_modes; i++) {
        fflush(NULL);
        bench_run_child(opt, backend, s, modes[i], &out[i]);
    }
}
