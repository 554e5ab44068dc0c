/* plan_calibrate.h - shared between the parts of `lattice plan --calibrate`:
 * plan_calibrate.c (the command, GEMMs, memory, all-reduce) and
 * plan_calibrate_ops.c (the memory-bound ops and the attention core); not a
 * public API. */
#ifndef LT_PLAN_CALIBRATE_H
#define LT_PLAN_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "dist.h"
#include "plan_device.h"

#define MAX_REPS 64

typedef struct {
    LtBackend *be;
    const LtWorld *w;
    int cuda, threads;
    LtPrecision prec;
    double seconds;
    double peak;       /* TFLOP/s: datasheet, or the measured ceiling */
    double ceiling;    /* TFLOP/s: the best square GEMM */
    /* With a measured peak (no datasheet figure), the best square GEMM runs in
     * every round of the later measurements too, and their efficiencies are
     * taken against it in the same rounds (time_rounds) */
    const struct GemmJob *ref;
} Cal;

typedef void (*CalRun)(Cal *c, const void *arg);

/* The median of t[0..n) (t is sorted in place). */
double lt_cal_median(double *t, int n);

/* Median seconds of run(arg) after one warm-up: as many repetitions as fit in
 * `slot` seconds, at least 3, at most MAX_REPS. */
double lt_cal_time_median(Cal *c, CalRun run, const void *arg, double slot);

/* A device buffer of n act elements holding small random values (zeros would
 * let a GPU run cooler, and so faster, than on real data). */
void *lt_cal_random_act(LtBackend *be, size_t n, uint64_t seed);

/* The memory-bound ops through the backend into dev's elem_gbs (LayerNorm
 * forward with its residual add and backward, GeLU forward and backward:
 * their bytes over their summed times), xent_gbs (the fused softmax /
 * cross-entropy over a vocabulary-sized block of rows) and optim_gbs
 * (AdamW), bytes as the kernels' design notes count them; within about
 * `budget` seconds. */
void lt_cal_memory_bound(Cal *c, LtPlanDevice *dev, double budget);

/* The attention core forward and backward at a few sequence lengths into
 * dev's attn_* figures (the backend's own attention: the CPU loop, or
 * lattice's CUDA kernels) and, on a GPU whose cuDNN runs, cudnn_* (*has_cudnn
 * set): TFLOP/s of the FLOPs the model counts (4 B T^2 NH HD forward, twice
 * that backward), the summed FLOPs over the summed times. */
void lt_cal_attention(Cal *c, LtPlanDevice *dev, int *has_cudnn, double budget);

#endif
