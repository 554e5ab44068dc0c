/* metrics.h - throughput, FLOPs utilisation and the metrics file.
 *
 * MFU = achieved model FLOP/s per device / peak FLOP/s of the device. The
 * model FLOPs are lt_model_flops_per_sample() (Megatron's dense-GPT count,
 * no recompute). Peak: logging.peak_tflops when set, else a table by device
 * name and precision for GPUs, else (CPU) a measured GEMM peak. */
#ifndef LT_METRICS_H
#define LT_METRICS_H

#include <stdio.h>

#include "backend.h"
#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Peak dense TFLOP/s of one device of this backend in the given precision.
 * *source is set to "config", "table" or "measured". */
double lt_peak_tflops(LtBackend *be, const LtConfig *cfg, const char **source);

/* Table lookup by GPU name ("NVIDIA H100 80GB HBM3", ...); 0 when unknown. */
double lt_peak_table(const char *device_name, LtPrecision prec);

typedef struct {
    FILE *f;       /* NULL when no metrics file */
    char path[LT_PATH_MAX];
    int error;     /* errno of the first failed write (0: none) */
    const struct LtMoeReport *moe; /* lt_metrics_moe_next's, for the next train line */
    int nmoe;
} LtMetricsFile;

/* Open for append (creating directories is the caller's job); exits with code
 * 2 and a clear message when the file cannot be opened. Every line is one
 * JSON object (non-finite numbers as null) written unbuffered; the first
 * write error is said on stderr at once, cuts the partial line back (the file
 * ends at its last complete line), stops further writes, and is kept for
 * lt_metrics_status, so the caller can exit non-zero at the end instead of
 * leaving a silently truncated file. */
void lt_metrics_open(LtMetricsFile *m, const char *path);
void lt_metrics_close(LtMetricsFile *m);
/* 0, or -1 with the failed write's path and reason in err. */
int lt_metrics_status(const LtMetricsFile *m, char *err, size_t errlen);
/* Where one step's time went on this rank, in milliseconds of the host clock
 * (with the CPU backend the work itself; with CUDA what the host spent issuing
 * it and waiting). forward/backward: the passes (tensor-parallel
 * communication inside them included); grads: gradient finalisation (the
 * data-parallel reduction); optimizer: norm, clipping, AdamW and the parameter
 * gather; data: fetching the next step's samples; bubble: blocked in the
 * pipeline schedule's receive waits, waiting for a neighbouring stage's
 * activation or gradient (0 without pipelining); other: the rest (starting
 * pipeline messages, the step's device wait). These add up to the step.
 * comm_tp/dp/pp: exposed communication - the time the training thread was
 * blocked inside each group's operations, the part the rank could not hide;
 * pp (with the embedding group) without the bubble. comm_*_busy: the time
 * each group's communication was under way, also behind compute (the overlap
 * worker's time; without overlap the same as exposed, pp's with the bubble). */
typedef struct {
    double forward, backward, grads, optimizer, data, bubble, other;
    double comm_tp, comm_dp, comm_pp;
    double comm_tp_busy, comm_dp_busy, comm_pp_busy;
    double comm_ep, comm_ep_busy; /* the expert-parallel all-to-alls (inside forward and
                                   * backward; 0 without expert parallelism) */
    /* parts of forward + backward (devclock.h's part kinds): the attention core,
     * the loss head, whole MoE layers and, of those, the experts' GEMMs */
    double attention, loss_head, moe, moe_experts;
} LtStepTimes;

/* One MoE layer's statistics of a step (the trainer's, over every rank): its
 * aux and z losses as they enter the step's objective, the kept assignments
 * of the most loaded expert and of the mean expert per routed micro batch,
 * and the dropped assignments. */
typedef struct LtMoeReport {
    int layer;
    double aux, z, load_max, load_mean;
    long dropped;
} LtMoeReport;
/* The next train line carries these n layers' statistics as "moe": {"layer":
 * [...], "aux_loss": [...], "z_loss": [...], "load_max": [...], "load_mean":
 * [...], "dropped": [...]}. r must stay valid until then. */
void lt_metrics_moe_next(LtMetricsFile *m, const LtMoeReport *r, int n);
/* times may be NULL (no breakdown in the line). */
void lt_metrics_train(LtMetricsFile *m, long step, long global_batch, uint64_t samples,
                      double loss, double lr, double grad_norm, double tokens_per_sec,
                      double tflops, double mfu, double step_ms, const LtStepTimes *times);
void lt_metrics_eval(LtMetricsFile *m, long step, double val_loss, long samples);

/* Median of n doubles (array is reordered). */
double lt_median(double *x, int n);

#ifdef __cplusplus
}
#endif

#endif
