/* common.h - error checking, logging, bf16 helpers, hashing and the
 * counter-based RNG used for layout-independent parameter init.
 *
 * Error policy: bad user input (config, data files, checkpoints) exits with
 * code 2 through lt_input_error(); internal failures (I/O, allocation, CUDA,
 * MPI) exit with code 1 through lt_fatal(). Both print the rank and the place. */
#ifndef LT_COMMON_H
#define LT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_VERSION "0.1.0"

#define LT_EXIT_INTERNAL 1
#define LT_EXIT_INPUT 2
#define LT_EXIT_DIVERGED 3 /* more non-finite steps in a row than train.max_skipped_steps */

/* Rank shown in every message (set once MPI is up; -1 = single process). */
void lt_set_log_rank(int rank);
int lt_log_rank(void);

/* Print "lattice: [rank r] file:line: message" and exit(1). */
void lt_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define lt_fatal(...) lt_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Print "lattice: error: message" and exit(2): for bad user input. While an
 * error barrier is set (the collective set-up phase, where every rank checks
 * the same config), only rank 0 prints and all ranks pass the barrier before
 * exiting; otherwise every failing rank prints its own message. */
void lt_input_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void lt_set_error_barrier(void (*barrier)(void));

/* Informational line to stdout (rank 0 only prints). */
void lt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Send lt_log output to stderr instead (when stdout carries data). */
void lt_log_to_stderr(int on);
/* From now on no write to standard output or error waits: both are made
 * non-blocking, and a line their reader does not take at once is dropped. For
 * the stop path after a signal, whose save must not wait on a launcher that
 * has stopped reading (Open MPI's mpirun after a SIGTERM). Async-signal-safe.
 * lt_log_restore_flags (async-signal-safe) puts the descriptors back as they
 * were; lt_log_restore_at_exit registers, once, an exit handler that drops
 * what stdio still holds and then restores them. */
void lt_log_never_block(void);
void lt_log_restore_flags(void);
void lt_log_restore_at_exit(void);

#define LT_CHECK(cond)                                                         \
    do {                                                                       \
        if (!(cond)) lt_fatal("check failed: %s", #cond);                      \
    } while (0)

/* Format a message into err[errlen] (when err is not NULL) and return -1:
 * the error convention of functions that report instead of exiting. */
int lt_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Checked allocation and file helpers (exit with a message on failure). */
void *lt_malloc_at(size_t n, const char *file, int line);
void *lt_calloc_at(size_t n, const char *file, int line);
#define lt_malloc(n) lt_malloc_at((n), __FILE__, __LINE__)
#define lt_calloc(n) lt_calloc_at((n), __FILE__, __LINE__)
FILE *lt_fopen_at(const char *path, const char *mode, const char *file, int line);
#define lt_fopen(p, m) lt_fopen_at((p), (m), __FILE__, __LINE__)

/* Wall clock in seconds (monotonic). */
double lt_now(void);

/* The shortest %g form of v that strtod reads back as exactly v. */
void lt_format_double(double v, char *buf, size_t n);

/* ---- bf16 ---------------------------------------------------------------- */
/* Round-to-nearest-even conversion; NaN stays NaN. */
static inline uint16_t lt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float lt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* The float nearest to f that bf16 can represent (RNE). */
static inline float lt_bf16_round(float f) { return lt_bf16_to_f32(lt_f32_to_bf16(f)); }

/* ---- hashing / RNG ------------------------------------------------------- */
uint64_t lt_hash_bytes(const void *data, size_t n, uint64_t seed); /* FNV-1a then mixed */
static inline uint64_t lt_mix64(uint64_t x) { /* splitmix64 finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* Standard normal draw that depends only on (seed, stream, index):
 * used so parameter init is a function of (seed, parameter name, global index). */
float lt_normal_at(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0,1) from (seed, stream, index). */
double lt_uniform_at(uint64_t seed, uint64_t stream, uint64_t index);

/* CRC-32 (IEEE) for checksums of data blocks and checkpoint records. */
uint32_t lt_crc32(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
