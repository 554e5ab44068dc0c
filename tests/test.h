/* test.h - minimal test harness.
 *
 * A test binary defines test functions and calls RUN(fn) for each from main,
 * then returns test_summary(). Each case prints "PASS name" or "FAIL name: why"
 * lines; tests/run.sh counts them across binaries. CHECK records a failure and
 * continues; REQUIRE also returns from the test function. */
#ifndef LT_TEST_H
#define LT_TEST_H

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int test_cur_failed;
static int test_n_pass, test_n_fail;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            printf("  check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            printf(__VA_ARGS__);                                                  \
            printf("\n");                                                         \
            test_cur_failed = 1;                                                  \
        }                                                                         \
    } while (0)

#define REQUIRE(cond, ...)                                                        \
    do {                                                                          \
        CHECK(cond, __VA_ARGS__);                                                 \
        if (!(cond)) return;                                                      \
    } while (0)

/* Relative error |a-b| / max(|b|, floor). */
static inline double test_relerr(double a, double b, double floor_) {
    double d = fabs(b) > floor_ ? fabs(b) : floor_;
    return fabs(a - b) / d;
}

#define RUN(fn)                                                                   \
    do {                                                                          \
        test_cur_failed = 0;                                                      \
        fflush(stdout);                                                           \
        fn();                                                                     \
        if (test_cur_failed) {                                                    \
            printf("FAIL %s\n", #fn);                                             \
            test_n_fail++;                                                        \
        } else {                                                                  \
            printf("PASS %s\n", #fn);                                             \
            test_n_pass++;                                                        \
        }                                                                         \
        fflush(stdout);                                                           \
    } while (0)

/* A fresh directory /tmp/<tag>_XXXXXX (malloc'd path, NULL on failure) and
 * its removal with everything in it. */
static inline char *test_tmpdir(const char *tag) {
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/%s_XXXXXX", tag);
    return mkdtemp(tmpl) ? strdup(tmpl) : NULL;
}
static inline int test_rm_cb(const char *p, const struct stat *st, int fl, struct FTW *ftw) {
    (void)st, (void)fl, (void)ftw;
    return remove(p);
}
static inline void test_rm_rf(const char *p) { nftw(p, test_rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_n_pass, test_n_fail);
    return test_n_fail ? 1 : 0;
}

#endif
