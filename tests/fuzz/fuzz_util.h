/* fuzz_util.h - shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): the
 * readers under test take paths, so each input is written to a file in a
 * private temporary directory first (on /dev/shm when it exists). */
#ifndef LT_FUZZ_UTIL_H
#define LT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the directory, created once per process */
static const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/lt-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
    }
    return dir;
}

/* dir/name holding data[0, n); returns the path (static storage per slot) */
static const char *fuzz_file(int slot, const char *name, const uint8_t *data, size_t n) {
    static char paths[4][256];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror("fuzz: writing the input file");
        abort();
    }
    return paths[slot];
}

static void fuzz_unlink(const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    unlink(p);
}

#endif
