/* test_metrics.c - the metrics file (src/observability/metrics.c): every line is valid JSON
 * even when a value is not finite (written as null), and a write error is
 * kept and reported instead of leaving a silently truncated file, and a
 * write cut short (a full disk) is cut back to the last complete line. And the
 * progress at the end of a step line (src/training/step_time.c): elapsed
 * time, and the ETA from the median step time so far. */
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"
#include "test.h"
#include "training/step_time.h"

static char g_path[64];

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_nonfinite_is_null(void) {
    const LtStepTimes times = {.forward = 1.5, .backward = 3, .grads = 0.25, .optimizer = 0.5,
                               .data = 0, .bubble = 0.75, .other = NAN, .comm_tp = 0.125,
                               .comm_dp = 0.25, .comm_pp = 0, .comm_tp_busy = 0.125,
                               .comm_dp_busy = 1, .comm_pp_busy = 0, .attention = 0.5,
                               .loss_head = 0.375, .moe = 2, .moe_experts = 1.25};
    LtMetricsFile m;
    unlink(g_path);
    lt_metrics_open(&m, g_path);
    lt_metrics_train(&m, 3, 8, 24, NAN, 1e-4, INFINITY, 100.0, -INFINITY, 0.5, 12.0, NULL);
    lt_metrics_eval(&m, 3, NAN, 8);
    lt_metrics_train(&m, 4, 8, 32, 2.5, 1e-4, 0.75, 100.0, 1.0, 0.5, 12.0, &times);
    lt_metrics_close(&m);
    char err[256];
    CHECK(lt_metrics_status(&m, err, sizeof err) == 0, "status: %s", err);
    const char *s = slurp(g_path);
    REQUIRE(s, "read back");
    CHECK(!strstr(s, "nan") && !strstr(s, "inf"), "non-finite text in: %s", s);
    CHECK(strstr(s, "{\"step\": 3, \"loss\": null, \"lr\": 0.0001, \"grad_norm\": null, "
                    "\"global_batch\": 8, \"samples\": 24, \"tokens_per_sec\": 100, \"tflops_per_device\": null, \"mfu\": 0.5, "
                    "\"step_ms\": 12}\n"),
          "step 3 line: %s", s);
    CHECK(strstr(s, "{\"eval\": true, \"step\": 3, \"val_loss\": null, \"val_log_ppl\": null, "
                    "\"val_samples\": 8}\n"),
          "eval line: %s", s);
    CHECK(strstr(s, "{\"step\": 4, \"loss\": 2.5, "), "finite line: %s", s);
    CHECK(strstr(s, ", \"step_ms\": 12, \"time_ms\": {\"forward\": 1.5, \"backward\": 3, "
                    "\"grads\": 0.25, \"optimizer\": 0.5, \"data\": 0, \"bubble\": 0.75, "
                    "\"other\": null, \"comm_tp\": 0.125, \"comm_dp\": 0.25, \"comm_pp\": 0, "
                    "\"comm_tp_busy\": 0.125, \"comm_dp_busy\": 1, \"comm_pp_busy\": 0, \"comm_ep\": 0, \"comm_ep_busy\": 0, "
                    "\"attention\": 0.5, \"loss_head\": 0.375, \"moe\": 2, \"moe_experts\": 1.25}}\n"),
          "time breakdown: %s", s);
}

static void test_write_error_kept(void) {
    if (access("/dev/full", W_OK) != 0) {
        printf("  (no /dev/full: skipped)\n");
        return;
    }
    LtMetricsFile m;
    lt_metrics_open(&m, "/dev/full");
    lt_metrics_train(&m, 1, 8, 8, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, NULL);
    lt_metrics_train(&m, 2, 8, 16, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, NULL);
    lt_metrics_close(&m);
    char err[256] = "";
    CHECK(lt_metrics_status(&m, err, sizeof err) == -1, "a failed write must be reported");
    CHECK(strstr(err, "logging.metrics_file") && strstr(err, "/dev/full") &&
              strstr(err, "No space left"),
          "message: %s", err);
}

/* A file size limit (SIGXFSZ ignored, as lattice does) stands in for a disk
 * that fills up in the middle of the third line. */
static void test_short_write_cut_back(void) {
    const LtStepTimes times = {.forward = 1.5};
    char line[1024];
    LtMetricsFile m;
    unlink(g_path);
    lt_metrics_open(&m, g_path);
    lt_metrics_train(&m, 1, 8, 10, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, &times);
    fseek(m.f, 0, SEEK_END);
    const long one = ftell(m.f);
    REQUIRE(one > 100, "first line: %ld bytes", one);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)(2 * one + one / 2);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    for (long step = 2; step <= 4; step++)
        lt_metrics_train(&m, step, 8, (uint64_t)step * 8, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, &times);
    lt_metrics_close(&m);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    char err[256] = "";
    CHECK(lt_metrics_status(&m, err, sizeof err) == -1 && strstr(err, "File too large"),
          "status: %s", err);
    FILE *f = fopen(g_path, "rb");
    REQUIRE(f, "read back");
    int lines = 0;
    long bytes = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        bytes += (long)strlen(line);
        CHECK(line[strlen(line) - 1] == '\n', "line %d is partial: %s", lines, line);
    }
    fclose(f);
    CHECK(lines == 2 && bytes == 2 * one, "%d lines, %ld bytes (one line: %ld)", lines, bytes, one);
}

static void test_step_progress(void) {
    const double dt[5] = {3.0, 1.0, 2.0, 1.0, 10.0}; /* step times, seconds */
    double sorted[5];
    char buf[64];
    lt_sorted_insert(sorted, 0, dt[0]);
    lt_step_progress(0.44, sorted, 1, 100, buf, sizeof buf);
    CHECK(!strcmp(buf, "elapsed 0.4s"), "one step: no ETA: %s", buf);
    lt_sorted_insert(sorted, 1, dt[1]);
    lt_step_progress(83.2, sorted, 2, 250, buf, sizeof buf); /* median of 1, 3: 2 s */
    CHECK(!strcmp(buf, "elapsed 1m23s eta 8m20s"), "two steps: %s", buf);
    for (int n = 2; n < 5; n++) lt_sorted_insert(sorted, n, dt[n]);
    for (int i = 1; i < 5; i++) CHECK(sorted[i - 1] <= sorted[i], "not ascending at %d", i);
    lt_step_progress(42, sorted, 5, 3, buf, sizeof buf); /* median of 1, 1, 2, 3, 10: 2 s */
    CHECK(!strcmp(buf, "elapsed 42s eta 6.0s"), "five steps: %s", buf);
    lt_step_progress(7500, sorted, 5, 9000, buf, sizeof buf);
    CHECK(!strcmp(buf, "elapsed 2h05m eta 5h00m"), "hours: %s", buf);
    lt_step_progress(1, sorted, 5, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "elapsed 1.0s eta 0.0s"), "the last step: %s", buf);
}

int main(void) {
    snprintf(g_path, sizeof g_path, "/tmp/lt_test_metrics_%d.jsonl", (int)getpid());
    RUN(test_nonfinite_is_null);
    RUN(test_write_error_kept);
    RUN(test_short_write_cut_back);
    RUN(test_step_progress);
    unlink(g_path);
    return test_summary();
}
