/* optim.h - the distributed optimizer: AdamW over flat buffers with ZeRO
 * sharding across data-parallel ranks, gradient reduction, global-norm
 * clipping and the learning-rate schedule.
 *
 * The flat parameter/gradient index space (table order, padded to `flat`
 * elements, a multiple of the DP size) is split into DP equal contiguous
 * shards; DP rank r owns [r*S, (r+1)*S). A parameter may straddle shards.
 *   stage 0: gradients all-reduced; every rank keeps all master weights and
 *            moments and updates everything.
 *   stage 1: gradients reduce-scattered after the last micro batch; master
 *            weights and moments exist only for the shard; updated shards are
 *            all-gathered back into the compute-dtype parameters.
 *   stage 2: as 1, but gradients are reduce-scattered per micro batch and per
 *            parameter group as backward produces them (the model's gradient
 *            bucket), so no rank holds a full gradient buffer.
 * With one DP rank every stage runs as stage 0 (identical math, no copies).
 * Gradients are summed over DP (each micro batch's loss is pre-scaled by
 * 1/(global batch tokens)), so the result is the mean-loss gradient.
 * All buffers are memory of the backend. The dp/tp groups take the backend's
 * buffers (host groups for the CPU backend, device-buffer groups - NCCL or
 * staged MPI - for CUDA); host scalars and the gathered host state go through
 * lt_comm_host() of them. */
#ifndef LT_OPTIM_H
#define LT_OPTIM_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtOptimizer {
    LtBackend *be;
    const LtParamTable *table;
    const LtComm *dp;       /* data-parallel group (size 1 = no communication) */
    const LtComm *tp;       /* tensor-parallel group for the grad norm (NULL: tp = 1) */
    const LtComm *pp;       /* pipeline group for the grad norm (NULL: pp = 1) */
    const LtComm *ep;       /* an expert optimizer's expert-parallel group (lt_optim_set_ep) */
    struct LtOptimizer *experts; /* lt_optim_attach_experts: the experts' optimizer and */
    void *eparams;          /* the model's expert buffers, which this optimizer's */
    float *egrads;          /* reduction, norm, step and skip cover too */
    int tp_rank;
    int zero_stage, dp_size, dp_rank;
    size_t flat;            /* padded flat size, multiple of dp_size */
    size_t shard_begin, shard_len; /* elements this rank updates */
    float *master, *m, *v;  /* shard_len each */
    float *grad_shard;      /* stage >= 1: reduced gradient of the shard (shard_len) */
    float *bucket_recv;     /* stage 2 without overlap: receive buffer of one bucket
                             * reduction (with it, the staging ring's) */
    size_t bucket_recv_len;
    size_t bucket_len;      /* stage 2: the largest bucket the model hands over */
    size_t piece_len;       /* stage 2: a bucket is reduced in pieces of up to this */
    /* buckets (lt_optim_set_buckets): bucket k is flat range [bounds[k], bounds[k+1]);
     * gradients are reduced and parameters gathered bucket by bucket */
    int nbuckets;
    size_t *bounds;
    int *counts;            /* [k * dp_size + r]: rank r's part of bucket k (its shard) */
    LtCommRequest *greq;    /* stages 0/1: bucket k's gradient reduction in flight */
    LtCommRequest *preq;    /* [k * dp_size + r]: bucket k's parameter gather in flight */
    const LtComm *grad_comm, *param_comm; /* dp, or its background companion (overlap) */
    int overlap_grad, overlap_param;
    struct LtOptimRing *ring; /* stage 2 with overlap: bucket reductions in flight */
    long step;              /* updates applied so far */
    double beta1, beta2, eps, weight_decay;
    size_t state_bytes;     /* master + moments held by this rank */
    size_t grad_bytes;      /* gradient memory held by the optimizer (shards) */
    size_t comm_bytes;      /* ZeRO-2's bucket receive buffer and staging ring */
    double *scalars;        /* device: [0] sum of squares for lt_optim_grad_norm, [1] holds
                             * the float clip coefficient of lt_optim_clip_coef, [2] the
                             * non-finite-loss flag of lt_optim_grad_sumsq */
} LtOptimizer;

/* Padded flat size for a table split over dp ranks (shards a multiple of 64). */
size_t lt_optim_flat_size(const LtParamTable *t, int dp);

/* host_init: fp32 initial values of the full table (table->total elements). */
LtOptimizer *lt_optim_create(LtBackend *be, const LtParamTable *t, const LtConfig *cfg,
                             const LtComm *dp, size_t flat, const float *host_init);
void lt_optim_destroy(LtOptimizer *o);

/* Zero the gradient accumulators the optimizer owns (stage 2 shard). */
void lt_optim_zero_grad(LtOptimizer *o);

/* Stage 2: buckets of up to bucket_len elements, reduced in pieces of up to
 * piece_len; sizes the receive buffer (or, with overlap_grad_reduce, the
 * staging ring) for a piece; once. */
void lt_optim_set_bucket_size(LtOptimizer *o, size_t bucket_len, size_t piece_len);

/* Stage 2 bucket consumer (LtGradReadyFn-compatible body): reduce-scatter
 * grads of flat range [begin, begin+len) held in `bucket` into the shards and
 * zero the bucket. */
void lt_optim_reduce_bucket(LtOptimizer *o, float *bucket, size_t begin, size_t len);

/* After the last micro batch: stage 0 all-reduces `grads` (flat), stage 1
 * reduce-scatters it into the shard, bucket by bucket (the buckets not
 * started yet are started from the last to the first, then every bucket is
 * waited for); stage 2 waits for the bucket reductions still in flight. */
void lt_optim_reduce_grads(LtOptimizer *o, float *grads);

/* Buckets: n contiguous ranges of the flat space, bounds[0] = 0 < bounds[1] <
 * ... < bounds[n] = flat (copied; the same on every data-parallel rank).
 * Without this call the whole space is one bucket. */
void lt_optim_set_buckets(LtOptimizer *o, const size_t *bounds, int n);
/* The overlap switches (collective over the data-parallel group when one is
 * on: it makes the group's background companion, lt_comm_background).
 * grad_reduce: bucket reductions run on the companion, so that a bucket
 * started during backward (lt_optim_bucket_start) proceeds behind it; stage 2
 * reduces its per-group buckets there too, through staging copies (at most
 * LT_OPTIM_RING in flight). param_gather (stage >= 1): lt_optim_step leaves
 * the bucket gathers in flight on the companion; lt_optim_params_wait waits
 * for those a forward needs. Either way every bucket is reduced and gathered
 * by the same calls, so the results are bit-identical with the switches off. */
void lt_optim_set_overlap(LtOptimizer *o, int grad_reduce, int param_gather);
#define LT_OPTIM_RING 2
/* Stages 0/1: start bucket k's reduction of `grads` (flat) now (its
 * gradients are final); lt_optim_reduce_grads waits for it. */
void lt_optim_bucket_start(LtOptimizer *o, int k, float *grads);
/* The bucket holding flat element i. */
int lt_optim_bucket_of(const LtOptimizer *o, size_t i);
/* Wait for the parameter gathers of every bucket meeting flat range
 * [begin, end) (nothing pending: returns at once). */
void lt_optim_params_wait(LtOptimizer *o, size_t begin, size_t end);
void lt_optim_params_wait_all(LtOptimizer *o);

/* Tensor parallelism: the table holds this TP rank's shards; the grad norm
 * then sums over the TP group too, counting replicated parameters once. */
void lt_optim_set_tp(LtOptimizer *o, const LtComm *tp);

/* Pipeline parallelism: the table holds this stage's parameters; the grad
 * norm then sums over the pipeline group too (tied copies count once). */
void lt_optim_set_pp(LtOptimizer *o, const LtComm *pp);

/* An expert optimizer (model.h's etable under expert parallelism; its dp group
 * the expert-data-parallel group): its table holds this EP rank's experts, so
 * its part of the grad norm sums over the EP group too, every parameter counted.
 * Under expert tensor parallelism lt_optim_set_tp takes the ETP group: the
 * table holds slices of the experts, and their whole tensors (proj.bias) count
 * on ETP rank 0 only. */
void lt_optim_set_ep(LtOptimizer *o, const LtComm *ep);
/* Make the expert optimizer e (lt_optim_set_ep; pipeline group set alike) part
 * of o, the model's optimizer, with the model's expert buffers: from then on
 * o's lt_optim_zero_grad, lt_optim_reduce_grads (e's after o's), grad_sumsq and
 * grad_norm (one sum of squares for the whole model), lt_optim_step (e takes
 * the same clip coefficient and skip mark) and lt_optim_skipped cover e too. e
 * stays the caller's to destroy. Its ZeRO stage is at most 1: the experts'
 * gradients stay whole on the rank through the step (the model's egrads) and
 * are reduce-scattered after the last micro batch. */
void lt_optim_attach_experts(LtOptimizer *o, LtOptimizer *e, void *eparams, float *egrads);

/* ss_dev[0] (one double of device memory, overwritten) = the global sum of
 * squares of the reduced gradient, summed over DP, TP and PP on the device:
 * the host does not wait. Collective over those groups. With loss_dev (this
 * rank's loss sum on the device), a non-finite loss on any rank makes the sum
 * NaN on every rank, so that every rank skips the step (clip_coef). */
void lt_optim_grad_sumsq(LtOptimizer *o, const float *grads, double *ss_dev,
                         const double *loss_dev);
/* The reduced gradient lt_optim_grad_sumsq reads on this rank: grads itself
 * (ZeRO 0), else this rank's shard (its first element). */
float *lt_optim_grad_base(LtOptimizer *o, float *grads);
/* The step just taken was skipped on the device (its sum of squares was not
 * finite): the next step's bias correction counts it out. */
void lt_optim_skipped(LtOptimizer *o);
/* Global L2 norm of the reduced gradient on the host (collective; waits for
 * the device: for tests and tools, the trainer reads it with the metrics). */
double lt_optim_grad_norm(LtOptimizer *o, const float *grads);
/* The clip coefficient of lt_clip_coef computed on the device from ss_dev
 * (0 when the sum of squares is not finite); returns a device scalar valid
 * until the next call, for lt_optim_step's grad_scale_dev. */
const float *lt_optim_clip_coef(LtOptimizer *o, const double *ss_dev, double clip);

/* One AdamW update with learning rate lr on this rank's shard, gradients
 * multiplied by grad_scale and by *grad_scale_dev (a device scalar; NULL = 1)
 * first; then the compute-dtype parameters `params` (flat) are made whole
 * again on every rank, bucket by bucket (with param_gather overlap the
 * gathers are left in flight: lt_optim_params_wait before reading params). */
void lt_optim_step(LtOptimizer *o, void *params, const float *grads, double lr,
                   double grad_scale, const float *grad_scale_dev);

/* The elements [*begin, *begin + *len) of the flat index space (clipped to
 * the table) whose fp32 state a DP rank holds: its ZeRO shard, everything
 * with ZeRO 0 or one DP rank. For loading before the optimizer exists. */
void lt_optim_held_range(const LtParamTable *t, int zero_stage, int dp_size, int dp_rank,
                         size_t *begin, size_t *len);
/* The elements this rank saves in a checkpoint: its DP rank's slice of the
 * flat index space, whatever the ZeRO stage (with ZeRO 0 every DP rank holds
 * all of it, and each saves its slice, in parallel with the others). */
void lt_optim_save_range(const LtOptimizer *o, size_t *begin, size_t *len);
/* Copy elements [begin, begin + len), which this rank holds, of the master
 * weights and moments to host arrays of len elements (m/v may be NULL). */
void lt_optim_download_state(LtOptimizer *o, size_t begin, size_t len, float *master, float *m,
                             float *v);
/* Load the state: master holds the whole table (table->total); m and v (NULL:
 * zero moments) the elements of lt_optim_held_range. step: updates applied. */
void lt_optim_load_state(LtOptimizer *o, const float *master, const float *m, const float *v,
                         long step);

/* Learning rate used by update number `step` (0-based): linear warmup
 * lr*(step+1)/warmup over the first warmup_steps updates, then
 * optimizer.lr_decay_style with Megatron-LM's get_lr formulas
 * (OptimizerParamScheduler, init_lr 0) at num_steps = step: cosine or linear
 * from lr to min_lr over updates warmup..decay_steps; constant lr; inverse
 * square root lr*sqrt(max(warmup,1)/max(step,1)), at least min_lr, up to
 * decay_steps; wsd lr until the last lr_wsd_decay_steps of decay_steps, then
 * down to min_lr by lr_wsd_decay_style. After decay_steps: min_lr (constant:
 * lr). Megatron's iteration i uses num_steps = i, so update `step` is its
 * iteration step from the warm-up's end on and iteration step + 1 during it
 * (Megatron's iteration 0 runs at init_lr). */
double lt_lr_at(const LtConfig *cfg, long step);
/* The same schedule counted in samples, as Megatron's sample-based training
 * steps its scheduler by each update's samples (train.rampup_batch_size):
 * the update of a `batch`-sample step after `consumed` samples, with
 * warmup_steps, decay_steps and lr_wsd_decay_steps times
 * train.global_batch_size as the sample counts (Megatron's conversion of
 * iterations). The warm-up reaches lr * min(consumed + batch, W) / W; after
 * it, num_steps = consumed. With a constant batch G this is lt_lr_at of
 * step consumed / G (up to rounding). */
double lt_lr_at_samples(const LtConfig *cfg, uint64_t consumed, long batch);

/* Clip coefficient min(1, clip/(norm + 1e-6)); 1 when clip == 0. */
double lt_clip_coef(double clip, double norm);

#ifdef __cplusplus
}
#endif

#endif
