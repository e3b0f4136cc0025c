/*
 * icd_probe.c - asks one OpenCL driver library directly, past any ICD loader, for its platforms,
 * so that "no platform" on a machine can be told apart: the library does not load (dlerror), it
 * lacks the ICD entry point, or it loads and answers an error code (e.g. -1001: no device node).
 *   usage: icd_probe /path/or/soname/of/libnvidia-opencl.so.1 ...
 * Built and run by scripts/gpu-check.sh; not part of the library.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int32_t (*icd_get_platforms_fn)(uint32_t, void **, uint32_t *);
typedef int32_t (*get_platform_info_fn)(void *, uint32_t, size_t, void *, size_t *);
typedef void *(*get_extension_fn)(const char *);

static void icd_probe_one(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("%s: dlopen failed: %s\n", lib, dlerror());
        return;
    }
    icd_get_platforms_fn get = (icd_get_platforms_fn)dlsym(h, "clIcdGetPlatformIDsKHR");
    get_platform_info_fn info = (get_platform_info_fn)dlsym(h, "clGetPlatformInfo");
    /* PoCL prefixes its ICD entry point; a plain (non-ICD) library has only clGetPlatformIDs. */
    static const char *const entries[] = {"clIcdGetPlatformIDsKHR", "POclIcdGetPlatformIDsKHR",
                                          "clGetPlatformIDs"};
    const char *entry = entries[0];
    for (int e = 1; !get && e < 3; e++) {
        entry = entries[e];
        get = (icd_get_platforms_fn)dlsym(h, entry);
    }
    /* NVIDIA's driver exports only clGetExtensionFunctionAddress; loaders ask it for the rest. */
    get_extension_fn ext = (get_extension_fn)dlsym(h, "clGetExtensionFunctionAddress");
    if (!get && ext) {
        entry = "clGetExtensionFunctionAddress(clIcdGetPlatformIDsKHR)";
        get = (icd_get_platforms_fn)ext("clIcdGetPlatformIDsKHR");
        info = (get_platform_info_fn)ext("clGetPlatformInfo");
    }
    if (!get) {
        printf("%s: loaded, but exports neither platform entry point\n", lib);
        return;
    }
    uint32_t n = 0;
    int32_t err = get(0, NULL, &n);
    printf("%s: %s -> %d, %u platform(s)\n", lib, entry, err, n);
    void *ids[8];
    if (err != 0 || n == 0 || get(n < 8 ? n : 8, ids, NULL) != 0) {
        return;
    }
    for (uint32_t i = 0; i < n && i < 8; i++) {
        char name[256] = "";
        /* An ICD object starts with its dispatch table: entry 1 is clGetPlatformInfo. */
        get_platform_info_fn pinfo = info ? info : (get_platform_info_fn)(*(void ***)ids[i])[1];
        pinfo(ids[i], 0x0902 /* CL_PLATFORM_NAME */, sizeof name, name, NULL);
        printf("  platform %u: %s\n", i, name);
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        icd_probe_one(argv[i]);
    }
    return 0;
}
