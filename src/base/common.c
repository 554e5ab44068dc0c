/* common.c - see common.h. */
#include "common.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <time.h>

static int g_log_rank = -1;
static int g_log_stderr = 0;

void lt_log_to_stderr(int on) { g_log_stderr = on; }

void lt_set_log_rank(int rank) { g_log_rank = rank; }
int lt_log_rank(void) { return g_log_rank; }

void lt_fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    if (g_log_rank >= 0)
        fprintf(stderr, "lattice: [rank %d] %s:%d: ", g_log_rank, file, line);
    else
        fprintf(stderr, "lattice: %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(LT_EXIT_INTERNAL);
}

static void (*g_error_barrier)(void);

void lt_set_error_barrier(void (*barrier)(void)) { g_error_barrier = barrier; }

void lt_input_error(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    /* collective phase: every rank meets the same error; rank 0 speaks for all
     * and the barrier keeps the others from exiting (and the launcher from
     * killing rank 0) before it has */
    int silent = g_error_barrier && g_log_rank > 0;
    if (!silent) {
        if (g_log_rank > 0)
            fprintf(stderr, "lattice: error: [rank %d] ", g_log_rank);
        else
            fprintf(stderr, "lattice: error: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        fflush(stderr);
    }
    if (g_error_barrier) g_error_barrier();
    exit(LT_EXIT_INPUT);
}

/* The flags of standard output and error before lt_log_never_block (-1: not
 * an open descriptor), put back by lt_log_restore_flags. */
static volatile sig_atomic_t g_never_block = 0;
static int g_out_flags[3] = {-1, -1, -1};

void lt_log_never_block(void) {
    if (g_never_block) return;
    g_never_block = 1;
    /* both read before either is set: 2>&1 shares one file description */
    for (int fd = 1; fd <= 2; fd++) g_out_flags[fd] = fcntl(fd, F_GETFL);
    for (int fd = 1; fd <= 2; fd++)
        if (g_out_flags[fd] >= 0 && !(g_out_flags[fd] & O_NONBLOCK))
            fcntl(fd, F_SETFL, g_out_flags[fd] | O_NONBLOCK);
}

void lt_log_restore_flags(void) {
    if (!g_never_block) return;
    for (int fd = 1; fd <= 2; fd++)
        if (g_out_flags[fd] >= 0) fcntl(fd, F_SETFL, g_out_flags[fd]);
}

/* At exit: what stdio could not write at once is dropped (the exit's flush
 * would otherwise wait for it), then the descriptors are as they were (a
 * terminal shared with the shell must not stay non-blocking). */
static void restore_at_exit(void) {
    if (!g_never_block) return;
    fflush(stdout);
    __fpurge(stdout);
    fflush(stderr);
    __fpurge(stderr);
    lt_log_restore_flags();
}

void lt_log_restore_at_exit(void) {
    static int done = 0;
    if (!done) atexit(restore_at_exit);
    done = 1;
}

void lt_log(const char *fmt, ...) {
    va_list ap;
    if (g_log_rank > 0) return;
    FILE *out = g_log_stderr ? stderr : stdout;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fflush(out);
}

int lt_errorf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *lt_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) lt_fatal_at(file, line, "out of host memory allocating %zu bytes", n);
    return p;
}

void *lt_calloc_at(size_t n, const char *file, int line) {
    void *p = calloc(1, n ? n : 1);
    if (!p) lt_fatal_at(file, line, "out of host memory allocating %zu bytes", n);
    return p;
}

FILE *lt_fopen_at(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f) lt_fatal_at(file, line, "cannot open '%s' (mode %s)", path, mode);
    return f;
}

double lt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void lt_format_double(double v, char *buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
    snprintf(buf, n, "%.17g", v);
}

uint64_t lt_hash_bytes(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ lt_mix64(seed);
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return lt_mix64(h);
}

double lt_uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t x = lt_mix64(lt_mix64(seed ^ 0x6a09e667f3bcc909ull) ^ stream);
    x = lt_mix64(x ^ index);
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

float lt_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    /* Box-Muller on two uniforms derived from (seed, stream, 2*index{,+1}). */
    double u1 = lt_uniform_at(seed, stream, 2 * index);
    double u2 = lt_uniform_at(seed, stream, 2 * index + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static uint32_t crc_table[256];

/* Filled before main() so worker threads never race on it. */
__attribute__((constructor)) static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t lt_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
