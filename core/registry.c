/*
 * registry.c - the static table of compiled-in backends (DISTIL_USE_<NAME> is set by
 * distil_add_backend() for this file only), checked and probed once under pthread_once. A
 * backend whose table is incomplete (backend_check.c) is refused: it has no device, and asking
 * for it says why.
 */
#include "registry.h"
#include "backend_check.h"
#include "error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

extern const distil_backend distil_backend_ref;
#ifdef DISTIL_USE_CUDA
extern const distil_backend distil_backend_cuda;
#endif
#ifdef DISTIL_USE_HIP
extern const distil_backend distil_backend_hip;
#endif
#ifdef DISTIL_USE_OPENCL
extern const distil_backend distil_backend_opencl;
#endif
#ifdef DISTIL_USE_CPU
extern const distil_backend distil_backend_cpu;
#endif

/* Priority order: the auto choice is the first entry with a device. */
static const distil_backend *const distil_backends[] = {
#ifdef DISTIL_USE_CUDA
    &distil_backend_cuda,
#endif
#ifdef DISTIL_USE_HIP
    &distil_backend_hip,
#endif
#ifdef DISTIL_USE_OPENCL
    &distil_backend_opencl,
#endif
#ifdef DISTIL_USE_CPU
    &distil_backend_cpu,
#endif
    &distil_backend_ref,
};
#define DISTIL_N_BACKENDS ((int)(sizeof distil_backends / sizeof distil_backends[0]))

static int distil_device_counts[DISTIL_N_BACKENDS];
static int distil_auto_priority[DISTIL_N_BACKENDS];
/* Why a backend has no device: its refusal, or its probe's message ("" when it said none). */
static char distil_no_device_why[DISTIL_N_BACKENDS][192];
static pthread_once_t distil_probe_once = PTHREAD_ONCE_INIT;

/* Backend i's check and probe. */
static void distil_registry_probe_one(int i) {
    const distil_backend *be = distil_backends[i];
    char *why = distil_no_device_why[i];
    distil_auto_priority[i] = be->priority;
    const char *lacks = distil_backend_lacks(be);
    if (lacks != NULL) {
        snprintf(why, sizeof distil_no_device_why[i], " (refused: its table lacks %s)", lacks);
        return;
    }
    int n = 0;
    if (be->probe(&n) != DISTIL_OK) {
        snprintf(why, sizeof distil_no_device_why[i], " (%s)", distil_ctx_last_error(NULL));
        return;
    }
    distil_device_counts[i] = n > 0 ? n : 0;
    if (n > 0 && be->device != NULL && be->device->auto_priority != NULL) {
        distil_auto_priority[i] = be->device->auto_priority();
    }
}

static void distil_registry_probe(void) {
    for (int i = 0; i < DISTIL_N_BACKENDS; i++) {
        distil_registry_probe_one(i);
    }
}

static int distil_registry_find(const char *name) {
    pthread_once(&distil_probe_once, distil_registry_probe);
    for (int i = 0; i < DISTIL_N_BACKENDS; i++) {
        if (strcasecmp(name, distil_backends[i]->name) == 0) {
            return i;
        }
    }
    return -1;
}

int distil_backend_count(void) {
    return DISTIL_N_BACKENDS;
}

const char *distil_backend_name(int index) {
    return index >= 0 && index < DISTIL_N_BACKENDS ? distil_backends[index]->name : NULL;
}

distil_status distil_backend_device_count(const char *name, int *n_devices) {
    if (n_devices == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "backend_device_count: n_devices is NULL");
    }
    *n_devices = 0;
    if (name == NULL) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG, "backend_device_count: name is NULL");
    }
    int i = distil_registry_find(name);
    if (i < 0) {
        return distil_error_set(NULL, DISTIL_ERR_INVALID_ARG,
                                "backend_device_count: backend '%s' is not compiled in", name);
    }
    *n_devices = distil_device_counts[i];
    if (*n_devices == 0) {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "backend_device_count: backend '%s' has no device%s", name,
                                distil_no_device_why[i]);
    }
    return DISTIL_OK;
}

/* The backend with a device of highest automatic priority (ties: table order); ref always has
 * one. */
static const distil_backend *distil_registry_best(void) {
    pthread_once(&distil_probe_once, distil_registry_probe);
    int best = -1;
    for (int i = 0; i < DISTIL_N_BACKENDS; i++) {
        if (distil_device_counts[i] > 0 &&
            (best < 0 || distil_auto_priority[i] > distil_auto_priority[best])) {
            best = i;
        }
    }
    return best >= 0 ? distil_backends[best] : &distil_backend_ref;
}

distil_status distil_registry_select(const char *name, const distil_backend **out) {
    const char *source = "backend";
    if (name == NULL || strcasecmp(name, "auto") == 0) {
        name = getenv("DISTIL_BACKEND");
        source = "DISTIL_BACKEND";
        if (name == NULL || name[0] == '\0' || strcasecmp(name, "auto") == 0) {
            *out = distil_registry_best();
            return DISTIL_OK;
        }
    }
    int i = distil_registry_find(name);
    if (i < 0) {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "ctx_create: %s '%s' is not compiled into this build", source,
                                name);
    }
    if (distil_device_counts[i] == 0) {
        return distil_error_set(NULL, DISTIL_ERR_NOT_AVAILABLE,
                                "ctx_create: %s '%s' has no device on this machine%s", source, name,
                                distil_no_device_why[i]);
    }
    *out = distil_backends[i];
    return DISTIL_OK;
}
