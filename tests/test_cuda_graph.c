/*
 * test_cuda_graph.c - both losses captured into a CUDA graph on a stream lent to the context,
 * then replayed: every replay writes the same bits as an eager call (a call enqueues work and
 * never synchronises the host, so it can be captured). Built only with the cuda
 * backend; without a device it reports "skipped". A normaliser given on the device
 * (docs/SPEC.md §6) is read at replay: doubling it halves the outputs, bit for bit.
 */
#include "test_util.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One loss call, its device outputs and their sizes. */
typedef struct graph_case {
    distil_status (*call)(distil_ctx *ctx, const struct graph_case *c);
    distil_jsd_desc jd;
    distil_fused_linear_jsd_desc fd;
    void *in[7];
    void *out[4];
    size_t out_bytes[4];
    int n_out;
    float *norm; /* the device normaliser of jd (fp32 outputs), or NULL */
    float norm_value;
} graph_case;

static distil_status graph_jsd_call(distil_ctx *ctx, const graph_case *c) {
    return distil_jsd(ctx, &c->jd, c->in[0], c->in[1], c->in[2], c->out[0], c->out[1]);
}

static distil_status graph_fused_call(distil_ctx *ctx, const graph_case *c) {
    return distil_fused_linear_jsd(ctx, &c->fd, c->in[0], c->in[1], c->in[2], c->in[3], c->in[4],
                                   c->in[5], c->in[6], c->out[0], c->out[1], c->out[2], c->out[3]);
}

/* Labels of `rows` rows: every fifth ignored, the rest in [0, vocab). */
static void *graph_labels(distil_ctx *ctx, tu_rng *r, int64_t rows, int64_t vocab) {
    int64_t *h = malloc((size_t)rows * sizeof *h);
    assert_non_null(h);
    for (int64_t i = 0; i < rows; i++) {
        h[i] = i % 5 == 4 ? -100 : tu_rand_int(r, vocab);
    }
    void *d = tu_upload(ctx, h, (size_t)rows * sizeof *h);
    free(h);
    return d;
}

/* A (n) tensor of dtype with normal values, on the device. */
static void *graph_normal(distil_ctx *ctx, tu_rng *r, distil_dtype dt, size_t n, double std) {
    size_t bytes = n * distil_dtype_size(dt);
    void *h = malloc(bytes);
    assert_non_null(h);
    tu_fill_normal(r, h, dt, n, std);
    void *d = tu_upload(ctx, h, bytes);
    free(h);
    return d;
}

static void graph_make_jsd(distil_ctx *ctx, graph_case *c) {
    const int64_t t = 64, v = 4099;
    tu_rng r = tu_rng_make(31);
    memset(c, 0, sizeof *c);
    distil_jsd_desc_init(&c->jd);
    c->jd.rows = t, c->jd.vocab = v, c->jd.beta = 0.3f;
    float *h = malloc((size_t)(t * v) * sizeof *h);
    assert_non_null(h);
    for (int k = 0; k < 2; k++) {
        tu_fill_logp(&r, h, DISTIL_F32, t, v, v, 2.0, NULL);
        c->in[k] = tu_upload(ctx, h, (size_t)(t * v) * sizeof *h);
    }
    free(h);
    c->in[2] = graph_labels(ctx, &r, t, v);
    c->out_bytes[0] = sizeof(float);
    c->out_bytes[1] = (size_t)(t * v) * sizeof(float);
    c->n_out = 2;
    c->call = graph_jsd_call;
}

/* Several chunks with biases: bf16 (fp32 accumulators and the final cast are in the graph, both
 * logits GEMMs of the next chunk on the second lane) or f32 (G in place in zs: only the teacher's
 * GEMM on the second lane). 100 rows: chunks of 32, 32, 32 and 4. */
static void graph_make_fused(distil_ctx *ctx, graph_case *c, distil_dtype dt) {
    const int64_t t = 100, v = 1031, hs = 64, ht = 96;
    const size_t es = distil_dtype_size(dt);
    tu_rng r = tu_rng_make(32);
    memset(c, 0, sizeof *c);
    distil_fused_linear_jsd_desc_init(&c->fd);
    c->fd.rows = t, c->fd.vocab = v, c->fd.student_hidden = hs, c->fd.teacher_hidden = ht;
    c->fd.dtype = dt, c->fd.temperature = 2.0f, c->fd.chunk_rows = 32, c->fd.return_parts = 1;
    c->in[0] = graph_normal(ctx, &r, dt, (size_t)(t * hs), 1.0);
    c->in[1] = graph_normal(ctx, &r, dt, (size_t)(v * hs), 0.1);
    c->in[2] = graph_normal(ctx, &r, dt, (size_t)v, 0.1);
    c->in[3] = graph_normal(ctx, &r, dt, (size_t)(t * ht), 1.0);
    c->in[4] = graph_normal(ctx, &r, dt, (size_t)(v * ht), 0.1);
    c->in[5] = graph_normal(ctx, &r, dt, (size_t)v, 0.1);
    c->in[6] = graph_labels(ctx, &r, t, v);
    c->out_bytes[0] = 3 * sizeof(float);
    c->out_bytes[1] = (size_t)(t * hs) * es;
    c->out_bytes[2] = (size_t)(v * hs) * es;
    c->out_bytes[3] = (size_t)v * es;
    c->n_out = 4;
    c->call = graph_fused_call;
}

/* The JSD case with a skew KL and N = 8 given on the device (fp32 outputs). */
static void graph_make_jsd_norm(distil_ctx *ctx, graph_case *c) {
    graph_make_jsd(ctx, c);
    c->jd.divergence = DISTIL_DIVERGENCE_SKEW_KL, c->jd.alpha = 0.2f;
    c->norm_value = 8.0f;
    c->norm = tu_upload(ctx, &c->norm_value, sizeof c->norm_value);
    c->jd.normaliser_device = c->norm;
}

static void graph_free(distil_ctx *ctx, graph_case *c) {
    distil_free(ctx, c->norm);
    for (int i = 0; i < 7; i++) {
        distil_free(ctx, c->in[i]);
    }
    for (int i = 0; i < c->n_out; i++) {
        distil_free(ctx, c->out[i]);
    }
}

/* Poison every output, then download nothing: the next call must write them all. */
static void graph_poison(distil_ctx *ctx, const graph_case *c) {
    for (int i = 0; i < c->n_out; i++) {
        void *h = malloc(c->out_bytes[i]);
        assert_non_null(h);
        tu_poison(h, c->out_bytes[i]);
        TU_OK(ctx, distil_memcpy_to_device(ctx, c->out[i], h, c->out_bytes[i]));
        free(h);
    }
}

/* With N doubled on the device, one more replay writes exactly half of ref (fp32 outputs:
 * loss / 2N and grad_scale / 2N are the halves of loss / N and grad_scale / N, exactly). */
static void graph_check_norm(distil_ctx *ctx, cudaStream_t s, cudaGraphExec_t exec,
                             const graph_case *c, void *const *ref, void *const *got) {
    const float twice = 2.0f * c->norm_value;
    TU_OK(ctx, distil_memcpy_to_device(ctx, c->norm, &twice, sizeof twice));
    graph_poison(ctx, c);
    assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    for (int i = 0; i < c->n_out; i++) {
        tu_download(ctx, got[i], c->out[i], c->out_bytes[i]);
        const float *g = got[i], *r = ref[i];
        for (size_t k = 0; k < c->out_bytes[i] / sizeof(float); k++) {
            if (!(g[k] == r[k] / 2.0f)) {
                print_error("replay with N doubled: output %d[%zu] = %g, want %g\n", i, k,
                            (double)g[k], (double)(r[k] / 2.0f));
                fail();
            }
        }
    }
}

/* Eager call (its bits are the reference), capture, then two replays compared bitwise. */
static void graph_check(distil_ctx *ctx, cudaStream_t s, graph_case *c) {
    void *ref[4], *got[4];
    for (int i = 0; i < c->n_out; i++) {
        c->out[i] = tu_alloc_poisoned(ctx, c->out_bytes[i]);
        ref[i] = malloc(c->out_bytes[i]);
        got[i] = malloc(c->out_bytes[i]);
        assert_true(ref[i] != NULL && got[i] != NULL);
    }
    TU_OK(ctx, c->call(ctx, c)); /* also grows the context's workspace before the capture */
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    for (int i = 0; i < c->n_out; i++) {
        tu_download(ctx, ref[i], c->out[i], c->out_bytes[i]);
    }
    graph_poison(ctx, c);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    distil_status st = c->call(ctx, c);
    assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
    TU_OK(ctx, st);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 2; replay++) {
        graph_poison(ctx, c);
        assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
        assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
        TU_OK(ctx, distil_ctx_synchronize(ctx));
        for (int i = 0; i < c->n_out; i++) {
            tu_download(ctx, got[i], c->out[i], c->out_bytes[i]);
            TU_CHECK_BITWISE("graph replay", got[i], ref[i], c->out_bytes[i]);
        }
    }
    if (c->norm != NULL) {
        graph_check_norm(ctx, s, exec, c, ref, got);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (int i = 0; i < c->n_out; i++) {
        free(ref[i]);
        free(got[i]);
    }
}

static void graph_run(void (*make)(distil_ctx *, graph_case *)) {
    distil_ctx *ctx = tu_ctx("cuda");
    cudaStream_t s = NULL;
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    TU_OK(ctx, distil_ctx_set_stream(ctx, s));
    graph_case c;
    make(ctx, &c);
    graph_check(ctx, s, &c);
    graph_free(ctx, &c);
    TU_OK(ctx, distil_ctx_set_stream(ctx, DISTIL_STREAM_OWN));
    distil_ctx_destroy(ctx);
    cudaStreamDestroy(s);
}

static void test_jsd_graph(void **state) {
    (void)state;
    graph_run(graph_make_jsd);
}

static void test_jsd_graph_normaliser(void **state) {
    (void)state;
    graph_run(graph_make_jsd_norm);
}

static void graph_make_fused_bf16(distil_ctx *ctx, graph_case *c) {
    graph_make_fused(ctx, c, DISTIL_BF16);
}

static void graph_make_fused_f32(distil_ctx *ctx, graph_case *c) {
    graph_make_fused(ctx, c, DISTIL_F32);
}

static void test_fused_graph(void **state) {
    (void)state;
    graph_run(graph_make_fused_bf16);
}

static void test_fused_graph_f32(void **state) {
    (void)state;
    graph_run(graph_make_fused_f32);
}

int main(void) {
    tu_apply_env();
    if (!tu_backend_has_device("cuda")) {
        printf("cuda: no device, skipped\n");
        return TU_EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsd_graph),
        cmocka_unit_test(test_fused_graph),
        cmocka_unit_test(test_fused_graph_f32),
        cmocka_unit_test(test_jsd_graph_normaliser),
    };
    return cmocka_run_group_tests_name("cuda graph capture", tests, NULL, NULL);
}
