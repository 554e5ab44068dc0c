/* test_metrics.c - the metrics file (src/observability/metrics.c): every line is valid JSON
 * even when a value is not finite (written as null), and a write error is
 * kept and reported instead of leaving a silently truncated file. */
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "test.h"

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
                               .comm_dp_busy = 1, .comm_pp_busy = 0};
    LtMetricsFile m;
    unlink(g_path);
    lt_metrics_open(&m, g_path);
    lt_metrics_train(&m, 3, NAN, 1e-4, INFINITY, 100.0, -INFINITY, 0.5, 12.0, NULL);
    lt_metrics_eval(&m, 3, NAN, 8);
    lt_metrics_train(&m, 4, 2.5, 1e-4, 0.75, 100.0, 1.0, 0.5, 12.0, &times);
    lt_metrics_close(&m);
    char err[256];
    CHECK(lt_metrics_status(&m, err, sizeof err) == 0, "status: %s", err);
    const char *s = slurp(g_path);
    REQUIRE(s, "read back");
    CHECK(!strstr(s, "nan") && !strstr(s, "inf"), "non-finite text in: %s", s);
    CHECK(strstr(s, "{\"step\": 3, \"loss\": null, \"lr\": 0.0001, \"grad_norm\": null, "
                    "\"tokens_per_sec\": 100, \"tflops_per_device\": null, \"mfu\": 0.5, "
                    "\"step_ms\": 12}\n"),
          "step 3 line: %s", s);
    CHECK(strstr(s, "{\"eval\": true, \"step\": 3, \"val_loss\": null, \"val_log_ppl\": null, "
                    "\"val_samples\": 8}\n"),
          "eval line: %s", s);
    CHECK(strstr(s, "{\"step\": 4, \"loss\": 2.5, "), "finite line: %s", s);
    CHECK(strstr(s, ", \"step_ms\": 12, \"time_ms\": {\"forward\": 1.5, \"backward\": 3, "
                    "\"grads\": 0.25, \"optimizer\": 0.5, \"data\": 0, \"bubble\": 0.75, "
                    "\"other\": null, \"comm_tp\": 0.125, \"comm_dp\": 0.25, \"comm_pp\": 0, "
                    "\"comm_tp_busy\": 0.125, \"comm_dp_busy\": 1, \"comm_pp_busy\": 0}}\n"),
          "time breakdown: %s", s);
}

static void test_write_error_kept(void) {
    if (access("/dev/full", W_OK) != 0) {
        printf("  (no /dev/full: skipped)\n");
        return;
    }
    LtMetricsFile m;
    lt_metrics_open(&m, "/dev/full");
    lt_metrics_train(&m, 1, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, NULL);
    lt_metrics_train(&m, 2, 2.0, 1e-4, 1.0, 1.0, 1.0, 0.1, 1.0, NULL);
    lt_metrics_close(&m);
    char err[256] = "";
    CHECK(lt_metrics_status(&m, err, sizeof err) == -1, "a failed write must be reported");
    CHECK(strstr(err, "logging.metrics_file") && strstr(err, "/dev/full") &&
              strstr(err, "No space left"),
          "message: %s", err);
}

int main(void) {
    snprintf(g_path, sizeof g_path, "/tmp/lt_test_metrics_%d.jsonl", (int)getpid());
    RUN(test_nonfinite_is_null);
    RUN(test_write_error_kept);
    unlink(g_path);
    return test_summary();
}
