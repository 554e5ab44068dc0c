/* metrics.c - see metrics.h. The metrics file's records (JSON lines):
 * docs/formats.md ("Metrics records"). */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

typedef struct {
    const char *pattern; /* substring of the device name */
    double bf16, fp32;   /* dense TFLOP/s (fp32 = non-tensor-core FP32) */
} PeakEntry;

/* Vendor datasheet dense peaks (no sparsity). Longer patterns first. The
 * B200 at HGX B200's 1000 W (GB200's B200 runs at up to 1200 W). */
static const PeakEntry PEAKS[] = {
    {"GB200", 2500.0, 90.0},
    {"B200", 2250.0, 80.0},
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
    memset(m, 0, sizeof *m);
    if (!path || !path[0]) return;
    m->f = fopen(path, "a");
    if (!m->f) lt_input_error("logging.metrics_file: cannot open '%s': %s", path, strerror(errno));
    snprintf(m->path, sizeof m->path, "%s", path);
}

/* The first write error is kept (errno) and said once, with whether the
 * partial line was cut back; later lines are not attempted. */
static void metrics_fail(LtMetricsFile *m, int e, const char *cut) {
    if (m->error) return;
    m->error = e ? e : EIO;
    fprintf(stderr, "lattice: error: logging.metrics_file: writing '%s' failed: %s; %s; no further "
                    "metrics are written and the run will exit non-zero\n",
            m->path, strerror(m->error), cut);
}

void lt_metrics_close(LtMetricsFile *m) {
    if (m->f && fclose(m->f) != 0) metrics_fail(m, errno, "closing it failed");
    m->f = NULL;
}

int lt_metrics_status(const LtMetricsFile *m, char *err, size_t errlen) {
    if (!m->error) return 0;
    return lt_errorf(err, errlen, "logging.metrics_file: writing '%s' failed: %s", m->path,
                     strerror(m->error));
}

/* One JSON line built in memory: "key": value pairs; a non-finite number is
 * written as null (JSON has no NaN or Infinity). */
typedef struct {
    char buf[16384]; /* a step's line with an MoE model's per-layer arrays */
    size_t n;
} Line;

static void put(Line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Line *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->buf + l->n, sizeof l->buf - l->n, fmt, ap);
    va_end(ap);
    if (k > 0) l->n = l->n + (size_t)k < sizeof l->buf ? l->n + (size_t)k : sizeof l->buf - 1;
}

static void put_num(Line *l, const char *key, double v, const char *fmt) {
    put(l, "%s\"%s\": ", l->n > 1 ? ", " : "", key);
    if (isfinite(v))
        put(l, fmt, v);
    else
        put(l, "null");
}

/* Lines go through write(2) on the stream's descriptor, never its buffer, so
 * a short write is seen here and fclose has nothing left to flush. A write
 * that fails part-way (disk full, file size limit) is cut back to the file's
 * size before it, so the file ends at the last complete line. */
static void write_line(LtMetricsFile *m, Line *l) {
    put(l, "}\n");
    if (m->error) return;
    const int fd = fileno(m->f);
    struct stat st;
    const off_t end = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    size_t done = 0;
    while (done < l->n) {
        ssize_t k = write(fd, l->buf + done, l->n - done);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        const int e = k < 0 ? errno : EIO;
        char cut[160] = "the file ends at its last complete line";
        if (done > 0 && (end < 0 || ftruncate(fd, end) != 0))
            snprintf(cut, sizeof cut, "%zu bytes of a line are left at its end (cutting them back: %s)",
                     done, end < 0 ? "not a regular file" : strerror(errno));
        metrics_fail(m, e, cut);
        return;
    }
}

/* ", "moe": {...}": one array per statistic, an entry per MoE layer. */
static void put_moe(Line *l, const LtMoeReport *r, int n) {
    put(l, ", \"moe\": {\"layer\": [");
    for (int i = 0; i < n; i++) put(l, "%s%d", i ? ", " : "", r[i].layer);
    put(l, "], \"dropped\": [");
    for (int i = 0; i < n; i++) put(l, "%s%ld", i ? ", " : "", r[i].dropped);
    const char *key[] = {"aux_loss", "z_loss", "load_max", "load_mean"};
    for (int k = 0; k < 4; k++) {
        put(l, "], \"%s\": [", key[k]);
        for (int i = 0; i < n; i++) {
            const double v[] = {r[i].aux, r[i].z, r[i].load_max, r[i].load_mean};
            if (isfinite(v[k]))
                put(l, "%s%.6g", i ? ", " : "", v[k]);
            else
                put(l, "%snull", i ? ", " : "");
        }
    }
    put(l, "]}");
}

void lt_metrics_train(LtMetricsFile *m, long step, long global_batch, uint64_t samples,
                      double loss, double lr, double grad_norm, double tokens_per_sec,
                      double tflops, double mfu, double step_ms, const LtStepTimes *t) {
    if (!m->f) return;
    Line l = {.n = 0};
    put(&l, "{\"step\": %ld", step);
    put_num(&l, "loss", loss, "%.9g");
    put_num(&l, "lr", lr, "%.9g");
    put_num(&l, "grad_norm", grad_norm, "%.9g");
    put(&l, ", \"global_batch\": %ld, \"samples\": %llu", global_batch,
        (unsigned long long)samples);
    put_num(&l, "tokens_per_sec", tokens_per_sec, "%.6g");
    put_num(&l, "tflops_per_device", tflops, "%.6g");
    put_num(&l, "mfu", mfu, "%.6g");
    put_num(&l, "step_ms", step_ms, "%.6g");
    if (t) {
        const struct {
            const char *k;
            double v;
        } part[] = {{"forward", t->forward},   {"backward", t->backward}, {"grads", t->grads},
                    {"optimizer", t->optimizer}, {"data", t->data},       {"bubble", t->bubble},
                    {"other", t->other},
                    {"comm_tp", t->comm_tp},   {"comm_dp", t->comm_dp}, {"comm_pp", t->comm_pp},
                    {"comm_tp_busy", t->comm_tp_busy}, {"comm_dp_busy", t->comm_dp_busy},
                    {"comm_pp_busy", t->comm_pp_busy},
                    {"comm_ep", t->comm_ep},   {"comm_ep_busy", t->comm_ep_busy},
                    {"attention", t->attention}, {"loss_head", t->loss_head},
                    {"moe", t->moe},           {"moe_experts", t->moe_experts}};
        put(&l, ", \"time_ms\": {");
        for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
            put(&l, "%s\"%s\": ", i ? ", " : "", part[i].k);
            if (isfinite(part[i].v))
                put(&l, "%.4g", part[i].v);
            else
                put(&l, "null");
        }
        put(&l, "}");
    }
    if (m->nmoe > 0) put_moe(&l, m->moe, m->nmoe);
    m->moe = NULL, m->nmoe = 0;
    write_line(m, &l);
}

void lt_metrics_moe_next(LtMetricsFile *m, const LtMoeReport *r, int n) {
    m->moe = r;
    m->nmoe = n;
}

void lt_metrics_eval(LtMetricsFile *m, long step, double val_loss, long samples) {
    if (!m->f) return;
    Line l = {.n = 0};
    put(&l, "{\"eval\": true, \"step\": %ld", step);
    put_num(&l, "val_loss", val_loss, "%.9g");
    put_num(&l, "val_log_ppl", val_loss, "%.9g");
    put(&l, ", \"val_samples\": %ld", samples);
    write_line(m, &l);
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
