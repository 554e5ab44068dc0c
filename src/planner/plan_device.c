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

/* The figures of a file, before they are laid over the device's row. */
typedef struct {
    double peak_tflops, gemm_eff, gemm_half_tokens, mem_gbs, mem_gib, intra_gbs, net_gbs,
        latency_us;
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
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

/* Written for the reader's information, not read back as figures. */
static const char *const INFO_KEYS[] = {"device_name", "host", "date", "ranks", "threads",
                                        "seconds", "peak_source", "note"};

/* ---- the built-in rows --------------------------------------------------- */

/* The GPU rows: peaks, memory, its bandwidth and NVLink (450 GB/s per GPU one
 * way; the A100's 300) are datasheet figures. Assumed, because no GPU was
 * at hand to measure them: the GEMM efficiencies, the half-efficiency point
 * of 256 tokens, the 5 us latency per ring step, and the network (one
 * 400 Gb/s NIC per GPU, 50 GB/s; the A100's 200 Gb/s). `lattice plan
 * --calibrate` on such a machine measures the first three and the NVLink
 * figure (--calibration FILE plans with them).
 * The cpu row was measured by `lattice plan --calibrate` on the 2-core CI
 * machine (bench/2026-11-24-cpu-calibrate.md): its peaks are the measured
 * square-GEMM ceiling (a CPU has no datasheet figure here); its network is
 * assumed (10 Gb/s Ethernet). */
static const LtPlanDevice DEVICES[] = {
    {"h100", 989.4, 66.9, 80, 3350, 450, 50, 5.0, 0.60, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    {"h200", 989.4, 66.9, 141, 4800, 450, 50, 5.0, 0.62, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    {"a100", 312.0, 19.5, 80, 2039, 300, 25, 5.0, 0.65, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    /* fp32 peak, GEMM curve, memory: the fp32 run on one rank (2 threads); bf16
     * peak: the bf16 run; all-reduce: the run under mpirun -np 2 */
    {"cpu", 0.0297, 0.0961, 23.5, 25.48, 0.798, 1.25, 0.50, 1.028, 25,
     "measured on the 2-core CI machine (peak: its GEMM ceiling); network assumed"},
};

int lt_plan_device(const char *name, LtPlanDevice *out) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (!strcasecmp(name, DEVICES[i].name)) {
            *out = DEVICES[i];
            return 0;
        }
    return -1;
}

const char *lt_plan_device_names(void) { return "h100, h200, a100, cpu"; }

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
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(key, KEYS[i].key)) return 1;
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (!strcmp(key, strings[i])) return 1;
    for (size_t i = 0; i < sizeof INFO_KEYS / sizeof INFO_KEYS[0]; i++)
        if (!strcmp(key, INFO_KEYS[i])) return 1;
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
    put_number(f, "threads", cal->threads, 0);
    put_number(f, "seconds", cal->seconds, 0);
    put_string(f, "peak_source", cal->peak_source);
    put_number(f, "peak_tflops", cal->prec == LT_PREC_BF16 ? d->bf16_tflops : d->fp32_tflops, 0);
    put_number(f, "gemm_eff", d->gemm_eff, 0);
    put_number(f, "gemm_half_tokens", d->gemm_half_tokens, 0);
    put_number(f, "mem_gbs", d->mem_gbs, !cal->has_comm && !(d->mem_gib > 0));
    if (d->mem_gib > 0) put_number(f, "mem_gib", d->mem_gib, !cal->has_comm);
    if (cal->has_comm) {
        put_number(f, "intra_gbs", d->intra_gbs, 0);
        put_number(f, "latency_us", d->latency_us, 1);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0) return lt_errorf(err, errlen, "--out %s: %s", path, strerror(errno));
    return 0;
}
