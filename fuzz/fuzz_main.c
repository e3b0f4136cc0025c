/*
 * fuzz_main.c - the libFuzzer entry point: pick a context (a long-lived one per backend, or a
 * fresh one created and destroyed within the input) and run one case on it. A long-lived
 * context must come out of every input clean: no deferred error left behind.
 */
#include "fuzz.h"

#include <stdlib.h>

#define FZ_MAX_CONTEXTS 8

static distil_ctx *fz_contexts[FZ_MAX_CONTEXTS];
static int fz_n_contexts = -1;

/* Long-lived contexts on every backend that has a device and may be fuzzed. */
static void fz_contexts_init(void) {
    fz_n_contexts = 0;
    for (int i = 0; i < distil_backend_count() && fz_n_contexts < FZ_MAX_CONTEXTS; i++) {
        const char *name = distil_backend_name(i);
        int n = 0;
        if (!fz_backend_allowed(name) || distil_backend_device_count(name, &n) != DISTIL_OK) {
            continue;
        }
        distil_ctx *ctx = NULL;
        if (distil_ctx_create(&ctx, name, 0) != DISTIL_OK) {
            fz_fail("ctx_create(%s) failed: %s", name, distil_ctx_last_error(NULL));
        }
        fz_contexts[fz_n_contexts++] = ctx;
    }
    if (fz_n_contexts == 0) {
        fz_fail("no backend to fuzz");
    }
}

distil_ctx *fz_context(fz_in *in) {
    if (fz_n_contexts < 0) {
        fz_contexts_init();
    }
    return fz_contexts[fz_pick(in, (unsigned)fz_n_contexts)];
}

distil_ctx *fz_ref_context(void) {
    static distil_ctx *ref;
    if (ref == NULL && distil_ctx_create(&ref, "ref", 0) != DISTIL_OK) {
        fz_fail("ctx_create(ref) failed: %s", distil_ctx_last_error(NULL));
    }
    return ref;
}

static void fz_run_case(fz_in *in, unsigned which, distil_ctx *ctx) {
    if (which == 0) {
        fz_case_jsd(in, ctx);
    } else if (which == 1) {
        fz_case_fused(in, ctx);
    } else {
        fz_case_misc(in, ctx);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in;
    fz_in_init(&in, data, size);
    fz_set_current(data, size);
    unsigned which = fz_pick(&in, 3);
    distil_ctx *ctx = fz_context(&in);
    if (fz_byte(&in) >= 232) {
        /* A fresh context on the same backend: first-use paths (workspace, scratch). */
        distil_ctx *fresh = NULL;
        if (distil_ctx_create(&fresh, distil_ctx_backend_name(ctx), 0) != DISTIL_OK) {
            fz_fail("ctx_create(%s) failed: %s", distil_ctx_backend_name(ctx),
                    distil_ctx_last_error(NULL));
        }
        fz_run_case(&in, which, fresh);
        distil_ctx_destroy(fresh);
        return 0;
    }
    fz_run_case(&in, which, ctx);
    fz_mark_message(ctx);
    fz_check_status(ctx, "ctx_synchronize at the end of an input", distil_ctx_synchronize(ctx),
                    FZ_S(DISTIL_OK));
    return 0;
}
