/*
 * test_util.c - shared helpers of the distil CMocka suite (see test_util.h): seeded inputs,
 * poison, device copies, the docs/SPEC.md §3 tolerance table and the checks built on it, and the
 * per-backend runner that skips backends without a device.
 */
#include "test_util.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "half.h"

/* ---------------------------------------------------------------- random inputs */

tu_rng tu_rng_make(uint64_t seed) {
    tu_rng r = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
    return r;
}

/* splitmix64: tiny, seedable and good enough for test data. */
static uint64_t tu_next(tu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_rand_uniform(tu_rng *r) {
    return ((double)(tu_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double tu_rand_normal(tu_rng *r) {
    double u = tu_rand_uniform(r), v = tu_rand_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int64_t tu_rand_int(tu_rng *r, int64_t n) {
    return (int64_t)(tu_next(r) % (uint64_t)n);
}

float tu_get(const void *p, distil_dtype dtype, size_t i) {
    switch (dtype) {
    case DISTIL_BF16:
        return distil_bf16_to_f32(((const uint16_t *)p)[i]);
    case DISTIL_F16:
        return distil_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

void tu_set(void *p, distil_dtype dtype, size_t i, float v) {
    switch (dtype) {
    case DISTIL_BF16:
        ((uint16_t *)p)[i] = distil_f32_to_bf16(v);
        break;
    case DISTIL_F16:
        ((uint16_t *)p)[i] = distil_f32_to_f16(v);
        break;
    default:
        ((float *)p)[i] = v;
    }
}

float tu_round(distil_dtype dtype, float v) {
    uint32_t buf;
    tu_set(&buf, dtype, 0, v);
    return tu_get(&buf, dtype, 0);
}

/* One row of log-softmax(logits) in double; masked logits are -inf. */
static void tu_logp_row(tu_rng *r, double *z, int64_t width, double std,
                        const unsigned char *mask) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < width; v++) {
        z[v] = (mask && mask[v]) ? -INFINITY : std * tu_rand_normal(r);
        mx = z[v] > mx ? z[v] : mx;
    }
    double s = 0.0;
    for (int64_t v = 0; v < width; v++) {
        s += exp(z[v] - mx);
    }
    double lse = mx + log(s);
    for (int64_t v = 0; v < width; v++) {
        z[v] -= lse;
    }
}

void tu_fill_logp(tu_rng *r, void *dst, distil_dtype dtype, int64_t rows, int64_t width, int64_t ld,
                  double logit_std, const unsigned char *mask) {
    double *z = malloc((size_t)width * sizeof *z);
    assert_non_null(z);
    for (int64_t i = 0; i < rows; i++) {
        const unsigned char *m = mask ? mask + i * width : NULL;
        if (width == 1) {
            z[0] = (m && m[0]) ? -INFINITY : log(0.05 + 0.9 * tu_rand_uniform(r));
        } else {
            tu_logp_row(r, z, width, logit_std, m);
        }
        for (int64_t v = 0; v < width; v++) {
            tu_set(dst, dtype, (size_t)(i * ld + v), (float)z[v]);
        }
    }
    free(z);
}

void tu_fill_normal(tu_rng *r, void *dst, distil_dtype dtype, size_t n, double std) {
    for (size_t i = 0; i < n; i++) {
        double v = std * tu_rand_normal(r);
        if (fabs(v) < std / 64) {
            v = v < 0 ? -std / 64 : std / 64;
        }
        tu_set(dst, dtype, i, (float)v);
    }
}

/* ---------------------------------------------------------------- poison */

void tu_poison(void *host, size_t bytes) {
    unsigned char *b = host;
    for (size_t i = 0; i < bytes; i++) {
        b[i] = (i & 1) ? 0x7F : 0xDE; /* little-endian 0x7FDE per 16 bits */
    }
}

bool tu_is_poison(const void *p, distil_dtype dtype, size_t i) {
    if (dtype == DISTIL_F32) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u == TU_POISON32;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return h == TU_POISON16;
}

/* ---------------------------------------------------------------- device memory */

void tu_expect_status(const distil_ctx *ctx, distil_status want, distil_status got,
                      const char *expr, const char *file, int line) {
    if (got != want) {
        print_error("%s\n  returned %s (%d), expected %s; last error: \"%s\"\n", expr,
                    distil_status_string(got), (int)got, distil_status_string(want),
                    distil_ctx_last_error(ctx));
        _fail(file, line);
    }
}

void *tu_upload(distil_ctx *ctx, const void *host, size_t bytes) {
    void *dev = NULL;
    TU_OK(ctx, distil_malloc(ctx, bytes, &dev));
    if (bytes > 0) {
        assert_non_null(dev);
        TU_OK(ctx, distil_memcpy_to_device(ctx, dev, host, bytes));
    }
    return dev;
}

void *tu_alloc_poisoned(distil_ctx *ctx, size_t bytes) {
    void *host = malloc(bytes ? bytes : 1);
    assert_non_null(host);
    tu_poison(host, bytes);
    void *dev = tu_upload(ctx, host, bytes);
    free(host);
    return dev;
}

void tu_download(distil_ctx *ctx, void *host, const void *dev, size_t bytes) {
    if (bytes > 0) {
        TU_OK(ctx, distil_memcpy_to_host(ctx, host, dev, bytes));
    }
}

distil_ctx *tu_ctx(const char *backend) {
    distil_ctx *ctx = NULL;
    TU_OK(NULL, distil_ctx_create(&ctx, backend, 0));
    assert_non_null(ctx);
    return ctx;
}

/* ---------------------------------------------------------------- tolerances */

/*
 * docs/SPEC.md §3, against the float64 "ref" on the same rounded inputs. The only place these
 * numbers live.
 */
bool tu_g_rounded(const distil_ctx *ctx, distil_dtype dtype) {
    const char *b = distil_ctx_backend_name(ctx);
    return dtype != DISTIL_F32 && (strcmp(b, "cuda") == 0 || strcmp(b, "hip") == 0);
}

double tu_tolerance(distil_dtype dtype, tu_quantity q) {
    if (dtype == DISTIL_F32) {
        switch (q) {
        case TU_LOSS:
            return 1e-5; /* fp32 accumulation over V terms: ~100 ulp of headroom */
        case TU_GRAD:
            return 1e-5; /* element-wise fp32 math, a few ulp per element */
        case TU_GRAD_FUSED:
            return 1e-4; /* fp32 GEMMs of G (chunked, K up to T) and of the logits */
        }
    }
    switch (q) {
    case TU_LOSS:
        return 2e-3; /* the loss is accumulated in fp32: only the inputs are 16-bit */
    case TU_GRAD:
        return 1e-2; /* written in the input dtype: bf16 rounding alone is up to 2^-9 */
    case TU_GRAD_FUSED:
        return 1e-2; /* 16-bit G and gradient outputs around fp32 GEMMs */
    }
    return 0.0;
}

double tu_rel_err(double got, double ref) {
    if (got == ref || (isnan(got) && isnan(ref))) {
        return 0.0;
    }
    if (isnan(got) || isnan(ref)) {
        return NAN;
    }
    if (ref == 0.0 || isinf(got) || isinf(ref)) {
        return INFINITY;
    }
    return fabs(got - ref) / fabs(ref);
}

double tu_norm_rel_err(const void *got, const void *ref, distil_dtype dtype, int64_t rows,
                       int64_t width, int64_t ld) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t v = 0; v < width; v++) {
            double g = tu_get(got, dtype, (size_t)(i * ld + v));
            double r = tu_get(ref, dtype, (size_t)(i * ld + v));
            if (g == r) {
                den += isinf(r) ? 0.0 : r * r; /* equal infinities agree */
                continue;
            }
            num += (g - r) * (g - r); /* NaN or inf here makes the check fail */
            den += r * r;
        }
    }
    if (num == 0.0) {
        return 0.0;
    }
    return den == 0.0 ? INFINITY : sqrt(num / den);
}

/* ---------------------------------------------------------------- checks */

void tu_check_written(const char *what, const void *p, distil_dtype dtype, int64_t rows,
                      int64_t width, int64_t ld, bool nan_ok, const char *file, int line) {
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t v = 0; v < width; v++) {
            size_t k = (size_t)(i * ld + v);
            if (tu_is_poison(p, dtype, k)) {
                print_error("%s: element (%lld, %lld) was never written\n", what, (long long)i,
                            (long long)v);
                _fail(file, line);
            }
            if (!nan_ok && isnan(tu_get(p, dtype, k))) {
                print_error("%s: element (%lld, %lld) is NaN and no input was\n", what,
                            (long long)i, (long long)v);
                _fail(file, line);
            }
        }
    }
}

void tu_check_poisoned(const char *what, const void *p, distil_dtype dtype, size_t first,
                       size_t count, const char *file, int line) {
    for (size_t k = first; k < first + count; k++) {
        if (!tu_is_poison(p, dtype, k)) {
            print_error("%s: element %zu was written (%g) but must not be\n", what, k,
                        (double)tu_get(p, dtype, k));
            _fail(file, line);
        }
    }
}

void tu_check_padding(const char *what, const void *p, distil_dtype dtype, int64_t rows,
                      int64_t width, int64_t ld, const char *file, int line) {
    for (int64_t i = 0; i < rows; i++) {
        tu_check_poisoned(what, p, dtype, (size_t)(i * ld + width), (size_t)(ld - width), file,
                          line);
    }
}

/* DISTIL_TEST_VERBOSE=1 prints every measured error with its bound (to tighten the table). */
static void tu_report(const char *what, double err, double tol) {
    static int verbose = -1;
    if (verbose < 0) {
        const char *v = getenv("DISTIL_TEST_VERBOSE");
        verbose = v && *v && strcmp(v, "0") != 0;
    }
    if (verbose) {
        print_message("    %-24s error %.3g of %.3g (%.0f%%)\n", what, err, tol, 100.0 * err / tol);
    }
}

void tu_check_rel(const char *what, double got, double ref, double tol, const char *file,
                  int line) {
    double err = tu_rel_err(got, ref);
    tu_report(what, err, tol);
    if (!(err <= tol)) {
        print_error("%s: got %.9g, ref %.9g, relative error %.3g > %.3g\n", what, got, ref, err,
                    tol);
        _fail(file, line);
    }
}

void tu_check_tensor(const char *what, const void *got, const void *ref, distil_dtype dtype,
                     int64_t rows, int64_t width, int64_t ld, double tol, const char *file,
                     int line) {
    double err = tu_norm_rel_err(got, ref, dtype, rows, width, ld);
    tu_report(what, err, tol);
    if (!(err <= tol)) {
        /* Name the worst element to make the failure readable. */
        int64_t wi = 0, wv = 0;
        double worst = -1.0;
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t v = 0; v < width; v++) {
                size_t k = (size_t)(i * ld + v);
                double d = fabs((double)tu_get(got, dtype, k) - tu_get(ref, dtype, k));
                if (!(d <= worst)) {
                    worst = d, wi = i, wv = v;
                }
            }
        }
        size_t k = (size_t)(wi * ld + wv);
        print_error("%s: ||out - ref|| / ||ref|| = %.3g > %.3g; worst (%lld, %lld): got %.9g, "
                    "ref %.9g\n",
                    what, err, tol, (long long)wi, (long long)wv, (double)tu_get(got, dtype, k),
                    (double)tu_get(ref, dtype, k));
        _fail(file, line);
    }
}

void tu_check_bitwise(const char *what, const void *got, const void *ref, size_t bytes,
                      const char *file, int line) {
    const unsigned char *g = got, *r = ref;
    for (size_t i = 0; i < bytes; i++) {
        if (g[i] != r[i]) {
            print_error("%s: differs first at byte %zu of %zu\n", what, i, bytes);
            _fail(file, line);
        }
    }
}

void tu_check_message(const distil_ctx *ctx, const char *names, const char *file, int line) {
    const char *msg = distil_ctx_last_error(ctx);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", names);
    for (char *save = NULL, *tok = strtok_r(buf, "|", &save); tok;
         tok = strtok_r(NULL, "|", &save)) {
        if (msg && strstr(msg, tok)) {
            return;
        }
    }
    print_error("message \"%s\" does not name %s\n", msg ? msg : "(null)", names);
    _fail(file, line);
}

/* ---------------------------------------------------------------- backends under test */

bool tu_backend_has_device(const char *name) {
    int n = 0;
    return distil_backend_device_count(name, &n) == DISTIL_OK && n > 0;
}

const char *tu_group_name(const char *suite, const char *backend) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s[%s]", suite, backend);
    return buf;
}

static char tu_skip_message[160];

static void tu_skip_test(void **state) {
    (void)state;
    print_message("%s\n", tu_skip_message);
    skip();
}

/* A one-test group named after the reason, so that the skip shows in every summary. */
static int tu_run_skipped(const char *backend, const char *why) {
    static struct CMUnitTest tests[] = {{.test_func = tu_skip_test}};
    snprintf(tu_skip_message, sizeof tu_skip_message, "%s: %s, skipped", backend, why);
    tests[0].name = tu_skip_message;
    return cmocka_run_group_tests_name(tu_group_name("skipped", backend), tests, NULL, NULL);
}

static bool tu_backend_compiled(const char *name) {
    for (int i = 0; i < distil_backend_count(); i++) {
        if (strcasecmp(distil_backend_name(i), name) == 0) {
            return true;
        }
    }
    return false;
}

void tu_apply_env(void) {
    const char *filter = getenv("DISTIL_TEST_FILTER");
    if (filter && *filter) {
        cmocka_set_test_filter(filter);
    }
    if (distil_testing_hooks_set(getenv("DISTIL_TEST_HOOKS")) != DISTIL_OK) {
        fprintf(stderr, "DISTIL_TEST_HOOKS: %s\n", distil_ctx_last_error(NULL));
        exit(1);
    }
}

bool tu_hook(const char *item) {
    const char *p = getenv("DISTIL_TEST_HOOKS");
    const size_t n = strlen(item);
    while (p != NULL && *p != '\0') {
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == '\0')) {
            return true;
        }
        p = strchr(p, ',');
        p = p != NULL ? p + 1 : NULL;
    }
    return false;
}

bool tu_filter_selects(const struct CMUnitTest *tests, size_t n) {
    const char *filter = getenv("DISTIL_TEST_FILTER");
    if (filter == NULL || *filter == '\0') {
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        if (fnmatch(filter, tests[i].name, 0) == 0) {
            return true;
        }
    }
    fprintf(stderr, "DISTIL_TEST_FILTER=%s selects none of the %zu tests\n", filter, n);
    return false;
}

int tu_run_per_backend(int (*run_group)(const char *backend), bool with_ref) {
    tu_apply_env();
    const char *only = getenv("DISTIL_TEST_BACKEND");
    if (only && *only && !tu_backend_compiled(only)) {
        fprintf(stderr, "DISTIL_TEST_BACKEND=%s is not a compiled backend\n", only);
        return 1;
    }
    int failed = 0, ran = 0;
    for (int i = 0; i < distil_backend_count(); i++) {
        const char *name = distil_backend_name(i);
        bool is_ref = strcmp(name, "ref") == 0;
        if (only && *only ? strcasecmp(name, only) != 0 : (is_ref && !with_ref)) {
            continue;
        }
        print_message("[==========] backend %s\n", name);
        if (is_ref && !with_ref) {
            failed += tu_run_skipped(name, "the oracle itself");
        } else if (!tu_backend_has_device(name)) {
            failed += tu_run_skipped(name, "no device");
        } else {
            failed += run_group(name);
            ran++;
        }
    }
    return (ran == 0 && failed == 0) ? TU_EXIT_SKIPPED : failed;
}
