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

/* Split a two-file input (see fuzz_write_pair): *first_len bytes at *data
 * are the first file, the rest of *size the second. 0, or -1 when too short. */
static int fuzz_split_pair(const uint8_t **data, size_t *size, size_t *first_len) {
    if (*size < 2) return -1;
    size_t L = (size_t)(*data)[0] | (size_t)(*data)[1] << 8;
    *data += 2, *size -= 2;
    *first_len = L > *size ? *size : L;
    return 0;
}

/* Write the files dir/first and dir/second as one two-file input: two bytes
 * little-endian L (the first file's length, < 64 KiB), the first file, the
 * second (at most 1 MiB). Exits 1 on any failure (seed writing only). */
static void fuzz_write_pair(const char *out, const char *dir, const char *first, const char *second) {
    FILE *o = fopen(out, "wb");
    const char *names[2] = {first, second};
    for (int k = 0; k < 2 && o; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        FILE *f = fopen(path, "rb");
        if (!f) exit(1);
        static unsigned char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (k == 0 && n >= 1 << 16) exit(1);
        if (k == 0) fputc((int)(n & 255), o), fputc((int)(n >> 8), o);
        fwrite(buf, 1, n, o);
    }
    if (!o || fclose(o) != 0) exit(1);
}

#endif
