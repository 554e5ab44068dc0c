/* plan_device.h - the planner's devices: the constants its step-time model
 * reads for a device (a built-in row, or a calibration file's figures over
 * it), the calibration file (docs/formats.md), and `lattice plan
 * --calibrate`, which measures them on this machine.
 *
 * plan_device.c holds the table and the file; plan_calibrate.c the
 * measuring command. The planner proper (plan.h) reads devices from here and
 * nothing here reads the planner. */
#ifndef LT_PLAN_DEVICE_H
#define LT_PLAN_DEVICE_H

#include <stddef.h>

#include "config.h" /* LtPrecision */

#ifdef __cplusplus
extern "C" {
#endif

/* The constants the step-time model reads for one device: a built-in row,
 * or a calibration file's figures over it. */
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
    /* The memory-bound work, GB/s of the bytes each op moves as its kernel's design
     * note counts them (read + write): the element-wise ops of a layer (norms,
     * activations, residual adds, rotary embeddings, embedding gathers and their
     * gradients, gradient zeroing), the loss head's softmax / cross-entropy (per
     * logit), the optimizer's pass over parameters and moments. */
    double elem_gbs, xent_gbs, optim_gbs;
    /* The attention core, TFLOP/s of the FLOPs the model counts for it (4 s h per
     * token forward over the full square, twice that backward): lattice's own
     * (the CPU loop, or its CUDA kernels) and cuDNN's (0: none on this device). */
    double attn_fwd_tflops, attn_bwd_tflops, cudnn_fwd_tflops, cudnn_bwd_tflops;
    /* The same over a sliding window's band (its query-key pairs in the model's
     * count: 8 pairs h per token forward, twice that backward), whose small
     * tiles run slower: lattice's kernels, and cuDNN's forward and deterministic
     * backward (0: not measured - the causal rates then). */
    double attn_win_fwd_tflops, attn_win_bwd_tflops, cudnn_win_fwd_tflops, cudnn_win_bwd_tflops;
    /* What ranks doing the same work wait for each other at the blocking
     * collective that ends it (the mean over the ranks): sync_skew_us per
     * collective plus sync_skew of the work since the previous one (0, 0:
     * not measured, or a GPU row) */
    double sync_skew_us, sync_skew;
    /* What a calibration measured with: threads per rank (0: a GPU, or a
     * built-in row) and ranks on the node. */
    int threads, ranks;
} LtPlanDevice;

/* 1 when dev is a GPU's (every device but the one named "cpu"). */
int lt_plan_device_is_gpu(const LtPlanDevice *dev);
/* The attention core's rate at sequence length T and head dimension HD, as a
 * fraction of its rate at T 2048, HD 128 (what the GPU rows' and a GPU
 * calibration's attention figures hold), for kind LT_PLAN_ATTN_*; bwd: the
 * backward's. Measured on an H200 and taken for every GPU; 1 on the CPU. */
enum { LT_PLAN_ATTN_LATTICE, LT_PLAN_ATTN_CUDNN, LT_PLAN_ATTN_CUDNN_NONDET };
double lt_plan_attn_shape(const LtPlanDevice *dev, int kind, int bwd, int T, int HD);

/* The built-in row of device `name` (case-insensitive): 0, or -1 when unknown. */
int lt_plan_device(const char *name, LtPlanDevice *out);
/* Comma-separated names of the built-in devices, for messages. */
const char *lt_plan_device_names(void);
/* The built-in GPU row whose name appears in a backend's device name ("NVIDIA
 * H100 80GB HBM3" -> "h100") into name[len]: 0, or -1 (name untouched). */
int lt_plan_device_match(const char *device_name, char *name, size_t len);

/* A CPU device's rates (peaks, memory-bound bandwidths, attention) for
 * `threads` threads per rank instead of dev->threads, scaled linearly in the
 * thread count (the CPU's GEMMs, loops and streams run one per thread; on
 * the calibrated node ranks x threads fill the cores). No change for a
 * device without a thread count (a GPU, a built-in row) or threads <= 0.
 * Returns the factor applied (1: none). */
double lt_plan_device_scale_threads(LtPlanDevice *dev, double threads);

/* The threads per rank a CPU run of `ranks_per_node` ranks has on the
 * machine dev was calibrated on, whose cores are dev->threads x dev->ranks:
 * train.threads (config_threads) when > 0, else the cores over the ranks as
 * the engine takes them - at most the cores' share, fractional where ranks
 * outnumber the cores and share them. 0 for a device without a thread count. */
double lt_plan_device_run_threads(const LtPlanDevice *dev, int config_threads, int ranks_per_node);

/* The device lattice plan uses: the built-in row of gpu (h100 when NULL), or
 * the figures of the calibration file at path `calibration` for a config
 * trained in prec (gpu, when given too, must name the device it is for).
 * 0, or -1 with the reason in err. */
int lt_plan_device_choose(const char *gpu, const char *calibration, LtPrecision prec,
                          LtPlanDevice *out, char *err, size_t errlen);

/* Read a calibration file (lattice plan --calibrate --out FILE) for a config
 * trained in `prec`: its figures over the built-in row of the device it
 * names (fields it leaves out come from that row; with no such row it must
 * have them all). 0, or -1 with a message naming the file and the field. */
int lt_plan_calibration_load(const char *path, LtPrecision prec, LtPlanDevice *out, char *err,
                             size_t errlen);

/* What lattice plan --calibrate measured, for the file it writes. */
typedef struct {
    LtPlanDevice dev;       /* peak (in `prec`), gemm_eff, gemm_half_tokens, mem_gbs,
                             * mem_gib, the memory-bound and attention rates; intra_gbs
                             * and latency_us when has_comm */
    LtPrecision prec;
    int has_comm;           /* run on >= 2 ranks: the all-reduce figures are there */
    int has_cudnn;          /* cuDNN's attention was measured (a GPU with cuDNN) */
    int ranks, ranks_per_node, threads;
    double seconds;         /* the budget it ran under */
    const char *device_name, *peak_source;
} LtPlanCalibration;

/* Write cal as a calibration file: 0, or -1 with the reason in err. */
int lt_plan_calibration_write(const char *path, const LtPlanCalibration *cal, char *err,
                              size_t errlen);

/* lattice plan --calibrate [--device auto|cpu|cuda] [--precision fp32|bf16]
 *              [--seconds S] [--out FILE]: measure the constants on this
 * machine (plan_calibrate.c). */
int lt_cmd_plan_calibrate(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
