/* step_checks.h - internal: what the training loop checks before a step's
 * update: injected faults for the tests (LT_INJECT_NONFINITE) and loss spikes
 * (train.loss_spike_zscore). src/training/step_checks.c; used by src/training/trainer.c. Not a
 * public header. */
#ifndef LT_STEP_CHECKS_H
#define LT_STEP_CHECKS_H

#include "engine.h"

#define LT_INJECT_MAX 4
/* Test hook: LT_INJECT_NONFINITE="KIND:STEP[:RANK][,...]" (KIND loss, grad or
 * spike, STEP 1-based, RANK default 0; at most LT_INJECT_MAX entries over all
 * ranks, more is an input error) makes that rank's loss sum NaN, the first
 * element of the reduced gradient it holds +Inf, or its loss sum 100 times
 * larger, at that step (an extra host wait that step), for the tests of
 * non-finite steps and loss spikes. Unset in normal runs. */
typedef struct {
    int kind[LT_INJECT_MAX]; /* 0 none, 1 loss (NaN), 2 grad (Inf), 3 spike (loss x 100) */
    long step[LT_INJECT_MAX];
} LtInject;

/* train.loss_spike_zscore: the losses of the last train.loss_spike_window
 * steps whose update was applied (a ring). */
typedef struct {
    double *x;
    int n, cap, next;
} LtSpikeWindow;

/* The entries of LT_INJECT_NONFINITE for this rank (an input error when the
 * variable is malformed). */
LtInject lt_inject_parse(int rank);
/* Apply the entries for step (0-based) to the loss sum at loss_dev or the
 * reduced gradient. */
void lt_inject_nonfinite(LtRun *r, const LtInject *in, long step, double *loss_dev);
/* Whether this step's loss (its sum on this rank at loss_dev) is a spike:
 * more than train.loss_spike_zscore standard deviations above the mean of a
 * full window. It costs a host wait and the loss's reduction before the
 * update; every rank reduces the same sum, so all decide alike. A spike is
 * skipped like a non-finite step: its loss is made NaN on the device, which
 * the gradient norm carries to every rank. *loss: the step's mean loss. */
int lt_loss_spike(LtRun *r, const LtSpikeWindow *sw, double *loss_dev, double tokens,
                  double *loss, double *z);
void lt_spike_window_push(LtSpikeWindow *sw, double loss);

#endif
