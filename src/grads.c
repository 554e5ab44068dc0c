/* grads.c - gradient finalisation (see grads.h). */
#include "grads.h"

#include <stdlib.h>

#include "common.h"

struct LtGrads {
    LtModel *model;
    LtOptimizer *opt;
    const LtComm *emb; /* NULL: no tied embedding across stages */
};

/* ZeRO-2: a finished parameter group [first, last] of the bucket goes to the
 * optimizer's shards (after its sequence-parallel sums). */
static void on_group_ready(void *ctx, int first, int last) {
    LtGrads *g = ctx;
    const LtParamTable *t = &g->model->table;
    const size_t begin = t->p[first].offset, len = t->p[last].offset + t->p[last].numel - begin;
    lt_model_sp_reduce_grads(g->model, first, last);
    lt_optim_reduce_bucket(g->opt, g->model->grads, begin, len);
}

LtGrads *lt_grads_create(LtModel *m, LtOptimizer *opt, const LtComm *emb) {
    LtGrads *g = lt_calloc(sizeof *g);
    g->model = m;
    g->opt = opt;
    g->emb = emb && lt_comm_member(emb) && m->table.idx_wte >= 0 ? emb : NULL;
    if (lt_model_grad_buckets(m)) {
        lt_optim_set_bucket_size(opt, lt_model_bucket_len(m));
        lt_model_set_grad_hook(m, on_group_ready, g);
    }
    return g;
}

void lt_grads_destroy(LtGrads *g) {
    if (!g) return;
    if (lt_model_grad_buckets(g->model)) lt_model_set_grad_hook(g->model, NULL, NULL);
    free(g);
}

/* The tied embedding: the first stage's input-embedding gradient and the last
 * stage's LM-head gradient summed over the embedding group (before the
 * data-parallel reduction; the sums commute). With buckets the embedding
 * group kept a buffer of its own through the step: hand it over now. */
static void reduce_tied_embedding(LtGrads *g) {
    if (!g->emb) return;
    LtModel *m = g->model;
    const LtParam *wte = &m->table.p[m->table.idx_wte];
    lt_comm_all_reduce(g->emb, lt_model_grad(m, m->table.idx_wte), wte->numel, LT_COMM_F32,
                       LT_COMM_SUM);
    size_t len;
    float *own = lt_model_emb_grads(m, &len);
    if (own) lt_optim_reduce_bucket(g->opt, own, wte->offset, len);
}

void lt_grads_finalize(LtGrads *g) {
    LtModel *m = g->model;
    if (!lt_model_grad_buckets(m)) /* (with buckets this happened group by group) */
        lt_model_sp_reduce_grads(m, 0, m->table.n - 1);
    reduce_tied_embedding(g);
    lt_optim_reduce_grads(g->opt, m->grads);
}

/* Both copies applied the same summed gradient, but their data-parallel
 * reductions ran over buffers of different lengths, and a library may sum an
 * element in an order that depends on its position; this keeps the copies
 * bit-identical whatever the library does. */
void lt_grads_sync_tied(LtGrads *g) {
    if (!g->emb) return;
    LtModel *m = g->model;
    const LtParam *p = &m->table.p[m->table.idx_wte];
    lt_comm_broadcast(g->emb, (char *)m->params + lt_act_bytes(m->be, p->offset), p->numel,
                      lt_comm_act_type(m->be), 0);
}
