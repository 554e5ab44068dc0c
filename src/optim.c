/* optim.c - AdamW, LR schedule, gradient norm. See optim.h. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

LtOptimizer *lt_optim_create(LtBackend *be, const LtParamTable *t, const LtConfig *cfg,
                             const float *host_init) {
    LtOptimizer *o = lt_calloc(sizeof *o);
    size_t bytes = t->total * sizeof(float);
    o->be = be;
    o->table = t;
    o->master = be->ops->alloc(be, bytes);
    o->m = be->ops->alloc(be, bytes);
    o->v = be->ops->alloc(be, bytes);
    o->bytes = 3 * bytes;
    be->ops->upload(be, o->master, host_init, bytes);
    o->beta1 = cfg->optimizer.beta1;
    o->beta2 = cfg->optimizer.beta2;
    o->eps = cfg->optimizer.eps;
    o->weight_decay = cfg->optimizer.weight_decay;
    return o;
}

void lt_optim_destroy(LtOptimizer *o) {
    if (!o) return;
    o->be->ops->free(o->be, o->master);
    o->be->ops->free(o->be, o->m);
    o->be->ops->free(o->be, o->v);
    free(o);
}

double lt_lr_at(const LtConfig *cfg, long step) {
    const double lr = cfg->optimizer.lr, min_lr = cfg->optimizer.min_lr;
    const long warm = cfg->optimizer.warmup_steps, decay = cfg->optimizer.decay_steps;
    if (warm > 0 && step < warm) return lr * (double)(step + 1) / (double)warm;
    if (step >= decay) return min_lr;
    double ratio = (double)(step - warm) / (double)(decay - warm);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * ratio));
}

double lt_grad_norm(LtBackend *be, const float *grads, size_t n) {
    return sqrt(be->ops->sumsq(be, grads, n));
}

double lt_clip_coef(double clip, double norm) {
    if (clip <= 0.0) return 1.0;
    double c = clip / (norm + 1e-6);
    return c < 1.0 ? c : 1.0;
}

void lt_optim_step(LtOptimizer *o, void *params, const float *grads, double lr,
                   double grad_scale) {
    LtBackend *be = o->be;
    const LtParamTable *t = o->table;
    o->step++;
    LtAdamArgs a = {
        .lr = (float)lr,
        .beta1 = (float)o->beta1,
        .beta2 = (float)o->beta2,
        .eps = (float)o->eps,
        .bc1 = (float)(1.0 - pow(o->beta1, (double)o->step)),
        .bc2 = (float)(1.0 - pow(o->beta2, (double)o->step)),
        .grad_scale = (float)grad_scale,
    };
    /* one call per maximal run of parameters with the same decay flag */
    for (int i = 0; i < t->n;) {
        int j = i;
        while (j + 1 < t->n && t->p[j + 1].decay == t->p[i].decay) j++;
        size_t off = t->p[i].offset, n = t->p[j].offset + t->p[j].numel - off;
        a.weight_decay = t->p[i].decay ? (float)o->weight_decay : 0.0f;
        be->ops->adamw(be, (char *)params + lt_act_bytes(be, off), o->master + off, grads + off,
                       o->m + off, o->v + off, n, &a);
        i = j + 1;
    }
}
