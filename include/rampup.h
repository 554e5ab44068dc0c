/* rampup.h - batch-size ramp-up (train.rampup_batch_size), as Megatron-LM's
 * --rampup-batch-size START INCREMENT SAMPLES: the global batch starts at
 * START and grows by INCREMENT each time another SAMPLES / ((G - START) /
 * INCREMENT) samples have been consumed, until G (train.global_batch_size)
 * once more than SAMPLES samples have been consumed. Each step's batch is a
 * function of the samples consumed before it (Megatron's
 * RampupBatchsizeNumMicroBatchesCalculator.update, in the same floating-point
 * arithmetic), so step k starts at the samples steps 0 .. k-1 consumed. A
 * zeroed LtRampup (start 0) is no ramp-up: every step takes `global`.
 * Pure functions; tests/test_config.c holds them to Megatron's own code
 * (tests/megatron_rampup_fixture.py). */
#ifndef LT_RAMPUP_H
#define LT_RAMPUP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    long start, increment, samples; /* START INCREMENT SAMPLES; start 0: no ramp-up */
    long global;                    /* the batch after the ramp (train.global_batch_size) */
} LtRampup;

/* Parse "START INCREMENT SAMPLES" (three decimal integers; "" is no ramp-up)
 * for the final batch `global` into r, with Megatron's refusals: START and
 * INCREMENT positive, START below global, global - START a multiple of
 * INCREMENT, SAMPLES positive (Megatron divides by it). 0, or -1 with a
 * message naming train.rampup_batch_size in err. */
int lt_rampup_parse(const char *s, long global, LtRampup *r, char *err, size_t errlen);
/* The global batch of a step that starts after `consumed` samples. */
long lt_rampup_batch(const LtRampup *r, uint64_t consumed);
/* Samples consumed before step `step` (0-based): the batches of steps 0 ..
 * step-1 summed. */
uint64_t lt_rampup_consumed(const LtRampup *r, long step);
/* The optimizer steps of a run of train_samples samples, as Megatron's
 * update_train_iters counts them: ramp-up steps while the samples consumed
 * are at most SAMPLES and at most train_samples, then whole batches of
 * `global` (a partial last batch is dropped). */
long lt_rampup_steps(const LtRampup *r, uint64_t train_samples);

#ifdef __cplusplus
}
#endif

#endif
