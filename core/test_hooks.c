/*
 * test_hooks.c - distil_testing_hooks_set (core/testing/distil_testing.h) and the hooks it sets
 * (backend_api/test_hooks.h): one process-wide copy under a mutex, read by each context at
 * create.
 */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include "distil_testing.h"
#include "error.h"
#include "test_hooks.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fn = "testing_hooks_set";

static pthread_mutex_t distil_hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static distil_test_hooks distil_hooks;

distil_test_hooks distil_test_hooks_now(void) {
    pthread_mutex_lock(&distil_hooks_lock);
    const distil_test_hooks h = distil_hooks;
    pthread_mutex_unlock(&distil_hooks_lock);
    return h;
}

/* value one of the words of a list ("lt", "emulate"), as its index + 1; 0 when none. */
static int distil_hook_word(const char *value, const char *const *words, int n) {
    for (int i = 0; i < n; i++) {
        if (strcmp(value, words[i]) == 0) {
            return i + 1;
        }
    }
    return 0;
}

/* side_delay_us's microseconds, 0 < N < 10^6; 0 when value is not such a number. */
static long long distil_hook_us(const char *value) {
    char *end = NULL;
    const long long us = strtoll(value, &end, 10);
    return end != value && *end == '\0' && us > 0 && us < 1000000 ? us : 0;
}

/* One item name=value into h. */
static distil_status distil_hook_item(const char *name, const char *value, distil_test_hooks *h) {
    static const char *const portable[] = {"portable"};
    static const char *const rows[] = {"stream", "resident"};
    static const char *const fp8[] = {"lt", "emulate"};
    static const char *const require[] = {"require"};
    const char *takes = NULL;
    if (strcmp(name, "gemm") == 0) {
        h->gemm_portable = distil_hook_word(value, portable, 1) == 1;
        takes = h->gemm_portable ? NULL : "portable";
    } else if (strcmp(name, "fused_rows") == 0) {
        h->rows = (distil_hook_rows)distil_hook_word(value, rows, 2);
        takes = h->rows != DISTIL_HOOK_ROWS_AUTO ? NULL : "stream or resident";
    } else if (strcmp(name, "fp8") == 0) {
        h->fp8 = (distil_hook_fp8)distil_hook_word(value, fp8, 2);
        takes = h->fp8 != DISTIL_HOOK_FP8_AUTO ? NULL : "lt or emulate";
    } else if (strcmp(name, "stats") == 0 || strcmp(name, "gradw") == 0) {
        bool *flag = name[0] == 's' ? &h->stats_require : &h->gradw_require;
        *flag = distil_hook_word(value, require, 1) == 1;
        takes = *flag ? NULL : "require";
    } else if (strcmp(name, "side_delay_us") == 0) {
        h->side_delay_us = distil_hook_us(value);
        takes = h->side_delay_us > 0 ? NULL : "a count of microseconds in [1, 999999]";
    } else {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "%s: '%s' is not a hook (gemm, fused_rows, fp8, stats, gradw, "
                                "side_delay_us)",
                                fn, name);
    }
    if (takes != NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: %s=%s: %s takes %s", fn, name,
                                value, name, takes);
    }
    return DISTIL_OK;
}

/* Every item of spec (comma-separated name=value) into h. */
static distil_status distil_hooks_parse(const char *spec, distil_test_hooks *h) {
    char buf[512];
    if (strlen(spec) >= sizeof buf) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: spec longer than %zu characters",
                                fn, sizeof buf - 1);
    }
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq == NULL) {
            return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "%s: '%s' is not name=value", fn,
                                    item);
        }
        *eq = '\0';
        DISTIL_TRY(distil_hook_item(item, eq + 1, h));
    }
    return DISTIL_OK;
}

distil_status distil_testing_hooks_set(const char *spec) {
    distil_test_hooks h = {0};
    if (spec != NULL) {
        DISTIL_TRY(distil_hooks_parse(spec, &h));
    }
    pthread_mutex_lock(&distil_hooks_lock);
    distil_hooks = h;
    pthread_mutex_unlock(&distil_hooks_lock);
    return DISTIL_OK;
}
