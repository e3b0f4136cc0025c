/*
 * replay_main.c - runs the fuzz target over files without libFuzzer, so that the committed
 * corpus replays as an ordinary test with any compiler, sanitizer or valgrind.
 *   hardening_fuzz_replay FILE|DIR...     every regular file given or inside a given directory
 * A broken contract is reported and the replay goes on with the next input (state leaked by the
 * failed input is not freed); the exit status is the number of failed inputs, capped at 100.
 */
#include "fuzz.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static jmp_buf replay_next;

static void replay_jump(void) {
    longjmp(replay_next, 1);
}

/* 0 when the input ran clean, 1 when it broke a contract or could not be read. */
static int replay_file(const char *path) {
    static uint8_t buf[1 << 16];
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (setjmp(replay_next) != 0) {
        fprintf(stderr, "replay: FAILED %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

static int replay_dir(const char *path, long *count) {
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: cannot open directory %s\n", path);
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        char full[4096];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            failed += replay_file(full);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv) {
    long count = 0;
    int failed = 0;
    fz_fail_hook = replay_jump;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            failed += replay_dir(argv[i], &count);
        } else {
            failed += replay_file(argv[i]);
            count++;
        }
    }
    printf("replayed %ld inputs, %d failed\n", count, failed);
    return failed > 100 ? 100 : failed;
}
