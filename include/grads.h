/* grads.h - gradient finalisation: everything between a step's backward
 * passes and the optimizer update, in one place (Megatron's
 * finalize_model_grads).
 *
 * The flat gradient space is cut into buckets of whole parameter groups
 * (embeddings, one layer, final LayerNorm): groups are taken in backward order
 * from the end of the table and a bucket closes once it spans bucket_size
 * elements (parallel.bucket_size). The data-parallel reduction and the
 * parameter gather run bucket by bucket (lt_optim_set_buckets).
 *
 * A step's gradients become final in this order:
 *   1. during backward (the model's LtGradReadyFn hook, installed here):
 *      with ZeRO-2's gradient buckets (several data-parallel ranks) each
 *      finished parameter group of every micro batch is handed over: its
 *      sequence-parallel norm gradients are summed over TP, then the group is
 *      reduce-scattered into this rank's optimizer shard. Otherwise, in each
 *      chunk's last micro batch (lt_model_set_final_pass), a group whose
 *      gradient is final gets its sequence-parallel sums, and a bucket whose
 *      groups are all final starts its data-parallel reduction at once when
 *      the optimizer overlaps it (parallel.overlap_grad_reduce);
 *   2. lt_grads_finalize, after the last micro batch: the sequence-parallel
 *      sums of whatever was not final yet; the tied embedding's two halves (the
 *      first stage's input embedding and the last stage's LM head) summed over
 *      the embedding group; the data-parallel reduction of the buckets not
 *      started yet (all-reduce for ZeRO 0, reduce-scatter for ZeRO 1; the
 *      embedding group's own bucket for ZeRO-2), then the wait for all. The
 *      bucket holding a tied embedding shared with another stage waits for
 *      its sum, so it always starts here;
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
 * group and the overlap switches). emb: the embedding group (first and last
 * pipeline stage) when the LM head is tied to the embedding across stages,
 * else NULL. bucket_size: elements per bucket (see above). Sets the
 * optimizer's buckets (and with the model's gradient buckets on, its receive
 * buffer) and installs the model's gradient hook and its parameter hook
 * (a forward waits for its group's parameter gather). */
LtGrads *lt_grads_create(LtModel *m, LtOptimizer *opt, const LtComm *emb, size_t bucket_size);
void lt_grads_destroy(LtGrads *g);

/* The routed experts' buffers under expert parallelism (the model's etable;
 * eopt attached to the model's optimizer, lt_optim_attach_experts), when eopt
 * overlaps its reduction or gather (lt_optim_set_overlap): eopt's buckets are
 * cut between MoE layers' expert ranges in backward order as the dense ones
 * (bucket_size elements), a bucket's expert-data-parallel reduction starts in
 * the backward once every MoE layer in it is final (their layers' groups in
 * a chunk's last micro batch), and a MoE layer's forward also waits for its
 * experts' parameter gather. Nothing otherwise: the experts are reduced whole
 * after the dense buckets (lt_optim_reduce_grads). */
void lt_grads_set_experts(LtGrads *g, LtOptimizer *eopt, size_t bucket_size);

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
