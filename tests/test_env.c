/*
 * test_env.c - the environment variables (docs/USAGE.md "Environment variables") on every backend:
 * a value the library cannot take, or a variable of the backend's prefix DISTIL_<NAME>_ that it
 * does not know (mistyped, or removed), fails distil_ctx_create with a status and a message naming
 * the variable, and prints nothing; good values still create the context. Each check sets its
 * variable and puts back what the environment held before.
 */
#include "test_util.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_backend;

/* var's value before a check (NULL: unset), put back by env_restore. */
static char g_saved[512];
static bool g_had;

static void env_set(const char *var, const char *value) {
    const char *old = getenv(var);
    g_had = old != NULL;
    snprintf(g_saved, sizeof g_saved, "%s", old ? old : "");
    setenv(var, value, 1);
}

static void env_restore(const char *var) {
    if (g_had) {
        setenv(var, g_saved, 1);
    } else {
        unsetenv(var);
    }
}

/* ctx_create on the backend (device index `device`, backend name `name`, NULL: g_backend) with
 * stdout and stderr caught: the status, and whether anything was printed. */
static distil_status create_quietly(const char *name, int device, bool *printed) {
    fflush(stdout);
    fflush(stderr);
    FILE *sink = tmpfile();
    assert_non_null(sink);
    const int out = dup(1), err = dup(2);
    dup2(fileno(sink), 1);
    dup2(fileno(sink), 2);
    distil_ctx *ctx = NULL;
    const distil_status s = distil_ctx_create(&ctx, name ? name : g_backend, device);
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    *printed = lseek(fileno(sink), 0, SEEK_END) > 0;
    fclose(sink);
    distil_ctx_destroy(ctx);
    return s;
}

/* name=value refused by ctx_create with status want and a message naming the variable; nothing
 * printed. */
static void expect_refused(const char *var, const char *value, distil_status want) {
    env_set(var, value);
    bool printed = false;
    const distil_status s = create_quietly(NULL, -1, &printed);
    env_restore(var);
    if (s != want) {
        fail_msg("%s=%s: ctx_create returned %s, want %s (\"%s\")", var, value,
                 distil_status_string(s), distil_status_string(want), distil_ctx_last_error(NULL));
    }
    TU_CHECK_MESSAGE(NULL, var);
    if (printed) {
        fail_msg("%s=%s: ctx_create printed", var, value);
    }
}

/* name=value taken by ctx_create. */
static void expect_taken(const char *var, const char *value) {
    env_set(var, value);
    bool printed = false;
    const distil_status s = create_quietly(NULL, -1, &printed);
    env_restore(var);
    if (s != DISTIL_OK) {
        fail_msg("%s=%s: ctx_create returned %s (\"%s\")", var, value, distil_status_string(s),
                 distil_ctx_last_error(NULL));
    }
}

/* The backend's prefix: DISTIL_<NAME>_ followed by rest. */
static void prefixed(char *buf, size_t n, const char *rest) {
    int k = snprintf(buf, n, "DISTIL_");
    for (const char *c = g_backend; *c != '\0' && (size_t)k + 1 < n; c++) {
        buf[k++] = (char)toupper((unsigned char)*c);
    }
    snprintf(buf + k, n - (size_t)k, "_%s", rest);
}

static void test_unknown_variable(void **state) {
    (void)state;
    char var[64];
    prefixed(var, sizeof var, "NOT_A_VARIABLE");
    expect_refused(var, "1", DISTIL_ERR_INVALID_ARG);
}

/* The core's own: DISTIL_GW_CHUNKS, DISTIL_DEVICE, DISTIL_BACKEND. */
static void test_core_variables(void **state) {
    (void)state;
    expect_refused("DISTIL_GW_CHUNKS", "0", DISTIL_ERR_INVALID_ARG);
    expect_refused("DISTIL_GW_CHUNKS", "two", DISTIL_ERR_INVALID_ARG);
    expect_taken("DISTIL_GW_CHUNKS", "3");
    expect_refused("DISTIL_DEVICE", "first", DISTIL_ERR_INVALID_ARG);
    expect_taken("DISTIL_DEVICE", "0");
    env_set("DISTIL_BACKEND", "no_such_backend");
    bool printed = false;
    const distil_status s = create_quietly("auto", 0, &printed);
    env_restore("DISTIL_BACKEND");
    assert_int_equal(s, DISTIL_ERR_NOT_AVAILABLE);
    TU_CHECK_MESSAGE(NULL, "DISTIL_BACKEND");
    assert_false(printed);
}

static void test_cpu_variables(void **state) {
    (void)state;
    const char *threads[] = {"0", "-2", "4097", "2x", "many"};
    for (size_t i = 0; i < TU_LEN(threads); i++) {
        expect_refused("DISTIL_NUM_THREADS", threads[i], DISTIL_ERR_INVALID_ARG);
    }
    expect_taken("DISTIL_NUM_THREADS", "2");
    expect_refused("DISTIL_CPU_ISA", "sse4", DISTIL_ERR_INVALID_ARG);
    expect_taken("DISTIL_CPU_ISA", "GENERIC");
    expect_taken("DISTIL_CPU_ISA", "avx512");
    expect_taken("DISTIL_CPU_ISA", "");
}

/* A platform filter that matches nothing: no device, and the message says why. */
static void test_opencl_variables(void **state) {
    (void)state;
    expect_refused("DISTIL_OPENCL_PLATFORM", "no platform has this name", DISTIL_ERR_NOT_AVAILABLE);
    expect_refused("DISTIL_OPENCL_BUILD_OPTIONS", "-DWG_SIZE=48", DISTIL_ERR_INVALID_ARG);
}

/* The knobs that are gone: A/B switches removed, test hooks moved to DISTIL_TEST_HOOKS. */
static void test_cuda_variables(void **state) {
    (void)state;
    const char *gone[] = {"DISTIL_CUDA_OVERLAP",      "DISTIL_CUDA_STATS", "DISTIL_CUDA_GRADW",
                          "DISTIL_CUDA_DISTILL",      "DISTIL_CUDA_GEMM",  "DISTIL_CUDA_FP8",
                          "DISTIL_CUDA_SIDE_DELAY_US"};
    for (size_t i = 0; i < TU_LEN(gone); i++) {
        expect_refused(gone[i], "off", DISTIL_ERR_INVALID_ARG);
    }
}

static int run_group(const char *backend) {
    const struct CMUnitTest common[] = {
        cmocka_unit_test(test_unknown_variable),
        cmocka_unit_test(test_core_variables),
    };
    struct CMUnitTest tests[TU_LEN(common) + 1];
    memcpy(tests, common, sizeof common);
    size_t n = TU_LEN(common);
    if (strcmp(backend, "cpu") == 0) {
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_cpu_variables);
    } else if (strcmp(backend, "opencl") == 0) {
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_opencl_variables);
    } else if (strcmp(backend, "cuda") == 0) {
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_cuda_variables);
    }
    g_backend = backend;
    return _cmocka_run_group_tests(tu_group_name("env", backend), tests, n, NULL, NULL);
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
