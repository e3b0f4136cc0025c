/*
 * test_tp_nccl.c - the vocabulary-parallel losses of docs/SPEC.md §8 through the NCCL adapter
 * (distil_comm_create_nccl), world size 1 on one GPU: the test loads NCCL itself
 * (DISTIL_TEST_NCCL, else libnccl.so.2 / librccl.so from the library path), makes a one-rank
 * communicator with ncclCommInitRank, and runs the fused loss and the JSD on the cuda (hip)
 * backend against the unsharded float64 reference. Skipped with a message without a GPU or NCCL.
 */
#define _GNU_SOURCE 1
#include "test_tp_shard.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_unique_id {
    char internal[128]; /* ncclUniqueId (NCCL_UNIQUE_ID_BYTES) */
} nccl_unique_id;
typedef int (*nccl_get_id_fn)(nccl_unique_id *id);
typedef int (*nccl_init_rank_fn)(void **comm, int nranks, nccl_unique_id id, int rank);
typedef int (*nccl_destroy_fn)(void *comm);

static const char *g_backend;
static distil_ctx *g_ctx;
static void *g_nccl; /* ncclComm_t */
static nccl_destroy_fn g_destroy;

/* Load NCCL (RTLD_GLOBAL, as a framework would have) and make a one-rank communicator. */
static bool nccl_open(void) {
    const char *env = getenv("DISTIL_TEST_NCCL");
    const char *const names[] = {env ? env : "libnccl.so.2", "librccl.so.1", "librccl.so"};
    void *h = NULL;
    for (size_t i = 0; i < TU_LEN(names) && h == NULL; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    }
    if (h == NULL) {
        printf("NCCL not found (set DISTIL_TEST_NCCL to libnccl.so.2): skipped\n");
        return false;
    }
    nccl_get_id_fn get_id = (nccl_get_id_fn)dlsym(h, "ncclGetUniqueId");
    nccl_init_rank_fn init = (nccl_init_rank_fn)dlsym(h, "ncclCommInitRank");
    g_destroy = (nccl_destroy_fn)dlsym(h, "ncclCommDestroy");
    nccl_unique_id id;
    if (!get_id || !init || !g_destroy || get_id(&id) != 0 || init(&g_nccl, 1, id, 0) != 0) {
        printf("NCCL: ncclCommInitRank of one rank failed: skipped\n");
        return false;
    }
    return true;
}

static void fused_nccl(void **state) {
    (void)state;
    if (g_nccl == NULL && !nccl_open()) {
        skip();
    }
    static const tp_fused_spec s = {.t = 64,
                                    .v = 4099,
                                    .hs = 64,
                                    .ht = 96,
                                    .w_hard = 0.5f,
                                    .w_soft = 0.5f,
                                    .beta = 0.5f,
                                    .tau = 2.0f,
                                    .bias_s = true,
                                    .parts = true,
                                    .grads = TP_WANT_ALL,
                                    .labels = TP_LABELS_MIXED,
                                    .chunk = 24};
    static const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16};
    distil_comm *comm = NULL;
    TU_OK(NULL, distil_comm_create_nccl(&comm, g_nccl));
    assert_int_equal(distil_comm_size(comm), 1);
    for (size_t k = 0; k < TU_LEN(dts); k++) {
        tp_fused p;
        tp_fused_make(&p, &s, dts[k], 900 + k);
        distil_ctx *ref = tu_ctx("ref");
        tp_fused_out r;
        tp_fused_run(ref, &p, &r);
        tps_out o, o2;
        tps_fused_run(g_ctx, &p, 0, s.v, comm, &o);
        tps_check(&p, 0, s.v, &o, &r);
        tps_fused_run(g_ctx, &p, 0, s.v, comm, &o2);
        tps_check_rerun(&p, 0, s.v, &o, &o2);
        tps_out_free(&o), tps_out_free(&o2);
        tp_fused_out_free(&r);
        distil_ctx_destroy(ref);
        tp_fused_free(&p);
    }
    distil_comm_destroy(comm);
}

static int group_setup(void **state) {
    (void)state;
    g_ctx = tu_ctx(g_backend);
    return g_ctx ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    if (strcmp(backend, "cuda") != 0 && strcmp(backend, "hip") != 0) {
        printf("%s: NCCL needs the cuda or hip backend, skipped\n", backend);
        return 0;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(fused_nccl)};
    return _cmocka_run_group_tests(tu_group_name("tp_nccl", backend), tests, TU_LEN(tests),
                                   group_setup, group_teardown);
}

int main(void) {
    int rc = tu_run_per_backend(run_group, false);
    if (g_nccl != NULL) {
        g_destroy(g_nccl);
    }
    return rc;
}
