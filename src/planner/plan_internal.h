/* plan_internal.h - shared between src/planner/plan.c (the model: memory and
 * step time of one layout) and plan_cli.c (lattice plan: the enumeration and
 * the table); not a public API. */
#ifndef LT_PLAN_INTERNAL_H
#define LT_PLAN_INTERNAL_H

#include <stddef.h>

#include "config.h"
#include "model/moe.h"
#include "plan.h"

/* One layout and what the planner predicts for it: a row of the table. */
typedef struct {
    int tp, pp, vpp, dp, mbs, rc, zero, sp;
    int ep; /* expert parallelism (parallel.expert_model_parallel_size; 1 for dense models) */
    int etp; /* expert tensor parallelism (parallel.expert_tensor_parallel_size, as the config
              * gives it: not enumerated; 0 read as 1) */
    LtLayerSplit split; /* layers per chunk (layer_split.h) */
    double moe_load; /* the most loaded expert's rows over the mean (the run log's expert
                      * load max/mean; 0 or 1: balanced) */
    LtPlanMemory mem; /* the largest stage's */
    double mem_gib;
    int fits;
    /* seconds per step: compute, the bubble, communication not hidden (tp_comm, pp_comm,
     * dp_comm) and what the overlap switches hide of it (hidden_*), the optimizer */
    double compute, tp_comm, pp_comm, dp_comm, ep_comm, optim, bubble, step, mfu, tokens_per_s;
    double hidden_tp, hidden_pp, hidden_dp;
    double sync_wait; /* of tp_comm or ep_comm: the ranks' wait for each other (sync_skew) */
    /* compute by part (seconds per step, the busiest stage's): GEMMs, memory-bound
     * work, the attention core, the loss head (its GEMMs and cross-entropy); and
     * what they move and compute: memory-bound bytes, attention FLOPs */
    double gemm, membound, attention, loss_head, mem_bytes, attn_flops;
    double experts; /* of gemm: the MoE layers' experts and routers */
    double gemm_flops, a2a_bytes; /* GEMM FLOPs, bytes the all-to-alls send off the rank */
    int cudnn; /* the attention core at cuDNN's rate */
    int ov_grad, ov_param, ov_p2p, ov_tp; /* the switches in effect (after the layout's limits) */
    int eov_grad, eov_param; /* the same for the experts' own data-parallel group */
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

/* GEMM efficiency at n tokens: half of gemm_eff at gemm_half_tokens. */
double lt_plan_gemm_eff_at(const LtPlanDevice *g, double n);

/* ---- mixture of experts (plan_moe.c) ---- */

/* The MoE shape of layout c's tensor rank 0 (sp: sequence parallelism), as
 * lt_model_create takes it. */
LtMoeShape lt_plan_moe_shape(const LtConfig *c, const LtModelDims *d, int tp, int sp);
/* Bytes lt_moe_acts_alloc (one layer) and lt_moe_work_alloc allocate for
 * shape s with a bytes per activation. */
size_t lt_plan_moe_acts_bytes(const LtMoeShape *s, size_t a);
size_t lt_plan_moe_work_bytes(const LtMoeShape *s, size_t a);

/* A layer's GEMM FLOPs per token as the model counts them for MFU
 * (lt_model_flops_per_sample; an MoE layer's with its router), forward
 * (*fwd) and full recomputation's (*redo), dense (moe 0) or MoE. */
void lt_plan_layer_flops(const LtModelDims *d, int moe, double *fwd, double *redo);

/* One MoE layer of one micro batch on one rank (seconds unless said). */
typedef struct {
    double gemm, redo_gemm;  /* the TP-split GEMMs (attention projections, shared expert),
                              * forward and recomputed; each backward half as the forward */
    double experts;          /* the routed experts' and the router's GEMMs, forward (each
                              * backward half alike); recomputed whole */
    double flops, redo_flops; /* the GEMM FLOPs of a forward and of its recomputation */
    double bytes_f, bytes_b; /* memory-bound bytes beyond the norms, rotary and attention */
    double a2a, a2a_bytes;   /* one all-to-all (dispatch or combine) and what it sends off */
    int shared;              /* a shared expert (its SP collectives as a dense MLP's) */
} LtPlanMoe;

/* The most loaded rank's rows over the mean for an expert load (most
 * loaded expert over the mean) under EP ep (plan_moe.c). */
double lt_plan_moe_rank_load(double load, int experts, int topk, int ep);

/* The MoE layer of layout k (config c) on device g, gpn ranks per node, at
 * peak FLOP/s with act bytes per activation (k->moe_load: the experts'
 * expected imbalance). */
void lt_plan_moe_layer(const LtConfig *c, const LtPlanDevice *g, int gpn, const Cand *k,
                       double peak, double act, LtPlanMoe *out);

#endif
