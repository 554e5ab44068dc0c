/* plan_device.c - the planner's devices (see plan_device.h): the built-in
 * rows and the calibration file, written by `lattice plan --calibrate --out
 * FILE` and read by --calibration FILE.
 *
 * One JSON object, {"format": "lattice-calibration/1", "device": ..., the
 * figures}; its fields and ranges: docs/formats.md ("Planner calibration
 * file").
 * Every figure is checked against the range the step-time model can use, so
 * a hand-edited file fails here, naming the field, and not as a strange plan.
 * Unknown keys are refused too: a misspelt figure would otherwise be ignored
 * in silence and the built-in one used. */
#include "plan_device.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "json.h"

#define CAL_FORMAT "lattice-calibration/1"
#define CAL_MAX_BYTES (1 << 20)

/* the cpu row's memory-bound and attention figures (fp32, 1 rank, 2 threads) */
#define CPU_ELEM_GBS 0.91
#define CPU_XENT_GBS 4.19
#define CPU_OPTIM_GBS 3.58
#define CPU_ATTN_FWD 0.0081
#define CPU_ATTN_BWD 0.0157

/* The figures of a file, before they are laid over the device's row. */
typedef struct {
    double peak_tflops, gemm_eff, gemm_half_tokens, mem_gbs, mem_gib, intra_gbs, net_gbs,
        latency_us, elem_gbs, xent_gbs, optim_gbs, attn_fwd_tflops, attn_bwd_tflops,
        cudnn_fwd_tflops, cudnn_bwd_tflops, attn_win_fwd_tflops, attn_win_bwd_tflops,
        cudnn_win_fwd_tflops, cudnn_win_bwd_tflops, sync_skew_us, sync_skew;
} CalFigures;

typedef struct {
    const char *key;
    size_t off;      /* in CalFigures */
    size_t dev_off;  /* in LtPlanDevice; (size_t)-1: the peak (of the file's precision) */
    int required;    /* 0: taken from the device's built-in row when absent */
    double lo, hi;   /* the accepted range: (lo, hi], or [0, hi] when lo < 0 */
} CalKey;

#define FIG(k) offsetof(CalFigures, k)
#define DEV(k) offsetof(LtPlanDevice, k)
static const CalKey KEYS[] = {
    {"peak_tflops", FIG(peak_tflops), (size_t)-1, 1, 0, 1e5},
    {"gemm_eff", FIG(gemm_eff), DEV(gemm_eff), 1, 0, 1.5},
    {"gemm_half_tokens", FIG(gemm_half_tokens), DEV(gemm_half_tokens), 1, -1, 1e7},
    {"mem_gbs", FIG(mem_gbs), DEV(mem_gbs), 1, 0, 1e6},
    {"mem_gib", FIG(mem_gib), DEV(mem_gib), 0, 0, 1e7},
    {"intra_gbs", FIG(intra_gbs), DEV(intra_gbs), 0, 0, 1e6},
    {"net_gbs", FIG(net_gbs), DEV(net_gbs), 0, 0, 1e6},
    {"latency_us", FIG(latency_us), DEV(latency_us), 0, -1, 1e6},
    /* since the memory-bound term: files from before it take the row's */
    {"elem_gbs", FIG(elem_gbs), DEV(elem_gbs), 0, 0, 1e6},
    {"xent_gbs", FIG(xent_gbs), DEV(xent_gbs), 0, 0, 1e6},
    {"optim_gbs", FIG(optim_gbs), DEV(optim_gbs), 0, 0, 1e6},
    {"attn_fwd_tflops", FIG(attn_fwd_tflops), DEV(attn_fwd_tflops), 0, 0, 1e5},
    {"attn_bwd_tflops", FIG(attn_bwd_tflops), DEV(attn_bwd_tflops), 0, 0, 1e5},
    {"cudnn_fwd_tflops", FIG(cudnn_fwd_tflops), DEV(cudnn_fwd_tflops), 0, -1, 1e5},
    {"cudnn_bwd_tflops", FIG(cudnn_bwd_tflops), DEV(cudnn_bwd_tflops), 0, -1, 1e5},
    /* since the sliding-window rates */
    {"attn_win_fwd_tflops", FIG(attn_win_fwd_tflops), DEV(attn_win_fwd_tflops), 0, -1, 1e5},
    {"attn_win_bwd_tflops", FIG(attn_win_bwd_tflops), DEV(attn_win_bwd_tflops), 0, -1, 1e5},
    {"cudnn_win_fwd_tflops", FIG(cudnn_win_fwd_tflops), DEV(cudnn_win_fwd_tflops), 0, -1, 1e5},
    {"cudnn_win_bwd_tflops", FIG(cudnn_win_bwd_tflops), DEV(cudnn_win_bwd_tflops), 0, -1, 1e5},
    /* since the ranks' skew: files from before it (and one-rank ones) take the row's */
    {"sync_skew_us", FIG(sync_skew_us), DEV(sync_skew_us), 0, -1, 1e6},
    {"sync_skew", FIG(sync_skew), DEV(sync_skew), 0, -1, 10},
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

/* Written for the reader's information, not read back as figures. */
static const char *const INFO_KEYS[] = {"device_name", "host", "date", "seconds", "peak_source",
                                        "note"};
/* The T a GPU calibration's attention figures hold (lt_plan_attn_shape's
 * reference); a GPU file without it is from before the figures were taken
 * there: they hold the mix of T 1024, 2048 and 4096 (HD 128, 16384 tokens
 * each, so FLOPs 1 : 2 : 4) that --calibrate timed, and are taken to the
 * reference on reading. */
#define ATTN_REF_KEY "attn_reference_t"
#define ATTN_REF_T 2048

/* What it was measured with (whole numbers; 0 threads: a GPU): read into the
 * device (threads; ranks: those per node, else all of them) for the thread
 * scaling. */
static const char *const COUNT_KEYS[] = {"threads", "ranks", "ranks_per_node"};

/* ---- the built-in rows --------------------------------------------------- */

/* The GPU rows: peaks, memory, its bandwidth and NVLink (450 GB/s per GPU one
 * way; the A100's 300, the B200's 900) are datasheet figures (the B200's
 * those of HGX B200 at 1000 W: 2.25 PFLOP/s bf16 dense, 180 GB of HBM3e at
 * 8 TB/s). The H200's GEMM curve, eff(N) = 0.749 N / (N + 364), is the one
 * `lattice plan --calibrate` measured on the fifth H200 run
 * (bench/2026-11-28-h200-fifth-draw/calibration.json: cuBLASLt on the layer
 * GEMMs of hidden 1024-4096 and their small-row forms), taken for the H100 as
 * well (the same GH100 SMs and clocks). Assumed, because no such GPU was at
 * hand to measure them: the B200's and A100's GEMM efficiencies and
 * half-efficiency point of 256 tokens, the 5 us latency per ring step, and
 * the network (one 400 Gb/s NIC per GPU, 50 GB/s; the A100's 200 Gb/s).
 * `lattice plan --calibrate` on such a machine measures the first three and
 * the NVLink figure (--calibration FILE plans with them).
 * Their memory-bound and attention figures come from the first H200 run
 * (bench/2026-11-27-h200-first-draw.md, bf16): element-wise ops at 0.60 of
 * the datasheet bandwidth (67-80% for the forward norms, residual adds and
 * GeLU, 33-39% for the LayerNorm backward), the cross-entropy at 0.46, AdamW
 * at 0.87; attention at T 2048, HD 128 in the model's count (the bench's
 * causal TFLOP/s: forward x2, backward x8/5): lattice's kernels forward 300,
 * backward 201, cuDNN 1058 and 608; a sliding window of 128 keys (the third
 * H200 run, bench/2026-11-28-h200-third-draw.md: GPT-OSS's layer, T 8192, HD
 * 64, 64 heads over 8, the band's pairs in the same count) lattice's kernels
 * 197 forward, 116 backward, cuDNN 208 forward and 16 for its deterministic
 * backward (T 2048: 52; it grows with T) - for the H100 too (the same SMs), for
 * the A100 and the B200 scaled by their bf16 peaks (assumed; lattice's own
 * attention kernels are written for sm_80/sm_90 and have not run on a B200).
 * The cpu row was measured by `lattice plan --calibrate` on the 2-core CI
 * machine (bench/2026-11-24-cpu-calibrate.md; its memory-bound and attention
 * figures bench/2026-11-27-cpu-plan-time.md): its peaks are the measured
 * square-GEMM ceiling (a CPU has no datasheet figure here); its network is
 * assumed (10 Gb/s Ethernet). */
#define GPU_ROW(bw, attn_scale)                                                                \
    .elem_gbs = 0.60 * (bw), .xent_gbs = 0.46 * (bw), .optim_gbs = 0.87 * (bw),               \
    .attn_fwd_tflops = 300 * (attn_scale), .attn_bwd_tflops = 201 * (attn_scale),             \
    .cudnn_fwd_tflops = 1058 * (attn_scale), .cudnn_bwd_tflops = 608 * (attn_scale),          \
    .attn_win_fwd_tflops = 197 * (attn_scale), .attn_win_bwd_tflops = 116 * (attn_scale),     \
    .cudnn_win_fwd_tflops = 208 * (attn_scale), .cudnn_win_bwd_tflops = 16 * (attn_scale)
static const LtPlanDevice DEVICES[] = {
    {"h100", 989.4, 66.9, 80, 3350, 450, 50, 5.0, 0.749, 364,
     "datasheet peaks and bandwidths; GEMMs as measured on an H200; latency and network assumed",
     GPU_ROW(3350, 1.0)},
    {"h200", 989.4, 66.9, 141, 4800, 450, 50, 5.0, 0.749, 364,
     "datasheet peaks and bandwidths; GEMMs measured (2026-11-28); latency and network assumed",
     GPU_ROW(4800, 1.0)},
    {"b200", 2250.0, 80.0, 180, 8000, 900, 50, 5.0, 0.60, 256,
     "datasheet peaks and bandwidths (HGX B200); GEMM efficiency, latency and network assumed",
     GPU_ROW(8000, 2250.0 / 989.4)},
    {"a100", 312.0, 19.5, 80, 2039, 300, 25, 5.0, 0.65, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed",
     GPU_ROW(2039, 312.0 / 989.4)},
    /* fp32 peak, GEMM curve, memory: the fp32 run on one rank (2 threads); bf16
     * peak: the bf16 run; all-reduce: the run under mpirun -np 2; memory-bound
     * and attention: the fp32 run on one rank */
    {"cpu", 0.0297, 0.0961, 23.5, 25.48, 0.798, 1.25, 0.50, 1.028, 25,
     "measured on the 2-core CI machine (peak: its GEMM ceiling); network assumed",
     .elem_gbs = CPU_ELEM_GBS, .xent_gbs = CPU_XENT_GBS, .optim_gbs = CPU_OPTIM_GBS,
     .attn_fwd_tflops = CPU_ATTN_FWD, .attn_bwd_tflops = CPU_ATTN_BWD, .threads = 2, .ranks = 1},
};

/* The attention core's rate by shape, relative to T 2048, HD 128: the fifth
 * H200 run (bench/2026-11-28-h200-fifth-draw), bench_attention at T 1024 and
 * 2048 x HD 64 and 128 (causal, 16384 tokens, 2048 wide) and the calibration's
 * T 4096 at HD 128 (deterministic; the same step to T 4096 taken for HD 64 and
 * for the non-deterministic backward, which were not measured there). Rows: HD 64,
 * 128; columns: T 1024, 2048, 4096. cuDNN's non-deterministic backward is
 * relative to its deterministic one at the reference. cuDNN runs small head
 * dimensions and short sequences well below its reference rate (GPT-2's HD 64
 * at T 1024: 0.61 forward, 0.58 backward); lattice's kernels barely change. */
static const double ATTN_SHAPE[3][2][2][3] = {
    /* lattice */ {{{0.942, 1.022, 1.072}, {0.908, 1.0, 1.049}},
                   {{0.842, 0.955, 1.025}, {0.887, 1.0, 1.073}}},
    /* cuDNN, deterministic backward */ {{{0.611, 0.781, 0.875}, {0.874, 1.0, 1.119}},
                                         {{0.582, 0.687, 0.778}, {0.835, 1.0, 1.132}}},
    /* cuDNN, non-deterministic backward */ {{{0.611, 0.781, 0.875}, {0.874, 1.0, 1.119}},
                                             {{0.636, 0.837, 0.948}, {0.803, 1.055, 1.194}}},
};

/* x's place on the grid lo, 2 lo, (4 lo): its cell and the fraction into it,
 * in log2, clamped to the grid's ends. */
static void grid_at(double x, double lo, int cells, int *i, double *f) {
    double u = log2(x > 0 ? x / lo : 1.0);
    if (u < 0) u = 0;
    if (u > cells) u = cells;
    *i = u >= cells ? cells - 1 : (int)u;
    *f = u - *i;
}

int lt_plan_device_is_gpu(const LtPlanDevice *dev) { return strcasecmp(dev->name, "cpu") != 0; }

double lt_plan_attn_shape(const LtPlanDevice *dev, int kind, int bwd, int T, int HD) {
    if (!lt_plan_device_is_gpu(dev) || kind < 0 || kind > 2) return 1.0;
    int ti, hi;
    double tf, hf;
    grid_at(T, 1024, 2, &ti, &tf);
    grid_at(HD, 64, 1, &hi, &hf);
    const double (*g)[3] = ATTN_SHAPE[kind][bwd ? 1 : 0];
    const double lo = g[0][ti] + tf * (g[0][ti + 1] - g[0][ti]),
                 hi_ = g[1][ti] + tf * (g[1][ti + 1] - g[1][ti]);
    return lo + hf * (hi_ - lo);
}

int lt_plan_device(const char *name, LtPlanDevice *out) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (!strcasecmp(name, DEVICES[i].name)) {
            *out = DEVICES[i];
            return 0;
        }
    return -1;
}

double lt_plan_device_scale_threads(LtPlanDevice *dev, double threads) {
    if (dev->threads <= 0 || !(threads > 0) || threads == dev->threads) return 1.0;
    const double f = threads / dev->threads;
    double *rates[] = {&dev->bf16_tflops, &dev->fp32_tflops, &dev->mem_gbs, &dev->elem_gbs,
                       &dev->xent_gbs, &dev->optim_gbs, &dev->attn_fwd_tflops,
                       &dev->attn_bwd_tflops, &dev->cudnn_fwd_tflops, &dev->cudnn_bwd_tflops,
                       &dev->attn_win_fwd_tflops, &dev->attn_win_bwd_tflops,
                       &dev->cudnn_win_fwd_tflops, &dev->cudnn_win_bwd_tflops};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) *rates[i] *= f;
    return f;
}

double lt_plan_device_run_threads(const LtPlanDevice *dev, int config_threads, int ranks_per_node) {
    if (dev->threads <= 0) return 0.0;
    const double share = (double)dev->threads * (dev->ranks > 0 ? dev->ranks : 1) /
                         (ranks_per_node > 0 ? ranks_per_node : 1);
    return config_threads > 0 && config_threads < share ? config_threads : share;
}

const char *lt_plan_device_names(void) { return "h100, h200, b200, a100, cpu"; }

int lt_plan_device_match(const char *device_name, char *name, size_t len) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (strcmp(DEVICES[i].name, "cpu") && strcasestr(device_name, DEVICES[i].name)) {
            snprintf(name, len, "%s", DEVICES[i].name);
            return 0;
        }
    return -1;
}

int lt_plan_device_choose(const char *gpu, const char *calibration, LtPrecision prec,
                          LtPlanDevice *out, char *err, size_t errlen) {
    if (!calibration) {
        if (lt_plan_device(gpu ? gpu : "h100", out) == 0) return 0;
        return lt_errorf(err, errlen, "unknown --gpu: %s (known: %s)", gpu,
                         lt_plan_device_names());
    }
    if (lt_plan_calibration_load(calibration, prec, out, err, errlen)) return -1;
    if (gpu && strcasecmp(gpu, out->name))
        return lt_errorf(err, errlen, "--gpu %s, but the calibration file %s is for device %s",
                         gpu, calibration, out->name);
    return 0;
}

/* ---- reading ------------------------------------------------------------- */

static char *read_small_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return lt_errorf(err, errlen, "calibration file %s: %s", path, strerror(errno)), NULL;
    char *buf = lt_malloc(CAL_MAX_BYTES + 1);
    *len = fread(buf, 1, CAL_MAX_BYTES + 1, f);
    const int failed = ferror(f);
    fclose(f);
    if (failed || *len > CAL_MAX_BYTES) {
        free(buf);
        return lt_errorf(err, errlen, "calibration file %s: %s", path,
                         failed ? "read error" : "larger than 1 MiB: not a calibration file"),
               NULL;
    }
    return buf;
}

/* The string member `key` of obj: its text, or NULL with the reason in err. */
static const char *get_string(const LtJson *obj, const char *path, const char *key, char *err,
                              size_t errlen) {
    const LtJson *v = lt_json_get(obj, key);
    if (!v) {
        lt_errorf(err, errlen, "calibration file %s: field '%s' is missing", path, key);
        return NULL;
    }
    if (v->type != LT_JSON_STRING)
        return lt_errorf(err, errlen, "calibration file %s: field '%s' must be a string, not %s",
                         path, key, lt_json_type_name(v->type)),
               NULL;
    return v->text;
}

static int known_key(const char *key) {
    static const char *const strings[] = {"format", "device", "precision"};
    if (!strcmp(key, ATTN_REF_KEY)) return 1;
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(key, KEYS[i].key)) return 1;
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (!strcmp(key, strings[i])) return 1;
    for (size_t i = 0; i < sizeof INFO_KEYS / sizeof INFO_KEYS[0]; i++)
        if (!strcmp(key, INFO_KEYS[i])) return 1;
    for (size_t i = 0; i < sizeof COUNT_KEYS / sizeof COUNT_KEYS[0]; i++)
        if (!strcmp(key, COUNT_KEYS[i])) return 1;
    return 0;
}

/* Figure KEYS[i] of obj into fig; *present says whether the file has it. */
static int read_figure(const LtJson *obj, const char *path, size_t i, CalFigures *fig,
                       int *present, char *err, size_t errlen) {
    const CalKey *k = &KEYS[i];
    const LtJson *v = lt_json_get(obj, k->key);
    *present = v != NULL;
    if (!v)
        return k->required ? lt_errorf(err, errlen, "calibration file %s: field '%s' is missing",
                                       path, k->key)
                           : 0;
    double x;
    if (v->type != LT_JSON_NUMBER || lt_json_double(v, &x))
        return lt_errorf(err, errlen, "calibration file %s: field '%s' must be a number, not %s",
                         path, k->key, lt_json_type_name(v->type));
    const int ok = k->lo < 0 ? x >= 0 && x <= k->hi : x > k->lo && x <= k->hi;
    if (!ok)
        return lt_errorf(err, errlen, "calibration file %s: field '%s' is %g, outside %s%g, %g]",
                         path, k->key, x, k->lo < 0 ? "[" : "(", k->lo < 0 ? 0 : k->lo, k->hi);
    *(double *)((char *)fig + k->off) = x;
    return 0;
}

/* The identity fields: format, device (its built-in row, or none), precision. */
static int read_identity(const LtJson *obj, const char *path, LtPrecision prec, LtPlanDevice *dev,
                         int *has_row, char *err, size_t errlen) {
    const char *format = get_string(obj, path, "format", err, errlen);
    if (!format) return -1;
    if (strcmp(format, CAL_FORMAT))
        return lt_errorf(err, errlen,
                         "calibration file %s: field 'format' is \"%s\", expected \"%s\"", path,
                         format, CAL_FORMAT);
    const char *device = get_string(obj, path, "device", err, errlen);
    if (!device) return -1;
    if (!device[0] || strlen(device) >= sizeof dev->name)
        return lt_errorf(err, errlen, "calibration file %s: field 'device' must be a name of 1 to "
                         "%zu characters", path, sizeof dev->name - 1);
    *has_row = lt_plan_device(device, dev) == 0;
    if (!*has_row) memset(dev, 0, sizeof *dev);
    snprintf(dev->name, sizeof dev->name, "%s", device);
    const char *p = get_string(obj, path, "precision", err, errlen);
    if (!p) return -1;
    if (strcmp(p, "fp32") && strcmp(p, "bf16"))
        return lt_errorf(err, errlen, "calibration file %s: field 'precision' is \"%s\", expected "
                         "\"fp32\" or \"bf16\"", path, p);
    if (strcmp(p, lt_precision_name(prec)))
        return lt_errorf(err, errlen, "calibration file %s: field 'precision': its GEMMs were "
                         "measured in %s, the config trains in %s (calibrate with --precision %s, "
                         "or plan with train.precision=%s)",
                         path, p, lt_precision_name(prec), lt_precision_name(prec), p);
    return 0;
}

/* threads and ranks (per node where the file says) into dev: absent, a
 * file from before they were read or a built-in row's (threads 0: no thread
 * scaling); else whole numbers in [0, 4096] threads, [1, 1 << 20] ranks. */
static int read_counts(const LtJson *obj, const char *path, LtPlanDevice *dev, char *err,
                       size_t errlen) {
    int *to[3] = {&dev->threads, &dev->ranks, &dev->ranks};
    const double lo[3] = {0, 1, 1}, hi[3] = {4096, 1 << 20, 1 << 20};
    for (int i = 0; i < 3; i++) {
        const LtJson *v = lt_json_get(obj, COUNT_KEYS[i]);
        double x;
        if (!v) continue;
        if (v->type != LT_JSON_NUMBER || lt_json_double(v, &x) || x != (int)x || x < lo[i] ||
            x > hi[i])
            return lt_errorf(err, errlen, "calibration file %s: field '%s' must be a whole "
                             "number in [%g, %g]", path, COUNT_KEYS[i], lo[i], hi[i]);
        *to[i] = (int)x;
    }
    if (!lt_json_get(obj, "threads")) dev->threads = 0;
    return 0;
}

static int read_calibration(const LtJson *obj, const char *path, LtPrecision prec,
                            LtPlanDevice *dev, char *err, size_t errlen) {
    if (obj->type != LT_JSON_OBJECT)
        return lt_errorf(err, errlen, "calibration file %s: expected a JSON object, found %s", path,
                         lt_json_type_name(obj->type));
    for (int i = 0; i < obj->n; i++)
        if (!known_key(obj->kids[i].key))
            return lt_errorf(err, errlen, "calibration file %s: unknown field '%s'", path,
                             obj->kids[i].key);
    int has_row = 0;
    if (read_identity(obj, path, prec, dev, &has_row, err, errlen)) return -1;
    CalFigures fig;
    for (size_t i = 0; i < NKEYS; i++) {
        int present;
        if (read_figure(obj, path, i, &fig, &present, err, errlen)) return -1;
        if (!present && !has_row)
            return lt_errorf(err, errlen, "calibration file %s: field '%s' is missing, and device "
                             "'%s' has no built-in row to take it from (known: %s)",
                             path, KEYS[i].key, dev->name, lt_plan_device_names());
        if (!present) continue;
        const double x = *(double *)((char *)&fig + KEYS[i].off);
        double *peak = prec == LT_PREC_BF16 ? &dev->bf16_tflops : &dev->fp32_tflops;
        *(KEYS[i].dev_off == (size_t)-1 ? peak : (double *)((char *)dev + KEYS[i].dev_off)) = x;
    }
    if (read_counts(obj, path, dev, err, errlen)) return -1;
    const LtJson *ref = lt_json_get(obj, ATTN_REF_KEY);
    double rt;
    if (ref && (ref->type != LT_JSON_NUMBER || lt_json_double(ref, &rt) || rt != ATTN_REF_T))
        return lt_errorf(err, errlen, "calibration file %s: field '%s' must be %d", path,
                         ATTN_REF_KEY, ATTN_REF_T);
    if (!ref && lt_plan_device_is_gpu(dev)) { /* the old mix, to the reference */
        const struct {
            const char *key;
            double *x;
            int kind, bwd;
        } fig[] = {{"attn_fwd_tflops", &dev->attn_fwd_tflops, LT_PLAN_ATTN_LATTICE, 0},
                   {"attn_bwd_tflops", &dev->attn_bwd_tflops, LT_PLAN_ATTN_LATTICE, 1},
                   {"cudnn_fwd_tflops", &dev->cudnn_fwd_tflops, LT_PLAN_ATTN_CUDNN, 0},
                   {"cudnn_bwd_tflops", &dev->cudnn_bwd_tflops, LT_PLAN_ATTN_CUDNN, 1}};
        for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
            if (!lt_json_get(obj, fig[i].key)) continue; /* the row's: already the reference's */
            double inv = 0.0;
            for (int t = 1024, w = 1; t <= 4096; t *= 2, w *= 2)
                inv += w / lt_plan_attn_shape(dev, fig[i].kind, fig[i].bwd, t, 128);
            *fig[i].x /= 7.0 / inv;
        }
    }
    snprintf(dev->source, sizeof dev->source, "calibration file %s", path);
    return 0;
}

int lt_plan_calibration_load(const char *path, LtPrecision prec, LtPlanDevice *out, char *err,
                             size_t errlen) {
    size_t len;
    char *text = read_small_file(path, &len, err, errlen);
    if (!text) return -1;
    char jerr[512];
    LtJson *root = lt_json_parse(text, len, path, jerr, sizeof jerr);
    free(text);
    if (!root) return lt_errorf(err, errlen, "calibration file %s: not JSON: %s", path, jerr);
    const int rc = read_calibration(root, path, prec, out, err, errlen);
    lt_json_free(root);
    return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* A JSON string of s: the few characters that need escaping in the names written. */
static void put_string(FILE *f, const char *key, const char *s) {
    fprintf(f, "  \"%s\": \"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputs("\",\n", f);
}

static void put_number(FILE *f, const char *key, double v, int last) {
    char buf[64];
    lt_format_double(v, buf, sizeof buf);
    fprintf(f, "  \"%s\": %s%s\n", key, buf, last ? "" : ",");
}

int lt_plan_calibration_write(const char *path, const LtPlanCalibration *cal, char *err,
                              size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) return lt_errorf(err, errlen, "--out %s: %s", path, strerror(errno));
    const LtPlanDevice *d = &cal->dev;
    char host[256] = "", date[64];
    gethostname(host, sizeof host - 1);
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "{\n");
    put_string(f, "format", CAL_FORMAT);
    put_string(f, "device", d->name);
    put_string(f, "device_name", cal->device_name);
    put_string(f, "host", host);
    put_string(f, "date", date);
    put_string(f, "precision", lt_precision_name(cal->prec));
    put_number(f, "ranks", cal->ranks, 0);
    put_number(f, "ranks_per_node", cal->ranks_per_node, 0);
    put_number(f, "threads", cal->threads, 0);
    put_number(f, "seconds", cal->seconds, 0);
    put_string(f, "peak_source", cal->peak_source);
    put_number(f, "peak_tflops", cal->prec == LT_PREC_BF16 ? d->bf16_tflops : d->fp32_tflops, 0);
    put_number(f, "gemm_eff", d->gemm_eff, 0);
    put_number(f, "gemm_half_tokens", d->gemm_half_tokens, 0);
    put_number(f, "mem_gbs", d->mem_gbs, 0);
    if (d->mem_gib > 0) put_number(f, "mem_gib", d->mem_gib, 0);
    put_number(f, "elem_gbs", d->elem_gbs, 0);
    put_number(f, "xent_gbs", d->xent_gbs, 0);
    put_number(f, "optim_gbs", d->optim_gbs, 0);
    if (d->attn_win_fwd_tflops > 0) {
        put_number(f, "attn_win_fwd_tflops", d->attn_win_fwd_tflops, 0);
        put_number(f, "attn_win_bwd_tflops", d->attn_win_bwd_tflops, 0);
    }
    if (lt_plan_device_is_gpu(d)) put_number(f, ATTN_REF_KEY, ATTN_REF_T, 0);
    put_number(f, "attn_fwd_tflops", d->attn_fwd_tflops, 0);
    put_number(f, "attn_bwd_tflops", d->attn_bwd_tflops, !cal->has_comm && !cal->has_cudnn);
    if (cal->has_cudnn) {
        if (d->cudnn_win_fwd_tflops > 0) {
            put_number(f, "cudnn_win_fwd_tflops", d->cudnn_win_fwd_tflops, 0);
            put_number(f, "cudnn_win_bwd_tflops", d->cudnn_win_bwd_tflops, 0);
        }
        put_number(f, "cudnn_fwd_tflops", d->cudnn_fwd_tflops, 0);
        put_number(f, "cudnn_bwd_tflops", d->cudnn_bwd_tflops, !cal->has_comm);
    }
    if (cal->has_comm) {
        put_number(f, "intra_gbs", d->intra_gbs, 0);
        put_number(f, "latency_us", d->latency_us, 0);
        put_number(f, "sync_skew_us", d->sync_skew_us, 0);
        put_number(f, "sync_skew", d->sync_skew, 1);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0) return lt_errorf(err, errlen, "--out %s: %s", path, strerror(errno));
    return 0;
}
