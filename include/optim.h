/* optim.h - AdamW over the flat parameter buffers, the learning-rate
 * schedule and global-norm gradient clipping.
 *
 * The optimizer owns fp32 master weights and both Adam moments (device
 * memory, table order) and writes the compute-dtype parameters in the same
 * pass. Weight decay applies only to parameters the table marks (2-D). */
#ifndef LT_OPTIM_H
#define LT_OPTIM_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    LtBackend *be;
    const LtParamTable *table;
    float *master, *m, *v; /* device, table->total each */
    long step;             /* updates applied so far */
    double beta1, beta2, eps, weight_decay;
    size_t bytes;          /* device bytes held (master + moments) */
} LtOptimizer;

/* Master weights start as a copy of host_init (fp32, table order). */
LtOptimizer *lt_optim_create(LtBackend *be, const LtParamTable *t, const LtConfig *cfg,
                             const float *host_init);
void lt_optim_destroy(LtOptimizer *o);

/* Learning rate used by update number `step` (0-based): linear warmup
 * lr*(step+1)/warmup over the first warmup_steps updates, then cosine from lr
 * to min_lr over updates warmup..decay_steps, then min_lr. */
double lt_lr_at(const LtConfig *cfg, long step);

/* Global L2 norm of the fp32 gradient buffer. */
double lt_grad_norm(LtBackend *be, const float *grads, size_t n);

/* Clip coefficient min(1, clip/(norm + 1e-6)); 1 when clip == 0. */
double lt_clip_coef(double clip, double norm);

/* One AdamW update with learning rate lr; gradients are multiplied by
 * grad_scale (the clip coefficient) first. Writes params (compute dtype). */
void lt_optim_step(LtOptimizer *o, void *params, const float *grads, double lr,
                   double grad_scale);

#ifdef __cplusplus
}
#endif

#endif
