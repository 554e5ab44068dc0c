/* grads.h - gradient finalisation: everything between a step's backward
 * passes and the optimizer update, in one place (Megatron's
 * finalize_model_grads).
 *
 * A step's gradients become final in this order:
 *   1. during backward, with gradient buckets (ZeRO-2 over several data-
 *      parallel ranks), each finished parameter group is handed over: its
 *      sequence-parallel norm gradients are summed over TP, then the group is
 *      reduce-scattered into this rank's optimizer shard (the model's
 *      LtGradReadyFn hook, installed here);
 *   2. lt_grads_finalize, after the last micro batch: the sequence-parallel
 *      sums of whatever was not bucketed; the tied embedding's two halves (the
 *      first stage's input embedding and the last stage's LM head) summed over
 *      the embedding group; the data-parallel reduction (all-reduce for ZeRO 0,
 *      reduce-scatter for ZeRO 1; the embedding group's own bucket for ZeRO-2);
 *   3. lt_grads_sync_tied, after the update: the last stage's copy of the tied
 *      embedding takes the first stage's values, bit for bit.
 * The sums commute (each is over a different group), so the order is a
 * choice, fixed here so every layout reduces the same way. */
#ifndef LT_GRADS_H
#define LT_GRADS_H

#include "comm.h"
#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtGrads LtGrads;

/* Finalisation for model m and optimizer opt (which owns the data-parallel
 * group). emb: the embedding group (first and last pipeline stage) when the
 * LM head is tied to the embedding across stages, else NULL. With the
 * model's gradient buckets on, sizes the optimizer's receive buffer and
 * installs the bucket hook. */
LtGrads *lt_grads_create(LtModel *m, LtOptimizer *opt, const LtComm *emb);
void lt_grads_destroy(LtGrads *g);

/* After the step's last backward: every gradient final and reduced as the
 * optimizer expects it (collective over TP, the embedding group and DP). */
void lt_grads_finalize(LtGrads *g);

/* After the update: the tied embedding's copies made identical (collective
 * over the embedding group; nothing without one). */
void lt_grads_sync_tied(LtGrads *g);

#ifdef __cplusplus
}
#endif

#endif
