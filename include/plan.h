/* plan.h - the parallelism planner: what fits and what is fast, before any
 * GPU hour is spent (lattice plan).
 *
 * Memory per rank is predicted by category from the model's dimensions and
 * the layout, with the formulas of the buffers the engine allocates (the
 * activation analysis of Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", applied to lattice's own
 * per-layer tensors with flash attention - no s^2 term - and its
 * recomputation modes), and the peak number of micro batches in flight per
 * stage from the pipeline schedule. Step time is predicted from the model's
 * GEMM FLOPs at a calibrated GEMM efficiency, the bytes of its memory-bound
 * ops at calibrated bandwidths, the attention core at its implementation's
 * calibrated rate (docs/planner.md), the schedule simulator's makespan
 * (so the bubble is the schedule's own), and a latency-bandwidth model of the
 * tensor-, pipeline- and data-parallel traffic and of the MoE layers'
 * all-to-alls (NVLink inside a node, the network across nodes), less what
 * the config's overlap switches hide.
 * The devices' constants come from plan_device.h. */
#ifndef LT_PLAN_H
#define LT_PLAN_H

#include <stddef.h>

#include "config.h"
#include "plan_device.h" /* LtPlanDevice, the device table and calibration */

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one rank holds, in the engine's categories (the summary's "memory
 * bytes per rank" line): grads include the optimizer's gradient shards;
 * comm: the communication buffers (the pipeline's message pool, ZeRO-2's
 * bucket receive buffer and staging ring). */
typedef struct {
    size_t params, grads, optimizer, activations, workspace, comm;
    size_t expert_elems; /* expert parallelism: of the parameters, the elements of this rank's
                          * experts (model.h's etable, padded): their gradients go over the
                          * expert-data-parallel group, at ZeRO stage min(zero, 1). Counted
                          * in the bytes above, not again in the total */
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

/* The predicted step of a layout, by part (seconds; lattice plan --layout
 * prints it): compute, the pipeline bubble, the communication the overlap
 * switches leave exposed and what they hide, the optimizer. */
typedef struct {
    double step, compute, bubble, tp_comm, pp_comm, dp_comm, optim;
    double ep_comm; /* the MoE layers' all-to-alls (dispatch, combine; nothing hides them) */
    double hidden_tp, hidden_pp, hidden_dp;
    /* of tp_comm (ep_comm without TP): what the ranks wait for each other at
     * the blocking collectives, the device's sync_skew of the compute */
    double sync_wait;
    double tokens_per_s, mfu;
    /* compute by part: GEMMs, memory-bound work (with the step's gradient
     * zeroing), the attention core, the loss head; memory-bound bytes and
     * attention FLOPs per step of the busiest stage's rank */
    double gemm, membound, attention, loss_head, mem_bytes, attn_flops;
    double experts;    /* of gemm: the MoE layers' experts' GEMMs and routers */
    double gemm_flops; /* GEMM FLOPs per step of that rank (recomputation's included) */
    double a2a_bytes;  /* bytes the all-to-alls send off that rank per step */
    const char *attention_impl; /* "cudnn", "lattice" or "cpu" */
    char overlap[64]; /* the switches in effect, as words ("none" without) */
} LtPlanStep;

/* The step time of the layout in cfg (validated for `world` ranks,
 * gpus_per_node of them per node) on device dev, with the config's overlap
 * switches; act_bytes and mpi_p2p as for lt_plan_memory; moe_load: an MoE
 * model's expected expert load, the most loaded expert's rows over the mean
 * (the run log's expert load max/mean; 1: balanced), which under expert
 * parallelism paces every MoE layer at its rank. 0, or -1 with err. */
int lt_plan_step(const LtConfig *cfg, int world, int gpus_per_node, const LtPlanDevice *dev,
                 size_t act_bytes, int mpi_p2p, double moe_load, LtPlanStep *out, char *err,
                 size_t errlen);

/* lattice plan CONFIG [--gpus N] [--gpus-per-node G] [--gpu NAME] [--gpu-mem-gib M]
 *              [--calibration FILE] [--top K] [--show TPxPP[xVPP]] [--layout]
 *              [--overlap config|all|none] [section.key=value ...] (plan_cli.c);
 * with --calibrate, lt_cmd_plan_calibrate (plan_device.h). */
int lt_cmd_plan(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
