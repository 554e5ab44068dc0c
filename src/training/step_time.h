/* step_time.h - internal: the breakdown of a training step (metrics.h's
 * LtStepTimes) from the pipeline's pass times, the loop's phase times and the
 * groups' communication counters - or, where the backend has timers (a GPU),
 * from the device's clock (devclock.h); the run's progress (elapsed time,
 * ETA). src/training/step_time.c; used by
 * src/training/trainer.c. Not a public header. */
#ifndef LT_STEP_TIME_H
#define LT_STEP_TIME_H

#include "devclock.h"
#include "engine.h"
#include "metrics.h"

#define LT_STEP_MARKS 12

/* Start the device clock where the backend has timers, its groups'
 * operations counted for their kind (says so in the log). */
void lt_step_clock_start(LtRun *r);
/* The groups' communication counters now: the start of a step's interval. */
void lt_step_comm_mark(const LtRun *r, double out[LT_STEP_MARKS]);
/* The breakdown of a step of dt seconds that began at mark busy0: data_s,
 * grads_s, optim_s the host's times of those phases; dev: the device clock's
 * seconds per kind (lt_devclock_collect), NULL where the host timed it. */
LtStepTimes lt_step_times(LtRun *r, const double busy0[LT_STEP_MARKS], double dt, double data_s,
                          double grads_s, double optim_s, const double *dev);

/* Insert v into x[0..n-1], ascending, making x[0..n] ascending. */
void lt_sorted_insert(double *x, int n, double v);
/* "elapsed 1m23s eta 4m10s": elapsed_s, and the remaining steps times the
 * median of the n step times so far (sorted: ascending); the ETA is left out
 * before 2 steps. */
void lt_step_progress(double elapsed_s, const double *sorted, int n, long remaining, char *buf,
                      size_t len);

#endif
