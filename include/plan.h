/* plan.h - the parallelism planner: what fits and what is fast, before any
 * GPU hour is spent (lattice plan).
 *
 * Memory per rank is predicted by category from the model's dimensions and
 * the layout, with the formulas of the buffers the engine allocates (the
 * activation analysis of Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", applied to lattice's own
 * per-layer tensors with flash attention - no s^2 term - and its
 * recomputation modes), and the peak number of micro batches in flight per
 * stage from the pipeline schedule. Step time is predicted from the model
 * FLOPs at a calibrated GEMM efficiency, the schedule simulator's makespan
 * (so the bubble is the schedule's own), and a latency-bandwidth model of the
 * tensor-, pipeline- and data-parallel traffic (NVLink inside a node, the
 * network across nodes; none of it hidden yet: lattice does not overlap
 * communication with compute so far). */
#ifndef LT_PLAN_H
#define LT_PLAN_H

#include <stddef.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one rank holds, in the engine's categories (the summary's "memory
 * bytes per rank" line): grads include the optimizer's gradient shards. */
typedef struct {
    size_t params, grads, optimizer, activations, workspace;
} LtPlanMemory;

static inline size_t lt_plan_total(const LtPlanMemory *m) {
    return m->params + m->grads + m->optimizer + m->activations + m->workspace;
}

/* Training memory of pipeline stage `stage` (tensor rank 0, data rank 0) of
 * the layout in cfg on `world` ranks (cfg validated for it) with activations
 * of act_bytes per element. 0, or -1 with the reason in err. */
int lt_plan_memory(const LtConfig *cfg, int world, int stage, size_t act_bytes, LtPlanMemory *out,
                   char *err, size_t errlen);

/* lattice plan CONFIG [--gpus N] [--gpus-per-node G] [--gpu NAME] [--gpu-mem-gib M]
 *              [--top K] [--layout] [section.key=value ...] */
int lt_cmd_plan(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
