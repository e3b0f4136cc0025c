/*
 * fuzz_check.c - the oracles shared by every case: status sets, fresh messages, and buffers in
 * the context's memory whose untouched contents can be verified after a call.
 */
#include "fuzz.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

/* Planted before a call: a failing call must replace it with its own message. */
static const char fz_marker_ctx[] = "malloc: ptr is NULL";
static const char fz_marker_thread[] = "ctx_synchronize: ctx is NULL";

bool fz_verbose(void) {
    const char *v = getenv("DISTIL_FUZZ_VERBOSE");
    return v != NULL && v[0] == '1';
}

void (*fz_fail_hook)(void);

static const uint8_t *fz_current;
static size_t fz_current_size;

void fz_set_current(const uint8_t *data, size_t size) {
    fz_current = data;
    fz_current_size = size;
}

/* Keep the failing input: a vendor library may take over SIGABRT (PoCL's LLVM does), and then
 * libFuzzer cannot write its crash file. */
static void fz_save_current(void) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < fz_current_size; i++) {
        h = (h ^ fz_current[i]) * 1099511628211ull;
    }
    char name[64];
    snprintf(name, sizeof name, "fuzz-failure-%016llx", (unsigned long long)h);
    FILE *f = fopen(name, "wb");
    if (f != NULL) {
        fwrite(fz_current, 1, fz_current_size, f);
        fclose(f);
        fprintf(stderr, "distil fuzz: input saved as %s\n", name);
    }
}

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "distil fuzz: contract broken: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fz_save_current();
    if (fz_fail_hook != NULL) {
        fz_fail_hook();
    }
    abort();
}

void fz_mark_message(distil_ctx *ctx) {
    distil_status s = ctx ? distil_malloc(ctx, 1, NULL) : distil_ctx_synchronize(NULL);
    const char *want = ctx ? fz_marker_ctx : fz_marker_thread;
    if (s != DISTIL_ERR_INVALID_ARG || strcmp(distil_ctx_last_error(ctx), want) != 0) {
        fz_fail("marker call gave status %d, message \"%s\"", (int)s, distil_ctx_last_error(ctx));
    }
}

void fz_check_status(distil_ctx *ctx, const char *what, distil_status got, fz_statuses allowed) {
    const char *msg = distil_ctx_last_error(ctx);
    if ((unsigned)got > 31u || !(FZ_S(got) & allowed)) {
        fz_fail("%s returned %s (%d), allowed set 0x%x; message \"%s\"", what,
                distil_status_string(got), (int)got, (unsigned)allowed, msg);
    }
    if (got == DISTIL_OK) {
        return;
    }
    const char *marker = ctx ? fz_marker_ctx : fz_marker_thread;
    if (msg == NULL || msg[0] == '\0' || strcmp(msg, marker) == 0) {
        fz_fail("%s returned %s without a message of its own (message \"%s\")", what,
                distil_status_string(got), msg ? msg : "(null)");
    }
    if (strlen(msg) >= 1024) {
        fz_fail("%s: message is not terminated within 1024 bytes", what);
    }
}

void fz_check_too_large(distil_ctx *ctx, const char *what) {
    const char *msg = distil_ctx_last_error(ctx);
    if (strstr(msg, "too large") == NULL) {
        fz_fail("%s refused a valid descriptor: \"%s\"", what, msg);
    }
}

/* ---------------------------------------------------------------- buffers */

bool fz_buf_alloc(distil_ctx *ctx, fz_buf *b, size_t bytes) {
    b->bytes = bytes;
    b->dev = NULL;
    b->host = calloc(1, bytes ? bytes : 1);
    if (b->host == NULL) {
        return false;
    }
    if (bytes == 0) {
        return true;
    }
    if (distil_malloc(ctx, bytes, &b->dev) != DISTIL_OK || b->dev == NULL) {
        free(b->host);
        b->host = NULL;
        return false;
    }
    return true;
}

void fz_buf_upload(distil_ctx *ctx, fz_buf *b) {
    if (b->bytes > 0) {
        distil_status s = distil_memcpy_to_device(ctx, b->dev, b->host, b->bytes);
        fz_check_status(ctx, "memcpy_to_device", s, FZ_S(DISTIL_OK));
    }
}

void fz_buf_download(distil_ctx *ctx, fz_buf *b, void *host) {
    if (b->bytes > 0) {
        distil_status s = distil_memcpy_to_host(ctx, host, b->dev, b->bytes);
        fz_check_status(ctx, "memcpy_to_host", s, FZ_S(DISTIL_OK));
    }
}

void fz_buf_free(distil_ctx *ctx, fz_buf *b) {
    distil_free(ctx, b->dev);
    free(b->host);
    b->dev = b->host = NULL;
}

void fz_buf_poison(fz_buf *b) {
    unsigned char *p = b->host;
    for (size_t i = 0; i < b->bytes; i++) {
        p[i] = (i & 1) ? 0x7F : 0xDE;
    }
}

bool fz_buf_unchanged(distil_ctx *ctx, const fz_buf *b) {
    if (b->bytes == 0) {
        return true;
    }
    void *now = malloc(b->bytes);
    if (now == NULL) {
        return true; /* cannot tell; the harness itself ran out of memory */
    }
    fz_buf_download(ctx, (fz_buf *)b, now);
    bool same = memcmp(now, b->host, b->bytes) == 0;
    free(now);
    return same;
}

bool fz_is_poison(const void *host, distil_dtype dtype, size_t i) {
    if (dtype == DISTIL_F32) {
        uint32_t u;
        memcpy(&u, (const char *)host + 4 * i, 4);
        return u == 0x7FDE7FDEu;
    }
    uint16_t h;
    memcpy(&h, (const char *)host + 2 * i, 2);
    return h == 0x7FDEu;
}

/* ---------------------------------------------------------------- data */

void fz_set_value(void *host, distil_dtype dtype, size_t i, float v) {
    if (dtype == DISTIL_F32) {
        memcpy((char *)host + 4 * i, &v, 4);
        return;
    }
    uint16_t h = dtype == DISTIL_BF16 ? distil_f32_to_bf16(v) : distil_f32_to_f16(v);
    memcpy((char *)host + 2 * i, &h, 2);
}

float fz_get_value(const void *host, distil_dtype dtype, size_t i) {
    if (dtype == DISTIL_F32) {
        float f;
        memcpy(&f, (const char *)host + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)host + 2 * i, 2);
    return dtype == DISTIL_BF16 ? distil_bf16_to_f32(h) : distil_f16_to_f32(h);
}

bool fz_fill_data(fz_in *in, void *host, distil_dtype dtype, size_t n, bool logp) {
    double scale = logp ? 2.0 : 0.5 + fz_pick(in, 4);
    for (size_t i = 0; i < n; i++) {
        double v = fz_rand_normal(in) * scale;
        fz_set_value(host, dtype, i, (float)(logp ? -fabs(v) - 0.1 : v));
    }
    unsigned pokes = n ? fz_pick(in, 4) : 0;
    for (unsigned k = 0; k < pokes; k++) {
        size_t i = fz_u32(in) % n;
        fz_set_value(host, dtype, i, fz_special_value(in));
    }
    return pokes > 0;
}
