/* plan_internal.h - shared between src/planner/plan.c (the model: memory and
 * step time of one layout) and plan_cli.c (lattice plan: the enumeration and
 * the table); not a public API. */
#ifndef LT_PLAN_INTERNAL_H
#define LT_PLAN_INTERNAL_H

#include <stddef.h>

#include "config.h"
#include "plan.h"

/* One layout and what the planner predicts for it: a row of the table. */
typedef struct {
    int tp, pp, vpp, dp, mbs, rc, zero, sp;
    LtLayerSplit split; /* layers per chunk (layer_split.h) */
    LtPlanMemory mem; /* the largest stage's */
    double mem_gib;
    int fits;
    /* seconds per step: compute, the bubble, communication not hidden (tp_comm, pp_comm,
     * dp_comm) and what the overlap switches hide of it (hidden_*), the optimizer */
    double compute, tp_comm, pp_comm, dp_comm, optim, bubble, step, mfu, tokens_per_s;
    double hidden_tp, hidden_pp, hidden_dp;
    /* compute by part (seconds per step, the busiest stage's): GEMMs, memory-bound
     * work, the attention core, the loss head (its GEMMs and cross-entropy); and
     * what they move and compute: memory-bound bytes, attention FLOPs */
    double gemm, membound, attention, loss_head, mem_bytes, attn_flops;
    int cudnn; /* the attention core at cuDNN's rate */
    int ov_grad, ov_param, ov_p2p, ov_tp; /* the switches in effect (after the layout's limits) */
    int simulated;
} Cand;

/* --overlap: the config's switches, all of them, or none */
typedef enum { OV_CONFIG, OV_ALL, OV_NONE } OverlapMode;

/* The overlap switches of mode in c, where its layout allows them. */
void lt_plan_apply_overlap(LtConfig *c, OverlapMode mode);

/* The config of layout k (from base) into c, its overlap switches (mode) where
 * the layout allows them, recorded in k; mpi: the stage-to-stage messages go
 * over MPI. 0, or -1 when c does not validate for `world` ranks. */
int lt_plan_layout_config(const LtConfig *base, Cand *k, LtConfig *c, int world, OverlapMode mode,
                          int mpi);

/* k->mem: the memory of k's largest stage (config c, a bytes per activation). */
void lt_plan_memory_max(const LtConfig *c, Cand *k, size_t a, int mpi);

/* k's predicted step time and its parts, on device g with gpn GPUs per node;
 * sim: the pipeline's makespan from the schedule simulator (else a formula). */
void lt_plan_step_time(const LtConfig *c, const LtPlanDevice *g, int gpn, Cand *k, int sim);

#endif
