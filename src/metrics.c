/* metrics.c - see metrics.h. */
#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    const char *pattern; /* substring of the device name */
    double bf16, fp32;   /* dense TFLOP/s (fp32 = non-tensor-core FP32) */
} PeakEntry;

/* Vendor datasheet dense peaks (no sparsity). Longer patterns first. */
static const PeakEntry PEAKS[] = {
    {"H100 PCIe", 756.0, 51.2},
    {"H100 NVL", 835.0, 60.0},
    {"H100", 989.4, 66.9},
    {"H200", 989.4, 66.9},
    {"H800", 989.4, 66.9},
    {"GH200", 989.4, 66.9},
    {"A100", 312.0, 19.5},
    {"A800", 312.0, 19.5},
    {"L40S", 362.05, 91.6},
    {"A10G", 70.0, 31.2},
    {"V100", 125.0, 15.7},
};

double lt_peak_table(const char *name, LtPrecision prec) {
    if (!name) return 0.0;
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(name, PEAKS[i].pattern)) return prec == LT_PREC_BF16 ? PEAKS[i].bf16 : PEAKS[i].fp32;
    return 0.0;
}

/* Time a square GEMM through the backend's linear op: the practical peak of
 * this device for the op mix that dominates training. */
static double measure_gemm_tflops(LtBackend *be) {
    const int n = 512;
    size_t bytes = lt_act_bytes(be, (size_t)n * n);
    void *a = be->ops->alloc(be, bytes), *w = be->ops->alloc(be, bytes),
         *out = be->ops->alloc(be, bytes);
    be->ops->linear_fwd(be, out, NULL, a, w, NULL, n, n, n); /* warm-up */
    be->ops->synchronize(be);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = lt_now();
        be->ops->linear_fwd(be, out, NULL, a, w, NULL, n, n, n);
        be->ops->synchronize(be);
        double dt = lt_now() - t0;
        if (dt < best) best = dt;
    }
    be->ops->free(be, a);
    be->ops->free(be, w);
    be->ops->free(be, out);
    return 2.0 * n * (double)n * n / best / 1e12;
}

double lt_peak_tflops(LtBackend *be, const LtConfig *cfg, const char **source) {
    if (cfg->logging.peak_tflops > 0) {
        *source = "config";
        return cfg->logging.peak_tflops;
    }
    double p = be->device_id >= 0 ? lt_peak_table(be->device_name, cfg->train.precision) : 0.0;
    if (p > 0) {
        *source = "table";
        return p;
    }
    *source = "measured";
    return measure_gemm_tflops(be);
}

void lt_metrics_open(LtMetricsFile *m, const char *path) {
    m->f = NULL;
    if (!path || !path[0]) return;
    m->f = fopen(path, "a");
    if (!m->f) lt_input_error("logging.metrics_file: cannot open '%s': %s", path, strerror(errno));
}

void lt_metrics_close(LtMetricsFile *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}

void lt_metrics_train(LtMetricsFile *m, long step, double loss, double lr, double grad_norm,
                      double tokens_per_sec, double tflops, double mfu, double step_ms) {
    if (!m->f) return;
    fprintf(m->f,
            "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
            "\"tokens_per_sec\": %.6g, \"tflops_per_device\": %.6g, \"mfu\": %.6g, "
            "\"step_ms\": %.6g}\n",
            step, loss, lr, grad_norm, tokens_per_sec, tflops, mfu, step_ms);
    fflush(m->f);
}

void lt_metrics_eval(LtMetricsFile *m, long step, double val_loss, long samples) {
    if (!m->f) return;
    fprintf(m->f,
            "{\"eval\": true, \"step\": %ld, \"val_loss\": %.9g, \"val_log_ppl\": %.9g, "
            "\"val_samples\": %ld}\n",
            step, val_loss, val_loss, samples);
    fflush(m->f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lt_median(double *x, int n) {
    if (n <= 0) return 0.0;
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}
