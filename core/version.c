/* version.c - the version of the library actually linked. */
#include "distil.h"

#define DISTIL_STR2(x) #x
#define DISTIL_STR(x)  DISTIL_STR2(x)

unsigned distil_version_number(void) {
    return DISTIL_VERSION_NUMBER;
}

const char *distil_version_string(void) {
    return DISTIL_STR(DISTIL_VERSION_MAJOR) "." DISTIL_STR(DISTIL_VERSION_MINOR) "." DISTIL_STR(
        DISTIL_VERSION_PATCH);
}

size_t distil_dtype_size(distil_dtype dtype) {
    switch (dtype) {
    case DISTIL_F32:
        return 4;
    case DISTIL_BF16:
    case DISTIL_F16:
        return 2;
    }
    return 0;
}

const char *distil_dtype_name(distil_dtype dtype) {
    switch (dtype) {
    case DISTIL_F32:
        return "f32";
    case DISTIL_BF16:
        return "bf16";
    case DISTIL_F16:
        return "f16";
    }
    return "unknown";
}
