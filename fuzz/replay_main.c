/*
 * replay_main.c - runs the fuzz target over files without libFuzzer, so that the committed
 * corpus replays as an ordinary test with any compiler, sanitizer or valgrind.
 *   distil_fuzz_replay FILE|DIR...     every regular file given or inside a given directory
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

static int replay_dir(const char *path, long *count) {
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "replay: cannot open directory %s\n", path);
        return 1;
    }
    int failed = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        char full[4096];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            failed |= replay_file(full);
            ++*count;
        }
    }
    closedir(d);
    return failed;
}

int main(int argc, char **argv) {
    long count = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            failed |= replay_dir(argv[i], &count);
        } else {
            failed |= replay_file(argv[i]);
            count++;
        }
    }
    printf("replayed %ld inputs\n", count);
    return failed;
}
