/*
 * registry.h - the backends compiled into this build, probed once per process, and the rules
 * that pick one for a new context.
 */
#ifndef DISTIL_CORE_REGISTRY_H
#define DISTIL_CORE_REGISTRY_H

#include "backend.h"

/* Resolve `name` (NULL/"auto" -> DISTIL_BACKEND -> best with a device) to a backend that has a
 * device. Failures are recorded with distil_error_set(NULL, ...). */
distil_status distil_registry_select(const char *name, const distil_backend **out);

#endif /* DISTIL_CORE_REGISTRY_H */
