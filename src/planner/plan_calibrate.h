/* plan_calibrate.h - shared between the parts of `lattice plan --calibrate`:
 * plan_calibrate.c (the command, GEMMs, memory, all-reduce) and
 * plan_calibrate_ops.c (the memory-bound ops and the attention core); not a
 * public API. */
#ifndef LT_PLAN_CALIBRATE_H
#define LT_PLAN_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "dist.h"
#include "plan_device.h"

#define MAX_REPS 64
#define MAX_ROUNDS 16
#define MAX_KEPT 128 /* lt_cal_buffer's buffers */

typedef struct {
    int id;
    size_t bytes;
    void *p;
} CalBuffer;

typedef struct {
    LtBackend *be;
    const LtWorld *w;
    const LtComm *comm; /* the world under a launcher with >= 2 ranks, else NULL */
    int cuda, threads;
    LtPrecision prec;
    double seconds;
    /* The budget runs in `rounds` rounds (round: 0-based), each measuring every
     * figure in its share of seconds / rounds; the figures are the medians over
     * the rounds. What a measurement takes on (the GEMM sizes that fit) is
     * chosen in round 0 from the whole share and kept: fit_* (0: not chosen) */
    int rounds, round;
    int fit_ceiling, fit_layers, fit_rows;
    CalBuffer kept[MAX_KEPT]; /* lt_cal_buffer's */
    int nkept;
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

/* Under a launcher: a barrier (ranks start a timed measurement together, as
 * they run a step), and rank 0's n on every rank (so that all take the same
 * number of repetitions through the barriers). Alone: nothing, n. */
void lt_cal_sync(const Cal *c);
int lt_cal_agree(const Cal *c, int n);

/* The fewest repetitions a round takes of each measurement: 3 over the
 * whole run (with 3 rounds, 1 in each). */
int lt_cal_min_reps(const Cal *c);

/* Median seconds of run(arg), after a warm-up in the first round: as many
 * repetitions as fit in this round's part of `slot` seconds (slot / rounds;
 * rank 0's count), at least lt_cal_min_reps, at most MAX_REPS, each after
 * lt_cal_sync. */
double lt_cal_time_median(Cal *c, CalRun run, const void *arg, double slot);

/* A device buffer of `bytes` (zeros when new) kept for the whole
 * calibration: every request of (id, bytes) gets the same one, so that the
 * rounds after the first find their buffers allocated and touched (a fresh
 * allocation's page faults and fill cost a round more than some of its
 * measurements). Two buffers that a measurement uses together need two ids. */
void *lt_cal_buffer(Cal *c, int id, size_t bytes);
/* The kept buffers, freed at the end. */
void lt_cal_free_buffers(Cal *c);

/* A kept buffer (lt_cal_buffer, id 1000 + seed) of n act elements holding
 * small random values (zeros would let a GPU run cooler, and so faster, than
 * on real data). */
void *lt_cal_random_act(Cal *c, size_t n, uint64_t seed);

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
