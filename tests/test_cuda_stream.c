/*
 * test_cuda_stream.c - every CUDA stream can be bound, the special handles included
 * (docs/SPEC.md §5): work a program enqueued earlier on the bound stream is finished before a
 * loss call reads its inputs. The inputs are written by an asynchronous copy queued behind a
 * long copy on the same stream; a call that ran on another stream (the context's own,
 * non-blocking one) would read the stale, poisoned inputs and give another loss. Built only with
 * the cuda backend; without a device it reports "skipped".
 */
#include "test_util.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STREAM_ROWS = 64, STREAM_VOCAB = 4099 };
/* The delaying copy: 256 MiB from pinned memory takes ~10 ms over PCIe, far longer than the
 * loss call takes to start on an idle stream. */
static const size_t stream_delay_bytes = (size_t)256 << 20;

/* The eager loss of fresh log-probs x, y (on the context's own stream, then synchronised). */
static float stream_reference_loss(distil_ctx *ctx, const distil_jsd_desc *d, void *x, void *y,
                                   float *loss_dev) {
    TU_OK(ctx, distil_ctx_set_stream(ctx, DISTIL_STREAM_OWN));
    TU_OK(ctx, distil_jsd(ctx, d, x, y, NULL, loss_dev, NULL));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    float loss = 0.0f;
    tu_download(ctx, &loss, loss_dev, sizeof loss);
    return loss;
}

/* Bind `bound`, queue [long copy, copy of x's real values] on `queue`, then the loss call: with
 * `ordered` the call must see the copied x (the eager loss); without, it must not (the control
 * that shows this test can fail: the context's own stream, what NULL used to bind). */
static void stream_check(void *bound, cudaStream_t queue, bool ordered, const char *name) {
    distil_ctx *ctx = tu_ctx("cuda");
    tu_rng r = tu_rng_make(0x5eed);
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = STREAM_ROWS;
    d.vocab = STREAM_VOCAB;
    const size_t bytes = (size_t)STREAM_ROWS * STREAM_VOCAB * sizeof(float);
    float *hx = NULL, *hy = malloc(bytes);
    assert_int_equal(cudaMallocHost((void **)&hx, bytes), cudaSuccess);
    assert_non_null(hy);
    tu_fill_logp(&r, hx, DISTIL_F32, STREAM_ROWS, STREAM_VOCAB, STREAM_VOCAB, 1.0, NULL);
    tu_fill_logp(&r, hy, DISTIL_F32, STREAM_ROWS, STREAM_VOCAB, STREAM_VOCAB, 1.0, NULL);
    void *x = tu_upload(ctx, hx, bytes), *y = tu_upload(ctx, hy, bytes);
    float *loss = tu_alloc_poisoned(ctx, sizeof(float));
    const float want = stream_reference_loss(ctx, &d, x, y, loss);

    /* x becomes the teacher itself (loss 0) until the queued copy restores it. */
    assert_int_equal(cudaMemcpy(x, y, bytes, cudaMemcpyDefault), cudaSuccess);
    void *delay_host = NULL, *delay_dev = NULL;
    assert_int_equal(cudaMallocHost(&delay_host, stream_delay_bytes), cudaSuccess);
    assert_int_equal(cudaMalloc(&delay_dev, stream_delay_bytes), cudaSuccess);
    TU_OK(ctx, distil_ctx_set_stream(ctx, bound));
    assert_int_equal(
        cudaMemcpyAsync(delay_dev, delay_host, stream_delay_bytes, cudaMemcpyHostToDevice, queue),
        cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(x, hx, bytes, cudaMemcpyHostToDevice, queue), cudaSuccess);
    TU_OK(ctx, distil_jsd(ctx, &d, x, y, NULL, loss, NULL));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    float got = -1.0f;
    tu_download(ctx, &got, loss, sizeof got);
    printf("  %s: loss %.9g, eager %.9g\n", name, (double)got, (double)want);
    assert_true(want > 0.0f);
    if (ordered && memcmp(&got, &want, sizeof got) != 0) {
        fail_msg("%s: the call did not wait for the bound stream's earlier copy (loss %.9g, "
                 "eager %.9g)",
                 name, (double)got, (double)want);
    }
    if (!ordered && got == want) {
        fail_msg("%s: the control call saw the copy it was not ordered after", name);
    }
    TU_OK(ctx, distil_ctx_set_stream(ctx, DISTIL_STREAM_OWN));
    cudaFree(delay_dev);
    cudaFreeHost(delay_host);
    cudaFreeHost(hx);
    free(hy);
    distil_free(ctx, x);
    distil_free(ctx, y);
    distil_free(ctx, loss);
    distil_ctx_destroy(ctx);
}

static void test_legacy_default_stream(void **state) {
    (void)state;
    stream_check(NULL, (cudaStream_t)0, true, "NULL (legacy default stream)");
}

static void test_legacy_handle(void **state) {
    (void)state;
    stream_check((void *)cudaStreamLegacy, cudaStreamLegacy, true, "cudaStreamLegacy");
}

static void test_per_thread_stream(void **state) {
    (void)state;
    stream_check((void *)cudaStreamPerThread, cudaStreamPerThread, true, "cudaStreamPerThread");
}

static void test_created_stream(void **state) {
    (void)state;
    cudaStream_t s = NULL;
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    stream_check((void *)s, s, true, "a non-blocking stream");
    cudaStreamDestroy(s);
}

/* The control: the context's own (non-blocking) stream is not ordered after work on the
 * legacy default stream, so the call reads x before the copy lands. This is what binding NULL
 * did before NULL meant the default stream. */
static void test_own_stream_control(void **state) {
    (void)state;
    stream_check(DISTIL_STREAM_OWN, (cudaStream_t)0, false, "DISTIL_STREAM_OWN (control)");
}

int main(void) {
    tu_apply_env();
    if (!tu_backend_has_device("cuda")) {
        printf("cuda: no device, skipped\n");
        return TU_EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_default_stream), cmocka_unit_test(test_legacy_handle),
        cmocka_unit_test(test_per_thread_stream),     cmocka_unit_test(test_created_stream),
        cmocka_unit_test(test_own_stream_control),
    };
    return cmocka_run_group_tests_name("cuda streams", tests, NULL, NULL);
}
