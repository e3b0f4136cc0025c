/*
 * test_tp_mpi.c - the vocabulary-parallel losses of docs/SPEC.md §8 across processes: run under
 * mpirun (ctest: 2 and 3 ranks, tp_mpi_run.sh), each rank on the cpu backend with an MPI
 * communicator holds an unequal shard of the vocabulary; its loss, grad_xs (whole) and its rows of
 * grad_Ws / grad_bs are checked against the unsharded float64 reference, every rank's loss and
 * grad_xs are bitwise rank 0's, and a rerun is bitwise the same. The JSD likewise.
 */
#include "test_tp_shard.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_world;
static distil_ctx *g_ctx;
static distil_comm *g_comm;

/* Every rank's copy of buf equals rank 0's, bit for bit. */
static void same_on_every_rank(const char *what, const void *buf, size_t bytes) {
    void *root = malloc(bytes);
    memcpy(root, buf, bytes);
    MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    TU_CHECK_BITWISE(what, buf, root, bytes);
    free(root);
}

static void fused_mpi(void **state) {
    (void)state;
    static const tp_fused_spec cases[] = {
        {.t = 29,
         .v = 1031,
         .hs = 32,
         .ht = 48,
         .w_hard = 0.5f,
         .w_soft = 0.5f,
         .beta = 0.5f,
         .tau = 1.5f,
         .bias_s = true,
         .bias_t = true,
         .parts = true,
         .grads = TP_WANT_ALL,
         .labels = TP_LABELS_MIXED,
         .chunk = 8},
        {.t = 16,
         .v = 301,
         .hs = 8,
         .ht = 8,
         .w_hard = 0.4f,
         .w_soft = 0.6f,
         .beta = 1.0f,
         .tau = 1.0f,
         .parts = true,
         .grads = TP_WANT_XS | TP_WANT_WS,
         .labels = TP_LABELS_NONE},
    };
    static const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16};
    for (size_t c = 0; c < TU_LEN(cases); c++) {
        for (size_t k = 0; k < TU_LEN(dts); k++) {
            tp_fused p;
            tp_fused_make(&p, &cases[c], dts[k], 500 + c);
            distil_ctx *ref = tu_ctx("ref");
            tp_fused_out r;
            tp_fused_run(ref, &p, &r);
            int64_t v0, v1;
            tps_bounds(p.s.v, g_world, g_rank, &v0, &v1);
            tps_out o, o2;
            tps_fused_run(g_ctx, &p, v0, v1, g_comm, &o);
            tps_check(&p, v0, v1, &o, &r);
            size_t es = distil_dtype_size(p.d.dtype);
            same_on_every_rank("loss", o.loss, sizeof o.loss);
            same_on_every_rank("grad_student_hidden", o.gxs, p.n_xs * es);
            tps_fused_run(g_ctx, &p, v0, v1, g_comm, &o2);
            tps_check_rerun(&p, v0, v1, &o, &o2);
            tps_out_free(&o), tps_out_free(&o2);
            tp_fused_out_free(&r);
            distil_ctx_destroy(ref);
            tp_fused_free(&p);
        }
    }
}

static void jsd_mpi(void **state) {
    (void)state;
    tp_jsd_spec s = {.t = 11,
                     .v = 501,
                     .beta = 0.5f,
                     .red = DISTIL_REDUCTION_BATCHMEAN,
                     .labels = TP_LABELS_MIXED,
                     .grad = TP_GRAD_OUT};
    tp_jsd p;
    tp_jsd_make(&p, &s, DISTIL_F32, 77);
    distil_ctx *ref = tu_ctx("ref");
    tp_jsd_out r;
    tp_jsd_run(ref, &p, &r);
    int64_t v0, v1;
    tps_bounds(s.v, g_world, g_rank, &v0, &v1);
    int64_t w = v1 - v0;
    float *xh = malloc((size_t)(s.t * w) * 4), *yh = malloc((size_t)(s.t * w) * 4);
    for (int64_t i = 0; i < s.t; i++) {
        memcpy(xh + i * w, (const float *)p.x + i * p.xs + v0, (size_t)w * 4);
        memcpy(yh + i * w, (const float *)p.y + i * p.ys + v0, (size_t)w * 4);
    }
    void *x = tu_upload(g_ctx, xh, (size_t)(s.t * w) * 4);
    void *y = tu_upload(g_ctx, yh, (size_t)(s.t * w) * 4);
    void *lab = tu_upload(g_ctx, p.labels, (size_t)s.t * sizeof(int64_t));
    void *loss = tu_alloc_poisoned(g_ctx, 4),
         *grad = tu_alloc_poisoned(g_ctx, (size_t)(s.t * w) * 4);
    distil_jsd_desc d = p.d;
    d.vocab = w;
    d.student_stride = d.teacher_stride = d.grad_stride = 0;
    distil_vocab_shard sh;
    distil_vocab_shard_init(&sh);
    sh.vocab_offset = v0, sh.vocab_total = s.v, sh.comm = g_comm;
    TU_OK(g_ctx, distil_jsd_tp(g_ctx, &d, &sh, x, y, lab, loss, grad));
    float got;
    tu_download(g_ctx, &got, loss, 4);
    tu_download(g_ctx, xh, grad, (size_t)(s.t * w) * 4);
    TU_CHECK_REL("loss", got, r.loss[0], tu_tolerance(DISTIL_F32, TU_LOSS));
    same_on_every_rank("loss", &got, sizeof got);
    for (int64_t i = 0; i < s.t; i++) {
        memcpy(yh + i * w, (const float *)r.grad + i * p.gs + v0, (size_t)w * 4);
    }
    TU_CHECK_TENSOR("grad_student", xh, yh, DISTIL_F32, s.t, w, w,
                    tu_tolerance(DISTIL_F32, TU_GRAD));
    distil_free(g_ctx, x), distil_free(g_ctx, y), distil_free(g_ctx, lab);
    distil_free(g_ctx, loss), distil_free(g_ctx, grad);
    free(xh), free(yh);
    tp_jsd_out_free(&r);
    distil_ctx_destroy(ref);
    tp_jsd_free(&p);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    int failed = 1;
    if (!tu_backend_has_device("cpu")) {
        printf("cpu: no device, skipped\n");
        MPI_Finalize();
        return TU_EXIT_SKIPPED;
    }
    MPI_Comm world = MPI_COMM_WORLD;
    if (distil_ctx_create(&g_ctx, "cpu", 0) == DISTIL_OK &&
        !distil_testing_capabilities(g_ctx).tp) {
        printf("cpu: no vocabulary-parallel row pass, skipped\n");
        distil_ctx_destroy(g_ctx);
        MPI_Finalize();
        return TU_EXIT_SKIPPED;
    }
    if (g_ctx != NULL && distil_comm_create_mpi(&g_comm, &world) == DISTIL_OK) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(fused_mpi), cmocka_unit_test(jsd_mpi)};
        char name[64];
        snprintf(name, sizeof name, "tp_mpi[cpu, rank %d of %d]", g_rank, g_world);
        failed = _cmocka_run_group_tests(name, tests, TU_LEN(tests), NULL, NULL);
    } else {
        printf("setup failed: %s\n", distil_ctx_last_error(NULL));
    }
    distil_comm_destroy(g_comm);
    distil_ctx_destroy(g_ctx);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any != 0;
}
