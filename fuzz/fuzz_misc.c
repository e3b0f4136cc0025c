/*
 * fuzz_misc.c - the rest of the public API under fuzzed arguments: status and dtype names,
 * backend enumeration, context creation (names, devices, allocation faults), memory and copies
 * with NULLs, streams, lent workspaces and NULL descriptors / contexts.
 */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool fz_backend_allowed(const char *name) {
    if (strcasecmp(name, "ref") == 0 || strcasecmp(name, "cpu") == 0) {
        return true;
    }
    const char *env =
        getenv(strcasecmp(name, "opencl") == 0 ? "DISTIL_FUZZ_OPENCL" : "DISTIL_FUZZ_GPU");
    return env != NULL && strcmp(env, "1") == 0;
}

static void fz_misc_names(fz_in *in) {
    int s = (int)(int32_t)fz_u32(in);
    const char *str = distil_status_string((distil_status)s);
    const char *dn = distil_dtype_name((distil_dtype)s);
    if (str == NULL || str[0] == '\0' || dn == NULL || dn[0] == '\0') {
        fz_fail("status_string / dtype_name(%d) gave NULL or empty", s);
    }
    if ((s < 0 || s > 2) && distil_dtype_size((distil_dtype)s) != 0) {
        fz_fail("dtype_size(%d) is not 0", s);
    }
    int n = distil_backend_count();
    if ((s < 0 || s >= n) != (distil_backend_name(s) == NULL)) {
        fz_fail("backend_name(%d) with %d backends", s, n);
    }
    distil_jsd_desc_init(NULL);
    distil_fused_linear_jsd_desc_init(NULL);
    distil_ctx_destroy(NULL);
    distil_free(NULL, NULL);
}

/* A backend name from the input: a compiled one in odd case, or one that is not. */
static const char *fz_misc_backend(fz_in *in, char *buf, size_t n) {
    static const char *const others[] = {"", "none", "cuda ", "refx", "CPU\t", "ref\nref"};
    unsigned m = fz_pick(in, 4);
    if (m == 0) {
        snprintf(buf, n, "%s", others[fz_pick(in, sizeof others / sizeof others[0])]);
    } else if (m == 1) {
        memset(buf, 'a' + fz_pick(in, 26), n - 1); /* a long name */
        buf[n - 1] = '\0';
    } else {
        snprintf(buf, n, "%s",
                 distil_backend_name((int)fz_pick(in, (unsigned)distil_backend_count())));
        if (m == 3) {
            buf[0] = (char)(buf[0] ^ 0x20); /* case-insensitive match */
        }
    }
    return buf;
}

static fz_statuses fz_misc_create_expect(const char *name, int device, long fault) {
    int n = 0;
    distil_status s = distil_backend_device_count(name, &n);
    if (s == DISTIL_ERR_INVALID_ARG) {
        return FZ_S(DISTIL_ERR_NOT_AVAILABLE); /* not compiled in */
    }
    if (n == 0 || !(device == -1 || (device >= 0 && device < n))) {
        return FZ_S(DISTIL_ERR_NOT_AVAILABLE);
    }
    fz_statuses ok = FZ_S(DISTIL_OK);
    if (fault >= 0) {
        ok |= FZ_S(DISTIL_ERR_OUT_OF_MEMORY) | FZ_S(DISTIL_ERR_NOT_AVAILABLE);
    }
    return ok;
}

static void fz_misc_create(fz_in *in) {
    static const int devices[] = {0, -1, 1, 2, -2, 1 << 30, -2147483647 - 1, 2147483647};
    char buf[300];
    const char *name = fz_misc_backend(in, buf, sizeof buf);
    int device = devices[fz_pick(in, sizeof devices / sizeof devices[0])];
    long fault = fz_fault_countdown(in);
    if (!fz_backend_allowed(name) && fz_misc_create_expect(name, device, -1) == FZ_S(DISTIL_OK)) {
        return; /* a real device of a backend we leave alone */
    }
    fz_statuses want = fz_misc_create_expect(name, device, fault);
    distil_ctx *ctx = (distil_ctx *)&buf; /* must be overwritten with NULL on failure */
    fz_mark_message(NULL);
    distil_testing_fail_allocations(fault);
    distil_status s = distil_ctx_create(&ctx, name, device);
    distil_testing_fail_allocations(-1);
    fz_check_status(NULL, "ctx_create", s, want);
    if ((s == DISTIL_OK) != (ctx != NULL)) {
        fz_fail("ctx_create returned %d with ctx %p", (int)s, (void *)ctx);
    }
    if (ctx != NULL && (distil_ctx_last_error(ctx)[0] != '\0' ||
                        strcasecmp(distil_ctx_backend_name(ctx), name) != 0)) {
        fz_fail("fresh context: last_error \"%s\", backend \"%s\" for \"%s\"",
                distil_ctx_last_error(ctx), distil_ctx_backend_name(ctx), name);
    }
    distil_ctx_destroy(ctx);
    fz_mark_message(NULL);
    fz_check_status(NULL, "ctx_create(NULL out)", distil_ctx_create(NULL, name, device),
                    FZ_S(DISTIL_ERR_INVALID_ARG));
}

static void fz_misc_memory(fz_in *in, distil_ctx *ctx) {
    size_t bytes = fz_bool(in) ? fz_pick(in, 4) : fz_u32(in) % (1u << 20);
    long fault = fz_fault_countdown(in);
    void *p = (void *)&bytes;
    fz_mark_message(ctx);
    distil_testing_fail_allocations(fault);
    distil_status s = distil_malloc(ctx, bytes, &p);
    distil_testing_fail_allocations(-1);
    fz_statuses want =
        FZ_S(DISTIL_OK) | (fault >= 0 && bytes > 0 ? FZ_S(DISTIL_ERR_OUT_OF_MEMORY) : 0);
    fz_check_status(ctx, "malloc", s, want);
    if ((s == DISTIL_OK && bytes > 0) != (p != NULL)) {
        fz_fail("malloc(%zu) returned %d with pointer %p", bytes, (int)s, p);
    }
    if (p != NULL && distil_ctx_backend_name(ctx)[0] != 'o' && ((uintptr_t)p & 255u) != 0) {
        fz_fail("malloc(%zu) gave %p, not 256-byte aligned", bytes, p);
    }
    unsigned nulls = fz_byte(in);
    char host[16] = {0};
    size_t n = bytes < sizeof host ? bytes : sizeof host;
    void *dst = (nulls & 1) ? NULL : p;
    const void *src = (nulls & 2) ? NULL : host;
    bool bad = n > 0 && (dst == NULL || src == NULL);
    fz_mark_message(ctx);
    fz_check_status(ctx, "memcpy_to_device", distil_memcpy_to_device(ctx, dst, src, n),
                    bad ? FZ_S(DISTIL_ERR_INVALID_ARG) : FZ_S(DISTIL_OK));
    fz_mark_message(ctx);
    fz_check_status(ctx, "memcpy_to_host", distil_memcpy_to_host(ctx, (void *)src, dst, n),
                    bad ? FZ_S(DISTIL_ERR_INVALID_ARG) : FZ_S(DISTIL_OK));
    distil_free(ctx, p);
}

static void fz_misc_context_calls(fz_in *in, distil_ctx *ctx) {
    bool host = strcmp(distil_ctx_backend_name(ctx), "ref") == 0 ||
                strcmp(distil_ctx_backend_name(ctx), "cpu") == 0;
    char dummy[64];
    void *stream = fz_bool(in) ? dummy : NULL;
    if (host || stream == NULL) {
        fz_mark_message(ctx);
        fz_check_status(ctx, "ctx_set_stream", distil_ctx_set_stream(ctx, stream),
                        stream ? FZ_S(DISTIL_ERR_UNSUPPORTED) : FZ_S(DISTIL_OK));
    }
    unsigned m = fz_pick(in, 3);
    void *work = m == 1 ? dummy : NULL;
    size_t bytes = m == 2 ? 1 + fz_pick(in, 200) : 0;
    fz_mark_message(ctx);
    fz_check_status(ctx, "ctx_set_workspace", distil_ctx_set_workspace(ctx, work, bytes),
                    m == 0 ? FZ_S(DISTIL_OK) : FZ_S(DISTIL_ERR_INVALID_ARG));
    size_t out = 0;
    distil_jsd_desc jd;
    distil_jsd_desc_init(&jd);
    fz_mark_message(ctx);
    fz_check_status(ctx, "jsd_workspace_size(NULL bytes)",
                    distil_jsd_workspace_size(ctx, &jd, NULL), FZ_S(DISTIL_ERR_INVALID_ARG));
    fz_mark_message(NULL);
    fz_check_status(NULL, "jsd_workspace_size(NULL ctx)",
                    distil_jsd_workspace_size(NULL, &jd, &out), FZ_S(DISTIL_ERR_INVALID_ARG));
    float loss = 0.0f;
    fz_mark_message(NULL);
    fz_check_status(NULL, "jsd(NULL ctx)", distil_jsd(NULL, &jd, &loss, &loss, NULL, &loss, NULL),
                    FZ_S(DISTIL_ERR_INVALID_ARG));
    fz_mark_message(NULL);
    fz_check_status(NULL, "ctx_set_stream(NULL ctx)", distil_ctx_set_stream(NULL, NULL),
                    FZ_S(DISTIL_ERR_INVALID_ARG));
}

void fz_case_misc(fz_in *in, distil_ctx *ctx) {
    switch (fz_pick(in, 4)) {
    case 0:
        fz_misc_names(in);
        break;
    case 1:
        fz_misc_create(in);
        break;
    case 2:
        fz_misc_memory(in, ctx);
        break;
    default:
        fz_misc_context_calls(in, ctx);
        break;
    }
}
