/* plan.h - the parallelism planner: what fits and what is fast, before any
 * GPU hour is spent (lattice plan).
 *
 * Memory per rank is predicted by category from the model's dimensions and
 * the layout, with the formulas of the buffers the engine allocates (the
 * activation analysis of Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", applied to lattice's own
 * per-layer tensors with flash attention - no s^2 term - and its
 * recomputation modes), and the peak number of micro batches in flight per
 * stage from the pipeline schedule. Step time is predicted from the model
 * FLOPs at a calibrated GEMM efficiency, the schedule simulator's makespan
 * (so the bubble is the schedule's own), and a latency-bandwidth model of the
 * tensor-, pipeline- and data-parallel traffic (NVLink inside a node, the
 * network across nodes), less what the config's overlap switches hide. */
#ifndef LT_PLAN_H
#define LT_PLAN_H

#include <stddef.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one rank holds, in the engine's categories (the summary's "memory
 * bytes per rank" line): grads include the optimizer's gradient shards;
 * comm: the communication buffers (the pipeline's message pool, ZeRO-2's
 * bucket receive buffer and staging ring). */
typedef struct {
    size_t params, grads, optimizer, activations, workspace, comm;
} LtPlanMemory;

static inline size_t lt_plan_total(const LtPlanMemory *m) {
    return m->params + m->grads + m->optimizer + m->activations + m->workspace + m->comm;
}

/* Training memory of pipeline stage `stage` (tensor rank 0, data rank 0) of
 * the layout in cfg on `world` ranks (cfg validated for it) with activations
 * of act_bytes per element; mpi_p2p: the stage-to-stage messages go over MPI
 * (only there does parallel.overlap_p2p_comm post receives ahead, which
 * holds more micro batches in flight). 0, or -1 with the reason in err. */
int lt_plan_memory(const LtConfig *cfg, int world, int stage, size_t act_bytes, int mpi_p2p,
                   LtPlanMemory *out, char *err, size_t errlen);

/* The constants the step-time model reads for one device: a row of
 * plan.c's table, or a calibration file's figures over it. */
typedef struct {
    char name[32];
    double bf16_tflops, fp32_tflops; /* dense peaks (the CPU's: a measured ceiling) */
    double mem_gib, mem_gbs;         /* memory and its bandwidth (read + write) */
    double intra_gbs, net_gbs;       /* all-reduce bus bandwidth per device: inside a
                                      * node, across nodes */
    double latency_us;               /* per ring step of a collective */
    double gemm_eff;                 /* achieved / peak for the model's large GEMMs */
    double gemm_half_tokens;         /* tokens per micro batch at which GEMMs reach half
                                      * of gemm_eff: eff(N) = gemm_eff N / (N + this) */
    char source[256];                /* where the figures come from, for the table head */
} LtPlanDevice;

/* The predicted step of a layout, by part (seconds; lattice plan --layout
 * prints it): compute, the pipeline bubble, the communication the overlap
 * switches leave exposed and what they hide, the optimizer. */
typedef struct {
    double step, compute, bubble, tp_comm, pp_comm, dp_comm, optim;
    double hidden_tp, hidden_pp, hidden_dp;
    double tokens_per_s, mfu;
    char overlap[64]; /* the switches in effect, as words ("none" without) */
} LtPlanStep;

/* The step time of the layout in cfg (validated for `world` ranks,
 * gpus_per_node of them per node) on device dev, with the config's overlap
 * switches; act_bytes and mpi_p2p as for lt_plan_memory. 0, or -1 with err. */
int lt_plan_step(const LtConfig *cfg, int world, int gpus_per_node, const LtPlanDevice *dev,
                 size_t act_bytes, int mpi_p2p, LtPlanStep *out, char *err, size_t errlen);

/* The built-in row of device `name` (case-insensitive): 0, or -1 when unknown. */
int lt_plan_device(const char *name, LtPlanDevice *out);
/* Comma-separated names of the built-in devices, for messages. */
const char *lt_plan_device_names(void);
/* The built-in GPU row whose name appears in a backend's device name ("NVIDIA
 * H100 80GB HBM3" -> "h100") into name[len]: 0, or -1 (name untouched). */
int lt_plan_device_match(const char *device_name, char *name, size_t len);

/* Read a calibration file (lattice plan --calibrate --out FILE; README) for a
 * config trained in `prec`: its figures over the built-in row of the device it
 * names (fields it leaves out come from that row; with no such row it must
 * have them all). 0, or -1 with a message naming the file and the field. */
int lt_plan_calibration_load(const char *path, LtPrecision prec, LtPlanDevice *out, char *err,
                             size_t errlen);

/* What lattice plan --calibrate measured, for the file it writes. */
typedef struct {
    LtPlanDevice dev;       /* peak (in `prec`), gemm_eff, gemm_half_tokens, mem_gbs,
                             * mem_gib; intra_gbs and latency_us when has_comm */
    LtPrecision prec;
    int has_comm;           /* run on >= 2 ranks: the all-reduce figures are there */
    int ranks, threads;
    double seconds;         /* the budget it ran under */
    const char *device_name, *peak_source;
} LtPlanCalibration;

/* Write cal as a calibration file: 0, or -1 with the reason in err. */
int lt_plan_calibration_write(const char *path, const LtPlanCalibration *cal, char *err,
                              size_t errlen);

/* lattice plan CONFIG [--gpus N] [--gpus-per-node G] [--gpu NAME] [--gpu-mem-gib M]
 *              [--calibration FILE] [--top K] [--layout] [section.key=value ...] */
int lt_cmd_plan(int argc, char **argv);
/* lattice plan --calibrate [--device auto|cpu|cuda] [--precision fp32|bf16]
 *              [--seconds S] [--out FILE]: measure the constants on this machine */
int lt_cmd_plan_calibrate(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
