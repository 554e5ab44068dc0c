/* engine.h - internal: one rank's running engine as the subcommands share it
 * (backend, groups, model, optimizer, gradient finalisation, data files):
 * set-up from a validated config (layout checks first, as they are
 * collective; groups; the model and its parameters, fresh or resumed), the
 * start-up summary, checkpoint saves (synchronous or in the background) and
 * teardown. src/training/engine.c and src/checkpoint/ckpt_save.c; used by
 * src/training/trainer.c (train), src/training/evaluate.c (eval) and
 * src/training/sample.c (sample, logits). Not a public header. */
#ifndef LT_ENGINE_H
#define LT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "attn_select.h"
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "data.h"
#include "dist.h"
#include "grads.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "pipeline.h"
#include "plan.h"
#include "topology.h"

typedef struct {
    LtConfig *cfg;
    const LtWorld *world;
    LtBackend *be;
    LtModel *model;
    LtOptimizer *opt;
    LtOptimizer *eopt;  /* expert parallelism: the experts' optimizer (over edp, ZeRO at most
                         * 1), attached to opt (optim.h); NULL without the model's etable */
    LtGrads *grads;     /* gradient finalisation (training only) */
    LtTokenFile *train, *valid; /* the first dataset of train_blend, of valid_blend */
    LtBlend *train_blend;       /* data.train_path's datasets (one for a single file) */
    LtBlend *valid_blend;       /* the validation datasets: data.valid_path's, or data.split's
                                 * part of each dataset with its token range; NULL = none */
    LtBlendOrder *valid_order;  /* the order evaluations take valid_blend's samples in */
    char resume_dir[LT_PATH_MAX + 64]; /* the step directory resumed from ("" for a fresh run) */
    uint64_t split_tok0[LT_BLEND_MAX][3]; /* data.split: data.train_path's dataset d's train, */
    uint64_t split_ntok[LT_BLEND_MAX][3]; /* validation and test token ranges (from
                                           * lt_eval_open_valid; ntok 0 = no documents) */
    long eval_samples;  /* validation sequences per evaluation (0: no validation data) */
    LtLoader *loader;
    LtTopology topo;
    LtCoords coords;
    LtComm *dp;         /* data-parallel group (device buffers with the CUDA backend) */
    LtComm *tp;         /* tensor-parallel group (device buffers with the CUDA backend) */
    LtComm *pp;         /* pipeline group: stage-to-stage sends (MPI; staged with CUDA) */
    LtComm *ep;         /* expert-parallel group (parallel.expert_model_parallel_size > 1;
                         * NULL otherwise), folded into the stage's TP x DP ranks */
    LtComm *edp;        /* with it or etp, the expert-data-parallel group (topology.h) */
    LtComm *etp;        /* expert-tensor-parallel group (parallel.expert_tensor_parallel_size
                         * > 1; NULL otherwise) */
    LtComm *emb;        /* embedding group: first and last stage (pp > 1 with a tied LM
                         * head; else NULL) */
    LtPipeline *pipe;   /* walks this rank's schedule */
    int micro_batches;  /* per step and data-parallel rank: G / (mbs * dp) */
    LtCommLib comm_lib; /* library of dp/tp when they take device buffers */
    int comm_device;    /* 1: dp/tp take the backend's device buffers (CUDA backend) */
    const char *comm_why; /* how comm.backend was resolved (CUDA backend) */
    LtAttnChoice attn;    /* how model.attention was resolved */
    LtParamTable global; /* the tp = 1 table: checkpoints hold global tensors */
    long start_step;
    int resumed;          /* 1: the parameters came from checkpoint.load */
    double peak_tflops;
    const char *peak_source;
    LtPlanStep plan;      /* the planner's step prediction for this layout (training) */
    char plan_device[32]; /* its device row; "" = none (docs/observability.md) */
} LtRun;

/* Set up r for cfg on this rank: topology and layout checks, backend,
 * attention choice, groups, model (with this rank's parameters: initial, or
 * from checkpoint.load) and, when need_optimizer, the optimizer (its state
 * resumed too) and gradient finalisation. Exits on bad input (code 2). */
void lt_run_setup(LtRun *r, LtConfig *cfg, const LtWorld *w, int need_optimizer);
void lt_run_teardown(LtRun *r);
/* The planner's step for this run's layout again (after r->plan, on the same
 * device row) at an expert load moe_load (most loaded expert's rows over the
 * mean; lt_plan_step): 0, or -1 where the run has no plan. */
int lt_run_plan_at_load(const LtRun *r, double moe_load, LtPlanStep *out);
/* The start-up summary (rank 0): backend, layout, model, memory by category
 * next to the planner's prediction, peak FLOP/s, pipeline stages. */
void lt_run_print_summary(const LtRun *r);
/* A token file opened for config key `key`; exits naming the key on error. */
LtTokenFile *lt_run_open_tokens(const char *key, const char *path, int vocab);
/* Device bytes the engine holds (model and optimizer). */
size_t lt_run_engine_bytes(const LtRun *r);
static inline double lt_mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* Save the training state after `step` (collective over DP, TP and PP): every
 * rank writes its own state file, in this thread or, with checkpoint.async, a
 * background one (at most one save in flight: this finishes the previous one
 * first); the first rank then completes the checkpoint. */
void lt_run_save_checkpoint(LtRun *r, long step);
/* At a step boundary (collective, every rank): completes the save in flight
 * once every rank's write is done, without waiting for it otherwise. */
void lt_run_ckpt_poll(LtRun *r);
/* Wait for the save in flight, if any, and complete it (collective; at a
 * stop, at the end of training); returns the seconds waited. */
double lt_run_ckpt_wait(LtRun *r);

#endif
